# mk/python.mk: the Python package `wspool` (issue 5).
#
#   make python-install  creates ./.venv (pinned maturin, pytest, pytest-timeout, mypy)
#                        and installs ./bindings/python into it (maturin as the PEP 517
#                        backend, release build in the shared target/ directory)
#   make test-python     the pytest suite (tests/python), mypy.stubtest on the
#                        extension's .pyi, and mypy --strict on the package
#   make demo-python     a short tour: submit, map, nested waits, blocking(), stats;
#                        runs from target/python-dev (cargo build + the package's
#                        sources), so a first `make demo` installs no tools
#   make bench-python    P1-P3 against ThreadPoolExecutor, a markdown table
#
# Everything runs from the venv; nothing is installed outside ./.venv. A
# Debian Python without the venv module gets python3-venv through apt-get
# (only as root, only when `python3 -m venv` fails).

PY_VENV := $(VENV)
PY_BIN := $(abspath $(PY_VENV))/bin
PY := $(PY_BIN)/python
PY_MATURIN_VERSION := 1.16.0
PY_PYTEST_VERSION := 9.2.0
PY_PYTEST_TIMEOUT_VERSION := 2.4.0
PY_MYPY_VERSION := 2.4.1
PY_TOOLS := maturin==$(PY_MATURIN_VERSION) pytest==$(PY_PYTEST_VERSION) \
	pytest-timeout==$(PY_PYTEST_TIMEOUT_VERSION) mypy==$(PY_MYPY_VERSION)
PY_TOOLS_STAMP := $(PY_VENV)/.wspool-python-tools-$(PY_MATURIN_VERSION)-$(PY_PYTEST_VERSION)-$(PY_PYTEST_TIMEOUT_VERSION)-$(PY_MYPY_VERSION)
# maturin is found on PATH by its PEP 517 hooks.
PY_ENV := PATH="$(PY_BIN):$$PATH" CARGO_TARGET_DIR="$(abspath target)"

TEST_TARGETS += test-python
DEMO_TARGETS += demo-python
BENCH_TARGETS += bench-python

.PHONY: python-venv python-install python-dev test-python demo-python bench-python

python-venv: $(PY_TOOLS_STAMP)

$(PY_TOOLS_STAMP):
	@if ! [ -x "$(PY)" ]; then \
	  if ! $(PYTHON) -m venv $(PY_VENV); then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	      echo "python-venv: installing python3-venv with apt-get"; \
	      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; \
	      rm -rf $(PY_VENV); $(PYTHON) -m venv $(PY_VENV); \
	    else \
	      echo "python-venv: '$(PYTHON) -m venv' failed; install python3-venv" >&2; exit 1; \
	    fi; \
	  fi; \
	fi
	$(PY) -m pip install -q --disable-pip-version-check $(PY_TOOLS)
	@touch $@

# pip builds the wheel through maturin in place (no build isolation: the
# pinned maturin from the venv), reusing the release artefacts in target/.
python-install: $(PY_TOOLS_STAMP)
	$(PY_ENV) $(PY) -m pip install -q --disable-pip-version-check --no-build-isolation \
	  --force-reinstall --no-deps ./bindings/python

test-python: python-install
	$(PY_ENV) $(PY) -m pytest -p no:cacheprovider tests/python
	cd tests/python && $(PY_ENV) $(PY) -m mypy.stubtest wspool._wspool
	$(PY_ENV) $(PY) -m mypy --strict --no-incremental bindings/python/python/wspool bench/python/bench.py

# The extension built by cargo (the features maturin uses) beside the
# package's Python sources: importable without pip, maturin or a venv.
PY_DEV := target/python-dev
python-dev:
	$(CARGO) build --release -p wspool-python --features extension-module
	rm -rf $(PY_DEV)/wspool && mkdir -p $(PY_DEV)
	cp -r bindings/python/python/wspool $(PY_DEV)/wspool
	cp target/release/lib_wspool.so $(PY_DEV)/wspool/_wspool.abi3.so

demo-python: python-dev
	@echo; echo "== Python (bindings/python/examples/demo.py; docs/python.md)"
	PYTHONPATH=$(PY_DEV) $(PYTHON) bindings/python/examples/demo.py

bench-python: python-install
	$(PY_ENV) $(PY) bench/python/bench.py

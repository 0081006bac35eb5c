# mk/python.mk: the Python package `wspool` (issue 5).
#
#   make python-install  creates ./.venv (pinned maturin, pytest, pytest-timeout, mypy)
#                        and installs ./bindings/python into it (maturin as the PEP 517
#                        backend, release build in the shared target/ directory)
#   make test-python     the pytest suite (tests/python), mypy.stubtest on the
#                        extension's .pyi, and mypy --strict on the package. It also
#                        installs (pinned) the real clients the suite runs: coverage,
#                        dask, dask.distributed and uvloop; and CPython's test_concurrent_futures when the
#                        interpreter lacks it (Debian's libpython3.X-testsuite, apt-get)
#   make demo-python     a short tour: submit, map, nested waits, blocking(), stats;
#                        runs from target/python-dev (cargo build + the package's
#                        sources), so a first `make demo` installs no tools
#   make bench-python    P1-P5 (P4: asyncio round trips, P5: idle CPU after a burst) against ThreadPoolExecutor,
#                        then bench/python/nested_waits.py (issue 25's cases beside TPE)
#   make wheel           target/wheels/: the abi3 wheel tagged manylinux2014 (glibc 2.17),
#                        built with maturin --zig (pinned ziglang from PyPI), checked
#                        with the pinned auditwheel, and the sdist
#   make test-wheel      the wheel installed into a fresh venv (no Rust on PATH), and
#                        the pytest suite run against it (part of `make test`)
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
# Real ThreadPoolExecutor clients the suite runs wspool under (issue 12),
# with every dependency pinned.
PY_CLIENTS := coverage==7.17.3 dask==2026.8.0 uvloop==0.23.0 click==8.5.1 cloudpickle==3.1.2 \
	fsspec==2026.9.0 importlib_metadata==10.2.0 partd==1.4.2 PyYAML==6.0.3 toolz==1.2.0 \
	lazy-importer==0.1.0 zipp==4.1.2 locket==1.0.0 \
	distributed==2026.8.0 Jinja2==3.1.6 MarkupSafe==3.0.4 msgpack==1.2.4 packaging==26.4 \
	psutil==7.2.2 sortedcontainers==2.4.0 tblib==3.2.2 tornado==6.6.1 zict==3.0.0
PY_CLIENTS_STAMP := $(PY_VENV)/.wspool-python-clients-$(shell echo '$(PY_CLIENTS)' | cksum | cut -d' ' -f1)
# maturin is found on PATH by its PEP 517 hooks.
PY_ENV := PATH="$(PY_BIN):$$PATH" CARGO_TARGET_DIR="$(abspath target)"

# The wheel: zig links against glibc 2.17's symbols, so the wheel installs on
# any manylinux2014 system (RHEL 7+, Ubuntu 14.04+, Debian 8+).
PY_ZIG_VERSION := 0.17.0
PY_AUDITWHEEL_VERSION := 6.8.2
PY_WHEEL_TOOLS_STAMP := $(PY_VENV)/.wspool-wheel-tools-$(PY_ZIG_VERSION)-$(PY_AUDITWHEEL_VERSION)
PY_WHEEL_TAG := manylinux_2_17_x86_64
PY_WHEEL_DIR := target/wheels
# Its own cargo target directory: zig as the linker would otherwise make the
# shared target/release artefacts rebuild back and forth.
PY_WHEEL_CARGO_DIR := target/wheel-build
PY_WHEEL_VENV := target/wheel-venv

# test-wheel (a release build of the extension through zig, then the whole
# suite again against it) is the release check, not part of make test: with
# it, make test would pass CI's 30 minutes on 2 cores.
TEST_TARGETS += test-python
DEMO_TARGETS += demo-python
BENCH_TARGETS += bench-python

.PHONY: python-venv python-install python-test-deps python-dev test-python demo-python bench-python wheel test-wheel

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

$(PY_CLIENTS_STAMP): $(PY_TOOLS_STAMP)
	@echo "test-python: installing pinned test clients into $(PY_VENV): $(PY_CLIENTS)"
	$(PY) -m pip install -q --disable-pip-version-check $(PY_CLIENTS)
	@touch $@

# CPython's own executor tests (tests/python/test_cpython_suite.py). Builds
# such as pyenv's ship them; Debian splits them into libpython3.X-testsuite.
python-test-deps: $(PY_CLIENTS_STAMP)
	@ver=$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	if ! $(PY) -c 'import test.test_concurrent_futures' 2>/dev/null \
	   && ! [ -f /usr/lib/python$$ver/test/test_concurrent_futures.py ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "test-python: installing libpython$$ver-testsuite with apt-get (CPython's test_concurrent_futures)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libpython$$ver-testsuite; \
	  else \
	    echo "test-python: CPython's test_concurrent_futures is missing; install libpython$$ver-testsuite" >&2; exit 1; \
	  fi; \
	fi

test-python: python-install python-test-deps
	$(PY_ENV) $(PY) -m pytest -p no:cacheprovider tests/python
	cd tests/python && $(PY_ENV) $(PY) -m mypy.stubtest wspool._wspool
	$(PY_ENV) $(PY) -m mypy --strict --no-incremental bindings/python/python/wspool bench/python/bench.py bench/python/nested_waits.py

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

bench-python: python-install python-test-deps
	$(PY_ENV) $(PY) bench/python/bench.py
	$(PY_ENV) $(PY) bench/python/nested_waits.py

$(PY_WHEEL_TOOLS_STAMP): $(PY_TOOLS_STAMP)
	@echo "wheel: installing pinned ziglang==$(PY_ZIG_VERSION) and auditwheel==$(PY_AUDITWHEEL_VERSION) into $(PY_VENV)"
	$(PY) -m pip install -q --disable-pip-version-check ziglang==$(PY_ZIG_VERSION) auditwheel==$(PY_AUDITWHEEL_VERSION)
	@touch $@

wheel: $(PY_WHEEL_TOOLS_STAMP)
	rm -rf $(PY_WHEEL_DIR) && mkdir -p $(PY_WHEEL_DIR)
	cd bindings/python && PATH="$(PY_BIN):$$PATH" CARGO_TARGET_DIR="$(abspath $(PY_WHEEL_CARGO_DIR))" \
	  $(PY_BIN)/maturin build --release --locked --zig --compatibility manylinux2014 --out "$(abspath $(PY_WHEEL_DIR))"
	cd bindings/python && PATH="$(PY_BIN):$$PATH" $(PY_BIN)/maturin sdist --out "$(abspath $(PY_WHEEL_DIR))"
	$(PY_BIN)/auditwheel show $(PY_WHEEL_DIR)/*.whl | tee $(PY_WHEEL_DIR)/auditwheel-show.txt
	@grep -q '^"$(PY_WHEEL_TAG)"\.$$' $(PY_WHEEL_DIR)/auditwheel-show.txt \
	  || { echo "wheel: auditwheel does not find the wheel consistent with $(PY_WHEEL_TAG)" >&2; exit 1; }
	@$(PY) -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); print("\n".join(z.namelist())); \
	  open(sys.argv[2], "wb").write(z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))))' \
	  $(PY_WHEEL_DIR)/*.whl $(PY_WHEEL_DIR)/METADATA.txt > $(PY_WHEEL_DIR)/wheel-files.txt
	@tar tzf $(PY_WHEEL_DIR)/*.tar.gz > $(PY_WHEEL_DIR)/sdist-files.txt
	@for f in LICENSE-MIT LICENSE-APACHE; do \
	  grep -q "dist-info/licenses/$$f" $(PY_WHEEL_DIR)/wheel-files.txt || { echo "wheel: $$f missing" >&2; exit 1; }; \
	  grep -q "^wspool-[^/]*/$$f$$" $(PY_WHEEL_DIR)/sdist-files.txt || { echo "sdist: $$f missing" >&2; exit 1; }; \
	done
	@grep -q '^Project-URL: ' $(PY_WHEEL_DIR)/METADATA.txt || { echo "wheel: no Project-URL in METADATA" >&2; exit 1; }
	@grep -q '^License-Expression: MIT OR Apache-2.0' $(PY_WHEEL_DIR)/METADATA.txt || { echo "wheel: no License-Expression" >&2; exit 1; }
	@ls -l $(PY_WHEEL_DIR)/*.whl $(PY_WHEEL_DIR)/*.tar.gz

# A fresh venv with no Rust on PATH (nor cargo's environment): pip must take
# the wheel as it is, never build. The test tools (pytest, dask, uvloop, ...)
# come from ./.venv through a .pth file placed after the venv's own
# site-packages, so nothing is fetched and the wheel's wspool is the one
# imported (checked before the suite runs).
test-wheel: wheel python-test-deps
	rm -rf $(PY_WHEEL_VENV)
	"$$($(PYTHON) -c 'import sys; print(sys.executable)')" -m venv $(PY_WHEEL_VENV)
	env -u CARGO_HOME -u RUSTUP_HOME -u CARGO_TARGET_DIR PATH="$(abspath $(PY_WHEEL_VENV))/bin:/usr/bin:/bin" \
	  bash -c '! command -v cargo && ! command -v rustc && \
	  $(PY_WHEEL_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-index --only-binary :all: $(PY_WHEEL_DIR)/*.whl'
	$(PY_WHEEL_VENV)/bin/python -c 'import site, sys; open(site.getsitepackages()[0] + "/zz-wspool-test-tools.pth", "w").write(sys.argv[1] + "\n")' \
	  "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
	cd tests/python && env -u CARGO_HOME -u RUSTUP_HOME PATH="$(abspath $(PY_WHEEL_VENV))/bin:/usr/bin:/bin" \
	  $(abspath $(PY_WHEEL_VENV))/bin/python -c 'import wspool, sys; p = wspool.__file__; print("test-wheel: wspool from", p); sys.exit(0 if "/wheel-venv/" in p else 1)'
	cd tests/python && env -u CARGO_HOME -u RUSTUP_HOME PATH="$(abspath $(PY_WHEEL_VENV))/bin:/usr/bin:/bin" \
	  $(abspath $(PY_WHEEL_VENV))/bin/python -m pytest -p no:cacheprovider -q .

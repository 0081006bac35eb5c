# mk/docs.mk: the documentation's code blocks (issue 13).
#
#   make test-docs   builds and runs every rust / c / cpp / python block of README.md,
#                    docs/ and examples-c/README.md (tools/check_snippets.py):
#                    Rust in a scratch cargo project on core/, C against
#                    include/ + target/release, Python with the ./.venv interpreter;
#                    first test-help: every target `make help` names exists, and
#                    test-links: every relative link and #anchor in the tracked
#                    Markdown resolves (tools/check_links.py, with its self-test);
#                    and docs/c-reference.md has an entry for every function,
#                    type and constant of include/libwspool.h
#                    (tools/check_c_reference.py, with its self-test); and no
#                    new measured figure outside docs/benchmarks.md without a
#                    link there or its command (tools/check_figures.py)

TEST_TARGETS += test-docs

.PHONY: test-docs test-help test-links test-c-reference test-figures

# cpp-deps: the C++ blocks of docs/cpp.md include Boost.Asio.
test-docs: test-help test-links test-c-reference test-figures c-build python-install python-test-deps cpp-deps
	$(PYTHON) tools/check_snippets.py --self-test --python $(PY)
	$(PYTHON) tools/check_snippets.py --python $(PY)

test-c-reference:
	$(PYTHON) tools/check_c_reference.py --self-test
	$(PYTHON) tools/check_c_reference.py

# A measured figure outside docs/benchmarks.md links there or names its
# command; tools/figures_baseline.txt lists the known debts (it only shrinks).
test-figures:
	$(PYTHON) tools/check_figures.py --self-test
	$(PYTHON) tools/check_figures.py

test-links:
	$(PYTHON) tools/check_links.py --self-test
	$(PYTHON) tools/check_links.py

# Every target `make help` names is defined (read from make's database,
# so nothing runs).
test-help:
	@defined=$$( { $(MAKE) -pqs --no-print-directory 2>/dev/null || true; } | grep -oE '^[a-z][a-z-]*:' | tr -d : | sort -u); \
	named=$$($(MAKE) -s --no-print-directory help | grep '^  make' | grep -oE '(make|\|) +[a-z][a-z-]*' | awk '{print $$2}' | sort -u); \
	missing=$$(comm -23 <(echo "$$named") <(echo "$$defined")); \
	if [ -n "$$missing" ]; then echo "make help names targets that do not exist: $$missing"; exit 1; fi; \
	echo "make help: all $$(wc -w <<< "$$named") targets it names exist"

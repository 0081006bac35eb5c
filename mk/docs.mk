# mk/docs.mk: the documentation's code blocks (issue 13).
#
#   make test-docs   builds and runs every rust / c / python block of README.md,
#                    docs/ and examples-c/README.md (tools/check_snippets.py):
#                    Rust in a scratch cargo project on core/, C against
#                    include/ + target/release, Python with the ./.venv interpreter

TEST_TARGETS += test-docs

.PHONY: test-docs

test-docs: c-build python-install
	$(PYTHON) tools/check_snippets.py --self-test --python $(PY)
	$(PYTHON) tools/check_snippets.py --python $(PY)

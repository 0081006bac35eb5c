# mk/cross.mk: the core crate keeps compiling where the starvation monitor
# has no kernel hint (issue 11): `cargo check` for a macOS and a Windows
# target. Their standard libraries are installed with rustup when missing;
# where that is impossible (no rustup, no network) the check says so and is
# skipped, so `make test` still runs everything else.
#
#   make test-cross

CROSS_TARGETS := x86_64-apple-darwin x86_64-pc-windows-gnu

TEST_TARGETS += test-cross

.PHONY: test-cross

test-cross:
	@for t in $(CROSS_TARGETS); do \
	  if ! rustup target list --installed 2>/dev/null | grep -qx "$$t"; then \
	    echo "test-cross: installing the $$t standard library (rustup target add $$t)"; \
	    rustup target add "$$t" || true; \
	  fi; \
	  if rustup target list --installed 2>/dev/null | grep -qx "$$t"; then \
	    echo "test-cross: cargo check -p wspool --all-targets --target $$t"; \
	    $(CARGO) check -q -p wspool --all-targets --target "$$t" || exit 1; \
	  else \
	    echo "test-cross: SKIPPED $$t: its standard library is not installed and rustup could not install it here"; \
	  fi; \
	done
	@echo "test-cross: done"

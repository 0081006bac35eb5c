# wspool: the two commands a new user needs are `make demo` and `make test`.
# Each layer adds its targets through mk/*.mk (TEST_TARGETS, DEMO_TARGETS,
# BENCH_TARGETS, EXAMPLE_TARGETS), so this file stays the index.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
PYTHON ?= python3
VENV ?= .venv
export CARGO_TERM_COLOR ?= never

TEST_TARGETS :=
DEMO_TARGETS :=
BENCH_TARGETS :=
EXAMPLE_TARGETS :=

include $(sort $(wildcard mk/*.mk))

.PHONY: all build test demo bench examples test-rust test-rust-debug test-loom demo-rust bench-rust clean

all: build

build:
	$(CARGO) build --release --workspace --exclude wspool-python

## Every test: Rust unit/integration tests, the loom models, then each layer's suite.
test: test-rust test-rust-debug test-loom $(TEST_TARGETS)
	@echo "make test: all suites passed"

test-rust:
	$(CARGO) test --release -p wspool

# The same tests in a debug build: overflow checks and debug assertions on.
test-rust-debug:
	$(CARGO) test -p wspool

# The loom models of the sleep/wake, waiter and compensation protocols; then
# the same models with the local-push fence removed, which must fail (a model
# that cannot catch the bug it exists for proves nothing).
test-loom:
	RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 $(CARGO) test --release -p wspool --test loom --target-dir target/loom
	@if RUSTFLAGS="--cfg loom --cfg wspool_mutant_no_push_fence" LOOM_MAX_PREEMPTIONS=3 \
	  $(CARGO) test --release -q -p wspool --test loom --target-dir target/loom-mutant -- local_push_races_park \
	  > target/loom-mutant.log 2>&1; then \
	  echo "test-loom: the models PASSED without the local-push fence: they no longer catch the lost wake-up"; exit 1; fi
	@grep -q "deadlock" target/loom-mutant.log || { cat target/loom-mutant.log; echo "test-loom: the mutant failed, but not with the expected deadlock"; exit 1; }
	@echo "test-loom: without the local-push fence the model deadlocks, as it must"

## Builds and runs the demos: the pool working, and its stats.
demo: demo-rust $(DEMO_TARGETS)

demo-rust:
	$(CARGO) run --release -p wspool --example demo

examples: $(EXAMPLE_TARGETS)

## Benchmarks: every suite prints a markdown table of medians and ratios.
bench: bench-rust $(BENCH_TARGETS)

bench-rust:
	$(CARGO) bench -p wspool-bench --bench compare

clean:
	$(CARGO) clean
	rm -rf $(VENV) build

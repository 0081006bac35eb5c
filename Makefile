# wspool: `make` builds the libraries, `make demo` shows the pool working,
# `make test` runs every suite, `make help` lists the rest. Each layer adds
# its targets through mk/*.mk (TEST_TARGETS, DEMO_TARGETS, BENCH_TARGETS,
# EXAMPLE_TARGETS), so this file stays the index.

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

# The fragments define file targets (cbindgen, test binaries) before `all`:
# without this a bare `make` would build the first of them.
.DEFAULT_GOAL := all

include $(sort $(wildcard mk/*.mk))

.PHONY: all build help test test-announce demo bench examples test-rust test-rust-debug test-loom loom-mutant test-miri demo-rust bench-rust bench-memory clean

all: build

## The Rust crate and the C library (target/release/libwspool.{so,a}).
build: c-build
	@echo "built: target/release/libwspool.so, target/release/libwspool.a (header: include/libwspool.h)"

help:
	@echo "wspool make targets (see docs/testing.md for what each suite checks):"
	@echo "  make               build the Rust crate and the C library (target/release/libwspool.{so,a})"
	@echo "  make demo          run the demos: Rust, C examples, reactor server, Python (about 30 s warm)"
	@echo "  make test          every suite: Rust, loom, C, Python, reactor, doc snippets (installs tools; says which)"
	@echo "  make bench         the benchmark suites (docs/benchmarks.md)"
	@echo "  make bench-callgrind  instructions per task of W1, W2, W4 (Rust) and the W1 flood (C and Rust), under callgrind"
	@echo "  make bench-memory  resident memory of a 2 M-spawn burst: before, during, after (idle pool)"
	@echo "  make bench-scaling  W1-W4 at 1-16 workers beside oneTBB and rayon (bench/c/scaling.sh: build here, run on a bigger machine)"
	@echo "  make bench-monitor  the starvation monitor on real threads beside Fixed: times, peaks, injections, its own cost"
	@echo "  make examples      build the C examples into examples-c/bin (C++ ones into examples-cpp/bin)"
	@echo "  make bench-cpp     the Beast server on wspool vs inline and std::thread handlers; C++ cost per task (docs/cpp.md)"
	@echo "  make bench-axum    the axum server on wspool vs spawn_blocking vs rayon under 2x CPU overload (docs/benchmarks.md)"
	@echo "  make install       install libwspool under PREFIX (default /usr/local; DESTDIR honoured)"
	@echo "  make python-install  create ./.venv and install the Python package into it"
	@echo "  make wheel         the abi3 manylinux2014 wheel and the sdist in target/wheels (make test-wheel: the suite against it)"
	@echo "  make c-header      regenerate include/libwspool.h with the pinned cbindgen"
	@echo "  make test-rust | test-rust-debug | test-loom | test-miri | test-c | test-cpp | test-axum | test-python | test-reactor | test-docs   one suite"
	@echo "  make demo-rust | demo-c | demo-reactor | demo-python                          one demo"
	@echo "  make clean         remove target/, build/ and .venv"

# What `make test` installs, said before it does: nothing outside the
# repository unless run as root, and then only Debian packages.
test-announce:
	@echo "make test: runs every suite (about 32 min on 2 cores from a fresh clone with crates fetched; most of it"
	@echo "  is building and running the optimised Rust tests, the loom models and the C and C++ sanitizer suites;"
	@echo "  Miri runs beside them). It installs what it needs:"
	@echo "  - crates through cargo, and the pinned cbindgen $(CBINDGEN_VERSION) into target/tools (header freshness check)"
	@echo "  - rustup components miri and rust-src on the nightly toolchain (make test-miri; skipped, saying why, if they cannot be installed)"
	@echo "  - rustup targets x86_64-apple-darwin and x86_64-pc-windows-gnu for cargo check (skipped if unavailable)"
	@echo "  - maturin, pytest, pytest-timeout, mypy and the real clients dask, uvloop, coverage (all pinned)"
	@echo "    into ./.venv, then the Python package; prometheus_client (pinned) into target/embed/venv"
	@echo "  - only when missing and only as root, Debian packages through apt-get: valgrind, pkg-config,"
	@echo "    cmake (C install test), python3-venv, libpython3.11-testsuite (CPython's executor tests),"
	@echo "    libuv1-dev, libevent-dev, curl, apache2-utils, wrk (HTTP examples and their clients), libboost-dev (C++);"
	@echo "    not root: a missing package stops its suite with the command to install it"

## Every test: Rust unit/integration tests, the loom models, Miri, then each layer's suite.
# Miri interprets on one thread for about ten minutes, so it runs beside the
# other suites (which must pass on a loaded machine anyway) rather than
# before them, in a session of its own (setsid: one process group to stop);
# its output goes to target/test-miri.log and is printed at the end. Each
# other suite runs in turn with its output also in target/test-logs/SUITE.log.
# The first failing suite stops the run (a failed Miri too, seen between
# suites): `make test` names it and its log, and stops Miri's whole process
# group, on any exit of this recipe (the trap: a failure, an interrupt, or
# success, when Miri has already ended), so nothing is left running. The
# recipe shell runs with -e: a failure is caught by `if`, never by reading
# $$? after the command (-e would have exited first, as it once did).
TEST_SERIAL := test-rust test-rust-debug test-loom $(TEST_TARGETS)
TEST_LOGS := target/test-logs
test: test-announce
	@mkdir -p $(TEST_LOGS); rm -f target/test-miri.rc; \
	setsid sh -c '$(MAKE) --no-print-directory test-miri > target/test-miri.log 2>&1; echo $$? > target/test-miri.rc' & miri=$$!; \
	trap 'kill -TERM -- -'$$miri' 2>/dev/null || true' EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	echo "make test: test-miri runs beside the other suites (log: target/test-miri.log)"; \
	for suite in $(TEST_SERIAL); do \
	  echo "make test: $$suite (log: $(TEST_LOGS)/$$suite.log)"; \
	  if ! $(MAKE) --no-print-directory $$suite 2>&1 | tee $(TEST_LOGS)/$$suite.log; then \
	    echo "make test: FAILED: suite $$suite; its log: $(TEST_LOGS)/$$suite.log"; \
	    echo "make test: the suites after it did not run; test-miri was stopped"; exit 1; fi; \
	  if [ -s target/test-miri.rc ] && [ "$$(cat target/test-miri.rc)" != 0 ]; then \
	    tail -n 80 target/test-miri.log; \
	    echo "make test: FAILED: suite test-miri; its log: target/test-miri.log"; \
	    echo "make test: the suites after $$suite did not run"; exit 1; fi; \
	done; \
	echo "make test: waiting for test-miri"; wait $$miri || true; \
	tail -n 8 target/test-miri.log; \
	if [ "$$(cat target/test-miri.rc 2>/dev/null)" != 0 ]; then tail -n 80 target/test-miri.log; \
	  echo "make test: FAILED: suite test-miri; its log: target/test-miri.log"; exit 1; fi; \
	echo "make test: all suites passed"

test-rust:
	$(CARGO) test --profile test-release -p wspool

# The same tests in a debug build: overflow checks and debug assertions on.
# Then the benchmark crate: its harness's tests, the peers of the C run
# once each (they check their own counts), and a check that `make bench`'s
# suite still builds.
test-rust-debug:
	$(CARGO) test -p wspool
	$(CARGO) test -p wspool-bench
	$(CARGO) run -q -p wspool-bench --example c_run_peer -- wspool > /dev/null
	$(CARGO) run -q -p wspool-bench --example c_run_peer -- rayon > /dev/null
	$(CARGO) check -q -p wspool-bench --benches

# The loom models of the sleep/wake, waiter and compensation protocols and of
# the deques; then mutants of the real code that the models must catch (a
# model that cannot catch the bug it exists for proves nothing): without the
# local-push fence, without the deque pop's fence, with push publishing
# through a Release store instead of a Release fence, with
# release_memory freeing buffers without checking for thieves, and with an
# awaited task's waker registration closing with a plain store (waker_slot.rs).
# Each mutant runs the same loom build as the models, with the mutant chosen
# at run time (WSPOOL_LOOM_MUTANT, read under cfg(loom) only: sync::mutant!
# in core/src/sync.rs); a build per mutant (--cfg) cost a rebuild of the
# crate and of every dependency for each, about five minutes on 2 cores.
LOOM_TEST := RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 $(CARGO) test --profile test-release -p wspool \
  --test loom --target-dir target/loom
test-loom:
	env -u WSPOOL_LOOM_MUTANT $(LOOM_TEST)
	@$(MAKE) -s loom-mutant MUTANT=wspool_mutant_no_push_fence MODEL=local_push_races_park \
	  EXPECT="deadlock" WHAT="no local-push fence" CATCHES="the lost wake-up"
	@$(MAKE) -s loom-mutant MUTANT=wspool_mutant_no_pop_fence MODEL=deque_pop_races_steal \
	  EXPECT="values lost or taken twice" WHAT="no fence in the deque's pop" CATCHES="a value taken twice"
	@$(MAKE) -s loom-mutant MUTANT=wspool_mutant_push_release_store MODEL=deque_push_pop_race_steal \
	  EXPECT="Causality violation" WHAT="push publishing with a Release store instead of a fence"
	@$(MAKE) -s loom-mutant MUTANT=wspool_mutant_no_stealing_check MODEL=deque_release_memory_races_steal \
	  EXPECT="Causality violation" WHAT="release_memory freeing without checking for thieves"
	@$(MAKE) -s loom-mutant MUTANT=wspool_mutant_waker_store_close MODEL=waker_register_races_complete \
	  EXPECT="lost wake-up" WHAT="an awaited task's waker registration closing with a store instead of its compare-exchange"

# One mutant of the real code: with WSPOOL_LOOM_MUTANT=$(MUTANT), the loom
# model $(MODEL) must fail, and with $(EXPECT) in its output.
CATCHES ?= that bug
loom-mutant:
	@if WSPOOL_LOOM_MUTANT=$(MUTANT) $(LOOM_TEST) -q -- $(MODEL) > target/loom-$(MUTANT).log 2>&1; then \
	  echo "test-loom: $(MODEL) PASSED with $(WHAT): it no longer catches $(CATCHES)"; exit 1; fi
	@grep -q "$(EXPECT)" target/loom-$(MUTANT).log || { cat target/loom-$(MUTANT).log; \
	  echo "test-loom: the $(MUTANT) mutant failed, but not with \"$(EXPECT)\""; exit 1; }
	@echo "test-loom: with $(WHAT), $(MODEL) reports \"$(EXPECT)\", as it must"

# The unit tests of every module whose unsafe code or atomics a data race,
# a use after free or a lost provenance would break, under Miri: the
# workers' deques, the global queue with its batch reservation (push_run),
# the completion queue's nodes, the group state and the job payloads
# (inline closures and boxed pointers), the awaited task's waker hand-off
# and its future (waker_slot::, task::future::), the task cell's
# hand-overs (task::), serial queues' turns (serial::) and the priority
# levels (priority::), once; the racing tests
# among them again with several seeds (each seed is another schedule of the
# same threads). The tests are
# Miri-sized under cfg(miri); tests Miri cannot judge are ignored there
# with the reason (the deques' wrap-around races, by design). Then the
# deque's push built with a Release store instead of its Release fence:
# Miri must report the data race on a slot (as the loom mutant must). One
# seed is one schedule, and the race needs a thief to look between a pop's
# store and its fence; the mutant build of the test runs 12 rounds per
# seed, which caught it on each of 16 seeds tried, and the run stops at the
# first seed of 0..16 that reports it. (loom's mutant, which enumerates the
# schedules, is the exhaustive check.)
# Every run is under -Zmiri-strict-provenance: a pointer kept as an integer
# and cast back (which Miri can only accept on trust) fails the run.
# Then a real pool (core/tests/miri_pool.rs: worker threads, sleep and
# wake, priorities, lanes, deadlines, cancel, completion queues, dump, a
# draining shutdown) with every seed of MIRI_POOL_SEEDS; what Miri cannot
# run (the thread CPU clock, gettid, sched_getcpu, nice, the stack pointer's
# asm!) takes the path of a platform without it under cfg(miri).
MIRI_MODULES := deque:: injector:: cq:: group:: deadline:: job:: waker_slot:: task:: serial:: priority::
# The tests whose threads race (names containing these), run with every seed
# of MIRI_SEEDS; the rest of MIRI_MODULES run once (seed 0).
MIRI_RACING := race concurrent whatever_order
MIRI_SEEDS ?= 0..4
MIRI_POOL_SEEDS ?= 0..3
test-miri:
	@if ! $(CARGO) +nightly miri --version >/dev/null 2>&1; then \
	  echo "test-miri: installing the nightly components miri and rust-src (rustup)"; \
	  rustup +nightly component add miri rust-src || true; fi
	@if ! $(CARGO) +nightly miri --version >/dev/null 2>&1; then \
	  echo "test-miri: SKIPPED: cargo +nightly miri is not available here and rustup could not install it"; \
	  exit 0; fi; \
	MIRIFLAGS="-Zmiri-strict-provenance" $(CARGO) +nightly miri test -p wspool --lib --target-dir target/miri \
	  -- $(MIRI_MODULES) || exit 1; \
	MIRIFLAGS="-Zmiri-strict-provenance -Zmiri-many-seeds=$(MIRI_SEEDS)" $(CARGO) +nightly miri test -p wspool --lib \
	  --target-dir target/miri -- $(MIRI_RACING) || exit 1; \
	MIRIFLAGS="-Zmiri-strict-provenance -Zmiri-many-seeds=$(MIRI_POOL_SEEDS)" $(CARGO) +nightly miri test -p wspool \
	  --test miri_pool --target-dir target/miri || exit 1; \
	echo "test-miri: a real pool passed under Miri with seeds $(MIRI_POOL_SEEDS)"; \
	if RUSTFLAGS="--cfg wspool_mutant_push_release_store" MIRIFLAGS="-Zmiri-many-seeds=0..16" \
	  $(CARGO) +nightly miri test -p wspool --lib --target-dir target/miri-mutant \
	  -- deque::tests::push_push_pop_races_two_thieves > target/miri-mutant.log 2>&1; then \
	  echo "test-miri: push_push_pop_races_two_thieves PASSED with push publishing through a Release store: it no longer catches that race"; exit 1; fi; \
	grep -q "Data race detected" target/miri-mutant.log || { tail -40 target/miri-mutant.log; \
	  echo "test-miri: the push mutant failed, but not with a data race"; exit 1; }; \
	echo "test-miri: with push publishing through a Release store, Miri reports the data race, as it must"

## Builds and runs the demos: the pool working, and its stats.
demo: demo-rust $(DEMO_TARGETS)
	@echo
	@echo "make demo: done. Next: 'make test' runs every suite; docs/ has the details."

demo-rust:
	$(CARGO) run --release -q -p wspool --example demo

examples: $(EXAMPLE_TARGETS)

## Benchmarks: every suite prints a markdown table of medians and ratios.
bench: bench-rust bench-memory $(BENCH_TARGETS)

bench-rust:
	$(CARGO) bench -p wspool-bench --bench compare

# What a burst of 2,000,000 local spawns costs in resident memory, and what
# the pool gives back once idle (docs/scheduling.md, "What a pool keeps").
bench-memory:
	$(CARGO) run --release -q -p wspool-bench --example burst_rss

clean:
	$(CARGO) clean
	rm -rf $(VENV) build

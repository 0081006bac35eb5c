# mk/c.mk: the C ABI library (issue 4).
#
#   make c-lib        target/release/libwspool.{so,a} (SONAME libwspool.so.0, plus the
#                     libwspool.so.0 link beside it); needs no cbindgen: the header is
#                     committed and test-c-header checks that it is fresh
#   make c-header     regenerates include/libwspool.h with the pinned cbindgen
#   make examples     builds examples-c/bin/{hello,fork_join,pipeline,stats_watch}
#   make test-c       header check, C suite plain / ASan+UBSan / TSan / valgrind,
#                     and an installed copy used through pkg-config and CMake
#   make demo-c       runs the four examples briefly
#   make bench-c      C API vs a mutex+condvar pool, OpenMP tasks, oneTBB; and the
#                     Rust API and rayon in the same rounds (bench/examples/c_run_peer.rs)
#   make bench-scaling  W1-W4 at 1, 2, 4, 8, 16 workers: C and Rust APIs, oneTBB, rayon
#                     (bench/c/scaling.sh; `scaling.sh build DIR` + `run DIR` for another machine)
#   make install PREFIX=/usr/local [DESTDIR=]   .so/.a/header/wspool{,-static}.pc/CMake package
#
# Other layers link the library through the `c-lib` target and these variables.

C_CC ?= gcc
C_CXX ?= g++
C_RELEASE := target/release
C_LIBDIR_ABS := $(abspath $(C_RELEASE))
C_HEADER := include/libwspool.h
C_VERSION := $(shell sed -n 's/^version = "\([0-9.]*\)"/\1/p' Cargo.toml | head -n 1)
C_VERSION_MAJOR := $(word 1,$(subst ., ,$(C_VERSION)))
C_VERSION_MINOR := $(word 2,$(subst ., ,$(C_VERSION)))
C_WARN := -Wall -Wextra -Wpedantic -Werror
C_CFLAGS := -std=c11 -g $(C_WARN) -Iinclude
C_LINK := -L$(C_RELEASE) -Wl,-rpath,$(C_LIBDIR_ABS) -lwspool -pthread
# What a static link of libwspool.a needs (rustc --print native-static-libs).
C_STATIC_DEPS := -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc

CBINDGEN_VERSION := 0.29.4
CBINDGEN := target/tools/bin/cbindgen
CBINDGEN_RUN = $(CBINDGEN) -q --config cbindgen.toml --crate wspool-ffi ffi

C_EXAMPLES := hello fork_join pipeline stats_watch
C_EXAMPLE_BIN := examples-c/bin
C_TEST_BIN := tests/c/bin
# The C test programs (one translation unit each, sharing tests/c/harness.h):
# test_wspool covers every API function, test_lifecycle and test_shutdown the
# lifecycle rules and races of issue 9, test_batch wspool_submit_batch (issue 15),
# test_groups groups placed in caller storage (issue 15), test_request
# per-request control: deadlines and lanes (issue 29), test_diagnosis
# EDEADLK self-waits, wspool_dump and the stall callback (issue 26), test_misuse
# the misuse paths of issue 38 (a task destroying its own pool, shutdown from a
# task, uninitialised structs, fork while snapshots are taken).
C_TESTS := test_wspool test_lifecycle test_shutdown test_batch test_groups test_request test_diagnosis test_misuse
C_SAN_ASAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
C_SAN_TSAN := -fsanitize=thread

EXAMPLE_TARGETS += c-examples
TEST_TARGETS += test-c
DEMO_TARGETS += demo-c
BENCH_TARGETS += bench-c

.PHONY: bench-scaling c-lib c-build c-header c-header-check c-examples test-c test-c-header test-c-plain \
        test-c-asan test-c-random test-c-tsan test-c-valgrind test-c-install c-test-bins demo-c bench-c c-install install

# ---------------------------------------------------------------- library ---

# The pinned cbindgen, built once into target/tools (only when missing):
# unoptimised and without debug info, because building it is most of what it
# costs: 45 s and 70 CPU-seconds on 2 cores instead of 130 s and 235 for a
# release build, and the header it writes is the same byte for byte (it runs
# in 0.3 s instead of 0.2).
$(CBINDGEN):
	$(CARGO) install cbindgen --version =$(CBINDGEN_VERSION) --locked --debug --config profile.dev.debug=false \
	  --root target/tools

c-header: $(CBINDGEN)
	$(CBINDGEN_RUN) --output $(C_HEADER)
	@echo "regenerated $(C_HEADER): commit it together with ffi/"

# Fails when the committed header is not what ffi/ + cbindgen.toml produce.
c-header-check: $(CBINDGEN)
	@mkdir -p target/c
	$(CBINDGEN_RUN) --output target/c/libwspool.h
	@if ! cmp -s target/c/libwspool.h $(C_HEADER); then \
	  diff -u $(C_HEADER) target/c/libwspool.h | head -n 40; \
	  echo "$(C_HEADER) is stale: run 'make c-header' and commit it"; exit 1; fi
	@echo "$(C_HEADER) is up to date"

# cargo build, then the SONAME link so in-tree programs (rpath target/release) run.
c-build:
	$(CARGO) build --release -p wspool-ffi
	ln -sf libwspool.so $(C_RELEASE)/libwspool.so.0
	@readelf -d $(C_RELEASE)/libwspool.so | grep -q 'SONAME.*\[libwspool.so.0\]' \
	  || { echo "libwspool.so lacks SONAME libwspool.so.0"; exit 1; }

# Building needs no cbindgen (a first `make demo` should not compile a tool):
# the header is committed, and `make test` (test-c-header) checks it is fresh.
c-lib: c-build

# --------------------------------------------------------------- examples ---

c-examples: c-lib
	@mkdir -p $(C_EXAMPLE_BIN)
	for e in $(C_EXAMPLES); do \
	  $(C_CC) $(C_CFLAGS) -O2 examples-c/$$e.c -o $(C_EXAMPLE_BIN)/$$e $(C_LINK) || exit 1; done

demo-c: c-examples
	@echo; echo "== C examples (examples-c/; docs/c-api.md)"
	@echo "-- hello.c: 100,001 tasks through the C API, the pool's stats after (where workers found them)"
	@$(C_EXAMPLE_BIN)/hello | tail -n 4
	@echo "-- fork_join.c: a recursive sum and fib(32) split with wspool_join, beside the same work on one thread (2 workers)"
	@$(C_EXAMPLE_BIN)/fork_join
	@echo "-- pipeline.c: events of 8 accounts through serial queues: any worker runs them, each account's order is kept"
	@$(C_EXAMPLE_BIN)/pipeline | tail -n 3
	@echo "-- stats_watch.c: 2 s of mixed load (CPU bursts, blocking regions, fork-join) seen through wspool_stats_get;"
	@echo "   threads grow for the blocking regions, 'queued' is the backlog, p99 the sampled queue delay"
	@$(C_EXAMPLE_BIN)/stats_watch 2

# ------------------------------------------------------------------ tests ---

test-c: test-c-header test-c-plain test-c-asan test-c-random test-c-tsan test-c-valgrind test-c-install
	@echo "test-c: all C suites passed"

# The header is fresh and compiles cleanly as C99, C11 and C++11.
test-c-header: c-header-check
	$(C_CC) -std=c99 $(C_WARN) -fsyntax-only -x c $(C_HEADER)
	$(C_CC) -std=c11 $(C_WARN) -fsyntax-only -x c $(C_HEADER)
	$(C_CXX) -std=c++11 $(C_WARN) -fsyntax-only -x c++ $(C_HEADER)

# $(call c_test_build,SUFFIX,FLAGS): every C test program as $(C_TEST_BIN)/NAME$(SUFFIX).
c_test_build = for t in $(C_TESTS); do \
	  $(C_CC) $(C_CFLAGS) -O1 $(2) -Itests/c tests/c/$$t.c -o $(C_TEST_BIN)/$${t}$(1) $(C_LINK) || exit 1; done

c-test-bins: c-build
	@mkdir -p $(C_TEST_BIN)
	$(call c_test_build,,)

test-c-plain: c-lib c-test-bins
	for t in $(C_TESTS); do $(C_TEST_BIN)/$$t || exit 1; done

test-c-asan: c-lib
	@mkdir -p $(C_TEST_BIN)
	$(call c_test_build,_asan,$(C_SAN_ASAN))
	for t in $(C_TESTS); do \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  WSPOOL_TEST_SCALE=1 $(C_TEST_BIN)/$${t}_asan || exit 1; done

# tests/c/test_random_api.c: seeded random call sequences from several threads
# (objects destroyed with work pending, shutdowns racing submitters), under
# ASan+UBSan with LeakSanitizer strict: use_stacks=0 and use_registers=0.
# When a round ends every pool, group and queue of it is destroyed and every
# thread but main has exited, so memory reachable only from a stack or a
# register is memory nobody will free (LSan's defaults count any such word,
# even a stale copy in a dead frame, as a reference, and miss the leak).
# Thread-locals and globals stay roots, because that is correct: the main
# thread's TLS holds glibc's list of its thread-local destructors (use_tls=0
# reports that list as a leak after the first round), and the library's
# statics (the completion queues' registry, the fork bookkeeping) keep what
# they point to by design. A check runs every 25 rounds
# (__lsan_do_recoverable_leak_check, so a leak is pinned on a few rounds of a
# printed seed; not every round: each check stops the world, which is slow on
# a loaded machine) and at exit; detect_stack_use_after_return catches a
# placed group's storage used after its frame returned.
# WSPOOL_RANDOM_SEED replays a run (the seed is printed), WSPOOL_RANDOM_ROUNDS
# changes its length, WSPOOL_RANDOM_FIRST starts it at a given round.
C_RANDOM_ASAN_OPTIONS := detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=1:strict_string_checks=1
C_RANDOM_LSAN_OPTIONS := use_stacks=0:use_registers=0:use_tls=1:use_globals=1:report_objects=1:max_leaks=20
test-c-random: c-lib
	@mkdir -p $(C_TEST_BIN)
	$(C_CC) $(C_CFLAGS) -O1 $(C_SAN_ASAN) -Itests/c tests/c/test_random_api.c -o $(C_TEST_BIN)/test_random_api_asan $(C_LINK)
	ASAN_OPTIONS=$(C_RANDOM_ASAN_OPTIONS) LSAN_OPTIONS=$(C_RANDOM_LSAN_OPTIONS) \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(C_TEST_BIN)/test_random_api_asan

# ffi/pkg/tsan.supp (installed for users as share/wspool/tsan.supp) explains
# the suppression; the canary proves TSan still
# sees a race in C code running on the pool. TSan misses that race in about
# 1 run in 20 with any build of the library (2 of 40 at 0a0ac3b and at
# 4edaa2c alike), so the canary gets five attempts: a blinded TSan reports
# it in none, a working one in the first almost always.
C_TSAN_OPTIONS := halt_on_error=1 die_after_fork=0 suppressions=$(abspath ffi/pkg/tsan.supp)
test-c-tsan: c-lib
	@mkdir -p $(C_TEST_BIN)
	$(call c_test_build,_tsan,$(C_SAN_TSAN))
	$(C_CC) $(C_CFLAGS) -O1 $(C_SAN_TSAN) tests/c/tsan_canary.c -o $(C_TEST_BIN)/tsan_canary $(C_LINK)
	for t in $(C_TESTS); do \
	  TSAN_OPTIONS="$(C_TSAN_OPTIONS)" WSPOOL_TEST_SCALE=0.5 $(C_TEST_BIN)/$${t}_tsan || exit 1; done
	@for attempt in 1 2 3 4 5; do \
	  TSAN_OPTIONS="$(C_TSAN_OPTIONS) exitcode=66" $(C_TEST_BIN)/tsan_canary > target/c-tsan-canary.log 2>&1 || true; \
	  if grep -q "ThreadSanitizer: data race" target/c-tsan-canary.log; then exit 0; fi; \
	  echo "TSan canary: attempt $$attempt saw no race report"; done; \
	  cat target/c-tsan-canary.log; echo "TSan canary: the race was NOT reported in 5 attempts"; exit 1
	@echo "TSan canary: the deliberate race was reported (TSan is not blinded)"

# valgrind: no error, no definite/indirect leak after wspool_destroy. Tests
# that fork (named "fork") run apart without leak checking: a forked child
# inherits memory that only the parent's (absent) threads referenced.
C_VALGRIND := valgrind -q --error-exitcode=99 --fair-sched=yes --child-silent-after-fork=yes
test-c-valgrind: c-lib c-test-bins
	@command -v valgrind >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y valgrind || { apt-get update && apt-get install -y valgrind; }; \
	  else echo "valgrind is missing and we are not root: install it (apt-get install valgrind)"; exit 1; fi; }
	for t in $(C_TESTS); do \
	  WSPOOL_TEST_SCALE=0.25 WSPOOL_TEST_ALARM=900 $(C_VALGRIND) --leak-check=full \
	    --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
	    $(C_TEST_BIN)/$$t -fork || exit 1; \
	  WSPOOL_TEST_SCALE=0.25 WSPOOL_TEST_ALARM=900 $(C_VALGRIND) --leak-check=no $(C_TEST_BIN)/$$t fork || exit 1; done

# An installed copy, used through pkg-config (shared and static) and CMake.
C_ITEST := build/c-install-test
test-c-install: c-lib
	rm -rf $(C_ITEST) && mkdir -p $(C_ITEST)
	$(MAKE) --no-print-directory c-install PREFIX=$(abspath $(C_ITEST))/prefix
	bash tests/c/install_test.sh $(abspath $(C_ITEST))

# ---------------------------------------------------------------- install ---

PREFIX ?= /usr/local
DESTDIR ?=
C_INST_LIB = $(DESTDIR)$(PREFIX)/lib
C_INST_INC = $(DESTDIR)$(PREFIX)/include
C_INST_SHARE = $(DESTDIR)$(PREFIX)/share/wspool
C_SUBST = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(C_VERSION)|g' \
              -e 's|@VERSION_MAJOR@|$(C_VERSION_MAJOR)|g' \
              -e 's|@VERSION_MINOR@|$(C_VERSION_MINOR)|g' -e 's|@STATIC_DEPS@|$(C_STATIC_DEPS)|g'

install: c-install

# The archive's debug info is stripped on install (cargo's strip setting
# applies to linked outputs only, not to a staticlib).
c-install: c-lib
	install -d $(C_INST_LIB)/pkgconfig $(C_INST_LIB)/cmake/wspool $(C_INST_INC) $(C_INST_SHARE)
	install -m 755 $(C_RELEASE)/libwspool.so $(C_INST_LIB)/libwspool.so.$(C_VERSION)
	ln -sf libwspool.so.$(C_VERSION) $(C_INST_LIB)/libwspool.so.$(C_VERSION_MAJOR)
	ln -sf libwspool.so.$(C_VERSION_MAJOR) $(C_INST_LIB)/libwspool.so
	install -m 644 $(C_RELEASE)/libwspool.a $(C_INST_LIB)/libwspool.a
	strip --strip-debug $(C_INST_LIB)/libwspool.a
	install -m 644 $(C_HEADER) $(C_INST_INC)/libwspool.h
	install -m 644 include/wspool.hpp $(C_INST_INC)/wspool.hpp
	install -m 644 ffi/pkg/tsan.supp $(C_INST_SHARE)/tsan.supp
	$(C_SUBST) ffi/pkg/wspool.pc.in > $(C_INST_LIB)/pkgconfig/wspool.pc
	$(C_SUBST) ffi/pkg/wspool-static.pc.in > $(C_INST_LIB)/pkgconfig/wspool-static.pc
	$(C_SUBST) ffi/pkg/wspoolConfig.cmake.in > $(C_INST_LIB)/cmake/wspool/wspoolConfig.cmake
	$(C_SUBST) ffi/pkg/wspoolConfigVersion.cmake.in > $(C_INST_LIB)/cmake/wspool/wspoolConfigVersion.cmake
	@echo "installed libwspool $(C_VERSION) under $(DESTDIR)$(PREFIX):"
	@echo "  lib/libwspool.so.$(C_VERSION) (+ libwspool.so.$(C_VERSION_MAJOR), libwspool.so links)  lib/libwspool.a"
	@echo "  include/libwspool.h  include/wspool.hpp (C++)  lib/pkgconfig/wspool.pc  lib/pkgconfig/wspool-static.pc  lib/cmake/wspool/"
	@echo "  share/wspool/tsan.supp (ThreadSanitizer suppressions for programs using the library; docs/c-api.md)"
	@echo "run time: programs linked through wspool.pc or CMake carry an rpath to $(PREFIX)/lib and run as is;"
	@echo "  for programs linked otherwise, run 'ldconfig' (PREFIX /usr/local, as root) or add $(PREFIX)/lib"
	@echo "  to /etc/ld.so.conf.d/. Static: pkg-config --libs wspool-static (docs/c-api.md)"

# -------------------------------------------------------------- benchmarks --

bench-c: c-lib
	bash bench/c/run.sh

bench-scaling:
	CARGO="$(CARGO)" C_CC="$(C_CC)" C_CXX="$(C_CXX)" bash bench/c/scaling.sh

# mk/reactor.mk: the reactor server example (issue 6, seed 002).
#
#   make reactor        builds examples-c/bin/reactor_server and examples-c/bin/loadgen
#   make test-reactor   the reactor test suite (loopback only), then again under ASan/UBSan and TSan
#   make demo-reactor   server + load generator, reactor mode beside the blocking control
#   make bench-reactor  the same, longer runs, printed as examples-c/README.md's markdown table
#
# The server uses only the public C API (include/libwspool.h) and links
# target/release/libwspool.so, built by c-lib (mk/c.mk), found at run time
# through a relative rpath. The load generator is plain C and links nothing.

REACTOR_BIN := examples-c/bin
REACTOR_CC ?= gcc
REACTOR_CFLAGS ?= -O2 -g -std=gnu11 -Wall -Wextra -Werror
REACTOR_LIB := -Ltarget/release -Wl,-rpath,'$$ORIGIN/../../target/release' -lwspool -pthread
REACTOR_PY := tests/reactor

EXAMPLE_TARGETS += reactor
TEST_TARGETS += test-reactor
DEMO_TARGETS += demo-reactor
BENCH_TARGETS += bench-reactor

.PHONY: reactor reactor-san test-reactor demo-reactor bench-reactor

reactor: c-lib
	@mkdir -p $(REACTOR_BIN)
	$(REACTOR_CC) $(REACTOR_CFLAGS) -pthread -Iinclude examples-c/reactor_server.c -o $(REACTOR_BIN)/reactor_server $(REACTOR_LIB)
	$(REACTOR_CC) $(REACTOR_CFLAGS) -pthread examples-c/loadgen.c -o $(REACTOR_BIN)/loadgen

# The server's own C code under AddressSanitizer + UBSan (+ LeakSanitizer),
# and under ThreadSanitizer. libwspool.so is not instrumented; for TSan,
# tests/reactor/tsan.supp says why its internal hand-off is ignored.
reactor-san: c-lib
	@mkdir -p $(REACTOR_BIN)
	$(REACTOR_CC) $(REACTOR_CFLAGS) -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
	  -fno-sanitize-recover=undefined -pthread -Iinclude examples-c/reactor_server.c \
	  -o $(REACTOR_BIN)/reactor_server_asan $(REACTOR_LIB)
	$(REACTOR_CC) $(REACTOR_CFLAGS) -O1 -fsanitize=thread -pthread -Iinclude examples-c/reactor_server.c \
	  -o $(REACTOR_BIN)/reactor_server_tsan $(REACTOR_LIB)

# The suite on the plain server, then every test but the C10K one on each
# sanitized server: a report makes the server exit non-zero, and every test
# asserts a clean exit 0. All three passes run; any failure fails the target.
test-reactor: reactor reactor-san
	@rc=0; \
	echo "== reactor tests: plain -O2 server"; \
	$(PYTHON) $(REACTOR_PY)/test_reactor.py --server $(REACTOR_BIN)/reactor_server || rc=1; \
	echo "== reactor tests: ASan + UBSan + LSan server"; \
	ASAN_OPTIONS=detect_leaks=1:exitcode=86 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(PYTHON) $(REACTOR_PY)/test_reactor.py --server $(REACTOR_BIN)/reactor_server_asan --skip 10k || rc=1; \
	echo "== reactor tests: TSan server"; \
	TSAN_OPTIONS="halt_on_error=0 exitcode=66 suppressions=$(CURDIR)/$(REACTOR_PY)/tsan.supp" \
	  $(PYTHON) $(REACTOR_PY)/test_reactor.py --server $(REACTOR_BIN)/reactor_server_tsan --skip 10k || rc=1; \
	if [ $$rc -ne 0 ]; then echo "test-reactor: FAILED (see the FAIL lines above)"; else echo "test-reactor: all three passes passed"; fi; \
	exit $$rc

demo-reactor: reactor
	@echo; echo "== reactor server (examples-c/README.md): 64 clients against the epoll reactor and the blocking design"
	$(PYTHON) $(REACTOR_PY)/demo.py --bin $(REACTOR_BIN) --seconds 1 --quick

bench-reactor: reactor
	$(PYTHON) $(REACTOR_PY)/demo.py --bin $(REACTOR_BIN) --seconds 5 --markdown

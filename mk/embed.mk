# mk/embed.mk: embedding wspool in event loops (issue 14).
#
#   make embed          examples-c/bin/{http_libuv,http_libevent} (+ _asan builds)
#   make test-embed     C completion-queue suite (plain, ASan+UBSan+LSan), then both HTTP
#                       servers driven by curl / ab / wrk (plain and ASan servers)
#   make bench-embed    HTTP mix, CPU per request, overload, and asyncio `await pool.run`
#                       vs run_in_executor figures (medians of 5 rounds, servers taking turns)
#
# The HTTP examples need libuv and libevent headers and the clients come from
# Debian packages: when missing, the targets install them with apt-get (as
# root; otherwise they say what to install and stop).

EMBED_BIN := examples-c/bin
EMBED_TBIN := target/embed
EMBED_CC ?= gcc
EMBED_CFLAGS := -std=gnu11 -g -Wall -Wextra -Werror -Iinclude
EMBED_ASAN := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
EMBED_LIB := -Ltarget/release -Wl,-rpath,$(abspath target/release) -lwspool -pthread
EMBED_APT := libuv1-dev libevent-dev curl apache2-utils wrk

TEST_TARGETS += test-embed
BENCH_TARGETS += bench-embed
EXAMPLE_TARGETS += embed

.PHONY: embed embed-deps test-embed test-embed-c test-embed-http bench-embed

# Installs the Debian packages the HTTP examples and their tests use.
embed-deps:
	@missing=""; \
	for p in $(EMBED_APT); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "embed-deps: installing$$missing with apt-get (as root)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing \
	      || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; }; \
	  else echo "embed-deps: missing$$missing; run: sudo apt-get install$$missing"; exit 1; fi; fi

$(EMBED_TBIN)/test_cq: tests/embed/test_cq.c $(C_HEADER) c-build
	@mkdir -p $(EMBED_TBIN)
	$(EMBED_CC) $(EMBED_CFLAGS) -O1 tests/embed/test_cq.c -o $@ $(EMBED_LIB)

$(EMBED_TBIN)/test_cq_asan: tests/embed/test_cq.c $(C_HEADER) c-build
	@mkdir -p $(EMBED_TBIN)
	$(EMBED_CC) $(EMBED_CFLAGS) $(EMBED_ASAN) tests/embed/test_cq.c -o $@ $(EMBED_LIB)

# The HTTP examples' deadline reserve, on a simulated clock (UBSan: its arithmetic is unsigned).
$(EMBED_TBIN)/test_deadline_reserve: tests/embed/test_deadline_reserve.c examples-c/http_deadline.h $(C_HEADER) c-build
	@mkdir -p $(EMBED_TBIN)
	$(EMBED_CC) $(EMBED_CFLAGS) $(EMBED_ASAN) tests/embed/test_deadline_reserve.c -o $@ $(EMBED_LIB)

test-embed-c: c-lib $(EMBED_TBIN)/test_cq $(EMBED_TBIN)/test_cq_asan $(EMBED_TBIN)/test_deadline_reserve
	$(EMBED_TBIN)/test_cq
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(EMBED_TBIN)/test_cq_asan
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(EMBED_TBIN)/test_deadline_reserve

test-embed: test-embed-c test-embed-http
	@echo "test-embed: all suites passed"

EMBED_SERVERS := http_libuv http_libevent
EMBED_LIBS_http_libuv := -luv
EMBED_LIBS_http_libevent := -levent
EMBED_HDRS := examples-c/http_common.h examples-c/http_deadline.h $(C_HEADER)
EMBED_VENV := target/embed/venv
EMBED_PY := $(EMBED_VENV)/bin/python
# The OpenMetrics parser the tests validate /metrics with.
EMBED_PROM := prometheus_client==0.21.1

$(EMBED_BIN)/http_%: examples-c/http_%.c $(EMBED_HDRS) c-build embed-deps
	@mkdir -p $(EMBED_BIN)
	$(EMBED_CC) $(EMBED_CFLAGS) -O2 $< -o $@ $(EMBED_LIB) $(EMBED_LIBS_http_$*)

$(EMBED_BIN)/http_%_asan: examples-c/http_%.c $(EMBED_HDRS) c-build embed-deps
	@mkdir -p $(EMBED_BIN)
	$(EMBED_CC) $(EMBED_CFLAGS) $(EMBED_ASAN) $< -o $@ $(EMBED_LIB) $(EMBED_LIBS_http_$*)

embed: c-lib $(foreach s,$(EMBED_SERVERS),$(EMBED_BIN)/$(s) $(EMBED_BIN)/$(s)_asan)

$(EMBED_PY):
	@echo "test-embed: creating $(EMBED_VENV) with $(EMBED_PROM) (pip)"
	$(PYTHON) -m venv $(EMBED_VENV)
	$(EMBED_VENV)/bin/pip install -q $(EMBED_PROM)

# Each server plain (-O2) and under ASan+UBSan+LSan; a sanitizer report, or a
# done count that differs from the accepted requests, makes it exit non-zero,
# and every test asserts exit 0.
test-embed-http: embed $(EMBED_PY)
	@rc=0; for s in $(EMBED_SERVERS); do \
	  echo "== $$s (plain)"; $(EMBED_PY) tests/embed/test_http.py --server $(EMBED_BIN)/$$s || rc=1; \
	  echo "== $$s (ASan+UBSan+LSan)"; \
	  ASAN_OPTIONS=detect_leaks=1:exitcode=86 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    $(EMBED_PY) tests/embed/test_http.py --server $(EMBED_BIN)/$${s}_asan || rc=1; \
	done; exit $$rc

$(EMBED_TBIN)/httpload: tests/embed/httpload.c
	@mkdir -p $(EMBED_TBIN)
	$(EMBED_CC) -std=gnu11 -O2 -Wall -Wextra -Werror $< -o $@

# Medians of 5 rounds; the figures in docs/embedding.md come from this.
bench-embed: embed $(EMBED_TBIN)/httpload python-install
	$(PYTHON) tests/embed/bench.py --bin $(EMBED_BIN) --load $(EMBED_TBIN)/httpload --rounds 5 --seconds 3
	$(PY) tests/embed/bench_asyncio.py --rounds 5

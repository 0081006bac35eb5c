# mk/cpp.mk: the C++ header include/wspool.hpp (issue 27).
#
#   make cpp-examples   examples-cpp/bin/{hello,http_beast} (Boost.Beast server, C++20: Asio coroutines
#                       awaiting wspool::async_run)
#   make test-cpp       tests/cpp plain, under ASan+UBSan and under TSan (test_wspool, test_request,
#                       test_asio, test_coro: C++20 coroutines and wspool::async_run),
#                       allocations per small task (test_alloc, plain), the Beast server driven by
#                       curl / ab / raw sockets (plain in all three modes, ASan+UBSan+LSan and TSan
#                       with the pool), and an installed copy used through CMake (wspool::wspool_cpp)
#                       and pkg-config
#   make bench-cpp      the Beast server under the HTTP mix of bench-embed (wspool executor vs
#                       handlers inline on the io_context vs a std::thread pool of 2, same run);
#                       instructions per task (callgrind) and heap allocations per task of
#                       small lambdas vs a direct wspool_submit of a C function
#
# Boost (Beast, Asio; header-only in 1.74) comes from Debian's libboost-dev:
# installed with apt-get when missing and running as root; otherwise the
# targets say what to install and stop. Every binary is a file target, built
# once and rebuilt only when its sources change (a Beast compile takes ~30 s).

CPP_CXX ?= g++
CPP_WARN := -Wall -Wextra -Wpedantic -Werror
CPP_FLAGS := -std=c++17 -g $(CPP_WARN) -Iinclude -Itests/cpp
CPP_LINK := -L$(C_RELEASE) -Wl,-rpath,$(C_LIBDIR_ABS) -lwspool -pthread
CPP_ASAN := -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# -Wno-tsan: GCC 12 warns that TSan does not model atomic_thread_fence, which
# Asio's fenced blocks use; Asio's handler queues also hold a mutex, which TSan sees.
CPP_TSAN := -O1 -fsanitize=thread -Wno-tsan
CPP_BIN := target/cpp
CPP_EXAMPLE_BIN := examples-cpp/bin
CPP_HDRS := include/wspool.hpp $(C_HEADER) tests/cpp/harness.hpp
CPP_APT := libboost-dev
CPP_ASAN_ENV := ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The library's own TSan suppression (ffi/pkg/tsan.supp, see mk/c.mk).
CPP_TSAN_ENV := TSAN_OPTIONS="halt_on_error=1 die_after_fork=0 suppressions=$(abspath ffi/pkg/tsan.supp)"
CPP_HTTP_PY := target/embed/venv/bin/python
# The Beast example shares the C examples' request deadline (X-Request-Start, the reserve).
CPP_BEAST_HDRS := examples-c/http_deadline.h

EXAMPLE_TARGETS += cpp-examples
TEST_TARGETS += test-cpp
BENCH_TARGETS += bench-cpp

.PHONY: cpp-deps cpp-bins cpp-examples test-cpp test-cpp-std test-cpp-plain test-cpp-asan test-cpp-tsan test-cpp-http \
        test-cpp-install bench-cpp

# Installs Debian's Boost headers when missing (as root), else says how.
cpp-deps:
	@missing=""; \
	for p in $(CPP_APT); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "cpp-deps: installing$$missing with apt-get (as root)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing \
	      || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; }; \
	  else echo "cpp-deps: missing$$missing; run: sudo apt-get install$$missing"; exit 1; fi; fi

# $(call cpp_prog,OUT,SRC,FLAGS[,MORE_HDRS]): one C++ program, rebuilt when its source or a header changes.
define cpp_prog
$(1): $(2) $(CPP_HDRS) $(4) | cpp-deps c-build
	@mkdir -p $$(dir $$@)
	$$(CPP_CXX) $$(CPP_FLAGS) $(3) $$< -o $$@ $$(CPP_LINK)
endef

CPP_TESTS := test_wspool test_request test_asio
$(foreach t,$(CPP_TESTS),$(eval $(call cpp_prog,$(CPP_BIN)/$(t),tests/cpp/$(t).cpp,-O1)))
$(foreach t,$(CPP_TESTS),$(eval $(call cpp_prog,$(CPP_BIN)/$(t)_asan,tests/cpp/$(t).cpp,$(CPP_ASAN))))
$(foreach t,$(CPP_TESTS),$(eval $(call cpp_prog,$(CPP_BIN)/$(t)_tsan,tests/cpp/$(t).cpp,$(CPP_TSAN))))
# C++20: coroutines (pool.run) and wspool::async_run with asio::use_awaitable.
CPP20 := -std=c++20
$(eval $(call cpp_prog,$(CPP_BIN)/test_coro,tests/cpp/test_coro.cpp,$(CPP20) -O1))
$(eval $(call cpp_prog,$(CPP_BIN)/test_coro_asan,tests/cpp/test_coro.cpp,$(CPP20) $(CPP_ASAN)))
$(eval $(call cpp_prog,$(CPP_BIN)/test_coro_tsan,tests/cpp/test_coro.cpp,$(CPP20) $(CPP_TSAN)))
$(eval $(call cpp_prog,$(CPP_BIN)/test_alloc,tests/cpp/test_alloc.cpp,-O2))
$(eval $(call cpp_prog,$(CPP_BIN)/flood_cpp,tests/cpp/flood_cpp.cpp,-O2))
$(eval $(call cpp_prog,$(CPP_EXAMPLE_BIN)/hello,examples-cpp/hello.cpp,-O2))
# The Beast server's connections are Asio coroutines: C++20.
$(eval $(call cpp_prog,$(CPP_EXAMPLE_BIN)/http_beast,examples-cpp/http_beast.cpp,$(CPP20) -O2,$(CPP_BEAST_HDRS)))
$(eval $(call cpp_prog,$(CPP_BIN)/http_beast_asan,examples-cpp/http_beast.cpp,$(CPP20) $(CPP_ASAN),$(CPP_BEAST_HDRS)))
$(eval $(call cpp_prog,$(CPP_BIN)/http_beast_tsan,examples-cpp/http_beast.cpp,$(CPP20) $(CPP_TSAN),$(CPP_BEAST_HDRS)))

cpp-examples: c-lib $(CPP_EXAMPLE_BIN)/hello $(CPP_EXAMPLE_BIN)/http_beast

# Every C++ binary the suites run, compiled side by side first (each is one
# single-threaded g++, a Beast one ~30 s): on CI's 2 cores that halves the
# suite's build time; the suites below then find them built.
CPP_ALL_BINS := $(foreach t,$(CPP_TESTS) test_coro,$(CPP_BIN)/$(t) $(CPP_BIN)/$(t)_asan $(CPP_BIN)/$(t)_tsan) \
  $(CPP_BIN)/test_alloc $(CPP_EXAMPLE_BIN)/hello $(CPP_EXAMPLE_BIN)/http_beast \
  $(CPP_BIN)/http_beast_asan $(CPP_BIN)/http_beast_tsan
cpp-bins: c-lib cpp-deps
	$(MAKE) --no-print-directory -j$$(nproc) $(CPP_ALL_BINS)

test-cpp: cpp-bins test-cpp-std test-cpp-plain test-cpp-asan test-cpp-tsan test-cpp-http test-cpp-install
	@echo "test-cpp: all C++ suites passed"

# Below C++17 the header must fail with one error, its own: the line that says it needs C++17.
CPP_STD_MSG := wspool.hpp needs C++17 or later
test-cpp-std:
	@mkdir -p $(CPP_BIN)
	@for std in c++14 c++11; do \
	  if $(CPP_CXX) -std=$$std $(CPP_WARN) -Iinclude -fsyntax-only tests/cpp/include_before_cxx17.cpp \
	      > $(CPP_BIN)/include_$$std.log 2>&1; then \
	    echo "test-cpp-std: wspool.hpp compiled under -std=$$std: it must refuse with one clear error"; exit 1; fi; \
	  errors=$$(grep -c 'error:' $(CPP_BIN)/include_$$std.log); \
	  if [ "$$errors" != 1 ] || ! grep -q 'error: #error "$(CPP_STD_MSG)' $(CPP_BIN)/include_$$std.log; then \
	    cat $(CPP_BIN)/include_$$std.log; \
	    echo "test-cpp-std: -std=$$std gave $$errors errors; expected exactly one, \"$(CPP_STD_MSG) ...\""; exit 1; fi; \
	  echo "test-cpp-std: -std=$$std fails with one error: $$(grep -o '#error.*' $(CPP_BIN)/include_$$std.log | head -n 1)"; \
	done

test-cpp-plain: c-lib $(CPP_BIN)/test_wspool $(CPP_BIN)/test_request $(CPP_BIN)/test_asio $(CPP_BIN)/test_coro \
                $(CPP_BIN)/test_alloc $(CPP_EXAMPLE_BIN)/hello
	$(CPP_BIN)/test_wspool
	$(CPP_BIN)/test_request
	$(CPP_BIN)/test_asio
	$(CPP_BIN)/test_coro
	$(CPP_BIN)/test_alloc
	$(CPP_EXAMPLE_BIN)/hello > /dev/null

test-cpp-asan: c-lib $(CPP_BIN)/test_wspool_asan $(CPP_BIN)/test_request_asan $(CPP_BIN)/test_asio_asan \
               $(CPP_BIN)/test_coro_asan
	$(CPP_ASAN_ENV) WSPOOL_TEST_SCALE=0.5 $(CPP_BIN)/test_wspool_asan
	$(CPP_ASAN_ENV) $(CPP_BIN)/test_request_asan
	$(CPP_ASAN_ENV) $(CPP_BIN)/test_asio_asan
	$(CPP_ASAN_ENV) $(CPP_BIN)/test_coro_asan

test-cpp-tsan: c-lib $(CPP_BIN)/test_wspool_tsan $(CPP_BIN)/test_request_tsan $(CPP_BIN)/test_asio_tsan \
               $(CPP_BIN)/test_coro_tsan
	$(CPP_TSAN_ENV) WSPOOL_TEST_SCALE=0.5 $(CPP_BIN)/test_wspool_tsan
	$(CPP_TSAN_ENV) $(CPP_BIN)/test_request_tsan
	$(CPP_TSAN_ENV) $(CPP_BIN)/test_asio_tsan
	$(CPP_TSAN_ENV) $(CPP_BIN)/test_coro_tsan

# The Beast server: every mode plain; with the pool under ASan+UBSan+LSan and
# under TSan (a report makes the server's exit status non-zero, and every
# test asserts exit 0).
test-cpp-http: c-lib $(CPP_EXAMPLE_BIN)/http_beast $(CPP_BIN)/http_beast_asan $(CPP_BIN)/http_beast_tsan \
               $(CPP_HTTP_PY) embed-deps
	$(CPP_HTTP_PY) tests/cpp/test_http.py --server $(CPP_EXAMPLE_BIN)/http_beast
	ASAN_OPTIONS=detect_leaks=1:exitcode=86 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(CPP_HTTP_PY) tests/cpp/test_http.py --server $(CPP_BIN)/http_beast_asan --modes pool
	TSAN_OPTIONS="halt_on_error=1 exitcode=66 suppressions=$(abspath ffi/pkg/tsan.supp)" \
	  $(CPP_HTTP_PY) tests/cpp/test_http.py --server $(CPP_BIN)/http_beast_tsan --modes pool

# An installed copy (make c-install), used as a C++ program would: CMake's
# find_package(wspool) with wspool::wspool_cpp, and pkg-config.
CPP_ITEST := build/cpp-install-test
test-cpp-install: c-lib cpp-deps
	rm -rf $(CPP_ITEST) && mkdir -p $(CPP_ITEST)
	$(MAKE) --no-print-directory c-install PREFIX=$(abspath $(CPP_ITEST))/prefix > /dev/null
	bash tests/cpp/install_test.sh $(abspath $(CPP_ITEST))

bench-cpp: c-lib $(CPP_EXAMPLE_BIN)/http_beast $(CPP_BIN)/flood_cpp target/embed/httpload
	$(PYTHON) tests/cpp/bench_http.py --server $(CPP_EXAMPLE_BIN)/http_beast --load target/embed/httpload --rounds 5 --seconds 3
	@command -v valgrind >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y valgrind || { apt-get update && apt-get install -y valgrind; }; \
	  else echo "valgrind is missing and we are not root: install it (apt-get install valgrind)"; exit 1; fi; }
	bash tests/cpp/bench_callgrind.sh $(CPP_BIN)/flood_cpp

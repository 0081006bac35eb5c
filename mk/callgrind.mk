# mk/callgrind.mk: instruction counts of the W1 flood (issue 15).
#
#   make bench-callgrind   instructions per task of W1, W2 (join) and W4 (groups) on
#                          one worker (bench/callgrind/workloads.sh), then
#                          valgrind --tool=callgrind on the flood through the C API
#                          (bench/callgrind/flood.c) and through Rust
#                          (core/examples/flood_callgrind.rs), one task per call and
#                          in batches: instructions per task for the submitting
#                          thread and for the pool threads, and the submit path's
#                          functions. CALLGRIND_N (default 200000), CALLGRIND_BATCH
#                          (256), CALLGRIND_ONLY (subset of: c rust c_batch rust_batch).
#
# Part of `make bench`, not of `make test`. Needs valgrind (installed through
# apt-get when missing and running as root).

BENCH_TARGETS += bench-callgrind

.PHONY: bench-callgrind

bench-callgrind: c-lib
	@command -v valgrind >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y valgrind || { apt-get update && apt-get install -y valgrind; }; \
	  else echo "valgrind is missing and we are not root: install it (apt-get install valgrind)"; exit 1; fi; }
	CARGO="$(CARGO)" C_CC="$(C_CC)" bash bench/callgrind/run.sh
	CARGO="$(CARGO)" bash bench/callgrind/workloads.sh

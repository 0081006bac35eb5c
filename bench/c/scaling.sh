#!/usr/bin/env bash
# make bench-scaling: W1-W4 at 1, 2, 4, 8 and 16 worker threads (or
# BENCH_SCALING_THREADS), wspool's C and Rust APIs beside oneTBB and rayon,
# interleaved in the same rounds, medians of BENCH_C_REPS (default 3).
#
#   scaling.sh build DIR   builds the four peers and copies them, with
#                          libwspool.so and libtbb.so.12, into DIR
#   scaling.sh run DIR     runs what DIR holds (no compiler needed: this is
#                          how the table is taken on a machine with more
#                          cores than this one)
#   scaling.sh             both, into target/scaling
#
# bench_wspool diagnoses a slow W1 with BENCH_W1_STATS=1 (pool counters and
# context switches after the flood), BENCH_W1_PUSH_TIMES=1 (pushes slower
# than 1 µs) and BENCH_ONLY_W1=1.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-all}
dir=${2:-target/scaling}

build() {
  CC=${C_CC:-gcc}
  CXX=${C_CXX:-g++}
  ${CARGO:-cargo} build -q --release -p wspool-ffi
  ${CARGO:-cargo} build -q --profile bench -p wspool-bench --example c_run_peer
  if [ ! -e /usr/include/oneapi/tbb/task_arena.h ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bench-scaling: installing Debian's libtbb-dev (oneTBB)"
    apt-get install -y libtbb-dev >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y libtbb-dev >/dev/null; }
  fi
  mkdir -p "$dir"
  local cflags=(-O2 -g -std=c11 -Wall -Wextra -Iinclude -Ibench/c)
  $CC "${cflags[@]}" bench/c/bench_wspool.c -o "$dir/bench_wspool" -Ltarget/release -Wl,-rpath,'$ORIGIN' -lwspool -pthread
  cp target/release/examples/c_run_peer "$dir/"
  cp -L target/release/libwspool.so "$dir/$(objdump -p target/release/libwspool.so | awk '/SONAME/ {print $2}')"
  if [ -e /usr/include/oneapi/tbb/task_arena.h ]; then
    $CXX -O2 -g -std=c++20 -Wall -Ibench/c bench/c/bench_tbb.cpp -o "$dir/bench_tbb" -Wl,-rpath,'$ORIGIN' -ltbb -pthread
    cp -L "$(ldconfig -p | awk '/libtbb\.so\.12 .*x86-64/ {print $NF; exit}')" "$dir/"
  else
    echo "bench-scaling: oneTBB is not installed (need root for apt-get install libtbb-dev): TBB column skipped"
  fi
  cp bench/c/scaling_report.py "$dir/"
}

run() {
  local reps=${BENCH_C_REPS:-3} results="$dir/scaling.txt"
  : > "$results"
  echo "bench-scaling: $(nproc) CPUs, $(uname -r), threads ${BENCH_SCALING_THREADS:-1 2 4 8 16}, $reps rounds" >&2
  for ((r = 1; r <= reps; r++)); do
    for t in ${BENCH_SCALING_THREADS:-1 2 4 8 16}; do
      export BENCH_THREADS=$t BENCH_NO_IDLE=1
      "$dir/bench_wspool" | sed "s/^/wspool $t /" >> "$results"
      [ -x "$dir/bench_tbb" ] && "$dir/bench_tbb" | sed "s/^/tbb $t /" >> "$results"
      "$dir/c_run_peer" wspool | sed "s/^/rust $t /" >> "$results"
      "$dir/c_run_peer" rayon | sed "s/^/rayon $t /" >> "$results"
    done
    echo "bench-scaling: round $r/$reps done" >&2
  done
  python3 "$dir/scaling_report.py" "$results" "$reps"
}

case $mode in
  build) build ;;
  run) run ;;
  all) build && run ;;
  *) echo "usage: scaling.sh [build|run DIR]" >&2; exit 2 ;;
esac

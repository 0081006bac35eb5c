#!/usr/bin/env bash
# make bench-c: builds the C benchmarks (wspool's C API, a mutex+condvar
# pool, OpenMP tasks, oneTBB) and the Rust peers (wspool's Rust API and
# rayon: bench/examples/c_run_peer.rs, measured the same way), runs each
# BENCH_C_REPS times (default 5), interleaved, and prints a markdown table
# of medians (bench/c/report.py).
# Installs Debian's libtbb-dev when missing and running as root.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=target/c-bench
mkdir -p "$out"
reps=${BENCH_C_REPS:-5}
CC=${C_CC:-gcc}
CXX=${C_CXX:-g++}
cflags=(-O2 -g -std=c11 -Wall -Wextra -Iinclude -Ibench/c)
lib=(-Ltarget/release "-Wl,-rpath,$PWD/target/release" -lwspool -pthread)

$CC "${cflags[@]}" bench/c/bench_wspool.c -o "$out/bench_wspool" "${lib[@]}"
$CC "${cflags[@]}" bench/c/bench_mutex.c -o "$out/bench_mutex" -pthread
$CC "${cflags[@]}" -fopenmp bench/c/bench_omp.c -o "$out/bench_omp"
peers=(wspool mutex omp)
# The `bench` profile: the artifacts `make bench-rust` already built.
${CARGO:-cargo} build -q --profile bench -p wspool-bench --example c_run_peer
rust_peer=target/release/examples/c_run_peer

if [ ! -e /usr/include/oneapi/tbb/task_arena.h ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "bench-c: installing Debian's libtbb-dev (oneTBB)"
  apt-get install -y libtbb-dev >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y libtbb-dev >/dev/null; }
fi
if [ -e /usr/include/oneapi/tbb/task_arena.h ]; then
  $CXX -O2 -g -std=c++20 -Wall -Ibench/c bench/c/bench_tbb.cpp -o "$out/bench_tbb" -ltbb -pthread
  peers+=(tbb)
else
  echo "bench-c: oneTBB is not installed (need root for apt-get install libtbb-dev): TBB column skipped"
fi

results=$out/results.txt
: > "$results"
for ((r = 1; r <= reps; r++)); do
  for p in "${peers[@]}"; do
    OMP_NUM_THREADS=2 "$out/bench_$p" | sed "s/^/$p /" >> "$results"
  done
  for p in rust rayon tokio; do
    "$rust_peer" "${p/rust/wspool}" | sed "s/^/$p /" >> "$results"
  done
  echo "bench-c: round $r/$reps done" >&2
done
python3 bench/c/report.py "$results" "$reps"

#!/usr/bin/env bash
# make bench-cpp, part 2: instructions per task of the W1 flood through the
# C++ header (tests/cpp/flood_cpp.cpp) beside the same flood through a direct
# wspool_submit of a C function, under callgrind, read by
# bench/callgrind/report.py (same phases, same table); then heap allocations
# per task of each variant, whole process (the C library's malloc included),
# from valgrind's heap summary: (allocs with N tasks - allocs with 0) / N,
# the N tasks submitted in waves of 256 (each waited for: a server's steady
# state; a single flood of N keeps up to N tasks, and their nodes, alive).
#   CALLGRIND_N     tasks per measured flood (default 100000)
#   CALLGRIND_RUNS  measured runs per variant, the median is reported (default 3)
#   CALLGRIND_ONLY  a subset of the variants: c c_ex cpp_post asio_post c_handle cpp_submit
#   $1              the flood_cpp binary
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$1
n=${CALLGRIND_N:-100000}
runs=${CALLGRIND_RUNS:-3}
variants=${CALLGRIND_ONLY:-c c_ex cpp_post asio_post c_handle cpp_submit}
out=target/callgrind-cpp
mkdir -p "$out"
for v in $variants; do
  rm -rf "${out:?}/$v" "$out/${v}_base"
  for ((r = 1; r <= runs; r++)); do
    mkdir -p "$out/$v/run$r"
    valgrind -q --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/$v/run$r/cg.out" \
      "$bin" "$v" "$n" > "$out/$v/run$r/stdout"
  done
  mkdir -p "$out/${v}_base"
  valgrind -q --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/${v}_base/cg.out" \
    "$bin" "$v" 0 > "$out/${v}_base/stdout"
  echo "bench-cpp: callgrind $v done ($runs runs)" >&2
done
python3 bench/callgrind/report.py "$out" "$n" 0 $variants

allocs() {  # total heap allocations of one run (valgrind memcheck's summary)
  valgrind --tool=memcheck --leak-check=no "$bin" "$1" "$2" 256 2>&1 >/dev/null \
    | sed -n 's/.*total heap usage: \([0-9,]*\) allocs.*/\1/p' | tr -d ,
}
echo
echo "Heap allocations per task, whole process (C library included), $n tasks in waves of 256 (valgrind memcheck):"
echo
echo "| variant | allocs, N tasks | allocs, 0 tasks | per task |"
echo "|---|---:|---:|---:|"
for v in $variants; do
  a=$(allocs "$v" "$n")
  b=$(allocs "$v" 0)
  python3 -c "print('| $v | $a | $b | %.3f |' % (($a - $b) / $n))"
done
echo
echo "(The library's own allocations vary by a few thousand from run to run with its threads'"
echo " timing: per-task differences within about +-0.05 are noise.)"

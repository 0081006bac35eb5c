#!/usr/bin/env bash
# Instructions per W2 fork-join level and per W4 task through the C group
# API, under callgrind on one worker (bench/c/groups_callgrind.c says what
# each variant does). Needs valgrind and the built library (make c-lib).
# Usage: bash bench/c/groups_callgrind.sh [INCLUDE_DIR LIB_DIR]  (default:
# this tree's include/ and target/release; another tree's give its figures).
set -euo pipefail
cd "$(dirname "$0")/../.."
inc=${1:-include}
lib=$(cd "${2:-target/release}" && pwd)
out=target/groups-callgrind
mkdir -p "$out"
gcc -O2 -g -std=c11 -Wall -Wextra -I"$inc" bench/c/groups_callgrind.c -o "$out/groups_callgrind" \
  -L"$lib" "-Wl,-rpath,$lib" -lwspool -pthread
# fib(25) forks at 121,392 levels; W4 runs 200 roots + 200,000 children.
count() { # WORKLOAD VARIANT RUNS: total instructions of the whole process
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" "$out/groups_callgrind" "$@" >/dev/null 2>&1
  awk '/^summary:/ { print $2 }' "$out/cg.out"
}
per() { # WORKLOAD VARIANT DIVISOR: the second run's instructions per unit
  local one two
  one=$(count "$1" "$2" 1)
  two=$(count "$1" "$2" 2)
  awk -v a="$one" -v b="$two" -v d="$3" -v w="$1" -v v="$2" \
    'BEGIN { printf "%s %-7s %7.1f instructions per %s\n", w, v, (b - a) / d, (w == "w2" ? "level" : "task") }'
}
per w2 join 121392
per w2 placed 121392
per w2 heap 121392
per w4 placed 200200
per w4 heap 200200

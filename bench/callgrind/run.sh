#!/usr/bin/env bash
# make bench-callgrind: instruction counts per task of the W1 flood (a
# foreign thread submits N tiny tasks to 2 FIXED workers, then waits),
# through the C API (bench/callgrind/flood.c) and through Rust
# (core/examples/flood_callgrind.rs), one task per call and in batches.
# Callgrind counts instructions, so the submitter's figures repeat to the
# instruction on a noisy machine; the workers' include their idle spinning
# and parking, which depend on timing (see docs/benchmarks.md).
#   CALLGRIND_N      tasks per measured flood (default 200000)
#   CALLGRIND_BATCH  tasks per batch call in the batch variants (default 256)
#   CALLGRIND_ONLY   space-separated subset of: c rust c_batch rust_batch
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${CALLGRIND_N:-200000}
batch=${CALLGRIND_BATCH:-256}
only=${CALLGRIND_ONLY:-c rust c_batch rust_batch}
out=target/callgrind
mkdir -p "$out"
command -v valgrind >/dev/null || { echo "bench-callgrind: valgrind is missing (apt-get install valgrind)"; exit 1; }
[ -e /usr/include/valgrind/callgrind.h ] || { echo "bench-callgrind: valgrind/callgrind.h is missing (apt-get install valgrind)"; exit 1; }

${CARGO:-cargo} build --release -q -p wspool --example flood_callgrind
${C_CC:-gcc} -O2 -g -std=c11 -Wall -Wextra -Werror -Iinclude bench/callgrind/flood.c -o "$out/flood_c" \
  -Ltarget/release "-Wl,-rpath,$PWD/target/release" -lwspool -pthread

# Each variant runs twice: with the measured flood, and with N=0 (the same
# start, warm-up and shutdown without it) so the pool threads' share of the
# flood is the difference.
for v in $only; do
  case $v in
    c | c_batch) bin=("$out/flood_c") ;;
    rust | rust_batch) bin=(target/release/examples/flood_callgrind) ;;
    *) echo "bench-callgrind: unknown variant $v"; exit 1 ;;
  esac
  b=0
  [[ $v == *_batch ]] && b=$batch
  for run in "$v:$n" "${v}_base:0"; do
    dir=$out/${run%%:*}
    rm -rf "${dir:?}" && mkdir -p "$dir"
    valgrind -q --tool=callgrind --separate-threads=yes --callgrind-out-file="$dir/cg.out" \
      "${bin[@]}" "${run##*:}" "$b" > "$dir/stdout"
  done
  echo "bench-callgrind: $v done ($(cat "$out/$v/stdout"))" >&2
done
python3 bench/callgrind/report.py "$out" "$n" "$batch" $only

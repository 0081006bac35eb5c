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
#   CALLGRIND_RUNS   measured runs per variant, the median is reported (default 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${CALLGRIND_N:-200000}
batch=${CALLGRIND_BATCH:-256}
only=${CALLGRIND_ONLY:-c rust c_batch rust_batch}
runs=${CALLGRIND_RUNS:-3}
out=target/callgrind
mkdir -p "$out"
command -v valgrind >/dev/null || { echo "bench-callgrind: valgrind is missing (apt-get install valgrind)"; exit 1; }
[ -e /usr/include/valgrind/callgrind.h ] || { echo "bench-callgrind: valgrind/callgrind.h is missing (apt-get install valgrind)"; exit 1; }

${CARGO:-cargo} build --release -q -p wspool --example flood_callgrind
${C_CC:-gcc} -O2 -g -std=c11 -Wall -Wextra -Werror -Iinclude bench/callgrind/flood.c -o "$out/flood_c" \
  -Ltarget/release "-Wl,-rpath,$PWD/target/release" -lwspool -pthread

# Each variant runs CALLGRIND_RUNS times with the measured flood, and once
# with N=0 (the same start, warm-up and shutdown without it) so the pool
# threads' share of the flood is the difference. Several runs, because the
# interleaving of threads under valgrind decides whether workers park (and
# the submitter then pays for wake-ups): a few runs in ten count more.
for v in $only; do
  case $v in
    c | c_batch) bin=("$out/flood_c") ;;
    rust | rust_batch) bin=(target/release/examples/flood_callgrind) ;;
    *) echo "bench-callgrind: unknown variant $v"; exit 1 ;;
  esac
  b=0
  [[ $v == *_batch ]] && b=$batch
  rm -rf "${out:?}/$v" "$out/${v}_base"
  for ((r = 1; r <= runs; r++)); do
    mkdir -p "$out/$v/run$r"
    valgrind -q --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/$v/run$r/cg.out" \
      "${bin[@]}" "$n" "$b" > "$out/$v/run$r/stdout"
  done
  mkdir -p "$out/${v}_base"
  valgrind -q --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/${v}_base/cg.out" \
    "${bin[@]}" 0 "$b" > "$out/${v}_base/stdout"
  echo "bench-callgrind: $v done ($(cat "$out/$v/run1/stdout"), $runs runs)" >&2
done
python3 bench/callgrind/report.py "$out" "$n" "$batch" $only

#!/usr/bin/env bash
# make bench-callgrind (second part): instructions per task of W1 (spawn
# flood from a foreign thread), W2 (`join` fib) and W4 (groups of 1,000
# children) on ONE fixed worker, through bench/examples/workloads_callgrind.rs.
# Each workload runs with REPS and with 0 reps; the difference, divided by
# the tasks it ran, is what one task costs (start-up and shutdown cancel).
# With one worker there is no steal, spin or park that valgrind's thread
# interleaving could change, so the counts repeat to within a few
# instructions per task.
#   CALLGRIND_REPS   repetitions of each workload (default 2)
#   CALLGRIND_TARGET target dir of the build to measure (default target),
#                    so two trees can be compared with one script
set -euo pipefail
cd "$(dirname "$0")/../.."
reps=${CALLGRIND_REPS:-2}
target=${CALLGRIND_TARGET:-target}
out=$target/callgrind-workloads
mkdir -p "$out"
command -v valgrind >/dev/null || { echo "bench-callgrind: valgrind is missing (apt-get install valgrind)"; exit 1; }
CARGO_TARGET_DIR=$target ${CARGO:-cargo} build --release -q -p wspool-bench --example workloads_callgrind
bin=$target/release/examples/workloads_callgrind

# Ir of a whole run, all threads (the summary callgrind prints at exit).
instructions() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 \
    | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

echo "| workload | tasks per rep | instructions per task |"
echo "|---|---:|---:|"
for w in w1 w2 w4; do
  case $w in
    w1) tasks=100000 ;;      # tiny spawned tasks
    w2) tasks=10945 ;;       # joins in fib_join(20): fib(21) - 1
    w4) tasks=20020 ;;       # 20 roots + 20,000 children
  esac
  full=$(instructions $w "$reps")
  base=$(instructions $w 0)
  python3 -c "print(f'| $w | $tasks | {($full - $base) / ($reps * $tasks):.1f} |')"
done

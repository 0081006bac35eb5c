#!/usr/bin/env bash
# Same harness, two cores: builds bench/ab (W1, W2 join, W4 group and scope,
# rayon beside them) against this tree and against revision REV, then runs
# the two builds in turns, ROUNDS times each, so that what differs between
# the columns is the core alone (the compare bench's own source changes
# between revisions too: its contenders, their order, its pools).
# Usage: bash bench/tools/core_ab.sh REV [ROUNDS (default 5)] [REPS per run (default 9)] [w1 w2 w4 (default: all)]
# Quote the medians of the per-run medians; on a shared machine, run it
# when it is quiet and read the spread as well.
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=${1:?usage: core_ab.sh REV [ROUNDS] [REPS] [w1 w2 w4]}
rounds=${2:-5}
reps=${3:-9}
workloads=("${@:4}")
sha=$(git rev-parse --short "$rev")
work=target/ab
other="$work/tree-$sha"
mkdir -p "$work"
if [ ! -d "$other" ]; then
  git worktree add --detach "$other" "$sha" >/dev/null
fi
rm -rf "$other/bench/ab"
mkdir -p "$other/bench"
cp -r bench/ab "$other/bench/ab"
rm -rf "$other/bench/ab/target"
for side in "this:." "$sha:$other"; do
  name=${side%%:*} tree=${side#*:}
  echo "core_ab: building bench/ab against $name"
  cargo build --quiet --release --manifest-path "$tree/bench/ab/Cargo.toml" --target-dir "$work/target-$name"
done
log="$work/runs-$sha.txt"
: >"$log"
for round in $(seq "$rounds"); do
  for name in "$sha" this; do
    "$work/target-$name/release/wspool-core-ab" "$reps" "${workloads[@]}" | sed "s/^/$name round $round | /" | tee -a "$log"
  done
done
python3 - "$log" "$sha" <<'PY'
import re, statistics, sys
log, sha = sys.argv[1], sys.argv[2]
rows = {}
for line in open(log):
    side, _, rest = line.partition(" round ")
    _, _, rest = rest.partition(" | ")
    name, _, value = rest.rpartition(": ")
    m = re.match(r"([\d.]+)(?: \(([\d.]+)\))?", value)
    rows.setdefault(name, {}).setdefault(side, []).append((float(m.group(1)), m.group(2)))
print(f"\nmedian of {len(next(iter(next(iter(rows.values())).values())))} runs: {sha} | this tree")
for name, sides in rows.items():
    cells = []
    for side in (sha, "this"):
        vals = sides.get(side, [])
        v = statistics.median(x for x, _ in vals)
        ratios = [float(r) for _, r in vals if r]
        cells.append(f"{v:.2f}" + (f" ({statistics.median(ratios):.2f})" if ratios else ""))
    print(f"{name}: {cells[0]} | {cells[1]}")
PY

"""Turns bench/c/scaling.sh's "peer threads key value" lines into one
markdown table per workload: a row per thread count, a column per peer
(medians), and wspool's ratio to oneTBB and to rayon."""
import statistics
import sys
from collections import defaultdict

WORKLOADS = [
    ("W1_mtps", "W1 flood from a foreign thread, M tasks/s (higher is better)", True),
    ("W1b_mtps", "W1 flood in batches of 256, M tasks/s (C API only)", True),
    ("W2_ms", "W2 fork-join fib(25), ms (lower is better)", False),
    ("W3_p50_us", "W3 ping-pong p50, µs (lower is better)", False),
    ("W3_p99_us", "W3 ping-pong p99, µs (lower is better)", False),
    ("W4_mtps", "W4 nested groups, M tasks/s (higher is better)", True),
]
NAMES = {"wspool": "wspool (C)", "rust": "wspool (Rust)", "tbb": "oneTBB", "rayon": "rayon"}


def main(path, reps):
    data = defaultdict(list)
    peers, threads = [], []
    for line in open(path):
        parts = line.split()
        if len(parts) != 4:
            continue
        peer, t, key, value = parts
        t = int(t)
        peers += [peer] if peer not in peers else []
        threads += [t] if t not in threads else []
        data[(peer, t, key)].append(float(value))
    med = {k: statistics.median(v) for k, v in data.items()}
    print(f"\nScaling: medians of {reps} interleaved rounds; wspool's best API (C or Rust) against each peer\n")
    for key, label, higher in WORKLOADS:
        cols = [p for p in peers if any((p, t, key) in med for t in threads)]
        if not cols:
            continue
        ratios = [p for p in ("tbb", "rayon") if p in cols]
        print(f"**{label}**\n")
        print("| threads | " + " | ".join(NAMES.get(p, p) for p in cols) + "".join(f" | wspool / {NAMES[p]}" for p in ratios) + " |")
        print("|---" * (1 + len(cols) + len(ratios)) + "|")
        for t in sorted(threads):
            cells = [f"{med[(p, t, key)]:.2f}" if (p, t, key) in med else "n/a" for p in cols]
            ours = [med[(p, t, key)] for p in ("wspool", "rust") if (p, t, key) in med]
            best = (max if higher else min)(ours) if ours else None
            for p in ratios:
                other = med.get((p, t, key))
                if best is None or not other:
                    cells.append("n/a")
                else:
                    # Always "how many times better": > 1 means wspool wins.
                    cells.append(f"{(best / other) if higher else (other / best):.2f}×")
            print(f"| {t} | " + " | ".join(cells) + " |")
        print()
    print("_Ratios: > 1× means wspool is faster (throughput ratio, or the peer's time over wspool's)._")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "?")

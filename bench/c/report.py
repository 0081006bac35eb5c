"""Aggregates bench/c results ("peer key value" lines, in rounds: run.sh
runs every peer once per round, so the i-th value of a (peer, key) is
round i's) into a markdown table of medians, then the targets as medians
of per-round ratios: each round's wspool figure over the same round's peer
figure, so a round that was slow for every process cancels out. Reported,
not enforced: a 2-core shared machine is noisy."""
import statistics
import sys
from collections import defaultdict

ROWS = [
    ("W1_mtps", "W1 flood, M tasks/s (Rust: Pool::spawn, rayon: ThreadPool::spawn; higher is better)", True),
    ("W1b_mtps", "W1 flood in batches of 256, M tasks/s (wspool_submit_batch; mutex pool: one lock per batch)", True),
    ("W2_ms", "W2 fork-join fib(25), ms (wspool_join; Rust: join; oneTBB: task_group; lower is better)", False),
    ("W2g_ms", "W2 fork-join fib(25), ms (a group per join, wspool_group_init on the stack)", False),
    ("W2gh_ms", "W2 fork-join fib(25), ms (a heap group per join: wspool_group_create)", False),
    ("W3_p50_us", "W3 ping-pong p50, µs (lower is better)", False),
    ("W3_p99_us", "W3 ping-pong p99, µs", False),
    ("W3h_p50_us", "W3 OpenMP hand-off variant p50, µs (see note)", False),
    ("W3h_p99_us", "W3 OpenMP hand-off variant p99, µs", False),
    ("W4_mtps", "W4 nested, M tasks/s (Rust: group_scope per root; rayon: scope per root; higher is better)", True),
    ("W4d_mtps", "W4 with detached children, M tasks/s (no root waits; higher is better)", True),
    ("W7_mtps", "W7 many producers: 4 foreign threads × 250,000 tiny tasks, M tasks/s (higher is better)", True),
    ("W5_cpu_ms_per_s", "W5 idle CPU after W1, ms per s", False),
]
NAMES = {
    "wspool": "wspool (C API)",
    "mutex": "mutex+condvar pool",
    "omp": "OpenMP tasks (libgomp)",
    "tbb": "oneTBB",
    "rust": "wspool (Rust API)",
    "rayon": "rayon",
    "tokio": "tokio (Handle::spawn)",
}


def main(path, reps):
    data = defaultdict(list)
    peers = []
    for line in open(path):
        parts = line.split()
        if len(parts) != 3:
            continue
        peer, key, value = parts
        if peer not in peers:
            peers.append(peer)
        data[(peer, key)].append(float(value))
    med = {k: statistics.median(v) for k, v in data.items()}

    print(f"\nC API benchmarks: medians of {reps} runs, 2 worker threads each\n")
    print("| workload | " + " | ".join(NAMES.get(p, p) for p in peers) + " |")
    print("|---" * (len(peers) + 1) + "|")
    for key, label, _ in ROWS:
        cells = []
        for p in peers:
            v = med.get((p, key))
            cells.append("n/a" if v is None else f"{v:.2f}")
        if any(c != "n/a" for c in cells):
            print(f"| {label} | " + " | ".join(cells) + " |")

    def rounds(peer, key):
        return data.get((peer, key), [])

    def round_ratios(a, b, key_a, key_b=None, inverse=False):
        """Per-round a/b (b/a when lower is better), over the rounds both ran."""
        xs, ys = rounds(a, key_a), rounds(b, key_b or key_a)
        out = []
        for x, y in zip(xs, ys):
            if x > 0 and y > 0:
                out.append(y / x if inverse else x / y)
        return out

    def check(label, rs, target, higher=True):
        if not rs:
            return
        m = statistics.median(rs)
        ok = m >= target if higher else m <= target
        op = ">=" if higher else "<="
        checks.append(f"{label}: median of {len(rs)} per-round ratios {m:.2f}x "
                      f"(rounds {min(rs):.2f}-{max(rs):.2f}; target {op} {target}x): {'met' if ok else 'NOT met'}")

    def best_peer(candidates, key, higher=True):
        have = [p for p in candidates if (p, key) in med]
        if not have:
            return None
        return (max if higher else min)(have, key=lambda p: med[(p, key)])

    print()
    checks = []
    check("W1 through C: wspool / mutex pool", round_ratios("wspool", "mutex", "W1_mtps"), 2.0)
    w1 = rounds("wspool", "W1_mtps")
    if w1:
        r = min(w1) / max(w1)
        checks.append(f"W1 through C, steadiness: slowest round / fastest round = {r:.2f} "
                      f"({min(w1):.2f} / {max(w1):.2f} M/s; target >= 0.67): {'met' if r >= 0.67 else 'NOT met'}")
    check("W2 join through Rust: wspool::join time / rayon::join time",
          round_ratios("rust", "rayon", "W2_ms"), 1.0, higher=False)
    # OpenMP's taskwait runs the task on the waiting thread (no hand-off): W3
    # compares with the peers whose W3 is a hand-off to a worker.
    best = best_peer([p for p in peers if p not in ("wspool", "omp", "rust")], "W3_p50_us", higher=False)
    if best:
        check(f"W3 p50 (submit + wait): wspool / best hand-off peer ({best})",
              round_ratios("wspool", best, "W3_p50_us"), 1.0, higher=False)
    best = best_peer(["omp", "mutex"], "W4d_mtps")
    if best:
        check(f"W4 detached through C: wspool / best of OpenMP and mutex pool ({best})",
              round_ratios("wspool", best, "W4d_mtps"), 1.0)
    check("W4 with a stack group through C: wspool / oneTBB task_group", round_ratios("wspool", "tbb", "W4_mtps"), 1.2)
    check("W4 through Rust (group_scope): wspool / oneTBB", round_ratios("rust", "tbb", "W4_mtps"), 1.0)
    check("W7 through C: wspool / oneTBB", round_ratios("wspool", "tbb", "W7_mtps"), 2.0)
    check("W7 through Rust: wspool / oneTBB", round_ratios("rust", "tbb", "W7_mtps"), 2.0)
    check("W7 through Rust: wspool / rayon", round_ratios("rust", "rayon", "W7_mtps"), 1.0)
    check("W7 through Rust: wspool / tokio", round_ratios("rust", "tokio", "W7_mtps"), 1.0)
    idle = rounds("wspool", "W5_cpu_ms_per_s")
    if idle:
        m = statistics.median(idle)
        checks.append(f"W5 idle CPU after W1 through C: median {m:.3f} ms per s (target <= 0.1): "
                      f"{'met' if m <= 0.1 else 'NOT met'}")
    for c in checks:
        print("- " + c)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "?")

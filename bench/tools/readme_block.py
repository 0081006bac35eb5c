#!/usr/bin/env python3
"""Puts a run of the Rust comparison suite into docs/benchmarks.md's bench block.

    cargo bench -p wspool-bench --bench compare > /tmp/bench.md
    python3 bench/tools/readme_block.py /tmp/bench.md 'quiet 16-core Intel Xeon VM' summary.md

summary.md is a hand-written paragraph: which targets are met, and why the
others are not. docs/benchmarks.md is read fresh and only the block between
<!-- BEGIN:bench --> and <!-- END:bench --> is replaced, in one write.
"""
import datetime
import pathlib
import sys

HEAD = """## Benchmarks: wspool beside rayon, threadpool and tokio (Rust)

```sh
make bench-rust                                               # = cargo bench -p wspool-bench --bench compare  (3-6 min)
cargo bench -p wspool-bench --bench compare -- --quick        # smoke run with smaller workloads (~30 s)
cargo bench -p wspool-bench --bench compare -- w1 w3          # only the named workloads
WSPOOL_BENCH_THREADS=4 WSPOOL_BENCH_REPS=15 make bench-rust   # other pool sizes / more repetitions
```

`bench/` (crate `wspool-bench`) runs every contender in the same process
and measures them the same way: one warm-up round, then
`WSPOOL_BENCH_REPS` (default 9) rounds in which the contenders run
interleaved, each round starting with the next contender, with a 20 ms
pause before every run so the previous pool's threads are asleep. Tables
give the median and the min–max; ratios are medians divided by the best
peer's median. A development machine is often shared, so the
harness also watches the rest of the machine (`/proc/stat` busy time minus
its own CPU time): it waits up to 2 s per round for other processes to go
quiet, repeats once any run of 50 ms or more during which they used more
than half a core anyway, and prints under every table how busy the machine
was (`WSPOOL_BENCH_QUIET=0` turns waiting and repeating off). Peers are
pinned: rayon 1.12.0, threadpool 1.8.1, tokio 1.54.1 (`rt-multi-thread`).
Every pool has 2 workers (`WSPOOL_BENCH_THREADS`) except in W6. Under each
table, wspool's own stats for that row's pool (peak threads, starvation
injections, steals, spin hits) say what the pool did.

| | Workload |
| --- | --- |
| W1 | a foreign thread submits 1,000,000 tiny tasks (a relaxed `fetch_add`), then waits for all |
| W2 | fork-join `fib(25)`, every level forked (`join`, and the scope / group / submit versions) |
| W3 | ping-pong: submit one task, wait for it, 50,000 times; p50 and p99 of the round trip |
| W4 | 200 root tasks each spawn 1,000 children and wait for them |
| W5 | CPU used by the idle pool's threads in the 2 s after a W1 flood (`/proc/self/task/*/schedstat`) |
| W6 | 200 tasks each sleeping 10 ms on a pool with `min_threads(2)`: declared with `wspool::blocking`, and undeclared (only the starvation monitor can help), beside fixed 4-thread pools |
"""


def block(report: str, what: str, summary: str) -> str:
    body = []
    for line in report.splitlines():
        if line.startswith("## ") or line.startswith("compare: running"):
            continue
        if line.startswith("### "):
            line = "#### " + line[4:]
        body.append(line)
    text = "\n".join(body).strip()
    t0, t1 = text.index("#### Targets"), text.index("Load average after")
    workloads, targets, tail = text[:t0].strip(), text[t0:t1].strip(), text[t1:].strip()
    targets = targets.split("\n", 1)[1].strip()
    intro, workloads = workloads.split("\n", 1)
    date = datetime.date.today().isoformat()
    return (
        f"{HEAD}\n### Measured ({date}, {what})\n\n"
        f"{intro}\n\n{targets}\n\n{summary.strip()}\n\n"
        f"<details><summary>All tables of that run</summary>\n\n{workloads.strip()}\n\n{tail}\n\n</details>"
    )


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    report, what, summary = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]).read_text()
    new = block(pathlib.Path(report).read_text(), what, summary)
    readme = pathlib.Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
    s = readme.read_text()
    b, e = "<!-- BEGIN:bench -->", "<!-- END:bench -->"
    i, j = s.find(b), s.find(e)
    if i < 0 or j < i:
        print("docs/benchmarks.md has no bench block markers", file=sys.stderr)
        return 1
    readme.write_text(s[: i + len(b)] + "\n" + new + "\n" + s[j:])
    return 0


if __name__ == "__main__":
    sys.exit(main())

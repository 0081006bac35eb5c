#!/usr/bin/env python3
"""make bench-axum: the axum server (examples-rust/http_axum) with its /work
awaited on wspool, on tokio's spawn_blocking and on rayon + a oneshot
channel, under the load of the C examples' "control" section
(tests/embed/bench.py): /work?n=N sized to ~1 ms, open loop at 2x what 2
threads serve over 62 connections, each due 20 ms after its X-Request-Start
stamp (--work-deadline-ms 20: work not started in time is answered 503
"expired"), and /ping closed loop on 2 connections, answered on the tokio
runtime's thread in every mode. Each round first runs the same load for 1 s
(a warm-up, not measured: the deadline reserve is learnt from served
replies). The three modes, and wspool with its spinning off and with its
threads 19 nicer than the runtime's, take turns round by round (same run),
medians of --rounds.

    bench_http.py --server target/axum/release/http_axum --load target/embed/httpload [--rounds 5] [--seconds 3]

Uses the C bench's helpers (start, stop, load, size_work, interleaved, the
"others" column: CPU the rest of the machine used meanwhile, in cores).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "embed"))
import bench  # noqa: E402  (tests/embed/bench.py)


def main():
    a = bench.server_bench_args("target/axum/release/http_axum")
    n, capacity = bench.size_work(a.load, a.server)
    offered = 2 * capacity
    work = f"/work?n={n}"
    modes = [
        ("axum + wspool (`submit_with(..).await`, deadline)", a.server, ["--mode", "wspool"], None),
        ("axum + wspool, `--spin-us 0`", a.server, ["--mode", "wspool", "--spin-us", "0"], None),
        ("axum + wspool, `--worker-nice 19`", a.server, ["--mode", "wspool", "--worker-nice", "19"], None),
        ("axum + `spawn_blocking` (start-by checked in the closure)", a.server, ["--mode", "spawn_blocking"], None),
        ("axum + rayon + oneshot (start-by checked in the closure)", a.server, ["--mode", "rayon"], None),
    ]
    print(f"### axum: /work?n={n} (~1 ms) open loop at {offered:,.0f} req/s over 62 conns (2x the capacity of "
          f"2 threads, ≈ {capacity:,.0f} req/s), due 20 ms after X-Request-Start, + /ping closed loop on 2 conns "
          f"(medians of {a.rounds} x {a.seconds:g} s, modes taking turns)\n")
    print("| mode | /ping p50 (ms) | /ping p99 (ms) | /ping req/s | /work served/s | /work served p99 (ms) "
          "| /work 503/s | expired | answered late (server) | others (cores) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    groups = (f"62:{offered:.0f}:{work}", "2:0:/ping")
    counters = ("http_expired_total", "http_answered_late_total")

    def one(b, args, _env):
        p, port = bench.start(b, "--threads", "2", "--work-deadline-ms", "20", *args)
        bench.load(a.load, port, 1, *groups)  # warm-up
        before = [bench.server_metric(port, c) for c in counters]
        r = bench.load(a.load, port, a.seconds, *groups, server_pid=p.pid)
        expired, late = (bench.server_metric(port, c) - b0 for c, b0 in zip(counters, before))
        bench.stop(p)  # asserts exit 0: every request handed off ended
        return (r, expired, late), bench.OTHERS.pop()

    for (name, _, _, _), runs in bench.interleaved(modes, a.rounds, one):
        res = [x for x, _ in runs]
        bench.OTHERS.extend(o for _, o in runs)
        print(f"| {name} | {bench.control_cells(res, work, a.seconds)} | {bench.med([x[2] for x in res]):.0f} "
              f"| {bench.others()} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""make bench-cpp, part 1: the Boost.Beast server (examples-cpp/http_beast)
under the HTTP mix of the C examples' bench (tests/embed/bench.py): 64
keep-alive connections, 3 on /sleep?ms=50 and 61 on /ping (closed loop), 2
worker threads; /ping p50/p99 with the handlers

  - on wspool, awaited with wspool::async_run and no per-request options (--mode pool --plain),
  - on wspool with per-request options (--mode pool: /ping at high priority,
    /sleep in a lane of 2),
  - inline on the io_context (--mode inline: a /sleep stalls the loop),
  - on a plain std::thread pool of 2 (--mode threads),

the four taking turns round by round (same run), medians of --rounds.

    bench_http.py --server examples-cpp/bin/http_beast --load target/embed/httpload [--rounds 5] [--seconds 3]

Uses the C bench's helpers (start, stop, load, interleaved, the "others"
column: CPU the rest of the machine used meanwhile, in cores).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "embed"))
import bench  # noqa: E402  (tests/embed/bench.py)


def main():
    a = bench.server_bench_args("examples-cpp/bin/http_beast")
    servers = [
        ("Beast + wspool, no options (--mode pool --plain)", a.server, ["--mode", "pool", "--plain"], None),
        ("Beast + wspool, /ping high, /sleep lane of 2 (--mode pool)", a.server, ["--mode", "pool"], None),
        ("Beast, handlers inline on the io_context (--mode inline)", a.server, ["--mode", "inline"], None),
        ("Beast + std::thread pool of 2 (--mode threads)", a.server, ["--mode", "threads"], None),
    ]
    print(f"### Beast HTTP mix: 61 conns /ping + 3 conns /sleep?ms=50, 2 threads "
          f"(medians of {a.rounds} x {a.seconds:g} s, servers taking turns)\n")
    print("| server | /ping p50 (ms) | /ping p99 (ms) | /ping req/s | /sleep p50 (ms) | others (cores) |")
    print("|---|---:|---:|---:|---:|---:|")

    def mix_round(b, args, env):
        p, port = bench.start(b, "--threads", "2", *args, env=env)
        r = bench.load(a.load, port, a.seconds, "61:0:/ping", "3:0:/sleep?ms=50", server_pid=p.pid)
        bench.stop(p)
        return r, bench.OTHERS.pop()

    for (name, _, _, _), runs in bench.interleaved(servers, a.rounds, mix_round):
        rows = [r for r, _ in runs]
        bench.OTHERS.extend(o for _, o in runs)
        ping = [r["/ping"] for r in rows]
        sl = [r["/sleep?ms=50"] for r in rows]
        med = bench.med
        print(f"| {name} | {med([x['ok_p50_us'] for x in ping]) / 1000:.2f} "
              f"| {med([x['ok_p99_us'] for x in ping]) / 1000:.2f} "
              f"| {med([x['ok'] for x in ping]) / a.seconds:,.0f} "
              f"| {med([x['ok_p50_us'] for x in sl]) / 1000:.1f} | {bench.others()} |")


if __name__ == "__main__":
    main()

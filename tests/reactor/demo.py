#!/usr/bin/env python3
"""Demo and benchmark of the reactor server: reactor mode beside the blocking control.

    python3 tests/reactor/demo.py --bin examples-c/bin [--seconds 2] [--markdown]

For each server mode it starts examples-c/bin/reactor_server with 2 workers
on an ephemeral loopback port, runs examples-c/bin/loadgen against it (PING
and WORK mixes, 2 and 64 connections), prints requests/s, p50/p99 latency and
how many connections were never answered, then what the pool did (from the
server's STATS line), and a closing table of every run.

  reactor           the epoll reactor: connections cost an fd, not a worker
  blocking          seed 002's design: one pool task per connection, blocked
                    in recv(), on a fixed pool of 2 (hardware_concurrency)
  blocking+adaptive the same broken design on wspool's default adaptive
                    pool: the starvation monitor adds threads until every
                    connection has one (it rescues, at a thread per client)
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reactor_util import Server, raise_nofile, wait_until  # noqa: E402

WORK_N = 20000

MODES = [
    ("reactor", ["--mode", "reactor", "--workers", "2"]),
    ("blocking", ["--mode", "blocking", "--workers", "2"]),
    ("blocking+adaptive", ["--mode", "blocking", "--workers", "2", "--growth", "adaptive"]),
]

RUNS = [
    # (label, conns, depth, work_pct)
    ("ping", 2, 1, 0),
    ("ping", 64, 1, 0),
    ("work", 64, 1, 100),
    ("ping+10%work", 64, 1, 10),
    ("ping, pipelined x16", 64, 16, 0),
]


def loadgen(bin_dir, port, conns, depth, work_pct, seconds, stats=False):
    cmd = [os.path.join(bin_dir, "loadgen"), "--port", str(port), "--conns", str(conns),
           "--depth", str(depth), "--duration", str(seconds), "--work-pct", str(work_pct),
           "--work-n", str(WORK_N), "--json"]
    if stats:
        cmd.append("--stats")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    lines = p.stdout.strip().splitlines()
    result = json.loads(lines[0]) if lines else {}
    result["rc"] = p.returncode
    result["stderr"] = p.stderr.strip()
    result["stats"] = next((l[6:] for l in lines[1:] if l.startswith("STATS ")), None)
    return result


def parse_stats(stats_line):
    """The server's STATS JSON line as a dict (empty when it did not answer)."""
    try:
        return json.loads(stats_line) if stats_line and stats_line.startswith("{") else {}
    except ValueError:
        return {}


def pool_summary(stats_line):
    """The server's STATS JSON line as one readable sentence."""
    s = parse_stats(stats_line)
    if not s:
        return "pool stats: %s" % (stats_line or "(none)")
    srv = s.get("server", {})
    return ("pool: %d threads now, peak %d, %d started, %d added by the starvation monitor; "
            "%d tasks run, %d steals; server: %d connections accepted, %d open" % (
                s.get("threads", 0), s.get("peak_threads", 0), s.get("threads_started", 0),
                s.get("starvation_injections", 0), s.get("completed", 0), s.get("steals", 0),
                srv.get("accepted", 0), srv.get("connections_open", 0)))


def late_client(srv, idle_count, wait_s):
    """Seed 002's scenario: idle persistent connections, then one late PING.
    Returns a sentence with the late client's latency."""
    idle = []
    try:
        for _ in range(idle_count):
            idle.append(srv.connect())
        if srv.fields.get("mode") == "reactor":
            wait_until(lambda: srv.stats()["server"]["connections_open"] >= idle_count, 60)
        t0 = time.monotonic()
        late = srv.connect()
        late.send("PING\n")
        try:
            answer = late.readline(timeout=wait_s)
        except socket.timeout:
            answer = None
        dt = (time.monotonic() - t0) * 1e3
        if answer == "PONG":
            return late, idle, "PONG in %.1f ms" % dt
        return late, idle, "NO ANSWER within %.0f ms (every worker is blocked in recv() on an idle client)" % dt
    except BaseException:
        for c in idle:
            c.close()
        raise


def show_late_client(srv, mode, c10k):
    late, idle, what = late_client(srv, 128, 2.0)
    print("  late client, 128 idle connections open: %s" % what, flush=True)
    for c in idle:
        c.close()
    if not what.startswith("PONG"):
        t0 = time.monotonic()
        try:
            ans = late.readline(timeout=30)
        except socket.timeout:
            ans = None
        print("  ... once the idle clients hung up: %s after %.0f ms" % (ans, (time.monotonic() - t0) * 1e3),
              flush=True)
    late.close()
    if mode == "reactor" and c10k:
        ok, soft, hard = raise_nofile(10512)
        if not ok or int(srv.fields.get("nofile", 0)) < 10512:
            print("  (10,000 idle connections skipped: RLIMIT_NOFILE hard limit %s is too low)" % hard)
            return
        base = srv.stats()["server"]["rss_kb"]
        late, idle, what = late_client(srv, 10000, 2.0)
        rss = srv.stats()["server"]["rss_kb"]
        print("  late client, 10,000 idle connections open: %s; server RSS +%d KiB (%.0f bytes per "
              "connection), %d pool threads" % (what, rss - base, (rss - base) * 1024 / 10000,
                                                 srv.stats()["threads"]), flush=True)
        late.close()
        for c in idle:
            c.close()
        wait_until(lambda: srv.stats()["server"]["connections_open"] <= 1, 60)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="examples-c/bin")
    ap.add_argument("--seconds", type=int, default=2)
    ap.add_argument("--markdown", action="store_true", help="also print a markdown table")
    ap.add_argument("--modes", default=",".join(m for m, _ in MODES))
    ap.add_argument("--quick", action="store_true",
                    help="only the PING and WORK runs with 64 connections, and no 10,000-connection step")
    args = ap.parse_args()
    server = os.path.join(args.bin, "reactor_server")
    wanted = args.modes.split(",")
    rows = []
    peaks = {}  # mode -> the pool's peak thread count, from its STATS line
    ok = True
    print("reactor demo: %d s per run, 2 pool workers, WORK = %d hash rounds; loopback, %d CPUs" % (
        args.seconds, WORK_N, os.cpu_count()), flush=True)
    for mode, flags in MODES:
        if mode not in wanted:
            continue
        print("\n== %s: reactor_server %s" % (mode, " ".join(flags)), flush=True)
        runs = [r for r in RUNS if not args.quick or (r[1] == 64 and r[2] == 1 and r[3] in (0, 100))]
        with Server(server, *flags) as srv:
            show_late_client(srv, mode, c10k=not args.quick)
            for i, (mix, conns, depth, pct) in enumerate(runs):
                last = i == len(runs) - 1
                r = loadgen(args.bin, srv.port, conns, depth, pct, args.seconds, stats=last)
                if r["rc"] != 0 or r.get("errors"):
                    ok = False
                    print("  loadgen failed (rc %s): %s" % (r["rc"], r["stderr"]))
                row = dict(mode=mode, mix=mix, conns=conns, depth=depth, rps=r.get("rps", 0),
                           p50=r.get("p50_us", 0), p99=r.get("p99_us", 0),
                           starved=r.get("starved_conns", 0), unanswered=r.get("unanswered", 0))
                rows.append(row)
                print("  %-20s %3d conns x %-2d %9.0f req/s  p50 %8.1f us  p99 %9.1f us  "
                      "never answered %d/%d" % (mix, conns, depth, row["rps"], row["p50"], row["p99"],
                                                row["starved"], conns), flush=True)
                if last:
                    print("  " + pool_summary(r["stats"]), flush=True)
                    peaks[mode] = parse_stats(r["stats"]).get("peak_threads")
    print("\n  %-18s %-20s %13s %10s %8s %9s %15s" % (
        "mode", "load", "conns x depth", "req/s", "p50 us", "p99 us", "never answered"))
    for r in rows:
        print("  %-18s %-20s %13s %10.0f %8.0f %9.0f %15s" % (
            r["mode"], r["mix"], "%d x %d" % (r["conns"], r["depth"]), r["rps"], r["p50"], r["p99"],
            "%d of %d" % (r["starved"], r["conns"])))
    starved = [r for r in rows if r["starved"]]
    print("\n  summary: %s" % (
        "the reactor answered every connection; the blocking design left %d of %d connections unanswered "
        "(its workers sit in recv() on idle clients)" % (max(r["starved"] for r in starved), starved[0]["conns"])
        if starved and not any(r["starved"] for r in rows if r["mode"] == "reactor")
        else "%d of %d runs left connections unanswered" % (len(starved), len(rows))))
    adaptive = [r for r in rows if r["mode"] == "blocking+adaptive"]
    if adaptive and not any(r["starved"] for r in adaptive):
        print("  blocking+adaptive answered everyone too, but only by growing to %s threads, about one per "
              "client;\n  the reactor's pool peaked at %s threads." % (peaks.get("blocking+adaptive", "?"),
                                                                      peaks.get("reactor", "?")))
    if args.markdown:
        print("\n| mode | load | conns x depth | req/s | p50 µs | p99 µs | connections never answered |")
        print("|---|---|---|---:|---:|---:|---:|")
        for r in rows:
            print("| %s | %s | %d x %d | %.0f | %.0f | %.0f | %d |" % (
                r["mode"], r["mix"], r["conns"], r["depth"], r["rps"], r["p50"], r["p99"], r["starved"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

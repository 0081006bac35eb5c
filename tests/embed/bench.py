#!/usr/bin/env python3
"""bench-embed: the issue 14 figures, medians of --rounds rounds, as markdown.

    bench.py --bin examples-c/bin --load target/embed/httpload [--rounds 3] [--seconds 3]

1. HTTP mix: 64 keep-alive connections, 3 on /sleep?ms=50 and 61 on /ping
   (closed loop), min_threads 2: /ping p50/p99 on http_libuv and
   http_libevent (wspool completion queue) and http_libuv --uv-work
   (uv_queue_work, UV_THREADPOOL_SIZE=2).
2. CPU per /ping: 64 connections at an open-loop 10,000 req/s; the server's
   utime+stime (from /proc) over the run divided by the requests served.
   wspool with default spinning, with spinning off (--spin-us 0), and
   uv_queue_work.
3. Overload: /work?n=N with N sized to ~1 ms, open loop at ~2x the capacity
   of 2 threads, on http_libuv with the default 5 ms target / 5 ms interval:
   served p99 vs 3x the target, and how fast the excess gets its 503.
4. Per-request control (issue 29), section "control": /ping at high
   priority beside /work at 2x capacity (against --plain, today's FIFO);
   /work with 20 ms deadlines (CoDel off): served p99, expired requests,
   replies the server wrote after their due time and requests begun after
   their deadline, both by the server's own clock. Each round first runs the
   same load for 1 s (a warm-up, not measured): the deadline reserve is
   learnt from served replies, and a cold start is its own row. /ping is a
   closed loop on 2 connections, and in two rows a health check's open loop
   of 1,000 req/s (the closed loop sends more the faster it is answered).
5. Section "lanes": 64 connections of /sleep?ms=50 in a lane of 2 beside
   /ping, CoDel off: /ping p99 and the most /sleep requests running at
   once (against --plain).

Every section also has rows with the pool's threads 19 nicer than the loop
(`--worker-nice 19`, the pool's thread_nice); more with --variant.

Servers take turns round by round (not all rounds of one, then the next),
so a burst of load from others lands on all of them alike. Every table also
says how loaded the machine was: "others" is the CPU the
rest of the machine (not this server, not the client) used during the
measured rounds, in cores, from /proc/stat (median over the rounds). On a
shared 2-core VM that is the first thing to read next to a tail latency.
"""
import argparse
import os
import re
import resource
import signal
import statistics
import subprocess
import time
import urllib.request


def start(binpath, *args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.Popen([binpath, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
    m = re.match(r"listening on (\d+)", p.stdout.readline())
    assert m, p.stderr.read()
    return p, int(m.group(1))


def stop(p):
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_s():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal: all but idle and iowait
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# CPU used by everything but the measured server and client, per measured round (cores).
OTHERS = []


def load(tool, port, seconds, *groups, server_pid=None):
    m0, c0 = machine_busy_s(), children_cpu_s()
    s0 = cpu_s(server_pid) if server_pid else 0.0
    t0 = time.monotonic()
    out = subprocess.run([tool, str(port), str(seconds), *groups], capture_output=True, text=True,
                         timeout=seconds + 60, check=True).stdout
    if server_pid:
        wall = time.monotonic() - t0
        ours = (children_cpu_s() - c0) + (cpu_s(server_pid) - s0)
        OTHERS.append(max(0.0, machine_busy_s() - m0 - ours) / wall)
    res = {}
    for line in out.splitlines():
        kv = dict(x.split("=", 1) for x in line.split())
        res[kv["path"]] = {k: (int(v) if k != "path" else v) for k, v in kv.items()}
    return res


def others():
    """The median load from others over the rounds measured since the last call."""
    v = med(OTHERS) if OTHERS else 0.0
    OTHERS.clear()
    return f"{v:.2f}"


def interleaved(servers, rounds, one_round):
    """Round-robin over the servers, `rounds` times, so a burst of load from
    others lands on every server's rounds alike; yields each server with its
    list of `one_round(binary, args, env)` results."""
    got = [[] for _ in servers]
    for _ in range(rounds):
        for i, (_, b, args, env) in enumerate(servers):
            got[i].append(one_round(b, args, env))
    return zip(servers, got)


def server_metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return float("nan")


def size_work(tool, binpath, *args):
    """/work?n=N sized to ~1 ms on server `binpath` (2 threads, `args`), and
    how many of them 2 threads serve per second: the best of three 1 s runs,
    what they serve when they get the CPU (a burst of load from others during
    one measurement would understate it and make a "2x" overload milder than
    it says). Returns (N, capacity)."""
    p, port = start(binpath, "--threads", "2", *args)
    n = 200000
    r = load(tool, port, 1, f"1:0:/work?n={n}")[f"/work?n={n}"]
    n = max(1000, int(n * 1000 / max(r["ok_p50_us"], 1)))
    capacity = max(load(tool, port, 1, f"2:0:/work?n={n}")[f"/work?n={n}"]["ok"] for _ in range(3))
    stop(p)
    return n, capacity


def server_bench_args(server):
    """The arguments of the benches of one server in several modes (bench-cpp,
    bench-axum): --server (default `server`), --load, --rounds, --seconds."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=server)
    ap.add_argument("--load", default="target/embed/httpload")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3)
    return ap.parse_args()


def med(xs):
    return statistics.median(xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="examples-c/bin")
    ap.add_argument("--load", default="target/embed/httpload")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--only", default="mix,cpu,overload,control,lanes", help="sections to run, comma-separated")
    ap.add_argument("--nice", default="", help="other --worker-nice values for overload rows")
    ap.add_argument("--variant", action="append", default=["--worker-nice 19"],
                    help="extra server arguments for another row of each wspool server in every section")
    a = ap.parse_args()
    only = set(a.only.split(","))
    uv, ev = f"{a.bin}/http_libuv", f"{a.bin}/http_libevent"
    uvenv = {"UV_THREADPOOL_SIZE": "2"}
    servers = [
        ("libuv + wspool cq", uv, [], None),
        ("libevent + wspool cq", ev, [], None),
        ("libuv uv_queue_work (UV_THREADPOOL_SIZE=2)", uv, ["--uv-work"], uvenv),
    ]
    variants = [(f"{n} ({v})", b, v.split(), e) for v in a.variant for n, b, _, e in servers[:2]]
    # The same two servers with the pool's spinning off: what the spin
    # heuristic costs a loop sharing two cores with its pool.
    mix_servers = servers[:2] + [(n + " (--spin-us 0)", b, ["--spin-us", "0"], e) for n, b, _, e in servers[:2]] + variants + servers[2:]

    if "mix" in only:
        print(f"### HTTP mix: 61 conns /ping + 3 conns /sleep?ms=50, min_threads 2 (medians of {a.rounds} x {a.seconds:g} s)\n")
        print("| server | /ping p50 (ms) | /ping p99 (ms) | /ping req/s | /sleep p50 (ms) | others (cores) |")
        print("|---|---:|---:|---:|---:|---:|")
        def mix_round(b, args, env):
            p, port = start(b, "--threads", "2", *args, env=env)
            r = load(a.load, port, a.seconds, "61:0:/ping", "3:0:/sleep?ms=50", server_pid=p.pid)
            stop(p)
            return r, OTHERS.pop()

        for (name, b, args, env), runs in interleaved(mix_servers, a.rounds, mix_round):
            rows = [r for r, _ in runs]
            OTHERS.extend(o for _, o in runs)
            ping = [r["/ping"] for r in rows]
            sl = [r["/sleep?ms=50"] for r in rows]
            print(f"| {name} | {med([x['ok_p50_us'] for x in ping]) / 1000:.2f} | {med([x['ok_p99_us'] for x in ping]) / 1000:.2f} "
                  f"| {med([x['ok'] for x in ping]) / a.seconds:,.0f} | {med([x['ok_p50_us'] for x in sl]) / 1000:.1f} | {others()} |")

    if "cpu" in only:
        rate = 10000
        print(f"\n### Server CPU per /ping: 64 conns, open loop {rate:,} req/s (medians of {a.rounds} x {a.seconds:g} s)\n")
        print("| server | CPU per request (µs) | served | p99 (ms) | others (cores) |")
        print("|---|---:|---:|---:|---:|")
        cpu_servers = [
            ("libuv + wspool cq (spin default)", uv, [], None),
            ("libuv + wspool cq (--spin-us 0)", uv, ["--spin-us", "0"], None),
            ("libevent + wspool cq (spin default)", ev, [], None),
            ] + variants + [("libuv uv_queue_work (UV_THREADPOOL_SIZE=2)", uv, ["--uv-work"], uvenv)]
        def cpu_round(b, args, env):
            p, port = start(b, "--threads", "2", *args, env=env)
            load(a.load, port, 0.5, f"64:{rate}:/ping")  # warm-up
            c0 = cpu_s(p.pid)
            r = load(a.load, port, a.seconds, f"64:{rate}:/ping", server_pid=p.pid)["/ping"]
            c1 = cpu_s(p.pid)
            stop(p)
            return ((c1 - c0) / max(r["ok"], 1) * 1e6, r["ok"], r["ok_p99_us"]), OTHERS.pop()

        for (name, b, args, env), runs in interleaved(cpu_servers, a.rounds, cpu_round):
            per, served, p99 = zip(*(r for r, _ in runs))
            OTHERS.extend(o for _, o in runs)
            print(f"| {name} | {med(per):.1f} | {med(served):,.0f} | {med(p99) / 1000:.2f} | {others()} |")

    if "overload" in only:
        # Size /work to ~1 ms, then load it at ~2x what 2 threads can serve.
        n, capacity = size_work(a.load, uv, "--target-us", "0")
        offered = 2 * capacity
        print(f"\n### Overload: /work?n={n} (~1 ms), capacity of 2 threads ≈ {capacity:,.0f} req/s, "
              f"offered {offered:,.0f} req/s open loop over 64 conns; target 5 ms, interval 5 ms "
              f"(medians of {a.rounds} x {a.seconds:g} s)\n")
        print("| server | served/s | shed (503)/s | served p50 (ms) | served p99 (ms) | 503 p50 (ms) | 503 p99 (ms) "
              "| overload trips | lost | others (cores) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        # The --worker-nice 19 rows: the 503 tail at the pool's priority is
        # the loop thread waiting for a CPU behind its own CPU-bound workers.
        overload_servers = servers[:2] + [(n + f" (--worker-nice {k})", b, ["--worker-nice", k], e)
                                          for k in a.nice.split(",") if k for n, b, _, e in servers[:2]] + variants
        def overload_round(b, args, env):
            p, port = start(b, "--threads", "2", "--target-us", "5000", "--interval-us", "5000", *args, env=env)
            r = load(a.load, port, a.seconds, f"64:{offered:.0f}:/work?n={n}", server_pid=p.pid)[f"/work?n={n}"]
            trips = server_metric(port, "http_overload_signals_total")
            stop(p)  # asserts exit 0: every accepted request saw exactly one done
            return (r, trips), OTHERS.pop()

        for (name, b, args, env), runs in interleaved(overload_servers, a.rounds, overload_round):
            rows, trips = zip(*(r for r, _ in runs))
            OTHERS.extend(o for _, o in runs)
            f = lambda k: med([x[k] for x in rows])  # noqa: E731
            lost = med([x["sent"] - x["ok"] - x["shed"] - x["other"] for x in rows])
            print(f"| {name} | {f('ok') / a.seconds:,.0f} | {f('shed') / a.seconds:,.0f} | {f('ok_p50_us') / 1000:.2f} "
                  f"| {f('ok_p99_us') / 1000:.2f} | {f('shed_p50_us') / 1000:.3f} | {f('shed_p99_us') / 1000:.3f} "
                  f"| {med(trips):.0f} | {lost:.0f} in flight at the end | {others()} |")

    if "control" in only:
        control(a, uv, ev)
    if "lanes" in only:
        lanes(a, uv, ev)


def control(a, uv, ev):
    """Section 4: priorities, deadlines and lanes in the HTTP examples (issue 29)."""
    n, capacity = size_work(a.load, uv, "--target-us", "0")
    offered = 2 * capacity
    work = f"/work?n={n}"
    print(f"\n### Per-request control: /work?n={n} (~1 ms) open loop at {offered:,.0f} req/s over 62 conns "
          f"(2x the capacity of 2 threads, ≈ {capacity:,.0f} req/s) + /ping on 2 conns, closed loop unless the "
          f"row says (medians of {a.rounds} x {a.seconds:g} s)\n")
    print("| server | /ping p50 (ms) | /ping p99 (ms) | /ping req/s | /work served/s | /work served p99 (ms) "
          "| /work 503/s | expired | answered late (server) | begun after deadline (most late) | others (cores) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    closed, health_check = "2:0:/ping", "2:1000:/ping"
    deadline = ["--target-us", "0", "--work-deadline-ms", "20"]
    rows = []  # (name, binary, server args, (/ping group, warm up first))
    for name, b in (("libuv", uv), ("libevent", ev)):
        rows += [
            (f"{name}: --plain (today: one FIFO), CoDel 5 ms", b, ["--plain"], (closed, True)),
            (f"{name}: /ping high priority, CoDel 5 ms", b, [], (closed, True)),
            (f"{name}: /ping high, /work deadline 20 ms, CoDel off", b, deadline, (closed, True)),
            (f"{name}: /ping high, /work deadline 20 ms, CoDel off, --worker-nice 19", b,
             deadline + ["--worker-nice", "19"], (closed, True)),
        ]
    rows += [
        ("libuv: /ping high, /work deadline 20 ms, CoDel off, cold start (no warm-up)", uv, deadline, (closed, False)),
        # A health check's rate instead of as many /ping as 2 connections can send: the closed loop
        # sends more the faster they are answered, and that CPU comes out of /work.
        ("libuv: /ping high, /work deadline 20 ms, CoDel off, /ping open loop 1,000/s", uv, deadline,
         (health_check, True)),
        ("libuv: same, --worker-nice 19", uv, deadline + ["--worker-nice", "19"], (health_check, True)),
    ]
    counters = ("wspool_expired_tasks_total", "http_answered_late_total", "http_started_late_total")

    def one(b, args, how):
        """One round; `how` (interleaved's env slot) is (the /ping group, whether to warm up for 1 s)."""
        ping, warm = how
        p, port = start(b, "--threads", "2", *args)
        if warm:
            load(a.load, port, 1, f"62:{offered:.0f}:{work}", ping)
        before = [server_metric(port, c) for c in counters]
        r = load(a.load, port, a.seconds, f"62:{offered:.0f}:{work}", ping, server_pid=p.pid)
        expired, answered_late, late = (server_metric(port, c) - b0 for c, b0 in zip(counters, before))
        late = (late, server_metric(port, "http_started_late_max_us_total"))
        stop(p)
        return (r, expired, late, answered_late), OTHERS.pop()

    for (name, _, _, _), runs in interleaved(rows, a.rounds, one):
        res = [x for x, _ in runs]
        OTHERS.extend(o for _, o in runs)
        print(f"| {name} | {control_cells(res, work, a.seconds)} | {med([x[3] for x in res]):.0f} "
              f"| {med([x[2][0] for x in res]):.0f} ({max(x[2][1] for x in res):.0f} µs) | {others()} |")


def control_cells(res, work, seconds):
    """The cells the per-request control tables share (here and bench-axum's), medians over rounds
    `res`, each a tuple of load()'s result and the round's expired count: /ping p50, p99 and req/s,
    /work served/s, served p99 and 503/s, expired."""
    ping = [x[0]["/ping"] for x in res]
    w = [x[0][work] for x in res]
    return (f"{med([x['ok_p50_us'] for x in ping]) / 1000:.2f} | {med([x['ok_p99_us'] for x in ping]) / 1000:.2f} "
            f"| {med([x['ok'] for x in ping]) / seconds:,.0f} "
            f"| {med([x['ok'] for x in w]) / seconds:,.0f} | {med([x['ok_p99_us'] for x in w]) / 1000:.2f} "
            f"| {med([x['shed'] for x in w]) / seconds:,.0f} | {med([x[1] for x in res]):,.0f}")


def lanes(a, uv, ev):
    """Section 5: /sleep in a lane beside /ping (issue 29). CoDel off: the slow requests wait in the
    lane instead of being shed, which is what the lane is for."""
    print(f"\n### Lanes: 64 conns of /sleep?ms=50 (closed loop) + /ping closed loop on 2 conns, min_threads 2, "
          f"CoDel off (medians of {a.rounds} x {a.seconds:g} s)\n")
    print("| server | /ping p50 (ms) | /ping p99 (ms) | /sleep served/s | most /sleep running at once | peak threads | others (cores) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    lane_servers = []
    for name, b in (("libuv", uv), ("libevent", ev)):
        lane_servers += [(f"{name}: --plain (no lane)", b, ["--plain"], None),
                         (f"{name}: /sleep in a lane of 2", b, ["--sleep-lane", "2"], None)]

    def lane_round(b, args, env):
        p, port = start(b, "--threads", "2", "--target-us", "0", *args, env=env)
        r = load(a.load, port, a.seconds, "64:0:/sleep?ms=50", "2:0:/ping", server_pid=p.pid)
        most = server_metric(port, "http_sleep_max_concurrent_total")
        peak = server_metric(port, "wspool_peak_threads")
        stop(p)
        return (r, most, peak), OTHERS.pop()

    for (name, _, _, _), runs in interleaved(lane_servers, a.rounds, lane_round):
        res = [x for x, _ in runs]
        OTHERS.extend(o for _, o in runs)
        ping = [x[0]["/ping"] for x in res]
        sl = [x[0]["/sleep?ms=50"] for x in res]
        print(f"| {name} | {med([x['ok_p50_us'] for x in ping]) / 1000:.2f} | {med([x['ok_p99_us'] for x in ping]) / 1000:.2f} "
              f"| {med([x['ok'] for x in sl]) / a.seconds:,.0f} | {max(x[1] for x in res):.0f} (max) "
              f"| {med([x[2] for x in res]):.0f} | {others()} |")


if __name__ == "__main__":
    main()

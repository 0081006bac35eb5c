"""Python benchmarks P1-P5: wspool.Pool against ThreadPoolExecutor, in the same run.

    python bench/python/bench.py            # all of them, markdown table on stdout
    python bench/python/bench.py --quick    # fewer repetitions (smoke run)
    python bench/python/bench.py --only P5 --rounds 15   # one benchmark, more rounds

P1  map() over 200,000 trivial calls: calls per second (target: >= 5x TPE).
P2  submit().result() ping-pong: median round trip (target: <= 0.5x TPE).
P3  200 x time.sleep(0.01) tasks on 4 workers: wall time, plain and with
    wspool.blocking() around the sleep on the default pool, which lends
    threads to blocking() regions while max_workers bounds the calls
    executing (target with blocking(): <= 0.1x TPE).
P4  asyncio round trips (issue 12): 20,000 run_in_executor calls gathered at
    once (wall time), and serial `await loop.run_in_executor(...)` (mean per
    await); target for both: no slower than TPE (<= 1.0x).
P5  idle CPU after a burst: the whole process's CPU time (every thread,
    this one's sleep included) in the 2 s right after a map() of 20,000
    calls returns, in ms per second (target: <= 2x TPE); and the part of it
    used by threads other than the caller's (the executor's).

Each figure is the median of several repetitions; both executors run the
same code in the same process, one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from concurrent.futures import Executor, ThreadPoolExecutor, wait
from typing import Callable

import wspool


def noop(x: int) -> int:
    return x


def sleep_task() -> None:
    time.sleep(0.01)


def sleep_task_blocking() -> None:
    with wspool.blocking():
        time.sleep(0.01)


def p1_map(ex: Executor, n: int) -> float:
    t0 = time.perf_counter()
    out = list(ex.map(noop, range(n)))
    dt = time.perf_counter() - t0
    assert len(out) == n and out[-1] == n - 1
    return n / dt


def p2_pingpong(ex: Executor, n: int) -> float:
    for i in range(2000):  # warm up to the steady state: threads started, spin heuristics settled
        ex.submit(noop, i).result()
    lat = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        ex.submit(noop, i).result()
        lat.append(time.perf_counter_ns() - t0)
    return statistics.median(lat) / 1000.0


def p3_sleep(ex: Executor, fn: Callable[[], None], n: int = 200) -> float:
    t0 = time.perf_counter()
    done, not_done = wait([ex.submit(fn) for _ in range(n)])
    assert not not_done
    return (time.perf_counter() - t0) * 1000.0


def p4_gathered(ex: Executor, n: int) -> float:
    """Wall time (ms) of n run_in_executor calls gathered at once."""

    async def run() -> float:
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        out = await asyncio.gather(*(loop.run_in_executor(ex, noop, i) for i in range(n)))
        dt = time.perf_counter() - t0
        assert len(out) == n
        return dt * 1000.0

    return asyncio.run(run())


def p4_serial(ex: Executor, n: int) -> float:
    """Mean time (us) of one `await loop.run_in_executor(...)`, n in a row."""

    async def run() -> float:
        loop = asyncio.get_running_loop()
        for i in range(500):  # warm up
            await loop.run_in_executor(ex, noop, i)
        t0 = time.perf_counter()
        for i in range(n):
            await loop.run_in_executor(ex, noop, i)
        return (time.perf_counter() - t0) / n * 1e6

    return asyncio.run(run())


def p5_idle_after_burst(make: Callable[[], Executor], seconds: float = 2.0) -> float:
    """CPU ms per second used by the whole process in the `seconds` after a
    burst, with a fresh executor: what an application pays for a pool that
    has just gone idle (spinning, timers, monitors)."""
    return p5_idle_split(make, seconds)[0]


def p5_idle_split(make: Callable[[], Executor], seconds: float = 2.0) -> tuple[float, float]:
    """`p5_idle_after_burst`, and the part of it used by threads other than
    this one (the process's CPU time less this thread's), in ms per second."""
    ex = make()
    try:
        list(ex.map(noop, range(20_000)))
        c0, m0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
        time.sleep(seconds)
        c1, m1, w1 = time.process_time(), time.thread_time(), time.perf_counter()
        per_s = 1e3 / (w1 - w0)
        return (c1 - c0) * per_s, max(0.0, (c1 - c0) - (m1 - m0)) * per_s
    finally:
        ex.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--rounds", type=int, help="repetitions of each benchmark (default 5; 3 with --quick)")
    ap.add_argument("--only", action="append", choices=["P1", "P2", "P3", "P4", "P5"],
                    help="run only this benchmark (may be repeated)")
    args = ap.parse_args()
    reps = args.rounds or (3 if args.quick else 5)
    only = set(args.only or ["P1", "P2", "P3", "P4", "P5"])
    peak: int | None = None
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    n_map = 200_000
    n_ping = 2_000 if args.quick else 5_000

    rows: list[tuple[str, str, str, str, str, bool | None]] = []

    # Rounds alternate between the two executors, so a noisy neighbour on a
    # shared machine hits both alike; each figure is the median over rounds.
    tpe_map_runs: list[float] = []
    ws_map_runs: list[float] = []
    tpe_pp_runs: list[float] = []
    ws_pp_runs: list[float] = []
    # Default-sized executors, as a drop-in user would have them; a fresh
    # pair per benchmark.
    if "P1" in only:
        with ThreadPoolExecutor() as tpe, wspool.Pool() as pool:
            for _ in range(reps):
                tpe_map_runs.append(p1_map(tpe, n_map))
                ws_map_runs.append(p1_map(pool, n_map))
        tpe_map, ws_map = statistics.median(tpe_map_runs), statistics.median(ws_map_runs)
        rows.append(("P1 map, 200k trivial calls (calls/s, higher is better)",
                     f"{tpe_map:,.0f}", f"{ws_map:,.0f}", f"{ws_map / tpe_map:.1f}x", ">= 5x", ws_map >= 5 * tpe_map))
    if "P2" in only:
        with ThreadPoolExecutor() as tpe, wspool.Pool() as pool:
            for _ in range(reps):
                tpe_pp_runs.append(p2_pingpong(tpe, n_ping))
                ws_pp_runs.append(p2_pingpong(pool, n_ping))
        tpe_pp, ws_pp = statistics.median(tpe_pp_runs), statistics.median(ws_pp_runs)
        rows.append(("P2 submit().result() round trip, p50 (us, lower is better)",
                     f"{tpe_pp:.1f}", f"{ws_pp:.1f}", f"{ws_pp / tpe_pp:.2f}x", "<= 0.5x", ws_pp <= 0.5 * tpe_pp))

    if "P3" in only:
        tpe_sleep_runs: list[float] = []
        ws_sleep_runs: list[float] = []
        ws_block_runs: list[float] = []
        with ThreadPoolExecutor(max_workers=4) as tpe:
            for _ in range(reps):
                tpe_sleep_runs.append(p3_sleep(tpe, sleep_task))
                # A fresh pool per run: threads lent or injected by the previous
                # run would otherwise still be there.
                with wspool.Pool(max_workers=4) as pool:
                    ws_sleep_runs.append(p3_sleep(pool, sleep_task))
                with wspool.Pool(max_workers=4) as pool:
                    ws_block_runs.append(p3_sleep(pool, sleep_task_blocking))
                    peak = pool.stats().peak_threads
        tpe_sleep = statistics.median(tpe_sleep_runs)
        ws_sleep, ws_block = statistics.median(ws_sleep_runs), statistics.median(ws_block_runs)
        rows.append(("P3 200 x sleep(10 ms), 4 workers (ms, lower is better)",
                     f"{tpe_sleep:.0f}", f"{ws_sleep:.0f}", f"{ws_sleep / tpe_sleep:.2f}x", "report", None))
        rows.append(("P3 same, sleep inside wspool.blocking() (ms)",
                     f"{tpe_sleep:.0f}", f"{ws_block:.0f}", f"{ws_block / tpe_sleep:.2f}x", "<= 0.1x",
                     ws_block <= 0.1 * tpe_sleep))

    if "P4" in only:
        n_gather = 20_000
        n_serial = 2_000 if args.quick else 5_000
        runs: dict[str, list[float]] = {k: [] for k in ("tg", "wg", "ts", "ws")}
        with ThreadPoolExecutor() as tpe, wspool.Pool() as pool:
            for _ in range(reps):
                runs["tg"].append(p4_gathered(tpe, n_gather))
                runs["wg"].append(p4_gathered(pool, n_gather))
                runs["ts"].append(p4_serial(tpe, n_serial))
                runs["ws"].append(p4_serial(pool, n_serial))
        tg, wg, ts, ws = (statistics.median(runs[k]) for k in ("tg", "wg", "ts", "ws"))
        rows.append(("P4 asyncio: 20k gathered run_in_executor (ms, lower is better)",
                     f"{tg:.0f}", f"{wg:.0f}", f"{wg / tg:.2f}x", "<= 1.0x", wg <= tg))
        rows.append(("P4 asyncio: serial await run_in_executor (us, lower is better)",
                     f"{ts:.1f}", f"{ws:.1f}", f"{ws / ts:.2f}x", "<= 1.0x", ws <= ts))

    if "P5" in only:
        idle: dict[str, list[tuple[float, float]]] = {"t": [], "w": []}
        for _ in range(reps):
            idle["t"].append(p5_idle_split(ThreadPoolExecutor))
            idle["w"].append(p5_idle_split(wspool.Pool))
        ti, wi = (statistics.median(r[0] for r in idle[k]) for k in ("t", "w"))
        tp, wp = (statistics.median(r[1] for r in idle[k]) for k in ("t", "w"))
        rows.append(("P5 idle CPU in the 2 s after a map() burst (ms per s, lower is better)",
                     f"{ti:.3f}", f"{wi:.3f}", f"{wi / ti:.2f}x" if ti > 0 else "n/a", "<= 2x", wi <= 2 * ti))
        rows.append(("P5 same, threads other than the caller's (ms per s)",
                     f"{tp:.3f}", f"{wp:.3f}", "", "report", None))

    print(f"\nPython benchmarks: wspool {wspool.__version__} vs ThreadPoolExecutor, "
          f"Python {platform.python_version()}, {os.cpu_count()} CPUs, median of {reps} runs\n")
    print("| benchmark | ThreadPoolExecutor | wspool.Pool | wspool / TPE | target | met |")
    print("|---|---:|---:|---:|---|---|")
    for name, a, b, ratio, target, ok in rows:
        met = "-" if ok is None else ("yes" if ok else "NO")
        print(f"| {name} | {a} | {b} | {ratio} | {target} | {met} |")
    p3 = f"last P3 blocking run: peak_threads={peak}; " if peak is not None else ""
    print(f"\n({p3}load average before the run: {load})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

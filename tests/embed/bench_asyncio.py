#!/usr/bin/env python3
"""bench-embed, asyncio: 10,000 sequential awaits of a trivial function.

`await pool.run(fn)` (a completion queue drained by loop.add_reader) against
`await loop.run_in_executor(ThreadPoolExecutor, fn)` (one
call_soon_threadsafe per call), both with 2 threads, same run; per-await
latency p50/p99 (µs), medians of --rounds rounds, as a markdown table. The
two paths take turns going first, round by round, so neither always runs
on the machine as the other left it; each round's own ratio is listed too.
"""
import argparse
import asyncio
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import wspool


def trivial():
    return 1


async def measure(submit, n):
    lat = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        await submit()
        lat.append(time.perf_counter_ns() - t0)
    lat.sort()
    return lat[len(lat) // 2] / 1000, lat[int(len(lat) * 0.99)] / 1000


async def wspool_path(n):
    with wspool.Pool(min_threads=2, growth="fixed") as pool:
        await measure(lambda: pool.run(trivial), 500)  # warm-up
        return await measure(lambda: pool.run(trivial), n)


async def executor_path(n):
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=2) as tpe:
        await measure(lambda: loop.run_in_executor(tpe, trivial), 500)
        return await measure(lambda: loop.run_in_executor(tpe, trivial), n)


async def round_(n, wspool_first):
    if wspool_first:
        ws = await wspool_path(n)
        tp = await executor_path(n)
    else:
        tp = await executor_path(n)
        ws = await wspool_path(n)
    return ws, tp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=10000)
    a = ap.parse_args()
    rows = [asyncio.run(round_(a.n, i % 2 == 0)) for i in range(a.rounds)]
    ws50 = statistics.median(r[0][0] for r in rows)
    ws99 = statistics.median(r[0][1] for r in rows)
    tp50 = statistics.median(r[1][0] for r in rows)
    tp99 = statistics.median(r[1][1] for r in rows)
    print(f"\n### asyncio: {a.n:,} sequential awaits of a trivial function, 2 threads (medians of {a.rounds} rounds)\n")
    print("| path | p50 (µs) | p99 (µs) |")
    print("|---|---:|---:|")
    print(f"| `await pool.run(fn)` (completion queue + add_reader) | {ws50:.1f} | {ws99:.1f} |")
    print(f"| `await loop.run_in_executor(ThreadPoolExecutor, fn)` | {tp50:.1f} | {tp99:.1f} |")
    print(f"\np50 ratio wspool / ThreadPoolExecutor: {ws50 / tp50:.2f}")
    print("per round: " + ", ".join(f"{r[0][0] / r[1][0]:.2f}" for r in rows))


if __name__ == "__main__":
    main()

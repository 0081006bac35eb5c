#!/usr/bin/env python3
"""asyncio `await pool.run` in shapes other than bench_asyncio.py's quick calls.

Checks that the shorter path for one await at a time costs nothing where
it does not pay: sequential calls of ~0.15 ms of Python and of 0.2 ms sleeps
(p50 µs per await), a burst of 1,000 calls through `gather` (µs per call,
median of 5 bursts), and the gaps of a 1 ms ticker task on the loop while
300 sequential ~1 ms Python calls are awaited (p50 / p99 ms). Medians of
--rounds rounds, one line per measure. Run it against two installs of the
package to compare them.
"""
import argparse
import asyncio
import statistics
import time

import wspool


def trivial():
    return 1


def python_work(n):
    s = 0
    for i in range(n):
        s += i
    return s


def short_sleep():
    time.sleep(0.0002)


async def sequential(pool, fn, *args, n=2000):
    lat = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        await pool.run(fn, *args)
        lat.append(time.perf_counter_ns() - t0)
    return statistics.median(lat) / 1000


async def burst(pool, n=1000):
    t0 = time.perf_counter()
    await asyncio.gather(*(pool.run(trivial) for _ in range(n)))
    return (time.perf_counter() - t0) / n * 1e6


async def ticker_gaps(pool, calls=300):
    gaps = []
    stop = asyncio.Event()

    async def tick():
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    t = asyncio.ensure_future(tick())
    for _ in range(calls):
        await pool.run(python_work, 20000)
    stop.set()
    await t
    gaps.sort()
    return gaps[len(gaps) // 2] * 1e3, gaps[int(len(gaps) * 0.99)] * 1e3


async def round_():
    with wspool.Pool(min_threads=2, growth="fixed") as pool:
        await sequential(pool, trivial, n=500)  # warm-up
        return {
            "~0.15 ms Python calls, p50 µs": await sequential(pool, python_work, 3000),
            "0.2 ms sleeps, p50 µs": await sequential(pool, short_sleep),
            "gather of 1,000 quick calls, µs per call": statistics.median([await burst(pool) for _ in range(5)]),
            "1 ms ticker gap during ~1 ms calls, p50 / p99 ms": await ticker_gaps(pool),
        }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    rows = [asyncio.run(round_()) for _ in range(a.rounds)]
    for key in rows[0]:
        vals = [r[key] for r in rows]
        if isinstance(vals[0], tuple):
            med = " / ".join(f"{statistics.median(v[i] for v in vals):.2f}" for i in range(len(vals[0])))
        else:
            med = f"{statistics.median(vals):.1f}"
        print(f"{key}: {med}")


if __name__ == "__main__":
    main()

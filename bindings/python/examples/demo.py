"""A short tour of wspool.Pool (run by `make demo`)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import wspool


def fib(pool: wspool.Pool, n: int) -> int:
    """Sync-over-async inside the pool: each task submits two and waits."""
    if n < 2:
        return n
    a = pool.submit(fib, pool, n - 1)
    b = pool.submit(fib, pool, n - 2)
    return a.result() + b.result()


def fetch(i: int) -> int:
    with wspool.blocking():  # real blocking: a pool allowed to grow lends a thread meanwhile
        time.sleep(0.01)
    return i


def main() -> None:
    # growth="adaptive" opts in to threads beyond max_workers for blocking()
    # regions and waits inside tasks (the default keeps ThreadPoolExecutor's bound).
    with wspool.Pool(max_workers=2, growth="adaptive") as pool:
        print("submit:", pool.submit(pow, 2, 10).result())
        t0 = time.perf_counter()
        total = sum(pool.map(abs, range(-100_000, 0)))
        print(f"map over 100,000 items: {total} in {(time.perf_counter() - t0) * 1000:.0f} ms")
        print("nested submit/result from 2 threads, fib(10):", pool.submit(fib, pool, 10).result())
        t0 = time.perf_counter()
        list(pool.map(fetch, range(100)))
        print(f"100 x 10 ms blocking calls on 2 workers: {(time.perf_counter() - t0) * 1000:.0f} ms")
        q = pool.serial()
        order: list[int] = []
        for i in range(10):
            q.submit(order.append, i)
        g = pool.group()
        for i in range(10):
            g.submit(time.sleep, 0.001)
        g.wait()
        q.submit(lambda: None).result()
        print("serial queue order:", order)
        s = pool.stats()
        print(f"stats: threads={s.threads} peak={s.peak_threads} submitted={s.submitted} "
              f"completed={s.completed} steals={s.steals} queue_delay_p50={s.queue_delay_p50_ns / 1000:.0f}us")
    with ThreadPoolExecutor(max_workers=2) as tpe:
        t0 = time.perf_counter()
        list(tpe.map(fetch, range(100)))
        print(f"(ThreadPoolExecutor, same 100 blocking calls: {(time.perf_counter() - t0) * 1000:.0f} ms)")


if __name__ == "__main__":
    main()

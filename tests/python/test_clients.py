"""Real clients of ThreadPoolExecutor, run on wspool.Pool and on
ThreadPoolExecutor in the same test: dask's threaded scheduler and uvloop.
`make test-python` installs both (pinned) into the test venv."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dask
import uvloop

import wspool
from conftest import EVENTUALLY

EXECUTORS: list[type[ThreadPoolExecutor]] = [ThreadPoolExecutor, wspool.Pool]


def test_dask_compute_with_a_pool() -> None:
    from dask import delayed

    def graph() -> Any:
        @delayed
        def inc(x: int) -> int:
            return x + 1

        @delayed
        def add(*xs: int) -> int:
            return sum(xs)

        return add(*[inc(i) for i in range(200)])

    results = {}
    for cls in EXECUTORS:
        threads: set[str] = set()

        def spy(x: int) -> int:
            threads.add(threading.current_thread().name)
            return x

        with cls(2, thread_name_prefix="dask") as pool:
            total = dask.compute(graph(), scheduler="threads", pool=pool)[0]
            # Tasks ran on the pool's threads (dask submits to the pool we gave it).
            dask.compute(*[delayed(spy)(i) for i in range(20)], scheduler="threads", pool=pool)
        results[cls.__name__] = (total, all(n.startswith("dask_") for n in threads) and bool(threads))
    assert results["Pool"] == results["ThreadPoolExecutor"] == (sum(range(1, 201)), True)


def test_uvloop_default_executor_and_run_in_executor() -> None:
    def run(cls: type[ThreadPoolExecutor]) -> tuple[list[int], list[str], bool]:
        ex = cls(2, thread_name_prefix="uv")

        async def main() -> tuple[list[int], list[str]]:
            loop = asyncio.get_running_loop()
            loop.set_default_executor(ex)
            squares = await asyncio.gather(*(loop.run_in_executor(None, pow, i, 2) for i in range(100)))
            name = lambda: threading.current_thread().name.split("_")[0]  # noqa: E731
            names = [await asyncio.to_thread(name), await loop.run_in_executor(ex, name)]
            await asyncio.wait_for(loop.shutdown_default_executor(), EVENTUALLY)
            return list(squares), names

        loop = uvloop.new_event_loop()
        try:
            squares, names = loop.run_until_complete(main())
        finally:
            loop.close()
        try:
            ex.submit(int)
            refused = False
        except RuntimeError:
            refused = True
        return squares, names, refused

    results = {cls.__name__: run(cls) for cls in EXECUTORS}
    assert results["Pool"] == results["ThreadPoolExecutor"] == ([i * i for i in range(100)], ["uv", "uv"], True)

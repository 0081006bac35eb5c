"""Issue 25: the default `wspool.Pool(max_workers=N)` never deadlocks on
nested waits, `max_workers` still bounds the calls executing at once, agreeing
keywords are accepted, and pool threads are real `threading.Thread`s.

Every wait that could deadlock has a timeout (inner waits included), so a
deadlock fails the test with TimeoutError and the pool's threads come free;
no test asserts a time.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

import pytest

import wspool
from conftest import EVENTUALLY, run_script


class Executing:
    """Counts calls executing outside their waits; `peak` is the most at once.

    Exact, not sampled: a call counts itself out before it waits and back in
    after the wait returned, which is after it got its place back."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1

    def waiting(self, wait: Callable[[], Any]) -> Any:
        self.leave()
        try:
            return wait()
        finally:
            self.enter()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        self.enter()
        try:
            return fn(*args)
        finally:
            self.leave()


@pytest.fixture
def pool2() -> Iterator[wspool.Pool]:
    p = wspool.Pool(2, keep_alive=3600.0)
    yield p
    p.shutdown(wait=False, cancel_futures=True)


def test_a_40_deep_chain_of_result_waits_finishes(pool2: wspool.Pool) -> None:
    ex = Executing()

    def link(n: int) -> int:
        if n == 0:
            return 0
        f = pool2.submit(ex.call, link, n - 1)
        return ex.waiting(lambda: f.result(timeout=EVENTUALLY)) + 1

    assert pool2.submit(ex.call, link, 40).result(timeout=EVENTUALLY) == 40
    s = pool2.stats()
    assert ex.peak <= 2, ex.peak
    assert s.peak_threads > 2, s  # lent threads did the waiting calls' work
    assert s.starvation_injections == 0, s


def test_every_worker_waiting_on_its_own_submission_finishes(pool2: wspool.Pool) -> None:
    ex = Executing()
    both_busy = threading.Barrier(2)

    def task(i: int) -> int:
        if i < 2:
            both_busy.wait(timeout=EVENTUALLY)  # every worker is in a task now
        f = pool2.submit(ex.call, lambda: i * 10)
        return ex.waiting(lambda: f.result(timeout=EVENTUALLY))

    futures = [pool2.submit(ex.call, task, i) for i in range(8)]
    assert [f.result(timeout=EVENTUALLY) for f in futures] == [i * 10 for i in range(8)]
    assert ex.peak <= 2, ex.peak


def _wait_kinds(pool: wspool.Pool) -> dict[str, Callable[[], Any]]:
    """A call of `pool` that submits work to `pool` and waits for it, one per kind of wait."""

    def child() -> int:
        return 7

    def result() -> Any:
        return pool.submit(child).result(timeout=EVENTUALLY)

    def exception() -> Any:
        return pool.submit(child).exception(timeout=EVENTUALLY)

    def group_wait() -> Any:
        g = pool.group()
        f = g.submit(child)
        return g.wait(timeout=EVENTUALLY) and f.result(timeout=0)

    def map_iterator() -> Any:
        return sum(pool.map(abs, [-1, -2, -4], timeout=EVENTUALLY))

    def futures_wait() -> Any:
        fs = [pool.submit(child) for _ in range(3)]
        done, _ = cf.wait(fs, timeout=EVENTUALLY)
        return len(done)

    def as_completed() -> Any:
        fs = [pool.submit(child) for _ in range(3)]
        return sum(f.result(timeout=0) for f in cf.as_completed(fs, timeout=EVENTUALLY)) // 7

    def blocking_region() -> Any:
        ready = threading.Event()
        pool.submit(ready.set)
        with wspool.blocking():
            return ready.wait(timeout=EVENTUALLY) and 7

    return {
        "result": result,
        "exception": exception,
        "group_wait": group_wait,
        "map_iterator": map_iterator,
        "futures_wait": futures_wait,
        "as_completed": as_completed,
        "blocking_region": blocking_region,
    }


EXPECTED = {
    "result": 7,
    "exception": None,
    "group_wait": 7,
    "map_iterator": 7,
    "futures_wait": 3,
    "as_completed": 3,
    "blocking_region": 7,
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_each_kind_of_wait_inside_a_call_of_a_one_worker_pool_finishes(kind: str) -> None:
    pool = wspool.Pool(1)
    try:
        fn = _wait_kinds(pool)[kind]
        # Two at once: the second waits for a place, then waits on its own work.
        futures = [pool.submit(fn) for _ in range(2)]
        assert [f.result(timeout=EVENTUALLY) for f in futures] == [EXPECTED[kind]] * 2
        assert pool.stats().peak_threads > 1
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def test_calls_executing_at_once_never_exceed_max_workers() -> None:
    n = 3
    pool = wspool.Pool(n)
    ex = Executing()
    seen: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        # The binding's own count, read while the work runs.
        while not stop.is_set():
            seen.append(pool._core.executing or 0)
            stop.wait(0.0005)

    def spin() -> int:
        return sum(range(2000))

    def work(i: int) -> int:
        kind = i % 4
        if kind == 0:
            f = pool.submit(ex.call, spin)
            return int(ex.waiting(lambda: f.result(timeout=EVENTUALLY)))
        if kind == 1:
            return int(sum(ex.waiting(lambda: list(pool.map(ex.call, [spin] * 3, timeout=EVENTUALLY)))))
        if kind == 2:
            g = pool.group()
            for _ in range(3):
                g.submit(ex.call, spin)
            return int(ex.waiting(lambda: g.wait(timeout=EVENTUALLY)))
        return spin()

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        futures = [pool.submit(ex.call, work, i) for i in range(60)]
        for f in futures:
            f.result(timeout=EVENTUALLY)
    finally:
        stop.set()
        sampler.join()
        pool.shutdown(wait=False, cancel_futures=True)
    assert ex.peak <= n, ex.peak
    assert max(seen) <= n, max(seen)
    assert pool.stats().starvation_injections == 0


def test_lent_threads_retire_when_the_wait_ends(pool2: wspool.Pool) -> None:
    def link(n: int) -> int:
        return 0 if n == 0 else pool2.submit(link, n - 1).result(timeout=EVENTUALLY) + 1

    assert pool2.submit(link, 10).result(timeout=EVENTUALLY) == 10
    assert pool2.stats().peak_threads > 2
    # keep_alive is an hour: only the end of the waits can retire them.
    # `threads` drops when a lent thread decides to retire; threads_retired
    # counts it once it has left its slot, a moment later: wait for both.
    deadline = time.monotonic() + EVENTUALLY
    while (s := pool2.stats()).threads != 2 or s.threads_retired == 0:
        assert time.monotonic() < deadline, f"lent threads stayed: {s}"
        time.sleep(0.005)


def test_dask_nested_compute_on_its_own_pool() -> None:
    dask = pytest.importorskip("dask")
    from dask import delayed

    pool = wspool.Pool(2)

    @delayed
    def inc(x: int) -> int:
        return x + 1

    @delayed
    def outer(i: int) -> int:
        # dask.compute inside a task of the pool dask itself uses.
        return sum(dask.compute(*[inc(j) for j in range(i, i + 10)]))

    box: dict[str, Any] = {}

    def main() -> None:
        with dask.config.set(pool=pool):
            box["r"] = dask.compute(*[outer(i) for i in range(8)])

    t = threading.Thread(target=main, daemon=True)
    t.start()
    t.join(EVENTUALLY)
    try:
        assert not t.is_alive(), "dask's nested compute hung"
        assert sum(box["r"]) == sum(sum(range(i + 1, i + 11)) for i in range(8))
    finally:
        if not t.is_alive():
            pool.shutdown()


def test_fixed_growth_keeps_a_hard_limit_on_threads() -> None:
    with wspool.Pool(2, growth="fixed") as pool:
        ready = [threading.Event() for _ in range(2)]

        def hold(i: int) -> None:
            ready[i].set()
            with wspool.blocking():
                ready[1 - i].wait(timeout=EVENTUALLY)

        for f in [pool.submit(hold, i) for i in range(2)]:
            f.result(timeout=EVENTUALLY)
        assert pool.stats().peak_threads == 2


@pytest.mark.parametrize(
    "kw",
    [
        {"growth": "fixed", "min_threads": 2, "max_threads": 2},
        {"growth": "fixed", "max_workers": 2, "max_threads": 2},
        {"max_workers": 3, "min_threads": 3},
        {"max_workers": 2, "max_threads": 2},
        {"max_workers": 2, "max_threads": 8},
        {"name": "io", "thread_name_prefix": "io"},
    ],
)
def test_keywords_that_agree_are_accepted(kw: dict[str, Any]) -> None:
    with wspool.Pool(**kw) as pool:
        assert pool.submit(lambda: 1).result(timeout=EVENTUALLY) == 1


@pytest.mark.parametrize(
    "kw, values",
    [
        ({"growth": "fixed", "min_threads": 2, "max_threads": 3}, ["2", "3"]),
        ({"max_workers": 2, "min_threads": 3}, ["2", "3"]),
        ({"max_workers": 4, "max_threads": 2}, ["4", "2"]),
        ({"name": "a", "thread_name_prefix": "b"}, ["'a'", "'b'"]),
    ],
)
def test_contradictions_raise_value_error_naming_both_values(kw: dict[str, Any], values: list[str]) -> None:
    with pytest.raises(ValueError) as e:
        wspool.Pool(**kw)
    for v in values:
        assert v in str(e.value), (v, str(e.value))


def test_pool_threads_are_threading_threads_as_on_tpe(caplog: pytest.LogCaptureFixture) -> None:
    def identity() -> tuple[Any, ...]:
        t = threading.current_thread()
        logging.getLogger("wspool-test").warning("hello")
        return (
            t,
            type(t).__mro__,
            t.daemon,
            t.ident == threading.get_ident(),
            t.native_id == threading.get_native_id(),
            t in threading.enumerate(),
            t.is_alive(),
        )

    rows = {}
    threads = {}
    for cls in (ThreadPoolExecutor, wspool.Pool):
        with cls(1, thread_name_prefix="who") as ex:
            t, mro, daemon, ident_ok, native_ok, listed, alive = ex.submit(identity).result(timeout=EVENTUALLY)
            rows[cls.__name__] = (
                t.name,
                threading.Thread in mro,
                threading._DummyThread in mro,  # type: ignore[attr-defined]
                daemon,
                ident_ok,
                native_ok,
                listed,
                alive,
            )
            threads[cls.__name__] = t
        # Shut down: the thread ends, and join() says so.
        threads[cls.__name__].join(timeout=EVENTUALLY)
        assert not threads[cls.__name__].is_alive(), cls
    assert rows["Pool"] == rows["ThreadPoolExecutor"] == ("who_0", True, False, False, True, True, True, True)
    assert [r.threadName for r in caplog.records if r.getMessage() == "hello"] == ["who_0", "who_0"]


def test_interpreter_exit_with_pools_left_running_does_not_hang() -> None:
    proc = run_script(
        """
        import threading, wspool
        a = wspool.Pool(2)                        # never shut down
        def link(n):
            return 0 if n == 0 else a.submit(link, n - 1).result() + 1
        assert a.submit(link, 20).result(timeout=30) == 20
        b = wspool.Pool(2)
        g = b.group()                             # keeps b's threads alive after b is gone
        g.submit(int).result(timeout=30)
        del b
        print("non-daemon pool threads:", sum(1 for t in threading.enumerate()
                                              if isinstance(t, wspool._WorkerThread) and not t.daemon))
        """,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "non-daemon pool threads:" in proc.stdout
    assert int(proc.stdout.split(":")[-1]) >= 2

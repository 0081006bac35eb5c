"""The concurrent.futures.Executor contract, run against ThreadPoolExecutor and
wspool.Pool on the same cases: wherever these pass for both, wspool behaves
like the executor it replaces."""

from __future__ import annotations

import concurrent.futures as cf
import threading
import traceback
from concurrent.futures.thread import BrokenThreadPool

import pytest

from conftest import EVENTUALLY, ExecutorFactory


def add(a: int, b: int = 0) -> int:
    return a + b


def fail(msg: str) -> None:
    raise ValueError(msg)


class CustomBase(BaseException):
    pass


def raise_base(kind: str) -> None:
    if kind == "exit":
        raise SystemExit(3)
    if kind == "kbd":
        raise KeyboardInterrupt
    raise CustomBase("custom")


def test_submit_returns_a_real_future(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=2)
    f = ex.submit(add, 2, b=40)
    assert isinstance(f, cf.Future)
    assert f.result(timeout=EVENTUALLY) == 42
    assert f.done() and not f.cancelled() and f.exception() is None


def test_exception_reaches_the_future_with_traceback(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=2)
    f = ex.submit(fail, "boom")
    with pytest.raises(ValueError, match="boom"):
        f.result(timeout=EVENTUALLY)
    exc = f.exception()
    assert isinstance(exc, ValueError)
    assert "fail" in "".join(traceback.format_tb(exc.__traceback__))


@pytest.mark.parametrize("kind, exc_type", [("exit", SystemExit), ("kbd", KeyboardInterrupt), ("custom", CustomBase)])
def test_base_exceptions_reach_the_future_and_workers_survive(
    make_executor: ExecutorFactory, kind: str, exc_type: type[BaseException]
) -> None:
    ex = make_executor(max_workers=1)
    futures = [ex.submit(raise_base, kind) for _ in range(3)]
    for f in futures:
        assert isinstance(f.exception(timeout=EVENTUALLY), exc_type)
    # The single worker is still alive and serving.
    assert ex.submit(add, 1, 1).result(timeout=EVENTUALLY) == 2


def test_calling_a_non_callable_fails_in_the_future(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=1)
    f = ex.submit(42)  # type: ignore[arg-type]
    assert isinstance(f.exception(timeout=EVENTUALLY), TypeError)


def test_map_keeps_order_and_zips_shortest(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=2)
    assert list(ex.map(add, range(100), range(0, 200, 2), timeout=EVENTUALLY)) == [3 * i for i in range(100)]
    assert list(ex.map(add, range(10), range(3))) == [0, 2, 4]
    assert list(ex.map(add, [])) == []


@pytest.mark.parametrize("chunksize", [1, 3, 1000])
def test_map_chunksize_gives_the_same_results(make_executor: ExecutorFactory, chunksize: int) -> None:
    ex = make_executor(max_workers=2)
    assert list(ex.map(add, range(257), chunksize=chunksize)) == list(range(257))


def test_map_raises_at_the_failing_position(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=2)

    def f(i: int) -> int:
        if i == 3:
            raise KeyError(i)
        return i

    it = ex.map(f, range(10))
    assert [next(it), next(it), next(it)] == [0, 1, 2]
    with pytest.raises(KeyError):
        next(it)


def test_map_timeout(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=2)
    gate = threading.Event()
    try:
        it = ex.map(lambda i: gate.wait(EVENTUALLY), range(4), timeout=0.05)
        with pytest.raises(TimeoutError):
            list(it)
    finally:
        gate.set()


def test_result_timeout_leaves_the_task_alone(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=1)
    gate = threading.Event()
    f = ex.submit(gate.wait, EVENTUALLY)
    with pytest.raises(TimeoutError):
        f.result(timeout=0.01)
    with pytest.raises(TimeoutError):
        f.exception(timeout=0)
    gate.set()
    assert f.result(timeout=EVENTUALLY) is True


def test_cancel_a_queued_future(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=1)
    gate, started = threading.Event(), threading.Event()
    ran: list[int] = []

    def blocker() -> None:
        started.set()
        gate.wait(EVENTUALLY)

    first = ex.submit(blocker)
    assert started.wait(EVENTUALLY)
    queued = ex.submit(ran.append, 1)
    assert queued.cancel()
    assert queued.cancelled() and queued.done()
    with pytest.raises(cf.CancelledError):
        queued.result()
    assert not first.cancel()  # already running
    gate.set()
    first.result(timeout=EVENTUALLY)
    ex.shutdown(wait=True)
    assert ran == []


def test_done_callbacks_wait_and_as_completed(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=2)
    seen: list[int] = []
    lock = threading.Lock()
    futures = [ex.submit(add, i) for i in range(20)]
    for f in futures:
        f.add_done_callback(lambda fut: (lock.acquire(), seen.append(fut.result()), lock.release()))
    done, not_done = cf.wait(futures, timeout=EVENTUALLY)
    assert not not_done and len(done) == 20
    assert sorted(f.result() for f in cf.as_completed(futures, timeout=EVENTUALLY)) == list(range(20))
    ex.shutdown(wait=True)
    assert sorted(seen) == list(range(20))


def test_first_exception_wait(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=2)
    gate = threading.Event()
    slow = ex.submit(gate.wait, EVENTUALLY)
    bad = ex.submit(fail, "x")
    done, _ = cf.wait([slow, bad], timeout=EVENTUALLY, return_when=cf.FIRST_EXCEPTION)
    assert bad in done
    gate.set()


def test_shutdown_waits_then_refuses(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=2)
    futures = [ex.submit(add, i) for i in range(50)]
    ex.shutdown(wait=True)
    assert all(f.done() for f in futures)
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(add, 1)
    ex.shutdown(wait=True)  # idempotent
    ex.shutdown(wait=False, cancel_futures=True)


def test_shutdown_cancel_futures(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=1)
    gate, started = threading.Event(), threading.Event()

    def blocker() -> str:
        started.set()
        gate.wait(EVENTUALLY)
        return "first"

    first = ex.submit(blocker)
    assert started.wait(EVENTUALLY)
    queued = [ex.submit(add, i) for i in range(5)]
    ex.shutdown(wait=False, cancel_futures=True)
    gate.set()
    assert first.result(timeout=EVENTUALLY) == "first"
    for f in queued:
        assert f.cancelled()
    ex.shutdown(wait=True)


def test_context_manager_waits(make_executor: ExecutorFactory) -> None:
    out: list[int] = []
    with make_executor(max_workers=2) as ex:
        for i in range(20):
            ex.submit(out.append, i)
    assert sorted(out) == list(range(20))


def test_initializer_runs_once_per_worker_thread(make_executor: ExecutorFactory) -> None:
    local = threading.local()
    inits: list[int] = []

    def init(tag: str) -> None:
        local.tag = tag
        inits.append(threading.get_ident())

    ex = make_executor(max_workers=2, initializer=init, initargs=("ok",))
    tags = [f.result(timeout=EVENTUALLY) for f in [ex.submit(lambda: local.tag) for _ in range(20)]]
    assert tags == ["ok"] * 20  # a thread-local set by the initializer persists
    assert len(inits) == len(set(inits))  # once per thread


def test_failing_initializer_breaks_the_pool(make_executor: ExecutorFactory) -> None:
    def init() -> None:
        raise OSError("no database")

    ex = make_executor(max_workers=1, initializer=init)
    with pytest.raises(BrokenThreadPool):
        ex.submit(add, 1).result(timeout=EVENTUALLY)
    with pytest.raises(BrokenThreadPool):
        ex.submit(add, 1)


def test_thread_name_prefix(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=1, thread_name_prefix="crawler")
    name = ex.submit(lambda: threading.current_thread().name).result(timeout=EVENTUALLY)
    assert name.startswith("crawler")


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-1, ValueError), ("4", TypeError)])
def test_bad_max_workers(make_executor: ExecutorFactory, bad: object, exc: type[Exception]) -> None:
    with pytest.raises(exc):
        make_executor(max_workers=bad)


def test_initializer_must_be_callable(make_executor: ExecutorFactory) -> None:
    with pytest.raises(TypeError):
        make_executor(max_workers=1, initializer=42)


def test_map_cut_short_by_shutdown_cancel_futures(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=1)
    gate, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        gate.wait(EVENTUALLY)

    first = ex.submit(hold)
    assert started.wait(EVENTUALLY)
    it = ex.map(add, range(10))
    ex.shutdown(wait=False, cancel_futures=True)
    gate.set()
    with pytest.raises(cf.CancelledError):
        list(it)
    first.result(timeout=EVENTUALLY)

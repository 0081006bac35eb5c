"""Pool.submit_batch (issue 15): one call, one wake-up, a future per call,
and every call run, cancelled or refused exactly once whatever races it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import wspool
from conftest import EVENTUALLY
from test_wspool import held_pool


def test_submit_batch_returns_a_future_per_call_in_order() -> None:
    with wspool.Pool(min_threads=2, growth="fixed") as p:
        before = p.stats().submitted
        futures = p.submit_batch(pow, ((i, 2) for i in range(500)))
        assert [f.result(timeout=EVENTUALLY) for f in futures] == [i * i for i in range(500)]
        assert all(isinstance(f, wspool.Future) for f in futures)
        assert p.stats().submitted - before == 500
        assert p.submit_batch(pow, []) == []


def test_batch_futures_wait_on_their_tasks_from_a_pool_thread() -> None:
    # A batch future knows its task, like a `submit` one: a pool thread waiting
    # on it is in a blocking region, so the pool lends a thread (one worker).
    with wspool.Pool(1, growth="adaptive", max_threads=4) as p:
        def outer() -> list[int]:
            inner = p.submit_batch(int, [(i,) for i in range(3)])
            return [f.result(timeout=EVENTUALLY) for f in inner]

        assert p.submit(outer).result(timeout=EVENTUALLY) == [0, 1, 2]
        assert p.stats().peak_threads > 1


def test_submit_batch_after_shutdown_raises_and_runs_nothing() -> None:
    p = wspool.Pool(min_threads=1)
    p.shutdown()
    ran: list[int] = []
    with pytest.raises(RuntimeError, match="after shutdown"):
        p.submit_batch(ran.append, [(1,), (2,)])
    assert ran == []


def test_a_full_queue_keeps_the_accepted_prefix() -> None:
    p, gate, first = held_pool("abort", capacity=2)
    ran: list[int] = []
    lock = threading.Lock()

    def note(i: int) -> int:
        with lock:
            ran.append(i)
        return i

    try:
        with pytest.raises(wspool.RejectedError) as info:
            p.submit_batch(note, [(i,) for i in range(5)])
        accepted = info.value.futures  # type: ignore[attr-defined]
        assert len(accepted) == 2
    finally:
        gate.set()
    assert first.result(timeout=EVENTUALLY) == "held"
    assert [f.result(timeout=EVENTUALLY) for f in accepted] == [0, 1]
    p.shutdown()
    assert sorted(ran) == [0, 1]  # the refused calls never ran


def test_an_overridden_submit_is_used_call_by_call() -> None:
    seen: list[Any] = []

    class Logged(wspool.Pool):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            seen.append(args)
            return super().submit(fn, *args, **kwargs)

    with Logged(min_threads=1) as p:
        futures = p.submit_batch(int, [("1",), ("2",)])
        assert [f.result(timeout=EVENTUALLY) for f in futures] == [1, 2]
    assert seen == [("1",), ("2",)]


@pytest.mark.parametrize("cancel_futures", [False, True])
def test_batches_racing_shutdown_account_for_every_call(cancel_futures: bool) -> None:
    for _round in range(10):
        p = wspool.Pool(min_threads=2, growth="fixed")
        ran = [0] * (3 * 30 * 20)
        lock = threading.Lock()
        outcomes: list[tuple[list[wspool.Future[Any]] | None, range]] = []
        start = threading.Barrier(4)

        def hit(i: int) -> None:
            with lock:
                ran[i] += 1

        def submitter(t: int) -> None:
            start.wait()
            for b in range(30):
                ids = range((t * 30 + b) * 20, (t * 30 + b + 1) * 20)
                try:
                    fs = p.submit_batch(hit, [(i,) for i in ids])
                except RuntimeError as e:
                    assert getattr(e, "futures", []) == []  # a shutdown refuses a batch whole
                    fs = None
                with lock:
                    outcomes.append((fs, ids))

        threads = [threading.Thread(target=submitter, args=(t,)) for t in range(3)]
        for th in threads:
            th.start()
        start.wait()
        p.shutdown(wait=True, cancel_futures=cancel_futures)
        for th in threads:
            th.join(EVENTUALLY)
        for fs, ids in outcomes:
            if fs is None:
                assert all(ran[i] == 0 for i in ids), "a refused call ran"
                continue
            for f, i in zip(fs, ids):
                assert f.done()
                if f.cancelled():
                    assert cancel_futures and ran[i] == 0
                else:
                    assert ran[i] == 1, "an accepted call did not run exactly once"

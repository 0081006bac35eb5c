"""Issue 29 in Python: deadlines, priorities and lanes (``Pool.options``,
``Pool.lane``, ``DeadlineExceeded``, ``Stats.expired``).

Orders and limits are set up with gates (events), never with sleeps that
must be long enough; every wait that must end has a bound, so a hang is a
failure (pytest-timeout besides). The only clock read is the one that
waits for a deadline to be behind us, which no scheduling can make false.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading
import time
from typing import Iterator

import pytest

import wspool

LIMIT = 60.0


# Gates still closed when a test ends (it failed half-way): opened by the fixture.
_gates: list[threading.Event] = []


@pytest.fixture
def one_worker() -> Iterator[wspool.Pool]:
    """A pool with exactly one thread: what it runs next is its queue order."""
    p = wspool.Pool(max_workers=1, growth="fixed")
    yield p
    while _gates:
        _gates.pop().set()
    p.shutdown(wait=True, cancel_futures=True)


def hold(pool: wspool.Pool) -> tuple[threading.Event, wspool.Future[None]]:
    """Occupies the pool's worker until the returned event is set."""
    started, release = threading.Event(), threading.Event()
    _gates.append(release)

    def gate() -> None:
        started.set()
        assert release.wait(LIMIT)

    fut = pool.submit(gate)
    assert started.wait(LIMIT)
    return release, fut


def pass_deadline(deadline: float) -> None:
    while time.monotonic() <= deadline:
        time.sleep(0.001)


def test_the_deadline_clock_is_time_monotonic() -> None:
    # CLOCK_MONOTONIC on both sides: the pool's reading lies between two of ours.
    before = time.monotonic_ns()
    ours = wspool._wspool.monotonic_ns()
    after = time.monotonic_ns()
    assert before <= ours <= after


def test_a_call_not_started_by_its_deadline_never_runs(one_worker: wspool.Pool) -> None:
    pool = one_worker
    release, gate = hold(pool)
    ran: list[int] = []
    deadline = time.monotonic() + 0.05
    late = pool.options(deadline=deadline).submit(ran.append, 1)
    relative = pool.options(timeout=0.05).submit(ran.append, 2)
    behind_both = time.monotonic() + 0.05  # read after both submissions
    # Without a deadline, for contrast.
    plain = pool.submit(ran.append, 3)
    pass_deadline(behind_both)
    release.set()
    gate.result(LIMIT)
    plain.result(LIMIT)
    for f in (late, relative):
        assert isinstance(f.exception(LIMIT), wspool.DeadlineExceeded)
        with pytest.raises(wspool.DeadlineExceeded):
            f.result(LIMIT)
        assert f.done() and not f.cancelled()
        assert not f.cancel()
    assert ran == [3]
    s = pool.stats()
    assert s.expired == 2, s
    assert s.cancelled == 0, s


def test_a_waiter_ends_the_expired_call_without_a_worker(one_worker: wspool.Pool) -> None:
    # The worker stays held: only Future.result() can end the call, at its deadline.
    pool = one_worker
    release, gate = hold(pool)
    try:
        fut = pool.options(timeout=0.02).submit(time.sleep, 0)
        with pytest.raises(wspool.DeadlineExceeded):
            fut.result(LIMIT)
        assert pool.stats().expired == 1
    finally:
        release.set()
    gate.result(LIMIT)


def test_expired_futures_are_done_for_wait_as_completed_and_callbacks(one_worker: wspool.Pool) -> None:
    pool = one_worker
    release, gate = hold(pool)
    called = threading.Event()
    fut = pool.options(deadline=time.monotonic() - 1.0).submit(time.sleep, 0)
    fut.add_done_callback(lambda f: called.set())
    waiter_result: list[object] = []
    waiter = threading.Thread(target=lambda: waiter_result.append(cf.wait([fut], timeout=LIMIT)))
    waiter.start()
    release.set()
    gate.result(LIMIT)
    assert list(cf.as_completed([fut], timeout=LIMIT)) == [fut]
    waiter.join(LIMIT)
    done, not_done = waiter_result[0]  # type: ignore[misc]
    assert done == {fut} and not not_done
    assert called.wait(LIMIT)
    # Caught where cancellation is handled, told apart from it.
    with pytest.raises(cf.CancelledError):
        fut.result(0)
    assert not isinstance(cf.CancelledError(), wspool.DeadlineExceeded)
    assert issubclass(wspool.DeadlineExceeded, Exception)


def test_expired_is_not_an_asyncio_cancellation(one_worker: wspool.Pool) -> None:
    pool = one_worker

    async def main() -> str:
        fut = pool.options(deadline=time.monotonic() - 1.0).submit(time.sleep, 0)
        try:
            await asyncio.wrap_future(fut)
        except wspool.DeadlineExceeded:
            return "expired"
        return "ran"

    assert asyncio.run(main()) == "expired"


def test_priorities_order_a_held_worker(one_worker: wspool.Pool) -> None:
    pool = one_worker
    release, gate = hold(pool)
    order: list[str] = []
    futs = [
        pool.options(priority="low").submit(order.append, "low"),
        pool.submit(order.append, "normal"),
        pool.options(priority="high").submit(order.append, "high"),
    ]
    release.set()
    gate.result(LIMIT)
    for f in futs:
        f.result(LIMIT)
    assert order == ["high", "normal", "low"]


def test_low_calls_queued_first_run_after_normal_calls_queued_after_them(one_worker: wspool.Pool) -> None:
    # Each Low call is behind the normal work queued before it and lets at
    # most LOW_MAX_OVERTAKES (32) later calls start first: three Low calls
    # queued before five normal ones start after all five.
    pool = one_worker
    release, gate = hold(pool)
    order: list[str] = []
    futs = [pool.options(priority="low").submit(order.append, f"L{i}") for i in range(3)]
    futs += [pool.submit(order.append, f"N{i}") for i in range(5)]
    release.set()
    gate.result(LIMIT)
    for f in futs:
        f.result(LIMIT)
    assert order == ["N0", "N1", "N2", "N3", "N4", "L0", "L1", "L2"]


def test_a_lane_of_two_never_runs_more_than_two() -> None:
    with wspool.Pool(max_workers=8) as pool:
        lane = pool.lane(2)
        lock = threading.Lock()
        running = 0
        peak = 0
        both = threading.Barrier(2, timeout=LIMIT)

        def call(i: int) -> int:
            nonlocal running, peak
            with lock:
                running += 1
                peak = max(peak, running)
            if i < 2:
                both.wait()  # the first two run at once: the lane does allow 2
            else:
                time.sleep(0.001)
            with lock:
                running -= 1
            return i

        futs = [lane.submit(call, i) for i in range(40)]
        assert [f.result(LIMIT) for f in futs] == list(range(40))
        assert peak == 2
        assert lane.limit == 2 and lane.priority == "normal"
        # A lane's call that waits (and is lent a thread) still holds its place.
        inner = threading.Event()

        def waits() -> None:
            with wspool.blocking():
                assert inner.wait(LIMIT)

        waiting = [lane.submit(waits) for _ in range(2)]
        third = lane.submit(lambda: running)
        assert not third.done()
        inner.set()
        for f in waiting:
            f.result(LIMIT)
        third.result(LIMIT)
        assert pool.stats().expired == 0


def test_lane_tasks_start_in_order_and_take_deadlines(one_worker: wspool.Pool) -> None:
    pool = one_worker
    lane = pool.lane(3, priority="high")
    assert lane.priority == "high"
    release, gate = hold(pool)
    order: list[int] = []
    futs = [lane.submit(order.append, i) for i in range(3)]
    late = pool.options(lane=lane, deadline=time.monotonic() - 1.0).submit(order.append, 99)
    futs += [lane.submit(order.append, i) for i in range(3, 6)]
    release.set()
    gate.result(LIMIT)
    for f in futs:
        f.result(LIMIT)
    assert isinstance(late.exception(LIMIT), wspool.DeadlineExceeded)
    assert order == list(range(6))
    assert pool.stats().expired == 1


def test_options_with_a_group_and_map(one_worker: wspool.Pool) -> None:
    pool = one_worker
    g = pool.group()
    sub = pool.options(group=g, priority="high", timeout=LIMIT)
    assert list(sub.map(lambda x: x * 2, range(5), timeout=LIMIT)) == [0, 2, 4, 6, 8]
    assert sub.submit(lambda *, k: k, k=7).result(LIMIT) == 7  # keywords belong to fn
    assert g.wait(LIMIT)
    assert g.pending == 0


def test_bad_options_raise() -> None:
    with wspool.Pool(max_workers=1) as pool:
        with pytest.raises(ValueError):
            pool.options(priority="urgent")
        with pytest.raises(ValueError):
            pool.options(timeout=float("nan"))
        with pytest.raises(TypeError):
            pool.options(deadline="soon")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            pool.lane(0)
        with pytest.raises(ValueError):
            pool.options(lane=pool.lane(2), priority="high")
        with pytest.raises(TypeError):
            pool.options(group=object())  # type: ignore[arg-type]
        pool.shutdown()
        with pytest.raises(RuntimeError):
            pool.options(timeout=1.0).submit(print)


def test_awaited_calls_take_deadlines_and_priorities(one_worker: wspool.Pool) -> None:
    pool = one_worker

    async def main() -> list[str]:
        release, gate = hold(pool)
        order: list[str] = []
        late = asyncio.ensure_future(pool.options(timeout=0.02).run(order.append, "late"))
        normal = asyncio.ensure_future(pool.run(order.append, "normal"))
        high = asyncio.ensure_future(pool.options(priority="high").run(order.append, "high"))
        await asyncio.sleep(0)  # each task submits its call
        behind = time.monotonic() + 0.02
        while time.monotonic() <= behind:
            await asyncio.sleep(0.001)
        release.set()
        await asyncio.wait_for(asyncio.gather(normal, high), LIMIT)
        with pytest.raises(wspool.DeadlineExceeded):
            await asyncio.wait_for(late, LIMIT)
        gate.result(LIMIT)
        return order

    assert asyncio.run(main()) == ["high", "normal"]
    assert pool.stats().expired == 1

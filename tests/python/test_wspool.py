"""What wspool.Pool adds to the Executor contract: opt-in growth for waits
and blocking regions, bounded queues and reject policies, stats, groups,
serial queues, configuration errors, and GIL release."""

from __future__ import annotations

import concurrent.futures as cf
import os
import sys
import threading
import time
import weakref
from typing import Any

import pytest

import wspool
from conftest import EVENTUALLY

C_STATS_FIELDS = [
    "threads", "idle_threads", "blocked_threads", "peak_threads", "submitted", "completed", "rejected",
    "cancelled", "panicked", "local_pops", "global_pops", "steals", "spin_hits", "spin_misses",
    "spin_threshold_ns", "threads_started", "threads_retired", "starvation_injections", "queued",
    "queue_delay_p50_ns", "queue_delay_p99_ns", "queue_delay_max_ns", "spawn_failures", "expired", "stalls",
]  # fmt: skip


# -- configuration -----------------------------------------------------------

@pytest.mark.parametrize(
    "kw, exc",
    [
        ({"growth": "sideways"}, ValueError),
        ({"growth": 1}, TypeError),
        ({"reject": "explode"}, ValueError),
        ({"reject": None}, TypeError),
        ({"keep_alive": 0}, ValueError),
        ({"keep_alive": -1.0}, ValueError),
        ({"keep_alive": float("nan")}, ValueError),
        ({"keep_alive": "10"}, TypeError),
        ({"min_threads": -1}, ValueError),
        ({"min_threads": 2.5}, TypeError),
        ({"min_threads": 8, "max_threads": 4, "growth": "adaptive"}, ValueError),
        ({"growth": "fixed", "max_workers": 2, "max_threads": 4}, ValueError),  # fixed: max_threads == max_workers
        ({"stack_size": 1024}, ValueError),
        ({"stack_size": 1.5}, TypeError),
        ({"queue_capacity": -5}, ValueError),
        ({"queue_capacity": "big"}, TypeError),
        ({"growth": "queue_first"}, ValueError),  # queue_first needs a queue_capacity
        ({"name": "a\0b"}, ValueError),
        ({"spin_max_us": -1}, ValueError),
        ({"thread_nice": 20}, ValueError),
        ({"thread_nice": -1}, ValueError),
        ({"thread_nice": 1.0}, TypeError),
        ({"max_workers": 2, "min_threads": 3}, ValueError),  # two names of one bound, disagreeing
        ({"initargs": [1]}, TypeError),
    ],
)
def test_bad_configuration_is_refused(kw: dict[str, Any], exc: type[Exception]) -> None:
    with pytest.raises(exc):
        wspool.Pool(**kw)


def test_good_configuration_works() -> None:
    with wspool.Pool(
        min_threads=2, max_threads=8, queue_capacity=100, growth="scale_first", reject="caller_runs",
        keep_alive=0.5, name="cfg", spin_max_us=0,
    ) as p:
        assert p.submit(sum, [1, 2, 3]).result(timeout=EVENTUALLY) == 6
        assert p.name == "cfg"
        assert "cfg" in repr(p)


@pytest.mark.skipif(sys.platform != "linux", reason="nice is per thread on Linux only")
def test_thread_nice_lowers_the_pools_threads() -> None:
    def own_nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    base = own_nice()
    with wspool.Pool(max_workers=2, thread_nice=4) as p:
        assert p.submit(own_nice).result(timeout=EVENTUALLY) == min(base + 4, 19)
    with wspool.Pool(max_workers=2) as p:
        assert p.submit(own_nice).result(timeout=EVENTUALLY) == base


# -- waits inside tasks ---------------------------------------------------------
#
# A wait inside a task never runs other calls on its thread (see
# test_tpe_parity.py). It is a blocking region: a pool that opted in to
# growth lends a thread meanwhile, so nested waits cannot deadlock there; a
# fixed pool (the default) keeps ThreadPoolExecutor's bound instead.

def tree(pool: wspool.Pool, depth: int) -> int:
    """Each task submits two children and waits for them: sync-over-async."""
    if depth == 0:
        return 1
    left = pool.submit(tree, pool, depth - 1)
    right = pool.submit(tree, pool, depth - 1)
    return left.result() + right.result()


@pytest.mark.parametrize("threads", [1, 2])
def test_nested_waits_with_growth_do_not_deadlock(threads: int) -> None:
    # With ThreadPoolExecutor(2) this deadlocks: both workers park in result()
    # while the children sit in the queue. Each waiting parent here is lent a thread.
    with wspool.Pool(threads, growth="adaptive", max_threads=64) as p:
        assert p.submit(tree, p, 4).result(timeout=EVENTUALLY) == 16
        assert p.stats().peak_threads > threads


def test_nested_waits_on_a_fixed_pool_stay_within_max_workers() -> None:
    with wspool.Pool(8, growth="fixed") as p:
        assert p.submit(tree, p, 2).result(timeout=EVENTUALLY) == 4
        assert p.stats().peak_threads == 8


def test_every_worker_waiting_at_once_still_progresses_with_growth() -> None:
    with wspool.Pool(2, growth="adaptive", max_threads=8) as p:
        barrier = threading.Barrier(2)

        def parent(i: int) -> int:
            barrier.wait(EVENTUALLY)  # both workers are inside a parent task now
            return p.submit(lambda: i * 10).result() + 1

        futures = [p.submit(parent, i) for i in range(2)]
        assert [f.result(timeout=EVENTUALLY) for f in futures] == [1, 11]


def test_map_inside_a_task_with_growth() -> None:
    with wspool.Pool(1, growth="adaptive", max_threads=4) as p:
        f = p.submit(lambda: sum(p.map(lambda x: x * 2, range(100))))
        assert f.result(timeout=EVENTUALLY) == 9900


def test_group_wait_inside_a_task_with_growth() -> None:
    with wspool.Pool(1, growth="adaptive", max_threads=4) as p:
        waiter = []

        def parent() -> int:
            waiter.append(threading.get_ident())
            g = p.group()
            fs = [g.submit(lambda i=i: (i, threading.get_ident())) for i in range(10)]
            assert g.wait()
            return sum(f.result()[0] for f in fs if f.result()[1] != waiter[0])

        # Every child ran, and none on the waiting parent's thread.
        assert p.submit(parent).result(timeout=EVENTUALLY) == 45


def test_current_index_and_is_pool_thread(pool: wspool.Pool) -> None:
    assert wspool.current_index() is None
    assert not pool.is_pool_thread()
    idx, mine = pool.submit(lambda: (wspool.current_index(), pool.is_pool_thread())).result(timeout=EVENTUALLY)
    assert isinstance(idx, int) and idx >= 0 and mine


# -- bounded queue and reject policies ---------------------------------------

def held_pool(reject: str, capacity: int = 2) -> tuple[wspool.Pool, threading.Event, cf.Future[Any]]:
    """A one-thread pool whose worker is busy until the returned event is set."""
    p = wspool.Pool(min_threads=1, growth="fixed", queue_capacity=capacity, reject=reject)
    gate, started = threading.Event(), threading.Event()

    def hold() -> str:
        started.set()
        gate.wait(EVENTUALLY)
        return "held"

    first = p.submit(hold)
    assert started.wait(EVENTUALLY)
    return p, gate, first


def test_full_queue_rejects_with_rejected_error() -> None:
    p, gate, first = held_pool("abort")
    try:
        queued = [p.submit(int, i) for i in range(2)]
        with pytest.raises(wspool.RejectedError, match="queue is full"):
            p.submit(int, 99)
        assert issubclass(wspool.RejectedError, RuntimeError)
        assert p.stats().rejected >= 1
    finally:
        gate.set()
    assert first.result(timeout=EVENTUALLY) == "held"
    assert [f.result(timeout=EVENTUALLY) for f in queued] == [0, 1]  # nothing accepted was lost
    p.shutdown()


def test_caller_runs() -> None:
    p, gate, first = held_pool("caller_runs")
    try:
        [p.submit(int, i) for i in range(2)]
        f = p.submit(threading.get_ident)
        assert f.result(timeout=EVENTUALLY) == threading.get_ident()  # ran right here
    finally:
        gate.set()
    first.result(timeout=EVENTUALLY)
    p.shutdown()


def test_discard_oldest_cancels_the_oldest_queued_future() -> None:
    p, gate, first = held_pool("discard_oldest")
    try:
        oldest, second = p.submit(int, 1), p.submit(int, 2)
        newest = p.submit(int, 3)
        assert oldest.cancelled()
        with pytest.raises(cf.CancelledError):
            oldest.result()
    finally:
        gate.set()
    assert second.result(timeout=EVENTUALLY) == 2 and newest.result(timeout=EVENTUALLY) == 3
    p.shutdown()


def test_block_waits_for_room_with_the_gil_released() -> None:
    p, gate, first = held_pool("block", capacity=1)
    p.submit(int, 1)
    submitted = threading.Event()
    box: list[cf.Future[Any]] = []

    def submitter() -> None:
        box.append(p.submit(int, 2))  # the queue is full: this waits for room
        submitted.set()

    t = threading.Thread(target=submitter)
    t.start()
    # This thread keeps running Python while the submitter is blocked: the
    # blocked submit released the GIL. The worker is held, so no room yet.
    assert not submitted.wait(0.05)
    gate.set()
    assert submitted.wait(EVENTUALLY)
    t.join(EVENTUALLY)
    assert box[0].result(timeout=EVENTUALLY) == 2
    first.result(timeout=EVENTUALLY)
    p.shutdown()


# -- stats --------------------------------------------------------------------

def test_stats_fields_and_counts() -> None:
    with wspool.Pool(min_threads=2) as p:
        for f in [p.submit(int, i) for i in range(100)]:
            f.result(timeout=EVENTUALLY)
        list(p.map(int, range(10)))
        s = p.stats()
    assert sorted(s.as_dict()) == sorted(C_STATS_FIELDS)
    for field in C_STATS_FIELDS:
        assert isinstance(getattr(s, field), int)
    assert s.submitted >= 100 and s.completed >= 100
    assert s.threads >= 2 and s.peak_threads >= s.threads
    assert s.rejected == 0
    assert "submitted=" in repr(s)
    with pytest.raises(AttributeError):
        s.threads = 5  # type: ignore[misc]


def test_cancel_is_counted() -> None:
    p, gate, first = held_pool("abort", capacity=10)
    try:
        f = p.submit(int, 1)
        assert f.cancel()
        assert p.stats().cancelled >= 1
    finally:
        gate.set()
    first.result(timeout=EVENTUALLY)
    p.shutdown()


# -- blocking regions ----------------------------------------------------------

def test_blocking_regions_lend_threads_with_growth() -> None:
    # Six tasks meet at a barrier on a two-thread pool: only possible if the
    # pool lends a thread for each blocking region.
    n = 6
    barrier = threading.Barrier(n)
    with wspool.Pool(2, growth="adaptive", max_threads=32) as p:

        def meet() -> int:
            with wspool.blocking():
                return barrier.wait(EVENTUALLY)

        results = [f.result(timeout=EVENTUALLY) for f in [p.submit(meet) for _ in range(n)]]
        assert sorted(results) == list(range(n))
        assert p.stats().peak_threads >= n


def test_blocking_off_the_pool_is_a_harmless_noop() -> None:
    with wspool.blocking() as b:
        with wspool.blocking():
            pass
    assert isinstance(b, wspool.blocking)


# -- groups and serial queues ----------------------------------------------------

def test_group_submit_and_wait(pool: wspool.Pool) -> None:
    g = pool.group()
    gate = threading.Event()
    fs = [g.submit(pow, i, 2) for i in range(20)]
    held = g.submit(gate.wait, EVENTUALLY)
    assert g.wait(timeout=0.01) is False  # one task still held
    assert g.pending >= 1
    gate.set()
    assert g.wait(timeout=EVENTUALLY) is True
    assert g.pending == 0
    assert [f.result() for f in fs] == [i * i for i in range(20)]
    assert held.result() is True


def test_group_futures_carry_exceptions(pool: wspool.Pool) -> None:
    g = pool.group()
    f = g.submit(int, "not a number")
    assert g.wait(timeout=EVENTUALLY)
    assert isinstance(f.exception(), ValueError)


def test_serial_queue_runs_in_order_one_at_a_time() -> None:
    with wspool.Pool(min_threads=4) as p:
        q = p.serial()
        out: list[int] = []
        running = [0, 0]  # now, max
        lock = threading.Lock()

        def step(i: int) -> None:
            with lock:
                running[0] += 1
                running[1] = max(running[1], running[0])
            out.append(i)
            with lock:
                running[0] -= 1

        fs = [q.submit(step, i) for i in range(300)]
        for f in fs:
            f.result(timeout=EVENTUALLY)
        assert out == list(range(300))
        assert running[1] == 1
        assert q.pending == 0


# -- futures ---------------------------------------------------------------------

def test_futures_are_concurrent_futures(pool: wspool.Pool) -> None:
    f = pool.submit(int, 5)
    assert isinstance(f, cf.Future) and isinstance(f, wspool.Future)
    assert f.result(timeout=EVENTUALLY) == 5


def test_map_iterator_closed_early_cancels_the_rest() -> None:
    with wspool.Pool(min_threads=1, growth="fixed") as p:
        gate, started = threading.Event(), threading.Event()
        ran: list[int] = []

        def item(i: int) -> int:
            started.set()
            gate.wait(EVENTUALLY)
            ran.append(i)
            return i

        it = p.map(item, range(1000))
        assert started.wait(EVENTUALLY)
        it.close()  # type: ignore[attr-defined]
        gate.set()
        assert list(it) == []
    assert len(ran) < 1000


def _record_freed(freed: dict[str, int], name: str) -> None:
    freed[name] = threading.get_ident()


class _Tracked:
    """An object that records, when it is freed, which thread freed it."""

    def __init__(self, name: str, freed: dict[str, int]) -> None:
        weakref.finalize(self, _record_freed, freed, name)


def _wait_until_the_pool_is_done(p: wspool.Pool) -> None:
    """Until no task of `p` is queued or running (none is submitted meanwhile)."""
    deadline = time.monotonic() + EVENTUALLY
    while time.monotonic() < deadline:
        s = p.stats()
        if s.submitted == s.completed:
            return
        time.sleep(0.001)
    raise AssertionError("the pool's tasks did not finish")


def test_consumed_map_keeps_none_of_its_objects() -> None:
    # Once the iterator is exhausted the map holds no argument, result or
    # function: the consumer released them, on its own thread, even while
    # the iterator object is still referenced and a pool thread may still
    # be finishing the map's last task.
    freed: dict[str, int] = {}
    here = threading.get_ident()
    with wspool.Pool(max_workers=4) as p:
        for chunksize in (1, 7):
            freed.clear()

            def fn(a: _Tracked) -> _Tracked:
                return _Tracked(f"result {id(a)}", freed)

            weakref.finalize(fn, _record_freed, freed, "fn")
            args = [_Tracked(f"arg {i}", freed) for i in range(300)]
            it = p.map(fn, args, chunksize=chunksize)
            del args
            n = 0
            for r in it:
                n += 1
                del r
            assert n == 300
            del fn
            assert "fn" in freed and freed["fn"] == here, freed.get("fn")
            assert sum(k.startswith("arg ") for k in freed) == 300
            assert sum(k.startswith("result ") for k in freed) == 300
            # Results were freed by the consumer as it dropped them.
            assert {t for k, t in freed.items() if k.startswith("result ")} == {here}
            del it


def test_closed_map_releases_results_not_taken_on_the_consumer_thread() -> None:
    # Results computed but never taken, and the function, are released by
    # close() on the consumer's thread (with the GIL), not later by whichever
    # pool thread happens to drop the map last.
    freed: dict[str, int] = {}
    here = threading.get_ident()
    with wspool.Pool(max_workers=2) as p:

        def fn(i: int) -> _Tracked:
            return _Tracked(f"result {i}", freed)

        weakref.finalize(fn, _record_freed, freed, "fn")
        it = p.map(fn, range(100))
        first = next(it)
        _wait_until_the_pool_is_done(p)  # every call ran: 99 results wait in the map
        del first, fn
        assert sum(k.startswith("result ") for k in freed) == 1
        it.close()  # type: ignore[attr-defined]
        assert sum(k.startswith("result ") for k in freed) == 100
        assert "fn" in freed
        assert set(freed.values()) == {here}
        assert list(it) == []


def test_pool_dropped_without_shutdown_still_finishes_its_work() -> None:
    p = wspool.Pool(min_threads=2)
    fs = [p.submit(pow, 2, i) for i in range(50)]
    del p
    assert [f.result(timeout=EVENTUALLY) for f in fs] == [2**i for i in range(50)]

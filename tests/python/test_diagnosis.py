"""Issue 26: ``Pool.dump()`` and waits that could never end.

States are set up with events, never with sleeps that must be long enough;
every wait that must end has a bound (a hang becomes a failure)."""

from __future__ import annotations

import threading
import time

import pytest

import wspool

LIMIT = 60.0


def test_dump_names_a_running_call_and_the_queue() -> None:
    with wspool.Pool(max_workers=1, growth="fixed", min_threads=1, max_threads=1) as pool:
        started, release = threading.Event(), threading.Event()

        def held() -> None:
            started.set()
            assert release.wait(LIMIT)

        first = pool.submit(held)
        assert started.wait(LIMIT)
        queued = [pool.submit(lambda: None) for _ in range(2)]
        try:
            d = pool.dump()
            assert isinstance(d, wspool.PoolDump)
            report = str(d)
            # The call is labelled with its function's __qualname__.
            assert 'running "test_dump_names_a_running_call_and_the_queue.<locals>.held"' in report, report
            assert d.queued >= 2, report
            assert any(t["state"] == "running" for t in d.threads), d.threads
            assert d.queues[0]["name"] == "global"
            assert pool.stats().stalls == 0
        finally:
            release.set()
        first.result(LIMIT)
        for f in queued:
            f.result(LIMIT)


def test_a_call_waiting_on_its_own_future_gets_runtime_error() -> None:
    with wspool.Pool() as pool:
        box: list[wspool.Future[object]] = []
        ready = threading.Event()

        def waits_on_itself() -> str:
            assert ready.wait(LIMIT)
            with pytest.raises(RuntimeError, match="deadlock"):
                box[0].result()
            return "refused"

        box.append(pool.submit(waits_on_itself))
        ready.set()
        assert box[0].result(LIMIT) == "refused"


def test_a_group_call_waiting_on_its_own_group_gets_runtime_error() -> None:
    with wspool.Pool() as pool:
        group = pool.group()

        def waits_on_its_group() -> str:
            with pytest.raises(RuntimeError, match="deadlock"):
                group.wait()
            assert group.wait(0) is False  # a timed wait just times out
            return "refused"

        assert group.submit(waits_on_its_group).result(LIMIT) == "refused"
        assert group.wait(LIMIT)


def test_a_thread_lent_to_a_nested_wait_is_marked_lent() -> None:
    """The default pool lends a thread to a call blocked on its own pool's
    work; the snapshot marks that thread ``lent``."""
    with wspool.Pool(max_workers=1) as pool:
        inner_started, release = threading.Event(), threading.Event()

        def inner() -> str:
            inner_started.set()
            assert release.wait(LIMIT)
            return "inner"

        def outer() -> str:
            return pool.submit(inner).result(LIMIT)

        f = pool.submit(outer)
        try:
            assert inner_started.wait(LIMIT)
            d = pool.dump()
            assert any(t["lent"] for t in d.threads), str(d)
            assert "lent for a blocked or waiting thread" in str(d), str(d)
        finally:
            release.set()
        assert f.result(LIMIT) == "inner"


def test_the_default_pool_counts_a_stall_episode_with_nobody_watching() -> None:
    """The default pool (which does not grow for throughput) still watches
    for stalls: with no report asked for and no snapshot taken, an episode
    is counted once queued work stood still for the threshold (1 s)."""
    with wspool.Pool(max_workers=1) as pool:
        started, release = threading.Event(), threading.Event()

        def held() -> None:
            started.set()
            assert release.wait(LIMIT)

        first = pool.submit(held)
        try:
            assert started.wait(LIMIT)
            queued = pool.submit(lambda: None)
            deadline = time.monotonic() + LIMIT
            while pool.stats().stalls == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert pool.stats().stalls == 1
        finally:
            release.set()
        first.result(LIMIT)
        queued.result(LIMIT)

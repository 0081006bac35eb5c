"""Issue 26: ``Pool.dump()`` and waits that could never end.

States are set up with events, never with sleeps that must be long enough;
every wait that must end has a bound (a hang becomes a failure)."""

from __future__ import annotations

import threading

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
            assert "running a task" in report, report
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

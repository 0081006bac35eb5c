"""Issue 26, "what a task is": every call is labelled for ``pool.dump()``
with its callable's ``__qualname__`` (a ``functools.partial``'s function's,
an object without one its type's), or with ``pool.options(label=...)``.

Each call is held by an event while the snapshot is taken (never a sleep
that must be long enough); every wait that must end has a bound."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from typing import Any, Callable

import wspool

LIMIT = 60.0


class Handler:
    def handle(self, release: threading.Event, started: threading.Event) -> None:
        started.set()
        assert release.wait(LIMIT)


class CallableObject:
    def __call__(self, release: threading.Event, started: threading.Event) -> None:
        started.set()
        assert release.wait(LIMIT)


def parse_request(release: threading.Event, started: threading.Event) -> None:
    started.set()
    assert release.wait(LIMIT)


def labels_while_held(pool: wspool.Pool, submit: Callable[[threading.Event, threading.Event], Any]) -> list[Any]:
    """The labels of the running threads while the call `submit` makes is held."""
    started, release = threading.Event(), threading.Event()
    outcome = submit(release, started)
    try:
        assert started.wait(LIMIT)
        threads = pool.dump().threads
        report = str(pool.dump())
        return [t["label"] for t in threads if t["state"] == "running"] + [report]
    finally:
        release.set()
        if isinstance(outcome, wspool.Future):
            outcome.result(LIMIT)


def test_a_call_is_labelled_with_its_qualname_by_default() -> None:
    with wspool.Pool(growth="fixed", min_threads=1, max_threads=1) as pool:
        *labels, report = labels_while_held(pool, lambda r, s: pool.submit(parse_request, r, s))
        assert labels == ["parse_request"], report
        assert 'running "parse_request"' in report, report
        *labels, report = labels_while_held(pool, lambda r, s: pool.submit(Handler().handle, r, s))
        assert labels == ["Handler.handle"], report
        # Through (nested) partials: the function's name.
        nested = functools.partial(functools.partial(parse_request))
        *labels, report = labels_while_held(pool, lambda r, s: pool.submit(functools.partial(nested, r), s))
        assert labels == ["parse_request"], report
        *labels, report = labels_while_held(pool, lambda r, s: pool.submit(CallableObject(), r, s))
        assert labels == ["CallableObject"], report
        # A lambda made per call: its code's qualified name, every time.
        for _ in range(2):
            *labels, report = labels_while_held(pool, lambda r, s: pool.submit(lambda: parse_request(r, s)))
            assert len(labels) == 1 and labels[0].endswith("<locals>.<lambda>"), report


def test_options_label_overrides_the_default() -> None:
    with wspool.Pool(growth="fixed", min_threads=1, max_threads=1) as pool:
        labelled = pool.options(label="request: decode")
        *labels, report = labels_while_held(pool, lambda r, s: labelled.submit(parse_request, r, s))
        assert labels == ["request: decode"], report
        assert 'running "request: decode"' in report, report
        # With other options too, and on a lane.
        lane = pool.lane(1)
        on_lane = pool.options(label="on a lane", lane=lane, timeout=3600)
        *labels, report = labels_while_held(pool, lambda r, s: on_lane.submit(parse_request, r, s))
        assert labels == ["on a lane"], report


def test_groups_lanes_batches_map_and_run_are_labelled() -> None:
    with wspool.Pool(growth="fixed", min_threads=1, max_threads=1) as pool:
        group = pool.group()
        *labels, report = labels_while_held(pool, lambda r, s: group.submit(parse_request, r, s))
        assert labels == ["parse_request"], report
        lane = pool.lane(2)
        *labels, report = labels_while_held(pool, lambda r, s: lane.submit(parse_request, r, s))
        assert labels == ["parse_request"], report
        *labels, report = labels_while_held(pool, lambda r, s: pool.submit_batch(parse_request, [(r, s)])[0])
        assert labels == ["parse_request"], report

        # map: its calls carry the function's name too.
        release, started = threading.Event(), threading.Event()
        results = pool.map(parse_request, [release], [started])
        try:
            assert started.wait(LIMIT)
            assert [t["label"] for t in pool.dump().threads if t["state"] == "running"] == ["parse_request"]
        finally:
            release.set()
        assert list(results) == [None]

        async def main(release: threading.Event, started: threading.Event) -> None:
            call = asyncio.ensure_future(pool.options(label="awaited").run(parse_request, release, started))
            await asyncio.get_running_loop().run_in_executor(None, started.wait, LIMIT)
            seen.extend(t["label"] for t in pool.dump().threads if t["state"] == "running")
            release.set()
            await call

        seen: list[Any] = []
        asyncio.run(main(threading.Event(), threading.Event()))
        assert seen == ["awaited"]


def test_an_idle_thread_shows_no_label() -> None:
    with wspool.Pool(growth="fixed", min_threads=1, max_threads=1) as pool:
        done = threading.Event()
        done.set()
        pool.submit(parse_request, done, threading.Event()).result(LIMIT)
        # The thread goes idle after the call (polled, bounded: no timing).
        deadline = time.monotonic() + LIMIT
        while (d := pool.dump()).threads[0]["state"] == "running":
            assert time.monotonic() < deadline, str(d)
            time.sleep(0.001)
        assert d.threads[0]["label"] is None, str(d)


def test_a_label_must_be_a_str() -> None:
    with wspool.Pool() as pool:
        try:
            pool.options(label=3)  # type: ignore[arg-type]
        except TypeError as e:
            assert "label" in str(e)
        else:
            raise AssertionError("options(label=3) was accepted")

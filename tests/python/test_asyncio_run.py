"""`await Pool.run(fn, *args)`: asyncio on a completion queue (issue 14)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import wspool

from conftest import EVENTUALLY


def test_run_returns_results_and_raises_exceptions() -> None:
    async def main() -> None:
        with wspool.Pool(max_workers=2) as pool:
            assert await pool.run(pow, 2, 10) == 1024
            with pytest.raises(ZeroDivisionError):
                await pool.run(lambda: 1 / 0)
            results = await asyncio.gather(*(pool.run(lambda i=i: i * i) for i in range(500)))
            assert results == [i * i for i in range(500)]

    asyncio.run(asyncio.wait_for(main(), EVENTUALLY))


def test_work_runs_on_pool_threads_and_results_on_the_loop_thread() -> None:
    async def main() -> None:
        loop_thread = threading.get_ident()
        seen: list[int] = []
        with wspool.Pool(max_workers=2) as pool:
            worker = await pool.run(threading.get_ident)
            fut = asyncio.ensure_future(pool.run(wspool.current_index))
            fut.add_done_callback(lambda _: seen.append(threading.get_ident()))
            assert await fut is not None
            await asyncio.sleep(0)
        assert worker != loop_thread
        assert seen == [loop_thread]

    asyncio.run(asyncio.wait_for(main(), EVENTUALLY))


def test_one_reader_per_loop_and_one_drain_per_batch() -> None:
    async def main() -> None:
        with wspool.Pool(max_workers=2) as pool:
            finished: list[int] = []
            gate = threading.Event()

            def work(i: int) -> int:
                # Held until all 50 are in: the first, alone on the queue,
                # would otherwise be resolved by its own submit.
                gate.wait(EVENTUALLY)
                finished.append(i)
                return i

            tasks = [asyncio.ensure_future(pool.run(work, i)) for i in range(50)]
            await asyncio.sleep(0)  # every task submits its call
            gate.set()
            assert len(pool._cqs) == 1
            cq = pool._cqs[asyncio.get_running_loop()]
            # Block the loop (no await) while the pool finishes all 50 calls.
            deadline = time.monotonic() + EVENTUALLY
            while len(finished) < 50:
                assert time.monotonic() < deadline
                time.sleep(0.001)
            time.sleep(0.1)  # each completion is queued right after its call returns
            assert cq.drain() == 50, "one drain resolves the whole batch"
            assert await asyncio.gather(*tasks) == list(range(50))
            assert cq.pending() == 0

    asyncio.run(asyncio.wait_for(main(), EVENTUALLY))


def test_a_cancelled_await_does_not_break_the_queue() -> None:
    async def main() -> None:
        with wspool.Pool(max_workers=1) as pool:
            t = asyncio.ensure_future(pool.run(time.sleep, 0.05))
            await asyncio.sleep(0.01)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            assert await pool.run(lambda: 7) == 7

    asyncio.run(asyncio.wait_for(main(), EVENTUALLY))


def test_shutdown_cancel_cancels_pending_awaits() -> None:
    async def main() -> None:
        pool = wspool.Pool(max_workers=1)
        gate = threading.Event()
        first = asyncio.ensure_future(pool.run(gate.wait))
        rest = [asyncio.ensure_future(pool.run(lambda: 1)) for _ in range(20)]
        await asyncio.sleep(0.02)
        stopper = threading.Thread(target=pool.shutdown, kwargs={"wait": True, "cancel_futures": True})
        stopper.start()
        await asyncio.sleep(0.02)
        gate.set()
        assert await first is True
        done = await asyncio.gather(*rest, return_exceptions=True)
        stopper.join(EVENTUALLY)
        assert all(isinstance(d, asyncio.CancelledError) or d == 1 for d in done)
        assert any(isinstance(d, asyncio.CancelledError) for d in done)

    asyncio.run(asyncio.wait_for(main(), EVENTUALLY))


async def _ticker(ticks: list[int], stop: asyncio.Event) -> None:
    """Counts its turns on the loop: one per loop iteration while others wait."""
    while not stop.is_set():
        ticks[0] += 1
        await asyncio.sleep(0)


def test_sequential_awaits_return_results_and_raise_in_order() -> None:
    # An await at a time: the path where submit may resolve the future itself.
    def work(i: int) -> int:
        if i % 3 == 0:
            raise ValueError(i)
        return i * 2

    async def main() -> None:
        with wspool.Pool(max_workers=2) as pool:
            for i in range(600):
                if i % 3 == 0:
                    with pytest.raises(ValueError) as err:
                        await pool.run(work, i)
                    assert err.value.args == (i,)
                else:
                    assert await pool.run(work, i) == i * 2
            assert pool._cqs[asyncio.get_running_loop()].pending() == 0

    asyncio.run(asyncio.wait_for(main(), EVENTUALLY))


def test_quick_awaits_still_yield_to_the_loop() -> None:
    # However many awaits resolve without the fd, one in 16 in a row yields:
    # a task that only ever awaits quick calls does not starve the others.
    async def main() -> None:
        ticks, stop = [0], asyncio.Event()
        with wspool.Pool(max_workers=2) as pool:
            ticker = asyncio.ensure_future(_ticker(ticks, stop))
            await asyncio.sleep(0)
            before = ticks[0]
            for _ in range(320):
                await pool.run(int)
            assert ticks[0] - before >= 320 // 16
            stop.set()
            await ticker

    asyncio.run(asyncio.wait_for(main(), EVENTUALLY))


def test_a_call_over_before_submit_returns_is_resolved_without_the_loop() -> None:
    # reject="caller_runs" with a full queue runs the call on the loop's own
    # thread, inside submit: it is over before submit returns, every time.
    async def main() -> None:
        ticks, stop = [0], asyncio.Event()
        gate = threading.Event()
        with wspool.Pool(max_workers=1, queue_capacity=1, reject="caller_runs") as pool:
            busy = pool.submit(gate.wait, EVENTUALLY)
            deadline = time.monotonic() + EVENTUALLY
            while pool.stats().queued:  # the worker has taken `busy`
                assert time.monotonic() < deadline
                time.sleep(0.001)
            queued = pool.submit(int)  # fills the queue
            ticker = asyncio.ensure_future(_ticker(ticks, stop))
            await asyncio.sleep(0)
            for _ in range(5):
                before = ticks[0]
                assert await pool.run(threading.get_ident) == threading.get_ident()
                assert ticks[0] == before, "resolved by submit: no trip through the loop"
            with pytest.raises(ZeroDivisionError):
                await pool.run(lambda: 1 / 0)
            gate.set()
            assert busy.result(EVENTUALLY) is True
            assert queued.result(EVENTUALLY) == 0
            stop.set()
            await ticker

    asyncio.run(asyncio.wait_for(main(), EVENTUALLY))


def test_a_blocking_reject_policy_does_not_hold_the_gil_while_it_waits() -> None:
    # reject="block": a full queue makes submit wait for room, which the
    # worker makes only by running Python calls.
    async def main() -> None:
        with wspool.Pool(max_workers=1, queue_capacity=1, reject="block") as pool:
            results = await asyncio.gather(*(pool.run(lambda i=i: time.sleep(0.002) or i) for i in range(8)))
            assert results == list(range(8))

    asyncio.run(asyncio.wait_for(main(), EVENTUALLY))


def test_cancelling_the_await_drops_a_call_not_started() -> None:
    """The only worker is held; an await is cancelled while its call waits
    behind it: once the worker is free, the call is skipped, never run. A
    call submitted after it then runs (the queue is FIFO on one worker, so
    the dropped call was reached first)."""

    async def main() -> None:
        with wspool.Pool(max_workers=1) as pool:
            gate = threading.Event()
            held = pool.submit(gate.wait, EVENTUALLY)
            ran: list[str] = []
            t = asyncio.ensure_future(pool.run(ran.append, "dropped"))
            await asyncio.sleep(0)  # it submits its call
            assert pool._cqs[asyncio.get_running_loop()].pending() == 1
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            gate.set()
            assert held.result(EVENTUALLY) is True
            assert await pool.run(ran.append, "after") is None
            assert ran == ["after"]
            assert pool._cqs[asyncio.get_running_loop()].pending() == 0

    asyncio.run(asyncio.wait_for(main(), EVENTUALLY))

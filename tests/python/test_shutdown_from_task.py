"""Issue 38.4b: a shutdown called from one of the pool's own tasks cannot
wait for itself (its own call has not finished). ``shutdown(wait=True)``
there used to return as if the pool were closed, with the queued calls not
run yet; now it begins the shutdown and raises ``RuntimeError``, as
``ThreadPoolExecutor``'s does ("cannot join current thread"), and as C
(``WSPOOL_EDEADLK``), C++ and Rust (``ShutdownError::OnPoolThread``) report
it. ``wait=False`` promises no wait and returns. Either way the queued calls
still run, and a shutdown from outside then closes the pool.

Every wait that must end has a bound (a hang fails, never a timing)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import pytest

import wspool

LIMIT = 60.0
QUEUED = 19


def shut_from_a_task(pool: Any, wait_for_it: bool) -> tuple[str | None, int]:
    """Runs shutdown(wait=...) in the pool's only worker while QUEUED calls
    wait behind it; returns (the RuntimeError's message or None, how many of
    them had run when shutdown returned or raised)."""
    all_queued = threading.Event()
    ran: list[int] = []

    def shutter() -> tuple[str | None, int]:
        assert all_queued.wait(LIMIT)
        try:
            pool.shutdown(wait=wait_for_it)
        except RuntimeError as e:
            return str(e), len(ran)
        return None, len(ran)

    f = pool.submit(shutter)
    queued = [pool.submit(ran.append, i) for i in range(QUEUED)]
    all_queued.set()
    outcome = f.result(timeout=LIMIT)
    done, not_done = wait(queued, timeout=LIMIT)
    assert not not_done
    assert sorted(ran) == list(range(QUEUED)), "the queued calls still run"
    pool.shutdown(wait=True)  # from outside: the closing point
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(int)
    return outcome


def test_shutdown_wait_from_its_own_task_raises() -> None:
    message, ran = shut_from_a_task(wspool.Pool(1), True)
    assert message is not None, f"shutdown(wait=True) returned with {ran} of {QUEUED} queued calls run"
    assert "cannot join current thread" in message
    assert "own tasks" in message


def test_thread_pool_executor_raises_the_same_way() -> None:
    message, _ = shut_from_a_task(ThreadPoolExecutor(1), True)
    assert message is not None and "cannot join current thread" in message


def test_shutdown_without_wait_from_its_own_task_returns() -> None:
    message, _ = shut_from_a_task(wspool.Pool(1), False)
    assert message is None

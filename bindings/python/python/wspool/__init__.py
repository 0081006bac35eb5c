"""wspool: a work-stealing thread pool as a ``concurrent.futures.Executor``.

``wspool.Pool`` is a ``concurrent.futures.ThreadPoolExecutor`` subclass that
drops in for it (``loop.set_default_executor`` accepts it)::

    import wspool

    with wspool.Pool(max_workers=8) as pool:
        futures = [pool.submit(work, i) for i in range(100)]
        results = [f.result() for f in futures]
        squares = list(pool.map(lambda x: x * x, range(10_000)))

``max_workers=N`` bounds the calls executing at once, as in
``ThreadPoolExecutor``, except that a call waiting on the pool's own work
(``Future.result()``, ``Group.wait()``, a ``map`` iterator,
``concurrent.futures.wait``/``as_completed``) lends its place to that work,
which goes ahead of queued outer calls, and a call inside
``with wspool.blocking():`` does not count: nested waits never deadlock, at
any fan-out, and the threads needed grow with nesting depth only.
``growth="fixed"`` makes N a hard limit on threads instead.
What it adds: a much faster ``map``, ``pool.stats()``, ``pool.group()``,
``pool.serial()``, ``pool.lane(n)`` (at most n calls of it at once),
``pool.options(deadline=, timeout=, priority=)`` (a call not started by its
deadline ends with ``DeadlineExceeded``), a bounded queue
(``queue_capacity``) with a reject policy.
The scheduler is the Rust crate ``wspool``; the GIL is released whenever Rust
waits. The guide is docs/python.md in the repository.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import threading
import time
import weakref
from concurrent.futures import CancelledError, _base
from concurrent.futures import Future as _BaseFuture
from concurrent.futures.thread import BrokenThreadPool
from concurrent.futures.thread import ThreadPoolExecutor as _StockThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, TypeVar, cast

from . import _wspool
from ._wspool import MapIter, PoolDump, RejectedError, Stats, blocking, current_index

if TYPE_CHECKING:
    from typing_extensions import ParamSpec

    _P = ParamSpec("_P")

__all__ = [
    "BrokenThreadPool",
    "DeadlineExceeded",
    "Future",
    "Group",
    "Lane",
    "MapIter",
    "Pool",
    "PoolDump",
    "RejectedError",
    "STACK_SIZE_MIN",
    "Serial",
    "Stats",
    "Submitter",
    "ThreadPoolExecutor",
    "blocking",
    "current_index",
]

__version__ = "0.1.0"

_T = TypeVar("_T")

_UNFINISHED = ("PENDING", "RUNNING")

Group = _wspool.Group
Serial = _wspool.Serial
# A lane is a serial queue with a limit above 1 (``pool.lane(n)``): one class.
Lane = _wspool.Serial

# The smallest worker stack (``stack_size=``), the same as C's
# WSPOOL_STACK_SIZE_MIN and Rust's wspool::STACK_SIZE_MIN: 64 KiB.
STACK_SIZE_MIN = 64 * 1024

_GROWTH = ("compensate", "fixed", "adaptive", "scale_first", "queue_first")
_REJECT = ("abort", "caller_runs", "block", "discard_oldest")
_PRIORITY = ("high", "normal", "low")


class DeadlineExceeded(CancelledError):
    """The call was not started by its deadline (``Pool.options(deadline=...,
    timeout=...)``): it never ran, and never will.

    Its Future is *done*, not cancelled: ``done()`` is True, ``cancelled()``
    False, ``exception()`` returns this error and ``result()`` raises it,
    so ``concurrent.futures.wait``/``as_completed`` and done callbacks see
    it finish like any other call. It subclasses
    ``concurrent.futures.CancelledError`` because, like a cancellation, it
    means "this call's function never ran": code that skips cancelled
    calls (``except CancelledError``) skips expired ones too, and can tell
    them apart with ``except DeadlineExceeded`` first. Being an
    ``Exception`` (not ``asyncio.CancelledError``), it does not cancel an
    asyncio task that awaits the Future through ``asyncio.wrap_future``.
    """


class Future(_BaseFuture[_T]):
    """A ``concurrent.futures.Future`` that knows its wspool task.

    ``result()`` and ``exception()`` wait on the call itself with the GIL
    released: off the pool a short spin, then a park. On a thread of the
    same pool the waiting call lends its place to the call it waits for,
    which goes ahead of calls queued from outside, and runs no other call
    meanwhile, but for one case: at ``max_threads`` it runs the call it
    waits for itself, under a thread state of its own. A wait on another
    executor's future keeps the call's place.
    ``cancel()`` also drops the task from the pool's queue.
    """

    _ws_handle: _wspool.Handle | None = None

    def __init__(self) -> None:
        super().__init__()
        # concurrent.futures.wait / as_completed wait on a waiter's Event:
        # this list makes that wait one the pool sees (see _WaiterList).
        self._waiters = _WaiterList()

    def _ws_wait(self, timeout: float | None) -> float | None:
        h = self._ws_handle
        if h is not None and self._state in _UNFINISHED:
            if not h.wait(timeout):
                return 0.0  # the whole timeout is spent
        return timeout

    def result(self, timeout: float | None = None) -> _T:
        timeout = self._ws_wait(timeout)
        if self._state == "FINISHED" and self._exception is None:
            return self._result  # type: ignore[return-value]
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return super().exception(self._ws_wait(timeout))

    def cancel(self) -> bool:
        if not super().cancel():
            return False
        h = self._ws_handle
        if h is not None:
            h.cancel()
        return True


class _RegionEvent(threading.Event):
    """A waiter's Event whose ``wait`` is a wait on the pool's own work
    (``_wspool.WaitRegion``): the waiting call lends its place to the calls
    it waits for, which go ahead of calls from outside, as for
    ``Future.result()``; at the pool's thread cap it runs one of them."""

    def __init__(self) -> None:
        super().__init__()
        self._ws_handles: list[_wspool.Handle] = []

    def wait(self, timeout: float | None = None) -> bool:
        if self.is_set():
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        signalled = False
        with _wspool.WaitRegion(self._ws_handles) as region:
            while not signalled:
                if region.help():
                    signalled = self.is_set()
                    continue
                step = _SLICE if deadline is None else max(0.0, min(_SLICE, deadline - time.monotonic()))
                signalled = super().wait(step)
                if deadline is not None and time.monotonic() >= deadline:
                    break
        return signalled


_SLICE = _wspool.SIGNAL_SLICE_SECONDS


class _WaiterList(list):  # type: ignore[type-arg]
    """``Future._waiters``. ``concurrent.futures.wait`` and ``as_completed``
    install one waiter on every future while holding all of their
    conditions (no future can finish meanwhile), then wait on its ``event``
    on the calling thread. Called on a thread of the future's own pool, the
    waiter's fresh Event is swapped for a `_RegionEvent` here, at
    installation, which learns every future it waits for."""

    __slots__ = ("_ws_handle",)

    def append(self, waiter: Any) -> None:
        event = getattr(waiter, "event", None)
        handle = getattr(self, "_ws_handle", None)
        if handle is not None and handle.is_local():
            if type(event) is threading.Event:
                region_event = _RegionEvent()
                if event.is_set():
                    region_event.set()
                waiter.event = event = region_event
            if isinstance(event, _RegionEvent):
                event._ws_handles.append(handle)
        super().append(waiter)


class _WorkerThread(threading.Thread):
    """A pool worker as ``threading`` sees it: a ``threading.Thread`` (not a
    ``_DummyThread``), non-daemon like ``ThreadPoolExecutor``'s, bound to the
    OS thread the pool started, with its ``ident`` and ``native_id``.
    ``join()`` and ``is_alive()`` follow the OS thread: the interpreter's
    per-thread sentinel (3.9-3.12) or thread handle (3.13+) is released when
    the worker exits and deletes its Python thread state."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=False)
        # What Thread._bootstrap_inner does on a thread threading started,
        # as _DummyThread does it for a foreign one, but keeping join().
        self._started.set()  # type: ignore[attr-defined]
        self._set_ident()  # type: ignore[attr-defined]
        make_handle = getattr(threading, "_make_thread_handle", None)
        if make_handle is not None:  # 3.13+
            self._handle = make_handle(self._ident)  # type: ignore[attr-defined]
        else:  # the sentinel, and (non-daemon) a place in _shutdown_locks
            self._set_tstate_lock()  # type: ignore[attr-defined]
        if hasattr(self, "_set_native_id"):
            self._set_native_id()
        with threading._active_limbo_lock:  # type: ignore[attr-defined]
            threading._active[self._ident] = self  # type: ignore[attr-defined]

    def start(self) -> None:
        raise RuntimeError("a wspool worker thread is started by its pool")

    def run(self) -> None:  # pragma: no cover - never started by threading
        pass


def _count(name: str, value: object, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, not {value}")
    return value


def _choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, not {value!r}")
    return value


def _make_worker_init(
    prefix: str, initializer: Callable[..., object] | None, initargs: tuple[Any, ...]
) -> Callable[[int], None]:
    def worker_init(index: int) -> None:
        # Runs once on each worker thread, before its first task, doing what
        # threading.Thread's bootstrap and ThreadPoolExecutor's worker do.
        _WorkerThread(f"{prefix}_{index}")
        trace = getattr(threading, "_trace_hook", None)
        if trace is not None:
            sys.settrace(trace)
        profile = getattr(threading, "_profile_hook", None)
        if profile is not None:
            sys.setprofile(profile)
        if initializer is not None:
            try:
                initializer(*initargs)
            except BaseException:
                # As ThreadPoolExecutor does; the pool is then broken.
                _base.LOGGER.critical("Exception in initializer:", exc_info=True)
                raise

    return worker_init


def _stack_size(value: int | None) -> int | None:
    """The worker stack size: ``stack_size=``, else ``threading.stack_size()``,
    else what a new ``threading.Thread`` gets (the platform default)."""
    if value is None:
        value = threading.stack_size() or None
        if value is not None:
            # threading.stack_size() accepts 32 KiB; a pool thread needs the common minimum.
            return max(value, STACK_SIZE_MIN)
        return _wspool.default_stack_size()
    _count("stack_size", value)
    if value < STACK_SIZE_MIN:
        raise ValueError(f"stack_size must be at least {STACK_SIZE_MIN} bytes (64 KiB, as in C and Rust), not {value}")
    return value


def _seconds(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if math.isnan(value):
        raise ValueError(f"{name} must be a number of seconds, not nan")
    return float(value)


class Submitter(_base.Executor):
    """``pool.options(...)``: submits to its pool with per-call options.

    ``submit(fn, /, *args, **kwargs)`` is ``Pool.submit``'s (the keywords
    belong to ``fn``), ``map`` is ``Executor.map`` over it (a Future per
    call), ``await run(fn, *args)`` is ``Pool.run``'s, and
    ``loop.run_in_executor`` accepts it. Its ``shutdown`` does
    nothing: the pool is shut down through the pool. Options:

    - ``deadline``: an absolute time on ``time.monotonic()``'s clock
      (CLOCK_MONOTONIC on Linux, the clock the pool reads); ``timeout``:
      seconds from each ``submit``. The earlier of the two applies. A call
      not started by then never runs: its Future ends with
      ``DeadlineExceeded``. A time already past is accepted (the call
      expires). The deadline is checked where the call would start, and a
      ``Future.result()``/``exception()`` waiting for it ends it at the
      deadline itself.
    - ``priority``: ``"high"`` (taken before other queued work, with a
      bounded bypass), ``"normal"`` (default) or ``"low"`` (behind normal
      work, aged so it is never starved). It orders calls submitted from
      outside the pool; a call submitted by one of the pool's own calls
      keeps the ordinary order.
    - ``group``: the call counts toward this ``pool.group()``.
    - ``lane``: the call runs on this ``pool.lane()``/``pool.serial()``
      (it then takes the lane's priority: giving both is a ``ValueError``).
    - ``label``: what ``pool.dump()`` shows on the thread running the call
      (default: the callable's ``__qualname__``, as for every submission).
      Labels are meant as a small set of names, like metric labels: the
      process keeps each distinct one for its lifetime (at most 65,536).
    """

    def __init__(
        self,
        pool: Pool,
        *,
        deadline: float | None = None,
        timeout: float | None = None,
        priority: str = "normal",
        group: Group | None = None,
        lane: Lane | None = None,
        label: str | None = None,
    ) -> None:
        self._pool = pool
        self._core = pool._core
        self.deadline = _seconds("deadline", deadline)
        self.timeout = _seconds("timeout", timeout)
        self.priority = _choice("priority", priority, _PRIORITY)
        if group is not None and not isinstance(group, Group):
            raise TypeError(f"group must be a wspool.Group, not {type(group).__name__}")
        if lane is not None and not isinstance(lane, Lane):
            raise TypeError(f"lane must be a wspool.Lane, not {type(lane).__name__}")
        if lane is not None and priority != "normal":
            raise ValueError("a lane's calls take the lane's priority: give it to pool.lane(n, priority=...)")
        self.group = group
        self.lane = lane
        if label is not None and not isinstance(label, str):
            raise TypeError(f"label must be a str, not {type(label).__name__}")
        self.label = label

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        """Schedules ``fn(*args, **kwargs)`` with this object's options; returns its ``wspool.Future``.

        Raises like ``Pool.submit``.
        """
        return cast("Future[_T]", self._core.submit_opts(fn, args, kwargs or None, **self._opts()))

    async def run(self, fn: Callable[..., _T], /, *args: Any) -> _T:
        """``Pool.run`` with this object's options: awaits ``fn(*args)`` from a
        coroutine; a call not started by its deadline raises ``DeadlineExceeded``."""
        return await self._pool._ws_run(fn, args, self._opts())

    def _opts(self) -> dict[str, Any]:
        return {
            "deadline": self.deadline,
            "timeout": self.timeout,
            "priority": self.priority,
            "group": self.group,
            "lane": self.lane,
            "label": self.label,
        }

    def __repr__(self) -> str:
        opts = [f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_") and v not in (None, "normal")]
        return f"<wspool.Submitter {' '.join(opts) or 'default options'}>"


class Pool(_StockThreadPoolExecutor):
    """A work-stealing thread pool; a drop-in ``ThreadPoolExecutor``.

    ``ThreadPoolExecutor``'s arguments mean the same: at most ``max_workers``
    calls *execute* at once (default ``min(32, os.cpu_count() + 4)``),
    threads are ``threading.Thread`` objects named
    ``f"{thread_name_prefix}_{n}"`` (default prefix
    ``ThreadPoolExecutor-K``), and ``initializer(*initargs)`` runs once on
    each worker thread before its first task (if it raises, the pool is
    broken: submit raises ``BrokenThreadPool``).

    Nested waits never deadlock, at any fan-out: a call blocked in
    ``Future.result()``, ``Group.wait()``, a ``map`` iterator or
    ``concurrent.futures.wait``/``as_completed`` on this pool's work lends
    its place to that work, which goes ahead of calls queued from outside;
    a thread is lent only when every thread is waiting, so threads grow
    with nesting depth, not fan-out; at ``max_threads`` a waiting call runs
    the call it waits for on its own thread. A call inside
    ``with wspool.blocking():`` gives its place to any call and is lent a
    thread at once. When a wait or region ends the call takes its place back
    at once, even over ``max_workers`` (until it next waits or returns; no
    call starts meanwhile), so a lock held across ``result()`` cannot
    deadlock. A wait on anything else keeps the place: ``Pool(1)`` is
    serial. The exact bound is in docs/python.md.

    wspool's own keywords mirror the C configuration:

    - ``growth``: ``"compensate"`` (default: as above; threads are added
      only for such waits, never for throughput), ``"fixed"`` (exactly
      ``max_workers`` threads, never more: nested waits can then deadlock,
      as on ``ThreadPoolExecutor``), or ``"adaptive"``, ``"scale_first"``,
      ``"queue_first"`` (the C policies: they also add threads for
      throughput, so more than ``max_workers`` calls may run at once).
    - ``max_threads``: the ceiling on threads (default
      ``max(256, max_workers)``); with ``"fixed"`` only ``max_workers``
      itself.
    - ``min_threads``: another name for ``max_workers``: the threads kept
      alive, a floor as C's ``min_threads`` is (under ``"compensate"``,
      ``max_workers`` is also the bound on calls executing at once).
    - ``queue_capacity``: tasks allowed to wait (0 = unbounded, the default).
    - ``reject``: what a full queue does: ``"abort"`` (raise
      ``RejectedError``, the default), ``"caller_runs"``, ``"block"`` or
      ``"discard_oldest"`` (the oldest queued task is cancelled).
    - ``keep_alive``: seconds an extra thread idles before it retires.
    - ``name``: thread-name prefix (same as ``thread_name_prefix``).
    - ``spin_max_us``: debounce spin cap in microseconds (0 disables spinning).
    - ``stack_size``: worker stack in bytes, at least ``STACK_SIZE_MIN``
      (64 KiB, as in C and Rust; default: ``threading.stack_size()`` if set,
      raised to that minimum, else what a ``threading.Thread`` gets).
    - ``thread_nice``: the pool's threads run this many steps (0-19) nicer
      than the thread that creates the pool, so an event loop sharing the
      cores preempts them (Linux; elsewhere ignored). Default 0.

    Bad values raise ``ValueError`` or ``TypeError``.
    """

    def __init__(
        self,
        max_workers: int | None = None,
        thread_name_prefix: str = "",
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        *,
        growth: str = "compensate",
        max_threads: int | None = None,
        min_threads: int | None = None,
        queue_capacity: int = 0,
        reject: str = "abort",
        keep_alive: float = 10.0,
        name: str | None = None,
        spin_max_us: int | None = None,
        stack_size: int | None = None,
        thread_nice: int = 0,
    ) -> None:
        # ThreadPoolExecutor.__init__ is not called: it would build the
        # thread-per-task machinery this class replaces.
        if max_workers is not None and min_threads is not None and max_workers != min_threads:
            raise ValueError(
                f"max_workers={max_workers!r} and min_threads={min_threads!r} name the same bound: give one"
            )
        if max_workers is None:
            max_workers = min_threads
        if max_workers is None:
            max_workers = min(32, (os.cpu_count() or 1) + 4)  # ThreadPoolExecutor's default
        elif not isinstance(max_workers, bool) and isinstance(max_workers, int) and max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        _count("max_workers", max_workers, minimum=1)
        _choice("growth", growth, _GROWTH)
        if max_threads is not None:
            _count("max_threads", max_threads)
            if growth == "fixed" and max_threads != max_workers:
                raise ValueError(
                    f'growth="fixed" keeps exactly max_workers={max_workers} threads: '
                    f"max_threads={max_threads} contradicts it"
                )
            if 0 < max_threads < max_workers:
                raise ValueError(f"max_threads={max_threads} is below max_workers={max_workers}")
        _count("queue_capacity", queue_capacity)
        if spin_max_us is not None:
            _count("spin_max_us", spin_max_us)
        _count("thread_nice", thread_nice)
        if thread_nice > 19:
            raise ValueError(f"thread_nice must be between 0 and 19, not {thread_nice}")
        _choice("reject", reject, _REJECT)
        if isinstance(keep_alive, bool) or not isinstance(keep_alive, (int, float)):
            raise TypeError(f"keep_alive must be a number of seconds, not {type(keep_alive).__name__}")
        if not math.isfinite(keep_alive) or keep_alive <= 0:
            raise ValueError(f"keep_alive must be a positive number of seconds, not {keep_alive!r}")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        if not isinstance(initargs, tuple):
            raise TypeError(f"initargs must be a tuple, not {type(initargs).__name__}")
        if name is not None and thread_name_prefix and name != thread_name_prefix:
            raise ValueError(f"name={name!r} and thread_name_prefix={thread_name_prefix!r} name the same prefix: give one")
        prefix = name if name is not None else thread_name_prefix
        if not isinstance(prefix, str):
            raise TypeError(f"name must be a str, not {type(prefix).__name__}")
        stack = _stack_size(stack_size)
        if not prefix:
            # ThreadPoolExecutor's counter: pools of both kinds are numbered alike.
            prefix = f"ThreadPoolExecutor-{self._counter()}"  # type: ignore[attr-defined]
        # The attributes ThreadPoolExecutor's own code and its users read.
        self._ws_max_workers = max_workers
        self._thread_name_prefix = prefix
        self._initializer = initializer  # type: ignore[assignment]  # typeshed's is narrower than TPE's
        self._initargs = initargs
        self._core = _wspool.Core(
            future_cls=Future,
            name=prefix,
            min_threads=max_workers,
            max_threads=max_threads or 0,
            queue_capacity=queue_capacity,
            growth=growth,
            reject=reject,
            keep_alive=float(keep_alive),
            spin_max_us=spin_max_us,
            worker_init=_make_worker_init(prefix, initializer, initargs),
            stack_size=stack,
            thread_nice=thread_nice,
        )
        # One completion queue per asyncio loop that awaits `run` (see `run`).
        self._cqs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _wspool.Completions] = (
            weakref.WeakKeyDictionary()
        )

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        """Schedules ``fn(*args, **kwargs)``; returns a ``wspool.Future``.

        Raises ``RejectedError`` if the bounded queue is full (reject="abort"),
        ``RuntimeError`` after shutdown (from any thread, the pool's own
        included), ``BrokenThreadPool`` if an initializer failed.
        """
        return cast("Future[_T]", self._core.submit(fn, *args, **kwargs))

    def submit_batch(self, fn: Callable[..., _T], iterable: Iterable[Iterable[Any]], /) -> list[Future[_T]]:
        """Schedules ``fn(*args)`` for each ``args`` of ``iterable``, in one call.

        Returns the ``wspool.Future`` of each call, in order. The calls enter
        the pool as one batch: one admission and one wake-up for all of them
        instead of one per ``submit`` (faster for many small calls; ``map``
        starts its tasks this way). Raises like ``submit``. If the pool
        refuses a call (a full bounded queue with ``reject="abort"``; a
        shutdown refuses the whole batch), the calls before it stay
        scheduled and the exception's ``futures`` attribute holds their
        futures; the refused call and the ones after it are never run.
        When ``submit`` is overridden or patched, this goes through it
        call by call.
        """
        if type(self).submit is not _POOL_SUBMIT:
            return [self.submit(fn, *args) for args in iterable]
        return cast("list[Future[_T]]", self._core.submit_batch(fn, (tuple(a) for a in iterable)))

    async def run(self, fn: Callable[..., _T], /, *args: Any) -> _T:
        """Awaits ``fn(*args)``, run on the pool, from a coroutine on the running asyncio loop.

        Results reach the loop through one ``loop.add_reader`` on a completion
        queue's file descriptor: one loop wake-up per batch of finished calls,
        not one ``call_soon_threadsafe`` per call. An await with no other
        ``run`` call in flight on the loop waits briefly for a quick call
        (GIL released, at most ``WSPOOL_WAIT_SPIN_US``, learnt) and then
        returns without a trip through the loop, as an await of something
        already available does; one in 16 such awaits in a row still yields
        to the loop. Exceptions propagate; a pool shutdown that cancels the
        call cancels the await. Cancelling the awaiting task before the call
        started drops the call: it never runs (a worker that reaches it only
        skips it). A call that already started runs to its end, and its
        result is dropped.
        """
        return await self._ws_run(fn, args, {})

    async def _ws_run(self, fn: Callable[..., _T], args: tuple[Any, ...], opts: dict[str, Any]) -> _T:
        loop = asyncio.get_running_loop()
        cq = self._cqs.get(loop)
        if cq is None:
            cq = _wspool.Completions(self._core)
            loop.add_reader(cq.fileno(), cq.drain)
            self._cqs[loop] = cq
        fut: asyncio.Future[_T] = loop.create_future()
        if cq.submit(fut, fn, args, **opts):
            await asyncio.sleep(0)  # resolved already, many in a row: let other tasks run
        # Cancelling the awaiting task cancels `fut`, which the worker checks before the call.
        return await fut

    def map(
        self,
        fn: Callable[..., _T],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
    ) -> Iterator[_T]:
        """Like ``Executor.map``: ``fn(*args)`` for each ``args`` of ``zip(*iterables)``.

        Results come back in order; the first exception is raised in its
        place. ``timeout`` (seconds from this call) raises ``TimeoutError``.
        Every call is scheduled when ``map`` returns and runs even if the
        iterator is never consumed; closing or dropping an iterator that was
        advanced cancels the calls that have not started. Each chunk of
        ``chunksize`` calls runs as one task. No ``Future`` is made per
        call, which is why ``map`` is much faster than a loop of ``submit``
        -- unless ``submit`` is overridden or patched, when ``map`` goes
        through it as ``Executor.map`` does.
        """
        if type(self).submit is not _POOL_SUBMIT:
            return super().map(fn, *iterables, timeout=timeout, chunksize=chunksize)
        _count("chunksize", chunksize)
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if timeout is not None and not isinstance(timeout, (int, float)):
            raise TypeError(f"timeout must be a number, not {type(timeout).__name__}")
        return self._core.map(fn, zip(*iterables), chunksize, None if timeout is None else float(timeout))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stops accepting tasks, from every thread; idempotent.

        ``wait``: return after every queued and running task finished (the
        GIL is released meanwhile; Ctrl-C interrupts). ``cancel_futures``:
        cancel the tasks that have not started. Called from one of the
        pool's own tasks it never waits (it would wait for itself).
        """
        self._core.shutdown(wait, cancel_futures)

    @property
    def _max_workers(self) -> int:  # type: ignore[override]
        # dask's threaded scheduler reads this right before it schedules a
        # graph on the pool: the moment to make its wait one the pool sees.
        if not _dask_hooked and "dask.local" in sys.modules:
            _hook_dask()
        return self._ws_max_workers

    # ThreadPoolExecutor's attributes, read-only here: `_broken` is False or
    # why the pool is broken (typeshed says bool; TPE stores the message).
    @property
    def _broken(self) -> str | bool:  # type: ignore[override]
        return self._core.broken or False

    @property
    def _shutdown(self) -> bool:  # type: ignore[override]
        return self._core.is_shutdown

    def stats(self) -> Stats:
        """A snapshot of the pool's counters (threads, queue, steals, delays...)."""
        return self._core.stats()

    def dump(self) -> PoolDump:
        """What every pool thread and queue is doing now (``str()``: the report;
        see docs/diagnosis.md). The pool keeps running while it is taken."""
        return self._core.dump()

    def group(self) -> Group:
        """A group: ``g.submit(...)`` like ``pool.submit``; ``g.wait(timeout)`` waits for all of them."""
        return self._core.group()

    def serial(self) -> Serial:
        """A serial queue: its tasks run one at a time, in submission order."""
        return self._core.serial()

    def lane(self, limit: int, *, priority: str = "normal") -> Lane:
        """A lane: a FIFO queue running at most ``limit`` of its calls at once.

        Calls start in submission order; queued ones occupy no thread; a
        call that blocks or waits keeps its place in the lane (threads the
        pool lends meanwhile never run more than ``limit`` of its calls).
        Lanes take turns fairly. ``priority`` (``"high"``, ``"normal"``,
        ``"low"``) is where its next call waits among the pool's queued
        work. ``lane.submit(fn, *args, **kwargs)`` like ``pool.submit``;
        for a deadline, ``pool.options(lane=lane, timeout=...)``.
        ``pool.serial()`` is a lane of 1.
        """
        _count("limit", limit, minimum=1)
        _choice("priority", priority, _PRIORITY)
        return self._core.lane(limit, priority)

    def options(
        self,
        *,
        deadline: float | None = None,
        timeout: float | None = None,
        priority: str = "normal",
        group: Group | None = None,
        lane: Lane | None = None,
        label: str | None = None,
    ) -> Submitter:
        """An executor that submits to this pool with per-call options: a
        ``deadline`` (``time.monotonic()`` clock) or ``timeout`` (seconds
        from each submit), a ``priority``, a ``group``, a ``lane``, a
        ``label`` for ``pool.dump()``; see ``Submitter``.
        ``pool.options(priority="high").submit(fn, *args)``.
        """
        return Submitter(
            self, deadline=deadline, timeout=timeout, priority=priority, group=group, lane=lane, label=label
        )

    def is_pool_thread(self) -> bool:
        """True when called on one of this pool's worker threads."""
        return self._core.is_pool_thread()

    @property
    def name(self) -> str:
        """The thread-name prefix."""
        return self._thread_name_prefix or ""

    def __repr__(self) -> str:
        state = "forked" if self._core.forked else "shut down" if self._core.is_shutdown else "running"
        return f"<wspool.Pool {self._thread_name_prefix!r} {state}>"


_POOL_SUBMIT = Pool.submit


class ThreadPoolExecutor(Pool):
    """``wspool.Pool`` under the name dask.distributed looks for.

    A ``distributed.Worker`` runs a task on its executor through its own
    bookkeeping (``get_worker()``, ``secede()``, ``rejoin()``,
    ``worker_client()``) only when the executor's class name contains
    ``ThreadPoolExecutor`` (``"ThreadPoolExecutor" in str(type(e))`` in
    ``distributed.worker``); other executors run tasks without it. Pass
    ``wspool.ThreadPoolExecutor(n)`` as a worker's ``executor=`` (or
    ``LocalCluster(processes=False, executor=...)``). Inside its calls,
    ``distributed.secede()`` makes the call a ``wspool.blocking()`` region
    (it stops counting against ``max_workers``, and the pool lends a thread
    at once) and ``distributed.rejoin()`` ends it: the call takes its place
    back at once, as every wait's end does. Everything else is ``Pool``'s.
    """

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        tpe = sys.modules.get("distributed.threadpoolexecutor")
        if tpe is None:
            return super().submit(fn, *args, **kwargs)
        return super().submit(_with_secede, tpe.thread_state, _SecedeAdapter(), fn, args, kwargs)


class _SecedeRegion:
    """``executor._threads`` as ``distributed.secede`` uses it: removing the
    calling thread opens a ``blocking()`` region."""

    __slots__ = ("adapter",)

    def __init__(self, adapter: _SecedeAdapter) -> None:
        self.adapter = adapter

    def remove(self, thread: threading.Thread) -> None:
        self.adapter.secede()

    def add(self, thread: threading.Thread) -> None:
        pass


class _RejoinList(list):  # type: ignore[type-arg]
    """``executor._rejoin_list`` as ``distributed.rejoin`` uses it: the
    (thread, event) it appends ends the region and sets the event at once."""

    def __init__(self, adapter: _SecedeAdapter) -> None:
        super().__init__()
        self.adapter = adapter

    def append(self, item: Any) -> None:
        self.adapter.rejoin()
        item[1].set()


class _SecedeAdapter:
    """What ``distributed.threadpoolexecutor.thread_state.executor`` must
    offer ``secede``/``rejoin`` during one call of a wspool pool."""

    def __init__(self) -> None:
        self._region: blocking | None = None
        self._threads = _SecedeRegion(self)
        self._rejoin_lock = threading.Lock()
        self._rejoin_list = _RejoinList(self)

    def secede(self) -> None:
        if self._region is None:
            self._region = blocking()
            self._region.__enter__()

    def rejoin(self) -> None:
        region, self._region = self._region, None
        if region is not None:
            region.__exit__(None, None, None)

    def _adjust_thread_count(self) -> None:
        pass

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        pass  # rejoin's wake-up call: nothing to wake here


def _with_secede(
    thread_state: Any, adapter: _SecedeAdapter, fn: Callable[..., _T], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> _T:
    # distributed's own worker threads keep these two attributes for the
    # lifetime of the thread; here they last one call.
    thread_state.executor = adapter
    thread_state.proceed = True
    try:
        return fn(*args, **kwargs)
    finally:
        adapter.rejoin()  # a call that seceded and returned: the region ends with it
        del thread_state.executor
        del thread_state.proceed

_dask_hooked = False


def _hook_dask() -> None:
    """dask's threaded scheduler (``dask.compute(..., pool=pool)`` or
    ``dask.config.set(pool=pool)``) waits for the calls it submitted in
    ``dask.local.queue_get``, a plain ``queue.Queue.get``. Inside one of
    the pool's own calls (a nested compute) that wait becomes a wait on the
    pool's own work, like ``Future.result()``; elsewhere (any
    other thread, any other executor) ``queue_get`` behaves as before."""
    global _dask_hooked
    _dask_hooked = True
    local = sys.modules.get("dask.local")
    get = getattr(local, "queue_get", None)
    if get is None or getattr(get, "_wspool_region", False):
        return

    def queue_get(q: Any) -> Any:
        if current_index() is None:
            return get(q)
        with _wspool.WaitRegion():
            got = get(q)
        return got

    queue_get._wspool_region = True  # type: ignore[attr-defined]
    local.queue_get = queue_get  # type: ignore[union-attr]


def _python_exit() -> None:
    # Like ThreadPoolExecutor's hook: from now on submissions raise, every
    # pool of the process (one kept alive by a group or a serial queue alone
    # included) finishes what it accepted, and its workers exit, before the
    # interpreter joins threads and finalizes; after this no worker takes
    # the GIL again.
    try:
        all_gone = _wspool._atexit()
    except BaseException:  # noqa: BLE001 - never fail interpreter exit
        all_gone = False
    if not all_gone:
        # Workers that did not exit within the grace period (a call that
        # never returns) must not keep the interpreter from exiting: they
        # never touch Python again.
        locks = getattr(threading, "_shutdown_locks", None)
        if locks is not None:
            with threading._shutdown_locks_lock:  # type: ignore[attr-defined]
                for t in threading.enumerate():
                    if isinstance(t, _WorkerThread):
                        locks.discard(getattr(t, "_tstate_lock", None))


try:
    threading._register_atexit(_python_exit)  # type: ignore[attr-defined]
except (AttributeError, RuntimeError):  # pragma: no cover - interpreter already exiting
    import atexit

    atexit.register(_python_exit)

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_wspool._after_fork_child)

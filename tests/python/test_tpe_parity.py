"""wspool.Pool as a drop-in for ThreadPoolExecutor (issue 12): each test runs
the same program on both executors, in the same test, and compares what a
program can observe."""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import ctypes.util
import decimal
import gc
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import pytest

import wspool
from conftest import EVENTUALLY, run_script

EXECUTORS: list[type[ThreadPoolExecutor]] = [ThreadPoolExecutor, wspool.Pool]


def each(fn: Callable[[type[ThreadPoolExecutor]], Any]) -> dict[str, Any]:
    """`fn(cls)` for ThreadPoolExecutor and wspool.Pool, by class name."""
    return {cls.__name__: fn(cls) for cls in EXECUTORS}


def same(results: dict[str, Any]) -> Any:
    """Asserts both executors gave the same result; returns it."""
    assert results["Pool"] == results["ThreadPoolExecutor"], results
    return results["Pool"]


def run_once(ex: ThreadPoolExecutor, fn: Callable[[], Any], attr: str | None = None) -> Any:
    """`fn()` on `ex` (or `ex.<attr>`), then shuts `ex` down."""
    with ex:
        return getattr(ex, attr) if attr else ex.submit(fn).result(timeout=EVENTUALLY)


# -- 1. max_workers bounds the calls running at once ------------------------------


@pytest.mark.parametrize("n", [1, 4])
def test_max_workers_bounds_concurrent_calls(n: int) -> None:
    def peak(cls: type[ThreadPoolExecutor]) -> int:
        lock = threading.Lock()
        # `back`: calls executing again after a blocking() region. Such a
        # call takes its place back at once, even over the bound (a lock it
        # holds may be what the others wait for); it is the only way over.
        running = back = top = 0

        def enter(returning: bool = False) -> None:
            nonlocal running, back, top
            with lock:
                running += 1
                back += returning
                top = max(top, running - back)

        def leave(returning: bool = False) -> None:
            nonlocal running, back
            with lock:
                running -= 1
                back -= returning

        def task(blocking: bool) -> None:
            enter()
            if blocking:
                # A call inside blocking() is not executing: it is lent a
                # thread and takes its place back before it goes on.
                leave()
                with wspool.blocking():
                    time.sleep(0.002)
                enter(returning=True)
                leave(returning=True)
            else:
                time.sleep(0.002)
                leave()

        with cls(max_workers=n) as ex:
            for f in [ex.submit(task, i % 2 == 0) for i in range(60)]:
                f.result(timeout=EVENTUALLY)
            list(ex.map(task, [True, False] * 30))
        return top

    results = each(peak)
    assert results["ThreadPoolExecutor"] <= n and results["Pool"] <= n, results


def test_single_worker_runs_calls_one_at_a_time_in_order() -> None:
    def order(cls: type[ThreadPoolExecutor]) -> list[int]:
        seen: list[int] = []
        with cls(max_workers=1) as ex:
            for i in range(200):
                ex.submit(seen.append, i)
        return seen

    assert same(each(order)) == list(range(200))


def test_growth_is_an_explicit_opt_in() -> None:
    # The opt-in lends threads to blocking regions beyond max_workers.
    n = 6
    barrier = threading.Barrier(n)

    def meet() -> int:
        with wspool.blocking():
            return barrier.wait(EVENTUALLY)

    with wspool.Pool(2, growth="adaptive", max_threads=n) as p:
        assert sorted(f.result(timeout=EVENTUALLY) for f in [p.submit(meet) for _ in range(n)]) == list(range(n))
        assert p.stats().peak_threads <= n


# -- 2. a waiting call never sees another call's state ------------------------------

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")
LOCAL = threading.local()


def test_waiting_call_keeps_its_thread_state_and_runs_nothing_else() -> None:
    def observe(cls: type[ThreadPoolExecutor]) -> dict[str, Any]:
        gate = threading.Event()
        waiting = threading.Event()
        lock = threading.Lock()
        waiter_ident: list[int] = []
        ran_on_waiter: list[int] = []
        quotients: list[decimal.Decimal] = []

        def other(i: int) -> int:
            if threading.get_ident() in waiter_ident and waiting.is_set():
                ran_on_waiter.append(i)
            LOCAL.value = f"other{i}"
            VAR.set(f"other{i}")
            quotients.append(decimal.Decimal(1) / decimal.Decimal(7))
            took = lock.acquire(timeout=0.05)  # held by the waiter: never its own thread
            if took:
                lock.release()
            return i

        def waiter(ex: Executor) -> dict[str, Any]:
            waiter_ident.append(threading.get_ident())
            LOCAL.value = "waiter"
            VAR.set("waiter")
            with lock, decimal.localcontext() as ctx:
                ctx.prec = 3
                others = [ex.submit(other, i) for i in range(8)]  # queued ahead of `inner`
                inner = ex.submit(lambda: "inner")
                waiting.set()
                value = inner.result(timeout=EVENTUALLY)
                waiting.clear()
                assert [f.result(timeout=EVENTUALLY) for f in others] == list(range(8))
                return {
                    "inner": value,
                    "local": LOCAL.value,
                    "var": VAR.get(),
                    "prec": decimal.getcontext().prec,
                    "1/7": str(decimal.Decimal(1) / decimal.Decimal(7)),
                }

        with cls(max_workers=2) as ex:
            blocker = ex.submit(gate.wait, EVENTUALLY)  # the other worker, busy
            f = ex.submit(waiter, ex)
            assert waiting.wait(EVENTUALLY)
            time.sleep(0.05)  # the waiter is parked in result() now
            gate.set()
            out = f.result(timeout=EVENTUALLY)
            blocker.result(timeout=EVENTUALLY)
        out["ran_on_waiter"] = ran_on_waiter
        out["others_at_default_precision"] = all(len(str(q)) > 10 for q in quotients)
        return out

    assert same(each(observe)) == {
        "inner": "inner",
        "local": "waiter",
        "var": "waiter",
        "prec": 3,
        "1/7": "0.143",
        "ran_on_waiter": [],
        "others_at_default_precision": True,
    }


def test_initializer_state_reaches_every_call() -> None:
    # A fresh worker's context: what the initializer set, as on a TPE thread.
    def init() -> None:
        decimal.getcontext().prec = 5
        LOCAL.value = "init"

    def probe(cls: type[ThreadPoolExecutor]) -> set[tuple[int, str]]:
        with cls(max_workers=2, initializer=init) as ex:
            return set(ex.map(lambda _: (decimal.getcontext().prec, LOCAL.value), range(50)))

    assert same(each(probe)) == {(5, "init")}


# -- 3. shutdown: submit refused from every thread, resubmitting tasks end -----------


def test_submit_after_shutdown_raises_on_every_thread() -> None:
    def attempt(cls: type[ThreadPoolExecutor]) -> list[str]:
        go = threading.Event()
        ex = cls(max_workers=2)

        def late() -> str:
            go.wait(EVENTUALLY)
            try:
                ex.submit(int)
            except RuntimeError as e:
                return str(e)
            return "accepted"

        f = ex.submit(late)
        ex.shutdown(wait=False)
        go.set()
        from_main = ""
        try:
            ex.submit(int)
        except RuntimeError as e:
            from_main = str(e)
        out = [from_main, f.result(timeout=EVENTUALLY)]
        ex.shutdown(wait=True)
        return out

    assert same(each(attempt)) == ["cannot schedule new futures after shutdown"] * 2


@pytest.mark.parametrize("exit_by", ["with", "shutdown", "interpreter exit"])
def test_self_resubmitting_task_does_not_hang_shutdown(exit_by: str) -> None:
    # CPython's test_hang_global_shutdown_lock, minus the fork; run in a fresh
    # interpreter with a watchdog, once per executor.
    body = {
        "with": "with cls(1) as pool:\n    pool.submit(resubmit, pool)",
        "shutdown": "pool = cls(1)\npool.submit(resubmit, pool)\npool.shutdown(wait=True)",
        "interpreter exit": "pool = cls(1)\npool.submit(resubmit, pool)",
    }[exit_by]
    for name in ["concurrent.futures.ThreadPoolExecutor", "wspool.Pool"]:
        code = f"import concurrent.futures, wspool\ncls = {name}\n"
        code += "def resubmit(pool):\n    pool.submit(resubmit, pool)\n" + body + "\nprint('done')\n"
        proc = run_script(code, timeout=EVENTUALLY)
        assert proc.returncode == 0 and proc.stdout.strip() == "done", (name, proc.stderr)


# -- 4. every call of a never-iterated map runs --------------------------------------


def test_never_iterated_map_runs_every_call() -> None:
    def count(cls: type[ThreadPoolExecutor]) -> int:
        done: list[int] = []
        ex = cls(max_workers=2)
        it = ex.map(done.append, range(1000))
        del it
        gc.collect()
        ex.shutdown(wait=True)
        return len(done)

    assert same(each(count)) == 1000


def test_abandoned_map_cancels_calls_not_started() -> None:
    def count(cls: type[ThreadPoolExecutor]) -> int:
        gate = threading.Event()
        done: list[int] = []

        started = threading.Event()

        def slow(i: int) -> int:
            if i > 0:
                started.set()
                gate.wait(EVENTUALLY)
            done.append(i)
            return i

        with cls(max_workers=1) as ex:
            it = ex.map(slow, range(100))
            assert next(it) == 0
            assert started.wait(EVENTUALLY)  # call 1 runs, held at the gate
            it.close()  # type: ignore[attr-defined]
            gate.set()
        return len(done)

    assert same(each(count)) == 2


# -- 5. worker stacks ------------------------------------------------------------------


def _stack_size_here() -> int:
    """This thread's stack size, from pthread_getattr_np."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    attr = ctypes.create_string_buffer(128)  # pthread_attr_t is 56 bytes on x86-64 glibc
    libc.pthread_self.restype = ctypes.c_ulong
    assert libc.pthread_getattr_np(ctypes.c_ulong(libc.pthread_self()), attr) == 0
    size = ctypes.c_size_t()
    addr = ctypes.c_void_p()
    assert libc.pthread_attr_getstack(attr, ctypes.byref(addr), ctypes.byref(size)) == 0
    libc.pthread_attr_destroy(attr)
    return size.value


def _default_thread_stack() -> int:
    """The stack a new thread gets when none is asked for (glibc: ulimit -s)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    attr = ctypes.create_string_buffer(128)
    assert libc.pthread_attr_init(attr) == 0
    size = ctypes.c_size_t()
    assert libc.pthread_attr_getstacksize(attr, ctypes.byref(size)) == 0
    libc.pthread_attr_destroy(attr)
    return size.value


# glibc may hand a new thread a cached stack larger than asked for, so the
# checks are lower bounds: never smaller than what a threading.Thread gets.
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pthread_getattr_np is glibc's")
@pytest.mark.parametrize("requested", [0, 4 << 20, 16 << 20])
def test_worker_stacks_honour_threading_stack_size(requested: int) -> None:
    expected = requested or _default_thread_stack()
    old = threading.stack_size(requested)
    try:
        sizes = each(lambda cls: run_once(cls(max_workers=1), _stack_size_here))
    finally:
        threading.stack_size(old)
    assert all(size >= expected for size in sizes.values()), (expected, sizes)


def test_stack_size_minimum_is_the_c_one() -> None:
    """64 KiB, as WSPOOL_STACK_SIZE_MIN in C and wspool::STACK_SIZE_MIN in Rust."""
    assert wspool.STACK_SIZE_MIN == 64 * 1024
    with pytest.raises(ValueError, match="at least 65536 bytes"):
        wspool.Pool(1, stack_size=wspool.STACK_SIZE_MIN - 1)
    with pytest.raises(ValueError):
        wspool.Pool(1, stack_size=32 * 1024)  # threading.stack_size()'s minimum is not enough
    with wspool.Pool(1, stack_size=wspool.STACK_SIZE_MIN) as p:
        assert p.submit(lambda: 7).result(timeout=EVENTUALLY) == 7
    # threading.stack_size(32 KiB) is honoured with the common minimum, not refused.
    old = threading.stack_size(32 * 1024)
    try:
        with wspool.Pool(1) as p:
            assert p.submit(lambda: 8).result(timeout=EVENTUALLY) == 8
    finally:
        threading.stack_size(old)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pthread_getattr_np is glibc's")
def test_stack_size_keyword() -> None:
    with wspool.Pool(1, stack_size=24 << 20) as p:
        assert p.submit(_stack_size_here).result(timeout=EVENTUALLY) >= 24 << 20


def test_deep_recursion_that_a_tpe_thread_survives() -> None:
    # Recursion through C frames (a sort key calling back into Python): at
    # this depth a 2 MiB stack overflows (it did before issue 12); the
    # default threading.Thread stack (8 MiB here) does not.
    code = """
        import sys, concurrent.futures, wspool
        sys.setrecursionlimit(100_000)
        def deep(n):
            return 0 if n == 0 else sorted([n], key=lambda x: deep(x - 1))[0]
        for cls in (concurrent.futures.ThreadPoolExecutor, wspool.Pool):
            with cls(max_workers=1) as ex:
                print(cls.__name__, ex.submit(deep, 1200).result())
    """
    proc = run_script(code, timeout=EVENTUALLY)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["ThreadPoolExecutor", "1200", "Pool", "1200"]


# -- 6. trace and profile hooks ---------------------------------------------------------


def traced_task() -> str:
    return "traced"


def test_settrace_and_setprofile_reach_tasks() -> None:
    def hooks(cls: type[ThreadPoolExecutor]) -> tuple[bool, bool]:
        traced: set[str] = set()
        profiled: set[str] = set()

        def tracer(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                traced.add(frame.f_code.co_name)

        def profiler(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                profiled.add(frame.f_code.co_name)

        threading.settrace(tracer)
        threading.setprofile(profiler)
        try:
            ex = cls(max_workers=1)  # hooks are taken when its threads start
            ex.submit(traced_task).result(timeout=EVENTUALLY)
        finally:
            threading.settrace(None)  # type: ignore[arg-type]
            threading.setprofile(None)  # type: ignore[arg-type]
        ex.submit(int).result(timeout=EVENTUALLY)
        ex.shutdown(wait=True)
        return "traced_task" in traced, "traced_task" in profiled

    assert same(each(hooks)) == (True, True)


COVERAGE_SCRIPT = """
import concurrent.futures, wspool

def only_in_tpe_task(x):
    y = x + 1
    return y * 2

def only_in_wspool_task(x):
    y = x + 1
    return y * 2

with concurrent.futures.ThreadPoolExecutor(2) as ex:
    assert ex.submit(only_in_tpe_task, 1).result() == 4
with wspool.Pool(2) as ex:
    assert ex.submit(only_in_wspool_task, 1).result() == 4
"""


@pytest.mark.timeout(180)
def test_coverage_sees_lines_run_in_tasks(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(COVERAGE_SCRIPT)
    env = dict(os.environ, COVERAGE_FILE=str(tmp_path / ".coverage"))
    for args in (["run", str(script)], ["json", "-o", str(tmp_path / "cov.json")]):
        proc = subprocess.run([sys.executable, "-m", "coverage", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "cov.json").read_text())
    executed = set(next(iter(report["files"].values()))["executed_lines"])
    lines = COVERAGE_SCRIPT.splitlines()
    body = {name: {i + 2, i + 3} for i, line in enumerate(lines) for name in ["only_in_tpe_task", "only_in_wspool_task"]
            if line.startswith(f"def {name}")}  # 1-based lines of the two body lines
    assert body["only_in_tpe_task"] <= executed, executed
    assert body["only_in_wspool_task"] <= executed, executed


# -- 7. instrumentation through submit ---------------------------------------------------


def test_subclass_overriding_submit_sees_map_calls() -> None:
    def count(cls: type[ThreadPoolExecutor]) -> tuple[int, list[int]]:
        calls = []

        class Counting(cls):  # type: ignore[valid-type,misc]
            def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
                calls.append(fn)
                return super().submit(fn, *args, **kwargs)

        with Counting(max_workers=2) as ex:
            out = list(ex.map(abs, [-1, -2, -3]))
            ex.submit(abs, -4).result()
        return len(calls), out

    assert same(each(count)) == (4, [1, 2, 3])


def test_patching_submit_on_the_class_works(monkeypatch: pytest.MonkeyPatch) -> None:
    def count(cls: type[ThreadPoolExecutor]) -> int:
        calls = []
        original = cls.submit

        def patched(self: Any, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            calls.append(fn)
            return original(self, fn, *args, **kwargs)

        with cls(max_workers=2) as ex:  # made before the patch, as with an instrumenting agent
            monkeypatch.setattr(cls, "submit", patched)
            try:
                ex.submit(abs, -1).result()
                list(ex.map(abs, [-1, -2]))
            finally:
                monkeypatch.undo()
        return len(calls)

    assert same(each(count)) == 3


# -- 8. asyncio's default executor -----------------------------------------------------------


def test_asyncio_default_executor() -> None:
    def run(cls: type[ThreadPoolExecutor]) -> tuple[list[str], bool]:
        ex = cls(max_workers=2, thread_name_prefix="aio")

        async def main() -> list[str]:
            loop = asyncio.get_running_loop()
            loop.set_default_executor(ex)
            name = lambda: threading.current_thread().name.split("_")[0]  # noqa: E731
            a = await asyncio.to_thread(name)
            b = await loop.run_in_executor(None, name)
            c = await asyncio.gather(*(loop.run_in_executor(None, name) for _ in range(20)))
            await loop.shutdown_default_executor()
            return [a, b, *set(c)]

        names = asyncio.run(main())
        with pytest.raises(RuntimeError):
            ex.submit(int)  # shut down by shutdown_default_executor
        return names, isinstance(ex, ThreadPoolExecutor)

    assert same(each(run)) == (["aio", "aio", "aio"], True)


# -- 9. thread identity --------------------------------------------------------------------


def test_thread_names() -> None:
    def names(cls: type[ThreadPoolExecutor]) -> tuple[bool, bool]:
        barrier = threading.Barrier(3)

        def name() -> str:
            barrier.wait(EVENTUALLY)  # three different threads
            return threading.current_thread().name

        with cls(max_workers=3, thread_name_prefix="SpecialPool") as ex:
            given = {f.result(timeout=EVENTUALLY) for f in [ex.submit(name) for _ in range(3)]}
        barrier.reset()
        with cls(max_workers=3) as ex:
            default = {f.result(timeout=EVENTUALLY) for f in [ex.submit(name) for _ in range(3)]}
        return (
            given == {"SpecialPool_0", "SpecialPool_1", "SpecialPool_2"},
            all(re.fullmatch(r"ThreadPoolExecutor-\d+_[0-2]", n) for n in default) and len(default) == 3,
        )

    assert same(each(names)) == (True, True)


@pytest.mark.parametrize("bad", [0, -1])
def test_max_workers_error_text(bad: int) -> None:
    def message(cls: type[ThreadPoolExecutor]) -> str:
        with pytest.raises(ValueError) as e:
            cls(max_workers=bad)
        return str(e.value)

    assert same(each(message)) == "max_workers must be greater than 0"


def test_default_max_workers() -> None:
    expected = min(32, (os.cpu_count() or 1) + 4)
    assert same(each(lambda cls: run_once(cls(), lambda: None, attr="_max_workers"))) == expected

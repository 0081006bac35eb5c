"""wspool in the Python runtime: asyncio, the GIL, signals, fork and
interpreter exit. Fork, Ctrl-C and exit run in fresh interpreters."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import Executor

import pytest

import wspool
from conftest import EVENTUALLY, ExecutorFactory, run_script

# -- asyncio -------------------------------------------------------------------


def square(x: int) -> int:
    return x * x


def test_run_in_executor(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=2)

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        return list(await asyncio.gather(*(loop.run_in_executor(ex, square, i) for i in range(50))))

    assert asyncio.run(main()) == [i * i for i in range(50)]


def test_wrap_future_and_exceptions(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=2)

    async def main() -> None:
        assert await asyncio.wrap_future(ex.submit(square, 7)) == 49
        with pytest.raises(ZeroDivisionError):
            await asyncio.get_running_loop().run_in_executor(ex, lambda: 1 / 0)

    asyncio.run(main())


def test_asyncio_timeout_cancels_the_wrapper(make_executor: ExecutorFactory) -> None:
    ex = make_executor(max_workers=1)
    gate = threading.Event()

    async def main() -> None:
        fut = asyncio.get_running_loop().run_in_executor(ex, gate.wait, EVENTUALLY)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(fut), timeout=0.01)
        gate.set()
        assert await fut is True

    asyncio.run(main())


# -- the GIL is released while Rust waits ----------------------------------------------


def _progress_while(wait: object, ex_gate: threading.Event) -> None:
    """Runs `wait()` on this thread while another Python thread must make
    progress (it counts, then opens the gate the waited task needs). If the
    wait held the GIL, the other thread could never run: deadlock."""
    counted = [0]

    def other() -> None:
        for _ in range(1000):
            counted[0] += 1
        ex_gate.set()

    t = threading.Thread(target=other)
    t.start()
    wait()  # type: ignore[operator]
    t.join(EVENTUALLY)
    assert counted[0] == 1000


def test_result_releases_the_gil(pool: wspool.Pool) -> None:
    gate = threading.Event()
    f = pool.submit(gate.wait, EVENTUALLY)
    _progress_while(lambda: f.result(timeout=EVENTUALLY), gate)


def test_group_wait_map_and_shutdown_release_the_gil() -> None:
    p = wspool.Pool(min_threads=2)
    gate = threading.Event()
    g = p.group()
    g.submit(gate.wait, EVENTUALLY)
    _progress_while(lambda: g.wait(timeout=EVENTUALLY), gate)

    gate = threading.Event()
    it = p.map(lambda _: gate.wait(EVENTUALLY), range(2))
    _progress_while(lambda: list(it), gate)

    gate = threading.Event()
    p.submit(gate.wait, EVENTUALLY)
    _progress_while(lambda: p.shutdown(wait=True), gate)


def test_workers_run_python_in_parallel_with_the_main_thread(pool: wspool.Pool) -> None:
    # A worker spins in Python until the main thread, also running Python,
    # flips a flag: both must get GIL time.
    flag = threading.Event()

    def spin() -> int:
        n = 0
        while not flag.is_set():
            n += 1
        return n

    f = pool.submit(spin)
    x = 0
    for _ in range(10000):
        x += 1
    flag.set()
    assert f.result(timeout=EVENTUALLY) >= 0


# -- Ctrl-C ------------------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("what", ["result", "group", "map", "shutdown"])
def test_ctrl_c_interrupts_a_wait(what: str) -> None:
    code = f"""
        import signal, sys, threading, time, wspool
        # A child started with SIGINT ignored (a job run in the background
        # by a non-interactive shell, as some CI runners do) inherits that,
        # and Python then installs no KeyboardInterrupt handler.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        pool = wspool.Pool(min_threads=2)
        gate = threading.Event()
        f = pool.submit(gate.wait, 60)
        g = pool.group(); g.submit(gate.wait, 60)
        waits = {{
            "result": lambda: f.result(),
            "group": lambda: g.wait(),
            "map": lambda: list(pool.map(lambda _: gate.wait(60), range(2))),
            "shutdown": lambda: pool.shutdown(wait=True),
        }}
        def waiting_here():
            return waits[{what!r}]()
        main = threading.get_ident()
        def announce():
            # Tell the parent once the main thread is inside the wait.
            while True:
                frame = sys._current_frames().get(main)
                names = []
                while frame is not None:
                    names.append(frame.f_code.co_name)
                    frame = frame.f_back
                if "waiting_here" in names:
                    break
                time.sleep(0.01)
            time.sleep(0.2)
            print("waiting", flush=True)
        threading.Thread(target=announce, daemon=True).start()
        try:
            waiting_here()
            print("returned", flush=True)
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            print("interrupted", flush=True)
        gate.set()
        pool.shutdown(wait=True)
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "waiting"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=EVENTUALLY)
        assert out.strip() == "interrupted", (out, err)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- fork ------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_child_gets_a_clear_error_and_can_make_a_new_pool() -> None:
    r = run_script(
        """
        import os, sys, wspool
        pool = wspool.Pool(min_threads=2)
        g, q = pool.group(), pool.serial()
        f = pool.submit(int, 41)
        assert f.result() == 41
        pid = os.fork()
        if pid == 0:
            errors = []
            for call in (lambda: pool.submit(int, 1), lambda: pool.map(int, [1]), pool.stats,
                         lambda: g.submit(int, 1), lambda: g.wait(), lambda: q.submit(int, 1), pool.group):
                try:
                    call()
                    errors.append("no error")
                except RuntimeError as e:
                    errors.append("fork" in str(e))
            assert errors == [True] * 7, errors
            pool.shutdown(wait=True)            # a no-op in the child, never a hang
            with wspool.Pool(min_threads=2) as fresh:
                assert fresh.submit(int, 7).result() == 7
                assert list(fresh.map(abs, [-1, -2])) == [1, 2]
            print("child ok", flush=True)
            sys.exit(0)                          # a normal exit, with the inherited pool alive
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert pool.submit(int, 5).result() == 5  # the parent's pool is unaffected
        print("parent ok")
        """
    )
    assert r.returncode == 0, r.stderr
    assert "child ok" in r.stdout and "parent ok" in r.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_from_inside_a_task() -> None:
    r = run_script(
        """
        import os, wspool
        pool = wspool.Pool(min_threads=2)
        def forker():
            pid = os.fork()
            if pid == 0:
                try:
                    pool.submit(int, 1)
                    os._exit(1)
                except RuntimeError:
                    os._exit(0)
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status)
        assert pool.submit(forker).result() == 0
        print("ok")
        """
    )
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout


# -- interpreter exit ------------------------------------------------------------------


def test_exit_runs_queued_work_like_thread_pool_executor() -> None:
    r = run_script(
        """
        import sys, time, wspool
        pool = wspool.Pool(min_threads=2)
        def task(i):
            time.sleep(0.001)
            sys.stdout.write(f"task {i}\\n")
        for i in range(20):
            pool.submit(task, i)
        # no shutdown: interpreter exit drains the pool
        """
    )
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")[:-1]) == sorted(f"task {i}" for i in range(20))


def test_exit_with_idle_and_dropped_pools_is_clean() -> None:
    r = run_script(
        """
        import wspool
        keep = wspool.Pool(min_threads=2, keep_alive=0.01)
        assert keep.submit(int, 1).result() == 1
        dropped = wspool.Pool(min_threads=2)
        dropped.submit(int, 2)
        del dropped
        with wspool.Pool(min_threads=3) as p:
            list(p.map(int, range(100)))
        print("done")
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "done"
    assert r.stderr == ""

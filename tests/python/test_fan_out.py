"""Issue 39: nested waits never deadlock at any fan-out, a lock held across
`result()` cannot deadlock, `Pool(1)` stays serial across a wait on another
executor, and interpreter exit is ThreadPoolExecutor's.

Each program that could deadlock runs in a fresh interpreter under a
watchdog (`run_script`'s timeout, and faulthandler inside, which prints
every thread's stack first): a deadlock fails the test instead of hanging
the suite, and takes its threads with it. Thread counts are the pool's own
`stats().peak_threads`; nothing here measures time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from conftest import run_script

# Seconds a whole program may take before it counts as hung: far above what
# a loaded 2-core machine needs (each finishes in well under a second).
WATCHDOG = 90.0

PRELUDE = f"""
import asyncio, faulthandler, json, sys, threading, time
import wspool
faulthandler.dump_traceback_later({WATCHDOG - 10}, exit=True)
"""


def run(code: str) -> dict[str, Any]:
    """Runs `code` after PRELUDE; it prints one JSON object last."""
    try:
        p = run_script(PRELUDE + code, timeout=WATCHDOG)
    except subprocess.TimeoutExpired as e:  # pragma: no cover - the failure itself
        pytest.fail(f"the program hung:\n{e.stdout!r}\n{e.stderr!r}")
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    out = dict(json.loads(p.stdout.strip().splitlines()[-1]))
    # The figures (peak threads...) for `pytest -s` to show.
    print({k: v for k, v in out.items() if k in ("peak", "max_workers", "cap", "firsts")})
    return out


# The bound the issue asks for: threads grow with nesting depth, not fan-out.
SMALL_CONSTANT = 2


def bound(max_workers: int, depth: int) -> int:
    return max_workers + depth + SMALL_CONSTANT


def test_300_calls_on_pool_2_each_waiting_on_its_own_child() -> None:
    out = run("""
pool = wspool.Pool(2)
def child(i):
    return i
def outer(i):
    return pool.submit(child, i).result()
fs = [pool.submit(outer, i) for i in range(300)]
print(json.dumps({"sum": sum(f.result() for f in fs), "peak": pool.stats().peak_threads}))
""")
    assert out["sum"] == sum(range(300))
    assert out["peak"] <= bound(2, 1), out


def test_1000_concurrent_to_thread_calls_waiting_on_the_default_executor() -> None:
    out = run("""
pool = wspool.Pool()   # ThreadPoolExecutor's default max_workers
def child(i):
    return i
def blocking_call(i):
    return pool.submit(child, i).result()
async def main():
    asyncio.get_running_loop().set_default_executor(pool)
    return await asyncio.gather(*[asyncio.to_thread(blocking_call, i) for i in range(1000)])
got = asyncio.run(main())
print(json.dumps({"sum": sum(got), "peak": pool.stats().peak_threads, "max_workers": pool._max_workers}))
""")
    assert out["sum"] == sum(range(1000))
    assert out["peak"] <= bound(out["max_workers"], 1), out


def test_10000_done_callbacks_that_submit_and_wait() -> None:
    out = run("""
pool = wspool.Pool(2)
release = threading.Event()
done = []
def child(i):
    return i
def callback(f):
    # Runs on the pool thread that finished f, inside that call.
    done.append(pool.submit(child, f.result()).result())
fs = [pool.submit(lambda i=i: release.wait() and i) for i in range(10_000)]
for f in fs:
    f.add_done_callback(callback)
release.set()
for f in fs:
    f.result()
pool.shutdown(wait=True)   # the last callbacks run after their future is done
print(json.dumps({"n": len(done), "sum": sum(done), "peak": pool.stats().peak_threads}))
""")
    assert out["n"] == 10_000 and out["sum"] == sum(range(10_000))
    assert out["peak"] <= bound(2, 1), out


def test_a_1000_deep_chain_on_pool_2_finishes_within_the_default_thread_cap() -> None:
    out = run("""
pool = wspool.Pool(2)
def link(n):
    return 0 if n == 0 else pool.submit(link, n - 1).result() + 1
got = pool.submit(link, 1000).result()
print(json.dumps({"got": got, "peak": pool.stats().peak_threads, "cap": pool.dump().max_threads}))
""")
    assert out["got"] == 1000
    assert out["peak"] <= out["cap"] == 256, out


def test_fan_out_at_every_level_of_a_tree_grows_with_depth_only() -> None:
    # 20 calls, each fanning out to 20 that each wait on a leaf: depth 2.
    out = run("""
pool = wspool.Pool(3)
def leaf(i):
    return i
def mid(i):
    return pool.submit(leaf, i).result()
def top(i):
    return sum(f.result() for f in [pool.submit(mid, i * 20 + j) for j in range(20)])
fs = [pool.submit(top, i) for i in range(20)]
print(json.dumps({"sum": sum(f.result() for f in fs), "peak": pool.stats().peak_threads}))
""")
    assert out["sum"] == sum(range(400))
    assert out["peak"] <= bound(3, 2), out


LOCK_ACROSS_RESULT = """
lock = threading.Lock()
holding = threading.Event()
contending = threading.Semaphore(0)
def child():
    # Returns only once three calls queued behind the holder are blocked on
    # its lock: they have taken every place the pool had left.
    for _ in range(3):
        contending.acquire()
    return "child"
def holder(ex):
    with lock:
        f = ex.submit(child)
        holding.set()
        return f.result()
def contender():
    contending.release()
    with lock:
        return "contender"
def program(ex):
    got = []
    for _ in range(5):
        holding.clear()
        h = ex.submit(holder, ex)
        holding.wait()
        others = [ex.submit(contender) for _ in range(8)]
        got.append([h.result(timeout=60)] + [f.result(timeout=60) for f in others])
        while contending.acquire(blocking=False):
            pass
    return got
"""


def test_a_lock_held_across_result_cannot_deadlock() -> None:
    # ThreadPoolExecutor(5): the holder, its child and three contenders each
    # have a thread. The pool must do as well: the holder gets its place
    # back the moment its child returns, though the contenders hold the rest.
    out = run(LOCK_ACROSS_RESULT + """
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(5) as tpe:
    stock = program(tpe)
with wspool.Pool(5) as pool:
    ours = program(pool)
print(json.dumps({"stock": stock, "ours": ours}))
""")
    assert out["ours"] == out["stock"] == [["child"] + ["contender"] * 8] * 5


SERIAL_ACROSS_WAITS = """
from concurrent.futures import ThreadPoolExecutor
import sqlite3
pool = wspool.Pool(1)
stock = ThreadPoolExecutor(1)
other = wspool.Pool(2)
order = []
def waits_on(ex, tag):
    order.append(("start", tag))
    ex.submit(time.sleep, 0.05).result()
    order.append(("end", tag))
    return threading.get_ident()
def quick(tag):
    order.append(("start", tag))
    order.append(("end", tag))
    return threading.get_ident()
calls = [
    pool.submit(waits_on, stock, 1), pool.submit(quick, 2),
    pool.submit(waits_on, other, 3), pool.submit(quick, 4),
]
idents = [f.result() for f in calls]
# Thread-affine state across calls, as ThreadSensitiveContext uses it.
conn = pool.submit(sqlite3.connect, ":memory:").result()
def use(sql):
    other.submit(time.sleep, 0.01).result()
    return conn.execute(sql).fetchall()
results = [f.result() for f in [pool.submit(use, "select 1"), pool.submit(use, "select 2")]]
print(json.dumps({"idents": len(set(idents)), "order": order, "sql": results,
                  "peak": pool.stats().peak_threads}))
"""


def test_pool_1_is_serial_when_a_call_waits_on_another_executor() -> None:
    out = run(SERIAL_ACROSS_WAITS)
    assert out["idents"] == 1, out
    # Each call ran to its end before the next started.
    assert out["order"] == [[kind, tag] for tag in (1, 2, 3, 4) for kind in ("start", "end")], out
    assert out["sql"] == [[[1]], [[2]]]
    assert out["peak"] == 1, out


def test_calls_from_outside_start_in_submission_order_as_on_thread_pool_executor() -> None:
    # On ThreadPoolExecutor(2) calls 0 and 1 take both threads and meet at
    # the barrier before any later call starts. The pool must do the same,
    # though its core takes queued work in batches (a batch held by the
    # thread at the barrier would otherwise wait while later calls start).
    out = run("""
firsts = []
for _ in range(5):
    pool = wspool.Pool(2)
    barrier = threading.Barrier(2)
    started = []
    def task(i):
        started.append(i)
        if i < 2:
            barrier.wait()
        return pool.submit(lambda: i).result()
    fs = [pool.submit(task, i) for i in range(40)]
    assert sum(f.result() for f in fs) == sum(range(40))
    firsts.append(sorted(started[:2]))
    pool.shutdown()
print(json.dumps({"firsts": firsts}))
""")
    assert out["firsts"] == [[0, 1]] * 5, out


# -- interpreter exit ------------------------------------------------------------

EXIT_PROGRAM = """
import os, time, wspool
g = wspool.Pool(2).group()      # the pool is kept alive by the group alone
def work(i):
    end = time.perf_counter() + 0.002
    while time.perf_counter() < end:
        pass
    os.write(1, b"%d\\n" % i)   # one write: lines from two threads never mix
for i in range(20):
    g.submit(work, i)
"""


def test_exit_with_calls_running_never_aborts_in_50_runs() -> None:
    # Five interpreters at a time, 50 in all.
    codes = []
    for _ in range(10):
        procs = [
            subprocess.Popen([sys.executable, "-c", EXIT_PROGRAM], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(5)
        ]
        for p in procs:
            out, err = p.communicate(timeout=WATCHDOG)
            codes.append(p.returncode)
            assert p.returncode == 0, f"exit {p.returncode}: {err.decode()[-2000:]}"
            # Like ThreadPoolExecutor: what was accepted ran before exit.
            assert sorted(map(int, out.split())) == list(range(20))
    assert codes == [0] * 50


def test_submit_after_interpreter_shutdown_raises_as_on_thread_pool_executor() -> None:
    p = run_script(
        """
import atexit
from concurrent.futures import ThreadPoolExecutor
import wspool
def late():
    for make in (ThreadPoolExecutor, wspool.Pool):
        ex = make(2)
        try:
            ex.submit(print, "ran")
        except RuntimeError as e:
            print(make.__name__, "RuntimeError:", e)
        else:
            print(make.__name__, "accepted")
atexit.register(late)
""",
        timeout=WATCHDOG,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    msg = "RuntimeError: cannot schedule new futures after interpreter shutdown"
    assert lines == [f"ThreadPoolExecutor {msg}", f"Pool {msg}"], p.stdout


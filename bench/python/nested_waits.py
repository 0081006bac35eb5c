"""Issue 25's nested waits on the default wspool.Pool(2) beside ThreadPoolExecutor(2).

    python bench/python/nested_waits.py                 # every case, 60 s watchdog each
    python bench/python/nested_waits.py --watchdog 10   # a shorter watchdog for TPE's hangs

Each case runs in its own interpreter under the same watchdog: a case that has
not finished by then is reported as hung and its process is ended (TPE's
threads stay blocked forever otherwise).

- dask: `dask.compute` inside tasks of the pool dask itself uses
  (`dask.config.set(pool=pool)`), 8 outer tasks of 10 inner ones each.
- chain: 40 tasks, each submitting the next and calling `.result()`.
- every-worker-waits: 8 tasks, the first two meeting at a barrier (so every
  worker is inside one), each submitting a child and waiting on it.

For wspool it prints the pool's peak threads, the most calls executing at once
(counted exactly by the tasks around their waits) and the most the binding's
own permit count showed, sampled every 0.5 ms by a thread beside the work.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

CASE = r"""
import json, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
kind, case = sys.argv[1], sys.argv[2]
import wspool
pool = wspool.Pool(2) if kind == "wspool" else ThreadPoolExecutor(2)
lock = threading.Lock()
count = {"now": 0, "peak": 0}
def enter():
    with lock:
        count["now"] += 1
        count["peak"] = max(count["peak"], count["now"])
def leave():
    with lock:
        count["now"] -= 1
def counted(fn, *a):
    enter()
    try:
        return fn(*a)
    finally:
        leave()
def waiting(wait):
    leave()
    try:
        return wait()
    finally:
        enter()

def dask_case():
    import dask
    from dask import delayed
    @delayed
    def inc(x):
        return x + 1
    @delayed
    def outer(i):
        return sum(dask.compute(*[inc(j) for j in range(i, i + 10)]))
    with dask.config.set(pool=pool):
        return sum(dask.compute(*[outer(i) for i in range(8)]))

def chain_case():
    def link(n):
        if n == 0:
            return 0
        f = pool.submit(counted, link, n - 1)
        return waiting(f.result) + 1
    return pool.submit(counted, link, 40).result()

def every_case():
    barrier = threading.Barrier(2)
    def task(i):
        if i < 2:
            barrier.wait()
        f = pool.submit(counted, lambda: i)
        return waiting(f.result)
    return sum(f.result() for f in [pool.submit(counted, task, i) for i in range(8)])

fn = {"dask": dask_case, "chain": chain_case, "every-worker-waits": every_case}[case]
sampled = [0]
stop = threading.Event()
def sample():
    core = getattr(pool, "_core", None)
    while not stop.is_set():
        sampled[0] = max(sampled[0], (core.executing or 0) if core is not None else 0)
        stop.wait(0.0005)
sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
t0 = time.perf_counter()
result = fn()
elapsed = time.perf_counter() - t0
stop.set()
sampler.join()
out = {"result": result, "seconds": elapsed}
if kind == "wspool":
    out.update(peak_threads=pool.stats().peak_threads, executing_peak=count["peak"], sampled_peak=sampled[0])
print(json.dumps(out), flush=True)
pool.shutdown()
"""


def run(kind: str, case: str, watchdog: float) -> str:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(CASE), kind, case],
            capture_output=True,
            text=True,
            timeout=watchdog,
        )
    except subprocess.TimeoutExpired:
        return f"hung ({watchdog:.0f} s watchdog)"
    if proc.returncode != 0:
        return "failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    text = f"finished in {r['seconds'] * 1000:.0f} ms (result {r['result']})"
    if kind == "wspool":
        # dask's own calls are not wrapped by the counter: only the sample.
        counted = "" if case == "dask" else f"{r['executing_peak']} counted, "
        text += (
            f"; peak threads {r['peak_threads']}, most calls executing at once: "
            f"{counted}{r['sampled_peak']} sampled (max_workers 2)"
        )
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--watchdog", type=float, default=60.0, help="seconds before a case counts as hung")
    args = ap.parse_args()
    print(f"Nested waits, Pool(2) default vs ThreadPoolExecutor(2), Python {sys.version.split()[0]}")
    print()
    print("| case | ThreadPoolExecutor(2) | wspool.Pool(2) |")
    print("|---|---|---|")
    for case in ("dask", "chain", "every-worker-waits"):
        print(f"| {case} | {run('tpe', case, args.watchdog)} | {run('wspool', case, args.watchdog)} |", flush=True)


if __name__ == "__main__":
    main()

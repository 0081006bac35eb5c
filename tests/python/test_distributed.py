"""Issue 39: a dask.distributed worker runs its tasks on a wspool pool with
its own bookkeeping, so `get_worker()`, `worker_client()`,
`secede()`/`rejoin()` work inside them.

distributed gives that bookkeeping only to executors whose class name
contains "ThreadPoolExecutor" (`distributed.worker`); the supported route is
`wspool.ThreadPoolExecutor`, the documented subclass of `wspool.Pool` under
that name (docs/python.md). The cluster runs in a fresh interpreter under a
watchdog: a hang fails the test.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import run_script

pytest.importorskip("distributed", reason="dask.distributed is not installed (make test-python pins it)")

PROGRAM = """
import faulthandler, json
faulthandler.dump_traceback_later(100, exit=True)
import wspool
from distributed import Client, LocalCluster, get_worker, rejoin, secede, worker_client

def inc(x):
    return x + 1

def nested(x):
    with worker_client() as c:              # seceded while it gathers
        return sum(c.gather(c.map(inc, range(x, x + 3))))

def deeper(x):
    with worker_client() as c:              # a worker_client inside a worker_client
        return c.submit(nested, x).result() + 1000

def seceding(x):
    name = type(get_worker()).__name__
    secede()
    with worker_client(separate_thread=False) as c:
        got = c.submit(inc, x).result()
    rejoin()
    return [name, got]

def on_pool():
    return wspool.current_index() is not None

pool = wspool.ThreadPoolExecutor(2)
with LocalCluster(n_workers=1, processes=False, threads_per_worker=2, executor=pool,
                  dashboard_address=None) as cluster, Client(cluster) as client:
    out = {
        "worker": client.submit(lambda: type(get_worker()).__name__).result(),
        "on_pool": client.submit(on_pool).result(),
        "deeper": client.gather(client.map(deeper, range(6))),
        "seceding": client.gather(client.map(seceding, range(4))),
    }
print(json.dumps(out))
"""


def test_a_local_cluster_on_a_wspool_executor_runs_nested_worker_clients() -> None:
    try:
        p = run_script(PROGRAM, timeout=110.0)
    except subprocess.TimeoutExpired as e:  # pragma: no cover - the failure itself
        pytest.fail(f"the cluster hung:\n{e.stdout!r}\n{e.stderr!r}")
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["worker"] == "Worker"
    assert out["on_pool"] is True
    assert out["deeper"] == [sum(range(x + 1, x + 4)) + 1000 for x in range(6)]
    assert out["seceding"] == [["Worker", x + 1] for x in range(4)]

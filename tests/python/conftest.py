"""Shared fixtures: the same test runs against ThreadPoolExecutor and wspool.Pool."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Callable, Iterator

import pytest

import wspool

# Generous bound for "this must happen eventually" waits inside tests. It is
# never a performance assertion: a healthy run finishes in milliseconds.
EVENTUALLY = 30.0

ExecutorFactory = Callable[..., Executor]


def _tpe(**kw: Any) -> Executor:
    return ThreadPoolExecutor(**kw)


def _wspool(**kw: Any) -> Executor:
    return wspool.Pool(**kw)


@pytest.fixture(params=["ThreadPoolExecutor", "wspool.Pool"])
def make_executor(request: pytest.FixtureRequest) -> Iterator[ExecutorFactory]:
    """A factory for the executor under test; every executor made is shut down afterwards."""
    made: list[Executor] = []
    factory = _tpe if request.param == "ThreadPoolExecutor" else _wspool

    def make(**kw: Any) -> Executor:
        ex = factory(**kw)
        made.append(ex)
        return ex

    yield make
    for ex in made:
        ex.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
def pool() -> Iterator[wspool.Pool]:
    p = wspool.Pool(max_workers=2)
    yield p
    p.shutdown(wait=True, cancel_futures=True)


def run_script(code: str, timeout: float = 60.0, **kw: Any) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh interpreter (for fork, signals and interpreter exit)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **kw,
    )


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    # An empty run must fail loudly, never pass as "no tests ran".
    if not items:
        raise pytest.UsageError("tests/python: no tests collected")

"""CPython's own ThreadPoolExecutor tests, run against wspool.Pool.

`cpython_tpe_suite.py` swaps `concurrent.futures.ThreadPoolExecutor` for
`wspool.Pool` and runs every thread-pool test class of the interpreter's
`test_concurrent_futures` (see its docstring for the listed exceptions).
`make test-python` installs the suite when the interpreter lacks it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def suite_dir() -> str:
    """Where `test_concurrent_futures.py` lives: the interpreter's own `test`
    package, else Debian's libpython3.X-testsuite for the same version."""
    import test

    for d in [*test.__path__, f"/usr/lib/python{sys.version_info[0]}.{sys.version_info[1]}/test"]:
        if os.path.exists(os.path.join(d, "test_concurrent_futures.py")):
            return d
    pytest.fail(
        "CPython's test_concurrent_futures is not installed: `make test-python` installs "
        f"libpython{sys.version_info[0]}.{sys.version_info[1]}-testsuite"
    )


@pytest.mark.timeout(600)
def test_cpython_thread_pool_suite_passes_on_wspool() -> None:
    proc = subprocess.run(
        [sys.executable, str(HERE / "cpython_tpe_suite.py"), suite_dir()],
        capture_output=True,
        text=True,
        timeout=540,
        cwd=HERE,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    assert "wspool: " in out and " 0 failed" in out, out[-4000:]

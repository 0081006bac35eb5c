"""CPython's own ``test_concurrent_futures`` thread-pool test classes, run
with ``ThreadPoolExecutor`` swapped for ``wspool.Pool``.

Run as a script by ``test_cpython_suite.py`` (a fresh interpreter: the swap
is process-wide), with the directory holding ``test_concurrent_futures.py``
as its argument: the interpreter's own ``test`` package, or Debian's
``libpython3.X-testsuite`` (``/usr/lib/python3.X/test``) when the
interpreter's was stripped. The swap also reaches the suite's child
interpreters (``assert_python_ok('-c', ...)``): their code gets the same
prelude.

Every test must pass except those in ``EXCEPTIONS``, which read
``ThreadPoolExecutor``'s private bookkeeping that a work-stealing pool does
not have (its set of ``threading.Thread`` objects). They are not run: without
that attribute several would leave tasks blocked on a semaphore and hang the
teardown. The runner checks that each one's source reads the attribute, so
the list cannot hide anything else. The same list, with the reasons, is in
docs/python.md.
"""

from __future__ import annotations

import inspect
import sys
import unittest

# Executed in this process and prepended to every child's `-c` code. The
# suite formats `executor_type.__name__` into child scripts, so the class
# it sees must be called ThreadPoolExecutor: a subclass adding nothing.
SWAP = """\
import concurrent.futures as _cf, concurrent.futures.thread as _cft, wspool as _ws, test as _t
class ThreadPoolExecutor(_ws.Pool):
    pass
_cf.ThreadPoolExecutor = _cft.ThreadPoolExecutor = ThreadPoolExecutor
if {suite_dir!r} not in _t.__path__:
    _t.__path__.append({suite_dir!r})
del _cf, _cft, _ws, _t
"""

# test id suffix -> the private attribute it reads.
EXCEPTIONS = {
    "ThreadPoolShutdownTest.test_threads_terminate": "_threads",
    "ThreadPoolShutdownTest.test_context_manager_shutdown": "_threads",
    "ThreadPoolShutdownTest.test_del_shutdown": "_threads",
    "ThreadPoolShutdownTest.test_shutdown_no_wait": "_threads",
    "ThreadPoolShutdownTest.test_thread_names_assigned": "_threads",
    "ThreadPoolShutdownTest.test_thread_names_default": "_threads",
    "ThreadPoolExecutorTest.test_saturation": "_threads",
    "ThreadPoolExecutorTest.test_idle_thread_reuse": "_threads",
}


def install_swap(suite_dir: str) -> None:
    prelude = SWAP.format(suite_dir=suite_dir)
    exec(prelude, {})
    from test.support import script_helper

    original = script_helper.run_python_until_end

    def run_python_until_end(*args: str, **env: str) -> object:
        argv = list(args)
        if "-c" in argv:
            i = argv.index("-c") + 1
            argv[i] = prelude + argv[i]
        return original(*argv, **env)

    script_helper.run_python_until_end = run_python_until_end


def main() -> int:
    install_swap(sys.argv[1])
    import concurrent.futures

    import wspool

    assert issubclass(concurrent.futures.ThreadPoolExecutor, wspool.Pool)
    from test import test_concurrent_futures as suite_module

    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    wanted = sys.argv[2:]  # optional name filters, for debugging one test
    excluded = []
    for name in sorted(dir(suite_module)):
        cls = getattr(suite_module, name)
        if not (name.startswith("ThreadPool") and isinstance(cls, type) and issubclass(cls, unittest.TestCase)):
            continue
        for test in loader.loadTestsFromTestCase(cls):
            key = next((k for k in EXCEPTIONS if test.id().endswith(k)), None)
            if key is not None:
                source = inspect.getsource(getattr(cls, test.id().rsplit(".", 1)[1]))
                if f".{EXCEPTIONS[key]}" not in source:
                    print(f"wspool: {key} is listed as reading {EXCEPTIONS[key]} but does not")
                    return 1
                excluded.append(key)
            elif not wanted or any(w in test.id() for w in wanted):
                suite.addTest(test)
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    total = result.testsRun
    print(f"\nwspool: {total} run, {len(result.failures) + len(result.errors)} failed, "
          f"{len(result.skipped)} skipped by the suite; not run (read private attributes): {len(excluded)}")
    missing = sorted(set(EXCEPTIONS) - set(excluded))
    if missing:
        print("wspool: listed exceptions the suite no longer has:", *missing, sep="\n  ")
    return 0 if result.wasSuccessful() and total > 0 and not missing else 1


if __name__ == "__main__":
    sys.exit(main())

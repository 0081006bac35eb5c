#!/usr/bin/env python3
"""Drives the HTTP examples (http_libuv, http_libevent) with real clients.

    test_http.py --server examples-c/bin/http_libuv [--skip NAME,...]

Clients: curl and ab (apache2-utils) from Debian, plus raw sockets for the
clients that hang up mid-request. Loopback only; every wait is bounded and
every server is stopped with SIGINT and must exit 0, which it does only when
every accepted request saw exactly one done callback (http_common.h). Under
ASan/LSan a report makes the exit non-zero too. /metrics is checked with
prometheus_client's OpenMetrics parser.
"""
import argparse
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from prometheus_client.openmetrics.parser import text_string_to_metric_families

HANG_GUARD_S = 60


class Server:
    def __init__(self, path, *args):
        self.p = subprocess.Popen([path, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        m = re.match(r"listening on (\d+)", line)
        if not m:
            self.p.kill()
            raise AssertionError(f"server did not start: {line!r} {self.p.stderr.read()}")
        self.port = int(m.group(1))
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        """SIGINT, then the exit status and stderr (the exactly-once report)."""
        self.p.send_signal(signal.SIGINT)
        try:
            _, err = self.p.communicate(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            self.p.kill()
            raise AssertionError("server did not exit after SIGINT")
        m = re.search(r"submitted=(\d+) done=(\d+) cancelled=(\d+)", err)
        assert m, f"no exit report: {err}"
        assert self.p.returncode == 0, f"exit status {self.p.returncode}: {err[-3000:]}"
        sub, done, cancelled = map(int, m.groups())
        assert sub == done, err
        return sub, done, cancelled, err


def curl(url, *extra):
    r = subprocess.run(["curl", "-s", "-m", "30", "-w", "\n%{http_code}", *extra, url],
                       capture_output=True, text=True, timeout=HANG_GUARD_S)
    body, _, code = r.stdout.rpartition("\n")
    return int(code), body


def metrics(url):
    code, text = curl(url + "/metrics")
    assert code == 200, code
    fams = {f.name: f for f in text_string_to_metric_families(text + "\n" if not text.endswith("\n") else text)}
    return {name: f.samples[0].value for name, f in fams.items()}


def work_digest(n):
    h = n
    mask = (1 << 64) - 1
    for i in range(n):
        z = (h + i + 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        h = z ^ (z >> 31)
    return h


def ab(url, n, c, *extra):
    r = subprocess.run(["ab", "-q", "-k", "-s", "30", "-n", str(n), "-c", str(c), *extra, url],
                       capture_output=True, text=True, timeout=HANG_GUARD_S * 2)
    out = r.stdout
    assert r.returncode == 0, r.stderr + out
    # ab counts a body of another length (a 503's) as "failed": only
    # connect/receive/exception failures are failures here.
    m = re.search(r"Failed requests:\s+(\d+)(?:\s+\(Connect: (\d+), Receive: (\d+), Length: (\d+), Exceptions: (\d+)\))?", out)
    failed = int(m.group(1)) - (int(m.group(4)) if m.group(4) else 0)
    non2xx = re.search(r"Non-2xx responses:\s+(\d+)", out)
    return failed, int(non2xx.group(1)) if non2xx else 0, out


# ---------------------------------------------------------------- tests ----

def test_endpoints_and_metrics(path):
    s = Server(path)
    try:
        assert curl(s.url + "/ping") == (200, "pong\n")
        assert curl(s.url + "/work?n=5000") == (200, f"{work_digest(5000):016x}\n")
        assert curl(s.url + "/sleep?ms=30") == (200, "slept\n")
        assert curl(s.url + "/nope")[0] == 404
        assert curl(s.url + "/work?n=x")[0] == 400
        assert curl(s.url + "/ping", "--http1.0")[1] == "pong\n"
        m = metrics(s.url)
        assert m["wspool_threads"] >= 2, m
        assert m["wspool_submitted_tasks"] >= 3, m  # parser strips _total from counter family names
        assert m["http_cq_submitted"] == 4 and m["http_cq_done"] == 4, m
    finally:
        sub, done, _, _ = s.stop()
    assert sub == done == 4


def test_keepalive_mix(path):
    """ab keep-alive on /ping beside /work and /sleep clients: nothing fails.
    Shedding is off (--target-us 0): on a loaded machine a stalled worker
    may rightly trip it, and shedding is the overload test's business."""
    s = Server(path, "--threads", "2", "--target-us", "0")
    results = {}

    def side(name, url, n, c):
        results[name] = ab(url, n, c)

    try:
        ts = [threading.Thread(target=side, args=a) for a in (
            ("ping", s.url + "/ping", 20000, 32),
            ("work", s.url + "/work?n=20000", 2000, 8),
            ("sleep", s.url + "/sleep?ms=20", 60, 3),
        )]
        for t in ts:
            t.start()
        for t in ts:
            t.join(HANG_GUARD_S * 2)
        for name, (failed, non2xx, out) in results.items():
            assert failed == 0 and non2xx == 0, (name, out)
        assert len(results) == 3
        m = metrics(s.url)
        assert m["http_cq_done"] == 22060, m
    finally:
        s.stop()


def hang_up_on_sleeps(s, n, ms, pause=0.0, reset_every_other=False, done_metric="http_cq_done"):
    """n clients send /sleep?ms=MS and hang up (after `pause`; every other
    one with a reset if asked); returns the metrics once the server counts n
    endings back on its loop in `done_metric` (bounded by the hang guard)."""
    socks = []
    for _ in range(n):
        k = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        k.sendall(f"GET /sleep?ms={ms} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        socks.append(k)
    time.sleep(pause)
    for i, k in enumerate(socks):
        if reset_every_other and i % 2:
            k.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        k.close()
    deadline = time.time() + HANG_GUARD_S
    while True:
        m = metrics(s.url)
        if m[done_metric] == n:
            return m
        assert time.time() < deadline, m
        time.sleep(0.05)


def hang_ups_cancel_queued_sleeps(s, done_metric):
    """12 clients send /sleep?ms=2000 into a lane of 2 and hang up at once; a
    server that watches its connections cancels the queued ones. Returns the
    metrics once all 12 ended."""
    m = hang_up_on_sleeps(s, 12, 2000, done_metric=done_metric)
    # At least one: the lane starts at most 2 per 2 s. Up to all 12: the
    # loop may see a hang-up before a worker starts even the first two.
    assert 1 <= m["http_cancelled_client_gone"] <= 12, m
    # Each ended once in the pool: cancelled by its hang-up, or run.
    assert m["wspool_cancelled_tasks"] == m["http_cancelled_client_gone"], m
    assert m["wspool_cancelled_tasks"] + m["wspool_completed_tasks"] == 12, m
    assert m["http_sleep_max_concurrent"] <= 2, m
    return m


def hang_ups_cancel_then_stop(s, handed_off):
    """hang_ups_cancel_queued_sleeps on a server with --mode that counts its endings in http_done,
    then /ping still answered; stops it: `handed_off` requests were handed off and each ended, and
    its exit report's cancelled count is /metrics'."""
    try:
        m = hang_ups_cancel_queued_sleeps(s, "http_done")
        assert curl(s.url + "/ping") == (200, "pong\n")
    finally:
        sub, done, cancelled, _ = s.stop()
    assert sub == done == handed_off
    assert cancelled == m["http_cancelled_client_gone"]


def read_to_eof(k):
    """Everything the server sends on socket k until it closes it."""
    data = b""
    while True:
        b = k.recv(4096)
        if not b:
            return data
        data += b


def test_clients_hang_up_mid_request(path):
    """Clients send /sleep and vanish (FIN or RST) while it runs: every done
    still runs once, the server keeps serving, and exits clean. Shedding is
    off (--target-us 0): 40 sleeps at once on 2 threads are a burst it may
    rightly refuse part of, and this test needs all 40 accepted."""
    s = Server(path, "--threads", "2", "--target-us", "0")
    try:
        m = hang_up_on_sleeps(s, 40, 100, pause=0.02, reset_every_other=True)
        if "libuv" in path:
            # libuv reads every connection, so it sees the hang-up before the
            # done; evhttp stops reading while a request is out and only the
            # failed write tells it, so there the count may stay 0.
            assert m["http_client_gone"] >= 1, m
        assert curl(s.url + "/ping") == (200, "pong\n")
    finally:
        sub, done, _, _ = s.stop()
    assert sub == done == 41


def test_hang_up_cancels_queued_work(path):
    """12 clients send /sleep?ms=2000 into the lane of 2 and hang up at once:
    at most 2 start, the rest wait in the lane. The server sees each hang-up
    (libuv reads every connection; evhttp does not read one while its
    request is out, so the libevent server watches the socket itself) and
    cancels that request in the pool (wspool_cq_submit_task +
    wspool_task_cancel): it never runs, and its done comes at once. Those
    queued wait behind 2 s sleeps, so the loop has those 2 s to notice."""
    s = Server(path, "--threads", "2", "--target-us", "0")
    try:
        hang_ups_cancel_queued_sleeps(s, "http_cq_done")
        assert curl(s.url + "/ping") == (200, "pong\n")
    finally:
        sub, done, _, _ = s.stop()
    assert sub == done == 13


def stamped_deadlines_count_from_request_start(s, expired_metric):
    """/work requests stamped with X-Request-Start: stamped a second ago and
    due 20 ms after, each is late before the server reads it, so it never
    runs (503 "expired"); stamped now and due in 10 s, it runs. In us, ms or
    seconds with a fraction (nginx's $msec); a stamp the server cannot read,
    or more than a minute old, is ignored (the deadline counts from when the
    server read the request). A request due 50 ms after its stamp whose work
    takes longer (n = 10^8 rounds: 0.1 s or more) is, if a worker starts it
    in time, answered late and counted in http_answered_late (the others
    were on time); if not, it expires. Returns the metrics; the server's
    count of expired requests is `expired_metric`."""
    digest = f"{work_digest(1000):016x}\n"
    late, due = "/work?n=1000&deadline_ms=20", "/work?n=1000&deadline_ms=10000"
    a_second_ago = time.time() - 1
    for stamp in (f"t={int(a_second_ago * 1e6)}", f"{int(a_second_ago * 1e3)}", f"t={a_second_ago:.3f}"):
        assert curl(s.url + late, "-H", f"X-Request-Start: {stamp}") == (503, "expired\n"), stamp
    for stamp in (f"t={int(time.time() * 1e6)}", "soon", f"t={int((time.time() - 120) * 1e6)}", "t=12x"):
        assert curl(s.url + due, "-H", f"X-Request-Start: {stamp}") == (200, digest), stamp
    st, body = curl(s.url + "/work?n=100000000&deadline_ms=50", "-H", f"X-Request-Start: t={int(time.time() * 1e6)}")
    served = st == 200 and len(body) == 17  # 16 hex digits (too slow to compute here)
    assert served or (st, body) == (503, "expired\n"), (st, body)
    m = metrics(s.url)
    assert m[expired_metric] == 3 + (not served) == m["wspool_expired_tasks"], m
    assert m["http_answered_late"] == served, m
    return m


def test_deadline_counts_from_request_start(path):
    """A /work deadline counts from the X-Request-Start stamp a proxy (or
    the client) puts on the request (stamped_deadlines_count_from_request_start)."""
    s = Server(path, "--threads", "2", "--target-us", "0")
    try:
        stamped_deadlines_count_from_request_start(s, "http_cq_expired")
    finally:
        s.stop()


def test_shutdown_with_requests_in_flight(path):
    """SIGINT while 30 sleeps are queued or running on 2 threads: the close
    cancels what has not started, every done runs once, exit 0. Shedding is
    off (--target-us 0): 30 queued 12 ms tasks are an overload by design."""
    s = Server(path, "--threads", "2", "--target-us", "0")
    socks = []
    try:
        for i in range(30):
            k = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            k.sendall(b"GET /work?n=3000000 HTTP/1.1\r\nHost: x\r\n\r\n")
            socks.append(k)
        deadline = time.time() + HANG_GUARD_S
        while metrics(s.url)["http_cq_submitted"] < 30:
            assert time.time() < deadline
            time.sleep(0.01)
    finally:
        sub, done, cancelled, err = s.stop()
        for k in socks:
            k.close()
    assert sub == done == 30, err
    assert cancelled >= 1, err


def test_overload_sheds_with_503(path):
    """~2x more /work than 2 threads can run: the queue-delay signal trips,
    excess requests get 503 while some are still admitted, nothing is lost."""
    s = Server(path, "--threads", "2", "--target-us", "2000", "--interval-us", "2000")
    try:
        failed, non2xx, out = ab(s.url + "/work?n=300000", 20000, 64)
        assert failed == 0, out
        assert non2xx > 0, out
        m = metrics(s.url)
        assert m["http_shed_overload"] > 0 and m["http_overload_signals"] > 0, m
        # Overloaded is not "refuse everything": what would wait less than
        # the target is still admitted, which keeps the queue at the target.
        assert m["http_admitted_overloaded"] > 0, m
        assert m["http_cq_done"] == m["http_cq_submitted"], m
        assert curl(s.url + "/ping")[0] in (200, 503)
    finally:
        s.stop()


def test_worker_nice(path):
    """The pool's thread_nice: every pool thread (workers, the monitor) runs
    at the loop thread's nice by default, `--worker-nice N` N nicer
    (per-thread nice, Linux; capped at 19)."""
    for args, steps in (([], 0), (["--worker-nice", "5"], 5), (["--worker-nice", "19"], 19)):
        s = Server(path, "--threads", "2", *args)
        try:
            assert curl(s.url + "/work?n=1000")[0] == 200  # the pool's threads exist and ran

            def threads():
                nices = {}
                for tid in os.listdir(f"/proc/{s.p.pid}/task"):
                    try:
                        with open(f"/proc/{s.p.pid}/task/{tid}/stat") as f:
                            st = f.read()
                    except FileNotFoundError:  # a thread that exited after listdir
                        continue
                    comm = st[st.index("(") + 1:st.rindex(")")]
                    nices[(comm, tid)] = int(st.rsplit(")", 1)[1].split()[16])
                return nices, {k: v for k, v in nices.items() if re.fullmatch(r"http-(\d+|monitor)", k[0])}

            # A started thread carries its creator's name until it names
            # itself, which a thread at nice 19 on a loaded machine may not
            # have done yet: wait (bounded) until two workers and the
            # monitor show their own names.
            deadline = time.monotonic() + 60
            nices, pool = threads()
            while len(pool) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
                nices, pool = threads()
            loop = nices[(os.path.basename(path)[:15], str(s.p.pid))]
            assert loop == os.getpriority(os.PRIO_PROCESS, 0), nices
            assert len(pool) >= 3, nices
            assert set(pool.values()) == {min(loop + steps, 19)}, (args, nices)
        finally:
            s.stop()


def test_debug_pool_and_sigusr1(path):
    """Issue 26: /debug/pool serves the pool's snapshot report; SIGUSR1
    prints it on stderr when WSPOOL_DUMP_ON_SIGUSR1 is set (not otherwise:
    then the signal's default action would end the server, so the test does
    not send it to a server without the variable)."""
    os.environ["WSPOOL_DUMP_ON_SIGUSR1"] = "1"
    try:
        s = Server(path)
    finally:
        del os.environ["WSPOOL_DUMP_ON_SIGUSR1"]
    try:
        assert curl(s.url + "/ping") == (200, "pong\n")
        code, text = curl(s.url + "/debug/pool")
        assert code == 200, code
        assert text.startswith('pool "http": ') and "\nthreads:\n" in text and "\nqueues:\n  global: " in text, text
        assert metrics(s.url)["wspool_stall_episodes"] == 0
        s.p.send_signal(signal.SIGUSR1)
        # Read stderr until the report's first line (bounded: a hang fails).
        seen = ""
        while 'pool "http": ' not in seen:
            ready, _, _ = select.select([s.p.stderr], [], [], HANG_GUARD_S)
            assert ready, f"no report on stderr after SIGUSR1: {seen!r}"
            line = s.p.stderr.readline()
            assert line, f"stderr closed: {seen!r}"
            seen += line
    finally:
        s.stop()


TESTS = {
    "endpoints": test_endpoints_and_metrics,
    "debug-pool": test_debug_pool_and_sigusr1,
    "mix": test_keepalive_mix,
    "hangup": test_clients_hang_up_mid_request,
    "hangup-cancel": test_hang_up_cancels_queued_work,
    "request-start": test_deadline_counts_from_request_start,
    "shutdown": test_shutdown_with_requests_in_flight,
    "overload": test_overload_sheds_with_503,
    "worker-nice": test_worker_nice,
}


class Watchdog(Exception):
    """Raised in a test that ran past WATCHDOG_S."""


# A test's limit, whatever it waits on: its `finally` then still stops its server.
WATCHDOG_S = 5 * HANG_GUARD_S


def run_mode_tests(server, modes, tests, applies):
    """The drivers of servers with --mode (the Beast and axum examples): runs
    each test of `tests` (name -> test(server, mode)) in each mode where
    applies(mode, name), under a watchdog (SIGALRM raises Watchdog in the
    test after WATCHDOG_S), reports every result, then exits 1 if any failed."""
    def bark(_sig, _frame):
        raise Watchdog(f"still running after {WATCHDOG_S} s")

    signal.signal(signal.SIGALRM, bark)
    bad = ran = 0
    for mode in modes:
        for name, t in tests.items():
            if not applies(mode, name):
                continue
            ran += 1
            t0 = time.time()
            signal.alarm(WATCHDOG_S)
            try:
                t(server, mode)
                print(f"ok   {name} --mode {mode} ({time.time() - t0:.1f}s)", flush=True)
            except Exception as e:  # report every failure, then fail
                bad += 1
                print(f"FAIL {name} --mode {mode}: {type(e).__name__}: {e}", flush=True)
            finally:
                signal.alarm(0)
    print(f"{os.path.basename(server)}: {ran - bad} passed, {bad} failed")
    sys.exit(1 if bad else 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--skip", default="")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    bad = 0
    for name, t in TESTS.items():
        if name in skip:
            print(f"SKIP {name}")
            continue
        t0 = time.time()
        try:
            t(a.server)
            print(f"ok   {name} ({time.time() - t0:.1f}s)")
        except Exception as e:  # report every failure, then fail
            bad += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
    print(f"{os.path.basename(a.server)}: {len(TESTS) - len(skip) - bad} passed, {bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

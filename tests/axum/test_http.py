#!/usr/bin/env python3
"""Drives the axum example (examples-rust/http_axum) with real clients.

    test_http.py --server target/axum/debug/http_axum [--modes wspool,spawn_blocking,rayon]

Reuses the C HTTP examples' test helpers (tests/embed/test_http.py: Server,
curl, metrics, work_digest, the hang-up and X-Request-Start checks). Every
server listens on 127.0.0.1, is stopped with SIGINT and must exit 0, which
it does only when every request handed off the runtime's thread ended
(submitted == done). Every wait is bounded, and a watchdog ends a test that
runs past 5 minutes (its server stopped too); nothing times the server.
"""
import argparse
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "embed"))
from test_http import (  # noqa: E402
    HANG_GUARD_S, Server, curl, hang_ups_cancel_then_stop, metrics, read_to_eof, run_mode_tests,
    stamped_deadlines_count_from_request_start, work_digest)

# /work of ~1 s in a debug build (~0.1 s optimised): long enough to keep a
# worker busy while a test queues more behind it.
LONG_N = 100000000


def start(path, mode, *args):
    return Server(path, "--threads", "2", "--mode", mode, *args)


def wait_for(s, what, cond):
    """Polls /metrics until cond(metrics) holds; bounded by the hang guard."""
    deadline = time.monotonic() + HANG_GUARD_S
    while True:
        m = metrics(s.url)
        if cond(m):
            return m
        assert time.monotonic() < deadline, (what, m)
        time.sleep(0.01)


def send(s, path):
    """A raw connection with one request sent; its reply is read later."""
    k = socket.create_connection(("127.0.0.1", s.port), timeout=HANG_GUARD_S)
    k.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    return k


def send_in_order(s, paths):
    """Sends each request once the server has handed off the one before it,
    so they reach the pool in this order."""
    socks = []
    for p in paths:
        before = metrics(s.url)["http_submitted"]
        socks.append(send(s, p))
        wait_for(s, f"{p} handed off", lambda m: m["http_submitted"] > before)
    return socks


def reply(k):
    data = read_to_eof(k)
    k.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body.decode()


def test_endpoints(path, mode):
    s = start(path, mode)
    try:
        assert curl(s.url + "/ping") == (200, "pong\n")
        assert curl(s.url + "/work?n=5000") == (200, f"{work_digest(5000):016x}\n")
        assert curl(s.url + "/work?n=5000&priority=low") == (200, f"{work_digest(5000):016x}\n")
        assert curl(s.url + "/sleep?ms=30") == (200, "slept\n")
        assert curl(s.url + "/nope")[0] == 404
        for bad in ("/work?n=x", "/work", "/work?n=1&priority=urgent", "/work?n=1&deadline_ms=x",
                    "/work?n=100000001", "/sleep?ms=99999999"):
            assert curl(s.url + bad)[0] == 400, bad
        assert curl(s.url + "/ping", "--http1.0")[1] == "pong\n"
        m = metrics(s.url)
        assert m["http_submitted"] == m["http_done"] == 3, m
        assert m["http_requests"] == 13, m
        if mode == "wspool":
            assert m["wspool_submitted_tasks"] == 3, m  # the work ran on wspool
    finally:
        sub, done, _, _ = s.stop()
    assert sub == done == 3


def test_ping_while_saturated(path, mode):
    """8 long /work on 2 threads: while at least one waits in the queue,
    20 /ping in a row are answered, by the runtime's thread. The clients
    then hang up, which cancels what is still queued."""
    s = start(path, mode)
    socks = []
    try:
        socks = [send(s, f"/work?n={LONG_N}") for _ in range(8)]
        wait_for(s, "8 handed off", lambda m: m["http_submitted"] == 8)
        for _ in range(20):
            assert curl(s.url + "/ping") == (200, "pong\n")
        m = metrics(s.url)
        # More out than 2 threads run: work was queued all along.
        assert m["http_submitted"] - m["http_done"] > 2, m
        for k in socks:
            k.close()
        m = wait_for(s, "8 ended", lambda m: m["http_done"] == 8)
        assert m["http_cancelled_client_gone"] >= 1, m  # at least the last one was still queued
    finally:
        for k in socks:
            k.close()
        sub, done, _, _ = s.stop()
    assert sub == done == 8


def test_priorities(path, mode):
    """Two long /work keep both threads busy; then, in this order, a low,
    four normal and a high one queue behind them. The high one starts first
    (X-Started: the order work began), the four normal next, the low one
    last. The two long ones differ in length, so that one thread drains the
    queue while the other is still busy (two threads taking work at once
    could count their starts in either order)."""
    s = start(path, mode)
    try:
        gates = send_in_order(s, [f"/work?n={LONG_N}", f"/work?n={LONG_N // 2}"])
        wait_for(s, "both threads busy", lambda m: m["wspool_queued_tasks"] == 0 and m["wspool_idle_threads"] == 0)
        queued = send_in_order(s, ["/work?n=1000&priority=low"] + ["/work?n=1000"] * 4 +
                               ["/work?n=1000&priority=high"])
        got = [reply(k) for k in queued]
        for k in gates:
            assert reply(k)[0] == 200
    finally:
        s.stop()
    assert all(st == 200 for st, _, _ in got), got
    order = [int(h["x-started"]) for _, h, _ in got]
    low, normal, high = order[0], order[1:5], order[5]
    assert high < min(normal) and max(normal) < low, order


def test_request_start(path, mode):
    """A /work deadline counts from X-Request-Start (the C examples' own
    check, on the pool); in the other modes a request stamped a second ago
    and due 20 ms after is expired (503) without running."""
    s = start(path, mode)
    try:
        if mode == "wspool":
            stamped_deadlines_count_from_request_start(s, "http_expired")
        else:
            stamp = f"t={int((time.time() - 1) * 1e6)}"
            assert curl(s.url + "/work?n=1000&deadline_ms=20", "-H", f"X-Request-Start: {stamp}") == (503, "expired\n")
            assert metrics(s.url)["http_expired"] == 1
    finally:
        s.stop()


def test_hang_up_cancels_queued_work(path, mode):
    """12 clients send /sleep?ms=2000 into the lane of 2 and hang up at once:
    each handler's future is dropped, and its drop guard cancels the queued
    task, which never runs (the pool's cancelled count says so)."""
    hang_ups_cancel_then_stop(start(path, mode), 12)  # /ping is answered on the runtime's thread


def test_shutdown_with_requests_in_flight(path, mode):
    """SIGINT while 6 /work are queued or running on 2 threads: each is still
    answered, then the server exits 0."""
    s = start(path, mode)
    socks = []
    try:
        socks = [send(s, "/work?n=10000000") for _ in range(6)]
        wait_for(s, "6 handed off", lambda m: m["http_submitted"] == 6)
    finally:
        sub, done, _, err = s.stop()
    answered = sum(reply(k)[0] == 200 for k in socks)
    assert sub == done == 6, err
    assert answered == 6, answered


TESTS = {
    "endpoints": test_endpoints,
    "ping-saturated": test_ping_while_saturated,
    "priorities": test_priorities,
    "request-start": test_request_start,
    "hangup-cancel": test_hang_up_cancels_queued_work,
    "shutdown": test_shutdown_with_requests_in_flight,
}
# Priorities and lanes are wspool's; the other modes have neither.
WSPOOL_ONLY = {"priorities", "hangup-cancel"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--modes", default="wspool,spawn_blocking,rayon")
    a = ap.parse_args()
    run_mode_tests(a.server, a.modes.split(","), TESTS, lambda mode, name: mode == "wspool" or name not in WSPOOL_ONLY)

if __name__ == "__main__":
    main()

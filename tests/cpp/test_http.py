#!/usr/bin/env python3
"""Drives the Boost.Beast example (examples-cpp/http_beast) with real clients.

    test_http.py --server examples-cpp/bin/http_beast [--modes pool,plain,inline,threads]

A mode is the server's --mode; "plain" is --mode pool --plain (every handler
through the Asio executor, no priority, deadline or lane).

Reuses the helpers of the C HTTP examples' tests (tests/embed/test_http.py:
Server, curl, ab, metrics, work_digest): every server is stopped with SIGINT
and must exit 0, which it does only when every request handed off the loop
got its response back on the loop (submitted == done). Under ASan/LSan a
report makes the exit status non-zero too. Every wait is bounded.
"""
import argparse
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "embed"))
from test_http import (  # noqa: E402
    HANG_GUARD_S, Server, ab, curl, hang_ups_cancel_then_stop, metrics, read_to_eof, run_mode_tests,
    stamped_deadlines_count_from_request_start, work_digest)


def mode_args(mode):
    return ["--mode", "pool", "--plain"] if mode == "plain" else ["--mode", mode]


def test_endpoints_and_metrics(path, mode):
    s = Server(path, "--threads", "2", *mode_args(mode))
    try:
        assert curl(s.url + "/ping") == (200, "pong\n")
        assert curl(s.url + "/work?n=5000") == (200, f"{work_digest(5000):016x}\n")
        assert curl(s.url + "/sleep?ms=30") == (200, "slept\n")
        assert curl(s.url + "/nope")[0] == 404
        assert curl(s.url + "/work?n=x")[0] == 400
        assert curl(s.url + "/sleep?ms=99999999")[0] == 400
        assert curl(s.url + "/ping", "--http1.0")[1] == "pong\n"
        m = metrics(s.url)
        assert m["wspool_threads"] >= 2, m
        handed = 0 if mode == "inline" else 4
        assert m["http_submitted"] == handed and m["http_done"] == handed, m
        assert m["http_requests"] == 8, m
        if mode in ("pool", "plain"):
            assert m["wspool_submitted_tasks"] >= 4, m  # the handlers ran on wspool
    finally:
        sub, done, _, _ = s.stop()
    assert sub == done == (0 if mode == "inline" else 4)


def test_keepalive_mix(path, mode):
    """ab keep-alive on /ping beside /work and /sleep clients: nothing fails,
    every request answered."""
    s = Server(path, "--threads", "2", *mode_args(mode))
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
        assert m["http_done"] == (0 if mode == "inline" else 22060), m
    finally:
        s.stop()


def test_shutdown_with_requests_in_flight(path, mode):
    """SIGINT while 30 /work requests are queued or running on 2 threads:
    each is still answered (its response comes back to the loop), idle
    connections are closed, exit 0."""
    s = Server(path, "--threads", "2", *mode_args(mode))
    socks = []
    try:
        idle = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        socks.append(idle)
        for i in range(30):
            k = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            k.sendall(b"GET /work?n=3000000 HTTP/1.1\r\nHost: x\r\n\r\n")
            socks.append(k)
        deadline = time.time() + HANG_GUARD_S
        while metrics(s.url)["http_submitted"] < 30:
            assert time.time() < deadline
            time.sleep(0.01)
    finally:
        sub, done, _, err = s.stop()
    answered = 0
    for k in socks[1:]:
        k.settimeout(HANG_GUARD_S)
        answered += read_to_eof(k).startswith(b"HTTP/1.1 200")
        k.close()
    socks[0].close()
    assert sub == done == 30, err
    assert answered == 30, answered


def test_clients_hang_up_mid_request(path, mode):
    """Clients send /sleep and vanish (FIN or RST) while it runs: each
    handler's response still comes back to the loop, the server keeps serving."""
    s = Server(path, "--threads", "2", *mode_args(mode))
    try:
        socks = []
        for i in range(20):
            k = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            k.sendall(b"GET /sleep?ms=50 HTTP/1.1\r\nHost: x\r\n\r\n")
            socks.append(k)
        deadline = time.time() + HANG_GUARD_S
        while metrics(s.url)["http_submitted"] < 20:
            assert time.time() < deadline
            time.sleep(0.01)
        for i, k in enumerate(socks):
            if i % 2:
                k.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            k.close()
        while metrics(s.url)["http_done"] < 20:
            assert time.time() < deadline
            time.sleep(0.02)
        assert curl(s.url + "/ping") == (200, "pong\n")
    finally:
        sub, done, _, _ = s.stop()
    assert sub == done == 21


def test_work_deadlines(path, mode):
    """8 /work requests of ~0.1 s or more each, their answers due 1 ms after
    arrival, on 2 threads: each must start within half that (the server
    reserves at most half a request's allowance). Whatever has not started
    by its deadline never runs and is answered 503 "expired"; the rest are
    answered in full, late, and counted in http_answered_late. Not 8 threads
    can start within 0.5 ms of the requests' arrival, so some expire (a
    slower machine only makes more of them expire); the server's and the
    pool's counts agree."""
    s = Server(path, "--threads", "2", *mode_args(mode))
    n = 100000000  # the most /work takes: ~0.1 s or more
    replies = []
    try:
        socks = []
        for _ in range(8):
            k = socket.create_connection(("127.0.0.1", s.port), timeout=HANG_GUARD_S)
            k.sendall(f"GET /work?n={n}&deadline_ms=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            socks.append(k)
        for k in socks:
            replies.append(read_to_eof(k))
            k.close()
        assert curl(s.url + "/work?n=1&deadline_ms=x")[0] == 400
        m = metrics(s.url)
    finally:
        sub, done, _, _ = s.stop()
    # 16 hex digits and a newline (the digest itself is too slow to compute in Python)
    ok = [r for r in replies if r.startswith(b"HTTP/1.1 200") and len(r.rsplit(b"\r\n\r\n", 1)[1]) == 17]
    expired = [r for r in replies if r.startswith(b"HTTP/1.1 503") and r.endswith(b"expired\n")]
    assert len(ok) + len(expired) == 8, replies
    assert len(expired) >= 1, m
    assert m["http_expired"] == len(expired) == m["wspool_expired_tasks"], m
    assert m["http_answered_late"] == len(ok), m
    assert sub == done == 8


def test_deadline_counts_from_request_start(path, mode):
    """A /work deadline counts from the request's X-Request-Start stamp, as
    in the C examples (the same test: a request stamped a second before and
    due 20 ms after expires unrun; an unreadable or stale stamp is ignored;
    a reply written after its due time is counted late)."""
    s = Server(path, "--threads", "2", *mode_args(mode))
    try:
        stamped_deadlines_count_from_request_start(s, "http_expired")
    finally:
        sub, done, _, _ = s.stop()
    assert sub == done == 8


def test_hang_up_cancels_queued_work(path, mode):
    """12 clients send /sleep?ms=2000 into the lane of 2 and hang up at once:
    at most 2 start, the rest wait in the lane, and the loop, watching each
    socket while its request is out, sees the hang-up and cancels the queued
    handler (wspool::task::cancel): it never runs. The queued ones wait
    behind 2 s sleeps, which gives the loop those 2 s to notice."""
    hang_ups_cancel_then_stop(Server(path, "--threads", "2", *mode_args(mode)), 13)  # /ping on the pool too


TESTS = {
    "endpoints": test_endpoints_and_metrics,
    "mix": test_keepalive_mix,
    "shutdown": test_shutdown_with_requests_in_flight,
    "hangup": test_clients_hang_up_mid_request,
    "deadline": test_work_deadlines,
    "request-start": test_deadline_counts_from_request_start,
    "hangup-cancel": test_hang_up_cancels_queued_work,
}
# inline runs handlers on the loop: nothing is handed off, so the shutdown
# and hang-up tests (which count hand-offs) do not apply. Deadlines, lanes
# and cancellation are the pool mode's (not --plain's).
MODE_TESTS = {
    "inline": {"endpoints", "mix"},
    "plain": {"endpoints", "mix", "shutdown", "hangup"},
    "threads": {"endpoints", "mix", "shutdown", "hangup"},
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--modes", default="pool,plain,inline,threads")
    a = ap.parse_args()
    run_mode_tests(a.server, a.modes.split(","), TESTS,
                   lambda mode, name: mode not in MODE_TESTS or name in MODE_TESTS[mode])

if __name__ == "__main__":
    main()

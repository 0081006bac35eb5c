#!/usr/bin/env python3
"""Drives the Boost.Beast example (examples-cpp/http_beast) with real clients.

    test_http.py --server examples-cpp/bin/http_beast [--modes pool,inline,threads]

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
from test_http import HANG_GUARD_S, Server, ab, curl, metrics, work_digest  # noqa: E402


def test_endpoints_and_metrics(path, mode):
    s = Server(path, "--threads", "2", "--mode", mode)
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
        if mode == "pool":
            assert m["wspool_submitted_tasks"] >= 4, m  # the handlers ran on wspool
    finally:
        sub, done, _, _ = s.stop()
    assert sub == done == (0 if mode == "inline" else 4)


def test_keepalive_mix(path, mode):
    """ab keep-alive on /ping beside /work and /sleep clients: nothing fails,
    every request answered."""
    s = Server(path, "--threads", "2", "--mode", mode)
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
    s = Server(path, "--threads", "2", "--mode", mode)
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
        data = b""
        while True:
            b = k.recv(4096)
            if not b:
                break
            data += b
        answered += data.startswith(b"HTTP/1.1 200")
        k.close()
    socks[0].close()
    assert sub == done == 30, err
    assert answered == 30, answered


def test_clients_hang_up_mid_request(path, mode):
    """Clients send /sleep and vanish (FIN or RST) while it runs: each
    handler's response still comes back to the loop, the server keeps serving."""
    s = Server(path, "--threads", "2", "--mode", mode)
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


TESTS = {
    "endpoints": test_endpoints_and_metrics,
    "mix": test_keepalive_mix,
    "shutdown": test_shutdown_with_requests_in_flight,
    "hangup": test_clients_hang_up_mid_request,
}
# inline runs handlers on the loop: nothing is handed off, so the shutdown
# and hang-up tests (which count hand-offs) do not apply.
INLINE_TESTS = {"endpoints", "mix"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--modes", default="pool,inline,threads")
    a = ap.parse_args()
    bad = ran = 0
    for mode in a.modes.split(","):
        for name, t in TESTS.items():
            if mode == "inline" and name not in INLINE_TESTS:
                continue
            ran += 1
            t0 = time.time()
            try:
                t(a.server, mode)
                print(f"ok   {name} --mode {mode} ({time.time() - t0:.1f}s)")
            except Exception as e:  # report every failure, then fail
                bad += 1
                print(f"FAIL {name} --mode {mode}: {type(e).__name__}: {e}")
    print(f"{os.path.basename(a.server)}: {ran - bad} passed, {bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

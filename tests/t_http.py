#!/usr/bin/env python3
"""HTTP protocol behaviour of the real daemon: framing, limits, methods, keep-alive (SPEC 5).

Every malformed request must get its exact status, create no job, and leave the daemon
serving the next client.
"""

import json
import socket
import time

from ttqlib import Daemon, raw_exchange, run_tests, tap, wait_until

D = Daemon()
D.start(env={"TT_DEVICE_MAX_REQUEST_BYTES": "4096"})


def status_of(raw):
    line = raw.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def body_of(raw):
    return raw.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in raw else b""


def post_raw(body, extra=b""):
    return (b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
            b"Content-Length: %d\r\n\r\n" % len(body) + body)


BAD = [
    ("garbage request line", b"HELLO\r\n\r\n", 400),
    ("bare LF line ends", b"GET /status HTTP/1.1\nHost: x\n\n", 400),
    ("HTTP/2.0", b"GET /status HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    ("no Host on 1.1", b"GET /status HTTP/1.1\r\n\r\n", 400),
    ("obs-fold header", b"GET /status HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400),
    ("space before colon", b"GET /status HTTP/1.1\r\nHost : x\r\n\r\n", 400),
    ("NUL in header", b"GET /status HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400),
    ("absolute-form target", b"GET http://x/status HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("negative Content-Length", b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
    ("non-numeric Content-Length",
     b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n", 400),
    ("conflicting Content-Length",
     b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400),
    ("huge Content-Length",
     b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 413),
    ("chunked body", b"POST /queue HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"2\r\n{}\r\n0\r\n\r\n", 411),
    ("POST without Content-Length", b"POST /queue HTTP/1.1\r\nHost: x\r\n\r\n", 411),
    ("body over the limit", post_raw(b'{"cmd": "' + b"x" * 5000 + b'"}'), 413),
    ("head over 16 KiB", b"GET /status HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 17000 +
     b"\r\n\r\n", 431),
    ("too many headers", b"GET /status HTTP/1.1\r\nHost: x\r\n" +
     b"".join(b"X-%d: y\r\n" % i for i in range(70)) + b"\r\n", 431),
    ("unknown expectation", b"GET /status HTTP/1.1\r\nHost: x\r\nExpect: magic\r\n\r\n", 417),
    ("unknown path", b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    ("path traversal as job id", b"GET /logs/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    ("overlong job id", b"GET /job/" + b"a" * 33 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    ("uppercase job id", b"GET /job/" + b"A" * 32 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    ("unknown job id", b"GET /result/" + b"0" * 32 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    ("wrong method", b"DELETE /status HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    ("HEAD is not allowed", b"HEAD /status HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    ("GET on /queue", b"GET /queue HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    ("bad query wait", b"GET /result/" + b"0" * 32 + b"?wait=abc HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("wait over 60", b"GET /result/" + b"0" * 32 + b"?wait=61 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("negative offset", b"GET /logs/" + b"0" * 32 + b"?offset=-1 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("status of unknown device", b"GET /status?device=9 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("non-UTF-8 JSON", post_raw(b'{"cmd": "echo \xff"}'), 400),
    ("lone surrogate", post_raw(b'{"cmd": "echo \\ud800"}'), 400),
    ("deep nesting", post_raw(b'{"cmd": "true", "x": ' + b"[" * 100 + b"]" * 100 + b"}"), 400),
    ("duplicate key", post_raw(b'{"cmd": "true", "cmd": "false"}'), 400),
    ("huge number for repeat", post_raw(b'{"cmd": "true", "repeat": 1e400}'), 400),
    ("repeat as string", post_raw(b'{"cmd": "true", "repeat": "3"}'), 400),
    ("cwd not a directory", post_raw(b'{"cmd": "true", "cwd": "/etc/passwd"}'), 400),
    ("kill without a target", b"POST /kill HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 400),
    ("reset of unknown card",
     b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n{\"device_id\": 42}", 400),
]


def test_malformed_requests_exact_status():
    for name, data, want in BAD:
        raw = raw_exchange(D.port, data, timeout=3)
        got = status_of(raw)
        ok = tap.ok(got == want, "%s: %d" % (name, want), "got %r" % raw[:300])
        if ok and want >= 400:
            try:
                err = json.loads(body_of(raw)).get("error")
            except ValueError:
                err = None
            tap.ok(isinstance(err, str) and err, "%s: JSON error body says why" % name,
                   body_of(raw)[:200])
    st = D.status()
    tap.eq(st["queued_total"], 0, "no malformed request created a job")
    tap.eq([d["recent"] for d in st["devices"]], [[], []], "nothing ran")
    tap.ok(D.alive(), "daemon still serving after the bad inputs")


def test_keep_alive_and_pipelining():
    s = socket.create_connection(("127.0.0.1", D.port), timeout=5)
    req = b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n"
    s.sendall(req * 3)
    buf = b""
    deadline = time.monotonic() + 5
    while buf.count(b"HTTP/1.1 200") < 3 and time.monotonic() < deadline:
        buf += s.recv(65536)
    tap.eq(buf.count(b"HTTP/1.1 200"), 3, "three pipelined requests, three answers in order")
    s.sendall(req)
    more = s.recv(65536)
    tap.ok(more.startswith(b"HTTP/1.1 200"), "the connection stays open (keep-alive)")
    s.close()


def test_http10_and_connection_close():
    raw = raw_exchange(D.port, b"GET /status HTTP/1.0\r\n\r\n")
    tap.eq(status_of(raw), 200, "HTTP/1.0 without Host is served")
    tap.ok(b"connection: close" in raw.lower().split(b"\r\n\r\n")[0],
           "HTTP/1.0 without keep-alive: Connection: close", raw[:200])
    raw = raw_exchange(D.port, b"GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    tap.eq(status_of(raw), 200, "Connection: close answered")
    tap.ok(raw.count(b"HTTP/1.1") == 1, "and then closed")


def test_expect_continue():
    s = socket.create_connection(("127.0.0.1", D.port), timeout=5)
    body = json.dumps({"cmd": "true"}).encode()
    s.sendall(b"POST /queue HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body))
    first = s.recv(65536)
    tap.ok(first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), "100 Continue before the body", first)
    s.sendall(body)
    rest = first[len(b"HTTP/1.1 100 Continue\r\n\r\n"):]
    deadline = time.monotonic() + 5
    while b"\r\n\r\n" not in rest and time.monotonic() < deadline:
        rest += s.recv(65536)
    tap.eq(status_of(rest), 200, "the body is then accepted")
    s.close()
    job = json.loads(body_of(rest))
    D.wait_done(job["job_id"])


def test_response_headers_and_trailing_slash():
    r = D.get("/status/")
    tap.eq(r.status, 200, "a trailing / is ignored")
    tap.eq(r.headers.get("content-type"), "application/json; charset=utf-8", "JSON content type")
    tap.eq(r.headers.get("cache-control"), "no-store", "Cache-Control: no-store")
    r = D.request("PUT", "/queue", body=b"{}")
    tap.eq((r.status, r.headers.get("allow")), (405, "POST"), "405 names the allowed method")


def test_idle_connection_closed():
    s = socket.create_connection(("127.0.0.1", D.port), timeout=15)
    t0 = time.monotonic()
    s.settimeout(15)
    data = s.recv(100)
    took = time.monotonic() - t0
    tap.ok(data == b"" and 9 <= took <= 13, "an idle connection is closed after about 10 s",
           "recv %r after %.1fs" % (data, took))
    s.close()


def test_dribbled_request_closed():
    s = socket.create_connection(("127.0.0.1", D.port), timeout=15)
    s.sendall(b"GET /status HTTP/1.1\r\n")
    t0 = time.monotonic()
    got = b""
    while True:
        try:
            chunk = s.recv(4096)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    took = time.monotonic() - t0
    tap.ok(9 <= took <= 13, "a request not completed in 10 s is cut off (%.1fs)" % took)
    tap.eq(status_of(got), 408, "with 408")
    s.close()


def test_other_clients_served_while_one_stalls():
    stalled = socket.create_connection(("127.0.0.1", D.port), timeout=5)
    stalled.sendall(b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    t0 = time.monotonic()
    r = D.get("/status")
    tap.ok(r.status == 200 and time.monotonic() - t0 < 1, "a half-sent request delays no one")
    stalled.close()
    wait_until(D.alive, 1, "daemon alive")


run_tests(test_malformed_requests_exact_status, test_keep_alive_and_pipelining,
          test_http10_and_connection_close, test_expect_continue,
          test_response_headers_and_trailing_slash, test_other_clients_served_while_one_stalls,
          test_idle_connection_closed, test_dribbled_request_closed)

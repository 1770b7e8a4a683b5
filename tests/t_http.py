#!/usr/bin/env python3
"""HTTP protocol behaviour of the real daemon: framing, limits, methods, keep-alive.

Every malformed or hostile request in BAD must get its exact status (with a JSON error body
that says why), create no job and no job folder, and leave the daemon serving the next client.
The table covers the request line, header framing, Content-Length, paths and ids, query
parameters of every endpoint, JSON syntax and encoding, and a wrong type or out-of-range value
in every field of POST /queue, /kill and /reset.
"""

import json
import os
import socket
import time

from ttqlib import Daemon, raw_exchange, run_tests, tap, wait_until

LIMIT = 512 * 1024  # TT_DEVICE_MAX_REQUEST_BYTES of this daemon
D = Daemon()
D.env["HOME"] = D.tmp  # jobs' login shells skip the host's ~/.profile (pyenv rehash locks)
D.start(env={"TT_DEVICE_MAX_REQUEST_BYTES": str(LIMIT)})


def status_of(raw):
    line = raw.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def body_of(raw):
    return raw.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in raw else b""


def req(method, path, body=None, headers=b""):
    head = b"%s %s HTTP/1.1\r\nHost: x\r\n" % (method.encode(), path.encode("latin-1"))
    if body is None:
        return head + headers + b"\r\n"
    if isinstance(body, str):
        body = body.encode("utf-8")
    return head + headers + b"Content-Length: %d\r\n\r\n" % len(body) + body


def get(path):
    return req("GET", path)


def post_raw(body, extra=b"", path="/queue"):
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + extra + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def queue(**fields):
    """POST /queue with a runnable cmd and the given (bad) fields; DROP removes one."""
    body = {"cmd": "echo should-not-run"}
    body.update(fields)
    body = {k: v for k, v in body.items() if v is not DROP}
    return post_raw(json.dumps(body).encode())


DROP = object()
ID0 = "0" * 32  # a well-formed id no job has
HEAD_MAX = 16 * 1024
BAD = [
    # ---- request line
    ("garbage request line", b"HELLO\r\n\r\n", 400),
    ("empty method", b" /status HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("two spaces after the method", b"GET  /status HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("no HTTP version", b"GET /status\r\nHost: x\r\n\r\n", 400),
    ("text after the version", b"GET /status HTTP/1.1 x\r\nHost: x\r\n\r\n", 400),
    ("lowercase version", b"GET /status http/1.1\r\nHost: x\r\n\r\n", 400),
    ("HTTP/2.0", b"GET /status HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    ("HTTP/0.9", b"GET /status HTTP/0.9\r\n\r\n", 505),
    ("asterisk-form target", b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("https target", b"GET https://x/status HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("ftp target", b"GET ftp://x/status HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("authority-form target", b"CONNECT x:5741 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("userinfo in the target", b"GET http://u:p@x/status HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("empty host in the target", b"GET http:///status HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("NUL in the target", b"GET /sta\x00tus HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("non-ASCII byte in the target", b"GET /status\xff HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ("non-UTF-8 method", b"G\xc3\x28T /status HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    # ---- line ends and header framing
    ("bare LF line ends", b"GET /status HTTP/1.1\nHost: x\n\n", 400),
    ("bare LF after a header", b"GET /status HTTP/1.1\r\nHost: x\n\r\n", 400),
    ("bare CR", b"GET /status HTTP/1.1\rHost: x\r\n\r\n", 400),
    ("no Host on 1.1", b"GET /status HTTP/1.1\r\n\r\n", 400),
    ("two Host headers", b"GET /status HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400),
    ("Host with a space", b"GET /status HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
    ("Host with a path", b"GET /status HTTP/1.1\r\nHost: x/status\r\n\r\n", 400),
    ("Host with a bad port", b"GET /status HTTP/1.1\r\nHost: x:57a1\r\n\r\n", 400),
    ("Host IPv6 without brackets", b"GET /status HTTP/1.1\r\nHost: ::1\r\n\r\n", 400),
    ("invalid Host on 1.0", b"GET /status HTTP/1.0\r\nHost: a b\r\n\r\n", 400),
    ("obs-fold header", b"GET /status HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400),
    ("tab-folded first header", b"GET /status HTTP/1.1\r\n\tHost: x\r\n\r\n", 400),
    ("space before colon", b"GET /status HTTP/1.1\r\nHost : x\r\n\r\n", 400),
    ("header without colon", b"GET /status HTTP/1.1\r\nHost: x\r\nX-A b\r\n\r\n", 400),
    ("empty header name", b"GET /status HTTP/1.1\r\nHost: x\r\n: b\r\n\r\n", 400),
    ("separator in header name", b"GET /status HTTP/1.1\r\nHost: x\r\nX(A): b\r\n\r\n", 400),
    ("NUL in header", b"GET /status HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400),
    ("DEL in header", b"GET /status HTTP/1.1\r\nHost: x\r\nX-A: a\x7fb\r\n\r\n", 400),
    ("head over 16 KiB", b"GET /status HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 17000 +
     b"\r\n\r\n", 431),
    ("request target over 16 KiB", get("/" + "a" * HEAD_MAX), 431),
    ("too many headers", b"GET /status HTTP/1.1\r\nHost: x\r\n" +
     b"".join(b"X-%d: y\r\n" % i for i in range(70)) + b"\r\n", 431),
    ("unknown expectation", b"GET /status HTTP/1.1\r\nHost: x\r\nExpect: magic\r\n\r\n", 417),
    # ---- Content-Length and bodies
    ("negative Content-Length", b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
    ("non-numeric Content-Length",
     b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n", 400),
    ("Content-Length with a sign", b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: +2\r\n\r\n{}",
     400),
    ("hex Content-Length", b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: 0x2\r\n\r\n{}", 400),
    ("empty Content-Length", b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n", 400),
    ("Content-Length list", b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: 2, 2\r\n\r\n{}", 400),
    ("Content-Length with inner space",
     b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: 1 2\r\n\r\n{}", 400),
    ("conflicting Content-Length",
     b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400),
    ("huge Content-Length",
     b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 413),
    ("18-digit Content-Length",
     b"POST /queue HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999999999\r\n\r\n", 413),
    ("chunked body", b"POST /queue HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"2\r\n{}\r\n0\r\n\r\n", 411),
    ("Transfer-Encoding beside Content-Length", b"POST /queue HTTP/1.1\r\nHost: x\r\n"
     b"Transfer-Encoding: identity\r\nContent-Length: 2\r\n\r\n{}", 411),
    ("POST without Content-Length", b"POST /queue HTTP/1.1\r\nHost: x\r\n\r\n", 411),
    ("/kill without Content-Length", b"POST /kill HTTP/1.1\r\nHost: x\r\n\r\n", 411),
    ("body over the limit", post_raw(b'{"cmd": "' + b"x" * LIMIT + b'"}'), 413),
    ("100-continue for a body over the limit",
     b"POST /queue HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
     % (LIMIT + 1), 413),
    # ---- paths, methods, ids
    ("unknown path", get("/nope"), 404),
    ("unknown path under a known one", get("/status/x"), 404),
    ("path traversal as job id", get("/logs/../../etc/passwd"), 404),
    ("encoded traversal as job id", get("/logs/..%2F..%2Fetc%2Fpasswd"), 404),
    ("traversal after a valid id", get("/result/" + ID0 + "/../../../etc/passwd"), 404),
    ("absolute path as job id", get("/job//etc/passwd"), 404),
    ("empty job id", get("/job/"), 404),
    ("overlong job id", get("/job/" + "a" * 33), 404),
    ("very long job id", get("/logs/" + "a" * 8000), 404),
    ("31-character job id", get("/job/" + "a" * 31), 404),
    ("uppercase job id", get("/job/" + "A" * 32), 404),
    ("non-hex job id", get("/job/" + "g" * 32), 404),
    ("unknown job id", get("/result/" + ID0), 404),
    ("unknown job's logs", get("/logs/" + ID0 + "?offset=0"), 404),
    ("wrong method", req("DELETE", "/status"), 405),
    ("HEAD is not allowed", req("HEAD", "/status"), 405),
    ("GET on /queue", get("/queue"), 405),
    ("GET on /kill", get("/kill"), 405),
    ("PUT on /reset", req("PUT", "/reset", "{}"), 405),
    ("POST on /status", req("POST", "/status", "{}"), 405),
    ("POST on /job/ID", req("POST", "/job/" + ID0, "{}"), 405),
    ("lowercase method", req("get", "/status"), 405),
    # ---- query parameters of every endpoint
    ("result: wait not a number", get("/result/%s?wait=abc" % ID0), 400),
    ("result: wait over 60", get("/result/%s?wait=61" % ID0), 400),
    ("result: negative wait", get("/result/%s?wait=-1" % ID0), 400),
    ("result: fractional wait", get("/result/%s?wait=1.5" % ID0), 400),
    ("result: empty wait", get("/result/%s?wait=" % ID0), 400),
    ("result: wait twice", get("/result/%s?wait=1&wait=2" % ID0), 400),
    ("result: percent-encoded wait", get("/result/%s?wait=%%31" % ID0), 400),
    ("logs: negative offset", get("/logs/%s?offset=-1" % ID0), 400),
    ("logs: offset not a number", get("/logs/%s?offset=abc" % ID0), 400),
    ("logs: offset past 2^62", get("/logs/%s?offset=9223372036854775807" % ID0), 400),
    ("logs: negative limit", get("/logs/%s?limit=-5" % ID0), 400),
    ("logs: 20-digit limit", get("/logs/%s?limit=99999999999999999999" % ID0), 400),
    ("logs: limit with a plus", get("/logs/%s?limit=+5" % ID0), 400),
    ("logs: wait over 60", get("/logs/%s?wait=61" % ID0), 400),
    ("logs: hex wait", get("/logs/%s?wait=0x10" % ID0), 400),
    ("status: unknown device", get("/status?device=9"), 400),
    ("status: negative device", get("/status?device=-1"), 400),
    ("status: device not a number", get("/status?device=abc"), 400),
    ("status: huge device", get("/status?device=99999999999"), 400),
    ("status: device twice", get("/status?device=0&device=0"), 400),
    ("status: empty device", get("/status?device"), 400),
    # ---- JSON syntax and encoding
    ("empty body", post_raw(b""), 400),
    ("whitespace body", post_raw(b" \r\n "), 400),
    ("body is an array", post_raw(b'["echo"]'), 400),
    ("body is a string", post_raw(b'"echo hi"'), 400),
    ("body is a number", post_raw(b"42"), 400),
    ("body is null", post_raw(b"null"), 400),
    ("trailing garbage", post_raw(b'{"cmd": "true"} x'), 400),
    ("two documents", post_raw(b'{"cmd": "true"}{"cmd": "true"}'), 400),
    ("trailing comma", post_raw(b'{"cmd": "true",}'), 400),
    ("single quotes", post_raw(b"{'cmd': 'true'}"), 400),
    ("unquoted key", post_raw(b'{cmd: "true"}'), 400),
    ("comment", post_raw(b'{"cmd": "true" /* x */}'), 400),
    ("truncated document", post_raw(b'{"cmd": "tru'), 400),
    ("NaN", post_raw(b'{"cmd": "true", "timeout": NaN}'), 400),
    ("leading zero", post_raw(b'{"cmd": "true", "timeout": 010}'), 400),
    ("invalid escape", post_raw(b'{"cmd": "echo \\x41"}'), 400),
    ("raw control character in a string", post_raw(b'{"cmd": "echo\x01"}'), 400),
    ("raw NUL in a string", post_raw(b'{"cmd": "echo \x00"}'), 400),
    ("non-UTF-8 JSON", post_raw(b'{"cmd": "echo \xff"}'), 400),
    ("overlong UTF-8", post_raw(b'{"cmd": "echo \xc0\xaf"}'), 400),
    ("UTF-8-encoded surrogate", post_raw(b'{"cmd": "echo \xed\xa0\x80"}'), 400),
    ("truncated UTF-8", post_raw(b'{"cmd": "echo \xe2\x82"}'), 400),
    ("lone surrogate", post_raw(b'{"cmd": "echo \\ud800"}'), 400),
    ("lone low surrogate", post_raw(b'{"cmd": "echo \\udc00"}'), 400),
    ("high surrogate then a letter", post_raw(b'{"cmd": "echo \\ud800\\u0041"}'), 400),
    ("deep nesting", post_raw(b'{"cmd": "true", "x": ' + b"[" * 100 + b"]" * 100 + b"}"), 400),
    ("very deep nesting", post_raw(b"[" * 100000), 400),
    ("too many values", post_raw(b'{"cmd": "true", "x": [' + b"0," * 70000 + b"0]}"), 400),
    ("duplicate key", post_raw(b'{"cmd": "true", "cmd": "false"}'), 400),
    ("duplicate key spelled with an escape", post_raw(b'{"cmd": "true", "\\u0063md": "x"}'), 400),
    ("huge number for repeat", post_raw(b'{"cmd": "true", "repeat": 1e400}'), 400),
    ("20-digit timeout", post_raw(b'{"cmd": "true", "timeout": 99999999999999999999}'), 400),
    # ---- POST /queue: every field with a wrong type or value
    ("cmd missing", queue(cmd=DROP), 400),
    ("cmd null", queue(cmd=None), 400),
    ("cmd empty", queue(cmd=""), 400),
    ("cmd only whitespace", queue(cmd=" \t\n "), 400),
    ("cmd a number", queue(cmd=5), 400),
    ("cmd an array", queue(cmd=["echo", "hi"]), 400),
    ("cmd an object", queue(cmd={"a": "b"}), 400),
    ("cmd true", queue(cmd=True), 400),
    ("cmd with NUL", queue(cmd="echo a\u0000b"), 400),
    ("cwd a number", queue(cwd=1), 400),
    ("cwd not a directory", queue(cwd="/etc/passwd"), 400),
    ("cwd missing directory", queue(cwd="/nonexistent/ttq"), 400),
    ("cwd traversal to nowhere", queue(cwd="../../../../nonexistent/x"), 400),
    ("cwd over 4096 characters", queue(cwd="/" + "a" * 4096), 400),
    ("cwd with NUL", queue(cwd="/tmp\u0000/x"), 400),
    ("device_id negative", queue(device_id=-1), 400),
    ("device_id not digits", queue(device_id="abc"), 400),
    ("device_id empty string", queue(device_id=""), 400),
    ("device_id with a sign", queue(device_id="+1"), 400),
    ("device_id fractional", queue(device_id=1.5), 400),
    ("device_id true", queue(device_id=True), 400),
    ("device_id an array", queue(device_id=[0]), 400),
    ("device_id not configured", queue(device_id="7"), 400),
    ("device_id huge", queue(device_id=99999999999999999999), 400),
    ("timeout negative", queue(timeout=-1), 400),
    ("timeout fractional", queue(timeout=1.5), 400),
    ("timeout a string", queue(timeout="10"), 400),
    ("timeout true", queue(timeout=True), 400),
    ("timeout over the maximum", queue(timeout=86401), 400),
    ("timeout with an exponent", post_raw(b'{"cmd": "true", "timeout": 1e3}'), 400),
    ("repeat 0", queue(repeat=0), 400),
    ("repeat negative", queue(repeat=-1), 400),
    ("repeat as string", queue(repeat="3"), 400),
    ("repeat an array", queue(repeat=[2]), 400),
    ("repeat over the maximum", queue(repeat=10001), 400),
    ("env an array", queue(env=["A=B"]), 400),
    ("env a string", queue(env="A=B"), 400),
    ("env value a number", queue(env={"A": 1}), 400),
    ("env value null", queue(env={"A": None}), 400),
    ("env empty name", queue(env={"": "x"}), 400),
    ("env name with =", queue(env={"A=B": "x"}), 400),
    ("env name with NUL", queue(env={"A\u0000B": "x"}), 400),
    ("env value with NUL", queue(env={"A": "x\u0000y"}), 400),
    ("env over 256 entries", queue(env={"V%d" % i: "x" for i in range(257)}), 400),
    ("env over 256 KiB", queue(env={"V%d" % i: "x" * 1100 for i in range(240)}), 400),
    ("client_id a number", queue(client_id=7), 400),
    ("client_id over 128 characters", queue(client_id="c" * 129), 400),
    ("client_id with an escape sequence", queue(client_id="a\u001b[2Jb"), 400),
    ("client_id with a newline", queue(client_id="lab\nforged log line"), 400),
    ("client_id with DEL", queue(client_id="a\u007f"), 400),
    ("client_id with a C1 control", queue(client_id="a\u009b2J"), 400),
    ("mode reset", queue(mode="reset"), 400),
    ("mode a number", queue(mode=1), 400),
    ("mode empty", queue(mode=""), 400),
    # ---- POST /kill
    ("kill body not JSON", post_raw(b"kill it", path="/kill"), 400),
    ("kill body an array", post_raw(b"[]", path="/kill"), 400),
    ("kill without a target", post_raw(b"{}", path="/kill"), 400),
    ("kill job_id a number", post_raw(b'{"job_id": 12345}', path="/kill"), 400),
    ("kill job_id an array", post_raw(b'{"job_id": ["%s"]}' % ID0.encode(), path="/kill"), 400),
    ("kill job_id traversal", post_raw(b'{"job_id": "../../etc/passwd"}', path="/kill"), 404),
    ("kill job_id unknown", post_raw(b'{"job_id": "%s"}' % ID0.encode(), path="/kill"), 404),
    ("kill job_id with NUL", post_raw(b'{"job_id": "%s\\u0000"}' % ID0[:31].encode(),
                                      path="/kill"), 404),
    ("kill device_id not digits", post_raw(b'{"device_id": "x"}', path="/kill"), 400),
    ("kill device_id negative", post_raw(b'{"device_id": -3}', path="/kill"), 400),
    ("kill device_id not configured", post_raw(b'{"device_id": 42}', path="/kill"), 400),
    # ---- POST /reset (each refused before any reset is scheduled)
    ("reset body not JSON", post_raw(b"{", path="/reset"), 400),
    ("reset body a string", post_raw(b'"all"', path="/reset"), 400),
    ("reset of unknown card",
     b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n{\"device_id\": 42}", 400),
    ("reset device_id not digits", post_raw(b'{"device_id": "zero"}', path="/reset"), 400),
    ("reset device_id fractional", post_raw(b'{"device_id": 0.5}', path="/reset"), 400),
    ("reset device_id an object", post_raw(b'{"device_id": {}}', path="/reset"), 400),
    ("reset job_id a number", post_raw(b'{"job_id": 1}', path="/reset"), 400),
    ("reset job_id false", post_raw(b'{"job_id": false}', path="/reset"), 400),
    ("reset job_id unknown", post_raw(b'{"job_id": "%s"}' % ID0.encode(), path="/reset"), 404),
    ("reset job_id traversal", post_raw(b'{"job_id": "../../../tmp"}', path="/reset"), 404),
]


def test_malformed_requests_exact_status():
    tap.ok(len(BAD) >= 60, "the table holds at least 60 bad inputs (%d)" % len(BAD))
    served = []
    for name, data, want in BAD:
        raw = raw_exchange(D.port, data, first=True)
        got = status_of(raw)
        ok = tap.ok(got == want, "%s: %d" % (name, want), "got %r" % raw[:300])
        if ok and want >= 400:
            try:
                err = json.loads(body_of(raw)).get("error")
            except ValueError:
                err = None
            tap.ok(isinstance(err, str) and err, "%s: JSON error body says why" % name,
                   body_of(raw)[:200])
        if status_of(raw_exchange(D.port, get("/status"), first=True)) != 200:
            served.append(name)
    tap.eq(served, [], "the daemon answered GET /status after every bad input")
    st = D.status()
    tap.eq(st["queued_total"], 0, "no malformed request created a job")
    tap.eq([(d["current"], d["pending"], d["recent"], d["reset_epoch"], d["state"])
            for d in st["devices"]], [(None, [], [], 0, "healthy")] * 2,
           "nothing ran, no reset was scheduled")
    tap.eq(sorted(e for e in os.listdir(D.log_dir) if len(e) == 32), [], "no job folder exists")
    tap.ok(D.alive(), "daemon still serving after the bad inputs")


def test_member_given_twice_named():
    """A body member given twice is a 400 that names it (the man page's Statuses), decoded and
    with its control characters shown as '?', not a byte offset."""
    cases = [
        (b'{"cmd": "true", "cmd": "false"}', "/queue", 'Field "cmd" is given twice'),
        (b'{"cmd": "true", "\\u0063md": "x"}', "/queue", 'Field "cmd" is given twice'),
        (b'{"cmd": "true", "env": {"A": "1", "A": "2"}}', "/queue",
         'Member "A" is given twice in field "env"'),
        (b'{"x\\u001b[2J\\n": 1, "x\\u001b[2J\\n": 2}', "/queue", 'Field "x?[2J?" is given twice'),
        (b'{"job_id": "%s", "job_id": "%s"}' % (ID0.encode(), ID0.encode()), "/kill",
         'Field "job_id" is given twice'),
    ]
    for body, path, want in cases:
        raw = raw_exchange(D.port, post_raw(body, path=path), first=True)
        try:
            err = json.loads(body_of(raw)).get("error")
        except ValueError:
            err = None
        tap.eq((status_of(raw), err), (400, want), "POST %s %s: 400 naming the member" %
               (path, body.decode()))


def test_host_forms():
    """RFC 9112 3.2: Host is uri-host [ ":" port ] (RFC 3986 3.2.2), or empty."""
    for host in (b"", b"localhost", b"127.0.0.1:%d" % D.port, b"[::1]:%d" % D.port,
                 b"[fe80::1%25eth0]", b"tt_host.lab:"):
        raw = raw_exchange(D.port, b"GET /status HTTP/1.1\r\nHost: %s\r\n\r\n" % host,
                           first=True)
        tap.eq(status_of(raw), 200, "GET /status with Host: %s is served" % host.decode())
    raw = raw_exchange(D.port, b"GET /status HTTP/1.1\r\nHost: a b\r\n\r\n", first=True)
    tap.eq(json.loads(body_of(raw)).get("error"), "invalid Host header",
           "an invalid Host is refused saying so")


def test_absolute_form_target():
    """RFC 9112 3.2.2: an absolute-form target is served as its path and query; its authority
    wins over Host, which is not compared with it."""
    def ask(target, host=b"x"):
        raw = raw_exchange(D.port, b"GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, host),
                           first=True)
        try:
            return status_of(raw), json.loads(body_of(raw))
        except ValueError:
            return status_of(raw), None

    got, st = ask(b"http://127.0.0.1:%d/status" % D.port)
    tap.ok(got == 200 and st and "devices" in st, "GET http://127.0.0.1:PORT/status is /status",
           (got, st))
    got, st = ask(b"HTTP://[::1]:%d/status?device=1" % D.port, host=b"elsewhere:1")
    tap.ok(got == 200 and st and [d["device_id"] for d in st["devices"]] == ["1"],
           "scheme in any case, IPv6 authority, the query read, another Host ignored", (got, st))
    got, st = ask(b"http://x/status?devcie=1")
    tap.ok(got == 400 and "devcie" in st.get("error", ""), "its query is checked as any", st)
    got, st = ask(b"http://x")
    tap.eq(got, 404, "an empty path is /, which is no route")
    got, st = ask(b"https://x/status")
    tap.ok(got == 400 and "http://" in st.get("error", ""), "https refused naming http://", st)


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


def test_later_http1_minor_served_as_1_1():
    """RFC 9110 2.5: a later minor version of HTTP/1 is processed as HTTP/1.1."""
    s = socket.create_connection(("127.0.0.1", D.port), timeout=5)
    s.sendall(b"GET /status HTTP/1.2\r\nHost: x\r\n\r\n")
    first = s.recv(65536)
    tap.eq(status_of(first), 200, "GET /status HTTP/1.2 is served (200, not 505)")
    s.sendall(b"GET /status HTTP/1.9\r\nHost: x\r\n\r\n")
    more = s.recv(65536)
    tap.ok(more.startswith(b"HTTP/1.1 200"), "as HTTP/1.1: the connection stays open", more[:80])
    s.close()
    raw = raw_exchange(D.port, b"GET /status HTTP/1.3\r\n\r\n")
    tap.eq(status_of(raw), 400, "and like HTTP/1.1 it needs Host")


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


def test_head_answer_closes():
    # A HEAD request is refused with a body, which a client reading a HEAD answer does not
    # expect (RFC 9110 9.3.2); the connection closes after it so nothing is read as the
    # next answer's start.
    for path in ("/status", "/nope"):
        raw = raw_exchange(D.port, b"HEAD %s HTTP/1.1\r\nHost: x\r\n\r\n"
                           b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
        head = raw.split(b"\r\n\r\n", 1)[0].lower()
        tap.ok(status_of(raw) in (404, 405) and b"connection: close" in head and
               raw.count(b"HTTP/1.1 ") == 1, "HEAD %s: refused, then the connection closes" % path,
               raw[:300])


def test_half_closed_client_gets_answer_and_close():
    """A client that half-closes after its request (nc -N, shutdown(SHUT_WR)) gets its answer
    and then the end of the connection, not a 10 s wait for the idle timeout."""
    for path in ("/status", "/nope"):
        s = socket.create_connection(("127.0.0.1", D.port), timeout=15)
        s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
        s.shutdown(socket.SHUT_WR)
        t0 = time.monotonic()
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        took = time.monotonic() - t0
        tap.ok(status_of(got) in (200, 404) and took < 5,
               "GET %s then half-close: answered and closed (%.2f s; bound 5 s, about 0 "
               "expected)" % (path, took), got[:100])
        s.close()


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


run_tests(test_malformed_requests_exact_status, test_member_given_twice_named, test_host_forms,
          test_absolute_form_target,
          test_keep_alive_and_pipelining,
          test_http10_and_connection_close, test_later_http1_minor_served_as_1_1,
          test_expect_continue,
          test_response_headers_and_trailing_slash, test_head_answer_closes,
          test_other_clients_served_while_one_stalls,
          test_idle_connection_closed, test_dribbled_request_closed,
          test_half_closed_client_gets_answer_and_close)

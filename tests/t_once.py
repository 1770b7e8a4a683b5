#!/usr/bin/env python3
"""Exactly once, told truly: a submission is never doubled, an outcome never guessed.

Prints TAP. Each check starts the real daemon (ephemeral port, temporary log dir, fake
controls) and drives the real client against it, with the faults made real: a proxy that
swallows the answer to a committed POST, a SIGSTOPped daemon, a new daemon waiting for its
previous instance's guardian lock (held here with flock). Covers: the Idempotency-Key over
HTTP (a replay answers the same job and creates nothing, across a restart too; another command
with the key is 422; GET /job?key=), the client's retries with its key and its exit 75 when
the fate stays unknown, queue-python - keeping its script while the job may exist, end_reason
and signal on every kind of end with the summary and exit status built from them (a SIGHUP
death, a cwd named "kill request"), an unreadable client cwd (exit 2, nothing queued), and the
end time of a job a crash cut short.
"""

import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ttqlib import (BINARY, Daemon, cli_env, cli_popen as popen, gate, guardian_of,  # noqa: E402
                    open_gate, pid_alive, run_tests, tap, wait_until)

HEX32 = re.compile(r"job_id=([0-9a-f]{32})")
STALL = 12  # s a daemon stays silent: past the client's 10 s wait for one answer






def jobs_with(d, cmd):
    """Every job (any status) whose command is cmd, from the database the daemon keeps."""
    import sqlite3
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(d.log_dir, "jobs.sqlite3"), uri=True)
    try:
        return [r[0] for r in db.execute("SELECT id FROM jobs WHERE cmd = ?", (cmd,))]
    finally:
        db.close()


class Proxy:
    """A TCP proxy in front of the daemon. Each POST /queue whose answer is to be swallowed
    (`swallow` of them, -1 for all) goes through to the daemon, which commits the job; its
    answer is then dropped and the client's connection closed, as when a daemon dies right
    after its commit. Everything else passes through."""

    def __init__(self, port, swallow):
        self.port_up = port
        self.swallow = swallow
        self.swallowed = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    @staticmethod
    def _message(s, buf):
        """One HTTP message (head and Content-Length body) from s after buf; (msg, rest)."""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                return None, b""
            buf += chunk
        head, rest = buf.split(b"\r\n\r\n", 1)
        n = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                n = int(v)
        while len(rest) < n:
            chunk = s.recv(65536)
            if not chunk:
                return None, b""
            rest += chunk
        return head + b"\r\n\r\n" + rest[:n], rest[n:]

    def _serve(self, c):
        up = socket.create_connection(("127.0.0.1", self.port_up))
        cbuf = ubuf = b""
        try:
            while True:
                req, cbuf = self._message(c, cbuf)
                if req is None:
                    return
                up.sendall(req)
                resp, ubuf = self._message(up, ubuf)
                if resp is None:
                    return
                if req.startswith(b"POST /queue") and (self.swallow < 0 or
                                                       self.swallowed < self.swallow):
                    self.swallowed += 1
                    return  # the job is committed; its answer never reaches the client
                c.sendall(resp)
        except OSError:
            return
        finally:
            c.close()
            up.close()

    def close(self):
        self.sock.close()


def test_idempotency_key_over_http():
    d = Daemon().start()
    hdr = {"Idempotency-Key": "ci-build-17.step-3"}
    body = {"cmd": "echo once", "device_id": "1"}
    a = d.post("/queue", body, headers=hdr)
    b = d.post("/queue", body, headers=hdr)
    tap.ok(a.status == 200 and b.status == 200 and a["job_id"] == b["job_id"],
           "a second submission with the same key answers the same job", (a, b))
    tap.ok(b.get("replayed") is True and a.get("replayed") is None
           and b["idempotency_key"] == "ci-build-17.step-3" and b["device_id"] == "1",
           "marked as a replay, with the first answer's members", (a, b))
    tap.eq(len(jobs_with(d, "echo once")), 1, "and creates nothing: one job")
    n = d.post("/queue", {"cmd": "true"})
    tap.ok(n.status == 200 and "idempotency_key" not in n.json,
           "an answer without a key has no idempotency_key member", n)
    d.wait_done(a["job_id"])
    c = d.post("/queue", body, headers={"Idempotency-Key": '"ci-build-17.step-3"'})
    tap.ok(c.status == 200 and c["job_id"] == a["job_id"] and c["status"] == "done",
           "a replay of a finished job answers it, done (the quoted form is the same key)", c)
    e = d.post("/queue", {"cmd": "echo another", "device_id": "1"}, headers=hdr)
    tap.ok(e.status == 422 and a["job_id"] in e["error"] and "command" in e["error"],
           "the key with another command: 422 naming the job it belongs to", e)
    tap.eq(len(jobs_with(d, "echo another")), 0, "and nothing queued")
    r = d.get("/job?key=ci-build-17.step-3")
    tap.ok(r.status == 200 and r["job_id"] == a["job_id"] and
           r["idempotency_key"] == "ci-build-17.step-3", "GET /job?key= finds the job", r)
    r = d.get("/job?key=never-used")
    tap.ok(r.status == 404 and "never-used" in r["error"], "an unknown key: 404 naming it", r)
    for bad in ("a b", "x" * 129, "", "caf\u00e9".encode().decode("latin-1")):
        r = d.post("/queue", {"cmd": "echo bad"}, headers={"Idempotency-Key": bad})
        tap.ok(r.status == 400 and "Idempotency-Key" in r["error"],
               "an invalid key %r is refused with 400" % bad[:12], r)
    tap.eq(len(jobs_with(d, "echo bad")), 0, "and queues nothing")
    n1 = d.submit("echo keyless")["job_id"]
    n2 = d.submit("echo keyless")["job_id"]
    tap.ok(n1 != n2, "without a key two submissions are two jobs, as before")
    # dead card: a replay still answers the job it has, a new key is refused
    d.kill9()
    d.start()
    f = d.post("/queue", body, headers=hdr)
    tap.ok(f.status == 200 and f["job_id"] == a["job_id"] and f.get("replayed"),
           "after kill -9 and a restart the key still answers its job", f)
    tap.eq(len(jobs_with(d, "echo once")), 1, "still one job")
    d.cleanup()


def test_proxy_swallows_the_answer():
    d = Daemon().start()
    p = Proxy(d.port, swallow=1)
    env = {"TT_DEVICE_URL": "http://127.0.0.1:%d" % p.port}
    rc, out, err = d.cli("queue", "--device", "1", "--", "echo swallowed", env=env)
    m = HEX32.search(out)
    tap.ok(rc == 0 and m is not None, "queue: the lost answer is asked again; exit 0 with "
           "the job id", (rc, out, err))
    tap.eq(jobs_with(d, "echo swallowed"), [m.group(1)] if m else None,
           "one job, the one reported")
    tap.ok("sending it again with its idempotency key cli-" in err,
           "the client says it sends the submission again with its key", err)
    p.swallowed = 0
    rc, out, err = d.cli("run", "--device", "all", "--", "echo via-all", env=env)
    tap.ok(rc == 0 and "via-all" in out, "run --device all (GET /status first): exit 0 with "
           "the output", (rc, out, err))
    tap.eq(len(jobs_with(d, "echo via-all")), 1, "one job, not two")
    p.close()
    p = Proxy(d.port, swallow=-1)
    env = {"TT_DEVICE_URL": "http://127.0.0.1:%d" % p.port, "TT_DEVICE_RECONNECT_SEC": "2"}
    rc, out, err = d.cli("queue", "--device", "1", "--", "echo unknown-fate", env=env)
    m = re.search(r"idempotency key is (cli-[0-9a-f]{32})", err)
    tap.ok(rc == 75 and m is not None and "job --key" in err and "unknown" in err,
           "no answer within TT_DEVICE_RECONNECT_SEC: exit 75, the fate unknown, the key told",
           (rc, err))
    tap.ok("failed" not in err.lower(), "never called failed", err)
    ids = jobs_with(d, "echo unknown-fate")
    tap.eq(len(ids), 1, "each resend with the key reached the daemon: still one job")
    if m:
        rc, out, err = d.cli("job", "--key", m.group(1))
        tap.ok(rc == 0 and ids and ids[0] in out, "`job --key KEY` shows that job", (rc, out))
    rc, out, err = d.cli("job", "--key", "cli-00000000000000000000000000000000")
    tap.ok(rc == 1 and "No job was submitted" in err, "`job --key` of a key never used: exit 1",
           (rc, err))
    p.close()
    d.cleanup()


def test_user_key():
    d = Daemon().start()
    rc1, out1, _ = d.cli("queue", "--key", "nightly-42", "--", "echo mine")
    rc2, out2, _ = d.cli("queue", "--key", "nightly-42", "--", "echo mine")
    tap.ok(rc1 == 0 and rc2 == 0 and HEX32.search(out1).group(1) == HEX32.search(out2).group(1),
           "queue --key K twice: the same job both times", (out1, out2))
    tap.eq(len(jobs_with(d, "echo mine")), 1, "one job")
    rc, _, err = d.cli("queue", "--key", "no spaces", "--", "true")
    tap.ok(rc == 2 and "--key" in err, "an invalid --key is a usage error", (rc, err))
    d.cleanup()


def three_submissions(d, tag):
    """queue, run and queue-python - at once; (procs, commands as stored)."""
    procs = [popen(d, "queue", "--", "echo %s-queue" % tag),
             popen(d, "run", "--", "echo %s-run" % tag),
             popen(d, "queue-python", "-", stdin=subprocess.PIPE)]
    procs[2].stdin.write(b"print('%s-python')\n" % tag.encode())
    procs[2].stdin.close()
    procs[2].stdin = None
    return procs


def check_three(d, procs, tag, what):
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        outs.append((p.returncode, out.decode(),
                     (getattr(p, "stderr_early", b"") + err).decode()))
    rc, out, err = outs[0]
    tap.ok(rc == 0 and HEX32.search(out), "%s: queue waits and reports its job" % what, outs[0])
    tap.eq(len(jobs_with(d, "echo %s-queue" % tag)), 1, "%s: queue made one job" % what)
    rc, out, err = outs[1]
    tap.ok(rc == 0 and "%s-run" % tag in out, "%s: run waits and streams its job" % what,
           outs[1])
    tap.eq(len(jobs_with(d, "echo %s-run" % tag)), 1, "%s: run made one job" % what)
    rc, out, err = outs[2]
    m = re.search(r"script_file=(\S+)", out)
    tap.ok(rc == 0 and m is not None, "%s: queue-python - reports its job" % what, outs[2])
    if m:
        job = HEX32.search(out).group(1)
        done = d.wait_done(job)
        tap.ok(done["exit_code"] == 0 and "%s-python" % tag in d.log_text(job),
               "%s: its stored script was kept and ran" % what, (done, d.log_text(job)))
        tap.eq(len(jobs_with(d, done["cmd"])), 1, "%s: queue-python made one job" % what)


def stderr_has(p, want, timeout):
    """Read p's stderr (a pipe) until want appears; the text read (kept for later)."""
    buf = b""
    deadline = time.monotonic() + timeout
    os.set_blocking(p.stderr.fileno(), False)
    while want.encode() not in buf and time.monotonic() < deadline:
        try:
            chunk = p.stderr.read()
        except BlockingIOError:
            chunk = None
        if chunk:
            buf += chunk
        else:
            time.sleep(0.05)
    os.set_blocking(p.stderr.fileno(), True)
    p.stderr_early = buf
    return want.encode() in buf


def test_stalled_daemon():
    d = Daemon().start()
    d.proc.send_signal(signal.SIGSTOP)
    try:
        procs = three_submissions(d, "stall")
        tap.ok(stderr_has(procs[0], "sending it again", STALL + 10),
               "the client sends the unanswered submission again (its first wait passed)")
        time.sleep(max(0, STALL - 10))
    finally:
        d.proc.send_signal(signal.SIGCONT)
    check_three(d, procs, "stall", "a SIGSTOPped daemon")
    d.cleanup()


def test_guardian_lock_wait():
    d = Daemon().start()
    d.kill9()
    lock = os.open(d.log_dir, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock, fcntl.LOCK_SH)  # the previous instance's guardian, still busy
    try:
        d.start(wait=False)

        def listening():
            try:
                socket.create_connection(("127.0.0.1", d.port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_until(listening, 10, "the new serve to listen")
        procs = three_submissions(d, "lock")
        tap.ok(stderr_has(procs[0], "sending it again", STALL + 10),
               "during the guardian wait the client sends its submission again")
    finally:
        os.close(lock)
    check_three(d, procs, "lock", "a guardian-lock wait")
    d.cleanup()


def test_structured_end():
    d = Daemon().start()
    rc, out, err = d.cli("run", "--device", "1", "--", "kill -HUP $$")
    tap.eq(rc, 129, "a job killed by SIGHUP: exit status 129 (128+1)")
    tap.ok("killed by signal 1 (SIGHUP)" in err and "exit -1" not in err
           and "no exit code" not in err, "its summary says SIGHUP, not 'exit -1'", err)
    job = d.get("/job?key=x")  # noqa: F841 - a key lookup is not a job id lookup
    rec = d.job(d.status()["devices"][1]["recent"][-1]["job_id"])
    tap.ok(rec["end_reason"] == "signal" and rec["signal"] == 1 and rec["exit_code"] == -1,
           "its record: end_reason signal, signal 1, exit_code -1 as before", rec)

    here = d.path("kill request")
    os.mkdir(here)
    path, wait = gate(d, "blocker")
    blocker = d.submit(wait, device_id="1")["job_id"]
    p = subprocess.Popen([BINARY, "run", "--device", "1", "--", "true"], cwd=here,
                         env=cli_env(d), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_until(lambda: len(d.dev(1)["pending"]) == 1, 10, "the job to queue")
    os.rmdir(here)
    open_gate(path)
    out, err = p.communicate(timeout=30)
    err = err.decode()
    tap.eq(p.returncode, 127, "a job whose cwd vanished before it started exits 127")
    tap.ok("Cannot start the job" in err and "cancelled" not in err
           and "stopped by a kill request" not in err,
           "its summary says it could not start, whatever words its cwd holds", err)
    d.wait_done(blocker)

    path, wait = gate(d, "blocker2")
    blocker = d.submit(wait, device_id="1")["job_id"]
    queued = d.submit("true", device_id="1")["job_id"]
    d.post("/kill", {"job_id": queued})
    rec = d.job(queued)
    tap.ok(rec["end_reason"] == "cancelled" and rec["signal"] is None,
           "a cancelled job: end_reason cancelled", rec)
    rc, out, err = d.cli("result", queued)
    tap.ok(rc == 129 and "cancelled before it started" in err, "result tells it", (rc, err))
    running = d.submit("sleep 30", device_id="0", timeout=1)["job_id"]
    rec = d.wait_done(running)
    tap.ok(rec["end_reason"] == "timeout" and rec["signal"] == 2 and rec["timed_out"] and
           rec["exit_code"] == -9,
           "a timed-out job: end_reason timeout, exit_code -9, signal 2 (SIGINT ended it)", rec)
    open_gate(path)
    rec = d.wait_done(blocker)
    tap.ok(rec["end_reason"] == "exited" and rec["signal"] is None and rec["exit_code"] == 0,
           "a job that exits: end_reason exited", rec)
    killed = d.submit("sleep 30", device_id="0")["job_id"]
    wait_until(lambda: d.job(killed)["status"] == "running", 10, "it to run")
    d.post("/kill", {"job_id": killed})
    rec = d.wait_done(killed)
    tap.ok(rec["end_reason"] == "killed" and rec["signal"] == -rec["exit_code"] > 0,
           "a killed job: end_reason killed, with the signal that ended it", rec)
    d.cleanup()


def test_unreadable_cwd():
    d = Daemon().start()
    gone = d.path("gone")
    os.mkdir(gone)
    p = subprocess.Popen(["/bin/sh", "-c", 'cd "$1" && rmdir "$1" && exec "$2" run -- "echo x"',
                          "sh", gone, BINARY], env=cli_env(d), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=30)
    tap.ok(p.returncode == 2 and "current directory" in err.decode(),
           "run from a deleted directory: exit 2 naming the problem", (p.returncode, err))
    tap.eq(d.status()["queued_total"] + len(d.dev(0)["recent"]), 0, "and nothing was queued")
    d.cleanup()


def test_crash_end_time():
    d = Daemon().start()
    silent = d.submit("sleep 60")["job_id"]
    wait_until(lambda: d.job(silent)["status"] == "running", 10, "it to run")
    time.sleep(1.5)  # the span the record must show: the job ran this long, silently
    d.kill9()
    d.start()
    rec = d.job(silent)
    tap.ok(rec["end_reason"] == "crash" and rec["elapsed"] is not None
           and rec["elapsed"] >= 1.4, "a silent job a crash cut short: its elapsed time is "
           "when the daemon died, not 0 s", rec)
    unseen = d.submit("sleep 60")["job_id"]
    wait_until(lambda: d.job(unseen)["status"] == "running", 10, "it to run")
    guardian = wait_until(lambda: guardian_of(d.proc.pid), 10, "the guardian")
    os.kill(guardian, signal.SIGKILL)
    wait_until(lambda: not pid_alive(guardian), 5, "the guardian to be gone")
    time.sleep(1.0)  # the job runs on, unseen: nothing records it
    d.kill9()
    d.start()
    rec = d.job(unseen)
    tap.ok(rec["end_reason"] == "crash" and rec["elapsed"] is None,
           "no sign of life after its start (the guardian died first): elapsed is null", rec)
    rc, out, err = d.cli("result", unseen)
    tap.ok("after an unknown time" in err and " 0.00s" not in err,
           "and the summary says the time is unknown", err)
    d.cleanup()


def test_55_waiting_runs():
    """A held card, 55 waiting `run`s and a cap of 50 connections: status, queue and release
    are answered promptly; the runs beyond the hold limit pause and ask again, never fail."""
    d = Daemon().start(env={"TT_DEVICE_MAX_CONNECTIONS": "50"})
    rc, _, err = d.cli("hold", "--device", "0", "--reason", "55 waiters")
    tap.eq(rc, 0, "card 0 held")
    ledger = d.path("ledger")
    runs = [popen(d, "run", "--device", "0", "--", "echo %d >> %s; echo out-%d" % (k, ledger, k))
            for k in range(55)]
    wait_until(lambda: d.status()["queued_total"] == 55, 30, "55 jobs to queue")
    for args in (("status",), ("queue", "--device", "1", "--", "true"),
                 ("release", "--device", "0")):
        t0 = time.monotonic()
        rc, out, err = d.cli(*args, timeout=30)
        took = time.monotonic() - t0
        tap.ok(rc == 0 and took < 5, "%s answered (exit %d) in %.2f s with 55 runs waiting"
               % (args[0], rc, took), err)
    bad = []
    for k, p in enumerate(runs):
        out, err = p.communicate(timeout=120)
        if p.returncode != 0 or ("out-%d" % k) not in out.decode():
            bad.append((k, p.returncode, err.decode()[-300:]))
    tap.eq(bad, [], "every run got its job's output and exit 0 (none gave up)")
    with open(ledger) as f:
        tap.eq(sorted(int(x) for x in f.read().split()), list(range(55)),
               "each of the 55 jobs ran exactly once")
    d.cleanup()


if __name__ == "__main__":
    run_tests(test_idempotency_key_over_http, test_proxy_swallows_the_answer, test_user_key,
              test_structured_end, test_unreadable_cwd, test_crash_end_time,
              test_55_waiting_runs, test_stalled_daemon, test_guardian_lock_wait)

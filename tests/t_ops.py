#!/usr/bin/env python3
"""Operating the daemon on a lab host: systemd readiness and watchdog datagrams, /metrics,
the static copy-deploy binary, the embedded health check, journal lines, and recovering a
dead card through a new boot (the man page's dead-card rules)."""

import contextlib
import math
import os
import re
import shutil
import signal
import socket
import sqlite3
import stat
import struct
import subprocess
import sys
import tempfile
import time

import ttqlib
from ttqlib import ROOT, Daemon, ctxt_switches, free_port, gate, q, run_tests, tap, wait_until


# ---------------------------------------------------------------- sd_notify

class NotifySocket:
    """A unix datagram socket the test owns, standing in for systemd's notify socket."""

    def __init__(self, d, abstract=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "ttq-test-notify-%d-%s" % (os.getpid(), os.path.basename(d.tmp))
            self.sock.bind("\0" + name)
            self.env = "@" + name
        else:
            self.env = d.path("notify.sock")
            self.sock.bind(self.env)

    def recv(self, timeout):
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(4096).decode()
        except socket.timeout:
            return None

    def until(self, prefix, timeout=10):
        """Skip datagrams (a previous daemon's STOPPING=1, pings) until one starts with prefix."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            m = self.recv(max(0.01, end - time.monotonic()))
            if m is not None and m.startswith(prefix):
                return m
        return None

    def collect(self, seconds):
        out, end = [], time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return out
            m = self.recv(left)
            if m is not None:
                out.append(m)

    def close(self):
        self.sock.close()




def test_notify_ready_after_recovery_watchdog_stopping():
    d = Daemon().start()
    ready = d.path("ready")
    g, wait = gate(d, "g")
    running = d.submit("touch %s; %s" % (q(ready), wait))
    wait_until(lambda: os.path.exists(ready), 10, "blocker running")
    queued = d.submit("env")
    d.kill9()
    n = NotifySocket(d)
    try:
        d.start(env={"NOTIFY_SOCKET": n.env, "WATCHDOG_USEC": "100000"}, wait=False)
        msg = n.recv(10)
        tap.ok(msg is not None and msg.split("\n")[0] == "READY=1" and "STATUS=serving 2 cards"
               in msg, "READY=1 (with STATUS=) arrives on the test's socket", msg)
        s = socket.create_connection(("127.0.0.1", d.port), timeout=2)
        s.close()
        tap.ok(True, "when READY=1 arrives the port already accepts connections")
        tap.eq((d.job(running["job_id"])["exit_code"], d.status()["queued_total"]), (-1, 0),
               "... and recovery is done: the interrupted job failed, the queued one is back "
               "(and already started)")
        pings = n.collect(0.6)
        tap.ok(len(pings) >= 6 and set(pings) == {"WATCHDOG=1"},
               "WATCHDOG=1 every WATCHDOG_USEC/2 (0.05 s)", pings)
        out = d.log_text(d.wait_done(queued["job_id"])["job_id"])
        tap.ok("NOTIFY_SOCKET" not in out and "WATCHDOG_" not in out and "PATH=" in out,
               "jobs do not inherit NOTIFY_SOCKET or WATCHDOG_*", out)
        d.proc.send_signal(signal.SIGTERM)
        msg = n.until("STOPPING=1", 5)
        tap.ok(msg and msg.startswith("STOPPING=1\n"), "STOPPING=1 on SIGTERM", msg)
        tap.eq(d.stop(), 0, "and the daemon exits 0")
    finally:
        n.close()


def test_notify_ready_when_the_store_cannot_be_opened_yet():
    """Another process holds the database's write lock past the start-up busy timeout. The
    daemon must still report READY=1 (else systemd would count a failed start and restart
    it), say in STATUS= that it runs without its store, and update STATUS= once it opens."""
    d = Daemon().start()
    earlier = d.submit("true")["job_id"]
    d.wait_done(earlier)
    d.stop()
    n = NotifySocket(d)
    con = sqlite3.connect(os.path.join(d.log_dir, "jobs.sqlite3"), isolation_level=None,
                          timeout=0)
    try:
        con.execute("BEGIN EXCLUSIVE")
        d.start(env={"NOTIFY_SOCKET": n.env}, wait=False)
        msg = n.until("READY=1", 15)
        tap.ok(msg is not None and "without the job store" in msg,
               "store locked at start: READY=1 all the same, STATUS= says it is degraded", msg)
        reason = d.status()["worker"]["degraded_reason"]
        tap.ok(reason is not None and "locked" in reason, "/status says why", reason)
        con.execute("ROLLBACK")
        msg = n.until("STATUS=", 10)
        tap.ok(msg is not None and "serving 2 cards" in msg, "STATUS= once the store opens", msg)
        tap.eq(d.job(earlier)["exit_code"], 0, "and the stored jobs are there again")
        tap.eq(d.stop(), 0, "the daemon exits 0")
    finally:
        con.close()
        n.close()


def test_notify_abstract_socket_no_watchdog_idle():
    d = Daemon()
    n = NotifySocket(d, abstract=True)
    try:
        d.start(env={"NOTIFY_SOCKET": n.env}, wait=False)
        msg = n.recv(10)
        tap.ok(msg and msg.startswith("READY=1\n"), "abstract '@' NOTIFY_SOCKET gets READY=1", msg)
        wait_until(lambda: d.get("/status").status == 200, 5, "status")
        before = ctxt_switches(d.proc.pid)
        extra = n.collect(1.0)
        woke = ctxt_switches(d.proc.pid) - before
        tap.eq(extra, [], "no WATCHDOG_USEC: nothing more is sent")
        tap.ok(woke <= 2, "idle without a watchdog: the loop does not wake up (%d wake-ups "
               "in 1 s)" % woke)
        d.stop()
        d.start(env={"NOTIFY_SOCKET": n.env, "WATCHDOG_USEC": "100000", "WATCHDOG_PID": "1"},
                wait=False)
        tap.ok(n.until("READY=1") is not None, "READY=1 again after a restart")
        tap.eq(n.collect(0.5), [], "WATCHDOG_PID names another process: no pings")
        d.stop()
        d.start(env={"NOTIFY_SOCKET": n.env, "WATCHDOG_USEC": "200000"}, wait=False)
        n.until("READY=1")
        before = ctxt_switches(d.proc.pid)
        pings = n.collect(1.0)
        tap.ok(4 <= len(pings) <= 12 and ctxt_switches(d.proc.pid) - before >= 4,
               "WATCHDOG_USEC=0.2 s: about 10 pings a second and just as many wake-ups",
               pings)
    finally:
        n.close()


# ---------------------------------------------------------------- /metrics

METRIC_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE = re.compile(r"^(%s)(?:\{(.*)\})? ([^ ]+)(?: (-?\d+))?$" % METRIC_NAME)
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"\s*(?:,|$)')


def parse_prometheus(text):
    """Parse text exposition 0.0.4 strictly; returns {(name, ((label, value), ...)): float}.

    Raises AssertionError on anything a Prometheus server would reject or that breaks the
    format's rules: bad names or label syntax, non-float values, a TYPE after its samples or
    twice, a family's samples split into several groups, duplicate series."""
    assert text.endswith("\n"), "the exposition must end with a newline"
    types, samples, done_families, current = {}, {}, set(), None
    for i, line in enumerate(text.split("\n")[:-1], 1):
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                assert re.fullmatch(METRIC_NAME, name), "line %d: bad name %r" % (i, name)
                if parts[1] == "TYPE":
                    assert name not in types, "line %d: second TYPE for %s" % (i, name)
                    assert not any(k[0] == name for k in samples), \
                        "line %d: TYPE after samples of %s" % (i, name)
                    assert parts[3] in ("counter", "gauge", "histogram", "summary", "untyped"), \
                        "line %d: type %r" % (i, parts[3])
                    types[name] = parts[3]
            continue
        m = SAMPLE.match(line)
        assert m, "line %d is not a sample: %r" % (i, line)
        name, labels_text, value = m.group(1), m.group(2), m.group(3)
        labels, pos = [], 0
        while labels_text and pos < len(labels_text):
            lm = LABEL.match(labels_text, pos)
            assert lm and lm.end() > pos, "line %d: bad labels %r" % (i, labels_text)
            labels.append((lm.group(1), lm.group(2)))
            pos = lm.end()
        v = float(value)  # raises on anything but a Go-parsable float (+Inf, NaN included)
        if name != current:
            assert name not in done_families, "line %d: %s split into groups" % (i, name)
            if current:
                done_families.add(current)
            current = name
        key = (name, tuple(sorted(labels)))
        assert key not in samples, "line %d: duplicate series %r" % (i, key)
        samples[key] = v
    for (name, _), v in samples.items():
        if types.get(name) == "counter":
            assert name.endswith("_total") and v >= 0 and not math.isnan(v), name
    return samples, types


def scrape(d):
    r = d.get("/metrics")
    assert r.status == 200, r
    samples, types = parse_prometheus(r.body.decode("utf-8"))
    return r, samples, types


def val(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def test_metrics_parse_and_move_with_jobs():
    d = Daemon(env={"TT_DEVICE_RESET_RETRIES": "0"})
    fail = d.script("reset-fails-on-1.sh", '[ "$1" = 1 ] && { echo "card $1 stuck"; exit 1; }\n'
                                         'echo "reset $1"')
    d.start(env={"TT_DEVICE_RESET_CMD": fail + " {device}"})
    r, m0, types = scrape(d)
    tap.ok(r.headers["content-type"].startswith("text/plain; version=0.0.4"),
           "Content-Type text/plain; version=0.0.4", r.headers)
    tap.eq({k: types.get(k) for k in ("ttq_queue_depth", "ttq_card_state",
                                      "ttq_running_job_age_seconds", "ttq_jobs_finished_total",
                                      "ttq_resets_total", "ttq_store_degraded",
                                      "ttq_uptime_seconds")},
           {"ttq_queue_depth": "gauge", "ttq_card_state": "gauge",
            "ttq_running_job_age_seconds": "gauge", "ttq_jobs_finished_total": "counter",
            "ttq_resets_total": "counter", "ttq_store_degraded": "gauge",
            "ttq_uptime_seconds": "gauge"}, "every family the spec names, typed")
    tap.ok(all(v == 0 for (n, _), v in m0.items()
               if n.endswith("_total") or n in ("ttq_queue_depth", "ttq_store_degraded")),
           "a fresh daemon: all counters, depths and the degraded flag are 0")
    tap.eq((val(m0, "ttq_card_state", device="0", state="healthy"),
            val(m0, "ttq_card_state", device="1", state="dead")), (1.0, 0.0), "card states")

    slow = d.submit("sleep 10", device_id="1", timeout=1)
    d.wait_done(d.submit("true")["job_id"])
    d.wait_done(d.submit("exit 3")["job_id"])
    ready = d.path("ready")
    g, wait = gate(d, "g")
    d.submit("touch %s; %s" % (q(ready), wait))
    wait_until(lambda: os.path.exists(ready), 10, "blocker running")
    doomed = d.submit("true")
    d.submit("true")
    time.sleep(0.3)
    _, m1, _ = scrape(d)
    tap.eq(val(m1, "ttq_queue_depth", device="0"), 2.0, "queue depth of card 0 while blocked")
    tap.ok(val(m1, "ttq_running_job_age_seconds", device="0") >= 0.25,
           "running job age of card 0 grows", val(m1, "ttq_running_job_age_seconds", device="0"))
    tap.ok(val(m1, "ttq_uptime_seconds") > val(m0, "ttq_uptime_seconds"), "uptime grows")
    d.post("/kill", {"job_id": doomed["job_id"]})
    open(g, "a").close()
    d.wait_done(slow["job_id"])
    wait_until(lambda: d.status()["queued_total"] == 0 and d.dev(0)["current"] is None, 10,
               "card 0 idle")
    d.post("/reset", {"device_id": "0"})
    d.post("/reset", {"device_id": "1"})
    wait_until(lambda: d.dev(0)["reset_epoch"] == 1 and d.dev(1)["state"] == "dead", 10,
               "card 0 reset, card 1 dead")
    _, m2, _ = scrape(d)
    got = {(dev, o): val(m2, "ttq_jobs_finished_total", device=dev, outcome=o)
           for dev in "01" for o in ("ok", "failed", "timeout", "cancelled")}
    tap.eq(got, {("0", "ok"): 3, ("0", "failed"): 1, ("0", "timeout"): 0, ("0", "cancelled"): 1,
                 ("1", "ok"): 0, ("1", "failed"): 0, ("1", "timeout"): 1, ("1", "cancelled"): 0},
           "jobs finished by outcome, per card (resets are not jobs here)")
    tap.eq([val(m2, "ttq_resets_total", device=dv, outcome=o)
            for dv, o in (("0", "ok"), ("0", "failed"), ("1", "ok"), ("1", "failed"))],
           [1, 0, 0, 1], "resets by outcome, per card")
    tap.eq((val(m2, "ttq_card_state", device="1", state="dead"),
            val(m2, "ttq_card_state", device="1", state="healthy"),
            val(m2, "ttq_queue_depth", device="0"),
            val(m2, "ttq_running_job_age_seconds", device="0")), (1.0, 0.0, 0.0, 0.0),
           "card 1 dead; card 0 idle again")


# ---------------------------------------------------------------- lifecycle log lines

def test_lifecycle_log_lines_and_dead_card_recovery():
    d = Daemon(env={"TT_DEVICE_RESET_RETRIES": "0"})
    fail = d.script("reset-fails-on-1.sh", '[ "$1" = 1 ] && exit 1; echo "reset $1"')
    d.start(env={"TT_DEVICE_RESET_CMD": fail + " {device}"})
    job = d.submit("exit 4", client_id="lab-ci")
    d.wait_done(job["job_id"])
    d.post("/reset", {"device_id": "0"})
    d.post("/reset", {"device_id": "1"})
    wait_until(lambda: d.dev(0)["reset_epoch"] == 1 and d.dev(1)["state"] == "dead", 10,
               "resets done")
    log = d.stderr()
    jid = job["job_id"]
    want = [
        r"recovered 0 queued jobs; 0 interrupted jobs failed; 0 jobs of unavailable cards",
        r"serving 2 cards on 127\.0\.0\.1:%d" % d.port,
        r"job %s queued on card 0 by lab-ci$" % jid,
        r"job %s started on card 0$" % jid,
        r"job %s on card 0 finished: exit 4 in \d+\.\d\ds$" % jid,
        r"reset of card 0 started$",
        r"reset of card 0 succeeded: healthy, reset epoch 1$",
        r"reset of card 1 started$",
        r"reset of card 1 failed; the card is dead: Reset and health verification failed",
    ]
    missing = [w for w in want if not re.search(r"^tt-device-queue[^\n]*: " + w, log, re.M)]
    tap.ok(missing == [], "one journal line per lifecycle event", "missing: %r\n%s" % (missing, log))
    lines = log.splitlines()
    order = [next((i for i, ln in enumerate(lines) if re.search(w, ln)), -1) for w in want]
    chains = (order[0:7], order[7:9])  # start-up, the job, card 0's reset; card 1's reset
    tap.ok(all(c == sorted(c) for c in chains), "in the order they happened", log)

    # The same boot keeps it dead; a row written in another boot (as after a reboot) does not.
    d.restart()
    tap.eq(d.dev(1)["state"], "dead", "a restart in the same boot keeps card 1 dead")
    d.stop()
    db = sqlite3.connect(os.path.join(d.log_dir, "jobs.sqlite3"))
    db.execute("UPDATE cards SET boot_id = 'operator-recovered' WHERE device = 1")
    db.commit()
    db.close()
    d.start()
    dev = d.dev(1)
    tap.eq((dev["state"], dev["reset_epoch"], dev["dead_reason"]), ("healthy", 1, None),
           "a card dead in another boot starts healthy, epoch raised")
    tap.ok("card 1 was dead in an earlier boot; healthy again" in d.stderr(),
           "and the journal says so")
    tap.eq(d.wait_done(d.submit("true", device_id="1")["job_id"])["exit_code"], 0,
           "card 1 runs jobs again")


# ---------------------------------------------------------------- copy-deploy

@contextlib.contextmanager
def daemon_binary(path):
    """Start Daemons from another executable (ttqlib reads BINARY at start)."""
    old = ttqlib.BINARY
    ttqlib.BINARY = path
    try:
        yield
    finally:
        ttqlib.BINARY = old


FAKE_UMD = r'''
import enum, os
TelemetryTag = enum.IntEnum("TelemetryTag", {"AICLK": 14})
class _Reader:
    def __init__(self, n): self.n = n
    def read_entry(self, tag): return int(os.environ.get("FAKE_AICLK_%d" % self.n, "1000"))
class TTDevice:
    def __init__(self, n): self.n = n
    @staticmethod
    def create(n): return TTDevice(n)
    def init_tt_device(self): pass
    def get_arc_telemetry_reader(self): return _Reader(self.n)
'''


def test_embedded_health_check_end_to_end():
    d = Daemon(env={"TT_DEVICE_RESET_RETRIES": "0"})
    del d.env["TT_DEVICE_HEALTH_CHECK_CMD"]  # the default: ~/tenstorrent/.venv/bin/python3 ...
    bindir, home, fake = d.path("bin"), d.path("home"), d.path("fake", "tt_umd")
    venv = os.path.join(home, "tenstorrent", ".venv", "bin")
    for p in (bindir, venv, fake):
        os.makedirs(p)
    exe = os.path.join(bindir, "tt-device-queue")
    shutil.copy2(ttqlib.BINARY, exe)
    with open(os.path.join(venv, "python3"), "w") as f:
        f.write("#!/bin/sh\nexec %s \"$@\"\n" % q(sys.executable))
    os.chmod(os.path.join(venv, "python3"), 0o755)
    with open(os.path.join(fake, "__init__.py"), "w") as f:
        f.write(FAKE_UMD)
    env = {"HOME": home, "PYTHONPATH": d.path("fake"), "FAKE_AICLK_1": "0"}
    with daemon_binary(exe):
        d.start(env=env)
    copy = os.path.join(d.log_dir, "health_check.py")
    with open(copy, "rb") as a, open(os.path.join(ROOT, "health_check.py"), "rb") as b:
        tap.ok(a.read() == b.read(), "no health_check.py beside the copied binary: the built-in "
               "copy is written to the log dir, byte for byte")
    tap.eq(stat.S_IMODE(os.stat(copy).st_mode), 0o600, "... private (0600)")
    d.post("/reset", {"device_id": "0"})
    d.post("/reset", {"device_id": "1"})
    wait_until(lambda: d.dev(0)["reset_epoch"] == 1 and d.dev(1)["state"] == "dead", 15,
               "card 0 healthy, card 1 dead")
    logs = {}
    for dev in (0, 1):
        rid = [j for j in d.dev(dev)["recent"] if j["mode"] == "reset"][-1]["job_id"]
        logs[dev] = d.log_text(rid)
    tap.ok(copy in logs[0] and "card 0: AICLK 1000 MHz: healthy" in logs[0],
           "the default health check runs the embedded copy through tt_umd", logs[0])
    tap.ok("card 1: AICLK 0x0 (0): clock is zero: unhealthy" in logs[1],
           "and its verdict counts: card 1 reads 0 MHz and is dead", logs[1])
    # A health_check.py beside the executable wins over the built-in copy.
    with open(os.path.join(ROOT, "health_check.py")) as f:
        src = f.read()
    with open(os.path.join(bindir, "health_check.py"), "w") as f:
        f.write(src.replace("def main(argv):", "def main(argv):\n    print('BESIDE')", 1))
    d.stop()
    with daemon_binary(exe):
        d.start(env=env)
    d.post("/reset", {"device_id": "0"})
    wait_until(lambda: d.dev(0)["reset_epoch"] == 2, 10, "second reset of card 0")
    rid = [j for j in d.dev(0)["recent"] if j["mode"] == "reset"][-1]["job_id"]
    text = d.log_text(rid)
    tap.ok("BESIDE" in text and os.path.join(bindir, "health_check.py") in text,
           "health_check.py beside the executable is used when present", text)


def test_no_health_script_written_for_a_custom_health_command():
    d = Daemon()  # TT_DEVICE_HEALTH_CHECK_CMD is the test's own script
    os.makedirs(d.path("bin"))
    exe = os.path.join(d.path("bin"), "tt-device-queue")
    shutil.copy2(ttqlib.BINARY, exe)
    with daemon_binary(exe):
        d.start()
    d.post("/reset", {"device_id": "0"})
    wait_until(lambda: d.dev(0)["reset_epoch"] == 1, 10, "the reset of card 0")
    tap.ok(not os.path.exists(os.path.join(d.log_dir, "health_check.py")),
           "with TT_DEVICE_HEALTH_CHECK_CMD set, no unused health_check.py is written")


def elf_program_headers(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"\x7fELF" and data[4] == 2, "not a 64-bit ELF"
    end = "<" if data[5] == 1 else ">"
    phoff, = struct.unpack_from(end + "Q", data, 0x20)
    phentsize, phnum = struct.unpack_from(end + "HH", data, 0x36)
    return [struct.unpack_from(end + "I", data, phoff + i * phentsize)[0] for i in range(phnum)]


def test_static_binary_from_empty_dir_clean_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    p = subprocess.run(["make", "-s", "static"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    if not tap.ok(p.returncode == 0 and "warning" not in p.stderr.lower(),
                  "make static builds without warnings", p.stdout + p.stderr):
        return
    tmp = tempfile.mkdtemp(prefix="ttq-static-")
    proc = None
    try:
        exe = os.path.join(tmp, "tt-device-queue")
        shutil.copy2(os.path.join(ROOT, "tt-device-queue-static"), exe)
        types = elf_program_headers(exe)
        tap.ok(3 not in types and 2 not in types,
               "no PT_INTERP, no PT_DYNAMIC: no loader and no shared library", types)
        p = subprocess.run([exe, "--version"], env={}, cwd=tmp, capture_output=True, text=True)
        tap.ok(p.returncode == 0 and re.match(r"tt-device-queue \S+ \(SQLite 3\.\d+", p.stdout),
               "--version with an empty environment names the SQLite inside", p.stdout)
        if os.geteuid() == 0 and shutil.which("chroot"):
            p = subprocess.run(["chroot", tmp, "/tt-device-queue", "--version"],
                               capture_output=True, text=True)
            if p.returncode == 0:
                tap.ok("SQLite" in p.stdout, "runs chrooted into a folder holding only itself")
            else:
                tap.ok(True, "# SKIP chroot refused here: %s" % p.stderr.strip())
        port = free_port()
        with open(os.path.join(tmp, "serve.err"), "wb") as err:
            proc = subprocess.Popen([exe, "serve"], cwd=tmp, stdin=subprocess.DEVNULL,
                                    stdout=err, stderr=err, start_new_session=True,
                                    env={"TT_DEVICE_IDS": "0", "TT_DEVICE_PORT": str(port),
                                         "TT_DEVICE_DEV_DIR": os.path.join(tmp, "no-dev")})
        cli_env = {"TT_DEVICE_PORT": str(port)}

        def up():
            assert proc.poll() is None, open(os.path.join(tmp, "serve.err")).read()
            return subprocess.run([exe, "status"], env=cli_env, cwd=tmp,
                                  capture_output=True).returncode == 0
        wait_until(up, 10, "the static daemon to answer")
        p = subprocess.run([exe, "run", "--", "echo hello from $PWD"], env=cli_env, cwd=tmp,
                           capture_output=True, text=True, timeout=30)
        tap.ok(p.returncode == 0 and "hello from %s\n" % tmp in p.stdout,
               "a job runs through the static CLI and daemon, clean environment",
               p.stdout + p.stderr)
        p = subprocess.run([exe, "--host", "localhost", "status"], env=cli_env, cwd=tmp,
                           capture_output=True, text=True)
        tap.eq(p.returncode, 0, "the static client takes localhost")
        p = subprocess.run([exe, "--host", "no-such-host.invalid", "status"], env=cli_env,
                           cwd=tmp, capture_output=True, text=True)
        tap.ok(p.returncode == 2 and "give an IPv4 address or localhost" in p.stderr,
               "a host name is refused with a clear message", p.stderr)
        logs = os.path.join(tmp, "logs-v2")
        tap.ok(os.path.exists(os.path.join(logs, "jobs.sqlite3"))
               and os.path.exists(os.path.join(logs, "health_check.py")),
               "database and built-in health check land in logs-v2/ beside the binary",
               os.listdir(tmp))
        proc.send_signal(signal.SIGTERM)
        tap.eq(proc.wait(15), 0, "SIGTERM: exits 0")
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


run_tests(test_notify_ready_after_recovery_watchdog_stopping,
          test_notify_ready_when_the_store_cannot_be_opened_yet,
          test_notify_abstract_socket_no_watchdog_idle, test_metrics_parse_and_move_with_jobs,
          test_lifecycle_log_lines_and_dead_card_recovery, test_embedded_health_check_end_to_end,
          test_no_health_script_written_for_a_custom_health_command,
          test_static_binary_from_empty_dir_clean_env)

"""Shared helpers for the integration tests: start the real daemon, talk HTTP, print TAP.

Each integration test file is an executable script run by `prove --exec ''`. It uses `tap`
for its checks and `Daemon` to start `./tt-device-queue serve` on an ephemeral 127.0.0.1
port with a temporary log dir, TT_DEVICE_IDS=0,1 on simulated cards (TT_DEVICE_DEV_DIR names
a folder that does not exist, so no card is claimed) and fake reset/health commands (small
shell scripts that log their argv). Waits are conditions with deadlines, never fixed sleeps.
"""

import http.client
import json
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BINARY = os.environ.get("TTQ_BINARY") or os.path.join(ROOT, "tt-device-queue")
q = shlex.quote


class Tap:
    """Minimal TAP producer: ok(), eq(), the plan at the end, exit status 1 on any failure."""

    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, name, detail=None):
        self.n += 1
        print("%sok %d - %s" % ("" if cond else "not ", self.n, name), flush=True)
        if not cond:
            self.failed += 1
            if detail is not None:
                for line in str(detail).splitlines()[:40]:
                    print("#   " + line, flush=True)
        return cond

    def eq(self, got, want, name):
        return self.ok(got == want, name, "got:  %r\nwant: %r" % (got, want))

    def done(self):
        print("1..%d" % self.n, flush=True)
        sys.exit(1 if self.failed else 0)


tap = Tap()


def run_tests(*funcs):
    """Run test functions in order; an exception fails that test (reported) and goes on.
    TTQ_TESTS=substring runs only the tests whose name contains it (while working on one)."""
    only = os.environ.get("TTQ_TESTS", "")
    for f in (f for f in funcs if only in f.__name__):
        try:
            f()
        except Exception:  # noqa: BLE001 - any error is a failed check, keep going
            tap.ok(False, "%s raised" % f.__name__, traceback.format_exc())
    Daemon.cleanup_all()
    tap.done()


def gate(d, name):
    """(path, shell loop) of a file a job waits for; open_gate(path) releases it."""
    path = d.path(name)
    return path, "while [ ! -e %s ]; do sleep 0.02; done" % q(path)


def open_gate(path):
    open(path, "a").close()


def wait_until(fn, timeout=10.0, what="condition", interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pid_alive(pid):
    """True when pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body
        try:
            self.json = json.loads(body.decode("utf-8"))
        except ValueError:
            self.json = None

    def __getitem__(self, k):
        return self.json[k]

    def get(self, k, default=None):
        return self.json.get(k, default) if isinstance(self.json, dict) else default

    def __repr__(self):
        return "<HTTP %d %r>" % (self.status, self.body[:300])


class Daemon:
    """One `tt-device-queue serve` with its own temp dir, log dir and fake controls."""

    live = []

    def __init__(self, ids="0,1", env=None):
        self.tmp = tempfile.mkdtemp(prefix="ttq-test-")
        self.log_dir = os.path.join(self.tmp, "logs")
        self.reset_log = self.path("reset.log")
        self.health_log = self.path("health.log")
        reset = self.script("reset.sh", 'echo "$*" >> %s\necho "reset output for $*"'
                            % q(self.reset_log))
        health = self.script("health.sh", 'echo "$*" >> %s\necho "health output for $*"'
                             % q(self.health_log))
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("TT_DEVICE_", "TT_QUEUE_"))}
        self.env.update({
            "TT_DEVICE_HOST": "127.0.0.1",
            "TT_DEVICE_LOG_DIR": self.log_dir,
            "TT_DEVICE_IDS": ids,
            # No nodes: on a host with cards the test daemons must not claim them from the
            # installed service (nor from each other).
            "TT_DEVICE_DEV_DIR": self.path("no-dev"),
            "TT_DEVICE_STOP_GRACE_SEC": "0.3",
            "TT_DEVICE_RESET_CMD": reset + " {device}",
            "TT_DEVICE_HEALTH_CHECK_CMD": health + " {device}",
            "TT_DEVICE_BOOT_ID_FILE": self.path("boot_id"),
            # A card's health check after a bad end runs between jobs and fills recent lists;
            # t_host.py, which tests it, turns it on.
            "TT_DEVICE_HEALTH_AFTER_FAILURE": "false",
        })
        with open(self.path("boot_id"), "w") as f:
            f.write("test-boot-1\n")
        # An empty HOME: `bash -l` then reads no user profile, so jobs start in milliseconds
        # whatever the host's shell setup (pyenv init in ~/.bashrc costs ~150 ms per job).
        os.mkdir(self.path("home"))
        self.env["HOME"] = self.path("home")
        self.env.update(env or {})
        self.proc = None
        self.port = None
        Daemon.live.append(self)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def script(self, name, body):
        p = self.path(name)
        with open(p, "w") as f:
            f.write("#!/bin/bash\n" + body + "\n")
        os.chmod(p, 0o755)
        return p

    def start(self, env=None, wait=True, port=None, uid=None):
        """Start serve (on `port`, else a free one); wait for GET /status unless told not to.
        uid: run it as that user and group (the temp dir becomes theirs; needs root)."""
        self.port = port or free_port()
        e = dict(self.env)
        e["TT_DEVICE_PORT"] = str(self.port)
        e.update(env or {})
        self.err = open(self.path("serve.err"), "ab")
        who, binary = {}, BINARY
        if uid is not None:
            # A copy the user can reach: the checkout may sit under a folder only root enters.
            binary = self.path("tt-device-queue")
            if not os.path.exists(binary):
                shutil.copy(BINARY, binary)
            for top, dirs, files in os.walk(self.tmp):
                for n in [top] + [os.path.join(top, x) for x in dirs + files]:
                    os.lchown(n, uid, uid)
            who = {"user": uid, "group": uid, "extra_groups": []}
        self.proc = subprocess.Popen([binary, "serve"], env=e, cwd=self.tmp,
                                     stdin=subprocess.DEVNULL, stdout=self.err,
                                     stderr=self.err, start_new_session=True, **who)
        if wait:
            wait_until(self._ready, 10, "the daemon to answer GET /status")
        return self

    def _ready(self):
        if self.proc.poll() is not None:
            raise AssertionError("serve exited with %s:\n%s" % (self.proc.returncode,
                                                                  self.stderr()))
        try:
            return self.get("/status", timeout=1).status == 200
        except OSError:
            return False

    def stderr(self):
        try:
            with open(self.path("serve.err"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=10):
        """Signal the daemon and wait for it; returns its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()
        return self.proc.returncode

    def kill9(self):
        return self.stop(signal.SIGKILL)

    def restart(self, env=None):
        self.stop()
        return self.start(env)

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @classmethod
    def cleanup_all(cls):
        for d in cls.live:
            try:
                d.cleanup()
            except Exception:  # noqa: BLE001
                pass
        cls.live = []

    # ---- HTTP
    def request(self, method, path, body=None, headers=None, timeout=10.0):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body
            if body is not None and not isinstance(body, (bytes, str)):
                data = json.dumps(body)
            conn.request(method, path, body=data, headers=headers or {})
            r = conn.getresponse()
            return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def metric(self, name):
        """The value of `name` in /metrics (labels as it writes them), or None."""
        for line in self.get("/metrics").body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body if body is not None else {}, **kw)

    def submit(self, cmd, **fields):
        body = {"cmd": cmd}
        body.update(fields)
        r = self.post("/queue", body)
        if r.status != 200:
            raise AssertionError("POST /queue %r refused: %r" % (body, r))
        return r.json

    def job(self, job_id):
        r = self.get("/job/" + job_id)
        if r.status != 200:
            raise AssertionError("GET /job/%s: %r" % (job_id, r))
        return r.json

    def wait_done(self, job_id, timeout=20.0):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("job %s not done in %.0fs: %r" % (job_id, timeout,
                                                                       self.job(job_id)))
            r = self.get("/result/%s?wait=%d" % (job_id, max(0, min(10, int(left)))),
                         timeout=left + 5)
            if r.get("status") == "done":
                return self.job(job_id)

    def log_text(self, job_id):
        out, off = [], 0
        while True:
            r = self.get("/logs/%s?offset=%d" % (job_id, off)).json
            out.append(r["content"])
            if r["complete"] or r["next_offset"] == off:
                return "".join(out)
            off = r["next_offset"]

    def status(self):
        return self.get("/status").json

    def dev(self, device):
        for d in self.status()["devices"]:
            if d["device_id"] == str(device):
                return d
        raise AssertionError("no card %s in /status" % device)

    def cli(self, *args, env=None, input=None, timeout=30, cwd=None):
        """Run the client (bytes arguments are passed as they are); (status, out, err)."""
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("TT_DEVICE_", "TT_QUEUE_"))}
        e["TT_DEVICE_URL"] = "http://127.0.0.1:%d" % self.port
        e["TT_DEVICE_CLI_SCRIPT_DIR"] = self.path("cli-scripts")
        e.update(env or {})
        p = subprocess.run([BINARY] + [a if isinstance(a, bytes) else str(a) for a in args],
                           env=e, input=input, capture_output=True, timeout=timeout,
                           cwd=cwd or self.tmp,
                           stdin=None if input is not None else subprocess.DEVNULL)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode(
            "utf-8", "replace")


def raw_exchange(port, data, timeout=5.0, first=False):
    """Send raw bytes on a new connection; return everything read until close or timeout, or
    with first=True as soon as one complete response (by Content-Length) is there."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    buf = b""
    try:
        try:
            s.sendall(data)
        except OSError:
            pass  # the server may answer and close before taking all of a huge request
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if first and b"\r\n\r\n" in buf:
                head, body = buf.split(b"\r\n\r\n", 1)
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length" and len(body) >= int(v):
                        return buf
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            buf += chunk
        return buf
    finally:
        s.close()


def post_many(port, bodies, threads=8):
    """POST /queue every body from a few keep-alive connections at once (each must be
    answered 200); returns the job ids."""
    ids, errors, lock = [], [], threading.Lock()

    def worker(part):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            for b in part:
                conn.request("POST", "/queue", body=json.dumps(b))
                r = conn.getresponse()
                body = json.loads(r.read())
                if r.status != 200:
                    raise AssertionError("POST /queue %r: %d %r" % (b, r.status, body))
                with lock:
                    ids.append(body["job_id"])
        except Exception as e:  # noqa: BLE001 - reported by the caller's thread
            errors.append(e)
        finally:
            conn.close()
    ts = [threading.Thread(target=worker, args=(bodies[k::threads],)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return ids


def cli_env(d, extra=None):
    """The environment of a client talking to daemon d: none of the caller's TT_ settings."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("TT_DEVICE_", "TT_QUEUE_"))}
    e["TT_DEVICE_URL"] = "http://127.0.0.1:%d" % d.port
    e["TT_DEVICE_CLI_SCRIPT_DIR"] = d.path("cli-scripts")
    e.update(extra or {})
    return e


def cli_popen(d, *args, env=None, stdin=None):
    """The client started in d's temp dir with pipes for stdout and stderr."""
    return subprocess.Popen([BINARY] + list(args), env=cli_env(d, env), cwd=d.tmp,
                            stdin=stdin if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def guardian_of(pid):
    """The pid of the daemon's ttq-guardian child, or None."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:]
        if comm == "ttq-guardian" and int(rest.split()[1]) == pid and rest.split()[0] != "Z":
            return int(name)
    return None


def read_response(s, timeout=5.0):
    """One complete response from socket s: (status, {header: value}, body), or
    (None, {}, the bytes read) at timeout or EOF."""
    buf = b""
    deadline = time.monotonic() + timeout
    while True:
        if b"\r\n\r\n" in buf:
            head, body = buf.split(b"\r\n\r\n", 1)
            m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
            if m and len(body) >= int(m.group(1)):
                lines = head.decode("latin-1").split("\r\n")
                headers = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
                return int(lines[0].split(" ")[1]), headers, body[:int(m.group(1))]
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([s], [], [], left)[0]:
            return None, {}, buf
        try:
            chunk = s.recv(1 << 20)
        except OSError:
            return None, {}, buf
        if not chunk:
            return None, {}, buf
        buf += chunk


def ctxt_switches(pid):
    """How many times process pid has gone to sleep voluntarily: its wakeups, near enough."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    return 0


def socket_inodes(pid):
    """The inode numbers of the sockets process pid has open."""
    out = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out

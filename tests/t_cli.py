#!/usr/bin/env python3
"""Integration tests of the command-line client against the real daemon.

Prints TAP. One daemon (cards 0 and 1) serves most checks; each check leaves both cards idle.
Covers: streaming, every exit status of the spec's table, argv vs shell-program quoting,
queue-python (stdin storage, file mode, pruning, cleanup on failure), --wait-timeout and
Ctrl-C leaving the job running, an unreachable server, --help everywhere, usage errors, and
the other subcommands (queue, job, logs, result, status, kill, reset). Also: output that is not
UTF-8 comes out of logs/result/run/queue-python --wait byte for byte (read from the output
file), client ids cut to 128 characters, help wording, the summary of exit_code -1 jobs and of
a capped log, and a daemon that goes away between a job's completion and its record.
"""

import http.client
import json
import os
import random
import re
import select
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ttqlib import (BINARY, Daemon, cli_env, cli_popen as popen, free_port, q,  # noqa: E402
                    run_tests, socket_inodes, tap, wait_until)

HEX32 = re.compile(r"^[0-9a-f]{32}$")
D = None  # the shared daemon


def daemon():
    global D
    if D is None or not D.alive():
        D = Daemon().start()
    return D






def read_until(stream, want, timeout):
    """Read a pipe until `want` (bytes) appears; returns (found, bytes read so far)."""
    buf = b""
    deadline = time.monotonic() + timeout
    while want not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            return False, buf
        chunk = os.read(stream.fileno(), 4096)
        if not chunk:
            return False, buf
        buf += chunk
    return True, buf


def job_id_of(out):
    m = re.search(r"^job_id=([0-9a-f]{32})$", out, re.M)
    return m.group(1) if m else None


def queue(d, *args, **kw):
    rc, out, err = d.cli("queue", *args, **kw)
    assert rc == 0, (rc, out, err)
    return job_id_of(out)


def last_recent(d, device="0"):
    recent = d.dev(device)["recent"]
    return d.job(recent[-1]["job_id"]) if recent else None


def blocked(d, device="0"):
    """A job that runs on `device` until its gate file appears; returns (job_id, gate)."""
    ready, gate = d.path("ready-%s" % device), d.path("gate-%s" % device)
    for p in (ready, gate):
        if os.path.exists(p):
            os.unlink(p)
    j = d.submit("touch %s; while [ ! -e %s ]; do sleep 0.05; done" % (q(ready), q(gate)),
                 device_id=device, timeout=60)
    wait_until(lambda: os.path.exists(ready), 10, "the gated job to start")
    return j["job_id"], gate


def open_gate(gate):
    open(gate, "w").close()


# ---------------------------------------------------------------- run

def test_run_streams_output_while_running():
    d = daemon()
    p = popen(d, "run", "--", "echo first; sleep 2; echo second")
    t0 = time.monotonic()
    found, _ = read_until(p.stdout, b"first\n", 5)
    early = time.monotonic() - t0
    tap.ok(found and p.poll() is None, "run: the first line arrives while the job still runs",
           "found=%s after %.2fs, exited=%s" % (found, early, p.poll()))
    rest = p.stdout.read()
    err = p.stderr.read().decode()
    p.wait(15)
    tap.eq((p.returncode, rest), (0, b"second\n"), "run: the rest of the output, exit 0")
    tap.ok(re.search(r"job [0-9a-f]{32} on card 0: exit 0 in ", err),
           "run: summary line on stderr", err)


def test_run_exit_statuses():
    d = daemon()
    cases = [("exit 0", 0), ("echo hi; exit 3", 3), ("exit 255", 255), ("kill -TERM $$", 143),
             ("kill -KILL $$", 137)]
    for cmd, want in cases:
        rc, out, err = d.cli("run", "--", cmd)
        tap.eq(rc, want, "run %r exits %d" % (cmd, want))
    rc, out, err = d.cli("run", "--timeout", "1", "--", "sleep 10")
    tap.eq(rc, 137, "run: a timed-out job (-9) exits 137")
    tap.ok("timed out" in err, "run: the summary says it timed out", err)
    rc, out, err = d.cli("run", "--silence-timeout", "1", "--", "sleep 30")
    tap.ok(rc == 130 and "stopped as hung" in err and "SIGINT" in err,
           "run --silence-timeout 1: a silent job is stopped as hung (SIGINT, 130), the "
           "summary says so", (rc, err))
    tap.eq(last_recent(d)["silence_timeout"], 1, "run: --silence-timeout reaches the job")


def test_run_quoting():
    d = daemon()
    words = ["a b", "$HOME", "it's", '"dq"', "&&", "x;y", "*", "`id`", "", "tab\there"]
    rc, out, err = d.cli("run", "--", "printf", "<%s>", *words)
    tap.eq((rc, out), (0, "".join("<%s>" % w for w in words)),
           "run: several words after -- are an argv, each quoted for bash")
    rc, out, err = d.cli("run", "--", 'A=1 && B="$A$A" && echo "$B" | tr 1 2 > /dev/stdout')
    tap.eq((rc, out), (0, "22\n"), "run: one word is a complete shell program")
    tap.eq(last_recent(d)["cmd"], 'A=1 && B="$A$A" && echo "$B" | tr 1 2 > /dev/stdout',
           "run: a shell program is stored verbatim")
    rc, out, err = d.cli("run", "echo", "no-dashes")
    tap.eq((rc, out), (0, "no-dashes\n"), "run: the command may start without --")


def test_run_submission_options():
    d = daemon()
    rc, out, err = d.cli("run", "--device", "1", "--env", "FOO=bar", "--env", "FOO=b c",
                         "--env", "E=", "--repeat", "2", "--timeout", "9", "--",
                         'echo "$FOO|${E-unset}"')
    body = [ln for ln in out.splitlines() if not ln.startswith("[tt-device-queue]")]
    tap.eq((rc, body), (0, ["b c|", "b c|"]), "run: --env (the last one wins), --repeat")
    job = last_recent(d, "1")
    tap.eq((job["device_id"], job["timeout"], job["repeat"]), ("1", 9, 2),
           "run: --device, --timeout, --repeat reach the job")
    os.makedirs(d.path("sub"), exist_ok=True)
    rc, out, err = d.cli("run", "--", "pwd -P")
    tap.eq(out.strip(), os.path.realpath(d.tmp), "run: the default cwd is the client's")
    rc, out, err = d.cli("run", "--cwd", "sub", "--", "pwd -P")
    tap.eq(out.strip(), os.path.realpath(d.path("sub")), "run: a relative --cwd is the client's")
    rc, out, err = d.cli("run", "--cwd", "", "--", "true")
    tap.eq((rc, last_recent(d)["cwd"]), (0, ""), "run: --cwd '' leaves the daemon's cwd")


def test_run_output_limit_and_json():
    d = daemon()
    cmd = "head -c 5000 /dev/zero | tr '\\0' z; echo; echo end"
    rc, out, err = d.cli("run", "--output-limit", "10", "--", cmd)
    tap.eq((rc, out), (0, "z" * 10), "run --output-limit prints the first B bytes")
    tap.ok("cut" in err and "/output" in err, "run: stderr says the output was cut and where "
           "the full log is", err)
    rc, out, err = d.cli("run", "--", cmd, env={"TT_DEVICE_RESULT_BYTES": "7"})
    tap.eq(out, "z" * 7, "run: TT_DEVICE_RESULT_BYTES limits the output")
    rc, out, err = d.cli("--json", "run", "--output-limit", "4", "--", cmd)
    js = json.loads(out)
    tap.eq((rc, js["output"], js["output_truncated"], js["exit_code"], js["status"]),
           (0, "zzzz", True, 0, "done"),
           "run --json: one flat object, the record's fields beside the cut output")
    tap.ok("job" not in js and {"job_id", "device_id", "cmd", "elapsed"} <= set(js),
           "run --json: the record is not nested (scripts read `jq .exit_code`)", js)
    rc, out, err = d.cli("run", "--json", "--", "echo j; exit 4")
    js = json.loads(out)
    tap.eq((rc, js["output"], js["output_truncated"], HEX32.match(js["job_id"]) is not None),
           (4, "j\n", False, True), "run --json (after the subcommand) exits with the status")


def test_run_wait_timeout_leaves_job_running():
    d = daemon()
    t0 = time.monotonic()
    rc, out, err = d.cli("run", "--wait-timeout", "0.4", "--", "sleep 2; echo late")
    took = time.monotonic() - t0
    tap.eq(rc, 124, "run --wait-timeout 0.4: exit 124")
    tap.ok(took < 1.5, "run --wait-timeout ends the wait on time (%.2fs)" % took)
    cur = d.dev("0")["current"]
    tap.ok(cur is not None, "--wait-timeout leaves the job running")
    if cur:
        tap.ok(cur["job_id"] in err, "the message names the job", err)
        tap.eq(d.wait_done(cur["job_id"])["exit_code"], 0, "the job finishes normally")


def test_run_interrupted_130():
    d = daemon()
    ready = d.path("int-ready")
    p = popen(d, "run", "--", "touch %s; sleep 1.5; echo survived" % q(ready))
    wait_until(lambda: os.path.exists(ready), 10, "the job to start")
    p.send_signal(signal.SIGINT)
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        p.kill()
    err = p.stderr.read().decode()
    tap.eq(p.returncode, 130, "run: Ctrl-C while waiting exits 130")
    tap.ok("not stopped" in err, "run: Ctrl-C says the job was not stopped", err)
    cur = d.dev("0")["current"]
    tap.ok(cur is not None, "Ctrl-C leaves the job running")
    if cur:
        d.wait_done(cur["job_id"])
        tap.ok("survived" in d.log_text(cur["job_id"]), "the interrupted run's job completed")


def test_run_queued_behind_streams_once_started():
    d = daemon()
    jid, gate = blocked(d, "1")
    p = popen(d, "run", "--device", "1", "--", "echo behind")
    found, buf = read_until(p.stderr, b"queued on card 1", 5)
    tap.ok(found, "run: a job waiting behind another says so on stderr", buf)
    open_gate(gate)
    out = p.stdout.read()
    p.wait(15)
    tap.eq((p.returncode, out), (0, b"behind\n"), "run: the queued job streams once it runs")


# ---------------------------------------------------------------- queue, job, logs, result

def test_queue_job_logs_result():
    d = daemon()
    rc, out, err = d.cli("queue", "--", "printf 'line1\\nline2\\n'; exit 5")
    jid = job_id_of(out)
    tap.ok(rc == 0 and jid, "queue prints job_id=...", out)
    tap.ok(re.search(r"^output_file=.*/output$", out, re.M) and "position=" in out,
           "queue prints output_file= and position= lines", out)
    rc, out, err = d.cli("result", jid)
    tap.eq((rc, out), (5, "line1\nline2\n"), "result waits, prints the output, exits 5")
    tap.ok("exit 5" in err, "result: summary line on stderr", err)
    rc, out, err = d.cli("job", jid)
    js = json.loads(out)
    tap.eq((rc, js["job_id"], js["status"], js["exit_code"]), (0, jid, "done", 5),
           "job prints the record as JSON")
    rc, out, err = d.cli("logs", jid)
    tap.eq((rc, out, err), (0, "line1\nline2\n", ""), "logs prints the output")
    rc, out, err = d.cli("logs", jid, "--offset", "2", "--limit", "5")
    tap.eq((out, err.strip()), ("ne1\nl", "next_offset=7"),
           "logs --offset/--limit, next_offset on stderr when more remains")
    rc, out, err = d.cli("--json", "logs", jid, "--limit", "3")
    tap.eq(json.loads(out)["content"], "lin", "logs --json prints the /logs answer")
    rc, out, err = d.cli("--json", "result", jid, "--output-limit", "3")
    js = json.loads(out)
    tap.eq((rc, js["output"], js["output_truncated"], js["job_id"], js["exit_code"]),
           (5, "lin", True, jid, 5), "result --json --output-limit: one flat object")
    rc, out, err = d.cli("--json", "queue", "--device", "1", "--", "true")
    js = json.loads(out)
    tap.eq((rc, js["device_id"], js["status"]), (0, "1", "queued"), "queue --json")
    d.wait_done(js["job_id"])


def test_logs_follow_and_result_wait_timeout():
    d = daemon()
    jid = queue(d, "--", "echo a; sleep 0.8; echo b")
    rc, out, err = d.cli("logs", jid, "--follow", timeout=15)
    tap.eq((rc, out, err), (0, "a\nb\n", ""), "logs --follow streams until complete")
    jid, gate = blocked(d)
    rc, out, err = d.cli("logs", jid)
    tap.ok(rc == 0 and re.search(r"next_offset=\d+", err),
           "logs of a running job notes next_offset", err)
    t0 = time.monotonic()
    rc, out, err = d.cli("result", jid, "--wait-timeout", "0.3")
    tap.ok(rc == 124 and time.monotonic() - t0 < 2, "result --wait-timeout: 124 on time")
    rc, out, err = d.cli("logs", jid, "--follow", "--wait-timeout", "0.3")
    tap.eq(rc, 124, "logs --follow --wait-timeout: 124")
    tap.eq(d.job(jid)["status"], "running", "the job keeps running")
    rc, out, err = d.cli("result", jid, "--wait-timeout", "0")
    tap.ok(rc == 124 and "was running when last asked" in err,
           "result --wait-timeout 0 of a running job: asks once, 124", (rc, err))
    open_gate(gate)
    tap.eq(d.wait_done(jid)["exit_code"], 0, "and finishes")
    done = queue(d, "--", "echo finished; exit 6")
    d.wait_done(done)
    rc, out, err = d.cli("result", done, "--wait-timeout", "0")
    tap.eq((rc, out), (6, "finished\n"),
           "result --wait-timeout 0 of a done job: its output and its status")
    rc, out, err = d.cli("logs", done, "--follow", "--wait-timeout", "0")
    tap.eq((rc, out), (0, "finished\n"), "logs --follow --wait-timeout 0 of a done job: all of it")
    rc, out, err = d.cli("--json", "result", done, "--wait-timeout", "0")
    tap.eq((rc, json.loads(out)["exit_code"] if rc == 6 else out), (6, 6),
           "result --json --wait-timeout 0 of a done job: its record")


# ---------------------------------------------------------------- queue-python

def script_files(d):
    root = d.path("cli-scripts")
    return sorted(os.listdir(root)) if os.path.isdir(root) else []


def test_queue_python_stdin():
    d = daemon()
    src = "import sys\nprint('py', 6 * 7)\nsys.exit(3)\n"
    before = script_files(d)
    rc, out, err = d.cli("queue-python", "--wait", "-", input=src.encode())
    tap.eq((rc, out), (3, "py 42\n"), "queue-python - --wait runs stdin, exits with its status")
    new = [f for f in script_files(d) if f not in before]
    tap.eq(len(new), 1, "queue-python -: one stored script")
    if new:
        p = d.path("cli-scripts", new[0])
        with open(p) as f:
            tap.eq(f.read(), src, "the stored script holds stdin")
        tap.eq(stat.S_IMODE(os.stat(p).st_mode), 0o600, "stored scripts are 0600")
        tap.eq(stat.S_IMODE(os.stat(d.path("cli-scripts")).st_mode), 0o700,
               "the script dir is created 0700")
    rc, out, err = d.cli("queue-python", "-", input=b"print('later')\n")
    jid = job_id_of(out)
    m = re.search(r"^script_file=(/.*)$", out, re.M)
    tap.ok(rc == 0 and jid and m and os.path.dirname(m.group(1)) == d.path("cli-scripts"),
           "queue-python - without --wait prints job_id= and script_file= (the stored file)",
           out)
    d.wait_done(jid)
    tap.eq(d.log_text(jid), "later\n", "the queued script ran")
    rc, out, err = d.cli("--json", "queue-python", "--wait", "-", input=b"print('j')\n")
    js = json.loads(out)
    tap.eq((rc, js["output"], js["exit_code"], js["status"]), (0, "j\n", 0, "done"),
           "queue-python --wait --json: one flat object like run's")


def test_queue_python_failure_and_pruning():
    d = daemon()
    os.makedirs(d.path("cli-scripts"), exist_ok=True)
    old, keep = d.path("cli-scripts", "script-old.py"), d.path("cli-scripts", "notes.txt")
    for p in (old, keep):
        open(p, "w").close()
        t = time.time() - 8 * 86400
        os.utime(p, (t, t))
    before = set(script_files(d)) - {"script-old.py"}
    rc, out, err = d.cli("queue-python", "--device", "7", "-", input=b"print('never')\n")
    tap.eq(rc, 1, "queue-python refused (unknown card): exit 1")
    tap.ok(err.strip(), "with the daemon's error on stderr", err)
    tap.eq(set(script_files(d)), before, "the stored script is removed when the submission "
           "fails, and scripts older than 7 days are pruned")
    tap.ok(os.path.exists(keep), "pruning touches only stored scripts")


def test_queue_python_file_and_args():
    d = daemon()
    script = d.path("s p.py")
    with open(script, "w") as f:
        f.write("import sys, os\nprint(sys.argv[1:], os.getcwd())\n")
    rc, out, err = d.cli("queue-python", "--device", "1", "--python", "python3",
                         "--python-arg", "a b", "--python-arg", "$X", "--wait", "s p.py")
    tap.eq((rc, out), (0, "['a b', '$X'] %s\n" % os.path.realpath(d.tmp)),
           "queue-python FILE: absolute path, --python-arg words quoted")
    job = last_recent(d, "1")
    tap.ok(os.path.realpath(script) in job["cmd"], "the script is used by its absolute path",
           job["cmd"])
    rc, out, err = d.cli("queue-python", "s p.py")
    tap.ok(rc == 0 and job_id_of(out) and
           ("script_file=%s\n" % os.path.realpath(script)) in out,
           "queue-python FILE prints script_file= with its absolute path", out)
    d.wait_done(job_id_of(out))
    rc, out, err = d.cli("--json", "queue-python", "s p.py")
    js = json.loads(out)
    tap.eq((rc, js["script_file"], js["status"]), (0, os.path.realpath(script), "queued"),
           "queue-python --json: the answer with script_file")
    d.wait_done(js["job_id"])
    rc, out, err = d.cli("queue-python", "--wait", "missing.py")
    tap.eq(rc, 2, "queue-python with a missing file: usage error")


# ---------------------------------------------------------------- status, kill, reset

def on_terminal(d, *args):
    """The client's stdout when it is a terminal (NO_COLOR and TERM=dumb unset)."""
    env = {k: v for k, v in cli_env(d).items() if k != "NO_COLOR"}
    env["TERM"] = "xterm-256color"
    master, slave = os.openpty()
    p = subprocess.Popen([BINARY] + list(args), env=env, cwd=d.tmp, stdin=subprocess.DEVNULL,
                         stdout=slave, stderr=subprocess.DEVNULL)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO once the client closed the terminal
            break
        if not chunk:
            break
        out += chunk
    p.wait(15)
    os.close(master)
    return out.decode("utf-8", "replace")


def test_status():
    d = daemon()
    jid, gate = blocked(d, "1")
    rc, out, err = d.cli("status")
    tap.ok(rc == 0 and re.search(r"^card 0: healthy", out, re.M)
           and re.search(r"^card 1: healthy", out, re.M), "status: one block per card", out)
    tap.ok(re.search(r"running\s+%s" % jid, out), "status shows the running job", out)
    tty = on_terminal(d, "status")
    tap.ok("card 0: healthy" in tty and "\033[" not in tty,
           "no colour, even on a terminal without NO_COLOR", tty)
    rc, out, err = d.cli("status", "--device", "1", "--json")
    tap.eq([x["device_id"] for x in json.loads(out)["devices"]], ["1"],
           "status --device 1 --json")
    open_gate(gate)
    d.wait_done(jid)
    rc, out, err = d.cli("status", "--device", "1")
    tap.ok(re.search(r"recent\s+ok\s", out) and "card 0" not in out,
           "status --device: recent jobs with ok", out)
    # The first of two iterations is quick and sets the estimate; the second overruns it.
    first, ready, gate2 = d.path("first"), d.path("ready2"), d.path("gate2")
    jid = d.submit("if [ -e %s ]; then touch %s; while [ ! -e %s ]; do sleep 0.05; done; "
                   "else touch %s; fi" % (q(first), q(ready), q(gate2), q(first)),
                   device_id="1", repeat=2)["job_id"]
    wait_until(lambda: os.path.exists(ready), 10, "the second iteration to start")
    # The estimate is 2 x the first iteration's time, counted from the job's start.
    wait_until(lambda: d.dev("1")["current"]["estimated_remaining_sec"] == 0, 10,
               "the job to run past its estimate")
    rc, out, err = d.cli("status", "--device", "1")
    tap.ok(re.search(r"running\s+%s .*past its estimate" % jid, out) and "~0.00s left" not in out,
           "a job running past its estimate says so, not '~0.00s left'", out)
    open_gate(gate2)
    d.wait_done(jid)


def test_status_banners_dead_card_and_degraded_store():
    d = Daemon(env={"TT_DEVICE_RESET_CMD": "exit 1", "TT_DEVICE_RESET_RETRIES": "0"}).start()
    d.post("/reset", {"device_id": 1})
    wait_until(lambda: d.dev(1)["state"] == "dead", 10, "card 1 dead")
    rc, out, err = d.cli("status")
    block = out[out.index("card 1"):] if "card 1" in out else ""
    tap.ok(rc == 0 and re.search(r"^card 1: dead", out, re.M) and "reboot" in block,
           "human status: card 1 dead, with a banner saying it needs a reboot", out)
    tap.ok(re.search(r"^card 0: healthy", out, re.M), "card 0 still healthy", out)
    import sqlite3
    con = sqlite3.connect(os.path.join(d.log_dir, "jobs.sqlite3"), isolation_level=None,
                          timeout=0)
    try:
        con.execute("BEGIN EXCLUSIVE")
        d.post("/queue", {"cmd": "true"}, timeout=20)  # finds the store locked: degraded
        rc, out, err = d.cli("status")
        tap.ok(re.search(r"(?i)degraded", out) and "locked" in out,
               "human status: a banner for the degraded store, with the reason", out)
    finally:
        con.execute("ROLLBACK")
        con.close()
    d.cleanup()


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_waiting_client_costs_no_cpu():
    d = daemon()
    jid, gate = blocked(d, "0")
    before = cpu_seconds(d.proc.pid)
    p = popen(d, "result", jid, "--wait-timeout", "3")
    t0 = time.monotonic()
    p.wait(15)
    took = time.monotonic() - t0
    used = cpu_seconds(d.proc.pid) - before
    tap.ok(p.returncode == 124 and took >= 2.9, "result waited 3 s (%.2fs, exit %s)"
           % (took, p.returncode))
    # Expected: a few milliseconds (one long-poll held in the loop); bound 10x generous.
    tap.ok(used < 0.1, "the daemon spent %.3f s CPU while a client waited 3 s" % used)
    open_gate(gate)
    d.wait_done(jid)


def test_kill():
    d = daemon()
    jid, gate = blocked(d, "1")
    queued = d.submit("echo never", device_id="1")["job_id"]
    rc, out, err = d.cli("kill", queued)
    tap.ok(rc == 0 and "cancelled" in out, "kill ID of a queued job cancels it", out + err)
    rc, out, err = d.cli("status", "--device", "1")
    tap.ok(re.search(r"recent\s+cancelled\s.*%s" % queued, out),
           "status lists the cancelled job as cancelled, not as a failure", out)
    rc, out, err = d.cli("kill", "--device", "1")
    tap.ok(rc == 0 and jid in out, "kill --device 1 stops its running job", out + err)
    tap.ok(d.wait_done(jid, 10)["exit_code"] != 0, "the killed job failed")
    rc, out, err = d.cli("kill", jid)
    tap.ok(rc == 1 and err.strip(), "kill of a finished job is refused: exit 1 with a message",
           err)
    rc, out, err = d.cli("kill", "--device", "1")
    tap.ok(rc == 1 and "othing running" in err, "kill --device of an idle card: exit 1", err)


def test_reset():
    d = Daemon().start()
    rc, out, err = d.cli("reset", "--device", "1")
    tap.ok(rc == 0 and json.loads(out)["action"] == "scheduled", "reset --device 1 prints the "
           "daemon's answer", out + err)
    wait_until(lambda: d.dev("1")["reset_epoch"] == 1 and d.dev("1")["state"] == "healthy", 10,
               "card 1 reset")
    rc, out, err = d.cli("--json", "reset")
    tap.eq((rc, sorted(x["device_id"] for x in json.loads(out)["resets"])), (0, ["0", "1"]),
           "reset (all cards) --json")
    j = d.submit("true", device_id="1")["job_id"]
    d.wait_done(j)
    wait_until(lambda: all(x["state"] == "healthy" and not x["reset_pending"]
                           for x in d.status()["devices"]), 10, "resets done")
    rc, out, err = d.cli("reset", j)
    tap.ok(rc == 0 and json.loads(out)["device_id"] == "1", "reset ID targets the job's card",
           out + err)
    d.cleanup()


# ---------------------------------------------------------------- connection, identity, usage

def test_unreachable_server():
    d = daemon()
    env = {"TT_DEVICE_URL": "http://127.0.0.1:%d" % free_port()}
    for args in (["status"], ["run", "--", "true"], ["result", "0" * 32], ["kill", "0" * 32]):
        t0 = time.monotonic()
        rc, out, err = d.cli(*args, env=env)
        tap.ok(rc == 1 and "cannot connect" in err and time.monotonic() - t0 < 5,
               "unreachable daemon: %s exits 1 with a message" % args[0], err)
    rc, out, err = d.cli("job", "0" * 32)
    tap.ok(rc == 1 and "unknown job" in err.lower(),
           "a 404 prints the daemon's error and exits 1", err)


def test_connection_target():
    d = daemon()
    env = {"TT_DEVICE_URL": ""}
    rc, out, err = d.cli("--host", "127.0.0.1", "--port", str(d.port), "--json", "status",
                         env=env)
    tap.eq(rc, 0, "--host/--port")
    rc, out, err = d.cli("--json", "status",
                         env={"TT_DEVICE_URL": "", "TT_DEVICE_HOST": "127.0.0.1",
                              "TT_DEVICE_PORT": str(d.port)})
    tap.eq(rc, 0, "TT_DEVICE_HOST/TT_DEVICE_PORT")
    rc, out, err = d.cli("status", env={"TT_DEVICE_URL": "http://127.0.0.1:%d/" % d.port})
    tap.eq(rc, 0, "TT_DEVICE_URL with a trailing slash")
    for url in ("https://127.0.0.1:5741", "127.0.0.1:5741", "http://h:1/x", "http://:1"):
        rc, out, err = d.cli("status", env={"TT_DEVICE_URL": url})
        tap.ok(rc == 2 and "TT_DEVICE_URL" in err, "TT_DEVICE_URL %r: usage error" % url, err)
    rc, out, err = d.cli("--host", "localhost", "--port", str(d.port), "status", env=env)
    tap.eq(rc, 0, "--host localhost is 127.0.0.1")
    # The daemon listens on IPv4 only: the client takes an IPv4 address or localhost.
    for host in ("::1", "[::1]", "no-such-host.invalid"):
        rc, out, err = d.cli("--host", host, "status", env=env)
        tap.ok(rc == 2 and "give an IPv4 address or localhost" in err,
               "--host %r: usage error" % host, err)


def test_client_identity():
    d = daemon()
    rc, out, err = d.cli("--client-id", "bob", "queue", "--", "true",
                         env={"TT_QUEUE_CLIENT_ID": "carol"})
    tap.eq(d.wait_done(job_id_of(out))["client_id"], "bob", "--client-id wins")
    rc, out, err = d.cli("queue", "--", "true", env={"TT_QUEUE_CLIENT_ID": "carol"})
    tap.eq(d.wait_done(job_id_of(out))["client_id"], "carol", "TT_QUEUE_CLIENT_ID")
    rc, out, err = d.cli("queue", "--", "true")
    tap.eq(d.wait_done(job_id_of(out))["client_id"], "cli-%d" % os.getuid(),
           "default identity cli-UID")


def test_help_everywhere():
    d = daemon()
    subs = ["run", "queue", "queue-python", "job", "logs", "result", "status", "kill", "reset"]
    for args in [["--help"], ["-h"], ["help"], ["help", "run"]] + [[s, "--help"] for s in subs]:
        rc, out, err = d.cli(*args)
        tap.ok(rc == 0 and out.startswith("usage: tt-device-queue"), "%s: exit 0 with usage"
               % " ".join(args), (rc, out[:200], err))
    rc, out, err = d.cli("run", "--help")
    for opt in ("--device", "--cwd", "--timeout", "--repeat", "--env", "--wait-timeout",
                "--output-limit"):
        tap.ok(opt in out, "run --help lists %s" % opt)
    rc, out, err = d.cli("queue-python", "--help")
    tap.ok(all(o in out for o in ("--python", "--python-arg", "--wait")),
           "queue-python --help lists its options")
    rc, out, err = d.cli("logs", "--help")
    tap.ok(all(o in out for o in ("--offset", "--limit", "--follow")), "logs --help")


def test_usage_errors():
    d = daemon()
    n0 = len(d.dev("0")["recent"]) + len(d.dev("1")["recent"])
    bad = [[], ["frobnicate"], ["--bogus", "status"], ["--port"], ["run"], ["run", "--"],
           ["run", "--", "  "], ["run", "--device"], ["run", "--device", "x", "--", "true"],
           ["run", "--repeat", "0", "--", "true"], ["run", "--repeat", "x", "--", "true"],
           ["run", "--timeout", "-1", "--", "true"], ["run", "--env", "NOEQ", "--", "true"],
           ["run", "--silence-timeout", "x", "--", "true"],
           ["run", "--env", "=v", "--", "true"], ["run", "--wait-timeout", "abc", "--", "true"],
           ["run", "--output-limit", "1k", "--", "true"], ["run", "--bogus", "--", "true"],
           ["queue"], ["queue-python"], ["queue-python", "a.py", "b.py"], ["job"],
           ["job", "xyz"], ["job", "0" * 32, "extra"], ["logs"], ["logs", "0" * 32, "--limit",
                                                                  "0"],
           ["logs", "0" * 32, "--offset", "-1"], ["result"], ["result", "0" * 32,
                                                             "--wait-timeout", "x"],
           ["status", "extra"], ["status", "--device", "one"], ["kill"],
           ["kill", "0" * 32, "--device", "1"], ["reset", "notanid"], ["help", "nope"],
           ["run", "--json=1", "--", "true"], ["--port", "99999", "status"]]
    for args in bad:
        rc, out, err = d.cli(*args, env={"TT_DEVICE_RESULT_BYTES": ""})
        tap.ok(rc == 2 and err.strip(), "usage error: %r exits 2 with a message" % args,
               (rc, out, err))
    rc, out, err = d.cli("run", "--", "true", env={"TT_DEVICE_RESULT_BYTES": "lots"})
    tap.ok(rc == 2 and "TT_DEVICE_RESULT_BYTES" in err, "a malformed TT_DEVICE_RESULT_BYTES: 2")
    n1 = len(d.dev("0")["recent"]) + len(d.dev("1")["recent"])
    tap.eq((n1, d.status()["queued_total"]), (n0, 0), "no usage error submitted anything")


def test_closed_stdout():
    d = daemon()
    p = subprocess.Popen("%s run -- 'yes | head -c 2000000' | head -c 10 > /dev/null; "
                         "echo ${PIPESTATUS[0]}" % q(BINARY), shell=True, executable="/bin/bash",
                         env=cli_env(d), cwd=d.tmp, stdout=subprocess.PIPE)
    out = p.communicate(timeout=30)[0].decode().strip()
    tap.ok(out in ("0", "141"), "run into a closed pipe ends quietly (0 or 141)", out)
    wait_until(lambda: d.dev("0")["current"] is None, 10, "the job to finish")


# ---------------------------------------------------------------- raw output, wording, identity

def cli_bytes(d, *args, env=None, timeout=30):
    """Run the client; returns (exit status, stdout bytes, stderr text)."""
    p = subprocess.run([BINARY] + [str(a) for a in args], env=cli_env(d, env), cwd=d.tmp,
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def test_output_bytes():
    d = daemon()
    data = random.Random(402).randbytes(3000) + b"\x00\xff\xfe"
    text = data.decode("utf-8", "replace").encode()  # as the daemon's JSON carries it
    src = d.path("binary.dat")
    with open(src, "wb") as f:
        f.write(data)
    jid = queue(d, "--", "cat %s; exit 3" % q(src))
    rc, out, err = cli_bytes(d, "result", jid)
    tap.ok(rc == 3 and out == text, "result prints output that is not UTF-8 with U+FFFD",
           "rc=%d, %d bytes printed, %d written by the job" % (rc, len(out), len(data)))
    with open(d.job(jid)["output_file"], "rb") as f:
        stored = f.read()
    tap.ok(stored == data, "the output file holds the job's exact bytes", len(stored))
    rc, out, err = cli_bytes(d, "logs", jid)
    tap.ok(rc == 0 and out == text, "logs prints the same text",
           "rc=%d, %d bytes, stderr %r" % (rc, len(out), err))
    rc, out, err = cli_bytes(d, "logs", jid, "--follow")
    tap.ok(rc == 0 and out == text, "and so does logs --follow", len(out))
    rc, out, err = cli_bytes(d, "run", "--", "head -c 1500 %s; sleep 0.5; tail -c +1501 %s"
                             % (q(src), q(src)))
    tap.ok(rc == 0 and out == text, "run streams it while the job runs",
           "rc=%d, %d bytes" % (rc, len(out)))
    rc, out, err = cli_bytes(d, "--json", "result", jid)
    try:
        js = json.loads(out.decode("utf-8"))
    except ValueError as e:
        js = {"error": str(e)}
    tap.eq((rc, js.get("output")), (3, data.decode("utf-8", "replace")),
           "result --json stays valid UTF-8 JSON (invalid bytes as U+FFFD)")


def test_client_id_cut_to_128():
    d = daemon()
    rc, out, err = d.cli("queue", "--", "true", env={"TT_QUEUE_CLIENT_ID": "é" * 200})
    tap.ok(rc == 0, "a 200-character TT_QUEUE_CLIENT_ID is accepted", err)
    if rc == 0:
        tap.eq(d.wait_done(job_id_of(out))["client_id"], "é" * 128,
               "TT_QUEUE_CLIENT_ID is cut to 128 characters on a character boundary")
    rc, out, err = d.cli("--client-id", "a" * 300, "queue", "--", "true")
    tap.ok(rc == 0 and d.wait_done(job_id_of(out))["client_id"] == "a" * 128,
           "--client-id is cut to 128 characters", err)
    rc, out, err = d.cli("queue", "--", "true", env={"TT_QUEUE_CLIENT_ID": b"x\xff" * 100})
    tap.ok(rc == 0 and d.wait_done(job_id_of(out))["client_id"] == "x\ufffd" * 64,
           "an id with invalid bytes is cut after they become U+FFFD", err)


def test_client_id_control_characters():
    d = daemon()
    rc, out, err = d.cli("queue", "--", "true",
                         env={"TT_QUEUE_CLIENT_ID": "ci\x1b[2J\nx\u009by\x7f"})
    tap.ok(rc == 0 and d.wait_done(job_id_of(out))["client_id"] == "ci?[2J?x?y?",
           "control characters in the client id are sent as '?'", err)
    # A record from before the daemon refused them: `status` must not print them raw.
    jid, gate = blocked(d, "0")
    queued = d.submit("true", device_id="0")["job_id"]  # stays queued behind the gated job
    d.stop()
    ready = d.path("ready-old")
    with sqlite3.connect(os.path.join(d.log_dir, "jobs.sqlite3")) as db:
        db.execute("UPDATE jobs SET client_id = ?, cmd = ? WHERE id = ?",
                   ("old\x1b]0;title\x07\u009b31m",
                    "echo \u009b31m \x1b[1m; touch %s; while [ ! -e %s ]; do sleep 0.05; done"
                    % (q(ready), q(gate)), queued))
    db.close()
    d.start()
    wait_until(lambda: os.path.exists(ready), 10, "the old record's job to start")
    rc, out, err = d.cli("status")
    line = [x for x in out.splitlines() if queued in x]
    tap.ok(rc == 0 and len(line) == 1 and "[old?]0;title??31m]" in line[0]
           and "\x1b" not in out and "\u009b" not in out and "\x07" not in out,
           "status prints an old record's control characters as '?' and spaces", out)
    open_gate(gate)
    d.wait_done(queued)
    # A command that reads as another once a terminal reorders it (CVE-2021-42574).
    jid, gate = blocked(d, "0")
    spoof = d.submit("echo \u202esafe\u2066 # \u200fok", device_id="0")["job_id"]
    rc, out, err = d.cli("status")
    line = [x for x in out.splitlines() if spoof in x]
    tap.ok(rc == 0 and len(line) == 1 and "echo  safe  #  ok" in line[0] and
           not any(c in out for c in "\u202e\u2066\u200f"),
           "status shows bidirectional formatting characters of a command as ' '", out)
    rc, out, err = d.cli("queue", "--", "true", env={"TT_QUEUE_CLIENT_ID": "a\u202eb"})
    named = job_id_of(out)
    tap.ok(rc == 0 and d.job(named)["client_id"] == "a?b", "and a client id's are sent as '?'",
           err)
    open_gate(gate)
    d.wait_done(spoof)
    d.wait_done(named)


def test_non_utf8_submission_refused():
    d = daemon()
    os.mkdir(os.path.join(d.tmp.encode(), b"dir\xe9"))

    def seen():  # every job the daemon shows (the newest 10 done ones per card included)
        return [(x["current"], x["pending"], [j["job_id"] for j in x["recent"]])
                for x in d.status()["devices"]]

    before = seen()
    cases = [("the command", ("queue", "--", b"echo \xff"), None),
             ("the command", ("run", "--", "echo", b"caf\xe9"), None),
             ("--env", ("queue", "--env", b"A=\xc3", "--", "true"), None),
             ("the working directory", ("queue", "--", "true"),
              os.path.join(d.tmp.encode(), b"dir\xe9"))]
    for what, args, cwd in cases:
        rc, out, err = d.cli(*args, cwd=cwd)
        tap.ok(rc == 2 and "%s is not valid UTF-8" % what in err,
               "%s with bytes that are not UTF-8 (%s): exit 2 and says so" % (what, args[0]),
               err)
    tap.eq(seen(), before, "nothing was queued (no U+FFFD stand-in ran)")
    rc, out, err = d.cli("run", "--", "echo caf\u00e9")
    tap.ok(rc == 0 and out == "caf\u00e9\n", "UTF-8 text is sent as it is", err)


def test_help_texts():
    d = daemon()
    rc, out, err = d.cli("--help")
    tap.ok("(--json also after it)" in out and re.search(r"^\s+tt-device-queue --version$", out,
                                                         re.M),
           "global help: --json also after the subcommand, and --version", out)
    rc, out, err = d.cli("--version")
    tap.ok(rc == 0 and out.startswith("tt-device-queue "), "--version works", out + err)
    for sub in ("run", "queue", "queue-python"):
        rc, out, err = d.cli(sub, "--help")
        tap.ok("[--device N|N,M...|all]" in out and d.cli("help", sub)[1] == out,
               "%s --help (as help %s) says --device takes a list or all" % (sub, sub), out)
        tap.ok("\n  %s\n" % out.split(" ", 2)[2].splitlines()[0] in d.cli("--help")[1],
               "and the global help lists it")
    jid, gate = blocked(d, "1")
    queued = d.submit("echo q", device_id="1")["job_id"]
    rc, out, err = d.cli("result", queued, "--wait-timeout", "0.3")
    tap.ok(rc == 124 and "was queued when last asked and is not cancelled" in err,
           "result --wait-timeout of a queued job: it was queued, not cancelled", err)
    rc, out, err = d.cli("run", "--device", "1", "--wait-timeout", "0.3", "--", "echo r")
    tap.ok(rc == 124 and "was queued when last asked and is not cancelled" in err,
           "run --wait-timeout while queued: it was queued, not cancelled", err)
    rc, out, err = d.cli("result", jid, "--wait-timeout", "0.3")
    tap.ok(rc == 124 and "was running when last asked and is not stopped" in err,
           "result --wait-timeout of a running job: it was running, not stopped", err)
    # --wait-timeout 0 asks once after the submission, and says what that answer said.
    rc, out, err = d.cli("run", "--device", "1", "--wait-timeout", "0", "--", "echo r")
    tap.ok(rc == 124 and "was queued when last asked and is not cancelled" in err,
           "run --wait-timeout 0 behind a running job: asked once, it was queued", err)
    open_gate(gate)
    d.wait_done(jid)
    wait_until(lambda: d.dev("1")["current"] is None and not d.dev("1")["pending"], 20,
               "card 1 idle")


def test_exit_minus_one_summary():
    d = daemon()
    jid, gate = blocked(d, "1")
    queued = d.submit("echo never", device_id="1")["job_id"]
    d.cli("kill", queued)
    rc, out, err = d.cli("result", queued)
    tap.eq(rc, 129, "result of a job cancelled while queued exits 129 (exit_code -1)")
    tap.ok("cancelled" in err and "no exit code" in err and "exit -1" not in err
           and "signal" not in err, "its summary says it was cancelled and has no exit code",
           err)
    open_gate(gate)
    d.wait_done(jid)
    d2 = Daemon().start()
    ready = d2.path("ready")
    j = d2.submit("touch %s; sleep 30" % q(ready))["job_id"]
    wait_until(lambda: os.path.exists(ready), 10, "the job to start")
    d2.restart()
    rc, out, err = d2.cli("result", j)
    tap.ok(rc == 129 and "interrupted by a service stop" in err and "exit -1" not in err,
           "a job interrupted by a service stop: the summary says so", (rc, err))
    # A crash in iteration 2 of 3: the stored counters are those of the job's start, so the
    # summary gives no iteration count rather than "0 of 3 succeeded".
    ready = d2.path("ready2")
    j = d2.submit("if [ -e %s ]; then sleep 30; fi; touch %s" % (q(ready), q(ready)),
                  repeat=3)["job_id"]
    wait_until(lambda: d2.job(j)["repeat_current"] == 2, 10, "the second iteration")
    d2.kill9()
    d2.start()
    rc, out, err = d2.cli("result", j)
    tap.ok(rc == 129 and "interrupted" in err and "iterations succeeded" not in err,
           "a repeat job interrupted by a crash: no stale iteration count", (rc, err))
    d2.cleanup()


def test_log_cap_summary():
    d = Daemon(env={"TT_DEVICE_MAX_LOG_BYTES": "1024"}).start()
    rc, out, err = d.cli("run", "--", "head -c 5000 /dev/zero | tr '\\0' z")
    job = last_recent(d)
    tap.ok(rc == 0 and job["log_truncated"] and "stored log is incomplete" in err
           and "over TT_DEVICE_MAX_LOG_BYTES" in err
           and "%d bytes dropped" % job["dropped_log_bytes"] in err,
           "run: the summary says the stored log is incomplete and how many bytes were dropped",
           err)
    d.cleanup()


def fake_daemon(jid):
    """A stand-in daemon: queues jid, reports it complete, then goes away at GET /job."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    out_file = "/nonexistent-ttq/%s/output" % jid

    def serve():
        conn, _ = srv.accept()
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, buf = buf.split(b"\r\n\r\n", 1)
                m = re.search(rb"content-length:\s*(\d+)", head, re.I)
                n = int(m.group(1)) if m else 0
                while len(buf) < n:
                    buf += conn.recv(65536)
                buf = buf[n:]
                method, path = head.split(b"\r\n")[0].decode().split()[:2]
                if method == "POST" and path == "/queue":
                    ans = {"job_id": jid, "device_id": "0", "status": "queued",
                           "output_file": out_file, "position": 0}
                elif path.startswith("/logs/"):
                    ans = {"job_id": jid, "status": "done", "output_file": out_file,
                           "offset": 0, "next_offset": 3, "content": "hi\n",
                           "truncated": False, "complete": True, "log_size": 3,
                           "log_truncated": False, "dropped_log_bytes": 0}
                else:  # the daemon stops: no answer, nothing listening any more
                    srv.close()
                    return
                data = json.dumps(ans).encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(data) + data)
        finally:
            conn.close()
            srv.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return port, t


def connected_to(pid, port):
    """True when process pid holds an established TCP connection to 127.0.0.1:port."""
    inodes = socket_inodes(pid)
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            x = line.split()
            if x[3] == "01" and int(x[2].split(":")[1], 16) == port and x[9] in inodes:
                return True
    return False


def test_run_waits_through_a_daemon_restart():
    """A `run` waiting on a queued job when the daemon restarts (an upgrade) keeps waiting and
    gets the job's output and status; failing would make a pipeline submit it twice."""
    d = Daemon()
    d.start()
    jid, gate = blocked(d, "1")
    p = subprocess.Popen([BINARY, "run", "--device", "1", "--", "echo after-restart"],
                         env=cli_env(d), cwd=d.tmp, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    queued = wait_until(lambda: d.dev("1")["pending"], 10, "the run's job to be queued")
    qid = queued[0]["job_id"]
    follow = subprocess.Popen([BINARY, "logs", qid, "--follow"], env=cli_env(d), cwd=d.tmp,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    wait_until(lambda: connected_to(follow.pid, d.port), 10, "logs --follow to connect")
    held = {}
    polls = d.metric("ttq_http_long_polls")
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=40)
    conn.request("GET", "/result/%s?wait=30" % qid)

    def long_poll():
        try:
            held["answer"] = json.loads(conn.getresponse().read())
        except Exception as e:  # noqa: BLE001 - the failure is what the check reports
            held["answer"] = repr(e)
    t = threading.Thread(target=long_poll, daemon=True)
    t.start()
    wait_until(lambda: d.metric("ttq_http_long_polls") > polls, 10, "the long-poll to be held")
    port = d.port
    d.stop()
    t.join(10)
    tap.ok(isinstance(held.get("answer"), dict) and held["answer"]["status"] == "queued",
           "a long-poll on a queued job is answered 'queued' at the stop, not cut", held)
    d.start(port=port)
    out, err = p.communicate(timeout=60)
    tap.ok(p.returncode == 0 and out == b"after-restart\n",
           "run kept waiting through the restart and got its job's output and status",
           "rc %r out %r err %s" % (p.returncode, out, err.decode()))
    tap.ok(b"lost the daemon" in err and b"the daemon is back" in err,
           "and it said so on stderr", err.decode())
    tap.eq(d.job(qid)["exit_code"], 0, "the job ran once, after the restart")
    out, err = follow.communicate(timeout=30)
    tap.ok(follow.returncode == 0 and out == b"after-restart\n" and b"lost the daemon" in err,
           "logs --follow waits through the restart too",
           "rc %r out %r err %s" % (follow.returncode, out, err.decode()))
    # It comes back without its store (an operator's sqlite3 shell holds the lock): its 503s
    # mean "not back yet" to a waiting client, which gets the job's status once it opens.
    jid, gate = blocked(d, "1")
    qid = d.submit("echo locked-restart; exit 6", device_id="1")["job_id"]
    res = subprocess.Popen([BINARY, "result", qid], env=cli_env(d), cwd=d.tmp,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    wait_until(lambda: connected_to(res.pid, d.port), 10, "result to connect")
    port = d.port
    d.stop()
    con = sqlite3.connect(os.path.join(d.log_dir, "jobs.sqlite3"), isolation_level=None,
                          timeout=0)
    try:
        con.execute("BEGIN EXCLUSIVE")
        d.start(port=port)
        wait_until(lambda: "locked" in (d.status()["worker"]["degraded_reason"] or ""), 10,
                   "the daemon to serve without its store")
        time.sleep(1)  # NEGATIVE CHECK: the client retries (every 0.25 s) and gets 503s
        tap.ok(res.poll() is None, "a waiting result does not give up on the daemon's 503s")
    finally:
        con.execute("ROLLBACK")
        con.close()
    out, err = res.communicate(timeout=60)
    tap.ok(res.returncode == 6 and out == b"locked-restart\n",
           "result waited through a restart that came back without its store (503s)",
           "rc %r out %r err %s" % (res.returncode, out, err.decode()))
    # A daemon that does not come back: the wait ends with exit 1 and how to ask later.
    jid, gate = blocked(d, "1")
    p = subprocess.Popen([BINARY, "run", "--device", "1", "--", "true"],
                         env=cli_env(d, {"TT_DEVICE_RECONNECT_SEC": "1"}), cwd=d.tmp,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    queued = wait_until(lambda: d.dev("1")["pending"], 10, "the second run's job to be queued")
    d.stop()
    out, err = p.communicate(timeout=30)
    tap.ok(p.returncode == 1 and b"has not come back in 1 s" in err
           and ("result %s" % queued[0]["job_id"]).encode() in err,
           "a daemon gone for good ends the wait: exit 1, saying how to ask later", err.decode())


def test_run_daemon_gone_after_completion():
    d = daemon()
    jid = "ab" * 16
    port, t = fake_daemon(jid)
    rc, out, err = d.cli("run", "--", "echo hi", env={"TT_DEVICE_URL": "http://127.0.0.1:%d"
                                                      % port})
    t.join(5)
    tap.eq((rc, out), (1, "hi\n"), "run: the output (from the JSON when the file cannot be "
           "read), then exit 1 when the daemon went away before the final status")
    tap.ok("unknown" in err and "result %s" % jid in err and "daemon stopped" in err,
           "run: says the daemon stopped, the final status is unknown, and how to ask later",
           err)


if __name__ == "__main__":
    run_tests(test_run_streams_output_while_running, test_run_exit_statuses, test_run_quoting,
              test_run_submission_options, test_run_output_limit_and_json,
              test_run_wait_timeout_leaves_job_running, test_run_interrupted_130,
              test_run_queued_behind_streams_once_started, test_queue_job_logs_result,
              test_logs_follow_and_result_wait_timeout, test_queue_python_stdin,
              test_queue_python_failure_and_pruning, test_queue_python_file_and_args,
              test_status, test_kill, test_reset, test_unreachable_server,
              test_connection_target, test_client_identity, test_help_everywhere,
              test_usage_errors, test_closed_stdout, test_output_bytes,
              test_client_id_cut_to_128, test_client_id_control_characters,
              test_non_utf8_submission_refused, test_help_texts, test_exit_minus_one_summary,
              test_log_cap_summary, test_run_daemon_gone_after_completion,
              test_run_waits_through_a_daemon_restart,
              test_status_banners_dead_card_and_degraded_store, test_waiting_client_costs_no_cpu)

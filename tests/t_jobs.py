#!/usr/bin/env python3
"""Jobs end to end on two simulated cards: FIFO, repeat, timeouts, output caps, kill,
environment, restarts and crashes. Each test starts its own daemon."""

import json
import os
import shutil
import signal
import sqlite3
import threading
import time

from ttqlib import Daemon, cli_popen, gate, open_gate, pid_alive, q, run_tests, tap, wait_until


def read_lines(path):
    try:
        with open(path) as f:
            return f.read().split()
    except OSError:
        return []


def test_fifo_across_clients_and_independent_cards():
    d = Daemon().start()
    ready, order = d.path("ready"), d.path("order")
    g, wait = gate(d, "g0")
    d.submit("touch %s; %s; echo blocker >> %s" % (q(ready), wait, q(order)), device_id="0")
    wait_until(lambda: os.path.exists(ready), 10, "blocker running")
    ids = []
    for i in range(6):
        r = d.submit("echo %d >> %s" % (i, q(order)), device_id="0", client_id="c%d" % (i % 3))
        tap.eq(r["position"], i + 1, "job %d: position counts the running blocker" % i)
        ids.append(r["job_id"])
    other = d.submit("echo card1", device_id="1")
    tap.eq(other["position"], 0, "card 1 idle: position 0")
    tap.eq(d.wait_done(other["job_id"])["exit_code"], 0, "card 1 runs while card 0 is blocked")
    tap.eq(d.job(ids[0])["status"], "queued", "card 0's queue waits behind its blocker")
    open_gate(g)
    d.wait_done(ids[-1])
    tap.eq(read_lines(order), ["blocker", "0", "1", "2", "3", "4", "5"],
           "card 0 ran its jobs one at a time in submission order across clients")


def test_repeat_stops_at_first_failure():
    d = Daemon().start()
    count = d.path("count")
    j = d.submit("echo x >> %s; [ $(wc -l < %s) -lt 3 ]" % (q(count), q(count)), repeat=10)
    job = d.wait_done(j["job_id"])
    tap.eq(job["exit_code"], 1, "the failing iteration's status is the job's")
    tap.eq(job["repeat_completed"], 2, "two iterations exited 0")
    tap.eq(len(read_lines(count)), 3, "no iteration after the first failure")
    text = d.log_text(j["job_id"])
    tap.ok("Repeat 3/10" in text and "Repeat 4/10" not in text, "repeat markers up to the failure",
           text)


def test_timeout_kills_process_group():
    d = Daemon(env={"TT_DEVICE_DEFAULT_TIMEOUT": "1"}).start()
    pidf = d.path("bg.pid")
    j = d.submit("sleep 30 & echo $! > %s; sleep 30" % q(pidf))
    job = d.wait_done(j["job_id"])
    tap.eq((job["exit_code"], job["timed_out"]), (-9, True), "timeout: -9 and timed_out")
    pid = int(open(pidf).read())
    wait_until(lambda: not pid_alive(pid), 2, "background sleep killed with the group")
    tap.ok(not pid_alive(pid), "the whole process group is gone")
    tap.ok("timed out" in d.log_text(j["job_id"]), "the output says it timed out")


def test_timeout_sigint_first_then_sigkill():
    """A timeout stops a job as a kill does: SIGINT, so a Python job's teardown can close its
    device, then SIGKILL after the grace. The record stays a timeout's: timed_out, exit_code
    -9; `signal` is what its shell died of, null when it exited by itself after the SIGINT."""
    d = Daemon(env={"TT_DEVICE_STOP_GRACE_SEC": "5"}).start()
    trapped = d.path("trapped")
    j = d.submit('trap "echo trapped >> %s; exit 0" INT; sleep 30 & wait' % q(trapped),
                 timeout=1)
    job = d.wait_done(j["job_id"])
    tap.eq(read_lines(trapped), ["trapped"], "the deadline sent SIGINT: the job's trap ran")
    tap.eq((job["exit_code"], job["timed_out"], job["end_reason"], job["signal"]),
           (-9, True, "timeout", None),
           "it exited by itself within the grace: exit_code -9, timed_out, timeout, signal null")
    tap.ok(1 <= job["elapsed"] < 4, "it ended at its deadline, not after the 5 s grace "
           "(%.2fs)" % job["elapsed"])
    tap.ok("SIGINT, then SIGKILL" in job["timeout_message"] and
           "SIGINT, then SIGKILL" in d.log_text(j["job_id"]),
           "timeout_message and the marker line say SIGINT, then SIGKILL", job)

    d = Daemon(env={"TT_DEVICE_STOP_GRACE_SEC": "1.5"}).start()
    j = d.submit("trap '' INT; while :; do sleep 0.05; done", timeout=1)
    job = d.wait_done(j["job_id"])
    tap.eq((job["exit_code"], job["timed_out"], job["end_reason"], job["signal"]),
           (-9, True, "timeout", 9), "ignoring SIGINT: killed by SIGKILL (signal 9)")
    tap.ok(2.5 <= job["elapsed"] < 10, "SIGKILL came after the 1.5 s grace (%.2fs)"
           % job["elapsed"])


def test_silence_watchdog_stops_a_hung_job():
    """A job that writes nothing for silence_timeout seconds is stopped as hung, as a kill
    stops it; one that keeps writing runs to its end. The first output byte or the start
    counts, and a queued job keeps its value across a restart."""
    d = Daemon().start()
    t0 = time.monotonic()
    j = d.submit("sleep 60", silence_timeout=1)
    job = d.wait_done(j["job_id"])
    tap.eq((job["end_reason"], job["timed_out"], job["silence_timeout"]), ("hung", False, 1),
           "a silent job: end_reason hung, not timed out, silence_timeout 1 in its record")
    tap.eq((job["exit_code"], job["signal"]), (-2, 2), "it got SIGINT first: its shell's status")
    tap.ok(1 <= job["elapsed"] < 10 and time.monotonic() - t0 < 10,
           "stopped after its second of silence (%.2fs), not at its timeout" % job["elapsed"])
    text = d.log_text(j["job_id"])
    tap.ok("[tt-device-queue] no output for 1 seconds: stopped as hung (SIGINT, then SIGKILL "
           "after the grace)" in text, "its output's marker line says so", text)
    tap.ok("no output for 1 seconds" in (job["error"] or ""), "and its error", job)

    j = d.submit("for i in $(seq 15); do echo $i; sleep 0.2; done", silence_timeout=1)
    job = d.wait_done(j["job_id"])
    tap.eq((job["exit_code"], job["end_reason"]), (0, "exited"),
           "a job printing a line every 0.2 s for 3 s with silence_timeout 1 runs to its end")
    tap.ok(job["elapsed"] >= 2.9, "past its silence timeout (%.2fs)" % job["elapsed"])

    for bad in (-1, "1", 1.5, 86401):
        r = d.post("/queue", {"cmd": "true", "silence_timeout": bad})
        tap.ok(r.status == 400 and "silence_timeout" in r.get("error", ""),
               "silence_timeout %r: 400 naming it" % (bad,), r)

    # A queued job keeps its own value across a restart, whatever the new default.
    path, wait = gate(d, "blocker")
    blocker = d.submit(wait)["job_id"]
    wait_until(lambda: d.job(blocker)["status"] == "running", 10, "the blocker to run")
    j = d.submit("sleep 60", silence_timeout=1)["job_id"]
    d.restart(env={"TT_DEVICE_SILENCE_TIMEOUT": "0"})
    job = d.wait_done(j)
    tap.eq((job["silence_timeout"], job["end_reason"]), (1, "hung"),
           "after a restart the queued job still has silence_timeout 1 and is stopped as hung")
    d.cleanup()


def test_silence_watchdog_default_and_off():
    """TT_DEVICE_SILENCE_TIMEOUT is the default of a job submitted without the field (or with
    null); silence_timeout 0 turns the watchdog off for one job."""
    d = Daemon(env={"TT_DEVICE_SILENCE_TIMEOUT": "1"}).start()
    j = d.submit("sleep 60")
    job = d.wait_done(j["job_id"])
    tap.eq((job["silence_timeout"], job["end_reason"]), (1, "hung"),
           "the server's default stops a silent job submitted without the field")
    tap.ok(job["elapsed"] < 10, "within seconds (%.2fs)" % job["elapsed"])
    j = d.submit("sleep 60", silence_timeout=None)
    tap.eq(d.job(j["job_id"])["silence_timeout"], 1, "null is the server's default too")
    d.post("/kill", {"job_id": j["job_id"]})
    j = d.submit("sleep 2.5; echo done", silence_timeout=0)
    job = d.wait_done(j["job_id"])
    tap.eq((job["silence_timeout"], job["exit_code"], job["end_reason"]), (0, 0, "exited"),
           "silence_timeout 0 keeps a silent job running past the default")
    tap.ok(job["elapsed"] >= 2.5, "for its whole 2.5 s (%.2fs)" % job["elapsed"])
    d.cleanup()


def test_flood_capped_and_counted():
    d = Daemon(env={"TT_DEVICE_MAX_LOG_BYTES": "65536"}).start()
    t0 = time.monotonic()
    j = d.submit("head -c 50000000 /dev/zero; echo done >&2", timeout=60)
    job = d.wait_done(j["job_id"], timeout=60)
    took = time.monotonic() - t0
    size = os.path.getsize(job["output_file"])
    tap.eq(job["exit_code"], 0, "a 50 MB printer finishes (%.1fs)" % took)
    tap.ok(size <= 65536, "the file never exceeds the cap (%d bytes)" % size)
    tap.ok(job["log_truncated"] and job["dropped_log_bytes"] >= 50000000 - 65536,
           "dropped bytes counted", job)
    with open(job["output_file"], "rb") as f:
        tail = f.read()[-200:]
    tap.ok(str(job["dropped_log_bytes"]).encode() in tail, "the last line gives the drop count",
           tail)


def test_kill_running_sigint_and_escalation():
    d = Daemon().start()
    ready = d.path("r1")
    j = d.submit("trap 'echo got-int; exit 3' INT; touch %s; while :; do sleep 0.05; done"
                 % q(ready))
    wait_until(lambda: os.path.exists(ready), 10, "job running")
    r = d.post("/kill", {"job_id": j["job_id"]})
    tap.ok(r.status == 200 and "killed" in r.json, "kill of a running job answers killed", r)
    job = d.wait_done(j["job_id"])
    tap.eq(job["exit_code"], 3, "SIGINT first: the trap's exit status")
    tap.ok(job.get("stop_requested_at"), "stop_requested_at recorded")
    ready = d.path("r2")
    j = d.submit("trap '' INT; touch %s; while :; do sleep 0.05; done" % q(ready))
    wait_until(lambda: os.path.exists(ready), 10, "job running")
    t0 = time.monotonic()
    d.post("/kill", {"device_id": "0"})
    job = d.wait_done(j["job_id"])
    took = time.monotonic() - t0
    tap.eq(job["exit_code"], -9, "ignoring SIGINT: SIGKILL after the grace")
    tap.ok(0.25 <= took < 3, "escalation after the 0.3 s grace (%.2fs)" % took)
    # A second kill of a job already stopping changes nothing: no second SIGINT into its
    # cleanup, and the grace is not restarted.
    d2 = Daemon(env={"TT_DEVICE_STOP_GRACE_SEC": "2"}).start()
    ready = d2.path("r3")
    j = d2.submit("trap 'echo got-int' INT; touch %s; while :; do sleep 0.05; done" % q(ready))
    wait_until(lambda: os.path.exists(ready), 10, "job running")
    t0 = time.monotonic()
    d2.post("/kill", {"job_id": j["job_id"]})
    wait_until(lambda: "got-int" in d2.log_text(j["job_id"]), 10, "the trap to run")
    r = d2.post("/kill", {"job_id": j["job_id"]})
    job = d2.wait_done(j["job_id"])
    took = time.monotonic() - t0
    tap.ok(r.status == 200 and d2.log_text(j["job_id"]).count("got-int") == 1,
           "a second kill sends no second SIGINT", d2.log_text(j["job_id"]))
    tap.ok(job["exit_code"] == -9 and took < 3.5,
           "the SIGKILL comes one grace after the first kill (%.2fs)" % took)


def test_kill_queued_never_runs():
    d = Daemon().start()
    ready, side = d.path("ready"), d.path("side")
    g, wait = gate(d, "g")
    blk = d.submit("touch %s; %s" % (q(ready), wait))
    wait_until(lambda: os.path.exists(ready), 10, "blocker running")
    j = d.submit("touch %s" % q(side))
    r = d.post("/kill", {"job_id": j["job_id"]})
    tap.ok(r.status == 200 and "cancelled" in r.json, "kill of a queued job answers cancelled", r)
    job = d.job(j["job_id"])
    tap.eq((job["status"], job["exit_code"]), ("done", -1), "cancelled at once with -1")
    tap.ok("cancel" in (job["error"] or "").lower(), "error says cancelled", job["error"])
    tap.eq(d.post("/kill", {"job_id": j["job_id"]}).status, 409, "kill of a done job: 409")
    open_gate(g)
    d.wait_done(blk["job_id"])
    d.wait_done(d.submit("true")["job_id"])
    tap.ok(not os.path.exists(side), "the cancelled job never ran")


def test_queued_job_cancelled_or_restarted():
    """A queued job that is cancelled says so in its output; one that waits through a restart
    runs once after it, with its env, into its own output."""
    d = Daemon().start()
    ready = d.path("ready")
    g, wait = gate(d, "g")
    blk = d.submit("touch %s; %s" % (q(ready), wait))
    wait_until(lambda: os.path.exists(ready), 10, "blocker running")
    a = d.submit("echo A-RAN")
    b = d.submit("echo B-RAN $MYVAR", env={"MYVAR": "from-env"})
    out_a = os.path.join(d.log_dir, a["job_id"], "output")
    d.post("/kill", {"job_id": a["job_id"]})
    tap.ok("cancel" in open(out_a).read().lower(), "cancelled, its output says so")
    d.restart()
    wait_until(lambda: os.path.exists(ready) and d.job(blk["job_id"])["status"] == "done", 10,
               "blocker failed by the restart")
    job = d.wait_done(b["job_id"])
    tap.eq((job["exit_code"], d.log_text(b["job_id"])), (0, "B-RAN from-env\n"),
           "after a restart the queued job runs once, with its env, into its own output")


def test_meta_json_failure_names_its_cause():
    """A job folder removed behind the daemon's back: meta.json cannot be written, and the log
    says why (no such file), not "No space left on device; will retry" for ever."""
    d = Daemon(ids="0").start()
    ready = d.path("ready")
    g, wait = gate(d, "g")
    b = d.submit("touch %s; %s; echo B" % (q(ready), wait))["job_id"]
    wait_until(lambda: os.path.exists(ready), 10, "B running")
    folder = os.path.join(d.log_dir, b)
    shutil.rmtree(folder)
    open_gate(g)
    d.wait_done(b)
    wait_until(lambda: "%s: cannot write meta.json" % b in d.stderr(), 10, "the log line")
    line = [x for x in d.stderr().splitlines() if "%s: cannot write meta.json" % b in x][0]
    tap.ok("No such file or directory" in line and "retry" not in line,
           "the log names the cause and does not promise a retry", line)
    d.cleanup()


def test_env_scrub_and_pythonpath():
    d = Daemon(env={"PYTHONPATH": "/opt/x", "TT_DEVICE_DEEP_RESET_CMD": "/bin/true"}).start()
    j = d.submit("env", env={"MYVAR": "a b", "PATH2": "$HOME"})
    d.wait_done(j["job_id"])
    env = dict(line.split("=", 1) for line in d.log_text(j["job_id"]).splitlines() if "=" in line)
    tap.eq(env.get("MYVAR"), "a b", "the job's env reaches it verbatim")
    tap.eq(env.get("PATH2"), "$HOME", "no expansion of env values")
    tap.eq(env.get("PYTHONPATH"), ".:/opt/x", "PYTHONPATH gets . first")
    leaked = [k for k in env if k.startswith(("TT_DEVICE_RESET", "TT_DEVICE_DEEP_RESET",
                                               "TT_DEVICE_HEALTH"))]
    tap.eq(leaked, [], "no control configuration reaches a job")
    tap.eq(env.get("TT_DEVICE_IDS"), "0,1", "other daemon settings are inherited")
    j = d.submit("pwd -P; echo $$ $(ps -o pgid= -p $$) $(ps -o sid= -p $$)", cwd=d.tmp)
    d.wait_done(j["job_id"])
    out = d.log_text(j["job_id"]).split()
    tap.eq(out[0], os.path.realpath(d.tmp), "cwd applied")
    tap.ok(len(out) == 4 and out[1] == out[2] == out[3], "own session and process group", out)


def test_signal_exit_codes_and_straggler():
    d = Daemon().start()
    j = d.submit("kill -TERM $$")
    tap.eq(d.wait_done(j["job_id"])["exit_code"], -15, "death by SIGTERM is -15")
    pidf = d.path("s.pid")
    t0 = time.monotonic()
    j = d.submit("sleep 30 & echo $! > %s; exit 0" % q(pidf))
    job = d.wait_done(j["job_id"])
    tap.ok(job["exit_code"] == 0 and time.monotonic() - t0 < 5,
           "a background child holding the pipe does not delay completion")
    pid = int(open(pidf).read())
    wait_until(lambda: not pid_alive(pid), 2, "straggler killed")
    tap.ok(not pid_alive(pid), "stragglers in the group are killed when the shell exits")


def test_restart_recovers_queued_and_fails_running():
    d = Daemon().start()
    count, order = d.path("count"), d.path("order")
    pidf = d.path("run.pid")
    r = d.submit("echo x >> %s; echo $$ > %s; exec sleep 30" % (q(count), q(pidf)), device_id="1")
    wait_until(lambda: os.path.exists(pidf) and open(pidf).read().strip(), 10, "job running")
    ids = [d.submit("echo %d >> %s" % (i, q(order)), device_id="1")["job_id"] for i in range(4)]
    pid = int(open(pidf).read())
    d.kill9()
    wait_until(lambda: not pid_alive(pid), 2, "the running job dies with the daemon")
    tap.ok(not pid_alive(pid), "no job process outlives a SIGKILLed daemon by 2 s")
    # No request after the restart: the recovered queue must start by itself, not on the
    # first poll wake-up (which, unprompted, is the 5-minute retention pass).
    d.start(wait=False)
    wait_until(lambda: len(read_lines(order)) == 4, 10, "the recovered queue to run unprompted")
    tap.eq(read_lines(order), ["0", "1", "2", "3"], "recovered jobs start with no request")
    wait_until(d._ready, 10, "the daemon to answer GET /status")
    job = d.wait_done(r["job_id"])
    tap.eq(job["exit_code"], -1, "a job found running at start-up fails with -1")
    tap.eq(job["repeat_current"], 1, "and its record says its first iteration ran")
    tap.ok("interrupted" in d.log_text(r["job_id"]), "with a log line saying so")
    for i in ids:
        tap.eq(d.wait_done(i)["device_id"], "1", "queued job back on its card")
    tap.eq(read_lines(order), ["0", "1", "2", "3"], "queued jobs survive kill -9 in order")
    tap.eq(read_lines(count), ["x"], "the interrupted job never runs again")


def test_interrupted_job_elapsed_excludes_downtime():
    """A job that dies with a SIGKILLed daemon ends, as far as anyone can tell, at its last
    output: its elapsed covers that much and not the time the daemon was down."""
    d = Daemon().start()
    r = d.submit("echo a; sleep 1; echo b; exec sleep 60", device_id="0")
    wait_until(lambda: "b" in d.log_text(r["job_id"]), 10, "the job's second line")
    d.kill9()
    time.sleep(3)
    d.start()
    job = d.wait_done(r["job_id"])
    tap.eq(job["exit_code"], -1, "the interrupted job failed -1")
    tap.ok(0.9 <= job["elapsed"] <= 2.5,
           "elapsed runs to its last output, not over 3 s of downtime", job)
    stored = json.load(open(os.path.join(d.log_dir, r["job_id"], "meta.json")))
    tap.eq((stored["elapsed"], stored["finished_at"]), (job["elapsed"], job["finished_at"]),
           "meta.json says the same")


def test_sigterm_stops_running_keeps_queued():
    d = Daemon().start()
    ready, side = d.path("ready"), d.path("side")
    r = d.submit("touch %s; exec sleep 30" % q(ready))
    wait_until(lambda: os.path.exists(ready), 10, "job running")
    qj = d.submit("touch %s" % q(side))
    t0 = time.monotonic()
    rc = d.stop(signal.SIGTERM)
    tap.ok(rc == 0 and time.monotonic() - t0 < 5.3, "SIGTERM: exit 0 within grace + 5 s")
    tap.ok(not os.path.exists(side), "queued job not started during shutdown")
    d.start()
    tap.eq(d.wait_done(r["job_id"])["exit_code"], -1, "the stopped job failed with -1")
    tap.eq(d.wait_done(qj["job_id"])["exit_code"], 0, "the queued job runs after the restart")


def test_job_that_cannot_start_says_why():
    """Its cwd vanished while it waited: the record's error and the CLI's summary give the
    reason the output's marker line gives, not just exit 127."""
    d = Daemon().start()
    g, wait = gate(d, "g")
    d.submit(wait, device_id="0")
    wd = d.path("wd")
    os.mkdir(wd)
    r = d.submit("echo never", device_id="0", cwd=wd)
    os.rmdir(wd)
    open_gate(g)
    job = d.wait_done(r["job_id"])
    why = "cannot change to directory %s: No such file or directory" % wd
    tap.eq(d.log_text(r["job_id"]), "[tt-device-queue] %s\n" % why, "the output says why")
    tap.eq((job["exit_code"], job["error"]), (127, "Cannot start the job: " + why),
           "GET /job: exit 127 and the same reason as its error")
    res = d.get("/result/" + r["job_id"]).json
    tap.eq(res["error"], job["error"], "GET /result gives it too")
    rc, out, err = d.cli("result", r["job_id"])
    tap.ok(rc == 127 and "on card 0: Cannot start the job: %s, exit 127" % why in err,
           "tt-device-queue result explains it", "rc %r\n%s" % (rc, err))


def test_long_polls_release_on_events():
    d = Daemon().start()
    j = d.submit("sleep 0.5; echo late; sleep 0.5")
    t0 = time.monotonic()
    r = d.get("/logs/%s?offset=0&wait=10" % j["job_id"], timeout=20).json
    tap.ok(r["content"] == "late\n" and time.monotonic() - t0 < 3,
           "logs wait returns when output appears", r)
    r = d.get("/result/%s?wait=10" % j["job_id"], timeout=20).json
    tap.ok(r["status"] == "done" and time.monotonic() - t0 < 4, "result wait returns at completion")


def test_persisted_and_private():
    d = Daemon().start()
    j = d.submit("echo MARK123")
    d.wait_done(j["job_id"])
    db = os.path.join(d.log_dir, "jobs.sqlite3")
    con = sqlite3.connect(db)
    row = con.execute("SELECT status, device, exit_code FROM jobs WHERE id=?",
                      (j["job_id"],)).fetchone()
    mode = con.execute("PRAGMA journal_mode").fetchone()[0]
    con.close()
    tap.eq(row, ("done", 0, 0), "the job row is in SQLite with its card")
    tap.eq(mode, "wal", "WAL journal")
    tap.eq(oct(os.stat(db).st_mode & 0o777), "0o600", "database 0600")
    tap.eq(oct(os.stat(os.path.join(d.log_dir, j["job_id"])).st_mode & 0o777), "0o700",
           "job folder 0700")
    meta = json.load(open(os.path.join(d.log_dir, j["job_id"], "meta.json")))
    tap.eq((meta["job_id"], meta["exit_code"]), (j["job_id"], 0), "meta.json holds the record")


def test_exec_string_limit_checked_at_submission():
    """Linux execs no argv or env string of 128 KiB or more (MAX_ARG_STRLEN), whatever the
    character count: such a job was taken with 200 and failed 127 (E2BIG) when it started."""
    d = Daemon(ids="0").start()
    big = "true #" + "\u65e5" * 43690  # 131076 bytes in UTF-8, 43696 characters
    r = d.post("/queue", {"cmd": big})
    tap.ok(r.status == 400 and "128 KiB" in (r.get("error") or ""),
           "a command of 128 KiB in UTF-8 (under the character limit) is refused with 400", r)
    r = d.post("/queue", {"cmd": "echo ${#BIG}", "env": {"BIG": "x" * 200000}})
    tap.ok(r.status == 400 and "128 KiB" in (r.get("error") or ""),
           "an env entry of 128 KiB or more is refused with 400", r)
    ok_cmd = "true #" + "\u65e5" * 43688  # 131070 bytes: the longest kind that runs
    job = d.wait_done(d.submit(ok_cmd)["job_id"])
    tap.ok(job["exit_code"] == 0 and job["error"] is None,
           "a command just under the limit runs", job)
    r = d.post("/queue", {"cmd": "true", "env": {"PYTHONPATH": "a" * 131060}})
    tap.ok(r.status == 400 and "128 KiB" in (r.get("error") or ""),
           "a PYTHONPATH that the job's '.:' would take over the limit is refused", r)
    job = d.wait_done(d.submit("echo ${#BIG}", env={"BIG": "x" * 131000})["job_id"])
    tap.eq((job["exit_code"], d.log_text(job["job_id"]).strip()), (0, "131000"),
           "an env entry just under the limit reaches the job")
    d.cleanup()


def test_command_starting_with_a_dash_is_a_command():
    """bash -lc CMD took a CMD that starts with "-" for its own options."""
    d = Daemon(ids="0").start()
    job = d.wait_done(d.submit("--version")["job_id"])
    text = d.log_text(job["job_id"])
    tap.ok(job["exit_code"] == 127 and "--version: command not found" in text,
           "'--version' is looked up as a command", (job["exit_code"], text))
    job = d.wait_done(d.submit("-x; echo fine")["job_id"])
    tap.ok("fine" in d.log_text(job["job_id"]), "'-x; echo fine' runs its second command",
           d.log_text(job["job_id"]))
    d.cleanup()


def test_config_errors_exit_2():
    for var, val in (("TT_DEVICE_PORT", "x"), ("TT_DEVICE_IDS", "0,,1"),
                     ("TT_DEVICE_STOP_GRACE_SEC", "-1"), ("TT_DEVICE_MAX_LOG_BYTES", "10"),
                     ("TT_DEVICE_RESET_PREEMPTS_CURRENT", "maybe"),
                     ("TT_DEVICE_DEFAULT_TIMEOUT", "100000"), ("TT_DEVICE_HTTP_WORKERS", "0"),
                     ("TT_DEVICE_SILENCE_TIMEOUT", "-1"), ("TT_DEVICE_SILENCE_TIMEOUT", "86401")):
        d = Daemon()
        d.start(env={var: val}, wait=False)
        try:
            rc = d.proc.wait(5)
        except Exception:  # noqa: BLE001
            rc = None
        d.stop()
        tap.ok(rc == 2 and var in d.stderr(), "%s=%s: exit 2 naming the variable" % (var, val),
               "rc %r: %s" % (rc, d.stderr()[-300:]))


def test_card_listed_twice_exits_2():
    """A card listed twice is a typo (0,0 for 0,1?), not one queue: exit 2 naming it."""
    for val, card in (("0,0", "0"), ("1, 2,01", "1")):
        d = Daemon()
        d.start(env={"TT_DEVICE_IDS": val}, wait=False)
        try:
            rc = d.proc.wait(5)
        except Exception:  # noqa: BLE001
            rc = None
        d.stop()
        err = d.stderr()
        tap.ok(rc == 2 and "TT_DEVICE_IDS" in err and "card %s is listed twice" % card in err,
               "TT_DEVICE_IDS=%s: exit 2 naming card %s" % (val, card),
               "rc %r: %s" % (rc, err[-300:]))


def test_start_line_counts_cards_in_words():
    for ids, words in (("3", "serving 1 card on"), ("0,1", "serving 2 cards on")):
        d = Daemon(ids=ids).start()
        d.stop()
        tap.ok(words in d.stderr(), "TT_DEVICE_IDS=%s: '%s'" % (ids, words), d.stderr()[-300:])


def test_queue_bound_and_concurrent_submitters():
    d = Daemon(env={"TT_DEVICE_MAX_QUEUED_JOBS": "50"}).start()
    g, wait = gate(d, "g")
    ready = d.path("ready")
    d.submit("touch %s; %s" % (q(ready), wait), device_id="0")
    wait_until(lambda: os.path.exists(ready), 10, "blocker running")
    results = []

    def worker():
        for _ in range(10):
            results.append(d.post("/queue", {"cmd": "true", "device_id": "0"}).status)
    ts = [threading.Thread(target=worker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    tap.eq((results.count(200), results.count(503)), (50, 30),
           "exactly TT_DEVICE_MAX_QUEUED_JOBS accepted, the rest 503")
    tap.eq(d.status()["queued_total"], 50, "queued_total")
    open_gate(g)


def test_split_character_is_not_sent_as_fffd():
    """A character split across two writes, with a pause between, reaches `run` whole: /logs
    keeps back a live job's incomplete last character instead of sending U+FFFD."""
    d = Daemon().start()
    g, wait = gate(d, "g")
    p = cli_popen(d, "run", "--device", "0", "--",
                  "printf 'A\\342\\202'; %s; printf '\\254 B\\n'" % wait)
    out = []
    reader = threading.Thread(target=lambda: out.append(p.stdout.read()))
    first = []

    def read_first():
        first.append(os.read(p.stdout.fileno(), 1))
    t = threading.Thread(target=read_first)
    t.start()
    t.join(20)
    tap.eq(first, [b"A"], "run printed what precedes the split character")
    open_gate(g)
    reader.start()
    reader.join(20)
    tap.eq(p.wait(20), 0, "run ends with the job's status")
    tap.eq(first[0] + out[0], "A\u20ac B\n".encode(), "the split character printed whole")

    g2, wait2 = gate(d, "g2")
    j = d.submit("printf '\\360\\237\\230'; %s; printf '\\200\\n'" % wait2)["job_id"]
    wait_until(lambda: os.path.exists(d.job(j)["output_file"]) and
               os.path.getsize(d.job(j)["output_file"]) == 3, 10, "the first three bytes written")
    r = d.get("/logs/%s?offset=0" % j).json
    tap.ok(r["content"] == "" and r["next_offset"] == 0 and not r["truncated"],
           "a live job's output that is only an incomplete character is kept back", r)
    open_gate(g2)
    d.wait_done(j)
    r = d.get("/logs/%s?offset=0" % j).json
    tap.eq(r["content"], "\U0001F600\n", "the character is sent once it is complete")


run_tests(test_split_character_is_not_sent_as_fffd, test_fifo_across_clients_and_independent_cards, test_repeat_stops_at_first_failure,
          test_timeout_kills_process_group, test_timeout_sigint_first_then_sigkill,
          test_silence_watchdog_stops_a_hung_job, test_silence_watchdog_default_and_off,
          test_flood_capped_and_counted,
          test_kill_running_sigint_and_escalation, test_kill_queued_never_runs,
          test_queued_job_cancelled_or_restarted,
          test_env_scrub_and_pythonpath, test_signal_exit_codes_and_straggler,
          test_restart_recovers_queued_and_fails_running,
          test_interrupted_job_elapsed_excludes_downtime, test_sigterm_stops_running_keeps_queued,
          test_job_that_cannot_start_says_why,
          test_long_polls_release_on_events, test_persisted_and_private, test_config_errors_exit_2,
          test_card_listed_twice_exits_2, test_start_line_counts_cards_in_words,
          test_queue_bound_and_concurrent_submitters,
          test_exec_string_limit_checked_at_submission, test_meta_json_failure_names_its_cause,
          test_command_starting_with_a_dash_is_a_command)

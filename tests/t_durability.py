#!/usr/bin/env python3
"""Durability under faults: nothing acknowledged is ever lost or run twice.

Every test starts its own daemon (ttqlib.Daemon). Jobs prove what ran by appending a token to a
ledger file with one O_APPEND write at their very start, so "ran twice" is a token seen twice.
Faults are real, not simulated: SIGKILL at random moments (seeded, the seed is printed so a
failure can be replayed with TTQ_CRASH_SEED=N), a full tmpfs (`mount -t tmpfs -o size=4m`; the
test is skipped with a message where mounting is refused), the -wal file made immutable with
`chattr +i` (the read-only file that still refuses root: plain chmod does not stop root), and a
second SQLite connection holding BEGIN EXCLUSIVE past the daemon's busy timeout.
Waits are conditions with deadlines; the few fixed sleeps are negative checks (something must
NOT happen) and are marked "NEGATIVE CHECK".
"""
import collections
import errno
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ttqlib import (Daemon, gate, open_gate, pid_alive, q, run_tests,  # noqa: E402
                    tap, wait_until)

MARK = "TTQ_DURABILITY_MARK"  # env var carried by every job of a test, to find leftovers
DAY = 86400.0


# ---------------------------------------------------------------- helpers

def fast_daemon(ids="0,1", env=None):
    """A Daemon whose jobs start in milliseconds: HOME is an empty folder, so `bash -l`
    sources no user profile (this host's pyenv init costs ~150 ms per login shell)."""
    return Daemon(ids=ids, env=env)  # ttqlib now gives every daemon an empty HOME


def db_path(d):
    return os.path.join(d.log_dir, "jobs.sqlite3")


def ledger_cmd(ledger, token, rest=""):
    """A job that first appends token to the ledger (one O_APPEND write), then runs rest."""
    return "echo %s >> %s%s" % (token, q(ledger), "; " + rest if rest else "")


def ledger_counts(ledger):
    try:
        with open(ledger) as f:
            return collections.Counter(f.read().split())
    except FileNotFoundError:
        return collections.Counter()


def marked_pids(mark):
    """Live processes whose environment carries MARK=mark."""
    needle = ("%s=%s" % (MARK, mark)).encode()
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % p, "rb") as f:
                if needle in f.read().split(b"\0") and pid_alive(int(p)):
                    pids.append(int(p))
        except OSError:
            pass
    return pids


def try_post(d, body, timeout=10.0):
    """POST /queue; None when the connection failed (the job is not acknowledged)."""
    try:
        return d.post("/queue", body, timeout=timeout)
    except (OSError, http.client.HTTPException):
        return None


def degraded_reason(d):
    return d.status()["worker"]["degraded_reason"]


def db_rows(d, sql, args=()):
    con = sqlite3.connect(db_path(d), timeout=10)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def db_status(d, job_id):
    rows = db_rows(d, "SELECT status, exit_code FROM jobs WHERE id = ?", (job_id,))
    return rows[0] if rows else None


def integrity(path):
    con = sqlite3.connect(path, timeout=10)
    try:
        return con.execute("PRAGMA integrity_check").fetchall()
    finally:
        con.close()


def file_digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def wait_exit(d, timeout=10):
    try:
        return d.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def skip(name, why):
    tap.ok(True, "%s # SKIP %s" % (name, why))


def run_tool(argv):
    """Run a system tool (mount, chattr); a missing tool is a failed run, not an exception."""
    try:
        return subprocess.run(argv, capture_output=True, text=True)
    except OSError as e:
        return subprocess.CompletedProcess(argv, 127, "", str(e))


# ---------------------------------------------------------------- crash safety

CRASH_JOBS = 300
CRASH_KILLS = 5


def test_crash_safety_under_sigkill():
    seed = int(os.environ.get("TTQ_CRASH_SEED") or random.SystemRandom().randrange(1 << 31))
    print("# crash-safety seed %d (TTQ_CRASH_SEED=%d replays the kill moments)" % (seed, seed),
          flush=True)
    rng = random.Random(seed)
    d = fast_daemon()
    mark = "%d-%d" % (os.getpid(), seed)
    ledger = d.path("ledger")
    d.start()
    lock = threading.Lock()
    acked = {}   # token -> job id, only for 200 answers
    tried = []   # every token ever sent
    stop = threading.Event()

    def submitter(k):
        pace = random.Random(seed + k)
        n = 0
        while not stop.is_set():
            tok = "t%d_%d" % (k, n)
            n += 1
            body = {"cmd": ledger_cmd(ledger, tok, "sleep 0.0%d" % pace.randrange(6)),
                    "device_id": str(pace.randrange(2)), "env": {MARK: mark}}
            with lock:
                tried.append(tok)
            r = try_post(d, body)
            if r is None:  # refused or cut: not acknowledged
                time.sleep(0.05)
                continue
            if r.status == 200:
                with lock:
                    acked[tok] = r["job_id"]
                    if len(acked) >= CRASH_JOBS:
                        stop.set()
            time.sleep(pace.uniform(0.02, 0.1))  # spread the submissions over the kills

    threads = [threading.Thread(target=submitter, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    moments, died, running = [], [], []
    for _ in range(CRASH_KILLS):
        pause = rng.uniform(0.05, 2.0)  # from the (re)start: some land during start-up
        moments.append("%.2f" % pause)
        time.sleep(pause)
        if not d.alive():  # it must be our SIGKILL that ends each run, not a crash
            died.append((d.proc.returncode, d.stderr()[-300:]))
        running.append(str(len(marked_pids(mark))))
        d.kill9()
        d.start(wait=False)
    print("# SIGKILL after %s s of each run; job processes alive at each kill: %s"
          % (", ".join(moments), ", ".join(running)), flush=True)
    wait_until(d._ready, 15, "the daemon to answer after the last restart")
    tap.eq(died, [], "the daemon was alive at every SIGKILL")
    for t in threads:
        t.join(60)
    tap.ok(len(acked) >= CRASH_JOBS, "%d submissions acknowledged across %d SIGKILLs (%d tried)"
           % (CRASH_JOBS, CRASH_KILLS, len(tried)))
    jobs = {tok: d.wait_done(jid, timeout=90) for tok, jid in acked.items()}
    tap.ok(all(j["status"] == "done" for j in jobs.values()), "every acknowledged job is done")
    counts = ledger_counts(ledger)
    twice = sorted(t for t, n in counts.items() if n > 1)
    tap.eq(twice, [], "no job started twice (acknowledged or not)")
    ok0 = [t for t, j in jobs.items() if j["exit_code"] == 0]
    lost = sorted(t for t in ok0 if counts[t] != 1)
    tap.eq(lost, [], "each of the %d jobs that exited 0 ran exactly once" % len(ok0))
    other = {t: (j["exit_code"], j["error"]) for t, j in jobs.items()
             if j["exit_code"] != 0 and not (j["exit_code"] == -1
                                             and "nterrupted" in (j["error"] or ""))}
    tap.eq(other, {}, "every other acknowledged job failed -1 'interrupted' (%d of them)"
           % (len(jobs) - len(ok0)))
    unknown = sorted(set(counts) - set(tried))
    tap.eq(unknown, [], "the ledger holds only tokens that were submitted")
    wait_until(lambda: not marked_pids(mark), 5, "no job process left")
    tap.eq(marked_pids(mark), [], "no process of any job is left")
    d.kill9()
    tap.eq(integrity(db_path(d)), [("ok",)], "PRAGMA integrity_check after the last SIGKILL")
    rows = db_rows(d, "SELECT cmd, status FROM jobs")
    stored = {r[0].split()[1]: r[1] for r in rows}
    ran_unrecorded = sorted(t for t in counts if t not in stored)
    tap.eq(ran_unrecorded, [], "every job that ran is in the database (running before spawn)")
    print("# %d unacknowledged submissions were committed anyway (answer lost to a kill)"
          % len([t for t in stored if t not in acked]), flush=True)


# ---------------------------------------------------------------- degraded mode

def start_blocked_pairs(d, ledger, cards=("0", "1")):
    """Per card: a running job held by a gate and a queued job behind it.
    Returns {card: (running id, gate path, queued id, queued token)}."""
    out = {}
    for c in cards:
        g, wait = gate(d, "gate" + c)
        run = d.submit(ledger_cmd(ledger, "run" + c, wait + "; echo end%s >> %s"
                                  % (c, q(ledger))), device_id=c)
        queued = d.submit(ledger_cmd(ledger, "queued" + c), device_id=c)
        out[c] = (run["job_id"], g, queued["job_id"], "queued" + c)
    wait_until(lambda: all(ledger_counts(ledger)["run" + c] for c in cards), 10,
               "the gated jobs to run")
    return out


def fill(path):
    """Write zeros to path until the file system is full; returns the bytes written."""
    n = 0
    # unbuffered: a buffered file keeps the bytes a full disk refused and raises again at close
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
                n += 65536
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
    return n


def on_small_tmpfs(name, body):
    """Run body(d) with the daemon's log dir on a fresh 4 MiB tmpfs (skipped where mounting
    is refused); the file system is unmounted afterwards."""
    d = fast_daemon()
    mnt = d.path("mnt")
    os.mkdir(mnt)
    r = run_tool(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt])
    if r.returncode != 0:
        skip(name, "mount -t tmpfs refused here (tests need root): %s" % r.stderr.strip())
        return
    try:
        d.env["TT_DEVICE_LOG_DIR"] = d.log_dir = os.path.join(mnt, "logs")
        body(d)
    finally:
        d.stop()
        run_tool(["umount", "-l", mnt])  # lazy: a straggler holding a file cannot leak it


def test_full_disk_degrades_and_recovers():
    on_small_tmpfs("full-disk degraded mode", full_disk_body)


def test_start_on_full_disk_comes_up_degraded():
    on_small_tmpfs("start-up on a full disk", start_full_body)


def test_fresh_log_dir_on_full_disk_opens_the_store_later():
    on_small_tmpfs("fresh log dir on a full disk", fresh_full_body)


def test_clean_stop_then_full_disk_runs_the_queue_later():
    on_small_tmpfs("clean stop, then start-up on a full disk", clean_stop_full_body)


def full_disk_body(d):
    ledger = d.path("ledger")
    d.start()
    pairs = start_blocked_pairs(d, ledger)
    run1 = pairs["1"][0]
    filler = os.path.join(os.path.dirname(d.log_dir), "filler")
    fill(filler)
    r = try_post(d, {"cmd": ledger_cmd(ledger, "refused"), "device_id": "1"})
    tap.ok(r is not None and r.status == 503 and "degraded" in r.get("error", "")
           and "full" in r.get("error", ""), "disk full: POST /queue 503 with the reason", r)
    reason = degraded_reason(d)
    tap.ok(reason and "full" in reason, "/status worker.degraded_reason says why", reason)
    tap.eq(d.metric("ttq_store_degraded"), 1.0, "/metrics ttq_store_degraded 1")
    open_gate(pairs["1"][1])  # card 1's running job finishes during the fault
    wait_until(lambda: ledger_counts(ledger)["end1"], 10, "card 1's job to end")
    time.sleep(1.5)  # NEGATIVE CHECK: at least one retry passes; card 1 must stay idle
    tap.eq(ledger_counts(ledger)["queued1"], 0, "degraded: the idle card starts no queued job")
    tap.eq(db_status(d, run1), ("running", None), "the finished job is not yet on disk")
    tap.eq(try_post(d, {"cmd": "true"}).status, 503, "still 503 while the disk is full")
    os.unlink(filler)
    # No HTTP traffic now: recovery and dispatch must come from the daemon's own retry.
    wait_until(lambda: ledger_counts(ledger)["queued1"], 8,
               "card 1's queued job to start once the disk has room (no requests meanwhile)")
    tap.ok(True, "writable again: dispatch resumes by itself within seconds")
    tap.eq(degraded_reason(d), None, "degraded_reason cleared")
    tap.eq(d.metric("ttq_store_degraded"), 0.0, "ttq_store_degraded 0")
    tap.eq(db_status(d, run1), ("done", 0), "the completion of the job that ended during the "
           "fault is recorded")
    said = [x for x in d.stderr().splitlines() if "%s: cannot write meta.json" % run1 in x]
    tap.ok(len(said) == 1 and "No space left" in said[0] and "retry" not in said[0],
           "the meta.json the full disk refused is logged once, with its cause, and not "
           "retried", said)
    later = d.submit(ledger_cmd(ledger, "later"), device_id="1")
    open_gate(pairs["0"][1])
    done = [d.wait_done(j)["exit_code"] for j in
            (pairs["0"][0], pairs["0"][2], pairs["1"][2], later["job_id"])]
    tap.eq(done, [0, 0, 0, 0], "every acknowledged job is done")
    counts = ledger_counts(ledger)
    tap.eq((counts["refused"], max(counts.values())), (0, 1),
           "the refused job never ran; nothing ran twice")


def start_gated_and_queued(d):
    """Start d with a job running on card 0 behind a gate that never opens (run0 in the
    ledger) and one queued behind it (queued0). Returns (ledger, running id, queued id)."""
    ledger = d.path("ledger")
    d.start()
    wait = gate(d, "g0")[1]
    run = d.submit(ledger_cmd(ledger, "run0", wait), device_id="0")["job_id"]
    queued = d.submit(ledger_cmd(ledger, "queued0"), device_id="0")["job_id"]
    wait_until(lambda: ledger_counts(ledger)["run0"], 10, "the gated job to run")
    return ledger, run, queued


def start_full_body(d):
    """A restart after a crash finds the disk full: the daemon must come up degraded (answer,
    say why, keep the interrupted job's failure in memory) rather than exit and leave the
    host with no queue at all; it catches up once there is room."""
    ledger, run, queued = start_gated_and_queued(d)
    d.kill9()
    filler = os.path.join(os.path.dirname(d.log_dir), "filler")
    fill(filler)
    d.start()
    reason = degraded_reason(d)
    tap.ok(reason and "full" in reason, "restarted on a full disk: serving, degraded", reason)
    r = try_post(d, {"cmd": ledger_cmd(ledger, "refused")})
    tap.ok(r is not None and r.status == 503 and "full" in r.get("error", ""),
           "submissions get 503 with the reason", r)
    j = d.job(run)
    tap.ok(j["status"] == "done" and j["exit_code"] == -1, "the interrupted job failed", j)
    tap.eq(d.job(queued)["status"], "queued", "the queued job waits")
    os.unlink(filler)
    wait_until(lambda: ledger_counts(ledger)["queued0"], 8,
               "the queued job to run once the disk has room")
    tap.eq(d.wait_done(queued)["exit_code"], 0, "it runs once there is room")
    tap.eq(db_status(d, run), ("done", -1), "the interrupted job's failure is on disk")
    tap.eq((ledger_counts(ledger)["run0"], ledger_counts(ledger)["refused"]), (1, 0),
           "nothing ran twice, the refused job never ran")


def fresh_full_body(d):
    """No database yet and no room to create one: serve must come up all the same (degraded,
    saying why), not exit 1 into a restart loop that systemd gives up on, and open the store
    by itself once there is room."""
    ledger = d.path("ledger")
    filler = os.path.join(os.path.dirname(d.log_dir), "filler")
    fill(filler)
    d.start()
    tap.eq(d.stop(), 0, "SIGTERM while the store is not open: exit 0")
    d.start()
    st = d.status()
    reason = st["worker"]["degraded_reason"]
    tap.ok(reason and "job store" in reason and "full" in reason,
           "fresh log dir on a full disk: serving, degraded, saying why", reason)
    tap.eq(st["devices"], [], "no card is listed while the store is not open")
    tap.eq(d.metric("ttq_store_degraded"), 1.0, "/metrics ttq_store_degraded 1")
    r = try_post(d, {"cmd": ledger_cmd(ledger, "refused"), "device_id": "1"})
    tap.ok(r is not None and r.status == 503 and "full" in r.get("error", ""),
           "POST /queue 503 with the reason", r)
    tap.eq(r and r.headers.get("retry-after"), "1",
           "with Retry-After: 1 (RFC 9110 10.2.3): not handled, ask again")
    tap.eq(d.post("/reset", {"device_id": "0"}).status, 503, "POST /reset 503")
    tap.eq(d.post("/kill", {"device_id": "0"}).status, 503, "POST /kill 503")
    unknown = "0" * 32
    reads = [d.get(p % unknown) for p in ("/job/%s", "/result/%s?wait=1", "/logs/%s")]
    tap.eq([x.status for x in reads], [503, 503, 503],
           "job reads 503: the store that knows the job is not open")
    tap.eq([x.headers.get("retry-after") for x in reads], ["1", "1", "1"],
           "each with Retry-After: 1")
    tap.eq(d.get("/status").headers.get("retry-after"), None, "/status is answered, without it")
    os.unlink(filler)
    wait_until(lambda: degraded_reason(d) is None, 8, "the store to open once there is room")
    tap.eq(sorted(x["device_id"] for x in d.status()["devices"]), ["0", "1"],
           "the store opened: both cards listed")
    tap.eq(d.metric("ttq_store_degraded"), 0.0, "ttq_store_degraded 0")
    later = d.submit(ledger_cmd(ledger, "later"), device_id="1")["job_id"]
    tap.eq(d.wait_done(later)["exit_code"], 0, "a job submitted now runs")
    tap.eq(db_status(d, later), ("done", 0), "and is on disk")
    tap.eq(ledger_counts(ledger), collections.Counter(later=1), "the refused job never ran")


def clean_stop_full_body(d):
    """A database closed cleanly has no -wal or -shm: opening it in WAL mode creates them,
    which a full disk refuses. serve comes up degraded; once there is room the queued job
    runs by itself, with no request but /status polls."""
    ledger, run, queued = start_gated_and_queued(d)
    tap.eq(d.stop(), 0, "stopped cleanly")
    tap.eq([f for f in os.listdir(d.log_dir) if f.startswith("jobs.sqlite3-")], [],
           "a clean stop leaves no -wal or -shm")
    filler = os.path.join(os.path.dirname(d.log_dir), "filler")
    fill(filler)
    d.start()
    reason = degraded_reason(d)
    # The store's first open fails; a retry a second later finds the -wal and -shm it made
    # and opens, and then its first commit fails: either way the disk is named as the cause.
    tap.ok(reason and ("job store" in reason or "full" in reason),
           "restarted on a full disk: serving, degraded", reason)
    r = try_post(d, {"cmd": ledger_cmd(ledger, "refused")})
    tap.ok(r is not None and r.status == 503 and "degraded" in r.get("error", ""),
           "submissions get 503", r)
    time.sleep(1.5)  # NEGATIVE CHECK: at least one retry passes; the queued job must not run
    tap.eq(ledger_counts(ledger)["queued0"], 0, "the queued job waits while the store is shut")
    os.unlink(filler)
    wait_until(lambda: ledger_counts(ledger)["queued0"], 8,
               "the queued job to run by itself once the disk has room")
    tap.eq(degraded_reason(d), None, "degraded_reason cleared")
    tap.eq(d.wait_done(queued)["exit_code"], 0, "the queued job ran to its end")
    tap.eq(d.job(run)["exit_code"], -1, "the job the stop interrupted keeps its failure")
    counts = ledger_counts(ledger)
    tap.eq((counts["run0"], counts["queued0"], counts["refused"]), (1, 1, 0),
           "nothing ran twice, the refused job never ran")




def test_log_dir_removed_while_jobs_are_queued():
    """A tmp cleaner or a mistaken rm -rf of the log dir under a running daemon: status stayed
    healthy, every new job failed at once (exit 129, no folder), and commits went on into a
    database with no name left, so the history was gone at the next start."""
    d = fast_daemon()
    ledger = d.path("ledger")
    d.start()
    wait = gate(d, "g0")[1]
    run = d.submit(ledger_cmd(ledger, "run", wait), device_id="0")["job_id"]
    queued = [d.submit(ledger_cmd(ledger, "q%d" % k, "echo out%d" % k), device_id="0")["job_id"]
              for k in range(5)]
    wait_until(lambda: ledger_counts(ledger)["run"], 10, "the gated job to run")
    shutil.rmtree(d.log_dir)
    # No request now: an idle daemon must notice by itself.
    wait_until(lambda: os.path.exists(db_path(d)), 20, "the log dir and database made again")
    tap.ok(True, "an idle daemon makes the removed log dir and its database again")
    tap.eq(degraded_reason(d), None, "and is not degraded")
    late = d.submit(ledger_cmd(ledger, "late", "echo late-out"), device_id="1")["job_id"]
    j = d.wait_done(late)
    tap.eq((j["exit_code"], d.log_text(late)), (0, "late-out\n"),
           "a job after the removal runs in a folder of the new log dir")
    rows = dict(db_rows(d, "SELECT id, status FROM jobs"))
    tap.eq([rows.get(x) for x in [run] + queued], ["running"] + ["queued"] * 5,
           "the new database holds every job acknowledged before the removal")
    d.kill9()
    d.start()
    done = [d.wait_done(x)["exit_code"] for x in queued]
    tap.eq(done, [0] * 5, "after a restart every queued job runs")
    tap.eq([d.log_text(x) for x in queued], ["out%d\n" % k for k in range(5)],
           "each with its output")
    tap.eq((d.job(run)["exit_code"], d.job(late)["exit_code"]), (-1, 0),
           "the job running at the crash is interrupted; the later one kept its outcome")
    tap.eq(max(ledger_counts(ledger).values()), 1, "nothing ran twice")
    tap.eq(integrity(db_path(d)), [("ok",)], "the database made again is sound")


def test_log_dir_replaced_or_not_makeable():
    """A log dir replaced by an empty one is made the daemon's again; where one cannot be made
    (a file stands at its path) the store is degraded, with the reason in status, until it
    can; nothing acknowledged is lost either way."""
    d = fast_daemon(ids="0")
    ledger = d.path("ledger")
    d.start()
    wait = gate(d, "g0")[1]
    run = d.submit(ledger_cmd(ledger, "run", wait))["job_id"]
    wait_until(lambda: ledger_counts(ledger)["run"], 10, "the gated job to run")
    # a cleaner removing files, not the folder; the database last, as the daemon restores it
    # as soon as its name is gone
    for f in ("jobs.sqlite3-wal", "jobs.sqlite3-shm", "jobs.sqlite3"):
        os.unlink(os.path.join(d.log_dir, f))
    first = d.submit(ledger_cmd(ledger, "first"))["job_id"]
    tap.eq(sorted(r[0] for r in db_rows(d, "SELECT id FROM jobs")), sorted([run, first]),
           "a database removed from its folder is written there again, whole")
    os.rename(d.log_dir, d.log_dir + ".old")
    os.mkdir(d.log_dir)
    second = d.submit(ledger_cmd(ledger, "second"))["job_id"]
    tap.eq(sorted(r[0] for r in db_rows(d, "SELECT id FROM jobs")), sorted([run, first, second]),
           "a log dir replaced by an empty one gets the whole database")
    shutil.rmtree(d.log_dir)
    with open(d.log_dir, "w") as f:
        f.write("not a folder\n")
    reason = wait_until(lambda: degraded_reason(d), 20, "the daemon to notice")
    tap.ok("log dir" in reason, "where it cannot be made: degraded, saying why", reason)
    r = try_post(d, {"cmd": ledger_cmd(ledger, "refused")})
    tap.ok(r is not None and r.status == 503, "submissions get 503 meanwhile", r)
    os.unlink(d.log_dir)
    wait_until(lambda: degraded_reason(d) is None, 20, "the log dir to be made again")
    shutil.rmtree(d.log_dir)
    os.mkdir(d.log_dir)
    with open(db_path(d), "w") as f:
        f.write("someone else's\n")
    reason = wait_until(lambda: degraded_reason(d), 20, "the daemon to notice")
    tap.ok("already there" in reason, "a database someone put there is never replaced", reason)
    os.unlink(db_path(d))
    wait_until(lambda: degraded_reason(d) is None, 20, "the database to be written again")
    d.kill9()
    d.start()
    tap.eq([d.wait_done(x)["exit_code"] for x in (first, second)], [0, 0],
           "after a restart both queued jobs run")
    tap.eq(ledger_counts(ledger)["refused"], 0, "the refused one never ran")


def test_immutable_wal_degrades_and_recovers():
    """The -wal made read-only (chattr +i: writes fail with EPERM even for root and on open
    descriptors). Clients keep polling throughout: their traffic must not delay the retry."""
    d = fast_daemon()
    ledger = d.path("ledger")
    d.start()
    pairs = start_blocked_pairs(d, ledger, cards=("1",))
    wal = db_path(d) + "-wal"
    r = run_tool(["chattr", "+i", wal])
    if r.returncode != 0:
        skip("read-only -wal degraded mode", "chattr +i refused: %s" % r.stderr.strip())
        return
    try:
        r = try_post(d, {"cmd": ledger_cmd(ledger, "refused")})
        tap.ok(r is not None and r.status == 503 and "degraded" in r.get("error", ""),
               "read-only -wal: POST /queue 503", r)
        reason = degraded_reason(d)
        tap.ok(bool(reason), "degraded_reason: %s" % reason)
        r = d.post("/reset", {"device_id": "0"})
        tap.ok(r.status == 503 and "reset cannot be recorded" in (r.get("error") or ""),
               "a reset of idle card 0 is refused while writes fail (it could not be kept)", r)
        open_gate(pairs["1"][1])
        wait_until(lambda: ledger_counts(ledger)["end1"], 10, "card 1's job to end")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:  # NEGATIVE CHECK, with traffic every 50 ms
            d.status()
            time.sleep(0.05)
        tap.eq(ledger_counts(ledger)["queued1"], 0, "no dispatch while writes fail")
        tap.ok(not os.path.exists(d.reset_log), "and no reset starts either")
    finally:
        run_tool(["chattr", "-i", wal])
    t0 = time.monotonic()

    def recovered():
        time.sleep(0.05)
        return degraded_reason(d) is None
    wait_until(recovered, 8, "degraded mode to end while /status is polled every 50 ms")
    tap.ok(True, "recovered %.1fs after the file became writable, under steady traffic"
           % (time.monotonic() - t0))
    tap.eq(d.wait_done(pairs["1"][2])["exit_code"], 0, "the queued job runs after recovery")
    tap.eq(db_status(d, pairs["1"][0]), ("done", 0), "the fault-time completion is on disk")
    tap.eq(ledger_counts(ledger)["refused"], 0, "the refused job never ran")
    tap.eq(d.post("/reset", {"device_id": "0"}).get("action"), "scheduled",
           "after recovery a reset is taken")
    wait_until(lambda: d.dev(0)["reset_epoch"] == 1 and d.dev(0)["state"] == "healthy", 10,
               "card 0's reset to run after recovery")
    tap.eq(open(d.reset_log).read().split(), ["0"], "the reset ran once")


def test_locked_database_degrades_and_recovers():
    """Another connection holds the write lock past the busy timeout. The only write that
    failed was the refused submission itself: nothing else is waiting to be saved, and the
    store must still find out by itself that it is writable again."""
    d = fast_daemon()
    ledger = d.path("ledger")
    d.start()
    con = sqlite3.connect(db_path(d), isolation_level=None, timeout=0)
    try:
        con.execute("BEGIN EXCLUSIVE")
        r = try_post(d, {"cmd": ledger_cmd(ledger, "refused")}, timeout=20)
        tap.ok(r is not None and r.status == 503 and "locked" in r.get("error", ""),
               "locked past the busy timeout: 503 with the reason", r)
        tap.ok("locked" in (degraded_reason(d) or ""), "degraded_reason says locked")
        # The degraded store retries every second; a retry must not stop the loop for long.
        worst = 0.0
        for _ in range(12):
            t0 = time.monotonic()
            tap_ok = d.get("/status", timeout=10).status == 200
            worst = max(worst, time.monotonic() - t0 if tap_ok else 99)
            time.sleep(0.25)
        tap.ok(worst < 1.0, "/status answers within 1 s all along the lock (worst %.2f s)" % worst)
    finally:
        con.execute("ROLLBACK")
        con.close()

    def accepted():
        r = try_post(d, {"cmd": ledger_cmd(ledger, "accepted")})
        return r if r is not None and r.status == 200 else time.sleep(0.1)
    r = wait_until(accepted, 8, "POST /queue to be accepted after the lock is released")
    tap.eq(d.wait_done(r["job_id"])["exit_code"], 0, "submissions are taken and run again")
    tap.eq(degraded_reason(d), None, "degraded_reason cleared")
    tap.eq(ledger_counts(ledger)["refused"], 0, "the refused job never ran")


def test_outcome_reached_while_degraded_is_interrupted_by_a_crash():
    """A job ends while the store cannot be written: its "done" commit waits in memory. A crash
    then leaves it "running" on disk, and the next start fails it as interrupted (-1) as any
    job found running; its meta.json, written when it ended, is rewritten to agree."""
    d = fast_daemon(ids="0")
    ready, gate_path = d.path("ready"), d.path("gate")
    d.start()
    jid = d.submit("echo before; touch %s; while [ ! -e %s ]; do sleep 0.02; done; "
                   "echo after; exit 3" % (q(ready), q(gate_path)))["job_id"]
    wait_until(lambda: os.path.exists(ready), 10, "the job to run")
    con = sqlite3.connect(db_path(d), isolation_level=None, timeout=0)
    try:
        con.execute("BEGIN EXCLUSIVE")
        open_gate(gate_path)
        told = d.get("/result/%s?wait=20" % jid, timeout=30).json
        tap.ok(told["status"] == "done" and told["exit_code"] == 3,
               "while degraded the client is told exit 3", told)
        wait_until(lambda: "locked" in (degraded_reason(d) or ""), 10,
                   "the store to degrade on the done commit")
        d.kill9()
    finally:
        con.execute("ROLLBACK")
        con.close()
    with sqlite3.connect(db_path(d)) as db:
        row = db.execute("SELECT status FROM jobs WHERE id = ?", (jid,)).fetchone()
    db.close()
    tap.eq(row, ("running",), "the crash came before the done commit")
    d.start()
    job = d.job(jid)
    tap.ok(job["status"] == "done" and job["exit_code"] == -1 and "nterrupted" in job["error"],
           "after the restart it is interrupted (-1), as a job found running is", job)
    with open(os.path.join(d.log_dir, jid, "meta.json")) as f:
        meta = json.load(f)
    tap.eq((meta["exit_code"], meta["error"]), (-1, job["error"]), "meta.json says the same")


def test_cancel_refused_while_degraded():
    """A cancel that cannot be recorded is refused: answered "cancelled" but lost in a crash,
    the job would run after all."""
    d = fast_daemon()
    ledger, ready = d.path("ledger"), d.path("ready")
    d.start()
    gate = d.path("gate")
    d.submit("touch %s; while [ ! -e %s ]; do sleep 0.02; done" % (q(ready), q(gate)))
    wait_until(lambda: os.path.exists(ready), 10, "blocker running")
    queued = d.submit(ledger_cmd(ledger, "queued"))
    con = sqlite3.connect(db_path(d), isolation_level=None, timeout=0)
    try:
        con.execute("BEGIN EXCLUSIVE")
        try_post(d, {"cmd": "true"}, timeout=20)  # finds the store locked: degraded
        r = d.post("/kill", {"job_id": queued["job_id"]}, timeout=20)
        tap.ok(r.status == 503 and "cancel" in (r.get("error") or ""),
               "cancel of a queued job while degraded: 503 saying why", r)
        tap.eq(d.job(queued["job_id"])["status"], "queued", "the job stays queued")
    finally:
        con.execute("ROLLBACK")
        con.close()
    open(gate, "a").close()
    tap.eq(d.wait_done(queued["job_id"])["exit_code"], 0, "and runs once the store is back")
    tap.eq(ledger_counts(ledger)["queued"], 1, "exactly once")


def blocker_and_queued(d, token):
    """On a started daemon: a running job that waits for its gate, and one that writes token
    to the ledger queued behind it. Returns (queued job id, ledger, gate path)."""
    ledger, ready, gate_path = d.path("ledger"), d.path("ready"), d.path("gate")
    d.submit("touch %s; while [ ! -e %s ]; do sleep 0.02; done" % (q(ready), q(gate_path)))
    wait_until(lambda: os.path.exists(ready), 10, "blocker running")
    return d.submit(ledger_cmd(ledger, token))["job_id"], ledger, gate_path


def test_cancel_whose_commit_fails_is_refused():
    """The store is fine until the cancel's own commit fails (another connection holds the
    lock). The cancel was answered "cancelled" anyway, while the job stayed queued on disk and
    ran after a crash. It is now written before it takes effect: refused with 503, the job
    stays queued, and it runs once, also across a crash."""
    d = fast_daemon(ids="0")
    d.start()
    queued, ledger, gate_path = blocker_and_queued(d, "queued")
    tap.eq(degraded_reason(d), None, "the store is writable before the cancel")
    con = sqlite3.connect(db_path(d), isolation_level=None, timeout=0)
    try:
        con.execute("BEGIN EXCLUSIVE")
        r = d.post("/kill", {"job_id": queued}, timeout=20)
        tap.ok(r.status == 503 and "cancel cannot be recorded" in (r.get("error") or ""),
               "the cancel its commit could not record is refused with 503", r)
        tap.eq(d.job(queued)["status"], "queued", "the job stays queued")
        d.kill9()
    finally:
        con.execute("ROLLBACK")
        con.close()
    d.start()
    job = d.wait_done(queued)
    tap.eq(job["exit_code"], 0, "after the crash the job the cancel did not reach runs")
    tap.eq(ledger_counts(ledger)["queued"], 1, "once")
    # A cancel that was answered is on disk before the answer: a crash right after keeps it.
    os.unlink(d.path("ready"))  # the first blocker, interrupted by the crash, never got its gate
    queued = blocker_and_queued(d, "cancelled")[0]
    r = d.post("/kill", {"job_id": queued})
    tap.ok(r.status == 200 and "cancelled" in r.json, "a cancel is answered when recorded", r)
    d.kill9()
    d.start()
    job = d.job(queued)
    tap.ok(job["status"] == "done" and "Cancelled" in (job["error"] or ""),
           "after a crash the answered cancel holds", job)
    tap.eq(ledger_counts(ledger)["cancelled"], 0, "and the job never ran")


def test_reset_refused_when_it_cannot_be_recorded():
    """A reset request must set reset_pending durably. When its commit fails, or the
    store is already degraded, it is refused with 503: it was answered "scheduled" and
    preempted the running job, and a crash then lost the reset."""
    d = fast_daemon(ids="0")
    ready, gate_path = d.path("ready"), d.path("gate")
    d.start()
    jid = d.submit("touch %s; while [ ! -e %s ]; do sleep 0.02; done"
                   % (q(ready), q(gate_path)))["job_id"]
    wait_until(lambda: os.path.exists(ready), 10, "the job to run")
    con = sqlite3.connect(db_path(d), isolation_level=None, timeout=0)
    try:
        con.execute("BEGIN EXCLUSIVE")
        for when in ("its own commit fails", "the store is degraded"):
            r = d.post("/reset", {"device_id": 0}, timeout=20)
            tap.ok(r.status == 503 and "reset cannot be recorded" in (r.get("error") or ""),
                   "a reset request is refused with 503 when %s" % when, r)
            dev = d.dev(0)
            tap.ok(not dev["reset_pending"] and dev["current"]["job_id"] == jid,
                   "nothing is pending and the running job goes on (%s)" % when, dev)
        r = d.post("/reset", {}, timeout=20)
        tap.eq(r.status, 503, "a reset of every card is refused the same way")
        d.kill9()
    finally:
        con.execute("ROLLBACK")
        con.close()
    d.start()
    dev = d.dev(0)
    tap.ok(not dev["reset_pending"] and dev["reset_epoch"] == 0,
           "after a crash no reset was recorded, as the answers said", dev)
    tap.ok(not os.path.exists(d.reset_log), "and no reset command ran")
    r = d.post("/reset", {"device_id": 0})
    tap.eq(r.get("action"), "scheduled", "with the store back a reset is scheduled")
    wait_until(lambda: d.dev(0)["reset_epoch"] == 1, 15, "the reset to run")


def test_dropped_count_after_a_crash_is_a_floor():
    """Output over the log cap, then kill -9: the count of dropped bytes lived in memory, so the
    record said 0 (or the few bytes cut at the restart) with confidence. The first drop is now
    saved, and the restart's line says the count is a lower bound."""
    d = fast_daemon(ids="0", env={"TT_DEVICE_MAX_LOG_BYTES": "1024"})
    d.start()
    jid = d.submit("head -c 5000 /dev/zero | tr '\\0' b; echo; "
                   "head -c 3000 /dev/zero | tr '\\0' c; echo; exec sleep 60")["job_id"]

    def saved():
        with sqlite3.connect(db_path(d)) as db:
            row = db.execute("SELECT log_truncated, dropped_log_bytes FROM jobs WHERE id = ?",
                             (jid,)).fetchone()
        db.close()
        return row if row and row[0] else None
    row = wait_until(saved, 10, "the first drop to be saved")
    tap.ok(row[1] > 0, "the record on disk says output was dropped while the job runs", row)
    wait_until(lambda: d.job(jid)["dropped_log_bytes"] >= 6977, 10, "all the output dropped")
    d.kill9()
    d.start()
    job = d.job(jid)
    text = d.log_text(jid)
    last = text.rstrip("\n").rsplit("\n", 1)[-1]
    tap.ok(job["log_truncated"] and job["dropped_log_bytes"] >= row[1],
           "after the crash the record says the log is incomplete", job)
    tap.ok("at least" in last and "crash" in last,
           "its last line gives the count as a lower bound", last)


def test_start_whose_commit_fails_leaves_the_job_as_queued():
    """The commit that makes the next job running fails: the job goes back to the head of its
    queue exactly as it was (its process never started), not with the start's counters."""
    d = fast_daemon(ids="0")
    d.start()
    queued, ledger, gate_path = blocker_and_queued(d, "next")
    con = sqlite3.connect(db_path(d), isolation_level=None, timeout=0)
    try:
        con.execute("BEGIN EXCLUSIVE")
        open_gate(gate_path)
        wait_until(lambda: "locked" in (degraded_reason(d) or ""), 10,
                   "the commit of the start to fail")
        job = d.job(queued)
        tap.ok(job["status"] == "queued" and job["repeat_current"] == 0 and
               job["started_at"] is None, "the job is queued as before", job)
    finally:
        con.execute("ROLLBACK")
        con.close()
    tap.eq(d.wait_done(queued)["exit_code"], 0, "it runs once the store is back")
    tap.eq(ledger_counts(ledger)["next"], 1, "once")


def proc_state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def freeze(d):
    """SIGSTOP the daemon and wait until it is stopped: what happens meanwhile is met in one
    loop turn when it goes on (thaw)."""
    os.kill(d.proc.pid, signal.SIGSTOP)
    wait_until(lambda: proc_state(d.proc.pid) == "T", 10, "the daemon to stop")


def thaw(d):
    os.kill(d.proc.pid, signal.SIGCONT)


def test_refused_submission_whose_card_died_in_the_same_turn():
    """One loop turn takes a submission for card 0, then sees card 0's health check fail, which
    fails its queue with the new job in it; then the commit fails. The submission is refused
    (503) and forgotten whole: it was unlinked and freed once more, which corrupted the queue
    counts and crashed the daemon with a double free when the store came back. (The check's
    output line makes its end take two turns: the connection made while the daemon is stopped
    is accepted in the first, its request read in the second, with the end of that output.)"""
    d = fast_daemon(env={"TT_DEVICE_RESET_RETRIES": "0"})
    fifo, hpid = d.path("fifo"), d.path("health.pid")
    os.mkfifo(fifo)
    d.env["TT_DEVICE_HEALTH_CHECK_CMD"] = d.script(
        "health.sh", "echo $$ > %s.tmp; mv %s.tmp %s; read x < %s; echo unhealthy; exit 1"
        % (q(hpid), q(hpid), q(hpid), q(fifo))) + " {device}"
    d.start()
    ledger = d.path("ledger")
    tap.eq(d.post("/reset", {"device_id": 0}).get("action"), "scheduled", "reset of card 0")
    wait_until(lambda: os.path.exists(hpid), 10, "the health check to wait on its fifo")
    with open(hpid) as f:
        health = int(f.read())
    con = sqlite3.connect(db_path(d), isolation_level=None, timeout=0)
    client = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
    try:
        freeze(d)
        client.request("POST", "/queue", json.dumps({"cmd": ledger_cmd(ledger, "refused"),
                                                     "device_id": "0"}),
                       {"Content-Type": "application/json"})
        with open(fifo, "w") as f:
            f.write("fail\n")
        wait_until(lambda: proc_state(health) == "Z", 10, "the health check to exit")
        con.execute("BEGIN EXCLUSIVE")
        thaw(d)
        r = client.getresponse()
        body = json.loads(r.read() or b"{}")
        tap.ok(r.status == 503 and "not queued" in body.get("error", ""),
               "the submission is refused: the store could not record it", (r.status, body))
        tap.eq(d.status()["queued_total"], 0, "no queue count went below zero")
    finally:
        thaw(d)
        client.close()
        con.execute("ROLLBACK")
        con.close()
    wait_until(lambda: degraded_reason(d) is None, 15, "the store to be written again")
    tap.ok(d.alive(), "the daemon lives on once the store is back (no double free)",
           d.stderr()[-600:])
    st = d.status()
    tap.ok(st["queued_total"] == 0 and st["devices"][0]["state"] == "dead",
           "card 0 is dead with nothing queued", st)
    tap.eq(ledger_counts(ledger)["refused"], 0, "the refused job never ran")
    tap.eq(d.metric('ttq_jobs_finished_total{device="0",outcome="cancelled"}'), 0.0,
           "nor is it counted in /metrics")


def test_recent_forgets_deleted_jobs():
    """Retention deletes a job: /status must not list it in recent any more."""
    d = fast_daemon()
    d.start()
    ids = [d.submit("true", device_id="1")["job_id"] for _ in range(4)]
    for i in ids:
        d.wait_done(i)
    d.stop()
    d.start(env={"TT_DEVICE_MAX_COMPLETED_JOBS": "2"})
    recent = [x["job_id"] for x in d.dev("1")["recent"]]
    tap.eq(recent, ids[2:], "recent lists only the jobs retention kept")
    tap.eq(d.get("/job/" + ids[0]).status, 404, "the deleted job is gone")


# ---------------------------------------------------------------- power-loss durability

def strace_lines(trace):
    with open(trace) as f:
        return f.read().splitlines()


def first_after(lines, start, pred):
    return next((i for i in range(start + 1, len(lines)) if pred(lines[i])), None)


def is_wal_sync(ln):
    return ("fdatasync(" in ln or "fsync(" in ln) and "jobs.sqlite3-wal" in ln


def test_fsync_before_ack_and_spawn_group_commit():
    """strace of the daemon: the -wal is fsync'd after a submission is read and before its 200
    and before its job's shell is exec'd; 20 submissions that arrive together share a few
    commits (group commit) instead of paying one fsync each."""
    d = fast_daemon()
    d.start()
    if not tap.ok(shutil.which("strace"), "strace is installed (.ci/run installs it)"):
        return
    trace = d.path("strace.out")
    conns = [http.client.HTTPConnection("127.0.0.1", d.port, timeout=30) for _ in range(20)]
    for c in conns:  # connected, accepted and idle before the burst
        c.request("GET", "/status")
        c.getresponse().read()
    st = subprocess.Popen(["strace", "-f", "-qq", "-y", "-s", "40", "-o", trace, "-e",
                           "trace=fsync,fdatasync,read,recvfrom,write,writev,sendto,sendmsg,"
                           "execve", "-p", str(d.proc.pid)], stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: d.status() and os.path.exists(trace) and os.path.getsize(trace), 10,
                   "strace to attach")
        one = d.submit("true")
        d.wait_done(one["job_id"])
        os.kill(d.proc.pid, signal.SIGSTOP)  # the burst arrives while the loop is stopped
        try:
            for i, c in enumerate(conns):
                c.request("POST", "/queue", body='{"cmd": "true", "device_id": "%d"}' % (i % 2))
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        codes = [c.getresponse().status for c in conns]
    finally:
        for c in conns:
            c.close()
        st.send_signal(signal.SIGINT)
        st.wait(10)
    lines = strace_lines(trace)
    post = first_after(lines, -1, lambda ln: '"POST /queue' in ln)
    sync = first_after(lines, post, is_wal_sync) if post is not None else None
    ack = first_after(lines, post, lambda ln: "HTTP/1.1 200" in ln) if post else None
    bash = first_after(lines, post, lambda ln: "execve(" in ln and "bash" in ln) if post else None
    tap.ok(None not in (sync, ack, bash) and sync < ack and sync < bash,
           "a submission's commit is fsync'd before its 200 and before its shell starts",
           "post %s sync %s ack %s exec %s\n%s" % (post, sync, ack, bash,
                                                   "\n".join(lines[-20:])))
    tap.eq(codes, [200] * 20, "the burst of 20 submissions is acknowledged")
    burst = first_after(lines, ack or 0, lambda ln: '"POST /queue' in ln)
    acks = [i for i, ln in enumerate(lines) if burst is not None and i > burst
            and "HTTP/1.1 200" in ln]
    syncs = [i for i in range(burst or 0, acks[-1] if acks else 0) if is_wal_sync(lines[i])]
    tap.ok(len(acks) == 20 and 1 <= len(syncs) <= 8,
           "group commit: 20 acknowledgements after %d -wal fsyncs" % len(syncs))


# ---------------------------------------------------------------- migration and refusal

# The earlier single-card service's schema, exactly as it creates it.
OLD_JOBS = """CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, cmd TEXT NOT NULL,
    cwd TEXT NOT NULL, timeout INTEGER NOT NULL, repeat INTEGER NOT NULL,
    env_json TEXT NOT NULL, mode TEXT NOT NULL, client_id TEXT NOT NULL,
    reset_epoch INTEGER NOT NULL, submitted REAL NOT NULL, status TEXT NOT NULL,
    exit_code INTEGER, elapsed REAL, output_file TEXT NOT NULL, started_at REAL,
    finished_at REAL, repeat_current INTEGER NOT NULL, repeat_completed INTEGER NOT NULL,
    first_iteration_elapsed REAL, per_iter_estimate_sec REAL NOT NULL,
    stop_requested_at REAL, stop_escalated_at REAL, log_size INTEGER NOT NULL,
    log_truncated INTEGER NOT NULL, dropped_log_bytes INTEGER NOT NULL,
    timed_out INTEGER NOT NULL, error TEXT, updated_at REAL NOT NULL)"""
OLD_STATE = """CREATE TABLE IF NOT EXISTS device_state (
    singleton INTEGER PRIMARY KEY CHECK(singleton = 1), state TEXT NOT NULL,
    reset_epoch INTEGER NOT NULL, reset_pending INTEGER NOT NULL, boot_id TEXT NOT NULL,
    last_reset_at REAL, dead_since REAL, dead_reason TEXT, updated_at REAL NOT NULL)"""
OLD_INDEXES = """CREATE INDEX idx_jobs_status_seq ON jobs(status, seq);
CREATE INDEX idx_jobs_finished ON jobs(finished_at DESC);"""
# Jobs of the fixture in submission order: done (A, F), the one running at the stop (B),
# queued (C with repeat 2 and an env, then D).
A, F, B, C, D = "a" * 32, "f" * 32, "b" * 32, "c" * 32, "d" * 32
OLD_COLS = ("id", "cmd", "cwd", "timeout", "repeat", "env_json", "mode", "client_id",
            "reset_epoch", "submitted", "status", "exit_code", "elapsed", "output_file",
            "started_at", "finished_at", "repeat_current", "repeat_completed",
            "first_iteration_elapsed", "per_iter_estimate_sec", "stop_requested_at",
            "stop_escalated_at", "log_size", "log_truncated", "dropped_log_bytes", "timed_out",
            "error", "updated_at")


def old_job(d, job_id, cmd, submitted, epoch, **fields):
    """A row as the earlier service writes it: every NOT NULL column set, env_json '{}' when
    the job has no env, REAL epoch times, output_file <log dir>/<id>/output named (and its
    folder made) at submission, log_size and counters as of its last save."""
    row = dict(id=job_id, cmd=cmd, cwd=d.tmp, timeout=3600, repeat=1, env_json="{}",
               mode="run", client_id="cli-1000", reset_epoch=epoch, submitted=submitted,
               status="queued", exit_code=None, elapsed=None,
               output_file=os.path.join(d.log_dir, job_id, "output"), started_at=None,
               finished_at=None, repeat_current=0, repeat_completed=0,
               first_iteration_elapsed=None, per_iter_estimate_sec=10.0,
               stop_requested_at=None, stop_escalated_at=None, log_size=0, log_truncated=0,
               dropped_log_bytes=0, timed_out=0, error=None, updated_at=submitted)
    row.update(fields)
    os.makedirs(os.path.join(d.log_dir, job_id), mode=0o700)
    return row


def old_output(d, job_id, text, meta=None):
    with open(os.path.join(d.log_dir, job_id, "output"), "w") as f:
        f.write(text)
    if meta is not None:  # the earlier service's final record beside a done job's output
        with open(os.path.join(d.log_dir, job_id, "meta.json"), "w") as f:
            json.dump(meta, f, indent=2, sort_keys=True)


def build_old_db(d, version=2, state=("healthy", "test-boot-1"), epoch=3, stop="crash"):
    """The earlier service's logs-v2/ as it leaves it after a crash (B still `running`) or a
    clean stop (B ended by SIGINT, exit -2), with its device_state row (state, boot id)."""
    ledger = d.path("ledger")
    t = time.time() - 300
    rows = [
        old_job(d, A, "echo old", t, epoch, status="done", exit_code=0, elapsed=2.25,
                started_at=t + 0.01, finished_at=t + 2.26, repeat_current=1,
                repeat_completed=1, first_iteration_elapsed=2.22,
                per_iter_estimate_sec=2.2249, log_size=11, updated_at=t + 2.26),
        old_job(d, F, "echo failing; exit 3", t + 3, epoch, status="done", exit_code=3,
                elapsed=1.04, started_at=t + 3.01, finished_at=t + 4.05, repeat_current=1,
                log_size=8, updated_at=t + 4.05),
        old_job(d, B, ledger_cmd(ledger, "b_ran", "sleep 1000"), t + 5, epoch,
                status="running", started_at=t + 5.01, repeat_current=1,
                updated_at=t + 5.02),
        old_job(d, C, ledger_cmd(ledger, "c_$OLD$TWO"), t + 6, epoch, repeat=2,
                env_json='{"OLD": "env", "TWO": "2"}'),
        old_job(d, D, ledger_cmd(ledger, "d"), t + 7, epoch),
    ]
    old_output(d, A, "old output\n", {"job_id": A, "status": "done", "exit_code": 0})
    old_output(d, F, "failing\n", {"job_id": F, "status": "done", "exit_code": 3})
    old_output(d, B, "started\n")
    if stop == "clean":
        rows[2].update(status="done", exit_code=-2, elapsed=4.34, finished_at=t + 9.35,
                       stop_requested_at=t + 9.33, log_size=8, updated_at=t + 9.35)
        old_output(d, B, "started\n", {"job_id": B, "status": "done", "exit_code": -2})
    # A crash leaves what was committed last in the -wal (no checkpoint at a close): the
    # rows are written by a child that dies without closing; a clean stop checkpoints.
    pid = os.fork() if stop == "crash" else 0
    if pid:
        _, st = os.waitpid(pid, 0)
        assert st == 0 and os.path.getsize(db_path(d) + "-wal") > 0, "the crash left no -wal"
        return
    try:
        con = write_old_db(d, rows, state, epoch, version, t)
    except BaseException:
        if stop == "crash":
            os._exit(1)  # the child never goes on with the tests
        raise
    if stop == "crash":
        os._exit(0)
    con.close()  # the last close checkpoints the -wal, as a clean stop does


def write_old_db(d, rows, state, epoch, version, t):
    con = sqlite3.connect(db_path(d))
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute(OLD_JOBS)
    con.execute(OLD_STATE)
    con.executescript(OLD_INDEXES)
    con.executemany("INSERT INTO jobs (%s) VALUES (%s)" % (", ".join(OLD_COLS),
                                                           ", ".join("?" * len(OLD_COLS))),
                    [tuple(r[c] for c in OLD_COLS) for r in rows])
    if state:
        dead = state[0] == "dead"
        con.execute("INSERT INTO device_state VALUES (1, ?, ?, 0, ?, ?, ?, ?, ?)",
                    (state[0], epoch, state[1], t - 1000, t + 1 if dead else None,
                     "old reset failed" if dead else None, t + 1))
    con.execute("PRAGMA user_version = %d" % version)
    con.commit()
    return con


def new_log_dir(d):
    os.makedirs(d.log_dir, mode=0o700)


def check_upgrade(stop):
    """Start on the earlier service's logs-v2/ left by a crash or a clean stop."""
    d = fast_daemon()
    new_log_dir(d)
    build_old_db(d, stop=stop)
    ledger = d.path("ledger")
    d.start()
    what = "after a %s of the earlier service" % stop
    c, dd = d.wait_done(C), d.wait_done(D)
    tap.eq(degraded_reason(d), None, "%s: the migrated store works (not degraded)" % what)
    tap.eq((c["device_id"], c["exit_code"], c["repeat"], c["repeat_completed"]),
           ("0", 0, 2, 2), "%s: its queued job ran on card 0 with its repeat" % what)
    with open(ledger) as f:
        tap.eq(f.read().split(), ["c_env2", "c_env2", "d"],
               "%s: its queued jobs ran in their order, with their env, once each" % what)
    tap.eq((dd["device_id"], dd["exit_code"]), ("0", 0), "%s: and the next one too" % what)
    b = d.job(B)
    if stop == "crash":
        tap.ok(b["device_id"] == "0" and b["exit_code"] == -1 and "nterrupted" in b["error"],
               "%s: the job it left running ended -1 on card 0" % what, b)
    else:
        tap.eq((b["device_id"], b["status"], b["exit_code"]), ("0", "done", -2),
               "%s: the job it stopped keeps its outcome" % what)
    tap.eq(ledger_counts(ledger)["b_ran"], 0, "%s: and was not run again" % what)
    a = d.job(A)
    tap.eq((a["device_id"], a["status"], a["exit_code"], a["cmd"], a["client_id"]),
           ("0", "done", 0, "echo old", "cli-1000"), "%s: its done job reads back" % what)
    tap.ok(isinstance(a["finished_at"], str) and a["finished_at"][:2] == "20",
           "%s: REAL epoch times read back as ISO times" % what, a["finished_at"])
    tap.eq(d.cli("result", A)[:2], (0, "old output\n"), "%s: with its output" % what)
    tap.eq(d.cli("result", F)[:2], (3, "failing\n"), "%s: and its status" % what)
    for card in ("0", "1"):
        rc, out, err = d.cli("run", "--device", card, "--", "echo new on $TT_DEVICE_JOB_ID")
        tap.ok(rc == 0 and out.startswith("new on "),
               "%s: a new job runs on card %s" % (what, card), (rc, out, err))
    card0, card1 = d.dev(0), d.dev(1)
    tap.eq((card0["state"], card0["reset_epoch"]), ("healthy", 3),
           "%s: card 0 has the old state" % what)
    tap.eq((card1["state"], card1["reset_epoch"]), ("healthy", 0),
           "%s: card 1 starts fresh" % what)
    d.stop()
    tap.eq(db_rows(d, "PRAGMA user_version"), [(7,)], "%s: user_version 7" % what)
    tap.eq(db_rows(d, "SELECT count(*) FROM sqlite_master WHERE name = 'device_state'"),
           [(0,)], "%s: device_state moved into cards" % what)
    before, seen = ledger_counts(ledger), len(d.stderr())
    d.start()
    tap.ok("recovered 0 queued jobs; 0 interrupted" in d.stderr()[seen:],
           "%s: a restart is clean (nothing to recover)" % what, d.stderr()[seen:])
    tap.eq(d.wait_done(d.submit("true", device_id="0")["job_id"])["exit_code"], 0,
           "%s: the restarted daemon takes jobs" % what)
    tap.eq((degraded_reason(d), ledger_counts(ledger), d.job(A)["status"]),
           (None, before, "done"), "%s: after the restart nothing ran again" % what)
    d.cleanup()


def test_migration_of_earlier_service_db():
    for stop in ("crash", "clean"):
        check_upgrade(stop)


def test_migration_dead_card_same_and_new_boot():
    for version, boot, want in ((2, "test-boot-1", "dead"), (1, "older-boot", "healthy")):
        d = fast_daemon()
        new_log_dir(d)
        build_old_db(d, version=version, state=("dead", boot), epoch=5)
        d.start()
        c0 = d.dev(0)
        if want == "dead":
            tap.ok(c0["state"] == "dead" and c0["dead_reason"] == "old reset failed",
                   "v%d: dead in this boot: card 0 stays dead" % version, c0)
            r = d.post("/queue", {"cmd": "true", "device_id": "0"})
            tap.eq(r.status, 503, "its submissions get 503")
            c = d.wait_done(C)
            tap.ok(c["exit_code"] == -1 and "dead" in c["error"],
                   "its old queued job finished with the dead-card error", c)
        else:
            tap.eq((c0["state"], c0["reset_epoch"]), ("healthy", 6),
                   "v%d: dead in an earlier boot: healthy with epoch + 1" % version)
            tap.eq(d.wait_done(C)["exit_code"], 0, "and its old queued job runs")
        tap.eq(d.dev(1)["state"], "healthy", "card 1 untouched")
        d.cleanup()


def test_refuses_pre_v2_and_newer_schema():
    cases = (
        ("pre-v2", "CREATE TABLE jobs (id TEXT PRIMARY KEY, cmd TEXT, state TEXT, "
                   "exit_code INTEGER); PRAGMA user_version = 1;"),
        ("newer", OLD_JOBS + "; ALTER TABLE jobs ADD COLUMN device INTEGER; "
                  "PRAGMA user_version = 9;"),
    )
    for name, sql in cases:
        d = fast_daemon()
        new_log_dir(d)
        con = sqlite3.connect(db_path(d))
        con.executescript(sql)
        con.close()
        os.chmod(db_path(d), 0o644)
        before = (file_digest(db_path(d)), sorted(os.listdir(d.log_dir)))
        d.start(wait=False)
        rc = wait_exit(d)
        d.stop()
        tap.ok(rc not in (None, 0) and "logs-v2" in d.stderr(),
               "%s database: serve exits %s telling to use a fresh logs-v2/" % (name, rc),
               d.stderr()[-400:])
        tap.eq(d.stderr().count(os.path.realpath(db_path(d))), 1,
               "%s database: the message names the file once" % name)
        tap.eq((file_digest(db_path(d)), sorted(os.listdir(d.log_dir))), before,
               "%s database: the file is unchanged, nothing added beside it" % name)
        d.cleanup()


# ---------------------------------------------------------------- cards gone or dead at start

def test_removed_card_jobs_finish_with_error():
    d = fast_daemon()
    d.start()
    ledger = d.path("ledger")
    g, wait = gate(d, "g1")
    run = d.submit(ledger_cmd(ledger, "run1", wait), device_id="1")
    queued = [d.submit(ledger_cmd(ledger, "gone%d" % i), device_id="1")["job_id"]
              for i in range(2)]
    wait_until(lambda: ledger_counts(ledger)["run1"], 10, "card 1's job to run")
    d.kill9()
    d.start(env={"TT_DEVICE_IDS": "0"})
    for jid in queued:
        j = d.wait_done(jid)
        tap.ok(j["device_id"] == "1" and j["exit_code"] == -1
               and "no longer configured" in j["error"] and "never ran" in j["error"],
               "queued job of a removed card: done, -1, clear error", j)
    tap.ok("no longer configured" in d.log_text(queued[0]), "and a log line saying so")
    r = d.wait_done(run["job_id"])
    tap.ok(r["exit_code"] == -1 and "nterrupted" in r["error"] and "never ran" not in r["error"],
           "a removed card's job found running: -1 interrupted (it did run)", r)
    open_gate(g)
    tap.eq([c["device_id"] for c in d.status()["devices"]], ["0"], "only card 0 is listed")
    tap.eq(d.post("/queue", {"cmd": "true", "device_id": "1"}).status, 400,
           "a removed card is not a queue: 400")
    tap.eq(sum(ledger_counts(ledger)[t] for t in ("gone0", "gone1")), 0, "they never ran")


def test_dead_card_of_this_boot_stays_listed():
    d = fast_daemon()
    d.start()
    d.stop()
    con = sqlite3.connect(db_path(d))
    con.execute("UPDATE cards SET state = 'dead', dead_since = ?, dead_reason = 'test: dead' "
                "WHERE device = 1", (time.time(),))
    con.commit()
    con.close()
    d.start(env={"TT_DEVICE_IDS": "0"})
    cards = {c["device_id"]: c["state"] for c in d.status()["devices"]}
    tap.eq(cards, {"0": "healthy", "1": "dead"}, "a card dead in this boot stays listed (dead)")
    tap.eq(d.post("/queue", {"cmd": "true", "device_id": "1"}).status, 503,
           "its submissions get 503, not 400")
    d.stop()
    with open(d.path("boot_id"), "w") as f:
        f.write("test-boot-2\n")
    d.start(env={"TT_DEVICE_IDS": "0"})
    tap.eq([c["device_id"] for c in d.status()["devices"]], ["0"],
           "after a reboot the vanished card is no longer listed")


# ---------------------------------------------------------------- retention

def test_retention_by_days_and_count():
    d = fast_daemon()
    d.start()
    ids = []
    for i in range(6):  # one at a time: finished_at follows i
        ids.append(d.submit("echo %d" % i, device_id=str(i % 2))["job_id"])
        d.wait_done(ids[-1])
    orphan = "0123456789abcdef0123456789abcdef"
    for name in ("notajob", orphan, "ABCDEF0123456789ABCDEF0123456789"):
        os.mkdir(os.path.join(d.log_dir, name))
        open(os.path.join(d.log_dir, name, "keep"), "w").close()
    d.stop()
    con = sqlite3.connect(db_path(d))
    con.executemany("UPDATE jobs SET finished_at = finished_at - ? WHERE id = ?",
                    [(3 * DAY, ids[0]), (2 * DAY, ids[3])])  # aged past one day
    os.mkdir(d.path("outside"))
    for bad in ("../outside", "notajob"):  # rows no daemon writes: ids that name other folders
        con.execute("INSERT INTO jobs (id, cmd, status, finished_at, device) "
                    "VALUES (?, 'x', 'done', ?, 0)", (bad, time.time() - 5 * DAY))
    con.commit()
    con.close()

    def present():
        return [d.get("/job/" + j).status == 200 and
                os.path.isdir(os.path.join(d.log_dir, j)) for j in ids]
    d.start(env={"TT_DEVICE_RETENTION_DAYS": "1"})
    tap.eq(present(), [False, True, True, False, True, True],
           "RETENTION_DAYS=1: exactly the two aged jobs and their folders are gone")
    d.stop()
    d.start(env={"TT_DEVICE_RETENTION_DAYS": "0", "TT_DEVICE_MAX_COMPLETED_JOBS": "2"})
    tap.eq(present(), [False, False, False, False, True, True],
           "MAX_COMPLETED_JOBS=2: only the two newest completed jobs are kept")
    left = sorted(os.listdir(d.log_dir))
    tap.ok({"notajob", orphan, "ABCDEF0123456789ABCDEF0123456789"} <= set(left),
           "folders that are not jobs of the database are never touched", left)
    tap.ok(os.path.isdir(d.path("outside")) and db_rows(
        d, "SELECT count(*) FROM jobs WHERE id IN ('../outside', 'notajob')") == [(0,)],
        "rows with ids that are not job ids are deleted, their 'folders' left alone")
    tap.eq(d.status()["worker"]["maintenance_warning"], None, "no maintenance warning")


def test_retention_failure_is_a_warning_not_a_stop():
    d = fast_daemon()
    d.start()
    old = d.submit("echo old")["job_id"]
    d.wait_done(old)
    d.stop()
    con = sqlite3.connect(db_path(d))
    con.execute("UPDATE jobs SET finished_at = finished_at - ? WHERE id = ?", (3 * DAY, old))
    con.commit()
    con.close()
    stuck = os.path.join(d.log_dir, old, "output")
    r = run_tool(["chattr", "+i", stuck])
    if r.returncode != 0:
        skip("retention failure", "chattr +i refused: %s" % r.stderr.strip())
        return
    try:
        d.start(env={"TT_DEVICE_RETENTION_DAYS": "1"})
        warning = d.status()["worker"]["maintenance_warning"]
        tap.ok(warning and old in warning, "a folder retention cannot remove is a "
               "maintenance_warning naming the job", warning)
        tap.eq(d.get("/job/" + old).status, 200,
               "the job is kept while its folder stays, so a later pass can still find it")
        tap.eq(d.wait_done(d.submit("true")["job_id"])["exit_code"], 0, "and service goes on")
    finally:
        run_tool(["chattr", "-i", stuck])
    d.stop()
    d.start(env={"TT_DEVICE_RETENTION_DAYS": "1"})  # retention runs at start-up
    tap.ok(d.get("/job/" + old).status == 404 and not os.path.exists(os.path.join(
        d.log_dir, old)), "once the obstacle is gone, the next pass removes folder and job")
    tap.eq(d.status()["worker"]["maintenance_warning"], None, "and the warning clears")


# ---------------------------------------------------------------- permissions

def test_database_and_folders_private():
    d = fast_daemon()
    d.start()
    j = d.submit("echo private")
    d.wait_done(j["job_id"])

    def mode(*p):
        return oct(os.stat(os.path.join(d.log_dir, *p)).st_mode & 0o777)
    tap.eq([mode("jobs.sqlite3"), mode("jobs.sqlite3-wal"), mode("jobs.sqlite3-shm")],
           ["0o600"] * 3, "database, -wal and -shm are 0600")
    tap.eq([mode(), mode(j["job_id"])], ["0o700"] * 2, "log dir and job folder 0700")
    tap.eq([mode(j["job_id"], "output"), mode(j["job_id"], "meta.json")], ["0o600"] * 2,
           "output and meta.json 0600")
    d.stop()
    for p in ("jobs.sqlite3", "jobs.sqlite3-wal", "jobs.sqlite3-shm"):
        if os.path.exists(os.path.join(d.log_dir, p)):
            os.chmod(os.path.join(d.log_dir, p), 0o644)
    d.start()
    tap.eq(mode("jobs.sqlite3"), "0o600", "an older, wider database file is tightened to 0600")


def test_existing_log_dir_made_private():
    """A log dir that already exists with a wider mode is tightened to 0700 when it is ours;
    one that belongs to another user keeps its mode, and the daemon says so and serves."""
    d = fast_daemon()
    os.makedirs(d.log_dir)
    os.chmod(d.log_dir, 0o755)
    d.start()
    tap.eq(oct(os.stat(d.log_dir).st_mode & 0o7777), "0o700", "an existing 0755 log dir is 0700")
    d.stop()
    if os.geteuid() != 0:
        skip("log dir of another user", "chown needs root")
        return
    os.chmod(d.log_dir, 0o755)
    os.chown(d.log_dir, 65534, 65534)
    try:
        d.start()
        tap.eq(oct(os.stat(d.log_dir).st_mode & 0o7777), "0o755",
               "a log dir of another user keeps its mode")
        tap.ok(re.search(r"WARNING: TT_DEVICE_LOG_DIR \S+ belongs to uid 65534", d.stderr()),
               "and a warning says whose it is", d.stderr()[-600:])
        tap.eq(d.wait_done(d.submit("true")["job_id"])["exit_code"], 0, "the daemon serves")
    finally:
        d.stop()
        os.chown(d.log_dir, os.geteuid(), os.getegid())


def fill_to_the_byte(path):
    """Write zeros to path until not one more byte fits (unbuffered, ever smaller writes)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (65536, 4096, 512, 1):
            try:
                while os.write(fd, b"\0" * size) > 0:
                    pass
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)


def test_health_script_not_left_empty_by_a_full_disk():
    on_small_tmpfs("built-in health_check.py on a full disk", health_script_full_body)


def health_script_full_body(d):
    """The built-in health_check.py is written to the log dir at each start. On a full disk
    a truncated, empty copy would pass every health check (python3 runs an empty file and
    exits 0); it must be absent instead, and written whole once there is room."""
    import ttqlib
    del d.env["TT_DEVICE_HEALTH_CHECK_CMD"]  # the default: ~/tenstorrent/.venv/bin/python3 ...
    sizes = d.path("sizes")
    venv = os.path.join(d.env["HOME"], "tenstorrent", ".venv", "bin")
    os.makedirs(venv)
    with open(os.path.join(venv, "python3"), "w") as f:  # records the script's size it got
        f.write("#!/bin/sh\nwc -c < \"$1\" >> %s\n" % q(sizes))
    os.chmod(os.path.join(venv, "python3"), 0o755)
    os.makedirs(d.path("bin"))
    exe = d.path("bin", "tt-device-queue")  # no health_check.py beside it
    shutil.copy2(ttqlib.BINARY, exe)
    old, ttqlib.BINARY = ttqlib.BINARY, exe
    try:
        d.start()
        script = os.path.join(d.log_dir, "health_check.py")
        want = os.path.getsize(script)
        d.kill9()  # keeps the -wal and -shm files: the store opens on a full disk
        os.unlink(script)
        filler = os.path.join(os.path.dirname(d.log_dir), "filler")
        fill_to_the_byte(filler)
        d.start()
        tap.ok(not os.path.exists(script) or os.path.getsize(script) == want,
               "on a full disk no partial health_check.py is left")
        os.unlink(filler)
        wait_until(lambda: degraded_reason(d) is None, 10, "the store to catch up")
        d.post("/reset", {"device_id": "0"})
        wait_until(lambda: d.dev(0)["reset_epoch"] == 1 and not d.dev(0)["reset_pending"], 15,
                   "the reset of card 0")
        with open(sizes) as f:
            got = [int(x) for x in f.read().split()]
        tap.eq(got, [want], "the reset's health check ran the whole script")
    finally:
        ttqlib.BINARY = old


TESTS = (test_crash_safety_under_sigkill, test_health_script_not_left_empty_by_a_full_disk,
         test_full_disk_degrades_and_recovers,
         test_start_on_full_disk_comes_up_degraded,
         test_fresh_log_dir_on_full_disk_opens_the_store_later,
         test_clean_stop_then_full_disk_runs_the_queue_later,
         test_immutable_wal_degrades_and_recovers, test_locked_database_degrades_and_recovers,
         test_outcome_reached_while_degraded_is_interrupted_by_a_crash,
         test_fsync_before_ack_and_spawn_group_commit, test_migration_of_earlier_service_db,
         test_migration_dead_card_same_and_new_boot, test_refuses_pre_v2_and_newer_schema,
         test_removed_card_jobs_finish_with_error, test_dead_card_of_this_boot_stays_listed,
         test_retention_by_days_and_count, test_retention_failure_is_a_warning_not_a_stop,
         test_database_and_folders_private, test_existing_log_dir_made_private,
         test_cancel_refused_while_degraded, test_cancel_whose_commit_fails_is_refused,
         test_reset_refused_when_it_cannot_be_recorded,
         test_dropped_count_after_a_crash_is_a_floor,
         test_start_whose_commit_fails_leaves_the_job_as_queued,
         test_refused_submission_whose_card_died_in_the_same_turn,
         test_recent_forgets_deleted_jobs,
         test_log_dir_removed_while_jobs_are_queued, test_log_dir_replaced_or_not_makeable)
run_tests(*TESTS)

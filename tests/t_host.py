#!/usr/bin/env python3
"""The card as the host sees it: processes outside the queue, and the health check after a job
that ended badly.

Prints TAP. The real daemon runs with TT_DEVICE_PIDS_DIR pointing at a fake driver directory
(<dir>/N/pids, one pid per line, as tt-kmd 2.5.0 and later keep it) in which the tests write
the pids of real processes standing in as holders. Covers: a holder outside the queue keeps
the next job waiting, is shown (pid, user, command, since) in status and counted in /metrics,
and the job starts once it is gone; the queue's own job is no holder, and one met while a job
runs is recorded on that job; a reset is refused over a holder and goes through with force;
the daemon's wakeups while idle or waiting; a missing pids file said once; the health check
that runs before the next job after a timeout, a kill, a death by signal or a crash, not after
a clean exit, and the reset ladder when it fails.
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ttqlib import (Daemon, ctxt_switches, gate, open_gate, q, run_tests, tap,  # noqa: E402
                    wait_until)


GATE = {"TT_DEVICE_HEALTH_AFTER_FAILURE": "true"}  # the tests' daemons have it off


def driver(d, cards=(0, 1)):
    """A fake driver directory with an empty pids file per card; its path."""
    root = d.path("driver")
    for n in cards:
        os.makedirs(os.path.join(root, str(n)), exist_ok=True)
        open(os.path.join(root, str(n), "pids"), "w").close()
    return root


def set_pids(root, card, pids):
    """What the driver would list for card: one line per open descriptor."""
    with open(os.path.join(root, str(card), "pids"), "w") as f:
        f.write("".join("%d\n" % p for p in pids))


def holder():
    """A real process that stands in for one that opened the card outside the queue."""
    return subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)




def test_foreign_holder_delays_the_next_job():
    d = Daemon()
    root = driver(d)
    d.start(env={"TT_DEVICE_PIDS_DIR": root, **GATE})
    h = holder()
    try:
        set_pids(root, 0, [h.pid, h.pid])  # two descriptors, one process
        job = d.submit("echo ran", device_id="0")["job_id"]
        other = d.submit("echo other card", device_id="1")["job_id"]
        tap.eq(d.wait_done(other)["exit_code"], 0, "another card runs as usual")
        card = wait_until(lambda: d.dev(0)["foreign_holders"] and d.dev(0), 5,
                          "status to show the holder")
        fh = card["foreign_holders"]
        tap.ok(len(fh) == 1 and fh[0]["pid"] == h.pid and fh[0]["uid"] == os.getuid() and
               not fh[0]["user"].isdigit(), "status names the holder once, with its user", fh)
        tap.ok(fh[0]["command"] == "sleep 300" and fh[0]["since"],
               "... its command and since when", fh)
        tap.eq(d.job(job)["status"], "queued", "the next job waits while it holds the card")
        metrics = d.get("/metrics").body.decode()
        tap.ok('ttq_card_foreign_holders{device="0"} 1' in metrics and
               'ttq_card_foreign_holders{device="1"} 0' in metrics,
               "/metrics counts the holders per card")
        rc, out, _ = d.cli("status", "--device", "0")
        tap.ok("open outside the queue: pid %d" % h.pid in out and "sleep" in out,
               "the status command shows it", out)
        time.sleep(1.5)  # the span a waiting card is re-checked over: it must stay waiting
        tap.eq(d.job(job)["status"], "queued", "still waiting after a re-check")
    finally:
        h.kill()
        h.wait()
    set_pids(root, 0, [])  # the driver forgets a descriptor once it is closed
    t0 = time.monotonic()
    rec = d.wait_done(job)
    took = time.monotonic() - t0
    tap.ok(rec["exit_code"] == 0 and took < 10, "once it is gone the job runs (%.2fs)" % took)
    tap.eq(d.dev(0)["foreign_holders"], [], "and status shows no holder")
    d.cleanup()


def test_own_job_is_no_holder_and_holders_are_recorded():
    d = Daemon()
    root = driver(d)
    d.start(env={"TT_DEVICE_PIDS_DIR": root, **GATE})
    pids = os.path.join(root, "1", "pids")
    g, wait = gate(d, "g")
    # The job "opens the card": its shell and a child of it list themselves, as the driver would.
    job = d.submit("echo $$ >> %s; sleep 30 & echo $! >> %s; %s; kill %%1"
                   % (q(pids), q(pids), wait), device_id="1")["job_id"]
    wait_until(lambda: len(open(pids).read().split()) == 2, 10, "the job to list its pids")
    time.sleep(1.5)  # a look of the running job's card
    tap.eq(d.dev(1)["foreign_holders"], [], "the queue's own job is no holder")
    h = holder()
    try:
        with open(pids, "a") as f:
            f.write("%d\n" % h.pid)
        wait_until(lambda: d.job(job).get("foreign_holders"), 10,
                   "the running job to record the holder")
        rec = d.job(job)
        tap.ok([x["pid"] for x in rec["foreign_holders"]] == [h.pid],
               "a process outside the queue met while the job ran is recorded on it", rec)
    finally:
        h.kill()
        h.wait()
    set_pids(root, 1, [])
    open_gate(g)
    rec = d.wait_done(job)
    tap.ok(rec["foreign_holders"][0]["command"] == "sleep 300",
           "and kept in its finished record", rec)
    d.restart()
    tap.eq(d.job(job)["foreign_holders"], rec["foreign_holders"], "across a restart")
    d.cleanup()


def test_reset_refused_over_a_holder_unless_forced():
    d = Daemon()
    root = driver(d)
    d.start(env={"TT_DEVICE_PIDS_DIR": root, **GATE})
    h = holder()
    try:
        set_pids(root, 0, [h.pid])
        r = d.post("/reset", {"device_id": "0"})
        tap.ok(r.status == 409 and r["action"] == "refused" and str(h.pid) in r["error"] and
               "force" in r["error"], "a reset of a card a process outside the queue has "
               "open is refused (409), naming it and --force", r)
        rc, out, err = d.cli("reset", "--device", "0")
        tap.ok(rc == 1 and "open outside the queue" in err, "the reset command exits 1 saying so",
               (rc, err))
        r = d.post("/reset", {})
        acts = {e["device_id"]: e["action"] for e in r["resets"]}
        tap.eq(acts, {"0": "refused", "1": "scheduled"}, "a reset of every card leaves it out")
        wait_until(lambda: os.path.exists(d.reset_log) and "1" in open(d.reset_log).read(), 10,
                   "card 1's reset")
        tap.ok("0" not in open(d.reset_log).read().split(), "card 0 was not reset")
        r = d.post("/reset", {"device_id": "0", "force": "yes"})
        tap.eq(r.status, 400, "force must be a boolean")
        rc, out, err = d.cli("reset", "--device", "0", "--force")
        tap.ok(rc == 0 and "scheduled" in out, "reset --force goes ahead", (rc, out, err))
        wait_until(lambda: "0" in open(d.reset_log).read().split(), 10, "card 0's reset")
        tap.ok(True, "and the reset ran while the process held the card")
    finally:
        h.kill()
        h.wait()
    d.cleanup()


def test_wakeups():
    d = Daemon()
    root = driver(d)
    d.start(env={"TT_DEVICE_PIDS_DIR": root, **GATE})
    before = ctxt_switches(d.proc.pid)
    time.sleep(2)  # the span over which an idle daemon must not wake
    idle = ctxt_switches(d.proc.pid) - before
    tap.ok(idle <= 2, "an idle daemon watching its cards does not wake (%d wakeups in 2 s)"
           % idle)
    h = holder()
    try:
        set_pids(root, 0, [h.pid])
        d.submit("true", device_id="0")
        before = ctxt_switches(d.proc.pid)
        time.sleep(2)
        waiting = ctxt_switches(d.proc.pid) - before
        # Expected: one look a second; bound 10x generous.
        tap.ok(waiting <= 20, "a job waiting for a holder costs a look a second (%d wakeups "
               "in 2 s)" % waiting)
    finally:
        h.kill()
        h.wait()
    d.cleanup()


def test_no_pids_file_said_once():
    d = Daemon()
    d.start(env={"TT_DEVICE_PIDS_DIR": d.path("no-driver")})
    tap.eq(d.stderr().count("are not seen on cards 0, 1"), 1, "a missing pids file is said once "
           "at start, naming the cards")
    tap.eq(d.wait_done(d.submit("true")["job_id"])["exit_code"], 0, "and jobs run as before")
    d.cleanup()


def health_runs(d):
    try:
        return open(d.health_log).read().split()
    except OSError:
        return []


def test_health_check_after_a_bad_end():
    d = Daemon().start(env=GATE)
    rec = d.wait_done(d.submit("true", device_id="0")["job_id"])
    tap.eq((rec["end_reason"], health_runs(d)), ("exited", []),
           "no health check after a clean exit")
    rec = d.wait_done(d.submit("exit 3", device_id="0")["job_id"])
    tap.eq(health_runs(d), [], "nor after a failing exit status")
    bad = d.submit("sleep 30", device_id="0", timeout=1)["job_id"]
    nxt = d.submit("echo next", device_id="0")["job_id"]
    tap.eq(d.wait_done(bad)["end_reason"], "timeout", "a job times out")
    rec = d.wait_done(nxt)
    tap.ok(health_runs(d) == ["0"] and rec["exit_code"] == 0,
           "the card's health check ran before the next job, which then ran", health_runs(d))
    checks = [r for r in d.dev(0)["recent"] if r["mode"] == "reset"]
    tap.ok(len(checks) == 1 and checks[0]["exit_code"] == 0 and d.dev(0)["reset_epoch"] == 0,
           "as a job of its own; the card was not reset (its epoch unchanged)", checks)
    for cmd, what in (("kill -SEGV $$", "a death by signal"),):
        d.wait_done(d.submit(cmd, device_id="0")["job_id"])
        d.wait_done(d.submit("true", device_id="0")["job_id"])
        tap.eq(health_runs(d), ["0", "0"], "a health check after %s" % what)
    hung = d.submit("sleep 30", device_id="0", silence_timeout=1)["job_id"]
    tap.eq(d.wait_done(hung)["end_reason"], "hung", "a silent job is stopped as hung")
    d.wait_done(d.submit("true", device_id="0")["job_id"])
    tap.eq(health_runs(d), ["0", "0", "0"], "and the health check follows it")
    killed = d.submit("sleep 30", device_id="1")["job_id"]
    wait_until(lambda: d.job(killed)["status"] == "running", 10, "it to run")
    d.post("/kill", {"job_id": killed})
    d.wait_done(killed)
    d.wait_done(d.submit("true", device_id="1")["job_id"])
    tap.eq(health_runs(d), ["0", "0", "0", "1"], "and after a kill, on that card")
    d.cleanup()


def test_failed_health_check_starts_the_recovery():
    d = Daemon()
    bad = d.script("bad-health.sh", 'echo "$*" >> %s; exit 1' % q(d.health_log))
    d.start(env={"TT_DEVICE_HEALTH_CHECK_CMD": bad + " {device}", "TT_DEVICE_RESET_RETRIES": "0",
                 **GATE})
    d.wait_done(d.submit("sleep 30", device_id="0", timeout=1)["job_id"])
    queued = d.submit("echo never", device_id="0")["job_id"]
    rec = d.wait_done(queued)
    tap.ok(d.dev(0)["state"] == "dead" and rec["end_reason"] == "card_dead",
           "a failing check leads to the card's recovery, and here to a dead card", rec)
    tap.ok(open(d.reset_log).read().split() == ["0"] and health_runs(d) == ["0", "0"],
           "the check, then the reset command and its health check",
           (open(d.reset_log).read(), health_runs(d)))
    d.cleanup()


def test_health_check_off_and_after_a_crash():
    d = Daemon().start(env={"TT_DEVICE_HEALTH_AFTER_FAILURE": "false"})
    d.wait_done(d.submit("sleep 30", device_id="0", timeout=1)["job_id"])
    d.wait_done(d.submit("true", device_id="0")["job_id"])
    tap.eq(health_runs(d), [], "TT_DEVICE_HEALTH_AFTER_FAILURE=false: no check")
    d.stop()
    d.start(env=GATE)
    running = d.submit("sleep 30", device_id="1")["job_id"]
    wait_until(lambda: d.job(running)["status"] == "running", 10, "it to run")
    d.kill9()
    d.start(env=GATE)
    d.wait_done(d.submit("true", device_id="1")["job_id"])
    tap.eq(health_runs(d), ["1"], "a job a crash cut short: the check runs at the next start")
    d.cleanup()


if __name__ == "__main__":
    run_tests(test_foreign_holder_delays_the_next_job,
              test_own_job_is_no_holder_and_holders_are_recorded,
              test_reset_refused_over_a_holder_unless_forced, test_wakeups,
              test_no_pids_file_said_once, test_health_check_after_a_bad_end,
              test_failed_health_check_starts_the_recovery, test_health_check_off_and_after_a_crash)

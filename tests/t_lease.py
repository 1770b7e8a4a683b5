#!/usr/bin/env python3
"""Leases: a queue entry that holds its cards and runs no command (POST /lease, /renew,
/release {"job_id"}, GET /job/ID?wait=S, and the client's `lease` and `release ID|--key K`).

Prints TAP. Each test starts the real daemon (ttqlib.Daemon). Covers: a lease waits in its
card's FIFO behind a job and a job waits behind a held lease until its release; releasing a
running lease (released, exit 0) and a queued one (cancelled); kill; its timeout; its heartbeat
renewed, then lapsing (hung), queued too; a reset of its card ends it (reset), then the reset
runs and the next job starts; a restart ends a held lease (crash after a kill -9, service_stop
after a stop) and keeps a queued one; a lease of several cards; who may release it and take one
for another user (needs root to make users); a process of its owner holding its card is no
process outside the queue while it runs; GET /job?wait; bad input; the client's exit statuses;
`shell`: CMD runs holding the card and its status is the client's, it waits for a running job
first, ^C while it waits, a client killed (the lease lapses, CMD gets SIGHUP), a lease killed
under CMD.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ttqlib import (BINARY, Daemon, cli_popen, gate, open_gate, pid_alive, q,  # noqa: E402
                    run_tests, tap, wait_until)
from t_users import ALICE, BOB, ADMINS, as_user, ensure_users  # noqa: E402

HEX32 = re.compile(r"job_id=([0-9a-f]{32})")


def lease(d, **fields):
    r = d.post("/lease", fields)
    if r.status != 200:
        raise AssertionError("POST /lease %r refused: %r" % (fields, r))
    return r.json


def held(d, lid, timeout=10):
    """Wait (GET /job?wait) until lease lid holds its cards; its record."""
    return wait_until(lambda: d.get("/job/%s?wait=5" % lid, timeout=10).json["status"] ==
                      "running" and d.job(lid), timeout, "lease %s to hold its cards" % lid)


def test_fifo_with_jobs():
    d = Daemon().start()
    g, loop = gate(d, "g")
    job = d.submit(loop, device_id="0")["job_id"]
    wait_until(lambda: d.job(job)["status"] == "running", 10, "the job to start")
    sub = lease(d, device_id="0", description="slurm job 7")
    lid = sub["job_id"]
    tap.ok(sub["mode"] == "lease" and sub["status"] == "queued" and sub["position"] == 1,
           "POST /lease answers as /queue does: queued behind the job, mode lease", sub)
    answer = {}
    t = threading.Thread(target=lambda: answer.update(r=d.get("/job/%s?wait=30" % lid,
                                                                 timeout=40)))
    t.start()
    time.sleep(0.3)  # NEGATIVE CHECK: the wait is held while the lease is queued
    tap.ok(t.is_alive(), "GET /job/ID?wait is held while the lease waits")
    open_gate(g)
    t.join(15)
    tap.eq(answer["r"].json["status"], "running",
           "the lease starts only once the job before it ended, and the wait answers then")
    tap.eq(d.job(job)["status"], "done", "the job ran first")
    card = d.dev(0)
    tap.ok(card["current"]["mode"] == "lease" and
           card["current"]["cmd"] == "slurm job 7",
           "status shows the lease as its card's running entry", card.get("current"))
    after = d.submit("echo after", device_id="0")["job_id"]
    time.sleep(0.3)  # NEGATIVE CHECK: nothing starts while it is held
    tap.eq(d.job(after)["status"], "queued", "a job behind a held lease waits")
    r = d.post("/release", {"job_id": lid})
    tap.ok(r.status == 200 and r["released"]["status"] == "done", "POST /release ends it", r)
    rec = d.job(lid)
    tap.ok(rec["end_reason"] == "released" and rec["exit_code"] == 0 and rec["error"] is None,
           "its record: done, released, exit 0", rec)
    tap.eq(d.wait_done(after)["exit_code"], 0, "then the job behind it runs")
    metrics = d.get("/metrics").body.decode()
    tap.ok('ttq_jobs_finished_total{device="0",outcome="ok"} 3' in metrics,
           "/metrics counts the lease as a finished entry (3 ok: job, lease, job)", metrics)
    r = d.post("/release", {"job_id": lid})
    tap.ok(r.status == 409 and r["end_reason"] == "released" and r["status"] == "done",
           "a second release: 409 with its status and end_reason", r)
    d.cleanup()


def test_release_queued_kill_and_timeout():
    d = Daemon().start()
    first = lease(d, device_id="1")["job_id"]
    held(d, first)
    second = lease(d, device_id="1", description="behind")["job_id"]
    r = d.post("/release", {"job_id": second})
    tap.ok(r.status == 200 and d.job(second)["end_reason"] == "cancelled",
           "releasing a queued lease takes it off its queue (cancelled)", r)
    r = d.post("/kill", {"job_id": first})
    rec = d.job(first)
    tap.ok(r.status == 200 and rec["end_reason"] == "killed" and rec["signal"] is None,
           "POST /kill ends a running lease as killed", rec)
    short = lease(d, device_id="1", timeout=1)["job_id"]
    rec = d.wait_done(short)
    tap.ok(rec["end_reason"] == "timeout" and rec["timed_out"] and rec["exit_code"] == -9,
           "a lease ends at its timeout as a job does", rec)
    job = d.submit("echo run", device_id="1")["job_id"]
    d.wait_done(job)
    r = d.post("/release", {"job_id": job})
    tap.ok(r.status == 409 and "no lease" in r["error"], "releasing a job that is no lease: 409",
           r)
    d.cleanup()


def test_heartbeat():
    d = Daemon().start()
    lid = lease(d, device_id="0", heartbeat_sec=1)["job_id"]
    held(d, lid)
    end = time.monotonic() + 2.5
    while time.monotonic() < end:  # renewals keep it past its heartbeat
        r = d.post("/renew", {"job_id": lid})
        time.sleep(0.25)
    tap.ok(r.status == 200 and r["status"] == "running" and d.job(lid)["status"] == "running",
           "renewed, it outlives its heartbeat", r)
    rec = d.wait_done(lid)
    tap.ok(rec["end_reason"] == "hung" and "renewal" in rec["error"],
           "without renewals it lapses (hung)", rec)
    r = d.post("/renew", {"job_id": lid})
    tap.ok(r.status == 409 and r["end_reason"] == "hung", "a renewal after its end: 409", r)
    blocker = lease(d, device_id="0")["job_id"]
    held(d, blocker)
    queued = lease(d, device_id="0", heartbeat_sec=1)["job_id"]
    rec = d.wait_done(queued)
    tap.ok(rec["end_reason"] == "hung" and rec["started_at"] is None,
           "a queued lease's heartbeat lapses too, and it never holds the card", rec)
    d.cleanup()


def test_reset_ends_it():
    d = Daemon().start()
    lid = lease(d, device_id="0")["job_id"]
    held(d, lid)
    job = d.submit("echo next", device_id="0")["job_id"]
    r = d.post("/reset", {"device_id": "0"})
    tap.eq(r.status, 200, "a reset of the lease's card is taken")
    rec = d.wait_done(lid)
    tap.ok(rec["end_reason"] == "reset" and "reset" in rec["error"],
           "it ends the lease at once (reset, the reason in error)", rec)
    tap.eq(d.wait_done(job)["exit_code"], 0, "then the next job runs")
    tap.ok(os.path.exists(d.reset_log) and open(d.reset_log).read().split() == ["0"],
           "after the reset ran")
    d.cleanup()


def test_restart():
    d = Daemon().start()
    first = lease(d, device_id="0")["job_id"]
    held(d, first)
    second = lease(d, device_id="0", description="waits")["job_id"]
    d.kill9()
    d.start()
    rec = d.job(first)
    tap.ok(rec["status"] == "done" and rec["end_reason"] == "crash",
           "a lease held when the daemon died ends (crash), never resumed", rec)
    tap.eq(held(d, second)["status"], "running",
           "the queued lease survives and then holds the card")
    d.restart()
    tap.eq(d.job(second)["end_reason"], "service_stop",
           "a lease held at a stop ends as a running job does (service_stop)")
    d.cleanup()


def test_multi_card():
    d = Daemon().start()
    lid = lease(d, device_ids=["0", "1"])["job_id"]
    rec = held(d, lid)
    tap.eq(rec["device_ids"], ["0", "1"], "a lease of two cards")
    tap.ok(d.dev(0)["current"]["job_id"] == lid == d.dev(1)["current"]["job_id"],
           "it holds both of them")
    jobs = [d.submit("echo %d" % n, device_id=str(n))["job_id"] for n in (0, 1)]
    time.sleep(0.3)  # NEGATIVE CHECK
    tap.ok(all(d.job(j)["status"] == "queued" for j in jobs), "jobs on either card wait")
    tap.eq(d.post("/release", {"job_id": lid}).status, 200, "released")
    tap.ok(all(d.wait_done(j)["exit_code"] == 0 for j in jobs), "both cards run their jobs")
    d.cleanup()


def test_bad_input():
    d = Daemon().start()
    cases = [({"cmd": "x"}, 400, "cmd"), ({"heartbeat_sec": 4000}, 400, "heartbeat_sec"),
             ({"description": "a\x1b[2J"}, 400, "control"), ({"description": ""}, 400, "blank"),
             ({"device_id": "9"}, 400, "Unknown"), ({"timeout": -1}, 400, "timeout")]
    for body, status, word in cases:
        r = d.post("/lease", body)
        tap.ok(r.status == status and word in r.get("error", ""),
               "POST /lease %r: %d" % (body, status), r)
    tap.eq(d.post("/renew", {}).status, 400, "POST /renew without job_id: 400")
    tap.eq(d.post("/renew", {"job_id": "0" * 32}).status, 404, "of an unknown job: 404")
    tap.eq(d.post("/release", {"job_id": "0" * 32}).status, 404, "release of one: 404")
    tap.eq(d.get("/job/%s?wait=61" % ("0" * 32)).status, 400, "GET /job wait over 60: 400")
    tap.eq(d.status()["devices"][0]["device_id"], "0", "and the daemon keeps serving")
    d.cleanup()


def test_owner_process_is_not_foreign():
    d = Daemon()
    root = d.path("driver")
    for n in (0, 1):
        os.makedirs(os.path.join(root, str(n)))
        open(os.path.join(root, str(n), "pids"), "w").close()
    d.start(env={"TT_DEVICE_PIDS_DIR": root})
    lid = lease(d, device_id="0")["job_id"]
    held(d, lid)
    h = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)  # its owner's process
    try:
        with open(os.path.join(root, "0", "pids"), "w") as f:
            f.write("%d\n" % h.pid)
        r = d.post("/reset", {"device_id": "0"})
        tap.ok(r.status == 200 and r["action"] == "scheduled",
               "while the lease runs its owner's process on its card is no foreign holder "
               "(a reset is not refused over it)", r)
        tap.eq(d.wait_done(lid)["end_reason"], "reset", "the reset ends the lease")
        card = wait_until(lambda: d.dev(0)["foreign_holders"] and d.dev(0), 10,
                          "the holder to be seen once the lease ended")
        tap.ok(card["foreign_holders"][0]["pid"] == h.pid,
               "once it ended that process is outside the queue, and the reset waits for it",
               card)
    finally:
        h.kill()
        h.wait()
    d.cleanup()


def test_owners():
    if os.geteuid() != 0:
        print("# needs root to make users: owner rules not checked")
        return
    users = ensure_users()
    d = Daemon().start(env={"TT_DEVICE_ADMIN_GROUP": ADMINS})
    rc, out, err = d.cli("lease", "--owner", ALICE, "--key", "slurm-42", "--description",
                         "slurm job 42", "--wait")
    lid = HEX32.search(out).group(1) if HEX32.search(out) else ""
    rec = d.job(lid) if lid else {}
    tap.ok(rc == 0 and rec.get("owner_uid") == users[ALICE].pw_uid and
           rec.get("status") == "running",
           "an admin takes a lease for another user (--owner NAME) and waits until it holds",
           (rc, out, err, rec))
    rc, out, err = d.cli("status", "--device", "0")
    line = [x for x in out.splitlines() if lid in x]
    tap.ok(rc == 0 and len(line) == 1 and ALICE + ":" in line[0] and
           "[lease] slurm job 42" in line[0] and "left" not in line[0],
           "status shows the running lease with its owner and description, no estimate", out)
    rc, out, _ = d.cli("lease", "--owner", ALICE, "--key", "slurm-42", "--description",
                       "slurm job 42")
    tap.ok(rc == 0 and lid in out, "the same key answers the same lease (a prolog run twice)",
           out)
    rc, _, err = as_user(d, BOB, "release", lid)
    tap.ok(rc == 1 and "403" in err, "another user cannot release it", err)
    rc, _, err = as_user(d, BOB, "lease", "--owner", ALICE)
    tap.ok(rc == 1 and "403" in err and "admin" in err, "nor take a lease for another user",
           err)
    rc, out, err = as_user(d, BOB, "lease", "--device", "1")
    mine = HEX32.search(out).group(1) if HEX32.search(out) else ""
    tap.ok(rc == 0 and d.job(mine)["owner"] == BOB, "a user takes a lease of their own", err)
    rc, _, err = as_user(d, BOB, "release", mine)
    tap.eq(rc, 0, "and releases it")
    # bob takes the same key on another card: a key is its owner's, never a look-up across owners
    rc, out, err = as_user(d, BOB, "lease", "--device", "1", "--key", "slurm-42",
                           "--description", "slurm job 42")
    bobs = HEX32.search(out).group(1) if HEX32.search(out) else ""
    tap.ok(rc == 0 and bobs and bobs != lid, "another user's same key is a lease of their own",
           (rc, out, err))
    rc, out, err = d.cli("release", "--key", "slurm-42")
    tap.ok(rc == 1 and d.job(lid)["status"] == "running" and d.job(bobs)["status"] == "running",
           "root's key look-up finds only root's own: neither lease released", (rc, out, err))
    rc, out, err = d.cli("release", "--key", "slurm-42", "--owner",
                         str(users[ALICE].pw_uid))
    tap.ok(rc == 0 and d.job(lid)["end_reason"] == "released" and
           d.job(bobs)["status"] == "running",
           "an admin releases it by its key and owner's uid (the Slurm epilog), not bob's",
           (rc, out, err))
    rc, _, err = d.cli("release", "--key", "slurm-42", "--owner", ALICE)
    tap.ok(rc == 2 and "uid" in err, "--owner with --key takes a uid", err)
    d.cleanup()


def test_replay_on_other_cards():
    """A key's replay answers its lease only for the same cards: answering a lease on card 1 to
    a prolog that asked for card 0 would start the Slurm job beside another job there."""
    d = Daemon().start()
    first = d.post("/lease", {"device_id": "1", "description": "slurm job 300"},
                   headers={"Idempotency-Key": "k"}).json
    r = d.post("/lease", {"device_id": "0", "description": "slurm job 300"},
               headers={"Idempotency-Key": "k"})
    tap.ok(r.status == 422 and first["job_id"] in r["error"] and "cards" in r["error"],
           "the same key on other cards: 422, not the lease on card 1", r)
    r = d.post("/queue", {"cmd": "true", "device_id": "0"}, headers={"Idempotency-Key": "j"})
    r2 = d.post("/queue", {"cmd": "true", "device_ids": ["0", "1"]},
                headers={"Idempotency-Key": "j"})
    tap.ok(r.status == 200 and r2.status == 422, "a job's key on other cards: 422 too", r2)
    r3 = d.post("/queue", {"cmd": "true", "device_id": "0"}, headers={"Idempotency-Key": "j"})
    tap.ok(r3.status == 200 and r3["job_id"] == r["job_id"] and r3.get("replayed"),
           "the same cards replay", r3)
    d.cleanup()


def test_cli():
    d = Daemon().start()
    rc, out, err = d.cli("lease", "--device", "0", "--description", "mine", "--wait")
    lid = HEX32.search(out).group(1) if HEX32.search(out) else ""
    tap.ok(rc == 0 and d.job(lid)["status"] == "running", "lease --wait: 0 once it holds",
           (rc, out, err))
    rc, out, err = d.cli("lease", "--device", "0", "--wait", "--wait-timeout", "0.5")
    queued = HEX32.search(out).group(1) if HEX32.search(out) else ""
    tap.ok(rc == 124 and d.job(queued)["status"] == "queued" and "still waits" in err,
           "lease --wait: 124 at --wait-timeout, the lease left queued", (rc, err))
    p = cli_popen(d, "lease", "--device", "0", "--key", "k-int", "--wait")
    intr = wait_until(lambda: d.get("/job?key=k-int").get("job_id"), 10, "the lease queued")
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=15)
    tap.ok(p.returncode == 130 and b"stays queued" in err and b"release " + intr.encode() in err
           and d.job(intr)["status"] == "queued",
           "lease --wait: ^C says the lease stays queued and how to release it", err)
    d.post("/release", {"job_id": intr})
    p = cli_popen(d, "lease", "--device", "0", "--key", "k-1", "--heartbeat", "2", "--wait")
    other = wait_until(lambda: d.get("/job?key=k-1").get("job_id"), 10, "the lease to be queued")
    time.sleep(2.5)  # NEGATIVE CHECK: the waiting client renews its heartbeat
    tap.eq(d.job(other)["status"], "queued", "a waiting client keeps its lease's heartbeat")
    rc, out, err = d.cli("release", "--key", "k-1")
    tap.ok(rc == 0 and "cancelled" in out, "release --key K: 0, a queued lease cancelled",
           (rc, out, err))
    _, err = p.communicate(timeout=15)
    tap.ok(p.returncode == 1 and b"ended without holding its cards (cancelled)" in err,
           "lease --wait: 1 when it ended without holding, saying why", (p.returncode, err))
    rc, out, err = d.cli("release", lid)
    tap.ok(rc == 0 and "released" in out, "release ID: 0", (rc, out, err))
    rc, _, err = d.cli("release", lid)
    tap.ok(rc == 1 and "already finished" in err, "release of an ended lease: 1", err)
    rc, out, err = d.cli("lease", "--device", "1", "--key", "kh", "--wait")
    rc2, _, _ = d.cli("release", "--key", "kh")
    rc3, out, err = d.cli("lease", "--device", "1", "--key", "kh", "--wait")
    tap.ok(rc == 0 and rc2 == 0 and rc3 == 1 and "has ended already (released)" in err,
           "lease --wait replaying a key whose lease held and ended says so: 1", (rc3, err))
    rc, _, err = d.cli("release", "--key", "no-such-key")
    tap.ok(rc == 1 and "404" in err, "release --key of an unknown key: 1", err)
    rc, _, err = d.cli("release", "--key", "k-1", lid)
    tap.eq(rc, 2, "release with both an ID and --key: usage error")
    d.cleanup()


def shell_popen(d, *args, env=None):
    """`shell` with its arguments, started in d's temp dir (stdout and stderr piped)."""
    return cli_popen(d, "shell", *args, env=env)


def lease_of(d, dev):
    """The id of the lease holding card dev, once one does."""
    return wait_until(lambda: (d.dev(dev)["current"] or {}).get("mode") == "lease" and
                      d.dev(dev)["current"]["job_id"], 10, "a lease to hold card %s" % dev)


def test_shell():
    d = Daemon().start()
    g, loop = gate(d, "g")
    env_file, run_rc = d.path("env"), d.path("run-rc")
    cmd = ("echo $TT_DEVICE_JOB_ID ${TT_VISIBLE_DEVICES-unset} > %s; %s run --device 0 -- true;"
           " echo $? > %s; %s; exit 7" % (q(env_file), q(BINARY), q(run_rc), loop))
    p = shell_popen(d, "--device", "0", "--", "sh", "-c", cmd, env={"TT_VISIBLE_DEVICES": "1"})
    lid = lease_of(d, 0)
    job = d.submit("echo after", device_id="0")["job_id"]
    wait_until(lambda: os.path.exists(run_rc) and open(run_rc).read().strip(), 10,
               "the command to try `run` on its own card")
    tap.ok(d.job(lid)["cmd"] == "shell" and d.job(job)["status"] == "queued",
           "shell -- CMD holds the card with a lease (description shell) while CMD runs; a "
           "job submitted meanwhile waits", d.job(lid))
    tap.eq(open(env_file).read().split(), [lid, "unset"],
           "CMD gets TT_DEVICE_JOB_ID = the lease's id and no TT_VISIBLE_DEVICES (card N is N)")
    tap.eq(open(run_rc).read().strip(), "2", "`run` on its own card inside it is refused (2)")
    open_gate(g)
    _, err = p.communicate(timeout=15)
    tap.ok(p.returncode == 7 and b"is queued on" not in err, "shell exits with CMD's status, and "
           "says nothing of waiting when it did not wait", (p.returncode, err))
    rec = d.job(lid)
    tap.ok(rec["end_reason"] == "released" and rec["exit_code"] == 0,
           "the lease is released when CMD exits", rec)
    tap.eq(d.wait_done(job)["exit_code"], 0, "then the job behind it runs")
    rc, _, err = d.cli("shell", "--", "true")
    tap.ok(rc == 2 and "--device" in err, "shell without --device: usage error", err)
    rc, _, err = d.cli("shell", "--device", "0", "--", "no-such-command-here")
    tap.ok(rc == 127 and "cannot run no-such-command-here" in err and
           d.dev(0)["current"] is None, "a CMD that cannot be run: 127, the lease released",
           (rc, err))
    rc, _, _ = d.cli("shell", "--device", "1", "--", "sh", "-c", "kill -TERM $$")
    tap.eq(rc, 128 + 15, "a CMD killed by signal s: 128+s")
    d.cleanup()


def test_shell_waits():
    d = Daemon().start()
    g, loop = gate(d, "g")
    job = d.submit(loop, device_id="1")["job_id"]
    wait_until(lambda: d.job(job)["status"] == "running", 10, "the job to start")
    ran = d.path("ran")
    p = shell_popen(d, "--device", "1", "--", "sh", "-c", "touch %s" % q(ran))
    wait_until(lambda: len(d.dev(1)["pending"]) == 1, 10, "the shell's lease to queue")
    p2 = shell_popen(d, "--device", "1", "--", "true")
    second = wait_until(lambda: len(d.dev(1)["pending"]) == 2 and d.dev(1)["pending"][1]["job_id"],
                        10, "a second shell's lease to queue")
    p2.send_signal(signal.SIGINT)
    _, err2 = p2.communicate(timeout=15)
    tap.ok(p2.returncode == 130 and d.job(second)["end_reason"] == "cancelled" and
           b"taken off its queue" in err2,
           "^C while shell waits: 130, its lease taken off the queue", (p2.returncode, err2))
    tap.ok(not os.path.exists(ran), "CMD does not run while a job holds the card")
    open_gate(g)
    _, err = p.communicate(timeout=15)
    tap.ok(p.returncode == 0 and os.path.exists(ran) and
           err.decode().count("is queued on card 1 behind 1 job") == 1,
           "shell waits for the running job, says so once, then runs CMD", (p.returncode, err))
    m = re.search(r"lease ([0-9a-f]{32}) is queued", err.decode())
    rec = d.job(m.group(1)) if m else {}
    tap.ok(rec.get("started_at", "") >= d.job(job)["finished_at"] and
           rec.get("end_reason") == "released",
           "its lease started once the job ended, and was released", rec)
    d.cleanup()


def hup_loop(d, name):
    """(pid file, marker file, a sh program that writes its pid and the marker on SIGHUP)."""
    pid_file, hup = d.path(name + ".pid"), d.path(name + ".hup")
    return pid_file, hup, ("trap 'echo hup > %s; exit 5' HUP; echo $$ > %s; "
                           "while :; do sleep 0.05; done" % (q(hup), q(pid_file)))


def test_shell_client_killed():
    d = Daemon().start()
    pid_file, hup, prog = hup_loop(d, "cmd")
    p = shell_popen(d, "--device", "0", "--heartbeat", "1", "--", "sh", "-c", prog)
    lid = lease_of(d, 0)
    wait_until(lambda: os.path.exists(pid_file) and open(pid_file).read().strip(), 10,
               "CMD to start")
    job = d.submit("echo next", device_id="0")["job_id"]
    p.kill()
    p.wait()
    killed = time.monotonic()
    rec = d.wait_done(lid)
    took = time.monotonic() - killed
    tap.ok(rec["end_reason"] == "hung" and took < 10,
           "a client killed (SIGKILL): renewals stop, the lease ends (hung) after its "
           "heartbeat of 1 s, not its timeout (%.2f s; bound 10 times the heartbeat)" % took, rec)
    tap.eq(d.wait_done(job)["exit_code"], 0, "and the queue moves on")
    wait_until(lambda: os.path.exists(hup), 10, "CMD to get SIGHUP")
    tap.ok(not pid_alive(int(open(pid_file).read())), "CMD got SIGHUP when the client died")
    d.cleanup()


def test_shell_lease_killed():
    d = Daemon().start()
    pid_file, hup, prog = hup_loop(d, "cmd")
    p = shell_popen(d, "--device", "0", "--heartbeat", "1", "--", "sh", "-c", prog)
    lid = lease_of(d, 0)
    wait_until(lambda: os.path.exists(pid_file), 10, "CMD to start")
    rc, out, err = d.cli("kill", lid)
    tap.eq(rc, 0, "kill ID ends the lease while CMD runs")
    _, err = p.communicate(timeout=15)
    tap.ok(p.returncode == 129 and b"lease %s ended (killed)" % lid.encode() in err and
           b"SIGHUP" in err and os.path.exists(hup),
           "the client says so, CMD gets SIGHUP, and shell exits 129 (the lease's status)",
           (p.returncode, err))
    d.cleanup()


if __name__ == "__main__":
    run_tests(test_fifo_with_jobs, test_release_queued_kill_and_timeout, test_heartbeat,
              test_reset_ends_it, test_restart, test_multi_card, test_bad_input,
              test_owner_process_is_not_foreign, test_owners, test_replay_on_other_cards, test_cli, test_shell,
              test_shell_waits, test_shell_client_killed, test_shell_lease_killed)

#!/usr/bin/env python3
"""TAP integration tests for jobs that need several cards at once (device_ids, --device 0,1).

Jobs record their card occupancy in a ledger file: one "start CARD SEQ TS" line per card when
they begin and one "end CARD SEQ TS" line per card just before they exit, each a single
O_APPEND write, so the file's line order is the order things happened. From it the tests check
that no card ever had two occupants and that each card started its jobs in submission order.
Waits are conditions with deadlines (wait_until, GET /result?wait=); the fixed sleeps are
negative checks (something must NOT happen) and are marked "NEGATIVE CHECK".
"""
import json
import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ttqlib import BINARY, Daemon, gate, open_gate, q, run_tests, tap, wait_until  # noqa: E402


# ---------------------------------------------------------------- helpers

def ledger_job(d, seq, cards, body="sleep 0.05", ledger="ledger"):
    """A job that records when it holds each of its cards: start lines, body, end lines."""
    path = q(d.path(ledger))
    marks = lambda what: "; ".join(  # noqa: E731
        'echo "%s %s %d $(date +%%s.%%N)" >> %s' % (what, c, seq, path) for c in cards)
    return "%s; %s; %s" % (marks("start"), body, marks("end"))


def ledger_lines(d, ledger="ledger"):
    try:
        with open(d.path(ledger)) as f:
            return [ln.split() for ln in f.read().splitlines() if ln]
    except FileNotFoundError:
        return []


def card_timeline(lines):
    """{card: [(what, seq, ts), ...]} in ledger order."""
    out = {}
    for what, card, seq, ts in lines:
        out.setdefault(card, []).append((what, int(seq), float(ts)))
    return out


def overlaps(timeline):
    """The places where a card started a job before the last one had ended (line order and
    timestamps both), as readable strings; empty when every card had one occupant at a time."""
    bad = []
    for card, events in timeline.items():
        holder, ended_at = None, None
        for what, seq, ts in events:
            if what == "start":
                if holder is not None:
                    bad.append("card %s: job %d started while job %d held it" % (card, seq, holder))
                if ended_at is not None and ts < ended_at:
                    bad.append("card %s: job %d started at %f before the last end %f"
                               % (card, seq, ts, ended_at))
                holder = seq
            else:
                if holder != seq:
                    bad.append("card %s: job %d ended but %s held it" % (card, seq, holder))
                holder, ended_at = None, ts
    return bad


def started_order(timeline):
    return {card: [seq for what, seq, _ in ev if what == "start"] for card, ev in timeline.items()}


def cards_of(job):
    return job["device_ids"]


# ---------------------------------------------------------------- submission and records

def test_submission_rules_and_records():
    d = Daemon(ids="0,1,2").start()
    bad = (
        ({"device_ids": ["0"]}, "at least two"),
        ({"device_ids": []}, "at least two"),
        ({"device_ids": [0, 0]}, "twice"),
        ({"device_ids": ["1", 1]}, "twice"),
        ({"device_ids": [0, 5]}, "Unknown"),
        ({"device_ids": [0, 1], "device_id": "0"}, "not both"),
        ({"device_ids": None}, "not null"),
        ({"device_ids": "0,1"}, "list"),
        ({"device_ids": [0, 1.5]}, "card number"),
        ({"device_ids": [0, True]}, "card number"),
        ({"device_ids": [0, -1]}, "card number"),
        ({"device_ids": ["all"]}, "card number"),
        ({"device_ids": [7]}, "Unknown"),
    )
    for extra, word in bad:
        body = {"cmd": "true"}
        body.update(extra)
        r = d.post("/queue", body)
        tap.ok(r.status == 400 and word in r.get("error", ""),
               "device_ids %s: 400 saying %r" % (json.dumps(extra), word), r)
    st = d.status()
    tap.eq(st["queued_total"], 0, "nothing refused was queued")
    r = d.post("/queue", {"cmd": "true", "device_ids": [2, "0"]})
    tap.ok(r.status == 200 and r["device_ids"] == ["0", "2"] and r["device_id"] == "0",
           "accepted: device_ids ascending strings, device_id the first", r)
    job = d.wait_done(r["job_id"])
    tap.eq((job["device_id"], job["device_ids"], job["exit_code"]), ("0", ["0", "2"], 0),
           "GET /job of the done job carries both")
    res = d.get("/result/" + r["job_id"]).json
    tap.eq((res["device_id"], res["device_ids"]), ("0", ["0", "2"]), "GET /result too")
    with open(os.path.join(d.log_dir, r["job_id"], "meta.json")) as f:
        tap.eq(json.load(f)["device_ids"], ["0", "2"], "and meta.json")
    one = d.wait_done(d.submit("true", device_id=1)["job_id"])
    tap.eq((one["device_id"], one["device_ids"]), ("1", ["1"]),
           "a job of one card lists it in device_ids too")
    for c in ("0", "2"):
        tap.ok(any(x["job_id"] == r["job_id"] and x["device_ids"] == ["0", "2"]
                   for x in d.dev(c)["recent"]),
               "card %s's recent list has it, marked with both cards" % c)
    tap.ok(all(x["job_id"] != r["job_id"] for x in d.dev(1)["recent"]),
           "card 1's does not")
    d.cleanup()


def test_waits_for_every_card_and_nothing_overtakes():
    """A multi-card job at the head of an idle card's queue keeps that card idle until its
    other card is free: the job behind it on that card does not overtake it."""
    d = Daemon(ids="0,1").start()
    path, loop = gate(d, "g")
    a = d.submit(ledger_job(d, 1, ["0"], loop), device_id="0")["job_id"]
    wait_until(lambda: d.job(a)["status"] == "running", 10, "the blocker to start")
    m = d.submit(ledger_job(d, 2, ["0", "1"]), device_ids=["0", "1"])
    b = d.submit(ledger_job(d, 3, ["1"]), device_id="1")
    tap.eq((m["position"], b["position"]), (1, 1),
           "positions: one job runs before each on its card (the blocker; the multi-card job)")
    tap.ok(b["estimated_wait_sec"] >= m["estimated_wait_sec"] + m["estimated_run_sec"] - 0.5,
           "the card-1 job's estimate waits for the multi-card job, which waits for card 0",
           (m, b))
    time.sleep(0.5)  # NEGATIVE CHECK: card 1 is idle and must stay so
    c1 = d.dev(1)
    tap.ok(c1["current"] is None and [p["job_id"] for p in c1["pending"]] ==
           [m["job_id"], b["job_id"]], "card 1 stays idle with both queued in order", c1)
    c0 = d.dev(0)
    tap.ok([p["job_id"] for p in c0["pending"]] == [m["job_id"]] and
           c0["pending"][0]["device_ids"] == ["0", "1"],
           "card 0 lists the multi-card job too, marked with both cards", c0)
    tap.eq(d.job(b["job_id"])["status"], "queued", "the card-1 job did not overtake it")
    open_gate(path)
    for j in (m["job_id"], b["job_id"]):
        tap.eq(d.wait_done(j)["exit_code"], 0, "job %s ran" % j[:8])
    tl = card_timeline(ledger_lines(d))
    tap.eq(overlaps(tl), [], "no card had two occupants")
    tap.eq(started_order(tl), {"0": [1, 2], "1": [2, 3]}, "each card in submission order")
    d.cleanup()


def test_ledger_random_mix():
    """Jobs of one, two and three cards submitted in a random mix: no overlap on any card,
    and each card starts its jobs in submission order."""
    d = Daemon(ids="0,1,2").start()
    rng = random.Random(21)
    path, loop = gate(d, "g")
    cards = ["0", "1", "2"]
    wanted = {}
    jobs = []
    for seq in range(1, 31):
        k = rng.choice([1, 1, 2, 2, 3])
        mine = sorted(rng.sample(cards, k))
        body = loop if seq == 1 else "sleep %.2f" % rng.uniform(0.01, 0.08)
        if k == 1:
            r = d.submit(ledger_job(d, seq, mine, body), device_id=mine[0])
        else:
            r = d.submit(ledger_job(d, seq, mine, body), device_ids=mine)
        jobs.append(r["job_id"])
        for c in mine:
            wanted.setdefault(c, []).append(seq)
    open_gate(path)  # all 30 were queued behind the first before any of the rest started
    for j in jobs:
        d.wait_done(j, timeout=60)
    tl = card_timeline(ledger_lines(d))
    tap.eq(overlaps(tl), [], "30 mixed jobs on 3 cards: no card had two occupants")
    tap.eq(started_order(tl), wanted, "each card started its jobs in submission order")
    tap.eq(sum(1 for j in jobs if d.job(j)["exit_code"] == 0), 30, "every job ran, once")
    d.cleanup()


# ---------------------------------------------------------------- resets, kills, holds

def running(d, job_id):
    return lambda: d.job(job_id)["status"] == "running"


def test_reset_of_one_card_interrupts_and_frees_all():
    d = Daemon(ids="0,1")
    slow_reset = d.script("slow-reset.sh", 'echo "$*" >> %s\nwhile [ ! -e %s ]; do sleep 0.02; '
                          'done' % (q(d.reset_log), q(d.path("reset-gate"))))
    d.start(env={"TT_DEVICE_RESET_CMD": slow_reset + " {device}"})
    _, loop = gate(d, "never")
    m = d.submit(loop, device_ids=["0", "1"])["job_id"]
    wait_until(running(d, m), 10, "the multi-card job to start")
    after0 = d.submit("echo on 0", device_id="0")["job_id"]
    r = d.post("/reset", {"device_id": "1"})
    tap.eq((r.status, r.get("action")), (200, "scheduled"), "a reset of card 1 is scheduled")
    job = d.wait_done(m)
    tap.ok(job["exit_code"] != 0 and "reset of one of its cards" in (job["error"] or ""),
           "the multi-card job is interrupted by the reset of one of its cards", job)
    tap.eq(d.wait_done(after0)["exit_code"], 0,
           "card 0 is free once it ended: the next job there runs while card 1 resets")
    tap.eq(d.dev(1)["state"], "resetting", "card 1 is still resetting meanwhile")
    open_gate(d.path("reset-gate"))
    wait_until(lambda: d.dev(1)["state"] == "healthy" and d.dev(1)["current"] is None, 10,
               "card 1's reset to end")
    tap.eq(d.dev(1)["reset_epoch"], 1, "card 1 was reset")
    d.cleanup()


def test_reset_without_preemption_lets_it_finish():
    d = Daemon(ids="0,1", env={"TT_DEVICE_RESET_PREEMPTS_CURRENT": "false"}).start()
    path, loop = gate(d, "g")
    m = d.submit(loop, device_ids=["0", "1"])["job_id"]
    wait_until(running(d, m), 10, "the multi-card job to start")
    tap.eq(d.post("/reset", {"device_id": "0"}).get("action"), "scheduled", "reset of card 0")
    time.sleep(0.5)  # NEGATIVE CHECK: the job is not stopped
    tap.eq(d.job(m)["status"], "running", "without preemption the job keeps running")
    open_gate(path)
    tap.eq(d.wait_done(m)["exit_code"], 0, "and ends by itself")
    wait_until(lambda: d.dev(0)["reset_epoch"] == 1, 10, "card 0's reset after it")
    d.cleanup()


def test_reset_job_id_targets_every_card():
    d = Daemon(ids="0,1,2").start()
    m = d.submit("true", device_ids=["0", "2"])["job_id"]
    d.wait_done(m)
    r = d.post("/reset", {"job_id": m})
    tap.ok(r.status == 200 and [(e["device_id"], e["action"]) for e in r["resets"]] ==
           [("0", "scheduled"), ("2", "scheduled")],
           "reset JOB_ID of a job on cards 0 and 2: both scheduled, card 1 left alone", r)
    wait_until(lambda: d.dev(0)["reset_epoch"] == 1 and d.dev(2)["reset_epoch"] == 1 and
               d.dev(0)["current"] is None and d.dev(2)["current"] is None, 10, "both resets")
    with open(d.reset_log) as f:
        tap.eq(sorted(f.read().split()), ["0", "2"], "the reset command ran for cards 0 and 2")
    tap.eq(d.dev(1)["reset_epoch"], 0, "card 1 untouched")
    again = d.post("/reset", {"job_id": m}).json
    tap.eq([e["action"] for e in again["resets"]], ["already_reset", "already_reset"],
           "asked again: both cards were reset since the job ran")
    # each card is compared with its own epoch: reset card 2 alone, then ask for the job
    m2 = d.submit("true", device_ids=["0", "2"])["job_id"]
    d.wait_done(m2)
    d.post("/reset", {"device_id": "2"})
    wait_until(lambda: d.dev(2)["reset_epoch"] == 2 and d.dev(2)["current"] is None, 10,
               "card 2's reset")
    r = d.post("/reset", {"job_id": m2}).json
    tap.eq([(e["device_id"], e["action"]) for e in r["resets"]],
           [("0", "scheduled"), ("2", "already_reset")],
           "card by card: card 2 was reset since the job ran, card 0 was not")
    wait_until(lambda: d.dev(0)["reset_epoch"] == 2, 10, "card 0's reset")
    r = d.post("/reset", {"job_id": m2, "device_id": "1"})
    tap.ok(r.status == 400 and "cards 0,2" in r.get("error", ""),
           "job_id with a device_id it did not run on: 400 naming its cards", r)
    r = d.post("/reset", {"job_id": m2, "device_id": "2"})
    tap.ok(r.status == 200 and r.get("device_id") == "2",
           "job_id with one of its cards: that card alone, one entry", r)
    d.cleanup()


def test_dead_card_fails_multi_card_jobs_naming_it():
    d = Daemon(ids="0,1", env={"TT_DEVICE_RESET_RETRIES": "0"})
    fail1 = d.script("reset-fails-on-1.sh", '[ "$1" = 1 ] && exit 1\nexit 0')
    d.start(env={"TT_DEVICE_RESET_CMD": fail1 + " {device}"})
    path, loop = gate(d, "g")
    blocker = d.submit(ledger_job(d, 1, ["0"], loop), device_id="0")["job_id"]
    wait_until(running(d, blocker), 10, "the blocker on card 0")
    m = d.submit(ledger_job(d, 2, ["0", "1"]), device_ids=["0", "1"])["job_id"]
    s0 = d.submit(ledger_job(d, 3, ["0"]), device_id="0")["job_id"]
    d.post("/reset", {"device_id": "1"})
    wait_until(lambda: d.dev(1)["state"] == "dead", 10, "card 1 to die")
    job = d.wait_done(m)
    tap.ok(job["exit_code"] == -1 and "Card 1 is dead" in (job["error"] or "") and
           job["started_at"] is None,
           "the queued multi-card job naming card 1 fails, never run, naming the card", job)
    tap.ok("Card 1 is dead" in d.log_text(m), "its log says so")
    r = d.post("/queue", {"cmd": "true", "device_ids": ["0", "1"]})
    tap.ok(r.status == 503 and r.get("device_id") == "1" and r.get("device_state") == "dead" and
           "Card 1 is dead" in r.get("error", ""),
           "a new submission naming the dead card: 503 naming it, in its message too", r)
    open_gate(path)
    tap.eq(d.wait_done(s0)["exit_code"], 0, "card 0 carries on with the job behind it")
    tap.eq(started_order(card_timeline(ledger_lines(d))), {"0": [1, 3]},
           "the failed job never held card 0")
    d.cleanup()


def test_hold_of_any_card_holds_it():
    d = Daemon(ids="0,1").start()
    tap.eq(d.post("/hold", {"device_id": "1", "reason": "cabling"}).status, 200, "card 1 held")
    m = d.submit(ledger_job(d, 1, ["0", "1"]), device_ids=["0", "1"])["job_id"]
    s0 = d.submit(ledger_job(d, 2, ["0"]), device_id="0")["job_id"]
    time.sleep(0.5)  # NEGATIVE CHECK: nothing starts
    tap.eq((d.job(m)["status"], d.job(s0)["status"]), ("queued", "queued"),
           "a hold of card 1 holds the multi-card job, and card 0 keeps its order behind it")
    head = d.dev(0)["pending"][0]
    tap.eq((head["job_id"], head.get("waiting_for")), (m, {"device_id": "1", "reason": "held"}),
           "card 0 looks idle; its head says it waits for card 1, held")
    tap.ok("waiting_for" not in d.dev(0)["pending"][1], "a job of one card has no such field")
    rc, out, err = d.cli("status", "--device", "0")
    tap.ok(rc == 0 and re.search(r"queued +1\. %s .*\(card 1: held\)" % m, out),
           "human status says it too", out + err)
    d.post("/release", {"device_id": "1"})
    tap.eq((d.wait_done(m)["exit_code"], d.wait_done(s0)["exit_code"]), (0, 0),
           "released: both run")
    tap.eq(started_order(card_timeline(ledger_lines(d))), {"0": [1, 2], "1": [1]},
           "in submission order")
    d.cleanup()


def test_kill_device_stops_it():
    d = Daemon(ids="0,1").start()
    _, loop = gate(d, "never")
    m = d.submit(loop, device_ids=["0", "1"])["job_id"]
    wait_until(running(d, m), 10, "the multi-card job to start")
    tap.ok(d.dev(0)["current"]["job_id"] == m and d.dev(1)["current"]["job_id"] == m and
           d.dev(1)["current"]["device_ids"] == ["0", "1"],
           "/status lists it running on each of its cards, marked with both")
    rc, out, err = d.cli("kill", "--device", "1")
    tap.ok(rc == 0 and json.loads(out)["killed"]["device_ids"] == ["0", "1"],
           "kill --device 1 stops it", (rc, out, err))
    job = d.wait_done(m)
    tap.ok(job["exit_code"] != 0 and "kill request" in (job["error"] or ""), "it was stopped", job)
    tap.eq((d.dev(0)["current"], d.dev(1)["current"]), (None, None), "both cards are free")
    r = d.post("/kill", {"job_id": d.submit("sleep 30", device_ids=["0", "1"])["job_id"],
                         "device_id": "1"})
    tap.eq(r.status, 200, "kill {job_id, device_id} with one of its cards is accepted")
    d.cleanup()


def test_metrics_count_it_on_each_card():
    d = Daemon(ids="0,1").start()
    path, loop = gate(d, "g")
    blocker = d.submit(loop, device_id="0")["job_id"]
    wait_until(running(d, blocker), 10, "the blocker")
    m = d.submit("exit 3", device_ids=["0", "1"])["job_id"]
    text = d.get("/metrics").body.decode()
    tap.ok('ttq_queue_depth{device="0"} 1' in text and 'ttq_queue_depth{device="1"} 1' in text,
           "the queued multi-card job counts in both cards' queue depth", text)
    tap.eq(d.status()["queued_total"], 1, "and once in queued_total")
    open_gate(path)
    d.wait_done(m)
    text = d.get("/metrics").body.decode()
    tap.ok('ttq_jobs_finished_total{device="1",outcome="failed"} 1' in text and
           'ttq_jobs_finished_total{device="0",outcome="failed"} 1' in text,
           "its outcome counts on each of its cards", text)
    d.cleanup()


# ---------------------------------------------------------------- restart and recovery

def test_restart_with_queued_multi_card_jobs():
    d = Daemon(ids="0,1").start()
    path, loop = gate(d, "g")
    blocker = d.submit(ledger_job(d, 1, ["0"], loop), device_id="0")["job_id"]
    wait_until(lambda: ledger_lines(d), 10, "the blocker to start")
    m1 = d.submit(ledger_job(d, 2, ["0", "1"]), device_ids=["0", "1"])["job_id"]
    s1 = d.submit(ledger_job(d, 3, ["1"]), device_id="1")["job_id"]
    m2 = d.submit(ledger_job(d, 4, ["0", "1"]), device_ids=[1, 0])["job_id"]
    s0 = d.submit(ledger_job(d, 5, ["0"]), device_id="0")["job_id"]
    for c in ("0", "1"):  # so that the restart starts nothing before the queues are looked at
        d.post("/hold", {"device_id": c})
    d.kill9()
    d.start()
    tap.ok(d.job(m1)["status"] == "queued" and d.job(m1)["device_ids"] == ["0", "1"],
           "after kill -9, the queued multi-card job is back on both cards", d.job(m1))
    tap.eq([p["job_id"] for p in d.dev(1)["pending"]], [m1, s1, m2],
           "card 1's queue in submission order")
    tap.eq([p["job_id"] for p in d.dev(0)["pending"]], [m1, m2, s0],
           "card 0's queue in submission order")
    b = d.job(blocker)
    tap.ok(b["exit_code"] == -1 and "nterrupted" in b["error"], "the blocker ended -1", b)
    for c in ("0", "1"):
        d.post("/release", {"device_id": c})
    for j in (m1, s1, m2, s0):
        tap.eq(d.wait_done(j)["exit_code"], 0, "job %s ran after the restart" % j[:8])
    tl = card_timeline(ledger_lines(d))
    # the blocker was killed with the daemon: it wrote no end line
    tap.eq(overlaps(card_timeline([ln for ln in ledger_lines(d) if ln[2] != "1"])), [],
           "no card had two occupants after the restart")
    tap.eq(started_order(tl), {"0": [1, 2, 4, 5], "1": [2, 3, 4]},
           "each card kept its order across the restart")
    d.cleanup()


def test_running_multi_card_job_at_a_crash_is_not_rerun():
    d = Daemon(ids="0,1").start()
    _, loop = gate(d, "never")
    m = d.submit(ledger_job(d, 1, ["0", "1"], loop), device_ids=["0", "1"])["job_id"]
    wait_until(lambda: len(ledger_lines(d)) == 2, 10, "the multi-card job to start")
    after = d.submit(ledger_job(d, 2, ["1"]), device_id="1")["job_id"]
    d.kill9()
    d.start()
    job = d.wait_done(m)
    tap.ok(job["exit_code"] == -1 and "nterrupted" in job["error"] and
           job["device_ids"] == ["0", "1"], "the job running at the crash ended -1", job)
    tap.eq(d.wait_done(after)["exit_code"], 0, "the job queued behind it ran")
    tap.eq(d.wait_done(d.submit("true", device_id="0")["job_id"])["exit_code"], 0,
           "card 0 takes new work: the crashed job holds neither card")
    tap.eq([(w, c, s) for w, c, s, _ in ledger_lines(d) if w == "start"],
           [("start", "0", "1"), ("start", "1", "1"), ("start", "1", "2")],
           "the crashed job was never run again")
    d.cleanup()


# ---------------------------------------------------------------- the client

def test_cli_device_lists():
    d = Daemon(ids="0,1,2").start()
    rc, out, err = d.cli("run", "--device", "2,0", "--", "echo hi")
    tap.ok(rc == 0 and out == "hi\n" and "on cards 0,2" in err,
           "run --device 2,0 runs on cards 0 and 2", (rc, out, err))
    rc, out, err = d.cli("queue", "--device", "all", "--", "true")
    got = dict(ln.split("=", 1) for ln in out.splitlines() if "=" in ln)
    tap.ok(rc == 0 and got.get("device_ids") == "0,1,2" and got.get("device_id") == "0",
           "queue --device all names every configured card", (rc, out, err))
    tap.eq(d.wait_done(got["job_id"])["device_ids"], ["0", "1", "2"], "as the daemon records it")
    rc, out, err = d.cli("queue-python", "--device", "0,1", "--wait", "-",
                         input=b"print('py')\n")
    tap.ok(rc == 0 and out == "py\n" and "on cards 0,1" in err,
           "queue-python --device 0,1 --wait", (rc, out, err))
    for args, word in ((["--device", "0,0"], "twice"), (["--device", "0,x"], "card number"),
                       (["--device", "0,1", "--device", "1"], "twice"),
                       (["--device", "all", "--device", "0"], "twice")):
        rc, out, err = d.cli("queue", *args, "--", "true")
        tap.ok(rc == 2 and word in err, "queue %s: usage error" % " ".join(args), (rc, err))
    rc, out, err = d.cli("queue", "--device", "0,7", "--", "true")
    tap.ok(rc == 1 and "Unknown" in err, "an unconfigured card in the list: refused", (rc, err))
    rc, out, err = d.cli("queue", "--device", "0,1", "--device", "1,0", "--", "true")
    tap.eq(rc, 0, "the same list twice is one list")
    rc, out, err = d.cli("status", "--device", "0,1")
    tap.eq(rc, 2, "status takes one card")
    rc, out, err = d.cli("status", "--device", "x")
    tap.ok(rc == 2 and "takes a card number, not 'x'" in err,
           "status's usage error offers no list it would refuse", (rc, err))
    path, loop = gate(d, "g")
    m = d.submit(loop, device_ids=["1", "2"])["job_id"]
    wait_until(running(d, m), 10, "the multi-card job")
    rc, out, err = d.cli("status")
    tap.ok(rc == 0 and out.count("[cards 1,2]") >= 2, "status marks it on each card", out)
    waiting = d.submit("python3 mesh_waits.py", device_ids=["0", "1"],
                       client_id="a-rather-long-client-name")["job_id"]
    rc, out, err = d.cli("status")
    lines = [ln for ln in out.splitlines() if waiting in ln]
    tap.ok(rc == 0 and len(lines) == 2 and all("python3 m" in ln for ln in lines),
           "a waiting job of several cards, a long head before its command: the command's "
           "start still shows", out)
    open_gate(path)
    d.wait_done(m)
    d.wait_done(waiting)
    d.cleanup()


def test_cli_inside_a_multi_card_job():
    """Inside a job on cards 0 and 1, waiting for a job on either card would hang: exit 2."""
    d = Daemon(ids="0,1,2").start()
    tt = q(BINARY)
    script = "; ".join([
        "%s run --device 1 -- 'echo inner'; echo one=$?" % tt,
        "%s run --device 1,2 -- 'echo inner'; echo list=$?" % tt,
        "%s run --device 2 -- 'echo on two'; echo other=$?" % tt])
    outer = d.submit(script, device_ids=["0", "1"], timeout=60)["job_id"]
    d.wait_done(outer, timeout=50)
    log = d.log_text(outer)
    got = dict(m.groups() for m in re.finditer(r"^(\w+)=(\S*)$", log, re.M))
    tap.eq([got.get(k) for k in ("one", "list", "other")], ["2", "2", "0"],
           "run on card 1 or on cards 1,2 exits 2; run on card 2 works")
    tap.ok("holds cards 0,1" in log, "the refusal names both cards the job holds", log)
    d.cleanup()


if __name__ == "__main__":
    run_tests(test_submission_rules_and_records, test_waits_for_every_card_and_nothing_overtakes,
              test_ledger_random_mix, test_reset_of_one_card_interrupts_and_frees_all,
              test_reset_without_preemption_lets_it_finish, test_reset_job_id_targets_every_card,
              test_dead_card_fails_multi_card_jobs_naming_it, test_hold_of_any_card_holds_it,
              test_kill_device_stops_it, test_metrics_count_it_on_each_card,
              test_restart_with_queued_multi_card_jobs,
              test_running_multi_card_job_at_a_crash_is_not_rerun, test_cli_device_lists,
              test_cli_inside_a_multi_card_job)

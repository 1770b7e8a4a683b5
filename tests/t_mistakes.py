#!/usr/bin/env python3
"""Ordinary mistakes of a new user must neither reach the wrong card nor stall the queue.

Prints TAP. One daemon (cards 0 and 1) serves the checks. Covers: request bodies that name a
field the daemon does not know (a typo of device_id must never queue on card 0), device_id
null, --device given twice; the client inside a job refusing to wait for a job on the card
that job holds (it could never start); `status` for a person with a long queue; and
`queue-python -` keeping its scripts in the user's state folder, not beside the executable.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ttqlib import BINARY, Daemon, post_many, q, run_tests, tap, wait_until  # noqa: E402

D = None  # the shared daemon


def daemon():
    global D
    if D is None or not D.alive():
        D = Daemon().start()
    return D


def gated(d, device="0"):
    """A job that runs on `device` until its gate file appears; returns (job_id, gate)."""
    ready, gate = d.path("ready-%s" % device), d.path("gate-%s" % device)
    for p in (ready, gate):
        if os.path.exists(p):
            os.unlink(p)
    j = d.submit("touch %s; while [ ! -e %s ]; do sleep 0.05; done" % (q(ready), q(gate)),
                 device_id=device, timeout=120)
    wait_until(lambda: os.path.exists(ready), 10, "the gated job to start")
    return j["job_id"], gate


def open_gate(gate):
    open(gate, "w").close()

# ---------------------------------------------------------------- unknown query parameters

def test_unknown_query_parameters_are_named():
    d = daemon()
    j = d.submit("printf 0123456789", device_id="1")["job_id"]
    d.wait_done(j)
    cases = [("/logs/%s?ofset=5&limt=2" % j, "ofset", "offset"),
             ("/logs/%s?offset=5&limt=2" % j, "limt", "limit"),
             ("/status?devcie=1", "devcie", "device"),
             ("/status?card=1", "card", "device"),
             ("/result/%s?wiat=5" % j, "wiat", "wait"),
             ("/job/%s?offset=5" % j, "offset", None),
             ("/metrics?x=1", "x", None)]
    for path, name, meant in cases:
        r = d.get(path)
        err = r.get("error") or ""
        tap.ok(r.status == 400 and '"%s"' % name in err and
               (meant is None and "did you mean" not in err or '"%s"?' % meant in err),
               "GET %s: 400 naming %s%s" % (path.replace(j, "ID"), name,
                                            " and %s" % meant if meant else ""), r)
    r = d.request("POST", "/queue?device=1", {"cmd": "true"})
    tap.ok(r.status == 400 and '"device"' in (r.get("error") or "") and
           "known query parameters: none" in r.get("error", ""),
           "POST /queue?device=1: 400, the card goes in the body; nothing queued", r)
    r = d.get("/status?device=0&device=1")
    tap.ok(r.status == 400 and "device is given twice" in (r.get("error") or ""),
           "a parameter given twice says so", r)
    r = d.get("/logs/%s?offset=4&limit=3&wait=0" % j)
    tap.eq((r.status, r.get("content") if r.status == 200 else None), (200, "456"),
           "known parameters still work")


# ---------------------------------------------------------------- unknown fields

def jobs_seen(d):
    """Ids of every job the daemon shows: running, queued and recent, on every card."""
    ids = set()
    for c in d.status()["devices"]:
        ids.update(j["job_id"] for j in c["pending"] + c["recent"])
        if c["current"]:
            ids.add(c["current"]["job_id"])
    return ids


def test_unknown_fields_create_no_job():
    d = daemon()
    before = jobs_seen(d)
    typos = [({"device": "1"}, "device", "device_id"), ({"devcie_id": "1"}, "devcie_id", "device_id"),
             ({"card": 1}, "card", "device_id"), ({"deviceId": 1}, "deviceId", "device_id"),
             ({"timeout_sec": 5}, "timeout_sec", "timeout"), ({"repeats": 2}, "repeats", "repeat"),
             ({"envs": {}}, "envs", "env"), ({"priority": 1}, "priority", None)]
    for extra, name, meant in typos:
        r = d.post("/queue", dict({"cmd": "true"}, **extra))
        err = r.get("error") or ""
        tap.ok(r.status == 400 and '"%s"' % name in err and
               (meant is None and "did you mean" not in err or '"%s"?' % meant in err),
               "POST /queue with %s: 400 naming it%s" % (name, " and %s" % meant if meant else ""),
               r)
    r = d.post("/queue", {"cmd": "true", "device_id": None})
    tap.ok(r.status == 400 and "device_id" in r.get("error", ""), "device_id null: 400", r)
    tap.eq(jobs_seen(d) - before, set(), "no typo and no null queued a job on any card")
    r = d.post("/queue", {"cmd": "true", "cwd": d.tmp, "device_id": "1", "timeout": 30,
                          "repeat": 1, "mode": "run", "env": {"A": "b"}, "client_id": "py"})
    tap.eq(r.status, 200, "every field the earlier Python client sends is accepted")
    d.wait_done(r["job_id"])
    before.add(r["job_id"])
    for path in ("/kill", "/reset"):
        r = d.post(path, {"devcie_id": "1"})
        tap.ok(r.status == 400 and '"device_id"?' in r.get("error", ""),
               "POST %s with devcie_id: 400 naming device_id" % path, r)
        r = d.post(path, {"device_id": None})
        tap.eq(r.status, 400, "POST %s with device_id null: 400 (not every card)" % path)
        r = d.post(path, {"job_id": None})
        tap.ok(r.status == 400 and "job_id" in r.get("error", ""),
               "POST %s with job_id null: 400 (a job id that came out null is no target)" % path,
               r)
    for path in ("/hold", "/release"):
        r = d.post(path, {"device": "1"})
        tap.ok(r.status == 400 and '"device_id"?' in r.get("error", ""),
               "POST %s with device: 400 naming device_id" % path, r)
        r = d.post(path, {"device_id": None})
        tap.eq(r.status, 400, "POST %s with device_id null: 400" % path)
    tap.eq([c["held"] for c in d.status()["devices"]], [False, False], "no card was held")
    tap.eq([c["reset_epoch"] for c in d.status()["devices"]], [0, 0], "no card was reset")
    tap.eq(jobs_seen(d) - before, set(), "no reset job ran")
    j, g = gated(d, "0")
    r = d.post("/kill", {"job_id": j, "device_id": "1"})
    tap.ok(r.status == 400 and "is on card 0, not on card 1" in r.get("error", "") and
           d.job(j)["status"] == "running",
           "POST /kill naming a job on card 0 and device_id 1: 400, the job runs on", r)
    open_gate(g)
    d.wait_done(j)
    before.add(j)
    # the earlier service's own clients send a diagnostic client_id with a reset or a kill
    r = d.post("/kill", {"device_id": "1", "client_id": "tester"})
    tap.ok(r.status == 409 and "Nothing running" in r.get("error", ""),
           "POST /kill with client_id is accepted (nothing running: 409)", r)


def test_device_given_twice_is_a_usage_error():
    d = daemon()
    before = jobs_seen(d)
    for sub in (["run"], ["queue"], ["queue-python"]):
        rc, out, err = d.cli(*sub, "--device", "1", "--device", "0", "--", "true")
        tap.ok(rc == 2 and "--device given twice" in err, "%s --device 1 --device 0: usage "
               "error, exit 2" % sub[0], (rc, out, err))
    tap.eq(jobs_seen(d) - before, set(), "nothing was queued")
    rc, out, err = d.cli("queue", "--device", "1", "--device=1", "--", "true")
    tap.eq(rc, 0, "the same card twice is fine")
    before = jobs_seen(d)
    for sub in ("run", "queue"):
        rc, out, err = d.cli(sub, "./x.sh", "--device", "1")
        tap.ok(rc == 2 and "before the command" in err,
               "%s ./x.sh --device 1 (no --): usage error, not a job on card 0 told to open "
               "card 1" % sub, (rc, out, err))
    tap.eq(jobs_seen(d) - before, set(), "nothing was queued")
    rc, out, err = d.cli("run", "--", "echo", "--device", "1")
    tap.eq((rc, out), (0, "--device 1\n"), "after --, --device is the command's own")


# ---------------------------------------------------------------- waiting inside a job

def test_job_does_not_wait_for_its_own_card():
    """`run --device 0` inside a job on card 0 would wait for a job that cannot start before
    the waiting one ends: it must exit 2 at once, saying why; `queue` still works."""
    d = daemon()
    tt = q(BINARY)
    script = "\n".join([
        "%s run --device 0 -- 'echo inner'; echo run=$?" % tt,
        "echo 'print(1)' | %s queue-python --device 0 --wait -; echo qpw=$?" % tt,
        "id=$(%s queue --device 0 -- 'echo later' | sed -n 's/^job_id=//p')" % tt,
        "echo queued=$id",
        "%s result \"$id\"; echo result=$?" % tt,
        "%s result \"$TT_DEVICE_JOB_ID\"; echo self=$?" % tt,
        "%s logs --follow \"$id\"; echo follow=$?" % tt,
        "%s result \"$id\" --wait-timeout 0; echo once=$?" % tt,
        "%s run --device 0 --wait-timeout 0 -- true; echo runzero=$?" % tt,
        "%s lease --device 0 --wait; echo leasewait=$?" % tt,
        "echo 'print(2)' | %s queue-python --device 0 --wait --wait-timeout 0 -; "
        "echo qpzero=$?" % tt,
        "%s run --device 1 -- 'echo on card 1'; echo other=$?" % tt])
    outer = d.submit(script, device_id="0", timeout=90)["job_id"]
    t0 = time.monotonic()
    job = d.wait_done(outer, timeout=60)
    took = time.monotonic() - t0
    log = d.log_text(outer)
    got = dict(m.groups() for m in re.finditer(r"^(\w+)=(\S*)$", log, re.M))
    tap.eq([got.get(k) for k in ("run", "qpw", "result", "self", "follow", "once", "runzero",
                                 "qpzero", "leasewait", "other")],
           ["2", "2", "2", "2", "2", "124", "124", "124", "2", "0"], "inside a job on card 0: "
           "run, queue-python --wait, lease --wait, result and logs --follow of card 0's jobs "
           "exit 2; with "
           "--wait-timeout 0 (asks once, never waits) result, run and queue-python --wait "
           "give 124; run on card 1 works")
    tap.ok(job["exit_code"] == 0 and took < 45, "the job ended by itself, long before its "
           "timeout (%.1f s)" % took, job)
    tap.ok("holds card 0" in log and "--device N" in log and "queue" in log and
           "inner" not in log.replace("echo inner", ""),
           "the refusal says why and what to do; the inner command never ran", log)
    later = got.get("queued", "")
    tap.ok(len(later) == 32 and "on card 1" in log, "`queue` inside the job still works", log)
    if len(later) == 32:
        tap.eq(d.wait_done(later)["exit_code"], 0, "the job it queued runs after it")


# ---------------------------------------------------------------- status for a person

def test_status_for_a_person():
    d = Daemon(env={"TT_DEVICE_STOP_GRACE_SEC": "60"}).start()
    # card 1's recent jobs: exit 3, cancelled, killed, timeout, and interrupted by a restart
    d.wait_done(d.submit("exit 3", device_id="1")["job_id"])
    jid, gate = gated(d, "1")
    cancel = d.submit("true", device_id="1")["job_id"]
    tap.eq(d.post("/kill", {"job_id": cancel}).status, 200, "a queued job cancelled")
    d.post("/kill", {"job_id": jid})
    d.wait_done(jid)
    d.wait_done(d.submit("sleep 30", device_id="1", timeout=1)["job_id"])
    jid, gate = gated(d, "1")
    d.restart()
    open_gate(gate)
    # card 0: a job in its kill grace (it ignores SIGINT) and 1000 queued behind it
    ready, gate0 = d.path("ready-trap"), d.path("gate-trap")
    stopping = d.submit("trap '' INT; touch %s; while [ ! -e %s ]; do sleep 0.05; done"
                        % (q(ready), q(gate0)), device_id="0", timeout=120)["job_id"]
    wait_until(lambda: os.path.exists(ready), 10, "the job that ignores SIGINT to start")
    long_cmd, cjk_cmd = "echo " + "x" * 300, "echo " + "漢字" * 150
    bodies = [{"cmd": cjk_cmd if k % 5 == 1 else long_cmd if k % 2 else "true", "device_id": "0",
               "client_id": "c" * 128 if k % 3 == 0 else
               "クライアント" * 21 if k % 5 == 2 else "cli-%d" % k} for k in range(1000)]
    post_many(d.port, bodies)
    tap.eq(d.post("/kill", {"job_id": stopping}).status, 200, "kill of the job ignoring SIGINT")
    rc, out, err = d.cli("status")
    lines = out.splitlines()
    tap.ok(rc == 0 and len(lines) < 40, "status with 1000 queued: %d lines (< 40)"
           % len(lines), out)
    wide = [ln for ln in lines if len(ln) > 100]
    tap.eq(wide, [], "no line longer than 100 characters (CJK ones too)")
    tap.ok(re.search(r"^  stopping .*%s" % stopping, out, re.M),
           "the job in its kill grace shows as stopping", out)
    tap.ok(re.search(r"^  \.\.\. and 990 more", out, re.M) and
           len(re.findall(r"^  queued ", out, re.M)) == 10,
           "card 0: 10 queued jobs, then '... and 990 more'", out)
    card1 = out[out.index("card 1"):]
    words = re.findall(r"^  recent   (\S+(?: \d+)?)", card1, re.M)
    tap.eq(words, ["interrupted", "timeout", "killed", "cancelled", "exit 3"],
           "recent jobs newest first, their outcomes in words")
    rc, out, err = d.cli("status", "--json")
    st = json.loads(out)
    c0 = [c for c in st["devices"] if c["device_id"] == "0"][0]
    tap.ok(len(c0["pending"]) == 1000 and
           len([j for j in c0["pending"] if len(j["client_id"]) == 128]) == 334,
           "--json status keeps every queued job, client ids whole",
           (len(c0["pending"]), out[:300]))
    open_gate(gate0)
    d.cleanup()


# ---------------------------------------------------------------- queue-python -

def test_queue_python_stdin_scripts_in_the_state_folder():
    """An installed binary (make install PREFIX=...) must not write into its bin folder."""
    d = daemon()
    prefix = d.path("prefix")
    subprocess.run(["make", "-s", "-C", os.path.dirname(BINARY), "install", "PREFIX=" + prefix,
                    "INSTALL_BIN=" + BINARY], check=True, capture_output=True)
    exe = os.path.join(prefix, "bin", "tt-device-queue")
    home, xdg = d.path("home-user"), d.path("xdg-state")
    os.mkdir(home)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TT_DEVICE_", "TT_QUEUE_", "XDG_"))}
    env.update({"TT_DEVICE_URL": "http://127.0.0.1:%d" % d.port, "HOME": home})
    for extra, where in (({}, os.path.join(home, ".local", "state")),
                         ({"XDG_STATE_HOME": xdg}, xdg)):
        p = subprocess.run([exe, "queue-python", "--wait", "-"], input=b"print('hi')\n",
                           env=dict(env, **extra), capture_output=True, cwd=d.tmp, timeout=30)
        tap.eq((p.returncode, p.stdout), (0, b"hi\n"), "queue-python - ran the script (%s)"
               % ("XDG_STATE_HOME" if extra else "HOME"))
        folder = os.path.join(where, "tt-device-queue", "cli-scripts")
        tap.ok(os.path.isdir(folder) and any(f.startswith("script-") for f in os.listdir(folder)),
               "the script is kept in %s" % folder.replace(d.tmp, "<tmp>"))
    left = [os.path.join(t, n) for t, ds, fs in os.walk(os.path.join(prefix, "bin"))
            for n in ds + fs]
    tap.eq(left, [exe], "nothing is written beside the executable (no bin/logs-v2/)")
    env.pop("HOME")
    before = jobs_seen(d)
    p = subprocess.run([exe, "queue-python", "-"], input=b"print('hi')\n", env=env,
                       capture_output=True, cwd=d.tmp, timeout=30)
    tap.ok(p.returncode != 0 and b"HOME" in p.stderr and jobs_seen(d) == before,
           "without HOME (nor XDG_STATE_HOME): refused, saying what to set; nothing queued",
           (p.returncode, p.stderr))


if __name__ == "__main__":
    run_tests(test_unknown_fields_create_no_job, test_unknown_query_parameters_are_named,
              test_device_given_twice_is_a_usage_error,
              test_job_does_not_wait_for_its_own_card, test_status_for_a_person,
              test_queue_python_stdin_scripts_in_the_state_folder)

#!/usr/bin/env python3
"""TAP integration tests for what an operator meets on a real host: the control commands'
environment, a control command that cannot be run (a configuration error, not a dead card), a
dead card brought back with `reset --device N`, and a card held for maintenance.

Each test starts its own daemon (ttqlib.Daemon) with fake control commands: bash scripts that
append their card number to `<name>.log`. Waits are conditions with deadlines; a check that
something does NOT happen first waits for a later event on the other card (the loop has run).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ttqlib import Daemon, gate, open_gate, q, run_tests, tap, wait_until  # noqa: E402


def ctl(d, name, body=""):
    """A control script that logs its card number to <name>.log, then runs body."""
    return d.script(name + ".sh", 'echo "$1" >> %s\n%s' % (q(d.path(name + ".log")), body))


def runs(d, name):
    try:
        with open(d.path(name + ".log")) as f:
            return len(f.read().split())
    except FileNotFoundError:
        return 0


def wait_card(d, dev, cond, what, timeout=15):
    def check():
        c = d.dev(dev)
        return c if cond(c) else None
    return wait_until(check, timeout, "card %s: %s" % (dev, what))


def settled(c):
    return not c["reset_pending"] and c["state"] != "resetting" and not (
        c["current"] and c["current"]["mode"] == "reset")


def last_reset(d, dev):
    rj = [x for x in d.dev(dev)["recent"] if x["mode"] == "reset"]
    return d.job(rj[-1]["job_id"]) if rj else None


# ---------------------------------------------------------------- the controls' environment

def test_controls_run_without_visible_devices():
    d = Daemon()
    rec = 'echo "${TT_VISIBLE_DEVICES-unset}" >> %s\n'
    d.env.update({
        "TT_VISIBLE_DEVICES": "3",
        "TT_DEVICE_RESET_RETRIES": "0",
        # the first reset fails, the deep reset makes the second one pass: all three run
        "TT_DEVICE_RESET_CMD": ctl(d, "reset", rec % q(d.path("env.reset")) + "[ -e %s ]"
                                   % q(d.path("deep-ran"))) + " {device}",
        "TT_DEVICE_DEEP_RESET_CMD": ctl(d, "deep", rec % q(d.path("env.deep")) + "touch %s"
                                        % q(d.path("deep-ran"))) + " {device}",
        "TT_DEVICE_HEALTH_CHECK_CMD": ctl(d, "health", rec % q(d.path("env.health")))
        + " {device}",
    })
    d.start()
    d.post("/reset", {"device_id": 1})
    wait_card(d, 1, lambda c: c["reset_epoch"] == 1 and settled(c), "reset to epoch 1")
    seen = {}
    for name in ("reset", "deep", "health"):
        with open(d.path("env." + name)) as f:
            seen[name] = sorted(set(f.read().split()))
    tap.eq(seen, {"reset": ["unset"], "deep": ["unset"], "health": ["unset"]},
           "reset, deep reset and health check run without TT_VISIBLE_DEVICES")
    j = d.submit('echo "${TT_VISIBLE_DEVICES-unset}"', device_id=1)
    tap.eq(d.log_text(d.wait_done(j["job_id"])["job_id"]).strip(), "unset",
           "nor does a job: serve's TT_VISIBLE_DEVICES would remap the cards its code opens")
    j = d.submit('echo "${TT_VISIBLE_DEVICES-unset}"', device_id=1,
                 env={"TT_VISIBLE_DEVICES": "1"})
    tap.eq(d.log_text(d.wait_done(j["job_id"])["job_id"]).strip(), "1",
           "a job's own env may still set it")
    tap.ok("TT_VISIBLE_DEVICES=3 in serve's environment is not passed" in d.stderr(),
           "the log says so at start", d.stderr()[-400:])
    d.cleanup()


# ---------------------------------------------------------------- a command that cannot run

def test_unrunnable_reset_is_a_configuration_error():
    d = Daemon()
    missing = d.path("bin", "tt-smi")  # created later: then a reset succeeds
    d.env.update({"TT_DEVICE_RESET_CMD": missing + " -r {device}",
                  "TT_DEVICE_RESET_RETRIES": "1"})
    d.start()

    path, loop = gate(d, "g0")
    running = d.submit(loop, device_id=0)
    wait_until(lambda: d.job(running["job_id"])["status"] == "running", 10, "job to run")
    r = d.post("/reset", {"device_id": 0})
    tap.eq((r.status, r.get("action")), (200, "scheduled"), "the reset is scheduled")
    c = wait_card(d, 0, lambda c: c["control_error"] and settled(c), "the reset to give up")
    tap.eq((c["state"], c["reset_epoch"], c["dead_since"]), ("healthy", 0, None),
           "the card is not marked dead and keeps its epoch")
    tap.ok(missing in c["control_error"] and "TT_DEVICE_RESET_CMD" in c["control_error"]
           and "not found" in c["control_error"],
           "status names the command and why it could not run", c)
    rj = last_reset(d, 0)
    tap.ok(rj and rj["exit_code"] == 1 and missing in (rj["error"] or "")
           and "configuration" in (rj["error"] or "").lower(),
           "the reset job failed, naming the command", rj)
    tap.ok(rj and "not found" in d.log_text(rj["job_id"]), "its log says why", rj)
    j = d.submit("echo still serving", device_id=0)
    tap.eq(d.wait_done(j["job_id"])["exit_code"], 0, "the card keeps serving")
    tap.eq((d.metric('ttq_control_error{device="0"}'), d.metric('ttq_control_error{device="1"}')),
           (1.0, 0.0),
           "/metrics shows the error on that card only")
    rc, out, _ = d.cli("status", "--device", "0")
    tap.ok("could not be run" in out and missing in out, "the CLI status banner shows it", out)

    os.makedirs(d.path("bin"))
    d.script("bin/tt-smi", "exit 0")
    r = d.post("/reset", {"device_id": 0})
    c = wait_card(d, 0, lambda c: c["reset_epoch"] == 1 and settled(c), "a good reset")
    tap.eq((c["state"], c["control_error"]), ("healthy", None),
           "a successful reset clears the error")
    tap.eq(d.metric('ttq_control_error{device="0"}'), 0.0, "and the metric")
    d.cleanup()


def test_unexecutable_health_check():
    d = Daemon()
    health = d.path("health-not-executable")
    with open(health, "w") as f:
        f.write("#!/bin/bash\nexit 0\n")
    os.chmod(health, 0o644)
    d.env.update({"TT_DEVICE_HEALTH_CHECK_CMD": health + " {device}"})
    d.start()
    d.post("/reset", {"device_id": 1})
    c = wait_card(d, 1, lambda c: c["control_error"] and settled(c), "the reset to give up")
    tap.ok(c["state"] == "healthy" and "TT_DEVICE_HEALTH_CHECK_CMD" in c["control_error"]
           and "not executable" in c["control_error"],
           "exit 126 of the health check: a configuration error, the card stays healthy", c)
    tap.eq(runs(d, "reset"), 1, "the reset ran once: no retry ladder after a command that cannot run")
    d.cleanup()


def test_default_health_check_without_tt_umd():
    """The default health check in a venv without tt_umd exits 2: the card is not to blame."""
    d = Daemon()
    home = d.path("home")
    os.makedirs(os.path.join(home, "tenstorrent", ".venv", "bin"))
    os.symlink(sys.executable, os.path.join(home, "tenstorrent", ".venv", "bin", "python3"))
    d.env.pop("TT_DEVICE_HEALTH_CHECK_CMD", None)
    d.env.update({"HOME": home, "PYTHONPATH": d.path("no-tt-umd-here")})
    d.start()
    d.post("/reset", {"device_id": 1})
    c = wait_card(d, 1, lambda c: c["control_error"] and settled(c), "the reset to give up")
    tap.ok(c["state"] == "healthy" and c["dead_since"] is None and
           "TT_DEVICE_HEALTH_CHECK_CMD" in c["control_error"] and "tt_umd" in c["control_error"],
           "exit 2 of the default health check: a configuration error, the card stays healthy",
           c)
    rj = last_reset(d, 1)
    tap.ok(rj and "cannot import tt_umd" in d.log_text(rj["job_id"]),
           "the reset job's log has the health check's own words", rj)
    j = d.submit("echo still serving", device_id=1)
    tap.eq(d.wait_done(j["job_id"])["exit_code"], 0, "the card keeps serving")
    d.cleanup()


# ---------------------------------------------------------------- the way back from a dead card

def test_dead_card_recovery():
    d = Daemon()
    broken = d.path("broken")
    d.env.update({"TT_DEVICE_RESET_RETRIES": "1",
                  "TT_DEVICE_RESET_CMD": ctl(d, "reset", '[ "$1" != 0 ] || [ ! -e %s ]' % q(broken))
                  + " {device}"})
    d.start()
    before = d.wait_done(d.submit("true", device_id=0)["job_id"])
    open(broken, "w").close()
    d.post("/reset", {"device_id": 0})
    dead = wait_card(d, 0, lambda c: c["state"] == "dead", "dead")
    tap.eq(d.post("/queue", {"cmd": "true", "device_id": 0}).status, 503, "dead: 503")
    rc, out, _ = d.cli("status", "--device", "0")
    tap.ok("card 0 is dead since %s: " % dead["dead_since"] in out,
           "status says since when the card is dead, and why", out)
    n = runs(d, "reset")

    r = d.post("/reset", {"job_id": before["job_id"]})
    tap.eq((r.status, r.get("action")), (503, "dead"), "a job-based reset leaves it alone")
    r = d.post("/reset", {})
    acts = {e["device_id"]: (e["action"], e["hint"]) for e in r.get("resets", [])}
    tap.ok(acts.get("0", ("",))[0] == "dead" and "reset --device 0" in acts["0"][1]
           and acts.get("1", ("",))[0] == "scheduled",
           "an all-card reset leaves it alone and says how to run its recovery", r)
    wait_card(d, 1, lambda c: c["reset_epoch"] == 1 and settled(c), "card 1 reset")
    tap.eq(runs(d, "reset"), n + 1, "only card 1's reset ran")

    path, loop = gate(d, "g1")
    other = d.submit(loop, device_id=1)
    wait_until(lambda: d.job(other["job_id"])["status"] == "running", 10, "card 1's job")
    r = d.post("/reset", {"device_id": 0})
    tap.eq((r.status, r.get("action"), r.get("device_state")), (200, "scheduled", "dead"),
           "a reset of the dead card alone is scheduled")
    tap.ok("(reset, retries, health check)" in r.get("hint", ""),
           "its hint names the steps that run, no deep reset when none is set", r)
    again = wait_card(d, 0, lambda c: c["state"] == "dead" and c["dead_since"]
                      != dead["dead_since"] and settled(c), "dead again")
    tap.eq(runs(d, "reset"), n + 1 + 2, "its recovery ran again: 1 + RETRIES resets")
    tap.ok("again" in again["dead_reason"] and again["reset_epoch"] == dead["reset_epoch"],
           "a failed recovery keeps it dead with the new reason", again)
    tap.eq(d.post("/queue", {"cmd": "true", "device_id": 0}).status, 503, "still refused")

    os.unlink(broken)
    rc, out, err = d.cli("reset", "--device", "0")
    tap.ok(rc == 0 and "scheduled" in out, "`reset --device 0` runs the recovery", out + err)
    c = wait_card(d, 0, lambda c: c["state"] == "healthy" and settled(c), "healthy")
    tap.eq((c["reset_epoch"], c["dead_reason"], c["dead_since"]),
           (dead["reset_epoch"] + 1, None, None), "healthy at epoch + 1, no dead reason")
    j = d.submit("echo back", device_id=0)
    tap.eq(d.wait_done(j["job_id"])["exit_code"], 0, "it accepts and runs jobs again")
    tap.eq(d.job(other["job_id"])["status"], "running",
           "card 1's job ran on through both recoveries")
    open_gate(path)
    tap.eq(d.wait_done(other["job_id"])["exit_code"], 0, "and finished well")
    d.cleanup()


# ---------------------------------------------------------------- hold and release

def test_hold_and_release_across_restart():
    d = Daemon()
    d.start()
    path, loop = gate(d, "g0")
    first = d.submit(loop, device_id=0)
    wait_until(lambda: d.job(first["job_id"])["status"] == "running", 10, "job to run")
    rc, out, err = d.cli("--client-id", "alice", "hold", "--device", "0",
                         "--reason", "reseating the cable")
    tap.ok(rc == 0 and json.loads(out)["held_by"] == "alice", "`hold --device 0` holds it",
           out + err)
    c = d.dev(0)
    tap.ok(c["held"] and c["held_by"] == "alice" and c["hold_reason"] == "reseating the cable"
           and c["held_at"], "status shows who held it, when and why", c)
    tap.eq(d.job(first["job_id"])["status"], "running", "the running job goes on")
    second = d.submit("echo after the hold", device_id=0)
    tap.eq(second["status"], "queued", "a new job is accepted")
    r = d.post("/reset", {"device_id": 0})
    tap.ok(r.status == 200 and "held" in r["hint"], "a reset is scheduled for after it", r)
    open_gate(path)
    tap.eq(d.wait_done(first["job_id"])["exit_code"], 0, "the running job finished")
    # the loop has gone on: a job on card 1 ran after that
    tap.eq(d.wait_done(d.submit("true", device_id=1)["job_id"])["exit_code"], 0,
           "card 1 runs on")
    tap.eq((d.job(second["job_id"])["status"], runs(d, "reset")), ("queued", 0),
           "nothing more started on the held card (neither job nor reset)")
    tap.eq(d.metric('ttq_card_held{device="0"}'), 1.0, "/metrics shows the hold")
    rc, out, _ = d.cli("status", "--device", "0")
    tap.ok("HELD by alice" in out and "reseating the cable" in out, "the CLI banner", out)
    tap.ok("a reset is pending on card 0" in out, "status says the reset waits for the card", out)

    held_at = d.dev(0)["held_at"]
    d.restart()
    c = d.dev(0)
    tap.eq((c["held"], c["held_by"], c["hold_reason"], c["held_at"], c["reset_pending"]),
           (True, "alice", "reseating the cable", held_at, True),
           "the hold (and the reset waiting for it) survives a restart")
    tap.eq(d.job(second["job_id"])["status"], "queued", "the job stays queued")
    tap.eq(d.wait_done(d.submit("true", device_id=1)["job_id"])["exit_code"], 0,
           "card 1 runs after the restart")
    tap.eq((d.job(second["job_id"])["status"], os.path.exists(d.reset_log)), ("queued", False),
           "still nothing starts on the held card")

    rc, out, err = d.cli("release", "--device", "0")
    tap.ok(rc == 0 and json.loads(out)["action"] == "released",
           "`release --device 0` releases it", out + err)
    done = d.wait_done(second["job_id"])
    tap.eq(done["exit_code"], 0, "the queued job runs after the release")
    tap.ok(done["reset_epoch"] == 1 and os.path.exists(d.reset_log),
           "after the pending reset, which went first", done)
    c = d.dev(0)
    tap.eq((c["held"], c["held_by"], c["held_at"], c["hold_reason"]), (False, None, None, None),
           "released: no hold shown")
    d.cleanup()


def test_hold_requests():
    d = Daemon()
    d.start()
    tap.eq(d.post("/hold", {}).status, 400, "hold without device_id: 400")
    r = d.post("/hold", {"device_id": 7})
    tap.ok(r.status == 400 and "0, 1" in r["error"], "hold of an unknown card: 400", r)
    tap.eq(d.get("/hold").status, 405, "GET /hold: 405")
    r = d.post("/hold", {"device_id": "1", "reason": "bad\nline"})
    tap.eq(r.status, 400, "a reason with a control character: 400")
    r = d.post("/hold", {"device_id": "1", "reason": "firmware update", "client_id": "bob"})
    tap.eq((r.status, r["action"], r["held_by"], r["device_id"]), (200, "held", "bob", "1"),
           "POST /hold holds")
    r = d.post("/hold", {"device_id": 1, "client_id": "carol"})
    tap.eq((r["action"], r["held_by"], r["hold_reason"]),
           ("already_held", "bob", "firmware update"), "a second hold keeps the first")
    r = d.post("/release", {"device_id": 1})
    tap.eq((r.status, r["action"], r["held"]), (200, "released", False), "POST /release")
    r = d.post("/release", {"device_id": 1})
    tap.eq((r.status, r["action"]), (200, "not_held"), "releasing a free card changes nothing")
    rc, _, err = d.cli("hold")
    tap.ok(rc == 2 and "--device" in err, "`hold` without --device is a usage error", err)
    d.cleanup()


if __name__ == "__main__":
    run_tests(test_controls_run_without_visible_devices,
              test_unrunnable_reset_is_a_configuration_error, test_unexecutable_health_check,
              test_default_health_check_without_tt_umd,
              test_dead_card_recovery, test_hold_and_release_across_restart, test_hold_requests)

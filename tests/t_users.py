#!/usr/bin/env python3
"""A shared lab host: every user as themselves, nobody in where they do not belong.

Prints TAP. Creates two users (useradd; the test needs root, as CI runs it) and drives the real
client as each of them against the real daemon: a personal queue (the daemon runs as one user)
refuses the other user with 403 and creates nothing; a host-wide queue (the daemon runs as
root) runs each job as its submitter (uid, groups, HOME, files it creates), refuses another
user's kill, output, hold and a reset that would stop another user's job with a 403 naming the
rule, lets an admin (a member of TT_DEVICE_ADMIN_GROUP) do them, and accepts a reset of an idle
card from anyone.
"""

import grp
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ttqlib import BINARY, Daemon, cli_env, gate, open_gate, run_tests, tap, wait_until  # noqa: E402

ALICE, BOB, CAROL = "ttq-ta", "ttq-tb", "ttq-tc"  # short: status shows 8 columns of a name
TEAM, ADMINS = "ttq-test-team", "ttq-test-admins"
ROOT = os.geteuid() == 0
HEX32 = re.compile(r"job_id=([0-9a-f]{32})")


def ensure_users():
    """The test users and groups (alice in team; carol in admins), made once."""
    for g in (TEAM, ADMINS):
        try:
            grp.getgrnam(g)
        except KeyError:
            subprocess.run(["groupadd", g], check=True)
    for u, groups in ((ALICE, TEAM), (BOB, ""), (CAROL, ADMINS)):
        try:
            pwd.getpwnam(u)
        except KeyError:
            cmd = ["useradd", "-m", "-s", "/bin/bash", u] + (["-G", groups] if groups else [])
            subprocess.run(cmd, check=True)
    return {u: pwd.getpwnam(u) for u in (ALICE, BOB, CAROL)}


def user_binary():
    """A copy of the client every user can run: the checkout may sit under a folder only its
    owner enters (a CI clone in a private temp dir)."""
    global SHARED
    if SHARED is None:
        folder = tempfile.mkdtemp(prefix="ttq-users-bin-")
        os.chmod(folder, 0o755)
        SHARED = os.path.join(folder, "tt-device-queue")
        shutil.copy(BINARY, SHARED)
    return SHARED


SHARED = None


def as_user(d, user, *args, cwd=None):
    """The client run as user (its uid, groups, HOME); (status, out, err)."""
    pw = pwd.getpwnam(user)
    env = cli_env(d, {"HOME": pw.pw_dir, "USER": user, "LOGNAME": user})
    p = subprocess.run([user_binary()] + [str(a) for a in args], env=env, cwd=cwd or pw.pw_dir,
                       capture_output=True, timeout=60, user=pw.pw_uid, group=pw.pw_gid,
                       extra_groups=[g.gr_gid for g in grp.getgrall() if user in g.gr_mem])
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def test_personal_queue_refuses_other_users():
    if not ROOT:
        print("# needs root to make users; the personal queue's own user is checked instead")
        d = Daemon().start()
        rc, out, err = d.cli("status")
        tap.ok(rc == 0, "the queue's own user uses it", err)
        d.cleanup()
        return
    users = ensure_users()
    d = Daemon()
    d.start(uid=users[ALICE].pw_uid)
    rc, out, err = as_user(d, ALICE, "queue", "--", "echo mine")
    tap.ok(rc == 0 and HEX32.search(out), "alice uses her own queue", (rc, out, err))
    rc, out, err = as_user(d, BOB, "queue", "--", "echo intruder")
    tap.ok(rc == 1 and "403" in err and ALICE in err and "personal" in err,
           "bob is refused with 403 saying whose queue this is", (rc, err))
    rc, out, err = as_user(d, BOB, "status")
    tap.eq(rc, 1, "bob cannot even read its status")
    rc, out, err = d.cli("--json", "status")  # as root
    tap.ok(rc == 0 and "echo intruder" not in out, "root uses it, and bob created nothing",
           (rc, err))
    d.cleanup()


def host_daemon(users):
    d = Daemon()
    d.start(env={"TT_DEVICE_ADMIN_GROUP": ADMINS})
    return d


def test_host_queue_runs_each_job_as_its_submitter():
    if not ROOT:
        print("# needs root: a host-wide queue runs as root")
        return
    users = ensure_users()
    d = host_daemon(users)
    work = tempfile.mkdtemp(prefix="ttq-alice-")
    os.chown(work, users[ALICE].pw_uid, users[ALICE].pw_gid)
    os.chmod(work, 0o700)
    rc, out, err = as_user(d, ALICE, "run", "--",
                           "id -u; id -G; echo $HOME $USER $LOGNAME; touch made-by-job; pwd",
                           cwd=work)
    lines = out.split("\n")
    tap.ok(rc == 0 and lines[0] == str(users[ALICE].pw_uid),
           "alice's job runs as alice (id -u)", (rc, out, err))
    tap.ok(str(grp.getgrnam(TEAM).gr_gid) in lines[1].split(),
           "with her supplementary groups (id -G)", lines[1:2])
    tap.eq(lines[2], "%s %s %s" % (users[ALICE].pw_dir, ALICE, ALICE),
           "and her HOME, USER and LOGNAME")
    st = os.stat(os.path.join(work, "made-by-job"))
    tap.ok(st.st_uid == users[ALICE].pw_uid, "a file the job creates is hers")
    tap.eq(lines[3], work, "in the directory she gave")
    rc, out, err = as_user(d, BOB, "queue", "--cwd", work, "--", "true")
    tap.ok(rc == 1 and "400" in err and "can enter" in err and BOB in err,
           "bob cannot queue a job in a directory he cannot enter", (rc, err))
    rec = d.status()["devices"][0]["recent"][-1]
    tap.ok(rec["owner"] == ALICE and d.job(rec["job_id"])["owner_uid"] == users[ALICE].pw_uid,
           "status names each job's owner; its record has the uid too", rec)
    rc, out, err = as_user(d, BOB, "--json", "status")
    owners = [j.get("owner") for x in (json.loads(out)["devices"] if rc == 0 else [])
              for j in x["recent"]]
    tap.ok(rc == 0 and ALICE in owners, "every user sees every job with its owner", out)
    shutil.rmtree(work, ignore_errors=True)
    d.cleanup()


def test_host_queue_rules():
    if not ROOT:
        print("# needs root: a host-wide queue runs as root")
        return
    users = ensure_users()
    d = host_daemon(users)
    g, wait = gate(d, "g")
    os.chmod(d.tmp, 0o755)  # the gate file's folder: every user's job looks at it
    rc, out, err = as_user(d, ALICE, "queue", "--device", "0", "--", wait)
    running = HEX32.search(out).group(1)
    wait_until(lambda: d.job(running)["status"] == "running", 10, "alice's job to run")
    rc, out, err = as_user(d, ALICE, "queue", "--device", "0", "--", "echo queued")
    queued = HEX32.search(out).group(1)
    rc, out, err = as_user(d, BOB, "status")
    tap.ok("[%s: " % ALICE in out, "status lines name each job's owner", out)
    for args, what in ((("kill", running), "kill alice's running job"),
                       (("kill", queued), "cancel alice's queued job"),
                       (("logs", running), "read alice's output"),
                       (("result", queued, "--wait-timeout", "0"), "read alice's outcome"),
                       (("hold", "--device", "1"), "hold a card"),
                       (("reset", "--device", "0"), "reset the card running alice's job")):
        rc, out, err = as_user(d, BOB, *args)
        tap.ok(rc == 1 and "403" in err and ("owner" in err or "admin" in err),
               "bob may not %s: 403 naming the rule" % what, (rc, err))
    tap.eq((d.job(running)["status"], d.job(queued)["status"]), ("running", "queued"),
           "and nothing of alice's was touched")
    rc, out, err = as_user(d, BOB, "reset", "--device", "1")
    tap.ok(rc == 0 and "scheduled" in out, "bob may reset an idle card", (rc, out, err))
    rc, out, err = as_user(d, ALICE, "logs", running)
    tap.eq(rc, 0, "alice reads her own output")
    rc, out, err = as_user(d, CAROL, "kill", queued)
    tap.ok(rc == 0 and "cancelled" in out, "an admin (group %s) cancels alice's job" % ADMINS,
           (rc, out, err))
    rc, out, err = as_user(d, CAROL, "hold", "--device", "1", "--reason", "maintenance")
    tap.eq(rc, 0, "an admin holds a card")
    rc, out, err = as_user(d, CAROL, "release", "--device", "1")
    tap.eq(rc, 0, "and releases it")
    rc, out, err = as_user(d, ALICE, "kill", running)
    tap.ok(rc == 0 and json.loads(out)["killed"]["job_id"] == running, "alice kills her own job",
           (rc, out, err))
    open_gate(g)
    d.cleanup()


def test_keys_are_per_user():
    if not ROOT:
        print("# needs root: a host-wide queue runs as root")
        return
    ensure_users()
    d = host_daemon(None)
    rc, out, _ = as_user(d, ALICE, "queue", "--key", "nightly", "--", "true")
    a = HEX32.search(out).group(1)
    rc, out, _ = as_user(d, BOB, "queue", "--key", "nightly", "--", "true")
    b = HEX32.search(out).group(1)
    tap.ok(a != b, "the same idempotency key of two users names two jobs")
    d.cleanup()


CLIENT = r"""
import http.client, sys
c = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=10)
c.request(sys.argv[3], sys.argv[4], body=sys.argv[5] if len(sys.argv) > 5 else None)
r = c.getresponse()
print(r.status, r.read().decode())
"""


def from_another_host(addr, port, method, path, body=None):
    """One request from a network namespace of its own (another host, as the kernel sees it)
    over a veth pair; (status, body)."""
    ns = "ttq-test-%d" % os.getpid()
    args = ["ip", "netns", "exec", ns, sys.executable, "-c", CLIENT, addr, str(port), method,
            path] + ([body] if body else [])
    p = subprocess.run(args, capture_output=True, timeout=30)
    status, _, text = p.stdout.decode().partition(" ")
    return int(status or 0), text + p.stderr.decode()


def test_anonymous_callers():
    if not ROOT:
        print("# needs root: a network namespace stands in for another host")
        return
    ns, host, peer = "ttq-test-%d" % os.getpid(), "vttq%d" % (os.getpid() % 100000), "10.222.7."
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
    try:
        run("ip", "netns", "add", ns)
        run("ip", "link", "add", host, "type", "veth", "peer", "name", host + "n")
        run("ip", "link", "set", host + "n", "netns", ns)
        run("ip", "addr", "add", peer + "1/24", "dev", host)
        run("ip", "link", "set", host, "up")
        run("ip", "netns", "exec", ns, "ip", "addr", "add", peer + "2/24", "dev", host + "n")
        run("ip", "netns", "exec", ns, "ip", "link", "set", host + "n", "up")
        d = Daemon().start(env={"TT_DEVICE_HOST": "0.0.0.0"})
        st, text = from_another_host(peer + "1", d.port, "GET", "/status")
        tap.ok(st == 403 and "cannot be identified" in text and "TT_DEVICE_ALLOW_ANONYMOUS" in text,
               "a caller the kernel cannot name is refused with 403, naming the setting", text)
        d.stop()
        d.start(env={"TT_DEVICE_HOST": "0.0.0.0", "TT_DEVICE_ALLOW_ANONYMOUS": "true"})
        st, text = from_another_host(peer + "1", d.port, "GET", "/status")
        tap.eq(st, 200, "TT_DEVICE_ALLOW_ANONYMOUS=true: it reads a host-wide queue")
        st, text = from_another_host(peer + "1", d.port, "POST", "/queue", '{"cmd": "true"}')
        tap.ok(st == 403 and "only read" in text, "but may not submit to it", text)
        tap.eq(d.status()["queued_total"] + len(d.dev(0)["recent"]), 0, "nothing was queued")
        d.cleanup()
    finally:
        subprocess.run(["ip", "link", "del", host], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


if __name__ == "__main__":
    try:
        run_tests(test_personal_queue_refuses_other_users,
                  test_host_queue_runs_each_job_as_its_submitter, test_host_queue_rules,
                  test_keys_are_per_user, test_anonymous_callers)
    finally:
        if SHARED:
            shutil.rmtree(os.path.dirname(SHARED), ignore_errors=True)

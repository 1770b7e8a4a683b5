#!/usr/bin/env python3
"""TAP integration tests for one queue per card per host: a serve claims each card whose node
<TT_DEVICE_DEV_DIR>/N exists, and a second serve naming that card, whatever its log dir and
port, exits 2 naming the first before it touches anything. Cards without a node are simulated
and not claimed.

Stand-in nodes are regular files in a temp dir (their identity is st_dev and st_ino); as root,
character devices made with mknod too (their identity is major:minor). Each refusal takes the
2 s a claim in use is tried again. Waits are conditions with deadlines.
"""
import atexit
import os
import pwd
import shutil
import signal
import socket
import stat
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ttqlib import (Daemon, gate, guardian_of, open_gate, run_tests, socket_inodes,  # noqa: E402
                    tap, wait_until)


TMP = tempfile.mkdtemp(prefix="ttq-claim-")
atexit.register(shutil.rmtree, TMP, True)


def dev_dir(*names):
    """A temp folder holding empty regular files `names` (stand-in device nodes)."""
    d = tempfile.mkdtemp(dir=TMP)
    for n in names:
        open(os.path.join(d, n), "w").close()
    return d


def daemon(dev, ids="0,1"):
    return Daemon(ids=ids, env={"TT_DEVICE_DEV_DIR": dev})


def refused(dev, ids, port=None):
    """Start serve on dev's cards `ids` with a log dir of its own; (exit status, stderr, it)."""
    d = daemon(dev, ids).start(wait=False, port=port)
    d.proc.wait(15)
    return d.proc.returncode, d.stderr(), d


def names_user(err, uid):
    """Whether err names the user uid: by name as /etc/passwd has it, else by number."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = None
    return ("user %s," % name) in err if name else ("uid %d" % uid) in err


def claims_of(pid):
    """{socket inode: abstract name} of the device claims process pid holds open."""
    names = {}
    with open("/proc/net/unix") as f:
        for line in f.read().splitlines()[1:]:
            cols = line.split()
            if len(cols) >= 8 and cols[7].startswith("@tt-device-queue/claim/"):
                names[cols[6]] = cols[7]
    return {i: names[i] for i in socket_inodes(pid) if i in names}




def test_a_second_serve_on_a_claimed_card_exits_2():
    dev = dev_dir("0", "1")
    a = daemon(dev).start()
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)  # a port it cannot have: binding it first would have exited 1
    rc, err, b = refused(dev, "0", port=held.getsockname()[1])
    tap.eq(rc, 2, "a second serve (its own log dir) naming card 0 exits 2")
    tap.ok("card 0 (%s/0) is served by another instance: pid %d," % (dev, a.proc.pid) in err
           and names_user(err, os.getuid()) and "tt-device-queue serve'" in err
           and "stop it, or name other cards in TT_DEVICE_IDS" in err,
           "naming the card, its node, the first one's pid, user and command line, and what "
           "to do", err)
    tap.ok("cannot listen" not in err and not os.path.exists(b.log_dir),
           "before its port was bound or its log dir made", err)
    held.close()
    rc, err, _ = refused(dev, "1")
    tap.ok(rc == 2 and "card 1 (%s/1)" % dev in err and "pid %d," % a.proc.pid in err,
           "naming only card 1 while the first holds 0 and 1: refused too", err)
    j = a.wait_done(a.submit("echo still here", device_id="0")["job_id"])
    tap.ok(j["exit_code"] == 0 and "has no device node" not in a.stderr(),
           "the first serves on, its cards claimed, not simulated", a.stderr())


def test_a_holder_that_cannot_be_identified_still_refuses():
    dev = dev_dir("0")
    st = os.stat(os.path.join(dev, "0"))
    squat = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # the claim's name for this file, bound but not listening: connecting to it is refused
    squat.bind("\0tt-device-queue/claim/file/%d:%d/%d"
               % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    try:
        rc, err, d = refused(dev, "0")
    finally:
        squat.close()
    tap.ok(rc == 2 and "card 0 (%s/0) is served by another instance: it cannot be identified"
           % dev in err and not os.path.exists(d.log_dir),
           "a claim whose holder cannot be identified says so and exits 2 all the same", err)


def test_cards_without_a_node_are_simulated_and_not_claimed():
    dev = dev_dir()  # exists, holds no nodes
    a, b = daemon(dev).start(), daemon(dev).start()
    gate_path, wait = gate(a, "go")
    ja = a.submit(wait + "; echo card 0 of a", device_id="0")
    jb = b.wait_done(b.submit("echo card 0 of b", device_id="0")["job_id"])
    tap.eq(jb["exit_code"], 0, "two serves on simulated cards 0,1 both run jobs on card 0")
    open_gate(gate_path)
    tap.eq(a.wait_done(ja["job_id"])["exit_code"], 0, "at once")
    for n in "01":
        tap.ok(("card %s has no device node at %s/%s: a queue name only, not claimed"
                % (n, dev, n)) in a.stderr(), "the start says card %s is simulated" % n,
               a.stderr())
    tap.eq(claims_of(a.proc.pid), {}, "and claims nothing")


def test_the_claim_passes_on_when_its_daemon_is_gone():
    for how in ("SIGTERM", "kill -9"):
        dev = dev_dir("0")
        a = daemon(dev, "0").start()
        if how == "SIGTERM":
            tap.eq(a.stop(), 0, "the first serve stops on SIGTERM")
        else:
            a.proc.send_signal(signal.SIGKILL)  # not waited for: the next serve starts at once
        b = daemon(dev, "0").start()
        tap.ok(b.alive() and b.wait_done(b.submit("true")["job_id"])["exit_code"] == 0,
               "after %s of the first, a new serve claims card 0 and runs jobs" % how,
               b.stderr())
        rc, err, _ = refused(dev, "0")
        tap.ok(rc == 2 and "pid %d," % b.proc.pid in err,
               "the claim is the new one's: a third serve is refused naming it", err)


def test_one_card_under_two_paths_is_one_claim():
    dev = dev_dir("0")
    other = dev_dir()
    os.link(os.path.join(dev, "0"), os.path.join(other, "0"))
    a = daemon(dev, "0").start()
    rc, err, _ = refused(other, "0")
    tap.ok(rc == 2 and "card 0 (%s/0)" % other in err and "pid %d," % a.proc.pid in err,
           "the same file under a second path (a hard link) is the same claim", err)
    if os.geteuid() != 0:
        print("# not root: the mknod character devices are left out")
        return
    one, two = dev_dir(), dev_dir()
    minor = 1000000 + os.getpid() % 40000  # major 1 (mem) has no such minor: no real device
    try:
        for d, m in ((one, minor), (two, minor)):
            os.mknod(os.path.join(d, "0"), stat.S_IFCHR | 0o600, os.makedev(1, m))
        os.mknod(os.path.join(two, "1"), stat.S_IFCHR | 0o600, os.makedev(1, minor + 1))
    except PermissionError as e:
        print("# mknod refused here (%s): the character devices are left out" % e)
        return
    c = daemon(one, "0").start()
    rc, err, _ = refused(two, "0")
    tap.ok(rc == 2 and "card 0 (%s/0)" % two in err and "pid %d," % c.proc.pid in err,
           "two character device nodes of one major:minor are one claim", err)
    d = daemon(two, "1").start()
    tap.ok(d.alive(), "another minor is another card: claimed beside it", d.stderr())


def test_the_claim_stays_with_the_daemon():
    dev = dev_dir("0")
    a = daemon(dev, "0").start()
    held = claims_of(a.proc.pid)
    tap.ok(len(held) == 1, "the daemon holds one claim for its one card", held)
    path, wait = gate(a, "go")
    pidfile = a.path("job.pid")
    j = a.submit("echo $$ > %s; %s" % (pidfile, wait))
    wait_until(lambda: os.path.exists(pidfile) and open(pidfile).read().strip(), 10,
               "the job to start")
    job, guardian = int(open(pidfile).read()), guardian_of(a.proc.pid)
    tap.ok(guardian and not set(held) & (socket_inodes(job) | socket_inodes(guardian)),
           "neither the running job nor the guardian holds it", (job, guardian, held))
    open_gate(path)
    a.wait_done(j["job_id"])
    name = "\0" + next(iter(held.values()))[1:]
    closed = 0
    for _ in range(64):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(name)
            closed += s.recv(1) == b""
        finally:
            s.close()
    tap.eq(closed, 64, "who connects to it is accepted and closed: its backlog never fills")


def test_the_dev_dir_setting():
    d = daemon("relative/dev")
    d.start(wait=False)
    d.proc.wait(15)
    tap.ok(d.proc.returncode == 2 and "TT_DEVICE_DEV_DIR: 'relative/dev'" in d.stderr(),
           "a relative TT_DEVICE_DEV_DIR exits 2 naming it", d.stderr())
    dev = dev_dir("0", "3", "ctl")
    a = daemon(dev)
    del a.env["TT_DEVICE_IDS"]
    a.start()
    tap.eq(sorted(c["device_id"] for c in a.status()["devices"]), ["0", "3"],
           "without TT_DEVICE_IDS the cards are the numeric nodes in TT_DEVICE_DEV_DIR")
    rc, err, _ = refused(dev, "3")
    tap.ok(rc == 2 and "pid %d," % a.proc.pid in err, "and they are claimed", err)


run_tests(test_a_second_serve_on_a_claimed_card_exits_2,
          test_a_holder_that_cannot_be_identified_still_refuses,
          test_cards_without_a_node_are_simulated_and_not_claimed,
          test_the_claim_passes_on_when_its_daemon_is_gone,
          test_one_card_under_two_paths_is_one_claim,
          test_the_claim_stays_with_the_daemon,
          test_the_dev_dir_setting)

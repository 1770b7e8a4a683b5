#!/usr/bin/env python3
"""Slurm and the queue on one host: slurm/prolog and slurm/epilog against a real cluster.

Prints TAP. Needs root and Debian's slurmctld, slurmd and slurm-client (.ci/run installs
them); without slurmctld it fails, saying what to install. It starts a single-node cluster on
localhost in a temp dir (free ports, its state, spool, logs and pid files there, two
mknod'd stand-in nodes for /dev/tenstorrent/0 and 1 named in gres.conf as gpu, 2 CPUs,
PrologFlags=Alloc) whose Prolog and Epilog are the checkout's scripts, pointed at a test
daemon and the built executable by a two-line wrapper each. A Slurm job given card 1 waits
for the queue job running there; queue jobs queued meanwhile wait for the Slurm job; card 0
runs queue jobs all along; each Slurm job's lease ends released when the job ends, is
cancelled while it waits, or is cancelled while it runs; a Slurm job whose waiting lease is
killed in the queue is cancelled; the node never drains. Every
daemon it started (slurmctld, slurmd, the queue) and every process of the cluster's jobs is
stopped at the end, also when a check fails.
"""

import atexit
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pwd  # noqa: E402

from ttqlib import BINARY, ROOT, Daemon, free_port, q, run_tests, tap, wait_until  # noqa: E402

USER = "ttq-ts"  # the user some Slurm jobs run as (made with useradd, as t_users.py does)
SLURM_CONF = """ClusterName=ttqtest
SlurmctldHost=localhost
SlurmctldPort=%(ctld_port)d
SlurmdPort=%(d_port)d
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
TaskPlugin=task/none
MpiDefault=none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=%(tmp)s/state
SlurmdSpoolDir=%(tmp)s/spool
SlurmctldPidFile=%(tmp)s/slurmctld.pid
SlurmdPidFile=%(tmp)s/slurmd.pid
SlurmctldLogFile=%(tmp)s/log/slurmctld.log
SlurmdLogFile=%(tmp)s/log/slurmd.log
ReturnToService=2
GresTypes=gpu
Prolog=%(tmp)s/prolog
Epilog=%(tmp)s/epilog
PrologFlags=Alloc
BatchStartTimeout=43200
KillWait=5
NodeName=localhost CPUs=2 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""
# The Prolog and Epilog as Slurm runs them (as root, in a bare environment), pointed at the
# test daemon and the built executable.
WRAPPER = """#!/bin/sh
TTQ_EXE=%(exe)s TT_DEVICE_URL=%(url)s TTQ_ENV_FILE=/nonexistent TTQ_SLURM_POLL_SEC=1
export TTQ_EXE TT_DEVICE_URL TTQ_ENV_FILE TTQ_SLURM_POLL_SEC
exec %(script)s
"""


class Cluster:
    """slurmctld and slurmd in a temp dir, as this process's children."""

    def __init__(self, url):
        self.tmp = tempfile.mkdtemp(prefix="ttq-slurm-")
        os.chmod(self.tmp, 0o755)
        self.conf = self.path("slurm.conf")
        self.procs = []
        for d in ("state", "spool", "log", "dev/tenstorrent", "out"):
            os.makedirs(self.path(d))
        os.chmod(self.path("out"), 0o1777)  # jobs of USER write their output there
        minor = 1000000 + os.getpid() % 40000  # major 1 (mem) has no such minor: no device
        for i in (0, 1):
            os.mknod(self.path("dev/tenstorrent/%d" % i), stat.S_IFCHR | 0o600,
                     os.makedev(1, minor + i))
        with open(self.conf, "w") as f:
            f.write(SLURM_CONF % {"tmp": self.tmp, "ctld_port": free_port(),
                                  "d_port": free_port()})
        with open(self.path("gres.conf"), "w") as f:
            f.write("Name=gpu File=%s/dev/tenstorrent/[0-1]\n" % self.tmp)
        for name in ("prolog", "epilog"):
            with open(self.path(name), "w") as f:
                f.write(WRAPPER % {"exe": q(BINARY), "url": q(url),
                                   "script": q(os.path.join(ROOT, "slurm", name))})
            os.chmod(self.path(name), 0o755)
        self.env = dict(os.environ, SLURM_CONF=self.conf)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def start(self):
        # foreground (-D), so they stay this process's children; under their own names, or
        # slurmd ignores the GRES lines
        for argv in (["slurmctld", "-D", "-i", "-f", self.conf],
                     ["slurmd", "-D", "-N", "localhost", "-f", self.conf]):
            err = open(self.path("log", argv[0] + ".err"), "ab")
            self.procs.append(subprocess.Popen(argv, env=self.env, cwd=self.tmp,
                                               stdin=subprocess.DEVNULL, stdout=err,
                                               stderr=err, start_new_session=True))
            err.close()
        wait_until(lambda: self.node_state() == "idle", 30, "the node to come up idle:\n"
                   + self.log_tail())

    def run(self, *argv):
        p = subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                           timeout=30, cwd=self.tmp)
        return p.returncode, p.stdout.strip(), p.stderr.strip()

    def node_state(self):
        for p in self.procs:
            if p.poll() is not None:
                raise AssertionError("%s exited with %s:\n%s" % (p.args[0], p.returncode,
                                                                  self.log_tail()))
        return self.run("sinfo", "-h", "-N", "-o", "%T")[1]

    def settled(self):
        """The node's state once no job of Slurm's is on it or ending there."""
        def settled():
            st = self.node_state()
            return st if st == "idle" or "drain" in st or "down" in st else None
        return wait_until(settled, 30, "the node to be idle (or drained)")

    def sbatch(self, script, user="root", limit=None):
        rc, out, err = self.run("sbatch", "--parsable", "--gres=gpu:1", "--uid", user, "-o",
                                self.path("out", "slurm-%j.out"),
                                *(["--time", limit] if limit else []), "--wrap", script)
        if rc != 0:
            raise AssertionError("sbatch refused: %s %s" % (out, err))
        return out.split(";")[0]

    def job(self, job_id):
        """(state, reason) of a Slurm job."""
        out = self.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T %r")[1]
        return tuple(out.split(" ", 1)) if " " in out else (out, "")

    def log_tail(self):
        out = []
        for name in ("slurmctld.log", "slurmd.log", "slurmctld.err", "slurmd.err"):
            try:
                with open(self.path("log", name), errors="replace") as f:
                    out += ["== " + name] + f.read().splitlines()[-15:]
            except OSError:
                pass
        return "\n".join(out)

    def leftovers(self):
        """Processes of this cluster: its daemons' children (slurmstepd, Prolog, Epilog, job
        scripts) carry its SLURM_CONF or name its temp dir."""
        mark, pids = ("SLURM_CONF=" + self.conf).encode(), []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open("/proc/%s/environ" % name, "rb") as f:
                    env = f.read().split(b"\0")
                with open("/proc/%s/cmdline" % name, "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if mark in env or self.tmp.encode() in cmd:
                pids.append(int(name))
        return pids

    def stop(self):
        """Cancel every job, stop both daemons, then kill whatever of the cluster is left."""
        if self.procs and all(p.poll() is None for p in self.procs):
            self.run("scancel", "--full", "--partition", "debug")
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for pid in self.leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.procs = []

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def ensure_user():
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", USER], check=True)


def lease_of(d, slurm_job):
    """The lease record the Prolog took for a Slurm job (key slurm-ID, its owner's: root's or
    USER's), or None."""
    for owner in ("", "&owner=%d" % pwd.getpwnam(USER).pw_uid):
        r = d.get("/job?key=slurm-%s%s" % (slurm_job, owner))
        if r.status == 200:
            return d.job(r["job_id"])
    return None


def lines(path):
    try:
        with open(path) as f:
            return f.read().split("\n")[:-1]
    except OSError:
        return []


def test_slurm_jobs_take_their_place_in_the_cards_queues():
    ensure_user()
    d = Daemon(ids="0,1")
    d.start()
    c = Cluster("http://127.0.0.1:%d" % d.port)
    atexit.register(c.cleanup)  # also when this process dies before the finally below
    try:
        c.start()
        tap.ok(True, "a one-node cluster with two cards (gpu 0 and 1) is up")
        scenario(d, c)
    finally:
        c.cleanup()
        tap.eq(c.leftovers(), [], "no process of the cluster is left")
        d.cleanup()


def scenario(d, c):
    order = c.path("order")
    open(order, "w").close()
    os.chmod(order, 0o666)  # USER's jobs log there too
    gates = {n: c.path("gate-" + n) for n in ("A", "S0", "S1", "D")}

    def step(name, gate=None):
        """A command that logs 'NAME start', waits for its gate, then logs 'NAME end'."""
        wait = "while [ ! -e %s ]; do sleep 0.05; done; " % q(gates[gate]) if gate else ""
        return "echo '%s start' >> %s; %secho '%s end' >> %s" % (name, q(order), wait, name,
                                                                  q(order))

    def opened(name):
        open(gates[name], "a").close()

    def logged(entry, what):
        return wait_until(lambda: entry in lines(order), 30, what)

    # A queue job runs on card 1; a Slurm job takes card 0 (Slurm's first free gpu) at once.
    a = d.submit(step("A", "A"), device_id="1")["job_id"]
    logged("A start", "queue job A to start on card 1")
    s0 = c.sbatch(step("S0", "S0"), limit="1:10:00")
    logged("S0 start", "Slurm job S0 to start")
    rec0 = lease_of(d, s0)
    tap.ok(rec0 is not None and rec0.get("mode") == "lease" and rec0["status"] == "running"
           and rec0.get("device_id") == "0" and rec0.get("cmd") == "slurm job %s" % s0,
           "S0 (gpu 0) holds a running lease on card 0 described 'slurm job %s'" % s0, rec0)
    tap.eq(rec0 and (rec0.get("owner"), rec0.get("timeout")), ("root", 4200 + 300),
           "owned by the Slurm job's user, its timeout the job's time limit and 5 minutes")

    # The next Slurm job (of USER) gets gpu 1 = card 1, where A runs: it waits in the Prolog.
    s1 = c.sbatch(step("S1", "S1"), user=USER)
    wait_until(lambda: (lease_of(d, s1) or {}).get("status") == "queued", 30,
               "S1's lease to be queued on card 1:\n" + c.log_tail())
    rec1 = lease_of(d, s1)
    tap.ok(rec1.get("device_id") == "1" and rec1.get("owner") == USER
           and rec1.get("timeout") == 86400,
           "S1 (gpu 1) waits for a lease on card 1, owned by its user %s; without a time limit "
           "its timeout is the daemon's longest" % USER, rec1)
    tap.eq(c.job(s1), ("RUNNING", "Prolog"), "Slurm shows S1 held in its Prolog")
    # a queue job queued now waits behind S1's lease
    b = d.submit(step("B"), device_id="1")["job_id"]
    tap.eq(d.job(b)["status"], "queued", "a queue job for card 1 queues behind S1's lease")

    # S0 ends: its Epilog releases card 0.
    opened("S0")
    wait_until(lambda: lease_of(d, s0)["status"] == "done", 30,
               "S0's lease to end after S0 ends:\n" + c.log_tail())
    rec0 = lease_of(d, s0)
    tap.eq((rec0.get("end_reason"), rec0.get("exit_code")), ("released", 0),
           "S0's lease is released by the Epilog when S0 ends")
    tap.ok("S1 start" not in lines(order), "S1 has not started while A runs on card 1",
           lines(order))

    # A ends: S1's lease holds card 1 and S1 runs; B waits for S1.
    opened("A")
    d.wait_done(a)
    logged("S1 start", "S1 to start once A ended on card 1")
    tap.eq(lease_of(d, s1)["status"], "running", "S1's lease holds card 1 while S1 runs")
    e = d.submit(step("E"), device_id="1")["job_id"]
    tap.eq(d.job(e)["status"], "queued", "a queue job submitted while S1 holds card 1 queues")
    # card 0 runs queue jobs meanwhile
    for name in ("C1", "C2"):
        cj = d.submit(step(name), device_id="0")["job_id"]
        tap.eq(d.wait_done(cj)["exit_code"], 0, "queue job %s runs on card 0 meanwhile" % name)
    tap.eq((d.job(b)["status"], d.job(e)["status"]), ("queued", "queued"),
           "B and E still wait for S1 on card 1")

    # S1 ends: its lease is released and B runs.
    opened("S1")
    tap.eq((d.wait_done(b)["exit_code"], d.wait_done(e)["exit_code"]), (0, 0),
           "B, then E run once S1 ended")
    rec1 = lease_of(d, s1)
    tap.eq((rec1["status"], rec1.get("end_reason")), ("done", "released"),
           "S1's lease was released by the Epilog")
    tap.eq(lines(order), ["A start", "S0 start", "S0 end", "A end", "S1 start", "C1 start",
                          "C1 end", "C2 start", "C2 end", "S1 end", "B start", "B end", "E start",
                          "E end"],
           "each card kept strict FIFO order between queue jobs and Slurm jobs")

    # A Slurm job cancelled while its lease waits: the Prolog takes the lease off the queue.
    dj = d.submit(step("D", "D"), device_id="0")["job_id"]
    logged("D start", "queue job D to start on card 0")
    s2 = c.sbatch(step("S2"), user=USER)
    wait_until(lambda: (lease_of(d, s2) or {}).get("status") == "queued", 30,
               "S2's lease to be queued on card 0:\n" + c.log_tail())
    c.run("scancel", s2)
    wait_until(lambda: lease_of(d, s2)["status"] == "done", 30,
               "S2's lease to end after scancel:\n" + c.log_tail())
    tap.eq(lease_of(d, s2).get("end_reason"), "cancelled",
           "scancel of a Slurm job waiting in its Prolog takes its lease off card 0's queue")
    wait_until(lambda: c.job(s2)[0] == "CANCELLED", 30, "S2 to be cancelled in Slurm")
    tap.ok("S2 start" not in lines(order), "and the Slurm job never ran")
    # A waiting lease killed in the queue: the Prolog cancels its Slurm job (no drain).
    s4 = c.sbatch(step("S4"))
    wait_until(lambda: (lease_of(d, s4) or {}).get("status") == "queued", 30,
               "S4's lease to be queued on card 0:\n" + c.log_tail())
    tap.eq(d.post("/kill", {"job_id": lease_of(d, s4)["job_id"]}).status, 200,
           "S4's queued lease is killed in the queue")
    wait_until(lambda: c.job(s4)[0] == "CANCELLED", 30,
               "S4 to be cancelled in Slurm:\n" + c.log_tail())
    tap.ok("S4 start" not in lines(order) and c.settled() == "idle",
           "a Slurm job whose lease ended without holding its card is cancelled, the node "
           "stays up", (lines(order), c.node_state()))
    opened("D")
    d.wait_done(dj)

    # A Slurm job cancelled while it runs: the Epilog releases its lease.
    s3 = c.sbatch("echo 'S3 start' >> %s; exec sleep 600" % q(order))
    logged("S3 start", "S3 to start")
    tap.eq(lease_of(d, s3)["status"], "running", "S3 holds its lease while it runs")
    c.run("scancel", s3)
    wait_until(lambda: lease_of(d, s3)["status"] == "done", 30,
               "S3's lease to end after scancel:\n" + c.log_tail())
    tap.eq(lease_of(d, s3).get("end_reason"), "released",
           "scancel of a running Slurm job: the Epilog releases its lease")
    tap.eq(c.settled(), "idle", "the node never drained (no Prolog or Epilog failed)")
    tap.eq([d.dev(i).get("current") for i in (0, 1)], [None, None],
           "both cards are idle in the queue at the end")


def main():
    missing = [n for n in ("slurmctld", "slurmd", "sbatch") if not shutil.which(n)]
    if missing:
        tap.ok(False, "Slurm is not installed (%s missing): install it with "
               "`apt-get install slurmctld slurmd slurm-client` (.ci/run does)"
               % ", ".join(missing))
        tap.done()
    if os.geteuid() != 0:
        tap.ok(True, "# SKIP needs root (slurmd, mknod, a Prolog as root)")
        tap.done()
    run_tests(test_slurm_jobs_take_their_place_in_the_cards_queues)


main()

#!/usr/bin/env python3
"""The security properties docs/DESIGN.md's "Security" section promises.

- The daemon binds 127.0.0.1 unless told otherwise, and warns at start when it listens
  anywhere else (the API has no authentication).
- No control configuration (reset, deep reset, health commands and their settings) reaches
  a job's environment, and a job's own env cannot change the daemon's control commands.
- Its files are private to the service user (folders 0700, files 0600), whatever umask it
  was started with.
- Job ids are 128 random bits: 32 lowercase hex characters, unique, without structure.
- No request names a path outside the log dir: output files are always
  <log_dir>/<id>/output, the daemon writes nothing into a job's cwd, and retention does not
  follow a job folder replaced by a symbolic link.
"""

import json
import os
import shutil
import socket
import stat

from ttqlib import Daemon, q, run_tests, tap, wait_until


def daemon(**env):
    d = Daemon(env={k: str(v) for k, v in env.items()})
    d.env["HOME"] = d.tmp  # the host's login scripts are not under test
    return d


def listening(port):
    """Local addresses (hex, as /proc/net/tcp writes them) listening on TCP port `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    addr, hexport = parts[1].split(":")
                    if parts[3] == "0A" and int(hexport, 16) == port:
                        found.append(addr)
        except OSError:
            pass
    return found


def test_default_bind_is_loopback():
    d = daemon()
    del d.env["TT_DEVICE_HOST"]
    d.start()
    tap.eq(listening(d.port), ["0100007F"], "without TT_DEVICE_HOST it listens on 127.0.0.1 only")
    tap.ok("WARNING" not in d.stderr(), "and gives no warning", d.stderr())
    d.cleanup()


def test_warns_when_bound_elsewhere():
    d = daemon(TT_DEVICE_HOST="0.0.0.0")
    d.start()
    err = d.stderr()
    d.stop()  # listening on every interface: not a moment longer than needed
    warn = [line for line in err.splitlines() if "WARNING" in line]
    tap.ok(len(warn) == 1 and "0.0.0.0" in warn[0] and "no authentication" in warn[0],
           "TT_DEVICE_HOST=0.0.0.0: one warning line at start says there is no authentication",
           err)
    for host in ("localhost", "::1", "127.0.0.1 ", "0"):
        d = daemon(TT_DEVICE_HOST=host)
        d.start(wait=False)
        try:
            d.proc.wait(10)
        finally:
            d.stop()
        tap.ok(d.proc.returncode == 2 and "TT_DEVICE_HOST" in d.stderr(),
               "TT_DEVICE_HOST=%r is refused (exit 2), not bound somewhere unexpected" % host,
               (d.proc.returncode, d.stderr()))
    Daemon.cleanup_all()


CONTROL = {
    "TT_DEVICE_DEEP_RESET_CMD": "/bin/true deep",
    "TT_DEVICE_RESET_RETRIES": "0",
    "TT_DEVICE_HEALTH_CMD_TIMEOUT": "30",
    "TT_DEVICE_RESET_PREEMPTS_CURRENT": "false",
}


def test_control_configuration_never_reaches_jobs():
    d = daemon(**CONTROL).start()
    j = d.submit("env; echo DONE", env={"TT_DEVICE_RESET_CMD": "touch %s" % d.path("pwned")})
    d.wait_done(j["job_id"])
    env = [line.split("=", 1)[0] for line in d.log_text(j["job_id"]).splitlines() if "=" in line]
    leaked = sorted(k for k in env if k.startswith(("TT_DEVICE_RESET", "TT_DEVICE_DEEP_RESET",
                                                     "TT_DEVICE_HEALTH")) and k != "TT_DEVICE_RESET_CMD")
    tap.eq(leaked, [], "no reset, deep-reset or health setting is in a job's environment")
    tap.ok("TT_DEVICE_RESET_CMD" in env, "(a job's own env is its own business)")
    r = d.post("/reset", {"device_id": 0})
    tap.eq(r.status, 200, "a reset is scheduled")
    wait_until(lambda: os.path.exists(d.health_log), 20, "the health check to run")
    tap.ok(not os.path.exists(d.path("pwned")), "a job's env does not change the reset command")
    with open(d.reset_log) as f:
        tap.eq(f.read().split(), ["0"], "the configured reset command ran")
    d.cleanup()


def mode(p):
    return oct(stat.S_IMODE(os.lstat(p).st_mode))


def test_files_private():
    old = os.umask(0)  # the daemon must not rely on the umask it is started with
    try:
        d = daemon().start()
    finally:
        os.umask(old)
    j = d.submit("echo private")
    d.wait_done(j["job_id"])
    job_dir = os.path.join(d.log_dir, j["job_id"])
    want = {d.log_dir: "0o700", job_dir: "0o700",
            os.path.join(job_dir, "output"): "0o600", os.path.join(job_dir, "meta.json"): "0o600"}
    for name in os.listdir(d.log_dir):
        if name.startswith("jobs.sqlite3"):
            want[os.path.join(d.log_dir, name)] = "0o600"
    tap.ok(len(want) >= 7, "the store and its WAL files are there", sorted(want))
    got = {p: mode(p) for p in want}
    tap.eq(got, want, "started with umask 000, every folder is 0700 and every file 0600")
    d.cleanup()


def test_job_ids_unguessable():
    d = daemon().start()
    ids = [d.submit("true", device_id=str(i % 2))["job_id"] for i in range(64)]
    tap.ok(all(len(i) == 32 and all(c in "0123456789abcdef" for c in i) for i in ids),
           "ids are 32 lowercase hex characters", ids[:3])
    tap.eq(len(set(ids)), 64, "64 ids, all different")
    tap.eq(len({i[:8] for i in ids}), 64, "no shared 32-bit prefix (not a counter or a clock)")
    bits = "".join(bin(int(i, 16))[2:].zfill(128) for i in ids)
    ones = bits.count("1") / len(bits)
    tap.ok(0.45 < ones < 0.55, "the bits are balanced like random ones (%.3f ones)" % ones)
    dist = [bin(int(a, 16) ^ int(b, 16)).count("1") for a, b in zip(ids, ids[1:])]
    tap.ok(min(dist) > 30 and max(dist) < 98, "consecutive ids differ in about half their 128 "
           "bits (%d..%d)" % (min(dist), max(dist)))
    for i in ids:
        d.wait_done(i)
    d.cleanup()


def test_no_path_outside_the_log_dir():
    d = daemon().start()
    log_dir = os.path.realpath(d.log_dir)
    cwd = d.path("work")
    os.mkdir(cwd)
    j = d.submit("true", cwd=cwd, client_id="../../../../tmp/ttq-client-x",
                 env={"OUT": "../../x"})
    rec = d.wait_done(j["job_id"])
    want = os.path.join(log_dir, j["job_id"], "output")
    tap.eq(os.path.realpath(j["output_file"]), want, "POST /queue's output_file is under the log dir")
    tap.eq(os.path.realpath(rec["output_file"]), want, "and so is GET /job's")
    with open(os.path.join(log_dir, j["job_id"], "meta.json")) as f:
        tap.eq(os.path.realpath(json.load(f)["output_file"]), want, "and meta.json's")
    tap.eq(os.listdir(cwd), [], "the daemon wrote nothing into the job's cwd")
    tap.ok(not os.path.exists("/tmp/ttq-client-x"), "a client_id is never a path")
    extra = sorted(n for n in os.listdir(d.log_dir)
                   if n != j["job_id"]
                   and not n.startswith("jobs.sqlite3"))
    tap.eq(extra, [], "the log dir holds only the job's folder and the store")
    for path in ("/logs/..%2F..%2F..%2Fetc%2Fpasswd", "/logs/" + "../" * 10 + "etc/passwd",
                 "/job/%s/../../jobs.sqlite3" % j["job_id"], "/result/" + "%2e" * 32):
        r = d.get(path)
        tap.ok(r.status == 404 and "root:" not in r.body.decode("latin-1"),
               "GET %s: 404, nothing read" % path[:40], r)
    d.cleanup()


def stopped_with_a_done_job_and_a_victim():
    """A stopped daemon whose next start's retention deletes its one done job, that job's
    folder, and a folder outside the log dir holding a file nothing may remove."""
    d = daemon(TT_DEVICE_MAX_COMPLETED_JOBS=0).start()
    j = d.submit("echo old")
    d.wait_done(j["job_id"])
    d.stop()
    victim = d.path("victim")
    os.mkdir(victim)
    with open(os.path.join(victim, "precious"), "w") as f:
        f.write("keep me\n")
    return d, j, os.path.join(d.log_dir, j["job_id"]), victim


def test_retention_does_not_follow_symlinks():
    d, j, job_dir, victim = stopped_with_a_done_job_and_a_victim()
    shutil.rmtree(job_dir)
    os.symlink(victim, job_dir)  # the job's folder replaced by a link to somewhere else
    d.start()  # retention runs at start-up: TT_DEVICE_MAX_COMPLETED_JOBS=0 deletes the job
    wait_until(lambda: d.get("/job/" + j["job_id"]).status == 404, 10, "retention")
    tap.ok(os.path.exists(os.path.join(victim, "precious")),
           "retention did not delete files through a symlinked job folder")
    tap.ok(not os.path.lexists(job_dir), "the link itself is removed")
    d.cleanup()


def test_retention_keeps_what_a_job_put_in_its_folder():
    """A job can write into its own folder (it knows TT_DEVICE_LOG_DIR's layout): retention
    keeps the folder whole and its job with a warning, so the kept job's output still reads,
    follows no link in it, and once the folder is emptied the next pass removes folder and
    job."""
    d, j, job_dir, victim = stopped_with_a_done_job_and_a_victim()
    os.makedirs(os.path.join(job_dir, "sub", "d"))
    os.symlink(victim, os.path.join(job_dir, "sub", "link"))
    d.start()  # retention runs at start-up
    warning = d.status()["worker"]["maintenance_warning"]
    tap.ok(warning and j["job_id"] in warning, "retention keeps the job and warns", warning)
    tap.eq(sorted(os.listdir(job_dir)), ["meta.json", "output", "sub"], "nothing went")
    rc, out, err = d.cli("logs", j["job_id"])
    tap.ok(rc == 0 and out, "the kept job's output still reads", (rc, out, err))
    tap.eq(os.listdir(victim), ["precious"], "nothing was removed through the link in it")
    tap.eq(d.wait_done(d.submit("true")["job_id"])["exit_code"], 0, "and service goes on")
    d.stop()
    shutil.rmtree(os.path.join(job_dir, "sub"))
    d.start()
    wait_until(lambda: d.get("/job/" + j["job_id"]).status == 404, 10, "retention")
    tap.ok(not os.path.lexists(job_dir), "the next pass removes the folder and the job")
    d.cleanup()


def test_meta_json_not_written_through_a_linked_job_folder():
    """A running job's folder replaced by a link to a folder outside the log dir: the daemon
    writes nothing there when the job finishes (meta.json is refused, and logged)."""
    d = daemon().start()
    g = d.path("gate")
    os.mkfifo(g)
    j = d.submit("cat %s" % q(g))["job_id"]
    job_dir = os.path.join(d.log_dir, j)
    wait_until(lambda: d.job(j)["status"] == "running", 10, "the job running")
    outside = d.path("outside")
    os.rename(job_dir, d.path("moved"))
    os.mkdir(outside)
    os.symlink(outside, job_dir)
    with open(g, "w") as f:
        f.write("go\n")
    d.wait_done(j)
    wait_until(lambda: "%s: cannot write meta.json" % j in d.stderr(), 10, "the log line")
    tap.eq(os.listdir(outside), [], "nothing was written through the link")
    d.cleanup()


run_tests(test_default_bind_is_loopback, test_warns_when_bound_elsewhere,
          test_control_configuration_never_reaches_jobs, test_files_private,
          test_job_ids_unguessable, test_no_path_outside_the_log_dir,
          test_retention_does_not_follow_symlinks,
          test_retention_keeps_what_a_job_put_in_its_folder,
          test_meta_json_not_written_through_a_linked_job_folder)

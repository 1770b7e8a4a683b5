#!/usr/bin/env python3
"""The daemon's life on a host: one daemon per log dir, stragglers that leave their process
group, the job environment, shutdown while clients wait, and clients that stop reading.

Each test starts its own daemon. Waits are conditions with deadlines.
"""

import fcntl
import http.client
import json
import os
import re
import resource
import signal
import socket
import subprocess
import time

from ttqlib import (BINARY, Daemon, free_port, gate, guardian_of, pid_alive, post_many, q,
                    run_tests, tap, wait_until)


def read_pid(path):
    wait_until(lambda: os.path.exists(path) and open(path).read().strip(), 10, path)
    return int(open(path).read().split()[0])


def gone(pid, timeout=2.0):
    try:
        wait_until(lambda: not pid_alive(pid), timeout, "pid %d to die" % pid)
        return True
    except AssertionError:
        return False


def test_second_daemon_on_same_log_dir_refused():
    d = Daemon().start()
    ready = d.path("ready")
    j = d.submit("touch %s; sleep 1; echo end" % q(ready))
    wait_until(lambda: os.path.exists(ready), 10, "job running")
    queued = d.submit("echo queued-once >> %s" % q(d.path("count")))
    env = dict(d.env, TT_DEVICE_PORT=str(free_port()))  # a free port: only the log dir clashes
    p = subprocess.run([BINARY, "serve"], env=env, capture_output=True, timeout=10)
    tap.eq(p.returncode, 1, "a second serve on the same log dir exits 1")
    tap.ok(b"another tt-device-queue serve" in p.stderr, "saying another daemon uses it",
           p.stderr)
    env["TT_DEVICE_PORT"] = str(d.port)
    p = subprocess.run([BINARY, "serve"], env=env, capture_output=True, timeout=10)
    tap.ok(p.returncode == 1 and b"in use" in p.stderr, "same port: exits before recovery",
           p.stderr)
    job = d.wait_done(j["job_id"])
    tap.eq(job["exit_code"], 0, "the first daemon's running job was not touched")
    tap.ok("interrupted" not in d.log_text(j["job_id"]), "no false 'interrupted' line in its log")
    d.wait_done(queued["job_id"])
    tap.eq(open(d.path("count")).read(), "queued-once\n", "the queued job ran exactly once")



def test_start_waits_briefly_for_a_log_dir_lock_let_go():
    """Right after a crash, a child of the killed daemon caught between its clone and its exec
    still holds the log dir's lock for a moment; a restart then must wait for it, not fail."""
    d = Daemon()
    os.makedirs(d.log_dir, mode=0o700)
    fd = os.open(d.log_dir, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        d.start(wait=False)
        wait_until(lambda: "is locked; waiting" in d.stderr() or d.proc.poll() is not None, 10,
                   "serve to find the lock held")
        tap.ok(d.proc.poll() is None, "a held log dir lock is waited for", d.stderr())
    finally:
        os.close(fd)  # let go, as the dying child does
    wait_until(d._ready, 10, "the daemon to serve once the lock is free")
    j = d.wait_done(d.submit("echo after the wait")["job_id"])
    tap.eq(j["exit_code"], 0, "and it runs jobs")
    d.cleanup()

def test_setsid_straggler_killed_when_job_ends():
    d = Daemon().start()
    pidf = d.path("s.pid")
    j = d.submit("setsid bash -c 'echo $$ > %s; exec sleep 222' & sleep 0.3" % q(pidf))
    d.wait_done(j["job_id"])
    pid = read_pid(pidf)
    tap.ok(gone(pid), "a child that left the job's session is killed when the job ends")


def ended_shell_job(d, tag):
    """A job whose shell exits 0 at once while a helper in a session of its own keeps its
    output pipe open: after the shell is reaped the daemon waits up to 0.5 s for that pipe
    (the straggler bound). Returns (job id, pid file)."""
    pidf, left = d.path(tag + ".pid"), d.path(tag + ".left")
    # The shell exits only once the helper has left its group, which is killed at its end.
    j = d.submit("setsid sh -c 'touch %s; exec sleep 222' & while [ ! -e %s ]; do sleep 0.01;"
                 " done; echo $$ > %s.tmp; mv %s.tmp %s; exit 0"
                 % (q(left), q(left), q(pidf), q(pidf), q(pidf)), device_id=0)["job_id"]
    wait_until(lambda: os.path.exists(pidf), 10, "the job's shell to start")
    # Gone from /proc: the daemon has reaped it and waits for the helper's pipe.
    wait_until(lambda: not os.path.exists("/proc/%d" % read_pid(pidf)), 10,
               "the shell to be reaped")
    return j


def test_stop_after_the_shell_ended_keeps_its_outcome():
    """A kill, a reset or a stop of the service that arrives after the job's shell exited 0,
    while the daemon waits for a helper that holds its output, does not rewrite how it ended:
    it was recorded as stopped, interrupted (-1) or preempted (the exit code is the
    shell's status)."""
    d = Daemon().start()
    j = ended_shell_job(d, "kill")
    r = d.post("/kill", {"job_id": j})
    tap.ok(r.status == 200 and d.job(j)["status"] == "running",
           "the kill reached the job in its closing wait", r)
    job = d.wait_done(j)
    tap.ok(job["exit_code"] == 0 and job["error"] is None,
           "a kill after the shell ended: exit 0, no error", job)
    j = ended_shell_job(d, "reset")
    r = d.post("/reset", {"device_id": 0})
    tap.ok(r.get("action") == "scheduled" and d.job(j)["status"] == "running",
           "the reset came in the closing wait", r)
    job = d.wait_done(j)
    tap.ok(job["exit_code"] == 0 and job["error"] is None,
           "a reset after the shell ended: exit 0, not preempted", job)
    wait_until(lambda: d.dev(0)["reset_epoch"] == 1, 15, "the reset to run")
    j = ended_shell_job(d, "stop")
    tap.eq(d.job(j)["status"], "running", "the service stops in the closing wait")
    tap.eq(d.stop(), 0, "serve stops")
    d.start()
    job = d.job(j)
    tap.ok(job["exit_code"] == 0 and job["error"] is None and
           "interrupted" not in d.log_text(j).lower(),
           "a stop of the service after the shell ended: exit 0, not interrupted", job)
    # The deadline passes in the closing wait (the shell exits 0 at 1.6 s; the wait lasts
    # until 2.1 s at least; the deadline is at 2 s).
    j = d.submit("setsid sleep 222 & sleep 1.6; exit 0", device_id=0, timeout=2)["job_id"]
    job = d.wait_done(j)
    tap.ok(job["exit_code"] == 0 and not job["timed_out"],
           "a deadline that passes after the shell ended: exit 0, not timed out", job)
    # Iterations still to come are what a late stop does stop.
    j = d.submit("setsid sleep 222 & sleep 1.6; exit 0", device_id=0, timeout=2,
                 repeat=3)["job_id"]
    job = d.wait_done(j)
    tap.ok(job["exit_code"] == -9 and job["timed_out"] and job["repeat_completed"] == 1,
           "with iterations left the deadline still stops the job", job)
    d.cleanup()


def test_helpers_of_running_jobs_are_not_strays():
    """A running job's background helpers that came to the daemon when their parent exited
    (`(cmd &)`, or a setsid'd one) live as long as their job: neither another of its orphans
    dying nor a job ending on the other card kills them. Once their job ends they go."""
    d = Daemon().start()
    ready, pidf = d.path("ready"), d.path("helper.pid")
    a = d.submit("(sleep 0.2 &); ((sleep 1.5; echo in-session-helper-done) &); "
                 "(setsid sh -c 'echo $$ > %s; sleep 1.5; echo own-session-helper-done; "
                 "exec sleep 300' & ); touch %s; sleep 3" % (q(pidf), q(ready)),
                 device_id="0")
    wait_until(lambda: os.path.exists(ready), 10, "job on card 0 running")
    b = d.submit("sleep 0.3", device_id="1")
    tap.eq(d.wait_done(b["job_id"])["exit_code"], 0, "a job on card 1 ends meanwhile")
    tap.eq(d.wait_done(a["job_id"])["exit_code"], 0, "the job with helpers ends")
    log = d.log_text(a["job_id"])
    tap.ok("in-session-helper-done" in log,
           "its orphaned helper in its session finished its work", log)
    tap.ok("own-session-helper-done" in log,
           "so did the helper that left its session (it carries the job's id)", log)
    tap.ok(gone(read_pid(pidf)), "which is killed once its job has ended")


HOLDER = """
import fcntl, sys, time
f = open(sys.argv[1], "w")
fcntl.flock(f, fcntl.LOCK_EX)  # stands in for the card: held until the process is gone
b = bytearray(1536 << 20)      # 1.5 GiB to tear down after SIGKILL: tens of ms
for i in range(0, len(b), 4096):
    b[i] = 1
open(sys.argv[2], "w").close()
time.sleep(600)
"""


def test_next_job_waits_until_the_killed_group_is_gone():
    """A killed process holds its files (the card) until its memory is torn down: the next
    job on the card must not start before then (never two jobs on one card)."""
    d = Daemon().start()
    prog, lock, ready = d.path("holder.py"), d.path("card.lock"), d.path("ready")
    open(prog, "w").write(HOLDER)
    a = d.submit("python3 %s %s %s >/dev/null 2>&1 & while [ ! -e %s ]; do sleep 0.02; done"
                 % (q(prog), q(lock), q(ready), q(ready)), device_id="0")
    b = d.submit("flock -n %s true && echo card-free || echo card-still-held" % q(lock),
                 device_id="0")
    tap.eq(d.wait_done(a["job_id"], timeout=60)["exit_code"], 0, "the job with a big helper ends")
    d.wait_done(b["job_id"])
    tap.eq(d.log_text(b["job_id"]).strip(), "card-free",
           "the next job starts only once the previous job's killed helper is gone")


def test_setsid_straggler_killed_on_sigterm():
    d = Daemon().start()
    pidf = d.path("s.pid")
    d.submit("setsid bash -c 'echo $$ > %s; exec sleep 333' & sleep 30" % q(pidf))
    pid = read_pid(pidf)
    d.stop(signal.SIGTERM)
    tap.ok(gone(pid), "a setsid'd child of a running job is gone after SIGTERM")


def test_setsid_straggler_killed_on_sigkill():
    d = Daemon().start()
    pidf, shf = d.path("s.pid"), d.path("sh.pid")
    d.submit("echo $$ > %s; setsid bash -c 'echo $$ > %s; exec sleep 444' & sleep 30"
             % (q(shf), q(pidf)))
    pid, sh = read_pid(pidf), read_pid(shf)
    d.kill9()
    tap.ok(gone(sh), "the job's shell is gone within 2 s of the daemon's SIGKILL")
    tap.ok(gone(pid), "and so is its setsid'd child")


def test_job_environment_and_umask():
    old = os.umask(0o022)
    try:
        d = Daemon().start()
    finally:
        os.umask(old)
    j = d.submit("echo $TT_DEVICE_JOB_ID; umask; touch f; stat -c %a f", cwd=d.tmp)
    d.wait_done(j["job_id"])
    out = d.log_text(j["job_id"]).split()
    tap.eq(out[0], j["job_id"], "TT_DEVICE_JOB_ID names the job")
    tap.eq(out[1:], ["0022", "644"], "jobs get the umask serve was started with, not 077")
    tap.eq(oct(os.stat(os.path.join(d.log_dir, j["job_id"])).st_mode & 0o777), "0o700",
           "the daemon's own folders stay private")


def test_jobs_get_the_open_file_limit_serve_was_started_with():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        d = Daemon().start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    own = [ln.split()[3] for ln in open("/proc/%d/limits" % d.proc.pid)
           if ln.startswith("Max open files")]
    tap.ok(own and own[0] != "1024", "the daemon raised its own limit for its connections", own)
    j = d.submit("ulimit -Sn")
    d.wait_done(j["job_id"])
    tap.eq(d.log_text(j["job_id"]).strip(), "1024",
           "a job gets the soft limit serve was started with (select() needs < 1024 fds)")


def test_relative_log_dir_gives_absolute_paths():
    d = Daemon(env={"TT_DEVICE_LOG_DIR": "rel/logs"}).start()
    j = d.submit("echo hi")
    tap.ok(os.path.isabs(j["output_file"]), "output_file is absolute", j["output_file"])
    d.wait_done(j["job_id"])
    tap.eq(open(j["output_file"]).read(), "hi\n", "and names the real file")


def test_kill_device_during_reset_says_so():
    d = Daemon(env={"TT_DEVICE_RESET_CMD": "sleep 2; true"}).start()
    d.post("/reset", {"device_id": 0})
    wait_until(lambda: d.dev(0)["state"] == "resetting", 10, "card 0 resetting")
    r = d.post("/kill", {"device_id": 0})
    tap.ok(r.status == 409 and "reset" in r.get("error", ""), "kill --device during a reset "
           "says a reset is running, not 'nothing running'", r)


def test_run_gets_final_status_when_daemon_stops():
    d = Daemon().start()
    ready = d.path("ready")
    p = subprocess.Popen([BINARY, "run", "--", "touch %s; sleep 30" % q(ready)],
                         env=dict(os.environ, TT_DEVICE_URL="http://127.0.0.1:%d" % d.port),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_until(lambda: os.path.exists(ready), 10, "job running")
    d.stop(signal.SIGTERM)
    out, err = p.communicate(timeout=15)
    tap.eq(p.returncode, 129, "run exits with the interrupted job's status (-1 -> 129), "
           "not 'cannot connect'")
    tap.ok(b"interrupted" in err, "its summary says the job was interrupted", err)
    tap.ok("shutting down on SIGTERM" in d.stderr(), "the daemon logs which signal stopped it")


def test_stray_signals_are_ignored():
    """SIGUSR1 (a log rotation's postrotate), SIGUSR2 and SIGALRM must not end the daemon."""
    d = Daemon().start()
    path, loop = gate(d, "gate")
    j = d.submit(loop)
    wait_until(lambda: d.job(j["job_id"])["status"] == "running", 10, "job running")
    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM):
        os.kill(d.proc.pid, sig)
    wait_until(lambda: d.stderr().count("ignored") >= 3, 10, "the three signals logged")
    tap.ok(d.alive() and d.job(j["job_id"])["status"] == "running",
           "the daemon and its running job live on after SIGUSR1, SIGUSR2 and SIGALRM")
    open(path, "w").close()
    tap.eq(d.wait_done(j["job_id"])["exit_code"], 0, "and the job ends as it would have")
    d.cleanup()


def test_long_poll_on_a_queued_job_while_stopping_is_answered():
    """A long-poll on a queued job that arrives while the service stops (on a connection it
    already had) is answered "queued" at once: it was held until the connection was cut."""
    d = Daemon(ids="0").start()
    ready = d.path("ready")
    d.submit("touch %s; exec sleep 30" % q(ready))
    queued = d.submit("true")["job_id"]
    wait_until(lambda: os.path.exists(ready), 10, "the first job to run")
    conns = [http.client.HTTPConnection("127.0.0.1", d.port, timeout=10) for _ in range(2)]
    for c in conns:  # kept alive: the listening socket closes when the stop begins
        c.request("GET", "/status")
        c.getresponse().read()
    d.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "shutting down" in d.stderr(), 10, "the stop to begin")
    for c, path in zip(conns, ("/result/%s?wait=30", "/logs/%s?wait=30")):
        t0 = time.monotonic()
        c.request("GET", path % queued)
        r = c.getresponse()
        body = r.read()
        took = time.monotonic() - t0
        tap.ok(r.status == 200 and took < 5 and
               (path.startswith("/logs") or json.loads(body)["status"] == "queued"),
               "%s of a queued job while stopping: answered at once (%.2f s)"
               % (path.split("/")[1], took), (r.status, body[:200]))
        c.close()
    tap.eq(d.proc.wait(15), 0, "serve stops")
    d.start()
    tap.eq(d.wait_done(queued)["exit_code"], 0, "the queued job is kept and runs after the restart")
    d.cleanup()


def test_serve_started_right_after_a_kill9_takes_the_port():
    """kill -9 of a daemon, then serve at once on its port, as by hand or a script: the killed
    daemon held the port until the kernel had torn it down, and the new serve exited 1 with
    'Address already in use' most times; it now tries the port again for a moment."""
    d = Daemon(ids="0").start()
    ready = d.path("ready")
    j = d.submit("touch %s; sleep 30" % q(ready))["job_id"]
    wait_until(lambda: os.path.exists(ready), 10, "job running")
    old = d.proc
    old.send_signal(signal.SIGKILL)  # not waited for: the next serve starts at once
    d.err.close()
    d.start(port=d.port)
    old.wait()
    tap.ok(d.alive(), "the new serve listens on the port", d.stderr())
    tap.eq(d.wait_done(j)["exit_code"], -1, "and finds the killed daemon's job interrupted")
    d.cleanup()


def test_restart_after_a_crash_waits_for_the_killed_jobs():
    """kill -9 of the daemon: its guardian SIGKILLs the running job, whose process then tears
    down gigabytes of memory while it still holds its card (a lock file stands for the card:
    a process lets its files go only after its memory). A daemon started at once ran the next
    job meanwhile, two jobs on one card; it now waits for the guardian."""
    d = Daemon(ids="0").start()
    card, ready, hog = d.path("card.lock"), d.path("ready"), d.path("hog.py")
    with open(hog, "w") as f:
        f.write("import time\nb = b'x' * (3 << 30)\nopen(%r, 'w').close()\ntime.sleep(300)\n"
                % ready)
    d.submit("exec 9>%s; flock 9; exec python3 %s" % (q(card), q(hog)))
    second = d.submit("exec 9>%s; if flock -n 9; then echo alone; else echo OVERLAP; fi"
                      % q(card))["job_id"]
    wait_until(lambda: os.path.exists(ready), 60, "the first job to hold 3 GiB")
    d.kill9()
    d.start()
    d.wait_done(second, timeout=60)
    tap.eq(d.log_text(second).strip(), "alone",
           "the next job started only once the killed one had let its card go")
    d.cleanup()




def test_a_dead_guardian_is_a_warning():
    """The guardian killed (by hand, by the OOM killer) is a double fault: it is not replaced,
    and a crash of the daemon now would leave its jobs running. The daemon says so once, in
    its log and in status, and serves on."""
    d = Daemon(ids="0").start()
    tap.eq(d.status()["worker"]["guardian_warning"], None, "no warning while the guardian runs")
    os.kill(wait_until(lambda: guardian_of(d.proc.pid), 10, "the guardian"), signal.SIGKILL)
    warning = wait_until(lambda: d.status()["worker"]["guardian_warning"], 10, "the warning")
    tap.ok("guardian process died" in warning, "status says the guardian died", warning)
    tap.eq(d.wait_done(d.submit("true")["job_id"])["exit_code"], 0, "jobs still run")
    tap.eq((d.stderr().count("guardian process died"), guardian_of(d.proc.pid)), (1, None),
           "logged once; no guardian was started in its place")
    d.cleanup()


def test_restart_kills_what_a_daemon_and_its_guardian_left():
    """The daemon and its guardian die together (kill -9 of both): nothing killed the job's
    background processes, and a new serve ran the next job beside them. It now kills what
    carries the log dir's TT_DEVICE_QUEUE_INSTANCE entry before it starts a job."""
    d = Daemon(ids="0").start()
    pidf = d.path("bg.pid")
    d.submit("sleep 300 & echo $! > %s.tmp; mv %s.tmp %s; wait" % (q(pidf), q(pidf), q(pidf)))
    bg = read_pid(pidf)
    guardian = wait_until(lambda: guardian_of(d.proc.pid), 10, "the guardian")
    os.kill(guardian, signal.SIGKILL)
    d.kill9()
    tap.ok(not gone(bg, 1.0), "with no guardian the job's background process survived")
    d.start()
    tap.ok(gone(bg, 5.0), "the next serve kills it before it starts anything")
    tap.ok("killed 1 processes the previous instance left running" in d.stderr(),
           "and says so", d.stderr()[-500:])
    d.cleanup()


def test_start_waits_for_a_dead_daemons_guardian():
    """A daemon's guardian holds the log dir's lock, shared, until the processes of the dead
    daemon are gone: a serve started meanwhile waits for it (a shared lock is not another
    daemon), saying so, and a SIGTERM ends the wait with exit 0."""
    d = Daemon(ids="0")
    os.makedirs(d.log_dir, mode=0o700)
    fd = os.open(d.log_dir, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_SH)  # as a dead daemon's guardian holds it
    try:
        d.start(wait=False)
        wait_until(lambda: "until that daemon's processes are gone" in d.stderr()
                   or d.proc.poll() is not None, 10, "the serve to wait for the guardian")
        time.sleep(2.5)  # past the wait for an exclusive holder
        tap.ok(d.proc.poll() is None, "it waits for a shared lock", d.stderr())
        d.proc.send_signal(signal.SIGTERM)
        tap.eq(d.proc.wait(10), 0, "a SIGTERM ends the wait: exit 0")
        d.start(wait=False)
        wait_until(lambda: d.stderr().count("until that daemon's processes are gone") >= 2, 10,
                   "the next serve to wait")
    finally:
        os.close(fd)  # the guardian is done
    wait_until(d._ready, 10, "the daemon to serve once the lock is free")
    tap.eq(d.wait_done(d.submit("echo after the wait")["job_id"])["exit_code"], 0, "and it runs jobs")
    d.cleanup()


def test_serve_with_stdio_closed_gives_the_guardian_nothing_else():
    """serve started with fds 0-2 closed (some daemonisers): the log dir's lock landed on fd 2,
    which the guardian keeps as its stderr, and its lock's state no longer told a crashed
    daemon's guardian from a live daemon."""
    d = Daemon(ids="0")
    port = free_port()

    def close_stdio():
        for fd in (0, 1, 2):
            os.close(fd)
    p = subprocess.Popen([BINARY, "serve"], env=dict(d.env, TT_DEVICE_PORT=str(port)),
                         preexec_fn=close_stdio)

    def up():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return guardian_of(p.pid)
        except OSError:
            return None
    guardian = wait_until(up, 10, "serve to listen")
    fds = "/proc/%d/fd" % guardian
    links = sorted(os.readlink(os.path.join(fds, n)) for n in os.listdir(fds))
    tap.ok(all(x.startswith("pipe:") or x == "/dev/null" or x == os.path.realpath(d.log_dir)
               for x in links), "the guardian holds only its pipe, the log dir (its lock) and "
           "/dev/null", links)
    p.kill()
    p.wait()
    d.cleanup()


def test_stalled_readers_do_not_hold_workers():
    d = Daemon().start()
    j = d.submit("head -c 200000 /dev/zero | tr '\\0' x")
    d.wait_done(j["job_id"])
    req = ("GET /logs/%s?limit=65536 HTTP/1.1\r\nHost: x\r\n\r\n" % j["job_id"]).encode()
    socks = []
    for _ in range(16):  # sixteen connections, each never reading
        s = socket.create_connection(("127.0.0.1", d.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(req * 300)
        socks.append(s)
    t0 = time.monotonic()
    r = d.get("/status", timeout=30)
    took = time.monotonic() - t0
    tap.ok(r.status == 200 and took < 5, "a good client is served while 16 clients have "
           "stopped reading (%.2fs; bound 5 s, expected about 1 s)" % took)
    for s in socks:
        s.close()



def test_stderr_pipe_nobody_reads_never_stalls():
    """A parent that starts serve with stderr on a pipe and reads nothing (as a stress test
    does) filled the pipe after a few hundred log lines; the daemon then blocked in write(2)
    and served nothing more, not even SIGTERM."""
    d = Daemon(env={"TT_DEVICE_MAX_QUEUED_JOBS": "6000"})
    d.port = free_port()
    rfd, wfd = os.pipe()
    flags = os.O_NONBLOCK | os.O_RDONLY
    d.err = open(os.devnull, "ab")  # what d.stop() closes
    d.proc = subprocess.Popen([BINARY, "serve"], env=dict(d.env, TT_DEVICE_PORT=str(d.port)),
                              cwd=d.tmp, stdin=subprocess.DEVNULL, stdout=wfd, stderr=wfd,
                              start_new_session=True)
    os.close(wfd)
    try:
        wait_until(d._ready, 10, "serve to answer")
        gates = [d.path("gate0"), d.path("gate1")]
        for k, g in enumerate(gates):  # both cards busy: the 5000 stay queued
            d.submit("while [ ! -e %s ]; do sleep 0.05; done" % q(g), device_id=str(k))
        ids = post_many(d.port, [{"cmd": "true", "device_id": str(k % 2)} for k in range(5000)])
        tap.eq(len(set(ids)), 5000, "5000 submissions answered while nobody reads stderr")
        dropped = d.metric("ttq_log_lines_dropped_total")
        tap.ok(dropped and dropped > 0, "/metrics counts the log lines dropped (%s)" % dropped)
        fcntl.fcntl(rfd, fcntl.F_SETFL, flags)  # the parent reads at last: all there is now
        while True:
            try:
                if not os.read(rfd, 65536):
                    break
            except BlockingIOError:
                break
        d.submit("true", device_id="0")  # its "queued" line gets out, the count first
        text = b""
        deadline = time.monotonic() + 10
        while b"were dropped" not in text and time.monotonic() < deadline:
            try:
                text += os.read(rfd, 65536)
            except BlockingIOError:
                time.sleep(0.02)
        m = re.search(rb"(\d+) log lines were dropped", text)
        tap.ok(m and int(m.group(1)) == int(dropped), "once stderr takes lines again the "
               "count of dropped lines is logged", text[-500:])
        t0 = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        try:
            rc = d.proc.wait(20)
        except subprocess.TimeoutExpired:
            rc = None
        tap.eq(rc, 0, "SIGTERM stops it (in %.1f s)" % (time.monotonic() - t0))
    finally:
        os.close(rfd)
        d.cleanup()


run_tests(test_second_daemon_on_same_log_dir_refused,
          test_start_waits_briefly_for_a_log_dir_lock_let_go, test_setsid_straggler_killed_when_job_ends,
          test_helpers_of_running_jobs_are_not_strays,
          test_next_job_waits_until_the_killed_group_is_gone,
          test_jobs_get_the_open_file_limit_serve_was_started_with,
          test_setsid_straggler_killed_on_sigterm, test_setsid_straggler_killed_on_sigkill,
          test_job_environment_and_umask, test_relative_log_dir_gives_absolute_paths,
          test_kill_device_during_reset_says_so, test_run_gets_final_status_when_daemon_stops,
          test_stray_signals_are_ignored,
          test_stalled_readers_do_not_hold_workers,
          test_stop_after_the_shell_ended_keeps_its_outcome,
          test_long_poll_on_a_queued_job_while_stopping_is_answered,
          test_serve_started_right_after_a_kill9_takes_the_port,
          test_restart_after_a_crash_waits_for_the_killed_jobs, test_a_dead_guardian_is_a_warning,
          test_restart_kills_what_a_daemon_and_its_guardian_left,
          test_serve_with_stdio_closed_gives_the_guardian_nothing_else,
          test_stderr_pipe_nobody_reads_never_stalls,
          test_start_waits_for_a_dead_daemons_guardian)

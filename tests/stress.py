#!/usr/bin/env python3
"""Stress: many concurrent clients submitting jobs to both cards behind a blocker.

    python3 tests/stress.py [--jobs 900] [--clients 64] [--blocker-sec 3]
    (make stress; STRESS_JOBS / STRESS_CLIENTS override the counts)

A blocker job holds card 0 first, so that card's queue fills while card 1 runs. Each client
keeps one keep-alive connection, submits its share of the jobs (alternating cards), then
waits for each result with /result?wait= and checks exit code 0 and the job's output. Every
job must complete with exit 0 and a unique id; the run prints elapsed time, throughput, the
daemon's CPU time (utime+stime from /proc/PID/stat) and peak RSS (VmHWM), and exits 1 on any
failure. The daemon's HOME is its temp dir so jobs' login shells do not read the host's
~/.profile (whose pyenv rehash serializes concurrent shells on a lock): the figures measure
the queue, not the host's login scripts.
"""

import argparse
import http.client
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ttqlib import Daemon  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def daemon_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def daemon_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


class Client(threading.Thread):
    def __init__(self, port, numbers, errors, lock, timeout):
        super().__init__(daemon=True)
        self.port, self.numbers, self.errors, self.lock = port, numbers, errors, lock
        self.timeout = timeout
        self.ids = {}
        self.conn = None

    def call(self, method, path, body=None):
        for attempt in range(2):  # the server may close an idle keep-alive connection
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=90)
                self.conn.request(method, path, body=None if body is None else json.dumps(body),
                                  headers={"Content-Type": "application/json"})
                r = self.conn.getresponse()
                return r.status, json.loads(r.read())
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise

    def fail(self, msg):
        with self.lock:
            self.errors.append(msg)

    def run(self):
        try:
            for n in self.numbers:
                st, r = self.call("POST", "/queue", {"cmd": "echo stress-%d" % n,
                                                     "device_id": str(n % 2),
                                                     "client_id": "stress-%d" % (n % 1000)})
                if st != 200:
                    self.fail("job %d: POST /queue %d %r" % (n, st, r))
                    continue
                self.ids[n] = r["job_id"]
            deadline = time.monotonic() + self.timeout
            for n, jid in self.ids.items():
                while True:
                    st, r = self.call("GET", "/result/%s?wait=30" % jid)
                    if st == 200 and r["status"] == "done":
                        break
                    if st != 200 or time.monotonic() > deadline:
                        self.fail("job %d (%s): not done: %d %r" % (n, jid, st, r))
                        break
                if r.get("exit_code") != 0:
                    self.fail("job %d (%s): exit_code %r" % (n, jid, r.get("exit_code")))
                    continue
                st, lg = self.call("GET", "/logs/%s" % jid)
                if st != 200 or lg["content"] != "stress-%d\n" % n:
                    self.fail("job %d (%s): output %r" % (n, jid, lg.get("content")))
        except Exception as e:  # noqa: BLE001 - reported as a failure of this client
            self.fail("client %r: %r" % (self.numbers[:1], e))
        finally:
            if self.conn:
                self.conn.close()


def run(jobs=900, clients=64, blocker_sec=3.0, timeout=600.0, env=None):
    """Run the stress against a fresh daemon; returns (figures dict, list of errors)."""
    d = Daemon(env=env)
    d.env["HOME"] = d.tmp
    d.start()
    errors, lock = [], threading.Lock()
    try:
        pid = d.proc.pid
        cpu0 = daemon_cpu(pid)
        t0 = time.monotonic()
        blocker = d.submit("sleep %s" % blocker_sec, device_id="0")["job_id"]
        workers = [Client(d.port, list(range(i, jobs, clients)), errors, lock, timeout)
                   for i in range(clients)]
        for w in workers:
            w.start()
        peak_queued = 0
        while any(w.is_alive() for w in workers):
            peak_queued = max(peak_queued, d.status()["queued_total"])
            time.sleep(0.2)
        b = d.wait_done(blocker, timeout=60)
        elapsed = time.monotonic() - t0
        if b["exit_code"] != 0:
            errors.append("blocker: exit_code %r" % b["exit_code"])
        ids = [jid for w in workers for jid in w.ids.values()] + [blocker]
        if len(ids) != jobs + 1 or len(set(ids)) != len(ids):
            errors.append("%d ids for %d jobs, %d unique" % (len(ids), jobs + 1, len(set(ids))))
        st = d.status()
        if st["queued_total"] != 0 or any(c["current"] for c in st["devices"]):
            errors.append("work left after the run: %r" % st)
        figures = {
            "jobs": jobs, "clients": clients, "elapsed": elapsed,
            "rate": jobs / elapsed if elapsed > 0 else 0.0,
            "cpu": daemon_cpu(pid) - cpu0, "rss_kib": daemon_hwm_kib(pid),
            "peak_queued": peak_queued, "alive": d.alive(),
        }
        if not d.alive():
            errors.append("the daemon died:\n" + d.stderr()[-2000:])
        return figures, errors
    finally:
        d.cleanup()


def describe(f):
    return ("%d jobs from %d clients on 2 cards behind a blocker: all done in %.1f s "
            "(%.1f jobs/s); daemon CPU %.2f s; daemon peak RSS %.1f MiB; peak queued %d"
            % (f["jobs"], f["clients"], f["elapsed"], f["rate"], f["cpu"], f["rss_kib"] / 1024.0,
               f["peak_queued"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("STRESS_JOBS", 900)))
    ap.add_argument("--clients", type=int, default=int(os.environ.get("STRESS_CLIENTS", 64)))
    ap.add_argument("--blocker-sec", type=float, default=3.0)
    a = ap.parse_args()
    figures, errors = run(a.jobs, a.clients, a.blocker_sec)
    for e in errors[:20]:
        print("stress: FAIL: " + e, file=sys.stderr)
    print("stress: " + describe(figures))
    print("stress: %s" % ("FAILED (%d errors)" % len(errors) if errors else "ok"))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()

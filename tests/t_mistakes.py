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

from ttqlib import BINARY, Daemon, q, run_tests, tap, wait_until  # noqa: E402

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


if __name__ == "__main__":
    run_tests(test_queue_python_stdin_scripts_in_the_state_folder)

#!/usr/bin/env python3
"""The stress test (tests/stress.py) at CI size: fewer jobs and clients than `make stress`.

TTQ_STRESS_JOBS and TTQ_STRESS_CLIENTS override the counts (defaults 160 and 16).
"""

import os

from ttqlib import tap
from stress import describe, run

jobs = int(os.environ.get("TTQ_STRESS_JOBS", 160))
clients = int(os.environ.get("TTQ_STRESS_CLIENTS", 16))
figures, errors = run(jobs, clients, blocker_sec=2.0)
print("# " + describe(figures), flush=True)
tap.eq(errors, [], "%d jobs from %d concurrent clients behind a blocker: every one done with "
       "exit 0, its own output and a unique id" % (jobs, clients))
tap.ok(figures["alive"], "the daemon is still running")
tap.ok(figures["peak_queued"] > 0, "jobs queued up behind the blocker (peak %d)"
       % figures["peak_queued"])
tap.done()

#!/usr/bin/env python3
"""TAP tests for health_check.py (SPEC 12), run against a fake tt_umd package.

The fake is written to a temp dir put on PYTHONPATH and is steered by FAKE_UMD_*
environment variables. It appends every call that touches hardware to the file
named by FAKE_UMD_LOG, so the tests can assert that only card N was opened.
"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "health_check.py")

FAKE_UMD = r'''
import enum, os

def _log(line):
    with open(os.environ["FAKE_UMD_LOG"], "a") as f:
        f.write(line + "\n")

if os.environ.get("FAKE_UMD_IMPORT_RAISE"):
    raise ImportError(os.environ["FAKE_UMD_IMPORT_RAISE"])

_tags = {"AICLK": 14, "ASIC_TEMPERATURE": 11}
if not os.environ.get("FAKE_UMD_NO_EXTRA_TAGS"):
    _tags.update(ARCCLK=15, AXICLK=16)

class _Tag(enum.Enum):  # like the binding's enum: read_entry needs int(tag)
    def __int__(self):
        return self.value

TelemetryTag = _Tag("TelemetryTag", _tags)
_BY_VALUE = {v: k for k, v in _tags.items()}

class _Reader:
    def read_entry(self, tag):
        if type(tag) is not int:
            raise TypeError("read_entry(): incompatible argument %r" % (tag,))
        name = _BY_VALUE[tag]
        _log("read %s" % name)
        exc = os.environ.get("FAKE_UMD_READ_RAISE_" + name)
        if exc:
            raise RuntimeError(exc)
        return int(os.environ.get("FAKE_UMD_" + name, "1000"), 0)

class TTDevice:
    def __init__(self, n):
        self.n, self.ready = n, False

    @staticmethod
    def create(n):
        _log("create %r" % (n,))
        if os.environ.get("FAKE_UMD_CREATE_RAISE"):
            raise RuntimeError(os.environ["FAKE_UMD_CREATE_RAISE"])
        return TTDevice(n)

    def init_tt_device(self):
        _log("init %r" % (self.n,))
        self.ready = True

    def get_arc_telemetry_reader(self):
        if not self.ready:
            raise RuntimeError("telemetry before init_tt_device")
        return _Reader()

class PCIDevice:
    @staticmethod
    def enumerate_devices():
        _log("enumerate")
        return [0, 1, 2, 3]

class TopologyDiscovery:
    @staticmethod
    def discover(*a, **k):
        _log("discover")
        raise RuntimeError("all-card discovery")

def __getattr__(name):  # anything else the script reaches for is recorded
    _log("getattr %s" % name)
    raise AttributeError(name)
'''

# --- tiny TAP helper ---------------------------------------------------------
_count = 0
_failed = 0


def ok(cond, name, diag=""):
    global _count, _failed
    _count += 1
    if not cond:
        _failed += 1
    print("%sok %d - %s" % ("" if cond else "not ", _count, name))
    if not cond and diag:
        for line in str(diag).splitlines():
            print("#   " + line)
    sys.stdout.flush()
    return cond


def done():
    print("1..%d" % _count)
    sys.exit(1 if _failed else 0)


# --- running the script --------------------------------------------------------
TMP = tempfile.mkdtemp(prefix="t_health_check.")
atexit.register(shutil.rmtree, TMP, True)
FAKE_DIR = os.path.join(TMP, "fake")
os.makedirs(os.path.join(FAKE_DIR, "tt_umd"))
with open(os.path.join(FAKE_DIR, "tt_umd", "__init__.py"), "w") as f:
    f.write(FAKE_UMD)
LOG = os.path.join(TMP, "umd.log")


class Run:
    def __init__(self, args, fake=True, env=None, flags=()):
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("FAKE_UMD_", "PYTHON"))}
        if fake:
            e["PYTHONPATH"] = FAKE_DIR
        e["FAKE_UMD_LOG"] = LOG
        e.update(env or {})
        if os.path.exists(LOG):
            os.unlink(LOG)
        p = subprocess.run([sys.executable] + list(flags) + [SCRIPT] + list(args),
                           env=e, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=60)
        self.code, self.out, self.err = p.returncode, p.stdout, p.stderr
        self.log = []
        if os.path.exists(LOG):
            with open(LOG) as f:
                self.log = f.read().splitlines()

    def diag(self):
        return "exit %r\nstdout: %r\nstderr: %r\nfake log: %r" % (
            self.code, self.out, self.err, self.log)


def has_call(r, prefix):
    return any(line.startswith(prefix) for line in r.log)


# --- healthy ---------------------------------------------------------------------
r = Run(["1"], env={"FAKE_UMD_AICLK": "1350", "FAKE_UMD_ARCCLK": "540",
                    "FAKE_UMD_AXICLK": "900"})
ok(r.code == 0, "healthy AICLK exits 0", r.diag())
ok("1350 MHz" in r.out and "healthy" in r.out and "unhealthy" not in r.out,
   "healthy output names the AICLK MHz", r.diag())
ok("card 1" in r.out, "output names the card", r.diag())
ok("ARCCLK 540 MHz" in r.out and "AXICLK 900 MHz" in r.out,
   "extra clocks printed when the tags exist", r.diag())
ok([x for x in r.log if x.startswith("create")] == ["create 1"],
   "only card 1 was created", r.diag())
ok(r.log[:3] == ["create 1", "init 1", "read AICLK"],
   "create, init_tt_device, then AICLK read, in that order", r.diag())
ok(not has_call(r, "enumerate") and not has_call(r, "discover")
   and not has_call(r, "getattr"),
   "no enumeration, discovery or other tt_umd entry points", r.diag())

r = Run(["3"], env={"FAKE_UMD_AICLK": "1000"})
ok(r.code == 0 and r.log[:2] == ["create 3", "init 3"]
   and [x for x in r.log if x.startswith("create")] == ["create 3"],
   "card 3 opens device 3 and nothing else", r.diag())

r = Run(["007"], env={"FAKE_UMD_AICLK": "1000"})
ok(r.code == 0 and [x for x in r.log if x.startswith("create")] == ["create 7"],
   "leading zeros: card number passed as the integer 7", r.diag())

r = Run(["0"], env={"FAKE_UMD_AICLK": "1000", "FAKE_UMD_NO_EXTRA_TAGS": "1"})
ok(r.code == 0 and "1000 MHz" in r.out and "ARCCLK" not in r.out,
   "missing ARCCLK/AXICLK tags are ignored", r.diag())

r = Run(["0"], env={"FAKE_UMD_AICLK": "1000",
                    "FAKE_UMD_READ_RAISE_ARCCLK": "arc boom"})
ok(r.code == 0 and "AXICLK" in r.out,
   "a failing extra-clock read does not decide health", r.diag())

r = Run(["0"], env={"FAKE_UMD_AICLK": "1000", "FAKE_UMD_ARCCLK": "0",
                    "FAKE_UMD_AXICLK": "0xFFFFFFFF"})
ok(r.code == 0, "bad extra clocks with sane AICLK still healthy", r.diag())

# --- unhealthy -------------------------------------------------------------------
r = Run(["1"], env={"FAKE_UMD_AICLK": "0"})
ok(r.code == 1, "AICLK 0 exits 1", r.diag())
ok("unhealthy" in r.out and "card 1" in r.out, "AICLK 0 says unhealthy", r.diag())

for bad in ("-5", "0x1FFFFFFFF", "10001"):
    r = Run(["1"], env={"FAKE_UMD_AICLK": bad})
    ok(r.code == 1 and "unhealthy" in r.out,
       "AICLK %s is no clock reading: exits 1, unhealthy" % bad, r.diag())
r = Run(["1"], env={"FAKE_UMD_AICLK": "10000"})
ok(r.code == 0, "AICLK 10000 MHz, the top of the range, is healthy", r.diag())

r = Run(["1"], env={"FAKE_UMD_AICLK": "0xFFFFFFFF"})
ok(r.code == 1, "AICLK 0xFFFFFFFF exits 1", r.diag())
ok("unhealthy" in r.out and "FFFFFFFF" in r.out.upper(),
   "dead PCIe read is shown and called unhealthy", r.diag())

r = Run(["1"], env={"FAKE_UMD_AICLK": "0", "FAKE_UMD_ARCCLK": "540",
                    "FAKE_UMD_AXICLK": "900"})
ok(r.code == 1, "only AICLK decides: zero AICLK with sane extras exits 1",
   r.diag())

r = Run(["2"], env={"FAKE_UMD_CREATE_RAISE": "no such device /dev/tenstorrent/2"})
ok(r.code == 1, "exception on create exits 1", r.diag())
ok("no such device /dev/tenstorrent/2" in r.out + r.err,
   "exception on create is printed", r.diag())
ok(r.log == ["create 2"], "exception on create: nothing else tried", r.diag())

r = Run(["1"], env={"FAKE_UMD_READ_RAISE_AICLK": "telemetry read timed out"})
ok(r.code == 1, "exception on AICLK read exits 1", r.diag())
ok("telemetry read timed out" in r.out + r.err,
   "exception on read is printed", r.diag())

# --- tt_umd missing ----------------------------------------------------------
# -I ignores PYTHON* and the user site, -S the site-packages: nothing but the
# standard library can supply tt_umd. Prove that first.
iso = [sys.executable, "-I", "-S", "-c", "import tt_umd"]
pre = subprocess.run(iso, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                     timeout=60)
ok(pre.returncode != 0 and "tt_umd" in pre.stderr,
   "precondition: isolated interpreter cannot import tt_umd",
   "exit %r stderr %r" % (pre.returncode, pre.stderr))

r = Run(["0"], fake=False, flags=["-I", "-S"])
ok(r.code == 2, "no tt_umd importable exits 2", r.diag())
ok("tt_umd" in r.err and "tt-umd" in r.err and ".venv" in r.err,
   "import failure says tt_umd is missing and what to install", r.diag())
ok(r.out == "", "import failure prints no health verdict", r.diag())

r = Run(["0"], env={"FAKE_UMD_IMPORT_RAISE": "libdevice.so: cannot open"})
ok(r.code == 2 and "libdevice.so: cannot open" in r.err and "tt-umd" in r.err,
   "tt_umd failing to import (broken install) exits 2 with advice", r.diag())

# --- usage -----------------------------------------------------------------------
for args, name in (([], "no argument"), (["1", "2"], "two arguments"),
                   (["x"], "non-numeric"), (["-1"], "negative"),
                   (["1.5"], "not an integer"), ([""], "empty string")):
    r = Run(args, env={"FAKE_UMD_AICLK": "1000"})
    ok(r.code == 2 and "usage" in r.err.lower(),
       "usage error (%s) exits 2 with usage on stderr" % name, r.diag())
    ok(r.log == [], "usage error (%s) touches no card" % name, r.diag())

r = Run(["1"], fake=False, flags=["-I", "-S"])
r2 = Run(["x"], fake=False, flags=["-I", "-S"])
ok(r.code == 2 and r2.code == 2 and "usage" in r2.err.lower()
   and "usage" not in r.err.lower(),
   "usage errors are reported without tt_umd (lazy import)",
   r.diag() + "\n" + r2.diag())

r = Run(["--help"], fake=False, flags=["-I", "-S"])
ok(r.code == 0 and "usage" in r.out.lower() and r.log == [],
   "--help prints usage and exits 0 without tt_umd", r.diag())

# --- the file itself ------------------------------------------------------------
with open(SCRIPT) as f:
    src = f.read()
ok(src.startswith('"""') and len(src.splitlines()) <= 130,
   "script starts with a docstring and stays short",
   "%d lines" % len(src.splitlines()))

done()

#!/usr/bin/env python3
"""TAP tests for health_check.py, run against a fake tt_umd package.

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
import datetime, enum, os

# The API generation to imitate (tt_umd's nanobind bindings, read from its sources):
#   0.2   (0.2-0.5.0): init_tt_device() without arguments, get_arc_telemetry_reader()
#   0.5.1 (0.5.1-0.7.0): init_tt_device(timeout_ms=5 s), no firmware info provider
#   0.9   (0.7.1-0.9.x): timeout_ms defaults to 300 s, get_firmware_info_provider()
#   main: get_firmware_telemetry_reader(); get_arc_telemetry_reader() only an alias
GEN = os.environ.get("FAKE_UMD_GEN", "0.2")
LEGACY = bool(os.environ.get("FAKE_UMD_LEGACY"))  # Wormhole firmware before 18.4.0

def _log(line):
    with open(os.environ["FAKE_UMD_LOG"], "a") as f:
        f.write(line + "\n")

def _raise(var):
    msg = os.environ.get(var)
    if msg:  # an exception class of the name FAKE_UMD_RAISE_TYPE gives (tt_umd's own)
        name = os.environ.get("FAKE_UMD_RAISE_TYPE", "RuntimeError")
        raise (RuntimeError if name == "RuntimeError" else type(name, (Exception,), {}))(msg)

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
# The legacy table: tag 14 is DDR_STATUS, the AI clock is tag 24 with the maximum on top.
_LEGACY = {14: 0x2222222, 15: 0x11111111, 16: 0x11111111, 24: (1000 << 16) | 500}
_unpublished = [int(os.environ.get("FAKE_UMD_UNPUBLISHED", "0"))]

def _clock_read(what):
    _log("read %s" % what)
    if _unpublished[0] > 0:  # right after a reset: the telemetry is not there yet
        _unpublished[0] -= 1
        raise RuntimeError("telemetry not yet published")
    _raise("FAKE_UMD_READ_RAISE_AICLK")

class _Reader:
    def read_entry(self, tag):
        if type(tag) is not int:
            raise TypeError("read_entry(): incompatible argument %r" % (tag,))
        name = _BY_VALUE.get(tag, "tag %d" % tag)
        if tag == 14:
            _clock_read(name)
        else:
            _log("read %s" % name)
            _raise("FAKE_UMD_READ_RAISE_" + name)
        if LEGACY:
            return _LEGACY[tag]
        if tag not in _BY_VALUE:
            raise RuntimeError("telemetry tag %d is not available" % tag)
        return int(os.environ.get("FAKE_UMD_" + name, "1000"), 0)

class _Info:
    def get_aiclk(self, noc_id=None):
        _clock_read("info aiclk")
        if os.environ.get("FAKE_UMD_INFO_NONE"):
            return None
        return 500 if LEGACY else int(os.environ.get("FAKE_UMD_AICLK", "1000"), 0)

    def get_arcclk(self, noc_id=None):
        return int(os.environ.get("FAKE_UMD_ARCCLK", "1000"), 0)

    def get_axiclk(self, noc_id=None):
        return int(os.environ.get("FAKE_UMD_AXICLK", "1000"), 0)

class TTDevice:
    def __init__(self, n):
        self.n, self.ready = n, False

    @staticmethod
    def create(n):
        _log("create %r" % (n,))
        _raise("FAKE_UMD_CREATE_RAISE")
        return TTDevice(n)

    def _init(self, timeout):
        _log("init %r" % (self.n,) + ("" if timeout is None else " timeout=%.3f" % timeout))
        _raise("FAKE_UMD_INIT_RAISE")
        self.ready = True

    if GEN == "0.2":
        def init_tt_device(self):
            self._init(None)
    else:
        def init_tt_device(self, timeout_ms=None):
            # nanobind's std::chrono caster: a timedelta, or a float taken as seconds
            if timeout_ms is None:
                secs = 5.0 if GEN == "0.5.1" else 300.0
            elif isinstance(timeout_ms, datetime.timedelta):
                secs = timeout_ms.total_seconds()
            elif type(timeout_ms) is float:
                secs = timeout_ms
            else:
                raise TypeError("init_tt_device(): incompatible function arguments")
            self._init(secs)

    def _reader(self):
        if not self.ready:
            raise RuntimeError("telemetry before init_tt_device")
        return _Reader()

    if GEN == "main":
        def get_firmware_telemetry_reader(self):
            return self._reader()
        if not os.environ.get("FAKE_UMD_NO_ALIAS"):
            def get_arc_telemetry_reader(self):  # kept for old callers, to be removed
                _log("alias get_arc_telemetry_reader")
                return self._reader()
    else:
        def get_arc_telemetry_reader(self):
            return self._reader()

    if GEN in ("0.9", "main") and not os.environ.get("FAKE_UMD_NO_PROVIDER"):
        def get_firmware_info_provider(self):
            if not self.ready:
                raise RuntimeError("firmware info before init_tt_device")
            return _Info()

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


class Run:
    """One run of the script; with wait=False it goes on in the background until finish()."""
    seq = 0

    def __init__(self, args, fake=True, env=None, flags=(), wait=True):
        Run.seq += 1
        self.log_path = os.path.join(TMP, "umd-%d.log" % Run.seq)
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("FAKE_UMD_", "PYTHON", "TT_DEVICE_"))}
        if fake:
            e["PYTHONPATH"] = FAKE_DIR
        e["FAKE_UMD_LOG"] = self.log_path
        e.update(env or {})
        self.p = subprocess.Popen([sys.executable] + list(flags) + [SCRIPT] + list(args),
                                  env=e, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        if wait:
            self.finish()

    def finish(self):
        self.out, self.err = self.p.communicate(timeout=60)
        self.code = self.p.returncode
        self.log = []
        if os.path.exists(self.log_path):
            with open(self.log_path) as f:
                self.log = f.read().splitlines()
        return self

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

# --- every tt_umd API generation ----------------------------------------------------
GENS = ("0.2", "0.5.1", "0.9", "main")


def clock_reads(r):
    return [x for x in r.log if x in ("read AICLK", "read info aiclk")]


def init_timeout(r):
    """The ARC wait init_tt_device was given, in seconds (None: called without one)."""
    for line in r.log:
        if line.startswith("init ") and " timeout=" in line:
            return float(line.split(" timeout=")[1])
    return None


def matrix_runs(gen):
    """Every run of one generation, started together (the retries pause 1 s each)."""
    g = {"FAKE_UMD_GEN": gen}
    msg = "ARC did not start\n  backtrace line 1\n  line 2"
    specs = {
        "sane": dict(g, FAKE_UMD_AICLK="1200"),
        "legacy": dict(g, FAKE_UMD_LEGACY="1"),
        "bound": dict(g, TT_DEVICE_HEALTH_CMD_TIMEOUT="60"),
        "late": dict(g, FAKE_UMD_UNPUBLISHED="1"),
        "never": dict(g, FAKE_UMD_UNPUBLISHED="5"),
        "init_tt_device": dict(g, FAKE_UMD_RAISE_TYPE="ArcStartupError",
                               FAKE_UMD_INIT_RAISE=msg),
        "reading the AI clock": dict(g, FAKE_UMD_RAISE_TYPE="PcieHangError",
                                     FAKE_UMD_READ_RAISE_AICLK=msg),
    }
    runs = {k: Run(["1"], env=v, wait=False) for k, v in specs.items()}
    return {k: r.finish() for k, r in runs.items()}


for gen in GENS:
    rs = matrix_runs(gen)
    r = rs["sane"]
    ok(r.code == 0 and "AICLK 1200 MHz" in r.out and r.out.endswith(": healthy\n"),
       "tt_umd %s: a sane AI clock is healthy" % gen, r.diag())
    ok([x for x in r.log if x.startswith("create")] == ["create 1"]
       and not any(x.startswith(("enumerate", "discover", "getattr", "alias"))
                   for x in r.log),
       "tt_umd %s: only card 1 opened, no scan, no deprecated alias" % gen, r.diag())

    r = rs["legacy"]
    ok(r.code == 0 and "AICLK 500 MHz" in r.out and r.out.endswith(": healthy\n"),
       "tt_umd %s: Wormhole firmware before 18.4.0 (tag 14 = DDR_STATUS 0x2222222, "
       "tag 24 = 1000 << 16 | 500): healthy at 500 MHz" % gen, r.diag())

    r = rs["bound"]
    t = init_timeout(r)
    if gen == "0.2":
        ok(r.code == 0 and "init 1" in r.log,
           "tt_umd 0.2: init_tt_device called without a timeout it does not take",
           r.diag())
    else:
        ok(r.code == 0 and t is not None and 0 < t <= 30,
           "tt_umd %s: the ARC wait is bounded well inside the 60 s command timeout "
           "(got %r s)" % (gen, t), r.diag())

    r = rs["late"]
    ok(r.code == 0 and len(clock_reads(r)) == 2 and "healthy" in r.out,
       "tt_umd %s: telemetry not yet published: one retry, then healthy" % gen, r.diag())
    r = rs["never"]
    ok(r.code == 1 and len(clock_reads(r)) == 2 and "not yet published" in r.out
       and "RuntimeError" in r.out,
       "tt_umd %s: still not published after the retry: unhealthy, exception named"
       % gen, r.diag())

    for where, exc in (("init_tt_device", "ArcStartupError"),
                       ("reading the AI clock", "PcieHangError")):
        r = rs[where]
        ok(r.code == 1 and exc in r.out and where in r.out and "ARC did not start" in r.out
           and r.out.count("\n") == 1 and r.out.endswith(": unhealthy\n"),
           "tt_umd %s: %s in %s is named on one verdict line" % (gen, exc, where), r.diag())

for gen in ("0.9", "main"):
    r = Run(["1"], env={"FAKE_UMD_GEN": gen, "FAKE_UMD_INFO_NONE": "1"})
    ok(r.code == 0 and len(clock_reads(r)) == 3 and "AICLK 1000 MHz" in r.out,
       "tt_umd %s: get_aiclk() gives None twice: the telemetry reader decides (healthy)" % gen,
       r.diag())
    r = Run(["1"], env={"FAKE_UMD_GEN": gen, "FAKE_UMD_INFO_NONE": "1", "FAKE_UMD_AICLK": "0"})
    ok(r.code == 1 and "unhealthy" in r.out,
       "tt_umd %s: get_aiclk() None and the reader reads 0: unhealthy" % gen, r.diag())

r = Run(["1"], env={"FAKE_UMD_GEN": "0.9", "TT_DEVICE_HEALTH_CMD_TIMEOUT": "10"})
t = init_timeout(r)
ok(r.code == 0 and t is not None and 0 < t <= 5,
   "the ARC wait follows TT_DEVICE_HEALTH_CMD_TIMEOUT (10 s: got %r s)" % t, r.diag())

for extra in ({}, {"FAKE_UMD_NO_ALIAS": "1"}):
    r = Run(["1"], env=dict({"FAKE_UMD_GEN": "main", "FAKE_UMD_NO_PROVIDER": "1",
                             "FAKE_UMD_AICLK": "900"}, **extra))
    ok(r.code == 0 and "AICLK 900 MHz" in r.out and "alias get_arc_telemetry_reader"
       not in r.log,
       "main without the info provider reads through get_firmware_telemetry_reader%s"
       % (" (alias gone)" if extra else ", not the alias"), r.diag())

r = Run(["1"], env={"FAKE_UMD_GEN": "0.5.1", "FAKE_UMD_AICLK": "0x2222222"})
ok(r.code == 1 and "unhealthy" in r.out,
   "an implausible AICLK without a legacy clock at tag 24 stays unhealthy", r.diag())

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
ok(src.startswith('"""') and len(src.splitlines()) <= 200,
   "script starts with a docstring and stays short",
   "%d lines" % len(src.splitlines()))

done()

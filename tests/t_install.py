#!/usr/bin/env python3
"""install.sh on a throw-away checkout with a temporary HOME, plus the man page and
bash completion it installs.

Each test copies install.sh, the built executable, the man page and the completion into a
temp "checkout" and runs install.sh there with HOME, PATH and TT_DEVICE_URL of its own. Fake
`make`, `systemctl` and `loginctl` scripts first on PATH log their arguments: `make` so the
build+test step costs nothing (the real suite is what is running this test), `systemctl` to
play a host without a user systemd (show-environment fails, as on this CI machine) or one
with it (every call succeeds and is recorded), and the same for the system manager
(`systemctl` without --user: systemd as PID 1 or not), whose `enable` and `disable` leave and
remove the unit's link as systemctl does. Nothing here touches the real HOME or the real
service managers.

`--system` runs with TTQ_INSTALL_ROOT, install.sh's test-only prefix for /usr/local, /etc and
/var/lib, pointing at a temp folder, as root: the test's own user when it runs as root, else
inside `unshare -r` (a user namespace where it is root) where that is allowed, else skipped.
Refusals beside another user's daemon start a real `serve` as nobody (or as root, for a
personal install run as nobody) on a stand-in node, and need root.
"""

import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile

from ttqlib import BINARY, ROOT, Daemon, free_port, q, run_tests, tap, wait_until

NOBODY = 65534

FAKE_MAKE = """#!/bin/bash
echo "make $PWD $*" >> %(calls)s
id -u >> %(make_uids)s
# FAKE_MAKE_BUILDS=EXE: a bare `make` "builds" by copying EXE in (a checkout just pulled)
[ -n "${FAKE_MAKE_BUILDS:-}" ] && [ $# -eq 0 ] && cp "$FAKE_MAKE_BUILDS" ./tt-device-queue
case $1 in test | unit-test) [ -z "${FAKE_MAKE_TEST_FAILS:-}" ] || { echo 'tests failed' >&2; exit 1; } ;; esac
exit 0
"""
FAKE_SYSTEMCTL = """#!/bin/bash
echo "systemctl $*" >> %(calls)s
if [ "$1" = --user ]; then
    if [ %(present)s = 0 ]; then
        echo 'Failed to connect to bus: No medium found' >&2
        exit 1
    fi
    [ "$2" = show-environment ] && echo "HOME=$HOME"
    exit 0
fi
if [ %(pid1)s = 0 ]; then
    echo "System has not been booted with systemd as init system (PID 1). Can't operate." >&2
    exit 1
fi
wants=$TTQ_INSTALL_ROOT/etc/systemd/system/multi-user.target.wants
case " $* " in
*" enable "*) mkdir -p "$wants" && ln -sfn /etc/systemd/system/$3 "$wants/$3" ;;
*" disable "*) rm -f "$wants/$3" ;;
esac
exit 0
"""
FAKE_LOGINCTL = """#!/bin/bash
echo "loginctl $*" >> %(calls)s
echo no
"""


class Checkout:
    """A temp checkout (install.sh and what it installs), a temp HOME and fake tools."""

    live = []

    def __init__(self, systemd=False, with_binary=True, name="co", pid1=False):
        """systemd: a user manager answers; pid1: systemd runs the host (the system manager
        answers)."""
        self.tmp = tempfile.mkdtemp(prefix="ttq-install-")
        Checkout.live.append(self)  # first: removed at the end even if setting up fails
        self.co = os.path.join(self.tmp, name)
        self.home = os.path.join(self.tmp, "home")
        self.fake = os.path.join(self.tmp, "fakebin")
        self.calls_file = os.path.join(self.tmp, "calls.log")
        self.make_uids = os.path.join(self.tmp, "make-uids.log")
        self.root = os.path.join(self.tmp, "root")  # TTQ_INSTALL_ROOT, made by install.sh
        self.no_dev = os.path.join(self.tmp, "no-dev")  # no card nodes: none claimed
        for d in (self.co, self.home, self.fake, os.path.join(self.co, "completions")):
            os.makedirs(d, exist_ok=True)
        shutil.copy2(os.path.join(ROOT, "install.sh"), self.co)
        shutil.copy2(os.path.join(ROOT, "tt-device-queue.1"), self.co)
        shutil.copy2(os.path.join(ROOT, "health_check.py"), self.co)
        shutil.copy2(os.path.join(ROOT, "completions", "tt-device-queue.bash"),
                     os.path.join(self.co, "completions"))
        shutil.copytree(os.path.join(ROOT, "slurm"), os.path.join(self.co, "slurm"))
        if with_binary:
            shutil.copy2(BINARY, os.path.join(self.co, "tt-device-queue"))
        subst = {"calls": q(self.calls_file), "make_uids": q(self.make_uids),
                 "present": "1" if systemd else "0", "pid1": "1" if pid1 else "0"}
        for name, text in (("make", FAKE_MAKE), ("systemctl", FAKE_SYSTEMCTL),
                           ("loginctl", FAKE_LOGINCTL)):
            p = os.path.join(self.fake, name)
            with open(p, "w") as f:
                f.write(text % subst)
            os.chmod(p, 0o755)
        self.url = "http://127.0.0.1:%d" % free_port()  # nobody listens there

    def run(self, *args, env=None, timeout=20, uid=None, as_root=False):
        """install.sh ARGS with this checkout's HOME, fake tools, fake root and no card nodes
        (the host's own service and cards never count); as uid (needs root), or as root
        (as_root: in `unshare -r` when the test is not root)."""
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("TT_DEVICE_", "TT_QUEUE_", "XDG_", "MAKE", "MFLAGS", "TTQ_"))}
        e.update(HOME=self.home, PATH=self.fake + ":" + os.environ["PATH"],
                 TT_DEVICE_URL=self.url, TTQ_INSTALL_ROOT=self.root,
                 TT_DEVICE_DEV_DIR=self.no_dev)
        e.update(env or {})
        who = {}
        if uid is not None:
            who = {"user": uid, "group": uid, "extra_groups": []}
        argv = [os.path.join(self.co, "install.sh")] + list(args)
        if as_root and os.geteuid() != 0:
            argv = ["unshare", "-r"] + argv
        p = subprocess.run(argv, env=e, cwd=self.tmp, capture_output=True, timeout=timeout,
                           stdin=subprocess.DEVNULL, **who)
        return p.returncode, p.stdout.decode() + p.stderr.decode()

    def give_to(self, uid):
        """Make the whole temp tree uid's, for a run as uid."""
        os.chmod(self.tmp, 0o755)
        for top, dirs, files in os.walk(self.tmp):
            for n in [top] + [os.path.join(top, x) for x in dirs + files]:
                os.lchown(n, uid, uid)

    def calls(self, prefix=""):
        try:
            with open(self.calls_file) as f:
                return [line.rstrip("\n") for line in f if line.startswith(prefix)]
        except OSError:
            return []

    def forget_calls(self):
        if os.path.exists(self.calls_file):
            os.unlink(self.calls_file)

    def h(self, *parts):
        return os.path.join(self.home, *parts)

    @property
    def cli(self):
        return self.h(".local", "bin", "tt-device-queue")

    @property
    def man(self):
        return self.h(".local", "share", "man", "man1", "tt-device-queue.1")

    @property
    def comp(self):
        return self.h(".local", "share", "bash-completion", "completions", "tt-device-queue")

    @property
    def unit(self):
        return self.h(".config", "systemd", "user", "tt-device-queue.service")

    def r(self, path):
        """A host path under the fake root (TTQ_INSTALL_ROOT)."""
        return self.root + path

    def make_uid_calls(self):
        try:
            with open(self.make_uids) as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    def home_tree(self):
        return self.tree(self.home)

    def root_tree(self):
        return self.tree(self.root)

    @staticmethod
    def tree(top_dir):
        """Every path under top_dir with what it is (link target, file bytes and mode, dir)."""
        out = {}
        for top, dirs, files in os.walk(top_dir):
            for n in dirs + files:
                p = os.path.join(top, n)
                rel = os.path.relpath(p, top_dir)
                if os.path.islink(p):
                    out[rel] = ("link", os.readlink(p))
                elif os.path.isdir(p):
                    out[rel] = ("dir", stat.S_IMODE(os.stat(p).st_mode))
                else:
                    with open(p, "rb") as f:
                        out[rel] = ("file", f.read(), stat.S_IMODE(os.stat(p).st_mode))
        return out

    def cleanup(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


def test_fallback_install_idempotent_and_manual_start():
    c = Checkout(systemd=False)
    rc, out = c.run()
    tap.eq(rc, 0, "install without a user systemd succeeds")
    tap.eq(c.calls("make"), ["make %s " % c.co, "make %s unit-test" % c.co],
           "it builds, then runs the unit tests (not the integration suite), in the checkout")
    tap.ok("no user systemd answers" in out and "serve" in out and "setsid" in out,
           "it says there is no user systemd and how to start the daemon by hand", out)
    tap.eq(os.readlink(c.cli), os.path.join(c.co, "tt-device-queue"),
           "~/.local/bin/tt-device-queue links to the checkout's executable")
    tap.eq((os.readlink(c.man), os.readlink(c.comp)),
           (os.path.join(c.co, "tt-device-queue.1"),
            os.path.join(c.co, "completions", "tt-device-queue.bash")),
           "man page and bash completion linked under ~/.local/share")
    tap.ok(not os.path.exists(c.unit), "no unit file without a user systemd")
    tap.eq(stat.S_IMODE(os.stat(os.path.join(c.co, "logs-v2")).st_mode), 0o700,
           "logs-v2/ created private")
    tap.eq(c.calls("systemctl"), ["systemctl --user show-environment"],
           "systemctl asked only whether a user manager answers")
    before = c.home_tree()
    rc2, out2 = c.run()
    tap.eq(rc2, 0, "a second run succeeds")
    tap.eq(c.home_tree(), before, "a second run leaves HOME exactly as the first")
    tap.ok(not [n for n in os.listdir(c.h(".local", "bin")) if ".tmp." in n],
           "no temporary files left behind")

    # The printed command really starts a daemon, with settings from the env file.
    port = free_port()
    env_dir = c.h(".config", "tt-device-queue")
    os.makedirs(env_dir)
    ran, reset_log = os.path.join(c.tmp, "word-ran"), os.path.join(c.tmp, "reset.log")
    for name, body in (("deep.sh", "touch %s" % q(ran)), ("reset.sh", 'echo "$@" >> %s' % q(reset_log))):
        with open(os.path.join(c.tmp, name), "w") as f:
            f.write("#!/bin/bash\n%s\n" % body)
        os.chmod(os.path.join(c.tmp, name), 0o755)
    with open(os.path.join(env_dir, "env"), "w") as f:
        # values with spaces, as systemd's EnvironmentFile takes them: whole, never run;
        # simulated cards (no nodes), so a host's real cards are never claimed from its service
        f.write("# the service's settings\nTT_DEVICE_IDS=0,1\nTT_DEVICE_PORT=%d\n"
                "TT_DEVICE_DEV_DIR=%s\n"
                "TT_DEVICE_RESET_CMD=%s {device} --no_reinit\n"
                "TT_DEVICE_HEALTH_CHECK_CMD=\"true {device}\"\n"
                "TT_DEVICE_DEEP_RESET_CMD=true %s\n"
                % (port, os.path.join(c.tmp, "no-dev"), os.path.join(c.tmp, "reset.sh"),
                   os.path.join(c.tmp, "deep.sh")))
    cmd = out.split("\n\n")[1]
    tap.ok("TT_DEVICE_LOG_DIR=" in cmd and "serve" in cmd, "the by-hand command block", cmd)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("TT_DEVICE_", "TT_QUEUE_"))}
    e["HOME"] = c.home
    subprocess.run(["bash", "-c", cmd], env=e, cwd=c.tmp, timeout=10, check=True)
    pids = []
    try:
        def up():
            p = subprocess.run([c.cli, "--port", str(port), "status"], capture_output=True,
                               env=e, timeout=5)
            return p.returncode == 0 and p
        p = wait_until(up, 10, "the by-hand daemon to answer")
        tap.ok(b"card 1" in p.stdout or b"1" in p.stdout, "it serves the env file's cards",
               p.stdout)
        subprocess.run([c.cli, "--port", str(port), "reset", "--device", "1"], env=e,
                       capture_output=True, timeout=5)
        # the shell creates the file before its echo writes the line: wait for the whole line
        wait_until(lambda: os.path.exists(reset_log) and open(reset_log).read().endswith("\n"),
                   10, "the env file's reset command to run")
        tap.eq(open(reset_log).read(), "1 --no_reinit\n",
               "a setting with spaces is taken whole: its reset command ran with its arguments")
        tap.ok(not os.path.exists(ran), "and no word of a setting ran as a program")
        # the daemon, not its guardian (same command line, comm ttq-guardian)
        pids = [int(x) for x in subprocess.run(
            ["pgrep", "-f", "^%s serve$" % re.escape(c.cli)], capture_output=True,
            text=True).stdout.split()
            if open("/proc/%s/comm" % x).read().strip() == "tt-device-queue"]
        tap.eq(len(pids), 1, "one daemon process started by the printed command")
        log = os.path.join(c.co, "logs-v2", "serve.log")
        tap.ok(os.path.exists(os.path.join(c.co, "logs-v2", "jobs.sqlite3"))
               and "serving 2 cards" in open(log).read(),
               "its database and log lines are in the checkout's logs-v2/")
    finally:
        pids = pids or [int(x) for x in subprocess.run(
            ["pgrep", "-f", "^%s serve$" % re.escape(c.cli)], capture_output=True,
            text=True).stdout.split()
            if open("/proc/%s/comm" % x).read().strip() == "tt-device-queue"]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        for pid in pids:
            wait_until(lambda: not os.path.exists("/proc/%d" % pid), 10, "daemon exit")


def test_copy_mode_and_no_test():
    c = Checkout(systemd=False)
    rc, out = c.run("--copy", "--no-test")
    tap.eq(rc, 0, "--copy --no-test succeeds")
    tap.eq(c.calls("make"), ["make %s " % c.co], "--no-test builds but runs no tests")
    st = os.lstat(c.cli)
    tap.ok(stat.S_ISREG(st.st_mode) and st.st_mode & 0o111, "--copy: a real executable file")
    with open(c.cli, "rb") as a, open(BINARY, "rb") as b:
        tap.ok(a.read() == b.read(), "identical to the checkout's build")
    p = subprocess.run([c.cli, "--version"], capture_output=True, text=True)
    tap.ok(p.returncode == 0 and "SQLite" in p.stdout, "the copy runs", p.stdout + p.stderr)
    tap.ok(stat.S_ISREG(os.lstat(c.man).st_mode), "--copy copies the man page too")
    rc, out = c.run("--no-build")
    tap.eq((rc, c.calls("make")), (0, ["make %s " % c.co]), "--no-build runs no make at all")
    tap.ok(os.path.islink(c.cli), "without --copy the copy is replaced by a symlink")


def test_full_test_and_what_unit_test_runs():
    c = Checkout(systemd=False)
    rc, out = c.run("--full-test")
    tap.eq((rc, c.calls("make")), (0, ["make %s " % c.co, "make %s test" % c.co]),
           "--full-test runs the whole suite (make test)")
    rc, out = c.run("--help")
    tap.ok(rc == 0 and "--full-test" in out and "make unit-test" in out,
           "--help tells both test modes apart", out)
    # What the default runs, asked of the real Makefile without running anything.
    p = subprocess.run(["make", "-n", "-C", ROOT, "unit-test"], capture_output=True,
                       text=True, timeout=60)
    words = p.stdout.split()
    # the prove line names each binary once; build lines (binaries not built yet) do not count
    prove = next((ln for ln in p.stdout.splitlines() if ln.startswith("prove")), "")
    unit = sorted(os.path.basename(w) for w in prove.split() if w.startswith("tests/bin/test_"))
    want = sorted(n[:-2] for n in os.listdir(os.path.join(ROOT, "tests"))
                  if re.match(r"test_.*\.c$", n))
    tap.ok(p.returncode == 0 and unit == want and not [w for w in words if w.endswith(".py")],
           "make unit-test runs every unit test binary and no integration test",
           p.stdout + p.stderr)


def test_agent_skill_installed_and_removed():
    c = Checkout(systemd=False)
    p = subprocess.run([os.path.join(c.co, "tt-device-queue"), "skill"], capture_output=True,
                       timeout=10)
    with open(os.path.join(ROOT, "skills", "tt-device-queue", "SKILL.md"), "rb") as f:
        source = f.read()
    tap.ok(p.returncode == 0 and p.stdout == source and
           not os.path.exists(os.path.join(c.co, "skills")),
           "a copied executable prints skills/tt-device-queue/SKILL.md (built in)")
    head = source.decode().split("\n---\n")[0].split("\n")
    fields = dict(line.split(": ", 1) for line in head[1:] if ": " in line)
    tap.ok(head[0] == "---" and fields.get("name") == "tt-device-queue" and
           "Use it whenever" in fields.get("description", ""),
           "Agent Skills front matter: name, and a description saying when to use it", head)
    # The earlier install linked ~/.agents/skills/tt-device-queue to its checkout's folder;
    # a link to a folder since removed is left where a Claude Code skill would be.
    old = os.path.join(c.tmp, "old-checkout", "skills", "tt-device-queue")
    os.makedirs(old)
    with open(os.path.join(old, "SKILL.md"), "w") as f:
        f.write("old skill\n")
    agents, claude = (c.h(x, "skills", "tt-device-queue") for x in (".agents", ".claude"))
    for link, target in ((agents, old), (claude, os.path.join(c.tmp, "removed"))):
        os.makedirs(os.path.dirname(link))
        os.symlink(target, link)
    rc, out = c.run("--no-build")
    tap.eq(rc, 0, "install with the earlier install's skill links succeeds")
    for d in (agents, claude):
        f = os.path.join(d, "SKILL.md")
        tap.ok(not os.path.islink(d) and os.path.isfile(f) and open(f, "rb").read() == source
               and stat.S_IMODE(os.stat(f).st_mode) == 0o644,
               "%s: the link replaced by a folder holding the skill" % os.path.relpath(d, c.home),
               out)
    tap.eq(open(os.path.join(old, "SKILL.md")).read(), "old skill\n",
           "nothing written through the old link")
    tap.ok("replacing" in out and "installed %s/SKILL.md" % agents in out,
           "it says what it replaced and installed", out)
    before = c.home_tree()
    tap.eq((c.run("--no-build")[0], c.home_tree()), (0, before), "a second install: the same")
    rc, out = c.run("--uninstall")
    tap.ok(rc == 0 and not os.path.lexists(agents) and not os.path.lexists(claude),
           "--uninstall removes the skill", out)
    tap.ok(os.path.isdir(c.h(".agents", "skills")) and os.path.isdir(old),
           "and nothing else (the skills folders, the old checkout)")


def test_failed_tests_install_nothing():
    c = Checkout(systemd=False)
    rc, out = c.run(env={"FAKE_MAKE_TEST_FAILS": "1"})
    tap.ok(rc != 0, "install.sh fails when the tests fail", out)
    tap.eq(c.home_tree(), {}, "and installs nothing")
    c2 = Checkout(systemd=False, with_binary=False)
    rc, out = c2.run("--no-build")
    tap.ok(rc == 1 and "does not exist" in out, "--no-build without an executable: a clear "
           "error", out)


def test_refuses_while_busy():
    d = Daemon().start()
    c = Checkout(systemd=False)
    c.url = "http://127.0.0.1:%d" % d.port
    gate = d.path("gate")
    ready = d.path("ready")
    # A finished job whose command mentions the JSON keys must not confuse the busy check.
    d.wait_done(d.submit("echo '\"current\":{ \"queued_total\":7, \"reset_pending\":true'")
                ["job_id"])
    rc, out = c.run("--no-build")
    tap.ok(rc == 0 and "is idle" in out, "idle daemon (odd commands in its history): installs",
           out)
    c.run("--uninstall")
    c.forget_calls()
    empty = c.home_tree()
    d.submit("touch %s; while [ ! -e %s ]; do sleep 0.02; done" % (q(ready), q(gate)))
    wait_until(lambda: os.path.exists(ready), 10, "blocker running")
    queued = d.submit("true")
    rc, out = c.run()
    tap.ok(rc == 1 and "busy: 1 running, 1 queued" in out and "--force" in out,
           "refuses while a job runs and one is queued, and says why", out)
    tap.eq((c.home_tree(), c.calls("make")), (empty, []), "refusal: nothing built or installed")
    os.makedirs(c.h(".config", "tt-device-queue"))
    with open(c.h(".config", "tt-device-queue", "env"), "w") as f:
        f.write("TT_DEVICE_IDS=0,1\nTT_DEVICE_PORT='%d'\n" % d.port)
    rc, out = c.run(env={"TT_DEVICE_URL": ""})
    tap.ok(rc == 1 and "busy" in out and ":%d" % d.port in out,
           "no TT_DEVICE_URL/HOST/PORT: it checks the port from the service's env file", out)
    os.unlink(c.h(".config", "tt-device-queue", "env"))
    rc, out = c.run("--uninstall")
    tap.ok(rc == 1 and "busy" in out, "--uninstall refuses too", out)
    rc, out = c.run("--force", "--no-build")
    tap.ok(rc == 0 and "--force" in out and os.path.islink(c.cli),
           "--force installs anyway", out)
    tap.eq(d.job(queued["job_id"])["status"], "queued", "install.sh never touches the queue")
    open(gate, "a").close()
    d.wait_done(queued["job_id"])
    d.post("/reset", {"device_id": "1"})
    wait_until(lambda: d.dev(1)["reset_epoch"] == 1, 10, "the reset to finish")
    rc, out = c.run("--no-build")
    tap.ok(rc == 0 and "is idle" in out, "idle again: installs without --force", out)


def test_refuses_while_the_python_service_is_busy():
    """`git pull && ./install.sh` over the earlier Python service: no executable of ours yet,
    and that service answers /status in its own shape. The busy check must still see it."""
    import http.server
    import json
    import threading

    old = {"current": {"id": "a" * 32, "cmd": "sleep 120", "client": "alice", "mode": "run"},
           "pending": [{"id": "b" * 32, "cmd": "true", "waiting_sec": 3.0},
                       {"id": "c" * 32, "cmd": "echo '\"waiting_sec\":1'", "waiting_sec": 1.0}],
           "recent": [], "device": {"state": "healthy", "reset_pending": False},
           "worker": {"alive": True}}

    class Old(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(old).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Old)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        c = Checkout(systemd=False, with_binary=False)
        c.url = "http://127.0.0.1:%d" % srv.server_port
        rc, out = c.run(env={"FAKE_MAKE_BUILDS": BINARY})
        tap.ok(rc == 1 and "busy: 1 running, 2 queued" in out,
               "a just-pulled checkout builds first, then asks the Python service and refuses "
               "while it runs one job and queues two", out)
        tap.ok(not os.path.lexists(c.cli), "nothing was installed", out)
    finally:
        srv.shutdown()


def test_uninstall_keeps_logs():
    c = Checkout(systemd=False)
    c.run("--no-build")
    keep = os.path.join(c.co, "logs-v2", "jobs.sqlite3")
    with open(keep, "w") as f:
        f.write("precious")
    os.makedirs(c.h(".local", "share", "other"))
    rc, out = c.run("--uninstall")
    tap.eq(rc, 0, "--uninstall succeeds")
    tap.ok(not any(os.path.lexists(p) for p in (c.cli, c.man, c.comp)),
           "the CLI, man page and completion are gone", out)
    tap.ok(open(keep).read() == "precious" and "kept" in out,
           "logs-v2/ untouched, and it says so")
    tap.ok(os.path.isdir(c.h(".local", "share", "other")), "nothing else under HOME removed")
    rc, out = c.run("--uninstall")
    tap.ok(rc == 0 and "nothing removed" in out, "a second --uninstall is a no-op", out)


def test_systemd_unit_with_fake_systemctl():
    c = Checkout(systemd=True, name="check out %dir")
    os.makedirs(c.h(".config", "tt-device-queue"))
    with open(c.h(".config", "tt-device-queue", "env"), "w") as f:
        f.write("TT_DEVICE_STOP_GRACE_SEC=30.5\n")
    rc, out = c.run("--no-build")
    tap.eq(rc, 0, "install with a user systemd succeeds")
    tap.eq(c.calls("systemctl"), [
        "systemctl --user show-environment",
        "systemctl --user daemon-reload",
        "systemctl --user enable --quiet tt-device-queue.service",
        "systemctl --user restart tt-device-queue.service",
        "systemctl --user --no-pager --lines=0 status tt-device-queue.service"],
        "writes the unit, then daemon-reload, enable, restart")
    tap.ok("loginctl enable-linger" in out, "points out lingering when it is off", out)
    unit = open(c.unit).read()
    keys = {}
    for line in unit.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            keys[k] = v
    exe = c.cli.replace("%", "%%")
    tap.eq(keys.get("ExecStart"), '"%s" serve' % exe, "ExecStart runs the installed CLI's serve")
    tap.eq(keys.get("Environment"),
           '"TT_DEVICE_LOG_DIR=%s/logs-v2"' % c.co.replace("%", "%%"),
           "TT_DEVICE_LOG_DIR under the checkout's logs-v2 (quoted, % escaped)")
    tap.eq((keys.get("Type"), keys.get("KillMode"), keys.get("Restart")),
           ("notify", "control-group", "on-failure"), "Type=notify, KillMode, Restart")
    tap.ok(int(keys.get("TimeoutStopSec", 0)) > 30.5 + 5,
           "stop timeout longer than the env file's kill grace + 5 s", keys)
    tap.ok(int(keys.get("WatchdogSec", 0)) > 0 and keys.get("EnvironmentFile", "").startswith("-"),
           "a watchdog and an optional environment file")
    verify = shutil.which("systemd-analyze")
    if verify:
        p = subprocess.run([verify, "verify", c.unit], capture_output=True, text=True,
                           env=dict(os.environ, HOME=c.home))
        # everything but the man: Documentation= lookup (the test's HOME is not in MANPATH)
        msgs = [ln for ln in (p.stdout + p.stderr).splitlines()
                if "tt-device-queue" in ln and "Command 'man " not in ln]
        tap.eq(msgs, [], "systemd-analyze verify accepts the unit")
    before = c.home_tree()
    c.forget_calls()
    rc, out = c.run("--no-build")
    tap.ok(rc == 0 and c.home_tree() == before, "second run: same files")
    tap.ok("systemctl --user restart tt-device-queue.service" in c.calls("systemctl"),
           "second run restarts the service again")
    c.forget_calls()
    rc, out = c.run("--uninstall")
    tap.eq(rc, 0, "--uninstall succeeds")
    tap.ok("systemctl --user disable --now tt-device-queue.service" in c.calls("systemctl")
           and "systemctl --user daemon-reload" in c.calls("systemctl")
           and not os.path.exists(c.unit), "stops, disables and removes the unit", c.calls())
    tap.ok(os.path.isdir(os.path.join(c.co, "logs-v2")), "logs-v2/ kept")


def test_completion():
    d = Daemon().start()
    job = d.submit("true")
    d.wait_done(job["job_id"])
    script = os.path.join(ROOT, "completions", "tt-device-queue.bash")
    prog = r'''
source %s
t() { COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); _tt_device_queue
      echo "${COMPREPLY[*]}"; }
t tt-device-queue r
t tt-device-queue --port 1 q
t tt-device-queue run --ti
t tt-device-queue queue-python --wa
t %s result ""
t tt-device-queue run -- ""
complete -p tt-device-queue
t tt-device-queue hold --r
''' % (q(script), q(BINARY))
    p = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, timeout=10,
                       env=dict(os.environ, TT_DEVICE_URL="http://127.0.0.1:%d" % d.port))
    lines = p.stdout.splitlines()
    tap.ok(lines[:4] == ["run result reset release", "queue queue-python", "--timeout",
                         "--wait --wait-timeout"], "subcommands and options complete",
           p.stdout + p.stderr)
    tap.ok(len(lines) > 4 and job["job_id"] in lines[4].split(), "job ids come from the daemon",
           p.stdout)
    tap.ok(len(lines) > 6 and lines[5] == "" and "-o default" in lines[6],
           "after -- bash's default completion takes over", p.stdout)
    tap.ok(len(lines) > 7 and lines[7] == "--reason", "hold completes --reason", p.stdout)


def test_docs_and_lint():
    man = os.path.join(ROOT, "tt-device-queue.1")
    text = open(man).read()
    readme = open(os.path.join(ROOT, "README.md")).read()
    names = set(re.findall(r"\b(TT_(?:DEVICE|QUEUE)_[A-Z_]+[A-Z])\b", readme))
    roff_names = set(re.findall(r"TT_(?:DEVICE|QUEUE)_[A-Z_]+[A-Z]", text.replace("\\_", "_")))
    tap.eq(sorted(names - roff_names), [], "every variable the README names is in the man page")
    tap.eq(sorted(roff_names - names), [], "and the man page names none the README does not")
    help_out = subprocess.run([BINARY, "--help"], capture_output=True, text=True).stdout
    subs = re.findall(r"^  ([a-z-]+)\b", help_out.split("subcommands:")[1].split("\n\n")[0],
                      re.M)
    comp = open(os.path.join(ROOT, "completions", "tt-device-queue.bash")).read()
    tap.eq([s for s in subs if not re.search(r"^(\\fB|\.B )%s\b" % re.escape(
        s.replace("-", "\\-")), text, re.M)], [],
           "every subcommand of --help has its entry in the man page")
    tap.eq([s for s in subs if s not in comp.split('subcommands="')[1].split('"')[0].split()],
           [], "and in the completion")
    if shutil.which("groff"):
        p = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", man], capture_output=True,
                           text=True)
        tap.eq((p.returncode, p.stderr), (0, ""), "groff -man -ww: no warnings")
    else:
        tap.ok(True, "# SKIP groff not installed")
    if shutil.which("man"):
        p = subprocess.run(["man", "-l", man], capture_output=True, text=True,
                           env=dict(os.environ, MANPAGER="cat", PAGER="cat", MANWIDTH="80"))
        tap.ok(p.returncode == 0 and "tt-device-queue" in p.stdout and "ENVIRONMENT" in p.stdout,
               "man -l renders it", p.stderr)
    else:
        tap.ok(True, "# SKIP man not installed")
    if shutil.which("shellcheck"):
        p = subprocess.run(["shellcheck", os.path.join(ROOT, "install.sh")],
                           capture_output=True, text=True)
        p2 = subprocess.run(["shellcheck", "-s", "bash",
                             os.path.join(ROOT, "completions", "tt-device-queue.bash")],
                            capture_output=True, text=True)
        p3 = subprocess.run(["shellcheck"] + [os.path.join(ROOT, "slurm", s)
                                              for s in ("prolog", "epilog")],
                            capture_output=True, text=True)
        tap.eq((p.returncode, p.stdout, p2.returncode, p2.stdout, p3.returncode, p3.stdout),
               (0, "", 0, "", 0, ""),
               "shellcheck: install.sh, the completion and the Slurm scripts are clean")
    else:
        tap.ok(True, "# SKIP shellcheck not installed")


SYS_EXE = "/usr/local/bin/tt-device-queue"
SYS_MAN = "/usr/local/share/man/man1/tt-device-queue.1"
SYS_COMP = "/usr/local/share/bash-completion/completions/tt-device-queue"
SYS_SKILL = "/usr/local/share/tt-device-queue/SKILL.md"
SYS_PROLOG = "/usr/local/lib/tt-device-queue/slurm/prolog"
SYS_EPILOG = "/usr/local/lib/tt-device-queue/slurm/epilog"
SYS_UNIT = "/etc/systemd/system/tt-device-queue.service"
SYS_WANTS = "/etc/systemd/system/multi-user.target.wants/tt-device-queue.service"
SYS_ENV = "/etc/tt-device-queue/env"
SYS_LOG = "/var/lib/tt-device-queue"
_can_be_root = []


def can_be_root():
    """Whether install.sh can run as root here: the test is root, or `unshare -r` works."""
    if not _can_be_root:
        ok = os.geteuid() == 0
        if not ok and shutil.which("unshare"):
            ok = subprocess.run(["unshare", "-r", "true"], capture_output=True).returncode == 0
        _can_be_root.append(ok)
    return _can_be_root[0]


def skip(why):
    tap.ok(True, "# SKIP %s" % why)


def unit_keys(path):
    keys = {}
    with open(path) as f:
        for line in f.read().splitlines():
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                keys[k] = v
    return keys


def stand_in_node(d):
    """d.path("dev") holding card 0's stand-in node (a regular file): its serve claims it."""
    dev = d.path("dev")
    os.mkdir(dev)
    open(os.path.join(dev, "0"), "w").close()
    d.env["TT_DEVICE_DEV_DIR"] = dev
    return dev


def path_without_ss(c):
    """A PATH of the fake tools and links to every other program but ss."""
    d = os.path.join(c.tmp, "no-ss-bin")
    os.mkdir(d)
    for top in os.environ["PATH"].split(":"):
        try:
            names = os.listdir(top)
        except OSError:
            continue
        for n in names:
            if n != "ss" and not os.path.lexists(os.path.join(d, n)):
                os.symlink(os.path.join(top, n), os.path.join(d, n))
    return c.fake + ":" + d


def test_system_needs_root():
    c = Checkout(systemd=True, pid1=True)
    uid = None
    if os.geteuid() == 0:
        c.give_to(NOBODY)
        uid = NOBODY
    for args in (["--system"], ["--system", "--no-build", "--force"], ["--uninstall", "--system"]):
        rc, out = c.run(*args, uid=uid)
        tap.ok(rc == 1 and "needs root; nothing was changed" in out and
               "sudo %s/install.sh %s" % (c.co, " ".join(args)) in out,
               "%s as %s: refused, saying it needs root and how to run it"
               % (" ".join(args), "nobody" if uid else "a user"), out)
    tap.eq((c.calls(), c.root_tree(), c.home_tree()), ([], {}, {}),
           "refused before anything: nothing built or asked of systemctl, nothing written")
    rc, out = c.run("--help", uid=uid)
    tap.ok(rc == 0 and "sudo ./install.sh --system" in out and "--uninstall --system" in out
           and "/etc/tt-device-queue/env" in out, "--help tells of --system, to anyone", out)


def test_system_install_with_a_fake_root():
    if not can_be_root():
        return skip("--system needs root, and `unshare -r` is not allowed here")
    c = Checkout(systemd=True, pid1=True)
    os.makedirs(c.r("/etc/tt-device-queue"))
    with open(c.r(SYS_ENV), "w") as f:
        f.write("TT_DEVICE_STOP_GRACE_SEC=20\n")
    rc, out = c.run("--system", as_root=True)
    tap.eq(rc, 0, "--system as root succeeds")
    tap.eq(c.calls("make"), ["make %s " % c.co, "make %s unit-test" % c.co],
           "it builds and runs the unit tests, as a personal install does")
    with open(BINARY, "rb") as f:
        exe_bytes = f.read()
    skill = subprocess.run([BINARY, "skill"], capture_output=True, check=True).stdout
    for path, want, mode, what in (
            (SYS_EXE, exe_bytes, 0o755, "the executable"),
            (SYS_MAN, open(os.path.join(ROOT, "tt-device-queue.1"), "rb").read(), 0o644,
             "the man page"),
            (SYS_COMP, open(os.path.join(ROOT, "completions", "tt-device-queue.bash"),
                            "rb").read(), 0o644, "the bash completion"),
            (SYS_SKILL, skill, 0o644, "the agent skill"),
            (SYS_PROLOG, open(os.path.join(ROOT, "slurm", "prolog"), "rb").read(), 0o755,
             "the Slurm Prolog"),
            (SYS_EPILOG, open(os.path.join(ROOT, "slurm", "epilog"), "rb").read(), 0o755,
             "the Slurm Epilog")):
        p = c.r(path)
        tap.ok(os.path.isfile(p) and not os.path.islink(p) and open(p, "rb").read() == want
               and stat.S_IMODE(os.stat(p).st_mode) == mode,
               "%s: a copy of %s, mode %o" % (path, what, mode), out)
    tap.eq(c.home_tree(), {}, "nothing under HOME: no CLI link, no skill folders")
    tap.ok("Prolog=%s Epilog=%s PrologFlags=Alloc" % (SYS_PROLOG, SYS_EPILOG) in out,
           "it prints the slurm.conf lines that use the Prolog and Epilog", out)
    tap.ok("ln -sf %s" % SYS_SKILL in out and "~/.agents/skills" in out,
           "it prints how a user links the skill into ~/.agents/skills", out)
    tap.eq(stat.S_IMODE(os.stat(c.r(SYS_LOG)).st_mode), 0o700, "%s made, private" % SYS_LOG)
    unit = open(c.r(SYS_UNIT)).read()
    keys = unit_keys(c.r(SYS_UNIT))
    tap.ok(unit.startswith("# Written by tt-device-queue's install.sh (%s/install.sh --system)"
                           % c.co), "the unit carries the marker comment", unit)
    tap.eq({k: keys.get(k) for k in ("Type", "ExecStart", "KillMode", "Restart", "WatchdogSec",
                                     "StateDirectory", "Environment", "EnvironmentFile",
                                     "WantedBy", "TimeoutStopSec", "User")},
           {"Type": "notify", "ExecStart": "/usr/local/bin/tt-device-queue serve",
            "KillMode": "control-group", "Restart": "on-failure", "WatchdogSec": "60",
            "StateDirectory": "tt-device-queue",
            "Environment": "TT_DEVICE_LOG_DIR=/var/lib/tt-device-queue",
            "EnvironmentFile": "-/etc/tt-device-queue/env", "WantedBy": "multi-user.target",
            "TimeoutStopSec": "36", "User": None},
           "the system unit: notify, the host's paths, run as root, stop timeout from the "
           "host's env file (grace 20 s)")
    verify = shutil.which("systemd-analyze")
    if verify:
        # the executable at the fake root's path, so that verify finds it
        vdir = os.path.join(c.tmp, "verify")
        os.mkdir(vdir)
        with open(os.path.join(vdir, "tt-device-queue.service"), "w") as f:
            f.write(unit.replace("ExecStart=" + SYS_EXE, "ExecStart=" + c.r(SYS_EXE)))
        p = subprocess.run([verify, "verify", os.path.join(vdir, "tt-device-queue.service")],
                           capture_output=True, text=True)
        msgs = [ln for ln in (p.stdout + p.stderr).splitlines()
                if "tt-device-queue" in ln and "Command 'man " not in ln]
        tap.eq(msgs, [], "systemd-analyze verify accepts the system unit")
    tap.eq(c.calls("systemctl"), [
        "systemctl show-environment", "systemctl daemon-reload",
        "systemctl enable --quiet tt-device-queue.service",
        "systemctl restart tt-device-queue.service",
        "systemctl --no-pager --lines=0 status tt-device-queue.service"],
        "the system manager: daemon-reload, enable, restart (no --user)")
    tap.ok(os.path.islink(c.r(SYS_WANTS)), "enabled")
    before = c.root_tree()
    c.forget_calls()
    rc, out = c.run("--system", "--no-build", as_root=True)
    tap.ok(rc == 0 and c.root_tree() == before, "a second run leaves the same files", out)
    tap.ok("systemctl restart tt-device-queue.service" in c.calls("systemctl"),
           "and restarts the service again")
    os.chmod(c.r(SYS_ENV), 0o666)
    rc, out = c.run("--system", "--no-build", as_root=True)
    tap.ok(rc == 0 and "warning: root runs the commands %s names" % SYS_ENV in out
           and "chmod go-w" in out, "an env file others may write: a warning", out)
    os.chmod(c.r(SYS_ENV), 0o644)

    with open(c.r(SYS_LOG + "/jobs.sqlite3"), "w") as f:
        f.write("precious")
    c.forget_calls()
    rc, out = c.run("--uninstall", "--system", as_root=True)
    tap.eq(rc, 0, "--uninstall --system succeeds")
    calls = c.calls("systemctl")
    tap.ok("systemctl disable --now tt-device-queue.service" in calls
           and calls[-1] == "systemctl daemon-reload", "stops and disables it, then "
           "daemon-reload", calls)
    tap.eq([p for p in (SYS_UNIT, SYS_WANTS, SYS_EXE, SYS_MAN, SYS_COMP, SYS_SKILL,
                        os.path.dirname(SYS_SKILL), SYS_PROLOG, SYS_EPILOG,
                        os.path.dirname(os.path.dirname(SYS_PROLOG)))
            if os.path.lexists(c.r(p))], [],
           "the unit, its link, the executable, man page, completion, skill and Slurm "
           "scripts are gone")
    tap.ok(open(c.r(SYS_LOG + "/jobs.sqlite3")).read() == "precious"
           and open(c.r(SYS_ENV)).read() == "TT_DEVICE_STOP_GRACE_SEC=20\n"
           and "kept %s" % c.r(SYS_LOG) in out and c.r(SYS_ENV) in out,
           "the job data and the env file are kept, and it says so", out)
    rc, out = c.run("--uninstall", "--system", as_root=True)
    tap.ok(rc == 0 and "nothing removed" in out, "a second --uninstall --system: a no-op", out)


def test_system_without_systemd_as_pid1():
    if not can_be_root():
        return skip("--system needs root, and `unshare -r` is not allowed here")
    c = Checkout(systemd=True, pid1=False)
    rc, out = c.run("--system", "--no-build", as_root=True)
    tap.eq(rc, 0, "--system where systemd is not PID 1 succeeds")
    tap.ok("systemd is not running as PID 1" in out and "as root" in out,
           "it says systemd is not PID 1 here", out)
    tap.ok("TT_DEVICE_LOG_DIR=%s setsid -f %s serve" % (SYS_LOG, SYS_EXE) in out
           and "done <%s" % SYS_ENV in out,
           "and prints the command that starts the daemon by hand, with the host's paths", out)
    tap.ok(os.path.isfile(c.r(SYS_EXE)) and os.path.isfile(c.r(SYS_SKILL))
           and not os.path.lexists(c.r(SYS_UNIT)),
           "everything is installed but the unit", out)
    tap.eq(c.calls("systemctl"), ["systemctl show-environment"],
           "systemctl only asked whether the system manager answers")
    rc, out = c.run("--uninstall", "--system", as_root=True)
    tap.ok(rc == 0 and not os.path.lexists(c.r(SYS_EXE)), "--uninstall --system removes it",
           out)


def test_system_build_runs_as_the_checkout_owner():
    if os.geteuid() != 0:
        return skip("needs root (a checkout of another user)")
    c = Checkout(pid1=True)
    c.give_to(NOBODY)
    rc, out = c.run("--system")
    tap.ok(rc == 0 and c.make_uid_calls() == [NOBODY, NOBODY],
           "sudo in another user's checkout: make and the tests run as its owner, so no "
           "file of root's is left in it", (out, c.make_uid_calls()))
    tap.eq(os.stat(c.r(SYS_EXE)).st_uid, 0, "the installed copy is root's")


def test_personal_refused_beside_the_system_unit():
    if not can_be_root():
        return skip("--system needs root, and `unshare -r` is not allowed here")
    c = Checkout(pid1=True)
    rc, out = c.run("--system", "--no-build", as_root=True)
    tap.ok(rc == 0 and os.path.islink(c.r(SYS_WANTS)), "the host's service installed and "
           "enabled (in the fake root)", out)
    c.forget_calls()
    rc, out = c.run()
    tap.ok(rc == 1 and "the host's service is installed and enabled (%s)" % SYS_UNIT in out
           and "sudo ./install.sh --uninstall --system" in out and "%s status" % SYS_EXE in out
           and "--force" in out,
           "a personal install is refused, naming the unit, the host's queue to use, how to "
           "remove it, and --force", out)
    tap.eq((c.calls(), c.home_tree()), ([], {}), "refused before building or installing")
    rc, out = c.run("--no-build", "--force")
    tap.ok(rc == 0 and "--force: installing although" in out and os.path.islink(c.cli),
           "--force installs it anyway", out)
    c.run("--uninstall")
    os.unlink(c.r(SYS_WANTS))  # `systemctl disable`
    rc, out = c.run("--no-build")
    tap.ok(rc == 0 and os.path.islink(c.cli), "the unit installed but disabled: no refusal",
           out)


def test_system_refused_beside_another_users_claim():
    if os.geteuid() != 0:
        return skip("needs root (a daemon of another user)")
    d = Daemon(ids="0")
    dev = stand_in_node(d)
    d.start(uid=NOBODY)
    c = Checkout(pid1=True)
    rc, out = c.run("--system", env={"TT_DEVICE_DEV_DIR": dev})
    tap.ok(rc == 1 and "card 0 (%s/0): pid %d, user nobody, command line '%s serve'"
           % (dev, d.proc.pid, d.path("tt-device-queue")) in out,
           "--system beside nobody's serve claiming card 0: refused, naming the card, its "
           "pid, user and command line", out)
    tap.ok("./install.sh --uninstall" in out and "kill PID" in out and "--force" in out,
           "and saying how to stop it, or --force", out)
    tap.eq((c.calls(), c.root_tree()), ([], {}), "refused before building or installing")
    rc, out = c.run("--system", env={"TT_DEVICE_DEV_DIR": dev, "PATH": path_without_ss(c)})
    tap.ok(rc == 1 and "pid %d, user nobody" % d.proc.pid in out and "no `ss`" in out,
           "without ss: nobody's running serve is found in /proc", out)
    os.makedirs(c.r("/etc/tt-device-queue"))
    with open(c.r(SYS_ENV), "w") as f:
        f.write("TT_DEVICE_DEV_DIR='%s'\nTT_DEVICE_IDS=0\n" % dev)
    rc, out = c.run("--system", "--no-build", env={"TT_DEVICE_DEV_DIR": ""})
    tap.ok(rc == 1 and "card 0 (%s/0)" % dev in out,
           "the cards are those of the host's env file", out)
    rc, out = c.run("--system", "--no-build", env={"TT_DEVICE_DEV_DIR": dev,
                                                   "TT_DEVICE_IDS": "1"})
    tap.ok(rc == 0 and os.path.isfile(c.r(SYS_EXE)), "other cards (TT_DEVICE_IDS=1, no node "
           "claimed): installed", out)
    c.run("--uninstall", "--system")
    rc, out = c.run("--system", "--no-build", "--force", env={"TT_DEVICE_DEV_DIR": dev})
    tap.ok(rc == 0 and "--force: installing although" in out and "pid %d" % d.proc.pid in out
           and os.path.isfile(c.r(SYS_UNIT)), "--force installs anyway, naming it", out)
    tap.ok(d.alive(), "nobody's daemon was left alone")
    d.cleanup()


def test_system_refused_beside_a_claimed_character_device():
    """A real card's claim is named by its node's major:minor, whatever path names it."""
    if os.geteuid() != 0:
        return skip("needs root (mknod, a daemon of another user)")
    d = Daemon(ids="0")
    dev, other = d.path("dev"), d.path("other-dev")
    minor = 1000000 + os.getpid() % 40000  # major 1 (mem) has no such minor: no real device
    try:
        for folder in (dev, other):
            os.mkdir(folder)
            os.mknod(os.path.join(folder, "0"), stat.S_IFCHR | 0o600, os.makedev(1, minor))
    except PermissionError as e:
        return skip("mknod refused here (%s)" % e)
    d.env["TT_DEVICE_DEV_DIR"] = dev
    d.start(uid=NOBODY)
    c = Checkout(pid1=True)
    rc, out = c.run("--system", "--no-build", env={"TT_DEVICE_DEV_DIR": other})
    tap.ok(rc == 1 and "card 0 (%s/0): pid %d, user nobody" % (other, d.proc.pid) in out,
           "--system beside nobody's serve on a character device: refused, though its node "
           "has another path", out)
    d.cleanup()


def test_personal_refused_beside_a_root_claim():
    if os.geteuid() != 0:
        return skip("needs root (a daemon of root, an install of another user)")
    d = Daemon(ids="0")
    dev = stand_in_node(d)
    os.chmod(d.tmp, 0o755)  # nobody may look at the node
    d.start()
    c = Checkout()
    c.give_to(NOBODY)
    rc, out = c.run(env={"TT_DEVICE_DEV_DIR": dev}, uid=NOBODY)
    tap.ok(rc == 1 and "card 0 (%s/0): claimed by a process of another user" % dev in out
           and "pid %d, user root, command line '%s serve'" % (d.proc.pid, BINARY) in out,
           "a personal install by nobody beside root's serve claiming card 0: refused, naming "
           "the card and root's daemons (ss shows nobody whose it is)", out)
    tap.ok("sudo ./install.sh --uninstall --system" in out and "%s status" % SYS_EXE in out
           and "--force" in out,
           "saying to use the host's queue or remove it first, or --force", out)
    tap.eq((c.calls(), c.home_tree()), ([], {}), "refused before building or installing")
    rc, out = c.run("--no-build", "--force", env={"TT_DEVICE_DEV_DIR": dev}, uid=NOBODY)
    tap.ok(rc == 0 and os.path.islink(c.cli), "--force installs anyway", out)
    c2 = Checkout(pid1=True)
    rc, out = c2.run("--no-build", env={"TT_DEVICE_DEV_DIR": dev})
    tap.ok(rc == 0 and os.path.islink(c2.cli),
           "root's personal install beside root's own daemon: not refused", out)
    rc, out = c2.run("--system", "--no-build", env={"TT_DEVICE_DEV_DIR": dev})
    tap.ok(rc == 0 and os.path.isfile(c2.r(SYS_UNIT)),
           "nor --system beside a daemon of root's (the host's own, restarted)", out)
    d.cleanup()


def cleanup_checkouts():
    for c in Checkout.live:
        c.cleanup()
    Checkout.live = []


run_tests(test_fallback_install_idempotent_and_manual_start, test_copy_mode_and_no_test,
          test_full_test_and_what_unit_test_runs, test_agent_skill_installed_and_removed,
          test_failed_tests_install_nothing, test_refuses_while_busy,
          test_refuses_while_the_python_service_is_busy, test_uninstall_keeps_logs,
          test_systemd_unit_with_fake_systemctl, test_system_needs_root,
          test_system_install_with_a_fake_root, test_system_without_systemd_as_pid1,
          test_system_build_runs_as_the_checkout_owner,
          test_personal_refused_beside_the_system_unit,
          test_system_refused_beside_another_users_claim,
          test_system_refused_beside_a_claimed_character_device,
          test_personal_refused_beside_a_root_claim, test_completion, test_docs_and_lint,
          cleanup_checkouts)

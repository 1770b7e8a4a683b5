/*
 * test_proc.c - proc.c against real processes: spawning, groups, signals, environment, capped
 * files and the guardian. Every wait has a deadline; nothing sleeps a fixed time where a
 * condition can be awaited (short naps only between checks of a condition). The test is a
 * child subreaper, so orphaned job descendants come to it and are reaped, never left zombies.
 * Root (as in CI) also checks the user behind a connection made by another uid.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"
#include "tap.h"

#define NO_EXIT INT_MIN /* wait_code: the process did not end before the deadline */

static char tmpdir[] = "/tmp/test_proc.XXXXXX";

/* ------------------------------------------------------------------------------ helpers */

static long long
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
nap_ms(int ms)
{
	struct timespec ts = {0, (long)ms * 1000000L};

	nanosleep(&ts, NULL);
}

/* Read fd (non-blocking) until EOF, until `stop` appears, or until the deadline. */
static char *
read_until(int fd, const char *stop, int timeout_ms)
{
	long long end = now_ms() + timeout_ms, left;
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	struct pollfd pfd;
	ssize_t r;

	buf[0] = '\0';
	while ((left = end - now_ms()) > 0 && !(stop && strstr(buf, stop))) {
		pfd.fd = fd;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, (int)left) <= 0)
			continue;
		if (len + 1 >= cap)
			buf = realloc(buf, cap *= 2);
		r = read(fd, buf + len, cap - len - 1);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			break;
		if (r > 0)
			len += (size_t)r;
		buf[len] = '\0';
	}
	return buf;
}

/* The job exit code of pid once it ends, or NO_EXIT after timeout_ms. */
static int
wait_code(pid_t pid, int timeout_ms)
{
	long long end = now_ms() + timeout_ms;
	int st;
	pid_t r;

	for (;;) {
		r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return proc_exit_code(st);
		if ((r == -1 && errno != EINTR) || now_ms() >= end)
			return NO_EXIT;
		nap_ms(2);
	}
}

/* Gone: no /proc entry, or a zombie (then reaped, if it is ours). */
static int
gone(pid_t pid)
{
	char path[64], buf[512], *rp;
	ssize_t n;
	int fd, st;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd == -1)
		return 1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 1;
	buf[n] = '\0';
	rp = strrchr(buf, ')');
	if (!rp || rp[1] == '\0' || rp[2] == 'Z' || rp[2] == 'X') {
		waitpid(pid, &st, WNOHANG);
		return 1;
	}
	return 0;
}

/* Wait until pid is gone; 1 if it went before the deadline (absolute, ms). */
static int
wait_gone(pid_t pid, long long deadline)
{
	while (!gone(pid)) {
		if (now_ms() >= deadline)
			return 0;
		nap_ms(5);
	}
	return 1;
}

static pid_t
spawn(char *const *argv, char *const *envp, const char *cwd, int oom, int *fd)
{
	struct proc_opts o = {.argv = argv, .envp = envp, .cwd = cwd, .oom_score_adj = oom};
	char err[256];
	pid_t pid = proc_spawn(&o, fd, err, sizeof err);

	if (pid < 0)
		printf("# spawn %s: %s\n", argv[0], err);
	return pid;
}

/* Run a job to its end: *out gets its output (free it), the return is its exit code. */
static int
run(char *const *argv, char *const *envp, const char *cwd, char **out)
{
	static char *const empty[] = {NULL};
	int fd, code;
	pid_t pid = spawn(argv, envp ? envp : empty, cwd, 0, &fd);

	if (pid < 0) {
		*out = strdup("");
		return NO_EXIT;
	}
	*out = read_until(fd, NULL, 20000);
	close(fd);
	code = wait_code(pid, 20000);
	if (code == NO_EXIT) {
		proc_kill_group(pid, SIGKILL);
		wait_code(pid, 5000);
	}
	return code;
}

/* ------------------------------------------------------------------------------ spawning */

static void
test_basic(void)
{
	char *const argv[] = {"/bin/bash", "-lc", "echo out; echo err >&2; exit 3", NULL};
	char home[128];
	char *const envp[] = {"PATH=/usr/bin:/bin", home, NULL};
	char *out;
	int fd, code;
	pid_t pid;

	snprintf(home, sizeof home, "HOME=%s", tmpdir); /* no ~/.profile to talk */
	pid = spawn(argv, envp, NULL, 0, &fd);
	ok(pid > 0, "spawn bash -lc");
	ok(fcntl(fd, F_GETFL) & O_NONBLOCK, "the read end is non-blocking");
	ok(fcntl(fd, F_GETFD) & FD_CLOEXEC, "the read end is close-on-exec");
	out = read_until(fd, NULL, 10000);
	close(fd);
	is_str(out, "out\nerr\n", "stdout and stderr into one pipe");
	is_int(wait_code(pid, 10000), 3, "exit status 3");
	free(out);
	code = run((char *const[]){"/bin/sh", "-c", "exit 0", NULL}, NULL, NULL, &out);
	is_int(code, 0, "exit status 0");
	free(out);
}

static void
test_signals_death(void)
{
	char *const argv[] = {"/bin/sleep", "30", NULL};
	char *out;
	int fd, code;
	pid_t pid = spawn(argv, NULL, NULL, 0, &fd);

	/* At once: proc_spawn returned after the exec, so the child leads its group. */
	proc_kill_group(pid, SIGTERM);
	is_int(wait_code(pid, 5000), -15, "SIGTERM right after spawn: exit code -15");
	close(fd);
	code = run((char *const[]){"/bin/sh", "-c", "kill -KILL $$", NULL}, NULL, NULL, &out);
	is_int(code, -9, "a shell killing itself with SIGKILL: -9");
	free(out);
	is_int(proc_exit_code(0), 0, "proc_exit_code(0)");
	is_int(proc_exit_code(W_EXITCODE(255, 0)), 255, "proc_exit_code(exit 255)");
	is_int(proc_exit_code(W_EXITCODE(0, SIGSEGV)), -SIGSEGV, "proc_exit_code(SIGSEGV)");
}

static void
test_session(void)
{
	char *const argv[] = {"/bin/sh", "-c", "echo ready; exec /bin/sleep 30", NULL};
	char *out;
	int fd;
	pid_t pid = spawn(argv, NULL, NULL, 0, &fd);

	out = read_until(fd, "ready\n", 10000);
	is_str(out, "ready\n", "job started");
	is_int(getpgid(pid), pid, "the job is its own process group");
	is_int(getsid(pid), pid, "the job is its own session");
	ok(getsid(pid) != getsid(0), "not the test's session");
	proc_kill_group(pid, SIGKILL);
	is_int(wait_code(pid, 5000), -9, "killed group: -9");
	close(fd);
	free(out);
}

static void
test_cwd(void)
{
	char *const pwd[] = {"/bin/pwd", NULL};
	char *out, want[128];
	int code;

	code = run(pwd, NULL, tmpdir, &out);
	snprintf(want, sizeof want, "%s\n", tmpdir);
	is_str(out, want, "cwd applied");
	is_int(code, 0, "pwd exits 0");
	free(out);
	code = run(pwd, NULL, "", &out);
	if (getcwd(want, sizeof want - 1))
		strcat(want, "\n");
	is_str(out, want, "empty cwd keeps the daemon's");
	free(out);
	code = run(pwd, NULL, "/nonexistent-ttq/dir", &out);
	is_int(code, 127, "missing cwd: 127");
	is_str(out,
	       "[tt-device-queue] cannot change to directory /nonexistent-ttq/dir: "
	       "No such file or directory\n",
	       "missing cwd: marker line");
	free(out);
}

static void
test_exec_failure(void)
{
	char *const missing[] = {"/nonexistent-ttq/prog", "arg", NULL};
	char path[256], *out;
	char *const noexec[] = {path, NULL};
	int code, fd;

	code = run(missing, NULL, NULL, &out);
	is_int(code, 127, "missing program: 127");
	is_str(out,
	       "[tt-device-queue] cannot run /nonexistent-ttq/prog: No such file or directory\n",
	       "missing program: marker line");
	free(out);
	snprintf(path, sizeof path, "%s/not-executable", tmpdir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	close(fd);
	code = run(noexec, NULL, NULL, &out);
	is_int(code, 127, "non-executable file: 127");
	ok(strstr(out, PROC_MARKER " cannot run ") == out && strstr(out, "Permission denied\n"),
	   "non-executable file: marker names the error");
	free(out);
}

/* The spawner learns why a child could not start, as the marker line says it (no marker). */
static void
test_exec_failure_reason(void)
{
	char *const missing[] = {"/nonexistent-ttq/prog", NULL};
	char *const t[] = {"/bin/true", NULL};
	char *const empty[] = {NULL};
	struct proc_opts o = {.argv = missing, .envp = empty};
	char err[256];
	int fd;
	pid_t pid;

	snprintf(err, sizeof err, "stale");
	pid = proc_spawn(&o, &fd, err, sizeof err);
	ok(pid > 0, "a child that cannot exec still has a pid");
	is_str(err, "cannot run /nonexistent-ttq/prog: No such file or directory",
	       "err says why it could not exec");
	close(fd);
	is_int(wait_code(pid, 20000), 127, "and it exited 127");
	o.argv = t;
	o.cwd = "/nonexistent-ttq/dir";
	pid = proc_spawn(&o, &fd, err, sizeof err);
	is_str(err, "cannot change to directory /nonexistent-ttq/dir: No such file or directory",
	       "err says why it could not chdir");
	close(fd);
	wait_code(pid, 20000);
	o.cwd = NULL;
	snprintf(err, sizeof err, "stale");
	pid = proc_spawn(&o, &fd, err, sizeof err);
	is_str(err, "", "err is empty when the child exec'd");
	close(fd);
	is_int(wait_code(pid, 20000), 0, "/bin/true exits 0");
	o.argv = missing;
	pid = proc_spawn(&o, &fd, err, 8);
	is_str(err, "cannot ", "err is cut to its size");
	close(fd);
	wait_code(pid, 20000);
}

static void
test_env_passed(void)
{
	char *const argv[] = {"/usr/bin/env", NULL};
	char *const envp[] = {"A=1", "B=two words", "C=", NULL};
	char *out;
	int code = run(argv, envp, NULL, &out);

	is_int(code, 0, "env runs");
	is_str(out, "A=1\nB=two words\nC=\n", "the environment is exactly envp");
	free(out);
}

/* The job id a process was started under, as the daemon reads it to tell its strays. */
/*
 * A group is alive while a member is not a zombie. Here the shell leaves a zombie child behind
 * (sleep never waits for it), then the sleep itself is killed and left unreaped: the group
 * still exists for kill(2), yet nothing in it can hold a card.
 */
static void
test_group_alive(void)
{
	char *const argv[] = {"/bin/sh", "-c", "/bin/true & sleep 0.2; echo up; exec sleep 30",
			      NULL};
	char *out;
	int fd, up;
	siginfo_t si;
	pid_t pid = spawn(argv, NULL, NULL, 0, &fd);

	up = pid > 0 && strstr(out = read_until(fd, "up", 5000), "up") != NULL;
	if (pid > 0)
		free(out);
	if (!ok(up, "group alive: a group with a zombie and a sleeping member"))
		return;
	is_int(proc_group_alive(pid), 1, "group alive: a sleeping member counts");
	kill(pid, SIGKILL);
	memset(&si, 0, sizeof si);
	waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT); /* dead, not reaped: a zombie */
	ok(kill(-pid, 0) == 0, "group alive: kill(2) still finds the group (zombies)");
	is_int(proc_group_alive(pid), 0, "group alive: only zombies left: not alive");
	wait_code(pid, 5000);
	while (waitpid(-1, NULL, WNOHANG) > 0) /* the orphaned zombie came to us (subreaper) */
		;
	is_int(proc_group_alive(pid), 0, "group alive: an empty group");
	close(fd);
}

static void
test_oom_and_fds(void)
{
	char *const oom[] = {"/bin/cat", "/proc/self/oom_score_adj", NULL};
	char *const fds[] = {"/bin/ls", "/proc/self/fd", NULL};
	char *const in[] = {"/bin/readlink", "/proc/self/fd/0", NULL};
	char *out;
	int fd = -1, leak = open("/dev/null", O_RDONLY); /* deliberately not close-on-exec */
	pid_t pid = spawn(oom, (char *const[]){NULL}, NULL, 500, &fd);

	out = read_until(fd, NULL, 10000);
	close(fd);
	is_str(out, "500\n", "oom_score_adj written");
	is_int(wait_code(pid, 10000), 0, "cat exits 0");
	free(out);
	run(fds, NULL, NULL, &out);
	is_str(out, "0\n1\n2\n3\n", "the job holds only 0-2 (3 is ls's own), no inherited fd");
	free(out);
	run(in, NULL, NULL, &out);
	is_str(out, "/dev/null\n", "stdin is /dev/null");
	free(out);
	close(leak);
}

/* The child starts with default dispositions and an empty mask whatever the daemon had. */
static void
test_signal_reset(void)
{
	char *const argv[] = {"/bin/grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status", NULL};
	sigset_t set, old, now;
	char *out;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, &old);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	unsigned long long blk = ~0ULL, ign = ~0ULL;

	run(argv, NULL, NULL, &out);
	if (out)
		sscanf(out, "SigBlk:\t%llx\nSigIgn:\t%llx", &blk, &ign);
	/*
	 * glibc keeps signals 32 and 33 (its thread-cancel and setxid signals) to itself: sigaction
	 * refuses them, so a disposition inherited from an ancestor (make ignores them) stays.
	 */
	ign &= ~(3ULL << 31);
	ok(blk == 0 && ign == 0,
	   "child: nothing ignored, nothing blocked (parent ignores PIPE/TERM/HUP, blocks INT)");
	if (blk || ign)
		printf("#   got %s\n", out ? out : "(null)");
	free(out);
	sigprocmask(SIG_SETMASK, NULL, &now);
	ok(sigismember(&now, SIGINT) && sigismember(&now, SIGUSR1) && !sigismember(&now, SIGTERM),
	   "the parent's mask is restored after spawn");
	sigprocmask(SIG_SETMASK, &old, NULL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
}

static void
test_kill_group_grandchild(void)
{
	char *const argv[] = {"/bin/bash", "-c", "sleep 30 & echo $!; wait", NULL};
	char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
	char *out;
	int fd;
	pid_t pid = spawn(argv, envp, NULL, 0, &fd), bg;

	out = read_until(fd, "\n", 10000);
	bg = (pid_t)atoi(out);
	ok(bg > 1 && !gone(bg), "background sleep runs (pid %d)", (int)bg);
	proc_kill_group(pid, SIGKILL);
	is_int(wait_code(pid, 5000), -9, "the shell dies with the group");
	ok(wait_gone(bg, now_ms() + 2000), "the background grandchild is gone too");
	close(fd);
	free(out);
	proc_kill_group(0, SIGKILL); /* must be a no-op: kill(0) would hit the test itself */
	proc_kill_group(-1, SIGKILL);
	ok(1, "proc_kill_group(0 or -1) is refused");
}

/* ---------------------------------------------------------------------------- environment */

/* The entries of env joined with '|' (in a static buffer). */
static const char *
joined(char **env)
{
	static char buf[1024];
	size_t n = 0, i;

	buf[0] = '\0';
	for (i = 0; env && env[i]; i++)
		n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", i ? "|" : "", env[i]);
	return buf;
}

static void
check_pythonpath(const char *value, const char *want)
{
	char entry[128];
	char *const base[] = {"A=1", entry, NULL};
	char **env;

	snprintf(entry, sizeof entry, "PYTHONPATH=%s", value);
	env = proc_build_env(value ? base : (char *const[]){"A=1", NULL}, NULL, 0);
	is_str(joined(env), want, "PYTHONPATH %s%s%s", value ? "\"" : "", value ? value : "unset",
	       value ? "\"" : "");
	free(env);
}

/* A job's environment from its stored env object: its id and the instance entry win. */
static void
test_job_env(void)
{
	char *const base[] = {"PATH=/usr/bin", "TT_DEVICE_RESET_CMD=r", NULL};
	char want[512], *block;
	const char *mark = proc_instance_marker();
	char **env;

	env = proc_job_env(base, NULL, "{\"A\":\"x=y\",\"TT_DEVICE_JOB_ID\":\"forged\",\"U\":\"\\u00e9\"}",
			   "0123abcd", &block);
	snprintf(want, sizeof want, "PATH=/usr/bin|A=x=y|TT_DEVICE_JOB_ID=0123abcd|U=\xc3\xa9%s%s|"
		 "PYTHONPATH=.", strchr(mark, '=') ? "|" : "", strchr(mark, '=') ? mark : "");
	is_str(joined(env), want, "job env: members decoded, its own id and the marker win, "
	       "control settings scrubbed");
	ok(block != NULL, "the added strings are one block");
	free(env);
	free(block);
	env = proc_job_env(base, NULL, NULL, "77", &block);
	snprintf(want, sizeof want, "PATH=/usr/bin|TT_DEVICE_JOB_ID=77%s%s|PYTHONPATH=.",
		 strchr(mark, '=') ? "|" : "", strchr(mark, '=') ? mark : "");
	is_str(joined(env), want, "job env without an env object");
	free(env);
	free(block);
	env = proc_job_env(base, &(struct proc_user){.name = "ann", .home = "/h", .shell = "/bin/sh"},
			   "{\"SHELL\":\"/bin/zsh\"}", "77", &block);
	snprintf(want, sizeof want, "PATH=/usr/bin|HOME=/h|USER=ann|LOGNAME=ann|SHELL=/bin/zsh|"
		 "TT_DEVICE_JOB_ID=77%s%s|PYTHONPATH=.", strchr(mark, '=') ? "|" : "",
		 strchr(mark, '=') ? mark : "");
	is_str(joined(env), want, "job env of another user: its own variables, the env object wins");
	free(env);
	free(block);
	errno = 0;
	ok(proc_job_env(base, NULL, "[1]", "77", &block) == NULL && errno == EINVAL && !block,
	   "an env that is no object: NULL, EINVAL");
}

static void
test_build_env(void)
{
	char *const base[] = {"PATH=/usr/bin",
	                      "TT_DEVICE_RESET_CMD=r",
	                      "TT_DEVICE_DEEP_RESET_CMD=d",
	                      "TT_DEVICE_HEALTH_CHECK_CMD=h",
	                      "TT_DEVICE_HEALTH_CMD_TIMEOUT=60",
	                      "TT_DEVICE_RESET_RETRIES=1",
	                      "TT_DEVICE_IDS=0,1",
	                      "HOME=/root",
	                      "NOEQ",
	                      "HOME=/dup",
	                      NULL};
	char *const extra[] = {"HOME=/tmp", "NEW=1", "NOEQUALS", "NEW=2", "TT_DEVICE_PORT=9"};
	char **env;

	env = proc_build_env(base, extra, 5);
	is_str(joined(env),
	       "PATH=/usr/bin|TT_DEVICE_IDS=0,1|HOME=/tmp|NEW=2|TT_DEVICE_PORT=9|"
	       "PYTHONPATH=.",
	       "scrub, replace by name, skip entries without '=', add PYTHONPATH");
	free(env);
	env = proc_build_env(NULL, NULL, 0);
	is_str(joined(env), "PYTHONPATH=.", "empty base");
	free(env);
	check_pythonpath(NULL, "A=1|PYTHONPATH=.");
	check_pythonpath("", "A=1|PYTHONPATH=.");
	check_pythonpath("/opt/x", "A=1|PYTHONPATH=.:/opt/x");
	check_pythonpath(".:/opt/x", "A=1|PYTHONPATH=.:/opt/x");
	check_pythonpath("/a:.:/b", "A=1|PYTHONPATH=/a:.:/b");
	check_pythonpath("/a:.", "A=1|PYTHONPATH=/a:.");
	check_pythonpath("./a:/b", "A=1|PYTHONPATH=.:./a:/b");
	check_pythonpath("..", "A=1|PYTHONPATH=.:..");
	env = proc_build_env((char *const[]){"PYTHONPATH=.", NULL},
	                     (char *const[]){"PYTHONPATH=/x"}, 1);
	is_str(joined(env), "PYTHONPATH=.:/x", "PYTHONPATH from extra replaces, then gets '.'");
	free(env);
	test_job_env();
}

/* ----------------------------------------------------------------------- capped files */

static char *
slurp_file(const char *path, size_t *len)
{
	struct stat st;
	char *buf;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	fstat(fd, &st);
	buf = malloc((size_t)st.st_size + 1);
	*len = (size_t)read(fd, buf, (size_t)st.st_size);
	buf[*len] = '\0';
	close(fd);
	return buf;
}

/* A /proc file (its st_size is 0, so read to EOF). */
static char *
slurp_proc(const char *path, size_t *len)
{
	char *buf = calloc(1, 8192);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r;

	*len = 0;
	while (fd >= 0 && *len < 8191 && (r = read(fd, buf + *len, 8191 - *len)) > 0)
		*len += (size_t)r;
	if (fd >= 0)
		close(fd);
	return buf;
}

static const char *
cap_path(const char *name)
{
	static char path[256];

	snprintf(path, sizeof path, "%s/%s", tmpdir, name);
	unlink(path);
	return path;
}

/* N of a file's final "output truncated: N bytes dropped" line, or -1. */
static long long
dropped_in(const char *text)
{
	const char *p = strstr(text, PROC_MARKER " output truncated: ");

	if (!p || !strchr(p, '\n') || strchr(p, '\n')[1] != '\0')
		return -1;
	return atoll(p + strlen(PROC_MARKER " output truncated: "));
}

static void
test_capfile_small(void)
{
	struct capfile cf;
	const char *path = cap_path("small");
	char *text, big[1024];
	size_t len;

	is_int(capfile_open(&cf, AT_FDCWD, path, 1024), 0, "capfile_open");
	ok(fcntl(cf.fd, F_GETFD) & FD_CLOEXEC, "capfile is close-on-exec");
	capfile_output(&cf, "hello\n", 6);
	is_int(capfile_finish(&cf, NULL), 0, "finish");
	text = slurp_file(path, &len);
	is_str(text, "hello\n", "under cap: untouched");
	is_int(cf.size, 6, "size 6");
	is_int(cf.dropped, 0, "dropped 0");
	ok(cf.fd == -1, "finish closes");
	free(text);

	path = cap_path("exact");
	memset(big, 'a', sizeof big);
	capfile_open(&cf, AT_FDCWD, path, 1024);
	capfile_output(&cf, big, 1000);
	capfile_output(&cf, big, 24);
	capfile_finish(&cf, NULL);
	text = slurp_file(path, &len);
	ok(len == 1024 && memcmp(text, big, 1024) == 0 && cf.dropped == 0,
	   "exactly at cap: untouched, nothing dropped");
	free(text);

	errno = 0;
}

/* An existing file continues from its size and keeps the cap (a restarted reset's log). */
static void
test_capfile_reopen(void)
{
	struct capfile cf;
	const char *path = cap_path("reopen");
	char big[1100], *text;
	size_t len;
	int fd;

	fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	is_int(write(fd, "early\n", 6), 6, "six bytes before the open");
	close(fd);
	is_int(capfile_open(&cf, AT_FDCWD, path, 1024), 0, "capfile_open of an existing file");
	is_int(cf.size, 6, "the size is the file's");
	memset(big, 'b', sizeof big);
	capfile_output(&cf, big, sizeof big);
	is_int(cf.dropped, 6 + (long long)sizeof big - 1024, "the cap counts the bytes already there");
	is_int(capfile_finish(&cf, NULL), 0, "finish");
	text = slurp_file(path, &len);
	ok(len <= 1024 && memcmp(text, "early\nbbb", 9) == 0, "the file kept its bytes, then the new");
	free(text);
}

static void
test_capfile_over(void)
{
	struct capfile cf;
	const char *path = cap_path("over");
	char chunk[100], *text;
	size_t len, stored;
	int i;

	memset(chunk, 'a', sizeof chunk);
	capfile_open(&cf, AT_FDCWD, path, 1024);
	for (i = 0; i < 30; i++)
		capfile_output(&cf, chunk, sizeof chunk);
	is_int(cf.size, 1024, "output stops at the cap");
	is_int(cf.dropped, 3000 - 1024, "the rest is counted");
	capfile_finish(&cf, NULL);
	text = slurp_file(path, &len);
	ok(len <= 1024, "over cap: file %zu <= cap", len);
	is_int(dropped_in(text), cf.dropped, "the last line gives the final dropped count");
	stored = strspn(text, "a");
	ok(text[stored] == '\n' && text[stored + 1] == '[', "the marker starts on its own line");
	is_int(cf.dropped, 3000 - (long long)stored, "dropped = written - stored");
	is_int(cf.size, (long long)len, "size matches the file");
	free(text);
}

/* 1 when text[0..n) is well-formed UTF-8 (no overlong forms needed for this test). */
static int
utf8_whole(const unsigned char *t, size_t n)
{
	size_t i = 0, k, need;

	while (i < n) {
		need = t[i] < 0x80 ? 1 : (t[i] & 0xE0) == 0xC0 ? 2 : (t[i] & 0xF0) == 0xE0 ? 3 :
		       (t[i] & 0xF8) == 0xF0 ? 4 : 0;
		if (need == 0 || i + need > n)
			return 0;
		for (k = 1; k < need; k++)
			if ((t[i + k] & 0xC0) != 0x80)
				return 0;
		i += need;
	}
	return 1;
}

/* Output the disk refuses (/dev/full: ENOSPC) is dropped with its reason, not blamed on the cap. */
static void
test_capfile_write_error(void)
{
	struct capfile cf;
	const char *path = cap_path("werr");
	char *text;
	size_t len;

	is_int(capfile_open(&cf, AT_FDCWD, "/dev/full", 4096), 0, "capfile_open of /dev/full");
	is_int(capfile_output(&cf, "hello\n", 6), -1, "a refused write fails");
	ok(cf.write_errno == ENOSPC && cf.dropped == 6, "ENOSPC kept, the bytes counted as dropped");
	capfile_finish(&cf, NULL);
	capfile_open(&cf, AT_FDCWD, path, 4096);
	capfile_output(&cf, "kept\n", 5);
	cf.dropped = 7; /* as after a refused write once the disk has room again */
	cf.write_errno = ENOSPC;
	capfile_finish(&cf, NULL);
	text = slurp_file(path, &len);
	is_str(text, "kept\n" PROC_MARKER " output truncated: 7 bytes dropped (writing failed: "
	             "No space left on device)\n", "the drop line names the write error, not the cap");
	free(text);
}

/* A cut made to fit the drop line backs off to a character boundary (a 3-byte "€" here). */
static void
test_capfile_cut_utf8(void)
{
	char euro[2 + 3 * 400], name[32], path[256], *text, *mark;
	size_t len, k;
	int shift, whole = 0;

	euro[0] = euro[1] = 'a';
	for (k = 0; k < 400; k++)
		memcpy(euro + 2 + 3 * k, "\xE2\x82\xAC", 3);
	for (shift = 0; shift < 3; shift++) { /* every cut offset modulo the character length */
		struct capfile cf;

		snprintf(name, sizeof name, "utf8-%d", shift);
		snprintf(path, sizeof path, "%s", cap_path(name));
		capfile_open(&cf, AT_FDCWD, path, 1024);
		capfile_output(&cf, euro + 2 - shift, sizeof euro - 2 + (size_t)shift);
		capfile_finish(&cf, NULL);
		text = slurp_file(path, &len);
		mark = strstr(text, "\n" PROC_MARKER " output truncated");
		whole += mark != NULL && utf8_whole((unsigned char *)text, (size_t)(mark - text));
		free(text);
	}
	is_int(whole, 3, "the stored head ends on a whole UTF-8 character before the marker");
}

static void
test_capfile_trailer(void)
{
	static const char trailer[] = PROC_MARKER " timed out after 5 s\n";
	struct capfile cf;
	const char *path = cap_path("trailer");
	char big[1024], *text, *t;
	size_t len, stored;

	capfile_open(&cf, AT_FDCWD, path, 1024);
	capfile_output(&cf, "x\n", 2);
	capfile_finish(&cf, trailer);
	text = slurp_file(path, &len);
	is_str(text, "x\n" PROC_MARKER " timed out after 5 s\n", "trailer appended when it fits");
	free(text);

	path = cap_path("trailer-full");
	memset(big, 'a', sizeof big);
	capfile_open(&cf, AT_FDCWD, path, 1024);
	capfile_output(&cf, big, sizeof big);
	is_int(cf.dropped, 0, "full, nothing dropped yet");
	capfile_finish(&cf, trailer);
	text = slurp_file(path, &len);
	stored = strspn(text, "a");
	t = strstr(text, trailer);
	ok(len <= 1024, "trailer when full: file %zu <= cap", len);
	ok(t && t == text + stored + 1 && strstr(t + sizeof trailer - 1, "output truncated"),
	   "job bytes, trailer, then the truncation line");
	is_int(cf.dropped, 1024 - (long long)stored, "the cut tail is counted as dropped");
	is_int(dropped_in(text), cf.dropped, "and the last line says so");
	free(text);
}

static void
test_capfile_marker(void)
{
	struct capfile cf;
	const char *path = cap_path("marker");
	char big[3000], *text;
	long long size, dropped;
	size_t len;

	capfile_open(&cf, AT_FDCWD, path, 2048);
	capfile_marker(&cf, "Repeat %d/%d", 1, 5);
	capfile_output(&cf, "partial", 7);
	capfile_marker(&cf, "Repeat %d/%d", 2, 5);
	text = slurp_file(path, &len);
	is_str(text, PROC_MARKER " Repeat 1/5\npartial\n" PROC_MARKER " Repeat 2/5\n",
	       "markers start on their own line");
	free(text);
	size = cf.size;
	memset(big, 'm', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	capfile_marker(&cf, "%s", big);
	text = slurp_file(path, &len);
	ok(cf.size > size && cf.size - size <= 1024 && text[len - 1] == '\n',
	   "a long marker is cut and still ends in a newline (%lld bytes)", cf.size - size);
	free(text);
	size = cf.size;
	capfile_output(&cf, big, sizeof big);
	is_int(cf.dropped, (long long)sizeof big - (2048 - size), "output beyond the cap dropped");
	size = cf.size;
	dropped = cf.dropped;
	capfile_marker(&cf, "Repeat %d/%d", 3, 5);
	is_int(cf.size, size, "marker skipped when full");
	is_int(cf.dropped, dropped, "a skipped marker is not counted as dropped");
	capfile_finish(&cf, NULL);
	ok(cf.size <= 2048, "finished under cap");

	path = cap_path("append");
	capfile_open(&cf, AT_FDCWD, path, 1024);
	capfile_output(&cf, "old\n", 4);
	capfile_finish(&cf, NULL);
	capfile_open(&cf, AT_FDCWD, path, 1024);
	is_int(cf.size, 4, "reopen: size from the existing file");
	capfile_output(&cf, "new\n", 4);
	capfile_finish(&cf, NULL);
	text = slurp_file(path, &len);
	is_str(text, "old\nnew\n", "reopen appends");
	free(text);
}

/* Check one finished file; returns an empty string or what was wrong. */
static const char *
sweep_check(const char *text, size_t len, const char *content, size_t total, const char *trailer,
            const struct capfile *cf)
{
	const char *m = strstr(text, PROC_MARKER);
	size_t at = m ? (size_t)(m - text) : len, stored = at;

	if (len > 1024 || (long long)len != cf->size)
		return "size";
	if (cf->dropped == 0 && !trailer)
		return len == total && memcmp(text, content, total) == 0 ? "" : "untouched";
	if (cf->dropped == 0 && (at < total || at - total > 1 || memcmp(text, content, total) != 0))
		return "job bytes before the trailer";
	if (cf->dropped == 0)
		return strcmp(m, trailer) == 0 ? "" : "trailer appended";
	if (dropped_in(text) != cf->dropped)
		return "number";
	if (at > 0 && text[at - 1] == '\n' && content[at - 1] != '\n')
		stored = at - 1; /* the '\n' the daemon added before its marker */
	if (memcmp(text, content, stored) != 0)
		return "content";
	if (trailer && strncmp(m, trailer, strlen(trailer)) != 0)
		return "trailer";
	return stored + (size_t)cf->dropped == total ? "" : "accounting";
}

/* Every total around the cap, with and without a trailer, lines of varied length. */
static void
test_capfile_sweep(void)
{
	static const char trailer[] = PROC_MARKER " job stopped\n";
	char content[1200], *text;
	const char *path = cap_path("sweep"), *bad = "";
	struct capfile cf;
	size_t total, len, i;
	int t, cases = 0;

	for (i = 0; i < sizeof content; i++)
		content[i] = (i * 7919) % 53 == 0 ? '\n' : 'c';
	for (total = 900; total <= 1200 && !bad[0]; total++) {
		for (t = 0; t < 2 && !bad[0]; t++) {
			unlink(path);
			capfile_open(&cf, AT_FDCWD, path, 1024);
			for (i = 0; i < total; i += 13)
				capfile_output(&cf, content + i, total - i < 13 ? total - i : 13);
			capfile_finish(&cf, t ? trailer : NULL);
			text = slurp_file(path, &len);
			bad = sweep_check(text, len, content, total, t ? trailer : NULL, &cf);
			if (bad[0])
				printf("# total %zu trailer %d: %s\n", total, t, bad);
			free(text);
			cases++;
		}
	}
	is_str(bad, "", "sweep of %d cases: size <= cap, N == dropped, stored + dropped == total",
	       cases);
}

static void
test_capfile_drain(void)
{
	struct capfile cf;
	char path[256], *text;
	size_t len;
	ssize_t r;
	int p[2];

	ok(pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0, "pipe");
	capfile_open(&cf, AT_FDCWD, cap_path("drain"), 1024);
	errno = 0;
	r = capfile_drain(&cf, p[0], 4);
	ok(r == -1 && errno == EAGAIN, "empty pipe: -1 EAGAIN");
	is_int(write(p[1], "0123456789", 10), 10, "write 10 bytes");
	is_int(capfile_drain(&cf, p[0], 4), 4, "budget 4: 4 bytes");
	is_int(capfile_drain(&cf, p[0], 4), 4, "again 4");
	is_int(capfile_drain(&cf, p[0], 100), 2, "the rest, then EAGAIN: 2");
	close(p[1]);
	is_int(capfile_drain(&cf, p[0], 100), 0, "EOF: 0");
	close(p[0]);
	capfile_finish(&cf, NULL);
	snprintf(path, sizeof path, "%s/drain", tmpdir);
	text = slurp_file(path, &len);
	is_str(text, "0123456789", "drained bytes stored in order");
	free(text);
}

/* A real child writing 50 MB never blocks; the file stays under the cap, the rest is counted. */
static void
test_capfile_flood(void)
{
	char *const argv[] = {"/usr/bin/head", "-c", "50000000", "/dev/zero", NULL};
	const char *path = cap_path("flood");
	long long t0 = now_ms(), end = t0 + 20000;
	struct capfile cf;
	struct pollfd pfd;
	char *text;
	size_t len, stored;
	ssize_t r = 1;
	int fd;
	pid_t pid = spawn(argv, (char *const[]){NULL}, NULL, 0, &fd);

	capfile_open(&cf, AT_FDCWD, path, 4096);
	while (r != 0 && now_ms() < end) {
		pfd.fd = fd;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, (int)(end - now_ms())) > 0)
			r = capfile_drain(&cf, fd, 1 << 20);
	}
	close(fd);
	is_int(r, 0, "flood drained to EOF in %lld ms", now_ms() - t0);
	is_int(wait_code(pid, 10000), 0, "the writer exits 0");
	capfile_finish(&cf, NULL);
	text = slurp_file(path, &len);
	stored = 0;
	while (stored < len && text[stored] == '\0')
		stored++;
	ok(len <= 4096, "flood: file %zu <= cap", len);
	is_int(cf.dropped, 50000000 - (long long)stored, "dropped = 50000000 - stored");
	is_int(dropped_in(text + stored), cf.dropped, "the last line gives the count");
	free(text);
}

/* ---------------------------------------------------------------------------- guardian */

enum { R_GUARD, R_SHELL1, R_BG1, R_SHELL2, R_BG2, R_N };

/* In a fake daemon: start a `sleep 30 & echo $!; wait` job, return the background pid. */
static pid_t
fake_job(pid_t *shell)
{
	char *const argv[] = {"/bin/bash", "-c", "sleep 30 & echo $!; wait", NULL};
	char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
	struct proc_opts o = {.argv = argv, .envp = envp};
	char err[128], *out;
	pid_t bg;
	int fd;

	*shell = proc_spawn(&o, &fd, err, sizeof err);
	if (*shell < 0)
		return -1;
	out = read_until(fd, "\n", 10000);
	bg = (pid_t)atoi(out);
	free(out);
	return bg; /* fd stays open: the daemon is about to be killed */
}

/*
 * Fork a child that runs fn with the write end of a pipe (fn never returns) and read its
 * report of len bytes into buf, checking the length under `what`. The child's pid, or -1.
 */
static pid_t
fork_reporter(void (*fn)(int), void *buf, size_t len, const char *what)
{
	int p[2];
	pid_t child;

	if (pipe2(p, O_CLOEXEC) == -1)
		return -1;
	child = fork();
	if (child == 0) {
		close(p[0]);
		fn(p[1]);
		_exit(1);
	}
	close(p[1]);
	is_int(read(p[0], buf, len), (long long)len, what);
	close(p[0]);
	return child;
}

/* The fake daemon: guardian, two jobs, the second forgotten; reports pids, then waits. */
static _Noreturn void
fake_daemon(int report)
{
	pid_t r[R_N] = {0};

	r[R_GUARD] = proc_guardian_start(NULL, -1);
	r[R_BG1] = fake_job(&r[R_SHELL1]);
	r[R_BG2] = fake_job(&r[R_SHELL2]);
	proc_guardian_forget(r[R_SHELL2]);
	if (write(report, r, sizeof r) != (ssize_t)sizeof r)
		_exit(1);
	for (;;)
		pause();
}

/* Open descriptors of pid below our RLIMIT_NOFILE (valgrind keeps its own above it). */
static int
count_fds(pid_t pid)
{
	char path[64];
	struct dirent *e;
	struct rlimit rl;
	DIR *d;
	int n = 0;

	getrlimit(RLIMIT_NOFILE, &rl);
	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	d = opendir(path);
	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.' && (rlim_t)atol(e->d_name) < rl.rlim_cur;
	if (d)
		closedir(d);
	return n;
}

/* Does pid ignore SIGINT, SIGTERM and SIGHUP (its SigIgn mask in /proc)? */
static int
guardian_ignores(pid_t pid)
{
	unsigned long long ign = 0, want;
	char path[64], *text, *line;
	size_t len;

	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	text = slurp_proc(path, &len);
	line = strstr(text, "\nSigIgn:\t");
	if (line)
		ign = strtoull(line + 9, NULL, 16);
	free(text);
	want = 1ULL << (SIGINT - 1) | 1ULL << (SIGTERM - 1) | 1ULL << (SIGHUP - 1);
	return (ign & want) == want;
}

static void
test_guardian(void)
{
	pid_t r[R_N] = {0}, daemon;
	char path[64], *comm;
	long long deadline;
	size_t len;

	if ((daemon = fork_reporter(fake_daemon, r, sizeof r, "the fake daemon reports its jobs")) < 0)
		return;
	ok(r[R_GUARD] > 0 && r[R_BG1] > 0 && r[R_BG2] > 0, "guardian and both jobs started");
	snprintf(path, sizeof path, "/proc/%d/comm", (int)r[R_GUARD]);
	comm = slurp_proc(path, &len);
	is_str(comm, "ttq-guardian\n", "the guardian is named");
	free(comm);
	is_int(count_fds(r[R_GUARD]), 2, "the guardian holds only its pipe and stderr");
	ok(guardian_ignores(r[R_GUARD]), "the guardian ignores SIGINT, SIGTERM, SIGHUP");
	is_int(getsid(r[R_GUARD]), r[R_GUARD], "the guardian has its own session");
	kill(daemon, SIGKILL);
	is_int(wait_code(daemon, 5000), -9, "fake daemon SIGKILLed");
	deadline = now_ms() + 2000;
	ok(wait_gone(r[R_SHELL1], deadline), "registered job: the shell is gone within 2 s");
	ok(wait_gone(r[R_BG1], deadline),
	   "registered job: its background sleep is gone within 2 s");
	ok(wait_gone(r[R_SHELL2], deadline), "forgotten job: the shell still dies (PDEATHSIG)");
	ok(wait_gone(r[R_GUARD], deadline), "the guardian exits");
	ok(!gone(r[R_BG2]), "forgotten job: its background sleep was not killed by the guardian");
	kill(r[R_BG2], SIGKILL);
	ok(wait_gone(r[R_BG2], now_ms() + 2000), "cleanup");
}

/* In a child: the exit code of `exit 0` spawned while the guardian is dead. */
static _Noreturn void
spawn_past_dead_guardian(int report)
{
	char *const argv[] = {"/bin/sh", "-c", "exit 0", NULL};
	char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
	struct proc_opts o = {.argv = argv, .envp = envp};
	pid_t g = proc_guardian_start(NULL, -1), pid;
	int r = NO_EXIT, fd;
	char err[128];

	kill(g, SIGKILL);
	waitpid(g, NULL, 0);
	if ((pid = proc_spawn(&o, &fd, err, sizeof err)) > 0) {
		r = wait_code(pid, 5000);
		close(fd);
	}
	if (write(report, &r, sizeof r) != (ssize_t)sizeof r)
		_exit(1);
	_exit(0);
}

/*
 * A job's registration meets a dead guardian's pipe: the SIGPIPE it raises while the child's
 * signals are blocked must not stay pending and kill the shell once they are unblocked.
 */
static void
test_dead_guardian(void)
{
	int r = NO_EXIT;
	pid_t child = fork_reporter(spawn_past_dead_guardian, &r, sizeof r,
				    "the child reports its exit code");

	if (child < 0)
		return;
	is_int(r, 0, "a job started while the guardian is dead runs (no SIGPIPE death)");
	is_int(wait_code(child, 5000), 0, "the child exits");
}

static void
remove_tmpdir(void)
{
	char path[512];
	struct dirent *e;
	DIR *d = opendir(tmpdir);

	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(tmpdir);
}

/* proc_children lists our children; proc_kill_marked finds a process by its env entry. */
static void
test_children_and_marked(void)
{
	char *const argv[] = {"/bin/sleep", "30", NULL};
	char *const envp[] = {"TTQ_TEST_MARK=abc123", NULL};
	struct proc_opts o = {.argv = argv, .envp = envp};
	pid_t kids[64], pid;
	int fd, n, i, found = 0;
	char err[128];

	pid = proc_spawn(&o, &fd, err, sizeof err);
	ok(pid > 0, "spawn a marked sleep");
	n = proc_children(kids, 64);
	for (i = 0; i < n; i++)
		found |= kids[i] == pid;
	ok(n > 0 && found, "proc_children lists it");
	is_int(proc_kill_marked("TTQ_TEST_MARK=other"), 0, "another marker kills nothing");
	is_int(proc_kill_marked("TTQ_TEST_MARK=abc12"), 0, "a prefix of the entry is no match");
	/* The exec may not have happened yet: the child's environ is the daemon's until then. */
	for (i = 0; i < 200 && proc_kill_marked("TTQ_TEST_MARK=abc123") == 0; i++)
		usleep(10000);
	is_int(wait_code(pid, 5000), -9, "the marked process is killed with SIGKILL");
	close(fd);
}

/* The child gets the umask it was given, whatever the daemon's own. */
static void
test_umask(void)
{
	char *const argv[] = {"/bin/sh", "-c", "umask", NULL};
	struct proc_opts o = {.argv = argv, .set_umask = 1, .umask = 022};
	mode_t old = umask(077);
	char err[128], *out;
	int fd;
	pid_t pid = proc_spawn(&o, &fd, err, sizeof err);

	umask(old);
	out = read_until(fd, NULL, 10000);
	close(fd);
	is_str(out, "0022\n", "set_umask gives the child that umask");
	wait_code(pid, 5000);
	free(out);
}


/* ------------------------------------------------------------- the user behind a connection */

#define NOBODY 65534       /* the unprivileged uid a child connects as, when we are root */
#define NO_UID ((uid_t)-2) /* in *uid until proc_peer_uid sets it: no real owner's uid */

/* A TCP socket listening on addr (network order) at a free port; its address into sa. -1. */
static int
tcp_listener(in_addr_t addr, struct sockaddr_in *sa)
{
	socklen_t len = sizeof *sa;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	memset(sa, 0, sizeof *sa);
	sa->sin_family = AF_INET;
	sa->sin_addr.s_addr = addr;
	if (fd >= 0 && (bind(fd, (struct sockaddr *)sa, sizeof *sa) < 0 || listen(fd, 8) < 0 ||
			getsockname(fd, (struct sockaddr *)sa, &len) < 0)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* A TCP socket connected to `to`, or -1. */
static int
tcp_connect(const struct sockaddr_in *to)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd >= 0 && connect(fd, (const struct sockaddr *)to, sizeof *to) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* The next connection on lfd, accepted within 5 s, or -1. */
static int
tcp_accept(int lfd)
{
	struct pollfd p = {.fd = lfd, .events = POLLIN};

	if (lfd < 0 || poll(&p, 1, 5000) != 1)
		return -1;
	return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

/*
 * The uid column of /proc/net/tcp for the client's end of the accepted connection a: the line
 * whose local address:port is a's peer and whose remote one is a itself. -1 when none is.
 * Addresses there are the raw 32-bit value in hex, ports in host order.
 */
static long long
net_tcp_uid(int a)
{
	struct sockaddr_in self, peer;
	socklen_t slen = sizeof self, plen = sizeof peer;
	unsigned la, lp, ra, rp, uid;
	long long found = -1;
	char line[512];
	FILE *f;

	if (getsockname(a, (struct sockaddr *)&self, &slen) < 0 ||
	    getpeername(a, (struct sockaddr *)&peer, &plen) < 0 ||
	    !(f = fopen("/proc/net/tcp", "re")))
		return -1;
	while (fgets(line, sizeof line, f)) /* sl local rem st tx:rx tr:when retrnsmt uid ... */
		if (sscanf(line, " %*u: %x:%x %x:%x %*x %*x:%*x %*x:%*x %*x %u", &la, &lp, &ra, &rp,
			   &uid) == 5 &&
		    la == peer.sin_addr.s_addr && lp == ntohs(peer.sin_port) &&
		    ra == self.sin_addr.s_addr && rp == ntohs(self.sin_port))
			found = uid;
	fclose(f);
	return found;
}

/* A connection from this process: its owner is our uid, as /proc/net/tcp says too. */
static void
test_peer_uid_self(void)
{
	struct sockaddr_in srv;
	int lfd = tcp_listener(htonl(INADDR_LOOPBACK), &srv), c = tcp_connect(&srv);
	int a = tcp_accept(lfd);
	uid_t uid = NO_UID;

	is_int(proc_peer_uid(a, &uid), 0, "proc_peer_uid finds a connection from this process%s",
	       c >= 0 ? "" : " (connect failed)");
	is_int(uid, getuid(), "its user is ours");
	is_int(net_tcp_uid(a), uid, "/proc/net/tcp shows the same uid for the client's end");
	close(a);
	close(c);
	close(lfd);
}

/* In the child: become NOBODY, connect to *srv, hold the connection until the test closes. */
static _Noreturn void
connect_as_nobody(const struct sockaddr_in *srv)
{
	char byte;
	int c;

	if (setuid(NOBODY) < 0 || (c = tcp_connect(srv)) < 0)
		_exit(1);
	while (read(c, &byte, 1) < 0 && errno == EINTR)
		;
	_exit(0);
}

/* A connection from a process of another user (root only: setuid) is that user's. */
static void
test_peer_uid_other_user(void)
{
	struct sockaddr_in srv;
	uid_t uid = NO_UID;
	int lfd, a;
	pid_t pid;

	if (geteuid() != 0) {
		printf("# a connection of another user needs root (setuid): not run\n");
		return;
	}
	lfd = tcp_listener(htonl(INADDR_LOOPBACK), &srv);
	if ((pid = fork()) == 0)
		connect_as_nobody(&srv);
	a = tcp_accept(lfd);
	is_int(proc_peer_uid(a, &uid), 0, "proc_peer_uid finds the connection of a child of uid %d",
	       NOBODY);
	is_int(uid, NOBODY, "its user is the child's, not ours (%d)", (int)getuid());
	is_int(net_tcp_uid(a), uid, "/proc/net/tcp shows the same uid for the child's end");
	close(a); /* the child reads EOF, or a reset if it was never accepted, and exits */
	close(lfd);
	if (pid > 0 && wait_code(pid, 5000) == NO_EXIT) {
		kill(pid, SIGKILL);
		wait_code(pid, 5000);
	}
}

/* Not a TCP socket; a peer that closed its end: no owner to tell. */
static void
test_peer_uid_none(void)
{
	struct sockaddr_in srv;
	uid_t uid = NO_UID;
	int sp[2] = {-1, -1}, lfd, c, a, rc;

	socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp);
	errno = 0;
	rc = proc_peer_uid(sp[0], &uid);
	ok(rc == -1 && errno == EINVAL && uid == NO_UID,
	   "a unix socket pair: -1 EINVAL, *uid untouched (got %d, %s)", rc, strerror(errno));
	close(sp[0]);
	close(sp[1]);

	lfd = tcp_listener(htonl(INADDR_LOOPBACK), &srv);
	c = tcp_connect(&srv);
	a = tcp_accept(lfd);
	close(c); /* orphaned, soon TIME_WAIT: no inode, and the kernel reads its owner as root */
	errno = 0;
	rc = proc_peer_uid(a, &uid);
	ok(rc == -1 && errno == ENOENT && uid == NO_UID,
	   "a peer that closed its socket: -1 ENOENT, not root's uid (got %d, %s, uid %ld)", rc,
	   strerror(errno), uid == NO_UID ? -1L : (long)uid);
	close(a);
	close(lfd);
}

/* This host's first non-loopback IPv4 address (network order) that is up, or 0. */
static in_addr_t
own_address(void)
{
	struct ifaddrs *all, *i;
	in_addr_t addr = 0;

	if (getifaddrs(&all) < 0)
		return 0;
	for (i = all; i && !addr; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
		    !(i->ifa_flags & IFF_LOOPBACK))
			addr = ((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr;
	freeifaddrs(all);
	return addr;
}

/* A connection from this host to its own non-loopback address is local too. */
static void
test_peer_uid_own_address(void)
{
	struct sockaddr_in srv;
	in_addr_t addr = own_address();
	uid_t uid = NO_UID;
	int lfd, c, a;

	if (!addr) {
		printf("# no non-loopback IPv4 address here: a connection to one is not tried\n");
		return;
	}
	lfd = tcp_listener(htonl(INADDR_ANY), &srv);
	srv.sin_addr.s_addr = addr;
	c = tcp_connect(&srv);
	a = tcp_accept(lfd);
	is_int(proc_peer_uid(a, &uid), 0, "proc_peer_uid finds a connection to this host's %s%s",
	       inet_ntoa(srv.sin_addr), c >= 0 ? "" : " (connect failed)");
	is_int(uid, getuid(), "its user is ours");
	close(a);
	close(c);
	close(lfd);
}

int
main(void)
{
	int st;

	alarm(300);               /* a hang fails the run instead of blocking it */
	signal(SIGPIPE, SIG_IGN); /* as the daemon does */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_basic();
	test_signals_death();
	test_session();
	test_cwd();
	test_exec_failure();
	test_exec_failure_reason();
	test_env_passed();
	test_group_alive();
	test_oom_and_fds();
	test_signal_reset();
	test_kill_group_grandchild();
	test_build_env();
	test_capfile_small();
	test_capfile_reopen();
	test_capfile_over();
	test_capfile_trailer();
	test_capfile_marker();
	test_capfile_cut_utf8();
	test_capfile_write_error();
	test_capfile_sweep();
	test_capfile_drain();
	test_capfile_flood();
	test_guardian();
	test_dead_guardian();
	test_children_and_marked();
	test_umask();
	test_peer_uid_self();
	test_peer_uid_other_user();
	test_peer_uid_none();
	test_peer_uid_own_address();
	while (waitpid(-1, &st, WNOHANG) > 0)
		;
	remove_tmpdir();
	return tap_done();
}

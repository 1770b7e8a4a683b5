/*
 * proc.c - the daemon's processes: spawning with the environment of each (a job's, a control
 * command's), a job's process from start to finish, strays, the guardian (which keeps a copy
 * of the log dir's lock), the host-wide claim of a device node; and capped output files.
 *
 * Invariants:
 * - Every descriptor opened here is close-on-exec; a job sees exactly stdin (/dev/null) and
 *   stdout/stderr (one pipe), because its child also closes every descriptor >= 3 before exec.
 * - A job's child is made with fork while every signal is blocked, so no handler of the
 *   daemon runs in it before it has reset the dispositions; the parent restores its mask, the
 *   child ends with default dispositions and an empty mask. The daemon is one thread, so the
 *   child may use stdio. The parent waits for the exec (EOF on a close-on-exec pipe, which
 *   brings the text of a failure instead), so a spawned pid has its session already.
 * - A job's pid is its process group and session id (setsid), so kill(-pid) reaches everything
 *   it started that did not leave the group itself.
 * - A job's process moves through enum proc_job_state only by set_state, whose table says
 *   which phase may follow which. Its exit callback comes once per process, only from
 *   proc_job_timeout, and only once nothing of the process is alive: no member of its group
 *   but zombies, and no child of the daemon that no running job owns.
 * - A child of the daemon belongs to a job while that job's shell is not reaped: it is the
 *   shell, in the shell's session, or carries the job's tag. Every other one is a stray.
 * - A capfile's `size` is the file's byte count and never exceeds `cap` after capfile_finish;
 *   capfile_output never writes past cap. Daemon marker lines always start at a line start.
 * - The guardian holds the only read end of the daemon's registration pipe. It learns each job
 *   group from the job itself (see child_register) and kills every group still registered when
 *   the pipe reaches EOF, that is when the daemon and all its pre-exec children are gone. A
 *   group is forgotten only once it was found empty.
 * - What is here once per process (the jobs, the guardian, the instance entry) lives in P:
 *   waitpid(-1) and the guardian are per process too.
 * - A device node's claim is a listening abstract socket that only its owner holds: no child
 *   inherits it (close-on-exec, and the guardian and every spawned child close all other
 *   descriptors), so it is gone when the daemon is (a child caught between its fork and its
 *   exec holds a copy a moment longer).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "proc.h"

#define PIPE_SIZE (1 << 20)   /* asked for; a flooding job then needs fewer wake-ups */
#define MARKER_MAX 1024       /* a capfile_marker line, cut to fit */
#define DROP_LINE_MAX 256     /* the "output truncated" line: fixed text, numbers, strerror */
#define DRAIN_BUF (64 * 1024) /* one read from a job pipe */
#define GUARD_SLOTS 4096      /* groups the guardian can hold; far above cards + controls */
#define GUARD_WAIT_MS 30000   /* longest wait for killed groups to be gone (guardian_wait_gone) */
#define GUARD_POLL_MS 10      /* between two looks at them */
#define FD_LOOP_MAX 65536     /* bound of the close() loop when close_range is missing */
#define DRAIN_BUDGET (1024 * 1024) /* bytes of one job's output moved per poll event */
#define LOOK_FIRST 0.002      /* s after a killed group is found alive before the next look */
#define LOOK_MAX 0.1          /* s between two looks at most (doubling from LOOK_FIRST) */
#define STRAYS_MAX 512        /* children of the daemon looked at per pass */
#define CLAIM_NAME "tt-device-queue/claim/" /* the abstract names of device claims start so */
#define CLAIM_TRIES 200       /* binds of a claimed name, 10 ms apart: 2 s (proc_claim_node) */
#define USER_SHOWN 64         /* bytes of a claim holder's user name */
#define CMDLINE_SHOWN 200     /* bytes of a claim holder's command line shown */
#define INSTANCE_VAR "TT_DEVICE_QUEUE_INSTANCE="
#define DIAG_BUF 8192         /* bytes of a sock_diag answer: one message of a few hundred */

/*
 * One registration message is a pid_t: pgid to register a group, -pgid to forget it. Written
 * whole (< PIPE_BUF, so atomic and never interleaved).
 */
/* The daemon's write end of the guardian pipe (-1 when no guardian runs). Blocking. */
static int guardian_fd = -1;

/* The daemon as proc.c knows it (proc_init). */
static struct {
	struct proc_callbacks cb;
	const double *now;     /* the owner's monotonic clock, s */
	struct proc_job *jobs; /* every proc_job, for proc_reaped and the strays */
	char marker[sizeof(INSTANCE_VAR) + PATH_MAX + 40];
	pid_t guardian_pid;    /* 0 before it started and once it died */
	bool guardian_lost;    /* it died (proc_reaped) */
} P;

/* ----------------------------------------------------------------------------- helpers */

/* Write all of buf, retrying on EINTR and partial writes. Returns the bytes written. */
static size_t
write_full(int fd, const void *buf, size_t n)
{
	size_t done = 0;
	ssize_t w;

	while (done < n && ((w = write(fd, (const char *)buf + done, n - done)) > 0 ||
			    (w < 0 && errno == EINTR)))
		done += w > 0 ? (size_t)w : 0;
	return done;
}

/* Close every descriptor >= lo, with close_range when the kernel has it. */
static void
close_from(unsigned lo)
{
	struct rlimit rl;
	unsigned fd, limit = FD_LOOP_MAX;

#ifdef SYS_close_range
	if (syscall(SYS_close_range, lo, ~0U, 0) == 0)
		return;
#endif
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < limit)
		limit = (unsigned)rl.rlim_cur;
	for (fd = lo; fd < limit; fd++)
		close((int)fd);
}

/*
 * Every catchable signal to its default disposition but those of the 0-terminated list ign,
 * ignored, then an empty mask (a handler is reset by exec, SIG_IGN and the mask are not);
 * glibc refuses its two internal ones.
 */
static void
reset_signals(const int *ign)
{
	struct sigaction sa = {.sa_handler = SIG_DFL};
	sigset_t none;
	int s, k;

	for (s = 1; s < NSIG; s++) {
		for (k = 0; ign[k] && ign[k] != s; k++)
			;
		sa.sa_handler = ign[k] ? SIG_IGN : SIG_DFL;
		if (s != SIGKILL && s != SIGSTOP)
			sigaction(s, &sa, NULL);
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Send msg to the guardian, if one runs. Blocking write; EPIPE is ignored, errno kept. */
static void
guardian_send(pid_t msg)
{
	int e = errno;

	if (guardian_fd >= 0)
		write_full(guardian_fd, &msg, sizeof msg);
	errno = e;
}

/* ------------------------------------------------------------------------ the job child */

/*
 * Write "<what><arg>: <error>" to errfd (the spawner reads it) and, as a marker line, to
 * stderr (the job's output); exit 127 (exec's convention). The daemon is one thread, so
 * stdio and strerror are safe after its fork.
 */
static _Noreturn void
child_fail(int errfd, const char *what, const char *arg, int e)
{
	dprintf(errfd, "%s%s: %s", what, arg, strerror(e));
	dprintf(STDERR_FILENO, PROC_MARKER " %s%s: %s\n", what, arg, strerror(e));
	_exit(127);
}

/*
 * Register the new group with the guardian before exec. The child does it itself, not the
 * daemon after fork returns: the daemon could die between fork and its write, leaving a group
 * nobody knows. Written by the child, the '+' is in the pipe before the child can exec, and
 * the pipe cannot reach EOF before that since the child holds a write end until exec.
 * PR_SET_PDEATHSIG alone would not do: it reaches only this process (the shell), never the
 * background children it starts, which would then keep the card. A dead guardian (it is not
 * replaced) must not kill the job: signals are blocked here, and a blocked signal is kept
 * pending even while ignored, so the SIGPIPE of a write to its closed pipe would kill the
 * shell as soon as the mask is cleared. Setting SIG_IGN again after the write discards a
 * pending SIGPIPE (POSIX sigaction: "shall cause the pending signal to be discarded, whether
 * or not it is blocked").
 */
static void
child_register(void)
{
	signal(SIGPIPE, SIG_IGN);
	guardian_send(getpid());
	signal(SIGPIPE, SIG_IGN);
}

/*
 * The child side of proc_spawn, never returns. wfd is the output pipe's write end, errfd the
 * spawner's pipe of errors (close-on-exec: EOF there means the exec happened).
 */
static _Noreturn void
child_exec(const struct proc_opts *o, int wfd, int errfd, pid_t daemon)
{
	static const int none[] = {0};
	const struct proc_user *u = o->user;
	struct rlimit rl;
	int e = 0, nfd;

	setsid();
	/* A change of user clears the parent-death signal: become the user first (groups, then
	 * group, then uid). */
	if (u && (setgroups((size_t)u->ngroups, u->groups) == -1 ||
		  setresgid(u->gid, u->gid, u->gid) == -1 ||
		  setresuid(u->uid, u->uid, u->uid) == -1))
		e = errno;
	/* PDEATHSIG first, then the check: the daemon may have died before prctl ran. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != daemon)
		_exit(127);
	child_register();
	/* stdout and stderr into the pipe first (so later failures are in the output). */
	nfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (dup2(wfd, STDOUT_FILENO) == -1 || dup2(wfd, STDERR_FILENO) == -1 || nfd == -1 ||
	    dup2(nfd, STDIN_FILENO) == -1 || dup2(errfd, 3) == -1 ||
	    fcntl(STDOUT_FILENO, F_SETFL, 0) == -1)
		child_fail(errfd, "cannot set up stdin, stdout and stderr", "", errno);
	fcntl(3, F_SETFD, FD_CLOEXEC);
	close_from(4); /* the pipe's ends, the guardian's, anything inherited */
	if (e)
		child_fail(3, "cannot become user ", u->name, e);
	reset_signals(none); /* the daemon ignores SIGPIPE and blocks what its signalfd reads */
	if (o->cwd && o->cwd[0] && chdir(o->cwd) == -1)
		child_fail(3, "cannot change to directory ", o->cwd, errno);
	if ((nfd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC)) >= 0)
		dprintf(nfd, "%d\n", o->oom_score_adj); /* lowering needs privilege: may fail */
	if (o->set_umask)
		umask((mode_t)o->umask);
	/* The soft limit serve was started with, before it raised its own (to its hard limit). */
	if (o->set_nofile && getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = (rlim_t)o->nofile;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	execve(o->argv[0], o->argv, o->envp ? o->envp : environ);
	child_fail(3, "cannot run ", o->argv[0], errno);
}

/* ---------------------------------------------------------------------------- spawning */

pid_t
proc_spawn(const struct proc_opts *o, int *out_fd, char *err, size_t errlen)
{
	int p[2] = {-1, -1}, ep[2] = {-1, -1}, e;
	pid_t daemon = getpid(), pid = -1;
	sigset_t all, old;
	size_t n = 0;
	ssize_t r;

	/* Non-blocking for the daemon; the child makes its end blocking again. */
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) == -1 || pipe2(ep, O_CLOEXEC) == -1) {
		e = errno;
		snprintf(err, errlen, "cannot create a pipe: %s", strerror(e));
		goto out;
	}
	fcntl(p[0], F_SETPIPE_SZ, PIPE_SIZE); /* above pipe-max-size or the user's quota: ignored */
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	if ((pid = fork()) == 0)
		child_exec(o, p[1], ep[1], daemon);
	e = errno;
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (pid < 0) {
		snprintf(err, errlen, "fork: %s", strerror(e));
		goto out;
	}
	close(ep[1]); /* else the daemon's own copy would keep EOF from ever coming */
	ep[1] = -1;
	/* EOF once the child exec'd (the pipe is close-on-exec: it is in its session by then),
	 * else the text of its failure. */
	while (n < errlen - 1) {
		r = read(ep[0], err + n, errlen - 1 - n);
		if (r > 0)
			n += (size_t)r;
		else if (r == 0 || errno != EINTR)
			break;
	}
	err[n] = '\0';
	*out_fd = p[0];
out:
	close(p[1]);
	close(ep[0]);
	close(ep[1]); /* each -1 here is EBADF, harmless */
	if (pid < 0)
		close(p[0]);
	errno = e;
	return pid;
}

void
proc_kill_group(pid_t pgid, int sig)
{
	int e = errno;

	/* kill(-1) would hit every process we may signal, kill(0) our own group: never. */
	if (pgid > 1)
		kill(-pgid, sig);
	errno = e;
}

int
proc_exit_code(int wstatus)
{
	if (WIFEXITED(wstatus))
		return WEXITSTATUS(wstatus);
	return WIFSIGNALED(wstatus) ? -WTERMSIG(wstatus) : -1; /* -1: not final, never passed */
}

/* ------------------------------------------------------------------------- environment */

#define STARTS(s, p) (strncmp((s), (p), sizeof(p) - 1) == 0)

/* Control configuration never reaches a job. */
static bool
scrubbed(const char *s)
{
	return STARTS(s, "TT_DEVICE_RESET") || STARTS(s, "TT_DEVICE_DEEP_RESET") ||
	       STARTS(s, "TT_DEVICE_HEALTH");
}

/* Index of the entry named like s ("NAME=..." or "NAME") in env[0..n), or n. */
static size_t
find_name(char **env, size_t n, const char *s)
{
	size_t i, len = strcspn(s, "=");

	for (i = 0; i < n; i++)
		if (strncmp(env[i], s, len) == 0 && (env[i][len] == '=' || !env[i][len]))
			break;
	return i;
}

/* Is "." one of the ':'-separated entries of v? */
static bool
has_dot(const char *v)
{
	size_t n = strlen(v);

	return strcmp(v, ".") == 0 || strncmp(v, ".:", 2) == 0 || strstr(v, ":.:") ||
	       (n >= 2 && strcmp(v + n - 2, ":.") == 0);
}

/*
 * Put "." first in PYTHONPATH unless present. env has room for `slots` pointers and holds n
 * entries; a new string goes right after the pointer slots, in the same block (realloc'd).
 */
static char **
add_pythonpath(char **env, size_t n, size_t slots)
{
	static const char name[] = "PYTHONPATH=";
	size_t i = find_name(env, n, name), vlen;
	const char *v = i < n ? env[i] + sizeof name - 1 : "";
	char **grown, *s;

	if (i < n && has_dot(v))
		return env;
	vlen = strlen(v);
	grown = realloc(env, slots * sizeof *env + sizeof name + 2 + vlen);
	if (!grown) {
		free(env);
		return NULL;
	}
	s = (char *)(grown + slots);
	sprintf(s, "%s%s%s", name, vlen ? ".:" : ".", v); /* v is outside: base or extra */
	grown[i] = s;
	if (i == n)
		grown[++n] = NULL;
	return grown;
}

char **
proc_build_env(char *const *base, char *const *extra, size_t nextra)
{
	size_t nbase = 0, n = 0, slots, i, j;
	char **env;

	while (base && base[nbase])
		nbase++;
	slots = nbase + nextra + 2; /* every entry, PYTHONPATH, NULL */
	env = malloc(slots * sizeof *env);
	if (!env)
		return NULL;
	/* Each name appears once: the first of a duplicated base name wins, as for getenv. */
	for (i = 0; i < nbase; i++)
		if (strchr(base[i], '=') && !scrubbed(base[i]) && find_name(env, n, base[i]) == n)
			env[n++] = base[i];
	for (i = 0; i < nextra; i++)
		if (extra[i] && strchr(extra[i], '=')) {
			j = find_name(env, n, extra[i]);
			env[j] = extra[i];
			n += j == n;
		}
	env[n] = NULL;
	return add_pythonpath(env, n, slots);
}

char **
proc_job_env(char *const *base, const struct proc_user *u, const char *env_json,
	     const char *job_id, char **block)
{
	const char *uvars[] = {"HOME", u ? u->home : 0, "USER", u ? u->name : 0,
			       "LOGNAME", u ? u->name : 0, "SHELL", u ? u->shell : 0};
	struct json_tok toks[1024];
	char **extra, **env, *p;
	size_t members = u ? 4 : 0, need = sizeof("TT_DEVICE_JOB_ID=") + strlen(job_id), k = 0;
	int n = 0, i;

	*block = NULL;
	if (env_json && env_json[0]) {
		n = json_parse(env_json, strlen(env_json), toks, 1024, NULL, 0);
		if (n < 1 || toks[0].type != JSON_OBJECT) {
			errno = EINVAL;
			return NULL;
		}
		members += toks[0].size;
		for (i = 1; i < n; i = (int)toks[i + 1].next)
			need += json_str_decode(env_json, &toks[i], NULL, 0) +
				json_str_decode(env_json, &toks[i + 1], NULL, 0) + 2;
	}
	for (i = 0; u && i < 8; i++)
		need += strlen(uvars[i]) + 1;
	if (!(extra = malloc(sizeof(char *) * (members + 3) + need)))
		return NULL;
	p = (char *)(extra + members + 3);
	for (; u && k < 4; k++) { /* the user's own first: the env object may set them */
		extra[k] = p;
		p += sprintf(p, "%s=%s", uvars[2 * k], uvars[2 * k + 1]) + 1;
	}
	for (i = 1; k < members; i = (int)toks[i + 1].next) {
		extra[k++] = p;
		p += json_str_decode(env_json, &toks[i], p, SIZE_MAX);
		*p++ = '=';
		p += json_str_decode(env_json, &toks[i + 1], p, SIZE_MAX);
		*p++ = '\0';
	}
	extra[k++] = p;
	sprintf(p, "TT_DEVICE_JOB_ID=%s", job_id);
	extra[k++] = (char *)proc_instance_marker();
	extra[k] = NULL;
	if (!(env = proc_build_env(base, extra, k))) {
		free(extra);
		return NULL;
	}
	*block = (char *)extra;
	return env;
}

char **
proc_control_env(char *const *base)
{
	static char **envp;
	size_t n = 0;

	while (!envp && base[n])
		n++;
	if (!envp && (envp = calloc(n + 2, sizeof(char *)))) {
		memcpy(envp, base, sizeof(char *) * n);
		envp[n] = (char *)proc_instance_marker();
	}
	return envp ? envp : (char **)base;
}

/* --------------------------------------------------------------------- capped output file */

int
capfile_open(struct capfile *cf, int dirfd, const char *path, long long cap)
{
	struct stat st;

	*cf = (struct capfile){.cap = cap};
	/* O_RDWR, not O_WRONLY: markers read the last byte to know whether a line is open.
	 * O_NOFOLLOW: a job's output replaced by a link must not write into the link's target. */
	cf->fd = openat(dirfd, path, O_RDWR | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (cf->fd < 0)
		return -1;
	cf->size = fstat(cf->fd, &st) == 0 ? st.st_size : 0;
	return 0;
}

int
capfile_output(struct capfile *cf, const void *buf, size_t n)
{
	long long room = cf->cap - cf->size;
	size_t take = room <= 0 ? 0 : (unsigned long long)room < n ? (size_t)room : n, done;

	errno = 0;
	done = write_full(cf->fd, buf, take); /* fd -1: EBADF, all counted as dropped */
	cf->size += (long long)done;
	cf->dropped += (long long)(n - done);
	if (done < take && cf->write_errno == 0)
		cf->write_errno = errno ? errno : EIO;
	return done == take ? 0 : -1;
}

/* Write n daemon bytes (room already checked). 0, or -1 with errno. */
static int
append(struct capfile *cf, const void *p, size_t n)
{
	size_t done = write_full(cf->fd, p, n);

	cf->size += (long long)done;
	return done == n ? 0 : -1;
}

/* 1 when the file's last byte is not '\n': a marker must then start with one. */
static int
line_open(const struct capfile *cf)
{
	char c;

	return cf->size > 0 && pread(cf->fd, &c, 1, cf->size - 1) == 1 && c != '\n';
}

void
capfile_marker(struct capfile *cf, const char *fmt, ...)
{
	char line[MARKER_MAX];
	size_t start = line_open(cf) ? 0 : 1, n, room;
	va_list ap;
	int len;

	/* line[0] is the '\n' that closes an open line of job output; one byte stays for the
	 * line's own '\n'. */
	n = (size_t)snprintf(line, sizeof line, "\n" PROC_MARKER " ");
	room = sizeof line - 1 - n;
	va_start(ap, fmt);
	len = vsnprintf(line + n, room, fmt, ap);
	va_end(ap);
	n += len <= 0 ? 0 : (size_t)len < room ? (size_t)len : room - 1;
	line[n++] = '\n';
	if (cf->fd >= 0 && cf->size + (long long)(n - start) <= cf->cap)
		append(cf, line + start, n - start); /* else full: a marker never counts as dropped */
}

/* The last line of a truncated file; its number is cf->dropped. Returns its length. */
static size_t
drop_line(char *line, size_t len, const struct capfile *cf)
{
	char why[128];
	int n;

	if (cf->write_errno)
		snprintf(why, sizeof why, "writing failed: %s", strerror(cf->write_errno));
	else
		snprintf(why, sizeof why, "log cap %lld bytes", cf->cap);
	n = snprintf(line, len, PROC_MARKER " output truncated: %s%lld bytes dropped (%s)%s\n",
		     cf->dropped_floor ? "at least " : "", cf->dropped, why,
		     cf->dropped_floor && !cf->write_errno ? "; the count stopped at a crash" : "");
	return n > 0 ? (size_t)n : 0;
}

/*
 * keep, moved back so the kept bytes do not end inside a UTF-8 sequence: the drop line after
 * them would otherwise follow half a character. Output that is not UTF-8 is cut where asked.
 */
static long long
char_boundary(int fd, long long keep)
{
	char tail[4]; /* an unfinished sequence has at most 3 bytes, so one more shows its start */
	long long from = keep > 4 ? keep - 4 : 0;
	ssize_t n = pread(fd, tail, (size_t)(keep - from), from);

	if (n != keep - from || n < 2)
		return keep;
	return from + (long long)json_utf8_boundary(tail, (size_t)n);
}

/*
 * Cut the file's tail until a line break, the trailer (tlen bytes) and the drop line fit in
 * the cap. Cutting adds to dropped, which may lengthen the drop line by a digit, so this
 * repeats until stable (dropped only grows, so it stops after a few rounds). Returns the drop
 * line's length (0 when nothing was dropped), or -1 with errno when ftruncate failed.
 */
static long long
make_room(struct capfile *cf, size_t tlen, char *line, size_t linesz)
{
	long long need, keep, llen, size0 = cf->size, dropped0 = cf->dropped;
	int cut = 0;

	for (;;) {
		llen = cf->dropped > 0 ? (long long)drop_line(line, linesz, cf) : 0;
		need = (long long)tlen + llen;
		if (need > 0) /* the '\n' that closes an open line, only before added text */
			need += cut ? 1 : line_open(cf);
		if (cf->size + need <= cf->cap)
			break;
		keep = char_boundary(cf->fd, cf->cap - need); /* >= 0: capfile_finish bounds tlen */
		cf->dropped += cf->size - keep;
		cf->size = keep;
		cut = 1; /* the new last byte is unknown until truncation: reserve the '\n' */
	}
	if (cut && ftruncate(cf->fd, cf->size) == -1) {
		cf->size = size0; /* the file is as it was */
		cf->dropped = dropped0;
		return -1;
	}
	return llen;
}

int
capfile_finish(struct capfile *cf, const char *trailer)
{
	char line[DROP_LINE_MAX];
	size_t tlen = trailer ? strlen(trailer) : 0;
	long long llen;
	int rc = 0, e;

	if ((long long)tlen > cf->cap - 1 - DROP_LINE_MAX)
		tlen = 0; /* a trailer that cannot fit beside the drop line is left out */
	llen = make_room(cf, tlen, line, sizeof line);
	/* After a failed ftruncate the file may be over the cap: then nothing more is added. The
	 * '\n' that closes an open line goes before added text only. */
	if (llen < 0)
		rc = -1;
	else if ((long long)tlen + llen > 0 && line_open(cf))
		rc = append(cf, "\n", 1);
	if (rc == 0 && tlen)
		rc = append(cf, trailer, tlen);
	if (rc == 0 && llen > 0)
		rc = append(cf, line, (size_t)llen);
	e = errno;
	close(cf->fd);
	cf->fd = -1;
	errno = e;
	return rc;
}

ssize_t
capfile_drain(struct capfile *cf, int fd, size_t budget)
{
	static char buf[DRAIN_BUF]; /* the daemon is single-threaded; one drain at a time */
	size_t total = 0;
	ssize_t r = 0;

	while (total < budget) {
		r = read(fd, buf, budget - total < sizeof buf ? budget - total : sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		capfile_output(cf, buf, (size_t)r); /* past the cap the bytes count as dropped */
		total += (size_t)r;
	}
	/* EOF or an error shows again on the next call; else 0 at EOF, -1 with errno (EAGAIN:
	 * nothing now). */
	return total > 0 ? (ssize_t)total : r;
}

/* --------------------------------------------------------------------------- guardian */

/* Apply message m to groups[0..n); returns the new n. A full table drops new groups. */
static size_t
apply_msg(pid_t *groups, size_t n, pid_t m)
{
	size_t i;

	for (i = 0; i < n && groups[i] != (m < 0 ? -m : m); i++)
		;
	if (m > 1 && i == n && n < GUARD_SLOTS)
		groups[n++] = m;
	else if (m < 0 && i < n)
		groups[i] = groups[--n];
	return n;
}

/*
 * Kill every group and marked process (those that left their group), then wait until no group
 * has a living member and no marked process is found, killing again every 0.1 s (marked ones
 * every look: a dying shell may still fork), for at most GUARD_WAIT_MS. A killed process is
 * not gone at once: it holds its card until its memory is torn down (tens of ms per GiB), and
 * the instance lock this process holds tells the next daemon when that is over.
 */
static void
guardian_wait_gone(const pid_t *groups, size_t n, const char *marker)
{
	struct timespec pause = {0, GUARD_POLL_MS * 1000000L};
	int round;
	size_t i;

	for (round = 0; round < GUARD_WAIT_MS / GUARD_POLL_MS; round++) {
		bool alive = false, again = round % (100 / GUARD_POLL_MS) == 0;

		for (i = 0; i < n; i++)
			if (proc_group_alive(groups[i]) == 1) {
				alive = true;
				if (again)
					kill(-groups[i], SIGKILL);
			}
		if (marker && proc_kill_marked(marker) > 0)
			alive = true;
		if (!alive)
			return;
		nanosleep(&pause, NULL);
	}
}

/*
 * The guardian process. Its own session keeps terminal signals (^C, ^\) and kills of the
 * daemon's group away from it; it ignores the termination signals anyway. It keeps only the
 * pipe's read end, stderr and the instance lock (lock_fd), so it holds no listening socket,
 * database or job pipe open, and above all no write end of its own pipe, which would keep
 * EOF from ever coming.
 */
static _Noreturn void
guardian_main(int rfd, int wfd, int lock_fd, const char *marker)
{
	static const int ign[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT, 0};
	pid_t groups[GUARD_SLOTS], m;
	size_t n = 0;
	ssize_t r;

	setsid();
	reset_signals(ign);
	close(wfd); /* first: a daemon started without stderr may have got it as fd 2 */
	/* The pipe becomes stdin, the lock stdout; stderr stays (the daemon's log). */
	if (dup2(rfd, STDIN_FILENO) == -1 || (lock_fd >= 0 && dup2(lock_fd, STDOUT_FILENO) == -1))
		_exit(1);
	if (lock_fd < 0)
		close(STDOUT_FILENO);
	rfd = STDIN_FILENO;
	lock_fd = lock_fd >= 0 ? STDOUT_FILENO : -1;
	close_from(3);
	/* Its comm: `pkill tt-device-queue` (which matches comm) stops the daemon, not this.
	 * Named once it holds only its own descriptors, so one found by name holds no more. */
	prctl(PR_SET_NAME, "ttq-guardian");
	/* Every write is one whole message under PIPE_BUF, so a read of its size gets one. A
	 * read error counts as EOF: kill, do not linger. */
	while ((r = read(rfd, &m, sizeof m)) == (ssize_t)sizeof m || (r < 0 && errno == EINTR))
		if (r > 0)
			n = apply_msg(groups, n, m);
	/* The daemon is gone: the lock's mtime tells the next start when its jobs last ran,
	 * which nothing else records for a job that printed nothing. Shared from now on, the
	 * lock says to the next start that a dead daemon's processes are still dying here. */
	if (lock_fd >= 0) {
		futimens(lock_fd, NULL);
		flock(lock_fd, LOCK_SH | LOCK_NB);
	}
	guardian_wait_gone(groups, n, marker); /* its first round kills them all */
	_exit(0); /* the lock is released with the last open copy of its descriptor */
}

pid_t
proc_guardian_start(const char *marker, int lock_fd)
{
	sigset_t all, old;
	pid_t pid;
	int p[2], e;

	if (pipe2(p, O_CLOEXEC) == -1)
		return -1;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	if ((pid = fork()) == 0)
		guardian_main(p[0], p[1], lock_fd, marker);
	e = errno;
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(p[0]);
	if (pid == -1)
		close(p[1]);
	else
		guardian_fd = p[1];
	P.guardian_pid = pid > 0 ? pid : 0;
	errno = e;
	return pid;
}

void
proc_guardian_forget(pid_t pgid)
{
	guardian_send(-pgid);
}

/*
 * The start of the small file at path (a /proc file: one read) into buf[0..cap), NUL-terminated;
 * its length, or -1 with errno.
 */
static ssize_t
read_text(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), e;
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, cap - 1);
	e = errno;
	close(fd);
	errno = e;
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

/* ------------------------------------------------------------------- group liveness */

int
proc_group_alive(pid_t pgid)
{
	char path[300], buf[512], *p, state;
	struct dirent *e;
	int alive = 0;
	long pgrp;
	DIR *d;

	if (kill(-pgid, 0) == -1 && errno == ESRCH)
		return 0;
	if (!(d = opendir("/proc")))
		return -1;
	while (!alive && (e = readdir(d))) {
		snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
		if (e->d_name[0] < '1' || e->d_name[0] > '9' ||
		    read_text(path, buf, sizeof buf) <= 0)
			continue;
		p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
		alive = p && sscanf(p + 1, " %c %*d %ld", &state, &pgrp) == 2 &&
			pgrp == (long)pgid && state != 'Z' && state != 'X';
	}
	closedir(d);
	return alive;
}

/* ------------------------------------------------------------------- children, strays */

int
proc_children(pid_t *out, int cap)
{
	char path[64], buf[8192], *p, *end;
	int count = 0;

	snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
	if (read_text(path, buf, sizeof buf) < 0)
		return -1;
	for (p = buf; count < cap; p = end) {
		long v = strtol(p, &end, 10);

		if (end == p)
			break;
		if (v > 0)
			out[count++] = (pid_t)v;
	}
	return count;
}

/*
 * Whether /proc/<pid>/environ holds exactly the entry ("NAME=VALUE"), or with family any
 * entry that starts with it and goes on without a '/'. Read into one buffer, grown as needed
 * and kept (the daemon is one thread).
 */
static bool
environ_holds(pid_t pid, const char *entry, bool family)
{
	static char *buf;
	static size_t cap;
	size_t n = 0, i, len, elen = strlen(entry);
	char path[64], *grown;
	ssize_t r;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return false;
	for (;;) {
		if (n == cap) {
			if (!(grown = realloc(buf, cap + 65536)))
				break;
			buf = grown;
			cap += 65536;
		}
		if ((r = read(fd, buf + n, cap - n)) <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	for (i = 0; i < n; i += len + 1) {
		len = strnlen(buf + i, n - i);
		if (len >= elen && memcmp(buf + i, entry, elen) == 0 &&
		    (family ? !memchr(buf + i + elen, '/', len - elen) : len == elen))
			return true;
	}
	return false;
}

/* SIGKILL every process whose environment holds marker (environ_holds); how many. */
static int
kill_marked(const char *marker, bool family)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int killed = 0;

	while (d && (e = readdir(d)))
		if (e->d_name[0] >= '1' && e->d_name[0] <= '9' &&
		    environ_holds(atoi(e->d_name), marker, family) &&
		    kill(atoi(e->d_name), SIGKILL) == 0)
			killed++;
	if (d)
		closedir(d);
	return killed;
}

int
proc_kill_marked(const char *marker)
{
	return kill_marked(marker, false);
}

/* --------------------------------------------------------------------- a job's process */

struct proc_job {
	enum proc_job_state state;
	void *owner;
	pid_t pid;           /* the shell: also its group and session; 0 when IDLE */
	int fd;              /* the output pipe's read end, -1 when closed */
	struct capfile *out; /* the owner's, where the output goes */
	int wstatus;         /* the shell's, once reaped */
	/*
	 * The one deadline (monotonic s, 0: none); its meaning is the phase's: RUNNING and
	 * CLOSED, the SIGKILL of a pending stop; REAPED, the straggler bound; KILLING, the next
	 * look at what is left.
	 */
	double deadline;
	double backoff;      /* KILLING: the wait before the look after next */
	char tag[PROC_TAG_MAX]; /* proc_opts.tag, "" for none */
	struct proc_job *next; /* P.jobs */
};

/*
 * Which phase may follow which. Everything that moves a job's process goes through
 * set_state, so a change that is not here is a bug seen in one place.
 */
#define TO(s) (1u << (s))
static const unsigned legal[] = {
	[PROC_JOB_IDLE] = TO(PROC_JOB_RUNNING),
	[PROC_JOB_RUNNING] = TO(PROC_JOB_CLOSED) | TO(PROC_JOB_REAPED),
	[PROC_JOB_CLOSED] = TO(PROC_JOB_KILLING),
	[PROC_JOB_REAPED] = TO(PROC_JOB_KILLING),
	[PROC_JOB_KILLING] = TO(PROC_JOB_IDLE),
};

static _Noreturn void
illegal(const struct proc_job *j, int to)
{
	fprintf(stderr, "tt-device-queue: job process state %d cannot become %d\n", j->state, to);
	abort();
}

/* Tell the owner what j waits for now; watch's result. */
static int
tell_owner(struct proc_job *j)
{
	return P.cb.watch(j, j->fd, j->deadline);
}

static void
set_state(struct proc_job *j, enum proc_job_state to)
{
	if (!(legal[j->state] & TO(to)))
		illegal(j, to);
	if (to == PROC_JOB_KILLING) {
		j->backoff = 0;
		j->deadline = *P.now; /* the first look, from the owner's timers */
	} else if (to == PROC_JOB_REAPED) {
		j->deadline = *P.now + PROC_STRAGGLER_BOUND;
	} else if (to != PROC_JOB_CLOSED) { /* CLOSED: a pending stop still escalates */
		j->deadline = 0;
	}
	j->state = to;
	tell_owner(j); /* only a new fd can fail: see proc_job_spawn */
}

/* Whether j has a shell that was not yet found gone with its group: it owns its children. */
static bool
has_shell(const struct proc_job *j)
{
	return j->state == PROC_JOB_RUNNING || j->state == PROC_JOB_CLOSED ||
	       j->state == PROC_JOB_REAPED;
}

/* Close j's pipe and move to phase `to`; the owner is told before the descriptor goes. */
static void
close_pipe(struct proc_job *j, enum proc_job_state to)
{
	int fd = j->fd;

	j->fd = -1;
	set_state(j, to);
	close(fd);
}

/*
 * Whether a child of ours still belongs to a job whose shell runs: it is that shell, or in its
 * session (every job starts with setsid, so the session id is its pid), or, having left that
 * session, it carries the job's tag. A background helper of a running job that came to us when
 * its parent exited, `(server &)`, is not a stray.
 */
static bool
owned_by_running(pid_t pid)
{
	struct proc_job *j;

	for (j = P.jobs; j; j = j->next)
		if (proc_job_owns(j, pid))
			return true;
	return false;
}

bool
proc_job_owns(const struct proc_job *j, pid_t pid)
{
	pid_t sid;

	if (!j || !has_shell(j))
		return false;
	return j->pid == pid || ((sid = getsid(pid)) > 0 && sid == j->pid) ||
	       (j->tag[0] && environ_holds(pid, j->tag, false));
}

/* pid's command line, its arguments joined by spaces, into out[0..cap); "" when unreadable. */
static void
pid_cmdline(pid_t pid, char *out, size_t cap)
{
	char path[64];
	ssize_t n, i;

	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	n = read_text(path, out, cap);
	for (i = 0; i < n; i++) /* NULs between the arguments; control bytes shown as '?' */
		out[i] = out[i] == '\0' ? ' ' : (unsigned char)out[i] < 0x20 || out[i] == 0x7f ? '?'
									     : out[i];
	while (n > 0 && out[n - 1] == ' ')
		n--;
	out[n > 0 ? n : 0] = '\0';
}

/*
 * uid's /etc/passwd entry into u (groups left empty); -1 with errno ENOENT when it has none.
 * fgetpwent reads the file alone: no name service, nothing loaded (the executable is static).
 */
static int
passwd_entry(uid_t uid, struct proc_user *u)
{
	FILE *f = fopen("/etc/passwd", "re");
	struct passwd *pw = NULL;

	memset(u, 0, sizeof *u);
	while (f && (pw = fgetpwent(f)) && pw->pw_uid != uid)
		;
	if (pw) {
		u->uid = uid;
		u->gid = pw->pw_gid;
		snprintf(u->name, sizeof u->name, "%s", pw->pw_name);
		snprintf(u->home, sizeof u->home, "%s", pw->pw_dir);
		snprintf(u->shell, sizeof u->shell, "%s", *pw->pw_shell ? pw->pw_shell : "/bin/sh");
	}
	if (f)
		fclose(f);
	errno = pw ? 0 : ENOENT;
	return pw ? 0 : -1;
}

const char *
proc_user_name(uid_t uid, char *out, size_t cap)
{
	struct proc_user u;

	if (passwd_entry(uid, &u) == 0)
		snprintf(out, cap, "%s", u.name);
	else
		snprintf(out, cap, "%u", (unsigned)uid);
	return out;
}

int
proc_user_lookup(uid_t uid, struct proc_user *u)
{
	FILE *f;
	struct group *g;
	char **m;

	if (passwd_entry(uid, u) < 0)
		return -1;
	u->groups[u->ngroups++] = u->gid;
	f = fopen("/etc/group", "re");
	while (f && u->ngroups < PROC_MAX_GROUPS && (g = fgetgrent(f)))
		for (m = g->gr_mem; g->gr_gid != u->gid && *m; m++)
			if (strcmp(*m, u->name) == 0) {
				u->groups[u->ngroups++] = g->gr_gid;
				break;
			}
	if (f)
		fclose(f);
	return 0;
}

int
proc_user_uid(const char *name, uid_t *uid)
{
	FILE *f = fopen("/etc/passwd", "re");
	struct passwd *pw = NULL;

	while (f && (pw = fgetpwent(f)) && strcmp(pw->pw_name, name) != 0)
		;
	if (pw)
		*uid = pw->pw_uid;
	if (f)
		fclose(f);
	errno = pw ? 0 : ENOENT;
	return pw ? 0 : -1;
}

int
proc_group_gid(const char *name, gid_t *gid)
{
	FILE *f = fopen("/etc/group", "re");
	struct group *g = NULL;

	while (f && (g = fgetgrent(f)) && strcmp(g->gr_name, name) != 0)
		;
	if (g)
		*gid = g->gr_gid;
	if (f)
		fclose(f);
	errno = g ? 0 : ENOENT;
	return g ? 0 : -1;
}

bool
proc_user_in_group(const struct proc_user *u, gid_t gid)
{
	int k;

	for (k = 0; k < u->ngroups; k++)
		if (u->groups[k] == gid)
			return true;
	return false;
}

bool
proc_user_can_enter(const struct proc_user *u, const char *dir)
{
	gid_t saved[PROC_MAX_GROUPS];
	int n = getgroups(PROC_MAX_GROUPS, saved), ok;
	struct stat st;

	if (n < 0 || setgroups((size_t)u->ngroups, u->groups) < 0)
		return false;
	ok = setegid(u->gid) == 0 && seteuid(u->uid) == 0 &&
	     faccessat(AT_FDCWD, dir, X_OK, AT_EACCESS) == 0 && stat(dir, &st) == 0 &&
	     S_ISDIR(st.st_mode);
	if (seteuid(0) != 0 || setegid(0) != 0 || setgroups((size_t)n, saved) != 0)
		abort(); /* root's ids could not be taken back: nothing after this would be safe */
	return ok;
}

int
proc_card_holders(const char *dir, int card, bool (*own)(pid_t pid, void *ctx), void *ctx,
		  struct proc_holder *out, int cap)
{
	char path[PATH_MAX], buf[4096], *p, *save;
	struct stat st;
	int count = 0, k;
	pid_t pid;

	snprintf(path, sizeof path, "%s/%d/pids", dir, card);
	if (read_text(path, buf, sizeof buf) < 0)
		return -1;
	for (p = strtok_r(buf, "\n", &save); p; p = strtok_r(NULL, "\n", &save)) {
		pid = (pid_t)atoi(p);
		for (k = 0; k < count && k < cap && out[k].pid != pid; k++)
			;
		if (pid <= 0 || (k < count && k < cap) || (own && own(pid, ctx)))
			continue; /* no pid, or one seen: a line per descriptor, each process once */
		if (count < cap) {
			snprintf(path, sizeof path, "/proc/%d", (int)pid);
			out[count].pid = pid;
			out[count].uid = stat(path, &st) == 0 ? st.st_uid : (uid_t)-1;
			pid_cmdline(pid, out[count].cmd, sizeof out[count].cmd);
		}
		count++;
	}
	return count;
}

/* One inet_diag request as it goes on the wire: a netlink header, then the request. */
struct diag_req {
	struct nlmsghdr nh;
	struct inet_diag_req_v2 r;
};

/*
 * The request for the client's end of fd's connection: its source is fd's peer, its
 * destination fd's own address (fd is a TCP socket the daemon accepted). 0, or -1 with errno
 * (EINVAL: not AF_INET).
 */
static int
diag_request(int fd, struct diag_req *q)
{
	struct sockaddr_in self, peer;
	socklen_t slen = sizeof self, plen = sizeof peer;

	if (getsockname(fd, (struct sockaddr *)&self, &slen) < 0)
		return -1;
	if (self.sin_family != AF_INET) {
		errno = EINVAL;
		return -1;
	}
	if (getpeername(fd, (struct sockaddr *)&peer, &plen) < 0)
		return -1;
	/* One socket, not a dump (NLM_F_REQUEST alone); ports and addresses in network order; a
	 * cookie other than NOCOOKIE must equal the socket's, else the kernel answers ESTALE. */
	*q = (struct diag_req){
		.nh = {.nlmsg_len = sizeof *q, .nlmsg_type = SOCK_DIAG_BY_FAMILY,
		       .nlmsg_flags = NLM_F_REQUEST, .nlmsg_seq = 1},
		.r = {.sdiag_family = AF_INET, .sdiag_protocol = IPPROTO_TCP, .idiag_states = ~0U,
		      .id = {.idiag_sport = peer.sin_port, .idiag_dport = self.sin_port,
			     .idiag_src = {peer.sin_addr.s_addr},
			     .idiag_dst = {self.sin_addr.s_addr},
			     .idiag_cookie = {INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE}}},
	};
	return 0;
}

/*
 * The owner uid in the kernel's answer buf[0..n) to q. The lookup falls back to a listening
 * socket on the source's port when no connection matches, so only a socket with exactly q's
 * 4-tuple counts; and only one with an inode: a closed (orphaned) socket, a TIME_WAIT one, or
 * a half-open request has none, and reads as uid 0. 0, or -1 with errno: the kernel's
 * (ENOENT: not found), ENOENT when no message answers, EBADMSG when one is cut short or
 * too short for what its type carries.
 */
static int
diag_uid(void *buf, size_t n, const struct diag_req *q, uid_t *uid)
{
	const struct inet_diag_sockid *want = &q->r.id;
	const struct nlmsghdr *h = buf;
	const struct inet_diag_msg *m = NLMSG_DATA(h);
	const struct nlmsgerr *err = NLMSG_DATA(h);

	errno = EBADMSG;
	if (!NLMSG_OK(h, (int)n))
		return -1;
	if (h->nlmsg_type == NLMSG_ERROR && h->nlmsg_len >= NLMSG_LENGTH(sizeof *err)) {
		errno = err->error < 0 ? -err->error : ENOENT;
		return -1;
	}
	if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof *m))
		return -1;
	errno = ENOENT;
	if (m->idiag_family != AF_INET || m->id.idiag_sport != want->idiag_sport ||
	    m->id.idiag_dport != want->idiag_dport || m->id.idiag_src[0] != want->idiag_src[0] ||
	    m->id.idiag_dst[0] != want->idiag_dst[0] || m->idiag_inode == 0)
		return -1;
	*uid = (uid_t)m->idiag_uid;
	return 0;
}

int
proc_peer_uid(int fd, uid_t *uid)
{
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK}; /* nl_pid 0: the kernel */
	_Alignas(struct nlmsghdr) char buf[DIAG_BUF];
	struct diag_req q;
	ssize_t n;
	int nl = -1, rc = -1, e;

	if (diag_request(fd, &q) < 0)
		return -1;
	/* Connected to the kernel: netlink refuses a unicast to it from any other port. */
	nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0 || connect(nl, (struct sockaddr *)&kernel, sizeof kernel) < 0 ||
	    send(nl, &q, sizeof q, 0) < 0)
		goto out;
	/* The answer was queued within send(); one cut short fails NLMSG_OK (EBADMSG). */
	if ((n = recv(nl, buf, sizeof buf, MSG_DONTWAIT)) >= 0)
		rc = diag_uid(buf, (size_t)n, &q, uid);
out:
	e = errno;
	if (nl >= 0)
		close(nl);
	errno = e;
	return rc;
}

/*
 * Kill our children that belong to no job whose shell runs: descendants of a finished job that
 * came to us when their parent died (we are the child subreaper), in its session or one of
 * their own (setsid). Their own groups go with them. Returns how many: still dying, or dead and
 * not yet reaped. The helpers of jobs still running, on other cards or the same job, stay.
 */
static int
kill_strays(void)
{
	pid_t kids[STRAYS_MAX];
	int n = proc_children(kids, STRAYS_MAX), i, killed = 0;

	for (i = 0; i < n; i++) {
		if (kids[i] == P.guardian_pid || owned_by_running(kids[i]))
			continue;
		proc_kill_group(kids[i], SIGKILL);
		kill(kids[i], SIGKILL);
		killed++;
	}
	return killed;
}

/*
 * KILLING: the shell was reaped and its output drained, but the card is free only once nothing
 * of it is alive: SIGKILL is not death, and a killed process keeps its files, the card's among
 * them, until its memory is torn down. So its group and the strays are killed and looked at
 * again, LOOK_FIRST later and then twice as long each time (at most LOOK_MAX), until the group
 * holds only zombies and no stray is left dying. The usual case ends at the first look: one
 * kill(2) says the group is empty.
 */
static void
look(struct proc_job *j)
{
	int left = kill_strays(), code;

	if (proc_group_alive(j->pid) == 1) {
		proc_kill_group(j->pid, SIGKILL);
		left++;
	}
	if (left > 0) {
		j->backoff = j->backoff <= 0 ? LOOK_FIRST : j->backoff * 2 > LOOK_MAX ? LOOK_MAX
										  : j->backoff * 2;
		j->deadline = *P.now + j->backoff;
		tell_owner(j);
		return;
	}
	proc_guardian_forget(j->pid); /* only now: should we die, it kills the group */
	code = proc_exit_code(j->wstatus);
	j->pid = 0;
	set_state(j, PROC_JOB_IDLE);
	P.cb.exit(j, code); /* j may be spawned again or freed: not touched after */
}

void
proc_init(const struct proc_callbacks *cb, const double *now, const char *instance_id)
{
	struct timespec pause = {0, 10000000};
	char family[sizeof P.marker];
	int found = 0, k, round;

	P.cb = *cb;
	P.now = now;
	snprintf(P.marker, sizeof P.marker, INSTANCE_VAR "%s", instance_id);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	/* A daemon on this log dir killed with its guardian (kill -9 of both) left what carries
	 * its entry: the same log dir, another start's id. */
	snprintf(family, sizeof family, "%.*s", (int)(strrchr(P.marker, '/') + 1 - P.marker),
		 P.marker);
	for (round = 0; round < 300 && (k = kill_marked(family, true)) > 0; round++) {
		found = found ? found : k;
		nanosleep(&pause, NULL);
	}
	if (found > 0)
		P.cb.log("tt-device-queue: killed %d processes the previous instance left running "
			 "(it died with its guardian)", found);
}

struct proc_job *
proc_job_new(void *owner)
{
	struct proc_job *j = calloc(1, sizeof *j);

	if (!j)
		return NULL;
	j->owner = owner;
	j->fd = -1;
	j->next = P.jobs;
	P.jobs = j;
	return j;
}

void
proc_job_free(struct proc_job *j)
{
	struct proc_job **pp;

	if (!j)
		return;
	if (j->state != PROC_JOB_IDLE)
		illegal(j, -1);
	for (pp = &P.jobs; *pp != j; pp = &(*pp)->next)
		;
	*pp = j->next;
	free(j);
}

void *
proc_job_owner(const struct proc_job *j)
{
	return j->owner;
}

enum proc_job_state
proc_job_state(const struct proc_job *j)
{
	return j ? j->state : PROC_JOB_IDLE;
}

int
proc_job_spawn(struct proc_job *j, const struct proc_opts *o, struct capfile *out, char *err,
	       size_t errlen)
{
	pid_t pid;
	int fd;

	if (j->state != PROC_JOB_IDLE)
		illegal(j, PROC_JOB_RUNNING);
	if ((pid = proc_spawn(o, &fd, err, errlen)) < 0)
		return -1;
	j->fd = fd;
	if (tell_owner(j) < 0) {
		/* Not watched, its output would fill the pipe and stall it: it goes as a stray. */
		j->fd = -1;
		close(fd);
		proc_kill_group(pid, SIGKILL);
		snprintf(err, errlen, "cannot watch the output pipe: %s", strerror(ENOMEM));
		errno = ENOMEM;
		return -1;
	}
	j->pid = pid;
	j->out = out;
	j->wstatus = 0;
	snprintf(j->tag, sizeof j->tag, "%s", o->tag ? o->tag : "");
	set_state(j, PROC_JOB_RUNNING);
	return 0;
}

void
proc_job_event(struct proc_job *j, short revents)
{
	ssize_t n;

	(void)revents; /* a hang-up shows as EOF once the pipe is empty */
	if (j->fd < 0)
		return;
	n = capfile_drain(j->out, j->fd, DRAIN_BUDGET);
	if (n > 0) {
		P.cb.output(j);
		return;
	}
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	/* EOF (or a read error): this process's output is complete. */
	close_pipe(j, j->state == PROC_JOB_REAPED ? PROC_JOB_KILLING : PROC_JOB_CLOSED);
}

void
proc_job_timeout(struct proc_job *j)
{
	bool got = false;

	if (j->state == PROC_JOB_KILLING) {
		look(j);
	} else if (j->state == PROC_JOB_REAPED) {
		/* The straggler bound passed: what the pipe holds now is the last of it. */
		while (capfile_drain(j->out, j->fd, DRAIN_BUDGET) > 0)
			got = true;
		if (got)
			P.cb.output(j);
		close_pipe(j, PROC_JOB_KILLING);
	} else if (j->state != PROC_JOB_IDLE && j->deadline > 0) {
		j->deadline = 0; /* a stop's grace is over */
		tell_owner(j);
		proc_kill_group(j->pid, SIGKILL);
		P.cb.escalated(j);
	}
}

void
proc_job_stop(struct proc_job *j, double grace)
{
	/* Only a shell not reaped yet; a second SIGINT would interrupt the job's own cleanup. */
	if (!j || (j->state != PROC_JOB_RUNNING && j->state != PROC_JOB_CLOSED) ||
	    (grace > 0 && j->deadline > 0))
		return;
	proc_kill_group(j->pid, grace > 0 ? SIGINT : SIGKILL);
	if (grace > 0) {
		j->deadline = *P.now + grace;
		tell_owner(j);
	}
}

void
proc_job_kill(struct proc_job *j)
{
	if (j && has_shell(j))
		proc_kill_group(j->pid, SIGKILL);
}

enum proc_reaped
proc_reaped(pid_t pid, int wstatus)
{
	struct proc_job *j;

	for (j = P.jobs; j; j = j->next) {
		if (j->pid != pid || (j->state != PROC_JOB_RUNNING && j->state != PROC_JOB_CLOSED))
			continue;
		j->wstatus = wstatus;
		proc_kill_group(pid, SIGKILL);
		set_state(j, j->state == PROC_JOB_CLOSED ? PROC_JOB_KILLING : PROC_JOB_REAPED);
		return PROC_REAPED_JOB;
	}
	if (pid == P.guardian_pid) {
		P.guardian_pid = 0;
		P.guardian_lost = true;
		return PROC_REAPED_GUARDIAN;
	}
	kill_strays(); /* a stray died: its own children may have come to us */
	return PROC_REAPED_STRAY;
}

/* ---------------------------------------------------------------- the instance and guardian */

const char *
proc_instance_marker(void)
{
	return P.marker;
}

bool
proc_guardian_lost(void)
{
	return P.guardian_lost;
}

/* ------------------------------------------------------------- the claim of a device node */

/* Who listens on the claim sa: "pid P, user U, command line 'C'" into who[0..cap), or why
 * that cannot be told. SO_PEERCRED answers for whoever called listen(). */
static void
claim_holder(const struct sockaddr_un *sa, socklen_t len, char *who, size_t cap)
{
	char user[USER_SHOWN], cmd[CMDLINE_SHOWN + 1];
	struct ucred cr = {0};
	socklen_t crlen = sizeof cr;
	/* Non-blocking: a holder whose backlog is full (stopped with SIGSTOP) answers EAGAIN
	 * instead of keeping this start waiting. */
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0 || connect(fd, (const struct sockaddr *)sa, len) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0) {
		snprintf(who, cap, "it cannot be identified (%s)", strerror(errno));
	} else if (cr.pid <= 0) {
		snprintf(who, cap, "it cannot be identified (its pid is not visible here)");
	} else {
		proc_user_name(cr.uid, user, sizeof user);
		pid_cmdline(cr.pid, cmd, sizeof cmd);
		snprintf(who, cap, "pid %ld, user %s%s%s%s", (long)cr.pid, user,
			 cmd[0] ? ", command line '" : "", cmd, cmd[0] ? "'" : "");
	}
	if (fd >= 0)
		close(fd);
}

/* The abstract address (unix(7): sun_path[0] is NUL, no file) that stands for node's
 * identity, and its length. 0, or -1 with stat's errno. */
static int
claim_address(const char *node, struct sockaddr_un *sa, socklen_t *len)
{
	char *name = sa->sun_path + 1;
	size_t room = sizeof sa->sun_path - 1;
	struct stat st;
	int n;

	if (stat(node, &st) < 0)
		return -1;
	memset(sa, 0, sizeof *sa);
	sa->sun_family = AF_UNIX;
	if (S_ISCHR(st.st_mode)) /* the device itself, whatever path names it */
		n = snprintf(name, room, CLAIM_NAME "dev/%u:%u", major(st.st_rdev), minor(st.st_rdev));
	else
		n = snprintf(name, room, CLAIM_NAME "file/%u:%u/%llu", major(st.st_dev),
			     minor(st.st_dev), (unsigned long long)st.st_ino);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
	return 0;
}

/* Without it two daemons naming one card (a test daemon beside the installed one, two users'
 * services) both ran jobs on it at once. */
int
proc_claim_node(const char *node, char *why, size_t cap)
{
	struct timespec pause = {0, 10000000};
	struct sockaddr_un sa;
	socklen_t len;
	int fd, e, round;

	why[0] = '\0';
	if (claim_address(node, &sa, &len) < 0) {
		e = errno;
		if (e != ENOENT && e != ENOTDIR)
			snprintf(why, cap, "cannot look at it: %s", strerror(e));
		errno = e == ENOTDIR ? ENOENT : e;
		return -1;
	}
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		goto fail;
	/* A daemon just killed holds the name until the kernel tore it down, and a child of it
	 * caught between its fork and its exec a moment longer: a restart waits for that. */
	for (round = 0; bind(fd, (struct sockaddr *)&sa, len) < 0; round++) {
		if (errno != EADDRINUSE || round >= CLAIM_TRIES)
			goto fail;
		nanosleep(&pause, NULL);
	}
	if (listen(fd, SOMAXCONN) == 0)
		return fd;
fail:
	e = errno;
	if (e == EADDRINUSE)
		claim_holder(&sa, len, why, cap);
	else
		snprintf(why, cap, "cannot claim it: %s", strerror(e));
	if (fd >= 0)
		close(fd);
	errno = e;
	return -1;
}

void
proc_claim_accept(int fd)
{
	int c;

	/* Only a look (claim_holder) connects; nothing is read or written. */
	while ((c = accept4(fd, NULL, NULL, SOCK_CLOEXEC)) >= 0 || errno == EINTR ||
	       errno == ECONNABORTED)
		if (c >= 0)
			close(c);
}

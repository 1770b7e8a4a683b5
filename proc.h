/*
 * proc.h - spawning jobs in their own process group, capped output files, and the guardian
 * that leaves no job process alive when the daemon dies (SPEC section 6).
 *
 * proc.c knows fork/exec, process groups, pipes and files; nothing of queues, HTTP or SQLite.
 * Every descriptor it opens is close-on-exec. The caller (ttq.c) reaps children itself from
 * its signalfd with waitpid(-1, WNOHANG) and finishes a job only when the shell was reaped
 * and its output pipe drained (or the straggler bound passed).
 */
#ifndef TTQ_PROC_H
#define TTQ_PROC_H

#include <stdarg.h>
#include <stddef.h>
#include <sys/types.h>

#define PROC_MARKER "[tt-device-queue]" /* every line the daemon adds to an output file */

struct proc_opts {
	char *const *argv;  /* argv[0] is the program path, exec'd as is (no PATH search) */
	char *const *envp;  /* the complete environment */
	const char *cwd;    /* NULL or "" keeps the daemon's cwd */
	int oom_score_adj;  /* written to /proc/self/oom_score_adj in the child */
	int set_umask;      /* non-zero: the child gets `umask` (else it keeps the daemon's) */
	unsigned umask;
	int set_nofile;     /* non-zero: the child's RLIMIT_NOFILE soft limit becomes nofile */
	unsigned long long nofile;
};

/*
 * Start o->argv in a new session (so a new process group whose id is the returned pid), stdin
 * /dev/null, stdout and stderr both into one new pipe. *out_fd receives the pipe's read end
 * (non-blocking, close-on-exec; the caller closes it). The child restores the default signal
 * dispositions and an empty signal mask, asks for SIGKILL when the daemon dies
 * (PR_SET_PDEATHSIG) and registers its group with the guardian before exec. When chdir or exec
 * fails in the child, it writes a PROC_MARKER line saying why into the pipe and exits 127.
 * Returns the pid (> 0), or -1 with errno set and a message in err[0..errlen). With a pid, err
 * is empty when the child exec'd, else it holds the marker line's text (without the marker
 * and the newline): that child has exited 127 and is reaped like any other.
 */
pid_t proc_spawn(const struct proc_opts *o, int *out_fd, char *err, size_t errlen);

/*
 * Whether process group pgid still has a living member: one that is not a zombie (a zombie
 * holds no card, SPEC 6). kill(-pgid, 0) answers the usual case, an empty group, in one call;
 * only when it finds members is /proc read to tell the living from zombies. Returns 1 or 0, or
 * -1 with errno for pgid <= 1 (never a job's group) or when /proc cannot be read.
 */
int proc_group_alive(pid_t pgid);

/*
 * The calling process's children, from /proc/self/task/<pid>/children (the daemon is one
 * thread, so these are all of them). Fills out[0..cap) and returns the count (children beyond
 * cap are left out), or -1 with errno when the file cannot be read.
 */
int proc_children(pid_t *out, int cap);

/*
 * Copy the value of NAME in process pid's environment as it was at exec (/proc/PID/environ)
 * into out[0..outlen) (truncated, always NUL-terminated). Returns 1 when found, 0 when not,
 * -1 with errno when the file cannot be read (gone, or another user's process).
 */
int proc_env_value(pid_t pid, const char *name, char *out, size_t outlen);

/*
 * SIGKILL every process whose environment holds exactly the entry `marker` ("NAME=VALUE"),
 * found by reading /proc/PID/environ (processes of other users are skipped). Returns how many
 * were signalled. For descendants that left their process group (setsid) and outlive it:
 * without it such a helper survives a kill -9 of the daemon, beside the next job on its card.
 */
int proc_kill_marked(const char *marker);

/* Send sig to the whole process group pgid (kill(-pgid, sig)); ESRCH is not an error. */
void proc_kill_group(pid_t pgid, int sig);

/* The job exit code of a wait status: the exit status, or -s for death by signal s. SPEC 6. */
int proc_exit_code(int wstatus);

/*
 * Build a job environment (SPEC 6): the entries of base except names starting with
 * TT_DEVICE_RESET, TT_DEVICE_DEEP_RESET or TT_DEVICE_HEALTH; then the nextra "NAME=VALUE"
 * strings of extra, each replacing an entry of the same name; then PYTHONPATH gets "." put
 * first unless "." is already one of its ':'-separated entries (unset becomes ".").
 * Returns a NULL-terminated array in one heap block (free() it once), or NULL with ENOMEM.
 */
char **proc_build_env(char *const *base, char *const *extra, size_t nextra);

/* ------------------------------------------------------------------- capped output file */

/*
 * An output file that never exceeds cap bytes. Job output beyond the cap is counted in
 * `dropped` and discarded; the child never blocks because the reader keeps draining.
 */
struct capfile {
	int fd;             /* the open file, or -1 */
	long long size;     /* bytes in the file */
	long long cap;      /* maximum file size in bytes (>= 1024) */
	long long dropped;  /* job output bytes not stored */
	int write_errno;    /* why the first write of job output failed (ENOSPC...), 0 if none */
	int dropped_floor;  /* non-zero: dropped is a lower bound (counting stopped at a crash) */
};

/*
 * Open (create 0600, or append to an existing file) path, relative to the folder dirfd
 * (openat(2); AT_FDCWD), as a capped file. The containing folder must exist; a link at path
 * is refused (ELOOP). Returns 0, or -1 with errno.
 */
int capfile_open(struct capfile *cf, int dirfd, const char *path, long long cap);

/*
 * Store n bytes of job output: what fits is written, the rest counted in dropped. 0, or -1
 * with errno when a write failed (the first such errno is kept in write_errno).
 */
int capfile_output(struct capfile *cf, const void *buf, size_t n);

/*
 * Append one daemon marker line "[tt-device-queue] <text>\n" when it fits (never counted as
 * dropped; skipped when the file is full). For in-stream markers such as "Repeat 2/5".
 */
void capfile_marker(struct capfile *cf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Finish the file: append the trailer lines (a NUL-terminated text of complete marker lines,
 * or NULL), and when output was dropped a last marker line giving the dropped byte count. If
 * they do not fit, the file's tail is cut to make room (the cut bytes count as dropped). The
 * file never exceeds cap. Closes the descriptor. Returns 0, or -1 with errno (closed anyway).
 */
int capfile_finish(struct capfile *cf, const char *trailer);

/*
 * Move what the non-blocking pipe fd holds into cf, at most `budget` bytes per call so one
 * flooding job cannot starve the event loop. Returns the bytes read (> 0), 0 at EOF, or -1
 * with errno (EAGAIN: nothing to read now).
 */
ssize_t capfile_drain(struct capfile *cf, int fd, size_t budget);

/* ------------------------------------------------------------------------- guardian */

/*
 * Fork the guardian: a tiny process that holds the read end of a pipe from the daemon and the
 * set of process groups the daemon runs. When the pipe reaches EOF (the daemon exited or was
 * killed, even by SIGKILL) it sends SIGKILL to every registered group and exits, so no job or
 * control command outlives the daemon (SPEC 6: gone within 2 s); then, when marker is not NULL,
 * it also kills every process carrying that environment entry (proc_kill_marked), which reaches
 * descendants that moved to a session of their own. It ignores SIGINT, SIGTERM and SIGHUP,
 * names itself ttq-guardian (comm) and closes every other descriptor. lock_fd, when >= 0, is
 * an open file holding the daemon's instance lock (flock); the guardian keeps its copy and, after the kills, waits until every group and marked process is gone (at
 * most 30 s, killing again every 0.1 s) before it exits, so the lock is free only then: a
 * killed job holds its card until its memory is torn down. Call it once, in `serve`,
 * before any job or control command starts: a second call fails with EBUSY, even after the
 * first guardian died (it is not replaced). Returns the guardian's pid, or -1 with errno.
 */
pid_t proc_guardian_start(const char *marker, int lock_fd);

/* Tell the guardian that group pgid has ended (after it was killed and reaped). */
void proc_guardian_forget(pid_t pgid);

#endif

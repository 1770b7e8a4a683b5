/*
 * proc.h - the daemon's processes: spawning, the environment of each child (a job's, a control
 * command's), a job's process from start to finish (struct proc_job), the killing of strays,
 * the guardian and the instance lock; the host-wide claim of a device node (proc_claim_node);
 * and the capped output file a job's output is drained into.
 *
 * proc.c knows fork/exec, process groups, pipes, /proc, files and abstract unix sockets, and
 * the names of the settings no job may inherit (TT_DEVICE_RESET*, TT_DEVICE_DEEP_RESET*,
 * TT_DEVICE_HEALTH*); nothing of queues, cards, HTTP or SQLite. Of json.c, a leaf that knows
 * nothing else, it uses the reader (a job's stored env object) and the UTF-8 helpers.
 * Every descriptor it opens is close-on-exec.
 *
 * One job's process (struct proc_job, opaque): spawned in a session and process group of its
 * own, its output pipe drained into the owner's capped file. It is finished only when its
 * shell was reaped AND its pipe reached EOF, in either order (as tmux's job.c), or once
 * PROC_STRAGGLER_BOUND passed after the reap while a descendant still holds the pipe; then
 * whatever is left of its group, and every child of the daemon that no running job owns (a
 * stray), is killed and waited for until none of it is alive, since a killed process holds
 * its card until its memory is torn down. Only then does ONE exit callback go up.
 *
 * The owner polls and keeps time; proc.c does neither. The owner's signalfd handler hands
 * every waitpid() result to proc_reaped. A job tells its owner through `watch` the pipe to
 * poll and its one deadline; the owner calls proc_job_event and proc_job_timeout back. A job
 * has at most one deadline at a time (the SIGKILL after a stop's grace, the straggler bound,
 * the next look at a killed group), so one owner timer per job is enough and the owner's
 * timer list stays the only one: the same shape as http.c's connections, so both are wired
 * alike. (Asking each job for its next deadline every loop turn would walk every job.)
 *
 * The log dir's lock (one daemon per log dir, store.c) is the one instance lock: the guardian
 * is handed a copy (proc_guardian_start) and holds it, shared, until the processes of a dead
 * daemon are gone, so a new daemon waits for it before it starts any. The claim of a device
 * node is here: it is held by a process for the host, not by a folder.
 */
#ifndef TTQ_PROC_H
#define TTQ_PROC_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define PROC_MARKER "[tt-device-queue]" /* every line the daemon adds to an output file */
#define PROC_STRAGGLER_BOUND 0.5 /* s a descendant may hold a reaped shell's pipe open */
#define PROC_TAG_MAX 128         /* bytes of a proc_opts tag */
#define PROC_MAX_GROUPS 64       /* supplementary groups of a user a job runs as */

/* A local user a job runs as (proc_user_lookup), from /etc/passwd and /etc/group. */
struct proc_user {
	uid_t uid;
	gid_t gid;                      /* primary group */
	gid_t groups[PROC_MAX_GROUPS];  /* every group of the user, the primary first */
	int ngroups;
	char name[64], home[256], shell[256];
};

struct capfile;

struct proc_opts {
	char *const *argv;  /* argv[0] is the program path, exec'd as is (no PATH search) */
	char *const *envp;  /* the complete environment */
	const char *cwd;    /* NULL or "" keeps the daemon's cwd */
	int oom_score_adj;  /* written to /proc/self/oom_score_adj in the child */
	int set_umask;      /* non-zero: the child gets `umask` (else it keeps the daemon's) */
	unsigned umask;
	int set_nofile;     /* non-zero: the child's RLIMIT_NOFILE soft limit becomes nofile */
	unsigned long long nofile;
	/*
	 * proc_job_spawn only: NULL, or an entry "NAME=VALUE" of envp that marks the job's
	 * descendants. A child of the daemon carrying it belongs to the job while the job's shell
	 * runs, even after it left the job's session, so it is not killed as a stray.
	 */
	const char *tag;
	/*
	 * NULL, or the user the child runs as: its groups, group and uid are taken before the
	 * child changes to cwd (so a directory the user cannot enter fails the start) and execs.
	 */
	const struct proc_user *user;
};

/* ------------------------------------------------------------------ a job's process */

/*
 * A job's process phase. Every change goes through one transition function (proc.c), which
 * aborts on a change its table does not allow.
 */
enum proc_job_state {
	PROC_JOB_IDLE,    /* no process: not started yet, or finished and reported (exit) */
	PROC_JOB_RUNNING, /* the shell runs, its pipe is open */
	PROC_JOB_CLOSED,  /* the pipe reached EOF, the shell is not reaped yet */
	PROC_JOB_REAPED,  /* the shell was reaped (its group SIGKILLed): EOF awaited, bounded */
	PROC_JOB_KILLING, /* reaped and drained: what is left is killed until none of it lives */
};

struct proc_job; /* one job's process, reused for each process the job runs in turn */

/*
 * What proc.c calls up into its owner (ttq.c), registered once with proc_init. Each job
 * callback gets the job; its owner pointer is proc_job_owner(j).
 */
struct proc_callbacks {
	/*
	 * What j waits for changed: fd is its output pipe to poll for POLLIN, or -1 once there
	 * is none (the owner stops polling the old one, which is closed right after), and
	 * deadline a monotonic time in seconds (0: none) at which to call proc_job_timeout.
	 * Returns 0, or -1 when the owner cannot poll a new fd (out of memory): the spawn fails.
	 */
	int (*watch)(struct proc_job *j, int fd, double deadline);
	/* Job output arrived: bytes went into its capfile (or were counted as dropped). */
	void (*output)(struct proc_job *j);
	/* A stop's grace passed with the shell still running: its group got SIGKILL. */
	void (*escalated)(struct proc_job *j);
	/*
	 * j's process is finished (reaped, drained, nothing of it alive); code as
	 * proc_exit_code. j is IDLE again: the callback may spawn its next process or free it.
	 * Called only from proc_job_timeout, never in the middle of proc_job_event or
	 * proc_reaped, so no job finishes while its owner walks its poll events or its reaps.
	 */
	void (*exit)(struct proc_job *j, int code);
	/* A line for the daemon's log (no trailing newline), from proc_init. */
	void (*log)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
};

/*
 * Make this process the daemon proc.c serves: keep cb (copied) and now (the owner's
 * monotonic clock in seconds, current for its loop turn), become the child subreaper
 * (descendants that outlive their parent come to us, so they are reaped and strays can be
 * killed), and make the instance entry (proc_instance_marker) from instance_id, "<log dir>/
 * <start id>": the log dir's absolute path (one daemon per log dir) and a random id of this
 * start without a '/'. Then kill whatever carries an entry of the same log dir (any start id:
 * a previous daemon there died with its guardian), waiting up to 3 s for it to be gone, and
 * `log` how many. Call once, holding the log dir's lock, before any other proc_job or
 * proc_instance function.
 */
void proc_init(const struct proc_callbacks *cb, const double *now, const char *instance_id);

/* A new IDLE job with the owner's pointer owner; NULL with ENOMEM. */
struct proc_job *proc_job_new(void *owner);

/*
 * Free j (NULL is allowed). j must be IDLE: a job freed with a live process would leave it
 * unreaped and its card in use, so that aborts, as an illegal transition does.
 */
void proc_job_free(struct proc_job *j);

/* The owner's pointer given to proc_job_new. */
void *proc_job_owner(const struct proc_job *j);

/* j's phase; NULL (a job that never spawned) is IDLE. */
enum proc_job_state proc_job_state(const struct proc_job *j);

/*
 * Start o (proc_spawn) as j's process, its output drained into out: the caller's capfile,
 * which must stay valid until the exit callback (its fd may be -1 or change meanwhile; output
 * it cannot store is counted as dropped). j must be IDLE and becomes RUNNING; `watch` is
 * called with the pipe before this returns. Returns 0, with err[0..errlen) empty when the
 * child exec'd, else holding the child's failure line (proc_spawn: it exits 127 and is
 * finished like any other). Returns -1 with err filled when nothing could be started (or the
 * owner could not watch the pipe: the child is killed and taken as a stray); j stays IDLE.
 * o->tag is cut to PROC_TAG_MAX - 1 bytes.
 */
int proc_job_spawn(struct proc_job *j, const struct proc_opts *o, struct capfile *out,
		   char *err, size_t errlen);

/* j's pipe is readable or hung up (the owner's poll said so): drain it, at most a budget. */
void proc_job_event(struct proc_job *j, short revents);

/*
 * j's deadline (its last `watch`) passed: escalate a stop, stop waiting for EOF, or look again
 * at what is left. The owner's timer is taken as spent: a deadline that remains or follows is
 * told again through `watch`. The exit callback comes only from here.
 */
void proc_job_timeout(struct proc_job *j);

/*
 * Ask j's shell to stop: SIGINT to its group now and SIGKILL once grace seconds have passed
 * (`escalated` says so); grace <= 0: SIGKILL now. Only while the shell was not reaped
 * (RUNNING, CLOSED); a stop while one is pending does nothing, as a second SIGINT would
 * interrupt the job's own cleanup. NULL is allowed (nothing to stop).
 */
void proc_job_stop(struct proc_job *j, double grace);

/*
 * SIGKILL j's group now (a control command's timeout, a second stop of the service), while it
 * has a shell (RUNNING, CLOSED, REAPED); a pending stop's escalation stays as it is. NULL is
 * allowed.
 */
void proc_job_kill(struct proc_job *j);

/* What proc_reaped found the pid to be. */
enum proc_reaped {
	PROC_REAPED_JOB,      /* a job's shell */
	PROC_REAPED_STRAY,    /* anything else of ours: the strays left are killed */
	PROC_REAPED_GUARDIAN, /* the guardian died: not replaced (proc_guardian_lost) */
};

/*
 * The owner reaped pid (waitpid) with status wstatus: every child of this process goes
 * through here. A job's shell: its group is SIGKILLed (descendants that stayed in it cannot
 * keep the pipe open) and EOF is awaited for PROC_STRAGGLER_BOUND at most. Anything else
 * that was no guardian: children of ours that belong to no running job are killed, so a chain
 * of strays unwinds one generation per reap.
 */
enum proc_reaped proc_reaped(pid_t pid, int wstatus);

/* ----------------------------------------------------- the instance and the guardian */

/*
 * This daemon's instance entry, "TT_DEVICE_QUEUE_INSTANCE=<instance id>" (static storage,
 * made by proc_init). Every job and control command must carry it in its environment (the
 * caller adds it): processes that left their job's process group (setsid) are still found by
 * it when the daemon dies (the guardian kills exactly this start's) and by the next start on
 * the same log dir when the guardian died too (proc_init). The start id keeps a guardian still
 * at work from killing the jobs of a start that did not wait for it (a log dir replaced under
 * the daemon is locked anew without the guardian). Without it, a job's setsid'd helper outlives a
 * kill -9 of the daemon and runs beside the next job on its card.
 */
const char *proc_instance_marker(void);

/* Whether the guardian died (reaped by proc_reaped): a crash now would leave jobs running. */
bool proc_guardian_lost(void);

/*
 * Fork the guardian: a tiny process that holds the read end of a pipe from the daemon and the
 * set of process groups the daemon runs. When the pipe reaches EOF (the daemon exited or was
 * killed, even by SIGKILL) it sends SIGKILL to every registered group and exits, so no job or
 * control command outlives the daemon; when marker is not NULL, it also kills every process
 * carrying that environment entry (proc_kill_marked), which reaches descendants that moved to
 * a session of their own. Then it waits until every group and marked process is gone (at most
 * 30 s, killing again every 0.1 s) and exits. It ignores SIGINT, SIGTERM and SIGHUP, names
 * itself ttq-guardian (comm) and closes every other descriptor. lock_fd, when >= 0, holds the
 * daemon's instance lock (an exclusive flock): the guardian keeps its copy and, when the
 * daemon is gone, stamps the file's mtime and makes the lock shared (a start then knows to
 * wait, not that another daemon runs); the lock is free once the guardian exits: a killed job
 * holds its card until its memory is torn down. Call it once, before any job or control
 * command starts; a guardian that died is not replaced. Returns the guardian's pid, or -1
 * with errno.
 */
pid_t proc_guardian_start(const char *marker, int lock_fd);

/* Tell the guardian that group pgid has ended (after it was killed and found gone). */
void proc_guardian_forget(pid_t pgid);

/*
 * Whether process pid belongs to job j's running process: it is j's shell, in the shell's
 * session (a job's shell leads a session of its own), or carries j's tag in its environment
 * (a helper that left the session). false when j has no shell now (NULL too).
 */
bool proc_job_owns(const struct proc_job *j, pid_t pid);

/* A process that has a card open, as the driver lists it (proc_card_holders). */
struct proc_holder {
	pid_t pid;
	uid_t uid;     /* (uid_t)-1 when it cannot be read (the process is gone) */
	char cmd[128]; /* its command line, the arguments joined by spaces and cut; "" unknown */
};

/*
 * The processes that have card `card` open, from the driver's <dir>/<card>/pids (tt-kmd
 * 2.5.0 and later: one pid per line for each open descriptor, empty when the card is free),
 * each once, in the file's order, but those own(pid, ctx) claims (own NULL: none). Fills
 * out[0..cap) and returns how many there are (those past cap left unfilled), or -1 with errno
 * when the file cannot be read (ENOENT: an older driver, or no such card). Only reads; the
 * device node itself is never opened, which would make this daemon a holder.
 */
int proc_card_holders(const char *dir, int card, bool (*own)(pid_t pid, void *ctx), void *ctx,
		      struct proc_holder *out, int cap);

/*
 * The name of user uid from /etc/passwd into out[0..cap), else its number; returns out. The
 * file alone (fgetpwent): glibc's getpwuid cannot be linked statically without warnings, and
 * a name service beyond the file is not worth a lookup that may block.
 */
const char *proc_user_name(uid_t uid, char *out, size_t cap);

/*
 * The user behind fd, an accepted (connected) AF_INET TCP socket: the owner uid of the
 * client's socket of that connection, as the kernel records it (the fsuid of whoever made that
 * socket, as `ss -e` and the uid column of /proc/net/tcp show it; in the caller's user
 * namespace, where an unmapped uid reads as the overflow uid, 65534). The client need not
 * send anything: one NETLINK_SOCK_DIAG inet_diag request for the exact 4-tuple of the client's
 * end (source: fd's peer address and port, destination: fd's own), on a short-lived netlink
 * socket (close-on-exec) connected to the kernel, so no other process can slip in an answer.
 * The kernel answers within the request, so this never waits and may run in the event loop;
 * it allocates nothing and keeps no descriptor. The client's socket is found when it is on
 * this host in the caller's network namespace: from a loopback address (127.0.0.0/8) or any
 * of the host's own addresses.
 * Returns 0 with *uid set; else -1 with errno, *uid untouched:
 * - ENOENT: no such local socket with an owner: the peer is on another host or in another
 *   network namespace, or has closed its socket (an orphaned socket reads as root's, so its
 *   uid is never taken), or the kernel lacks TCP socket diagnostics (inet_diag, tcp_diag);
 * - EINVAL: fd is not an AF_INET socket (a unix socket, IPv6); ENOTCONN: not connected;
 *   EBADF, ENOTSOCK as getsockname(2);
 * - any other errno: the netlink socket could not be made or used (EBADMSG: an answer too
 *   long or malformed).
 * Without it a request that another local user sends over TCP runs as the service's user.
 */
int proc_peer_uid(int fd, uid_t *uid);

/*
 * Fill *u with user uid's name, home, shell and groups (the primary group, then every group of
 * /etc/group naming the user, at most PROC_MAX_GROUPS), read from the files as proc_user_name: a
 * job runs as this user, and a user known only to a name service beyond the files cannot be
 * one. 0, or -1 with errno ENOENT when uid is not in /etc/passwd.
 */
int proc_user_lookup(uid_t uid, struct proc_user *u);

/* The uid of user `name` in /etc/passwd into *uid: 0, or -1 with errno ENOENT. */
int proc_user_uid(const char *name, uid_t *uid);

/* The gid of group `name` in /etc/group into *gid: 0, or -1 with errno ENOENT. */
int proc_group_gid(const char *name, gid_t *gid);

/* Whether u is a member of group gid (its primary group or a supplementary one). */
bool proc_user_in_group(const struct proc_user *u, gid_t gid);

/*
 * Whether user u may enter directory dir (search permission on it and every folder above,
 * as u's uid and groups). The caller runs as root: its effective ids are u's for the one
 * check, and root's again before this returns. false when dir is no directory.
 */
bool proc_user_can_enter(const struct proc_user *u, const char *dir);

/* ------------------------------------------------------------ the claim of a device node */

/*
 * Claim the device node `node` for this process host-wide: bind a listening abstract unix
 * socket (unix(7): no file, gone when its last descriptor closes, so at this process's death)
 * named after the node's identity: the st_rdev (major:minor) of a character device, whatever
 * path names it, else the st_dev and st_ino of the file. A second process naming the same
 * node, by any path, then finds the name taken. A name in use is tried again for 2 s: a
 * process just killed holds it until the kernel has torn it down.
 * Returns the socket (>= 0; non-blocking, close-on-exec): the caller owns it, holds the claim
 * as long as it keeps it open, polls it for POLLIN and calls proc_claim_accept. Jobs, control
 * commands and the guardian never inherit it (they close every other descriptor).
 * Returns -1 with errno and why[0..cap) filled: ENOENT when node does not exist (or a
 * component of its folder is no folder; why is empty: nothing to claim); EADDRINUSE when
 * another process holds the claim, why then naming it ("pid P, user U, command line 'C'",
 * "uid N" for a user not in /etc/passwd, the command line left out when unreadable) or saying
 * that it cannot be identified; any other errno when node cannot be looked at or the socket
 * cannot be made. Cooperative: it stops only processes that claim the same way, within one
 * network namespace (abstract names are per network namespace).
 */
int proc_claim_node(const char *node, char *why, size_t cap);

/*
 * fd, a socket of proc_claim_node, is readable: accept and close every connection waiting (a
 * second daemon looking who holds the claim), so its backlog never fills.
 */
void proc_claim_accept(int fd);

/* ----------------------------------------------------------------- process primitives */

/*
 * Start o->argv in a new session (so a new process group whose id is the returned pid), stdin
 * /dev/null, stdout and stderr both into one new pipe. *out_fd receives the pipe's read end
 * (non-blocking, close-on-exec; the caller closes it). The child restores the default signal
 * dispositions and an empty signal mask, asks for SIGKILL when the daemon dies
 * (PR_SET_PDEATHSIG) and registers its group with the guardian before exec. When chdir or exec
 * fails in the child, it writes a PROC_MARKER line saying why into the pipe and exits 127.
 * Returns the pid (> 0), or -1 with errno set and a message in err[0..errlen) (errlen > 0).
 * With a pid, err is empty when the child exec'd, else it holds the marker line's text
 * (without the marker and the newline): that child has exited 127 and is reaped like any other.
 */
pid_t proc_spawn(const struct proc_opts *o, int *out_fd, char *err, size_t errlen);

/*
 * Whether process group pgid still has a living member: one that is not a zombie (a zombie
 * holds no card). kill(-pgid, 0) answers the usual case, an empty group, in one call; only
 * when it finds members is /proc read to tell the living from zombies. pgid > 1 (a job's
 * group). Returns 1 or 0, or -1 with errno when /proc cannot be read.
 */
int proc_group_alive(pid_t pgid);

/*
 * The calling process's children, from /proc/self/task/<pid>/children (the daemon is one
 * thread, so these are all of them). Fills out[0..cap) and returns the count (children beyond
 * cap are left out), or -1 with errno when the file cannot be read.
 */
int proc_children(pid_t *out, int cap);

/*
 * SIGKILL every process whose environment holds exactly the entry `marker` ("NAME=VALUE"),
 * found by reading /proc/PID/environ (processes of other users are skipped). Returns how many
 * were signalled. For descendants that left their process group (setsid) and outlive it:
 * without it such a helper survives a kill -9 of the daemon, beside the next job on its card.
 */
int proc_kill_marked(const char *marker);

/* Send sig to the whole process group pgid (kill(-pgid, sig)); ESRCH is not an error. */
void proc_kill_group(pid_t pgid, int sig);

/* The job exit code of a wait status: the exit status, or -s for death by signal s. */
int proc_exit_code(int wstatus);

/*
 * Build a job environment: the entries of base except names starting with TT_DEVICE_RESET,
 * TT_DEVICE_DEEP_RESET or TT_DEVICE_HEALTH (control configuration never reaches a job); then
 * the nextra "NAME=VALUE" strings of extra, each replacing an entry of the same name; then
 * PYTHONPATH gets "." put first unless "." is already one of its ':'-separated entries (unset
 * becomes "."). Returns a NULL-terminated array in one heap block (free() it once), or NULL
 * with ENOMEM.
 */
char **proc_build_env(char *const *base, char *const *extra, size_t nextra);

/*
 * A job's environment: base (the daemon's) as proc_build_env makes it, with user u's HOME,
 * USER, LOGNAME and SHELL when u is not NULL (a job run as another user reads its own profile),
 * then the members of env_json (a JSON object of strings as the store keeps it, at most 511
 * members; NULL or "" for none), then TT_DEVICE_JOB_ID=job_id and the instance entry
 * (proc_instance_marker), which the job's env cannot override. *block receives the one
 * allocation holding the added strings; free() the result and *block once the job ran. NULL
 * (ENOMEM, or EINVAL when env_json is no such object).
 */
char **proc_job_env(char *const *base, const struct proc_user *u, const char *env_json,
		    const char *job_id, char **block);

/*
 * The control commands' environment: base plus the instance entry. Made once and kept
 * (static); base itself when memory ran out.
 */
char **proc_control_env(char *const *base);

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
 * is refused (ELOOP). cap is at least 1024 (the configuration's floor). Returns 0, or -1
 * with errno (cf->fd is then -1).
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
 * file never exceeds cap. cf must be open; its descriptor is closed. Returns 0, or -1 with
 * errno (closed anyway).
 */
int capfile_finish(struct capfile *cf, const char *trailer);

/*
 * Move what the non-blocking pipe fd holds into cf, at most `budget` (> 0) bytes per call so one
 * flooding job cannot starve the event loop. Returns the bytes read (> 0), 0 at EOF, or -1
 * with errno (EAGAIN: nothing to read now).
 */
ssize_t capfile_drain(struct capfile *cf, int fd, size_t budget);

#endif

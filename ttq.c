/*
 * ttq.c - tt-device-queue: main, configuration, the event loop and timers, the route table and
 * its handlers, rendering records, the group commit, start-up order, and the job lifecycle and
 * card resets carried out between the scheduler, the store and the processes.
 *
 * Design invariants:
 *   - One thread, one poll() loop. Everything that can block is non-blocking: client sockets,
 *     job output pipes, the signalfd (SIGCHLD, SIGTERM, SIGINT, SIGHUP). Timers (job
 *     deadlines, a running job's silence watchdog, each job process's and each connection's
 *     one deadline, store retries, retention) live in one list and the earliest becomes
 *     the poll timeout. No busy waiting.
 *   - Client connections are http.c's (struct http_conn: accepting them on the listening
 *     socket within TT_DEVICE_MAX_CONNECTIONS and the busy slots beyond it, buffers,
 *     keep-alive, pipelining, their phases); this file polls and times each, the listener
 *     too, as it asks (client_watch), and answers their requests (handle_request, the route
 *     table). Who may do what and the long-polls on jobs are the daemon's: so is the hold
 *     limit that keeps HOLD_RESERVE connections from long-polls (hold_limit).
 *   - A job moves through sched.h's named phases (queued, starting, running, stopping, done,
 *     forgotten) only by sched_job_transition, whose table aborts on a change it does not
 *     allow; the durable status follows the phase. Memory holds only active jobs, those not
 *     forgotten yet (a done one is, once its outcome is committed); completed jobs are read
 *     from SQLite, a card's last SCHED_RECENT of them for each /status too.
 *   - Group commit: handlers and process events only change memory and mark records dirty.
 *     Once per loop iteration store_sync() writes every dirty record in one transaction; only
 *     after it committed are responses written (http_server_flush), processes started (a
 *     starting job's `running` is durable before its shell exists) and done jobs forgotten. A
 *     failed commit makes the store degraded: that iteration's submissions are answered 503
 *     instead (http_conn_retract), starting jobs go back to their queues' heads (a reset stays
 *     pending), dispatch stops, and the dirty records are retried every second until a commit
 *     succeeds.
 *   - A job's processes are proc.c's (struct proc_job): spawning, the output pipe, reaping,
 *     the straggler bound, stop escalation, killing what is left of a group and of strays
 *     until none of it is alive, the guardian and the instance lock. This file polls and times
 *     each as it asks (job_proc_watch), hands it every waitpid() result (signal_event), and
 *     decides what an ended process means (job_proc_exit: the next iteration, the job's end
 *     and why, the next reset step); the card stays busy until that exit callback. A job of
 *     several cards occupies each of them from its start (sched_occupy) to its end, when every
 *     one is freed at once (sched_vacate); its records and logs name them all.
 *   - What a card becomes (a reset's start and end, a hold, a restart), which queued jobs fail
 *     with a dead card, which job a reset preempts and what a job found at start-up becomes
 *     are sched.c's decisions, and the next reset step is its ladder's; this file carries them
 *     out: it words the reasons, logs, commits, spawns and answers. Which setting holds which
 *     control command, and their {device} templates, are configuration and stay here.
 *   - Under systemd (Type=notify) READY=1 goes out only once the listener is open and start-up
 *     recovery is committed, or, when the store cannot be opened yet, once it listens degraded
 *     (open_store); WATCHDOG=1 comes from a loop timer, so only a live loop pings.
 *   - Until the store opens, D.store is NULL and nothing touches it: no card is set up, every
 *     request but /status and /metrics is refused, and no timer but store_retry needs it.
 *
 * Arrows run one way: this file calls http, json, sched, store and proc; none of them calls
 * into it or into each other (store.h uses sched.h's plain records; proc.c json.c's reader and
 * UTF-8 helpers, http.c its growable buffer: json.c is a leaf that knows nothing else) but
 * through the callbacks this file registers (http.c's struct http_callbacks, proc.c's struct
 * proc_callbacks).
 * A job's iterations, stop reasons and timeout and a reset's steps are carried out here, not
 * in proc.c: they write the job's record (sched.h's struct job) and log, commit and answer
 * together, which proc.c, knowing no records, cannot. The generic checks of a request body
 * (unknown members, types, limits) are json.c's (struct json_doc); what names a card, a job or
 * the env object is checked here.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


#include "cli.h"
#include "http.h"
#include "json.h"
#include "proc.h"
#include "sched.h"
#include "store.h"

#ifndef TTQ_VERSION
#define TTQ_VERSION "dev"
#endif

#define FD_RESERVE 64         /* descriptors beyond the connections: store, signalfd, guardian */
/* Connections kept from long-polls for short requests, at most half of them (hold_limit):
 * without them, waiting clients took every connection and status, queue and release timed out. */
#define HOLD_RESERVE 16
/* RFC 9110 10.2.3, on a 503 that handled nothing: ask again in a second. Without it a client
 * cannot tell "try again" from a refusal that is the answer (a dead card, a full queue). */
#define RETRY_AFTER "Retry-After: 1\r\n"
#define STORE_RETRY 1.0       /* s between commit attempts while degraded */
#define LOG_DIR_CHECK 2.0     /* s between looks for a removed log dir, without inotify */
#define DIR_SETTLE 0.5        /* s after the last removal seen before the log dir is made again,
				 so that an rm -rf under way does not fail on a folder refilled */
#define SHUTDOWN_LINGER 1.0   /* s connected clients are still answered after the jobs stopped */
#define RETENTION_EVERY 300.0 /* s between retention passes */
#define START_COMMIT 1.0      /* s after a job's start within which a commit is its start's */
/* A child of a daemon just killed, caught between its fork and its exec, still holds the log
 * dir's lock for a moment: without this wait a restart right after a crash failed at random. */
#define LOG_DIR_LOCK_WAIT 2.0 /* s */
#define LISTEN_WAIT 2.0       /* s a port in use is tried again, for a daemon just killed */
#define MAX_WAIT 60           /* s, the longest ?wait= */
#define MAX_TOKENS 65536      /* JSON tokens per request body */
#define MAX_CARDS 256
#define MAX_CWD_CHARS 4096
#define MAX_ENV_ENTRIES 256
#define MAX_ENV_BYTES (256 * 1024)
#define MAX_EXEC_STRING (32 * 4096) /* MAX_ARG_STRLEN: exec refuses a longer argv or env string */
#define MAX_CLIENT_ID 128
#define MAX_KEY_CHARS 128 /* characters of an Idempotency-Key */
#define MAX_HOLD_REASON 1024 /* characters of a hold's reason, and of a lease's description */
#define MAX_HEARTBEAT 3600   /* s, the longest heartbeat_sec of a lease */
#define SUMMARY_CMD_CHARS 200 /* commands are cut in status summaries */
#define MAX_HOLDERS 8         /* processes outside the queue shown per card */
#define MAX_SEEN 16           /* of them, recorded on a job while it runs */
#define FOREIGN_RECHECK 1.0   /* s between looks at a card such a process keeps waiting, and
				 at the cards of running jobs */
/* What the log and status say once the guardian is gone (signal_event). */
#define GUARDIAN_GONE "the guardian process died: job processes are not cleaned up if this " \
		      "daemon is killed; a restart of the service starts a new one"

static const unsigned char embedded_health_check[] = {
#include "health_check.inc"
};

/* ------------------------------------------------------------------------ configuration */

struct config {
	char host[256];
	int port;
	char *log_dir;
	char *dev_dir; /* card N's device node is <dev_dir>/N */
	int ids[MAX_CARDS];
	int nids;
	int default_timeout, max_timeout;
	int silence_timeout; /* the default silence_timeout of a job, seconds; 0: off */
	long long max_queued;
	long long max_log_bytes, max_log_read, max_request_bytes;
	long long max_connections;
	long long retention_days, max_completed;
	long long max_repeat, max_cmd_chars;
	double stop_grace;
	bool reset_preempts;
	bool health_after_failure; /* a card's health check follows a job's bad end */
	char *pids_dir;            /* the driver's /proc/driver/tenstorrent: who has a card open */
	char *admin_group;         /* host mode: its members may act on every job ("": none) */
	bool allow_anonymous;      /* callers the kernel cannot name are let in */
	char *reset_cmd, *health_cmd, *deep_reset_cmd;
	long long reset_retries;
	double health_cmd_timeout;
	long long oom_score_adj;
	char *boot_id_file;
	char repo[PATH_MAX]; /* folder of the resolved executable */
};

static struct config cfg;

/* Start-up cannot go on: "tt-device-queue serve: " and the message on stderr, then exit. */
static void __attribute__((noreturn, format(printf, 2, 3)))
serve_fail(int status, const char *fmt, ...)
{
	va_list ap;

	fputs("tt-device-queue serve: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

/* A setting that cannot be used: its name and why, exit status 2. */
#define config_fail(var, fmt, ...) serve_fail(2, "%s: " fmt, var, __VA_ARGS__)

/*
 * A number in [min, max] from the environment, else def: decimal digits, a fraction only when
 * frac ("0.25" seconds), a '-' only where min is negative; anything else exits 2.
 */
static double
env_num(const char *var, double def, double min, double max, bool frac)
{
	const char *v = getenv(var);
	char *end;
	double x;

	if (!v)
		return def;
	errno = 0;
	x = strtod(v, &end);
	/* those characters only: strtod alone takes "inf", "1e3", hex, '+' and spaces */
	if (!*v || *end || v[strspn(v, frac ? "0123456789." : "-0123456789")] || errno ||
	    !(x >= min && x <= max))
		serve_fail(2, "%s: '%s' is not %s from %.17g to %.17g", var, v,
			   frac ? "a number of seconds" : "an integer", min, max);
	return x;
}

#define env_int(var, def, min, max) ((long long)env_num(var, def, min, max, false))
#define env_seconds(var, def, min, max) env_num(var, def, min, max, true)

static bool
env_bool(const char *var, bool def)
{
	static const char *const words[] = {"true", "yes", "on", "1", "false", "no", "off", "0"};
	const char *v = getenv(var);
	size_t i;

	for (i = 0; v && i < 8; i++)
		if (strcasecmp(v, words[i]) == 0)
			return i < 4;
	if (!v)
		return def;
	config_fail(var, "'%s' is not a boolean (true/false, yes/no, on/off, 1/0)", v);
}

/* ids[] with id added at n, unless already there; the new count. */
static int
add_card_id(int *ids, int n, long long id)
{
	int i;

	for (i = 0; i < n; i++)
		if (ids[i] == id)
			return n;
	if (n >= MAX_CARDS)
		config_fail("TT_DEVICE_IDS", "more than %d queues", MAX_CARDS);
	ids[n] = (int)id;
	return n + 1;
}

static int
parse_device_ids(const char *v, int *ids)
{
	const char *p = v;
	int n = 0;

	while (*p) {
		char *end;
		long long id;

		p += strspn(p, " ");
		if (!(*p >= '0' && *p <= '9'))
			config_fail("TT_DEVICE_IDS", "'%s' is not a comma-separated list of card numbers", v);
		id = strtoll(p, &end, 10);
		if (id > 1000000 || end - p > 7)
			config_fail("TT_DEVICE_IDS", "card number out of range in '%s'", v);
		/* A card written twice is most likely a typo for another card (0,0 for 0,1): one
		 * queue fewer than meant would pass unnoticed, so it is an error, not merged. */
		if (add_card_id(ids, n, id) == n)
			config_fail("TT_DEVICE_IDS", "card %lld is listed twice in '%s'", id, v);
		n++;
		p = end + strspn(end, " ");
		if (*p == ',' && p[1])
			p++;
		else if (*p)
			config_fail("TT_DEVICE_IDS", "'%s' is not a comma-separated list of card numbers", v);
	}
	return n;
}

/* The numeric entries of dir (TT_DEVICE_DEV_DIR). */
static int
discover_device_ids(const char *dir, int *ids)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d))) {
		const char *s = e->d_name;
		size_t len = strspn(s, "0123456789");

		if (len > 0 && len < 8 && s[len] == '\0')
			n = add_card_id(ids, n, atoll(s));
	}
	if (d)
		closedir(d);
	return n;
}

/*
 * Out of memory where going on would lose a timer, a record or a watch (a job would run
 * unbounded, or its end go unsaid): abort, leaving a core to look at.
 */
static void __attribute__((noreturn))
die_oom(void)
{
	fprintf(stderr, "tt-device-queue: out of memory\n");
	abort();
}

static char *
xstrdup(const char *s)
{
	char *p = strdup(s ? s : "");

	if (!p)
		die_oom();
	return p;
}

static char *__attribute__((format(printf, 1, 2)))
xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *p;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&p, fmt, ap);
	va_end(ap);
	if (r < 0)
		die_oom();
	return p;
}

static void
config_repo_dir(void)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	exe[n > 0 ? n : 0] = '\0';
	slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	snprintf(cfg.repo, sizeof(cfg.repo), "%s", slash == exe ? "/" : slash ? exe : ".");
}

static char *
env_str(const char *var, const char *def)
{
	const char *v = getenv(var);

	return xstrdup(v ? v : def);
}

static void
config_load(void)
{
	const char *v;
	struct in_addr ia;

	config_repo_dir();
	v = getenv("TT_DEVICE_HOST");
	snprintf(cfg.host, sizeof(cfg.host), "%s", v && *v ? v : "127.0.0.1");
	if (inet_pton(AF_INET, cfg.host, &ia) != 1)
		config_fail("TT_DEVICE_HOST", "'%s' is not an IPv4 address", cfg.host);
	cfg.port = (int)env_int("TT_DEVICE_PORT", 5741, 1, 65535);
	v = getenv("TT_DEVICE_LOG_DIR");
	cfg.log_dir = v && *v ? xstrdup(v) : xasprintf("%s/logs-v2", cfg.repo);
	v = getenv("TT_DEVICE_DEV_DIR");
	cfg.dev_dir = xstrdup(v && *v ? v : "/dev/tenstorrent");
	/* absolute: the service's working directory must not decide which card is claimed */
	if (cfg.dev_dir[0] != '/' || strlen(cfg.dev_dir) > PATH_MAX - 16)
		config_fail("TT_DEVICE_DEV_DIR", "'%s' is not an absolute path of a folder",
			    cfg.dev_dir);
	v = getenv("TT_DEVICE_IDS");
	cfg.nids = v && *v ? parse_device_ids(v, cfg.ids) : discover_device_ids(cfg.dev_dir, cfg.ids);
	if (cfg.nids == 0)
		config_fail("TT_DEVICE_IDS", "no queues: set TT_DEVICE_IDS (e.g. 0,1) or provide "
					     "%s/N device nodes", cfg.dev_dir);
	cfg.default_timeout = (int)env_int("TT_DEVICE_DEFAULT_TIMEOUT", 3600, 1, 100000000);
	cfg.max_timeout = (int)env_int("TT_DEVICE_MAX_TIMEOUT", 86400, 1, 100000000);
	if (cfg.default_timeout > cfg.max_timeout)
		config_fail("TT_DEVICE_DEFAULT_TIMEOUT", "%d is above TT_DEVICE_MAX_TIMEOUT (%d)",
			    cfg.default_timeout, cfg.max_timeout);
	cfg.silence_timeout = (int)env_int("TT_DEVICE_SILENCE_TIMEOUT", 0, 0, cfg.max_timeout);
	cfg.max_queued = env_int("TT_DEVICE_MAX_QUEUED_JOBS", 1000, 1, 10000000);
	cfg.max_log_bytes = env_int("TT_DEVICE_MAX_LOG_BYTES", 16LL << 20, 1024, 1LL << 50);
	cfg.max_log_read = env_int("TT_DEVICE_MAX_LOG_READ", 64 << 10, 1, 64 << 20);
	cfg.max_request_bytes = env_int("TT_DEVICE_MAX_REQUEST_BYTES", 1 << 20, 1, 1 << 30);
	/* accepted and ignored, as the man page says: a request is answered in the turn it is read */
	(void)env_int("TT_DEVICE_HTTP_WORKERS", 16, 1, 100000);
	cfg.max_connections = env_int("TT_DEVICE_MAX_CONNECTIONS", 1024, 1, 1000000);
	cfg.retention_days = env_int("TT_DEVICE_RETENTION_DAYS", 30, 0, 1000000);
	cfg.max_completed = env_int("TT_DEVICE_MAX_COMPLETED_JOBS", 10000, 0, 1LL << 40);
	cfg.max_repeat = env_int("TT_DEVICE_MAX_REPEAT", 10000, 1, 100000000);
	cfg.max_cmd_chars = env_int("TT_DEVICE_MAX_CMD_CHARS", 65536, 1, 1 << 30);
	cfg.stop_grace = env_seconds("TT_DEVICE_STOP_GRACE_SEC", 8, 0, 86400);
	cfg.reset_preempts = env_bool("TT_DEVICE_RESET_PREEMPTS_CURRENT", true);
	cfg.health_after_failure = env_bool("TT_DEVICE_HEALTH_AFTER_FAILURE", true);
	cfg.pids_dir = env_str("TT_DEVICE_PIDS_DIR", "/proc/driver/tenstorrent");
	cfg.admin_group = env_str("TT_DEVICE_ADMIN_GROUP", "");
	cfg.allow_anonymous = env_bool("TT_DEVICE_ALLOW_ANONYMOUS", false);
	cfg.reset_cmd = env_str("TT_DEVICE_RESET_CMD",
				"~/tenstorrent/.venv/bin/tt-smi -r /dev/tenstorrent/{device} --no_reinit");
	v = getenv("TT_DEVICE_HEALTH_CHECK_CMD");
	cfg.health_cmd = v ? xstrdup(v) : NULL; /* NULL: the default, set at start-up */
	cfg.deep_reset_cmd = env_str("TT_DEVICE_DEEP_RESET_CMD", "");
	cfg.reset_retries = env_int("TT_DEVICE_RESET_RETRIES", 1, 0, 1000);
	cfg.health_cmd_timeout = env_seconds("TT_DEVICE_HEALTH_CMD_TIMEOUT", 60, 0.001, 86400);
	cfg.oom_score_adj = env_int("TT_DEVICE_CHILD_OOM_SCORE_ADJ", 500, -1000, 1000);
	cfg.boot_id_file = env_str("TT_DEVICE_BOOT_ID_FILE", "/proc/sys/kernel/random/boot_id");
}

/* ------------------------------------------------------------------------ clocks */

static double mono_now; /* monotonic seconds, refreshed once per loop iteration */

static double
clock_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double
clock_wall(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ISO 8601 local time with offset, millisecond precision: 2026-11-30T14:07:40.123+01:00. */
static void
iso8601(double t, char *out, size_t cap)
{
	time_t sec = (time_t)floor(t);
	int ms = (int)((t - (double)sec) * 1000.0);
	struct tm tm;
	long off;
	size_t n;

	localtime_r(&sec, &tm);
	n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
	off = tm.tm_gmtoff;
	snprintf(out + n, cap - n, ".%03d%c%02ld:%02ld", ms > 999 ? 999 : ms, off < 0 ? '-' : '+',
		 labs(off) / 3600, labs(off) % 3600 / 60);
}

/* ------------------------------------------------------------------------ event loop */

/*
 * Watches: a pollfd array with a parallel array of callbacks. A removed watch is only marked
 * (fd -1, no callback), so no callback frees what the loop is walking; its slot is taken by
 * the next watch added, and the array shrinks when its last slots are free. An owner keeps its
 * watch's index in its `slot`, which never changes while the watch lives.
 */
typedef void (*watch_fn)(void *arg, short revents);

struct watch {
	watch_fn fn;
	void *arg;
};

static struct pollfd *pfds;
static struct watch *watches;
static int nwatch, capwatch;

/*
 * Room in the array *arr (cap elements of `size` bytes, n in use) for one more: doubled when
 * full. Out of memory aborts (die_oom): a lost watch, timer or answer would wedge a job or a
 * client.
 */
static void
grow(void *arr, int *cap, int n, size_t size)
{
	void **p = arr, *q;

	if (n < *cap)
		return;
	if (!(q = realloc(*p, size * (size_t)(n ? n * 2 : 32))))
		die_oom();
	*p = q;
	*cap = n ? n * 2 : 32;
}

/* Watch fd for events: fn(arg, revents) when they come. Its index, kept in *slot too. */
static int
watch_add(int fd, short events, watch_fn fn, void *arg, int *slot)
{
	int i = 0, cap = capwatch;

	while (i < nwatch && watches[i].fn)
		i++;
	grow(&pfds, &cap, i, sizeof(*pfds));
	grow(&watches, &capwatch, i, sizeof(*watches));
	/* revents 0: a slot freed in this pass is not dispatched the old descriptor's events */
	pfds[i] = (struct pollfd){.fd = fd, .events = events};
	watches[i] = (struct watch){.fn = fn, .arg = arg};
	nwatch += i == nwatch;
	*slot = i;
	return i;
}

static void
watch_events(int slot, short events)
{
	if (slot >= 0)
		pfds[slot].events = events;
}

static void
watch_del(int *slot)
{
	if (*slot < 0)
		return;
	pfds[*slot] = (struct pollfd){.fd = -1};
	watches[*slot].fn = NULL;
	*slot = -1;
	while (nwatch > 0 && !watches[nwatch - 1].fn)
		nwatch--;
}

/*
 * Timers: an unordered array of the armed ones. Every timer of the daemon lives here and the
 * earliest one is the poll timeout. Finding it is a walk over the armed timers, as poll() walks
 * every watch anyway: a few per running job and one per connection.
 */
typedef void (*timer_fn)(void *arg);

struct timer {
	double when; /* monotonic seconds */
	int idx;     /* index in timers[], -1 when not armed */
	timer_fn fn;
	void *arg;
};

static struct timer **timers;
static int ntimer, captimer;

static void
timer_init(struct timer *t, timer_fn fn, void *arg)
{
	t->idx = -1;
	t->fn = fn;
	t->arg = arg;
}

static void
timer_stop(struct timer *t)
{
	int i = t->idx;

	if (i < 0)
		return;
	timers[i] = timers[--ntimer];
	timers[i]->idx = i;
	t->idx = -1;
}

/* Arm (or re-arm) t for monotonic time `when`. Aborts on ENOMEM: a lost timer would wedge. */
static void
timer_set(struct timer *t, double when)
{
	t->when = when;
	if (t->idx >= 0)
		return;
	grow(&timers, &captimer, ntimer, sizeof(*timers));
	t->idx = ntimer;
	timers[ntimer++] = t;
}

static bool
timer_armed(const struct timer *t)
{
	return t->idx >= 0;
}

/* The armed timer due first, or NULL. */
static struct timer *
timer_first(void)
{
	struct timer *first = NULL;
	int i;

	for (i = 0; i < ntimer; i++)
		if (!first || timers[i]->when < first->when)
			first = timers[i];
	return first;
}

/* Fire every timer that is due, earliest first. */
static void
timers_run(void)
{
	struct timer *t;

	while ((t = timer_first()) && t->when <= mono_now) {
		timer_stop(t);
		t->fn(t->arg);
	}
}

/* Milliseconds until the earliest timer (rounded up so it has passed on wake-up), or -1. */
static int
timers_timeout(void)
{
	struct timer *t = timer_first();
	double ms;

	if (!t)
		return -1;
	ms = ceil((t->when - clock_mono()) * 1000.0);
	return (int)fmin(fmax(ms, 0), INT_MAX);
}

/* ------------------------------------------------------------------------ daemon state */

enum stop_reason {
	STOP_NONE = 0, STOP_KILL, STOP_TIMEOUT, STOP_SHUTDOWN, STOP_PREEMPT,
	STOP_HUNG, /* its silence watchdog fired (a lease: its heartbeat lapsed) */
	STOP_RELEASE, /* a lease's release */
};

struct client;

/* An active job: one not forgotten yet (job.phase says where it is). */
/* A process outside the queue a job met on its cards, and since when (holders_note). */
struct seen_holder {
	struct proc_holder h;
	double since;
};

/*
 * What the last look at a card found (look_holders): the processes outside the queue that
 * have it open, each with when it was first seen, and whether its pids file could be read.
 */
static struct card_look {
	struct proc_holder h[MAX_HOLDERS];
	double since[MAX_HOLDERS]; /* wall-clock s it was first seen */
	int n;                     /* how many hold it now (the first MAX_HOLDERS kept) */
	bool watched;              /* its pids file could be read */
} looks[MAX_CARDS];

/* What a job needs only once it started (struct active's watch): a queued job costs none of it. */
struct job_watch {
	struct timer deadline;   /* the whole job's timeout (a reset's: its command's) */
	struct timer proc_timer; /* the process's one deadline (proc_job_timeout) */
	/* The silence watchdog (job_silence_fired): without it a job hung without a word holds
	 * its card until its timeout, an hour by default. Armed only while a run job runs, and
	 * as a lease's heartbeat from its submission on (renewals count as output). */
	struct timer silence;
	double last_output_mono; /* when its output last arrived; its start before any */
	/* processes outside the queue seen on its cards while it ran (holders_note) */
	struct seen_holder seen[MAX_SEEN];
	int nseen;
};

struct active {
	struct job job;
	struct card *card;
	struct active *anext; /* in actives */
	struct proc_job *proc; /* its process (proc.c), made at its first spawn, else NULL */
	int out_slot;          /* watch slot of the process's output pipe */
	struct capfile log;    /* log.fd -1 when not open */
	double started_mono;      /* when the job started */
	double iter_started_mono; /* when the current process started */
	struct job_watch *watch; /* made when it starts (watch_of), NULL while queued */
	int stop;                 /* enum stop_reason: why it is stopping, else STOP_NONE */
	int late_stop;            /* one that came after the shell ended (iteration_done) */
	struct client *waiters;   /* held /result and /logs long-polls */
	char **envp;              /* a run job's environment, kept for its iterations */
	char *env_block;          /* the strings envp added (job_env) */
	char *start_error;        /* why its process could not chdir or exec, else NULL */
	bool no_env;              /* submitted without env: nothing to read back at start */
	/* reset jobs (mode reset): the procedure's position */
	struct reset_ladder ladder;
};

/* The active record around a scheduler job (struct job is its first member). */
static struct active *
active_of(struct job *j)
{
	return (struct active *)(void *)j;
}

/* A vector of pointers, for the per-iteration work lists. */
struct vec {
	void **v;
	int n, cap;
};

static void
vec_push(struct vec *x, void *p)
{
	grow(&x->v, &x->cap, x->n, sizeof(*x->v));
	x->v[x->n++] = p;
}

/* A submission answered 200 in this iteration: rewritten to 503 if the commit fails. */
struct ack {
	struct http_conn *conn;
	struct active *a;
	bool replay; /* the answer to a second submission with a's idempotency key */
};

static struct {
	struct sched sched;
	struct store *store;
	struct vec dirty;    /* actives with job.dirty set; a done one is freed once committed */
	struct vec spawn;    /* actives to start after commit */
	struct ack *acks;
	int nacks, capacks;
	bool cards_dirty;
	double prev_last_write; /* store_last_write at the store's open: the previous instance's */
	bool degraded;
	char degraded_reason[512];
	char maintenance_warning[512];
	struct timer store_retry, retention, shutdown_deadline;
	double linger_until; /* monotonic end of the answers after the jobs stopped */
	bool shutting_down;
	double heartbeat_mono;
	char boot_id[64];
	bool boot_known; /* boot_id was read; else dead cards are not revived (same_boot) */
	char *health_check_path; /* the embedded script's file when no copy is beside us */
	bool health_script_written; /* that file is complete (write_health_script) */
	int listen_fd; /* http.c's from serve_main's http_server_listen on */
	int sig_fd, sig_slot;
	mode_t job_umask; /* the umask serve was started with, restored for jobs */
	bool nofile_raised; /* raise_fd_limit raised ours: jobs get job_nofile back */
	rlim_t job_nofile;  /* the RLIMIT_NOFILE soft limit serve was started with */
	struct store_dir *dir;  /* the log dir, locked (prepare_log_dir); NULL before it is */
	struct timer dir_check; /* looks for a log dir removed, where inotify cannot tell */
	int dir_notify_slot; /* the poll slot of the log dir's inotify watch (dir_watch) */
	bool dir_watched;    /* inotify watches it; else dir_check looks on a timer */
	struct http_server *http; /* the client connections */
	long long held;       /* long-polls held now (hold, waiter_unlink) */
	/* Who may do what. Host mode (serve runs as root): every local user submits, and each
	 * job runs as its submitter; personal mode: only self_uid and root may use the queue. */
	bool host_mode;
	uid_t self_uid;
	gid_t admin_gid;       /* of cfg.admin_group, when has_admin_gid */
	bool has_admin_gid;
} D = {.listen_fd = -1, .sig_fd = -1, .sig_slot = -1,
       .dir_notify_slot = -1};

/*
 * The daemon's own log is stderr, and writing it never blocks the loop: a parent that reads
 * nothing of a pipe, or a stalled journal, would otherwise stop HTTP, dispatch and SIGTERM
 * with it once the pipe is full. Lines that cannot be written now are dropped and counted;
 * the count is logged once a line gets out again, and /metrics shows the total.
 */
static struct {
	bool socket;            /* stderr is a socket: sent with MSG_DONTWAIT */
	long long dropped;      /* lines dropped since the start */
	long long unsaid;       /* of them, not yet reported in the log */
} log_out;

/*
 * Make stderr non-blocking for this process alone. O_NONBLOCK belongs to the open file
 * description, which a pipe or terminal shares with whoever started us: a pipe or terminal is
 * opened again through /proc/self/fd/2 (a description of our own, then put on fd 2 so the
 * guardian and any stdio use it too); a socket cannot be, and is written with MSG_DONTWAIT
 * instead. A regular file is left as it is: writes to it do not wait for a reader.
 */
static void
log_setup(void)
{
	struct stat st;
	int fd;

	fstat(STDERR_FILENO, &st); /* open, if only on /dev/null (stdio_open) */
	log_out.socket = S_ISSOCK(st.st_mode);
	if (!S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode))
		return;
	fd = open("/proc/self/fd/2", O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return; /* a pipe without a reader (ENXIO): writes fail at once anyway */
	dup2(fd, STDERR_FILENO); /* fd is above 2: stdio_open left none of 0-2 free */
	close(fd);
}

static void __attribute__((format(printf, 1, 2)))
logmsg(const char *fmt, ...)
{
	char buf[2176];
	va_list ap;
	int k = 0, n;

	/* the count of the lines dropped before goes out first, in the same write */
	if (log_out.unsaid > 0)
		k = snprintf(buf, 128, "tt-device-queue: %lld log lines were dropped: stderr was "
			     "not taking them\n", log_out.unsaid);
	va_start(ap, fmt);
	n = vsnprintf(buf + k, 2047, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	n = k + (n > 2046 ? 2046 : n);
	buf[n++] = '\n';
	/* the line whole, without waiting (log_setup), or it counts as dropped */
	if ((log_out.socket ? send(STDERR_FILENO, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL)
			    : write(STDERR_FILENO, buf, (size_t)n)) == n) {
		log_out.unsaid = 0;
		return;
	}
	log_out.unsaid++;
	log_out.dropped++;
}

static bool
card_known(const struct card *c)
{
	return c >= D.sched.cards && c < D.sched.cards + D.sched.ncards;
}

static int
card_index(const struct card *c)
{
	return (int)(c - D.sched.cards);
}

/* The job's output file path (heap), as records give it. */
static char *
job_output_path(const char *id)
{
	char *p = store_output_path(D.dir, id);

	if (!p)
		die_oom();
	return p;
}

/* 128 bits from the kernel's random source as 32 lowercase hex characters. */
static int
new_job_id(char out[33])
{
	unsigned char r[16];
	int i;

	/* up to 256 bytes come whole and are not interrupted (getrandom(2)) */
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return -1;
	for (i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", r[i]);
	return 0;
}

/*
 * Every active job, in one list, for lookups by id: a walk over at most the queued jobs
 * (TT_DEVICE_MAX_QUEUED_JOBS) and one running job per card costs microseconds per request.
 */
static struct active *actives;

static struct active *
active_find(const char *id)
{
	struct active *a;

	for (a = actives; a; a = a->anext)
		if (memcmp(a->job.id, id, 32) == 0)
			return a;
	return NULL;
}

static void job_timeout_fired(void *arg);
static void job_silence_fired(void *arg);
static void job_proc_timer_fired(void *arg);

static struct active *
active_new(void)
{
	struct active *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	sched_job_init(&a->job);
	a->out_slot = -1;
	a->log.fd = -1;
	a->anext = actives;
	actives = a;
	return a;
}

/* Forget a: a walk to its place in actives, as short as a lookup (active_find). */
static void
active_free(struct active *a)
{
	struct active **p = &actives;

	sched_job_transition(&a->job, JOB_PHASE_FORGOTTEN);
	while (*p != a)
		p = &(*p)->anext;
	*p = a->anext;
	if (a->watch) {
		timer_stop(&a->watch->deadline);
		timer_stop(&a->watch->silence);
		timer_stop(&a->watch->proc_timer);
	}
	proc_job_free(a->proc); /* finished: it has no process */
	if (a->log.fd >= 0)
		close(a->log.fd);
	free(a->envp);
	free(a->env_block);
	free(a->start_error);
	free(a->watch);
	sched_job_clear(&a->job);
	free(a);
}

/* a's watch, made on first use (zeroed, its timers ready); out of memory aborts, as the
 * loop's own lists do: a started job without its timers would run unbounded. */
static struct job_watch *
watch_of(struct active *a)
{
	if (a->watch)
		return a->watch;
	if (!(a->watch = calloc(1, sizeof(*a->watch))))
		die_oom();
	timer_init(&a->watch->deadline, job_timeout_fired, a);
	timer_init(&a->watch->proc_timer, job_proc_timer_fired, a);
	timer_init(&a->watch->silence, job_silence_fired, a);
	return a->watch;
}

/*
 * Start a lease's heartbeat (when it has one) from now: at its submission, and at the start
 * of a daemon that found it queued. It runs while the lease waits too: a client that died
 * before its lease started must not leave it to take the cards from the queue behind it.
 */
static void
heartbeat_arm(struct active *a)
{
	if (a->job.mode != JOB_MODE_LEASE || a->job.silence_timeout <= 0)
		return;
	watch_of(a)->last_output_mono = mono_now;
	timer_set(&a->watch->silence, mono_now + a->job.silence_timeout);
}

static void
mark_dirty(struct active *a)
{
	if (!a->job.dirty) {
		a->job.dirty = true;
		vec_push(&D.dirty, a);
	}
}

static void
card_dirty(struct card *c)
{
	c->dirty = true;
	D.cards_dirty = true;
}

/* ------------------------------------------------------------------------ JSON rendering */

static void
w_time(struct json_w *w, const char *key, double t)
{
	char buf[64];

	json_w_key(w, key);
	if (isnan(t)) {
		json_w_null(w);
		return;
	}
	iso8601(t, buf, sizeof(buf));
	json_w_cstr(w, buf);
}

static void
w_device(struct json_w *w, int device)
{
	char buf[16];

	json_w_key(w, "device_id");
	snprintf(buf, sizeof(buf), "%d", device);
	json_w_cstr(w, buf);
}

/* "card 0", or "cards 0,1" for a job of several, into buf (for log lines and messages). */
static const char *
job_cards(const struct job *j, char *buf, size_t cap)
{
	size_t n;
	int i;

	n = (size_t)snprintf(buf, cap, "card%s %d", j->nmore ? "s" : "", j->device);
	for (i = 0; i < j->nmore && n < cap; i++)
		n += (size_t)snprintf(buf + n, cap - n, ",%d", j->more[i].device);
	return buf;
}

static void
w_num(struct json_w *w, const char *key, double v)
{
	json_w_key(w, key);
	json_w_num(w, v);
}

static void
w_int(struct json_w *w, const char *key, long long v)
{
	json_w_key(w, key);
	json_w_int(w, v);
}

static void
w_bool(struct json_w *w, const char *key, bool v)
{
	json_w_key(w, key);
	json_w_bool(w, v);
}

static void
w_str(struct json_w *w, const char *key, const char *s)
{
	json_w_key(w, key);
	json_w_cstr(w, s);
}

/* key: v when has, else null. */
static void
w_int_or_null(struct json_w *w, const char *key, bool has, long long v)
{
	json_w_key(w, key);
	if (has)
		json_w_int(w, v);
	else
		json_w_null(w);
}

/*
 * "alice" for uid, its number when unknown, "an unknown user" for -1; in a static buffer,
 * valid until the next call. The name is read once a loop turn: /status names the owner of
 * every listed job, and a read of /etc/passwd for each of 1000 jobs tripled its time.
 */
static const char *
user_of(long long uid)
{
	static char name[64];
	static long long cached = -1;
	static double turn = -1;

	if (uid < 0)
		return "an unknown user";
	if (uid != cached || turn != mono_now)
		proc_user_name((uid_t)uid, name, sizeof(name));
	cached = uid;
	turn = mono_now;
	return name;
}

/* One holder as a JSON object: pid, uid, user, command, since. */
static void
w_holder(struct json_w *w, const struct proc_holder *h, double since)
{
	char user[64];

	json_w_obj(w);
	w_int(w, "pid", h->pid);
	w_int_or_null(w, "uid", h->uid != (uid_t)-1, h->uid);
	w_str(w, "user", h->uid == (uid_t)-1 ? NULL : proc_user_name(h->uid, user, sizeof(user)));
	w_str(w, "command", h->cmd);
	w_time(w, "since", since);
	json_w_obj_end(w);
}

static char *
timeout_message(const struct job *j)
{
	return xasprintf("Job timed out after %d seconds and was stopped (SIGINT, then SIGKILL after "
			 "the grace)", j->timeout);
}

static long long
current_log_size(const struct active *a)
{
	return a->log.fd >= 0 ? a->log.size : a->job.log_size;
}

/*
 * The bytes of live job a's output a reader may take now: all but a character still being
 * written (a valid but incomplete UTF-8 sequence at the file's end). Without it a character
 * split across two writes with a pause between reaches `run` as two U+FFFD.
 */
static long long
log_readable(const struct active *a)
{
	long long size = current_log_size(a);
	int k = size < 3 ? (int)size : 3;
	char t[4] = "\n"; /* a character before the tail, so the tail alone can be backed over */

	if (a->log.fd < 0 || k == 0 || pread(a->log.fd, t + 1, (size_t)k, size - k) != k)
		return size;
	return size - k + (long long)json_utf8_boundary(t, (size_t)k + 1) - 1;
}

/*
 * The answers that show a job, each a selection of its fields (render_job): its record (GET
 * /job and /result, meta.json), its summary (the lists of /status, kill answers) and the
 * answer to its submission (POST /queue).
 */
enum view_kind { V_REC, V_SUM, V_SUB };

/* What an answer shows of a job besides its record; rendering never writes to the record. */
struct view {
	enum view_kind kind;
	const struct active *a;  /* the live job, or NULL for a stored record */
	const char *output_file; /* a stored record's, else NULL (made from the id) */
	double now;              /* wall-clock s */
	double wait;             /* V_SUM: a queued job's planned wait (NAN: none); V_SUB: its wait */
	int position;            /* V_SUB: its place in its queue */
	bool replay;             /* V_SUB: the answer to a submission with a known key */
};

/*
 * The live fields: place, waits and running time of a job not done yet; a submission's
 * answer, whatever the job's status, its place and waits and whether it is a replay.
 */
static void
w_live(struct json_w *w, const struct job *j, const struct view *v)
{
	bool rec = v->kind == V_REC, queued = j->status == JOB_QUEUED;
	double wait = v->wait;
	int dev = -1;
	enum card_blocker why;

	if (rec && (!v->a || j->status == JOB_DONE))
		return;
	if (rec) /* a running one: place and wait 0 */
		wait = queued ? sched_queued_wait(&D.sched, j, v->now) : 0;
	if (v->kind != V_SUM)
		w_int(w, "position", !rec ? v->position
				   : queued ? sched_queued_position(&D.sched, j) : 0);
	if (!isnan(wait))
		w_num(w, "estimated_wait_sec", wait);
	if (v->kind == V_SUB) {
		w_num(w, "estimated_run_sec", sched_job_estimate(j, 0));
		if (v->replay)
			w_bool(w, "replayed", true);
		return;
	}
	w_num(w, "estimated_remaining_sec", sched_job_estimate(j, v->now) + (rec ? wait : 0));
	if (j->status == JOB_RUNNING)
		w_num(w, "running_sec", isnan(j->started_at) ? 0 : v->now - j->started_at);
	if (!rec && queued && sched_job_ncards(j) > 1 &&
	    (why = sched_job_blocker(&D.sched, j, &dev)) != BLOCKER_NONE) {
		json_w_key(w, "waiting_for"); /* its other cards look idle: say why they wait */
		json_w_obj(w);
		w_device(w, dev);
		w_str(w, "reason", sched_blocker_name(why));
		json_w_obj_end(w);
	}
}

/* Job j as the object view v shows. */
static void
render_job(struct json_w *w, const struct job *j, const struct view *v)
{
	bool rec = v->kind == V_REC, sum = v->kind == V_SUM, sub = v->kind == V_SUB;
	/* A summary is short, /status lists every queued job: its end once done, else its stop
	 * and waits. A record has all, a submission's answer no end. */
	bool end = rec || (sum && j->status == JOB_DONE), live = !sum || j->status != JOB_DONE;
	const struct capfile *log = v->a && v->a->log.fd >= 0 ? &v->a->log : NULL;
	const char *holders = j->foreign_holders ? j->foreign_holders : "null";
	char *out = NULL, buf[16];
	size_t n = strlen(j->cmd);
	int i;

	json_w_obj(w);
	w_str(w, "job_id", j->id);
	w_device(w, j->device); /* the first (what clients of one card read), then all, ascending */
	json_w_key(w, "device_ids");
	json_w_arr(w);
	for (i = 0; i < sched_job_ncards(j); i++) {
		snprintf(buf, sizeof(buf), "%d", sched_job_device(j, i));
		json_w_cstr(w, buf);
	}
	json_w_arr_end(w);
	w_str(w, "status", sched_status_name(j->status));
	w_str(w, "mode", sched_mode_name(j->mode));
	if (!sub) { /* in a summary the owner's name alone and the command cut */
		w_str(w, "client_id", j->client_id);
		w_str(w, "owner", j->owner_uid < 0 ? NULL : user_of(j->owner_uid));
		if (rec)
			w_int_or_null(w, "owner_uid", j->owner_uid >= 0, j->owner_uid);
		json_w_key(w, "cmd");
		json_w_str(w, j->cmd, sum && n > SUMMARY_CMD_CHARS
					 ? json_utf8_boundary(j->cmd, SUMMARY_CMD_CHARS) : n);
	}
	if (rec)
		w_str(w, "cwd", j->cwd);
	if (!sum)
		w_int(w, "timeout", j->timeout);
	if (rec)
		w_int(w, "silence_timeout", j->silence_timeout);
	w_int(w, "repeat", j->repeat);
	if (!sub) {
		w_int(w, "repeat_current", j->repeat_current);
		w_int(w, "repeat_completed", j->repeat_completed);
	}
	if (rec) {
		w_num(w, "first_iteration_elapsed", j->first_iteration_elapsed);
		w_num(w, "per_iter_estimate_sec", j->per_iter_estimate);
	}
	if (!sub) {
		w_time(w, "submitted_at", j->submitted_at);
		w_time(w, "started_at", j->started_at);
	}
	if (end)
		w_time(w, "finished_at", j->finished_at);
	if (!sum) {
		out = v->output_file ? NULL : job_output_path(j->id);
		w_str(w, "output_file", v->output_file ? v->output_file : out);
	}
	if (end) { /* end_reason and signal null until it ended, or in a record older than them */
		w_int_or_null(w, "exit_code", j->has_exit_code, j->exit_code);
		w_str(w, "end_reason", sched_end_name(j->end_reason));
		w_int_or_null(w, "signal", j->end_signal != 0, j->end_signal);
		w_num(w, "elapsed", j->elapsed);
		w_bool(w, "timed_out", j->timed_out);
	}
	if (rec) { /* a running job's as its output file has them now */
		w_int(w, "log_size", log ? log->size : j->log_size);
		w_bool(w, "log_truncated", log ? log->dropped > 0 : j->log_truncated);
		w_int(w, "dropped_log_bytes", log ? log->dropped : j->dropped_log_bytes);
	}
	if (end)
		w_str(w, "error", j->error);
	if (rec)
		w_int(w, "reset_epoch", j->reset_epoch);
	if (rec || (sub && j->idempotency_key)) /* an answer to POST /queue: when given */
		w_str(w, "idempotency_key", j->idempotency_key);
	if (rec) { /* as JSON: met on its cards while it ran (holders_note), else null */
		json_w_key(w, "foreign_holders");
		json_w_raw(w, holders, strlen(holders));
		free(out);
		out = j->timed_out ? timeout_message(j) : NULL;
		w_str(w, "timeout_message", out);
	}
	if (!sub && live && !isnan(j->stop_requested_at)) /* in its kill grace: "stopping" */
		w_time(w, "stop_requested_at", j->stop_requested_at);
	if (live)
		w_live(w, j, v);
	json_w_obj_end(w);
	free(out);
}

/* A job's summary for /status lists and kill answers; wait (when not NAN) for queued ones. */
static void
render_summary(struct json_w *w, const struct job *j, double now, double wait)
{
	struct view v = {.kind = V_SUM, .now = now, .wait = wait};

	render_job(w, j, &v);
}

/* The record of a live job (a) or of a stored one (j, its output_file). */
static void
render_record(struct json_w *w, const struct job *j, const struct active *a,
	      const char *output_file)
{
	struct view v = {.kind = V_REC, .a = a, .output_file = output_file, .now = clock_wall()};

	render_job(w, a ? &a->job : j, &v);
}

/* ------------------------------------------------------------------------ connections */

/*
 * A client connection as this file sees it: http.c's connection, the loop's watch and timer
 * for it, and the long-poll it may hold on an active job.
 */
enum held_kind { HELD_NONE = 0, HELD_RESULT, HELD_LOGS, HELD_JOB /* until it is not queued */ };

struct client {
	struct http_conn *http;
	long long uid;      /* the caller, as the kernel names it; -1 unknown, UID_UNASKED */
	int slot;           /* watch slot of its socket */
	struct timer timer; /* the deadline http.c asked for */
	int held;           /* enum held_kind */
	unsigned long long held_offset, held_limit;
	struct active *held_on;
	struct client *wnext; /* in held_on->waiters */
};

static struct json_buf body_buf; /* scratch for response bodies */

/*
 * A client's uid until its first request asks the kernel (caller_allowed); asked then, not at
 * accept, so a lookup short of a descriptor can answer "ask again" instead of "unknown caller".
 */
#define UID_UNASKED (-2LL)


static void
respond_json(struct http_conn *c, int status, const struct json_buf *b, const char *extra)
{
	static const char oom[] = "{\"error\": \"out of memory\"}";

	if (b->oom) /* the body could not be built whole */
		http_conn_respond(c, 500, "application/json; charset=utf-8", oom, sizeof(oom) - 1, NULL);
	else
		http_conn_respond(c, status, "application/json; charset=utf-8", b->p, b->len, extra);
}

static struct json_w
body_begin(void)
{
	struct json_w w;

	body_buf.len = 0;
	body_buf.oom = 0;
	json_w_init(&w, &body_buf);
	return w;
}

/* The error answers without extra header lines: {"error": the message fmt makes}. */
#define respond_error(c, status, ...) http_conn_error(c, status, NULL, __VA_ARGS__)

/* cl no longer waits: a walk to its place among its job's waiters, at their head when all of
 * them are released at once (waiters_wake). */
static void
waiter_unlink(struct client *cl)
{
	struct client **p;

	if (!cl->held_on)
		return;
	for (p = &cl->held_on->waiters; *p != cl; p = &(*p)->wnext)
		;
	*p = cl->wnext;
	cl->held_on = NULL;
	D.held--;
}

/* ---- who may do what */

/*
 * The user a request acts as: its caller as the kernel names it; for an anonymous caller let
 * in (TT_DEVICE_ALLOW_ANONYMOUS), the service's user in personal mode and nobody (-1) in host
 * mode, where an anonymous caller only reads.
 */
static long long
acting_uid(struct http_conn *c)
{
	long long uid = ((struct client *)http_conn_owner(c))->uid;

	return uid >= 0 ? uid : D.host_mode ? -1 : (long long)D.self_uid;
}

/* Whether uid may act on every job and card: root; the service's user in personal mode; in
 * host mode a member of TT_DEVICE_ADMIN_GROUP. */
static bool
is_admin(long long uid)
{
	struct proc_user u;

	if (uid == 0 || (!D.host_mode && uid == (long long)D.self_uid))
		return true;
	return D.host_mode && D.has_admin_gid && uid > 0 && proc_user_lookup((uid_t)uid, &u) == 0 &&
	       proc_user_in_group(&u, D.admin_gid);
}


/*
 * Whether the caller of c may `what` ("kill", "read the output of", ...) job j: its owner or
 * an admin. Answers 403 naming the rule and returns false when not.
 */
static bool
may_act_on(struct http_conn *c, const struct job *j, const char *what)
{
	long long uid = acting_uid(c);
	char owner[64];

	if ((uid >= 0 && uid == j->owner_uid) || is_admin(uid))
		return true;
	snprintf(owner, sizeof(owner), "%s", user_of(j->owner_uid));
	respond_error(c, 403, "Job %s belongs to %s: only its owner or an admin (root%s%s) may %s "
		      "it; you are %s", j->id, owner,
		      *cfg.admin_group ? " or a member of group " : "", cfg.admin_group, what,
		      user_of(uid));
	return false;
}

/* Whether the caller of c is an admin; else 403 saying who may `what` and false. */
static bool
admin_only(struct http_conn *c, const char *what)
{
	if (is_admin(acting_uid(c)))
		return true;
	respond_error(c, 403, "Only an admin (root%s%s) may %s; you are %s",
		      *cfg.admin_group ? " or a member of group " : "", cfg.admin_group, what,
		      user_of(acting_uid(c)));
	return false;
}

/*
 * Whether c's caller may use this queue at all: in personal mode its user and root; in host
 * mode every local user (an anonymous caller let in only reads). Answers 403 and returns
 * false when not, or the busy 503 when no descriptor is left to ask the kernel who calls.
 */
static bool
caller_allowed(struct http_conn *c, const struct http_request *req)
{
	struct client *cl = http_conn_owner(c);
	long long uid;
	char self[64];
	uid_t peer;

	if (cl->uid == UID_UNASKED) {
		if (proc_peer_uid(pfds[cl->slot].fd, &peer) == 0)
			cl->uid = peer;
		else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
			/* a loaded service refusing its own users as strangers: they are asked again */
			http_conn_error(http_conn_busy(c), 503, RETRY_AFTER, "No descriptor or "
					"memory left to identify the caller (%s; the service's "
					"open-file limit): ask again", strerror(errno));
			return false;
		} else
			cl->uid = -1;
	}
	uid = cl->uid;
	if (uid < 0 && !cfg.allow_anonymous) {
		respond_error(c, 403, "The caller cannot be identified (a connection from another host "
			      "or network namespace): this queue serves the local users it can name; "
			      "TT_DEVICE_ALLOW_ANONYMOUS=true lets anonymous callers in");
		return false;
	}
	if (uid < 0 && D.host_mode && !(req->method_len == 3 && memcmp(req->method, "GET", 3) == 0)) {
		respond_error(c, 403, "An anonymous caller may only read a host-wide queue: every job "
			      "runs as the user who submitted it");
		return false;
	}
	if (D.host_mode || uid < 0 || uid == 0 || uid == (long long)D.self_uid)
		return true;
	snprintf(self, sizeof(self), "%s", user_of(D.self_uid));
	respond_error(c, 403, "This is %s's own tt-device-queue (a personal service): only %s and "
		      "root may use it, and you are %s. The host-wide queue (sudo ./install.sh "
		      "--system) serves every user", self, self, user_of(uid));
	return false;
}

/* ---- http.c's callbacks and the loop's events for a client */

static void
client_watch(struct http_conn *c, short events, double deadline)
{
	struct client *cl = http_conn_owner(c);

	watch_events(cl->slot, events);
	if (deadline > 0)
		timer_set(&cl->timer, deadline);
	else
		timer_stop(&cl->timer);
}

static void
client_closed(struct http_conn *c)
{
	struct client *cl = http_conn_owner(c);

	waiter_unlink(cl);
	timer_stop(&cl->timer);
	watch_del(&cl->slot);
	free(cl);
}

/* A connection accepted, or the listener: its client, its watch and timer set as it asks. */
static void *
client_opened(struct http_conn *c, int fd)
{
	struct client *cl = calloc(1, sizeof(*cl));

	if (cl) {
		cl->http = c;
		cl->uid = UID_UNASKED;
		timer_init(&cl->timer, http_conn_timeout, c);
		watch_add(fd, 0, http_conn_event, c, &cl->slot);
	}
	return cl;
}

/* ------------------------------------------------------------------------ request parsing */

static struct json_tok toks[MAX_TOKENS];

static void job_stop(struct active *a, int reason);
static void job_finish(struct active *a, int why, int exit_code, const char *error,
		       const char *trailer);

/* Words that are no misspelling of the body member or query parameter they mean. */
static const char *const synonyms[][2] = {
    {"card", "device_id"}, {"card", "device"}, {"command", "cmd"}, {NULL, NULL}};

/* the body of the request being handled (parse_body) */
static struct json_doc doc = {.synonyms = synonyms};

/* Answer the body's last failed check (doc.why, doc.status); -1. */
static int
doc_refuse(struct http_conn *c)
{
	respond_error(c, doc.status, "%s", doc.why);
	return -1;
}

/* Parse a request body that must be a JSON object, with only known members; -1 answered. */
static int
parse_body(struct http_conn *c, const char *body, size_t len, const char *const *known)
{
	if (json_doc_parse(&doc, body, len, toks, MAX_TOKENS) < 0 || json_doc_known(&doc, known) < 0)
		return doc_refuse(c);
	return 0;
}

static void
list_cards(char *out, size_t cap)
{
	size_t n = 0;
	int i;

	out[0] = '\0';
	for (i = 0; i < D.sched.ncards && n < cap; i++)
		n += (size_t)snprintf(out + n, cap - n, "%s%d", i ? ", " : "", D.sched.cards[i].device);
}

/*
 * The member `key` of the body naming a target (device_id, job_id): its token, -1 when
 * absent, or -2 (answered 400) when it is null. Null must not stand for the default: a client
 * that meant a card and sent null would have its job run on card 0, beside whoever uses that
 * one, and a reset for a job id that came out null would reset every card.
 */
static int
target_member(struct http_conn *c, const char *body, const char *key)
{
	int i = json_obj_get(body, toks, 0, key);

	if (i >= 0 && toks[i].type == JSON_NULL) {
		respond_error(c, 400, "%s must be a value, not null", key);
		return -2;
	}
	return i;
}

static int
device_member(struct http_conn *c, const char *body)
{
	return target_member(c, body, "device_id");
}

/*
 * The card named by token i, the value of field `key` (device_id, or an element of
 * device_ids): a string of at most 7 digits or such a non-negative integer; card 0 when i is
 * -1 (device_id absent). Answers 400 and returns NULL when it is no card number or not
 * configured.
 */
static struct card *
card_named(struct http_conn *c, const char *body, int i, const char *key)
{
	char buf[8] = "", list[512];
	size_t n = i < 0 ? 0 : json_str_decode(body, &toks[i], buf, sizeof(buf) - 1);
	long long dev = -1;
	struct card *card;

	if (i < 0)
		dev = 0;
	else if (toks[i].type == JSON_NUMBER && json_tok_int(body, &toks[i], &dev) < 0)
		dev = -1;
	else if (n > 0 && n < sizeof(buf) && strspn(buf, "0123456789") == n)
		dev = atoll(buf);
	if (dev < 0 || dev > 9999999) {
		respond_error(c, 400, "%s must be a card number (a string of digits or a "
				      "non-negative integer)", key);
		return NULL;
	}
	card = sched_card(&D.sched, (int)dev);
	if (!card) {
		list_cards(list, sizeof(list));
		respond_error(c, 400, "Unknown %s %lld; configured queues: %s", key, dev, list);
	}
	return card;
}

/* The card named by device_id field i; answers 400 and returns NULL when not configured. */
static struct card *
card_from_field(struct http_conn *c, const char *body, int i)
{
	return card_named(c, body, i, "device_id");
}

/* 1 when UTF-8 text s holds a C0 or C1 control character or DEL. */
static bool
has_control(const char *s)
{
	size_t n = strlen(s), i;

	for (i = 0; i < n; i++)
		if (json_control_len(s + i, n - i))
			return true;
	return false;
}

/*
 * The env object, when given, into *out (heap; else NULL) as the body wrote it: at most
 * MAX_ENV_ENTRIES strings, their names non-empty without '=' or NUL, their values without
 * NUL, MAX_ENV_BYTES in all, each NAME=value one that exec takes. 0, or -1 answered 400.
 */
static int
env_field(struct http_conn *c, const char *body, char **out)
{
	int i = json_doc_field(&doc, "env"), k, m;
	size_t total = 0;
	const char *why = NULL;

	*out = NULL;
	if (i < 0)
		return 0;
	if (toks[i].type != JSON_OBJECT)
		why = "env must be an object of strings";
	else if (toks[i].size > MAX_ENV_ENTRIES)
		why = "env has more than 256 entries";
	for (k = i + 1, m = 0; !why && m < (int)toks[i].size; m++, k = (int)toks[k + 1].next) {
		int nul1, nul2;
		char *name = json_str_dup(body, &toks[k], &nul1), *val = NULL;

		if (toks[k + 1].type != JSON_STRING)
			why = "env values must be strings";
		else if (!name || !(val = json_str_dup(body, &toks[k + 1], &nul2)))
			why = "out of memory";
		else if (!name[0] || strchr(name, '=') || nul1)
			why = "env names must be non-empty without '=' or NUL";
		else if (nul2)
			why = "env values must not contain NUL";
		else if ((total += strlen(name) + strlen(val) + 2) > MAX_ENV_BYTES)
			why = "env is larger than 256 KiB";
		else if (strlen(name) + strlen(val) + 2 +
			 (strcmp(name, "PYTHONPATH") == 0 ? 2 : 0) > MAX_EXEC_STRING) /* ".:" added */
			why = "an env entry (NAME=value) must be under 128 KiB in UTF-8; Linux runs "
			      "no job with a longer one (MAX_ARG_STRLEN)";
		free(name);
		free(val);
	}
	if (!why && !(*out = strndup(body + toks[i].start, toks[i].end - toks[i].start)))
		why = "out of memory";
	if (why) {
		respond_error(c, 400, "%s", why);
		return -1;
	}
	return 0;
}

static const char DEAD_REFUSAL[] = "is dead: it needs a host reboot or operator recovery";

/* Why the card cannot take work now (503), or NULL. */
static const char *
refuse_reason(const struct card *card)
{
	if (D.shutting_down)
		return "The service is shutting down";
	if (card && card->state == CARD_DEAD)
		return DEAD_REFUSAL;
	if (D.degraded)
		return "The job store is degraded";
	return NULL;
}

/* The 503 of a refusal that is the answer (extra NULL), or that asks again (RETRY_AFTER). */
static void
respond_refused(struct http_conn *c, const struct card *card, const char *why, const char *extra)
{
	struct json_w w = body_begin();
	char msg[1024];

	if (why == DEAD_REFUSAL) /* named: a job of several cards, or `all`, names more than one */
		snprintf(msg, sizeof(msg), "Card %d %s (reset --device %d)", card->device, why,
			 card->device);
	else
		snprintf(msg, sizeof(msg), "%s%s%s", why, D.degraded && !D.shutting_down ? ": " : "",
			 D.degraded && !D.shutting_down ? D.degraded_reason : "");
	json_w_obj(&w);
	w_str(&w, "error", msg);
	if (card) {
		w_device(&w, card->device);
		w_str(&w, "device_state", sched_state_name(card->state));
	}
	json_w_obj_end(&w);
	respond_json(c, 503, &body_buf, extra);
}

/* cwd: empty, or an accessible directory. */
static int
check_cwd(struct http_conn *c, const char *cwd)
{
	struct stat st;

	if (!cwd[0])
		return 0;
	if (stat(cwd, &st) < 0 || !S_ISDIR(st.st_mode) || access(cwd, X_OK) < 0) {
		respond_error(c, 400, "cwd '%s' is not an accessible directory", cwd);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------------ handlers */

/* One request as a handler sees it. */
struct call {
	const struct http_request *req;
	const char *body; /* the request body, body_len bytes */
	size_t body_len;
	const char *id;   /* the job id of /job/, /result/ and /logs/ paths, else "" */
};

static void
ack_push(struct http_conn *c, struct active *a, bool replay)
{
	grow(&D.acks, &D.capacks, D.nacks, sizeof(*D.acks));
	D.acks[D.nacks++] = (struct ack){.conn = c, .a = a, .replay = replay};
}

/* A POST /queue body as checked: the job's record so far and its cards. */
struct submission {
	struct job job;         /* cmd, cwd, client_id, env_json, timeouts, repeat */
	struct card *card;      /* its (first) card */
	int devices[MAX_CARDS]; /* its cards (device_ids), ndevices of them; else card's alone */
	int ndevices;
};

/*
 * The cards of the submission into s: device_ids, a list of at least two configured cards, each
 * as device_id takes it, none twice (s->card its lowest), else device_id (default "0"). -1
 * answered 400. A job that touches several cards must wait for all of them (sched_next): a
 * mesh or a tensor-parallel model queued on one card's queue alone collides on the other.
 */
static int
submission_cards(struct http_conn *c, const char *body, struct submission *s)
{
	int i = device_member(c, body), l, k, m, d;
	struct card *card;

	if (i == -2 || (l = target_member(c, body, "device_ids")) == -2)
		return -1;
	if (i >= 0 && l >= 0) {
		respond_error(c, 400, "give device_id (one card) or device_ids (several), not both");
		return -1;
	}
	if (l >= 0 && toks[l].type != JSON_ARRAY) {
		respond_error(c, 400, "device_ids must be a list of card numbers");
		return -1;
	}
	for (k = l + 1, m = 0; l >= 0 && m < (int)toks[l].size; m++, k = (int)toks[k].next) {
		if (!(card = card_named(c, body, k, "device_ids element")))
			return -1;
		for (d = 0; d < s->ndevices; d++)
			if (s->devices[d] == card->device) {
				respond_error(c, 400, "device_ids names card %d twice", card->device);
				return -1;
			}
		s->devices[s->ndevices++] = card->device; /* distinct cards: at most ncards */
		if (!s->card || card->device < s->card->device)
			s->card = card;
	}
	if (l >= 0 && m < 2) { /* checked after its elements, so ["all"] is told what one is */
		respond_error(c, 400, "device_ids must name at least two cards (one card: device_id)");
		return -1;
	}
	if (l < 0 && (s->card = card_named(c, body, i, "device_id")))
		s->devices[s->ndevices++] = s->card->device;
	return s->card ? 0 : -1;
}

/*
 * Validate a POST /queue body, or a POST /lease one (lease: its description the cmd, its
 * heartbeat_sec the silence_timeout), into s (its job sched_job_init'ed; cwd "" and client_id
 * "anon" when absent); answers 400 and returns -1 on the first bad field.
 */
static int
submission_parse(struct http_conn *c, const char *body, struct submission *s, bool lease)
{
	struct job *j = &s->job;
	long long timeout = 0, repeat = 1, silence = -1; /* silence -1: the daemon's default */
	char *mode = NULL;
	bool bad_mode;

	if (json_doc_str(&doc, lease ? "description" : "cmd",
			 lease ? MAX_HOLD_REASON : (size_t)cfg.max_cmd_chars, &j->cmd) < 0)
		return doc_refuse(c);
	if (lease && !j->cmd)
		j->cmd = xstrdup("lease");
	if (!j->cmd || !j->cmd[strspn(j->cmd, " \t\r\n\v\f")]) { /* absent, empty or blank */
		respond_error(c, 400, "%s", lease ? "description must not be blank"
						 : "cmd is required and must not be blank");
		return -1;
	}
	if (lease && has_control(j->cmd)) { /* shown by status, as a job's command is */
		respond_error(c, 400, "description must not contain control characters");
		return -1;
	}
	if (strlen(j->cmd) >= MAX_EXEC_STRING) {
		/* Refused now, not hours later when exec fails with E2BIG at its start. */
		respond_error(c, 400, "cmd is %zu bytes in UTF-8; Linux runs no single argument of "
			      "128 KiB or more (MAX_ARG_STRLEN)", strlen(j->cmd));
		return -1;
	}
	if (json_doc_str(&doc, "cwd", MAX_CWD_CHARS, &j->cwd) < 0 ||
	    json_doc_str(&doc, "client_id", MAX_CLIENT_ID, &j->client_id) < 0 ||
	    json_doc_int(&doc, "timeout", 0, cfg.max_timeout, &timeout) < 0 ||
	    json_doc_int(&doc, lease ? "heartbeat_sec" : "silence_timeout", 0,
			 lease ? MAX_HEARTBEAT : cfg.max_timeout, &silence) < 0 ||
	    json_doc_int(&doc, "repeat", 1, cfg.max_repeat, &repeat) < 0 ||
	    json_doc_str(&doc, "mode", 16, &mode) < 0) /* last: no mode to free */
		return doc_refuse(c);
	bad_mode = mode && strcmp(mode, "run") != 0;
	free(mode);
	if (bad_mode) {
		respond_error(c, 400, "mode must be \"run\"");
		return -1;
	}
	if (j->client_id && has_control(j->client_id)) {
		/* it is printed in the log and by `status`: no forged lines, no terminal escapes */
		respond_error(c, 400, "client_id must not contain control characters");
		return -1;
	}
	j->cwd = j->cwd ? j->cwd : xstrdup("");
	j->client_id = j->client_id ? j->client_id : xstrdup("anon");
	j->timeout = timeout ? (int)timeout : cfg.default_timeout;
	j->silence_timeout = silence >= 0 ? (int)silence : lease ? 0 : cfg.silence_timeout;
	j->mode = lease ? JOB_MODE_LEASE : JOB_MODE_RUN;
	j->repeat = (int)repeat;
	if (env_field(c, body, &j->env_json) < 0 || submission_cards(c, body, s) < 0)
		return -1;
	return check_cwd(c, j->cwd);
}

/*
 * On a host-wide queue a job runs as its owner, who must be a user of /etc/passwd (a job cannot
 * run as a name the files do not know) able to enter the job's cwd: the check runs as that
 * user, as the job would. 0, or 1 answered 400 or 403.
 */
static int
owner_may_run(struct http_conn *c, long long owner, const char *cwd)
{
	struct proc_user u;

	if (!D.host_mode || owner == (long long)geteuid())
		return 0;
	if (owner < 0 || proc_user_lookup((uid_t)owner, &u) < 0) {
		respond_error(c, 403, "uid %lld is no user of /etc/passwd: a job cannot run as it", owner);
		return 1;
	}
	if (cwd && cwd[0] && !proc_user_can_enter(&u, cwd)) {
		respond_error(c, 400, "cwd '%s' is not a directory %s can enter", cwd, u.name);
		return 1;
	}
	return 0;
}

/* Answer POST /queue with j; a replay's answer says so, with its status, place and wait. */
static void
respond_submitted(struct http_conn *c, const struct job *j, int position, double wait,
		  bool replay)
{
	struct view v = {.kind = V_SUB, .wait = wait, .position = position, .replay = replay};
	struct json_w w = body_begin();

	render_job(&w, j, &v);
	respond_json(c, 200, &body_buf, NULL);
}

/*
 * Copy s[0..n) into key[0..MAX_KEY_CHARS] when it may be an idempotency key: 1 to
 * MAX_KEY_CHARS characters of RFC 3986's unreserved set, which keeps it safe in the log, in a
 * query and in a shell, in optional double quotes (the header is a structured field,
 * draft-ietf-httpapi-idempotency-key-header). 0, or -1 answered 400.
 */
static int
key_copy(struct http_conn *c, const char *s, size_t n, char *key)
{
	size_t i;

	if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
		s++;
		n -= 2;
	}
	for (i = 0; i < n && (isalnum((unsigned char)s[i]) || (s[i] && strchr("-._~", s[i]))); i++)
		;
	if (n == 0 || n > MAX_KEY_CHARS || i < n) {
		respond_error(c, 400, "An Idempotency-Key is 1 to %d letters, digits, '-', '.', '_' "
			      "or '~'", MAX_KEY_CHARS);
		return -1;
	}
	memcpy(key, s, n);
	key[n] = '\0';
	return 0;
}

/*
 * Whether job j is on exactly the cards of submission s: a replay that answered a job on
 * other cards would let its caller open a card nothing was queued for.
 */
static bool
same_cards(const struct job *j, const struct submission *s)
{
	bool same = s->ndevices == j->nmore + 1;
	int i, k;

	for (i = 0; same && i < s->ndevices; i++) {
		same = s->devices[i] == j->device;
		for (k = 0; !same && k < j->nmore; k++)
			same = s->devices[i] == j->more[k].device;
	}
	return same;
}

/*
 * A submission with the key of a job submitted before (a client that lost the answer and asked
 * again): answer that job, marked "replayed", and create nothing, whatever its state now or
 * the cards' (so a retry never runs a job twice, nor is refused a job it has). 1 answered (the
 * job; 422 when the key came with another command or directory, or another kind of entry (a
 * lease's key for a job, or the reverse); 400 when those fields are malformed; 503 to ask
 * again when the store cannot be read), 0 when no job has the key.
 */
static int
replay_submission(struct http_conn *c, const char *body, const char *key, long long owner,
		  bool lease)
{
	struct submission cards = {.ndevices = 0};
	struct active *a = NULL;
	struct job stored, *j;
	char id[33], *cmd = NULL, *cwd = NULL;
	bool uncommitted = false;
	int i, r;

	sched_job_init(&stored);
	for (i = 0; i < D.nacks && !a; i++) /* submitted this turn: not in the store yet */
		if (!D.acks[i].replay && D.acks[i].a->job.idempotency_key &&
		    D.acks[i].a->job.owner_uid == owner &&
		    strcmp(D.acks[i].a->job.idempotency_key, key) == 0)
			a = D.acks[i].a, uncommitted = true;
	if (!a && (r = store_find_key(D.store, key, owner, id)) != 1) {
		if (r < 0)
			http_conn_error(c, 503, RETRY_AFTER,
					"Cannot look up the Idempotency-Key in the job store now");
		return r < 0;
	}
	if (!a && !(a = active_find(id)) && store_get_job(D.store, id, &stored, NULL) != 1) {
		http_conn_error(c, 503, RETRY_AFTER, "Cannot read the job store now");
		return 1;
	}
	j = a ? &a->job : &stored;
	if (submission_cards(c, body, &cards) < 0) {
		/* answered */
	} else if (json_doc_str(&doc, lease ? "description" : "cmd", (size_t)cfg.max_cmd_chars,
				&cmd) < 0 ||
		   json_doc_str(&doc, "cwd", MAX_CWD_CHARS, &cwd) < 0) {
		doc_refuse(c);
	} else if (!same_cards(j, &cards) || (!cmd && !lease) ||
		   strcmp(cmd ? cmd : "lease", j->cmd) != 0 || strcmp(cwd ? cwd : "", j->cwd) != 0 ||
		   lease != (j->mode == JOB_MODE_LEASE)) {
		respond_error(c, 422, "Idempotency-Key %s was used for %s %s, with other cards, "
			      "command, description or cwd; use a new key for a new one", key,
			      j->mode == JOB_MODE_LEASE ? "lease" : "job", j->id);
	} else {
		respond_submitted(c, j, j->status == JOB_QUEUED ? sched_queued_position(&D.sched, j) : 0,
				  j->status == JOB_QUEUED ? sched_queued_wait(&D.sched, j, clock_wall())
							  : 0, true);
		if (uncommitted)
			ack_push(c, a, true);
	}
	free(cmd);
	free(cwd);
	sched_job_clear(&stored);
	return 1;
}

/* The members of a POST /queue body: those the earlier Python client sends, and device_ids. */
static const char *const queue_fields[] = {"cmd",  "cwd",  "device_id", "device_ids", "timeout",
					   "silence_timeout", "repeat", "env", "mode", "client_id",
					   NULL};
static const char *const lease_fields[] = {"device_id", "device_ids", "description", "timeout",
					   "heartbeat_sec", "owner", "client_id", NULL};
/* The members of POST /kill, /release and /reset bodies (client_id: diagnostic, as in /queue). */
static const char *const target_fields[] = {"job_id", "device_id", "client_id", NULL};
static const char *const renew_fields[] = {"job_id", "client_id", NULL};
static const char *const reset_fields[] = {"job_id", "device_id", "client_id", "force", NULL};

/*
 * The user a lease is for into *owner: the body's `owner`, an admin's alone (a user name of
 * /etc/passwd, or a uid as a number or digits), else *owner as it is. 0, or -1 answered 400 or
 * 403.
 */
static int
lease_owner(struct http_conn *c, const char *body, long long *owner)
{
	int i = json_doc_field(&doc, "owner");
	char name[64] = "";
	long long n = -1;
	uid_t uid;

	if (i < 0)
		return 0;
	if (!admin_only(c, "take a lease for another user (owner)"))
		return -1;
	if (toks[i].type == JSON_NUMBER && json_tok_int(body, &toks[i], &n) < 0)
		n = -1;
	else if (toks[i].type == JSON_STRING)
		json_str_decode(body, &toks[i], name, sizeof(name) - 1);
	if (name[0] && strspn(name, "0123456789") == strlen(name) && strlen(name) < 11)
		n = atoll(name);
	else if (name[0] && proc_user_uid(name, &uid) == 0)
		n = uid;
	if (n < 0 || n >= 4294967295LL) { /* (uid_t)-1 is no user */
		respond_error(c, 400, "owner must be a user name of /etc/passwd or a uid%s%s",
			      name[0] ? "; unknown user: " : "", name);
		return -1;
	}
	*owner = n;
	return 0;
}

/* POST /queue and POST /lease: validate, enqueue, answer once the job is committed. */
static void
handle_queue(struct http_conn *c, const struct call *k)
{
	struct submission s = {.card = NULL};
	struct card *refused = NULL;
	struct active *a;
	const char *why;
	char key[MAX_KEY_CHARS + 1];
	const struct http_header *h = http_header_get(k->req, "Idempotency-Key");
	int position, i;
	double wait, now = clock_wall();
	/* the user the job runs as: its submitter on a host-wide queue, else the service's */
	long long owner = D.host_mode ? acting_uid(c) : (long long)D.self_uid;
	bool lease = k->req->path[1] == 'l'; /* routed here: /lease, else /queue */

	sched_job_init(&s.job);
	if (parse_body(c, k->body, k->body_len, lease ? lease_fields : queue_fields) < 0 ||
	    (h && key_copy(c, h->value, h->value_len, key) < 0) ||
	    (lease && lease_owner(c, k->body, &owner) < 0) ||
	    (h && replay_submission(c, k->body, key, owner, lease)) ||
	    submission_parse(c, k->body, &s, lease) < 0 ||
	    (!lease && owner_may_run(c, owner, s.job.cwd)))
		goto out;
	for (i = 0; i < s.ndevices && !refused; i++) { /* a dead one of its cards refuses it */
		struct card *card = sched_card(&D.sched, s.devices[i]);

		if (card->state == CARD_DEAD)
			refused = card;
	}
	if ((why = refuse_reason(refused ? refused : s.card))) {
		respond_refused(c, refused ? refused : s.card, why, NULL);
		goto out;
	}
	if (D.sched.queued_total >= cfg.max_queued) {
		respond_error(c, 503, "Queue full: %lld jobs are queued (TT_DEVICE_MAX_QUEUED_JOBS)",
			      cfg.max_queued);
		goto out;
	}
	if (new_job_id(s.job.id) < 0 || sched_job_set_cards(&s.job, s.devices, s.ndevices) < 0 ||
	    !(a = active_new())) {
		respond_error(c, 500, "cannot create a job: %s", strerror(errno));
		goto out;
	}
	a->card = s.card;
	a->job = s.job;
	sched_job_init(&s.job); /* its strings are a's now */
	a->job.idempotency_key = h ? xstrdup(key) : NULL;
	a->job.owner_uid = owner;
	a->job.submitted_at = now;
	a->no_env = !a->job.env_json;
	sched_job_note_epochs(&D.sched, &a->job);
	position = sched_submit_position_job(&D.sched, &a->job);
	wait = sched_submit_wait(&D.sched, &a->job, now);
	sched_enqueue(&D.sched, &a->job);
	heartbeat_arm(a);
	mark_dirty(a);
	respond_submitted(c, &a->job, position, wait, false);
	ack_push(c, a, false);
out:
	sched_job_clear(&s.job);
}

/*
 * Look a job up for a read: 1 active (*a), 2 stored (into *stored, *out its output file), -1
 * answered 404 or 503. *stored and *out are set whatever it returns: the caller clears and
 * frees them.
 */
static int
find_job(struct http_conn *c, const char *id, struct active **a, struct job *stored, char **out)
{
	int r;

	sched_job_init(stored);
	*out = NULL;
	*a = active_find(id);
	if (*a)
		return 1;
	r = store_get_job(D.store, id, stored, out);
	if (r < 0)
		respond_error(c, 503, "Cannot read the job store: %s", store_errmsg(D.store));
	else if (r == 0)
		respond_error(c, 404, "Unknown job %s", id);
	return r == 1 ? 2 : -1;
}

/* The job id of the job_id member (token i) into id[33]: 0, or -1 answered 400 or 404. */
static int
job_member(struct http_conn *c, const char *body, int i, char id[33])
{
	if (toks[i].type != JSON_STRING) {
		respond_error(c, 400, "job_id must be a string");
		return -1;
	}
	if (json_str_decode(body, &toks[i], id, 32) != 32 || !sched_job_id_valid(id, 32)) {
		respond_error(c, 404, "Unknown job");
		return -1;
	}
	id[32] = '\0';
	return 0;
}

/*
 * GET /job?key=K: the id of the job submitted with Idempotency-Key K into id[33], for a client
 * that lost the answer to its submission and must learn whether it was queued; 0, or -1
 * answered. query_check let only `key` through, once, so the first "key=" starts it; a valid
 * key needs no percent-decoding.
 */
static int
job_of_key(struct http_conn *c, const struct http_request *req, char id[33])
{
	const char *q = req->query, *end = q + req->query_len;
	const char *v = memmem(q, req->query_len, "key=", 4), *s = v ? v + 4 : end;
	const char *amp = memchr(s, '&', (size_t)(end - s));
	char key[MAX_KEY_CHARS + 1];
	long long owner = D.host_mode ? acting_uid(c) : (long long)D.self_uid;
	unsigned long long uid;
	int r;

	if (!req->query_len) { /* under /job/ nothing but a job id names a job */
		respond_error(c, 404, "Unknown job");
		return -1;
	}
	if (key_copy(c, s, (size_t)((amp ? amp : end) - s), key) < 0)
		return -1;
	/* a key is its owner's: another user's job (a Slurm job's lease) is named by its owner */
	if ((r = http_query_uint(req->query, req->query_len, "owner", 4294967294ULL, &uid)) < 0) {
		respond_error(c, 400, "owner must be a uid");
		return -1;
	}
	if (r == 1)
		owner = (long long)uid;
	r = store_find_key(D.store, key, owner, id);
	if (r < 0)
		http_conn_error(c, 503, RETRY_AFTER,
				"Cannot look up the Idempotency-Key in the job store now");
	else if (r == 0)
		respond_error(c, 404, "No job was submitted with Idempotency-Key %s", key);
	return r == 1 ? 0 : -1;
}

/*
 * Whether a long-poll on a would wait for nothing: a queued job does not start while the
 * service stops, so the answer ("queued": it is kept) is given at once rather than held until
 * the connection is cut.
 */
static bool
waits_in_vain(const struct active *a)
{
	return D.shutting_down && a->job.status == JOB_QUEUED;
}

/*
 * Long-polls held at most at once: HOLD_RESERVE connections (half of them when there are fewer
 * than 32) stay for requests answered at once.
 */
static long long
hold_limit(void)
{
	long long reserve = cfg.max_connections / 2 < HOLD_RESERVE ? cfg.max_connections / 2
								    : HOLD_RESERVE;

	return cfg.max_connections - reserve;
}

/*
 * Answer c later: when the job ends (or, for /logs, has output past the offset), or in wait s;
 * or, with hold_limit() long-polls held already, the busy 503 now.
 */
static void
hold(struct http_conn *c, struct active *a, int kind, unsigned long long wait)
{
	struct client *cl = http_conn_owner(c);

	if (D.held >= hold_limit()) {
		http_conn_error(http_conn_busy(c), 503, RETRY_AFTER, "%lld long-polls wait already, "
				"the most TT_DEVICE_MAX_CONNECTIONS (%lld) allows while %lld "
				"connections stay for other requests", D.held,
				cfg.max_connections, cfg.max_connections - hold_limit());
		return;
	}
	D.held++;
	cl->held = kind;
	cl->held_on = a;
	cl->wnext = a->waiters;
	a->waiters = cl;
	http_conn_hold(c, mono_now + (double)wait);
}

/*
 * The /logs answer (kind HELD_LOGS) or the record (HELD_RESULT: /job, /result) of the live job
 * a, or else of the stored job j whose output file is out.
 */
static void
respond_read(struct http_conn *c, const struct job *j, struct active *a, const char *out,
	     int kind, unsigned long long offset, unsigned long long limit)
{
	static char chunk[64 << 10];
	char *buf = chunk, *path;
	size_t want, got = 0;
	long long size = 0, readable, left, end;
	struct stat st;
	struct json_w w = body_begin();
	ssize_t n;
	int fd;

	if (kind != HELD_LOGS) {
		render_record(&w, j, a, out);
		respond_json(c, 200, &body_buf, NULL);
		return;
	}
	j = a ? &a->job : j;
	path = a ? job_output_path(j->id) : xstrdup(out);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && fstat(fd, &st) == 0)
		size = st.st_size;
	readable = a && j->status != JOB_DONE ? log_readable(a) : size;
	left = readable - (long long)offset;
	want = left <= 0 ? 0 : left < (long long)limit ? (size_t)left : (size_t)limit;
	if (want > sizeof(chunk) && !(buf = malloc(want)))
		want = sizeof(chunk), buf = chunk;
	if (want > 0 && fd >= 0 && (n = pread(fd, buf, want, (off_t)offset)) > 0)
		got = json_utf8_boundary(buf, (size_t)n);
	if (fd >= 0)
		close(fd);
	end = (long long)offset + (long long)got;
	json_w_obj(&w);
	w_str(&w, "job_id", j->id);
	w_str(&w, "status", sched_status_name(j->status));
	w_str(&w, "output_file", path);
	w_int(&w, "offset", (long long)offset);
	w_int(&w, "next_offset", end);
	json_w_key(&w, "content");
	json_w_str(&w, buf, got);
	w_bool(&w, "truncated", end < readable);
	w_bool(&w, "complete", j->status == JOB_DONE && end >= size);
	w_int(&w, "log_size", j->status == JOB_DONE ? j->log_size : size);
	w_bool(&w, "log_truncated", j->log_truncated);
	w_int(&w, "dropped_log_bytes", a && a->log.fd >= 0 ? a->log.dropped : j->dropped_log_bytes);
	json_w_obj_end(&w);
	if (buf != chunk)
		free(buf);
	free(path);
	respond_json(c, 200, &body_buf, NULL);
}

/*
 * GET /job/ID[?wait=S] (kind HELD_JOB) and /job?key=K, the record, for anyone; GET
 * /result/ID[?wait=S] (HELD_RESULT) and GET /logs/ID[?offset=N][&limit=N][&wait=S]
 * (HELD_LOGS), for the job's owner or an admin: with wait, a live job's answer is held until
 * it is done or, for /job, no longer queued or, for /logs, has output past offset. query_check
 * let offset and limit through to /logs alone, and wait to /job/, /result and /logs.
 */
static void
handle_read(struct http_conn *c, const struct call *k)
{
	const struct http_request *req = k->req;
	/* routed here: /job (a record anyone may read), /result or /logs */
	bool anyone = req->path[1] == 'j';
	int kind = req->path[1] == 'l' ? HELD_LOGS : anyone ? HELD_JOB : HELD_RESULT, r;
	unsigned long long offset = 0, limit = (unsigned long long)cfg.max_log_read, wait = 0;
	struct client *cl = http_conn_owner(c);
	char id[33];
	struct active *a;
	struct job j;
	char *out;

	if (http_query_uint(req->query, req->query_len, "offset", (unsigned long long)LLONG_MAX / 2,
			    &offset) < 0 ||
	    http_query_uint(req->query, req->query_len, "limit", (unsigned long long)LLONG_MAX / 2,
			    &limit) < 0) {
		respond_error(c, 400, "offset and limit must be non-negative integers");
		return;
	}
	if (http_query_uint(req->query, req->query_len, "wait", MAX_WAIT, &wait) < 0) {
		respond_error(c, 400, "wait must be an integer from 0 to %d", MAX_WAIT);
		return;
	}
	if (limit > (unsigned long long)cfg.max_log_read)
		limit = (unsigned long long)cfg.max_log_read;
	if ((!k->id[0] && job_of_key(c, req, id) < 0) ||
	    (r = find_job(c, k->id[0] ? k->id : id, &a, &j, &out)) < 0)
		return;
	if (!anyone && !may_act_on(c, r == 1 ? &a->job : &j, kind == HELD_LOGS
							       ? "read the output of"
							       : "read the outcome of")) {
		/* answered */
	} else if (r == 1 && wait > 0 && a->job.status != JOB_DONE && !waits_in_vain(a) &&
		   (kind == HELD_RESULT || (kind == HELD_JOB && a->job.status == JOB_QUEUED) ||
		    (kind == HELD_LOGS && log_readable(a) <= (long long)offset))) {
		cl->held_offset = offset;
		cl->held_limit = limit;
		hold(c, a, kind, wait);
	} else {
		respond_read(c, &j, r == 1 ? a : NULL, out, kind, offset, limit);
	}
	sched_job_clear(&j);
	free(out);
}

/* Answer c's held long-poll now (deadline, job done, or output appeared): http.c's
 * hold_expired. Its client may be freed. */
static void
held_release(struct http_conn *c)
{
	struct client *cl = http_conn_owner(c);
	struct active *a = cl->held_on;
	int kind = cl->held;

	waiter_unlink(cl);
	cl->held = HELD_NONE;
	if (a)
		respond_read(c, NULL, a, NULL, kind, cl->held_offset, cl->held_limit);
}
/* Release the waiters of a: all of them (done), /logs waiters that now have bytes, and /job
 * waiters once it started. */
static void
waiters_wake(struct active *a, bool done)
{
	struct client *cl = a->waiters, *next;
	long long size = cl && !done ? log_readable(a) : 0;

	for (; cl; cl = next) {
		next = cl->wnext;
		if (done || (cl->held == HELD_LOGS && (long long)cl->held_offset < size) ||
		    (cl->held == HELD_JOB && a->job.status != JOB_QUEUED))
			held_release(cl->http);
	}
}

/* One of a card's recent jobs (store_load_recent) as its summary in the status answer. */
static int
recent_cb(void *ctx, struct job *j, const char *output_file)
{
	(void)output_file;
	render_summary(ctx, j, 0, NAN);
	sched_job_clear(j);
	return 0;
}

static void
render_card(struct json_w *w, struct card *card, double now)
{
	const struct job_link *l;
	int i;

	json_w_obj(w);
	w_device(w, card->device);
	w_str(w, "state", sched_state_name(card->state));
	w_bool(w, "reset_pending", card->reset_pending);
	w_int(w, "reset_epoch", card->reset_epoch);
	w_time(w, "last_reset_at", card->last_reset_at);
	w_time(w, "dead_since", card->dead_since);
	w_str(w, "dead_reason", card->dead_reason);
	w_bool(w, "held", card->held);
	w_str(w, "held_by", card->held ? card->held_by : NULL);
	w_time(w, "held_at", card->held ? card->held_at : NAN);
	w_str(w, "hold_reason", card->held ? card->hold_reason : NULL);
	w_str(w, "control_error", card->control_error);
	w_bool(w, "check_pending", card->check_pending);
	json_w_key(w, "foreign_holders"); /* as the last look found them (look_holders) */
	json_w_arr(w);
	for (i = 0; i < looks[card_index(card)].n && i < MAX_HOLDERS; i++)
		w_holder(w, &looks[card_index(card)].h[i], looks[card_index(card)].since[i]);
	json_w_arr_end(w);
	json_w_key(w, "current");
	if (card->current)
		render_summary(w, card->current, now, NAN);
	else
		json_w_null(w);
	json_w_key(w, "pending");
	json_w_arr(w);
	for (l = card->head; l; l = l->next)
		render_summary(w, l->job, now, l->job->plan_wait);
	json_w_arr_end(w);
	json_w_key(w, "recent"); /* from the store: what is done is committed before it is told */
	json_w_arr(w);
	store_load_recent(D.store, card->device, SCHED_RECENT, recent_cb, w);
	json_w_arr_end(w);
	json_w_obj_end(w);
}

/* GET /status[?device=N] */
static void
handle_status(struct http_conn *c, const struct call *k)
{
	const struct http_request *req = k->req;
	unsigned long long dev = 0;
	int has_dev = http_query_uint(req->query, req->query_len, "device", 1000000, &dev), i;
	double now = clock_wall();
	struct json_w w;

	/* Without the store the cards are not known yet (it may list a dead one): any is taken. */
	if (has_dev < 0 || (has_dev == 1 && D.store && !sched_card(&D.sched, (int)dev))) {
		char list[512];

		list_cards(list, sizeof(list));
		respond_error(c, 400, "device must be one of the configured queues: %s", list);
		return;
	}
	w = body_begin();
	json_w_obj(&w);
	w_str(&w, "version", TTQ_VERSION);
	/* host: every local user's jobs, each run as its owner; personal: one user's queue */
	w_str(&w, "access", D.host_mode ? "host" : "personal");
	w_str(&w, "caller", user_of(acting_uid(c))); /* who asked: status marks others' jobs */
	json_w_key(&w, "worker");
	json_w_obj(&w);
	w_bool(&w, "alive", true);
	w_num(&w, "heartbeat_age_sec", mono_now - D.heartbeat_mono);
	w_str(&w, "degraded_reason", D.degraded ? D.degraded_reason : NULL);
	w_str(&w, "maintenance_warning", D.maintenance_warning[0] ? D.maintenance_warning : NULL);
	w_str(&w, "guardian_warning", proc_guardian_lost() ? GUARDIAN_GONE : NULL);
	json_w_obj_end(&w);
	w_int(&w, "queued_total", D.sched.queued_total);
	w_int(&w, "max_queued_jobs", cfg.max_queued);
	json_w_key(&w, "devices");
	json_w_arr(&w);
	sched_plan(&D.sched, now); /* the pending jobs' waits */
	for (i = 0; i < D.sched.ncards; i++)
		if (has_dev != 1 || D.sched.cards[i].device == (int)dev)
			render_card(&w, &D.sched.cards[i], now);
	json_w_arr_end(&w);
	json_w_obj_end(&w);
	respond_json(c, 200, &body_buf, NULL);
}

static void
respond_kill(struct http_conn *c, const char *key, const struct job *j)
{
	struct json_w w = body_begin();

	json_w_obj(&w);
	json_w_key(&w, key);
	render_summary(&w, j, clock_wall(), NAN);
	json_w_obj_end(&w);
	respond_json(c, 200, &body_buf, NULL);
}

static bool store_sync_now(const struct job *extra);
static void job_finish_at(struct active *a, double end, int why, int exit_code,
			  const char *error, const char *trailer);

/*
 * A job or lease ended already: 409 with its status and end_reason, which tell a client that
 * asked for its end (a release, a renewal) what became of it.
 */
static void
respond_ended(struct http_conn *c, const struct job *j)
{
	struct json_w w = body_begin();
	char msg[128];

	snprintf(msg, sizeof(msg), "Job %s already finished", j->id);
	json_w_obj(&w);
	w_str(&w, "error", msg);
	w_str(&w, "job_id", j->id);
	w_str(&w, "status", sched_status_name(j->status));
	w_str(&w, "end_reason", sched_end_name(j->end_reason));
	json_w_obj_end(&w);
	respond_json(c, 409, &body_buf, NULL);
}

/* Kill or cancel job a, or release (stop STOP_RELEASE; else STOP_KILL) lease a, and answer. */
static void
kill_active(struct http_conn *c, struct active *a, int stop)
{
	if (a->job.mode != JOB_MODE_RESET &&
	    !may_act_on(c, &a->job, a->job.status == JOB_QUEUED ? "cancel"
				    : stop == STOP_RELEASE ? "release" : "kill"))
		return;
	if (a->job.status == JOB_QUEUED) {
		static const char why[] = "Cancelled by a kill request before it started";
		struct card *card = a->card;
		struct job done = a->job; /* the record as the cancel leaves it, on disk first */

		sched_job_transition(&done, JOB_PHASE_DONE);
		done.finished_at = clock_wall();
		done.elapsed = 0;
		done.exit_code = -1;
		done.has_exit_code = true;
		done.end_reason = JOB_END_CANCELLED;
		done.error = (char *)why;
		if (!store_sync_now(&done)) {
			/* Not recordable (degraded, or the commit failed, when a may be gone: a
			 * submission of this turn is refused whole). Answered as cancelled, a crash
			 * would still run it. */
			respond_refused(c, card,
					"The job store is degraded; the cancel cannot be recorded", NULL);
			return;
		}
		sched_unlink(&D.sched, &a->job);
		job_finish_at(a, done.finished_at, JOB_END_CANCELLED, -1, why,
			      "cancelled by a kill request before it started");
		respond_kill(c, "cancelled", &a->job);
	} else if (a->job.status == JOB_RUNNING && a->job.mode != JOB_MODE_RESET) {
		job_stop(a, stop); /* a lease ends at once: its answer says done */
		respond_kill(c, stop == STOP_RELEASE ? "released" : "killed", &a->job);
	} else if (a->job.status == JOB_RUNNING) {
		respond_error(c, 409, "Job %s is a card reset; it cannot be killed", a->job.id);
	} else {
		respond_ended(c, &a->job);
	}
}

static void handle_hold(struct http_conn *c, const struct call *k);

/*
 * POST /kill {"job_id": ID} or {"device_id": N}; both must agree, and a device_id is checked
 * as /reset checks it. POST /release {"job_id": ID} ends a lease as a kill would, but as
 * released; {"device_id": N} alone releases a held card (handle_hold).
 */
static void
handle_kill(struct http_conn *c, const struct call *k)
{
	bool release = k->req->path[1] == 'r'; /* routed here: /release, else /kill */
	const char *body = k->body;
	struct card *card = NULL;
	struct active *a = NULL;
	struct job j;
	char id[33], cards[256], *out = NULL;
	int ji, di, r = 0;

	sched_job_init(&j);
	if (parse_body(c, body, k->body_len, target_fields) < 0)
		goto out;
	if (release && json_doc_field(&doc, "job_id") < 0) {
		handle_hold(c, k);
		goto out;
	}
	if ((di = device_member(c, body)) == -2 || (ji = target_member(c, body, "job_id")) == -2 ||
	    (di >= 0 && !(card = card_from_field(c, body, di))) ||
	    (ji >= 0 && (job_member(c, body, ji, id) < 0 || (r = find_job(c, id, &a, &j, &out)) < 0)))
		goto out;
	if (ji < 0 && !card)
		respond_error(c, 400, "Give job_id or device_id");
	else if (ji < 0 && !card->current)
		respond_error(c, 409, "Nothing running on card %d", card->device);
	else if (release && (r == 2 ? &j : &a->job)->mode != JOB_MODE_LEASE)
		respond_error(c, 409, "Job %s is no lease: kill ends a job", id);
	else if (r == 2)
		respond_ended(c, &j);
	else if (a && card && !sched_job_on(&a->job, card->device)) /* they name nothing for sure */
		respond_error(c, 400, "job_id %s is on %s, not on card %d", id,
			      job_cards(&a->job, cards, sizeof(cards)), card->device);
	else
		kill_active(c, a ? a : active_of(card->current),
			    release ? STOP_RELEASE : STOP_KILL);
out:
	sched_job_clear(&j);
	free(out);
}

/*
 * POST /renew {"job_id"}: the lease's owner or an admin renews its heartbeat (a renewal counts
 * as a job's output does for its silence watchdog, job_silence_fired). 200 {job_id, status};
 * 409 when it is no lease or has ended.
 */
static void
handle_renew(struct http_conn *c, const struct call *k)
{
	struct active *a = NULL;
	struct job stored, *j;
	char id[33], *out = NULL;
	int ji, r;
	struct json_w w;

	sched_job_init(&stored);
	if (parse_body(c, k->body, k->body_len, renew_fields) < 0 ||
	    (ji = target_member(c, k->body, "job_id")) == -2)
		goto out;
	if (ji < 0) {
		respond_error(c, 400, "Give the lease's job_id");
		goto out;
	}
	if (job_member(c, k->body, ji, id) < 0 || (r = find_job(c, id, &a, &stored, &out)) < 0)
		goto out;
	j = r == 1 ? &a->job : &stored;
	if (j->mode != JOB_MODE_LEASE) {
		respond_error(c, 409, "Job %s is no lease: only a lease is renewed", id);
	} else if (!may_act_on(c, j, "renew")) {
		/* answered */
	} else if (j->status == JOB_DONE) {
		respond_ended(c, j);
	} else {
		if (a->watch)
			a->watch->last_output_mono = mono_now;
		w = body_begin();
		json_w_obj(&w);
		w_str(&w, "job_id", j->id);
		w_str(&w, "status", sched_status_name(j->status));
		json_w_obj_end(&w);
		respond_json(c, 200, &body_buf, NULL);
	}
out:
	sched_job_clear(&stored);
	free(out);
}

static void handle_reset(struct http_conn *c, const struct call *k);
static void handle_metrics(struct http_conn *c, const struct call *k);

/*
 * Every query parameter must be one the path takes, and only once: a typo (ofset, devcie)
 * would otherwise read from offset 0 or show every card, as if asked. -1 answered 400.
 */
static int
query_check(struct http_conn *c, const struct http_request *req, const char *const *known)
{
	const char *p = req->query, *end = p + req->query_len, *amp, *pe, *eq;
	char why[512];
	size_t n;
	unsigned j, seen = 0;

	for (; p < end; p = amp ? amp + 1 : end) {
		amp = memchr(p, '&', (size_t)(end - p));
		pe = amp ? amp : end;
		eq = memchr(p, '=', (size_t)(pe - p));
		if ((n = (size_t)((eq ? eq : pe) - p)) == 0 && !eq)
			continue; /* "a&&b": an empty piece names nothing */
		for (j = 0; known[j] && (strlen(known[j]) != n || memcmp(p, known[j], n) != 0); j++)
			;
		if (known[j] && !(seen & 1u << j)) {
			seen |= 1u << j;
			continue;
		}
		if (known[j])
			snprintf(why, sizeof(why), "Query parameter %s is given twice", known[j]);
		else
			json_unknown_name(why, sizeof(why), "query parameter", p, n, known, synonyms);
		respond_error(c, 400, "%s", why);
		return -1;
	}
	return 0;
}

/*
 * The API: each path (or a prefix that a job id follows) with the one method it takes, its
 * handler and its query parameters. Unknown paths are 404, a known path with another method
 * 405 naming the right one.
 */
static const struct route {
	const char *path;   /* exact, or a prefix when it ends in '/': then a job id follows */
	const char *method; /* the only one served; a POST needs a Content-Length */
	bool storeless;     /* answered while the store is not open */
	void (*fn)(struct http_conn *c, const struct call *k);
	const char *const *query; /* the query parameters it takes, NULL-terminated */
} routes[] = {
    {"/queue", "POST", false, handle_queue, (const char *const[]){NULL}},
    {"/lease", "POST", false, handle_queue, (const char *const[]){NULL}},
    {"/renew", "POST", false, handle_renew, (const char *const[]){NULL}},
    {"/kill", "POST", false, handle_kill, (const char *const[]){NULL}},
    {"/reset", "POST", false, handle_reset, (const char *const[]){NULL}},
    {"/hold", "POST", false, handle_hold, (const char *const[]){NULL}},
    {"/release", "POST", false, handle_kill, (const char *const[]){NULL}},
    {"/status", "GET", true, handle_status, (const char *const[]){"device", NULL}},
    {"/metrics", "GET", true, handle_metrics, (const char *const[]){NULL}},
    {"/job/", "GET", false, handle_read, (const char *const[]){"wait", NULL}},
    {"/job", "GET", false, handle_read, (const char *const[]){"key", "owner", NULL}},
    {"/result/", "GET", false, handle_read, (const char *const[]){"wait", NULL}},
    {"/logs/", "GET", false, handle_read, (const char *const[]){"offset", "limit", "wait", NULL}},
};

/* http.c's request callback: route one complete request (trailing '/' on a path is ignored). */
static void
handle_request(struct http_conn *c, const struct http_request *req, const char *body, size_t body_len)
{
	struct call k = {.req = req, .body = body, .body_len = body_len, .id = ""};
	size_t n = req->path_len, rn = 0;
	const struct route *r, *end = routes + sizeof(routes) / sizeof(routes[0]);
	char id[33], allow[64];

	if (n > 1 && req->path[n - 1] == '/')
		n--;
	/* a path ending in '/' is a prefix that a job id follows, any other one exact */
	for (r = routes; r < end; r++)
		if (n >= (rn = strlen(r->path)) && (n > rn) == (r->path[rn - 1] == '/') &&
		    memcmp(req->path, r->path, rn) == 0)
			break;
	if (r == end) {
		respond_error(c, 404, "Not found");
		return;
	}
	if (req->method_len != strlen(r->method) ||
	    memcmp(req->method, r->method, req->method_len) != 0) {
		snprintf(allow, sizeof(allow), "Allow: %s\r\n", r->method);
		http_conn_error(c, 405, allow, "Method not allowed");
		return;
	}
	if (!caller_allowed(c, req) || query_check(c, req, r->query) < 0)
		return;
	if (r->method[0] == 'P' && req->content_length < 0) {
		respond_error(c, 411, "Content-Length required");
		return;
	}
	if (!D.store && !r->storeless) {
		/* Started without the store: no card or job is known until it opens, which it is
		 * tried every STORE_RETRY s to do; a stop is the answer. */
		const char *why = refuse_reason(NULL);

		respond_refused(c, NULL, why ? why : "The job store is not open",
				D.shutting_down ? NULL : RETRY_AFTER);
		return;
	}
	if (r->path[rn - 1] == '/') {
		if (!sched_job_id_valid(req->path + rn, n - rn)) {
			respond_error(c, 404, "Unknown job");
			return;
		}
		memcpy(id, req->path + rn, 32);
		id[32] = '\0';
		k.id = id;
	}
	r->fn(c, &k);
}

/* Start the HTTP side: the connections, once listening (http_server_listen), with the callbacks
 * of "connections" and handle_request. */
static void
clients_init(void)
{
	static const struct http_callbacks cb = {
	    .request = handle_request,
	    .hold_expired = held_release,
	    .watch = client_watch,
	    .closed = client_closed,
	    .opened = client_opened,
	    .log = logmsg,
	};
	struct http_server_config hc = {
	    .max_body = (size_t)cfg.max_request_bytes,
	    .now = &mono_now,
	    .max_conns = cfg.max_connections,
	    .max_conns_name = "TT_DEVICE_MAX_CONNECTIONS",
	};

	if (!(D.http = http_server_new(&hc, &cb)))
		die_oom();
}

/* ------------------------------------------------------------------------ running jobs */

extern char **environ;

/*
 * Open the job's output file, creating its folder if need be; -1 with errno when it cannot.
 * The folder is the store's (made 0700, reached never through a link); the file in it is
 * proc.c's capped file, opened relative to that folder with the flags its writer needs.
 */
static int
open_log(struct active *a)
{
	int dfd, r, e;

	if (a->log.fd >= 0)
		return 0;
	if ((dfd = store_job_folder(D.dir, a->job.id)) < 0)
		return -1;
	r = capfile_open(&a->log, dfd, STORE_OUTPUT_FILE, cfg.max_log_bytes); /* fd -1 if not */
	e = errno;
	close(dfd);
	errno = e;
	if (r == 0) /* continue the counts of an earlier run (a restarted reset keeps its log) */
		a->log.dropped = a->job.dropped_log_bytes;
	return r;
}

/*
 * Write <log dir>/<id>/meta.json, the job's final record, when it finishes. A failure
 * (disk full, the folder removed or replaced by a link) is logged and not retried: the record
 * itself is in the database.
 */
static void
write_meta(const struct job *j)
{
	char *out = job_output_path(j->id);
	struct json_buf b;
	struct json_w w;

	json_buf_init(&b);
	json_w_init(&w, &b);
	render_record(&w, j, NULL, out);
	json_buf_add(&b, "\n", 1);
	free(out);
	if (b.oom || store_write_meta(D.dir, j->id, b.p, b.len) < 0)
		logmsg("tt-device-queue: job %s: cannot write meta.json: %s", j->id,
		       strerror(b.oom ? ENOMEM : errno));
	json_buf_free(&b);
}

/* ---- proc.c's callbacks and the loop's events for a job's process */

static void
job_pipe_event(void *arg, short revents)
{
	proc_job_event(((struct active *)arg)->proc, revents);
}

static void
job_proc_timer_fired(void *arg)
{
	proc_job_timeout(((struct active *)arg)->proc);
}

static int
job_proc_watch(struct proc_job *pj, int fd, double deadline)
{
	struct active *a = proc_job_owner(pj);

	if (fd < 0)
		watch_del(&a->out_slot);
	else if (a->out_slot < 0 && watch_add(fd, POLLIN, job_pipe_event, a, &a->out_slot) < 0)
		return -1;
	if (deadline > 0)
		timer_set(&watch_of(a)->proc_timer, deadline);
	else if (a->watch)
		timer_stop(&a->watch->proc_timer);
	return 0;
}

static void
job_proc_output(struct proc_job *pj)
{
	struct active *a = proc_job_owner(pj);

	watch_of(a)->last_output_mono = mono_now; /* the silence watchdog reads it */
	if (a->log.dropped > 0 && !a->job.log_truncated) {
		/* Saved once when output starts being dropped: after a crash the record then says
		 * the log is incomplete (at least this much), not that nothing was dropped. */
		a->job.log_truncated = true;
		a->job.dropped_log_bytes = a->log.dropped;
		mark_dirty(a);
	}
	waiters_wake(a, false);
}

static void
job_proc_escalated(struct proc_job *pj)
{
	((struct active *)proc_job_owner(pj))->job.stop_escalated_at = clock_wall();
}

static void iteration_done(struct active *a, int code);
static void finish_stopped(struct active *a, int code);
static void reset_step_done(struct active *a, int code);

/* The process is over, nothing of it alive: the next iteration, job or reset step may start. */
static void
job_proc_exit(struct proc_job *pj, int code)
{
	struct active *a = proc_job_owner(pj);

	if (a->job.mode == JOB_MODE_RUN)
		iteration_done(a, code);
	else if (a->stop != STOP_NONE) /* the service stops: the card stays resetting, the reset
					  pending, and it runs again at the next start */
		finish_stopped(a, code);
	else
		reset_step_done(a, code);
}

/* Whether job a runs as another user than the daemon: its owner, on a host-wide queue. */
static bool
runs_as_owner(const struct active *a)
{
	return D.host_mode && a->job.mode == JOB_MODE_RUN && a->job.owner_uid >= 0 &&
	       a->job.owner_uid != (long long)geteuid();
}

/* Start argv for a (its output into a's log); -1 with err filled when it cannot start. */
static int
spawn_process(struct active *a, char *const argv[], char *const envp[], const char *cwd, char *err,
	      size_t errlen)
{
	char tag[64];
	struct proc_user u;
	struct proc_opts o = {.argv = argv, .envp = envp, .cwd = cwd,
			      .oom_score_adj = (int)cfg.oom_score_adj,
			      .set_umask = 1, .umask = D.job_umask,
			      .set_nofile = D.nofile_raised, .nofile = D.job_nofile};

	/* A job's descendants carry its id (proc_job_env puts it in their environment); the
	 * stray sweep spares a running job's tagged processes. Control commands carry none. */
	snprintf(tag, sizeof(tag), "TT_DEVICE_JOB_ID=%s", a->job.id);
	o.tag = a->job.mode == JOB_MODE_RUN ? tag : NULL;
	/* a host-wide queue: the job runs as the user who submitted it */
	o.user = runs_as_owner(a) ? &u : NULL;
	a->iter_started_mono = mono_now;
	if (o.user && proc_user_lookup((uid_t)a->job.owner_uid, &u) < 0)
		snprintf(err, errlen, "its owner, uid %lld, is no user of /etc/passwd",
			 a->job.owner_uid);
	else if (open_log(a) < 0)
		snprintf(err, errlen, "cannot open the output file: %s", strerror(errno));
	else if (!a->proc && !(a->proc = proc_job_new(a)))
		snprintf(err, errlen, "out of memory");
	else
		return proc_job_spawn(a->proc, &o, &a->log, err, errlen);
	return -1;
}

/* The job's environment (proc_job_env), its env object read back from the store first. */
static char **
job_env(struct active *a, char **block)
{
	struct proc_user u;
	bool as_user = runs_as_owner(a) && proc_user_lookup((uid_t)a->job.owner_uid, &u) == 0;

	*block = NULL;
	if (!a->job.env_json && !a->no_env &&
	    store_get_env(D.store, a->job.id, &a->job.env_json) < 0)
		return NULL;
	return proc_job_env(environ, as_user ? &u : NULL, a->job.env_json, a->job.id, block);
}

static void
run_iteration(struct active *a, char *const envp[])
{
	/* "--": a command that starts with "-" is a command, not options of bash. */
	char *argv[] = {"/bin/bash", "-lc", "--", a->job.cmd, NULL}, err[512];
	int r;

	if (a->job.repeat > 1 && open_log(a) == 0)
		capfile_marker(&a->log, "Repeat %d/%d", a->job.repeat_current, a->job.repeat);
	r = spawn_process(a, argv, envp, a->job.cwd, err, sizeof(err));
	/* Started but err set: the child could not chdir or exec (its cwd removed since
	 * submission, no /bin/bash): it exited 127 and is reaped as usual, and iteration_done
	 * gives the record the reason its output's marker line gives, or the error would be null. */
	if (r < 0 || err[0]) {
		free(a->start_error);
		a->start_error = xasprintf("Cannot start the job: %s", err);
	}
	if (r < 0)
		job_finish(a, JOB_END_START_FAILED, -1, a->start_error, NULL);
}

static void
job_spawn_first(struct active *a)
{
	char cards[256];

	if (a->job.mode == JOB_MODE_LEASE) { /* no process: its timeout; its heartbeat runs on */
		timer_set(&watch_of(a)->deadline, mono_now + a->job.timeout);
		logmsg("tt-device-queue: lease %s holds %s", a->job.id,
		       job_cards(&a->job, cards, sizeof(cards)));
		return;
	}
	a->envp = job_env(a, &a->env_block);
	free(a->job.env_json);
	a->job.env_json = NULL;
	if (!a->envp) {
		job_finish(a, JOB_END_START_FAILED, -1, "Cannot build the job's environment", NULL);
		return;
	}
	timer_set(&watch_of(a)->deadline, mono_now + a->job.timeout);
	a->watch->last_output_mono = mono_now; /* silence counts from the start */
	if (a->job.silence_timeout > 0)
		timer_set(&a->watch->silence, mono_now + a->job.silence_timeout);
	logmsg("tt-device-queue: job %s started on %s", a->job.id,
	       job_cards(&a->job, cards, sizeof(cards)));
	run_iteration(a, a->envp);
}

/* a stops for reason (enum stop_reason) from now: its phase, timed_out, when it was asked. */
static void
mark_stopping(struct active *a, int reason)
{
	a->stop = reason;
	a->job.timed_out = reason == STOP_TIMEOUT;
	sched_job_transition(&a->job, JOB_PHASE_STOPPING);
	if (isnan(a->job.stop_requested_at)) {
		a->job.stop_requested_at = clock_wall();
		mark_dirty(a);
	}
}

/*
 * Finish a job stopped for a->stop, whose last shell ended with code: its end_reason, and its
 * error, which is also its output's last line. A timeout's exit code is -9 whatever its shell
 * did (end_signal says what that died of), its error null (timeout_message says it).
 */
static void
finish_stopped(struct active *a, int code)
{
	static const int ends[] = {[STOP_KILL] = JOB_END_KILLED, [STOP_TIMEOUT] = JOB_END_TIMEOUT,
				   [STOP_SHUTDOWN] = JOB_END_SERVICE_STOP,
				   [STOP_PREEMPT] = JOB_END_RESET, [STOP_HUNG] = JOB_END_HUNG,
				   [STOP_RELEASE] = JOB_END_RELEASED};
	const struct job *j = &a->job;
	int s = a->stop;
	char *error = s == STOP_TIMEOUT ? timeout_message(j)
		      : s == STOP_HUNG && j->mode == JOB_MODE_LEASE
			  ? xasprintf("no renewal for %d seconds: the lease lapsed",
				      j->silence_timeout)
		      : s == STOP_HUNG  ? xasprintf("no output for %d seconds: stopped as hung "
						    "(SIGINT, then SIGKILL after the grace)",
						    j->silence_timeout)
		      : s == STOP_RELEASE ? xstrdup("released")
		      : s == STOP_PREEMPT ? xasprintf("Interrupted by a reset of %s",
						      j->nmore ? "one of its cards" : "its card")
		      : xstrdup(s == STOP_KILL ? "Stopped by a kill request"
				: j->mode == JOB_MODE_RESET ? "Interrupted: the service stopped during "
							      "the reset; it runs again at the next start"
							    : "Interrupted: the service stopped while "
							      "the job was running; it is not run again");

	if (s == STOP_TIMEOUT)
		a->job.end_signal = code < 0 && j->mode == JOB_MODE_RUN ? -code : 0;
	job_finish(a, ends[s], s == STOP_TIMEOUT ? -9 : s == STOP_SHUTDOWN ? -1 : code,
		   s == STOP_TIMEOUT || s == STOP_RELEASE ? NULL : error, error);
	free(error);
}

static void
iteration_done(struct active *a, int code)
{
	struct job *j = &a->job;
	double took = mono_now - a->iter_started_mono;

	if (j->repeat_current == 1) {
		j->first_iteration_elapsed = took;
		j->per_iter_estimate = took;
	}
	if (code == 0)
		j->repeat_completed++;
	if (a->stop == STOP_NONE && a->late_stop != STOP_NONE && code == 0 &&
	    j->repeat_current < j->repeat)
		mark_stopping(a, a->late_stop); /* it came after this shell ended: no more of them */
	a->late_stop = STOP_NONE;
	if (a->stop != STOP_NONE)
		finish_stopped(a, code);
	else if (code != 0 || j->repeat_current >= j->repeat) {
		job_finish(a, a->start_error ? JOB_END_START_FAILED : code < 0 ? JOB_END_SIGNAL
									     : JOB_END_EXITED,
			   code, a->start_error, NULL);
	} else {
		j->repeat_current++;
		run_iteration(a, a->envp);
	}
}

/*
 * A job's deadline passed: it is stopped as a kill stops it (job_stop: SIGINT, SIGKILL after
 * the grace), so a Python job unwinds and closes its device; a SIGKILL at once left the card
 * for the next job to find half torn down. A stop already under way ends it within its grace
 * and is left as it is. A reset's control command is killed at once.
 */
static void
job_timeout_fired(void *arg)
{
	struct active *a = arg;

	if (a->job.status != JOB_RUNNING)
		return;
	if (a->job.mode == JOB_MODE_RESET) {
		/* One control command ran past TT_DEVICE_HEALTH_CMD_TIMEOUT: its step fails. */
		capfile_marker(&a->log, "timed out after %g seconds; its process group is killed",
			       cfg.health_cmd_timeout);
		proc_job_kill(a->proc);
		return;
	}
	/* Armed by job_spawn_first just before its spawn, so a process exists (or existed: a
	 * shell that ended already keeps its status, job_stop leaves it a late stop, which stops
	 * no more than the iterations still to come). */
	if (a->stop == STOP_NONE)
		job_stop(a, STOP_TIMEOUT);
}

/*
 * The silence watchdog's timer, armed at the job's last output + silence_timeout. Output never
 * touches it (job_proc_output only notes the time): when output came since it was armed it
 * moves to the new last output + silence_timeout; else the job wrote nothing for that long and
 * is stopped as hung, as a kill stops it (job_stop).
 */
static void
job_silence_fired(void *arg)
{
	struct active *a = arg;
	double due = a->watch->last_output_mono + a->job.silence_timeout;

	if ((a->job.status != JOB_RUNNING && a->job.mode != JOB_MODE_LEASE) || a->stop != STOP_NONE)
		return;
	if (due > mono_now)
		timer_set(&a->watch->silence, due);
	else
		job_stop(a, STOP_HUNG);
}

/*
 * End lease a at once for reason (enum stop_reason), as a job stopped for it ends (a release:
 * exit 0, else -1, a timeout's -9): it has no process to wait for. A queued one, whose
 * heartbeat lapsed, leaves its queues.
 */
static void
lease_end(struct active *a, int reason)
{
	if (a->job.status == JOB_QUEUED)
		sched_unlink(&D.sched, &a->job);
	else
		mark_stopping(a, reason);
	a->stop = reason;
	finish_stopped(a, reason == STOP_RELEASE ? 0 : -1);
}

/*
 * Ask a running job (or control command) to stop for reason (enum stop_reason): SIGINT to its
 * group now, SIGKILL after TT_DEVICE_STOP_GRACE_SEC (proc_job_stop; a second stop sends
 * nothing). Its end is recorded when its shell ended (iteration_done: finish_stopped);
 * a job stopped for its timeout is timed_out from now on. A run job whose shell ended already
 * keeps its status: the stop ends only the iterations still to come (late_stop).
 */
static void
job_stop(struct active *a, int reason)
{
	enum proc_job_state st = proc_job_state(a->proc);

	if (a->job.mode == JOB_MODE_LEASE && a->job.status != JOB_DONE) {
		lease_end(a, reason);
		return;
	}
	if (a->job.status != JOB_RUNNING)
		return;
	/* The job's shell has ended (reaped) and only what it left behind is awaited: its pipe's
	 * other holders or its killed group. Its exit status is known by then, too late to
	 * change how it ended: the stop ends only the iterations still to come. */
	if (a->job.mode == JOB_MODE_RUN && (st == PROC_JOB_REAPED || st == PROC_JOB_KILLING)) {
		if (a->late_stop == STOP_NONE || reason == STOP_SHUTDOWN)
			a->late_stop = reason;
		return;
	}
	/* A job stopped for its deadline or its silence was stopped for that: a stop of the
	 * service does not make it "interrupted". */
	if (a->stop != STOP_NONE && (reason != STOP_SHUTDOWN || a->stop == STOP_TIMEOUT ||
				     a->stop == STOP_HUNG))
		reason = a->stop;
	mark_stopping(a, reason);
	if (a->watch) /* the stop ends it within the grace: no more to watch */
		timer_stop(&a->watch->silence);
	proc_job_stop(a->proc, cfg.stop_grace);
}

/*
 * Finish a job: record the outcome (why: enum job_end; a negative exit code of a job that died
 * of a signal, on its own or stopped, is that signal; a timeout's is -9 whatever its shell did,
 * and the caller sets j->end_signal to what the shell died of), close its log (the marker line
 * of trailer, when not NULL, and the truncation marker), write meta.json, free its card, answer its waiters. Memory is
 * released after the commit. A job the daemon's crash cut short with no sign of life after its
 * start has no known end: its elapsed time is null rather than a false 0 s.
 */
static void
job_finish_at(struct active *a, double end, int why, int exit_code, const char *error,
	      const char *trailer)
{
	struct job *j = &a->job;
	char cards[256], *line = trailer ? xasprintf(PROC_MARKER " %s\n", trailer) : NULL;
	int i;

	if (a->watch)
		timer_stop(&a->watch->deadline);
	if (a->watch)
		timer_stop(&a->watch->silence);
	sched_job_transition(j, JOB_PHASE_DONE);
	j->finished_at = end;
	j->elapsed = why == JOB_END_CRASH && end <= j->started_at ? NAN /* no sign of life */
		     : isnan(j->started_at) ? 0 : end - j->started_at;
	j->exit_code = exit_code;
	j->has_exit_code = true;
	j->end_reason = why;
	if (why != JOB_END_TIMEOUT) /* a timeout's -9 is no signal: the caller set end_signal */
		j->end_signal = exit_code < 0 && j->mode == JOB_MODE_RUN &&
				(why == JOB_END_SIGNAL || why == JOB_END_KILLED ||
				why == JOB_END_RESET || why == JOB_END_HUNG) ? -exit_code : 0;
	free(j->error);
	j->error = error ? xstrdup(error) : NULL;
	if (open_log(a) == 0) {
		if (a->log.write_errno) /* the drop line cannot say it when the disk is full */
			logmsg("tt-device-queue: job %s: output could not be stored (%s); %lld bytes "
			       "dropped", j->id, strerror(a->log.write_errno), a->log.dropped);
		capfile_finish(&a->log, line);
		a->log.fd = -1;
		j->log_size = a->log.size;
		j->dropped_log_bytes = a->log.dropped;
		j->log_truncated = a->log.dropped > 0;
	}
	free(line);
	write_meta(j);
	mark_dirty(a); /* freed once that is committed (store_committed) */
	waiters_wake(a, true);
	if (!card_known(a->card))
		return; /* a job of a card no longer configured, failed at start-up */
	if (j->mode == JOB_MODE_RUN && cfg.health_after_failure &&
	    (why == JOB_END_TIMEOUT || why == JOB_END_KILLED || why == JOB_END_SIGNAL ||
	     why == JOB_END_HUNG || why == JOB_END_CRASH))
		for (i = 0; i < sched_job_ncards(j); i++) { /* its card may be wedged: look first */
			struct card *c = sched_card(&D.sched, sched_job_device(j, i));

			c->check_pending = true;
			card_dirty(c);
		}
	sched_vacate(&D.sched, j); /* each card it held is free now, its processes all gone */
	logmsg("tt-device-queue: job %s on %s finished: exit %d in %.2fs%s%s%s%s%s", j->id,
	       job_cards(j, cards, sizeof(cards)), exit_code, isnan(j->elapsed) ? 0 : j->elapsed,
	       why == JOB_END_EXITED ? "" : " (", why == JOB_END_EXITED ? "" : sched_end_name(why),
	       why == JOB_END_EXITED ? "" : ")", error ? ": " : "", error ? error : "");
}

/* job_finish_at, the job ending now. */
static void
job_finish(struct active *a, int why, int exit_code, const char *error, const char *trailer)
{
	job_finish_at(a, clock_wall(), why, exit_code, error, trailer);
}

static void
job_start(struct active *a)
{
	struct job *j = &a->job;

	sched_job_transition(j, JOB_PHASE_STARTING);
	j->started_at = clock_wall();
	j->repeat_current = 1; /* in the "running" commit: a crash after it shows the job ran */
	sched_job_note_epochs(&D.sched, j);
	a->started_mono = mono_now;
	sched_occupy(&D.sched, j);
	mark_dirty(a);
	vec_push(&D.spawn, a);
}

/* ------------------------------------------------------- processes outside the queue */


static void holders_fired(void *arg);
static struct timer holders_timer = {.idx = -1, .fn = holders_fired};

/*
 * Whether pid belongs to the job or reset running on card ctx: its own, not foreign. The cards
 * a lease holds are its owner's to use: any process of that user is its own.
 */
static bool
holder_own(pid_t pid, void *ctx)
{
	struct card *c = ctx;
	const struct job *j = c->current;
	char path[32];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (j && j->mode == JOB_MODE_LEASE)
		return stat(path, &st) == 0 && (long long)st.st_uid == j->owner_uid;
	return j && proc_job_owns(active_of(c->current)->proc, pid);
}

/* Whether card i is watched and runs a job, which records who opens the card meanwhile. */
static bool
watching_job(int i)
{
	const struct job *cur = D.sched.cards[i].current;

	return looks[i].watched && cur && cur->mode == JOB_MODE_RUN;
}

/*
 * Record on c's running job the holders it had not met yet: its foreign_holders (a JSON array
 * of at most MAX_SEEN), so a job that failed beside a process outside the queue says so.
 */
static void
holders_note(struct card *c, const struct card_look *l)
{
	struct active *a = active_of(c->current);
	struct job_watch *x = watch_of(a);
	struct json_buf b;
	struct json_w w;
	int i, k;

	for (i = 0; i < l->n && i < MAX_HOLDERS && x->nseen < MAX_SEEN; i++) {
		for (k = 0; k < x->nseen && x->seen[k].h.pid != l->h[i].pid; k++)
			;
		if (k == x->nseen)
			x->seen[x->nseen++] = (struct seen_holder){l->h[i], l->since[i]};
	}
	json_buf_init(&b);
	json_w_init(&w, &b);
	json_w_arr(&w);
	for (k = 0; k < x->nseen; k++)
		w_holder(&w, &x->seen[k].h, x->seen[k].since);
	json_w_arr_end(&w);
	json_buf_add(&b, "", 1);
	free(a->job.foreign_holders);
	a->job.foreign_holders = b.oom ? NULL : xstrdup(b.p);
	json_buf_free(&b);
}

/*
 * Look at who has card c open now (the driver's pids file, proc_card_holders): c->foreign is
 * set while a process outside the queue does, and nothing starts on c then (sched_next); its
 * running job records it. A card whose pids file cannot be read (an older driver, a simulated
 * card) is not watched and behaves as if nobody held it.
 */
static void
look_holders(struct card *c)
{
	struct card_look *l = &looks[card_index(c)], was = *l;
	int n = proc_card_holders(cfg.pids_dir, c->device, holder_own, c, l->h, MAX_HOLDERS);
	int pn = was.n < MAX_HOLDERS ? was.n : MAX_HOLDERS, i, k;
	char user[64];

	l->watched = n >= 0;
	l->n = n > 0 ? n : 0;
	for (i = 0; i < l->n && i < MAX_HOLDERS; i++) {
		for (k = 0; k < pn && was.h[k].pid != l->h[i].pid; k++)
			;
		l->since[i] = k < pn ? was.since[k] : clock_wall();
		if (k == pn)
			logmsg("tt-device-queue: card %d is open outside the queue: pid %d (%s) %s; "
			       "nothing starts on it until that ends", c->device, (int)l->h[i].pid,
			       l->h[i].uid == (uid_t)-1 ? "?" : proc_user_name(l->h[i].uid, user,
									      sizeof(user)),
			       l->h[i].cmd);
	}
	if (pn > 0 && l->n == 0)
		logmsg("tt-device-queue: card %d is no longer open outside the queue", c->device);
	c->foreign = l->n > 0;
	if (l->n > 0 && watching_job(card_index(c)))
		holders_note(c, l);
}

/* The cards of running jobs are looked at here; waiting cards by the dispatch pass after. */
static void
holders_fired(void *arg)
{
	int i;

	(void)arg;
	for (i = 0; i < D.sched.ncards; i++)
		if (watching_job(i))
			look_holders(&D.sched.cards[i]);
}

/* At start: say once which cards the driver's pids files do not let the daemon watch. */
static void
holders_setup(void)
{
	char list[512] = "";
	size_t n = 0;
	int i;

	for (i = 0; i < D.sched.ncards; i++) {
		look_holders(&D.sched.cards[i]);
		if (!looks[i].watched && n < sizeof(list))
			n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%d", n ? ", " : "",
					      D.sched.cards[i].device);
	}
	if (n)
		logmsg("tt-device-queue: processes that open a card outside the queue are not seen on "
		       "card%s %s: no %s/N/pids (a driver before tt-kmd 2.5.0, or simulated cards)",
		       strchr(list, ',') ? "s" : "", list, cfg.pids_dir);
}

/* ------------------------------------------------------------------------ card resets */

/* Finished-job and reset counters per card for /metrics (since this start). */
enum outcome { OUT_OK = 0, OUT_FAILED, OUT_TIMEOUT, OUT_CANCELLED, OUT_N };
static long long finished_count[MAX_CARDS][OUT_N];
static long long reset_count[MAX_CARDS][2]; /* ok, failed */
static double started_mono; /* for ttq_uptime_seconds: immune to wall-clock steps */

static int write_health_script(void);

#define DEFAULT_PYTHON "~/tenstorrent/.venv/bin/python3" /* the default health check's */

static const char *
health_template(void)
{
	static char *def;

	if (cfg.health_cmd)
		return cfg.health_cmd;
	if (!D.health_script_written && D.health_check_path &&
	    access(D.health_check_path, F_OK) != 0) /* none beside us, and the disk refused it */
		D.health_script_written = write_health_script() == 0;
	if (!def)
		def = xasprintf(DEFAULT_PYTHON " '%s' {device}", D.health_check_path);
	return def;
}

/*
 * The command of a reset step for card device as the operator configured it, {device}
 * replaced; a reset command without {device} gets the number last.
 */
static char *
step_command(int step, int device)
{
	const char *tmpl = step == RESET_STEP_RESET  ? cfg.reset_cmd
			   : step == RESET_STEP_DEEP ? cfg.deep_reset_cmd
						     : health_template();
	const char *p = tmpl, *hit;
	struct json_buf b;

	json_buf_init(&b);
	for (; (hit = strstr(p, "{device}")); p = hit + 8)
		json_buf_printf(&b, "%.*s%d", (int)(hit - p), p, device);
	json_buf_printf(&b, "%s", p);
	if (p == tmpl && step != RESET_STEP_HEALTH)
		json_buf_printf(&b, " %d", device);
	json_buf_add(&b, "", 1);
	if (b.oom)
		abort();
	return b.p;
}

/* Fail what is queued on c when it is dead (sched_fail_next): those jobs can never run. */
static void
card_fail_queue(struct card *c)
{
	char error[256];
	struct job *j;

	snprintf(error, sizeof(error), "Card %d is dead: it needs a host reboot or operator recovery; "
				       "this job never ran", c->device);
	while ((j = sched_fail_next(&D.sched, c)))
		job_finish(active_of(j), JOB_END_CARD_DEAD, -1, error, error);
}

/*
 * The reset procedure of a's card ended as `how` (sched_reset_next's answer; why: what could
 * not be run, for RESET_NEXT_UNRUNNABLE): word the card's reason, let sched_reset_end change
 * the card, finish the reset job and log it. A command that could not be run at all is a
 * configuration error, not a card failure: marking the card dead would take a working card
 * out of service for a typo in its command, so the reset job fails naming the command and why
 * and the card goes back to what it was, carrying the error in status and /metrics.
 */
static void
reset_end(struct active *a, enum reset_next how, const char *why)
{
	struct card *c = a->card;
	static const char *const variable[] = {[RESET_STEP_RESET] = "TT_DEVICE_RESET_CMD",
					       [RESET_STEP_DEEP] = "TT_DEVICE_DEEP_RESET_CMD",
					       [RESET_STEP_HEALTH] = "TT_DEVICE_HEALTH_CHECK_CMD"};
	bool was_dead = a->ladder.was_dead, ok = how == RESET_NEXT_HEALTHY;
	bool check = ok && a->ladder.check; /* only its health was read */
	char *reason = NULL, *cmd, *said;

	if (how == RESET_NEXT_DEAD) {
		reason = xasprintf("Reset and health verification failed%s; card %d needs a host "
				   "reboot or operator recovery (reset --device %d runs it again)",
				   was_dead ? " again" : "", c->device, c->device);
	} else if (how == RESET_NEXT_UNRUNNABLE) {
		cmd = step_command(a->ladder.step, c->device);
		reason = xasprintf("Configuration error: %s could not be run (%s): %s; card %d was not "
				   "reset and %s", variable[a->ladder.step], why, cmd, c->device,
				   was_dead ? "stays dead" : "stays in service");
		free(cmd);
	}
	sched_reset_end(c, &a->ladder, how, reason, clock_wall()); /* c owns reason now */
	card_dirty(c);
	if (!check)
		reset_count[card_index(c)][!ok]++;
	/* one line for the journal and the reset job's log */
	if (check)
		said = xasprintf("health check of card %d passed", c->device);
	else if (ok)
		said = xasprintf("reset of card %d succeeded: %shealthy, reset epoch %lld", c->device,
				 was_dead ? "the dead card is " : "", c->reset_epoch);
	else
		said = xasprintf("reset of card %d failed%s: %s", c->device,
				 how == RESET_NEXT_DEAD ? "; the card is dead" : "", reason);
	job_finish(a, JOB_END_EXITED, !ok, reason, said);
	logmsg("tt-device-queue: %s", said);
	free(said);
	card_fail_queue(c); /* dead, or still dead: what was queued meanwhile never runs */
}

/* Run the command of the reset procedure's current step (a->ladder.step). */
static void
reset_run(struct active *a)
{
	char *cmd = step_command(a->ladder.step, a->job.device);
	char *argv[] = {"/bin/bash", "-c", cmd, NULL}, err[512], why[600];

	if (open_log(a) == 0)
		capfile_marker(&a->log, "$ %s", cmd);
	if (spawn_process(a, argv, proc_control_env(environ), NULL, err, sizeof(err)) == 0) {
		timer_set(&watch_of(a)->deadline, mono_now + cfg.health_cmd_timeout);
	} else {
		snprintf(why, sizeof(why), "the daemon could not start it: %s", err);
		reset_end(a, RESET_NEXT_UNRUNNABLE, why);
	}
	free(cmd);
}

/* One control command of the reset procedure ended. */
static void
reset_step_done(struct active *a, int code)
{
	enum reset_next next;
	bool was_check = a->ladder.check;

	capfile_marker(&a->log, "exit status %d", code);
	next = sched_reset_next(&a->ladder, code, cfg.reset_retries, cfg.deep_reset_cmd[0] != '\0',
				!cfg.health_cmd);
	if (next != RESET_NEXT_RUN) {
		/* why, for RESET_NEXT_UNRUNNABLE: a shell's 127, 126, or health_check.py's 2 */
		reset_end(a, next, code == 127   ? "exit 127: not found"
				   : code == 126 ? "exit 126: not executable"
						 : "exit 2: health_check.py could not import tt_umd "
						   "(its log says why)");
		return;
	}
	if (was_check && !a->ladder.check) { /* it failed its health check alone */
		sched_check_failed(a->card);
		card_dirty(a->card);
		capfile_marker(&a->log, "the health check failed: the card is reset");
		logmsg("tt-device-queue: card %d failed its health check; reset of card %d "
		       "started", a->card->device, a->card->device);
	}
	reset_run(a);
}

/*
 * Card c's reset procedure starts now as a job of its own (sched_next said SCHED_START_RESET),
 * or, check set, its health check alone (SCHED_START_CHECK): a job that ended badly may have
 * left the card wedged. A check that passes leaves the card as it was, its reset epoch too; one
 * that fails goes on as the reset procedure in the same job (reset_step_done).
 */
static void
reset_start(struct card *c, bool check)
{
	struct active *a;
	char id[33];

	if (new_job_id(id) < 0 || !(a = active_new()))
		return; /* tried again at the next dispatch pass */
	memcpy(a->job.id, id, sizeof(id));
	a->card = c;
	a->job.device = c->device;
	a->job.mode = JOB_MODE_RESET;
	a->job.cmd = step_command(check ? RESET_STEP_HEALTH : RESET_STEP_RESET, c->device);
	a->job.cwd = xstrdup("");
	a->job.client_id = xstrdup("system");
	a->job.timeout = (int)ceil(cfg.health_cmd_timeout);
	a->job.submitted_at = clock_wall();
	if (check)
		sched_check_start(c, &a->ladder);
	else
		sched_reset_start(c, &a->ladder);
	card_dirty(c);
	job_start(a);
	logmsg("tt-device-queue: %s of card %d started%s", check ? "health check" : "reset",
	       c->device, check ? ": its last job ended badly"
	       : a->ladder.was_dead ? ": the recovery of a dead card, asked for again" : "");
}

/*
 * Carry out a reset request's action on one card (decided by sched_reset_request and, when
 * scheduled, already on disk): stop the job it preempts (sched_reset_preempts; job_id the job
 * a job-based request named, else NULL) and write the card's entry of the POST /reset answer,
 * its hint saying what the request did.
 */
static void
reset_request_card(struct card *c, enum reset_action act, const char *job_id, struct json_w *w)
{
	static const char *const hints[] = {
	    [RESET_SCHEDULED] = "Reset of card %1$d scheduled; GET /status shows progress and the "
				"reset job's log the details",
	    [RESET_JOINED] = "A reset of card %1$d is already pending or running; this request "
			     "joined it",
	    [RESET_ALREADY_RESET] = "Card %1$d was reset after that job ran; nothing to do",
	    [RESET_DEAD] = "Card %1$d is dead and was left alone: reset it by itself (reset "
			   "--device %1$d, {\"device_id\": %1$d}) to run its recovery again, or "
			   "reboot the host",
	    [RESET_REFUSED] = "Card %1$d is open outside the queue (pid %2$d, %3$s: %4$s%5$s): a "
			      "reset under it may crash the host or hang the card; end that process, "
			      "or force the reset (reset --force, \"force\": true)",
	};
	struct job *victim = sched_reset_preempts(c, act, cfg.reset_preempts, job_id);
	const struct card_look *l = &looks[card_index(c)];
	char hint[512], user[64] = "?";
	size_t n;
	int i;

	if (victim)
		job_stop(active_of(victim), STOP_PREEMPT);
	if (act == RESET_REFUSED && l->h[0].uid != (uid_t)-1)
		proc_user_name(l->h[0].uid, user, sizeof(user));
	if (act == RESET_SCHEDULED && c->state == CARD_DEAD)
		snprintf(hint, sizeof(hint), "Card %d is dead: its whole recovery runs again (reset, "
			 "retries, health check%s); GET /status shows whether it comes back", c->device,
			 cfg.deep_reset_cmd[0] ? ", deep reset" : "");
	else
		snprintf(hint, sizeof(hint), hints[act], c->device, (int)l->h[0].pid, user,
			 l->h[0].cmd, l->n > 1 ? ", and others" : "");
	n = strlen(hint);
	if (c->held && (act == RESET_SCHEDULED || act == RESET_JOINED))
		snprintf(hint + n, sizeof(hint) - n, "; the card is held: the reset runs once it is "
			 "released");
	json_w_obj(w);
	w_device(w, c->device);
	w_str(w, "action", sched_reset_action_name(act));
	w_str(w, "device_state", sched_state_name(c->state));
	w_int(w, "reset_epoch", c->reset_epoch);
	w_str(w, "hint", hint);
	if (act == RESET_DEAD || act == RESET_REFUSED)
		w_str(w, "error", hint);
	if (act == RESET_REFUSED) {
		json_w_key(w, "foreign_holders");
		json_w_arr(w);
		for (i = 0; i < l->n && i < MAX_HOLDERS; i++)
			w_holder(w, &l->h[i], l->since[i]);
		json_w_arr_end(w);
	}
	json_w_obj_end(w);
}

/*
 * The cards of the job named by job_id field i, each with the reset epoch the job recorded for
 * it (at its submission, then at its start): want[k] and epoch[k] for D.sched.cards[k]. A job of
 * several cards names each of them: whichever it wedged, a reset for the job reaches it.
 * Its cards' words ("cards 0,1") go into cards[0..cap). 0, or -1 (answered) when the job is
 * unknown or one of its cards is not configured here.
 */
static int
reset_job_cards(struct http_conn *c, const char *body, int i, char id[33], bool *want,
		long long *epoch, char *cards, size_t cap)
{
	struct active *a;
	struct job stored, *j;
	char *out;
	int r, k;

	if (job_member(c, body, i, id) < 0 || (r = find_job(c, id, &a, &stored, &out)) < 0)
		return -1;
	j = r == 1 ? &a->job : &stored;
	job_cards(j, cards, cap);
	for (k = 0, r = 0; k < sched_job_ncards(j) && r == 0; k++) {
		int dev = sched_job_device(j, k);
		struct card *card = sched_card(&D.sched, dev);

		if (!card) {
			respond_error(c, 400, "Job %s was queued on card %d, which is not configured here",
				      id, dev);
			r = -1;
		} else {
			want[card_index(card)] = true;
			epoch[card_index(card)] = sched_job_epoch(j, dev);
		}
	}
	sched_job_clear(&stored);
	free(out);
	return r;
}

/*
 * POST /reset {"device_id"} | {"job_id"} | {"job_id", "device_id"} | {}: a card, every card
 * a job needed (or the one of them named beside it), or every card. One card is answered with
 * its entry, several (or every card, however many) with {"resets": [...]}.
 */
static void
handle_reset(struct http_conn *c, const struct call *call)
{
	const char *body = call->body;
	struct card *card = NULL, *one = NULL;
	enum reset_action act[MAX_CARDS];
	bool want[MAX_CARDS] = {false}, force;
	long long epoch[MAX_CARDS];
	char id[33], cards[256];
	int ji, di, fi, i, n = 0, targets = 0;
	struct json_w w;

	if (parse_body(c, body, call->body_len, reset_fields) < 0 ||
	    (di = device_member(c, body)) == -2 || (ji = target_member(c, body, "job_id")) == -2)
		return;
	if ((fi = json_doc_field(&doc, "force")) >= 0 && toks[fi].type != JSON_TRUE &&
	    toks[fi].type != JSON_FALSE) {
		respond_error(c, 400, "force must be true or false");
		return;
	}
	force = fi >= 0 && toks[fi].type == JSON_TRUE;
	if (D.shutting_down) {
		respond_refused(c, NULL, "The service is shutting down", NULL);
		return;
	}
	for (i = 0; i < D.sched.ncards; i++)
		epoch[i] = -1;
	if (ji >= 0 && reset_job_cards(c, body, ji, id, want, epoch, cards, sizeof(cards)) < 0)
		return;
	if (di >= 0 && !(card = card_from_field(c, body, di)))
		return;
	if (card && ji >= 0 && !want[card_index(card)]) {
		respond_error(c, 400, "job_id %s was queued on %s, not on card %d", id,
			      cards, card->device);
		return;
	}
	for (i = 0; i < D.sched.ncards; i++) {
		struct job *cur = D.sched.cards[i].current;

		if (card || ji < 0) /* that card alone, or every card */
			want[i] = !card || &D.sched.cards[i] == card;
		/* A reset that would stop a job is its owner's or an admin's; of an idle card, or
		 * one running the caller's own job, anyone's. */
		if (want[i] && cur && cur->mode != JOB_MODE_RESET && cfg.reset_preempts &&
		    !may_act_on(c, cur, "reset the card running"))
			return;
	}
	for (i = 0; i < D.sched.ncards; i++) {
		if (!want[i])
			continue;
		one = &D.sched.cards[i];
		targets++;
		look_holders(one);
		/* A reset under an open card may crash the host. Only a request naming this card
		 * alone runs a dead card's recovery again. */
		act[i] = one->foreign && !force ? RESET_REFUSED
						: sched_reset_request(one, epoch[i], card && ji < 0);
		if (act[i] == RESET_SCHEDULED) {
			card_dirty(one);
			n++;
		}
		if (force && (act[i] == RESET_SCHEDULED || act[i] == RESET_JOINED))
			one->reset_forced = true;
	}
	/* reset_pending is on disk before the answer and before any job is preempted for it. */
	if (n > 0 && !store_sync_now(NULL)) {
		for (i = 0; i < D.sched.ncards; i++)
			if (want[i] && act[i] == RESET_SCHEDULED)
				sched_reset_withdraw(&D.sched.cards[i]);
		respond_refused(c, card, "The job store is degraded; the reset cannot be recorded",
				NULL);
		return;
	}
	w = body_begin();
	if (targets == 1 && (card || ji >= 0)) {
		i = card_index(one);
		reset_request_card(one, act[i], ji >= 0 ? id : NULL, &w);
		respond_json(c, act[i] == RESET_DEAD ? 503 : act[i] == RESET_REFUSED ? 409 : 200,
			     &body_buf, NULL);
		return;
	}
	json_w_obj(&w);
	json_w_key(&w, "resets");
	json_w_arr(&w);
	for (i = 0; i < D.sched.ncards; i++)
		if (want[i])
			reset_request_card(&D.sched.cards[i], act[i], ji >= 0 ? id : NULL, &w);
	json_w_arr_end(&w);
	json_w_obj_end(&w);
	respond_json(c, 200, &body_buf, NULL);
}

/*
 * POST /hold {"device_id", "reason", "client_id"} and POST /release {"device_id"}: a held card
 * lets its running job finish and starts nothing more (sched_next) until it is released,
 * while its queue keeps taking jobs; maintenance needs no reset and no stopped service. The
 * change is on disk before the answer. Holding a held card keeps the first hold. The answer:
 * the card's hold as it is now, and what the request did.
 */
static void
handle_hold(struct http_conn *c, const struct call *k)
{
	bool hold = k->req->path[1] == 'h'; /* routed here: /hold, else /release */
	static const char *const hold_known[] = {"device_id", "reason", "client_id", NULL},
			       *const release_known[] = {"device_id", "client_id", NULL};
	char *by = NULL, *reason = NULL;
	const char *bad;
	struct card *card;
	struct card_hold h = {0};
	struct json_w w;
	bool was;
	int i;

	if (parse_body(c, k->body, k->body_len, hold ? hold_known : release_known) < 0 ||
	    (i = device_member(c, k->body)) == -2 ||
	    !admin_only(c, hold ? "hold a card" : "release a card"))
		return;
	if (D.shutting_down) {
		respond_refused(c, NULL, "The service is shutting down", NULL);
		return;
	}
	if (i < 0) {
		respond_error(c, 400, "device_id is required: the card to %s", hold ? "hold" : "release");
		return;
	}
	if (!(card = card_from_field(c, k->body, i)))
		return;
	/* a release has no reason: parse_body refused one */
	if (json_doc_str(&doc, "client_id", MAX_CLIENT_ID, &by) < 0 ||
	    json_doc_str(&doc, "reason", MAX_HOLD_REASON, &reason) < 0) {
		doc_refuse(c);
		goto out;
	}
	/* both are printed by `status` and in the log: no forged lines, no escapes */
	bad = by && has_control(by) ? "client_id" : reason && has_control(reason) ? "reason" : NULL;
	if (bad) {
		respond_error(c, 400, "%s must not contain control characters", bad);
		goto out;
	}
	was = card->held;
	if (was != hold) {
		h = (struct card_hold){hold, hold ? (by ? by : xstrdup("anon")) : NULL, reason,
				       hold ? clock_wall() : NAN};
		if (hold)
			by = NULL;
		reason = NULL;
		sched_hold_swap(card, &h); /* h now holds the card's previous hold */
		card_dirty(card);
		if (!store_sync_now(NULL)) {
			sched_hold_swap(card, &h); /* memory as it is on disk; still marked dirty */
			respond_refused(c, card, "The job store is degraded; the change cannot be "
						 "recorded", NULL);
			goto out;
		}
		logmsg("tt-device-queue: card %d %s by %s%s%s", card->device, hold ? "held" : "released",
		       hold ? card->held_by : by ? by : "anon", card->hold_reason ? ": " : "",
		       card->hold_reason ? card->hold_reason : "");
	}
	w = body_begin();
	json_w_obj(&w);
	w_device(&w, card->device);
	w_str(&w, "action", hold ? (was ? "already_held" : "held")
				 : (was ? "released" : "not_held"));
	w_str(&w, "device_state", sched_state_name(card->state));
	w_bool(&w, "held", card->held);
	w_str(&w, "held_by", card->held_by);
	w_time(&w, "held_at", card->held_at);
	w_str(&w, "hold_reason", card->hold_reason);
	json_w_obj_end(&w);
	respond_json(c, 200, &body_buf, NULL);
out:
	free(by);
	free(reason);
	free(h.by);
	free(h.reason);
}

/* GET /metrics: Prometheus text exposition 0.0.4. */
static void
handle_metrics(struct http_conn *c, const struct call *call)
{
	static const char *const outcomes[] = {"ok", "failed", "timeout", "cancelled"};
	/* Each family's name, type and help: the daemon's own (values in daemon[]), then the
	 * per-card gauges (values in card[]), then the per-card families with a second label. */
	static const char *const fam[][3] = {
	    {"uptime_seconds", "gauge", "Seconds since the daemon started."},
	    {"store_degraded", "gauge", "1 while the job store cannot be written."},
	    {"http_busy_total", "counter", "Requests answered 503 with Retry-After: the connections "
					   "or the long-polls were at their limit."},
	    {"http_long_polls", "gauge", "Long-polls held now."},
	    {"log_lines_dropped_total", "counter", "Log lines stderr could not take without waiting."},
	    {"queue_depth", "gauge", "Queued jobs per card."},
	    {"card_held", "gauge", "1 while the card is held for maintenance."},
	    {"control_error", "gauge", "1 while the card's last reset could not run a control "
				       "command (a configuration error), until a reset succeeds."},
	    {"card_foreign_holders", "gauge", "Processes outside the queue that have the card open, "
					      "at the last look."},
	    {"running_job_age_seconds", "gauge", "Age of the running job or reset (0 when idle)."},
	    {"card_state", "gauge", "1 for the card's current state."},
	    {"jobs_finished_total", "counter", "Jobs finished since start, by outcome."},
	    {"resets_total", "counter", "Card resets since start, by outcome."},
	};
	enum { CARD_FAM = 5, AGE_FAM = 9, STATE_FAM, FINISHED_FAM, RESETS_FAM };
	double daemon[] = {mono_now - started_mono, D.degraded, http_server_busy(D.http), D.held,
			   log_out.dropped};
	struct json_buf *b = &body_buf;
	int f, i, k;

	(void)call;
	body_begin();
	for (f = 0; f <= RESETS_FAM; f++) {
		json_buf_printf(b, "# HELP ttq_%s %s\n# TYPE ttq_%s %s\n", fam[f][0], fam[f][2],
				fam[f][0], fam[f][1]);
		if (f < CARD_FAM)
			json_buf_printf(b, "ttq_%s %.*f\n", fam[f][0], f ? 0 : 3, daemon[f]);
		for (i = 0; f >= CARD_FAM && i < D.sched.ncards; i++) {
			struct card *cd = &D.sched.cards[i];
			double card[] = {cd->queued, cd->held, cd->control_error != NULL, looks[i].n,
					 cd->current ? mono_now - active_of(cd->current)->started_mono : 0};

			if (f <= AGE_FAM)
				json_buf_printf(b, "ttq_%s{device=\"%d\"} %.*f\n", fam[f][0], cd->device,
						f == AGE_FAM ? 3 : 0, card[f - CARD_FAM]);
			for (k = CARD_HEALTHY; f == STATE_FAM && k <= CARD_DEAD; k++)
				json_buf_printf(b, "ttq_card_state{device=\"%d\",state=\"%s\"} %d\n",
						cd->device, sched_state_name(k), cd->state == k);
			for (k = 0; f == FINISHED_FAM && k < OUT_N; k++)
				json_buf_printf(b, "ttq_jobs_finished_total{device=\"%d\",outcome=\"%s\"} "
						"%lld\n", cd->device, outcomes[k], finished_count[i][k]);
			for (k = 0; f == RESETS_FAM && k < 2; k++) /* ok, failed */
				json_buf_printf(b, "ttq_resets_total{device=\"%d\",outcome=\"%s\"} %lld\n",
						cd->device, outcomes[k], reset_count[i][k]);
		}
	}
	http_conn_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", b->p, b->len, NULL);
}

/* Count a's outcome for /metrics once it is on disk (a refused submission never counts). */
static void
count_outcome(const struct active *a)
{
	const struct job *j = &a->job;
	int i, k = j->timed_out ? OUT_TIMEOUT : isnan(j->started_at) ? OUT_CANCELLED
				  : j->exit_code == 0		    ? OUT_OK
								    : OUT_FAILED;

	for (i = 0; j->mode != JOB_MODE_RESET && i < sched_job_ncards(j); i++) { /* each card's */
		struct card *c = sched_card(&D.sched, sched_job_device(j, i));

		if (c) /* not a card no longer configured */
			finished_count[card_index(c)][k]++;
	}
}

/* ------------------------------------------------------------------------ store sync */

static void
dispatch_pass(void)
{
	int i;

	D.heartbeat_mono = mono_now;
	if (D.shutting_down)
		return;
	/* Who holds a card is read right before anything may start on it: every card first, as a
	 * job of several cards starts only when none of them is held outside the queue. */
	for (i = 0; i < D.sched.ncards; i++) {
		struct card *c = &D.sched.cards[i];

		if (!c->current && !c->held && !D.degraded &&
		    (c->head || c->reset_pending || c->check_pending || c->state == CARD_RESETTING))
			look_holders(c);
	}
	for (i = 0; i < D.sched.ncards; i++) {
		struct card *c = &D.sched.cards[i];
		struct job *j;
		enum sched_action act = sched_next(&D.sched, c, !D.degraded, &j);

		if (act == SCHED_START_JOB)
			job_start(active_of(j));
		else if (act == SCHED_START_RESET || act == SCHED_START_CHECK)
			reset_start(c, act == SCHED_START_CHECK);
	}
	/* Look again in FOREIGN_RECHECK seconds while a card waits for a process outside the
	 * queue, or a job runs on a watched card (to record who opens it meanwhile); an idle
	 * daemon, or one without the driver's pids files, never wakes for it. */
	for (i = 0; i < D.sched.ncards && !timer_armed(&holders_timer); i++)
		if ((D.sched.cards[i].foreign && !D.sched.cards[i].current) || watching_job(i))
			timer_set(&holders_timer, mono_now + FOREIGN_RECHECK);
}

/* What lived in the old log dir and is made again in the new one as it is needed. */
static void
log_dir_forget_files(void)
{
	struct active *a;

	D.health_script_written = false; /* written again before the next reset */
	for (a = actives; a; a = a->anext) { /* a job's log is open while it runs */
		long long dropped = a->log.dropped;

		if (a->log.fd < 0)
			continue;
		close(a->log.fd);
		a->log.fd = -1;
		if (open_log(a) == 0) {
			a->log.dropped = dropped;
			capfile_marker(&a->log, "the log dir was removed while this ran; its output "
				       "before this line is lost");
		}
	}
}

/*
 * The log dir or its database is gone or replaced (store_dir_in_place): make the folder again
 * and lock it (store_dir_remake), then write the database there from the open handle, the one
 * place its records still live, before anything more is committed (store_restore). Once a
 * new folder is locked, the old one's files are forgotten (log_dir_forget_files) and the new
 * one is watched. 0, or -1 with why[] when it cannot be done now (the caller goes degraded
 * and tries again).
 */
static void dir_watch(void);

static int
log_dir_restore(char *why, size_t cap)
{
	char warn[256];
	int made;

	logmsg("tt-device-queue: WARNING: TT_DEVICE_LOG_DIR %s or its database was removed or "
	       "replaced; making it again from the open database", cfg.log_dir);
	made = store_dir_remake(D.dir, why, cap, warn, sizeof(warn));
	if (warn[0])
		logmsg("tt-device-queue: WARNING: TT_DEVICE_LOG_DIR %s %s", cfg.log_dir, warn);
	if (made < 0)
		return -1;
	if (made) {
		log_dir_forget_files(); /* the new folder is ours from now on */
		dir_watch();
	}
	if (store_restore(D.dir, &D.store, why, cap) < 0)
		return -1;
	logmsg("tt-device-queue: %s made again with every record%s",
	       made ? cfg.log_dir : store_dir_db(D.dir),
	       made ? "; the output of jobs that finished before is gone" : "");
	return 0;
}

/*
 * Every LOG_DIR_CHECK s where inotify cannot watch the log dir; else DIR_SETTLE after news.
 * Whether the log dir and the database in it are still those this daemon opened
 * (store_dir_in_place) is also checked before every commit (commit_dirty): one found gone
 * makes this turn commit, which restores it.
 */
static void
dir_check_fired(void *arg)
{
	int i;

	(void)arg;
	if (!D.dir_watched)
		timer_set(&D.dir_check, mono_now + LOG_DIR_CHECK);
	if (D.store && !store_dir_in_place(D.dir, D.store))
		for (i = 0; i < D.sched.ncards; i++)
			card_dirty(&D.sched.cards[i]);
}

/* The log dir itself went or moved, or its database's name was removed or replaced. */
static void
dir_notify_event(void *arg, short revents)
{
	(void)arg;
	(void)revents;
	if (store_dir_changed(D.dir)) /* each event pushes the look back: an rm -rf ends first */
		timer_set(&D.dir_check, mono_now + DIR_SETTLE);
}

/*
 * Watch the log dir (again, after a restore made it anew; store_dir_watch); where inotify
 * cannot, it is looked at every LOG_DIR_CHECK seconds instead.
 */
static void
dir_watch(void)
{
	int fd = store_dir_watch(D.dir);

	if (fd >= 0 && D.dir_notify_slot < 0 &&
	    watch_add(fd, POLLIN, dir_notify_event, NULL, &D.dir_notify_slot) < 0)
		fd = -1;
	D.dir_watched = fd >= 0;
	if (D.dir_watched)
		timer_stop(&D.dir_check);
	else
		timer_set(&D.dir_check, mono_now + LOG_DIR_CHECK);
}

/* Every dirty record, and extra (a record not in memory yet, or NULL), in one commit. */
static int
store_write_dirty(const struct job *extra)
{
	int i, r = store_begin(D.store);

	for (i = 0; r == 0 && i <= D.dirty.n; i++) {
		const struct job *j = i < D.dirty.n ? &((struct active *)D.dirty.v[i])->job : extra;
		char *out = j ? job_output_path(j->id) : NULL;

		r = j ? store_put_job(D.store, j, out) : 0;
		free(out);
	}
	if (r < 0)
		return -1;
	for (i = 0; D.cards_dirty && i < D.sched.ncards; i++)
		if (D.sched.cards[i].dirty &&
		    store_put_card(D.store, &D.sched.cards[i], D.boot_id) < 0)
			return -1;
	return store_commit(D.store);
}

static void
store_committed(void)
{
	char cards[256];
	int i;

	/* Queued only now that it is on disk; logged before a same-turn cancel frees it. */
	for (i = 0; i < D.nacks; i++)
		if (!D.acks[i].replay)
			logmsg("tt-device-queue: job %s queued on %s by %s", D.acks[i].a->job.id,
			       job_cards(&D.acks[i].a->job, cards, sizeof(cards)),
			       D.acks[i].a->job.client_id);
	D.nacks = 0;
	for (i = 0; i < D.dirty.n; i++) {
		struct active *a = D.dirty.v[i];

		a->job.dirty = false;
		if (a->job.status == JOB_QUEUED) {
			free(a->job.env_json); /* stored; loaded again when the job starts */
			a->job.env_json = NULL;
		} else if (a->job.phase == JOB_PHASE_DONE) { /* its outcome is on disk */
			count_outcome(a);
			active_free(a);
		}
	}
	D.dirty.n = 0;
	for (i = 0; i < D.sched.ncards; i++)
		D.sched.cards[i].dirty = false;
	D.cards_dirty = false;
	if (D.degraded) {
		D.degraded = false;
		/* This turn's dispatch pass ran while degraded: wake the loop at once for another,
		 * or queued jobs would wait for an unrelated event (a request, a deadline). */
		timer_set(&D.store_retry, mono_now);
		logmsg("tt-device-queue: job store writable again; dispatch resumes");
	}
}

/*
 * This iteration's records could not be committed: put the jobs it dispatched back at the head
 * of their queues (their processes never started), then refuse its submissions with 503 (they
 * were never acknowledged). Dispatched jobs go back first so a refused submission that the
 * same iteration also dispatched is in its queue again when it is unlinked.
 */
static void
store_unwind(void)
{
	int i, k;

	for (i = D.spawn.n - 1; i >= 0; i--) {
		struct active *a = D.spawn.v[i];

		sched_vacate(&D.sched, &a->job);
		if (a->job.mode == JOB_MODE_RESET) {
			/* Not started: forget the reset job; the card's reset stays pending. */
			a->job.dirty = false; /* freed below, as it leaves the dirty list */
			continue;
		}
		a->job.started_at = NAN;
		a->job.repeat_current = 0; /* as it was queued: job_start set it for the commit */
		sched_requeue_front(&D.sched, &a->job);
	}
	D.spawn.n = 0;
	for (i = D.nacks - 1; i >= 0; i--) {
		struct ack *ack = &D.acks[i];
		struct active *a = ack->a;

		if (!ack->replay) { /* a replay's job goes with the first submission's ack */
			/* Failed in this same turn (its card died) and never acknowledged: it is
			 * forgotten whole, as if it had never come, not unlinked a second time. */
			if (a->job.phase == JOB_PHASE_DONE)
				store_remove_job_dir(D.dir, a->job.id);
			else
				sched_unlink(&D.sched, &a->job);
			a->job.dirty = false;
		}
		http_conn_retract(ack->conn);
		respond_refused(ack->conn, a->card,
				"The job store is degraded; the job was not queued", NULL);
	}
	D.nacks = 0;
	/* Each record above is a new one, on the dirty list once: it is forgotten as it leaves. */
	for (i = 0, k = 0; i < D.dirty.n; i++)
		if (((struct active *)D.dirty.v[i])->job.dirty)
			D.dirty.v[k++] = D.dirty.v[i];
		else
			active_free(D.dirty.v[i]);
	D.dirty.n = k;
}

/*
 * A commit failed, or the store could not be opened (open_store): degraded until one succeeds,
 * retried every STORE_RETRY seconds. Logged when it begins and when the reason changes.
 */
static void
store_failed(const char *why)
{
	if (!D.degraded || strcmp(why, D.degraded_reason) != 0)
		logmsg("tt-device-queue: job store degraded: %s", why);
	D.degraded = true;
	snprintf(D.degraded_reason, sizeof(D.degraded_reason), "%s", why);
	timer_set(&D.store_retry, mono_now + STORE_RETRY);
	store_unwind();
}

/*
 * Commit every dirty record and extra (store_write_dirty), into a log dir in place
 * (log_dir_restore). False when it could not be written: the store is then degraded
 * (store_failed) and nothing was written.
 */
static bool
commit_dirty(const struct job *extra)
{
	char why[sizeof(D.degraded_reason)];
	bool placed = store_dir_in_place(D.dir, D.store) || log_dir_restore(why, sizeof(why)) == 0;

	if (placed && store_write_dirty(extra) == 0) {
		store_committed();
		return true;
	}
	if (placed) {
		snprintf(why, sizeof(why), "%s", store_errmsg(D.store));
		store_rollback(D.store);
	}
	store_failed(why);
	return false;
}

static void
store_sync(void)
{
	if (D.dirty.n == 0 && !D.cards_dirty)
		return;
	if (D.degraded && timer_armed(&D.store_retry))
		store_unwind(); /* not yet time to try again */
	else
		commit_dirty(NULL);
}

/*
 * Commit now, in the middle of a loop turn, what is dirty so far and extra (see
 * store_write_dirty): for a change that must be on disk before it takes effect and anyone is
 * told, such as a cancel that would otherwise be answered and then lost in a crash. False when
 * it could not be written: the store is then degraded (this turn's submissions are refused)
 * and the caller leaves everything as it was.
 */
static bool
store_sync_now(const struct job *extra)
{
	return !D.degraded && commit_dirty(extra);
}

static void
spawn_pending(void)
{
	int i;

	for (i = 0; i < D.spawn.n; i++) {
		struct active *a = D.spawn.v[i];

		sched_job_transition(&a->job, JOB_PHASE_RUNNING);
		waiters_wake(a, false); /* GET /job?wait: it left its queue, and that is on disk */
		if (a->job.mode == JOB_MODE_RESET)
			reset_run(a);
		else
			job_spawn_first(a);
	}
	D.spawn.n = 0;
}

static void reopen_store(void);

static void
store_retry_fired(void *arg)
{
	int i;

	(void)arg; /* the loop's after-phase commits again */
	/*
	 * Started without the store (open_store): open it. Degraded with nothing left to save
	 * (only refused submissions failed): rewrite the card rows, so a real write finds out that
	 * the store is writable again. Without it store_sync has nothing to commit and the store
	 * would stay degraded for good. (Not degraded: this was store_committed's wake-up, so the
	 * dispatch pass runs.)
	 */
	if (!D.store)
		reopen_store();
	else if (D.degraded && D.dirty.n == 0 && !D.cards_dirty)
		for (i = 0; i < D.sched.ncards; i++)
			card_dirty(&D.sched.cards[i]);
}

/*
 * Told of each job retention deletes (err 0: its folder is gone) or keeps (its folder stays,
 * store_retention): one that cannot be removed keeps its job, with a maintenance warning at
 * every pass until an operator clears the obstacle, and then the next pass removes both.
 */
static void
retention_cb(void *ctx, const char *id, int err)
{
	(void)ctx;
	if (!err)
		return;
	snprintf(D.maintenance_warning, sizeof(D.maintenance_warning),
		 "retention could not remove the folder of job %s (the job is kept): %s", id,
		 strerror(err));
	logmsg("tt-device-queue: %s", D.maintenance_warning);
}

static void
retention_fired(void *arg)
{
	double cutoff = cfg.retention_days ? clock_wall() - (double)cfg.retention_days * 86400 : 0;
	int n;

	(void)arg;
	timer_set(&D.retention, mono_now + RETENTION_EVERY);
	if (D.degraded)
		return;
	D.maintenance_warning[0] = '\0'; /* before the pass: retention_cb may set it */
	n = store_retention(D.store, D.dir, cutoff, cfg.max_completed, retention_cb, NULL);
	if (n < 0)
		snprintf(D.maintenance_warning, sizeof(D.maintenance_warning), "retention failed: %s",
			 store_errmsg(D.store));
	else if (n > 0)
		logmsg("tt-device-queue: retention deleted %d completed jobs", n);
}

/* ------------------------------------------------------------------------ systemd notify */

/*
 * sd_notify(3)'s datagram protocol, spoken directly (no libsystemd). Under Type=notify systemd
 * sets NOTIFY_SOCKET to a unix datagram socket (a path, or '@' for an abstract name); every
 * state change is one datagram of NAME=VALUE lines: READY=1 once the socket listens and
 * recovery is done, STOPPING=1 when shutdown begins. WATCHDOG_USEC (meant for WATCHDOG_PID,
 * or for us when that is unset) asks for WATCHDOG=1 at least that often: a timer in the loop's
 * list sends it at half the interval, so a wedged loop is exactly what stops the pings. Without
 * the variables nothing is sent and no timer is armed. The variables are removed from our
 * environment so jobs and control commands never inherit them.
 */
static struct {
	int fd;
	struct sockaddr_un addr;
	socklen_t addr_len;
	double watchdog_every; /* s between WATCHDOG=1; 0 when no watchdog was asked for */
	struct timer watchdog;
	bool warned;
} notify_sock = {.fd = -1};

static void
notify_send(const char *msg)
{
	/* MSG_DONTWAIT: a full receive queue loses a message rather than stall the loop. */
	if (notify_sock.fd >= 0 &&
	    sendto(notify_sock.fd, msg, strlen(msg), MSG_DONTWAIT | MSG_NOSIGNAL,
		   (const struct sockaddr *)&notify_sock.addr, notify_sock.addr_len) < 0 &&
	    !notify_sock.warned) {
		notify_sock.warned = true; /* once: a vanished systemd must not flood the journal */
		logmsg("tt-device-queue: sd_notify: %s", strerror(errno));
	}
}

static void
notify_watchdog_fired(void *arg)
{
	(void)arg;
	notify_send("WATCHDOG=1");
	timer_set(&notify_sock.watchdog, mono_now + notify_sock.watchdog_every);
}

/* Read and unset NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID; open the datagram socket. */
static void
notify_setup(void)
{
	const char *path = getenv("NOTIFY_SOCKET"), *usec = getenv("WATCHDOG_USEC");
	const char *pid = getenv("WATCHDOG_PID");
	size_t n = path ? strlen(path) : 0;

	timer_init(&notify_sock.watchdog, notify_watchdog_fired, NULL);
	if (n >= 2 && n < sizeof(notify_sock.addr.sun_path) && (path[0] == '/' || path[0] == '@')) {
		notify_sock.addr.sun_family = AF_UNIX;
		memcpy(notify_sock.addr.sun_path, path, n);
		if (path[0] == '@')
			notify_sock.addr.sun_path[0] = '\0'; /* abstract: the length says where it ends */
		notify_sock.addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
		notify_sock.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (notify_sock.fd < 0)
			logmsg("tt-device-queue: sd_notify: socket: %s", strerror(errno));
	} else if (path && *path) {
		logmsg("tt-device-queue: NOTIFY_SOCKET '%s' is not a unix socket path; not notifying",
		       path);
	}
	/* a watchdog that is 0 or not a number of microseconds is none */
	if (notify_sock.fd >= 0 && usec && !usec[strspn(usec, "0123456789")] &&
	    (!pid || strtoll(pid, NULL, 10) == (long long)getpid()))
		notify_sock.watchdog_every = (double)strtoull(usec, NULL, 10) / 2e6;
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
}

/*
 * Send systemd pre (a state, such as "READY=1\n", or "") and STATUS=, what the daemon does;
 * that STATUS text is returned for the log.
 */
static const char *
notify_status(const char *pre)
{
	static char msg[800];
	int k = snprintf(msg, sizeof(msg), "%sSTATUS=", pre);

	if (D.store)
		snprintf(msg + k, sizeof(msg) - (size_t)k, "serving %d card%s on %s:%d",
			 D.sched.ncards, D.sched.ncards == 1 ? "" : "s", cfg.host, cfg.port);
	else
		snprintf(msg + k, sizeof(msg) - (size_t)k, "serving on %s:%d without the job store "
			 "(degraded)", cfg.host, cfg.port);
	notify_send(msg);
	return msg + k;
}

/* ------------------------------------------------------------------------ signals, shutdown */

static void
shutdown_begin(int signo)
{
	bool again = D.shutting_down; /* a second request: no more grace */
	int i;

	if (!again) {
		D.shutting_down = true;
		notify_send("STOPPING=1\nSTATUS=stopping: interrupting running jobs, keeping queued "
			    "ones");
		logmsg("tt-device-queue: shutting down on SIG%s: stopping running jobs, queued jobs "
		       "are kept", sigabbrev_np(signo));
		http_server_listen(D.http, -1);
		D.listen_fd = -1;
		timer_set(&D.shutdown_deadline, mono_now + cfg.stop_grace + 4.0);
	}
	for (i = 0; i < D.sched.ncards; i++) {
		struct job *j = D.sched.cards[i].current;

		if (j && again)
			proc_job_kill(active_of(j)->proc);
		else if (j)
			job_stop(active_of(j), STOP_SHUTDOWN);
	}
}

static void
shutdown_deadline_fired(void *arg)
{
	(void)arg;
	if (D.linger_until > 0)
		return; /* the jobs stopped: it only ends the linger (shutdown_done) */
	logmsg("tt-device-queue: jobs did not stop in time; exiting anyway");
	exit(1); /* the guardian kills what is left */
}

static void
signal_event(void *arg, short revents)
{
	struct signalfd_siginfo si;
	pid_t pid;
	int st;

	(void)arg;
	(void)revents;
	while (read(D.sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
			shutdown_begin((int)si.ssi_signo);
		else if (si.ssi_signo != SIGCHLD) /* SIGHUP too: a restart reconfigures */
			logmsg("tt-device-queue: SIG%s from pid %u ignored (restart the service to "
			       "reconfigure)", sigabbrev_np((int)si.ssi_signo), si.ssi_pid);
	}
	/* Signals coalesce: reap every child that has exited. */
	while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
		if (proc_reaped(pid, st) == PROC_REAPED_GUARDIAN) /* a double fault: not replaced */
			logmsg("tt-device-queue: WARNING: %s (exit status %d)", GUARDIAN_GONE, st);
}

static bool
shutdown_done(void)
{
	int i;

	if (!D.shutting_down)
		return false;
	for (i = 0; i < D.sched.ncards; i++)
		if (D.sched.cards[i].current)
			return false;
	/*
	 * The jobs are over. Clients still connected (a `run` about to ask for the final result
	 * of the job the stop just ended) are answered for a moment longer.
	 */
	if (D.linger_until == 0) {
		struct job *j;

		D.linger_until = mono_now + SHUTDOWN_LINGER;
		timer_set(&D.shutdown_deadline, D.linger_until);
		/* Long-polls on queued jobs get their answer ("queued") instead of a closed
		 * connection: the client learns the job is kept and can wait for the restart. */
		for (j = D.sched.oldest; j; j = j->newer)
			waiters_wake(active_of(j), true);
	}
	return http_server_connections(D.http) == 0 || mono_now >= D.linger_until;
}

/* ------------------------------------------------------------------------ start-up */

static void
read_boot_id(void)
{
	FILE *f = fopen(cfg.boot_id_file, "re");
	int e = errno;

	if (f && fgets(D.boot_id, sizeof(D.boot_id), f))
		D.boot_id[strcspn(D.boot_id, "\r\n")] = '\0';
	if (f)
		fclose(f);
	D.boot_known = D.boot_id[0] != '\0';
	if (!D.boot_known) {
		logmsg("tt-device-queue: WARNING: cannot read the boot id from %s (%s): cards found "
		       "dead stay dead, as a new boot cannot be told from this one",
		       cfg.boot_id_file, f ? "empty" : strerror(e));
		snprintf(D.boot_id, sizeof(D.boot_id), "unknown");
	}
}

/* Was a card row written in this boot (sched_same_boot: unknown counts as yes)? */
static bool
same_boot_as(const char *row_boot_id)
{
	return sched_same_boot(row_boot_id, D.boot_known ? D.boot_id : NULL);
}

static void
card_row_free(struct store_card *row)
{
	free(row->card.dead_reason);
	free(row->boot_id);
	free(row->card.held_by);
	free(row->card.hold_reason);
}

/* The first look at the stored cards: one dead in this boot stays served (listed in cfg.ids)
 * even when its node vanished. */
static int
dead_card_cb(void *ctx, struct store_card *row)
{
	(void)ctx;
	if (sched_stays_dead(row->card.state, same_boot_as(row->boot_id)) && cfg.nids < MAX_CARDS)
		cfg.nids = add_card_id(cfg.ids, cfg.nids, row->card.device);
	card_row_free(row);
	return 0;
}

/* The second: a served card, as sched_init made it (nothing queued yet), becomes its stored
 * row (the strings change owner), then what a restart makes of it; the rows of cards not
 * served are dropped. */
static int
card_row_cb(void *ctx, struct store_card *row)
{
	struct card *c = sched_card(&D.sched, row->card.device);

	(void)ctx;
	if (c) {
		*c = row->card;
		row->card = (struct card){.device = 0};
		if (sched_card_restore(c, same_boot_as(row->boot_id)))
			logmsg("tt-device-queue: card %d was dead in an earlier boot; healthy again",
			       c->device);
	}
	card_row_free(row);
	return 0;
}

static void
setup_cards(void)
{
	int i;

	if (store_load_cards(D.store, dead_card_cb, NULL) < 0)
		serve_fail(1, "cannot read cards: %s", store_errmsg(D.store));
	if (sched_init(&D.sched, cfg.ids, cfg.nids) < 0)
		serve_fail(1, "%s", strerror(errno));
	if (store_load_cards(D.store, card_row_cb, NULL) < 0)
		serve_fail(1, "cannot read cards: %s", store_errmsg(D.store));
	for (i = 0; i < D.sched.ncards; i++)
		card_dirty(&D.sched.cards[i]); /* rows for new cards, this boot's id, restore's changes */
}

/*
 * When a job found running at start-up ended (sched_interrupted_at): the latest evidence that
 * it still ran. Its output file's last write (only the daemon writes it); the previous
 * instance's last commit (the job was still running then: its end was never committed),
 * read from the rows, as an operator's sqlite3 shell opened after the crash changes the
 * file's mtime but no row; and the moment the guardian saw the daemon die, just before it
 * killed the job (the log dir's mtime; else the last folder made or removed there). The last
 * two count only from START_COMMIT after the job's start, which made a commit and a folder
 * of its own. So the end is never before the last moment the daemon knew the job ran; with
 * none of them after its start (the guardian died too) its end is unknown (job_finish_at).
 */
static double
interrupted_at(const struct job *j, double now)
{
	double t = store_output_mtime(D.dir, j->id), e[2] = {D.prev_last_write,
							     store_dir_changed_at(D.dir)};
	int i;

	for (i = 0; i < 2; i++)
		if (e[i] >= j->started_at + START_COMMIT && (isnan(t) || e[i] > t))
			t = e[i];
	return sched_interrupted_at(j, t, now);
}

/*
 * A job found active at start-up, as sched_recover_job decides: back on its queue, or failed.
 * One found running fails as interrupted (a reset runs again: sched_card_restore); one of a
 * card no longer configured (device) says so, and that it was interrupted when it did run; it
 * touches no card's books (a->card is a stand-in). counts[]: by enum recover_action.
 */
static int
recover_cb(void *ctx, struct job *j, const char *output_file)
{
	static struct card gone;
	struct active *a = active_new();
	int *counts = ctx, device, r;
	double now = clock_wall();
	bool ran = j->status == JOB_RUNNING;
	char err[200], said[200];

	(void)output_file;
	if (!a) {
		sched_job_clear(j);
		return -1;
	}
	a->job = *j;
	a->card = sched_card(&D.sched, j->device);
	counts[r = sched_recover_job(&D.sched, &a->job, &device)]++;
	if (r == RECOVER_CARD_GONE) {
		gone.device = device;
		a->card = &gone;
		snprintf(err, sizeof(err), "Card %d is no longer configured (TT_DEVICE_IDS); %s",
			 device, ran ? "interrupted: the service stopped while the job was running; "
				       "it is not run again" : "the job never ran");
		job_finish_at(a, ran ? interrupted_at(j, now) : now, JOB_END_CARD_GONE, -1, err, err);
	} else if (r == RECOVER_INTERRUPTED) {
		const char *what = j->mode == JOB_MODE_RESET ? "during the reset; it runs again"
							     : "while the job ran; it is not run again";

		snprintf(err, sizeof(err), "Interrupted: the service stopped (crash or shutdown) %s",
			 what);
		snprintf(said, sizeof(said), "interrupted: the service stopped %s", what);
		sched_occupy(&D.sched, &a->job); /* finishing it frees each card it held */
		/* Output dropped before the crash was counted only up to the last save. */
		if (a->job.log_truncated && open_log(a) == 0)
			a->log.dropped_floor = 1;
		job_finish_at(a, interrupted_at(&a->job, now), JOB_END_CRASH, -1, err, said);
	} else {
		sched_enqueue(&D.sched, &a->job);
		heartbeat_arm(a); /* from this start: no renewal could come while it was down */
		if (r == RECOVER_DEAD_CARD)
			card_fail_queue(sched_card(&D.sched, device));
	}
	return 0;
}

static void
recover(void)
{
	int counts[4] = {0, 0, 0, 0};

	if (store_load_active(D.store, recover_cb, counts) < 0)
		serve_fail(1, "cannot load jobs: %s", store_errmsg(D.store));
	/*
	 * A failed commit here (disk full at start-up) does not stop the start: the daemon
	 * serves degraded, with the recovered transitions kept and retried like any others, so
	 * the host keeps a queue that answers and says why instead of a restart loop.
	 */
	store_sync();
	logmsg("tt-device-queue: recovered %d queued jobs; %d interrupted jobs failed; %d jobs of "
	       "unavailable cards failed", counts[RECOVER_QUEUE], counts[RECOVER_INTERRUPTED],
	       counts[RECOVER_DEAD_CARD] + counts[RECOVER_CARD_GONE]);
}

/*
 * The log dir: created, made absolute and locked (store_dir_open), so that a second `serve`
 * on the same dir, which would "recover" this one's running jobs as interrupted and run its
 * queue a second time, is kept out before it reads or writes anything. A failure here exits
 * 1: without the dir there is nothing to lock, and the lock comes before anything else.
 */
static void
prepare_log_dir(void)
{
	char why[400], warn[256];

	struct timespec pause = {0, 10000000};
	double t0 = clock_mono(), next = 0;
	sigset_t pending;

	D.job_umask = umask(077); /* files of ours are private; jobs get the caller's umask back */
	/* EINPROGRESS: a dead daemon's guardian holds it (waited for, said every 10 s);
	 * EWOULDBLOCK: another holds it (waited for LOG_DIR_LOCK_WAIT s, then an error) */
	while (!(D.dir = store_dir_open(cfg.log_dir, why, sizeof(why), warn, sizeof(warn)))) {
		double waited = clock_mono() - t0;

		if (errno != EINPROGRESS && (errno != EWOULDBLOCK || waited >= LOG_DIR_LOCK_WAIT))
			serve_fail(1, "TT_DEVICE_LOG_DIR %s: %s", cfg.log_dir, why);
		if (waited >= next) {
			logmsg("tt-device-queue: TT_DEVICE_LOG_DIR %s is locked; waiting: %s",
			       cfg.log_dir, why);
			next += 10;
		}
		sigpending(&pending); /* blocked (setup_signals): looked at, not delivered */
		if (sigismember(&pending, SIGTERM) || sigismember(&pending, SIGINT))
			exit(0); /* asked to stop while the previous instance's processes were dying */
		nanosleep(&pause, NULL);
	}
	free(cfg.log_dir);
	cfg.log_dir = xstrdup(store_dir_path(D.dir)); /* absolute: output_file paths are */
	if (warn[0])
		logmsg("tt-device-queue: WARNING: TT_DEVICE_LOG_DIR %s %s", cfg.log_dir, warn);
}

/*
 * Open <log_dir>/jobs.sqlite3 (serving: the loop already runs, so a lock held elsewhere is
 * waited for briefly). A database this build refuses (pre-v2, newer, not a database) exits 1:
 * no wait makes it usable, and nothing has run yet. Any other failure (disk
 * full, quota, I/O error, the file cannot be created, a lock) may pass: -1 with the store
 * degraded and retried every STORE_RETRY seconds. Until then the daemon answers /status and
 * /metrics and refuses the rest, rather than exit into a restart loop that systemd gives up
 * on: a fresh log dir, or one stopped cleanly (no -wal, -shm), needs room even to be opened.
 */
static int
open_store(bool serving)
{
	const char *path = store_dir_db(D.dir);
	char err[400], reason[sizeof(D.degraded_reason)];
	bool refused;

	if ((D.store = store_open(path, serving, err, sizeof(err), &refused))) {
		D.prev_last_write = store_last_write(D.store); /* before this start writes */
		return 0;
	}
	if (refused)
		serve_fail(1, "%s: %s", path, err);
	snprintf(reason, sizeof(reason), "cannot open the job store %s: %s", path, err);
	store_failed(reason);
	return -1;
}

/*
 * Write the built-in health_check.py to D.health_check_path, whole or not at all
 * (store_write_whole). Returns 0, or -1 (logged) when the disk refuses it: a later reset
 * tries again.
 */
static int
write_health_script(void)
{
	if (store_write_whole(D.health_check_path, embedded_health_check,
			      sizeof(embedded_health_check)) == 0)
		return 0;
	logmsg("tt-device-queue: cannot write %s: %s", D.health_check_path, strerror(errno));
	return -1;
}

/* The default health check: health_check.py beside the binary, else the copy built into it. */
static void
setup_health_check(void)
{
	char path[PATH_MAX + 32];
	bool built_in;

	if (cfg.health_cmd)
		return; /* the operator's command is used: no default script is needed */
	snprintf(path, sizeof(path), "%s/health_check.py", cfg.repo);
	built_in = access(path, R_OK) != 0;
	if (built_in) /* written at every start: an older build's copy is replaced */
		snprintf(path, sizeof(path), "%s/health_check.py", cfg.log_dir);
	D.health_check_path = xstrdup(path);
	D.health_script_written = built_in && write_health_script() == 0;
}

/* What every start does once the store is open: cards, recovery of the jobs, retention. */
static void
start_from_store(void)
{
	setup_cards();
	setup_health_check();
	recover();
	holders_setup();
	retention_fired(NULL);
}

/*
 * The store_retry timer of a daemon started without its store: once the store opens, start
 * as every start does; this loop turn's dispatch pass then runs the recovered queues. Not
 * while stopping: the jobs it would recover could only be put back.
 */
static void
reopen_store(void)
{
	if (D.shutting_down || open_store(true) < 0)
		return;
	D.degraded = false;
	logmsg("tt-device-queue: job store opened; recovering as at start-up");
	start_from_store();
	logmsg("tt-device-queue: %s", notify_status(""));
}

/*
 * Room for TT_DEVICE_MAX_CONNECTIONS client sockets and the HTTP_BUSY_SLOTS beyond them besides the
 * daemon's own descriptors: raise the soft RLIMIT_NOFILE (often 1024, or less) up to what is
 * needed, within the hard limit. Only as far as needed, not to the hard limit: jobs inherit
 * it, and some programs walk every possible descriptor at start. Short of it, accept's EMFILE
 * is handled (http.c pauses accepting) and the rest wait in the backlog.
 */
static void
raise_fd_limit(void)
{
	struct rlimit rl;
	rlim_t want = (rlim_t)cfg.max_connections + HTTP_BUSY_SLOTS + FD_RESERVE +
		      4 * (rlim_t)cfg.nids;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
		return;
	/* Jobs get the limit back: a program that uses select() counts on staying below 1024. */
	D.job_nofile = rl.rlim_cur;
	D.nofile_raised = true;
	rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < want)
		logmsg("tt-device-queue: RLIMIT_NOFILE allows %llu descriptors, fewer than "
		       "TT_DEVICE_MAX_CONNECTIONS (%lld) needs; further connections wait in the backlog",
		       (unsigned long long)rl.rlim_cur, cfg.max_connections);
}

/* The claims of this daemon's cards (claim_cards): each socket and its watch. */
static struct {
	int fd, slot;
} claims[MAX_CARDS];

/* Someone looked who holds a claim (a second serve): accepted and closed. */
static void
claim_event(void *arg, short revents)
{
	(void)revents;
	proc_claim_accept(*(int *)arg);
}

/*
 * Claim each card that has a device node host-wide (proc_claim_node), before the port and the
 * log dir are touched: a card that another instance serves then exits 2 having changed
 * nothing. A card without a node is simulated: a queue name only, not claimed, so daemons of
 * tests on simulated cards still run side by side.
 */
static void
claim_cards(void)
{
	char node[PATH_MAX], why[512];
	int i;

	for (i = 0; i < cfg.nids; i++) {
		snprintf(node, sizeof(node), "%s/%d", cfg.dev_dir, cfg.ids[i]);
		claims[i].fd = proc_claim_node(node, why, sizeof(why));
		if (claims[i].fd < 0 && errno == EADDRINUSE)
			serve_fail(2, "card %d (%s) is served by another instance: %s; stop it, or "
				   "name other cards in TT_DEVICE_IDS", cfg.ids[i], node, why);
		if (claims[i].fd < 0 && errno != ENOENT)
			serve_fail(1, "card %d (%s): %s", cfg.ids[i], node, why);
		if (claims[i].fd < 0)
			logmsg("tt-device-queue: card %d has no device node at %s: a queue name "
			       "only, not claimed", cfg.ids[i], node);
		else if (watch_add(claims[i].fd, POLLIN, claim_event, &claims[i].fd,
				   &claims[i].slot) < 0)
			die_oom();
	}
}

/*
 * Bind and listen before the log dir is touched: a port already in use (a second `serve`
 * started by mistake) then exits without recovering or rewriting anything. Connections that
 * arrive before the loop runs wait in the backlog.
 */
static void
bind_listener(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg.port)};
	int one = 1;

	struct timespec pause = {0, 10000000};
	double t0 = clock_mono();
	int r = -1;

	inet_pton(AF_INET, cfg.host, &sa.sin_addr); /* validated by config_load */
	D.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (D.listen_fd >= 0)
		setsockopt(D.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* A daemon just killed (kill -9, then serve at once) holds its port until the kernel
	 * has torn it down: without this wait such a restart by hand failed most times. */
	while (D.listen_fd >= 0 && (r = bind(D.listen_fd, (struct sockaddr *)&sa, sizeof(sa))) < 0 &&
	       errno == EADDRINUSE && clock_mono() - t0 < LISTEN_WAIT)
		nanosleep(&pause, NULL);
	if (D.listen_fd < 0 || r < 0 || listen(D.listen_fd, SOMAXCONN) < 0)
		serve_fail(1, "cannot listen on %s:%d: %s", cfg.host, cfg.port, strerror(errno));
	if (strncmp(cfg.host, "127.", 4) != 0)
		logmsg("tt-device-queue: WARNING: listening on %s: the API has no authentication; "
		       "anyone who can reach this port can run commands as this user",
		       cfg.host);
}

static void
setup_signals(void)
{
	/* SIGUSR1, SIGUSR2, SIGALRM by default end a process on the spot: a stray `kill -USR1`
	 * (a log rotation's postrotate) would be a crash that interrupts every running job */
	static const int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM};
	sigset_t set;
	size_t i;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaddset(&set, sigs[i]);
	sigprocmask(SIG_BLOCK, &set, NULL);
	D.sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (D.sig_fd < 0 || watch_add(D.sig_fd, POLLIN, signal_event, NULL, &D.sig_slot) < 0)
		serve_fail(1, "signalfd: %s", strerror(errno));
}

/* One loop iteration after the events: answer, dispatch, commit, start, write. */
static void
loop_after(void)
{
	int rounds = 0;

	do {
		http_server_process(D.http);
		dispatch_pass();
		store_sync();
		spawn_pending();
		http_server_flush(D.http);
	} while (http_server_ready(D.http) && ++rounds < 8);
	http_server_sweep(D.http);
}

/*
 * A serve started with stdin, stdout or stderr closed (as some daemonisers leave it) would give
 * those numbers to the first files it opens: the log dir's lock or the listening socket would
 * then pass for stderr, which the guardian keeps and log lines are written to. /dev/null takes
 * them first.
 */
static void
stdio_open(void)
{
	int fd;

	while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd <= STDERR_FILENO)
		;
	if (fd > STDERR_FILENO)
		close(fd);
}

/*
 * Who may do what, from who runs serve: root runs the host-wide queue (every local user
 * submits, each job runs as its submitter), anyone else a personal one (that user and root).
 */
static void
setup_mode(void)
{
	char name[64];

	D.host_mode = geteuid() == 0;
	D.self_uid = geteuid();
	if (cfg.admin_group[0] && proc_group_gid(cfg.admin_group, &D.admin_gid) < 0)
		config_fail("TT_DEVICE_ADMIN_GROUP", "no group '%s' in /etc/group", cfg.admin_group);
	D.has_admin_gid = cfg.admin_group[0] != '\0';
	if (D.host_mode)
		logmsg("tt-device-queue: a host-wide queue: every local user may submit, and each job "
		       "runs as the user who submitted it; admins: root%s%s",
		       D.has_admin_gid ? " and group " : "", cfg.admin_group);
	else
		logmsg("tt-device-queue: %s's personal queue: only %s and root may use it",
		       proc_user_name(D.self_uid, name, sizeof(name)), name);
}

static int
serve_main(int argc, char **argv)
{
	static const struct proc_callbacks cb = {
	    .watch = job_proc_watch,
	    .output = job_proc_output,
	    .escalated = job_proc_escalated,
	    .exit = job_proc_exit,
	    .log = logmsg,
	};
	char start_id[33], instance_id[PATH_MAX + 40];
	const char *visible = getenv("TT_VISIBLE_DEVICES");

	if (argc > 1) {
		bool help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;

		fprintf(help ? stdout : stderr, "usage: tt-device-queue serve\nRun the daemon in "
			"the foreground, configured by the environment (TT_DEVICE_IDS, TT_DEVICE_PORT,\n"
			"TT_DEVICE_LOG_DIR, ...): man tt-device-queue lists every variable.\n");
		return help ? 0 : 2;
	}
	tzset();
	stdio_open();
	log_setup();
	config_load();
	setup_mode();
	notify_setup();
	/* serve's own TT_VISIBLE_DEVICES reaches neither jobs nor control commands. Queue N is
	 * card N: inherited by every job, it would remap the cards a job's code opens (Device(0)
	 * opening card 1, beside card 1's queue), and tt-smi skips a card it hides yet exits 0,
	 * so a reset would silently do nothing. A job may still set it through its own env. */
	if (visible)
		logmsg("tt-device-queue: TT_VISIBLE_DEVICES=%s in serve's environment is not passed "
		       "to jobs or control commands: queue N is card N", visible);
	unsetenv("TT_VISIBLE_DEVICES");
	setup_signals();
	mono_now = clock_mono();
	started_mono = mono_now;
	timer_init(&D.store_retry, store_retry_fired, NULL);
	timer_init(&D.dir_check, dir_check_fired, NULL);
	timer_init(&D.retention, retention_fired, NULL);
	timer_init(&D.shutdown_deadline, shutdown_deadline_fired, NULL);
	clients_init();
	claim_cards();
	bind_listener();
	read_boot_id();
	prepare_log_dir();
	if (new_job_id(start_id) < 0)
		serve_fail(1, "getrandom: %s", strerror(errno));
	snprintf(instance_id, sizeof(instance_id), "%s/%s", cfg.log_dir, start_id);
	proc_init(&cb, &mono_now, instance_id); /* the instance id: log dir/start */
	if (proc_guardian_start(proc_instance_marker(), store_dir_fd(D.dir)) < 0)
		serve_fail(1, "cannot start the guardian process: %s", strerror(errno));
	dir_watch();
	if (open_store(false) == 0) /* a refused database exits here, leaving the dir as it was */
		start_from_store();
	raise_fd_limit();
	/* Start taking connections from the backlog. */
	if (http_server_listen(D.http, D.listen_fd) < 0)
		die_oom();
	/*
	 * READY=1: the listener accepts and start-up recovery is committed, or the store could not
	 * be opened (then systemd must see the start succeed all the same, or it would restart us).
	 */
	logmsg("tt-device-queue %s: %s, log dir %s", TTQ_VERSION, notify_status("READY=1\n"),
	       cfg.log_dir);
	if (notify_sock.watchdog_every > 0)
		timer_set(&notify_sock.watchdog, clock_mono() + notify_sock.watchdog_every);
	/* Recovered queues and pending resets start now: unprompted, the first poll may sleep
	 * until the retention pass. */
	loop_after();
	while (!shutdown_done()) {
		int n = poll(pfds, (nfds_t)nwatch, http_server_ready(D.http) ? 0 : timers_timeout()), i;

		mono_now = clock_mono();
		if (n < 0 && errno != EINTR)
			serve_fail(1, "poll: %s", strerror(errno));
		for (i = 0; n > 0 && i < nwatch; i++)
			if (pfds[i].revents && watches[i].fn) /* not one removed in this pass */
				watches[i].fn(watches[i].arg, pfds[i].revents);
		timers_run();
		loop_after();
	}
	store_sync();
	http_server_flush(D.http);
	store_close(D.store);
	logmsg("tt-device-queue: stopped");
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "serve") == 0)
		return serve_main(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
		printf("tt-device-queue %s (SQLite %s)\n", TTQ_VERSION, store_sqlite_version());
		return 0;
	}
	return cli_main(argc, argv);
}

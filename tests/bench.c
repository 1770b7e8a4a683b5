/*
 * bench.c - `make bench`: the daemon's performance figures, measured against the real daemon.
 *
 * It starts tt-device-queue serve in temporary log dirs under $TMPDIR (TT_DEVICE_IDS=0,1,
 * reset and health commands `true`), drives it from this one-threaded C client, and prints one
 * line per figure with its target and a final JSON line. It prints figures; it is not a test and
 * never fails the build (exit 0 unless a daemon cannot be started).
 *
 * Before and after: BENCH_BEFORE=path (an older tt-device-queue; `make bench BENCH_BEFORE=...`)
 * measures every figure on both executables in the same run, their repetitions interleaved
 * (alternate chunks, runs or windows, the order swapped from one to the next), so a change in
 * the host's load during the run hits both alike; a table closes the run: figure, target,
 * before, after and after - before, each with its standard error where the estimator has one
 * (the delta's is the two added in quadrature). The lines before it carry each side's detail.
 *
 * "HOME empty" below: the daemon and the bare runs compared with it get an empty folder as
 * HOME, so `bash -lc true` reads no login profile and takes milliseconds: the queue's own cost
 * per job is not hidden in the profile's noise, and what the queue adds to a job does not
 * depend on the profile. Only dispatch goes through the login profile, the way users' jobs
 * run; as a profile can take anything from milliseconds to seconds, varying from run to run by
 * a large part of that, its job count comes from a time budget (a calibration of `bash -lc
 * true` at the start) and it resolves only what that budget allows.
 *
 * Bare runs start with posix_spawn, the quickest start a queue could use.
 *
 * Every figure's verdict: ok or MISSED, or "unsure" when the figure has a standard error and is
 * within two of them of its target. The quantiles (startup, status, lag) get a distribution-free
 * one from the order statistics around them.
 *
 *   startup      exec to the first 200 of GET /status with 10,000 done jobs in the database
 *                (filled through SQLite in the schema the daemon created): median of 5 starts
 *   idle, idle_cpu  context switches/s and CPU ms/s of the daemon (/proc/PID/status,
 *                schedstat): idle, then with a job running silently and a /result?wait=60
 *                long-poll held; both daemons in the same windows
 *   round_trip   round trip, HOME empty: submit + wait for `true` on an idle card, minus the
 *                mean of the bare `bash -lc true` runs just before and after it (B Q B Q' B
 *                ...: the bracket cancels a linear drift); the 20%-trimmed mean of these
 *                differences, with its standard error. Beside it the part outside the job's
 *                own run (round trip - the record's elapsed)
 *   output       a job writing 1 GB to stdout, time / the same command into a pipe reader
 *                (1 MiB pipe, as the daemon's, read 64 KiB at a time); HOME empty; medians
 *   disp_floor   per-job daemon overhead above the durable-commit floor, HOME empty: chunks of
 *                `true` jobs queued on one card behind a blocker, timed from the blocker's stop
 *                to the last one's end, against a bare loop that makes one durable write
 *                (4 KiB pwrite + fdatasync, as a WAL commit) before each `bash -lc true`: the
 *                least any queue must spend per job when a job's `running` is on disk before
 *                its process starts. Per chunk (queued time - floor loop time) / jobs; the
 *                20%-trimmed mean of the chunks' values (a host stall in one chunk moves a
 *                ratio of sums far more), with its standard error. The floor loop and the
 *                queued chunks alternate
 *   lag          a job prints a realtime stamp ($EPOCHREALTIME) every 20 ms, 100 lines a job;
 *                the real CLI (`tt-device-queue run`) follows it with its output into a pipe
 *                this bench reads, stamping each line on arrival (CLOCK_REALTIME, same host):
 *                p99 (and p50) of arrival - written over all lines; HOME empty; the sides'
 *                jobs alternate with the same command into a bare pipe (what the host alone
 *                adds, shown beside it)
 *   memory       VmHWM of a fresh daemon holding 1000 queued jobs, after the /status runs
 *   status       GET /status p99 with those 1000 queued (the sides' requests alternate)
 *   submissions  POST /queue per second from 16 keep-alive clients (fsync-durable; the card is
 *                held by a running `sleep` so the jobs stay queued), client and server CPU;
 *                then with 8 requests pipelined per client (pipelined, no target); windows
 *                alternate between the sides
 *   dispatch     as disp_floor through the login profile against a bare loop (no durable
 *                write): jobs/s / bare runs/s, the 20%-trimmed mean of 10 chunks' ratios
 *
 * Environment: BENCH_BEFORE (above), BENCH_FULL=1 (about three times the counts and budgets),
 * BENCH_ONLY=name,name (the figures above to run), BENCH_SECONDS (the submission windows),
 * TTQ_BINARY (./tt-device-queue), BENCH_KEEP=1 (leave the daemons running when the bench
 * fails). Every wait has a deadline; an alarm kills the daemons if the whole run overruns.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

extern char **environ;

#define MAX_DAEMONS 16
#define NCLIENTS 16
#define MAX_CHUNKS 64
#define MAX_RUNS 3000
#define RESP_DEADLINE 70.0 /* s for one answer (long-polls wait at most 60) */
#define WHOLE_RUN 2700     /* s: the alarm that stops everything */

/* The executables measured: one, or the one before a change (side 0) and after it (side 1). */
struct side {
	const char *label;
	const char *binary;
};
static struct side sides[2];
static int nsides = 1;
static bool full;
static const char *only;

static double
now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The wall clock, as a job's $EPOCHREALTIME reads it. */
static double
wall_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static pid_t live_pids[MAX_DAEMONS];

/* Stop here: kill the daemons (BENCH_KEEP=1 leaves them running to look at). */
static void
die(const char *fmt, ...)
{
	const char *keep = getenv("BENCH_KEEP");
	va_list ap;
	int i;

	for (i = 0; i < MAX_DAEMONS; i++)
		if (live_pids[i] > 0 && !(keep && *keep == '1'))
			kill(live_pids[i], SIGTERM);
		else if (live_pids[i] > 0)
			fprintf(stderr, "bench: daemon %d left running\n", (int)live_pids[i]);
	va_start(ap, fmt);
	fprintf(stderr, "bench: ");
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void *
xmalloc(size_t n)
{
	void *p = malloc(n);

	if (!p)
		die("out of memory");
	return p;
}

static void
sleep_s(double s)
{
	struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

	while (nanosleep(&t, &t) < 0 && errno == EINTR)
		;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The q-quantile (0..1) of v[0..n), sorting v. */
static double
quantile(double *v, int n, double q)
{
	int i;

	if (n <= 0)
		return NAN;
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	i = (int)ceil(q * n) - 1;
	return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/*
 * A standard error for the q-quantile of the sorted v[0..n), distribution-free: the width of
 * the 95% interval between the order statistics at ranks n q -+ 1.96 sqrt(n q (1 - q)), over
 * 2 * 1.96. NAN for fewer than 3 values.
 */
static double
quantile_se(const double *sorted, int n, double q)
{
	double k = 1.96 * sqrt(n * q * (1 - q));
	int lo = (int)ceil(n * q - k) - 1, hi = (int)ceil(n * q + k) - 1;

	if (n < 3)
		return NAN;
	lo = lo < 0 ? 0 : lo;
	hi = hi >= n ? n - 1 : hi;
	return (sorted[hi] - sorted[lo]) / 3.92;
}

/*
 * The g-trimmed mean of v[0..n), a series in time order (left as it is): the mean of what is
 * left when the lowest and highest g*n values are set aside. Nearly as efficient as the mean
 * on normal noise, and unlike it not moved by a few stalls of the host. *se gets its standard
 * error: Tukey and McLaughlin's (the winsorized series' spread / ((1 - 2g) sqrt n)), with the
 * winsorized series' lag-1 autocovariance added (when positive), as neighbours that share a
 * measurement (the round trip's bare run between two queued ones) are not independent.
 */
static double
trimmed_mean(const double *v, int n, double g, double *se)
{
	int k = (int)floor(g * n), i;
	double sum = 0, wsum = 0, c0 = 0, c1 = 0, lo, hi, m, *s;

	if (n < 2) {
		*se = NAN;
		return n == 1 ? v[0] : NAN;
	}
	s = xmalloc((size_t)n * sizeof(*s));
	memcpy(s, v, (size_t)n * sizeof(*s));
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	for (i = k; i < n - k; i++)
		sum += s[i];
	lo = s[k];
	hi = s[n - k - 1];
	free(s);
	for (i = 0; i < n; i++)
		wsum += fmin(fmax(v[i], lo), hi);
	m = wsum / n;
	for (i = 0; i < n; i++) {
		double w = fmin(fmax(v[i], lo), hi) - m;

		c0 += w * w;
		if (i > 0)
			c1 += w * (fmin(fmax(v[i - 1], lo), hi) - m);
	}
	*se = sqrt((c0 + 2 * fmax(c1, 0)) / (n - 1)) / ((1 - 2 * g) * sqrt(n));
	return sum / (n - 2 * k);
}

static bool
wanted(const char *name)
{
	const char *p;
	size_t n = strlen(name);

	if (!only || !*only)
		return true;
	for (p = only; (p = strstr(p, name)); p += n)
		if ((p == only || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

/* ------------------------------------------------------------------------ results */

/* One figure of the before/after table: its target and each side's value. */
struct row {
	const char *name, *unit;
	bool has_target, le; /* le: the value must be <= target, else >= */
	double target;
	double v[2], se[2]; /* se NAN: the estimator has none */
};
static struct row rows[32];
static int nrows;
static char json_line[8192] = "{";

static struct row *
row_for(const char *name, const char *unit, bool has_target, bool le, double target)
{
	struct row *r;
	int i;

	for (i = 0; i < nrows; i++)
		if (strcmp(rows[i].name, name) == 0)
			return &rows[i];
	if (nrows == (int)(sizeof(rows) / sizeof(rows[0])))
		die("too many figures");
	r = &rows[nrows++];
	*r = (struct row){name, unit, has_target, le, target, {NAN, NAN}, {NAN, NAN}};
	return r;
}

/* ok, MISSED, or unsure: within two standard errors of the target. */
static const char *
verdict(const struct row *r, int side)
{
	double v = r->v[side], se = r->se[side];

	if (!r->has_target)
		return "";
	if (isnan(v))
		return "MISSED";
	if (!isnan(se) && fabs(v - r->target) < 2 * se)
		return "unsure";
	return (r->le ? v <= r->target : v >= r->target) ? "ok" : "MISSED";
}

/* A key of the JSON line: the before side's carries "_before". */
static void
json_extra(int side, const char *key, double v)
{
	size_t n = strlen(json_line);

	snprintf(json_line + n, sizeof(json_line) - n, "%s\"%s%s\": %.6g", json_line[1] ? ", " : "",
	         key, nsides == 2 && side == 0 ? "_before" : "", isnan(v) ? -1.0 : v);
}

/*
 * Record and print one side's value of a figure: name (the table's), key (the JSON line's),
 * se its standard error or NAN, has_target/le/target its target, fmt the detail shown after it.
 */
static void
report(int side, const char *name, const char *key, double value, double se, const char *unit,
       bool has_target, bool le, double target, const char *fmt, ...)
{
	struct row *r = row_for(name, unit, has_target, le, target);
	char extra[768] = "", tgt[64] = "diagnostic, no target", sev[32] = "";
	va_list ap;

	r->v[side] = value;
	r->se[side] = se;
	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(extra, sizeof(extra), fmt, ap);
		va_end(ap);
	}
	if (has_target)
		snprintf(tgt, sizeof(tgt), "target: %s %g", le ? "<=" : ">=", target);
	if (!isnan(se))
		snprintf(sev, sizeof(sev), " +- %.2g", se);
	printf("%s%s%-12s %10.4g%s %-6s (%s) %-6s  %s\n", nsides == 2 ? sides[side].label : "",
	       nsides == 2 ? " " : "", name, value, sev, unit, tgt, verdict(r, side), extra);
	fflush(stdout);
	json_extra(side, key, value);
	if (has_target) {
		size_t n = strlen(json_line);

		snprintf(json_line + n, sizeof(json_line) - n, ", \"%s%s_ok\": %s", key,
		         nsides == 2 && side == 0 ? "_before" : "",
		         strcmp(verdict(r, side), "MISSED") ? "true" : "false");
	}
}

/* "1.234 +- 0.05" (or "-" when the side has no value) into out. */
static void
cell(char *out, size_t cap, double v, double se)
{
	if (isnan(v))
		snprintf(out, cap, "-");
	else if (isnan(se))
		snprintf(out, cap, "%.4g", v);
	else
		snprintf(out, cap, "%.4g +- %.2g", v, se);
}

/* The before/after table: one line a figure. */
static void
print_table(void)
{
	char tgt[32], b[48], a[48], dl[48];
	int i;

	printf("\nbefore: %s\nafter:  %s\n", sides[0].binary, sides[1].binary);
	printf("%-12s %-6s %-10s %-24s %-24s %s\n", "figure", "unit", "target", "before", "after",
	       "after - before");
	for (i = 0; i < nrows; i++) {
		const struct row *r = &rows[i];
		double se = sqrt(r->se[0] * r->se[0] + r->se[1] * r->se[1]);
		size_t n;

		if (r->has_target)
			snprintf(tgt, sizeof(tgt), "%s %g", r->le ? "<=" : ">=", r->target);
		else
			snprintf(tgt, sizeof(tgt), "-");
		cell(b, sizeof(b), r->v[0], r->se[0]);
		n = strlen(b);
		snprintf(b + n, sizeof(b) - n, " %s", verdict(r, 0));
		cell(a, sizeof(a), r->v[1], r->se[1]);
		n = strlen(a);
		snprintf(a + n, sizeof(a) - n, " %s", verdict(r, 1));
		cell(dl, sizeof(dl), r->v[1] - r->v[0], se);
		printf("%-12s %-6s %-10s %-24s %-24s %s%s\n", r->name, r->unit, tgt, b, a,
		       !isnan(r->v[1] - r->v[0]) && r->v[1] >= r->v[0] ? "+" : "", dl);
	}
}

/* ------------------------------------------------------------------------ the daemon */

struct daemon {
	pid_t pid;
	int port;
	char dir[256];
	const char *binary; /* the executable it runs */
	const char *home;   /* HOME of the daemon and of the bare runs compared with it, or NULL */
};
static void
on_alarm(int sig)
{
	int i;

	(void)sig;
	for (i = 0; i < MAX_DAEMONS; i++)
		if (live_pids[i] > 0)
			kill(live_pids[i], SIGKILL);
	static const char msg[] = "bench: the whole run passed its deadline; daemons killed\n";
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	_exit(1);
}

static int
free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		die("free port: %s", strerror(errno));
	close(fd);
	return ntohs(sa.sin_port);
}

static void
make_dir(struct daemon *d, const char *tag)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(d->dir, sizeof(d->dir), "%s/ttq-bench-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
	if (!mkdtemp(d->dir))
		die("mkdtemp: %s", strerror(errno));
}

static int
rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(p);
	return 0;
}

/*
 * Log dirs are removed only when the whole run ends: on an ext4 without a journal every new
 * inode is checked against recently deleted ones, so deleting one phase's thousands of job
 * folders would slow the next phase's file creation.
 */
static char dead_dirs[MAX_DAEMONS][256];

static void
remove_dir(struct daemon *d)
{
	int i;

	for (i = 0; i < MAX_DAEMONS; i++)
		if (!dead_dirs[i][0]) {
			snprintf(dead_dirs[i], sizeof(dead_dirs[i]), "%s", d->dir);
			return;
		}
	nftw(d->dir, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
}

static void
remove_dirs(void)
{
	int i;

	for (i = 0; i < MAX_DAEMONS; i++)
		if (dead_dirs[i][0])
			nftw(dead_dirs[i], rm_entry, 32, FTW_DEPTH | FTW_PHYS);
}

/* fork/exec `serve` with extra NAME=VALUE settings (NULL-terminated); returns at once. */
static void
daemon_spawn(struct daemon *d, const char *const *extra)
{
	char port[16], log[300];
	int i;

	snprintf(port, sizeof(port), "%d", d->port);
	snprintf(log, sizeof(log), "%s/daemon.log", d->dir);
	d->pid = fork();
	if (d->pid < 0)
		die("fork: %s", strerror(errno));
	if (d->pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);

		/* A bench stopped by a signal must not leave its daemon serving (SIGTERM: it stops). */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (fd >= 0) {
			dup2(fd, 1); /* never the bench's stdout: a pipe to it must see EOF */
			dup2(fd, 2);
		}
		setenv("TT_DEVICE_IDS", "0,1", 1);
		setenv("TT_DEVICE_HOST", "127.0.0.1", 1);
		setenv("TT_DEVICE_PORT", port, 1);
		setenv("TT_DEVICE_LOG_DIR", d->dir, 1);
		setenv("TT_DEVICE_RESET_CMD", "true", 1);
		setenv("TT_DEVICE_HEALTH_CHECK_CMD", "true", 1);
		for (i = 0; extra && extra[i]; i++)
			putenv((char *)extra[i]);
		if (d->home)
			setenv("HOME", d->home, 1);
		execl(d->binary, d->binary, "serve", (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < MAX_DAEMONS; i++)
		if (live_pids[i] <= 0) {
			live_pids[i] = d->pid;
			break;
		}
}

static void
daemon_stop(struct daemon *d)
{
	double end = now() + 15;
	int i, st;

	if (d->pid <= 0)
		return;
	kill(d->pid, SIGTERM);
	while (waitpid(d->pid, &st, WNOHANG) == 0) {
		if (now() > end) {
			kill(d->pid, SIGKILL);
			waitpid(d->pid, &st, 0);
			break;
		}
		sleep_s(0.005);
	}
	for (i = 0; i < MAX_DAEMONS; i++)
		if (live_pids[i] == d->pid)
			live_pids[i] = 0;
	d->pid = 0;
}

/* ------------------------------------------------------------------------ HTTP client */

struct hc {
	int fd, port;
	double last; /* when the last answer arrived */
	char *buf;   /* received bytes: the current response first */
	size_t len, cap;
	size_t resp_len; /* bytes of the complete response at the front, 0 while incomplete */
	int status;
	const char *body;
	size_t body_len;
};

static int
tcp_connect(int port, bool nonblock)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
	                         .sin_port = htons((uint16_t)port),
	                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (nonblock)
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

static void
hc_init(struct hc *c, int fd)
{
	memset(c, 0, sizeof(*c));
	c->fd = fd;
}

static void
hc_close(struct hc *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->buf);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

/* Is a complete response at the front of c->buf? Fills resp_len, status, body. */
static bool
hc_parse(struct hc *c)
{
	char *end, *p;
	size_t head, clen = 0;

	if (c->len < 12)
		return false;
	end = memmem(c->buf, c->len, "\r\n\r\n", 4);
	if (!end)
		return false;
	head = (size_t)(end - c->buf) + 4;
	c->status = atoi(c->buf + 9);
	for (p = c->buf; p && p < end; p = memchr(p, '\n', (size_t)(end - p))) {
		if (*p == '\n')
			p++;
		if (strncasecmp(p, "content-length:", 15) == 0)
			clen = strtoull(p + 15, NULL, 10);
	}
	if (c->len < head + clen)
		return false;
	c->body = c->buf + head;
	c->body_len = clen;
	c->resp_len = head + clen;
	return true;
}

/* Drop the complete response at the front. */
static void
hc_consume(struct hc *c)
{
	memmove(c->buf, c->buf + c->resp_len, c->len - c->resp_len);
	c->len -= c->resp_len;
	c->resp_len = 0;
}

/* Read what the socket has; -1 on EOF or error (EAGAIN: 0). */
static int
hc_fill(struct hc *c)
{
	ssize_t n;

	if (c->cap - c->len < 65536) {
		c->cap = c->cap ? c->cap * 2 : 262144;
		c->buf = realloc(c->buf, c->cap);
		if (!c->buf)
			die("out of memory");
	}
	n = read(c->fd, c->buf + c->len, c->cap - c->len - 1);
	if (n > 0) {
		c->len += (size_t)n;
		c->buf[c->len] = '\0';
		return 0;
	}
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	return -1;
}

static int
send_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static size_t
format_req(char *out, size_t cap, const char *method, const char *path, const char *body)
{
	size_t bl = body ? strlen(body) : 0;

	if (body)
		return (size_t)snprintf(out, cap,
		                        "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
		                        "application/json\r\nContent-Length: %zu\r\n\r\n%s",
		                        method, path, bl, body);
	return (size_t)snprintf(out, cap, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", method,
	                        path);
}

/* One request on a blocking keep-alive connection; the answer is in c (status -1: failed). */
static int
hc_request(struct hc *c, const char *method, const char *path, const char *body)
{
	char req[8192];
	size_t n = format_req(req, sizeof(req), method, path, body);
	double end = now() + RESP_DEADLINE;
	bool retried = false;

	if (c->resp_len)
		hc_consume(c);
again:
	c->status = -1;
	c->body = NULL;
	c->body_len = 0;
	if (send_all(c->fd, req, n) < 0)
		goto closed;
	while (!hc_parse(c)) {
		struct pollfd p = {.fd = c->fd, .events = POLLIN};
		double left = end - now();

		if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0) {
			fprintf(stderr, "bench: %s %s: no answer within %.0f s\n", method, path,
			        RESP_DEADLINE);
			return -1;
		}
		if (hc_fill(c) < 0)
			goto closed;
	}
	c->last = now();
	return c->status;
closed:
	/* The server may close an idle keep-alive connection (after 10 s): reconnect once. */
	if (retried || c->len > 0 || c->port == 0) {
		fprintf(stderr, "bench: %s %s: connection closed (%.2f s after the last answer)\n",
		        method, path, now() - c->last);
		return -1;
	}
	fprintf(stderr,
	        "bench: note: the daemon closed a connection idle for %.2f s; reconnecting\n",
	        now() - c->last);
	retried = true;
	close(c->fd);
	c->fd = tcp_connect(c->port, false);
	if (c->fd < 0)
		return -1;
	goto again;
}

/* The string value of "key":"..." in the current body, copied into out. */
static bool
body_str(const struct hc *c, const char *key, char *out, size_t cap)
{
	char pat[64];
	const char *p, *e;

	snprintf(pat, sizeof(pat), "\"%s\":\"", key);
	p = memmem(c->body, c->body_len, pat, strlen(pat));
	if (!p)
		return false;
	p += strlen(pat);
	e = memchr(p, '"', c->body_len - (size_t)(p - c->body));
	if (!e || (size_t)(e - p) >= cap)
		return false;
	memcpy(out, p, (size_t)(e - p));
	out[e - p] = '\0';
	return true;
}

static double
body_num(const struct hc *c, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = memmem(c->body, c->body_len, pat, strlen(pat));
	return p ? strtod(p + strlen(pat), NULL) : NAN;
}

/* Connect and wait for the daemon's first 200 on /status; seconds since `since`, or NAN. */
static double
wait_ready(struct daemon *d, double since, double timeout)
{
	double end = since + timeout;

	while (now() < end) {
		int fd = tcp_connect(d->port, false), st;
		struct hc c;

		if (fd < 0) {
			if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
				d->pid = 0;
				return NAN;
			}
			sleep_s(0.0002);
			continue;
		}
		hc_init(&c, fd);
		st = hc_request(&c, "GET", "/status", NULL);
		hc_close(&c);
		if (st == 200)
			return now() - since;
		sleep_s(0.001);
	}
	return NAN;
}

static void
daemon_start(struct daemon *d, const char *tag, const char *const *extra)
{
	if (!d->dir[0])
		make_dir(d, tag);
	d->port = free_port();
	daemon_spawn(d, extra);
	if (isnan(wait_ready(d, now(), 20)))
		die("the daemon in %s did not answer /status (see %s/daemon.log)", d->dir, d->dir);
}

static struct hc
connect_to(struct daemon *d)
{
	struct hc c;
	int fd = tcp_connect(d->port, false);

	if (fd < 0)
		die("connect: %s", strerror(errno));
	hc_init(&c, fd);
	c.port = d->port;
	c.last = now();
	return c;
}

/* POST /queue; the job id into id. */
static bool
submit(struct hc *c, const char *cmd, int device, char id[64])
{
	char body[1024];

	snprintf(body, sizeof(body),
	         "{\"cmd\": \"%s\", \"device_id\": \"%d\", \"client_id\": \"bench\"}", cmd, device);
	if (hc_request(c, "POST", "/queue", body) != 200 || !body_str(c, "job_id", id, 64)) {
		fprintf(stderr, "bench: POST /queue: %d %.*s\n", c->status, (int)c->body_len,
		        c->body ? c->body : "");
		return false;
	}
	return true;
}

/* Wait (long-polls) until the job is done, at most timeout s; false on timeout or error. */
static bool
wait_done(struct hc *c, const char *id, double timeout)
{
	char path[128], st[32];
	double end = now() + timeout;

	while (now() < end) {
		int w = (int)(end - now()) + 1;

		snprintf(path, sizeof(path), "/result/%s?wait=%d", id, w > 60 ? 60 : w);
		if (hc_request(c, "GET", path, NULL) != 200 ||
		    !body_str(c, "status", st, sizeof(st)))
			return false;
		if (strcmp(st, "done") == 0)
			return true;
	}
	return false;
}

static void
kill_job(struct hc *c, const char *id)
{
	char body[128];

	snprintf(body, sizeof(body), "{\"job_id\": \"%s\"}", id);
	hc_request(c, "POST", "/kill", body);
}

/* ------------------------------------------------------------------------ /proc readings */

struct pstat {
	long long ctxt;   /* voluntary + involuntary context switches */
	long long cpu_ns; /* time on CPU */
	long long hwm_kb, rss_kb, anon_kb, file_kb;
};

static struct pstat
read_pstat(pid_t pid)
{
	struct pstat s = {0};
	char path[64], line[256];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if ((f = fopen(path, "r"))) {
		while (fgets(line, sizeof(line), f)) {
			long long v;

			if (sscanf(line, "voluntary_ctxt_switches: %lld", &v) == 1 ||
			    sscanf(line, "nonvoluntary_ctxt_switches: %lld", &v) == 1)
				s.ctxt += v;
			else if (sscanf(line, "VmHWM: %lld", &v) == 1)
				s.hwm_kb = v;
			else if (sscanf(line, "VmRSS: %lld", &v) == 1)
				s.rss_kb = v;
			else if (sscanf(line, "RssAnon: %lld", &v) == 1)
				s.anon_kb = v;
			else if (sscanf(line, "RssFile: %lld", &v) == 1)
				s.file_kb = v;
		}
		fclose(f);
	}
	snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
	if ((f = fopen(path, "r"))) {
		if (fscanf(f, "%lld", &s.cpu_ns) != 1)
			s.cpu_ns = 0;
		fclose(f);
	}
	return s;
}

static double
self_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* ------------------------------------------------------------------------ bare commands */

/* The bench's environment with HOME set to home (NULL: as it is), built once per home. */
static char **
env_with_home(const char *home)
{
	static char **env, home_var[320];
	static const char *built_for;
	size_t n = 0, k = 0;

	if (!home)
		return environ;
	if (env && built_for == home)
		return env;
	while (environ[n])
		n++;
	free(env);
	env = xmalloc((n + 2) * sizeof(*env));
	for (n = 0; environ[n]; n++)
		if (strncmp(environ[n], "HOME=", 5) != 0)
			env[k++] = environ[n];
	snprintf(home_var, sizeof(home_var), "HOME=%s", home);
	env[k++] = home_var;
	env[k] = NULL;
	built_for = home;
	return env;
}

/*
 * Run bash -lc cmd in a new session with stdin /dev/null and stdout+stderr into a 1 MiB pipe
 * (the size the daemon gives its job pipes) that we read in 64 KiB reads and discard.
 * posix_spawn, as it is the quickest start a queue could use (the parent waits for the exec
 * instead of racing the child for a CPU, as after a fork): the bare runs are the floor.
 */
static double
bare_run(const char *cmd, const char *home)
{
	static char buf[65536];
	char *argv[] = {"bash", "-lc", (char *)cmd, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	int p[2], st, rc;
	pid_t pid;
	double t0 = now();

	if (pipe2(p, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	fcntl(p[0], F_SETPIPE_SZ, 1 << 20); /* as the daemon's job pipes */
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	posix_spawnattr_init(&at);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
	rc = posix_spawn(&pid, "/bin/bash", &fa, &at, argv, env_with_home(home));
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (rc != 0)
		die("posix_spawn /bin/bash: %s", strerror(rc));
	close(p[1]);
	while (read(p[0], buf, sizeof(buf)) > 0)
		;
	close(p[0]);
	waitpid(pid, &st, 0);
	return now() - t0;
}

/*
 * A file of 40 written pages in dir, rewritten in place by durable_write as the WAL is: the
 * stand-in for the job store's commit in the bare loops that compare with it.
 */
static int
durable_file(const char *dir, char *path, size_t pathlen)
{
	static char page[4096];
	int fd, i;

	snprintf(path, pathlen, "%s/floor.tmp", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		die("%s: %s", path, strerror(errno));
	for (i = 0; i < 40; i++)
		if (pwrite(fd, page, sizeof(page), (off_t)i * 4096) != (ssize_t)sizeof(page))
			die("%s: %s", path, strerror(errno));
	fsync(fd);
	return fd;
}

/* One 4 KiB write and fdatasync into durable_file's file: one durable commit. */
static void
durable_write(int fd, int i)
{
	static char page[4096];

	page[0] = (char)i;
	if (pwrite(fd, page, sizeof(page), (off_t)(i % 40) * 4096) != (ssize_t)sizeof(page) ||
	    fdatasync(fd) < 0)
		die("durable write: %s", strerror(errno));
}

/*
 * bare_run after one durable write: what any queue that puts a job's `running` on disk before
 * its process starts must spend per job at the least, the physical floor.
 */
static double
bare_run_durable(const char *cmd, const char *home, int fd, int i)
{
	double t0 = now(), t;

	durable_write(fd, i);
	t = now() - t0;
	return t + bare_run(cmd, home);
}


/* ------------------------------------------------------------------------ figures */

/* Start one daemon per side, each in its own log dir tagged `tag`, with HOME `home` (or NULL). */
static void
start_sides(struct daemon *d, const char *tag, const char *home, const char *const *extra)
{
	int s;

	for (s = 0; s < nsides; s++) {
		memset(&d[s], 0, sizeof(d[s]));
		d[s].binary = sides[s].binary;
		d[s].home = home;
		daemon_start(&d[s], tag, extra);
	}
}

static void
stop_sides(struct daemon *d)
{
	int s;

	for (s = 0; s < nsides; s++) {
		daemon_stop(&d[s]);
		remove_dir(&d[s]);
	}
}

/* The side whose turn is j-th in round k: the order swaps from one round to the next. */
static int
turn(int k, int j)
{
	return (k + j) % nsides;
}

/*
 * What one durable commit costs on the log dir's disk at the pace of a job every few ms: a
 * 4 KiB write and fdatasync after a 4 ms pause, the median of 40. Each start of a job waits
 * for one (its `running` is durable before the process starts), so this is under the dispatch
 * figures; a pause matters, as an idle virtual disk answers slower than a busy one.
 */
static double
durable_floor(const char *dir)
{
	struct timespec pause = {0, 4000000};
	double t[40], t0;
	char path[300];
	int fd = durable_file(dir, path, sizeof(path)), i;

	for (i = 0; i < 40; i++) {
		nanosleep(&pause, NULL);
		t0 = now();
		durable_write(fd, i);
		t[i] = now() - t0;
	}
	close(fd);
	unlink(path);
	return quantile(t, 40, 0.5);
}

/*
 * m `true` jobs queued on card 0 behind a blocker (a job that sleeps), timed from the blocker's
 * stop to the last one's end: the card's dispatch through a standing queue, not the submission
 * rate. Returns the seconds (NAN on failure) and adds the daemon's CPU seconds to *cpu.
 */
static double
queued_chunk(struct daemon *d, int m, double *cpu)
{
	char id[64], blocker[64];
	struct hc c = connect_to(d); /* a new one: the daemon closes one idle for 10 s */
	struct pstat s0, s1;
	bool ok = submit(&c, "exec sleep 120", 0, blocker);
	double t0, dt;
	int i;

	for (i = 0; i < m && ok; i++)
		ok = submit(&c, "true", 0, id);
	s0 = read_pstat(d->pid);
	t0 = now();
	if (ok)
		kill_job(&c, blocker);
	ok = ok && wait_done(&c, id, 5.0 * m + 30);
	dt = now() - t0;
	s1 = read_pstat(d->pid);
	*cpu += (double)(s1.cpu_ns - s0.cpu_ns) * 1e-9;
	hc_close(&c);
	return ok ? dt : NAN;
}

/*
 * Dispatch: `chunks` chunks of n / chunks jobs on each side, each chunk after a reference loop
 * of as many bare runs (with `floor`, each after one durable write), the sides' order swapped
 * from chunk to chunk. With `floor` the figure is disp_floor, the per-job overhead above the
 * floor loop (ms); without, dispatch, the reference loop's time / the queue's (jobs/s over
 * bare runs/s). Both are 20%-trimmed means of the chunks' values.
 */
static void
bench_dispatch(struct daemon *d, bool floor, int n, int chunks)
{
	static double r[2][MAX_CHUNKS], o[2][MAX_CHUNKS]; /* per chunk: ratio, overhead s/job */
	double ref = 0, dt[2] = {0, 0}, cpu[2] = {0, 0}, commit_s, ratio, rse, over, ose;
	char path[300];
	int k, j, i, s, m, ffd = -1;

	chunks = chunks > MAX_CHUNKS ? MAX_CHUNKS : chunks;
	m = n / chunks > 0 ? n / chunks : 1;
	n = m * chunks;
	if (floor)
		ffd = durable_file(d[0].dir, path, sizeof(path));
	for (k = 0; k < chunks; k++) {
		double ref_k = 0;

		for (i = 0; i < m; i++)
			ref_k += floor ? bare_run_durable("true", d[0].home, ffd, i)
			               : bare_run("true", d[0].home);
		ref += ref_k;
		for (j = 0; j < nsides; j++) {
			double dt_k;

			s = turn(k, j);
			dt_k = queued_chunk(&d[s], m, &cpu[s]);
			if (isnan(dt_k))
				die("a dispatch chunk did not finish (see %s/daemon.log)", d[s].dir);
			dt[s] += dt_k;
			r[s][k] = ref_k / dt_k;
			o[s][k] = (dt_k - ref_k) / m;
		}
	}
	if (ffd >= 0) {
		close(ffd);
		unlink(path);
	}
	commit_s = durable_floor(d[0].dir);
	for (s = 0; s < nsides; s++) {
		ratio = trimmed_mean(r[s], chunks, 0.2, &rse);
		over = trimmed_mean(o[s], chunks, 0.2, &ose);
		if (floor)
			report(s, "disp_floor", "dispatch_floor_overhead_ms", over * 1e3, ose * 1e3,
			       "ms", true, true, 0.5,
			       "[per job: queued time - floor loop time, 20%%-trimmed mean of %d "
			       "chunks of %d jobs; floor loop / queue %.3f +- %.3f; queue %.1f jobs/s, "
			       "floor loop (one durable 4 KiB write, then bash -lc true) %.1f/s; one "
			       "durable commit alone %.3f ms; daemon CPU %.3f ms per job; HOME empty]",
			       chunks, m, ratio, rse, n / dt[s], n / ref, commit_s * 1e3,
			       cpu[s] * 1e3 / n);
		else
			report(s, "dispatch", "dispatch_ratio", ratio, rse, "ratio", true, false, 0.9,
			       "[20%%-trimmed mean of %d chunks' ratios of %d jobs; queue %.2f jobs/s, "
			       "bare bash -lc true %.2f/s; %.2f +- %.2f ms more per job; daemon CPU "
			       "%.3f ms per job; through the login profile]",
			       chunks, m, n / dt[s], n / ref, over * 1e3, ose * 1e3, cpu[s] * 1e3 / n);
	}
}

/* Submission load on one side, summed over the windows measured. */
struct load {
	long ok, bad, nlat;
	double secs, srv_s, cli_s; /* seconds measured, daemon and client CPU seconds */
	long long ctxt;
	double *lat; /* answer latencies, LAT_CAP at most */
};
#define LAT_CAP (1 << 20)

struct lconn {
	struct hc h;
	int inflight;
	double sent[64];
};

/* 16 keep-alive clients, each with `depth` requests in flight, for `secs` seconds, into *acc. */
static void
load_submissions(struct daemon *d, int depth, double secs, struct load *acc)
{
	static const char body[] =
	    "{\"cmd\": \"true\", \"device_id\": \"0\", \"client_id\": \"bench\"}";
	struct lconn cl[NCLIENTS];
	struct pollfd pf[NCLIENTS];
	char req[512];
	size_t rn = format_req(req, sizeof(req), "POST", "/queue", body);
	double t_measure, t_end, t0 = 0, c_cpu0 = 0;
	struct pstat s0 = {0}, s1;
	bool measuring = false;
	int i, k;

	for (i = 0; i < NCLIENTS; i++) {
		int fd = tcp_connect(d->port, true);

		if (fd < 0)
			die("connect: %s", strerror(errno));
		hc_init(&cl[i].h, fd);
		cl[i].inflight = 0;
	}
	t_measure = now() + 0.3; /* warm-up */
	t_end = t_measure + secs;
	for (;;) {
		double t = now();

		if (!measuring && t >= t_measure) {
			measuring = true;
			s0 = read_pstat(d->pid);
			c_cpu0 = self_cpu();
			t0 = t;
		}
		if (t >= t_end)
			break;
		for (i = 0; i < NCLIENTS; i++) {
			struct lconn *c = &cl[i];

			while (c->inflight < depth) {
				if (send_all(c->h.fd, req, rn) < 0)
					die("send: %s", strerror(errno));
				c->sent[c->inflight++] = t;
			}
			pf[i].fd = c->h.fd;
			pf[i].events = POLLIN;
		}
		if (poll(pf, NCLIENTS, 1000) <= 0)
			die("submission load: no answer within 1 s");
		t = now();
		for (i = 0; i < NCLIENTS; i++) {
			struct lconn *c = &cl[i];

			if (!pf[i].revents)
				continue;
			if (hc_fill(&c->h) < 0)
				die("submission load: connection closed");
			while (hc_parse(&c->h)) {
				if (measuring) {
					if (c->h.status == 200)
						acc->ok++;
					else
						acc->bad++;
					if (acc->nlat < LAT_CAP)
						acc->lat[acc->nlat++] = t - c->sent[0];
				}
				hc_consume(&c->h);
				memmove(c->sent, c->sent + 1,
				        sizeof(double) * (size_t)--c->inflight);
			}
		}
	}
	s1 = read_pstat(d->pid);
	acc->secs += now() - t0;
	acc->srv_s += (double)(s1.cpu_ns - s0.cpu_ns) * 1e-9;
	acc->cli_s += self_cpu() - c_cpu0;
	acc->ctxt += s1.ctxt - s0.ctxt;
	/* Let every answer in flight arrive before closing. */
	for (i = 0; i < NCLIENTS; i++) {
		double end = now() + 10;

		for (k = cl[i].inflight; k > 0 && now() < end;) {
			struct pollfd p = {.fd = cl[i].h.fd, .events = POLLIN};

			if (poll(&p, 1, 1000) > 0 && hc_fill(&cl[i].h) < 0)
				break;
			while (k > 0 && hc_parse(&cl[i].h)) {
				hc_consume(&cl[i].h);
				k--;
			}
		}
		hc_close(&cl[i].h);
	}
}

/* One side's submission figure (depth 1: with its target) from the windows summed in *l. */
static void
report_load(int side, const struct load *l, int depth)
{
	double rate = (double)l->ok / l->secs, p50 = quantile(l->lat, (int)l->nlat, 0.5);
	double p99 = quantile(l->lat, (int)l->nlat, 0.99);

	report(side, depth == 1 ? "submissions" : "pipelined",
	       depth == 1 ? "submissions_per_s" : "submissions_pipelined_per_s", rate, NAN, "/s",
	       depth == 1, false, 5000,
	       "[%d in flight on each of %d clients; p50 %.2f ms, p99 %.2f ms, %ld non-200; server "
	       "CPU %.0f%%, client CPU %.0f%%; %ld loop wake-ups/s; %.1f s measured]",
	       depth, NCLIENTS, p50 * 1e3, p99 * 1e3, l->bad, l->srv_s / l->secs * 100,
	       l->cli_s / l->secs * 100, (long)((double)l->ctxt / l->secs), l->secs);
	json_extra(side, depth == 1 ? "submissions_p99_ms" : "submissions_pipelined_p99_ms",
	           p99 * 1e3);
}

static void
bench_submissions(void)
{
	static const char *const extra[] = {"TT_DEVICE_MAX_QUEUED_JOBS=10000000", NULL};
	struct daemon d[2];
	struct load l1[2], l8[2];
	double secs = full ? 10 : 3;
	const char *e = getenv("BENCH_SECONDS");
	char id[64];
	int s, k, j;

	if (e && atof(e) > 0)
		secs = atof(e);
	start_sides(d, "submit", NULL, extra);
	for (s = 0; s < nsides; s++) {
		struct hc c = connect_to(&d[s]);

		/* holds card 0 so the submissions stay queued */
		if (!submit(&c, "sleep 600", 0, id))
			die("cannot submit the blocker");
		hc_close(&c);
		memset(&l1[s], 0, sizeof(l1[s]));
		memset(&l8[s], 0, sizeof(l8[s]));
		l1[s].lat = xmalloc(LAT_CAP * sizeof(double));
		l8[s].lat = xmalloc(LAT_CAP * sizeof(double));
	}
	/* Two windows a side, alternating, so the sides share the host's moods. */
	for (k = 0; k < 2; k++)
		for (j = 0; j < nsides; j++)
			load_submissions(&d[turn(k, j)], 1, secs / 2, &l1[turn(k, j)]);
	for (k = 0; k < 2; k++)
		for (j = 0; j < nsides; j++)
			load_submissions(&d[turn(k, j)], 8, secs / 4, &l8[turn(k, j)]);
	for (s = 0; s < nsides; s++) {
		report_load(s, &l1[s], 1);
		report_load(s, &l8[s], 8);
		free(l1[s].lat);
		free(l8[s].lat);
	}
	stop_sides(d);
}

static void
bench_memory_status(void)
{
	struct daemon d[2];
	struct hc c[2];
	char id[64];
	int i, s, j, n = full ? 1000 : 300, bad[2] = {0, 0};
	static double lat[2][1000];
	struct pstat after_queue[2], after_status[2];
	double size[2] = {0, 0};

	start_sides(d, "memory", NULL, NULL);
	for (s = 0; s < nsides; s++) {
		c[s] = connect_to(&d[s]);
		if (!submit(&c[s], "sleep 600", 1, id))
			die("cannot submit the blocker");
		for (i = 0; i < 1000; i++)
			if (!submit(&c[s], "true", 1, id))
				bad[s]++;
		after_queue[s] = read_pstat(d[s].pid);
	}
	for (i = 0; i < n; i++)
		for (j = 0; j < nsides; j++) {
			double t;

			s = turn(i, j);
			t = now();
			if (hc_request(&c[s], "GET", "/status", NULL) != 200)
				bad[s]++;
			lat[s][i] = now() - t;
			size[s] = (double)c[s].body_len;
		}
	for (s = 0; s < nsides; s++) {
		after_status[s] = read_pstat(d[s].pid);
		if (wanted("memory"))
			report(s, "memory", "memory_peak_mib", after_status[s].hwm_kb / 1024.0, NAN,
			       "MiB", true, true, 4,
			       "[VmHWM after queueing 1000: %.2f MiB; now RSS %.2f MiB = %.2f "
			       "private/anon + %.2f file-backed (binary, shared libraries); %d failed "
			       "requests]",
			       after_queue[s].hwm_kb / 1024.0, after_status[s].rss_kb / 1024.0,
			       after_status[s].anon_kb / 1024.0, after_status[s].file_kb / 1024.0,
			       bad[s]);
		if (wanted("status")) {
			double p50 = quantile(lat[s], n, 0.5), p99 = quantile(lat[s], n, 0.99);

			report(s, "status", "status_p99_ms", p99 * 1e3,
			       quantile_se(lat[s], n, 0.99) * 1e3, "ms", true, true, 5,
			       "[p50 %.2f ms, max %.2f ms, %d requests, body %.0f KiB, 1000 queued]",
			       p50 * 1e3, lat[s][n - 1] * 1e3, n, size[s] / 1024);
		}
		hc_close(&c[s]);
	}
	stop_sides(d);
}

/* Context switches/s and CPU ms/s of each side's daemon over the same secs. */
static void
idle_window(struct daemon *d, double secs, double *wake, double *cpu_ms)
{
	struct pstat a[2], b[2];
	double t0, dt;
	int s;

	sleep_s(0.3); /* let the last event settle */
	for (s = 0; s < nsides; s++)
		a[s] = read_pstat(d[s].pid);
	t0 = now();
	sleep_s(secs);
	for (s = 0; s < nsides; s++)
		b[s] = read_pstat(d[s].pid);
	dt = now() - t0;
	for (s = 0; s < nsides; s++) {
		wake[s] = (double)(b[s].ctxt - a[s].ctxt) / dt;
		cpu_ms[s] = (double)(b[s].cpu_ns - a[s].cpu_ns) * 1e-6 / dt;
	}
}

static void
bench_idle(struct daemon *d)
{
	double secs = full ? 10 : 5, w1[2], c1[2], w2[2], c2[2];
	struct hc c, lp[2];
	char id[2][64], req[256];
	size_t n;
	int s;

	/* Nothing running and no connection open (an idle keep-alive one has a 10 s timer). */
	idle_window(d, secs, w1, c1);
	for (s = 0; s < nsides; s++) {
		c = connect_to(&d[s]);
		if (!submit(&c, "sleep 600", 1, id[s]))
			die("cannot submit the long job");
		hc_close(&c);
		lp[s] = connect_to(&d[s]);
		n = (size_t)snprintf(req, sizeof(req),
		                     "GET /result/%s?wait=60 HTTP/1.1\r\nHost: x\r\n\r\n", id[s]);
		if (send_all(lp[s].fd, req, n) < 0)
			die("long-poll: %s", strerror(errno));
	}
	idle_window(d, secs, w2, c2);
	for (s = 0; s < nsides; s++) {
		report(s, "idle", "idle_wakeups_per_s", fmax(w1[s], w2[s]), NAN, "/s", true, true,
		       0.01,
		       "[idle: %.2f/s %.4f ms CPU/s; a job running silently and a /result?wait=60 "
		       "long-poll held: %.2f/s %.4f ms CPU/s; %.0f s each]",
		       w1[s], c1[s], w2[s], c2[s], secs);
		report(s, "idle_cpu", "idle_cpu_ms_per_s", fmax(c1[s], c2[s]), NAN, "ms/s", true,
		       true, 0.05, NULL);
		c = connect_to(&d[s]);
		kill_job(&c, id[s]);
		wait_done(&c, id[s], 30);
		hc_close(&c);
		hc_close(&lp[s]);
	}
}

static void
bench_output(struct daemon *d)
{
	static const char cmd[] = "head -c 1000000000 /dev/zero";
	int reps = full ? 5 : 3, i, j, s;
	double bare[8], queued[2][8], elapsed[2][8], cpu[2][8], rb;
	char id[64];

	for (i = 0; i < reps; i++) {
		bare[i] = bare_run(cmd, d[0].home);
		for (j = 0; j < nsides; j++) {
			struct pstat s0, s1;
			struct hc c;
			double t0;

			s = turn(i, j);
			c = connect_to(&d[s]); /* a new one: a slow host makes the last one idle 10 s */
			s0 = read_pstat(d[s].pid);
			t0 = now();
			if (!submit(&c, cmd, 1, id) || !wait_done(&c, id, 60))
				die("the 1 GB job did not finish");
			queued[s][i] = now() - t0;
			s1 = read_pstat(d[s].pid);
			cpu[s][i] = (double)(s1.cpu_ns - s0.cpu_ns) * 1e-9;
			elapsed[s][i] = body_num(&c, "elapsed");
			hc_close(&c);
		}
	}
	rb = quantile(bare, reps, 0.5);
	for (s = 0; s < nsides; s++) {
		double rq = quantile(queued[s], reps, 0.5);

		report(s, "output", "output_ratio", rq / rb, NAN, "ratio", true, true, 1.5,
		       "[1 GB: queued %.3f s (job elapsed %.3f s; daemon CPU %.3f s), pipe reader "
		       "%.3f s; medians of %d; HOME empty]",
		       rq, quantile(elapsed[s], reps, 0.5), quantile(cpu[s], reps, 0.5), rb, reps);
	}
}

/*
 * Round trip: submit + wait for `true` on an idle card, set against the mean of the bare
 * `bash -lc true` runs just before and after it (B Q B Q' B ..., Q and Q' the sides): a bare
 * run's cost drifts over minutes, and the bracket cancels a linear drift and any effect of the
 * run before. The figure is the 20%-trimmed mean of these differences, not their median, whose
 * standard error is larger on this kind of noise. Beside it the part of the round trip outside
 * the job's own run (its record's elapsed, from the dispatch to the reap), which carries none
 * of the shell's noise.
 */
static void
bench_round_trip(struct daemon *d, int runs)
{
	static double bare[2 * MAX_RUNS + 1], rt[2][MAX_RUNS], diff[2][MAX_RUNS],
	    sub[2][MAX_RUNS], outside[2][MAX_RUNS];
	double tm, se, to, se_o, med, mb;
	int i, s, nb = 0;
	struct hc c[2];
	char id[64];

	runs = runs > MAX_RUNS ? MAX_RUNS : runs;
	for (s = 0; s < nsides; s++)
		c[s] = connect_to(&d[s]);
	bare[nb++] = bare_run("true", d[0].home);
	for (i = 0; i < runs; i++)
		for (s = 0; s < nsides; s++) {
			double t0 = now();

			if (!submit(&c[s], "true", 1, id))
				die("the round-trip job was refused");
			sub[s][i] = now() - t0;
			if (!wait_done(&c[s], id, 30))
				die("the round-trip job did not finish");
			rt[s][i] = now() - t0;
			outside[s][i] = rt[s][i] - body_num(&c[s], "elapsed");
			bare[nb] = bare_run("true", d[0].home);
			diff[s][i] = rt[s][i] - (bare[nb - 1] + bare[nb]) / 2;
			nb++;
		}
	mb = quantile(bare, nb, 0.5);
	for (s = 0; s < nsides; s++) {
		tm = trimmed_mean(diff[s], runs, 0.2, &se);
		to = trimmed_mean(outside[s], runs, 0.2, &se_o);
		med = quantile(diff[s], runs, 0.5);
		report(s, "round_trip", "round_trip_ms", tm * 1e3, se * 1e3, "ms", true, true, 2,
		       "[20%%-trimmed mean of %d differences, each queued run less the mean of the "
		       "bare runs before and after it (their median %.2f ms); outside the job's run "
		       "(round trip - elapsed) %.3f +- %.3f ms; submit+wait %.2f ms, bare bash -lc "
		       "true %.2f ms (medians); POST /queue answered (committed, started) in %.2f "
		       "ms; HOME empty]",
		       runs, med * 1e3, to * 1e3, se_o * 1e3, quantile(rt[s], runs, 0.5) * 1e3,
		       mb * 1e3, quantile(sub[s], runs, 0.5) * 1e3);
		hc_close(&c[s]);
	}
}

/*
 * A job printing `lines` realtime stamps 20 ms apart, its output read from a pipe: the job runs
 * on d's card 1 followed by the real CLI (`run`) whose stdout is the pipe; with `bare`, the same
 * command runs as a bare `bash -lc` (HOME d->home) whose stdout is the pipe: what the host
 * alone adds. Each line's arrival - written (s) is appended to lag[*n..]. The command first waits
 * 0.3 s, so the client is following before the first line.
 */
static void
follow_lag(const struct daemon *d, bool bare, int lines, double *lag, int *n)
{
	char cmd[256], port[16], log[300], buf[65536], *nl;
	size_t len = 0;
	int p[2], st, got = 0;
	double end = now() + 60;
	pid_t pid;

	snprintf(cmd, sizeof(cmd),
	         "sleep 0.3; for i in $(seq %d); do echo $EPOCHREALTIME; sleep 0.02; done", lines);
	snprintf(log, sizeof(log), "%s/%s.log", d->dir, bare ? "bare" : "cli");
	if (pipe2(p, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);
		int err = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

		dup2(null, 0);
		dup2(p[1], 1);
		if (err >= 0)
			dup2(err, 2);
		if (bare) {
			setsid();
			if (d->home)
				setenv("HOME", d->home, 1);
			execl("/bin/bash", "bash", "-lc", cmd, (char *)NULL);
			_exit(127);
		}
		snprintf(port, sizeof(port), "%d", d->port);
		unsetenv("TT_DEVICE_URL");
		unsetenv("TT_DEVICE_JOB_ID");
		setenv("TT_DEVICE_HOST", "127.0.0.1", 1);
		setenv("TT_DEVICE_PORT", port, 1);
		execl(d->binary, d->binary, "run", "--device", "1", "--", cmd, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	for (;;) {
		struct pollfd pf = {.fd = p[0], .events = POLLIN};
		double left = end - now(), t;
		ssize_t r;

		if (left <= 0 || poll(&pf, 1, (int)(left * 1000) + 1) <= 0) {
			kill(pid, SIGKILL);
			die("the followed job's output stopped (see %s)", log);
		}
		r = read(p[0], buf + len, sizeof(buf) - 1 - len);
		t = wall_now();
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
		buf[len] = '\0';
		while ((nl = memchr(buf, '\n', len))) {
			char *c = memchr(buf, ',', (size_t)(nl - buf)); /* a locale's decimal comma */
			double w;

			*nl = '\0';
			if (c)
				*c = '.';
			w = strtod(buf, NULL);
			if (w > 0 && t - w > -1 && t - w < 60) {
				lag[(*n)++] = t - w;
				got++;
			}
			len -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, len);
		}
	}
	close(p[0]);
	waitpid(pid, &st, 0);
	if (got != lines)
		die("the followed job printed %d of %d lines (exit status %d; see %s)", got, lines,
		    WIFEXITED(st) ? WEXITSTATUS(st) : -1, log);
}

/*
 * Output lag: how long after a job writes a line a following client prints it. Jobs of 100
 * lines, the sides' and a bare pipe's alternating; p99 (the target) and p50 of all lines.
 */
static void
bench_lag(struct daemon *d)
{
	enum { LINES = 100 };
	int rounds = full ? 15 : 5, n[2] = {0, 0}, nb = 0, k, j, s;
	double *lag[2], *bare = xmalloc((size_t)(rounds * LINES) * sizeof(double)), b50, b99;

	for (s = 0; s < nsides; s++)
		lag[s] = xmalloc((size_t)(rounds * LINES) * sizeof(double));
	for (k = 0; k < rounds; k++) {
		follow_lag(&d[0], true, LINES, bare, &nb);
		for (j = 0; j < nsides; j++) {
			s = turn(k, j);
			follow_lag(&d[s], false, LINES, lag[s], &n[s]);
		}
	}
	b50 = quantile(bare, nb, 0.5);
	b99 = quantile(bare, nb, 0.99);
	for (s = 0; s < nsides; s++) {
		double p50 = quantile(lag[s], n[s], 0.5), p99 = quantile(lag[s], n[s], 0.99);

		report(s, "lag", "output_lag_p99_ms", p99 * 1e3,
		       quantile_se(lag[s], n[s], 0.99) * 1e3, "ms", true, true, 5,
		       "[a job's line written ($EPOCHREALTIME) to `tt-device-queue run` printing it "
		       "into a pipe: p50 %.2f ms, max %.2f ms; %d lines 20 ms apart in %d jobs; the "
		       "same lines through a bare pipe: p50 %.2f ms, p99 %.2f ms; HOME empty]",
		       p50 * 1e3, lag[s][n[s] - 1] * 1e3, n[s], rounds, b50 * 1e3, b99 * 1e3);
		json_extra(s, "output_lag_p50_ms", p50 * 1e3);
		free(lag[s]);
	}
	json_extra(1, "output_lag_bare_p99_ms", b99 * 1e3);
	free(bare);
}

/* Fill jobs.sqlite3 of a stopped daemon with n done jobs, through the daemon's own schema. */
static void
fill_done_jobs(struct daemon *d, int n)
{
	char path[300], sql[2048], *err = NULL;
	sqlite3 *db;
	double t = (double)time(NULL);

	snprintf(path, sizeof(path), "%s/jobs.sqlite3", d->dir);
	if (sqlite3_open(path, &db) != SQLITE_OK)
		die("open %s: %s", path, sqlite3_errmsg(db));
	snprintf(
	    sql, sizeof(sql),
	    "BEGIN; WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < %d) "
	    "INSERT INTO jobs (id, device, cmd, cwd, timeout, repeat, mode, client_id, "
	    "reset_epoch, submitted, status, exit_code, elapsed, output_file, started_at, "
	    "finished_at, repeat_current, repeat_completed, first_iteration_elapsed, "
	    "per_iter_estimate_sec, log_size, log_truncated, dropped_log_bytes, timed_out, "
	    "updated_at) SELECT printf('%%032x', i), i %% 2, 'echo job ' || i, '/tmp', 3600, 1, "
	    "'run', 'bench', 0, %.3f + i, 'done', 0, 0.1, '%s/' || printf('%%032x', i) || "
	    "'/output', %.3f + i, %.3f + i, 1, 1, 0.1, 0.1, 10, 0, 0, 0, %.3f + i FROM c; COMMIT;",
	    n, t - n - 100, d->dir, t - n - 99.9, t - n - 99.8, t - n - 99.8);
	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
		die("filling the database: %s", err);
	sqlite3_close(db);
}

static void
bench_startup(void)
{
	struct daemon d[2];
	int reps = full ? 9 : 5, i, j, s;
	double t[2][16];

	start_sides(d, "startup", NULL, NULL);
	for (s = 0; s < nsides; s++) {
		daemon_stop(&d[s]);
		fill_done_jobs(&d[s], 10000);
	}
	for (i = 0; i < reps; i++)
		for (j = 0; j < nsides; j++) {
			double t0 = now();

			s = turn(i, j);
			d[s].port = free_port();
			daemon_spawn(&d[s], NULL);
			t[s][i] = wait_ready(&d[s], t0, 20);
			if (isnan(t[s][i]))
				die("the daemon did not start on a 10,000-job database (see %s)",
				    d[s].dir);
			daemon_stop(&d[s]);
		}
	for (s = 0; s < nsides; s++) {
		double m = quantile(t[s], reps, 0.5);

		report(s, "startup", "startup_ms", m * 1e3, quantile_se(t[s], reps, 0.5) * 1e3, "ms",
		       true, true, 100,
		       "[median of %d starts on 10,000 done jobs; fastest %.1f ms, slowest %.1f ms]",
		       reps, t[s][0] * 1e3, t[s][reps - 1] * 1e3);
		remove_dir(&d[s]);
	}
}

/*
 * Dispatch through the login profile, sized by a time budget: the jobs per chunk are counted
 * from what one `bash -lc true` costs now (the median of 3).
 */
static void
bench_profile(void)
{
	double budget = (full ? 150 : 30) * nsides, b[3], cost;
	struct daemon d[2];
	int i, m;

	for (i = 0; i < 3; i++)
		b[i] = bare_run("true", NULL);
	cost = quantile(b, 3, 0.5);
	m = (int)(budget / (10 * (1 + nsides) * cost));
	m = m < 1 ? 1 : m > 100 ? 100 : m;
	printf("(login profile: bash -lc true takes %.0f ms; %d jobs a dispatch chunk)\n",
	       cost * 1e3, m);
	start_sides(d, "profile", NULL, NULL);
	bench_dispatch(d, false, 10 * m, 10);
	stop_sides(d);
}

int
main(int argc, char **argv)
{
	struct daemon d[2];
	const char *e, *before = getenv("BENCH_BEFORE");
	char home[300];
	double t0 = now();
	int s;

	(void)argc;
	(void)argv;
	sides[0] = (struct side){"now", "./tt-device-queue"};
	if ((e = getenv("TTQ_BINARY")) && *e)
		sides[0].binary = e;
	if (before && *before) {
		sides[1] = (struct side){"after ", sides[0].binary};
		sides[0] = (struct side){"before", before};
		nsides = 2;
	}
	full = (e = getenv("BENCH_FULL")) && *e && strcmp(e, "0") != 0;
	only = getenv("BENCH_ONLY");
	for (s = 0; s < nsides; s++)
		if (access(sides[s].binary, X_OK) < 0)
			die("%s: %s (run make first)", sides[s].binary, strerror(errno));
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	alarm(WHOLE_RUN);
	printf("tt-device-queue benchmark (%s run; %ld cores; this C client, one thread)\n",
	       full ? "full" : "short", sysconf(_SC_NPROCESSORS_ONLN));
	for (s = 0; s < nsides; s++)
		printf("%s: %s\n", sides[s].label, sides[s].binary);
	if (wanted("startup"))
		bench_startup();
	if (wanted("idle") || wanted("round_trip") || wanted("output") || wanted("disp_floor") ||
	    wanted("lag")) {
		const char *tmp = getenv("TMPDIR");

		snprintf(home, sizeof(home), "%s/ttq-bench-home-XXXXXX", tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(home))
			die("mkdtemp: %s", strerror(errno));
		start_sides(d, "clean", home, NULL);
		if (wanted("idle"))
			bench_idle(d);
		if (wanted("round_trip"))
			bench_round_trip(d, full ? 2000 : 600);
		if (wanted("output"))
			bench_output(d);
		if (wanted("disp_floor"))
			bench_dispatch(d, true, full ? 3000 : 900, full ? 60 : 30);
		if (wanted("lag"))
			bench_lag(d);
		stop_sides(d);
		rmdir(home);
	}
	if (wanted("memory") || wanted("status"))
		bench_memory_status();
	if (wanted("submissions"))
		bench_submissions();
	if (wanted("dispatch"))
		bench_profile();
	remove_dirs();
	if (nsides == 2)
		print_table();
	json_extra(1, "bench_seconds", now() - t0);
	printf("%s}\n", json_line);
	return 0;
}

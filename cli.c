/*
 * cli.c - the command-line client: every subcommand of tt-device-queue but `serve`.
 *
 * Invariants:
 * - One TCP connection per command, reused for every request (keep-alive) and reopened once
 *   when the daemon closed it between requests, for a request that may be sent twice (a GET,
 *   or a POST with an idempotency key); any other POST goes on a new connection. The socket is non-blocking and every connect,
 *   write and read waits in one ppoll() helper, wait_fd(), which knows two deadlines: the
 *   request's own (connect 5 s; an answer within the request's `wait` + 10 s) and the
 *   command's local --wait-timeout. Reaching the local deadline abandons the connection and the
 *   command exits 124: the job keeps running. A wait always asks the daemon once first, even
 *   when that deadline has passed already (`--wait-timeout 0`), so a finished job is reported.
 * - Every wait is one of the daemon's long-polls (/logs?wait=S, /result?wait=S). There is no
 *   sleep and no loop that does not block inside the daemon.
 * - SIGINT only sets `interrupted` (sigaction without SA_RESTART). wait_fd() blocks SIGINT
 *   between checking the flag and ppoll(), which unblocks it atomically, so a Ctrl-C is never
 *   lost; blocking writes to stdout and reads of stdin see EINTR. An interrupted wait says the
 *   job was not stopped and exits 130.
 * - Helpers return exit statuses (enum st) so a failure travels up unchanged; the internal
 *   R_* codes are negative and never become exit statuses.
 * - A JSON answer is copied into a struct doc that owns its text and tokens; nothing keeps a
 *   pointer into the connection's buffer across requests.
 * - No global mutable state but the SIGINT flag; everything else lives in struct cli.
 * - `shell` departs from the two above while its command runs: the command has the terminal's
 *   ^C (the client ignores SIGINT), and the client waits on the command's pidfd between
 *   renewals of its lease, not in a long-poll.
 *
 * Decisions:
 * - cwd: run/queue/queue-python send the client's current directory unless --cwd is given
 *   (a relative --cwd is taken from the client's directory; `--cwd ''` asks for the daemon's
 *   own directory). Examples that pass --cwd "$PWD" explicitly stay right: this default makes
 *   it redundant but harmless; the earlier client of the same name defaulted to
 *   the current directory, and a daemon started by systemd has no directory a user would
 *   expect `run -- 'python3 script.py'` to run in. If getcwd() fails (directory deleted, longer
 *   than PATH_MAX) it is a usage error, as a bad --cwd is: never the daemon's directory.
 * - Exactly once: every submission carries an idempotency key (--key, else cli-<random>).
 *   Once its bytes went out, a lost answer (a close, no answer in 10 s, a daemon gone) sends it
 *   again with the key, which never queues a job twice, until an answer comes or
 *   TT_DEVICE_RECONNECT_SEC passes; then exit 75 (fate unknown, the key told), never 1, which
 *   means nothing was queued. A 503 with Retry-After was not handled: asked again after the
 *   pause (busy_pause).
 * - Arguments after `--` (or from the first operand on, for run/queue): one is a complete
 *   shell program used verbatim; several are an argv, each word single-quoted for bash unless
 *   it consists only of characters that need no quoting (keeps stored commands readable).
 * - A TT_DEVICE_URL without a port means port 80, as for any http URL.
 * - `result`, `run` and `queue-python --wait` print the same JSON with --json: one flat
 *   object, the GET /job record's members plus "output" and "output_truncated", as the
 *   earlier client of the same name did (scripts read `jq .exit_code`); all exit with the
 *   job's status in either mode.
 * - `logs ID` without --limit prints everything the log holds now (several chunks);
 *   `--limit N` prints at most N bytes. When the job is not complete afterwards (more bytes
 *   remain or may still come) it prints `next_offset=N` on stderr.
 * - Writing stdout into a closed pipe ends the command quietly with 141 (128 + SIGPIPE), as
 *   if SIGPIPE had not been ignored; the job keeps running.
 * - Job output comes over HTTP only, from the /logs answers' `content`: one path, whether the
 *   daemon runs here or elsewhere. JSON carries text, so bytes of the log that are not UTF-8
 *   come out as U+FFFD; the output file (output_file) holds the exact bytes.
 * - The summary line and status's outcome words come from the record's end_reason and signal
 *   (struct ending), never from the words of `error`; a job without an exit code (-1) exits
 *   129 as a death by SIGHUP does, and the summary tells which.
 * - The client id (--client-id, TT_QUEUE_CLIENT_ID or the default) is diagnostic only: one
 *   longer than the daemon's 128 characters is cut to 128 characters (after the invalid bytes
 *   the JSON writer turns into U+FFFD are counted as the daemon counts them), never an error.
 * - When the job completed (its last /logs or /result answer said so) but its record cannot be
 *   fetched because the daemon went away (it was stopped), the client says so, tells how to
 *   ask later (`result ID`) and exits 1.
 */
#include "cli.h"
#include "http.h"
#include "json.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG "tt-device-queue"
#define NOTE "[tt-device-queue] "

#define DEFAULT_HOST "127.0.0.1"
#define DEFAULT_PORT "5741"
#define CONNECT_TIMEOUT_SEC 5.0
#define REQUEST_SLACK_SEC 10    /* an answer is due within the request's wait + this */
#define MAX_WAIT_SEC 30         /* longest wait=S asked of the daemon (it accepts 0..60) */
#define RECONNECT_SEC 60 /* default TT_DEVICE_RECONNECT_SEC: a daemon lost in a wait may take
                          * this long to come back */
#define LOG_CHUNK 65536         /* largest limit= asked of /logs (the daemon caps it too) */
#define RESPONSE_MAX (256u << 20)
#define DEFAULT_RESULT_BYTES (1024ull * 1024)
#define SCRIPT_MAX_AGE_SEC (7L * 24 * 3600)
#define STATUS_COLS 100  /* characters of a job line of human status */
#define CMD_MIN_COLS 12  /* characters of a command shown however long its line's head */
#define STATUS_QUEUED 10 /* queued jobs listed per card by human status; the rest counted */
#define CLIENT_SHOW 20   /* columns of a client id in human status */
#define OWNER_SHOW 8     /* of them, the owner's name before another user's client id */
#define SCHED_RECENT_MAX 64 /* recent jobs of a card shown (the daemon sends 10) */

#define MAX_JOB_CARDS 256 /* cards one job may name (the daemon's MAX_CARDS) */
/* shell's default --heartbeat: a killed client frees its cards within 10 s, while a renewal
 * every 3.3 s survives two lost to a busy or restarting daemon, for a few requests a minute */
#define SHELL_HEARTBEAT_SEC 10

/* Exit statuses (the man page's EXIT STATUS). Helpers return these so a failure travels up unchanged. */
enum st {
	ST_OK = 0,
	ST_FAIL = 1, /* unreachable, refused (non-2xx) or a local failure */
	ST_USAGE = 2,
	ST_UNKNOWN = 75,  /* a submission was sent but never answered: it may be queued (its key
	                   * tells) */
	ST_TIMEOUT = 124, /* --wait-timeout passed; the job keeps running */
	ST_INTR = 130,    /* SIGINT while waiting; the job keeps running */
	ST_PIPE = 141,    /* stdout is a closed pipe */
};

/* Internal results of the HTTP layer, never exit statuses. */
enum {
	R_CLOSED = -1, /* the peer closed before answering: retried once on a reused connection */
	R_SLOW = -2,   /* the request's own deadline passed */
	R_HELP = -3,   /* a --help was printed: exit 0 */
	R_AGAIN = -4,  /* ask the same again (busy_pause, waited) */
};

#define CLIENT_ID_CHARS 128 /* the daemon's limit on client_id, in characters */
#define KEY_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"

/* skills/tt-device-queue/SKILL.md, built in so that a copied executable can teach an agent. */
static const unsigned char embedded_skill[] = {
#include "skill.inc"
};

static volatile sig_atomic_t interrupted; /* set by SIGINT; the only global mutable state */

struct cli {
	/* global options (views into argv) */
	const char *host_opt;
	const char *port_opt;
	const char *client_id_opt;
	int json;
	/* connection */
	int target_ok;           /* addr set from options and environment */
	struct sockaddr_in addr; /* the daemon's */
	char hostport[272];      /* for messages and the Host header */
	char client_id[CLIENT_ID_CHARS * 4 + 1];
	int fd;             /* -1 when not connected */
	struct json_buf in; /* bytes of the current answer */
	int has_deadline;   /* a local --wait-timeout is running */
	int ask_once;       /* it passed before the wait asked anything: this request ignores it */
	double deadline;    /* CLOCK_MONOTONIC seconds */
	char err[512];      /* the last failure, for the caller's message */
	int conn_failed;    /* the last api() call failed to reach the daemon (not a refusal) */
	int sent;           /* a request's bytes began to go out since this was last cleared */
	int unknown;        /* a keyed request went out and its answer was lost (api_call) */
	int waiting;        /* in a wait on an acknowledged job: a lost daemon is waited for */
	int connected;      /* a connection to the daemon succeeded once in this command */
	double gone_since;  /* CLOCK_MONOTONIC when the daemon was lost in that wait, or 0 */
	char job_status[16]; /* the followed job's status in the last answer ("" unknown) */
};

/* One HTTP answer; body points into cli.in and is valid until the next request. */
struct resp {
	int status;
	int retry_after; /* its Retry-After in seconds, -1 without: a 503 that has one says the
	                  * request was not handled (busy, starting) and may be sent again */
	const char *body;
	size_t len;
};

/* A parsed JSON answer that owns its text and tokens (toks[0] is the root). */
struct doc {
	char *src;
	size_t len;
	struct json_tok *t;
	int n;
};

/* Where a job's output goes: stdout, or a buffer for --json; at most `limit` bytes. */
struct sink {
	unsigned long long limit;
	unsigned long long shown;
	int cut;     /* output went past the limit */
	int collect; /* 1: append to buf (--json); 0: write to stdout */
	int last;    /* last byte shown, -1 before any */
	struct json_buf buf;
	char output_file[4096]; /* where the full log is, for the note when output is cut */
};

/* ------------------------------------------------------------------------ small helpers */

static void
on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* SIGINT sets the flag and interrupts blocking calls (no SA_RESTART); SIGPIPE is ignored. */
static void
install_signals(void)
{
	struct sigaction sa = {.sa_handler = on_sigint};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
}

static double
now_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Record a failure message in c->err and return ST_FAIL. */
static int fail(struct cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int
fail(struct cli *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof c->err, fmt, ap);
	va_end(ap);
	return ST_FAIL;
}

/* Print "tt-device-queue: MSG" on stderr; returns ST_FAIL. */
static int errmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int
errmsg(const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return ST_FAIL;
}

/*
 * Write n bytes to fd 1 (after flushing stdio's stdout so the two never interleave).
 * Returns ST_OK, ST_INTR (SIGINT while blocked), ST_PIPE (reader gone) or ST_FAIL (message
 * printed).
 */
static int
out_write(const void *p, size_t n)
{
	const char *s = p;

	fflush(stdout);
	while (n > 0) {
		ssize_t w = write(STDOUT_FILENO, s, n);

		if (w > 0) {
			s += w;
			n -= (size_t)w;
		} else if (w < 0 && errno == EINTR) {
			if (interrupted)
				return ST_INTR;
		} else if (w < 0 && errno == EPIPE) {
			return ST_PIPE;
		} else {
			return errmsg("writing output: %s", strerror(errno));
		}
	}
	return ST_OK;
}

/* A number in an option or the environment: decimal 0..max, http_parse_uint. 0, or -1. */
static int
arg_uint(const char *s, unsigned long long max, unsigned long long *out)
{
	return http_parse_uint(s, strlen(s), max, out);
}

/* Parse seconds with an optional fraction ("2", "0.5", ".25"), at most ~31 years. */
static int
parse_secs(const char *s, double *out)
{
	char *end;

	if (s[strspn(s, "0123456789.")] != 0 || strpbrk(s, "0123456789") == NULL)
		return -1;
	errno = 0;
	*out = strtod(s, &end);
	return errno != 0 || *end != 0 || *out > 1e9 ? -1 : 0;
}

/* Format seconds for people: 0.52s, 12.3s, 4m05s, 2h03m. */
static const char *
fmt_secs(double s, char *buf, size_t cap)
{
	long t = (long)(s + 0.5);

	if (s < 0)
		s = 0;
	if (s < 10)
		snprintf(buf, cap, "%.2fs", s);
	else if (s < 60)
		snprintf(buf, cap, "%.1fs", s);
	else if (t < 3600)
		snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
	else
		snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
	return buf;
}

/*
 * Bytes of the longest prefix of UTF-8 text s[0..n) of at most `cols` characters. Status
 * counts a line's width in characters (code points): a wide character may take two columns.
 */
static size_t
utf8_prefix(const char *s, size_t n, size_t cols)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (((unsigned char)s[i] & 0xC0) != 0x80 && cols-- == 0)
			break;
	return i;
}

/*
 * Append s to b quoted for bash: unchanged when every byte is in a set that never needs
 * quoting, else in single quotes with each ' written as '\''.
 */
static void
sh_quote(struct json_buf *b, const char *s)
{
	const char *p;
	int plain = *s != 0;

	for (p = s; *p && plain; p++)
		plain = isalnum((unsigned char)*p) || strchr("_-./:,+@%", *p) != NULL;
	if (plain) {
		json_buf_add(b, s, strlen(s));
		return;
	}
	json_buf_add(b, "'", 1);
	for (p = s; *p; p++) {
		if (*p == '\'')
			json_buf_add(b, "'\\''", 4);
		else
			json_buf_add(b, p, 1);
	}
	json_buf_add(b, "'", 1);
}

/* ------------------------------------------------------------------------ JSON answers */

static void
doc_free(struct doc *d)
{
	free(d->src);
	free(d->t);
	memset(d, 0, sizeof *d);
}

/*
 * Copy text[0..len) into d and tokenize it. Returns ST_OK, or ST_FAIL with c->err set (d is
 * then empty). The caller frees d with doc_free().
 */
static int
doc_parse(struct cli *c, const char *text, size_t len, struct doc *d)
{
	unsigned cap = (unsigned)(len / 2 + 16);
	char err[128];

	memset(d, 0, sizeof *d);
	d->src = malloc(len + 1);
	d->t = calloc(cap, sizeof *d->t);
	if (d->src == NULL || d->t == NULL) {
		doc_free(d);
		return fail(c, "out of memory");
	}
	if (len > 0)
		memcpy(d->src, text, len);
	d->src[len] = 0;
	d->len = len;
	d->n = json_parse(d->src, len, d->t, cap, err, sizeof err);
	if (d->n < 1) {
		doc_free(d);
		return fail(c, "the daemon's answer is not JSON: %s", err);
	}
	return ST_OK;
}

/* Index of member `key` of the object at token obj, or -1 (also when obj < 0). */
static int
doc_get(const struct doc *d, int obj, const char *key)
{
	if (obj < 0)
		return -1;
	return json_obj_get(d->src, d->t, obj, key);
}

/* The object member `key` when it is an object or array (of `type`), else -1. */
static int
doc_child(const struct doc *d, int obj, const char *key, int type)
{
	int i = doc_get(d, obj, key);

	return i >= 0 && d->t[i].type == type ? i : -1;
}

/*
 * Decode the string token i into buf as a C string, cut on a UTF-8 boundary to cap-1 bytes;
 * NUL bytes become '?'. Returns buf.
 */
static const char *
tok_cstr(const struct doc *d, int i, char *buf, size_t cap)
{
	size_t n = json_str_decode(d->src, &d->t[i], buf, cap - 1), k;

	if (n > cap - 1)
		n = json_utf8_boundary(buf, cap - 1);
	buf[n] = 0;
	for (k = 0; k < n; k++)
		if (buf[k] == 0)
			buf[k] = '?';
	return buf;
}

/* String member `key` decoded into buf (see tok_cstr); NULL when absent or not a string. */
static const char *
doc_str(const struct doc *d, int obj, const char *key, char *buf, size_t cap)
{
	int i = doc_get(d, obj, key);

	if (i < 0 || d->t[i].type != JSON_STRING)
		return NULL;
	return tok_cstr(d, i, buf, cap);
}

/* Integer member `key`. Returns 0 and sets *out, or -1 when absent or not an integer. */
static int
doc_int(const struct doc *d, int obj, const char *key, long long *out)
{
	int i = doc_get(d, obj, key);

	if (i < 0 || d->t[i].type != JSON_NUMBER)
		return -1;
	return json_tok_int(d->src, &d->t[i], out);
}

/* Number member `key` (integer or not). Returns 0 and sets *out, or -1. */
static int
doc_num(const struct doc *d, int obj, const char *key, double *out)
{
	int i = doc_get(d, obj, key);

	if (i < 0 || d->t[i].type != JSON_NUMBER)
		return -1;
	*out = strtod(d->src + d->t[i].start, NULL); /* a delimiter or NUL ends the number */
	return 0;
}

/* 1 when member `key` is true, else 0. */
static int
doc_true(const struct doc *d, int obj, const char *key)
{
	int i = doc_get(d, obj, key);

	return i >= 0 && d->t[i].type == JSON_TRUE;
}

/* Member `key` of a scalar type as its JSON text (strings decoded) into buf; NULL if absent. */
static const char *
doc_scalar(const struct doc *d, int obj, const char *key, char *buf, size_t cap)
{
	int i = doc_get(d, obj, key);
	size_t n;

	if (i < 0 || d->t[i].type == JSON_OBJECT || d->t[i].type == JSON_ARRAY)
		return NULL;
	if (d->t[i].type == JSON_STRING)
		return tok_cstr(d, i, buf, cap);
	n = d->t[i].end - d->t[i].start;
	if (n >= cap)
		n = cap - 1;
	memcpy(buf, d->src + d->t[i].start, n);
	buf[n] = 0;
	return buf;
}

/*
 * The cards of the job record at obj: its device_ids, or its device_id alone (a daemon that
 * lists no device_ids), as text into cards[0..max) of 24 bytes each. Returns how many.
 */
static int
doc_cards(const struct doc *d, int obj, char (*cards)[24], int max)
{
	int ids = doc_child(d, obj, "device_ids", JSON_ARRAY), n = 0, j, k;

	for (k = 0, j = ids + 1; ids >= 0 && k < (int)d->t[ids].size && n < max;
	     k++, j = (int)d->t[j].next)
		if (d->t[j].type == JSON_STRING)
			tok_cstr(d, j, cards[n++], 24);
	if (n == 0 && max > 0 && doc_scalar(d, obj, "device_id", cards[0], 24) != NULL)
		n = 1;
	return n;
}

/* "0" or "0,1" from cards[0..n) into buf. */
static const char *
cards_list(char (*cards)[24], int n, char *buf, size_t cap)
{
	size_t len = 0;
	int k;

	buf[0] = 0;
	for (k = 0; k < n && len < cap; k++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%s", k ? "," : "", cards[k]);
	return buf;
}

/* Write a built buffer on stdout and free it; out of memory (oom or b->oom) is ST_FAIL. */
static int
print_buf(struct json_buf *b, int oom)
{
	int rc;

	if (oom || b->oom) {
		errmsg("out of memory");
		rc = ST_FAIL;
	} else {
		rc = out_write(b->p, b->len);
	}
	json_buf_free(b);
	return rc;
}

/* Print the answer as the daemon sent it (compact JSON) with a final newline. */
static int
print_doc(const struct doc *d)
{
	struct json_buf b;

	json_buf_init(&b);
	json_buf_add(&b, d->src, d->len);
	json_buf_add(&b, "\n", 1);
	return print_buf(&b, 0);
}

/* ------------------------------------------------------------------------ connection target */

/* Non-empty value of environment variable name, else NULL. */
static const char *
env_nonempty(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/*
 * Settle host and port: --host/--port, else TT_DEVICE_URL (http://HOST[:PORT][/], port 80
 * when absent), else TT_DEVICE_HOST/TT_DEVICE_PORT, else 127.0.0.1:5741. Returns ST_OK, or
 * ST_USAGE after printing why.
 */
static int
resolve_target(struct cli *c)
{
	const char *url = env_nonempty("TT_DEVICE_URL"), *src = "TT_DEVICE_PORT";
	const char *host = env_nonempty("TT_DEVICE_HOST"), *port = env_nonempty("TT_DEVICE_PORT");
	char uh[256], up[8] = "80";
	unsigned long long pn;
	int n = 0, m = 0;

	if (url != NULL) {
		if (sscanf(url, "http://%255[^:/]%n", uh, &n) != 1 ||
		    (url[n] == ':' && sscanf(url + n, ":%7[0-9]%n", up, &m) != 1) ||
		    (url[n + m] != 0 && strcmp(url + n + m, "/") != 0)) {
			errmsg("TT_DEVICE_URL must look like http://HOST:PORT, not '%s'", url);
			return ST_USAGE;
		}
		host = uh;
		port = up;
		src = "TT_DEVICE_URL";
	}
	if (c->host_opt)
		host = c->host_opt;
	if (c->port_opt)
		port = c->port_opt, src = "--port";
	host = host ? host : DEFAULT_HOST;
	port = port ? port : DEFAULT_PORT;
	if (arg_uint(port, 65535, &pn) < 0 || pn == 0) {
		errmsg("%s: '%s' is not a TCP port (1-65535)", src, port);
		return ST_USAGE;
	}
	/* the daemon listens on IPv4 only: no other family, and no name service to ask */
	memset(&c->addr, 0, sizeof c->addr);
	c->addr.sin_family = AF_INET;
	c->addr.sin_port = htons((unsigned short)pn);
	if (inet_pton(AF_INET, strcmp(host, "localhost") ? host : "127.0.0.1",
	              &c->addr.sin_addr) != 1) {
		errmsg("bad host '%s': give an IPv4 address or localhost", host);
		return ST_USAGE;
	}
	snprintf(c->hostport, sizeof c->hostport, "%.200s:%llu", host, pn);
	c->target_ok = 1;
	return ST_OK;
}

/* ------------------------------------------------------------------------ HTTP client */

/*
 * Wait until fd is ready for `events` (POLLHUP/POLLERR count as ready: the next read or write
 * reports them) or a deadline passes. `until` is the request's own deadline; c->deadline the
 * local --wait-timeout. Returns ST_OK, ST_TIMEOUT (local deadline), R_SLOW (request deadline),
 * ST_INTR, or ST_FAIL.
 */
static int
wait_fd(struct cli *c, int fd, short events, double until)
{
	sigset_t block, old;
	struct pollfd pfd;
	struct timespec ts;
	double end, left;
	int n, e, local;

	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	for (;;) {
		local = c->has_deadline && !c->ask_once && c->deadline <= until;
		end = local ? c->deadline : until;
		left = end - now_mono();
		if (left <= 0)
			return local ? ST_TIMEOUT : R_SLOW;
		ts.tv_sec = (time_t)left;
		ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
		pfd.fd = fd;
		pfd.events = events;
		sigprocmask(SIG_BLOCK, &block, &old);
		n = interrupted ? -1 : ppoll(&pfd, 1, &ts, &old);
		e = interrupted ? EINTR : errno;
		sigprocmask(SIG_SETMASK, &old, NULL);
		if (n > 0)
			return ST_OK;
		if (n < 0 && e == EINTR && interrupted)
			return ST_INTR;
		if (n < 0 && e != EINTR)
			return fail(c, "poll: %s", strerror(e));
	}
}

static void
conn_close(struct cli *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

/* Connect within 5 s. Returns ST_OK (c->fd set), or a failure code. */
static int
conn_open(struct cli *c)
{
	int fd, rc, soerr = 0, one = 1;
	socklen_t sl = sizeof soerr;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return fail(c, "socket: %s", strerror(errno));
	if (connect(fd, (const struct sockaddr *)&c->addr, sizeof c->addr) < 0) {
		if (errno != EINPROGRESS) {
			soerr = errno;
			goto refused;
		}
		rc = wait_fd(c, fd, POLLOUT, now_mono() + CONNECT_TIMEOUT_SEC);
		if (rc == R_SLOW)
			rc = fail(c, "cannot connect to %s within %.0f s", c->hostport,
			          CONNECT_TIMEOUT_SEC);
		if (rc != ST_OK) {
			close(fd);
			return rc;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			soerr = errno;
		if (soerr != 0)
			goto refused;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	c->fd = fd;
	c->connected = 1;
	return ST_OK;
refused:
	close(fd);
	return fail(c, "cannot connect to the daemon at %s: %s (is `" PROG " serve` running?)",
	            c->hostport, strerror(soerr));
}

/*
 * Send all of p[0..n) when n > 0, else receive once into c->in. Returns ST_OK, R_CLOSED (the
 * peer is gone, or the stream ended), or another failure code.
 */
static int
sock_io(struct cli *c, const char *p, size_t n, double until)
{
	ssize_t k;
	int rc;

	for (;;) {
		if (n == 0 && json_buf_reserve(&c->in, 65536) < 0)
			return fail(c, "out of memory");
		k = n > 0 ? send(c->fd, p, n, MSG_NOSIGNAL)
		          : recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len, 0);
		if (k > 0 && n == 0) {
			c->in.len += (size_t)k;
			return ST_OK;
		} else if (k > 0) {
			p += k;
			n -= (size_t)k;
			if (n == 0)
				return ST_OK;
		} else if (k == 0 || errno == EPIPE || errno == ECONNRESET) {
			return R_CLOSED;
		} else if (errno == EINTR) {
			if (interrupted)
				return ST_INTR;
		} else if (errno == EAGAIN || errno == EWOULDBLOCK) {
			if ((rc = wait_fd(c, c->fd, n > 0 ? POLLOUT : POLLIN, until)) != ST_OK)
				return rc;
		} else {
			return fail(c, "%s: %s", n > 0 ? "send" : "recv", strerror(errno));
		}
	}
}

/* The Retry-After of a response head in whole seconds (RFC 9110 10.2.3), -1 when absent or
 * an HTTP date (the daemon sends seconds). */
static int
retry_after(const struct http_response *res)
{
	unsigned long long v;
	size_t k;

	for (k = 0; k < res->num_headers; k++)
		if (res->headers[k].name_len == 11 &&
		    strncasecmp(res->headers[k].name, "Retry-After", 11) == 0 &&
		    http_parse_uint(res->headers[k].value, res->headers[k].value_len, 3600, &v) == 0)
			return (int)v;
	return -1;
}

/*
 * Read one answer: its head, then a body of Content-Length bytes (the daemon sends one on
 * every answer). Returns ST_OK with r filled, R_CLOSED when the peer closed before sending
 * anything, or a failure code.
 */
static int
read_response(struct cli *c, double until, struct resp *r)
{
	struct http_response res;
	size_t head;
	int n, rc;

	c->in.len = 0;
	while ((n = http_parse_response(c->in.p, c->in.len, &res)) == 0) {
		rc = sock_io(c, NULL, 0, until);
		if (rc == R_CLOSED && c->in.len > 0)
			return fail(c, "the daemon closed the connection mid-answer");
		if (rc != ST_OK)
			return rc;
	}
	if (n < 0)
		return fail(c, "the answer from %s is malformed: %s", c->hostport, res.error);
	if (res.content_length < 0)
		return fail(c, "the daemon's answer has no Content-Length");
	if (res.content_length > (long long)RESPONSE_MAX)
		return fail(c, "the daemon's answer is too large");
	head = (size_t)n;
	while (c->in.len - head < (unsigned long long)res.content_length) {
		rc = sock_io(c, NULL, 0, until);
		if (rc == R_CLOSED)
			return fail(c, "the daemon closed the connection mid-answer");
		if (rc != ST_OK)
			return rc;
	}
	r->status = res.status;
	r->retry_after = retry_after(&res);
	r->body = c->in.p + head;
	r->len = (size_t)res.content_length;
	if (!res.keep_alive || c->in.len > head + r->len)
		conn_close(c); /* extra bytes were never asked for: do not reuse */
	return ST_OK;
}

/* Build one request (head and body in one buffer, sent with one write). */
static void
build_request(struct json_buf *req, const struct cli *c, const char *method, const char *path,
              const char *body, size_t blen, const char *key)
{
	json_buf_printf(req,
	                "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: " PROG "\r\n"
	                "Accept: application/json\r\n",
	                method, path, c->hostport);
	if (key != NULL)
		json_buf_printf(req, "Idempotency-Key: %s\r\n", key);
	if (body != NULL)
		json_buf_printf(req, "Content-Type: application/json\r\nContent-Length: %zu\r\n",
		                blen);
	json_buf_add(req, "\r\n", 2);
	if (body != NULL)
		json_buf_add(req, body, blen);
}

/*
 * One HTTP exchange on the kept connection: the answer is due within wait + 10 s (and the
 * local deadline still applies). Only a request that may be applied twice without harm (a
 * GET, or a POST carrying an idempotency key) is sent again, once, when a kept connection
 * turns out closed; any other POST goes on a new connection, so that a lost answer is never
 * the daemon's close of an idle one. c->sent is set once bytes begin to go out. Returns ST_OK
 * with r set (any HTTP status), ST_FAIL (c->err says why), ST_USAGE (bad target, printed),
 * ST_TIMEOUT or ST_INTR. On any failure the connection is abandoned.
 */
static int
http_call(struct cli *c, const char *method, const char *path, const char *body, size_t blen,
          int wait, const char *key, struct resp *r)
{
	struct json_buf req;
	int rc, fresh, again = strcmp(method, "GET") == 0 || key != NULL;

	if (!c->target_ok && (rc = resolve_target(c)) != ST_OK)
		return rc;
	if (!again)
		conn_close(c);
	json_buf_init(&req);
	build_request(&req, c, method, path, body, blen, key);
	if (req.oom) {
		json_buf_free(&req);
		return fail(c, "out of memory");
	}
	for (;;) { /* a second pass is on a fresh connection, and the last */
		double until;

		fresh = c->fd < 0;
		if (fresh && (rc = conn_open(c)) != ST_OK)
			break;
		until = now_mono() + wait + REQUEST_SLACK_SEC;
		c->sent = 1;
		rc = sock_io(c, req.p, req.len, until);
		if (rc == ST_OK)
			rc = read_response(c, until, r);
		if (rc == ST_OK)
			break;
		conn_close(c);
		if (rc != R_CLOSED || fresh)
			break;
	}
	json_buf_free(&req);
	if (rc == R_CLOSED)
		rc = fail(c, "the daemon at %s closed the connection without answering",
		          c->hostport);
	if (rc == R_SLOW)
		rc = fail(c, "the daemon at %s did not answer within %d s", c->hostport,
		          wait + REQUEST_SLACK_SEC);
	return rc;
}

/* The "error" text of an answer into buf ("" without one). */
static const char *
answer_error(struct cli *c, const struct resp *r, char *buf, size_t cap)
{
	struct doc d;

	buf[0] = 0;
	if (doc_parse(c, r->body, r->len, &d) == ST_OK) {
		doc_str(&d, 0, "error", buf, cap);
		doc_free(&d);
	}
	return buf;
}

/* Print a refusal: the server's "error" text (or the body) and the HTTP status. */
static void
report_refusal(struct cli *c, const struct resp *r)
{
	char e[1024];

	if (answer_error(c, r, e, sizeof e)[0])
		errmsg("%s (HTTP %d)", e, r->status);
	else
		errmsg("the server at %s answered HTTP %d without an error message (is it the " PROG
		       " daemon?)%s%.*s",
		       c->hostport, r->status, r->len ? ": " : "",
		       (int)(r->len > 200 ? 200 : r->len), r->body);
}

/* TT_DEVICE_RECONNECT_SEC, else RECONNECT_SEC (a bad value is said once, then ignored). */
static double
reconnect_window(void)
{
	static int told;
	const char *e = env_nonempty("TT_DEVICE_RECONNECT_SEC");
	double limit = RECONNECT_SEC;

	if (e != NULL && parse_secs(e, &limit) < 0) {
		limit = RECONNECT_SEC;
		if (!told++)
			errmsg("TT_DEVICE_RECONNECT_SEC must be seconds, not '%s'; using %d", e,
			       RECONNECT_SEC);
	}
	return limit;
}

/* A pause of secs seconds that SIGINT and --wait-timeout end: ST_OK when it ran its course. */
static int
pause_for(struct cli *c, double secs)
{
	int rc = wait_fd(c, -1, 0, now_mono() + secs); /* no descriptor: a pause */

	return rc == R_SLOW ? ST_OK : rc;
}

/*
 * An answer that says "not handled, ask again" (a 503 with Retry-After: the daemon at its
 * connection limit, or still opening its store): pause as it asks (at most 5 s) and return
 * R_AGAIN, so the same request goes again. A wait does so for as long as it waits; any other
 * request for TT_DEVICE_RECONNECT_SEC from the first such answer (*since), then ST_OK: the
 * answer stands as a refusal. ST_OK for every other answer; ST_INTR or ST_TIMEOUT when the
 * pause was cut short.
 */
static int
busy_pause(struct cli *c, const struct resp *r, double *since)
{
	int rc;

	if (r->status != 503 || r->retry_after < 0)
		return ST_OK;
	if (*since == 0)
		*since = now_mono();
	if (!c->waiting && now_mono() - *since > reconnect_window())
		return ST_OK;
	conn_close(c);
	rc = pause_for(c, r->retry_after < 1 ? 1 : r->retry_after > 5 ? 5 : r->retry_after);
	return rc == ST_OK ? R_AGAIN : rc;
}

/*
 * Request path and parse the JSON object answer into d (the caller frees it on ST_OK).
 * Failures are printed here: unreachable daemon, and any non-2xx answer (its "error" text)
 * give ST_FAIL. ST_TIMEOUT and ST_INTR are left to the caller to explain. A failure to reach
 * the daemon sets c->conn_failed (and is left unprinted, in c->err, when `quiet`).
 * A request with an idempotency key (a submission) whose bytes went out but whose answer was
 * lost (c->unknown) is sent again with it, which never applies it twice, until an answer
 * comes or TT_DEVICE_RECONNECT_SEC passes: then ST_UNKNOWN, as for an answer not understood.
 */
static int
api_call(struct cli *c, const char *method, const char *path, const struct json_buf *body,
         int wait, const char *key, int quiet, struct doc *d)
{
	struct resp r = {0};
	double start = now_mono(), busy_since = 0;
	int rc, said = 0;

	memset(d, 0, sizeof *d);
	c->conn_failed = c->unknown = 0;
	if (body != NULL && body->oom)
		return errmsg("out of memory");
	for (;;) {
		c->sent = 0;
		rc = http_call(c, method, path, body ? body->p : NULL, body ? body->len : 0, wait,
		               key, &r);
		c->unknown |= key != NULL && c->sent && rc != ST_OK;
		if (rc == ST_OK && (rc = busy_pause(c, &r, &busy_since)) == R_AGAIN)
			continue;
		if (rc != ST_FAIL || !c->unknown)
			break;
		if (now_mono() - start > reconnect_window())
			return ST_UNKNOWN;
		if (!said++)
			fprintf(stderr,
			        NOTE "no answer to the submission (%s); sending it again with its "
			             "idempotency key %s\n",
			        c->err, key);
		if ((rc = pause_for(c, 0.25)) != ST_OK)
			return rc;
	}
	if (rc == ST_FAIL) {
		c->conn_failed = 1;
		if (!quiet)
			errmsg("%s", c->err);
	}
	if (rc != ST_OK)
		return rc;
	if (r.status == 503 && c->waiting) {
		/* Back but not serving yet (its store not open, or stopping): for a wait that is
		 * a daemon not back yet (daemon_lost), not a refusal of the job. */
		char why[sizeof c->err];

		snprintf(c->err, sizeof c->err, "%s",
		         answer_error(c, &r, why, sizeof why)[0] ? why : "HTTP 503");
		c->conn_failed = 1;
		return ST_FAIL;
	}
	if (r.status < 200 || r.status > 299) {
		report_refusal(c, &r); /* with a key, even after a lost answer: nothing was done */
		return ST_FAIL;
	}
	if (doc_parse(c, r.body, r.len, d) == ST_OK) {
		if (d->t[0].type == JSON_OBJECT)
			return ST_OK;
		doc_free(d);
		fail(c, "the daemon's answer to %s %s is not a JSON object", method, path);
	}
	errmsg("%s", c->err);
	return key != NULL ? ST_UNKNOWN : ST_FAIL; /* an answer not understood: it may be done */
}

static int
api(struct cli *c, const char *method, const char *path, const struct json_buf *body, int wait,
    struct doc *d)
{
	return api_call(c, method, path, body, wait, NULL, c->waiting, d);
}

/*
 * The result rc of a request made in a wait on job id. A daemon lost after this command
 * reached it (c->err says how) is waited for: a restart or an upgrade keeps the job in its
 * database and it goes on when the daemon is back, and failing here would make a pipeline
 * submit it again. So the wait goes on: a pause, then R_AGAIN (ask again), for up to
 * TT_DEVICE_RECONNECT_SEC; then ST_FAIL, said. A daemon never reached is an error as anywhere
 * else. Otherwise rc, ST_TIMEOUT or ST_INTR.
 */
static int
waited(struct cli *c, const char *id, int rc)
{
	double t = now_mono(), limit;

	if (rc == ST_OK && c->gone_since != 0) {
		fprintf(stderr, NOTE "the daemon is back; still waiting for job %s\n", id);
		c->gone_since = 0;
	}
	if (rc != ST_FAIL || !c->conn_failed)
		return rc;
	if (!c->connected) /* no daemon seen at all: nothing is known to wait for */
		return errmsg("%s", c->err);
	limit = reconnect_window();
	if (c->gone_since == 0) {
		c->gone_since = t;
		fprintf(stderr,
		        NOTE "lost the daemon (%s); job %s is in its database: waiting up to %g s "
		             "for it to come back\n",
		        c->err, id, limit);
	} else if (t - c->gone_since > limit) {
		return errmsg("the daemon has not come back in %g s (%s); job %s may still run when "
		              "it does: ask with `" PROG " result %s`",
		              limit, c->err, id, id);
	}
	rc = pause_for(c, 0.25);
	return rc == ST_OK ? R_AGAIN : rc;
}

/*
 * One long-poll GET of path (held up to hold seconds) in a wait on job id, into d on ST_OK:
 * waited()'s answer, R_AGAIN when the daemon was lost and is to be asked again.
 */
static int
long_poll(struct cli *c, const char *id, const char *path, int hold, struct doc *d)
{
	int rc;

	c->waiting = 1;
	rc = api(c, "GET", path, NULL, hold, d);
	c->ask_once = 0; /* before a pause in waited(), which the local deadline ends */
	c->waiting = 0;
	return waited(c, id, rc);
}

/* Note the followed job's status from an answer's "status" member. */
static void
note_status(struct cli *c, const struct doc *d)
{
	if (doc_str(d, 0, "status", c->job_status, sizeof c->job_status) == NULL)
		c->job_status[0] = 0;
}

/* ------------------------------------------------------------------------ job output */

static void
sink_init(struct sink *o, unsigned long long limit, int collect)
{
	*o = (struct sink){.limit = limit, .collect = collect, .last = -1};
	json_buf_init(&o->buf);
}

/* On a terminal, end a partial output line before a note on stderr. */
static void
end_partial_line(const struct sink *o)
{
	if (!o->collect && o->last >= 0 && o->last != '\n' && isatty(STDOUT_FILENO) &&
	    isatty(STDERR_FILENO))
		fputc('\n', stderr);
}

/*
 * Show p[0..n) while within the limit (cut on a UTF-8 boundary); the first time output goes
 * past it, say on stderr that it was cut and where the full log is. Returns ST_OK or a write
 * failure (ST_INTR, ST_PIPE, ST_FAIL).
 */
static int
sink_put(struct sink *o, const char *p, size_t n)
{
	unsigned long long room = o->limit > o->shown ? o->limit - o->shown : 0;
	size_t take = n;
	int rc = ST_OK;

	if (o->cut || n == 0)
		return ST_OK;
	if (n > room)
		take = room ? json_utf8_boundary(p, (size_t)room) : 0;
	if (take > 0) {
		if (o->collect)
			json_buf_add(&o->buf, p, take);
		else
			rc = out_write(p, take);
		o->shown += take;
		o->last = (unsigned char)p[take - 1];
	}
	if (take < n) {
		o->cut = 1;
		if (!o->collect) {
			end_partial_line(o);
			fprintf(stderr,
			        NOTE "output cut after %llu bytes (--output-limit, "
			             "TT_DEVICE_RESULT_BYTES); the full log is %s\n",
			        o->shown,
			        o->output_file[0] ? o->output_file : "the job's output_file");
		}
	}
	return rc;
}

/* A position in a job's log. */
struct logpos {
	unsigned long long off;  /* next byte to ask for */
	unsigned long long size; /* log_size of the last answer */
	int complete;            /* the job is done and off reached the end */
};

/*
 * One GET /logs/ID from lp->off: at most `limit` (> 0) bytes, held up to `hold`
 * seconds for new bytes. The answer's content goes to o; lp advances. Returns ST_OK or a
 * failure.
 */
static int
logs_chunk(struct cli *c, const char *id, struct logpos *lp, unsigned long long limit, int hold,
           struct sink *o)
{
	char path[192], *text = NULL;
	struct doc d;
	long long v;
	int n, rc, i;

	snprintf(path, sizeof path, "/logs/%s?offset=%llu&limit=%llu&wait=%d", id, lp->off, limit,
	         hold);
	if ((rc = api(c, "GET", path, NULL, hold, &d)) != ST_OK)
		return rc;
	note_status(c, &d);
	if (o->output_file[0] == 0)
		doc_str(&d, 0, "output_file", o->output_file, sizeof o->output_file);
	i = doc_get(&d, 0, "content");
	n = i >= 0 && d.t[i].type == JSON_STRING ? (int)(d.t[i].end - d.t[i].start) : -1;
	/* decoding never lengthens a string: its token's length is room enough */
	if (n < 0)
		rc = errmsg("the daemon's /logs answer has no content");
	else if ((text = malloc((size_t)n + 1)) == NULL)
		rc = errmsg("out of memory");
	else
		rc = sink_put(o, text, json_str_decode(d.src, &d.t[i], text, (size_t)n));
	free(text);
	lp->complete = doc_true(&d, 0, "complete");
	if (doc_int(&d, 0, "log_size", &v) == 0 && v >= 0)
		lp->size = (unsigned long long)v;
	if (doc_int(&d, 0, "next_offset", &v) == 0 && v >= 0)
		lp->off = (unsigned long long)v;
	else if (rc == ST_OK)
		rc = errmsg("the daemon's /logs answer has no next_offset");
	doc_free(&d);
	return rc;
}

static void
set_deadline(struct cli *c, double secs)
{
	c->has_deadline = secs >= 0;
	c->deadline = now_mono() + (secs >= 0 ? secs : 0);
}

/*
 * Seconds to hold a wait's next long-poll: MAX_WAIT_SEC, or the time left before the local
 * deadline rounded up (the local deadline itself ends the wait on time); -1 once it passed.
 * The first request (asked 0) is made in any case, holding nothing and free of the local
 * deadline: a `result ID --wait-timeout 0` loop would otherwise never see its job finish.
 */
static int
next_hold(struct cli *c, int asked)
{
	double left = c->has_deadline ? c->deadline - now_mono() : MAX_WAIT_SEC;
	int whole = (int)left;

	c->ask_once = left <= 0 && !asked;
	if (left <= 0)
		return c->ask_once ? 0 : -1;
	return left >= MAX_WAIT_SEC ? MAX_WAIT_SEC : whole + ((double)whole < left);
}

/*
 * Hold GET /result/ID?wait=S until the job is done. The first request does not wait
 * (unless the status is known already), so a wait cut short by --wait-timeout can say
 * whether the job is queued or running. Returns ST_OK or a failure code.
 */
static int
wait_done(struct cli *c, const char *id)
{
	char path[128];
	struct doc d;
	int hold, rc, asked;

	for (asked = 0;; asked = 1) {
		if ((hold = next_hold(c, asked)) < 0)
			return ST_TIMEOUT;
		if (!asked && c->job_status[0] == 0)
			hold = 0;
		snprintf(path, sizeof path, "/result/%s?wait=%d", id, hold);
		if ((rc = long_poll(c, id, path, hold, &d)) == R_AGAIN)
			continue;
		if (rc != ST_OK)
			return rc;
		note_status(c, &d);
		doc_free(&d);
		if (strcmp(c->job_status, "done") == 0)
			return ST_OK;
	}
}

/*
 * Show the log from lp->off on o: everything there is now, at most `left` bytes, and with
 * `follow` keep waiting (/logs long-polls) for more until the job is complete. It stops once
 * o cut the output: no more bytes are needed.
 */
static int
logs_loop(struct cli *c, const char *id, struct logpos *lp, unsigned long long left, int follow,
          struct sink *o)
{
	unsigned long long before, want;
	int hold = 0, rc, asked;

	for (asked = 0;; asked = 1) {
		before = lp->off;
		want = left < LOG_CHUNK ? left : LOG_CHUNK;
		if (follow && (hold = next_hold(c, asked)) < 0)
			return ST_TIMEOUT;
		c->waiting = follow;
		rc = logs_chunk(c, id, lp, want, hold, o);
		c->ask_once = 0;
		c->waiting = 0;
		if (follow && (rc = waited(c, id, rc)) == R_AGAIN)
			continue;
		if (rc != ST_OK)
			return rc;
		left -= lp->off > before ? (lp->off - before < left ? lp->off - before : left) : 0;
		if (lp->complete || left == 0 || o->cut)
			return ST_OK;
		if (!follow && (lp->off >= lp->size || lp->off <= before))
			return ST_OK;
	}
}

/* Exit status for a finished job: its exit_code, 128+s for -s, 1 when it has none. */
static int
job_exit_status(const struct doc *d)
{
	long long code;

	if (doc_int(d, 0, "exit_code", &code) < 0)
		return ST_FAIL;
	if (code >= 0)
		return code > 255 ? 255 : (int)code;
	return code < -127 ? 255 : 128 + (int)-code;
}

/* Signal s as status words it ("SIGHUP", `word`) or the summary ("signal 1 (SIGHUP)"). */
static const char *
signal_text(long long s, int word, char *buf, size_t cap)
{
	const char *abbrev = s > 0 && s < 65 ? sigabbrev_np((int)s) : NULL;

	if (abbrev == NULL)
		snprintf(buf, cap, "signal %lld", s);
	else if (word)
		snprintf(buf, cap, "SIG%s", abbrev);
	else
		snprintf(buf, cap, "signal %lld (SIG%s)", s, abbrev);
	return buf;
}

/*
 * How a job ended, by its record's end_reason (a closed set, the man page's): a word for
 * `status` and a phrase for the summary line. Nothing is read from the words of `error`,
 * which carry the user's own text (a cwd named "kill request"); records of a daemon older
 * than end_reason fall back on the exit code alone.
 */
static const struct ending {
	const char *reason;
	const char *word;   /* status's recent lines */
	const char *phrase; /* the summary line; NULL: told by the exit code or signal */
	int ran;            /* its process ran, so its time is told */
} endings[] = {
    {"exited", NULL, NULL, 1},
    {"signal", NULL, NULL, 1},
    {"timeout", "timeout", "stopped", 1}, /* "; timed out at its Ns limit" follows */
    {"killed", "killed", "stopped by a kill request", 1},
    {"reset", "reset", "interrupted by a reset of its card", 1},
    {"cancelled", "cancelled", "cancelled before it started (kill request)", 0},
    {"service_stop", "interrupted", "interrupted by a service stop", 1},
    {"crash", "crash", "interrupted: the service died while it ran", 1},
    {"card_dead", "card dead",
     "never ran: the card is dead (needs a host reboot or operator recovery)", 0},
    {"card_gone", "card gone", "its card is no longer configured (TT_DEVICE_IDS)", 0},
    {"start_failed", "not started", NULL, 0}, /* its error, as the daemon words it */
    {"hung", "hung", "stopped as hung: no output for its silence timeout", 1},
};

/* The ending named by the record's end_reason, or NULL (none yet, or an older daemon). */
static const struct ending *
ending_of(const struct doc *d, int j)
{
	char name[32];
	size_t k;

	if (doc_str(d, j, "end_reason", name, sizeof name) == NULL)
		return NULL;
	for (k = 0; k < sizeof endings / sizeof endings[0]; k++)
		if (strcmp(name, endings[k].reason) == 0)
			return &endings[k];
	return NULL;
}

/*
 * "exit 3 in 0.52s", "killed by signal 1 (SIGHUP) in 1.00s", "stopped by a kill request
 * (signal 2) after 1.00s", "cancelled before it started (kill request); no exit code, exit
 * status 129".
 */
static void
summary_outcome(struct json_buf *b, const struct doc *d)
{
	const struct ending *e = ending_of(d, 0);
	const char *reason = e ? e->reason : "";
	long long code = -1, sig = 0, v, n;
	double el;
	char t[32], err[1024] = "", mode[16] = "", sg[64];
	int has_code = doc_int(d, 0, "exit_code", &code) == 0, told = e && e->phrase;
	int crash = strcmp(reason, "crash") == 0;

	doc_int(d, 0, "signal", &sig);
	if (!e && has_code && code < -1)
		sig = -code; /* a daemon without end_reason: -s was signal s */
	doc_str(d, 0, "mode", mode, sizeof mode);
	doc_str(d, 0, "error", err, sizeof err);
	if (strcmp(reason, "start_failed") == 0) /* the daemon's error says why */
		json_buf_printf(b, "%s, ", err[0] ? err : "could not start");
	if (told) {
		json_buf_printf(b, "%s", e->phrase);
		if (sig > 0)
			json_buf_printf(b, " (%s)", signal_text(sig, 0, sg, sizeof sg));
		else if (e->ran && has_code && code >= 0)
			json_buf_printf(b, ", exit %lld", code);
	} else if (sig > 0) {
		json_buf_printf(b, "killed by %s", signal_text(sig, 0, sg, sizeof sg));
	} else {
		json_buf_printf(b, has_code && code != -1 ? "exit %lld" : "no exit code", code);
	}
	if (crash || strcmp(reason, "service_stop") == 0)
		json_buf_printf(b, strcmp(mode, "reset") == 0 ? " (the reset runs again at the next "
		                                                 "start)"
		                                               : " (it is not run again)");
	if ((!e || e->ran) && doc_num(d, 0, "elapsed", &el) == 0)
		json_buf_printf(b, " %s %s", told ? "after" : "in", fmt_secs(el, t, sizeof t));
	else if (crash)
		json_buf_printf(b, " after an unknown time");
	if (has_code && code == -1 && sig == 0)
		json_buf_printf(b, told ? "; no exit code, exit status 129" : ", exit status 129");
	if (doc_true(d, 0, "timed_out")) {
		if (doc_int(d, 0, "timeout", &v) == 0)
			json_buf_printf(b, "; timed out at its %llds limit", v);
		else
			json_buf_printf(b, "; timed out");
	}
	/* After a crash the counters are those of the job's start: no count is better than a
	 * wrong one. */
	if (doc_int(d, 0, "repeat", &n) == 0 && n > 1 && doc_int(d, 0, "repeat_completed", &v) == 0 &&
	    !crash)
		json_buf_printf(b, "; %lld of %lld iterations succeeded", v, n);
	if (!e && has_code && code == -1 && err[0])
		json_buf_printf(b, " (%s)", err); /* an older daemon's record: its error as it is */
}

/* The summary line on stderr after a job finished. */
static void
print_summary(const char *id, const struct doc *d, const struct sink *o)
{
	struct json_buf b;
	char dev[256] = "?", text[1024], cards[MAX_JOB_CARDS][24];
	long long v;
	int n;

	json_buf_init(&b);
	n = doc_cards(d, 0, cards, MAX_JOB_CARDS);
	cards_list(cards, n, dev, sizeof dev);
	json_buf_printf(&b, NOTE "job %s on card%s %s: ", id, n > 1 ? "s" : "", dev);
	summary_outcome(&b, d);
	if (doc_true(d, 0, "log_truncated"))
		json_buf_printf(&b,
		                "; the stored log is incomplete: %lld bytes dropped (over "
		                "TT_DEVICE_MAX_LOG_BYTES, or a write failed: its last line says which)",
		                doc_int(d, 0, "dropped_log_bytes", &v) == 0 ? v : 0);
	if (o->cut)
		json_buf_printf(&b, "; output cut after %llu bytes (full log: %s)", o->shown,
		                doc_str(d, 0, "output_file", text, sizeof text) ? text : "?");
	json_buf_add(&b, "\n", 1);
	end_partial_line(o);
	if (!b.oom)
		fwrite(b.p, 1, b.len, stderr);
	json_buf_free(&b);
}

/*
 * Print the answer object d with more members after its own: `more` holds them as
 * `"key":value` joined by commas (taken over and freed).
 */
static int
print_doc_with(const struct doc *d, struct json_buf *more, int oom)
{
	struct json_buf b;

	json_buf_init(&b);
	json_buf_add(&b, d->src, d->t[0].end - 1); /* the object stays open */
	if (d->t[0].size > 0)
		json_buf_add(&b, ",", 1);
	json_buf_add(&b, more->p, more->len);
	json_buf_add(&b, "}\n", 2);
	oom |= more->oom;
	json_buf_free(more);
	return print_buf(&b, oom);
}

/* The job's record members, "output" and "output_truncated" in one object on stdout. */
static int
print_job_json(const struct doc *rec, const struct sink *o)
{
	struct json_buf more;
	struct json_w w;

	json_buf_init(&more);
	json_buf_printf(&more, "\"output\":");
	json_w_init(&w, &more);
	json_w_str(&w, o->buf.p ? o->buf.p : "", o->buf.len);
	json_buf_printf(&more, ",\"output_truncated\":%s", o->cut ? "true" : "false");
	return print_doc_with(rec, &more, o->buf.oom);
}

/*
 * The job is done: fetch its record, print the summary (or the JSON with --json) and return
 * the job's exit status. When the daemon went away in between (it was stopped after the job
 * ended), say that the final status is unknown here and how to ask later: exit 1.
 */
static int
job_finish(struct cli *c, const char *id, const struct sink *o)
{
	char path[64];
	struct doc d;
	int rc;

	c->has_deadline = 0; /* the wait is over; the record is fetched in any case */
	snprintf(path, sizeof path, "/job/%s", id);
	rc = api_call(c, "GET", path, NULL, 0, NULL, 1, &d);
	if (rc == ST_FAIL && c->conn_failed) {
		end_partial_line(o);
		fprintf(stderr,
		        NOTE "job %s completed, but the daemon stopped before its final status "
		             "could be read (%s)\n" NOTE "its final status is unknown here; ask "
		             "later with `" PROG " result %s`\n",
		        id, c->err, id);
		return ST_FAIL;
	}
	if (rc != ST_OK)
		return rc;
	if (c->json)
		rc = print_job_json(&d, o);
	else
		print_summary(id, &d, o);
	if (rc == ST_OK)
		rc = job_exit_status(&d);
	doc_free(&d);
	return rc;
}

/*
 * Explain a wait that ended early (ST_TIMEOUT or ST_INTR) for job id; returns rc. It tells what
 * the client last heard of the job, and only "when last asked": at the local deadline nothing
 * is asked, so a job reported queued may have started since.
 */
static int
wait_ended(const struct cli *c, int rc, const char *id, const struct sink *o)
{
	int queued = strcmp(c->job_status, "queued") == 0;
	int running = strcmp(c->job_status, "running") == 0;

	if (rc != ST_TIMEOUT && rc != ST_INTR)
		return rc;
	if (o != NULL)
		end_partial_line(o);
	if (rc == ST_TIMEOUT)
		fprintf(stderr,
		        NOTE "--wait-timeout passed; job %s %s (`" PROG " kill %s` %s it)\n", id,
		        queued    ? "was queued when last asked and is not cancelled"
		        : running ? "was running when last asked and is not stopped"
		                  : "is not stopped",
		        id, queued ? "cancels or stops" : "stops");
	else
		fprintf(stderr,
		        NOTE "interrupted; job %s was not stopped (`" PROG " kill %s` stops it)\n",
		        id, id);
	return rc;
}

/* ------------------------------------------------------------------------ options */

/* How an option's value is taken (struct optspec's kind). */
enum {
	K_FLAG,    /* int set to 1 */
	K_STR,     /* const char *, a view into argv */
	K_KEY,     /* K_STR that must be an idempotency key */
	K_NUM,     /* long long from min..max (-1 while not given) */
	K_SECS,    /* double seconds, fractions allowed */
	K_LIST,    /* struct strs, repeatable */
	K_ENV,     /* K_LIST of NAME=VALUE */
	K_DEVICE,  /* one card */
	K_DEVICES, /* a submission's cards: N, N,M,... or all */
};

/* The subcommands an option belongs to (struct optspec's and struct subcmd's groups). */
enum {
	G_SUBMIT = 1, /* run, queue, queue-python */
	G_PY = 2,     /* queue-python */
	G_WAIT = 4,   /* result */
	G_LOGS = 8,
	G_DEV = 16, /* status, kill, release */
	G_RESET = 32,
	G_HOLD = 64,
	G_JOB = 128,
	G_GLOBAL = 256, /* before the subcommand */
	G_LEASE = 512,
	G_SHELL = 1024,
};

struct optspec {
	const char *name;
	int kind;
	size_t off;         /* of its field in struct opts */
	long long min, max; /* K_NUM's range */
	const char *what;   /* K_NUM: what it takes, for a usage error */
	unsigned groups;
};

/* The values of a repeatable option: views into argv. */
struct strs {
	const char **v;
	int n;
};

struct opts; /* below */
struct args;

struct subcmd {
	const char *name;
	int (*fn)(struct cli *, struct args *, struct opts *);
	unsigned groups;      /* of the options it takes */
	int words;            /* options end at the first operand: the rest is the command */
	const char *synopsis; /* after "tt-device-queue "; the man page describes the rest */
};

/* A subcommand's argv being parsed; operands are collected into pos (views into argv). */
struct args {
	const struct subcmd *cmd;
	int argc;
	char **argv;
	int i;
	char **pos;
	int npos;
	int dashdash; /* the options ended at "--" */
};

/* Every subcommand option; which are accepted depends on the subcommand's groups. */
struct opts {
	unsigned long long device; /* the card; a job of several cards: its lowest */
	int device_set;
	/* a submission's --device N,M,... (ascending, ndevices >= 2) or --device all (resolved
	 * from /status by submission_cards); ndevices 0 for one card */
	unsigned long long devices[MAX_JOB_CARDS];
	int ndevices;
	int device_all;
	const char *cwd;   /* NULL: the client's directory */
	char cwd_sent[PATH_MAX * 2]; /* the "cwd" a submission sends (cwd_value) */
	long long timeout; /* -1: not sent */
	long long silence_timeout; /* -1: not sent (the daemon's default) */
	long long repeat;  /* -1: not sent */
	struct strs env;   /* "NAME=VALUE" */
	double wait_timeout; /* < 0: none */
	long long output_limit; /* -1: TT_DEVICE_RESULT_BYTES or its default */
	const char *python;
	struct strs pyargs;
	int wait;
	long long offset;
	long long limit; /* -1: all there is */
	int follow;
	const char *reason; /* hold --reason */
	const char *key;    /* --key: a submission's idempotency key */
	int force;          /* reset --force */
	const char *description, *owner; /* lease --description, --owner */
	long long heartbeat; /* lease --heartbeat; -1: not sent */
	const char *host, *port, *client_id; /* the global options */
	struct json_buf cmd; /* the job's command, NUL-terminated once built */
};

#define OFF(f) offsetof(struct opts, f)
#define SECS_MAX 1000000000

static const struct optspec options[] = {
    {"--device", K_DEVICES, 0, 0, 0, NULL, G_SUBMIT | G_LEASE | G_SHELL},
    {"--device", K_DEVICE, 0, 0, 0, NULL, G_DEV | G_RESET | G_HOLD},
    {"--cwd", K_STR, OFF(cwd), 0, 0, NULL, G_SUBMIT},
    {"--timeout", K_NUM, OFF(timeout), 0, SECS_MAX, "whole seconds (0: the daemon's default)",
     G_SUBMIT | G_LEASE | G_SHELL},
    {"--silence-timeout", K_NUM, OFF(silence_timeout), 0, SECS_MAX, "whole seconds (0: off)",
     G_SUBMIT},
    {"--repeat", K_NUM, OFF(repeat), 1, SECS_MAX, "a count of at least 1", G_SUBMIT},
    {"--env", K_ENV, OFF(env), 0, 0, NULL, G_SUBMIT},
    {"--key", K_KEY, OFF(key), 0, 0, NULL, G_SUBMIT | G_JOB | G_LEASE},
    {"--wait-timeout", K_SECS, OFF(wait_timeout), 0, 0, NULL,
     G_SUBMIT | G_WAIT | G_LOGS | G_LEASE},
    {"--output-limit", K_NUM, OFF(output_limit), 0, LLONG_MAX, "a byte count",
     G_SUBMIT | G_WAIT},
    {"--python", K_STR, OFF(python), 0, 0, NULL, G_PY},
    {"--python-arg", K_LIST, OFF(pyargs), 0, 0, NULL, G_PY},
    {"--wait", K_FLAG, OFF(wait), 0, 0, NULL, G_PY | G_LEASE},
    {"--description", K_STR, OFF(description), 0, 0, NULL, G_LEASE | G_SHELL},
    {"--heartbeat", K_NUM, OFF(heartbeat), 0, 3600, "whole seconds from 0 (none) to 3600",
     G_LEASE | G_SHELL},
    {"--owner", K_STR, OFF(owner), 0, 0, NULL, G_LEASE | G_JOB},
    {"--offset", K_NUM, OFF(offset), 0, LLONG_MAX, "a byte offset", G_LOGS},
    {"--limit", K_NUM, OFF(limit), 1, LLONG_MAX, "a byte count of at least 1", G_LOGS},
    {"--follow", K_FLAG, OFF(follow), 0, 0, NULL, G_LOGS},
    {"--force", K_FLAG, OFF(force), 0, 0, NULL, G_RESET},
    {"--reason", K_STR, OFF(reason), 0, 0, NULL, G_HOLD},
    {"--host", K_STR, OFF(host), 0, 0, NULL, G_GLOBAL},
    {"--port", K_STR, OFF(port), 0, 0, NULL, G_GLOBAL},
    {"--client-id", K_STR, OFF(client_id), 0, 0, NULL, G_GLOBAL},
};

#define GLOBAL_SYNOPSIS "[--host HOST] [--port PORT] [--client-id ID] [--json] SUBCOMMAND [ARGS]"

/* The global level: its options end at the subcommand. */
static const struct subcmd global_cmd = {"", NULL, G_GLOBAL, 1, GLOBAL_SYNOPSIS};

/* Print a usage error for cmd (global_cmd: the global level) on stderr; returns ST_USAGE. */
static int usage_err(const struct subcmd *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
usage_err(const struct subcmd *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG "%s%s: ", cmd->name[0] ? " " : "", cmd->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nusage: " PROG " %s\n", cmd->synopsis);
	return ST_USAGE;
}

static int print_help(const struct subcmd *cmd);

static int
cmp_ull(const void *x, const void *y)
{
	unsigned long long a = *(const unsigned long long *)x, b = *(const unsigned long long *)y;

	return (a > b) - (a < b);
}

/*
 * --device: one card (N); for a submission (`multi`) also several (N,M,...: a job that opens
 * them all, queued on each of their queues) or all (every configured card). Given twice, the
 * two must name the same cards: the last of two would win silently, a job on cards its code
 * does not open.
 */
static int
opt_devices(struct args *a, struct opts *o, const char *val, int multi)
{
	unsigned long long v[MAX_JOB_CARDS];
	int all = strcmp(val, "all") == 0, n = 0, k;
	char item[32];
	const char *p;
	size_t len;

	if (!multi && (all || strchr(val, ',') != NULL))
		return usage_err(a->cmd, "--device takes a card number, not '%s'", val);
	for (p = val; !all && (n == 0 || p[-1] == ','); p += len + 1, n++) { /* items to a comma */
		len = strcspn(p, ",");
		snprintf(item, sizeof item, "%.*s", (int)len, p);
		if (n == MAX_JOB_CARDS || arg_uint(item, 999999, &v[n]) < 0)
			return usage_err(a->cmd, "--device takes a card number%s, not '%s'",
			                 multi ? ", a list such as 0,1, or all" : "", val);
		for (k = 0; k < n; k++)
			if (v[k] == v[n])
				return usage_err(a->cmd, "--device names card %llu twice", v[n]);
	}
	qsort(v, (size_t)n, sizeof v[0], cmp_ull);
	if (o->device_set && (all != o->device_all || n != (o->ndevices ? o->ndevices : !all) ||
	                      memcmp(v, o->ndevices ? o->devices : &o->device,
	                             sizeof v[0] * (size_t)n) != 0))
		return usage_err(a->cmd, "--device given twice with different cards; give the "
		                         "cards your code opens");
	o->device = all ? 0 : v[0];
	o->device_set = 1;
	o->device_all = all;
	o->ndevices = n > 1 ? n : 0;
	memcpy(o->devices, v, sizeof v[0] * (size_t)n);
	return ST_OK;
}

/* Apply option text s ("--name" or "--name=value", the value maybe the next word). */
static int
opt_apply(struct args *a, struct opts *o, const char *s)
{
	const char *eq = strchr(s, '='), *val;
	size_t n = eq ? (size_t)(eq - s) : strlen(s), k;
	const struct optspec *sp = NULL;
	unsigned long long v;
	struct strs *l;
	char *f;

	for (k = 0; k < sizeof options / sizeof options[0] && sp == NULL; k++)
		if ((options[k].groups & a->cmd->groups) && strlen(options[k].name) == n &&
		    strncmp(options[k].name, s, n) == 0)
			sp = &options[k];
	if (sp == NULL)
		return usage_err(a->cmd, "unknown option '%s'%s", s,
		                 a->cmd->fn ? "" : " (global options go before the subcommand)");
	f = (char *)o + sp->off;
	if (sp->kind == K_FLAG) {
		if (eq != NULL)
			return usage_err(a->cmd, "option %s takes no value", sp->name);
		*(int *)f = 1;
		return ST_OK;
	}
	if (eq == NULL && a->i == a->argc)
		return usage_err(a->cmd, "option %s needs a value", sp->name);
	val = eq ? eq + 1 : a->argv[a->i++];
	switch (sp->kind) {
	case K_KEY: /* as the daemon takes them: RFC 3986's unreserved set */
		if (!*val || strlen(val) > 128 || val[strspn(val, KEY_CHARS)] != 0)
			return usage_err(a->cmd, "--key takes 1 to 128 letters, digits, '-', '.', "
			                         "'_' or '~', not '%s'", val);
		/* fallthrough */
	case K_STR:
		*(const char **)f = val;
		break;
	case K_NUM:
		if (arg_uint(val, (unsigned long long)sp->max, &v) < 0 || (long long)v < sp->min)
			return usage_err(a->cmd, "%s takes %s, not '%s'", sp->name, sp->what, val);
		*(long long *)f = (long long)v;
		break;
	case K_SECS:
		if (parse_secs(val, (double *)f) < 0)
			return usage_err(a->cmd, "%s takes seconds (fractions allowed), not '%s'",
			                 sp->name, val);
		break;
	case K_ENV:
		if (val[0] == '=' || strchr(val, '=') == NULL)
			return usage_err(a->cmd, "--env takes NAME=VALUE with a non-empty NAME, "
			                         "not '%s'", val);
		/* fallthrough */
	case K_LIST:
		l = (struct strs *)f;
		l->v[l->n++] = val;
		break;
	default:
		return opt_devices(a, o, val, sp->kind == K_DEVICES);
	}
	return ST_OK;
}

/*
 * Parse the subcommand's options into o. Operands are collected in a->pos, and everything
 * after "--" too unless the subcommand takes `words` (a command), whose options end at its
 * first operand or "--" (a->i left there). "-" is an operand. Returns ST_OK, ST_USAGE, or
 * R_HELP (help shown).
 */
static int
parse_opts(struct cli *c, struct args *a, struct opts *o)
{
	const char *s;
	int rc;

	while (a->i < a->argc) {
		s = a->argv[a->i];
		if (strcmp(s, "--") == 0) {
			a->i++;
			a->dashdash = 1;
			while (!a->cmd->words && a->i < a->argc)
				a->pos[a->npos++] = a->argv[a->i++];
			return ST_OK;
		}
		if (s[0] != '-' || s[1] == 0) {
			if (a->cmd->words)
				return ST_OK;
			a->pos[a->npos++] = a->argv[a->i++];
			continue;
		}
		a->i++;
		if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0)
			return print_help(a->cmd);
		if (strcmp(s, "--json") == 0)
			c->json = 1;
		else if ((rc = opt_apply(a, o, s)) != ST_OK)
			return rc;
	}
	return ST_OK;
}

static int
opts_init(struct opts *o, int argc)
{
	*o = (struct opts){.timeout = -1,
	                   .silence_timeout = -1,
	                   .heartbeat = -1,
	                   .repeat = -1,
	                   .wait_timeout = -1,
	                   .output_limit = -1,
	                   .limit = -1,
	                   .python = "python3"};
	json_buf_init(&o->cmd);
	o->env.v = calloc((size_t)argc + 1, sizeof *o->env.v);
	o->pyargs.v = calloc((size_t)argc + 1, sizeof *o->pyargs.v);
	return o->env.v && o->pyargs.v ? 0 : -1;
}

/* --output-limit, else TT_DEVICE_RESULT_BYTES, else 1 MiB. Returns ST_OK or ST_USAGE. */
static int
output_limit(const struct args *a, const struct opts *o, unsigned long long *out)
{
	const char *e = env_nonempty("TT_DEVICE_RESULT_BYTES");

	*out = o->output_limit >= 0 ? (unsigned long long)o->output_limit : DEFAULT_RESULT_BYTES;
	if (o->output_limit < 0 && e != NULL && arg_uint(e, ULLONG_MAX, out) < 0)
		return usage_err(a->cmd, "TT_DEVICE_RESULT_BYTES must be a byte count, not '%s'",
		                 e);
	return ST_OK;
}

/* The single job ID operand, checked (32 hex digits) and lowercased into id[33]. */
static int
one_job_id(const struct args *a, char *id)
{
	const char *s;
	int k;

	if (a->npos == 0)
		return usage_err(a->cmd, "missing job ID");
	if (a->npos > 1)
		return usage_err(a->cmd, "unexpected argument '%s'", a->pos[1]);
	s = a->pos[0];
	for (k = 0; k < 32 && isxdigit((unsigned char)s[k]); k++)
		id[k] = (char)tolower((unsigned char)s[k]);
	if (k != 32 || s[32] != 0)
		return usage_err(a->cmd, "'%s' is not a job ID (32 hex digits)", s);
	id[32] = 0;
	return ST_OK;
}

/* ------------------------------------------------------------------------ submission */

/*
 * Replace each C0 or C1 control character (NUL too) and DEL in the UTF-8 text s[0..n) by one
 * '?', in place; returns the new length. The daemon refuses such a client_id and
 * `status` must not pass one from an older record to the terminal.
 */
static size_t
scrub_controls(char *s, size_t n)
{
	size_t i = 0, o = 0, k;

	while (i < n) {
		k = json_control_len(s + i, n - i);
		s[o++] = k ? '?' : s[i];
		i += k ? k : 1;
	}
	return o;
}

/*
 * Set c->client_id to s cut to CLIENT_ID_CHARS characters. The id travels as a JSON string
 * whose writer turns invalid bytes into U+FFFD, and the daemon counts the characters of what
 * it decodes, so the id is first put through that writer and read back (valid UTF-8 then),
 * control characters become '?' and it is cut at a character boundary. Never an error: the
 * id is diagnostic only.
 */
static void
set_client_id(struct cli *c, const char *s)
{
	struct json_buf b;
	struct json_w w;
	struct json_tok t[2];
	char err[64], *text = NULL;
	size_t n = 0, k;

	json_buf_init(&b);
	json_w_init(&w, &b);
	json_w_str(&w, s, strlen(s));
	/* out of memory: the id stays empty, and client_identity() uses the default */
	if (!b.oom && json_parse(b.p, b.len, t, 2, err, sizeof err) == 1 &&
	    (text = malloc(b.len)) != NULL)
		n = scrub_controls(text, json_str_decode(b.p, &t[0], text, b.len));
	k = utf8_prefix(text ? text : "", n, CLIENT_ID_CHARS);
	memcpy(c->client_id, text ? text : "", k); /* at most 128 characters of 4 bytes */
	c->client_id[k] = 0;
	free(text);
	json_buf_free(&b);
}

/* The identity the job records: --client-id, else TT_QUEUE_CLIENT_ID, else cli-UID. */
static void
client_identity(struct cli *c)
{
	const char *e = env_nonempty("TT_QUEUE_CLIENT_ID");

	if (c->client_id_opt != NULL && c->client_id_opt[0])
		set_client_id(c, c->client_id_opt);
	else if (e != NULL)
		set_client_id(c, e);
	if (c->client_id[0] == 0)
		snprintf(c->client_id, sizeof c->client_id, "cli-%u", (unsigned)getuid());
}

/*
 * The "cwd" to send into out: --cwd when absolute or '' (the daemon's), else the current
 * directory (with a relative --cwd under it). ST_OK, or ST_USAGE (said why) when the current
 * directory cannot be told (removed, or longer than PATH_MAX): running the job in the
 * daemon's directory instead would run it where nobody asked.
 */
static int
cwd_value(const struct args *a, const char *opt, char *out, size_t cap)
{
	char here[PATH_MAX];

	if (opt != NULL && (opt[0] == '/' || opt[0] == 0)) {
		snprintf(out, cap, "%s", opt);
		return ST_OK;
	}
	if (getcwd(here, sizeof here) == NULL)
		return usage_err(a->cmd, "cannot tell the current directory (%s): the job would "
		                         "run where it was not asked to; cd to a directory, or give "
		                         "--cwd DIR",
		                 strerror(errno));
	if (opt == NULL)
		snprintf(out, cap, "%s", here);
	else
		snprintf(out, cap, "%s/%s", strcmp(here, "/") ? here : "", opt);
	return ST_OK;
}

/* Member key with the string value val; nothing when val is NULL. */
static void
put_str(struct json_w *w, const char *key, const char *val)
{
	if (val == NULL)
		return;
	json_w_key(w, key);
	json_w_cstr(w, val);
}

/* Member key with the number v; nothing when v < 0 (not given). */
static void
put_num(struct json_w *w, const char *key, long long v)
{
	if (v < 0)
		return;
	json_w_key(w, key);
	json_w_int(w, v);
}

/* "env": the --env pairs as an object; a later NAME overrides an earlier one. */
static void
write_env(struct json_w *w, const struct opts *o)
{
	int k, j;
	size_t n;
	char *name;

	json_w_key(w, "env");
	json_w_obj(w);
	for (k = 0; k < o->env.n; k++) {
		n = (size_t)(strchr(o->env.v[k], '=') - o->env.v[k]);
		for (j = k + 1; j < o->env.n; j++)
			if (strncmp(o->env.v[j], o->env.v[k], n + 1) == 0)
				break;
		if (j < o->env.n)
			continue;
		if ((name = strndup(o->env.v[k], n)) == NULL) {
			w->b->oom = 1;
			return;
		}
		put_str(w, name, o->env.v[k] + n + 1);
		free(name);
	}
	json_w_obj_end(w);
}

/*
 * 0 when s is well-formed UTF-8; else says which byte is not and returns -1. A submission is
 * JSON text, which carries only UTF-8 (RFC 8259 section 8.1): sending U+FFFD in place of
 * such bytes would run a command, or use a directory, other than the one given.
 */
static int
utf8_or_refuse(const char *what, const char *s)
{
	size_t n = strlen(s), v = json_utf8_valid(s, n);

	if (v == n)
		return 0;
	errmsg("%s is not valid UTF-8 (byte %zu is 0x%02X); a job's command, directory and "
	       "environment must be UTF-8 text",
	       what, v + 1, (unsigned)(unsigned char)s[v]);
	return -1;
}

/*
 * The POST /queue body for cmd, or the POST /lease body (cmd NULL): ST_OK, or ST_USAGE (said
 * why) when it cannot be sent.
 */
static int
submit_body(struct cli *c, const struct opts *o, const char *cmd, struct json_buf *b)
{
	struct json_w w;
	char dev[24];
	int k;

	if ((cmd && utf8_or_refuse("the command", cmd) < 0) ||
	    (o->description && utf8_or_refuse("--description", o->description) < 0) ||
	    utf8_or_refuse("the working directory", o->cwd_sent) < 0)
		return ST_USAGE;
	for (k = 0; k < o->env.n; k++)
		if (utf8_or_refuse("--env", o->env.v[k]) < 0)
			return ST_USAGE;
	if (c->client_id[0] == 0)
		client_identity(c);
	json_w_init(&w, b);
	json_w_obj(&w);
	put_str(&w, "cmd", cmd);
	put_str(&w, "description", o->description);
	put_str(&w, "cwd", cmd ? o->cwd_sent : NULL);
	if (o->ndevices > 1) {
		json_w_key(&w, "device_ids");
		json_w_arr(&w);
		for (k = 0; k < o->ndevices; k++) {
			snprintf(dev, sizeof dev, "%llu", o->devices[k]);
			json_w_cstr(&w, dev);
		}
		json_w_arr_end(&w);
	} else {
		snprintf(dev, sizeof dev, "%llu", o->device);
		put_str(&w, "device_id", dev);
	}
	put_num(&w, "timeout", o->timeout);
	put_num(&w, "silence_timeout", o->silence_timeout);
	put_num(&w, "heartbeat_sec", o->heartbeat);
	put_str(&w, "owner", o->owner);
	put_num(&w, "repeat", o->repeat);
	if (o->env.n > 0)
		write_env(&w, o);
	put_str(&w, "client_id", c->client_id);
	put_str(&w, "mode", cmd ? "run" : NULL);
	json_w_obj_end(&w);
	return ST_OK;
}

/* How the fate of a submission is told when it stays unknown or is cut short. */
static void
say_unknown(const struct cli *c, const char *key, int rc)
{
	if (rc == ST_UNKNOWN)
		errmsg("the daemon at %s did not answer the submission within %g s (%s); whether "
		       "the job was queued is unknown",
		       c->hostport, reconnect_window(), c->err);
	else
		fprintf(stderr, NOTE "interrupted before the daemon answered; the job may have "
		                     "been queued\n");
	fprintf(stderr,
	        NOTE "its idempotency key is %s: `" PROG " job --key %s` tells whether it was; "
	             "submitting again with --key %s queues it at most once\n",
	        key, key, key);
}

/*
 * POST /queue for cmd (NULL: POST /lease) with an idempotency key (o->key, else one made up
 * here), sent again while its answer is lost (api_call). On ST_OK id[33] holds the job id and
 * *d the answer (caller frees). ST_FAIL: nothing was queued (refused, or unreachable before
 * anything was sent), said here. ST_UNKNOWN: the window passed with its fate unknown; ST_INTR:
 * interrupted; both said here with the key that tells.
 */
static int
submit(struct cli *c, const struct opts *o, const char *cmd, char *id, struct doc *d)
{
	struct json_buf b;
	unsigned char r[16];
	char key[64] = "cli-";
	size_t k;
	int rc;

	memset(d, 0, sizeof *d);
	if (o->key) /* else one of the client's own: "cli-" and 128 random bits in hex */
		snprintf(key, sizeof key, "%s", o->key);
	else if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
		return errmsg("cannot make an idempotency key: %s", strerror(errno));
	else
		for (k = 0; k < sizeof r; k++)
			snprintf(key + 4 + 2 * k, sizeof key - 4 - 2 * k, "%02x", r[k]);
	json_buf_init(&b);
	if ((rc = submit_body(c, o, cmd, &b)) == ST_OK)
		rc = api_call(c, "POST", cmd ? "/queue" : "/lease", &b, 0, key, 0, d);
	json_buf_free(&b);
	if (rc == ST_OK && (doc_str(d, 0, "job_id", id, 33) == NULL || strlen(id) != 32)) {
		errmsg("the daemon's answer to the submission has no job_id");
		doc_free(d);
		rc = ST_UNKNOWN;
	}
	if ((rc == ST_INTR && (c->unknown || c->sent)) || rc == ST_UNKNOWN)
		say_unknown(c, key, rc);
	return rc;
}

/*
 * --device all: every card the daemon lists in /status (one card: that one alone), so that a
 * job that opens all of them waits for all of them. ST_OK, or the failure of asking.
 */
static int
submission_cards(struct cli *c, struct opts *o)
{
	struct doc d;
	int rc, devs, j, k;
	unsigned long long v;
	char id[24];

	if (!o->device_all)
		return ST_OK;
	if ((rc = api(c, "GET", "/status", NULL, 0, &d)) != ST_OK)
		return rc;
	devs = doc_child(&d, 0, "devices", JSON_ARRAY);
	o->ndevices = 0;
	for (k = 0, j = devs + 1; devs >= 0 && k < (int)d.t[devs].size && o->ndevices < MAX_JOB_CARDS;
	     k++, j = (int)d.t[j].next)
		if (doc_scalar(&d, j, "device_id", id, sizeof id) && arg_uint(id, 999999, &v) == 0)
			o->devices[o->ndevices++] = v;
	doc_free(&d);
	if (o->ndevices == 0)
		return fail(c, "--device all: the daemon's /status lists no cards");
	qsort(o->devices, (size_t)o->ndevices, sizeof o->devices[0], cmp_ull);
	o->device = o->devices[0];
	o->device_all = 0;
	if (o->ndevices == 1)
		o->ndevices = 0;
	return ST_OK;
}

/*
 * The cards of job id into cards[0..MAX_JOB_CARDS) while its status is `status`, or any but
 * done when that is NULL: their count; 0 otherwise, or when the daemon cannot be asked (a
 * request that follows then says why).
 */
static int
job_cards(struct cli *c, const char *id, const char *status, char (*cards)[24])
{
	char path[64], st[16];
	struct resp r = {0};
	struct doc d;
	int n = 0;

	snprintf(path, sizeof path, "/job/%s", id);
	if (http_call(c, "GET", path, NULL, 0, 0, NULL, &r) != ST_OK || r.status != 200 ||
	    doc_parse(c, r.body, r.len, &d) != ST_OK)
		return 0;
	if (doc_str(&d, 0, "status", st, sizeof st) &&
	    (status ? strcmp(st, status) == 0 : strcmp(st, "done") != 0))
		n = doc_cards(&d, 0, cards, MAX_JOB_CARDS);
	doc_free(&d);
	return n;
}

/*
 * Waiting inside a job for a job on a card that job holds would hang until the job's
 * timeout: each card runs one job at a time, in order, and the one waiting holds it. `target`
 * is the job waited for, or NULL for the submission of o about to be queued. ST_USAGE
 * (explained) when one of its cards is held by this process's job, else ST_OK (also when the
 * daemon cannot be asked: the wait's own requests then say why). Not called for
 * --wait-timeout 0, which asks once and never waits.
 */
static int
refuse_own_card(struct cli *c, const struct args *a, const struct opts *o, const char *target)
{
	const char *job = env_nonempty("TT_DEVICE_JOB_ID");
	char cards[MAX_JOB_CARDS][24], held[MAX_JOB_CARDS][24], list[256];
	int n, nh, i, k;

	/* inside a job the daemon runs, its TT_DEVICE_JOB_ID holds its cards while it runs */
	if (job == NULL || strlen(job) != 32 || strspn(job, "0123456789abcdef") != 32)
		return ST_OK;
	if (target != NULL)
		n = job_cards(c, target, NULL, cards);
	else
		for (n = 0; n < (o->ndevices ? o->ndevices : 1); n++)
			snprintf(cards[n], sizeof cards[n], "%llu",
			         o->ndevices ? o->devices[n] : o->device);
	nh = n > 0 ? job_cards(c, job, "running", held) : 0;
	for (i = 0, k = nh; i < n && k == nh; i++)
		for (k = 0; k < nh && strcmp(cards[i], held[k]) != 0; k++)
			;
	if (k == nh)
		return ST_OK;
	fprintf(stderr,
	        PROG " %s: this runs inside job %s, which holds card%s %s until it ends; %s%s on "
	        "card %s cannot %s before that, so waiting for it would hang until the job's "
	        "timeout.\n",
	        a->cmd->name, job, nh > 1 ? "s" : "", cards_list(held, nh, list, sizeof list),
	        target ? "job " : "a job queued", target ? target : "", held[k],
	        target != NULL && strcmp(target, job) == 0 ? "end" : "start");
	if (target == NULL)
		fprintf(stderr, "Use another card (--device N), or submit without waiting (`" PROG
		                " queue`).\n");
	else
		fprintf(stderr, "Ask once this job has ended, or look without waiting (`" PROG
		                " job %s`).\n",
		        target);
	return ST_USAGE;
}

/*
 * `queue` output: job_id=... and the other key=value lines, or the answer as JSON; for
 * queue-python the script's path too (script_file, after job_id, as the earlier client).
 */
static int
print_queued(const struct cli *c, const struct doc *d, const char *script)
{
	static const char *const keys[] = {
	    "job_id",  "device_id", "position",   "estimated_wait_sec", "estimated_run_sec",
	    "timeout", "repeat",    "output_file"};
	struct json_buf more;
	struct json_w w;
	char v[4096], cards[MAX_JOB_CARDS][24];
	size_t k;
	int n;

	if (c->json && script == NULL)
		return print_doc(d);
	if (c->json) {
		json_buf_init(&more);
		json_buf_printf(&more, "\"script_file\":");
		json_w_init(&w, &more);
		json_w_cstr(&w, script);
		return print_doc_with(d, &more, 0);
	}
	for (k = 0; k < sizeof keys / sizeof keys[0]; k++) {
		if (doc_scalar(d, 0, keys[k], v, sizeof v) != NULL)
			printf("%s=%s\n", keys[k], v);
		if (k == 0 && script != NULL)
			printf("script_file=%s\n", script);
		if (k == 1 && (n = doc_cards(d, 0, cards, MAX_JOB_CARDS)) > 0) /* after device_id */
			printf("device_ids=%s\n", cards_list(cards, n, v, sizeof v));
	}
	return ST_OK;
}

/* Say on stderr that `what` (job, lease) id waits, from its submission's answer d, if it does. */
static void
say_queued(const char *what, const char *id, const struct doc *d)
{
	long long pos = 0;
	double est = 0;
	char dev[256] = "?", t[32], cards[MAX_JOB_CARDS][24];
	int n;

	if (doc_int(d, 0, "position", &pos) < 0 || pos <= 0)
		return;
	n = doc_cards(d, 0, cards, MAX_JOB_CARDS);
	cards_list(cards, n, dev, sizeof dev);
	doc_num(d, 0, "estimated_wait_sec", &est);
	fprintf(stderr, NOTE "%s %s is queued on card%s %s behind %lld job%s (~%s)\n", what, id,
	        n > 1 ? "s" : "", dev, pos, pos == 1 ? "" : "s", fmt_secs(est, t, sizeof t));
}

/* run and queue-python --wait: note a queue ahead, follow the job, exit with its status. */
static int
follow_job(struct cli *c, const struct opts *o, const char *id, const struct doc *d,
           unsigned long long limit)
{
	struct logpos lp = {0, 0, 0};
	struct sink out;
	int rc;

	if (!c->json)
		say_queued("job", id, d);
	note_status(c, d);
	sink_init(&out, limit, c->json);
	set_deadline(c, o->wait_timeout);
	rc = logs_loop(c, id, &lp, ULLONG_MAX, 1, &out);
	if (rc == ST_OK && out.cut) /* the rest of the output is not shown: wait on /result */
		rc = wait_done(c, id);
	rc = rc == ST_OK ? job_finish(c, id, &out) : wait_ended(c, rc, id, &out);
	json_buf_free(&out.buf);
	return rc;
}

/*
 * Submit o->cmd (built) from the options, then print the queue's answer or, with `follow`,
 * follow the job. A script stored from stdin (`stored`) goes only when its job is known not
 * to exist: a submission interrupted or unanswered may have queued it, and it would fail
 * without it.
 */
static int
submit_cmd(struct cli *c, struct args *a, struct opts *o, int follow, const char *script,
           int stored)
{
	unsigned long long limit = 0;
	struct doc d;
	char id[33];
	int rc;

	json_buf_add(&o->cmd, "", 1); /* the command is built: NUL-terminated */
	if ((rc = o->cmd.oom ? errmsg("out of memory") : ST_OK) != ST_OK ||
	    (rc = cwd_value(a, o->cwd, o->cwd_sent, sizeof o->cwd_sent)) != ST_OK ||
	    (rc = submission_cards(c, o)) != ST_OK ||
	    (follow && ((rc = output_limit(a, o, &limit)) != ST_OK ||
	                (o->wait_timeout != 0 && (rc = refuse_own_card(c, a, o, NULL)) != ST_OK))) ||
	    (rc = submit(c, o, o->cmd.p, id, &d)) != ST_OK) {
		if (stored && rc != ST_INTR && rc != ST_UNKNOWN)
			unlink(script);
		return rc;
	}
	rc = follow ? follow_job(c, o, id, &d, limit) : print_queued(c, &d, script);
	doc_free(&d);
	return rc;
}

/* The job's command from the words after the options: one word verbatim, several quoted. */
static int
command_words(const struct args *a, struct opts *o)
{
	const char *p;
	int k;

	if (a->i >= a->argc)
		return usage_err(a->cmd, "missing command (give it after --)");
	/* `run ./x.sh --device 1` without "--" queues on card 0 and hands --device 1 to the
	 * script, which may then open card 1 beside another queue's job */
	for (k = a->i + 1; !a->dashdash && k < a->argc; k++)
		if (strcmp(a->argv[k], "--device") == 0 || strncmp(a->argv[k], "--device=", 9) == 0)
			return usage_err(a->cmd, "'%s' after the command would be passed to it, and the "
			                         "job queued on card %llu; put queue options before the "
			                         "command, or write -- before the command to pass it on",
			                 a->argv[k], o->device);
	if (a->argc - a->i == 1) {
		for (p = a->argv[a->i]; isspace((unsigned char)*p); p++)
			;
		if (*p == 0)
			return usage_err(a->cmd, "the command is empty");
		json_buf_add(&o->cmd, a->argv[a->i], strlen(a->argv[a->i]));
	} else {
		for (k = a->i; k < a->argc; k++) {
			if (k > a->i)
				json_buf_add(&o->cmd, " ", 1);
			sh_quote(&o->cmd, a->argv[k]);
		}
	}
	return ST_OK;
}

/* run and queue: submit the command after the options; run follows it. */
static int
cmd_submit(struct cli *c, struct args *a, struct opts *o)
{
	int rc = command_words(a, o);

	return rc != ST_OK ? rc : submit_cmd(c, a, o, strcmp(a->cmd->name, "run") == 0, NULL, 0);
}

/* ------------------------------------------------------------------------ queue-python */

/*
 * mkdir -p with mode 0700 for every missing component. Returns 0 or -1 with errno. The daemon
 * has its own for the log dir (store.c): the client links no module that could hold both.
 */
static int
mkdir_p(const char *dir)
{
	char path[PATH_MAX], *p, at;

	snprintf(path, sizeof path, "%s", dir); /* dir fits: script_dir built it in PATH_MAX */
	for (p = path + 1;; p++) {
		if (*p != '/' && *p != 0)
			continue;
		at = *p;
		*p = 0;
		if (mkdir(path, 0700) < 0 && errno != EEXIST)
			return -1;
		if (at == 0)
			return 0; /* a file of that name: creating the script in it says so */
		*p = '/';
	}
}

/*
 * The script dir, created 0700 if missing: TT_DEVICE_CLI_SCRIPT_DIR, else the user's state
 * folder, ${XDG_STATE_HOME:-~/.local/state}/tt-device-queue/cli-scripts (XDG Base Directory;
 * a relative XDG_STATE_HOME is ignored). Never beside the executable: an installed binary's
 * folder (/usr/local/bin) is no place for a user's files. Returns 0, or -1 (printed).
 */
static int
script_dir(char *dir, size_t cap)
{
	const char *e = env_nonempty("TT_DEVICE_CLI_SCRIPT_DIR"), *xdg, *home;

	xdg = env_nonempty("XDG_STATE_HOME");
	home = env_nonempty("HOME");
	if (e != NULL)
		snprintf(dir, cap, "%s", e);
	else if (xdg != NULL && xdg[0] == '/')
		snprintf(dir, cap, "%s/tt-device-queue/cli-scripts", xdg);
	else if (home != NULL && home[0] == '/')
		snprintf(dir, cap, "%s/.local/state/tt-device-queue/cli-scripts", home);
	else {
		errmsg("no folder to keep the script in: HOME is not an absolute path; set "
		       "TT_DEVICE_CLI_SCRIPT_DIR or XDG_STATE_HOME");
		return -1;
	}
	if (mkdir_p(dir) == 0)
		return 0;
	errmsg("cannot create the script dir %s: %s", dir, strerror(errno));
	return -1;
}

/* Remove stored scripts (script-*) older than 7 days from dir. Failures are ignored. */
static void
prune_scripts(const char *dir)
{
	time_t now = time(NULL);
	struct dirent *de;
	struct stat st;
	DIR *dp;

	if ((dp = opendir(dir)) == NULL)
		return;
	while ((de = readdir(dp)) != NULL) {
		if (strncmp(de->d_name, "script-", 7) != 0)
			continue;
		if (fstatat(dirfd(dp), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		if (now - st.st_mtime > SCRIPT_MAX_AGE_SEC)
			unlinkat(dirfd(dp), de->d_name, 0);
	}
	closedir(dp);
}

/*
 * Store stdin as a new 0600 script-XXXXXX.py in the script dir; path[] gets its name. A read
 * cut short by SIGINT is ST_INTR; the file is removed on any failure.
 */
static int
store_stdin(char *path, size_t cap)
{
	char dir[PATH_MAX], buf[65536];
	FILE *f;
	size_t n;
	int fd, werr, rc = ST_OK;

	if (script_dir(dir, sizeof dir) < 0)
		return ST_FAIL;
	prune_scripts(dir);
	if (snprintf(path, cap, "%s/script-XXXXXX.py", dir) >= (int)cap)
		return errmsg("the script dir's path is too long: %s", dir);
	if ((fd = mkostemps(path, 3, O_CLOEXEC)) < 0)
		return errmsg("cannot create a script in %s: %s", dir, strerror(errno));
	if (fchmod(fd, 0600) < 0 || (f = fdopen(fd, "w")) == NULL) {
		rc = errmsg("writing %s: %s", path, strerror(errno));
		close(fd);
	} else {
		while ((n = fread(buf, 1, sizeof buf, stdin)) > 0)
			fwrite(buf, 1, n, f);
		if (ferror(stdin))
			rc = interrupted ? ST_INTR
			                 : errmsg("reading the script from stdin: %s", strerror(errno));
		werr = ferror(f); /* a write failed: sticky until fclose */
		if ((fclose(f) != 0 || werr) && rc == ST_OK)
			rc = errmsg("writing %s: %s", path, strerror(errno));
	}
	if (rc != ST_OK)
		unlink(path);
	return rc;
}

/* The script operand: `-` stores stdin (*stored = 1); a file is used by its absolute path. */
static int
python_script(const struct args *a, char *path, size_t cap, int *stored)
{
	char real[PATH_MAX];
	struct stat st;

	if (a->npos == 0)
		return usage_err(a->cmd, "missing SCRIPT (a file, or - for stdin)");
	if (a->npos > 1)
		return usage_err(a->cmd,
		                 "unexpected argument '%s' (script arguments go in "
		                 "--python-arg)",
		                 a->pos[1]);
	if (strcmp(a->pos[0], "-") == 0) {
		*stored = 1;
		return store_stdin(path, cap);
	}
	if (realpath(a->pos[0], real) == NULL || stat(real, &st) < 0)
		return usage_err(a->cmd, "cannot use script '%s': %s", a->pos[0], strerror(errno));
	if (S_ISDIR(st.st_mode))
		return usage_err(a->cmd, "cannot use script '%s': it is a directory", a->pos[0]);
	snprintf(path, cap, "%s", real);
	return ST_OK;
}

static int
cmd_queue_python(struct cli *c, struct args *a, struct opts *o)
{
	char script[PATH_MAX + 32];
	int stored = 0, rc, k;

	if (o->python[0] == 0)
		return usage_err(a->cmd, "--python needs an interpreter");
	if ((rc = python_script(a, script, sizeof script, &stored)) != ST_OK)
		return rc;
	sh_quote(&o->cmd, o->python); /* `P SCRIPT A...`, each word quoted for bash */
	json_buf_add(&o->cmd, " ", 1);
	sh_quote(&o->cmd, script);
	for (k = 0; k < o->pyargs.n; k++) {
		json_buf_add(&o->cmd, " ", 1);
		sh_quote(&o->cmd, o->pyargs.v[k]);
	}
	return submit_cmd(c, a, o, o->wait || o->wait_timeout >= 0, script, stored);
}

/* ------------------------------------------------------------------------ job, logs, result */


/*
 * The path of GET /job?key=KEY into path: the key is its owner's, the caller's unless --owner
 * names another user by uid (an admin's look-up, as the Slurm epilog's of a job's lease).
 * ST_OK, or ST_USAGE (explained).
 */
static int
key_path(const struct args *a, const struct opts *o, char *path, size_t cap)
{
	if (o->owner && (!o->owner[0] || strspn(o->owner, "0123456789") != strlen(o->owner) ||
	                 strlen(o->owner) > 10))
		return usage_err(a->cmd, "--owner with --key takes the owner's uid, not '%s'",
		                 o->owner);
	/* a valid key needs no percent-encoding */
	snprintf(path, cap, "/job?key=%s%s%s", o->key, o->owner ? "&owner=" : "",
	         o->owner ? o->owner : "");
	return ST_OK;
}
/* Ask method path (body NULL for none) and print the answer as JSON. */
static int
print_answer(struct cli *c, const char *method, const char *path, const struct json_buf *body)
{
	struct doc d;
	int rc = api(c, method, path, body, 0, &d);

	if (rc != ST_OK)
		return rc;
	rc = print_doc(&d);
	doc_free(&d);
	return rc;
}

static int
cmd_job(struct cli *c, struct args *a, struct opts *o)
{
	char id[33], path[160];
	int rc;

	if (o->key && a->npos > 0)
		return usage_err(a->cmd, "give a job ID or --key, not both");
	if (o->owner && !o->key)
		return usage_err(a->cmd, "--owner goes with --key");
	if (!o->key && (rc = one_job_id(a, id)) != ST_OK)
		return rc;
	if (o->key && (rc = key_path(a, o, path, sizeof path)) != ST_OK)
		return rc;
	if (!o->key)
		snprintf(path, sizeof path, "/job/%s", id);
	return print_answer(c, "GET", path, NULL);
}

static int
cmd_logs(struct cli *c, struct args *a, struct opts *o)
{
	struct logpos lp = {(unsigned long long)o->offset, 0, 0};
	struct sink out;
	char id[33], path[192];
	int rc, n;

	if ((rc = one_job_id(a, id)) != ST_OK)
		return rc;
	if (c->json && o->follow)
		return usage_err(a->cmd, "--json and --follow do not go together");
	if (o->follow && o->wait_timeout != 0 && (rc = refuse_own_card(c, a, o, id)) != ST_OK)
		return rc;
	if (c->json) { /* the one /logs answer at --offset/--limit */
		n = snprintf(path, sizeof path, "/logs/%s?offset=%lld", id, o->offset);
		if (o->limit >= 0)
			snprintf(path + n, sizeof path - (size_t)n, "&limit=%lld",
			         o->limit < LOG_CHUNK ? o->limit : LOG_CHUNK);
		return print_answer(c, "GET", path, NULL);
	}
	set_deadline(c, o->follow ? o->wait_timeout : -1);
	sink_init(&out, ULLONG_MAX, 0);
	rc = logs_loop(c, id, &lp, o->limit >= 0 ? (unsigned long long)o->limit : ULLONG_MAX,
	               o->follow, &out);
	wait_ended(c, rc, id, &out);
	json_buf_free(&out.buf);
	if ((rc == ST_OK || rc == ST_TIMEOUT || rc == ST_INTR) && !lp.complete)
		fprintf(stderr, "next_offset=%llu\n", lp.off);
	return rc;
}

static int
cmd_result(struct cli *c, struct args *a, struct opts *o)
{
	struct logpos lp = {0, 0, 0};
	unsigned long long limit;
	struct sink out;
	char id[33];
	int rc;

	if ((rc = one_job_id(a, id)) != ST_OK || (rc = output_limit(a, o, &limit)) != ST_OK ||
	    (o->wait_timeout != 0 && (rc = refuse_own_card(c, a, o, id)) != ST_OK))
		return rc;
	set_deadline(c, o->wait_timeout);
	if ((rc = wait_done(c, id)) != ST_OK)
		return wait_ended(c, rc, id, NULL);
	c->has_deadline = 0; /* the job is done: its output is read in any case */
	sink_init(&out, limit, c->json);
	rc = logs_loop(c, id, &lp, ULLONG_MAX, 0, &out);
	rc = rc == ST_OK ? job_finish(c, id, &out) : wait_ended(c, rc, id, &out);
	json_buf_free(&out.buf);
	return rc;
}

/* ------------------------------------------------------------------------ status */

/*
 * Append UTF-8 text s[0..n) on one line within `room` columns, each control character
 * replaced by ctl (no escape sequence reaches the terminal); text that does not fit is cut
 * and ends in "...".
 */
static void
put_cut(struct json_buf *b, const char *s, size_t n, size_t room, char ctl)
{
	size_t i, k, keep = utf8_prefix(s, n, room);

	if (keep < n)
		keep = room > 3 ? utf8_prefix(s, n, room - 3) : 0;
	for (i = 0; i < keep; i += k ? k : 1)
		if ((k = json_control_len(s + i, keep - i)) != 0)
			json_buf_add(b, &ctl, 1);
		else
			json_buf_add(b, s + i, 1);
	if (keep < n && room > 3)
		json_buf_add(b, "...", 3);
}

/*
 * Append a string member of job j (a command, a client id) as put_cut does. Its first
 * 4 * STATUS_COLS bytes hold more characters than a line shows: one cut there is cut again.
 */
static void
put_member(struct json_buf *b, const struct doc *d, int j, const char *key, size_t room,
           char ctl)
{
	char text[4 * STATUS_COLS + 8];

	if (doc_str(d, j, key, text, sizeof text) != NULL)
		put_cut(b, text, strlen(text), room, ctl);
}

/*
 * "  [client]  cmd": the client id and the command, cut so the line fits STATUS_COLS. caller is
 * the user asking on a host-wide queue, whose lines name the owner of each job but the
 * caller's; "" on a personal one.
 */
static void
put_job_tail(struct json_buf *b, const struct doc *d, int j, const char *caller, int who)
{
	char mode[16], owner[64], cards[MAX_JOB_CARDS][24], list[256];
	size_t used, i;
	int n, other;

	if (who) { /* [owner: client id] of another user's job on a host-wide queue */
		other = caller[0] && doc_str(d, j, "owner", owner, sizeof owner) &&
		        strcmp(owner, caller) != 0;
		json_buf_add(b, "  [", 3);
		if (other) {
			put_member(b, d, j, "owner", OWNER_SHOW, '?');
			json_buf_add(b, ": ", 2);
		}
		put_member(b, d, j, "client_id", other ? CLIENT_SHOW - OWNER_SHOW - 2 : CLIENT_SHOW,
		           '?');
		json_buf_add(b, "]", 1);
	}
	json_buf_add(b, "  ", 2);
	if (doc_str(d, j, "mode", mode, sizeof mode) && strcmp(mode, "run") != 0)
		json_buf_printf(b, "[%s] ", mode); /* a reset, or a lease (its description follows) */
	if ((n = doc_cards(d, j, cards, MAX_JOB_CARDS)) > 1) /* on each of them: say which */
		json_buf_printf(b, "[cards %s] ", cards_list(cards, n, list, sizeof list));
	for (i = used = 0; i < b->len; i++) /* the line's characters so far */
		used += ((unsigned char)b->p[i] & 0xC0) != 0x80;
	/* a long head (a waiting job of several cards) still leaves the command's start shown */
	put_member(b, d, j, "cmd", used + CMD_MIN_COLS < STATUS_COLS ? STATUS_COLS - used
								 : CMD_MIN_COLS, ' ');
}

/*
 * A finished job's outcome in a word or two, by its end_reason (ending_of): ok, exit 3,
 * SIGINT, timeout, killed, cancelled, interrupted, card dead, ...; by the exit code alone for a
 * record without one.
 */
static const char *
outcome_word(const struct doc *d, int j, char *buf, size_t cap)
{
	const struct ending *e = ending_of(d, j);
	long long code, s = 0;

	if (e && e->word)
		return e->word;
	if (doc_int(d, j, "exit_code", &code) < 0)
		return "?";
	doc_int(d, j, "signal", &s);
	if (!e && code < -1)
		s = -code;
	if (s > 0)
		return signal_text(s, 1, buf, cap);
	if (code == 0 || code == -1)
		return code == 0 ? "ok" : "no exit code";
	snprintf(buf, cap, "exit %lld", code);
	return buf;
}

/*
 * One job's line of status, by its view: the running job (n 0: "  running  ID  12.3s, ~4.00s
 * left  [client]  cmd", "stopping" in its kill grace), the nth queued ("  queued   1. ID  wait
 * ~10.0s  [client]  cmd") or a recent one (n -1: "  recent   exit 3       0.52s  ID  cmd").
 */
static void
job_line(const struct doc *d, int j, int n, const char *caller)
{
	char id[40] = "?", t[32] = "", word[32], dev[24] = "?", why[32] = "?";
	int stop = doc_get(d, j, "stop_requested_at"), w;
	long long rc_, rn;
	struct json_buf b;
	double x;

	json_buf_init(&b);
	doc_str(d, j, "job_id", id, sizeof id);
	stop = n == 0 && stop >= 0 && d->t[stop].type == JSON_STRING;
	if (n < 0) {
		if (doc_num(d, j, "elapsed", &x) == 0)
			fmt_secs(x, t, sizeof t);
		json_buf_printf(&b, "  recent   %-11s %8s  %s",
		                outcome_word(d, j, word, sizeof word), t, id);
	} else if (n > 0) {
		json_buf_printf(&b, "  queued   %d. %s", n, id);
		if (doc_num(d, j, "estimated_wait_sec", &x) == 0)
			json_buf_printf(&b, "  wait ~%s", fmt_secs(x, t, sizeof t));
		if ((w = doc_child(d, j, "waiting_for", JSON_OBJECT)) >= 0) { /* several cards */
			doc_str(d, w, "device_id", dev, sizeof dev);
			doc_str(d, w, "reason", why, sizeof why);
			json_buf_printf(&b, "  (card %s: %s)", dev, why);
		}
	} else {
		json_buf_printf(&b, "  %s %s ", stop ? "stopping" : "running ", id);
		if (doc_num(d, j, "running_sec", &x) == 0)
			json_buf_printf(&b, " %s", fmt_secs(x, t, sizeof t));
		/* a job being stopped, or a lease (held until released), has no estimate worth
		 * showing; the daemon's stops at 0 */
		word[0] = '\0';
		doc_str(d, j, "mode", word, sizeof word);
		if (!stop && strcmp(word, "lease") != 0 &&
		    doc_num(d, j, "estimated_remaining_sec", &x) == 0)
			json_buf_printf(&b, x > 0 ? ", ~%s left" : ", past its estimate",
			                fmt_secs(x, t, sizeof t));
		if (doc_int(d, j, "repeat", &rn) == 0 && rn > 1 &&
		    doc_int(d, j, "repeat_current", &rc_) == 0)
			json_buf_printf(&b, ", repeat %lld/%lld", rc_, rn);
	}
	put_job_tail(&b, d, j, caller, n >= 0);
	if (!b.oom)
		printf("%.*s\n", (int)b.len, b.p);
	json_buf_free(&b);
}

/* Print a warning on one line, "!! " after lead; its control characters print as '?'. */
static void warn(const char *lead, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
warn(const char *lead, const char *fmt, ...)
{
	char text[8192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	text[scrub_controls(text, strlen(text))] = 0;
	printf("%s!! %s\n", lead, text);
}

/*
 * A card's warnings in the daemon's words: dead (its reason) or resetting; held (by whom, when,
 * why); a control command that could not run; each process outside the queue that has it open.
 */
static void
card_warnings(const struct doc *d, int dev, const char *id, const char *state)
{
	int arr = doc_child(d, dev, "foreign_holders", JSON_ARRAY), j, n;
	char a[1024] = "?", b[64] = "?", why[4200] = "", pid[24] = "?", cmd[256] = "";

	if (strcmp(state, "healthy") != 0) {
		doc_str(d, dev, "dead_reason", why, sizeof why);
		b[0] = 0;
		doc_str(d, dev, "dead_since", b, sizeof b);
		warn("  ", "card %s is %s%s%s%s%s", id, state, b[0] ? " since " : "", b,
		     why[0] ? ": " : "", why);
	}
	if (doc_true(d, dev, "reset_pending"))
		warn("  ", "a reset is pending on card %s; it runs before the next job", id);
	if (doc_true(d, dev, "held")) {
		doc_str(d, dev, "held_by", a, sizeof a);
		doc_str(d, dev, "held_at", b, sizeof b);
		why[0] = 0;
		doc_str(d, dev, "hold_reason", why, sizeof why);
		warn("  ", "card %s is HELD by %s since %s%s%s", id, a, b, why[0] ? ": " : "", why);
	}
	if (doc_str(d, dev, "control_error", why, sizeof why) && why[0])
		warn("  ", "%s", why);
	for (n = 0, j = arr + 1; arr >= 0 && n < (int)d->t[arr].size; n++, j = (int)d->t[j].next) {
		doc_scalar(d, j, "pid", pid, sizeof pid);
		doc_str(d, j, "user", a, sizeof a);
		doc_str(d, j, "since", b, sizeof b);
		doc_str(d, j, "command", cmd, sizeof cmd);
		warn("  ", "card %s is open outside the queue: pid %s (%s) since %s: %s", id, pid, a,
		     b, cmd);
	}
}

/*
 * One card: state line, warnings, running job, the first STATUS_QUEUED queued jobs (the rest
 * counted), recent jobs newest first.
 */
static void
card_block(const struct doc *d, int dev, const char *caller)
{
	char id[32] = "?", state[32] = "?";
	int cur = doc_child(d, dev, "current", JSON_OBJECT), j, n, rec_at[SCHED_RECENT_MAX];
	int pend = doc_child(d, dev, "pending", JSON_ARRAY);
	int rec = doc_child(d, dev, "recent", JSON_ARRAY);
	int npend = pend >= 0 ? (int)d->t[pend].size : 0, nrec = 0;
	long long epoch;

	doc_scalar(d, dev, "device_id", id, sizeof id);
	doc_str(d, dev, "state", state, sizeof state);
	printf("\ncard %s: %s", id, state);
	if (doc_int(d, dev, "reset_epoch", &epoch) == 0)
		printf("  (reset epoch %lld)", epoch);
	putchar('\n');
	card_warnings(d, dev, id, state);
	if (cur >= 0)
		job_line(d, cur, 0, caller);
	else
		printf("  idle\n");
	for (n = 0, j = pend + 1; n < npend && n < STATUS_QUEUED; n++, j = (int)d->t[j].next)
		job_line(d, j, n + 1, caller);
	if (npend > STATUS_QUEUED)
		printf("  ... and %d more queued (`" PROG " --json status` lists them all)\n",
		       npend - STATUS_QUEUED);
	for (j = rec + 1; rec >= 0 && nrec < (int)d->t[rec].size && nrec < SCHED_RECENT_MAX;
	     j = (int)d->t[j].next)
		rec_at[nrec++] = j;
	while (nrec > 0) /* the daemon sends them oldest first */
		job_line(d, rec_at[--nrec], -1, caller);
}

/* The header: version, queue totals, and one line for each of the daemon's warnings. */
static void
status_header(const struct doc *d)
{
	static const char *const warnings[][2] = {
	    {"degraded_reason", "STORE DEGRADED"}, {"maintenance_warning", "maintenance"},
	    {"guardian_warning", "guardian"}};
	int w = doc_child(d, 0, "worker", JSON_OBJECT);
	char ver[64] = "?", text[1024];
	long long qt = 0, mx = 0;
	size_t k;

	doc_scalar(d, 0, "version", ver, sizeof ver);
	doc_int(d, 0, "queued_total", &qt);
	doc_int(d, 0, "max_queued_jobs", &mx);
	printf(PROG " %s: %lld job%s queued (at most %lld)\n", ver, qt, qt == 1 ? "" : "s", mx);
	for (k = 0; k < sizeof warnings / sizeof warnings[0]; k++)
		if (doc_str(d, w, warnings[k][0], text, sizeof text) && text[0])
			warn("", "%s: %s", warnings[k][1], text);
}

static int
cmd_status(struct cli *c, struct args *a, struct opts *o)
{
	char path[64], caller[64];
	struct doc d;
	int rc, devs, j, n;

	if (a->npos > 0)
		return usage_err(a->cmd, "unexpected argument '%s' (use --device N)", a->pos[0]);
	if (o->device_set)
		snprintf(path, sizeof path, "/status?device=%llu", o->device);
	else
		snprintf(path, sizeof path, "/status");
	if (c->json)
		return print_answer(c, "GET", path, NULL);
	if ((rc = api(c, "GET", path, NULL, 0, &d)) != ST_OK)
		return rc;
	if (!doc_str(&d, 0, "access", path, sizeof path) || strcmp(path, "host") != 0 ||
	    !doc_str(&d, 0, "caller", caller, sizeof caller))
		caller[0] = 0; /* a personal queue: every job is its user's */
	status_header(&d);
	devs = doc_child(&d, 0, "devices", JSON_ARRAY);
	for (n = 0, j = devs + 1; devs >= 0 && n < (int)d.t[devs].size; n++, j = (int)d.t[j].next)
		card_block(&d, j, caller);
	doc_free(&d);
	return ST_OK;
}

/* ------------------------------------------------------------------------ kill, reset */

/*
 * POST path with a body of the members that apply: device_id (--device), job_id (id unless
 * NULL), client_id (`who`), reason (hold --reason) and force (reset --force). Print the answer
 * as the daemon sent it (JSON), with or without --json, as the earlier client did.
 */
static int
post_and_show(struct cli *c, const char *path, const struct opts *o, const char *id, int who)
{
	struct json_buf b;
	struct json_w w;
	char dev[24];
	int rc;

	snprintf(dev, sizeof dev, "%llu", o->device);
	json_buf_init(&b);
	json_w_init(&w, &b);
	json_w_obj(&w);
	put_str(&w, "device_id", o->device_set ? dev : NULL);
	put_str(&w, "job_id", id);
	put_str(&w, "client_id", who ? c->client_id : NULL);
	put_str(&w, "reason", o->reason);
	if (o->force) {
		json_w_key(&w, "force");
		json_w_bool(&w, 1);
	}
	json_w_obj_end(&w);
	rc = print_answer(c, "POST", path, &b);
	json_buf_free(&b);
	return rc;
}

static int
cmd_kill(struct cli *c, struct args *a, struct opts *o)
{
	char id[33];
	int rc;

	if (a->npos == 0 && !o->device_set)
		return usage_err(a->cmd, "give a job ID or --device N");
	if (a->npos > 0 && o->device_set)
		return usage_err(a->cmd, "give a job ID or --device N, not both");
	if (a->npos > 0 && (rc = one_job_id(a, id)) != ST_OK)
		return rc;
	return post_and_show(c, "/kill", o, o->device_set ? NULL : id, 0);
}

static int
cmd_reset(struct cli *c, struct args *a, struct opts *o)
{
	char id[33];
	int rc;

	if (a->npos > 0 && (rc = one_job_id(a, id)) != ST_OK)
		return rc;
	return post_and_show(c, "/reset", o, a->npos > 0 ? id : NULL, 0);
}

/*
 * release ID | release --key KEY: POST /release {"job_id"}, the lease's id or the one its key
 * names (GET /job?key=KEY). Exit 0 when it was released (or, queued, cancelled), else 1.
 */
static int
release_lease(struct cli *c, struct args *a, struct opts *o)
{
	char id[33], path[160];
	struct doc d;
	int rc;

	if (o->key && (a->npos > 0 || o->device_set))
		return usage_err(a->cmd, "give a lease's ID, --key or --device N, one of them");
	if (o->owner && !o->key)
		return usage_err(a->cmd, "--owner goes with --key");
	if (!o->key && (rc = one_job_id(a, id)) != ST_OK)
		return rc;
	if (o->key) {
		if ((rc = key_path(a, o, path, sizeof path)) != ST_OK ||
		    (rc = api(c, "GET", path, NULL, 0, &d)) != ST_OK)
			return rc;
		doc_str(&d, 0, "job_id", id, sizeof id);
		doc_free(&d);
	}
	return post_and_show(c, "/release", o, id, 0);
}

/* hold --device N [--reason TEXT] / release --device N: POST /hold or /release. */
static int
cmd_hold(struct cli *c, struct args *a, struct opts *o)
{
	int hold = strcmp(a->cmd->name, "hold") == 0;

	if (!hold && (o->key || (a->npos > 0 && !o->device_set)))
		return release_lease(c, a, o);
	if (a->npos > 0)
		return usage_err(a->cmd, "unexpected argument '%s'", a->pos[0]);
	if (!o->device_set)
		return usage_err(a->cmd, "give the card: --device N");
	if (o->reason && utf8_or_refuse("--reason", o->reason) < 0)
		return ST_USAGE;
	if (c->client_id[0] == 0)
		client_identity(c);
	return post_and_show(c, hold ? "/hold" : "/release", o, NULL, 1);
}

/*
 * lease --wait: hold GET /job/ID?wait=S until lease id leaves its queues, renewing its
 * heartbeat (--heartbeat; POST /renew with the body `renew`) at least twice a heartbeat
 * meanwhile: a waiting client is alive.
 * ST_OK when it holds its cards; ST_FAIL when it ended without holding them (said, with its
 * end_reason and error); ST_TIMEOUT at --wait-timeout; or the failure of asking.
 */
static int
wait_held(struct cli *c, const struct opts *o, const char *id, const struct json_buf *renew)
{
	char path[128], end[32] = "?", why[512] = "", started[40];
	struct doc d;
	int hold, rc, asked, held;

	set_deadline(c, o->wait_timeout);
	for (asked = 0;; asked = 1) {
		if ((hold = next_hold(c, asked)) < 0)
			return ST_TIMEOUT;
		if (o->heartbeat > 0 && hold > (o->heartbeat + 1) / 2)
			hold = (int)(o->heartbeat + 1) / 2;
		snprintf(path, sizeof path, "/job/%s?wait=%d", id, hold);
		if ((rc = long_poll(c, id, path, hold, &d)) == R_AGAIN)
			continue;
		if (rc != ST_OK)
			return rc;
		note_status(c, &d);
		doc_str(&d, 0, "end_reason", end, sizeof end);
		doc_str(&d, 0, "error", why, sizeof why);
		held = doc_str(&d, 0, "started_at", started, sizeof started) != NULL;
		doc_free(&d);
		if (strcmp(c->job_status, "running") == 0)
			return ST_OK;
		if (strcmp(c->job_status, "done") == 0) /* a replayed key's lease may have held */
			return errmsg("lease %s %s (%s)%s%s", id, held ? "has ended already"
			                                                : "ended without holding its cards",
			              end, why[0] ? ": " : "", why);
		if (o->heartbeat > 0 && api(c, "POST", "/renew", renew, 0, &d) == ST_OK)
			doc_free(&d); /* a failure is said; the next look tells what became of it */
	}
}

/* lease: POST /lease as a submission is sent, print its answer as queue does, and --wait. */
static int
cmd_lease(struct cli *c, struct args *a, struct opts *o)
{
	struct json_buf renew;
	struct doc d;
	char id[33];
	int rc;

	if (a->npos > 0)
		return usage_err(a->cmd, "unexpected argument '%s'", a->pos[0]);
	if ((rc = submission_cards(c, o)) != ST_OK ||
	    (o->wait && o->wait_timeout != 0 && (rc = refuse_own_card(c, a, o, NULL)) != ST_OK) ||
	    (rc = submit(c, o, NULL, id, &d)) != ST_OK)
		return rc;
	rc = print_queued(c, &d, NULL);
	doc_free(&d);
	json_buf_init(&renew);
	json_buf_printf(&renew, "{\"job_id\":\"%s\"}", id);
	if (rc == ST_OK && o->wait)
		rc = wait_held(c, o, id, &renew);
	if (rc == ST_TIMEOUT || rc == ST_INTR) /* no longer waited for, yet it takes the cards */
		fprintf(stderr, NOTE "lease %s still waits for its cards; it stays queued (`" PROG
		                " release %s` takes it off)\n", id, id);
	json_buf_free(&renew);
	return rc;
}

/*
 * One renewal of lease id while shell's CMD runs: -1 while it holds its cards, or while the
 * daemon cannot be asked (said once per outage in *lost; a lease that lapsed meanwhile is
 * told at the next renewal); else the lease ended (said) and its status as a job's.
 */
static int
renew_held(struct cli *c, const char *id, const struct json_buf *renew, int *lost)
{
	char path[64], end[32] = "?", why[512] = "";
	struct resp r = {0};
	struct doc d;
	int rc;

	rc = http_call(c, "POST", "/renew", renew->p, renew->len, 0, NULL, &r);
	if (rc != ST_OK || r.status == 503) { /* not told: CMD goes on, the next renewal asks */
		if (!(*lost)++)
			fprintf(stderr, NOTE "cannot renew lease %s (%s); trying again\n", id,
			        rc != ST_OK ? c->err : "HTTP 503");
		return -1;
	}
	*lost = 0;
	if (r.status == 200)
		return -1;
	snprintf(path, sizeof path, "/job/%s", id);
	if (api(c, "GET", path, NULL, 0, &d) != ST_OK)
		return ST_FAIL;
	doc_str(&d, 0, "end_reason", end, sizeof end);
	doc_str(&d, 0, "error", why, sizeof why);
	rc = job_exit_status(&d);
	doc_free(&d);
	fprintf(stderr, NOTE "lease %s ended (%s)%s%s while the command ran; sending it SIGHUP\n",
	        id, end, why[0] ? ": " : "", why);
	return rc;
}

/*
 * shell's CMD (the words after the options; none: $SHELL, else /bin/sh) while lease id holds
 * its cards: run with TT_DEVICE_JOB_ID set to the lease's id, in the caller's terminal, and
 * renew the lease (POST /renew with `renew`) three times a heartbeat until it exits. Returns
 * CMD's status (128+s when it died of signal s); when the lease ended under it, CMD gets
 * SIGHUP, *held is cleared, and once CMD is gone the lease's status as a job's is returned;
 * ST_FAIL when CMD could not be started.
 */
static int
run_held(struct cli *c, const struct args *a, const struct opts *o, const char *id,
         const struct json_buf *renew, int *held)
{
	char *sh[] = {(char *)(env_nonempty("SHELL") ? env_nonempty("SHELL") : "/bin/sh"), NULL};
	char **argv = a->i < a->argc ? a->argv + a->i : sh;
	struct sigaction ign = {.sa_handler = SIG_IGN}, dfl = {.sa_handler = SIG_DFL};
	pid_t pid, client = getpid();
	double next = 0;
	int pidfd, ws = 0, ended = -1, lost = 0;

	/* CMD stays in the terminal's foreground process group, as a shell's foreground child
	 * does, so ^C and ^\ reach it; the client ignores them until CMD is gone */
	sigaction(SIGINT, &ign, NULL);
	sigaction(SIGQUIT, &ign, NULL);
	fflush(NULL);
	if ((pid = fork()) < 0)
		return errmsg("cannot start %s: %s", argv[0], strerror(errno));
	if (pid == 0) {
		/* nothing renews the lease once the client is gone: CMD must not go on using the
		 * cards the daemon may give the next job within a heartbeat */
		prctl(PR_SET_PDEATHSIG, SIGHUP);
		if (getppid() != client)
			_exit(128 + SIGHUP);
		sigaction(SIGINT, &dfl, NULL);
		sigaction(SIGQUIT, &dfl, NULL);
		sigaction(SIGPIPE, &dfl, NULL);
		/* as in a job: `run` on a card of its own is refused, and queue N is card N */
		setenv("TT_DEVICE_JOB_ID", id, 1);
		unsetenv("TT_VISIBLE_DEVICES");
		execvp(argv[0], argv);
		errmsg("cannot run %s: %s", argv[0], strerror(errno));
		_exit(127);
	}
	/* readable once CMD exits, so a renewal's pause ends then; Linux before 5.3 has none,
	 * and a pause of 0.1 s stands in for it */
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	while (waitpid(pid, &ws, ended < 0 ? WNOHANG : 0) == 0) {
		if (now_mono() >= next) {
			next = now_mono() + (double)o->heartbeat / 3;
			if ((ended = renew_held(c, id, renew, &lost)) >= 0)
				kill(pid, SIGHUP);
		}
		if (ended < 0)
			wait_fd(c, pidfd, POLLIN, pidfd >= 0 ? next : now_mono() + 0.1);
	}
	if (pidfd >= 0)
		close(pidfd);
	*held = ended < 0;
	if (ended >= 0)
		return ended;
	return WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : WEXITSTATUS(ws);
}

/*
 * shell: take a lease of the cards with a heartbeat, say once when it waits, once it holds
 * them run CMD there (run_held), and release it after. ^C while it waits takes the lease off
 * its queues (130).
 */
static int
cmd_shell(struct cli *c, struct args *a, struct opts *o)
{
	struct json_buf body;
	struct doc d;
	char id[33];
	int rc, held;

	if (!o->device_set)
		return usage_err(a->cmd, "give the cards: --device N");
	if (o->heartbeat == 0)
		return usage_err(a->cmd, "--heartbeat takes 1 to 3600 seconds: without one a "
		                         "killed shell would hold its cards until its timeout");
	o->heartbeat = o->heartbeat < 0 ? SHELL_HEARTBEAT_SEC : o->heartbeat;
	o->description = o->description ? o->description : "shell";
	if ((rc = submission_cards(c, o)) != ST_OK ||
	    (rc = refuse_own_card(c, a, o, NULL)) != ST_OK ||
	    (rc = submit(c, o, NULL, id, &d)) != ST_OK)
		return rc;
	say_queued("lease", id, &d);
	doc_free(&d);
	json_buf_init(&body);
	json_buf_printf(&body, "{\"job_id\":\"%s\"}", id);
	rc = wait_held(c, o, id, &body);
	held = rc == ST_OK;
	if (held)
		rc = run_held(c, a, o, id, &body, &held);
	interrupted = 0; /* ^C while it waited: the release below is still asked */
	if ((held || rc == ST_INTR) && api(c, "POST", "/release", &body, 0, &d) == ST_OK) {
		if (rc == ST_INTR)
			fprintf(stderr, NOTE "interrupted; lease %s taken off its queue\n", id);
		doc_free(&d);
	}
	json_buf_free(&body);
	return rc;
}

/* ------------------------------------------------------------------------ help, dispatch */

static int cmd_help(struct cli *c, struct args *a, struct opts *o);
static int cmd_serve(struct cli *c, struct args *a, struct opts *o);
static int cmd_skill(struct cli *c, struct args *a, struct opts *o);

#define SUBMIT_SYN                                                                           \
	"[--device N|N,M...|all] [--cwd DIR] [--timeout S] [--silence-timeout S] [--repeat N] " \
	"[--env NAME=VALUE]... [--key KEY] "
#define WAIT_SYN "[--wait-timeout S] [--output-limit B]"

static const struct subcmd subcmds[] = {
    {"run", cmd_submit, G_SUBMIT, 1, "run " SUBMIT_SYN WAIT_SYN " -- CMD..."},
    {"queue", cmd_submit, G_SUBMIT, 1, "queue " SUBMIT_SYN "-- CMD..."},
    {"queue-python", cmd_queue_python, G_SUBMIT | G_PY, 0,
     "queue-python " SUBMIT_SYN "[--python P] [--python-arg A]... [--wait] " WAIT_SYN
     " SCRIPT|-"},
    {"job", cmd_job, G_JOB, 0, "job ID | job --key KEY [--owner UID]"},
    {"logs", cmd_logs, G_LOGS, 0,
     "logs ID [--offset N] [--limit N] [--follow] [--wait-timeout S]"},
    {"result", cmd_result, G_WAIT, 0, "result ID " WAIT_SYN},
    {"status", cmd_status, G_DEV, 0, "status [--device N]"},
    {"kill", cmd_kill, G_DEV, 0, "kill ID | kill --device N"},
    {"reset", cmd_reset, G_RESET, 0, "reset [--device N] [--force] [ID]"},
    {"hold", cmd_hold, G_HOLD, 0, "hold --device N [--reason TEXT]"},
    {"lease", cmd_lease, G_LEASE, 0,
     "lease [--device N|N,M...|all] [--description T] [--timeout S] [--heartbeat S] "
     "[--owner USER] [--key KEY] [--wait] [--wait-timeout S]"},
    {"shell", cmd_shell, G_SHELL, 1,
     "shell --device N|N,M...|all [--description T] [--timeout S] [--heartbeat S] [-- CMD...]"},
    {"release", cmd_hold, G_DEV | G_JOB, 0,
     "release ID | release --key KEY [--owner UID] | release --device N"},
    {"skill", cmd_skill, 0, 0, "skill"},
    {"serve", cmd_serve, 0, 0, "serve"},
    {"help", cmd_help, 0, 0, "help [SUBCOMMAND]"},
};

static const struct subcmd *
find_subcmd(const char *name)
{
	size_t k;

	for (k = 0; k < sizeof subcmds / sizeof subcmds[0]; k++)
		if (strcmp(subcmds[k].name, name) == 0)
			return &subcmds[k];
	return NULL;
}

/*
 * Print cmd's usage; for global_cmd the global one and each subcommand's (the man page is the
 * full reference). Returns R_HELP.
 */
static int
print_help(const struct subcmd *cmd)
{
	size_t k;

	if (cmd->fn != NULL) {
		printf("usage: " PROG " %s\n(see " PROG "(1))\n", cmd->synopsis);
		return R_HELP;
	}
	printf("usage: " PROG " " GLOBAL_SYNOPSIS "\n       " PROG " --version\n\n"
	       "global options go before the subcommand (--json also after it)\n\nsubcommands:\n");
	for (k = 0; k < sizeof subcmds / sizeof subcmds[0]; k++)
		if (subcmds[k].fn != cmd_help)
			printf("  %s\n", subcmds[k].synopsis);
	printf("\n(see " PROG "(1))\n");
	return R_HELP;
}

static int
cmd_help(struct cli *c, struct args *a, struct opts *o)
{
	const struct subcmd *s;

	(void)c;
	(void)o;
	if (a->npos == 0)
		return print_help(&global_cmd);
	if ((s = find_subcmd(a->pos[0])) == NULL)
		return usage_err(a->cmd, "unknown subcommand '%s'", a->pos[0]);
	return print_help(s);
}

static int
cmd_skill(struct cli *c, struct args *a, struct opts *o)
{
	(void)c;
	(void)o;
	if (a->npos > 0)
		return usage_err(a->cmd, "unexpected argument '%s'", a->pos[0]);
	return out_write(embedded_skill, sizeof embedded_skill);
}

static int
cmd_serve(struct cli *c, struct args *a, struct opts *o)
{
	(void)c;
	(void)o;
	return usage_err(a->cmd, "global options do not apply to serve; run `" PROG " serve`");
}

int
cli_main(int argc, char **argv)
{
	struct args a = {.cmd = &global_cmd, .argc = argc, .argv = argv, .i = 1};
	struct cli c = {.fd = -1};
	struct opts o;
	int rc;

	json_buf_init(&c.in);
	a.pos = calloc((size_t)argc + 1, sizeof *a.pos);
	if (opts_init(&o, argc) < 0 || a.pos == NULL)
		rc = errmsg("out of memory");
	else
		rc = parse_opts(&c, &a, &o); /* the global options, up to the subcommand */
	if (rc == ST_OK && a.i >= argc)
		rc = usage_err(a.cmd, "missing subcommand");
	else if (rc == ST_OK && (a.cmd = find_subcmd(argv[a.i++])) == NULL)
		rc = usage_err(&global_cmd, "unknown subcommand '%s'", argv[a.i - 1]);
	c.host_opt = o.host;
	c.port_opt = o.port;
	c.client_id_opt = o.client_id;
	a.dashdash = 0;
	install_signals();
	if (rc == ST_OK)
		rc = parse_opts(&c, &a, &o);
	if (rc == ST_OK)
		rc = a.cmd->fn(&c, &a, &o);
	free(o.env.v);
	free(o.pyargs.v);
	json_buf_free(&o.cmd);
	free(a.pos);
	conn_close(&c);
	json_buf_free(&c.in);
	if (fflush(stdout) != 0 && (rc == ST_OK || rc == R_HELP))
		rc = errno == EPIPE ? ST_PIPE : ST_FAIL;
	return rc == R_HELP ? ST_OK : rc;
}

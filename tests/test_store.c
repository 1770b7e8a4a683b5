/*
 * test_store.c - unit tests of store.c in a private mkdtemp directory.
 *
 * Every database is opened through a pass-through VFS ("shim") registered as the default, so
 * a test can make every write fail (disk full, I/O error) at a chosen moment and then let the
 * condition clear. A second plain sqlite3 connection inspects files and builds the fixtures
 * of the earlier single-card service. TTQ_STORE_BENCH=1 runs more commits
 * for the commits-per-second figure.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store.h"
#include "tap.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define MAXGOT 64

static char tmpdir[] = "/tmp/test_store.XXXXXX";
static char errbuf[512];

/* ---- the fault-injecting VFS ---- */

struct shim_file {
	sqlite3_file base;
	sqlite3_file *real; /* lives right after this struct */
};

static sqlite3_vfs shim_vfs, *real_vfs;
static int shim_fail_rc; /* non-zero: every xWrite returns it */

#define REAL(f) (((struct shim_file *)(f))->real)

static int
shim_close(sqlite3_file *f)
{
	return REAL(f)->pMethods->xClose(REAL(f));
}

static int
shim_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off)
{
	return REAL(f)->pMethods->xRead(REAL(f), buf, n, off);
}

static int
shim_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off)
{
	if (shim_fail_rc)
		return shim_fail_rc;
	return REAL(f)->pMethods->xWrite(REAL(f), buf, n, off);
}

static int
shim_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	return REAL(f)->pMethods->xTruncate(REAL(f), size);
}

static int
shim_sync(sqlite3_file *f, int flags)
{
	return REAL(f)->pMethods->xSync(REAL(f), flags);
}

static int
shim_size(sqlite3_file *f, sqlite3_int64 *size)
{
	return REAL(f)->pMethods->xFileSize(REAL(f), size);
}

static int
shim_lock(sqlite3_file *f, int l)
{
	return REAL(f)->pMethods->xLock(REAL(f), l);
}

static int
shim_unlock(sqlite3_file *f, int l)
{
	return REAL(f)->pMethods->xUnlock(REAL(f), l);
}

static int
shim_reserved(sqlite3_file *f, int *out)
{
	return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}

static int
shim_fcntl(sqlite3_file *f, int op, void *arg)
{
	return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}

static int
shim_sector(sqlite3_file *f)
{
	return REAL(f)->pMethods->xSectorSize(REAL(f));
}

static int
shim_devchar(sqlite3_file *f)
{
	return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}

static int
shim_shm_map(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **pp)
{
	return REAL(f)->pMethods->xShmMap(REAL(f), pg, pgsz, extend, pp);
}

static int
shim_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
	return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}

static void
shim_shm_barrier(sqlite3_file *f)
{
	REAL(f)->pMethods->xShmBarrier(REAL(f));
}

static int
shim_shm_unmap(sqlite3_file *f, int del)
{
	return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}

static int
shim_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp)
{
	return REAL(f)->pMethods->xFetch(REAL(f), off, n, pp);
}

static int
shim_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
	return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}

/* clang-format off */
static const sqlite3_io_methods shim_io = {
	3, shim_close, shim_read, shim_write, shim_truncate, shim_sync, shim_size, shim_lock,
	shim_unlock, shim_reserved, shim_fcntl, shim_sector, shim_devchar, shim_shm_map,
	shim_shm_lock, shim_shm_barrier, shim_shm_unmap, shim_fetch, shim_unfetch,
};
/* clang-format on */

static int
shim_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
	struct shim_file *p = (struct shim_file *)f;
	int rc;

	(void)vfs;
	p->real = (sqlite3_file *)(p + 1);
	rc = real_vfs->xOpen(real_vfs, name, p->real, flags, out);
	p->base.pMethods = p->real->pMethods ? &shim_io : NULL;
	return rc;
}

static void
shim_register(void)
{
	real_vfs = sqlite3_vfs_find(NULL);
	shim_vfs = *real_vfs;
	shim_vfs.zName = "shim";
	shim_vfs.szOsFile = (int)sizeof(struct shim_file) + real_vfs->szOsFile;
	shim_vfs.xOpen = shim_open;
	shim_vfs.pNext = NULL;
	sqlite3_vfs_register(&shim_vfs, 1);
}

/* ---- helpers ---- */

static const char *
path_in(const char *name)
{
	static char buf[4][256];
	static int k;

	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", tmpdir, name);
	return buf[k];
}

static double
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int
file_mode(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 ? (int)(sb.st_mode & 07777) : -1;
}

/* A side connection (the plain unix VFS) to inspect or build a database. */
static sqlite3 *
side_open(const char *path)
{
	sqlite3 *db = NULL;

	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, "unix") !=
	    SQLITE_OK) {
		printf("# side_open %s: %s\n", path, sqlite3_errmsg(db));
		sqlite3_close(db);
		return NULL;
	}
	return db;
}

static int
side_exec(sqlite3 *db, const char *sql)
{
	char *msg = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);

	if (rc != SQLITE_OK)
		printf("# side_exec: %s\n", msg ? msg : "?");
	sqlite3_free(msg);
	return rc;
}

/* The first column of the first row of sql as text into buf ("" when none). */
static const char *
side_text(sqlite3 *db, const char *sql, char *buf, size_t len)
{
	sqlite3_stmt *s = NULL;

	buf[0] = '\0';
	if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK &&
	    sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
		snprintf(buf, len, "%s", (const char *)sqlite3_column_text(s, 0));
	sqlite3_finalize(s);
	return buf;
}

static long long
side_int(sqlite3 *db, const char *sql)
{
	char buf[64];

	return atoll(side_text(db, sql, buf, sizeof(buf)));
}

/* The jobs table's column names, comma separated, in table order. */
static const char *
side_columns(sqlite3 *db, char *buf, size_t len)
{
	return side_text(db, "SELECT group_concat(name, ',') FROM pragma_table_info('jobs')", buf,
	                 len);
}

static struct store *
open_ok(const char *name)
{
	struct store *st = store_open(path_in(name), false, errbuf, sizeof(errbuf), NULL);

	if (!st)
		printf("# store_open: %s\n", errbuf);
	return st;
}

/* A job with a fixed id from n, the given card, status and finish time; other fields default. */
static void
make_job(struct job *j, int n, int device, int status, double finished_at)
{
	char cmd[64];

	sched_job_init(j);
	snprintf(j->id, sizeof(j->id), "%032x", (unsigned)n);
	snprintf(cmd, sizeof(cmd), "echo job %d", n);
	j->cmd = strdup(cmd);
	j->cwd = strdup("");
	j->client_id = strdup("tester");
	j->device = device;
	j->status = status;
	j->submitted_at = 1000.0 + n;
	j->finished_at = finished_at;
	if (status == JOB_DONE) {
		j->has_exit_code = true;
		j->exit_code = 0;
	}
}

/* Put and commit one job of make_job(); frees its strings. */
static int
put_one(struct store *st, int n, int device, int status, double finished_at)
{
	struct job j;
	int rc;

	make_job(&j, n, device, status, finished_at);
	rc = store_begin(st) == 0 && store_put_job(st, &j, NULL) == 0 && store_commit(st) == 0;
	if (!rc)
		printf("# put_one %d: %s\n", n, store_errmsg(st));
	sched_job_clear(&j);
	return rc ? 0 : -1;
}

struct got {
	struct job jobs[MAXGOT];
	char *out[MAXGOT];
	int n;
};

static int
collect(void *ctx, struct job *j, const char *output_file)
{
	struct got *g = ctx;

	if (g->n == MAXGOT) {
		sched_job_clear(j);
		return -1;
	}
	g->jobs[g->n] = *j;
	g->out[g->n] = output_file ? strdup(output_file) : NULL;
	g->n++;
	return 0;
}

static int
count_only(void *ctx, struct job *j, const char *output_file)
{
	(void)output_file;
	sched_job_clear(j);
	++*(int *)ctx;
	return 0;
}

static void
got_free(struct got *g)
{
	for (int i = 0; i < g->n; i++) {
		sched_job_clear(&g->jobs[i]);
		free(g->out[i]);
	}
	g->n = 0;
}

/* The collected jobs' id numbers as "a,b,c" (ids are %032x of small numbers). */
static const char *
got_ids(const struct got *g)
{
	static char buf[512];
	size_t len = 0;

	buf[0] = '\0';
	for (int i = 0; i < g->n; i++)
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%lu", i ? "," : "",
		                        strtoul(g->jobs[i].id, NULL, 16));
	return buf;
}

struct cards {
	struct store_card c[8];
	int n;
};

static int
collect_card(void *ctx, struct store_card *c)
{
	struct cards *cs = ctx;

	if (cs->n == 8) {
		free(c->boot_id);
		free(c->card.dead_reason);
		free(c->card.held_by);
		free(c->card.hold_reason);
		return -1;
	}
	cs->c[cs->n++] = *c;
	return 0;
}

static void
cards_free(struct cards *cs)
{
	for (int i = 0; i < cs->n; i++) {
		free(cs->c[i].boot_id);
		free(cs->c[i].card.dead_reason);
		free(cs->c[i].card.held_by);
		free(cs->c[i].card.hold_reason);
	}
	cs->n = 0;
}

/* ---- tests ---- */

static void
test_fresh(void)
{
	char buf[512];
	struct store *st;
	sqlite3 *db;

	umask(022); /* what the store gets from a careless parent */
	st = open_ok("fresh.sqlite3");
	ok(st != NULL, "fresh open succeeds");
	if (!st)
		return;
	is_int(file_mode(path_in("fresh.sqlite3")), 0600, "fresh database is 0600");
	ok(put_one(st, 1, 0, JOB_QUEUED, NAN) == 0, "a first commit on a fresh store");
	is_int(file_mode(path_in("fresh.sqlite3-wal")), 0600, "-wal is 0600");
	is_int(file_mode(path_in("fresh.sqlite3-shm")), 0600, "-shm is 0600");
	is_int(umask(022), 022, "store_open restores the umask");
	db = side_open(path_in("fresh.sqlite3"));
	is_str(side_text(db, "PRAGMA journal_mode", buf, sizeof(buf)), "wal", "journal is WAL");
	is_int(side_int(db, "PRAGMA user_version"), STORE_SCHEMA_VERSION, "the current schema");
	is_int(side_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND "
	                    "name IN ('jobs_active', 'jobs_done', 'jobs_recent', "
	                    "'jobs_recent_multi', 'jobs_key')"),
	       5, "the five job indexes exist");
	is_int(side_int(db, "SELECT count(*) FROM pragma_table_info('cards')"), 14,
	       "cards has 14 columns");
	ok(strstr(side_columns(db, buf, sizeof(buf)),
	          ",updated_at,device,device_ids,reset_epochs,idempotency_key,end_reason,signal,"
	          "foreign_holders,silence_timeout") != NULL,
	   "jobs ends with updated_at, device, its cards, idempotency_key, end_reason, signal, "
	   "foreign_holders, silence_timeout");
	sqlite3_close(db);
	store_close(st);

	close(open(path_in("empty.sqlite3"), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
	st = open_ok("empty.sqlite3");
	ok(st != NULL, "an existing empty file opens");
	is_int(file_mode(path_in("empty.sqlite3")), 0600, "an existing 0644 file becomes 0600");
	db = side_open(path_in("empty.sqlite3"));
	is_int(side_int(db, "PRAGMA user_version"), STORE_SCHEMA_VERSION,
	       "empty file gets the current schema");
	sqlite3_close(db);
	store_close(st);
}

/* A job with every field set to a value unlike the defaults. */
static void
full_job(struct job *j)
{
	sched_job_init(j);
	strcpy(j->id, "0123456789abcdef0123456789abcdef");
	j->device = 3;
	j->status = JOB_RUNNING;
	j->mode = JOB_MODE_RESET;
	j->timeout = 77;
	j->silence_timeout = 33;
	j->repeat = 5;
	j->cmd = strdup("printf '%s\\n' \"h\xc3\xa9llo\" | tee x");
	j->cwd = strdup("/tmp/some dir");
	j->client_id = strdup("client-7");
	j->env_json = strdup("{\"A\":\"1\",\"B\":\"two\"}");
	j->error = strdup("an error");
	j->repeat_current = 3;
	j->repeat_completed = 2;
	j->first_iteration_elapsed = 1.25;
	j->per_iter_estimate = 1.5;
	j->submitted_at = 1700000000.125;
	j->started_at = 1700000001.5;
	j->finished_at = 1700000009.75;
	j->stop_requested_at = 1700000005.0;
	j->stop_escalated_at = 1700000008.0;
	j->elapsed = 8.25;
	j->exit_code = -9;
	j->has_exit_code = true;
	j->timed_out = true;
	j->log_truncated = true;
	j->log_size = 5000000000LL;
	j->dropped_log_bytes = 123456789012LL;
	j->reset_epoch = 42;
}

static void
check_full(const struct job *g, const struct job *w)
{
	is_str(g->id, w->id, "id");
	is_int(g->device, w->device, "device");
	is_int(g->status, w->status, "status");
	is_int(g->mode, w->mode, "mode");
	is_int(g->timeout, w->timeout, "timeout");
	is_int(g->silence_timeout, w->silence_timeout, "silence_timeout");
	is_int(g->repeat, w->repeat, "repeat");
	is_str(g->cmd, w->cmd, "cmd");
	is_str(g->cwd, w->cwd, "cwd");
	is_str(g->client_id, w->client_id, "client_id");
	ok(g->env_json == NULL, "get_job leaves env_json NULL");
	is_str(g->error, w->error, "error");
	is_int(g->repeat_current, w->repeat_current, "repeat_current");
	is_int(g->repeat_completed, w->repeat_completed, "repeat_completed");
	ok(g->first_iteration_elapsed == w->first_iteration_elapsed, "first_iteration_elapsed");
	ok(g->per_iter_estimate == w->per_iter_estimate, "per_iter_estimate");
	ok(g->submitted_at == w->submitted_at, "submitted_at");
	ok(g->started_at == w->started_at, "started_at");
	ok(g->finished_at == w->finished_at, "finished_at");
	ok(g->stop_requested_at == w->stop_requested_at, "stop_requested_at");
	ok(g->stop_escalated_at == w->stop_escalated_at, "stop_escalated_at");
	ok(g->elapsed == w->elapsed, "elapsed");
	ok(g->has_exit_code && g->exit_code == w->exit_code, "exit_code");
	ok(g->timed_out && g->log_truncated, "timed_out, log_truncated");
	is_int(g->log_size, w->log_size, "log_size (64-bit)");
	is_int(g->dropped_log_bytes, w->dropped_log_bytes, "dropped_log_bytes (64-bit)");
	is_int(g->reset_epoch, w->reset_epoch, "reset_epoch");
	ok(!g->dirty && !g->older && !g->newer && !g->more, "dirty and links clear");
}

static void
test_roundtrip(struct store *st)
{
	struct job w, g;
	char *out = NULL, *env = NULL;

	full_job(&w);
	ok(store_begin(st) == 0 && store_put_job(st, &w, "/logs/x/output") == 0 &&
	       store_commit(st) == 0,
	   "put + commit a full job");
	is_int(store_get_job(st, w.id, &g, &out), 1, "get_job finds it");
	check_full(&g, &w);
	is_str(out, "/logs/x/output", "output_file");
	is_int(store_get_env(st, w.id, &env), 1, "get_env finds it");
	is_str(env, w.env_json, "env_json stored");
	free(out);
	free(env);
	sched_job_clear(&g);
	sched_job_clear(&w);

	sched_job_init(&w); /* all unset: NULL strings, NaN times, no exit code */
	strcpy(w.id, "ffffffffffffffffffffffffffffffff");
	w.per_iter_estimate = NAN;
	ok(store_begin(st) == 0 && store_put_job(st, &w, NULL) == 0 && store_commit(st) == 0,
	   "put + commit an empty job");
	is_int(store_get_job(st, w.id, &g, &out), 1, "get_job finds the empty job");
	ok(isnan(g.submitted_at) && isnan(g.started_at) && isnan(g.finished_at) &&
	       isnan(g.elapsed) && isnan(g.first_iteration_elapsed) && isnan(g.stop_requested_at) &&
	       isnan(g.stop_escalated_at),
	   "NaN times come back NaN");
	ok(g.per_iter_estimate == SCHED_DEFAULT_ESTIMATE, "NULL estimate reads as the default");
	ok(!g.has_exit_code && !g.timed_out && !g.log_truncated, "no exit code, false flags");
	is_str(g.cmd, "", "NULL cmd reads as \"\"");
	is_str(g.cwd, "", "NULL cwd reads as \"\"");
	is_str(g.client_id, "anon", "NULL client_id reads as anon");
	ok(g.error == NULL && out == NULL, "NULL error and output_file stay NULL");
	is_int(store_get_env(st, w.id, &env), 1, "get_env finds the empty job");
	ok(env == NULL, "no env gives NULL");
	sched_job_clear(&g);
	is_int(store_get_job(st, "00000000000000000000000000000bad", &g, &out), 0,
	       "get_job of an unknown id is 0");
	ok(g.cmd == NULL && isnan(g.submitted_at) && out == NULL, "and leaves a blank job");
	is_int(store_get_env(st, "nope", &env), 0, "get_env of an unknown id is 0");
}

static void
test_upsert(struct store *st)
{
	struct job j, g;
	char *env = NULL;

	make_job(&j, 500, 1, JOB_QUEUED, NAN);
	j.env_json = strdup("{\"K\":\"V\"}");
	ok(store_begin(st) == 0 && store_put_job(st, &j, "/o1") == 0 && store_commit(st) == 0,
	   "insert with env");
	free(j.env_json);
	j.env_json = NULL;
	j.status = JOB_DONE;
	j.has_exit_code = true;
	j.exit_code = 3;
	j.finished_at = 2000.5;
	free(j.cmd);
	j.cmd = strdup("changed");
	ok(store_begin(st) == 0 && store_put_job(st, &j, "/o2") == 0 && store_commit(st) == 0,
	   "update without env");
	ok(store_get_job(st, j.id, &g, NULL) == 1 && g.status == JOB_DONE && g.exit_code == 3 &&
	       g.finished_at == 2000.5 && strcmp(g.cmd, "changed") == 0,
	   "upsert updated the row");
	sched_job_clear(&g);
	is_int(store_get_env(st, j.id, &env), 1, "env still there");
	is_str(env, "{\"K\":\"V\"}", "env kept when put with NULL");
	free(env);
	j.env_json = strdup("{}");
	ok(store_begin(st) == 0 && store_put_job(st, &j, "/o2") == 0 && store_commit(st) == 0,
	   "update with a new env");
	store_get_env(st, j.id, &env);
	is_str(env, "{}", "a new env replaces the old");
	free(env);
	sched_job_clear(&j);
}

static void
test_rollback(struct store *st)
{
	struct job j, g;

	make_job(&j, 600, 0, JOB_QUEUED, NAN);
	ok(store_begin(st) == 0 && store_put_job(st, &j, NULL) == 0, "put inside a transaction");
	is_int(store_get_job(st, j.id, &g, NULL), 1, "visible inside the transaction");
	sched_job_clear(&g);
	store_rollback(st);
	is_int(store_get_job(st, j.id, &g, NULL), 0, "rolled-back job is gone");
	is_int(store_commit(st), -1, "commit without begin fails");
	ok(strstr(store_errmsg(st), "no transaction") != NULL, "and says so: %s", store_errmsg(st));
	ok(store_begin(st) == 0 && store_begin(st) == -1, "begin twice fails");
	store_rollback(st);
	store_rollback(st); /* harmless when nothing is open */
	sched_job_clear(&j);
}

static void
test_recent(struct store *st)
{
	struct got g = {.n = 0};

	/* card 5 by finish time: 803, 801, 804 = 805 (tie: by seq), 800, 802 */
	static const double fin[] = {9000, 8800, 9500, 8700, 8900, 8900};
	for (int i = 0; i < 6; i++)
		put_one(st, 800 + i, 5, JOB_DONE, fin[i]);
	put_one(st, 806, 5, JOB_QUEUED, NAN);
	put_one(st, 810, 6, JOB_DONE, 1.0);
	is_int(store_load_recent(st, 5, 3, collect, &g), 3, "load_recent n=3");
	is_str(got_ids(&g), "805,800,802", "newest 3 by finish time, oldest first");
	got_free(&g);
	is_int(store_load_recent(st, 5, 5, collect, &g), 5, "load_recent n=5");
	is_str(got_ids(&g), "801,804,805,800,802", "ties broken by seq");
	got_free(&g);
	is_int(store_load_recent(st, 5, 0, collect, &g), 0, "n=0 loads nothing");
	is_int(store_load_recent(st, 6, 10, collect, &g), 1, "other card: its own job only");
	is_str(got_ids(&g), "810", "card 6's job");
	got_free(&g);
	is_int(store_load_recent(st, 9, 10, collect, &g), 0, "unknown card: none");
}

static void
test_active(void)
{
	struct store *st = open_ok("lists.sqlite3");
	static const int status[] = {JOB_QUEUED, JOB_DONE, JOB_RUNNING,
	                             JOB_QUEUED, JOB_DONE, JOB_QUEUED};
	struct got g = {.n = 0};
	struct job j;

	ok(store_begin(st) == 0, "begin for active jobs");
	for (int i = 0; i < (int)NELEM(status); i++) {
		make_job(&j, 700 + i, i % 2, status[i], status[i] == JOB_DONE ? 5000.0 + i : NAN);
		store_put_job(st, &j, NULL);
		sched_job_clear(&j);
	}
	make_job(&j, 700, 0, JOB_RUNNING, NAN); /* update an early one: seq must not change */
	store_put_job(st, &j, "/out/700");
	sched_job_clear(&j);
	ok(store_commit(st) == 0, "commit active jobs");
	is_int(store_load_active(st, collect, &g), 4, "load_active returns 4");
	is_str(got_ids(&g), "700,702,703,705", "queued + running only, in seq order");
	ok(g.jobs[0].status == JOB_RUNNING && g.jobs[1].status == JOB_RUNNING &&
	       g.jobs[2].status == JOB_QUEUED && g.jobs[3].device == 1,
	   "statuses and devices");
	is_str(g.out[0], "/out/700", "output_file passed to the callback");
	ok(g.jobs[0].env_json == NULL, "env_json not loaded");
	got_free(&g);
	test_recent(st);
	store_close(st);
}

static void
test_cards(struct store *st)
{
	struct card c0 = {.device = 0,
	                  .state = CARD_HEALTHY,
	                  .reset_epoch = 2,
	                  .last_reset_at = 123.5,
	                  .dead_since = NAN};
	struct card c1 = {.device = 1,
	                  .state = CARD_DEAD,
	                  .reset_pending = true,
	                  .reset_epoch = 7,
	                  .last_reset_at = NAN,
	                  .dead_since = 456.25,
	                  .dead_reason = "reset and health verification failed"};
	struct cards cs = {.n = 0};

	ok(store_begin(st) == 0 && store_put_card(st, &c1, "boot-b") == 0 &&
	       store_put_card(st, &c0, NULL) == 0 && store_commit(st) == 0,
	   "put two cards");
	is_int(store_load_cards(st, collect_card, &cs), 2, "load_cards returns 2");
	ok(cs.c[0].card.device == 0 && cs.c[0].card.state == CARD_HEALTHY && cs.c[0].card.reset_epoch == 2 &&
	       !cs.c[0].card.reset_pending && cs.c[0].card.last_reset_at == 123.5 &&
	       isnan(cs.c[0].card.dead_since) && !cs.c[0].card.dead_reason && !cs.c[0].boot_id,
	   "card 0 round trip (sorted first)");
	ok(cs.c[1].card.device == 1 && cs.c[1].card.state == CARD_DEAD && cs.c[1].card.reset_epoch == 7 &&
	       cs.c[1].card.reset_pending && isnan(cs.c[1].card.last_reset_at) &&
	       cs.c[1].card.dead_since == 456.25,
	   "card 1 round trip");
	is_str(cs.c[1].card.dead_reason, c1.dead_reason, "dead_reason");
	is_str(cs.c[1].boot_id, "boot-b", "boot_id");
	cards_free(&cs);
	c1.state = CARD_RESETTING;
	c1.dead_reason = NULL;
	c1.dead_since = NAN;
	ok(store_begin(st) == 0 && store_put_card(st, &c1, "boot-c") == 0 && store_commit(st) == 0,
	   "update card 1");
	is_int(store_load_cards(st, collect_card, &cs), 2, "still 2 cards");
	ok(cs.c[1].card.state == CARD_RESETTING && !cs.c[1].card.dead_reason && isnan(cs.c[1].card.dead_since),
	   "card 1 updated");
	is_str(cs.c[1].boot_id, "boot-c", "boot_id updated");
	ok(!cs.c[0].card.held && !cs.c[0].card.held_by && isnan(cs.c[0].card.held_at) && !cs.c[0].card.hold_reason,
	   "a card is not held unless held");
	cards_free(&cs);
	c0.held = true;
	c0.held_by = "alice";
	c0.held_at = 789.5;
	c0.hold_reason = "reseating the cable";
	ok(store_begin(st) == 0 && store_put_card(st, &c0, NULL) == 0 && store_commit(st) == 0,
	   "hold card 0");
	store_load_cards(st, collect_card, &cs);
	ok(cs.c[0].card.held && cs.c[0].card.held_at == 789.5, "the hold round trips");
	is_str(cs.c[0].card.held_by, "alice", "who held it");
	is_str(cs.c[0].card.hold_reason, "reseating the cable", "and why");
	cards_free(&cs);
	c0.held = false; /* released: the who and why are not kept */
	ok(store_begin(st) == 0 && store_put_card(st, &c0, NULL) == 0 && store_commit(st) == 0,
	   "release card 0");
	store_load_cards(st, collect_card, &cs);
	ok(!cs.c[0].card.held && !cs.c[0].card.held_by && isnan(cs.c[0].card.held_at) && !cs.c[0].card.hold_reason,
	   "released: no hold left");
	cards_free(&cs);
}

struct deleted {
	struct store *st;
	char ids[512];   /* the jobs deleted, as told to the callback */
	int found_at_cb; /* ids whose row get_job still finds inside the callback */
	int kept_err;    /* the errno told for a job whose folder stays, 0 if none */
};

static void
on_deleted(void *ctx, const char *id, int err)
{
	struct deleted *d = ctx;
	size_t len = strlen(d->ids);
	unsigned long n = strtoul(id, NULL, 16);
	struct job j;

	if (store_get_job(d->st, id, &j, NULL) == 1)
		d->found_at_cb++;
	sched_job_clear(&j);
	if (err) {
		d->kept_err = err;
		return;
	}
	snprintf(d->ids + len, sizeof(d->ids) - len, "%s%lu", len ? "," : "", n);
}

/* The folder of job n (make_job's id) in the log dir at dir. */
static const char *
folder_of(const char *dir, int n)
{
	static char buf[4][512];
	static int k;

	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%032x", dir, (unsigned)n);
	return buf[k];
}

/* folder_of(dir, n), made with a file in it. */
static const char *
job_folder_of(const char *dir, int n)
{
	const char *path = folder_of(dir, n);
	char file[600];
	FILE *f;

	mkdir(path, 0700);
	snprintf(file, sizeof(file), "%s/output", path);
	if ((f = fopen(file, "w"))) {
		fputs("output\n", f);
		fclose(f);
	}
	return path;
}

static void
test_retention(void)
{
	char warn[256];
	struct store_dir *dir = store_dir_open(path_in("retention-logs"), errbuf, sizeof(errbuf),
					       warn, sizeof(warn));
	struct store *st = open_ok("retention.sqlite3");
	struct deleted d = {.st = st, .ids = ""};
	const char *dp = dir ? store_dir_path(dir) : "";
	char six[512], seven[512], cmd[600];
	struct job j6;
	int n = 0;

	if (!ok(st != NULL && dir != NULL, "open for retention"))
		return;
	/* done: 1 @100, 2 @200, 3 @300, 4 @300, 5 @400, 6 @500; active 7, 8 "finished" at 1 */
	static const double fin[] = {100, 200, 300, 300, 400, 500};
	for (int i = 0; i < 6; i++)
		put_one(st, 1 + i, i % 2, JOB_DONE, fin[i]);
	put_one(st, 7, 0, JOB_QUEUED, 1.0);
	put_one(st, 8, 1, JOB_RUNNING, 1.0);
	for (int i = 1; i <= 7; i++)
		job_folder_of(dp, i); /* 8 has none: an absent folder is fine */
	snprintf(seven, sizeof(seven), "%s", job_folder_of(dp, 7));
	is_int(store_retention(st, dir, 0, -1, on_deleted, &d), 0, "no limits: nothing deleted");
	is_int(store_retention(st, dir, 250, -1, on_deleted, &d), 2, "by age: 2 deleted");
	is_str(d.ids, "1,2", "by age: finished before 250");
	is_int(d.found_at_cb, 2, "the callback runs while the rows still exist");
	ok(access(folder_of(dp, 1), F_OK) != 0 && access(folder_of(dp, 2), F_OK) != 0 &&
	   access(folder_of(dp, 3), F_OK) == 0,
	   "the folders of deleted jobs go, the others stay");
	d.ids[0] = '\0';
	is_int(store_retention(st, dir, 0, 2, on_deleted, &d), 2, "keep 2: 2 deleted");
	ok(strcmp(d.ids, "3,4") == 0 || strcmp(d.ids, "4,3") == 0,
	   "keep 2: the tie at 300 "
	   "goes, newest 5, 6 stay (%s)",
	   d.ids);
	d.ids[0] = '\0';
	is_int(store_retention(st, dir, 450, 5, on_deleted, &d), 1, "age and count together");
	is_str(d.ids, "5", "the one older than 450");
	d.ids[0] = '\0';
	/* job 6's folder holds more than its files: it stays, and its row for the next pass */
	snprintf(six, sizeof(six), "%s", job_folder_of(dp, 6));
	snprintf(cmd, sizeof(cmd), "%s/d", six);
	mkdir(cmd, 0700);
	is_int(store_retention(st, dir, 0, 0, on_deleted, &d), 0, "a job whose folder stays is kept");
	ok(store_get_job(st, "00000000000000000000000000000006", &j6, NULL) == 1,
	   "its row is still there");
	sched_job_clear(&j6);
	ok(d.kept_err != 0, "and the callback is told why its folder stays (%s)",
	   strerror(d.kept_err));
	ok(access(six, F_OK) == 0, "the folder is still there");
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/d'", six);
	ok(system(cmd) == 0, "the obstacle cleared");
	d.kept_err = 0;
	is_int(store_retention(st, dir, 0, 0, on_deleted, &d), 1, "keep 0 deletes every done job");
	is_str(d.ids, "6", "the last done job, once its folder goes");
	ok(access(six, F_OK) != 0 && d.kept_err == 0, "its folder with it");
	ok(access(seven, F_OK) == 0, "an active job's folder stays");
	is_int(store_load_active(st, count_only, &n), 2, "active jobs untouched");
	is_int(store_retention(st, NULL, 1e12, 0, NULL, NULL), 0, "nothing left; NULL callback ok");
	ok(store_begin(st) == 0 && store_retention(st, NULL, 1, 0, NULL, NULL) == -1,
	   "retention inside an open transaction is refused");
	store_rollback(st);
	store_close(st);
	store_dir_close(dir);
}

static void
test_reopen(struct store *st)
{
	struct cards cs = {.n = 0};
	struct job g;
	char *env = NULL;

	store_close(st);
	st = open_ok("main.sqlite3");
	if (!ok(st != NULL, "reopen"))
		return;
	is_int(store_get_job(st, "0123456789abcdef0123456789abcdef", &g, NULL), 1,
	       "the full job persisted");
	ok(g.log_size == 5000000000LL && g.exit_code == -9 && strcmp(g.cwd, "/tmp/some dir") == 0,
	   "with its fields");
	sched_job_clear(&g);
	store_get_env(st, "0123456789abcdef0123456789abcdef", &env);
	is_str(env, "{\"A\":\"1\",\"B\":\"two\"}", "and its env");
	free(env);
	is_int(store_load_cards(st, collect_card, &cs), 2, "cards persisted");
	cards_free(&cs);
	store_close(st);
}

/* The earlier service's schema, exactly as it creates it (its constraints included). */
static const char old_schema_sql[] =
    "CREATE TABLE IF NOT EXISTS jobs ("
    "    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, cmd TEXT NOT NULL,"
    "    cwd TEXT NOT NULL, timeout INTEGER NOT NULL, repeat INTEGER NOT NULL,"
    "    env_json TEXT NOT NULL, mode TEXT NOT NULL, client_id TEXT NOT NULL,"
    "    reset_epoch INTEGER NOT NULL, submitted REAL NOT NULL, status TEXT NOT NULL,"
    "    exit_code INTEGER, elapsed REAL, output_file TEXT NOT NULL, started_at REAL,"
    "    finished_at REAL, repeat_current INTEGER NOT NULL, repeat_completed INTEGER NOT NULL,"
    "    first_iteration_elapsed REAL, per_iter_estimate_sec REAL NOT NULL,"
    "    stop_requested_at REAL, stop_escalated_at REAL, log_size INTEGER NOT NULL,"
    "    log_truncated INTEGER NOT NULL, dropped_log_bytes INTEGER NOT NULL,"
    "    timed_out INTEGER NOT NULL, error TEXT, updated_at REAL NOT NULL);"
    "CREATE TABLE IF NOT EXISTS device_state ("
    "    singleton INTEGER PRIMARY KEY CHECK(singleton = 1), state TEXT NOT NULL,"
    "    reset_epoch INTEGER NOT NULL, reset_pending INTEGER NOT NULL, boot_id TEXT NOT NULL,"
    "    last_reset_at REAL, dead_since REAL, dead_reason TEXT, updated_at REAL NOT NULL);"
    "CREATE INDEX idx_jobs_status_seq ON jobs(status, seq);"
    "CREATE INDEX idx_jobs_finished ON jobs(finished_at DESC);";

/*
 * Rows as the earlier service writes them: every NOT NULL column, env_json '{}' for no env,
 * REAL epoch times, a queued job's output_file named before the file exists.
 */
static const char old_rows_sql[] =
    "INSERT INTO jobs (id, cmd, cwd, timeout, repeat, env_json, mode, client_id, "
    "reset_epoch, submitted, status, exit_code, elapsed, output_file, started_at, "
    "finished_at, repeat_current, repeat_completed, first_iteration_elapsed, "
    "per_iter_estimate_sec, stop_requested_at, stop_escalated_at, log_size, log_truncated, "
    "dropped_log_bytes, timed_out, error, updated_at) VALUES "
    "('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 'make test', '/src', 3600, 1, '{}', 'run', "
    " 'alice', 0, 1600000000.5, 'done', 0, 12.5, '/logs/a/output', 1600000001, "
    " 1600000013.5, 1, 1, 12.49, 12.49, NULL, NULL, 4096, 0, 0, 0, NULL, 1600000013.5), "
    "('bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', 'sleep 100', '', 60, 2, '{}', 'run', 'bob', "
    " 1, 1600000100, 'running', NULL, NULL, '/logs/b/output', 1600000101, NULL, 1, 0, "
    " NULL, 10.0, NULL, NULL, 0, 0, 0, 0, NULL, 1600000101), "
    "('cccccccccccccccccccccccccccccccc', 'true', '/', 60, 1, '{\"X\": \"y\"}', 'run', "
    " 'cli-1000', 1, 1600000200, 'queued', NULL, NULL, '/logs/c/output', NULL, NULL, 0, 0, "
    " NULL, 10.0, NULL, NULL, 0, 0, 0, 0, NULL, 1600000200);";

static int
build_old(const char *name, int version, bool with_state)
{
	char sql[256];
	sqlite3 *db = side_open(path_in(name));
	int rc;

	if (!db)
		return -1;
	rc = side_exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL");
	rc |= side_exec(db, old_schema_sql);
	rc |= side_exec(db, old_rows_sql);
	if (with_state)
		rc |= side_exec(db, "INSERT INTO device_state VALUES (1, 'dead', 4, 0, 'boot-old', "
		                    "1599999000.5, 1600000050.25, 'reset failed', 1600000050.25)");
	else
		rc |= side_exec(db, "DROP TABLE device_state");
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", version);
	rc |= side_exec(db, sql);
	sqlite3_close(db);
	return rc == SQLITE_OK ? 0 : -1;
}

/* Every jobs column with its type, NOT NULL flag and default, in table order. */
#define TABLE_SHAPE                                                                                \
	"SELECT group_concat(name || ' ' || type || ' ' || \"notnull\" || ' ' || "                 \
	"ifnull(dflt_value, '-'), ',') FROM pragma_table_info('jobs')"

static void
check_migrated_db(const char *name)
{
	char fresh[2048], migrated[2048];
	sqlite3 *db = side_open(path_in(name)), *fdb = side_open(path_in("fresh.sqlite3"));

	is_int(side_int(db, "PRAGMA user_version"), STORE_SCHEMA_VERSION,
	       "migrated to the current schema");
	is_int(side_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'device_state'"), 0,
	       "device_state dropped");
	is_int(side_int(db, "SELECT count(*) FROM jobs WHERE device = 0"), 3, "all jobs on card 0");
	is_str(side_columns(db, migrated, sizeof(migrated)),
	       side_columns(fdb, fresh, sizeof(fresh)),
	       "migrated jobs columns equal a fresh table's");
	is_str(side_text(db, TABLE_SHAPE, migrated, sizeof(migrated)),
	       side_text(fdb, TABLE_SHAPE, fresh, sizeof(fresh)),
	       "with the same types and constraints (no NOT NULL left from the old table)");
	is_int(side_int(db, "SELECT count(*) FROM sqlite_master WHERE name LIKE 'idx_jobs_%'"), 0,
	       "the old table's indexes went with it");
	is_int(side_int(db, "SELECT count(*) FROM sqlite_sequence WHERE name = 'jobs' AND "
	                    "seq >= (SELECT max(seq) FROM jobs)"),
	       1, "the AUTOINCREMENT counter is the jobs table's");
	is_int(side_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'jobs_new'"), 0,
	       "no table left from the rebuild");
	is_int(side_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND "
	                    "name LIKE 'jobs_%'"),
	       5, "indexes created");
	sqlite3_close(db);
	sqlite3_close(fdb);
}

static void
test_migration(void)
{
	struct got g = {.n = 0};
	struct cards cs = {.n = 0};
	struct store *st;
	struct job j;
	char *out = NULL, *env = NULL;

	ok(build_old("old.sqlite3", 2, true) == 0, "build a v2 fixture");
	st = open_ok("old.sqlite3");
	if (!ok(st != NULL, "a v2 database opens (migrated)"))
		return;
	is_int(store_load_active(st, collect, &g), 2, "running + queued loaded");
	ok(g.n == 2 && g.jobs[0].id[0] == 'b' && g.jobs[0].status == JOB_RUNNING &&
	       g.jobs[0].device == 0 && g.jobs[0].reset_epoch == 1 && g.jobs[0].repeat == 2,
	   "the running job, on card 0");
	ok(g.n == 2 && g.jobs[1].id[0] == 'c' && g.jobs[1].status == JOB_QUEUED &&
	       g.jobs[1].device == 0 && strcmp(g.jobs[1].client_id, "cli-1000") == 0 &&
	       isnan(g.jobs[1].started_at),
	   "the queued job, on card 0");
	if (g.n == 2) { /* what start-up recovery does first: the running job ends, env kept */
		g.jobs[0].status = JOB_DONE;
		g.jobs[0].has_exit_code = true;
		g.jobs[0].exit_code = -1;
		g.jobs[0].finished_at = 1600000150;
		bool saved = store_begin(st) == 0 && store_put_job(st, &g.jobs[0], g.out[0]) == 0 &&
		             store_commit(st) == 0;

		ok(saved, "a migrated job saves again with its env left as stored (%s)",
		   saved ? "saved" : store_errmsg(st));
	}
	got_free(&g);
	is_int(store_get_env(st, "cccccccccccccccccccccccccccccccc", &env), 1, "queued job's env");
	is_str(env, "{\"X\": \"y\"}", "reads back as the earlier service wrote it");
	free(env);
	is_int(store_get_env(st, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", &env), 1, "saved job's env");
	is_str(env, "{}", "is kept by the save");
	free(env);
	is_int(store_get_job(st, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", &j, &out), 1, "the done job");
	ok(j.status == JOB_DONE && j.has_exit_code && j.exit_code == 0 && j.elapsed == 12.5 &&
	       j.finished_at == 1600000013.5 && j.log_size == 4096 &&
	       strcmp(j.cmd, "make test") == 0,
	   "done job fields");
	is_str(out, "/logs/a/output", "done job output_file");
	free(out);
	sched_job_clear(&j);
	is_int(store_load_recent(st, 0, 10, collect, &g), 2, "recent on card 0: the two done");
	got_free(&g);
	is_int(store_load_cards(st, collect_card, &cs), 1, "one card row");
	ok(cs.n == 1 && cs.c[0].card.device == 0 && cs.c[0].card.state == CARD_DEAD &&
	       cs.c[0].card.reset_epoch == 4 && cs.c[0].card.dead_since == 1600000050.25 &&
	       cs.c[0].card.last_reset_at == 1599999000.5,
	   "card 0 is the old dead state");
	is_str(cs.n ? cs.c[0].boot_id : NULL, "boot-old", "with the old boot id");
	is_str(cs.n ? cs.c[0].card.dead_reason : NULL, "reset failed", "and dead_reason");
	cards_free(&cs);
	ok(put_one(st, 900, 1, JOB_QUEUED, NAN) == 0, "the migrated store takes writes");
	store_close(st);
	check_migrated_db("old.sqlite3");
	st = open_ok("old.sqlite3");
	ok(st != NULL, "a migrated database reopens");
	store_close(st);

	ok(build_old("old1.sqlite3", 1, false) == 0, "build a v1 fixture without device_state");
	st = open_ok("old1.sqlite3");
	ok(st != NULL && store_load_cards(st, collect_card, &cs) == 0, "v1 migrates, no cards");
	store_close(st);
}

/* The jobs table as version 3 wrote it (versions 4 and 5 add columns), without its ")". */
#define V3_JOBS                                                                                    \
	"CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, "      \
	"cmd TEXT, cwd TEXT, timeout INTEGER, repeat INTEGER, env_json TEXT, mode TEXT, "          \
	"client_id TEXT, reset_epoch INTEGER, submitted REAL, status TEXT, exit_code INTEGER, "    \
	"elapsed REAL, output_file TEXT, started_at REAL, finished_at REAL, "                      \
	"repeat_current INTEGER, repeat_completed INTEGER, first_iteration_elapsed REAL, "          \
	"per_iter_estimate_sec REAL, stop_requested_at REAL, stop_escalated_at REAL, "             \
	"log_size INTEGER, log_truncated INTEGER, dropped_log_bytes INTEGER, timed_out INTEGER, "  \
	"error TEXT, updated_at REAL, device INTEGER NOT NULL DEFAULT 0"

/* A version 3 database (before holds) gets the hold columns in place, its rows kept. */
static void
test_migration_v3(void)
{
	char fresh[1024], migrated[1024];
	struct cards cs = {.n = 0};
	struct card c = {.device = 1,
	                 .state = CARD_HEALTHY,
	                 .held = true,
	                 .held_by = "bob",
	                 .held_at = 5.0,
	                 .last_reset_at = NAN,
	                 .dead_since = NAN};
	struct store *st;
	sqlite3 *db = side_open(path_in("v3.sqlite3")), *fdb;

	/* the jobs table as version 3 wrote it */
	side_exec(db, V3_JOBS ")");
	side_exec(db, "CREATE TABLE cards (device INTEGER PRIMARY KEY, state TEXT, "
	              "reset_epoch INTEGER, reset_pending INTEGER, boot_id TEXT, "
	              "last_reset_at REAL, dead_since REAL, dead_reason TEXT, updated_at REAL)");
	side_exec(db, "INSERT INTO cards VALUES (1, 'dead', 3, 0, 'boot-x', NULL, 50.5, 'gone', "
	              "50.5); PRAGMA user_version = 3");
	sqlite3_close(db);
	st = open_ok("v3.sqlite3");
	if (!ok(st != NULL, "a v3 database opens (migrated)"))
		return;
	is_int(store_load_cards(st, collect_card, &cs), 1, "its card row is kept");
	ok(cs.n == 1 && cs.c[0].card.state == CARD_DEAD && cs.c[0].card.reset_epoch == 3 && !cs.c[0].card.held &&
	       isnan(cs.c[0].card.held_at),
	   "dead as it was, and not held");
	is_str(cs.n ? cs.c[0].card.dead_reason : NULL, "gone", "with its dead_reason");
	cards_free(&cs);
	ok(store_begin(st) == 0 && store_put_card(st, &c, "boot-y") == 0 && store_commit(st) == 0,
	   "the migrated store takes a hold");
	store_close(st);
	db = side_open(path_in("v3.sqlite3"));
	fdb = side_open(path_in("fresh.sqlite3"));
	is_int(side_int(db, "PRAGMA user_version"), STORE_SCHEMA_VERSION,
	       "v3 becomes the current schema");
	is_str(side_columns(db, migrated, sizeof(migrated)), side_columns(fdb, fresh, sizeof(fresh)),
	       "migrated jobs columns equal a fresh table's");
	is_str(side_text(db, "SELECT group_concat(name) FROM pragma_table_info('cards')", migrated,
	                 sizeof(migrated)),
	       side_text(fdb, "SELECT group_concat(name) FROM pragma_table_info('cards')", fresh,
	                 sizeof(fresh)),
	       "migrated cards columns equal a fresh table's");
	is_str(
	    side_text(db, "SELECT held_by FROM cards WHERE device = 1", migrated, sizeof(migrated)),
	    "bob", "the hold is stored");
	sqlite3_close(db);
	sqlite3_close(fdb);
}

/* A job of several cards keeps its cards and their epochs; a job of one card writes neither. */
static void
test_multi_card(void)
{
	struct store *st = open_ok("multi.sqlite3");
	struct got g = {.n = 0};
	struct job j, back;
	char *out = NULL, buf[128];
	sqlite3 *db;

	make_job(&j, 1200, 0, JOB_QUEUED, NAN);
	ok(sched_job_set_cards(&j, (int[]){7, 2, 5}, 3) == 0, "a job of cards 7, 2, 5");
	j.reset_epoch = 11;
	j.more[0].reset_epoch = 4; /* card 5 */
	j.more[1].reset_epoch = 9; /* card 7 */
	ok(store_begin(st) == 0 && store_put_job(st, &j, NULL) == 0 && store_commit(st) == 0,
	   "put + commit it");
	is_int(store_get_job(st, j.id, &back, &out), 1, "get_job finds it");
	ok(back.device == 2 && back.nmore == 2 && back.more[0].device == 5 &&
	       back.more[1].device == 7,
	   "its cards come back ascending, the first in device");
	ok(back.reset_epoch == 11 && back.more[0].reset_epoch == 4 && back.more[1].reset_epoch == 9,
	   "with each card's epoch");
	sched_job_clear(&back);
	free(out);
	is_int(store_load_active(st, collect, &g), 1, "load_active gives it");
	ok(g.n == 1 && g.jobs[0].nmore == 2 && g.jobs[0].more[1].device == 7, "with its cards");
	got_free(&g);
	put_one(st, 1201, 5, JOB_QUEUED, NAN);
	db = side_open(path_in("multi.sqlite3"));
	is_str(side_text(db, "SELECT device_ids || ' ' || reset_epochs FROM jobs WHERE id = "
	                     "'000000000000000000000000000004b0'", buf, sizeof(buf)),
	       "2,5,7 11,4,9", "stored as lists in card order");
	is_int(side_int(db, "SELECT count(*) FROM jobs WHERE id = '000000000000000000000000000004b1' "
	                    "AND device_ids IS NULL AND reset_epochs IS NULL"),
	       1, "a job of one card stores no list");

	/* /status's recent list of every card it ran on, once each */
	j.status = JOB_DONE;
	j.has_exit_code = true;
	j.finished_at = 3000;
	store_begin(st);
	store_put_job(st, &j, NULL);
	store_commit(st);
	put_one(st, 1202, 5, JOB_DONE, 2000);
	put_one(st, 1203, 2, JOB_DONE, 4000);
	is_int(store_load_recent(st, 5, 10, collect, &g), 2, "card 5: its own and the multi-card job");
	is_str(got_ids(&g), "1202,1200", "oldest first");
	got_free(&g);
	is_int(store_load_recent(st, 2, 10, collect, &g), 2, "card 2 (its first card): listed once");
	is_str(got_ids(&g), "1200,1203", "by finish time");
	got_free(&g);
	is_int(store_load_recent(st, 7, 1, collect, &g), 1, "card 7: the newest 1");
	is_str(got_ids(&g), "1200", "the multi-card job");
	got_free(&g);
	is_int(store_load_recent(st, 3, 10, collect, &g), 0, "a card it does not name: none");
	is_int(store_load_recent(st, 5, 1, collect, &g), 1, "n counts both kinds together");
	is_str(got_ids(&g), "1200", "the newest of them");
	got_free(&g);

	/* a damaged list is refused, not read as other cards */
	side_exec(db, "UPDATE jobs SET device_ids = '2,7,5' WHERE id = "
	              "'000000000000000000000000000004b0'");
	is_int(store_get_job(st, j.id, &back, &out), -1, "cards out of order: refused");
	ok(strstr(store_errmsg(st), "damaged") != NULL, "saying so: %s", store_errmsg(st));
	side_exec(db, "UPDATE jobs SET device_ids = '3,5,7' WHERE id = "
	              "'000000000000000000000000000004b0'");
	is_int(store_get_job(st, j.id, &back, &out), -1, "a first card other than device: refused");
	side_exec(db, "UPDATE jobs SET device_ids = '2,5,7', reset_epochs = '11,4' WHERE id = "
	              "'000000000000000000000000000004b0'");
	is_int(store_get_job(st, j.id, &back, &out), -1, "epochs not one per card: refused");
	sqlite3_close(db);
	sched_job_clear(&j);
	store_close(st);
}

/* A version 4 database (before multi-card jobs) gets the card list columns, its jobs kept. */
static void
test_migration_v4(void)
{
	char fresh[1024], migrated[1024];
	struct got g = {.n = 0};
	struct store *st;
	sqlite3 *db = side_open(path_in("v4.sqlite3")), *fdb;

	side_exec(db, V3_JOBS ")");
	side_exec(db, "CREATE TABLE cards (device INTEGER PRIMARY KEY, state TEXT, "
	              "reset_epoch INTEGER, reset_pending INTEGER, boot_id TEXT, last_reset_at REAL, "
	              "dead_since REAL, dead_reason TEXT, updated_at REAL, held INTEGER NOT NULL "
	              "DEFAULT 0, held_by TEXT, held_at REAL, hold_reason TEXT)");
	side_exec(db, "INSERT INTO jobs (id, cmd, status, device, reset_epoch, submitted) VALUES "
	              "('0000000000000000000000000000000a', 'true', 'queued', 1, 2, 10.5); "
	              "PRAGMA user_version = 4");
	sqlite3_close(db);
	st = open_ok("v4.sqlite3");
	if (!ok(st != NULL, "a v4 database opens (migrated)"))
		return;
	is_int(store_load_active(st, collect, &g), 1, "its queued job is kept");
	ok(g.n == 1 && g.jobs[0].device == 1 && g.jobs[0].nmore == 0 && g.jobs[0].reset_epoch == 2,
	   "a job of one card, on card 1");
	got_free(&g);
	store_close(st);
	db = side_open(path_in("v4.sqlite3"));
	fdb = side_open(path_in("fresh.sqlite3"));
	is_int(side_int(db, "PRAGMA user_version"), STORE_SCHEMA_VERSION,
	       "v4 becomes the current schema");
	is_str(side_columns(db, migrated, sizeof(migrated)), side_columns(fdb, fresh, sizeof(fresh)),
	       "migrated jobs columns equal a fresh table's");
	is_int(side_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'jobs_recent_multi'"), 1,
	       "and the index of multi-card jobs exists");
	sqlite3_close(db);
	sqlite3_close(fdb);
}

/*
 * Version 6: a job's idempotency key and how it ended round-trip; a key finds its job and is
 * unique (a second job with it fails the commit); the last write is the newest row's time; a
 * v5 file gets the columns, its jobs without a key or an end name.
 */
static void
test_keys_and_ends(void)
{
	struct store *st = open_ok("keys.sqlite3");
	struct job j, back;
	char id[33] = "", *out = NULL;
	sqlite3 *db;
	double before = (double)time(NULL) - 1;

	make_job(&j, 1300, 0, JOB_DONE, 2000.0);
	j.idempotency_key = strdup("cli-abc.1");
	j.owner_uid = 1000;
	j.end_reason = JOB_END_SIGNAL;
	j.end_signal = 1;
	j.exit_code = -1;
	j.has_exit_code = true;
	ok(store_begin(st) == 0 && store_put_job(st, &j, NULL) == 0 && store_commit(st) == 0,
	   "a job with a key and an end is saved");
	is_int(store_get_job(st, j.id, &back, &out), 1, "and read back");
	ok(back.idempotency_key && strcmp(back.idempotency_key, "cli-abc.1") == 0 &&
	       back.end_reason == JOB_END_SIGNAL && back.end_signal == 1 && back.exit_code == -1 &&
	       back.owner_uid == 1000,
	   "with its key, owner, end_reason signal and signal 1 (not 'no exit code')");
	sched_job_clear(&back);
	free(out);
	is_int(store_find_key(st, "cli-abc.1", 1000, id), 1, "its owner's key finds it");
	is_str(id, j.id, "the job's id");
	is_int(store_find_key(st, "cli-other", 1000, id), 0, "another key finds nothing");
	is_int(store_find_key(st, "cli-abc.1", 1001, id), 0, "nor another owner's same key");
	ok(store_last_write(st) >= before, "the last write is the time of its row");
	sched_job_clear(&j);
	make_job(&j, 1301, 0, JOB_QUEUED, NAN);
	j.idempotency_key = strdup("cli-abc.1");
	j.owner_uid = 1000;
	ok(store_begin(st) == 0 && (store_put_job(st, &j, NULL) != 0 || store_commit(st) != 0),
	   "a second job of the owner with the same key is refused by the store");
	store_rollback(st);
	j.owner_uid = 1001;
	ok(store_begin(st) == 0 && store_put_job(st, &j, NULL) == 0 && store_commit(st) == 0,
	   "another owner's job with the key is not");
	sched_job_clear(&j);
	store_close(st);

	db = side_open(path_in("v5.sqlite3"));
	side_exec(db, V3_JOBS ", device_ids TEXT, reset_epochs TEXT)");
	side_exec(db, "INSERT INTO jobs (id, cmd, status, exit_code, device, submitted, "
	              "finished_at, updated_at) VALUES ('0000000000000000000000000000000b', 'true', "
	              "'done', -1, 0, 10.5, 11.5, 12.5); PRAGMA user_version = 5");
	sqlite3_close(db);
	st = open_ok("v5.sqlite3");
	if (!ok(st != NULL, "a v5 database opens (migrated)"))
		return;
	is_int(store_get_job(st, "0000000000000000000000000000000b", &back, NULL), 1,
	       "its job is kept");
	ok(back.end_reason == JOB_END_NONE && back.end_signal == 0 && !back.idempotency_key &&
	       back.exit_code == -1,
	   "with no end name, signal or key");
	sched_job_clear(&back);
	ok(store_last_write(st) == 12.5, "the last write of a migrated file is its newest row's");
	store_close(st);
	db = side_open(path_in("v5.sqlite3"));
	is_int(side_int(db, "PRAGMA user_version"), STORE_SCHEMA_VERSION,
	       "v5 becomes the current schema");
	is_int(side_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'jobs_key'"), 1,
	       "with the index of keys");
	sqlite3_close(db);
}

/*
 * Version 7: a job's silence timeout round-trips (test_roundtrip checks it with every field);
 * a v6 file gets the column in place, its queued job kept with the watchdog off (0), and
 * takes a job with one.
 */
static void
test_migration_v6(void)
{
	char fresh[1024], migrated[1024];
	struct got g = {.n = 0};
	struct job j;
	struct store *st;
	sqlite3 *db = side_open(path_in("v6.sqlite3")), *fdb;

	side_exec(db, V3_JOBS ", device_ids TEXT, reset_epochs TEXT, idempotency_key TEXT, "
	              "end_reason TEXT, signal INTEGER)");
	side_exec(db, "INSERT INTO jobs (id, cmd, status, device, timeout, submitted) VALUES "
	              "('0000000000000000000000000000000c', 'true', 'queued', 0, 60, 10.5); "
	              "PRAGMA user_version = 6");
	sqlite3_close(db);
	st = open_ok("v6.sqlite3");
	if (!ok(st != NULL, "a v6 database opens (migrated)"))
		return;
	is_int(store_load_active(st, collect, &g), 1, "its queued job is kept");
	ok(g.n == 1 && g.jobs[0].timeout == 60 && g.jobs[0].silence_timeout == 0,
	   "with its timeout, and no silence timeout (off)");
	got_free(&g);
	make_job(&j, 1400, 0, JOB_QUEUED, NAN);
	j.silence_timeout = 90;
	ok(store_begin(st) == 0 && store_put_job(st, &j, NULL) == 0 && store_commit(st) == 0,
	   "the migrated store takes a job with a silence timeout");
	sched_job_clear(&j);
	store_close(st);
	db = side_open(path_in("v6.sqlite3"));
	fdb = side_open(path_in("fresh.sqlite3"));
	is_int(side_int(db, "PRAGMA user_version"), 7, "v6 becomes user_version 7");
	is_str(side_columns(db, migrated, sizeof(migrated)), side_columns(fdb, fresh, sizeof(fresh)),
	       "migrated jobs columns equal a fresh table's");
	is_int(side_int(db, "SELECT silence_timeout FROM jobs WHERE id = "
	                    "'00000000000000000000000000000578'"),
	       90, "the silence timeout is stored");
	sqlite3_close(db);
	sqlite3_close(fdb);
}

static void
test_refusals(void)
{
	sqlite3 *db = side_open(path_in("prev2.sqlite3"));
	static const char text[] = "a text file of 120 bytes: not a database at all, whatever "
	                           "its name says; SQLite must recognise that from its header\n";
	bool refused = false;
	int fd;

	side_exec(db, "CREATE TABLE jobs (id TEXT PRIMARY KEY, cmd TEXT, status TEXT, "
	              "exit_code INTEGER); PRAGMA user_version = 1");
	sqlite3_close(db);
	ok(store_open(path_in("prev2.sqlite3"), false, errbuf, sizeof(errbuf), &refused) == NULL,
	   "pre-v2 refused");
	ok(refused, "for good (refused)");
	ok(strstr(errbuf, "pre-v2") && strstr(errbuf, "use a fresh logs-v2/"), "message: %s",
	   errbuf);
	ok(!strstr(errbuf, tmpdir), "the message leaves naming the file to the caller");
	ok(strstr(errbuf, "seq") && strstr(errbuf, "log_truncated") && !strstr(errbuf, "status"),
	   "it names the missing columns");
	db = side_open(path_in("prev2.sqlite3"));
	is_int(side_int(db, "PRAGMA user_version"), 1, "the refused file is untouched");
	is_int(side_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'cards'"), 0,
	       "no cards table added");
	sqlite3_close(db);

	db = side_open(path_in("newer.sqlite3"));
	side_exec(db, "CREATE TABLE jobs (seq INTEGER PRIMARY KEY); PRAGMA user_version = 99");
	sqlite3_close(db);
	refused = false;
	ok(store_open(path_in("newer.sqlite3"), false, errbuf, sizeof(errbuf), &refused) == NULL,
	   "a newer version (99) refused");
	ok(refused, "for good (refused)");
	ok(strstr(errbuf, "99") && strstr(errbuf, "fresh logs-v2/"),
	   "message: %s", errbuf);

	fd = open(path_in("text.sqlite3"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ok(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text),
	   "a text file where the database belongs");
	if (fd >= 0)
		close(fd);
	refused = false;
	ok(store_open(path_in("text.sqlite3"), false, errbuf, sizeof(errbuf), &refused) == NULL &&
	       refused,
	   "not a database: refused for good: %s", errbuf);

	refused = true;
	ok(store_open(path_in("nodir/x.sqlite3"), false, errbuf, sizeof(errbuf), &refused) ==
	           NULL &&
	       !refused,
	   "missing directory: fails, but may pass: %s", errbuf);
}

/* A full disk at open is a failure that may pass: the same call succeeds once it clears. */
static void
test_open_failure_passes(void)
{
	struct store *st;
	bool refused = true;

	shim_fail_rc = SQLITE_FULL;
	st = store_open(path_in("openfull.sqlite3"), true, errbuf, sizeof(errbuf), &refused);
	shim_fail_rc = 0;
	ok(st == NULL, "a fresh file cannot be set up on a full disk");
	ok(!refused, "not refused: it may pass");
	ok(strstr(errbuf, "full") && !strstr(errbuf, tmpdir), "message without the path: %s",
	   errbuf);
	st = store_open(path_in("openfull.sqlite3"), true, errbuf, sizeof(errbuf), &refused);
	ok(st != NULL, "opens once the disk has room: %s", st ? "" : errbuf);
	store_close(st);
}

/* Writes fail while shim_fail_rc is set; commit fails, later commits succeed. */
static void
test_write_failure(void)
{
	struct store *st = open_ok("full.sqlite3");
	struct job j, g;
	static const int rcs[] = {SQLITE_FULL, SQLITE_IOERR_WRITE};
	static const char *const msgs[] = {"database or disk is full", "disk I/O error"};

	if (!ok(st != NULL, "open for write failures"))
		return;
	for (int k = 0; k < 2; k++) {
		make_job(&j, 1000 + k, 0, JOB_QUEUED, NAN);
		ok(store_begin(st) == 0 && store_put_job(st, &j, NULL) == 0,
		   "put before the fault");
		shim_fail_rc = rcs[k];
		is_int(store_commit(st), -1, "commit fails (%s)", msgs[k]);
		ok(strstr(store_errmsg(st), msgs[k]) != NULL, "message: %s", store_errmsg(st));
		shim_fail_rc = 0;
		is_int(store_get_job(st, j.id, &g, NULL), 0, "the failed commit left nothing");
		sched_job_clear(&g);
		ok(store_begin(st) == 0 && store_put_job(st, &j, NULL) == 0 &&
		       store_commit(st) == 0,
		   "the same commit succeeds once the condition clears");
		is_int(store_get_job(st, j.id, &g, NULL), 1, "and the job is there");
		sched_job_clear(&g);
		sched_job_clear(&j);
	}

	/* a row bigger than the page cache spills during the put itself */
	make_job(&j, 1100, 0, JOB_QUEUED, NAN);
	free(j.cmd);
	j.cmd = malloc(8 << 20);
	memset(j.cmd, 'x', (8 << 20) - 1);
	j.cmd[(8 << 20) - 1] = '\0';
	ok(store_begin(st) == 0, "begin before a spilling put");
	shim_fail_rc = SQLITE_FULL;
	is_int(store_put_job(st, &j, NULL), -1, "an 8 MiB put fails when the disk is full");
	shim_fail_rc = 0;
	sched_job_clear(&j);
	make_job(&j, 1101, 0, JOB_QUEUED, NAN);
	is_int(store_put_job(st, &j, NULL), -1, "a later put in the failed transaction fails");
	is_int(store_commit(st), -1, "and its commit fails");
	ok(strstr(store_errmsg(st), "full") != NULL, "naming the first failure: %s",
	   store_errmsg(st));
	is_int(store_get_job(st, j.id, &g, NULL), 0, "nothing of it autocommitted");
	sched_job_clear(&g);
	ok(store_begin(st) == 0 && store_put_job(st, &j, NULL) == 0 && store_commit(st) == 0,
	   "writes work again afterwards");
	sched_job_clear(&j);
	store_close(st);
}

/* Start-up cost with 10,000 done jobs on two cards, and fsync'd commits per second. */
static void
test_scale(void)
{
	struct store *st = open_ok("big.sqlite3");
	struct got g = {.n = 0};
	struct job j;
	double t0, t1;
	int n = 0, commits = getenv("TTQ_STORE_BENCH") ? 500 : 30;

	if (!ok(st != NULL, "open for scale"))
		return;
	store_begin(st);
	for (int i = 0; i < 10000; i++) {
		make_job(&j, 100000 + i, i % 2, JOB_DONE, 1e9 + i);
		store_put_job(st, &j, "/logs/some-job/output");
		sched_job_clear(&j);
	}
	for (int i = 0; i < 20; i++) {
		make_job(&j, 200000 + i, i % 2, JOB_QUEUED, NAN);
		store_put_job(st, &j, NULL);
		sched_job_clear(&j);
	}
	ok(store_commit(st) == 0, "10,020 jobs committed");
	store_close(st);

	t0 = mono_ms();
	st = open_ok("big.sqlite3");
	ok(st && store_load_recent(st, 0, SCHED_RECENT, collect, &g) == SCHED_RECENT &&
	       store_load_recent(st, 1, SCHED_RECENT, collect, &g) == SCHED_RECENT &&
	       store_load_active(st, count_only, &n) == 20,
	   "start-up loads 10 + 10 recent, 20 active");
	t1 = mono_ms();
	printf("# start-up (open + 2 x load_recent + load_active), 10000 done jobs: %.1f ms\n",
	       t1 - t0);
	is_str(got_ids(&g) + strlen(got_ids(&g)) - 6, "109999", "the newest done job last");
	got_free(&g);
	t0 = mono_ms();
	is_int(store_retention(st, NULL, 1.0, 10000, NULL, NULL), 0, "retention keeps 10000");
	printf("# retention pass over 10000 done jobs (none due): %.1f ms\n", mono_ms() - t0);

	t0 = mono_ms();
	for (int i = 0; i < commits; i++) {
		make_job(&j, 300000 + i, 0, JOB_QUEUED, NAN);
		if (store_begin(st) || store_put_job(st, &j, NULL) || store_commit(st))
			n = -1;
		sched_job_clear(&j);
	}
	t1 = mono_ms();
	ok(n != -1, "%d single-job commits", commits);
	printf("# %d fsync'd commits of one put_job: %.0f commits/s (%.2f ms each)\n", commits,
	       commits * 1000.0 / (t1 - t0), (t1 - t0) / commits);
	store_close(st);
}

/* A database whose files were removed lives on in its handle: copied to a new path whole. */
static void
test_copy_to(void)
{
	struct store *st = open_ok("copy-src.sqlite3"), *cp = NULL;
	struct job w, g;
	char *out = NULL;
	FILE *f;

	if (!ok(st != NULL, "open the database to copy"))
		return;
	full_job(&w);
	ok(store_begin(st) == 0 && store_put_job(st, &w, "/logs/x/output") == 0 &&
	       store_commit(st) == 0,
	   "a job committed before its files are removed");
	unlink(path_in("copy-src.sqlite3"));
	unlink(path_in("copy-src.sqlite3-wal"));
	unlink(path_in("copy-src.sqlite3-shm"));
	f = fopen(path_in("copy.sqlite3-wal"), "w"); /* a stale companion at the new path */
	if (f) {
		fputs("not a WAL", f);
		fclose(f);
	}
	is_int(store_copy_to(st, path_in("copy.sqlite3")), 0, "copy_to a new path");
	ok(access(path_in("copy.sqlite3-wal"), F_OK) != 0, "a stale -wal at that path is removed");
	is_int(store_copy_to(st, path_in("copy.sqlite3")), -1, "never over a file already there");
	ok(strstr(store_errmsg(st), "already there") != NULL, "and says so: %s", store_errmsg(st));
	store_close(st);
	cp = open_ok("copy.sqlite3");
	ok(cp && store_get_job(cp, w.id, &g, &out) == 1 && strcmp(g.cmd, w.cmd) == 0,
	   "the copy opens (in WAL mode) with the job in it");
	if (cp && out) {
		sched_job_clear(&g);
		free(out);
	}
	ok(access(path_in("copy.sqlite3.copy"), F_OK) != 0, "no temporary file is left");
	store_close(cp);
	sched_job_clear(&w);
}

/* The text of the file at path (up to 255 bytes), or "" when it cannot be read. */
static const char *
file_text(const char *path)
{
	static char buf[256];
	ssize_t n;
	int fd = open(path, O_RDONLY);

	buf[0] = '\0';
	if (fd >= 0) {
		n = read(fd, buf, sizeof(buf) - 1);
		buf[n > 0 ? n : 0] = '\0';
		close(fd);
	}
	return buf;
}

/* The log dir: made with its parents and private, absolute, locked against a second daemon. */
static void
test_log_dir(void)
{
	char warn[256], want[512], cwd[256];
	struct store_dir *d, *d2;

	umask(077);
	d = store_dir_open(path_in("a/b/logs"), errbuf, sizeof(errbuf), warn, sizeof(warn));
	if (!ok(d != NULL, "a log dir is made with its parents (%s)", d ? "" : errbuf))
		return;
	is_int(file_mode(path_in("a/b/logs")), 0700, "private (0700)");
	is_str(warn, "", "no warning for a folder of our own");
	d2 = store_dir_open(path_in("a/b/logs"), errbuf, sizeof(errbuf), warn, sizeof(warn));
	ok(d2 == NULL && errno == EWOULDBLOCK &&
	   strstr(errbuf, "another tt-device-queue serve is using it"),
	   "a second open of a locked log dir is refused: %s", errbuf);
	store_dir_close(d2);
	ok(flock(store_dir_fd(d), LOCK_SH) == 0, "the lock made shared (as a dead daemon's guardian)");
	d2 = store_dir_open(path_in("a/b/logs"), errbuf, sizeof(errbuf), warn, sizeof(warn));
	ok(d2 == NULL && errno == EINPROGRESS && strstr(errbuf, "guardian"),
	   "a shared lock says to wait: %s", errbuf);
	store_dir_close(d2);
	store_dir_close(d);
	d = store_dir_open(path_in("a/b/logs"), errbuf, sizeof(errbuf), warn, sizeof(warn));
	ok(d != NULL, "closed, it can be opened again");
	if (d) {
		int fd = store_dir_watch(d), f;

		ok(fd >= 0, "the log dir is watched (inotify)");
		ok(!store_dir_changed(d), "nothing happened: no change");
		f = open(path_in("a/b/logs/other"), O_WRONLY | O_CREAT, 0600);
		close(f);
		unlink(path_in("a/b/logs/other"));
		ok(!store_dir_changed(d), "another file made and removed: no change");
		f = open(path_in("a/b/logs/" STORE_DB_FILE), O_WRONLY | O_CREAT, 0600);
		close(f);
		unlink(path_in("a/b/logs/" STORE_DB_FILE));
		ok(store_dir_changed(d), "its database's name removed: a change");
		ok(!store_dir_changed(d), "told once");
		is_int(store_dir_watch(d), fd, "watched again: the same descriptor");
		rename(path_in("a/b/logs"), path_in("a/b/moved"));
		ok(store_dir_changed(d), "the folder moved away: a change");
		rename(path_in("a/b/moved"), path_in("a/b/logs"));
	}
	store_dir_close(d);

	mkdir(path_in("wide"), 0755);
	chmod(path_in("wide"), 0755);
	getcwd(cwd, sizeof(cwd));
	chdir(tmpdir);
	d = store_dir_open("wide", errbuf, sizeof(errbuf), warn, sizeof(warn));
	chdir(cwd);
	if (!ok(d != NULL, "an existing folder opens"))
		return;
	is_int(file_mode(path_in("wide")), 0700, "a folder of ours wider than 0700 is made private");
	snprintf(want, sizeof(want), "%s/wide", tmpdir);
	is_str(store_dir_path(d), want, "a relative path is made absolute");
	snprintf(want, sizeof(want), "%s/wide/jobs.sqlite3", tmpdir);
	is_str(store_dir_db(d), want, "the database lives in it");
	store_dir_close(d);

	close(open(path_in("a-file"), O_WRONLY | O_CREAT, 0600));
	d = store_dir_open(path_in("a-file"), errbuf, sizeof(errbuf), warn, sizeof(warn));
	ok(d == NULL && strstr(errbuf, "cannot open it"), "a file in its place: %s", errbuf);
	d = store_dir_open(path_in("a-file/logs"), errbuf, sizeof(errbuf), warn, sizeof(warn));
	ok(d == NULL && strstr(errbuf, "cannot create it"), "a file on its way: %s", errbuf);
}

/* Job folders: made private, written never through a link, removed but never beyond. */
static void
test_job_folders(void)
{
	static const char id[] = "0123456789abcdef0123456789abcdef";
	char warn[256], path[512], *out;
	struct store_dir *d = store_dir_open(path_in("jobs-logs"), errbuf, sizeof(errbuf), warn,
					     sizeof(warn));
	const char *dp = d ? store_dir_path(d) : "";
	int fd, dfd, e, rc;

	if (!ok(d != NULL, "open a log dir for job folders"))
		return;
	out = store_output_path(d, id);
	snprintf(path, sizeof(path), "%s/%s/output", dp, id);
	is_str(out, path, "the output path is <log dir>/<id>/output");
	free(out);

	dfd = store_job_folder(d, id);
	ok(dfd >= 0, "the job's folder is made and opened");
	snprintf(path, sizeof(path), "%s/%s", dp, id);
	is_int(file_mode(path), 0700, "the folder is private (0700)");
	fd = dfd < 0 ? -1 : openat(dfd, STORE_OUTPUT_FILE, O_WRONLY | O_CREAT | O_APPEND, 0600);
	ok(fd >= 0 && write(fd, "line\n", 5) == 5, "its output is written through the descriptor");
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	dfd = store_job_folder(d, id);
	ok(dfd >= 0, "an existing folder opens again");
	if (dfd >= 0)
		close(dfd);
	is_int(store_write_meta(d, id, "{\"a\":1}\n", 8), 0, "meta.json written");
	snprintf(path, sizeof(path), "%s/%s/meta.json", dp, id);
	is_str(file_text(path), "{\"a\":1}\n", "with the text given");
	is_int(file_mode(path), 0600, "private (0600)");
	is_int(store_write_meta(d, id, "{}\n", 3), 0, "written again");
	is_str(file_text(path), "{}\n", "replacing the older one whole");
	{
		struct stat st;
		char opath[512];
		double t;

		snprintf(opath, sizeof(opath), "%s/%s/output", dp, id);
		t = store_output_mtime(d, id);
		ok(stat(opath, &st) == 0 && t == (double)st.st_mtim.tv_sec +
						  (double)st.st_mtim.tv_nsec / 1e9,
		   "store_output_mtime is the output file's mtime");
		ok(isnan(store_output_mtime(d, "fedcba9876543210fedcba9876543210")),
		   "store_output_mtime of a job without output: NAN");
		ok(truncate(opath, 0) == 0 && isnan(store_output_mtime(d, id)),
		   "and of an empty output file, whose mtime is only when it was made");
		snprintf(opath, sizeof(opath), "%s/whole.txt", dp);
		is_int(store_write_whole(opath, "abc", 3), 0, "store_write_whole writes a file");
		is_str(file_text(opath), "abc", "with the bytes given");
		is_int(file_mode(opath), 0600, "private (0600)");
		is_int(store_write_whole(opath, "de", 2), 0, "and replaces it whole");
		is_str(file_text(opath), "de", "its new bytes only");
		snprintf(opath, sizeof(opath), "%s/no-such-folder/whole.txt", dp);
		ok(store_write_whole(opath, "x", 1) < 0 && errno == ENOENT,
		   "a path it cannot write: -1 with errno");
		snprintf(opath, sizeof(opath), "%s/no-such-folder/whole.txt.tmp", dp);
		ok(access(opath, F_OK) != 0, "and no temporary file is left");
	}

	/* A folder replaced by a link takes no write, neither output nor meta.json. */
	mkdir(path_in("elsewhere"), 0700);
	snprintf(path, sizeof(path), "%s/%032x", dp, 1u);
	symlink(path_in("elsewhere"), path);
	errno = 0;
	dfd = store_job_folder(d, folder_of("", 1) + 1);
	e = errno;
	ok(dfd < 0 && (e == ELOOP || e == ENOTDIR), "a job folder that is a link is refused (%s)",
	   strerror(e));
	if (dfd >= 0)
		close(dfd);
	errno = 0;
	rc = store_write_meta(d, folder_of("", 1) + 1, "{}\n", 3);
	e = errno;
	ok(rc < 0 && (e == ELOOP || e == ENOTDIR),
	   "meta.json is not written through a linked folder (%s)", strerror(e));
	ok(access(path_in("elsewhere/meta.json"), F_OK) != 0, "the link's target got nothing");
	errno = 0;
	rc = store_write_meta(d, folder_of("", 2) + 1, "{}\n", 3);
	e = errno;
	ok(rc < 0 && e == ENOENT, "a folder that is gone is not made again for meta.json (%s)",
	   strerror(e));
	ok(access(folder_of(dp, 2), F_OK) != 0, "(it stays gone)");

	/* Removal: the job's own files and the folder, nothing else, never a link's target; a
	 * folder holding more is left whole. */
	snprintf(path, sizeof(path), "%s/%s/link", dp, id);
	symlink(path_in("elsewhere"), path);
	close(open(path_in("elsewhere/keep"), O_WRONLY | O_CREAT, 0600));
	errno = 0;
	rc = store_remove_job_dir(d, id);
	e = errno;
	ok(rc < 0 && e == ENOTEMPTY, "a folder holding more than the job's files stays (%s)",
	   strerror(e));
	snprintf(path, sizeof(path), "%s/%s/output", dp, id);
	ok(access(path, F_OK) == 0, "whole, output too (its record stays, so must its output)");
	snprintf(path, sizeof(path), "%s/%s/link", dp, id);
	ok(access(path_in("elsewhere/keep"), F_OK) == 0 && unlink(path) == 0,
	   "what else it holds is left alone");
	is_int(store_remove_job_dir(d, id), 0, "a job's folder is removed");
	snprintf(path, sizeof(path), "%s/%s", dp, id);
	ok(access(path, F_OK) != 0, "once it holds no more than its files");
	is_int(store_remove_job_dir(d, id), 0, "an absent folder is fine");
	is_int(store_remove_job_dir(d, folder_of("", 1) + 1), 0, "a job folder that is a link goes");
	ok(access(folder_of(dp, 1), F_OK) != 0 && access(path_in("elsewhere/keep"), F_OK) == 0,
	   "as the link alone");
	mkdir(path_in("jobs-logs/not-a-job"), 0700);
	is_int(store_remove_job_dir(d, "not-a-job"), 0, "a name that is no job id");
	ok(access(path_in("jobs-logs/not-a-job"), F_OK) == 0, "is left alone");
	is_int(store_remove_job_dir(d, ".."), 0, "nor is the log dir's parent touched");
	ok(access(dp, F_OK) == 0, "(the log dir is still there)");
	store_dir_close(d);
}

/* A log dir or database removed under the daemon is made again from the open handle. */
static void
test_restore(void)
{
	char warn[256], cmd[600], moved[512];
	struct store_dir *d = store_dir_open(path_in("restore-logs"), errbuf, sizeof(errbuf), warn,
					     sizeof(warn));
	struct store *st = d ? store_open(store_dir_db(d), true, errbuf, sizeof(errbuf), NULL) : NULL;
	struct job w, g;
	char *out = NULL;

	if (!ok(d != NULL && st != NULL, "open a log dir and its database"))
		return;
	full_job(&w);
	ok(store_begin(st) == 0 && store_put_job(st, &w, "/x/output") == 0 && store_commit(st) == 0,
	   "a job committed");
	ok(store_dir_in_place(d, st) && store_dir_in_place(d, NULL), "in place after opening");
	is_int(store_dir_remake(d, errbuf, sizeof(errbuf), warn, sizeof(warn)), 0,
	       "nothing to make again while in place");

	/* the database alone removed */
	unlink(store_dir_db(d));
	ok(!store_dir_in_place(d, st) && store_dir_in_place(d, NULL),
	   "a removed database is noticed, the folder is still in place");
	is_int(store_dir_remake(d, errbuf, sizeof(errbuf), warn, sizeof(warn)), 0,
	       "the folder is not made again");
	is_int(store_restore(d, &st, errbuf, sizeof(errbuf)), 0, "the database is written again");
	ok(store_dir_in_place(d, st), "in place again");

	/* the whole folder moved away, as a tmp cleaner or an rm -rf would */
	snprintf(moved, sizeof(moved), "%s.moved", store_dir_path(d));
	rename(store_dir_path(d), moved);
	ok(!store_dir_in_place(d, NULL), "a folder moved away is noticed");
	mkdir(store_dir_path(d), 0755); /* someone made an empty one meanwhile */
	ok(!store_dir_in_place(d, NULL), "a new folder at its path is not the one locked");
	is_int(store_dir_remake(d, errbuf, sizeof(errbuf), warn, sizeof(warn)), 1,
	       "the folder is made again and locked");
	is_int(file_mode(store_dir_path(d)), 0700, "private");
	ok(store_dir_in_place(d, NULL) && !store_dir_in_place(d, st), "it is now the one locked");
	is_int(store_restore(d, &st, errbuf, sizeof(errbuf)), 0, "the database is written again");
	ok(store_dir_in_place(d, st), "in place");
	ok(st && store_get_job(st, w.id, &g, &out) == 1 && strcmp(g.cmd, w.cmd) == 0,
	   "with the job in it");
	if (out) {
		sched_job_clear(&g);
		free(out);
	}
	ok(store_begin(st) == 0 && store_put_card(st, &(struct card){.device = 3}, "b") == 0 &&
	       store_commit(st) == 0,
	   "and the restored store takes commits");
	snprintf(cmd, sizeof(cmd), "%s/%s", moved, STORE_DB_FILE);
	ok(access(cmd, F_OK) == 0, "the old folder is left as it was");

	/* a file put in its place cannot be restored over */
	unlink(store_dir_db(d));
	mkdir(store_dir_db(d), 0700);
	is_int(store_restore(d, &st, errbuf, sizeof(errbuf)), -1, "nothing is written over a "
	       "folder at the database's path");
	ok(strstr(errbuf, "cannot be written again"), "and it says so: %s", errbuf);
	rmdir(store_dir_db(d));
	is_int(store_restore(d, &st, errbuf, sizeof(errbuf)), 0, "once it is gone, it works");
	store_close(st);
	store_dir_close(d);
	sched_job_clear(&w);
}

static void
cleanup(void)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", tmpdir);
}

int
main(void)
{
	struct store *st;

	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	shim_register();
	test_fresh();
	st = open_ok("main.sqlite3");
	if (ok(st != NULL, "open main")) {
		test_roundtrip(st);
		test_upsert(st);
		test_rollback(st);
		test_cards(st);
		test_reopen(st);
	}
	test_active();
	test_retention();
	test_migration();
	test_migration_v3();
	test_migration_v4();
	test_multi_card();
	test_keys_and_ends();
	test_migration_v6();
	test_refusals();
	test_open_failure_passes();
	test_write_failure();
	test_copy_to();
	test_log_dir();
	test_job_folders();
	test_restore();
	test_scale();
	store_close(NULL);
	cleanup();
	return tap_done();
}

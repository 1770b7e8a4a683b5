/*
 * store.c - everything on disk: the log dir (made private, locked, watched with inotify,
 * checked and made again when removed), its SQLite database of jobs and cards, each job's
 * folder (made, written with meta.json, its output's last write read back, removed by
 * retention), and files written whole (temporary file, fsync, rename); contract in store.h.
 *
 * Invariants:
 * - One connection in WAL mode with synchronous=FULL: a COMMIT that returned SQLITE_DONE has
 *   been fsync'd. The file is created 0600 and SQLite gives its -wal/-shm the same mode.
 * - Every statement is prepared once in store_open() (table stmt_defs) and is reset and
 *   unbound right after each use, so between calls no statement holds a read snapshot or a
 *   pointer into the caller's memory.
 * - enum jcol is the column order of JOB_COLS and JOB_READ: bind parameter c + 1 of the upsert
 *   and result column c of a job query are the same field.
 * - A transaction opened by store_begin() that saw a failed write never commits: later writes
 *   in it fail at once and store_commit() rolls it back and reports the first failure. SQLite
 *   itself rolls back on SQLITE_FULL/SQLITE_IOERR; without this rule the writes after that
 *   would silently autocommit one by one and a group commit would no longer be all or nothing.
 * - NaN doubles are stored as NULL and NULL reads back as NaN (per_iter_estimate_sec NULL
 *   reads as SCHED_DEFAULT_ESTIMATE); exit_code NULL is has_exit_code false. Loads never read
 *   env_json (only store_get_env does). No output text is ever stored.
 * - Schema changes (create, migrate from the earlier service's v1/v2) happen inside one
 *   BEGIN IMMEDIATE transaction, so a failed migration leaves the old file untouched; the
 *   switch to WAL comes after it, so a refused file is not rewritten either.
 * - Load callbacks run while their query is live: they may read (get_job, get_env) but should
 *   collect and write after the load returns.
 * - Folders are made 0700 and files 0600. A job's folder is reached through an O_PATH,
 *   O_NOFOLLOW descriptor and its files are opened with O_NOFOLLOW relative to it, so a folder
 *   or file replaced by a link never takes a write; removal unlinks the job's own files by
 *   name through that descriptor and never descends into anything else.
 * - A job's folder goes before its row (store_retention), never after: one that cannot be
 *   removed keeps its row, and the next pass finds both again.
 * - The log dir stays locked (flock on the folder) from store_dir_open on; a new folder made
 *   in its place is locked before anything is written there. The lock is exclusive while a
 *   daemon holds it and shared while a dead daemon's guardian does (proc.c).
 * Failure messages go to st->err (store_errmsg); store_open() copies them to the caller. The
 * log dir's functions fill the caller's buffer or set errno.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "store.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
/*
 * How long a statement waits for another process's lock. At open, before the loop runs,
 * waiting is harmless. Once serving, every wait stops the whole daemon: with 2 s, a lock held
 * elsewhere (an operator's BEGIN in the sqlite3 shell) left /status unanswered 2 s of every
 * 3 while the degraded store retried each second. 100 ms still lets short writes by others
 * through without degrading.
 */
#define BUSY_TIMEOUT_OPEN_MS 2000
#define BUSY_TIMEOUT_MS 100
#define ERRLEN 512
#define CARDS_MAX 256 /* cards of one job at most: TT_DEVICE_IDS names no more */

/* The tables and SQL below are laid out by hand. */
/* clang-format off */
/* Job columns in the order of JOB_COLS / JOB_READ (bind index c + 1, result column c). */
enum jcol {
	JC_ID, JC_DEVICE, JC_CMD, JC_CWD, JC_TIMEOUT, JC_REPEAT, JC_ENV, JC_MODE, JC_CLIENT,
	JC_RESET_EPOCH, JC_SUBMITTED, JC_STATUS, JC_EXIT, JC_ELAPSED, JC_OUTPUT, JC_STARTED,
	JC_FINISHED, JC_REP_CUR, JC_REP_DONE, JC_FIRST_ITER, JC_ESTIMATE, JC_STOP_REQ,
	JC_STOP_ESC, JC_LOG_SIZE, JC_LOG_TRUNC, JC_DROPPED, JC_TIMED_OUT, JC_ERROR, JC_UPDATED,
	JC_DEVICE_IDS, JC_RESET_EPOCHS, JC_KEY, JC_END, JC_SIGNAL, JC_HOLDERS, JC_SILENCE,
	JC_OWNER, JC_COUNT
};

#define JOB_COLS_HEAD "id, device, cmd, cwd, timeout, repeat, "
#define JOB_COLS_TAIL                                                                              \
	", mode, client_id, reset_epoch, submitted, status, exit_code, elapsed, output_file, "     \
	"started_at, finished_at, repeat_current, repeat_completed, first_iteration_elapsed, "     \
	"per_iter_estimate_sec, stop_requested_at, stop_escalated_at, log_size, log_truncated, "   \
	"dropped_log_bytes, timed_out, error, updated_at, device_ids, reset_epochs, "             \
	"idempotency_key, end_reason, signal, foreign_holders, silence_timeout, owner_uid"
#define JOB_COLS JOB_COLS_HEAD "env_json" JOB_COLS_TAIL
#define JOB_READ JOB_COLS_HEAD "NULL" JOB_COLS_TAIL /* loads leave env_json NULL */
/* The upsert's parameters, env the env_json's (a NULL env keeps the stored one). */
#define JOB_PARAMS(env)                                                                    \
	"?1, ?2, ?3, ?4, ?5, ?6, " env ", ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, " \
	"?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, "  \
	"?34, ?35, ?36, ?37"

/*
 * The jobs table: the earlier service's columns, without its NOT NULL constraints (this
 * build writes NULL for an env it keeps and for absent times), plus `device` (v3) and, for a
 * job of several cards, `device_ids` and `reset_epochs` (v5): its cards ascending as "0,1"
 * (the first is `device`) and each card's epoch in the same order as "3,5". Both are NULL for
 * a job of one card, whose card and epoch are `device` and `reset_epoch` alone. Version 6
 * added the submission's idempotency key (NULL without one; unique, so a bug that saved one
 * submission as two jobs fails its commit instead), why the job ended (`end_reason`, a name
 * of enum job_end, NULL before it ended or in rows written before) and the signal its shell
 * died of (`signal`, NULL when none). Version 7 added the processes outside the queue seen
 * holding its cards while it ran (`foreign_holders`, a JSON array, NULL when none) and the
 * job's silence timeout in seconds (`silence_timeout`; 0, or NULL in rows written before, is
 * off) and its owner (`owner_uid`, the user it runs as; NULL in rows written before). A key is
 * unique per owner: another user's key names another job.
 */
#define JOBS_TABLE_BODY                                                                            \
	"(seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, "                        \
	"cmd TEXT, cwd TEXT, timeout INTEGER, repeat INTEGER, env_json TEXT, mode TEXT, "          \
	"client_id TEXT, reset_epoch INTEGER, submitted REAL, status TEXT, exit_code INTEGER, "    \
	"elapsed REAL, output_file TEXT, started_at REAL, finished_at REAL, "                      \
	"repeat_current INTEGER, repeat_completed INTEGER, first_iteration_elapsed REAL, "         \
	"per_iter_estimate_sec REAL, stop_requested_at REAL, stop_escalated_at REAL, "             \
	"log_size INTEGER, log_truncated INTEGER, dropped_log_bytes INTEGER, timed_out INTEGER, "  \
	"error TEXT, updated_at REAL, device INTEGER NOT NULL DEFAULT 0, device_ids TEXT, "      \
	"reset_epochs TEXT, idempotency_key TEXT, end_reason TEXT, signal INTEGER, "              \
	"foreign_holders TEXT, silence_timeout INTEGER, owner_uid INTEGER)"

static const char schema_cards[] =
	"CREATE TABLE IF NOT EXISTS cards (device INTEGER PRIMARY KEY, state TEXT, "
	"reset_epoch INTEGER, reset_pending INTEGER, boot_id TEXT, last_reset_at REAL, "
	"dead_since REAL, dead_reason TEXT, updated_at REAL, held INTEGER NOT NULL DEFAULT 0, "
	"held_by TEXT, held_at REAL, hold_reason TEXT, check_pending INTEGER NOT NULL DEFAULT 0)";

/* Partial indexes: active jobs by seq; done jobs by age (retention) and per card (recent). */
static const char schema_indexes[] =
	"CREATE INDEX IF NOT EXISTS jobs_active ON jobs(seq) "
	"WHERE status IN ('queued', 'running');"
	"CREATE INDEX IF NOT EXISTS jobs_done ON jobs(finished_at, seq) WHERE status = 'done';"
	"CREATE INDEX IF NOT EXISTS jobs_recent ON jobs(device, finished_at, seq) "
	"WHERE status = 'done';"
	"CREATE INDEX IF NOT EXISTS jobs_recent_multi ON jobs(finished_at, seq) "
	"WHERE status = 'done' AND device_ids IS NOT NULL;"
	"CREATE UNIQUE INDEX IF NOT EXISTS jobs_key ON jobs(owner_uid, idempotency_key) "
	"WHERE idempotency_key IS NOT NULL;";

/*
 * The ALTER TABLE statements, as one text, that add the columns later versions added which a
 * table lacks: v4 the cards' hold, v5 a job's card list, v6 its idempotency key and how it
 * ended, v7 the foreign holders seen, its silence timeout and owner, and the cards' pending
 * health check.
 */
static const char later_columns[] =
	"SELECT group_concat('ALTER TABLE ' || column1 || ' ADD COLUMN ' || column2 || ' ' || "
	"column3, '; ') FROM (VALUES ('cards', 'held', 'INTEGER NOT NULL DEFAULT 0'), "
	"('cards', 'held_by', 'TEXT'), ('cards', 'held_at', 'REAL'), "
	"('cards', 'hold_reason', 'TEXT'), ('jobs', 'device_ids', 'TEXT'), "
	"('jobs', 'reset_epochs', 'TEXT'), ('jobs', 'idempotency_key', 'TEXT'), "
	"('jobs', 'end_reason', 'TEXT'), ('jobs', 'signal', 'INTEGER'), "
	"('jobs', 'foreign_holders', 'TEXT'), ('jobs', 'silence_timeout', 'INTEGER'), "
	"('jobs', 'owner_uid', 'INTEGER'), "
	"('cards', 'check_pending', 'INTEGER NOT NULL DEFAULT 0')) "
	"WHERE column2 NOT IN (SELECT lower(name) FROM pragma_table_info(column1))";

/* The columns without which a database is pre-v2 (such a file is refused) that it lacks. */
static const char v2_missing[] =
	"SELECT group_concat(column1, ', ') FROM (VALUES ('seq'), ('id'), ('status'), "
	"('log_truncated'), ('dropped_log_bytes')) "
	"WHERE column1 NOT IN (SELECT lower(name) FROM pragma_table_info('jobs'))";

enum stmt_id {
	S_BEGIN, S_COMMIT, S_ROLLBACK, S_PUT_JOB, S_PUT_CARD, S_GET_JOB, S_GET_ENV, S_ACTIVE,
	S_RECENT, S_CARDS, S_RET_SELECT, S_RET_DELETE, S_FIND_KEY, S_LAST_WRITE, NSTMT
};

static const struct stmt_def {
	const char *name, *sql;
} stmt_defs[NSTMT] = {
	[S_BEGIN] = {"begin", "BEGIN IMMEDIATE"},
	[S_COMMIT] = {"commit", "COMMIT"},
	[S_ROLLBACK] = {"rollback", "ROLLBACK"},
	[S_PUT_JOB] = {"saving job",
		"INSERT INTO jobs (" JOB_COLS ") VALUES (" JOB_PARAMS("?7") ") ON CONFLICT(id) DO "
		"UPDATE SET (" JOB_COLS ") = (" JOB_PARAMS("COALESCE(?7, env_json)") ")"},
	[S_PUT_CARD] = {"saving card", /* every column each time: a whole new row is the same */
		"INSERT OR REPLACE INTO cards (device, state, reset_epoch, reset_pending, boot_id, "
		"last_reset_at, dead_since, dead_reason, updated_at, held, held_by, held_at, "
		"hold_reason, check_pending) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, "
		"?12, ?13, ?14)"},
	[S_GET_JOB] = {"reading job", "SELECT " JOB_READ " FROM jobs WHERE id = ?1"},
	[S_GET_ENV] = {"reading env", "SELECT env_json FROM jobs WHERE id = ?1"},
	[S_ACTIVE] = {"loading active jobs",
		"SELECT " JOB_READ " FROM jobs WHERE status IN ('queued', 'running') ORDER BY seq"},
	[S_RECENT] = {"loading recent jobs",
		/* the card's own (by jobs_recent) and the multi-card jobs that name it besides
		 * (by jobs_recent_multi), the newest ?2 of both */
		"SELECT * FROM (SELECT * FROM (SELECT " JOB_READ ", finished_at AS f_, seq AS s_ "
		"FROM jobs WHERE device = ?1 AND status = 'done' ORDER BY finished_at DESC, "
		"seq DESC LIMIT ?2) UNION ALL SELECT * FROM (SELECT " JOB_READ ", finished_at AS f_, "
		"seq AS s_ FROM jobs WHERE status = 'done' AND device_ids IS NOT NULL AND "
		"device <> ?1 AND instr(',' || device_ids || ',', ',' || ?1 || ',') > 0 "
		"ORDER BY finished_at DESC, seq DESC LIMIT ?2) ORDER BY f_ DESC, s_ DESC LIMIT ?2) "
		"ORDER BY f_, s_"},
	[S_CARDS] = {"loading cards",
		"SELECT device, state, reset_epoch, reset_pending, boot_id, last_reset_at, "
		"dead_since, dead_reason, held, held_by, held_at, hold_reason, check_pending FROM cards "
		"ORDER BY device"},
	/* ?1 NULL: no age limit; ?2 INT64_MAX: no count limit. */
	[S_RET_SELECT] = {"retention",
		"SELECT id FROM jobs WHERE status = 'done' AND finished_at < ?1 UNION "
		"SELECT id FROM (SELECT id FROM jobs WHERE status = 'done' "
		"ORDER BY finished_at DESC, seq DESC LIMIT -1 OFFSET ?2)"},
	[S_RET_DELETE] = {"retention", "DELETE FROM jobs WHERE id = ?1 AND status = 'done'"},
	[S_FIND_KEY] = {"looking up a key",
		"SELECT id FROM jobs WHERE idempotency_key = ?1 AND owner_uid IS ?2"},
	[S_LAST_WRITE] = {"reading the last write",
		"SELECT max(t) FROM (SELECT max(updated_at) AS t FROM jobs UNION ALL "
		"SELECT max(updated_at) FROM cards)"},
};

static const char *const status_names[] = {[JOB_QUEUED] = "queued", [JOB_RUNNING] = "running",
	[JOB_DONE] = "done"};
static const char *const mode_names[] = {[JOB_MODE_RUN] = "run", [JOB_MODE_RESET] = "reset",
	[JOB_MODE_LEASE] = "lease"};
static const char *const state_names[] = {[CARD_HEALTHY] = "healthy",
	[CARD_RESETTING] = "resetting", [CARD_DEAD] = "dead"};

/* clang-format on */

struct store {
	sqlite3 *db;
	sqlite3_stmt *stmt[NSTMT];
	bool in_txn;     /* store_begin() succeeded and no commit/rollback yet */
	bool txn_failed; /* a write in the open transaction failed; err says why */
	bool refused;    /* store_open: the file is one this build will not use */
	int rc;          /* the SQLite result code of the last failure recorded in err */
	struct stat file; /* the database file opened (store_dir_in_place); zeros: none */
	char err[ERRLEN];
};

__attribute__((format(printf, 2, 3))) static int
set_err(struct store *st, const char *fmt, ...)
{
	char buf[ERRLEN];
	va_list ap;

	va_start(ap, fmt); /* via buf: arguments may point into st->err */
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	memcpy(st->err, buf, sizeof(buf));
	return -1;
}

/* Record SQLite's message for a failed step of `what`. */
static int
db_err(struct store *st, const char *what)
{
	st->rc = sqlite3_errcode(st->db);
	return set_err(st, "%s: %s", what, sqlite3_errmsg(st->db));
}

static int
oom(struct store *st, const char *what)
{
	errno = ENOMEM;
	return set_err(st, "%s: out of memory", what);
}

static double
now_epoch(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The index of text in names, or dflt when it is NULL or unknown. */
static int
parse_name(const char *const *names, int n, const unsigned char *text, int dflt)
{
	for (int i = 0; text && i < n; i++)
		if (strcmp((const char *)text, names[i]) == 0)
			return i;
	return dflt;
}

/* Reset a statement after use so it holds no snapshot and no pointer into caller memory. */
static void
done_with(sqlite3_stmt *s)
{
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
}

/* Step statement id once to completion (no rows expected to matter). */
static int
step_done(struct store *st, enum stmt_id id)
{
	sqlite3_stmt *s = st->stmt[id];
	int rc = sqlite3_step(s);

	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		db_err(st, stmt_defs[id].name);
	done_with(s);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
}

/* Run one-off SQL at open time (schema and pragmas); not used after store_open(). */
static int
exec_sql(struct store *st, const char *what, const char *sql)
{
	char *msg = NULL;
	int rc = sqlite3_exec(st->db, sql, NULL, NULL, &msg);

	if (rc != SQLITE_OK) {
		st->rc = rc;
		set_err(st, "%s: %s", what, msg ? msg : sqlite3_errstr(rc));
	}
	sqlite3_free(msg);
	return rc == SQLITE_OK ? 0 : -1;
}

/*
 * Run a query (`what` names it in a failure) with text arguments a1 and a2 (NULL: none) and
 * keep the first row's one value: an integer into *n, or text into txt[0..cap) when txt is not
 * NULL ("" for NULL). 0, or -1 with a message.
 */
static int
query(struct store *st, const char *what, const char *sql, const char *a1, const char *a2,
      long long *n, char *txt, size_t cap)
{
	sqlite3_stmt *s = NULL;
	const char *v;
	int rc;

	rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
	if (rc == SQLITE_OK && a1)
		rc = sqlite3_bind_text(s, 1, a1, -1, SQLITE_STATIC);
	if (rc == SQLITE_OK && a2)
		rc = sqlite3_bind_text(s, 2, a2, -1, SQLITE_STATIC);
	if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW && n)
		*n = sqlite3_column_int64(s, 0);
	if (rc == SQLITE_ROW && txt) {
		v = (const char *)sqlite3_column_text(s, 0);
		snprintf(txt, cap, "%s", v ? v : "");
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		db_err(st, what);
	sqlite3_finalize(s);
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

/* Whether the database has a table `name`; -1 on failure. */
static int
has_table(struct store *st, const char *name)
{
	long long n = 0;

	if (query(st, "reading the schema", "SELECT count(*) FROM sqlite_master WHERE type = "
		  "'table' AND name = ?1", name, NULL, &n, NULL, 0) != 0)
		return -1;
	return n > 0;
}

/* The columns table `from` shares with table `to` but `device`, as "a, b" into out[0..cap). */
static int
common_columns(struct store *st, const char *from, const char *to, char *out, size_t cap)
{
	return query(st, "reading the schema", "SELECT group_concat(name, ', ') FROM "
		     "pragma_table_info(?1) WHERE lower(name) IN (SELECT lower(name) FROM "
		     "pragma_table_info(?2)) AND lower(name) <> 'device'", from, to, NULL, out,
		     cap);
}

/* Make a newly created name durable: fsync the directory holding path. */
static void
sync_parent(const char *path)
{
	char dir[PATH_MAX];
	int fd;

	snprintf(dir, sizeof(dir), "%s", path);
	fd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		(void)fsync(fd); /* best effort: SQLite syncs the -wal's directory itself */
		close(fd);
	}
}

/* Create the database file 0600 (or tighten an older, wider one) and note which file it is. */
static int
create_file(struct store *st, const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	if (fd < 0)
		return set_err(st, "creating the file: %s", strerror(errno));
	(void)fchmod(fd, 0600); /* fails only when not the owner: then the mode is not ours */
	(void)fstat(fd, &st->file);
	close(fd);
	sync_parent(path); /* a file just made keeps its name through a crash */
	return 0;
}

/*
 * Switch to WAL and check that it took (it cannot on some file systems). SQLite gives the
 * -wal and -shm files the database file's mode, 0600.
 */
static int
set_wal(struct store *st)
{
	char mode[16];

	if (query(st, "setting WAL mode", "PRAGMA journal_mode = WAL", NULL, NULL, NULL, mode,
		  sizeof(mode)) != 0)
		return -1;
	if (sqlite3_stricmp(mode, "wal") != 0)
		return set_err(st, "setting WAL mode: the journal mode stays %s", mode);
	return 0;
}

/*
 * Open the connection: busy timeout, synchronous=FULL (WAL fsync'd at every commit). WAL is
 * set by store_open() only after the schema was accepted: switching the journal mode rewrites
 * the file header, and a refused database must be left exactly as it was.
 */
static int
connect_db(struct store *st, const char *path, int busy_ms)
{
	int rc;

	rc = sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
	if (rc != SQLITE_OK) {
		st->rc = rc;
		return set_err(st, "%s", st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
	}
	sqlite3_busy_timeout(st->db, busy_ms);
	return exec_sql(st, "setting synchronous=FULL", "PRAGMA synchronous = FULL");
}

/* Refuse a pre-v2 jobs table, naming the columns it lacks. */
static int
check_v2(struct store *st)
{
	char missing[128];

	if (query(st, "reading the schema", v2_missing, NULL, NULL, NULL, missing,
		  sizeof(missing)) != 0)
		return -1;
	if (!*missing)
		return 0;
	st->refused = true; /* waiting will not change that (store_open) */
	return set_err(st,
	               "a pre-v2 tt-device-queue database (its jobs table has no %s); "
	               "it cannot be migrated: use a fresh logs-v2/ directory",
	               missing);
}

/*
 * Rebuild the earlier service's jobs table as the v3 one, following SQLite's procedure for
 * changes ALTER TABLE cannot make (https://www.sqlite.org/lang_altertable.html, "Making Other
 * Kinds Of Table Schema Changes"): create the new table, copy the rows, drop the old table
 * (its indexes go with it), rename the new one; migrate() then creates the indexes. Adding
 * `device` with ALTER would keep the old NOT NULL constraints, and the first save of a job
 * whose env this build keeps (env_json NULL) would fail: a store degraded for good. Columns
 * the old table lacks start NULL (device 0: its jobs are card 0's).
 */
static int
rebuild_jobs(struct store *st)
{
	char cols[1024], copy[2200];

	if (exec_sql(st, "migrating jobs", "CREATE TABLE jobs_new " JOBS_TABLE_BODY) != 0 ||
	    common_columns(st, "jobs", "jobs_new", cols, sizeof(cols)) != 0)
		return -1;
	snprintf(copy, sizeof(copy), "INSERT INTO jobs_new (%s) SELECT %s FROM jobs; DROP TABLE "
		 "jobs; ALTER TABLE jobs_new RENAME TO jobs", cols, cols);
	return exec_sql(st, "migrating jobs", copy);
}

/* Copy the singleton device_state row into cards as card 0 and drop device_state. */
static int
move_device_state(struct store *st)
{
	char cols[512], sql[1200];

	if (common_columns(st, "device_state", "cards", cols, sizeof(cols)) != 0)
		return -1;
	snprintf(sql, sizeof(sql), "INSERT OR REPLACE INTO cards (device%s%s) SELECT 0%s%s FROM "
		 "device_state LIMIT 1; DROP TABLE device_state", *cols ? ", " : "", cols,
		 *cols ? ", " : "", cols);
	return exec_sql(st, "migrating device_state", sql);
}

/*
 * The earlier single-card service's database (user_version 0-2): its jobs and state become
 * card 0's; build_schema then adds the indexes.
 */
static int
migrate(struct store *st)
{
	int has_state;

	if (check_v2(st) != 0 || rebuild_jobs(st) != 0)
		return -1;
	if (exec_sql(st, "creating cards", schema_cards) != 0 ||
	    (has_state = has_table(st, "device_state")) < 0)
		return -1;
	return has_state ? move_device_state(st) : 0;
}

/*
 * Versions before 7 become 7: each table gets the later columns it lacks (ALTER TABLE ADD
 * COLUMN keeps its rows; NULL, or 0 for the flags, in the rows it has: a job of one card, an
 * end not known by name, no silence timeout). A file migrated from the earlier service and a
 * new one already have every column.
 */
static int
add_later_columns(struct store *st)
{
	char sql[2048];

	if (query(st, "reading the schema", later_columns, NULL, NULL, NULL, sql,
		  sizeof(sql)) != 0 ||
	    exec_sql(st, "migrating", sql) != 0)
		return -1;
	return exec_sql(st, "setting user_version", "PRAGMA user_version = 7");
}

/* Inside the open-time transaction: refuse, create, migrate or just check the schema. */
static int
build_schema(struct store *st)
{
	long long version;
	int has_jobs;

	if (query(st, "reading the schema", "PRAGMA user_version", NULL, NULL, &version, NULL,
		  0) != 0)
		return -1;
	st->refused = version > STORE_SCHEMA_VERSION;
	if (st->refused)
		return set_err(st,
		               "schema version %lld is newer than version %d of this "
		               "tt-device-queue: use a fresh logs-v2/ directory "
		               "(or a newer tt-device-queue)",
		               version, STORE_SCHEMA_VERSION);
	if ((has_jobs = has_table(st, "jobs")) < 0)
		return -1;
	if (!has_jobs && exec_sql(st, "creating jobs", "CREATE TABLE jobs " JOBS_TABLE_BODY) != 0)
		return -1;
	if (has_jobs && version < 3 && migrate(st) != 0)
		return -1;
	if (exec_sql(st, "creating cards", schema_cards) != 0) /* no-ops on a sound file */
		return -1;
	if (version < STORE_SCHEMA_VERSION && add_later_columns(st) != 0)
		return -1;
	return exec_sql(st, "creating indexes", schema_indexes);
}

static int
setup_schema(struct store *st)
{
	if (exec_sql(st, "starting the schema transaction", "BEGIN IMMEDIATE") != 0)
		return -1;
	if (build_schema(st) == 0 && exec_sql(st, "committing the schema", "COMMIT") == 0)
		return 0;
	if (!sqlite3_get_autocommit(st->db))
		sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
	return -1;
}

static int
prepare_all(struct store *st)
{
	for (int i = 0; i < NSTMT; i++) {
		if (sqlite3_prepare_v3(st->db, stmt_defs[i].sql, -1, SQLITE_PREPARE_PERSISTENT,
		                       &st->stmt[i], NULL) != SQLITE_OK) {
			st->rc = sqlite3_errcode(st->db);
			return set_err(st, "preparing %s: %s", stmt_defs[i].name,
			               sqlite3_errmsg(st->db));
		}
	}
	return 0;
}

struct store *
store_open(const char *path, bool serving, char *err, size_t errlen, bool *refused)
{
	struct store *st = calloc(1, sizeof(*st));
	int prim;

	if (refused)
		*refused = false;
	if (!st) {
		snprintf(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	/*
	 * A first read through the WAL creates and maps the -shm index, which needs room on the
	 * disk: failing there, the open fails (and may be tried again) rather than the caller's
	 * first load after an open that looked successful.
	 */
	if (create_file(st, path) == 0 &&
	    connect_db(st, path, serving ? BUSY_TIMEOUT_MS : BUSY_TIMEOUT_OPEN_MS) == 0 &&
	    setup_schema(st) == 0 && set_wal(st) == 0 &&
	    exec_sql(st, "reading the database", "SELECT count(*) FROM cards") == 0 &&
	    prepare_all(st) == 0) {
		sqlite3_busy_timeout(st->db, BUSY_TIMEOUT_MS);
		return st;
	}
	/* Not a database, or a damaged one, stays so until someone replaces the file. */
	prim = st->rc & 0xff;
	if (refused)
		*refused = st->refused || prim == SQLITE_NOTADB || prim == SQLITE_CORRUPT;
	/* A bare "disk I/O error" hides a full disk (no room for the -shm): add errno's text. */
	if ((prim == SQLITE_IOERR || prim == SQLITE_CANTOPEN) && st->db &&
	    sqlite3_system_errno(st->db) != 0)
		snprintf(err, errlen, "%s (%s)", st->err, strerror(sqlite3_system_errno(st->db)));
	else
		snprintf(err, errlen, "%s", st->err);
	store_close(st);
	return NULL;
}

void
store_close(struct store *st)
{
	int saved = errno;

	if (!st)
		return;
	for (int i = 0; i < NSTMT; i++)
		sqlite3_finalize(st->stmt[i]);
	sqlite3_close(st->db); /* rolls back an open transaction */
	free(st);
	errno = saved;
}

const char *
store_errmsg(struct store *st)
{
	return st->err;
}

int
store_begin(struct store *st)
{
	if (step_done(st, S_BEGIN) != 0)
		return -1;
	st->in_txn = true;
	st->txn_failed = false;
	return 0;
}

/* End the transaction whatever state SQLite is in, keeping st->err. */
static void
rollback_quiet(struct store *st)
{
	if (!sqlite3_get_autocommit(st->db)) {
		sqlite3_step(st->stmt[S_ROLLBACK]);
		sqlite3_reset(st->stmt[S_ROLLBACK]);
	}
	st->in_txn = false;
	st->txn_failed = false;
}

/* After a failed write (st->err says why): the open transaction may not commit any more. */
static int
write_failed(struct store *st)
{
	st->txn_failed = st->in_txn;
	return -1;
}

/*
 * Before a write: refuse inside a transaction that already failed (st->err still names that
 * failure: nothing is recorded after it) or that SQLite ended.
 */
static int
write_allowed(struct store *st)
{
	if (st->txn_failed)
		return -1;
	if (st->in_txn && sqlite3_get_autocommit(st->db)) {
		set_err(st, "the transaction was rolled back");
		return write_failed(st);
	}
	return 0;
}

/* Step write statement id, its parameters bound with result `bound`; 0, or -1 (write_failed). */
static int
write_step(struct store *st, enum stmt_id id, int bound)
{
	if (bound != SQLITE_OK) {
		db_err(st, stmt_defs[id].name);
		done_with(st->stmt[id]);
		return write_failed(st);
	}
	return step_done(st, id) == 0 ? 0 : write_failed(st);
}

int
store_commit(struct store *st)
{
	if (write_allowed(st) != 0) {
		set_err(st, "commit: %s", st->err);
	} else if (step_done(st, S_COMMIT) == 0) {
		st->in_txn = false;
		return 0;
	}
	rollback_quiet(st);
	return -1;
}

void
store_rollback(struct store *st)
{
	rollback_quiet(st);
}

static int
bind_text(sqlite3_stmt *s, int col, const char *v)
{
	return v ? sqlite3_bind_text(s, col + 1, v, -1, SQLITE_STATIC)
	         : sqlite3_bind_null(s, col + 1);
}

static int
bind_real(sqlite3_stmt *s, int col, double v)
{
	return isnan(v) ? sqlite3_bind_null(s, col + 1) : sqlite3_bind_double(s, col + 1, v);
}

static int
bind_int(sqlite3_stmt *s, int col, long long v)
{
	return sqlite3_bind_int64(s, col + 1, v);
}

/*
 * A multi-card job's cards (epochs false) or their reset epochs (true) as the v5 columns hold
 * them, "0,1" / "3,5", bound to col (SQLite frees the text); NULL for a job of one card.
 */
static int
bind_card_list(sqlite3_stmt *s, int col, const struct job *j, bool epochs)
{
	size_t cap = 24 * (size_t)(j->nmore + 1), n = 0;
	char *text;
	int i;

	if (j->nmore == 0)
		return sqlite3_bind_null(s, col + 1);
	if (!(text = malloc(cap)))
		return SQLITE_NOMEM;
	n += (size_t)snprintf(text, cap, "%lld", epochs ? j->reset_epoch : (long long)j->device);
	for (i = 0; i < j->nmore; i++)
		n += (size_t)snprintf(text + n, cap - n, ",%lld",
		                      epochs ? j->more[i].reset_epoch : (long long)j->more[i].device);
	return sqlite3_bind_text(s, col + 1, text, (int)n, free);
}

/* Bind every column of job j to the upsert s: SQLITE_OK, or the codes of failed binds. */
static int
bind_job(sqlite3_stmt *s, const struct job *j, const char *output_file)
{
	int rc = 0;

	rc |= bind_text(s, JC_ID, j->id);
	rc |= bind_text(s, JC_CMD, j->cmd);
	rc |= bind_text(s, JC_CWD, j->cwd);
	rc |= bind_text(s, JC_ENV, j->env_json); /* NULL keeps the stored one (COALESCE) */
	rc |= bind_text(s, JC_MODE, mode_names[j->mode]);
	rc |= bind_text(s, JC_CLIENT, j->client_id);
	rc |= bind_text(s, JC_STATUS, status_names[j->status]);
	rc |= bind_text(s, JC_OUTPUT, output_file);
	rc |= bind_text(s, JC_ERROR, j->error);
	rc |= bind_card_list(s, JC_DEVICE_IDS, j, false);
	rc |= bind_card_list(s, JC_RESET_EPOCHS, j, true);
	rc |= bind_text(s, JC_KEY, j->idempotency_key);
	rc |= bind_text(s, JC_END, sched_end_name(j->end_reason));
	rc |= bind_text(s, JC_HOLDERS, j->foreign_holders);
	rc |= bind_int(s, JC_DEVICE, j->device);
	rc |= bind_int(s, JC_TIMEOUT, j->timeout);
	rc |= bind_int(s, JC_REPEAT, j->repeat);
	rc |= bind_int(s, JC_RESET_EPOCH, j->reset_epoch);
	if (j->has_exit_code) /* else NULL, as done_with left it */
		rc |= bind_int(s, JC_EXIT, j->exit_code);
	rc |= bind_int(s, JC_REP_CUR, j->repeat_current);
	rc |= bind_int(s, JC_REP_DONE, j->repeat_completed);
	rc |= bind_int(s, JC_LOG_SIZE, j->log_size);
	rc |= bind_int(s, JC_LOG_TRUNC, j->log_truncated);
	rc |= bind_int(s, JC_DROPPED, j->dropped_log_bytes);
	rc |= bind_int(s, JC_TIMED_OUT, j->timed_out);
	if (j->end_signal)
		rc |= bind_int(s, JC_SIGNAL, j->end_signal);
	rc |= bind_int(s, JC_SILENCE, j->silence_timeout);
	if (j->owner_uid >= 0)
		rc |= bind_int(s, JC_OWNER, j->owner_uid);
	rc |= bind_real(s, JC_SUBMITTED, j->submitted_at);
	rc |= bind_real(s, JC_ELAPSED, j->elapsed);
	rc |= bind_real(s, JC_STARTED, j->started_at);
	rc |= bind_real(s, JC_FINISHED, j->finished_at);
	rc |= bind_real(s, JC_FIRST_ITER, j->first_iteration_elapsed);
	rc |= bind_real(s, JC_ESTIMATE, j->per_iter_estimate);
	rc |= bind_real(s, JC_STOP_REQ, j->stop_requested_at);
	rc |= bind_real(s, JC_STOP_ESC, j->stop_escalated_at);
	rc |= bind_real(s, JC_UPDATED, now_epoch());
	return rc;
}

int
store_put_job(struct store *st, const struct job *j, const char *output_file)
{
	if (write_allowed(st) != 0)
		return -1;
	return write_step(st, S_PUT_JOB, bind_job(st->stmt[S_PUT_JOB], j, output_file));
}

int
store_put_card(struct store *st, const struct card *c, const char *boot_id)
{
	sqlite3_stmt *s = st->stmt[S_PUT_CARD];
	int rc = 0;

	if (write_allowed(st) != 0)
		return -1;
	rc |= bind_int(s, 0, c->device);
	rc |= bind_text(s, 1, state_names[c->state]);
	rc |= bind_int(s, 2, c->reset_epoch);
	rc |= bind_int(s, 3, c->reset_pending);
	rc |= bind_text(s, 4, boot_id);
	rc |= bind_real(s, 5, c->last_reset_at);
	rc |= bind_real(s, 6, c->dead_since);
	rc |= bind_text(s, 7, c->dead_reason);
	rc |= bind_real(s, 8, now_epoch());
	rc |= bind_int(s, 9, c->held);
	rc |= bind_text(s, 10, c->held ? c->held_by : NULL);
	rc |= bind_real(s, 11, c->held ? c->held_at : NAN);
	rc |= bind_text(s, 12, c->held ? c->hold_reason : NULL);
	rc |= bind_int(s, 13, c->check_pending);
	return write_step(st, S_PUT_CARD, rc);
}

static double
col_real(sqlite3_stmt *s, int col, double null_value)
{
	return sqlite3_column_type(s, col) == SQLITE_NULL ? null_value
	                                                  : sqlite3_column_double(s, col);
}

/* A heap copy of a text column, or of dflt when it is NULL (dflt NULL gives NULL). */
static char *
col_dup(sqlite3_stmt *s, int col, const char *dflt, bool *failed)
{
	bool null = sqlite3_column_type(s, col) == SQLITE_NULL;
	const char *v = null ? dflt : (const char *)sqlite3_column_text(s, col);
	char *copy = v ? strdup(v) : NULL;

	if (!copy && (v || !null)) /* out of memory, converting the value or copying it */
		*failed = true;
	return copy;
}

/*
 * Parse a comma-separated list of at most n integers into v; the count, or -1 when text is
 * not such a list.
 */
static int
parse_list(const char *text, long long *v, int n)
{
	int k = 0;

	while (text && k < n) {
		char *end;

		if (*text < '0' || *text > '9')
			return -1;
		errno = 0;
		v[k++] = strtoll(text, &end, 10);
		if (errno)
			return -1;
		if (*end == '\0')
			return k;
		if (*end != ',')
			return -1;
		text = end + 1;
	}
	return -1;
}

/*
 * A multi-card job's cards from its v5 columns (both NULL: one card, j->device). They must
 * list the same number (at least two, at most CARDS_MAX) of cards ascending from j->device,
 * and of epochs (the first j->reset_epoch's card): a damaged list is refused rather than run
 * a job on cards it did not name.
 */
static int
row_cards(struct store *st, sqlite3_stmt *s, struct job *j)
{
	const char *ids = (const char *)sqlite3_column_text(s, JC_DEVICE_IDS);
	const char *eps = (const char *)sqlite3_column_text(s, JC_RESET_EPOCHS);
	long long v[CARDS_MAX], e[CARDS_MAX];
	int devs[CARDS_MAX], n, i;
	bool sound;

	if (!ids && !eps)
		return 0;
	n = parse_list(ids, v, CARDS_MAX);
	sound = n >= 2 && parse_list(eps, e, CARDS_MAX) == n && v[0] == j->device;
	for (i = 0; sound && i < n; i++) {
		sound = v[i] <= INT_MAX && (i == 0 || v[i] > v[i - 1]);
		devs[i] = (int)v[i];
	}
	if (!sound)
		return set_err(st, "reading job %s: its cards '%s' / epochs '%s' are damaged",
		               j->id, ids ? ids : "NULL", eps ? eps : "NULL");
	if (sched_job_set_cards(j, devs, n) != 0)
		return oom(st, "reading job");
	for (i = 1; i < n; i++)
		j->more[i - 1].reset_epoch = e[i];
	return 0;
}

/* Fill *j from the current row of a job query; heap strings become j's. */
static int
row_to_job(struct store *st, sqlite3_stmt *s, struct job *j)
{
	const char *id = (const char *)sqlite3_column_text(s, JC_ID);
	bool failed = false;

	sched_job_init(j);
	snprintf(j->id, sizeof(j->id), "%s", id ? id : "");
	j->cmd = col_dup(s, JC_CMD, "", &failed);
	j->cwd = col_dup(s, JC_CWD, "", &failed);
	j->client_id = col_dup(s, JC_CLIENT, "anon", &failed);
	j->error = col_dup(s, JC_ERROR, NULL, &failed);
	j->idempotency_key = col_dup(s, JC_KEY, NULL, &failed);
	j->foreign_holders = col_dup(s, JC_HOLDERS, NULL, &failed);
	j->end_reason = sched_end_parse((const char *)sqlite3_column_text(s, JC_END));
	j->device = sqlite3_column_int(s, JC_DEVICE);
	sched_job_load(j, parse_name(status_names, NELEM(status_names),
	                             sqlite3_column_text(s, JC_STATUS), JOB_DONE));
	j->mode = parse_name(mode_names, NELEM(mode_names), sqlite3_column_text(s, JC_MODE),
	                     JOB_MODE_RUN);
	j->timeout = sqlite3_column_int(s, JC_TIMEOUT);
	if (sqlite3_column_type(s, JC_REPEAT) != SQLITE_NULL)
		j->repeat = sqlite3_column_int(s, JC_REPEAT);
	j->reset_epoch = sqlite3_column_int64(s, JC_RESET_EPOCH);
	j->has_exit_code = sqlite3_column_type(s, JC_EXIT) != SQLITE_NULL;
	j->exit_code = sqlite3_column_int(s, JC_EXIT);
	j->repeat_current = sqlite3_column_int(s, JC_REP_CUR);
	j->repeat_completed = sqlite3_column_int(s, JC_REP_DONE);
	j->log_size = sqlite3_column_int64(s, JC_LOG_SIZE);
	j->log_truncated = sqlite3_column_int(s, JC_LOG_TRUNC) != 0;
	j->dropped_log_bytes = sqlite3_column_int64(s, JC_DROPPED);
	j->timed_out = sqlite3_column_int(s, JC_TIMED_OUT) != 0;
	j->end_signal = sqlite3_column_int(s, JC_SIGNAL);
	j->silence_timeout = sqlite3_column_int(s, JC_SILENCE); /* NULL (before v7): 0, off */
	j->owner_uid = sqlite3_column_type(s, JC_OWNER) == SQLITE_NULL
	                   ? -1
	                   : sqlite3_column_int64(s, JC_OWNER);
	j->submitted_at = col_real(s, JC_SUBMITTED, NAN);
	j->started_at = col_real(s, JC_STARTED, NAN);
	j->finished_at = col_real(s, JC_FINISHED, NAN);
	j->elapsed = col_real(s, JC_ELAPSED, NAN);
	j->first_iteration_elapsed = col_real(s, JC_FIRST_ITER, NAN);
	j->per_iter_estimate = col_real(s, JC_ESTIMATE, SCHED_DEFAULT_ESTIMATE);
	j->stop_requested_at = col_real(s, JC_STOP_REQ, NAN);
	j->stop_escalated_at = col_real(s, JC_STOP_ESC, NAN);
	if (failed)
		oom(st, "reading job");
	if (failed || row_cards(st, s, j) != 0) {
		sched_job_clear(j);
		return -1;
	}
	return 0;
}

static int
row_to_card(struct store *st, sqlite3_stmt *s, struct store_card *row)
{
	struct card *c = &row->card;
	bool failed = false;

	*row = (struct store_card){.card.device = 0};
	c->device = sqlite3_column_int(s, 0);
	c->state =
	    parse_name(state_names, NELEM(state_names), sqlite3_column_text(s, 1), CARD_HEALTHY);
	c->reset_epoch = sqlite3_column_int64(s, 2);
	c->reset_pending = sqlite3_column_int(s, 3) != 0;
	row->boot_id = col_dup(s, 4, NULL, &failed);
	c->last_reset_at = col_real(s, 5, NAN);
	c->dead_since = col_real(s, 6, NAN);
	c->dead_reason = col_dup(s, 7, NULL, &failed);
	c->held = sqlite3_column_int(s, 8) != 0;
	c->held_by = col_dup(s, 9, NULL, &failed);
	c->held_at = col_real(s, 10, NAN);
	c->hold_reason = col_dup(s, 11, NULL, &failed);
	c->check_pending = sqlite3_column_int(s, 12) != 0;
	if (!failed)
		return 0;
	free(row->boot_id);
	free(c->dead_reason);
	free(c->held_by);
	free(c->hold_reason);
	return oom(st, "loading cards");
}

/*
 * Step a bound query of jobs (ccb NULL: each row to jcb) or of cards (each row to ccb) to its
 * end. Returns the count or -1.
 */
static int
load_rows(struct store *st, enum stmt_id id, store_job_cb jcb,
          int (*ccb)(void *ctx, struct store_card *c), void *ctx)
{
	sqlite3_stmt *s = st->stmt[id];
	struct store_card c;
	struct job j;
	int rc = SQLITE_DONE, n = 0;

	while (n >= 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (ccb ? row_to_card(st, s, &c) : row_to_job(st, s, &j))
			n = -1;
		else if (ccb ? ccb(ctx, &c)
			     : jcb(ctx, &j, (const char *)sqlite3_column_text(s, JC_OUTPUT)))
			n = set_err(st, "%s: stopped by the callback", stmt_defs[id].name);
		else
			n++;
	}
	if (n >= 0 && rc != SQLITE_DONE)
		n = db_err(st, stmt_defs[id].name);
	done_with(s);
	return n;
}

int
store_load_active(struct store *st, store_job_cb cb, void *ctx)
{
	return load_rows(st, S_ACTIVE, cb, NULL, ctx);
}

int
store_load_recent(struct store *st, int device, int n, store_job_cb cb, void *ctx)
{
	sqlite3_bind_int(st->stmt[S_RECENT], 1, device);
	sqlite3_bind_int(st->stmt[S_RECENT], 2, n);
	return load_rows(st, S_RECENT, cb, NULL, ctx);
}

/* Step a statement bound to one id: 1 with a row in hand, 0 not found, -1 error. */
static int
find_by_id(struct store *st, enum stmt_id id, const char *job_id)
{
	sqlite3_stmt *s = st->stmt[id];
	int rc = sqlite3_bind_text(s, 1, job_id, -1, SQLITE_STATIC);

	if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW)
		return 1;
	return rc == SQLITE_DONE ? 0 : db_err(st, stmt_defs[id].name);
}

int
store_get_job(struct store *st, const char *id, struct job *out, char **output_file)
{
	sqlite3_stmt *s = st->stmt[S_GET_JOB];
	bool failed = false;
	int rc;

	sched_job_init(out);
	if (output_file)
		*output_file = NULL;
	rc = find_by_id(st, S_GET_JOB, id);
	if (rc == 1 && row_to_job(st, s, out) != 0)
		rc = -1;
	if (rc == 1 && output_file)
		*output_file = col_dup(s, JC_OUTPUT, NULL, &failed);
	if (failed) {
		sched_job_clear(out);
		rc = oom(st, "reading job");
	}
	done_with(s);
	return rc;
}

int
store_get_env(struct store *st, const char *id, char **env_json)
{
	bool failed = false;
	int rc = find_by_id(st, S_GET_ENV, id);

	*env_json = rc == 1 ? col_dup(st->stmt[S_GET_ENV], 0, NULL, &failed) : NULL;
	done_with(st->stmt[S_GET_ENV]);
	return failed ? oom(st, "reading env") : rc;
}

int
store_find_key(struct store *st, const char *key, long long owner, char id[33])
{
	sqlite3_stmt *s = st->stmt[S_FIND_KEY];
	const char *v;
	int rc;

	if (owner >= 0) /* else NULL, as done_with left it */
		sqlite3_bind_int64(s, 2, owner);
	if ((rc = find_by_id(st, S_FIND_KEY, key)) == 1) {
		v = (const char *)sqlite3_column_text(s, 0);
		snprintf(id, 33, "%s", v ? v : "");
	}
	done_with(s);
	return rc;
}

double
store_last_write(struct store *st)
{
	sqlite3_stmt *s = st->stmt[S_LAST_WRITE];
	double t = NAN;

	if (sqlite3_step(s) == SQLITE_ROW)
		t = col_real(s, 0, NAN);
	done_with(s);
	return t;
}

int
store_load_cards(struct store *st, int (*cb)(void *ctx, struct store_card *c), void *ctx)
{
	return load_rows(st, S_CARDS, NULL, cb, ctx);
}

/*
 * Each job's folder first, then its row once the folder is gone (d NULL: no folders); cb is told
 * of each. A row is deleted while the select is stepped: its UNION is computed whole into a
 * temporary table before the first row comes, so the deletes do not disturb it.
 */
int
store_retention(struct store *st, const struct store_dir *d, double older_than, long long keep,
                void (*cb)(void *ctx, const char *id, int err), void *ctx)
{
	sqlite3_stmt *s = st->stmt[S_RET_SELECT];
	const char *id;
	int n = 0, rc = SQLITE_DONE, e;

	if (store_begin(st) != 0)
		return -1;
	if (older_than > 0) /* else NULL: no age limit */
		sqlite3_bind_double(s, 1, older_than);
	sqlite3_bind_int64(s, 2, keep >= 0 ? keep : INT64_MAX);
	while (n >= 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		if (!(id = (const char *)sqlite3_column_text(s, 0)))
			break; /* out of memory */
		e = d && store_remove_job_dir(d, id) < 0 ? errno : 0;
		if (cb)
			cb(ctx, id, e);
		if (e)
			continue; /* its row stays for the next pass */
		e = sqlite3_bind_text(st->stmt[S_RET_DELETE], 1, id, -1, SQLITE_STATIC);
		n = write_step(st, S_RET_DELETE, e) == 0 ? n + 1 : -1;
	}
	if (n >= 0 && rc != SQLITE_DONE)
		n = db_err(st, "retention");
	done_with(s);
	if (n >= 0 && store_commit(st) == 0)
		return n;
	rollback_quiet(st);
	return -1;
}

int
store_copy_to(struct store *st, const char *path)
{
	static const char *const suffix[] = {"-wal", "-shm"};
	char tmp[PATH_MAX], name[PATH_MAX];
	struct stat sb;
	int fd = -1, one = 1;

	if (snprintf(tmp, sizeof(tmp), "%s.copy", path) >= (int)sizeof(tmp))
		return set_err(st, "copying the database: the path is too long");
	if (lstat(path, &sb) == 0)
		return set_err(st, "copying the database: a database is already there; it is not "
		                   "replaced");
	(void)unlink(tmp); /* an earlier attempt's, cut short */
	/*
	 * Companions left at path belong to the database that was removed (its handle keeps its
	 * own open files): a stale -wal beside the copy would be replayed into it. And this
	 * handle, once closed, must not delete the copy's own (SQLITE_FCNTL_PERSIST_WAL).
	 */
	for (size_t i = 0; i < NELEM(suffix); i++)
		if (snprintf(name, sizeof(name), "%s%s", path, suffix[i]) < (int)sizeof(name))
			(void)unlink(name);
	sqlite3_file_control(st->db, "main", SQLITE_FCNTL_PERSIST_WAL, &one);
	if (query(st, "copying the database", "VACUUM INTO ?1", tmp, NULL, NULL, NULL, 0) != 0)
		goto out;
	/* VACUUM INTO syncs nothing: the copy is on disk before it takes the database's name. */
	fd = open(tmp, O_RDWR | O_CLOEXEC);
	if (fd < 0 || fchmod(fd, 0600) < 0 || fsync(fd) < 0 ||
	    renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) < 0) {
		set_err(st, "copying the database: %s", strerror(errno));
		goto out;
	}
	close(fd);
	sync_parent(path);
	return 0;
out:
	if (fd >= 0)
		close(fd);
	(void)unlink(tmp);
	return -1;
}

/* ------------------------------------------------------------------------------ the log dir */

struct store_dir {
	char path[PATH_MAX]; /* absolute (realpath at open) */
	char db[PATH_MAX + sizeof("/" STORE_DB_FILE)];
	int fd;         /* the folder, locked (flock), close-on-exec; -1 before it is */
	struct stat st; /* what fd is, and what path must still name */
	double changed_at; /* the folder's mtime when store_dir_open locked it */
	int notify_fd;  /* inotify (store_dir_watch), -1 before it is made */
	int wd;         /* its watch of the folder, -1 when none */
};

/* Whether path names the file or folder with device dev and inode ino. */
static bool
path_is(const char *path, dev_t dev, ino_t ino)
{
	struct stat now;

	return stat(path, &now) == 0 && now.st_dev == dev && now.st_ino == ino;
}

/* mkdir -p; 0 or -1 with errno. The client has its own (cli.c links no module of the daemon). */
static int
mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX], *p;

	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(buf, mode) < 0 && errno != EEXIST ? -1 : 0;
}

/*
 * The log dir is private (0700) however it came to exist: made by hand (0755 under the usual
 * umask), its listing of job ids would stay open to every local user. Ours, it is tightened.
 * Another user's (an admin's shared dir) is left as it is, as changing it could break what
 * that user set up; the files in it are private all the same, and warn says whose it is so an
 * operator can fix it.
 */
static void
make_private(int fd, const struct stat *st, char *warn, size_t warnlen)
{
	if (st->st_uid != geteuid())
		snprintf(warn, warnlen, "belongs to uid %u, not to this service's user (uid %u); its "
		         "mode %04o is left as it is", (unsigned)st->st_uid, (unsigned)geteuid(),
		         (unsigned)(st->st_mode & 07777));
	else if ((st->st_mode & 07777) != 0700 && fchmod(fd, 0700) < 0)
		snprintf(warn, warnlen, "cannot be made private (mode %04o): %s",
		         (unsigned)(st->st_mode & 07777), strerror(errno));
}

/* Lock the folder at d->path as d's (replacing the one locked before); -1 with err. */
static int
lock_dir(struct store_dir *d, char *err, size_t errlen, char *warn, size_t warnlen)
{
	int fd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(err, errlen, "cannot open it: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		/* Shared: a dead daemon's guardian, until the processes of its jobs are gone. */
		int e = flock(fd, LOCK_SH | LOCK_NB) == 0 ? EINPROGRESS : EWOULDBLOCK;

		snprintf(err, errlen, e == EINPROGRESS ? "the guardian of a daemon that died holds "
			 "it until that daemon's processes are gone" : "another tt-device-queue serve "
			 "is using it; stop it first");
		close(fd);
		errno = e;
		return -1;
	}
	make_private(fd, &st, warn, warnlen);
	if (d->fd >= 0)
		close(d->fd);
	d->fd = fd;
	d->st = st;
	return 0;
}

struct store_dir *
store_dir_open(const char *path, char *err, size_t errlen, char *warn, size_t warnlen)
{
	struct store_dir *d = calloc(1, sizeof(*d));
	int e;

	warn[0] = '\0';
	if (!d) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	d->fd = d->notify_fd = d->wd = -1;
	if (mkdir_p(path, 0700) < 0) {
		snprintf(err, errlen, "cannot create it: %s", strerror(errno));
	} else {
		/* Clients are told output file paths: absolute, they mean the same anywhere. */
		if (!realpath(path, d->path))
			snprintf(d->path, sizeof(d->path), "%s", path);
		snprintf(d->db, sizeof(d->db), "%s/" STORE_DB_FILE, d->path);
		if (lock_dir(d, err, errlen, warn, warnlen) == 0) {
			d->changed_at = (double)d->st.st_mtim.tv_sec + d->st.st_mtim.tv_nsec / 1e9;
			return d;
		}
	}
	e = errno;
	store_dir_close(d);
	errno = e;
	return NULL;
}

void
store_dir_close(struct store_dir *d)
{
	if (!d)
		return;
	if (d->fd >= 0)
		close(d->fd);
	if (d->notify_fd >= 0)
		close(d->notify_fd);
	free(d);
}

const char *
store_sqlite_version(void)
{
	return sqlite3_libversion();
}

const char *
store_dir_path(const struct store_dir *d)
{
	return d->path;
}

const char *
store_dir_db(const struct store_dir *d)
{
	return d->db;
}

int
store_dir_fd(const struct store_dir *d)
{
	return d->fd;
}

double
store_dir_changed_at(const struct store_dir *d)
{
	return d->changed_at;
}

bool
store_dir_in_place(const struct store_dir *d, const struct store *st)
{
	return path_is(d->path, d->st.st_dev, d->st.st_ino) &&
	       (!st || path_is(d->db, st->file.st_dev, st->file.st_ino));
}

int
store_dir_remake(struct store_dir *d, char *err, size_t errlen, char *warn, size_t warnlen)
{
	char why[ERRLEN];

	warn[0] = '\0';
	if (path_is(d->path, d->st.st_dev, d->st.st_ino))
		return 0;
	if (mkdir_p(d->path, 0700) < 0) {
		snprintf(err, errlen, "the log dir was removed and cannot be made again: %s",
		         strerror(errno));
		return -1;
	}
	if (lock_dir(d, why, sizeof(why), warn, warnlen) < 0) {
		snprintf(err, errlen, "the log dir was replaced: %s", why);
		return -1;
	}
	return 1;
}

int
store_dir_watch(struct store_dir *d)
{
	if (d->notify_fd < 0)
		d->notify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (d->notify_fd < 0)
		return -1;
	if (d->wd >= 0)
		inotify_rm_watch(d->notify_fd, d->wd); /* the old folder's, if still there */
	d->wd = inotify_add_watch(d->notify_fd, d->path, IN_DELETE_SELF | IN_MOVE_SELF | IN_DELETE |
						       IN_MOVED_FROM | IN_MOVED_TO | IN_ONLYDIR);
	return d->wd < 0 ? -1 : d->notify_fd;
}

bool
store_dir_changed(struct store_dir *d)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	const struct inotify_event *e;
	bool look = false;
	ssize_t n, off;

	while (d->notify_fd >= 0 && (n = read(d->notify_fd, buf, sizeof(buf))) > 0)
		for (off = 0; off < n; off += (ssize_t)(sizeof(*e) + e->len)) {
			e = (const struct inotify_event *)(void *)(buf + off);
			look = look || e->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_Q_OVERFLOW) ||
			       (e->len && strcmp(e->name, STORE_DB_FILE) == 0);
		}
	return look;
}

int
store_restore(const struct store_dir *d, struct store **st, char *err, size_t errlen)
{
	char why[ERRLEN];
	struct store *copy;

	if (store_copy_to(*st, d->db) < 0) {
		snprintf(err, errlen, "the log dir's database was removed and cannot be written "
		         "again: %s", store_errmsg(*st));
		return -1;
	}
	copy = store_open(d->db, true, why, sizeof(why), NULL);
	if (!copy || !store_dir_in_place(d, copy)) {
		snprintf(err, errlen, "the restored database cannot be opened: %s",
		         copy ? "it was removed again" : why);
		store_close(copy);
		(void)unlink(d->db); /* written again at the next try */
		return -1;
	}
	store_close(*st);
	*st = copy;
	return 0;
}

/* ------------------------------------------------------------------------------ job folders */

char *
store_output_path(const struct store_dir *d, const char *id)
{
	/* Sized exactly: one of these is made for every record rendered or written. */
	size_t n = strlen(d->path) + strlen(id) + sizeof("//" STORE_OUTPUT_FILE);
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s/%s/" STORE_OUTPUT_FILE, d->path, id);
	return p;
}

double
store_output_mtime(const struct store_dir *d, const char *id)
{
	char *path = store_output_path(d, id);
	struct stat st;
	double t = NAN;

	if (path && stat(path, &st) == 0 && st.st_size > 0)
		t = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec / 1e9;
	free(path);
	return t;
}

/*
 * Write data[0..len) to fd (fsync'd when sync) and close it: 0, or the errno of the failure
 * (ENOSPC for a short write: the disk is full).
 */
static int
write_close(int fd, const void *data, size_t len, bool sync)
{
	int e = 0;

	errno = 0;
	if (write(fd, data, len) != (ssize_t)len)
		e = errno ? errno : ENOSPC;
	else if (sync && fsync(fd) < 0)
		e = errno;
	close(fd);
	return e;
}

int
store_write_whole(const char *path, const void *data, size_t len)
{
	char tmp[PATH_MAX + 8];
	int fd, e;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
		return -1;
	e = write_close(fd, data, len, true);
	if (!e && rename(tmp, path) < 0)
		e = errno;
	if (e)
		unlink(tmp);
	errno = e;
	return e ? -1 : 0;
}

/* The job's folder (made first when make) as an O_PATH descriptor, never through a link. */
static int
job_folder_open(const struct store_dir *d, const char *id, bool make)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s/%s", d->path, id) >= (int)sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (make && mkdir(path, 0700) < 0 && errno != EEXIST)
		return -1;
	return open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

int
store_job_folder(const struct store_dir *d, const char *id)
{
	return job_folder_open(d, id, true);
}

int
store_write_meta(const struct store_dir *d, const char *id, const char *text, size_t len)
{
	int dfd = job_folder_open(d, id, false), fd, e;

	if (dfd < 0)
		return -1; /* its folder removed (ENOENT) or a link (ELOOP) */
	fd = openat(dfd, "meta.json", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	e = errno; /* no inode left (ENOSPC), or meta.json a link (ELOOP) */
	close(dfd);
	errno = fd < 0 ? e : write_close(fd, text, len, false);
	return errno ? -1 : 0;
}

/*
 * Whether the job folder dfd holds only names[0..n): a folder a job put more in is kept whole,
 * output too, so the record retention must then keep never points at output already gone.
 */
static bool
holds_only(int dfd, const char *const *names, size_t n)
{
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	bool only = dir != NULL;
	struct dirent *e;
	size_t i;

	if (!dir && fd >= 0)
		close(fd);
	while (only && (e = readdir(dir)) != NULL) {
		for (i = 0; i < n && strcmp(e->d_name, names[i]) != 0; i++)
			;
		only = i < n || strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
	}
	if (dir)
		closedir(dir);
	return only;
}

int
store_remove_job_dir(const struct store_dir *d, const char *id)
{
	static const char *const files[] = {STORE_OUTPUT_FILE, "meta.json"};
	char path[PATH_MAX + 64];
	int fd, e = 0;

	if (!sched_job_id_valid(id, strlen(id)))
		return 0; /* only a direct child of the log dir named as a job id */
	snprintf(path, sizeof(path), "%s/%s", d->path, id);
	fd = job_folder_open(d, id, false);
	if (fd < 0 && (errno == ELOOP || errno == ENOTDIR))
		return unlink(path) < 0 && errno != ENOENT ? -1 : 0; /* a link: itself alone */
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	if (!holds_only(fd, files, NELEM(files))) {
		close(fd);
		errno = ENOTEMPTY; /* a job put more in it, which is not ours to remove */
		return -1;
	}
	/* Through the folder's descriptor: a folder swapped for a link meanwhile loses nothing. */
	for (size_t i = 0; i < NELEM(files); i++)
		if (unlinkat(fd, files[i], 0) < 0 && errno != ENOENT && !e)
			e = errno;
	close(fd);
	if (!e && rmdir(path) < 0 && errno != ENOENT)
		e = errno; /* ENOTEMPTY: a file appeared since holds_only looked */
	errno = e;
	return e ? -1 : 0;
}

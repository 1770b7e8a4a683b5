/*
 * store.h - the durable record of jobs and cards in SQLite (SPEC section 9).
 *
 * One database file <log_dir>/jobs.sqlite3 in WAL mode with synchronous=FULL, so a committed
 * transaction survives kill -9 and power loss. The daemon's memory is the truth for active
 * jobs; the store mirrors it: ttq.c writes every dirty job and card inside one transaction per
 * loop iteration (group commit) and only then answers, starts processes or forgets jobs.
 * Completed jobs live only here. No output text is ever stored (output files are the log).
 *
 * Schema version 4 (PRAGMA user_version): the earlier single-card service's jobs columns
 * (without its NOT NULL constraints) plus a `device` column, and a `cards` table with one row
 * per card (version 4 added its hold columns; a version 3 file gets them in place). Version
 * 1/2 databases of the earlier service are migrated in place (the jobs table rebuilt, its
 * jobs and state become card 0's); a pre-v2 file or a newer version is refused with a message
 * telling to use a fresh logs-v2/.
 *
 * Every function returning int gives 0 (or a count / 1 found) on success and -1 on failure,
 * with store_errmsg() describing the last failure. Statements are prepared once at open and
 * kept for the daemon's life.
 */
#ifndef TTQ_STORE_H
#define TTQ_STORE_H

#include <stdbool.h>

#include "sched.h"

#define STORE_SCHEMA_VERSION 4

struct store;

/* A card's durable row as loaded at start-up. Strings are heap, owned by the caller. */
struct store_card {
	int device;
	int state; /* enum card_state */
	bool reset_pending;
	long long reset_epoch;
	double last_reset_at, dead_since; /* NAN when NULL */
	char *dead_reason;                /* NULL when NULL */
	char *boot_id;                    /* the boot the row was written in, or NULL */
	bool held;                        /* held for maintenance (whatever the boot) */
	char *held_by, *hold_reason;      /* NULL when NULL */
	double held_at;                   /* NAN when NULL */
};

/*
 * Open (creating if needed, mode 0600) the database at path, set WAL, synchronous=FULL and a
 * busy timeout (2 s while opening, then 100 ms: a wait blocks the daemon's loop; 100 ms from
 * the start when `serving`, as the loop already runs), create or migrate the schema. Returns
 * the handle, or NULL with a message in err[0..errlen) that does not repeat path, and with
 * *refused (unless refused is NULL) telling whether the file is one this build will never
 * use: a pre-v2 or newer schema (the message says to use a fresh logs-v2/), or no sound
 * database at all. Any other failure (disk full, quota, I/O error, permissions, a lock held
 * past the busy timeout) may pass, and a later call may succeed. Close with store_close().
 */
struct store *store_open(const char *path, bool serving, char *err, size_t errlen, bool *refused);

/* Finalize statements and close the database. NULL is allowed. */
void store_close(struct store *st);

/* The message of the last failure (static or owned by the handle; valid until the next call). */
const char *store_errmsg(struct store *st);

/* Start a write transaction (BEGIN IMMEDIATE). */
int store_begin(struct store *st);

/*
 * Insert or update the full row of job j (keyed by j->id) with its output file path.
 * env_json is written when j->env_json is not NULL and kept as it was otherwise.
 */
int store_put_job(struct store *st, const struct job *j, const char *output_file);

/*
 * Insert or update card c's row, recording boot_id (the current boot) beside it. The hold's
 * who, when and why are written only while c->held (NULL otherwise).
 */
int store_put_card(struct store *st, const struct card *c, const char *boot_id);

/* Commit the transaction (fsync'd). On failure the transaction is rolled back. */
int store_commit(struct store *st);

/* Roll back the open transaction, if any. */
void store_rollback(struct store *st);

/*
 * Called once per loaded job. The callback owns j's heap strings afterwards (it must keep or
 * free them); output_file is valid only during the call. Return 0 to continue, -1 to stop.
 */
typedef int (*store_job_cb)(void *ctx, struct job *j, const char *output_file);

/* Load queued and running jobs in submission order (env_json left NULL). Returns the count. */
int store_load_active(struct store *st, store_job_cb cb, void *ctx);

/* Load the newest n completed jobs of one card, oldest first. Returns the count. */
int store_load_recent(struct store *st, int device, int n, store_job_cb cb, void *ctx);

/*
 * Read one job by id into *out (sched_job_init()ed first; heap strings owned by the caller,
 * free with sched_job_clear()) and its output file path into *output_file (heap, caller frees;
 * may be NULL to skip). Returns 1 when found, 0 when not, -1 on error.
 */
int store_get_job(struct store *st, const char *id, struct job *out, char **output_file);

/* Read a job's stored env object text into *env_json (heap or NULL when none). 1/0/-1. */
int store_get_env(struct store *st, const char *id, char **env_json);

/* Load every card row; cb owns the strings of each row (free all four). Returns the count. */
int store_load_cards(struct store *st, int (*cb)(void *ctx, struct store_card *c), void *ctx);

/*
 * Delete completed jobs finished before older_than (epoch seconds; 0 = no age limit) and all
 * completed jobs beyond the newest `keep` (keep < 0 = no count limit), in one transaction
 * (SPEC 9, retention). Before any row goes, cb(ctx, id) removes what the caller keeps for that
 * job (its folder): 0 lets the row be deleted, -1 keeps it for the next pass. So a folder never
 * outlives its row: a failed removal or a crash before the commit leaves a row that the next
 * pass finds again. cb may be NULL. Returns the number of rows deleted, or -1 (none deleted).
 */
int store_retention(struct store *st, double older_than, long long keep,
		    int (*cb)(void *ctx, const char *id), void *ctx);

/*
 * Write a copy of the database as committed now to path, never over a file already there:
 * VACUUM INTO a temporary file beside it, fsync'd, then renamed to path, so a crash leaves no
 * file or a whole one. It lets a log dir removed under the daemon be made again from the open
 * handle, the only place its database still lives. Stale -wal and -shm files at path are
 * removed first, and st is then only to be closed: closing it leaves path's files alone.
 * 0, or -1 (store_errmsg).
 */
int store_copy_to(struct store *st, const char *path);

#endif

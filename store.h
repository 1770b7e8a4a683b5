/*
 * store.h - everything the daemon keeps on disk: the log dir, its SQLite database of jobs and
 * cards, and the jobs' folders.
 *
 * The log dir's layout (folders 0700, files 0600):
 *   <log dir>/jobs.sqlite3 (+ -wal, -shm)   the database (STORE_DB_FILE)
 *   <log dir>/<job id>/output               the job's output (STORE_OUTPUT_FILE), written by
 *                                           the caller through the folder store_job_folder opens
 *   <log dir>/<job id>/meta.json            the job's final record (store_write_meta)
 * The caller may keep files of its own beside them (a health script).
 *
 * The database is in WAL mode with synchronous=FULL, so a committed transaction survives
 * kill -9 and power loss. The daemon's memory is the truth for active jobs; the store mirrors
 * it: the caller writes every dirty job and card inside one transaction per loop iteration
 * (group commit) and only then answers, starts processes or forgets jobs. Completed jobs live
 * only here. No output text is ever stored in the database (output files are the log).
 *
 * Schema version 7 (PRAGMA user_version): the earlier single-card service's jobs columns
 * (without its NOT NULL constraints) plus a `device` column and, for a job of several cards,
 * its card list (`device_ids`, `reset_epochs`; version 5), its submission's idempotency key
 * and how it ended (`idempotency_key`, `end_reason`, `signal`; version 6), the processes
 * outside the queue seen holding its cards, its silence timeout and its owner
 * (`foreign_holders`, `silence_timeout`, `owner_uid`; version 7), and a `cards` table with one row per card (version 4 added
 * its hold columns, version 7 `check_pending`). A version 3 to 6 file gets the columns it
 * lacks in place, its rows kept. Version
 * 1/2 databases of the earlier service are migrated in place (the jobs table rebuilt, its
 * jobs and state become card 0's); a pre-v2 file or a newer version is refused with a message
 * telling to use a fresh logs-v2/.
 *
 * Every database function returning int gives 0 (or a count / 1 found) on success and -1 on
 * failure, with store_errmsg() describing the last failure. Statements are prepared once at
 * open and kept for the daemon's life. The log dir's functions fail with a message in the
 * caller's buffer (which does not repeat the log dir's path) or with errno, as each says.
 */
#ifndef TTQ_STORE_H
#define TTQ_STORE_H

#include <stdbool.h>
#include <stddef.h>

#include "sched.h"

#define STORE_SCHEMA_VERSION 7
#define STORE_DB_FILE "jobs.sqlite3" /* the database, in the log dir */
#define STORE_OUTPUT_FILE "output"   /* a job's output file, in its folder */

struct store;     /* an open database */
struct store_dir; /* the log dir, locked */

/*
 * A card's durable row as loaded at start-up: the fields store_put_card writes (the others
 * zero: the card as sched_init would make it, with its stored state), and the boot the row
 * was written in (or NULL). Strings are heap, owned by the caller.
 */
struct store_card {
	struct card card;
	char *boot_id;
};

/*
 * Open (creating if needed, mode 0600) the database at path, set WAL, synchronous=FULL and a
 * busy timeout (2 s while opening, then 100 ms: a wait blocks the daemon's loop; 100 ms from
 * the start when `serving`, as the loop already runs), create or migrate the schema. Returns
 * the handle, or NULL with a message in err[0..errlen) that does not repeat path, and with
 * *refused (unless refused is NULL) telling whether the file is one this build will never
 * use: a pre-v2 or newer schema (the message says to use a fresh logs-v2/), or no sound
 * database at all. Any other failure (disk full, quota, I/O error, permissions, a lock held
 * past the busy timeout) may pass, and a later call may succeed. The handle notes which file
 * it opened (its device and inode, for store_dir_in_place). Close with store_close().
 */
struct store *store_open(const char *path, bool serving, char *err, size_t errlen, bool *refused);

/* Finalize statements and close the database. NULL is allowed. */
void store_close(struct store *st);

/* The message of the last failure of open store st (owned by the handle; valid until the next
 * call). */
const char *store_errmsg(struct store *st);

/* The version of the SQLite library the store runs on, as "3.x.y" (static storage). */
const char *store_sqlite_version(void);

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

/*
 * Load the newest n completed jobs of one card (multi-card jobs naming it included), oldest
 * first. Returns the count.
 */
int store_load_recent(struct store *st, int device, int n, store_job_cb cb, void *ctx);

/*
 * Read one job by id into *out (sched_job_init()ed first; heap strings owned by the caller,
 * free with sched_job_clear()) and its output file path into *output_file (heap, caller frees;
 * may be NULL to skip). Returns 1 when found, 0 when not, -1 on error.
 */
int store_get_job(struct store *st, const char *id, struct job *out, char **output_file);

/* Read a job's stored env object text into *env_json (heap or NULL when none). 1/0/-1. */
int store_get_env(struct store *st, const char *id, char **env_json);

/*
 * The id of the job owner (a uid) submitted with idempotency key `key` into id[33]: 1 found, 0
 * none, -1 on error (a read that failed: the caller cannot tell whether the key is known).
 */
int store_find_key(struct store *st, const char *key, long long owner, char id[33]);

/*
 * When the last commit before this open wrote a row (the newest updated_at of any job or
 * card), wall-clock seconds, or NAN when none is known: the latest moment the previous
 * instance is known to have been alive, read from the rows, which an operator's sqlite3 shell
 * opened after a crash leaves alone (unlike the file's mtime). -1 on error is NAN too.
 */
double store_last_write(struct store *st);

/* Load every card row; cb owns the strings of each row (boot_id, and the card's dead_reason,
 * held_by, hold_reason). Returns the count. */
int store_load_cards(struct store *st, int (*cb)(void *ctx, struct store_card *c), void *ctx);

/*
 * Delete completed jobs finished before older_than (epoch seconds; 0 = no age limit) and all
 * completed jobs beyond the newest `keep` (keep < 0 = no count limit), in one transaction.
 * Before a row goes, its job's folder in d is removed (store_remove_job_dir; d NULL removes
 * none), and a job whose folder stays keeps its row for the next pass: so a folder never
 * outlives its row, even when its removal fails or the daemon dies before the commit.
 * cb(ctx, id, err), when not NULL (and not using st), is told of each job while its row still
 * exists: err 0 when its folder is gone and its row goes with this commit, else the errno
 * saying why the folder (and the row) stays. Returns the number of rows deleted, or -1 (none deleted; folders
 * already removed stay removed, their rows are found again by the next pass).
 */
int store_retention(struct store *st, const struct store_dir *d, double older_than,
		    long long keep, void (*cb)(void *ctx, const char *id, int err), void *ctx);

/*
 * Write a copy of the database as committed now to path, never over a file already there:
 * VACUUM INTO a temporary file beside it, fsync'd, then renamed to path, so a crash leaves no
 * file or a whole one. It lets a log dir removed under the daemon be made again from the open
 * handle, the only place its database still lives. Stale -wal and -shm files at path are
 * removed first, and st is then only to be closed: closing it leaves path's files alone.
 * 0, or -1 (store_errmsg).
 */
int store_copy_to(struct store *st, const char *path);

/* ------------------------------------------------------------------------------ the log dir */

/*
 * Make the log dir at path if need be (with its parents, 0700 within the caller's umask),
 * resolve it to an absolute path (store_dir_path) and lock it: an exclusive flock on the
 * folder itself, held until store_dir_close or the process's death (even by SIGKILL; no file
 * is left behind), keeps a second daemon from running the same queues. A folder of the
 * caller's own that is wider than 0700 is made 0700, so its listing of job ids is not open to
 * every local user; another user's is left as it is, and warn[0..warnlen) then says whose it
 * is (warn is "" when all is well). Returns the handle, or NULL with err[0..errlen) saying
 * why: it cannot be created or opened, or another process holds its lock, never waited for
 * here: errno EWOULDBLOCK when the lock is exclusive (another daemon, or for a moment a child
 * of one just killed, caught between its fork and its exec), EINPROGRESS when it is shared
 * (the guardian of a daemon that died, until that daemon's processes are gone: wait).
 */
struct store_dir *store_dir_open(const char *path, char *err, size_t errlen, char *warn,
				 size_t warnlen);

/* Unlock and forget the log dir. NULL is allowed. */
void store_dir_close(struct store_dir *d);

/* The log dir's absolute path, and its database's ("<log dir>/jobs.sqlite3"); owned by d. */
const char *store_dir_path(const struct store_dir *d);
const char *store_dir_db(const struct store_dir *d);

/*
 * The locked folder's descriptor (close-on-exec, owned by d), which the guardian keeps a copy
 * of (proc_guardian_start): the one instance lock, held by daemon and guardian.
 */
int store_dir_fd(const struct store_dir *d);

/*
 * The log dir's mtime (wall-clock seconds) when store_dir_open locked it: a dead daemon's
 * guardian stamps it when it sees the daemon die, before it kills the jobs; otherwise the last
 * folder made or removed in it. A job found running ended no earlier than that.
 */
double store_dir_changed_at(const struct store_dir *d);

/*
 * Whether d's path still names the folder locked and, unless st is NULL, the database path
 * still names the file st opened. A tmp cleaner or a mistaken rm -rf removes them under the
 * daemon: every job would then fail to make its folder while commits went on into a database
 * that no longer has a name, lost at the next start. A stat of each; no I/O beyond it.
 */
bool store_dir_in_place(const struct store_dir *d, const struct store *st);

/*
 * When d's path no longer names the folder locked (store_dir_in_place), make it again (0700)
 * and lock the new folder in place of the old; whatever lived in the old one (job folders,
 * the caller's files) is not in the new one. Returns 1 when a new folder was made and locked,
 * 0 when the one locked is still in place, -1 with err[0..errlen) when it cannot be done now.
 * warn as for store_dir_open.
 */
int store_dir_remake(struct store_dir *d, char *err, size_t errlen, char *warn, size_t warnlen);

/*
 * Watch the log dir with inotify (again after store_dir_remake made it anew), so that one
 * removed or replaced under an idle daemon is noticed while the daemon sleeps: the folder
 * removed or moved, or a name in it (its database's) removed or moved. Returns the inotify
 * descriptor for the caller's poll (POLLIN; the same one every time, closed by
 * store_dir_close), or -1 when inotify cannot watch it (no descriptors, a file system without
 * it): the caller then looks with store_dir_in_place on a timer.
 */
int store_dir_watch(struct store_dir *d);

/*
 * Read the watch's pending events without waiting: true when one may mean that the log dir or
 * its database is gone or replaced (the caller then looks with store_dir_in_place).
 */
bool store_dir_changed(struct store_dir *d);

/*
 * Write the database again at store_dir_db(d) from the open handle *st, the one place its
 * records still live once its file was removed (store_copy_to), and open that copy (as
 * serving, see store_open): on success *st is closed and replaced by the new handle. Returns
 * 0, or -1 with err[0..errlen) and *st left open, to be tried again (the old handle may then
 * only be copied again or closed).
 */
int store_restore(const struct store_dir *d, struct store **st, char *err, size_t errlen);

/* ------------------------------------------------------------------------------ job folders */

/*
 * The path of a job's output file, <log dir>/<id>/output, as clients are told it. Heap (the
 * caller frees), or NULL with ENOMEM.
 */
char *store_output_path(const struct store_dir *d, const char *id);

/*
 * When the job's output file was last written (its mtime, in wall-clock seconds), or NAN
 * when it cannot be read (never made, removed) or is empty (its mtime is then only when it
 * was made, at the job's start). Only the daemon writes that file, so this is the latest sign
 * of life of a job the daemon lost sight of (a crash).
 */
double store_output_mtime(const struct store_dir *d, const char *id);

/*
 * Make the job's folder <log dir>/<id> (0700) if it is not there, and open it as an O_PATH
 * descriptor (close-on-exec; the caller closes it) for openat(2) of the files in it, such as
 * STORE_OUTPUT_FILE. Never through a link: a folder replaced by a link must not take the
 * daemon's writes elsewhere. Returns the descriptor, or -1 with errno (ELOOP or ENOTDIR for
 * a link or a file in its place, ENOSPC, EACCES...).
 */
int store_job_folder(const struct store_dir *d, const char *id);

/*
 * Write text[0..len) as the job's <log dir>/<id>/meta.json (0600, replacing an older one),
 * never through a link. A folder that is gone is not made again (ENOENT): the record is in
 * the database either way. Returns 0, or -1 with errno (ENOSPC also for a short write).
 */
int store_write_meta(const struct store_dir *d, const char *id, const char *text, size_t len);

/*
 * Write data[0..len) to the file at path whole or not at all: into path.tmp (0600), fsync'd,
 * then renamed over path, so no reader ever finds a part of it (python3 runs an empty script
 * and exits 0). Returns 0, or -1 with errno (ENOSPC also for a short write), the temporary
 * file removed.
 */
int store_write_whole(const char *path, const void *data, size_t len);

/*
 * Remove a job's folder: its output and meta.json, then the folder (absent is fine). Never
 * through a link (a folder replaced by one loses the link alone) and never anything else: a
 * folder holding more (a job wrote into it) stays, with ENOTEMPTY, until someone empties it.
 * Only a direct child named as a job id (32 lowercase hex digits) is ever removed; any other
 * id is left alone (0). Returns 0 when nothing stays, -1 with errno (the first failure) when
 * something does.
 */
int store_remove_job_dir(const struct store_dir *d, const char *id);

#endif

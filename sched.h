/*
 * sched.h - jobs and their phases, cards, the per-card FIFO queues, and the decisions about
 * them: which job or reset a card starts next, what a reset request does, the reset retry
 * ladder, what a reset's end, a hold and a restart make of a card, and what a job found at
 * start-up becomes.
 *
 * The scheduler decides; it does no I/O (but for the line an illegal phase change prints
 * before it aborts), reads no clock (callers pass `now`) and allocates no jobs. ttq.c owns
 * every job's memory (it embeds struct job in its own runtime record), turns the decisions
 * into store commits, process spawns, log lines and answers, and words them.
 * Invariants kept by the functions below:
 *   - a job's phase (enum job_phase) changes only by sched_job_transition, whose table says
 *     which phase may follow which; its durable status (queued, running, done) follows from
 *     the phase, so nothing else assigns it but the store's loader (sched_job_load);
 *   - a job needs one card or several (a multi-card job: a mesh or a tensor-parallel model
 *     opens them all in one process); it is on the queue of each of its cards, and only while
 *     its phase is JOB_PHASE_QUEUED;
 *   - each card runs at most one thing at a time: card->current (a run job or its reset job);
 *     a running multi-card job is the current of each of its cards;
 *   - queues are strict FIFO by submission; every queue operation is O(cards of the job);
 *   - all queued jobs also form one list in submission order (sched->oldest), and every
 *     card's queue is in that order;
 *   - sched->queued_total counts queued jobs (a multi-card job once), each card's `queued`
 *     the jobs on its queue (a multi-card job on each of its cards), and each card's
 *     queued_estimate equals the sum of its queued jobs' run estimates;
 *   - a card's reset state (state, reset_pending, reset_epoch, last_reset_at, the dead and
 *     control-error reasons) and its hold change only here, but for the loading of its stored
 *     row at start-up, and every such change marks the card dirty (to be committed);
 *   - a dead card starts no job: what is queued on it is handed out to fail (sched_fail_next),
 *     a multi-card job naming it included.
 *
 * Why a multi-card job cannot deadlock. A job starts when it heads the queue of each of its
 * cards and each of them is idle, healthy, not held and has no reset pending; a card whose
 * head waits for another card stays idle, and nothing behind that head overtakes it. Every
 * card orders its queue by the one submission order, so the oldest queued job (the head of
 * sched->oldest) heads the queue of every card it needs: all that can come before it on any of
 * those cards was submitted earlier, and is no longer queued. What it waits for is then no
 * queued job but only the cards themselves: running jobs and resets end (each has a timeout),
 * a dead card fails the jobs queued on it, and a hold lasts until the operator's release. So
 * the oldest job starts, the next becomes the oldest, and so on: a cycle of jobs each waiting
 * for a card another one holds in its queue would need two cards that order two jobs
 * differently, which one submission order rules out. A job put back at the front (a start the
 * store could not record) was the head of each of its cards, so the order stays one.
 *
 * Times are wall-clock seconds since the epoch (double); NAN means "not set" (JSON null).
 */
#ifndef TTQ_SCHED_H
#define TTQ_SCHED_H

#include <stdbool.h>
#include <stddef.h>

#define SCHED_DEFAULT_ESTIMATE 10.0 /* seconds per iteration before one was measured */
#define SCHED_RECENT 10             /* completed jobs kept per card for /status */

enum job_status { JOB_QUEUED = 0, JOB_RUNNING, JOB_DONE };
/* A lease (JOB_MODE_LEASE) queues and holds its cards as a job does but starts no process. */
enum job_mode { JOB_MODE_RUN = 0, JOB_MODE_RESET, JOB_MODE_LEASE };

/*
 * Why a job ended, a closed set recorded with its outcome (`end_reason`): clients tell a
 * cancel from a crash from a death by SIGHUP by this, never by words in `error` nor by an
 * exit code of -1, which several of them share. JOB_END_NONE: not done, or a record written
 * before this field existed.
 */
enum job_end {
	JOB_END_NONE = 0,
	JOB_END_EXITED,       /* its shell exited on its own, with exit_code */
	JOB_END_SIGNAL,       /* its shell died of a signal on its own (`signal`) */
	JOB_END_TIMEOUT,      /* stopped at its timeout */
	JOB_END_KILLED,       /* stopped by a kill request */
	JOB_END_CANCELLED,    /* a kill request took it off its queue: it never ran */
	JOB_END_RESET,        /* stopped by a reset of one of its cards */
	JOB_END_SERVICE_STOP, /* stopped because the service stopped */
	JOB_END_CRASH,        /* the daemon died while it ran, found at the next start */
	JOB_END_CARD_DEAD,    /* one of its cards is dead: it never ran */
	JOB_END_CARD_GONE,    /* one of its cards is no longer configured */
	JOB_END_START_FAILED, /* it could not be started (its cwd gone, no /bin/bash, ...) */
	JOB_END_HUNG,         /* stopped after its silence timeout passed without output (a
				 lease: without a renewal of its heartbeat) */
	JOB_END_RELEASED,     /* a lease its owner released */
	JOB_END_COUNT
};
enum card_state { CARD_HEALTHY = 0, CARD_RESETTING, CARD_DEAD };

struct job;

/* A job's place in one card's queue. */
struct job_link {
	struct job *job;
	struct job_link *prev, *next;
};

/* A card of a multi-card job after its first: the job's place and reset epoch there. */
struct job_card {
	int device;
	long long reset_epoch; /* as job->reset_epoch, for this card */
	struct job_link link;
};

/* A job as the API and the store see it. Strings marked heap are owned by the job. */
struct job {
	char id[33];    /* 32 lowercase hex characters + NUL */
	int device;     /* the card (queue) number; a multi-card job's lowest */
	int status;     /* enum job_status: durable, set only with the phase */
	int phase;      /* enum job_phase: in memory only */
	int mode;       /* enum job_mode */
	int timeout;    /* seconds, the effective value */
	int silence_timeout; /* seconds without output before it is stopped as hung; 0: off */
	int repeat;     /* iterations asked for, >= 1 */
	char *cmd;      /* heap; the shell program */
	char *cwd;      /* heap; "" means the daemon's cwd */
	char *client_id; /* heap; diagnostic only */
	char *env_json; /* heap or NULL; the submitted env object, serialized; kept only until
			   stored and again while spawning */
	char *error;    /* heap or NULL */
	int repeat_current;   /* iteration running or last run, 1-based; 0 before start */
	int repeat_completed; /* iterations that exited 0 */
	double first_iteration_elapsed; /* seconds, NAN until measured */
	double per_iter_estimate;       /* seconds per iteration */
	double submitted_at, started_at, finished_at;
	double stop_requested_at, stop_escalated_at;
	double elapsed;       /* seconds from start to finish, NAN until done */
	int exit_code;        /* valid when has_exit_code */
	int end_reason;       /* enum job_end */
	int end_signal;       /* the signal its shell died of, 0 when none */
	/* A multi-card job's other cards, ascending (sched_job_set_cards); a job of one card
	 * has none, so single-card jobs carry no heap array. */
	int nmore;
	bool has_exit_code;
	bool timed_out;
	bool log_truncated;
	bool dirty;            /* changed since the last successful store commit */
	char *idempotency_key; /* heap or NULL: the client's key for its submission */
	long long owner_uid;   /* the user it runs as and who may act on it; -1 unknown (a record
				  written before owners, or a card's reset) */
	char *foreign_holders; /* heap or NULL: a JSON array of the processes outside the queue
				  seen holding its cards while it ran */
	long long log_size;          /* bytes in the output file */
	long long dropped_log_bytes; /* output bytes not stored because of the cap */
	long long reset_epoch; /* the card's epoch at submission, then at start */
	struct job_card *more; /* heap, nmore entries, or NULL */
	/* Links owned by the scheduler: the first card's queue, and the submission order. */
	struct job_link link;
	struct job *older, *newer;
	double plan_wait; /* sched_plan's estimated wait in seconds, valid right after it */
};

/* A card: its durable reset state and its queue. */
struct card {
	int device;
	int state;           /* enum card_state */
	bool reset_pending;  /* a reset goes before the next job */
	long long reset_epoch;
	double last_reset_at, dead_since; /* NAN when not set */
	char *dead_reason;   /* heap or NULL */
	/* A maintenance hold (durable): nothing more starts on the card until it is released. */
	bool held;
	char *held_by;       /* heap or NULL: the client id that held it */
	double held_at;      /* NAN when not held */
	char *hold_reason;   /* heap or NULL */
	char *control_error; /* heap or NULL: its last reset could not run a control command */
	/* Its health check runs before its next job (durable): a job that timed out, was killed
	 * or died of a signal may have left it wedged, and the next job would inherit that. */
	bool check_pending;
	/* A process outside the queue has it open (in memory, read fresh before each start):
	 * nothing starts on it, for a job beside that process is two jobs on one card. */
	bool foreign;
	bool reset_forced;   /* its pending reset goes ahead over such a process (reset --force) */
	bool dirty;          /* durable fields changed since the last commit */
	struct job *current; /* the running job or reset, or NULL */
	struct job_link *head, *tail; /* queued jobs, FIFO */
	int queued;
	double queued_estimate; /* seconds: sum of sched_job_estimate() over the queue */
	double plan_free;       /* sched_plan's seconds until the card has run all its queue */
};

struct sched {
	struct card *cards; /* heap, ncards entries, sorted by device */
	int ncards;
	int queued_total; /* queued jobs over all cards, a multi-card job once */
	int multi_queued; /* of them, multi-card jobs: while none, cards are independent */
	struct job *oldest, *newest; /* every queued job in submission order */
};

/* What a card should do next (sched_next). */
enum sched_action { SCHED_IDLE = 0, SCHED_START_JOB, SCHED_START_RESET, SCHED_START_CHECK };

/* Result of a reset request on one card (RESET_REFUSED: a process outside the queue has it
 * open, and the request did not force it; the caller's decision, never sched_reset_request's). */
enum reset_action {
	RESET_SCHEDULED = 0,
	RESET_JOINED,
	RESET_ALREADY_RESET,
	RESET_DEAD,
	RESET_REFUSED
};

/*
 * Set up one healthy, empty card per device number (devices need not be sorted; duplicates
 * are collapsed). Returns 0, or -1 with errno ENOMEM. Free with sched_free().
 */
int sched_init(struct sched *s, const int *devices, int n);

/*
 * Release the card array and the cards' heap strings (dead_reason, held_by, hold_reason,
 * control_error; not the jobs, which the caller owns).
 */
void sched_free(struct sched *s);

/* The card with this device number, or NULL when it is not configured. O(log n). */
struct card *sched_card(struct sched *s, int device);

/*
 * A fresh job record, queued, of one card: everything zero/empty, NAN times, estimate 10 s,
 * repeat 1.
 */
void sched_job_init(struct job *j);

/*
 * Whether s[0..n) is a job id as the daemon makes them: 32 lowercase hex digits (so never "."
 * nor a path, and never a link's name under the log dir).
 */
bool sched_job_id_valid(const char *s, size_t n);

/* Free a job's heap strings and card array (not the job itself) and clear the pointers. */
void sched_job_clear(struct job *j);

/*
 * Give job j the cards devices[0..n), n >= 1, distinct (the caller validated them; any
 * order): j->device becomes the lowest, and for n > 1 j->more (heap) the others ascending,
 * each with reset epoch 0. Replaces any cards j had. 0, or -1 with errno ENOMEM (j unchanged).
 */
int sched_job_set_cards(struct job *j, const int *devices, int n);

/* The number of cards j needs (1 + j->nmore), and the i-th of them ascending (i = 0: device). */
int sched_job_ncards(const struct job *j);
int sched_job_device(const struct job *j, int i);

/*
 * The reset epoch j recorded for card `device` (at submission, then at its start), or -1 when
 * j does not name that card.
 */
long long sched_job_epoch(const struct job *j, int device);

/* Whether j names card `device`. */
bool sched_job_on(const struct job *j, int device);

/*
 * Record the current reset epoch of each of j's cards in j (at submission and at start), so a
 * job-based reset request can tell, card by card, whether that card was reset since.
 * Unconfigured cards are skipped.
 */
void sched_job_note_epochs(struct sched *s, struct job *j);

/*
 * Append a queued job (fresh from sched_job_init, or loaded queued) at the tail of each of
 * its cards' queues and of the submission order. O(cards of j). -1 (nothing changed) when one
 * of its cards is not configured.
 */
int sched_enqueue(struct sched *s, struct job *j);

/* Remove a queued job from its cards' queues (cancel, dead card, restart). O(cards of j). */
void sched_unlink(struct sched *s, struct job *j);

/*
 * Put a starting job back at the head of each of its cards' queues and of the submission
 * order (a start the store could not record): it becomes JOB_PHASE_QUEUED. It was the head of
 * each when it started and nothing got ahead of it since, so every queue keeps the one order.
 * O(cards of j).
 */
void sched_requeue_front(struct sched *s, struct job *j);

/*
 * Decide what card c starts now. A card starts only when nothing is current, it is not held,
 * the store is writable (store_ok) and no process outside the queue holds it (c->foreign;
 * but a forced reset goes ahead). A pending reset goes first (SCHED_START_RESET; the
 * caller creates the reset job), on a dead card too (its recovery asked for again); then a
 * pending health check (SCHED_START_CHECK: the caller runs it as a reset job begun with
 * sched_check_start); else a card that is not dead starts its head job, which is unlinked and
 * returned in *out (SCHED_START_JOB). A multi-card head starts only when it also heads the queue of each of its
 * other cards and each of them is idle, healthy, not held and has no reset pending; until
 * then c stays idle, and no job behind it on c overtakes it (see the argument above). The
 * caller makes the job current on its cards with sched_occupy().
 */
enum sched_action sched_next(struct sched *s, struct card *c, bool store_ok, struct job **out);

/* Why a queued job of several cards waits for one of its cards (sched_job_blocker). */
enum card_blocker {
	BLOCKER_NONE = 0, /* every card of it is ready */
	BLOCKER_BUSY,     /* the card runs a job or a reset */
	BLOCKER_HELD,     /* the card is held */
	BLOCKER_RESET,    /* the card has a reset or a health check pending */
	BLOCKER_FOREIGN,  /* a process outside the queue holds the card */
	BLOCKER_DEAD,     /* the card is dead (the job is failed soon) */
	BLOCKER_AHEAD,    /* an older job heads that card's queue */
};

/*
 * The first of j's cards, in ascending order, that keeps queued job j from starting, by the
 * rule of sched_next; *device is its number. BLOCKER_NONE for a job of one card or one whose
 * cards are all ready. A card whose head waits for another card looks idle: this says why
 * (status shows it), so an operator is not left to guess that a hold elsewhere stops it.
 */
enum card_blocker sched_job_blocker(struct sched *s, const struct job *j, int *device);

/* The blocker's words for status ("held", "busy", ...). */
const char *sched_blocker_name(enum card_blocker b);

/* j now runs: it becomes the current of each of its cards. */
void sched_occupy(struct sched *s, struct job *j);

/* j ended (or did not start after all): each of its cards whose current it is becomes idle. */
void sched_vacate(struct sched *s, struct job *j);

/*
 * The job's remaining run estimate in seconds at wall time now: repeat x per-iteration
 * estimate for a queued job, that minus the time already run for a running one (>= 0), 0 when
 * done.
 */
double sched_job_estimate(const struct job *j, double now);

/*
 * Estimate, at wall time now, when every queued job starts, as the rule of sched_next runs
 * them: each card is free once its current job (its estimate's remainder) and a pending reset
 * (one default step) are over; then, in submission order, a job starts when the last of its
 * cards is free, and keeps each of them for its estimate. Fills each queued job's plan_wait
 * and each card's plan_free (seconds from now). O(queued jobs x their cards).
 */
void sched_plan(struct sched *s, double now);

/*
 * Seconds until job j, about to be submitted (its cards set, not yet enqueued), would start.
 * While no multi-card job is queued and j needs one card, that is its card's current job,
 * pending reset and queued estimates, O(1) (without it each submission walked the whole queue:
 * the submissions figure of make bench fell below its budget); else the plan's (sched_plan):
 * the last of its cards to be free.
 */
double sched_submit_wait(struct sched *s, const struct job *j, double now);

/*
 * Seconds until queued job j would start: what runs before it on its card (the running job,
 * a pending reset, the jobs ahead of it: O(position)) while no multi-card job is queued, else the
 * plan's (sched_plan).
 */
double sched_queued_wait(struct sched *s, const struct job *j, double now);

/*
 * The POST /queue position of job j, not yet enqueued: how many jobs or resets run before it on
 * its card, the running one included (0 on an idle card); the largest over its cards.
 */
int sched_submit_position_job(struct sched *s, const struct job *j);

/*
 * The GET /job position of a queued job: its 1-based index among its card's queued jobs (the
 * largest over a multi-card job's cards), 0 when it is not queued. O(n).
 */
int sched_queued_position(struct sched *s, const struct job *j);

/*
 * Apply a reset request to card c. job_epoch is the reset_epoch recorded on the named job for
 * a job-based request, or -1 for a card request. revive: the request names this one card
 * alone, which is how an operator runs a dead card's recovery again. Pending or resetting
 * already: RESET_JOINED. Dead without revive: RESET_DEAD. job_epoch below the card's epoch:
 * RESET_ALREADY_RESET. Otherwise sets reset_pending (card becomes dirty) and returns
 * RESET_SCHEDULED; the caller stops the running job when preemption applies.
 */
enum reset_action sched_reset_request(struct card *c, long long job_epoch, bool revive);

/* The control commands of a card's reset procedure. */
enum reset_step { RESET_STEP_RESET = 0, RESET_STEP_HEALTH, RESET_STEP_DEEP };

/* Where a card's reset procedure stands: the command running (or last run) and what ran. */
struct reset_ladder {
	int step;       /* enum reset_step */
	int attempt;    /* reset commands run so far in the plain ladder, from 1 */
	bool deep_done; /* the deep reset has run */
	bool was_dead;  /* the card was dead when it began: its recovery, asked for again */
	bool check;     /* a health check alone (sched_check_start), no reset run yet */
};

/* What follows a step's command (sched_reset_next). */
enum reset_next {
	RESET_NEXT_RUN = 0,    /* run the command of ladder->step now */
	RESET_NEXT_HEALTHY,    /* the health check passed: the card is healthy */
	RESET_NEXT_DEAD,       /* every attempt failed: the card is dead */
	RESET_NEXT_UNRUNNABLE, /* the command could not run at all: a configuration error */
};

/*
 * The retry ladder: the command of l->step ended with exit status `code` (the shell's, so 126
 * and 127 mean it could not be run); decide what comes next and move *l there. A reset that
 * exits 0 is followed by the health check, a health check that exits 0 makes the card healthy.
 * A failed reset or health check is tried again (the reset command, then the health check) up
 * to 1 + retries times in all; then the deep reset runs once when has_deep, and after it the
 * reset and the health check again; a failure after that, or of the deep reset, is the card
 * dead. 126, 127, and 2 of the built-in health check (default_health: it cannot import
 * tt_umd) are RESET_NEXT_UNRUNNABLE: they say nothing about the card. A health check alone
 * (l->check) that passes is RESET_NEXT_HEALTHY; one that fails leaves l->check false and goes
 * on as a reset procedure from its first step (the caller then calls sched_check_failed). No
 * I/O.
 */
enum reset_next sched_reset_next(struct reset_ladder *l, int code, long long retries, bool has_deep,
				 bool default_health);

/* ---- a card's state: what a reset's start and end, a hold and a restart make of it */

/*
 * Take back a reset request's RESET_SCHEDULED on c that could not be committed: the reset is
 * no longer pending, as on disk, and c stays dirty so the next commit writes it so.
 */
void sched_reset_withdraw(struct card *c);

/*
 * The reset procedure of card c starts now (sched_next said SCHED_START_RESET): *l begins at
 * its first step (the reset command, attempt 1) and records whether c was dead; c becomes CARD_RESETTING
 * (dirty). reset_pending stays as it is until the end, so a request meanwhile joins this one.
 */
void sched_reset_start(struct card *c, struct reset_ladder *l);

/*
 * The health check of card c starts now (sched_next said SCHED_START_CHECK): *l begins at the
 * health check with l->check set. c keeps its state (healthy) while only its health is read.
 */
void sched_check_start(struct card *c, struct reset_ladder *l);

/*
 * c's health check failed (sched_reset_next cleared l->check): c becomes CARD_RESETTING
 * (dirty) for the reset procedure that follows, as if sched_reset_start had begun it.
 */
void sched_check_failed(struct card *c);

/*
 * The reset procedure that sched_reset_start(c, l) began has ended at wall time now, as
 * sched_reset_next's last answer `how` says. The reset is no longer pending, nor a health
 * check, nor a forced reset; c becomes dirty. A health check alone that passed (l->check)
 * leaves c as it was: healthy, its epoch unchanged.
 *   RESET_NEXT_HEALTHY: c is healthy, its reset epoch moves on (a job-based request for a job
 *     started before it is then "already reset"), last_reset_at is now, and its dead reason
 *     and control error are cleared.
 *   RESET_NEXT_DEAD: c is dead since now, reason its dead reason.
 *   RESET_NEXT_UNRUNNABLE: a command could not run at all, which says nothing about the card:
 *     c goes back to what it was (dead when l->was_dead, else healthy) and reason becomes its
 *     control error, kept until a reset succeeds.
 * reason: heap or NULL, owned by c afterwards (freed when HEALTHY). RESET_NEXT_RUN is no end:
 * c is left alone and reason freed. What was queued on a card now dead is then the caller's to
 * fail (sched_fail_next).
 */
void sched_reset_end(struct card *c, const struct reset_ladder *l, enum reset_next how,
		     char *reason, double now);

/*
 * The next job that can never run because c is dead: the head of its queue, unlinked from
 * every card's queue it is on (a multi-card job naming c goes too; O(cards of the job)); NULL
 * when c is not dead or its queue is empty. A dead card starts nothing (sched_next), so a job
 * left on its queue would wait forever: the caller fails each one as never run.
 */
struct job *sched_fail_next(struct sched *s, struct card *c);

/*
 * The running job that a reset request, whose action on c was act, stops; NULL for none. Only
 * when resets preempt (the configuration) and the reset goes ahead (RESET_SCHEDULED or
 * RESET_JOINED), and only a run job or a lease, never the reset itself. A held card's reset
 * waits for its release, so its running job is let finish. job_id NULL: a request for the card
 * or for all cards stops whatever job runs; else only the job it named (a job-based request).
 */
struct job *sched_reset_preempts(const struct card *c, enum reset_action act, bool preempts,
				 const char *job_id);

/* A card's maintenance hold as one value, to put on a card or take back (sched_hold_swap). */
struct card_hold {
	bool held;
	char *by, *reason; /* heap or NULL */
	double at;         /* wall-clock seconds; NAN when not held */
};

/*
 * Swap c's hold with *h: c takes h's fields and h gets c's former ones, the strings changing
 * owner both ways; c becomes dirty. A hold or a release is one swap, and putting memory back
 * as it is on disk, when the change cannot be committed, is a second one.
 */
void sched_hold_swap(struct card *c, struct card_hold *h);

/*
 * Whether a card row written in the boot row_boot (NULL: not recorded) is of this boot, boot.
 * boot NULL: this boot's id could not be read, which counts as the same boot, so that a dead
 * card is not taken for recovered on a guess.
 */
bool sched_same_boot(const char *row_boot, const char *boot);

/*
 * Whether a card stored in `state` (enum card_state) in a boot (same_boot: this one) is dead
 * now. Only a reboot brings a dead card back, so one dead in this boot stays dead, and stays
 * listed even when its device node has gone.
 */
bool sched_stays_dead(int state, bool same_boot);

/*
 * Start-up: c has just been given its stored row's state, reset_pending, reset_epoch,
 * dead_since and dead_reason (and its hold, which outlives restarts and reboots alike); apply
 * what a restart changes. A card dead in an earlier boot is healthy again (the reboot reset
 * it), with its reset epoch moved on and no reset pending; a card that was resetting (a stop
 * cut its reset short) has its reset pending, so it runs again now; if that reset was a dead
 * card's recovery (dead_since is set), the card is dead again until the rerun passes. A card
 * that is not dead
 * keeps no dead reason. c becomes dirty when it changed. Returns true when a card dead in an
 * earlier boot was brought back (the caller logs it).
 */
bool sched_card_restore(struct card *c, bool same_boot);

/* What a job found queued or running in the store at start-up becomes (sched_recover_job). */
enum recover_action {
	RECOVER_QUEUE = 0,   /* queued on cards that serve: back at the tail of their queues */
	RECOVER_INTERRUPTED, /* it was running: its processes died with the daemon; it fails as
				interrupted and is never run again (a reset runs again all the
				same: its card was resetting, see sched_card_restore) */
	RECOVER_DEAD_CARD,   /* queued naming a card dead in this boot: it fails, never run */
	RECOVER_CARD_GONE,   /* one of its cards is not configured any more: it fails */
};

/*
 * What job j, found active at start-up, becomes, its cards as sched_card_restore left them;
 * *device is the card the answer is about (the first one not configured, or dead; else
 * j->device). A card that is gone comes first: a job found running was interrupted either
 * way, but the message says why its card is missing. The store gives the jobs in submission
 * order, so every queue keeps the one order when each RECOVER_QUEUE job is appended.
 */
enum recover_action sched_recover_job(struct sched *s, const struct job *j, int *device);

/*
 * When job j, found running at start-up, ended, in wall-clock seconds. Its processes died
 * with the daemon at a moment nothing recorded; charging it until now would count the
 * downtime as its run. last_output (NAN when unknown) is when its output file was last
 * written, a lower bound (only the daemon writes that file), else it is taken as having
 * ended at its start. Clamped to [started_at, now], as the wall clock may have been stepped;
 * now when it never started.
 */
double sched_interrupted_at(const struct job *j, double last_output, double now);
/*
 * A job's life in this daemon, one phase at a time. Every change goes through
 * sched_job_transition and its table of legal changes (per mode: a run job or a card's reset),
 * so a job can be neither run twice nor lost by a change nobody meant: that aborts, in one
 * place. The durable status is a function of the phase.
 */
enum job_phase {
	JOB_PHASE_QUEUED = 0, /* queued: on its card's queue (a reset job: being made) */
	JOB_PHASE_STARTING,   /* running: dispatched; its process waits until that is committed */
	JOB_PHASE_RUNNING,    /* running: its process runs, or ended and leftovers are awaited */
	JOB_PHASE_STOPPING,   /* running: a stop was asked (kill, deadline, preemption, shutdown) */
	JOB_PHASE_DONE,       /* done: its outcome is set; forgotten once that is committed */
	JOB_PHASE_FORGOTTEN,  /* released from memory; its status stays the last one */
	JOB_PHASE_N
};

/*
 * Move j to phase `to`; its status becomes the one `to` maps to (FORGOTTEN keeps the last). A change
 * the table does not allow for j's mode is a bug: it names the job and both phases on stderr
 * and aborts, rather than go on with a job that might run twice or be lost.
 */
void sched_job_transition(struct job *j, enum job_phase to);

/* A job read back from the store: its stored status and the phase that status starts in. */
void sched_job_load(struct job *j, int status);

/* The phase's name for messages ("queued", "starting", ...); "unknown" out of range. */
const char *sched_phase_name(int phase);

/* Names for the enums as the API spells them ("queued", "run", "healthy", "scheduled"). */
const char *sched_status_name(int status);
const char *sched_mode_name(int mode);
/* The end_reason's name ("exited", "signal", ...); NULL for JOB_END_NONE and out of range. */
const char *sched_end_name(int end);
/* The enum job_end of a name, or JOB_END_NONE when it is none of them (or NULL). */
int sched_end_parse(const char *name);
const char *sched_state_name(int state);
const char *sched_reset_action_name(enum reset_action a);

#endif

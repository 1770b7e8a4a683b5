/*
 * sched.c - per-card FIFO queues, estimates, the reset-request rules, the reset ladder, the
 * card state changes of a reset's start and end, a hold and a restart (the card state table),
 * and the job phase table.
 *
 * Pure bookkeeping: no I/O (but the line an illegal phase or state change prints as it
 * aborts), no clocks (callers pass `now`), no allocation except the card array and a
 * multi-card job's array of its other cards (a card's heap strings come from the caller, which
 * hands them over). A job's phase changes only in sched_job_transition, against one table per
 * mode; a card's state only in card_transition, against card_legal.
 * Queues are intrusive doubly-linked lists of struct job_link (one per job and card: embedded
 * for a job's first card, in its array for the others), and all queued jobs are also linked
 * in submission order, so enqueue, dequeue and cancel are O(cards of the job); each card keeps
 * its queued count and the sum of its queued jobs' estimates so a submission's position and
 * wait are O(1) too while no multi-card job is queued (with one, a wait is planned over all
 * queued jobs: sched_plan).
 */
#include "sched.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

int
sched_init(struct sched *s, const int *devices, int n)
{
	int *sorted, i, k = 0;

	memset(s, 0, sizeof(*s));
	if (n <= 0) {
		errno = EINVAL;
		return -1;
	}
	sorted = malloc(sizeof(int) * (size_t)n);
	s->cards = calloc((size_t)n, sizeof(*s->cards));
	if (!sorted || !s->cards) {
		free(sorted);
		free(s->cards);
		s->cards = NULL;
		errno = ENOMEM;
		return -1;
	}
	memcpy(sorted, devices, sizeof(int) * (size_t)n);
	qsort(sorted, (size_t)n, sizeof(int), cmp_int);
	for (i = 0; i < n; i++) {
		if (k > 0 && s->cards[k - 1].device == sorted[i])
			continue;
		s->cards[k].device = sorted[i];
		s->cards[k].state = CARD_HEALTHY;
		s->cards[k].last_reset_at = NAN;
		s->cards[k].dead_since = NAN;
		s->cards[k].held_at = NAN;
		k++;
	}
	s->ncards = k;
	free(sorted);
	return 0;
}

void
sched_free(struct sched *s)
{
	int i;

	for (i = 0; i < s->ncards; i++) {
		free(s->cards[i].dead_reason);
		free(s->cards[i].held_by);
		free(s->cards[i].hold_reason);
		free(s->cards[i].control_error);
	}
	free(s->cards);
	memset(s, 0, sizeof(*s));
}

struct card *
sched_card(struct sched *s, int device)
{
	int lo = 0, hi = s->ncards - 1;

	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;

		if (s->cards[mid].device == device)
			return &s->cards[mid];
		if (s->cards[mid].device < device)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

void
sched_job_init(struct job *j)
{
	memset(j, 0, sizeof(*j));
	j->repeat = 1;
	j->per_iter_estimate = SCHED_DEFAULT_ESTIMATE;
	j->first_iteration_elapsed = NAN;
	j->submitted_at = j->started_at = j->finished_at = NAN;
	j->stop_requested_at = j->stop_escalated_at = NAN;
	j->elapsed = NAN;
	j->owner_uid = -1;
}

bool
sched_job_id_valid(const char *s, size_t n)
{
	size_t i;

	if (n != 32)
		return false;
	for (i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

void
sched_job_clear(struct job *j)
{
	free(j->cmd);
	free(j->cwd);
	free(j->client_id);
	free(j->env_json);
	free(j->error);
	free(j->idempotency_key);
	free(j->foreign_holders);
	free(j->more);
	j->cmd = j->cwd = j->client_id = j->env_json = j->error = j->idempotency_key = NULL;
	j->foreign_holders = NULL;
	j->more = NULL;
	j->nmore = 0;
}

int
sched_job_set_cards(struct job *j, const int *devices, int n)
{
	struct job_card *more = NULL;
	int *sorted, i;

	if (n < 1) {
		errno = EINVAL;
		return -1;
	}
	if (n == 1) { /* the common case allocates nothing */
		free(j->more);
		j->more = NULL;
		j->nmore = 0;
		j->device = devices[0];
		return 0;
	}
	sorted = malloc(sizeof(int) * (size_t)n);
	if (!sorted || !(more = calloc((size_t)n - 1, sizeof(*more)))) {
		free(sorted);
		errno = ENOMEM;
		return -1;
	}
	memcpy(sorted, devices, sizeof(int) * (size_t)n);
	qsort(sorted, (size_t)n, sizeof(int), cmp_int);
	for (i = 1; i < n; i++)
		more[i - 1].device = sorted[i];
	free(j->more);
	j->device = sorted[0];
	j->more = more;
	j->nmore = n - 1;
	free(sorted);
	return 0;
}

int
sched_job_ncards(const struct job *j)
{
	return 1 + j->nmore;
}

int
sched_job_device(const struct job *j, int i)
{
	return i == 0 ? j->device : j->more[i - 1].device;
}

/* j's link on its i-th card, its back-pointer set (a job record may have been copied). */
static struct job_link *
job_link(struct job *j, int i)
{
	struct job_link *l = i == 0 ? &j->link : &j->more[i - 1].link;

	l->job = j;
	return l;
}

long long
sched_job_epoch(const struct job *j, int device)
{
	int i;

	if (device == j->device)
		return j->reset_epoch;
	for (i = 0; i < j->nmore; i++)
		if (j->more[i].device == device)
			return j->more[i].reset_epoch;
	return -1;
}

bool
sched_job_on(const struct job *j, int device)
{
	int i;

	for (i = 0; i < sched_job_ncards(j); i++)
		if (sched_job_device(j, i) == device)
			return true;
	return false;
}

void
sched_job_note_epochs(struct sched *s, struct job *j)
{
	struct card *c;
	int i;

	if ((c = sched_card(s, j->device)))
		j->reset_epoch = c->reset_epoch;
	for (i = 0; i < j->nmore; i++)
		if ((c = sched_card(s, j->more[i].device)))
			j->more[i].reset_epoch = c->reset_epoch;
}

/* Count j in (n = 1) or out of (n = -1) its cards' and the scheduler's queued totals. */
static void
count_queued(struct sched *s, struct job *j, int n)
{
	double est = sched_job_estimate(j, 0);
	int i;

	for (i = 0; i < sched_job_ncards(j); i++) {
		struct card *c = sched_card(s, sched_job_device(j, i));

		c->queued += n;
		c->queued_estimate += n * est;
		/* Floating-point sums drift; an empty queue is exactly zero. */
		if (c->queued == 0 || c->queued_estimate < 0)
			c->queued_estimate = 0;
	}
	s->queued_total += n;
	if (j->nmore > 0)
		s->multi_queued += n;
}

int
sched_enqueue(struct sched *s, struct job *j)
{
	int i;

	for (i = 0; i < sched_job_ncards(j); i++)
		if (!sched_card(s, sched_job_device(j, i)))
			return -1;
	for (i = 0; i < sched_job_ncards(j); i++) {
		struct card *c = sched_card(s, sched_job_device(j, i));
		struct job_link *l = job_link(j, i);

		l->next = NULL;
		l->prev = c->tail;
		if (c->tail)
			c->tail->next = l;
		else
			c->head = l;
		c->tail = l;
	}
	j->newer = NULL;
	j->older = s->newest;
	if (s->newest)
		s->newest->newer = j;
	else
		s->oldest = j;
	s->newest = j;
	count_queued(s, j, 1);
	return 0;
}

void
sched_unlink(struct sched *s, struct job *j)
{
	int i;

	for (i = 0; i < sched_job_ncards(j); i++) {
		struct card *c = sched_card(s, sched_job_device(j, i));
		struct job_link *l = job_link(j, i);

		if (l->prev)
			l->prev->next = l->next;
		else
			c->head = l->next;
		if (l->next)
			l->next->prev = l->prev;
		else
			c->tail = l->prev;
		l->prev = l->next = NULL;
	}
	if (j->older)
		j->older->newer = j->newer;
	else
		s->oldest = j->newer;
	if (j->newer)
		j->newer->older = j->older;
	else
		s->newest = j->older;
	j->older = j->newer = NULL;
	count_queued(s, j, -1);
}

void
sched_requeue_front(struct sched *s, struct job *j)
{
	int i;

	sched_job_transition(j, JOB_PHASE_QUEUED);
	for (i = 0; i < sched_job_ncards(j); i++) {
		struct card *c = sched_card(s, sched_job_device(j, i));
		struct job_link *l = job_link(j, i);

		l->prev = NULL;
		l->next = c->head;
		if (c->head)
			c->head->prev = l;
		else
			c->tail = l;
		c->head = l;
	}
	j->older = NULL;
	j->newer = s->oldest;
	if (s->oldest)
		s->oldest->older = j;
	else
		s->newest = j;
	s->oldest = j;
	count_queued(s, j, 1);
}

/* What keeps card k from starting job j now (BLOCKER_NONE: j heads its queue and k is free):
 * the one rule both sched_next and the status's sched_job_blocker read. */
static enum card_blocker
card_blocker(const struct card *k, const struct job *j)
{
	if (!k || k->state == CARD_DEAD)
		return BLOCKER_DEAD;
	if (k->held)
		return BLOCKER_HELD;
	if (k->current)
		return BLOCKER_BUSY;
	if (k->reset_pending || k->check_pending || k->state != CARD_HEALTHY)
		return BLOCKER_RESET;
	if (k->foreign)
		return BLOCKER_FOREIGN;
	if (!k->head || k->head->job != j)
		return BLOCKER_AHEAD;
	return BLOCKER_NONE;
}

enum card_blocker
sched_job_blocker(struct sched *s, const struct job *j, int *device)
{
	int i;

	if (sched_job_ncards(j) < 2 || j->status != JOB_QUEUED)
		return BLOCKER_NONE;
	for (i = 0; i < sched_job_ncards(j); i++) {
		enum card_blocker b = card_blocker(sched_card(s, sched_job_device(j, i)), j);

		*device = sched_job_device(j, i);
		if (b != BLOCKER_NONE)
			return b;
	}
	return BLOCKER_NONE;
}

const char *
sched_blocker_name(enum card_blocker b)
{
	static const char *const names[] = {"none",         "busy", "held",
					    "reset pending", "held outside the queue",
					    "dead",         "an older job first"};

	return b >= BLOCKER_NONE && b <= BLOCKER_AHEAD ? names[b] : "unknown";
}

enum sched_action
sched_next(struct sched *s, struct card *c, bool store_ok, struct job **out)
{
	struct job *j;
	int i;

	*out = NULL;
	/* A hold stops resets too: the operator is working on the card. */
	if (c->current || c->held || !store_ok)
		return SCHED_IDLE;
	if (c->reset_pending || c->state == CARD_RESETTING)
		return c->foreign && !c->reset_forced ? SCHED_IDLE : SCHED_START_RESET;
	if (c->check_pending && c->state != CARD_DEAD)
		return c->foreign ? SCHED_IDLE : SCHED_START_CHECK;
	if (c->state == CARD_DEAD || !c->head)
		return SCHED_IDLE;
	j = c->head->job;
	for (i = 0; i < sched_job_ncards(j); i++)
		if (card_blocker(sched_card(s, sched_job_device(j, i)), j) != BLOCKER_NONE)
			return SCHED_IDLE; /* it waits for another of its cards; so does c */
	*out = j;
	sched_unlink(s, j);
	return SCHED_START_JOB;
}

void
sched_occupy(struct sched *s, struct job *j)
{
	int i;

	for (i = 0; i < sched_job_ncards(j); i++) {
		struct card *c = sched_card(s, sched_job_device(j, i));

		if (c)
			c->current = j;
	}
}

void
sched_vacate(struct sched *s, struct job *j)
{
	int i;

	for (i = 0; i < sched_job_ncards(j); i++) {
		struct card *c = sched_card(s, sched_job_device(j, i));

		if (c && c->current == j)
			c->current = NULL;
	}
}

double
sched_job_estimate(const struct job *j, double now)
{
	double total = j->per_iter_estimate * j->repeat, ran;

	if (j->status == JOB_DONE)
		return 0;
	if (j->status == JOB_QUEUED || isnan(j->started_at))
		return total;
	ran = now - j->started_at;
	if (!(ran > 0))
		ran = 0;
	return total > ran ? total - ran : 0;
}

/* Seconds until what runs on c now and a pending reset not yet running are over. */
static double
card_busy(const struct card *c, double now)
{
	double wait = 0;

	if (c->current)
		wait += sched_job_estimate(c->current, now);
	/* A pending reset not yet running: its cost is unknown; count it as one default step. */
	if (c->reset_pending && !(c->current && c->current->mode == JOB_MODE_RESET))
		wait += SCHED_DEFAULT_ESTIMATE;
	return wait;
}

/* Seconds until a job submitted now to c would start: current + pending reset + queue. */
static double
card_wait(const struct card *c, double now)
{
	return card_busy(c, now) + c->queued_estimate;
}

void
sched_plan(struct sched *s, double now)
{
	struct job *j;
	int i;

	for (i = 0; i < s->ncards; i++)
		s->cards[i].plan_free = card_busy(&s->cards[i], now);
	for (j = s->oldest; j; j = j->newer) {
		double start = 0, est = sched_job_estimate(j, now);

		for (i = 0; i < sched_job_ncards(j); i++) {
			struct card *c = sched_card(s, sched_job_device(j, i));

			if (c->plan_free > start)
				start = c->plan_free;
		}
		j->plan_wait = start;
		for (i = 0; i < sched_job_ncards(j); i++)
			sched_card(s, sched_job_device(j, i))->plan_free = start + est;
	}
}

double
sched_submit_wait(struct sched *s, const struct job *j, double now)
{
	double wait = 0;
	int i;

	if (s->multi_queued == 0 && j->nmore == 0)
		return card_wait(sched_card(s, j->device), now);
	sched_plan(s, now);
	for (i = 0; i < sched_job_ncards(j); i++) {
		struct card *c = sched_card(s, sched_job_device(j, i));

		if (c && c->plan_free > wait)
			wait = c->plan_free;
	}
	return wait;
}

double
sched_queued_wait(struct sched *s, const struct job *j, double now)
{
	const struct card *c = sched_card(s, j->device);
	const struct job_link *it;
	double wait;

	if (s->multi_queued > 0) {
		sched_plan(s, now);
		return j->plan_wait;
	}
	wait = card_busy(c, now);
	for (it = c->head; it && it->job != j; it = it->next)
		wait += sched_job_estimate(it->job, now);
	return wait;
}

static int
submit_position(const struct card *c)
{
	int pos = c->queued;

	if (c->current)
		pos++;
	if (c->reset_pending && !(c->current && c->current->mode == JOB_MODE_RESET))
		pos++;
	return pos;
}

int
sched_submit_position_job(struct sched *s, const struct job *j)
{
	int i, pos = 0;

	for (i = 0; i < sched_job_ncards(j); i++) {
		const struct card *c = sched_card(s, sched_job_device(j, i));
		int p = c ? submit_position(c) : 0;

		if (p > pos)
			pos = p;
	}
	return pos;
}

int
sched_queued_position(struct sched *s, const struct job *j)
{
	int i, best = 0;

	for (i = 0; i < sched_job_ncards(j); i++) {
		const struct card *c = sched_card(s, sched_job_device(j, i));
		const struct job_link *it;
		int pos = 1;

		for (it = c ? c->head : NULL; it; it = it->next, pos++)
			if (it->job == j)
				break;
		if (it && pos > best)
			best = pos;
	}
	return best;
}

enum reset_action
sched_reset_request(struct card *c, long long job_epoch, bool revive)
{
	if (c->reset_pending || c->state == CARD_RESETTING)
		return RESET_JOINED;
	if (c->state == CARD_DEAD && !revive)
		return RESET_DEAD;
	if (job_epoch >= 0 && job_epoch < c->reset_epoch)
		return RESET_ALREADY_RESET;
	c->reset_pending = true;
	c->dirty = true;
	return RESET_SCHEDULED;
}

/* A reset procedure at its start: the reset command, attempt 1. */
static void
reset_begin(struct reset_ladder *l)
{
	l->step = RESET_STEP_RESET;
	l->attempt = 1;
	l->deep_done = false;
	l->check = false;
}

enum reset_next
sched_reset_next(struct reset_ladder *l, int code, long long retries, bool has_deep,
		 bool default_health)
{
	if (code == 126 || code == 127 || (code == 2 && l->step == RESET_STEP_HEALTH && default_health))
		return RESET_NEXT_UNRUNNABLE;
	if (code == 0 && l->step == RESET_STEP_HEALTH)
		return RESET_NEXT_HEALTHY;
	if (l->check) { /* the card failed its health check alone: the reset procedure follows */
		l->check = false;
		l->step = RESET_STEP_RESET;
		return RESET_NEXT_RUN;
	}
	if (code == 0) { /* a reset (or the deep reset, then a reset) is checked by the health check */
		l->step = l->step == RESET_STEP_DEEP ? RESET_STEP_RESET : RESET_STEP_HEALTH;
		return RESET_NEXT_RUN;
	}
	if (l->step == RESET_STEP_DEEP || l->deep_done)
		return RESET_NEXT_DEAD;
	if (l->attempt < 1 + retries) {
		l->attempt++;
		l->step = RESET_STEP_RESET;
		return RESET_NEXT_RUN;
	}
	if (!has_deep)
		return RESET_NEXT_DEAD;
	l->deep_done = true;
	l->step = RESET_STEP_DEEP;
	return RESET_NEXT_RUN;
}

/* ---- a card's state: what a reset's start and end, a hold and a restart make of it */

void
sched_reset_withdraw(struct card *c)
{
	c->reset_pending = c->reset_forced = false;
	c->dirty = true;
}

/*
 * Which card state may follow which; a change not here is a bug, and card_transition aborts
 * on it. A card's stored state is set as it is when start-up loads it, before any of these.
 *   healthy, dead -> resetting: a reset starts (on a dead card: its recovery, asked again);
 *   resetting -> resetting: a reset a restart cut short runs again (sched_card_restore);
 *   resetting -> healthy: it passed, or its command could not run on a card not dead before;
 *   resetting -> dead: it failed every attempt, its command could not run on a card dead
 *     before, or a restart cut short a dead card's recovery (sched_card_restore);
 *   dead -> healthy: a new boot (sched_card_restore).
 */
#define CARD(s) (1u << CARD_##s)
static const unsigned card_legal[] = {
	[CARD_HEALTHY] = CARD(RESETTING),
	[CARD_RESETTING] = CARD(RESETTING) | CARD(HEALTHY) | CARD(DEAD),
	[CARD_DEAD] = CARD(RESETTING) | CARD(HEALTHY),
};

static void
card_transition(struct card *c, enum card_state to)
{
	if (c->state < CARD_HEALTHY || c->state > CARD_DEAD || !(card_legal[c->state] & (1u << to))) {
		fprintf(stderr, "tt-device-queue: card %d cannot go from %s to %s\n", c->device,
			sched_state_name(c->state), sched_state_name(to));
		abort();
	}
	c->state = to;
	c->dirty = true;
}

void
sched_reset_start(struct card *c, struct reset_ladder *l)
{
	reset_begin(l);
	l->was_dead = c->state == CARD_DEAD;
	card_transition(c, CARD_RESETTING);
}

void
sched_check_start(struct card *c, struct reset_ladder *l)
{
	reset_begin(l);
	l->step = RESET_STEP_HEALTH;
	l->check = true;
	l->was_dead = c->state == CARD_DEAD;
}

void
sched_check_failed(struct card *c)
{
	card_transition(c, CARD_RESETTING);
}

/* Replace the heap string *slot with s (either may be NULL). */
static void
set_str(char **slot, char *s)
{
	free(*slot);
	*slot = s;
}

void
sched_reset_end(struct card *c, const struct reset_ladder *l, enum reset_next how,
		char *reason, double now)
{
	switch (how) {
	case RESET_NEXT_HEALTHY:
		free(reason);
		if (l->check) /* it only read the card's health: nothing was reset */
			break;
		card_transition(c, CARD_HEALTHY);
		c->reset_epoch++;
		c->last_reset_at = now;
		c->dead_since = NAN;
		set_str(&c->dead_reason, NULL);
		set_str(&c->control_error, NULL);
		break;
	case RESET_NEXT_DEAD:
		card_transition(c, CARD_DEAD);
		c->dead_since = now;
		set_str(&c->dead_reason, reason);
		break;
	case RESET_NEXT_UNRUNNABLE:
		if (!l->check)
			card_transition(c, l->was_dead ? CARD_DEAD : CARD_HEALTHY);
		set_str(&c->control_error, reason);
		break;
	default: /* RESET_NEXT_RUN: the procedure goes on */
		free(reason);
		return;
	}
	c->reset_pending = c->check_pending = c->reset_forced = false;
	c->dirty = true;
}

struct job *
sched_fail_next(struct sched *s, struct card *c)
{
	struct job *j;

	if (c->state != CARD_DEAD || !c->head)
		return NULL;
	j = c->head->job;
	sched_unlink(s, j);
	return j;
}

struct job *
sched_reset_preempts(const struct card *c, enum reset_action act, bool preempts,
		     const char *job_id)
{
	struct job *cur = c->current;

	if (!preempts || c->held || !cur || cur->mode == JOB_MODE_RESET)
		return NULL;
	if (act != RESET_SCHEDULED && act != RESET_JOINED)
		return NULL;
	return !job_id || strcmp(cur->id, job_id) == 0 ? cur : NULL;
}

void
sched_hold_swap(struct card *c, struct card_hold *h)
{
	struct card_hold old = {c->held, c->held_by, c->hold_reason, c->held_at};

	c->held = h->held;
	c->held_by = h->by;
	c->hold_reason = h->reason;
	c->held_at = h->at;
	*h = old;
	c->dirty = true;
}

bool
sched_same_boot(const char *row_boot, const char *boot)
{
	return !boot || (row_boot && strcmp(row_boot, boot) == 0);
}

bool
sched_stays_dead(int state, bool same_boot)
{
	return state == CARD_DEAD && same_boot;
}

bool
sched_card_restore(struct card *c, bool same_boot)
{
	bool resetting = c->state == CARD_RESETTING, revived;

	/* A dead card's recovery cut short keeps dead_since (sched_reset_start clears nothing):
	 * it is dead until a recovery passes, or a card that never passed a reset would serve
	 * again when the rerun's command cannot run. */
	if (resetting && !isnan(c->dead_since))
		card_transition(c, CARD_DEAD);
	revived = c->state == CARD_DEAD && !same_boot;
	if (revived) {
		card_transition(c, CARD_HEALTHY);
		c->reset_epoch++;
		c->reset_pending = false;
		c->dirty = true;
	} else if (resetting && !c->reset_pending) {
		c->reset_pending = true;
		c->dirty = true;
	}
	if (!sched_stays_dead(c->state, same_boot)) {
		c->dead_since = NAN;
		set_str(&c->dead_reason, NULL);
	}
	return revived;
}

enum recover_action
sched_recover_job(struct sched *s, const struct job *j, int *device)
{
	int i;

	for (i = 0; i < sched_job_ncards(j); i++) {
		*device = sched_job_device(j, i);
		if (!sched_card(s, *device))
			return RECOVER_CARD_GONE;
	}
	*device = j->device;
	if (j->status == JOB_RUNNING)
		return RECOVER_INTERRUPTED;
	for (i = 0; i < sched_job_ncards(j); i++) {
		*device = sched_job_device(j, i);
		if (sched_card(s, *device)->state == CARD_DEAD)
			return RECOVER_DEAD_CARD;
	}
	*device = j->device;
	return RECOVER_QUEUE;
}

double
sched_interrupted_at(const struct job *j, double last_output, double now)
{
	double t;

	if (isnan(j->started_at))
		return now;
	t = isnan(last_output) || last_output < j->started_at ? j->started_at : last_output;
	return t > now ? now : t;
}

const char *
sched_status_name(int status)
{
	static const char *const names[] = {"queued", "running", "done"};

	return status >= 0 && status <= JOB_DONE ? names[status] : "unknown";
}

const char *
sched_mode_name(int mode)
{
	return mode == JOB_MODE_RESET ? "reset" : mode == JOB_MODE_LEASE ? "lease" : "run";
}

static const char *const end_names[JOB_END_COUNT] = {
	[JOB_END_EXITED] = "exited",
	[JOB_END_SIGNAL] = "signal",
	[JOB_END_TIMEOUT] = "timeout",
	[JOB_END_KILLED] = "killed",
	[JOB_END_CANCELLED] = "cancelled",
	[JOB_END_RESET] = "reset",
	[JOB_END_SERVICE_STOP] = "service_stop",
	[JOB_END_CRASH] = "crash",
	[JOB_END_CARD_DEAD] = "card_dead",
	[JOB_END_CARD_GONE] = "card_gone",
	[JOB_END_START_FAILED] = "start_failed",
	[JOB_END_HUNG] = "hung",
	[JOB_END_RELEASED] = "released",
};

const char *
sched_end_name(int end)
{
	return end > JOB_END_NONE && end < JOB_END_COUNT ? end_names[end] : NULL;
}

int
sched_end_parse(const char *name)
{
	int e;

	for (e = JOB_END_NONE + 1; name && e < JOB_END_COUNT; e++)
		if (strcmp(name, end_names[e]) == 0)
			return e;
	return JOB_END_NONE;
}

const char *
sched_state_name(int state)
{
	static const char *const names[] = {"healthy", "resetting", "dead"};

	return state >= 0 && state <= CARD_DEAD ? names[state] : "unknown";
}

const char *
sched_reset_action_name(enum reset_action a)
{
	static const char *const names[] = {"scheduled", "joined", "already_reset", "dead",
					    "refused"};

	return (unsigned)a <= RESET_REFUSED ? names[a] : "unknown";
}

/* ------------------------------------------------------------------------ job phases */

static const struct {
	const char *name;
	int status; /* enum job_status; -1: the last one stays */
} phases[JOB_PHASE_N] = {
	[JOB_PHASE_QUEUED] = {"queued", JOB_QUEUED},
	[JOB_PHASE_STARTING] = {"starting", JOB_RUNNING},
	[JOB_PHASE_RUNNING] = {"running", JOB_RUNNING},
	[JOB_PHASE_STOPPING] = {"stopping", JOB_RUNNING},
	[JOB_PHASE_DONE] = {"done", JOB_DONE},
	[JOB_PHASE_FORGOTTEN] = {"forgotten", -1},
};

/*
 * Which phase may follow which, for a run job (a lease too: it only has no process to wait
 * for) and for a card's reset job. A change that is not here is a bug, and
 * sched_job_transition aborts on it.
 *   queued -> starting: dispatched (a reset job: made and started at once);
 *   queued -> done: cancelled, its card dead or no longer configured, before it ran;
 *   queued -> forgotten: a submission the store could not record, refused;
 *   starting -> running: its `running` record is committed and its process spawned;
 *   starting -> queued: the commit failed, a run job goes back to the head of its queue;
 *   starting -> forgotten: the commit failed, a reset job is dropped (the reset stays pending);
 *   running -> stopping: a kill, its deadline, a reset's preemption or the shutdown;
 *   stopping -> stopping: a later reason replaces the first (the deadline, the shutdown);
 *   running, stopping -> done: it ended; done -> forgotten: its outcome is committed.
 */
#define PHASE(p) (1u << JOB_PHASE_##p)
static const unsigned phase_legal[2][JOB_PHASE_N] = {
	[JOB_MODE_RUN] = {
		[JOB_PHASE_QUEUED] = PHASE(STARTING) | PHASE(DONE) | PHASE(FORGOTTEN),
		[JOB_PHASE_STARTING] = PHASE(RUNNING) | PHASE(QUEUED),
		[JOB_PHASE_RUNNING] = PHASE(STOPPING) | PHASE(DONE),
		[JOB_PHASE_STOPPING] = PHASE(STOPPING) | PHASE(DONE),
		[JOB_PHASE_DONE] = PHASE(FORGOTTEN),
	},
	[JOB_MODE_RESET] = {
		[JOB_PHASE_QUEUED] = PHASE(STARTING) | PHASE(DONE),
		[JOB_PHASE_STARTING] = PHASE(RUNNING) | PHASE(FORGOTTEN),
		[JOB_PHASE_RUNNING] = PHASE(STOPPING) | PHASE(DONE),
		[JOB_PHASE_STOPPING] = PHASE(STOPPING) | PHASE(DONE),
		[JOB_PHASE_DONE] = PHASE(FORGOTTEN),
	},
};

void
sched_job_transition(struct job *j, enum job_phase to)
{
	bool known = j->mode >= JOB_MODE_RUN && j->mode <= JOB_MODE_LEASE && j->phase >= 0 &&
		     j->phase < JOB_PHASE_N && (unsigned)to < JOB_PHASE_N;

	if (!known || !(phase_legal[j->mode == JOB_MODE_RESET][j->phase] & (1u << to))) {
		fprintf(stderr, "tt-device-queue: job %s (%s) cannot go from phase %s to %s\n",
			j->id, sched_mode_name(j->mode), sched_phase_name(j->phase),
			sched_phase_name(to));
		abort();
	}
	j->phase = to;
	if (phases[to].status >= 0)
		j->status = phases[to].status;
}

void
sched_job_load(struct job *j, int status)
{
	j->status = status;
	j->phase = status == JOB_QUEUED	   ? JOB_PHASE_QUEUED
		   : status == JOB_RUNNING ? JOB_PHASE_RUNNING
					   : JOB_PHASE_DONE;
}

const char *
sched_phase_name(int phase)
{
	return phase >= 0 && phase < JOB_PHASE_N ? phases[phase].name : "unknown";
}

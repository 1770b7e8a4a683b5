/*
 * Unit tests for sched.c: FIFO queues, positions, estimates, reset-request rules, the reset
 * ladder, what a reset's end, a hold and a restart make of a card and its jobs, the job phase
 * table, jobs on several cards, and a randomized property test of the dispatch rule.
 */
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sched.h"
#include "tap.h"

static struct job jobs[8];

static void
mkjobs(void)
{
	int i;

	for (i = 0; i < 8; i++) {
		sched_job_init(&jobs[i]);
		snprintf(jobs[i].id, sizeof(jobs[i].id), "%032d", i);
	}
}

/* Queue job j on card c alone, as a submission for that card does. */
static void
enqueue_on(struct sched *s, struct card *c, struct job *j)
{
	j->device = c->device;
	sched_enqueue(s, j);
}

/* What POST /queue would answer for a new job of one card: its position and its wait. */
static int
submit_pos(struct sched *s, int device)
{
	struct job probe;

	sched_job_init(&probe);
	probe.device = device;
	return sched_submit_position_job(s, &probe);
}

static double
submit_wait(struct sched *s, int device, double now)
{
	struct job probe;

	sched_job_init(&probe);
	probe.device = device;
	return sched_submit_wait(s, &probe, now);
}

static void
test_cards(void)
{
	struct sched s;
	int ids[] = {3, 0, 1, 3};

	ok(sched_init(&s, ids, 4) == 0, "init with duplicates");
	is_int(s.ncards, 3, "duplicate card ids collapse");
	is_int(s.cards[0].device, 0, "cards sorted by number");
	ok(sched_card(&s, 3) == &s.cards[2], "lookup by number");
	ok(sched_card(&s, 2) == NULL, "unconfigured card is NULL");
	ok(isnan(s.cards[1].last_reset_at) && s.cards[1].state == CARD_HEALTHY, "cards start healthy");
	sched_free(&s);
}

static void
test_fifo(void)
{
	struct sched s;
	int ids[] = {0, 1};
	struct card *c0, *c1;
	struct job *out;

	mkjobs();
	sched_init(&s, ids, 2);
	c0 = sched_card(&s, 0);
	c1 = sched_card(&s, 1);
	is_int(submit_pos(&s, c0->device), 0, "idle card: position 0");
	enqueue_on(&s, c0, &jobs[0]);
	enqueue_on(&s, c0, &jobs[1]);
	enqueue_on(&s, c1, &jobs[2]);
	enqueue_on(&s, c0, &jobs[3]);
	is_int(s.queued_total, 4, "queued_total counts all cards");
	is_int(sched_queued_position(&s, &jobs[3]), 3, "1-based position among the card's queue");
	is_int(submit_pos(&s, c0->device), 3, "three queued ahead of a new job");
	ok(sched_next(&s, c0, false, &out) == SCHED_IDLE && !out, "no dispatch while the store is down");
	ok(sched_next(&s, c0, true, &out) == SCHED_START_JOB && out == &jobs[0], "head runs first");
	c0->current = out;
	sched_job_transition(out, JOB_PHASE_STARTING);
	ok(sched_next(&s, c0, true, &out) == SCHED_IDLE, "one job at a time per card");
	ok(sched_next(&s, c1, true, &out) == SCHED_START_JOB && out == &jobs[2],
	   "other card runs independently");
	is_int(submit_pos(&s, c0->device), 3, "running job counts in the submit position");
	sched_unlink(&s, &jobs[1]);
	is_int(sched_queued_position(&s, &jobs[3]), 1, "cancel of a middle job keeps order");
	is_int(s.queued_total, 1, "total after cancel and two starts");
	c0->current = NULL;
	ok(sched_next(&s, c0, true, &out) == SCHED_START_JOB && out == &jobs[3], "FIFO after cancel");
	sched_job_transition(out, JOB_PHASE_STARTING);
	ok(c0->head == NULL && c0->tail == NULL && c0->queued == 0, "queue empty");
	ok(c0->queued_estimate == 0, "empty queue has zero estimate");
	sched_requeue_front(&s, &jobs[3]);
	ok(c0->head->job == &jobs[3] && jobs[3].status == JOB_QUEUED &&
	       jobs[3].phase == JOB_PHASE_QUEUED,
	   "requeue at the front, queued again");
	sched_free(&s);
}

static void
test_estimates(void)
{
	struct sched s;
	int ids[] = {0};
	struct card *c;
	struct job *out;

	mkjobs();
	sched_init(&s, ids, 1);
	c = &s.cards[0];
	jobs[0].repeat = 2;
	enqueue_on(&s, c, &jobs[0]);
	enqueue_on(&s, c, &jobs[1]);
	ok(fabs(c->queued_estimate - 30.0) < 1e-9, "estimate sums repeat x 10 s");
	ok(fabs(submit_wait(&s, c->device, 0) - 30.0) < 1e-9, "wait of a new job is the queue's sum");
	sched_next(&s, c, true, &out);
	c->current = out;
	sched_job_transition(out, JOB_PHASE_STARTING);
	out->started_at = 1000.0;
	ok(fabs(sched_job_estimate(out, 1005.0) - 15.0) < 1e-9, "running: estimate minus time run");
	ok(sched_job_estimate(out, 2000.0) == 0, "never negative");
	ok(fabs(submit_wait(&s, c->device, 1005.0) - 25.0) < 1e-9, "wait = running remainder + queue");
	jobs[2].repeat = 3;
	enqueue_on(&s, c, &jobs[2]);
	ok(fabs(sched_queued_wait(&s, &jobs[1], 1005.0) - 15.0) < 1e-9,
	   "a queued job waits for the running remainder");
	ok(fabs(sched_queued_wait(&s, &jobs[2], 1005.0) - 25.0) < 1e-9,
	   "and for each job ahead of it, not behind it");
	sched_plan(&s, 1005.0);
	ok(fabs(jobs[1].plan_wait - 15.0) < 1e-9 && fabs(jobs[2].plan_wait - 25.0) < 1e-9,
	   "the plan gives single-card jobs the same waits");
	c->reset_pending = true;
	ok(fabs(sched_queued_wait(&s, &jobs[1], 1005.0) - 25.0) < 1e-9,
	   "a pending reset counts one default step");
	c->reset_pending = false;
	sched_job_transition(out, JOB_PHASE_RUNNING);
	sched_job_transition(out, JOB_PHASE_DONE);
	ok(sched_job_estimate(out, 1005.0) == 0, "done jobs estimate 0");
	sched_free(&s);
}

static void
test_resets(void)
{
	struct sched s;
	int ids[] = {0};
	struct card *c;
	struct job *out;

	mkjobs();
	sched_init(&s, ids, 1);
	c = &s.cards[0];
	enqueue_on(&s, c, &jobs[0]);
	ok(sched_reset_request(c, -1, true) == RESET_SCHEDULED && c->reset_pending && c->dirty,
	   "card request schedules and is durable (dirty)");
	ok(sched_reset_request(c, -1, true) == RESET_JOINED, "second request joins");
	c->dirty = false;
	sched_reset_withdraw(c);
	ok(!c->reset_pending && c->dirty, "a request that could not be committed is taken back");
	ok(sched_reset_request(c, -1, true) == RESET_SCHEDULED, "and a new one schedules again");
	is_int(submit_pos(&s, c->device), 2, "a pending reset counts before a new job");
	ok(sched_next(&s, c, true, &out) == SCHED_START_RESET, "pending reset goes before the queue");
	c->reset_pending = false;
	c->reset_epoch = 1;
	ok(sched_reset_request(c, 0, false) == RESET_ALREADY_RESET, "job from epoch 0 after a reset");
	ok(!c->reset_pending, "already_reset runs nothing");
	ok(sched_reset_request(c, 1, false) == RESET_SCHEDULED, "job from the current epoch schedules");
	c->reset_pending = false;
	c->state = CARD_DEAD;
	ok(sched_reset_request(c, -1, false) == RESET_DEAD && !c->reset_pending,
	   "an all-card request leaves a dead card alone");
	ok(sched_reset_request(c, 2, false) == RESET_DEAD && !c->reset_pending,
	   "a job-based request leaves a dead card alone");
	ok(sched_next(&s, c, true, &out) == SCHED_IDLE && !out, "a dead card starts no job");
	c->dirty = false;
	ok(sched_reset_request(c, -1, true) == RESET_SCHEDULED && c->reset_pending && c->dirty,
	   "a request for the dead card alone schedules its recovery (durably)");
	ok(sched_next(&s, c, true, &out) == SCHED_START_RESET && !out,
	   "the dead card's recovery starts");
	ok(sched_reset_request(c, -1, true) == RESET_JOINED, "a second one joins it");
	is_str(sched_reset_action_name(RESET_ALREADY_RESET), "already_reset", "action names");
	is_str(sched_state_name(CARD_RESETTING), "resetting", "state names");
	sched_free(&s);
}

static void
test_hold(void)
{
	struct sched s;
	int ids[] = {0, 1};
	struct card *c, *other;
	struct job *out;

	mkjobs();
	sched_init(&s, ids, 2);
	c = &s.cards[0];
	other = &s.cards[1];
	ok(!c->held && isnan(c->held_at), "cards start released");
	enqueue_on(&s, c, &jobs[0]);
	enqueue_on(&s, c, &jobs[1]);
	enqueue_on(&s, other, &jobs[2]);
	ok(sched_next(&s, c, true, &out) == SCHED_START_JOB && out == &jobs[0], "job 0 starts");
	c->current = out;
	c->held = true;
	ok(c->current == &jobs[0], "a hold leaves the running job alone");
	c->current = NULL;
	ok(sched_next(&s, c, true, &out) == SCHED_IDLE && !out, "a held card starts no job");
	is_int(c->queued, 1, "its queued job stays queued");
	enqueue_on(&s, c, &jobs[3]);
	is_int(c->queued, 2, "and new ones are queued behind it");
	c->reset_pending = true;
	ok(sched_next(&s, c, true, &out) == SCHED_IDLE, "nor a pending reset");
	c->state = CARD_RESETTING;
	ok(sched_next(&s, c, true, &out) == SCHED_IDLE, "nor a reset cut short by a stop");
	ok(sched_next(&s, other, true, &out) == SCHED_START_JOB && out == &jobs[2],
	   "the other card runs on");
	c->held = false;
	ok(sched_next(&s, c, true, &out) == SCHED_START_RESET, "released: the reset goes first");
	c->reset_pending = false;
	c->state = CARD_HEALTHY;
	ok(sched_next(&s, c, true, &out) == SCHED_START_JOB && out == &jobs[1],
	   "then the queue in its order");
	sched_free(&s);
}

/* Give job j the cards devs[0..n) and queue it, as a submission naming them does. */
static void
enqueue_cards(struct sched *s, struct job *j, const int *devs, int n)
{
	sched_job_set_cards(j, devs, n);
	sched_job_note_epochs(s, j);
	sched_enqueue(s, j);
}

/* Why a job of several cards waits: the first of its cards that is not ready. */
static void
test_blocker(void)
{
	struct sched s;
	int ids[] = {0, 1}, dev = -1;

	mkjobs();
	sched_init(&s, ids, 2);
	enqueue_on(&s, sched_card(&s, 1), &jobs[0]);
	enqueue_cards(&s, &jobs[1], (int[]){0, 1}, 2);
	ok(sched_job_blocker(&s, &jobs[1], &dev) == BLOCKER_AHEAD && dev == 1,
	   "blocker: card 0 is ready, an older job heads card 1");
	sched_card(&s, 0)->state = CARD_DEAD;
	ok(sched_job_blocker(&s, &jobs[1], &dev) == BLOCKER_DEAD && dev == 0,
	   "blocker: a dead card, first in order");
	sched_card(&s, 0)->state = CARD_HEALTHY;
	sched_unlink(&s, &jobs[0]);
	sched_card(&s, 1)->foreign = true;
	ok(sched_job_blocker(&s, &jobs[1], &dev) == BLOCKER_FOREIGN && dev == 1,
	   "blocker: card 1 held outside the queue");
	is_str(sched_blocker_name(BLOCKER_FOREIGN), "held outside the queue", "and its words");
	sched_card(&s, 1)->foreign = false;
	ok(sched_job_blocker(&s, &jobs[1], &dev) == BLOCKER_NONE, "none once it heads both");
	sched_unlink(&s, &jobs[1]);
	for (int i = 0; i < 2; i++)
		sched_job_clear(&jobs[i]);
	sched_free(&s);
}

static void
test_multi_cards(void)
{
	struct sched s;
	int ids[] = {0, 1, 2};
	struct card *c0, *c1, *c2;
	struct job *out;

	mkjobs();
	sched_init(&s, ids, 3);
	c0 = sched_card(&s, 0);
	c1 = sched_card(&s, 1);
	c2 = sched_card(&s, 2);
	ok(sched_job_set_cards(&jobs[1], (int[]){2, 0}, 2) == 0, "a job of two cards");
	ok(jobs[1].device == 0 && jobs[1].nmore == 1 && sched_job_device(&jobs[1], 1) == 2,
	   "its cards ascending, the first in device");
	ok(sched_job_on(&jobs[1], 2) && !sched_job_on(&jobs[1], 1), "names its cards only");
	ok(jobs[0].more == NULL && sched_job_ncards(&jobs[0]) == 1, "a single-card job has no array");
	enqueue_on(&s, c0, &jobs[0]);                   /* j0 on 0 */
	enqueue_cards(&s, &jobs[1], (int[]){0, 2}, 2);  /* j1 on 0 and 2 */
	enqueue_on(&s, c2, &jobs[2]);                   /* j2 on 2, behind j1 */
	enqueue_on(&s, c1, &jobs[3]);                   /* j3 on 1, unrelated */
	is_int(s.queued_total, 4, "a multi-card job counts once in queued_total");
	is_int(c0->queued + c1->queued + c2->queued, 5, "and once on each of its cards' queues");
	is_int(s.multi_queued, 1, "one multi-card job queued");
	ok(fabs(c2->queued_estimate - 20.0) < 1e-9, "its estimate counts on each of its queues");
	is_int(sched_queued_position(&s, &jobs[1]), 2, "position: the largest over its cards");
	ok(sched_next(&s, c0, true, &out) == SCHED_START_JOB && out == &jobs[0], "j0 starts on 0");
	sched_occupy(&s, out);
	ok(sched_next(&s, c2, true, &out) == SCHED_IDLE && !out,
	   "card 2 idles: its head j1 waits for card 0, and j2 behind it does not overtake");
	{
		int dev = -1;

		ok(sched_job_blocker(&s, &jobs[1], &dev) == BLOCKER_BUSY && dev == 0,
		   "blocker: j1 waits for card 0, which is busy");
		ok(sched_job_blocker(&s, &jobs[2], &dev) == BLOCKER_NONE,
		   "a job of one card has no blocker");
		is_str(sched_blocker_name(BLOCKER_HELD), "held", "blocker names");
	}
	ok(sched_next(&s, c1, true, &out) == SCHED_START_JOB && out == &jobs[3],
	   "a card the multi-card job does not name runs on");
	sched_occupy(&s, out);
	sched_plan(&s, 0);
	ok(fabs(jobs[1].plan_wait - 10.0) < 1e-9, "plan: j1 starts when j0 (10 s) ends");
	ok(fabs(jobs[2].plan_wait - 20.0) < 1e-9,
	   "plan: j2 on card 2 waits for j1 although card 2 is idle now");
	ok(fabs(sched_queued_wait(&s, &jobs[2], 0) - 20.0) < 1e-9, "queued wait follows the plan");
	sched_job_set_cards(&jobs[4], (int[]){2}, 1);
	ok(fabs(sched_submit_wait(&s, &jobs[4], 0) - 30.0) < 1e-9,
	   "a new job on card 2 waits for j1 and j2");
	is_int(sched_submit_position_job(&s, &jobs[4]), 2, "two jobs ahead of it on card 2");
	sched_vacate(&s, &jobs[0]);
	ok(!c0->current, "j0 ended: card 0 idle");
	{
		int dev = -1;

		ok(sched_job_blocker(&s, &jobs[1], &dev) == BLOCKER_NONE,
		   "blocker: none once both of its cards are ready");
		c2->held = true;
		ok(sched_next(&s, c0, true, &out) == SCHED_IDLE, "a hold of any of its cards holds it");
		ok(sched_job_blocker(&s, &jobs[1], &dev) == BLOCKER_HELD && dev == 2,
		   "blocker: card 2 is held (card 0 looks idle, this says why)");
		c2->held = false;
		c2->reset_pending = true;
		ok(sched_next(&s, c0, true, &out) == SCHED_IDLE,
		   "so does a reset pending on one of them");
		ok(sched_job_blocker(&s, &jobs[1], &dev) == BLOCKER_RESET && dev == 2,
		   "blocker: card 2's pending reset");
	}
	ok(sched_next(&s, c2, true, &out) == SCHED_START_RESET, "which runs first on its card");
	c2->reset_pending = false;
	ok(sched_next(&s, c0, true, &out) == SCHED_START_JOB && out == &jobs[1],
	   "then j1 starts, heading both queues with both cards idle");
	sched_occupy(&s, out);
	ok(c0->current == &jobs[1] && c2->current == &jobs[1], "it is the current of both cards");
	is_int(s.multi_queued, 0, "no multi-card job queued now");
	ok(sched_next(&s, c2, true, &out) == SCHED_IDLE, "card 2 is busy with it");
	sched_vacate(&s, &jobs[1]);
	ok(!c0->current && !c2->current, "once it ended every card it held is free");
	ok(sched_next(&s, c2, true, &out) == SCHED_START_JOB && out == &jobs[2], "then j2");
	sched_occupy(&s, out);
	sched_vacate(&s, out);
	sched_vacate(&s, &jobs[3]);

	/* a start the store could not record goes back to the front of both queues */
	enqueue_on(&s, c0, &jobs[5]);
	enqueue_cards(&s, &jobs[6], (int[]){0, 1}, 2);
	ok(sched_next(&s, c0, true, &out) == SCHED_START_JOB && out == &jobs[5], "j5 starts");
	sched_job_transition(out, JOB_PHASE_STARTING);
	enqueue_on(&s, c1, &jobs[7]);
	sched_requeue_front(&s, &jobs[5]);
	ok(c0->head->job == &jobs[5] && s.oldest == &jobs[5], "requeued at the front");
	sched_unlink(&s, &jobs[5]);
	ok(c0->head->job == &jobs[6] && c1->head->job == &jobs[6] && c1->tail->job == &jobs[7],
	   "cancelled: j6 heads both of its queues, j7 behind it on 1");
	sched_unlink(&s, &jobs[6]);
	ok(c0->head == NULL && c1->head->job == &jobs[7] && s.oldest == &jobs[7] &&
	   c0->queued == 0 && c0->queued_estimate == 0, "a cancel unlinks it from every card");

	/* a card that dies hands out the multi-card jobs naming it, off every queue */
	enqueue_cards(&s, &jobs[6], (int[]){0, 1}, 2);
	c0->state = CARD_DEAD;
	ok(sched_fail_next(&s, c0) == &jobs[6] && !sched_fail_next(&s, c0), "a dead card's queue fails");
	ok(c1->head->job == &jobs[7] && c1->queued == 1 && s.queued_total == 1,
	   "its multi-card job is off the other card's queue too");
	for (int i = 0; i < 8; i++)
		sched_job_clear(&jobs[i]);
	sched_free(&s);
}

static void
test_multi_epochs(void)
{
	struct sched s;
	int ids[] = {0, 1};
	struct job j;

	sched_init(&s, ids, 2);
	sched_job_init(&j);
	s.cards[0].reset_epoch = 4;
	s.cards[1].reset_epoch = 7;
	sched_job_set_cards(&j, (int[]){1, 0}, 2);
	sched_job_note_epochs(&s, &j);
	is_int(sched_job_epoch(&j, 0), 4, "card 0's epoch recorded");
	is_int(sched_job_epoch(&j, 1), 7, "card 1's epoch recorded");
	is_int(sched_job_epoch(&j, 2), -1, "not one of its cards");
	s.cards[1].reset_epoch = 8;
	ok(sched_reset_request(&s.cards[1], sched_job_epoch(&j, 1), false) == RESET_ALREADY_RESET,
	   "a job-based request skips the card reset since the job");
	ok(sched_reset_request(&s.cards[0], sched_job_epoch(&j, 0), false) == RESET_SCHEDULED,
	   "and resets the one that was not");
	sched_job_clear(&j);
	sched_free(&s);
}

/* ---- the randomized property test of the dispatch rule */

#define P_JOBS 40
#define P_CARDS 4
enum fate { F_NONE = 0, F_QUEUED, F_RUNNING, F_DONE, F_CANCELLED, F_FAILED };

/* One random world: up to four cards, jobs submitted in index order. */
struct world {
	struct sched s;
	struct job jobs[P_JOBS], resets[P_CARDS];
	struct reset_ladder ladder[P_CARDS];
	int fate[P_JOBS];
	char reason[P_JOBS][64];
	int nsub;
	int occupant[P_CARDS];  /* job index, P_JOBS + card index for its reset, -1 idle */
	int last_start[P_CARDS]; /* the last job index started on the card, -1 none */
	bool preempts;
	unsigned long long rng;
	unsigned seed;
	unsigned multi_started, multi_waited; /* what the worlds exercised */
	int failures; /* checks failed in this world (only the first is reported) */
};

static unsigned
rnd(struct world *w, unsigned n)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return (unsigned)(w->rng % n);
}

static int
cidx(struct world *w, const struct card *c)
{
	return (int)(c - w->s.cards);
}

static int
jidx(struct world *w, const struct job *j)
{
	return (int)(j - w->jobs);
}

/* A property did not hold: the first failure of a world is reported with its seed. */
#define PCHECK(w, cond, fmt, ...)                                                                  \
	do {                                                                                       \
		if (!(cond) && (w)->failures++ == 0)                                               \
			ok(0, "seed %u: " fmt, (w)->seed, __VA_ARGS__);                            \
	} while (0)

/* A job that ran or was about to run ends (it finished, was killed, or a reset stopped it). */
static void
w_end(struct world *w, struct job *j, const char *why)
{
	int i, k = jidx(w, j);

	for (i = 0; i < sched_job_ncards(j); i++) {
		struct card *c = sched_card(&w->s, sched_job_device(j, i));

		w->occupant[cidx(w, c)] = -1;
	}
	sched_vacate(&w->s, j);
	sched_job_transition(j, JOB_PHASE_DONE);
	w->fate[k] = F_DONE;
	snprintf(w->reason[k], sizeof(w->reason[k]), "%s", why);
}

/* A job unlinked from its queues ends without running: cancelled, or failed for a dead card. */
static void
w_fail(struct world *w, struct job *j, int fate, const char *why)
{
	int k = jidx(w, j);

	sched_job_transition(j, JOB_PHASE_DONE);
	w->fate[k] = fate;
	snprintf(w->reason[k], sizeof(w->reason[k]), "%s", why);
}

static void
w_submit(struct world *w)
{
	int devs[P_CARDS], n = 0, i, k = w->nsub;
	struct job *j = &w->jobs[k];

	if (k >= P_JOBS)
		return;
	if (w->s.ncards > 1 && rnd(w, 5) < 2) {
		for (i = 0; i < w->s.ncards; i++)
			if (rnd(w, 2))
				devs[n++] = w->s.cards[i].device;
		while (n < 2) { /* at least two, distinct */
			int d = w->s.cards[rnd(w, (unsigned)w->s.ncards)].device, dup = 0;

			for (i = 0; i < n; i++)
				dup |= devs[i] == d;
			if (!dup)
				devs[n++] = d;
		}
	} else {
		devs[n++] = w->s.cards[rnd(w, (unsigned)w->s.ncards)].device;
	}
	for (i = 0; i < n; i++)
		if (sched_card(&w->s, devs[i])->state == CARD_DEAD)
			return; /* refused with 503: a dead card takes no work */
	sched_job_init(j);
	snprintf(j->id, sizeof(j->id), "%032d", k);
	j->repeat = 1 + (int)rnd(w, 3);
	sched_job_set_cards(j, devs, n);
	sched_job_note_epochs(&w->s, j);
	sched_enqueue(&w->s, j);
	w->fate[k] = F_QUEUED;
	w->nsub++;
}

/* Job j starts: no card of it has an occupant and nothing older waits on any of them. */
static void
w_start(struct world *w, struct job *j)
{
	int i, k = jidx(w, j), m;

	for (i = 0; i < sched_job_ncards(j); i++) {
		struct card *c = sched_card(&w->s, sched_job_device(j, i));
		int ci = cidx(w, c);

		PCHECK(w, w->occupant[ci] == -1, "job %d starts on card %d held by %d", k,
		       c->device, w->occupant[ci]);
		PCHECK(w, w->last_start[ci] < k, "card %d starts job %d after job %d", c->device,
		       k, w->last_start[ci]);
		for (m = 0; m < k; m++)
			PCHECK(w, !(w->fate[m] == F_QUEUED && sched_job_on(&w->jobs[m], c->device)),
			       "job %d overtakes job %d on card %d", k, m, c->device);
		w->occupant[ci] = k;
		w->last_start[ci] = k;
	}
	sched_occupy(&w->s, j);
	sched_job_transition(j, JOB_PHASE_STARTING);
	sched_job_transition(j, JOB_PHASE_RUNNING);
	w->fate[k] = F_RUNNING;
	w->multi_started += j->nmore > 0;
}

static void
w_dispatch(struct world *w)
{
	int i;

	for (i = 0; i < w->s.ncards; i++) {
		struct card *c = &w->s.cards[i];
		struct job *j;

		switch (sched_next(&w->s, c, true, &j)) {
		case SCHED_START_JOB:
			w_start(w, j);
			break;
		case SCHED_START_RESET:
			PCHECK(w, w->occupant[i] == -1, "reset starts on busy card %d", c->device);
			w->occupant[i] = P_JOBS + i;
			sched_reset_start(c, &w->ladder[i]);
			c->current = &w->resets[i];
			break;
		default: /* idle: count a ready card held back by its multi-card head */
			w->multi_waited += !c->current && !c->held && !c->reset_pending &&
					   c->state == CARD_HEALTHY && c->head && c->head->job->nmore;
			break;
		}
	}
}

/* A reset ends on card index i: healthy, or dead and then its queue fails. */
static void
w_reset_end(struct world *w, int i, bool healthy)
{
	struct card *c = &w->s.cards[i];
	struct job *j;
	char why[64];

	c->current = NULL;
	w->occupant[i] = -1;
	sched_reset_end(c, &w->ladder[i], healthy ? RESET_NEXT_HEALTHY : RESET_NEXT_DEAD, NULL, 0);
	snprintf(why, sizeof(why), "card %d is dead", c->device);
	while ((j = sched_fail_next(&w->s, c)))
		w_fail(w, j, F_FAILED, why);
}

/* A reset request on card index i (job_epoch as sched_reset_request takes it). */
static void
w_reset_request(struct world *w, int i, long long job_epoch, bool revive, const char *job_id)
{
	struct card *c = &w->s.cards[i];
	enum reset_action act = sched_reset_request(c, job_epoch, revive);
	struct job *stop = sched_reset_preempts(c, act, w->preempts, job_id);

	if (stop)
		w_end(w, stop, "interrupted by a reset of its card");
}

/* One random event. */
static void
w_event(struct world *w)
{
	int i = (int)rnd(w, (unsigned)w->s.ncards), k = w->nsub ? (int)rnd(w, (unsigned)w->nsub) : 0;
	struct card *c = &w->s.cards[i];
	struct job *j = &w->jobs[k];

	switch (rnd(w, 10)) {
	case 0:
	case 1:
		w_submit(w);
		break;
	case 2: /* the running job of card i ends, or its reset does */
		if (c->current && c->current->mode == JOB_MODE_RUN)
			w_end(w, c->current, "finished");
		else if (c->current)
			w_reset_end(w, i, rnd(w, 4) != 0);
		break;
	case 3: /* kill JOB_ID */
		if (w->nsub && w->fate[k] == F_QUEUED) {
			sched_unlink(&w->s, j);
			w_fail(w, j, F_CANCELLED, "cancelled by a kill request");
		}
		else if (w->nsub && w->fate[k] == F_RUNNING)
			w_end(w, j, "stopped by a kill request");
		break;
	case 4: /* kill --device N */
		if (c->current && c->current->mode == JOB_MODE_RUN)
			w_end(w, c->current, "stopped by a kill request");
		break;
	case 5: /* reset --device N */
		w_reset_request(w, i, -1, true, NULL);
		break;
	case 6: /* reset JOB_ID: every card it names, each against the epoch it recorded */
		if (!w->nsub)
			break;
		for (i = 0; i < sched_job_ncards(j); i++) {
			int d = sched_job_device(j, i);

			w_reset_request(w, cidx(w, sched_card(&w->s, d)), sched_job_epoch(j, d), false,
					j->id);
		}
		break;
	case 7:
		c->held = !c->held;
		break;
	default:
		w_dispatch(w);
		break;
	}
}

/* The books agree: queues, counts, estimates, the submission order and the occupants. */
static void
w_check(struct world *w)
{
	int i, total = 0, multi = 0, last = -1, inqueue[P_JOBS] = {0};
	const struct job *j;

	for (j = w->s.oldest; j; j = j->newer) {
		PCHECK(w, jidx(w, j) > last, "submission order broken at job %d", jidx(w, j));
		last = jidx(w, j);
		inqueue[last] = 1;
		total++;
		multi += j->nmore > 0;
	}
	PCHECK(w, total == w->s.queued_total && multi == w->s.multi_queued,
	       "queued_total %d / multi %d, but %d / %d listed", w->s.queued_total,
	       w->s.multi_queued, total, multi);
	for (i = 0; i < w->nsub; i++)
		PCHECK(w, inqueue[i] == (w->fate[i] == F_QUEUED),
		       "job %d queued %d but listed %d", i, w->fate[i] == F_QUEUED, inqueue[i]);
	for (i = 0; i < w->s.ncards; i++) {
		const struct card *c = &w->s.cards[i];
		const struct job_link *l;
		double est = 0;
		int n = 0, prev = -1, occ = w->occupant[i];

		for (l = c->head; l; l = l->next, n++) {
			PCHECK(w, sched_job_on(l->job, c->device) && jidx(w, l->job) > prev,
			       "card %d: queue out of order at job %d", c->device, jidx(w, l->job));
			prev = jidx(w, l->job);
			est += sched_job_estimate(l->job, 0);
		}
		PCHECK(w, n == c->queued && fabs(est - c->queued_estimate) < 1e-6,
		       "card %d: queued %d, estimate %g, but %d listed (%g)", c->device, c->queued,
		       c->queued_estimate, n, est);
		PCHECK(w, occ == -1 ? !c->current
			   : occ >= P_JOBS ? c->current == &w->resets[i]
					   : c->current == &w->jobs[occ],
		       "card %d: current is not its occupant %d", c->device, occ);
	}
}

/*
 * After a dispatch pass, the oldest queued job waits only for its cards: if each of them is
 * idle, healthy, not held and has no reset pending, the pass would have started it.
 */
static void
w_check_progress(struct world *w)
{
	const struct job *j = w->s.oldest;
	int i;
	bool ready = j != NULL;

	for (i = 0; j && i < sched_job_ncards(j); i++) {
		const struct card *c = sched_card(&w->s, sched_job_device(j, i));

		ready &= !c->current && !c->held && !c->reset_pending && c->state == CARD_HEALTHY;
	}
	PCHECK(w, !ready, "job %d could start but waits", j ? jidx(w, j) : -1);
}

/* Release the holds and let everything run to its end; every job then has a fate and why. */
static void
w_drain(struct world *w)
{
	int i, round;

	for (i = 0; i < w->s.ncards; i++)
		w->s.cards[i].held = false;
	for (round = 0; round < 4 * P_JOBS + 8; round++) {
		w_dispatch(w);
		w_check_progress(w);
		for (i = 0; i < w->s.ncards; i++) {
			struct card *c = &w->s.cards[i];

			if (c->current && c->current->mode == JOB_MODE_RUN)
				w_end(w, c->current, "finished");
			else if (c->current)
				w_reset_end(w, i, true);
		}
		w_check(w);
		if (!w->s.oldest)
			break;
	}
	PCHECK(w, !w->s.oldest, "%d jobs still queued after the drain", w->s.queued_total);
	for (i = 0; i < w->nsub; i++)
		PCHECK(w, (w->fate[i] == F_DONE || w->fate[i] == F_CANCELLED || w->fate[i] == F_FAILED) &&
			   w->reason[i][0],
		       "job %d ended with no fate (%d) or reason", i, w->fate[i]);
	for (i = 0; i < w->nsub; i++)
		if (w->fate[i] == F_FAILED) {
			int d;

			PCHECK(w, sscanf(w->reason[i], "card %d", &d) == 1 && sched_job_on(&w->jobs[i], d),
			       "job %d failed for a card it does not name: %s", i, w->reason[i]);
		}
}

static void
test_property(void)
{
	static const int pool[] = {0, 1, 2, 3, 5, 7};
	unsigned seed, worlds = 4000, bad = 0, multi_started = 0, waited = 0;

	for (seed = 1; seed <= worlds; seed++) {
		static struct world w;
		int ids[P_CARDS], n, i, step;

		memset(&w, 0, sizeof(w));
		w.seed = seed;
		w.rng = 0x9E3779B97F4A7C15ULL * seed;
		n = 1 + (int)rnd(&w, P_CARDS);
		for (i = 0; i < n; i++)
			ids[i] = pool[(seed + (unsigned)i * 2) % 6];
		sched_init(&w.s, ids, n);
		w.preempts = rnd(&w, 3) != 0;
		for (i = 0; i < P_CARDS; i++) {
			w.occupant[i] = w.last_start[i] = -1;
			sched_job_init(&w.resets[i]);
			w.resets[i].mode = JOB_MODE_RESET;
			sched_job_load(&w.resets[i], JOB_RUNNING);
		}
		for (step = 0; step < 300; step++) {
			w_event(&w);
			w_check(&w);
		}
		w_drain(&w);
		for (i = 0; i < w.nsub; i++)
			sched_job_clear(&w.jobs[i]);
		multi_started += w.multi_started;
		waited += w.multi_waited;
		bad += w.failures > 0;
		sched_free(&w.s);
	}
	ok(bad == 0, "%u seeded worlds of up to 4 cards: no card has two occupants, each card "
		     "starts its jobs in submission order, and every job starts or fails for a "
		     "stated reason (%u worlds broke a rule)", worlds, bad);
	ok(multi_started > worlds && waited > worlds, "the worlds started %u multi-card jobs, and "
	   "%u times a ready card idled for its multi-card head", multi_started, waited);
}

/*
 * Run the ladder from its start with exit statuses codes[] for the commands it asks for, and
 * write the steps it ran as letters (r reset, h health, d deep) into out. Returns the outcome.
 */
static enum reset_next
ladder_run(const int *codes, int n, long long retries, bool deep, bool def_health, char *out)
{
	static const char names[] = "rhd";
	struct reset_ladder l;
	enum reset_next next = RESET_NEXT_RUN;
	int i;

	l = (struct reset_ladder){.attempt = 1}; /* the reset command, attempt 1 */
	for (i = 0; i < n && next == RESET_NEXT_RUN; i++) {
		*out++ = names[l.step];
		next = sched_reset_next(&l, codes[i], retries, deep, def_health);
	}
	*out = '\0';
	return i == n ? next : (enum reset_next)-1; /* -1: the codes did not match the run */
}

static void
test_ladder(void)
{
	char seq[32];

	is_int(ladder_run((int[]){0, 0}, 2, 1, false, false, seq), RESET_NEXT_HEALTHY,
	       "reset and health check pass: healthy");
	is_str(seq, "rh", "reset, then health check");
	is_int(ladder_run((int[]){1, 0, 0}, 3, 1, false, false, seq), RESET_NEXT_HEALTHY,
	       "a failed reset is tried again (retries 1), then healthy");
	is_str(seq, "rrh", "reset, reset, health check");
	is_int(ladder_run((int[]){0, 1, 0, 1}, 4, 1, false, false, seq), RESET_NEXT_DEAD,
	       "health failing after each of 1 + 1 resets, no deep reset: dead");
	is_str(seq, "rhrh", "the whole reset-and-check ran twice");
	is_int(ladder_run((int[]){1}, 1, 0, false, false, seq), RESET_NEXT_DEAD,
	       "retries 0 and no deep reset: one failed reset is the card dead");
	is_int(ladder_run((int[]){1, 1, 0, 0, 0}, 5, 1, true, false, seq), RESET_NEXT_HEALTHY,
	       "both resets fail, the deep reset passes, then reset and health pass: healthy");
	is_str(seq, "rrdrh", "reset, reset, deep, reset, health");
	is_int(ladder_run((int[]){1, 1, 0, 1}, 4, 1, true, false, seq), RESET_NEXT_DEAD,
	       "a reset failing after the deep reset: dead (the deep reset runs once)");
	is_int(ladder_run((int[]){1, 1, 3}, 3, 1, true, false, seq), RESET_NEXT_DEAD,
	       "a failed deep reset: dead");
	is_str(seq, "rrd", "reset, reset, deep");
	is_int(ladder_run((int[]){127}, 1, 5, true, false, seq), RESET_NEXT_UNRUNNABLE,
	       "a reset command not found (127): a configuration error, no retry");
	is_int(ladder_run((int[]){0, 126}, 2, 5, true, false, seq), RESET_NEXT_UNRUNNABLE,
	       "a health check not executable (126): a configuration error");
	is_int(ladder_run((int[]){0, 2}, 2, 5, true, true, seq), RESET_NEXT_UNRUNNABLE,
	       "the built-in health check's 2 (no tt_umd): a configuration error");
	is_int(ladder_run((int[]){0, 2, 0, 0}, 4, 1, false, false, seq), RESET_NEXT_HEALTHY,
	       "a custom health check's 2 is a failed check like any other");
	is_int(ladder_run((int[]){2, 0, 0}, 3, 1, false, true, seq), RESET_NEXT_HEALTHY,
	       "a reset command's 2 is a failed reset, even with the built-in health check");
}

/* A card of s set up as a reset would find it: state, epoch, queued jobs 0..nq-1. */
static struct card *
card_with_queue(struct sched *s, int state, int nq)
{
	int ids[] = {0};
	struct card *c;
	int i;

	mkjobs();
	sched_init(s, ids, 1);
	c = &s->cards[0];
	c->state = state;
	c->reset_epoch = 4;
	for (i = 0; i < nq; i++)
		enqueue_on(s, c, &jobs[i]);
	return c;
}

static char *
sdup(const char *t)
{
	char *p = malloc(strlen(t) + 1);

	if (p)
		strcpy(p, t);
	return p;
}

static void
test_reset_start_end(void)
{
	struct sched s;
	struct reset_ladder l;
	struct card *c;

	c = card_with_queue(&s, CARD_HEALTHY, 2);
	c->reset_pending = true;
	sched_reset_start(c, &l);
	ok(c->state == CARD_RESETTING && c->dirty, "a reset's start makes the card resetting, durably");
	ok(!l.was_dead && l.step == RESET_STEP_RESET && l.attempt == 1,
	   "the ladder begins at the reset command; the card was not dead");
	ok(c->reset_pending, "the reset stays pending while it runs, so a request joins it");
	is_int(sched_reset_request(c, -1, true), RESET_JOINED, "a request during the reset joins it");
	c->dirty = false;
	sched_reset_end(c, &l, RESET_NEXT_HEALTHY, NULL, 500.0);
	ok(c->state == CARD_HEALTHY && !c->reset_pending && c->dirty, "healthy: serving, no reset pending");
	is_int(c->reset_epoch, 5, "a successful reset moves the epoch on");
	ok(c->last_reset_at == 500.0, "last_reset_at is the end time given");
	ok(sched_fail_next(&s, c) == NULL && c->queued == 2, "a healthy card's queue is left to run");
	is_int(sched_reset_request(c, 4, false), RESET_ALREADY_RESET,
	       "a job from before the reset is then already reset");
	sched_free(&s);

	c = card_with_queue(&s, CARD_HEALTHY, 3);
	sched_reset_start(c, &l);
	c->control_error = sdup("old configuration error");
	sched_reset_end(c, &l, RESET_NEXT_DEAD, sdup("health check failed"), 600.0);
	ok(c->state == CARD_DEAD && !c->reset_pending, "every attempt failed: the card is dead");
	ok(c->dead_since == 600.0, "dead since the end time given");
	is_str(c->dead_reason, "health check failed", "the reason given is the card's dead reason");
	is_int(c->reset_epoch, 4, "a failed reset does not move the epoch");
	is_str(c->control_error, "old configuration error", "a failed reset keeps the control error");
	ok(sched_fail_next(&s, c) == &jobs[0] && sched_fail_next(&s, c) == &jobs[1] &&
	   sched_fail_next(&s, c) == &jobs[2], "a dead card gives up its queue, oldest first");
	ok(sched_fail_next(&s, c) == NULL && c->queued == 0 && s.queued_total == 0 && !c->head,
	   "then nothing is queued");

	/* the recovery of the dead card, asked for again, ends healthy */
	sched_reset_start(c, &l);
	ok(l.was_dead && c->state == CARD_RESETTING, "a dead card's recovery is remembered as such");
	sched_reset_end(c, &l, RESET_NEXT_HEALTHY, NULL, 700.0);
	ok(c->state == CARD_HEALTHY && isnan(c->dead_since) && !c->dead_reason && !c->control_error,
	   "a recovered card loses its dead reason and its control error");
	sched_free(&s);
}

/*
 * The health check after a job's bad end: it goes after a pending reset and before the next
 * job; passing leaves the card healthy with its epoch; failing turns into the reset ladder. A
 * process outside the queue keeps a card from starting anything but a forced reset.
 */
static void
test_check_and_foreign(void)
{
	struct sched s;
	struct reset_ladder l;
	struct card *c;
	struct job *j;
	char seq[8];
	int k = 0;

	c = card_with_queue(&s, CARD_HEALTHY, 1);
	c->check_pending = true;
	c->reset_pending = true;
	is_int(sched_next(&s, c, true, &j), SCHED_START_RESET, "a pending reset goes before a check");
	c->reset_pending = false;
	is_int(sched_next(&s, c, true, &j), SCHED_START_CHECK, "then the check, before the next job");
	sched_check_start(c, &l);
	ok(c->state == CARD_HEALTHY && l.check && l.step == RESET_STEP_HEALTH,
	   "a check keeps the card healthy and begins at the health check");
	is_int(sched_reset_next(&l, 0, 1, false, false), RESET_NEXT_HEALTHY, "a passing check: healthy");
	sched_reset_end(c, &l, RESET_NEXT_HEALTHY, NULL, 800.0);
	ok(c->state == CARD_HEALTHY && !c->check_pending && c->reset_epoch == 4 &&
	       isnan(c->last_reset_at), "the card was not reset: its epoch stays, no check pending");
	is_int(sched_next(&s, c, true, &j), SCHED_START_JOB, "the next job starts");
	sched_free(&s);

	sched_check_start(&(struct card){.state = CARD_HEALTHY}, &l);
	seq[k++] = "rhd"[l.step];
	is_int(sched_reset_next(&l, 1, 0, false, false), RESET_NEXT_RUN, "a failing check goes on");
	ok(!l.check && l.step == RESET_STEP_RESET && l.attempt == 1,
	   "as a reset procedure from its first step (the check is no attempt)");
	seq[k++] = "rhd"[l.step];
	is_int(sched_reset_next(&l, 0, 0, false, false), RESET_NEXT_RUN, "the reset passes");
	seq[k++] = "rhd"[l.step];
	is_int(sched_reset_next(&l, 1, 0, false, false), RESET_NEXT_DEAD,
	       "its health check fails: dead (retries 0)");
	seq[k] = '\0';
	is_str(seq, "hrh", "check, reset, health check");
	sched_check_start(&(struct card){.state = CARD_HEALTHY}, &l);
	is_int(sched_reset_next(&l, 127, 0, false, false), RESET_NEXT_UNRUNNABLE,
	       "a check that cannot run is a configuration error");

	c = card_with_queue(&s, CARD_HEALTHY, 1);
	c->foreign = true;
	is_int(sched_next(&s, c, true, &j), SCHED_IDLE, "a card held outside the queue starts no job");
	c->check_pending = true;
	is_int(sched_next(&s, c, true, &j), SCHED_IDLE, "nor its check");
	c->reset_pending = true;
	is_int(sched_next(&s, c, true, &j), SCHED_IDLE, "nor a reset");
	c->reset_forced = true;
	is_int(sched_next(&s, c, true, &j), SCHED_START_RESET, "but a forced reset");
	sched_reset_start(c, &l);
	sched_reset_end(c, &l, RESET_NEXT_HEALTHY, NULL, 900.0);
	ok(!c->reset_forced && !c->check_pending && !c->reset_pending,
	   "a reset's end clears the force and the check it covered");
	sched_free(&s);
}

static void
test_reset_unrunnable(void)
{
	struct sched s;
	struct reset_ladder l;
	struct card *c;

	c = card_with_queue(&s, CARD_HEALTHY, 1);
	c->reset_pending = true;
	sched_reset_start(c, &l);
	sched_reset_end(c, &l, RESET_NEXT_UNRUNNABLE, sdup("no such command"), 100.0);
	ok(c->state == CARD_HEALTHY && !c->reset_pending,
	   "a command that cannot run leaves a serving card in service");
	is_str(c->control_error, "no such command", "and records the control error");
	ok(isnan(c->dead_since) && !c->dead_reason && c->reset_epoch == 4 && isnan(c->last_reset_at),
	   "it was not reset: no epoch, no reset time, not dead");
	ok(sched_fail_next(&s, c) == NULL && c->queued == 1, "its queue is kept");
	sched_reset_start(c, &l);
	sched_reset_end(c, &l, RESET_NEXT_UNRUNNABLE, sdup("still missing"), 101.0);
	is_str(c->control_error, "still missing", "a second one replaces the control error");
	sched_free(&s);

	c = card_with_queue(&s, CARD_DEAD, 2);
	c->dead_reason = sdup("failed before");
	c->dead_since = 50.0;
	sched_reset_request(c, -1, true);
	sched_reset_start(c, &l);
	sched_reset_end(c, &l, RESET_NEXT_UNRUNNABLE, sdup("no such command"), 100.0);
	ok(c->state == CARD_DEAD && !c->reset_pending,
	   "a dead card whose recovery could not run stays dead");
	ok(c->dead_since == 50.0 && c->dead_reason && strcmp(c->dead_reason, "failed before") == 0,
	   "with the dead reason it had");
	ok(sched_fail_next(&s, c) == &jobs[0], "and what was queued meanwhile fails");
	sched_free(&s);

	c = card_with_queue(&s, CARD_HEALTHY, 0);
	sched_reset_start(c, &l);
	c->dirty = false;
	sched_reset_end(c, &l, RESET_NEXT_RUN, sdup("unused"), 100.0);
	ok(c->state == CARD_RESETTING && !c->dirty, "RESET_NEXT_RUN is no end: nothing changes");
	sched_free(&s);
}

static void
test_preempts(void)
{
	struct sched s;
	struct card *c;
	struct job *out;

	c = card_with_queue(&s, CARD_HEALTHY, 1);
	ok(sched_reset_preempts(c, RESET_SCHEDULED, true, NULL) == NULL, "an idle card: nothing to stop");
	sched_next(&s, c, true, &out);
	c->current = out;
	out->status = JOB_RUNNING;
	ok(sched_reset_preempts(c, RESET_SCHEDULED, true, NULL) == &jobs[0],
	   "a card request stops the running job");
	ok(sched_reset_preempts(c, RESET_JOINED, true, NULL) == &jobs[0], "so does one that joined");
	ok(sched_reset_preempts(c, RESET_SCHEDULED, false, NULL) == NULL,
	   "not when resets do not preempt");
	ok(sched_reset_preempts(c, RESET_ALREADY_RESET, true, NULL) == NULL &&
	   sched_reset_preempts(c, RESET_DEAD, true, NULL) == NULL, "nor when no reset follows");
	ok(sched_reset_preempts(c, RESET_SCHEDULED, true, jobs[0].id) == &jobs[0],
	   "a job-based request stops the job it named");
	ok(sched_reset_preempts(c, RESET_SCHEDULED, true, jobs[1].id) == NULL,
	   "but not another job running since");
	c->held = true;
	ok(sched_reset_preempts(c, RESET_SCHEDULED, true, NULL) == NULL,
	   "a held card's running job is let finish");
	c->held = false;
	jobs[0].mode = JOB_MODE_RESET;
	ok(sched_reset_preempts(c, RESET_JOINED, true, NULL) == NULL, "a running reset is never stopped");
	sched_free(&s);
}

static void
test_hold_swap(void)
{
	struct sched s;
	struct card *c;
	struct card_hold h = {true, sdup("alice"), sdup("firmware"), 42.0};
	char *by = h.by;

	c = card_with_queue(&s, CARD_HEALTHY, 0);
	sched_hold_swap(c, &h);
	ok(c->held && c->held_by == by && c->held_at == 42.0 && c->dirty, "the card takes the hold");
	is_str(c->hold_reason, "firmware", "with its reason");
	ok(!h.held && !h.by && !h.reason && isnan(h.at), "and gives back its former (no) hold");
	sched_hold_swap(c, &h);
	ok(!c->held && !c->held_by && !c->hold_reason && isnan(c->held_at),
	   "a second swap puts the card back as it was");
	ok(h.held && h.by == by, "and hands the hold back to its owner");
	free(h.by);
	free(h.reason);
	sched_free(&s);
}

static void
test_restore(void)
{
	struct sched s;
	struct card *c;

	ok(sched_same_boot("b1", "b1") && !sched_same_boot("b0", "b1") && !sched_same_boot(NULL, "b1"),
	   "a row is of this boot only when its boot id is this one");
	ok(sched_same_boot("b0", NULL) && sched_same_boot(NULL, NULL),
	   "an unreadable boot id counts as the same boot");
	ok(sched_stays_dead(CARD_DEAD, true) && !sched_stays_dead(CARD_DEAD, false) &&
	   !sched_stays_dead(CARD_RESETTING, true), "only a card dead in this boot stays dead");

	c = card_with_queue(&s, CARD_DEAD, 0);
	c->dead_reason = sdup("dead");
	c->dead_since = 10.0;
	c->reset_pending = true;
	c->held = true;
	ok(!sched_card_restore(c, true), "same boot: nothing revived");
	ok(c->state == CARD_DEAD && c->dead_since == 10.0 && c->dead_reason && c->reset_epoch == 4 &&
	   c->reset_pending, "same boot: the card stays dead with its reason and its pending reset");
	c->dirty = false;
	ok(sched_card_restore(c, false), "a new boot revives a dead card");
	ok(c->state == CARD_HEALTHY && !c->reset_pending && c->dirty, "healthy, no reset pending");
	is_int(c->reset_epoch, 5, "the reboot moves the epoch on");
	ok(!c->dead_reason && isnan(c->dead_since), "no dead reason is left");
	ok(c->held, "a hold outlives the reboot");
	sched_free(&s);

	c = card_with_queue(&s, CARD_RESETTING, 0);
	c->dead_reason = sdup("a dead card's recovery was cut short");
	ok(!sched_card_restore(c, true) && c->state == CARD_RESETTING && c->reset_pending,
	   "a reset cut short by a stop is pending again");
	ok(!c->dead_reason, "a card that is not dead keeps no dead reason");
	sched_free(&s);

	c = card_with_queue(&s, CARD_RESETTING, 0);
	c->dead_reason = sdup("health check failed");
	c->dead_since = 10.0;
	ok(!sched_card_restore(c, true) && c->state == CARD_DEAD && c->reset_pending &&
	   c->dead_reason && c->dead_since == 10.0,
	   "a dead card's recovery cut short: dead again, its recovery pending, its reason kept");
	{
		struct reset_ladder l;

		sched_reset_start(c, &l);
		sched_reset_end(c, &l, RESET_NEXT_UNRUNNABLE, sdup("reset command not found"), 20.0);
		ok(c->state == CARD_DEAD, "and a rerun whose command cannot run leaves it dead");
	}
	sched_free(&s);

	c = card_with_queue(&s, CARD_HEALTHY, 0);
	c->reset_pending = true;
	ok(!sched_card_restore(c, false) && c->state == CARD_HEALTHY && c->reset_pending &&
	   c->reset_epoch == 4, "a healthy card keeps its pending reset and epoch across a reboot");
	sched_free(&s);
}

static void
test_recover_job(void)
{
	struct sched s;
	struct card *c;
	int ids[] = {0, 1}, d;

	c = card_with_queue(&s, CARD_HEALTHY, 0);
	sched_job_load(&jobs[0], JOB_QUEUED);
	sched_job_load(&jobs[1], JOB_RUNNING);
	is_int(sched_recover_job(&s, &jobs[0], &d), RECOVER_QUEUE, "queued on a serving card: queued again");
	is_int(sched_recover_job(&s, &jobs[1], &d), RECOVER_INTERRUPTED,
	       "found running: interrupted, never run twice");
	c->state = CARD_RESETTING;
	is_int(sched_recover_job(&s, &jobs[0], &d), RECOVER_QUEUE, "queued on a resetting card: waits for it");
	c->state = CARD_DEAD;
	is_int(sched_recover_job(&s, &jobs[0], &d), RECOVER_DEAD_CARD, "queued on a dead card: fails");
	is_int(sched_recover_job(&s, &jobs[1], &d), RECOVER_INTERRUPTED,
	       "running on a card now dead: interrupted");
	jobs[0].device = jobs[1].device = 3;
	is_int(sched_recover_job(&s, &jobs[0], &d), RECOVER_CARD_GONE, "a card not configured: fails");
	is_int(sched_recover_job(&s, &jobs[1], &d), RECOVER_CARD_GONE, "running or not");
	is_int(d, 3, "naming the card");
	sched_free(&s);

	mkjobs();
	sched_init(&s, ids, 2);
	sched_job_set_cards(&jobs[0], (int[]){0, 1}, 2);
	sched_job_set_cards(&jobs[1], (int[]){0, 2}, 2);
	is_int(sched_recover_job(&s, &jobs[0], &d), RECOVER_QUEUE, "a multi-card job on serving cards");
	is_int(sched_recover_job(&s, &jobs[1], &d), RECOVER_CARD_GONE,
	       "one of its cards not configured: fails");
	is_int(d, 2, "naming that card");
	s.cards[1].state = CARD_DEAD;
	is_int(sched_recover_job(&s, &jobs[0], &d), RECOVER_DEAD_CARD, "one of its cards dead: fails");
	is_int(d, 1, "naming the dead card");
	jobs[0].status = JOB_RUNNING;
	is_int(sched_recover_job(&s, &jobs[0], &d), RECOVER_INTERRUPTED, "found running: interrupted");
	sched_job_clear(&jobs[0]);
	sched_job_clear(&jobs[1]);
	sched_free(&s);

	jobs[2].started_at = 100.0;
	ok(sched_interrupted_at(&jobs[2], 130.0, 200.0) == 130.0,
	   "an interrupted job ended at its output's last write");
	ok(sched_interrupted_at(&jobs[2], NAN, 200.0) == 100.0, "without one, at its start");
	ok(sched_interrupted_at(&jobs[2], 90.0, 200.0) == 100.0, "never before its start");
	ok(sched_interrupted_at(&jobs[2], 300.0, 200.0) == 200.0, "never after now");
	jobs[2].started_at = NAN;
	ok(sched_interrupted_at(&jobs[2], 130.0, 200.0) == 200.0, "a job that never started: now");
}

/* Whether moving a job of mode `mode` from phase `from` to `to` kills the process by SIGABRT. */
static bool
transition_aborts(int mode, int from, int to)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		struct job j;

		sched_job_init(&j);
		j.mode = mode;
		j.phase = from;
		if (!freopen("/dev/null", "w", stderr))
			_exit(3);
		sched_job_transition(&j, to);
		_exit(0);
	}
	return pid > 0 && waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

/* Whether a reset started on a card in state `state` kills the process by SIGABRT. */
static bool
reset_start_aborts(int state)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		struct sched s;
		struct reset_ladder l;
		struct card *c = card_with_queue(&s, CARD_HEALTHY, 0);

		c->state = state;
		if (!freopen("/dev/null", "w", stderr))
			_exit(3);
		sched_reset_start(c, &l);
		_exit(0);
	}
	return pid > 0 && waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

/* A card's state changes only by its table: a reset starts on any card, nothing else is off it. */
static void
test_card_states(void)
{
	struct sched s;
	struct reset_ladder l;
	struct card *c;

	ok(!reset_start_aborts(CARD_HEALTHY) && !reset_start_aborts(CARD_DEAD) &&
	   !reset_start_aborts(CARD_RESETTING), "a reset starts on a healthy, dead or resetting card");
	ok(reset_start_aborts(7) && reset_start_aborts(-1), "a card in no known state aborts");
	ok(sched_job_id_valid("0123456789abcdef0123456789abcdef", 32) &&
	   !sched_job_id_valid("0123456789ABCDEF0123456789abcdef", 32) &&
	   !sched_job_id_valid("0123456789abcdef0123456789abcde", 31) &&
	   !sched_job_id_valid("../3456789abcdef0123456789abcdef", 32),
	   "a job id is 32 lowercase hex digits, nothing else");
	c = card_with_queue(&s, CARD_HEALTHY, 0);
	ok(!sched_card_restore(c, false) && c->state == CARD_HEALTHY,
	   "a healthy card stays healthy at a restart");
	sched_reset_start(c, &l);
	sched_reset_end(c, &l, RESET_NEXT_DEAD, sdup("gone"), 10.0);
	ok(c->state == CARD_DEAD && sched_card_restore(c, false) && c->state == CARD_HEALTHY,
	   "dead, then healthy after a new boot");
	sched_free(&s);
}

static void
test_phases(void)
{
	/* The table as the daemon uses it: what may follow what, per mode (run, reset, lease). */
	static const char *const legal[3][JOB_PHASE_N] = {
		{"starting done forgotten", "running queued", "stopping done", "stopping done",
		 "forgotten", ""},
		{"starting done", "running forgotten", "stopping done", "stopping done", "forgotten",
		 ""},
		{"starting done forgotten", "running queued", "stopping done", "stopping done",
		 "forgotten", ""},
	};
	static const int status[JOB_PHASE_N] = {JOB_QUEUED, JOB_RUNNING, JOB_RUNNING, JOB_RUNNING,
						JOB_DONE, -1};
	int mode, from, to, wrong = 0;
	struct job j;
	int pipefd[2];
	char msg[256] = "";
	ssize_t got;
	pid_t pid;

	is_str(sched_phase_name(JOB_PHASE_N), "unknown", "a phase out of range has no name");
	for (mode = JOB_MODE_RUN; mode <= JOB_MODE_LEASE; mode++)
		for (from = 0; from < JOB_PHASE_N; from++)
			for (to = 0; to < JOB_PHASE_N; to++) {
				char word[32];
				bool allowed;

				snprintf(word, sizeof(word), " %s ", sched_phase_name(to));
				snprintf(msg, sizeof(msg), " %s ", legal[mode][from]);
				allowed = strstr(msg, word) != NULL;
				if (allowed) {
					sched_job_init(&j);
					j.mode = mode;
					j.phase = from;
					j.status = 99;
					sched_job_transition(&j, to);
					ok(j.phase == to && j.status == (status[to] < 0 ? 99 : status[to]),
					   "%s job: %s -> %s is accepted and sets its status",
					   sched_mode_name(mode), sched_phase_name(from), sched_phase_name(to));
				} else if (!transition_aborts(mode, from, to)) {
					printf("# %s job: %s -> %s did not abort\n", sched_mode_name(mode),
					       sched_phase_name(from), sched_phase_name(to));
					wrong++;
				}
			}
	is_int(wrong, 0, "every other change of phase aborts (SIGABRT), for every mode");
	ok(transition_aborts(JOB_MODE_RUN, JOB_PHASE_N, JOB_PHASE_QUEUED) &&
	   transition_aborts(JOB_MODE_RUN, JOB_PHASE_QUEUED, JOB_PHASE_N) &&
	   transition_aborts(JOB_MODE_LEASE + 1, JOB_PHASE_QUEUED, JOB_PHASE_STARTING),
	   "a phase or mode out of range aborts");

	/* The message names the job and both phases. */
	if (pipe(pipefd) < 0 || (pid = fork()) < 0) {
		perror("pipe or fork");
		exit(1);
	}
	if (pid == 0) {
		dup2(pipefd[1], 2);
		sched_job_init(&j);
		snprintf(j.id, sizeof(j.id), "%032d", 7);
		sched_job_transition(&j, JOB_PHASE_STARTING);
		sched_job_transition(&j, JOB_PHASE_RUNNING);
		sched_job_transition(&j, JOB_PHASE_QUEUED);
		_exit(0);
	}
	close(pipefd[1]);
	got = read(pipefd[0], msg, sizeof(msg) - 1);
	msg[got > 0 ? got : 0] = '\0';
	close(pipefd[0]);
	waitpid(pid, NULL, 0);
	is_str(msg, "tt-device-queue: job 00000000000000000000000000000007 (run) cannot go from "
		    "phase running to queued\n", "an illegal change says which job and which phases");

	sched_job_init(&j);
	ok(j.phase == JOB_PHASE_QUEUED && j.status == JOB_QUEUED, "a fresh job is queued");
	sched_job_load(&j, JOB_RUNNING);
	ok(j.phase == JOB_PHASE_RUNNING && j.status == JOB_RUNNING, "a job loaded running is running");
	sched_job_load(&j, JOB_DONE);
	ok(j.phase == JOB_PHASE_DONE && j.status == JOB_DONE, "a job loaded done is done");
	sched_job_load(&j, JOB_QUEUED);
	ok(j.phase == JOB_PHASE_QUEUED && j.status == JOB_QUEUED, "a job loaded queued is queued");
}

int
main(void)
{
	test_cards();
	test_fifo();
	test_estimates();
	test_resets();
	test_hold();
	test_multi_cards();
	test_blocker();
	test_multi_epochs();
	test_ladder();
	test_reset_start_end();
	test_check_and_foreign();
	test_reset_unrunnable();
	test_preempts();
	test_hold_swap();
	test_restore();
	test_recover_job();
	test_card_states();
	test_phases();
	test_property();
	return tap_done();
}

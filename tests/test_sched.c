/*
 * Unit tests for sched.c: FIFO queues, positions, estimates, reset-request rules, the reset
 * ladder, what a reset's end, a hold and a restart make of a card and its jobs, and the job
 * phase table.
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
	is_int(sched_submit_position(c0), 0, "idle card: position 0");
	sched_enqueue(&s, c0, &jobs[0]);
	sched_enqueue(&s, c0, &jobs[1]);
	sched_enqueue(&s, c1, &jobs[2]);
	sched_enqueue(&s, c0, &jobs[3]);
	is_int(s.queued_total, 4, "queued_total counts all cards");
	is_int(sched_queued_position(c0, &jobs[3]), 3, "1-based position among the card's queue");
	is_int(sched_submit_position(c0), 3, "three queued ahead of a new job");
	ok(sched_next(&s, c0, false, &out) == SCHED_IDLE && !out, "no dispatch while the store is down");
	ok(sched_next(&s, c0, true, &out) == SCHED_START_JOB && out == &jobs[0], "head runs first");
	sched_set_current(c0, out);
	sched_job_transition(out, JOB_PHASE_STARTING);
	ok(sched_next(&s, c0, true, &out) == SCHED_IDLE, "one job at a time per card");
	ok(sched_next(&s, c1, true, &out) == SCHED_START_JOB && out == &jobs[2],
	   "other card runs independently");
	is_int(sched_submit_position(c0), 3, "running job counts in the submit position");
	sched_unlink(&s, c0, &jobs[1]);
	is_int(sched_queued_position(c0, &jobs[3]), 1, "cancel of a middle job keeps order");
	is_int(s.queued_total, 1, "total after cancel and two starts");
	sched_set_current(c0, NULL);
	ok(sched_next(&s, c0, true, &out) == SCHED_START_JOB && out == &jobs[3], "FIFO after cancel");
	sched_job_transition(out, JOB_PHASE_STARTING);
	ok(c0->head == NULL && c0->tail == NULL && c0->queued == 0, "queue empty");
	ok(c0->queued_estimate == 0, "empty queue has zero estimate");
	sched_requeue_front(&s, c0, &jobs[3]);
	ok(c0->head == &jobs[3] && jobs[3].status == JOB_QUEUED && jobs[3].phase == JOB_PHASE_QUEUED,
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
	sched_enqueue(&s, c, &jobs[0]);
	sched_enqueue(&s, c, &jobs[1]);
	ok(fabs(c->queued_estimate - 30.0) < 1e-9, "estimate sums repeat x 10 s");
	ok(fabs(sched_card_wait(c, 0) - 30.0) < 1e-9, "wait of a new job is the queue's sum");
	sched_next(&s, c, true, &out);
	sched_set_current(c, out);
	sched_job_transition(out, JOB_PHASE_STARTING);
	out->started_at = 1000.0;
	ok(fabs(sched_job_estimate(out, 1005.0) - 15.0) < 1e-9, "running: estimate minus time run");
	ok(sched_job_estimate(out, 2000.0) == 0, "never negative");
	ok(fabs(sched_card_wait(c, 1005.0) - 25.0) < 1e-9, "wait = running remainder + queue");
	jobs[2].repeat = 3;
	sched_enqueue(&s, c, &jobs[2]);
	ok(fabs(sched_queued_wait(c, &jobs[1], 1005.0) - 15.0) < 1e-9,
	   "a queued job waits for the running remainder");
	ok(fabs(sched_queued_wait(c, &jobs[2], 1005.0) - 25.0) < 1e-9,
	   "and for each job ahead of it, not behind it");
	c->reset_pending = true;
	ok(fabs(sched_queued_wait(c, &jobs[1], 1005.0) - 25.0) < 1e-9,
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
	sched_enqueue(&s, c, &jobs[0]);
	ok(sched_reset_request(c, -1, true) == RESET_SCHEDULED && c->reset_pending && c->dirty,
	   "card request schedules and is durable (dirty)");
	ok(sched_reset_request(c, -1, true) == RESET_JOINED, "second request joins");
	c->dirty = false;
	sched_reset_withdraw(c);
	ok(!c->reset_pending && c->dirty, "a request that could not be committed is taken back");
	ok(sched_reset_request(c, -1, true) == RESET_SCHEDULED, "and a new one schedules again");
	is_int(sched_submit_position(c), 2, "a pending reset counts before a new job");
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
	sched_enqueue(&s, c, &jobs[0]);
	sched_enqueue(&s, c, &jobs[1]);
	sched_enqueue(&s, other, &jobs[2]);
	ok(sched_next(&s, c, true, &out) == SCHED_START_JOB && out == &jobs[0], "job 0 starts");
	sched_set_current(c, out);
	c->held = true;
	ok(c->current == &jobs[0], "a hold leaves the running job alone");
	sched_set_current(c, NULL);
	ok(sched_next(&s, c, true, &out) == SCHED_IDLE && !out, "a held card starts no job");
	is_int(c->queued, 1, "its queued job stays queued");
	sched_enqueue(&s, c, &jobs[3]);
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

	sched_reset_begin(&l);
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
		sched_enqueue(s, c, &jobs[i]);
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
	sched_set_current(c, out);
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

	c = card_with_queue(&s, CARD_HEALTHY, 0);
	sched_job_load(&jobs[0], JOB_QUEUED);
	sched_job_load(&jobs[1], JOB_RUNNING);
	is_int(sched_recover_job(c, &jobs[0]), RECOVER_QUEUE, "queued on a serving card: queued again");
	is_int(sched_recover_job(c, &jobs[1]), RECOVER_INTERRUPTED,
	       "found running: interrupted, never run twice");
	c->state = CARD_RESETTING;
	is_int(sched_recover_job(c, &jobs[0]), RECOVER_QUEUE, "queued on a resetting card: waits for it");
	c->state = CARD_DEAD;
	is_int(sched_recover_job(c, &jobs[0]), RECOVER_DEAD_CARD, "queued on a dead card: fails");
	is_int(sched_recover_job(c, &jobs[1]), RECOVER_INTERRUPTED,
	       "running on a card now dead: interrupted");
	is_int(sched_recover_job(NULL, &jobs[0]), RECOVER_CARD_GONE, "a card not configured: fails");
	is_int(sched_recover_job(NULL, &jobs[1]), RECOVER_CARD_GONE, "running or not");
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

static void
test_phases(void)
{
	/* The table as the daemon uses it: what may follow what, per mode (run, reset). */
	static const char *const legal[2][JOB_PHASE_N] = {
		{"starting done forgotten", "running queued", "stopping done", "stopping done",
		 "forgotten", ""},
		{"starting done", "running forgotten", "stopping done", "stopping done", "forgotten",
		 ""},
	};
	static const int status[JOB_PHASE_N] = {JOB_QUEUED, JOB_RUNNING, JOB_RUNNING, JOB_RUNNING,
						JOB_DONE, -1};
	int mode, from, to, wrong = 0;
	struct job j;
	int pipefd[2];
	char msg[256] = "";
	ssize_t got;
	pid_t pid;

	for (to = 0; to < JOB_PHASE_N; to++)
		is_int(sched_phase_status(to), status[to], "phase %s maps to status %s",
		       sched_phase_name(to), status[to] < 0 ? "(kept)" : sched_status_name(status[to]));
	is_str(sched_phase_name(JOB_PHASE_N), "unknown", "a phase out of range has no name");
	for (mode = JOB_MODE_RUN; mode <= JOB_MODE_RESET; mode++)
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
	is_int(wrong, 0, "every other change of phase aborts (SIGABRT), for both modes");
	ok(transition_aborts(JOB_MODE_RUN, JOB_PHASE_N, JOB_PHASE_QUEUED) &&
	   transition_aborts(JOB_MODE_RUN, JOB_PHASE_QUEUED, JOB_PHASE_N) &&
	   transition_aborts(2, JOB_PHASE_QUEUED, JOB_PHASE_STARTING),
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
	test_ladder();
	test_reset_start_end();
	test_reset_unrunnable();
	test_preempts();
	test_hold_swap();
	test_restore();
	test_recover_job();
	test_phases();
	return tap_done();
}

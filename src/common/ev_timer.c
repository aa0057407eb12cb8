/* ev_timer: the timer heap of an ev loop; see ev_timer.h. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "ev_timer.h"
#include "log.h"

struct ev_timer {
	uint64_t id;
	uint64_t deadline;		/* ev_now() ms */
	uint64_t period;		/* 0 = one-shot */
	ev_timer_cb cb;
	void *arg;
	size_t idx;			/* position in the heap */
};

static bool tm_before(const struct ev_timer *a, const struct ev_timer *b)
{
	return a->deadline < b->deadline || (a->deadline == b->deadline && a->id < b->id);
}

static void heap_set(struct ev_timers *tm, size_t i, struct ev_timer *t)
{
	tm->heap[i] = t;
	t->idx = i;
}

static void heap_up(struct ev_timers *tm, size_t i)
{
	struct ev_timer *t = tm->heap[i];

	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (!tm_before(t, tm->heap[parent]))
			break;
		heap_set(tm, i, tm->heap[parent]);
		i = parent;
	}
	heap_set(tm, i, t);
}

static void heap_down(struct ev_timers *tm, size_t i)
{
	struct ev_timer *t = tm->heap[i];

	for (;;) {
		size_t l = 2 * i + 1, m = i;
		const struct ev_timer *best = t;
		if (l < tm->nheap && tm_before(tm->heap[l], best)) {
			m = l;
			best = tm->heap[l];
		}
		if (l + 1 < tm->nheap && tm_before(tm->heap[l + 1], best))
			m = l + 1;
		if (m == i)
			break;
		heap_set(tm, i, tm->heap[m]);
		i = m;
	}
	heap_set(tm, i, t);
}

static int heap_push(struct ev_timers *tm, struct ev_timer *t)
{
	if (tm->nheap == tm->heapcap) {
		size_t cap = tm->heapcap ? tm->heapcap * 2 : 16;
		struct ev_timer **h = realloc(tm->heap, cap * sizeof(*h));
		if (!h)
			return -ENOMEM;
		tm->heap = h;
		tm->heapcap = cap;
	}
	heap_set(tm, tm->nheap++, t);
	heap_up(tm, t->idx);
	return 0;
}

static void heap_remove(struct ev_timers *tm, size_t i)
{
	struct ev_timer *last = tm->heap[--tm->nheap];

	if (i == tm->nheap)
		return;
	heap_set(tm, i, last);
	heap_down(tm, i);
	heap_up(tm, last->idx);
}

uint64_t evt_add(struct ev_timers *tm, uint64_t now, uint64_t ms, bool periodic,
		ev_timer_cb cb, void *arg)
{
	struct ev_timer *t = calloc(1, sizeof(*t));

	if (!t)
		return 0;
	if (periodic && ms == 0)
		ms = 1;		/* a 0 ms period would spin */
	t->id = ++tm->next_id;
	t->deadline = now + ms;
	t->period = periodic ? ms : 0;
	t->cb = cb;
	t->arg = arg;
	if (heap_push(tm, t) < 0) {
		free(t);
		return 0;
	}
	return t->id;
}

void evt_del(struct ev_timers *tm, uint64_t id)
{
	if (id == 0)
		return;
	if (id == tm->firing_id) {
		tm->firing_cancelled = true;
		return;
	}
	/* Linear: loops hold a handful of timers (idle timeouts are one sweep). */
	for (size_t i = 0; i < tm->nheap; i++) {
		struct ev_timer *t = tm->heap[i];
		if (t->id == id) {
			heap_remove(tm, i);
			free(t);
			return;
		}
	}
}

void evt_run(struct ev_timers *tm, struct ev_loop *ev, uint64_t now,
	     atomic_int *stop)
{
	/* Timers added by callbacks in this pass wait for the next one, so a
	 * callback re-adding a 0 ms timer cannot starve the loop. */
	uint64_t first_new = tm->next_id + 1;

	while (tm->nheap && tm->heap[0]->deadline <= now &&
	       tm->heap[0]->id < first_new && !atomic_load(stop)) {
		struct ev_timer *t = tm->heap[0];

		heap_remove(tm, 0);
		tm->firing_id = t->id;
		tm->firing_cancelled = false;
		t->cb(ev, t->arg);
		tm->firing_id = 0;
		if (t->period && !tm->firing_cancelled) {
			t->deadline += t->period;
			if (t->deadline <= now)
				t->deadline = now + t->period;	/* late: no burst */
			if (heap_push(tm, t) == 0)
				continue;
			log_err("ev: cannot re-arm periodic timer: out of memory");
		}
		free(t);
	}
}

int evt_timeout(const struct ev_timers *tm, uint64_t now)
{
	if (!tm->nheap)
		return -1;
	uint64_t d = tm->heap[0]->deadline;
	if (d <= now)
		return 0;
	return d - now > INT_MAX ? INT_MAX : (int)(d - now);
}

void evt_free(struct ev_timers *tm)
{
	for (size_t i = 0; i < tm->nheap; i++)
		free(tm->heap[i]);
	free(tm->heap);
	tm->heap = NULL;
	tm->nheap = tm->heapcap = 0;
}

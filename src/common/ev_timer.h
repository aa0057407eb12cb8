/* ev_timer: the timers of an ev loop (ev.h: ev_timer_add/ev_timer_del), a
 * min-heap on (deadline, id). Internal to ev.c, which owns one per loop and
 * runs it on the loop's thread. */
#ifndef KVP_EV_TIMER_H
#define KVP_EV_TIMER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ev.h"

struct ev_timer;

struct ev_timers {
	struct ev_timer **heap;		/* min-heap on (deadline, id) */
	size_t nheap, heapcap;
	uint64_t next_id;
	uint64_t firing_id;		/* timer whose callback runs now */
	bool firing_cancelled;		/* ... and it deleted itself */
};

/* A timer due at now + ms (every ms when periodic; 0 ms periodic is 1 ms):
 * its id (> 0), 0 out of memory. */
uint64_t evt_add(struct ev_timers *tm, uint64_t now, uint64_t ms, bool periodic,
		 ev_timer_cb cb, void *arg);
/* Removes timer id (0: nothing); a callback may delete its own timer. */
void evt_del(struct ev_timers *tm, uint64_t id);
/* Runs the timers due at now, callbacks called with ev, until *stop; timers
 * added by the callbacks wait for the next call. */
void evt_run(struct ev_timers *tm, struct ev_loop *ev, uint64_t now, atomic_int *stop);
/* ms until the first deadline (0 overdue), -1 without timers. */
int evt_timeout(const struct ev_timers *tm, uint64_t now);
void evt_free(struct ev_timers *tm);

#endif

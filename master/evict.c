/* evict: approximate-LRU eviction of the master's objects, per segment, in
 * bounded steps on the loop thread (master_step), so requests are never
 * stalled behind a large round: a step lasts about 20 us. A round starts
 * when a segment's usage goes above eviction_high_watermark and ends once
 * eviction_ratio of its capacity has been evicted (or nothing evictable is
 * left); a PUT_START that finds no room forces one. Leased, pinned and incomplete objects are
 * skipped. Evicting drops one replica (the FREE goes to the node); an
 * object goes with its last replica.
 */
#include "master_i.h"

#include <time.h>

#include "log.h"

#define EXACT_MAX 256		/* segments with fewer replicas are scanned whole */
#define SAMPLES 32
#define SAMPLE_TRIES 4
#define EVICT_FORCE_US 100	/* synchronous part of a PUT_START's eviction */

bool evict_candidate(const struct master *m, const struct obj *o)
{
	return obj_complete(o) && !obj_leased(m, o) && !obj_pinned(m, o);
}

static int mem_replica(const struct obj *o, uint32_t seg)
{
	for (unsigned k = 0; k < o->nrep; k++)
		if (o->rep[k].seg == seg && o->rep[k].tier == 0)
			return (int)k;
	return -1;
}

static struct obj *better(const struct master *m, struct obj *best, struct obj *o, uint32_t seg)
{
	if (!evict_candidate(m, o) || mem_replica(o, seg) < 0)
		return best;
	return !best || obj_age(m, o) > obj_age(m, best) ? o : best;
}

/* The least recently read evictable object of s: exact on small segments,
 * the oldest of random samples otherwise. */
static struct obj *pick_victim(struct master *m, struct seg *s)
{
	struct obj *best = NULL;

	if (s->nobjs <= EXACT_MAX) {
		for (size_t i = 0; i < s->nobjs; i++)
			best = better(m, best, s->objs[i], s->id);
		return best;
	}
	for (int t = 0; t < SAMPLE_TRIES && !best; t++)
		for (int i = 0; i < SAMPLES; i++)
			best = better(m, best, s->objs[master_rand(m) % s->nobjs], s->id);
	return best;
}

static void round_start(struct master *m, struct seg *s, uint64_t goal)
{
	if (!goal)
		goal = 1;
	if (s->evicting) {
		if (s->evict_goal - s->evict_done < goal)
			s->evict_goal = s->evict_done + goal;
		return;
	}
	s->evicting = true;
	s->evict_goal = goal;
	s->evict_done = 0;
	m->evict_active = true;
	log_info("segment %u: eviction round, %llu of %llu bytes used, goal %llu", s->id,
		 (unsigned long long)s->used, (unsigned long long)s->capacity,
		 (unsigned long long)goal);
}

void evict_check(struct master *m, struct seg *s)
{
	double hw = m->conf.master.eviction_high_watermark;

	if (s->evicting || s->draining || !s->online || hw <= 0)
		return;
	/* Extents evicted but not yet acked are gone already: counting them
	 * would start round after round until the node answers. */
	if ((double)(s->used - s->freeing) > hw * (double)s->capacity)
		round_start(m, s, (uint64_t)(m->conf.master.eviction_ratio * (double)s->capacity));
}

static uint64_t evict_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Evicts from s until its round's goal or the deadline (checked every few
 * evictions); returns how many. */
static unsigned evict_seg(struct master *m, struct seg *s, uint64_t deadline_ns)
{
	unsigned n = 0;

	while (s->evict_done < s->evict_goal &&
	       ((n & 3) || !n || evict_clock_ns() < deadline_ns)) {
		struct obj *o = pick_victim(m, s);
		if (!o) {
			s->evicting = false;	/* everything left is leased, pinned or pending */
			break;
		}
		int ri = mem_replica(o, s->id);
		uint64_t len = rep_len(&o->rep[ri]);
		master_drop_replica(m, o, (unsigned)ri, true);
		s->evict_done += len;
		m->evictions++;
		m->evicted_bytes += len;
		n++;
	}
	if (s->evict_done >= s->evict_goal)
		s->evicting = false;
	return n;
}

bool evict_step(struct master *m, unsigned budget_us)
{
	uint64_t deadline = evict_clock_ns() + budget_us * 1000ull;
	bool active = false;

	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (!s || !s->online || !s->evicting)
			continue;
		evict_seg(m, s, deadline);
		active |= s->evicting;
	}
	return active;
}

bool evict_force(struct master *m, uint64_t need)
{
	bool any = false;

	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (!s || !s->online || s->draining || !s->client || s->capacity < need)
			continue;
		uint64_t goal = (uint64_t)(m->conf.master.eviction_ratio * (double)s->capacity);
		round_start(m, s, goal > need ? goal : need);
		/* One bounded step now: if nothing can be evicted the put fails
		 * at once instead of waiting. */
		if (evict_seg(m, s, evict_clock_ns() + EVICT_FORCE_US * 1000ull))
			any = true;
		m->evict_active |= s->evicting;
	}
	return any;
}

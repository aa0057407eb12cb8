/* evict: eviction and demotion of the master's objects, per segment, in
 * bounded steps on the loop thread (master_step), so requests are never
 * stalled behind a large round: a step lasts about 20 us. A memory round
 * starts when a segment's usage goes above eviction_high_watermark and
 * ends once eviction_ratio of its capacity has been evicted (or nothing
 * evictable is left); a PUT_START that finds no room forces one for what
 * it needs. Victims come from the segment's evictable regions (mchain.h:
 * the tails of chains, never a block something kept extends), the lowest
 * reuse priority first (mpolicy.h; orphans before all), exactly: small
 * regions are scanned whole, large ones keep a victim heap (vheap.h) that
 * reads never touch; the lowest of random samples only where the heap
 * cannot answer (out of memory, or over 64 objects at its top that cannot
 * go). Leased, pinned and incomplete objects are skipped. A cold memory replica is demoted
 * (DEMOTE to the node, which copies it to its spill file) while the
 * node's spill tier has room, else evicted: dropped, the FREE goes to the
 * node, and an object goes with its last replica, its priority kept as a
 * ghost. A disk round does the same to spill (tier 1) replicas when the
 * spill tier passes the watermark. Replicas the node is copying (DEMOTE,
 * PROMOTE) are left alone; promotion itself never evicts (mtier.c).
 */
#include "evict.h"

#include <errno.h>
#include <stdlib.h>

#include "log.h"
#include "master_i.h"
#include "mchain.h"
#include "mlease.h"
#include "mpolicy.h"

#define EXACT_MAX 256		/* regions with fewer replicas are scanned whole */
#define SAMPLES 16		/* replicas looked at together (their misses overlap) */
#define SAMPLE_ROUNDS 2		/* rounds of SAMPLES compared for one victim */
#define SAMPLE_TRIES 8		/* rounds at most while none qualifies */
#define EVICT_FORCE_US 20	/* synchronous part of a PUT_START's eviction */
#define HEAP_REBASE (1ll << 29)	/* accesses: a victim heap's keys start again */
#define HEAP_SKIPS 64		/* objects that cannot go passed over in a heap, at most */

static size_t exact_max = EXACT_MAX;

void evict_test_exact_max(size_t n)
{
	exact_max = n;
}

/* pinned: soft-pinned objects may go too (evict_soft_pinned, when nothing
 * else is left). */
static bool evict_candidate(const struct master *m, const struct obj *o, bool pinned)
{
	return obj_complete(o) && !obj_leased(m, o) && (pinned || !obj_pinned(m, o));
}

/* Index of o's replica on seg in tier (not one being demoted or
 * promoted: the node is copying it), -1 if none. */
static int tier_replica(const struct obj *o, uint32_t seg, unsigned tier)
{
	const struct rep *r = obj_rep(o);

	for (unsigned k = 0; k < o->nrep; k++)
		if (r[k].seg == seg && r[k].tier == tier && !r[k].demoting && !r[k].promoting)
			return (int)k;
	return -1;
}

/* Eviction order: orphans first, then the lowest reuse priority. */
static int64_t victim_score(const struct master *m, const struct obj *o)
{
	if (mchain_orphan(m, o))
		return INT64_MIN;
	return mpol_score(m, o);
}

/* What a round may take: drop_only (no spill room) rules out an object
 * that still has spill replicas extending it. */
struct pick {
	uint32_t seg;
	unsigned tier;
	bool pinned;			/* soft-pinned objects too (evict_soft_pinned) */
	bool drop_only;
	struct obj *best;
	int64_t score;
};

static bool eligible(const struct master *m, const struct pick *p, const struct obj *o)
{
	return evict_candidate(m, o, p->pinned) && tier_replica(o, p->seg, p->tier) >= 0 &&
	       !(p->drop_only && objtab_links(&m->objs, o)->nchild);
}

static void consider(const struct master *m, struct pick *p, struct obj *o)
{
	if (!eligible(m, p, o))
		return;
	int64_t sc = victim_score(m, o);

	if (!p->best || sc < p->score) {
		p->best = o;
		p->score = sc;
	}
}

/* An object's place in a victim heap: its priority on the policy's 64-bit
 * clock of accesses (the order victim_score gives at any time), from the
 * heap's base, in 32 bits (8-byte entries): heap_sync rebuilds before keys
 * could pass INT32_MAX; a key 2^31 accesses old is as low as any. An unfinished
 * put's priority is not final (an upsert's new value takes the old one's
 * at its PUT_END, and holds a version link in its place until then): the
 * lowest key, so that it surfaces, is parked and comes back complete. */
static int32_t heap_key(const struct master *m, const struct vheap *h, const struct obj *o)
{
	if (!obj_complete(o))
		return INT32_MIN;
	int64_t sc = victim_score(m, o);

	if (sc == INT64_MIN)
		return INT32_MIN;
	int64_t k = (int64_t)m->pol.clk + sc - h->base;
	return k <= INT32_MIN ? INT32_MIN + 1 : k > INT32_MAX ? INT32_MAX : (int32_t)k;
}

/* Brings h up to date with the region [lo, hi): rebuilt when it is off,
 * holds more than 1.5 times the region or its base is HEAP_REBASE old;
 * else the marked slots pushed and, every VHEAP_PARK_EVERY picks, the
 * parked entries whose objects may go now. -ENOMEM leaves it off. */
static int heap_sync(const struct master *m, struct seg *s, const struct pick *p,
		     struct vheap *h, size_t lo, size_t hi)
{
	int64_t now = (int64_t)m->pol.clk;

	if (!h->on || h->n + h->nmark + h->npark > (hi - lo) + (hi - lo) / 2 + 64 ||
	    now - h->base > HEAP_REBASE) {
		vheap_clear(h);
		h->base = now;
		for (size_t i = lo; i < hi; i++)
			if (vheap_append(h, heap_key(m, h, s->objs[i]), (uint32_t)i))
				return vheap_clear(h), -ENOMEM;
		vheap_heapify(h);
		h->on = true;
		return 0;
	}
	for (size_t i = 0; i < h->nmark; i++) {
		uint32_t k = h->mark[i];
		if (k >= lo && k < hi && vheap_push(h, heap_key(m, h, s->objs[k]), k))
			return vheap_clear(h), -ENOMEM;
	}
	h->nmark = 0;
	if (++h->picks % VHEAP_PARK_EVERY)
		return 0;
	size_t kept = 0;
	for (size_t i = 0; i < h->npark; i++) {
		uint32_t k = h->park[i].slot;
		if (k < lo || k >= hi)
			continue;
		if (!eligible(m, p, s->objs[k]))
			h->park[kept++] = h->park[i];
		else if (vheap_push(h, heap_key(m, h, s->objs[k]), k))
			return vheap_clear(h), -ENOMEM;
	}
	h->npark = kept;
	return 0;
}

/* The lowest evictable object of a large region, from its victim heap;
 * NULL when the heap cannot say within HEAP_SKIPS objects that cannot go
 * (or without memory): the caller samples then. */
static struct obj *pick_heap(struct master *m, struct seg *s, struct pick *p, size_t lo, size_t hi)
{
	struct vheap *h = &s->vh[p->tier];

	if (heap_sync(m, s, p, h, lo, hi))
		return NULL;
	for (unsigned skips = 0; h->n && skips < HEAP_SKIPS;) {
		struct vheap_ent t = h->v[0];
		if (t.slot < lo || t.slot >= hi) {
			vheap_pop(h);	/* the slot left the region */
			continue;
		}
		struct obj *o = s->objs[t.slot];
		int32_t k = heap_key(m, h, o);
		if (k > t.key) {	/* read since, or another object there */
			vheap_raise_top(h, k);
			continue;
		}
		if (eligible(m, p, o))
			return o;	/* its entry stays: the slot changes as it goes */
		vheap_pop(h);
		if (vheap_park(h, (struct vheap_ent){ .key = k, .slot = t.slot })) {
			vheap_clear(h);
			return NULL;
		}
		skips++;
	}
	return NULL;
}

static struct obj *pick_among(struct master *m, struct seg *s, struct pick *p)
{
	size_t lo, hi;

	seg_rgn_range(s, p->tier ? SEG_RGN_DISK : SEG_RGN_MEM, &lo, &hi);
	size_t n = hi - lo;
	p->best = NULL;
	if (n <= exact_max) {
		for (size_t i = lo; i < hi; i++)
			consider(m, p, s->objs[i]);
		return p->best;
	}
	if ((p->best = pick_heap(m, s, p, lo, hi)))
		return p->best;
	/* A sample is three cache misses (its slot in s->objs, the object, its
	 * replicas on the next line): issued for all samples at once, they
	 * overlap; one after another they cost 1.5-2.5 us a victim. */
	for (int t = 0; t < SAMPLE_TRIES && (t < SAMPLE_ROUNDS || !p->best); t++) {
		struct obj **slot[SAMPLES], *o[SAMPLES];

		for (int i = 0; i < SAMPLES; i++) {
			slot[i] = &s->objs[lo + master_rand(m) % n];
			__builtin_prefetch(slot[i]);
		}
		for (int i = 0; i < SAMPLES; i++) {
			o[i] = *slot[i];
			__builtin_prefetch(o[i]);
			/* the replicas sit past the key: on the next line
			 * for short keys (obj_rep would wait for the key's
			 * length, a miss of its own) */
			__builtin_prefetch((const char *)o[i] + 64);
		}
		for (int i = 0; i < SAMPLES; i++)
			consider(m, p, o[i]);
	}
	return p->best;
}

/* The object to evict from s's tier: the lowest priority among the
 * evictable ones; a soft-pinned one only when none other is found and
 * evict_soft_pinned. */
static struct obj *pick_victim(struct master *m, struct seg *s, unsigned tier, bool drop_only)
{
	struct pick p = { .seg = s->id, .tier = tier, .drop_only = drop_only };
	struct obj *best = pick_among(m, s, &p);

	if (!best && m->conf.master.evict_soft_pinned) {
		p.pinned = true;
		best = pick_among(m, s, &p);
	}
	return best;
}

void evict_drop(struct master *m, struct obj *o, unsigned ri)
{
	uint64_t len = rep_len(&obj_rep(o)[ri]);

	if (o->nrep == 1) {
		if (mchain_orphan(m, o))
			m->orphans_evicted++;
		mpol_forget(m, o);
	}
	mobj_drop_replica(m, o, ri, true);
	m->evictions++;
	m->evicted_bytes += len;
}

static bool demote_ok(const struct seg *s, uint64_t len)
{
	return s->client && s->spill_capacity && !s->draining &&
	       seg_spill_used(s) + len <= s->spill_capacity;
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

	if (!s->online || hw <= 0)
		return;
	/* Extents evicted or being demoted but not yet acked are gone already:
	 * counting them would start round after round until the node answers.
	 * Holds (mhold.h) are not objects: evicting for them would drop
	 * values to make room that comes back at the node's HEARTBEAT. */
	if (!s->evicting && !s->draining &&
	    (double)(s->used - s->freeing - s->demoting - s->hold.bytes) >
	    hw * (double)s->capacity)
		round_start(m, s, (uint64_t)(m->conf.master.eviction_ratio * (double)s->capacity));
	if (!s->evicting_disk && s->spill_capacity &&
	    (double)seg_spill_used(s) > hw * (double)s->spill_capacity) {
		s->evicting_disk = true;
		s->disk_goal = (uint64_t)(m->conf.master.eviction_ratio * (double)s->spill_capacity);
		if (!s->disk_goal)
			s->disk_goal = 1;
		s->disk_done = 0;
		m->evict_active = true;
		log_info("segment %u: spill eviction round, %llu of %llu bytes used", s->id,
			 (unsigned long long)seg_spill_used(s),
			 (unsigned long long)s->spill_capacity);
	}
}

static uint64_t evict_clock_ns(void)
{
	return master_clock_ns(CLOCK_MONOTONIC);
}

/* True while a round has work and time is left (at least one object). */
static bool more(uint64_t done, uint64_t goal, unsigned n, uint64_t deadline_ns)
{
	return done < goal && (!n || evict_clock_ns() < deadline_ns);
}

/* Memory round on s until its goal or the deadline; returns how many
 * replicas were demoted or evicted. */
static unsigned evict_seg(struct master *m, struct seg *s, uint64_t deadline_ns)
{
	unsigned n = 0;

	while (more(s->evict_done, s->evict_goal, n, deadline_ns)) {
		bool spill = demote_ok(s, s->align);
		struct obj *o = pick_victim(m, s, 0, !spill);
		if (!o) {
			s->evicting = false;	/* everything left is leased, pinned or pending */
			break;
		}
		int ri = tier_replica(o, s->id, 0);
		uint64_t len = rep_len(&obj_rep(o)[ri]);
		if (demote_ok(s, len) && seg_queue_demote(s, obj_key(o), o->key_len,
							  rep_off(&obj_rep(o)[ri]), o->generation,
							  len) == 0) {
			obj_rep(o)[ri].demoting = 1;	/* answered in mtier_demoted() */
			mchain_changed(m, o);	/* what it extends may follow now */
		} else {
			if (objtab_links(&m->objs, o)->nchild) {
				/* Spill replicas extend it and it cannot follow them
				 * there: drop one that nothing extends instead. */
				o = pick_victim(m, s, 0, true);
				if (!o) {
					s->evicting = false;
					break;
				}
				ri = tier_replica(o, s->id, 0);
				len = rep_len(&obj_rep(o)[ri]);
			}
			evict_drop(m, o, (unsigned)ri);
		}
		s->evict_done += len;
		n++;
	}
	if (s->evict_done >= s->evict_goal)
		s->evicting = false;
	return n;
}

/* Disk round: drops the spill replicas of s least worth keeping. */
static void evict_disk(struct master *m, struct seg *s, uint64_t deadline_ns)
{
	unsigned n = 0;

	while (more(s->disk_done, s->disk_goal, n, deadline_ns)) {
		struct obj *o = pick_victim(m, s, 1, true);
		if (!o)
			break;
		int ri = tier_replica(o, s->id, 1);
		uint64_t len = rep_len(&obj_rep(o)[ri]);
		evict_drop(m, o, (unsigned)ri);		/* counts spill_dropped */
		s->disk_done += len;
		n++;
	}
	if (s->disk_done >= s->disk_goal || n == 0)
		s->evicting_disk = false;
}

bool evict_step(struct master *m, unsigned budget_us)
{
	uint64_t start = evict_clock_ns(), deadline = start + budget_us * 1000ull;
	bool active = false;

	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (!s || !s->online)
			continue;
		if (s->evicting)
			evict_seg(m, s, deadline);
		if (s->evicting_disk)
			evict_disk(m, s, deadline);
		active |= s->evicting || s->evicting_disk;
	}
	m->evict_ns += evict_clock_ns() - start;
	return active;
}

bool evict_force(struct master *m, uint64_t need, uint64_t total)
{
	uint64_t start = evict_clock_ns();
	size_t nseg = 0;
	bool any = false;

	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		nseg += s && s->online && !s->draining && s->client && s->capacity >= need;
	}
	for (size_t i = 1; i < m->segs.n && nseg; i++) {
		struct seg *s = m->segs.v[i];
		if (!s || !s->online || s->draining || !s->client || s->capacity < need)
			continue;
		/* the rest of the batch spread over the segments, at least one
		 * item, at least a normal round */
		uint64_t share = total / nseg + (total % nseg != 0);
		uint64_t goal = (uint64_t)(m->conf.master.eviction_ratio * (double)s->capacity);
		if (share < need)
			share = need;
		round_start(m, s, goal > share ? goal : share);
		/* One bounded step now: if nothing can be evicted the put fails
		 * at once instead of waiting. */
		if (evict_seg(m, s, evict_clock_ns() + EVICT_FORCE_US * 1000ull))
			any = true;
		m->evict_active |= s->evicting;
	}
	m->evict_ns += evict_clock_ns() - start;
	return any;
}

void evict_reorder(struct master *m)
{
	for (size_t i = 1; i < m->segs.n; i++)
		if (m->segs.v[i]) {
			vheap_clear(&m->segs.v[i]->vh[0]);
			vheap_clear(&m->segs.v[i]->vh[1]);
		}
}

static void lowest(int32_t *best, size_t lo, size_t hi, uint32_t slot, int32_t key)
{
	if (slot >= lo && slot < hi && key < best[slot - lo])
		best[slot - lo] = key;
}

/* One region's heap: ordered, and each slot with an entry (in the heap,
 * parked or marked) at or below its object's priority. */
static bool heap_ok(const struct master *m, const struct seg *s, unsigned tier)
{
	const struct vheap *h = &s->vh[tier];
	size_t lo, hi;

	if (!h->on)
		return true;
	for (size_t i = 1; i < h->n; i++)
		if (h->v[(i - 1) / 2].key > h->v[i].key)
			return false;
	seg_rgn_range(s, tier ? SEG_RGN_DISK : SEG_RGN_MEM, &lo, &hi);
	int32_t *best = malloc((hi - lo + 1) * sizeof(*best));
	bool ok = true;

	if (!best)
		return true;	/* cannot tell */
	for (size_t i = lo; i < hi; i++)
		best[i - lo] = INT32_MAX;
	for (size_t i = 0; i < h->n; i++)
		lowest(best, lo, hi, h->v[i].slot, h->v[i].key);
	for (size_t i = 0; i < h->npark; i++)
		lowest(best, lo, hi, h->park[i].slot, h->park[i].key);
	for (size_t i = 0; i < h->nmark; i++)
		lowest(best, lo, hi, h->mark[i], INT32_MIN);
	for (size_t i = lo; i < hi && ok; i++) {
		const struct obj *o = s->objs[i];
		/* an orphan's priority fell without a mark: found when its
		 * entry surfaces (or by a sample) */
		ok = mchain_orphan(m, o) || best[i - lo] <= heap_key(m, h, o);
		if (!ok)
			log_err("victim heap of segment %u tier %u: slot %zu (key %d) not in it",
				s->id, tier, i, heap_key(m, h, o));
	}
	free(best);
	return ok;
}

bool evict_heaps_check(const struct master *m)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (s && s->online && (!heap_ok(m, s, 0) || !heap_ok(m, s, 1)))
			return false;
	}
	return true;
}

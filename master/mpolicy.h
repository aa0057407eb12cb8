/* mpolicy: what eviction keeps — the reuse priority (pkey) of every
 * object, the half-life it decays with, and the ghosts of evicted keys.
 * A priority is a decayed count of the object's accesses in the log
 * domain (LRFU): pkey = H log2(sum over accesses of 2^(t_i / H)), so it
 * only changes on an access and two objects compare by it at any time.
 * Its time is the policy's own clock, which counts block accesses (a read
 * the master answers or hears of, a put of a new key), not milliseconds:
 * a priority decays with the traffic that could have displaced the block,
 * whatever its pace. H adapts to the reuse intervals the pool sees. A
 * ghost remembers an evicted key's priority, so a block that comes back
 * resumes its count instead of starting over. Stored times are the clock's
 * low 32 bits; mpol_age keeps every one within 2^30 of it. See
 * docs/master.md "Eviction". Loop thread only; no locks.
 */
#ifndef KVP_MPOLICY_H
#define KVP_MPOLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "objtab.h"
#include "rhist.h"

struct master;

#define MPOL_TAB_STEP 64		/* entries of the increment table per unit of d / H */
#define MPOL_TAB_N (16 * MPOL_TAB_STEP)	/* past 16 H apart an access adds < 2^-16 H */
#define MPOL_KEY_AHEAD_MAX (1u << 30)	/* accesses: keys stay far from the 2^32 wrap ... */
#define MPOL_KEY_BEHIND_MAX (1u << 30)	/* ... on both sides (mpol_age) */
#define MPOL_HALF_MAX (1u << 27)	/* accesses: the longest H */
#define MPOL_TMAP_N 1024		/* samples of the clock against the ms clock */

struct mpol_ghosts;

/* When the clock read what: (clk, ms of m_now32) samples, oldest first,
 * thinned by half when full, so they span the master's life at a spacing
 * that doubles with age (stat's and the FUSE view's access times). */
struct mpol_tmap {
	uint32_t clk[MPOL_TMAP_N];
	uint32_t ms[MPOL_TMAP_N];
	uint32_t n;
	uint32_t every_ms;		/* spacing kept: 50 ms, doubled by each thinning */
};

struct mpol {
	bool lru;			/* eviction_policy = lru: the last access alone */
	uint64_t clk;			/* the policy's clock: block accesses (times: its low 32 bits) */
	uint32_t half;			/* H in use, in accesses */
	uint64_t inv;			/* 2^32 TAB_STEP / half: divides by H with a multiply */
	uint32_t nobs;			/* reads seen: the interval of one in 8 is kept */
	uint32_t fixed;			/* eviction_half_life, 0 = adapt */
	struct rhist hist;		/* reuse intervals seen (hits and ghost hits), accesses */
	uint64_t aged_clk;		/* the clock at the last mpol_age */
	size_t age_seg, age_i, age_g;	/* where it goes on (segment, slot; ghost bucket) */
	struct mpol_tmap tmap;
	struct mpol_ghosts *g;
	uint64_t ghost_cap;		/* eviction_ghosts, 0 = twice the objects */
	/* counters (INFO, /metrics) */
	uint64_t ghost_hits, ghost_inserts, first_puts;
};

int mpol_init(struct master *m);
void mpol_destroy(struct master *m);
/* Applies the [master] eviction_* keys of m->conf (start-up and reload). */
void mpol_configure(struct master *m);

/* The priority of a new object whose key hashes to h (an access: the
 * clock ticks): a ghost's, brought up to now, or now's (first sight). */
uint32_t mpol_admit(struct master *m, uint32_t h);
/* mpol_tab[i] = 2^16 log2(1 + 2^(-i / MPOL_TAB_STEP)): what a read at
 * distance d = i H / MPOL_TAB_STEP from a key adds, in units of H / 2^16. */
extern uint32_t mpol_tab[MPOL_TAB_N];
/* A reuse interval of iv ms seen: into the histogram H follows. */
void mpol_observe(struct mpol *p, uint32_t iv);

/* key combined with one read at now: H log2(2^(key/H) + 2^(now/H)), with
 * a multiply and a table look-up (every read does it). */
static inline uint32_t mpol_combine(const struct mpol *p, uint32_t key, uint32_t now)
{
	int32_t d = (int32_t)(key - now);
	uint32_t hi = d >= 0 ? key : now;
	uint64_t ad = d >= 0 ? (uint64_t)d : (uint64_t)(-(int64_t)d);
	uint32_t r = hi;

	if (ad < (uint64_t)p->half * (MPOL_TAB_N / MPOL_TAB_STEP)) {
		uint64_t i = (ad * p->inv) >> 32;	/* < 2^42 before the shift */
		r += (uint32_t)(((uint64_t)p->half * mpol_tab[i < MPOL_TAB_N ? i : MPOL_TAB_N - 1]) >> 16);
	}
	if ((int32_t)(r - now) > (int32_t)MPOL_KEY_AHEAD_MAX)
		r = now + MPOL_KEY_AHEAD_MAX;
	return r;
}

/* o was read: a GET, a TOUCH (a client's optimistic reads), a put that
 * found it there; the clock ticks. An EXISTS is a lookup, not a read: an
 * engine's EXISTS and GET of a hit count once, as the policy's model
 * counts them. The interval since the last access goes to the histogram
 * for one read in 8 (a sample is as good for a percentile, and the read
 * path stays short). */
static inline void mpol_touch(struct mpol *p, struct obj *o)
{
	uint32_t now = (uint32_t)++p->clk;

	if (!(p->nobs++ & 7))
		mpol_observe(p, now - o->atime);
	o->atime = now;
	o->pkey = mpol_combine(p, o->pkey, now);
}
/* o leaves by eviction: remember its priority under its key's hash. */
void mpol_forget(struct master *m, const struct obj *o);
/* How much eviction wants to keep o, relative to now: lower goes first. */
int32_t mpol_score(const struct master *m, const struct obj *o);

/* Entries the ghost table holds (for INFO and memory accounting). */
uint64_t mpol_ghost_slots(const struct master *m);

/* Periodic (master_tick): keeps every priority and access time the master
 * stores — objects' and ghosts' — within MPOL_KEY_BEHIND_MAX behind the
 * clock (2^28 more at most between passes), a slice per call sized by the
 * accesses since the last, so a full pass ends before the clock moves
 * 2^28; and samples the clock for mpol_clk_ms. */
void mpol_age(struct master *m);
/* m_now32's ms at which the policy's clock read clk (an object's atime),
 * interpolated between samples; before the oldest sample: that sample's. */
uint32_t mpol_clk_ms(const struct master *m, uint32_t clk);
/* Tests: sets the clock (the wrap, without 2^31 accesses). */
void mpol_test_set_clock(struct master *m, uint64_t clk);

#endif

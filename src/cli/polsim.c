/* polsim: kvpool's eviction policy over a trace; see polsim.h. The
 * priority is the master's (mpolicy.c): a read count decayed with
 * half-life H, kept in the log domain, so a block's priority is the time at
 * which a block read once would rank with it: a first put ranks at now,
 * each read adds H * log2(1 + 2^(-|p - now| / H)) to the larger of p and
 * now. H is the 90th percentile of the reuse intervals seen (one in 8, in
 * the master's histogram, rhist.h), from the first reads on, or the fixed
 * eviction_half_life.
 */
#include "polsim.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "rhist.h"

#define NIL UINT32_MAX
#define H_MIN 4.0		/* ticks: the first bucket's edge */
#define H_QUANTILE 0.9
#define OBS_EVERY 8		/* one reuse interval in 8 observed */

enum { PS_NEVER, PS_HELD, PS_GHOST };

/* A block that nothing held extends, at priority p (stale once ver moved). */
struct ps_ent {
	double p;
	uint32_t id;
	uint32_t ver;
};

struct ps {
	const struct polsim_conf *c;
	double *prio;			/* held: its priority; ghost: the one it left with */
	uint64_t *at;			/* last access */
	uint32_t *parent;		/* the held block it extends, NIL if none */
	uint32_t *nchild;		/* held blocks extending it */
	uint32_t *ver;
	uint8_t *state;
	struct ps_ent *heap;		/* min-heap of evictable blocks, lazily pruned */
	size_t nheap, capheap;
	uint64_t held, now, nobs;
	struct rhist hist;		/* reuse intervals in ticks */
	double h;
};

static void ps_observe(struct ps *s, uint64_t iv)
{
	if (s->nobs++ % OBS_EVERY == 0 && !s->c->half_life &&
	    rhist_add(&s->hist, iv > UINT32_MAX ? UINT32_MAX : (uint32_t)iv))
		s->h = fmax((double)rhist_quantile(&s->hist, H_QUANTILE), H_MIN);
}

/* p with one more access now. */
static double ps_combine(const struct ps *s, double p)
{
	double now = (double)s->now;

	if (s->c->lru)
		return now;
	return fmax(p, now) + s->h * log2(1.0 + exp2(-fabs(p - now) / s->h));
}

static void ps_push(struct ps *s, uint32_t x)
{
	if (s->state[x] != PS_HELD || s->nchild[x] || s->nheap == s->capheap)
		return;
	struct ps_ent e = { s->prio[x], x, ++s->ver[x] };
	size_t i = s->nheap++;

	while (i) {
		size_t up = (i - 1) / 2;

		if (s->heap[up].p <= e.p)
			break;
		s->heap[i] = s->heap[up];
		i = up;
	}
	s->heap[i] = e;
}

static struct ps_ent ps_pop(struct ps *s)
{
	struct ps_ent top = s->heap[0], last = s->heap[--s->nheap];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= s->nheap)
			break;
		if (c + 1 < s->nheap && s->heap[c + 1].p < s->heap[c].p)
			c++;
		if (s->heap[c].p >= last.p)
			break;
		s->heap[i] = s->heap[c];
		i = c;
	}
	if (s->nheap)
		s->heap[i] = last;
	return top;
}

/* Evicts the lowest-priority block nothing held extends; false if none. */
static bool ps_evict(struct ps *s)
{
	while (s->nheap) {
		struct ps_ent e = ps_pop(s);
		uint32_t x = e.id;

		if (s->state[x] != PS_HELD || s->nchild[x] || s->ver[x] != e.ver)
			continue;
		s->state[x] = PS_GHOST;
		s->held--;
		if (s->parent[x] != NIL) {
			s->nchild[s->parent[x]]--;
			ps_push(s, s->parent[x]);
			s->parent[x] = NIL;
		}
		return true;
	}
	return false;
}

static void ps_touch(struct ps *s, uint32_t x)
{
	s->now++;
	ps_observe(s, s->now - s->at[x]);
	s->prio[x] = ps_combine(s, s->prio[x]);
	s->at[x] = s->now;
	ps_push(s, x);
}

/* Puts x, which extends prev (NIL: nothing), making room first: under the
 * capacity by one eviction at a time, then a round past the watermark. */
static void ps_put(struct ps *s, uint64_t cap, uint32_t x, uint32_t prev)
{
	double hw = s->c->high_watermark;

	s->now++;
	while (s->held >= cap)
		if (!ps_evict(s))
			return;		/* nothing evictable: the put fails */
	if (s->state[x] == PS_GHOST) {
		ps_observe(s, s->now - s->at[x]);
		s->prio[x] = ps_combine(s, s->prio[x]);
	} else {
		s->prio[x] = (double)s->now;
	}
	s->state[x] = PS_HELD;
	s->at[x] = s->now;
	s->held++;
	if (prev != NIL && prev != x && s->state[prev] == PS_HELD) {
		s->parent[x] = prev;
		s->nchild[prev]++;
	}
	ps_push(s, x);
	if (hw > 0 && hw < 1 && (double)s->held > hw * (double)cap) {
		uint64_t goal = (uint64_t)(s->c->ratio * (double)cap);

		for (uint64_t n = 0; n < (goal ? goal : 1) && ps_evict(s); n++)
			;
	}
}

static void ps_free(struct ps *s)
{
	free(s->prio);
	free(s->at);
	free(s->parent);
	free(s->nchild);
	free(s->ver);
	free(s->state);
	free(s->heap);
}

int polsim_run(const struct trace *t, size_t nreqs, uint64_t cap, const struct polsim_conf *pc,
	       struct trace_sim *out)
{
	size_t nd = t->ndistinct + 1;
	struct ps s = { .c = pc, .h = pc->half_life ? fmax((double)pc->half_life, H_MIN) : H_MIN };
	uint64_t hit = 0, total = 0;

	s.prio = malloc(nd * sizeof(*s.prio));
	s.at = calloc(nd, sizeof(*s.at));
	s.parent = malloc(nd * sizeof(*s.parent));
	s.nchild = calloc(nd, sizeof(*s.nchild));
	s.ver = calloc(nd, sizeof(*s.ver));
	s.state = calloc(nd, sizeof(*s.state));
	/* a push per access and one per eviction (at most one per put) */
	s.capheap = 2 * t->naccess + 1;
	s.heap = malloc(s.capheap * sizeof(*s.heap));
	if (!s.prio || !s.at || !s.parent || !s.nchild || !s.ver || !s.state || !s.heap) {
		ps_free(&s);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nd; i++)
		s.parent[i] = NIL;
	if (nreqs == 0 || nreqs > t->nreqs)
		nreqs = t->nreqs;
	for (size_t q = 0; q < nreqs; q++) {
		const struct trace_req *r = &t->reqs[q];
		const uint32_t *b = &t->bid[r->first];
		uint32_t i = 0;

		total += r->input_len;
		for (; i < r->nblocks && s.state[b[i]] == PS_HELD; i++) {
			hit += trace_block_tokens(t, r, i);
			ps_touch(&s, b[i]);
		}
		for (; i < r->nblocks && cap > 0; i++)
			if (s.state[b[i]] != PS_HELD)
				ps_put(&s, cap, b[i], i ? b[i - 1] : NIL);
	}
	ps_free(&s);
	out->hit_tokens = hit;
	out->total_tokens = total;
	out->hit_rate = total ? (double)hit / (double)total : 0.0;
	return 0;
}

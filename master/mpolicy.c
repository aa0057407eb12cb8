/* mpolicy: reuse priorities, their half-life and the ghost table; see
 * mpolicy.h. Why this policy (measured on Mooncake's conversation trace,
 * docs/master.md "Eviction"): most blocks are used once, and the ones that
 * come back do so after far longer than a pool holds a block it saw once
 * (the median block comes back after ~9,000 other block reads; 95% of first
 * reuses come after >= 36 s), so recency alone (LRU) keeps the wrong ones.
 * Why a clock of accesses (run 30): on a millisecond clock a priority
 * decays with how long the traffic took, not with how much of it came by,
 * which cost Mooncake's synthetic trace up to 0.04 of its hit rate.
 * A count of past accesses that decays with half-life H ranks a block read
 * again and again above one read once, and one read often lately above one
 * read often long ago; the ghost carries a count across an eviction.
 */
#include "mpolicy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "master_i.h"
#include "segreg.h"

#define TAB_STEP MPOL_TAB_STEP
#define TAB_N MPOL_TAB_N
#define HALF_MIN 4u			/* accesses: rhist's first bucket edge */
/* Before enough reuse intervals were seen: a short H errs towards LRU,
 * which costs little; a long one would give the first blocks a priority
 * that outlives the traffic that earned it. */
#define HALF_START HALF_MIN
#define AGE_SLICE_MIN 1024u		/* slots and ghost buckets per mpol_age, at least */
#define AGE_PASS_LOG 28			/* a full pass of mpol_age within 2^28 accesses */
#define TMAP_EVERY_MS 50u		/* the time map's first spacing (the master's tick) */
#define HALF_QUANTILE 0.9		/* H = the 90th percentile of reuse intervals */
#define GHOSTS_MIN 65536u
#define WAYS 4

uint32_t mpol_tab[MPOL_TAB_N];

/* A bucket of the ghost table: WAYS keys' hashes (0: empty), their
 * priorities and last accesses. 48 bytes. */
struct gbucket {
	uint32_t fp[WAYS];
	uint32_t key[WAYS];
	uint32_t at[WAYS];
};

struct mpol_ghosts {
	struct gbucket *b;
	size_t nb;			/* power of two */
};

static uint32_t g_fp(uint32_t h)
{
	return h ? h : 1;
}

/* The fingerprint mixed, then scaled to [0, nb): the bucket follows from
 * the fingerprint alone, so a bigger table is filled from the old one. */
static size_t g_bucket(const struct mpol_ghosts *g, uint32_t fp)
{
	return (size_t)(((uint64_t)(fp * 0x9e3779b1u) * g->nb) >> 32);
}

static struct mpol_ghosts *g_new(size_t entries)
{
	struct mpol_ghosts *g = calloc(1, sizeof(*g));
	size_t nb = 1;

	if (!g)
		return NULL;
	while (nb * WAYS < entries)
		nb *= 2;
	g->b = calloc(nb, sizeof(*g->b));
	if (!g->b) {
		free(g);
		return NULL;
	}
	g->nb = nb;
	return g;
}

static void g_free(struct mpol_ghosts *g)
{
	if (g)
		free(g->b);
	free(g);
}

/* Puts (fp, key, at) into its bucket, over an empty way or the one whose
 * last access is oldest relative to now. */
static void g_put(struct mpol_ghosts *g, uint32_t fp, uint32_t key, uint32_t at, uint32_t now)
{
	struct gbucket *b = &g->b[g_bucket(g, fp)];
	unsigned w = 0;

	for (unsigned i = 0; i < WAYS; i++) {
		if (!b->fp[i] || b->fp[i] == fp) {
			w = i;
			break;
		}
		if (now - b->at[i] > now - b->at[w])
			w = i;
	}
	b->fp[w] = fp;
	b->key[w] = key;
	b->at[w] = at;
}

/* Doubles the table (automatic sizing), keeping every ghost. */
static void g_grow(struct master *m)
{
	struct mpol_ghosts *o = m->pol.g, *g = g_new(o->nb * WAYS * 2);
	uint32_t now = (uint32_t)m->pol.clk;

	if (!g)
		return;		/* the old one serves on */
	for (size_t i = 0; i < o->nb; i++)
		for (unsigned w = 0; w < WAYS; w++)
			if (o->b[i].fp[w])
				g_put(g, o->b[i].fp[w], o->b[i].key[w], o->b[i].at[w], now);
	g_free(o);
	m->pol.g = g;
}

/* H, and the reciprocal mpol_combine multiplies by. */
static void set_half(struct mpol *p, uint32_t h)
{
	p->half = h;
	p->inv = ((uint64_t)TAB_STEP << 32) / h;
}

int mpol_init(struct master *m)
{
	struct mpol *p = &m->pol;

	for (unsigned i = 0; i < TAB_N; i++)
		mpol_tab[i] = (uint32_t)lround(65536.0 * log2(1.0 + exp2(-(double)i / TAB_STEP)));
	memset(p, 0, sizeof(*p));
	set_half(p, HALF_START);
	p->tmap.every_ms = TMAP_EVERY_MS;
	p->ghost_cap = (uint64_t)m->conf.master.eviction_ghosts;
	p->g = g_new(p->ghost_cap ? p->ghost_cap : GHOSTS_MIN);
	if (!p->g)
		return -1;
	mpol_configure(m);
	return 0;
}

void mpol_destroy(struct master *m)
{
	g_free(m->pol.g);
	m->pol.g = NULL;
}

void mpol_configure(struct master *m)
{
	struct mpol *p = &m->pol;
	uint64_t fixed = m->conf.master.eviction_half_life;

	p->lru = strcmp(m->conf.master.eviction_policy, "lru") == 0;
	p->fixed = fixed > MPOL_HALF_MAX ? MPOL_HALF_MAX : (uint32_t)fixed;
	if (p->fixed)
		set_half(p, p->fixed < HALF_MIN ? HALF_MIN : p->fixed);
}

uint64_t mpol_ghost_slots(const struct master *m)
{
	return m->pol.g ? m->pol.g->nb * WAYS : 0;
}

void mpol_observe(struct mpol *p, uint32_t iv)
{
	if (!rhist_add(&p->hist, iv) || p->fixed)
		return;
	uint64_t h = rhist_quantile(&p->hist, HALF_QUANTILE);

	set_half(p, h < HALF_MIN ? HALF_MIN : h > MPOL_HALF_MAX ? MPOL_HALF_MAX : (uint32_t)h);
}

uint32_t mpol_admit(struct master *m, uint32_t h)
{
	struct mpol *p = &m->pol;
	uint32_t now = (uint32_t)++p->clk, fp = g_fp(h);
	struct gbucket *b = &p->g->b[g_bucket(p->g, fp)];

	/* no ghost ever (a fresh master loading its table): a bucket read
	 * would be one more cache miss per object, for nothing */
	for (unsigned w = 0; p->ghost_inserts && w < WAYS; w++)
		if (b->fp[w] == fp) {
			b->fp[w] = 0;
			p->ghost_hits++;
			if (!(p->nobs++ & 7))	/* sampled as mpol_touch does */
				mpol_observe(p, now - b->at[w]);
			return mpol_combine(p, b->key[w], now);
		}
	p->first_puts++;
	return now;
}

void mpol_forget(struct master *m, const struct obj *o)
{
	struct mpol *p = &m->pol;

	if (o->flags & OBJ_VERSION)
		return;		/* a replaced value: its key lives on */
	if (!p->ghost_cap && m->keys * 2 > p->g->nb * WAYS)
		g_grow(m);
	g_put(p->g, g_fp(o->hash), o->pkey, o->atime, (uint32_t)p->clk);
	p->ghost_inserts++;
}

int32_t mpol_score(const struct master *m, const struct obj *o)
{
	return (int32_t)((m->pol.lru ? o->atime : o->pkey) - (uint32_t)m->pol.clk);
}

/* t, a time on the clock, no further than MPOL_KEY_BEHIND_MAX behind now. */
static uint32_t age_time(uint32_t t, uint32_t now)
{
	return (int32_t)(now - t) > (int32_t)MPOL_KEY_BEHIND_MAX ? now - MPOL_KEY_BEHIND_MAX : t;
}

static void age_obj(struct obj *o, uint32_t now)
{
	o->atime = age_time(o->atime, now);
	if (!(o->flags & OBJ_VERSION))	/* a version's pkey is its chain link */
		o->pkey = age_time(o->pkey, now);
}

/* One slice of the passes: budget slots of the segments' arrays (every
 * object with a replica; one with several is seen more than once), then
 * ghost buckets, then the segments again. */
static void age_slice(struct master *m, uint64_t budget)
{
	struct mpol *p = &m->pol;
	uint32_t now = (uint32_t)p->clk;

	while (budget) {
		struct seg *s = p->age_seg < m->segs.n ? segreg_get(&m->segs, (uint32_t)p->age_seg) : NULL;

		if (p->age_seg < m->segs.n && (!s || p->age_i >= s->nobjs)) {
			p->age_seg++;
			p->age_i = 0;
			continue;
		}
		if (s) {
			for (; budget && p->age_i < s->nobjs; budget--)
				age_obj(s->objs[p->age_i++], now);
			continue;
		}
		if (p->age_g < p->g->nb) {
			struct gbucket *b = &p->g->b[p->age_g++];

			for (unsigned w = 0; w < WAYS; w++)
				if (b->fp[w]) {
					b->key[w] = age_time(b->key[w], now);
					b->at[w] = age_time(b->at[w], now);
				}
			budget--;
			continue;
		}
		p->age_seg = p->age_i = p->age_g = 0;	/* the pass is done: the next */
	}
}

/* A sample of the clock against the ms clock, once every_ms; a full map
 * keeps every other sample, the oldest included, and doubles the spacing. */
static void tmap_sample(struct mpol_tmap *t, uint32_t clk, uint32_t ms)
{
	if (t->n && (ms - t->ms[t->n - 1] < t->every_ms || clk == t->clk[t->n - 1]))
		return;
	if (t->n == MPOL_TMAP_N) {
		for (uint32_t i = 0; i < MPOL_TMAP_N / 2; i++) {
			t->clk[i] = t->clk[2 * i];
			t->ms[i] = t->ms[2 * i];
		}
		t->n = MPOL_TMAP_N / 2;
		t->every_ms *= 2;
	}
	t->clk[t->n] = clk;
	t->ms[t->n++] = ms;
}

void mpol_age(struct master *m)
{
	struct mpol *p = &m->pol;
	uint64_t work = (uint64_t)p->g->nb, d = p->clk - p->aged_clk;

	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = segreg_get(&m->segs, (uint32_t)i);

		if (s)
			work += s->nobjs;
	}
	p->aged_clk = p->clk;
	age_slice(m, AGE_SLICE_MIN + ((work * d) >> AGE_PASS_LOG));
	tmap_sample(&p->tmap, (uint32_t)p->clk, m_now32(m));
}

uint32_t mpol_clk_ms(const struct master *m, uint32_t clk)
{
	const struct mpol_tmap *t = &m->pol.tmap;
	uint32_t now = (uint32_t)m->pol.clk, age = now - clk, lo = 0, hi = t->n;

	/* the newest sample at or before clk, by age (the clock wraps) */
	if (!t->n || age > now - t->clk[0])
		return t->n ? t->ms[0] : m_now32(m);
	while (hi - lo > 1) {
		uint32_t mid = (lo + hi) / 2;

		if (now - t->clk[mid] >= age)
			lo = mid;
		else
			hi = mid;
	}
	uint32_t c0 = t->clk[lo], ms0 = t->ms[lo];
	uint32_t c1 = lo + 1 < t->n ? t->clk[lo + 1] : now;
	uint32_t ms1 = lo + 1 < t->n ? t->ms[lo + 1] : m_now32(m);

	if (c1 == c0)
		return ms0;
	return ms0 + (uint32_t)((uint64_t)(ms1 - ms0) * (clk - c0) / (c1 - c0));
}

void mpol_test_set_clock(struct master *m, uint64_t clk)
{
	m->pol.clk = clk;
	m->pol.aged_clk = clk;
	m->pol.tmap.n = 0;
}

/* mpolicy: reuse priorities, their half-life and the ghost table; see
 * mpolicy.h. Why this policy (measured on Mooncake's conversation trace,
 * docs/master.md "Eviction"): most blocks are used once, and the ones that
 * come back do so after far longer than a pool holds a block it saw once
 * (the median block comes back after ~9,000 other block reads; 95% of first
 * reuses come after >= 36 s), so recency alone (LRU) keeps the wrong ones.
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

#define TAB_STEP MPOL_TAB_STEP
#define TAB_N MPOL_TAB_N
#define HALF_MIN_MS 100u
#define HALF_MAX_MS (6u * 3600u * 1000u)
/* Before enough reuse intervals were seen: a short H errs towards LRU,
 * which costs little; a long one would give the first blocks a priority
 * that outlives the traffic that earned it. */
#define HALF_START_MS HALF_MIN_MS
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
	uint32_t now = m_now32(m);

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
	p->half_ms = h;
	p->inv = ((uint64_t)TAB_STEP << 32) / h;
}

int mpol_init(struct master *m)
{
	struct mpol *p = &m->pol;

	for (unsigned i = 0; i < TAB_N; i++)
		mpol_tab[i] = (uint32_t)lround(65536.0 * log2(1.0 + exp2(-(double)i / TAB_STEP)));
	memset(p, 0, sizeof(*p));
	set_half(p, HALF_START_MS);
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
	p->fixed_ms = fixed > HALF_MAX_MS ? HALF_MAX_MS : (uint32_t)fixed;
	if (p->fixed_ms)
		set_half(p, p->fixed_ms < HALF_MIN_MS ? HALF_MIN_MS : p->fixed_ms);
}

uint64_t mpol_ghost_slots(const struct master *m)
{
	return m->pol.g ? m->pol.g->nb * WAYS : 0;
}

void mpol_observe(struct mpol *p, uint32_t iv)
{
	if (!rhist_add(&p->hist, iv) || p->fixed_ms)
		return;
	uint64_t h = rhist_quantile(&p->hist, HALF_QUANTILE);

	set_half(p, h < HALF_MIN_MS ? HALF_MIN_MS : h > HALF_MAX_MS ? HALF_MAX_MS : (uint32_t)h);
}

uint32_t mpol_admit(struct master *m, uint32_t h)
{
	struct mpol *p = &m->pol;
	uint32_t now = m_now32(m), fp = g_fp(h);
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
	g_put(p->g, g_fp(o->hash), o->pkey, o->atime, m_now32(m));
	p->ghost_inserts++;
}

int32_t mpol_score(const struct master *m, const struct obj *o)
{
	uint32_t now = m_now32(m);

	return (int32_t)((m->pol.lru ? o->atime : o->pkey) - now);
}

/* lcache: the location cache of optimistic reads (see lcache.h). Entries
 * live in sets of LC_WAYS (the oldest goes when a set is full); a set's
 * mutex and invalidation count are those of its stripe (set % LC_STRIPES).
 */
#include "lcache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "client_i.h"
#include "mcall.h"
#include "net.h"
#include "sock.h"

#define LC_WAYS 4
#define LC_STRIPES 64
#define LC_TOUCH_BATCH 64		/* keys per touch frame */
#define LC_TOUCH_MS 200			/* the oldest queued touch waits at most this */
#define LC_TOUCH_EVERY_MS 1000		/* a key is reported read at most this often */

struct lc_ent {
	uint64_t hash;			/* 0: empty */
	char *key;			/* klen bytes, malloc'd */
	uint32_t klen;
	struct lc_loc loc;
	uint64_t born_ms;		/* stored (location_ttl counts from here) */
	uint64_t touch_ms;		/* last reported to the master as read */
};

struct lc_stripe {
	pthread_mutex_t lock;
	uint32_t inval;			/* bumped by each lc_invalidate of its keys */
} __attribute__((aligned(64)));

struct lcache {
	size_t nsets;			/* a power of two */
	uint64_t ttl_ms;
	struct lc_ent *ents;		/* nsets * LC_WAYS; a set under its stripe's lock */
	atomic_uint epoch;		/* bumped by lc_clear */
	struct lc_stripe stripe[LC_STRIPES];
	pthread_mutex_t tlock;		/* guards the touch queue */
	char *tkeys[LC_TOUCH_BATCH];
	uint32_t tlens[LC_TOUCH_BATCH];
	size_t tn;
	uint64_t tfirst_ms;
	atomic_uint_fast64_t tdue_ms;	/* when the queue is due; 0: empty */
	atomic_uint_fast64_t hits, fallbacks, touches, raced;
};

struct lcache *lc_create(const struct kvp *kvp)
{
	const struct kvp_conf *cf = &kvp->conf;
	struct lcache *c;
	size_t want, nsets = 1;

	if (!cf->client.optimistic_reads || cf->client.location_cache <= 0)
		return NULL;
	want = (size_t)cf->client.location_cache / LC_WAYS;
	while (nsets < want)
		nsets *= 2;
	if (nsets < LC_STRIPES)
		nsets = LC_STRIPES;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->ents = calloc(nsets * LC_WAYS, sizeof(*c->ents));
	if (!c->ents) {
		free(c);
		return NULL;
	}
	c->nsets = nsets;
	c->ttl_ms = (uint64_t)cf->client.location_ttl;
	for (int i = 0; i < LC_STRIPES; i++)
		pthread_mutex_init(&c->stripe[i].lock, NULL);
	pthread_mutex_init(&c->tlock, NULL);
	return c;
}

void lc_destroy(struct lcache *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nsets * LC_WAYS; i++)
		free(c->ents[i].key);
	for (size_t i = 0; i < c->tn; i++)
		free(c->tkeys[i]);
	for (int i = 0; i < LC_STRIPES; i++)
		pthread_mutex_destroy(&c->stripe[i].lock);
	pthread_mutex_destroy(&c->tlock);
	free(c->ents);
	free(c);
}

static uint64_t lc_hash(const char *key, uint32_t klen)
{
	return XXH3_64bits(key, klen) | 1;	/* 0 marks an empty way */
}

/* The set of hash h and its stripe, locked. */
static struct lc_ent *lc_set_lock(struct lcache *c, uint64_t h, struct lc_stripe **st)
{
	size_t set = (size_t)h & (c->nsets - 1);

	*st = &c->stripe[set % LC_STRIPES];
	pthread_mutex_lock(&(*st)->lock);
	return &c->ents[set * LC_WAYS];
}

static struct lc_ent *lc_find(struct lc_ent *set, uint64_t h, const char *key, uint32_t klen)
{
	for (int w = 0; w < LC_WAYS; w++)
		if (set[w].hash == h && set[w].klen == klen && memcmp(set[w].key, key, klen) == 0)
			return &set[w];
	return NULL;
}

static void lc_forget(struct lc_ent *e)
{
	free(e->key);
	memset(e, 0, sizeof(*e));
}

uint64_t lc_token(struct lcache *c, const char *key, uint32_t klen)
{
	struct lc_stripe *st;
	uint64_t t;

	if (!c)
		return 0;
	lc_set_lock(c, lc_hash(key, klen), &st);
	t = (uint64_t)atomic_load(&c->epoch) << 32 | st->inval;
	pthread_mutex_unlock(&st->lock);
	return t;
}

void lc_insert(struct lcache *c, const char *key, uint32_t klen, uint64_t token,
	       const struct lc_loc *loc)
{
	uint64_t h, now = net_now_ms();
	struct lc_stripe *st;
	struct lc_ent *set, *e;

	if (!c)
		return;
	h = lc_hash(key, klen);
	set = lc_set_lock(c, h, &st);
	/* Under the stripe lock: an lc_clear that bumped the epoch after this
	 * check reaches this set only after we let go of it. */
	if (token != ((uint64_t)atomic_load(&c->epoch) << 32 | st->inval))
		goto out;
	e = lc_find(set, h, key, klen);
	if (!e) {
		e = &set[0];
		for (int w = 0; w < LC_WAYS; w++) {
			if (!set[w].hash) {
				e = &set[w];
				break;
			}
			if (set[w].born_ms < e->born_ms)
				e = &set[w];
		}
		char *k = malloc(klen ? klen : 1);
		if (!k)
			goto out;
		lc_forget(e);
		memcpy(k, key, klen);
		e->key = k;
		e->klen = klen;
		e->hash = h;
		e->touch_ms = now;	/* the master just answered for it */
	}
	e->loc = *loc;
	e->born_ms = now;
out:
	pthread_mutex_unlock(&st->lock);
}

bool lc_lookup(struct lcache *c, const char *key, uint32_t klen, struct lc_loc *loc,
	       bool *touch)
{
	uint64_t h, now;
	struct lc_stripe *st;
	struct lc_ent *set, *e;
	bool hit = false;

	*touch = false;
	if (!c)
		return false;
	h = lc_hash(key, klen);
	now = net_now_ms();
	set = lc_set_lock(c, h, &st);
	e = lc_find(set, h, key, klen);
	if (e && now - e->born_ms < c->ttl_ms) {
		*loc = e->loc;
		hit = true;
		if (now - e->touch_ms >= LC_TOUCH_EVERY_MS) {
			e->touch_ms = now;
			*touch = true;
		}
	} else if (e) {
		lc_forget(e);		/* too old to be worth a try */
	}
	pthread_mutex_unlock(&st->lock);
	return hit;
}

void lc_invalidate(struct lcache *c, const char *key, uint32_t klen)
{
	uint64_t h;
	struct lc_stripe *st;
	struct lc_ent *set, *e;

	if (!c)
		return;
	h = lc_hash(key, klen);
	set = lc_set_lock(c, h, &st);
	st->inval++;
	e = lc_find(set, h, key, klen);
	if (e)
		lc_forget(e);
	pthread_mutex_unlock(&st->lock);
}

void lc_drop(struct lcache *c, const char *key, uint32_t klen, const struct lc_loc *loc)
{
	uint64_t h;
	struct lc_stripe *st;
	struct lc_ent *set, *e;

	if (!c)
		return;
	h = lc_hash(key, klen);
	set = lc_set_lock(c, h, &st);
	e = lc_find(set, h, key, klen);
	if (e && e->loc.seg_id == loc->seg_id && e->loc.off == loc->off && e->loc.gen == loc->gen)
		lc_forget(e);
	pthread_mutex_unlock(&st->lock);
}

void lc_clear(struct lcache *c)
{
	if (!c)
		return;
	atomic_fetch_add(&c->epoch, 1);
	for (size_t s = 0; s < LC_STRIPES; s++) {
		pthread_mutex_lock(&c->stripe[s].lock);
		for (size_t set = s; set < c->nsets; set += LC_STRIPES)
			for (int w = 0; w < LC_WAYS; w++)
				if (c->ents[set * LC_WAYS + w].hash)
					lc_forget(&c->ents[set * LC_WAYS + w]);
		pthread_mutex_unlock(&c->stripe[s].lock);
	}
}

/* ---- touches ---- */

struct lc_touch_batch {
	char **keys;
	uint32_t *lens;
};

static void lc_enc_key(struct wbuf *b, size_t i, void *arg)
{
	struct lc_touch_batch *t = arg;

	wb_str(b, t->keys[i], t->lens[i]);
}

/* Sends n queued keys as one EXISTS batch; frees them. */
static void lc_touch_send(struct kvp *kvp, char **keys, uint32_t *lens, size_t n)
{
	struct lc_touch_batch t = { keys, lens };
	struct mcall *m;
	size_t nc = 0;

	m = mc_batch(kvp, WIRE_OP_EXISTS, NULL, 0, n, lc_enc_key, &t, &nc);
	if (m) {
		if (mc_call(kvp, m, nc, sock_deadline(kvp)) == 0)
			atomic_fetch_add_explicit(&kvp->lc->touches, n, memory_order_relaxed);
		mc_free(m, nc);
	}
	for (size_t i = 0; i < n; i++)
		free(keys[i]);
}

/* Takes the queue out if force or it is due; the caller sends it. */
static size_t lc_touch_take(struct lcache *c, bool force, char **keys, uint32_t *lens)
{
	size_t n = 0;

	if (c->tn && (force || c->tn >= LC_TOUCH_BATCH || net_now_ms() - c->tfirst_ms >= LC_TOUCH_MS)) {
		n = c->tn;
		memcpy(keys, c->tkeys, n * sizeof(*keys));
		memcpy(lens, c->tlens, n * sizeof(*lens));
		c->tn = 0;
		atomic_store(&c->tdue_ms, 0);
	}
	return n;
}

void lc_touch(struct kvp *kvp, const char *key, uint32_t klen)
{
	struct lcache *c = kvp->lc;
	char *keys[LC_TOUCH_BATCH], *k;
	uint32_t lens[LC_TOUCH_BATCH];
	size_t n;

	if (!c || !(k = malloc(klen ? klen : 1)))
		return;
	memcpy(k, key, klen);
	pthread_mutex_lock(&c->tlock);
	if (c->tn == LC_TOUCH_BATCH) {
		free(k);	/* a sender is on its way with a full queue */
	} else {
		if (!c->tn) {
			c->tfirst_ms = net_now_ms();
			atomic_store(&c->tdue_ms, c->tfirst_ms + LC_TOUCH_MS);
		}
		c->tkeys[c->tn] = k;
		c->tlens[c->tn++] = klen;
	}
	n = lc_touch_take(c, false, keys, lens);
	pthread_mutex_unlock(&c->tlock);
	if (n)
		lc_touch_send(kvp, keys, lens, n);
}

void lc_touch_poll(struct kvp *kvp)
{
	struct lcache *c = kvp->lc;
	uint64_t due;

	/* One atomic load on the fast path: nothing queued, or not yet due. */
	if (c && (due = atomic_load_explicit(&c->tdue_ms, memory_order_relaxed)) &&
	    net_now_ms() >= due)
		lc_touch_flush(kvp);
}

void lc_touch_flush(struct kvp *kvp)
{
	struct lcache *c = kvp->lc;
	char *keys[LC_TOUCH_BATCH];
	uint32_t lens[LC_TOUCH_BATCH];
	size_t n;

	if (!c)
		return;
	pthread_mutex_lock(&c->tlock);
	n = lc_touch_take(c, true, keys, lens);
	pthread_mutex_unlock(&c->tlock);
	if (n)
		lc_touch_send(kvp, keys, lens, n);
}

void lc_count(struct lcache *c, bool hit)
{
	if (c)
		atomic_fetch_add_explicit(hit ? &c->hits : &c->fallbacks, 1, memory_order_relaxed);
}

void lc_count_raced(struct lcache *c)
{
	if (c)
		atomic_fetch_add_explicit(&c->raced, 1, memory_order_relaxed);
}

void lc_stats(struct lcache *c, struct lc_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!c)
		return;
	out->hits = atomic_load_explicit(&c->hits, memory_order_relaxed);
	out->fallbacks = atomic_load_explicit(&c->fallbacks, memory_order_relaxed);
	out->touches = atomic_load_explicit(&c->touches, memory_order_relaxed);
	out->raced = atomic_load_explicit(&c->raced, memory_order_relaxed);
}

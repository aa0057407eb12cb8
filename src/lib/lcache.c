/* lcache: the location cache of optimistic reads (see lcache.h). Entries
 * live in sets of LC_WAYS (the oldest goes when a set is full), read
 * without a lock; a set's writers take its stripe's mutex (set %
 * LC_STRIPES), which also guards the stripe's invalidation count.
 */
#include "lcache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <xxhash.h>

#include "client_i.h"
#include "clock.h"
#include "mcall.h"
#include "segtab.h"
#include "sock.h"
#include "xp_rdma.h"

#define LC_WAYS 8
#define LC_GONE_FSTAT_MS 50		/* seg_gone's fstat backstop, at most this often */
#define LC_STRIPES 64
#define LC_TOUCH_BATCH 64		/* keys per touch frame */
#define LC_TOUCH_MS 200			/* the oldest queued touch waits at most this */

/* A way holds no key: the key's 64-bit hash (its tag) and length pick it,
 * and the extent header, which names the key, decides; a hash collision
 * only costs a fallback to the master. So ways are fixed-size and lookups
 * take no lock: a way is written under its stripe's lock as a seqlock (seq
 * odd while it changes) and read by copying it between two loads of seq.
 * Every field is accessed with relaxed atomics. */
enum { W_SEG_KLEN, W_UUID, W_OFF, W_ALEN, W_VLEN, W_GEN, W_CSUM, W_BORN, W_N };

/* W_BORN: the cache's clear epoch when stored (upper 32 bits; lc_clear
 * bumps it, which empties every way at once: a way of another epoch is
 * empty) and the time stored (ms, lower 32 bits, compared modulo 2^32;
 * location_ttl is at most an hour). */
static uint64_t born_word(uint32_t epoch, uint64_t now)
{
	return (uint64_t)epoch << 32 | (uint32_t)now;
}

/* ms since a way of epoch `epoch` was stored, or UINT64_MAX when it was
 * stored before the last lc_clear. */
static uint64_t born_age(uint64_t born, uint32_t epoch, uint64_t now)
{
	if ((uint32_t)(born >> 32) != epoch)
		return UINT64_MAX;
	return (uint32_t)((uint32_t)now - (uint32_t)born);
}

struct lc_way {
	atomic_uint seq;
	atomic_uint_fast64_t w[W_N];	/* the location, its key length, when stored */
};

/* The tags first, in one cache line: a lookup reads that line and then
 * only the way that matches. */
struct lc_set {
	atomic_uint_fast64_t tag[LC_WAYS];	/* key hash | 1; 0: empty */
	struct lc_way way[LC_WAYS];
};

struct lc_stripe {
	pthread_mutex_t lock;		/* writers of the stripe's sets */
	atomic_uint inval;		/* bumped by each lc_invalidate of its keys */
} __attribute__((aligned(64)));

struct lcache {
	size_t nsets;			/* a power of two */
	size_t sets_bytes;		/* the mapping of sets */
	uint64_t ttl_ms;
	struct lc_set *sets;		/* nsets */
	atomic_uint epoch;		/* bumped by lc_clear */
	struct lc_stripe stripe[LC_STRIPES];
	pthread_mutex_t tlock;		/* guards the touch queue */
	char *tkeys[LC_TOUCH_BATCH];
	uint32_t tlens[LC_TOUCH_BATCH];
	size_t tn;
	uint64_t tfirst_ms;
	atomic_uint_fast64_t tdue_ms;	/* when the queue is due; 0: empty */
	atomic_bool toff;		/* the master refused TOUCH */
	atomic_uint_fast64_t hits, fallbacks, touches, raced;
};

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define ST(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)

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
	/* Anonymous pages read as zero, which is every way empty, seq 0, and
	 * cost nothing until a store touches them (the memset this replaced
	 * wrote 5.6 MB at every kvp_open). No MADV_HUGEPAGE: it made lookups
	 * no faster, and the sets are sparse, so the kernel kept splitting
	 * and freeing the mostly-zero huge pages, and a store then faulted a
	 * 2 MiB page in and cleared it again: 5% of a TCP batch get's CPU. */
	c->sets_bytes = nsets * sizeof(*c->sets);
	c->sets = mmap(NULL, c->sets_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (c->sets == MAP_FAILED) {
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
	for (size_t i = 0; i < c->tn; i++)
		free(c->tkeys[i]);
	for (int i = 0; i < LC_STRIPES; i++)
		pthread_mutex_destroy(&c->stripe[i].lock);
	pthread_mutex_destroy(&c->tlock);
	munmap(c->sets, c->sets_bytes);
	free(c);
}

uint64_t lc_key_hash(const char *key, uint32_t klen)
{
	return XXH3_64bits(key, klen);
}

/* The set of hash h (its upper bits: the tag's lowest bit is forced) and
 * the set's stripe. */
static struct lc_set *lc_set(struct lcache *c, uint64_t h, struct lc_stripe **st)
{
	size_t set = (size_t)(h >> 20) & (c->nsets - 1);

	*st = &c->stripe[set % LC_STRIPES];
	return &c->sets[set];
}

void lc_prefetch(struct lcache *c, uint64_t h)
{
	struct lc_stripe *st;

	if (c)
		__builtin_prefetch(lc_set(c, h, &st));
}

void lc_prefetch_way(struct lcache *c, uint64_t h)
{
	struct lc_stripe *st;
	struct lc_set *set;

	if (!c)
		return;
	set = lc_set(c, h, &st);
	for (int w = 0; w < LC_WAYS; w++)
		if (LD(set->tag[w]) == (h | 1)) {
			/* a way is 80 bytes: it may span two lines */
			__builtin_prefetch(&set->way[w]);
			__builtin_prefetch((const char *)(&set->way[w] + 1) - 1);
			return;
		}
}

/* Writers, under the stripe lock: way w of set (its words, or empty). */
static void way_write(struct lc_set *set, int w, uint64_t tag, const uint64_t *words)
{
	struct lc_way *e = &set->way[w];
	unsigned seq = LD(e->seq);

	ST(e->seq, seq + 1);
	atomic_thread_fence(memory_order_release);
	ST(set->tag[w], tag);
	for (int i = 0; i < W_N; i++)
		ST(e->w[i], words ? words[i] : 0);
	atomic_store_explicit(&e->seq, seq + 2, memory_order_release);
}

static uint64_t seg_klen(uint32_t seg_id, uint32_t klen)
{
	return (uint64_t)seg_id << 32 | klen;
}

uint64_t lc_token_h(struct lcache *c, uint64_t h)
{
	struct lc_stripe *st;

	if (!c)
		return 0;
	lc_set(c, h, &st);
	return (uint64_t)atomic_load(&c->epoch) << 32 | atomic_load(&st->inval);
}

uint64_t lc_token(struct lcache *c, const char *key, uint32_t klen)
{
	return c ? lc_token_h(c, lc_key_hash(key, klen)) : 0;
}

/* Under the stripe lock: loc into the key's own way (a key has at most
 * one: every store goes there), else the oldest. */
static void lc_store_locked(struct lcache *c, struct lc_set *set, uint64_t tag, uint32_t klen,
			    const struct lc_loc *loc, uint64_t now)
{
	uint32_t epoch = atomic_load(&c->epoch);
	uint64_t oldest = 0;
	int e = 0;
	uint64_t words[W_N] = {
		[W_SEG_KLEN] = seg_klen(loc->seg_id, klen), [W_UUID] = loc->seg_uuid,
		[W_OFF] = loc->off, [W_ALEN] = loc->alloc_len, [W_VLEN] = loc->vlen,
		[W_GEN] = loc->gen, [W_CSUM] = loc->csum, [W_BORN] = born_word(epoch, now),
	};

	for (int w = 0; w < LC_WAYS; w++) {
		uint64_t t = LD(set->tag[w]);
		uint64_t age = born_age(LD(set->way[w].w[W_BORN]), epoch, now);

		if (t == tag && (uint32_t)LD(set->way[w].w[W_SEG_KLEN]) == klen) {
			e = w;	/* the key's own way: replaced */
			break;
		}
		if (!t)
			age = UINT64_MAX;	/* an empty way before any used one */
		if (age > oldest) {
			oldest = age;
			e = w;
		}
	}
	/* The master just answered for the key (or it was just put). */
	way_write(set, e, tag, words);
}

void lc_insert(struct lcache *c, const char *key, uint32_t klen, uint64_t token,
	       const struct lc_loc *loc)
{
	uint64_t h, now = clock_now_ms();
	struct lc_stripe *st;
	struct lc_set *set;

	if (!c)
		return;
	h = lc_key_hash(key, klen);
	set = lc_set(c, h, &st);
	pthread_mutex_lock(&st->lock);
	/* Under the stripe lock: an lc_clear or lc_invalidate that bumps its
	 * count after this check reaches this set only after we let go. */
	if (token == ((uint64_t)atomic_load(&c->epoch) << 32 | atomic_load(&st->inval)))
		lc_store_locked(c, set, h | 1, klen, loc, now);
	pthread_mutex_unlock(&st->lock);
}

void lc_replace(struct lcache *c, const char *key, uint32_t klen, const struct lc_loc *loc)
{
	uint64_t h, tag, now = clock_now_ms();
	struct lc_stripe *st;
	struct lc_set *set;

	if (!c)
		return;
	h = lc_key_hash(key, klen);
	tag = h | 1;
	set = lc_set(c, h, &st);
	pthread_mutex_lock(&st->lock);
	/* lc_invalidate's bump and lc_insert's store with the token that
	 * follows it, under one hold of the lock: nothing can come between */
	atomic_fetch_add(&st->inval, 1);
	lc_store_locked(c, set, tag, klen, loc, now);
	pthread_mutex_unlock(&st->lock);
}

/* Readers: a consistent copy of way w into *loc if it holds tag, key
 * length klen and is younger than ttl_ms; the fields go straight to loc
 * (a copy through a words[] array on the stack made the compiler read
 * pairs of 8-byte stores back as one 16-byte load: a store-forwarding
 * stall that was a third of a lookup). */
static bool way_read_loc(struct lc_set *set, int w, uint64_t tag, uint32_t klen, uint64_t now,
			 uint32_t epoch, uint64_t ttl_ms, struct lc_loc *loc)
{
	struct lc_way *e = &set->way[w];
	unsigned s1 = atomic_load_explicit(&e->seq, memory_order_acquire);
	uint64_t sk, born;

	if (s1 & 1)
		return false;	/* being written: a miss, the master answers */
	sk = LD(e->w[W_SEG_KLEN]);
	born = LD(e->w[W_BORN]);
	loc->seg_uuid = LD(e->w[W_UUID]);
	loc->off = LD(e->w[W_OFF]);
	loc->alloc_len = LD(e->w[W_ALEN]);
	loc->vlen = LD(e->w[W_VLEN]);
	loc->gen = LD(e->w[W_GEN]);
	loc->csum = LD(e->w[W_CSUM]);
	uint64_t t = LD(set->tag[w]);
	atomic_thread_fence(memory_order_acquire);
	if (LD(e->seq) != s1 || t != tag || (uint32_t)sk != klen ||
	    born_age(born, epoch, now) >= ttl_ms)
		return false;
	loc->seg_id = (uint32_t)(sk >> 32);
	return true;
}

bool lc_lookup_h(struct lcache *c, uint64_t h, uint32_t klen, uint64_t now,
		 struct lc_loc *loc)
{
	uint64_t tag = h | 1;
	uint32_t epoch;
	struct lc_stripe *st;
	struct lc_set *set;

	if (!c)
		return false;
	set = lc_set(c, h, &st);
	epoch = atomic_load(&c->epoch);
	for (int w = 0; w < LC_WAYS; w++) {
		if (LD(set->tag[w]) != tag ||
		    !way_read_loc(set, w, tag, klen, now, epoch, c->ttl_ms, loc))
			continue;
		return true;
	}
	return false;
}

bool lc_lookup(struct lcache *c, const char *key, uint32_t klen, uint64_t now,
	       struct lc_loc *loc)
{
	return c && lc_lookup_h(c, lc_key_hash(key, klen), klen, now, loc);
}

/* Empties the ways of key (all of them, or only one that says loc). */
static void lc_forget(struct lcache *c, const char *key, uint32_t klen, bool bump,
		      const struct lc_loc *loc)
{
	uint64_t h = lc_key_hash(key, klen), tag = h | 1;
	struct lc_stripe *st;
	struct lc_set *set = lc_set(c, h, &st);

	pthread_mutex_lock(&st->lock);
	if (bump)
		atomic_fetch_add(&st->inval, 1);
	for (int w = 0; w < LC_WAYS; w++) {
		const struct lc_way *e = &set->way[w];
		uint64_t sk = LD(e->w[W_SEG_KLEN]);

		if (LD(set->tag[w]) != tag || (uint32_t)sk != klen)
			continue;
		if (loc && ((uint32_t)(sk >> 32) != loc->seg_id || LD(e->w[W_OFF]) != loc->off ||
			    LD(e->w[W_GEN]) != loc->gen))
			continue;
		way_write(set, w, 0, NULL);
	}
	pthread_mutex_unlock(&st->lock);
}

void lc_invalidate(struct lcache *c, const char *key, uint32_t klen)
{
	if (c)
		lc_forget(c, key, klen, true, NULL);
}

void lc_drop(struct lcache *c, const char *key, uint32_t klen, const struct lc_loc *loc)
{
	if (c)
		lc_forget(c, key, klen, false, loc);
}

/* O(1): every way stored before now reads as empty (born_age). It used
 * to write every used way of every set, a walk of the whole mapping
 * (5.6 MB at the default size) twice per kvp_remove_prefix. */
void lc_clear(struct lcache *c)
{
	if (c)
		atomic_fetch_add(&c->epoch, 1);
}

/* ---- segments ---- */

/* The file of an ephemeral segment (an embedded node's, a node's with
 * remove_segment_on_exit) is removed when its owner exits: its objects are
 * gone from the pool then, though this mapping still holds their bytes.
 * Whoever removes it through kvpool (the owner, the reaper of an orphan)
 * sets SEG_S_GONE in its state word first, which every call reads; an
 * fstat (st_nlink 0), at most every LC_GONE_FSTAT_MS and in every call
 * for a format 1 segment, catches a removal by anyone else. It was one
 * fstat per call: 8% of a 64-key batch_exists. Gone is for good. */
static bool seg_gone(struct client_seg *s)
{
	struct stat st;
	uint64_t now;

	if (!s->ephemeral)
		return false;
	if (atomic_load_explicit(&s->gone, memory_order_relaxed))
		return true;
	if (segment_is_gone(&s->map)) {
		atomic_store(&s->gone, true);
		return true;
	}
	if (s->map.version >= 2) {
		now = clock_now_ms();
		if (now - atomic_load_explicit(&s->gone_fstat_ms, memory_order_relaxed) <
		    LC_GONE_FSTAT_MS)
			return false;
		atomic_store_explicit(&s->gone_fstat_ms, now, memory_order_relaxed);
	}
	if (fstat(s->map.fd, &st) == 0 && st.st_nlink == 0) {
		atomic_store(&s->gone, true);
		return true;
	}
	return false;
}

struct client_seg *lc_seg(struct lc_segs *o, uint32_t id)
{
	if (!o->seg || o->id != id) {
		segtab_put(o->kvp, o->seg);
		o->seg = segtab_peek(o->kvp, id);
		o->id = id;
		o->gone = o->seg && o->seg->local && seg_gone(o->seg);
		/* once per segment of the call, not per key */
		o->readable = o->seg && !o->gone &&
			      xp_path_choose(o->kvp->proto, o->seg->local, false, false,
					     KVP_TIER_MEM) == XP_LOCAL;
	}
	return o->readable ? o->seg : NULL;
}

void lc_seg_end(struct lc_segs *o)
{
	segtab_put(o->kvp, o->seg);
	o->seg = NULL;
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

/* Posts n queued keys as one TOUCH batch; frees them. */
static void lc_touch_send(struct kvp *kvp, char **keys, uint32_t *lens, size_t n)
{
	struct lc_touch_batch t = { keys, lens };
	struct mcall *m;
	size_t nc = 0;

	m = mc_batch(kvp, WIRE_OP_TOUCH, NULL, 0, n, lc_enc_key, &t, &nc);
	if (m) {
		/* Posted: the reader that sends it does not wait a round trip. */
		if (mc_post(kvp, m, nc, sock_deadline(kvp)) == 0)
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

	if (c->tn && (force || c->tn >= LC_TOUCH_BATCH || clock_now_ms() - c->tfirst_ms >= LC_TOUCH_MS)) {
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

	if (!c || atomic_load_explicit(&c->toff, memory_order_relaxed) ||
	    !(k = malloc(klen ? klen : 1)))
		return;
	memcpy(k, key, klen);
	pthread_mutex_lock(&c->tlock);
	if (c->tn == LC_TOUCH_BATCH) {
		free(k);	/* a sender is on its way with a full queue */
	} else {
		if (!c->tn) {
			c->tfirst_ms = clock_now_ms();
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

void lc_touch_refused(struct kvp *kvp)
{
	if (kvp->lc)
		atomic_store(&kvp->lc->toff, true);
}

void lc_touch_poll(struct kvp *kvp)
{
	struct lcache *c = kvp->lc;
	uint64_t due;

	/* One atomic load on the fast path: nothing queued, or not yet due. */
	if (c && (due = atomic_load_explicit(&c->tdue_ms, memory_order_relaxed)) &&
	    clock_now_ms() >= due)
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

void lc_count(struct lcache *c, uint64_t hits, uint64_t fallbacks)
{
	if (!c)
		return;
	if (hits)
		atomic_fetch_add_explicit(&c->hits, hits, memory_order_relaxed);
	if (fallbacks)
		atomic_fetch_add_explicit(&c->fallbacks, fallbacks, memory_order_relaxed);
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

/* objtab: hash table + embedded skip list of the master's objects; see objtab.h. */
#include "objtab.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#define OBJTAB_MIN_BUCKETS 1024
#define GROW_AHEAD 8		/* buckets prefetched ahead while rehashing */
#define TAG_SPLIT_MIN (1u << 16)	/* from here the tag holds the split bit */

int objtab_init(struct objtab *t)
{
	memset(t, 0, sizeof(*t));
	t->nbuckets = OBJTAB_MIN_BUCKETS;
	t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
	if (!t->buckets)
		return -1;
	t->level = 1;
	t->rng = 0x9e3779b97f4a7c15ull;
	return 0;
}

void objtab_destroy(struct objtab *t)
{
	struct obj *o = t->head[0];

	while (o) {
		struct obj *next = obj_fwd(o)[0];
		free(o);
		o = next;
	}
	free(t->buckets);
	memset(t, 0, sizeof(*t));
}

uint32_t objtab_hash(const uint8_t *key, size_t n)
{
	return (uint32_t)XXH3_64bits(key, n);
}

int objtab_keycmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
	int c = memcmp(a, b, an < bn ? an : bn);

	if (c)
		return c;
	return an < bn ? -1 : an > bn;
}

static int obj_cmp(const struct obj *o, const uint8_t *key, size_t n)
{
	return objtab_keycmp(obj_key(o), o->key_len, key, n);
}

static uint16_t hash_tag(uint32_t h)
{
	return (uint16_t)(h >> 16);
}

struct obj *objtab_find(const struct objtab *t, const uint8_t *key, size_t n)
{
	return objtab_find_hash(t, key, n, objtab_hash(key, n));
}

struct obj *objtab_find_hash(const struct objtab *t, const uint8_t *key, size_t n, uint32_t h)
{
	uint16_t tag = hash_tag(h);

	for (struct obj *o = t->buckets[h & (t->nbuckets - 1)]; o; o = o->hnext)
		if (o->tag == tag && o->key_len == n && memcmp(obj_key(o), key, n) == 0)
			return o;
	return NULL;
}

/* Which of the two new buckets o moves to when the table doubles from
 * nb buckets: bit log2(nb) of its hash. From 2^16 buckets on that bit is
 * in the tag (bits 16-31), so large tables split without reading keys or
 * hashing them again; below, the key is hashed again (a small table). */
static size_t grow_slot(const struct obj *o, size_t i, size_t nb)
{
	if (nb >= TAG_SPLIT_MIN && nb < (1ull << 32))
		return (o->tag & (nb >> 16)) ? i + nb : i;
	return objtab_hash(obj_key(o), o->key_len) & (2 * nb - 1);
}

/* Doubles the bucket array at load factor 1. A failed resize is harmless:
 * chains just get longer. */
static void objtab_grow(struct objtab *t)
{
	size_t nb = t->nbuckets * 2;
	struct obj **b = calloc(nb, sizeof(*b));

	if (!b)
		return;
	for (size_t i = 0; i < t->nbuckets; i++) {
		struct obj *o = t->buckets[i];
		/* Every object is read (its link and tag): prefetch the chains
		 * a few buckets ahead, or the pass waits on one miss per object. */
		if (i + GROW_AHEAD < t->nbuckets && t->buckets[i + GROW_AHEAD])
			__builtin_prefetch(t->buckets[i + GROW_AHEAD]);
		while (o) {
			struct obj *next = o->hnext;
			size_t j = grow_slot(o, i, t->nbuckets);
			o->hnext = b[j];
			b[j] = o;
			o = next;
		}
	}
	free(t->buckets);
	t->buckets = b;
	t->nbuckets = nb;
}

static void link_hash(struct objtab *t, struct obj *o, uint32_t h);

/* Level with P(level >= k) = 4^-(k-1): 1.33 links per object on average. */
static int random_level(struct objtab *t)
{
	uint64_t x = t->rng;
	int lvl = 1;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	t->rng = x;
	while ((x & 3) == 0 && lvl < OBJTAB_MAX_LEVEL) {
		lvl++;
		x >>= 2;
	}
	return lvl;
}

/* Fills update[] with, per level, the link that points at the first
 * object >= key (the head slot or a predecessor's fwd slot). */
static void find_links(struct objtab *t, const uint8_t *key, size_t n,
		       struct obj ***update)
{
	struct obj **links = t->head;
	const struct obj *stop = NULL;	/* compared >= key one level up */

	for (int i = t->level - 1; i >= 0; i--) {
		/* the object that ended the walk a level up often ends this
		 * one too: it is known to be >= key, no need to compare again */
		while (links[i] && links[i] != stop && obj_cmp(links[i], key, n) < 0)
			links = obj_fwd(links[i]);
		stop = links[i];
		update[i] = &links[i];
	}
}

static size_t obj_alloc_size(size_t key_len, unsigned cap_rep, int level)
{
	return sizeof(struct obj) + cap_rep * sizeof(struct rep) +
	       (size_t)level * sizeof(struct obj *) + key_len;
}

struct obj *objtab_new(struct objtab *t, const uint8_t *key, size_t n, unsigned cap_rep)
{
	return objtab_new_hash(t, key, n, objtab_hash(key, n), cap_rep);
}

struct obj *objtab_new_hash(struct objtab *t, const uint8_t *key, size_t n, uint32_t h,
			    unsigned cap_rep)
{
	int lvl = random_level(t);
	struct obj *o = malloc(obj_alloc_size(n, cap_rep, lvl));

	if (!o)
		return NULL;
	memset(o, 0, sizeof(*o));
	o->tag = hash_tag(h);
	o->slot = OBJ_NOSLOT;
	o->key_len = (uint16_t)n;
	o->cap_rep = (uint8_t)cap_rep;
	o->level = (uint8_t)lvl;
	memcpy((uint8_t *)obj_key(o), key, n);
	return o;
}

void objtab_link(struct objtab *t, struct obj *o)
{
	link_hash(t, o, objtab_hash(obj_key(o), o->key_len));
}

/* objtab_link with the key's hash already computed. */
static void link_hash(struct objtab *t, struct obj *o, uint32_t h)
{
	struct obj **update[OBJTAB_MAX_LEVEL];
	int lvl = o->level;

	if (lvl > t->level) {
		for (int i = t->level; i < lvl; i++)
			t->head[i] = NULL;
		t->level = lvl;
	}
	find_links(t, obj_key(o), o->key_len, update);
	struct obj **fwd = obj_fwd(o);
	for (int i = 0; i < lvl; i++) {
		fwd[i] = *update[i];
		*update[i] = o;
	}

	struct obj **b = &t->buckets[h & (t->nbuckets - 1)];
	o->hnext = *b;
	*b = o;
	if (++t->count > t->nbuckets)
		objtab_grow(t);
}

struct obj *objtab_insert(struct objtab *t, const uint8_t *key, size_t n, unsigned cap_rep)
{
	return objtab_insert_hash(t, key, n, objtab_hash(key, n), cap_rep);
}

struct obj *objtab_insert_hash(struct objtab *t, const uint8_t *key, size_t n, uint32_t h,
			       unsigned cap_rep)
{
	struct obj *o = objtab_new_hash(t, key, n, h, cap_rep);

	if (o)
		link_hash(t, o, h);
	return o;
}

/* Replaces o by repl (same key) in the hash chain and the skip list. */
static void relink(struct objtab *t, struct obj *o, struct obj *repl)
{
	uint32_t h = objtab_hash(obj_key(o), o->key_len);
	struct obj **b = &t->buckets[h & (t->nbuckets - 1)];

	while (*b != o)
		b = &(*b)->hnext;
	*b = repl ? repl : o->hnext;

	struct obj **update[OBJTAB_MAX_LEVEL];
	find_links(t, obj_key(o), o->key_len, update);
	struct obj **fwd = obj_fwd(o);
	for (int i = 0; i < o->level; i++)
		*update[i] = repl ? repl : fwd[i];
	if (!repl)
		while (t->level > 1 && !t->head[t->level - 1])
			t->level--;
}

void objtab_unlink(struct objtab *t, struct obj *o)
{
	relink(t, o, NULL);
	t->count--;
	o->hnext = NULL;
}

void objtab_remove(struct objtab *t, struct obj *o)
{
	objtab_unlink(t, o);
	free(o);
}

struct obj *objtab_regrow(struct objtab *t, struct obj *o, unsigned cap_rep)
{
	struct obj *n = malloc(obj_alloc_size(o->key_len, cap_rep, o->level));

	if (!n)
		return NULL;
	memcpy(n, o, sizeof(*o) + o->nrep * sizeof(struct rep));
	n->cap_rep = (uint8_t)cap_rep;
	memcpy(obj_fwd(n), obj_fwd(o), o->level * sizeof(struct obj *));
	memcpy((uint8_t *)obj_key(n), obj_key(o), o->key_len);
	relink(t, o, n);
	free(o);
	return n;
}

struct obj *objtab_seek(const struct objtab *t, const uint8_t *key, size_t n, bool after)
{
	struct obj *const *links = t->head;
	const struct obj *stop = NULL;	/* ended the walk a level up (find_links) */

	for (int i = t->level - 1; i >= 0; i--) {
		while (links[i] && links[i] != stop) {
			int c = obj_cmp(links[i], key, n);
			if (c > 0 || (c == 0 && !after))
				break;
			links = obj_fwd(links[i]);
		}
		stop = links[i];
	}
	return links[0];
}

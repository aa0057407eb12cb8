/* objtab: hash table + embedded skip list of the master's objects; see objtab.h. */
#include "objtab.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#define OBJTAB_MIN_BUCKETS 1024

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

/* Doubles the bucket array at load factor 1, hashing every key again (the
 * objects keep only 16 bits of it). A failed resize is harmless: chains
 * just get longer. */
static void objtab_grow(struct objtab *t)
{
	size_t nb = t->nbuckets * 2;
	struct obj **b = calloc(nb, sizeof(*b));

	if (!b)
		return;
	for (size_t i = 0; i < t->nbuckets; i++) {
		struct obj *o = t->buckets[i];
		while (o) {
			struct obj *next = o->hnext;
			size_t j = objtab_hash(obj_key(o), o->key_len) & (nb - 1);
			o->hnext = b[j];
			b[j] = o;
			o = next;
		}
	}
	free(t->buckets);
	t->buckets = b;
	t->nbuckets = nb;
}

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

	for (int i = t->level - 1; i >= 0; i--) {
		while (links[i] && obj_cmp(links[i], key, n) < 0)
			links = obj_fwd(links[i]);
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
	int lvl = random_level(t);
	struct obj *o = malloc(obj_alloc_size(n, cap_rep, lvl));

	if (!o)
		return NULL;
	memset(o, 0, sizeof(*o));
	o->tag = hash_tag(objtab_hash(key, n));
	o->slot = OBJ_NOSLOT;
	o->key_len = (uint16_t)n;
	o->cap_rep = (uint8_t)cap_rep;
	o->level = (uint8_t)lvl;
	memcpy((uint8_t *)obj_key(o), key, n);
	return o;
}

void objtab_link(struct objtab *t, struct obj *o)
{
	struct obj **update[OBJTAB_MAX_LEVEL];
	int lvl = o->level;
	uint32_t h = objtab_hash(obj_key(o), o->key_len);

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
	struct obj *o = objtab_new(t, key, n, cap_rep);

	if (o)
		objtab_link(t, o);
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

	for (int i = t->level - 1; i >= 0; i--) {
		while (links[i]) {
			int c = obj_cmp(links[i], key, n);
			if (c > 0 || (c == 0 && !after))
				break;
			links = obj_fwd(links[i]);
		}
	}
	return links[0];
}

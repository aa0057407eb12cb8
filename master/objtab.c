/* objtab: hash table + embedded skip list of the master's objects; see objtab.h. */
#include "objtab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#define OBJTAB_MIN_SLOTS 1024
#define GROW_AHEAD 8		/* slots whose objects are prefetched ahead while rehashing */

int objtab_init(struct objtab *t)
{
	memset(t, 0, sizeof(*t));
	t->nslots = OBJTAB_MIN_SLOTS;
	t->slots = calloc(t->nslots, sizeof(*t->slots));
	if (!t->slots)
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
	free(t->slots);
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

/* Compares o's key with key (n bytes) as objtab_keycmp does, both known
 * equal up to byte `from`; *lcp gets the length of their common prefix.
 * The skip-list walks pass the prefix the keys around o share with key:
 * keys of one scheme share long prefixes ("model/layer/..."), and comparing
 * them again and again from byte 0 was most of an insert's time. */
static int obj_cmp_from(const struct obj *o, const uint8_t *key, size_t n, size_t from,
			size_t *lcp)
{
	const uint8_t *a = obj_key(o);
	size_t an = o->key_len, m = an < n ? an : n, i = from;

	for (; i + 8 <= m; i += 8) {
		uint64_t x, y;
		memcpy(&x, a + i, 8);
		memcpy(&y, key + i, 8);
		if (x != y)
			break;
	}
	for (; i < m; i++)
		if (a[i] != key[i]) {
			*lcp = i;
			return a[i] < key[i] ? -1 : 1;
		}
	*lcp = m;
	return an < n ? -1 : an > n;
}

static struct obj *slot_obj(uint64_t s)
{
	return (struct obj *)(uintptr_t)(s & OBJTAB_SLOT_PTR);
}

struct obj *objtab_find(const struct objtab *t, const uint8_t *key, size_t n)
{
	return objtab_find_hash(t, key, n, objtab_hash(key, n));
}

struct obj *objtab_find_hash(const struct objtab *t, const uint8_t *key, size_t n, uint32_t h)
{
	uint64_t tag = objtab_slot_tag(h);
	size_t mask = t->nslots - 1;

	for (size_t i = h & mask;; i = (i + 1) & mask) {	/* ends: a slot is always empty */
		uint64_t s = t->slots[i];
		if (!s)
			return NULL;
		if ((s & ~OBJTAB_SLOT_PTR) == tag) {
			const struct obj *o = slot_obj(s);
			if (o->key_len == n && memcmp(obj_key(o), key, n) == 0)
				return (struct obj *)o;
		}
	}
}

/* Puts o (hash h) into the first empty slot from its home. */
static void slot_put(uint64_t *slots, size_t mask, struct obj *o, uint32_t h)
{
	size_t i = h & mask;

	while (slots[i])
		i = (i + 1) & mask;
	slots[i] = (uint64_t)(uintptr_t)o | objtab_slot_tag(h);
}

/* The slot that holds o. */
static size_t slot_of(const struct objtab *t, const struct obj *o)
{
	size_t mask = t->nslots - 1, i = o->hash & mask;

	while (slot_obj(t->slots[i]) != o)
		i = (i + 1) & mask;
	return i;
}

/* Empties slot i and moves later entries of its run back into the hole
 * when their home allows (backward-shift deletion: no tombstones, so
 * probes stay as short as the load makes them). Reads the moved objects'
 * hashes: a run is a few slots at 3/4 full. */
static void slot_clear(struct objtab *t, size_t i)
{
	size_t mask = t->nslots - 1;

	for (size_t j = (i + 1) & mask; t->slots[j]; j = (j + 1) & mask) {
		size_t home = slot_obj(t->slots[j])->hash & mask;
		/* j's entry may fill the hole at i unless its home lies
		 * cyclically in (i, j] */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			t->slots[i] = t->slots[j];
			i = j;
		}
	}
	t->slots[i] = 0;
}

/* Doubles the slot array. Every object is read (its hash): prefetch a few
 * slots ahead, or the pass waits on one miss per object. */
static int objtab_grow(struct objtab *t)
{
	size_t nb = t->nslots * 2;
	uint64_t *b = calloc(nb, sizeof(*b));

	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < t->nslots; i++) {
		if (i + GROW_AHEAD < t->nslots && t->slots[i + GROW_AHEAD])
			__builtin_prefetch(slot_obj(t->slots[i + GROW_AHEAD]));
		if (t->slots[i]) {
			struct obj *o = slot_obj(t->slots[i]);
			slot_put(b, nb - 1, o, o->hash);
		}
	}
	free(t->slots);
	t->slots = b;
	t->nslots = nb;
	return 0;
}

int objtab_reserve(struct objtab *t)
{
	if ((t->count + 1) * 4 <= t->nslots * 3)
		return 0;
	/* past 3/4 a failed resize only lengthens probes, until one slot
	 * would be left: the last must stay empty for probes to end */
	if (objtab_grow(t) == 0 || t->count + 2 <= t->nslots)
		return 0;
	return -ENOMEM;
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

/* Whether key falls in the gap the last link or unlink left: after
 * gap[0] (or the head) and not after gap[0]'s successor. Two neighbours
 * are compared, both in cache from that operation. */
static bool in_gap(const struct objtab *t, const uint8_t *key, size_t n)
{
	const struct obj *p = t->gap[0], *next = p ? obj_fwd(p)[0] : t->head[0];
	size_t l;

	return t->gap_level && (!p || obj_cmp_from(p, key, n, 0, &l) < 0) &&
	       (!next || obj_cmp_from(next, key, n, 0, &l) >= 0);
}

/* After a link or unlink: pred[] (update[]'s owners) for every level. */
static void set_gap(struct objtab *t, struct obj *const *pred)
{
	for (int i = 0; i < t->level; i++)
		t->gap[i] = pred[i];
	t->gap_level = t->level;
}

/* The lines a walk reads of o: its fields (cap_rep and level place the
 * links and the key) and the two after them (the links and the key, past
 * the replicas), at once rather than one miss after the other. */
static inline void obj_prefetch(const struct obj *o)
{
	__builtin_prefetch(o);
	__builtin_prefetch((const char *)o + 64);
	__builtin_prefetch((const char *)o + 128);
}

/* Fills update[] with, per level, the link that points at the first
 * object >= key (the head slot or a predecessor's fwd slot), and pred[]
 * with that predecessor (NULL: the head). */
static void find_links(struct objtab *t, const uint8_t *key, size_t n,
		       struct obj ***update, struct obj **pred)
{
	struct obj **links = t->head, *p = NULL;
	const struct obj *stop = NULL;	/* compared >= key one level up */
	size_t lo = 0, hi = 0;		/* common prefix of key with the predecessor, with stop */

	/* next to the last link or unlink (keys put in ascending order within
	 * a prefix, a prefix removed key by key): between two adjacent
	 * objects every level has the same predecessor, the walk's answer
	 * is known. Any link or unlink moves the gap, so it never names a
	 * freed object (objtab_remove and objtab_regrow unlink first). */
	if (in_gap(t, key, n)) {
		for (int i = 0; i < t->level; i++) {
			/* above gap_level: levels link_hash just opened, empty */
			pred[i] = i < t->gap_level ? t->gap[i] : NULL;
			update[i] = pred[i] ? &obj_fwd(pred[i])[i] : &t->head[i];
		}
		t->gap_hits++;
		return;
	}
	/* past the last key (ascending keys: counters, times): the tails are
	 * the predecessors, one comparison instead of a walk from the top */
	if (t->tail[0] && obj_cmp_from(t->tail[0], key, n, 0, &lo) < 0) {
		for (int i = 0; i < t->level; i++) {
			pred[i] = t->tail[i];
			update[i] = pred[i] ? &obj_fwd(pred[i])[i] : &t->head[i];
		}
		return;
	}
	lo = 0;
	for (int i = t->level - 1; i >= 0; i--) {
		/* the object that ended the walk a level up often ends this
		 * one too: it is known to be >= key, no need to compare again */
		while (links[i] && links[i] != stop) {
			size_t l;
			obj_prefetch(links[i]);
			if (i && links[i - 1] != links[i])
				obj_prefetch(links[i - 1]);
			/* everything between the predecessor and stop shares
			 * the shorter of their prefixes with key */
			if (obj_cmp_from(links[i], key, n, lo < hi ? lo : hi, &l) >= 0) {
				hi = l;
				break;
			}
			lo = l;
			p = links[i];
			links = obj_fwd(p);
		}
		stop = links[i];
		update[i] = &links[i];
		pred[i] = p;
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
	if ((uintptr_t)o & ~OBJTAB_SLOT_PTR) {	/* no room for the tag (objtab.h) */
		free(o);
		return NULL;
	}
	memset(o, 0, sizeof(*o));
	o->hash = h;
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
	struct obj **update[OBJTAB_MAX_LEVEL], *pred[OBJTAB_MAX_LEVEL];
	int lvl = o->level;

	if (lvl > t->level) {
		for (int i = t->level; i < lvl; i++)
			t->head[i] = t->tail[i] = NULL;
		t->level = lvl;
	}
	find_links(t, obj_key(o), o->key_len, update, pred);
	struct obj **fwd = obj_fwd(o);
	for (int i = 0; i < lvl; i++) {
		fwd[i] = *update[i];
		*update[i] = o;
		if (!fwd[i])
			t->tail[i] = o;
	}

	/* the gap after o: o is the predecessor on its levels */
	for (int i = 0; i < lvl; i++)
		pred[i] = o;
	set_gap(t, pred);

	o->hash = h;
	slot_put(t->slots, t->nslots - 1, o, h);
	t->count++;
}

struct obj *objtab_insert(struct objtab *t, const uint8_t *key, size_t n, unsigned cap_rep)
{
	return objtab_insert_hash(t, key, n, objtab_hash(key, n), cap_rep);
}

struct obj *objtab_insert_hash(struct objtab *t, const uint8_t *key, size_t n, uint32_t h,
			       unsigned cap_rep)
{
	if (objtab_reserve(t))
		return NULL;
	struct obj *o = objtab_new_hash(t, key, n, h, cap_rep);

	if (o)
		link_hash(t, o, h);
	return o;
}

/* Replaces o by repl (same key) in the slot array and the skip list. */
static void relink(struct objtab *t, struct obj *o, struct obj *repl)
{
	size_t si = slot_of(t, o);

	if (repl) {
		repl->hash = o->hash;
		t->slots[si] = (uint64_t)(uintptr_t)repl | (t->slots[si] & ~OBJTAB_SLOT_PTR);
	} else {
		slot_clear(t, si);
	}

	struct obj **update[OBJTAB_MAX_LEVEL], *pred[OBJTAB_MAX_LEVEL];
	find_links(t, obj_key(o), o->key_len, update, pred);
	struct obj **fwd = obj_fwd(o);
	for (int i = 0; i < o->level; i++) {
		*update[i] = repl ? repl : fwd[i];
		if (t->tail[i] == o)
			t->tail[i] = repl ? repl : pred[i];
	}
	if (!repl)
		while (t->level > 1 && !t->head[t->level - 1])
			t->level--;
	set_gap(t, pred);	/* the gap before repl, or where o was */
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
	size_t lo = 0, hi = 0;		/* common prefixes as in find_links */

	for (int i = t->level - 1; i >= 0; i--) {
		while (links[i] && links[i] != stop) {
			size_t l;
			int c = obj_cmp_from(links[i], key, n, lo < hi ? lo : hi, &l);
			if (c > 0 || (c == 0 && !after)) {
				hi = l;
				break;
			}
			lo = l;
			links = obj_fwd(links[i]);
		}
		stop = links[i];
	}
	return links[0];
}

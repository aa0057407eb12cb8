/* objtab: the master's objects by key (an open-addressing hash table of
 * tagged pointers) and in key order (the B+tree of keyidx.c); see objtab.h. */
#include "objtab.h"
#include "prefault.h"
#include "radix.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <sanitizer/asan_interface.h>
#include <xxhash.h>

#define OBJTAB_MIN_SLOTS 1024
#define GROW_AHEAD 8		/* slots whose objects are prefetched ahead while rehashing */
#define KXP_AHEAD 8		/* waiting objects prefetched ahead while they settle */
#define KXP_MERGE_MIN 1024	/* fewer waiting objects go in one by one */

#define HUGE_SIZE (2u << 20)	/* a transparent huge page (x86-64, arm64 with 4 KiB pages) */

static struct obj *slot_obj(uint64_t s);

static size_t slot_next(const struct objtab *t, size_t i)
{
	return ++i == t->nslots ? 0 : i;
}

void *objtab_big_alloc(size_t size, bool zero)
{
	if (size < HUGE_SIZE)
		return zero ? calloc(1, size) : malloc(size);
	size = (size + HUGE_SIZE - 1) & ~(size_t)(HUGE_SIZE - 1);
	void *p = aligned_alloc(HUGE_SIZE, size);

	if (p) {
		madvise(p, size, MADV_HUGEPAGE);	/* a hint: ignore a refusal */
		if (zero)
			memset(p, 0, size);
	}
	return p;
}

int objtab_init(struct objtab *t)
{
	memset(t, 0, sizeof(*t));
	t->nslots = OBJTAB_MIN_SLOTS;
	t->slots = calloc(t->nslots, sizeof(*t->slots));
	if (!t->slots)
		return -1;
	if (kx_init(&t->idx)) {
		free(t->slots);
		t->slots = NULL;
		return -1;
	}
	return 0;
}

void objtab_destroy(struct objtab *t)
{
	for (void *c = t->slab.chunks, *next; c; c = next) {
		next = *(void **)c;
		if (!t->slab.pf || !prefault_owns(t->slab.pf, c))
			free(c);
	}
	prefault_free(t->slab.pf);
	kx_destroy(&t->idx);
	free(t->kxp);
	free(t->slots);
	free(t->links.v);
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

	for (size_t i = objtab_home(t, h);; i = slot_next(t, i)) {	/* ends: a slot is always empty */
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

bool objtab_past_last(const struct objtab *t, const uint8_t *key, size_t n)
{
	const struct obj *o = kx_last(&t->idx);

	return !o || objtab_keycmp(obj_key(o), o->key_len, key, n) < 0;
}

struct obj *objtab_find_hg(const struct objtab *t, uint32_t h, uint32_t gen32)
{
	uint64_t tag = objtab_slot_tag(h);

	for (size_t i = objtab_home(t, h);; i = slot_next(t, i)) {
		uint64_t s = t->slots[i];
		if (!s)
			return NULL;
		if ((s & ~OBJTAB_SLOT_PTR) == tag) {
			const struct obj *o = slot_obj(s);
			if (o->hash == h && (uint32_t)o->generation == gen32)
				return (struct obj *)o;
		}
	}
}

/* Puts o (hash h) into the first empty slot from its home in slots[nb]. */
static void slot_put(uint64_t *slots, size_t nb, struct obj *o, uint32_t h)
{
	size_t i = objtab_slot_home(nb, h);

	while (slots[i])
		if (++i == nb)
			i = 0;
	slots[i] = (uint64_t)(uintptr_t)o | objtab_slot_tag(h);
}

/* The slot that holds o. */
static size_t slot_of(const struct objtab *t, const struct obj *o)
{
	size_t i = objtab_home(t, o->hash);

	while (slot_obj(t->slots[i]) != o)
		i = slot_next(t, i);
	return i;
}

/* How far slot j lies past slot i, going forward around the array. */
static size_t slot_dist(const struct objtab *t, size_t i, size_t j)
{
	return j >= i ? j - i : j + t->nslots - i;
}

/* Empties slot i and moves later entries of its run back into the hole
 * when their home allows (backward-shift deletion: no tombstones, so
 * probes stay as short as the load makes them). Reads the moved objects'
 * hashes: a run is a few slots at 3/4 full. */
static void slot_clear(struct objtab *t, size_t i)
{
	for (size_t j = slot_next(t, i); t->slots[j]; j = slot_next(t, j)) {
		size_t home = objtab_home(t, slot_obj(t->slots[j])->hash);
		/* j's entry may fill the hole at i unless its home lies
		 * cyclically in (i, j] */
		if (slot_dist(t, home, j) >= slot_dist(t, i, j)) {
			t->slots[i] = t->slots[j];
			i = j;
		}
	}
	t->slots[i] = 0;
}

/* The size after nslots: 1.5 times, so that the slots take 10.7-16 B per
 * object at 3/4 full at most (doubling: 10.7-21.3 B). 0 past what a
 * 32-bit hash can spread over (objtab_home). */
static size_t grow_size(size_t nslots)
{
	size_t nb = nslots + nslots / 2;

	return nb <= UINT32_MAX ? nb : 0;
}

/* Moves the slots into an array of nb. Every object is read (its hash):
 * prefetch a few slots ahead, or the pass waits on one miss per object.
 * The homes keep the hashes' order at any size, so the new array is
 * written front to back. */
static int objtab_resize(struct objtab *t, size_t nb)
{
	uint64_t *b = nb ? objtab_big_alloc(nb * sizeof(*b), true) : NULL;

	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < t->nslots; i++) {
		if (i + GROW_AHEAD < t->nslots && t->slots[i + GROW_AHEAD])
			__builtin_prefetch(slot_obj(t->slots[i + GROW_AHEAD]));
		if (t->slots[i]) {
			struct obj *o = slot_obj(t->slots[i]);
			slot_put(b, nb, o, o->hash);
		}
	}
	free(t->slots);
	t->slots = b;
	t->nslots = nb;
	return 0;
}

int objtab_reserve(struct objtab *t)
{
	if (kx_reserve(&t->idx))
		return -ENOMEM;
	if ((t->count + 1) * 4 <= t->nslots * 3)
		return 0;
	/* past 3/4 a failed resize only lengthens probes, until one slot
	 * would be left: the last must stay empty for probes to end */
	if (objtab_resize(t, grow_size(t->nslots)) == 0 || t->count + 2 <= t->nslots)
		return 0;
	return -ENOMEM;
}

int objtab_presize(struct objtab *t, size_t n)
{
	size_t nb = t->nslots;

	/* the size the inserts would have grown to, reached in one step:
	 * each growth would allocate and zero its own array */
	while (nb && (n + 1) * 4 > nb * 3)
		nb = grow_size(nb);
	if (nb == t->nslots)
		return 0;
	return objtab_resize(t, nb) ? -ENOMEM : 0;
}

/* The helper runs this far ahead of the chunks taken: two of the largest. */
#define PREFAULT_AHEAD ((size_t)64 << 20)

void objtab_prefault_begin(struct objtab *t, size_t bytes)
{
	if (!t->slab.pf && bytes >= HUGE_SIZE)
		t->slab.pf = prefault_start(bytes, PREFAULT_AHEAD);
}

void objtab_prefault_end(struct objtab *t)
{
	if (t->slab.pf)
		prefault_stop(t->slab.pf);
}

static void link_hash(struct objtab *t, struct obj *o, uint32_t h);

const struct obj_links objtab_nolinks;

static size_t links_home(const struct objlinks *lm, const struct obj *o)
{
	uint64_t x = (uint64_t)(uintptr_t)o >> 4;

	return (size_t)((x * 0x9e3779b97f4a7c15ull) >> 32) & (lm->cap - 1);
}

/* The entry of o, or the empty one where it would go. */
static struct objlink_ent *links_slot(const struct objlinks *lm, const struct obj *o)
{
	size_t i = links_home(lm, o);

	while (lm->v[i].o && lm->v[i].o != o)
		i = (i + 1) & (lm->cap - 1);
	return &lm->v[i];
}

static int links_grow(struct objlinks *lm)
{
	struct objlinks nl = { .cap = lm->cap ? lm->cap * 2 : 64, .n = lm->n };

	nl.v = calloc(nl.cap, sizeof(*nl.v));
	if (!nl.v)
		return -ENOMEM;
	for (size_t i = 0; i < lm->cap; i++)
		if (lm->v[i].o)
			*links_slot(&nl, lm->v[i].o) = lm->v[i];
	free(lm->v);
	*lm = nl;
	return 0;
}

struct obj_links *objtab_links_find(const struct objlinks *lm, const struct obj *o)
{
	return &links_slot(lm, o)->l;
}

struct obj_links *objtab_links_get(struct objtab *t, struct obj *o)
{
	struct objlinks *lm = &t->links;

	if (o->linked)
		return objtab_links_find(lm, o);
	if ((lm->n + 1) * 2 > lm->cap && links_grow(lm))
		return NULL;
	struct objlink_ent *e = links_slot(lm, o);

	e->o = o;
	e->l = objtab_nolinks;
	lm->n++;
	o->linked = 1;
	return &e->l;
}

/* Backward-shift deletion: no tombstones. */
static void links_del(struct objlinks *lm, struct objlink_ent *e)
{
	size_t mask = lm->cap - 1, i = (size_t)(e - lm->v), j = i;

	for (;;) {
		j = (j + 1) & mask;
		if (!lm->v[j].o)
			break;
		size_t h = links_home(lm, lm->v[j].o);

		/* v[j] may move to i if its home is not in (i, j] cyclically */
		if (((j - h) & mask) >= ((j - i) & mask)) {
			lm->v[i] = lm->v[j];
			i = j;
		}
	}
	lm->v[i].o = NULL;
	lm->n--;
}

static void links_forget(struct objtab *t, struct obj *o)
{
	if (!o->linked)
		return;
	links_del(&t->links, links_slot(&t->links, o));
	o->linked = 0;
	o->flags &= (uint8_t)~OBJ_PINNED;
}

void objtab_links_drop(struct objtab *t, struct obj *o)
{
	if (!o->linked)
		return;
	if (o->flags & OBJ_PINNED) {
		struct obj_links *l = objtab_links_find(&t->links, o);

		*l = (struct obj_links){ .pin_s = l->pin_s };
		return;
	}
	links_forget(t, o);
}

int objtab_set_pin(struct objtab *t, struct obj *o, uint32_t pin_s)
{
	struct obj_links *l;

	if (!pin_s && !(o->flags & OBJ_PINNED))
		return 0;
	l = objtab_links_get(t, o);
	if (!l)
		return -ENOMEM;
	l->pin_s = pin_s;
	if (pin_s) {
		o->flags |= OBJ_PINNED;
	} else {
		o->flags &= (uint8_t)~OBJ_PINNED;
		if (!l->nchild && !l->nchild_mem && !o->chained)
			links_forget(t, o);
	}
	return 0;
}

/* o moved to n (objtab_regrow): its entry follows. Cannot fail: one
 * entry out, one in. */
static void links_rekey(struct objlinks *lm, const struct obj *o, const struct obj *n)
{
	struct objlink_ent *e = links_slot(lm, o);
	struct obj_links l = e->l;

	links_del(lm, e);
	e = links_slot(lm, n);
	e->o = n;
	e->l = l;
	lm->n++;
}

static size_t obj_alloc_size(size_t key_len, unsigned cap_rep)
{
	return obj_rep_off(key_len) + cap_rep * sizeof(struct rep);
}

#define SLAB_MIN_SHIFT 12
/* a class's chunks double up to 32 MiB, huge-page aligned from 2 MiB: each
 * aligned allocation costs glibc's rounding and remainders, so 2 MiB
 * chunks cost ~1.6 B per object at 3M (b_ha_meta -c: 149.7 against 148.1
 * B), for no faster load */
#define SLAB_MAX_SHIFT 25
#define SLAB_HDR 16		/* a chunk's link, keeping blocks 16-aligned */

/* A block of size bytes from its class (ASan: poisoned while free, and
 * past size to the class's rounding). */
static struct obj *slab_alloc(struct objslab *sl, size_t size)
{
	struct objslab_class *c = &sl->cls[(size + 7) / 8];
	size_t bsize = (size + 7) & ~(size_t)7;
	void *o = c->free;

	if (o) {
		ASAN_UNPOISON_MEMORY_REGION(o, sizeof(void *));
		c->free = *(void **)o;
	} else {
		if ((size_t)(c->end - c->cur) < bsize) {
			unsigned sh = c->chunk_shift ? c->chunk_shift : SLAB_MIN_SHIFT;
			char *ch = NULL;

			if (sl->pf && ((size_t)1 << sh) >= HUGE_SIZE)
				ch = prefault_take(sl->pf, (size_t)1 << sh);
			if (!ch)
				ch = objtab_big_alloc((size_t)1 << sh, false);
			/* no room for the slot's tag above the address (objtab.h) */
			if (!ch || ((uintptr_t)ch + ((size_t)1 << sh)) & ~OBJTAB_SLOT_PTR) {
				if (!sl->pf || !prefault_owns(sl->pf, ch))
					free(ch);
				return NULL;
			}
			*(void **)ch = sl->chunks;
			sl->chunks = ch;
			sl->chunk_bytes += (size_t)1 << sh;
			c->cur = ch + SLAB_HDR;
			c->end = ch + ((size_t)1 << sh);
			ASAN_POISON_MEMORY_REGION(c->cur, (size_t)(c->end - c->cur));
			if (sh < SLAB_MAX_SHIFT)
				c->chunk_shift = (uint8_t)(sh + 1);
		}
		o = c->cur;
		c->cur += bsize;
	}
	ASAN_UNPOISON_MEMORY_REGION(o, size);
	return o;
}

static void slab_free(struct objslab *sl, void *o, size_t size)
{
	struct objslab_class *c = &sl->cls[(size + 7) / 8];

	ASAN_UNPOISON_MEMORY_REGION(o, sizeof(void *));
	*(void **)o = c->free;
	c->free = o;
	ASAN_POISON_MEMORY_REGION(o, (size + 7) & ~(size_t)7);
}

void objtab_free(struct objtab *t, struct obj *o)
{
	links_forget(t, o);
	slab_free(&t->slab, o, obj_alloc_size(o->key_len, o->cap_rep));
}

struct obj *objtab_new(struct objtab *t, const uint8_t *key, size_t n, unsigned cap_rep)
{
	return objtab_new_hash(t, key, n, objtab_hash(key, n), cap_rep);
}

struct obj *objtab_new_hash(struct objtab *t, const uint8_t *key, size_t n, uint32_t h,
			    unsigned cap_rep)
{
	struct obj *o = slab_alloc(&t->slab, obj_alloc_size(n, cap_rep));

	if (!o)
		return NULL;
	memset(o, 0, OBJ_KEY_OFF);
	o->hash = h;
	o->slot = OBJ_NOSLOT;
	o->key_len = (uint16_t)n;
	o->cap_rep = (uint8_t)cap_rep;
	memcpy((uint8_t *)obj_key(o), key, n);
	return o;
}

void objtab_link(struct objtab *t, struct obj *o)
{
	link_hash(t, o, objtab_hash(obj_key(o), o->key_len));
}

/* o waits for the key index (objtab_kx_defer): 0, or -1 out of memory. */
static int kxp_push(struct objtab *t, struct obj *o)
{
	if (t->nkxp == t->capkxp) {
		size_t cap = t->capkxp ? t->capkxp * 2 : 4096;
		struct objtab_kxp *v = realloc(t->kxp, cap * sizeof(*v));

		if (!v)
			return -1;
		t->kxp = v;
		t->capkxp = cap;
	}
	/* the prefix shared with the first, while o's key is in cache (the
	 * sort would read every key once more for it); the first's stays in
	 * cache. Removals leave it a prefix they all share. */
	if (!t->nkxp) {
		t->kxp_lcp = o->key_len;
	} else {
		const struct obj *f = t->kxp[0].o;
		size_t l = 0, max = t->kxp_lcp < f->key_len ? t->kxp_lcp : f->key_len;

		if (max > o->key_len)
			max = o->key_len;
		while (l < max && obj_key(o)[l] == obj_key(f)[l])
			l++;
		t->kxp_lcp = l;
	}
	t->kxp[t->nkxp++].o = o;
	o->flags |= OBJ_KXWAIT;
	return 0;
}

/* objtab_link with the key's hash already computed. */
static void link_hash(struct objtab *t, struct obj *o, uint32_t h)
{
	if (!t->kx_defer || objtab_past_last(t, obj_key(o), o->key_len) || kxp_push(t, o))
		kx_insert(&t->idx, o);
	o->hash = h;
	slot_put(t->slots, t->nslots, o, h);
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

/* Replaces o by repl (same key) in the slot array and the key index, or
 * takes it out of both. A waiting o settles first; without memory for
 * that it is replaced or taken out where it waits. */
static void relink(struct objtab *t, struct obj *o, struct obj *repl)
{
	size_t si = slot_of(t, o);

	if (o->flags & OBJ_KXWAIT)
		(void)objtab_kx_settle(t);
	bool waits = o->flags & OBJ_KXWAIT;

	if (repl) {
		repl->hash = o->hash;
		t->slots[si] = (uint64_t)(uintptr_t)repl | (t->slots[si] & ~OBJTAB_SLOT_PTR);
	} else {
		slot_clear(t, si);
	}
	if (!waits) {
		if (repl) {
			repl->flags &= ~(uint64_t)OBJ_KXWAIT;	/* a copy of o's, from before */
			kx_replace(&t->idx, o, repl);
		} else {
			kx_remove(&t->idx, o);
		}
		return;
	}
	size_t i = 0;

	while (t->kxp[i].o != o)
		i++;
	if (repl)
		t->kxp[i].o = repl;	/* its flags are o's: it waits */
	else
		t->kxp[i] = t->kxp[--t->nkxp];
	o->flags &= ~(uint64_t)OBJ_KXWAIT;
}

static int kxp_cmp(const void *a, const void *b)
{
	uint64_t x = ((const struct objtab_kxp *)a)->k, y = ((const struct objtab_kxp *)b)->k;

	return x < y ? -1 : x > y;
}

static int kxp_keycmp(const void *a, const void *b)
{
	const struct obj *x = ((const struct objtab_kxp *)a)->o, *y = ((const struct objtab_kxp *)b)->o;

	return objtab_keycmp(obj_key(x), x->key_len, obj_key(y), y->key_len);
}

/* Sorts the waiting objects by key: by the 8 bytes past the prefix they
 * all share (one pass over their keys, which lie in the slab in insert
 * order), radix-sorted, then runs of equal bytes by whole keys. unmark:
 * their OBJ_KXWAIT goes in the same pass (the flags share the key's line). */
static void kxp_sort(struct objtab *t, bool unmark)
{
	size_t n = t->nkxp;

	for (size_t i = 0; i < n; i++) {
		struct obj *o = t->kxp[i].o;
		if (i + KXP_AHEAD < n) {
			__builtin_prefetch(t->kxp[i + KXP_AHEAD].o);
			__builtin_prefetch((const char *)t->kxp[i + KXP_AHEAD].o + 64);
		}
		t->kxp[i].k = kx_head_at(obj_key(o), o->key_len, t->kxp_lcp);
		if (unmark)
			o->flags &= ~(uint64_t)OBJ_KXWAIT;
	}
	radix_sort(t->kxp, n, sizeof(*t->kxp), 0, kxp_cmp, NULL);
	for (size_t i = 0, j; i < n; i = j) {
		for (j = i + 1; j < n && t->kxp[j].k == t->kxp[i].k; j++)
			;
		if (j - i > 1)
			qsort(t->kxp + i, j - i, sizeof(*t->kxp), kxp_keycmp);
	}
}

int objtab_kx_settle(struct objtab *t)
{
	size_t i = 0;

	if (!t->nkxp)
		return 0;
	/* a batch a sixteenth of the index or more: one pass that rebuilds
	 * the index beats a descent each (out of memory: one by one) */
	bool merge = t->nkxp >= KXP_MERGE_MIN && t->nkxp * 16 >= t->idx.count;

	kxp_sort(t, merge);
	if (merge && !kx_merge(&t->idx, &t->kxp[0].o, t->nkxp, sizeof(*t->kxp)))
		i = t->nkxp;
	else if (merge)
		for (size_t j = 0; j < t->nkxp; j++)
			t->kxp[j].o->flags |= OBJ_KXWAIT;
	for (; i < t->nkxp; i++) {
		/* in key order the objects lie anywhere in the slab: ask for
		 * their fields and keys ahead (an insert reads the key) */
		if (i + KXP_AHEAD < t->nkxp) {
			__builtin_prefetch(t->kxp[i + KXP_AHEAD].o);
			__builtin_prefetch((const char *)t->kxp[i + KXP_AHEAD].o + 64);
		}
		if (kx_reserve(&t->idx))
			break;
		t->kxp[i].o->flags &= ~(uint64_t)OBJ_KXWAIT;
		kx_insert(&t->idx, t->kxp[i].o);
	}
	if (i < t->nkxp) {	/* out of memory: the rest wait on */
		memmove(t->kxp, t->kxp + i, (t->nkxp - i) * sizeof(*t->kxp));
		t->nkxp -= i;
		return -ENOMEM;
	}
	free(t->kxp);
	t->kxp = NULL;
	t->nkxp = t->capkxp = 0;
	return 0;
}

int objtab_kx_defer(struct objtab *t, bool on)
{
	t->kx_defer = on;
	return on ? 0 : objtab_kx_settle(t);
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
	objtab_free(t, o);
}

struct obj *objtab_regrow(struct objtab *t, struct obj *o, unsigned cap_rep)
{
	struct obj *n = slab_alloc(&t->slab, obj_alloc_size(o->key_len, cap_rep));

	if (!n)
		return NULL;
	/* the fields and the key, then the replicas in use */
	memcpy(n, o, OBJ_KEY_OFF + o->key_len);
	n->cap_rep = (uint8_t)cap_rep;
	memcpy(obj_rep(n), obj_rep(o), o->nrep * sizeof(struct rep));
	relink(t, o, n);
	if (o->linked)
		links_rekey(&t->links, o, n);
	o->linked = 0;		/* the entry is n's now */
	objtab_free(t, o);
	return n;
}

struct obj *objtab_seek(struct objtab *t, const uint8_t *key, size_t n, bool after)
{
	(void)objtab_kx_settle(t);	/* out of memory: the walk misses those waiting */
	return kx_seek(&t->idx, key, n, after);
}

struct obj *objtab_next(struct objtab *t, const struct obj *o)
{
	(void)objtab_kx_settle(t);
	return kx_next(&t->idx, o);
}

/* t_objtab: the master's object table against a sorted model. Inserts
 * enough keys to grow the slot array several times, removes a random part
 * (backward-shift deletion moving entries of long runs, across the array's
 * wrap-around too), inserts again, and after each phase checks that
 * every present key is found (with its hashed and unhashed lookups), no
 * absent key is, the count is right, a walk (objtab_seek, objtab_next)
 * gives every key in byte order, the key index's own invariants hold
 * (kx_check: order, fences, heads and hints, the leaf chain, the count),
 * and objtab_seek() agrees with the model for keys present, absent, before
 * the first and after the last; then the last keys put back in ascending
 * order (appended) and removed from the end; a run in the middle removed
 * while walking it (as REMOVE_PREFIX does), put back in ascending and in
 * descending order, and regrown in its middle; random links, unlinks and
 * regrowths of 5,000 keys, in runs and at random, so that leaves split,
 * empty and go and the tree grows and shrinks, then emptied to one leaf;
 * the link map (chain links kept aside) against an array: links made,
 * changed, dropped at random, objects regrown and removed with theirs;
 * soft pins in the same side map (kept when the chain links go, moved by a
 * regrowth, gone with the object or the unpin); slab blocks reused by
 * their size class; the slot array with chosen hashes (heavy collisions,
 * runs wrapping around its end, sizes that are not powers of two)
 * against an array; the key order itself against memcmp; and a bulk
 * load's deferred key-index inserts (objtab_kx_defer) with a waiting
 * object regrown and one removed before they settle.
 * SEED=n reproduces a run; N=n changes the number of keys.
 */
#include "objtab_model.h"

/* Keys of 1-70 bytes; a common prefix and zero padding for some, as real
 * key schemes have (long equal prefixes are what the key index must tell apart). */
static void make_key(struct mkey *m, size_t i)
{
	switch (i % 3) {
	case 0:
		m->n = (size_t)snprintf(m->k, sizeof(m->k), "model/layer%02zu/%040zu", i % 7, i);
		break;
	case 1:
		m->n = (size_t)snprintf(m->k, sizeof(m->k), "%zx", i * 2654435761u);
		break;
	default:
		m->n = (size_t)snprintf(m->k, sizeof(m->k), "k%zu-%llu", i,
					(unsigned long long)(rnd() % 1000));
		break;
	}
}

/* First model key >= k (> k when after) among the present ones; NULL at
 * the end. The model is sorted. */
static const struct mkey *model_seek(const struct mkey *v, size_t n, const char *k, size_t kn,
				     bool after)
{
	size_t lo = 0, hi = n;	/* first index whose key is >= k (> k when after) */

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = objtab_keycmp((const uint8_t *)v[mid].k, v[mid].n, (const uint8_t *)k, kn);
		if (c > 0 || (c == 0 && !after))
			hi = mid;
		else
			lo = mid + 1;
	}
	while (lo < n && !v[lo].in)
		lo++;
	return lo < n ? &v[lo] : NULL;
}

static void check_seek(struct objtab *t, const struct mkey *v, size_t n, const char *k,
		       size_t kn, bool after)
{
	const struct mkey *want = model_seek(v, n, k, kn, after);
	struct obj *o = objtab_seek(t, (const uint8_t *)k, kn, after);

	REQUIRE(!want == !o, "seek '%.*s' after=%d: %s", (int)kn, k, after,
	      o ? "found one too many" : "found none");
	if (o)
		REQUIRE(o->key_len == want->n && memcmp(obj_key(o), want->k, want->n) == 0,
		      "seek '%.*s' after=%d: '%.*s', want '%s'", (int)kn, k, after,
		      (int)o->key_len, (const char *)obj_key(o), want->k);
}

static void check_all(struct objtab *t, const struct mkey *v, size_t n)
{
	size_t present = 0;

	for (size_t i = 0; i < n; i++) {
		const uint8_t *k = (const uint8_t *)v[i].k;
		struct obj *o = objtab_find(t, k, v[i].n);
		REQUIRE(o == objtab_find_hash(t, k, v[i].n, objtab_hash(k, v[i].n)),
		      "find and find_hash differ for '%s'", v[i].k);
		if (v[i].in) {
			present++;
			REQUIRE(o && o->key_len == v[i].n && memcmp(obj_key(o), k, v[i].n) == 0,
			      "'%s' not found", v[i].k);
		} else {
			REQUIRE(!o, "'%s' found after its removal", v[i].k);
		}
	}
	REQUIRE(t->count == present, "count %zu, want %zu", t->count, present);

	/* the walk: every present key once, in the model's order */
	struct obj *o = objtab_seek(t, (const uint8_t *)"", 0, false);
	for (size_t i = 0; i < n; i++) {
		if (!v[i].in)
			continue;
		REQUIRE(o, "list ends before '%s'", v[i].k);
		REQUIRE(o->key_len == v[i].n && memcmp(obj_key(o), v[i].k, v[i].n) == 0,
		      "list has '%.*s' where '%s' belongs", (int)o->key_len,
		      (const char *)obj_key(o), v[i].k);
		o = objtab_next(t, o);
	}
	REQUIRE(!o, "list longer than the model");
	check_tree(t);

	/* seek: present, absent, a prefix of a key, past the end */
	for (int s = 0; s < 20000; s++) {
		const struct mkey *m = &v[rnd() % n];
		check_seek(t, v, n, m->k, m->n, false);
		check_seek(t, v, n, m->k, m->n, true);
		check_seek(t, v, n, m->k, m->n > 1 ? m->n - 1 : m->n, false);
	}
	check_seek(t, v, n, "\xff\xff", 2, false);
	check_seek(t, v, n, "", 0, true);
}

/* A run v[from, to) in the middle: removed while walked (as a prefix
 * removal does), back in ascending order, out again, back in descending
 * order, one regrown in the middle. */
static void check_run(struct objtab *t, struct mkey *v, size_t n, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (!v[i].in) {
			REQUIRE(objtab_insert(t, (const uint8_t *)v[i].k, v[i].n, 1), "insert oom");
			v[i].in = true;
		}
	/* removed while walking, as REMOVE_PREFIX does */
	struct obj *w = objtab_seek(t, (const uint8_t *)v[from].k, v[from].n, false);
	for (size_t i = from; i < to; i++) {
		REQUIRE(w && w->key_len == v[i].n && memcmp(obj_key(w), v[i].k, v[i].n) == 0,
			"walk while removing: not at '%s'", v[i].k);
		struct obj *next = objtab_next(t, w);
		objtab_remove(t, w);
		v[i].in = false;
		w = next;
	}
	check_all(t, v, n);
	for (size_t i = from; i < to; i++) {
		REQUIRE(objtab_insert(t, (const uint8_t *)v[i].k, v[i].n, 1), "insert oom");
		v[i].in = true;
	}
	check_all(t, v, n);
	for (size_t i = from; i < to; i++) {
		objtab_remove(t, objtab_find(t, (const uint8_t *)v[i].k, v[i].n));
		v[i].in = false;
	}
	for (size_t i = to; i > from; i--) {
		REQUIRE(objtab_insert(t, (const uint8_t *)v[i - 1].k, v[i - 1].n, 1), "insert oom");
		v[i - 1].in = true;
	}
	size_t mid = from + (to - from) / 2;
	struct obj *o = objtab_find(t, (const uint8_t *)v[mid].k, v[mid].n);
	REQUIRE(o && objtab_regrow(t, o, 3), "regrow");
	for (size_t i = mid + 1; i < to; i++) {	/* right after the regrown one */
		objtab_remove(t, objtab_find(t, (const uint8_t *)v[i].k, v[i].n));
		v[i].in = false;
	}
	check_all(t, v, n);
}

/* Random links, unlinks and regrowths on a table of some thousand keys,
 * in runs and at random, so that leaves split, empty and go and the tree
 * grows and shrinks; its order and invariants every few steps. */
static void check_churn(struct mkey *v, size_t n, int ops)
{
	struct objtab t;

	REQUIRE(objtab_init(&t) == 0, "init");
	for (size_t i = 0; i < n; i++)
		v[i].in = false;
	size_t i = 0;

	for (int s = 0; s < ops; s++) {
		unsigned what = (unsigned)(rnd() % 8);

		/* runs: often the key after the last one, else a random one */
		i = what < 4 ? (i + 1) % n : rnd() % n;
		struct obj *o = objtab_find(&t, (const uint8_t *)v[i].k, v[i].n);

		REQUIRE(!o == !v[i].in, "'%s': table and model differ", v[i].k);
		if (!o) {
			REQUIRE(objtab_insert(&t, (const uint8_t *)v[i].k, v[i].n, 1), "oom");
			v[i].in = true;
		} else if (what == 7) {
			REQUIRE(objtab_regrow(&t, o, 1 + (unsigned)(rnd() % 3)), "regrow");
		} else {
			objtab_remove(&t, o);
			v[i].in = false;
		}
		if (s % 97 == 0)
			check_order(&t, v, n);
	}
	check_order(&t, v, n);
	/* empty it in order, then from the end: the tree back to one leaf */
	for (size_t k = 0; k < n; k++) {
		struct obj *o = objtab_find(&t, (const uint8_t *)v[k].k, v[k].n);
		if (o && (k % 2 == 0)) {
			objtab_remove(&t, o);
			v[k].in = false;
		}
	}
	check_order(&t, v, n);
	for (size_t k = n; k > 0; k--) {
		struct obj *o = objtab_find(&t, (const uint8_t *)v[k - 1].k, v[k - 1].n);
		if (o) {
			objtab_remove(&t, o);
			v[k - 1].in = false;
		}
	}
	check_order(&t, v, n);
	REQUIRE(t.idx.height == 1 && t.count == 0, "emptied: height %d, count %zu", t.idx.height,
		t.count);
	objtab_destroy(&t);
}

static int sign(int x)
{
	return (x > 0) - (x < 0);
}

/* objtab_keycmp against memcmp on pairs that differ at every position of
 * every length 0-40 (the word loop, the byte tail, equal prefixes, bytes
 * above 0x7f). */
static void check_keycmp(void)
{
	uint8_t a[48], b[48];

	for (size_t an = 0; an <= 40; an++)
		for (size_t bn = 0; bn <= 40; bn++)
			for (size_t d = 0; d <= 40; d++) {
				for (size_t i = 0; i < sizeof(a); i++)
					a[i] = b[i] = (uint8_t)(rnd() | 0x80);
				if (d < sizeof(a))
					b[d] = (uint8_t)(a[d] ^ (1u << (rnd() % 8)));
				size_t n = an < bn ? an : bn;
				int want = sign(memcmp(a, b, n));
				if (!want)
					want = an < bn ? -1 : an > bn;
				int got = sign(objtab_keycmp(a, an, b, bn));
				REQUIRE(got == want, "keycmp an=%zu bn=%zu d=%zu: %d, want %d", an,
					bn, d, got, want);
				REQUIRE(sign(objtab_keycmp(b, bn, a, an)) == -want,
				      "keycmp not antisymmetric");
			}
}

/* The link map: each object's links (pgen = its index + 1) must follow it
 * through regrowths and leave with it. */
static void check_links(size_t n)
{
	struct objtab t;
	struct obj **o = calloc(n, sizeof(*o));
	char k[32];

	REQUIRE(o && objtab_init(&t) == 0, "oom");
	for (size_t i = 0; i < n; i++) {
		int kn = snprintf(k, sizeof(k), "link%zu", i);

		o[i] = objtab_insert(&t, (const uint8_t *)k, (size_t)kn, 1);
		REQUIRE(o[i], "insert oom");
	}
	for (size_t round = 0; round < 20 * n; round++) {
		size_t i = rnd() % n;

		switch (rnd() % 5) {
		case 0:
		case 1: {
			struct obj_links *l = objtab_links_get(&t, o[i]);

			REQUIRE(l, "links oom");
			l->pgen = (uint32_t)i + 1;
			l->nchild++;
			break;
		}
		case 2:
			objtab_links_drop(&t, o[i]);
			break;
		case 3:
			o[i] = objtab_regrow(&t, o[i], 1 + (unsigned)(rnd() % 3));
			REQUIRE(o[i], "regrow oom");
			break;
		default:
			if (rnd() % 8 == 0) {
				int kn = snprintf(k, sizeof(k), "link%zu", i);

				objtab_remove(&t, o[i]);
				o[i] = objtab_insert(&t, (const uint8_t *)k, (size_t)kn, 1);
				REQUIRE(o[i], "insert oom");
			}
			break;
		}
	}
	size_t nl = 0;
	for (size_t i = 0; i < n; i++) {
		const struct obj_links *l = objtab_links(&t, o[i]);

		if (o[i]->linked) {
			nl++;
			REQUIRE(l->pgen == i + 1 && l->nchild > 0, "links of %zu lost: pgen %u", i,
				l->pgen);
		} else {
			REQUIRE(l->pgen == 0 && l->nchild == 0, "unlinked %zu has links", i);
		}
	}
	REQUIRE(nl == t.links.n, "link map counts %zu, objects %zu", t.links.n, nl);
	objtab_destroy(&t);
	free(o);
}

/* Pins share the link map's entries; a freed block serves the next object
 * of its size class. */
static void check_pins(void)
{
	struct objtab t;
	struct obj *a, *b, *o;

	REQUIRE(objtab_init(&t) == 0, "oom");
	a = objtab_insert(&t, (const uint8_t *)"pin-a", 5, 1);
	b = objtab_insert(&t, (const uint8_t *)"pin-b", 5, 1);
	REQUIRE(a && b && obj_pin_s(&t, a) == 0, "insert");
	REQUIRE(objtab_set_pin(&t, a, 0) == 0 && !a->linked, "unpin of nothing made an entry");
	REQUIRE(objtab_set_pin(&t, a, 77) == 0 && obj_pin_s(&t, a) == 77 && t.links.n == 1, "pin");
	struct obj_links *l = objtab_links_get(&t, a);

	REQUIRE(l && l->pin_s == 77, "links");
	l->nchild = 2;
	objtab_links_drop(&t, a);	/* the chain links go, the pin stays */
	REQUIRE(a->linked && obj_pin_s(&t, a) == 77 && objtab_links(&t, a)->nchild == 0,
		"links_drop took the pin");
	a = objtab_regrow(&t, a, 3);
	REQUIRE(a && obj_pin_s(&t, a) == 77 && t.links.n == 1, "regrow lost the pin");
	REQUIRE(objtab_set_pin(&t, a, 0) == 0 && !a->linked && t.links.n == 0, "unpin kept the entry");
	REQUIRE(objtab_set_pin(&t, b, 5) == 0 && objtab_links_get(&t, b), "pin b");
	objtab_remove(&t, b);
	REQUIRE(t.links.n == 0, "the removed object's entry stayed");
	o = objtab_insert(&t, (const uint8_t *)"pin-c", 5, 1);
	REQUIRE(o == b && obj_pin_s(&t, o) == 0 && !o->linked, "block not reused, or not clean");
	o = objtab_new(&t, (const uint8_t *)"pin-d", 5, 1);	/* never linked */
	REQUIRE(o && objtab_set_pin(&t, o, 9) == 0 && t.links.n == 1, "pin of an unlinked object");
	objtab_free(&t, o);
	REQUIRE(t.links.n == 0, "objtab_free kept the entry");
	objtab_destroy(&t);
}

/* The slot array's own invariants: at most 3/4 full (and one slot empty),
 * every entry's tag is its hash's, the slots from its home to it are all
 * full (linear probing's: a probe from the home reaches it), and count
 * entries in all. */
static void check_slots(const struct objtab *t)
{
	size_t used = 0;

	REQUIRE(t->count * 4 <= t->nslots * 3, "%zu objects in %zu slots", t->count, t->nslots);
	for (size_t j = 0; j < t->nslots; j++) {
		uint64_t s = t->slots[j];
		if (!s)
			continue;
		used++;
		const struct obj *o = (const struct obj *)(uintptr_t)(s & OBJTAB_SLOT_PTR);
		REQUIRE((s & ~OBJTAB_SLOT_PTR) == objtab_slot_tag(o->hash), "slot %zu: tag", j);
		for (size_t i = objtab_home(t, o->hash); i != j; i = i + 1 == t->nslots ? 0 : i + 1)
			REQUIRE(t->slots[i], "slot %zu: hole at %zu before it (home %zu of %zu)", j,
				i, objtab_home(t, o->hash), t->nslots);
	}
	REQUIRE(used == t->count, "%zu slots used, count %zu", used, t->count);
}

/* A hash for the probing test: random, one of a few shared by many keys
 * (long runs of one home), near 2^32 (homes in the last slots: runs wrap
 * around the array's end) or near 0 (the slots the wrapped runs spill
 * into). */
static uint32_t probe_hash(void)
{
	static const uint32_t hot[] = { 0x12345678, 0x80000000, 0xfffffff0, 0x00000007 };

	switch (rnd() % 5) {
	case 0:
		return hot[rnd() % 4];
	case 1:
		return UINT32_MAX - (uint32_t)(rnd() % (1u << 22));
	case 2:
		return (uint32_t)(rnd() % (1u << 22));
	default:
		return (uint32_t)rnd();
	}
}

/* The slot array with chosen hashes against an array of what is present:
 * random inserts, removals (the backward shift across the wrap), regrowths
 * and lookups (by key and by hash and generation) of 8,000 keys through
 * ops steps while the table grows through sizes of 1.5x that are not
 * powers of two; then a presized table (one resize, no growth after). */
static void check_probe(int ops)
{
	enum { K = 8000 };
	static struct obj *ref[K];
	static uint32_t hash[K];
	struct objtab t;
	char k[16];
	size_t present = 0;

	memset(ref, 0, sizeof(ref));
	REQUIRE(objtab_init(&t) == 0, "init");
	for (int op = 0; op < ops; op++) {
		size_t i = rnd() % K;
		int kn = snprintf(k, sizeof(k), "p%05zu", i);
		/* insert-heavy for the first half (the table grows), even after */
		unsigned r = (unsigned)(rnd() % 8);
		bool grow = op < ops / 2;

		if (!ref[i] && (grow ? r < 6 : r < 4)) {
			hash[i] = probe_hash();
			ref[i] = objtab_insert_hash(&t, (const uint8_t *)k, (size_t)kn, hash[i], 1);
			REQUIRE(ref[i], "insert oom");
			ref[i]->generation = ((uint64_t)op << 32) | (uint32_t)op;
			present++;
		} else if (ref[i] && r < 5) {
			objtab_remove(&t, ref[i]);
			ref[i] = NULL;
			present--;
		} else if (ref[i] && r == 5) {
			ref[i] = objtab_regrow(&t, ref[i], 1 + (unsigned)(rnd() % 3));
			REQUIRE(ref[i], "regrow oom");
		}
		struct obj *o = objtab_find_hash(&t, (const uint8_t *)k, (size_t)kn, hash[i]);
		REQUIRE(o == ref[i], "key %zu (hash %08x): found %p, want %p", i, hash[i],
			(void *)o, (void *)ref[i]);
		if (ref[i])
			REQUIRE(objtab_find_hg(&t, hash[i], (uint32_t)ref[i]->generation) == ref[i],
				"key %zu: not found by hash and generation", i);
		REQUIRE(t.count == present, "count %zu, want %zu", t.count, present);
		if (op % 4096 == 0 || op == ops - 1) {
			check_slots(&t);
			for (size_t j = 0; j < K; j++) {
				kn = snprintf(k, sizeof(k), "p%05zu", j);
				o = objtab_find_hash(&t, (const uint8_t *)k, (size_t)kn, hash[j]);
				REQUIRE(o == ref[j], "key %zu: found %p, want %p", j, (void *)o,
					(void *)ref[j]);
			}
		}
	}
	REQUIRE(t.nslots & (t.nslots - 1), "%zu slots: the test never left the powers of two",
		t.nslots);
	objtab_destroy(&t);

	/* presized: the size growing to n would reach, at once */
	size_t n = 5000 + rnd() % 5000;
	struct objtab g;
	REQUIRE(objtab_init(&t) == 0 && objtab_init(&g) == 0, "init");
	REQUIRE(objtab_presize(&t, n) == 0, "presize oom");
	size_t sized = t.nslots;
	for (size_t i = 0; i < n; i++) {
		int kn = snprintf(k, sizeof(k), "q%06zu", i);
		uint32_t h = probe_hash();
		REQUIRE(objtab_insert_hash(&t, (const uint8_t *)k, (size_t)kn, h, 1) &&
			objtab_insert_hash(&g, (const uint8_t *)k, (size_t)kn, h, 1), "insert oom");
	}
	/* presize leaves room for one more: a step past the inserts' at most */
	REQUIRE(t.nslots == sized && (sized == g.nslots || (n + 1) * 4 > g.nslots * 3),
		"presized %zu slots, grew to %zu, then %zu", sized, g.nslots, t.nslots);
	check_slots(&t);
	check_slots(&g);
	objtab_destroy(&t);
	objtab_destroy(&g);
}

/* 0 .. n-1 in a random order (malloc'd). */
static size_t *shuffled(size_t n)
{
	size_t *perm = malloc(n * sizeof(*perm));

	REQUIRE(perm, "oom");
	for (size_t i = 0; i < n; i++)
		perm[i] = i;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = rnd() % (i + 1), x = perm[i];
		perm[i] = perm[j];
		perm[j] = x;
	}
	return perm;
}

/* A bulk load's inserts (objtab_kx_defer): keys in random order wait for
 * the key index but are found by their hash all along; a regrowth and a
 * removal of a waiting object settle the waiting ones first; the rest go
 * in when deferring ends; then the model's checks. v: none present. */
static void check_defer(struct mkey *v, size_t n)
{
	struct objtab t;
	size_t *perm = shuffled(n), waited = 0;

	REQUIRE(objtab_init(&t) == 0, "oom");
	REQUIRE(objtab_kx_defer(&t, true) == 0, "defer");
	for (size_t i = 0; i < n; i++) {
		struct mkey *m = &v[perm[i]];
		struct obj *o = objtab_insert(&t, (const uint8_t *)m->k, m->n, 1);

		REQUIRE(o, "insert oom");
		m->in = true;
		waited += !!(o->flags & OBJ_KXWAIT);
		REQUIRE(objtab_find(&t, (const uint8_t *)m->k, m->n) == o, "'%s' not found", m->k);
		if (i == n / 3 || i == n / 2) {	/* a waiting one regrown, then one removed */
			REQUIRE(t.nkxp > 0 && (t.kxp[0].o->flags & OBJ_KXWAIT), "none waits");
			o = t.kxp[t.nkxp / 2].o;
			if (i == n / 3) {
				o = objtab_regrow(&t, o, 3);
				REQUIRE(o && !(o->flags & OBJ_KXWAIT) && t.nkxp == 0, "regrown, still waits");
			} else {
				struct mkey *r = NULL;
				for (size_t j = 0; j < n && !r; j++)
					if (v[j].n == o->key_len && !memcmp(v[j].k, obj_key(o), v[j].n))
						r = &v[j];
				REQUIRE(r, "a waiting key not in the model");
				objtab_remove(&t, o);
				r->in = false;
				REQUIRE(t.nkxp == 0, "removed, others still wait");
			}
			check_tree(&t);
		}
	}
	REQUIRE(waited > n / 2, "only %zu of %zu inserts waited", waited, n);
	uint64_t gen = t.idx.gen;	/* no leaf freed one by one: a merge's */
	REQUIRE(objtab_kx_defer(&t, false) == 0 && t.nkxp == 0, "settle");
	REQUIRE(t.idx.gen > gen, "%zu waiting keys settled one by one", waited);
	check_all(&t, v, n);
	objtab_destroy(&t);
	for (size_t i = 0; i < n; i++)
		v[i].in = false;
	free(perm);
}

int main(void)
{
	const char *e = getenv("SEED");
	uint64_t seed = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL);
	e = getenv("N");
	size_t n = e ? strtoull(e, NULL, 0) : 300000;	/* 448,398 slots: 15 steps of 1.5x */
	struct objtab t;

	rng_state = seed | 1;
	printf("t_objtab: SEED=%llu N=%zu\n", (unsigned long long)seed, n);
	check_keycmp();
	struct mkey *v = calloc(n, sizeof(*v));
	REQUIRE(v && n >= 2, "oom");
	for (size_t i = 0; i < n; i++)
		make_key(&v[i], i);
	qsort(v, n, sizeof(*v), cmp_mkey);
	size_t u = 0;	/* the random part may repeat a key: keep one */
	for (size_t i = 0; i < n; i++)
		if (!u || cmp_mkey(&v[u - 1], &v[i]))
			v[u++] = v[i];
	n = u;
	check_defer(v, n);
	REQUIRE(objtab_init(&t) == 0, "init");

	/* insert in a random order, both entry points */
	size_t *perm = shuffled(n);
	for (size_t i = 0; i < n; i++) {
		struct mkey *m = &v[perm[i]];
		const uint8_t *k = (const uint8_t *)m->k;
		struct obj *o = i % 2 ? objtab_insert(&t, k, m->n, 1)
				      : objtab_insert_hash(&t, k, m->n, objtab_hash(k, m->n), 1);
		REQUIRE(o, "insert oom");
		m->in = true;
	}
	REQUIRE(t.nslots >= n * 4 / 3 && t.count * 4 <= t.nslots * 3, "%zu slots for %zu keys",
		t.nslots, t.count);
	check_all(&t, v, n);

	/* remove about a third, then put half of those back (unlinked
	 * objects made by objtab_new_hash, then linked, as an upsert does) */
	for (size_t i = 0; i < n; i++) {
		if (rnd() % 3)
			continue;
		struct obj *o = objtab_find(&t, (const uint8_t *)v[i].k, v[i].n);
		REQUIRE(o, "'%s' lost", v[i].k);
		objtab_remove(&t, o);
		v[i].in = false;
	}
	check_all(&t, v, n);
	for (size_t i = 0; i < n; i++) {
		if (v[i].in || rnd() % 2)
			continue;
		const uint8_t *k = (const uint8_t *)v[i].k;
		struct obj *o = objtab_new_hash(&t, k, v[i].n, objtab_hash(k, v[i].n), 2);
		REQUIRE(o, "new oom");
		objtab_link(&t, o);
		v[i].in = true;
	}
	check_all(&t, v, n);

	/* the last keys taken out and put back in ascending order (each past
	 * the last: the tail path), then taken out from the end one by one
	 * (the tails move back) */
	size_t top = n < 2000 ? n : 2000;
	for (size_t i = n - top; i < n; i++)
		if (v[i].in) {
			objtab_remove(&t, objtab_find(&t, (const uint8_t *)v[i].k, v[i].n));
			v[i].in = false;
		}
	for (size_t i = n - top; i < n; i++) {
		REQUIRE(objtab_insert(&t, (const uint8_t *)v[i].k, v[i].n, 1), "insert oom");
		v[i].in = true;
	}
	check_all(&t, v, n);
	for (size_t i = n; i > n - top / 2; i--) {
		objtab_remove(&t, objtab_find(&t, (const uint8_t *)v[i - 1].k, v[i - 1].n));
		v[i - 1].in = false;
	}
	for (size_t i = n - top / 2; i < n; i += 2) {
		REQUIRE(objtab_insert(&t, (const uint8_t *)v[i].k, v[i].n, 1), "insert oom");
		v[i].in = true;
	}
	check_all(&t, v, n);
	if (n >= 40)
		check_run(&t, v, n, n / 3, n / 3 + (n / 10 < 3000 ? n / 10 : 3000));
	objtab_destroy(&t);
	check_churn(v, n < 5000 ? n : 5000, 200000);
	check_links(n < 20000 ? n : 20000);
	check_pins();
	check_probe(400000);
	free(perm);
	free(v);
	printf("t_objtab: ok (%zu keys)\n", n);
	return 0;
}

/* t_keyidx: the key index's B+tree built with tiny nodes (leaves of 4
 * objects, inner nodes of 4 children: keyidx.c compiled into this test),
 * so that a few thousand keys make a tree eight levels high and every
 * split, emptied leaf, dropped inner node, widened edge and root collapse
 * happens often. Through the object table (objtab.c, which calls these
 * kx_* functions): random inserts, removals and regrowths, in runs and at
 * random, whole ranges removed (inner nodes at every level drop) and put
 * back, walks that remove what they pass, and sorted batches merged in
 * one pass (kx_merge); after every operation kx_check (order, fences,
 * heads and hints, the leaf chain, the count), and every few the walk's
 * order and seeks against a sorted model.
 * SEED=n reproduces a run.
 */
#define KX_LEAF 4
#define KX_FAN 4
#include "../../master/keyidx.c"

#include "objtab_model.h"

#define NKEYS 3000

/* The walk gives the model's present keys in order; seeks agree. */
static void check_model(struct objtab *t, const struct mkey *v, size_t n)
{
	struct obj *o;

	check_order(t, v, n);
	for (int s = 0; s < 50; s++) {
		size_t i = rnd() % n, want = i;
		bool after = rnd() & 1;
		if (after)
			want++;
		while (want < n && !v[want].in)
			want++;
		o = objtab_seek(t, (const uint8_t *)v[i].k, v[i].n, after);
		REQUIRE(want < n ? o && o->key_len == v[want].n &&
					   memcmp(obj_key(o), v[want].k, v[want].n) == 0
				 : !o, "seek '%s' after=%d", v[i].k, after);
	}
}

static void put(struct objtab *t, struct mkey *m)
{
	REQUIRE(objtab_insert(t, (const uint8_t *)m->k, m->n, 1), "insert oom");
	m->in = true;
}

static void drop(struct objtab *t, struct mkey *m)
{
	struct obj *o = objtab_find(t, (const uint8_t *)m->k, m->n);

	REQUIRE(o, "'%s' lost", m->k);
	objtab_remove(t, o);
	m->in = false;
}

static int cmp_kxp(const void *a, const void *b)
{
	const struct obj *x = ((const struct objtab_kxp *)a)->o, *y = ((const struct objtab_kxp *)b)->o;

	return objtab_keycmp(obj_key(x), x->key_len, obj_key(y), y->key_len);
}

/* kx_merge: sorted batches of every share (none to all of the absent
 * keys) into trees of every size (empty, one leaf, eight levels), the
 * objects waiting in the table as a table file's load leaves them; after
 * each, the invariants, the walk and seeks, then removals and inserts that
 * split and empty the merged (full) nodes. */
static void check_merge(struct objtab *t, struct mkey *v, size_t n)
{
	for (int round = 0; round < 40; round++) {
		unsigned add = round % 5 == 0 ? 100 : (unsigned)(rnd() % 101);
		unsigned out = round % 7 == 3 ? 100 : (unsigned)(rnd() % 60);

		REQUIRE(objtab_kx_defer(t, true) == 0, "defer");
		for (size_t i = 0; i < n; i++)
			if (!v[i].in && rnd() % 100 < add)
				put(t, &v[i]);
		qsort(t->kxp, t->nkxp, sizeof(*t->kxp), cmp_kxp);
		for (size_t j = 0; j < t->nkxp; j++)
			t->kxp[j].o->flags &= ~(uint64_t)OBJ_KXWAIT;
		uint64_t gen = t->idx.gen;
		REQUIRE(kx_merge(&t->idx, &t->kxp[0].o, t->nkxp, sizeof(*t->kxp)) == 0, "merge oom");
		REQUIRE(!t->nkxp || t->idx.gen > gen, "a merge kept the old leaves");
		t->nkxp = 0;
		REQUIRE(objtab_kx_defer(t, false) == 0, "settle");
		check_tree(t);
		check_model(t, v, n);
		for (size_t i = 0; i < n; i++)
			if (v[i].in && rnd() % 100 < out)
				drop(t, &v[i]);
		for (size_t k = 0; k < n / 8; k++) {
			size_t i = rnd() % n;
			if (v[i].in)
				drop(t, &v[i]);
			else
				put(t, &v[i]);
			check_tree(t);
		}
		check_model(t, v, n);
	}
}

int main(void)
{
	const char *e = getenv("SEED");
	uint64_t seed = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL);
	struct mkey *v = calloc(NKEYS, sizeof(*v));
	struct objtab t;
	size_t n = 0;

	rng_state = seed | 1;
	printf("t_keyidx: SEED=%llu\n", (unsigned long long)seed);
	REQUIRE(v, "oom");
	/* shared prefixes of several lengths, so fences share some */
	for (size_t i = 0; i < NKEYS; i++) {
		switch (i % 4) {
		case 0: v[i].n = (size_t)snprintf(v[i].k, sizeof(v[i].k), "a/%zu", i); break;
		case 1: v[i].n = (size_t)snprintf(v[i].k, sizeof(v[i].k), "prefix/long/%08zx", i * 7919); break;
		case 2: v[i].n = (size_t)snprintf(v[i].k, sizeof(v[i].k), "prefix/%zu", i); break;
		default: v[i].n = (size_t)snprintf(v[i].k, sizeof(v[i].k), "p%zx", (size_t)rnd()); break;
		}
	}
	qsort(v, NKEYS, sizeof(*v), cmp_mkey);
	for (size_t i = 0; i < NKEYS; i++)
		if (!n || cmp_mkey(&v[n - 1], &v[i]))
			v[n++] = v[i];
	REQUIRE(objtab_init(&t) == 0, "init");

	/* all in at random, then all out in order and back: the tree grows
	 * high and shrinks to one leaf */
	for (size_t k = 0; k < n; k++) {
		size_t i = rnd() % n;
		if (!v[i].in)
			put(&t, &v[i]);
		check_tree(&t);
	}
	check_model(&t, v, n);
	REQUIRE(t.idx.height >= 5, "height %d for %zu keys", t.idx.height, t.count);
	for (size_t i = 0; i < n; i++)
		if (v[i].in) {
			drop(&t, &v[i]);
			check_tree(&t);
		}
	REQUIRE(t.idx.height == 1 && t.count == 0, "emptied: height %d", t.idx.height);
	for (size_t i = 0; i < n; i++)
		put(&t, &v[i]);
	check_tree(&t);
	check_model(&t, v, n);

	/* whole ranges out (a quarter of the keys: inner nodes of every level
	 * empty) from the middle, the front and the end, and back */
	for (int round = 0; round < 12; round++) {
		size_t len = n / 4, from = round % 3 == 0 ? 0 : round % 3 == 1 ? n - len : rnd() % (n - len);
		for (size_t i = from; i < from + len; i++)
			if (v[i].in) {
				drop(&t, &v[i]);
				check_tree(&t);
			}
		check_model(&t, v, n);
		for (size_t i = from + len; i > from; i--)
			if (!v[i - 1].in && rnd() % 4) {
				put(&t, &v[i - 1]);
				check_tree(&t);
			}
		check_model(&t, v, n);
	}

	/* walks that remove what they pass */
	for (int round = 0; round < 6; round++) {
		size_t from = rnd() % n, len = 1 + rnd() % (n / 3);
		struct obj *o = objtab_seek(&t, (const uint8_t *)v[from].k, v[from].n, false);
		for (size_t k = 0; o && k < len; k++) {
			struct obj *next = objtab_next(&t, o);
			for (size_t i = 0; i < n; i++)
				if (v[i].in && v[i].n == o->key_len && !memcmp(v[i].k, obj_key(o), v[i].n)) {
					v[i].in = false;
					break;
				}
			objtab_remove(&t, o);
			check_tree(&t);
			o = next;
		}
		check_model(&t, v, n);
	}

	/* random operations, in runs and at random, regrowths among them */
	size_t i = 0;
	for (int s = 0; s < 60000; s++) {
		unsigned what = (unsigned)(rnd() % 8);
		i = what < 4 ? (i + 1) % n : rnd() % n;
		struct obj *o = objtab_find(&t, (const uint8_t *)v[i].k, v[i].n);
		REQUIRE(!o == !v[i].in, "'%s': table and model differ", v[i].k);
		if (!o)
			put(&t, &v[i]);
		else if (what == 7)
			REQUIRE(objtab_regrow(&t, o, 1 + (unsigned)(rnd() % 3)), "regrow");
		else
			drop(&t, &v[i]);
		check_tree(&t);
		if (s % 500 == 0)
			check_model(&t, v, n);
	}
	check_model(&t, v, n);
	check_merge(&t, v, n);
	objtab_destroy(&t);
	free(v);
	printf("t_keyidx: ok (%zu keys)\n", n);
	return 0;
}

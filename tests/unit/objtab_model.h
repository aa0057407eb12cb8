/* objtab_model.h — the sorted model that t_objtab and t_keyidx check the
 * master's object table against: keys with a present flag, sorted by
 * objtab_keycmp, a xorshift generator (seed rng_state first), and the
 * checks that the key index's invariants hold and that a walk of the
 * table gives the model's present keys in order. Header-only, for tests.
 */
#ifndef KVP_OBJTAB_MODEL_H
#define KVP_OBJTAB_MODEL_H

#include "objtab.h"
#include "testlib.h"

struct mkey {
	char k[80];
	size_t n;
	bool in;
};

static uint64_t rng_state;

static inline uint64_t rnd(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	rng_state = x;
	return x;
}

static inline int cmp_mkey(const void *a, const void *b)
{
	const struct mkey *x = a, *y = b;

	return objtab_keycmp((const uint8_t *)x->k, x->n, (const uint8_t *)y->k, y->n);
}

/* The key index's own invariants (order, fences, heads and hints, the leaf
 * chain, the count) and its count against the table's. */
static inline void check_tree(const struct objtab *t)
{
	char err[256];

	REQUIRE(kx_check(&t->idx, err, sizeof(err)) == 0, "key index: %s", err);
	REQUIRE(t->idx.count == t->count, "index holds %zu, table %zu", t->idx.count, t->count);
}

/* The present keys of v (sorted), in order, are what a walk of t gives. */
static inline void check_order(struct objtab *t, const struct mkey *v, size_t n)
{
	struct obj *o = objtab_seek(t, (const uint8_t *)"", 0, false);

	for (size_t i = 0; i < n; i++) {
		if (!v[i].in)
			continue;
		REQUIRE(o && o->key_len == v[i].n && memcmp(obj_key(o), v[i].k, v[i].n) == 0,
			"walk lacks '%s' in its place", v[i].k);
		o = objtab_next(t, o);
	}
	REQUIRE(!o, "walk longer than the model");
	check_tree(t);
}

#endif

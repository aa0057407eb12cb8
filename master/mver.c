/* mver: versions by generation; see mver.h. */
#include "mver.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "objtab.h"

#define MVER_MIN_BUCKETS 64

static size_t bucket(const struct mver *v, uint64_t gen)
{
	return (size_t)((gen * 0x9e3779b97f4a7c15ull) >> 32) & (v->nb - 1);
}

/* Doubles the buckets at load factor 1; a failed resize only makes
 * chains longer. */
static void mver_grow(struct mver *v)
{
	size_t nb = v->nb * 2;
	struct obj **b = calloc(nb, sizeof(*b));

	if (!b)
		return;
	struct mver nv = { .b = b, .nb = nb, .n = v->n };
	for (size_t i = 0; i < v->nb; i++) {
		struct obj *o = v->b[i];
		while (o) {
			struct obj *next = o->hnext;
			size_t j = bucket(&nv, o->generation);
			o->hnext = b[j];
			b[j] = o;
			o = next;
		}
	}
	free(v->b);
	*v = nv;
}

int mver_init(struct mver *v)
{
	memset(v, 0, sizeof(*v));
	v->b = calloc(MVER_MIN_BUCKETS, sizeof(*v->b));
	if (!v->b)
		return -ENOMEM;
	v->nb = MVER_MIN_BUCKETS;
	return 0;
}

void mver_add(struct mver *v, struct obj *o)
{
	size_t i = bucket(v, o->generation);
	o->hnext = v->b[i];
	v->b[i] = o;
	o->flags |= OBJ_VERSION;
	if (++v->n > v->nb)
		mver_grow(v);
}

struct obj *mver_find(const struct mver *v, uint64_t gen, const uint8_t *key, size_t n)
{
	if (!v->n)
		return NULL;
	for (struct obj *o = v->b[bucket(v, gen)]; o; o = o->hnext)
		if (o->generation == gen && o->key_len == n && memcmp(obj_key(o), key, n) == 0)
			return o;
	return NULL;
}

void mver_del(struct mver *v, struct obj *o)
{
	struct obj **p = &v->b[bucket(v, o->generation)];

	while (*p && *p != o)
		p = &(*p)->hnext;
	if (*p) {
		*p = o->hnext;
		v->n--;
	}
	o->hnext = NULL;
	o->flags &= (uint8_t)~OBJ_VERSION;
}

void mver_destroy(struct mver *v)
{
	free(v->b);
	memset(v, 0, sizeof(*v));
}

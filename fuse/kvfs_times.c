/* kvfs_times: times set through the view, per key and put time
 * (kvfs_times.h): a chained hash table that doubles when full.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvfs_times.h"

struct kvfs_time_ent {
	struct kvfs_time_ent *next;
	uint64_t put_ns, mtime_ns, atime_ns;
	size_t len;
	char key[];
};

static size_t slot(const struct kvfs_times *t, const char *key, size_t len)
{
	return (size_t)XXH3_64bits(key, len) & (t->nb - 1);
}

static struct kvfs_time_ent **find(const struct kvfs_times *t, const char *key, size_t len)
{
	struct kvfs_time_ent **pp = &t->b[slot(t, key, len)];

	while (*pp && !((*pp)->len == len && memcmp((*pp)->key, key, len) == 0))
		pp = &(*pp)->next;
	return pp;
}

static void grow(struct kvfs_times *t)
{
	size_t nb = t->nb ? t->nb * 2 : 256, ob = t->nb;
	struct kvfs_time_ent **b = calloc(nb, sizeof(*b)), **old = t->b;

	if (!b)
		return;		/* longer chains: slower, still correct */
	t->b = b;
	t->nb = nb;
	for (size_t i = 0; i < ob; i++) {
		struct kvfs_time_ent *e = old[i], *next;

		for (; e; e = next) {
			size_t s = slot(t, e->key, e->len);

			next = e->next;
			e->next = b[s];
			b[s] = e;
		}
	}
	free(old);
}

void kvfs_times_free_locked(struct kvfs_times *t)
{
	for (size_t i = 0; i < t->nb; i++) {
		struct kvfs_time_ent *e = t->b[i], *next;

		for (; e; e = next) {
			next = e->next;
			free(e);
		}
	}
	free(t->b);
	t->b = NULL;
	t->nb = t->n = 0;
}

int kvfs_times_set_locked(struct kvfs_times *t, const char *key, size_t len, uint64_t put_ns,
			  uint64_t mtime_ns, uint64_t atime_ns)
{
	struct kvfs_time_ent **pp, *e;

	if (t->n >= t->nb)
		grow(t);
	if (!t->nb)
		return -ENOMEM;
	pp = find(t, key, len);
	e = *pp;
	if (!e) {
		if (t->n >= KVFS_TIMES_MAX)
			return -ENOSPC;
		e = malloc(sizeof(*e) + len);
		if (!e)
			return -ENOMEM;
		memcpy(e->key, key, len);
		e->len = len;
		e->next = NULL;
		*pp = e;
		t->n++;
	}
	e->put_ns = put_ns;
	e->mtime_ns = mtime_ns;
	e->atime_ns = atime_ns;
	return 0;
}

bool kvfs_times_get_locked(const struct kvfs_times *t, const char *key, size_t len,
			   uint64_t put_ns, uint64_t *mtime_ns, uint64_t *atime_ns)
{
	struct kvfs_time_ent *e;

	if (!t->n)
		return false;
	e = *find(t, key, len);
	if (!e || e->put_ns != put_ns)
		return false;
	*mtime_ns = e->mtime_ns;
	*atime_ns = e->atime_ns;
	return true;
}

void kvfs_times_drop_locked(struct kvfs_times *t, const char *key, size_t len)
{
	struct kvfs_time_ent **pp, *e;

	if (!t->n)
		return;
	pp = find(t, key, len);
	e = *pp;
	if (!e)
		return;
	*pp = e->next;
	free(e);
	t->n--;
}

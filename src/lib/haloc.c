/* haloc: the table of last read locations; see haloc.h. */
#include "haloc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "client_i.h"
#include "kvpool.h"

#define LOC_SLOTS 8192		/* 64 bytes each: 512 KiB per handle */

struct loc_slot {
	uint64_t hash;			/* 0: empty */
	struct lc_loc e;
};

struct haloc {
	pthread_mutex_t lock;
	struct loc_slot slot[LOC_SLOTS];	/* protected by lock */
};

/* The key's slot and its tag (never 0: an empty slot). */
static struct loc_slot *slot_of(struct haloc *c, const char *key, uint32_t klen, uint64_t *h)
{
	*h = XXH3_64bits(key, klen);
	if (!*h)
		*h = 1;
	return &c->slot[*h % LOC_SLOTS];
}

int haloc_open(struct kvp *kvp)
{
	struct haloc *c = calloc(1, sizeof(*c));

	if (!c)
		return KVP_ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	kvp->haloc = c;
	return 0;
}

void haloc_close(struct kvp *kvp)
{
	if (!kvp->haloc)
		return;
	pthread_mutex_destroy(&kvp->haloc->lock);
	free(kvp->haloc);
	kvp->haloc = NULL;
}

void haloc_put(struct kvp *kvp, const char *key, uint32_t klen, const struct lc_loc *e)
{
	struct haloc *c = kvp->haloc;
	uint64_t h;

	if (!c)
		return;
	struct loc_slot *s = slot_of(c, key, klen, &h);
	pthread_mutex_lock(&c->lock);
	s->hash = h;
	s->e = *e;
	pthread_mutex_unlock(&c->lock);
}

/* Reads (e set) or forgets (e NULL) the key's entry; true if it had one. */
static bool lookup(struct kvp *kvp, const char *key, uint32_t klen, struct lc_loc *e)
{
	struct haloc *c = kvp->haloc;
	bool hit;
	uint64_t h;

	if (!c)
		return false;
	struct loc_slot *s = slot_of(c, key, klen, &h);
	pthread_mutex_lock(&c->lock);
	hit = s->hash == h;
	if (hit && e)
		*e = s->e;
	else if (hit)
		s->hash = 0;
	pthread_mutex_unlock(&c->lock);
	return hit;
}

bool haloc_get(struct kvp *kvp, const char *key, uint32_t klen, struct lc_loc *e)
{
	return lookup(kvp, key, klen, e);
}

void haloc_drop(struct kvp *kvp, const char *key, uint32_t klen)
{
	lookup(kvp, key, klen, NULL);
}

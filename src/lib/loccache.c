/* loccache: the table of last read locations; see loccache.h. */
#include "loccache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "client_i.h"
#include "kvpool.h"

#define LOC_SLOTS 8192		/* 64 bytes each: 512 KiB per handle */

struct loc_slot {
	uint64_t hash;			/* 0: empty */
	struct loc_ent e;
};

struct loccache {
	pthread_mutex_t lock;
	struct loc_slot slot[LOC_SLOTS];	/* protected by lock */
};

/* The key's slot and its tag (never 0: an empty slot). */
static struct loc_slot *slot_of(struct loccache *c, const char *key, uint32_t klen, uint64_t *h)
{
	*h = XXH3_64bits(key, klen);
	if (!*h)
		*h = 1;
	return &c->slot[*h % LOC_SLOTS];
}

int loccache_open(struct kvp *kvp)
{
	struct loccache *c = calloc(1, sizeof(*c));

	if (!c)
		return KVP_ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	kvp->locs = c;
	return 0;
}

void loccache_close(struct kvp *kvp)
{
	if (!kvp->locs)
		return;
	pthread_mutex_destroy(&kvp->locs->lock);
	free(kvp->locs);
	kvp->locs = NULL;
}

void loccache_put(struct kvp *kvp, const char *key, uint32_t klen, const struct loc_ent *e)
{
	struct loccache *c = kvp->locs;
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
static bool lookup(struct kvp *kvp, const char *key, uint32_t klen, struct loc_ent *e)
{
	struct loccache *c = kvp->locs;
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

bool loccache_get(struct kvp *kvp, const char *key, uint32_t klen, struct loc_ent *e)
{
	return lookup(kvp, key, klen, e);
}

void loccache_drop(struct kvp *kvp, const char *key, uint32_t klen)
{
	lookup(kvp, key, klen, NULL);
}

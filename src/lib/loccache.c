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

static uint64_t key_hash(const char *key, uint32_t klen)
{
	uint64_t h = XXH3_64bits(key, klen);

	return h ? h : 1;
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
	h = key_hash(key, klen);
	pthread_mutex_lock(&c->lock);
	c->slot[h % LOC_SLOTS].hash = h;
	c->slot[h % LOC_SLOTS].e = *e;
	pthread_mutex_unlock(&c->lock);
}

bool loccache_get(struct kvp *kvp, const char *key, uint32_t klen, struct loc_ent *e)
{
	struct loccache *c = kvp->locs;
	bool hit;
	uint64_t h;

	if (!c)
		return false;
	h = key_hash(key, klen);
	pthread_mutex_lock(&c->lock);
	hit = c->slot[h % LOC_SLOTS].hash == h;
	if (hit)
		*e = c->slot[h % LOC_SLOTS].e;
	pthread_mutex_unlock(&c->lock);
	return hit;
}

void loccache_drop(struct kvp *kvp, const char *key, uint32_t klen)
{
	struct loccache *c = kvp->locs;
	uint64_t h;

	if (!c)
		return;
	h = key_hash(key, klen);
	pthread_mutex_lock(&c->lock);
	if (c->slot[h % LOC_SLOTS].hash == h)
		c->slot[h % LOC_SLOTS].hash = 0;
	pthread_mutex_unlock(&c->lock);
}

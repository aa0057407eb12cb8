/* lcache: a handle's location cache for optimistic same-host reads. It
 * remembers, per key, where the handle last saw the value in a segment
 * mapped on this host (segment, offset, length, generation, checksum), so
 * that a get or an exists of that key can read or check the extent straight
 * away and validate it by its header instead of asking the master first
 * (docs/client.md, "Optimistic reads", holds the protocol and its model).
 * An entry is a hint, never trusted: the reader checks the extent itself.
 * Not haloc (haloc.h), which keeps the same record for reads while no
 * master answers, from any node and tier.
 * Any thread: lookups take no lock (seqlock reads); stores and removals
 * take the striped mutex of the entry's set; the touch buffer has its own
 * mutex. No I/O under either lock.
 */
#ifndef KVP_LCACHE_H
#define KVP_LCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvp;

/* Where a value was seen: one replica. lcache keeps memory replicas in
 * local segments only (tier unused); haloc any, and finds the segment by
 * seg_uuid, which stays across masters (seg_id is a master's number). */
struct lc_loc {
	uint32_t seg_id;
	uint8_t tier;			/* KVP_TIER_MEM or _DISK */
	uint64_t seg_uuid;
	uint64_t off, alloc_len;	/* extent offset and the space it holds */
	uint64_t vlen, gen, csum;	/* value length, generation, xxh3 */
};

struct lcache;

/* The cache of kvp->conf.client (location_cache entries; NULL when 0 or
 * optimistic_reads is off, and every call below is then a no-op/miss). */
struct lcache *lc_create(const struct kvp *kvp);
void lc_destroy(struct lcache *c);

/* A snapshot of the key's invalidation state, taken before asking the
 * master about it: an lc_insert with it is refused if this handle removed
 * or replaced the key (or cleared the cache) since, so an answer that was
 * current before that can never become a hint after it. */
uint64_t lc_token(struct lcache *c, const char *key, uint32_t klen);
uint64_t lc_token_h(struct lcache *c, uint64_t h);	/* h: lc_key_hash() */
/* Remembers loc for key unless the token is stale. */
void lc_insert(struct lcache *c, const char *key, uint32_t klen, uint64_t token,
	       const struct lc_loc *loc);
/* True with *loc filled when key has a fresh entry (younger than
 * location_ttl at now, clock_now_ms()): a hint; the extent header, not the
 * cache, proves it is key's. A get passes each verified read to lc_touch.
 * Takes no lock. */
bool lc_lookup(struct lcache *c, const char *key, uint32_t klen, uint64_t now,
	       struct lc_loc *loc);
/* The same in two steps, for a batch: the key's hash, a prefetch of its
 * set (so that the batch's cache misses overlap), the lookup by hash. */
uint64_t lc_key_hash(const char *key, uint32_t klen);
void lc_prefetch(struct lcache *c, uint64_t h);
/* Once the set is in cache (a pass after lc_prefetch): a prefetch of the
 * way that holds h, if one does. */
void lc_prefetch_way(struct lcache *c, uint64_t h);
bool lc_lookup_h(struct lcache *c, uint64_t h, uint32_t klen, uint64_t now,
		 struct lc_loc *loc);
/* lc_invalidate, then lc_insert with the token that follows it, as one
 * step under the lock: the location of a value this handle just put. */
void lc_replace(struct lcache *c, const char *key, uint32_t klen, const struct lc_loc *loc);
/* Forgets key and makes every older token for it stale (a remove or a put
 * of it by this handle; called before the request and after its reply). */
void lc_invalidate(struct lcache *c, const char *key, uint32_t klen);
/* Forgets every entry and makes every older token stale (remove_prefix,
 * a master restart). */
void lc_clear(struct lcache *c);
/* Forgets key if its entry still says loc (a read found it stale). */
void lc_drop(struct lcache *c, const char *key, uint32_t klen, const struct lc_loc *loc);

/* Reads the master did not see, every one (eviction counts each read):
 * queued, and posted as one TOUCH batch once LC_TOUCH_BATCH keys are
 * waiting or the oldest waited LC_TOUCH_MS; lc_touch_flush sends them now.
 * An exists is a lookup and reports nothing. Best effort: a failed batch
 * only leaves the keys' priorities lower; a master from before TOUCH
 * refuses it, and lc_touch_refused stops the reports. */
void lc_touch(struct kvp *kvp, const char *key, uint32_t klen);
void lc_touch_refused(struct kvp *kvp);
void lc_touch_flush(struct kvp *kvp);
/* Sends the queue if it is due (cheap when not): once per get / exists. */
void lc_touch_poll(struct kvp *kvp);

/* The segments of one call's optimistic reads, looked up without a
 * refresh (segtab_peek: no master contact), the last one kept referenced:
 * lc_seg gives the segment if the location may be read by memcpy (mapped
 * here, its file not removed, and the handle's protocol allows it), else
 * NULL; lc_seg_end drops the reference. */
struct lc_segs {
	struct kvp *kvp;
	struct client_seg *seg;
	uint32_t id;
	bool gone;			/* seg's owner removed its file */
	bool readable;			/* seg may be read by memcpy (lc_seg's answer) */
};
struct client_seg *lc_seg(struct lc_segs *o, uint32_t id);
void lc_seg_end(struct lc_segs *o);

struct lc_stats {
	uint64_t hits;			/* reads and exists answered without the master */
	uint64_t fallbacks;		/* a hint that did not validate: asked the master */
	uint64_t touches;		/* keys sent to the master as read */
	uint64_t raced;			/* fallbacks whose extent changed under the copy */
};
void lc_stats(struct lcache *c, struct lc_stats *out);
/* Adds to the counters (a batch's totals: one atomic each, not one per key). */
void lc_count(struct lcache *c, uint64_t hits, uint64_t fallbacks);
void lc_count_raced(struct lcache *c);

#endif

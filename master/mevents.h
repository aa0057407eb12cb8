/* mevents: KV events — BlockStored, BlockRemoved and AllBlocksCleared in
 * vLLM's wire format (vllm/distributed/kv_events.py) on a ZMQ PUB socket,
 * with vLLM's ROUTER replay socket for late subscribers. The loop thread
 * only queues (mevents_stored/removed/cleared: a mutex held for a copy, a
 * full queue drops and counts); a publisher thread encodes batches with
 * msgpack-c's inline packers and owns the ZMQ sockets. libzmq.so.5 is
 * dlopen()ed by mevents_create, so a master without events never loads it.
 */
#ifndef KVP_MEVENTS_H
#define KVP_MEVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"

struct mevents;
struct master;
struct obj;

enum mev_medium { MEV_MEDIUM_NONE, MEV_MEDIUM_CPU, MEV_MEDIUM_DISK };

struct mevents_stats {
	uint64_t events;	/* events sent in a batch */
	uint64_t batches;	/* batches sent (the last seq + 1) */
	uint64_t dropped;	/* events dropped: queue full or out of memory */
	uint64_t replays;	/* replay requests served */
	uint64_t bad_requests;	/* replay requests refused by the decoder */
};

/* Loads libzmq, binds the PUB (and replay) socket of c's [master]
 * kv_events_* keys and starts the publisher thread. NULL with the reason
 * in err (also when the endpoint is empty: err is then ""). */
struct mevents *mevents_create(const struct kvp_conf *c, char *err, size_t errlen);
/* Sends what is queued (bounded wait), stops the thread, closes. */
void mevents_destroy(struct mevents *ev);

/* Loop thread: queue one event. key (klen bytes) names the block; pkey
 * the block it extends (NULL: none or unknown). */
void mevents_stored(struct mevents *ev, const uint8_t *key, size_t klen, const uint8_t *pkey,
		    size_t pklen, enum mev_medium medium);
void mevents_removed(struct mevents *ev, const uint8_t *key, size_t klen, enum mev_medium medium);
void mevents_cleared(struct mevents *ev);
void mevents_stats(struct mevents *ev, struct mevents_stats *st);

/* The object lifecycle, from the master's modules (each a no-op when
 * events are off): o, complete and in the table, got its first replica
 * of tier (a commit, an adoption, a demotion or promotion), or lost its
 * last one. */
void mevents_obj_stored(struct master *m, const struct obj *o, unsigned tier);
void mevents_obj_removed(struct master *m, const struct obj *o, unsigned tier);
/* Whether o has a replica of tier other than replica skip (-1: none). */
bool mevents_obj_has_tier(const struct obj *o, unsigned tier, int skip);

/* A key's block hash: the key itself when it is a decimal or 0x-hex u64
 * (as Mooncake's master reads keys), else FNV-1a 64 of its bytes. */
uint64_t mevents_block_hash(const uint8_t *key, size_t klen);

/* vLLM's replay request, frames as the ROUTER receives them: [identity,
 * "", start_seq (8 bytes big-endian)]. 0 and *start, or -EINVAL. */
int mevents_parse_replay(const uint8_t *const *frame, const size_t *len, size_t n,
			 uint64_t *start);

/* The encoder, for tests and the fuzz target: one batch of n events
 * (type 0 stored, 1 removed, 2 cleared) into a malloc()ed buffer. */
struct mev_item {
	uint8_t type, medium;
	bool has_parent;
	uint64_t hash, parent;
	char *key;		/* NUL-terminated, owned; NULL unless object_key */
};
struct mev_fmt {
	bool legacy;		/* vLLM's array layout (kv_events_legacy_compat) */
	uint64_t block_size;
	const char *backend_id;	/* "" none */
};
int mevents_encode(const struct mev_fmt *f, double ts, const struct mev_item *it, size_t n,
		   uint8_t **out, size_t *outlen);

#endif

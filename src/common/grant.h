/* grant: write grants, the MAC that lets a node accept a WRITE only into an
 * extent the master allocated to that put. Stateless but for a small
 * per-thread cache of key schedules; any thread may call. */
#ifndef KVP_GRANT_H
#define KVP_GRANT_H

#include <stdbool.h>
#include <stdint.h>

#include "wire.h"

/* A grant secret with its HMAC-SHA256 key schedule (RFC 2104: the two
 * padded-key blocks hashed once), so each grant costs two SHA-256 blocks.
 * The master keeps one per segment; grant_make() caches a few per thread. */
struct grant_key {
	uint8_t ipad_state[112];	/* SHA256_CTX after hashing key ^ ipad */
	uint8_t opad_state[112];	/* SHA256_CTX after hashing key ^ opad */
};
void grant_key_init(struct grant_key *k, const uint8_t secret[WIRE_SECRET_LEN]);
void grant_make_k(const struct grant_key *k, uint32_t segment_id, uint64_t generation,
		  uint64_t off, uint64_t alloc_len, uint8_t out[WIRE_GRANT_LEN]);

/* Computes a write grant (see above) into out[WIRE_GRANT_LEN]. */
void grant_make(const uint8_t secret[WIRE_SECRET_LEN], uint32_t segment_id,
		uint64_t generation, uint64_t off, uint64_t alloc_len,
		uint8_t out[WIRE_GRANT_LEN]);
/* Constant-time compare of a received grant with the expected one. */
bool grant_ok(const uint8_t secret[WIRE_SECRET_LEN], uint32_t segment_id,
		   uint64_t generation, uint64_t off, uint64_t alloc_len,
		   const uint8_t grant[WIRE_GRANT_LEN]);

#endif

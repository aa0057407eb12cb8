/* grant: write grants, the MAC that lets a node accept a WRITE only into an
 * extent the master allocated to that put. Stateless but for a small
 * per-thread cache of key schedules; any thread may call. */
#ifndef KVP_GRANT_H
#define KVP_GRANT_H

#include <stdbool.h>
#include <stdint.h>

#include "wire.h"

/* A grant secret's SipHash key (derived once: SHA-256 of the secret). The
 * master keeps one per segment; grant_make() caches a few per thread. */
struct grant_key {
	uint8_t key[16];
};
void grant_key_init(struct grant_key *k, const uint8_t secret[WIRE_SECRET_LEN]);
/* epoch: the granting master's (its HELLO server_epoch; with HA the etcd
 * revision of its election), so a grant names the leader that gave it. */
void grant_make_k(const struct grant_key *k, uint32_t segment_id, uint64_t generation,
		  uint64_t off, uint64_t alloc_len, uint64_t epoch, uint8_t out[WIRE_GRANT_LEN]);

/* SipHash-2-4 with a 128-bit output of n bytes (the grant MAC; exposed for
 * its test vectors). */
void grant_siphash128(const uint8_t key[16], const void *msg, size_t n, uint8_t out[16]);

/* Computes a write grant (see above) into out[WIRE_GRANT_LEN]. */
void grant_make(const uint8_t secret[WIRE_SECRET_LEN], uint32_t segment_id,
		uint64_t generation, uint64_t off, uint64_t alloc_len, uint64_t epoch,
		uint8_t out[WIRE_GRANT_LEN]);
/* Constant-time compare of a received grant with the expected one. */
bool grant_ok(const uint8_t secret[WIRE_SECRET_LEN], uint32_t segment_id,
		   uint64_t generation, uint64_t off, uint64_t alloc_len, uint64_t epoch,
		   const uint8_t grant[WIRE_GRANT_LEN]);

#endif

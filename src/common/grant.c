/* grant: the write-grant MAC (HMAC-SHA256 over segment, generation, offset
 * and length; see wire.h for where grants travel). Used by the master, which
 * issues grants, and the node, which checks them; libkvpool only forwards
 * them as bytes and does not link this module (nor libcrypto). */
#define OPENSSL_SUPPRESS_DEPRECATED	/* SHA256_CTX: see grant_key_init */
#include "grant.h"

#include <string.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }

/* The grant MAC is HMAC-SHA256 built from SHA-256 with the key schedule
 * kept (see struct grant_key): OpenSSL's one-shot HMAC() fetches the algorithm
 * and hashes the key on every call (about 9 us) while a grant is computed per
 * replica on every put, by the master and again by the node. SHA256_CTX is
 * deprecated in OpenSSL 3 but is the only API that can copy a keyed state. */
_Static_assert(sizeof(SHA256_CTX) <= sizeof(((struct grant_key *)0)->ipad_state),
	       "SHA256_CTX does not fit wire_grant_key");

void grant_key_init(struct grant_key *k, const uint8_t secret[WIRE_SECRET_LEN])
{
	uint8_t pad[SHA256_CBLOCK];
	SHA256_CTX c;

	memset(k, 0, sizeof(*k));
	memset(pad, 0x36, sizeof(pad));
	for (size_t i = 0; i < WIRE_SECRET_LEN; i++)
		pad[i] ^= secret[i];
	SHA256_Init(&c);
	SHA256_Update(&c, pad, sizeof(pad));
	memcpy(k->ipad_state, &c, sizeof(c));
	memset(pad, 0x5c, sizeof(pad));
	for (size_t i = 0; i < WIRE_SECRET_LEN; i++)
		pad[i] ^= secret[i];
	SHA256_Init(&c);
	SHA256_Update(&c, pad, sizeof(pad));
	memcpy(k->opad_state, &c, sizeof(c));
}

static void grant_mac(const struct grant_key *k, uint32_t segment_id, uint64_t generation,
		      uint64_t off, uint64_t alloc_len, uint8_t mac[SHA256_DIGEST_LENGTH])
{
	uint8_t msg[28], inner[SHA256_DIGEST_LENGTH];
	SHA256_CTX c;

	put32(msg, segment_id);
	put64(msg + 4, generation);
	put64(msg + 12, off);
	put64(msg + 20, alloc_len);
	memcpy(&c, k->ipad_state, sizeof(c));
	SHA256_Update(&c, msg, sizeof(msg));
	SHA256_Final(inner, &c);
	memcpy(&c, k->opad_state, sizeof(c));
	SHA256_Update(&c, inner, sizeof(inner));
	SHA256_Final(mac, &c);
}

void grant_make_k(const struct grant_key *k, uint32_t segment_id, uint64_t generation,
		  uint64_t off, uint64_t alloc_len, uint8_t out[WIRE_GRANT_LEN])
{
	uint8_t mac[SHA256_DIGEST_LENGTH];

	grant_mac(k, segment_id, generation, off, alloc_len, mac);
	memcpy(out, mac, WIRE_GRANT_LEN);
}

/* A few key schedules per thread, for callers that hold only the secret. */
#define GRANT_CACHE 4
struct grant_slot {
	uint8_t secret[WIRE_SECRET_LEN];
	struct grant_key key;
	uint64_t used;		/* 0 = empty */
};
static __thread struct grant_slot grant_cache[GRANT_CACHE];
static __thread uint64_t grant_clock;

static const struct grant_key *grant_key(const uint8_t secret[WIRE_SECRET_LEN])
{
	struct grant_slot *victim = &grant_cache[0];

	for (int i = 0; i < GRANT_CACHE; i++) {
		struct grant_slot *g = &grant_cache[i];

		if (g->used && memcmp(g->secret, secret, WIRE_SECRET_LEN) == 0) {
			g->used = ++grant_clock;
			return &g->key;
		}
		if (g->used < victim->used)
			victim = g;
	}
	memcpy(victim->secret, secret, WIRE_SECRET_LEN);
	grant_key_init(&victim->key, secret);
	victim->used = ++grant_clock;
	return &victim->key;
}

void grant_make(const uint8_t secret[WIRE_SECRET_LEN], uint32_t segment_id,
		uint64_t generation, uint64_t off, uint64_t alloc_len,
		uint8_t out[WIRE_GRANT_LEN])
{
	grant_make_k(grant_key(secret), segment_id, generation, off, alloc_len, out);
}

bool grant_ok(const uint8_t secret[WIRE_SECRET_LEN], uint32_t segment_id,
		   uint64_t generation, uint64_t off, uint64_t alloc_len,
		   const uint8_t grant[WIRE_GRANT_LEN])
{
	uint8_t mac[SHA256_DIGEST_LENGTH];

	grant_mac(grant_key(secret), segment_id, generation, off, alloc_len, mac);
	return CRYPTO_memcmp(mac, grant, WIRE_GRANT_LEN) == 0;
}

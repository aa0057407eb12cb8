/* grant: the write-grant MAC (SipHash-2-4 with its 128-bit output, keyed
 * from the segment's secret, over segment, generation, offset and length;
 * see wire.h for where grants travel). Used by the master, which issues
 * grants, and the node, which checks them; libkvpool only forwards them as
 * bytes and does not link this module (nor libcrypto). */
#include "grant.h"

#include <string.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }

static uint64_t ld64le(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND do { \
	v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32); \
	v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2; \
	v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0; \
	v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32); \
} while (0)

/* SipHash-2-4, 128-bit output (Aumasson and Bernstein's reference; the
 * same values as OpenSSL's EVP_MAC "SIPHASH" with size 16, which
 * t_wire checks). A grant costs about 30 ns where HMAC-SHA256 cost
 * 250-300 ns, once on the master and again on the node, per replica of
 * every put; SipHash is a PRF meant for exactly this (short inputs, a
 * secret 128-bit key), and a forged grant still needs the key. */
void grant_siphash128(const uint8_t key[16], const void *msg, size_t n, uint8_t out[16])
{
	const uint8_t *m = msg;
	uint64_t k0 = ld64le(key), k1 = ld64le(key + 8);
	uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
	uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
	uint64_t b = (uint64_t)n << 56;
	size_t left = n & 7;

	v1 ^= 0xee;
	for (const uint8_t *end = m + (n - left); m != end; m += 8) {
		uint64_t w = ld64le(m);

		v3 ^= w;
		SIPROUND;
		SIPROUND;
		v0 ^= w;
	}
	for (size_t i = 0; i < left; i++)
		b |= (uint64_t)m[i] << (8 * i);
	v3 ^= b;
	SIPROUND;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xee;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	put64(out, v0 ^ v1 ^ v2 ^ v3);
	v1 ^= 0xdd;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	put64(out + 8, v0 ^ v1 ^ v2 ^ v3);
}

/* The SipHash key: the first 16 bytes of SHA-256(secret), so that every
 * byte of the 32-byte secret counts. */
void grant_key_init(struct grant_key *k, const uint8_t secret[WIRE_SECRET_LEN])
{
	uint8_t d[SHA256_DIGEST_LENGTH];

	SHA256(secret, WIRE_SECRET_LEN, d);
	memcpy(k->key, d, sizeof(k->key));
	OPENSSL_cleanse(d, sizeof(d));
}

static void grant_mac(const struct grant_key *k, uint32_t segment_id, uint64_t generation,
		      uint64_t off, uint64_t alloc_len, uint64_t epoch, uint8_t mac[WIRE_GRANT_LEN])
{
	uint8_t msg[36];

	put32(msg, segment_id);
	put64(msg + 4, generation);
	put64(msg + 12, off);
	put64(msg + 20, alloc_len);
	put64(msg + 28, epoch);
	grant_siphash128(k->key, msg, sizeof(msg), mac);
}

void grant_make_k(const struct grant_key *k, uint32_t segment_id, uint64_t generation,
		  uint64_t off, uint64_t alloc_len, uint64_t epoch, uint8_t out[WIRE_GRANT_LEN])
{
	grant_mac(k, segment_id, generation, off, alloc_len, epoch, out);
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
		uint64_t generation, uint64_t off, uint64_t alloc_len, uint64_t epoch,
		uint8_t out[WIRE_GRANT_LEN])
{
	grant_make_k(grant_key(secret), segment_id, generation, off, alloc_len, epoch, out);
}

bool grant_ok(const uint8_t secret[WIRE_SECRET_LEN], uint32_t segment_id,
		   uint64_t generation, uint64_t off, uint64_t alloc_len, uint64_t epoch,
		   const uint8_t grant[WIRE_GRANT_LEN])
{
	uint8_t mac[WIRE_GRANT_LEN];

	grant_mac(grant_key(secret), segment_id, generation, off, alloc_len, epoch, mac);
	return CRYPTO_memcmp(mac, grant, WIRE_GRANT_LEN) == 0;
}

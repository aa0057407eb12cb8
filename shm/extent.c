/* extent: see extent.h. Encoder, hostile-input decoder and scanner of the
 * self-describing extent format. Pure functions over caller memory; no
 * global state, callable from any thread.
 */
#include "extent.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
/* libxxhash's run-time dispatch picks AVX2/AVX-512 when the CPU has them
 * (about 3x the SSE2 default on 1 MiB values); same hash values. */
#include <xxh_x86dispatch.h>
#endif

#define EXT_KEY_MAX 1024
#define EXT_CSUM_OFF 56		/* header checksum covers bytes 0..55 + key */
#ifndef EXT_COPY_CHUNK
#define EXT_COPY_CHUNK (64 * 1024)
#endif

static inline uint16_t ld16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return le16toh(v);
}

static inline uint32_t ld32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

static inline uint64_t ld64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return le64toh(v);
}

static inline void st16(uint8_t *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, sizeof(v));
}

static inline void st32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, sizeof(v));
}

static inline void st64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, sizeof(v));
}

uint64_t ext_checksum(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

int ext_csum_init(struct ext_csum *c)
{
	XXH3_state_t *s = XXH3_createState();

	c->state = s;
	if (!s)
		return -ENOMEM;
	XXH3_64bits_reset(s);
	return 0;
}

void ext_csum_update(struct ext_csum *c, const void *p, size_t n)
{
	XXH3_64bits_update(c->state, p, n);
}

uint64_t ext_csum_final(struct ext_csum *c)
{
	uint64_t v = XXH3_64bits_digest(c->state);

	XXH3_freeState(c->state);
	c->state = NULL;
	return v;
}

void ext_copy_csum(void *dst, const void *src, size_t n, struct ext_csum *c)
{
	uint8_t *d = dst;
	const uint8_t *s = src;

	while (n) {
		size_t k = n < EXT_COPY_CHUNK ? n : EXT_COPY_CHUNK;

		memcpy(d, s, k);
		/* Hash the destination: the chunk is hot in L1/L2 and these
		 * are the bytes the caller gets, even if src changes now. */
		XXH3_64bits_update(c->state, d, k);
		d += k;
		s += k;
		n -= k;
	}
}

uint64_t ext_copy_checksum(void *dst, const void *src, size_t n)
{
	struct ext_csum c;

	if (n <= EXT_COPY_CHUNK || ext_csum_init(&c) < 0) {
		/* Small (or no memory for the state): two passes cost nothing. */
		memcpy(dst, src, n);
		return XXH3_64bits(dst, n);
	}
	ext_copy_csum(dst, src, n, &c);
	return ext_csum_final(&c);
}

/* Header checksum: bytes 0..55 with the live magic, then the key. Using the
 * live magic lets a tombstone (only the magic changed) still prove that the
 * rest of its header is intact. */
static uint64_t hdr_checksum(const uint8_t *hdr, const uint8_t *key, uint32_t key_len)
{
	uint8_t buf[EXT_CSUM_OFF + EXT_KEY_MAX];

	/* Only an encoder given a bad key_len gets here with more; decode
	 * refuses such a header before checksumming. */
	if (key_len > EXT_KEY_MAX)
		key_len = EXT_KEY_MAX;
	memcpy(buf, hdr, EXT_CSUM_OFF);
	st32(buf, EXT_MAGIC);
	memcpy(buf + EXT_CSUM_OFF, key, key_len);
	return XXH3_64bits(buf, EXT_CSUM_OFF + (size_t)key_len);
}

void ext_encode(void *dst, const struct ext_hdr *h, const void *key)
{
	uint8_t *p = dst;

	st32(p + 0, EXT_MAGIC);
	st16(p + 4, EXT_VERSION);
	st16(p + 6, h->flags);
	st32(p + 8, h->key_len);
	st32(p + 12, 0);
	st64(p + 16, h->value_len);
	st64(p + 24, h->value_checksum);
	st64(p + 32, h->generation);
	st64(p + 40, h->seg_uuid);
	st64(p + 48, h->put_time_ns);
	memcpy(p + EXT_HDR_SIZE, key, h->key_len);
	st64(p + EXT_CSUM_OFF, hdr_checksum(p, p + EXT_HDR_SIZE, h->key_len));
}

int ext_decode(const void *src, uint64_t avail, uint64_t max_value,
	       struct ext_hdr *h, const uint8_t **key)
{
	const uint8_t *p = src;
	uint32_t magic, key_len;
	uint64_t value_len, room;

	if (avail < EXT_HDR_SIZE)
		return avail >= 4 && ld32(p) != EXT_MAGIC && ld32(p) != EXT_TOMB ?
			-EINVAL : -ERANGE;
	magic = ld32(p);
	if (magic != EXT_MAGIC && magic != EXT_TOMB)
		return -EINVAL;
	if (ld16(p + 4) != EXT_VERSION || ld32(p + 12) != 0)
		return -EINVAL;
	key_len = ld32(p + 8);
	if (key_len == 0 || key_len > EXT_KEY_MAX)
		return -EINVAL;
	room = avail - EXT_HDR_SIZE;
	if (key_len > room)
		return -ERANGE;
	if (hdr_checksum(p, p + EXT_HDR_SIZE, key_len) != ld64(p + EXT_CSUM_OFF))
		return -EINVAL;

	value_len = ld64(p + 16);
	h->magic = magic;
	h->version = EXT_VERSION;
	h->flags = ld16(p + 6);
	h->key_len = key_len;
	h->value_len = value_len;
	h->value_checksum = ld64(p + 24);
	h->generation = ld64(p + 32);
	h->seg_uuid = ld64(p + 40);
	h->put_time_ns = ld64(p + 48);
	if (key)
		*key = p + EXT_HDR_SIZE;

	if (value_len > room - key_len || (max_value && value_len > max_value))
		return -ERANGE;
	return magic == EXT_TOMB ? -ENOENT : 0;
}

bool ext_verify(const void *src, const struct ext_hdr *h)
{
	const uint8_t *v = (const uint8_t *)src + EXT_HDR_SIZE + h->key_len;

	return XXH3_64bits(v, h->value_len) == h->value_checksum;
}

void ext_tombstone(void *dst)
{
	st32(dst, EXT_TOMB);
}

static inline uint64_t round_up(uint64_t v, uint64_t align)
{
	return (v + align - 1) & ~(align - 1);
}

int ext_scan_ex(const void *base, uint64_t start, uint64_t end, uint32_t align,
		uint64_t seg_uuid, uint64_t max_value, bool report_bad, bool verify,
		int (*cb)(const struct ext_found *f, void *arg), void *arg,
		struct ext_scan_stats *st)
{
	struct ext_scan_stats dummy;
	const uint8_t *b = base;
	uint64_t pos;

	if (!st)
		st = &dummy;
	memset(st, 0, sizeof(*st));
	if (align < 64 || (align & (align - 1)) || start > UINT64_MAX - align)
		return -EINVAL;

	/* Why only a matching seg_uuid counts: a value is arbitrary bytes and
	 * may well contain a complete, checksummed extent image (a value that
	 * is itself a copied segment or spill file, a test fixture, an engine
	 * caching our own blocks). Its header would decode fine at an aligned
	 * offset inside the value. An extent written into this segment carries
	 * this segment's random 64-bit uuid, so an image copied from anywhere
	 * else is rejected; only a value holding an image of this very
	 * segment could still fool us, and then its outer extent, verified
	 * first, makes the scan jump over it. */
	for (pos = round_up(start, align); pos < end && end - pos >= EXT_HDR_SIZE;) {
		struct ext_found f;
		int rc = ext_decode(b + pos, end - pos, max_value, &f.h, &f.key);

		if (rc == -ENOENT && (!seg_uuid || f.h.seg_uuid == seg_uuid))
			st->tombstones++;
		if (rc < 0 || (seg_uuid && f.h.seg_uuid != seg_uuid)) {
			if (rc == 0)
				st->foreign++;
			/* A tombstone's range may already be partly reused by
			 * newer extents, so its length is never trusted. */
			pos += align;
			continue;
		}
		f.off = pos;
		f.alloc_len = round_up(ext_size(f.h.key_len, f.h.value_len), align);
		f.checksum_ok = verify && ext_verify(b + pos, &f.h);
		if (verify && !f.checksum_ok) {
			st->bad_checksum++;
			if (!report_bad) {
				/* A stale header whose value was overwritten by
				 * newer extents: look inside it. */
				pos += align;
				continue;
			}
		}
		st->live++;
		st->live_bytes += f.alloc_len;
		st->value_bytes += f.h.value_len;
		rc = cb(&f, arg);
		if (rc)
			return rc;
		if (verify && !f.checksum_ok) {
			pos += align;
			continue;
		}
		/* Verified (or trusted): nothing newer can start inside it. */
		if (f.alloc_len > end - pos)
			break;
		pos += f.alloc_len;
	}
	return 0;
}

int ext_scan(const void *base, uint64_t start, uint64_t end, uint32_t align,
	     uint64_t seg_uuid, uint64_t max_value, bool report_bad,
	     int (*cb)(const struct ext_found *f, void *arg), void *arg)
{
	return ext_scan_ex(base, start, end, align, seg_uuid, max_value, report_bad,
			   true, cb, arg, NULL);
}

/* t_extent: the extent format. Encode/decode round trip, every truncation,
 * every single-bit and whole-byte corruption of header and key, length
 * limits, tombstones, checksums (one-shot, streaming, fused copy), and the
 * scanner over buffers holding hundreds of random extents, tombstones,
 * stale headers, garbage and foreign extent images: it must find exactly the
 * live ones. SEED=n reproduces a run.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "extent.h"
#include "testlib.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng_state = x;
	return x * 0x2545f4914f6cdd1dull;
}

static void fill_random(void *p, size_t n)
{
	uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)rnd();
}

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* Writes a complete extent (header, key, value) at dst; returns its size. */
static uint64_t put_extent(uint8_t *dst, const void *key, uint32_t klen, const void *val,
			   uint64_t vlen, uint64_t gen, uint64_t uuid)
{
	struct ext_hdr h = {
		.flags = 0, .key_len = klen, .value_len = vlen,
		.value_checksum = ext_checksum(val, vlen), .generation = gen,
		.seg_uuid = uuid, .put_time_ns = 1700000000123456789ull + gen,
	};

	ext_encode(dst, &h, key);
	memmove(dst + EXT_HDR_SIZE + klen, val, vlen);
	return ext_size(klen, vlen);
}

static void test_roundtrip(void)
{
	uint8_t buf[8192], val[3000];
	const char *key = "prefix/0123abcd_0_k";
	uint32_t klen = (uint32_t)strlen(key);
	struct ext_hdr h;
	const uint8_t *k;
	uint64_t sz;

	fill_random(val, sizeof(val));
	sz = put_extent(buf, key, klen, val, sizeof(val), 42, 0x1234);
	REQUIRE(sz == 64 + klen + sizeof(val), "size");
	REQUIRE(ext_decode(buf, sz, 0, &h, &k) == 0, "decode");
	REQUIRE(h.magic == EXT_MAGIC && h.version == EXT_VERSION && h.key_len == klen &&
	        h.value_len == sizeof(val) && h.generation == 42 && h.seg_uuid == 0x1234 &&
	        h.put_time_ns == 1700000000123456789ull + 42 &&
	        h.value_checksum == ext_checksum(val, sizeof(val)), "fields");
	REQUIRE(k == buf + 64 && memcmp(k, key, klen) == 0, "key");
	REQUIRE(ext_verify(buf, &h), "verify");
	/* Little-endian on the wire, as documented. */
	REQUIRE(buf[0] == 0x4b && buf[1] == 0x56 && buf[2] == 0x50 && buf[3] == 0x58, "magic bytes");
	REQUIRE(buf[8] == klen && buf[9] == 0 && buf[32] == 42, "LE fields");

	/* Every truncation fails, the exact size works. */
	for (uint64_t a = 0; a < sz; a++) {
		int rc = ext_decode(buf, a, 0, &h, &k);

		REQUIRE(rc == -ERANGE, "avail %" PRIu64 " -> %d", a, rc);
	}
	/* max_value */
	REQUIRE(ext_decode(buf, sz, sizeof(val), &h, &k) == 0, "max_value = len");
	REQUIRE(ext_decode(buf, sz, sizeof(val) - 1, &h, &k) == -ERANGE, "max_value < len");

	/* Every bit of header and key, and every byte replaced by its
	 * complement or by zero: refused (the value is the value checksum's
	 * job). */
	for (uint64_t i = 0; i < 64 + klen; i++) {
		uint8_t save = buf[i];

		for (int b = 0; b < 8; b++) {
			buf[i] = save ^ (uint8_t)(1u << b);
			REQUIRE(ext_decode(buf, sz, 0, &h, &k) != 0, "bit %d of byte %" PRIu64, b, i);
		}
		buf[i] = (uint8_t)~save;
		REQUIRE(ext_decode(buf, sz, 0, &h, &k) != 0, "~byte %" PRIu64, i);
		if (save) {
			buf[i] = 0;
			REQUIRE(ext_decode(buf, sz, 0, &h, &k) != 0, "zeroed byte %" PRIu64, i);
		}
		buf[i] = save;
	}
	REQUIRE(ext_decode(buf, sz, 0, &h, &k) == 0, "restored");

	/* A corrupt value passes decode but fails verify. */
	buf[64 + klen + 1234] ^= 1;
	REQUIRE(ext_decode(buf, sz, 0, &h, &k) == 0 && !ext_verify(buf, &h), "value corruption");
	buf[64 + klen + 1234] ^= 1;

	/* Tombstone: -ENOENT, header still filled, only the magic changed. */
	ext_tombstone(buf);
	memset(&h, 0, sizeof(h));
	REQUIRE(ext_decode(buf, sz, 0, &h, &k) == -ENOENT, "tombstone");
	REQUIRE(h.magic == EXT_TOMB && h.key_len == klen && h.generation == 42 &&
	        h.value_len == sizeof(val), "tombstone header");
	REQUIRE(memcmp(buf + 4, "\x01\x00", 2) == 0, "version kept");
	buf[20] ^= 1;
	REQUIRE(ext_decode(buf, sz, 0, &h, &k) == -EINVAL, "corrupt tombstone");
}

/* Headers with a valid checksum but impossible lengths. */
static void test_limits(void)
{
	static uint8_t buf[4096];
	uint8_t key[1100], v = 7;
	struct ext_hdr h = { .key_len = 1024, .value_len = 1, .value_checksum = ext_checksum(&v, 1),
			     .seg_uuid = 9 };
	const uint8_t *k;

	memset(key, 'k', sizeof(key));
	ext_encode(buf, &h, key);
	buf[64 + 1024] = v;
	REQUIRE(ext_decode(buf, sizeof(buf), 0, &h, &k) == 0, "key_len 1024");
	h.key_len = 1025;
	ext_encode(buf, &h, key);
	REQUIRE(ext_decode(buf, sizeof(buf), 0, &h, &k) == -EINVAL, "key_len 1025");
	h.key_len = 0;
	ext_encode(buf, &h, key);
	REQUIRE(ext_decode(buf, sizeof(buf), 0, &h, &k) == -EINVAL, "key_len 0");
	h.key_len = 10;
	h.value_len = sizeof(buf) - 64 - 10;
	ext_encode(buf, &h, key);
	REQUIRE(ext_decode(buf, sizeof(buf), 0, &h, &k) == 0, "value fills avail");
	h.value_len++;
	ext_encode(buf, &h, key);
	REQUIRE(ext_decode(buf, sizeof(buf), 0, &h, &k) == -ERANGE, "value beyond avail");
	h.value_len = UINT64_MAX;
	ext_encode(buf, &h, key);
	REQUIRE(ext_decode(buf, sizeof(buf), 0, &h, &k) == -ERANGE, "value_len 2^64-1");
	h.value_len = UINT64_MAX - 64;
	ext_encode(buf, &h, key);
	REQUIRE(ext_decode(buf, sizeof(buf), 0, &h, &k) == -ERANGE, "value_len wrapping");
	/* version and reserved are checked before the checksum */
	h.value_len = 1;
	ext_encode(buf, &h, key);
	buf[4] = 2;
	REQUIRE(ext_decode(buf, sizeof(buf), 0, &h, &k) == -EINVAL, "version 2");
	ext_encode(buf, &h, key);
	buf[13] = 1;
	REQUIRE(ext_decode(buf, sizeof(buf), 0, &h, &k) == -EINVAL, "reserved != 0");
}

static void test_checksums(void)
{
	static const size_t sizes[] = { 0, 1, 63, 4096, 65535, 65536, 65537, (1 << 20) + 13 };
	size_t max = (1 << 20) + 13;
	uint8_t *src = malloc(max), *dst = malloc(max);

	REQUIRE(src && dst, "oom");
	fill_random(src, max);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		uint64_t want = ext_checksum(src, n);
		struct ext_csum c;
		size_t off = 0;

		/* streaming, random pieces */
		REQUIRE(ext_csum_init(&c) == 0, "init");
		while (off < n) {
			size_t k = 1 + rnd() % (n - off < 100000 ? n - off : 100000);

			ext_csum_update(&c, src + off, k);
			off += k;
		}
		REQUIRE(ext_csum_final(&c) == want, "streaming %zu", n);
		REQUIRE(c.state == NULL, "final frees the state");

		memset(dst, 0, max);
		REQUIRE(ext_csum_init(&c) == 0, "init");
		ext_copy_csum(dst, src, n, &c);
		REQUIRE(ext_csum_final(&c) == want && memcmp(dst, src, n) == 0, "copy_csum %zu", n);

		memset(dst, 0, max);
		REQUIRE(ext_copy_checksum(dst, src, n) == want && memcmp(dst, src, n) == 0,
		        "copy_checksum %zu", n);
	}
	REQUIRE(ext_checksum("a", 1) != ext_checksum("b", 1), "checksum distinguishes");
	free(src);
	free(dst);
}

/* ---- scanning ---- */

struct expect {
	uint64_t off, alloc_len, gen, vlen;
	uint32_t klen;
	uint8_t key[1024];
	int kind;		/* 0 live, 1 bad value checksum, 2 tombstone */
	int seen;
};

struct scan_ctx {
	struct expect *e;
	size_t n;
	const uint8_t *base;
	int stop_after;
	int calls;
	int unexpected;
};

static int scan_cb(const struct ext_found *f, void *arg)
{
	struct scan_ctx *c = arg;
	size_t i;

	c->calls++;
	for (i = 0; i < c->n; i++)
		if (c->e[i].off == f->off)
			break;
	if (i == c->n) {
		fprintf(stderr, "unexpected extent at %" PRIu64 "\n", f->off);
		c->unexpected++;
		return 0;
	}
	REQUIRE(f->alloc_len == c->e[i].alloc_len, "alloc_len at %" PRIu64, f->off);
	REQUIRE(f->h.generation == c->e[i].gen && f->h.value_len == c->e[i].vlen &&
	        f->h.key_len == c->e[i].klen && memcmp(f->key, c->e[i].key, c->e[i].klen) == 0 &&
	        f->key == c->base + f->off + 64, "fields at %" PRIu64, f->off);
	REQUIRE(f->checksum_ok == (c->e[i].kind == 0), "checksum_ok at %" PRIu64, f->off);
	REQUIRE(c->e[i].kind != 2, "tombstone reported");
	c->e[i].seen++;
	return c->stop_after && c->calls == c->stop_after ? 77 : 0;
}

/* Hundreds of random extents with holes of garbage between them. Holes
 * sometimes start with the live magic at an aligned offset (a header that
 * does not check out). */
static void test_scan_random(uint32_t align, uint64_t uuid)
{
	const uint64_t size = 8 << 20;
	uint8_t *buf = malloc(size), *val = malloc(1 << 16);
	struct expect *e = calloc(1000, sizeof(*e));
	struct ext_scan_stats st;
	struct scan_ctx c;
	size_t n = 0, nlive = 0, nbad = 0, ntomb = 0;
	uint64_t pos = 0;
	int rc;

	REQUIRE(buf && val && e, "oom");
	fill_random(buf, size);
	while (n < 1000) {
		struct expect *x = &e[n];
		uint64_t gap = rnd() % 4 ? 0 : (rnd() % 8) * align;
		uint64_t sz;
		int r = (int)(rnd() % 10);

		if (gap) {
			/* a hole: garbage, maybe posing as a header (inside the
			 * buffer: the last extent may end exactly at its end) */
			if (pos + gap > size)
				break;
			if (rnd() % 2)
				memcpy(buf + pos, "\x4b\x56\x50\x58", 4);
			pos += gap;
		}
		x->klen = 1 + (uint32_t)(rnd() % (rnd() % 4 ? 64 : 1024));
		x->vlen = 1 + rnd() % (rnd() % 4 ? 2000 : 60000);
		if (pos + round_up(ext_size(x->klen, x->vlen), align) > size)
			break;
		fill_random(x->key, x->klen);
		fill_random(val, x->vlen);
		x->gen = n + 1;
		x->off = pos;
		sz = put_extent(buf + pos, x->key, x->klen, val, x->vlen, x->gen, uuid ? uuid : 5);
		x->alloc_len = round_up(sz, align);
		if (r == 0) {
			x->kind = 1;	/* torn value */
			buf[pos + 64 + x->klen + rnd() % x->vlen] ^= 0x40;
			nbad++;
		} else if (r == 1) {
			x->kind = 2;
			ext_tombstone(buf + pos);
			ntomb++;
		} else {
			nlive++;
		}
		pos += x->alloc_len;
		n++;
	}
	REQUIRE(n > 200, "only %zu extents placed", n);

	/* report_bad = false: exactly the good live ones */
	c = (struct scan_ctx){ .e = e, .n = n, .base = buf };
	rc = ext_scan_ex(buf, 0, size, align, uuid, 0, false, true, scan_cb, &c, &st);
	REQUIRE(rc == 0 && c.unexpected == 0, "scan rc %d, %d unexpected", rc, c.unexpected);
	for (size_t i = 0; i < n; i++) {
		REQUIRE(e[i].seen == (e[i].kind == 0), "extent %zu (kind %d) seen %d times", i,
		        e[i].kind, e[i].seen);
		e[i].seen = 0;
	}
	REQUIRE(st.live == nlive && st.bad_checksum == nbad && st.tombstones == ntomb,
	        "stats live %" PRIu64 "/%zu bad %" PRIu64 "/%zu tomb %" PRIu64 "/%zu",
	        st.live, nlive, st.bad_checksum, nbad, st.tombstones, ntomb);

	/* report_bad = true: the torn ones too, flagged */
	c = (struct scan_ctx){ .e = e, .n = n, .base = buf };
	rc = ext_scan(buf, 0, size, align, uuid, 0, true, scan_cb, &c);
	REQUIRE(rc == 0 && c.unexpected == 0, "scan rc %d", rc);
	for (size_t i = 0; i < n; i++) {
		REQUIRE(e[i].seen == (e[i].kind != 2), "extent %zu (kind %d) seen %d times", i,
		        e[i].kind, e[i].seen);
		e[i].seen = 0;
	}

	/* The wrong uuid sees nothing; the callback's value stops the scan. */
	if (uuid) {
		c = (struct scan_ctx){ .e = e, .n = n, .base = buf };
		rc = ext_scan_ex(buf, 0, size, align, uuid + 1, 0, true, true, scan_cb, &c, &st);
		REQUIRE(rc == 0 && c.calls == 0 && st.foreign == nlive + nbad, "foreign uuid");
	}
	c = (struct scan_ctx){ .e = e, .n = n, .base = buf, .stop_after = 3 };
	REQUIRE(ext_scan(buf, 0, size, align, uuid, 0, false, scan_cb, &c) == 77 && c.calls == 3,
	        "stop");
	free(buf);
	free(val);
	free(e);
}

static int collect_cb(const struct ext_found *f, void *arg)
{
	uint64_t *offs = arg;

	offs[++offs[0]] = f->off;
	return offs[0] == 63 ? 1 : 0;
}

/* The cases that make the scanner step by the alignment. */
static void test_scan_cases(void)
{
	const uint32_t A = 4096;
	const uint64_t U = 0xabcdef, OTHER = 0x5555;
	static uint8_t buf[1 << 20], val[200000], img[8192];
	uint64_t offs[64], sz;
	struct ext_scan_stats st;

	/* 1. A tombstoned big extent whose range was partly reused: the
	 * newer extent inside it is found. */
	memset(buf, 0, sizeof(buf));
	fill_random(val, sizeof(val));
	put_extent(buf, "old", 3, val, 100000, 1, U);
	ext_tombstone(buf);
	put_extent(buf + 8 * A, "new", 3, val, 5000, 2, U);
	offs[0] = 0;
	REQUIRE(ext_scan_ex(buf, 0, sizeof(buf), A, U, 0, false, true, collect_cb, offs, &st) == 0,
	        "scan 1");
	REQUIRE(offs[0] == 1 && offs[1] == 8 * A && st.tombstones == 1, "reuse inside tombstone");

	/* 2. A stale header (freed without tombstone, value overwritten by a
	 * newer extent): the newer one is found, the stale one only with
	 * report_bad. */
	memset(buf, 0, sizeof(buf));
	put_extent(buf, "stale", 5, val, 100000, 1, U);
	put_extent(buf + 4 * A, "newer", 5, val + 7, 3000, 2, U);
	offs[0] = 0;
	ext_scan(buf, 0, sizeof(buf), A, U, 0, false, collect_cb, offs);
	REQUIRE(offs[0] == 1 && offs[1] == 4 * A, "stale header: newer found");
	offs[0] = 0;
	ext_scan(buf, 0, sizeof(buf), A, U, 0, true, collect_cb, offs);
	REQUIRE(offs[0] == 2 && offs[1] == 0 && offs[2] == 4 * A, "stale header reported as bad");

	/* 3. A value that contains a valid extent image of another segment,
	 * at an aligned offset. The outer extent is tombstoned, so the
	 * scanner walks through the value: the image must not be reported. */
	memset(buf, 0, sizeof(buf));
	sz = put_extent(img, "inner", 5, val, 1000, 9, OTHER);
	memcpy(val + 2 * A - 64 - 5, img, sz);	/* lands at 2*A in the segment */
	put_extent(buf, "outer", 5, val, 50000, 1, U);
	ext_tombstone(buf);
	offs[0] = 0;
	ext_scan_ex(buf, 0, sizeof(buf), A, U, 0, true, true, collect_cb, offs, &st);
	REQUIRE(offs[0] == 0 && st.foreign == 1, "foreign image inside a value reported");
	offs[0] = 0;
	ext_scan(buf, 0, sizeof(buf), A, 0, 0, true, collect_cb, offs);
	REQUIRE(offs[0] == 1 && offs[1] == 2 * A, "uuid 0 = any: the image is seen");
	/* Live outer extent: verified, so the scanner jumps over its value
	 * even when the image inside claims this very segment. */
	sz = put_extent(img, "inner", 5, val + 9000, 1000, 9, U);
	memcpy(val + 2 * A - 64 - 5, img, sz);
	put_extent(buf, "outer", 5, val, 50000, 1, U);
	offs[0] = 0;
	ext_scan(buf, 0, sizeof(buf), A, U, 0, true, collect_cb, offs);
	REQUIRE(offs[0] == 1 && offs[1] == 0, "image inside a live value reported");
	/* verify = false trusts lengths and reports checksum_ok = false */
	offs[0] = 0;
	ext_scan_ex(buf, 0, sizeof(buf), A, U, 0, true, false, collect_cb, offs, &st);
	REQUIRE(offs[0] == 1 && offs[1] == 0 && st.bad_checksum == 0, "no-verify scan");

	/* 4. Bounds: start rounds up, an extent crossing end is not
	 * reported, a bad alignment is refused. */
	memset(buf, 0, sizeof(buf));
	put_extent(buf + A, "a", 1, val, 100, 1, U);
	put_extent(buf + 2 * A, "b", 1, val, 3 * A, 2, U);
	sz = ext_size(1, 3 * A);
	offs[0] = 0;
	ext_scan(buf, 1, 6 * A, A, U, 0, true, collect_cb, offs);
	REQUIRE(offs[0] == 2 && offs[1] == A && offs[2] == 2 * A, "bounds");
	offs[0] = 0;
	ext_scan(buf, A + 1, 6 * A, A, U, 0, true, collect_cb, offs);
	REQUIRE(offs[0] == 1 && offs[1] == 2 * A, "start rounds up");
	offs[0] = 0;
	ext_scan(buf, 0, 2 * A + sz - 1, A, U, 0, true, collect_cb, offs);
	REQUIRE(offs[0] == 1 && offs[1] == A, "extent crossing end");
	offs[0] = 0;
	ext_scan(buf, 0, 2 * A + sz, A, U, 0, true, collect_cb, offs);
	REQUIRE(offs[0] == 2 && offs[2] == 2 * A, "extent ending at end");
	offs[0] = 0;
	ext_scan(buf, 0, 6 * A, A, U, 1000, true, collect_cb, offs);
	REQUIRE(offs[0] == 1 && offs[1] == A, "max_value");
	REQUIRE(ext_scan(buf, 0, sizeof(buf), 100, U, 0, true, collect_cb, offs) == -EINVAL, "align 100");
	REQUIRE(ext_scan(buf, 0, sizeof(buf), 32, U, 0, true, collect_cb, offs) == -EINVAL, "align 32");
	REQUIRE(ext_scan(buf, 0, 63, 64, U, 0, true, collect_cb, offs) == 0, "tiny range");
	REQUIRE(ext_scan(buf, 100, 50, 64, U, 0, true, collect_cb, offs) == 0, "empty range");
}

int main(void)
{
	const char *s = getenv("SEED");

	rng_state = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
	if (!rng_state)
		rng_state = 1;
	printf("t_extent: SEED=%" PRIu64 "\n", rng_state);
	fflush(stdout);
	test_roundtrip();
	test_limits();
	test_checksums();
	test_scan_cases();
	test_scan_random(4096, 0x77aa77aa77aa77aaull);
	test_scan_random(64, 0x1234);
	test_scan_random(4096, 0);
	printf("t_extent: ok\n");
	return 0;
}

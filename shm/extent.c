/* extent: see extent.h. Encoder, hostile-input decoder and scanner of the
 * self-describing extent format, and the value checksum (XXH3-64, fused
 * with copies). Pure functions over caller memory; the only global is the
 * cached choice of SIMD loop for this CPU. Callable from any thread.
 */
#include "extent.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define EXT_KEY_MAX 1024
#define EXT_CSUM_OFF 56		/* header checksum covers bytes 0..55 + key */

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

/* ---- value checksum: XXH3-64, computed in the same pass as the copy ----
 *
 * libxxhash hashes a buffer, so "copy and verify" with it is two passes
 * (copy, then hash the copy). XXH3-64's long-input loop is simple enough to
 * run inside the copy: every 64-byte stripe is loaded once into a vector
 * register, stored to the destination and fed to the accumulators from that
 * same register, so the hash covers exactly the bytes the caller got. With
 * the source (and destination) prefetched a few KiB ahead this runs at
 * memcpy speed from cold memory, where copy-then-hash costs 1.3-1.5x
 * (tests/bench/b_checksum.c). Values are identical to XXH3_64bits(), which
 * remains the reference for short inputs (t_copy_csum checks both).
 */
#define XH_STRIPE 64
#define XH_BLOCK_STRIPES 16		/* (secret size - 64) / 8 */
#define XH_BUF 256			/* held back until the input is long */
#define XH_PREFETCH 4096		/* bytes ahead: past the L2 streamer's reach */
#define XH_NT_MIN 8192			/* streaming stores from this many bytes of one piece */

#define XH_P32_1 0x9E3779B1u
#define XH_P32_2 0x85EBCA77u
#define XH_P32_3 0xC2B2AE3Du
#define XH_P64_1 0x9E3779B185EBCA87ull
#define XH_P64_2 0xC2B2AE3D27D4EB4Full
#define XH_P64_3 0x165667B19E3779F9ull
#define XH_P64_4 0x85EBCA77C2B2AE63ull
#define XH_P64_5 0x27D4EB2F165667C5ull

/* XXH3's default secret (xxhash.h XXH3_kSecret). */
static const uint8_t xh_secret[192] __attribute__((aligned(64))) = {
	0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
	0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
	0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
	0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
	0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
	0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
	0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
	0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
	0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
	0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
	0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
	0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

/* Streaming state. Stripes are accumulated as soon as a later byte is
 * known to exist (XXH3 treats the stripe holding the last byte apart). */
struct xh_state {
	uint64_t acc[8];
	uint64_t total;			/* bytes fed */
	unsigned stripe;		/* stripes accumulated in the current block */
	unsigned buffered;		/* bytes in buf, not accumulated yet */
	uint8_t buf[XH_BUF];		/* all input while total <= XH_BUF, else the tail */
	uint8_t last[XH_STRIPE];	/* the last stripe accumulated */
};

/* Accumulates nst stripes of src into acc, scrambling after each block;
 * when dst is not NULL also stores each stripe there (from the register
 * that was hashed). */
typedef void (*xh_stripes_fn)(uint64_t *acc, uint8_t *dst, const uint8_t *src, size_t nst,
			      unsigned *stripe);

static void xh_acc_scalar(uint64_t *acc, const uint8_t *in, const uint8_t *key)
{
	for (int i = 0; i < 8; i++) {
		uint64_t v = ld64(in + 8 * i), k = v ^ ld64(key + 8 * i);

		acc[i ^ 1] += v;
		acc[i] += (k & 0xffffffffu) * (k >> 32);
	}
}

static void xh_scramble_scalar(uint64_t *acc)
{
	for (int i = 0; i < 8; i++) {
		uint64_t a = acc[i];

		a ^= a >> 47;
		a ^= ld64(xh_secret + 128 + 8 * i);
		acc[i] = a * XH_P32_1;
	}
}

static void xh_stripes_scalar(uint64_t *acc, uint8_t *dst, const uint8_t *src, size_t nst,
			      unsigned *stripe)
{
	unsigned s = *stripe;

	for (size_t n = 0; n < nst; n++) {
		const uint8_t *in = src + XH_STRIPE * n;

		if (dst) {
			memcpy(dst + XH_STRIPE * n, in, XH_STRIPE);
			in = dst + XH_STRIPE * n;
		}
		xh_acc_scalar(acc, in, xh_secret + 8 * s);
		if (++s == XH_BLOCK_STRIPES) {
			xh_scramble_scalar(acc);
			s = 0;
		}
	}
	*stripe = s;
}

#if defined(__x86_64__)
/* One stripe (d0 d1) into the accumulators with key stripe s of the
 * block, and the block's scramble after its last stripe: XXH3's
 * accumulate step on AVX2. Returns the next stripe number. */
__attribute__((target("avx2"), always_inline))
static inline unsigned xh_acc_avx2(__m256i *a0, __m256i *a1, __m256i d0, __m256i d1, unsigned s)
{
	const uint8_t *key = xh_secret + 8 * s;
	__m256i k0 = _mm256_xor_si256(d0, _mm256_loadu_si256((const __m256i *)key));
	__m256i k1 = _mm256_xor_si256(d1, _mm256_loadu_si256((const __m256i *)(key + 32)));
	__m256i p0 = _mm256_mul_epu32(k0, _mm256_shuffle_epi32(k0, _MM_SHUFFLE(0, 3, 0, 1)));
	__m256i p1 = _mm256_mul_epu32(k1, _mm256_shuffle_epi32(k1, _MM_SHUFFLE(0, 3, 0, 1)));

	*a0 = _mm256_add_epi64(*a0, _mm256_add_epi64(p0,
			_mm256_shuffle_epi32(d0, _MM_SHUFFLE(1, 0, 3, 2))));
	*a1 = _mm256_add_epi64(*a1, _mm256_add_epi64(p1,
			_mm256_shuffle_epi32(d1, _MM_SHUFFLE(1, 0, 3, 2))));
	if (++s < XH_BLOCK_STRIPES)
		return s;
	const __m256i prime = _mm256_set1_epi32((int)XH_P32_1);
	const __m256i sk0 = _mm256_loadu_si256((const __m256i *)(xh_secret + 128));
	const __m256i sk1 = _mm256_loadu_si256((const __m256i *)(xh_secret + 160));
	__m256i x0 = _mm256_xor_si256(_mm256_xor_si256(*a0, _mm256_srli_epi64(*a0, 47)), sk0);
	__m256i x1 = _mm256_xor_si256(_mm256_xor_si256(*a1, _mm256_srli_epi64(*a1, 47)), sk1);
	__m256i h0 = _mm256_shuffle_epi32(x0, _MM_SHUFFLE(0, 3, 0, 1));
	__m256i h1 = _mm256_shuffle_epi32(x1, _MM_SHUFFLE(0, 3, 0, 1));

	*a0 = _mm256_add_epi64(_mm256_mul_epu32(x0, prime),
			       _mm256_slli_epi64(_mm256_mul_epu32(h0, prime), 32));
	*a1 = _mm256_add_epi64(_mm256_mul_epu32(x1, prime),
			       _mm256_slli_epi64(_mm256_mul_epu32(h1, prime), 32));
	return 0;
}

__attribute__((target("avx2")))
static void xh_stripes_avx2(uint64_t *acc, uint8_t *dst, const uint8_t *src, size_t nst,
			    unsigned *stripe)
{
	__m256i a0 = _mm256_loadu_si256((const __m256i *)acc);
	__m256i a1 = _mm256_loadu_si256((const __m256i *)(acc + 4));
	unsigned s = *stripe;

	for (size_t n = 0; n < nst; n++) {
		const uint8_t *in = src + XH_STRIPE * n;

		_mm_prefetch((const char *)in + XH_PREFETCH, _MM_HINT_T0);
		__m256i d0 = _mm256_loadu_si256((const __m256i *)in);
		__m256i d1 = _mm256_loadu_si256((const __m256i *)(in + 32));

		if (dst) {
			_mm_prefetch((const char *)dst + XH_STRIPE * n + XH_PREFETCH, _MM_HINT_T0);
			_mm256_storeu_si256((__m256i *)(dst + XH_STRIPE * n), d0);
			_mm256_storeu_si256((__m256i *)(dst + XH_STRIPE * n + 32), d1);
		}
		s = xh_acc_avx2(&a0, &a1, d0, d1, s);
	}
	_mm256_storeu_si256((__m256i *)acc, a0);
	_mm256_storeu_si256((__m256i *)(acc + 4), a1);
	*stripe = s;
}

/* Bytes [s, s + 32) of a:b (s < 32), from the registers: per 128-bit lane
 * an alignr with a run-time count (two pshufb). upper: s >= 16; lo/hi:
 * the pshufb indices for s % 16, built once per call by
 * xh_stripes_avx2_nt. */
__attribute__((target("avx2")))
static inline __m256i xh_shift32(__m256i a, __m256i b, bool upper, __m256i lo, __m256i hi)
{
	__m256i mid = _mm256_permute2x128_si256(a, b, 0x21);	/* a.hi | b.lo */
	__m256i l = upper ? mid : a, h = upper ? b : mid;

	return _mm256_or_si256(_mm256_shuffle_epi8(l, lo), _mm256_shuffle_epi8(h, hi));
}

/* The same with non-temporal stores to dst (which must not be NULL), as
 * xh_stripes_avx512_nt below does on CPUs without AVX-512 VBMI: no
 * read-for-ownership of each destination line (a third more memory
 * traffic for a copy into cold memory, as every put into a segment is).
 * Each 64-byte aligned destination line is assembled from the registers of
 * two consecutive stripes, so what is stored is what was hashed; the
 * partial lines at both ends go through a stripe-sized buffer. */
__attribute__((target("avx2")))
static void xh_stripes_avx2_nt(uint64_t *acc, uint8_t *dst, const uint8_t *src, size_t nst,
			       unsigned *stripe)
{
	const unsigned h = (unsigned)(-(uintptr_t)dst & 63), sh = h & 15;
	const bool second = h >= 32, upper = (h & 31) >= 16;
	uint8_t ilo[32], ihi[32], edge[XH_STRIPE] __attribute__((aligned(32)));
	__m256i a0 = _mm256_loadu_si256((const __m256i *)acc);
	__m256i a1 = _mm256_loadu_si256((const __m256i *)(acc + 4));
	__m256i p0 = _mm256_setzero_si256(), p1 = p0;
	unsigned s = *stripe;

	for (unsigned i = 0; i < 32; i++) {
		unsigned j = (i & 15) + sh;

		ilo[i] = j < 16 ? (uint8_t)j : 0x80;
		ihi[i] = j >= 16 ? (uint8_t)(j - 16) : 0x80;
	}
	const __m256i lo = _mm256_loadu_si256((const __m256i *)ilo);
	const __m256i hi = _mm256_loadu_si256((const __m256i *)ihi);

	for (size_t n = 0; n < nst; n++) {
		const uint8_t *in = src + XH_STRIPE * n;

		_mm_prefetch((const char *)in + XH_PREFETCH, _MM_HINT_T0);
		__m256i d0 = _mm256_loadu_si256((const __m256i *)in);
		__m256i d1 = _mm256_loadu_si256((const __m256i *)(in + 32));

		if (!h) {
			_mm256_stream_si256((__m256i *)(dst + XH_STRIPE * n), d0);
			_mm256_stream_si256((__m256i *)(dst + XH_STRIPE * n + 32), d1);
		} else if (n == 0) {
			_mm256_store_si256((__m256i *)edge, d0);
			_mm256_store_si256((__m256i *)(edge + 32), d1);
			memcpy(dst, edge, h);
		} else {
			/* value bytes [64(n-1) + h, 64n + h): p0 p1 d0 d1 from h */
			__m256i o0 = second ? xh_shift32(p1, d0, upper, lo, hi)
					    : xh_shift32(p0, p1, upper, lo, hi);
			__m256i o1 = second ? xh_shift32(d0, d1, upper, lo, hi)
					    : xh_shift32(p1, d0, upper, lo, hi);
			uint8_t *at = dst + XH_STRIPE * (n - 1) + h;

			_mm256_stream_si256((__m256i *)at, o0);
			_mm256_stream_si256((__m256i *)(at + 32), o1);
		}
		p0 = d0;
		p1 = d1;
		s = xh_acc_avx2(&a0, &a1, d0, d1, s);
	}
	/* The last stripe's bytes from h on start an aligned line. */
	if (nst && h) {
		_mm256_store_si256((__m256i *)edge, p0);
		_mm256_store_si256((__m256i *)(edge + 32), p1);
		memcpy(dst + XH_STRIPE * (nst - 1) + h, edge + h, XH_STRIPE - h);
	}
	_mm_sfence();
	_mm256_storeu_si256((__m256i *)acc, a0);
	_mm256_storeu_si256((__m256i *)(acc + 4), a1);
	*stripe = s;
}

__attribute__((target("avx512f")))
static void xh_stripes_avx512(uint64_t *acc, uint8_t *dst, const uint8_t *src, size_t nst,
			      unsigned *stripe)
{
	__m512i a = _mm512_loadu_si512(acc);
	const __m512i prime = _mm512_set1_epi32((int)XH_P32_1);
	const __m512i sk = _mm512_loadu_si512(xh_secret + 128);
	unsigned s = *stripe;

	for (size_t n = 0; n < nst; n++) {
		const uint8_t *in = src + XH_STRIPE * n;

		_mm_prefetch((const char *)in + XH_PREFETCH, _MM_HINT_T0);
		__m512i d = _mm512_loadu_si512(in);

		if (dst) {
			/* A destination not in cache is read for ownership
			 * first: ask for it early too. */
			_mm_prefetch((const char *)dst + XH_STRIPE * n + XH_PREFETCH, _MM_HINT_T0);
			_mm512_storeu_si512(dst + XH_STRIPE * n, d);
		}
		__m512i k = _mm512_xor_si512(d, _mm512_loadu_si512(xh_secret + 8 * s));
		__m512i p = _mm512_mul_epu32(k, _mm512_shuffle_epi32(k, (_MM_PERM_ENUM)_MM_SHUFFLE(0, 3, 0, 1)));

		a = _mm512_add_epi64(a, _mm512_add_epi64(p,
				_mm512_shuffle_epi32(d, (_MM_PERM_ENUM)_MM_SHUFFLE(1, 0, 3, 2))));
		if (++s == XH_BLOCK_STRIPES) {
			__m512i x = _mm512_xor_si512(_mm512_xor_si512(a, _mm512_srli_epi64(a, 47)), sk);
			__m512i h = _mm512_shuffle_epi32(x, (_MM_PERM_ENUM)_MM_SHUFFLE(0, 3, 0, 1));

			a = _mm512_add_epi64(_mm512_mul_epu32(x, prime),
					     _mm512_slli_epi64(_mm512_mul_epu32(h, prime), 32));
			s = 0;
		}
	}
	_mm512_storeu_si512(acc, a);
	*stripe = s;
}

/* The same with non-temporal stores to dst (which must not be NULL), for
 * destinations nobody on this CPU reads next: no read-for-ownership of
 * each destination line, no cache pollution (a value written into a
 * segment, a batch larger than the cache). Streaming stores must be
 * 64-byte aligned and dst is anything, so each aligned destination line is
 * assembled from two consecutive stripe registers (vpermt2b); the partial
 * lines at both ends are masked stores of the same registers. Ends with
 * sfence: the bytes are visible before whatever the caller stores next
 * (a header being published). */
__attribute__((target("avx512f,avx512bw,avx512vbmi")))
static void xh_stripes_avx512_nt(uint64_t *acc, uint8_t *dst, const uint8_t *src, size_t nst,
				 unsigned *stripe)
{
	static const uint8_t iota[64] __attribute__((aligned(64))) = {
		0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
		16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
		32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
		48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
	};
	/* h value bytes go before the first aligned destination address;
	 * aligned line k then holds value bytes [64k + h, 64k + h + 64). */
	const unsigned h = (unsigned)(-(uintptr_t)dst & 63);
	const __m512i idx = _mm512_add_epi8(_mm512_load_si512(iota), _mm512_set1_epi8((char)h));
	__m512i a = _mm512_loadu_si512(acc);
	const __m512i prime = _mm512_set1_epi32((int)XH_P32_1);
	const __m512i sk = _mm512_loadu_si512(xh_secret + 128);
	__m512i prev = _mm512_setzero_si512();
	unsigned s = *stripe;

	for (size_t n = 0; n < nst; n++) {
		const uint8_t *in = src + XH_STRIPE * n;

		_mm_prefetch((const char *)in + XH_PREFETCH, _MM_HINT_T0);
		__m512i d = _mm512_loadu_si512(in);

		if (n == 0) {
			if (h)
				_mm512_mask_storeu_epi8(dst, (1ull << h) - 1, d);
		} else {
			__m512i line = h ? _mm512_permutex2var_epi8(prev, idx, d) : prev;

			_mm512_stream_si512((void *)(dst + XH_STRIPE * (n - 1) + h), line);
		}
		prev = d;
		__m512i k = _mm512_xor_si512(d, _mm512_loadu_si512(xh_secret + 8 * s));
		__m512i p = _mm512_mul_epu32(k, _mm512_shuffle_epi32(k, (_MM_PERM_ENUM)_MM_SHUFFLE(0, 3, 0, 1)));

		a = _mm512_add_epi64(a, _mm512_add_epi64(p,
				_mm512_shuffle_epi32(d, (_MM_PERM_ENUM)_MM_SHUFFLE(1, 0, 3, 2))));
		if (++s == XH_BLOCK_STRIPES) {
			__m512i x = _mm512_xor_si512(_mm512_xor_si512(a, _mm512_srli_epi64(a, 47)), sk);
			__m512i hh = _mm512_shuffle_epi32(x, (_MM_PERM_ENUM)_MM_SHUFFLE(0, 3, 0, 1));

			a = _mm512_add_epi64(_mm512_mul_epu32(x, prime),
					     _mm512_slli_epi64(_mm512_mul_epu32(hh, prime), 32));
			s = 0;
		}
	}
	/* The last stripe's bytes from h on start an aligned line. */
	if (nst) {
		uint8_t *at = dst + XH_STRIPE * (nst - 1) + h;

		if (!h)
			_mm512_stream_si512((void *)at, prev);
		else
			_mm512_mask_storeu_epi8(at, (1ull << (64 - h)) - 1,
						_mm512_permutex2var_epi8(prev, idx, prev));
	}
	_mm_sfence();
	_mm512_storeu_si512(acc, a);
	*stripe = s;
}
#endif

/* The widest loops this CPU runs: [0] plain stores, [1] non-temporal
 * stores (AVX-512 VBMI, else AVX2; the scalar loop has none). KVPOOL_CSUM_ISA=scalar|
 * avx2|avx512 caps the choice (tests run every loop on one machine). */
static void xh_pick(xh_stripes_fn f[2])
{
	const char *cap = getenv("KVPOOL_CSUM_ISA");

	f[0] = f[1] = xh_stripes_scalar;
	if (cap && !strcmp(cap, "scalar"))
		return;
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2")) {
		f[0] = xh_stripes_avx2;
		f[1] = xh_stripes_avx2_nt;
	}
	if (cap && !strcmp(cap, "avx2"))
		return;
	if (__builtin_cpu_supports("avx512f"))
		f[0] = xh_stripes_avx512;	/* streaming stores stay AVX2's without VBMI */
	if (cap && !strcmp(cap, "avx512"))
		return;
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vbmi"))
		f[1] = xh_stripes_avx512_nt;
#endif
}

static xh_stripes_fn xh_stripes_impl[2];

static inline xh_stripes_fn xh_stripes(bool nt)
{
	/* Racing first callers store the same pointers. */
	xh_stripes_fn f = __atomic_load_n(&xh_stripes_impl[nt], __ATOMIC_ACQUIRE);

	if (!f) {
		xh_stripes_fn p[2];

		xh_pick(p);
		__atomic_store_n(&xh_stripes_impl[1], p[1], __ATOMIC_RELAXED);
		__atomic_store_n(&xh_stripes_impl[0], p[0], __ATOMIC_RELEASE);
		f = p[nt];
	}
	return f;
}

static void xh_init(struct xh_state *s)
{
	static const uint64_t init[8] = { XH_P32_3, XH_P64_1, XH_P64_2, XH_P64_3,
					  XH_P64_4, XH_P32_2, XH_P64_5, XH_P32_1 };

	memcpy(s->acc, init, sizeof(s->acc));
	s->total = 0;
	s->stripe = 0;
	s->buffered = 0;
}

/* Feeds n bytes of src; with dst, copies them there too (nt: with
 * non-temporal stores where the CPU can) and hashes the copy (what the
 * caller will hold). */
static void xh_update(struct xh_state *s, uint8_t *dst, const uint8_t *src, size_t n, bool nt)
{
	if (s->buffered + n <= XH_BUF) {
		if (dst) {
			memcpy(dst, src, n);
			src = dst;
		}
		memcpy(s->buf + s->buffered, src, n);
		s->buffered += (unsigned)n;
		s->total += n;
		return;
	}
	s->total += n;
	if (s->buffered) {
		size_t k = XH_BUF - s->buffered;

		if (dst) {
			memcpy(dst, src, k);
			memcpy(s->buf + s->buffered, dst, k);
			dst += k;
		} else {
			memcpy(s->buf + s->buffered, src, k);
		}
		src += k;
		n -= k;
		/* n > 0: none of the buffered stripes holds the last byte. */
		xh_stripes(false)(s->acc, NULL, s->buf, XH_BUF / XH_STRIPE, &s->stripe);
		memcpy(s->last, s->buf + XH_BUF - XH_STRIPE, XH_STRIPE);
		s->buffered = 0;
	}
	if (n > XH_STRIPE) {
		size_t nst = (n - 1) / XH_STRIPE, done = nst * XH_STRIPE;

		/* below XH_NT_MIN the fence and the partial lines cost more
		 * than the reads for ownership save */
		nt = nt && dst && n >= XH_NT_MIN;
		xh_stripes(nt)(s->acc, dst, src, nst, &s->stripe);
		/* From the copy, but never back from streamed lines: that read
		 * goes to memory and doubled a 4 KiB put. The source holds the
		 * same bytes unless it changed meanwhile, and then the digest
		 * cannot match what the copy holds: a refused read, never a
		 * wrong one. */
		memcpy(s->last, (dst && !nt ? dst : src) + done - XH_STRIPE, XH_STRIPE);
		src += done;
		n -= done;
		if (dst)
			dst += done;
	}
	/* 1..64 bytes left */
	if (dst) {
		memcpy(dst, src, n);
		src = dst;
	}
	memcpy(s->buf, src, n);
	s->buffered = (unsigned)n;
}

static uint64_t xh_fold(uint64_t a, uint64_t b)
{
	unsigned __int128 p = (unsigned __int128)a * b;

	return (uint64_t)p ^ (uint64_t)(p >> 64);
}

static uint64_t xh_digest(const struct xh_state *s)
{
	uint8_t lastst[XH_STRIPE];
	const uint8_t *lp;
	uint64_t acc[8], r;
	unsigned stripe = s->stripe;

	if (s->total <= XH_BUF)		/* short, or never accumulated: buf is all */
		return XXH3_64bits(s->buf, (size_t)s->total);
	memcpy(acc, s->acc, sizeof(acc));
	if (s->buffered > XH_STRIPE)
		xh_stripes_scalar(acc, NULL, s->buf, (s->buffered - 1) / XH_STRIPE, &stripe);
	if (s->buffered >= XH_STRIPE) {
		lp = s->buf + s->buffered - XH_STRIPE;
	} else {
		size_t k = XH_STRIPE - s->buffered;

		memcpy(lastst, s->last + XH_STRIPE - k, k);
		memcpy(lastst + k, s->buf, s->buffered);
		lp = lastst;
	}
	xh_acc_scalar(acc, lp, xh_secret + sizeof(xh_secret) - XH_STRIPE - 7);
	r = s->total * XH_P64_1;
	for (int i = 0; i < 4; i++)
		r += xh_fold(acc[2 * i] ^ ld64(xh_secret + 11 + 16 * i),
			     acc[2 * i + 1] ^ ld64(xh_secret + 11 + 16 * i + 8));
	r ^= r >> 37;
	r *= 0x165667919E3779F9ull;
	return r ^ (r >> 32);
}

uint64_t ext_checksum(const void *p, size_t n)
{
	struct xh_state s;

	if (n <= XH_BUF)
		return XXH3_64bits(p, n);
	xh_init(&s);
	xh_update(&s, NULL, p, n, false);
	return xh_digest(&s);
}

int ext_csum_init(struct ext_csum *c)
{
	struct xh_state *s = malloc(sizeof(*s));

	c->state = s;
	if (!s)
		return -ENOMEM;
	xh_init(s);
	return 0;
}

void ext_csum_update(struct ext_csum *c, const void *p, size_t n)
{
	xh_update(c->state, NULL, p, n, false);
}

uint64_t ext_csum_final(struct ext_csum *c)
{
	uint64_t v = xh_digest(c->state);

	free(c->state);
	c->state = NULL;
	return v;
}

void ext_copy_csum(void *dst, const void *src, size_t n, struct ext_csum *c)
{
	xh_update(c->state, dst, src, n, false);
}

uint64_t ext_copy_checksum(void *dst, const void *src, size_t n)
{
	struct xh_state s;

	xh_init(&s);
	xh_update(&s, dst, src, n, false);
	return xh_digest(&s);
}

void ext_copy_csum_nt(void *dst, const void *src, size_t n, struct ext_csum *c)
{
	xh_update(c->state, dst, src, n, true);
}

uint64_t ext_copy_checksum_nt(void *dst, const void *src, size_t n)
{
	struct xh_state s;

	xh_init(&s);
	xh_update(&s, dst, src, n, true);
	return xh_digest(&s);
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

	return ext_checksum(v, h->value_len) == h->value_checksum;
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
		f.verified = verify;
		f.checksum_ok = verify && ext_verify(b + pos, &f.h);
		if (verify)
			st->verified++;
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

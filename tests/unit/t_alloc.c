/* t_alloc: the TLSF offset allocator against a bitmap model of the same
 * space. Millions of random alloc/free/reserve operations; after each one
 * the returned offsets are checked against the model (aligned, in range, no
 * overlap) and periodically the whole state (free bytes, number of free
 * extents = maximal free runs, largest free extent, live count).
 * SEED=n reproduces a run; OPS=n changes the length of the big run.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
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

static uint64_t rnd_range(uint64_t lo, uint64_t hi)	/* [lo, hi] */
{
	return lo + rnd() % (hi - lo + 1);
}

/* Log-uniform in [lo, hi]: as many 4 KiB values as 32 MiB ones. */
static uint64_t rnd_log(uint64_t lo, uint64_t hi)
{
	double l = (double)lo, h = (double)hi;
	double u = (double)(rnd() >> 11) / 9007199254740992.0;
	uint64_t v = (uint64_t)(l * pow(h / l, u));

	return v < lo ? lo : v > hi ? hi : v;
}

/* ---- the model: one bit per granule ---- */

struct model {
	uint64_t *bits;
	uint64_t ngran;
	uint64_t base;
	unsigned shift;
	uint64_t used;		/* granules */
};

static void model_init(struct model *m, uint64_t base, uint64_t size, unsigned shift)
{
	m->base = base;
	m->shift = shift;
	m->ngran = size >> shift;
	m->bits = calloc((m->ngran + 63) / 64 + 1, 8);
	m->used = 0;
	REQUIRE(m->bits, "oom");
}

static bool bit(const struct model *m, uint64_t g)
{
	return m->bits[g >> 6] >> (g & 63) & 1;
}

/* Are granules [g, g+n) all clear? */
static bool model_clear(const struct model *m, uint64_t g, uint64_t n)
{
	while (n && (g & 63)) {
		if (bit(m, g))
			return false;
		g++, n--;
	}
	for (; n >= 64; g += 64, n -= 64)
		if (m->bits[g >> 6])
			return false;
	for (; n; g++, n--)
		if (bit(m, g))
			return false;
	return true;
}

static void model_set(struct model *m, uint64_t g, uint64_t n, bool on)
{
	m->used += on ? n : -n;
	while (n && (g & 63)) {
		m->bits[g >> 6] ^= 1ull << (g & 63);
		g++, n--;
	}
	for (; n >= 64; g += 64, n -= 64)
		m->bits[g >> 6] = on ? ~0ull : 0;
	for (; n; g++, n--)
		m->bits[g >> 6] ^= 1ull << (g & 63);
}

struct runs { uint64_t nruns, largest; };

static struct runs model_runs(const struct model *m)
{
	struct runs r = { 0, 0 };
	uint64_t cur = 0;

	for (uint64_t g = 0; g < m->ngran;) {
		uint64_t w = m->bits[g >> 6];

		if ((g & 63) == 0 && g + 64 <= m->ngran && (w == 0 || w == ~0ull)) {
			if (w == 0) {
				cur += 64;
			} else if (cur) {
				r.nruns++;
				r.largest = cur > r.largest ? cur : r.largest;
				cur = 0;
			}
			g += 64;
			continue;
		}
		if (!(w >> (g & 63) & 1)) {
			cur++;
		} else if (cur) {
			r.nruns++;
			r.largest = cur > r.largest ? cur : r.largest;
			cur = 0;
		}
		g++;
	}
	if (cur) {
		r.nruns++;
		r.largest = cur > r.largest ? cur : r.largest;
	}
	return r;
}

/* ---- live allocations ---- */

struct live { uint64_t off, len; };

struct world {
	struct alloc *a;
	struct model m;
	struct live *live;
	size_t nlive, cap;
	uint64_t size;
	uint32_t align;
	uint64_t allocs, frees, reserves, nospace;
};

static void world_init(struct world *w, uint64_t base, uint64_t size, uint32_t align)
{
	memset(w, 0, sizeof(*w));
	w->a = alloc_create(base, size, align);
	REQUIRE(w->a, "alloc_create(%" PRIu64 ", %" PRIu64 ", %u)", base, size, align);
	w->size = size;
	w->align = align;
	model_init(&w->m, base, size, (unsigned)__builtin_ctz(align));
}

static void world_fini(struct world *w)
{
	alloc_destroy(w->a);
	free(w->m.bits);
	free(w->live);
}

static void live_add(struct world *w, uint64_t off, uint64_t len)
{
	if (w->nlive == w->cap) {
		w->cap = w->cap ? w->cap * 2 : 1024;
		w->live = realloc(w->live, w->cap * sizeof(*w->live));
		REQUIRE(w->live, "oom");
	}
	w->live[w->nlive++] = (struct live){ off, len };
}

/* The size class of n granules, as the allocator's TLSF mapping defines it
 * (first level = power of two, second level = 1/32 of it). */
static uint64_t size_class(uint64_t n)
{
	unsigned f;

	if (n < 32)
		return n;
	f = 63u - (unsigned)__builtin_clzll(n);
	return (uint64_t)(f - 4) << 5 | ((n >> (f - 5)) & 31);
}

static void check_full(struct world *w)
{
	struct alloc_stats st;
	struct runs r = model_runs(&w->m);
	unsigned sh = w->m.shift;

	alloc_stats(w->a, &st);
	REQUIRE(st.size == w->m.ngran << sh, "size %" PRIu64, st.size);
	REQUIRE(st.free_bytes == (w->m.ngran - w->m.used) << sh,
	        "free_bytes %" PRIu64 " model %" PRIu64, st.free_bytes,
	        (w->m.ngran - w->m.used) << sh);
	REQUIRE(st.nalloc == w->nlive, "nalloc %" PRIu64 " live %zu", st.nalloc, w->nlive);
	/* Immediate coalescing: every free extent is a maximal free run. */
	REQUIRE(st.nfree == r.nruns, "nfree %" PRIu64 " model runs %" PRIu64, st.nfree, r.nruns);
	REQUIRE(st.largest_free == r.largest << sh, "largest %" PRIu64 " model %" PRIu64,
	        st.largest_free, r.largest << sh);
	/* The walk in offset order (alloc_next_used) meets every live
	 * allocation once, as alloc_len_at sees it. */
	uint64_t it = 0, off, len, prev_end = 0, n = 0, bytes = 0;
	while (alloc_next_used(w->a, &it, &off, &len)) {
		REQUIRE(off >= prev_end && len && alloc_len_at(w->a, off) == len,
		        "walk: %" PRIu64 " +%" PRIu64 " after %" PRIu64, off, len, prev_end);
		prev_end = off + len;
		n++;
		bytes += len;
	}
	REQUIRE(n == w->nlive && bytes == w->m.used << sh, "walk: %" PRIu64 " extents, %" PRIu64
	        " bytes", n, bytes);
}

static void do_alloc(struct world *w, uint64_t len)
{
	uint64_t alen = 0, off = alloc_alloc(w->a, len, &alen);
	uint64_t want = (len + w->align - 1) / w->align * w->align;
	unsigned sh = w->m.shift;

	if (off == UINT64_MAX) {
		struct alloc_stats st;
		uint64_t n = want >> sh, largest;

		/* largest_free is checked against the model by check_full.
		 * Refusal is allowed only when nothing fits, or when the only
		 * fitting blocks share the request's size class (the bounded
		 * probe of that class list). */
		alloc_stats(w->a, &st);
		largest = st.largest_free >> sh;
		REQUIRE(largest < n || size_class(largest) == size_class(n),
		        "alloc(%" PRIu64 ") refused but a %" PRIu64 "-granule extent is free",
		        len, largest);
		w->nospace++;
		return;
	}
	REQUIRE(alen == want, "alloc_len %" PRIu64 " want %" PRIu64, alen, want);
	REQUIRE(off % w->align == 0, "offset %" PRIu64 " not aligned", off);
	REQUIRE(off >= w->m.base && off - w->m.base + alen <= w->m.ngran << sh,
	        "offset %" PRIu64 "+%" PRIu64 " out of range", off, alen);
	REQUIRE(model_clear(&w->m, (off - w->m.base) >> sh, alen >> sh),
	        "alloc %" PRIu64 "+%" PRIu64 " overlaps a live allocation", off, alen);
	model_set(&w->m, (off - w->m.base) >> sh, alen >> sh, true);
	live_add(w, off, alen);
	w->allocs++;
}

static void do_free(struct world *w, size_t idx)
{
	struct live l = w->live[idx];
	unsigned sh = w->m.shift;
	int rc;

	REQUIRE(alloc_len_at(w->a, l.off) == l.len, "len_at %" PRIu64, alloc_len_at(w->a, l.off));
	if (l.len > w->align) {
		REQUIRE(alloc_free(w->a, l.off + w->align) == -EINVAL, "free of a non-start offset");
		REQUIRE(alloc_len_at(w->a, l.off + w->align) == 0, "len_at of a non-start offset");
	}
	REQUIRE(alloc_free(w->a, l.off + 1) == -EINVAL, "free of a misaligned offset");
	rc = alloc_free(w->a, l.off);
	REQUIRE(rc == 0, "alloc_free(%" PRIu64 ") = %d", l.off, rc);
	REQUIRE(alloc_free(w->a, l.off) == -EINVAL, "double free accepted");
	model_set(&w->m, (l.off - w->m.base) >> sh, l.len >> sh, false);
	w->live[idx] = w->live[--w->nlive];
	w->frees++;
}

/* Reserve a random range; the model says what the answer must be. */
static void do_reserve(struct world *w, uint64_t maxlen)
{
	unsigned sh = w->m.shift;
	uint64_t g = rnd() % w->m.ngran;
	uint64_t len = rnd_range(1, maxlen);
	uint64_t n = (len + w->align - 1) >> sh;
	uint64_t off = w->m.base + (g << sh);
	int rc = alloc_reserve(w->a, off, len);

	if (g + n > w->m.ngran) {
		REQUIRE(rc == -EINVAL, "reserve past the end = %d", rc);
		return;
	}
	if (!model_clear(&w->m, g, n)) {
		REQUIRE(rc == -EEXIST, "reserve over used space = %d", rc);
		return;
	}
	REQUIRE(rc == 0, "reserve of free %" PRIu64 "+%" PRIu64 " = %d", off, len, rc);
	model_set(&w->m, g, n, true);
	live_add(w, off, n << sh);
	REQUIRE(alloc_len_at(w->a, off) == n << sh, "len_at after reserve");
	w->reserves++;
}

/* Random mix at a fill level that swings between 40% and 95%. */
static void stress(struct world *w, uint64_t ops, uint64_t (*size_fn)(void),
		   unsigned reserve_per_mille, uint64_t check_every)
{
	double hi = 0.95, lo = 0.4;
	bool filling = true;

	for (uint64_t i = 0; i < ops; i++) {
		double fill = (double)w->m.used / (double)w->m.ngran;
		uint64_t r = rnd() % 1000;

		if (filling && fill > hi)
			filling = false;
		else if (!filling && fill < lo)
			filling = true;
		if (r < reserve_per_mille)
			do_reserve(w, size_fn());
		else if (w->nlive && (r % 10) < (filling ? 3u : 7u))
			do_free(w, rnd() % w->nlive);
		else
			do_alloc(w, size_fn());
		if ((i + 1) % check_every == 0)
			check_full(w);
	}
	check_full(w);
}

static void drain(struct world *w)
{
	struct alloc_stats st;

	while (w->nlive)
		do_free(w, rnd() % w->nlive);
	check_full(w);
	alloc_stats(w->a, &st);
	REQUIRE(st.largest_free == st.size && st.free_bytes == st.size && st.nfree == 1 &&
	        st.nalloc == 0, "not coalesced back: largest %" PRIu64 " of %" PRIu64
	        ", %" PRIu64 " free extents", st.largest_free, st.size, st.nfree);
}

static uint64_t size_big(void)
{
	/* KV blocks: mostly 4 KiB..64 MiB, some small ones. */
	if (rnd() % 10 < 3)
		return rnd_range(1, 4096);
	return rnd_log(4096, 64ull << 20);
}

static uint64_t size_small(void)
{
	return rnd() % 8 ? rnd_range(1, 4096) : rnd_range(4096, 65536);
}

static void test_args(void)
{
	struct alloc_stats st;
	struct alloc *a;
	uint64_t alen, off;

	REQUIRE(!alloc_create(0, 1 << 20, 32), "align 32 accepted");
	REQUIRE(!alloc_create(0, 1 << 20, 100), "align 100 accepted");
	REQUIRE(!alloc_create(0, 0, 4096), "size 0 accepted");
	REQUIRE(!alloc_create(4096, 100, 4096), "size below one granule accepted");
	REQUIRE(!alloc_create(UINT64_MAX - 10, 100, 64), "wrapping range accepted");

	a = alloc_create(0, 1 << 20, 0);
	REQUIRE(a && alloc_align(a) == 4096, "default alignment");
	alloc_destroy(a);

	/* Unaligned base and size: trimmed to the aligned inside. */
	a = alloc_create(100, 10000, 64);
	REQUIRE(a, "create unaligned");
	alloc_stats(a, &st);
	REQUIRE(st.size == 10048 - 128, "trimmed size %" PRIu64, st.size);
	off = alloc_alloc(a, 1, &alen);
	REQUIRE(off == 128 && alen == 64, "first alloc at %" PRIu64, off);
	REQUIRE(alloc_alloc(a, 0, NULL) == UINT64_MAX, "alloc(0)");
	REQUIRE(alloc_alloc(a, 1ull << 40, NULL) == UINT64_MAX, "alloc bigger than the space");
	REQUIRE(alloc_free(a, 64) == -EINVAL && alloc_free(a, 1 << 20) == -EINVAL, "free out of range");
	REQUIRE(alloc_free(a, off) == 0, "free");
	alloc_destroy(a);

	/* An exact fit of the whole space must work, also for a size that is
	 * not a size-class boundary (the rounded O(1) search misses it). */
	a = alloc_create(4096, (64ull << 30) + 3 * 4096, 4096);
	off = alloc_alloc(a, (64ull << 30) + 3 * 4096 - 100, &alen);
	REQUIRE(off == 4096 && alen == (64ull << 30) + 3 * 4096, "whole-space alloc");
	REQUIRE(alloc_alloc(a, 1, NULL) == UINT64_MAX, "alloc in a full space");
	alloc_stats(a, &st);
	REQUIRE(st.free_bytes == 0 && st.nfree == 0 && st.largest_free == 0 && st.nalloc == 1,
	        "full stats");
	REQUIRE(alloc_free(a, off) == 0, "free whole");
	alloc_destroy(a);
}

static void test_reserve(void)
{
	struct world w;
	const uint64_t K = 4096;

	world_init(&w, K, 1ull << 30, 4096);
	/* Recovery order: ascending, as a scan reports them. */
	for (uint64_t i = 0; i < 2000; i++) {
		uint64_t off = K + i * 64 * K;

		REQUIRE(alloc_reserve(w.a, off, 10 * K + 1) == 0, "reserve %" PRIu64, i);
		model_set(&w.m, (off - K) / K, 11, true);
		live_add(&w, off, 11 * K);
	}
	check_full(&w);
	/* Overlaps: same start, inside, straddling the start, the end,
	 * covering: all refused. */
	REQUIRE(alloc_reserve(w.a, K, K) == -EEXIST, "same start");
	REQUIRE(alloc_reserve(w.a, K + 5 * K, K) == -EEXIST, "inside");
	REQUIRE(alloc_reserve(w.a, K + 60 * K, 8 * K) == -EEXIST, "straddles a start");
	REQUIRE(alloc_reserve(w.a, K + 10 * K, 4 * K) == -EEXIST, "straddles an end");
	REQUIRE(alloc_reserve(w.a, K + 63 * K, 66 * K) == -EEXIST, "covers one");
	REQUIRE(alloc_reserve(w.a, K + 11 * K, 53 * K) == 0, "exact gap");
	model_set(&w.m, 11, 53, true);
	live_add(&w, K + 11 * K, 53 * K);
	REQUIRE(alloc_reserve(w.a, K + 3, K) == -EINVAL, "misaligned");
	REQUIRE(alloc_reserve(w.a, 0, K) == -EINVAL, "below base");
	REQUIRE(alloc_reserve(w.a, K + (1ull << 30) - K, 2 * K) == -EINVAL, "past the end");
	REQUIRE(alloc_reserve(w.a, K + 200000 * K, 0) == -EINVAL, "zero length");
	check_full(&w);
	/* Descending order and random order work too (the slow path). */
	for (uint64_t i = 0; i < 500; i++) {
		uint64_t off = K + (1ull << 30) - (i + 1) * 16 * K;

		REQUIRE(alloc_reserve(w.a, off, 3 * K) == 0, "descending reserve %" PRIu64, i);
		model_set(&w.m, (off - K) / K, 3, true);
		live_add(&w, off, 3 * K);
	}
	check_full(&w);
	/* Allocations never land on reserved ranges, reserves and allocations
	 * mix, and reserved ranges free like allocations. */
	stress(&w, 200000, size_small, 50, 20000);
	drain(&w);
	world_fini(&w);
}

/* Reserves n extents of 1-3 granules, one per `gap` granules, in a random
 * order (a table file's or a leader's records come in key order, not
 * offset order: the span hints' path), some freed and reserved again. */
static void reserve_shuffled(struct world *w, uint64_t n, uint64_t gap)
{
	const uint64_t K = w->align;
	uint64_t *ord = malloc(n * sizeof(*ord));

	REQUIRE(ord, "oom");
	for (uint64_t i = 0; i < n; i++)
		ord[i] = i;
	for (uint64_t i = n - 1; i > 0; i--) {
		uint64_t j = rnd() % (i + 1), t = ord[i];

		ord[i] = ord[j];
		ord[j] = t;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint64_t g = ord[i] * gap, len = rnd_range(1, 3) * K;

		REQUIRE(alloc_reserve(w->a, w->m.base + g * K, len) == 0,
			"shuffled reserve %" PRIu64 " at granule %" PRIu64, i, g);
		model_set(&w->m, g, len / K, true);
		live_add(w, w->m.base + g * K, len);
		REQUIRE(alloc_reserve(w->a, w->m.base + g * K, K) == -EEXIST, "overlap accepted");
	}
	check_full(w);
	free(ord);
}

static void test_reserve_shuffled(void)
{
	struct world w;

	/* 8 granules per span */
	world_init(&w, 4096, 1ull << 30, 4096);
	reserve_shuffled(&w, 60000, 4);
	/* frees coalesce (released descriptors behind stale hints), then
	 * reserves out of order again, allocations between */
	for (int i = 0; i < 30000; i++)
		do_free(&w, rnd() % w.nlive);
	check_full(&w);
	stress(&w, 100000, size_small, 300, 20000);
	drain(&w);
	world_fini(&w);
	/* 2^24 granules: 16 per span */
	world_init(&w, 4096, 64ull << 30, 4096);
	reserve_shuffled(&w, 40000, 400);
	stress(&w, 50000, size_big, 300, 10000);
	drain(&w);
	world_fini(&w);
}

int main(void)
{
	const char *s = getenv("SEED"), *o = getenv("OPS");
	uint64_t ops = o ? strtoull(o, NULL, 0) : 2000000;
	struct world w;
	clock_t t0 = clock();

	rng_state = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
	if (!rng_state)
		rng_state = 1;
	printf("t_alloc: SEED=%" PRIu64 " OPS=%" PRIu64 "\n", rng_state, ops);

	test_args();
	test_reserve();
	test_reserve_shuffled();

	/* 64 GiB of virtual space in 4 KiB granules, KV-sized requests. */
	world_init(&w, 4096, 64ull << 30, 4096);
	stress(&w, ops, size_big, 1, 100000);
	printf("big: %" PRIu64 " allocs, %" PRIu64 " frees, %" PRIu64 " reserves, %" PRIu64
	       " refused, %zu live at the end\n", w.allocs, w.frees, w.reserves, w.nospace, w.nlive);
	REQUIRE(w.allocs > ops / 3 && w.frees > ops / 3, "the mix did not exercise both paths");
	drain(&w);
	world_fini(&w);

	/* Small requests at 64-byte alignment. */
	world_init(&w, 0, 1 << 20, 64);
	stress(&w, ops / 4, size_small, 5, 50000);
	printf("small: %" PRIu64 " allocs, %" PRIu64 " frees, %" PRIu64 " reserves, %" PRIu64
	       " refused\n", w.allocs, w.frees, w.reserves, w.nospace);
	drain(&w);
	world_fini(&w);

	printf("t_alloc: ok (%.1f s CPU)\n", (double)(clock() - t0) / CLOCKS_PER_SEC);
	return 0;
}

/* b_alloc: alloc/free operations per second of the segment allocator in a
 * 1 TiB space (4 KiB alignment, KV-sized requests 64 KiB..64 MiB) at a
 * steady fill, against glibc malloc/free of the same number of requests
 * (sizes scaled down 2048x so they stay on its heap, below the mmap threshold) measured in the same
 * run. Also: recovery-style ascending alloc_reserve, alloc_stats, and heap
 * bytes per live allocation. Prints numbers and ratios; never fails on them.
 */
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"

#define NLIVE 40000
#define OPS 2000000

static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* 64 KiB .. 64 MiB, log-uniform-ish: 2^(16..26) times 1..2 */
static uint64_t kv_size(void)
{
	uint64_t r = rnd();

	return (1ull << (16 + r % 11)) + (r >> 8) % (1ull << (16 + r % 11));
}

int main(void)
{
	static uint64_t sizes[OPS], live[NLIVE];
	static void *ptrs[NLIVE];
	const uint64_t space = 1ull << 40;
	struct alloc_stats st;
	struct alloc *a;
	struct mallinfo2 m0, m1;
	double t, ta, tm, tr, ts;
	uint64_t fails = 0;
	size_t i;

	for (i = 0; i < OPS; i++)
		sizes[i] = kv_size();

	m0 = mallinfo2();
	a = alloc_create(4096, space, 4096);
	if (!a)
		return 1;
	for (i = 0; i < NLIVE; i++) {
		live[i] = alloc_alloc(a, sizes[i], NULL);
		if (live[i] == UINT64_MAX)
			return 1;
	}

	/* steady state: free a random live one, allocate a new one */
	t = now();
	for (i = 0; i < OPS; i++) {
		size_t k = rnd() % NLIVE;

		alloc_free(a, live[k]);
		live[k] = alloc_alloc(a, sizes[i], NULL);
		if (live[k] == UINT64_MAX) {
			fails++;
			live[k] = alloc_alloc(a, 4096, NULL);
		}
	}
	ta = now() - t;
	m1 = mallinfo2();
	alloc_stats(a, &st);
	printf("b_alloc: %d live allocations in 1 TiB after %d alloc/free pairs: %.1f GiB used, %"
	       PRIu64 " free extents, allocator heap %.1f bytes per live allocation\n", NLIVE, OPS,
	       (double)(st.size - st.free_bytes) / (1 << 30), st.nfree,
	       (double)(m1.uordblks + m1.hblkhd - m0.uordblks - m0.hblkhd) / NLIVE);

	/* the same pattern through glibc */
	for (i = 0; i < NLIVE; i++)
		ptrs[i] = malloc(sizes[i] >> 11);
	rng = 88172645463325252ull;
	t = now();
	for (i = 0; i < OPS; i++) {
		size_t k = rnd() % NLIVE;

		free(ptrs[k]);
		ptrs[k] = malloc(sizes[i] >> 11);
	}
	tm = now() - t;
	for (i = 0; i < NLIVE; i++)
		free(ptrs[i]);

	t = now();
	for (i = 0; i < 1000; i++)
		alloc_stats(a, &st);
	ts = (now() - t) / 1000;
	alloc_destroy(a);

	/* recovery: reserve NLIVE extents in ascending order, as a scan
	 * reports them, into an empty allocator */
	a = alloc_create(4096, space, 4096);
	t = now();
	for (i = 0; i < NLIVE; i++)
		if (alloc_reserve(a, 4096 + i * (16ull << 20), 1 + sizes[i] % (16ull << 20)) != 0)
			return 1;
	tr = now() - t;
	alloc_destroy(a);

	printf("alloc+free: %.2f M pairs/s (%.0f ns per pair), %" PRIu64 " refused\n",
	       OPS / ta / 1e6, ta / OPS * 1e9, fails);
	printf("glibc malloc+free (reference): %.2f M pairs/s (%.0f ns per pair)\n",
	       OPS / tm / 1e6, tm / OPS * 1e9);
	printf("ratio alloc/glibc: %.2f\n", tm / ta);
	printf("alloc_reserve ascending: %.2f M/s\n", NLIVE / tr / 1e6);
	printf("alloc_stats: %.0f ns\n", ts * 1e9);
	return 0;
}

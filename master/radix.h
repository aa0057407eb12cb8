/* radix: an LSD radix sort of fixed-size records by a u64 key at their
 * start, for the master's bulk passes (a table file's waiting extents and
 * its keys out of order, a re-mount's replicas): loop thread only. */
#ifndef KVP_RADIX_H
#define KVP_RADIX_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "objtab.h"

/* LSD radix sort of n records of size bytes by the u64 at their start,
 * shifted right by pre: 11 bits a pass, the passes whose digit is the same
 * in every record skipped (a re-mount's 3M replicas, a load's batch:
 * sorted in a fraction of qsort's time, on the loop thread), through tmp
 * (room for n) or, NULL, a buffer of its own. qsort(cmp) without memory.
 * Inlined at each caller: the copies are of a constant size. */
static inline __attribute__((always_inline)) void
radix_sort(void *a, size_t n, size_t size, unsigned pre, int (*cmp)(const void *, const void *),
	   void *tmp)
{
	static size_t cnt[6][2048];	/* loop thread only */
	char *t = tmp ? tmp : n >= 256 ? objtab_big_alloc(n * size, false) : NULL;
	char *src = a, *dst = t, *x;
	uint64_t k, k0;

	if (!t || n < 256) {	/* a few: not worth clearing 96 KiB of counts */
		if (n > 1)
			qsort(a, n, size, cmp);
		if (t != tmp)
			free(t);
		return;
	}
	memset(cnt, 0, sizeof(cnt));
	for (size_t i = 0; i < n; i++) {
		memcpy(&k, src + i * size, 8);
		k >>= pre;
		for (unsigned d = 0; d < 6; d++)
			cnt[d][(k >> (11 * d)) & 2047]++;
	}
	memcpy(&k0, src, 8);
	k0 >>= pre;
	for (unsigned d = 0; d < 6; d++) {
		unsigned sh = 11 * d;
		size_t sum = 0;

		if (cnt[d][(k0 >> sh) & 2047] == n)
			continue;	/* one digit in every record */
		for (size_t v = 0; v < 2048; v++) {
			size_t c = cnt[d][v];

			cnt[d][v] = sum;
			sum += c;
		}
		for (size_t i = 0; i < n; i++) {
			memcpy(&k, src + i * size, 8);
			memcpy(dst + cnt[d][(k >> pre >> sh) & 2047]++ * size, src + i * size, size);
		}
		x = src;
		src = dst;
		dst = x;
	}
	if (src != (char *)a)
		memcpy(a, src, n * size);
	if (t != tmp)
		free(t);
}

#endif

/* b_checksum: what verifying a value costs on a local get. For 1 MiB
 * values: memcpy GB/s (the reference), memcpy then xxh3 of the copy (two
 * passes), the fused ext_copy_checksum (one pass: each 64-byte stripe is
 * hashed from the register that stores it) and xxh3 alone; hot (same 1 MiB
 * again and again) and cold (source
 * walks a 512 MiB buffer, beyond the caches, as a segment read is).
 * Prints GB/s and ratios to memcpy; the target is ratio >= 0.5 (checksum
 * must not halve a copy). The same for 32 MiB values, larger than L2, where
 * the fused form saves a second trip to memory. Never fails on a number.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "extent.h"


static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

enum mode { M_COPY, M_COPY_HASH, M_FUSED, M_HASH };

static volatile uint64_t sink;

/* GB/s of one mode over about `secs` seconds. */
static double run(enum mode m, size_t VAL, uint8_t *src, size_t src_len, uint8_t *dst,
		  double secs)
{
	size_t nval = src_len / VAL, i = 0;
	uint64_t bytes = 0, acc = 0;
	double t0 = now(), t;

	do {
		for (int r = 0; r < 4; r++, i++) {
			const uint8_t *s = src + (i % nval) * VAL;

			switch (m) {
			case M_COPY:
				memcpy(dst, s, VAL);
				acc += dst[i % VAL];
				break;
			case M_COPY_HASH:
				memcpy(dst, s, VAL);
				acc += ext_checksum(dst, VAL);
				break;
			case M_FUSED:
				acc += ext_copy_checksum(dst, s, VAL);
				break;
			case M_HASH:
				acc += ext_checksum(s, VAL);
				break;
			}
			bytes += VAL;
		}
		t = now() - t0;
	} while (t < secs);
	sink = acc;
	return (double)bytes / t / 1e9;
}

static void report(const char *what, size_t val, uint8_t *src, size_t len, uint8_t *dst)
{
	double cp, ch, fu, h;

	run(M_COPY, val, src, len, dst, 0.05);	/* warm up, fault pages */
	cp = run(M_COPY, val, src, len, dst, 0.3);
	ch = run(M_COPY_HASH, val, src, len, dst, 0.3);
	fu = run(M_FUSED, val, src, len, dst, 0.3);
	h = run(M_HASH, val, src, len, dst, 0.3);
	printf("%3zu MiB %-4s memcpy %6.2f GB/s | memcpy+xxh3 %6.2f GB/s (ratio %.2f) | "
	       "fused copy+xxh3 %6.2f GB/s (ratio %.2f) | xxh3 alone %6.2f GB/s\n",
	       val >> 20, what, cp, ch, ch / cp, fu, fu / cp, h);
	printf("%3zu MiB %-4s target ratio >= 0.50: two-pass %s, fused %s; fused/two-pass %.2f\n",
	       val >> 20, what,
	       ch / cp >= 0.5 ? "met" : "MISSED", fu / cp >= 0.5 ? "met" : "MISSED", fu / ch);
}

int main(void)
{
	size_t cold = 512u << 20;
	size_t big = 32u << 20;
	uint8_t *src = malloc(cold), *dst = malloc(big);

	if (!src || !dst) {
		printf("b_checksum: no memory for %zu MiB\n", cold >> 20);
		return 77;
	}
	for (size_t i = 0; i < cold; i += 8)
		memcpy(src + i, &i, 8);
	printf("b_checksum: xxh3-64 of 1 MiB values (the target) and 32 MiB ones (a KV chunk)\n");
	report("hot", 1u << 20, src, 1u << 20, dst);
	report("cold", 1u << 20, src, cold, dst);
	report("hot", big, src, big, dst);
	report("cold", big, src, cold, dst);
	free(src);
	free(dst);
	return 0;
}

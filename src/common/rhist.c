/* rhist: reuse intervals in quarter-octave buckets; see rhist.h. */
#include "rhist.h"

#define UPDATE 1024u			/* intervals between two quantiles, once warm */
#define HALVE 65536u			/* older intervals weigh half past this many */

/* Bucket of iv: 0 below 4, then four per power of two. */
static unsigned bucket(uint32_t iv)
{
	if (iv < 4)
		return 0;
	unsigned msb = 31u - (unsigned)__builtin_clz(iv);

	return 4 * msb + ((iv >> (msb - 2)) & 3);
}

/* The upper edge of bucket b. */
static uint64_t edge(unsigned b)
{
	if (b < 8)
		return 4;
	return (uint64_t)(4 + (b & 3) + 1) << (b / 4 - 2);
}

bool rhist_add(struct rhist *h, uint32_t iv)
{
	h->b[bucket(iv)]++;
	h->n++;
	/* often while few were seen, then every UPDATE */
	if (++h->fresh < (h->n < UPDATE * 4 ? UPDATE / 8 : UPDATE))
		return false;
	h->fresh = 0;
	if (h->n > HALVE) {
		h->n = 0;
		for (unsigned i = 0; i < RHIST_N; i++)
			h->n += (h->b[i] /= 2);
	}
	return true;
}

uint64_t rhist_quantile(const struct rhist *h, double q)
{
	uint64_t want = (uint64_t)(q * h->n), acc = 0;
	unsigned b = 0;

	while (b < RHIST_N - 1 && (acc += h->b[b]) < want)
		b++;
	return edge(b);
}

/* rhist: the histogram of reuse intervals the eviction policy's half-life
 * H follows (its 90th percentile), shared by the master (master/mpolicy.c)
 * and the model of its policy in `kvpool replay` (src/cli/polsim.c), both
 * in block accesses, so the two estimate H alike.
 * Quarter-octave buckets; the quantile is recomputed every 128 intervals
 * while fewer than 4,096 were seen, then every 1,024; past 65,536 the
 * counts are halved, so older intervals weigh less. Not thread-safe.
 */
#ifndef KVP_RHIST_H
#define KVP_RHIST_H

#include <stdbool.h>
#include <stdint.h>

#define RHIST_N 128			/* quarter-octave buckets of a 32-bit interval */

struct rhist {
	uint32_t b[RHIST_N];
	uint32_t n;			/* counted, after the halvings */
	uint32_t fresh;			/* added since the quantile was last due */
};

/* Counts one interval; true when the quantile is due again. */
bool rhist_add(struct rhist *h, uint32_t iv);
/* The upper edge of the bucket that holds quantile q (0..1) of what was
 * counted: 4 while nothing was. */
uint64_t rhist_quantile(const struct rhist *h, double q);

#endif

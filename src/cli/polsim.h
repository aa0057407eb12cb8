/* polsim: kvpool's own eviction policy simulated over a trace, the model
 * the live pool is measured against in `kvpool replay` (docs/replay.md
 * "The policy's model"). It does what the master does (master/mpolicy.c,
 * mchain.c, evict.c), on the same clock of block accesses: a request
 * reads the leading run of its blocks that is cached (each read
 * raises the block's decayed read count), then puts the rest in chain
 * order; a put resumes an evicted key's count from its ghost; a block is
 * evictable only while nothing cached extends it (a chain's tail leaves
 * first); the victim is the lowest priority, exactly (as the master's
 * victim heaps give it). Simpler than the master: ghosts are never
 * forgotten. Pure: it may run on any thread.
 */
#ifndef KVP_POLSIM_H
#define KVP_POLSIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace.h"

/* What the [master] section sets: eviction_policy = lru (recency alone,
 * chains kept), the rounds (above high_watermark of the capacity a round
 * evicts ratio of it; a high_watermark of 0 or 1 and above evicts only what
 * a put needs) and eviction_half_life (H in accesses; 0: the 90th
 * percentile of the reuse intervals seen, as the master's default). */
struct polsim_conf {
	bool lru;
	double high_watermark;
	double ratio;
	uint64_t half_life;
};

/* The policy holding cap blocks over the first nreqs requests (0: all).
 * 0, or -ENOMEM. */
int polsim_run(const struct trace *t, size_t nreqs, uint64_t cap, const struct polsim_conf *pc,
	       struct trace_sim *out);

#endif

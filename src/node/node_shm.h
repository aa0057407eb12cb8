/* node_shm: what the node does about memory in /dev/shm besides serving
 * its segment's bytes — the segment's reservation in the background
 * (node.reserve = background: fallocate a chunk at a time on a helper
 * thread once the node serves, so start-up costs nothing per GiB), and
 * reaping orphaned segments of kvpool processes on this host that died
 * without removing theirs (orphan.h), at start and every ORPHAN_SWEEP_MS,
 * and the warmer: a helper thread that follows the commit map and reads
 * one byte of each newly committed extent's header page through the
 * node's mapping. Clients write extents through their own mappings; the
 * first access to a page through the node's costs 5-10 us on this VM,
 * which a re-mount's scan of millions of headers paid all at once (10 s
 * per million objects): with each page read once as it is committed, the
 * scan at a re-mount to a new or restarted master reads memory already
 * mapped (tens of ms per 100,000). The scan stays the truth; the warmer
 * only moves when that first access is paid.
 * Created and destroyed by node.c on the loop thread; the reservation
 * thread only calls segment_reserve_step, the warmer only reads.
 */
#ifndef KVP_NODE_SHM_H
#define KVP_NODE_SHM_H

#include <stdint.h>

struct segment;
struct node_shm;

struct node_shm_stats {
	uint64_t reserved_bytes;	/* fallocated so far (whole file when done) */
	uint64_t reserve_ms;		/* time the background reservation took */
	uint64_t orphans_removed, orphan_bytes_removed;
	uint64_t warmed_pages;		/* header pages mapped by the warmer */
};

/* seg stays open until node_shm_destroy. */
struct node_shm *node_shm_create(struct segment *seg);
/* Reserves the rest of the segment on a helper thread (idempotent; a
 * failure is logged and leaves the rest sparse). */
void node_shm_reserve_start(struct node_shm *s);
/* Starts the warmer (format 2 only; idempotent; no thread: logged, the
 * scan works as before). */
void node_shm_warm_start(struct node_shm *s);
/* Reaps orphans now if the last sweep is older than ORPHAN_SWEEP_MS (or
 * force). Loop thread. */
void node_shm_reap(struct node_shm *s, uint64_t now_ms, int force);
/* Stops the reservation (between chunks) and the warmer, and joins them. */
void node_shm_destroy(struct node_shm *s);
const struct node_shm_stats *node_shm_stats(const struct node_shm *s);

#endif

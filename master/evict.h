/* evict: approximate-LRU eviction and demotion rounds per segment, in
 * bounded steps (see evict.c). It picks victims and hands them to the
 * modules below it (mobj drops a replica, segreg queues a DEMOTE); it never
 * calls a request handler. Loop thread only; no locks.
 */
#ifndef KVP_EVICT_H
#define KVP_EVICT_H

#include <stdbool.h>
#include <stdint.h>

struct master;
struct seg;

/* Starts a round on s if its usage is above the high watermark. */
void evict_check(struct master *m, struct seg *s);
/* Starts rounds on every allocatable segment, freeing at least need bytes
 * each (a PUT_START found no room). Returns true if any round started. */
bool evict_force(struct master *m, uint64_t need);
/* Evicts for about budget_us across the segments in a round (at least one
 * object each). Returns true while rounds remain. */
bool evict_step(struct master *m, unsigned budget_us);

#endif

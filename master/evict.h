/* evict: eviction and demotion rounds per segment, in bounded steps, the
 * tails of chains with the lowest reuse priority first (see evict.c). It picks victims and hands them to the
 * modules below it (mobj drops a replica, segreg queues a DEMOTE); it never
 * calls a request handler. Loop thread only; no locks.
 */
#ifndef KVP_EVICT_H
#define KVP_EVICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct master;
struct obj;
struct seg;

/* Starts a round on s if its usage is above the high watermark. */
void evict_check(struct master *m, struct seg *s);
/* Starts rounds on every allocatable segment that could hold need bytes (a
 * PUT_START item found no room), freeing together at least total bytes
 * (what the rest of its batch needs). Returns true if any evicted. */
bool evict_force(struct master *m, uint64_t need, uint64_t total);
/* Drops replica ri of o for room (an object that goes leaves a ghost). */
void evict_drop(struct master *m, struct obj *o, unsigned ri);
/* Evicts for about budget_us across the segments in a round (at least one
 * object each). Returns true while rounds remain. */
bool evict_step(struct master *m, unsigned budget_us);
/* The priorities changed meaning (eviction_policy reloaded): the victim
 * heaps are rebuilt at their next use. */
void evict_reorder(struct master *m);
/* Tests: regions of up to n replicas are scanned whole (256), larger
 * ones picked from their victim heaps. */
void evict_test_exact_max(size_t n);
/* The victim heaps hold every evictable replica (tests, master_check). */
bool evict_heaps_check(const struct master *m);

#endif

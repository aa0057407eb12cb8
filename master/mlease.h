/* mlease: the master's deadlines on objects — read leases (a count of
 * unreleased leases and a deadline per object, the lease array swept a
 * little at each grant and each tick), soft pins, and the put_timeout of
 * unfinished puts (the pending array, swept each tick).
 * Loop thread only; no locks.
 */
#ifndef KVP_MLEASE_H
#define KVP_MLEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "master_i.h"

/* Read lease held: some GET's lease is neither released (LEASE_RELEASE)
 * nor past its deadline. Only objects in the lease array have one (the
 * sweep takes ended ones out, so a wrapped deadline never revives). */
static inline bool obj_leased(const struct master *m, const struct obj *o)
{
	return obj_complete(o) && o->slot != OBJ_NOSLOT && o->leases &&
	       (int32_t)(o->deadline - m_now32(m)) > 0;
}

static inline bool obj_pinned(const struct master *m, const struct obj *o)
{
	uint32_t pin_s = obj_pin_s(&m->objs, o);

	return pin_s && (uint64_t)pin_s * 1000 > m->now_ms - m->start_ms;
}

/* master.lease_ttl in ms. */
static inline uint64_t mlease_ttl(const struct master *m)
{
	return m->conf.master.lease_ttl;
}

/* Gives the complete object o one more read lease: its deadline moves to
 * lease_ttl from now, its count of unreleased leases goes up (from 0 when
 * the last one had ended). 0, or -ENOMEM (no lease). */
int mlease_grant(struct master *m, struct obj *o);
/* A reader is done with o (LEASE_RELEASE): one lease fewer. When none is
 * left o is evictable and removable at once; a replaced value (a version)
 * is then freed. A count that saturated at OBJ_LEASES_MAX stays until the
 * deadline. */
void mlease_release(struct master *m, struct obj *o);
/* A requested pin TTL cut to [master] max_soft_pin_ttl. */
static inline uint64_t mlease_pin_ttl(const struct master *m, uint64_t ttl_ms)
{
	return ttl_ms < m->conf.master.max_soft_pin_ttl ? ttl_ms : m->conf.master.max_soft_pin_ttl;
}

/* Pin expiry for PIN ttl_ms: seconds since start, rounded up (0 unpins). */
uint32_t mlease_pin_until(const struct master *m, uint64_t ttl_ms);
/* Objects with a lease; ended ones count until a sweep reaches them. */
size_t mlease_active(const struct master *m);
/* Per tick: reclaims puts past put_timeout, forgets ended leases (each a
 * bounded number of entries). */
void mlease_sweep(struct master *m);

#endif

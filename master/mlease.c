/* mlease: leases, pins and put deadlines; see mlease.h. */
#include "mlease.h"

#include "log.h"

#define SWEEP_BUDGET 1024		/* lease / pending entries looked at per tick */

static void sweep_leases(struct master *m, size_t budget)
{
	while (budget-- && m->leased.n) {
		if (m->lease_cursor >= m->leased.n)
			m->lease_cursor = 0;
		struct obj *o = m->leased.v[m->lease_cursor];
		if (obj_leased(m, o))
			m->lease_cursor++;
		else if (o->flags & OBJ_VERSION)
			mobj_destroy(m, o, true);	/* a replaced value nobody reads */
		else
			mobj_arr_del(&m->leased, o);
	}
}

int mlease_grant(struct master *m, struct obj *o)
{
	if (!obj_leased(m, o))
		o->leases = 0;		/* the earlier leases ended: readers that died */
	o->deadline = m_now32(m) + (uint32_t)mlease_ttl(m);
	if (o->leases < OBJ_LEASES_MAX)
		o->leases++;
	if (o->slot == OBJ_NOSLOT) {
		int rc = mobj_arr_push(&m->leased, o);
		if (rc)
			return rc;
		/* two looked at per one added: the array stays near the set
		 * of live leases without long sweeps (o is leased already,
		 * so it is not one of them) */
		sweep_leases(m, 2);
	}
	return 0;
}

void mlease_release(struct master *m, struct obj *o)
{
	if (!obj_leased(m, o))
		return;			/* ended already (its deadline passed) */
	if (o->leases < OBJ_LEASES_MAX)
		o->leases--;
	if (!o->leases && (o->flags & OBJ_VERSION))
		mobj_destroy(m, o, true);	/* a replaced value: its last reader is done */
}

uint32_t mlease_pin_until(const struct master *m, uint64_t ttl_ms)
{
	if (!ttl_ms)
		return 0;
	uint64_t s = (m->now_ms - m->start_ms + ttl_ms + 999) / 1000;
	return s > UINT32_MAX ? UINT32_MAX : (uint32_t)s;
}

/* The lease array holds the objects with a lease and, until the sweeps
 * reach them, ones whose lease ran out: counting them exactly would touch
 * every object on each INFO or /metrics scrape. */
size_t mlease_active(const struct master *m)
{
	return m->leased.n;
}

static void sweep_pending(struct master *m)
{
	size_t budget = SWEEP_BUDGET;

	while (budget-- && m->pending.n) {
		if (m->pending_cursor >= m->pending.n)
			m->pending_cursor = 0;
		struct obj *o = m->pending.v[m->pending_cursor];
		if ((int32_t)(o->deadline - m_now32(m)) <= 0) {
			log_info("put of '%.*s' timed out; reclaimed", (int)o->key_len, obj_key(o));
			mobj_destroy(m, o, true);	/* swaps another entry in */
			m->put_timeouts++;
		} else {
			m->pending_cursor++;
		}
	}
}

void mlease_sweep(struct master *m)
{
	sweep_pending(m);
	sweep_leases(m, SWEEP_BUDGET);
}

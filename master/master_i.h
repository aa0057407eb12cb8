/* master_i: the master's internal state, shared by master.c (dispatch),
 * evict.c (eviction) and mhttp.c (metrics). Loop thread only; no locks.
 */
#ifndef KVP_MASTER_I_H
#define KVP_MASTER_I_H

#include "master.h"
#include "objtab.h"
#include "segreg.h"

/* Latency histogram bounds in seconds (Prometheus "le"), +Inf implied. */
#define MASTER_NBUCKETS 14
extern const double master_buckets[MASTER_NBUCKETS];

struct op_stats {
	uint64_t frames;
	uint64_t items;
	uint64_t failures;		/* frame errors + items with an error status */
	uint64_t hist[MASTER_NBUCKETS + 1];
	uint64_t sum_ns;
};

/* A PUT_START waiting for eviction's FREEs to be acknowledged. */
struct parked {
	struct parked *next;
	struct master_client *c;
	struct wire_hdr h;
	uint64_t deadline_ms;
	uint32_t next_item;		/* items before it are in reply */
	uint8_t *body;
	struct wbuf reply;		/* header, count and finished items */
};

struct master_client {
	struct master *m;
	struct master_client *prev, *next;
	master_send_fn send;
	master_close_fn close;
	void *arg;
	bool hello;
	uint16_t role;
	char name[64];
	char host_id[64];
	uint64_t created_ms;
	uint64_t last_seen_ms;		/* last frame: the liveness of its segments */
};

struct objarr {
	struct obj **v;
	size_t n, cap;
};

enum strategy { STRAT_RANDOM, STRAT_FREE_RATIO };

/* One key of a request batch, pointing into the frame body. */
struct kref {
	const uint8_t *p;
	uint32_t len;
	uint32_t hash;
};

struct master {
	struct kvp_conf conf;
	enum strategy strategy;
	struct objtab objs;
	struct segreg segs;
	uint64_t gen;			/* last generation handed out */
	uint64_t epoch;			/* server_epoch in HELLO replies */
	uint64_t now_ms;		/* monotonic, refreshed per frame and tick */
	uint64_t start_ms;
	uint64_t rng;
	uint64_t next_reqid;		/* master -> node requests */

	uint64_t keys;			/* complete objects */
	struct objarr leased;		/* complete objects that got a lease */
	size_t lease_cursor;
	struct objarr pending;		/* incomplete objects (put deadline in lease_ms) */
	size_t pending_cursor;

	struct master_client *clients;
	size_t nclients;
	struct parked *parked;

	bool evict_active;
	uint64_t evictions;		/* replicas dropped for room */
	uint64_t evicted_bytes;
	uint64_t demotions;		/* memory replicas moved to a spill tier */
	uint64_t promotions;		/* disk replicas copied back to memory */
	uint64_t promote_failures;	/* PROMOTEs the node could not do */
	uint64_t promote_skipped;	/* disk hits not promoted: memory tight */
	uint64_t put_timeouts;
	uint64_t node_expiries;
	uint64_t auth_failures;		/* refused HELLOs not logged yet */
	uint64_t auth_logged_ms;

	struct op_stats ops[WIRE_OP_MAX];
	struct wbuf scratch;		/* FREE frames being built */
	struct seg **cand;		/* PUT_START's segment order, segs.n long */
	size_t cand_cap;
	struct kref *kbuf;		/* the keys of the batch being handled */
	size_t kbuf_cap;
};

uint64_t master_now(struct master *m);

/* Object times: ms since the master started, 32 bits, wrapping. */
static inline uint32_t m_now32(const struct master *m)
{
	return (uint32_t)(m->now_ms - m->start_ms);
}

/* Read lease held: only objects in the lease array have one (the sweep
 * takes expired ones out, so a wrapped deadline never revives). */
static inline bool obj_leased(const struct master *m, const struct obj *o)
{
	return obj_complete(o) && o->slot != OBJ_NOSLOT &&
	       (int32_t)(o->deadline - m_now32(m)) > 0;
}

static inline bool obj_pinned(const struct master *m, const struct obj *o)
{
	return o->pin_s && (uint64_t)o->pin_s * 1000 > m->now_ms - m->start_ms;
}

/* ms since the last GET (or the put), modulo 2^32. */
static inline uint32_t obj_age(const struct master *m, const struct obj *o)
{
	return m_now32(m) - o->atime;
}

uint64_t master_rand(struct master *m);
/* Drops replica ri of o (queueing a FREE when its segment is online and
 * free_extent is set); removes o when it was the last replica. Returns true
 * if o was removed. */
bool master_drop_replica(struct master *m, struct obj *o, unsigned ri, bool free_extent);
size_t master_active_leases(struct master *m);
/* Bytes allocated and total over the mounted segments. */
void master_usage(const struct master *m, uint64_t *used, uint64_t *cap);

/* evict.c */
/* Starts a round on s if its usage is above the high watermark. */
void evict_check(struct master *m, struct seg *s);
/* Starts rounds on every allocatable segment, freeing at least need bytes
 * each (a PUT_START found no room). Returns true if any round started. */
bool evict_force(struct master *m, uint64_t need);
/* Evicts for about budget_us across the segments in a round (at least one
 * object each). Returns true while rounds remain. */
bool evict_step(struct master *m, unsigned budget_us);
bool evict_candidate(const struct master *m, const struct obj *o);
/* The node's spill tier usage as the master estimates it. */
uint64_t evict_spill_used(const struct seg *s);

#endif

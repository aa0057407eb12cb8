/* master_i: what the master's modules share — struct master (the whole
 * state), struct master_client, the per-opcode statistics, and the
 * master's clocks and random numbers. Each module's own operations are in
 * its header (mobj.h, evict.h, mlease.h, mtier.h, mbatch.h, mnode.h,
 * mput.h, mkeys.h). Loop thread only; no locks.
 */
#ifndef KVP_MASTER_I_H
#define KVP_MASTER_I_H

#include <time.h>

#include "master.h"
#include "mns.h"
#include "mobj.h"
#include "mpolicy.h"
#include "mten.h"
#include "mver.h"
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

struct master_client {
	struct master *m;
	struct master_client *prev, *next;
	master_send_fn send;
	master_close_fn close;
	master_queued_fn queued;	/* optional (master_client_set_backlog) */
	master_close_fn abort;
	void *arg;
	bool hello;
	uint16_t role;
	char name[64];
	char host_id[64];
	uint64_t created_ms;
	uint64_t last_seen_ms;		/* last frame: the liveness of its segments */
	struct mns_ns **ns;		/* namespaces it declared (mns.c) */
	uint32_t nns, ns_cap;
	bool ns_tried;			/* sent an NS_DECLARE (its reads are checked too) */
	int tenant;			/* m->ten.tab index of its token, -1: none (mten.c) */
	bool tenant_revoked;		/* a reload removed its token: refuse and close */
};

enum strategy { STRAT_RANDOM, STRAT_FREE_RATIO };

struct parked;				/* mput.c */
struct mevents;				/* mevents.c */
struct kref;				/* mkeys.c */
struct mrepl;				/* mrepl.c */
struct mtabfile;			/* mtabfile.c */

struct master {
	struct kvp_conf conf;
	enum strategy strategy;
	struct objtab objs;
	struct mver vers;		/* versions outside objs: upserts, replaced values */
	struct segreg segs;
	uint64_t gen;			/* last generation handed out */
	uint64_t epoch;			/* server_epoch in HELLO replies */
	uint64_t now_ms;		/* monotonic, refreshed per frame and tick */
	uint64_t frame_ns;		/* monotonic ns at the start of the frame being handled */
	uint64_t real_off_ns;		/* CLOCK_REALTIME - CLOCK_MONOTONIC at the last tick */
	uint64_t start_ms;
	uint64_t rng;
	uint64_t next_reqid;		/* master -> node requests */

	uint64_t keys;			/* complete objects */
	struct objarr leased;		/* complete objects that got a lease */
	size_t lease_cursor;
	struct objarr pending;		/* incomplete objects (put deadline in o->deadline) */
	size_t pending_cursor;

	struct master_client *clients;
	size_t nclients;
	struct master_client *cur;	/* whose frame master_handle handles (mns checks) */
	struct mns ns;			/* namespaces (mns.c) */
	struct mten ten;		/* tenants (mten.c) */
	struct parked *parked;		/* PUT_STARTs waiting for eviction (mput.c) */

	struct mevents *ev;		/* KV events; NULL when off (mevents.h) */
	bool ev_mute;			/* no BlockRemoved: the pool is being cleared */
	struct mpol pol;		/* reuse priorities, half-life, ghosts (mpolicy.c) */
	uint64_t orphaned;		/* objects left extending one that went (mchain.c) */
	uint64_t orphans_evicted;
	bool evict_active;
	uint64_t evictions;		/* replicas dropped for room */
	uint64_t evicted_bytes;
	uint64_t evict_ns;		/* time spent in eviction steps (paced and forced) */
	uint64_t demotions;		/* memory replicas moved to a spill tier */
	uint64_t promotions;		/* disk replicas copied back to memory */
	uint64_t promote_failures;	/* PROMOTEs the node could not do */
	uint64_t checksum_failures;	/* tier moves refused for a checksum mismatch */
	uint64_t promote_skipped;	/* disk hits not promoted: memory tight */
	uint64_t put_timeouts;
	uint64_t node_expiries;
	uint64_t ghosts_replaced;	/* puts of keys whose every replica was on a dead segment */
	uint64_t auth_failures;		/* refused HELLOs not logged yet */
	/* bytes the clients moved by path (CLIENT_STATS sums, enum wire_cstat) */
	uint64_t client_bytes[WIRE_CSTAT_N];
	/* prefix lookups: EXISTS and GET batches of more than one key (mkeys.c) */
	uint64_t prefix_blocks_asked, prefix_blocks_found;
	uint64_t prefix_tokens_asked, prefix_tokens_found;	/* under a namespace */
	uint64_t auth_logged_ms;

	struct op_stats ops[WIRE_OP_MAX];
	struct wbuf scratch;		/* FREE frames being built (mnode.c) */
	struct seg **cand;		/* PUT_START's segment order, segs.n long */
	size_t cand_cap;
	struct kref *kbuf;		/* the keys of the batch being handled */
	size_t kbuf_cap;
	/* one clock read per pipelined frame (master_handle) */
	struct master_client *ahead_c;	/* whose frames the last look ahead saw */
	unsigned ahead_left;		/* how many of them are not handled yet */
	struct op_stats *defer_st;	/* the last frame's, its duration not observed yet */
	uint64_t defer_t0;

	/* HA: a new leader's recovery window (mrecover.c) */
	bool recovering;
	uint64_t recover_start_ms, recover_until_ms;
	uint64_t recover_ms;		/* how long the last window lasted */
	uint64_t *expect;		/* the segment uuids the last leader had */
	bool *expect_done;
	size_t nexpect, nexpect_done;

	/* HA: the warm standby (mrepl.c) */
	struct mrepl *repl;		/* leader: its standbys; NULL: none */
	bool repl_mute;			/* a whole segment goes: no DROP per replica */
	struct mtabfile *tabfile;	/* ha = none: the table file (mtabfile.c); NULL: none */
	bool tabfile_loading;		/* mtabfile_load() applies the file */
	bool repl_synced;		/* standby: the snapshot is complete */
	/* applied ADDs whose memory extents are not reserved yet: reserved
	 * in offset order by mrepl_reserve_flush() (mrepl.c) */
	struct mrepl_dres *dres;
	size_t ndres, capdres;
	size_t dres_bound;		/* a table file's load: about how many may wait */
	struct prefault *dres_pf, *dres_tpf;	/* ... their regions: the batch, the sort's */
	void *dres_tmp;			/* the sort's second buffer (dres_tpf's), or NULL */
	uint64_t dres_last;		/* the last extent reserved: segment id, offset */
	bool warm;			/* leader: took the table over from a stream */
	uint64_t repl_records;		/* standby: records applied */
	uint64_t repl_lag_drops;	/* leader: standbys dropped for their backlog */
	uint64_t recon_confirmed;	/* new leader: replicas the nodes confirmed */
	uint64_t recon_ghosts;		/* ... dropped: the nodes did not hold them */
	uint64_t hold_mounts;		/* warm re-mounts that took puts before REPORTs */
};

static inline uint64_t master_clock_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: segment order (allocation_strategy random) and eviction
 * samples; seeded by master_create. */
static inline uint64_t master_rand(struct master *m)
{
	uint64_t x = m->rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	m->rng = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* Object times: ms since the master started, 32 bits, wrapping. */
static inline uint32_t m_now32(const struct master *m)
{
	return (uint32_t)(m->now_ms - m->start_ms);
}


/* Accesses to the pool (the eviction policy's clock, mpolicy.h) since o's
 * last (a read or the put), modulo 2^32: ages order as times do. */
static inline uint32_t obj_age(const struct master *m, const struct obj *o)
{
	return (uint32_t)m->pol.clk - o->atime;
}

#endif

/* segreg: the master's segment registry — one entry per segment a node
 * mounted (identity, allocator over [data_off, seg_size), grant secret,
 * liveness, the array of replicas living in it), the FREE queue of
 * extents waiting for the node's acknowledgement before their space is
 * reused, the DEMOTE and PROMOTE queues, and the spill extents of promoted
 * objects waiting for their readers' leases to end. Runs on the master's
 * loop thread only; no locks.
 */
#ifndef KVP_SEGREG_H
#define KVP_SEGREG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


#include "grant.h"
#include "mhold.h"
#include "objtab.h"
#include "vheap.h"
#include "wire.h"

struct alloc;
struct master_client;

/* An extent to FREE on the node. keep: the space is not the master's to
 * release after the ack (a rejected report overlapping a live allocation). */
struct fent {
	uint64_t off;
	uint64_t generation;
	uint8_t tier;
	bool keep;
};

/* A FREE request sent to the node and not yet answered. */
struct fbatch {
	struct fbatch *next;
	uint64_t reqid;
	uint32_t n;
	struct fent e[];
};

struct fvec {
	struct fent *v;
	size_t n, cap;
};

/* A memory extent to DEMOTE to the node's spill file, or a spill extent
 * to PROMOTE into the memory extent (to, to_len) the master allocated for
 * it: the key identifies the object when the answer comes (it may be gone
 * or changed by then). */
struct dent {
	uint64_t off;
	uint64_t generation;
	uint64_t len;
	uint64_t to, to_len;		/* PROMOTE only */
	uint16_t key_len;
	uint8_t key[];
};

/* A DEMOTE or PROMOTE request sent to the node and not yet answered. */
struct dbatch {
	struct dbatch *next;
	uint64_t reqid;
	uint32_t n;
	struct dent *e[];
};

struct dvec {
	struct dent **v;
	size_t n, cap;
};

/* The spill extent a promoted object left behind: readers that got it in
 * a GET reply may still read it, so it is FREEd (tier 1) only at due_ms,
 * when the object's lease at the time of the promotion has run out. */
struct lfree {
	uint64_t off;
	uint64_t generation;
	uint64_t len;
	uint64_t due_ms;		/* master monotonic ms */
};

struct lfvec {
	struct lfree *v;
	size_t n, cap;
};

/* One replica a warm segment held at its re-mount (mrepl.c): offset with
 * the tier in bits 1..2 and bit 0 set once the node reported it. */
struct mrecon_ent {
	uint64_t key;			/* off | tier << 1 | confirmed */
	uint64_t len;
	uint32_t hash, gen32;		/* the object: objtab_find_hg */
};

#define SEGREG_PTAG_MAX (1ull << 40)	/* segment bytes with page tags, at most */

struct seg {
	uint32_t id;
	bool online;			/* mounted; false: remembered for its uuid only */
	bool draining;			/* no new allocations */
	/* the node's REPORTs are in (its first HEARTBEAT after MOUNT follows
	 * them): until then a new extent could land on one not reported yet */
	bool reported;
	/* warm: taken over from the last leader's stream (mrepl.h), its node
	 * not re-mounted here yet; recon: since its re-mount, the replicas the
	 * table had then, each marked when the node reports it (the rest are
	 * ghosts, dropped at its first HEARTBEAT) */
	bool warm;
	struct mrecon_ent *recon;
	size_t nrecon;
	size_t recon_hint;		/* the entry after the last REPORT item's */
	bool recon_sorted;		/* sorted at its first use, not at the MOUNT */
	/* recon_pend: the array is allocated (recon_cap entries, the
	 * segment's replicas at the MOUNT) but filled at its first use, the
	 * first REPORT: the MOUNT's answer does not wait for a walk of every
	 * replica. recon_gen: the master's generation at the MOUNT; the
	 * puts placed here since (newer) are not the table's to confirm. */
	bool recon_pend;
	size_t recon_cap;
	uint64_t recon_gen;
	/* map_mount: its MOUNT carried the commit map, so the node scans
	 * after it and FREE, DEMOTE, PROMOTE wait for its REPORTs; held: a
	 * warm segment that takes puts before its REPORTs, around the holds
	 * (mhold.h) placed from that map, released at its first HEARTBEAT */
	bool map_mount;
	bool held;
	struct mhold hold;
	char name[64];
	char host_id[64];
	char shm_path[256];
	char endpoint[128];
	uint64_t shm_dev, shm_ino;
	uint64_t size;			/* whole file */
	uint64_t uuid;
	uint64_t data_off;
	uint32_t align;
	int32_t numa_node;
	uint8_t *rdma_info;
	uint32_t rdma_len;
	uint64_t spill_capacity, spill_used;
	uint64_t node_used;		/* as the node reported in HEARTBEAT */
	/* its data server's TCP bytes since it started (HEARTBEAT; 0 from a
	 * node that does not send them): the status page's rates */
	uint64_t tcp_read_bytes, tcp_written_bytes;
	uint8_t secret[WIRE_SECRET_LEN];
	struct grant_key grant_key;	/* HMAC key schedule of secret */

	struct alloc *alloc;
	/* alignment >= 4096 (SEG_MAP_SHIFT): a byte a page of the segment,
	 * segmap_tag of the generation of the memory replica starting in it,
	 * 0 none (NULL otherwise, over SEGREG_PTAG_MAX, or without memory:
	 * no holds at a warm re-mount, its puts wait for the REPORTs). Kept by seg_attach,
	 * seg_detach and seg_retier so that a warm re-mount's holds
	 * (mhold_plan) read it instead of walking the replicas. */
	uint8_t *ptag;
	size_t nptag;
	size_t ptag_set;		/* entries of ptag not 0 */
	uint64_t capacity;		/* size - data_off */
	uint64_t used;			/* allocated bytes, FREEs not yet acked included */
	uint64_t freeing;		/* of which FREEd, waiting for the node's ack */

	struct master_client *client;	/* the node's connection, NULL while away */
	uint64_t last_seen_ms;

	/* replicas of objects living here (both tiers); rep.sidx indexes this.
	 * Three regions, in this order: SEG_RGN_MEM [0, rend[0]), SEG_RGN_DISK
	 * [rend[0], rend[1]), SEG_RGN_OTHER [rend[1], nobjs) (mchain.h says
	 * which replica belongs where): eviction samples a region. */
	struct obj **objs;
	size_t nobjs, capobjs;
	size_t rend[2];
	/* SEG_RGN_MEM and SEG_RGN_DISK in priority order (vheap.h, evict.c):
	 * kept while on, for regions too large to scan */
	struct vheap vh[2];

	struct fvec fq;			/* FREEs to send */
	struct fbatch *inflight;	/* FREEs sent, not acked */
	/* After a re-mount: extents the master had freed but the node had not
	 * acknowledged; a REPORT of one of them is rejected (and FREEd again). */
	struct fvec reject;

	struct dvec dq;			/* DEMOTEs to send */
	struct dbatch *dinflight;	/* DEMOTEs sent, not answered */
	uint64_t demoting;		/* bytes of memory extents being demoted */
	uint64_t spill_dropped;		/* spill bytes FREEd since the last HEARTBEAT */
	uint64_t spill_added;		/* spill bytes demoted since the last HEARTBEAT */

	struct dvec pq;			/* PROMOTEs to send */
	struct dbatch *pinflight;	/* PROMOTEs sent, not answered */
	struct lfvec lfree;		/* spill extents of promoted objects, FREEd when due */

	/* eviction round state (evict.c); disk: the round evicts spill
	 * (tier 1) replicas instead of memory ones */
	bool evicting, evicting_disk;
	uint64_t evict_goal;		/* bytes to evict in this round */
	uint64_t evict_done;
	uint64_t disk_goal, disk_done;
};

struct segreg {
	struct seg **v;			/* indexed by id; v[0] unused */
	size_t n;			/* highest id + 1 */
	uint32_t online;
};

int segreg_init(struct segreg *r);
void segreg_destroy(struct segreg *r);
static inline struct seg *segreg_get(const struct segreg *r, uint32_t id)
{
	return id < r->n ? r->v[id] : NULL;
}
/* Online segment by id, NULL if unknown or gone. */
static inline struct seg *segreg_online(const struct segreg *r, uint32_t id)
{
	struct seg *s = segreg_get(r, id);

	return s && s->online ? s : NULL;
}
struct seg *segreg_by_uuid(const struct segreg *r, uint64_t uuid);
/* Bytes allocated and total over the online segments. */
void segreg_usage(const struct segreg *r, uint64_t *used, uint64_t *cap);
/* A new offline entry with the next id; NULL on OOM. */
struct seg *segreg_add(struct segreg *r);
/* Brings s online with a fresh allocator over [data_off, size): 0 or -EINVAL
 * (bad geometry) / -ENOMEM. The caller has filled the identity fields. */
int segreg_online_start(struct segreg *r, struct seg *s);
/* Takes s offline: the allocator, replica array and queued FREEs go; the
 * unacknowledged FREEs, the spill extents waiting in s->lfree and the
 * targets of unanswered PROMOTEs become s->reject (kept for a re-mount:
 * the node may still hold them). The caller has already detached every
 * replica. */
void segreg_offline(struct segreg *r, struct seg *s);

/* Draws a new grant secret and its HMAC key schedule: 0 or -EIO. */
int seg_new_secret(struct seg *s);
/* grant_make() with the precomputed key schedule (a third of the cost). */
void seg_grant(const struct seg *s, uint64_t generation, uint64_t off, uint64_t alloc_len,
	       uint64_t epoch, uint8_t out[WIRE_GRANT_LEN]);

/* Allocates len bytes (rounded to the alignment): offset or UINT64_MAX. */
uint64_t seg_alloc(struct seg *s, uint64_t len, uint64_t *alloc_len);
/* Reserves a reported extent: 0 or -EINVAL / -EEXIST. */
int seg_reserve(struct seg *s, uint64_t off, uint64_t len);
/* Releases an allocation the node never heard of (no FREE needed). */
void seg_unalloc(struct seg *s, uint64_t off);
static inline uint64_t seg_free_bytes(const struct seg *s)
{
	return s->capacity - s->used;
}

/* s lives: online, not draining, its node connected. */
static inline bool seg_alive(const struct seg *s)
{
	return s && s->online && !s->draining && s->client;
}

/* New extents may go into s: alive and its REPORTs in, or its holds
 * placed. */
static inline bool seg_allocatable(const struct seg *s)
{
	return seg_alive(s) && (s->reported || s->held);
}

/* The node's spill usage as the master sees it: the last HEARTBEAT's
 * figure, plus what was demoted or is being demoted since, minus what was
 * FREEd since. */
static inline uint64_t seg_spill_used(const struct seg *s)
{
	uint64_t u = s->spill_used + s->spill_added + s->demoting;

	return u > s->spill_dropped ? u - s->spill_dropped : 0;
}

/* Replica array membership (every replica, any tier; at most one replica
 * of an object per segment). seg_grow makes room for one more entry, after
 * which seg_attach cannot fail. seg_attach puts the replica in region
 * rgn; seg_place moves it to another. */
enum seg_rgn {
	SEG_RGN_MEM,			/* memory replicas eviction may take */
	SEG_RGN_DISK,			/* spill replicas eviction may take */
	SEG_RGN_OTHER,			/* replicas of objects others extend */
};
int seg_grow(struct seg *s);
int seg_attach(struct seg *s, struct obj *o, unsigned ri, enum seg_rgn rgn);
void seg_detach(struct seg *s, struct obj *o, unsigned ri);
/* Replica ri of o, still in s, was changed in place from was (DEMOTE or
 * PROMOTE answered): its page tag follows. */
void seg_retier(struct seg *s, const struct obj *o, unsigned ri, const struct rep *was);
/* Whether a memory extent starting at off's page is tagged (a live one
 * starts there: extents start on the alignment, at least a page). */
bool seg_ptag_taken(const struct seg *s, uint64_t off);
/* s->ptag matches the memory replicas in s->objs (tests, master_check):
 * each one's tag, and as many tags set as replicas (the count kept by
 * ptag_set; the array itself is counted only when small, as a master_check
 * after every record of a 1 TiB segment's 256 MiB of tags timed fuzz_repl out). */
bool seg_ptag_check(const struct seg *s);
void seg_place(struct seg *s, struct obj *o, unsigned ri, enum seg_rgn rgn);
/* The index range [*lo, *hi) of region rgn in s->objs. */
static inline void seg_rgn_range(const struct seg *s, enum seg_rgn rgn, size_t *lo, size_t *hi)
{
	*lo = rgn == SEG_RGN_MEM ? 0 : s->rend[rgn - 1];
	*hi = rgn == SEG_RGN_OTHER ? s->nobjs : s->rend[rgn];
}
/* o moved (objtab_regrow): re-point the entries of its replicas. */
void seg_repoint(struct segreg *r, struct obj *o);

/* Queues a FREE of an extent (space released on the ack unless keep). */
int seg_queue_free(struct seg *s, uint64_t off, uint64_t generation, uint8_t tier, bool keep);
/* Takes up to max queued FREEs into a new in-flight batch with reqid; NULL
 * when nothing is queued (or OOM: the entries stay queued). */
struct fbatch *seg_take_frees(struct seg *s, uint64_t reqid, uint32_t max);
/* The node acknowledged batch reqid: releases its space. Returns the number
 * of extents, or -1 if no such batch. */
int seg_ack_frees(struct seg *s, uint64_t reqid);
/* True (and the entry spent) if (tier, off, generation) is in s->reject. */
bool seg_rejected(struct seg *s, uint8_t tier, uint64_t off, uint64_t generation);
/* FREEs or DEMOTEs not answered yet: space is coming back. */
bool seg_frees_pending(const struct seg *s);

/* Queues a DEMOTE of the memory extent (off, len) of key: 0 or -ENOMEM. */
int seg_queue_demote(struct seg *s, const uint8_t *key, size_t key_len, uint64_t off,
		     uint64_t generation, uint64_t len);
/* Takes up to max queued DEMOTEs into a new in-flight batch (NULL: none). */
struct dbatch *seg_take_demotes(struct seg *s, uint64_t reqid, uint32_t max);
/* Unlinks the in-flight batch reqid (NULL if none); free with seg_dbatch_free. */
struct dbatch *seg_answered_demotes(struct seg *s, uint64_t reqid);
void seg_dbatch_free(struct dbatch *b);

/* Queues a PROMOTE of the spill extent (off, len) of key into the memory
 * extent (to, to_len) allocated for it: 0 or -ENOMEM. */
int seg_queue_promote(struct seg *s, const uint8_t *key, size_t key_len, uint64_t off,
		      uint64_t generation, uint64_t len, uint64_t to, uint64_t to_len);
/* Takes up to max queued PROMOTEs into a new in-flight batch (NULL: none). */
struct dbatch *seg_take_promotes(struct seg *s, uint64_t reqid, uint32_t max);
/* Unlinks the in-flight PROMOTE batch reqid (NULL if none); free with
 * seg_dbatch_free. */
struct dbatch *seg_answered_promotes(struct seg *s, uint64_t reqid);

/* Keeps the spill extent (off, generation, len) until due_ms: 0 or -ENOMEM. */
int seg_defer_free(struct seg *s, uint64_t off, uint64_t generation, uint64_t len,
		   uint64_t due_ms);
/* Queues the FREEs (tier 1) of the kept spill extents due by now_ms and
 * counts them in spill_dropped; returns how many. */
size_t seg_free_due(struct seg *s, uint64_t now_ms);

#endif

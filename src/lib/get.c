/* get: kvp_get, kvp_get_into, kvp_batch_get_into. GET asks the master where
 * each value lives (replicas, generation, checksum, a read lease); the reads
 * run as one transfer run, cheapest replica first, each read verified
 * against the master's record, the next replica tried on a mismatch or a
 * transport error; then one LEASE_RELEASE frees the leases. Runs on the calling thread; shared state only through
 * mcall, segtab, xport.
 */
#include <stdlib.h>
#include <string.h>

#include "client_i.h"
#include "clock.h"
#include "cuda.h"
#include "extent.h"
#include "get.h"
#include "kvpool.h"
#include "lcache.h"
#include "haloc.h"
#include "mcall.h"
#include "segtab.h"
#include "sock.h"
#include "xp_rdma.h"
#include "xport.h"

static inline uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

#define GET_INFLIGHT INT64_MIN	/* result while a read is outstanding */
/* HA: how long a get of a key read before waits for a master before it
 * reads where the key was, and how long after a master failed to answer
 * such gets do not wait at all (docs/ha.md). */
#define HA_READ_WAIT_MS 300
#define HA_DOWN_MS 1000

struct get_item {
	const char *key;
	uint32_t klen;
	void *dst;
	uint64_t cap;
	bool alloc;			/* kvp_get: dst is ours (malloc) */
	int64_t result;
	bool retry;
	bool leased;			/* this round's GET granted a lease: release it */
	uint64_t vlen, gen, csum, lease_end;
	uint64_t release_by;		/* past this a LEASE_RELEASE may meet a newer lease */
	uint8_t nrep, next;
	struct get_rep rep[KVP_MAX_REPLICAS];
	uint8_t order[KVP_MAX_REPLICAS];
	uint8_t norder;
	int xerr;			/* last transport error */
	bool mismatch, lease_lost;
	bool cached;			/* read from haloc, no master asked */
	struct xp_op op;
	struct xp_run *run;
	struct kvp *kvp;
	uint8_t *hdr;			/* EXT_HDR_SIZE + klen, in get_ctx.hdrs */
	uint64_t lc_token;		/* lcache state before the master was asked */
	bool dev;			/* dst is CUDA device memory */
	bool stage_pinned;
	void *stage;			/* host landing place for remote reads of dev */
};

struct get_ctx {
	uint64_t deadline;		/* of the whole call */
	struct get_item *items;
	size_t *todo;
	size_t ntodo;
	uint8_t *hdrs;			/* every item's hdr, one block */
};

static void get_enc(struct wbuf *b, size_t i, void *arg)
{
	struct get_ctx *gc = arg;
	struct get_item *it = &gc->items[gc->todo[i]];

	wb_str(b, it->key, it->klen);
}

/* The extent read must be the object the master named: header intact, same
 * key, length, generation, segment, and the value hashes to the checksum. */
static bool get_verify(const struct get_item *it, const struct xp_op *op)
{
	const struct get_rep *rp = &it->rep[it->order[it->next - 1]];
	struct ext_hdr h;
	const uint8_t *k;

	if (ld32(op->hdr + 8) != it->klen)
		return false;
	if (ext_decode(op->hdr, op->alloc_len, 0, &h, &k) != 0)
		return false;
	if (h.key_len != it->klen || memcmp(k, it->key, it->klen) != 0)
		return false;
	if (h.value_len != it->vlen || h.generation != it->gen || h.value_checksum != it->csum)
		return false;
	if (rp->tier == KVP_TIER_MEM && h.seg_uuid != rp->seg->seg_uuid)
		return false;
	return op->csum == it->csum;
}

static bool get_next(struct get_item *it);

/* A value just read and verified: where the next get of the key can look
 * first, for lcache when it came from a memory extent (local, or over TCP;
 * unless this handle removed or replaced the key meanwhile), and for haloc
 * (HA) when a master named it. */
static void get_remember(const struct get_item *it, const struct xp_op *op)
{
	struct kvp *kvp = it->kvp;
	const struct get_rep *rp = &it->rep[it->order[it->next - 1]];
	struct lc_loc l = {
		.seg_id = rp->id,
		.tier = rp->tier,
		.seg_uuid = rp->seg->seg_uuid,
		.off = rp->off,
		.alloc_len = rp->alloc_len,
		.vlen = it->vlen,
		.gen = it->gen,
		.csum = it->csum,
	};

	if (op->kind == XP_LOCAL || (op->kind == XP_TCP && op->tier == KVP_TIER_MEM))
		lc_insert(kvp->lc, it->key, it->klen, it->lc_token, &l);
	if (kvp->haloc && !it->cached)
		haloc_put(kvp, it->key, it->klen, &l);
}

static void get_op_done(struct xp_op *op)
{
	struct get_item *it = op->arg;
	struct kvp *kvp = it->kvp;

	if (op->status == 0) {
		if (get_verify(it, op)) {
			/* Verified in host memory; only now onto the GPU. */
			if (it->dev && op->dst == it->stage &&
			    cuda_memcpy(it->dst, it->stage, it->vlen) < 0) {
				it->result = KVP_EIO;
				return;
			}
			it->result = (int64_t)it->vlen;
			client_count(kvp, gets, 1);
			if (op->tier == KVP_TIER_DISK) {
				client_count(kvp, disk_gets, 1);
				client_count(kvp, disk_bytes, it->vlen);
			}
			get_remember(it, op);
			return;
		}
		client_count(kvp, checksum_mismatches, 1);
		it->mismatch = true;
		if (clock_now_ms() > it->lease_end)
			it->lease_lost = true;
	} else {
		it->xerr = op->status;
	}
	if (get_next(it)) {
		client_count(kvp, retries, 1);
		return;
	}
	if (it->lease_lost)
		it->result = KVP_ELEASE;
	else if (it->xerr)
		it->result = it->xerr;
	else
		it->result = KVP_ECHECKSUM;
}

/* Queues a read of the next replica in order; false when none is left. */
static bool get_next(struct get_item *it)
{
	struct xp_op *op = &it->op;

	if (it->next >= it->norder)
		return false;
	struct get_rep *rp = &it->rep[it->order[it->next++]];

	memset(op, 0, sizeof(*op));
	op->dir = XP_READ;
	op->kind = rp->kind;
	op->seg = rp->seg;
	op->tier = rp->tier;
	op->off = rp->off;
	op->alloc_len = rp->alloc_len;
	op->hdr = it->hdr;
	op->hdr_len = EXT_HDR_SIZE + it->klen;
	op->dst = it->dst;
	if (it->dev && rp->kind == XP_LOCAL) {
		op->flags |= XP_F_DEVICE;
	} else if (it->dev) {
		if (!it->stage)
			it->stage = xp_stage_alloc(it->vlen, &it->stage_pinned);
		if (!it->stage) {
			it->xerr = KVP_ENOMEM;
			return false;
		}
		op->dst = it->stage;
	}
	op->len = it->vlen;
	op->done = get_op_done;
	op->arg = it;
	xp_run_add(it->run, op);
	return true;
}

/* Orders an item's replicas: memory replicas mapped on this host first,
 * then memory over RDMA, then memory over TCP, then disk replicas (read by
 * their node); xp_path_choose() says which path each may take. */
static void get_order(struct kvp *kvp, struct get_item *it)
{
	int kind[KVP_MAX_REPLICAS];

	for (uint8_t i = 0; i < it->nrep; i++) {
		struct get_rep *rp = &it->rep[i];

		kind[i] = !rp->seg ? -1 :
			  xp_path_choose(kvp->proto, rp->seg->local, xp_rdma_seg_ok(kvp, rp->seg),
					 true, rp->tier);
	}
	it->norder = 0;
	for (int pass = 0; pass < 4; pass++) {
		for (uint8_t i = 0; i < it->nrep; i++) {
			struct get_rep *rp = &it->rep[i];
			bool mem = rp->tier == KVP_TIER_MEM;

			if ((pass == 0 && kind[i] == XP_LOCAL) ||
			    (pass == 1 && kind[i] == XP_RDMA) ||
			    (pass == 2 && kind[i] == XP_TCP && mem) ||
			    (pass == 3 && kind[i] == XP_TCP && !mem)) {
				rp->kind = (enum xp_kind)kind[i];
				it->order[it->norder++] = i;
			}
		}
	}
}

/* 0 (g filled), the item's own error status, or KVP_EPROTO when the bytes
 * are malformed (a status out of range, a length the pool cannot hold, no
 * replica, or a short frame). */
int get_reply_item(struct rbuf *r, uint64_t max_value, struct get_reply *g)
{
	memset(g, 0, sizeof(*g));
	g->status = rb_status(r);
	g->vlen = rb_u64(r);
	g->gen = rb_u64(r);
	g->csum = rb_u64(r);
	g->lease_ms = rb_u64(r);
	uint8_t nrep = rb_u8(r);

	for (uint8_t i = 0; i < nrep; i++) {
		struct get_rep rp = { 0 };

		rp.id = rb_u32(r);
		rp.tier = rb_u8(r);
		rp.off = rb_u64(r);
		rp.alloc_len = rb_u64(r);
		if (g->nrep < KVP_MAX_REPLICAS)
			g->rep[g->nrep++] = rp;
	}
	if (!rb_ok(r) || g->status > 0)
		return KVP_EPROTO;
	if (g->status)
		return g->status;
	if (!g->nrep || !g->vlen || g->vlen > max_value || g->vlen > INT64_MAX)
		return KVP_EPROTO;
	return 0;
}

static void get_plan(struct kvp *kvp, struct get_ctx *gc, struct mcall *c, size_t nc,
		     struct xp_run *run)
{
	bool refreshed = false;
	uint64_t now = clock_now_ms();

	for (size_t f = 0; f < nc; f++) {
		struct rbuf r;
		int frc = mc_batch_reply(&c[f], &r);

		for (uint32_t k = 0; k < c[f].count; k++) {
			struct get_item *it = &gc->items[gc->todo[c[f].first + k]];
			struct get_reply g;
			int st = frc;

			if (!st && (st = get_reply_item(&r, kvp->conf.cluster.max_object_size, &g)) ==
				   KVP_EPROTO)
				frc = st;	/* the rest of the frame cannot be trusted */
			it->nrep = 0;
			if (!st) {
				it->vlen = g.vlen;
				it->gen = g.gen;
				it->csum = g.csum;
				uint64_t ms = g.lease_ms > UINT32_MAX ? UINT32_MAX : g.lease_ms;

				it->lease_end = now + ms;
				/* the master's clock started before ours: keep a
				 * margin for the round trip */
				it->release_by = now + ms - ms / 16;
				it->nrep = g.nrep;
				memcpy(it->rep, g.rep, sizeof(g.rep));
			}
			it->result = st;
			it->leased = st == 0;
			it->run = run;
			it->kvp = kvp;
			it->next = it->norder = 0;
			it->xerr = 0;
			it->mismatch = it->lease_lost = false;
			if (st)
				continue;
			if (it->alloc) {
				free(it->dst);
				it->dst = malloc(it->vlen);
				if (!it->dst) {
					it->result = KVP_ENOMEM;
					continue;
				}
			} else if (it->vlen > it->cap) {
				it->result = KVP_ETOOBIG;
				continue;
			}
		}
	}
	for (size_t t = 0; t < gc->ntodo; t++) {
		struct get_item *it = &gc->items[gc->todo[t]];

		if (it->result)
			continue;
		for (uint8_t i = 0; i < it->nrep; i++)
			it->rep[i].seg = segtab_get(kvp, it->rep[i].id, &refreshed, gc->deadline);
		get_order(kvp, it);
		if (!it->norder) {
			bool known = false;

			for (uint8_t i = 0; i < it->nrep; i++)
				known |= it->rep[i].seg != NULL;
			it->result = known ? KVP_ENOTSUP : KVP_ENOSEG;
			continue;
		}
		it->result = GET_INFLIGHT;
		get_next(it);
	}
}

static void get_release(struct kvp *kvp, struct get_ctx *gc)
{
	for (size_t t = 0; t < gc->ntodo; t++) {
		struct get_item *it = &gc->items[gc->todo[t]];

		for (uint8_t i = 0; i < it->nrep; i++) {
			segtab_put(kvp, it->rep[i].seg);
			it->rep[i].seg = NULL;
		}
	}
}

static void get_enc_release(struct wbuf *b, size_t i, void *arg)
{
	struct get_ctx *gc = arg;
	struct get_item *it = &gc->items[gc->todo[i]];

	wb_str(b, it->key, it->klen);
	wb_u64(b, it->gen);
}

/* The round's reads are over (verified, failed or never started): one
 * LEASE_RELEASE for every lease it got that has not run out, posted
 * without waiting for the reply. A lost release only means the lease runs
 * its lease_ttl. Takes over gc->todo's order (restored by the caller). */
static void get_release_leases(struct kvp *kvp, struct get_ctx *gc)
{
	uint64_t now = clock_now_ms();
	size_t *keep = gc->todo, n = gc->ntodo, nrel = 0;
	size_t *rel = malloc((n ? n : 1) * sizeof(*rel));
	struct mcall *c;
	size_t nc = 0;

	if (!rel)
		return;
	for (size_t t = 0; t < n; t++) {
		struct get_item *it = &gc->items[keep[t]];

		/* one whose lease ended may share the count with a newer reader */
		if (it->leased && now < it->release_by)
			rel[nrel++] = keep[t];
		it->leased = false;
	}
	if (nrel) {
		gc->todo = rel;
		gc->ntodo = nrel;
		c = mc_batch(kvp, WIRE_OP_LEASE_RELEASE, NULL, 0, nrel, get_enc_release, gc, &nc);
		if (c) {
			if (mc_post(kvp, c, nc, gc->deadline) == 0)
				client_count(kvp, lease_releases, nc);
			mc_free(c, nc);
		}
		gc->todo = keep;
		gc->ntodo = n;
	}
	free(rel);
}

/* Reads the items of todo whose location haloc remembers from there,
 * without a master; those read take leave of todo, the others stay (their
 * result reset). Returns how many were tried. */
static size_t get_cached(struct kvp *kvp, struct get_ctx *gc)
{
	struct xp_run run = { .kvp = kvp, .deadline = gc->deadline };
	size_t tried = 0, keep = 0;

	for (size_t t = 0; t < gc->ntodo; t++) {
		struct get_item *it = &gc->items[gc->todo[t]];
		struct lc_loc e;

		it->cached = false;
		if (!haloc_get(kvp, it->key, it->klen, &e))
			continue;
		struct client_seg *s = segtab_get_uuid(kvp, e.seg_uuid);
		if (!s)
			continue;
		if (it->alloc) {
			free(it->dst);
			it->dst = malloc(e.vlen);
			if (!it->dst) {
				segtab_put(kvp, s);
				continue;
			}
		} else if (e.vlen > it->cap) {
			segtab_put(kvp, s);
			continue;	/* the master's answer will say ETOOBIG */
		}
		it->cached = true;
		it->leased = false;		/* no master was asked: no lease to release */
		it->vlen = e.vlen;
		it->gen = e.gen;
		it->csum = e.csum;
		it->lease_end = UINT64_MAX;	/* no lease: a mismatch is only a miss */
		it->nrep = 1;
		it->rep[0] = (struct get_rep){ .id = s->id, .tier = e.tier, .off = e.off,
					       .alloc_len = e.alloc_len, .seg = s };
		it->run = &run;
		it->kvp = kvp;
		it->next = it->norder = 0;
		it->xerr = 0;
		it->mismatch = it->lease_lost = false;
		get_order(kvp, it);
		it->result = GET_INFLIGHT;
		tried++;
		if (!get_next(it))
			it->result = KVP_ENOSEG;
	}
	if (!tried)
		return 0;
	xp_run_wait(&run);
	for (size_t t = 0; t < gc->ntodo; t++) {
		struct get_item *it = &gc->items[gc->todo[t]];

		if (it->cached) {
			segtab_put(kvp, it->rep[0].seg);
			it->rep[0].seg = NULL;
			it->nrep = 0;
			it->cached = false;
			if (it->result >= 0)
				continue;	/* read and verified */
			it->result = 0;
		}
		gc->todo[keep++] = gc->todo[t];
	}
	gc->ntodo = keep;
	return tried;
}

static bool master_failed(int rc)
{
	return rc == KVP_ENOTLEADER || rc == KVP_ECONN || rc == KVP_ETIMEDOUT;
}

static int get_batch(struct kvp *kvp, struct get_ctx *gc)
{
	int rc = 0;
	bool waited = false;

	/* HA: no master answered a moment ago: what haloc knows is read
	 * from where it was, the rest still asks. */
	if (kvp->haloc && clock_now_ms() < atomic_load(&kvp->master_down_until))
		get_cached(kvp, gc);
	for (int attempt = 0; attempt < 2 && gc->ntodo; attempt++) {
		struct xp_run run = { .kvp = kvp, .deadline = gc->deadline };
		struct mcall *c;
		size_t nc = 0, keep = 0;
		uint64_t dl = gc->deadline;

		/* a master that does not answer soon is in an election: keys
		 * read before are not kept waiting for it (see get_cached) */
		if (kvp->haloc && !waited && clock_now_ms() + HA_READ_WAIT_MS < dl)
			dl = clock_now_ms() + HA_READ_WAIT_MS;
		c = mc_batch(kvp, WIRE_OP_GET, NULL, 0, gc->ntodo, get_enc, gc, &nc);
		if (!c)
			return KVP_ENOMEM;
		rc = mc_call(kvp, c, nc, dl);
		if (rc < 0 && kvp->haloc && master_failed(rc) && !waited) {
			mc_free(c, nc);
			waited = true;
			atomic_store(&kvp->master_down_until, clock_now_ms() + HA_DOWN_MS);
			get_cached(kvp, gc);
			attempt--;	/* the rest waits the whole deadline */
			continue;
		}
		if (rc < 0) {
			mc_free(c, nc);
			if (!attempt)
				return rc;
			/* The first round went through: per-item results. */
			for (size_t t = 0; t < gc->ntodo; t++)
				gc->items[gc->todo[t]].result = rc;
			return 0;
		}
		get_plan(kvp, gc, c, nc, &run);
		mc_free(c, nc);
		xp_run_wait(&run);
		get_release(kvp, gc);
		get_release_leases(kvp, gc);
		for (size_t t = 0; t < gc->ntodo; t++) {
			struct get_item *it = &gc->items[gc->todo[t]];

			if (it->result == GET_INFLIGHT)
				it->result = KVP_EINTERNAL;	/* cannot happen: the run drains */
			if (it->result < 0 && xp_retryable((int)it->result))
				gc->todo[keep++] = gc->todo[t];
		}
		if (!keep || attempt)
			break;
		gc->ntodo = keep;
		client_count(kvp, retries, keep);
		segtab_invalidate(kvp);
	}
	return 0;
}

/* An optimistic TCP read is done: what the node sent must be the value
 * the location names (get_verify against it, as for a replica the master
 * named). The result says so; failures fall back to the master. */
static void get_opt_done(struct xp_op *op)
{
	struct get_item *it = op->arg;

	if (op->status == 0 && get_verify(it, op)) {
		it->result = (int64_t)it->vlen;
		client_count(it->kvp, gets, 1);
		return;
	}
	if (op->status == 0 && op->csum != it->csum && ld32(op->hdr + 8) == it->klen)
		client_count(it->kvp, checksum_mismatches, 1);
	it->result = KVP_ESTALE;
}

/* An optimistic read of it over TCP from the remembered location l on
 * seg (whose reference the item now holds in rep[0]). */
static void get_opt_tcp(struct kvp *kvp, struct get_item *it, const struct lc_loc *l,
			struct client_seg *seg, struct xp_run *run)
{
	struct xp_op *op = &it->op;

	it->vlen = l->vlen;
	it->gen = l->gen;
	it->csum = l->csum;
	it->kvp = kvp;
	it->run = run;
	it->rep[0] = (struct get_rep){ .id = l->seg_id, .tier = KVP_TIER_MEM, .off = l->off,
				       .alloc_len = l->alloc_len, .seg = seg, .kind = XP_TCP };
	it->nrep = it->norder = 1;
	it->order[0] = 0;
	it->next = 1;
	memset(op, 0, sizeof(*op));
	op->dir = XP_READ;
	op->kind = XP_TCP;
	op->seg = seg;
	op->tier = KVP_TIER_MEM;
	op->off = l->off;
	op->alloc_len = l->alloc_len;
	op->hdr = it->hdr;
	op->hdr_len = EXT_HDR_SIZE + it->klen;
	op->dst = it->dst;
	op->len = l->vlen;
	op->done = get_opt_done;
	op->arg = it;
	it->result = GET_INFLIGHT;
	xp_run_add(run, op);
}

/* The optimistic pass: items whose key has a remembered location are read
 * from there without asking the master first (lcache.h): from a local
 * segment by memcpy (xp_local_opt_read), from another host's over TCP,
 * straight from its node (one round trip instead of two). What validates
 * is done; the rest stays in gc->todo for GET. Each item's lcache token is
 * taken here, before the master hears of it. */
static void get_optimistic(struct kvp *kvp, struct get_ctx *gc)
{
	struct lcache *lc = kvp->lc;
	struct { struct lc_loc l; uint64_t hash; bool hit, tcp; } *h;
	struct lc_segs o = { .kvp = kvp };
	struct xp_run run = { .kvp = kvp, .deadline = gc->deadline };
	uint64_t bytes = 0, now = clock_now_ms();
	size_t keep = 0, ntcp = 0;
	bool nt;

	if (!lc || !gc->ntodo || !(h = malloc(gc->ntodo * sizeof(*h))))
		return;
	/* In passes, so that a batch's cache misses overlap (see
	 * exists_optimistic in client.c). */
	for (size_t t = 0; t < gc->ntodo; t++) {
		struct get_item *it = &gc->items[gc->todo[t]];

		h[t].hash = lc_key_hash(it->key, it->klen);
		it->lc_token = lc_token_h(lc, h[t].hash);
		lc_prefetch(lc, h[t].hash);
	}
	for (size_t t = 0; t < gc->ntodo; t++)
		lc_prefetch_way(lc, h[t].hash);
	for (size_t t = 0; t < gc->ntodo; t++) {
		struct get_item *it = &gc->items[gc->todo[t]];
		struct client_seg *seg;

		h[t].tcp = false;
		h[t].hit = !it->dev &&
			   lc_lookup_h(lc, h[t].hash, it->klen, now, &h[t].l) &&
			   (it->alloc || h[t].l.vlen <= it->cap);
		if (!h[t].hit)
			continue;
		bytes += h[t].l.vlen;
		if ((seg = lc_seg(&o, h[t].l.seg_id)))
			xp_local_opt_prefetch(seg, &h[t].l, it->klen);
	}
	nt = xp_local_nt_read(bytes);
	for (size_t t = 0; t < gc->ntodo; t++) {
		struct get_item *it = &gc->items[gc->todo[t]];
		struct client_seg *seg = h[t].hit ? lc_seg(&o, h[t].l.seg_id) : NULL;
		int rc = KVP_ESTALE;
		bool raced = false;

		if (h[t].hit && it->alloc) {
			free(it->dst);
			it->dst = malloc(h[t].l.vlen);
		}
		if (h[t].hit && !it->dst) {
			rc = KVP_ENOMEM;
		} else if (seg) {
			rc = xp_local_opt_read(seg, &h[t].l, it->key, it->klen, it->dst, nt, &raced);
		} else if (h[t].hit && (seg = segtab_peek(kvp, h[t].l.seg_id))) {
			if (seg->seg_uuid == h[t].l.seg_uuid &&
			    xp_path_choose(kvp->proto, false, false, true, KVP_TIER_MEM) == XP_TCP) {
				get_opt_tcp(kvp, it, &h[t].l, seg, &run);
				h[t].tcp = true;
				ntcp++;
				continue;
			}
			segtab_put(kvp, seg);
		}
		if (rc == 0) {
			it->result = (int64_t)h[t].l.vlen;
			client_count(kvp, gets, 1);
			client_count(kvp, local_bytes, h[t].l.vlen);
			lc_count(lc, 1, 0);
			lc_touch(kvp, it->key, it->klen);
			continue;
		}
		if (h[t].hit) {
			lc_drop(lc, it->key, it->klen, &h[t].l);
			lc_count(lc, 0, 1);
			if (raced)
				lc_count_raced(lc);
			if (rc == KVP_ECHECKSUM)
				client_count(kvp, checksum_mismatches, 1);
		}
		h[t].hit = false;
	}
	lc_seg_end(&o);
	if (ntcp)
		xp_run_wait(&run);
	for (size_t t = 0; t < gc->ntodo; t++) {
		struct get_item *it = &gc->items[gc->todo[t]];

		if (h[t].tcp) {
			segtab_put(kvp, it->rep[0].seg);
			it->rep[0].seg = NULL;
			it->nrep = 0;
			if (it->result > 0) {
				lc_count(lc, 1, 0);
				lc_touch(kvp, it->key, it->klen);
				continue;
			}
			it->result = 0;
			lc_drop(lc, it->key, it->klen, &h[t].l);
			lc_count(lc, 0, 1);
		} else if (h[t].hit) {
			continue;	/* read locally */
		}
		gc->todo[keep++] = gc->todo[t];
	}
	gc->ntodo = keep;
	free(h);
	lc_touch_poll(kvp);
}

/* Each item's extent header lands at hdr: one block for the batch, a
 * slot of EXT_HDR_SIZE + klen per item, 8-byte aligned. */
static size_t get_hdr_slot(uint32_t klen)
{
	return (EXT_HDR_SIZE + (size_t)klen + 7) & ~(size_t)7;
}

static int get_setup(struct kvp *kvp, struct get_ctx *gc, size_t n, const char *const *keys)
{
	size_t room = 0;
	uint8_t *p;

	gc->deadline = sock_deadline(kvp);
	gc->items = calloc(n, sizeof(*gc->items));
	gc->todo = calloc(n, sizeof(*gc->todo));
	if (!gc->items || !gc->todo)
		return KVP_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct get_item *it = &gc->items[i];

		it->key = keys[i];
		it->result = mc_key_check(keys[i], &it->klen);
		if (!it->result)
			room += get_hdr_slot(it->klen);
	}
	p = gc->hdrs = room ? malloc(room) : NULL;
	for (size_t i = 0; i < n; i++) {
		struct get_item *it = &gc->items[i];

		if (it->result)
			continue;
		if (!p) {
			it->result = KVP_ENOMEM;
			continue;
		}
		it->hdr = p;
		p += get_hdr_slot(it->klen);
		gc->todo[gc->ntodo++] = i;
	}
	return 0;
}

static void get_teardown(struct kvp *kvp, struct get_ctx *gc, size_t n)
{
	for (size_t i = 0; gc->items && i < n; i++)
		xp_stage_free(gc->items[i].stage, gc->items[i].stage_pinned);
	free(gc->hdrs);
	free(gc->items);
	free(gc->todo);
	cstats_poll(kvp);
}

int kvp_batch_get_into(struct kvp *kvp, size_t n, const char *const *keys,
		       void *const *bufs, const size_t *caps, int64_t *results)
{
	struct get_ctx gc = { 0 };
	int rc;

	if (!kvp || (n && (!keys || !bufs || !caps || !results)))
		return KVP_EINVAL;
	if (!n)
		return 0;
	rc = get_setup(kvp, &gc, n, keys);
	if (rc == 0) {
		size_t keep = 0;

		for (size_t i = 0; i < n; i++) {
			gc.items[i].dst = bufs[i];
			gc.items[i].cap = bufs[i] ? caps[i] : 0;
		}
		bool cuda = cuda_driver_loaded();

		for (size_t t = 0; t < gc.ntodo; t++) {
			struct get_item *it = &gc.items[gc.todo[t]];

			it->dev = cuda && it->dst && cuda_is_device(it->dst);
			if (it->dev && !cuda_available())
				it->result = xp_device_refused(it->dst);
			else
				gc.todo[keep++] = gc.todo[t];
		}
		gc.ntodo = keep;
		get_optimistic(kvp, &gc);
		rc = get_batch(kvp, &gc);
	}
	for (size_t i = 0; i < n; i++) {
		if (!gc.items)
			results[i] = rc;
		else if (rc < 0 && gc.items[i].result != KVP_EKEY)
			results[i] = rc;
		else
			results[i] = gc.items[i].result;
	}
	get_teardown(kvp, &gc, n);
	return rc < 0 ? rc : 0;
}

int64_t kvp_get_into(struct kvp *kvp, const char *key, void *buf, size_t cap)
{
	int64_t res;
	int rc = kvp_batch_get_into(kvp, 1, &key, &buf, &cap, &res);

	return rc < 0 ? rc : res;
}

int kvp_get(struct kvp *kvp, const char *key, void **buf, size_t *len)
{
	struct get_ctx gc = { 0 };
	int64_t res;
	int rc;

	if (!kvp || !buf || !len)
		return KVP_EINVAL;
	*buf = NULL;
	*len = 0;
	rc = get_setup(kvp, &gc, 1, &key);
	if (rc == 0) {
		gc.items[0].alloc = true;
		get_optimistic(kvp, &gc);
		rc = get_batch(kvp, &gc);
	}
	res = rc < 0 ? rc : gc.items[0].result;
	if (res >= 0) {
		*buf = gc.items[0].dst;
		*len = (size_t)res;
		gc.items[0].dst = NULL;
	}
	if (gc.items)
		free(gc.items[0].dst);
	get_teardown(kvp, &gc, 1);
	return res < 0 ? (int)res : 0;
}

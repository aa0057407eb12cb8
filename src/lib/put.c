/* put: kvp_put, kvp_put_from, kvp_batch_put_from and their forms with
 * options (kvp_put_opts, kvp_batch_put_opts: upsert, soft pin, replicas,
 * preferred segment) and in pieces (kvp_put_iov, kvp_batch_put_iov: the
 * transports copy or send the pieces where they are). One round is PUT_START for every item (the master
 * grants space on `replicas` segments; a handle with no local segment
 * hashes the values meanwhile), the replica writes as one transfer
 * run, then one round trip of PUT_END for the complete items and
 * PUT_REVOKE for the others; items that failed on a transport error get
 * one more round with a fresh segment table. Runs on the calling thread;
 * shared state only through mcall, segtab, xport.
 */
#include <stdlib.h>
#include <string.h>

#include "client_i.h"
#include "clock.h"
#include "cuda.h"
#include "extent.h"
#include "kvpool.h"
#include "lcache.h"
#include "haloc.h"
#include "mcall.h"
#include "mlocate.h"
#include "put.h"
#include "segtab.h"
#include "sock.h"
#include "xp_rdma.h"
#include "xport.h"

struct put_item {
	const char *key;
	uint32_t klen;
	const void *buf;		/* the value, or NULL with niov > 1 */
	const struct kvp_iov *iov;	/* niov > 1: the value in pieces */
	size_t niov;
	uint64_t len;
	int status;			/* result so far */
	bool started;			/* PUT_START granted: needs PUT_END or PUT_REVOKE */
	bool retry;			/* failed on a transport error: try once more */
	uint64_t gen, csum;
	bool csum_ok;			/* csum holds the value's checksum */
	uint64_t epoch;			/* of the master that granted the space */
	bool valid;			/* passed argument checks */
	uint8_t nrep;
	int left;			/* replica writes outstanding */
	uint32_t seg_id[KVP_MAX_REPLICAS];
	struct xp_op *ops;		/* nrep */
	struct xp_run *run;
	bool dev;			/* buf is CUDA device memory */
	bool stage_pinned;
	void *stage;			/* host copy of a device buf (remote paths) */
};

struct put_ctx {
	uint64_t deadline;		/* of the whole call */
	uint8_t prefix[WIRE_PUT_PREFIX];	/* PUT_START's fields before the count */
	bool chain;			/* the items are a chain (WIRE_PUT_CHAIN) */
	const char *pred;		/* the key item 0 extends, NULL none */
	struct put_item *items;
	size_t *todo;			/* items in this round */
	size_t ntodo;
	bool early_csums;		/* no local segment: hash while PUT_START is out */
};

static void put_enc_start(struct wbuf *b, size_t i, void *arg)
{
	struct put_ctx *pc = arg;
	struct put_item *it = &pc->items[pc->todo[i]];

	wb_str(b, it->key, it->klen);
	wb_u64(b, it->len);
}

static void put_enc_end(struct wbuf *b, size_t i, void *arg)
{
	struct put_ctx *pc = arg;
	struct put_item *it = &pc->items[pc->todo[i]];

	wb_str(b, it->key, it->klen);
	wb_u64(b, it->gen);
	wb_u64(b, it->csum);
}

static void put_enc_revoke(struct wbuf *b, size_t i, void *arg)
{
	struct put_ctx *pc = arg;
	struct put_item *it = &pc->items[pc->todo[i]];

	wb_str(b, it->key, it->klen);
	wb_u64(b, it->gen);
}

static void put_fail(struct put_item *it, int rc)
{
	if (!it->status)
		it->status = rc;
}

static void put_op_done(struct xp_op *op)
{
	struct put_item *it = op->arg;

	if (op->status)
		put_fail(it, op->status);
	it->left--;
	if (!(op->flags & XP_F_CSUM))
		return;
	/* The checksum was computed while copying to the first local replica;
	 * the other replicas' headers can now be written. */
	it->csum = op->h.value_checksum;
	for (uint8_t r = 0; r < it->nrep; r++) {
		struct xp_op *o = &it->ops[r];

		if (o == op)
			continue;
		if (it->status) {
			it->left--;
			continue;
		}
		o->h.value_checksum = it->csum;
		xp_run_add(it->run, o);
	}
}

/* 0 (p filled), the item's own error status, or KVP_EPROTO (malformed: a
 * status out of range, no replica or more than asked for, a short frame). */
int put_reply_item(struct rbuf *r, struct put_reply *p)
{
	memset(p, 0, sizeof(*p));
	p->status = rb_status(r);
	p->gen = rb_u64(r);
	uint8_t nrep = rb_u8(r);

	for (uint8_t i = 0; i < nrep; i++) {
		uint32_t id = rb_u32(r);
		uint64_t off = rb_u64(r), alen = rb_u64(r);
		const uint8_t *g = rb_take(r, WIRE_GRANT_LEN);

		if (!g || p->nrep >= KVP_MAX_REPLICAS)
			continue;
		p->rep[p->nrep].id = id;
		p->rep[p->nrep].off = off;
		p->rep[p->nrep].alloc_len = alen;
		memcpy(p->rep[p->nrep].grant, g, WIRE_GRANT_LEN);
		p->nrep++;
	}
	if (!rb_ok(r) || p->status > 0 || nrep > KVP_MAX_REPLICAS)
		return KVP_EPROTO;
	if (p->status)
		return p->status;
	return p->nrep ? 0 : KVP_EPROTO;
}

/* The value into it->stage: a device buffer, or a gathered value with
 * device pieces (cudaMemcpy for those, memcpy for host ones). */
static int put_stage_copy(struct put_item *it)
{
	uint8_t *d = it->stage;

	if (!it->niov)
		return cuda_memcpy(d, it->buf, it->len);
	for (size_t j = 0; j < it->niov; j++) {
		const struct kvp_iov *v = &it->iov[j];

		if (!v->len)
			continue;
		if (cuda_is_device(v->base)) {
			if (cuda_memcpy(d, v->base, v->len) < 0)
				return -1;
		} else {
			memcpy(d, v->base, v->len);
		}
		d += v->len;
	}
	return 0;
}

/* A put of device memory: when every replica is local the value goes
 * device -> segment by cudaMemcpy (XP_F_DEVICE); otherwise, and for a
 * gathered value with device pieces, it is copied once to host staging
 * and every replica is written from there. */
static int put_device(struct put_item *it)
{
	bool all_local = !it->niov;

	for (uint8_t i = 0; i < it->nrep; i++)
		all_local &= it->ops[i].kind == XP_LOCAL;
	if (all_local) {
		for (uint8_t i = 0; i < it->nrep; i++)
			it->ops[i].flags |= XP_F_DEVICE;
		return 0;
	}
	if (!it->stage) {
		it->stage = xp_stage_alloc(it->len, &it->stage_pinned);
		if (!it->stage) {
			put_fail(it, KVP_ENOMEM);
			return -1;
		}
		if (put_stage_copy(it) < 0) {
			put_fail(it, KVP_EIO);
			return -1;
		}
	}
	for (uint8_t i = 0; i < it->nrep; i++) {
		it->ops[i].src = it->stage;
		it->ops[i].iov = NULL;
		it->ops[i].niov = 0;
	}
	return 0;
}

/* Parses PUT_START replies and queues every replica write. */
static int put_plan(struct kvp *kvp, struct put_ctx *pc, struct mcall *c, size_t nc,
		    struct xp_run *run)
{
	uint64_t now_ns = clock_realtime_ns();
	bool refreshed = false;
	uint64_t epoch_now;

	pthread_mutex_lock(&kvp->lock);
	epoch_now = kvp->epoch;
	pthread_mutex_unlock(&kvp->lock);

	for (size_t f = 0; f < nc; f++) {
		struct rbuf r;
		int frc = mc_batch_reply(&c[f], &r);

		for (uint32_t k = 0; k < c[f].count; k++) {
			struct put_item *it = &pc->items[pc->todo[c[f].first + k]];
			struct put_reply pr;
			int st = frc;

			if (!st && (st = put_reply_item(&r, &pr)) == KVP_EPROTO)
				frc = st;	/* the rest of the frame cannot be trusted */
			it->status = 0;
			it->nrep = 0;
			it->left = 0;
			it->run = run;
			free(it->ops);
			it->ops = NULL;
			/* Only a granted item needs PUT_END or PUT_REVOKE. One
			 * whose reply did not parse may hold a grant we cannot
			 * name: put_timeout reclaims it. */
			it->started = st == 0;
			if (st) {
				it->status = st;
				continue;
			}
			it->gen = pr.gen;
			it->epoch = c[f].epoch;
			/* HA: space granted by a master that has been succeeded is
			 * the new leader's to give; write nothing there (the node
			 * refuses such TCP writes, memcpy and RDMA it cannot). */
			if (mlocate_ha(kvp) && it->epoch != epoch_now) {
				it->status = KVP_ENOTLEADER;
				continue;
			}
			it->ops = calloc(pr.nrep, sizeof(*it->ops));
			if (!it->ops) {
				it->status = KVP_ENOMEM;
				continue;
			}
			for (uint8_t i = 0; i < pr.nrep; i++) {
				struct xp_op *o = &it->ops[i];

				o->dir = XP_WRITE;
				o->off = pr.rep[i].off;
				o->alloc_len = pr.rep[i].alloc_len;
				o->epoch = it->epoch;
				memcpy(o->grant, pr.rep[i].grant, WIRE_GRANT_LEN);
				it->seg_id[i] = pr.rep[i].id;
				it->nrep++;
			}
		}
	}

	/* Resolve segments and choose each replica's path. */
	for (size_t t = 0; t < pc->ntodo; t++) {
		struct put_item *it = &pc->items[pc->todo[t]];
		int first_local = -1;

		if (!it->started || it->status)
			continue;
		for (uint8_t i = 0; i < it->nrep; i++) {
			struct xp_op *o = &it->ops[i];
			struct client_seg *s;

			s = segtab_get(kvp, it->seg_id[i], &refreshed, pc->deadline);
			o->seg = s;
			if (!s) {
				put_fail(it, KVP_ENOSEG);
				continue;
			}
			int kind = xp_path_choose(kvp->proto, s->local_rw, xp_rdma_seg_ok(kvp, s),
						  true, KVP_TIER_MEM);

			if (kind < 0)
				put_fail(it, KVP_ENOTSUP);
			o->kind = kind < 0 ? XP_TCP : (enum xp_kind)kind;
			if (kind == XP_LOCAL && first_local < 0)
				first_local = i;
			o->tier = KVP_TIER_MEM;
			o->h.key_len = it->klen;
			o->h.value_len = it->len;
			o->h.generation = it->gen;
			o->h.seg_uuid = s->seg_uuid;
			o->h.put_time_ns = now_ns;
			o->key = (const uint8_t *)it->key;
			o->src = it->buf;
			o->iov = it->niov ? it->iov : NULL;
			o->niov = it->niov;
			o->done = put_op_done;
			o->arg = it;
		}
		if (it->status)
			continue;
		if (it->dev && put_device(it) < 0)
			continue;
		it->left = it->nrep;
		if (first_local >= 0) {
			it->ops[first_local].flags |= XP_F_CSUM;
			xp_run_add(run, &it->ops[first_local]);
		} else {
			if (!it->csum_ok && xp_value_checksum(&it->ops[0], &it->csum) < 0) {
				put_fail(it, KVP_ENOMEM);
				continue;
			}
			it->csum_ok = true;
			for (uint8_t i = 0; i < it->nrep; i++) {
				it->ops[i].h.value_checksum = it->csum;
				xp_run_add(run, &it->ops[i]);
			}
		}
	}
	return 0;
}

/* HA: where a stored object lives, for gets while no master answers
 * (haloc.h): the replica a get would read first, the local one. */
static void put_remember_ha(struct kvp *kvp, const struct put_item *it)
{
	const struct xp_op *best = NULL;

	if (!kvp->haloc)
		return;
	for (uint8_t i = 0; i < it->nrep; i++)
		if (it->ops[i].seg && (!best || it->ops[i].kind == XP_LOCAL))
			best = &it->ops[i];
	if (!best)
		return;
	struct lc_loc e = {
		.seg_id = best->seg->id, .seg_uuid = best->seg->seg_uuid, .tier = KVP_TIER_MEM,
		.off = best->off, .alloc_len = best->alloc_len,
		.vlen = it->len, .gen = it->gen, .csum = it->csum,
	};
	haloc_put(kvp, it->key, it->klen, &e);
}

/* A put that completed: this handle's optimistic reads must not find what
 * the key held before (a replaced value), and may find the new value's
 * local replica. The invalidation also stales every lcache token taken
 * before it, so a get that raced with this put cannot store the old
 * location afterwards. */
static void put_remember(struct kvp *kvp, const struct put_item *it)
{
	struct lcache *lc = kvp->lc;

	put_remember_ha(kvp, it);
	if (!lc)
		return;
	/* A local replica if there is one (memcpy), else one reached over TCP. */
	const struct xp_op *o = NULL;

	for (uint8_t i = 0; i < it->nrep; i++) {
		const struct xp_op *c = &it->ops[i];

		if (c->seg && c->kind == XP_LOCAL) {
			o = c;
			break;
		}
		if (c->seg && c->kind == XP_TCP && !o)
			o = c;
	}
	if (!o) {
		lc_invalidate(lc, it->key, it->klen);
		return;
	}
	struct lc_loc l = {
		.seg_id = o->seg->id,
		.seg_uuid = o->seg->seg_uuid,
		.off = o->off,
		.alloc_len = o->alloc_len,
		.vlen = it->len,
		.gen = it->gen,
		.csum = it->csum,
	};

	lc_replace(lc, it->key, it->klen, &l);
}

/* PUT_END for the items whose replicas are all written, PUT_REVOKE for the
 * others that were granted: one round trip. */
static int put_finish(struct kvp *kvp, struct put_ctx *pc)
{
	size_t *ends = malloc((pc->ntodo + 1) * sizeof(*ends));
	size_t *revs = malloc((pc->ntodo + 1) * sizeof(*revs));
	size_t ne = 0, nr = 0, nce = 0, ncr = 0;
	struct mcall *c = NULL, *cr = NULL;
	struct put_ctx pe = *pc, pr = *pc;
	int rc = KVP_ENOMEM;

	if (!ends || !revs)
		goto out;
	for (size_t t = 0; t < pc->ntodo; t++) {
		struct put_item *it = &pc->items[pc->todo[t]];

		if (!it->started)
			continue;
		if (it->status)
			revs[nr++] = pc->todo[t];
		else
			ends[ne++] = pc->todo[t];
	}
	rc = 0;
	if (!ne && !nr)
		goto out;
	pe.todo = ends;
	pe.ntodo = ne;
	pr.todo = revs;
	pr.ntodo = nr;
	rc = KVP_ENOMEM;
	if (ne && !(c = mc_batch(kvp, WIRE_OP_PUT_END, NULL, 0, ne, put_enc_end, &pe, &nce)))
		goto out;
	if (nr && !(cr = mc_batch(kvp, WIRE_OP_PUT_REVOKE, NULL, 0, nr, put_enc_revoke, &pr, &ncr)))
		goto out;
	if (ncr) {
		/* One array, so both go out pipelined on one connection. */
		struct mcall *all = realloc(c, (nce + ncr) * sizeof(*all));

		if (!all)
			goto out;
		memcpy(all + nce, cr, ncr * sizeof(*all));
		free(cr);
		cr = NULL;
		c = all;
		nce += ncr;
		ncr = 0;
	}
	rc = mc_call(kvp, c, nce, pc->deadline);
	for (size_t f = 0; f < nce && c[f].op == WIRE_OP_PUT_END; f++) {
		struct rbuf r;
		int frc = rc ? rc : mc_batch_reply(&c[f], &r);

		for (uint32_t k = 0; k < c[f].count; k++) {
			struct put_item *it = &pc->items[ends[c[f].first + k]];
			int st = frc ? frc : rb_status(&r);

			if (!frc && (!rb_ok(&r) || st > 0))
				st = frc = KVP_EPROTO;
			/* The master no longer knows the put (put_timeout, or a new
			 * leader that did not find it complete): it is to be done
			 * again, like a revoked one. */
			if (st == KVP_ENOTFOUND)
				st = KVP_ESTALE;
			it->status = st;
			if (!st) {
				client_count(kvp, puts, 1);
				put_remember(kvp, it);
			}
		}
	}
	/* A lost PUT_REVOKE is harmless: put_timeout reclaims the extents. */
	rc = 0;
out:
	for (size_t t = 0; t < pc->ntodo; t++)
		pc->items[pc->todo[t]].started = false;
	if (c)
		mc_free(c, nce);
	if (cr)
		mc_free(cr, ncr);
	free(ends);
	free(revs);
	return rc;
}

static void put_release(struct kvp *kvp, struct put_ctx *pc)
{
	for (size_t t = 0; t < pc->ntodo; t++) {
		struct put_item *it = &pc->items[pc->todo[t]];

		for (uint8_t i = 0; it->ops && i < it->nrep; i++) {
			segtab_put(kvp, it->ops[i].seg);
			it->ops[i].seg = NULL;
		}
	}
}

/* While PUT_START is at the master: the checksums of values that will
 * travel to a remote node (a local replica hashes in its copy instead).
 * Host memory only; a value that fails to hash is hashed again later. */
static void put_early_csums(void *arg)
{
	struct put_ctx *pc = arg;

	for (size_t t = 0; t < pc->ntodo; t++) {
		struct put_item *it = &pc->items[pc->todo[t]];
		struct xp_op op = { .src = it->buf, .iov = it->iov, .niov = it->niov };

		if (it->csum_ok || it->dev)
			continue;
		op.h.value_len = it->len;
		it->csum_ok = xp_value_checksum(&op, &it->csum) == 0;
	}
}

/* The chain of a PUT_START frame (WIRE_PUT_CHAIN): its items extend one
 * another when they are consecutive in the caller's order, and its first
 * item extends the caller's item before it (the batch's pred for the
 * first). A frame whose items are not consecutive (a retry of some items,
 * items refused before sending) goes out unchained rather than linking
 * blocks that do not extend each other. */
static void put_chain_frame(struct put_ctx *pc, struct mcall *m)
{
	const size_t *t = pc->todo + m->first;
	uint32_t flags;
	bool linked = true;

	for (uint32_t j = 1; j < m->count && linked; j++)
		linked = t[j] == t[j - 1] + 1;
	if (!linked) {
		memcpy(&flags, m->body.p + 5, 4);
		flags &= ~(uint32_t)WIRE_PUT_CHAIN;
		memcpy(m->body.p + 5, &flags, 4);
		return;
	}
	const char *pred = NULL;
	uint32_t plen = 0;

	if (t[0] == 0 && pc->pred) {
		pred = pc->pred;
		plen = (uint32_t)strlen(pred);
	} else if (t[0] > 0 && pc->items[t[0] - 1].valid) {
		pred = pc->items[t[0] - 1].key;
		plen = pc->items[t[0] - 1].klen;
	}
	wb_str(&m->body, pred, plen);
}

static int put_round(struct kvp *kvp, struct put_ctx *pc)
{
	struct xp_run run = { .kvp = kvp, .deadline = pc->deadline };
	struct mc_during early = { .fn = put_early_csums, .arg = pc };
	struct mcall *c;
	size_t nc = 0;
	int rc;

	c = mc_batch(kvp, WIRE_OP_PUT_START, pc->prefix, sizeof(pc->prefix), pc->ntodo,
		     put_enc_start, pc, &nc);
	if (!c)
		return KVP_ENOMEM;
	for (size_t i = 0; pc->chain && i < nc; i++) {
		put_chain_frame(pc, &c[i]);
		if (c[i].body.oom) {
			mc_free(c, nc);
			return KVP_ENOMEM;
		}
	}
	rc = mc_call_during(kvp, c, nc, pc->deadline, pc->early_csums ? &early : NULL);
	if (rc < 0) {
		mc_free(c, nc);
		return rc;
	}
	put_plan(kvp, pc, c, nc, &run);
	mc_free(c, nc);
	xp_run_wait(&run);
	rc = put_finish(kvp, pc);
	put_release(kvp, pc);
	return rc;
}

/* PUT_START's prefix from the options: replicas, the preferred segment
 * (the named node's first segment, else one on this host when there is
 * one we can write by memcpy), flags and pin TTL; and whether the n items
 * go as a chain (a batch does unless KVP_PUT_NOCHAIN; one value only
 * when it names its pred). */
static int put_prefix(struct kvp *kvp, const struct kvp_put_opts *o, size_t n,
		      struct put_ctx *pc)
{
	int64_t want = o && o->replicas ? (int64_t)o->replicas : kvp->conf.client.replicas;
	uint32_t flags = o ? o->flags : 0, pref = 0;
	uint64_t ttl = o && (flags & KVP_PUT_SOFT_PIN) ? o->pin_ttl_ms : 0;
	uint8_t replicas;
	uint32_t plen;

	if (flags & ~(KVP_PUT_UPSERT | KVP_PUT_SOFT_PIN | KVP_PUT_NOCHAIN))
		return KVP_EINVAL;
	if (o && o->replicas > KVP_MAX_REPLICAS)
		return KVP_EINVAL;
	if (o && o->pred && mc_key_check(o->pred, &plen))
		return KVP_EKEY;
	pc->pred = o && o->pred && !(flags & KVP_PUT_NOCHAIN) ? o->pred : NULL;
	pc->chain = !(flags & KVP_PUT_NOCHAIN) && (n > 1 || pc->pred);
	flags &= ~KVP_PUT_NOCHAIN;
	if (pc->chain)
		flags |= WIRE_PUT_CHAIN;
	replicas = want < 1 ? 1 : want > KVP_MAX_REPLICAS ? KVP_MAX_REPLICAS : (uint8_t)want;
	if (o && o->preferred_segment && *o->preferred_segment) {
		int found = segtab_by_name(kvp, o->preferred_segment, &pref, 1, pc->deadline);

		if (found < 0)
			return found;
		if (found == 0)
			pref = 0;	/* a preference only */
	}
	if (!pref && segtab_have_local_rw(kvp))
		pref = WIRE_SEG_LOCAL;
	pc->early_csums = pref != WIRE_SEG_LOCAL;
	pc->prefix[0] = replicas;
	memcpy(pc->prefix + 1, &pref, 4);
	memcpy(pc->prefix + 5, &flags, 4);
	memcpy(pc->prefix + 9, &ttl, 8);
	return 0;
}

/* The value of a gathered item: its length, its one non-empty piece as a
 * plain buffer, whether a piece is device memory. 0 or KVP_E*. */
static int put_item_iov(struct put_item *it, const struct kvp_iov *v, size_t nv)
{
	size_t nonempty = 0;

	it->len = 0;
	for (size_t j = 0; j < nv; j++) {
		if (!v[j].len)
			continue;
		if (!v[j].base)
			return KVP_EINVAL;
		if (v[j].len > UINT64_MAX - it->len)
			return KVP_ETOOBIG;
		it->len += v[j].len;
		it->buf = v[j].base;
		it->dev |= cuda_is_device(v[j].base);
		nonempty++;
	}
	if (nonempty > 1) {
		it->buf = NULL;
		it->iov = v;
		it->niov = nv;
	}
	if (nv > UINT32_MAX)
		return KVP_EINVAL;
	return 0;
}

/* Checks one item: the key, the value's length and where it lives (cuda: the
 * driver is in the process, asked once per batch). */
static int put_item_check(struct kvp *kvp, struct put_item *it, const char *key, bool cuda)
{
	int rc = mc_key_check(key, &it->klen);

	if (rc)
		return rc;
	if ((!it->buf && !it->niov) || !it->len)
		return KVP_EINVAL;
	if (it->len > kvp->conf.cluster.max_object_size)
		return KVP_ETOOBIG;
	if (!it->niov)
		it->dev = cuda && cuda_is_device(it->buf);
	if (it->dev && !cuda_available())
		return xp_device_refused(it->buf ? it->buf : it->iov[0].base);
	return 0;
}

/* The batch put: values in bufs/lens, or (bufs NULL) value i the pieces
 * iov[first[i] .. first[i + 1]). */
static int put_batch(struct kvp *kvp, size_t n, const char *const *keys,
		     const void *const *bufs, const size_t *lens, const struct kvp_iov *iov,
		     const size_t *first, const struct kvp_put_opts *o, int *results)
{
	struct put_ctx pc = { .deadline = kvp ? sock_deadline(kvp) : 0 };
	int rc = 0;

	if (!kvp || (n && (!keys || !results || (bufs ? !lens : !iov || !first))))
		return KVP_EINVAL;
	if (!n)
		return 0;
	rc = put_prefix(kvp, o, n, &pc);
	if (rc < 0)
		return rc;
	pc.items = calloc(n, sizeof(*pc.items));
	pc.todo = calloc(n, sizeof(*pc.todo));
	if (!pc.items || !pc.todo) {
		rc = KVP_ENOMEM;
		goto out;
	}
	bool cuda = cuda_driver_loaded();

	for (size_t i = 0; i < n; i++) {
		struct put_item *it = &pc.items[i];

		it->key = keys[i];
		if (bufs) {
			it->buf = bufs[i];
			it->len = lens[i];
		} else if (first[i + 1] < first[i]) {
			it->status = KVP_EINVAL;
			continue;
		} else {
			it->status = put_item_iov(it, iov + first[i], first[i + 1] - first[i]);
		}
		if (!it->status)
			it->status = put_item_check(kvp, it, keys[i], cuda);
		if (!it->status)
			pc.todo[pc.ntodo++] = i;
		it->valid = !it->status;
	}
	/* Before the master hears of them: see put_remember. */
	for (size_t t = 0; t < pc.ntodo; t++)
		lc_invalidate(kvp->lc, pc.items[pc.todo[t]].key, pc.items[pc.todo[t]].klen);
	for (int attempt = 0; attempt < 2 && pc.ntodo; attempt++) {
		size_t keep = 0;

		rc = put_round(kvp, &pc);
		if (rc < 0) {
			/* After a first round, the batch as a whole was tried. */
			for (size_t t = 0; attempt && t < pc.ntodo; t++)
				pc.items[pc.todo[t]].status = rc;
			if (attempt)
				rc = 0;
			break;
		}
		for (size_t t = 0; t < pc.ntodo; t++) {
			struct put_item *it = &pc.items[pc.todo[t]];

			/* and after a failover: the new leader refused or did not
			 * know the put, the node refused the old leader's grant */
			if (xp_retryable(it->status) || it->status == KVP_ENOTLEADER ||
			    (it->status == KVP_EGRANT && mlocate_ha(kvp)))
				pc.todo[keep++] = pc.todo[t];
		}
		if (!keep || attempt)
			break;
		/* A node restarted or moved: learn the new table, try once more. */
		pc.ntodo = keep;
		client_count(kvp, retries, keep);
		segtab_invalidate(kvp);
	}
out:
	for (size_t i = 0; i < n; i++) {
		if (!pc.items)
			results[i] = rc;
		else if (pc.items[i].valid && rc < 0)
			results[i] = rc;
		else
			results[i] = pc.items[i].status;
		if (pc.items) {
			free(pc.items[i].ops);
			xp_stage_free(pc.items[i].stage, pc.items[i].stage_pinned);
		}
	}
	free(pc.items);
	free(pc.todo);
	if (kvp)
		cstats_poll(kvp);
	return rc < 0 ? rc : 0;
}

int kvp_batch_put_opts(struct kvp *kvp, size_t n, const char *const *keys,
		       const void *const *bufs, const size_t *lens, const struct kvp_put_opts *o,
		       int *results)
{
	if (n && !bufs)
		return KVP_EINVAL;
	return put_batch(kvp, n, keys, bufs, lens, NULL, NULL, o, results);
}

int kvp_batch_put_iov(struct kvp *kvp, size_t n, const char *const *keys,
		      const struct kvp_iov *iov, const size_t *first,
		      const struct kvp_put_opts *o, int *results)
{
	return put_batch(kvp, n, keys, NULL, NULL, iov, first, o, results);
}

int kvp_put_iov(struct kvp *kvp, const char *key, const struct kvp_iov *iov, size_t niov,
		const struct kvp_put_opts *o)
{
	static const struct kvp_iov none;
	size_t first[2] = { 0, iov ? niov : 0 };
	int res, rc;

	/* No pieces: the key is still checked first, as for any put. */
	rc = put_batch(kvp, 1, &key, NULL, NULL, iov ? iov : &none, first, o, &res);
	return rc < 0 ? rc : res;
}

int kvp_batch_put_from(struct kvp *kvp, size_t n, const char *const *keys,
		       const void *const *bufs, const size_t *lens, int *results)
{
	return kvp_batch_put_opts(kvp, n, keys, bufs, lens, NULL, results);
}

int kvp_put_opts(struct kvp *kvp, const char *key, const void *buf, size_t len,
		 const struct kvp_put_opts *o)
{
	int res, rc = kvp_batch_put_opts(kvp, 1, &key, &buf, &len, o, &res);

	return rc < 0 ? rc : res;
}

int kvp_put_from(struct kvp *kvp, const char *key, const void *buf, size_t len)
{
	return kvp_put_opts(kvp, key, buf, len, NULL);
}

int kvp_put(struct kvp *kvp, const char *key, const void *buf, size_t len)
{
	return kvp_put_from(kvp, key, buf, len);
}

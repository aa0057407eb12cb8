/* mput: the two-phase put — PUT_START (segment choice by
 * allocation_strategy, one extent per replica, write grants; a batch that
 * finds no room starts an eviction and is parked until the FREEs are
 * acknowledged), PUT_END (the object becomes visible; an upsert's new
 * value replaces the old one) and PUT_REVOKE.
 * See docs/master.md "Puts". Loop thread only; no locks.
 */
#include "mput.h"

#include <stdlib.h>
#include <string.h>

#include "evict.h"
#include "extent.h"
#include "kvpool.h"
#include "mbatch.h"
#include "mchain.h"
#include "mevents.h"
#include "mlease.h"
#include "mpolicy.h"
#include "mrepl.h"

#define PARK_MAX_MS 2000		/* a parked PUT_START retries by then at the latest */

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

static void parked_free(struct parked *p)
{
	wb_free(&p->reply);
	free(p->body);
	free(p);
}

/* Fills cand[] with the allocatable segments in the order to try: the
 * preferred ones first (an id, or WIRE_SEG_LOCAL: those on the client's
 * host), then by strategy. Returns how many. */
static size_t seg_order(struct master *m, struct master_client *c, uint32_t pref,
			struct seg **cand)
{
	size_t n = 0, npref = 0;

	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (!seg_allocatable(s))
			continue;
		bool p = pref == WIRE_SEG_LOCAL ? c->host_id[0] && strcmp(s->host_id, c->host_id) == 0
						: s->id == pref;
		cand[n++] = s;
		if (p) {	/* move into the preferred group */
			struct seg *t = cand[npref];
			cand[npref] = s;
			cand[n - 1] = t;
			npref++;
		}
	}
	/* Order each group (preferred, rest) by strategy. */
	size_t lo[2] = { 0, npref }, hi[2] = { npref, n };
	for (int g = 0; g < 2; g++) {
		struct seg **v = cand + lo[g];
		size_t k = hi[g] - lo[g];
		if (m->strategy == STRAT_RANDOM) {
			for (size_t i = k; i > 1; i--) {
				size_t j = master_rand(m) % i;
				struct seg *t = v[i - 1];
				v[i - 1] = v[j];
				v[j] = t;
			}
		} else {
			for (size_t i = 1; i < k; i++) {	/* insertion sort: few segments */
				struct seg *t = v[i];
				double ft = (double)seg_free_bytes(t) / (double)t->capacity;
				size_t j = i;
				while (j > 0 && (double)seg_free_bytes(v[j - 1]) /
						(double)v[j - 1]->capacity < ft) {
					v[j] = v[j - 1];
					j--;
				}
				v[j] = t;
			}
		}
	}
	return n;
}

/* Frees allocations made for a put that could not be recorded. */
static void unalloc(struct master *m, const struct rep *reps, unsigned n)
{
	for (unsigned k = 0; k < n; k++)
		seg_unalloc(segreg_get(&m->segs, (uint32_t)reps[k].seg), rep_off(&reps[k]));
}

static void put_fail(struct wbuf *b, int status)
{
	wb_status(b, status);
	wb_u64(b, 0);
	wb_u8(b, 0);
}

/* What a PUT_START says for all its items. */
struct put_args {
	unsigned want;			/* replicas */
	uint32_t pref;			/* preferred segment */
	uint32_t flags;			/* WIRE_PUT_* */
	uint32_t pin_s;			/* soft pin expiry (mlease_pin_until), 0 none */
	bool wait_reports;		/* fewer replicas than want: park (a segment
					 * still reports and the request may wait) */
};

/* Reads the PUT_START prefix (WIRE_PUT_PREFIX bytes). */
static void put_args_read(struct master *m, struct rbuf *r, struct put_args *a)
{
	a->want = rb_u8(r);
	a->pref = rb_u32(r);
	a->flags = rb_u32(r);
	uint64_t ttl = rb_u64(r);
	if (a->want == 0)
		a->want = 1;	/* 0: the master's default, one replica */
	a->pin_s = 0;
	if (a->flags & WIRE_PUT_SOFT_PIN)
		a->pin_s = mlease_pin_until(m, mlease_pin_ttl(m, ttl ? ttl : m->conf.master.soft_pin_ttl));
}

/* A ghost: every replica of o is in a segment that takes no new extents
 * (draining, its node disconnected, or gone). A put of its key replaces it
 * like an upsert rather than answering KVP_EEXIST for a value nobody can
 * read any more. */
static bool put_ghost(const struct master *m, const struct obj *o)
{
	/* (seg_alive: a segment still sending its REPORTs is no ghost; nor is
	 * one of a warm table whose node has not re-mounted yet) */
	for (unsigned k = 0; k < o->nrep; k++) {
		const struct seg *s = segreg_get(&m->segs, (uint32_t)obj_rep(o)[k].seg);
		if (seg_alive(s) || (s && s->online && s->warm))
			return false;
	}
	return o->nrep > 0;
}

/* One PUT_START item, its reply entry appended to b. Returns its status;
 * *need_evict is set when no segment had room for even one replica. An
 * upsert of a key that exists (complete or pending), or a put of a
 * ghost's key, becomes a version (mver) that replaces the key's object at
 * its PUT_END. The new object extends prev (a chain; NULL none); *self is
 * the object the key names afterwards (the new one, or the one that was
 * there: the next item of a chain extends it), NULL on failure. */
static int put_one(struct master *m, struct master_client *c, const struct put_args *a,
		   const uint8_t *key, size_t klen, uint64_t vlen, struct wbuf *b,
		   bool *need_evict, struct obj *prev, struct obj **self)
{
	int status = 0;
	struct obj *old = NULL;
	uint32_t h = objtab_hash(key, klen);	/* once: lookup, tag and slot */

	*need_evict = false;
	*self = NULL;
	if (a->want > KVP_MAX_REPLICAS || !vlen)
		status = KVP_EINVAL;
	else if (!wire_key_ok(key, klen))
		status = KVP_EKEY;
	else if (mten_check(m, c, key, klen, true))
		status = KVP_EPERM;
	else if (mns_check(m, c, key, klen, true))
		status = KVP_ENSMISMATCH;
	else if (vlen > m->conf.cluster.max_object_size)
		status = KVP_ETOOBIG;
	else if ((old = objtab_find_hash(&m->objs, key, klen, h)) &&
		 !(a->flags & WIRE_PUT_UPSERT) && !put_ghost(m, old))
		status = KVP_EEXIST;
	if (status) {
		if (status == KVP_EEXIST) {
			*self = old;
			if (obj_complete(old))
				mpol_touch(&m->pol, old);	/* the engine needed it again */
		}
		put_fail(b, status);
		return status;
	}
	/* the owner's quota: may evict its own objects, never old or prev */
	status = mten_quota(m, key, klen, vlen, prev);
	if (status) {
		put_fail(b, status);
		return status;
	}

	uint64_t need = ext_size((uint32_t)klen, vlen);
	size_t ncand = seg_order(m, c, a->pref, m->cand);
	struct rep reps[KVP_MAX_REPLICAS];
	unsigned got = 0;
	for (size_t i = 0; i < ncand && got < a->want; i++) {
		struct seg *s = m->cand[i];
		uint64_t alen;
		if (need > s->capacity || seg_grow(s))
			continue;
		uint64_t off = seg_alloc(s, need, &alen);
		if (off != UINT64_MAX)
			reps[got++] = rep_make(s->id, 0, off, alen);
	}
	/* short of replicas while a node that just mounted has not said all it
	 * holds: its segment takes extents a moment from now, so the put waits
	 * for it (put_run parks) rather than keeping fewer than it asked for;
	 * nothing is evicted for it */
	bool wait = got && got < a->want && a->wait_reports;
	if (wait) {
		unalloc(m, reps, got);
		got = 0;
	}
	if (!got) {
		*need_evict = ncand > 0 && !wait;
		put_fail(b, KVP_ENOSPC);
		return KVP_ENOSPC;
	}
	struct obj *o = old ? objtab_new_hash(&m->objs, key, klen, h, got)
			    : objtab_insert_hash(&m->objs, key, klen, h, got);
	if (!o || objtab_set_pin(&m->objs, o, a->pin_s) || mobj_arr_push(&m->pending, o)) {
		if (o && old)
			objtab_free(&m->objs, o);
		else if (o)
			objtab_remove(&m->objs, o);
		unalloc(m, reps, got);
		put_fail(b, KVP_ENOMEM);
		return KVP_ENOMEM;
	}
	o->generation = ++m->gen;
	if (!old)
		o->pkey = mpol_admit(m, h);	/* a version's is set at its PUT_END */
	if (old) {
		mver_add(&m->vers, o);
		if (!(a->flags & WIRE_PUT_UPSERT))
			m->ghosts_replaced++;
	}
	if (old || (a->flags & WIRE_PUT_UPSERT))
		o->flags |= OBJ_UPSERT;		/* replaces the key's object at PUT_END */
	o->value_len = vlen;
	o->atime = (uint32_t)m->pol.clk;
	o->deadline = m_now32(m) + (uint32_t)m->conf.master.put_timeout;
	wb_status(b, 0);
	wb_u64(b, o->generation);
	wb_u8(b, (uint8_t)got);
	for (unsigned k = 0; k < got; k++) {
		struct seg *s = segreg_get(&m->segs, (uint32_t)reps[k].seg);
		uint8_t grant[WIRE_GRANT_LEN];
		obj_rep(o)[k] = reps[k];
		o->nrep++;	/* first: seg_attach's moves look the replica up */
		seg_attach(s, o, k, SEG_RGN_MEM);	/* room made by seg_grow above */
		seg_grant(s, o->generation, rep_off(&reps[k]), rep_len(&reps[k]), m->epoch, grant);
		wb_u32(b, s->id);
		wb_u64(b, rep_off(&reps[k]));
		wb_u64(b, rep_len(&reps[k]));
		wb_bytes(b, grant, sizeof(grant));
		evict_check(m, s);
	}
	mchain_link(m, o, prev);
	*self = o;
	return 0;
}

/* True if a segment has mounted and not yet said all it holds: it takes
 * new extents after its node's next HEARTBEAT (a moment away). */
static bool reports_in_flight(const struct master *m)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (seg_alive(s) && !s->reported)
			return true;
	}
	return false;
}

/* True if a segment takes puts around holds (mhold.h): its room comes
 * back at its node's HEARTBEAT, no eviction for it. */
static bool holds_in_flight(const struct master *m)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (seg_alive(s) && s->held)
			return true;
	}
	return false;
}

/* True if an allocatable segment waits for FREE acks (room coming back). */
static bool frees_in_flight(const struct master *m)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (seg_allocatable(s) && seg_frees_pending(s))
			return true;
	}
	return false;
}

/* True if an allocatable segment has DEMOTEs queued or unanswered: their
 * memory extents are FREEd (room coming back) once the node has copied
 * them, which may take a disk's while. */
static bool demotes_in_flight(const struct master *m)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (seg_allocatable(s) && (s->dq.n || s->dinflight))
			return true;
	}
	return false;
}

/* Bytes the items of a PUT_START still need from item i on (r stands
 * after item i, whose key and value lengths are given). */
static uint64_t put_rest_bytes(struct rbuf r, uint32_t i, uint32_t n, size_t klen, uint64_t vlen)
{
	uint64_t total = ext_size((uint32_t)klen, vlen);

	for (uint32_t j = i + 1; j < n && rb_ok(&r); j++) {
		size_t kl;

		rb_str(&r, &kl);
		uint64_t vl = rb_u64(&r);
		if (vl <= (1ull << 41))	/* larger ones fail on their own */
			total += ext_size((uint32_t)kl, vl);
	}
	return total;
}

/* The object item 0 of a chained PUT_START extends: the str pred after
 * the items (when the request is a chain and the key is there). */
static struct obj *put_pred(struct master *m, const struct put_args *a, struct rbuf r,
			    uint32_t n)
{
	size_t klen;

	if (!(a->flags & WIRE_PUT_CHAIN))
		return NULL;
	for (uint32_t i = 0; i < n; i++) {
		rb_str(&r, &klen);
		rb_u64(&r);
	}
	const uint8_t *key = rb_str(&r, &klen);
	if (!rb_ok(&r) || !klen || !wire_key_ok(key, klen))
		return NULL;
	return objtab_find(&m->objs, key, klen);
}

/* Runs the PUT_START items of body from item `from` on, appending their
 * results to out. Returns the item count when done, or the index of the
 * item that found no room and started an eviction (not final: the caller
 * parks the request and retries that item once the FREEs are acked). */
static uint32_t put_run(struct master *m, struct master_client *c, const uint8_t *body,
			uint32_t len, uint32_t from, bool final, struct wbuf *out)
{
	struct rbuf r;
	struct op_stats *st = &m->ops[WIRE_OP_PUT_START];

	if (m->cand_cap < m->segs.n) {
		struct seg **v = realloc(m->cand, m->segs.n * sizeof(*v));
		if (!v)
			return from;
		m->cand = v;
		m->cand_cap = m->segs.n;
	}
	rb_init(&r, body, len);
	struct put_args a;
	put_args_read(m, &r, &a);
	a.wait_reports = !final && a.want > 1 && reports_in_flight(m);
	uint32_t n = rb_u32(&r);
	struct obj *prev = from ? NULL : put_pred(m, &a, r, n);
	for (uint32_t i = 0; i < n; i++) {
		size_t klen;
		const uint8_t *key = rb_str(&r, &klen);
		uint64_t vlen = rb_u64(&r);
		if (i < from) {
			/* resumed: the chain goes on from the item before */
			if (i + 1 == from && (a.flags & WIRE_PUT_CHAIN))
				prev = objtab_find(&m->objs, key, klen);
			continue;
		}
		bool need_evict;
		size_t mark = out->len;
		struct obj *self;
		int rc = put_one(m, c, &a, key, klen, vlen, out, &need_evict,
				 (a.flags & WIRE_PUT_CHAIN) ? prev : NULL, &self);
		/* no room now, but room coming: park and try again (a segment
		 * still reporting counts, so a put right after a node's mount
		 * waits for it instead of failing; one with holds, before any
		 * eviction) */
		if (rc == KVP_ENOSPC && !final &&
		    (holds_in_flight(m) ||
		     (need_evict && (evict_force(m, ext_size((uint32_t)klen, vlen),
						 put_rest_bytes(r, i, n, klen, vlen)) ||
				     frees_in_flight(m) || demotes_in_flight(m))) ||
		     reports_in_flight(m))) {
			out->len = mark;
			return i;
		}
		mbatch_item(st, rc);
		prev = self;
	}
	return n;
}

/* PUT_START. An item that finds no room starts an eviction for what the
 * rest of the batch needs; the request is then parked (a heap copy) until
 * the evicted extents' FREEs are acked, and goes on from that item —
 * parked again if it runs short again, until PARK_MAX_MS after it first
 * waited. Likewise when FREEs are already in flight: their space is about
 * to come back. A put fails for room only when nothing is evictable. */
int mput_start(struct master *m, struct master_client *c, const struct wire_hdr *h,
	       const uint8_t *body, struct wbuf *b, bool *parked)
{
	struct rbuf r;
	uint32_t n;

	rb_init(&r, body, h->body_len);
	rb_take(&r, WIRE_PUT_PREFIX);
	int rc = mbatch_shape(m, &r, "s8", &n);
	if (rc)
		return rc;
	size_t body_start = b->len;
	wb_u32(b, n);
	uint32_t done = put_run(m, c, body, h->body_len, 0, false, b);
	if (done == n)
		return 0;
	if (done == 0 && m->cand_cap < m->segs.n)
		return KVP_ENOMEM;

	struct parked *p = calloc(1, sizeof(*p));
	if (!p)
		goto out_finish;
	p->body = malloc(h->body_len);
	if (!p->body)
		goto out_free;
	memcpy(p->body, body, h->body_len);
	p->c = c;
	p->h = *h;
	p->next_item = done;
	p->deadline_ms = m->now_ms + PARK_MAX_MS;
	wb_init(&p->reply);
	wire_begin(&p->reply);
	wb_bytes(&p->reply, b->p + body_start, b->len - body_start);
	if (p->reply.oom)
		goto out_free;
	b->len = body_start;
	p->next = m->parked;
	m->parked = p;
	*parked = true;
	return 0;

out_free:
	parked_free(p);
out_finish:
	put_run(m, c, body, h->body_len, done, true, b);
	return 0;
}

/* True while an eviction a parked PUT_START waits for is still freeing, or
 * a segment is still reporting. */
static bool eviction_pending(const struct master *m)
{
	return m->evict_active || frees_in_flight(m) || demotes_in_flight(m) ||
	       reports_in_flight(m);
}

/* Goes on with the parked PUT_STARTs whose eviction is done or whose wait
 * (PARK_MAX_MS) is over: each runs from the item that waited; one that
 * runs short again (and has time left) is parked again, the others are
 * answered. Each is unlinked before its reply goes out, so a client freed
 * meanwhile (master_client_free) finds a consistent list. */
void mput_retry(struct master *m)
{
	bool waiting = eviction_pending(m);
	struct parked *again = NULL;

	for (;;) {
		struct parked **pp = &m->parked;
		while (*pp && waiting && m->now_ms < (*pp)->deadline_ms)
			pp = &(*pp)->next;
		struct parked *p = *pp;
		if (!p)
			break;
		*pp = p->next;
		struct rbuf r;
		rb_init(&r, p->body, p->h.body_len);
		rb_take(&r, WIRE_PUT_PREFIX);
		uint32_t n = rb_u32(&r);
		int status = 0;
		uint32_t done = put_run(m, p->c, p->body, p->h.body_len, p->next_item,
					m->now_ms >= p->deadline_ms, &p->reply);
		if (done < n && !p->reply.oom) {
			p->next_item = done;
			p->next = again;
			again = p;
			continue;
		}
		if (done != n || p->reply.oom) {
			status = KVP_ENOMEM;	/* could not finish: a bare error frame */
			wb_reset(&p->reply);
			wire_begin(&p->reply);
		}
		wire_finish(&p->reply, 0, WIRE_OP_PUT_START, WIRE_F_REPLY, status, p->h.reqid, 0);
		if (!p->reply.oom)
			p->c->send(p->c->arg, p->reply.p, p->reply.len);
		parked_free(p);
	}
	while (again) {
		struct parked *p = again;

		again = p->next;
		p->next = m->parked;
		m->parked = p;
	}
}

/* The pending object o becomes visible. An upsert's version replaces the
 * key's object, which is set aside: a pending put keeps its extents until
 * its writer finishes (or put_timeout), a complete value until its read
 * leases end. The new value keeps the longer of the two soft pins. */
static void commit(struct master *m, struct obj *o, uint64_t csum, uint64_t now_ns)
{
	mobj_arr_del(&m->pending, o);
	o->flags |= OBJ_COMPLETE;
	o->checksum = csum;
	obj_set_put_ns(o, now_ns);
	o->atime = (uint32_t)m->pol.clk;
	o->deadline = 0;
	if (o->flags & OBJ_VERSION) {
		struct obj *old = objtab_find(&m->objs, obj_key(o), o->key_len);
		uint32_t pkey = old ? old->pkey : 0;	/* the key's priority carries over */
		mver_del(&m->vers, o);
		if (old) {
			uint32_t old_pin = obj_pin_s(&m->objs, old);

			/* out of memory, the new value keeps its own pin */
			if (obj_complete(old) && obj_pinned(m, old) && old_pin > obj_pin_s(&m->objs, o))
				(void)objtab_set_pin(&m->objs, o, old_pin);
			mobj_set_aside(m, old);
			if (obj_complete(old) && !obj_leased(m, old))
				mobj_destroy(m, old, true);
		}
		objtab_link(&m->objs, o);
		o->pkey = old ? pkey : mpol_admit(m, o->hash);
	}
	m->keys++;
	for (unsigned t = KVP_TIER_MEM; t <= KVP_TIER_DISK; t++)
		if (mevents_obj_has_tier(o, t, -1))
			mevents_obj_stored(m, o, t);
	mns_count(m, o, 1);
}

int mput_end(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint32_t n;
	int rc = mbatch_shape(m, r, "s88", &n);
	uint64_t now_ns = m->frame_ns + m->real_off_ns;	/* the frame's clock read (master.c) */

	if (rc)
		return rc;
	rb_u32(r);
	wb_u32(b, n);
	for (uint32_t i = 0; i < n; i++) {
		int s;
		uint64_t gen;
		struct obj *o = mobj_read_gen(m, r, &gen, &s);
		uint64_t csum = rb_u64(r);
		if (o && (s = mten_check(m, m->cur, obj_key(o), o->key_len, true)) != 0) {
			/* another tenant's put: not this token's to end */
		} else if (o && obj_complete(o)) {
			s = o->checksum == csum ? 0 : KVP_ESTALE;	/* a retried PUT_END */
		} else if (o && (o->flags & OBJ_VERSION) && !(o->flags & OBJ_UPSERT)) {
			/* A plain put an upsert overtook: the key has that
			 * value (first writer wins); its writer is done. */
			mobj_destroy(m, o, true);
			s = KVP_EEXIST;
		} else if (o && (o->flags & OBJ_VERSION) && objtab_reserve(&m->objs)) {
			s = KVP_ENOMEM;		/* no slot to link it in: not committed */
		} else if (o) {
			commit(m, o, csum, now_ns);
			mrepl_commit(m, o);
		}
		wb_status(b, s);
		mbatch_item(st, s);
	}
	return 0;
}

int mput_revoke(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint32_t n;
	int rc = mbatch_shape(m, r, "s8", &n);

	if (rc)
		return rc;
	rb_u32(r);
	wb_u32(b, n);
	for (uint32_t i = 0; i < n; i++) {
		int s;
		uint64_t gen;
		struct obj *o = mobj_read_gen(m, r, &gen, &s);
		if (o && (s = mten_check(m, m->cur, obj_key(o), o->key_len, true)) != 0)
			o = NULL;		/* another tenant's put: not this token's */
		if (o && obj_complete(o))
			s = KVP_EINVAL;		/* finished puts are REMOVEd */
		else if (o)
			mobj_destroy(m, o, true);
		wb_status(b, s);
		mbatch_item(st, s);
	}
	return 0;
}

void mput_client_gone(struct master *m, struct master_client *c)
{
	for (struct parked **pp = &m->parked; *pp;) {
		struct parked *p = *pp;
		if (p->c == c) {
			*pp = p->next;
			parked_free(p);
		} else {
			pp = &p->next;
		}
	}
}

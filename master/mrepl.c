/* mrepl: the warm standby; see mrepl.h and docs/ha.md "Warm standby". */
#include "mrepl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "extent.h"
#include "kvpool.h"
#include "log.h"
#include "mnode.h"
#include "mns.h"
#include "mpolicy.h"
#include "prefault.h"
#include "radix.h"
#include "segmap.h"

#define MREPL_MAX 8			/* standbys per leader */
#define SNAP_SLICE 100000		/* objects per tick: ~2M objects/s */
#define FRAME_MAX (1u << 20)		/* a REPL body is cut here (the standby's max_frame) */
#define PF_AHEAD 8			/* ADDs whose slots a load prefetches ahead */
#define SEG_GAP_MAX 4096		/* ids a SEG may skip (offline segments the standby never saw) */
/* A standby's unsent backlog beyond which it is dropped to resync: a 10M
 * snapshot in flight is about 400 MiB. */
#define QUEUE_MAX (1ull << 30)

struct follower {
	struct master_client *c;
	bool snapping;			/* the snapshot is still being sent */
	size_t clen;			/* cursor: the last key sent (clen 0: none yet) */
	uint8_t cursor[KVP_MAX_KEY];
};

struct mrepl {
	struct follower f[MREPL_MAX];
	unsigned nf;
	struct wbuf out;		/* records for every standby */
	size_t start;			/* the open frame in out; SIZE_MAX: none */
	struct wbuf snap;		/* one standby's snapshot slice */
};

/* ---- leader: recording ---- */

static void frame_open(struct wbuf *w, size_t *start)
{
	if (*start == SIZE_MAX)
		*start = wire_begin(w);
}

/* Closes the open frame once it is large enough (the next record opens one). */
static void frame_cut(struct wbuf *w, size_t *start, bool force)
{
	if (*start == SIZE_MAX || (!force && w->len - *start < FRAME_MAX))
		return;
	if (w->len - *start == WIRE_HDR_SIZE)
		w->len = *start;	/* empty */
	else
		wire_finish(w, *start, WIRE_OP_REPL, 0, 0, 0, 0);
	*start = SIZE_MAX;
}

static void put_add(struct wbuf *w, const struct obj *o, const struct rep *rp)
{
	wb_u8(w, MREPL_ADD);
	wb_u32(w, (uint32_t)rp->seg);
	wb_str(w, obj_key(o), o->key_len);
	wb_u8(w, (uint8_t)rp->tier);
	wb_u64(w, rep_off(rp));
	wb_u64(w, rep_len(rp));
	wb_u64(w, o->value_len);
	wb_u64(w, o->checksum);
	wb_u64(w, o->generation);
	wb_u64(w, obj_put_ns(o));
}

static void put_seg(struct wbuf *w, const struct seg *s)
{
	wb_u8(w, MREPL_SEG);
	wb_u32(w, s->id);
	mnode_seg_encode(w, s);
}

static struct wbuf *rec(struct master *m)
{
	struct mrepl *r = m->repl;

	frame_cut(&r->out, &r->start, false);
	frame_open(&r->out, &r->start);
	return &r->out;
}

void mrepl_add(struct master *m, const struct obj *o, unsigned ri)
{
	if (mrepl_on(m) && obj_complete(o) && !(o->flags & OBJ_VERSION))
		put_add(rec(m), o, &obj_rep(o)[ri]);
}

void mrepl_drop(struct master *m, const struct obj *o, const struct rep *rp)
{
	if (!mrepl_on(m) || !obj_complete(o))
		return;
	struct wbuf *w = rec(m);
	wb_u8(w, MREPL_DROP);
	wb_u32(w, (uint32_t)rp->seg);
	wb_str(w, obj_key(o), o->key_len);
	wb_u8(w, (uint8_t)rp->tier);
	wb_u64(w, rep_off(rp));
	wb_u64(w, o->generation);
}

void mrepl_commit(struct master *m, const struct obj *o)
{
	for (unsigned k = 0; mrepl_on(m) && k < o->nrep; k++)
		mrepl_add(m, o, k);
}

void mrepl_seg(struct master *m, const struct seg *s)
{
	if (mrepl_on(m))
		put_seg(rec(m), s);
}

void mrepl_segdrop(struct master *m, const struct seg *s)
{
	if (!mrepl_on(m))
		return;
	struct wbuf *w = rec(m);
	wb_u8(w, MREPL_SEGDROP);
	wb_u32(w, s->id);
}

static void send_to(struct master_client *c, struct wbuf *w)
{
	if (w->len && !w->oom)
		c->send(c->arg, w->p, w->len);
	else if (w->oom && c->close)
		c->close(c->arg);	/* a gap in the stream: it must start again */
}

void mrepl_flush(struct master *m)
{
	struct mrepl *r = m->repl;

	if (!r || r->start == SIZE_MAX)
		return;
	frame_cut(&r->out, &r->start, true);
	for (unsigned i = 0; i < r->nf; i++)
		send_to(r->f[i].c, &r->out);
	wb_reset(&r->out);
}

/* ---- leader: standbys and their snapshots ---- */

int mrepl_follow(struct master *m, struct master_client *c)
{
	struct mrepl *r = m->repl;

	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return KVP_ENOMEM;
		wb_init(&r->out);
		wb_init(&r->snap);
		r->start = SIZE_MAX;
		m->repl = r;
	}
	for (unsigned i = 0; i < r->nf; i++)
		if (r->f[i].c == c)
			return KVP_EEXIST;
	if (r->nf == MREPL_MAX)
		return KVP_ELIMIT;
	mrepl_flush(m);		/* what came before is in the snapshot */
	struct follower *f = &r->f[r->nf++];
	memset(f, 0, sizeof(*f));
	f->c = c;
	f->snapping = true;
	/* the segment set first, on its own: the objects refer to it */
	size_t st = SIZE_MAX;
	wb_reset(&r->snap);
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (!s || !s->online)
			continue;
		frame_cut(&r->snap, &st, false);
		frame_open(&r->snap, &st);
		put_seg(&r->snap, s);
	}
	frame_cut(&r->snap, &st, true);
	send_to(c, &r->snap);
	if (c->hello)	/* a standby, not the table file (mtabfile.c logs its own) */
		log_notice("ha: standby '%s' follows: %llu keys to send", c->name,
			   (unsigned long long)m->keys);
	return 0;
}

void mrepl_client_gone(struct master *m, struct master_client *c)
{
	struct mrepl *r = m->repl;

	for (unsigned i = 0; r && i < r->nf; i++)
		if (r->f[i].c == c) {
			if (c->hello)
				log_notice("ha: standby '%s' stopped following", c->name);
			r->f[i] = r->f[--r->nf];
			break;
		}
	if (r && !r->nf)
		mrepl_destroy(m);
}

bool mrepl_synced(const struct master *m, const struct master_client *c)
{
	const struct mrepl *r = m->repl;

	for (unsigned i = 0; r && i < r->nf; i++)
		if (r->f[i].c == c)
			return !r->f[i].snapping;
	return false;
}

void mrepl_destroy(struct master *m)
{
	struct mrepl *r = m->repl;

	if (!r)
		return;
	wb_free(&r->out);
	wb_free(&r->snap);
	free(r);
	m->repl = NULL;
}

/* The next slice of f's snapshot, in key order from its cursor: changes
 * behind the cursor reach f as records, those ahead of it in the slice
 * that covers them. */
static void snap_slice(struct master *m, struct follower *f)
{
	struct mrepl *r = m->repl;
	size_t st = SIZE_MAX;
	struct obj *o = objtab_seek(&m->objs, f->cursor, f->clen, f->clen > 0);

	wb_reset(&r->snap);
	for (unsigned n = 0; o && n < SNAP_SLICE; n++, o = objtab_next(&m->objs, o)) {
		if (!obj_complete(o))
			continue;
		for (unsigned k = 0; k < o->nrep; k++) {
			frame_cut(&r->snap, &st, false);
			frame_open(&r->snap, &st);
			put_add(&r->snap, o, &obj_rep(o)[k]);
		}
		f->clen = o->key_len;
		memcpy(f->cursor, obj_key(o), o->key_len);
	}
	if (!o) {
		frame_cut(&r->snap, &st, false);
		frame_open(&r->snap, &st);
		wb_u8(&r->snap, MREPL_SYNCED);
		wb_u64(&r->snap, m->gen);
		f->snapping = false;
		if (f->c->hello)
			log_notice("ha: standby '%s' has the whole table (%llu keys)", f->c->name,
				   (unsigned long long)m->keys);
	}
	frame_cut(&r->snap, &st, true);
	send_to(f->c, &r->snap);
}

/* Drops the standbys whose connection holds more than QUEUE_MAX unsent
 * bytes, backlog and all: a slow or stopped standby must not hold the
 * leader's memory without bound; it follows again from a snapshot. Last
 * in the tick: a close may free m->repl (mrepl_client_gone). */
static void drop_lagging(struct master *m)
{
	struct mrepl *r = m->repl;
	struct master_client *gone[MREPL_MAX];
	unsigned n = 0;

	for (unsigned i = 0; r && i < r->nf;) {
		struct master_client *c = r->f[i].c;
		size_t q = c->queued ? c->queued(c->arg) : 0;

		if (q <= QUEUE_MAX) {
			i++;
			continue;
		}
		log_warn("ha: standby '%s' is %zu MiB behind: dropped, it follows again from a "
			 "snapshot", c->name, q >> 20);
		m->repl_lag_drops++;
		r->f[i] = r->f[--r->nf];
		gone[n++] = c;
	}
	for (unsigned i = 0; i < n; i++) {
		if (gone[i]->abort)
			gone[i]->abort(gone[i]->arg);
		else if (gone[i]->close)
			gone[i]->close(gone[i]->arg);
	}
}

void mrepl_tick(struct master *m)
{
	struct mrepl *r = m->repl;

	if (!r)
		return;
	mrepl_flush(m);
	for (unsigned i = 0; i < r->nf; i++)
		if (r->f[i].snapping)
			snap_slice(m, &r->f[i]);
	drop_lagging(m);
}

/* ---- standby: applying the stream ---- */

/* Drops replica ri of o from this master's table (a standby's or a
 * reconciling leader's: no FREE, the node does not hold it or the leader
 * frees it), releasing its memory extent. True if o went with it. */
static bool forget_replica(struct master *m, struct obj *o, unsigned ri)
{
	struct seg *s = segreg_online(&m->segs, (uint32_t)obj_rep(o)[ri].seg);

	if (s && obj_rep(o)[ri].tier == KVP_TIER_MEM)
		seg_unalloc(s, rep_off(&obj_rep(o)[ri]));
	return mobj_drop_replica(m, o, ri, false);
}

static void forget_obj(struct master *m, struct obj *o)
{
	if (!o->nrep) {
		mobj_unlink(m, o);
		return;
	}
	while (!forget_replica(m, o, o->nrep - 1u))
		;
}

static void drop_seg(struct master *m, struct seg *s)
{
	mobj_drop_seg(m, s);
	segreg_offline(&m->segs, s);
}

static int apply_seg(struct master *m, struct rbuf *r)
{
	struct seg id;
	uint8_t *rcopy;
	size_t rl;
	uint32_t sid = rb_u32(r);

	if (!rb_ok(r) || mnode_seg_decode(r, &id, &rcopy, &rl))
		return KVP_EPROTO;
	id.id = sid;
	if (!id.id || id.id > REP_MAX_SEG || id.id >= m->segs.n + SEG_GAP_MAX || !id.uuid) {
		free(rcopy);
		return KVP_EPROTO;
	}
	struct seg *other = segreg_by_uuid(&m->segs, id.uuid);
	if (other && other->id != id.id) {
		free(rcopy);
		return KVP_EPROTO;	/* one uuid, one id */
	}
	while (m->segs.n <= id.id)
		if (!segreg_add(&m->segs)) {
			free(rcopy);
			return KVP_ENOMEM;
		}
	struct seg *s = m->segs.v[id.id];
	/* The same segment again without a SEGDROP: its node re-mounted into
	 * a warm table (mnode.c), which kept its replicas; a cold re-mount
	 * sends SEGDROP first. Anything else replaces it. */
	bool same = s->online && s->uuid == id.uuid && s->size == id.size &&
		    s->data_off == id.data_off && s->align == id.align;
	if (s->online && !same)
		drop_seg(m, s);
	mnode_seg_set(s, &id, rcopy, rl);
	if (!same && segreg_online_start(&m->segs, s))
		return KVP_EPROTO;
	s->client = NULL;
	s->reported = false;
	s->last_seen_ms = m->now_ms;
	return 0;
}

static bool has_rep(const struct obj *o, uint32_t seg, uint8_t tier, uint64_t off, int *ri)
{
	const struct rep *r = obj_rep(o);

	for (unsigned k = 0; k < o->nrep; k++)
		if ((uint32_t)r[k].seg == seg && r[k].tier == tier && rep_off(&r[k]) == off) {
			*ri = (int)k;
			return true;
		}
	return false;
}

/* ---- deferred reservations ----
 * A snapshot (a standby's, a table file's) comes in key order; with hashed
 * keys its extents come in no order at all, and each reservation touched a
 * random block of the segment's allocator: the lone load of 3M objects
 * took 2.4 s against 0.9 s in offset order. A fresh object's extent is
 * reserved later, the batch sorted by offset, so the allocator is walked
 * once from one end. While the extents come in offset order (keys named
 * in the order they were stored) each is reserved at once: no batch.
 * Only objects created by one ADD wait (their one replica is the extent,
 * nothing may free or move them before the flush; OBJ_RESWAIT marks them,
 * and stays after: clearing it would read every object again, and a stale
 * mark only flushes a DROP's batch early):
 * an ADD that changes an object that exists, a DROP of a waiting one and
 * any other record flush first, and so does the end of every
 * mrepl_apply() outside a table file's load (mtabfile.c flushes at the end
 * of the file). Between calls none waits. A flush should be rare in a
 * load: each reserves a batch strewn over the whole segment. */
struct mrepl_dres {
	uint64_t key;		/* the segment id above the offset's units */
	/* the object's address (48 bits, objtab.h) below the extent's
	 * length in units: here, not read from the object, a miss each */
	uint64_t obj_len;
};

#define DRES_LEN_SHIFT 48
#define DRES_OFF_BITS 38	/* an offset's units (REP_MAX_OFF) below the segment id */

/* Whether an extent of len bytes can wait (its length fits). */
static bool dres_fits(uint64_t len)
{
	return (len >> REP_UNIT_SHIFT) < (1u << (64 - DRES_LEN_SHIFT));
}

/* A table file's batch, and the sort's second buffer beside it, grow in
 * regions whose pages helper threads fault ahead (prefault.h): at 3M
 * hashed keys the two are ~100 MiB, and clearing them took the load's own
 * thread ~0.2 s. Started at the first extent that waits, so a file in
 * offset order costs nothing; taken 2 MiB at a time from each. */
#define DRES_CHUNK ((size_t)2 << 20)
#define DRES_AHEAD ((size_t)8 << 20)

static int dres_start_regions(struct master *m)
{
	size_t size = m->dres_bound * sizeof(struct mrepl_dres);

	m->dres_pf = prefault_start(size, DRES_AHEAD);
	m->dres_tpf = m->dres_pf ? prefault_start(size, DRES_AHEAD) : NULL;
	if (m->dres_tpf) {
		m->dres = prefault_take(m->dres_pf, DRES_CHUNK);
		m->dres_tmp = prefault_take(m->dres_tpf, DRES_CHUNK);
		if (m->dres && m->dres_tmp) {
			m->capdres = DRES_CHUNK / sizeof(struct mrepl_dres);
			return 0;
		}
	}
	mrepl_reserve_release(m);	/* no thread or no mapping: the heap */
	return -1;
}

static int dres_grow(struct master *m)
{
	size_t per = DRES_CHUNK / sizeof(struct mrepl_dres);
	struct mrepl_dres *v;

	if (!m->dres && m->dres_bound >= per && dres_start_regions(m) == 0)
		return 0;
	if (m->dres_pf) {
		/* the regions are of one size: both have room, or neither */
		if (prefault_take(m->dres_pf, DRES_CHUNK) && prefault_take(m->dres_tpf, DRES_CHUNK)) {
			m->capdres += per;
			return 0;
		}
		/* past the file's bound: on the heap from here */
		v = malloc(m->capdres * 2 * sizeof(*v));
		if (!v)
			return KVP_ENOMEM;
		memcpy(v, m->dres, m->ndres * sizeof(*v));
		size_t n = m->ndres, cap = m->capdres * 2;

		mrepl_reserve_release(m);
		m->dres = v;
		m->ndres = n;
		m->capdres = cap;
		return 0;
	}
	size_t cap = m->capdres ? m->capdres * 2 : 4096;

	v = realloc(m->dres, cap * sizeof(*v));
	if (!v)
		return KVP_ENOMEM;
	m->dres = v;
	m->capdres = cap;
	return 0;
}

static int dres_push(struct master *m, uint32_t sid, uint64_t off, uint64_t len, struct obj *o)
{
	if (m->ndres == m->capdres && dres_grow(m))
		return KVP_ENOMEM;
	m->dres[m->ndres++] = (struct mrepl_dres){
		.key = (uint64_t)sid << DRES_OFF_BITS | off >> REP_UNIT_SHIFT,
		.obj_len = (uint64_t)(uintptr_t)o | (len >> REP_UNIT_SHIFT) << DRES_LEN_SHIFT };
	return 0;
}

size_t mrepl_dres_bound_max = SIZE_MAX;

void mrepl_reserve_presize(struct master *m, size_t n)
{
	if (!m->ndres)
		m->dres_bound = n < mrepl_dres_bound_max ? n : mrepl_dres_bound_max;
}

void mrepl_reserve_release(struct master *m)
{
	if (m->dres_pf) {
		prefault_free(m->dres_pf);
		prefault_free(m->dres_tpf);
	} else {
		free(m->dres);
	}
	m->dres_pf = m->dres_tpf = NULL;
	m->dres = NULL;
	m->dres_tmp = NULL;
	m->ndres = m->capdres = m->dres_bound = 0;
}

static int dres_cmp(const void *a, const void *b)
{
	uint64_t x = ((const struct mrepl_dres *)a)->key, y = ((const struct mrepl_dres *)b)->key;

	return x < y ? -1 : x > y;
}

void mrepl_reserve_flush(struct master *m)
{
	size_t n = m->ndres;

	if (!n)
		return;
	radix_sort(m->dres, n, sizeof(*m->dres), 0, dres_cmp, m->dres_tmp);
	struct seg *s = NULL;

	for (size_t i = 0; i < n; i++) {
		const struct mrepl_dres *d = &m->dres[i];
		uint32_t sid = (uint32_t)(d->key >> DRES_OFF_BITS);

		if (!s || s->id != sid)
			s = segreg_online(&m->segs, sid);
		/* an overlap (or no memory): gone, as its ADD would have been
		 * skipped; nothing of it was reserved, nothing is freed */
		uint64_t len = (d->obj_len >> DRES_LEN_SHIFT) << REP_UNIT_SHIFT;
		struct obj *o = (struct obj *)(uintptr_t)(d->obj_len & ((1ull << DRES_LEN_SHIFT) - 1));

		if (!s || seg_reserve(s, (d->key & ((1ull << DRES_OFF_BITS) - 1)) << REP_UNIT_SHIFT, len))
			mobj_drop_replica(m, o, 0, false);
	}
	m->dres_last = m->dres[n - 1].key;
	m->ndres = 0;
	/* a frame's batch is smaller: a big one gives its memory back (a
	 * table file's, at the file's end: mtabfile.c) */
	if (m->capdres > (1u << 16) && !m->tabfile_loading)
		mrepl_reserve_release(m);
}

static int apply_add(struct master *m, struct rbuf *r)
{
	size_t klen;
	uint32_t sid = rb_u32(r);
	const uint8_t *key = rb_str(r, &klen);
	uint8_t tier = rb_u8(r);
	uint64_t off = rb_u64(r), alen = rb_u64(r), vlen = rb_u64(r);
	uint64_t csum = rb_u64(r), gen = rb_u64(r), put_ns = rb_u64(r);

	if (!rb_ok(r))
		return KVP_EPROTO;
	struct seg *s = segreg_online(&m->segs, sid);
	bool placed = off % (1u << REP_UNIT_SHIFT) == 0 && alen % (1u << REP_UNIT_SHIFT) == 0 &&
		      alen && alen < REP_MAX_LEN && off < REP_MAX_OFF;
	if (!s || !wire_key_ok(key, klen) || tier > KVP_TIER_DISK || !vlen ||
	    vlen > m->conf.cluster.max_object_size || alen < ext_size((uint32_t)klen, vlen) ||
	    !placed || (tier == KVP_TIER_MEM && (alen > s->capacity || off % s->align)))
		return KVP_EPROTO;
	if (gen > m->gen)
		m->gen = gen;
	/* a snapshot comes in key order: a key past the table's last is new */
	struct obj *o = objtab_past_last(&m->objs, key, klen) ? NULL
							       : objtab_find(&m->objs, key, klen);
	int ri;
	/* a newer value (cannot happen in order), or the snapshot and a change
	 * both carried this one (a file written under puts holds thousands):
	 * nothing changes, so nothing waiting needs reserving first (a flush
	 * per such ADD reserved small batches strewn over the segment, a cache
	 * miss a step: 3M hashed keys loaded in 5.8 s instead of ~1.5) */
	if (o && (o->generation > gen || !obj_complete(o) ||
		  (o->generation == gen && has_rep(o, sid, tier, off, &ri))))
		return 0;
	if (o && m->ndres) {	/* it may wait among them: reserve theirs first */
		mrepl_reserve_flush(m);
		o = objtab_find(&m->objs, key, klen);	/* the same, or dropped */
	}
	if (o && o->generation < gen) {
		forget_obj(m, o);	/* replaced: its own DROPs follow from the leader */
		o = NULL;
	}
	if (o && o->nrep >= KVP_MAX_REPLICAS)
		return 0;
	uint64_t dkey = (uint64_t)sid << DRES_OFF_BITS | off >> REP_UNIT_SHIFT;
	if (!o && tier == KVP_TIER_MEM && (m->ndres || dkey < m->dres_last) && dres_fits(alen)) {
		/* fresh and out of offset order: its reservation waits. An
		 * extent already starting in its page overlaps it: skipped now,
		 * as the reservation would refuse it (attached, it would take
		 * that page's tag, and its drop at the flush clear it) */
		if (seg_ptag_taken(s, off))
			return 0;
		o = mobj_new_complete(m, key, klen, vlen, gen, csum, put_ns);
		if (!o)
			return KVP_ENOMEM;
		if (mobj_attach(m, s, &o, tier, off, alen)) {
			mobj_unlink(m, o);
			return KVP_ENOMEM;
		}
		if (dres_push(m, sid, off, alen, o) == 0)
			o->flags |= OBJ_RESWAIT;
		else if (seg_reserve(s, off, alen))
			mobj_drop_replica(m, o, 0, false);	/* overlaps, as below */
		return 0;
	}
	if (tier == KVP_TIER_MEM && m->ndres)
		mrepl_reserve_flush(m);	/* (an extent too long to wait) first in, first kept */
	if (tier == KVP_TIER_MEM && seg_reserve(s, off, alen))
		return 0;	/* overlaps: the takeover's reconciliation settles it */
	if (tier == KVP_TIER_MEM)
		m->dres_last = dkey;	/* in offset order so far: nothing waits */
	bool fresh = !o;
	if (fresh) {
		o = mobj_new_complete(m, key, klen, vlen, gen, csum, put_ns);
		if (!o)
			goto out_unreserve;
	}
	if (mobj_attach(m, s, &o, tier, off, alen)) {
		if (fresh)
			mobj_unlink(m, o);
		goto out_unreserve;
	}
	return 0;

out_unreserve:
	if (tier == KVP_TIER_MEM)
		seg_unalloc(s, off);
	return KVP_ENOMEM;
}

static int apply_drop(struct master *m, struct rbuf *r)
{
	size_t klen;
	uint32_t sid = rb_u32(r);
	const uint8_t *key = rb_str(r, &klen);
	uint8_t tier = rb_u8(r);
	uint64_t off = rb_u64(r), gen = rb_u64(r);

	if (!rb_ok(r) || !wire_key_ok(key, klen))
		return KVP_EPROTO;
	struct obj *o = objtab_find(&m->objs, key, klen);
	int ri;
	/* only a waiting extent needs the batch reserved first: evictions
	 * among a file's changes would otherwise each flush a small one */
	if (o && (o->flags & OBJ_RESWAIT) && m->ndres) {
		mrepl_reserve_flush(m);
		o = objtab_find(&m->objs, key, klen);
	}
	if (o && o->generation == gen && has_rep(o, sid, tier, off, &ri))
		forget_replica(m, o, (unsigned)ri);
	return 0;
}

/* Steps a over the next record if it is an ADD and prefetches its key's
 * slot; false at anything else (the lookahead stops there). */
static bool peek_add(struct master *m, struct rbuf *a)
{
	size_t klen;

	if (rb_done(a) || rb_u8(a) != MREPL_ADD)
		return false;
	rb_u32(a);
	const uint8_t *key = rb_str(a, &klen);
	rb_take(a, 1 + 6 * 8);
	if (!rb_ok(a))
		return false;
	objtab_prefetch_bucket(&m->objs, objtab_hash(key, klen));
	return true;
}

int mrepl_apply(struct master *m, const uint8_t *body, size_t len)
{
	struct rbuf r, a;
	unsigned ahead = 0;	/* ADDs between r and a, their slots prefetched */
	bool more = true;
	int rc = 0;

	rb_init(&r, body, len);
	a = r;
	while (!rc && !rb_done(&r)) {
		/* a snapshot's inserts each miss on a random slot: ask for
		 * the slots of the next ADDs while this one is applied */
		while (more && ahead < PF_AHEAD)
			ahead += (more = peek_add(m, &a));
		if (ahead)
			ahead--;
		uint8_t type = rb_u8(&r);
		if (!rb_ok(&r)) {
			rc = KVP_EPROTO;
			break;
		}
		if (type != MREPL_ADD && type != MREPL_DROP)
			mrepl_reserve_flush(m);	/* (an ADD or a DROP flushes when it must) */
		switch (type) {
		case MREPL_SEG: rc = apply_seg(m, &r); break;
		case MREPL_SEGDROP: {
			struct seg *s = segreg_online(&m->segs, rb_u32(&r));
			if (!rb_ok(&r))
				return KVP_EPROTO;
			if (s)
				drop_seg(m, s);
			break;
		}
		case MREPL_ADD: rc = apply_add(m, &r); break;
		case MREPL_DROP: rc = apply_drop(m, &r); break;
		case MREPL_SYNCED: {
			uint64_t gen = rb_u64(&r);
			if (!rb_ok(&r))
				return KVP_EPROTO;
			if (gen > m->gen)
				m->gen = gen;
			if (!m->repl_synced && !m->tabfile_loading)
				log_notice("ha: following the leader: in step, %llu keys",
					   (unsigned long long)m->keys);
			m->repl_synced = true;
			break;
		}
		default:
			return KVP_EPROTO;
		}
		m->repl_records++;
	}
	if (!m->tabfile_loading)
		mrepl_reserve_flush(m);
	return rc;
}

/* ---- new leader: takeover and reconciliation ---- */

void mrepl_takeover(struct master *m)
{
	struct timespec ts;
	size_t nseg = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t us = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
	if (m->gen < us)
		m->gen = us;	/* past any put the last leader may have begun */
	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (!s || !s->online)
			continue;
		s->warm = true;
		s->client = NULL;
		s->reported = false;
		s->last_seen_ms = m->now_ms;	/* node_ttl to re-mount */
		nseg++;
	}
	m->warm = true;
	log_notice("ha: took over a warm table: %llu keys in %zu segments", (unsigned long long)m->keys,
		   nseg);
}

static int ent_cmp(const void *a, const void *b)
{
	uint64_t x = ((const struct mrecon_ent *)a)->key >> 1;
	uint64_t y = ((const struct mrecon_ent *)b)->key >> 1;

	return x < y ? -1 : x > y;
}

/* By (off, tier): the confirmed bit below them left out. */
static void recon_sort(struct mrecon_ent *a, size_t n)
{
	radix_sort(a, n, sizeof(*a), 1, ent_cmp, NULL);
}

int mrepl_recon_begin(struct master *m, struct seg *s)
{
	s->warm = false;
	free(s->recon);
	s->recon = NULL;
	s->nrecon = s->recon_cap = 0;
	s->recon_pend = false;
	if (!s->nobjs)
		return 0;
	/* Only the room here (pages not touched yet cost next to nothing;
	 * huge pages when they are, at the fill): the walk that fills it
	 * waits for the first REPORT (recon_ready). Walking 3M replicas here
	 * held the MOUNT's answer, and the first put after a failover, over
	 * a second (docs/ha.md "Failover at size"). */
	s->recon = objtab_big_alloc(s->nobjs * sizeof(*s->recon), false);
	if (!s->recon)
		return -ENOMEM;
	s->recon_cap = s->nobjs;
	s->recon_gen = m->gen;
	s->recon_pend = true;
	s->recon_sorted = false;
	s->recon_hint = 0;
	return 0;
}

/* The replicas the table had in s at its MOUNT. Since then a replica of an
 * older generation can join s only from its own REPORTs (adoption, after
 * this) or an answered PROMOTE (sent after its REPORTs); what the puts
 * placed since is newer than recon_gen and not the node's to confirm: its
 * scan may have passed the page, and a ghost drop would lose an
 * acknowledged put. What went since is simply absent. */
static void recon_fill(struct seg *s)
{
	size_t n = 0;

	/* (recon_cap: the bound is never reached, as nothing older joined) */
	for (size_t i = 0; i < s->nobjs && n < s->recon_cap; i++) {
		const struct obj *o = s->objs[i];
		/* a version set aside by an upsert here (its readers decide),
		 * or a put placed since the MOUNT */
		if ((o->flags & OBJ_VERSION) || o->generation > s->recon_gen)
			continue;
		for (unsigned k = 0; k < o->nrep; k++)
			if ((uint32_t)obj_rep(o)[k].seg == s->id) {
				s->recon[n++] = (struct mrecon_ent){
					.key = rep_off(&obj_rep(o)[k]) | (uint64_t)obj_rep(o)[k].tier << 1,
					.len = rep_len(&obj_rep(o)[k]) |
					       (uint64_t)segmap_tag(o->generation)
					       << MHOLD_TAG_SHIFT,
					.hash = o->hash,
					.gen32 = (uint32_t)o->generation };
				break;
			}
	}
	s->nrecon = n;
	s->recon_pend = false;
}

static void recon_ready(struct seg *s)
{
	if (s->recon_pend)
		recon_fill(s);
	if (!s->recon_sorted) {
		recon_sort(s->recon, s->nrecon);
		s->recon_sorted = true;
	}
}

/* The first entry whose (off, tier) is >= key's. */
static size_t lower(const struct seg *s, uint64_t key)
{
	size_t lo = 0, hi = s->nrecon;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->recon[mid].key >> 1 < key >> 1)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* lower(), first trying the entry after the last REPORT item's: a node
 * reports in offset order, so a re-mount's items mostly walk the array. */
static size_t lower_hint(struct seg *s, uint64_t key)
{
	size_t h = s->recon_hint;

	if (h < s->nrecon && s->recon[h].key >> 1 == key >> 1 &&
	    (!h || s->recon[h - 1].key >> 1 < key >> 1))
		return h;
	return lower(s, key);
}

bool mrepl_recon_confirm(struct master *m, struct seg *s, const uint8_t *key, size_t klen,
			 uint8_t tier, uint64_t off, uint64_t gen)
{
	uint64_t k = off | (uint64_t)tier << 1;
	size_t i;

	recon_ready(s);
	i = lower_hint(s, k);
	int ri;

	s->recon_hint = i + 1;

	if (!s->recon || i == s->nrecon || s->recon[i].key >> 1 != k >> 1 ||
	    s->recon[i].gen32 != (uint32_t)gen || (s->recon[i].key & 1))
		return false;
	struct obj *o = objtab_find(&m->objs, key, klen);
	if (!o || o->generation != gen || !has_rep(o, s->id, tier, off, &ri))
		return false;
	s->recon[i].key |= 1;
	m->recon_confirmed++;
	return true;
}

/* Drops the replica of entry e if the table still has it (a ghost). */
static void drop_ghost(struct master *m, struct seg *s, struct mrecon_ent *e)
{
	uint8_t tier = (uint8_t)(e->key >> 1 & 3);
	uint64_t off = e->key & ~(uint64_t)7;
	struct obj *o = objtab_find_hg(&m->objs, e->hash, e->gen32);
	int ri;

	e->key |= 1;
	if (o && has_rep(o, s->id, tier, off, &ri)) {
		forget_replica(m, o, (unsigned)ri);
		m->recon_ghosts++;
		/* held segment: the node's extents not reported yet may lie in
		 * the ghost's space (the map could not vouch for it) */
		if (s->held && tier == KVP_TIER_MEM) {
			uint64_t held = s->hold.bytes;
			if (mhold_add(&s->hold, s->alloc, off, e->len & MHOLD_LEN_MASK))
				s->held = false;	/* no more puts before the REPORTs */
			s->used += s->hold.bytes - held;
		}
	}
}

void mrepl_recon_clear(struct master *m, struct seg *s, uint64_t off, uint64_t len)
{
	if (!s->recon)
		return;
	recon_ready(s);
	size_t i = lower(s, off);
	/* memory extents do not overlap one another: at most one before off */
	for (size_t j = i; j-- > 0;) {
		struct mrecon_ent *e = &s->recon[j];
		if ((e->key >> 1 & 3) != KVP_TIER_MEM)
			continue;
		if (!(e->key & 1) && (e->key & ~(uint64_t)7) + (e->len & MHOLD_LEN_MASK) > off)
			drop_ghost(m, s, e);
		break;
	}
	for (; i < s->nrecon && (s->recon[i].key & ~(uint64_t)7) < off + len; i++) {
		struct mrecon_ent *e = &s->recon[i];
		if ((e->key >> 1 & 3) == KVP_TIER_MEM && !(e->key & 1))
			drop_ghost(m, s, e);
	}
}

void mrepl_recon_finish(struct master *m, struct seg *s)
{
	uint64_t ghosts = m->recon_ghosts;

	if (s->recon_pend)
		recon_fill(s);	/* no REPORT: every replica is a ghost */
	for (size_t i = 0; i < s->nrecon; i++)
		if (!(s->recon[i].key & 1))
			drop_ghost(m, s, &s->recon[i]);
	log_notice("segment %u (%s): reconciled with the node: %zu replicas of the table checked, "
		   "%llu not held by the node dropped", s->id, s->name, s->nrecon,
		   (unsigned long long)(m->recon_ghosts - ghosts));
	free(s->recon);
	s->recon = NULL;
	s->nrecon = 0;
}

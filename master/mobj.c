/* mobj: object and replica bookkeeping; see mobj.h. */
#include "mobj.h"

#include <errno.h>
#include <stdlib.h>

#include "kvpool.h"
#include "log.h"
#include "master_i.h"
#include "mchain.h"
#include "mevents.h"
#include "mrepl.h"

int mobj_arr_push(struct objarr *a, struct obj *o)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 256;
		struct obj **v = realloc(a->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		a->v = v;
		a->cap = cap;
	}
	o->slot = (uint32_t)a->n;
	a->v[a->n++] = o;
	return 0;
}

void mobj_arr_del(struct objarr *a, struct obj *o)
{
	uint32_t i = o->slot;
	struct obj *last = a->v[--a->n];

	a->v[i] = last;
	last->slot = i;
	o->slot = OBJ_NOSLOT;
}

/* The array o's slot indexes: complete objects get a lease entry, pending
 * ones a put-deadline entry. */
static struct objarr *obj_arr(struct master *m, const struct obj *o)
{
	return obj_complete(o) ? &m->leased : &m->pending;
}

struct obj *mobj_new_complete(struct master *m, const uint8_t *key, size_t klen,
			      uint64_t value_len, uint64_t gen, uint64_t csum, uint64_t put_ns)
{
	struct obj *o = objtab_insert(&m->objs, key, klen, 1);

	if (!o)
		return NULL;
	o->value_len = value_len;
	o->generation = gen;
	o->checksum = csum;
	obj_set_put_ns(o, put_ns);
	o->pkey = mpol_admit(m, o->hash);
	o->atime = (uint32_t)m->pol.clk;
	o->flags |= OBJ_COMPLETE;	/* objtab may have marked it (OBJ_KXWAIT) */
	m->keys++;
	mns_count(m, o, 1);
	return o;
}

void mobj_unlink(struct master *m, struct obj *o)
{
	mchain_unlink(m, o);
	if (o->slot != OBJ_NOSLOT)
		mobj_arr_del(obj_arr(m, o), o);
	if (o->flags & OBJ_VERSION) {
		mver_del(&m->vers, o);
		objtab_free(&m->objs, o);
		return;
	}
	if (obj_complete(o)) {
		m->keys--;
		mns_count(m, o, -1);
	}
	objtab_remove(&m->objs, o);
}

struct obj *mobj_find_gen(struct master *m, const uint8_t *key, size_t klen, uint64_t gen,
			  struct obj **cur)
{
	struct obj *o = objtab_find(&m->objs, key, klen);

	*cur = o;
	if (o && o->generation == gen)
		return o;
	return mver_find(&m->vers, gen, key, klen);
}

struct obj *mobj_read_gen(struct master *m, struct rbuf *r, uint64_t *gen, int *status)
{
	size_t klen;
	const uint8_t *key = rb_str(r, &klen);

	*gen = rb_u64(r);
	if (!wire_key_ok(key, klen)) {
		*status = KVP_EKEY;
		return NULL;
	}
	struct obj *cur, *o = mobj_find_gen(m, key, klen, *gen, &cur);
	*status = o ? 0 : cur ? KVP_ESTALE : KVP_ENOTFOUND;
	return o;
}

void mobj_set_aside(struct master *m, struct obj *o)
{
	mchain_detach_key(m, o);
	objtab_unlink(&m->objs, o);
	if (obj_complete(o)) {
		m->keys--;
		mns_count(m, o, -1);
	}
	mver_add(&m->vers, o);
}

bool mobj_drop_replica(struct master *m, struct obj *o, unsigned ri, bool free_extent)
{
	struct rep rp = obj_rep(o)[ri];
	struct seg *s = segreg_online(&m->segs, (uint32_t)rp.seg);

	mrepl_drop(m, o, &rp);
	if (!mevents_obj_has_tier(o, rp.tier, (int)ri))
		mevents_obj_removed(m, o, rp.tier);	/* its last replica in that tier */

	if (s) {
		seg_detach(s, o, ri);
		if (free_extent && seg_queue_free(s, rep_off(&rp), o->generation, (uint8_t)rp.tier, false))
			log_err("segment %u: out of memory queueing a FREE; %llu bytes leak until re-mount",
				s->id, (unsigned long long)rep_len(&rp));
		else if (free_extent && rp.tier == KVP_TIER_DISK)
			s->spill_dropped += rep_len(&rp);
	}
	obj_rep(o)[ri] = obj_rep(o)[--o->nrep];
	if (o->nrep) {
		mchain_changed(m, o);
		return false;
	}
	mobj_unlink(m, o);
	return true;
}

void mobj_destroy(struct master *m, struct obj *o, bool free_extents)
{
	if (!o->nrep) {
		mobj_unlink(m, o);
		return;
	}
	while (!mobj_drop_replica(m, o, o->nrep - 1u, free_extents))
		;
}

int mobj_attach(struct master *m, struct seg *s, struct obj **op, uint8_t tier, uint64_t off,
		uint64_t len)
{
	struct obj *o = *op;

	if (o->nrep == o->cap_rep) {
		struct obj *n = objtab_regrow(&m->objs, o, o->cap_rep + 1u);
		if (!n)
			return KVP_ENOMEM;
		seg_repoint(&m->segs, n);
		if (n->slot != OBJ_NOSLOT)
			obj_arr(m, n)->v[n->slot] = n;
		*op = o = n;
	}
	unsigned ri = o->nrep;
	obj_rep(o)[ri] = rep_make(s->id, tier, off, len);
	o->nrep++;	/* first: seg_attach's moves look the replica up */
	if (seg_attach(s, o, ri, mchain_rgn(&m->objs, o, ri))) {
		o->nrep--;
		return KVP_ENOMEM;
	}
	mchain_changed(m, o);
	mrepl_add(m, o, ri);
	return 0;
}

void mobj_drop_seg(struct master *m, struct seg *s)
{
	while (s->nobjs) {
		struct obj *o = s->objs[s->nobjs - 1];
		unsigned ri = 0;
		while (ri < o->nrep && (uint32_t)obj_rep(o)[ri].seg != s->id)
			ri++;
		if (ri == o->nrep) {	/* cannot happen; do not spin */
			s->nobjs--;
			continue;
		}
		mobj_drop_replica(m, o, ri, false);
	}
}

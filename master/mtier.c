/* mtier: moving objects between a node's memory and its spill tier, the
 * master's side — promotion of a disk replica hit by a GET
 * (spill.promote_on_hit), and the node's answers to DEMOTE (which eviction
 * queued) and PROMOTE. See docs/spill.md. Loop thread only; no locks.
 */
#include "mtier.h"

#include <errno.h>
#include <string.h>

#include "evict.h"
#include "extent.h"
#include "kvpool.h"
#include "log.h"
#include "mchain.h"
#include "mevents.h"
#include "mlease.h"
#include "mrepl.h"

/* Room in s's memory for a promoted copy of len bytes: the segment stays
 * at or under the high watermark (1.0 when it is 0), counting extents on
 * their way out as gone like evict_check does, so a promotion never starts
 * an eviction round; and none while a round runs (memory is tight). */
static bool promote_room(const struct master *m, const struct seg *s, uint64_t len)
{
	double hw = m->conf.master.eviction_high_watermark;

	if (hw <= 0)
		hw = 1;
	return seg_allocatable(s) && s->spill_capacity && !s->evicting && len <= s->capacity &&
	       (double)(s->used - s->freeing - s->demoting + len) <= hw * (double)s->capacity;
}

/* A GET hit o, which has no memory replica (clients read memory replicas
 * first, so a disk one is then the nearest): queue a PROMOTE of a disk
 * replica, one on the reader's host first, into memory the master
 * allocates in the same node's segment. The GET's reply still names the
 * disk replica; mtier_promoted() flips it when the node has copied it. */
void mtier_promote_maybe(struct master *m, const struct master_client *c, struct obj *o)
{
	uint64_t need = ext_size(o->key_len, o->value_len);
	struct seg *pick = NULL;
	int ri = -1;
	bool tight = false;

	for (unsigned k = 0; k < o->nrep; k++) {
		const struct rep *rp = &obj_rep(o)[k];
		if (rp->tier != KVP_TIER_DISK || rp->promoting)
			return;		/* a memory replica, or a copy already on its way */
		struct seg *s = segreg_online(&m->segs, (uint32_t)rp->seg);
		if (!s || !promote_room(m, s, need)) {
			tight |= s && s->spill_capacity;
			continue;
		}
		bool local = c->host_id[0] && strcmp(s->host_id, c->host_id) == 0;
		if (!pick || local) {
			pick = s;
			ri = (int)k;
		}
		if (local)
			break;
	}
	if (!pick) {
		if (tight)
			m->promote_skipped++;
		return;
	}
	uint64_t alen, off = seg_alloc(pick, need, &alen);
	if (off == UINT64_MAX) {
		m->promote_skipped++;	/* room in total, none in one piece */
		return;
	}
	if (alen >= REP_MAX_LEN ||
	    seg_queue_promote(pick, obj_key(o), o->key_len, rep_off(&obj_rep(o)[ri]), o->generation,
			      rep_len(&obj_rep(o)[ri]), off, alen)) {
		seg_unalloc(pick, off);
		return;
	}
	obj_rep(o)[ri].promoting = 1;	/* answered in mtier_promoted() */
}

/* The disk replica's spill extent outlives the flip until every lease
 * granted while it was the object's replica has run out: the readers who
 * got it may still be reading it. Returns 0 or -ENOMEM (nothing done). */
static int retire_spill(struct master *m, struct seg *s, const struct obj *o, uint64_t soff,
			uint64_t slen)
{
	if (obj_leased(m, o))
		return seg_defer_free(s, soff, o->generation, slen,
				      m->now_ms + (uint32_t)(o->deadline - m_now32(m)));
	if (seg_queue_free(s, soff, o->generation, KVP_TIER_DISK, false))
		return -ENOMEM;
	s->spill_dropped += slen;
	return 0;
}

/* The node answered PROMOTE batch d. A copy made: the replica becomes the
 * memory extent and the spill extent is retired; a copy that failed, or of
 * an object that went or changed meanwhile, has its memory extent FREEd
 * (the node may have written part of it). A spill extent the node could
 * not read back (gone, damaged) is no replica any more. */
void mtier_promoted(struct master *m, struct seg *s, const struct dbatch *d,
		     const struct wire_hdr *h, const uint8_t *body)
{
	struct rbuf r;

	rb_init(&r, body, h->body_len);
	bool ok = h->status == 0 && rb_u32(&r) == d->n;
	for (uint32_t i = 0; i < d->n; i++) {
		const struct dent *e = d->e[i];
		int st = ok ? rb_status(&r) : h->status ? h->status : KVP_EPROTO;
		if (!rb_ok(&r))
			st = KVP_EPROTO;
		struct obj *o = objtab_find(&m->objs, e->key, e->key_len);
		int ri = -1;
		for (unsigned k = 0; o && o->generation == e->generation && k < o->nrep; k++) {
			const struct rep *rp = &obj_rep(o)[k];

			if (rp->seg == s->id && rp->tier == KVP_TIER_DISK && rp->promoting &&
			    rep_off(rp) == e->off)
				ri = (int)k;
		}
		if (ri >= 0)
			obj_rep(o)[ri].promoting = 0;
		if (st == 0 && ri >= 0 &&
		    retire_spill(m, s, o, rep_off(&obj_rep(o)[ri]), rep_len(&obj_rep(o)[ri])) == 0) {
			uint64_t sidx = obj_rep(o)[ri].sidx;
			bool had_mem = mevents_obj_has_tier(o, KVP_TIER_MEM, -1);
			bool disk_left = mevents_obj_has_tier(o, KVP_TIER_DISK, ri);
			struct rep was = obj_rep(o)[ri];
			mrepl_drop(m, o, &obj_rep(o)[ri]);
			obj_rep(o)[ri] = rep_make(s->id, KVP_TIER_MEM, e->to, e->to_len);
			obj_rep(o)[ri].sidx = sidx;
			seg_retier(s, o, (unsigned)ri, &was);
			mrepl_add(m, o, (unsigned)ri);
			mchain_changed(m, o);
			m->promotions++;
			if (!had_mem)
				mevents_obj_stored(m, o, KVP_TIER_MEM);
			if (!disk_left)
				mevents_obj_removed(m, o, KVP_TIER_DISK);
			continue;
		}
		if (seg_queue_free(s, e->to, e->generation, KVP_TIER_MEM, false))
			log_err("segment %u: out of memory queueing a FREE; %llu bytes leak until "
				"re-mount", s->id, (unsigned long long)e->to_len);
		if (st == 0 || ri < 0)
			continue;	/* went meanwhile (its spill extent FREEd then), or OOM */
		m->promote_failures++;
		log_info("segment %u: PROMOTE of '%.*s' failed (%s)", s->id, (int)e->key_len, e->key,
			 kvp_strerror(st));
		if (st == KVP_ECHECKSUM)
			m->checksum_failures++;
		if (st == KVP_ESTALE || st == KVP_ECHECKSUM)
			mobj_drop_replica(m, o, (unsigned)ri, true);
	}
}

/* The node answered DEMOTE batch d: a copy in its spill file replaces the
 * memory replica (whose extent is then FREEd); a failed demotion evicts
 * the replica instead; a copy of an object that went meanwhile is FREEd. */
void mtier_demoted(struct master *m, struct seg *s, const struct dbatch *d,
		    const struct wire_hdr *h, const uint8_t *body)
{
	struct rbuf r;

	rb_init(&r, body, h->body_len);
	bool ok = h->status == 0 && rb_u32(&r) == d->n;
	for (uint32_t i = 0; i < d->n; i++) {
		const struct dent *e = d->e[i];
		int st = ok ? rb_status(&r) : KVP_EPROTO;
		uint64_t soff = ok ? rb_u64(&r) : 0, slen = ok ? rb_u64(&r) : 0;
		if (!rb_ok(&r))
			st = KVP_EPROTO;
		bool placed = st == 0 && soff % 64 == 0 && slen % 64 == 0 && slen &&
			      slen < REP_MAX_LEN && soff < REP_MAX_OFF;
		s->demoting -= e->len;
		struct obj *o = objtab_find(&m->objs, e->key, e->key_len);
		int ri = -1;
		for (unsigned k = 0; o && o->generation == e->generation && k < o->nrep; k++) {
			const struct rep *rp = &obj_rep(o)[k];

			if (rp->seg == s->id && rp->tier == 0 && rp->demoting && rep_off(rp) == e->off)
				ri = (int)k;
		}
		if (st == 0 && (ri < 0 || !placed)) {
			seg_queue_free(s, soff, e->generation, KVP_TIER_DISK, true);
			s->spill_dropped += slen;
		}
		if (ri < 0)
			continue;	/* removed (its memory extent FREEd then) */
		obj_rep(o)[ri].demoting = 0;
		if (placed && obj_leased(m, o)) {
			/* A reader took a lease on the memory replica while it
			 * was copied: it stays; the copy goes (a later round
			 * may demote the object again). */
			seg_queue_free(s, soff, e->generation, KVP_TIER_DISK, true);
			s->spill_dropped += slen;
			mchain_changed(m, o);
		} else if (placed) {
			uint64_t sidx = obj_rep(o)[ri].sidx;
			bool had_disk = mevents_obj_has_tier(o, KVP_TIER_DISK, -1);
			bool mem_left = mevents_obj_has_tier(o, KVP_TIER_MEM, ri);
			if (!had_disk)
				mevents_obj_stored(m, o, KVP_TIER_DISK);
			if (!mem_left)
				mevents_obj_removed(m, o, KVP_TIER_MEM);
			struct rep was = obj_rep(o)[ri];
			mrepl_drop(m, o, &obj_rep(o)[ri]);
			obj_rep(o)[ri] = rep_make(s->id, KVP_TIER_DISK, soff, slen);
			obj_rep(o)[ri].sidx = sidx;
			seg_retier(s, o, (unsigned)ri, &was);
			mrepl_add(m, o, (unsigned)ri);
			mchain_changed(m, o);
			seg_queue_free(s, e->off, e->generation, 0, false);
			s->spill_added += slen;
			m->demotions++;
		} else {
			if (st != KVP_ENOSPC && st != KVP_ENOTSUP)
				log_info("segment %u: DEMOTE of '%.*s' failed (%s); evicting it", s->id,
					 (int)e->key_len, e->key, kvp_strerror(st));
			evict_drop(m, o, (unsigned)ri);
		}
	}
	evict_check(m, s);
}


/* mnode: the master's side of its nodes — segment lifecycle (MOUNT,
 * UNMOUNT, HEARTBEAT, liveness), recovery (REPORT adopts the extents a
 * node found in its segment), SEGMENTS, the FREE / DEMOTE / PROMOTE
 * requests sent to the nodes and their answers. See docs/master.md
 * "Recovery and liveness". Loop thread only; no locks.
 */
#include "mnode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "evict.h"
#include "extent.h"
#include "kvpool.h"
#include "log.h"
#include "mbatch.h"
#include "mevents.h"
#include "mhold.h"
#include "mpolicy.h"
#include "mrecover.h"
#include "mrepl.h"
#include "mtier.h"
#include "segmap.h"

#define RDMA_INFO_MAX 4096

/* Takes s offline with every replica in it (no FREE: see mobj_drop_seg). */
static void seg_drop(struct master *m, struct seg *s, const char *why)
{
	log_notice("segment %u (%s, %s): dropped (%s), %zu replicas gone", s->id, s->name,
		   s->shm_path, why, s->nobjs);
	mrepl_segdrop(m, s);
	m->repl_mute = true;
	mobj_drop_seg(m, s);
	m->repl_mute = false;
	segreg_offline(&m->segs, s);
}

/* ---- requests to the nodes ---- */

/* Starts a request frame to s's node in the scratch buffer: the segment id
 * and the item count; returns the frame's start for req_send. */
static size_t req_begin(struct master *m, const struct seg *s, uint32_t n)
{
	struct wbuf *w = &m->scratch;

	wb_reset(w);
	size_t st = wire_begin(w);
	wb_u32(w, s->id);
	wb_u32(w, n);
	return st;
}

/* Finishes and sends it. False when it could not go: the connection is
 * closing, and the batch stays in flight (FREEs become the reject set at
 * re-mount). */
static bool req_send(struct master *m, struct seg *s, size_t st, uint16_t op, uint64_t reqid)
{
	struct wbuf *w = &m->scratch;

	wire_finish(w, st, op, 0, 0, reqid, 0);
	return !w->oom && !s->client->send(s->client->arg, w->p, w->len);
}

void mnode_flush(struct master *m)
{
	uint32_t max = m->conf.cluster.max_batch > 0 ? (uint32_t)m->conf.cluster.max_batch : 1024;
	struct wbuf *w = &m->scratch;

	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (!s || !s->online || !s->client || !(s->fq.n || s->dq.n || s->pq.n))
			continue;
		/* its node scans after the MOUNT: a FREE answered before a
		 * REPORT of the same extent would let that REPORT bring back
		 * what was removed */
		if (s->map_mount && !s->reported)
			continue;
		struct fbatch *b;
		/* s->client is checked each time: a send may end the connection */
		while (s->client && (b = seg_take_frees(s, ++m->next_reqid, max))) {
			size_t st = req_begin(m, s, b->n);
			for (uint32_t k = 0; k < b->n; k++) {
				wb_u8(w, b->e[k].tier);
				wb_u64(w, b->e[k].off);
				wb_u64(w, b->e[k].generation);
			}
			if (!req_send(m, s, st, WIRE_OP_FREE, b->reqid))
				break;
		}
		struct dbatch *d;
		while (s->client && (d = seg_take_demotes(s, ++m->next_reqid, max))) {
			size_t st = req_begin(m, s, d->n);
			for (uint32_t k = 0; k < d->n; k++) {
				wb_u64(w, d->e[k]->off);
				wb_u64(w, d->e[k]->generation);
			}
			if (!req_send(m, s, st, WIRE_OP_DEMOTE, d->reqid))
				break;
		}
		/* After the FREEs: the space a PROMOTE fills was allocated only
		 * once the FREE that held it had been acknowledged. */
		while (s->client && (d = seg_take_promotes(s, ++m->next_reqid, max))) {
			size_t st = req_begin(m, s, d->n);
			for (uint32_t k = 0; k < d->n; k++) {
				wb_u64(w, d->e[k]->off);
				wb_u64(w, d->e[k]->generation);
				wb_u64(w, d->e[k]->to);
				wb_u64(w, d->e[k]->to_len);
			}
			if (!req_send(m, s, st, WIRE_OP_PROMOTE, d->reqid))
				break;
		}
	}
}

/* ---- node requests ---- */

/* A MOUNT string: fits, printable ASCII only (it ends up in logs, metric
 * labels and client configuration). */
static bool copy_str(char *dst, size_t cap, const uint8_t *p, size_t n)
{
	if (n >= cap)
		return false;
	for (size_t i = 0; i < n; i++)
		if (p[i] < 0x20 || p[i] >= 0x7f)
			return false;
	memcpy(dst, p, n);
	dst[n] = '\0';
	return true;
}

int mnode_seg_decode(struct rbuf *r, struct seg *id, uint8_t **rdma, size_t *rdma_len)
{
	size_t nl, hl, pl, el, rl;
	const uint8_t *name = rb_str(r, &nl), *host = rb_str(r, &hl), *path = rb_str(r, &pl);

	*rdma = NULL;
	*rdma_len = 0;
	memset(id, 0, sizeof(*id));
	id->shm_dev = rb_u64(r);
	id->shm_ino = rb_u64(r);
	id->size = rb_u64(r);
	id->uuid = rb_u64(r);
	id->data_off = rb_u64(r);
	id->align = rb_u32(r);
	const uint8_t *ep = rb_str(r, &el);
	const uint8_t *blob = rb_blob(r, &rl);
	id->spill_capacity = rb_u64(r);
	id->numa_node = rb_i32(r);
	if (!rb_ok(r))
		return KVP_EPROTO;
	if (!copy_str(id->name, sizeof(id->name), name, nl) ||
	    !copy_str(id->host_id, sizeof(id->host_id), host, hl) ||
	    !copy_str(id->shm_path, sizeof(id->shm_path), path, pl) ||
	    !copy_str(id->endpoint, sizeof(id->endpoint), ep, el) || rl > RDMA_INFO_MAX)
		return KVP_EINVAL;
	if (id->data_off >= id->size || id->align < 64 || (id->align & (id->align - 1)) ||
	    id->data_off % id->align || id->size > REP_MAX_OFF)
		return KVP_EINVAL;
	if (rl) {
		if (!(*rdma = malloc(rl)))
			return KVP_ENOMEM;
		memcpy(*rdma, blob, rl);
		*rdma_len = rl;
	}
	return 0;
}

void mnode_seg_encode(struct wbuf *w, const struct seg *s)
{
	wb_cstr(w, s->name);
	wb_cstr(w, s->host_id);
	wb_cstr(w, s->shm_path);
	wb_u64(w, s->shm_dev);
	wb_u64(w, s->shm_ino);
	wb_u64(w, s->size);
	wb_u64(w, s->uuid);
	wb_u64(w, s->data_off);
	wb_u32(w, s->align);
	wb_cstr(w, s->endpoint);
	wb_blob(w, s->rdma_info, s->rdma_len);
	wb_u64(w, s->spill_capacity);
	wb_i32(w, s->numa_node);
}

void mnode_seg_set(struct seg *s, const struct seg *id, uint8_t *rdma, size_t rdma_len)
{
	memcpy(s->name, id->name, sizeof(s->name));
	memcpy(s->host_id, id->host_id, sizeof(s->host_id));
	memcpy(s->shm_path, id->shm_path, sizeof(s->shm_path));
	memcpy(s->endpoint, id->endpoint, sizeof(s->endpoint));
	s->shm_dev = id->shm_dev;
	s->shm_ino = id->shm_ino;
	s->size = id->size;
	s->uuid = id->uuid;
	s->data_off = id->data_off;
	s->align = id->align;
	s->spill_capacity = id->spill_capacity;
	s->numa_node = id->numa_node;
	free(s->rdma_info);
	s->rdma_info = rdma;
	s->rdma_len = (uint32_t)rdma_len;
}

/* A warm segment whose MOUNT carried the commit map: holds around what
 * the table does not know, then puts go in at once (mhold.h). The tags of
 * the table's memory extents come from s->ptag, kept as replicas come and
 * go: a walk of the replicas here cost over a second at 3M objects, all of
 * it before the MOUNT's answer and the first put (docs/ha.md "Failover at
 * size"). Past the map's end every byte reads 0: any extent there is sure
 * of nothing, and nothing there is held unless a hold runs on. */
static void mount_hold(struct master *m, struct seg *s, const uint8_t *map, size_t map_len)
{
	uint64_t end = s->data_off + (s->size - s->data_off) / s->align * s->align;
	size_t ntags = map_len < s->nptag ? map_len : s->nptag;
	int rc = 0;

	if (!s->ptag)	/* alignment below 4 KiB, over 1 TiB, or no memory at its first MOUNT */
		rc = s->align < 1u << SEG_MAP_SHIFT ? -EINVAL
		     : s->size > SEGREG_PTAG_MAX    ? -EFBIG
						    : -ENOMEM;
	if (!rc)
		rc = mhold_plan(&s->hold, s->alloc, s->ptag, ntags, map, map_len, s->data_off, end);
	if (rc) {
		mhold_release(&s->hold, s->alloc);
		log_notice("segment %u: no puts before its REPORTs (commit map: %s)", s->id,
			   rc == -EINVAL ? "alignment below 4 KiB"
			   : rc == -EFBIG ? "no page tags for a segment over 1 TiB"
					  : strerror(-rc));
		return;
	}
	s->used += s->hold.bytes;
	s->held = true;
	m->hold_mounts++;
	log_notice("segment %u: commit map of %zu pages: %zu holds, %llu bytes, until its REPORTs; "
		   "puts go in now", s->id, map_len, s->hold.n,
		   (unsigned long long)s->hold.bytes);
	/* No hold: every extent the map shows committed is one the table
	 * knows, with its generation's tag, so a key the table lacks is not
	 * in this segment: the recovery window need not wait for its
	 * REPORTs (gets of unknown keys, puts of new ones). */
	if (!s->hold.n)
		mrecover_reported(m, s);
}

/* The node's REPORTs are in: what is still held is free. */
static void hold_release(struct seg *s)
{
	s->used -= s->hold.bytes;
	mhold_release(&s->hold, s->alloc);
	s->held = false;
}

int mnode_mount(struct master *m, struct master_client *c, struct rbuf *r, struct wbuf *b)
{
	struct seg id;
	uint8_t *rcopy;
	size_t rl, map_len = 0;
	const uint8_t *map = NULL;
	int err = mnode_seg_decode(r, &id, &rcopy, &rl);

	if (err)
		return err;
	if (r->end - r->p >= 4) {	/* optional: the commit map (wire.h) */
		size_t ml;
		const uint8_t *mp = rb_blob(r, &ml);
		if (!rb_ok(r) || ml > (id.size >> SEG_MAP_SHIFT) + 1) {
			free(rcopy);
			return KVP_EPROTO;
		}
		map = mp;
		map_len = ml;
	}

	uint64_t t0 = clock_now_ns();
	struct seg *s = segreg_by_uuid(&m->segs, id.uuid);
	/* A segment of a warm table (mrepl.h) keeps its replicas: the node's
	 * REPORTs confirm them, its first HEARTBEAT drops what they did not. */
	bool warm = s && s->online && s->warm && s->size == id.size &&
		    s->data_off == id.data_off && s->align == id.align &&
		    mrepl_recon_begin(m, s) == 0;

	if (s && s->online && (s->held || s->hold.n))
		hold_release(s);	/* a second MOUNT before the REPORTs */
	if (warm) {
		log_notice("segment %u: re-mounted into the warm table, %zu replicas to confirm",
			   s->id, s->recon_cap);
	} else if (s && s->online) {
		/* Node reconnect or restart: rebuild from its REPORTs. */
		seg_drop(m, s, "re-mounted");
	} else if (!s) {
		if (m->segs.n > REP_MAX_SEG) {
			free(rcopy);
			return KVP_ELIMIT;	/* segment ids are never reused */
		}
		s = segreg_add(&m->segs);
		if (!s) {
			free(rcopy);
			return KVP_ENOMEM;
		}
	}
	mnode_seg_set(s, &id, rcopy, rl);
	s->spill_used = 0;
	s->node_used = 0;
	if (seg_new_secret(s))
		return KVP_EINTERNAL;
	int rc = warm ? 0 : segreg_online_start(&m->segs, s);
	if (rc)
		return rc == -EINVAL ? KVP_EINVAL : KVP_ENOMEM;
	s->client = c;
	s->last_seen_ms = m->now_ms;
	s->reported = false;		/* until its first HEARTBEAT */
	s->map_mount = map != NULL;
	if (warm && map)
		mount_hold(m, s, map, map_len);
	log_notice("segment %u mounted: node %s host %s %s, %llu bytes, align %u, endpoint %s%s",
		   s->id, s->name, s->host_id, s->shm_path, (unsigned long long)s->capacity,
		   s->align, s->endpoint, s->reject.n ? " (re-mount)" : "");
	mrepl_seg(m, s);
	wb_u32(b, s->id);
	wb_blob(b, s->secret, sizeof(s->secret));
	if (warm)	/* the failover's share of the loop (issue #36) */
		log_info("segment %u: warm MOUNT handled in %.3f ms", s->id,
			 (double)(clock_now_ns() - t0) / 1e6);
	return 0;
}

/* The segment named in a node request, which must be this connection's. */
static struct seg *own_seg(struct master *m, struct master_client *c, uint32_t id)
{
	struct seg *s = segreg_online(&m->segs, id);

	return s && s->client == c ? s : NULL;
}

/* Rejects a reported extent: its space is taken and FREEd (released on the
 * ack) when it is free; if it overlaps a live allocation it is not the
 * node's any more and is left alone. */
static void report_reject(struct seg *s, uint8_t tier, uint64_t off, uint64_t alloc_len,
			  uint64_t generation)
{
	if (tier != 0) {
		seg_queue_free(s, off, generation, tier, true);
		return;
	}
	if (seg_reserve(s, off, alloc_len) == 0)
		seg_queue_free(s, off, generation, 0, false);
}

static bool has_replica_on(const struct obj *o, uint32_t seg)
{
	for (unsigned k = 0; k < o->nrep; k++)
		if ((uint32_t)obj_rep(o)[k].seg == seg)
			return true;
	return false;
}

/* Takes a reported extent out of the holds so that it can be reserved. */
static int hold_carve(struct seg *s, uint64_t off, uint64_t len)
{
	uint64_t held = s->hold.bytes;
	int rc = mhold_carve(&s->hold, s->alloc, off, len);

	s->used -= held - s->hold.bytes;
	if (rc)
		s->held = false;	/* no more puts before the REPORTs */
	return rc;
}

/* Adopts one reported extent; true if adopted. */
static bool report_one(struct master *m, struct seg *s, const uint8_t *key, size_t klen,
		       uint8_t tier, uint64_t off, uint64_t alloc_len, uint64_t value_len,
		       uint64_t csum, uint64_t gen, uint64_t put_ns)
{
	if (gen > m->gen)
		m->gen = gen;
	/* Offsets and lengths must fit struct rep (multiples of 64). */
	bool placed = off % (1u << REP_UNIT_SHIFT) == 0 && alloc_len % (1u << REP_UNIT_SHIFT) == 0 &&
		      alloc_len && alloc_len < REP_MAX_LEN && off < REP_MAX_OFF &&
		      (tier != 0 || (alloc_len <= s->capacity && off % s->align == 0));
	if (!wire_key_ok(key, klen) || tier > KVP_TIER_DISK || !value_len ||
	    value_len > m->conf.cluster.max_object_size ||
	    alloc_len < ext_size((uint32_t)klen, value_len) || !placed) {
		if (placed)
			report_reject(s, tier, off, alloc_len, gen);
		return false;
	}
	if (s->recon && mrepl_recon_confirm(m, s, key, klen, tier, off, gen))
		return true;	/* the warm table has it */
	if (seg_rejected(s, tier, off, gen)) {
		report_reject(s, tier, off, alloc_len, gen);
		return false;
	}
	/* Reconciling a warm segment: the node's extent is where it says; a
	 * replica of the table across it that the node did not report is a
	 * ghost (before the lookup: it may be this key's). */
	if (s->recon && tier == 0)
		mrepl_recon_clear(m, s, off, alloc_len);
	/* an extent the table did not know, in space held for it */
	if (s->held && tier == 0)
		hold_carve(s, off, alloc_len);
	struct obj *o = objtab_find(&m->objs, key, klen);
	if (o) {
		bool same = obj_complete(o) && o->checksum == csum && o->value_len == value_len &&
			    o->generation == gen;
		if (same && !has_replica_on(o, s->id) && o->nrep < KVP_MAX_REPLICAS) {
			if (tier == 0 && seg_reserve(s, off, alloc_len))
				return false;
			bool known = mevents_obj_has_tier(o, tier, -1);
			if (mobj_attach(m, s, &o, tier, off, alloc_len)) {
				/* reserved already: FREE it (released on the ack) */
				seg_queue_free(s, off, gen, tier, tier != 0);
				return false;
			}
			if (!known)
				mevents_obj_stored(m, o, tier);
			return true;
		}
		/* A different value: the higher generation wins. */
		if (same || !obj_complete(o) || o->generation >= gen) {
			report_reject(s, tier, off, alloc_len, gen);
			return false;
		}
		if (tier == 0 && seg_reserve(s, off, alloc_len))
			return false;
		mobj_destroy(m, o, true);
	} else if (tier == 0 && seg_reserve(s, off, alloc_len)) {
		return false;	/* overlaps an allocation made since the mount */
	}
	o = mobj_new_complete(m, key, klen, value_len, gen, csum, put_ns);
	if (!o)
		goto out_unreserve;
	if (mobj_attach(m, s, &o, tier, off, alloc_len)) {
		mobj_unlink(m, o);
		goto out_unreserve;
	}
	mevents_obj_stored(m, o, tier);	/* adopted: a restarted master learns it */
	return true;

out_unreserve:
	if (tier == 0)
		seg_queue_free(s, off, gen, 0, false);
	return false;
}

int mnode_report(struct master *m, struct master_client *c, struct rbuf *r,
		 struct wbuf *b, struct op_stats *st)
{
	uint32_t sid = rb_u32(r), n;
	int rc = mbatch_shape(m, r, "s1888888", &n);

	if (rc)
		return rc;
	struct seg *s = own_seg(m, c, sid);
	if (!s)
		return KVP_ENOSEG;
	rb_u32(r);
	uint32_t adopted = 0, rejected = 0;
	for (uint32_t i = 0; i < n; i++) {
		size_t klen;
		const uint8_t *key = rb_str(r, &klen);
		uint8_t tier = rb_u8(r);
		uint64_t off = rb_u64(r), alen = rb_u64(r), vlen = rb_u64(r);
		uint64_t csum = rb_u64(r), gen = rb_u64(r), pt = rb_u64(r);
		if (report_one(m, s, key, klen, tier, off, alen, vlen, csum, gen, pt)) {
			adopted++;
			mbatch_item(st, 0);
		} else {
			rejected++;
			mbatch_item(st, KVP_ESTALE);
		}
	}
	evict_check(m, s);
	wb_u32(b, adopted);
	wb_u32(b, rejected);
	return 0;
}

int mnode_unmount(struct master *m, struct master_client *c, struct rbuf *r)
{
	uint32_t sid = rb_u32(r);
	uint8_t drain = rb_u8(r);

	if (!rb_ok(r))
		return KVP_EPROTO;
	struct seg *s = own_seg(m, c, sid);
	if (!s)
		return KVP_ENOSEG;
	if (drain) {
		s->draining = true;
		log_notice("segment %u (%s): draining", s->id, s->name);
	} else {
		seg_drop(m, s, "unmounted");
	}
	return 0;
}

int mnode_heartbeat(struct master *m, struct master_client *c, struct rbuf *r)
{
	uint32_t sid = rb_u32(r);
	uint64_t used = rb_u64(r), spill = rb_u64(r);

	if (!rb_ok(r))
		return KVP_EPROTO;
	struct seg *s = own_seg(m, c, sid);
	if (!s)
		return KVP_ENOSEG;	/* unknown to this master: the node re-mounts */
	s->node_used = used;
	s->spill_used = spill;
	if (r->end - r->p >= 16) {	/* optional (wire.h) */
		s->tcp_read_bytes = rb_u64(r);
		s->tcp_written_bytes = rb_u64(r);
	}
	s->spill_added = s->spill_dropped = 0;
	s->last_seen_ms = m->now_ms;
	if (s->recon)
		mrepl_recon_finish(m, s);
	if (s->held || s->hold.n)
		hold_release(s);
	s->reported = true;		/* its REPORTs came before, on this connection */
	mrecover_reported(m, s);
	evict_check(m, s);		/* the spill tier may have filled */
	return 0;
}

static void put_segment(struct wbuf *b, const struct seg *s)
{
	wb_u32(b, s->id);
	wb_cstr(b, s->name);
	wb_cstr(b, s->host_id);
	wb_cstr(b, s->shm_path);
	wb_u64(b, s->shm_dev);
	wb_u64(b, s->shm_ino);
	wb_u64(b, s->size);
	wb_u64(b, s->uuid);
	wb_cstr(b, s->endpoint);
	wb_blob(b, s->rdma_info, s->rdma_len);
	wb_u8(b, s->draining);
	wb_u64(b, s->used);
	wb_u64(b, s->nobjs);
	wb_u64(b, s->spill_capacity);
	wb_u64(b, seg_spill_used(s));
	wb_i32(b, s->numa_node);
}

int mnode_segments(struct master *m, struct wbuf *b)
{
	wb_u32(b, m->segs.online);
	for (size_t i = 1; i < m->segs.n; i++)
		if (m->segs.v[i] && m->segs.v[i]->online)
			put_segment(b, m->segs.v[i]);
	return 0;
}

void mnode_reply(struct master *m, struct master_client *c, const struct wire_hdr *h,
		 const uint8_t *body)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (!s || !s->online || s->client != c)
			continue;
		if (h->opcode == WIRE_OP_FREE && seg_ack_frees(s, h->reqid) >= 0) {
			if (h->status)
				log_warn("segment %u: node answered FREE with %s", s->id,
					 kvp_strerror(h->status));
			break;
		}
		struct dbatch *d;
		if (h->opcode == WIRE_OP_DEMOTE && (d = seg_answered_demotes(s, h->reqid))) {
			mtier_demoted(m, s, d, h, body);
			seg_dbatch_free(d);
			break;
		}
		if (h->opcode == WIRE_OP_PROMOTE && (d = seg_answered_promotes(s, h->reqid))) {
			mtier_promoted(m, s, d, h, body);
			seg_dbatch_free(d);
			break;
		}
	}
}

/* ---- liveness ---- */

/* A node is gone once silent for min(node_ttl, client_ttl): every frame
 * counts, it heartbeats each node.heartbeat_interval (1 s by default), so
 * with the defaults its segments go at most 3 s + one tick (50 ms) after
 * its last heartbeat, whether its connection is open or closed. */
static void check_nodes(struct master *m)
{
	uint64_t ttl = m->conf.master.node_ttl < m->conf.master.client_ttl ?
		       m->conf.master.node_ttl : m->conf.master.client_ttl;

	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (!s || !s->online)
			continue;
		uint64_t seen = s->client ? s->client->last_seen_ms : s->last_seen_ms;
		/* a warm re-mount's first REPORT gathers and sorts the
		 * table's replicas and the node encodes its REPORTs, a few
		 * seconds at 3M on a busy host: 10 ms more per thousand
		 * replicas to confirm */
		if (m->now_ms > seen + ttl + (s->recon ? s->recon_cap / 100 : 0)) {
			m->node_expiries++;
			seg_drop(m, s, "node silent for node_ttl");
		}
	}
}

/* FREEs the spill extents of promoted objects whose readers' leases have
 * run out (sent by master_step's flush). */
static void free_due_spill(struct master *m)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (s && s->online && s->lfree.n)
			seg_free_due(s, m->now_ms);
	}
}

void mnode_tick(struct master *m)
{
	free_due_spill(m);
	check_nodes(m);
}

void mnode_client_gone(struct master *m, struct master_client *c)
{
	/* A segment whose node UNMOUNTed it (drain) goes now: the node has
	 * finished its transfers and left. The others stay mounted for
	 * node_ttl: a node that reconnects re-mounts them; FREEs wait for
	 * that. */
	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (!s || s->client != c)
			continue;
		s->client = NULL;
		s->last_seen_ms = c->last_seen_ms;
		if (s->online && s->draining)
			seg_drop(m, s, "unmounted, connection closed");
		else
			log_notice("segment %u (%s): node connection closed", s->id, s->name);
	}
}

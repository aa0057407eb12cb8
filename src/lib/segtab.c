/* segtab: the cached segment table and the node list of a handle (see
 * segtab.h). Refreshes run with kvp->refresh_lock held; kvp->lock is taken
 * only to read or swap the table, never across the SEGMENTS call or the
 * mapping of new segments.
 */
#include <stdlib.h>
#include <string.h>

#include "client_i.h"
#include "kvpool.h"
#include "mcall.h"
#include "rdma.h"
#include "segtab.h"
#include "xp_rdma.h"
#include "xport.h"

static struct client_node *node_find_locked(struct kvp *kvp, const char *endpoint)
{
	struct client_node **pp = &kvp->nodes;

	for (; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->endpoint, endpoint))
			return *pp;
	struct client_node *n = calloc(1, sizeof(*n));

	if (!n)
		return NULL;
	snprintf(n->endpoint, sizeof(n->endpoint), "%s", endpoint);
	n->idx = kvp->nnodes++;
	*pp = n;
	return n;
}

static void seg_free(struct client_seg *s)
{
	xp_local_detach(s);
	rdma_info_free(s->rdma);
	free(s);
}

void segtab_put(struct kvp *kvp, struct client_seg *seg)
{
	bool last;

	if (!seg)
		return;
	pthread_mutex_lock(&kvp->lock);
	last = --seg->refs == 0;
	pthread_mutex_unlock(&kvp->lock);
	if (last)
		seg_free(seg);
}

void segtab_parsed_free(struct client_seg **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		seg_free(v[i]);
	free(v);
}

static int seg_cmp(const void *a, const void *b)
{
	const struct client_seg *x = *(struct client_seg *const *)a;
	const struct client_seg *y = *(struct client_seg *const *)b;

	return x->id < y->id ? -1 : x->id > y->id;
}

int segtab_parse(const struct mcall *m, struct client_seg ***out, size_t *nout)
{
	struct client_seg **v;
	struct rbuf r;
	uint32_t n;

	if (m->status)
		return m->status;
	rb_init(&r, m->rep, m->rep_len);
	n = rb_count(&r, 85);
	if (!rb_ok(&r))
		return KVP_EPROTO;
	v = calloc(n ? n : 1, sizeof(*v));
	if (!v)
		return KVP_ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct client_seg *s = calloc(1, sizeof(*s));
		size_t bl;

		if (!s) {
			segtab_parsed_free(v, i);
			return KVP_ENOMEM;
		}
		v[i] = s;
		s->id = rb_u32(&r);
		rb_cstr(&r, s->node_name, sizeof(s->node_name));
		rb_cstr(&r, s->host_id, sizeof(s->host_id));
		rb_cstr(&r, s->shm_path, sizeof(s->shm_path));
		s->shm_dev = rb_u64(&r);
		s->shm_ino = rb_u64(&r);
		s->seg_size = rb_u64(&r);
		s->seg_uuid = rb_u64(&r);
		rb_cstr(&r, s->endpoint, sizeof(s->endpoint));
		const uint8_t *ri = rb_blob(&r, &bl);

		if (ri && bl)
			xp_rdma_seg_info(ri, bl, &s->rdma, &s->rdma_hash);
		s->draining = rb_u8(&r);
		s->used = rb_u64(&r);
		s->objects = rb_u64(&r);
		s->spill_capacity = rb_u64(&r);
		s->spill_used = rb_u64(&r);
		s->numa_node = rb_i32(&r);
	}
	if (!rb_ok(&r)) {
		segtab_parsed_free(v, n);
		return KVP_EPROTO;
	}
	*out = v;
	*nout = n;
	return 0;
}

static bool seg_same(const struct client_seg *a, const struct client_seg *b)
{
	return a->id == b->id && a->seg_uuid == b->seg_uuid && a->shm_dev == b->shm_dev &&
	       a->shm_ino == b->shm_ino && a->seg_size == b->seg_size &&
	       !strcmp(a->shm_path, b->shm_path) && !strcmp(a->host_id, b->host_id) &&
	       !strcmp(a->endpoint, b->endpoint) && a->rdma_hash == b->rdma_hash;
}

struct client_seg *segtab_find_locked(struct kvp *kvp, uint32_t id)
{
	size_t lo = 0, hi = kvp->nsegs;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (kvp->segs[mid]->id == id)
			return kvp->segs[mid];
		if (kvp->segs[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

int segtab_refresh(struct kvp *kvp, uint64_t seen_gen, uint64_t deadline)
{
	struct client_seg **v = NULL, **old = NULL;
	size_t n = 0, nold = 0;
	struct mcall m = { .op = WIRE_OP_SEGMENTS };
	bool *fresh = NULL;
	int rc;

	pthread_mutex_lock(&kvp->refresh_lock);
	pthread_mutex_lock(&kvp->lock);
	if (kvp->segs_valid && kvp->segs_gen != seen_gen) {
		pthread_mutex_unlock(&kvp->lock);
		pthread_mutex_unlock(&kvp->refresh_lock);
		return 0;
	}
	pthread_mutex_unlock(&kvp->lock);

	wb_init(&m.body);
	rc = mc_call1(kvp, &m, deadline);
	if (rc == 0)
		rc = segtab_parse(&m, &v, &n);
	wb_free(&m.body);
	free(m.rep);
	if (rc < 0)
		goto out_unlock;
	fresh = calloc(n ? n : 1, sizeof(*fresh));
	if (!fresh) {
		segtab_parsed_free(v, n);
		rc = KVP_ENOMEM;
		goto out_unlock;
	}
	qsort(v, n, sizeof(*v), seg_cmp);

	pthread_mutex_lock(&kvp->lock);
	for (size_t i = 0; i < n; i++) {
		struct client_seg *o = segtab_find_locked(kvp, v[i]->id);

		if (o && seg_same(o, v[i])) {
			seg_free(v[i]);
			v[i] = o;
			o->refs++;
			continue;
		}
		v[i]->node = node_find_locked(kvp, v[i]->endpoint);
		v[i]->refs = 1;
		fresh[i] = true;
	}
	pthread_mutex_unlock(&kvp->lock);

	/* Mapping takes syscalls: outside the lock, only for new entries. */
	for (size_t i = 0; i < n; i++)
		if (fresh[i])
			xp_local_attach(kvp, v[i]);

	pthread_mutex_lock(&kvp->lock);
	old = kvp->segs;
	nold = kvp->nsegs;
	kvp->segs = v;
	kvp->nsegs = n;
	kvp->segs_valid = true;
	kvp->segs_gen++;
	pthread_mutex_unlock(&kvp->lock);
	for (size_t i = 0; i < nold; i++)
		segtab_put(kvp, old[i]);
	free(old);
	client_count(kvp, segment_refreshes, 1);
	/* An entry that failed to find its node would be useless for TCP
	 * but still fine for local; nothing more to do. */
out_unlock:
	free(fresh);
	pthread_mutex_unlock(&kvp->refresh_lock);
	return rc;
}

struct client_seg *segtab_get(struct kvp *kvp, uint32_t id, bool *refreshed, uint64_t deadline)
{
	/* Bounded: other threads may invalidate the table again meanwhile. */
	for (int tries = 0; tries < 4; tries++) {
		struct client_seg *s = NULL;
		uint64_t gen;
		bool valid;

		pthread_mutex_lock(&kvp->lock);
		valid = kvp->segs_valid;
		gen = kvp->segs_gen;
		if (valid) {
			s = segtab_find_locked(kvp, id);
			if (s)
				s->refs++;
		}
		pthread_mutex_unlock(&kvp->lock);
		if (s)
			return s;
		if (valid && *refreshed)
			return NULL;
		if (!valid || !*refreshed) {
			*refreshed = true;
			if (segtab_refresh(kvp, gen, deadline) < 0)
				return NULL;
		}
	}
	return NULL;
}

int segtab_by_name(struct kvp *kvp, const char *node, uint32_t *ids, size_t max,
		   uint64_t deadline)
{
	for (int tries = 0; tries < 2; tries++) {
		size_t n = 0;
		uint64_t gen;
		bool valid;

		pthread_mutex_lock(&kvp->lock);
		valid = kvp->segs_valid;
		gen = kvp->segs_gen;
		for (size_t i = 0; valid && i < kvp->nsegs; i++) {
			const struct client_seg *s = kvp->segs[i];

			if (strcmp(s->node_name, node) != 0)
				continue;
			if (n < max)
				ids[n] = s->id;
			n++;
		}
		pthread_mutex_unlock(&kvp->lock);
		if (n || tries)
			return n > max ? (int)max : (int)n;
		/* Unknown here: the node may have mounted since the last load. */
		int rc = segtab_refresh(kvp, gen, deadline);
		if (rc < 0)
			return rc;
	}
	return 0;
}

struct client_seg *segtab_peek(struct kvp *kvp, uint32_t id)
{
	struct client_seg *s = NULL;

	pthread_mutex_lock(&kvp->lock);
	if (kvp->segs_valid && (s = segtab_find_locked(kvp, id)))
		s->refs++;
	pthread_mutex_unlock(&kvp->lock);
	return s;
}

struct client_seg *segtab_get_uuid(struct kvp *kvp, uint64_t uuid)
{
	struct client_seg *s = NULL;

	pthread_mutex_lock(&kvp->lock);
	for (size_t i = 0; i < kvp->nsegs; i++)
		if (kvp->segs[i]->seg_uuid == uuid) {
			s = kvp->segs[i];
			s->refs++;
			break;
		}
	pthread_mutex_unlock(&kvp->lock);
	return s;
}

void segtab_invalidate(struct kvp *kvp)
{
	pthread_mutex_lock(&kvp->lock);
	kvp->segs_valid = false;
	pthread_mutex_unlock(&kvp->lock);
}

bool segtab_have_local_rw(struct kvp *kvp)
{
	bool yes = false;

	if (kvp->proto == CLIENT_TCP || kvp->proto == CLIENT_RDMA)
		return false;
	pthread_mutex_lock(&kvp->lock);
	for (size_t i = 0; i < kvp->nsegs && !yes; i++)
		yes = kvp->segs[i]->local_rw;
	pthread_mutex_unlock(&kvp->lock);
	return yes;
}

void segtab_close(struct kvp *kvp)
{
	for (size_t i = 0; i < kvp->nsegs; i++)
		segtab_put(kvp, kvp->segs[i]);
	free(kvp->segs);
	while (kvp->nodes) {
		struct client_node *n = kvp->nodes;

		kvp->nodes = n->next;
		free(n);
	}
}

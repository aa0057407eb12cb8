/* segreg: segments, their allocators, replica arrays, FREE, DEMOTE and
 * PROMOTE queues and lease-held spill frees; see segreg.h. */
#include "segreg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "alloc.h"
#include "kvpool.h"
#include "segmap.h"

int segreg_init(struct segreg *r)
{
	memset(r, 0, sizeof(*r));
	r->n = 1;		/* ids start at 1: 0 means "none" on the wire */
	r->v = calloc(1, sizeof(*r->v));
	return r->v ? 0 : -ENOMEM;
}

static int fent_cmp(const void *a, const void *b);

static void fvec_free(struct fvec *f)
{
	free(f->v);
	memset(f, 0, sizeof(*f));
}

static int fvec_push(struct fvec *f, const struct fent *e)
{
	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 16;
		struct fent *v = realloc(f->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		f->v = v;
		f->cap = cap;
	}
	f->v[f->n++] = *e;
	return 0;
}

static void seg_free_batches(struct seg *s)
{
	while (s->inflight) {
		struct fbatch *b = s->inflight;
		s->inflight = b->next;
		free(b);
	}
}

void seg_dbatch_free(struct dbatch *b)
{
	for (uint32_t i = 0; i < b->n; i++)
		free(b->e[i]);
	free(b);
}

static void dq_clear(struct dvec *q, struct dbatch **inflight)
{
	for (size_t i = 0; i < q->n; i++)
		free(q->v[i]);
	q->n = 0;
	while (*inflight) {
		struct dbatch *b = *inflight;
		*inflight = b->next;
		seg_dbatch_free(b);
	}
}

/* Forgets every DEMOTE and PROMOTE, queued or sent (the segment goes
 * offline: its replicas are dropped; a copy the node made is an orphan it
 * re-reports). */
static void seg_free_demotes(struct seg *s)
{
	dq_clear(&s->dq, &s->dinflight);
	dq_clear(&s->pq, &s->pinflight);
	s->demoting = 0;
}

void segreg_destroy(struct segreg *r)
{
	for (size_t i = 1; i < r->n; i++) {
		struct seg *s = r->v[i];
		if (!s)
			continue;
		if (s->alloc)
			alloc_destroy(s->alloc);
		free(s->objs);
		vheap_free(&s->vh[0]);
		vheap_free(&s->vh[1]);
		free(s->ptag);
		free(s->rdma_info);
		free(s->recon);
		fvec_free(&s->fq);
		fvec_free(&s->reject);
		seg_free_batches(s);
		seg_free_demotes(s);
		free(s->dq.v);
		free(s->pq.v);
		free(s->lfree.v);
		free(s);
	}
	free(r->v);
	memset(r, 0, sizeof(*r));
}

struct seg *segreg_by_uuid(const struct segreg *r, uint64_t uuid)
{
	for (size_t i = 1; i < r->n; i++)
		if (r->v[i] && r->v[i]->uuid == uuid)
			return r->v[i];
	return NULL;
}

void segreg_usage(const struct segreg *r, uint64_t *used, uint64_t *cap)
{
	*used = *cap = 0;
	for (size_t i = 1; i < r->n; i++) {
		const struct seg *s = r->v[i];
		if (s && s->online) {
			*used += s->used;
			*cap += s->capacity;
		}
	}
}

struct seg *segreg_add(struct segreg *r)
{
	struct seg **v = realloc(r->v, (r->n + 1) * sizeof(*v));

	if (!v)
		return NULL;
	r->v = v;
	struct seg *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->id = (uint32_t)r->n;
	s->numa_node = -1;
	r->v[r->n++] = s;
	return s;
}

int segreg_online_start(struct segreg *r, struct seg *s)
{
	if (s->data_off >= s->size || s->align < 64 || (s->align & (s->align - 1)) ||
	    s->data_off % s->align)
		return -EINVAL;
	s->alloc = alloc_create(s->data_off, s->size - s->data_off, s->align);
	if (!s->alloc)
		return -EINVAL;
	s->capacity = s->size - s->data_off;
	free(s->ptag);
	s->ptag = NULL;
	s->nptag = s->ptag_set = 0;
	/* without it a warm re-mount places no holds (mnode.c); a segment
	 * over 1 TiB goes without (256 MiB of tags at most: calloc's pages
	 * are touched only where replicas start, but a hostile SEG record's
	 * size must not ask for more, fuzz_repl) */
	if (s->align >= 1u << SEG_MAP_SHIFT && s->size <= SEGREG_PTAG_MAX) {
		s->nptag = (size_t)((s->size + (1u << SEG_MAP_SHIFT) - 1) >> SEG_MAP_SHIFT);
		s->ptag = calloc(s->nptag, 1);
		if (!s->ptag)
			s->nptag = 0;
	}
	s->used = 0;
	s->freeing = 0;
	s->online = true;
	s->draining = false;
	s->evicting = false;
	r->online++;
	return 0;
}

void segreg_offline(struct segreg *r, struct seg *s)
{
	if (!s->online)
		return;
	size_t kept = 0;
	for (size_t i = 0; i < s->reject.n; i++)	/* drop spent entries */
		if (!s->reject.v[i].keep)
			s->reject.v[kept++] = s->reject.v[i];
	s->reject.n = kept;
	/* Whatever the node has not acknowledged may still be live in its
	 * segment file: remember it so that a re-mount cannot resurrect it. */
	for (size_t i = 0; i < s->fq.n; i++)
		if (!s->fq.v[i].keep && fvec_push(&s->reject, &s->fq.v[i]))
			break;
	for (struct fbatch *b = s->inflight; b; b = b->next)
		for (uint32_t i = 0; i < b->n; i++)
			if (!b->e[i].keep && fvec_push(&s->reject, &b->e[i]))
				break;
	/* A promoted object's spill copy the master meant to FREE, and the
	 * memory extent an unanswered PROMOTE may have filled: a re-mount
	 * must not adopt them (the object may be gone by then). */
	for (size_t i = 0; i < s->lfree.n; i++) {
		struct fent e = { .off = s->lfree.v[i].off, .generation = s->lfree.v[i].generation,
				  .tier = 1 };
		if (fvec_push(&s->reject, &e))
			break;
	}
	s->lfree.n = 0;
	for (struct dbatch *b = s->pinflight; b; b = b->next)
		for (uint32_t i = 0; i < b->n; i++) {
			struct fent e = { .off = b->e[i]->to, .generation = b->e[i]->generation };
			if (fvec_push(&s->reject, &e))
				break;
		}
	seg_free_batches(s);
	seg_free_demotes(s);
	s->fq.n = 0;
	if (s->reject.n)
		qsort(s->reject.v, s->reject.n, sizeof(struct fent), fent_cmp);
	free(s->hold.v);		/* its reservations go with the allocator */
	memset(&s->hold, 0, sizeof(s->hold));
	s->held = s->map_mount = false;
	alloc_destroy(s->alloc);
	s->alloc = NULL;
	free(s->objs);
	s->objs = NULL;
	s->nobjs = s->capobjs = 0;
	free(s->ptag);
	s->ptag = NULL;
	s->nptag = s->ptag_set = 0;
	s->rend[0] = s->rend[1] = 0;
	vheap_clear(&s->vh[0]);
	vheap_clear(&s->vh[1]);
	s->used = 0;
	s->freeing = 0;
	s->online = false;
	s->client = NULL;
	s->warm = false;
	free(s->recon);
	s->recon = NULL;
	s->nrecon = 0;
	s->recon_pend = false;
	s->evicting = s->evicting_disk = false;
	s->spill_dropped = s->spill_added = 0;
	r->online--;
}

int seg_new_secret(struct seg *s)
{
	if (getrandom(s->secret, sizeof(s->secret), 0) != (ssize_t)sizeof(s->secret))
		return -EIO;
	grant_key_init(&s->grant_key, s->secret);
	return 0;
}

void seg_grant(const struct seg *s, uint64_t generation, uint64_t off, uint64_t alloc_len,
	       uint64_t epoch, uint8_t out[WIRE_GRANT_LEN])
{
	grant_make_k(&s->grant_key, s->id, generation, off, alloc_len, epoch, out);
}

uint64_t seg_alloc(struct seg *s, uint64_t len, uint64_t *alloc_len)
{
	uint64_t off = alloc_alloc(s->alloc, len, alloc_len);

	if (off != UINT64_MAX)
		s->used += *alloc_len;
	return off;
}

int seg_reserve(struct seg *s, uint64_t off, uint64_t len)
{
	int rc = alloc_reserve(s->alloc, off, len);

	if (rc == 0)
		s->used += alloc_len_at(s->alloc, off);
	return rc;
}

void seg_unalloc(struct seg *s, uint64_t off)
{
	uint64_t len = alloc_len_at(s->alloc, off);

	if (alloc_free(s->alloc, off) == 0)
		s->used -= len;
}

int seg_grow(struct seg *s)
{
	if (s->nobjs < s->capobjs)
		return 0;
	if (s->capobjs >= (1u << 29))	/* rep.sidx bits */
		return -ENOSPC;
	size_t cap = s->capobjs ? s->capobjs * 2 : 64;
	struct obj **v = realloc(s->objs, cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	s->objs = v;
	s->capobjs = cap;
	return 0;
}

/* Points the entry at index i (o's replica on s) at i. */
static void seg_set_idx(struct seg *s, size_t i)
{
	struct obj *o = s->objs[i];

	for (unsigned k = 0; k < o->nrep; k++)
		if (obj_rep(o)[k].seg == s->id) {
			obj_rep(o)[k].sidx = i;
			return;
		}
}

static void seg_swap(struct seg *s, size_t i, size_t j)
{
	struct obj *t = s->objs[i];

	if (i == j)
		return;
	s->objs[i] = s->objs[j];
	s->objs[j] = t;
	seg_set_idx(s, i);
	seg_set_idx(s, j);
}

static enum seg_rgn seg_rgn_of(const struct seg *s, size_t i)
{
	return i < s->rend[0] ? SEG_RGN_MEM : i < s->rend[1] ? SEG_RGN_DISK : SEG_RGN_OTHER;
}

/* Slot i holds another replica now (or the same in another region): its
 * region's victim heap looks at it again. */
static void seg_mark(struct seg *s, size_t i)
{
	enum seg_rgn r = seg_rgn_of(s, i);

	if (r != SEG_RGN_OTHER)
		vheap_mark(&s->vh[r], i, 2 * s->nobjs + 64);
}

/* Moves the entry at index i one region up or down; returns its new
 * index. Regions stay contiguous: it changes places with the last entry
 * of its region (up) or the first (down), and the boundary moves over it. */
static size_t seg_step(struct seg *s, size_t i, bool up)
{
	enum seg_rgn r = seg_rgn_of(s, i);
	size_t j;

	if (up) {
		j = s->rend[r] - 1;
		seg_swap(s, i, j);
		s->rend[r]--;
	} else {
		j = s->rend[r - 1];
		seg_swap(s, i, j);
		s->rend[r - 1]++;
	}
	seg_mark(s, i);
	seg_mark(s, j);
	return j;
}

void seg_place(struct seg *s, struct obj *o, unsigned ri, enum seg_rgn rgn)
{
	size_t i = obj_rep(o)[ri].sidx;

	while (seg_rgn_of(s, i) != rgn)
		i = seg_step(s, i, seg_rgn_of(s, i) < rgn);
}

/* Memory extents do not overlap and start on the alignment (>= a page):
 * a page has at most one starting in it. */
static void ptag_set(struct seg *s, const struct rep *rp, uint8_t tag)
{
	uint64_t pg = rep_off(rp) >> SEG_MAP_SHIFT;

	if (s->ptag && rp->tier == KVP_TIER_MEM && pg < s->nptag) {
		s->ptag_set += (tag != 0) - (s->ptag[pg] != 0);
		s->ptag[pg] = tag;
	}
}

int seg_attach(struct seg *s, struct obj *o, unsigned ri, enum seg_rgn rgn)
{
	if (seg_grow(s))
		return -ENOMEM;
	obj_rep(o)[ri].sidx = (uint32_t)s->nobjs;
	s->objs[s->nobjs++] = o;
	seg_place(s, o, ri, rgn);
	ptag_set(s, &obj_rep(o)[ri], segmap_tag(o->generation));
	return 0;
}

void seg_retier(struct seg *s, const struct obj *o, unsigned ri, const struct rep *was)
{
	ptag_set(s, was, 0);
	ptag_set(s, &obj_rep(o)[ri], segmap_tag(o->generation));
}

bool seg_ptag_taken(const struct seg *s, uint64_t off)
{
	uint64_t pg = off >> SEG_MAP_SHIFT;

	return s->ptag && pg < s->nptag && s->ptag[pg];
}

#define SEG_PTAG_SCAN_MAX (1u << 20)	/* tags counted by seg_ptag_check, at most */

bool seg_ptag_check(const struct seg *s)
{
	size_t mem = 0, set = 0;

	if (!s->ptag)
		return true;
	for (size_t i = 0; i < s->nobjs; i++) {
		const struct obj *o = s->objs[i];
		for (unsigned k = 0; k < o->nrep; k++) {
			const struct rep *rp = &obj_rep(o)[k];
			uint64_t pg = rep_off(rp) >> SEG_MAP_SHIFT;
			if (rp->seg != s->id || rp->tier != KVP_TIER_MEM)
				continue;
			if (pg >= s->nptag || s->ptag[pg] != segmap_tag(o->generation))
				return false;
			mem++;
		}
	}
	if (s->nptag <= SEG_PTAG_SCAN_MAX) {
		for (size_t p = 0; p < s->nptag; p++)
			set += s->ptag[p] != 0;
		if (set != s->ptag_set)
			return false;
	}
	return s->ptag_set == mem;
}

void seg_detach(struct seg *s, struct obj *o, unsigned ri)
{
	ptag_set(s, &obj_rep(o)[ri], 0);
	seg_place(s, o, ri, SEG_RGN_OTHER);

	uint32_t i = obj_rep(o)[ri].sidx;
	struct obj *last = s->objs[--s->nobjs];

	if (last != o || i != s->nobjs) {
		s->objs[i] = last;
		for (unsigned k = 0; k < last->nrep; k++)
			if (obj_rep(last)[k].seg == s->id) {
				obj_rep(last)[k].sidx = i;
				break;
			}
	}
}

void seg_repoint(struct segreg *r, struct obj *o)
{
	for (unsigned k = 0; k < o->nrep; k++) {
		struct seg *s = segreg_online(r, obj_rep(o)[k].seg);
		if (s)
			s->objs[obj_rep(o)[k].sidx] = o;
	}
}

/* Bytes the ack of e will release. */
static uint64_t fent_len(const struct seg *s, const struct fent *e)
{
	return e->keep || e->tier != 0 ? 0 : alloc_len_at(s->alloc, e->off);
}

int seg_queue_free(struct seg *s, uint64_t off, uint64_t generation, uint8_t tier, bool keep)
{
	struct fent e = { .off = off, .generation = generation, .tier = tier, .keep = keep };
	int rc = fvec_push(&s->fq, &e);

	if (!rc)
		s->freeing += fent_len(s, &e);
	return rc;
}

struct fbatch *seg_take_frees(struct seg *s, uint64_t reqid, uint32_t max)
{
	uint32_t n = s->fq.n < max ? (uint32_t)s->fq.n : max;

	if (!n)
		return NULL;
	struct fbatch *b = malloc(sizeof(*b) + n * sizeof(struct fent));
	if (!b)
		return NULL;
	b->reqid = reqid;
	b->n = n;
	memcpy(b->e, s->fq.v, n * sizeof(struct fent));
	memmove(s->fq.v, s->fq.v + n, (s->fq.n - n) * sizeof(struct fent));
	s->fq.n -= n;
	b->next = s->inflight;
	s->inflight = b;
	return b;
}

int seg_ack_frees(struct seg *s, uint64_t reqid)
{
	for (struct fbatch **pb = &s->inflight; *pb; pb = &(*pb)->next) {
		struct fbatch *b = *pb;
		if (b->reqid != reqid)
			continue;
		*pb = b->next;
		int n = (int)b->n;
		for (uint32_t i = 0; i < b->n; i++) {
			uint64_t len = fent_len(s, &b->e[i]);
			if (len && alloc_free(s->alloc, b->e[i].off) == 0) {
				s->used -= len;
				s->freeing -= len;
			}
		}
		free(b);
		return n;
	}
	return -1;
}

static int fent_cmp(const void *a, const void *b)
{
	const struct fent *x = a, *y = b;

	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	if (x->generation != y->generation)
		return x->generation < y->generation ? -1 : 1;
	return x->tier < y->tier ? -1 : x->tier > y->tier;
}

/* s->reject is sorted (segreg_offline); a matched entry is spent by setting
 * its keep flag, so a second report of the same extent is adopted. The
 * tier is part of the match: a spill offset may equal a segment offset. */
bool seg_rejected(struct seg *s, uint8_t tier, uint64_t off, uint64_t generation)
{
	struct fent key = { .off = off, .generation = generation, .tier = tier };
	struct fent *e = s->reject.n ? bsearch(&key, s->reject.v, s->reject.n,
					       sizeof(key), fent_cmp) : NULL;

	if (!e || e->keep)
		return false;
	e->keep = true;
	return true;
}

bool seg_frees_pending(const struct seg *s)
{
	return s->fq.n || s->inflight || s->dq.n || s->dinflight;
}

/* Appends a new entry to q: 0 or -ENOMEM. */
static int dq_push(struct dvec *q, const uint8_t *key, size_t key_len, uint64_t off,
		   uint64_t generation, uint64_t len, uint64_t to, uint64_t to_len)
{
	if (q->n == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 16;
		struct dent **v = realloc(q->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		q->v = v;
		q->cap = cap;
	}
	struct dent *e = malloc(sizeof(*e) + key_len);
	if (!e)
		return -ENOMEM;
	e->off = off;
	e->generation = generation;
	e->len = len;
	e->to = to;
	e->to_len = to_len;
	e->key_len = (uint16_t)key_len;
	memcpy(e->key, key, key_len);
	q->v[q->n++] = e;
	return 0;
}

static struct dbatch *dq_take(struct dvec *q, struct dbatch **inflight, uint64_t reqid,
			      uint32_t max)
{
	uint32_t n = q->n < max ? (uint32_t)q->n : max;

	if (!n)
		return NULL;
	struct dbatch *b = malloc(sizeof(*b) + n * sizeof(struct dent *));
	if (!b)
		return NULL;
	b->reqid = reqid;
	b->n = n;
	memcpy(b->e, q->v, n * sizeof(struct dent *));
	memmove(q->v, q->v + n, (q->n - n) * sizeof(struct dent *));
	q->n -= n;
	b->next = *inflight;
	*inflight = b;
	return b;
}

static struct dbatch *dq_answered(struct dbatch **inflight, uint64_t reqid)
{
	for (struct dbatch **pb = inflight; *pb; pb = &(*pb)->next) {
		struct dbatch *b = *pb;
		if (b->reqid == reqid) {
			*pb = b->next;
			return b;
		}
	}
	return NULL;
}

int seg_queue_demote(struct seg *s, const uint8_t *key, size_t key_len, uint64_t off,
		     uint64_t generation, uint64_t len)
{
	int rc = dq_push(&s->dq, key, key_len, off, generation, len, 0, 0);

	if (!rc)
		s->demoting += len;
	return rc;
}

struct dbatch *seg_take_demotes(struct seg *s, uint64_t reqid, uint32_t max)
{
	return dq_take(&s->dq, &s->dinflight, reqid, max);
}

struct dbatch *seg_answered_demotes(struct seg *s, uint64_t reqid)
{
	return dq_answered(&s->dinflight, reqid);
}

int seg_queue_promote(struct seg *s, const uint8_t *key, size_t key_len, uint64_t off,
		      uint64_t generation, uint64_t len, uint64_t to, uint64_t to_len)
{
	return dq_push(&s->pq, key, key_len, off, generation, len, to, to_len);
}

struct dbatch *seg_take_promotes(struct seg *s, uint64_t reqid, uint32_t max)
{
	return dq_take(&s->pq, &s->pinflight, reqid, max);
}

struct dbatch *seg_answered_promotes(struct seg *s, uint64_t reqid)
{
	return dq_answered(&s->pinflight, reqid);
}

int seg_defer_free(struct seg *s, uint64_t off, uint64_t generation, uint64_t len,
		   uint64_t due_ms)
{
	struct lfvec *f = &s->lfree;

	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 16;
		struct lfree *v = realloc(f->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		f->v = v;
		f->cap = cap;
	}
	f->v[f->n++] = (struct lfree){ .off = off, .generation = generation, .len = len,
				       .due_ms = due_ms };
	return 0;
}

/* Whole-list pass: the list holds the promotions of about one lease_ttl,
 * and a reload may change lease_ttl, so it is not sorted by due time. */
size_t seg_free_due(struct seg *s, uint64_t now_ms)
{
	struct lfvec *f = &s->lfree;
	size_t kept = 0, queued = 0;

	for (size_t i = 0; i < f->n; i++) {
		struct lfree *e = &f->v[i];
		/* on OOM the entry stays for the next pass */
		if (e->due_ms > now_ms || seg_queue_free(s, e->off, e->generation, 1, false)) {
			f->v[kept++] = *e;
			continue;
		}
		s->spill_dropped += e->len;
		queued++;
	}
	f->n = kept;
	return queued;
}

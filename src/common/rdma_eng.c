/* rdma_eng: the bounce buffer and the transfer engine (see rdma.h): extent
 * images split into READ/WRITE pieces that never cross a memory-region
 * chunk, spread over the least busy QPs of a set, staged through bounce
 * slots when the local memory is not registered, and published by a last
 * 4-byte write. An engine is used by its owner's thread only; the bounce
 * buffer is shared and has its own lock. Works the same on a simulated QP
 * set (rdma_sim_create), which is how the unit tests drive it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "rdma.h"

/* ---- bounce buffer ------------------------------------------------------ */

int rdma_bounce_init(struct rdma_bounce *b, void *base, uint64_t len, uint64_t slot)
{
	uint64_t n;

	memset(b, 0, sizeof(*b));
	if (!base || !slot || len < slot)
		return -EINVAL;
	n = len / slot;
	if (n > 1u << 20)
		n = 1u << 20;
	b->bits = calloc((n + 63) / 64, sizeof(*b->bits));
	if (!b->bits)
		return -ENOMEM;
	pthread_mutex_init(&b->lock, NULL);
	b->base = base;
	b->slot = slot;
	b->nslots = (unsigned)n;
	return 0;
}

void rdma_bounce_fini(struct rdma_bounce *b)
{
	if (!b->bits)
		return;
	pthread_mutex_destroy(&b->lock);
	free(b->bits);
	memset(b, 0, sizeof(*b));
}

int rdma_bounce_get(struct rdma_bounce *b)
{
	int slot = -1;

	pthread_mutex_lock(&b->lock);
	if (b->used < b->nslots) {
		for (unsigned w = 0; w < (b->nslots + 63) / 64; w++) {
			uint64_t free_bits = ~b->bits[w];

			if (!free_bits)
				continue;
			unsigned bit = (unsigned)__builtin_ctzll(free_bits);

			if (w * 64 + bit >= b->nslots)
				break;
			b->bits[w] |= 1ull << bit;
			b->used++;
			slot = (int)(w * 64 + bit);
			break;
		}
	}
	pthread_mutex_unlock(&b->lock);
	return slot;
}

void rdma_bounce_put(struct rdma_bounce *b, int slot)
{
	if (slot < 0 || (unsigned)slot >= b->nslots)
		return;
	pthread_mutex_lock(&b->lock);
	if (b->bits[slot / 64] & (1ull << (slot % 64))) {
		b->bits[slot / 64] &= ~(1ull << (slot % 64));
		b->used--;
	}
	pthread_mutex_unlock(&b->lock);
}

/* ---- transfer engine ---------------------------------------------------- */

struct rdma_piece {
	struct rdma_xfer *x;
	uint64_t pos, len;		/* range of the image */
	int slot;			/* bounce slot, -1: direct */
	bool final;			/* the publishing magic write */
	struct rdma_piece *prev, *next;	/* e->flying */
};

void rdma_eng_init(struct rdma_eng *e, struct rdma_qps *q, struct rdma_bounce *bounce,
		   const struct rdma_mr_chunk *bc, uint32_t nbc)
{
	memset(e, 0, sizeof(*e));
	e->q = q;
	e->bounce = bounce;
	e->bc = bc;
	e->nbc = nbc;
}

/* The piece of a gathered value that holds value byte v, and v's offset
 * in it; NULL past the end. */
static const struct rdma_vseg *vseg_at(const struct rdma_xfer *x, uint64_t v, uint64_t *off)
{
	for (uint32_t i = 0; i < x->nvseg; i++) {
		if (v < x->vseg[i].len) {
			*off = v;
			return &x->vseg[i];
		}
		v -= x->vseg[i].len;
	}
	return NULL;
}

/* A gathered value must be a write and its pieces must add up to vlen. */
static int vseg_check(const struct rdma_xfer *x)
{
	uint64_t sum = 0;

	if (!x->nvseg)
		return 0;
	if (!x->write || !x->vseg)
		return -EINVAL;
	for (uint32_t i = 0; i < x->nvseg; i++) {
		if (x->vseg[i].len && !x->vseg[i].p)
			return -EINVAL;
		sum += x->vseg[i].len;
	}
	return sum == x->vlen ? 0 : -EINVAL;
}

void rdma_eng_add(struct rdma_eng *e, struct rdma_xfer *x)
{
	x->status = vseg_check(x);
	x->cursor = 0;
	x->inflight = 0;
	x->final_posted = false;
	x->commit_posted = false;
	x->next = NULL;
	if (e->tail)
		e->tail->next = x;
	else
		e->head = x;
	e->tail = x;
	e->pending++;
}

static uint64_t img_len(const struct rdma_xfer *x)
{
	return (uint64_t)x->hdr_len + x->vlen;
}

/* Copies image bytes [pos, pos + len) between the image's two local parts
 * and buf: to buf for a write (staging), from buf for a read. */
static void img_copy(struct rdma_xfer *x, uint64_t pos, uint64_t len, uint8_t *buf, bool to_buf)
{
	while (len) {
		uint8_t *p;
		uint64_t n;

		if (pos < x->hdr_len) {
			p = x->hdr + pos;
			n = x->hdr_len - pos;
		} else if (x->nvseg) {
			/* Gathered values are written only: never copied into. */
			uint64_t o;
			const struct rdma_vseg *v = vseg_at(x, pos - x->hdr_len, &o);

			if (!v)
				return;
			p = (uint8_t *)(uintptr_t)(v->p + o);
			n = v->len - o;
		} else {
			p = x->val + (pos - x->hdr_len);
			n = img_len(x) - pos;
		}
		if (n > len)
			n = len;
		if (to_buf)
			memcpy(buf, p, n);
		else
			memcpy(p, buf, n);
		buf += n;
		pos += n;
		len -= n;
	}
}

/* Image bytes from pos on that go through bounce slots: up to the first
 * byte of a value piece that goes direct (0: pos is in one). */
static uint64_t staged_run(const struct rdma_xfer *x, uint64_t pos)
{
	uint64_t at = x->hdr_len;

	if (!x->nvseg)
		return !x->lc ? img_len(x) - pos : pos < x->hdr_len ? x->hdr_len - pos : 0;
	for (uint32_t i = 0; i < x->nvseg; at += x->vseg[i].len, i++)
		if (x->vseg[i].lc && at + x->vseg[i].len > pos)
			return at > pos ? at - pos : 0;
	return img_len(x) - pos;
}

/* The least busy QP with room (round-robin among ties), -1 if all full. */
static int pick_qp(struct rdma_eng *e)
{
	struct rdma_qps *q = e->q;
	int best = -1;

	for (unsigned k = 0; k < q->nqp; k++) {
		unsigned i = (e->rr + k) % q->nqp;

		if (q->busy[i] < q->depth && (best < 0 || q->busy[i] < q->busy[best]))
			best = (int)i;
	}
	if (best >= 0)
		e->rr = ((unsigned)best + 1) % q->nqp;
	return best;
}

static void fly_add(struct rdma_eng *e, struct rdma_piece *p)
{
	p->prev = NULL;
	p->next = e->flying;
	if (e->flying)
		e->flying->prev = p;
	e->flying = p;
}

static void fly_del(struct rdma_eng *e, struct rdma_piece *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		e->flying = p->next;
	if (p->next)
		p->next->prev = p->prev;
}

enum post_res { POST_OK, POST_BLOCKED, POST_FAILED };

/* Builds and posts the next piece of x. */
static enum post_res post_piece(struct rdma_eng *e, struct rdma_xfer *x)
{
	struct rdma_qps *q = e->q;
	uint64_t total = img_len(x), pos = x->cursor, len, rspan, raddr, run = 0;
	uint32_t ri = 0, li = 0, lkey = 0;
	struct rdma_piece *p;
	uint8_t *laddr;
	bool final = pos == total;
	bool commit = final && x->final_posted;	/* the magic went: the map byte */
	int qp, slot = -1, rc;

	qp = pick_qp(e);
	if (qp < 0)
		return POST_BLOCKED;
	if (commit) {
		pos = 0;
		len = 1;
		raddr = x->commit_raddr;
	} else if (final) {
		/* The magic: 4 bytes at the start of the image, last. */
		pos = 0;
		len = 4;
		raddr = x->raddr;
	} else {
		len = total - pos;
		raddr = x->raddr + pos;
	}
	rspan = rdma_chunk_span(x->rc, x->nrc, raddr, len, &ri);
	if (!rspan || (final && rspan < len)) {
		x->status = -EFAULT;
		return POST_FAILED;
	}
	len = rspan;
	if (final || (run = staged_run(x, pos)) > 0) {
		uint64_t bspan;

		if (!e->bounce)
			goto out_fault;
		slot = rdma_bounce_get(e->bounce);
		if (slot < 0)
			return POST_BLOCKED;
		laddr = rdma_bounce_ptr(e->bounce, slot);
		if (len > e->bounce->slot)
			len = e->bounce->slot;
		if (!final && len > run)
			len = run;	/* what follows goes direct */
		bspan = rdma_chunk_span(e->bc, e->nbc, (uintptr_t)laddr, len, &li);
		if (!bspan) {
			rdma_bounce_put(e->bounce, slot);
			goto out_fault;
		}
		len = bspan;
		lkey = e->bc[li].lkey;
		if (commit)
			*laddr = x->commit;
		else if (final)
			memcpy(laddr, &x->magic, 4);
		else if (x->write)
			img_copy(x, pos, len, laddr, true);
	} else {
		const struct rdma_mr_chunk *lc = x->lc;
		uint32_t nlc = x->nlc;
		uint64_t lspan;

		if (x->nvseg) {
			uint64_t o;
			const struct rdma_vseg *v = vseg_at(x, pos - x->hdr_len, &o);

			if (!v)
				goto out_fault;
			laddr = (uint8_t *)(uintptr_t)(v->p + o);
			if (len > v->len - o)
				len = v->len - o;
			lc = v->lc;
			nlc = v->nlc;
		} else {
			laddr = x->val + (pos - x->hdr_len);
		}
		if (len > RDMA_PIECE_MAX)
			len = RDMA_PIECE_MAX;
		lspan = rdma_chunk_span(lc, nlc, (uintptr_t)laddr, len, &li);
		if (!lspan)
			goto out_fault;
		len = lspan;
		lkey = lc[li].lkey;
	}
	if (len > UINT32_MAX)
		len = 1u << 30;
	p = malloc(sizeof(*p));
	if (!p) {
		if (slot >= 0)
			rdma_bounce_put(e->bounce, slot);
		x->status = -ENOMEM;
		return POST_FAILED;
	}
	*p = (struct rdma_piece){ .x = x, .pos = pos, .len = len, .slot = slot, .final = final };
	rc = rdma_post(q, (unsigned)qp, x->write || final, (uintptr_t)p, laddr, lkey,
		       raddr, x->rc[ri].rkey, (uint32_t)len);
	if (rc == -EAGAIN) {
		free(p);
		if (slot >= 0)
			rdma_bounce_put(e->bounce, slot);
		return POST_BLOCKED;
	}
	if (rc < 0) {
		log_warn("rdma: post on qp %d: %s", qp, strerror(-rc));
		free(p);
		if (slot >= 0)
			rdma_bounce_put(e->bounce, slot);
		q->broken = true;
		x->status = -EIO;
		return POST_FAILED;
	}
	fly_add(e, p);
	e->posted++;
	x->inflight++;
	if (commit)
		x->commit_posted = true;
	else if (final)
		x->final_posted = true;
	else
		x->cursor = pos + len;
	return POST_OK;

out_fault:
	x->status = -EFAULT;
	return POST_FAILED;
}

static bool xfer_done(const struct rdma_xfer *x)
{
	if (x->inflight)
		return false;
	if (x->status)
		return true;
	if (x->cursor < img_len(x))
		return false;
	return !x->write || !x->publish ||
	       (x->final_posted && (!x->commit || x->commit_posted));
}

/* Posts as much as the QPs and the bounce buffer take, in order. */
static void eng_kick(struct rdma_eng *e)
{
	for (struct rdma_xfer *x = e->head; x; x = x->next) {
		for (;;) {
			enum post_res r;

			if (x->status)
				break;
			if (e->q->broken) {
				x->status = -ECONNRESET;
				break;
			}
			if (x->cursor == img_len(x)) {
				/* Publish only once everything else landed, and
				 * commit only once the published header did. */
				if (!x->write || !x->publish || x->inflight ||
				    (x->final_posted && (!x->commit || x->commit_posted)))
					break;
			}
			r = post_piece(e, x);
			if (r == POST_BLOCKED)
				return;
			if (r == POST_FAILED)
				break;
		}
	}
}

static void piece_done(struct rdma_eng *e, struct rdma_piece *p, const struct rdma_wc *wc)
{
	struct rdma_xfer *x = p->x;

	fly_del(e, p);
	e->completed++;
	if (wc->status) {
		if (!e->q->broken)
			log_warn("rdma: work request failed: %s", wc->msg);
		e->q->broken = true;
		if (!x->status)
			x->status = wc->status;
	} else if (!x->write && p->slot >= 0 && !x->status) {
		img_copy(x, p->pos, p->len, rdma_bounce_ptr(e->bounce, p->slot), false);
	}
	if (p->slot >= 0)
		rdma_bounce_put(e->bounce, p->slot);
	x->inflight--;
	free(p);
}

/* Unlinks finished transfers and runs their callbacks. */
static size_t eng_reap(struct rdma_eng *e)
{
	struct rdma_xfer *done = NULL, **dt = &done, **pp = &e->head, *last = NULL;
	size_t n = 0;

	while (*pp) {
		struct rdma_xfer *x = *pp;

		if (xfer_done(x)) {
			*pp = x->next;
			x->next = NULL;
			*dt = x;
			dt = &x->next;
			e->pending--;
			n++;
		} else {
			last = x;
			pp = &x->next;
		}
	}
	e->tail = last;
	while (done) {
		struct rdma_xfer *x = done;

		done = x->next;
		x->next = NULL;
		if (x->done)
			x->done(x);
	}
	return n;
}

size_t rdma_eng_progress(struct rdma_eng *e, int timeout_ms)
{
	struct rdma_wc wc[32];
	bool waited = false;

	for (;;) {
		int n;

		eng_kick(e);
		n = rdma_poll(e->q, wc, 32, waited || !e->flying ? 0 : timeout_ms);
		if (n < 0) {
			rdma_eng_abort(e, -EIO);
			return 0;
		}
		for (int i = 0; i < n; i++)
			piece_done(e, (struct rdma_piece *)(uintptr_t)wc[i].wr_id, &wc[i]);
		size_t fin = eng_reap(e);

		if (n == 32)
			continue;	/* more may be waiting */
		if (n || fin || waited || !timeout_ms || !e->pending)
			break;
		if (!e->flying) {
			/* Waiting for bounce slots other threads hold. */
			usleep(50);
			break;
		}
		waited = true;
	}
	return e->pending;
}

void rdma_eng_abort(struct rdma_eng *e, int status)
{
	/* The HCA must stop touching our buffers before they are reused. */
	if (e->q)
		rdma_qps_reset(e->q);
	while (e->flying) {
		struct rdma_piece *p = e->flying;

		fly_del(e, p);
		if (p->slot >= 0)
			rdma_bounce_put(e->bounce, p->slot);
		p->x->inflight--;
		free(p);
	}
	for (struct rdma_xfer *x = e->head; x; x = x->next)
		if (!x->status)
			x->status = status;
	eng_reap(e);
}


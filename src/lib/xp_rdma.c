/* xp_rdma: the RDMA transport of libkvpool (see xp_rdma.h). A transfer
 * becomes one-sided READs/WRITEs against the node's registered segment:
 * the image is split in pieces (rdma_eng.c's engine) spread over the QPs of a
 * set borrowed for the call; a write publishes the extent's magic last.
 * Buffers registered with kvp_register_buffer are read/written in place,
 * others through the handle's registered bounce buffer. A failed work
 * request breaks the QP set (it is reset and destroyed, the node drops its
 * side with the control connection) and the transfer is redone over TCP
 * within the same call. Pools are guarded by kvp->lock; runs are private
 * to the calling thread.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "client_i.h"
#include "clock.h"
#include "extent.h"
#include "log.h"
#include "segmap.h"
#include "rdma.h"
#include "segment.h"
#include "sock.h"
#include "xp_rdma.h"
#include "xport.h"

#define QP_DEPTH 64			/* send WRs per QP */
#define CONNECT_MAX_BODY 4096
#define BOUNCE_MIN (1u << 20)		/* headers are staged even with no buffer configured */
#define PEER_BACKOFF_MS 5000		/* after a failed set-up, TCP only for this long */

/* One QP set to a node device, with the TCP connection that keeps the
 * node's side alive. */
struct rconn {
	int fd;
	struct rdma_qps *q;
	struct rpeer *peer;
	bool pooled;			/* counted in peer->nconns */
	struct rconn *next;
};

/* (node endpoint, node device, our device): lives until xp_rdma_close. */
struct rpeer {
	char endpoint[CONF_STR];
	char ndev[RDMA_NAME_MAX];
	unsigned cdev;
	struct rconn *idle;		/* protected by kvp->lock */
	int nconns;			/* protected by kvp->lock */
	uint64_t retry_after;		/* CLOCK_MONOTONIC ms; kvp->lock */
	struct rpeer *next;
};

struct ureg {
	uint8_t *p;
	size_t len;
	struct rdma_region r;
	struct ureg *next;
};

struct xp_rdma {
	struct rdma_ctx ctx;
	unsigned nqp;
	uint8_t *bounce_mem;
	size_t bounce_len;
	struct rdma_region bounce_reg;
	struct rdma_bounce bounce;
	struct ureg *regs;		/* protected by kvp->lock */
	struct rpeer *peers;		/* protected by kvp->lock */
	atomic_uint_fast64_t qp_sets, fallbacks, bytes;
};

/* ---- path choice -------------------------------------------------------- */

int xp_path_choose(enum client_proto proto, bool local_ok, bool rdma_ok, bool tcp_ok,
		   uint8_t tier)
{
	if (tier != KVP_TIER_MEM) {
		/* Only the owning node reads its spill file. */
		return proto != CLIENT_LOCAL && tcp_ok ? XP_TCP : -1;
	}
	switch (proto) {
	case CLIENT_LOCAL:
		return local_ok ? XP_LOCAL : -1;
	case CLIENT_TCP:
		return tcp_ok ? XP_TCP : -1;
	case CLIENT_RDMA:
		return rdma_ok ? XP_RDMA : -1;
	case CLIENT_AUTO:
	default:
		if (local_ok)
			return XP_LOCAL;
		if (rdma_ok)
			return XP_RDMA;
		return tcp_ok ? XP_TCP : -1;
	}
}

/* ---- handle state ------------------------------------------------------- */

int xp_rdma_open(struct kvp *kvp)
{
	bool need = kvp->proto == CLIENT_RDMA;
	struct xp_rdma *x;
	char err[512];
	uint64_t slot;
	int rc;

	kvp->rdma = NULL;
	if (!need && !(kvp->proto == CLIENT_AUTO && kvp->conf.rdma.enabled))
		return 0;
	x = calloc(1, sizeof(*x));
	if (!x)
		return KVP_ENOMEM;
	rc = rdma_open(&x->ctx, kvp->conf.rdma.devices, err, sizeof(err));
	if (rc < 0) {
		if (need) {
			log_err("kvpool: [client] protocol = rdma: %s", err);
			free(x);
			return KVP_ENOTSUP;
		}
		log_info("kvpool: [rdma] enabled but %s: transfers use TCP", err);
		free(x);
		return 0;
	}
	x->nqp = kvp->conf.rdma.qps_per_peer >= 1 && kvp->conf.rdma.qps_per_peer <= RDMA_MAX_QPS ?
		 (unsigned)kvp->conf.rdma.qps_per_peer : 2;
	x->bounce_len = kvp->conf.client.local_buffer_size;
	if (x->bounce_len < BOUNCE_MIN)
		x->bounce_len = BOUNCE_MIN;
	x->bounce_len = (x->bounce_len + 4095) & ~(size_t)4095;
	x->bounce_mem = aligned_alloc(4096, x->bounce_len);
	if (!x->bounce_mem) {
		rc = KVP_ENOMEM;
		goto out_close;
	}
	rc = rdma_region_reg(&x->ctx, x->bounce_mem, x->bounce_len, false, &x->bounce_reg, err,
			     sizeof(err));
	if (rc < 0) {
		log_err("kvpool: registering the %zu-byte bounce buffer ([client] "
			"local_buffer_size): %s", x->bounce_len, err);
		rc = need ? KVP_ELIMIT : 0;
		goto out_free;
	}
	/* Slots big enough for whole pieces, many enough for parallelism. */
	slot = x->bounce_len / 64;
	if (slot > RDMA_PIECE_MAX)
		slot = RDMA_PIECE_MAX;
	if (slot < (64u << 10))
		slot = 64u << 10;
	slot &= ~(uint64_t)4095;
	if (rdma_bounce_init(&x->bounce, x->bounce_mem, x->bounce_len, slot) < 0) {
		rc = KVP_ENOMEM;
		goto out_dereg;
	}
	atomic_init(&x->qp_sets, 0);
	atomic_init(&x->fallbacks, 0);
	atomic_init(&x->bytes, 0);
	kvp->rdma = x;
	log_info("kvpool: RDMA on %u device(s) (%s...), %u QPs per peer, %zu-byte bounce buffer",
		 x->ctx.ndev, x->ctx.dev[0].name, x->nqp, x->bounce_len);
	return 0;

out_dereg:
	rdma_region_dereg(&x->bounce_reg);
out_free:
	free(x->bounce_mem);
out_close:
	rdma_close(&x->ctx);
	free(x);
	return rc;
}

static void rconn_destroy(struct rconn *c)
{
	rdma_qps_destroy(c->q);
	if (c->fd >= 0)
		sock_close(c->fd);
	free(c);
}

void xp_rdma_close(struct kvp *kvp)
{
	struct xp_rdma *x = kvp->rdma;

	if (!x)
		return;
	kvp->rdma = NULL;
	while (x->peers) {
		struct rpeer *p = x->peers;

		x->peers = p->next;
		while (p->idle) {
			struct rconn *c = p->idle;

			p->idle = c->next;
			rconn_destroy(c);
		}
		free(p);
	}
	while (x->regs) {
		struct ureg *u = x->regs;

		x->regs = u->next;
		rdma_region_dereg(&u->r);
		free(u);
	}
	rdma_bounce_fini(&x->bounce);
	rdma_region_dereg(&x->bounce_reg);
	free(x->bounce_mem);
	rdma_close(&x->ctx);
	free(x);
}

void xp_rdma_seg_info(const uint8_t *blob, size_t n, struct rdma_info **out, uint64_t *hash)
{
	char err[256];

	*out = NULL;
	*hash = n ? ext_checksum(blob, n) : 0;
	if (!n)
		return;
	if (rdma_info_decode(blob, n, out, err, sizeof(err)) < 0)
		log_warn("kvpool: a segment's RDMA address is unusable (%s): TCP for it", err);
}

/* The device pair for a segment: its device (segment id spreads segments
 * over a node's devices) and one of ours with the same link layer. */
static bool pick_pair(const struct xp_rdma *x, const struct rdma_info *info, uint32_t seg_id,
		      unsigned *k, unsigned *c)
{
	for (unsigned t = 0; t < info->ndev; t++) {
		unsigned nd = (seg_id + t) % info->ndev;

		for (unsigned u = 0; u < x->ctx.ndev; u++) {
			unsigned cd = (nd + u) % x->ctx.ndev;

			if (x->ctx.dev[cd].link_layer == info->dev[nd].link_layer) {
				*k = nd;
				*c = cd;
				return true;
			}
		}
	}
	return false;
}

bool xp_rdma_seg_ok(struct kvp *kvp, const struct client_seg *seg)
{
	unsigned k, c;

	return kvp->rdma && seg->rdma && pick_pair(kvp->rdma, seg->rdma, seg->id, &k, &c);
}

int xp_rdma_register(struct kvp *kvp, void *p, size_t len)
{
	struct xp_rdma *x = kvp->rdma;
	struct ureg *u;
	char err[512];
	int rc;

	if (!x)
		return 0;
	u = calloc(1, sizeof(*u));
	if (!u)
		return KVP_ENOMEM;
	rc = rdma_region_reg(&x->ctx, p, len, false, &u->r, err, sizeof(err));
	if (rc < 0) {
		log_err("kvp_register_buffer(%p, %zu): %s", p, len, err);
		free(u);
		return rc == -ENOMEM || rc == -EPERM || rc == -EAGAIN ? KVP_ELIMIT :
		       rc == -E2BIG ? KVP_ETOOBIG : KVP_EINTERNAL;
	}
	u->p = p;
	u->len = len;
	pthread_mutex_lock(&kvp->lock);
	u->next = x->regs;
	x->regs = u;
	pthread_mutex_unlock(&kvp->lock);
	return 0;
}

void xp_rdma_unregister(struct kvp *kvp, void *p)
{
	struct xp_rdma *x = kvp->rdma;
	struct ureg **pp, *u = NULL;

	if (!x)
		return;
	pthread_mutex_lock(&kvp->lock);
	for (pp = &x->regs; *pp; pp = &(*pp)->next) {
		if ((*pp)->p == p) {
			u = *pp;
			*pp = u->next;
			break;
		}
	}
	pthread_mutex_unlock(&kvp->lock);
	if (u) {
		rdma_region_dereg(&u->r);
		free(u);
	}
}

/* The registration of [p, p + len) on device c; NULL when not registered.
 * Valid until kvp_unregister_buffer, which must not race transfers that
 * use the buffer. */
static const struct rdma_mr_chunk *reg_find(struct kvp *kvp, const void *p, uint64_t len,
					    unsigned c, uint32_t *n)
{
	const struct rdma_mr_chunk *lc = NULL;
	uintptr_t a = (uintptr_t)p;

	pthread_mutex_lock(&kvp->lock);
	for (struct ureg *u = kvp->rdma->regs; u; u = u->next) {
		uintptr_t b = (uintptr_t)u->p;

		if (a >= b && len <= u->len && a - b <= u->len - len && c < u->r.ndev) {
			lc = u->r.dev[c].c;
			*n = u->r.dev[c].n;
			break;
		}
	}
	pthread_mutex_unlock(&kvp->lock);
	return lc;
}

bool xp_rdma_registered(struct kvp *kvp, const void *p, size_t len)
{
	uint32_t n;

	return kvp->rdma && reg_find(kvp, p, len, 0, &n) != NULL;
}

void xp_rdma_stats(struct kvp *kvp, struct xp_rdma_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!kvp->rdma)
		return;
	out->qp_sets_opened = atomic_load(&kvp->rdma->qp_sets);
	out->fallbacks = atomic_load(&kvp->rdma->fallbacks);
	out->bytes = atomic_load(&kvp->rdma->bytes);
}

/* ---- QP set pools ------------------------------------------------------- */

/* Connects a new QP set to the peer: a data connection (HELLO), then
 * RDMA_CONNECT with our QP record; the node answers with its own. */
static int rconn_open(struct kvp *kvp, struct rpeer *p, uint64_t deadline, struct rconn **out)
{
	struct xp_rdma *x = kvp->rdma;
	struct rdma_qp_rec mine, theirs;
	struct rdma_qps *q = NULL;
	struct wire_hdr h;
	uint8_t hb[WIRE_HDR_SIZE], *body = NULL;
	struct wbuf b;
	char err[256];
	int fd, rc;

	fd = sock_connect(kvp, p->endpoint, NULL, deadline);
	if (fd < 0)
		return fd;
	rc = rdma_qps_create(&x->ctx.dev[p->cdev], x->nqp, QP_DEPTH, true, &q, err, sizeof(err));
	if (rc < 0) {
		log_warn("kvpool: rdma: %s", err);
		rc = KVP_ENOTSUP;
		goto out_close;
	}
	rdma_qps_local(q, &mine);
	/* The request names the node's device; the rest is our side. */
	snprintf(mine.dev, sizeof(mine.dev), "%s", p->ndev);
	wb_init(&b);
	size_t st = wire_begin(&b);

	if (rdma_qp_rec_encode(&b, &mine) < 0 || b.oom) {
		wb_free(&b);
		rc = KVP_EINTERNAL;
		goto out_qps;
	}
	wire_finish(&b, st, WIRE_OP_RDMA_CONNECT, 0, 0, 1, 0);
	struct iovec iov = { .iov_base = b.p, .iov_len = b.len };

	rc = sock_sendv(fd, &iov, 1, deadline);
	wb_free(&b);
	if (rc < 0)
		goto out_qps;
	rc = sock_recv(fd, hb, sizeof(hb), deadline);
	if (rc < 0)
		goto out_qps;
	rc = wire_hdr_decode(hb, &h, CONNECT_MAX_BODY, 0);
	if (rc < 0)
		goto out_qps;
	if (h.opcode != WIRE_OP_RDMA_CONNECT || !(h.flags & WIRE_F_REPLY) || h.reqid != 1) {
		rc = KVP_EPROTO;
		goto out_qps;
	}
	body = malloc(h.body_len ? h.body_len : 1);
	if (!body) {
		rc = KVP_ENOMEM;
		goto out_qps;
	}
	rc = sock_recv(fd, body, h.body_len, deadline);
	if (rc < 0)
		goto out_body;
	if (h.status) {
		log_info("kvpool: node %s refused RDMA on %s: %s", p->endpoint, p->ndev,
			 kvp_strerror(h.status));
		rc = kvp_is_err(h.status) ? h.status : KVP_EPROTO;
		goto out_body;
	}
	if (rdma_qp_rec_decode(body, h.body_len, &theirs, err, sizeof(err)) < 0) {
		log_warn("kvpool: node %s: %s", p->endpoint, err);
		rc = KVP_EPROTO;
		goto out_body;
	}
	if (rdma_qps_connect(q, &theirs, err, sizeof(err)) < 0) {
		log_warn("kvpool: rdma to %s (%s): %s", p->endpoint, p->ndev, err);
		rc = KVP_ENOTSUP;
		goto out_body;
	}
	free(body);
	*out = calloc(1, sizeof(**out));
	if (!*out) {
		rc = KVP_ENOMEM;
		goto out_qps;
	}
	(*out)->fd = fd;
	(*out)->q = q;
	(*out)->peer = p;
	atomic_fetch_add(&x->qp_sets, 1);
	return 0;

out_body:
	free(body);
out_qps:
	rdma_qps_destroy(q);
out_close:
	sock_close(fd);
	return rc;
}

static struct rpeer *peer_get_locked(struct xp_rdma *x, const char *endpoint, const char *ndev,
				     unsigned cdev)
{
	struct rpeer *p;

	for (p = x->peers; p; p = p->next)
		if (p->cdev == cdev && !strcmp(p->endpoint, endpoint) && !strcmp(p->ndev, ndev))
			return p;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	snprintf(p->endpoint, sizeof(p->endpoint), "%s", endpoint);
	snprintf(p->ndev, sizeof(p->ndev), "%s", ndev);
	p->cdev = cdev;
	p->next = x->peers;
	x->peers = p;
	return p;
}

/* An idle pooled set whose control connection is alive, or a new one
 * (pooled while under client.connections_per_node, else closed on return). */
static int rconn_take(struct kvp *kvp, struct rpeer *p, uint64_t deadline, struct rconn **out)
{
	bool pooled = false;
	int rc;

	pthread_mutex_lock(&kvp->lock);
	/* A peer whose set-up just failed (node without RDMA, unreachable
	 * port): do not pay a connection per call to learn it again. */
	if (clock_now_ms() < p->retry_after) {
		pthread_mutex_unlock(&kvp->lock);
		return KVP_ENOTSUP;
	}
	for (;;) {
		struct rconn *c = p->idle;

		if (!c)
			break;
		p->idle = c->next;
		pthread_mutex_unlock(&kvp->lock);
		/* A node restart closes the connection: its QPs are gone. */
		if (sock_alive(c->fd) && !c->q->broken) {
			*out = c;
			return 0;
		}
		rconn_destroy(c);
		pthread_mutex_lock(&kvp->lock);
		p->nconns--;
	}
	if (p->nconns < kvp->conns_per_node) {
		p->nconns++;
		pooled = true;
	}
	pthread_mutex_unlock(&kvp->lock);
	rc = rconn_open(kvp, p, deadline, out);
	if (rc < 0) {
		pthread_mutex_lock(&kvp->lock);
		if (pooled)
			p->nconns--;
		if (rc != KVP_ETIMEDOUT)
			p->retry_after = clock_now_ms() + PEER_BACKOFF_MS;
		pthread_mutex_unlock(&kvp->lock);
		return rc;
	}
	(*out)->pooled = pooled;
	return 0;
}

static void rconn_give(struct kvp *kvp, struct rconn *c)
{
	struct rpeer *p = c->peer;

	pthread_mutex_lock(&kvp->lock);
	if (c->pooled && !c->q->broken) {
		c->next = p->idle;
		p->idle = c;
		c = NULL;
	} else if (c->pooled) {
		p->nconns--;
	}
	pthread_mutex_unlock(&kvp->lock);
	if (c)
		rconn_destroy(c);
}

/* ---- runs --------------------------------------------------------------- */

struct rslot {
	struct rconn *c;
	struct rdma_eng e;
	struct rslot *next;
};

struct rrun;

struct rop {
	struct rrun *run;
	struct xp_op *op;
	struct rdma_xfer x;
	uint8_t himg[EXT_HDR_SIZE + KVP_MAX_KEY];
	struct rdma_vseg *vseg;		/* a gathered write's pieces */
	struct rop *next;
};

static void rop_free(struct rop *rp)
{
	free(rp->vseg);
	free(rp);
}

struct rrun {
	struct kvp *kvp;
	struct xp_rdma *x;
	uint64_t deadline;
	struct rslot *slots;
	struct rop *fresh, *fresh_tail;	/* added, not started */
	struct rop *finished;		/* transfer over, result not handled */
	size_t pending;			/* ops of ours not completed */
	void *tcp;			/* fallback run (xp_tcp_ops) */
	struct xp_op *done, *done_tail;	/* completed, callbacks not run */
};

static void *rr_begin(struct kvp *kvp, uint64_t deadline)
{
	struct rrun *r;

	if (!kvp->rdma)
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->kvp = kvp;
	r->x = kvp->rdma;
	r->deadline = deadline;
	return r;
}

static void op_complete(struct rrun *r, struct xp_op *op, int status)
{
	op->status = status;
	op->next = NULL;
	if (r->done_tail)
		r->done_tail->next = op;
	else
		r->done = op;
	r->done_tail = op;
	r->pending--;
}

static void rr_add(void *st, struct xp_op *op)
{
	struct rrun *r = st;
	struct rop *rp = calloc(1, sizeof(*rp));

	op->next = NULL;
	op->status = 0;
	op->cs_on = false;
	r->pending++;
	if (!rp) {
		op_complete(r, op, KVP_ENOMEM);
		return;
	}
	rp->run = r;
	rp->op = op;
	if (r->fresh_tail)
		r->fresh_tail->next = rp;
	else
		r->fresh = rp;
	r->fresh_tail = rp;
}

/* Hands op to the TCP transport of this call (the node checks everything
 * again there, so a stale RDMA address costs time, not correctness). */
static void to_tcp(struct rrun *r, struct xp_op *op, const char *why)
{
	log_debug("kvpool: segment %u: TCP instead of RDMA: %s", op->seg ? op->seg->id : 0, why);
	if (!r->tcp)
		r->tcp = xp_tcp_ops.begin(r->kvp, r->deadline);
	if (!r->tcp) {
		op_complete(r, op, KVP_ENOMEM);
		return;
	}
	r->pending--;
	op->kind = XP_TCP;
	xp_tcp_ops.add(r->tcp, op);
}

static struct rslot *slot_get(struct rrun *r, const char *endpoint, const char *ndev,
			      unsigned cdev, int *err)
{
	struct rslot *s;
	struct rpeer *p;

	for (s = r->slots; s; s = s->next) {
		struct rpeer *sp = s->c ? s->c->peer : NULL;

		if (sp && sp->cdev == cdev && !s->c->q->broken && !strcmp(sp->endpoint, endpoint) &&
		    !strcmp(sp->ndev, ndev))
			return s;
	}
	pthread_mutex_lock(&r->kvp->lock);
	p = peer_get_locked(r->x, endpoint, ndev, cdev);
	pthread_mutex_unlock(&r->kvp->lock);
	if (!p) {
		*err = KVP_ENOMEM;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		*err = KVP_ENOMEM;
		return NULL;
	}
	*err = rconn_take(r->kvp, p, r->deadline, &s->c);
	if (*err < 0) {
		free(s);
		return NULL;
	}
	rdma_eng_init(&s->e, s->c->q, &r->x->bounce, r->x->bounce_reg.dev[cdev].c,
		      r->x->bounce_reg.dev[cdev].n);
	s->next = r->slots;
	r->slots = s;
	return s;
}

static void rop_xfer_done(struct rdma_xfer *x)
{
	struct rop *rp = x->arg;
	struct rrun *r = rp->run;

	rp->next = r->finished;
	r->finished = rp;
}

/* Starts one op: checks bounds as the local path does, picks the device
 * pair and a QP set, and queues the transfer on its engine. */
static void rop_start(struct rrun *r, struct rop *rp)
{
	struct xp_op *op = rp->op;
	struct client_seg *seg = op->seg;
	const struct rdma_info *info = seg ? seg->rdma : NULL;
	struct rdma_xfer *x = &rp->x;
	uint64_t image;
	unsigned k, c;
	struct rslot *s;
	int err = 0;

	if (!info || op->tier != KVP_TIER_MEM || !pick_pair(r->x, info, seg->id, &k, &c)) {
		rop_free(rp);
		to_tcp(r, op, "no RDMA path to this replica");
		return;
	}
	if (op->dir == XP_READ)
		image = (uint64_t)op->hdr_len + op->len;
	else
		image = op->h.key_len > KVP_MAX_KEY ? UINT64_MAX :
			ext_size(op->h.key_len, op->h.value_len);
	if (op->off < SEG_DATA_OFF || op->off >= seg->seg_size || image > op->alloc_len ||
	    image > seg->seg_size - op->off ||
	    (op->dir == XP_READ && op->hdr_len < EXT_HDR_SIZE)) {
		rop_free(rp);
		op_complete(r, op, op->dir == XP_READ ? KVP_ESTALE : KVP_EGRANT);
		return;
	}
	s = slot_get(r, seg->endpoint, info->dev[k].name, c, &err);
	if (!s) {
		rop_free(rp);
		to_tcp(r, op, kvp_strerror(err));
		return;
	}
	memset(x, 0, sizeof(*x));
	x->raddr = info->addr + op->off;
	x->rc = info->dev[k].chunks;
	x->nrc = info->dev[k].nchunks;
	if (op->dir == XP_READ) {
		x->hdr = op->hdr;
		x->hdr_len = op->hdr_len;
		x->val = op->dst;
		x->vlen = op->len;
	} else {
		x->write = true;
		ext_encode(rp->himg, &op->h, op->key);
		memcpy(&x->magic, rp->himg, 4);
		memset(rp->himg, 0, 4);		/* published last */
		x->publish = true;
		/* Then the node's commit map: a restart reports the extent. */
		if (info->map_off) {
			x->commit = segmap_tag(op->h.generation);
			x->commit_raddr = info->addr + info->map_off + (op->off >> SEG_MAP_SHIFT);
		}
		x->hdr = rp->himg;
		x->hdr_len = EXT_HDR_SIZE + op->h.key_len;
		x->val = (uint8_t *)(uintptr_t)op->src;
		x->vlen = op->h.value_len;
	}
	if (op->dir == XP_WRITE && op->niov) {
		/* A gathered value: each registered piece is written in
		 * place, the others are staged through bounce slots. */
		rp->vseg = calloc(op->niov, sizeof(*rp->vseg));
		if (!rp->vseg) {
			rop_free(rp);
			op_complete(r, op, KVP_ENOMEM);
			return;
		}
		for (size_t i = 0; i < op->niov; i++) {
			struct rdma_vseg *v = &rp->vseg[i];

			v->p = op->iov[i].base;
			v->len = op->iov[i].len;
			v->lc = v->len ? reg_find(r->kvp, v->p, v->len, c, &v->nlc) : NULL;
		}
		x->vseg = rp->vseg;
		x->nvseg = (uint32_t)op->niov;
		x->val = NULL;
	}
	x->lc = x->vlen && x->val ? reg_find(r->kvp, x->val, x->vlen, c, &x->nlc) : NULL;
	x->done = rop_xfer_done;
	x->arg = rp;
	rdma_eng_add(&s->e, x);
}

static void rop_finish(struct rrun *r, struct rop *rp)
{
	struct xp_op *op = rp->op;
	int st = rp->x.status;
	uint64_t vlen = rp->x.vlen;

	rop_free(rp);
	if (st == 0) {
		if (op->dir == XP_READ)
			op->csum = ext_checksum(op->dst, op->len);
		atomic_fetch_add(&r->x->bytes, vlen);
		client_count(r->kvp, rdma_bytes, vlen);
		op_complete(r, op, 0);
	} else if (st == -ETIMEDOUT) {
		op_complete(r, op, KVP_ETIMEDOUT);
	} else if (st == -ECANCELED) {
		op_complete(r, op, KVP_EINTERNAL);
	} else {
		/* -EIO (a work request failed), -ECONNRESET (another one
		 * broke the set), -EFAULT (outside the registered region),
		 * -ENOMEM: the request is redone over TCP. */
		atomic_fetch_add(&r->x->fallbacks, 1);
		to_tcp(r, op, strerror(-st));
	}
}

static size_t rr_progress(void *st, bool wait)
{
	struct rrun *r = st;
	size_t rdma_pend = 0, tcp_pend = 0, active = 0;
	uint64_t now;

	while (r->fresh) {
		struct rop *rp = r->fresh;

		r->fresh = rp->next;
		if (!r->fresh)
			r->fresh_tail = NULL;
		rp->next = NULL;
		rop_start(r, rp);
	}
	now = clock_now_ms();
	for (struct rslot *s = r->slots; s; s = s->next)
		if (s->e.pending)
			active++;
	if (active && now >= r->deadline) {
		/* Resets the QPs first: nothing lands in the caller's
		 * buffers after this returns. */
		for (struct rslot *s = r->slots; s; s = s->next)
			if (s->e.pending)
				rdma_eng_abort(&s->e, -ETIMEDOUT);
	} else if (active) {
		/* Sleep on the completion channel only briefly: other
		 * transports of the call may have work too. */
		int tmo = wait && active == 1 && !r->tcp ? 1 : 0;
		for (struct rslot *s = r->slots; s; s = s->next)
			if (s->e.pending)
				rdma_eng_progress(&s->e, tmo);
	}
	while (r->finished) {
		struct rop *rp = r->finished;

		r->finished = rp->next;
		rop_finish(r, rp);
	}
	for (struct rslot *s = r->slots; s; s = s->next)
		rdma_pend += s->e.pending;
	if (r->tcp)
		tcp_pend = xp_tcp_ops.progress(r->tcp, wait && !rdma_pend && !r->done);
	/* Completions last: they may add to this run. */
	while (r->done) {
		struct xp_op *op = r->done;

		r->done = op->next;
		if (!r->done)
			r->done_tail = NULL;
		op->next = NULL;
		if (op->done)
			op->done(op);
	}
	return r->pending + tcp_pend;
}

static void rr_end(void *st)
{
	struct rrun *r = st;

	while (r->slots) {
		struct rslot *s = r->slots;

		r->slots = s->next;
		if (s->e.pending)
			rdma_eng_abort(&s->e, -ECANCELED);
		rconn_give(r->kvp, s->c);
		free(s);
	}
	/* Leftovers are failed without callbacks (the run is gone). */
	while (r->finished) {
		struct rop *rp = r->finished;

		r->finished = rp->next;
		rp->op->status = KVP_EINTERNAL;
		rop_free(rp);
	}
	while (r->fresh) {
		struct rop *rp = r->fresh;

		r->fresh = rp->next;
		rp->op->status = KVP_EINTERNAL;
		rop_free(rp);
	}
	if (r->tcp)
		xp_tcp_ops.end(r->tcp);
	free(r);
}

const struct xport_ops xp_rdma_ops = {
	.name = "rdma",
	.begin = rr_begin,
	.add = rr_add,
	.progress = rr_progress,
	.end = rr_end,
};

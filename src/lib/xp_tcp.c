/* xp_tcp: the TCP transport. READ/WRITE frames (wire.h) to the owning
 * node's data server over pooled, non-blocking connections. One call's ops
 * are grouped by node and spread over up to client.connections_per_node
 * connections, several frames pipelined on each, and every connection of
 * every node is driven by poll() on the calling thread. Writes go out with
 * sendmsg straight from the caller's buffer (no staging copy); read payloads
 * land in the caller's buffer and are checksummed while still in cache.
 * Connection pools live in struct client_node, guarded by kvp->lock.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client_i.h"
#include "clock.h"
#include "log.h"
#include "net.h"
#include "sock.h"
#include "xp_tcp_i.h"
#include "xport.h"

#define MAX_INFLIGHT 64			/* frames awaiting a reply per connection */
#define DIRECT_MIN (64u << 10)		/* larger payload remainders go straight to dst */
#define DIRECT_MAX (256u << 10)		/* ... at most this much per recv, so it is hashed hot */
#define RECV_BUDGET (8u << 20)		/* per connection per progress() call: fairness */
/* A connection back in the pool for less than this is lent without the
 * liveness syscall (sock_alive): a node that closed it meanwhile fails the
 * call's transfers with KVP_ECONN, which gets and puts retry. */
#define POOL_FRESH_MS 1000
#define IOV_BATCH 256			/* iovecs per sendmsg: 64 READs, or 64 WRITEs of 3 */
/* Bytes queued on a connection before a run takes another: the node
 * serves a connection on one thread, and small frames cost it less (and
 * the client fewer syscalls and wakeups) on one stream than spread over
 * several (measured: 4 KiB x 64 puts 1.2x faster, node CPU per put -13%;
 * gets: node -10..-20%, client -5..-10% per get); values of 512 KiB and
 * more still spread at once. */
static uint64_t op_spread(const struct xp_op *op)
{
	(void)op;
	return 512u << 10;
}

/* Private op flags: the node answered before the request was completely
 * sent (a refused WRITE); the op completes once the rest has gone out, so
 * the stream stays in step. */
#define OP_EARLY (1u << 16)
#define OP_REPLIED (1u << 17)

static inline void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* ---- connection pool ---------------------------------------------------- */

enum take_mode {
	TAKE_TRY,		/* idle or new under the limit, else KVP_ELIMIT */
	TAKE_WAIT,		/* ... else wait for a return until the deadline */
	TAKE_EXTRA,		/* ... else open a connection closed on return */
};

static void nc_free(struct node_conn *nc)
{
	if (!nc)
		return;
	if (nc->fd >= 0)
		sock_close(nc->fd);
	free(nc->rx);
	free(nc);
}

/* A fresh connection (HELLO done) with its receive buffer. */
static int nc_new(struct kvp *kvp, struct client_node *node, uint64_t deadline,
		  struct node_conn **out)
{
	struct node_conn *nc = calloc(1, sizeof(*nc));
	int fd;

	if (!nc || !(nc->rx = malloc(RX_CAP))) {
		free(nc);
		return KVP_ENOMEM;
	}
	fd = sock_connect(kvp, node->endpoint, NULL, deadline);
	if (fd < 0) {
		nc->fd = -1;
		nc_free(nc);
		return fd;
	}
	nc->fd = fd;
	client_count(kvp, node_connects, 1);
	*out = nc;
	return 0;
}

/* Lends a connection to node: an idle pooled one (dropping dead ones), or
 * a new pooled one while node->nconns < connections_per_node; at the limit
 * as mode says. 0 or KVP_E*; (*out)->pooled says whether it goes back to
 * the pool. */
static int pool_take(struct kvp *kvp, struct client_node *node, enum take_mode mode,
		     uint64_t deadline, struct node_conn **out)
{
	int rc;

	pthread_mutex_lock(&kvp->lock);
	for (;;) {
		struct node_conn *nc = node->idle;

		if (nc) {
			node->idle = nc->next;
			pthread_mutex_unlock(&kvp->lock);
			nc->next = NULL;
			if (clock_now_ms() - nc->idle_ms < POOL_FRESH_MS || sock_alive(nc->fd)) {
				*out = nc;
				return 0;
			}
			nc_free(nc);
			pthread_mutex_lock(&kvp->lock);
			node->nconns--;
			continue;
		}
		if (node->nconns < kvp->conns_per_node) {
			node->nconns++;
			pthread_mutex_unlock(&kvp->lock);
			rc = nc_new(kvp, node, deadline, out);
			if (rc < 0) {
				pthread_mutex_lock(&kvp->lock);
				node->nconns--;
				pthread_cond_broadcast(&kvp->cond);
				pthread_mutex_unlock(&kvp->lock);
				return rc;
			}
			(*out)->pooled = true;
			return 0;
		}
		if (mode == TAKE_TRY) {
			pthread_mutex_unlock(&kvp->lock);
			return KVP_ELIMIT;
		}
		if (mode == TAKE_EXTRA) {
			pthread_mutex_unlock(&kvp->lock);
			rc = nc_new(kvp, node, deadline, out);
			if (rc == 0)
				(*out)->pooled = false;
			return rc;
		}
		if (clock_now_ms() >= deadline) {
			pthread_mutex_unlock(&kvp->lock);
			return KVP_ETIMEDOUT;
		}
		clock_cond_wait_until(&kvp->cond, &kvp->lock, deadline);
	}
}

/* Returns a lent connection: kept when healthy and pooled, else closed. */
static void pool_give(struct kvp *kvp, struct client_node *node, struct node_conn *nc,
		      bool healthy)
{
	bool keep = nc->pooled && healthy;

	pthread_mutex_lock(&kvp->lock);
	if (keep) {
		nc->idle_ms = clock_now_ms();
		nc->next = node->idle;
		node->idle = nc;
	} else if (nc->pooled) {
		node->nconns--;
	}
	pthread_cond_broadcast(&kvp->cond);
	pthread_mutex_unlock(&kvp->lock);
	if (!keep)
		nc_free(nc);
}

void xp_tcp_close_pools(struct kvp *kvp)
{
	for (struct client_node *n = kvp->nodes; n; n = n->next) {
		while (n->idle) {
			struct node_conn *nc = n->idle;

			n->idle = nc->next;
			nc_free(nc);
			n->nconns--;
		}
	}
}

/* ---- run ---------------------------------------------------------------- */

void *xp_tcp_begin(struct kvp *kvp, uint64_t deadline)
{
	struct tcp_run *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->kvp = kvp;
	r->deadline = deadline;
	r->max_payload = kvp->conf.cluster.max_object_size + EXT_HDR_SIZE + KVP_MAX_KEY;
	return r;
}

uint64_t xp_tcp_op_total(const struct xp_op *op)
{
	if (op->dir == XP_WRITE)
		return op->tx_len + (uint64_t)op->h.key_len + op->h.value_len;
	return op->tx_len;
}

static void run_complete(struct tcp_run *r, struct xp_op *op, int status)
{
	if (op->cs_on) {
		uint64_t c = ext_csum_final(&op->cs);

		op->cs_on = false;
		if (status == 0)
			op->csum = c;
	}
	op->status = status;
	op->next = NULL;
	if (r->done_tail)
		r->done_tail->next = op;
	else
		r->done = op;
	r->done_tail = op;
	r->pending--;
}

static void conn_fail(struct tconn *c, int status)
{
	struct tcp_run *r = c->run;

	if (c->fd < 0)
		return;
	log_debug("node %s: connection failed: %s", c->node->endpoint, kvp_strerror(status));
	while (c->wq) {
		struct xp_op *op = c->wq;

		c->wq = op->next;
		run_complete(r, op, status);
	}
	while (c->sq) {
		struct xp_op *op = c->sq;

		c->sq = op->next;
		run_complete(r, op, status);
	}
	c->wq_tail = c->sq_tail = NULL;
	c->nwait = 0;
	c->queued = 0;
	/* The op whose reply was being read left wq already (an early
	 * refusal is still on sq, completed above): complete it, or the run
	 * waits for it forever without a busy connection to time out. */
	if (c->rop && !(c->rop->flags & OP_EARLY))
		run_complete(r, c->rop, status);
	c->rop = NULL;
	c->rs = R_HDR;
	pool_give(r->kvp, c->node, c->nc, false);
	c->nc = NULL;
	c->fd = -1;
}

static bool conn_busy(const struct tconn *c)
{
	return c->fd >= 0 && (c->sq || c->wq || c->rs != R_HDR || c->rlo != c->rhi);
}

/* Takes one more connection to node into the run. */
static struct tconn *conn_open(struct tcp_run *r, struct client_node *node,
			       enum take_mode mode, int *err)
{
	struct kvp *kvp = r->kvp;
	struct tconn *c;
	int rc;

	if (r->nconns == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 8;
		struct tconn **p = realloc(r->conns, cap * sizeof(*p));

		if (!p) {
			*err = KVP_ENOMEM;
			return NULL;
		}
		r->conns = p;
		r->cap = cap;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		*err = KVP_ENOMEM;
		return NULL;
	}
	rc = pool_take(kvp, node, mode, r->deadline, &c->nc);
	if (rc < 0) {
		free(c);
		*err = rc;
		return NULL;
	}
	c->run = r;
	c->node = node;
	c->fd = c->nc->fd;
	c->rx = c->nc->rx;
	c->next_reqid = 1;
	r->conns[r->nconns++] = c;
	return c;
}

/* Waiting for a pooled connection is deadlock-free only in one global
 * order: a run may block for node X only while every connection it holds
 * belongs to a node ordered before X (client_node.idx). */
static bool may_block_for(const struct tcp_run *r, const struct client_node *node)
{
	for (size_t i = 0; i < r->nconns; i++)
		if (r->conns[i]->fd >= 0 && r->conns[i]->node->idx >= node->idx)
			return false;
	return true;
}

/* The run's connection to node with the least queued, taking another from
 * the pool while every one has at least spread bytes queued and the pool
 * has room. With none at all: NULL (*err = KVP_ELIMIT) unless block, then
 * it waits in node order or opens an extra connection. */
static struct tconn *conn_pick(struct tcp_run *r, struct client_node *node, uint64_t spread,
			       bool block, int *err)
{
	struct tconn *best = NULL, *c;
	int n = 0;

	for (size_t i = 0; i < r->nconns; i++) {
		c = r->conns[i];
		if (c->node != node || c->fd < 0)
			continue;
		n++;
		if (!best || c->queued < best->queued)
			best = c;
	}
	if (best && (best->queued < spread || n >= r->kvp->conns_per_node))
		return best;
	c = conn_open(r, node, TAKE_TRY, err);
	if (c || best || (*err != KVP_ELIMIT) || !block)
		return c ? c : best;
	return conn_open(r, node, may_block_for(r, node) ? TAKE_WAIT : TAKE_EXTRA, err);
}

static void op_encode(struct tconn *c, struct xp_op *op)
{
	struct wire_hdr h = {
		.magic = WIRE_MAGIC,
		.version = WIRE_VERSION,
		.reqid = c->next_reqid++,
	};
	uint8_t *b = op->tx + WIRE_HDR_SIZE;

	op->reqid = h.reqid;
	op->sent = 0;
	if (op->dir == XP_READ) {
		h.opcode = WIRE_OP_READ;
		h.body_len = 17;
		b[0] = op->tier;
		put64(b + 1, op->off);
		put64(b + 9, (uint64_t)op->hdr_len + op->len);
		op->tx_len = WIRE_HDR_SIZE + 17;
	} else {
		uint8_t img[EXT_HDR_SIZE + KVP_MAX_KEY];

		h.opcode = WIRE_OP_WRITE;
		h.body_len = 52;
		h.payload_len = ext_size(op->h.key_len, op->h.value_len);
		put32(b, op->seg->id);
		put64(b + 4, op->h.generation);
		put64(b + 12, op->off);
		put64(b + 20, op->alloc_len);
		put64(b + 28, op->epoch);
		memcpy(b + 36, op->grant, WIRE_GRANT_LEN);
		/* The extent header goes with the frame; key and value are
		 * sent from where they are. */
		ext_encode(img, &op->h, op->key);
		memcpy(b + 52, img, EXT_HDR_SIZE);
		op->tx_len = WIRE_HDR_SIZE + 52 + EXT_HDR_SIZE;
	}
	wire_hdr_encode(&h, op->tx);
}

static void tcp_fail_now(struct tcp_run *r, struct xp_op *op, int status)
{
	r->pending++;
	run_complete(r, op, status);
}

static void conn_queue(struct tconn *c, struct xp_op *op)
{
	op_encode(c, op);
	if (c->sq_tail)
		c->sq_tail->next = op;
	else
		c->sq = op;
	c->sq_tail = op;
	c->queued += xp_tcp_op_total(op) + (op->dir == XP_READ ? op->hdr_len + op->len : 0);
}

static void tcp_add(void *st, struct xp_op *op)
{
	struct tcp_run *r = st;
	struct tconn *c;
	int err = KVP_ECONN;

	op->next = NULL;
	op->status = 0;
	op->cs_on = false;
	op->flags &= ~(OP_EARLY | OP_REPLIED);
	if (op->dir == XP_WRITE && op->h.key_len > KVP_MAX_KEY) {
		tcp_fail_now(r, op, KVP_EINVAL);
		return;
	}
	r->pending++;
	c = conn_pick(r, op->seg->node, op_spread(op), false, &err);
	if (c) {
		conn_queue(c, op);
	} else if (err == KVP_ELIMIT) {
		/* The pool is busy: wait for it in progress(), where the
		 * nodes are taken in their global order. */
		op->next = r->parked;
		r->parked = op;
	} else {
		r->pending--;
		tcp_fail_now(r, op, err);
	}
}

/* Finds connections for parked ops, lowest node first (see may_block_for). */
static void run_unpark(struct tcp_run *r)
{
	while (r->parked) {
		struct xp_op **pp, *op;
		struct client_node *low = NULL;

		for (op = r->parked; op; op = op->next)
			if (!low || op->seg->node->idx < low->idx)
				low = op->seg->node;
		for (pp = &r->parked; (op = *pp);) {
			struct tconn *c;
			int err = KVP_ECONN;

			if (op->seg->node != low) {
				pp = &op->next;
				continue;
			}
			*pp = op->next;
			op->next = NULL;
			c = conn_pick(r, low, op_spread(op), true, &err);
			if (c)
				conn_queue(c, op);
			else
				run_complete(r, op, err);
		}
	}
}

/* ---- sending ------------------------------------------------------------ */

/* Appends [p, p + n) minus the *skip bytes already sent to iov; false
 * when iov is full (cap entries) before it. */
static bool iov_push(struct iovec *iov, int *k, int cap, uint64_t *skip, const void *p,
		     uint64_t n)
{
	if (*skip >= n) {
		*skip -= n;
		return true;
	}
	if (*k == cap)
		return false;
	iov[*k].iov_base = (void *)((const uint8_t *)p + *skip);
	iov[*k].iov_len = n - *skip;
	*skip = 0;
	(*k)++;
	return true;
}

/* The unsent bytes of op as at most cap iovecs: frame, key, then the value
 * (one buffer, or a gathered write's pieces, each sent from where it is).
 * *whole says they run to the op's end. */
static int op_iov(struct xp_op *op, struct iovec *iov, int cap, bool *whole)
{
	bool w = op->dir == XP_WRITE;
	uint64_t skip = op->sent;
	int k = 0;

	*whole = false;
	if (!iov_push(iov, &k, cap, &skip, op->tx, op->tx_len) ||
	    (w && !iov_push(iov, &k, cap, &skip, op->key, op->h.key_len)))
		return k;
	if (w && op->niov) {
		uint64_t off;
		size_t i = xp_iov_find(op, skip, &off);

		/* Straight to the first piece not completely sent. */
		skip = off;
		for (; i < op->niov; i++)
			if (!iov_push(iov, &k, cap, &skip, op->iov[i].base, op->iov[i].len))
				return k;
	} else if (w && !iov_push(iov, &k, cap, &skip, op->src, op->h.value_len)) {
		return k;
	}
	*whole = true;
	return k;
}

static void conn_sent(struct tconn *c, size_t k)
{
	while (k && c->sq) {
		struct xp_op *op = c->sq;
		uint64_t rem = xp_tcp_op_total(op) - op->sent;

		if (k < rem) {
			op->sent += k;
			return;
		}
		k -= rem;
		op->sent += rem;
		c->sq = op->next;
		if (!c->sq)
			c->sq_tail = NULL;
		op->next = NULL;
		if (op->flags & OP_REPLIED) {
			op->flags &= ~(OP_EARLY | OP_REPLIED);
			run_complete(c->run, op, op->status);
			continue;
		}
		xp_tcp_wait_reply(c, op);
	}
}

static bool conn_can_send(const struct tconn *c)
{
	return c->sq && c->nwait < MAX_INFLIGHT;
}

static int conn_flush(struct tconn *c)
{
	while (conn_can_send(c)) {
		struct iovec iov[IOV_BATCH];
		size_t inflight = c->nwait;
		int n = 0;

		for (struct xp_op *op = c->sq; op && n < IOV_BATCH && inflight < MAX_INFLIGHT;
		     op = op->next, inflight++) {
			bool whole;

			n += op_iov(op, iov + n, IOV_BATCH - n, &whole);
			if (!whole)
				break;	/* its rest goes first in the next sendmsg */
		}
		ssize_t k = sock_writev(c->fd, iov, n);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return KVP_ECONN;
		}
		conn_sent(c, (size_t)k);
	}
	return 0;
}

/* ---- receiving ---------------------------------------------------------- */

static struct xp_op *wq_take(struct tconn *c, uint64_t reqid)
{
	struct xp_op **pp = &c->wq, *prev = NULL;

	for (; *pp; prev = *pp, pp = &(*pp)->next) {
		struct xp_op *op = *pp;

		if (op->reqid != reqid)
			continue;
		*pp = op->next;
		if (c->wq_tail == op)
			c->wq_tail = prev;
		op->next = NULL;
		c->nwait--;
		return op;
	}
	return NULL;
}

static void conn_reply_done(struct tconn *c)
{
	struct xp_op *op = c->rop;
	uint64_t q = xp_tcp_op_total(op) + (op->dir == XP_READ ? op->hdr_len + op->len : 0);
	int status = op->status;

	c->rop = NULL;
	c->rs = R_HDR;
	if (op->flags & OP_EARLY) {
		/* Still on sq: completes when fully sent (conn_sent). */
		op->flags |= OP_REPLIED;
		if (!status)
			op->status = KVP_EPROTO;
		return;
	}
	c->queued -= q < c->queued ? q : c->queued;
	if (status == 0 && op->dir == XP_READ)
		client_count(c->run->kvp, tcp_bytes, op->len);
	else if (status == 0)
		client_count(c->run->kvp, tcp_bytes, op->h.value_len);
	run_complete(c->run, op, status);
}

/* A reply header arrived: match it to its op. 0 or KVP_EPROTO (the stream
 * cannot be trusted any more). */
static int conn_reply_hdr(struct tconn *c, const uint8_t *p)
{
	struct wire_hdr h;
	struct xp_op *op;
	int rc = wire_hdr_decode(p, &h, 1u << 20, c->run->max_payload);

	if (rc < 0 || !(h.flags & WIRE_F_REPLY))
		return KVP_EPROTO;
	op = wq_take(c, h.reqid);
	if (!op) {
		/* A refusal may overtake the rest of its own request. */
		for (op = c->sq; op && op->reqid != h.reqid; op = op->next)
			;
		if (!op || op->sent == 0 || h.status == 0 || h.payload_len ||
		    (op->flags & OP_EARLY))
			return KVP_EPROTO;
		op->flags |= OP_EARLY;
	}
	if (h.opcode != (op->dir == XP_READ ? WIRE_OP_READ : WIRE_OP_WRITE)) {
		c->rop = op;
		op->status = KVP_EPROTO;
		conn_reply_done(c);
		return KVP_EPROTO;
	}
	c->rh = h;
	c->rop = op;
	c->rsink = false;
	op->status = h.status;
	if (h.status == 0 && op->dir == XP_READ) {
		if (h.payload_len != (uint64_t)op->hdr_len + op->len) {
			op->status = KVP_EPROTO;
			c->rsink = true;
		}
	} else if (h.payload_len) {
		/* Errors and write replies carry no payload; skip any. */
		if (op->status == 0)
			op->status = KVP_EPROTO;
		c->rsink = true;
	}
	c->rs = R_BODY;
	c->rleft = h.body_len;
	c->rdone = 0;
	return 0;
}

/* The streaming checksum of a value that arrives in pieces, begun on its
 * first piece; false (the rest of the payload is discarded) without memory. */
static bool conn_csum_begin(struct tconn *c, struct xp_op *op)
{
	if (op->cs_on)
		return true;
	if (ext_csum_init(&op->cs) < 0) {
		op->status = KVP_ENOMEM;
		c->rsink = true;
		return false;
	}
	op->cs_on = true;
	return true;
}

/* Payload bytes for the current op: the extent header+key to op->hdr, the
 * value to op->dst (hashed in the same pass as the copy). A value that is
 * in the receive buffer whole (small ones, nearly always) is copied and
 * hashed in one call, without a streaming state. */
static void conn_sink(struct tconn *c, const uint8_t *p, size_t n)
{
	struct xp_op *op = c->rop;

	while (n && !c->rsink) {
		if (c->rdone < op->hdr_len) {
			size_t k = op->hdr_len - c->rdone;

			k = k < n ? k : n;
			memcpy(op->hdr + c->rdone, p, k);
			c->rdone += k;
			p += k;
			n -= k;
			continue;
		}
		uint8_t *dst = (uint8_t *)op->dst + (c->rdone - op->hdr_len);

		if (c->rdone == op->hdr_len && n == op->len) {
			op->csum = ext_copy_checksum(dst, p, n);
		} else {
			if (!conn_csum_begin(c, op))
				break;
			ext_copy_csum(dst, p, n, &op->cs);
		}
		c->rdone += n;
		return;
	}
	c->rdone += n;
}

/* Parses what is buffered. 0 or KVP_EPROTO. */
int xp_tcp_conn_parse(struct tconn *c)
{
	for (;;) {
		size_t avail = c->rhi - c->rlo;

		switch (c->rs) {
		case R_HDR:
			if (avail < WIRE_HDR_SIZE)
				return 0;
			if (conn_reply_hdr(c, c->rx + c->rlo) < 0)
				return KVP_EPROTO;
			c->rlo += WIRE_HDR_SIZE;
			break;
		case R_BODY: {
			size_t k = c->rleft < avail ? (size_t)c->rleft : avail;

			/* READ/WRITE replies have empty bodies; skip any. */
			c->rlo += k;
			c->rleft -= k;
			if (c->rleft)
				return 0;
			c->rs = R_PAY;
			c->rleft = c->rh.payload_len;
			if (!c->rleft)
				conn_reply_done(c);
			break;
		}
		case R_PAY: {
			size_t k = c->rleft < avail ? (size_t)c->rleft : avail;

			if (!k)
				return 0;
			conn_sink(c, c->rx + c->rlo, k);
			c->rlo += k;
			c->rleft -= k;
			if (!c->rleft)
				conn_reply_done(c);
			break;
		}
		}
	}
}

/* Every reply this connection owes has been read and parsed: another
 * recv could only say EAGAIN (a later byte is out of step, and poll or
 * the pool's liveness check sees it). */
static bool conn_drained(const struct tconn *c)
{
	return !c->wq && c->rs == R_HDR && c->rlo == c->rhi;
}

static int conn_recv(struct tconn *c)
{
	size_t budget = RECV_BUDGET;

	while (budget) {
		struct xp_op *op = c->rop;
		ssize_t k;

		if (c->rs == R_PAY && !c->rsink && c->rlo == c->rhi && c->rdone >= op->hdr_len &&
		    c->rleft >= DIRECT_MIN) {
			/* Big remainder: straight into the caller's buffer. */
			size_t want = c->rleft < DIRECT_MAX ? (size_t)c->rleft : DIRECT_MAX;
			uint8_t *dst = (uint8_t *)op->dst + (c->rdone - op->hdr_len);

			if (!conn_csum_begin(c, op))
				continue;	/* now sinking: through rx */
			k = sock_read(c->fd, dst, want);
			if (k > 0) {
				ext_csum_update(&op->cs, dst, (size_t)k);
				c->rdone += (size_t)k;
				c->rleft -= (size_t)k;
				budget -= (size_t)k < budget ? (size_t)k : budget;
				if (!c->rleft)
					conn_reply_done(c);
				if (conn_drained(c))
					return 0;
				continue;
			}
		} else {
			if (c->rlo == c->rhi) {
				c->rlo = c->rhi = 0;
			} else if (c->rlo > RX_CAP / 2) {
				memmove(c->rx, c->rx + c->rlo, c->rhi - c->rlo);
				c->rhi -= c->rlo;
				c->rlo = 0;
			}
			size_t want = RX_CAP - c->rhi;

			k = sock_read(c->fd, c->rx + c->rhi, want);
			if (k > 0) {
				c->rhi += (size_t)k;
				budget -= (size_t)k < budget ? (size_t)k : budget;
				if (xp_tcp_conn_parse(c) < 0)
					return KVP_EPROTO;
				if (conn_drained(c))
					return 0;
				continue;
			}
		}
		if (k == 0)
			return KVP_ECONN;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return KVP_ECONN;
	}
	return 0;
}

/* ---- progress ----------------------------------------------------------- */

static void run_deliver(struct tcp_run *r)
{
	while (r->done) {
		struct xp_op *op = r->done;

		r->done = op->next;
		if (!r->done)
			r->done_tail = NULL;
		op->next = NULL;
		if (op->done)
			op->done(op);
	}
}

static size_t tcp_progress(void *st, bool wait)
{
	struct tcp_run *r = st;
	uint64_t now;
	int timeout;
	size_t n = 0, npend = 0;

	if (r->done)
		wait = false;
	run_unpark(r);
	if (r->pfd_cap < r->nconns) {
		struct pollfd *p = realloc(r->pfd, r->nconns * sizeof(*p));

		if (!p) {
			for (size_t i = 0; i < r->nconns; i++)
				conn_fail(r->conns[i], KVP_ENOMEM);
			run_deliver(r);
			return r->pending;
		}
		r->pfd = p;
		r->pfd_cap = r->nconns;
	}
	/* Push out what can go without waiting, then look for replies. */
	for (size_t i = 0; i < r->nconns; i++) {
		struct tconn *c = r->conns[i];
		int rc;

		if (c->fd < 0 || !conn_can_send(c))
			continue;
		rc = conn_flush(c);
		if (rc < 0)
			conn_fail(c, rc);
	}
	now = clock_now_ms();
	for (size_t i = 0; i < r->nconns; i++) {
		struct tconn *c = r->conns[i];

		r->pfd[i].fd = -1;
		r->pfd[i].events = 0;
		r->pfd[i].revents = 0;
		if (!conn_busy(c))
			continue;
		r->pfd[i].fd = c->fd;
		r->pfd[i].events = POLLIN | (conn_can_send(c) ? POLLOUT : 0);
		n++;
		if (sock_pending(c->fd))
			npend++;	/* TLS holds decrypted bytes: do not sleep */
	}
	timeout = r->deadline > now ? (r->deadline - now > INT32_MAX ? INT32_MAX :
				       (int)(r->deadline - now)) : 0;
	if (n) {
		int rc = net_poll(r->pfd, r->nconns, wait && !npend ? timeout : 0,
				  (int)r->kvp->conf.cluster.busy_poll_us);

		for (size_t i = 0; npend && rc >= 0 && i < r->nconns; i++) {
			if (r->pfd[i].fd >= 0 && sock_pending(r->pfd[i].fd)) {
				if (!r->pfd[i].revents)
					rc++;
				r->pfd[i].revents |= POLLIN;
			}
		}

		if (rc < 0 && errno != EINTR) {
			for (size_t i = 0; i < r->nconns; i++)
				conn_fail(r->conns[i], KVP_ECONN);
		}
		for (size_t i = 0; rc > 0 && i < r->nconns; i++) {
			struct tconn *c = r->conns[i];
			short ev = r->pfd[i].revents;
			int err = 0;

			if (!ev || c->fd < 0)
				continue;
			if (ev & (POLLIN | POLLHUP | POLLERR))
				err = conn_recv(c);
			if (!err && (ev & POLLOUT) && c->fd >= 0)
				err = conn_flush(c);
			if (err)
				conn_fail(c, err);
		}
		now = clock_now_ms();
		for (size_t i = 0; i < r->nconns; i++) {
			struct tconn *c = r->conns[i];

			if (conn_busy(c) && now >= r->deadline)
				conn_fail(c, KVP_ETIMEDOUT);
		}
	}
	run_deliver(r);
	return r->pending;
}

static void tcp_end(void *st)
{
	struct tcp_run *r = st;

	for (size_t i = 0; i < r->nconns; i++) {
		struct tconn *c = r->conns[i];

		if (c->fd >= 0) {
			/* A connection with a frame half sent or half read
			 * is out of step with its node: close it. */
			bool clean = !conn_busy(c);

			if (!clean)
				conn_fail(c, KVP_EINTERNAL);
			else
				pool_give(r->kvp, c->node, c->nc, true);
		}
		free(c);
	}
	/* Ops failed here get no callback: the run is over. */
	while (r->done) {
		struct xp_op *op = r->done;

		r->done = op->next;
		op->next = NULL;
	}
	free(r->conns);
	free(r->pfd);
	free(r);
}

const struct xport_ops xp_tcp_ops = {
	.name = "tcp",
	.begin = xp_tcp_begin,
	.add = tcp_add,
	.progress = tcp_progress,
	.end = tcp_end,
};

/* xp_tcp_i: the TCP transport's connection and run state (xp_tcp.c), for
 * xp_tcp.c and the in-tree fuzz target that feeds a connection's receive
 * side (tests/fuzz/fuzz_client.c). A run and its connections belong to the
 * calling thread; connection pools are guarded by kvp->lock (xp_tcp.c).
 */
#ifndef KVP_XP_TCP_I_H
#define KVP_XP_TCP_I_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"
#include "xport.h"

struct kvp;
struct client_node;
struct node_conn;

#define RX_CAP (256u << 10)		/* receive buffer for headers and small payloads */

enum rstate { R_HDR, R_BODY, R_PAY };

struct tconn {
	struct tcp_run *run;
	struct client_node *node;
	struct node_conn *nc;		/* lent by the pool; NULL once failed */
	int fd;				/* nc->fd, -1 once failed */
	struct xp_op *sq, *sq_tail;	/* not completely sent; head may be partial */
	struct xp_op *wq, *wq_tail;	/* sent, awaiting the reply */
	size_t nwait;
	uint64_t queued;		/* bytes on sq and wq: spreads ops over conns */
	uint64_t next_reqid;
	/* receive side */
	uint8_t *rx;
	size_t rlo, rhi;
	enum rstate rs;
	struct wire_hdr rh;
	uint64_t rleft;			/* body or payload bytes still to come */
	uint64_t rdone;			/* payload bytes consumed */
	struct xp_op *rop;		/* op the reply belongs to */
	bool rsink;			/* payload is discarded (mismatch, error) */
};

struct tcp_run {
	struct kvp *kvp;
	struct tconn **conns;
	size_t nconns, cap;
	struct pollfd *pfd;
	size_t pfd_cap;
	size_t pending;
	struct xp_op *done, *done_tail;	/* finished, callbacks not yet run */
	struct xp_op *parked;		/* waiting for a pooled connection */
	uint64_t max_payload;
	uint64_t deadline;		/* of the call: pending ops fail after it */
};

/* A run of one call (the transport's begin op): NULL without memory. */
void *xp_tcp_begin(struct kvp *kvp, uint64_t deadline);
/* The bytes an op sends: the frame, and a WRITE's key and value. */
uint64_t xp_tcp_op_total(const struct xp_op *op);
/* Parses the node's replies buffered in c->rx between rlo and rhi
 * (untrusted bytes). 0 or KVP_EPROTO. */
int xp_tcp_conn_parse(struct tconn *c);
/* op was sent whole: it waits for its reply, in sending order. */
static inline void xp_tcp_wait_reply(struct tconn *c, struct xp_op *op)
{
	op->next = NULL;
	if (c->wq_tail)
		c->wq_tail->next = op;
	else
		c->wq = op;
	c->wq_tail = op;
	c->nwait++;
}

#endif

/* node_ctx: what kvpool-node's modules share — the configuration, the event
 * loop, the segment with the node's own account of it, the per-opcode frame
 * counters, and the drain's progress hook. node.c owns it (inside struct
 * node) and hands it to the data server (node_data.h), the master link
 * (node_master.h) and the spill side (node_spill.h). Loop thread only; the
 * segment's bytes are also read by the scan thread (node_scan.h) and by
 * local clients through their own mappings.
 */
#ifndef KVP_NODE_CTX_H
#define KVP_NODE_CTX_H

#include <stdbool.h>
#include <stdint.h>

#include "conf.h"
#include "ev.h"
#include "segment.h"
#include "wire.h"

struct node_ctx {
	const struct kvp_conf *conf;	/* node.c's copy; SIGHUP changes live keys in place */
	struct ev_loop *loop;
	struct segment seg;		/* opened and closed by node.c */
	/* The node's own account of the segment: the last scan (set at MOUNT
	 * by the master link) + TCP WRITEs (data server) + PROMOTEs (spill
	 * side) - FREEs (data server). Written by those, read by all. */
	uint64_t used, extents;
	uint64_t req[WIRE_OP_MAX];	/* frames handled per opcode (data + master link) */
	uint64_t err[WIRE_OP_MAX];	/* of those, answered with an error */
	bool stopping;			/* node.c: the drain has begun */
	/* [tls] enabled (node.c): the data server's accepted connections and
	 * the master link; NULL: plain TCP */
	struct tls_ctx *tls_srv, *tls_cli;
	/* node.c's drain step: called (through node_ctx_progress) whenever
	 * something that could hold the drain up finishes. */
	void (*progress)(void *arg);
	void *progress_arg;
};

static inline void node_ctx_progress(struct node_ctx *x)
{
	if (x->stopping && x->progress)
		x->progress(x->progress_arg);
}

/* Is [off, off+len) inside the segment's data area? */
static inline bool node_ctx_range_ok(const struct node_ctx *x, uint64_t off, uint64_t len)
{
	return off >= x->seg.data_off && off < x->seg.size && len > 0 &&
	       len <= x->seg.size - off;
}

/* A reply that waits for work in other modules (a FREE behind WRITEs still
 * streaming into the freed extents, or behind demotions still copying
 * them). Its creator holds one count and sets done; every module that holds
 * the reply up takes one more (node_wait_hold) and gives it back
 * (node_wait_release); the last release runs done, which frees it. */
struct node_wait {
	uint32_t pending;
	void (*done)(struct node_wait *w);
};

static inline void node_wait_hold(struct node_wait *w)
{
	w->pending++;
}

static inline void node_wait_release(struct node_wait *w)
{
	if (--w->pending == 0)
		w->done(w);
}

#endif

/* node_spill: kvpool-node's side of the spill tier (spill.h does the I/O) —
 * opens and scans the spill file at start (memory-only when that fails),
 * executes the master's DEMOTE and PROMOTE batches, tombstones spill extents
 * on FREE tier 1, and holds a FREE of a memory extent until a demotion
 * reading it is done. Loop thread only (spill completions arrive through an
 * eventfd on the loop). Owns the spill file; the segment is node_ctx's. The
 * master link feeds it requests and answers the master for it.
 */
#ifndef KVP_NODE_SPILL_H
#define KVP_NODE_SPILL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "extent.h"
#include "node_ctx.h"
#include "wire.h"

struct node_spillside;
struct rbuf;
struct sbuf;
struct spill;

/* How a DEMOTE/PROMOTE batch is answered: body (len bytes; NULL when it
 * could not be built for want of memory) is the reply to req on the master
 * connection conn it came on. Returns false when that connection is gone:
 * the demoted copies are then dropped (nobody will learn of them). */
typedef bool (*node_spill_reply_fn)(void *arg, uint64_t conn, const struct wire_hdr *req,
				    const void *body, size_t len);

struct node_spillside *node_spill_create(struct node_ctx *x);
/* [spill] configured: opens and scans the file (name: the node's, recorded
 * in a new file's header); any failure leaves the node memory-only. */
void node_spill_open(struct node_spillside *s, const char *name);
/* Waits for spill I/O in flight (its callbacks run), closes the file. */
void node_spill_close(struct node_spillside *s);
void node_spill_destroy(struct node_spillside *s);	/* after node_spill_close */

struct spill *node_spill_file(const struct node_spillside *s);	/* NULL: memory-only */
uint64_t node_spill_capacity(const struct node_spillside *s);
uint64_t node_spill_used(const struct node_spillside *s);
void node_spill_metrics(const struct node_spillside *s, struct sbuf *b);
/* Settles the spill work in flight (a demotion is then done or never
 * was), then calls cb for every live spill extent: what a REPORT lists. */
int node_spill_foreach(struct node_spillside *s,
		       int (*cb)(const struct ext_found *f, void *arg), void *arg);

/* A DEMOTE (demote) or PROMOTE request h whose segment the caller checked:
 * r is at its cnt items (checked to be there). Each item is started; reply
 * runs once every one is done (conn, arg passed back). 0, or -ENOMEM with
 * nothing started. */
int node_spill_batch(struct node_spillside *s, bool demote, const struct wire_hdr *h,
		     struct rbuf *r, uint32_t cnt, uint64_t conn, node_spill_reply_fn reply,
		     void *arg);
/* FREE tier 1: true if the tombstone was started (w is held until it is on
 * disk), false if no live spill extent of that generation is at off. */
bool node_spill_free(struct node_spillside *s, uint64_t off, uint64_t generation,
		     struct node_wait *w);
/* FREE tier 0: demotions still copying the memory extent at off hold w.
 * True if there was one. */
bool node_spill_mem_freed(struct node_spillside *s, uint64_t off, uint64_t generation,
			  struct node_wait *w);

#endif

/* mnode: what the master does with and for its nodes — MOUNT, REPORT
 * (recovery), UNMOUNT, HEARTBEAT, SEGMENTS, the FREE / DEMOTE / PROMOTE
 * requests it sends them and their answers, node liveness. Handlers return
 * 0 or a KVP_E* frame status and append their reply body to b. Loop thread
 * only; no locks.
 */
#ifndef KVP_MNODE_H
#define KVP_MNODE_H

#include <stdint.h>

#include "master_i.h"

int mnode_mount(struct master *m, struct master_client *c, struct rbuf *r, struct wbuf *b);
int mnode_report(struct master *m, struct master_client *c, struct rbuf *r,
		 struct wbuf *b, struct op_stats *st);
int mnode_unmount(struct master *m, struct master_client *c, struct rbuf *r);
int mnode_heartbeat(struct master *m, struct master_client *c, struct rbuf *r);
int mnode_segments(struct master *m, struct wbuf *b);

/* A node answered a request of ours (FREE, DEMOTE, PROMOTE): frame h, body. */
void mnode_reply(struct master *m, struct master_client *c, const struct wire_hdr *h,
		 const uint8_t *body);
/* Sends the queued FREEs, DEMOTEs and PROMOTEs to the connected nodes. */
void mnode_flush(struct master *m);
/* Per tick: FREEs spill extents whose readers are done, drops segments
 * whose node was silent for node_ttl (or client_ttl, if shorter). */
void mnode_tick(struct master *m);
/* c's connection is gone: its draining (UNMOUNTed) segments go, the
 * others wait node_ttl for a re-mount. */
void mnode_client_gone(struct master *m, struct master_client *c);

#endif

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
/* A segment's identity in MOUNT's order — name, host id, shm path, device,
 * inode, size, uuid, data offset, alignment, endpoint, RDMA blob, spill
 * capacity, NUMA node — the one format of MOUNT and of the standby stream's
 * segment records (mrepl.c). decode checks every field into id and copies
 * the RDMA blob into *rdma (malloc'ed; NULL when empty): 0, KVP_EPROTO
 * (truncated), KVP_EINVAL (out of range) or KVP_ENOMEM. set copies an
 * identity into s and takes rdma. */
int mnode_seg_decode(struct rbuf *r, struct seg *id, uint8_t **rdma, size_t *rdma_len);
void mnode_seg_encode(struct wbuf *w, const struct seg *s);
void mnode_seg_set(struct seg *s, const struct seg *id, uint8_t *rdma, size_t rdma_len);
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

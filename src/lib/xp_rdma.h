/* xp_rdma: the RDMA transport of libkvpool, the third struct xport_ops
 * behind src/lib/xport.h. Owns a handle's RDMA state: the opened devices, the
 * registered bounce buffer, the buffers kvp_register_buffer registered, and
 * per (node endpoint, node device) a pool of RC queue-pair sets, each tied
 * to one TCP control connection to the node (RDMA_CONNECT). Pools and the
 * registration list are guarded by kvp->lock, held only to take/return;
 * a run drives its borrowed QP sets on the calling thread. Also the path
 * choice shared by puts and gets: local shm > RDMA > TCP, per replica.
 */
#ifndef KVP_XP_RDMA_H
#define KVP_XP_RDMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client_i.h"
#include "xport.h"

struct rdma_info;
struct xp_rdma;

/* The transport for a replica: XP_LOCAL, XP_RDMA, XP_TCP, or -1 when proto
 * allows none. local_ok: the segment is mapped here (writable, for a put);
 * rdma_ok: both ends have RDMA (xp_rdma_seg_ok); tcp_ok: the node's data
 * server is known. Disk-tier replicas are read by their node: TCP only.
 *   auto  -> local, else rdma, else tcp
 *   local -> local only        tcp -> tcp only
 *   rdma  -> rdma for memory replicas, tcp for disk ones */
int xp_path_choose(enum client_proto proto, bool local_ok, bool rdma_ok, bool tcp_ok,
		   uint8_t tier);

/* Sets kvp->rdma up when [client] protocol = rdma, or [rdma] enabled with
 * protocol auto: opens the devices ([rdma] devices), allocates and
 * registers the bounce buffer ([client] local_buffer_size). 0 with
 * kvp->rdma NULL when RDMA is not wanted or (auto) not available; with
 * protocol rdma a missing device is KVP_ENOTSUP ("no RDMA device" logged). */
int xp_rdma_open(struct kvp *kvp);
/* Closes pooled QP sets, deregisters everything; kvp_close calls it. */
void xp_rdma_close(struct kvp *kvp);

/* Decodes a segment's rdma_info blob (empty: none). *out NULL when there is
 * none or it is malformed (logged); *hash identifies the blob, so a node
 * that re-registered (new keys, same segment file) is noticed. */
void xp_rdma_seg_info(const uint8_t *blob, size_t n, struct rdma_info **out, uint64_t *hash);
/* True when this handle can reach seg over RDMA (a device pair with the
 * same link layer). */
bool xp_rdma_seg_ok(struct kvp *kvp, const struct client_seg *seg);

/* kvp_register_buffer / kvp_unregister_buffer: registers the range on
 * every device (GPU memory too where the NIC can, i.e. GPUDirect). 0 or
 * KVP_E* (KVP_ELIMIT: RLIMIT_MEMLOCK, named in the log). */
int xp_rdma_register(struct kvp *kvp, void *p, size_t len);
void xp_rdma_unregister(struct kvp *kvp, void *p);
/* True when [p, p + len) lies in one registered buffer. */
bool xp_rdma_registered(struct kvp *kvp, const void *p, size_t len);

/* Counters for /metrics-like reporting and tests. */
struct xp_rdma_stats {
	uint64_t qp_sets_opened;	/* RDMA_CONNECT exchanges done */
	uint64_t fallbacks;		/* transfers moved to TCP after an RDMA error */
	uint64_t bytes;			/* value bytes moved by RDMA */
};
void xp_rdma_stats(struct kvp *kvp, struct xp_rdma_stats *out);

extern const struct xport_ops xp_rdma_ops;

#endif

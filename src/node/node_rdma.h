/* node_rdma: kvpool-node's RDMA side. Opens the devices ([rdma] devices),
 * registers the whole segment as memory regions (chunked by max_mr_size),
 * builds the rdma_info blob MOUNT publishes, and answers RDMA_CONNECT by
 * creating RC queue pairs connected to the client's, which live as long as
 * that data connection. Everything runs on the node's loop thread.
 */
#ifndef KVP_NODE_RDMA_H
#define KVP_NODE_RDMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "http.h"
#include "wire.h"

struct node_rdma;
struct rdma_qps;

/* True when the configuration asks for RDMA on a node: [rdma] enabled or
 * [client] protocol = rdma. */
bool node_rdma_wanted(const struct kvp_conf *conf);
/* When wanted: opens the devices and registers [base, base + len). Any
 * failure (no device, RLIMIT_MEMLOCK, ...) is logged as a clear error and
 * leaves *out NULL: the node then serves over TCP only. Returns 0. */
/* map_off: the segment's commit map (0: none), announced to RDMA writers. */
int node_rdma_start(const struct kvp_conf *conf, void *base, uint64_t len, uint64_t map_off,
		    struct node_rdma **out);
void node_rdma_stop(struct node_rdma *r);
/* The rdma_info blob for MOUNT (empty without RDMA). */
void node_rdma_blob(const struct node_rdma *r, const void **p, size_t *n);
/* RDMA_CONNECT: decodes the client's QP record, connects new QPs on the
 * device it names and appends our record to reply. 0 and *out, or KVP_E*
 * (KVP_ENOTSUP: no RDMA here or no such device; KVP_EPROTO: bad record). */
int node_rdma_connect(struct node_rdma *r, const uint8_t *body, size_t n,
		      struct rdma_qps **out, struct wbuf *reply);
/* Destroys the QPs of a closed connection (NULL is fine). */
void node_rdma_release(struct node_rdma *r, struct rdma_qps *q);
/* Prometheus lines: devices, registered bytes, QP sets. */
void node_rdma_metrics(const struct node_rdma *r, struct sbuf *b);
/* "mlx5_0,mlx5_1" or "" */
const char *node_rdma_devices(const struct node_rdma *r);

#endif

/* node_data: kvpool-node's TCP data server — client connections (HELLO and
 * token), READ straight from the segment (tier 0, zero-copy sends) or
 * streamed from the spill file (tier 1, registered buffers), WRITE payloads
 * received straight into the segment under the master's grant, and the
 * node's side of a FREE of a segment extent. Loop thread only, no locks.
 * Owns its connections and the writes in flight; the segment (node_ctx) and
 * the spill file (the spill side's) belong to others and outlive it.
 */
#ifndef KVP_NODE_DATA_H
#define KVP_NODE_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "node_ctx.h"
#include "wire.h"

struct node_data;
struct node_rdma;
struct spill;

struct node_data_stats {
	uint64_t bytes_read;		/* READ payload bytes queued */
	uint64_t bytes_written;		/* WRITE payload bytes received */
	uint64_t conns_total, conns_rejected, conns_timed_out;
	uint64_t writes_tombstoned;	/* WRITE images that failed the check */
};

/* Binds listen_addr ("host:port") and accepts on x->loop. epoch: this
 * process's start, sent in HELLO replies; rdma: the segment's registration
 * for RDMA_CONNECT (NULL: TCP only). NULL with a message in err. */
struct node_data *node_data_create(struct node_ctx *x, const char *listen_addr, uint64_t epoch,
				   struct node_rdma *rdma, char *err, size_t errlen);
/* After the loop closed every connection (ev_destroy) and the spill file
 * ran its last callbacks (spill_close): frees the server. */
void node_data_destroy(struct node_data *d);
int node_data_bound_port(const struct node_data *d);
/* READ tier 1 comes from sp (NULL: answered KVP_ENOTSUP). */
void node_data_set_spill(struct node_data *d, struct spill *sp);
/* Grants of the master that mounted the segment, whose HELLO said epoch:
 * WRITEs are checked against them from now on (kept across master outages;
 * a new mount replaces them). The master link's. */
void node_data_set_grant(struct node_data *d, uint32_t segment_id,
			 const uint8_t secret[WIRE_SECRET_LEN], uint64_t epoch);

/* A connected client (takes fd); also used by tests and fuzzing. */
int node_data_adopt(struct node_data *d, int fd);
/* SIGHUP: re-reads cluster.tenants_file; connections whose token is gone
 * are refused (KVP_EAUTH) at their next frame and closed, RDMA ones at
 * once. A bad file keeps the old table: KVP_EINVAL, reason in err. */
int node_data_reload_tenants(struct node_data *d, char *err, size_t errlen);
void node_data_stop_accepting(struct node_data *d);
void node_data_drain(struct node_data *d);	/* close idle, mark busy ones */
void node_data_close_all(struct node_data *d);	/* the drain's deadline passed */
void node_data_sweep(struct node_data *d);	/* slow-loris timeouts */

/* A FREE of the segment extent at off of that generation (the master
 * link's): a WRITE still streaming there is marked stale (tombstoned when
 * its payload is in) and holds w until then; otherwise a live header of
 * that generation is tombstoned now. false: no such extent (stale FREE). */
bool node_data_free(struct node_data *d, uint64_t off, uint64_t generation, struct node_wait *w);

size_t node_data_conns(const struct node_data *d);	/* open connections */
uint64_t node_data_sends(const struct node_data *d);	/* zero-copy sends in flight */
bool node_data_writing(const struct node_data *d);	/* a WRITE payload in flight */
const struct node_data_stats *node_data_stats(const struct node_data *d);

#endif

/* xport: the transport seam of libkvpool. A transfer (struct xp_op) moves
 * one extent image between a caller's buffer and a segment: local (memcpy
 * through the client's MAP_SHARED mapping, xp_local.c), RDMA (xp_rdma.c) or
 * TCP (READ/WRITE frames to the owning node, xp_tcp.c). A "run" (struct
 * xp_run, xport.c) is one API call's set of transfers, driven on the calling
 * thread only: no locks inside a run; the transports take and return node
 * connections under kvp->lock (client_i.h). Adding a transport: a kind in
 * enum xp_kind (cheapest first), its ops in xport.c's xports[], and which
 * replicas it reaches in xp_path_choose() (xp_rdma.c), get_order() (get.c)
 * and put_plan() (put.c).
 */
#ifndef KVP_XPORT_H
#define KVP_XPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "extent.h"
#include "wire.h"

struct kvp;
struct kvp_iov;
struct client_seg;
struct lc_loc;

enum xp_dir { XP_READ, XP_WRITE };

/* Transport kinds, cheapest first (the order a reader tries replicas;
 * xp_path_choose() in xp_rdma.c says which one each replica may take). */
enum xp_kind { XP_LOCAL, XP_RDMA, XP_TCP, XP_NKIND };

enum xp_flag {
	/* write: compute h.value_checksum while copying the value (fused
	 * copy + checksum); the header is encoded after the value. Local only. */
	XP_F_CSUM = 1,
	/* src/dst is CUDA device memory: cudaMemcpy, checksum from the
	 * segment side. Local only (other paths stage through host memory). */
	XP_F_DEVICE = 2,
};

/* Frame header + largest request body (WRITE: 45 bytes) + extent header. */
#define XP_TX_MAX (WIRE_HDR_SIZE + 56 + EXT_HDR_SIZE)

struct xp_op {
	/* in: where */
	enum xp_dir dir;
	enum xp_kind kind;
	unsigned flags;
	struct client_seg *seg;		/* the caller holds a reference */
	uint8_t tier;			/* enum kvp_tier; local is mem only */
	uint64_t off;			/* extent offset in the segment / spill */
	uint64_t alloc_len;		/* space granted / allocated there */
	/* in: write — the header to encode (key_len, value_len, checksum,
	 * generation, seg_uuid, put_time), the key, the grant (TCP) */
	struct ext_hdr h;
	const uint8_t *key;
	uint8_t grant[WIRE_GRANT_LEN];
	uint64_t epoch;			/* of the master that granted it (TCP WRITE) */
	const void *src;		/* value, h.value_len bytes */
	/* write, niov > 0 instead of src: the value is the concatenation of
	 * these pieces (zero-length ones allowed), host memory only (no
	 * XP_F_DEVICE); valid until done() */
	const struct kvp_iov *iov;
	size_t niov;
	/* in: read — hdr receives the first hdr_len (EXT_HDR_SIZE + key length)
	 * bytes of the extent, dst the next len bytes (the value) */
	uint8_t *hdr;
	uint32_t hdr_len;
	void *dst;
	uint64_t len;
	/* out */
	int status;			/* 0 or KVP_E* */
	uint64_t csum;			/* read: xxh3 of the value as received */
	/* Completion: runs on the driving thread once status is set, outside
	 * any transport loop; may add new ops to the run (retries, the next
	 * replica of a put). */
	void (*done)(struct xp_op *op);
	void *arg;

	/* transport private */
	struct xp_op *next;
	uint64_t reqid;
	uint64_t sent;			/* request bytes sent so far */
	uint32_t tx_len;
	uint8_t tx[XP_TX_MAX];		/* frame header + body (+ extent header) */
	struct ext_csum cs;
	bool cs_on;
	size_t iov_at;			/* gathered write: piece and offset of */
	uint64_t iov_off;		/* the next value byte (local copy) */
};

/* A transport. Each call gets its own state from begin(); add() queues an
 * op (never completes it synchronously, so callers may add from inside a
 * completion); progress() does bounded work and returns how many ops are
 * still pending, having called done() on those that finished. wait says
 * whether progress may block in poll() (until something happens or the
 * call's deadline, CLOCK_MONOTONIC ms, passes: then every pending op fails
 * with KVP_ETIMEDOUT) or must return at once. end() fails whatever is left
 * and returns connections to their pools. */
struct xport_ops {
	const char *name;
	void *(*begin)(struct kvp *kvp, uint64_t deadline);
	void (*add)(void *st, struct xp_op *op);
	size_t (*progress)(void *st, bool wait);
	void (*end)(void *st);
};

extern const struct xport_ops xp_local_ops;
extern const struct xport_ops xp_tcp_ops;

/* Local path helpers (xp_local.c). A segment is "local" when its host_id is
 * ours, its shm_path maps, and dev/ino/uuid/size match the mount record.
 * Called by the segment table with no lock held; fills seg->map. */
void xp_local_attach(struct kvp *kvp, struct client_seg *seg);
void xp_local_detach(struct client_seg *seg);

/* Optimistic reads (xp_local.c): the extent at l in the local segment seg
 * (l->seg_uuid is seg's) read with no lease and no master, validated like a
 * seqlock: the header must decode live and name key with l's length,
 * generation and checksum before the copy and be byte-identical after it,
 * and the copy must hash to the checksum. Any free, tombstone or reuse
 * meanwhile fails it. 0 (dst holds the value), KVP_ESTALE (the extent no
 * longer holds it: tombstoned, another key or generation) or KVP_ECHECKSUM
 * (a header that does not decode, or a value that does not hash to its
 * checksum: damaged, or changed under the copy). check:
 * the header part only (an exists). nt: streaming stores (see
 * xp_local_nt_read). *raced: the extent was valid before the copy and
 * not after it (a free or a reuse met the read). */
int xp_local_opt_check(const struct client_seg *seg, const struct lc_loc *l, const char *key,
		       uint32_t klen);
/* Starts loading the header at l, so a batch's misses overlap. */
void xp_local_opt_prefetch(const struct client_seg *seg, const struct lc_loc *l, uint32_t klen);
int xp_local_opt_read(const struct client_seg *seg, const struct lc_loc *l, const char *key,
		      uint32_t klen, void *dst, bool nt, bool *raced);
/* Reads of a call that together reach xp_local_nt_read_min() bytes (4 MiB,
 * or a quarter of the last-level cache where that is more) stream their
 * stores. */
bool xp_local_nt_read(uint64_t call_bytes);
uint64_t xp_local_nt_read_min(void);

/* TCP helpers (xp_tcp.c): close every pooled connection of the handle. */
void xp_tcp_close_pools(struct kvp *kvp);

/* One API call's transfers over every transport (xport.c): ops are added
 * (also from completions), then xp_run_wait drives them all to completion. */
struct xp_run {
	struct kvp *kvp;
	uint64_t deadline;
	void *st[XP_NKIND];		/* each transport's state, begun on first use */
	uint64_t adds;
	struct xp_op *failed;		/* could not be queued (no memory) */
};

/* Queues op on its transport (op->kind); op->done runs from xp_run_wait. */
void xp_run_add(struct xp_run *r, struct xp_op *op);
/* Drives every transport of the run until nothing is pending, then ends
 * them (connections back to their pools). */
void xp_run_wait(struct xp_run *r);
/* True for a transfer error a retry with a fresh segment table may cure
 * (a node restarted or moved). */
bool xp_retryable(int rc);

/* The piece of op's gathered value that holds value byte pos (op->niov
 * when pos is the end), with pos's offset inside it in *off. */
size_t xp_iov_find(const struct xp_op *op, uint64_t pos, uint64_t *off);
/* xxh3-64 of op's value (src, or the concatenation of its pieces); 0 or
 * KVP_ENOMEM. */
int xp_value_checksum(const struct xp_op *op, uint64_t *csum);

/* Host memory for a device buffer's bytes on the remote paths: pinned when
 * CUDA can (DMA), else plain; freed with xp_stage_free(p, *pinned). */
void *xp_stage_alloc(size_t n, bool *pinned);
void xp_stage_free(void *p, bool pinned);
/* A device pointer in a process whose CUDA runtime we could not load
 * (cuda.c recognised it through the driver): logged, KVP_ENOTSUP. */
int xp_device_refused(const void *p);

#endif

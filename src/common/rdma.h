/* rdma: kvpool's ibverbs layer. Owns device discovery (filtered by [rdma]
 * devices), one protection domain per device, memory registration split in
 * chunks of at most max_mr_size, the rdma_info blob a node publishes in MOUNT,
 * the queue-pair exchange record of WIRE_OP_RDMA_CONNECT, RC queue pairs
 * (INIT/RTR/RTS as in rdma-core's rc_pingpong) and a transfer engine that
 * splits extent images into READ/WRITE work requests spread over the QPs of a
 * set. No global state: a context, a QP set and an engine are used by one
 * thread at a time (their owner's); only struct rdma_bounce has a lock.
 * Without a device rdma_open() fails with -ENODEV ("no RDMA device") and the
 * callers stay on TCP. Implemented in rdma.c (devices, PDs, registration,
 * QP sets, the simulated sets), rdma_codec.c (rdma_info and the QP exchange
 * record) and rdma_eng.c (bounce buffer, transfer engine).
 */
#ifndef KVP_RDMA_H
#define KVP_RDMA_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define RDMA_MAX_DEVS 8
#define RDMA_MAX_QPS 64			/* [rdma] qps_per_peer's maximum */
#define RDMA_MAX_CHUNKS 4096		/* MRs per region per device */
#define RDMA_NAME_MAX 64
#define RDMA_INFO_VERSION 2		/* written when map_off is set; 1 is read too */
#define RDMA_QP_VERSION 1
#define RDMA_PIECE_MAX (1u << 20)	/* largest work request of a split transfer */

enum rdma_link { RDMA_LINK_IB = 1, RDMA_LINK_ETH = 2 };

/* One memory region of a registered range: [addr, addr + len) with its keys.
 * In an rdma_info, lkey is 0 and addr is the node's virtual address. */
struct rdma_mr_chunk {
	uint64_t addr;
	uint64_t len;
	uint32_t lkey, rkey;
};

/* ---- pure arithmetic (unit-tested without a device) --------------------- */

/* Plans the registration of [base, base + len) in chunks of at most max_mr
 * bytes (0 = no limit) whose boundaries, except base and the end, fall on
 * page boundaries: chunk k covers [out[k].addr, out[k].addr + out[k].len),
 * contiguous, in order. Returns the number of chunks (0 for len 0), -EINVAL
 * (page not a power of two, max_mr below one page) or -E2BIG (more than cap;
 * the count needed is still returned in *need when need is not NULL). */
int rdma_mr_plan(uint64_t base, uint64_t len, uint64_t max_mr, uint64_t page,
		 struct rdma_mr_chunk *out, size_t cap, size_t *need);

/* Bytes of [addr, addr + len) that lie in the chunk holding addr, that
 * chunk's index in *idx; 0 when no chunk holds addr. Chunks are sorted and
 * contiguous (as rdma_mr_plan and rdma_info_decode make them). */
uint64_t rdma_chunk_span(const struct rdma_mr_chunk *c, uint32_t n, uint64_t addr,
			 uint64_t len, uint32_t *idx);

/* True when name is in the comma/space separated list (an empty list
 * matches every device). */
bool rdma_filter_has(const char *list, const char *name);

/* ---- the rdma_info blob of MOUNT / SEGMENTS ------------------------------
 * Layout (little-endian, wire.h's str/u* encodings), version 1:
 *   u8 version(1) u8 ndev(1..8) u64 addr u64 len
 *   ndev x { str name(1..63 bytes) u8 port u8 link_layer(1 IB, 2 Ethernet)
 *            u16 lid u8 gid[16] u32 nchunks(1..4096)
 *            nchunks x { u64 off u64 len u32 rkey } }
 * addr is the segment's base address in the node's mapping, len the bytes
 * registered from it (the whole segment file). The chunks of every device
 * start at off 0, are contiguous and sum to len. Version 2 (a segment with
 * a commit map, segmap.h) appends u64 map_off (non-zero, inside len): a
 * writer sets the byte at addr + map_off + (extent offset >> 12) after the
 * extent. Nothing else may follow. An empty blob means "no RDMA". */
struct rdma_info_dev {
	char name[RDMA_NAME_MAX];
	uint8_t port, link_layer;
	uint16_t lid;
	uint8_t gid[16];
	uint32_t nchunks;
	struct rdma_mr_chunk *chunks;	/* addr = info addr + off */
};

struct rdma_info {
	uint64_t addr, len;
	uint64_t map_off;		/* 0: no commit map (version 1) */
	uint8_t ndev;
	struct rdma_info_dev dev[RDMA_MAX_DEVS];
};

/* Appends the blob's bytes (not the u32 blob length) to b. -EINVAL when the
 * info breaks the rules above (the blob would not decode). */
int rdma_info_encode(struct wbuf *b, const struct rdma_info *info);
/* Decodes untrusted bytes into *out (one allocation: free with
 * rdma_info_free). 0, -EPROTO (malformed, message in err) or -ENOMEM. */
int rdma_info_decode(const void *p, size_t n, struct rdma_info **out, char *err, size_t errlen);
void rdma_info_free(struct rdma_info *info);

/* ---- the queue-pair exchange record of WIRE_OP_RDMA_CONNECT --------------
 * Layout, version 1:
 *   u8 version(1) str dev(1..63 bytes) u8 port u8 link_layer u16 lid
 *   u8 gid[16] u8 mtu(1..5, enum ibv_mtu) u8 rd_atomic(1..255)
 *   u8 nqp(1..64) nqp x { u32 qpn(1..2^24-1) u32 psn(< 2^24) }
 * The request names the node's device the client wants and carries the
 * client's side; the reply carries the node's side for the same nqp. */
struct rdma_qp_rec {
	char dev[RDMA_NAME_MAX];
	uint8_t port, link_layer;
	uint16_t lid;
	uint8_t gid[16];
	uint8_t mtu;
	uint8_t rd_atomic;		/* READs in flight the sender handles per QP */
	uint8_t nqp;
	uint32_t qpn[RDMA_MAX_QPS];
	uint32_t psn[RDMA_MAX_QPS];
};

int rdma_qp_rec_encode(struct wbuf *b, const struct rdma_qp_rec *r);
/* 0 or -EPROTO (message in err); trailing bytes are an error. */
int rdma_qp_rec_decode(const void *p, size_t n, struct rdma_qp_rec *r, char *err, size_t errlen);

/* ---- devices ------------------------------------------------------------ */

struct ibv_context;
struct ibv_pd;
struct ibv_mr;
struct ibv_cq;
struct ibv_qp;
struct ibv_comp_channel;

struct rdma_dev {
	char name[RDMA_NAME_MAX];
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	uint8_t port;			/* first active port */
	uint8_t link_layer;		/* enum rdma_link */
	uint16_t lid;
	uint8_t gid[16];
	int gid_index;			/* -1: none (InfiniBand uses the LID) */
	uint8_t active_mtu;		/* enum ibv_mtu */
	uint64_t max_mr_size;
	int max_qp_wr, max_sge, max_cqe;
	int max_rd_atomic;		/* min(max_qp_rd_atom, max_qp_init_rd_atom) */
	int numa_node;			/* of the PCI device, -1 unknown */
};

struct rdma_ctx {
	unsigned ndev;
	struct rdma_dev dev[RDMA_MAX_DEVS];
};

/* Opens every device in the filter (empty: all) that has an active port and
 * allocates a PD on each. 0; -ENODEV when none is usable: err says "no RDMA
 * device" (or which named devices were missing / inactive). */
int rdma_open(struct rdma_ctx *ctx, const char *filter, char *err, size_t errlen);
void rdma_close(struct rdma_ctx *ctx);
/* The device's NUMA node from sysfs (root "" = "/sys"), -1 unknown. */
int rdma_dev_numa_node(const char *sysfs_root, const char *name);
/* Names of the devices ibverbs lists (active or not), comma separated;
 * 0 devices -> "". Returns the count. */
int rdma_list_devices(char *out, size_t len);

/* A range registered on every device of a context. */
struct rdma_region {
	void *base;
	uint64_t len;
	unsigned ndev;
	struct {
		uint32_t n;
		struct ibv_mr **mr;
		struct rdma_mr_chunk *c;
	} dev[RDMA_MAX_DEVS];
};

/* Registers [base, base + len) on every device, in chunks (rdma_mr_plan with
 * the device's max_mr_size), with local write and remote read/write access
 * when remote is set. A failure names the RLIMIT_MEMLOCK limit when that is
 * the likely cause; nothing stays registered. 0 or -errno. */
int rdma_region_reg(struct rdma_ctx *ctx, void *base, uint64_t len, bool remote,
		    struct rdma_region *out, char *err, size_t errlen);
void rdma_region_dereg(struct rdma_region *r);
/* The rdma_info of a region registered with remote access (borrows its
 * chunk arrays: valid while r is). */
void rdma_region_info(const struct rdma_ctx *ctx, const struct rdma_region *r,
		      struct rdma_info *info);

/* ---- queue-pair sets ---------------------------------------------------- */

/* A completion as the engine sees it. */
struct rdma_wc {
	uint64_t wr_id;
	unsigned qp;			/* index in the set */
	int status;			/* 0 or -EIO */
	const char *msg;		/* ibv_wc_status_str(), "" on success */
};

struct rdma_sim;

/* nqp RC queue pairs on one device sharing one CQ. Created in INIT; usable
 * once connected (RTR + RTS with the peer's record). */
struct rdma_qps {
	struct rdma_dev *dev;		/* NULL for a simulated set */
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	unsigned nqp;
	unsigned depth;			/* send WRs per QP */
	struct ibv_qp *qp[RDMA_MAX_QPS];
	uint32_t psn[RDMA_MAX_QPS];
	unsigned busy[RDMA_MAX_QPS];	/* WRs posted, not yet completed */
	unsigned rd_atomic;		/* negotiated */
	bool connected;
	bool broken;			/* a completion failed: reset, do not reuse */
	struct rdma_sim *sim;
};

/* Creates the set (QPs in INIT with remote read/write access). A completion
 * channel is made when events is set (rdma_poll with a timeout sleeps on
 * it). 0 or -errno. */
int rdma_qps_create(struct rdma_dev *dev, unsigned nqp, unsigned depth, bool events,
		    struct rdma_qps **out, char *err, size_t errlen);
/* Fills rec with this side's addresses (dev name, port, lid, gid, mtu,
 * qpns, psns). */
void rdma_qps_local(const struct rdma_qps *q, struct rdma_qp_rec *rec);
/* Moves every QP to RTR then RTS against the peer's record (same nqp). */
int rdma_qps_connect(struct rdma_qps *q, const struct rdma_qp_rec *peer, char *err,
		     size_t errlen);
/* Moves every QP to RESET (outstanding WRs are dropped; nothing completes
 * any more) and marks the set broken. */
void rdma_qps_reset(struct rdma_qps *q);
void rdma_qps_destroy(struct rdma_qps *q);
/* Posts one signaled READ (write false) or WRITE of len bytes on QP i and
 * counts it in busy[i]. 0, -EAGAIN (depth WRs outstanding) or -errno. */
int rdma_post(struct rdma_qps *q, unsigned i, bool write, uint64_t wr_id, void *laddr,
	      uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t len);
/* Up to max completions (the QP's busy count drops for each); when there
 * is none and timeout_ms > 0 on a set made with events, sleeps on the
 * completion channel until one comes or the time passes. Count or -errno. */
int rdma_poll(struct rdma_qps *q, struct rdma_wc *wc, int max, int timeout_ms);

/* A software QP set for unit tests (no device): posts are checked against
 * the regions given to rdma_sim_region (both keys and bounds, as an HCA
 * does) and executed by memcpy when polled, in order. */
struct rdma_qps *rdma_sim_create(unsigned nqp, unsigned depth);
/* Declares [c.addr, c.addr + c.len) with lkey/rkey valid for the set. */
int rdma_sim_region(struct rdma_qps *q, const struct rdma_mr_chunk *c, uint32_t n);
/* The nth work request from now completes with an error (the QP set then
 * flushes, as an HCA moves the QP to the error state). */
void rdma_sim_fail_after(struct rdma_qps *q, unsigned nth);
/* While held, polls complete nothing (a slow network): work stays in
 * flight. */
void rdma_sim_hold(struct rdma_qps *q, bool hold);
/* Work requests executed so far, per QP (spread checks). */
uint64_t rdma_sim_executed(const struct rdma_qps *q, unsigned qp);

/* ---- bounce buffer ------------------------------------------------------ */

/* Fixed-size slots over one registered buffer, shared by the threads of a
 * client handle (guarded by its own lock). */
struct rdma_bounce {
	pthread_mutex_t lock;
	uint8_t *base;
	uint64_t slot;			/* bytes per slot */
	unsigned nslots, used;
	uint64_t *bits;			/* protected by lock */
};

/* len / slot slots (at least one: len >= slot). 0, -EINVAL or -ENOMEM. */
int rdma_bounce_init(struct rdma_bounce *b, void *base, uint64_t len, uint64_t slot);
void rdma_bounce_fini(struct rdma_bounce *b);
/* A free slot's index, -1 when all are taken. */
int rdma_bounce_get(struct rdma_bounce *b);
void rdma_bounce_put(struct rdma_bounce *b, int slot);
static inline uint8_t *rdma_bounce_ptr(const struct rdma_bounce *b, int slot)
{
	return b->base + (uint64_t)slot * b->slot;
}

/* ---- transfer engine ---------------------------------------------------- */

/* One extent image moved between local memory and a remote region: bytes
 * [0, hdr_len) of the image go to/come from hdr, the next vlen bytes from/to
 * val. Pieces are at most RDMA_PIECE_MAX (or a bounce slot), never cross a
 * memory-region chunk on either side, and go to the least busy QP. hdr is
 * always staged through the bounce buffer; val goes direct when lc names
 * its registration, else through bounce slots. A write with publish set
 * writes the 4 bytes of magic at raddr after every other piece completed
 * (the image's own first 4 bytes must be zero), so a scanner never sees a
 * header before its value; then, with commit set, the one byte commit at
 * commit_raddr once the magic completed (the segment's commit map).
 * A gathered write sets nvseg instead of val/lc: the value is the
 * concatenation of vseg[] (vlen bytes in all); a piece with its lc goes
 * direct, each staged run of the others shares bounce slots with the
 * header. */
struct rdma_vseg {
	const uint8_t *p;
	uint64_t len;
	const struct rdma_mr_chunk *lc;	/* p's registration, NULL: bounce */
	uint32_t nlc;
};

struct rdma_xfer {
	/* in */
	bool write;
	uint64_t raddr;
	const struct rdma_mr_chunk *rc;	/* remote region chunks */
	uint32_t nrc;
	uint8_t *hdr;
	uint32_t hdr_len;
	uint8_t *val;
	uint64_t vlen;
	const struct rdma_mr_chunk *lc;	/* val's registration, NULL: bounce */
	uint32_t nlc;
	const struct rdma_vseg *vseg;	/* write: the value in pieces (val unused) */
	uint32_t nvseg;
	bool publish;
	uint32_t magic;
	uint8_t commit;			/* 0: no commit byte */
	uint64_t commit_raddr;
	void (*done)(struct rdma_xfer *x);	/* status set; may free x */
	void *arg;
	/* out */
	int status;			/* 0, -EIO, -EFAULT (outside the region),
					 * -ECONNRESET (set broken), -ETIMEDOUT */
	/* engine private */
	uint64_t cursor;		/* image bytes handed to pieces */
	unsigned inflight;
	bool final_posted;
	bool commit_posted;
	struct rdma_xfer *next;
};

struct rdma_piece;

struct rdma_eng {
	struct rdma_piece *flying;	/* posted pieces (for abort) */
	struct rdma_qps *q;
	struct rdma_bounce *bounce;	/* may be NULL: then only direct pieces */
	const struct rdma_mr_chunk *bc;	/* the bounce buffer's registration */
	uint32_t nbc;
	struct rdma_xfer *head, *tail;	/* not completed, in order */
	size_t pending;
	unsigned rr;			/* round-robin start among equally busy QPs */
	uint64_t posted, completed;
};

void rdma_eng_init(struct rdma_eng *e, struct rdma_qps *q, struct rdma_bounce *bounce,
		   const struct rdma_mr_chunk *bc, uint32_t nbc);
void rdma_eng_add(struct rdma_eng *e, struct rdma_xfer *x);
/* Posts what fits, reaps completions (waiting up to timeout_ms for one when
 * nothing else happened and events were set up; 0 = do not wait), and runs
 * done() of finished transfers. Returns the transfers still pending. */
size_t rdma_eng_progress(struct rdma_eng *e, int timeout_ms);
/* Fails every transfer with status: first the QP set is reset so the HCA no
 * longer touches local memory, then bounce slots are returned and done()
 * runs. The set is broken afterwards. */
void rdma_eng_abort(struct rdma_eng *e, int status);

#endif

/* client_i: the types libkvpool's files share: the handle (struct kvp), the
 * segment table's entries and nodes (segtab.c), the per-node data-connection
 * pools (xp_tcp.c). Any thread may call; kvp->lock guards the pools, the
 * table and the node list and is held only to look up / take / return
 * (never across I/O). kvp->refresh_lock serialises segment-table refreshes
 * and is taken before kvp->lock. Functions live in each module's header.
 */
#ifndef KVP_CLIENT_I_H
#define KVP_CLIENT_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "clock.h"
#include "conf.h"
#include "cstats.h"
#include "kvpool.h"
#include "net.h"
#include "segment.h"
#include "wire.h"

struct lcache;
struct haloc;
struct lns_decl;
struct mconn;
struct mlocate;
struct rdma_info;
struct xp_rdma;

enum client_proto { CLIENT_AUTO, CLIENT_LOCAL, CLIENT_TCP, CLIENT_RDMA };

/* One data connection to a node (after HELLO, non-blocking) and its
 * receive buffer; owned by the pool while idle, by one call while lent. */
struct node_conn {
	int fd;
	bool pooled;			/* counted in node->nconns, else closed on return */
	uint8_t *rx;			/* xp_tcp's receive buffer */
	uint64_t idle_ms;		/* clock_now_ms() when it went back to the pool */
	struct node_conn *next;
};

/* A node's data server, found by endpoint; lives until kvp_close. */
struct client_node {
	char endpoint[CONF_STR];
	unsigned idx;			/* creation order: the order pools are waited in */
	struct node_conn *idle;		/* protected by kvp->lock */
	int nconns;			/* pooled connections open (idle + lent); kvp->lock */
	struct client_node *next;	/* kvp->nodes, append only */
};

/* One mounted segment as SEGMENTS described it. Immutable after the
 * refresh that created it, except refs; freed (and unmapped) when the last
 * reference goes: the table holds one, every transfer using it one more. */
struct client_seg {
	uint32_t id;
	char node_name[CONF_STR];
	char host_id[CONF_STR];
	char shm_path[CONF_STR];
	char endpoint[CONF_STR];
	uint64_t shm_dev, shm_ino, seg_size, seg_uuid;
	bool draining;
	uint64_t used, objects, spill_capacity, spill_used;
	int32_t numa_node;

	struct client_node *node;
	bool local;			/* mapped: memcpy reads possible */
	bool local_rw;			/* mapped writable: memcpy puts possible */
	bool ephemeral;			/* its owner removes the file when it exits */
	atomic_bool gone;		/* ... and it has (lcache.c seg_gone: for good) */
	_Atomic uint64_t gone_fstat_ms;	/* when seg_gone last looked with fstat */
	struct segment map;		/* valid when local */
	_Atomic uint64_t *filled;	/* chunks of map with page tables filled
					 * (segment_fill; NULL: fill every time) */
	/* cudaHostRegister of map (xp_local.c): 0 not tried, 1 in progress,
	 * 2 registered, 3 failed */
	atomic_int cuda_reg;
	struct rdma_info *rdma;		/* where RDMA reaches it; NULL: no RDMA */
	uint64_t rdma_hash;		/* of the rdma_info blob (seg_same) */
	int refs;			/* protected by kvp->lock */
};

struct regbuf {
	void *p;
	size_t len;
	struct regbuf *next;
};

struct kvp {
	struct kvp_conf conf;
	char host_id[CONF_STR];
	char name[64];
	enum client_proto proto;
	uint64_t timeout_ms;		/* client.timeout */
	int conns_per_node;
	uint32_t max_frame;
	size_t max_batch;
	enum net_cc cc;			/* cluster.tcp_congestion (sock.c) */
	struct tls_ctx *tls;		/* [tls] enabled: every TCP connection (tls.h) */
	atomic_bool cc_warned;		/* ... could not be set: said once */

	pthread_mutex_t lock;
	pthread_cond_t cond;		/* a pooled connection was returned or closed */

	/* master connections (mcall.c), protected by lock */
	struct mconn *midle;
	int mconns, mmax;
	uint64_t epoch;			/* server_epoch of the last HELLO */
	bool epoch_known;
	struct mlocate *loc;		/* where the master is (mlocate.c); NULL: fixed */
	struct haloc *haloc;		/* reads without a master (haloc.c); HA only */
	struct lns_decl *ns;		/* declared namespaces (lns.c) */
	size_t nns;
	uint64_t ns_gen;		/* bumped by each declaration: older connections go */
	_Atomic uint64_t master_down_until;	/* HA: no master answered; until then (ms)
						 * cached reads do not wait for one */

	/* segment table (segtab.c), protected by lock */
	pthread_mutex_t refresh_lock;
	struct client_seg **segs;
	size_t nsegs;
	bool segs_valid;		/* false: refresh before the next lookup */
	uint64_t segs_gen;		/* bumped by each refresh */
	struct client_node *nodes;
	unsigned nnodes;

	struct regbuf *bufs;		/* protected by lock */
	struct xp_rdma *rdma;		/* RDMA state (xp_rdma.c); NULL: RDMA off */
	struct lcache *lc;		/* optimistic reads (lcache.c); NULL: off */
	struct cstats cs;		/* bytes by path reported to the master (cstats.c) */

	struct {
		atomic_uint_fast64_t puts, gets, local_bytes, tcp_bytes, rdma_bytes;
		atomic_uint_fast64_t checksum_mismatches, retries;
		atomic_uint_fast64_t segment_refreshes, master_connects, node_connects;
		atomic_uint_fast64_t lease_releases, disk_gets, disk_bytes;
	} st;
};

#define client_count(kvp, field, n) \
	atomic_fetch_add_explicit(&(kvp)->st.field, (n), memory_order_relaxed)

/* Decoders of master replies (untrusted bytes), in client.c; also what
 * tests/fuzz/fuzz_client.c runs. */
struct client_stat_res {
	struct kvp_stat st;
	int status;
};

struct rbuf;

/* One STAT reply item at index i into arg (a struct client_stat_res):
 * false when the bytes are malformed. */
bool client_stat_parse(struct rbuf *r, size_t i, void *arg);
/* A LIST reply into out: 0, KVP_EPROTO or KVP_ENOMEM; on error the caller
 * frees out with kvp_list_free. */
int client_list_parse(const uint8_t *body, size_t len, struct kvp_list *out);

#endif

/* node_i: internals of the kvpool-node daemon shared by node.c (lifecycle,
 * segment, signals, drain, sd_notify, HTTP), node_master.c (the link to
 * kvpool-master: mount, report, heartbeat, FREE) and node_data.c (the TCP
 * data server: READ/WRITE). Everything here runs on the node's ev loop
 * thread; only stop_req/reload_req are touched from signal context.
 */
#ifndef KVP_NODE_I_H
#define KVP_NODE_I_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "conf.h"
#include "ev.h"
#include "node.h"
#include "segment.h"
#include "spill.h"
#include "wire.h"

struct node_rdma;
struct rdma_qps;

#define NODE_REPORT_CHUNK 4096		/* extents per REPORT frame */
#define NODE_REPORT_BYTES (1u << 20)	/* and at most this many body bytes */
#define NODE_BACKOFF_MIN_MS 100
#define NODE_BACKOFF_MAX_MS 2000
#define NODE_CONNECT_TIMEOUT_MS 2000
#define NODE_HELLO_MIN_MS 1000		/* a data connection must HELLO within */
#define NODE_HELLO_MAX_MS 60000		/* client.timeout clamped to these */
#define NODE_IDLE_MS 300000		/* data connection without a frame */
#define NODE_SWEEP_MS 500
#define NODE_ACCEPT_PAUSE_MS 100	/* after EMFILE and friends */
#define NODE_DRAIN_MS 10000		/* bound on finishing in-flight transfers */
#define NODE_UNMOUNT_WAIT_MS 2000
#define NODE_DATA_MAX_BODY 65536	/* HELLO is the largest data-server body */

enum node_mstate {
	NODE_M_IDLE,		/* nothing: waiting for the backoff timer */
	NODE_M_CONNECTING,	/* non-blocking connect in progress */
	NODE_M_HELLO,		/* HELLO sent */
	NODE_M_SCAN,		/* HELLO answered; the segment scan runs */
	NODE_M_MOUNT,		/* MOUNT sent */
	NODE_M_UP,		/* mounted; REPORTs may still be in flight */
	NODE_M_UNMOUNT,		/* UNMOUNT sent while draining */
	NODE_M_DONE,		/* unmounted or given up (draining) */
};

struct node_stats {
	uint64_t req[WIRE_OP_MAX];	/* frames handled per opcode */
	uint64_t err[WIRE_OP_MAX];	/* of those, answered with an error */
	uint64_t bytes_read;		/* READ payload bytes queued */
	uint64_t bytes_written;		/* WRITE payload bytes received */
	uint64_t conns_total, conns_rejected, conns_timed_out;
	uint64_t master_connects, master_failures;
	uint64_t mounts, remounts;
	uint64_t reported, report_adopted, report_rejected;
	uint64_t freed, free_stale;	/* FREE items tombstoned / skipped */
	uint64_t writes_tombstoned;	/* WRITE images that failed the check */
	uint64_t heartbeats;
};

/* A scan of the segment, encoded as REPORT items (WIRE_EXTENT) in chunks;
 * the frames are built once MOUNT returned the segment id. */
struct node_scan {
	struct wbuf items;
	size_t *chunk_end;		/* end offset in items of each chunk */
	uint32_t *chunk_n;		/* extents in each chunk */
	size_t nchunks, cap;
	uint64_t count, used;
};

/* A FREE from the master whose reply waits for WRITEs still streaming into
 * the freed extents: the master reuses the space only after the reply. */
struct node_fwait {
	struct wire_hdr req;
	uint32_t waiting;		/* writes still in flight */
	uint64_t mconn_gen;		/* the master connection it came on */
	struct node *node;		/* set by node_spill_free (its callbacks) */
};

/* One WRITE whose payload is being received into the segment. */
struct node_pwrite {
	struct wire_hdr req;
	uint64_t off, alloc_len, generation;
	bool freed;			/* a FREE for this extent arrived meanwhile */
	struct node_fwait *fw;		/* that FREE's reply waits for us */
	struct node_pwrite *prev, *next;
};

/* A data-server connection. Freed when both the ev_conn closed and every
 * zero-copy send referencing the segment was released. */
struct node_dconn {
	struct node *n;
	struct ev_conn *c;		/* NULL once closed */
	uint64_t created_ms;
	bool authed;
	bool writing;			/* pw is live (payload in flight) */
	bool close_when_done;		/* draining: close after the transfer */
	uint32_t sends;			/* zero-copy sends not yet released */
	struct node_pwrite pw;
	struct node_sread *sread;	/* a READ tier 1 being streamed (node_spill.c) */
	struct rdma_qps *qps;		/* RDMA_CONNECT's queue pairs; destroyed on close */
	struct node_dconn *prev, *next;
};

struct node {
	struct kvp_conf conf;
	struct ev_loop *loop;
	struct segment seg;
	bool seg_open;
	/* spill tier (node_spill.c): NULL runs memory-only */
	struct spill *spill;
	struct node_ditem *demotes;	/* DEMOTE items copying from the segment */
	struct node_sread *sread_wait;	/* streams waiting for a read buffer */
	char name[CONF_STR];
	char host_id[CONF_STR];
	char seg_name[CONF_STR + 8];
	int numa_node;			/* -1: none */
	char numa_why[128];		/* how numa_node = auto chose ("" otherwise) */
	struct node_rdma *rdma;		/* segment registered for RDMA; NULL: TCP only */
	uint64_t epoch;			/* HELLO reply: this process's start */

	/* configuration sources for SIGHUP (node_set_conf_source) */
	char **conf_files, **conf_overrides;
	size_t nconf_files;
	/* effective listen addresses (loopback-only without a token) */
	char listen_addr[CONF_STR], http_addr[CONF_STR];

	/* data server */
	int listen_fd;
	int data_port;
	char listen_host[CONF_STR];	/* host part of node.listen as bound */
	uint64_t hello_ms;		/* deadline for a connection's HELLO */
	struct node_dconn *dconns;	/* open connections */
	size_t ndconns;
	struct node_pwrite *pwrites;	/* writes in flight (for FREE) */
	uint64_t inflight_sends;

	/* HTTP */
	struct http_srv *http;

	/* master link */
	enum node_mstate mstate;
	int mfd;			/* while connecting */
	struct ev_conn *mconn;
	uint64_t mconn_gen;		/* bumped per master connection */
	uint64_t mreqid;
	uint64_t hello_req, mount_req, unmount_req;
	uint32_t reports_pending;
	uint64_t backoff_ms;
	uint64_t connect_timer, retry_timer, hb_timer;
	struct node_scan scan;		/* a finished scan, until REPORTed */
	/* The scan runs on a helper thread (a big segment takes seconds to
	 * fault in and checksum): loop-thread fields except scan_done. */
	pthread_t scan_th;
	bool scan_running;
	atomic_bool scan_done;
	int scan_rc;
	struct node_scan scan_out;	/* written by the scan thread */
	uint32_t segment_id;
	uint8_t secret[WIRE_SECRET_LEN];
	bool have_secret;		/* kept across master outages */
	char advertise[CONF_STR + 16];
	char master_addr[CONF_STR];	/* "ip:port" we last connected to */

	/* accounting (own view: scanned + TCP writes - FREEs) */
	uint64_t used, extents;

	/* lifecycle */
	bool mounted_once, ready, reported_once;
	void (*ready_cb)(void *arg);
	void *ready_arg;
	volatile sig_atomic_t stop_req, reload_req;
	bool stopping;
	bool in_drain_step;		/* re-entrancy guard */
	uint64_t drain_deadline, drain_timer, unmount_deadline;
	uint64_t sweep_timer, wd_timer;
	int run_rc;

	/* FUSE view: stopped on a helper thread so the loop keeps serving */
	struct kvfs *fs;
	pthread_t fs_thread;
	bool fs_stopping;
	atomic_bool fs_stopped;

	struct node_stats st;
};

/* node.c */
void node_status(struct node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void node_mounted(struct node *n);	/* MOUNT + REPORTs done */
void node_drain_step(struct node *n);	/* re-check drain progress */
/* Invalidates the extent at off (alloc_len bytes): tombstones a decodable
 * header, or writes a tombstone header over a garbage one so a scan skips
 * exactly alloc_len. */
void node_kill_extent(struct node *n, uint64_t off, uint64_t alloc_len, uint64_t generation);

/* node_master.c */
void node_master_start(struct node *n);	/* connect now */
void node_master_heartbeat(struct node *n);
int node_master_unmount(struct node *n);	/* 0 sent, -ENOTCONN not mounted */
void node_master_close(struct node *n);
void node_master_free_done(struct node *n, struct node_fwait *fw);
void node_master_scan_done(struct node *n);	/* from the wake callback */
void node_master_scan_join(struct node *n);	/* at exit */
/* Tests and fuzzing: run the master link on a connected fd as if MOUNT had
 * returned segment_id and secret (takes fd). */
int node_master_adopt(struct node *n, int fd, uint32_t segment_id,
		      const uint8_t secret[WIRE_SECRET_LEN]);
void node_scan_free(struct node_scan *s);
int node_scan_segment(struct node *n, struct node_scan *s);
int node_scan_start(struct node *n);	/* on the helper thread */
const char *node_mstate_name(enum node_mstate s);

/* node_data.c */
int node_data_listen(struct node *n, char *err, size_t errlen);
int node_data_adopt(struct node *n, int fd);	/* a connected client (takes fd) */
void node_data_stop_accepting(struct node *n);
void node_data_drain(struct node *n);	/* close idle, mark busy ones */
void node_data_sweep(struct node *n);	/* slow-loris timeouts */
/* A FREE names (off, generation): marks a WRITE in flight there stale (it
 * is tombstoned when it completes) and makes fw wait for it. Returns true
 * if such a write was found. */
bool node_data_freed(struct node *n, uint64_t off, uint64_t generation,
		     struct node_fwait *fw);
/* Frees d once it is closed and nothing refers to it any more. */
void node_data_maybe_free(struct node_dconn *d);

/* node_master.c: appends the spill index as tier 1 REPORT items. */
int node_scan_add_spill(struct node *n, struct node_scan *s);

/* node_spill.c */
void node_spill_open(struct node *n);	/* [spill] configured: open + scan, else nothing */
void node_spill_close(struct node *n);
uint64_t node_spill_capacity(const struct node *n);
uint64_t node_spill_used(const struct node *n);
struct sbuf;
void node_spill_metrics(struct node *n, struct sbuf *b);
int node_spill_foreach(struct node *n, int (*cb)(const struct ext_found *f, void *arg),
		       void *arg);
void node_spill_on_demote(struct node *n, const struct wire_hdr *h, const uint8_t *body);
void node_spill_on_promote(struct node *n, const struct wire_hdr *h, const uint8_t *body);
/* FREE tier 1: true if a tombstone was started (fw waits for it). */
bool node_spill_free(struct node *n, uint64_t off, uint64_t generation, struct node_fwait *fw);
/* FREE tier 0: makes fw wait for demotions still copying that extent. */
bool node_spill_mem_freed(struct node *n, uint64_t off, uint64_t generation,
			  struct node_fwait *fw);
void node_spill_read(struct node_dconn *d, const struct wire_hdr *h, uint64_t off, uint64_t len);
void node_spill_conn_closed(struct node_dconn *d);	/* d->c already NULL */

#endif

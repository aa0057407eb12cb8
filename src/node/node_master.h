/* node_master: kvpool-node's link to kvpool-master — non-blocking connect
 * with backoff, HELLO, a scan of the segment (node_scan.h), MOUNT, REPORTs,
 * HEARTBEAT, UNMOUNT on shutdown; and the master's requests: FREE (handed
 * to the data server and the spill side, answered once they let go),
 * DEMOTE and PROMOTE (executed by the spill side). After any break the
 * segment is scanned and mounted again. Loop thread only, no locks. Owns
 * the master connection and its state; calls down into node_data.h and
 * node_spill.h, and up only through the callbacks node.c sets.
 */
#ifndef KVP_NODE_MASTER_H
#define KVP_NODE_MASTER_H

#include <stdbool.h>
#include <stdint.h>

#include "node_ctx.h"
#include "wire.h"

struct node_data;
struct node_mlink;
struct node_rdma;
struct node_spillside;

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

struct node_mlink_stats {
	uint64_t master_connects, master_failures;
	uint64_t mounts, remounts;
	uint64_t reported, report_adopted, report_rejected;
	uint64_t checksum_mismatches;	/* extents a scan found corrupt (not reported) */
	uint64_t freed, free_stale;	/* FREE items tombstoned / skipped */
	uint64_t heartbeats;
};

struct node_mlink_opts {
	const char *name, *host_id;	/* the node's, sent in HELLO and MOUNT */
	int numa_node;			/* sent in MOUNT; -1 none */
	const char *listen_host;	/* data server's host as bound ("" or a wildcard:
					 * advertise our side of the master connection) */
	int data_port;
	struct node_rdma *rdma;		/* its blob goes into MOUNT; NULL: TCP only */
	struct node_data *data;		/* gets the grants; FREEs of segment extents */
	struct node_spillside *spill;	/* DEMOTE, PROMOTE, FREE tier 1, spill REPORTs */
	/* node.c's: systemd STATUS= text (msg valid during the call) */
	void (*status)(void *arg, const char *msg);
	/* MOUNT answered, every REPORT too, and the HEARTBEAT sent behind them:
	 * the master allocates in the segment now (each mount, not only the
	 * first) */
	void (*mounted)(void *arg);
	void *cb_arg;
};

/* Nothing connects yet (node_master_start). Strings are copied. NULL: no memory. */
struct node_mlink *node_master_create(struct node_ctx *x, const struct node_mlink_opts *o);
/* After node_master_close, the loop's end and the spill side's last
 * callbacks (FREE and DEMOTE replies that still name the link). */
void node_master_destroy(struct node_mlink *ml);
void node_master_start(struct node_mlink *ml);		/* connect now */
void node_master_heartbeat(struct node_mlink *ml);
int node_master_unmount(struct node_mlink *ml);		/* 0 sent, -ENOTCONN not mounted */
void node_master_close(struct node_mlink *ml);		/* no retry after this */
void node_master_scan_done(struct node_mlink *ml);	/* the loop woke: scan finished? */
void node_master_scan_join(struct node_mlink *ml);	/* at exit */
/* Tests and fuzzing: run the link on a connected fd as if MOUNT had
 * returned segment_id and secret (takes fd). */
int node_master_adopt(struct node_mlink *ml, int fd, uint32_t segment_id,
		      const uint8_t secret[WIRE_SECRET_LEN]);

enum node_mstate node_master_state(const struct node_mlink *ml);
const char *node_master_state_name(enum node_mstate s);
uint32_t node_master_segment_id(const struct node_mlink *ml);
const char *node_master_addr(const struct node_mlink *ml);	/* "ip:port" last connected */
const char *node_master_advertise(const struct node_mlink *ml);	/* data endpoint sent */
const struct node_mlink_stats *node_master_stats(const struct node_mlink *ml);

#endif

/* node_scan: lists the extents a node holds as REPORT items (WIRE_EXTENT),
 * cut into chunks that each fit one REPORT frame — the segment by a scan
 * of its bytes (on a helper thread, struct node_scanner: a big segment takes
 * seconds to fault in and checksum), the spill tier from its index. The
 * frames are built by the master link once MOUNT returned the segment id.
 * A struct node_scan belongs to one thread at a time: the scanner's until it
 * reports done, then the loop thread's.
 */
#ifndef KVP_NODE_SCAN_H
#define KVP_NODE_SCAN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "extent.h"
#include "wire.h"

struct ev_loop;
struct segment;

#define NODE_REPORT_CHUNK 4096		/* extents per REPORT frame */
#define NODE_REPORT_BYTES (1u << 20)	/* and at most this many body bytes */

struct node_scan {
	struct wbuf items;
	size_t *chunk_end;		/* end offset in items of each chunk */
	uint32_t *chunk_n;		/* extents in each chunk */
	size_t nchunks, cap;
	uint64_t count, used;		/* tier 0 (the segment) only */
	uint64_t bad_checksum;		/* extents left out: their value did not match its checksum */
};

void node_scan_free(struct node_scan *s);	/* and empties it */

/* Appending extents of one tier to a scan: node_scan_add_begin, then
 * node_scan_add_cb for each extent (an ext_scan / spill_foreach callback),
 * then node_scan_add_end. Fields are the appender's own. */
struct node_scan_add {
	struct node_scan *s;
	size_t max_bytes;		/* REPORT body budget per frame */
	uint8_t tier;			/* of the extents being listed */
	size_t cur_start;
	uint32_t cur_n;
	uint64_t added, added_bytes;	/* extents appended by this appender */
	int err;
};

/* max_frame: cluster.max_frame (the master refuses bodies over it; 0 = no
 * limit). */
void node_scan_add_begin(struct node_scan_add *a, struct node_scan *s, uint8_t tier,
			 uint64_t max_frame);
int node_scan_add_cb(const struct ext_found *f, void *a);	/* non-zero: stop */
int node_scan_add_end(struct node_scan_add *a);			/* 0 or -ENOMEM */

/* Scans the segment into s (emptied first), clearing commit-map bytes
 * that vouch for nothing: 0 or -ENOMEM. Any thread; the segment's mapping
 * must stay. */
int node_scan_segment(struct node_scan *s, const struct segment *seg, uint64_t max_frame);

/* A segment scan on a helper thread, which wakes loop when it is done. */
struct node_scanner {
	const struct segment *seg;	/* set before node_scan_start */
	struct ev_loop *loop;
	uint64_t max_frame;
	pthread_t th;
	bool running;			/* loop thread */
	atomic_bool done;		/* set by the scan thread */
	int rc;				/* the scan's result, valid once done */
	struct node_scan out;		/* written by the scan thread */
};

/* 0, or -EAGAIN: no thread (the caller may scan itself). */
int node_scan_start(struct node_scanner *sc);
/* After a wake-up: true once the scan thread finished (it is joined; rc and
 * out are the loop thread's now). */
bool node_scan_finished(struct node_scanner *sc);
void node_scan_join(struct node_scanner *sc);	/* at exit: waits, drops the result */

#endif

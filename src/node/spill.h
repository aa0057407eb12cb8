/* spill: kvpool-node's disk tier — one preallocated spill file (a segment
 * header at offset 0, self-describing extents after it, each carrying the
 * spill file's own uuid), its space allocator, and an io_uring with the file
 * and an aligned buffer pool registered. O_DIRECT where the filesystem takes
 * it, buffered otherwise. Runs on the node's loop thread (completions are
 * signalled on an eventfd the loop watches); no locks. spill_scan alone may
 * run on a helper thread, before anything else touches the spill.
 */
#ifndef KVP_SPILL_H
#define KVP_SPILL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "extent.h"

#define SPILL_ALIGN 4096		/* extent alignment, O_DIRECT block */
#define SPILL_DATA_OFF 4096		/* the header block comes first */
#define SPILL_CHUNK (1u << 20)		/* one registered buffer, one I/O piece */
#define SPILL_NBUCKETS 16		/* latency histogram buckets (+Inf implied) */

struct spill;
struct sbuf;

struct spill_opts {
	const char *path;	/* the spill file (created if missing) */
	uint64_t size;		/* whole file, header included; rounded down to 4 KiB */
	bool direct_io;		/* try O_DIRECT (falls back to buffered, one log line) */
	unsigned queue_depth;	/* io_uring entries; 0 = 32 */
	unsigned nbufs;		/* buffers for spill_buf_get; 0 = 16 */
	size_t buf_size;	/* their size, rounded up to 4 KiB; 0 = SPILL_CHUNK */
	int mode;		/* 0 = 0600 */
	const char *name;	/* recorded in the header (the node's name) */
	uint64_t max_value;	/* largest value a scan accepts; 0 = any */
	int lock_wait_ms;	/* wait this long for a locked file; 0 = 2000, < 0 = no wait */
};

/* Completion of an asynchronous operation: status 0 or a negative errno;
 * off/len: where the extent now lives (spill_demote: spill offset and
 * alloc_len), else the request's values. Runs inside spill_complete. */
typedef void (*spill_done_fn)(void *arg, int status, uint64_t off, uint64_t len);

/* Opens or creates the spill file and its ring. The file is locked; a
 * second opener waits lock_wait_ms (an owner killed with -9 holds the lock
 * until the kernel has torn its ring down), then fails with -EBUSY. A file
 * with a valid header of the same size is reused (its extents come back
 * with spill_scan); a file of another size is re-created (it is a cache); a
 * non-empty file that is not a kvpool spill or segment file is refused.
 * Space is reserved with fallocate: a full filesystem fails here (-ENOSPC,
 * err names the free space) and leaves no file behind. NULL with -errno in
 * *rc and a message. */
struct spill *spill_open(const struct spill_opts *o, int *rc, char *err, size_t errlen);
/* Waits for in-flight I/O (their callbacks run), then closes. */
void spill_close(struct spill *sp);

/* eventfd that turns readable when completions wait; the loop then calls
 * spill_complete, which runs the callbacks and submits queued work. */
int spill_event_fd(const struct spill *sp);
void spill_complete(struct spill *sp);
/* Blocks until every operation submitted so far has completed (tests,
 * shutdown). */
void spill_wait_idle(struct spill *sp);
/* Nothing queued or in flight. */
bool spill_idle(const struct spill *sp);

/* Finds the extents already in the file (after spill_open of an existing
 * file): reads it in large sequential chunks, verifies each value checksum,
 * reserves every good extent in the allocator and enters it in the index;
 * cb (may be NULL) sees each one (f->key valid during the call). Once,
 * before any other operation, on any single thread: 0, -EALREADY, -errno. */
int spill_scan(struct spill *sp, int (*cb)(const struct ext_found *f, void *arg), void *arg,
	       struct ext_scan_stats *st);
/* Calls cb for every live extent in the index (scanned or demoted since,
 * not freed): what a node REPORTs after a re-mount, without reading the
 * file. f->key is valid during the call. cb returns non-zero to stop. */
int spill_foreach(const struct spill *sp, int (*cb)(const struct ext_found *f, void *arg),
		  void *arg);
/* The live extent starting at off (f may be NULL): false if none. */
bool spill_lookup(const struct spill *sp, uint64_t off, struct ext_found *f);

/* Copies the live extent at ext (avail bytes readable there, e.g. in the
 * segment) to newly allocated spill space, rewriting its header with the
 * spill file's uuid. The bytes at ext must stay unchanged until cb runs.
 * Returns 0 (cb follows: 0 with the spill offset and alloc_len, or -EIO)
 * or, with nothing started: -ENOSPC (no spill room), -ESTALE (not a live
 * extent there, or another generation), -EBADMSG (value checksum wrong). */
int spill_demote(struct spill *sp, const void *ext, uint64_t avail, uint64_t generation,
		 spill_done_fn cb, void *arg);
/* Copies the spill extent at off (of that generation) into dst (dst_len
 * bytes of room, e.g. a segment extent the master allocated), verifies what
 * it read and rewrites the header with dst_uuid. 0 (cb follows: 0 with len
 * = the extent's size, -EBADMSG, -EIO) or now: -ESTALE (no live extent at
 * off, or another generation), -ERANGE (does not fit in dst_len). */
int spill_promote(struct spill *sp, uint64_t off, uint64_t generation, void *dst,
		  uint64_t dst_len, uint64_t dst_uuid, spill_done_fn cb, void *arg);
/* Reads [off, off+len) of the file into dst. dst may be any memory; a
 * pool buffer (spill_buf_get) is read with READ_FIXED. 0 or -EINVAL (range
 * outside the data area, or off unaligned with direct I/O) now, cb later. */
int spill_read(struct spill *sp, uint64_t off, uint64_t len, void *dst,
	       spill_done_fn cb, void *arg);
/* Tombstones the live extent at off if it holds that generation (a header
 * block rebuilt from the index, one write), then releases its space and
 * forgets it. 0 (cb follows: 0 or -EIO) or now: -ESTALE (no live extent
 * there, already being freed, or another generation). */
int spill_free(struct spill *sp, uint64_t off, uint64_t generation,
	       spill_done_fn cb, void *arg);

/* Registered, SPILL_ALIGN-aligned buffers of spill_buf_size() bytes for
 * streaming reads (NULL when all are in use); give each back with
 * spill_buf_put. */
void *spill_buf_get(struct spill *sp);
void spill_buf_put(struct spill *sp, void *buf);
size_t spill_buf_size(const struct spill *sp);
unsigned spill_bufs_free(const struct spill *sp);

/* Is [off, off+len) inside the data area? */
bool spill_range_ok(const struct spill *sp, uint64_t off, uint64_t len);
uint64_t spill_uuid(const struct spill *sp);
bool spill_is_direct(const struct spill *sp);
bool spill_created(const struct spill *sp);	/* this open created the file */
const char *spill_path(const struct spill *sp);

struct spill_stats {
	uint64_t capacity;		/* data area bytes */
	uint64_t used;			/* allocated bytes */
	uint64_t extents;		/* live extents */
	uint64_t demotions, demote_errors;
	uint64_t promotions, promote_errors;
	uint64_t frees, free_stale;
	uint64_t reads, read_errors;
	uint64_t read_bytes, write_bytes;	/* file I/O bytes */
	uint64_t queued;		/* operations waiting for ring or buffers */
	uint64_t inflight;		/* SQEs submitted, not completed */
	/* latency of whole operations (submit to callback), seconds buckets
	 * spill_buckets[], count in [SPILL_NBUCKETS] = +Inf */
	uint64_t read_hist[SPILL_NBUCKETS + 1], write_hist[SPILL_NBUCKETS + 1];
	uint64_t read_ns, write_ns;	/* sums */
	bool direct;
};
extern const double spill_buckets[SPILL_NBUCKETS];

void spill_stats(const struct spill *sp, struct spill_stats *st);
/* Appends Prometheus text (kvpool_node_spill_*) for sp to b. */
void spill_metrics(const struct spill *sp, struct sbuf *b);

#endif

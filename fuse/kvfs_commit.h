/* kvfs_commit: where values written through the view reach the pool — the
 * put (or replacement) of a closed file, at once or, for values up to
 * [fuse] write_behind, behind the close and many per round trip — and the
 * page-cache invalidations that follow a change. One committer thread per
 * mount runs the queue; its lock comes before fs->lock (kvfs_fs.h). A
 * node's queued value stays readable through the view until it is stored.
 */
#ifndef KVP_KVFS_COMMIT_H
#define KVP_KVFS_COMMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvfs_fs.h"

struct kvfs_node;
struct kvfs_blob;

/* Starts the committer thread; -errno. */
int kvfs_commit_start(struct kvfs *fs);
/* Stores what is queued, then ends the thread (at unmount). */
void kvfs_commit_stop(struct kvfs *fs);

/* Puts len bytes under key now, replacing an existing value when replace
 * (readers see the old value or the new one, never a mix). A KVP_E* code. */
int kvfs_store(struct kvfs *fs, const char *key, const void *buf, size_t len, bool replace);

/* Times set (utimes) on n before its value was stored go to fs->times
 * for the stored value of key (a pool stat learns its put time). */
void kvfs_commit_times(struct kvfs *fs, struct kvfs_node *n, const char *key);

/* Queues the closed value b of n (taking the caller's reference on b and
 * setting n->queued); the put happens on the committer thread. Waits while
 * the queue is full. -ENOMEM. */
int kvfs_commit_queue(struct kvfs *fs, struct kvfs_node *n, struct kvfs_blob *b, bool replace);
/* Waits until n has nothing queued or being put; the errno of the commits
 * that failed since the last call (0 if none). */
int kvfs_commit_wait(struct kvfs *fs, struct kvfs_node *n);
/* Waits until what was queued before the call is stored (sync MNT, fsync
 * of a directory, a listing): EIO if a put failed since the last call
 * that reported (report: this one does). */
int kvfs_commit_wait_all(struct kvfs *fs, bool report);
/* Whether nothing is queued or being put. */
bool kvfs_commit_idle(struct kvfs *fs);
/* Takes n's queued value out of the queue if its put has not started
 * (*b gets the reference, *replace its mode; n->queued stays set for the
 * caller to clear or requeue); else waits for it and returns false. */
bool kvfs_commit_take(struct kvfs *fs, struct kvfs_node *n, struct kvfs_blob **b, bool *replace);

/* Queues an invalidation of the kernel's cached pages of ino (run on the
 * committer thread: never inside a request). -ENOMEM. Called with fs->lock
 * held; the node stays while n->inval_queued is set. */
int kvfs_commit_inval(struct kvfs *fs, uint64_t ino);

/* Counters for .kvpool/stats. */
struct kvfs_commit_stats {
	uint64_t queued, stored, failed, batches;
};
void kvfs_commit_stats(struct kvfs *fs, struct kvfs_commit_stats *st);

#endif

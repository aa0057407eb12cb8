/* kvfs_times: the modification and access times set through the view
 * (utimes, touch -d, tar, rsync -t, cp -p), kept in this mount's memory
 * for the value they were set on: an entry holds while the key's put time
 * is the one it names, so a replaced value shows its own put time again.
 * The pool keeps no times of its own but the put time. Any libfuse worker
 * thread; the caller holds fs->lock (every function is _locked).
 */
#ifndef KVP_KVFS_TIMES_H
#define KVP_KVFS_TIMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvfs_time_ent;

struct kvfs_times {
	struct kvfs_time_ent **b;	/* chained buckets, nb a power of two */
	size_t nb, n;
};

/* Most entries kept: beyond it, set times are accepted and not kept. */
#define KVFS_TIMES_MAX (1u << 20)

void kvfs_times_free_locked(struct kvfs_times *t);
/* Records the times set on key's value of put time put_ns (replacing an
 * older record). -ENOMEM, or -ENOSPC past KVFS_TIMES_MAX. */
int kvfs_times_set_locked(struct kvfs_times *t, const char *key, size_t len, uint64_t put_ns,
			  uint64_t mtime_ns, uint64_t atime_ns);
/* The times set on key's value of put time put_ns, if any. */
bool kvfs_times_get_locked(const struct kvfs_times *t, const char *key, size_t len,
			   uint64_t put_ns, uint64_t *mtime_ns, uint64_t *atime_ns);
void kvfs_times_drop_locked(struct kvfs_times *t, const char *key, size_t len);

#endif

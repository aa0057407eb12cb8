/* kvfs_fs: the state of one mounted view (struct kvfs) and its pool
 * handle, the bottom layer every other kvfs module uses (the clocks are
 * net.h's). Fields are fixed after start except those marked; kvfs_kvp
 * runs on any thread under fs->kvp_lock. Lock order, for the whole view:
 * a handle's lock (open file or directory), then the commit queue's lock
 * (kvfs_commit.c), then fs->lseg_lock or fs->lock, then fs->kvp_lock.
 * fs->lock is never held across a pool call.
 */
#ifndef KVP_KVFS_FS_H
#define KVP_KVFS_FS_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "conf.h"
#include "kvfs.h"
#include "kvfs_times.h"
#include "kvpool.h"
#include "kvpool_i.h"

struct kvfs_node;
struct kvfs_lseg;
struct kvfs_commit;
struct kvfs_uring;

struct kvfs {
	struct kvp_conf conf;
	char mnt[4096];
	struct fuse_session *se;
	pthread_t thread;
	bool thread_started;
	bool foreground_loop;
	unsigned dev_major, dev_minor;	/* of the mount, from mountinfo */
	/* INIT (kvfs_io.c): written before any other request is read */
	uint64_t init_unique;
	bool init_seen;			/* with FUSE_INIT_EXT: init_flags2 holds its flags2 */
	uint32_t init_flags2;		/* what the kernel offers above bit 31 */
	bool dio_mmap;			/* asked for: direct-I/O files can be mmap'd */
	int uring_mode;			/* [fuse] io_uring, KVFS_URING_* */
	struct kvfs_uring *uring;	/* FUSE over io_uring (kvfs_uring.c), set at INIT */

	/* options, fixed at start */
	bool ro;
	double attr_timeout;		/* seconds */
	double entry_timeout;
	mode_t fmode;
	uid_t uid;
	gid_t gid;
	uint64_t max_object;
	uint32_t max_io;		/* max_read / max_write negotiated */
	uint64_t mount_ns;
	char host_id[64];

	/* the pool handle; reopened lazily after a failed start */
	pthread_mutex_t kvp_lock;
	struct kvp *kvp;
	uint64_t kvp_retry_ms;

	/* the inode table (kvfs_node.c) and the node fields marked so */
	pthread_mutex_t lock;
	pthread_cond_t pending_done;	/* with lock: a file stopped being written */
	struct kvfs_node **by_ino;	/* chained hash tables, nbuckets each */
	struct kvfs_node **by_name;
	size_t nbuckets;
	size_t nnodes;
	struct kvfs_node *root;
	struct kvfs_node *memdirs;
	struct kvfs_times times;	/* utimes kept per value (kvfs_times.h) */

	struct kvfs_commit *commit;	/* write-behind and invalidations (kvfs_commit.c) */

	pthread_mutex_t lseg_lock;
	struct kvfs_lseg *lsegs;	/* mapped local segments (kvfs_local.c) */
	_Atomic uint64_t local_filled;	/* bytes of them whose page tables opens filled */

	/* statfs cache, under lock */
	uint64_t info_until;
	uint64_t info_keys, info_used, info_capacity;
};

/* The pool handle, opening it if needed; NULL and *err (a KVP_E*) when the
 * master cannot be reached. */
struct kvp *kvfs_kvp(struct kvfs *fs, int *err);

#endif

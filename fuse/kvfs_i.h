/* kvfs_i.h: internals of the FUSE view shared by kvfs.c (session, mount,
 * start/stop/main), kvfs_ops.c (operations, inode table), kvfs_local.c
 * (same-host segment reads) and kvfs_ctl.c (the .kvpool/ texts). libfuse's
 * worker threads call the operations concurrently; fs->lock guards the
 * inode table and the node fields marked so and is never held across a
 * pool call. Lock order: a handle's lock, then fs->lseg_lock or fs->lock,
 * then fs->kvp_lock.
 */
#ifndef KVP_KVFS_I_H
#define KVP_KVFS_I_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "conf.h"
#include "kvfs.h"
#include "kvfs_name.h"
#include "kvpool.h"
#include "kvpool_i.h"

#define KVFS_NAME_BUF (KVFS_NAME_MAX + 1)

enum kvfs_kind {
	KN_DIR = 1,	/* raw = prefix: "" (the root) or ending with '/' */
	KN_PIECE,	/* continuation of a long component: raw ends inside it */
	KN_FILE,	/* raw = key */
	KN_CTL_DIR,	/* .kvpool */
	KN_CTL_STATS,	/* .kvpool/stats */
	KN_CTL_NODES,	/* .kvpool/nodes */
	KN_CTL_NODE,	/* .kvpool/nodes/NODE, raw = node name */
	KN_CTL_INFO,	/* .kvpool/nodes/NODE/info */
	KN_CTL_EXTENTS,	/* .kvpool/nodes/NODE/extents */
};

#define KVFS_INO_CTL_DIR 2
#define KVFS_INO_CTL_STATS 3
#define KVFS_INO_CTL_NODES 4
#define KVFS_INO_MIN 16		/* hashed inode numbers start here */

/* One value, fetched once and shared by the handles that opened the same
 * generation; immutable after it is published. Refcounted under fs->lock. */
struct kvfs_blob {
	unsigned refs;			/* open handles */
	uint64_t generation;
	size_t len;
	size_t maplen;			/* mmap'd (huge pages) when non-zero */
	char *data;
};

struct kvfs_wbuf;

/* An inode. Fields after the first block are protected by fs->lock. */
struct kvfs_node {
	uint64_t ino;
	enum kvfs_kind kind;
	char *raw;			/* key, prefix or node name (NUL-terminated) */
	size_t rawlen;
	uint64_t parent;		/* inode of the directory it was found in */
	char name[KVFS_NAME_BUF];	/* its name there */

	uint64_t nlookup;		/* the kernel's references */
	unsigned refs;			/* open handles */
	bool memdir;			/* made by mkdir; lives until a key appears */
	bool alias;			/* DIR shown as NAME%% (an object NAME exists) */
	uint64_t fresh_until;		/* ms (monotonic): cached attributes valid */
	uint64_t size;			/* FILE */
	uint64_t mtime_ns;
	uint64_t atime_ns;
	uint64_t generation;		/* FILE: of the last open (0 unknown) */
	struct kvfs_wbuf *pending;	/* FILE being written */
	struct kvfs_blob *blob;		/* FILE: the latest value some handle holds */

	struct kvfs_node *ino_next;
	struct kvfs_node *name_next;
	struct kvfs_node *mem_next;	/* list of memdirs */
};

struct kvfs {
	struct kvp_conf conf;
	char mnt[4096];
	struct fuse_session *se;
	pthread_t thread;
	bool thread_started;
	bool foreground_loop;
	unsigned dev_major, dev_minor;	/* of the mount, from mountinfo */

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

	pthread_mutex_t lock;
	struct kvfs_node **by_ino;	/* chained hash tables, nbuckets each */
	struct kvfs_node **by_name;
	size_t nbuckets;
	size_t nnodes;
	struct kvfs_node *root;
	struct kvfs_node *memdirs;

	pthread_mutex_t lseg_lock;
	struct kvfs_lseg *lsegs;	/* mapped local segments, under lseg_lock */

	/* statfs cache, under lock */
	uint64_t info_until;
	uint64_t info_keys, info_used, info_capacity;
};

/* kvfs_ops.c */
extern const struct fuse_lowlevel_ops kvfs_ops;
int kvfs_tables_init(struct kvfs *fs);
void kvfs_tables_free(struct kvfs *fs);
/* The pool handle, opening it if needed; NULL and *err (a KVP_E*) when the
 * master cannot be reached. */
struct kvp *kvfs_kvp(struct kvfs *fs, int *err);
uint64_t kvfs_now_ms(void);

/* kvfs_local.c: same-host reads from a read-only segment mapping. */
/* A live memory replica of (key, st) in a segment on this host: *hdr
 * points at its extent header in the mapping. 0 or -ENOENT. */
int kvfs_local_find(struct kvfs *fs, const char *key, size_t keylen, const struct kvp_stat *st,
		    const uint8_t **hdr);
/* Where the value starts, from a header kvfs_local_find checked. */
const uint8_t *kvfs_local_value(const uint8_t *hdr);
/* Copies [off, off + len) of the value into dst; 0 when the extent was
 * still that generation after the copy, else -ESTALE (dst is garbage). */
int kvfs_local_copy(const uint8_t *hdr, const uint8_t *value, uint64_t generation, void *dst,
		    uint64_t off, size_t len);
/* This thread's copy buffer of at least len bytes (NULL: out of memory). */
void *kvfs_local_bounce(size_t len);
void kvfs_local_free(struct kvfs *fs);

/* kvfs_ctl.c: texts of the control files, malloc'd into *out. */
int kvfs_ctl_stats(struct kvfs *fs, char **out, size_t *len);
int kvfs_ctl_node_info(struct kvfs *fs, const char *node, char **out, size_t *len);
int kvfs_ctl_node_extents(struct kvfs *fs, const char *node, char **out, size_t *len);
/* Node names for .kvpool/nodes (malloc'd array of malloc'd strings). */
int kvfs_ctl_node_names(struct kvfs *fs, char ***names, size_t *n);
bool kvfs_ctl_node_exists(struct kvfs *fs, const char *node);

#endif

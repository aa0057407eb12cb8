/* kvfs_node: the inode table of the view — one node per key, prefix,
 * chain piece or control file the kernel knows, found by inode number or
 * by (kind, raw) — the empty directories made by mkdir, and the attributes
 * stat shows. Any libfuse worker thread; fs->lock guards the table and the
 * node fields marked so (the *_locked functions expect it held).
 *
 * Inode numbers are a hash of (kind, key or prefix), so readdir's d_ino and
 * stat's st_ino agree and a key keeps its number while the mount lives.
 */
#ifndef KVP_KVFS_NODE_H
#define KVP_KVFS_NODE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "kvfs_fs.h"
#include "kvfs_name.h"

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
	KN_CTL_SEGMENTS,	/* .kvpool/segments: this host's segment files */
};

#define KVFS_INO_CTL_DIR 2
#define KVFS_INO_CTL_STATS 3
#define KVFS_INO_CTL_NODES 4
#define KVFS_INO_CTL_SEGMENTS 5
#define KVFS_INO_MIN 16		/* hashed inode numbers start here */

struct kvfs_wbuf;
struct kvfs_blob;

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
	struct kvfs_wbuf *pending;	/* FILE being written (kvfs_fh.h) */
	struct kvfs_blob *blob;		/* FILE: the latest value some handle holds */

	struct kvfs_node *ino_next;
	struct kvfs_node *name_next;
	struct kvfs_node *mem_next;	/* list of memdirs */
};

/* The table with the root and the fixed control nodes; -ENOMEM. */
int kvfs_tables_init(struct kvfs *fs);
void kvfs_tables_free(struct kvfs *fs);

struct kvfs_node *kvfs_node_by_ino_locked(struct kvfs *fs, uint64_t ino);
struct kvfs_node *kvfs_node_by_name_locked(struct kvfs *fs, enum kvfs_kind kind,
					   const char *raw, size_t len);
/* Finds or creates the node of (kind, raw); NULL when out of memory. */
struct kvfs_node *kvfs_node_get_locked(struct kvfs *fs, enum kvfs_kind kind, const char *raw,
				       size_t len, uint64_t parent, const char *name);
/* Frees a node nobody refers to any more: not the kernel, no open handle,
 * not a remembered empty directory, not the root or a control file. */
void kvfs_node_maybe_free_locked(struct kvfs *fs, struct kvfs_node *n);
/* Whether a remembered empty directory or a file being written has the
 * directory ino as its parent. */
bool kvfs_node_busy_dir_locked(struct kvfs *fs, uint64_t ino);

/* Gets the node of ino with a handle reference (refs++), or NULL. */
struct kvfs_node *kvfs_node_ref(struct kvfs *fs, fuse_ino_t ino);
void kvfs_node_unref(struct kvfs *fs, struct kvfs_node *n);

/* Directories made by mkdir, remembered until a key appears under them. */
void kvfs_memdir_set_locked(struct kvfs *fs, struct kvfs_node *n);
void kvfs_memdir_clear_locked(struct kvfs *fs, struct kvfs_node *n);
/* A key now exists: the mkdir'd directories above it are real ones. */
void kvfs_memdirs_settle_locked(struct kvfs *fs, const char *key, size_t len);

bool kvfs_is_dir_kind(enum kvfs_kind k);
void kvfs_fill_attr_locked(struct kvfs *fs, const struct kvfs_node *n, struct stat *st);
void kvfs_fill_entry_locked(struct kvfs *fs, const struct kvfs_node *n,
			    struct fuse_entry_param *e);
/* Stores what kvp_stat said about a file node. */
void kvfs_node_from_stat_locked(struct kvfs *fs, struct kvfs_node *n, const struct kvp_stat *st);

#endif

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
	bool memdir;			/* DIR made by mkdir or emptied here, or an
					 * empty FILE: lives until a key appears */
	bool alias;			/* DIR shown as NAME%% (an object NAME exists) */
	bool retired;			/* no longer its name's node (a rename
					 * replaced it): only in the ino table */
	bool inval_queued;		/* FILE: a page-cache invalidation is queued */
	uint64_t fresh_until;		/* ms (monotonic): cached attributes valid */
	uint64_t size;			/* FILE */
	uint64_t mtime_ns;		/* FILE: the put time; DIR: mkdir or utimes */
	uint64_t atime_ns;
	uint64_t generation;		/* FILE: the pool's, of what version holds (0 unknown) */
	/* FILE: bumped whenever the bytes the kernel may cache for this inode
	 * change; a read handle of an older version never fills the cache. */
	uint64_t version;
	uint64_t commit_sum, commit_len;	/* FILE: the last value committed here (xxh3) */
	int commit_err;			/* FILE: errno of a failed commit, for fsync */
	uint64_t set_mtime_ns, set_atime_ns;	/* FILE being written or empty: utimes */
	struct kvfs_wbuf *pending;	/* FILE being written (kvfs_fh.h) */
	struct kvfs_blob *queued;	/* FILE: closed, being committed (kvfs_commit.h) */
	struct kvfs_blob *blob;		/* FILE: the latest value some handle holds */
	uint64_t neg_hash, neg_until;	/* DIR: a name found absent (kvfs_neg.h) */
	char **old_raw;			/* names before renames: unlocked readers may
					 * still hold them; freed with the node */
	unsigned nold_raw;

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

/* Directories made by mkdir or emptied by a removal, and empty files,
 * remembered in this mount until a key appears under (or at) them. */
void kvfs_memdir_set_locked(struct kvfs *fs, struct kvfs_node *n);
void kvfs_memdir_clear_locked(struct kvfs *fs, struct kvfs_node *n);
/* A key now exists: the remembered directories above it are real ones,
 * an empty file of that name is the object now. */
void kvfs_memdirs_settle_locked(struct kvfs *fs, const char *key, size_t len);

/* Gives n the name (kind, raw) in directory parent, keeping its inode
 * number (what a rename does to the kernel's inode); a node that had that
 * name is retired first (*old, NULL if none). -ENOMEM. */
int kvfs_node_rekey_locked(struct kvfs *fs, struct kvfs_node *n, const char *raw, size_t len,
			   uint64_t parent, const char *name, struct kvfs_node **old);
/* Takes n out of the name table: lookups no longer find it, the kernel's
 * references and open handles keep it until they go. */
void kvfs_node_retire_locked(struct kvfs *fs, struct kvfs_node *n);
/* This view changed the content of FILE n under the kernel's page cache
 * (a write handle's commit, a truncation, a removal): bump its version and
 * queue an invalidation (done off the request path). */
void kvfs_node_changed_locked(struct kvfs *fs, struct kvfs_node *n);

bool kvfs_is_dir_kind(enum kvfs_kind k);
void kvfs_fill_attr_locked(struct kvfs *fs, const struct kvfs_node *n, struct stat *st);
void kvfs_fill_entry_locked(struct kvfs *fs, const struct kvfs_node *n,
			    struct fuse_entry_param *e);
/* Stores what kvp_stat said about a file node. False (nothing stored)
 * when st is another value than the one n stands for — another client
 * replaced the key since — except the value this view committed last
 * (same checksum and size): then the caller retires n, as for an inode
 * whose file was replaced, and the key gets a new node (kvfs_node_fresh). */
bool kvfs_node_from_stat_locked(struct kvfs *fs, struct kvfs_node *n, const struct kvp_stat *st);
/* The same from a list entry (size and put time): false when the put
 * time says another value than the one of a generation n knows. */
bool kvfs_node_from_list_locked(struct kvfs *fs, struct kvfs_node *n, uint64_t size,
				uint64_t put_ns);
/* The node of key raw after its old node n was found stale: n retired,
 * a new one (a new inode number) in its place. NULL when out of memory. */
struct kvfs_node *kvfs_node_fresh_locked(struct kvfs *fs, struct kvfs_node *n);
/* This view stored len bytes (checksum sum) as n's value: its pages are
 * stale (changed_locked) and the pool's generation of it is adopted when
 * a stat next shows it. */
void kvfs_node_committed_locked(struct kvfs *fs, struct kvfs_node *n, uint64_t sum, uint64_t len);
/* The mode bits stat shows for a node of kind k (type included). */
mode_t kvfs_node_mode(const struct kvfs *fs, enum kvfs_kind k);

#endif

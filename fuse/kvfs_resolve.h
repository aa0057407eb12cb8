/* kvfs_resolve: what a name in a directory of the view stands for (the
 * key, prefix or chain piece it spells, docs/fuse.md "Names") and whether
 * the pool holds keys under a prefix; the directory a namespace change
 * happens in. Any libfuse worker thread; no state of its own, pool calls
 * are made with no lock held.
 */
#ifndef KVP_KVFS_RESOLVE_H
#define KVP_KVFS_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>

#include "kvfs_node.h"

#define KVFS_LIST_PAGE 512	/* keys per kvp_list call */

/* What a name in a directory stands for, before asking the pool. */
struct kvfs_child {
	enum kvfs_kind kind;	/* KN_DIR (alias), KN_PIECE, or KN_FILE meaning
				 * "an object, else a directory" */
	bool alias;		/* NAME%%: the directory NAME/ */
	size_t rawlen;
	char raw[KVP_MAX_KEY + 2];
};

/* Length of the directory part of a prefix: up to and including its last
 * '/' (a KN_PIECE prefix continues a component after that). */
size_t kvfs_dir_part(const char *raw, size_t len);

/* Parses name inside directory node d. 0, or the positive errno of a FUSE
 * reply: ENAMETOOLONG, EINVAL (not the canonical spelling of any key: the
 * caller answers ENOENT for a lookup, EINVAL for a create). */
int kvfs_resolve(const struct kvfs_node *d, const char *name, struct kvfs_child *c);

/* 1 when at least one complete key starts with prefix, 0 when none, < 0. */
int kvfs_prefix_used(struct kvfs *fs, const char *prefix);

/* What the pool holds at a name: the object raw and keys under raw + "/". */
struct kvfs_probe {
	bool obj, dir;
	uint64_t size, put_ns;		/* of the object */
};
/* One list call answers both (two when many names between raw and raw/
 * fill its page). 0 or a KVP_E* code. */
int kvfs_probe(struct kvfs *fs, const char *raw, size_t len, struct kvfs_probe *p);

/* Whether a chain directory (raw ends inside a component, after dl) has an
 * entry whose chain really passes through it (cut exactly at rawlen). */
int kvfs_piece_used(struct kvfs *fs, const char *raw, size_t rawlen, size_t dl, size_t off);

/* The directory @parent, referenced, for a change in it (create, unlink,
 * mkdir, rmdir); NULL after replying EROFS on a read-only view, ENOENT, or,
 * for a parent that is no directory, @file_err (a file) or EACCES. */
struct kvfs_node *kvfs_dir_for_change(fuse_req_t req, struct kvfs *fs, fuse_ino_t parent,
				      int file_err);

#endif

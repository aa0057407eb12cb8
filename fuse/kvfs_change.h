/* kvfs_change: namespace changes in the view — unlink (kvp_remove), mkdir
 * and rmdir of directories remembered until a key appears under them, and
 * the refusals of link, symlink and mknod (kvfs_rename.h renames).
 * libfuse worker threads; fs->lock guards the nodes, pool calls are made
 * without it.
 */
#ifndef KVP_KVFS_CHANGE_H
#define KVP_KVFS_CHANGE_H

#include <sys/stat.h>

#include "kvfs_fs.h"

void kvfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void kvfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void kvfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void kvfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname);
void kvfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void kvfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);

struct kvfs_node;
/* After a key under directory d went away: d, and each level above it
 * that holds no key any more, stays as an empty directory of this mount. */
void kvfs_keep_emptied_dirs(struct kvfs *fs, struct kvfs_node *d);

#endif

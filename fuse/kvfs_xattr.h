/* kvfs_xattr: the extended attributes of the view's files, read-only
 * user.kvpool.* figures from kvp_stat (size, replicas, checksum, ...).
 * libfuse worker threads; no state of its own.
 */
#ifndef KVP_KVFS_XATTR_H
#define KVP_KVFS_XATTR_H

#include "kvfs_fs.h"

void kvfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void kvfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void kvfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
		   size_t size, int flags);
void kvfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);

#endif

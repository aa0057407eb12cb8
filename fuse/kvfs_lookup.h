/* kvfs_lookup: the FUSE lookup, forget and getattr operations of the view
 * — names to nodes, the kernel's references, attributes from the pool
 * while the cached ones are stale. libfuse worker threads, any number at
 * once; fs->lock guards the nodes (kvfs_node.h).
 */
#ifndef KVP_KVFS_LOOKUP_H
#define KVP_KVFS_LOOKUP_H

#include "kvfs_fs.h"

void kvfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void kvfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void kvfs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets);
void kvfs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

#endif

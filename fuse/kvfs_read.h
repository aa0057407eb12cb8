/* kvfs_read: the read path of the view — open (values and control files)
 * and read, from a local segment mapping when the value has a replica on
 * this host, else from one fetch shared by the handles of a generation.
 * libfuse worker threads; a handle's lock guards its fetch (kvfs_fh.h).
 */
#ifndef KVP_KVFS_READ_H
#define KVP_KVFS_READ_H

#include "kvfs_fs.h"

void kvfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void kvfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	       struct fuse_file_info *fi);

#endif

/* kvfs_dir: directory listing of the view — opendir, readdir(plus) and
 * releasedir, paging the pool's key list so that a directory of millions
 * of keys is never loaded whole. libfuse worker threads; an open
 * directory's own lock guards its paging state.
 */
#ifndef KVP_KVFS_DIR_H
#define KVP_KVFS_DIR_H

#include "kvfs_fs.h"

void kvfs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void kvfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		  struct fuse_file_info *fi);
void kvfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		      struct fuse_file_info *fi);
void kvfs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

#endif

/* kvfs_write: the write path of the view — create, write, setattr on a
 * file being written, flush and release, which put the buffered value
 * when a process that wrote closes it (values are immutable once put).
 * libfuse worker threads; a handle's lock guards its buffer (kvfs_fh.h).
 */
#ifndef KVP_KVFS_WRITE_H
#define KVP_KVFS_WRITE_H

#include <sys/stat.h>

#include "kvfs_fs.h"

void kvfs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		 struct fuse_file_info *fi);
void kvfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		struct fuse_file_info *fi);
void kvfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		  struct fuse_file_info *fi);
void kvfs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void kvfs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

#endif

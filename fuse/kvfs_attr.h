/* kvfs_attr: setattr — the metadata policy of the view (docs/fuse.md,
 * "Metadata"). Owner, group and mode belong to the mount: setting them to
 * what they are succeeds (tar, cp -a, rsync -a), another value is EPERM,
 * except the mode of a file still being written (mkstemp's 0600), which is
 * accepted and not kept. Times are kept in this mount's memory for the
 * value they were set on (kvfs_times.h). A size is a new value: the
 * buffer of a file being written, else a replacement of the stored one.
 * libfuse worker threads; pool calls without fs->lock.
 */
#ifndef KVP_KVFS_ATTR_H
#define KVP_KVFS_ATTR_H

#include <sys/stat.h>

#include "kvfs_fs.h"

void kvfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		  struct fuse_file_info *fi);

#endif

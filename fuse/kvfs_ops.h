/* kvfs_ops: the table of FUSE low-level operations the view's session
 * runs (kvfs.c), with the connection setup (init) and statfs; the other
 * operations live in kvfs_lookup, kvfs_dir, kvfs_read, kvfs_write,
 * kvfs_attr, kvfs_change, kvfs_rename and kvfs_xattr. libfuse worker threads call them, any number
 * at once.
 */
#ifndef KVP_KVFS_OPS_H
#define KVP_KVFS_OPS_H

#include "kvfs_fs.h"

extern const struct fuse_lowlevel_ops kvfs_ops;

#endif

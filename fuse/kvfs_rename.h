/* kvfs_rename: rename of a file within the view (docs/fuse.md, "Rename").
 * The new name gets the value in one step — a reader of it sees the old
 * value or the new one, never a mix — and then the old name goes: a file
 * not stored yet (being written, queued, or empty) simply commits under
 * the new name; a stored one is copied under it (an upsert) and removed.
 * Directories are not renamed (EXDEV: mv copies them). libfuse worker
 * threads; pool calls without fs->lock.
 */
#ifndef KVP_KVFS_RENAME_H
#define KVP_KVFS_RENAME_H

#include "kvfs_fs.h"

void kvfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		 const char *newname, unsigned int flags);

#endif

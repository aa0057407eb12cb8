/* kvfs_write: the write path of the view — create, open for writing,
 * write, flush, fsync and release: a file open for writing buffers the
 * whole value, and the close of a process that wrote it stores it as the
 * key's new value in one step (kvfs_commit.h). libfuse worker threads; a
 * handle's lock guards its buffer (kvfs_fh.h).
 */
#ifndef KVP_KVFS_WRITE_H
#define KVP_KVFS_WRITE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "kvfs_fs.h"

struct kvfs_node;
struct kvfs_fh;
struct kvfs_wbuf;

void kvfs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		 struct fuse_file_info *fi);
void kvfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		struct fuse_file_info *fi);
/* open(2) with write access of the file n (the caller's reference on n
 * goes to the handle, or is dropped on error); replies. */
void kvfs_open_write(fuse_req_t req, struct kvfs *fs, struct kvfs_node *n,
		     struct fuse_file_info *fi);
void kvfs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void kvfs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void kvfs_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void kvfs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

#define KVFS_SETTLE_MS 200

/* n is no longer being written by w (fs->lock held); wakes readers that
 * wait in kvfs_pending_settle. */
void kvfs_pending_clear_locked(struct kvfs *fs, struct kvfs_node *n, const struct kvfs_wbuf *w);
/* Whether n is no longer being written, after waiting (at most
 * KVFS_SETTLE_MS) for the release that follows a close which stored
 * nothing (touch, `: > f`). */
bool kvfs_pending_settle(struct kvfs *fs, struct kvfs_node *n);

/* A read on a write handle whose buffer was stored and freed by a close
 * (a shared mapping faulting a page in after numpy.memmap closed its
 * descriptor): the buffer takes the stored value again, as a page written
 * back then does, and the release stores what the mapping changes. No-op
 * while the buffer is there; fh->lock held. An errno or 0. */
int kvfs_wbuf_reload_locked(struct kvfs *fs, struct kvfs_fh *fh);
/* ftruncate on a write handle: the buffer's new length. An errno or 0. */
int kvfs_wbuf_resize(struct kvfs *fs, struct kvfs_fh *fh, uint64_t size);
/* n (key) is empty now: the value goes from the pool (existed) and n
 * stays as an empty file of this mount; w is the write handle's buffer
 * whose close this is (it stops being n->pending in the same step), or
 * NULL. An errno or 0. */
int kvfs_empty_value(struct kvfs *fs, struct kvfs_node *n, const char *key, bool existed,
		     const struct kvfs_wbuf *w);

#endif

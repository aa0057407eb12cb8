/* kvfs_uring: FUSE over io_uring (Linux 6.14+, CONFIG_FUSE_IO_URING, the
 * fuse module's enable_uring parameter), which libfuse 3.14 lacks. The
 * kernel keeps one request queue per possible CPU and puts a request on the
 * queue of the CPU its caller runs on; each queue here is served by a few
 * threads pinned to that CPU, each with its own ring and one registered
 * entry, so that a request is answered on the caller's CPU without waking
 * another one (the cost that dominates small requests on an idle VM).
 * Requests are rebuilt in /dev/fuse's format and handed to libfuse
 * (fuse_session_process_buf); the replies libfuse writes come back through
 * kvfs_io's writev hook, which gives those of ring requests to
 * kvfs_uring_reply. FORGET, INTERRUPT, notifications and everything before
 * the ring is complete keep going through /dev/fuse and libfuse's loop.
 */
#ifndef KVP_KVFS_URING_H
#define KVP_KVFS_URING_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "kvfs_fs.h"

enum { KVFS_URING_AUTO, KVFS_URING_ON, KVFS_URING_OFF };

/* [fuse] io_uring (auto|on|off) as KVFS_URING_*; -1 for anything else. */
int kvfs_uring_mode(const char *s);

/* Whether the fuse module lets a connection use io_uring (its
 * enable_uring parameter); false when the kernel has no such parameter. */
bool kvfs_uring_enabled(void);

/* The size of the first argument of a request the kernel wrote into a
 * ring entry: in_out holds its struct fuse_in_header (40 bytes), the
 * payload area payload_sz bytes of the other arguments, and the entry's
 * commit_id must be the header's unique. -EINVAL when the lengths do not
 * add up, the first argument is over the 128 bytes of its area, or the
 * payload over max_payload. */
int kvfs_uring_arg0(const void *in_out, uint32_t payload_sz, uint64_t commit_id,
		    size_t max_payload);

/* While answering INIT, before the reply is written: sets up the queues'
 * rings, buffers and threads (which wait for kvfs_uring_go). max_write and
 * max_pages are the reply's. 0, or -errno (then nothing is left and the
 * reply must not ask for io_uring). */
int kvfs_uring_prepare(struct kvfs *fs, uint32_t max_write, uint32_t max_pages);

/* After the INIT reply was written (ok) or failed: the threads register
 * their entries, or exit. */
void kvfs_uring_go(struct kvfs *fs, bool ok);

/* From the writev hook: when the reply in iov answers a request that came
 * over the ring, hands it to that entry and sets *res to its length.
 * False: the reply is not a ring request's (write it to /dev/fuse). */
bool kvfs_uring_reply(struct kvfs *fs, const struct iovec *iov, int count, ssize_t *res);

/* On a ring thread, while a request without payload (a read) runs: the
 * entry's payload area, where a reply of up to len bytes can be built in
 * place, saving the copy into the ring. NULL elsewhere. */
void *kvfs_uring_buf(size_t len);

/* Requests served over the ring so far; false when the ring is not in use. */
bool kvfs_uring_served(struct kvfs *fs, uint64_t *n);

/* Stops and frees the queues; before the session's fd is closed. */
void kvfs_uring_stop(struct kvfs *fs);

#endif

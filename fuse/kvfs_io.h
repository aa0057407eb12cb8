/* kvfs_io: the session's reads and writes of /dev/fuse, through libfuse's
 * custom I/O hooks: plain read(2) and writev(2), except that the reply to
 * the kernel's INIT also asks for FUSE_DIRECT_IO_ALLOW_MMAP when the
 * kernel offers it (Linux 6.6+), which libfuse 3.14 has no capability bit
 * for. With it, a direct-I/O file (a value read straight from a local
 * segment) can still be mapped MAP_SHARED. Runs on libfuse's worker
 * threads; the INIT state is written once, before any other request.
 */
#ifndef KVP_KVFS_IO_H
#define KVP_KVFS_IO_H

#include <stdbool.h>

#include "kvfs_fs.h"

/* After fuse_session_mount: the session's I/O goes through the hooks.
 * 0 or -errno (then libfuse's own I/O stays, without the flag). */
int kvfs_io_attach(struct kvfs *fs);

#endif

/* kvfs: the FUSE view of the pool — every object is a file, a '/' in a key
 * is a directory level, `.kvpool/` holds stats and node listings. A pool
 * client (libkvpool handle) served by libfuse's session loop on its own
 * thread(s); runs inside kvpool-node ([fuse] mountpoint) or standalone
 * (`kvpool mount`).
 */
#ifndef KVP_KVFS_H
#define KVP_KVFS_H

#include <stdbool.h>
#include <stddef.h>

#include "conf.h"

struct kvfs;

/* Mounts at mountpoint (clearing a stale mount left by a crashed process)
 * and serves on a background thread. NULL with a message in err. */
struct kvfs *kvfs_start(const struct kvp_conf *conf, const char *mountpoint,
			char *err, size_t errlen);
/* Unmounts and joins the thread. */
void kvfs_stop(struct kvfs *fs);
/* `kvpool mount DIR [-f] [-o opts]`: argv[0] is "mount". Returns an exit code. */
int kvfs_main(const struct kvp_conf *conf, int argc, char **argv);

/* Key <-> file name component escaping (docs/fuse.md, "Names"): bytes
 * that cannot appear in a name ('/', NUL, '%', and the names "." ".." )
 * are written %XX. 0 or -ENAMETOOLONG / -EINVAL. */
int kvfs_escape(const char *in, size_t n, char *out, size_t cap);
int kvfs_unescape(const char *in, char *out, size_t cap, size_t *outlen);

#endif

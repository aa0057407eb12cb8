/* orphan: the kvpool segments on this host and whether anyone still owns
 * them. A format 2 header names its owner (pid, start time, "removes the
 * file on exit"); the owner holds the file's flock while it runs. A file
 * whose lock is free and whose owner is gone is either kept on purpose (a
 * node's segment waiting for its restart) or, when its owner meant to
 * remove it (an embedded store, remove_segment_on_exit), an orphan: a
 * process killed by a signal never got to. orphan_reap() removes one.
 * No global state; any thread.
 */
#ifndef KVP_ORPHAN_H
#define KVP_ORPHAN_H

#include <stdbool.h>
#include <stdint.h>

#include "segment.h"

enum seg_owner_state {
	SEG_OWNER_LIVE,		/* its owner runs, or something holds its lock */
	SEG_OWNER_KEPT,		/* owner gone; kept for its restart (or format 1) */
	SEG_OWNER_ORPHAN,	/* owner gone without removing it as it meant to */
};

const char *orphan_state_name(enum seg_owner_state s);

/* From the header and the process table; when the owner is gone, also
 * tries the lock (LOCK_SH|LOCK_NB, released at once) on fd (-1: skip): a
 * forked child of the owner may hold it. */
enum seg_owner_state orphan_state(const struct segment_info *info, int fd);

struct orphan_entry {
	char path[256];
	struct segment_info info;
	enum seg_owner_state state;
	uint64_t bytes;			/* memory the file holds (st_blocks) */
};

/* Calls cb for every kvpool segment (a regular file whose header checks)
 * directly in dir (NULL: /dev/shm), in readdir order. cb returns non-zero
 * to stop (returned). Files that are not segments are never written to. */
int orphan_list(const char *dir, int (*cb)(const struct orphan_entry *e, void *arg), void *arg);

/* Removes the orphan at path if it still is one with this uuid: takes its
 * lock first (an owner restarting meanwhile waits, a second reaper fails),
 * checks again, unlinks, releases. 0, -EBUSY (owned again), -ESTALE
 * (another file now), or the errno of open/unlink. */
int orphan_reap(const char *path, uint64_t uuid);

/* Reaps every orphan in dir (NULL: /dev/shm), logging each: the number
 * removed (and *bytes their memory), or a negative errno if dir cannot be
 * read. */
int orphan_reap_all(const char *dir, uint64_t *bytes);

#endif

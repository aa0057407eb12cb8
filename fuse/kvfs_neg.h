/* kvfs_neg: a name the pool said it does not hold, a moment ago. The
 * kernel creates a file right after a lookup that found its name absent;
 * that lookup's answer serves the create too, instead of asking again.
 * One slot per directory node (sequential creators: cp -r, tar, rsync,
 * a loop of open(O_CREAT)), valid KVFS_NEG_MS. Any libfuse worker thread;
 * fs->lock guards the slot.
 */
#ifndef KVP_KVFS_NEG_H
#define KVP_KVFS_NEG_H

#include <stdbool.h>
#include <stddef.h>

#include "kvfs_fs.h"

#define KVFS_NEG_MS 100

struct kvfs_node;

/* The pool holds neither the object raw nor keys under raw + "/" (in d). */
void kvfs_neg_note(struct kvfs *fs, struct kvfs_node *d, const char *raw, size_t len);
/* Whether that was said of raw within KVFS_NEG_MS. */
bool kvfs_neg_absent(struct kvfs *fs, struct kvfs_node *d, const char *raw, size_t len);
/* raw exists now (created, renamed to): the note is void. */
void kvfs_neg_forget(struct kvfs *fs, struct kvfs_node *d, const char *raw, size_t len);

#endif

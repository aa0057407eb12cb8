/* kvfs_neg: negative lookups from a directory's recent listing. A lookup
 * of a name the pool does not hold costs two master round trips (the key,
 * then keys under it as a directory); creating a file starts with one.
 * A directory of up to KVFS_NEG_MAX entries keeps the names one listing
 * returned, for entry_timeout (the time the kernel caches a name anyway),
 * plus the names this view created since: a name not among them is
 * absent. Any libfuse worker thread; fs->lock guards the listings, the
 * pool is asked without it.
 */
#ifndef KVP_KVFS_NEG_H
#define KVP_KVFS_NEG_H

#include <stdbool.h>
#include <stddef.h>

#include "kvfs_fs.h"

#define KVFS_NEG_MAX 1024	/* entries a listing may have to be kept */

struct kvfs_node;
struct kvfs_neg;

/* 1 when the object raw and the directory raw + "/" are both absent from
 * directory d (listing it first if it has no fresh listing), 0 when the
 * pool must be asked, < 0 a KVP_E* code. */
int kvfs_neg_lookup(struct kvfs *fs, struct kvfs_node *d, const char *raw, size_t len);
/* Like kvfs_neg_lookup, from a fresh listing only (never asks the pool). */
bool kvfs_neg_absent(struct kvfs *fs, struct kvfs_node *d, const char *raw, size_t len);
/* A name (a key, or a prefix ending in '/') now exists in d. */
void kvfs_neg_add(struct kvfs *fs, struct kvfs_node *d, const char *raw, size_t len);
/* d was found to hold nothing at all (mkdir): an empty listing. */
void kvfs_neg_empty(struct kvfs *fs, struct kvfs_node *d);
/* Frees a node's listing (node_free, fs->lock held or the node gone). */
void kvfs_neg_free(struct kvfs_neg *l);

#endif

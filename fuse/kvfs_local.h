/* kvfs_local: same-host reads of the view from a read-only mapping of a
 * node's segment, range by range, checked against the extent header after
 * each copy (kvfs_local.c says why that is safe). Any libfuse worker
 * thread; fs->lseg_lock guards the table of mappings.
 */
#ifndef KVP_KVFS_LOCAL_H
#define KVP_KVFS_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvfs_fs.h"

/* A live memory replica of (key, st) in a segment on this host: *hdr
 * points at its extent header in the mapping. 0 or -ENOENT. */
int kvfs_local_find(struct kvfs *fs, const char *key, size_t keylen, const struct kvp_stat *st,
		    const uint8_t **hdr);
/* Where the value starts, from a header kvfs_local_find checked. */
const uint8_t *kvfs_local_value(const uint8_t *hdr);
/* Copies [off, off + len) of the value into dst; 0 when the extent was
 * still that generation after the copy, else -ESTALE (dst is garbage). */
int kvfs_local_copy(const uint8_t *hdr, const uint8_t *value, uint64_t generation, void *dst,
		    uint64_t off, size_t len);
/* This thread's copy buffer of at least len bytes (NULL: out of memory). */
void *kvfs_local_bounce(size_t len);
/* Unmaps every segment (at unmount). */
void kvfs_local_free(struct kvfs *fs);

#endif

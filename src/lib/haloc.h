/* haloc: where a handle last read or wrote each key, for reads while no
 * master answers (HA only, docs/ha.md): during an election, or while etcd
 * has lost its majority, a get of a key read before goes straight to the
 * replica it was read from, on any node and tier. Not lcache (lcache.h):
 * that one holds local memory replicas only, as hints that expire, to skip
 * the master when it does answer; this one is asked only when it does not,
 * finds segments by uuid (their ids are a master's), and keeps no TTL. Both
 * keep the same record, struct lc_loc. Such a read has no lease; it is checked like
 * every read (key, length, generation, segment, value checksum against
 * what was remembered), so an extent freed or reused meanwhile shows as a
 * failed read, never as wrong bytes — at worst the value a key had before
 * a remove the node has not seen yet. A direct-mapped table of a fixed
 * size, keyed by a hash of the key (the header check compares the key
 * itself). Any thread: its own mutex, never held with another lock.
 */
#ifndef KVP_HALOC_H
#define KVP_HALOC_H

#include <stdbool.h>
#include <stdint.h>

#include "lcache.h"

struct kvp;

/* With HA only (mlocate_ha): 0 or KVP_ENOMEM; without, nothing is kept. */
int haloc_open(struct kvp *kvp);
void haloc_close(struct kvp *kvp);
void haloc_put(struct kvp *kvp, const char *key, uint32_t klen, const struct lc_loc *e);
bool haloc_get(struct kvp *kvp, const char *key, uint32_t klen, struct lc_loc *e);
/* A removed key is forgotten (its extent may be reused). */
void haloc_drop(struct kvp *kvp, const char *key, uint32_t klen);

#endif

/* loccache: where a handle last read each key, for reads while no master
 * answers (HA only, docs/ha.md): during an election, or while etcd has
 * lost its majority, a get of a key read before goes straight to the
 * replica it was read from. Such a read has no lease; it is checked like
 * every read (key, length, generation, segment, value checksum against
 * what was remembered), so an extent freed or reused meanwhile shows as a
 * failed read, never as wrong bytes — at worst the value a key had before
 * a remove the node has not seen yet. A direct-mapped table of a fixed
 * size, keyed by a hash of the key (the header check compares the key
 * itself). Any thread: its own mutex, never held with another lock.
 */
#ifndef KVP_LOCCACHE_H
#define KVP_LOCCACHE_H

#include <stdbool.h>
#include <stdint.h>

struct kvp;

struct loc_ent {
	uint64_t seg_uuid;		/* segments keep their uuid across masters */
	uint8_t tier;
	uint64_t off, alloc_len;
	uint64_t vlen, gen, csum;
};

/* With HA only (mlocate_ha): 0 or KVP_ENOMEM; without, nothing is kept. */
int loccache_open(struct kvp *kvp);
void loccache_close(struct kvp *kvp);
void loccache_put(struct kvp *kvp, const char *key, uint32_t klen, const struct loc_ent *e);
bool loccache_get(struct kvp *kvp, const char *key, uint32_t klen, struct loc_ent *e);
/* A removed key is forgotten (its extent may be reused). */
void loccache_drop(struct kvp *kvp, const char *key, uint32_t klen);

#endif

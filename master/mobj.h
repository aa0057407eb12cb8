/* mobj: the master's object bookkeeping below every request handler and
 * eviction — the lease and pending arrays (o->slot), attaching a replica
 * to an object and a segment, dropping one (with its FREE), and removing
 * objects. Loop thread only; no locks.
 */
#ifndef KVP_MOBJ_H
#define KVP_MOBJ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct master;
struct rbuf;
struct obj;
struct seg;

/* Objects by index; each knows its own (o->slot), so removal is O(1). */
struct objarr {
	struct obj **v;
	size_t n, cap;
};

/* Appends o and sets o->slot: 0 or -ENOMEM. */
int mobj_arr_push(struct objarr *a, struct obj *o);
/* Takes o out (the last entry moves into its slot); o->slot = OBJ_NOSLOT. */
void mobj_arr_del(struct objarr *a, struct obj *o);

/* Forgets o (its lease or pending entry, the key count, its place in the
 * table or the version map) and frees it; its replicas must be detached
 * already. */
void mobj_unlink(struct master *m, struct obj *o);
/* The object of key with generation gen: the table's, else a version
 * (mver); NULL if neither. *cur: the table's object for key (any
 * generation), NULL if none. */
struct obj *mobj_find_gen(struct master *m, const uint8_t *key, size_t klen, uint64_t gen,
			  struct obj **cur);
/* Reads "str key u64 generation" (a PUT_END, PUT_REVOKE or LEASE_RELEASE
 * item) and finds that object (mobj_find_gen). *status: 0, KVP_EKEY,
 * KVP_ESTALE (the key has another generation), KVP_ENOTFOUND. */
struct obj *mobj_read_gen(struct master *m, struct rbuf *r, uint64_t *gen, int *status);
/* Moves o, the table's object for its key, into the version map (an
 * upsert committed over it): its lease or pending entry stays. */
void mobj_set_aside(struct master *m, struct obj *o);
/* Drops replica ri of o (queueing a FREE when its segment is online and
 * free_extent is set); removes o when it was the last replica. Returns true
 * if o was removed. */
bool mobj_drop_replica(struct master *m, struct obj *o, unsigned ri, bool free_extent);
/* Drops every replica of o (see mobj_drop_replica), then o. */
void mobj_destroy(struct master *m, struct obj *o, bool free_extents);
/* A new complete object of key (value_len, generation gen, checksum csum,
 * put at put_ns) in the table, counted in keys and its namespace, with no
 * replica yet: a node's REPORT or the standby stream adopting it. NULL on
 * out of memory. */
struct obj *mobj_new_complete(struct master *m, const uint8_t *key, size_t klen,
			      uint64_t value_len, uint64_t gen, uint64_t csum, uint64_t put_ns);
/* Adds a replica (s, tier, off, len) to *op, which may move to make room
 * (objtab_regrow: *op is updated). 0 or KVP_ENOMEM (nothing added). */
int mobj_attach(struct master *m, struct seg *s, struct obj **op, uint8_t tier, uint64_t off,
		uint64_t len);
/* Detaches every replica living in s (no FREE: the segment goes away or is
 * rebuilt from the node's REPORTs). */
void mobj_drop_seg(struct master *m, struct seg *s);

#endif

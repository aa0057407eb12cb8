/* mver: the versions of keys that are not the table's entry for their key
 * — pending upserts (a new value being written while the old one stays
 * visible), plain puts an upsert overtook, and replaced values kept while
 * their readers' leases run — found by generation, which is unique. The
 * objects are chained through their hnext (they are in no objtab), flagged
 * OBJ_VERSION. Loop thread only; no locks.
 */
#ifndef KVP_MVER_H
#define KVP_MVER_H

#include <stddef.h>
#include <stdint.h>

struct obj;

struct mver {
	struct obj **b;			/* buckets by generation */
	size_t nb;			/* power of two */
	size_t n;
};

/* 0 or -ENOMEM. The buckets exist from here on, so mver_add cannot fail. */
int mver_init(struct mver *v);
/* Adds o (sets OBJ_VERSION). */
void mver_add(struct mver *v, struct obj *o);
/* The version with generation gen and key (key, n), NULL if none. */
struct obj *mver_find(const struct mver *v, uint64_t gen, const uint8_t *key, size_t n);
/* Takes o out (clears OBJ_VERSION). */
void mver_del(struct mver *v, struct obj *o);
/* Frees the buckets; the versions' memory is the object table's
 * (objtab_destroy frees it, before or after this). */
void mver_destroy(struct mver *v);

#endif

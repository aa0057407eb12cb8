/* mhold: the holds a new leader places in a warm segment's allocator when
 * the node's MOUNT carries its commit map (docs/ha.md "Warm standby", "a
 * put right after the takeover"): space the table thinks free but where
 * the map shows a committed extent the table does not know, up to the
 * next extent the table knows for sure. Puts go into the rest at once;
 * a REPORT of an extent inside a hold carves it out; the node's first
 * HEARTBEAT releases what is left. Loop thread only; no locks.
 */
#ifndef KVP_MHOLD_H
#define KVP_MHOLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct alloc;
struct mrecon_ent;

/* One hold: one reservation in the allocator. */
struct mhold_rng {
	uint64_t off, len;
};

/* Sorted, neither overlapping nor touching. */
struct mhold {
	struct mhold_rng *v;
	size_t n, cap;
	uint64_t bytes;			/* held in all */
};

/* The table's view of one memory extent for mhold_plan: bits 56..63 of
 * mrecon_ent.len hold segmap_tag of its generation. */
#define MHOLD_TAG_SHIFT 56
#define MHOLD_LEN_MASK ((1ull << MHOLD_TAG_SHIFT) - 1)

/* Places the holds for the map (map[i]: the byte of [i * 4096, i * 4096 +
 * 4096)) against the table's extents ent[0..n) (sorted by offset; entries
 * of another tier than memory are skipped) in an allocator over [data_off,
 * end) of alignment >= 4096 that holds exactly those extents. A table
 * extent bounds a hold only if the map byte of its page is its tag.
 * 0, -EINVAL (alignment below 4096, which the map cannot vouch for per
 * extent), -EEXIST (the allocator holds something the table does not
 * list), -ENOMEM; on failure the caller releases what was placed. */
int mhold_plan(struct mhold *h, struct alloc *a, const struct mrecon_ent *ent, size_t n,
	       const uint8_t *map, size_t map_len, uint64_t data_off, uint64_t end);
/* Holds [off, off + len) (free in the allocator), merged with touching
 * holds: 0 or -errno. */
int mhold_add(struct mhold *h, struct alloc *a, uint64_t off, uint64_t len);
/* Takes [off, off + len) out of every hold it overlaps (the remainders
 * are held again), so that the range can be reserved: 0 or -errno. */
int mhold_carve(struct mhold *h, struct alloc *a, uint64_t off, uint64_t len);
/* The holds are sorted, apart, each one reservation of its length in a,
 * and add up to h->bytes (tests, fuzzing). */
bool mhold_check(const struct mhold *h, const struct alloc *a);
/* Frees every hold. */
void mhold_release(struct mhold *h, struct alloc *a);

#endif

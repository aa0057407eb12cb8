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

/* A warm segment's replica array at its re-mount (segreg.h struct
 * mrecon_ent) carries segmap_tag of each replica's generation in bits
 * 56..63 of its len. */
#define MHOLD_TAG_SHIFT 56
#define MHOLD_LEN_MASK ((1ull << MHOLD_TAG_SHIFT) - 1)

/* Places the holds for the map (map[i]: the byte of [i * 4096, i * 4096 +
 * 4096)) in an allocator over [data_off, end) of alignment >= 4096 that
 * holds the table's memory extents: tags[i] is segmap_tag of the
 * generation of the table's extent starting in page i (0: none the map
 * can vouch for, e.g. an upsert's set-aside version). From every page
 * whose byte is set where the table has no extent of that tag, the free
 * space is held up to the next extent the map vouches for (its page's
 * byte is its tag) or end, around the others. 0, -EINVAL (alignment
 * below 4096: a byte stands for several extents), -ENOMEM; on failure
 * the caller releases what was placed. One pass over the pages. */
int mhold_plan(struct mhold *h, struct alloc *a, const uint8_t *tags, size_t ntags,
	       const uint8_t *map, size_t map_len, uint64_t data_off, uint64_t end);
/* Holds [off, off + len) (free in the allocator; len rounded up to its
 * alignment, as a replica's length may not be), merged with touching
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

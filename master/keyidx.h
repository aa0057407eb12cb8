/* keyidx: the master's objects in key byte order (LIST, REMOVE_PREFIX,
 * seeks), a B+tree of object pointers. Leaves hold up to KX_LEAF objects
 * in order, chained both ways; inner nodes hold owned copies of their
 * separator keys and, for each, 8 bytes of it taken past the prefix that
 * every key routed through the node shares (its fences' common prefix), so
 * that a descent compares integers in one node instead of following a
 * pointer to a key per step: a key that lands among 400,000 others costs a
 * few cache misses, not the ~28 of a skip list walk.
 * Inserts never fail: kx_reserve() beforehand keeps enough spare nodes
 * and separator buffers for the splits one insert can need. Removal frees a
 * leaf when it empties (no merging: leaves refill as keys come back).
 * Loop thread only; no locks.
 */
#ifndef KVP_KEYIDX_H
#define KVP_KEYIDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct obj;
struct kx_node;

#define KX_MAX_HEIGHT 16	/* 64^15 leaves: far past any table */

struct keyidx {
	struct kx_node *root;
	struct kx_node *last;		/* the last leaf: keys past every key append there */
	int height;			/* 1: the root is a leaf */
	size_t count;
	/* spares for one insert's splits (kx_reserve) */
	struct kx_node *spare_leaf;
	struct kx_node *spare_inner[KX_MAX_HEIGHT + 1];
	int nspare_inner;
	uint8_t *spare_sep;		/* a key-sized buffer: the one separator a split copies */
	/* where the last kx_next / kx_seek ended: the next kx_next from it
	 * takes one step instead of a descent, unless a leaf was freed since */
	struct kx_node *it_leaf;
	unsigned it_idx;
	uint64_t it_gen, gen;		/* gen: leaves freed so far */
};

/* Key k's (n bytes) 8 bytes from pfx, big-endian, zero past its end:
 * among keys that share their first pfx bytes, heads that differ order
 * the keys as the keys do. */
static inline uint64_t kx_head_at(const uint8_t *k, size_t n, size_t pfx)
{
	uint64_t h = 0;

	for (size_t i = 0; i < 8; i++)
		h = h << 8 | (pfx + i < n ? k[pfx + i] : 0);
	return h;
}

/* 0 or -ENOMEM. */
int kx_init(struct keyidx *x);
/* Frees the nodes (not the objects). */
void kx_destroy(struct keyidx *x);
/* Makes sure the next kx_insert cannot run out of memory: 0 or -ENOMEM. */
int kx_reserve(struct keyidx *x);
/* Inserts o (its key must be absent), after a kx_reserve() that succeeded
 * (or with spares left from one: each insert uses what it splits). */
void kx_insert(struct keyidx *x, struct obj *o);
/* Merges n objects whose keys are absent, sorted by key, into the index:
 * the object i is the pointer at objs + i * stride. One pass over the
 * leaves builds a new tree (nodes 7/8 full), instead of n descents: for a
 * batch that is a fair share of the index. 0, or -ENOMEM with the index
 * as it was. */
int kx_merge(struct keyidx *x, const void *objs, size_t n, size_t stride);
/* Removes o (present). */
void kx_remove(struct keyidx *x, const struct obj *o);
/* Puts repl (the same key) where o is. */
void kx_replace(struct keyidx *x, const struct obj *o, struct obj *repl);
/* The first object whose key is >= key (> key when after); NULL past the
 * end. */
struct obj *kx_seek(struct keyidx *x, const uint8_t *key, size_t n, bool after);
/* The object with the greatest key; NULL when empty. */
struct obj *kx_last(const struct keyidx *x);
/* The object after o (present) in key order, NULL at the end. */
struct obj *kx_next(struct keyidx *x, const struct obj *o);
/* Checks the tree's invariants (order, fences, heads, leaf chain, count):
 * 0, or -1 with a message in err (tests). */
int kx_check(const struct keyidx *x, char *err, size_t errlen);

#endif

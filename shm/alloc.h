/* alloc: offset allocator over one segment's byte range [base, base+size),
 * used by the master (one per segment). TLSF-style two-level bins: O(1)
 * allocate and free, immediate coalescing with physical neighbours.
 * Not thread-safe: the master's event loop owns every allocator. */
#ifndef KVP_ALLOC_H
#define KVP_ALLOC_H

#include <stdbool.h>
#include <stdint.h>

struct alloc;

struct alloc_stats {
	uint64_t size;		/* bytes managed */
	uint64_t free_bytes;
	uint64_t largest_free;	/* largest single free extent */
	uint64_t nalloc;	/* live allocations */
	uint64_t nfree;		/* free extents */
};

/* align: power of two >= 64 (default 4096). Returns NULL on bad args/OOM. */
struct alloc *alloc_create(uint64_t base, uint64_t size, uint32_t align);
void alloc_destroy(struct alloc *a);
/* Rounds len up to the alignment; returns the offset or UINT64_MAX if no room.
 * *alloc_len (if not NULL) receives the rounded length. */
uint64_t alloc_alloc(struct alloc *a, uint64_t len, uint64_t *alloc_len);
/* Frees an allocation made by alloc_alloc/alloc_reserve: 0 or -EINVAL if
 * off is not the start of a live allocation. */
int alloc_free(struct alloc *a, uint64_t off);
/* Marks [off, off+len) used (recovery: extents reported by a node). The range
 * must be aligned (len is rounded up) and lie in free space: 0, -EINVAL or
 * -EEXIST when it overlaps a used range. */
int alloc_reserve(struct alloc *a, uint64_t off, uint64_t len);
/* Length of the live allocation at off, 0 if none. */
uint64_t alloc_len_at(const struct alloc *a, uint64_t off);
/* Walks the live allocations in offset order, along the blocks' physical
 * links (no hash lookup): *cur 0 starts at the first; true with the next
 * one's offset and length, false past the last. Between two calls the
 * allocator may change only below the allocation last returned. */
bool alloc_next_used(const struct alloc *a, uint64_t *cur, uint64_t *off, uint64_t *len);
void alloc_stats(const struct alloc *a, struct alloc_stats *st);
uint32_t alloc_align(const struct alloc *a);

#endif

/* vheap: the evictable replicas of one region of a segment (segreg.h) in
 * reuse-priority order, so that eviction takes the exact lowest at any
 * region size (evict.c) with nothing added to the read path. A min-heap
 * of (key, slot), slot an index of s->objs: an entry's key is what its
 * slot's object was worth when pushed, and reads only raise an object's
 * priority, so a key is never above its object's. The top's object, its
 * key brought up to date (a sift down when it rose), is the region's
 * lowest. A slot whose object changed (segreg.c moves replicas between
 * slots and regions) is marked and pushed at the next pick; an entry whose
 * slot left the region is dropped when it surfaces; an entry whose object
 * cannot go now (leased, pinned, being copied) is parked and looked at
 * again every VHEAP_PARK_EVERY picks. When it holds more than 1.5 times
 * its region it is rebuilt from the region. Entries are 8 bytes. Loop
 * thread only.
 */
#ifndef KVP_VHEAP_H
#define KVP_VHEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VHEAP_PARK_EVERY 16		/* picks between looks at the parked entries */

struct vheap_ent {
	int32_t key;			/* the slot's object's priority when pushed, from base */
	uint32_t slot;
};

struct vheap {
	struct vheap_ent *v;		/* the heap, v[0] lowest */
	size_t n, cap;
	uint32_t *mark;			/* slots changed since the last pick */
	size_t nmark, capmark;
	struct vheap_ent *park;		/* entries of objects that could not go */
	size_t npark, cappark;
	int64_t base;			/* keys count from here (evict.c, set at a rebuild) */
	uint32_t picks;
	bool on;			/* kept up to date; off: rebuilt at the next use */
};

/* Slot changed: pushed at the next pick. Marks beyond limit (or without
 * memory for one) turn the heap off: rebuilding costs less then. */
void vheap_mark(struct vheap *h, size_t slot, size_t limit);
/* Empties h and turns it off (memory kept). */
void vheap_clear(struct vheap *h);
void vheap_free(struct vheap *h);
/* Appends an entry without ordering (a rebuild; vheap_heapify after). */
int vheap_append(struct vheap *h, int32_t key, uint32_t slot);
void vheap_heapify(struct vheap *h);
int vheap_push(struct vheap *h, int32_t key, uint32_t slot);
void vheap_pop(struct vheap *h);
/* The top's key rose to key: it sinks to its place. */
void vheap_raise_top(struct vheap *h, int32_t key);
int vheap_park(struct vheap *h, struct vheap_ent e);

#endif

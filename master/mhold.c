/* mhold: see mhold.h. Holds are plain reservations in the segment's
 * allocator (alloc_reserve / alloc_free), one per range, kept sorted here.
 */
#include "mhold.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "kvpool.h"
#include "segmap.h"
#include "segreg.h"

#define PAGE (1ull << SEG_MAP_SHIFT)

/* The first hold whose end is past off. */
static size_t first_after(const struct mhold *h, uint64_t off)
{
	size_t lo = 0, hi = h->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (h->v[mid].off + h->v[mid].len <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int insert_at(struct mhold *h, size_t i, uint64_t off, uint64_t len)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 16;
		struct mhold_rng *v = realloc(h->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		h->v = v;
		h->cap = cap;
	}
	memmove(h->v + i + 1, h->v + i, (h->n - i) * sizeof(*h->v));
	h->v[i] = (struct mhold_rng){ off, len };
	h->n++;
	return 0;
}

static void erase_at(struct mhold *h, size_t i)
{
	memmove(h->v + i, h->v + i + 1, (h->n - i - 1) * sizeof(*h->v));
	h->n--;
}

int mhold_add(struct mhold *h, struct alloc *a, uint64_t off, uint64_t len)
{
	uint32_t al = alloc_align(a);

	if (!len)
		return 0;
	len = (len + al - 1) & ~(uint64_t)(al - 1);	/* as the allocator takes it */
	/* first_after(off) would skip a hold ending exactly at off */
	size_t i = first_after(h, off ? off - 1 : 0);
	bool left = i < h->n && h->v[i].off + h->v[i].len == off;
	size_t r = left ? i + 1 : i;
	bool right = r < h->n && h->v[r].off == off + len;
	uint64_t lo = left ? h->v[i].off : off;
	uint64_t hi = right ? h->v[r].off + h->v[r].len : off + len;

	if (!left && !right && insert_at(h, i, off, len))
		return -ENOMEM;
	if (left)
		alloc_free(a, h->v[i].off);
	if (right)
		alloc_free(a, h->v[r].off);
	int rc = alloc_reserve(a, lo, hi - lo);
	if (rc) {
		/* put the neighbours back as they were */
		if (left)
			alloc_reserve(a, h->v[i].off, h->v[i].len);
		if (right)
			alloc_reserve(a, h->v[r].off, h->v[r].len);
		if (!left && !right)
			erase_at(h, i);
		return rc;
	}
	h->bytes += len;
	if (left && right) {
		h->v[i].len = hi - lo;
		erase_at(h, r);
	} else if (left || right) {
		size_t k = left ? i : r;
		h->v[k] = (struct mhold_rng){ lo, hi - lo };
	}
	return 0;
}

int mhold_carve(struct mhold *h, struct alloc *a, uint64_t off, uint64_t len)
{
	uint32_t al = alloc_align(a);
	uint64_t end = off + len;

	end = (end + al - 1) & ~(uint64_t)(al - 1);
	for (size_t i = first_after(h, off); i < h->n && h->v[i].off < end;) {
		struct mhold_rng g = h->v[i];
		uint64_t gend = g.off + g.len;

		alloc_free(a, g.off);
		erase_at(h, i);
		h->bytes -= g.len;
		if (g.off < off) {
			int rc = alloc_reserve(a, g.off, off - g.off);
			if (rc || insert_at(h, i, g.off, off - g.off))
				return rc ? rc : -ENOMEM;
			h->bytes += off - g.off;
			i++;
		}
		if (gend > end) {
			int rc = alloc_reserve(a, end, gend - end);
			if (rc || insert_at(h, i, end, gend - end))
				return rc ? rc : -ENOMEM;
			h->bytes += gend - end;
			i++;
		}
	}
	return 0;
}

bool mhold_check(const struct mhold *h, const struct alloc *a)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < h->n; i++) {
		if (!h->v[i].len || alloc_len_at(a, h->v[i].off) != h->v[i].len)
			return false;
		if (i && h->v[i - 1].off + h->v[i - 1].len >= h->v[i].off)
			return false;
		sum += h->v[i].len;
	}
	return sum == h->bytes;
}

void mhold_release(struct mhold *h, struct alloc *a)
{
	for (size_t i = 0; i < h->n; i++)
		alloc_free(a, h->v[i].off);
	free(h->v);
	memset(h, 0, sizeof(*h));
}

/* A page of [from, to) whose byte is set. */
static bool any_set(const uint8_t *map, size_t map_len, uint64_t from, uint64_t to)
{
	for (uint64_t q = from; q < to && q < map_len; q++)
		if (map[q])
			return true;
	return false;
}

int mhold_plan(struct mhold *h, struct alloc *a, const uint8_t *tags, size_t ntags,
	       const uint8_t *map, size_t map_len, uint64_t data_off, uint64_t end)
{
	uint32_t al = alloc_align(a);
	uint64_t p = data_off / PAGE, last = end / PAGE;
	uint64_t cur = 0;		/* holding: the start of the gap not held yet */
	bool holding = false;
	/* the allocator's extents in offset order (its walk, not a lookup a
	 * page: 3M of those took half a second of a warm MOUNT); the holds
	 * go in behind the extent last returned, as the walk allows */
	uint64_t it = 0, eoff = 0, elen = 0;
	bool more = alloc_next_used(a, &it, &eoff, &elen);
	int rc;

	if (al < PAGE)
		return -EINVAL;
	while (p < last) {
		uint64_t off = p * PAGE;
		uint8_t mb = p < map_len ? map[p] : 0;
		uint8_t tb = p < ntags ? tags[p] : 0;

		while (more && eoff < off)	/* none: extents start on pages */
			more = alloc_next_used(a, &it, &eoff, &elen);
		uint64_t len = more && eoff == off ? elen : 0;
		if (len) {
			/* an extent of the table: the map vouches for it when
			 * its page has its tag and no page inside it is set */
			uint64_t next = (off + len + PAGE - 1) / PAGE;
			bool inner = any_set(map, map_len, p + 1, next);
			bool sure = tb && mb == tb && !inner;

			if (holding) {
				if (off > cur && (rc = mhold_add(h, a, cur, off - cur)))
					return rc;
				holding = !sure;
				cur = off + len;
			} else if ((mb && mb != tb) || inner) {
				holding = true;	/* it may hide another: hold after it */
				cur = off + len;
			}
			p = next;
			more = alloc_next_used(a, &it, &eoff, &elen);
			continue;
		}
		if (mb && !holding) {
			/* committed, unknown to the table: hold from here */
			holding = true;
			cur = off & ~(uint64_t)(al - 1);
			if (cur < data_off)
				cur = data_off;
		}
		p++;
	}
	if (holding && end > cur)
		return mhold_add(h, a, cur, end - cur);
	return 0;
}

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
	if (!len)
		return 0;
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

static inline uint64_t ent_off(const struct mrecon_ent *e)
{
	return e->key & ~(uint64_t)7;
}

static inline bool ent_mem(const struct mrecon_ent *e)
{
	return (e->key >> 1 & 3) == KVP_TIER_MEM;
}

static inline uint8_t ent_tag(const struct mrecon_ent *e)
{
	return (uint8_t)(e->len >> MHOLD_TAG_SHIFT);
}

/* The map vouches for e: its page's byte is e's tag. */
static bool ent_sure(const struct mrecon_ent *e, const uint8_t *map, size_t map_len)
{
	uint64_t p = ent_off(e) / PAGE;

	return p < map_len && map[p] == ent_tag(e);
}

int mhold_plan(struct mhold *h, struct alloc *a, const struct mrecon_ent *ent, size_t n,
	       const uint8_t *map, size_t map_len, uint64_t data_off, uint64_t end)
{
	uint32_t al = alloc_align(a);
	uint64_t prev_end = data_off;	/* end of the last table extent before i */
	size_t i = 0;

	if (al < PAGE)
		return -EINVAL;
	uint64_t last = end / PAGE < map_len ? end / PAGE : map_len;
	for (uint64_t p = data_off / PAGE; p < last; p++) {
		if (!map[p])
			continue;
		uint64_t start = (p * PAGE) & ~(uint64_t)(al - 1);
		if (start < data_off)
			start = data_off;
		for (; i < n && ent_off(&ent[i]) < p * PAGE; i++)
			if (ent_mem(&ent[i]))
				prev_end = ent_off(&ent[i]) + (ent[i].len & MHOLD_LEN_MASK);
		/* the table knows the extent committed here */
		size_t k = i;
		while (k < n && !ent_mem(&ent[k]))
			k++;
		if (k < n && ent_off(&ent[k]) < (p + 1) * PAGE && ent_tag(&ent[k]) == map[p])
			continue;
		/* hold the free space from here to the next extent the map
		 * vouches for, around the table's doubtful ones */
		uint64_t cur = prev_end > start ? prev_end : start;
		for (; i < n; i++) {
			const struct mrecon_ent *e = &ent[i];
			if (!ent_mem(e))
				continue;
			if (ent_off(e) > start && ent_sure(e, map, map_len))
				break;
			if (ent_off(e) > cur) {
				int rc = mhold_add(h, a, cur, ent_off(e) - cur);
				if (rc)
					return rc;
			}
			prev_end = ent_off(e) + (e->len & MHOLD_LEN_MASK);
			if (prev_end > cur)
				cur = prev_end;
		}
		uint64_t bound = i < n ? ent_off(&ent[i]) : end;
		if (bound > cur) {
			int rc = mhold_add(h, a, cur, bound - cur);
			if (rc)
				return rc;
		}
		/* pages up to the bound are covered; the bound's page is sure */
		if (bound / PAGE > p)
			p = bound / PAGE - 1;
		if (i == n)
			break;
	}
	return 0;
}

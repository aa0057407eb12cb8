/* segmap: see segmap.h. The commit map's byte operations and the scan that
 * walks the map instead of the data. Pure functions over caller memory plus
 * lseek(SEEK_DATA) on the segment's fd; callable from any thread.
 */
#include "segmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

#define GRAIN (1ull << SEG_MAP_SHIFT)

static inline uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

void segmap_commit(const struct segment *seg, uint64_t off, uint64_t generation)
{
	if (!seg->map || off < seg->data_off || off >= seg->size)
		return;
	__atomic_store_n(seg->map + (off >> SEG_MAP_SHIFT), segmap_tag(generation),
			 __ATOMIC_RELEASE);
}

static bool live_at(const uint8_t *base, uint64_t size, uint64_t p, uint64_t uuid)
{
	struct ext_hdr h;

	return ext_decode(base + p, size - p, 0, &h, NULL) == 0 && h.seg_uuid == uuid;
}

void segmap_uncommit(const struct segment *seg, uint64_t off)
{
	uint8_t *b, old;
	uint64_t g;

	if (!seg->map || off < seg->data_off || off >= seg->size)
		return;
	b = seg->map + (off >> SEG_MAP_SHIFT);
	/* One extent per byte: the master reuses the space only after this
	 * FREE is answered, so nobody else writes here meanwhile. */
	if (seg->align >= GRAIN) {
		__atomic_store_n(b, 0, __ATOMIC_RELEASE);
		return;
	}
	/* Several extents share the byte. Read it first: a neighbour that
	 * commits after this read changes nothing (its write is published
	 * before its byte), one that committed before is seen below. */
	old = __atomic_load_n(b, __ATOMIC_ACQUIRE);
	if (!old)
		return;
	g = off & ~(GRAIN - 1);
	for (uint64_t p = round_up(g > seg->data_off ? g : seg->data_off, seg->align);
	     p < g + GRAIN && p < seg->size; p += seg->align)
		if (p != off && live_at(seg->base, seg->size, p, seg->uuid))
			return;
	__atomic_compare_exchange_n(b, &old, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

/* ---- the scan ---- */

struct sm_scan {
	const struct segmap_view *v;
	unsigned flags;
	uint64_t max_value;
	int (*cb)(const struct ext_found *f, void *arg);
	void *arg;
	struct ext_scan_stats *st;
	bool have;			/* pend holds an extent not reported yet */
	struct ext_found pend;
	uint64_t pend_end;
	uint64_t pend_idx;		/* its map byte */
};

static void sm_clear(const struct sm_scan *s, uint64_t idx, uint8_t tag)
{
	if (s->flags & SEGMAP_CLEAN)
		__atomic_compare_exchange_n(s->v->map + idx, &tag, 0, false, __ATOMIC_ACQ_REL,
					    __ATOMIC_RELAXED);
}

static void sm_verify(struct sm_scan *s, struct ext_found *f)
{
	if (f->verified)
		return;
	f->verified = true;
	f->checksum_ok = ext_verify(s->v->base + f->off, &f->h);
	s->st->verified++;
}

static int sm_report(struct sm_scan *s, const struct ext_found *f)
{
	s->st->live++;
	s->st->live_bytes += f->alloc_len;
	s->st->value_bytes += f->h.value_len;
	return s->cb(f, s->arg);
}

/* The pending extent lost a conflict: bad, or stale next to a newer one. */
static int sm_drop_pend(struct sm_scan *s)
{
	s->have = false;
	if (s->v->align >= GRAIN)
		sm_clear(s, s->pend_idx, s->v->map[s->pend_idx]);
	if (!s->pend.checksum_ok) {
		s->st->bad_checksum++;
		if (s->flags & SEGMAP_REPORT_BAD)
			return sm_report(s, &s->pend);
	}
	return 0;
}

static int sm_flush(struct sm_scan *s)
{
	if (!s->have)
		return 0;
	s->have = false;
	return sm_report(s, &s->pend);
}

/* One candidate header at p, vouched for by map byte idx holding tag.
 * *kept: it was reported or is pending (the byte stays). */
static int sm_consider(struct sm_scan *s, uint64_t p, uint64_t idx, uint8_t tag, bool *kept)
{
	const struct segmap_view *v = s->v;
	struct ext_found f;
	int rc;

	memset(&f, 0, sizeof(f));
	rc = ext_decode(v->base + p, v->size - p, s->max_value, &f.h, &f.key);
	if (rc == -ENOENT && (!v->uuid || f.h.seg_uuid == v->uuid))
		s->st->tombstones++;	/* freed, the byte not cleared yet */
	if (rc < 0)
		return 0;
	if (v->uuid && f.h.seg_uuid != v->uuid) {
		s->st->foreign++;
		return 0;
	}
	f.off = p;
	f.alloc_len = round_up(ext_size(f.h.key_len, f.h.value_len), v->align);
	/* The byte vouches for the value only where it names this one
	 * extent: one per byte (align >= 4 KiB) and the tag of its
	 * generation. Anything else shows its checksum. */
	if ((s->flags & SEGMAP_VERIFY) || v->align < GRAIN || segmap_tag(f.h.generation) != tag)
		sm_verify(s, &f);
	if (s->have && p < s->pend_end) {
		/* Two committed extents overlap: one is stale (its FREE never
		 * reached the node, a put of an earlier master finished after a
		 * scan). The one whose value checks out stands; both: the newer. */
		s->st->conflicts++;
		sm_verify(s, &s->pend);
		sm_verify(s, &f);
		if (s->pend.checksum_ok &&
		    (!f.checksum_ok || s->pend.h.generation >= f.h.generation)) {
			if (!f.checksum_ok)
				s->st->bad_checksum++;
			return 0;
		}
		rc = sm_drop_pend(s);
		if (rc)
			return rc;
	} else {
		rc = sm_flush(s);
		if (rc)
			return rc;
	}
	if (f.verified && !f.checksum_ok) {
		s->st->bad_checksum++;
		if (!(s->flags & SEGMAP_REPORT_BAD))
			return 0;
		/* Listed, flagged; it covers nothing (it may be stale). */
		*kept = true;
		return sm_report(s, &f);
	}
	*kept = true;
	s->pend = f;
	s->pend_end = p + f.alloc_len;
	s->pend_idx = idx;
	s->have = true;
	return 0;
}

/* One non-zero map byte. */
static int sm_grain(struct sm_scan *s, uint64_t idx, uint8_t tag)
{
	const struct segmap_view *v = s->v;
	uint64_t g = idx << SEG_MAP_SHIFT;
	bool kept = false;
	int rc = 0;

	s->st->marks++;
	if (g + GRAIN > v->data_off && g < v->size) {
		if (v->align >= GRAIN) {
			if (g % v->align == 0 && g >= v->data_off)
				rc = sm_consider(s, g, idx, tag, &kept);
		} else {
			uint64_t p = round_up(g > v->data_off ? g : v->data_off, v->align);

			for (; !rc && p < g + GRAIN && p < v->size &&
			     v->size - p >= EXT_HDR_SIZE; p += v->align)
				rc = sm_consider(s, p, idx, tag, &kept);
		}
	}
	if (!kept) {
		s->st->stale_marks++;
		sm_clear(s, idx, tag);
	}
	return rc;
}

/* Map bytes [from, to): 8 at a time, most are zero. */
static int sm_run(struct sm_scan *s, uint64_t from, uint64_t to)
{
	const uint8_t *map = s->v->map;
	uint64_t i = from;
	int rc;

	s->st->map_bytes += to - from;
	while (i < to) {
		if (i % 8 == 0 && to - i >= 8) {
			uint64_t w = __atomic_load_n((const uint64_t *)(const void *)(map + i),
						     __ATOMIC_ACQUIRE);
			if (!w) {
				i += 8;
				continue;
			}
		}
		uint8_t tag = __atomic_load_n(map + i, __ATOMIC_ACQUIRE);

		if (tag) {
			rc = sm_grain(s, i, tag);
			if (rc)
				return rc;
		}
		i++;
	}
	return 0;
}

int segmap_scan_view(const struct segmap_view *v, unsigned flags, uint64_t max_value,
		     int (*cb)(const struct ext_found *f, void *arg), void *arg,
		     struct ext_scan_stats *st)
{
	struct ext_scan_stats dummy;
	struct sm_scan s = {
		.v = v, .flags = flags, .max_value = max_value, .cb = cb, .arg = arg,
	};
	uint64_t n, pos = 0;
	int rc;

	s.st = st ? st : &dummy;
	memset(s.st, 0, sizeof(*s.st));
	if (v->align < 64 || (v->align & (v->align - 1)) || !v->map)
		return -EINVAL;
	/* Bytes for places outside the file are never looked at. */
	n = v->map_len;
	if (n > (v->size + GRAIN - 1) >> SEG_MAP_SHIFT)
		n = (v->size + GRAIN - 1) >> SEG_MAP_SHIFT;
	while (pos < n) {
		uint64_t end = n;

		if (v->fd >= 0) {
			/* Only the pages of the map the file holds: a fresh
			 * or mostly empty segment's map is a hole. */
			off_t base = (off_t)((const uint8_t *)v->map - v->base);
			off_t d = lseek(v->fd, base + (off_t)pos, SEEK_DATA), h;

			if (d < 0 && errno == ENXIO)
				break;
			if (d >= 0) {
				if ((uint64_t)(d - base) >= n)
					break;
				h = lseek(v->fd, d, SEEK_HOLE);
				pos = (uint64_t)(d - base);
				if (h > d && (uint64_t)(h - base) < n)
					end = (uint64_t)(h - base);
				/* One call fills the page tables of the run. */
				(void)madvise((void *)((uintptr_t)(v->map + pos) & ~(GRAIN - 1)),
					      round_up(end - pos + ((uintptr_t)(v->map + pos) &
								    (GRAIN - 1)), GRAIN),
					      MADV_POPULATE_READ);
			}
			/* lseek failing otherwise: read all of it */
		}
		rc = sm_run(&s, pos, end);
		if (rc)
			return rc;
		pos = end;
	}
	return sm_flush(&s);
}

int segmap_copy(const struct segment *seg, uint8_t **out, uint64_t *n)
{
	uint64_t len = seg->map_len, pos = 0, last = 0;
	uint8_t *b;

	*out = NULL;
	*n = 0;
	if (!seg->map)
		return -ENOTSUP;
	if (len > (seg->size + GRAIN - 1) >> SEG_MAP_SHIFT)
		len = (seg->size + GRAIN - 1) >> SEG_MAP_SHIFT;
	b = calloc(len ? len : 1, 1);
	if (!b)
		return -ENOMEM;
	while (pos < len) {
		uint64_t end = len;

		if (seg->fd >= 0) {
			off_t base = (off_t)(seg->map - (const uint8_t *)seg->base);
			off_t d = lseek(seg->fd, base + (off_t)pos, SEEK_DATA), h;

			if (d < 0 && errno == ENXIO)
				break;
			if (d >= 0) {
				if ((uint64_t)(d - base) >= len)
					break;
				pos = (uint64_t)(d - base);
				h = lseek(seg->fd, d, SEEK_HOLE);
				if (h > d && (uint64_t)(h - base) < len)
					end = (uint64_t)(h - base);
			}
		}
		for (uint64_t i = pos; i < end; i++) {
			b[i] = __atomic_load_n(seg->map + i, __ATOMIC_ACQUIRE);
			if (b[i])
				last = i + 1;
		}
		pos = end;
	}
	*out = b;
	*n = last;
	return 0;
}

int segmap_scan(const struct segment *seg, unsigned flags, uint64_t max_value,
		int (*cb)(const struct ext_found *f, void *arg), void *arg,
		struct ext_scan_stats *st)
{
	if (!seg->map)
		return ext_scan_ex(seg->base, SEG_DATA_OFF, seg->size, seg->align, seg->uuid,
				   max_value, flags & SEGMAP_REPORT_BAD, !(flags & SEGMAP_TRUST),
				   cb, arg, st);
	struct segmap_view v = {
		.base = seg->base, .size = seg->size, .data_off = seg->data_off, .map = seg->map,
		.map_len = seg->map_len, .align = seg->align, .uuid = seg->uuid, .fd = seg->fd,
	};
	return segmap_scan_view(&v, flags, max_value, cb, arg, st);
}

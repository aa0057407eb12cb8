/* fuzz_segmap: arbitrary bytes as a format 2 segment (header, commit map,
 * data) for the map-driven scan, and as a format 2 header for
 * segment_header_check. The first bytes pick the alignment, the flags and
 * how the rest splits into map and data. Asserts what recovery relies on:
 * reported extents come in ascending order, lie inside the file and the
 * data area, decode at their offset with the segment's uuid, do not
 * overlap each other (those whose value checked out or was trusted), sit on
 * a byte that was non-zero, and one reported without its checksum computed
 * carries the tag of its generation at an alignment of 4 KiB or more. With
 * SEGMAP_CLEAN the map only loses bytes, and a second scan reports the
 * same extents.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "extent.h"
#include "segmap.h"
#include "segment.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXREP 4096

struct ctx {
	const struct segmap_view *v;
	const uint8_t *map0;		/* the map before the scan */
	unsigned flags;
	uint64_t last_end, last_off;
	uint64_t off[MAXREP];
	int n;
};

static int check(const struct ext_found *f, void *arg)
{
	struct ctx *c = arg;
	const struct segmap_view *v = c->v;
	struct ext_hdr h;
	uint8_t tag;

	if (f->off < v->data_off || f->off >= v->size || f->off % v->align ||
	    ext_size(f->h.key_len, f->h.value_len) > v->size - f->off)
		abort();
	if (ext_decode(v->base + f->off, v->size - f->off, 0, &h, NULL) != 0 ||
	    h.generation != f->h.generation || h.seg_uuid != v->uuid ||
	    f->key != v->base + f->off + EXT_HDR_SIZE)
		abort();
	if (c->n && f->off <= c->last_off)
		abort();
	tag = c->map0[f->off >> SEG_MAP_SHIFT];
	if (!tag)
		abort();
	if (f->verified && f->checksum_ok != ext_verify(v->base + f->off, &f->h))
		abort();
	if (!f->verified && (v->align < 4096 || tag != segmap_tag(f->h.generation) ||
			     (c->flags & SEGMAP_VERIFY)))
		abort();
	if (f->verified && !f->checksum_ok && !(c->flags & SEGMAP_REPORT_BAD))
		abort();
	if (!f->verified || f->checksum_ok) {
		if (c->n && f->off < c->last_end)
			abort();
		c->last_end = f->off + f->alloc_len;
	}
	c->last_off = f->off;
	if (c->n < MAXREP)
		c->off[c->n] = f->off;
	c->n++;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint32_t aligns[4] = { 64, 256, 4096, 8192 };
	struct segment_info info;
	char err[256];
	uint8_t *img, *map0;
	uint64_t fsize, uuid = 0x5eedfacecafef00dull;
	uint32_t align;
	unsigned flags;
	size_t body;

	if (size >= SEG_HDR2_BYTES)
		segment_header_check(data, size, &info, err, sizeof(err));
	if (size < 4)
		return 0;
	align = aligns[data[0] & 3];
	flags = data[1] & (SEGMAP_VERIFY | SEGMAP_REPORT_BAD | SEGMAP_CLEAN);
	/* A file of whole 4 KiB pages: header, map, then the input's bytes
	 * spread over the data area at the place data[2] picks. */
	body = size - 4;
	fsize = ((uint64_t)body + 3 * 4096 + 8191) & ~8191ull;
	if (fsize < 32768)
		fsize = 32768;
	img = calloc(1, fsize);
	map0 = calloc(1, fsize >> SEG_MAP_SHIFT);
	if (!img || !map0)
		abort();
	struct segmap_view v = {
		.base = img, .size = fsize, .data_off = segment_data_off(fsize, align),
		.map = img + SEG_MAP_OFF, .map_len = fsize >> SEG_MAP_SHIFT, .align = align,
		.uuid = uuid, .fd = -1,
	};
	if (v.data_off >= fsize)
		goto out;
	/* The first map_len bytes of the body are the map, the rest goes to
	 * the data area; a header image in the body gets this uuid patched in
	 * where data[3] says, so that valid extents are common. */
	size_t m = body < v.map_len ? body : v.map_len;
	memcpy(v.map, data + 4, m);
	size_t rest = body - m;
	uint64_t room = fsize - v.data_off;
	if (rest > room)
		rest = room;
	memcpy(img + v.data_off, data + 4 + m, rest);
	for (uint64_t p = v.data_off; p + EXT_HDR_SIZE <= fsize; p += align) {
		if ((data[3] & 1) && img[p] == 'K' && img[p + 1] == 'V') {
			struct ext_hdr h;
			const uint8_t *key;

			/* re-encode a plausible header so the checksum holds */
			if (p + EXT_HDR_SIZE + 8 <= fsize) {
				h.key_len = 1 + img[p + 2] % 8;
				h.value_len = img[p + 3] * 16u;
				h.generation = img[p + 4];
				h.seg_uuid = (data[3] & 2) ? uuid : 7;
				h.put_time_ns = 0;
				h.flags = 0;
				if (ext_size(h.key_len, h.value_len) <= fsize - p) {
					h.value_checksum = (img[p + 5] & 1) ?
						ext_checksum(img + p + EXT_HDR_SIZE + h.key_len,
							     h.value_len) : 0;
					memcpy(img + p + 32, "keykeyke", 8);
					ext_encode(img + p, &h, img + p + 32);
					(void)key;
				}
			}
		}
	}
	memcpy(map0, v.map, v.map_len);

	struct ctx c = { .v = &v, .map0 = map0, .flags = flags };
	struct ext_scan_stats st;
	if (segmap_scan_view(&v, flags, 0, check, &c, &st) != 0)
		abort();
	if (st.live != (uint64_t)c.n)
		abort();
	if (flags & SEGMAP_CLEAN) {
		/* cleaning only clears */
		for (uint64_t i = 0; i < v.map_len; i++)
			if (v.map[i] && v.map[i] != map0[i])
				abort();
		int n1 = c.n;
		uint64_t first[MAXREP];
		memcpy(first, c.off, sizeof(first));
		struct ctx c2 = { .v = &v, .map0 = map0, .flags = flags };
		if (segmap_scan_view(&v, flags, 0, check, &c2, NULL) != 0)
			abort();
		/* bad ones are listed (REPORT_BAD) but their byte may go */
		if (!(flags & SEGMAP_REPORT_BAD)) {
			if (c2.n != n1)
				abort();
			for (int i = 0; i < n1 && i < MAXREP; i++)
				if (c2.off[i] != first[i])
					abort();
		}
	}
out:
	free(img);
	free(map0);
	return 0;
}

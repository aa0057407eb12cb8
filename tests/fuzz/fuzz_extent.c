/* fuzz_extent: arbitrary bytes as an extent header (ext_decode at offset
 * 0, then ext_verify), as a region to scan (ext_scan at alignment 64 and
 * 4096, any uuid and a uuid taken from the input), and as a segment header
 * (segment_header_check). Asserts what a caller relies on: a decoded extent
 * lies inside the input, a reported one too, and a decoded header encodes
 * back to the same bytes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "extent.h"
#include "segment.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct ctx {
	const uint8_t *data;
	size_t size;
	uint32_t align;
	uint64_t last;
	int n;
};

static int check_found(const struct ext_found *f, void *arg)
{
	struct ctx *c = arg;

	if (f->off % c->align || f->off > c->size ||
	    ext_size(f->h.key_len, f->h.value_len) > c->size - f->off ||
	    f->key != c->data + f->off + EXT_HDR_SIZE || f->h.magic != EXT_MAGIC ||
	    (c->n && f->off < c->last + c->align))
		abort();
	c->last = f->off;
	c->n++;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t re[EXT_HDR_SIZE + 1024];
	struct segment_info info;
	struct ext_hdr h;
	const uint8_t *key;
	uint64_t uuid = 0;
	char err[256];
	int rc;

	rc = ext_decode(data, size, 0, &h, &key);
	if (rc == 0 || rc == -ENOENT) {
		if (key != data + EXT_HDR_SIZE || h.key_len < 1 || h.key_len > 1024)
			abort();
	}
	if (rc == 0) {
		if (ext_size(h.key_len, h.value_len) > size)
			abort();
		(void)ext_verify(data, &h);
		ext_encode(re, &h, key);
		if (memcmp(re, data, EXT_HDR_SIZE + h.key_len) != 0)
			abort();
	}
	/* max_value limits too */
	if (size > 8)
		(void)ext_decode(data, size, data[size - 1], &h, &key);

	if (size >= 48)
		memcpy(&uuid, data + 40, 8);
	for (uint32_t align = 64; align <= 4096; align *= 64) {
		struct ctx c = { .data = data, .size = size, .align = align };

		if (ext_scan(data, 0, size, align, 0, 0, true, check_found, &c) != 0)
			abort();
		c.n = 0;
		if (ext_scan_ex(data, data[0], size, align, uuid, 0, size & 1, size & 2,
				check_found, &c, NULL) != 0)
			abort();
	}

	if (segment_header_check(data, size, &info, err, sizeof(err)) == 0) {
		if (info.uuid == 0 || info.size <= SEG_DATA_OFF || !memchr(info.name, 0, sizeof(info.name)))
			abort();
	}
	return 0;
}

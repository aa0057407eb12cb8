/* fuzz_mevents: the master's KV event replay socket takes requests from
 * any ZMQ peer. The input is cut into frames (a count byte, then a length
 * byte before each frame) for mevents_parse_replay, which must accept
 * exactly [identity 1..255 bytes, "", 8 bytes] and read nothing past the
 * lengths given; the bytes are also a key for mevents_block_hash and an
 * event batch for mevents_encode (both layouts). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mevents.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *frame[8];
	size_t len[8], n = 0, off = 1;
	uint8_t *copy[8] = { 0 };

	if (size < 1)
		return 0;
	size_t want = data[0] % 8;
	while (n < want && off < size) {
		size_t l = data[off++];
		if (l > size - off)
			l = size - off;
		/* each frame in its own allocation: ASan sees any overread */
		copy[n] = malloc(l ? l : 1);
		if (!copy[n])
			break;
		memcpy(copy[n], data + off, l);
		frame[n] = copy[n];
		len[n++] = l;
		off += l;
	}
	uint64_t start;
	if (mevents_parse_replay(frame, len, n, &start) == 0) {
		uint64_t v = 0;
		if (n != 3 || !len[0] || len[0] > 255 || len[1] || len[2] != 8)
			abort();
		for (int i = 0; i < 8; i++)
			v = v << 8 | frame[2][i];
		if (v != start)
			abort();
	}
	for (size_t i = 0; i < n; i++)
		free(copy[i]);

	(void)mevents_block_hash(data, size);
	struct mev_item it[4];
	size_t ni = 0;
	for (size_t i = 0; i + 3 <= size && ni < 4; i += 3, ni++)
		it[ni] = (struct mev_item){ .type = data[i] % 3, .medium = data[i + 1] % 3,
					    .has_parent = data[i + 2] & 1, .hash = data[i + 1],
					    .parent = data[i + 2], .key = NULL };
	struct mev_fmt f = { .legacy = size & 1, .block_size = size, .backend_id = "fz" };
	uint8_t *p;
	size_t plen;
	if (mevents_encode(&f, 1.0, it, ni, &p, &plen) == 0)
		free(p);
	return 0;
}

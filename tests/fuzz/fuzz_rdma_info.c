/* fuzz_rdma_info: arbitrary bytes as the rdma_info blob a node publishes
 * in MOUNT and clients receive in SEGMENTS (rdma_info_decode). Asserts what
 * the client's transfer path relies on: a decoded blob has 1..8 devices,
 * each with 1..RDMA_MAX_CHUNKS chunks that are contiguous, start at addr and
 * cover exactly len bytes without wrapping; chunk lookups stay inside; and
 * it encodes back to the very same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rdma.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rdma_info *info = NULL;
	char err[256];
	int rc = rdma_info_decode(data, size, &info, err, sizeof(err));

	if (rc != 0) {
		if (info || !err[0])
			abort();
		return 0;
	}
	if (!info || info->ndev < 1 || info->ndev > RDMA_MAX_DEVS || !info->len ||
	    info->addr + info->len < info->addr)
		abort();
	for (unsigned d = 0; d < info->ndev; d++) {
		const struct rdma_info_dev *v = &info->dev[d];
		uint64_t at = info->addr;

		if (!v->name[0] || strlen(v->name) >= RDMA_NAME_MAX || v->nchunks < 1 ||
		    v->nchunks > RDMA_MAX_CHUNKS)
			abort();
		for (uint32_t i = 0; i < v->nchunks; i++) {
			if (v->chunks[i].addr != at || !v->chunks[i].len)
				abort();
			at += v->chunks[i].len;
		}
		if (at != info->addr + info->len)
			abort();
		/* lookups at both ends and past them */
		uint32_t idx;
		uint64_t s = rdma_chunk_span(v->chunks, v->nchunks, info->addr, UINT64_MAX, &idx);

		if (!s || idx != 0 || s > v->chunks[0].len)
			abort();
		if (rdma_chunk_span(v->chunks, v->nchunks, info->addr + info->len, 1, &idx))
			abort();
		s = rdma_chunk_span(v->chunks, v->nchunks, info->addr + info->len - 1, 8, &idx);
		if (s != 1 || idx != v->nchunks - 1)
			abort();
	}
	struct wbuf b;

	wb_init(&b);
	if (rdma_info_encode(&b, info) != 0 || b.len != size || memcmp(b.p, data, size))
		abort();
	wb_free(&b);
	rdma_info_free(info);
	return 0;
}

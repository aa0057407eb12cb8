/* fuzz_kvfs_uring: what the kernel writes into a FUSE io_uring entry (the
 * in header, the payload size, the commit id) through kvfs_uring_arg0:
 * whatever it accepts must rebuild a message that fits the entry — the
 * header's len is header + first argument + payload, the first argument
 * fits its 128-byte area, the payload the entry's buffer, and the commit
 * id is the header's unique. */
#include <linux/fuse.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs_uring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char in_out[128] = { 0 };
	struct fuse_in_header ih;
	uint32_t psz = 0;
	uint64_t commit = 0;
	uint16_t maxk = 0;
	size_t max;
	int rc;

	if (size < sizeof(ih) + sizeof(psz) + sizeof(commit) + sizeof(maxk))
		return 0;
	memcpy(in_out, data, sizeof(ih));
	memcpy(&psz, data + sizeof(ih), sizeof(psz));
	memcpy(&commit, data + sizeof(ih) + 4, sizeof(commit));
	memcpy(&maxk, data + sizeof(ih) + 12, sizeof(maxk));
	if (size > sizeof(ih) + 14 && (data[sizeof(ih) + 14] & 1))
		commit = ((struct fuse_in_header *)(void *)in_out)->unique;	/* the usual case */
	max = (size_t)maxk * 64;
	rc = kvfs_uring_arg0(in_out, psz, commit, max);
	memcpy(&ih, in_out, sizeof(ih));
	if (rc >= 0 && (rc > 128 || psz > max || ih.unique != commit || !ih.unique ||
			(uint64_t)sizeof(ih) + (uint64_t)rc + psz != ih.len))
		abort();
	return 0;
}

/* fuzz_kvfs_name: the FUSE view's name decoder gets names from the kernel,
 * i.e. from any local user. Arbitrary bytes go to kvfs_unescape,
 * kvfs_piece_decode and kvfs_path_to_key (anything they accept must be the
 * canonical spelling of what they return), and as a key through
 * kvfs_key_to_path -> kvfs_path_to_key (must round-trip). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs.h"
#include "kvfs_name.h"
#include "kvpool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char in[KVFS_PATH_MAX], out[KVFS_PATH_MAX], again[KVFS_PATH_MAX];
	char key[KVP_MAX_KEY + 1];
	size_t n = size < sizeof(in) - 1 ? size : sizeof(in) - 1, olen;

	memcpy(in, data, n);
	in[n] = 0;

	/* one name: whatever decodes must re-encode to the same bytes */
	if (strlen(in) <= KVFS_NAME_MAX) {
		if (kvfs_unescape(in, out, sizeof(out), &olen) == 0) {
			if (kvfs_escape(out, olen, again, sizeof(again)) != 0 || strcmp(again, in) != 0)
				abort();
		}
		if (kvfs_piece_decode(in, out, sizeof(out), &olen) == 0) {
			if (!kvfs_is_piece(in, strlen(in)) || memchr(out, 0, olen) || memchr(out, '/', olen))
				abort();
		}
	}
	/* a path: accepted only in canonical form */
	if (kvfs_path_to_key(in, out, sizeof(out), &olen) == 0) {
		if (kvfs_key_to_path(out, olen, again, sizeof(again)) != 0 || strcmp(again, in) != 0)
			abort();
	}
	/* the bytes as a key (NUL-free, <= KVP_MAX_KEY): must round-trip */
	size_t kn = 0;
	for (size_t i = 0; i < size && kn < KVP_MAX_KEY; i++)
		if (data[i])
			key[kn++] = (char)data[i];
	if (kn > 0) {
		if (kvfs_key_to_path(key, kn, out, sizeof(out)) != 0)
			abort();
		if (kvfs_path_to_key(out, again, sizeof(again), &olen) != 0 || olen != kn ||
		    memcmp(again, key, kn) != 0)
			abort();
		for (char *p = out, *e; *p; p = e + (*e ? 1 : 0)) {
			e = strchr(p, '/');
			if (!e)
				e = p + strlen(p);
			if (e - p > KVFS_NAME_MAX)
				abort();
		}
	}
	return 0;
}

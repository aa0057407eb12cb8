/* fuzz_top: hostile bytes as the HTTP answer `kvpool top` reads from a
 * master's or node's /api/status (top_parse, src/cli/cli_top.c: status
 * line, headers, the JSON document). Checks: every string it keeps is
 * NUL-terminated inside its field, and the row counts stay within the
 * arrays.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli_top.h"

#define FAIL() abort()

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TERMINATED(f) (memchr((f), '\0', sizeof(f)) != NULL)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct top_snap s;
	char err[128];

	if (top_parse((const char *)data, size, &s, err, sizeof(err)) < 0) {
		if (!TERMINATED(err))
			FAIL();
		return 0;
	}
	if (!TERMINATED(s.kind) || !TERMINATED(s.role) || !TERMINATED(s.leader) ||
	    !TERMINATED(s.epoch) || !TERMINATED(s.name) || !TERMINATED(s.master_addr))
		FAIL();
	if (s.nnodes > TOP_MAX_NODES || s.nnodes > s.nnodes_total || s.nns > TOP_MAX_NS)
		FAIL();
	for (size_t i = 0; i < s.nnodes; i++)
		if (!TERMINATED(s.nodes[i].name) || !TERMINATED(s.nodes[i].state))
			FAIL();
	return 0;
}

/* fuzz_client: libkvpool's decoders of untrusted bytes — every master reply
 * body it parses (SEGMENTS, GET, PUT_START, STAT, LIST items) and the node
 * reply stream of the TCP transport (frame headers, bodies and READ
 * payloads split at arbitrary points, replies to unknown or in-flight
 * requests). */
#include <stddef.h>
#include <stdint.h>

#include "client_i.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	client_fuzz_replies(data, size);
	xp_tcp_fuzz_stream(data, size);
	return 0;
}

/* put: the put calls of kvpool.h (kvp_put, kvp_put_from, kvp_batch_put_from)
 * over the master's PUT_START / PUT_END / PUT_REVOKE and the transports.
 * No state of its own: each call runs on its caller's thread; the handle's
 * pools and segment table are reached through mcall and segtab.
 */
#ifndef KVP_PUT_H
#define KVP_PUT_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool.h"
#include "wire.h"

/* One PUT_START reply item, decoded and checked (untrusted bytes). */
struct put_reply {
	int status;
	uint64_t gen;
	uint8_t nrep;
	struct {
		uint32_t id;
		uint64_t off, alloc_len;
		uint8_t grant[WIRE_GRANT_LEN];
	} rep[KVP_MAX_REPLICAS];
};

/* Decodes the next item of a PUT_START reply from r (untrusted bytes):
 * 0 (p filled), the item's own error status, or KVP_EPROTO (malformed).
 * Also the decoder tests/fuzz/fuzz_client.c runs. */
int put_reply_item(struct rbuf *r, struct put_reply *p);

#endif

/* get: the get calls of kvpool.h (kvp_get, kvp_get_into, kvp_batch_get_into)
 * over the master's GET and the transports, every read verified against
 * the master's record. No state of its own: each call runs on its caller's
 * thread; the handle's pools and segment table are reached through mcall
 * and segtab.
 */
#ifndef KVP_GET_H
#define KVP_GET_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool.h"
#include "xport.h"

struct client_seg;
struct rbuf;

/* Where the master says one replica of a value is. */
struct get_rep {
	uint32_t id;
	uint8_t tier;
	uint64_t off, alloc_len;
	struct client_seg *seg;
	enum xp_kind kind;
};

/* One GET reply item, decoded and checked (untrusted bytes). */
struct get_reply {
	int status;
	uint64_t vlen, gen, csum, lease_ms;
	uint8_t nrep;
	struct get_rep rep[KVP_MAX_REPLICAS];
};

/* Decodes the next item of a GET reply from r (untrusted bytes): 0 (g
 * filled), the item's own error status, or KVP_EPROTO (malformed). Also
 * the decoder tests/fuzz/fuzz_client.c runs. */
int get_reply_item(struct rbuf *r, uint64_t max_value, struct get_reply *g);

#endif

/* put: the put calls of kvpool.h (kvp_put, kvp_put_from, kvp_batch_put_from)
 * over the master's PUT_START / PUT_END / PUT_REVOKE and the transports.
 * No state of its own: each call runs on its caller's thread; the handle's
 * pools and segment table are reached through mcall and segtab.
 */
#ifndef KVP_PUT_H
#define KVP_PUT_H

#include <stddef.h>
#include <stdint.h>

/* Fuzzing (client_fuzz_replies): decodes PUT_START reply items, a u32
 * count then the items, from arbitrary bytes. Always 0. */
int put_fuzz_replies(const uint8_t *p, size_t n);

#endif

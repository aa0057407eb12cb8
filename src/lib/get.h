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

/* Fuzzing (client_fuzz_replies): decodes GET reply items, a u32 count then
 * the items, from arbitrary bytes. Always 0. */
int get_fuzz_replies(const uint8_t *p, size_t n);

#endif

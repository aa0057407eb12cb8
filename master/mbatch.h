/* mbatch: the shape of batch request bodies ("u32 n, then n items") —
 * checked whole before a handler acts on any item — and the per-item
 * statistics. Loop thread only; no locks.
 */
#ifndef KVP_MBATCH_H
#define KVP_MBATCH_H

#include <stdint.h>

#include "master_i.h"

/* Reads u32 n at r's position, then checks (on a copy) that n items of fmt
 * ('s' str, 'b' blob, '1' '2' '4' '8' fixed) follow, so that a handler never
 * acts on half a batch. 0, KVP_EPROTO or KVP_ELIMIT (above max_batch). */
int mbatch_shape(const struct master *m, const struct rbuf *r, const char *fmt, uint32_t *n);

/* Counts one item of a batch and, when status is an error, its failure. */
static inline void mbatch_item(struct op_stats *st, int status)
{
	st->items++;
	if (status < 0)
		st->failures++;
}

#endif

/* mput: PUT_START (allocation, grants, parking while eviction makes room),
 * PUT_END and PUT_REVOKE. Handlers return 0 or a KVP_E* frame status and
 * append their reply body to b. Loop thread only; no locks.
 */
#ifndef KVP_MPUT_H
#define KVP_MPUT_H

#include <stdbool.h>
#include <stdint.h>

#include "master_i.h"

/* *parked set: no reply now (nothing of it stays in b); the reply frame
 * goes out through c->send from mput_retry(). */
int mput_start(struct master *m, struct master_client *c, const struct wire_hdr *h,
	       const uint8_t *body, struct wbuf *b, bool *parked);
int mput_end(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st);
int mput_revoke(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st);
/* Finishes the parked PUT_STARTs whose eviction is done or whose wait is
 * over (after each node answer and each step). */
void mput_retry(struct master *m);
/* c's connection is gone: its parked PUT_STARTs are dropped unanswered. */
void mput_client_gone(struct master *m, struct master_client *c);

#endif

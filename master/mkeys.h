/* mkeys: requests on existing keys — GET, EXISTS, TOUCH, SIZE, STAT, PIN,
 * REMOVE, LEASE_RELEASE, REPLICA_CLEAR, REMOVE_PREFIX, LIST, INFO. Each
 * returns 0 or a KVP_E* frame status and appends its reply body to b
 * (layouts in wire.h); st counts the items.
 * Loop thread only; no locks.
 */
#ifndef KVP_MKEYS_H
#define KVP_MKEYS_H

#include "master_i.h"

/* c: the reader, whose host a promotion prefers. */
int mkeys_get(struct master *m, struct master_client *c, struct rbuf *r, struct wbuf *b,
	      struct op_stats *st);
/* LEASE_RELEASE: readers done with (key, generation), the current value or
 * a replaced one. */
int mkeys_lease_release(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st);
/* EXISTS: a lookup (eviction does not count it as a read). */
int mkeys_exists(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st);
/* TOUCH: keys a client read without the master (its optimistic reads);
 * each one found counts a read for eviction. */
int mkeys_touch(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st);
int mkeys_size(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st);
int mkeys_stat(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st);
int mkeys_pin(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st);
int mkeys_remove(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st);
/* REPLICA_CLEAR: drops the keys' replicas in one segment. */
int mkeys_replica_clear(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st);
int mkeys_remove_prefix(struct master *m, struct rbuf *r, struct wbuf *b);
int mkeys_list(struct master *m, struct rbuf *r, struct wbuf *b);
int mkeys_info(struct master *m, struct wbuf *b);

#endif

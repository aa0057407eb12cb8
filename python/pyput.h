/* pyput: the one put path of the extension — put/upsert, their batch and
 * multi-buffer forms, put_from_with_metadata and the tensor writes all end
 * here: a ReplicateConfig's replica count, soft pin (with its TTL), hard
 * pin and preferred segment become libkvpool's per-call put options;
 * values given in several pieces go to kvp_batch_put_iov as they are (no
 * staging copy). Called inside store_enter (lock read-held), GIL released.
 */
#ifndef KVP_PYPUT_H
#define KVP_PYPUT_H

#include <stddef.h>

#include "kvpool.h"

struct store;
struct putopt;

/* n values, value i in bufs[i] (lens[i] bytes); KVP codes in res. Returns
 * 0 when every item was tried, else a KVP_E* code for the whole batch. */
int put_many(struct store *s, const struct putopt *po, size_t n, const char *const *keys,
	     const void *const *bufs, const size_t *lens, int *res);
/* n values, value i the concatenation of iov[first[i] .. first[i + 1])
 * (kvp_batch_put_iov: the pieces are copied or sent from where they are,
 * device ones staged once by libkvpool); otherwise as put_many. */
int put_gather(struct store *s, const struct putopt *po, size_t n, const char *const *keys,
	       const struct kvp_iov *iov, const size_t *first, int *res);

/* The kvpool node name of a Mooncake segment name @seg (this store's
 * get_hostname(), a node's data endpoint "host:port", or a node name), or
 * with @seg NULL a node on this host; "" when there is none. */
void put_node_name(struct store *s, struct kvp *k, const char *seg, char *out, size_t cap);

#endif

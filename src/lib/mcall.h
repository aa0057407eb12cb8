/* mcall: a handle's calls to kvpool-master. Owns the pool of master
 * connections (up to kvp->mmax, opened on demand; kvp->midle and
 * kvp->mconns guarded by kvp->lock, held only to take or return one) and
 * runs pipelined request/reply exchanges on a borrowed connection, on the
 * calling thread; key batches are split into frames here.
 */
#ifndef KVP_MCALL_H
#define KVP_MCALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

struct kvp;

/* One request frame to the master and its reply. */
struct mcall {
	uint16_t op;
	struct wbuf body;
	size_t first;			/* key batches: first item of this frame */
	uint32_t count;			/* ... and how many */
	uint64_t reqid;
	bool got;
	int status;			/* frame-level status of the reply */
	uint64_t epoch;			/* of the master that answered (its HELLO) */
	uint8_t *rep;			/* reply body (NUL-terminated), rep_len bytes */
	uint32_t rep_len;
};

/* Runs n calls pipelined on one master connection: 0 (each call's status
 * and reply filled) or the KVP_E* that broke the exchange. */
int mc_call(struct kvp *kvp, struct mcall *c, size_t n, uint64_t deadline);
/* Work for the calling thread while the master answers. */
struct mc_during {
	void (*fn)(void *arg);
	void *arg;
	bool done;			/* set once fn ran */
};
/* mc_call that runs during->fn once, after the first frames went out and
 * before their replies are read (it may not run at all when the sending
 * fails; the caller checks done). */
int mc_call_during(struct kvp *kvp, struct mcall *c, size_t n, uint64_t deadline,
		   struct mc_during *during);
/* Sends n frames on one master connection without waiting for their
 * replies (only WIRE_OP_LEASE_RELEASE, and WIRE_OP_TOUCH for the reads
 * lcache reports: the connection drops those replies
 * before its next use, kvp_close waits for them): 0 or the KVP_E* that
 * stopped the sending. */
int mc_post(struct kvp *kvp, struct mcall *c, size_t n, uint64_t deadline);
/* A single frame with an already-built body; a frame-level status is
 * returned as the result. */
int mc_call1(struct kvp *kvp, struct mcall *c, uint64_t deadline);
/* Frees n calls (bodies and replies) and the array. */
void mc_free(struct mcall *c, size_t n);

/* Key batches: splits n items into frames of at most max_batch items and
 * about max_frame/2 body bytes. Each frame's body is prefix, u32 count, the
 * items written by enc(b, item, arg). NULL when out of memory. */
typedef void (*mc_item_enc)(struct wbuf *b, size_t i, void *arg);
struct mcall *mc_batch(struct kvp *kvp, uint16_t op, const void *prefix, size_t plen, size_t n,
		       mc_item_enc enc, void *arg, size_t *ncalls);
/* Opens a reply of a key batch frame: r reads the items; 0 or the frame's
 * status / KVP_EPROTO. */
int mc_batch_reply(const struct mcall *m, struct rbuf *r);
/* A key the master accepts (1..KVP_MAX_KEY bytes): 0 with *klen set, or
 * KVP_EKEY. */
int mc_key_check(const char *key, uint32_t *klen);

/* Closes the idle master connections (kvp_close; none may be lent). */
void mc_pool_close(struct kvp *kvp);

#endif

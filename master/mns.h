/* mns: namespaces — a model fingerprint per key prefix "NAME/" (NS_DECLARE,
 * NS_LIST), the per-connection set of declared namespaces, the check that
 * refuses keys of a namespace a connection did not declare, and the key and
 * byte counts per namespace. Namespaces live in memory only: after a
 * restart the clients' declarations (re-sent on reconnect) create them
 * again. Loop thread only; no locks.
 */
#ifndef KVP_MNS_H
#define KVP_MNS_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

struct master;
struct master_client;
struct obj;
struct rbuf;
struct wbuf;

#define MNS_MAX 4096			/* namespaces per master */

struct mns_ns {
	char name[WIRE_NS_NAME_MAX + 1];
	size_t name_len;
	char model[WIRE_NS_MODEL_MAX + 1];
	char dtype[WIRE_NS_FIELD_MAX + 1];
	char layout[WIRE_NS_FIELD_MAX + 1];
	uint32_t page_size, tp;
	uint64_t fp;			/* wire_ns_fingerprint of the fields */
	uint64_t keys, bytes;		/* complete objects under "name/" */
	uint32_t clients;		/* connections that declared it */
};

struct mns {
	struct mns_ns **v;		/* never shrinks: pointers stay valid */
	size_t n, cap;
};

void mns_destroy(struct mns *t);

/* NS_DECLARE and NS_LIST (layouts in wire.h): 0 or a frame status. */
int mns_declare(struct master *m, struct master_client *c, struct rbuf *r, struct wbuf *b);
int mns_list(struct master *m, struct wbuf *b);

/* 0, or KVP_ENSMISMATCH when key is under a namespace that c has not
 * declared. A read (write false) passes for a connection that never tried
 * to declare a namespace: the tools (kvpool get, the FUSE view) read any
 * block to debug it, while an engine, which declares, is held to what it
 * declared, even after a refusal. c NULL (adoption from a node's REPORT)
 * passes. */
int mns_check(const struct master *m, const struct master_client *c,
	      const uint8_t *key, size_t klen, bool write);

/* The page size (tokens per block) of the namespace key lies under; 0
 * when it lies under none. */
uint32_t mns_page_size(const struct master *m, const uint8_t *key, size_t klen);

/* A complete object appears (+1) or goes (-1): its namespace's counts. */
void mns_count(struct master *m, const struct obj *o, int sign);

/* The connection is gone: its declarations go with it. */
void mns_client_gone(struct master *m, struct master_client *c);

#endif

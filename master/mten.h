/* mten: the master's tenants — the table loaded from cluster.tenants_file
 * (tenant.h) plus the cluster token as the admin tenant "cluster", which
 * tenant each connection's HELLO token named, the rights checks on keys,
 * bytes and objects per tenant (by the write prefixes that own a key),
 * refused requests, byte quotas (a tenant's own objects are evicted first),
 * and the reload on SIGHUP that revokes connections of removed tokens.
 * Without a tenants file every check passes. Loop thread only; no locks.
 */
#ifndef KVP_MTEN_H
#define KVP_MTEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tenant.h"

struct master;
struct master_client;
struct obj;
struct sbuf;

struct mten_stats {
	uint64_t bytes, objects;	/* complete objects it owns */
	uint64_t refused;		/* requests and items refused (KVP_EPERM) */
	uint64_t quota_evictions;	/* its own objects evicted for its quota */
	uint64_t quota_refused;		/* puts over its quota that eviction could not fit */
};

struct mten {
	bool on;			/* a tenants file is configured */
	struct tenant_tab tab;		/* the file's tenants, then "cluster" (admin) */
	struct mten_stats *st;		/* per tab entry */
	uint64_t gen;			/* reloads */
};

/* Loads the tenants file of m->conf (nothing when none is configured).
 * 0 or KVP_EINVAL with the reason in err. */
int mten_init(struct master *m, char *err, size_t errlen);
void mten_destroy(struct mten *t);

/* Re-reads the file: connections whose tenant (by name and token) is gone
 * are revoked (their next request: KVP_EAUTH and close); the counters of
 * the tenants that stay carry over. A bad file keeps the old table. */
int mten_reload(struct master *m, char *err, size_t errlen);

/* HELLO: binds c to the tenant of token tok. KVP_EAUTH when no tenant has
 * it; KVP_EPERM when role needs admin (node, master, admin tools). */
int mten_hello(struct master *m, struct master_client *c, const uint8_t *tok, size_t n,
	       unsigned role);

/* 0, or KVP_EPERM (counted as refused) when c's tenant may not read or
 * write key. c NULL (the master itself) passes. */
int mten_check(struct master *m, struct master_client *c, const uint8_t *key, size_t klen,
	       bool write);
/* c's tenant; NULL when every right is c's (no tenants file, or c NULL:
 * the master itself); a tenant of no rights before HELLO or once revoked. */
const struct tenant *mten_of(const struct master *m, const struct master_client *c);

/* Read-only: may c read key (LIST filtering, not counted)? */
bool mten_may_read(const struct master *m, const struct master_client *c, const uint8_t *key,
		   size_t klen);
/* Over a prefix (LIST, REMOVE_PREFIX): 0 or KVP_EPERM when no key under
 * it could be c's. */
int mten_check_prefix(struct master *m, struct master_client *c, const uint8_t *p, size_t n,
		      bool write);

/* A put of vlen bytes under key by c: 0 when the owner's quota has room,
 * after evicting the owner's own least recently used objects (never
 * leased, pinned or incomplete ones, nor keep or key's own object) if
 * needed; KVP_ENOSPC when it cannot. */
int mten_quota(struct master *m, const uint8_t *key, size_t klen, uint64_t vlen,
	       const struct obj *keep);

/* A complete object appears (+1) or goes (-1): its owner's counts. */
void mten_count(struct master *m, const struct obj *o, int sign);

/* kvpool_master_tenant_* samples. */
void mten_metrics(const struct master *m, struct sbuf *b);

/* True when c's tenant was revoked by a reload. */
bool mten_revoked(const struct master_client *c);

#endif

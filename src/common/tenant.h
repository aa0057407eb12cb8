/* tenant: the tenants file — which tokens exist and what each may do (read,
 * write, admin over key prefixes and namespaces, a byte quota, RDMA trust) —
 * and the checks master and node make against it. A table is immutable once
 * loaded; a reload builds a new one and the owner swaps it in (master and
 * node loop threads; no locks).
 *
 * File format (docs/config.md "Tenants"): one tenant per line,
 *   NAME key=value ... [admin]
 * keys: token=T | token_file=PATH, read=P1,P2, write=P1,P2, quota_bytes=SIZE,
 * rdma=trusted|no. A prefix "ns:NAME" means the namespace NAME ("NAME/"),
 * "*" every key. write implies read. '#' starts a comment line.
 */
#ifndef KVP_TENANT_H
#define KVP_TENANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TENANT_NAME_MAX 63		/* [A-Za-z0-9._-] */
#define TENANT_TOKEN_MAX 255
#define TENANT_MAX 1024			/* tenants per file */
#define TENANT_PREFIXES_MAX 64		/* per right */
#define TENANT_FILE_MAX (1u << 20)	/* bytes */

#define TENANT_CLUSTER "cluster"	/* the cluster token's tenant (admin) */

enum tenant_right { TENANT_READ, TENANT_WRITE };

struct tenant_prefix {
	uint16_t len;
	char p[];			/* len bytes, NUL-terminated */
};

struct tenant {
	char name[TENANT_NAME_MAX + 1];
	char token[TENANT_TOKEN_MAX + 1];
	size_t token_len;
	bool admin;			/* every key, every right, node/admin roles */
	bool rdma_trusted;		/* may connect RDMA queue pairs (docs/rdma-cuda-numa.md) */
	bool read_all;			/* read covers every key ("*" or admin) */
	bool write_all;
	uint64_t quota_bytes;		/* 0: none */
	struct tenant_prefix **read, **write;
	uint32_t nread, nwrite;
};

struct tenant_tab {
	struct tenant *v;
	size_t n;
};

/* Decodes a tenants file held in buf[0..len) into t (empty on entry).
 * token_file= paths are read relative to nothing (absolute paths advised);
 * with read_files false they are refused (the fuzzer). 0, or KVP_EINVAL
 * with "line N: ..." in err; t is left empty on error. */
int tenant_parse(struct tenant_tab *t, const char *buf, size_t len, bool read_files,
		 char *err, size_t errlen);

/* Reads and decodes path (at most TENANT_FILE_MAX bytes; like token_file it
 * must not be readable by group or other). */
int tenant_load(struct tenant_tab *t, const char *path, char *err, size_t errlen);

/* tenant_load, then the cluster token appended as the admin tenant
 * TENANT_CLUSTER (the name and token are refused in the file): what
 * master and nodes run on. An empty cluster_token is refused (nodes need
 * one, and the daemons would listen on loopback only). */
int tenant_load_cluster(struct tenant_tab *t, const char *path, const char *cluster_token,
			char *err, size_t errlen);

void tenant_tab_free(struct tenant_tab *t);

/* The tenant whose token is tok (constant time in the token), or NULL. */
const struct tenant *tenant_find_token(const struct tenant_tab *t, const uint8_t *tok,
				       size_t n);

const struct tenant *tenant_find_name(const struct tenant_tab *t, const char *name);

/* May tenant t use key for r? NULL t: yes (no tenants configured). */
bool tenant_may(const struct tenant *t, const uint8_t *key, size_t klen, enum tenant_right r);

/* May t see some key under prefix p (a LIST or REMOVE_PREFIX over p)? */
bool tenant_may_prefix(const struct tenant *t, const uint8_t *p, size_t n,
		       enum tenant_right r);

/* Does r cover every key under prefix p? */
bool tenant_covers_prefix(const struct tenant *t, const uint8_t *p, size_t n,
			  enum tenant_right r);

#endif

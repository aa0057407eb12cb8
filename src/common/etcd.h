/* etcd: a client of etcd's v3 API through its JSON gateway (POST /v3/...,
 * base64 keys and values, int64 fields as strings), served by every etcd
 * since 3.3 on the client port. Transport is libcurl (HTTP/1.1 keep-alive,
 * one easy handle driven by a multi handle so that another thread can
 * interrupt a call). One struct etcd belongs to one thread at a time; only
 * etcd_cancel() and etcd_interrupt() may be called from others. Calls try
 * the endpoints in turn, starting with the last one that answered, and
 * return 0 or a negative errno: -ENOENT (no such key / lease), -EEXIST (a
 * create found the key), -ESTALE (a guarded txn lost its guard, a watch was
 * compacted), -ETIMEDOUT, -ECONNREFUSED (no endpoint reachable), -EAGAIN
 * (etcd unavailable: no quorum), -ECANCELED, -EINTR, -EPROTO (an answer
 * that is not what the gateway sends), -EIO.
 */
#ifndef KVP_ETCD_H
#define KVP_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ETCD_MAX_ENDPOINTS 8
#define ETCD_EP_MAX 128		/* "https://host:port" */
#define ETCD_VALUE_MAX 65536	/* largest value this client reads */
#define ETCD_KEY_MAX 512

struct etcd;

struct etcd_kv {
	char value[ETCD_VALUE_MAX];	/* NUL-terminated (values may hold NULs) */
	size_t value_len;
	int64_t create_rev, mod_rev, version, lease;
};

struct etcd_event {
	bool deleted;			/* DELETE (lease expiry or delete); else PUT */
	int64_t revision;		/* mod_revision of the event */
	struct etcd_kv kv;		/* value empty for a DELETE */
};

/* Endpoint lists: "h:p;h:p", commas too, each optionally "http://h:p" or
 * "https://h:p" (TLS); an "etcd://" prefix is skipped. Fills out[] with
 * "http://h:p" (no scheme given) or "https://h:p" URLs and returns their
 * count (>= 1) or -EINVAL. */
int etcd_endpoints_parse(const char *s, char out[][ETCD_EP_MAX], size_t max);
/* True if s names etcd endpoints ("etcd://..."). */
bool etcd_is_url(const char *s);

/* TLS towards etcd's https:// endpoints, from [tls] (etcd_tls_from). The
 * strings are read by etcd_create only. */
struct etcd_tls {
	bool required;		/* [tls] enabled: http:// endpoints are refused */
	const char *ca;		/* verifies etcd's certificate; "": the system's CAs */
	const char *cert, *key;	/* client certificate ("": none), for --client-cert-auth */
};
struct kvp_conf;
void etcd_tls_from(struct etcd_tls *t, const struct kvp_conf *conf);

/* NULL with a message in err. timeout_ms bounds each attempt at one
 * endpoint. tls: NULL is plain etcd_tls (http and https, system CAs). */
struct etcd *etcd_create(const char *endpoints, uint64_t timeout_ms, const struct etcd_tls *tls,
			 char *err, size_t errlen);
void etcd_destroy(struct etcd *e);
void etcd_set_timeout(struct etcd *e, uint64_t timeout_ms);
/* Any thread: the call in progress and every later one return -ECANCELED. */
void etcd_cancel(struct etcd *e);
/* Any thread: the call in progress (or the next) returns -EINTR, once. */
void etcd_interrupt(struct etcd *e);
/* The endpoint of the last answer, and this host's address on that
 * connection ("" before any): what a daemon advertises when it listens on
 * a wildcard address. */
const char *etcd_endpoint(const struct etcd *e);
const char *etcd_local_ip(const struct etcd *e);
/* The server's message of the last failure, "" if none. */
const char *etcd_last_error(const struct etcd *e);

/* Range of one key. rev (may be NULL): the store's revision of the answer. */
int etcd_get(struct etcd *e, const char *key, struct etcd_kv *kv, int64_t *rev);
int etcd_put(struct etcd *e, const char *key, const void *val, size_t n, int64_t lease);
/* txn: create key (val, under lease; 0 = none) if it does not exist.
 * 0 and *rev = its create revision, or -EEXIST with the present one in cur
 * (may be NULL). */
int etcd_create_key(struct etcd *e, const char *key, const void *val, size_t n, int64_t lease,
		    int64_t *rev, struct etcd_kv *cur);
/* txn: if guard_key exists with create revision guard_rev, put key = val
 * (lease 0: none); else -ESTALE. */
int etcd_put_guarded(struct etcd *e, const char *guard_key, int64_t guard_rev,
		     const char *key, const void *val, size_t n, int64_t lease);
/* txn: delete key if its create revision is rev; -ESTALE if not. */
int etcd_delete_if(struct etcd *e, const char *key, int64_t rev);

/* Leases. ttl in seconds; etcd may grant more than asked (its minimum TTL). */
int etcd_lease_grant(struct etcd *e, int64_t ttl, int64_t *id, int64_t *granted);
/* One keepalive: 0 with the TTL now left (the full TTL), -ENOENT when the
 * lease has expired or was revoked. */
int etcd_lease_keepalive(struct etcd *e, int64_t id, int64_t *ttl);
int etcd_lease_revoke(struct etcd *e, int64_t id);

/* Watches key from revision start_rev (0: from now) for at most max_ms.
 * cb runs for each event on the calling thread; a non-zero return stops
 * the watch and is returned. 0 when max_ms passed quietly. */
typedef int (*etcd_watch_cb)(void *arg, const struct etcd_event *ev);
int etcd_watch(struct etcd *e, const char *key, int64_t start_rev, uint64_t max_ms,
	       etcd_watch_cb cb, void *arg);

/* ---- answer decoders (pure; used by the calls above, tests and fuzz_etcd) */
/* Each takes one JSON document as the gateway writes it. */
int etcd_parse_error(const char *p, size_t n, int *code, char *msg, size_t msglen);
int etcd_parse_range(const char *p, size_t n, struct etcd_kv *kv, int64_t *rev);
int etcd_parse_txn(const char *p, size_t n, bool *succeeded, int64_t *rev, struct etcd_kv *kv);
int etcd_parse_grant(const char *p, size_t n, int64_t *id, int64_t *ttl);
int etcd_parse_keepalive(const char *p, size_t n, int64_t *ttl);
/* One watch stream message: *created, and up to max events into ev[];
 * returns the number of events (>= 0), -ESTALE if the watch was canceled. */
int etcd_parse_watch(const char *p, size_t n, bool *created, struct etcd_event *ev, size_t max);

/* Standard base64 with padding. Encode: returns the length written (NUL
 * added) or -E2BIG. Decode: strict (padding, alphabet); length or -EINVAL
 * / -E2BIG. */
int etcd_b64_encode(const void *src, size_t n, char *out, size_t cap);
int etcd_b64_decode(const char *src, size_t n, void *out, size_t cap);

#endif

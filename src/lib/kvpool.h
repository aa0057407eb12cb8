/* kvpool.h — the public client API of kvpool (libkvpool).
 *
 * A handle (struct kvp) talks to one kvpool-master for metadata and to the
 * nodes for bytes: same host -> memcpy through a MAP_SHARED mapping of the
 * node's /dev/shm segment; other hosts -> TCP (RDMA where available).
 *
 * Threads: a handle may be used from any number of threads at once. Each call
 * borrows a master connection and node connections from per-handle pools
 * (guarded by one mutex held only to take/return a connection), so calls from
 * different threads run in parallel. kvp_close() must not race other calls.
 *  - master: up to 64 connections per handle, opened on demand; a call takes
 *    one, pipelines its request frames (a batch is split by
 *    cluster.max_batch), reads the replies and returns it. A 65th concurrent
 *    caller waits (at most client.timeout) for one to come back.
 *  - nodes: per node a pool of up to client.connections_per_node TCP
 *    connections. A call's transfers to a node are spread over as many of
 *    them as it has work for, several READ/WRITE frames in flight on each,
 *    all driven by poll() on the calling thread. A caller that holds none
 *    waits for one; a caller that already holds connections to another
 *    node opens a temporary extra one instead (no lock-order deadlock).
 *  - every blocking step honours client.timeout: RPCs have a deadline, a
 *    data connection that moves no byte for that long fails the transfer
 *    (KVP_ETIMEDOUT); a dead peer gives KVP_ECONN, never a hang. Idle pooled
 *    connections are checked before reuse, so the call after a master or
 *    node restart reconnects transparently.
 *
 * Errors: every call returns 0 (or a documented non-negative value) or a
 * negative KVP_E* code (-5001..-5024, never a -errno); kvp_strerror() names
 * it. They travel on the wire (in the wire's own encoding), become CLI exit
 * messages and Python exceptions (as Mooncake's codes).
 *
 * Keys: 1..1024 bytes, NUL-terminated, no NUL inside. A plain put of an
 * existing key fails with KVP_EEXIST (first writer wins); engines that put
 * the same prefix block twice may treat KVP_EEXIST as success. An upsert
 * (kvp_put_opts with KVP_PUT_UPSERT) replaces the value atomically: a get
 * returns the whole old value or the whole new one, never a mix and never
 * "not found" in between.
 */
#ifndef KVPOOL_H
#define KVPOOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_MAX_KEY 1024

/* Error convention. kvpool's codes have a range of their own, below the
 * errno range (the kernel's -errno values are -1..-4095) and below
 * Mooncake's ErrorCode values (-1..-1702): a KVP_E* code can never be
 * mistaken for either, and a variable holds one kind only. Code that talks
 * to the kernel keeps -errno and converts where it crosses into the library
 * (errors.h); the FUSE view and Python convert with kvp_to_errno() or
 * kvp_to_mooncake() only at their boundary. The numbers changed in 0.2.0
 * (soname libkvpool.so.1; before: -1..-23); the wire keeps its own stable
 * encoding (wire.h: -1..-24; -24 came with namespaces), so peers of
 * either version read a status alike. */
#define KVP_ERR_BASE (-5000)	/* KVP_E* = KVP_ERR_BASE - n, n = 1..25 */

enum kvp_err {
	KVP_OK = 0,
	KVP_ENOTFOUND = -5001,	/* no such object */
	KVP_EEXIST = -5002,	/* object already exists (or a put of it is in progress) */
	KVP_ENOSPC = -5003,	/* no segment has room, even after eviction */
	KVP_EINVAL = -5004,	/* invalid argument */
	KVP_EKEY = -5005,	/* invalid key (empty, too long, contains NUL) */
	KVP_ELEASED = -5006,	/* object has a read lease (remove refused) */
	KVP_ELEASE = -5007,	/* read lease expired before the read completed */
	KVP_ENOSEG = -5008,	/* segment not found (node gone) */
	KVP_ECHECKSUM = -5009,	/* value or header checksum mismatch on every replica */
	KVP_ETIMEDOUT = -5010,	/* operation timed out */
	KVP_EAUTH = -5011,	/* wrong or missing cluster token */
	KVP_EPROTO = -5012,	/* malformed frame or protocol violation */
	KVP_EINTERNAL = -5013,	/* internal error */
	KVP_EIO = -5014,	/* transfer failed (node I/O error) */
	KVP_ECONN = -5015,	/* cannot connect / connection lost */
	KVP_ENOTSUP = -5016,	/* not supported here (no CUDA, no RDMA, ...) */
	KVP_EBUSY = -5017,	/* object not complete yet (put in progress) */
	KVP_ETOOBIG = -5018,	/* value, frame or buffer too large / too small */
	KVP_ENOMEM = -5019,	/* out of memory */
	KVP_EGRANT = -5020,	/* write without a valid grant from the master */
	KVP_ELIMIT = -5021,	/* resource limit (connections, batch size) */
	KVP_ESTALE = -5022,	/* extent was reused or put revoked */
	KVP_ENOTLEADER = -5023,	/* no leader master answers yet (HA failover): retry */
	KVP_ENSMISMATCH = -5024,	/* key's namespace declared with another model
					 * fingerprint, or not declared on this handle */
	KVP_EPERM = -5025,	/* the token's tenant has no right to this key
				 * (or this request) */
	KVP_ERR_MIN = KVP_EPERM,	/* the codes are KVP_ERR_MIN..KVP_ERR_MAX */
	KVP_ERR_MAX = KVP_ENOTFOUND,
};

/* True for a KVP_E* code (not for KVP_OK, a length or a -errno). */
static inline int kvp_is_err(long long rc)
{
	return rc >= KVP_ERR_MIN && rc <= KVP_ERR_MAX;
}

/* Name of a KVP_E* code ("not found"); never NULL. */
const char *kvp_strerror(int err);
/* Symbolic name ("KVP_ENOTFOUND"); never NULL. */
const char *kvp_errname(int err);
/* Mooncake's ErrorCode value for a KVP_E* code (e.g. KVP_ENOTFOUND -> -704). */
int kvp_to_mooncake(int err);
/* The positive errno a POSIX caller sees for a KVP_E* code (KVP_ENOTFOUND ->
 * ENOENT, KVP_ELEASED -> EBUSY, transfer and integrity failures -> EIO);
 * 0 for KVP_OK. The FUSE view and the Python module use it. */
int kvp_to_errno(int err);

struct kvp;

struct kvp_open_opts {
	const char *config_file;	/* NULL: defaults + /etc/kvpool/kvpool.ini if present */
	const char *master;		/* "host:port", overrides [client] master */
	/* NULL-terminated "section.key=value" strings applied after the file and
	 * the environment, e.g. "client.protocol=tcp". */
	const char *const *overrides;
};

/* Connects to the master. Returns NULL with *err set on failure
 * (KVP_ECONN, KVP_EAUTH, KVP_EINVAL for a bad configuration). */
struct kvp *kvp_open(const struct kvp_open_opts *opts, int *err);
void kvp_close(struct kvp *kvp);

/* Single-object calls. */
int kvp_put(struct kvp *kvp, const char *key, const void *buf, size_t len);
int kvp_put_from(struct kvp *kvp, const char *key, const void *buf, size_t len);
/* Put options (kvp_put_opts, kvp_batch_put_opts; NULL = all defaults). */
#define KVP_PUT_UPSERT   1u   /* replace an existing value instead of KVP_EEXIST */
#define KVP_PUT_SOFT_PIN 2u   /* pin against eviction for pin_ttl_ms (0: [master] default) */
#define KVP_PUT_NOCHAIN  4u   /* the values of a batch are independent, not a chain */
struct kvp_put_opts {
	uint32_t flags;             /* KVP_PUT_* */
	uint32_t replicas;          /* 0: [client] replicas */
	uint64_t pin_ttl_ms;        /* with KVP_PUT_SOFT_PIN */
	const char *preferred_segment;  /* node name to place the first replica on, or NULL */
	const char *pred;           /* the key the first value extends (chains), or NULL */
};
/* Chains (docs/master.md "Eviction"): the values of one batch put are a
 * chain in key order, as an engine sends a request's prefix blocks: value
 * i extends value i - 1, and pred (when set) names the block value 0
 * extends. Eviction never drops a block while a block that extends it is
 * kept: a chain's tail leaves before its head. KVP_PUT_NOCHAIN puts
 * unrelated values. */
/* kvp_put_from with options. An upsert's new value becomes visible at once
 * when the call returns 0; the old value's space is freed once readers that
 * hold it are done. Two upserts racing on a key: the one whose write
 * finishes last wins, both return 0. A plain put racing an upsert: the
 * first of them to start owns the key; a plain put that an upsert
 * overtakes returns KVP_EEXIST (docs/client.md "Upsert"). A preferred
 * segment that is unknown or full is a preference only: the replica goes
 * elsewhere. */
int kvp_put_opts(struct kvp *kvp, const char *key, const void *buf, size_t len, const struct kvp_put_opts *o);
int kvp_batch_put_opts(struct kvp *kvp, size_t n, const char *const *keys, const void *const *bufs,
                       const size_t *lens, const struct kvp_put_opts *o, int *results);
/* Gather puts: a value given in pieces (a header and a body, the layers of
 * a block) is stored as their concatenation without a staging copy: the
 * local path copies piece by piece into the segment, TCP sends them with
 * one sendmsg, RDMA writes registered pieces in place. The checksum is that
 * of the concatenation. Pieces of length 0 are skipped (base may then be
 * NULL); a value must have at least one byte. Device (CUDA) pieces are
 * copied to host memory first. The pieces must stay unchanged until the
 * call returns. */
struct kvp_iov {
	const void *base;
	size_t len;
};
/* Value i is the concatenation of iov[first[i] .. first[i + 1]) (first has
 * n + 1 entries, non-decreasing); otherwise as kvp_batch_put_opts. */
int kvp_batch_put_iov(struct kvp *kvp, size_t n, const char *const *keys,
                      const struct kvp_iov *iov, const size_t *first,
                      const struct kvp_put_opts *o, int *results);
/* One value in niov pieces; o may be NULL. */
int kvp_put_iov(struct kvp *kvp, const char *key, const struct kvp_iov *iov, size_t niov,
                const struct kvp_put_opts *o);
/* flags: KVP_REMOVE_FORCE drops them even while read leases are held (else
 * KVP_ELEASED). 0 also when key had no replica there; KVP_ENOSEG when no
 * segment of that node is mounted. */
/* Drops the replicas of key that live on segment (node name); the object goes when none is left. */
int kvp_replica_clear(struct kvp *kvp, const char *key, const char *segment, int flags);
/* Allocates *buf (free with kvp_free). */
int kvp_get(struct kvp *kvp, const char *key, void **buf, size_t *len);
/* Copies the value into buf; returns its length (>= 0) or a KVP_E* code
 * (KVP_ETOOBIG when cap is smaller than the value). */
int64_t kvp_get_into(struct kvp *kvp, const char *key, void *buf, size_t cap);
/* 1 exists, 0 does not, < 0 error. Incomplete puts do not exist. */
int kvp_exists(struct kvp *kvp, const char *key);
int kvp_size(struct kvp *kvp, const char *key, uint64_t *size);
#define KVP_REMOVE_FORCE 1	/* remove even while read leases are held */
int kvp_remove(struct kvp *kvp, const char *key, int flags);
void kvp_free(void *buf);

/* Batch calls: one master round trip for n keys, transfers overlapped across
 * nodes and connections. The return value is 0 when every item was tried
 * (per-item results in the array) or a KVP_E* code when the whole batch
 * failed. results[i] is 0 or KVP_E* (exists: 1/0/KVP_E*; get_into: the
 * value length or KVP_E*). */
int kvp_batch_exists(struct kvp *kvp, size_t n, const char *const *keys, int *results);
int kvp_batch_size(struct kvp *kvp, size_t n, const char *const *keys, int64_t *results);
int kvp_batch_put_from(struct kvp *kvp, size_t n, const char *const *keys,
		       const void *const *bufs, const size_t *lens, int *results);
int kvp_batch_get_into(struct kvp *kvp, size_t n, const char *const *keys,
		       void *const *bufs, const size_t *caps, int64_t *results);
int kvp_batch_remove(struct kvp *kvp, size_t n, const char *const *keys, int flags,
		     int *results);

/* Registers a buffer that put_from/get_into will use (pinned / RDMA
 * registered / CUDA host-registered where available). Buffers need not be
 * registered; registered ones take the fastest path. */
int kvp_register_buffer(struct kvp *kvp, void *buf, size_t len);
int kvp_unregister_buffer(struct kvp *kvp, void *buf);

/* Administration: used by the CLI, the FUSE view and the Python module. */
int kvp_remove_prefix(struct kvp *kvp, const char *prefix, int flags, uint64_t *count);
int kvp_remove_all(struct kvp *kvp, int flags, uint64_t *count);
/* Pins an object against eviction for ttl_ms (0 unpins). */
int kvp_pin(struct kvp *kvp, const char *key, uint64_t ttl_ms);

enum kvp_tier { KVP_TIER_MEM = 0, KVP_TIER_DISK = 1 };

struct kvp_replica {
	uint32_t segment_id;
	uint8_t tier;			/* enum kvp_tier */
	uint64_t offset;
	uint64_t alloc_len;
	char node[64];			/* node name */
};

#define KVP_MAX_REPLICAS 8

struct kvp_stat {
	uint64_t size;
	uint64_t generation;
	uint64_t checksum;		/* xxh3-64 of the value */
	uint64_t put_time_ns;		/* CLOCK_REALTIME */
	uint64_t access_time_ns;
	int64_t lease_ms;		/* remaining read lease, 0 if none */
	int64_t pin_ms;			/* remaining pin, 0 if none */
	uint32_t nreplicas;
	struct kvp_replica replicas[KVP_MAX_REPLICAS];
};
int kvp_stat(struct kvp *kvp, const char *key, struct kvp_stat *st);

/* Listing with S3 semantics: keys starting with prefix; with a delimiter,
 * keys that have it after the prefix are rolled up into one common prefix
 * (is_prefix = 1, name ends with the delimiter). Entries come in byte order,
 * after the cursor; *next is "" at the end. Stable under concurrent inserts. */
struct kvp_list_entry {
	char *name;
	uint64_t size;
	uint64_t put_time_ns;
	int is_prefix;
};
struct kvp_list {
	size_t n;
	struct kvp_list_entry *entries;
	char *next;			/* cursor for the next page, "" at the end */
};
int kvp_list(struct kvp *kvp, const char *prefix, char delimiter, const char *cursor,
	     uint32_t limit, struct kvp_list *out);
void kvp_list_free(struct kvp_list *l);

struct kvp_node_info {
	uint32_t segment_id;
	char name[64];
	char host_id[64];
	char endpoint[128];		/* host:port of its data server */
	char shm_path[256];
	uint64_t capacity;
	uint64_t used;
	uint64_t objects;
	uint64_t spill_capacity;
	uint64_t spill_used;
	int draining;
	int numa_node;			/* -1 unbound */
};
struct kvp_info {
	uint64_t keys;
	uint64_t bytes_used;
	uint64_t capacity;
	uint64_t evictions;
	uint64_t demotions;
	uint64_t leases;
	size_t nnodes;
	struct kvp_node_info *nodes;
};
int kvp_info(struct kvp *kvp, struct kvp_info *out);
void kvp_info_free(struct kvp_info *info);

/* Namespaces (docs/client.md "Namespaces"): the keys "name/..." hold the KV
 * of one model layout. Declaring one tells the master what this handle's
 * KV is; the first declaration creates the namespace, the same fields
 * again succeed, other fields fail with KVP_ENSMISMATCH. Keys of a
 * namespace that exists are refused (KVP_ENSMISMATCH, per item) to a
 * handle that has not declared it with the same fields. The handle
 * re-declares on every new master connection (reconnects, a restarted
 * master or a new leader), so the master's table comes back by itself. */
struct kvp_ns {
	const char *name;		/* key prefix "name/": 1-128 of [A-Za-z0-9._-] */
	const char *model;		/* model id: 1-256 printable ASCII characters */
	const char *dtype;		/* KV dtype ("bfloat16", "fp8_e4m3"): 1-64 */
	uint32_t page_size;		/* tokens per KV page (block), >= 1 */
	const char *layout;		/* KV layout ("NHD", "HND", "mla"): 1-64 */
	uint32_t tp;			/* tensor-parallel rank count, >= 1 */
};
int kvp_declare_namespace(struct kvp *kvp, const struct kvp_ns *ns);
/* The same; msg (cap bytes, may be NULL) gets the master's message on
 * KVP_ENSMISMATCH (both sets of fields) or KVP_EINVAL, else "". */
int kvp_declare_namespace_msg(struct kvp *kvp, const struct kvp_ns *ns, char *msg, size_t cap);

struct kvp_ns_info {
	char name[129];
	char model[257];
	char dtype[65];
	char layout[65];
	uint32_t page_size;
	uint32_t tp;
	uint64_t fingerprint;		/* of model, dtype, page_size, layout, tp */
	uint64_t keys;			/* complete objects under "name/" */
	uint64_t bytes;			/* their value bytes */
	uint32_t clients;		/* master connections that declared it */
};
/* The master's namespaces: *out (free with kvp_free), *n of them. */
int kvp_namespaces(struct kvp *kvp, struct kvp_ns_info **out, size_t *n);

/* The master a handle talks to. With cluster.master = etcd://h:p;... (high
 * availability, docs/ha.md) it is the leader etcd names: addr is "" while
 * none is known (an election runs). */
struct kvp_master {
	char addr[256];			/* host:port of its RPC */
	char name[256];			/* the leader's name in etcd ("" without HA) */
	uint64_t epoch;			/* its epoch (HELLO) */
	int ha;				/* 1: found through etcd */
};
int kvp_master(struct kvp *kvp, struct kvp_master *out);

/* Completion queue: batch calls that run on the queue's own worker threads
 * while the caller goes on; an eventfd tells it when results wait
 * (docs/client.md "Completion queue"). For engines whose event loop polls
 * file descriptors (LMCache's multi-process native_plugin).
 *  - submit: the keys are copied; the buffers must stay valid (and, for a
 *    get, unread) until the batch's completion has been drained or
 *    kvp_cq_close() has returned. Batches start in submission order, one per
 *    worker at a time; each runs the kvp_batch_* call of its kind.
 *  - kvp_cq_fd(): readable (POLLIN) while undrained completions exist; only
 *    kvp_cq_drain() resets it. Never read or close it yourself.
 *  - every submitted batch yields exactly one completion, carrying the
 *    caller's tag.
 *  - submit and drain may be called from any threads at once; close must
 *    not race them. close cancels batches not started yet, waits for the
 *    running ones (each bounded by client.timeout) and discards what was
 *    not drained. The handle must outlive the queue. */
struct kvp_cq;

enum kvp_cq_op { KVP_CQ_GET = 1, KVP_CQ_PUT, KVP_CQ_EXISTS, KVP_CQ_REMOVE };

struct kvp_cqe {
	uint64_t tag;			/* as submitted */
	int op;				/* enum kvp_cq_op */
	int status;			/* 0: every item tried; KVP_E*: the whole batch failed */
	size_t n;			/* items */
	/* n results, as the batch call gives them (get: the value length or
	 * KVP_E*; put, remove: 0 or KVP_E*; exists: 1, 0 or KVP_E*); a failed
	 * batch repeats its status. Free with kvp_free(). */
	int64_t *results;
};

/* threads: worker threads (0: 4, at most 64). NULL with *err set. */
struct kvp_cq *kvp_cq_open(struct kvp *kvp, unsigned threads, int *err);
int kvp_cq_fd(const struct kvp_cq *cq);
/* 0, or KVP_EINVAL (n == 0, a NULL array) / KVP_ENOMEM: nothing was queued
 * and no completion will come. */
int kvp_cq_submit_get(struct kvp_cq *cq, size_t n, const char *const *keys,
		      void *const *bufs, const size_t *caps, uint64_t tag);
/* o: as kvp_batch_put_opts (NULL: defaults; copied, o->preferred_segment
 * and o->pred included). */
int kvp_cq_submit_put(struct kvp_cq *cq, size_t n, const char *const *keys,
		      const void *const *bufs, const size_t *lens,
		      const struct kvp_put_opts *o, uint64_t tag);
int kvp_cq_submit_exists(struct kvp_cq *cq, size_t n, const char *const *keys, uint64_t tag);
int kvp_cq_submit_remove(struct kvp_cq *cq, size_t n, const char *const *keys, int flags,
			 uint64_t tag);
/* Moves up to max completions into out[] without blocking: their count. */
size_t kvp_cq_drain(struct kvp_cq *cq, struct kvp_cqe *out, size_t max);
/* Batches submitted and not yet drained. */
size_t kvp_cq_pending(struct kvp_cq *cq);
void kvp_cq_close(struct kvp_cq *cq);

/* Counters of one handle since kvp_open (monotonic; tests and tools read
 * them). */
struct kvp_stats {
	uint64_t puts;			/* objects stored (PUT_END succeeded) */
	uint64_t gets;			/* objects read and verified */
	uint64_t local_bytes;		/* value bytes moved by memcpy through a mapping */
	uint64_t tcp_bytes;		/* value bytes moved over TCP */
	uint64_t checksum_mismatches;	/* replica reads whose header or value failed to verify */
	uint64_t retries;		/* reads retried on another replica, calls repeated
					 * after a refresh or a reconnect */
	uint64_t segment_refreshes;	/* segment table loads */
	uint64_t master_connects;	/* master connections opened */
	uint64_t node_connects;		/* data connections opened */
	uint64_t rdma_bytes;		/* value bytes moved by RDMA READ/WRITE */
	uint64_t lease_releases;	/* LEASE_RELEASE frames sent after gets */
	uint64_t optimistic_hits;	/* gets/exists answered from a local extent
					 * without asking the master */
	uint64_t optimistic_fallbacks;	/* remembered locations that no longer held
					 * the value: the master was asked */
	uint64_t optimistic_raced;	/* ... of which the extent changed during the copy
					 * (freed or reused under the reader) */
	uint64_t read_touches;		/* optimistic reads reported to the master (TOUCH) */
	uint64_t disk_gets;		/* objects read from a spill (disk tier) replica */
	uint64_t disk_bytes;		/* value bytes of those reads */
};
int kvp_stats(struct kvp *kvp, struct kvp_stats *out);

#ifdef __cplusplus
}
#endif
#endif

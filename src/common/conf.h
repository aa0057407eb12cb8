/* conf: the one INI configuration of every kvpool process (inih), described
 * by a single table (conf_table.c): section/key -> offset in struct
 * kvp_conf, type, range, default, help. The same table parses the file,
 * applies KVPOOL_<SECTION>_<KEY> and Mooncake's variables, prints
 * --print-config and generates conf/kvpool.ini. Load order: defaults,
 * file(s) in order, environment, overrides (command line). Loading is
 * conf.c, value parsing conf_parse.c. Errors are KVP_EINVAL (KVP_ENOMEM when
 * out of memory) with the message in the caller's buffer. Not thread-safe
 * while loading; read-only after.
 */
#ifndef KVP_CONF_H
#define KVP_CONF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kvpool.h"

#define CONF_DEFAULT_FILE "/etc/kvpool/kvpool.ini"
#define CONF_STR 256
#define CONF_MAX_FILES 8	/* files one conf_load_files() layers */

enum conf_src { CONF_SRC_DEFAULT, CONF_SRC_FILE, CONF_SRC_ENV, CONF_SRC_CMDLINE };

/* Durations are stored in milliseconds, sizes in bytes, ratios as doubles. */
struct kvp_conf {
	struct {
		char master[CONF_STR];		/* host:port, or etcd://h:p;h:p (HA) */
		char token_file[CONF_STR];	/* "" = no token: loopback only */
		char token[CONF_STR];		/* loaded from token_file (not a key) */
		char tenants_file[CONF_STR];	/* "" = one tenant: the cluster token (tenant.h) */
		char metadata_server[CONF_STR];	/* MOONCAKE_METADATA_SERVER, recorded only */
		uint64_t max_object_size;
		uint64_t max_frame;
		int64_t max_batch;
		int64_t busy_poll_us;		/* spin before sleeping for a reply (net.h) */
		char tcp_congestion[CONF_STR];	/* auto|system|reno|cubic (net.h) */
	} cluster;
	struct {
		char listen[CONF_STR];		/* RPC, default 0.0.0.0:15001 */
		char http_listen[CONF_STR];	/* /metrics /health, default :15003 */
		bool metadata_server;		/* Mooncake HTTP metadata store */
		char metadata_listen[CONF_STR];	/* default 0.0.0.0:15002 */
		uint64_t lease_ttl;		/* ms */
		uint64_t put_timeout;		/* ms */
		uint64_t client_ttl;		/* ms: node silence bound (with node_ttl) */
		uint64_t node_ttl;		/* ms: node heartbeat timeout */
		uint64_t soft_pin_ttl;		/* ms: KVP_PUT_SOFT_PIN without a TTL */
		uint64_t max_soft_pin_ttl;	/* ms: longest pin a request may ask */
		bool evict_soft_pinned;		/* pinned objects go when nothing else can */
		double eviction_high_watermark;
		double eviction_ratio;
		char eviction_policy[CONF_STR];	/* reuse | lru */
		uint64_t eviction_half_life;	/* block accesses, 0: adapt to the reuse intervals seen */
		int64_t eviction_ghosts;	/* evicted keys remembered, 0: twice the objects */
		char allocation_strategy[CONF_STR];	/* random | free_ratio */
		int64_t max_connections;
		char ha[CONF_STR];		/* none | etcd (docs/ha.md) */
		char ha_endpoints[CONF_STR];	/* etcd h:p;h:p */
		char cluster_id[CONF_STR];	/* names the etcd keys; clients read it too */
		uint64_t ha_lease_ttl;		/* ms, whole seconds in etcd */
		bool ha_follow;			/* a standby keeps a warm table (mrepl.h) */
		char table_file[CONF_STR];	/* ha = none: the table on disk (mtabfile.h); "" = off */
		char advertise[CONF_STR];	/* RPC host:port published; "" = derived */
		char kv_events_endpoint[CONF_STR];	/* ZMQ PUB bind; "" = no KV events */
		char kv_events_replay_endpoint[CONF_STR];	/* ZMQ ROUTER bind; "" = none */
		char kv_events_topic[CONF_STR];
		char kv_events_backend_id[CONF_STR];
		int64_t kv_events_buffer;	/* batches kept for replay */
		int64_t kv_events_queue;	/* events waiting for the publisher */
		int64_t kv_events_block_size;
		bool kv_events_legacy_compat;	/* vLLM's older array layout */
		bool kv_events_object_key;	/* events carry the key too */
	} master;
	struct {
		char name[CONF_STR];		/* "" = host name */
		char listen[CONF_STR];		/* data server, default 0.0.0.0:15010 */
		char advertise[CONF_STR];	/* host:port clients use; "" = derived */
		char http_listen[CONF_STR];	/* default 0.0.0.0:15011 */
		char segment[CONF_STR];		/* shm file name; "" = kvpool-<name> */
		uint64_t segment_size;
		uint64_t align;
		char numa_node[CONF_STR];	/* none | auto | N */
		bool hugepages;
		bool populate;
		char reserve[CONF_STR];		/* background | upfront | none */
		bool remove_segment_on_exit;
		char shm_group[CONF_STR];	/* "" = mode 0600, else 0660 + group */
		uint64_t heartbeat_interval;	/* ms */
		int64_t max_connections;
	} node;
	struct {
		char protocol[CONF_STR];	/* auto | local | tcp | rdma */
		int64_t connections_per_node;
		uint64_t timeout;		/* ms, per operation */
		int64_t replicas;		/* default replica count of a put */
		uint64_t local_buffer_size;	/* bounce/staging buffer */
		char host_id[CONF_STR];		/* "" = boot id (tests override) */
		bool optimistic_reads;		/* same-host gets without the master */
		int64_t location_cache;		/* entries of the location cache */
		uint64_t location_ttl;		/* ms an entry is tried */
	} client;
	struct {
		char path[CONF_STR];		/* "" = no spill tier */
		uint64_t size;
		bool direct_io;
		int64_t queue_depth;
		bool promote_on_hit;
	} spill;
	struct {
		char mountpoint[CONF_STR];	/* "" = no FUSE view in the node */
		bool allow_other;
		bool ro;
		uint64_t attr_timeout;		/* ms */
		uint64_t entry_timeout;		/* ms */
		int64_t mode;			/* file mode bits, e.g. 0644 */
		uint64_t max_read;
		uint64_t write_behind;		/* closed files up to this size: put behind the close */
		char io_uring[CONF_STR];	/* auto | on | off: FUSE over io_uring */
	} fuse;
	struct {
		bool enabled;
		char devices[CONF_STR];		/* "" = all active ports */
		int64_t qps_per_peer;
	} rdma;
	struct {
		char level[CONF_STR];		/* err warning notice info debug */
	} log;
	struct {
		bool enabled;			/* TLS on every TCP connection (tls.h) */
		char cert[CONF_STR];		/* PEM certificate (chain) of this process */
		char key[CONF_STR];		/* PEM private key of cert */
		char ca[CONF_STR];		/* PEM CA bundle the peer is verified against */
		bool verify_peer;		/* servers ask clients for a certificate */
		char ktls[CONF_STR];		/* auto | off */
		bool http;			/* HTTPS on the HTTP listeners (http.h) */
	} tls;

	/* where each key's value came from, indexed like the table */
	uint8_t src[128];
	char file[CONF_STR];			/* the first file loaded, "" none */
	/* every file loaded, in order; file_of[i] indexes files[] for a key
	 * whose src is CONF_SRC_FILE (the file that set it last) */
	char files[CONF_MAX_FILES][CONF_STR];
	uint8_t nfiles;
	uint8_t file_of[128];
};

enum conf_type { CONF_T_STRING, CONF_T_INT, CONF_T_BOOL, CONF_T_SIZE,
		 CONF_T_DURATION, CONF_T_RATIO, CONF_T_HOSTPORT };

struct conf_key {
	const char *section;
	const char *key;
	enum conf_type type;
	size_t off;			/* offsetof(struct kvp_conf, ...) */
	double min, max;		/* numeric range (bytes, ms, ratio) */
	const char *def;		/* default, as written in the INI */
	const char *help;
	bool live;			/* SIGHUP can change it without a restart */
	const char *choices;		/* strings: "a|b|c", a token "N..M" = integer range */
	unsigned flags;			/* CONF_F_* */
};

#define CONF_F_OCTAL	0x1u	/* int read as octal (a file mode), printed 0NNN */
#define CONF_F_POW2	0x2u	/* size must be a power of two */
#define CONF_F_LOGLEVEL	0x4u	/* string checked by log_level_parse, stored canonical */
#define CONF_F_FILENAME	0x8u	/* string is one path component: no '/', not . or .. */
#define CONF_F_ETCD	0x10u	/* host:port key that also takes etcd://h:p;h:p */

extern const struct conf_key conf_table[];
extern const size_t conf_table_len;

/* Defaults only. */
void conf_defaults(struct kvp_conf *c);
/* Defaults, then file (path NULL: CONF_DEFAULT_FILE if it exists; a named
 * file must exist), then the environment, then the overrides (NULL-terminated
 * "section.key=value"), then cluster.token from cluster.token_file. On error
 * returns KVP_EINVAL (KVP_ENOMEM when out of memory) with "FILE:LINE:
 * [section] key: message" (or "env KVPOOL_X_Y: ..." / "override ...: ..." /
 * "[cluster] token_file: ...") in err. */
int conf_load(struct kvp_conf *c, const char *path, const char *const *overrides,
	      char *err, size_t errlen);
/* conf_load with @n files layered in order (at most CONF_MAX_FILES): a key
 * set by a later file wins, the same key in two files is fine, twice in one
 * file is still an error. n == 0: CONF_DEFAULT_FILE if it exists. Every
 * named file must exist. Then the environment, overrides and token as in
 * conf_load. Used for kvpool-node@.service: -c kvpool.ini -c node-%i.ini. */
int conf_load_files(struct kvp_conf *c, const char *const *paths, size_t n,
		    const char *const *overrides, char *err, size_t errlen);
/* conf_load without Mooncake's MOONCAKE_* variables: the Python module reads
 * them itself, with Mooncake's meaning (0 = no segment, "4gb", an explicit
 * setup() argument wins). KVPOOL_* variables still apply. */
int conf_load_no_aliases(struct kvp_conf *c, const char *path, const char *const *overrides,
			 char *err, size_t errlen);
/* Parses one INI stream into @c on top of what it holds (conf_load calls it
 * after conf_defaults); @name is used in messages, appended to c->files and
 * recorded as c->file if that is still empty. Errors as conf_load:
 * "NAME:LINE: [section] key: message". */
int conf_load_stream(struct kvp_conf *c, FILE *f, const char *name, char *err, size_t errlen);
/* Sets one key from text with validation; 0 or KVP_EINVAL with a message. */
int conf_set(struct kvp_conf *c, const char *section, const char *key,
	     const char *value, enum conf_src src, char *err, size_t errlen);
/* "section.key=value"; 0 or KVP_EINVAL with a message. */
int conf_set_override(struct kvp_conf *c, const char *kv, char *err, size_t errlen);
/* Effective configuration, one "section.key = value   # source" per line. */
void conf_print(const struct kvp_conf *c, FILE *out);
/* The documented example INI (every key, default, help) — conf/kvpool.ini. */
void conf_write_example(FILE *out);
/* Value of a key as text (for printing and tests). */
void conf_format(const struct kvp_conf *c, const struct conf_key *k, char *buf, size_t len);
const struct conf_key *conf_find(const char *section, const char *key);
/* SIGHUP: copies the live keys that differ from @next into @cur (logging each
 * change) and leaves the others; returns how many non-live keys differ (they
 * need a restart; each is logged). The caller re-applies log.level itself. */
int conf_apply_live(struct kvp_conf *cur, const struct kvp_conf *next);

/* Parsers shared with the CLI: "64K", "1G", "1048576" -> bytes;
 * "500ms", "5s", "2m", "1h", "1000" (ms) -> ms; 0 or KVP_EINVAL (no message). */
int conf_parse_size(const char *s, uint64_t *out);
int conf_parse_duration(const char *s, uint64_t *out);
/* "host:port" / "[v6]:port" / ":port" -> host (may be "") and port; 0 or
 * KVP_EINVAL. */
int conf_parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port);

#endif

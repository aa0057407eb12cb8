/* testlib: the helpers of kvpool's C test programs, above all
 * those that start daemons: checks, private temp dirs, free loopback ports,
 * spawning and killing processes (everything started is killed and every
 * temp dir removed at exit, also on failure or a fatal signal), a small
 * HTTP client, a raw protocol client speaking wire.h frames, and
 * tl_start_master() for a kvpool-master on private ports.
 * Built once (testlib.c) and linked into every unit test.
 *
 * tl_pool_start() for a master and nodes that libkvpool tests open.
 *
 * Single-threaded use (the cleanup lists are plain globals). Binaries are
 * looked up in $KVP_BUILD (tests/run.sh sets it), else ./build. TL_KEEP=1
 * keeps the temp dirs (configs, logs) for a look afterwards.
 * Exit codes: 0 pass, 1 fail, 77 skip.
 */
#ifndef KVP_TESTLIB_H
#define KVP_TESTLIB_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"
#include "wire.h"

/* ---- checks ---- */

extern int tl_failures;

/* The optional printf-style message of CHECK/REQUIRE ("" when there is
 * none, which -Wformat-zero-length would refuse). */
#define TL_MSG(...)                                                              \
	_Pragma("GCC diagnostic push")                                           \
	_Pragma("GCC diagnostic ignored \"-Wformat-zero-length\"")               \
	fprintf(stderr, "" __VA_ARGS__);                                         \
	_Pragma("GCC diagnostic pop")

/* CHECK(cond) or CHECK(cond, "fmt", ...): counts a failure and goes on. */
#define CHECK(cond, ...)                                                         \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__,   \
				__LINE__, #cond);                                \
			TL_MSG(__VA_ARGS__)                                      \
			fputc('\n', stderr);                                     \
			tl_failures++;                                           \
		}                                                                \
	} while (0)

/* A check whose failure makes the rest of the test meaningless. */
#define REQUIRE(cond, ...)                                                       \
	do {                                                                     \
		if (!(cond)) {                                                   \
			fprintf(stderr, "%s:%d: REQUIRE(%s) failed: ", __FILE__, \
				__LINE__, #cond);                                \
			TL_MSG(__VA_ARGS__)                                      \
			fputc('\n', stderr);                                     \
			exit(1);                                                 \
		}                                                                \
	} while (0)

/* rc == want (KVP_E* codes named when negative): counts a failure. */
#define CHECK_RC(rc, want)                                                       \
	do {                                                                     \
		long long tl_r_ = (long long)(rc), tl_w_ = (long long)(want);    \
		if (tl_r_ != tl_w_) {                                            \
			fprintf(stderr, "%s:%d: CHECK_RC: %s = %lld (%s), "      \
				"expected %lld (%s)\n", __FILE__, __LINE__, #rc,  \
				tl_r_, tl_r_ < 0 ? kvp_errname((int)tl_r_) : "", \
				tl_w_, tl_w_ < 0 ? kvp_errname((int)tl_w_) : ""); \
			tl_failures++;                                           \
		}                                                                \
	} while (0)

#define CHECK_EQ(a, b)                                                           \
	do {                                                                     \
		long long tl_a_ = (long long)(a), tl_b_ = (long long)(b);        \
		CHECK(tl_a_ == tl_b_, "%s = %lld, %s = %lld", #a, tl_a_, #b, tl_b_); \
	} while (0)

#define TL_SKIP(...)                                                             \
	do {                                                                     \
		printf("skip: " __VA_ARGS__);                                    \
		printf("\n");                                                    \
		exit(77);                                                        \
	} while (0)

/* Prints the verdict and returns the exit code: main() ends with
 * `return tl_done();`. */
int tl_done(void);

/* snprintf that REQUIREs the result to fit (paths built from temp dirs). */
void tl_fmt(char *dst, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

uint64_t tl_now_ms(void);

void tl_sleep_ms(unsigned ms);

/* ---- cleanup: spawned processes and temp dirs ---- */

#define TL_MAX_PROCS 64
#define TL_MAX_DIRS 16

extern char tl_dirs[TL_MAX_DIRS][128];

void tl_arm_cleanup(void);

/* A private temp dir removed at exit: "/tmp/kvp-<tag>-<pid>-XXXXXX". */
const char *tl_tmpdir(const char *tag);

/* Removes a dir tl_tmpdir made, now rather than at exit (for programs
 * that start more than TL_MAX_DIRS daemons one after another). */
void tl_tmpdir_drop(const char *dir);

void tl_write_file(const char *path, const char *text);

/* Reads a whole file (malloc'd, NUL-terminated); NULL if missing. */
char *tl_read_file(const char *path);

const char *tl_build(void);

/* ---- ports ---- */

/* A loopback port that was free a moment ago (drawn at random below the
 * ephemeral range, bound, closed), and not one this process was handed
 * lately: a fixture that picks several before starting its servers
 * (etcd_fx.h: a client and a peer port per member) once got the same one
 * twice (CI: "bind: address already in use"); and the ephemeral range is
 * where every outgoing connection on the host, another test's included,
 * takes its source port. */
int tl_free_port(void);

/* Blocking TCP connect to 127.0.0.1:port; fd or -errno. */
int tl_connect(int port);

/* Waits until something accepts on port; true if it did within timeout. */
bool tl_wait_port(int port, unsigned timeout_ms);

/* ---- processes ---- */

/* Starts argv[0] (a path) with stdout+stderr appended to log (NULL: inherit);
 * killed at exit. Returns the pid. */
pid_t tl_spawn(char *const argv[], const char *log);
/* Not killed at exit any more (the test reaped it). */
void tl_forget(pid_t pid);

/* Waits up to timeout_ms for pid to exit: its wait status, or -1 if it is
 * still running. */
int tl_wait_exit(pid_t pid, unsigned timeout_ms);

/* Sends sig and waits (SIGKILL after timeout_ms): the wait status. */
int tl_kill(pid_t pid, int sig, unsigned timeout_ms);

bool tl_alive(pid_t pid);

/* Runs argv to completion with output captured (malloc'd, NUL-terminated
 * into *out if not NULL). Returns the wait status. */
int tl_run(char *const argv[], char **out, unsigned timeout_ms);

/* ---- HTTP ---- */

int tl_send_all(int fd, const void *p, size_t n);

/* One HTTP/1.0 request to 127.0.0.1:port. Returns the status code (or -1)
 * and the body (malloc'd, NUL-terminated) in *body if not NULL. */
int tl_http(int port, const char *method, const char *path, const void *req,
	    size_t req_len, char **body, size_t *body_len);

/* ---- raw protocol client ---- */

struct tl_frame {
	struct tl_frame *next;
	struct wire_hdr h;
	uint8_t *body;			/* h.body_len bytes (+ NUL), malloc'd */
	uint8_t *payload;		/* h.payload_len bytes, malloc'd or NULL */
};

struct tl_conn {
	int fd;
	uint64_t next_reqid;
	/* Requests the peer sent us (FREE from the master) while we waited
	 * for a reply, oldest first. */
	struct tl_frame *queue, **qtail;
	/* Answer FREE requests at once (a well-behaved fake node). */
	bool auto_free;
	uint64_t frees_answered;
	uint64_t timeout_ms;		/* per call; default 5000 */
	uint64_t epoch;			/* server_epoch of the HELLO reply (grants carry it) */
};

void tl_frame_free(struct tl_frame *f);

/* Connects (no HELLO); NULL if the port does not accept. */
struct tl_conn *tl_conn_open(int port);

void tl_conn_close(struct tl_conn *c);

/* Sends one frame: header fields given, body_len from len. */
int tl_send_frame(struct tl_conn *c, uint16_t op, uint8_t flags, int32_t status,
		  uint64_t reqid, const void *body, size_t len);

/* Sends raw bytes (for malformed-frame tests). */
int tl_send_raw(struct tl_conn *c, const void *p, size_t n);

/* Reads the next frame off the socket: 0, -ETIMEDOUT, -ECONNRESET (closed)
 * or -EPROTO (bad header). */
int tl_read_frame(struct tl_conn *c, struct tl_frame **out, uint64_t timeout_ms);
/* True if the peer closes the connection within 2 s (frames before it are
 * read and dropped). */
bool tl_closed_by_peer(struct tl_conn *c);

/* Answers a FREE request with an empty reply. */
int tl_reply(struct tl_conn *c, const struct tl_frame *req, int32_t status,
	     const void *body, size_t len);

/* Reads frames until the reply to reqid; requests arriving meanwhile are
 * queued (or answered, for FREE with auto_free). NULL on timeout/close. */
struct tl_frame *tl_wait_reply(struct tl_conn *c, uint64_t reqid);

/* One request/reply round trip. The reply frame (free with tl_frame_free)
 * or NULL on timeout / closed connection. */
struct tl_frame *tl_call(struct tl_conn *c, uint16_t op, const struct wbuf *body);

/* The next request the peer sent us (queued or read now), NULL on timeout. */
struct tl_frame *tl_next_request(struct tl_conn *c, uint64_t timeout_ms);

/* Answers every queued and arriving FREE request for up to ms; returns how
 * many were answered. */
int tl_drain_frees(struct tl_conn *c, uint64_t ms);

/* HELLO: the reply's header status (0, KVP_EAUTH, ...) or KVP_ECONN. */
int tl_hello(struct tl_conn *c, uint16_t role, const char *token,
	     const char *name, const char *host_id);

/* Connects and says HELLO; REQUIREs success. */
struct tl_conn *tl_client(int port, uint16_t role, const char *token,
			  const char *host_id);

/* ---- master operations (wire.h body layouts) ---- */

struct tl_rep {
	uint32_t seg;
	uint8_t tier;
	uint64_t off, len;
	uint8_t grant[WIRE_GRANT_LEN];	/* PUT_START only */
};

/* One item of a PUT_START, GET or STAT reply. */
struct tl_obj {
	int status;
	uint64_t size, generation, checksum, lease_ms;
	uint64_t put_time_ns, access_time_ns;	/* STAT */
	int64_t lease_left_ms, pin_ms;		/* STAT */
	unsigned nrep;
	struct tl_rep rep[KVP_MAX_REPLICAS + 1];
};

/* Sends op with body = pre (may be NULL) + a key batch; returns the reply
 * frame (NULL on timeout/close). */
struct tl_frame *tl_keys_call(struct tl_conn *c, uint16_t op, const struct wbuf *pre,
			      size_t n, const char *const *keys);

/* A reply made of u32 n then n x i32 (EXISTS, PUT_END, REMOVE, PIN, ...):
 * fills out[] and returns the frame status, or KVP_EPROTO if malformed. */
int tl_i32_reply(struct tl_frame *f, size_t n, int *out);

/* One-key form of an i32-reply op with an optional prefix body: the item
 * status, or the frame status if that failed. */
int tl_key_op(struct tl_conn *c, uint16_t op, const struct wbuf *pre, const char *key);

int tl_exists(struct tl_conn *c, const char *key);

int tl_remove(struct tl_conn *c, const char *key, bool force);

int tl_pin(struct tl_conn *c, const char *key, uint64_t ttl_ms);

void tl_rb_reps(struct rbuf *r, struct tl_obj *o, bool grants);

/* PUT_START's fields before the item count (WIRE_PUT_PREFIX bytes). */
void tl_wb_put_prefix(struct wbuf *b, unsigned replicas, uint32_t pref,
		      uint32_t flags, uint64_t pin_ttl_ms);

/* PUT_START of n keys with WIRE_PUT_* flags: per-item results in out[];
 * returns the frame status. */
int tl_put_start_flags(struct tl_conn *c, unsigned replicas, uint32_t pref,
		       uint32_t flags, uint64_t pin_ttl_ms, size_t n,
		       const char *const *keys, const uint64_t *sizes,
		       struct tl_obj *out);

int tl_put_start(struct tl_conn *c, unsigned replicas, uint32_t pref, size_t n,
		 const char *const *keys, const uint64_t *sizes, struct tl_obj *out);

int tl_put_start1(struct tl_conn *c, const char *key, uint64_t size,
		  unsigned replicas, uint32_t pref, struct tl_obj *out);

int tl_put_end1(struct tl_conn *c, const char *key, uint64_t gen, uint64_t csum);

int tl_put_revoke1(struct tl_conn *c, const char *key, uint64_t gen);

/* PUT_START + PUT_END (checksum: the size, a stand-in no reader checks). */
int tl_put1(struct tl_conn *c, const char *key, uint64_t size, struct tl_obj *out);

/* GET (stat = false) or STAT of one key: the item status (or frame status). */
int tl_get_stat1(struct tl_conn *c, const char *key, struct tl_obj *o, bool stat);

int tl_get1(struct tl_conn *c, const char *key, struct tl_obj *o);

int tl_stat1(struct tl_conn *c, const char *key, struct tl_obj *o);

struct tl_info {
	uint64_t keys, bytes_used, capacity, evictions, demotions, leases;
};

int tl_info(struct tl_conn *c, struct tl_info *i);

/* Answers FREEs on node until c's INFO shows no eviction progress for a
 * while (an eviction round is over). */
void tl_settle_evictions(struct tl_conn *node, struct tl_conn *c);

/* MOUNT a fake segment with a spill tier of spill bytes: its id (> 0) or a
 * negative status. secret may be NULL. Like kvpool-node, it then sends a
 * HEARTBEAT, which tells the master its REPORTs are in (none here; REPORTs
 * sent later still count): only then does it allocate in the segment.
 * tl_mount_quiet set: no HEARTBEAT (the caller sends one with tl_heartbeat). */
extern bool tl_mount_quiet;
int64_t tl_mount_spill(struct tl_conn *c, const char *name, const char *host_id,
		       uint64_t size, uint64_t uuid, uint32_t align, uint64_t spill,
		       uint8_t secret[WIRE_SECRET_LEN]);

/* MOUNT a fake segment (no spill tier). */
int64_t tl_mount(struct tl_conn *c, const char *name, const char *host_id,
		 uint64_t size, uint64_t uuid, uint32_t align,
		 uint8_t secret[WIRE_SECRET_LEN]);

/* One WIRE_EXTENT of a REPORT. */
struct tl_extent {
	const char *key;
	uint8_t tier;
	uint64_t off, alloc_len, value_len, checksum, generation, put_time_ns;
};

int tl_report(struct tl_conn *c, uint32_t seg, size_t n, const struct tl_extent *e,
	      uint32_t *adopted, uint32_t *rejected);

/* HEARTBEAT (reporting spill_used bytes in the spill tier): the frame status. */
int tl_heartbeat_spill(struct tl_conn *c, uint32_t seg, uint64_t spill_used);

/* HEARTBEAT / UNMOUNT: the frame status. */
int tl_heartbeat(struct tl_conn *c, uint32_t seg);

int tl_unmount(struct tl_conn *c, uint32_t seg, bool drain);

/* One LIST page: entries appended to names[]/is_prefix[] (each name
 * malloc'd) up to cap; *next receives the cursor (malloc'd). Returns the
 * frame status; *n the entry count. */
int tl_list(struct tl_conn *c, const char *prefix, const char *delim,
	    const char *cursor, uint32_t limit, char **names, int *is_prefix,
	    size_t cap, size_t *n, char **next);

/* ---- a master on private ports ---- */

struct tl_master {
	pid_t pid;
	int port, http_port, md_port;
	char dir[128];
	char conf[160];
	char log[160];
};

/* Writes <dir>/master.ini ([master] listen/http_listen/metadata_listen on
 * fresh loopback ports, node_ttl = 1h unless extra_ini names node_ttl (the
 * shorter client_ttl still wins), [log] level = info unless extra_ini has
 * a [log] section, plus extra_ini: more INI text, may repeat sections but
 * not keys)
 * and starts build/kvpool-master -c it, with extra_args appended. Waits for
 * the RPC port. REQUIREs success. */
void tl_start_master_args(struct tl_master *m, const char *extra_ini,
			  const char *const *extra_args);
void tl_start_master(struct tl_master *m, const char *extra_ini);

/* Stops it with SIGTERM: the wait status. */
int tl_stop_master(struct tl_master *m);

/* Prints the master's log (for a failed test). */
void tl_dump_log(const char *path);

/* ---- a pool for libkvpool tests: a master and nodes ---- */

#define TL_POOL_MAX_NODES 4

struct tl_pool {
	char dir[128];			/* private temp dir: configs, logs */
	char tag[64];			/* kvpt-cl-<pid>: shm names */
	char bin[256];			/* directory of the binaries */
	int mport, mhttp;
	pid_t master;
	int nnodes;
	pid_t node[TL_POOL_MAX_NODES];
	int dport[TL_POOL_MAX_NODES], hport[TL_POOL_MAX_NODES];
	char conf[256];			/* the client's (and master's) INI */
	char extra[1024];		/* extra [master]/[client] lines for every INI */
};

/* Starts a master and n nodes of seg_mb MiB each (the test's one pool:
 * stopped, its segments and dir removed at exit; its logs shown when
 * tl_done fails). extra: INI lines appended to every file (may hold
 * [master]/[client] sections). Skips (77) when the daemons are not built. */
struct tl_pool *tl_pool_start(int n, unsigned seg_mb, const char *extra);
/* Set before tl_pool_start: the nodes keep their segments when they exit
 * (remove_segment_on_exit = false; tl_pool's stop still removes them). For
 * a test that SIGKILLs a node and restarts it on its segment: a killed
 * node's ephemeral segment is an orphan that any node starting on the host
 * meanwhile (another test's, when tests run side by side) may remove. */
extern bool tl_pool_keep_segments;
/* (Re)starts the master, or node i, of the pool's INI files. */
void tl_pool_start_master(struct tl_pool *p);
void tl_pool_start_node(struct tl_pool *p, int i);
/* Stops *pid with sig (SIGKILL after 1 s) and clears it; nothing if 0. */
void tl_pool_kill(pid_t *pid, int sig);
/* A client handle with extra overrides ("section.key=value", NULL
 * terminated; may be NULL). */
struct kvp *tl_pool_open(const struct tl_pool *p, const char *const *overrides, int *err);
/* Until the master lists want nodes (or seconds pass): 1 when it does. */
int tl_pool_wait_nodes(const struct tl_pool *p, size_t want, int seconds);
/* want TL_ANY_NODES: until the master answers INFO, whatever its count. */
#define TL_ANY_NODES ((size_t)-1)

/* Value bytes derived from the key and a length: any byte that lands in the
 * wrong place or the wrong object is detected. */
void tl_fill(void *buf, size_t len, const char *key);
int tl_check_fill(const void *buf, size_t len, const char *key);

#endif

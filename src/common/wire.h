/* wire: kvpool's binary framing and body codec, shared by master, node and
 * client. Pure functions over caller-owned buffers: no I/O, no locks.
 *
 * A frame is a 32-byte little-endian header, then body_len bytes of body
 * (small, buffered), then payload_len bytes of payload (value bytes, streamed
 * straight from/to their final place). Requests may be pipelined; a reply
 * carries the request's reqid and may come out of order. The header status is
 * 0 or a frame-level KVP_E* code (EAUTH, EPROTO, ETOOBIG); per-key results are
 * in the body.
 *
 * Status encoding: every status, in the header and in a body (i32 status),
 * is 0, a positive value an opcode defines (EXISTS: 1), or -n for the code
 * KVP_ERR_BASE - n (n = 1..25: KVP_ENOTFOUND -1 ... KVP_EPERM -25).
 * These are the numbers kvpool's codes had before 0.2.0; the wire kept them
 * when the library's codes moved below the errno range, so the wire version
 * did not change. wire_status_encode/decode (wb_status, rb_status) are the
 * only way a status enters or leaves a frame; a decoded wire status outside
 * -25..-1 is a protocol error (-24, KVP_ENSMISMATCH, came with NS_DECLARE,
 * -25, KVP_EPERM, with tenants; a peer from before reads them as a protocol
 * error).
 *
 * Every connection starts with HELLO; anything else first -> EAUTH and close.
 * Every key opcode is a batch: the body carries n items, the reply n results.
 * Body layouts (u8/u16/u32/u64/i32/i64 little-endian; str = u16 len + bytes;
 * blob = u32 len + bytes; "n x {...}" = u32 n then n items):
 *
 * HELLO      req: u16 role(WIRE_ROLE_*) str token str name str host_id
 *            rep: u64 server_epoch u16 proto_version [u32 features]
 *            features (a master's; absent from older ones: 0):
 *            WIRE_HELLO_F_MOUNT_MAP: it takes the commit map with MOUNT, so
 *            a node may MOUNT before its scan, REPORT after it (a master
 *            sends such a node no FREE/DEMOTE/PROMOTE before its HEARTBEAT);
 *            set only while a segment of a taken-over table awaits its node
 *            server_epoch names the master for the life of the connection:
 *            every reply on it is that master's, every grant it gives
 *            carries it. With HA (docs/ha.md) it is the etcd revision of
 *            the leader's election, so it grows with every new leader; a
 *            master that stops leading closes every connection. A standby
 *            (or a leader that lost its lease) answers any frame with
 *            header status KVP_ENOTLEADER, body u64 leader_epoch str
 *            leader_rpc (0 and "" when it knows none), and closes.
 * MOUNT      req: str node_name str host_id str shm_path u64 shm_dev u64 shm_ino
 *                 u64 seg_size u64 seg_uuid u64 data_off u32 align str endpoint
 *                 blob rdma_info u64 spill_capacity i32 numa_node
 *                 [blob commit_map]
 *            rep: u32 segment_id blob grant_secret(32 bytes)
 *            commit_map (optional; only to a master with
 *            WIRE_HELLO_F_MOUNT_MAP): the segment's map bytes (shm/segmap.h)
 *            for pages 0..n-1, n <= seg_size / 4096 + 1, a hole read as 0.
 *            A warm segment of a new leader takes puts at once, around
 *            holds placed from it (docs/ha.md "Warm standby").
 * REPORT     req: u32 segment_id, n x {WIRE_EXTENT}   (after MOUNT, any number)
 *            rep: u32 adopted u32 rejected  (rejected ones get a FREE)
 * UNMOUNT    req: u32 segment_id u8 drain            rep: -
 * HEARTBEAT  req: u32 segment_id u64 used_by_node u64 spill_used
 *            [u64 tcp_read_bytes u64 tcp_written_bytes]   rep: -
 *            (the node's data server since it started; optional: a master
 *            takes a heartbeat without them, as from a node before them)
 * FREE       (master -> node request on the node's connection)
 *            req: u32 segment_id, n x {u8 tier u64 off u64 generation}
 *            rep: -   (the master reuses the space only after this reply)
 * SEGMENTS   req: -   rep: n x {WIRE_SEGMENT}
 * FOLLOW     (HELLO role WIRE_ROLE_MASTER) req: -   rep: -
 *            The leader then sends REPL frames (not replies) on this
 *            connection: a snapshot of its table, then every committed
 *            change (docs/ha.md "Warm standby").
 * REPL       (leader -> standby) body: records, each u8 type then
 *            1 SEG: u32 id u64 uuid str name str host_id str shm_path
 *               u64 shm_dev u64 shm_ino u64 size u64 data_off u32 align
 *               str endpoint blob rdma_info u64 spill_capacity i32 numa_node
 *            2 SEGDROP: u32 id
 *            3 ADD: u32 segment_id {WIRE_EXTENT}
 *            4 DROP: u32 segment_id str key u8 tier u64 off u64 generation
 *            5 SYNCED: u64 generation   (the snapshot is complete)
 * DEMOTE     (master -> node request on the node's connection)
 *            req: u32 segment_id, n x {u64 off u64 generation}
 *            rep: n x {i32 status u64 spill_off u64 alloc_len}
 *            The node copies each live memory extent (of that generation) to
 *            its spill file, the header rewritten with the spill file's uuid,
 *            and answers where the copy lives (tier 1). The memory extent is
 *            untouched: the master flips the replica to tier 1 and FREEs it
 *            (tier 0), or keeps it and FREEs the copy (tier 1). Status:
 *            KVP_ENOSPC no spill room, KVP_ESTALE no such live extent,
 *            KVP_ECHECKSUM value damaged, KVP_ENOTSUP no spill tier, KVP_EIO.
 * PROMOTE    (master -> node request on the node's connection)
 *            req: u32 segment_id, n x {u64 spill_off u64 generation u64 off u64 alloc_len}
 *            rep: n x {i32 status}
 *            The node copies the spill extent into the memory extent the
 *            master allocated at off (header rewritten with the segment's
 *            uuid). The spill copy stays until the master FREEs it (tier 1).
 * PUT_START  req: u8 replicas u32 preferred_segment(0 none, WIRE_SEG_LOCAL:
 *                 a segment whose host_id equals the HELLO's) u32 flags(WIRE_PUT_*)
 *                 u64 pin_ttl_ms(with WIRE_PUT_SOFT_PIN; 0: [master] soft_pin_ttl),
 *                 n x {str key u64 value_len}
 *            rep: n x {i32 status u64 generation u8 nrep, nrep x
 *                 {u32 segment_id u64 off u64 alloc_len u8 grant[16]}}
 *            WIRE_PUT_UPSERT: an existing key is not EEXIST; the new value
 *            replaces it at this put's PUT_END (docs/master.md "Upsert").
 *            WIRE_PUT_CHAIN: the items are a chain (a request's prefix
 *            blocks): item i > 0 extends item i - 1, and after the items
 *            comes str pred, the key item 0 extends ("" none); eviction
 *            never drops a block while one that extends it is kept.
 * PUT_END    req: n x {str key u64 generation u64 checksum}   rep: n x {i32}
 * PUT_REVOKE req: n x {str key u64 generation}                rep: n x {i32}
 * GET        req: n x {str key}
 *            rep: n x {i32 status u64 value_len u64 generation u64 checksum
 *                 u64 lease_ms u8 nrep, nrep x {u32 segment_id u8 tier u64 off u64 alloc_len}}
 * LEASE_RELEASE req: n x {str key u64 generation}  rep: n x {i32}
 *            The reader is done with the value GET gave it (read and
 *            verified, or abandoned): one lease fewer on that generation
 *            (the current value or a replaced one an upsert keeps for its
 *            readers). With none left the object is removable and
 *            evictable at once. Clients send it after the copy without
 *            waiting for the reply; KVP_ENOTFOUND: no such generation.
 * EXISTS     req: n x {str key}           rep: n x {i32 1|0|err}
 *            A lookup: eviction does not count it as a read.
 * TOUCH      req: n x {str key}           rep: n x {i32 1|0|err}
 *            Keys the client read without the master (optimistic reads):
 *            each one found counts one read for eviction. Clients send it
 *            without waiting for the reply; a master from before TOUCH
 *            answers a bad header (EPROTO), and those reads go uncounted.
 * SIZE       req: n x {str key}           rep: n x {i32 status u64 size}
 * REMOVE     req: u8 force, n x {str key} rep: n x {i32}
 * REMOVE_PREFIX req: str prefix u8 force  rep: u64 count   (empty prefix = all)
 * LIST       req: str prefix str delimiter(0/1 byte) str cursor u32 limit
 *            rep: n x {u8 is_prefix str name u64 size u64 put_time_ns} str next_cursor
 * STAT       req: n x {str key}
 *            rep: n x {i32 status u64 size u64 generation u64 checksum u64 put_time_ns
 *                 u64 access_time_ns i64 lease_ms i64 pin_ms u8 nrep,
 *                 nrep x {u32 segment_id u8 tier u64 off u64 alloc_len}}
 * PIN        req: u64 ttl_ms, n x {str key}  rep: n x {i32}
 * INFO       req: -   rep: u64 keys u64 bytes_used u64 capacity u64 evictions
 *                 u64 demotions u64 leases
 * REPLICA_CLEAR req: u32 segment_id u8 force, n x {str key}   rep: n x {i32}
 *            Drops each object's replica in that segment (its extent FREEd);
 *            an object goes with its last replica. 0 also when it had none
 *            there; KVP_ELEASED while read leases are held (unless force);
 *            frame status KVP_ENOSEG for a segment that is not online.
 * NS_DECLARE req: str name str model str dtype u32 page_size str layout u32 tp
 *            rep: i32 status u64 fingerprint str message
 *            Declares what the KV under the key prefix "name/" is
 *            (docs/master.md "Namespaces"). The first declaration creates
 *            the namespace; the same fields again succeed; other fields
 *            get status KVP_ENSMISMATCH and a message naming both sets.
 *            From then on the key requests of this connection (PUT_START,
 *            GET, EXISTS, SIZE, STAT, PIN, REMOVE, REPLICA_CLEAR) may name
 *            keys of that namespace; a connection that has not declared a
 *            namespace that exists gets item status KVP_ENSMISMATCH for its
 *            keys. Bad fields: KVP_EINVAL (in the body); a body that does
 *            not parse: frame status KVP_EPROTO.
 *            fingerprint = wire_ns_fingerprint() of the fields.
 * NS_LIST    req: -   rep: n x {str name str model str dtype u32 page_size
 *                 str layout u32 tp u64 fingerprint u64 keys u64 bytes u32 clients}
 *            keys/bytes: complete objects under "name/"; clients:
 *            connections that declared it.
 * CLIENT_STATS req: u32 n, n x {u64 delta}   rep: -
 *            Value bytes the client moved since its last CLIENT_STATS, by
 *            path, in this order: local (memcpy through a mapping), tcp,
 *            rdma, disk (read from a spill tier; also counted in its path).
 *            A master sums the ones it knows and skips the rest (later
 *            clients may send more); n > 64 or a short body: KVP_EPROTO.
 *            Clients post it (at most once a second, when a count moved)
 *            without waiting; a master from before it refuses the frame
 *            (a bad header: it answers EPROTO and closes), and the client
 *            then stops sending it (src/lib/cstats.h).
 * Node data server (client -> node):
 * READ       req: u8 tier u64 off u64 len    rep: payload = the bytes
 *            (tier 1: off is a spill file offset; the node reads the file
 *            with io_uring and streams it; a read error after the reply
 *            header went out closes the connection)
 * WRITE      req: u32 segment_id u64 generation u64 off u64 alloc_len u64 epoch
 *                 u8 grant[16]
 *            payload = extent image (header+key+value, <= alloc_len)   rep: -
 *            epoch: the granting master's (the HELLO server_epoch of the
 *            connection its PUT_START went on); the node accepts only the
 *            epoch of the master it is mounted at now
 * RDMA_CONNECT req: the client's QP record   rep: the node's QP record
 *            (layout in src/common/rdma.h: device name, port, lid, gid, mtu,
 *            rd_atomic, nqp x {qpn psn}). The node creates nqp RC queue
 *            pairs on the named device, connects them to the client's and
 *            keeps them while this connection stays open; afterwards the
 *            client READs/WRITEs the segment one-sided (no frames). Status
 *            KVP_ENOTSUP: no RDMA on this node or no such device.
 *
 * rdma_info (MOUNT, WIRE_SEGMENT): empty = no RDMA; else the blob of
 * src/common/rdma.h: u8 version u8 ndev u64 addr u64 len, ndev x {str name u8 port
 * u8 link_layer u16 lid u8 gid[16] u32 nchunks, nchunks x {u64 off u64 len
 * u32 rkey}}: where each device reaches the segment's memory regions.
 *
 * WIRE_EXTENT = str key u8 tier u64 off u64 alloc_len u64 value_len u64 checksum
 *               u64 generation u64 put_time_ns
 * WIRE_SEGMENT = u32 segment_id str node_name str host_id str shm_path u64 shm_dev
 *               u64 shm_ino u64 seg_size u64 seg_uuid str endpoint blob rdma_info
 *               u8 draining u64 used u64 objects u64 spill_capacity u64 spill_used
 *               i32 numa_node
 *
 * grant = SipHash-2-4, 128-bit output, keyed with SHA-256(grant_secret)[0..16],
 *         of u32 segment_id u64 generation u64 off u64 alloc_len u64 epoch
 *         (grant_make()).
 *
 * Master behaviour the layouts do not show (docs/master.md has the rest):
 * - MOUNT, REPORT, UNMOUNT, HEARTBEAT need HELLO role NODE (else EPROTO);
 *   REPORT/UNMOUNT/HEARTBEAT of a segment that is not this connection's
 *   mount get header status KVP_ENOSEG: the node re-MOUNTs (a known
 *   seg_uuid keeps its segment_id; its replicas are rebuilt from REPORTs).
 * - Every batch (REPORT included) holds at most cluster.max_batch items,
 *   else header status KVP_ELIMIT; a body shorter than its count: EPROTO.
 * - PUT_START: replicas 0 means 1; fewer segments than replicas give as
 *   many replicas as there are segments (>= 1). An item that finds no room
 *   makes the master evict and wait (<= 2 s) for the FREE acks before it
 *   answers, so that reply may come late and out of order.
 * - Incomplete objects are invisible to GET/EXISTS/SIZE/STAT/LIST/PIN/REMOVE.
 * - HA: a new leader answers a frame naming a key it does not know yet, and
 *   LIST and REMOVE_PREFIX, with header status KVP_ENOTLEADER until the
 *   last leader's segments have re-mounted and reported (master/mrecover.h);
 *   clients send such frames again.
 * - A connection over master.max_connections gets one HELLO reply frame
 *   (reqid 0, status KVP_ELIMIT) and is closed.
 */
#ifndef KVP_WIRE_H
#define KVP_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define WIRE_MAGIC 0x3150564bu		/* "KVP1" */
#define WIRE_VERSION 1
#define WIRE_HDR_SIZE 32
#define WIRE_GRANT_LEN 16
#define WIRE_SECRET_LEN 32
#define WIRE_SEG_LOCAL 0xffffffffu
#define WIRE_HELLO_F_MOUNT_MAP 1u	/* HELLO reply features (above) */
#define WIRE_PUT_PREFIX 17		/* PUT_START's fields before the item count */
#define WIRE_CSTATS_MAX 64		/* CLIENT_STATS: most counters in one frame */

/* CLIENT_STATS's counters, in their wire order. */
enum wire_cstat {
	WIRE_CSTAT_LOCAL,
	WIRE_CSTAT_TCP,
	WIRE_CSTAT_RDMA,
	WIRE_CSTAT_DISK,
	WIRE_CSTAT_N,
};

enum wire_put_flag {
	WIRE_PUT_UPSERT = 1,		/* = KVP_PUT_UPSERT */
	WIRE_PUT_SOFT_PIN = 2,		/* = KVP_PUT_SOFT_PIN */
	WIRE_PUT_CHAIN = 4,		/* the items are a chain; str pred follows them */
};

enum wire_flag {
	WIRE_F_REPLY = 1,
};

enum wire_role {
	WIRE_ROLE_CLIENT = 1,
	WIRE_ROLE_NODE = 2,
	WIRE_ROLE_ADMIN = 3,
	WIRE_ROLE_MASTER = 4,		/* a standby master following the leader (FOLLOW) */
};

enum wire_op {
	WIRE_OP_HELLO = 1,
	WIRE_OP_MOUNT = 2,
	WIRE_OP_REPORT = 3,
	WIRE_OP_UNMOUNT = 4,
	WIRE_OP_HEARTBEAT = 5,
	WIRE_OP_FREE = 6,
	WIRE_OP_SEGMENTS = 7,
	WIRE_OP_FOLLOW = 8,	/* standby -> leader: stream the table (mrepl.h) */
	WIRE_OP_REPL = 9,	/* leader -> standby: table changes (mrepl.h) */
	WIRE_OP_PUT_START = 16,
	WIRE_OP_PUT_END = 17,
	WIRE_OP_PUT_REVOKE = 18,
	WIRE_OP_GET = 19,
	WIRE_OP_EXISTS = 20,
	WIRE_OP_SIZE = 21,
	WIRE_OP_REMOVE = 22,
	WIRE_OP_REMOVE_PREFIX = 23,
	WIRE_OP_LIST = 24,
	WIRE_OP_STAT = 25,
	WIRE_OP_PIN = 26,
	WIRE_OP_INFO = 27,
	WIRE_OP_REPLICA_CLEAR = 28,
	WIRE_OP_LEASE_RELEASE = 29,
	WIRE_OP_NS_DECLARE = 30,
	WIRE_OP_NS_LIST = 31,
	WIRE_OP_CLIENT_STATS = 32,	/* client -> master: bytes by data path */
	WIRE_OP_TOUCH = 33,	/* client -> master: keys read without the master */
	WIRE_OP_READ = 48,
	WIRE_OP_WRITE = 49,
	WIRE_OP_DEMOTE = 50,	/* master -> node (spill tier) */
	WIRE_OP_PROMOTE = 51,	/* master -> node (spill tier) */
	WIRE_OP_RDMA_CONNECT = 52,	/* client -> node data server (rdma.h) */
	WIRE_OP_MAX = 64,
};

const char *wire_op_name(unsigned op);

struct wire_hdr {
	uint32_t magic;
	uint8_t version;
	uint8_t flags;
	uint16_t opcode;
	int32_t status;		/* 0 or a KVP_E* code; wire_hdr_encode/decode convert */
	uint32_t body_len;
	uint64_t reqid;
	uint64_t payload_len;
};

void wire_hdr_encode(const struct wire_hdr *h, uint8_t out[WIRE_HDR_SIZE]);
/* 0, KVP_EPROTO (bad magic/version/opcode) or KVP_ETOOBIG (over the limits). */
int wire_hdr_decode(const uint8_t in[WIRE_HDR_SIZE], struct wire_hdr *h,
		    uint32_t max_body, uint64_t max_payload);

/* Growable write buffer. On allocation failure oom is set and further
 * writes are dropped; check it once before sending. */
struct wbuf {
	uint8_t *p;
	size_t len, cap;
	bool oom;
};

void wb_init(struct wbuf *b);
void wb_free(struct wbuf *b);
void wb_reset(struct wbuf *b);
bool wb_grow(struct wbuf *b, size_t more);
void wb_bytes(struct wbuf *b, const void *src, size_t n);

static inline void wb_u8(struct wbuf *b, uint8_t v) { wb_bytes(b, &v, 1); }
static inline void wb_u16(struct wbuf *b, uint16_t v) { wb_bytes(b, &v, 2); }
static inline void wb_u32(struct wbuf *b, uint32_t v) { wb_bytes(b, &v, 4); }
static inline void wb_u64(struct wbuf *b, uint64_t v) { wb_bytes(b, &v, 8); }
static inline void wb_i32(struct wbuf *b, int32_t v) { wb_bytes(b, &v, 4); }
static inline void wb_i64(struct wbuf *b, int64_t v) { wb_bytes(b, &v, 8); }
/* str: u16 length + bytes (n must be <= 65535, else oom is set). */
void wb_str(struct wbuf *b, const void *s, size_t n);
static inline void wb_cstr(struct wbuf *b, const char *s) { wb_str(b, s, strlen(s)); }
void wb_blob(struct wbuf *b, const void *s, size_t n);

/* Frame building: wire_begin() reserves the header; wire_finish() fills it
 * with body_len = bytes written since wire_begin. Several frames may be
 * appended to one wbuf (pipelining). Returns the frame's start offset. */
size_t wire_begin(struct wbuf *b);
void wire_finish(struct wbuf *b, size_t start, uint16_t opcode, uint8_t flags,
		 int32_t status, uint64_t reqid, uint64_t payload_len);

/* Bounds-checked reader: reading past the end sets err and yields zeros. */
struct rbuf {
	const uint8_t *p, *end;
	bool err;
};

static inline void rb_init(struct rbuf *r, const void *p, size_t n)
{
	r->p = (const uint8_t *)p;
	r->end = r->p + n;
	r->err = false;
}

static inline const uint8_t *rb_take(struct rbuf *r, size_t n)
{
	if (r->err || (size_t)(r->end - r->p) < n) {
		r->err = true;
		return NULL;
	}
	const uint8_t *p = r->p;
	r->p += n;
	return p;
}

#define RB_GETTER(name, type)					\
	static inline type rb_##name(struct rbuf *r)		\
	{							\
		type v = 0;					\
		const uint8_t *p = rb_take(r, sizeof(type));	\
		if (p)						\
			memcpy(&v, p, sizeof(type));		\
		return v;					\
	}
RB_GETTER(u8, uint8_t)
RB_GETTER(u16, uint16_t)
RB_GETTER(u32, uint32_t)
RB_GETTER(u64, uint64_t)
RB_GETTER(i32, int32_t)
RB_GETTER(i64, int64_t)
#undef RB_GETTER

/* str: returns a pointer into the buffer (not NUL-terminated) and its length. */
static inline const uint8_t *rb_str(struct rbuf *r, size_t *n)
{
	*n = rb_u16(r);
	const uint8_t *p = rb_take(r, *n);
	if (!p)
		*n = 0;
	return p;
}

static inline const uint8_t *rb_blob(struct rbuf *r, size_t *n)
{
	*n = rb_u32(r);
	const uint8_t *p = rb_take(r, *n);
	if (!p)
		*n = 0;
	return p;
}

/* Copies a str into dst (NUL-terminated); sets err if it does not fit. */
void rb_cstr(struct rbuf *r, char *dst, size_t cap);

/* A count of items that each take at least min_item bytes: sets err when
 * the remaining body cannot hold that many (so callers can allocate n). */
uint32_t rb_count(struct rbuf *r, size_t min_item);

static inline bool rb_ok(const struct rbuf *r) { return !r->err; }
static inline bool rb_done(const struct rbuf *r) { return !r->err && r->p == r->end; }

/* Status on the wire (see the top of this file). encode: 0 and positive
 * values pass, a KVP_E* code becomes -1..-24, anything else (a -errno that
 * leaked: a bug) becomes KVP_EINTERNAL's. decode: 0 and positive values
 * pass, -1..-24 become the KVP_E* code, anything else KVP_EPROTO. */
int32_t wire_status_encode(int rc);
int wire_status_decode(int32_t v);
/* True when v is a status a frame may carry (0, positive, or -1..-24). */
bool wire_status_ok(int32_t v);

static inline void wb_status(struct wbuf *b, int rc) { wb_i32(b, wire_status_encode(rc)); }
/* A body status, decoded; one outside the wire's range sets err (the frame
 * is malformed) and reads as KVP_EPROTO. */
static inline int rb_status(struct rbuf *r)
{
	int32_t v = rb_i32(r);

	if (!wire_status_ok(v))
		r->err = true;
	return wire_status_decode(v);
}

/* Key validity: 1..KVP_MAX_KEY bytes, no NUL. */
bool wire_key_ok(const uint8_t *key, size_t n);

/* Namespaces (NS_DECLARE): a name is 1..WIRE_NS_NAME_MAX of [A-Za-z0-9._-];
 * model, dtype and layout are 1..their max printable ASCII bytes. */
#define WIRE_NS_NAME_MAX 128
#define WIRE_NS_MODEL_MAX 256
#define WIRE_NS_FIELD_MAX 64		/* dtype, layout */
bool wire_ns_name_ok(const uint8_t *p, size_t n);
bool wire_ns_field_ok(const uint8_t *p, size_t n, size_t max);
/* The length of NAME when key is "NAME/..." with a valid NAME, else 0. */
size_t wire_key_ns(const uint8_t *key, size_t n);
/* FNV-1a 64 of the fields as NS_DECLARE encodes them (after the name):
 * the same fields give the same fingerprint on every host. */
uint64_t wire_ns_fingerprint(const uint8_t *model, size_t mlen, const uint8_t *dtype,
			     size_t dlen, uint32_t page_size, const uint8_t *layout,
			     size_t llen, uint32_t tp);

#endif

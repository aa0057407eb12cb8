/* wire: framing and body codec; see wire.h for the protocol. */
#include "wire.h"

#include <stdlib.h>

#include "kvpool.h"

static const char *const op_names[WIRE_OP_MAX] = {
	[WIRE_OP_HELLO] = "hello",
	[WIRE_OP_MOUNT] = "mount",
	[WIRE_OP_REPORT] = "report",
	[WIRE_OP_UNMOUNT] = "unmount",
	[WIRE_OP_HEARTBEAT] = "heartbeat",
	[WIRE_OP_FREE] = "free",
	[WIRE_OP_SEGMENTS] = "segments",
	[WIRE_OP_FOLLOW] = "follow",
	[WIRE_OP_REPL] = "repl",
	[WIRE_OP_PUT_START] = "put_start",
	[WIRE_OP_PUT_END] = "put_end",
	[WIRE_OP_PUT_REVOKE] = "put_revoke",
	[WIRE_OP_GET] = "get",
	[WIRE_OP_EXISTS] = "exists",
	[WIRE_OP_SIZE] = "size",
	[WIRE_OP_REMOVE] = "remove",
	[WIRE_OP_REMOVE_PREFIX] = "remove_prefix",
	[WIRE_OP_LIST] = "list",
	[WIRE_OP_STAT] = "stat",
	[WIRE_OP_PIN] = "pin",
	[WIRE_OP_INFO] = "info",
	[WIRE_OP_REPLICA_CLEAR] = "replica_clear",
	[WIRE_OP_LEASE_RELEASE] = "lease_release",
	[WIRE_OP_NS_DECLARE] = "ns_declare",
	[WIRE_OP_NS_LIST] = "ns_list",
	[WIRE_OP_CLIENT_STATS] = "client_stats",
	[WIRE_OP_TOUCH] = "touch",
	[WIRE_OP_READ] = "read",
	[WIRE_OP_WRITE] = "write",
	[WIRE_OP_DEMOTE] = "demote",
	[WIRE_OP_PROMOTE] = "promote",
	[WIRE_OP_RDMA_CONNECT] = "rdma_connect",
};

const char *wire_op_name(unsigned op)
{
	if (op < WIRE_OP_MAX && op_names[op])
		return op_names[op];
	return NULL;
}

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

/* The wire's codes: KVP_ERR_BASE - n travels as -n. */
#define WIRE_ERR_N (KVP_ERR_BASE - KVP_ERR_MIN)

bool wire_status_ok(int32_t v)
{
	return v >= -WIRE_ERR_N;
}

int32_t wire_status_encode(int rc)
{
	if (rc >= 0)
		return rc;
	if (!kvp_is_err(rc))
		rc = KVP_EINTERNAL;
	return rc - KVP_ERR_BASE;
}

int wire_status_decode(int32_t v)
{
	if (v >= 0)
		return v;
	if (!wire_status_ok(v))
		return KVP_EPROTO;
	return KVP_ERR_BASE + v;
}

void wire_hdr_encode(const struct wire_hdr *h, uint8_t out[WIRE_HDR_SIZE])
{
	put32(out, h->magic);
	out[4] = h->version;
	out[5] = h->flags;
	put16(out + 6, h->opcode);
	put32(out + 8, (uint32_t)wire_status_encode(h->status));
	put32(out + 12, h->body_len);
	put64(out + 16, h->reqid);
	put64(out + 24, h->payload_len);
}

int wire_hdr_decode(const uint8_t in[WIRE_HDR_SIZE], struct wire_hdr *h,
		    uint32_t max_body, uint64_t max_payload)
{
	h->magic = get32(in);
	h->version = in[4];
	h->flags = in[5];
	h->opcode = get16(in + 6);
	int32_t status = (int32_t)get32(in + 8);

	h->status = wire_status_decode(status);
	h->body_len = get32(in + 12);
	h->reqid = get64(in + 16);
	h->payload_len = get64(in + 24);
	if (h->magic != WIRE_MAGIC || h->version != WIRE_VERSION || !wire_op_name(h->opcode))
		return KVP_EPROTO;
	if (h->flags & ~(unsigned)WIRE_F_REPLY)
		return KVP_EPROTO;
	if (status > 0 || !wire_status_ok(status))
		return KVP_EPROTO;
	if (h->body_len > max_body || h->payload_len > max_payload)
		return KVP_ETOOBIG;
	return 0;
}

void wb_init(struct wbuf *b)
{
	b->p = NULL;
	b->len = b->cap = 0;
	b->oom = false;
}

void wb_free(struct wbuf *b)
{
	free(b->p);
	wb_init(b);
}

void wb_reset(struct wbuf *b)
{
	b->len = 0;
	b->oom = false;
}

bool wb_grow(struct wbuf *b, size_t more)
{
	if (b->oom)
		return false;
	if (b->cap - b->len >= more)
		return true;
	size_t cap = b->cap ? b->cap : 256;
	while (cap - b->len < more) {
		if (cap > SIZE_MAX / 2) {
			b->oom = true;
			return false;
		}
		cap *= 2;
	}
	uint8_t *p = realloc(b->p, cap);
	if (!p) {
		b->oom = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void wb_bytes(struct wbuf *b, const void *src, size_t n)
{
	if (!n || !wb_grow(b, n))
		return;
	memcpy(b->p + b->len, src, n);
	b->len += n;
}

void wb_str(struct wbuf *b, const void *s, size_t n)
{
	if (n > UINT16_MAX) {
		b->oom = true;
		return;
	}
	wb_u16(b, (uint16_t)n);
	wb_bytes(b, s, n);
}

void wb_blob(struct wbuf *b, const void *s, size_t n)
{
	if (n > UINT32_MAX) {
		b->oom = true;
		return;
	}
	wb_u32(b, (uint32_t)n);
	wb_bytes(b, s, n);
}

size_t wire_begin(struct wbuf *b)
{
	size_t start = b->len;

	if (wb_grow(b, WIRE_HDR_SIZE)) {
		memset(b->p + b->len, 0, WIRE_HDR_SIZE);
		b->len += WIRE_HDR_SIZE;
	}
	return start;
}

void wire_finish(struct wbuf *b, size_t start, uint16_t opcode, uint8_t flags,
		 int32_t status, uint64_t reqid, uint64_t payload_len)
{
	if (b->oom || b->len < start + WIRE_HDR_SIZE)
		return;
	struct wire_hdr h = {
		.magic = WIRE_MAGIC,
		.version = WIRE_VERSION,
		.flags = flags,
		.opcode = opcode,
		.status = status,
		.body_len = (uint32_t)(b->len - start - WIRE_HDR_SIZE),
		.reqid = reqid,
		.payload_len = payload_len,
	};
	wire_hdr_encode(&h, b->p + start);
}

void rb_cstr(struct rbuf *r, char *dst, size_t cap)
{
	size_t n;
	const uint8_t *p = rb_str(r, &n);

	if (!p || n >= cap) {
		r->err = true;
		if (cap)
			dst[0] = '\0';
		return;
	}
	memcpy(dst, p, n);
	dst[n] = '\0';
}

uint32_t rb_count(struct rbuf *r, size_t min_item)
{
	uint32_t n = rb_u32(r);

	if (r->err)
		return 0;
	if (min_item && n > (size_t)(r->end - r->p) / min_item) {
		r->err = true;
		return 0;
	}
	return n;
}

bool wire_key_ok(const uint8_t *key, size_t n)
{
	return key && n >= 1 && n <= KVP_MAX_KEY && !memchr(key, '\0', n);
}

bool wire_ns_name_ok(const uint8_t *p, size_t n)
{
	if (!p || n < 1 || n > WIRE_NS_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		uint8_t ch = p[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
			return false;
	}
	return true;
}

bool wire_ns_field_ok(const uint8_t *p, size_t n, size_t max)
{
	if (!p || n < 1 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (p[i] < 0x20 || p[i] > 0x7e)
			return false;
	return true;
}

size_t wire_key_ns(const uint8_t *key, size_t n)
{
	size_t lim = n < WIRE_NS_NAME_MAX + 1 ? n : WIRE_NS_NAME_MAX + 1;
	const uint8_t *slash = memchr(key, '/', lim);

	if (!slash || !wire_ns_name_ok(key, (size_t)(slash - key)))
		return 0;
	return (size_t)(slash - key);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static uint64_t fnv_str(uint64_t h, const uint8_t *p, size_t n)
{
	uint8_t len[2] = { (uint8_t)n, (uint8_t)(n >> 8) };

	return fnv(fnv(h, len, 2), p, n);
}

static uint64_t fnv_u32(uint64_t h, uint32_t v)
{
	uint8_t b[4];

	put32(b, v);
	return fnv(h, b, 4);
}

uint64_t wire_ns_fingerprint(const uint8_t *model, size_t mlen, const uint8_t *dtype,
			     size_t dlen, uint32_t page_size, const uint8_t *layout,
			     size_t llen, uint32_t tp)
{
	uint64_t h = 0xcbf29ce484222325ull;

	h = fnv_str(h, model, mlen);
	h = fnv_str(h, dtype, dlen);
	h = fnv_u32(h, page_size);
	h = fnv_str(h, layout, llen);
	return fnv_u32(h, tp);
}

/* mdrive.h — driving masters in-process, frame by frame, for the tests and
 * benchmarks of the warm standby (t_master_repl, b_ha_meta): a request
 * through master_handle with its status, HELLO and MOUNT as a node or client
 * sends them, and the standby's end of a FOLLOW connection, which applies
 * every REPL frame the leader sends (mdrive_follow_sink, with a struct
 * mdrive_follow as the connection's argument). Header-only: static inline.
 */
#ifndef KVP_MDRIVE_H
#define KVP_MDRIVE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "master.h"
#include "wire.h"

struct mdrive_follow {
	struct master *standby;		/* applies what the leader streams */
	int bad;			/* frames that did not decode or apply */
};

/* A connection's send function that drops what it is given. */
static inline int mdrive_drop(void *arg, const void *p, size_t n)
{
	(void)arg;
	(void)p;
	(void)n;
	return 0;
}

static inline void mdrive_hangup(void *arg)
{
	(void)arg;
}

static inline int mdrive_follow_sink(void *arg, const void *p, size_t n)
{
	struct mdrive_follow *f = arg;
	const uint8_t *b = p;

	while (n >= WIRE_HDR_SIZE) {
		struct wire_hdr h;
		if (wire_hdr_decode(b, &h, UINT32_MAX, UINT64_MAX) || n < WIRE_HDR_SIZE + h.body_len) {
			f->bad++;
			return 0;
		}
		if (h.opcode == WIRE_OP_REPL && !(h.flags & WIRE_F_REPLY) &&
		    master_follow_apply(f->standby, b + WIRE_HDR_SIZE, h.body_len))
			f->bad++;
		b += WIRE_HDR_SIZE + h.body_len;
		n -= WIRE_HDR_SIZE + h.body_len;
	}
	return 0;
}

/* One request frame (op, body) from c; the reply in reply. Its status, or
 * -1 for a reply that does not decode. */
static inline int mdrive_call(struct master *m, struct master_client *c, uint16_t op,
			      const void *body, size_t len, struct wbuf *reply)
{
	struct wire_hdr h = { .magic = WIRE_MAGIC, .version = WIRE_VERSION, .opcode = op,
			      .body_len = (uint32_t)len, .reqid = 1 };
	struct wire_hdr rh;

	wb_reset(reply);
	master_handle(m, c, &h, body, reply);
	if (reply->len < WIRE_HDR_SIZE || wire_hdr_decode(reply->p, &rh, UINT32_MAX, UINT64_MAX))
		return -1;
	return rh.status;
}

/* A connection of role (WIRE_ROLE_*) that said HELLO; NULL if refused.
 * arg goes to send (a struct mdrive_follow for mdrive_follow_sink). */
static inline struct master_client *mdrive_client(struct master *m, uint16_t role,
						  master_send_fn send, void *arg, struct wbuf *w)
{
	struct master_client *c = master_client_new(m, send, mdrive_hangup, arg);
	struct wbuf b;

	wb_init(&b);
	wb_u16(&b, role);
	wb_cstr(&b, "");
	wb_cstr(&b, "mdrive");
	wb_cstr(&b, "host");
	int st = mdrive_call(m, c, WIRE_OP_HELLO, b.p, b.len, w);
	wb_free(&b);
	return st == 0 ? c : NULL;
}

/* MOUNTs node connection c's segment of size bytes (uuid 7, data at 4096,
 * alignment align), with the commit map map[0..n) unless map is NULL; the
 * segment id, 0 if refused. */
static inline uint32_t mdrive_mount_map(struct master *m, struct master_client *c, uint64_t size,
					uint32_t align, const uint8_t *map, size_t n,
					struct wbuf *w)
{
	struct wbuf b;
	uint32_t id = 0;

	wb_init(&b);
	wb_cstr(&b, "node");
	wb_cstr(&b, "host");
	wb_cstr(&b, "/dev/shm/mdrive");
	wb_u64(&b, 1);
	wb_u64(&b, 1);
	wb_u64(&b, size);
	wb_u64(&b, 7);		/* uuid */
	wb_u64(&b, 4096);
	wb_u32(&b, align);
	wb_cstr(&b, "127.0.0.1:1");
	wb_blob(&b, NULL, 0);
	wb_u64(&b, 0);
	wb_i32(&b, -1);
	if (map)
		wb_blob(&b, map, n);
	if (mdrive_call(m, c, WIRE_OP_MOUNT, b.p, b.len, w) == 0)
		memcpy(&id, w->p + WIRE_HDR_SIZE, 4);
	wb_free(&b);
	return id;
}

static inline uint32_t mdrive_mount(struct master *m, struct master_client *c, uint64_t size,
				    uint32_t align, struct wbuf *w)
{
	return mdrive_mount_map(m, c, size, align, NULL, 0, w);
}

/* The keys of the table tests: key-%04u. */
static inline void mdrive_key(char *k, size_t cap, unsigned i)
{
	snprintf(k, cap, "key-%04u", i);
}

/* One REPORT of keys ids[i] (mdrive_key) at 4096 + slots[i] * alen (slots
 * NULL: ids), alen bytes each, generation 1000 + id: its status. */
static inline int mdrive_report_frame(struct master *m, struct master_client *c, uint32_t sid,
				      const unsigned *ids, const unsigned *slots, size_t n,
				      uint64_t alen, struct wbuf *w)
{
	struct wbuf b;
	char key[32];

	wb_init(&b);
	wb_u32(&b, sid);
	wb_u32(&b, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		mdrive_key(key, sizeof(key), ids[i]);
		wb_str(&b, key, strlen(key));
		wb_u8(&b, 0);
		wb_u64(&b, 4096 + (uint64_t)(slots ? slots[i] : ids[i]) * alen);
		wb_u64(&b, alen);
		wb_u64(&b, 100);
		wb_u64(&b, 0xabc + ids[i]);
		wb_u64(&b, 1000 + ids[i]);
		wb_u64(&b, 1);
	}
	int rc = mdrive_call(m, c, WIRE_OP_REPORT, b.p, b.len, w);
	wb_free(&b);
	return rc;
}

/* The HEARTBEAT that ends a segment's REPORTs: its status. */
static inline int mdrive_heartbeat(struct master *m, struct master_client *c, uint32_t sid,
				   struct wbuf *w)
{
	uint8_t hb[20] = { 0 };

	memcpy(hb, &sid, 4);
	return mdrive_call(m, c, WIRE_OP_HEARTBEAT, hb, sizeof(hb), w);
}

/* mdrive_report_frame, then the HEARTBEAT: 0 if both were answered
 * without error. */
static inline int mdrive_report(struct master *m, struct master_client *c, uint32_t sid,
				const unsigned *ids, const unsigned *slots, size_t n,
				uint64_t alen, struct wbuf *w)
{
	int rc = mdrive_report_frame(m, c, sid, ids, slots, n, alen, w);

	return rc ? rc : mdrive_heartbeat(m, c, sid, w);
}

/* EXISTS of key i: true if the master says it is there. */
static inline bool mdrive_exists(struct master *m, struct master_client *c, unsigned i,
				 struct wbuf *w)
{
	struct wbuf b;
	char key[32];
	struct rbuf r;

	wb_init(&b);
	wb_u32(&b, 1);
	mdrive_key(key, sizeof(key), i);
	wb_str(&b, key, strlen(key));
	int st = mdrive_call(m, c, WIRE_OP_EXISTS, b.p, b.len, w);
	wb_free(&b);
	rb_init(&r, w->p + WIRE_HDR_SIZE, w->len - WIRE_HDR_SIZE);
	rb_u32(&r);
	return st == 0 && rb_status(&r) == 1;
}

/* REMOVE of key i: mdrive_call's result. */
static inline int mdrive_remove(struct master *m, struct master_client *c, unsigned i,
				struct wbuf *w)
{
	struct wbuf b;
	char key[32];

	wb_init(&b);
	wb_u8(&b, 0);
	wb_u32(&b, 1);
	mdrive_key(key, sizeof(key), i);
	wb_str(&b, key, strlen(key));
	int rc = mdrive_call(m, c, WIRE_OP_REMOVE, b.p, b.len, w);
	wb_free(&b);
	return rc;
}

/* PUT_START of one key of vlen bytes, one replica: the frame's status,
 * else the item's, else 0 with *gen and *off (either may be NULL) set; -1
 * when the answer does not decode as one replica. */
static inline int mdrive_put_start(struct master *m, struct master_client *c, const char *key,
				   uint64_t vlen, uint64_t *gen, uint64_t *off, struct wbuf *w)
{
	struct wbuf b;
	struct rbuf r;

	wb_init(&b);
	wb_u8(&b, 1);
	wb_u32(&b, 0);
	wb_u32(&b, 0);
	wb_u64(&b, 0);
	wb_u32(&b, 1);
	wb_str(&b, key, strlen(key));
	wb_u64(&b, vlen);
	int st = mdrive_call(m, c, WIRE_OP_PUT_START, b.p, b.len, w);
	wb_free(&b);
	if (st)
		return st;
	rb_init(&r, w->p + WIRE_HDR_SIZE, w->len - WIRE_HDR_SIZE);
	rb_u32(&r);
	st = rb_status(&r);
	if (st)
		return st;
	uint64_t g = rb_u64(&r);
	if (rb_u8(&r) != 1)
		return -1;
	rb_u32(&r);
	uint64_t o = rb_u64(&r);
	if (!rb_ok(&r))
		return -1;
	if (gen)
		*gen = g;
	if (off)
		*off = o;
	return 0;
}

#endif

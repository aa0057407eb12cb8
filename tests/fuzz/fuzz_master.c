/* fuzz_master: arbitrary frames into the master's request dispatcher
 * (master_handle), in-process, with two fake segments mounted so that PUT,
 * GET, eviction and FREE paths are reached. The input is a sequence of
 * records: u8 opcode selector, u8 control bits, u16 body length, body.
 * Control bits: 1 = send as the node (else as the client), 2 = mark as a
 * reply, 4 = run master_tick first, 8 = answer the oldest FREE, DEMOTE or
 * PROMOTE the master sent (a DEMOTE or PROMOTE answer's body is the
 * record's body). promote_on_hit is on: a GET of a disk replica sends
 * PROMOTE. Regions of more than two replicas are picked from through their
 * victim heaps (checked with the rest by master_check after every record).
 * The input, and every frame before it is handled, also goes
 * through master_lookahead() (the read-ahead over pipelined frames).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "evict.h"
#include "log.h"
#include "master.h"
#include "wire.h"

static const uint16_t ops[] = {
	WIRE_OP_HELLO, WIRE_OP_MOUNT, WIRE_OP_REPORT, WIRE_OP_UNMOUNT, WIRE_OP_HEARTBEAT,
	WIRE_OP_FREE, WIRE_OP_SEGMENTS, WIRE_OP_PUT_START, WIRE_OP_PUT_END, WIRE_OP_PUT_REVOKE,
	WIRE_OP_GET, WIRE_OP_EXISTS, WIRE_OP_SIZE, WIRE_OP_REMOVE, WIRE_OP_REMOVE_PREFIX,
	WIRE_OP_LIST, WIRE_OP_STAT, WIRE_OP_PIN, WIRE_OP_INFO, WIRE_OP_READ, WIRE_OP_WRITE,
	/* later opcodes go last: the seed corpus keeps its meaning */
	WIRE_OP_REPLICA_CLEAR, WIRE_OP_LEASE_RELEASE, WIRE_OP_NS_DECLARE, WIRE_OP_NS_LIST,
	WIRE_OP_CLIENT_STATS, WIRE_OP_TOUCH,
};
#define NOPS (sizeof(ops) / sizeof(ops[0]))

/* FREE, DEMOTE and PROMOTE requests the master sent to the node, not answered. */
struct pending_req {
	uint64_t reqid;
	uint16_t op;
};
static struct pending_req reqs[64];
static size_t nreqs;

static int sink(void *arg, const void *p, size_t n)
{
	struct rbuf r;

	(void)arg;
	/* Remember FREE requests so that a record can acknowledge them. */
	rb_init(&r, p, n);
	while (rb_ok(&r) && (size_t)(r.end - r.p) >= WIRE_HDR_SIZE) {
		struct wire_hdr h;
		if (wire_hdr_decode(r.p, &h, UINT32_MAX, UINT64_MAX))
			abort();	/* the master only writes well-formed frames */
		rb_take(&r, WIRE_HDR_SIZE);
		if (!rb_take(&r, h.body_len))
			abort();
		if ((h.opcode == WIRE_OP_FREE || h.opcode == WIRE_OP_DEMOTE ||
		     h.opcode == WIRE_OP_PROMOTE) &&
		    !(h.flags & WIRE_F_REPLY) && nreqs < 64)
			reqs[nreqs++] = (struct pending_req){ h.reqid, h.opcode };
	}
	if ((size_t)(r.end - r.p) != 0)
		abort();
	return 0;
}

static void hangup(void *arg)
{
	(void)arg;
}

static void call(struct master *m, struct master_client *c, uint16_t op, uint8_t flags,
		 uint64_t reqid, const uint8_t *body, size_t len, struct wbuf *reply)
{
	struct wire_hdr h = {
		.magic = WIRE_MAGIC, .version = WIRE_VERSION, .flags = flags, .opcode = op,
		.body_len = (uint32_t)len, .reqid = reqid,
	};

	/* The look ahead over pipelined frames sees the frame as read from a
	 * socket (header + body, exactly len bytes: ASan sees any over-read);
	 * the raw input goes through it as well (LLVMFuzzerTestOneInput). */
	uint8_t *f = malloc(WIRE_HDR_SIZE + len);
	if (!f)
		abort();
	wire_hdr_encode(&h, f);
	memcpy(f + WIRE_HDR_SIZE, body, len);
	master_lookahead(m, c, f, WIRE_HDR_SIZE + len);
	free(f);
	wb_reset(reply);
	master_handle(m, c, &h, body, reply);
	if (reply->len)
		sink(NULL, reply->p, reply->len);
}

static void hello(struct master *m, struct master_client *c, uint16_t role, struct wbuf *w)
{
	struct wbuf b;

	wb_init(&b);
	wb_u16(&b, role);
	wb_cstr(&b, "");
	wb_cstr(&b, "fuzz");
	wb_cstr(&b, "host");
	call(m, c, WIRE_OP_HELLO, 0, 1, b.p, b.len, w);
	wb_free(&b);
}

static void mount(struct master *m, struct master_client *c, uint64_t uuid, uint32_t align,
		  uint64_t spill, struct wbuf *w)
{
	struct wbuf b;

	wb_init(&b);
	wb_cstr(&b, "node");
	wb_cstr(&b, "host");
	wb_cstr(&b, "/dev/shm/fuzz");
	wb_u64(&b, 1);
	wb_u64(&b, uuid);
	wb_u64(&b, 1 << 20);
	wb_u64(&b, uuid);
	wb_u64(&b, align);
	wb_u32(&b, align);
	wb_cstr(&b, "127.0.0.1:1");
	wb_blob(&b, NULL, 0);
	wb_u64(&b, spill);
	wb_i32(&b, -1);
	call(m, c, WIRE_OP_MOUNT, 0, 2, b.p, b.len, w);
	wb_free(&b);
	/* the REPORTs are in (none): the segment takes new extents */
	if (w->len >= WIRE_HDR_SIZE + 4) {
		uint8_t hb[20] = { 0 };
		memcpy(hb, w->p + WIRE_HDR_SIZE, 4);
		call(m, c, WIRE_OP_HEARTBEAT, 0, 3, hb, sizeof(hb), w);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct kvp_conf conf;
	static bool init;
	char err[256];
	struct wbuf reply;

	if (!init) {
		conf_defaults(&conf);
		conf.cluster.max_batch = 64;
		conf.cluster.max_object_size = 1 << 20;
		conf.master.eviction_high_watermark = 0.5;
		conf.master.eviction_ratio = 0.2;
		conf.spill.promote_on_hit = true;
		log_init("fuzz", LOG_CRIT);
		evict_test_exact_max(2);	/* victim heaps on the fuzzer's small regions */
		init = true;
	}
	struct master *m = master_create(&conf, err, sizeof(err));
	if (!m)
		abort();
	master_set_generation(m, 0);	/* puts get generations 1, 2, ... */
	nreqs = 0;
	wb_init(&reply);
	struct master_client *node = master_client_new(m, sink, hangup, NULL);
	struct master_client *cli = master_client_new(m, sink, hangup, NULL);
	hello(m, node, WIRE_ROLE_NODE, &reply);
	hello(m, cli, WIRE_ROLE_CLIENT, &reply);
	mount(m, node, 1, 4096, 1 << 20, &reply);	/* with a spill tier: DEMOTE */
	mount(m, node, 2, 64, 0, &reply);

	master_lookahead(m, cli, data, size);	/* arbitrary bytes as frames */
	uint64_t reqid = 100;
	while (size >= 4) {
		uint16_t op = ops[data[0] % NOPS];
		uint8_t ctl = data[1];
		size_t len = (size_t)data[2] | (size_t)data[3] << 8;
		data += 4;
		size -= 4;
		if (len > size)
			len = size;
		if (ctl & 4)
			master_tick(m);
		/* A copy of exactly len bytes, so ASan sees any over-read. */
		uint8_t *body = malloc(len ? len : 1);
		if (!body)
			abort();
		memcpy(body, data, len);
		if ((ctl & 8) && nreqs) {
			struct pending_req q = reqs[0];
			memmove(reqs, reqs + 1, --nreqs * sizeof(reqs[0]));
			call(m, node, q.op, WIRE_F_REPLY, q.reqid, body,
			     q.op != WIRE_OP_FREE ? len : 0, &reply);
		} else {
			call(m, ctl & 1 ? node : cli, op, ctl & 2 ? WIRE_F_REPLY : 0, reqid++,
			     body, len, &reply);
		}
		free(body);
		if (!master_check(m))
			abort();	/* a replica array or eviction region out of step */
		data += len;
		size -= len;
	}
	master_tick(m);
	master_client_free(cli);
	master_client_free(node);
	master_destroy(m);
	wb_free(&reply);
	return 0;
}

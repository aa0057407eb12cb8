/* t_master_badframes: garbage, truncated frames, oversized lengths, unknown
 * opcodes, bad flags, batch counts that exceed the body, strings running
 * past the end, random bodies for every opcode: each gets an error reply
 * or a close, and the daemon keeps serving everyone else. */
#include "testlib.h"

static struct tl_master M;

/* Reads until the peer closes; returns the status of the first frame seen
 * (1 if none arrived), or 2 if the connection stayed open for 3 s. */
static int error_then_close(struct tl_conn *c)
{
	struct tl_frame *f;
	int first = 1, rc;

	while ((rc = tl_read_frame(c, &f, 3000)) == 0) {
		if (first == 1)
			first = f->h.status;
		tl_frame_free(f);
	}
	return rc == -ECONNRESET ? first : 2;
}

static void header(uint8_t *out, uint32_t magic, uint8_t version, uint8_t flags, uint16_t op,
		   int32_t status, uint32_t body_len, uint64_t payload_len)
{
	struct wire_hdr h = {
		.magic = magic, .version = version, .flags = flags, .opcode = op,
		.status = status, .body_len = body_len, .reqid = 5, .payload_len = payload_len,
	};

	wire_hdr_encode(&h, out);
}

static struct tl_conn *authed(void)
{
	return tl_client(M.port, WIRE_ROLE_CLIENT, NULL, "h");
}

static void still_serving(const char *after)
{
	struct tl_conn *c = authed();
	struct tl_obj o;
	char key[64];

	snprintf(key, sizeof(key), "alive-after-%s", after);
	CHECK(tl_put1(c, key, 10, &o) == 0, "put after %s", after);
	CHECK(tl_exists(c, key) == 1, "exists after %s", after);
	tl_conn_close(c);
	CHECK(tl_alive(M.pid), "master alive after %s", after);
}

static void closing_cases(void)
{
	uint8_t h[WIRE_HDR_SIZE];
	struct tl_conn *c;

	/* garbage */
	c = tl_conn_open(M.port);
	uint8_t junk[100];
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 37 + 11);
	tl_send_raw(c, junk, sizeof(junk));
	CHECK(error_then_close(c) == KVP_EPROTO, "garbage: EPROTO then close");
	tl_conn_close(c);
	still_serving("garbage");

	/* oversized body length (max_frame is 1M here) */
	c = authed();
	header(h, WIRE_MAGIC, WIRE_VERSION, 0, WIRE_OP_EXISTS, 0, 64u << 20, 0);
	tl_send_raw(c, h, sizeof(h));
	CHECK(error_then_close(c) == KVP_ETOOBIG, "oversized body: ETOOBIG then close");
	tl_conn_close(c);
	still_serving("oversized");

	/* unknown opcode */
	c = authed();
	header(h, WIRE_MAGIC, WIRE_VERSION, 0, 40, 0, 0, 0);
	tl_send_raw(c, h, sizeof(h));
	CHECK(error_then_close(c) == KVP_EPROTO, "unknown opcode: EPROTO then close");
	tl_conn_close(c);

	/* wrong version, bad flags, positive status */
	uint8_t bad[3][WIRE_HDR_SIZE];
	header(bad[0], WIRE_MAGIC, 9, 0, WIRE_OP_EXISTS, 0, 0, 0);
	header(bad[1], WIRE_MAGIC, WIRE_VERSION, 0x80, WIRE_OP_EXISTS, 0, 0, 0);
	header(bad[2], WIRE_MAGIC, WIRE_VERSION, 0, WIRE_OP_EXISTS, 7, 0, 0);
	for (int i = 0; i < 3; i++) {
		c = authed();
		tl_send_raw(c, bad[i], WIRE_HDR_SIZE);
		CHECK(error_then_close(c) == KVP_EPROTO, "bad header %d: EPROTO then close", i);
		tl_conn_close(c);
	}

	/* truncated: header promises 100 bytes, 10 come, then the peer goes */
	c = authed();
	header(h, WIRE_MAGIC, WIRE_VERSION, 0, WIRE_OP_EXISTS, 0, 100, 0);
	tl_send_raw(c, h, sizeof(h));
	tl_send_raw(c, junk, 10);
	tl_conn_close(c);
	/* truncated header */
	c = tl_conn_open(M.port);
	tl_send_raw(c, h, 7);
	tl_conn_close(c);
	still_serving("truncation");
}

/* Frame-level errors that leave the connection usable. */
static void reply_cases(void)
{
	struct tl_conn *c = authed();
	struct wbuf b;
	struct tl_frame *f;

	/* batch count beyond what the body holds */
	wb_init(&b);
	wb_u32(&b, 1000000);
	wb_cstr(&b, "k");
	f = tl_call(c, WIRE_OP_EXISTS, &b);
	CHECK(f && f->h.status == KVP_EPROTO && f->h.body_len == 0, "count > body: EPROTO");
	tl_frame_free(f);

	/* two keys announced, one present */
	wb_reset(&b);
	wb_u32(&b, 2);
	wb_cstr(&b, "k");
	f = tl_call(c, WIRE_OP_GET, &b);
	CHECK(f && f->h.status == KVP_EPROTO, "short batch: EPROTO");
	tl_frame_free(f);

	/* a string running past the end */
	wb_reset(&b);
	wb_u32(&b, 1);
	wb_u16(&b, 500);
	wb_bytes(&b, "abc", 3);
	f = tl_call(c, WIRE_OP_REMOVE, &b);
	CHECK(f && f->h.status == KVP_EPROTO, "long str: EPROTO");
	tl_frame_free(f);

	/* PUT_START whose items are cut short: nothing is allocated */
	wb_reset(&b);
	tl_wb_put_prefix(&b, 1, 0, 0, 0);
	wb_u32(&b, 3);
	wb_cstr(&b, "cut1");
	wb_u64(&b, 10);
	wb_cstr(&b, "cut2");
	f = tl_call(c, WIRE_OP_PUT_START, &b);
	CHECK(f && f->h.status == KVP_EPROTO, "cut PUT_START: EPROTO");
	tl_frame_free(f);
	struct tl_obj o;
	CHECK_EQ(tl_put_start1(c, "cut1", 10, 1, 0, &o), 0);	/* the key was never taken */
	CHECK_EQ(tl_put_revoke1(c, "cut1", o.generation), 0);

	/* empty bodies where fields are required */
	static const uint16_t ops[] = { WIRE_OP_PUT_START, WIRE_OP_PUT_END, WIRE_OP_PUT_REVOKE,
		WIRE_OP_GET, WIRE_OP_EXISTS, WIRE_OP_SIZE, WIRE_OP_REMOVE, WIRE_OP_REMOVE_PREFIX,
		WIRE_OP_LIST, WIRE_OP_STAT, WIRE_OP_PIN };
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		f = tl_call(c, ops[i], NULL);
		CHECK(f && f->h.status == KVP_EPROTO, "empty %s: EPROTO", wire_op_name(ops[i]));
		tl_frame_free(f);
	}
	/* node ops from a client role */
	f = tl_call(c, WIRE_OP_MOUNT, NULL);
	CHECK(f && f->h.status == KVP_EPROTO, "MOUNT from a client: EPROTO");
	tl_frame_free(f);

	/* a payload the master has no use for is skipped */
	wb_reset(&b);
	wb_u32(&b, 1);
	wb_cstr(&b, "k");
	uint8_t h[WIRE_HDR_SIZE];
	struct wire_hdr hd = { .magic = WIRE_MAGIC, .version = WIRE_VERSION,
		.opcode = WIRE_OP_EXISTS, .body_len = (uint32_t)b.len, .reqid = 4242,
		.payload_len = 5 };
	wire_hdr_encode(&hd, h);
	tl_send_raw(c, h, sizeof(h));
	tl_send_raw(c, b.p, b.len);
	tl_send_raw(c, "12345", 5);
	f = tl_wait_reply(c, 4242);
	CHECK(f && f->h.status == 0, "payload skipped, request answered");
	tl_frame_free(f);

	/* an unsolicited reply is ignored */
	CHECK_EQ(tl_send_frame(c, WIRE_OP_FREE, WIRE_F_REPLY, 0, 99999, NULL, 0), 0);
	CHECK_EQ(tl_exists(c, "k"), 0);
	wb_free(&b);
	tl_conn_close(c);

	/* malformed HELLO: EPROTO, and the connection is still unauthenticated */
	c = tl_conn_open(M.port);
	wb_init(&b);
	wb_u16(&b, WIRE_ROLE_CLIENT);
	wb_u16(&b, 300);
	f = tl_call(c, WIRE_OP_HELLO, &b);
	CHECK(f && f->h.status == KVP_EPROTO, "bad HELLO: EPROTO");
	tl_frame_free(f);
	CHECK_EQ(tl_exists(c, "k"), KVP_EAUTH);
	wb_free(&b);
	tl_conn_close(c);
	still_serving("frame errors");
}

/* Random bodies for every opcode, node and client roles. */
static void random_cases(void)
{
	struct tl_conn *n = tl_client(M.port, WIRE_ROLE_NODE, NULL, "h");
	uint8_t buf[512];
	uint64_t x = 88172645463325252ull;
	int answered = 0, sent = 0;

	n->auto_free = true;
	REQUIRE(tl_mount(n, "rnd", "h", 1 << 20, 99, 4096, NULL) > 0, "mount");
	for (int i = 0; i < 2000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint16_t op = (uint16_t)(1 + x % 27);
		if (!wire_op_name(op) || op == WIRE_OP_HELLO)
			continue;
		size_t len = (x >> 8) % sizeof(buf);
		for (size_t k = 0; k < len; k++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			buf[k] = (uint8_t)(k < 12 ? x % 4 : x);	/* small counts now and then */
		}
		struct wbuf b = { .p = buf, .len = len, .cap = len };
		sent++;
		struct tl_frame *f = tl_call(n, op, &b);
		if (!f)
			break;
		answered++;
		tl_frame_free(f);
	}
	CHECK(answered == sent, "every random frame answered (%d of %d)", answered, sent);
	printf("%d random frames answered\n", answered);
	tl_conn_close(n);
	still_serving("random bodies");
}

int main(void)
{
	tl_start_master(&M, "[cluster]\nmax_frame = 1M\n");
	struct tl_conn *node = tl_client(M.port, WIRE_ROLE_NODE, NULL, "h");
	REQUIRE(tl_mount(node, "seg", "h", 16 << 20, 1, 4096, NULL) > 0, "mount");
	closing_cases();
	reply_cases();
	random_cases();
	tl_conn_close(node);
	int st = tl_stop_master(&M);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "clean exit (%#x)", st);
	if (tl_failures)
		tl_dump_log(M.log);
	return tl_done();
}

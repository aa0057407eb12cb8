/* t_master_ns: namespaces. Over raw frames: a declaration creates one, the
 * same fields again succeed, other fields are refused with KVP_ENSMISMATCH
 * and a message naming both; keys of a namespace are refused to a
 * connection that did not declare it (put, get, exists, remove) while keys
 * outside every namespace are not; NS_LIST shows the fields and counts;
 * bad NS_DECLARE frames get an error and the master keeps serving. Then
 * through libkvpool: kvp_declare_namespace, a second handle with another
 * model refused, and a handle's declarations re-sent after a master
 * restart. */
#include "testlib.h"

static struct tl_master M;

struct decl {
	const char *name, *model, *dtype;
	uint32_t page_size;
	const char *layout;
	uint32_t tp;
};

static const struct decl LLAMA = { "llama8b", "meta-llama/Llama-3.1-8B", "bfloat16", 16, "NHD", 1 };
static const struct decl QWEN = { "llama8b", "Qwen/Qwen2-7B", "bfloat16", 16, "NHD", 2 };

/* NS_DECLARE: the body status (frame status when the frame failed); the
 * message into msg. */
static int declare(struct tl_conn *c, const struct decl *d, char *msg, size_t cap)
{
	struct wbuf b;
	struct rbuf r;
	size_t n;

	wb_init(&b);
	wb_cstr(&b, d->name);
	wb_cstr(&b, d->model);
	wb_cstr(&b, d->dtype);
	wb_u32(&b, d->page_size);
	wb_cstr(&b, d->layout);
	wb_u32(&b, d->tp);
	struct tl_frame *f = tl_call(c, WIRE_OP_NS_DECLARE, &b);
	wb_free(&b);
	REQUIRE(f, "NS_DECLARE reply");
	int st = f->h.status;
	if (!st) {
		rb_init(&r, f->body, f->h.body_len);
		st = rb_status(&r);
		rb_u64(&r);
		const uint8_t *m = rb_str(&r, &n);
		CHECK(rb_done(&r), "NS_DECLARE reply layout");
		snprintf(msg, cap, "%.*s", (int)n, m ? (const char *)m : "");
	}
	tl_frame_free(f);
	return st;
}

static void raw_frames(void)
{
	struct tl_conn *a = tl_client(M.port, WIRE_ROLE_CLIENT, NULL, "a");
	struct tl_conn *b = tl_client(M.port, WIRE_ROLE_CLIENT, NULL, "b");
	struct tl_conn *plain = tl_client(M.port, WIRE_ROLE_CLIENT, NULL, "plain");
	struct tl_obj o;
	char msg[1024];

	/* keys under a NAME/ that no one declared behave as before */
	CHECK_RC(tl_put1(plain, "llama8b/early", 100, &o), 0);
	CHECK_RC(tl_put1(plain, "flat-key", 10, &o), 0);

	CHECK_RC(declare(a, &LLAMA, msg, sizeof(msg)), 0);
	CHECK_RC(declare(a, &LLAMA, msg, sizeof(msg)), 0);	/* same again */
	CHECK_RC(declare(b, &LLAMA, msg, sizeof(msg)), 0);	/* same, other connection */
	struct tl_conn *q = tl_client(M.port, WIRE_ROLE_CLIENT, NULL, "qwen");
	CHECK_RC(declare(q, &QWEN, msg, sizeof(msg)), KVP_ENSMISMATCH);
	CHECK(strstr(msg, "meta-llama/Llama-3.1-8B") && strstr(msg, "Qwen/Qwen2-7B") &&
	      strstr(msg, "tp=1") && strstr(msg, "tp=2"), "message names both: %s", msg);

	/* declared: put, get, exists, remove work */
	CHECK_RC(tl_put1(a, "llama8b/blk-1", 4096, &o), 0);
	CHECK_RC(tl_get1(b, "llama8b/blk-1", &o), 0);
	CHECK_EQ(o.size, 4096);
	CHECK_RC(tl_exists(b, "llama8b/early"), 1);

	/* refused (q): every key op refused per item, reads too */
	CHECK_RC(tl_get1(q, "llama8b/blk-1", &o), KVP_ENSMISMATCH);
	CHECK_RC(tl_exists(q, "llama8b/missing"), KVP_ENSMISMATCH);
	CHECK_RC(tl_remove(q, "llama8b/blk-1", false), KVP_ENSMISMATCH);
	CHECK_RC(tl_put1(q, "llama8b/blk-2", 100, &o), KVP_ENSMISMATCH);
	/* never declared anything (plain: a tool, kvpool get, the FUSE view):
	 * reads pass, writes are refused */
	CHECK_RC(tl_get1(plain, "llama8b/blk-1", &o), 0);
	CHECK_EQ(o.size, 4096);
	CHECK_RC(tl_exists(plain, "llama8b/blk-1"), 1);
	CHECK_RC(tl_stat1(plain, "llama8b/blk-1", &o), 0);
	CHECK_RC(tl_put1(plain, "llama8b/blk-3", 100, &o), KVP_ENSMISMATCH);
	CHECK_RC(tl_remove(plain, "llama8b/blk-1", false), KVP_ENSMISMATCH);
	CHECK_RC(tl_pin(plain, "llama8b/blk-1", 1000), KVP_ENSMISMATCH);
	/* outside every namespace: as before */
	CHECK_RC(tl_exists(q, "flat-key"), 1);
	CHECK_RC(tl_put1(q, "qwen-flat/x", 10, &o), 0);
	CHECK_RC(tl_get1(plain, "qwen-flat/x", &o), 0);
	CHECK_RC(tl_exists(plain, "llama8bx/y"), 0);
	/* a name that is no namespace name ("bad name/"): no namespace */
	CHECK_RC(tl_exists(plain, "bad name/k"), 0);

	/* NS_LIST: fields, counts (the early key is counted too) */
	struct wbuf e;
	wb_init(&e);
	struct tl_frame *f = tl_call(plain, WIRE_OP_NS_LIST, &e);
	REQUIRE(f && f->h.status == 0, "NS_LIST");
	struct rbuf r;
	char name[256], model[512], dtype[128], layout[128];
	rb_init(&r, f->body, f->h.body_len);
	CHECK_EQ(rb_u32(&r), 1);
	rb_cstr(&r, name, sizeof(name));
	rb_cstr(&r, model, sizeof(model));
	rb_cstr(&r, dtype, sizeof(dtype));
	uint32_t ps = rb_u32(&r);
	rb_cstr(&r, layout, sizeof(layout));
	uint32_t tp = rb_u32(&r);
	rb_u64(&r);
	uint64_t keys = rb_u64(&r), bytes = rb_u64(&r);
	uint32_t clients = rb_u32(&r);
	CHECK(rb_done(&r), "NS_LIST layout");
	CHECK(!strcmp(name, "llama8b") && !strcmp(model, LLAMA.model) &&
	      !strcmp(dtype, "bfloat16") && !strcmp(layout, "NHD"), "fields");
	CHECK_EQ(ps, 16);
	CHECK_EQ(tp, 1);
	CHECK_EQ(keys, 2);
	CHECK_EQ(bytes, 4196);
	CHECK_EQ(clients, 2);
	tl_frame_free(f);

	/* a remove drops the counts; a closed connection its declaration */
	CHECK_RC(tl_remove(a, "llama8b/early", false), 0);
	tl_conn_close(b);

	/* bad fields: KVP_EINVAL in the body, the connection stays */
	struct decl bad = LLAMA;
	bad.name = "has space";
	CHECK_RC(declare(q, &bad, msg, sizeof(msg)), KVP_EINVAL);
	bad = LLAMA;
	bad.tp = 0;
	CHECK_RC(declare(q, &bad, msg, sizeof(msg)), KVP_EINVAL);
	bad = LLAMA;
	bad.dtype = "";
	CHECK_RC(declare(q, &bad, msg, sizeof(msg)), KVP_EINVAL);
	/* truncated bodies and trailing bytes: frame status EPROTO */
	struct wbuf t;
	wb_init(&t);
	wb_cstr(&t, "x");
	wb_u16(&t, 400);		/* model length past the end */
	f = tl_call(q, WIRE_OP_NS_DECLARE, &t);
	CHECK(f && f->h.status == KVP_EPROTO, "truncated NS_DECLARE: EPROTO");
	tl_frame_free(f);
	wb_reset(&t);
	f = tl_call(q, WIRE_OP_NS_DECLARE, &t);
	CHECK(f && f->h.status == KVP_EPROTO, "empty NS_DECLARE: EPROTO");
	tl_frame_free(f);
	wb_cstr(&t, "n");
	wb_cstr(&t, "m");
	wb_cstr(&t, "d");
	wb_u32(&t, 1);
	wb_cstr(&t, "l");
	wb_u32(&t, 1);
	wb_u8(&t, 0);			/* one byte too many */
	f = tl_call(q, WIRE_OP_NS_DECLARE, &t);
	CHECK(f && f->h.status == KVP_EPROTO, "trailing byte: EPROTO");
	tl_frame_free(f);
	wb_free(&t);
	/* still serving, on that connection and others */
	CHECK_RC(tl_exists(q, "flat-key"), 1);
	CHECK_RC(tl_get1(a, "llama8b/blk-1", &o), 0);
	CHECK(tl_alive(M.pid), "master alive");

	tl_conn_close(q);
	tl_conn_close(plain);
	tl_conn_close(a);
}

static struct kvp_ns api_ns(const struct decl *d)
{
	return (struct kvp_ns){ .name = "api", .model = d->model, .dtype = d->dtype,
				.page_size = d->page_size, .layout = d->layout, .tp = d->tp };
}

static void through_libkvpool(void)
{
	struct tl_pool *p = tl_pool_start(1, 32, NULL);
	int err;
	struct kvp *k1 = tl_pool_open(p, NULL, &err), *k2 = tl_pool_open(p, NULL, &err);
	REQUIRE(k1 && k2, "open: %s", kvp_strerror(err));
	struct kvp_ns n1 = api_ns(&LLAMA), n2 = api_ns(&QWEN);
	char msg[1024], buf[64];

	CHECK_RC(kvp_declare_namespace(k1, &n1), 0);
	CHECK_RC(kvp_put(k1, "api/one", "hello", 5), 0);
	CHECK_RC(kvp_declare_namespace_msg(k2, &n2, msg, sizeof(msg)), KVP_ENSMISMATCH);
	CHECK(strstr(msg, "Qwen/Qwen2-7B") != NULL, "msg: %s", msg);
	CHECK_RC(kvp_get_into(k2, "api/one", buf, sizeof(buf)), KVP_ENSMISMATCH);
	CHECK_RC(kvp_put(k2, "api/two", "x", 1), KVP_ENSMISMATCH);
	CHECK_RC(kvp_put(k2, "elsewhere", "x", 1), 0);
	/* the same fields: reads the bytes */
	CHECK_RC(kvp_declare_namespace(k2, &n1), 0);
	CHECK_RC(kvp_get_into(k2, "api/one", buf, sizeof(buf)), 5);
	CHECK(memcmp(buf, "hello", 5) == 0, "bytes");
	struct kvp_ns bad = n1;
	bad.name = "a/b";
	CHECK_RC(kvp_declare_namespace(k2, &bad), KVP_EINVAL);

	struct kvp_ns_info *v;
	size_t n;
	CHECK_RC(kvp_namespaces(k1, &v, &n), 0);
	CHECK_EQ(n, 1);
	if (n == 1) {
		CHECK(!strcmp(v[0].name, "api") && !strcmp(v[0].model, LLAMA.model), "info");
		CHECK_EQ(v[0].keys, 1);
		CHECK_EQ(v[0].bytes, 5);
	}
	kvp_free(v);

	/* master restart: the namespace comes back with k1's next call (its
	 * new connection re-declares), and still refuses the other model */
	tl_pool_kill(&p->master, SIGKILL);
	tl_pool_start_master(p);
	CHECK(tl_pool_wait_nodes(p, 1, 20) == 1, "node re-mounted");
	int rc = -1;
	for (int i = 0; i < 100 && rc != 0; i++) {
		rc = kvp_namespaces(k1, &v, &n);	/* a master call: re-declares */
		if (rc == 0)
			kvp_free(v);
		else
			tl_sleep_ms(100);
	}
	CHECK_RC(rc, 0);
	CHECK_EQ(n, 1);
	CHECK_RC(kvp_get_into(k1, "api/one", buf, sizeof(buf)), 5);
	struct kvp *k3 = tl_pool_open(p, NULL, &err);
	REQUIRE(k3, "open k3");
	CHECK_RC(kvp_declare_namespace(k3, &n2), KVP_ENSMISMATCH);
	CHECK_RC(kvp_exists(k3, "api/one"), KVP_ENSMISMATCH);
	kvp_close(k3);

	/* the other way round: k2 (declared llama earlier) and a restart where
	 * a qwen handle declares first: k2's re-declaration is refused, its
	 * namespaced keys too, its other keys still work */
	tl_pool_kill(&p->master, SIGKILL);
	tl_pool_start_master(p);
	CHECK(tl_pool_wait_nodes(p, 1, 20) == 1, "node re-mounted");
	struct kvp *kq = tl_pool_open(p, NULL, &err);
	REQUIRE(kq, "open kq");
	rc = -1;
	for (int i = 0; i < 100 && rc != 0; i++) {
		rc = kvp_declare_namespace(kq, &n2);
		if (rc)
			tl_sleep_ms(100);
	}
	CHECK_RC(rc, 0);
	rc = -1;
	for (int i = 0; i < 100 && rc != 1; i++) {
		rc = kvp_exists(k2, "elsewhere");
		if (rc != 1)
			tl_sleep_ms(100);
	}
	CHECK_RC(rc, 1);
	CHECK_RC(kvp_put(k2, "api/three", "x", 1), KVP_ENSMISMATCH);
	CHECK_RC(kvp_put(kq, "api/three", "q", 1), 0);
	kvp_close(kq);
	kvp_close(k2);
	kvp_close(k1);
}

int main(void)
{
	tl_arm_cleanup();
	tl_start_master(&M, NULL);
	uint8_t secret[WIRE_SECRET_LEN];
	struct tl_conn *node = tl_client(M.port, WIRE_ROLE_NODE, NULL, "n");
	REQUIRE(tl_mount(node, "n1", "h1", 64u << 20, 77, 4096, secret) > 0, "mount");
	raw_frames();
	if (tl_failures)
		tl_dump_log(M.log);
	tl_conn_close(node);
	tl_stop_master(&M);
	through_libkvpool();
	return tl_done();
}

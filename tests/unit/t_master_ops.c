/* t_master_ops: every master opcode and its errors, against a real
 * kvpool-master on private ports (a fake node mounts segments). */
#include "testlib.h"

#include "extent.h"
#include "grant.h"

#define SEG_SIZE (1u << 20)
#define ALIGN 4096

static struct tl_master M;

static uint64_t ext_len(const char *key, uint64_t vlen)
{
	uint64_t n = ext_size((uint32_t)strlen(key), vlen);

	return (n + ALIGN - 1) / ALIGN * ALIGN;
}

static void test_hello_and_segments(struct tl_conn *node, uint32_t seg1, uint32_t seg2,
				    const uint8_t *secret)
{
	struct tl_frame *f = tl_call(node, WIRE_OP_SEGMENTS, NULL);

	REQUIRE(f && f->h.status == 0, "SEGMENTS");
	struct rbuf r;
	size_t n;
	rb_init(&r, f->body, f->h.body_len);
	CHECK_EQ(rb_u32(&r), 2);
	for (int i = 0; i < 2; i++) {
		uint32_t id = rb_u32(&r);
		CHECK(id == seg1 || id == seg2, "segment id %u", id);
		const uint8_t *name = rb_str(&r, &n);
		CHECK(n == 2 && name[0] == 's', "name");
		rb_str(&r, &n);			/* host_id */
		const uint8_t *path = rb_str(&r, &n);
		CHECK(n > 9 && memcmp(path, "/dev/shm/", 9) == 0, "shm_path");
		rb_u64(&r);			/* dev */
		rb_u64(&r);			/* ino */
		CHECK_EQ(rb_u64(&r), SEG_SIZE);
		rb_u64(&r);			/* uuid */
		rb_str(&r, &n);			/* endpoint */
		rb_blob(&r, &n);		/* rdma */
		CHECK_EQ(rb_u8(&r), 0);		/* draining */
		CHECK_EQ(rb_u64(&r), 0);	/* used */
		CHECK_EQ(rb_u64(&r), 0);	/* objects */
		rb_u64(&r);
		rb_u64(&r);
		CHECK_EQ(rb_i32(&r), -1);	/* numa */
	}
	CHECK(rb_done(&r), "SEGMENTS body fully consumed");
	tl_frame_free(f);
	(void)secret;
}

static void test_put_get(struct tl_conn *c, const uint8_t *secret, uint32_t seg1)
{
	struct tl_obj o, g;

	/* PUT_START -> extent, generation, grant */
	CHECK_EQ(tl_put_start1(c, "alpha", 1000, 1, seg1, &o), 0);
	CHECK_EQ(o.nrep, 1);
	CHECK_EQ(o.rep[0].seg, seg1);			/* preferred segment honoured */
	CHECK_EQ(o.rep[0].len, ext_len("alpha", 1000));
	CHECK(o.rep[0].off >= ALIGN && o.rep[0].off % ALIGN == 0, "offset %llu",
	      (unsigned long long)o.rep[0].off);
	CHECK(grant_ok(secret, o.rep[0].seg, o.generation, o.rep[0].off, o.rep[0].len,
		       c->epoch, o.rep[0].grant), "grant verifies with the segment secret");
	CHECK(!grant_ok(secret, o.rep[0].seg, o.generation, o.rep[0].off, o.rep[0].len,
			c->epoch + 1, o.rep[0].grant), "a grant names its master's epoch");
	/* invisible until PUT_END */
	CHECK_EQ(tl_exists(c, "alpha"), 0);
	CHECK_EQ(tl_get1(c, "alpha", &g), KVP_ENOTFOUND);
	CHECK_EQ(tl_stat1(c, "alpha", &g), KVP_ENOTFOUND);
	/* duplicate PUT_START of a pending key */
	struct tl_obj o2;
	CHECK_EQ(tl_put_start1(c, "alpha", 1000, 1, 0, &o2), KVP_EEXIST);
	/* PUT_END with a wrong generation */
	CHECK_EQ(tl_put_end1(c, "alpha", o.generation + 1, 42), KVP_ESTALE);
	CHECK_EQ(tl_put_end1(c, "alpha", o.generation, 42), 0);
	CHECK_EQ(tl_put_end1(c, "alpha", o.generation, 42), 0);	/* retried: idempotent */
	CHECK_EQ(tl_put_end1(c, "nokey", 1, 42), KVP_ENOTFOUND);
	/* duplicate of a complete key */
	CHECK_EQ(tl_put_start1(c, "alpha", 1000, 1, 0, &o2), KVP_EEXIST);

	CHECK_EQ(tl_exists(c, "alpha"), 1);
	CHECK_EQ(tl_get1(c, "alpha", &g), 0);
	CHECK_EQ(g.size, 1000);
	CHECK_EQ(g.generation, o.generation);
	CHECK_EQ(g.checksum, 42);
	CHECK_EQ(g.lease_ms, 5000);
	CHECK_EQ(g.nrep, 1);
	CHECK_EQ(g.rep[0].seg, o.rep[0].seg);
	CHECK_EQ(g.rep[0].off, o.rep[0].off);
	CHECK_EQ(g.rep[0].len, o.rep[0].len);
	CHECK_EQ(g.rep[0].tier, 0);

	/* SIZE */
	const char *keys[] = { "alpha", "nokey", "" };
	struct tl_frame *f = tl_keys_call(c, WIRE_OP_SIZE, NULL, 3, keys);
	REQUIRE(f && f->h.status == 0, "SIZE");
	struct rbuf r;
	rb_init(&r, f->body, f->h.body_len);
	CHECK_EQ(rb_u32(&r), 3);
	CHECK_EQ(rb_status(&r), 0);
	CHECK_EQ(rb_u64(&r), 1000);
	CHECK_EQ(rb_status(&r), KVP_ENOTFOUND);
	CHECK_EQ(rb_u64(&r), 0);
	CHECK_EQ(rb_status(&r), KVP_EKEY);
	CHECK_EQ(rb_u64(&r), 0);
	CHECK(rb_done(&r), "SIZE body");
	tl_frame_free(f);

	/* EXISTS batch */
	int res[3];
	CHECK_EQ(tl_i32_reply(tl_keys_call(c, WIRE_OP_EXISTS, NULL, 3, keys), 3, res), 0);
	CHECK_EQ(res[0], 1);
	CHECK_EQ(res[1], 0);
	CHECK_EQ(res[2], KVP_EKEY);

	/* STAT: lease from the GET above, no pin */
	CHECK_EQ(tl_stat1(c, "alpha", &g), 0);
	CHECK_EQ(g.size, 1000);
	CHECK(g.lease_left_ms > 0 && g.lease_left_ms <= 5000, "lease %lld", (long long)g.lease_left_ms);
	CHECK_EQ(g.pin_ms, 0);
	CHECK(g.put_time_ns > 1600000000ull * 1000000000ull, "put_time is wall clock");
	CHECK(g.access_time_ns >= g.put_time_ns - 1000000000ull, "access time");

	/* PIN */
	CHECK_EQ(tl_pin(c, "alpha", 60000), 0);
	CHECK_EQ(tl_stat1(c, "alpha", &g), 0);
	CHECK(g.pin_ms > 59000 && g.pin_ms <= 61000, "pin %lld (1 s granularity)", (long long)g.pin_ms);
	CHECK_EQ(tl_pin(c, "alpha", 0), 0);
	CHECK_EQ(tl_stat1(c, "alpha", &g), 0);
	CHECK_EQ(g.pin_ms, 0);
	CHECK_EQ(tl_pin(c, "nokey", 1000), KVP_ENOTFOUND);

	/* REMOVE: leased (GET above) -> ELEASED, force works */
	CHECK_EQ(tl_remove(c, "alpha", false), KVP_ELEASED);
	CHECK_EQ(tl_remove(c, "alpha", true), 0);
	CHECK_EQ(tl_exists(c, "alpha"), 0);
	CHECK_EQ(tl_remove(c, "alpha", true), KVP_ENOTFOUND);

	/* PUT_REVOKE */
	CHECK_EQ(tl_put_start1(c, "beta", 10, 1, 0, &o), 0);
	CHECK_EQ(tl_put_revoke1(c, "beta", o.generation + 1), KVP_ESTALE);
	CHECK_EQ(tl_put_revoke1(c, "beta", o.generation), 0);
	CHECK_EQ(tl_put_revoke1(c, "beta", o.generation), KVP_ENOTFOUND);
	CHECK_EQ(tl_put_start1(c, "beta", 10, 1, 0, &o), 0);	/* key free again */
	CHECK_EQ(tl_put_end1(c, "beta", o.generation, 1), 0);
	CHECK_EQ(tl_put_revoke1(c, "beta", o.generation), KVP_EINVAL);	/* complete */

	/* bad PUT_START items */
	CHECK_EQ(tl_put_start1(c, "zero", 0, 1, 0, &o), KVP_EINVAL);
	CHECK_EQ(tl_put_start1(c, "huge", 2ull << 30, 1, 0, &o), KVP_ETOOBIG);
	CHECK_EQ(tl_put_start1(c, "", 10, 1, 0, &o), KVP_EKEY);
	CHECK_EQ(tl_put_start1(c, "many", 10, 9, 0, &o), KVP_EINVAL);
	CHECK_EQ(tl_put_start1(c, "nospace", SEG_SIZE, 1, 0, &o), KVP_ENOSPC);

	/* two replicas land on distinct segments */
	CHECK_EQ(tl_put_start1(c, "two", 100, 2, 0, &o), 0);
	CHECK_EQ(o.nrep, 2);
	CHECK(o.rep[0].seg != o.rep[1].seg, "replicas on distinct segments");
	CHECK_EQ(tl_put_end1(c, "two", o.generation, 7), 0);
	CHECK_EQ(tl_get1(c, "two", &g), 0);
	CHECK_EQ(g.nrep, 2);
	/* three asked, two segments: best effort, two */
	CHECK_EQ(tl_put_start1(c, "three", 100, 3, 0, &o), 0);
	CHECK_EQ(o.nrep, 2);
	CHECK_EQ(tl_put_revoke1(c, "three", o.generation), 0);

	/* WIRE_SEG_LOCAL prefers the client's host ("host-b" = s2) */
	struct tl_conn *cb = tl_client(M.port, WIRE_ROLE_CLIENT, NULL, "host-b");
	for (int i = 0; i < 5; i++) {
		char k[32];
		snprintf(k, sizeof(k), "local%d", i);
		CHECK_EQ(tl_put_start1(cb, k, 100, 1, WIRE_SEG_LOCAL, &o), 0);
		CHECK(o.nrep == 1 && o.rep[0].seg != seg1, "local put on the client's host");
		CHECK_EQ(tl_put_revoke1(cb, k, o.generation), 0);
	}
	tl_conn_close(cb);

	/* batch PUT_START with a duplicate inside: the second gets EEXIST */
	const char *bk[] = { "b1", "b2", "b1" };
	uint64_t bs[] = { 10, 20, 30 };
	struct tl_obj bo[3];
	CHECK_EQ(tl_put_start(c, 1, 0, 3, bk, bs, bo), 0);
	CHECK_EQ(bo[0].status, 0);
	CHECK_EQ(bo[1].status, 0);
	CHECK_EQ(bo[2].status, KVP_EEXIST);
	CHECK(bo[1].generation > bo[0].generation, "generations grow");
	CHECK_EQ(tl_put_end1(c, "b1", bo[0].generation, 1), 0);
	CHECK_EQ(tl_put_end1(c, "b2", bo[1].generation, 2), 0);
}

static void test_prefix_list_info(struct tl_conn *c)
{
	struct tl_obj o;
	char k[64];

	for (int i = 0; i < 10; i++) {
		snprintf(k, sizeof(k), "dir/%d", i);
		CHECK_EQ(tl_put1(c, k, 100, &o), 0);
	}
	snprintf(k, sizeof(k), "dir/pending");
	CHECK_EQ(tl_put_start1(c, k, 100, 1, 0, &o), 0);

	char *names[64];
	int isp[64];
	size_t n;
	char *next;
	CHECK_EQ(tl_list(c, "dir/", "", "", 0, names, isp, 64, &n, &next), 0);
	CHECK_EQ(n, 10);			/* the pending key is invisible */
	CHECK_EQ(strlen(next), 0);
	for (size_t i = 0; i < n; i++) {
		snprintf(k, sizeof(k), "dir/%zu", i);
		CHECK(strcmp(names[i], k) == 0, "%s != %s", names[i], k);
		free(names[i]);
	}
	free(next);

	struct tl_info info;
	CHECK_EQ(tl_info(c, &info), 0);
	CHECK_EQ(info.keys, 14);		/* dir/0..9, beta, two, b1, b2 */

	/* REMOVE_PREFIX: pending keys are not touched */
	struct wbuf b;
	wb_init(&b);
	wb_cstr(&b, "dir/");
	wb_u8(&b, 0);
	struct tl_frame *f = tl_call(c, WIRE_OP_REMOVE_PREFIX, &b);
	wb_free(&b);
	REQUIRE(f && f->h.status == 0, "REMOVE_PREFIX");
	struct rbuf r;
	rb_init(&r, f->body, f->h.body_len);
	CHECK_EQ(rb_u64(&r), 10);
	tl_frame_free(f);
	CHECK_EQ(tl_exists(c, "dir/3"), 0);
	CHECK_EQ(tl_put_end1(c, "dir/pending", o.generation, 1), 0);
	CHECK_EQ(tl_exists(c, "dir/pending"), 1);

	/* empty prefix = all (force: "two" holds a lease from a GET) */
	wb_init(&b);
	wb_cstr(&b, "");
	wb_u8(&b, 1);
	f = tl_call(c, WIRE_OP_REMOVE_PREFIX, &b);
	wb_free(&b);
	REQUIRE(f && f->h.status == 0, "REMOVE_PREFIX all");
	rb_init(&r, f->body, f->h.body_len);
	uint64_t removed = rb_u64(&r);
	CHECK(removed >= 4, "removed %llu", (unsigned long long)removed);
	tl_frame_free(f);
	CHECK_EQ(tl_info(c, &info), 0);
	CHECK_EQ(info.keys, 0);
	CHECK(info.capacity == 2ull * (SEG_SIZE - ALIGN), "capacity %llu",
	      (unsigned long long)info.capacity);
}

static void test_node_ops(struct tl_conn *node, struct tl_conn *c, uint32_t seg1)
{
	struct tl_obj o;

	/* node-only ops from a client role */
	CHECK_EQ(tl_heartbeat(c, seg1), KVP_EPROTO);
	/* heartbeat of an unknown segment / someone else's */
	CHECK_EQ(tl_heartbeat(node, 9999), KVP_ENOSEG);
	CHECK_EQ(tl_heartbeat(node, seg1), 0);
	struct tl_conn *other = tl_client(M.port, WIRE_ROLE_NODE, NULL, "host-x");
	CHECK_EQ(tl_heartbeat(other, seg1), KVP_ENOSEG);
	CHECK_EQ(tl_unmount(other, seg1, false), KVP_ENOSEG);
	/* bad MOUNT geometry */
	CHECK_EQ(tl_mount(other, "bad", "h", SEG_SIZE, 77, 100, NULL), KVP_EINVAL);
	CHECK_EQ(tl_mount(other, "bad", "h", 1000, 77, 4096, NULL), KVP_EINVAL);
	tl_conn_close(other);

	/* drain: no new allocations there, objects stay readable */
	CHECK_EQ(tl_put_start1(c, "ondrain", 100, 1, seg1, &o), 0);
	CHECK_EQ(o.rep[0].seg, seg1);
	CHECK_EQ(tl_put_end1(c, "ondrain", o.generation, 1), 0);
	CHECK_EQ(tl_unmount(node, seg1, true), 0);
	for (int i = 0; i < 8; i++) {
		char k[32];
		snprintf(k, sizeof(k), "afterdrain%d", i);
		CHECK_EQ(tl_put_start1(c, k, 100, 1, seg1, &o), 0);
		CHECK(o.rep[0].seg != seg1, "no allocation on a draining segment");
	}
	CHECK_EQ(tl_exists(c, "ondrain"), 1);
	/* drain 0 drops it: its objects go */
	CHECK_EQ(tl_unmount(node, seg1, false), 0);
	CHECK_EQ(tl_exists(c, "ondrain"), 0);
	CHECK_EQ(tl_heartbeat(node, seg1), KVP_ENOSEG);
}

int main(void)
{
	uint8_t secret1[WIRE_SECRET_LEN], secret2[WIRE_SECRET_LEN];

	tl_start_master(&M, "[cluster]\nmax_batch = 64\n");
	struct tl_conn *node = tl_client(M.port, WIRE_ROLE_NODE, NULL, "host-a");
	node->auto_free = true;
	struct tl_conn *node2 = tl_client(M.port, WIRE_ROLE_NODE, NULL, "host-b");
	node2->auto_free = true;
	int64_t seg1 = tl_mount(node, "s1", "host-a", SEG_SIZE, 0x1111, ALIGN, secret1);
	int64_t seg2 = tl_mount(node2, "s2", "host-b", SEG_SIZE, 0x2222, ALIGN, secret2);
	REQUIRE(seg1 > 0 && seg2 > 0 && seg1 != seg2, "MOUNT: %lld %lld", (long long)seg1,
		(long long)seg2);
	CHECK(memcmp(secret1, secret2, WIRE_SECRET_LEN) != 0, "distinct grant secrets");

	struct tl_conn *c = tl_client(M.port, WIRE_ROLE_CLIENT, NULL, "host-c");
	test_hello_and_segments(c, (uint32_t)seg1, (uint32_t)seg2, secret1);
	test_put_get(c, secret1, (uint32_t)seg1);
	test_prefix_list_info(c);
	test_node_ops(node, c, (uint32_t)seg1);

	/* batch over cluster.max_batch -> frame-level ELIMIT; still serving */
	const char *many[65];
	for (int i = 0; i < 65; i++)
		many[i] = "k";
	int res[65];
	CHECK_EQ(tl_i32_reply(tl_keys_call(c, WIRE_OP_EXISTS, NULL, 65, many), 65, res), KVP_ELIMIT);
	CHECK_EQ(tl_exists(c, "k"), 0);

	/* FREE/READ/WRITE are not master requests */
	struct tl_frame *f = tl_call(c, WIRE_OP_READ, NULL);
	CHECK(f && f->h.status == KVP_EPROTO, "READ to the master -> EPROTO");
	tl_frame_free(f);

	tl_conn_close(c);
	tl_conn_close(node);
	tl_conn_close(node2);
	int st = tl_stop_master(&M);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "SIGTERM: clean exit (status %#x)", st);
	if (tl_failures)
		tl_dump_log(M.log);
	return tl_done();
}

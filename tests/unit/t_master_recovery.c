/* t_master_recovery: REPORT adoption (after a master restart), replicas
 * merged across segments, conflicting reports resolved by generation,
 * re-mount of a known segment (extents freed but not acknowledged are
 * rejected), and FREE: sent to the node for removed objects, the space
 * reused only after the node's reply; nothing is allocated in a segment
 * before the HEARTBEAT that follows its REPORTs, and a put that comes
 * first waits for it rather than failing, or (asking for more replicas
 * than the reported segments give) rather than keeping fewer. */
#include "testlib.h"

#include "extent.h"

#define ALIGN 4096
#define SEG_SIZE (64 * ALIGN)

static struct tl_extent ext(const char *key, uint64_t off, uint64_t vlen, uint64_t csum,
			    uint64_t gen)
{
	uint64_t len = (ext_size((uint32_t)strlen(key), vlen) + ALIGN - 1) / ALIGN * ALIGN;

	return (struct tl_extent){ key, 0, off, len, vlen, csum, gen, 1700000000000000000ull };
}

/* Reads one FREE request from the node connection: its segment and the
 * number of extents; offs[] gets their offsets. The frame is returned for
 * tl_reply (or NULL). */
static struct tl_frame *read_free(struct tl_conn *n, uint32_t *seg, uint64_t *offs, uint32_t *cnt)
{
	struct tl_frame *f = tl_next_request(n, 3000);

	*cnt = 0;
	if (!f || f->h.opcode != WIRE_OP_FREE) {
		tl_frame_free(f);
		return NULL;
	}
	struct rbuf r;
	rb_init(&r, f->body, f->h.body_len);
	*seg = rb_u32(&r);
	uint32_t n_ = rb_u32(&r);
	for (uint32_t i = 0; i < n_ && rb_ok(&r); i++) {
		rb_u8(&r);
		uint64_t off = rb_u64(&r);
		rb_u64(&r);
		if (i < 16)
			offs[i] = off;
	}
	*cnt = n_;
	CHECK(rb_done(&r), "FREE body");
	return f;
}

static void test_adopt_after_restart(void)
{
	struct tl_master m;
	struct tl_obj g;
	uint32_t adopted, rejected;

	tl_start_master(&m, NULL);
	struct tl_conn *a = tl_client(m.port, WIRE_ROLE_NODE, NULL, "ha");
	struct tl_conn *b = tl_client(m.port, WIRE_ROLE_NODE, NULL, "hb");
	int64_t sa = tl_mount(a, "na", "ha", SEG_SIZE, 0xa, ALIGN, NULL);
	int64_t sb = tl_mount(b, "nb", "hb", SEG_SIZE, 0xb, ALIGN, NULL);
	REQUIRE(sa > 0 && sb > 0, "mount");
	uint64_t big_gen = 1ull << 60;

	struct tl_extent ea[] = {
		ext("shared", ALIGN, 1000, 0x5a5a, 100),	/* also on b, same value */
		ext("only-a", 2 * ALIGN, 5000, 0x1, 101),	/* 2 blocks */
		ext("conflict", 4 * ALIGN, 10, 0xaaaa, 200),	/* b has it newer */
		ext("newer-a", 5 * ALIGN, 10, 0xcccc, big_gen),	/* a's is newer */
		ext("overlap", 5 * ALIGN, 10, 0x2, 102),	/* same offset as newer-a */
		ext("", 6 * ALIGN, 10, 0x3, 103),		/* bad key */
	};
	CHECK_EQ(tl_report(a, (uint32_t)sa, 6, ea, &adopted, &rejected), 0);
	CHECK_EQ(adopted, 4);
	CHECK_EQ(rejected, 2);

	struct tl_extent eb[] = {
		ext("shared", 10 * ALIGN, 1000, 0x5a5a, 100),
		ext("conflict", 11 * ALIGN, 10, 0xbbbb, 300),
		ext("newer-a", 12 * ALIGN, 10, 0xdddd, 50),
	};
	a->auto_free = false;
	CHECK_EQ(tl_report(b, (uint32_t)sb, 3, eb, &adopted, &rejected), 0);
	CHECK_EQ(adopted, 2);				/* shared, conflict */
	CHECK_EQ(rejected, 1);				/* newer-a (older generation) */

	struct tl_conn *c = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "hc");
	CHECK_EQ(tl_get1(c, "shared", &g), 0);
	CHECK_EQ(g.nrep, 2);				/* same checksum: two replicas */
	CHECK_EQ(g.size, 1000);
	CHECK_EQ(g.generation, 100);
	CHECK_EQ(g.checksum, 0x5a5a);
	bool on_a = false, on_b = false;
	for (unsigned i = 0; i < g.nrep; i++) {
		on_a |= g.rep[i].seg == sa && g.rep[i].off == ALIGN;
		on_b |= g.rep[i].seg == sb && g.rep[i].off == 10 * ALIGN;
	}
	CHECK(on_a && on_b, "replicas at the reported places");
	CHECK_EQ(tl_get1(c, "only-a", &g), 0);
	CHECK_EQ(g.nrep, 1);
	CHECK_EQ(g.rep[0].len, 2 * ALIGN);
	CHECK_EQ(tl_get1(c, "conflict", &g), 0);
	CHECK_EQ(g.generation, 300);			/* b's newer value won */
	CHECK_EQ(g.checksum, 0xbbbb);
	CHECK_EQ(g.nrep, 1);
	CHECK_EQ(g.rep[0].seg, sb);
	CHECK_EQ(tl_get1(c, "newer-a", &g), 0);
	CHECK_EQ(g.generation, big_gen);
	CHECK_EQ(g.rep[0].seg, sa);
	CHECK_EQ(tl_exists(c, "overlap"), 0);

	/* the losers got FREEs: a for its "conflict" (and the bad key), b
	 * for its "newer-a" */
	uint32_t seg, cnt;
	uint64_t offs[16];
	int seen_conflict = 0;
	struct tl_frame *f;
	while ((f = read_free(a, &seg, offs, &cnt))) {
		CHECK_EQ(seg, sa);
		for (uint32_t i = 0; i < cnt && i < 16; i++)
			seen_conflict += offs[i] == 4 * ALIGN;
		tl_reply(a, f, 0, NULL, 0);
		tl_frame_free(f);
		if (seen_conflict)
			break;
	}
	CHECK_EQ(seen_conflict, 1);
	f = read_free(b, &seg, offs, &cnt);
	CHECK(f && seg == sb && cnt == 1 && offs[0] == 12 * ALIGN, "FREE of b's stale newer-a");
	if (f)
		tl_reply(b, f, 0, NULL, 0);
	tl_frame_free(f);

	/* reported generations raise the counter */
	struct tl_obj o;
	CHECK_EQ(tl_put_start1(c, "fresh", 10, 1, 0, &o), 0);
	CHECK(o.generation > big_gen, "generation %llu above the reported %llu",
	      (unsigned long long)o.generation, (unsigned long long)big_gen);
	CHECK(!(o.rep[0].seg == sa && o.rep[0].off == ALIGN) &&
	      !(o.rep[0].seg == sb && o.rep[0].off == 10 * ALIGN),
	      "no allocation over adopted extents");
	CHECK_EQ(tl_put_revoke1(c, "fresh", o.generation), 0);

	/* master restart: the nodes re-mount and re-report, objects come back */
	tl_conn_close(c);
	tl_conn_close(a);
	tl_conn_close(b);
	int st = tl_stop_master(&m);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "clean exit");
	tl_start_master(&m, NULL);
	a = tl_client(m.port, WIRE_ROLE_NODE, NULL, "ha");
	sa = tl_mount(a, "na", "ha", SEG_SIZE, 0xa, ALIGN, NULL);
	REQUIRE(sa > 0, "mount after restart");
	CHECK_EQ(tl_report(a, (uint32_t)sa, 2, ea, &adopted, &rejected), 0);
	CHECK_EQ(adopted, 2);
	c = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "hc");
	CHECK_EQ(tl_get1(c, "only-a", &g), 0);
	CHECK_EQ(g.generation, 101);
	CHECK_EQ(tl_exists(c, "shared"), 1);
	tl_conn_close(c);
	tl_conn_close(a);
	tl_stop_master(&m);
}

static void test_free_and_remount(void)
{
	struct tl_master m;
	uint32_t adopted, rejected, seg, cnt;
	uint64_t offs[16];
	struct tl_obj o, g;

	/* a 3-block segment (2 usable), no background eviction */
	tl_start_master(&m, "[master]\neviction_high_watermark = 1.0\nlease_ttl = 100ms\n");
	struct tl_conn *n = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	int64_t s = tl_mount(n, "small", "h", 3 * ALIGN, 0x5, ALIGN, NULL);
	REQUIRE(s > 0, "mount");
	struct tl_conn *c = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "h");
	uint64_t vlen = 2 * ALIGN - 64 - 1;
	CHECK_EQ(tl_put1(c, "a", vlen, &o), 0);
	uint64_t off_a = o.rep[0].off;

	/* REMOVE sends a FREE; the space is not reused before the reply */
	CHECK_EQ(tl_remove(c, "a", false), 0);
	struct tl_frame *fr = read_free(n, &seg, offs, &cnt);
	REQUIRE(fr, "FREE for the removed object");
	CHECK(seg == s && cnt == 1 && offs[0] == off_a, "FREE names a's extent");
	struct tl_info info;
	CHECK_EQ(tl_info(c, &info), 0);
	CHECK_EQ(info.bytes_used, 2 * ALIGN);		/* still taken */
	/* a PUT_START now waits (parked) for the ack */
	struct wbuf b;
	wb_init(&b);
	tl_wb_put_prefix(&b, 1, 0, 0, 0);
	wb_u32(&b, 1);
	wb_cstr(&b, "b");
	wb_u64(&b, vlen);
	CHECK_EQ(tl_send_frame(c, WIRE_OP_PUT_START, 0, 0, 777, b.p, b.len), 0);
	wb_free(&b);
	struct tl_frame *early;
	CHECK_EQ(tl_read_frame(c, &early, 300), -ETIMEDOUT);	/* no answer yet */
	tl_frame_free(early);
	CHECK_EQ(tl_reply(n, fr, 0, NULL, 0), 0);
	tl_frame_free(fr);
	struct tl_frame *rep = tl_wait_reply(c, 777);
	REQUIRE(rep && rep->h.status == 0, "PUT_START reply after the ack");
	struct rbuf r;
	rb_init(&r, rep->body, rep->h.body_len);
	CHECK_EQ(rb_u32(&r), 1);
	CHECK_EQ(rb_status(&r), 0);
	uint64_t gen_b = rb_u64(&r);
	CHECK_EQ(rb_u8(&r), 1);
	CHECK_EQ(rb_u32(&r), s);
	CHECK_EQ(rb_u64(&r), off_a);			/* a's space, reused */
	tl_frame_free(rep);
	CHECK_EQ(tl_put_end1(c, "b", gen_b, 9), 0);

	/* a FREE the node never acknowledged ... */
	CHECK_EQ(tl_remove(c, "b", false), 0);
	fr = read_free(n, &seg, offs, &cnt);
	REQUIRE(fr && cnt == 1 && offs[0] == off_a, "FREE for b");
	tl_frame_free(fr);				/* not answered */
	tl_conn_close(n);

	/* ... the node reconnects and re-mounts the same segment (same uuid):
	 * b was freed by the master, so its report is rejected and FREEd
	 * again; "c" (an extent the master never saw) is adopted */
	n = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	int64_t s2 = tl_mount(n, "small", "h", 3 * ALIGN, 0x5, ALIGN, NULL);
	CHECK_EQ(s2, s);				/* the same segment id */
	struct tl_extent e[] = {
		{ "b", 0, off_a, 2 * ALIGN, vlen, 9, gen_b, 1 },
	};
	CHECK_EQ(tl_report(n, (uint32_t)s2, 1, e, &adopted, &rejected), 0);
	CHECK_EQ(adopted, 0);
	CHECK_EQ(rejected, 1);
	CHECK_EQ(tl_exists(c, "b"), 0);
	fr = read_free(n, &seg, offs, &cnt);
	CHECK(fr && cnt == 1 && offs[0] == off_a, "FREE for the rejected b");
	if (fr)
		tl_reply(n, fr, 0, NULL, 0);
	tl_frame_free(fr);
	/* the same report again (after the ack) is adopted: the reject is spent */
	CHECK_EQ(tl_report(n, (uint32_t)s2, 1, e, &adopted, &rejected), 0);
	CHECK_EQ(adopted, 1);
	CHECK_EQ(tl_get1(c, "b", &g), 0);
	CHECK_EQ(g.rep[0].off, off_a);

	tl_conn_close(c);
	tl_conn_close(n);
	tl_stop_master(&m);
	if (tl_failures)
		tl_dump_log(m.log);
}

/* A segment takes new extents only once its node has said all it holds
 * (the HEARTBEAT right behind its REPORTs): a PUT_START before that waits. */
static void test_alloc_after_reports(void)
{
	struct tl_master m;
	struct wbuf b;

	tl_start_master(&m, NULL);
	struct tl_conn *node = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	struct tl_conn *c = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "h");
	tl_mount_quiet = true;
	int64_t sid = tl_mount(node, "quiet", "h", SEG_SIZE, 77, ALIGN, NULL);
	tl_mount_quiet = false;
	REQUIRE(sid > 0, "mount");
	/* a REPORT of an object at the first free offset */
	struct tl_extent e = ext("rep/k", ALIGN, 1000, 5, 9);
	uint32_t adopted = 0;
	CHECK_EQ(tl_report(node, (uint32_t)sid, 1, &e, &adopted, NULL), 0);
	CHECK_EQ(adopted, 1);
	wb_init(&b);
	tl_wb_put_prefix(&b, 1, 0, 0, 0);
	wb_u32(&b, 1);
	wb_cstr(&b, "rep/new");
	wb_u64(&b, 1000);
	REQUIRE(tl_send_frame(c, WIRE_OP_PUT_START, 0, 0, 4242, b.p, b.len) == 0);
	wb_free(&b);
	tl_sleep_ms(200);	/* parked: no reply while the segment reports */
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 0) == 0, "PUT_START answered before the segment's HEARTBEAT");
	CHECK_EQ(tl_heartbeat(node, (uint32_t)sid), 0);
	struct tl_frame *f = tl_wait_reply(c, 4242);
	REQUIRE(f, "no PUT_START reply after the HEARTBEAT");
	struct rbuf r;
	rb_init(&r, f->body, f->h.body_len);
	CHECK(f->h.status == 0 && rb_u32(&r) == 1 && rb_status(&r) == 0, "PUT_START after the HEARTBEAT");
	rb_u64(&r);
	CHECK_EQ(rb_u8(&r), 1);
	uint32_t seg = rb_u32(&r);
	uint64_t off = rb_u64(&r);
	CHECK_EQ(seg, (uint32_t)sid);
	CHECK(off != ALIGN, "the new extent sits on the reported one (offset %llu)",
	      (unsigned long long)off);
	tl_frame_free(f);
	tl_conn_close(c);
	tl_conn_close(node);
	tl_stop_master(&m);
}

/* Sends a PUT_START of one key asking for `want` replicas (reqid id). */
static void put_start_async(struct tl_conn *c, const char *key, unsigned want, uint64_t id)
{
	struct wbuf b;

	wb_init(&b);
	tl_wb_put_prefix(&b, want, 0, 0, 0);
	wb_u32(&b, 1);
	wb_cstr(&b, key);
	wb_u64(&b, 1000);
	REQUIRE(tl_send_frame(c, WIRE_OP_PUT_START, 0, 0, id, b.p, b.len) == 0);
	wb_free(&b);
}

/* The replica count of a one-item PUT_START reply (-1 on an error). */
static int put_start_nrep(struct tl_conn *c, uint64_t id)
{
	struct tl_frame *f = tl_wait_reply(c, id);
	struct rbuf r;
	int n = -1;

	if (!f)
		return -1;
	rb_init(&r, f->body, f->h.body_len);
	if (f->h.status == 0 && rb_u32(&r) == 1 && rb_status(&r) == 0) {
		rb_u64(&r);
		n = rb_u8(&r);
	}
	tl_frame_free(f);
	return n;
}

/* Two replicas asked for while one of the two segments has mounted and not
 * yet sent its HEARTBEAT: the put waits for it and gets both (it used to
 * get one, so a test putting right after its pool came up could see a
 * single replica); with the second node silent past the park, it goes on
 * with the one it can have. One replica asked for never waits. */
static void test_replicas_after_reports(void)
{
	struct tl_master m;

	tl_start_master(&m, NULL);
	struct tl_conn *a = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	struct tl_conn *b = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	struct tl_conn *c = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "h");
	int64_t sa = tl_mount(a, "ra", "h", SEG_SIZE, 81, ALIGN, NULL);
	tl_mount_quiet = true;
	int64_t sb = tl_mount(b, "rb", "h", SEG_SIZE, 82, ALIGN, NULL);
	tl_mount_quiet = false;
	REQUIRE(sa > 0 && sb > 0, "mounts");

	put_start_async(c, "two/1", 1, 5001);		/* one replica: at once */
	CHECK_EQ(put_start_nrep(c, 5001), 1);
	put_start_async(c, "two/2", 2, 5002);
	tl_sleep_ms(200);
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 0) == 0, "2 replicas answered before the second segment's HEARTBEAT");
	CHECK_EQ(tl_heartbeat(b, (uint32_t)sb), 0);
	CHECK_EQ(put_start_nrep(c, 5002), 2);

	/* a third node that mounts and never says more: after the park the
	 * put keeps what it got (2 of 3) */
	struct tl_conn *d = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	tl_mount_quiet = true;
	int64_t sd = tl_mount(d, "rd", "h", SEG_SIZE, 83, ALIGN, NULL);
	tl_mount_quiet = false;
	REQUIRE(sd > 0, "third mount");
	put_start_async(c, "two/3", 3, 5003);
	CHECK_EQ(put_start_nrep(c, 5003), 2);
	tl_conn_close(c);
	tl_conn_close(a);
	tl_conn_close(b);
	tl_conn_close(d);
	tl_stop_master(&m);
	if (tl_failures)
		tl_dump_log(m.log);
}

int main(void)
{
	test_adopt_after_restart();
	test_free_and_remount();
	test_alloc_after_reports();
	test_replicas_after_reports();
	return tl_done();
}

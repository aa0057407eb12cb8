/* t_master_upsert: PUT_START with WIRE_PUT_UPSERT and WIRE_PUT_SOFT_PIN,
 * LEASE_RELEASE and REPLICA_CLEAR, against a real kvpool-master (fake
 * nodes mount two segments): the old value stays visible until the
 * upsert's PUT_END, its extent is FREEd only once no lease holds it (at the
 * last release, or lease_ttl), racing upserts end with the last one
 * committed, a plain put an upsert overtook gets EEXIST, revoked and
 * timed-out upserts leave the old value alone; leases are counted per
 * object and an expired count starts again. */
#include "testlib.h"

#define SEG_SIZE (1u << 20)
#define ALIGN 4096
#define LEASE_MS 400
#define PUT_TIMEOUT_MS 700

static struct tl_master M;
static struct tl_conn *N1, *N2, *C;
static uint32_t S1, S2;

/* Answers the FREE requests the node connections get for ms, recording
 * their (segment, offset) pairs; returns how many extents. */
static int frees(uint64_t ms, uint32_t *segs, uint64_t *offs, int max)
{
	int k = 0;
	uint64_t end = tl_now_ms() + ms;

	while (tl_now_ms() < end) {
		for (int i = 0; i < 2; i++) {
			struct tl_conn *n = i ? N2 : N1;
			struct tl_frame *f = tl_next_request(n, 20);
			if (!f)
				continue;
			if (f->h.opcode == WIRE_OP_FREE) {
				struct rbuf r;
				rb_init(&r, f->body, f->h.body_len);
				uint32_t seg = rb_u32(&r), cnt = rb_u32(&r);
				for (uint32_t j = 0; j < cnt && rb_ok(&r); j++) {
					rb_u8(&r);
					uint64_t off = rb_u64(&r);
					rb_u64(&r);
					if (k < max) {
						segs[k] = seg;
						offs[k] = off;
					}
					k++;
				}
				tl_reply(n, f, 0, NULL, 0);
			}
			tl_frame_free(f);
		}
	}
	return k;
}

static bool freed(uint32_t seg, uint64_t off, const uint32_t *segs, const uint64_t *offs, int n)
{
	for (int i = 0; i < n; i++)
		if (segs[i] == seg && offs[i] == off)
			return true;
	return false;
}

static int upsert_start(const char *key, uint64_t size, struct tl_obj *o)
{
	int st = tl_put_start_flags(C, 1, S1, WIRE_PUT_UPSERT, 0, 1, &key, &size, o);

	return st ? st : o->status;
}

static uint64_t keys_now(void)
{
	struct tl_info i;

	return tl_info(C, &i) == 0 ? i.keys : UINT64_MAX;
}

static void test_replace(void)
{
	struct tl_obj a, b, c, g;
	uint32_t segs[64];
	uint64_t offs[64];

	/* an upsert of a missing key is a put */
	CHECK_EQ(upsert_start("k", 1000, &a), 0);
	CHECK_EQ(tl_put_end1(C, "k", a.generation, 11), 0);
	CHECK_EQ(tl_get1(C, "k", &g), 0);		/* takes a lease on a */
	CHECK_EQ(g.generation, a.generation);
	uint64_t keys = keys_now();

	/* a new value: the old one stays visible until PUT_END */
	CHECK_EQ(upsert_start("k", 3000, &b), 0);
	CHECK(b.generation > a.generation, "a newer generation");
	CHECK(b.rep[0].off != a.rep[0].off, "fresh extent, never the old one");
	CHECK_EQ(tl_get1(C, "k", &g), 0);
	CHECK_EQ(g.generation, a.generation);
	CHECK_EQ(g.size, 1000);
	CHECK_EQ(tl_exists(C, "k"), 1);
	CHECK_EQ(tl_put_end1(C, "k", b.generation, 22), 0);
	CHECK_EQ(tl_get1(C, "k", &g), 0);
	CHECK_EQ(g.generation, b.generation);
	CHECK_EQ(g.size, 3000);
	CHECK_EQ(g.checksum, 22);
	CHECK_EQ(keys_now(), keys);			/* still one key */
	CHECK_EQ(tl_put_end1(C, "k", b.generation, 22), 0);	/* retried: idempotent */

	/* a's extent is leased: no FREE until the lease ends */
	int n = frees(LEASE_MS / 4, segs, offs, 64);
	CHECK(!freed(a.rep[0].seg, a.rep[0].off, segs, offs, n), "old extent kept while leased");
	n = frees(LEASE_MS + 300, segs, offs, 64);
	CHECK(freed(a.rep[0].seg, a.rep[0].off, segs, offs, n), "old extent FREEd after its lease");

	/* no lease on b now (ran out): the next upsert frees b at PUT_END */
	CHECK_EQ(upsert_start("k", 3000, &c), 0);
	CHECK_EQ(tl_put_end1(C, "k", c.generation, 33), 0);
	n = frees(150, segs, offs, 64);
	CHECK(freed(b.rep[0].seg, b.rep[0].off, segs, offs, n), "unleased old extent FREEd at once");
	CHECK_EQ(tl_remove(C, "k", true), 0);
	frees(100, segs, offs, 64);
}

static void test_plain_vs_upsert(void)
{
	struct tl_obj p, q, u, g;
	uint32_t segs[64];
	uint64_t offs[64];

	/* a plain put in progress, an upsert overtakes it */
	CHECK_EQ(tl_put_start1(C, "p", 100, 1, S1, &p), 0);
	CHECK_EQ(tl_put_start1(C, "p", 100, 1, S1, &q), KVP_EEXIST);	/* plain vs pending */
	CHECK_EQ(upsert_start("p", 200, &u), 0);
	CHECK_EQ(tl_get1(C, "p", &g), KVP_ENOTFOUND);	/* nothing complete yet */
	CHECK_EQ(tl_put_end1(C, "p", u.generation, 5), 0);
	CHECK_EQ(tl_get1(C, "p", &g), 0);
	CHECK_EQ(g.generation, u.generation);
	CHECK_EQ(tl_put_end1(C, "p", p.generation, 4), KVP_EEXIST);
	int n = frees(150, segs, offs, 64);
	CHECK(freed(p.rep[0].seg, p.rep[0].off, segs, offs, n), "the overtaken put's extent FREEd");
	CHECK_EQ(tl_get1(C, "p", &g), 0);
	CHECK_EQ(g.generation, u.generation);
	CHECK_EQ(tl_put_start1(C, "p", 100, 1, S1, &q), KVP_EEXIST);	/* plain vs complete */

	/* the plain put finishes first: it is visible, then replaced */
	CHECK_EQ(tl_put_start1(C, "p2", 100, 1, S1, &p), 0);
	CHECK_EQ(upsert_start("p2", 100, &u), 0);
	CHECK_EQ(tl_put_end1(C, "p2", p.generation, 1), 0);
	CHECK_EQ(tl_get1(C, "p2", &g), 0);
	CHECK_EQ(g.generation, p.generation);
	CHECK_EQ(tl_put_end1(C, "p2", u.generation, 2), 0);
	CHECK_EQ(tl_get1(C, "p2", &g), 0);
	CHECK_EQ(g.generation, u.generation);

	/* an upsert of a missing key owns it: a plain put now is EEXIST */
	CHECK_EQ(upsert_start("p3", 100, &u), 0);
	CHECK_EQ(tl_put_start1(C, "p3", 100, 1, S1, &q), KVP_EEXIST);
	CHECK_EQ(tl_put_revoke1(C, "p3", u.generation), 0);
	CHECK_EQ(tl_put_start1(C, "p3", 100, 1, S1, &q), 0);	/* free again */
	CHECK_EQ(tl_put_revoke1(C, "p3", q.generation), 0);
	CHECK_EQ(tl_remove(C, "p", true), 0);
	CHECK_EQ(tl_remove(C, "p2", true), 0);
	frees(100, segs, offs, 64);
}

static void test_two_upserts(void)
{
	struct tl_obj a, u1, u2, g;

	/* on an existing key: the one committed last wins, both succeed */
	CHECK_EQ(tl_put1(C, "u", 100, &a), 0);
	CHECK_EQ(upsert_start("u", 100, &u1), 0);
	CHECK_EQ(upsert_start("u", 100, &u2), 0);
	CHECK_EQ(tl_put_end1(C, "u", u2.generation, 2), 0);
	CHECK_EQ(tl_get_stat1(C, "u", &g, true), 0);
	CHECK_EQ(g.generation, u2.generation);
	CHECK_EQ(tl_put_end1(C, "u", u1.generation, 1), 0);
	CHECK_EQ(tl_get_stat1(C, "u", &g, true), 0);
	CHECK_EQ(g.generation, u1.generation);
	CHECK_EQ(g.checksum, 1);

	/* on a missing key: the first is the key's pending put, the second a
	 * version; either order of PUT_END works */
	CHECK_EQ(upsert_start("v", 100, &u1), 0);
	CHECK_EQ(upsert_start("v", 300, &u2), 0);
	CHECK_EQ(tl_put_end1(C, "v", u2.generation, 2), 0);
	CHECK_EQ(tl_get_stat1(C, "v", &g, true), 0);
	CHECK_EQ(g.generation, u2.generation);
	CHECK_EQ(g.size, 300);
	CHECK_EQ(tl_put_end1(C, "v", u1.generation, 1), 0);
	CHECK_EQ(tl_get_stat1(C, "v", &g, true), 0);
	CHECK_EQ(g.generation, u1.generation);
	CHECK_EQ(g.size, 100);

	/* a batch with the key twice: both granted, the second replaces */
	const char *bk[] = { "w", "w" };
	uint64_t bs[] = { 10, 20 };
	struct tl_obj bo[2];
	CHECK_EQ(tl_put_start_flags(C, 1, 0, WIRE_PUT_UPSERT, 0, 2, bk, bs, bo), 0);
	CHECK(bo[0].status == 0 && bo[1].status == 0, "both upserts granted");
	CHECK_EQ(tl_put_end1(C, "w", bo[0].generation, 1), 0);
	CHECK_EQ(tl_put_end1(C, "w", bo[1].generation, 2), 0);
	CHECK_EQ(tl_get_stat1(C, "w", &g, true), 0);
	CHECK_EQ(g.size, 20);
	CHECK_EQ(tl_remove(C, "u", true), 0);
	CHECK_EQ(tl_remove(C, "v", true), 0);
	CHECK_EQ(tl_remove(C, "w", true), 0);
}

static void test_revoke_timeout_remove(void)
{
	struct tl_obj a, u, g;
	uint32_t segs[64];
	uint64_t offs[64];

	CHECK_EQ(tl_put1(C, "r", 100, &a), 0);
	CHECK_EQ(upsert_start("r", 100, &u), 0);
	CHECK_EQ(tl_put_revoke1(C, "r", u.generation), 0);
	CHECK_EQ(tl_get_stat1(C, "r", &g, true), 0);
	CHECK_EQ(g.generation, a.generation);
	CHECK_EQ(tl_put_revoke1(C, "r", a.generation), KVP_EINVAL);	/* complete */

	/* an upsert whose writer vanished: put_timeout reclaims it alone */
	CHECK_EQ(upsert_start("r", 100, &u), 0);
	int n = frees(PUT_TIMEOUT_MS + 400, segs, offs, 64);
	CHECK(freed(u.rep[0].seg, u.rep[0].off, segs, offs, n), "timed-out upsert reclaimed");
	CHECK(!freed(a.rep[0].seg, a.rep[0].off, segs, offs, n), "old value kept");
	CHECK_EQ(tl_get_stat1(C, "r", &g, true), 0);
	CHECK_EQ(g.generation, a.generation);
	CHECK_EQ(tl_put_end1(C, "r", u.generation, 1), KVP_ESTALE);

	/* removed while an upsert is written: its PUT_END puts it back */
	CHECK_EQ(upsert_start("r", 100, &u), 0);
	CHECK_EQ(tl_remove(C, "r", true), 0);
	CHECK_EQ(tl_exists(C, "r"), 0);
	CHECK_EQ(tl_put_end1(C, "r", u.generation, 9), 0);
	CHECK_EQ(tl_get_stat1(C, "r", &g, true), 0);
	CHECK_EQ(g.generation, u.generation);
	CHECK_EQ(tl_remove(C, "r", true), 0);
	frees(100, segs, offs, 64);
}

static void test_soft_pin(void)
{
	struct tl_obj o, g;
	const char *k = "pin";
	uint64_t sz = 100;

	CHECK_EQ(tl_put_start_flags(C, 1, 0, WIRE_PUT_SOFT_PIN, 60000, 1, &k, &sz, &o), 0);
	CHECK_EQ(o.status, 0);
	CHECK_EQ(tl_put_end1(C, k, o.generation, 1), 0);
	CHECK_EQ(tl_stat1(C, k, &g), 0);
	CHECK(g.pin_ms > 58000 && g.pin_ms <= 61000, "pin %lld", (long long)g.pin_ms);
	/* an upsert without a pin keeps the old one */
	CHECK_EQ(upsert_start(k, 100, &o), 0);
	CHECK_EQ(tl_put_end1(C, k, o.generation, 2), 0);
	CHECK_EQ(tl_stat1(C, k, &g), 0);
	CHECK(g.pin_ms > 58000 && g.pin_ms <= 61000, "pin kept %lld", (long long)g.pin_ms);
	/* ttl 0: [master] soft_pin_ttl (2m here) */
	CHECK_EQ(tl_put_start_flags(C, 1, 0, WIRE_PUT_SOFT_PIN | WIRE_PUT_UPSERT, 0, 1, &k, &sz,
				    &o), 0);
	CHECK_EQ(tl_put_end1(C, k, o.generation, 3), 0);
	CHECK_EQ(tl_stat1(C, k, &g), 0);
	CHECK(g.pin_ms > 118000 && g.pin_ms <= 121000, "default pin %lld", (long long)g.pin_ms);
	/* longer than max_soft_pin_ttl (5m here): cut to it; PIN (hard pins)
	 * is not */
	CHECK_EQ(tl_put_start_flags(C, 1, 0, WIRE_PUT_SOFT_PIN | WIRE_PUT_UPSERT, 3600000, 1, &k,
				    &sz, &o), 0);
	CHECK_EQ(tl_put_end1(C, k, o.generation, 4), 0);
	CHECK_EQ(tl_stat1(C, k, &g), 0);
	CHECK(g.pin_ms > 298000 && g.pin_ms <= 301000, "capped pin %lld", (long long)g.pin_ms);
	CHECK_EQ(tl_pin(C, k, 7200000), 0);
	CHECK_EQ(tl_stat1(C, k, &g), 0);
	CHECK(g.pin_ms > 7198000 && g.pin_ms <= 7201000, "PIN %lld", (long long)g.pin_ms);
	CHECK_EQ(tl_remove(C, k, true), 0);
}

static int release(const char *key, uint64_t gen)
{
	struct wbuf b;
	int r = 0;

	wb_init(&b);
	wb_u32(&b, 1);
	wb_cstr(&b, key);
	wb_u64(&b, gen);
	int st = tl_i32_reply(tl_call(C, WIRE_OP_LEASE_RELEASE, &b), 1, &r);
	wb_free(&b);
	return st ? st : r;
}

static void test_release(void)
{
	struct tl_obj a, u, g;
	uint32_t segs[64];
	uint64_t offs[64];

	/* two readers: the lease holds until both released */
	CHECK_EQ(tl_put1(C, "L", 100, &a), 0);
	CHECK_EQ(tl_get1(C, "L", &g), 0);
	CHECK_EQ(tl_get1(C, "L", &g), 0);
	CHECK_EQ(release("L", a.generation), 0);
	CHECK_EQ(tl_remove(C, "L", false), KVP_ELEASED);
	CHECK_EQ(tl_stat1(C, "L", &g), 0);
	CHECK(g.lease_left_ms > 0, "one lease left");
	CHECK_EQ(release("L", a.generation), 0);
	CHECK_EQ(tl_stat1(C, "L", &g), 0);
	CHECK_EQ(g.lease_left_ms, 0);
	CHECK_EQ(release("L", a.generation), 0);	/* one too many: no harm */
	CHECK_EQ(release("L", a.generation + 1), KVP_ENOTFOUND);
	CHECK_EQ(release("nokey", 1), KVP_ENOTFOUND);
	CHECK_EQ(release("", 1), KVP_EKEY);

	/* readers that died: their leases end with lease_ttl, and the count
	 * starts again from the next GET */
	CHECK_EQ(tl_get1(C, "L", &g), 0);
	CHECK_EQ(tl_get1(C, "L", &g), 0);
	tl_sleep_ms(LEASE_MS + 100);
	CHECK_EQ(tl_remove(C, "L", false), 0);	/* ended: removable */
	CHECK_EQ(tl_put1(C, "L", 100, &a), 0);
	CHECK_EQ(tl_get1(C, "L", &g), 0);
	CHECK_EQ(tl_get1(C, "L", &g), 0);
	tl_sleep_ms(LEASE_MS + 100);
	CHECK_EQ(tl_get1(C, "L", &g), 0);
	CHECK_EQ(release("L", a.generation), 0);
	CHECK_EQ(tl_remove(C, "L", false), 0);	/* 1 counted, not 3 */

	/* a replaced value goes at its last reader's release, not lease_ttl */
	CHECK_EQ(tl_put1(C, "L", 100, &a), 0);
	CHECK_EQ(tl_get1(C, "L", &g), 0);
	CHECK_EQ(tl_get1(C, "L", &g), 0);
	CHECK_EQ(upsert_start("L", 100, &u), 0);
	CHECK_EQ(tl_put_end1(C, "L", u.generation, 3), 0);
	CHECK_EQ(release("L", a.generation), 0);	/* the old generation, a version now */
	int n = frees(100, segs, offs, 64);
	CHECK(!freed(a.rep[0].seg, a.rep[0].off, segs, offs, n), "one reader left: kept");
	CHECK_EQ(release("L", a.generation), 0);
	n = frees(100, segs, offs, 64);
	CHECK(freed(a.rep[0].seg, a.rep[0].off, segs, offs, n), "FREEd at the last release");
	CHECK_EQ(release("L", a.generation), KVP_ENOTFOUND);	/* gone */
	CHECK_EQ(tl_remove(C, "L", false), 0);
	frees(100, segs, offs, 64);
}

static int replica_clear(uint32_t seg, bool force, const char *key)
{
	struct wbuf pre;

	wb_init(&pre);
	wb_u32(&pre, seg);
	wb_u8(&pre, force);
	int st = tl_key_op(C, WIRE_OP_REPLICA_CLEAR, &pre, key);
	wb_free(&pre);
	return st;
}

static void test_replica_clear(void)
{
	struct tl_obj o, g;
	uint32_t segs[64];
	uint64_t offs[64];

	CHECK_EQ(tl_put_start1(C, "rc", 100, 2, 0, &o), 0);
	REQUIRE(o.nrep == 2, "two replicas");
	CHECK_EQ(tl_put_end1(C, "rc", o.generation, 1), 0);
	CHECK_EQ(replica_clear(S1, false, "rc"), 0);
	int n = frees(150, segs, offs, 64);
	uint64_t off1 = o.rep[0].seg == S1 ? o.rep[0].off : o.rep[1].off;
	CHECK(freed(S1, off1, segs, offs, n), "the cleared replica's extent FREEd");
	CHECK_EQ(tl_get1(C, "rc", &g), 0);		/* a lease from here */
	CHECK_EQ(g.nrep, 1);
	CHECK_EQ(g.rep[0].seg, S2);
	CHECK_EQ(replica_clear(S1, false, "rc"), 0);	/* none there: still 0 */
	CHECK_EQ(replica_clear(S2, false, "rc"), KVP_ELEASED);
	CHECK_EQ(replica_clear(S2, true, "rc"), 0);	/* the last one: the object goes */
	CHECK_EQ(tl_exists(C, "rc"), 0);
	CHECK_EQ(replica_clear(S2, false, "rc"), KVP_ENOTFOUND);
	CHECK_EQ(replica_clear(S2, false, ""), KVP_EKEY);
	CHECK_EQ(replica_clear(999, false, "rc"), KVP_ENOSEG);	/* frame status */
	frees(100, segs, offs, 64);
}

int main(void)
{
	uint8_t secret[WIRE_SECRET_LEN];
	char ini[256];

	snprintf(ini, sizeof(ini), "[master]\nlease_ttl = %dms\nput_timeout = %dms\n"
		 "soft_pin_ttl = 2m\nmax_soft_pin_ttl = 5m\n", LEASE_MS, PUT_TIMEOUT_MS);
	tl_start_master(&M, ini);
	N1 = tl_client(M.port, WIRE_ROLE_NODE, NULL, "host-a");
	N2 = tl_client(M.port, WIRE_ROLE_NODE, NULL, "host-b");
	int64_t s1 = tl_mount(N1, "s1", "host-a", SEG_SIZE, 0x1111, ALIGN, secret);
	int64_t s2 = tl_mount(N2, "s2", "host-b", SEG_SIZE, 0x2222, ALIGN, secret);
	REQUIRE(s1 > 0 && s2 > 0, "MOUNT");
	S1 = (uint32_t)s1;
	S2 = (uint32_t)s2;
	C = tl_client(M.port, WIRE_ROLE_CLIENT, NULL, "host-c");

	test_replace();
	test_plain_vs_upsert();
	test_two_upserts();
	test_revoke_timeout_remove();
	test_soft_pin();
	test_release();
	test_replica_clear();

	CHECK_EQ(keys_now(), 0);
	tl_conn_close(C);
	tl_conn_close(N1);
	tl_conn_close(N2);
	int st = tl_stop_master(&M);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "clean exit (status %#x)", st);
	if (tl_failures)
		tl_dump_log(M.log);
	return tl_done();
}

/* t_mpolicy: the eviction policy's clock of accesses, in-process (mdrive.h).
 * A GET and a TOUCH (a client's optimistic reads) are reads: the clock
 * ticks and the priority rises; an EXISTS is a lookup and changes nothing.
 * Stored times stay within 2^30 of the clock through a whole wrap of its
 * 32 bits (mpol_age), so a block left alone ranks below a fresh one however
 * long the pool runs; and stat's access time maps the clock back to ms. */
#include "testlib.h"

#include "log.h"
#include "mdrive.h"
#include "master_i.h"
#include "mpolicy.h"
#include "objtab.h"

#define NKEYS 20

static struct master_client *client(struct master *m, uint16_t role, struct wbuf *w)
{
	struct master_client *c = mdrive_client(m, role, mdrive_drop, NULL, w);

	CHECK(c != NULL);
	return c;
}

static struct obj *find(struct master *m, unsigned i)
{
	char k[32];

	mdrive_key(k, sizeof(k), i);
	return objtab_find(&m->objs, (const uint8_t *)k, strlen(k));
}

/* One key batch frame (op) of key i: its frame status. */
static int call_key(struct master *m, struct master_client *c, uint16_t op, unsigned i,
		    struct wbuf *w)
{
	struct wbuf b;
	char k[32];

	mdrive_key(k, sizeof(k), i);
	wb_init(&b);
	wb_u32(&b, 1);
	wb_str(&b, k, strlen(k));
	int st = mdrive_call(m, c, op, b.p, b.len, w);
	wb_free(&b);
	return st;
}

static struct master *pool(const struct kvp_conf *conf, struct master_client **cli,
			   struct wbuf *w)
{
	char err[256];
	unsigned ids[NKEYS];
	struct master *m = master_create(conf, err, sizeof(err));

	CHECK(m != NULL);
	struct master_client *node = client(m, WIRE_ROLE_NODE, w);
	*cli = client(m, WIRE_ROLE_CLIENT, w);
	uint32_t sid = mdrive_mount(m, node, 16u << 20, 4096, w);
	CHECK_EQ(sid, 1);
	for (unsigned i = 0; i < NKEYS; i++)
		ids[i] = i;
	CHECK_EQ(mdrive_report(m, node, sid, ids, NULL, NKEYS, 4096, w), 0);
	CHECK_EQ(master_keys(m), NKEYS);
	return m;
}

static void test_reads(const struct kvp_conf *conf)
{
	struct wbuf w;
	struct master_client *cli;

	wb_init(&w);
	struct master *m = pool(conf, &cli, &w);
	struct obj *o = find(m, 3);

	CHECK(o != NULL);
	uint64_t clk = m->pol.clk;
	uint32_t pkey = o->pkey;

	/* a lookup: no tick, no change */
	for (int r = 0; r < 5; r++)
		CHECK_EQ(call_key(m, cli, WIRE_OP_EXISTS, 3, &w), 0);
	CHECK_EQ(m->pol.clk, clk);
	CHECK_EQ(o->pkey, pkey);
	/* a reported optimistic read: one tick, the priority rises */
	CHECK_EQ(call_key(m, cli, WIRE_OP_TOUCH, 3, &w), 0);
	CHECK_EQ(m->pol.clk, clk + 1);
	CHECK((int32_t)(o->pkey - pkey) > 0);
	CHECK_EQ(o->atime, (uint32_t)(clk + 1));
	/* a GET: another */
	pkey = o->pkey;
	CHECK_EQ(call_key(m, cli, WIRE_OP_GET, 3, &w), 0);
	CHECK_EQ(m->pol.clk, clk + 2);
	CHECK((int32_t)(o->pkey - pkey) > 0);
	/* an unknown key: a TOUCH answers 0 for it and counts nothing */
	CHECK_EQ(call_key(m, cli, WIRE_OP_TOUCH, 999, &w), 0);
	CHECK_EQ(m->pol.clk, clk + 2);
	/* the read key ranks above the others, which were only reported */
	CHECK(mpol_score(m, o) > mpol_score(m, find(m, 4)));
	CHECK(master_check(m));
	master_destroy(m);
	wb_free(&w);
}

/* Every object's priority and access time within 2^30 behind the clock,
 * and 2^28 more that may pass between two visits of mpol_age. */
static void check_aged(struct master *m)
{
	uint32_t now = (uint32_t)m->pol.clk;
	int32_t lim = (int32_t)(MPOL_KEY_BEHIND_MAX + (1u << 28));

	for (unsigned i = 0; i < NKEYS; i++) {
		struct obj *o = find(m, i);

		if (!o)
			continue;
		CHECK((int32_t)(now - o->pkey) >= 0 && (int32_t)(now - o->pkey) <= lim,
		      "key %u: %d behind", i, (int32_t)(now - o->pkey));
		CHECK((int32_t)(now - o->atime) >= 0 && (int32_t)(now - o->atime) <= lim,
		      "key %u: accessed %d ago", i, (int32_t)(now - o->atime));
		CHECK(mpol_score(m, o) <= 0);
	}
}

static void test_wrap(const struct kvp_conf *conf)
{
	struct wbuf w;
	struct master_client *cli;

	wb_init(&w);
	struct master *m = pool(conf, &cli, &w);

	/* key 0 read often, lately: far above the rest */
	for (int r = 0; r < 50; r++)
		CHECK_EQ(call_key(m, cli, WIRE_OP_GET, 0, &w), 0);
	CHECK(mpol_score(m, find(m, 0)) > 0);
	/* the clock goes round its 32 bits twice, a quarter of 2^30 at a time
	 * (a pool's accesses between two master ticks are far fewer) */
	for (int step = 0; step < 32; step++) {
		m->pol.clk += 1u << 28;
		mpol_age(m);
		check_aged(m);
	}
	/* a fresh put ranks above every block left alone since */
	uint64_t gen;

	CHECK_EQ(mdrive_put_start(m, cli, "fresh", 100, &gen, NULL, &w), 0);
	char k[] = "fresh";
	struct obj *f = objtab_find(&m->objs, (const uint8_t *)k, 5);

	CHECK(f != NULL);
	CHECK_EQ(f->atime, (uint32_t)m->pol.clk);
	for (unsigned i = 0; i < NKEYS; i++)
		CHECK(mpol_score(m, find(m, i)) < (int32_t)(f->pkey - (uint32_t)m->pol.clk));
	/* mpol_age's slices are sized by the accesses since the last one: at a
	 * few accesses per call the pass still ends, and keeps the bound */
	for (int step = 0; step < 40000; step++) {
		m->pol.clk += 1u << 14;
		mpol_age(m);
	}
	check_aged(m);
	CHECK(master_check(m));
	master_destroy(m);
	wb_free(&w);
}

/* mpol_clk_ms: the ms at which the clock read a value, between samples;
 * past the map's size the samples thin out and the answer stays within
 * their spacing. */
static void test_time_map(const struct kvp_conf *conf)
{
	struct wbuf w;
	struct master_client *cli;

	wb_init(&w);
	struct master *m = pool(conf, &cli, &w);
	uint64_t ms0 = m->now_ms;

	mpol_test_set_clock(m, 1000);
	/* 100 accesses per second, a sample a second */
	for (int s = 1; s <= 10; s++) {
		m->now_ms = ms0 + 1000u * (unsigned)s;
		m->pol.clk += 100;
		mpol_age(m);
	}
	uint32_t base = m_now32(m) - 10000;	/* m_now32 at ms0 */

	/* clk 1100 was read at second 1; 1150 half way to second 2 */
	CHECK_EQ(mpol_clk_ms(m, 1100), base + 1000);
	CHECK_EQ(mpol_clk_ms(m, 1150), base + 1500);
	CHECK_EQ(mpol_clk_ms(m, 1950), base + 9500);
	/* newer than the last sample: towards now */
	m->now_ms += 1000;
	m->pol.clk += 100;
	CHECK_EQ(mpol_clk_ms(m, 2050), base + 10500);
	/* older than the oldest sample: the oldest's */
	CHECK_EQ(mpol_clk_ms(m, 900), base + 1000);
	/* 5,000 more seconds: thinned twice and more, still in order */
	for (int s = 0; s < 5000; s++) {
		m->now_ms += 1000;
		m->pol.clk += 100;
		mpol_age(m);
	}
	CHECK(m->pol.tmap.n <= MPOL_TMAP_N);
	CHECK(m->pol.tmap.every_ms > 1000);
	uint32_t last = 0;
	for (uint32_t c = 1100; c < (uint32_t)m->pol.clk; c += 5000) {
		uint32_t ms = mpol_clk_ms(m, c);
		uint32_t want = base + 1000 + (c - 1100) * 10;	/* 100 accesses a second */

		CHECK(ms >= last);
		CHECK(ms + m->pol.tmap.every_ms >= want && ms <= want + m->pol.tmap.every_ms,
		      "clk %u: %u ms, want %u (every %u, oldest clk %u)", c, ms - base, want - base,
		      m->pol.tmap.every_ms, m->pol.tmap.clk[0]);
		last = ms;
	}
	master_destroy(m);
	wb_free(&w);
}

int main(void)
{
	struct kvp_conf conf;

	log_init("t_mpolicy", LOG_ERR);
	conf_defaults(&conf);
	test_reads(&conf);
	test_wrap(&conf);
	test_time_map(&conf);
	return tl_done();
}

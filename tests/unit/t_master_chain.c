/* t_master_chain: what eviction keeps (master/mchain.c, mpolicy.c) — a
 * chained PUT_START's blocks leave tail first, so what is left of a chain
 * is always a prefix; a read block and what it extends outlive unread
 * ones; a leased or pinned block keeps what it extends; a block evicted
 * and put again resumes its priority from its ghost; blocks whose
 * predecessor was removed are evicted first; a batch put into a full pool
 * makes room for all its blocks; eviction_policy = lru keeps the chain
 * order too; with a spill tier the tails move to disk first. A fake node
 * answers the master's FREEs (and DEMOTEs). */
#include "testlib.h"

#define ALIGN 4096
#define BLOCKS 256			/* segment = 256 blocks, 255 usable */
#define SEG_SIZE ((uint64_t)BLOCKS * ALIGN)
#define VLEN (ALIGN - 64 - 16)		/* one block per object with keys <= 16 bytes */

static void ckey(char *k, int chain, int i)
{
	snprintf(k, 16, "c%03u-%03u", (unsigned)chain % 1000u, (unsigned)i % 1000u);
}

/* A chained PUT_START of keys[0..n) (item i extends item i - 1, item 0
 * extends pred when not NULL), then PUT_END of each granted one. Returns
 * how many items failed. */
static int put_chain(struct tl_conn *c, size_t n, const char *const *keys, const char *pred)
{
	struct wbuf b;
	int fails = 0;

	wb_init(&b);
	tl_wb_put_prefix(&b, 1, 0, WIRE_PUT_CHAIN, 0);
	wb_u32(&b, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		wb_cstr(&b, keys[i]);
		wb_u64(&b, VLEN);
	}
	wb_cstr(&b, pred ? pred : "");
	struct tl_frame *f = tl_call(c, WIRE_OP_PUT_START, &b);
	wb_free(&b);
	REQUIRE(f && f->h.status == 0, "chained PUT_START: %d", f ? f->h.status : -1);
	struct rbuf r;
	uint64_t gen[512];
	int st[512];

	REQUIRE(n <= 512, "chain length");
	rb_init(&r, f->body, f->h.body_len);
	REQUIRE(rb_u32(&r) == n, "reply count");
	for (size_t i = 0; i < n; i++) {
		struct tl_obj o;

		memset(&o, 0, sizeof(o));
		st[i] = rb_status(&r);
		gen[i] = rb_u64(&r);
		tl_rb_reps(&r, &o, true);
	}
	REQUIRE(rb_done(&r), "reply body");
	tl_frame_free(f);
	for (size_t i = 0; i < n; i++) {
		if (st[i] == 0 && tl_put_end1(c, keys[i], gen[i], VLEN) == 0)
			continue;
		fails++;
	}
	return fails;
}

/* Puts chain `chain` of len blocks (its keys ckey(chain, 0..len)). */
static int put_chain_n(struct tl_conn *c, int chain, int len, const char *pred)
{
	char buf[512][16];
	const char *keys[512];

	for (int i = 0; i < len; i++) {
		ckey(buf[i], chain, i);
		keys[i] = buf[i];
	}
	return put_chain(c, (size_t)len, keys, pred);
}

/* How many blocks of chain `chain` exist; *prefix: whether they are its
 * first ones (no gap). */
static int chain_left(struct tl_conn *c, int chain, int len, bool *prefix)
{
	char k[16];
	int n = 0;
	bool gap = false;

	*prefix = true;
	for (int i = 0; i < len; i++) {
		ckey(k, chain, i);
		bool e = tl_exists(c, k) == 1;
		if (e && gap)
			*prefix = false;
		gap |= !e;
		n += e;
	}
	return n;
}

static double metric(struct tl_master *m, const char *name)
{
	char *body = NULL;
	char pat[128];
	double v = -1;

	if (tl_http(m->http_port, "GET", "/metrics", NULL, 0, &body, NULL) != 200)
		return -1;
	snprintf(pat, sizeof(pat), "\n%s ", name);
	const char *t = body ? strstr(body, pat) : NULL;
	if (t)
		v = strtod(t + strlen(pat), NULL);
	free(body);
	return v;
}

struct pool {
	struct tl_master m;
	struct tl_conn *node, *c;
};

/* One connection is node and client, so that the FREEs a parked
 * PUT_START waits for are answered while it waits for the reply. */
static void pool_start(struct pool *p, const char *name, const char *conf)
{
	tl_start_master(&p->m, conf);
	p->node = tl_client(p->m.port, WIRE_ROLE_NODE, NULL, "h");
	p->node->auto_free = true;
	REQUIRE(tl_mount(p->node, name, "h", SEG_SIZE, 1, ALIGN, NULL) > 0, "mount");
	p->c = p->node;
}

static void pool_stop(struct pool *p)
{
	tl_conn_close(p->node);
	tl_stop_master(&p->m);
	if (tl_failures)
		tl_dump_log(p->m.log);
}

/* 10 chains of 20 blocks fill 200 of 255; chains 0..2 are read (all their
 * blocks, as an engine's hit reads a prefix); 40 more blocks cross the
 * watermark. Every chain keeps a prefix; the read ones keep all. */
static void test_tail_first(const char *policy)
{
	struct pool p;
	char conf[256];

	snprintf(conf, sizeof(conf),
		 "[master]\neviction_high_watermark = 0.9\neviction_ratio = 0.5\n"
		 "lease_ttl = 100ms\neviction_policy = %s\n", policy);
	pool_start(&p, "tf", conf);
	for (int ch = 0; ch < 10; ch++)
		CHECK_EQ(put_chain_n(p.c, ch, 20, NULL), 0);
	tl_sleep_ms(20);
	struct tl_obj g;
	char k[16];
	for (int ch = 0; ch < 3; ch++)
		for (int i = 0; i < 20; i++) {
			ckey(k, ch, i);
			CHECK_EQ(tl_get1(p.c, k, &g), 0);
		}
	tl_sleep_ms(150);				/* the leases end */
	CHECK_EQ(put_chain_n(p.c, 10, 20, NULL), 0);
	CHECK_EQ(put_chain_n(p.c, 11, 20, NULL), 0);
	tl_settle_evictions(p.node, p.c);
	struct tl_info info;
	CHECK_EQ(tl_info(p.c, &info), 0);
	CHECK(info.evictions >= 100, "%s: evictions %llu", policy,
	      (unsigned long long)info.evictions);
	int left = 0;
	for (int ch = 0; ch < 12; ch++) {
		bool prefix;
		int n = chain_left(p.c, ch, 20, &prefix);
		CHECK(prefix, "%s: chain %d keeps a prefix (%d blocks)", policy, ch, n);
		if (ch < 3)
			CHECK(n == 20, "%s: read chain %d kept whole: %d", policy, ch, n);
		left += n;
	}
	CHECK_EQ(left + (int)info.evictions, 240);
	pool_stop(&p);
}

/* A leased tail keeps its whole chain (nothing it extends is a leaf); a
 * pinned middle block keeps itself and what it extends, while its tail may
 * go. */
static void test_lease_pin(void)
{
	struct pool p;

	pool_start(&p, "lp", "[master]\neviction_high_watermark = 0.9\neviction_ratio = 0.9\n"
			     "lease_ttl = 60s\n");
	CHECK_EQ(put_chain_n(p.c, 0, 20, NULL), 0);	/* its tail leased */
	CHECK_EQ(put_chain_n(p.c, 1, 20, NULL), 0);	/* block 9 pinned */
	for (int ch = 2; ch < 10; ch++)
		CHECK_EQ(put_chain_n(p.c, ch, 20, NULL), 0);
	struct tl_obj g;
	char k[16];
	ckey(k, 0, 19);
	CHECK_EQ(tl_get1(p.c, k, &g), 0);
	ckey(k, 1, 9);
	CHECK_EQ(tl_pin(p.c, k, 60000), 0);
	CHECK_EQ(put_chain_n(p.c, 10, 40, NULL), 0);	/* over 90%: 90% goes */
	tl_settle_evictions(p.node, p.c);
	bool prefix;
	CHECK_EQ(chain_left(p.c, 0, 20, &prefix), 20);
	CHECK(prefix, "leased chain");
	int n1 = chain_left(p.c, 1, 20, &prefix);
	CHECK(prefix && n1 >= 10 && n1 < 20, "pinned block 9 and what it extends stay, the tail "
	      "goes: %d left", n1);
	pool_stop(&p);
}

/* A block read often, evicted (its reads long ago), then put again
 * resumes its priority from its ghost: it outlives blocks put for the
 * first time at the same moment. */
static void test_ghost(void)
{
	struct pool p;
	struct tl_obj g;
	char k[16];

	pool_start(&p, "gh", "[master]\neviction_high_watermark = 0.9\neviction_ratio = 0.5\n"
			     "lease_ttl = 50ms\neviction_half_life = 400\n");
	for (int i = 0; i < 50; i++) {
		snprintf(k, sizeof(k), "g%03d", i);
		CHECK_EQ(tl_put1(p.c, k, VLEN, NULL), 0);
		for (int r = 0; r < 4; r++)
			CHECK_EQ(tl_get1(p.c, k, &g), 0);
	}
	/* new blocks push the g's out: their count decays with the accesses
	 * that come by (the policy's clock), three half-lives of them */
	for (int i = 0; i < 1200; i++) {
		snprintf(k, sizeof(k), "f%03d", i);
		CHECK_EQ(tl_put1(p.c, k, VLEN, NULL), 0);
	}
	tl_settle_evictions(p.node, p.c);
	int g_left = 0;
	for (int i = 0; i < 50; i++) {
		snprintf(k, sizeof(k), "g%03d", i);
		g_left += tl_exists(p.c, k) == 1;
	}
	CHECK(g_left < 10, "old reads decayed: %d of 50 g's left", g_left);
	double hits0 = metric(&p.m, "kvpool_master_ghost_hits_total");
	/* the g's come back, interleaved with as many first-seen blocks */
	for (int i = 0; i < 50; i++) {
		snprintf(k, sizeof(k), "g%03d", i);
		if (tl_exists(p.c, k) != 1)
			CHECK_EQ(tl_put1(p.c, k, VLEN, NULL), 0);
		snprintf(k, sizeof(k), "n%03d", i);
		CHECK_EQ(tl_put1(p.c, k, VLEN, NULL), 0);
	}
	CHECK(metric(&p.m, "kvpool_master_ghost_hits_total") >= hits0 + 40, "ghost hits %.0f",
	      metric(&p.m, "kvpool_master_ghost_hits_total") - hits0);
	/* 200 newer first-seen blocks: 45 of the g's and n's must go, and the
	 * n's (first seen, older than the z's) rank lowest */
	for (int i = 0; i < 200; i++) {
		snprintf(k, sizeof(k), "z%03d", i);
		CHECK_EQ(tl_put1(p.c, k, VLEN, NULL), 0);
	}
	tl_settle_evictions(p.node, p.c);
	int gs = 0, ns = 0;
	for (int i = 0; i < 50; i++) {
		snprintf(k, sizeof(k), "g%03d", i);
		gs += tl_exists(p.c, k) == 1;
		snprintf(k, sizeof(k), "n%03d", i);
		ns += tl_exists(p.c, k) == 1;
	}
	CHECK(gs > ns + 20, "returning blocks kept over first-seen ones: %d g's, %d n's", gs, ns);
	CHECK(metric(&p.m, "kvpool_master_eviction_half_life_accesses") == 400.0, "half-life");
	pool_stop(&p);
}

/* Removing the block before a chain's tail leaves the tail extending
 * nothing: eviction takes it before anything else, even before the
 * oldest chain's tail. */
static void test_orphans(void)
{
	struct pool p;
	char k[16];

	pool_start(&p, "or", "[master]\neviction_high_watermark = 0.9\neviction_ratio = 0.02\n"
			     "lease_ttl = 50ms\n");
	CHECK_EQ(put_chain_n(p.c, 0, 10, NULL), 0);	/* the oldest: LRU would take it */
	tl_sleep_ms(5);
	for (int ch = 1; ch < 23; ch++)
		CHECK_EQ(put_chain_n(p.c, ch, 10, NULL), 0);
	ckey(k, 1, 8);
	CHECK_EQ(tl_remove(p.c, k, false), 0);		/* c001-009 extends nothing now */
	tl_sleep_ms(5);
	CHECK_EQ(tl_put1(p.c, "x", VLEN, NULL), 0);	/* 230 of 255: a round of 5 */
	tl_settle_evictions(p.node, p.c);
	ckey(k, 1, 9);
	CHECK_EQ(tl_exists(p.c, k), 0);
	CHECK(metric(&p.m, "kvpool_master_orphans_evicted_total") == 1, "orphan counted");
	bool prefix;
	struct tl_info info;
	int n0 = chain_left(p.c, 0, 10, &prefix);
	CHECK_EQ(tl_info(p.c, &info), 0);
	CHECK(prefix && info.evictions > 1 && n0 == 10 - (int)(info.evictions - 1),
	      "the orphan went, then the oldest chain's tail: %d left, %llu evicted", n0,
	      (unsigned long long)info.evictions);
	pool_stop(&p);
}

/* A batch put into a full pool without background rounds (high watermark
 * 1.0): the put makes room for every one of its blocks, however many
 * FREE round trips that takes. With everything leased: ENOSPC at once. */
static void test_put_makes_room(void)
{
	struct tl_master m;

	tl_start_master(&m, "[master]\neviction_high_watermark = 1.0\neviction_ratio = 0\n"
			    "lease_ttl = 60s\n");
	struct tl_conn *n = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	n->auto_free = true;	/* one connection: its FREEs are answered while it waits */
	REQUIRE(tl_mount(n, "pm", "h", SEG_SIZE, 1, ALIGN, NULL) > 0, "mount");
	for (int ch = 0; ch < 5; ch++)
		CHECK_EQ(put_chain_n(n, ch, 51, NULL), 0);	/* 255: full */
	struct tl_info info;
	CHECK_EQ(tl_info(n, &info), 0);
	CHECK_EQ(info.bytes_used, SEG_SIZE - ALIGN);
	CHECK_EQ(put_chain_n(n, 5, 200, NULL), 0);		/* every one of 200 */
	CHECK_EQ(tl_info(n, &info), 0);
	CHECK(info.evictions >= 200, "evictions %llu", (unsigned long long)info.evictions);
	bool prefix;
	CHECK_EQ(chain_left(n, 5, 200, &prefix), 200);
	/* lease all that is there: nothing evictable, the put fails at once */
	struct tl_obj g;
	char k[16];
	for (int ch = 0; ch < 6; ch++)
		for (int i = 0; i < 200; i++) {
			ckey(k, ch, i);
			tl_get1(n, k, &g);
		}
	uint64_t t0 = tl_now_ms();
	struct tl_obj o;
	CHECK_EQ(tl_put_start1(n, "nope", VLEN, 1, 0, &o), KVP_ENOSPC);
	CHECK(tl_now_ms() - t0 < 1500, "no wait when nothing is evictable");
	tl_conn_close(n);
	tl_stop_master(&m);
}

/* With a spill tier, memory rounds demote the tails: memory holds a
 * prefix of each chain, the spill tier the rest. */
static void test_spill_tails(void)
{
	struct tl_master m;

	tl_start_master(&m, "[master]\neviction_high_watermark = 0.9\neviction_ratio = 0.5\n"
			    "lease_ttl = 50ms\n");
	struct tl_conn *node = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	REQUIRE(tl_mount_spill(node, "sp", "h", SEG_SIZE, 2, ALIGN, 1ull << 30, NULL) > 0,
		"mount");
	struct tl_conn *c = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "h");
	for (int ch = 0; ch < 12; ch++)
		CHECK_EQ(put_chain_n(c, ch, 20, NULL), 0);
	uint64_t spill = ALIGN, demoted = 0;
	for (uint64_t end = tl_now_ms() + 5000; tl_now_ms() < end;) {
		struct tl_frame *f = tl_next_request(node, 200);
		if (!f)
			break;
		struct rbuf r;
		struct wbuf b;
		rb_init(&r, f->body, f->h.body_len);
		wb_init(&b);
		rb_u32(&r);
		uint32_t cnt = rb_u32(&r);
		if (f->h.opcode == WIRE_OP_DEMOTE) {
			wb_u32(&b, cnt);
			for (uint32_t i = 0; i < cnt; i++) {
				wb_i32(&b, 0);
				wb_u64(&b, spill);
				wb_u64(&b, ALIGN);
				spill += ALIGN;
				demoted++;
			}
		}
		tl_reply(node, f, 0, b.p, b.len);
		wb_free(&b);
		tl_frame_free(f);
	}
	CHECK(demoted >= 100, "demoted %llu", (unsigned long long)demoted);
	int mixed = 0;
	for (int ch = 0; ch < 12; ch++) {
		bool on_disk = false;
		for (int i = 0; i < 20; i++) {
			char k[16];
			struct tl_obj s;
			ckey(k, ch, i);
			CHECK_EQ(tl_stat1(c, k, &s), 0);	/* nothing lost */
			bool disk = s.nrep == 1 && s.rep[0].tier == KVP_TIER_DISK;
			CHECK(!on_disk || disk, "chain %d: block %d in memory after one on disk",
			      ch, i);
			on_disk |= disk;
			mixed += disk;
		}
	}
	CHECK((uint64_t)mixed == demoted, "%d on disk", mixed);
	tl_conn_close(c);
	tl_conn_close(node);
	tl_stop_master(&m);
}

int main(void)
{
	test_tail_first("reuse");
	test_tail_first("lru");
	test_lease_pin();
	test_ghost();
	test_orphans();
	test_put_makes_room();
	test_spill_tails();
	return tl_done();
}

/* t_master_promote: [spill] promote_on_hit in the master, against a fake
 * node. A GET of an object whose only replica is on disk still answers
 * with the disk replica and sends PROMOTE (spill offset, generation, a
 * memory extent the master allocated in the same segment); the node's OK
 * flips the replica to memory, and the spill copy is FREEd (tier 1) only
 * once every lease granted while it was the replica has run out. Also: one
 * PROMOTE per object at a time; a failed PROMOTE FREEs the memory extent
 * and keeps the disk replica (or drops it when the copy is unreadable); an
 * object removed during its promotion has its memory extent FREEd; no
 * promotion when memory is at the watermark; none with the key off; after
 * a re-mount the retired spill copy is rejected, not adopted.
 */
#include "testlib.h"

#include "extent.h"

#define ALIGN 4096
#define BLOCKS 256
#define SEG_SIZE ((uint64_t)BLOCKS * ALIGN)
#define VLEN (ALIGN - 64 - 16)
#define LEASE_MS 300
#define MAX_LOG 4096

struct free_rec {
	uint8_t tier;
	uint64_t off, generation, at_ms;
};

struct prom_rec {
	uint64_t spill_off, generation, off, alloc_len;
};

struct fake_node {
	struct tl_conn *c;
	uint32_t seg;
	uint64_t next_spill;		/* spill offsets handed out by DEMOTE */
	int32_t promote_status;		/* answer to every PROMOTE item */
	bool hold_promote;		/* keep the next PROMOTE unanswered */
	struct tl_frame *held;
	bool bad_frame;
	struct free_rec frees[MAX_LOG];
	size_t nfrees;
	struct prom_rec proms[MAX_LOG];
	size_t nproms;
};

static void answer_promote(struct fake_node *fn, struct tl_frame *f, int32_t status)
{
	struct rbuf r;
	struct wbuf b;

	rb_init(&r, f->body, f->h.body_len);
	wb_init(&b);
	rb_u32(&r);
	uint32_t n = rb_u32(&r);
	wb_u32(&b, n);
	for (uint32_t i = 0; i < n; i++)
		wb_status(&b, status);
	tl_reply(fn->c, f, 0, b.p, b.len);
	wb_free(&b);
}

/* The next request from the master within timeout_ms, or NULL. Only the
 * wait is bounded by timeout_ms: once bytes are in, the frame is read with
 * a long deadline (tl_next_request's own deadline could expire between a
 * frame's header and its body and lose the frame). */
static struct tl_frame *next_req(struct tl_conn *c, unsigned timeout_ms)
{
	uint64_t end = tl_now_ms() + timeout_ms;

	for (;;) {
		if (c->queue)		/* queued while a call waited for its reply */
			return tl_next_request(c, 1000);
		uint64_t now = tl_now_ms();
		struct pollfd pf = { .fd = c->fd, .events = POLLIN };
		if (now >= end || poll(&pf, 1, (int)(end - now)) <= 0)
			return NULL;
		struct tl_frame *f;
		if (tl_read_frame(c, &f, 5000))
			return NULL;
		if (!(f->h.flags & WIRE_F_REPLY))
			return f;
		tl_frame_free(f);
	}
}

/* Answers the master's requests for up to ms, until quiet for quiet_ms. */
static void serve_q(struct fake_node *fn, unsigned ms, unsigned quiet_ms)
{
	uint64_t end = tl_now_ms() + ms;
	struct tl_frame *f;

	while (tl_now_ms() < end && (f = next_req(fn->c, quiet_ms))) {
		struct rbuf r;
		struct wbuf b;
		rb_init(&r, f->body, f->h.body_len);
		wb_init(&b);
		uint32_t seg = rb_u32(&r);
		uint32_t n = rb_u32(&r);
		if (seg != fn->seg)
			fn->bad_frame = true;
		if (f->h.opcode == WIRE_OP_DEMOTE) {
			wb_u32(&b, n);
			for (uint32_t i = 0; i < n; i++) {
				rb_u64(&r);
				rb_u64(&r);
				wb_status(&b, 0);
				wb_u64(&b, fn->next_spill);
				wb_u64(&b, ALIGN);
				fn->next_spill += ALIGN;
			}
		} else if (f->h.opcode == WIRE_OP_FREE) {
			for (uint32_t i = 0; i < n; i++) {
				struct free_rec fr = { .tier = rb_u8(&r) };
				fr.off = rb_u64(&r);
				fr.generation = rb_u64(&r);
				fr.at_ms = tl_now_ms();
				if (fn->nfrees < MAX_LOG)
					fn->frees[fn->nfrees++] = fr;
			}
		} else if (f->h.opcode == WIRE_OP_PROMOTE) {
			for (uint32_t i = 0; i < n; i++) {
				struct prom_rec p;
				p.spill_off = rb_u64(&r);
				p.generation = rb_u64(&r);
				p.off = rb_u64(&r);
				p.alloc_len = rb_u64(&r);
				if (fn->nproms < MAX_LOG)
					fn->proms[fn->nproms++] = p;
			}
			if (!rb_done(&r))
				fn->bad_frame = true;
			if (fn->hold_promote && !fn->held) {
				fn->held = f;
				wb_free(&b);
				continue;
			}
			answer_promote(fn, f, fn->promote_status);
			tl_frame_free(f);
			wb_free(&b);
			continue;
		} else {
			fn->bad_frame = true;
		}
		if (!rb_done(&r))
			fn->bad_frame = true;
		tl_reply(fn->c, f, 0, b.p, b.len);
		wb_free(&b);
		tl_frame_free(f);
	}
}

static void serve(struct fake_node *fn, unsigned ms)
{
	serve_q(fn, ms, 200);
}

/* The FREE of (tier, off) logged from index `from` on, or NULL. */
static const struct free_rec *find_free(const struct fake_node *fn, size_t from, uint8_t tier,
					uint64_t off)
{
	for (size_t i = from; i < fn->nfrees; i++)
		if (fn->frees[i].tier == tier && fn->frees[i].off == off)
			return &fn->frees[i];
	return NULL;
}

/* Serves until that FREE arrives (at most ms). */
static const struct free_rec *wait_free(struct fake_node *fn, size_t from, uint8_t tier,
					uint64_t off, unsigned ms)
{
	uint64_t end = tl_now_ms() + ms;
	const struct free_rec *fr;

	while (!(fr = find_free(fn, from, tier, off)) && tl_now_ms() < end)
		serve_q(fn, 50, 20);
	return fr;
}

/* Serves until n PROMOTE items have arrived in all (at most ms). */
static bool wait_proms(struct fake_node *fn, size_t n, unsigned ms)
{
	uint64_t end = tl_now_ms() + ms;

	while (fn->nproms < n && tl_now_ms() < end)
		serve_q(fn, 50, 20);
	return fn->nproms >= n;
}

/* STAT of key until its single replica has that tier (the node's answer
 * and the client's STAT arrive on different connections). */
static bool wait_tier(struct fake_node *fn, struct tl_conn *c, const char *k, unsigned tier,
		      struct tl_obj *g)
{
	for (int i = 0; i < 100; i++) {
		if (tl_stat1(c, k, g) == 0 && g->nrep == 1 && g->rep[0].tier == tier)
			return true;
		serve_q(fn, 20, 10);
	}
	return false;
}

static void key(char *k, int i)
{
	snprintf(k, 16, "obj%05d", i);
}

static uint64_t metric(int http_port, const char *name)
{
	char *body = NULL;
	uint64_t v = UINT64_MAX;

	if (tl_http(http_port, "GET", "/metrics", NULL, 0, &body, NULL) == 200 && body) {
		char pat[128];
		snprintf(pat, sizeof(pat), "\n%s ", name);
		const char *p = strstr(body, pat);
		if (p)
			v = strtoull(p + strlen(pat), NULL, 10);
	}
	free(body);
	return v;
}

/* A master (promote_on_hit as given), a fake node with a segment of 255
 * data blocks and a large spill tier, 200 one-block objects of which 0..49
 * were read; 40 more puts cross the 90% watermark and a round (50% of the
 * capacity) demotes the cold ones. */
static void setup(struct tl_master *m, struct fake_node *fn, struct tl_conn **c, bool promote)
{
	char k[16], ini[256];
	struct tl_obj g;

	snprintf(ini, sizeof(ini),
		 "[master]\neviction_high_watermark = 0.9\neviction_ratio = 0.5\n"
		 "lease_ttl = %dms\n[spill]\npromote_on_hit = %s\n", LEASE_MS,
		 promote ? "true" : "false");
	tl_start_master(m, ini);
	memset(fn, 0, sizeof(*fn));
	fn->c = tl_client(m->port, WIRE_ROLE_NODE, NULL, "h");
	fn->next_spill = ALIGN;
	int64_t seg = tl_mount_spill(fn->c, "pm", "h", SEG_SIZE, 7, ALIGN, 1ull << 30, NULL);
	REQUIRE(seg > 0, "mount");
	fn->seg = (uint32_t)seg;
	*c = tl_client(m->port, WIRE_ROLE_CLIENT, NULL, "h");
	for (int i = 0; i < 200; i++) {
		key(k, i);
		REQUIRE(tl_put1(*c, k, VLEN, NULL) == 0, "put %s", k);
	}
	tl_sleep_ms(20);
	for (int i = 0; i < 50; i++) {
		key(k, i);
		REQUIRE(tl_get1(*c, k, &g) == 0, "get");
	}
	tl_sleep_ms(LEASE_MS + 50);			/* the leases end */
	for (int i = 200; i < 240; i++) {
		key(k, i);
		REQUIRE(tl_put1(*c, k, VLEN, NULL) == 0, "put %s", k);
	}
	serve(fn, 5000);
}

/* The next object from *i on that lives on disk only (STAT: no promotion). */
static bool next_disk(struct tl_conn *c, int *i, char *k, struct tl_obj *g)
{
	for (; *i < 240; (*i)++) {
		key(k, *i);
		if (tl_stat1(c, k, g) == 0 && g->nrep == 1 && g->rep[0].tier == KVP_TIER_DISK) {
			(*i)++;
			return true;
		}
	}
	return false;
}

static void teardown(struct tl_master *m, struct fake_node *fn, struct tl_conn *c)
{
	CHECK(!fn->bad_frame, "the master sent a malformed or misaddressed request");
	tl_frame_free(fn->held);
	tl_conn_close(c);
	tl_conn_close(fn->c);
	int st = tl_stop_master(m);	/* under SANITIZE=1 a leak fails the exit status */
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "master exit status %#x", st);
	if (tl_failures)
		tl_dump_log(m->log);
}

/* A disk hit is promoted; the spill copy outlives every disk lease. */
static void test_promote(void)
{
	struct tl_master m;
	struct fake_node fn;
	struct tl_conn *c;
	struct tl_obj g, g2, st;
	struct tl_info before, after;
	char k[16];
	int next = 50;

	setup(&m, &fn, &c, true);
	REQUIRE(next_disk(c, &next, k, &st), "a demoted object");
	uint64_t soff = st.rep[0].off;
	CHECK_EQ(tl_info(c, &before), 0);
	CHECK_EQ(fn.nproms, 0);				/* STAT promotes nothing */

	/* the GET is answered with the disk replica; the PROMOTE is held
	 * while a second GET (also the disk replica) extends the lease */
	fn.hold_promote = true;
	uint64_t t0 = tl_now_ms();
	size_t nf0 = fn.nfrees;	/* the promoted extent may be one FREEd before (a demotion's) */
	CHECK_EQ(tl_get1(c, k, &g), 0);
	CHECK(g.nrep == 1 && g.rep[0].tier == KVP_TIER_DISK && g.rep[0].off == soff,
	      "the triggering GET names the disk replica");
	REQUIRE(wait_proms(&fn, 1, 3000), "PROMOTE sent");
	const struct prom_rec *p = &fn.proms[0];
	CHECK_EQ(p->spill_off, soff);
	CHECK_EQ(p->generation, g.generation);
	CHECK(p->off >= ALIGN && p->off % ALIGN == 0 && p->off + p->alloc_len <= SEG_SIZE,
	      "memory extent inside the segment: %llu+%llu", (unsigned long long)p->off,
	      (unsigned long long)p->alloc_len);
	CHECK(p->alloc_len >= ext_size(8, VLEN), "memory extent holds the object");
	CHECK_EQ(tl_info(c, &after), 0);
	CHECK_EQ(after.bytes_used, before.bytes_used + p->alloc_len);
	tl_sleep_ms(LEASE_MS / 2);
	uint64_t t1 = tl_now_ms();
	CHECK_EQ(tl_get1(c, k, &g2), 0);
	CHECK(g2.nrep == 1 && g2.rep[0].tier == KVP_TIER_DISK, "disk replica until the node answers");
	serve_q(&fn, 100, 50);
	CHECK_EQ(fn.nproms, 1);				/* one PROMOTE per object */
	REQUIRE(fn.held, "PROMOTE held");
	answer_promote(&fn, fn.held, 0);
	tl_frame_free(fn.held);
	fn.held = NULL;
	fn.hold_promote = false;

	CHECK(wait_tier(&fn, c, k, KVP_TIER_MEM, &st), "flipped to memory");
	CHECK(st.rep[0].off == p->off && st.rep[0].len == p->alloc_len, "the promoted extent");
	CHECK_EQ(tl_get1(c, k, &g), 0);
	CHECK(g.nrep == 1 && g.rep[0].tier == KVP_TIER_MEM && g.rep[0].off == p->off,
	      "the next GET is served from memory");
	const struct free_rec *fr = wait_free(&fn, 0, KVP_TIER_DISK, soff, 5000);
	CHECK(fr, "spill copy FREEd once the leases ended");
	if (fr) {
		CHECK_EQ(fr->generation, g.generation);
		CHECK(fr->at_ms >= t1 + LEASE_MS, "FREE at %llu ms, the last disk lease ended at >= %llu",
		      (unsigned long long)(fr->at_ms - t0), (unsigned long long)(t1 + LEASE_MS - t0));
	}
	CHECK(find_free(&fn, nf0, KVP_TIER_MEM, p->off) == NULL, "the promoted extent stays");
	CHECK_EQ(metric(m.http_port, "kvpool_master_promotions_total"), 1);
	CHECK_EQ(metric(m.http_port, "kvpool_master_promote_failures_total"), 0);

	/* a GET of a memory object promotes nothing */
	key(k, 10);
	CHECK_EQ(tl_get1(c, k, &g), 0);
	CHECK(g.rep[0].tier == KVP_TIER_MEM, "obj00010 in memory");
	serve_q(&fn, 200, 100);
	CHECK_EQ(fn.nproms, 1);

	/* ---- a failed PROMOTE keeps the disk replica, FREEs the memory extent;
	 * the next hit tries again ---- */
	REQUIRE(next_disk(c, &next, k, &st), "a demoted object");
	soff = st.rep[0].off;
	fn.promote_status = KVP_EIO;
	size_t nf = fn.nfrees;
	CHECK_EQ(tl_get1(c, k, &g), 0);
	REQUIRE(wait_proms(&fn, 2, 3000), "PROMOTE sent");
	uint64_t target = fn.proms[1].off;
	CHECK(wait_free(&fn, nf, KVP_TIER_MEM, target, 3000), "failed promotion: memory extent FREEd");
	CHECK(tl_stat1(c, k, &st) == 0 && st.nrep == 1 && st.rep[0].tier == KVP_TIER_DISK &&
	      st.rep[0].off == soff, "failed promotion: still on disk");
	CHECK(find_free(&fn, nf, KVP_TIER_DISK, soff) == NULL, "spill copy kept");
	CHECK_EQ(metric(m.http_port, "kvpool_master_promote_failures_total"), 1);
	fn.promote_status = 0;
	CHECK_EQ(tl_get1(c, k, &g), 0);
	REQUIRE(wait_proms(&fn, 3, 3000), "PROMOTE sent again");
	CHECK(wait_tier(&fn, c, k, KVP_TIER_MEM, &st), "second try promoted");

	/* the node cannot read the spill copy back: that replica is gone */
	REQUIRE(next_disk(c, &next, k, &st), "a demoted object");
	soff = st.rep[0].off;
	fn.promote_status = KVP_ECHECKSUM;
	nf = fn.nfrees;
	CHECK_EQ(tl_get1(c, k, &g), 0);
	REQUIRE(wait_proms(&fn, 4, 3000), "PROMOTE sent");
	target = fn.proms[3].off;
	CHECK(wait_free(&fn, nf, KVP_TIER_MEM, target, 3000), "memory extent FREEd");
	CHECK(wait_free(&fn, nf, KVP_TIER_DISK, soff, 3000), "damaged spill copy FREEd");
	CHECK_EQ(tl_exists(c, k), 0);
	fn.promote_status = 0;

	/* ---- removed while the copy runs: the memory extent is FREEd when
	 * the node answers, the space comes back ---- */
	REQUIRE(next_disk(c, &next, k, &st), "a demoted object");
	soff = st.rep[0].off;
	serve(&fn, 300);
	CHECK_EQ(tl_info(c, &before), 0);
	fn.hold_promote = true;
	nf = fn.nfrees;
	CHECK_EQ(tl_get1(c, k, &g), 0);
	REQUIRE(wait_proms(&fn, 5, 3000), "PROMOTE sent");
	target = fn.proms[4].off;
	CHECK_EQ(tl_remove(c, k, false), KVP_ELEASED);
	CHECK_EQ(tl_remove(c, k, true), 0);
	CHECK(wait_free(&fn, nf, KVP_TIER_DISK, soff, 3000), "spill copy FREEd by the remove");
	CHECK(find_free(&fn, nf, KVP_TIER_MEM, target) == NULL,
	      "memory extent not FREEd while the node may be writing it");
	REQUIRE(fn.held, "PROMOTE held");
	answer_promote(&fn, fn.held, 0);
	tl_frame_free(fn.held);
	fn.held = NULL;
	fn.hold_promote = false;
	CHECK(wait_free(&fn, nf, KVP_TIER_MEM, target, 3000), "memory extent of a removed object FREEd");
	serve(&fn, 300);
	CHECK_EQ(tl_info(c, &after), 0);
	CHECK_EQ(after.bytes_used, before.bytes_used);
	CHECK_EQ(tl_exists(c, k), 0);
	CHECK_EQ(metric(m.http_port, "kvpool_master_promotions_total"), 2);

	/* ---- memory at the watermark: no promotion (never evicts for one) ---- */
	serve(&fn, 300);
	CHECK_EQ(tl_info(c, &before), 0);
	uint64_t limit = (uint64_t)(0.9 * (double)before.capacity);	/* 229.5 blocks */
	int extra = 0;
	while (before.bytes_used + ALIGN <= limit && extra < 200) {
		key(k, 1000 + extra++);
		REQUIRE(tl_put1(c, k, VLEN, NULL) == 0, "fill %s", k);
		before.bytes_used += ALIGN;
	}
	serve(&fn, 300);
	CHECK_EQ(tl_info(c, &after), 0);
	CHECK_EQ(after.bytes_used, before.bytes_used);	/* no round started */
	CHECK_EQ(after.evictions, before.evictions);
	REQUIRE(next_disk(c, &next, k, &st), "a demoted object");
	size_t np = fn.nproms;
	CHECK_EQ(tl_get1(c, k, &g), 0);
	serve_q(&fn, 300, 100);
	CHECK_EQ(fn.nproms, np);
	CHECK(tl_stat1(c, k, &st) == 0 && st.rep[0].tier == KVP_TIER_DISK, "stays on disk");
	CHECK(metric(m.http_port, "kvpool_master_promote_skipped_total") >= 1, "skip counted");
	CHECK_EQ(tl_info(c, &after), 0);
	CHECK_EQ(after.evictions, before.evictions);
	CHECK_EQ(after.demotions, before.demotions);
	/* room again: the next hit promotes */
	char fk[16];
	key(fk, 1000);
	CHECK_EQ(tl_remove(c, fk, true), 0);
	key(fk, 1001);
	CHECK_EQ(tl_remove(c, fk, true), 0);
	serve(&fn, 300);
	CHECK_EQ(tl_get1(c, k, &g), 0);
	CHECK(wait_proms(&fn, np + 1, 3000), "promoted once there is room");
	CHECK(wait_tier(&fn, c, k, KVP_TIER_MEM, &st), "in memory");

	teardown(&m, &fn, c);
}

/* After a re-mount, the spill copy a promotion retired is rejected even
 * when reported first; the memory extent is adopted. */
static void test_remount(void)
{
	struct tl_master m;
	struct fake_node fn;
	struct tl_conn *c;
	struct tl_obj g, st;
	char k[16];
	int next = 50;

	setup(&m, &fn, &c, true);
	REQUIRE(next_disk(c, &next, k, &st), "a demoted object");
	uint64_t soff = st.rep[0].off, slen = st.rep[0].len;
	CHECK_EQ(tl_get1(c, k, &g), 0);
	REQUIRE(wait_proms(&fn, 1, 3000), "PROMOTE sent");
	struct prom_rec p = fn.proms[0];
	/* From here on the fake node answers nothing: the spill copy waits
	 * for the lease, or its FREE is sent and unanswered, when the node
	 * re-mounts. */
	bool flipped = false;
	for (int i = 0; i < 100 && !flipped; i++) {
		flipped = tl_stat1(c, k, &st) == 0 && st.nrep == 1 && st.rep[0].tier == KVP_TIER_MEM;
		if (!flipped)
			tl_sleep_ms(20);
	}
	REQUIRE(flipped, "promoted");

	struct tl_conn *n2 = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	int64_t seg = tl_mount_spill(n2, "pm", "h", SEG_SIZE, 7, ALIGN, 1ull << 30, NULL);
	CHECK_EQ(seg, (int64_t)fn.seg);
	struct tl_extent ex[2] = {
		{ .key = k, .tier = KVP_TIER_DISK, .off = soff, .alloc_len = slen, .value_len = VLEN,
		  .checksum = g.checksum, .generation = g.generation, .put_time_ns = 1 },
		{ .key = k, .tier = KVP_TIER_MEM, .off = p.off, .alloc_len = p.alloc_len,
		  .value_len = VLEN, .checksum = g.checksum, .generation = g.generation,
		  .put_time_ns = 1 },
	};
	uint32_t adopted = 0, rejected = 0;
	CHECK_EQ(tl_report(n2, (uint32_t)seg, 2, ex, &adopted, &rejected), 0);
	CHECK(adopted == 1 && rejected == 1, "adopted %u rejected %u", adopted, rejected);
	CHECK(tl_stat1(c, k, &st) == 0 && st.nrep == 1 && st.rep[0].tier == KVP_TIER_MEM &&
	      st.rep[0].off == p.off, "the memory extent is the replica");
	tl_conn_close(n2);
	teardown(&m, &fn, c);
}

/* With promote_on_hit off (the default) a disk hit stays on disk. */
static void test_off(void)
{
	struct tl_master m;
	struct fake_node fn;
	struct tl_conn *c;
	struct tl_obj g, st;
	char k[16];
	int next = 50;

	setup(&m, &fn, &c, false);
	REQUIRE(next_disk(c, &next, k, &st), "a demoted object");
	CHECK_EQ(tl_get1(c, k, &g), 0);
	CHECK_EQ(tl_get1(c, k, &g), 0);
	serve_q(&fn, 300, 100);
	CHECK_EQ(fn.nproms, 0);
	CHECK(tl_stat1(c, k, &st) == 0 && st.rep[0].tier == KVP_TIER_DISK, "stays on disk");
	CHECK_EQ(metric(m.http_port, "kvpool_master_promotions_total"), 0);
	teardown(&m, &fn, c);
}

int main(void)
{
	test_promote();
	test_remount();
	test_off();
	return tl_done();
}

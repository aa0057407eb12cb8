/* t_master_demote: eviction demotes cold memory replicas to the node's
 * spill tier (DEMOTE) while it has room: the objects stay readable with a
 * tier-1 replica, their memory extents are FREEd; a failed DEMOTE evicts
 * instead; a full spill tier gets no more DEMOTEs and, above the watermark
 * (HEARTBEAT's spill_used), loses its coldest spill replicas (FREE tier 1).
 * A fake node answers the master's requests. */
#include "testlib.h"

#define ALIGN 4096
#define BLOCKS 256
#define SEG_SIZE ((uint64_t)BLOCKS * ALIGN)
#define VLEN (ALIGN - 64 - 16)

struct fake_node {
	struct tl_conn *c;
	int32_t demote_status;		/* answer to every DEMOTE item */
	uint64_t next_spill;		/* spill offsets handed out */
	uint64_t demote_items, free_mem, free_disk;
	int64_t spill_live, spill_max;	/* spill extents held, the most at once */
	uint64_t spill_offs[1024];	/* handed-out spill offsets */
	size_t nspill;
};

/* Answers the master's requests for up to ms (until quiet for 200 ms). */
static void serve(struct fake_node *fn, unsigned ms)
{
	uint64_t end = tl_now_ms() + ms;
	struct tl_frame *f;

	while (tl_now_ms() < end && (f = tl_next_request(fn->c, 200))) {
		struct rbuf r;
		struct wbuf b;
		rb_init(&r, f->body, f->h.body_len);
		wb_init(&b);
		rb_u32(&r);				/* segment */
		uint32_t n = rb_u32(&r);
		if (f->h.opcode == WIRE_OP_DEMOTE) {
			wb_u32(&b, n);
			for (uint32_t i = 0; i < n; i++) {
				rb_u64(&r);		/* off */
				rb_u64(&r);		/* generation */
				wb_status(&b, fn->demote_status);
				wb_u64(&b, fn->next_spill);
				wb_u64(&b, ALIGN);
				if (fn->demote_status == 0 && fn->nspill < 1024)
					fn->spill_offs[fn->nspill++] = fn->next_spill;
				if (fn->demote_status == 0 && ++fn->spill_live > fn->spill_max)
					fn->spill_max = fn->spill_live;
				fn->next_spill += ALIGN;
				fn->demote_items++;
			}
		} else if (f->h.opcode == WIRE_OP_FREE) {
			for (uint32_t i = 0; i < n; i++) {
				uint8_t tier = rb_u8(&r);
				rb_u64(&r);
				rb_u64(&r);
				if (tier) {
					fn->free_disk++;
					fn->spill_live--;
				} else
					fn->free_mem++;
			}
		}
		CHECK(rb_done(&r), "%s request body", wire_op_name(f->h.opcode));
		tl_reply(fn->c, f, 0, b.p, b.len);
		wb_free(&b);
		tl_frame_free(f);
	}
}

static void key(char *k, int i)
{
	snprintf(k, 16, "obj%05d", i);
}

static int count_exist(struct tl_conn *c, int from, int to)
{
	char k[16];
	int n = 0;

	for (int i = from; i < to; i++) {
		key(k, i);
		n += tl_exists(c, k) == 1;
	}
	return n;
}

/* A master, a fake node with a segment and a spill tier of spill bytes, 200
 * objects of which 0..49 were read; then 40 more puts cross the 90%
 * watermark (a round covers 50% of the capacity). */
static void setup(struct tl_master *m, struct fake_node *fn, struct tl_conn **c, uint64_t spill,
		  int32_t status, int64_t *seg)
{
	char k[16];
	struct tl_obj g;

	tl_start_master(m, "[master]\neviction_high_watermark = 0.9\neviction_ratio = 0.5\n"
			   "lease_ttl = 100ms\n");
	memset(fn, 0, sizeof(*fn));
	fn->c = tl_client(m->port, WIRE_ROLE_NODE, NULL, "h");
	fn->demote_status = status;
	fn->next_spill = ALIGN;
	*seg = tl_mount_spill(fn->c, "dm", "h", SEG_SIZE, 7, ALIGN, spill, NULL);
	REQUIRE(*seg > 0, "mount");
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
	tl_sleep_ms(150);				/* the leases end */
	for (int i = 200; i < 240; i++) {
		key(k, i);
		REQUIRE(tl_put1(*c, k, VLEN, NULL) == 0, "put %s", k);
	}
	serve(fn, 5000);
}

static void test_demote(void)
{
	struct tl_master m;
	struct fake_node fn;
	struct tl_conn *c;
	int64_t seg;
	struct tl_info info;
	struct tl_obj g;
	char k[16];

	setup(&m, &fn, &c, 1ull << 30, 0, &seg);
	CHECK_EQ(tl_info(c, &info), 0);
	CHECK(info.demotions >= 127, "demotions %llu", (unsigned long long)info.demotions);
	CHECK_EQ(info.evictions, 0);
	CHECK_EQ(count_exist(c, 0, 240), 240);		/* nothing lost */
	CHECK_EQ(fn.free_mem, info.demotions);		/* memory extents FREEd */
	CHECK(info.bytes_used <= (uint64_t)(BLOCKS - 1 - 127) * ALIGN, "memory back: %llu",
	      (unsigned long long)info.bytes_used);
	/* a cold object now lives in the spill tier, a recently read one in memory */
	int disk = 0;
	for (int i = 50; i < 200; i++) {
		key(k, i);
		CHECK_EQ(tl_get1(c, k, &g), 0);
		if (g.nrep == 1 && g.rep[0].tier == KVP_TIER_DISK) {
			disk++;
			bool known = false;
			for (size_t j = 0; j < fn.nspill; j++)
				known |= fn.spill_offs[j] == g.rep[0].off;
			CHECK(known && g.rep[0].len == ALIGN, "spill replica where the node put it");
		}
	}
	CHECK_EQ(disk, (int)info.demotions);
	key(k, 10);
	CHECK_EQ(tl_get1(c, k, &g), 0);
	CHECK(g.nrep == 1 && g.rep[0].tier == 0, "recently read: memory");

	/* removing a demoted object FREEs its spill copy */
	uint64_t fd = fn.free_disk;
	key(k, 60);
	CHECK_EQ(tl_stat1(c, k, &g), 0);
	if (g.rep[0].tier == KVP_TIER_DISK) {
		CHECK_EQ(tl_remove(c, k, true), 0);
		serve(&fn, 1000);
		CHECK_EQ(fn.free_disk, fd + 1);
	}

	char *body = NULL;
	CHECK_EQ(tl_http(m.http_port, "GET", "/metrics", NULL, 0, &body, NULL), 200);
	char line[64];
	snprintf(line, sizeof(line), "kvpool_master_demotions_total %llu\n",
		 (unsigned long long)info.demotions);
	CHECK(body && strstr(body, line), "%s", line);
	free(body);

	/* the spill tier passes the watermark (HEARTBEAT): the coldest spill
	 * replicas are dropped and their copies FREEd */
	fd = fn.free_disk;
	int before = count_exist(c, 0, 240);
	CHECK_EQ(tl_heartbeat_spill(fn.c, (uint32_t)seg, 1ull << 30), 0);
	serve(&fn, 3000);
	CHECK(fn.free_disk > fd, "spill replicas FREEd (%llu)", (unsigned long long)fn.free_disk);
	CHECK(count_exist(c, 0, 240) < before, "objects only in the spill tier went");
	CHECK_EQ(count_exist(c, 0, 50), 50);		/* the memory ones stay */

	tl_conn_close(c);
	tl_conn_close(fn.c);
	tl_stop_master(&m);
	if (tl_failures)
		tl_dump_log(m.log);
}

static void test_demote_fails(void)
{
	struct tl_master m;
	struct fake_node fn;
	struct tl_conn *c;
	int64_t seg;
	struct tl_info info;

	/* the node says ENOSPC: the master evicts instead */
	setup(&m, &fn, &c, 1ull << 30, KVP_ENOSPC, &seg);
	CHECK_EQ(tl_info(c, &info), 0);
	CHECK_EQ(info.demotions, 0);
	CHECK(info.evictions >= 127, "evictions %llu", (unsigned long long)info.evictions);
	CHECK(fn.demote_items >= 127, "DEMOTEs asked first");
	CHECK_EQ(count_exist(c, 0, 50), 50);
	CHECK_EQ(count_exist(c, 50, 200) + (int)info.evictions, 150);
	tl_conn_close(c);
	tl_conn_close(fn.c);
	tl_stop_master(&m);

	/* a spill tier of 16 blocks: never more than 16 spill extents at once
	 * (a disk round may free some while the memory round still runs),
	 * then plain eviction */
	setup(&m, &fn, &c, 16 * ALIGN, 0, &seg);
	CHECK_EQ(tl_info(c, &info), 0);
	CHECK(info.demotions >= 16, "demotions %llu", (unsigned long long)info.demotions);
	CHECK(fn.spill_max <= 16, "spill extents at once: %lld", (long long)fn.spill_max);
	CHECK(info.evictions >= 100, "evictions %llu", (unsigned long long)info.evictions);
	CHECK(info.evictions + info.demotions >= 127, "round done: %llu + %llu",
	      (unsigned long long)info.evictions, (unsigned long long)info.demotions);
	tl_conn_close(c);
	tl_conn_close(fn.c);
	tl_stop_master(&m);
	if (tl_failures)
		tl_dump_log(m.log);
}

int main(void)
{
	test_demote();
	test_demote_fails();
	return tl_done();
}

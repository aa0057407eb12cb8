/* t_master_evict: watermark eviction evicts the least recently read objects
 * (LRU), skips leased and pinned ones (pinned ones go last with
 * evict_soft_pinned), and a PUT_START that finds no room
 * evicts, waits for the node's FREE acks and succeeds; with nothing
 * evictable it fails with ENOSPC. A fake node answers FREEs. */
#include "testlib.h"

#define ALIGN 4096
#define BLOCKS 256			/* segment = 256 blocks, 255 usable */
#define SEG_SIZE ((uint64_t)BLOCKS * ALIGN)
#define VLEN (ALIGN - 64 - 16)		/* one block per object with keys <= 16 bytes */

static void key(char *k, int i)
{
	snprintf(k, 16, "obj%05d", i);
}

static int put_range(struct tl_conn *c, int from, int to)
{
	char k[16];
	int fails = 0;

	for (int i = from; i < to; i++) {
		key(k, i);
		if (tl_put1(c, k, VLEN, NULL) != 0)
			fails++;
	}
	return fails;
}

/* GETs of from..to-1 (their atime becomes now); how many failed. */
static int get_range(struct tl_conn *c, int from, int to)
{
	struct tl_obj g;
	char k[16];
	int fails = 0;

	for (int i = from; i < to; i++) {
		key(k, i);
		if (tl_get1(c, k, &g) != 0)
			fails++;
	}
	return fails;
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

static void test_lru(void)
{
	struct tl_master m;

	tl_start_master(&m, "[master]\neviction_high_watermark = 0.9\neviction_ratio = 0.5\n"
			    "lease_ttl = 100ms\n");
	struct tl_conn *node = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	REQUIRE(tl_mount(node, "lru", "h", SEG_SIZE, 1, ALIGN, NULL) > 0, "mount");
	struct tl_conn *c = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "h");

	CHECK_EQ(put_range(c, 0, 200), 0);		/* 200 of 255 blocks: below 90% */
	tl_sleep_ms(20);
	CHECK_EQ(get_range(c, 0, 50), 0);		/* read 0..49: recently used */
	tl_sleep_ms(150);				/* leases (100 ms) expire */
	struct tl_info info;
	CHECK_EQ(tl_info(c, &info), 0);
	CHECK_EQ(info.evictions, 0);
	CHECK_EQ(info.leases, 0);

	/* cross the watermark: a round evicts 50% of the capacity */
	CHECK_EQ(put_range(c, 200, 240), 0);
	tl_settle_evictions(node, c);
	CHECK_EQ(tl_info(c, &info), 0);
	CHECK(info.evictions >= 127, "evictions %llu", (unsigned long long)info.evictions);
	CHECK_EQ(count_exist(c, 0, 50), 50);		/* recently read: all kept */
	CHECK_EQ(count_exist(c, 200, 240), 40);		/* recently put: kept */
	int old = count_exist(c, 50, 200);
	CHECK_EQ(old + (int)info.evictions, 150);	/* only never-read ones went */
	CHECK(info.bytes_used <= (uint64_t)(BLOCKS - 127) * ALIGN,
	      "space reused after the FREE acks: used %llu", (unsigned long long)info.bytes_used);

	/* /metrics counts them too */
	char *body = NULL;
	CHECK_EQ(tl_http(m.http_port, "GET", "/metrics", NULL, 0, &body, NULL), 200);
	char line[64];
	snprintf(line, sizeof(line), "kvpool_master_evictions_total %llu",
		 (unsigned long long)info.evictions);
	CHECK(body && strstr(body, line), "metrics: %s", line);
	free(body);
	tl_conn_close(c);
	tl_conn_close(node);
	tl_stop_master(&m);
	if (tl_failures)
		tl_dump_log(m.log);
}

static void test_leased_pinned(void)
{
	struct tl_master m;

	tl_start_master(&m, "[master]\neviction_high_watermark = 0.9\neviction_ratio = 0.5\n"
			    "lease_ttl = 60s\n");
	struct tl_conn *node = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	REQUIRE(tl_mount(node, "lp", "h", SEG_SIZE, 2, ALIGN, NULL) > 0, "mount");
	struct tl_conn *c = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "h");
	char k[16];
	struct tl_obj g;

	CHECK_EQ(put_range(c, 0, 200), 0);
	for (int i = 0; i < 100; i++) {			/* 0..99 leased for 60 s */
		key(k, i);
		CHECK_EQ(tl_get1(c, k, &g), 0);
	}
	for (int i = 100; i < 150; i++) {		/* 100..149 pinned */
		key(k, i);
		CHECK_EQ(tl_pin(c, k, 60000), 0);
	}
	tl_sleep_ms(10);
	CHECK_EQ(put_range(c, 200, 231), 0);		/* over 90% */
	tl_settle_evictions(node, c);
	struct tl_info info;
	CHECK_EQ(tl_info(c, &info), 0);
	CHECK(info.evictions >= 50, "evictions %llu", (unsigned long long)info.evictions);
	CHECK_EQ(count_exist(c, 0, 100), 100);		/* leased survive */
	CHECK_EQ(count_exist(c, 100, 150), 50);		/* pinned survive */
	CHECK_EQ(count_exist(c, 150, 200), 0);		/* the oldest free ones went first */
	CHECK_EQ(info.leases, 100);
	tl_conn_close(c);
	tl_conn_close(node);
	tl_stop_master(&m);
}

/* evict_soft_pinned (Mooncake's allow_evict_soft_pinned_objects): when
 * nothing unpinned is left, pinned objects go; leased ones still never. */
static void test_evict_pinned(void)
{
	struct tl_master m;

	tl_start_master(&m, "[master]\neviction_high_watermark = 0.9\neviction_ratio = 0.3\n"
			    "lease_ttl = 60s\nevict_soft_pinned = true\n");
	struct tl_conn *node = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	REQUIRE(tl_mount(node, "ep", "h", SEG_SIZE, 4, ALIGN, NULL) > 0, "mount");
	struct tl_conn *c = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "h");
	char k[16];
	struct tl_obj g;

	CHECK_EQ(put_range(c, 0, 200), 0);
	for (int i = 0; i < 100; i++) {			/* 0..99 leased */
		key(k, i);
		CHECK_EQ(tl_get1(c, k, &g), 0);
	}
	for (int i = 100; i < 200; i++) {		/* 100..199 pinned */
		key(k, i);
		CHECK_EQ(tl_pin(c, k, 60000), 0);
	}
	CHECK_EQ(put_range(c, 200, 231), 0);		/* over 90%: 31 unpinned */
	tl_settle_evictions(node, c);
	struct tl_info info;
	CHECK_EQ(tl_info(c, &info), 0);
	CHECK(info.evictions > 31, "evictions %llu", (unsigned long long)info.evictions);
	CHECK_EQ(count_exist(c, 0, 100), 100);		/* leased survive */
	CHECK(count_exist(c, 100, 200) < 100, "pinned ones went once the rest had");
	tl_conn_close(c);
	tl_conn_close(node);
	tl_stop_master(&m);
}

static void test_put_evicts(void)
{
	struct tl_master m;

	/* high watermark 1.0: no background rounds, only the PUT_START path */
	tl_start_master(&m, "[master]\neviction_high_watermark = 1.0\neviction_ratio = 0.2\n"
			    "lease_ttl = 60s\n");
	/* one connection is node and client, so that the FREEs the parked
	 * PUT_START waits for are answered while we wait for its reply */
	struct tl_conn *n = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	n->auto_free = true;
	REQUIRE(tl_mount(n, "pe", "h", SEG_SIZE, 3, ALIGN, NULL) > 0, "mount");
	CHECK_EQ(put_range(n, 0, BLOCKS - 1), 0);	/* full */
	struct tl_obj o;
	struct tl_info info;
	CHECK_EQ(tl_info(n, &info), 0);
	CHECK_EQ(info.bytes_used, SEG_SIZE - ALIGN);
	uint64_t freed0 = n->frees_answered;
	CHECK_EQ(tl_put_start1(n, "newcomer", VLEN, 1, 0, &o), 0);
	CHECK(n->frees_answered > freed0, "the put waited for FREE acks");
	CHECK_EQ(tl_put_end1(n, "newcomer", o.generation, 1), 0);
	CHECK_EQ(tl_info(n, &info), 0);
	CHECK(info.evictions >= 50, "evictions %llu", (unsigned long long)info.evictions);

	/* now lease everything: nothing evictable -> ENOSPC, at once */
	CHECK_EQ(tl_put1(n, "filler", VLEN, NULL), 0);
	char k[16];
	struct tl_obj g;
	for (int i = 0; i < BLOCKS - 1; i++) {
		key(k, i);
		tl_get1(n, k, &g);
	}
	tl_get1(n, "newcomer", &g);
	tl_get1(n, "filler", &g);
	int filled = 0;
	for (int i = 0; i < BLOCKS; i++) {		/* fill the rest, leasing it */
		char x[16];
		snprintf(x, sizeof(x), "fill%04d", i);
		if (tl_put1(n, x, VLEN, NULL))
			break;
		tl_get1(n, x, &g);
		filled++;
	}
	CHECK(filled > 0, "filled the freed room");
	uint64_t freed1 = n->frees_answered;
	CHECK_EQ(tl_put_start1(n, "nope", VLEN, 1, 0, &o), KVP_ENOSPC);
	CHECK_EQ(n->frees_answered, freed1);		/* nothing was evicted */
	tl_conn_close(n);
	tl_stop_master(&m);
}

/* Over 256 evictable replicas a segment's victims come from its victim
 * heap (evict.c, vheap.h): the exact order, as in a small region. Groups
 * of 100 objects put 3 ms apart, the first four read: a round takes the
 * oldest never-read groups whole before any of a newer one, keeps every
 * read object, and the time it took shows in /metrics. Pinned objects are
 * passed over and, once their pin ends, are the next round's first
 * victims (the heap looks at what it passed over again). An EXISTS counts
 * as a read, so the checks themselves set the second round's order. */
static void test_exact(void)
{
	enum { N = 2048, G = 100 };	/* blocks: 2047 usable; objects a group */
	struct tl_master m;

	tl_start_master(&m, "[master]\neviction_high_watermark = 0.9\neviction_ratio = 0.1\n"
			    "lease_ttl = 100ms\n");
	struct tl_conn *node = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	REQUIRE(tl_mount(node, "exact", "h", (uint64_t)N * ALIGN, 1, ALIGN, NULL) > 0, "mount");
	struct tl_conn *c = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "h");
	char k[16];

	for (int g = 0; g < 18; g++) {			/* 1,800: 88%, below the watermark */
		CHECK_EQ(put_range(c, g * G, (g + 1) * G), 0);
		tl_sleep_ms(3);
	}
	CHECK_EQ(get_range(c, 0, 4 * G), 0);		/* 0..399 read: worth keeping */
	for (int i = 4 * G; i < 5 * G; i++) {		/* the oldest never-read group pinned */
		key(k, i);
		CHECK_EQ(tl_pin(c, k, 1000), 0);
	}
	tl_sleep_ms(150);				/* leases end */
	CHECK_EQ(put_range(c, 18 * G, 19 * G), 0);	/* over 90%: 204 blocks go */
	tl_settle_evictions(node, c);
	struct tl_info info;
	CHECK_EQ(tl_info(c, &info), 0);
	int e = (int)info.evictions;
	CHECK(e >= 200 && e < 300, "evictions %d", e);
	/* (an EXISTS is a read: the pinned group, looked at first and 3 ms
	 * before the others, is the oldest read now) */
	CHECK_EQ(count_exist(c, 4 * G, 5 * G), G);	/* pinned: kept */
	tl_sleep_ms(3);
	CHECK_EQ(count_exist(c, 0, 4 * G), 4 * G);	/* read: all kept */
	CHECK_EQ(count_exist(c, 5 * G, 7 * G), 0);	/* the two oldest free groups */
	CHECK_EQ(count_exist(c, 7 * G, 8 * G), G - (e - 2 * G));	/* ties within a group */
	CHECK_EQ(count_exist(c, 8 * G, 19 * G), 11 * G);	/* all newer ones kept */

	tl_sleep_ms(2100);				/* the pins end (1 s granularity) */
	CHECK_EQ(put_range(c, 19 * G, 21 * G), 0);	/* over 90% again */
	tl_settle_evictions(node, c);
	CHECK_EQ(tl_info(c, &info), 0);
	CHECK(info.evictions >= (uint64_t)e + 200, "evictions %llu",
	      (unsigned long long)info.evictions);
	CHECK_EQ(count_exist(c, 4 * G, 5 * G), 0);	/* unpinned, oldest: gone first */
	CHECK_EQ(count_exist(c, 19 * G, 21 * G), 2 * G);	/* just put: kept */
	CHECK_EQ(count_exist(c, 0, 21 * G) + (int)info.evictions, 21 * G);

	char *body = NULL;
	CHECK_EQ(tl_http(m.http_port, "GET", "/metrics", NULL, 0, &body, NULL), 200);
	static const char name[] = "\nkvpool_master_eviction_seconds_total ";
	const char *t = body ? strstr(body, name) : NULL;
	CHECK(t && strtod(t + sizeof(name) - 1, NULL) > 0, "eviction time counted: %.60s",
	      t ? t : "(none)");
	free(body);
	tl_conn_close(c);
	tl_conn_close(node);
	tl_stop_master(&m);
	if (tl_failures)
		tl_dump_log(m.log);
}

/* Upserts in flight while a large region's heap is on: a new value's
 * priority is final only at its PUT_END (it takes the old value's), so
 * until then the heap keeps it at the top and parks it. The daemon's own
 * check of its heaps (KVP_TEST_MASTER_CHECK, at its ticks) holds through
 * rounds that run while the upserts are pending and after they end, and
 * the upserted values keep their keys' priority: no round takes them. */
static void test_upsert_heap(void)
{
	enum { N = 2048, U = 50 };
	struct tl_master m;

	tl_start_master(&m, "[master]\neviction_high_watermark = 0.9\neviction_ratio = 0.1\n"
			    "lease_ttl = 100ms\n");
	struct tl_conn *node = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	uint32_t seg = tl_mount(node, "ups", "h", (uint64_t)N * ALIGN, 1, ALIGN, NULL);
	REQUIRE(seg > 0, "mount");
	struct tl_conn *c = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "h");
	struct tl_obj o[U];
	char k[U][16];

	CHECK_EQ(put_range(c, 0, 1800), 0);
	tl_sleep_ms(3);
	CHECK_EQ(get_range(c, 0, 2 * U), 0);		/* 0..99 read */
	tl_sleep_ms(150);
	CHECK_EQ(put_range(c, 1800, 1900), 0);		/* a round: the heap is built */
	tl_settle_evictions(node, c);
	for (int i = 0; i < U; i++) {			/* new values of 0..49, pending */
		uint64_t size = VLEN;
		key(k[i], i);
		const char *kp = k[i];
		CHECK_EQ(tl_put_start_flags(c, 1, seg, WIRE_PUT_UPSERT, 0, 1, &kp, &size, &o[i]), 0);
		CHECK_EQ(o[i].status, 0);
	}
	CHECK_EQ(put_range(c, 1900, 2000), 0);		/* rounds with them pending */
	tl_settle_evictions(node, c);
	tl_sleep_ms(50);				/* ticks: the daemon checks its heaps */
	for (int i = 0; i < U; i++)
		CHECK_EQ(tl_put_end1(c, k[i], o[i].generation, VLEN), 0);
	tl_sleep_ms(50);
	CHECK_EQ(put_range(c, 2000, 2100), 0);		/* and after they ended */
	tl_settle_evictions(node, c);
	tl_sleep_ms(50);
	struct tl_info info;
	CHECK_EQ(tl_info(c, &info), 0);			/* the master is still up */
	CHECK(info.evictions >= 400, "evictions %llu", (unsigned long long)info.evictions);
	CHECK_EQ(count_exist(c, 0, 2 * U), 2 * U);	/* read, upserted or not: kept */
	tl_conn_close(c);
	tl_conn_close(node);
	tl_stop_master(&m);
	if (tl_failures)
		tl_dump_log(m.log);
}

int main(void)
{
	test_lru();
	test_leased_pinned();
	test_evict_pinned();
	test_put_evicts();
	test_exact();
	test_upsert_heap();
	return tl_done();
}

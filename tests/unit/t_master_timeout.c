/* t_master_timeout: a put neither ended nor revoked within put_timeout is
 * reclaimed (its space FREEd and reusable, the key free again); a node
 * silent for client_ttl has its segment dropped and its objects disappear,
 * while a node that keeps heartbeating stays. */
#include "testlib.h"

#define ALIGN 4096
#define SEG_BLOCKS 5			/* 4 usable blocks */

static int segments(struct tl_conn *c)
{
	struct tl_frame *f = tl_call(c, WIRE_OP_SEGMENTS, NULL);
	int n = -1;

	if (f && f->h.status == 0 && f->h.body_len >= 4)
		memcpy(&n, f->body, 4);
	tl_frame_free(f);
	return n;
}

int main(void)
{
	struct tl_master m;

	tl_start_master(&m, "[master]\nput_timeout = 500ms\nclient_ttl = 1s\nlease_ttl = 100ms\n"
			    "eviction_high_watermark = 1.0\n");
	struct tl_conn *node = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h1");
	int64_t seg1 = tl_mount(node, "alive", "h1", SEG_BLOCKS * ALIGN, 11, ALIGN, NULL);
	REQUIRE(seg1 > 0, "mount");
	struct tl_conn *silent = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h2");
	int64_t seg2 = tl_mount(silent, "silent", "h2", SEG_BLOCKS * ALIGN, 22, ALIGN, NULL);
	REQUIRE(seg2 > 0, "mount");
	struct tl_conn *c = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "h3");

	/* an object on each segment */
	struct tl_obj o;
	CHECK_EQ(tl_put_start1(c, "on-alive", 100, 1, (uint32_t)seg1, &o), 0);
	CHECK_EQ(o.rep[0].seg, seg1);
	CHECK_EQ(tl_put_end1(c, "on-alive", o.generation, 1), 0);
	CHECK_EQ(tl_put_start1(c, "on-silent", 100, 1, (uint32_t)seg2, &o), 0);
	CHECK_EQ(o.rep[0].seg, seg2);
	CHECK_EQ(tl_put_end1(c, "on-silent", o.generation, 1), 0);

	/* a put that takes the rest of seg1 (3 blocks) and is abandoned */
	struct tl_obj big;
	uint64_t vlen = 3 * ALIGN - 64 - strlen("abandoned");	/* exactly 3 blocks */
	CHECK_EQ(tl_put_start1(c, "abandoned", vlen, 1, (uint32_t)seg1, &big), 0);
	CHECK_EQ(big.rep[0].seg, seg1);
	struct tl_info info;
	CHECK_EQ(tl_info(c, &info), 0);
	uint64_t used0 = info.bytes_used;
	REQUIRE(used0 == 5 * ALIGN, "used %llu", (unsigned long long)used0);

	/* wait: the silent node says nothing, the live one heartbeats and
	 * answers FREEs */
	uint64_t end = tl_now_ms() + 8000;
	int gone = -1;
	bool reclaimed = false;
	while (tl_now_ms() < end && !(reclaimed && gone == 0)) {
		CHECK_EQ(tl_heartbeat(node, (uint32_t)seg1), 0);
		tl_drain_frees(node, 100);
		CHECK_EQ(tl_info(c, &info), 0);
		reclaimed = info.bytes_used <= used0 - 3 * ALIGN;
		gone = tl_exists(c, "on-silent");
	}
	CHECK(reclaimed, "the abandoned put's space came back (used %llu, was %llu)",
	      (unsigned long long)info.bytes_used, (unsigned long long)used0);
	CHECK_EQ(gone, 0);

	/* put timeout: the generation is stale, the key can be put again */
	CHECK_EQ(tl_put_end1(c, "abandoned", big.generation, 1), KVP_ENOTFOUND);
	CHECK_EQ(tl_put_start1(c, "abandoned", vlen, 1, (uint32_t)seg1, &o), 0);
	CHECK_EQ(o.rep[0].seg, seg1);			/* its space is reusable */
	CHECK_EQ(o.rep[0].off, big.rep[0].off);
	CHECK(o.generation > big.generation, "new generation");
	CHECK_EQ(tl_put_end1(c, "abandoned", o.generation, 1), 0);

	/* node ttl: the silent segment is gone, the live one stays */
	CHECK_EQ(tl_exists(c, "on-alive"), 1);
	CHECK_EQ(segments(c), 1);
	CHECK_EQ(tl_heartbeat(silent, (uint32_t)seg2), KVP_ENOSEG);	/* it must re-mount */

	char *body = NULL;
	CHECK_EQ(tl_http(m.http_port, "GET", "/metrics", NULL, 0, &body, NULL), 200);
	CHECK(body && strstr(body, "kvpool_master_put_timeouts_total 1\n"), "put timeout counted");
	CHECK(body && strstr(body, "kvpool_master_node_expiries_total 1\n"), "node expiry counted");
	free(body);

	/* the silent node comes back: same uuid, same segment id, empty */
	int64_t again = tl_mount(silent, "silent", "h2", SEG_BLOCKS * ALIGN, 22, ALIGN, NULL);
	CHECK_EQ(again, seg2);
	CHECK_EQ(segments(c), 2);
	CHECK_EQ(tl_exists(c, "on-silent"), 0);

	tl_conn_close(c);
	tl_conn_close(silent);
	tl_conn_close(node);
	int st = tl_stop_master(&m);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "clean exit");
	if (tl_failures)
		tl_dump_log(m.log);
	return tl_done();
}

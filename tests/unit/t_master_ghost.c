/* t_master_ghost: no ghost objects — objects whose segment is gone stop
 * being listed, and a put never answers for a value nobody can read. A
 * node that UNMOUNTs (drain) and closes its connection loses its segment
 * at once; a node that stops heartbeating loses it after node_ttl (3 s by
 * default), well before client_ttl (10 s); a PUT_START of a key whose
 * every replica is on a draining or disconnected segment replaces the old
 * object instead of answering KVP_EEXIST, while one live replica keeps
 * KVP_EEXIST. Against a real kvpool-master with fake nodes. */
#include "testlib.h"

#define ALIGN 4096
#define SEG_SIZE (64 * ALIGN)

static int segments(struct tl_conn *c)
{
	struct tl_frame *f = tl_call(c, WIRE_OP_SEGMENTS, NULL);
	int n = -1;

	if (f && f->h.status == 0 && f->h.body_len >= 4)
		memcpy(&n, f->body, 4);
	tl_frame_free(f);
	return n;
}

static struct tl_conn *node(struct tl_master *m, const char *name, uint64_t uuid, uint32_t *seg)
{
	struct tl_conn *n = tl_client(m->port, WIRE_ROLE_NODE, NULL, name);
	int64_t s = tl_mount(n, name, name, SEG_SIZE, uuid, ALIGN, NULL);

	REQUIRE(s > 0, "mount %s", name);
	n->auto_free = true;
	*seg = (uint32_t)s;
	return n;
}

int main(void)
{
	struct tl_master m;
	struct tl_obj o, g;
	uint32_t sa, sb, sc;

	/* node_ttl and client_ttl at their defaults (3 s, 10 s) */
	tl_start_master(&m, "[master]\neviction_high_watermark = 1.0\nnode_ttl = 3s\n");
	struct tl_conn *a = node(&m, "a", 1, &sa);
	struct tl_conn *b = node(&m, "b", 2, &sb);
	struct tl_conn *c = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "client");
	CHECK_EQ(segments(c), 2);

	/* a put on a, a's node disconnects without UNMOUNT: the segment waits
	 * for a re-mount, but a put of the key goes elsewhere and replaces */
	CHECK_EQ(tl_put_start1(c, "g1", 100, 1, sa, &o), 0);
	CHECK_EQ(o.rep[0].seg, sa);
	CHECK_EQ(tl_put_end1(c, "g1", o.generation, 1), 0);
	struct tl_obj both;
	CHECK_EQ(tl_put_start1(c, "g2", 100, 2, 0, &both), 0);	/* on a and b */
	CHECK_EQ(both.nrep, 2);
	CHECK_EQ(tl_put_end1(c, "g2", both.generation, 1), 0);
	tl_conn_close(a);
	tl_sleep_ms(100);
	CHECK_EQ(segments(c), 2);			/* not dropped yet: may come back */
	CHECK_EQ(tl_exists(c, "g1"), 1);
	struct tl_obj n1;
	CHECK_EQ(tl_put_start1(c, "g1", 200, 1, 0, &n1), 0);	/* not EEXIST */
	CHECK_EQ(n1.rep[0].seg, sb);
	CHECK_EQ(tl_get1(c, "g1", &g), 0);
	CHECK_EQ(g.generation, o.generation);		/* the old one until PUT_END */
	CHECK_EQ(tl_put_end1(c, "g1", n1.generation, 2), 0);
	CHECK_EQ(tl_get1(c, "g1", &g), 0);
	CHECK_EQ(g.generation, n1.generation);
	CHECK_EQ(g.size, 200);
	CHECK_EQ(g.rep[0].seg, sb);
	/* one replica still on a live node: a plain put is refused */
	CHECK_EQ(tl_put_start1(c, "g2", 100, 1, 0, &o), KVP_EEXIST);

	/* the disconnected node's segment goes after node_ttl, before client_ttl */
	uint64_t t0 = tl_now_ms();
	while (segments(c) == 2 && tl_now_ms() < t0 + 9000) {
		CHECK_EQ(tl_heartbeat(b, sb), 0);
		tl_sleep_ms(100);
	}
	uint64_t took = tl_now_ms() - t0;
	CHECK_EQ(segments(c), 1);
	printf("disconnected node dropped %llu ms after it closed (node_ttl 3 s)\n",
	       (unsigned long long)took + 100);
	CHECK_EQ(tl_exists(c, "g2"), 1);		/* its replica on b lives on */
	CHECK_EQ(tl_get1(c, "g2", &g), 0);
	CHECK_EQ(g.nrep, 1);

	/* a connected node that stops heartbeating: the same bound */
	struct tl_conn *cc = node(&m, "c", 3, &sc);
	CHECK_EQ(tl_put_start1(c, "g3", 100, 1, sc, &o), 0);
	CHECK_EQ(tl_put_end1(c, "g3", o.generation, 1), 0);
	t0 = tl_now_ms();
	while (tl_exists(c, "g3") == 1 && tl_now_ms() < t0 + 9000) {
		CHECK_EQ(tl_heartbeat(b, sb), 0);
		tl_sleep_ms(100);
	}
	CHECK_EQ(tl_exists(c, "g3"), 0);
	printf("silent node's objects gone %llu ms after its last frame\n",
	       (unsigned long long)(tl_now_ms() - t0));
	CHECK_EQ(tl_heartbeat(cc, sc), KVP_ENOSEG);	/* it must re-mount */
	tl_conn_close(cc);

	/* draining (UNMOUNT drain=1): still readable, a put replaces; the
	 * connection closing drops the segment at once */
	struct tl_conn *d = node(&m, "d", 4, &sc);
	CHECK_EQ(tl_put_start1(c, "g4", 100, 1, sc, &o), 0);
	CHECK_EQ(tl_put_end1(c, "g4", o.generation, 1), 0);
	CHECK_EQ(tl_unmount(d, sc, true), 0);
	CHECK_EQ(tl_exists(c, "g4"), 1);
	CHECK_EQ(tl_put_start1(c, "g4", 100, 1, 0, &n1), 0);
	CHECK_EQ(n1.rep[0].seg, sb);
	CHECK_EQ(tl_put_end1(c, "g4", n1.generation, 4), 0);
	CHECK_EQ(tl_put_start1(c, "g5", 100, 1, sc, &o), 0);	/* draining: elsewhere */
	CHECK_EQ(o.rep[0].seg, sb);
	CHECK_EQ(tl_put_revoke1(c, "g5", o.generation), 0);
	CHECK_EQ(segments(c), 2);
	tl_conn_close(d);
	t0 = tl_now_ms();
	while (segments(c) != 1 && tl_now_ms() < t0 + 2000)
		tl_sleep_ms(10);
	CHECK_EQ(segments(c), 1);			/* at once, not after node_ttl */

	char *body = NULL;
	CHECK_EQ(tl_http(m.http_port, "GET", "/metrics", NULL, 0, &body, NULL), 200);
	CHECK(body && strstr(body, "kvpool_master_ghosts_replaced_total 2\n"), "ghost puts counted");
	free(body);

	tl_conn_close(c);
	tl_conn_close(b);
	int st = tl_stop_master(&m);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "clean exit");
	if (tl_failures)
		tl_dump_log(m.log);
	return tl_done();
}

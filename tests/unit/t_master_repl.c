/* t_master_repl: the warm standby (master/mrepl.c, docs/ha.md "Warm
 * standby"), in-process: a leader and a standby master, the FOLLOW stream
 * between them through a sink that applies each REPL frame.
 *  1. the snapshot brings the table over; a remove on the leader reaches
 *     the standby as it happens;
 *  2. a remove the standby never hears of, then the takeover: an old key
 *     is served at once; the node re-mounts and reports what it holds (not
 *     the removed key, and one the standby never heard of): the ghost is
 *     dropped at the HEARTBEAT, the unknown one adopted, nothing else lost;
 *  3. a reported extent across a replica of the table that the node does
 *     not hold: the node's extent wins at once.
 *  4. the node re-mounts with its commit map (master/mhold.h): a put goes
 *     in before the REPORTs, never into a page the map shows committed
 *     and the table does not know (nor past it up to the segment's end),
 *     nor over a stale replica; the REPORTs then adopt the unknown extents
 *     out of the holds, and the HEARTBEAT releases the rest.
 *  5. a put acknowledged between that MOUNT and the first REPORT, which
 *     the REPORTs do not name, survives the HEARTBEAT; a true ghost does
 *     not.
 */
#include "testlib.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "conf.h"
#include "log.h"
#include "master.h"
#include "mdrive.h"
#include "segmap.h"
#include "wire.h"

#define ALEN 4096

static struct master *standby;
static struct mdrive_follow fol_state;	/* the FOLLOW connections' sink */

static struct master_client *client(struct master *m, uint16_t role, master_send_fn fn,
				    struct wbuf *w)
{
	struct master_client *c = mdrive_client(m, role, fn, &fol_state, w);

	CHECK(c != NULL);
	return c;
}

static uint32_t mount(struct master *m, struct master_client *c, struct wbuf *w)
{
	uint32_t id = mdrive_mount(m, c, 64u << 20, 4096, w);

	CHECK(id != 0);
	return id;
}

/* REPORTs keys ids[] (mdrive_report), then the HEARTBEAT. */
static void report(struct master *m, struct master_client *c, uint32_t sid, const unsigned *ids,
		   const unsigned *slots, size_t n, struct wbuf *w)
{
	CHECK(mdrive_report(m, c, sid, ids, slots, n, ALEN, w) == 0);
}

static bool exists(struct master *m, struct master_client *c, unsigned i, struct wbuf *w)
{
	return mdrive_exists(m, c, i, w);
}

static void removes(struct master *m, struct master_client *c, unsigned i, struct wbuf *w)
{
	CHECK(mdrive_remove(m, c, i, w) == 0);
}

static void test_follow_takeover(void)
{
	struct kvp_conf conf;
	char err[256];
	struct wbuf w;
	unsigned ids[101], slots[101];

	conf_defaults(&conf);
	wb_init(&w);
	struct master *m = master_create(&conf, err, sizeof(err));
	standby = master_create(&conf, err, sizeof(err));
	fol_state.standby = standby;
	CHECK(m && standby);
	struct master_client *node = client(m, WIRE_ROLE_NODE, mdrive_drop, &w);
	struct master_client *cli = client(m, WIRE_ROLE_CLIENT, mdrive_drop, &w);
	uint32_t sid = mount(m, node, &w);
	for (unsigned i = 0; i < 100; i++)
		ids[i] = slots[i] = i;
	report(m, node, sid, ids, slots, 100, &w);
	CHECK_EQ(master_keys(m), 100);

	/* 1. the snapshot, then a change as it happens */
	struct master_client *fol = client(m, WIRE_ROLE_MASTER, mdrive_follow_sink, &w);
	CHECK(mdrive_call(m, fol, WIRE_OP_FOLLOW, NULL, 0, &w) == 0);
	for (int i = 0; i < 100 && !master_follow_synced(standby); i++)
		master_tick(m);
	CHECK(master_follow_synced(standby));
	CHECK_EQ(master_keys(standby), 100);
	removes(m, cli, 5, &w);
	CHECK_EQ(master_keys(standby), 99);
	CHECK_EQ(fol_state.bad, 0);

	/* 2. a remove the standby misses, the leader dies */
	master_client_free(fol);
	removes(m, cli, 6, &w);
	CHECK_EQ(master_keys(standby), 99);
	master_takeover(standby, 9, NULL);
	struct master_client *c2 = client(standby, WIRE_ROLE_CLIENT, mdrive_drop, &w);
	CHECK(exists(standby, c2, 10, &w));	/* served before the node is back */
	CHECK(exists(standby, c2, 6, &w));	/* the ghost, until the node reports */
	/* the node holds 0..99 but 5 and 6, and key 100 the standby never saw */
	size_t n = 0;
	for (unsigned i = 0; i <= 100; i++)
		if (i != 5 && i != 6) {
			ids[n] = i;
			slots[n++] = i;
		}
	struct master_client *node2 = client(standby, WIRE_ROLE_NODE, mdrive_drop, &w);
	uint32_t sid2 = mount(standby, node2, &w);
	CHECK_EQ(sid2, sid);
	report(standby, node2, sid2, ids, slots, n, &w);
	CHECK_EQ(master_keys(standby), 99);
	CHECK(!exists(standby, c2, 6, &w));
	CHECK(exists(standby, c2, 100, &w));
	CHECK(!exists(standby, c2, 5, &w));
	CHECK(master_check(standby));
	master_destroy(standby);
	master_destroy(m);
	wb_free(&w);
}

/* mdrive_mount, with the commit map map[0..n) */
static uint32_t mount_map(struct master *m, struct master_client *c, const uint8_t *map, size_t n,
			  struct wbuf *w)
{
	uint32_t id = mdrive_mount_map(m, c, 64u << 20, 4096, map, n, w);

	CHECK(id != 0);
	return id;
}

/* PUT_START of one key: its offset, UINT64_MAX if refused; *gen (unless
 * NULL) its generation */
static uint64_t put_start_gen(struct master *m, struct master_client *c, const char *key,
			      uint64_t *gen, struct wbuf *w)
{
	uint64_t off;

	return mdrive_put_start(m, c, key, 100, gen, &off, w) ? UINT64_MAX : off;
}

static uint64_t put_start(struct master *m, struct master_client *c, const char *key,
			  struct wbuf *w)
{
	return put_start_gen(m, c, key, NULL, w);
}

/* PUT_END of key at generation gen: the status of its one item */
static int put_end(struct master *m, struct master_client *c, const char *key, uint64_t gen,
		   struct wbuf *w)
{
	struct wbuf b;
	struct rbuf r;

	wb_init(&b);
	wb_u32(&b, 1);
	wb_str(&b, key, strlen(key));
	wb_u64(&b, gen);
	wb_u64(&b, 0x5eed);
	int st = mdrive_call(m, c, WIRE_OP_PUT_END, b.p, b.len, w);
	wb_free(&b);
	if (st)
		return st;
	rb_init(&r, w->p + WIRE_HDR_SIZE, w->len - WIRE_HDR_SIZE);
	if (rb_u32(&r) != 1)
		return -1;
	st = rb_status(&r);
	return rb_ok(&r) ? st : -1;
}

/* A leader whose one node's segment holds keys ids at slots, followed by
 * the standby to the end of its snapshot; the standby then takes over.
 * Returns the old leader; *sid: the segment. */
static struct master *warm_takeover(struct wbuf *w, unsigned *ids, unsigned *slots, unsigned n,
				    uint32_t *sid)
{
	struct kvp_conf conf;
	char err[256];

	conf_defaults(&conf);
	wb_init(w);
	struct master *m = master_create(&conf, err, sizeof(err));
	standby = master_create(&conf, err, sizeof(err));
	fol_state.standby = standby;
	CHECK(m && standby);
	struct master_client *node = client(m, WIRE_ROLE_NODE, mdrive_drop, w);
	*sid = mount(m, node, w);
	report(m, node, *sid, ids, slots, n, w);
	struct master_client *fol = client(m, WIRE_ROLE_MASTER, mdrive_follow_sink, w);
	CHECK(mdrive_call(m, fol, WIRE_OP_FOLLOW, NULL, 0, w) == 0);
	for (int i = 0; i < 100 && !master_follow_synced(standby); i++)
		master_tick(m);
	CHECK_EQ(master_keys(standby), n);
	master_client_free(fol);
	master_takeover(standby, 9, NULL);
	return m;
}

static void test_commit_map(void)
{
	struct wbuf w;
	unsigned ids[3] = { 1, 2, 3 }, slots[3] = { 1, 2, 3 };
	uint8_t map[16] = { 0 };
	uint32_t sid;

	struct master *m = warm_takeover(&w, ids, slots, 3, &sid);
	/* unseen by the standby: key 2 removed and key 7 put in its slot,
	 * key 8 put at slot 10. Slot s is page 1 + s. */
	map[2] = segmap_tag(1001);
	map[3] = segmap_tag(1007);
	map[4] = segmap_tag(1003);
	map[11] = segmap_tag(1008);
	struct master_client *node2 = client(standby, WIRE_ROLE_NODE, mdrive_drop, &w);
	uint32_t sid2 = mount_map(standby, node2, map, sizeof(map), &w);
	CHECK_EQ(sid2, sid);
	CHECK(master_check(standby));
	/* puts before the REPORTs: slots 0 and 4..9 only */
	struct master_client *c2 = client(standby, WIRE_ROLE_CLIENT, mdrive_drop, &w);
	for (unsigned i = 0; i < 7; i++) {
		char key[32];
		snprintf(key, sizeof(key), "new-%u", i);
		uint64_t off = put_start(standby, c2, key, &w);
		CHECK(off != UINT64_MAX, "put %u before the REPORTs", i);
		CHECK(off == 4096 || (off >= 4096 + 4 * ALEN && off < 4096 + 10 * ALEN),
		      "put %u at %" PRIu64 ": in a hold or on a replica", i, off);
	}
	/* the 8th finds no room outside the holds: parked, not placed */
	CHECK(put_start(standby, c2, "new-7", &w) == UINT64_MAX);
	CHECK(master_check(standby));
	/* the REPORTs: 7 over the stale 2 (the ghost's space held, then
	 * carved), 8 out of the hold at slot 10 */
	unsigned ids2[4] = { 1, 7, 3, 8 }, slots2[4] = { 1, 2, 3, 10 };
	report(standby, node2, sid2, ids2, slots2, 4, &w);
	CHECK(master_check(standby));
	CHECK(exists(standby, c2, 7, &w));
	CHECK(exists(standby, c2, 8, &w));
	CHECK(!exists(standby, c2, 2, &w));
	CHECK(exists(standby, c2, 1, &w) && exists(standby, c2, 3, &w));
	/* the holds are gone: room again */
	CHECK(put_start(standby, c2, "new-8", &w) != UINT64_MAX);
	master_destroy(standby);
	master_destroy(m);
	wb_free(&w);
}

/* The re-mount's replica array is gathered at the first REPORT, not at
 * the MOUNT: a put acknowledged in between is not the table's to confirm
 * (the node's scan may have passed its page), so the HEARTBEAT must not
 * drop it as a ghost, while a replica of the table the node did not
 * report still goes. The page tags (segreg.h ptag) follow the replicas
 * through all of it (master_check). */
static void test_put_before_reports(void)
{
	struct wbuf w;
	unsigned ids[4] = { 1, 2, 3, 4 }, slots[4] = { 1, 2, 3, 4 };
	uint8_t map[16] = { 0 };
	char key[32];
	uint64_t gen;
	uint32_t sid;

	struct master *m = warm_takeover(&w, ids, slots, 4, &sid);
	CHECK(master_check(standby));
	/* the node holds 1, 3 and 4; 2 is gone (a remove the standby missed) */
	map[2] = segmap_tag(1001);
	map[4] = segmap_tag(1003);
	map[5] = segmap_tag(1004);
	struct master_client *node2 = client(standby, WIRE_ROLE_NODE, mdrive_drop, &w);
	uint32_t sid2 = mount_map(standby, node2, map, sizeof(map), &w);
	CHECK_EQ(sid2, sid);
	struct master_client *c2 = client(standby, WIRE_ROLE_CLIENT, mdrive_drop, &w);
	mdrive_key(key, sizeof(key), 50);
	uint64_t off = put_start_gen(standby, c2, key, &gen, &w);
	CHECK(off != UINT64_MAX, "put before the REPORTs");
	CHECK(off != 4096 + 2 * ALEN, "put over the ghost's replica");
	CHECK_EQ(put_end(standby, c2, key, gen, &w), 0);
	CHECK(exists(standby, c2, 50, &w));
	/* a remove moves the put's replica among the segment's first ones */
	removes(standby, c2, 1, &w);
	CHECK(master_check(standby));
	/* the REPORTs (3 and 4, not the new put), then the HEARTBEAT */
	unsigned ids2[2] = { 3, 4 }, slots2[2] = { 3, 4 };
	report(standby, node2, sid2, ids2, slots2, 2, &w);
	CHECK(exists(standby, c2, 50, &w), "an acknowledged put dropped as a ghost");
	CHECK(!exists(standby, c2, 2, &w), "the ghost kept");
	CHECK(!exists(standby, c2, 1, &w));
	CHECK(exists(standby, c2, 3, &w) && exists(standby, c2, 4, &w));
	CHECK_EQ(master_keys(standby), 3);
	CHECK(master_check(standby));
	/* the tags follow removals and new puts */
	removes(standby, c2, 3, &w);
	removes(standby, c2, 50, &w);
	CHECK(master_check(standby));
	mdrive_key(key, sizeof(key), 51);
	CHECK(put_start_gen(standby, c2, key, &gen, &w) != UINT64_MAX);
	CHECK_EQ(put_end(standby, c2, key, gen, &w), 0);
	CHECK(master_check(standby));
	master_destroy(standby);
	master_destroy(m);
	wb_free(&w);
}

static void test_overlap(void)
{
	struct wbuf w;
	unsigned ids[4] = { 1, 2, 3 }, slots[4] = { 1, 2, 3 };
	uint32_t sid;

	struct master *m = warm_takeover(&w, ids, slots, 3, &sid);
	/* key 2's slot now holds key 7 (key 2 was removed, 7 put there) */
	unsigned ids2[3] = { 1, 7, 3 }, slots2[3] = { 1, 2, 3 };
	struct master_client *node2 = client(standby, WIRE_ROLE_NODE, mdrive_drop, &w);
	uint32_t sid2 = mount(standby, node2, &w);
	report(standby, node2, sid2, ids2, slots2, 3, &w);
	struct master_client *c2 = client(standby, WIRE_ROLE_CLIENT, mdrive_drop, &w);
	CHECK(exists(standby, c2, 7, &w));
	CHECK(!exists(standby, c2, 2, &w));
	CHECK_EQ(master_keys(standby), 3);
	CHECK(master_check(standby));
	master_destroy(standby);
	master_destroy(m);
	wb_free(&w);
}

static size_t backlog_bytes;
static int aborted;

static size_t fake_queued(void *arg)
{
	(void)arg;
	return backlog_bytes;
}

static void fake_abort(void *arg)
{
	(void)arg;
	aborted++;
}

/* A standby whose connection holds over the limit unsent is dropped at the
 * next tick (and counted); one under it stays. */
static void test_lagging_standby(void)
{
	struct kvp_conf conf;
	char err[256];
	struct wbuf w;
	unsigned ids[2] = { 1, 2 }, slots[2] = { 1, 2 };
	struct master_repl_stats rs;

	conf_defaults(&conf);
	wb_init(&w);
	struct master *m = master_create(&conf, err, sizeof(err));
	standby = master_create(&conf, err, sizeof(err));
	fol_state.standby = standby;
	CHECK(m && standby);
	struct master_client *node = client(m, WIRE_ROLE_NODE, mdrive_drop, &w);
	uint32_t sid = mount(m, node, &w);
	report(m, node, sid, ids, slots, 2, &w);
	struct master_client *fol = client(m, WIRE_ROLE_MASTER, mdrive_follow_sink, &w);
	master_client_set_backlog(fol, fake_queued, fake_abort);
	CHECK(mdrive_call(m, fol, WIRE_OP_FOLLOW, NULL, 0, &w) == 0);
	backlog_bytes = 64u << 20;
	master_tick(m);
	master_repl_stats(m, &rs);
	CHECK_EQ(aborted, 0);
	CHECK_EQ(rs.lag_drops, 0);
	backlog_bytes = (size_t)2 << 30;
	master_tick(m);
	master_repl_stats(m, &rs);
	CHECK_EQ(aborted, 1);
	CHECK_EQ(rs.lag_drops, 1);
	master_tick(m);		/* no longer a follower: not dropped twice */
	CHECK_EQ(aborted, 1);
	/* it may follow again (the close would have been its connection's) */
	CHECK(mdrive_call(m, fol, WIRE_OP_FOLLOW, NULL, 0, &w) == 0);
	master_client_free(fol);
	master_destroy(standby);
	master_destroy(m);
	wb_free(&w);
}

int main(void)
{
	log_init("t_master_repl", LOG_ERR);
	test_follow_takeover();
	test_commit_map();
	test_put_before_reports();
	test_overlap();
	test_lagging_standby();
	return tl_done();
}

/* t_master_reportkx: a node reports its extents in offset order, and an
 * engine's keys are hashes, so a segment's REPORTs name keys in no key
 * order: their keys wait for the key index until the segment's HEARTBEAT
 * (or its connection's end) and then go in in one sorted pass (mnode.c
 * report_defer, objtab_kx_defer), in-process:
 *  1. 30,000 keys in shuffled order, in frames of 1,000, no HEARTBEAT:
 *     after each frame the table's invariants (master_check: the key
 *     index's own, every object in it or waiting) and EXISTS of the
 *     frame's keys; keys wait; a REMOVE of a waiting key mid-way (it
 *     settles the rest first, and they wait again after); after the
 *     HEARTBEAT nothing waits, and a walk in key order gives every key;
 *  2. a second master, whose node's connection closes before its
 *     HEARTBEAT: nothing waits after, no deferral is left on, and the
 *     walk is whole.
 */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "log.h"
#include "master.h"
#include "master_i.h"
#include "mdrive.h"
#include "wire.h"

#define ALEN 4096
#define N 30000
#define FRAME 1000

static struct mdrive_follow fol_state;

/* The walk in key order: strictly ascending, as many keys as the table. */
static void check_walk(struct master *m)
{
	struct obj *prev = NULL;
	size_t n = 0;

	for (struct obj *o = objtab_seek(&m->objs, (const uint8_t *)"", 0, false); o;
	     o = objtab_next(&m->objs, o)) {
		if (prev)
			CHECK(objtab_keycmp(obj_key(prev), prev->key_len, obj_key(o), o->key_len) < 0);
		prev = o;
		n++;
	}
	CHECK_EQ(n, m->objs.count);
	CHECK_EQ(m->objs.nkxp, 0);
	CHECK(master_check(m));
}

static void shuffle(unsigned *v, size_t n)
{
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)rand() % (i + 1);
		unsigned t = v[i];

		v[i] = v[j];
		v[j] = t;
	}
}

static void test_heartbeat(const struct kvp_conf *conf, const unsigned *ids,
			   const unsigned *slots, struct wbuf *w)
{
	char err[256];
	struct master *m = master_create(conf, err, sizeof(err));

	CHECK(m != NULL);
	struct master_client *node = mdrive_client(m, WIRE_ROLE_NODE, mdrive_drop, &fol_state, w);
	struct master_client *cl = mdrive_client(m, WIRE_ROLE_CLIENT, mdrive_drop, &fol_state, w);
	CHECK(node && cl);
	CHECK_EQ(mdrive_mount(m, node, (uint64_t)2 * N * ALEN, 4096, w), 1);
	size_t waited = 0, removed = 0;
	for (unsigned b = 0; b < N; b += FRAME) {
		CHECK_EQ(mdrive_report_frame(m, node, 1, ids + b, slots + b, FRAME, ALEN, w), 0);
		waited = m->objs.nkxp > waited ? m->objs.nkxp : waited;
		CHECK(master_check(m));
		for (unsigned i = b; i < b + FRAME; i += 97)
			CHECK(mdrive_exists(m, cl, ids[i], w));
		if (b == N / 2) {	/* a key that waits: the rest settle first */
			CHECK(m->objs.nkxp > 0);
			CHECK_EQ(mdrive_remove(m, cl, ids[b + 1], w), 0);
			CHECK(!mdrive_exists(m, cl, ids[b + 1], w));
			removed++;
			CHECK(master_check(m));
		}
	}
	CHECK(waited > N / 4);
	CHECK(m->objs.nkxp > 0);	/* the second half waits again */
	CHECK_EQ(mdrive_heartbeat(m, node, 1, w), 0);
	CHECK_EQ(master_keys(m), N - removed);
	check_walk(m);
	for (unsigned i = 0; i < N; i += 101)
		CHECK_EQ(mdrive_exists(m, cl, i, w), i != ids[N / 2 + 1]);
	master_destroy(m);
}

static void test_hangup(const struct kvp_conf *conf, const unsigned *ids, const unsigned *slots,
			struct wbuf *w)
{
	char err[256];
	struct master *m = master_create(conf, err, sizeof(err));

	CHECK(m != NULL);
	struct master_client *node = mdrive_client(m, WIRE_ROLE_NODE, mdrive_drop, &fol_state, w);
	CHECK(node != NULL);
	CHECK_EQ(mdrive_mount(m, node, (uint64_t)2 * N * ALEN, 4096, w), 1);
	for (unsigned b = 0; b < N / 2; b += FRAME)
		CHECK_EQ(mdrive_report_frame(m, node, 1, ids + b, slots + b, FRAME, ALEN, w), 0);
	CHECK(m->objs.nkxp > 0);
	master_client_free(node);	/* no HEARTBEAT: its REPORTs ended anyway */
	CHECK(!m->objs.kx_defer);
	CHECK_EQ(master_keys(m), N / 2);
	check_walk(m);
	master_destroy(m);
}

int main(void)
{
	struct kvp_conf conf;
	struct wbuf w;
	unsigned *ids = malloc(N * sizeof(*ids)), *slots = malloc(N * sizeof(*slots));

	CHECK(ids && slots);
	log_init("t_master_reportkx", LOG_ERR);
	conf_defaults(&conf);
	wb_init(&w);
	srand(7);
	/* extents in offset order (slots ascending), keys in none */
	for (unsigned i = 0; i < N; i++)
		ids[i] = slots[i] = i;
	shuffle(ids, N);
	test_heartbeat(&conf, ids, slots, &w);
	test_hangup(&conf, ids, slots, &w);
	free(ids);
	free(slots);
	wb_free(&w);
	return tl_done();
}

/* t_node_spill: kvpool-node's spill tier against a scripted fake master
 * (raw frames on loopback), the node in-process on its own thread, its
 * segment in /dev/shm and its spill file in /var/tmp (O_DIRECT there):
 * MOUNT announces the spill capacity; DEMOTE copies live extents (stale
 * generation and bad offsets refused per item); READ tier 1 streams the
 * spill copies (a 3 MiB one in pieces, pipelined with a memory READ on the
 * same connection, replies in order); bad tier-1 READs are refused; a FREE
 * of a memory extent that a DEMOTE is still copying is answered after the
 * DEMOTE; FREE tier 1 tombstones; PROMOTE copies back into a new memory
 * extent (header rewritten for the segment); HEARTBEAT carries spill_used;
 * a node restart and a master reconnect REPORT the spill extents with tier
 * 1. Files carry the pid and are removed at exit. Exit 0/1/77.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conf.h"
#include "extent.h"
#include "segmap.h"
#include "kvpool.h"
#include "log.h"
#include "node.h"
#include "segment.h"
#include "wire.h"

#define FM_WAIT_MS 10000
#include "fake_master.h"

#define SEGID 9
#define ALIGN FM_ALIGN

/* ---- the node ---- */

static void stop_node(struct fm_node *r, struct fmaster *m)
{
	node_stop(r->n);
	while (fm_next_within(m, 3000) == 0) {
		if (m->h.opcode == WIRE_OP_UNMOUNT && !(m->h.flags & WIRE_F_REPLY)) {
			fm_send_frame(m->fd, WIRE_OP_UNMOUNT, WIRE_F_REPLY, 0, m->h.reqid, NULL, 0, 0);
			break;
		}
	}
	pthread_join(r->th, NULL);
	node_destroy(r->n);
	close(m->fd);
	m->fd = -1;
}

/* ---- objects ---- */

struct obj {
	const char *key;
	size_t vlen;
	uint64_t gen, off;	/* in the segment */
	uint64_t size, alloc_len;
	uint64_t spill_off, spill_len;
	uint8_t seed;
};

static void put_obj(const struct segment *s, struct obj *o)
{
	uint8_t *base = s->base;
	uint64_t uuid = s->uuid;
	size_t klen = strlen(o->key);
	uint8_t *img = base + o->off;
	uint8_t *v = img + EXT_HDR_SIZE + klen;

	for (size_t i = 0; i < o->vlen; i++)
		v[i] = (uint8_t)(i * 131 + o->seed);
	struct ext_hdr h = {
		.key_len = (uint32_t)klen, .value_len = o->vlen,
		.value_checksum = ext_checksum(v, o->vlen), .generation = o->gen,
		.seg_uuid = uuid, .put_time_ns = 7,
	};
	ext_encode(img, &h, o->key);
	segmap_commit(s, o->off, o->gen);	/* complete: a local client commits it */
	o->size = ext_size((uint32_t)klen, o->vlen);
	o->alloc_len = (o->size + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
}

/* An image read back: key, generation, value, and whose uuid. */
static bool image_ok(const uint8_t *p, uint64_t n, const struct obj *o, uint64_t *uuid)
{
	struct ext_hdr h;
	const uint8_t *k;

	if (ext_decode(p, n, 0, &h, &k) != 0 || h.generation != o->gen ||
	    h.key_len != strlen(o->key) || memcmp(k, o->key, h.key_len) || h.value_len != o->vlen ||
	    !ext_verify(p, &h))
		return false;
	const uint8_t *v = p + EXT_HDR_SIZE + h.key_len;
	for (size_t i = 0; i < o->vlen; i++)
		if (v[i] != (uint8_t)(i * 131 + o->seed))
			return false;
	if (uuid)
		*uuid = h.seg_uuid;
	return true;
}

/* ---- a data client ---- */

static int dclient(int port)
{
	int fd = fm_dconnect(port);

	REQUIRE(fm_dhello(fd, FM_TOKEN) == 0);
	return fd;
}

/* ---- master requests ---- */

static uint64_t demote_send(struct fmaster *m, struct obj **v, int n, const uint64_t *gen)
{
	struct wbuf b;

	wb_init(&b);
	wb_u32(&b, SEGID);
	wb_u32(&b, (uint32_t)n);
	for (int i = 0; i < n; i++) {
		wb_u64(&b, v[i]->off);
		wb_u64(&b, gen ? gen[i] : v[i]->gen);
	}
	uint64_t id = ++m->reqid;
	REQUIRE(fm_send_frame(m->fd, WIRE_OP_DEMOTE, 0, 0, id, b.p, b.len, 0) == 0);
	wb_free(&b);
	return id;
}

/* Reads the DEMOTE reply: statuses into st, placements into the objects. */
static void demote_reply(struct fmaster *m, uint64_t id, struct obj **v, int n, int32_t *st)
{
	REQUIRE(fm_next(m) == 0);
	REQUIRE(m->h.opcode == WIRE_OP_DEMOTE && (m->h.flags & WIRE_F_REPLY) && m->h.reqid == id);
	CHECK(m->h.status == 0);
	struct rbuf r;
	rb_init(&r, m->body, m->h.body_len);
	CHECK(rb_u32(&r) == (uint32_t)n);
	for (int i = 0; i < n; i++) {
		st[i] = rb_status(&r);
		uint64_t off = rb_u64(&r), len = rb_u64(&r);
		if (st[i] == 0) {
			v[i]->spill_off = off;
			v[i]->spill_len = len;
		}
	}
	CHECK(rb_done(&r));
}

static uint64_t free_send(struct fmaster *m, uint8_t tier, uint64_t off, uint64_t gen)
{
	struct wbuf b;

	wb_init(&b);
	wb_u32(&b, SEGID);
	wb_u32(&b, 1);
	wb_u8(&b, tier);
	wb_u64(&b, off);
	wb_u64(&b, gen);
	uint64_t id = ++m->reqid;
	REQUIRE(fm_send_frame(m->fd, WIRE_OP_FREE, 0, 0, id, b.p, b.len, 0) == 0);
	wb_free(&b);
	return id;
}

static int32_t promote(struct fmaster *m, uint64_t spill_off, uint64_t gen, uint64_t off,
		       uint64_t alen)
{
	struct wbuf b;

	wb_init(&b);
	wb_u32(&b, SEGID);
	wb_u32(&b, 1);
	wb_u64(&b, spill_off);
	wb_u64(&b, gen);
	wb_u64(&b, off);
	wb_u64(&b, alen);
	uint64_t id = ++m->reqid;
	REQUIRE(fm_send_frame(m->fd, WIRE_OP_PROMOTE, 0, 0, id, b.p, b.len, 0) == 0);
	wb_free(&b);
	REQUIRE(fm_next(m) == 0);
	REQUIRE(m->h.opcode == WIRE_OP_PROMOTE && m->h.reqid == id);
	struct rbuf r;
	rb_init(&r, m->body, m->h.body_len);
	CHECK(rb_u32(&r) == 1);
	int32_t st = rb_status(&r);
	CHECK(rb_done(&r));
	return st;
}

static int count_tier1(const struct fm_ext *rep, int n, struct obj **v, int nv)
{
	int found = 0;

	for (int i = 0; i < n; i++) {
		if (rep[i].tier != 1)
			continue;
		for (int j = 0; j < nv; j++)
			if (!strcmp(rep[i].key, v[j]->key) && rep[i].off == v[j]->spill_off &&
			    rep[i].generation == v[j]->gen && rep[i].alloc_len == v[j]->spill_len &&
			    rep[i].value_len == v[j]->vlen)
				found++;
	}
	return found;
}

int main(void)
{
	struct kvp_conf c;
	char err[512], seg[64], sp[400];
	struct fmaster *m;
	struct fm_node run = { 0 };

	signal(SIGPIPE, SIG_IGN);
	log_init("t_node_spill", getenv("T_DEBUG") ? LOG_DEBUG : LOG_WARNING);
	m = fm_new();
	snprintf(seg, sizeof(seg), "kvpt-nodespill-%d", (int)getpid());
	snprintf(fm_spill_path, sizeof(fm_spill_path), "/var/tmp/kvp-t_node_spill-%d", (int)getpid());
	snprintf(sp, sizeof(sp), "spill.path=%s", fm_spill_path);
	const char *const ov[] = {
		"node.heartbeat_interval=100ms", "spill.size=64M", "spill.queue_depth=8", sp, NULL,
	};
	fm_conf(&c, m, seg, ov);
	fm_arm_cleanup();

	/* --- start: MOUNT announces the spill tier --- */
	fm_start_node(&run, &c);
	int dport = node_data_port(run.n);
	fm_handshake(m, SEGID);
	CHECK(m->spill_capacity >= (60u << 20) && m->spill_capacity < (64u << 20));
	struct fm_ext rep[32];
	CHECK(fm_reports(m, rep, 32, -1) == 0);

	/* extents written straight into the segment, as a local client does */
	struct segment s;
	REQUIRE(segment_attach(&s, fm_seg_path, true, err, sizeof(err)) == 0);
	REQUIRE(s.uuid == m->seg_uuid);
	struct obj A = { "obj-a", 20000, 101, s.data_off, 0, 0, 0, 0, 1 };
	struct obj B = { "obj-b", (3u << 20) + 123, 102, 0, 0, 0, 0, 0, 2 };
	struct obj C = { "obj-c", 1, 103, 0, 0, 0, 0, 0, 3 };
	struct obj D = { "obj-d", 500000, 104, 0, 0, 0, 0, 0, 4 };
	struct obj *all[] = { &A, &B, &C, &D };
	uint64_t off = s.data_off;
	for (int i = 0; i < 4; i++) {
		all[i]->off = off;
		put_obj(&s, all[i]);
		off += all[i]->alloc_len;
	}

	/* --- DEMOTE: three copies, a stale generation and a bad offset --- */
	struct obj bad = { "bad", 1, 1, 12345, 0, 0, 0, 0, 0 };
	struct obj *dv[] = { &A, &B, &C, &D, &bad };
	uint64_t gens[] = { A.gen, B.gen, C.gen, 999, 1 };
	int32_t st[5];
	uint64_t id = demote_send(m, dv, 5, gens);
	demote_reply(m, id, dv, 5, st);
	CHECK(st[0] == 0 && st[1] == 0 && st[2] == 0);
	CHECK(st[3] == KVP_ESTALE && st[4] == KVP_ESTALE);
	for (int i = 0; i < 3; i++)
		CHECK(dv[i]->spill_off % 4096 == 0 && dv[i]->spill_off >= 4096 &&
		      dv[i]->spill_len == ((dv[i]->size + 4095) & ~4095ull));

	/* --- READ tier 1, pipelined with a memory READ on one connection --- */
	int fd = dclient(dport);
	size_t cap = 4u << 20;
	uint8_t *buf = malloc(cap);
	REQUIRE(buf);
	fm_read_send(fd, 11, 1, B.spill_off, B.size);
	fm_read_send(fd, 12, 0, D.off, D.size);
	fm_read_send(fd, 13, 1, A.spill_off, A.size);
	fm_read_send(fd, 14, 1, C.spill_off, C.size);
	uint64_t plen = 0, uuid = 0, spill_uuid = 0;
	CHECK(fm_read_recv(fd, 11, buf, cap, &plen) == 0 && plen == B.size);
	CHECK(image_ok(buf, plen, &B, &spill_uuid) && spill_uuid != m->seg_uuid);
	CHECK(fm_read_recv(fd, 12, buf, cap, &plen) == 0 && plen == D.size);
	CHECK(image_ok(buf, plen, &D, &uuid) && uuid == m->seg_uuid);
	CHECK(fm_read_recv(fd, 13, buf, cap, &plen) == 0 && image_ok(buf, plen, &A, &uuid) &&
	      uuid == spill_uuid);
	CHECK(fm_read_recv(fd, 14, buf, cap, &plen) == 0 && image_ok(buf, plen, &C, &uuid) &&
	      uuid == spill_uuid);
	/* refused: not an extent start, more than the extent holds */
	fm_read_send(fd, 15, 1, A.spill_off + 4096, 100);
	CHECK(fm_read_recv(fd, 15, buf, cap, NULL) == KVP_ESTALE);
	fm_read_send(fd, 16, 1, A.spill_off, A.spill_len + 1);
	CHECK(fm_read_recv(fd, 16, buf, cap, NULL) == KVP_ESTALE);
	fm_read_send(fd, 17, 1, C.spill_off, C.size);	/* still serving */
	CHECK(fm_read_recv(fd, 17, buf, cap, &plen) == 0 && image_ok(buf, plen, &C, NULL));

	/* --- a FREE of a memory extent being demoted waits for the copy --- */
	struct obj *dd[] = { &D };
	uint64_t did = demote_send(m, dd, 1, NULL);
	uint64_t fid = free_send(m, 0, D.off, D.gen);
	REQUIRE(fm_next(m) == 0);
	CHECK(m->h.opcode == WIRE_OP_DEMOTE && m->h.reqid == did);
	struct rbuf r;
	rb_init(&r, m->body, m->h.body_len);
	CHECK(rb_u32(&r) == 1 && rb_status(&r) == 0);
	D.spill_off = rb_u64(&r);
	D.spill_len = rb_u64(&r);
	REQUIRE(fm_next(m) == 0);
	CHECK(m->h.opcode == WIRE_OP_FREE && m->h.reqid == fid && m->h.status == 0);
	fm_read_send(fd, 18, 1, D.spill_off, D.size);
	CHECK(fm_read_recv(fd, 18, buf, cap, &plen) == 0 && image_ok(buf, plen, &D, NULL));
	/* the master drops the copy too (the object went): FREE tier 1 */
	fid = free_send(m, 1, D.spill_off, D.gen);
	REQUIRE(fm_next(m) == 0);
	CHECK(m->h.opcode == WIRE_OP_FREE && m->h.reqid == fid && m->h.status == 0);
	fm_read_send(fd, 19, 1, D.spill_off, D.size);
	CHECK(fm_read_recv(fd, 19, buf, cap, NULL) == KVP_ESTALE);

	/* --- PROMOTE A into a new memory extent --- */
	uint64_t poff = 12u << 20;
	CHECK(promote(m, A.spill_off, A.gen + 1, poff, A.alloc_len) == KVP_ESTALE);
	CHECK(promote(m, A.spill_off, A.gen, poff, A.size - 1) == KVP_EINVAL);
	CHECK(promote(m, A.spill_off, A.gen, poff + 1, A.alloc_len) != 0);
	CHECK(promote(m, A.spill_off, A.gen, poff, A.alloc_len) == 0);
	struct obj A2 = A;
	A2.off = poff;
	CHECK(image_ok((uint8_t *)s.base + poff, A.size, &A2, &uuid) && uuid == m->seg_uuid);
	fm_read_send(fd, 20, 0, poff, A.size);
	CHECK(fm_read_recv(fd, 20, buf, cap, &plen) == 0 && image_ok(buf, plen, &A2, NULL));

	/* --- heartbeats report the spill usage --- */
	m->spill_used = 0;
	for (int i = 0; i < 50 && !m->spill_used; i++)
		fm_next_within(m, 100);
	CHECK(m->spill_used == A.spill_len + B.spill_len + C.spill_len);
	close(fd);

	/* --- the master connection breaks: re-mount, tier-1 REPORTs from the index --- */
	close(m->fd);
	fm_handshake(m, SEGID);
	int nrep = fm_reports(m, rep, 32, -1);
	struct obj *live[] = { &A, &B, &C };
	CHECK(count_tier1(rep, nrep, live, 3) == 3);
	int t1 = 0;
	for (int i = 0; i < nrep && i < 32; i++)
		t1 += rep[i].tier == 1;
	CHECK(t1 == 3);

	/* --- restart: the spill file is scanned, the same extents come back --- */
	segment_close(&s);
	stop_node(&run, m);
	fm_start_node(&run, &c);
	dport = node_data_port(run.n);
	fm_handshake(m, SEGID);
	nrep = fm_reports(m, rep, 32, -1);
	CHECK(count_tier1(rep, nrep, live, 3) == 3);
	t1 = 0;
	for (int i = 0; i < nrep && i < 32; i++)
		t1 += rep[i].tier == 1;
	CHECK(t1 == 3);
	fd = dclient(dport);
	fm_read_send(fd, 21, 1, B.spill_off, B.size);
	CHECK(fm_read_recv(fd, 21, buf, cap, &plen) == 0 && image_ok(buf, plen, &B, NULL));
	close(fd);
	stop_node(&run, m);

	free(buf);
	free(m);
	return tl_done();
}

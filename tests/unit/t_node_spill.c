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
#include "kvpool.h"
#include "log.h"
#include "net.h"
#include "node.h"
#include "segment.h"
#include "wire.h"

static int failures;

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
		failures++; \
	} \
} while (0)
#define REQUIRE(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
		exit(1); \
	} \
} while (0)

#define TOKEN "t0ken-t_node_spill"
#define SEG_SIZE (16u << 20)
#define ALIGN 4096
#define SEGID 9

static char seg_path[300], spill_path[300];

static void cleanup(void)
{
	if (seg_path[0])
		unlink(seg_path);
	if (spill_path[0])
		unlink(spill_path);
}

static void on_fatal(int sig)
{
	cleanup();
	signal(sig, SIG_DFL);
	raise(sig);
}

/* ---- frames ---- */

static uint64_t deadline(void)
{
	return net_now_ms() + 10000;
}

static int send_frame(int fd, uint16_t op, uint8_t flags, int32_t status, uint64_t reqid,
		      const void *body, size_t blen)
{
	struct wire_hdr h = {
		.magic = WIRE_MAGIC, .version = WIRE_VERSION, .flags = flags, .opcode = op,
		.status = status, .body_len = (uint32_t)blen, .reqid = reqid,
	};
	uint8_t hdr[WIRE_HDR_SIZE];

	wire_hdr_encode(&h, hdr);
	if (net_send_all(fd, hdr, sizeof(hdr), deadline()) < 0)
		return -1;
	if (blen && net_send_all(fd, body, blen, deadline()) < 0)
		return -1;
	return 0;
}

static int recv_frame(int fd, struct wire_hdr *h, uint8_t *body, size_t cap, uint8_t *pay,
		      size_t pcap)
{
	uint8_t hdr[WIRE_HDR_SIZE];
	uint64_t dl = deadline();

	if (net_recv_all(fd, hdr, sizeof(hdr), dl) < 0)
		return -1;
	if (wire_hdr_decode(hdr, h, 1u << 30, 1ull << 40) != 0)
		return -1;
	if (h->body_len > cap || h->payload_len > pcap)
		return -1;
	if (h->body_len && net_recv_all(fd, body, h->body_len, dl) < 0)
		return -1;
	if (h->payload_len && net_recv_all(fd, pay, h->payload_len, dl) < 0)
		return -1;
	return 0;
}

static bool quiet(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 0;
}

/* ---- the fake master ---- */

struct fmaster {
	int lfd, fd;
	uint8_t body[4 << 20];
	struct wire_hdr h;
	uint64_t seg_uuid, spill_capacity, spill_used;
	uint8_t secret[WIRE_SECRET_LEN];
	uint64_t reqid;
};

/* Next frame that is not a heartbeat request (answered here). */
static int fm_next_within(struct fmaster *m, int ms)
{
	uint64_t until = net_now_ms() + (uint64_t)ms;

	for (;;) {
		uint64_t now = net_now_ms();
		if (now >= until || quiet(m->fd, (int)(until - now)))
			return 1;
		if (recv_frame(m->fd, &m->h, m->body, sizeof(m->body), NULL, 0) < 0)
			return -1;
		if (m->h.opcode == WIRE_OP_HEARTBEAT && !(m->h.flags & WIRE_F_REPLY)) {
			struct rbuf r;
			rb_init(&r, m->body, m->h.body_len);
			rb_u32(&r);
			rb_u64(&r);
			m->spill_used = rb_u64(&r);
			send_frame(m->fd, WIRE_OP_HEARTBEAT, WIRE_F_REPLY, 0, m->h.reqid, NULL, 0);
			continue;
		}
		return 0;
	}
}

static int fm_next(struct fmaster *m)
{
	return fm_next_within(m, 10000) == 0 ? 0 : -1;
}

static void fm_handshake(struct fmaster *m)
{
	struct pollfd p = { .fd = m->lfd, .events = POLLIN };
	struct rbuf r;
	char s[300];
	size_t n;

	REQUIRE(poll(&p, 1, 10000) == 1);
	m->fd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC);
	REQUIRE(m->fd >= 0);
	REQUIRE(fm_next(m) == 0 && m->h.opcode == WIRE_OP_HELLO);
	uint8_t rep[10];
	uint64_t epoch = 5;
	uint16_t ver = WIRE_VERSION;
	memcpy(rep, &epoch, 8);
	memcpy(rep + 8, &ver, 2);
	send_frame(m->fd, WIRE_OP_HELLO, WIRE_F_REPLY, 0, m->h.reqid, rep, sizeof(rep));

	REQUIRE(fm_next(m) == 0 && m->h.opcode == WIRE_OP_MOUNT);
	rb_init(&r, m->body, m->h.body_len);
	for (int i = 0; i < 3; i++)
		rb_cstr(&r, s, sizeof(s));
	rb_u64(&r);
	rb_u64(&r);
	rb_u64(&r);
	m->seg_uuid = rb_u64(&r);
	rb_u64(&r);
	rb_u32(&r);
	rb_cstr(&r, s, sizeof(s));
	rb_blob(&r, &n);
	m->spill_capacity = rb_u64(&r);
	rb_i32(&r);
	CHECK(rb_done(&r));
	net_random(m->secret, sizeof(m->secret));
	struct wbuf b;
	wb_init(&b);
	wb_u32(&b, SEGID);
	wb_blob(&b, m->secret, sizeof(m->secret));
	send_frame(m->fd, WIRE_OP_MOUNT, WIRE_F_REPLY, 0, m->h.reqid, b.p, b.len);
	wb_free(&b);
}

struct rep_ext {
	char key[64];
	uint8_t tier;
	uint64_t off, alloc_len, value_len, generation;
};

static int fm_reports(struct fmaster *m, struct rep_ext *out, int max)
{
	int n = 0;

	for (;;) {
		int r0 = fm_next_within(m, 400);
		if (r0 == 1)
			break;
		REQUIRE(r0 == 0);
		REQUIRE(m->h.opcode == WIRE_OP_REPORT);
		struct rbuf r;
		rb_init(&r, m->body, m->h.body_len);
		CHECK(rb_u32(&r) == SEGID);
		uint32_t cnt = rb_u32(&r);
		for (uint32_t i = 0; i < cnt && rb_ok(&r); i++) {
			struct rep_ext e = { 0 };
			rb_cstr(&r, e.key, sizeof(e.key));
			e.tier = rb_u8(&r);
			e.off = rb_u64(&r);
			e.alloc_len = rb_u64(&r);
			e.value_len = rb_u64(&r);
			rb_u64(&r);
			e.generation = rb_u64(&r);
			rb_u64(&r);
			if (n < max)
				out[n] = e;
			n++;
		}
		CHECK(rb_done(&r));
		uint8_t rep[8] = { 0 };
		memcpy(rep, &cnt, 4);
		send_frame(m->fd, WIRE_OP_REPORT, WIRE_F_REPLY, 0, m->h.reqid, rep, 8);
	}
	return n;
}

/* ---- the node ---- */

struct runner {
	struct node *n;
	pthread_t th;
};

static void *run_thread(void *arg)
{
	struct runner *r = arg;

	node_run(r->n);
	return NULL;
}

static void start_node(struct runner *r, const struct kvp_conf *c)
{
	char err[512];

	r->n = node_create(c, err, sizeof(err));
	if (!r->n) {
		fprintf(stderr, "node_create: %s\n", err);
		exit(1);
	}
	REQUIRE(pthread_create(&r->th, NULL, run_thread, r) == 0);
}

static void stop_node(struct runner *r, struct fmaster *m)
{
	node_stop(r->n);
	while (fm_next_within(m, 3000) == 0) {
		if (m->h.opcode == WIRE_OP_UNMOUNT && !(m->h.flags & WIRE_F_REPLY)) {
			send_frame(m->fd, WIRE_OP_UNMOUNT, WIRE_F_REPLY, 0, m->h.reqid, NULL, 0);
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

static void put_obj(uint8_t *base, struct obj *o, uint64_t uuid)
{
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
	char hp[64], err[256];
	struct wbuf b;
	struct wire_hdr h;
	uint8_t body[64];

	snprintf(hp, sizeof(hp), "127.0.0.1:%d", port);
	int fd = net_connect(hp, 5000, err, sizeof(err));
	REQUIRE(fd >= 0);
	wb_init(&b);
	wb_u16(&b, WIRE_ROLE_CLIENT);
	wb_cstr(&b, TOKEN);
	wb_cstr(&b, "t");
	wb_cstr(&b, "host-c");
	send_frame(fd, WIRE_OP_HELLO, 0, 0, 1, b.p, b.len);
	wb_free(&b);
	REQUIRE(recv_frame(fd, &h, body, sizeof(body), NULL, 0) == 0 && h.status == 0);
	return fd;
}

static void read_send(int fd, uint64_t reqid, uint8_t tier, uint64_t off, uint64_t len)
{
	uint8_t b[17];

	b[0] = tier;
	memcpy(b + 1, &off, 8);
	memcpy(b + 9, &len, 8);
	REQUIRE(send_frame(fd, WIRE_OP_READ, 0, 0, reqid, b, sizeof(b)) == 0);
}

static int read_recv(int fd, uint64_t reqid, uint8_t *out, size_t cap, uint64_t *plen)
{
	struct wire_hdr h;
	uint8_t body[16];

	if (recv_frame(fd, &h, body, sizeof(body), out, cap) < 0)
		return -999;
	CHECK(h.opcode == WIRE_OP_READ && h.reqid == reqid);
	if (plen)
		*plen = h.payload_len;
	return h.status;
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
	REQUIRE(send_frame(m->fd, WIRE_OP_DEMOTE, 0, 0, id, b.p, b.len) == 0);
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
		st[i] = rb_i32(&r);
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
	REQUIRE(send_frame(m->fd, WIRE_OP_FREE, 0, 0, id, b.p, b.len) == 0);
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
	REQUIRE(send_frame(m->fd, WIRE_OP_PROMOTE, 0, 0, id, b.p, b.len) == 0);
	wb_free(&b);
	REQUIRE(fm_next(m) == 0);
	REQUIRE(m->h.opcode == WIRE_OP_PROMOTE && m->h.reqid == id);
	struct rbuf r;
	rb_init(&r, m->body, m->h.body_len);
	CHECK(rb_u32(&r) == 1);
	int32_t st = rb_i32(&r);
	CHECK(rb_done(&r));
	return st;
}

static int count_tier1(const struct rep_ext *rep, int n, struct obj **v, int nv)
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
	char err[512], seg[64], mhp[64], sp[400];
	struct fmaster *m = calloc(1, sizeof(*m));
	struct runner run = { 0 };

	signal(SIGPIPE, SIG_IGN);
	log_init("t_node_spill", getenv("T_DEBUG") ? LOG_DEBUG : LOG_WARNING);
	REQUIRE(m);
	m->lfd = net_listen("127.0.0.1:0", err, sizeof(err));
	REQUIRE(m->lfd >= 0);
	snprintf(seg, sizeof(seg), "kvpt-nodespill-%d", (int)getpid());
	segment_path(seg, seg_path, sizeof(seg_path));
	snprintf(spill_path, sizeof(spill_path), "/var/tmp/kvp-t_node_spill-%d", (int)getpid());
	atexit(cleanup);
	signal(SIGTERM, on_fatal);
	signal(SIGINT, on_fatal);

	conf_defaults(&c);
	snprintf(mhp, sizeof(mhp), "127.0.0.1:%d", net_local_port(m->lfd));
	snprintf(sp, sizeof(sp), "spill.path=%s", spill_path);
	const char *const ov[] = {
		"node.name=tnode", "node.listen=127.0.0.1:0", "node.http_listen=127.0.0.1:0",
		"node.segment_size=16M", "node.align=4K", "node.heartbeat_interval=100ms",
		"client.host_id=host-t", "spill.size=64M", "spill.queue_depth=8", sp, NULL,
	};
	for (const char *const *o = ov; *o; o++)
		REQUIRE(conf_set_override(&c, *o, err, sizeof(err)) == 0);
	REQUIRE(conf_set(&c, "node", "segment", seg, CONF_SRC_CMDLINE, err, sizeof(err)) == 0);
	REQUIRE(conf_set(&c, "cluster", "master", mhp, CONF_SRC_CMDLINE, err, sizeof(err)) == 0);
	snprintf(c.cluster.token, sizeof(c.cluster.token), "%s", TOKEN);

	/* --- start: MOUNT announces the spill tier --- */
	start_node(&run, &c);
	int dport = node_data_port(run.n);
	fm_handshake(m);
	CHECK(m->spill_capacity >= (60u << 20) && m->spill_capacity < (64u << 20));
	struct rep_ext rep[32];
	CHECK(fm_reports(m, rep, 32) == 0);

	/* extents written straight into the segment, as a local client does */
	struct segment s;
	REQUIRE(segment_attach(&s, seg_path, true, err, sizeof(err)) == 0);
	REQUIRE(s.uuid == m->seg_uuid);
	struct obj A = { "obj-a", 20000, 101, SEG_DATA_OFF, 0, 0, 0, 0, 1 };
	struct obj B = { "obj-b", (3u << 20) + 123, 102, 0, 0, 0, 0, 0, 2 };
	struct obj C = { "obj-c", 1, 103, 0, 0, 0, 0, 0, 3 };
	struct obj D = { "obj-d", 500000, 104, 0, 0, 0, 0, 0, 4 };
	struct obj *all[] = { &A, &B, &C, &D };
	uint64_t off = SEG_DATA_OFF;
	for (int i = 0; i < 4; i++) {
		all[i]->off = off;
		put_obj(s.base, all[i], s.uuid);
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
	read_send(fd, 11, 1, B.spill_off, B.size);
	read_send(fd, 12, 0, D.off, D.size);
	read_send(fd, 13, 1, A.spill_off, A.size);
	read_send(fd, 14, 1, C.spill_off, C.size);
	uint64_t plen = 0, uuid = 0, spill_uuid = 0;
	CHECK(read_recv(fd, 11, buf, cap, &plen) == 0 && plen == B.size);
	CHECK(image_ok(buf, plen, &B, &spill_uuid) && spill_uuid != m->seg_uuid);
	CHECK(read_recv(fd, 12, buf, cap, &plen) == 0 && plen == D.size);
	CHECK(image_ok(buf, plen, &D, &uuid) && uuid == m->seg_uuid);
	CHECK(read_recv(fd, 13, buf, cap, &plen) == 0 && image_ok(buf, plen, &A, &uuid) &&
	      uuid == spill_uuid);
	CHECK(read_recv(fd, 14, buf, cap, &plen) == 0 && image_ok(buf, plen, &C, &uuid) &&
	      uuid == spill_uuid);
	/* refused: not an extent start, more than the extent holds */
	read_send(fd, 15, 1, A.spill_off + 4096, 100);
	CHECK(read_recv(fd, 15, buf, cap, NULL) == KVP_ESTALE);
	read_send(fd, 16, 1, A.spill_off, A.spill_len + 1);
	CHECK(read_recv(fd, 16, buf, cap, NULL) == KVP_ESTALE);
	read_send(fd, 17, 1, C.spill_off, C.size);	/* still serving */
	CHECK(read_recv(fd, 17, buf, cap, &plen) == 0 && image_ok(buf, plen, &C, NULL));

	/* --- a FREE of a memory extent being demoted waits for the copy --- */
	struct obj *dd[] = { &D };
	uint64_t did = demote_send(m, dd, 1, NULL);
	uint64_t fid = free_send(m, 0, D.off, D.gen);
	REQUIRE(fm_next(m) == 0);
	CHECK(m->h.opcode == WIRE_OP_DEMOTE && m->h.reqid == did);
	struct rbuf r;
	rb_init(&r, m->body, m->h.body_len);
	CHECK(rb_u32(&r) == 1 && rb_i32(&r) == 0);
	D.spill_off = rb_u64(&r);
	D.spill_len = rb_u64(&r);
	REQUIRE(fm_next(m) == 0);
	CHECK(m->h.opcode == WIRE_OP_FREE && m->h.reqid == fid && m->h.status == 0);
	read_send(fd, 18, 1, D.spill_off, D.size);
	CHECK(read_recv(fd, 18, buf, cap, &plen) == 0 && image_ok(buf, plen, &D, NULL));
	/* the master drops the copy too (the object went): FREE tier 1 */
	fid = free_send(m, 1, D.spill_off, D.gen);
	REQUIRE(fm_next(m) == 0);
	CHECK(m->h.opcode == WIRE_OP_FREE && m->h.reqid == fid && m->h.status == 0);
	read_send(fd, 19, 1, D.spill_off, D.size);
	CHECK(read_recv(fd, 19, buf, cap, NULL) == KVP_ESTALE);

	/* --- PROMOTE A into a new memory extent --- */
	uint64_t poff = 12u << 20;
	CHECK(promote(m, A.spill_off, A.gen + 1, poff, A.alloc_len) == KVP_ESTALE);
	CHECK(promote(m, A.spill_off, A.gen, poff, A.size - 1) == KVP_EINVAL);
	CHECK(promote(m, A.spill_off, A.gen, poff + 1, A.alloc_len) != 0);
	CHECK(promote(m, A.spill_off, A.gen, poff, A.alloc_len) == 0);
	struct obj A2 = A;
	A2.off = poff;
	CHECK(image_ok((uint8_t *)s.base + poff, A.size, &A2, &uuid) && uuid == m->seg_uuid);
	read_send(fd, 20, 0, poff, A.size);
	CHECK(read_recv(fd, 20, buf, cap, &plen) == 0 && image_ok(buf, plen, &A2, NULL));

	/* --- heartbeats report the spill usage --- */
	m->spill_used = 0;
	for (int i = 0; i < 50 && !m->spill_used; i++)
		fm_next_within(m, 100);
	CHECK(m->spill_used == A.spill_len + B.spill_len + C.spill_len);
	close(fd);

	/* --- the master connection breaks: re-mount, tier-1 REPORTs from the index --- */
	close(m->fd);
	fm_handshake(m);
	int nrep = fm_reports(m, rep, 32);
	struct obj *live[] = { &A, &B, &C };
	CHECK(count_tier1(rep, nrep, live, 3) == 3);
	int t1 = 0;
	for (int i = 0; i < nrep && i < 32; i++)
		t1 += rep[i].tier == 1;
	CHECK(t1 == 3);

	/* --- restart: the spill file is scanned, the same extents come back --- */
	segment_close(&s);
	stop_node(&run, m);
	start_node(&run, &c);
	dport = node_data_port(run.n);
	fm_handshake(m);
	nrep = fm_reports(m, rep, 32);
	CHECK(count_tier1(rep, nrep, live, 3) == 3);
	t1 = 0;
	for (int i = 0; i < nrep && i < 32; i++)
		t1 += rep[i].tier == 1;
	CHECK(t1 == 3);
	fd = dclient(dport);
	read_send(fd, 21, 1, B.spill_off, B.size);
	CHECK(read_recv(fd, 21, buf, cap, &plen) == 0 && image_ok(buf, plen, &B, NULL));
	close(fd);
	stop_node(&run, m);

	free(buf);
	free(m);
	if (failures) {
		fprintf(stderr, "t_node_spill: %d checks failed\n", failures);
		return 1;
	}
	printf("t_node_spill: ok\n");
	return 0;
}

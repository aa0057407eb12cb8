/* fake_master.h — a scripted fake kvpool-master for the tests of
 * kvpool-node (t_node_*.c): raw wire.h frames on a loopback socket, the
 * node under test in-process on its own thread (fm_start_node), a data
 * client, and removal of the node's files however the test ends.
 * Header-only, single-threaded on the test's side (the node has its own
 * loop thread); checks come from testlib.h. Define FM_WAIT_MS (the wait
 * for one frame, default 5000) before including it to change it.
 */
#ifndef KVP_FAKE_MASTER_H
#define KVP_FAKE_MASTER_H

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

#include "clock.h"
#include "conf.h"
#include "net.h"
#include "node.h"
#include "segment.h"
#include "testlib.h"
#include "wire.h"

#ifndef FM_WAIT_MS
#define FM_WAIT_MS 5000
#endif

/* Who the node under test is (fm_conf sets it, fm_handshake checks it). */
#define FM_TOKEN "t0ken-for-t_node"
#define FM_NAME "tnode"
#define FM_HOST "host-t"
#define FM_EPOCH 77		/* the fake master's HELLO epoch: its grants carry it */
#define FM_SEG_SIZE (16u << 20)
#define FM_ALIGN 4096

/* ---- raw frames ---- */

static inline uint64_t fm_deadline(void)
{
	return clock_now_ms() + FM_WAIT_MS;
}

/* Sends a frame's header and body; a payload of payload_len bytes is the
 * caller's to send after it. */
static inline int fm_send_frame(int fd, uint16_t op, uint8_t flags, int32_t status, uint64_t reqid,
				const void *body, size_t blen, uint64_t payload_len)
{
	struct wire_hdr h = {
		.magic = WIRE_MAGIC, .version = WIRE_VERSION, .flags = flags, .opcode = op,
		.status = status, .body_len = (uint32_t)blen, .reqid = reqid,
		.payload_len = payload_len,
	};
	uint8_t hdr[WIRE_HDR_SIZE];

	wire_hdr_encode(&h, hdr);
	if (net_send_all(fd, hdr, sizeof(hdr), fm_deadline()) < 0)
		return -1;
	if (blen && net_send_all(fd, body, blen, fm_deadline()) < 0)
		return -1;
	return 0;
}

/* Receives one frame within ms; the body (and a payload up to pcap bytes)
 * is stored. Returns 0, or -1 on EOF, timeout or a frame too large. */
static inline int fm_recv_frame_within(int fd, struct wire_hdr *h, uint8_t *body, size_t cap,
				       uint8_t *pay, size_t pcap, uint64_t ms)
{
	uint8_t hdr[WIRE_HDR_SIZE];
	uint64_t dl = clock_now_ms() + ms;

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

static inline int fm_recv_frame(int fd, struct wire_hdr *h, uint8_t *body, size_t cap,
				uint8_t *pay, size_t pcap)
{
	return fm_recv_frame_within(fd, h, body, cap, pay, pcap, FM_WAIT_MS);
}

/* Nothing arrives on fd within ms. */
static inline bool fm_quiet(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 0;
}

/* ---- files the node creates ---- */

/* Removed at exit and on SIGTERM/SIGINT (fm_arm_cleanup). */
static char fm_seg_path[300], fm_spill_path[300];

static inline void fm_cleanup(void)
{
	if (fm_seg_path[0])
		unlink(fm_seg_path);
	if (fm_spill_path[0])
		unlink(fm_spill_path);
}

static inline void fm_on_fatal(int sig)
{
	fm_cleanup();
	signal(sig, SIG_DFL);
	raise(sig);
}

static inline void fm_arm_cleanup(void)
{
	atexit(fm_cleanup);
	signal(SIGTERM, fm_on_fatal);
	signal(SIGINT, fm_on_fatal);
}

/* ---- the fake master ---- */

struct fmaster {
	int lfd, fd;
	uint8_t body[8 << 20];
	struct wire_hdr h;		/* the last frame fm_next read */
	/* from MOUNT */
	char shm_path[256], endpoint[128], name[128];
	uint64_t seg_size, seg_uuid, data_off, spill_capacity;
	uint32_t align;
	uint32_t segment_id;		/* given in the MOUNT reply */
	uint8_t secret[WIRE_SECRET_LEN];
	/* from heartbeats */
	int heartbeats;
	int keepalives;			/* heartbeats for no segment (while scanning) */
	uint64_t last_used, spill_used;
	uint64_t tcp_read, tcp_written;	/* HEARTBEAT: the data server's TCP bytes */
	uint64_t reqid;			/* of the requests it sends */
};

/* Listens on a free loopback port (the node's cluster.master). */
static inline struct fmaster *fm_new(void)
{
	struct fmaster *m = calloc(1, sizeof(*m));
	char err[256];

	REQUIRE(m);
	m->lfd = net_listen("127.0.0.1:0", err, sizeof(err));
	REQUIRE(m->lfd >= 0, "%s", err);
	m->fd = -1;
	return m;
}

/* The next frame that is not a heartbeat (heartbeats are checked, counted
 * and answered OK) within ms: 0, 1 on timeout, -1 on EOF or a broken frame. */
static inline int fm_next_within(struct fmaster *m, int ms)
{
	uint64_t until = clock_now_ms() + (uint64_t)ms;

	for (;;) {
		uint64_t now = clock_now_ms();
		if (now >= until || fm_quiet(m->fd, (int)(until - now)))
			return 1;
		if (fm_recv_frame(m->fd, &m->h, m->body, sizeof(m->body), NULL, 0) < 0)
			return -1;
		if (m->h.opcode == WIRE_OP_HEARTBEAT && !(m->h.flags & WIRE_F_REPLY)) {
			struct rbuf r;
			rb_init(&r, m->body, m->h.body_len);
			uint32_t sid = rb_u32(&r);
			if (sid == 0) {
				/* a keepalive while the node scans: no segment,
				 * answered as the master does */
				m->keepalives++;
				fm_send_frame(m->fd, WIRE_OP_HEARTBEAT, WIRE_F_REPLY, KVP_ENOSEG,
					      m->h.reqid, NULL, 0, 0);
				continue;
			}
			CHECK(sid == m->segment_id);
			m->last_used = rb_u64(&r);
			m->spill_used = rb_u64(&r);
			/* the data server's TCP bytes read and written */
			m->tcp_read = rb_u64(&r);
			m->tcp_written = rb_u64(&r);
			CHECK(rb_done(&r));
			m->heartbeats++;
			fm_send_frame(m->fd, WIRE_OP_HEARTBEAT, WIRE_F_REPLY, 0, m->h.reqid, NULL, 0, 0);
			continue;
		}
		return 0;
	}
}

static inline int fm_next(struct fmaster *m)
{
	return fm_next_within(m, FM_WAIT_MS) == 0 ? 0 : -1;
}

static inline void fm_accept(struct fmaster *m)
{
	struct pollfd p = { .fd = m->lfd, .events = POLLIN };

	REQUIRE(poll(&p, 1, FM_WAIT_MS) == 1);
	m->fd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC);
	REQUIRE(m->fd >= 0);
}

/* Accepts the node's connection and answers HELLO and MOUNT as a master
 * would, mounting it as segment_id; checks what fm_conf configured. */
static inline void fm_handshake(struct fmaster *m, uint32_t segment_id)
{
	struct rbuf r;
	char tok[256], host[128];

	fm_accept(m);
	REQUIRE(fm_next(m) == 0);
	REQUIRE(m->h.opcode == WIRE_OP_HELLO && !(m->h.flags & WIRE_F_REPLY));
	rb_init(&r, m->body, m->h.body_len);
	CHECK(rb_u16(&r) == WIRE_ROLE_NODE);
	rb_cstr(&r, tok, sizeof(tok));
	rb_cstr(&r, m->name, sizeof(m->name));
	rb_cstr(&r, host, sizeof(host));
	CHECK(rb_done(&r));
	CHECK(strcmp(tok, FM_TOKEN) == 0);
	CHECK(strcmp(m->name, FM_NAME) == 0);
	CHECK(strcmp(host, FM_HOST) == 0);
	uint8_t rep[10];
	uint64_t epoch = FM_EPOCH;
	uint16_t ver = WIRE_VERSION;
	memcpy(rep, &epoch, 8);
	memcpy(rep + 8, &ver, 2);
	fm_send_frame(m->fd, WIRE_OP_HELLO, WIRE_F_REPLY, 0, m->h.reqid, rep, sizeof(rep), 0);

	REQUIRE(fm_next(m) == 0);
	REQUIRE(m->h.opcode == WIRE_OP_MOUNT);
	rb_init(&r, m->body, m->h.body_len);
	rb_cstr(&r, m->name, sizeof(m->name));
	rb_cstr(&r, host, sizeof(host));
	rb_cstr(&r, m->shm_path, sizeof(m->shm_path));
	rb_u64(&r);	/* dev */
	rb_u64(&r);	/* ino */
	m->seg_size = rb_u64(&r);
	m->seg_uuid = rb_u64(&r);
	m->data_off = rb_u64(&r);
	m->align = rb_u32(&r);
	rb_cstr(&r, m->endpoint, sizeof(m->endpoint));
	size_t rl;
	rb_blob(&r, &rl);
	m->spill_capacity = rb_u64(&r);
	int32_t numa = rb_i32(&r);
	CHECK(rb_done(&r));
	CHECK(strcmp(m->name, FM_NAME) == 0);
	CHECK(strcmp(host, FM_HOST) == 0);
	CHECK(m->seg_size == FM_SEG_SIZE);
	CHECK(m->seg_uuid != 0);
	CHECK(m->data_off == segment_data_off(m->seg_size, m->align));	/* past the commit map */
	CHECK(m->align == FM_ALIGN);
	CHECK(numa == -1);
	m->segment_id = segment_id;
	net_random(m->secret, sizeof(m->secret));
	struct wbuf b;
	wb_init(&b);
	wb_u32(&b, segment_id);
	wb_blob(&b, m->secret, sizeof(m->secret));
	fm_send_frame(m->fd, WIRE_OP_MOUNT, WIRE_F_REPLY, 0, m->h.reqid, b.p, b.len, 0);
	wb_free(&b);
}

/* One extent of a REPORT. */
struct fm_ext {
	char key[64];
	uint8_t tier;
	uint64_t off, alloc_len, value_len, checksum, generation;
};

/* Reads REPORT frames until quiet, answering each (all adopted), and
 * returns how many extents they held (the first max in out[]). With tier
 * >= 0, every extent must be of that tier. */
static inline int fm_reports(struct fmaster *m, struct fm_ext *out, int max, int tier)
{
	int n = 0;

	for (;;) {
		int r0 = fm_next_within(m, 400);
		if (r0 == 1)
			break;
		REQUIRE(r0 == 0);
		if (m->h.opcode != WIRE_OP_REPORT) {
			fprintf(stderr, "unexpected opcode %u while reading REPORTs\n", m->h.opcode);
			tl_failures++;
			break;
		}
		struct rbuf r;
		rb_init(&r, m->body, m->h.body_len);
		CHECK(rb_u32(&r) == m->segment_id);
		uint32_t cnt = rb_u32(&r);
		for (uint32_t i = 0; i < cnt && rb_ok(&r); i++) {
			struct fm_ext e = { 0 };
			rb_cstr(&r, e.key, sizeof(e.key));
			e.tier = rb_u8(&r);
			if (tier >= 0)
				CHECK(e.tier == tier);
			e.off = rb_u64(&r);
			e.alloc_len = rb_u64(&r);
			e.value_len = rb_u64(&r);
			e.checksum = rb_u64(&r);
			e.generation = rb_u64(&r);
			rb_u64(&r);	/* put time */
			if (n < max)
				out[n] = e;
			n++;
		}
		CHECK(rb_done(&r));
		uint8_t rep[8];
		uint32_t adopted = cnt, rejected = 0;
		memcpy(rep, &adopted, 4);
		memcpy(rep + 4, &rejected, 4);
		fm_send_frame(m->fd, WIRE_OP_REPORT, WIRE_F_REPLY, 0, m->h.reqid, rep, 8, 0);
	}
	return n;
}

/* ---- the node under test ---- */

/* The node's configuration for this fake master: FM_NAME on loopback
 * ports, FM_HOST, a FM_SEG_SIZE segment named @seg (its file in
 * fm_seg_path), FM_TOKEN, then the "section.key=value" @extra. */
static inline void fm_conf(struct kvp_conf *c, const struct fmaster *m, const char *seg,
			   const char *const *extra)
{
	const char *const ov[] = {
		"node.name=" FM_NAME, "node.listen=127.0.0.1:0", "node.http_listen=127.0.0.1:0",
		"node.segment_size=16M", "node.align=4K", "client.host_id=" FM_HOST, NULL,
	};
	char err[512], mhp[64];

	conf_defaults(c);
	for (const char *const *o = ov; *o; o++)
		REQUIRE(conf_set_override(c, *o, err, sizeof(err)) == 0, "%s", err);
	for (const char *const *o = extra; o && *o; o++)
		REQUIRE(conf_set_override(c, *o, err, sizeof(err)) == 0, "%s", err);
	REQUIRE(conf_set(c, "node", "segment", seg, CONF_SRC_CMDLINE, err, sizeof(err)) == 0,
		"%s", err);
	snprintf(mhp, sizeof(mhp), "127.0.0.1:%d", net_local_port(m->lfd));
	REQUIRE(conf_set(c, "cluster", "master", mhp, CONF_SRC_CMDLINE, err, sizeof(err)) == 0,
		"%s", err);
	snprintf(c->cluster.token, sizeof(c->cluster.token), "%s", FM_TOKEN);
	segment_path(seg, fm_seg_path, sizeof(fm_seg_path));
}

/* READY callbacks so far (node_on_ready). */
static atomic_int fm_ready;

static inline void fm_on_ready(void *arg)
{
	atomic_fetch_add(&fm_ready, 1);
}

/* Until fm_ready reaches want (checked every 10 ms for up to ms). */
static inline bool fm_wait_ready(int want, int ms)
{
	for (int i = 0; i < ms / 10; i++) {
		if (atomic_load(&fm_ready) >= want)
			return true;
		usleep(10000);
	}
	return atomic_load(&fm_ready) >= want;
}

struct fm_node {
	struct node *n;
	pthread_t th;
	int rc;				/* node_run's, once done */
	atomic_bool done;
};

static inline void *fm_node_thread(void *arg)
{
	struct fm_node *r = arg;

	r->rc = node_run(r->n);
	atomic_store(&r->done, true);
	return NULL;
}

/* node_create with c, then node_run on a thread of its own. */
static inline void fm_start_node(struct fm_node *r, const struct kvp_conf *c)
{
	char err[512];

	r->n = node_create(c, err, sizeof(err));
	REQUIRE(r->n, "node_create: %s", err);
	node_on_ready(r->n, fm_on_ready, NULL);
	atomic_store(&r->done, false);
	REQUIRE(pthread_create(&r->th, NULL, fm_node_thread, r) == 0);
}

/* ---- a data client ---- */

static inline int fm_dconnect(int port)
{
	char hp[64], err[256];

	snprintf(hp, sizeof(hp), "127.0.0.1:%d", port);
	int fd = net_connect(hp, 5000, err, sizeof(err));
	REQUIRE(fd >= 0, "%s", err);
	return fd;
}

/* HELLO as a client: the reply's status. */
static inline int fm_dhello(int fd, const char *token)
{
	struct wbuf b;
	struct wire_hdr h;
	uint8_t body[64];

	wb_init(&b);
	wb_u16(&b, WIRE_ROLE_CLIENT);
	wb_cstr(&b, token);
	wb_cstr(&b, "t");
	wb_cstr(&b, "host-c");
	fm_send_frame(fd, WIRE_OP_HELLO, 0, 0, 1, b.p, b.len, 0);
	wb_free(&b);
	if (fm_recv_frame(fd, &h, body, sizeof(body), NULL, 0) < 0)
		return -999;
	if (!h.status)
		CHECK(h.body_len == 10);
	return h.status;
}

static inline void fm_read_send(int fd, uint64_t reqid, uint8_t tier, uint64_t off, uint64_t len)
{
	uint8_t b[17];

	b[0] = tier;
	memcpy(b + 1, &off, 8);
	memcpy(b + 9, &len, 8);
	REQUIRE(fm_send_frame(fd, WIRE_OP_READ, 0, 0, reqid, b, sizeof(b), 0) == 0);
}

/* The reply to READ reqid: its status; the payload in out, its length in
 * *plen (if not NULL). */
static inline int fm_read_recv(int fd, uint64_t reqid, uint8_t *out, size_t cap, uint64_t *plen)
{
	struct wire_hdr h;
	uint8_t body[16];

	if (fm_recv_frame(fd, &h, body, sizeof(body), out, cap) < 0)
		return -999;
	CHECK(h.opcode == WIRE_OP_READ && h.reqid == reqid);
	if (plen)
		*plen = h.payload_len;
	return h.status;
}

#endif

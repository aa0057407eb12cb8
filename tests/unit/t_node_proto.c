/* t_node_proto: the node's side of the wire protocol against a scripted fake
 * master (raw frames on loopback): HELLO + MOUNT fields, heartbeats, WRITE
 * with a grant then READ back, every refused WRITE/READ form, tombstoning of
 * a bad image, FREE (immediate and deferred behind a write in flight),
 * UNMOUNT on stop after draining a transfer, REPORT of the surviving extents
 * after a restart, re-mount after the master connection breaks or a
 * heartbeat is refused, the connection limit, /metrics and /health.
 * The node runs in-process (node.h) on its own thread. Exit 0/1/77.
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

#include "clock.h"
#include "conf.h"
#include "extent.h"
#include "grant.h"
#include "kvpool.h"
#include "log.h"
#include "net.h"
#include "node.h"
#include "segment.h"
#include "wire.h"

#include "fake_master.h"

#define ALIGN FM_ALIGN

/* ---- a data client ---- */

static int dread(int fd, uint8_t tier, uint64_t off, uint64_t len, uint8_t *out, size_t cap)
{
	uint64_t plen = 0;
	int st;

	fm_read_send(fd, 5, tier, off, len);
	st = fm_read_recv(fd, 5, out, cap, &plen);
	if (!st)
		CHECK(plen == len);
	return st;
}

/* The epoch WRITEs say they were granted under (the fake master's). */
static uint64_t write_epoch = FM_EPOCH;

static void write_hdr(int fd, uint32_t seg, uint64_t gen, uint64_t off, uint64_t alloc_len,
		      const uint8_t grant[WIRE_GRANT_LEN], uint64_t plen)
{
	uint8_t b[4 + 8 * 4 + WIRE_GRANT_LEN];
	uint64_t epoch = write_epoch;

	memcpy(b, &seg, 4);
	memcpy(b + 4, &gen, 8);
	memcpy(b + 12, &off, 8);
	memcpy(b + 20, &alloc_len, 8);
	memcpy(b + 28, &epoch, 8);
	memcpy(b + 36, grant, WIRE_GRANT_LEN);
	REQUIRE(fm_send_frame(fd, WIRE_OP_WRITE, 0, 0, 9, b, sizeof(b), plen) == 0);
}

static int dwrite_reply(int fd)
{
	struct wire_hdr h;
	uint8_t body[16];

	if (fm_recv_frame(fd, &h, body, sizeof(body), NULL, 0) < 0)
		return -999;
	CHECK(h.opcode == WIRE_OP_WRITE && h.reqid == 9);
	return h.status;
}

static int dwrite(int fd, uint32_t seg, uint64_t gen, uint64_t off, uint64_t alloc_len,
		  const uint8_t grant[WIRE_GRANT_LEN], const void *img, uint64_t plen)
{
	write_hdr(fd, seg, gen, off, alloc_len, grant, plen);
	if (plen)
		REQUIRE(net_send_all(fd, img, plen, fm_deadline()) == 0);
	return dwrite_reply(fd);
}

/* An extent image for key/value with the given generation and uuid. */
static uint8_t *make_image(const char *key, size_t vlen, uint64_t gen, uint64_t uuid,
			   uint64_t *len, uint64_t *alloc_len, uint8_t seed)
{
	size_t klen = strlen(key);
	uint64_t n = ext_size((uint32_t)klen, vlen);
	uint8_t *img = malloc(n);

	REQUIRE(img);
	uint8_t *v = img + EXT_HDR_SIZE + klen;
	for (size_t i = 0; i < vlen; i++)
		v[i] = (uint8_t)(i * 31 + seed);
	struct ext_hdr h = {
		.key_len = (uint32_t)klen, .value_len = vlen,
		.value_checksum = ext_checksum(v, vlen), .generation = gen, .seg_uuid = uuid,
		.put_time_ns = 1,
	};
	ext_encode(img, &h, key);
	*len = n;
	*alloc_len = (n + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
	return img;
}

static void http_get(int port, const char *path, char *out, size_t cap)
{
	char hp[64], err[256], req[256];

	snprintf(hp, sizeof(hp), "127.0.0.1:%d", port);
	int fd = net_connect(hp, 5000, err, sizeof(err));
	REQUIRE(fd >= 0);
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
	REQUIRE(net_send_all(fd, req, (size_t)n, fm_deadline()) == 0);
	size_t got = 0;
	for (;;) {
		ssize_t r = recv(fd, out + got, cap - 1 - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
		if (got == cap - 1)
			break;
	}
	out[got] = '\0';
	close(fd);
}

static uint64_t metric(const char *text, const char *name)
{
	const char *p = text;
	size_t n = strlen(name);

	while ((p = strstr(p, name))) {
		if ((p == text || p[-1] == '\n') && p[n] == ' ')
			return strtoull(p + n + 1, NULL, 10);
		p += n;
	}
	return UINT64_MAX;
}

/* The extent at off in the segment file, decoded by the test itself. */
static int peek(const char *path, uint64_t off, struct ext_hdr *h)
{
	struct segment s;
	char err[256];
	const uint8_t *key;

	REQUIRE(segment_attach(&s, path, false, err, sizeof(err)) == 0);
	int r = ext_decode((uint8_t *)s.base + off, s.size - off, 0, h, &key);
	segment_close(&s);
	return r;
}

int main(void)
{
	struct kvp_conf c;
	char err[512], seg[64];
	struct fmaster *m;
	struct fm_node run = { 0 };

	signal(SIGPIPE, SIG_IGN);
	log_init("t_node_proto", getenv("T_DEBUG") ? LOG_DEBUG : LOG_WARNING);
	m = fm_new();
	snprintf(seg, sizeof(seg), "kvpt-nodeproto-%d", (int)getpid());
	const char *const ov[] = {
		"node.heartbeat_interval=50ms", "node.max_connections=8",
		/* frame bodies are small; payloads (extent images) are not */
		"cluster.max_frame=4K", NULL,
	};
	fm_conf(&c, m, seg, ov);
	const char *path = fm_seg_path;
	unlink(path);
	fm_arm_cleanup();

	/* --- first start: fresh segment, nothing to report --- */
	fm_start_node(&run, &c);
	int dport = node_data_port(run.n), hport = node_http_port(run.n);
	CHECK(dport > 0 && hport > 0);
	fm_handshake(m, 7);
	CHECK(strcmp(m->shm_path, path) == 0);
	char want_ep[64];
	snprintf(want_ep, sizeof(want_ep), "127.0.0.1:%d", dport);
	CHECK(strcmp(m->endpoint, want_ep) == 0);
	struct fm_ext rep[8];
	CHECK(fm_reports(m, rep, 8, 0) == 0);
	CHECK(fm_wait_ready(1, 3000));
	/* heartbeats flow (50 ms) */
	for (int i = 0; i < 4; i++) {
		REQUIRE(fm_recv_frame(m->fd, &m->h, m->body, sizeof(m->body), NULL, 0) == 0);
		CHECK(m->h.opcode == WIRE_OP_HEARTBEAT);
		fm_send_frame(m->fd, WIRE_OP_HEARTBEAT, WIRE_F_REPLY, 0, m->h.reqid, NULL, 0, 0);
	}

	/* --- authentication --- */
	int fd = fm_dconnect(dport);
	uint8_t buf[65536];
	CHECK(dread(fd, 0, m->data_off, 64, buf, sizeof(buf)) == KVP_EAUTH);
	close(fd);
	fd = fm_dconnect(dport);
	CHECK(fm_dhello(fd, "wrong") == KVP_EAUTH);
	close(fd);
	fd = fm_dconnect(dport);
	CHECK(fm_dhello(fd, FM_TOKEN) == 0);

	/* --- WRITE with a grant, READ back --- */
	uint64_t len1, al1, off1 = m->data_off;
	uint8_t *img1 = make_image("key-one", 20000, 42, m->seg_uuid, &len1, &al1, 1);
	uint8_t grant[WIRE_GRANT_LEN];
	grant_make(m->secret, 7, 42, off1, al1, FM_EPOCH, grant);
	CHECK(dwrite(fd, 7, 42, off1, al1, grant, img1, len1) == 0);
	memset(buf, 0, sizeof(buf));
	CHECK(dread(fd, 0, off1, len1, buf, sizeof(buf)) == 0);
	CHECK(memcmp(buf, img1, len1) == 0);

	/* --- refused writes: the node answers EGRANT and keeps serving --- */
	uint64_t off2 = off1 + al1;
	uint8_t forged[WIRE_GRANT_LEN];
	memcpy(forged, grant, sizeof(forged));
	forged[3] ^= 1;
	CHECK(dwrite(fd, 7, 42, off2, al1, forged, img1, len1) == KVP_EGRANT);
	grant_make(m->secret, 7, 42, off2, al1, FM_EPOCH, grant);	/* grant for another offset */
	CHECK(dwrite(fd, 7, 42, off2 + ALIGN, al1, grant, img1, len1) == KVP_EGRANT);
	CHECK(dwrite(fd, 8, 42, off2, al1, grant, img1, len1) == KVP_EGRANT);
	uint64_t far = FM_SEG_SIZE - ALIGN;	/* a "granted" range past the end */
	grant_make(m->secret, 7, 42, far, al1, FM_EPOCH, grant);
	CHECK(dwrite(fd, 7, 42, far, al1, grant, img1, len1) == KVP_EGRANT);
	grant_make(m->secret, 7, 42, off2, ALIGN, FM_EPOCH, grant);	/* payload > alloc_len */
	CHECK(dwrite(fd, 7, 42, off2, ALIGN, grant, img1, len1) == KVP_EGRANT);
	grant_make(m->secret, 7, 42, 0, al1, FM_EPOCH, grant);		/* the segment header */
	CHECK(dwrite(fd, 7, 42, 0, al1, grant, img1, len1) == KVP_EGRANT);
	/* fencing (docs/ha.md): a grant of another master's epoch is refused,
	 * whether the MAC covers that epoch or the mounted one */
	grant_make(m->secret, 7, 42, off2, al1, FM_EPOCH - 1, grant);
	write_epoch = FM_EPOCH - 1;
	CHECK(dwrite(fd, 7, 42, off2, al1, grant, img1, len1) == KVP_EGRANT);
	grant_make(m->secret, 7, 42, off2, al1, FM_EPOCH, grant);
	CHECK(dwrite(fd, 7, 42, off2, al1, grant, img1, len1) == KVP_EGRANT);
	write_epoch = FM_EPOCH + 1;
	CHECK(dwrite(fd, 7, 42, off2, al1, grant, img1, len1) == KVP_EGRANT);
	write_epoch = FM_EPOCH;
	CHECK(dread(fd, 0, FM_SEG_SIZE - 10, 64, buf, sizeof(buf)) == KVP_EINVAL);
	CHECK(dread(fd, 0, UINT64_MAX - 10, 64, buf, sizeof(buf)) == KVP_EINVAL);
	CHECK(dread(fd, 0, 0, 64, buf, sizeof(buf)) == KVP_EINVAL);
	CHECK(dread(fd, 1, off1, 64, buf, sizeof(buf)) == KVP_ENOTSUP);
	memset(buf, 0, sizeof(buf));
	CHECK(dread(fd, 0, off1, len1, buf, sizeof(buf)) == 0);
	CHECK(memcmp(buf, img1, len1) == 0);

	/* --- a granted WRITE whose image is wrong is tombstoned --- */
	uint64_t lenb, alb;
	uint8_t *bad = make_image("key-bad", 3000, 41, m->seg_uuid, &lenb, &alb, 2);
	grant_make(m->secret, 7, 43, off2, alb, FM_EPOCH, grant);
	CHECK(dwrite(fd, 7, 43, off2, alb, grant, bad, lenb) == KVP_ESTALE);
	struct ext_hdr eh;
	CHECK(peek(path, off2, &eh) == -ENOENT);
	memset(bad + 70, 0xff, 8);	/* garbage header: a covering tombstone */
	grant_make(m->secret, 7, 41, off2, alb, FM_EPOCH, grant);
	CHECK(dwrite(fd, 7, 41, off2, alb, grant, bad, lenb) == KVP_EINVAL);
	CHECK(peek(path, off2, &eh) == -ENOENT);

	/* --- second and third extents --- */
	uint64_t len2, al2;
	uint8_t *img2 = make_image("key-two", 5000, 50, m->seg_uuid, &len2, &al2, 3);
	grant_make(m->secret, 7, 50, off2, al2, FM_EPOCH, grant);
	CHECK(dwrite(fd, 7, 50, off2, al2, grant, img2, len2) == 0);
	uint64_t off3 = off2 + al2, len3, al3;
	uint8_t *img3 = make_image("key-three", 1000, 60, m->seg_uuid, &len3, &al3, 4);
	grant_make(m->secret, 7, 60, off3, al3, FM_EPOCH, grant);
	CHECK(dwrite(fd, 7, 60, off3, al3, grant, img3, len3) == 0);

	/* --- FREE: wrong generation leaves it, right one tombstones --- */
	struct wbuf fb;
	wb_init(&fb);
	wb_u32(&fb, 7);
	wb_u32(&fb, 2);
	wb_u8(&fb, 0); wb_u64(&fb, off3); wb_u64(&fb, 999);
	wb_u8(&fb, 0); wb_u64(&fb, off1); wb_u64(&fb, 42);
	fm_send_frame(m->fd, WIRE_OP_FREE, 0, 0, 1001, fb.p, fb.len, 0);
	wb_free(&fb);
	REQUIRE(fm_next(m) == 0);
	CHECK(m->h.opcode == WIRE_OP_FREE && (m->h.flags & WIRE_F_REPLY) && m->h.reqid == 1001 &&
	      m->h.status == 0);
	CHECK(peek(path, off1, &eh) == -ENOENT);
	CHECK(peek(path, off3, &eh) == 0 && eh.generation == 60);
	/* a FREE for another segment id */
	wb_init(&fb);
	wb_u32(&fb, 99);
	wb_u32(&fb, 0);
	fm_send_frame(m->fd, WIRE_OP_FREE, 0, 0, 1002, fb.p, fb.len, 0);
	wb_free(&fb);
	REQUIRE(fm_next(m) == 0);
	CHECK(m->h.opcode == WIRE_OP_FREE && m->h.reqid == 1002 && m->h.status == KVP_ENOSEG);

	/* --- FREE of an extent whose WRITE is still streaming waits for it --- */
	uint64_t off4 = off3 + al3, len4, al4;
	uint8_t *img4 = make_image("key-four", 60000, 70, m->seg_uuid, &len4, &al4, 5);
	grant_make(m->secret, 7, 70, off4, al4, FM_EPOCH, grant);
	write_hdr(fd, 7, 70, off4, al4, grant, len4);
	REQUIRE(net_send_all(fd, img4, len4 / 2, fm_deadline()) == 0);
	usleep(50000);
	wb_init(&fb);
	wb_u32(&fb, 7);
	wb_u32(&fb, 1);
	wb_u8(&fb, 0); wb_u64(&fb, off4); wb_u64(&fb, 70);
	fm_send_frame(m->fd, WIRE_OP_FREE, 0, 0, 1003, fb.p, fb.len, 0);
	wb_free(&fb);
	/* only heartbeats until the write completes */
	uint64_t until = clock_now_ms() + 300;
	bool early = false;
	while (clock_now_ms() < until) {
		if (fm_quiet(m->fd, 50))
			continue;
		REQUIRE(fm_recv_frame(m->fd, &m->h, m->body, sizeof(m->body), NULL, 0) == 0);
		if (m->h.opcode == WIRE_OP_HEARTBEAT)
			fm_send_frame(m->fd, WIRE_OP_HEARTBEAT, WIRE_F_REPLY, 0, m->h.reqid, NULL, 0, 0);
		else
			early = true;
	}
	CHECK(!early);
	REQUIRE(net_send_all(fd, img4 + len4 / 2, len4 - len4 / 2, fm_deadline()) == 0);
	CHECK(dwrite_reply(fd) == KVP_ESTALE);
	REQUIRE(fm_next(m) == 0);
	CHECK(m->h.opcode == WIRE_OP_FREE && m->h.reqid == 1003 && m->h.status == 0);
	CHECK(peek(path, off4, &eh) == -ENOENT);

	/* --- connection limit (8, one in use) --- */
	int many[8];
	for (int i = 0; i < 7; i++) {
		many[i] = fm_dconnect(dport);
		CHECK(fm_dhello(many[i], FM_TOKEN) == 0);
	}
	many[7] = fm_dconnect(dport);
	CHECK(fm_dhello(many[7], FM_TOKEN) == KVP_ELIMIT);
	for (int i = 0; i < 8; i++)
		close(many[i]);

	/* --- metrics and health --- */
	char *text = malloc(1 << 16);
	REQUIRE(text);
	usleep(100000);
	http_get(hport, "/metrics", text, 1 << 16);
	CHECK(strstr(text, "200") != NULL);
	CHECK(metric(text, "kvpool_node_segment_size_bytes") == FM_SEG_SIZE);
	if (getenv("T_DEBUG"))
		fprintf(stderr, "%s\n", text);
	CHECK(metric(text, "kvpool_node_extents") == 2);	/* two and three */
	CHECK(metric(text, "kvpool_node_segment_used_bytes") == al2 + al3);
	CHECK(metric(text, "kvpool_node_master_up") == 1);
	CHECK(metric(text, "kvpool_node_mounts_total") == 1);
	CHECK(metric(text, "kvpool_node_connections_rejected_total") == 1);
	CHECK(metric(text, "kvpool_node_written_bytes_total") == len1 + len2 + len3);
	CHECK(strstr(text, "kvpool_node_errors_total{op=\"write\"} 12\n") != NULL);
	http_get(hport, "/health", text, 1 << 16);
	CHECK(strstr(text, "\"master\":\"up\"") != NULL);
	http_get(hport, "/nope", text, 1 << 16);
	CHECK(strstr(text, "404") != NULL);

	/* --- heartbeat refused: the node mounts again from a scan --- */
	uint8_t old_secret[WIRE_SECRET_LEN];
	memcpy(old_secret, m->secret, sizeof(old_secret));
	/* (the heartbeats carry the node's used bytes; older ones are queued) */
	uint64_t used_hb = 0;
	for (int i = 0; i < 100; i++) {
		REQUIRE(fm_recv_frame(m->fd, &m->h, m->body, sizeof(m->body), NULL, 0) == 0);
		if (m->h.opcode != WIRE_OP_HEARTBEAT)
			continue;
		memcpy(&used_hb, m->body + 4, 8);
		if (used_hb == al2 + al3)
			break;
		fm_send_frame(m->fd, WIRE_OP_HEARTBEAT, WIRE_F_REPLY, 0, m->h.reqid, NULL, 0, 0);
	}
	CHECK(used_hb == al2 + al3);
	fm_send_frame(m->fd, WIRE_OP_HEARTBEAT, WIRE_F_REPLY, KVP_ENOSEG, m->h.reqid, NULL, 0, 0);
	/* the node closes; drain until EOF */
	while (fm_recv_frame(m->fd, &m->h, m->body, sizeof(m->body), NULL, 0) == 0)
		;
	close(m->fd);
	fm_handshake(m, 8);
	int nrep = fm_reports(m, rep, 8, 0);
	CHECK(nrep == 2);
	bool seen2 = false, seen3 = false;
	for (int i = 0; i < nrep && i < 8; i++) {
		if (strcmp(rep[i].key, "key-two") == 0) {
			seen2 = rep[i].off == off2 && rep[i].alloc_len == al2 &&
				rep[i].value_len == 5000 && rep[i].generation == 50 &&
				rep[i].checksum == ext_checksum(img2 + EXT_HDR_SIZE + 7, 5000);
		}
		if (strcmp(rep[i].key, "key-three") == 0)
			seen3 = rep[i].off == off3 && rep[i].generation == 60;
	}
	CHECK(seen2 && seen3);
	/* grants of the old mount (segment 7, old secret) no longer work */
	grant_make(old_secret, 7, 50, off2, al2, FM_EPOCH, grant);
	CHECK(dwrite(fd, 7, 50, off2, al2, grant, img2, len2) == KVP_EGRANT);
	grant_make(old_secret, 8, 50, off2, al2, FM_EPOCH, grant);
	CHECK(dwrite(fd, 8, 50, off2, al2, grant, img2, len2) == KVP_EGRANT);

	/* --- master connection breaks: reconnect with backoff, mount again --- */
	close(m->fd);
	uint64_t t0 = clock_now_ms();
	fm_handshake(m, 9);
	CHECK(clock_now_ms() - t0 < 4000);
	CHECK(fm_reports(m, rep, 8, 0) == 2);
	http_get(hport, "/metrics", text, 1 << 16);
	CHECK(metric(text, "kvpool_node_mounts_total") == 3);
	CHECK(metric(text, "kvpool_node_remounts_total") == 2);
	CHECK(atomic_load(&fm_ready) == 1);	/* READY once */

	/* --- stop while a WRITE is in flight: it completes, then UNMOUNT --- */
	uint64_t off5 = off4, len5, al5;
	uint8_t *img5 = make_image("key-five", 30000, 80, m->seg_uuid, &len5, &al5, 6);
	grant_make(m->secret, 9, 80, off5, al5, FM_EPOCH, grant);
	write_hdr(fd, 9, 80, off5, al5, grant, len5);
	REQUIRE(net_send_all(fd, img5, 1000, fm_deadline()) == 0);
	usleep(50000);
	node_stop(run.n);
	usleep(100000);
	CHECK(!atomic_load(&run.done));
	REQUIRE(net_send_all(fd, img5 + 1000, len5 - 1000, fm_deadline()) == 0);
	CHECK(dwrite_reply(fd) == 0);
	REQUIRE(fm_next(m) == 0);
	CHECK(m->h.opcode == WIRE_OP_UNMOUNT);
	struct rbuf r;
	rb_init(&r, m->body, m->h.body_len);
	CHECK(rb_u32(&r) == 9);
	CHECK(rb_u8(&r) == 1);
	CHECK(rb_done(&r));
	fm_send_frame(m->fd, WIRE_OP_UNMOUNT, WIRE_F_REPLY, 0, m->h.reqid, NULL, 0, 0);
	pthread_join(run.th, NULL);
	CHECK(run.rc == 0);
	node_destroy(run.n);
	close(fd);
	close(m->fd);
	CHECK(access(path, F_OK) == 0);	/* the cache stays */

	/* --- restart: the surviving extents are reported --- */
	fm_start_node(&run, &c);
	fm_handshake(m, 11);
	nrep = fm_reports(m, rep, 8, 0);
	CHECK(nrep == 3);
	bool seen5 = false;
	for (int i = 0; i < nrep && i < 8; i++)
		if (strcmp(rep[i].key, "key-five") == 0)
			seen5 = rep[i].off == off5 && rep[i].generation == 80;
	CHECK(seen5);
	CHECK(fm_wait_ready(2, 3000));
	fd = fm_dconnect(node_data_port(run.n));
	CHECK(fm_dhello(fd, FM_TOKEN) == 0);
	memset(buf, 0, sizeof(buf));
	CHECK(dread(fd, 0, off2, len2, buf, sizeof(buf)) == 0);
	CHECK(memcmp(buf, img2, len2) == 0);
	close(fd);

	/* --- stop while two WRITEs stall: after the drain bound (10 s) the
	 * node closes them, tombstones the partial images, unmounts --- */
	int st1 = fm_dconnect(node_data_port(run.n)), st2 = fm_dconnect(node_data_port(run.n));
	CHECK(fm_dhello(st1, FM_TOKEN) == 0);
	CHECK(fm_dhello(st2, FM_TOKEN) == 0);
	uint64_t off6 = off5 + al5, off7 = off6 + al5;
	grant_make(m->secret, 11, 90, off6, al5, FM_EPOCH, grant);
	write_hdr(st1, 11, 90, off6, al5, grant, len5);
	REQUIRE(net_send_all(st1, img5, 1000, fm_deadline()) == 0);
	grant_make(m->secret, 11, 91, off7, al5, FM_EPOCH, grant);
	write_hdr(st2, 11, 91, off7, al5, grant, len5);
	REQUIRE(net_send_all(st2, img5, 1000, fm_deadline()) == 0);
	usleep(50000);
	node_stop(run.n);
	REQUIRE(fm_next_within(m, 15000) == 0);	/* heartbeats meanwhile */
	CHECK(m->h.opcode == WIRE_OP_UNMOUNT);
	fm_send_frame(m->fd, WIRE_OP_UNMOUNT, WIRE_F_REPLY, 0, m->h.reqid, NULL, 0, 0);
	pthread_join(run.th, NULL);
	CHECK(run.rc == 0);
	CHECK(fm_recv_frame_within(st1, &m->h, m->body, 64, NULL, 0, 1000) < 0);	/* closed */
	CHECK(peek(path, off6, &eh) == -ENOENT);
	CHECK(peek(path, off7, &eh) == -ENOENT);
	close(st1);
	close(st2);
	node_destroy(run.n);
	close(m->fd);

	/* --- stop with the master gone: exits without waiting for UNMOUNT --- */
	fm_start_node(&run, &c);
	fm_handshake(m, 12);
	CHECK(fm_reports(m, rep, 8, 0) == 3);
	close(m->fd);
	usleep(50000);
	node_stop(run.n);
	pthread_join(run.th, NULL);
	CHECK(run.rc == 0);
	node_destroy(run.n);

	/* --- remove_segment_on_exit --- */
	REQUIRE(conf_set(&c, "node", "remove_segment_on_exit", "true", CONF_SRC_CMDLINE, err,
			 sizeof(err)) == 0);
	fm_start_node(&run, &c);
	node_stop(run.n);
	pthread_join(run.th, NULL);
	node_destroy(run.n);
	CHECK(access(path, F_OK) != 0);

	unlink(path);
	close(m->lfd);
	free(img1); free(img2); free(img3); free(img4); free(img5); free(bad);
	free(text);
	free(m);
	return tl_done();
}

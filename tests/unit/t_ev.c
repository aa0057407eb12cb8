/* t_ev: the event loop and framed connections (src/common/ev.c). An in-process
 * server runs on an ev loop in a thread, on 127.0.0.1:0; clients in the main
 * thread use blocking sockets with deadlines. Opcodes mean what this test
 * server makes them mean:
 *   GET      echo the body now          SIZE     echo after u32 delay_ms
 *   WRITE    payload into a buffer (body u8 1 = discard); reply fnv64, len
 *   READ     reply with a referenced payload of u64 len bytes
 *   INFO     reply with a 64 KiB body (backpressure)
 *   HEARTBEAT reply, pause reading for 30 ms (frames behind it wait)
 *   UNMOUNT  reply, then close after send      REMOVE  handler returns -1
 *   REMOVE_PREFIX  ev_conn_close() inside the handler
 * Its on_input hook counts the frames it is shown ahead of dispatch.
 */
#include <errno.h>
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
#include "ev.h"
#include "kvpool.h"
#include "log.h"
#include "net.h"
#include "wire.h"
#include "testlib.h"


#define BIG (64u << 20)
#define INFO_REPLY (64u * 1024)
#define BP_OUTBUF (1u << 20)
#define IDLE_MS 1000	/* generous: a loaded CI machine can stall a few hundred ms */

enum { L_NORMAL, L_IDLE, L_BP, NL };

struct srv {
	struct ev_loop *loop;
	int lfd[NL];
	int port[NL];
	struct ev_conn_limits lim[NL];
	pthread_t th;
	uint8_t *pattern;		/* READ source */
	uint8_t *dst;			/* WRITE destination */
	uint8_t *info;			/* INFO reply body */
	atomic_int releases;
	atomic_int open_conns;
	atomic_int closes;
	atomic_size_t max_queued;	/* on the backpressure listener */
	atomic_int resumes;
	atomic_long looked;		/* whole frames on_input saw */
	atomic_int bad_input;		/* on_input not called at a frame's start */
};

struct sconn {
	struct srv *s;
	struct ev_conn *c;
	int which;
	int refs;
	bool closed;
	struct wire_hdr ph;		/* frame whose payload is arriving */
};

struct delayed {
	struct sconn *sc;
	struct wire_hdr h;
	size_t n;
	uint8_t body[];
};

static uint64_t fnv64(const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

static uint8_t pat(size_t i)
{
	return (uint8_t)(i * 131 + (i >> 16));
}

static void sconn_put(struct sconn *sc)
{
	if (--sc->refs == 0)
		free(sc);
}

static void on_delayed(struct ev_loop *loop, void *arg)
{
	struct delayed *d = arg;

	(void)loop;
	if (!d->sc->closed)
		ev_conn_reply(d->sc->c, &d->h, 0, d->body, d->n);
	sconn_put(d->sc);
	free(d);
}

static void on_release(void *arg)
{
	struct srv *s = arg;

	atomic_fetch_add(&s->releases, 1);
}

static void on_resume(struct ev_loop *loop, void *arg)
{
	struct sconn *sc = arg;

	(void)loop;
	if (!sc->closed) {
		atomic_fetch_add(&sc->s->resumes, 1);
		ev_conn_pause(sc->c, false);
	}
	sconn_put(sc);
}

static int on_frame(struct ev_conn *c, const struct wire_hdr *h, const uint8_t *body)
{
	struct sconn *sc = ev_conn_udata(c);
	struct srv *s = sc->s;
	struct rbuf r;

	rb_init(&r, body, h->body_len);
	switch (h->opcode) {
	case WIRE_OP_GET:
		return ev_conn_reply(c, h, 0, body, h->body_len);
	case WIRE_OP_SIZE: {
		uint32_t ms = rb_u32(&r);
		struct delayed *d = malloc(sizeof(*d) + h->body_len);
		if (!d)
			return -1;
		d->sc = sc;
		d->h = *h;
		d->n = h->body_len;
		memcpy(d->body, body, h->body_len);
		sc->refs++;
		if (!ev_timer_add(ev_conn_loop(c), ms, false, on_delayed, d)) {
			sc->refs--;
			free(d);
			return -1;
		}
		return 0;
	}
	case WIRE_OP_WRITE:
		sc->ph = *h;
		if (rb_u8(&r) == 1) {
			/* discarded: reply now, the framing must go on */
			uint64_t rep[2] = { 0, h->payload_len };
			ev_conn_discard_payload(c);
			return ev_conn_reply(c, h, 0, rep, sizeof(rep));
		}
		/* also for 0 bytes: on_payload follows and replies */
		ev_conn_recv_payload(c, s->dst, h->payload_len, sc);
		return 0;
	case WIRE_OP_READ: {
		uint64_t len = rb_u64(&r);
		if (!rb_ok(&r) || len > BIG)
			return ev_conn_reply(c, h, KVP_EINVAL, NULL, 0);
		struct wire_hdr rh = *h;
		uint8_t hb[WIRE_HDR_SIZE];
		rh.flags = WIRE_F_REPLY;
		rh.body_len = 0;
		rh.payload_len = len;
		wire_hdr_encode(&rh, hb);
		return ev_conn_send_ref(c, hb, sizeof(hb), s->pattern, len, on_release, s);
	}
	case WIRE_OP_INFO: {
		int rc = ev_conn_reply(c, h, 0, s->info, INFO_REPLY);
		size_t q = ev_conn_queued(c);
		size_t m = atomic_load(&s->max_queued);
		while (q > m && !atomic_compare_exchange_weak(&s->max_queued, &m, q))
			;
		return rc;
	}
	case WIRE_OP_HEARTBEAT:
		ev_conn_pause(c, true);
		sc->refs++;
		ev_timer_add(ev_conn_loop(c), 30, false, on_resume, sc);
		return ev_conn_reply(c, h, 0, NULL, 0);
	case WIRE_OP_UNMOUNT: {
		int rc = ev_conn_reply(c, h, 0, "bye", 3);
		ev_conn_close_after_send(c);
		/* sending after close_after_send is refused */
		if (ev_conn_reply(c, h, 0, "late", 4) != -EPIPE)
			return -100;
		return rc;
	}
	case WIRE_OP_REMOVE:
		return -1;
	case WIRE_OP_REMOVE_PREFIX:
		ev_conn_close(c);
		ev_conn_close(c);	/* twice is harmless */
		return 0;
	default:
		return ev_conn_reply(c, h, KVP_ENOTSUP, NULL, 0);
	}
}

static void on_payload(struct ev_conn *c, bool ok, void *arg)
{
	struct sconn *sc = arg;
	uint64_t rep[2] = { fnv64(sc->s->dst, sc->ph.payload_len), sc->ph.payload_len };

	if (ok)
		ev_conn_reply(c, &sc->ph, 0, rep, sizeof(rep));
}

static void on_close(struct ev_conn *c)
{
	struct sconn *sc = ev_conn_udata(c);

	sc->closed = true;
	atomic_fetch_add(&sc->s->closes, 1);
	atomic_fetch_sub(&sc->s->open_conns, 1);
	sconn_put(sc);
}

/* The look ahead: called at a frame's start; counts the whole frames (up
 * to the first with a payload) that test_pipeline then expects. */
static void on_input(struct ev_conn *c, const uint8_t *p, size_t n)
{
	struct sconn *sc = ev_conn_udata(c);
	struct wire_hdr h;

	if (n >= WIRE_HDR_SIZE && wire_hdr_decode(p, &h, UINT32_MAX, UINT64_MAX) != 0)
		atomic_fetch_add(&sc->s->bad_input, 1);
	while (n >= WIRE_HDR_SIZE && wire_hdr_decode(p, &h, UINT32_MAX, 0) == 0 &&
	       n - WIRE_HDR_SIZE >= h.body_len) {
		atomic_fetch_add(&sc->s->looked, 1);
		p += WIRE_HDR_SIZE + h.body_len;
		n -= WIRE_HDR_SIZE + h.body_len;
	}
}

static const struct ev_conn_ops ops = {
	.on_frame = on_frame,
	.on_payload = on_payload,
	.on_close = on_close,
	.on_input = on_input,
};

static void on_accept(struct ev_loop *loop, int fd, uint32_t events, void *arg)
{
	struct srv *s = arg;
	int which = 0;

	(void)events;
	while (which < NL && s->lfd[which] != fd)
		which++;
	for (;;) {
		int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
		if (cfd < 0)
			return;
		struct sconn *sc = calloc(1, sizeof(*sc));
		sc->s = s;
		sc->which = which;
		sc->refs = 1;
		sc->c = ev_conn_create(loop, cfd, &ops, &s->lim[which], sc);
		if (!sc->c) {
			free(sc);
			continue;
		}
		atomic_fetch_add(&s->open_conns, 1);
	}
}

static void *loop_thread(void *arg)
{
	struct srv *s = arg;

	CHECK(ev_run(s->loop) == 0);
	return NULL;
}

static int srv_start(struct srv *s, int busy_poll_us)
{
	char err[256];

	memset(s, 0, sizeof(*s));
	s->loop = ev_create();
	if (!s->loop)
		return -1;
	ev_set_busy_poll(s->loop, busy_poll_us);
	s->pattern = malloc(BIG);
	s->dst = malloc(BIG);
	s->info = malloc(INFO_REPLY);
	for (size_t i = 0; i < BIG; i++)
		s->pattern[i] = pat(i);
	memset(s->info, 0x5a, INFO_REPLY);
	s->lim[L_NORMAL] = (struct ev_conn_limits){ .max_body = 1u << 20,
						    .max_payload = 128u << 20 };
	s->lim[L_IDLE] = (struct ev_conn_limits){ .idle_ms = IDLE_MS };
	s->lim[L_BP] = (struct ev_conn_limits){ .max_outbuf = BP_OUTBUF };
	for (int i = 0; i < NL; i++) {
		s->lfd[i] = net_listen("127.0.0.1:0", err, sizeof(err));
		if (s->lfd[i] < 0) {
			fprintf(stderr, "listen: %s\n", err);
			return -1;
		}
		s->port[i] = net_local_port(s->lfd[i]);
		if (ev_add_fd(s->loop, s->lfd[i], EPOLLIN, on_accept, s) < 0)
			return -1;
	}
	/* the same fd twice is refused */
	CHECK(ev_add_fd(s->loop, s->lfd[0], EPOLLIN, on_accept, s) == -EEXIST);
	return pthread_create(&s->th, NULL, loop_thread, s) == 0 ? 0 : -1;
}

static void srv_stop(struct srv *s)
{
	ev_stop(s->loop);
	pthread_join(s->th, NULL);
	for (int i = 0; i < NL; i++) {
		CHECK(ev_del_fd(s->loop, s->lfd[i]) == 0);
		close(s->lfd[i]);
	}
	CHECK(ev_del_fd(s->loop, s->lfd[0]) == -ENOENT);
	ev_destroy(s->loop);
	free(s->pattern);
	free(s->dst);
	free(s->info);
}

/* ---- client side ---------------------------------------------------- */

static int cli(const struct srv *s, int which)
{
	char addr[64], err[256];

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", s->port[which]);
	int fd = net_connect(addr, 5000, err, sizeof(err));
	if (fd < 0)
		fprintf(stderr, "connect: %s\n", err);
	return fd;
}

static uint64_t dl(void)
{
	return clock_now_ms() + 20000;
}

static void frame(struct wbuf *w, uint16_t op, uint64_t reqid, const void *body, size_t n,
		  uint64_t payload_len)
{
	size_t f = wire_begin(w);
	wb_bytes(w, body, n);
	wire_finish(w, f, op, 0, 0, reqid, payload_len);
}

static int send_frame(int fd, uint16_t op, uint64_t reqid, const void *body, size_t n,
		      uint64_t payload_len)
{
	struct wbuf w;

	wb_init(&w);
	frame(&w, op, reqid, body, n, payload_len);
	int rc = w.oom ? -ENOMEM : net_send_all(fd, w.p, w.len, dl());
	wb_free(&w);
	return rc;
}

/* Reads one reply frame; the body (if any) into body[cap]. */
static int recv_frame(int fd, struct wire_hdr *h, void *body, size_t cap)
{
	uint8_t hb[WIRE_HDR_SIZE];
	int rc = net_recv_all(fd, hb, sizeof(hb), dl());

	if (rc < 0)
		return rc;
	rc = wire_hdr_decode(hb, h, (uint32_t)cap, UINT64_MAX);
	if (rc)
		return rc;
	if (!(h->flags & WIRE_F_REPLY))
		return -EPROTO;
	return net_recv_all(fd, body, h->body_len, dl());
}

/* true when the server closed the connection (EOF), within the deadline */
static bool closed_by_peer(int fd, uint64_t deadline)
{
	char c;
	int rc = net_recv_all(fd, &c, 1, deadline);

	return rc == -ECONNRESET;
}

static bool wait_int(atomic_int *v, int want, uint64_t ms)
{
	uint64_t end = clock_now_ms() + ms;

	while (atomic_load(v) != want && clock_now_ms() < end)
		usleep(2000);
	return atomic_load(v) == want;
}

/* ---- tests ---------------------------------------------------------- */

static void test_pipeline(struct srv *s)
{
	const int n = 2000;
	int fd = cli(s, L_NORMAL);
	struct wbuf w;
	uint8_t body[64];
	char *seen = calloc((size_t)n + 1, 1);
	bool out_of_order = false;
	uint64_t maxid = 0;
	long looked0 = atomic_load(&s->looked);
	int bad0 = atomic_load(&s->bad_input);

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	wb_init(&w);
	for (int i = 1; i <= n; i++) {
		size_t len = 8 + (size_t)(i % 50);
		uint32_t ms = (uint32_t)(i % 3) * 5 + 1;
		memcpy(body, &ms, 4);
		memcpy(body + 4, &i, 4);
		for (size_t k = 8; k < len; k++)
			body[k] = (uint8_t)(i + k);
		frame(&w, i % 5 == 0 ? WIRE_OP_SIZE : WIRE_OP_GET, (uint64_t)i, body, len, 0);
	}
	CHECK(net_send_all(fd, w.p, w.len, dl()) == 0);
	for (int k = 0; k < n; k++) {
		struct wire_hdr h;
		uint8_t got[64];
		if (recv_frame(fd, &h, got, sizeof(got)) != 0) {
			CHECK(!"reply missing");
			break;
		}
		int i = (int)h.reqid;
		CHECK(i >= 1 && i <= n && !seen[i]);
		if (i < 1 || i > n)
			break;
		seen[i] = 1;
		CHECK(h.status == 0);
		CHECK(h.opcode == (i % 5 == 0 ? WIRE_OP_SIZE : WIRE_OP_GET));
		CHECK(h.body_len == 8 + (uint32_t)(i % 50));
		int echoed;
		memcpy(&echoed, got + 4, 4);
		CHECK(echoed == i);
		for (size_t b = 8; b < h.body_len; b++)
			CHECK(got[b] == (uint8_t)(i + b));
		if (h.reqid < maxid)
			out_of_order = true;
		if (h.reqid > maxid)
			maxid = h.reqid;
	}
	CHECK(out_of_order);	/* delayed replies overtaken by later ones */
	/* every frame was looked at, always from a frame's start */
	CHECK(atomic_load(&s->looked) - looked0 >= n);
	CHECK(atomic_load(&s->bad_input) == bad0);

	/* an opcode the handler does not know: an error reply, conn stays */
	CHECK(send_frame(fd, WIRE_OP_LIST, 9999, NULL, 0, 0) == 0);
	struct wire_hdr h;
	CHECK(recv_frame(fd, &h, body, sizeof(body)) == 0 && h.status == KVP_ENOTSUP);
	CHECK(h.reqid == 9999);
	wb_free(&w);
	free(seen);
	close(fd);
}

static void test_payloads(struct srv *s)
{
	int fd = cli(s, L_NORMAL);
	struct wire_hdr h;
	uint64_t rep[2];
	uint8_t mode;

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	/* 64 MiB straight into the destination buffer */
	uint8_t *src = malloc(BIG);
	for (size_t i = 0; i < BIG; i++)
		src[i] = (uint8_t)(pat(i) ^ 0x3c);
	mode = 0;
	memset(s->dst, 0, BIG);
	CHECK(send_frame(fd, WIRE_OP_WRITE, 1, &mode, 1, BIG) == 0);
	CHECK(net_send_all(fd, src, BIG, dl()) == 0);
	CHECK(recv_frame(fd, &h, rep, sizeof(rep)) == 0);
	CHECK(h.reqid == 1 && h.status == 0 && h.body_len == sizeof(rep));
	CHECK(rep[1] == BIG);
	CHECK(rep[0] == fnv64(src, BIG));
	CHECK(memcmp(s->dst, src, BIG) == 0);	/* the reply means the loop is done with dst */

	/* a discarded 8 MiB payload, then framing goes on */
	mode = 1;
	CHECK(send_frame(fd, WIRE_OP_WRITE, 2, &mode, 1, 8u << 20) == 0);
	CHECK(net_send_all(fd, src, 8u << 20, dl()) == 0);
	CHECK(send_frame(fd, WIRE_OP_GET, 3, "x", 1, 0) == 0);
	CHECK(recv_frame(fd, &h, rep, sizeof(rep)) == 0 && h.reqid == 2);
	CHECK(rep[1] == (8u << 20));
	char x;
	CHECK(recv_frame(fd, &h, &x, 1) == 0 && h.reqid == 3 && x == 'x');

	/* many small payloads pipelined in one send: headers, bodies and
	 * payloads all arrive together in the read buffer */
	struct wbuf w;
	wb_init(&w);
	mode = 0;
	for (int i = 0; i < 200; i++) {
		size_t len = (size_t)(i * 37) % 3000;
		frame(&w, WIRE_OP_WRITE, 100 + (uint64_t)i, &mode, 1, len);
		wb_bytes(&w, src + i, len);
	}
	CHECK(net_send_all(fd, w.p, w.len, dl()) == 0);
	for (int i = 0; i < 200; i++) {
		size_t len = (size_t)(i * 37) % 3000;
		CHECK(recv_frame(fd, &h, rep, sizeof(rep)) == 0);
		CHECK(h.reqid == 100 + (uint64_t)i);
		CHECK(rep[1] == len);
		if (len)
			CHECK(rep[0] == fnv64(src + i, len));
	}
	wb_free(&w);

	/* payload over the limit: ETOOBIG, then the connection closes */
	CHECK(send_frame(fd, WIRE_OP_WRITE, 4, &mode, 1, 1ull << 30) == 0);
	CHECK(recv_frame(fd, &h, rep, sizeof(rep)) == 0);
	CHECK(h.status == KVP_ETOOBIG && h.reqid == 4 && h.opcode == WIRE_OP_WRITE);
	CHECK(closed_by_peer(fd, dl()));
	close(fd);

	/* the peer vanishes mid-payload: the connection closes cleanly */
	int before = atomic_load(&s->closes);
	fd = cli(s, L_NORMAL);
	CHECK(send_frame(fd, WIRE_OP_WRITE, 5, &mode, 1, 1u << 20) == 0);
	CHECK(net_send_all(fd, src, 1000, dl()) == 0);
	close(fd);
	CHECK(wait_int(&s->closes, before + 1, 20000));
	free(src);
}

static void test_ref_send(struct srv *s)
{
	int fd = cli(s, L_NORMAL);
	struct wire_hdr h;
	uint64_t len = 32u << 20;

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	int r0 = atomic_load(&s->releases);
	CHECK(send_frame(fd, WIRE_OP_READ, 7, &len, sizeof(len), 0) == 0);
	uint8_t hb[WIRE_HDR_SIZE];
	CHECK(net_recv_all(fd, hb, sizeof(hb), dl()) == 0);
	CHECK(wire_hdr_decode(hb, &h, 0, UINT64_MAX) == 0);
	CHECK(h.reqid == 7 && h.payload_len == len);
	uint8_t *buf = malloc(len);
	CHECK(net_recv_all(fd, buf, len, dl()) == 0);
	size_t bad = 0;
	for (size_t i = 0; i < len; i++)
		bad += buf[i] != pat(i);
	CHECK(bad == 0);
	free(buf);
	CHECK(wait_int(&s->releases, r0 + 1, 20000));

	/* a zero-length referenced payload is released too */
	len = 0;
	CHECK(send_frame(fd, WIRE_OP_READ, 8, &len, sizeof(len), 0) == 0);
	CHECK(net_recv_all(fd, hb, sizeof(hb), dl()) == 0);
	CHECK(wire_hdr_decode(hb, &h, 0, UINT64_MAX) == 0 && h.reqid == 8 && h.payload_len == 0);
	CHECK(wait_int(&s->releases, r0 + 2, 20000));

	/* Many referenced replies pipelined between copied ones, more than
	 * one sendmsg takes, read only once they have filled the socket
	 * buffers: sends stop anywhere, inside a reply's inline header too,
	 * and every byte still arrives in order. */
	struct wbuf w;
	const int nref = 600;
	int nreads = 0;
	wb_init(&w);
	for (int i = 0; i < nref; i++) {
		uint64_t l = (uint64_t)(i * 7919) % 20000;
		if (i % 3 == 0)
			frame(&w, WIRE_OP_GET, 1000 + (uint64_t)i, "e", 1, 0);
		else
			frame(&w, WIRE_OP_READ, 1000 + (uint64_t)i, &l, sizeof(l), 0);
		nreads += i % 3 != 0;
	}
	CHECK(net_send_all(fd, w.p, w.len, dl()) == 0);
	wb_free(&w);
	usleep(50000);
	buf = malloc(20000);
	size_t wrong = 0;
	for (int i = 0; i < nref && buf; i++) {
		uint64_t l = (uint64_t)(i * 7919) % 20000;
		if (net_recv_all(fd, hb, sizeof(hb), dl()) != 0 ||
		    wire_hdr_decode(hb, &h, 1u << 20, UINT64_MAX) != 0) {
			CHECK(!"reply missing");
			break;
		}
		CHECK(h.reqid == 1000 + (uint64_t)i);
		if (i % 3 == 0) {
			char e = 0;
			CHECK(h.body_len == 1 && h.payload_len == 0);
			CHECK(net_recv_all(fd, &e, 1, dl()) == 0 && e == 'e');
			continue;
		}
		CHECK(h.body_len == 0 && h.payload_len == l);
		CHECK(net_recv_all(fd, buf, l, dl()) == 0);
		for (size_t b = 0; b < l; b++)
			wrong += buf[b] != pat(b);
	}
	CHECK(wrong == 0);
	free(buf);
	CHECK(wait_int(&s->releases, r0 + 2 + nreads, 20000));
	close(fd);
	r0 += nreads;

	/* the peer disconnects mid-send: released exactly once */
	fd = cli(s, L_NORMAL);
	len = BIG;
	CHECK(send_frame(fd, WIRE_OP_READ, 9, &len, sizeof(len), 0) == 0);
	buf = malloc(1u << 20);
	CHECK(net_recv_all(fd, buf, 1u << 20, dl()) == 0);
	free(buf);
	close(fd);
	CHECK(wait_int(&s->releases, r0 + 3, 20000));
	usleep(100000);
	CHECK(atomic_load(&s->releases) == r0 + 3);
}

static void test_bad_headers(struct srv *s)
{
	int good = cli(s, L_NORMAL);
	int bad = cli(s, L_NORMAL);
	int big = cli(s, L_NORMAL);
	struct wire_hdr h;
	char body[16];

	CHECK(good >= 0 && bad >= 0 && big >= 0);
	if (good < 0 || bad < 0 || big < 0)
		return;
	/* garbage: EPROTO reply (nothing decodable to echo), then EOF */
	const char junk[] = "GET / HTTP/1.1\r\nHost: kvpool\r\nAccept: */*\r\n\r\n....................";
	CHECK(net_send_all(bad, junk, sizeof(junk), dl()) == 0);
	CHECK(recv_frame(bad, &h, body, sizeof(body)) == 0);
	CHECK(h.status == KVP_EPROTO && h.reqid == 0 && h.body_len == 0 && h.payload_len == 0);
	CHECK(h.opcode == WIRE_OP_HELLO);
	CHECK(closed_by_peer(bad, dl()));

	/* body over max_body: ETOOBIG echoing opcode and reqid, then EOF */
	struct wire_hdr req = {
		.magic = WIRE_MAGIC, .version = WIRE_VERSION, .opcode = WIRE_OP_GET,
		.body_len = (1u << 20) + 1, .reqid = 77,
	};
	uint8_t hb[WIRE_HDR_SIZE];
	wire_hdr_encode(&req, hb);
	CHECK(net_send_all(big, hb, sizeof(hb), dl()) == 0);
	CHECK(recv_frame(big, &h, body, sizeof(body)) == 0);
	CHECK(h.status == KVP_ETOOBIG && h.reqid == 77 && h.opcode == WIRE_OP_GET);
	CHECK(closed_by_peer(big, dl()));

	/* valid frames before a bad one are answered first */
	int mixed = cli(s, L_NORMAL);
	struct wbuf w;
	wb_init(&w);
	frame(&w, WIRE_OP_GET, 1, "a", 1, 0);
	frame(&w, WIRE_OP_GET, 2, "b", 1, 0);
	wb_bytes(&w, junk, 40);
	frame(&w, WIRE_OP_GET, 3, "c", 1, 0);
	CHECK(net_send_all(mixed, w.p, w.len, dl()) == 0);
	wb_free(&w);
	CHECK(recv_frame(mixed, &h, body, sizeof(body)) == 0 && h.reqid == 1 && body[0] == 'a');
	CHECK(recv_frame(mixed, &h, body, sizeof(body)) == 0 && h.reqid == 2 && body[0] == 'b');
	CHECK(recv_frame(mixed, &h, body, sizeof(body)) == 0 && h.status == KVP_EPROTO);
	CHECK(closed_by_peer(mixed, dl()));

	/* the other connection is unaffected */
	CHECK(send_frame(good, WIRE_OP_GET, 5, "ok", 2, 0) == 0);
	CHECK(recv_frame(good, &h, body, sizeof(body)) == 0);
	CHECK(h.reqid == 5 && h.body_len == 2 && memcmp(body, "ok", 2) == 0);
	close(good);
	close(bad);
	close(big);
	close(mixed);
}

static void test_closing(struct srv *s)
{
	struct wire_hdr h;
	char body[16];
	int fd;

	/* close after send: the reply arrives, then EOF; frames behind it are
	 * not handled */
	fd = cli(s, L_NORMAL);
	struct wbuf w;
	wb_init(&w);
	frame(&w, WIRE_OP_UNMOUNT, 1, NULL, 0, 0);
	frame(&w, WIRE_OP_GET, 2, "z", 1, 0);
	CHECK(net_send_all(fd, w.p, w.len, dl()) == 0);
	wb_free(&w);
	CHECK(recv_frame(fd, &h, body, sizeof(body)) == 0);
	CHECK(h.reqid == 1 && h.body_len == 3 && memcmp(body, "bye", 3) == 0);
	CHECK(closed_by_peer(fd, dl()));
	close(fd);

	/* handler returns < 0: closed, no reply */
	fd = cli(s, L_NORMAL);
	CHECK(send_frame(fd, WIRE_OP_REMOVE, 1, NULL, 0, 0) == 0);
	CHECK(closed_by_peer(fd, dl()));
	close(fd);

	/* ev_conn_close inside on_frame with frames pipelined behind it */
	fd = cli(s, L_NORMAL);
	wb_init(&w);
	frame(&w, WIRE_OP_GET, 1, "a", 1, 0);
	frame(&w, WIRE_OP_REMOVE_PREFIX, 2, NULL, 0, 0);
	for (int i = 0; i < 50; i++)
		frame(&w, WIRE_OP_GET, 3, "b", 1, 0);
	CHECK(net_send_all(fd, w.p, w.len, dl()) == 0);
	wb_free(&w);
	/* the first reply may or may not be flushed before the close */
	int rc = recv_frame(fd, &h, body, sizeof(body));
	if (rc == 0) {
		CHECK(h.reqid == 1);
		CHECK(closed_by_peer(fd, dl()));
	} else {
		CHECK(rc == -ECONNRESET);
	}
	close(fd);

	/* pause inside a handler: frames already buffered behind it are
	 * handled after the resume (they get no new epoll event) */
	fd = cli(s, L_NORMAL);
	int res0 = atomic_load(&s->resumes);
	wb_init(&w);
	frame(&w, WIRE_OP_HEARTBEAT, 1, NULL, 0, 0);
	for (int i = 0; i < 10; i++)
		frame(&w, WIRE_OP_GET, 10 + (uint64_t)i, "p", 1, 0);
	CHECK(net_send_all(fd, w.p, w.len, dl()) == 0);
	wb_free(&w);
	CHECK(recv_frame(fd, &h, body, sizeof(body)) == 0 && h.reqid == 1);
	for (int i = 0; i < 10; i++) {
		CHECK(recv_frame(fd, &h, body, sizeof(body)) == 0);
		CHECK(h.reqid == 10 + (uint64_t)i);
	}
	CHECK(atomic_load(&s->resumes) == res0 + 1);	/* they waited for the resume */
	close(fd);
}

static void test_idle(struct srv *s)
{
	struct wire_hdr h;
	char body[8];

	/* silent: closed after about IDLE_MS */
	int fd = cli(s, L_IDLE);
	CHECK(closed_by_peer(fd, clock_now_ms() + 30000));
	close(fd);

	/* slow-loris: bytes trickle in but never a whole frame */
	fd = cli(s, L_IDLE);
	struct wire_hdr req = {
		.magic = WIRE_MAGIC, .version = WIRE_VERSION, .opcode = WIRE_OP_GET, .reqid = 1,
	};
	uint8_t hb[WIRE_HDR_SIZE];
	wire_hdr_encode(&req, hb);
	int sent = 0;
	bool closed = false;
	for (; sent < WIRE_HDR_SIZE - 1 && !closed; sent++) {
		if (net_send_all(fd, hb + sent, 1, dl()) < 0)
			break;
		closed = closed_by_peer(fd, clock_now_ms() + IDLE_MS / 2);
	}
	CHECK(closed || closed_by_peer(fd, clock_now_ms() + 30000));
	CHECK(sent < WIRE_HDR_SIZE - 1);
	close(fd);

	/* a connection with a frame every 20 ms outlives several IDLE_MS */
	fd = cli(s, L_IDLE);
	uint64_t end = clock_now_ms() + 3 * IDLE_MS;
	int n = 0;
	while (clock_now_ms() < end) {
		if (send_frame(fd, WIRE_OP_GET, (uint64_t)n, "k", 1, 0) < 0 ||
		    recv_frame(fd, &h, body, sizeof(body)) < 0)
			break;
		n++;
		usleep(20000);
	}
	CHECK(clock_now_ms() >= end);
	CHECK(send_frame(fd, WIRE_OP_GET, 1, "k", 1, 0) == 0);
	CHECK(recv_frame(fd, &h, body, sizeof(body)) == 0);
	close(fd);
}

static void test_backpressure(struct srv *s)
{
	int fd = cli(s, L_BP);
	uint8_t *body = calloc(1, 16384);
	struct wbuf w;
	long sent = 0;
	bool blocked = false;

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	wb_init(&w);
	frame(&w, WIRE_OP_INFO, 0, body, 16384, 0);
	/* send and never read, until the server stops reading too */
	while (sent < 100000) {
		int rc = net_send_all(fd, w.p, w.len, clock_now_ms() + 500);
		if (rc == -ETIMEDOUT) {
			blocked = true;
			break;
		}
		CHECK(rc == 0);
		if (rc)
			break;
		sent++;
	}
	CHECK(blocked);
	size_t maxq = atomic_load(&s->max_queued);
	printf("backpressure: %ld requests sent before the server stopped reading; "
	       "max queued %zu bytes (limit %u + one %u-byte reply)\n",
	       sent, maxq, BP_OUTBUF, INFO_REPLY + WIRE_HDR_SIZE);
	CHECK(maxq > BP_OUTBUF / 2);
	CHECK(maxq <= BP_OUTBUF + INFO_REPLY + WIRE_HDR_SIZE);

	/* drain: every complete request is answered once we read (the one
	 * whose send timed out may be half-sent and stays unanswered) */
	uint8_t *rep = malloc(INFO_REPLY);
	struct wire_hdr h;
	long got = 0;
	while (got < sent && recv_frame(fd, &h, rep, INFO_REPLY) == 0 && h.status == 0)
		got++;
	CHECK(got == sent);
	close(fd);
	free(rep);
	wb_free(&w);
	free(body);
}

/* ---- timers, stop, wake (own loops) --------------------------------- */

struct tstate {
	struct ev_loop *loop;
	int once, never, periodic, selfdel, order[3], norder, chained, added_zero;
	uint64_t periodic_id, selfdel_id, never_id;
	pthread_t loop_tid;
	atomic_int wakes;
	atomic_int wake_on_loop;
};

static void t_once(struct ev_loop *l, void *a) { (void)l; ((struct tstate *)a)->once++; }
static void t_never(struct ev_loop *l, void *a) { (void)l; ((struct tstate *)a)->never++; }
static void t_periodic(struct ev_loop *l, void *a) { (void)l; ((struct tstate *)a)->periodic++; }

static void t_selfdel(struct ev_loop *l, void *a)
{
	struct tstate *t = a;

	if (++t->selfdel == 5)
		ev_timer_del(l, t->selfdel_id);
}

static void t_o1(struct ev_loop *l, void *a) { struct tstate *t = a; (void)l; t->order[t->norder++] = 1; }
static void t_o2(struct ev_loop *l, void *a) { struct tstate *t = a; (void)l; t->order[t->norder++] = 2; }
static void t_o3(struct ev_loop *l, void *a) { struct tstate *t = a; (void)l; t->order[t->norder++] = 3; }

static void t_zero(struct ev_loop *l, void *a)
{
	(void)l;
	((struct tstate *)a)->chained++;
}

static void t_adder(struct ev_loop *l, void *a)
{
	struct tstate *t = a;

	/* deletes a pending timer and adds a 0 ms one from a callback */
	ev_timer_del(l, t->never_id);
	ev_timer_add(l, 0, false, t_zero, t);
	t->added_zero = 1;
}

static void t_stop(struct ev_loop *l, void *a)
{
	struct tstate *t = a;

	ev_timer_del(l, t->periodic_id);
	ev_stop(l);
}

static void test_timers(void)
{
	struct tstate t = { 0 };

	t.loop = ev_create();
	CHECK(t.loop);
	if (!t.loop)
		return;
	CHECK(ev_timer_add(t.loop, 30, false, t_once, &t) > 0);
	uint64_t del = ev_timer_add(t.loop, 20, false, t_never, &t);
	ev_timer_del(t.loop, del);
	ev_timer_del(t.loop, 123456);	/* unknown id: ignored */
	t.never_id = ev_timer_add(t.loop, 100, false, t_never, &t);
	ev_timer_add(t.loop, 50, false, t_adder, &t);
	t.periodic_id = ev_timer_add(t.loop, 10, true, t_periodic, &t);
	t.selfdel_id = ev_timer_add(t.loop, 5, true, t_selfdel, &t);
	ev_timer_add(t.loop, 60, false, t_o3, &t);
	ev_timer_add(t.loop, 40, false, t_o2, &t);
	ev_timer_add(t.loop, 15, false, t_o1, &t);
	ev_timer_add(t.loop, 300, false, t_stop, &t);
	uint64_t t0 = clock_now_ms();
	CHECK(ev_run(t.loop) == 0);
	uint64_t el = clock_now_ms() - t0;
	CHECK(el >= 290);
	CHECK(t.once == 1);
	CHECK(t.never == 0);
	CHECK(t.selfdel == 5);
	CHECK(t.norder == 3 && t.order[0] == 1 && t.order[1] == 2 && t.order[2] == 3);
	CHECK(t.added_zero == 1 && t.chained == 1);
	CHECK(t.periodic >= 3);	/* ~30 expected; only a lower bound is safe */
	int p = t.periodic;
	/* the loop can run again; the deleted periodic stays deleted */
	ev_timer_add(t.loop, 30, false, t_stop, &t);
	CHECK(ev_run(t.loop) == 0);
	CHECK(t.periodic == p);
	CHECK(ev_now(t.loop) >= t0 + 320);
	ev_destroy(t.loop);
}

static struct ev_loop *sig_loop;

static void on_sigusr1(int sig)
{
	(void)sig;
	ev_stop(sig_loop);
}

static void on_wake_cb(struct ev_loop *l, void *a)
{
	struct tstate *t = a;

	(void)l;
	atomic_fetch_add(&t->wakes, 1);
	if (pthread_equal(pthread_self(), t->loop_tid))
		atomic_fetch_add(&t->wake_on_loop, 1);
}

static void *run_thread(void *a)
{
	struct tstate *t = a;

	t->loop_tid = pthread_self();
	CHECK(ev_run(t->loop) == 0);
	return NULL;
}

static void test_stop_wake(void)
{
	struct tstate t = { 0 };
	pthread_t th;

	t.loop = ev_create();
	CHECK(t.loop);
	if (!t.loop)
		return;
	ev_on_wake(t.loop, on_wake_cb, &t);
	/* wake and stop from another thread, with nothing else on the loop */
	pthread_create(&th, NULL, run_thread, &t);
	for (int i = 0; i < 5000 && atomic_load(&t.wakes) == 0; i++) {
		ev_wake(t.loop);
		usleep(1000);
	}
	CHECK(atomic_load(&t.wakes) >= 1);
	ev_stop(t.loop);
	pthread_join(th, NULL);
	/* after the join: a callback may still be between its two counts
	 * while the loop runs (seen under ASan) */
	CHECK(atomic_load(&t.wake_on_loop) == atomic_load(&t.wakes));

	/* stop from a signal handler */
	sig_loop = t.loop;
	struct sigaction sa = { .sa_handler = on_sigusr1 };
	sigaction(SIGUSR1, &sa, NULL);
	pthread_create(&th, NULL, run_thread, &t);
	usleep(20000);
	pthread_kill(th, SIGUSR1);
	pthread_join(th, NULL);

	/* a stop that comes before ev_run is not lost */
	ev_stop(t.loop);
	CHECK(ev_run(t.loop) == 0);
	ev_destroy(t.loop);
}

int main(void)
{
	struct srv s;

	log_init("t_ev", LOG_WARNING);
	signal(SIGPIPE, SIG_IGN);
	alarm(240);	/* a hang is a failure, not a stuck test run */
	test_timers();
	test_stop_wake();
	if (srv_start(&s, 0) < 0) {
		fprintf(stderr, "t_ev: cannot start the server\n");
		return 1;
	}
	test_pipeline(&s);
	test_payloads(&s);
	test_ref_send(&s);
	test_bad_headers(&s);
	test_closing(&s);
	test_idle(&s);
	test_backpressure(&s);
	/* every connection got on_close exactly once */
	CHECK(wait_int(&s.open_conns, 0, 20000));
	srv_stop(&s);
	/* the same exchanges on a loop that busy-polls before it sleeps */
	if (srv_start(&s, 200) < 0) {
		fprintf(stderr, "t_ev: cannot start the server\n");
		return 1;
	}
	test_pipeline(&s);
	test_payloads(&s);
	test_closing(&s);
	CHECK(wait_int(&s.open_conns, 0, 20000));
	srv_stop(&s);
	if (tl_failures) {
		fprintf(stderr, "t_ev: %d check(s) failed\n", tl_failures);
		return 1;
	}
	printf("t_ev: ok\n");
	return 0;
}

/* fuzz_evconn: hostile bytes into a framed connection (src/common/ev.c). The input
 * is written into one end of a socketpair whose other end is an ev_conn on a
 * loop in this thread. The handler's behaviour is chosen by the frames'
 * reqid bits (reply, referenced payload, receive or discard a payload, pause,
 * close in several ways), so the fuzzer explores the parser together with
 * the connection's states. Checks: every byte the server sends parses as
 * reply frames, referenced payloads are released exactly once, on_close runs
 * exactly once, payload buffers are freed (LeakSanitizer), no hang. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ev.h"
#include "fuzz_frames.h"
#include "kvpool.h"
#include "log.h"
#include "wire.h"

#define FAIL(why) do { fprintf(stderr, "fuzz_evconn: %s\n", why); abort(); } while (0)

static uint8_t ref_bytes[65536];

struct fz {
	struct ev_loop *loop;
	struct ev_conn *c;
	int peer;			/* client end */
	const uint8_t *in;
	size_t in_len, in_off;
	bool in_done, peer_eof;
	int closes, ref_sent, ref_released;
	uint8_t *pbuf;			/* payload buffer being filled */
	struct wire_hdr ph;
	struct fz_frames out;		/* what the server sends: replies only */
};

static void on_release(void *arg)
{
	((struct fz *)arg)->ref_released++;
}

static void on_resume(struct ev_loop *loop, void *arg)
{
	struct fz *f = arg;

	(void)loop;
	if (f->closes == 0)
		ev_conn_pause(f->c, false);
}

static int on_frame(struct ev_conn *c, const struct wire_hdr *h, const uint8_t *body)
{
	struct fz *f = ev_conn_udata(c);
	uint64_t id = h->reqid;

	if (h->payload_len) {
		if (id & 16) {
			ev_conn_discard_payload(c);
		} else {
			f->pbuf = malloc(h->payload_len);
			if (!f->pbuf)
				return -1;
			f->ph = *h;
			ev_conn_recv_payload(c, f->pbuf, h->payload_len, f);
		}
	}
	if (id & 32) {
		struct wire_hdr rh = *h;
		uint8_t hb[WIRE_HDR_SIZE];
		size_t plen = (size_t)(id >> 8) % sizeof(ref_bytes);
		rh.flags = WIRE_F_REPLY;
		rh.status = 0;
		rh.body_len = 0;
		rh.payload_len = plen;
		wire_hdr_encode(&rh, hb);
		if (ev_conn_send_ref(c, hb, sizeof(hb), ref_bytes, plen, on_release, f) == 0)
			f->ref_sent++;
	}
	switch (id & 15) {
	case 12:
		ev_conn_reply(c, h, 0, body, h->body_len);
		ev_conn_close_after_send(c);
		return 0;
	case 13:
		return -1;
	case 14:
		ev_conn_close(c);
		return 0;
	case 15:
		ev_conn_pause(c, true);
		ev_timer_add(f->loop, 1, false, on_resume, f);
		return ev_conn_reply(c, h, 0, NULL, 0) < 0 ? -1 : 0;
	default:
		return ev_conn_reply(c, h, KVP_ENOTFOUND, body, h->body_len) < 0 ? -1 : 0;
	}
}

static void on_payload(struct ev_conn *c, bool ok, void *arg)
{
	struct fz *f = arg;

	if (ok && !f->closes) {
		uint64_t sum = 0;
		for (uint64_t i = 0; i < f->ph.payload_len; i++)
			sum += f->pbuf[i];
		ev_conn_reply(c, &f->ph, 0, &sum, sizeof(sum));
	}
	free(f->pbuf);
	f->pbuf = NULL;
}

static void on_close(struct ev_conn *c)
{
	struct fz *f = ev_conn_udata(c);

	if (++f->closes != 1)
		FAIL("on_close twice");
	if (f->pbuf)
		FAIL("on_close with a payload in progress and no on_payload(false)");
}

static const struct ev_conn_ops ops = {
	.on_frame = on_frame,
	.on_payload = on_payload,
	.on_close = on_close,
};

static void on_peer(struct ev_loop *loop, int fd, uint32_t events, void *arg)
{
	struct fz *f = arg;

	if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && fz_frames_drain(&f->out, fd)) {
		f->peer_eof = true;
		ev_del_fd(loop, fd);
		if (f->closes)
			ev_stop(loop);
		return;
	}
	if ((events & EPOLLOUT) && !f->in_done) {
		while (f->in_off < f->in_len) {
			ssize_t w = send(fd, f->in + f->in_off, f->in_len - f->in_off,
					 MSG_DONTWAIT | MSG_NOSIGNAL);
			if (w > 0) {
				f->in_off += (size_t)w;
				continue;
			}
			if (w < 0 && errno == EAGAIN)
				return;
			break;	/* the server closed: the rest cannot be sent */
		}
		f->in_done = true;
		shutdown(fd, SHUT_WR);
		ev_mod_fd(loop, fd, EPOLLIN);
	}
}

static void on_hang(struct ev_loop *loop, void *arg)
{
	(void)loop;
	(void)arg;
	FAIL("connection did not finish within 10 s");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool init;
	struct fz f = {
		.in = data, .in_len = size,
		.out = { .who = "fuzz_evconn: server", .replies_only = true },
	};
	int sv[2];

	if (!init) {
		log_init("fuzz_evconn", LOG_CRIT);	/* bad frames are logged; keep quiet */
		for (size_t i = 0; i < sizeof(ref_bytes); i++)
			ref_bytes[i] = (uint8_t)i;
		init = true;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return 0;
	f.loop = ev_create();
	if (!f.loop) {
		close(sv[0]);
		close(sv[1]);
		return 0;
	}
	struct ev_conn_limits lim = {
		.max_body = 4096,
		.max_payload = 65536,
		.max_outbuf = 8192,	/* small: backpressure is part of the game */
	};
	f.peer = sv[1];
	f.c = ev_conn_create(f.loop, sv[0], &ops, &lim, &f);
	if (!f.c) {
		close(sv[1]);
		ev_destroy(f.loop);
		return 0;
	}
	ev_add_fd(f.loop, sv[1], EPOLLIN | EPOLLOUT, on_peer, &f);
	ev_timer_add(f.loop, 10000, false, on_hang, &f);
	ev_run(f.loop);
	if (f.closes != 1)
		FAIL("loop stopped before the connection closed");
	if (f.ref_released != f.ref_sent)
		FAIL("referenced payloads not released exactly once");
	ev_destroy(f.loop);
	close(sv[1]);
	return 0;
}

/* fuzz_http: arbitrary bytes as one HTTP connection to the master's HTTP
 * endpoints — /metrics, /health and the Mooncake metadata store
 * (GET/PUT/DELETE /metadata?key=) on one server — through the real stack:
 * libmicrohttpd parses, src/common/http.c bounds the body and runs the handler,
 * master/mhttp.c reads the query and keeps the store. In-process: an ev
 * loop, a master without segments, a loopback socket per input; the loop
 * runs until the server has answered (or closed), at most 20 ms. Asserts
 * that an answer is an HTTP response (starts with "HTTP/1.") and that
 * nothing crashes (ASan/UBSan). libmicrohttpd may keep a connection whose
 * peer vanished mid-body until its idle timeout, so the server is restarted
 * every 64 inputs.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conf.h"
#include "ev.h"
#include "log.h"
#include "master.h"
#include "mhttp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct ev_loop *loop;
static struct master *m;
static struct mhttp *h;
static int port;
static unsigned inputs;

struct run {
	int fd;
	size_t got;
	char first[8];
	bool done;
	unsigned ticks, quiet;	/* 2 ms ticks in all / since the last byte */
};

/* libmicrohttpd notices a half-closed peer late, so the loop does not wait
 * for the close: it stops 4 ms after the last byte of an answer, or after
 * 20 ms without one. */
static void on_tick(struct ev_loop *l, void *arg)
{
	struct run *r = arg;

	r->ticks++;
	r->quiet++;
	if ((r->got && r->quiet >= 2) || r->ticks >= 10)
		ev_stop(l);
}

static void on_client(struct ev_loop *l, int fd, uint32_t events, void *arg)
{
	struct run *r = arg;
	char buf[65536];

	(void)events;
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n > 0) {
			if (r->got < sizeof(r->first))
				memcpy(r->first + r->got, buf,
				       (size_t)n < sizeof(r->first) - r->got ? (size_t)n
									   : sizeof(r->first) - r->got);
			r->got += (size_t)n;
			r->quiet = 0;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		r->done = true;	/* EOF or reset: the server is done with us */
		ev_stop(l);
		return;
	}
}

static void server_start(void)
{
	struct kvp_conf *c = calloc(1, sizeof(*c));
	char err[256];

	if (!c)
		abort();
	conf_defaults(c);
	m = master_create(c, err, sizeof(err));
	if (!m) {
		fprintf(stderr, "fuzz_http: master_create: %s\n", err);
		abort();
	}
	h = mhttp_start(loop, m, "127.0.0.1:0", "127.0.0.1:0", NULL, err, sizeof(err));
	if (!h) {
		fprintf(stderr, "fuzz_http: mhttp_start: %s\n", err);
		abort();
	}
	port = mhttp_port(h);
	free(c);
}

static void server_stop(void)
{
	mhttp_stop(h);
	master_destroy(m);
	h = NULL;
	m = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct run r = { .fd = -1 };
	uint64_t tid;

	if (!loop) {
		log_init("fuzz_http", 2);	/* LOG_CRIT: quiet */
		loop = ev_create();
		if (!loop)
			abort();
		server_start();
	}
	if (++inputs % 64 == 0) {
		server_stop();
		server_start();
	}
	a.sin_port = htons((uint16_t)port);
	r.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (r.fd < 0)
		return 0;
	if (connect(r.fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(r.fd);
		return 0;
	}
	/* The request, then end of input: a complete request is answered,
	 * an incomplete one is the server's to time out or drop. */
	for (size_t off = 0; off < size;) {
		ssize_t n = send(r.fd, data + off, size - off, MSG_NOSIGNAL);

		if (n <= 0)
			break;
		off += (size_t)n;
	}
	shutdown(r.fd, SHUT_WR);
	fcntl(r.fd, F_SETFL, fcntl(r.fd, F_GETFL) | O_NONBLOCK);
	if (ev_add_fd(loop, r.fd, EPOLLIN, on_client, &r) == 0) {
		tid = ev_timer_add(loop, 2, true, on_tick, &r);
		ev_run(loop);
		ev_timer_del(loop, tid);
		ev_del_fd(loop, r.fd);
	}
	/* An answer is an HTTP response, never bytes of something else. */
	if (r.got >= 7 && memcmp(r.first, "HTTP/1.", 7) != 0)
		abort();
	close(r.fd);
	return 0;
}

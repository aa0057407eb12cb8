/* t_client_stats: a client against a master from before CLIENT_STATS (a
 * fake that answers HELLO, SEGMENTS and INFO, and treats CLIENT_STATS as
 * a bad header: opcode HELLO, status EPROTO, then closes, as ev.c's
 * conn_bad_header does). The client's calls go on working, and it stops
 * reporting after at most CSTATS_STRIKES tries instead of on every call.
 * The same for TOUCH (the reports of optimistic reads): refused once, they
 * stop.
 */
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client_i.h"
#include "cstats.h"
#include "kvpool.h"
#include "lcache.h"
#include "testlib.h"
#include "wire.h"

static atomic_int stats_frames, touch_frames;

static int read_all(int fd, void *p, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t k = recv(fd, (char *)p + got, n - got, 0);
		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	return 0;
}

static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void reply(int fd, uint16_t op, int status, uint64_t reqid, const struct wbuf *body)
{
	struct wbuf b;

	wb_init(&b);
	size_t start = wire_begin(&b);
	if (body)
		wb_bytes(&b, body->p, body->len);
	wire_finish(&b, start, op, WIRE_F_REPLY, status, reqid, 0);
	(void)!send(fd, b.p, b.len, MSG_NOSIGNAL);
	wb_free(&b);
}

static void *old_master_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	uint8_t h[WIRE_HDR_SIZE];

	while (read_all(fd, h, sizeof(h)) == 0) {
		uint16_t op = (uint16_t)le(h + 6, 2);
		uint32_t blen = (uint32_t)le(h + 12, 4);
		uint64_t reqid = le(h + 16, 8);
		uint8_t *body = malloc(blen ? blen : 1);
		if (!body || read_all(fd, body, blen) < 0) {
			free(body);
			break;
		}
		free(body);
		struct wbuf b;
		wb_init(&b);
		if (op == WIRE_OP_CLIENT_STATS || op == WIRE_OP_TOUCH) {
			atomic_fetch_add(op == WIRE_OP_TOUCH ? &touch_frames : &stats_frames, 1);
			reply(fd, WIRE_OP_HELLO, KVP_EPROTO, reqid, NULL);
			wb_free(&b);
			break;		/* as ev.c: reply, then close */
		}
		if (op == WIRE_OP_HELLO) {
			wb_u64(&b, 5);
			wb_u16(&b, WIRE_VERSION);
		} else if (op == WIRE_OP_SEGMENTS) {
			wb_u32(&b, 0);
		} else if (op == WIRE_OP_INFO) {
			for (int i = 0; i < 6; i++)
				wb_u64(&b, 0);
		}
		if (op == WIRE_OP_HELLO || op == WIRE_OP_SEGMENTS || op == WIRE_OP_INFO)
			reply(fd, op, 0, reqid, &b);
		else
			reply(fd, op, KVP_EPROTO, reqid, NULL);
		wb_free(&b);
	}
	close(fd);
	return NULL;
}

static void *old_master(void *arg)
{
	int lfd = (int)(intptr_t)arg;

	for (;;) {
		int fd = accept(lfd, NULL, NULL);
		pthread_t t;
		if (fd < 0)
			return NULL;
		if (pthread_create(&t, NULL, old_master_conn, (void *)(intptr_t)fd) == 0)
			pthread_detach(t);
		else
			close(fd);
	}
}

int main(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	pthread_t t;
	char addr[64];
	int err = 0;

	REQUIRE(lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(lfd, 16) == 0,
		"listen");
	REQUIRE(getsockname(lfd, (struct sockaddr *)&a, &al) == 0, "getsockname");
	REQUIRE(pthread_create(&t, NULL, old_master, (void *)(intptr_t)lfd) == 0, "thread");
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(a.sin_port));
	const char *ov[] = { "client.timeout=2s", NULL };
	struct kvp_open_opts o = { .master = addr, .overrides = ov };
	struct kvp *kvp = kvp_open(&o, &err);
	REQUIRE(kvp, "kvp_open against the old master: %d", err);

	for (int i = 0; i < 10; i++) {
		struct kvp_info info;
		atomic_fetch_add(&kvp->st.local_bytes, 100);	/* as a copy would */
		cstats_flush(kvp);
		CHECK_EQ(kvp_info(kvp, &info), 0);
		kvp_info_free(&info);
	}
	int n = atomic_load(&stats_frames);
	CHECK(n >= 1 && n <= CSTATS_STRIKES, "%d CLIENT_STATS frames sent (at most %d)", n,
	      CSTATS_STRIKES);
	CHECK(atomic_load(&kvp->cs.due_ms) == CSTATS_OFF, "reports are off");
	REQUIRE(kvp->lc, "the location cache (optimistic reads) is on by default");
	for (int i = 0; i < 5; i++) {
		struct kvp_info info;
		lc_touch(kvp, "k", 1);
		lc_touch_flush(kvp);
		CHECK_EQ(kvp_info(kvp, &info), 0);
		kvp_info_free(&info);
	}
	CHECK_EQ(atomic_load(&touch_frames), 1);
	kvp_close(kvp);
	CHECK_EQ(atomic_load(&stats_frames), n);
	CHECK_EQ(atomic_load(&touch_frames), 1);
	return tl_done();
}

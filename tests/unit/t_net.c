/* t_net: listen/connect, full-length I/O with deadlines, same-host
 * connections that do not pace, address parsing, host identity and busy
 * polling (src/common/net.c). Loopback only. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "ev.h"
#include "net.h"
#include "testlib.h"


static int accept_one(int lfd)
{
	/* the listener is non-blocking: wait for the connection */
	for (int i = 0; i < 5000; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			return fd;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		usleep(1000);
	}
	return -ETIMEDOUT;
}

struct sink {
	int fd;
	size_t n;
	uint64_t sum;
};

static void *sink_thread(void *arg)
{
	struct sink *s = arg;
	uint8_t buf[65536];

	for (;;) {
		ssize_t r = recv(s->fd, buf, sizeof(buf), 0);
		if (r <= 0)
			break;
		for (ssize_t i = 0; i < r; i++)
			s->sum += buf[i];
		s->n += (size_t)r;
	}
	return NULL;
}

static void test_listen_connect(void)
{
	char err[256], addr[64];
	int lfd = net_listen("127.0.0.1:0", err, sizeof(err));

	CHECK(lfd >= 0);
	if (lfd < 0) {
		fprintf(stderr, "listen: %s\n", err);
		return;
	}
	CHECK(fcntl(lfd, F_GETFL) & O_NONBLOCK);
	CHECK(fcntl(lfd, F_GETFD) & FD_CLOEXEC);
	int port = net_local_port(lfd);
	CHECK(port > 0 && port < 65536);

	/* the same port again: in use, and the message names the address */
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	int l2 = net_listen(addr, err, sizeof(err));
	CHECK(l2 == -EADDRINUSE);
	CHECK(strstr(err, addr) != NULL && strstr(err, strerror(EADDRINUSE)) != NULL);

	int cfd = net_connect(addr, 2000, err, sizeof(err));
	CHECK(cfd >= 0);
	int sfd = accept_one(lfd);
	CHECK(sfd >= 0);
	if (cfd < 0 || sfd < 0)
		goto out;
	CHECK(!(fcntl(cfd, F_GETFL) & O_NONBLOCK));	/* blocking, as documented */
	CHECK(net_local_port(sfd) == port);

	/* exact-length transfers in both directions */
	const char msg[] = "hello, kvpool";
	char got[sizeof(msg)];
	uint64_t dl = clock_now_ms() + 5000;
	CHECK(net_send_all(cfd, msg, sizeof(msg), dl) == 0);
	CHECK(net_recv_all(sfd, got, sizeof(got), dl) == 0);
	CHECK(memcmp(msg, got, sizeof(msg)) == 0);

	/* a large vectored send (more than the socket buffers hold) against a
	 * reader thread; iovecs with empty entries and a partial advance */
	size_t big = 8u << 20;
	uint8_t *a = malloc(big), *b = malloc(big / 2);
	uint64_t want = 0;
	for (size_t i = 0; i < big; i++) {
		a[i] = (uint8_t)(i * 7);
		want += a[i];
	}
	for (size_t i = 0; i < big / 2; i++) {
		b[i] = (uint8_t)(i * 13);
		want += b[i];
	}
	struct sink s = { .fd = sfd };
	pthread_t th;
	pthread_create(&th, NULL, sink_thread, &s);
	struct iovec iov[4] = {
		{ .iov_base = NULL, .iov_len = 0 },
		{ .iov_base = a, .iov_len = big },
		{ .iov_base = NULL, .iov_len = 0 },
		{ .iov_base = b, .iov_len = big / 2 },
	};
	CHECK(net_sendv_all(cfd, iov, 4, clock_now_ms() + 20000) == 0);
	shutdown(cfd, SHUT_WR);
	pthread_join(th, NULL);
	CHECK(s.n == big + big / 2);
	CHECK(s.sum == want);
	free(a);
	free(b);

	/* peer closed: recv says -ECONNRESET, send fails without SIGPIPE */
	close(sfd);
	sfd = -1;
	CHECK(net_recv_all(cfd, got, 1, clock_now_ms() + 2000) == -ECONNRESET);
	int rc = 0;
	for (int i = 0; i < 100 && rc == 0; i++)
		rc = net_send_all(cfd, msg, sizeof(msg), clock_now_ms() + 2000);
	CHECK(rc == -ECONNRESET || rc == -EPIPE);
out:
	if (cfd >= 0)
		close(cfd);
	if (sfd >= 0)
		close(sfd);
	close(lfd);
}

/* A loopback listener and one connection to it: 0 with the three fds,
 * -1 (nothing open) when that fails. */
static int tcp_pair(int *lfd, int *cfd, int *sfd)
{
	char err[256], addr[64];

	*lfd = net_listen("127.0.0.1:0", err, sizeof(err));
	CHECK(*lfd >= 0);
	if (*lfd < 0)
		return -1;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", net_local_port(*lfd));
	*cfd = net_connect(addr, 2000, err, sizeof(err));
	*sfd = accept_one(*lfd);
	CHECK(*cfd >= 0 && *sfd >= 0);
	if (*cfd >= 0 && *sfd >= 0)
		return 0;
	if (*cfd >= 0)
		close(*cfd);
	if (*sfd >= 0)
		close(*sfd);
	close(*lfd);
	return -1;
}

static void tcp_pair_close(int lfd, int cfd, int sfd)
{
	close(cfd);
	close(sfd);
	close(lfd);
}

static void test_deadlines(void)
{
	int lfd, cfd, sfd;

	if (tcp_pair(&lfd, &cfd, &sfd) < 0)
		return;

	/* a silent peer: recv times out near the deadline (generous bounds) */
	char c;
	uint64_t t0 = clock_now_ms();
	CHECK(net_recv_all(cfd, &c, 1, t0 + 300) == -ETIMEDOUT);
	uint64_t el = clock_now_ms() - t0;
	CHECK(el >= 290 && el < 10000);
	/* an expired deadline fails at once instead of blocking */
	CHECK(net_recv_all(cfd, &c, 1, clock_now_ms() - 1) == -ETIMEDOUT);

	/* a peer that never reads: send times out once the buffers are full */
	size_t n = 64u << 20;
	uint8_t *p = calloc(1, n);
	t0 = clock_now_ms();
	CHECK(net_send_all(cfd, p, n, t0 + 300) == -ETIMEDOUT);
	el = clock_now_ms() - t0;
	CHECK(el >= 290 && el < 10000);
	free(p);
	/* n = 0 is a no-op that succeeds */
	CHECK(net_send_all(cfd, NULL, 0, 1) == 0);
	CHECK(net_recv_all(cfd, NULL, 0, 1) == 0);
	tcp_pair_close(lfd, cfd, sfd);
}

static void cc_of(int fd, char *cc, size_t len)
{
	socklen_t l = (socklen_t)len - 1;

	memset(cc, 0, len);
	CHECK(getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &l) == 0);
}

/* [cluster] tcp_congestion (net_tune_cc): auto replaces a pacing algorithm
 * (BBR) with reno and leaves others alone, system never changes it, reno
 * and cubic set it; a socketpair is no TCP connection and is left alone. */
static void test_congestion(void)
{
	char cc[16], sys[16];
	int sp[2], lfd, cfd, sfd;

	CHECK(net_cc_parse("auto") == NET_CC_AUTO && net_cc_parse("system") == NET_CC_SYSTEM);
	CHECK(net_cc_parse("reno") == NET_CC_RENO && net_cc_parse("cubic") == NET_CC_CUBIC);
	CHECK(net_cc_parse("") == NET_CC_AUTO && net_cc_parse(NULL) == NET_CC_AUTO);
	if (tcp_pair(&lfd, &cfd, &sfd) < 0)
		return;
	/* net_connect leaves the algorithm to its caller */
	cc_of(cfd, sys, sizeof(sys));
	CHECK(net_tune_cc(cfd, NET_CC_SYSTEM) == 0);
	cc_of(cfd, cc, sizeof(cc));
	CHECK(!strcmp(cc, sys));
	/* auto: whatever the system's default, it does not pace now */
	CHECK(net_tune_cc(cfd, NET_CC_AUTO) == 0);
	cc_of(cfd, cc, sizeof(cc));
	CHECK(strncmp(cc, "bbr", 3) != 0);
	CHECK(!strncmp(sys, "bbr", 3) ? !strcmp(cc, "reno") : !strcmp(cc, sys));
	/* where BBR may be chosen: auto switches a BBR end to reno, system
	 * keeps it */
	if (setsockopt(sfd, IPPROTO_TCP, TCP_CONGESTION, "bbr", 3) == 0) {
		CHECK(net_tune_cc(sfd, NET_CC_SYSTEM) == 0);
		cc_of(sfd, cc, sizeof(cc));
		CHECK(!strcmp(cc, "bbr"));
		CHECK(net_tune_cc(sfd, NET_CC_AUTO) == 0);
		cc_of(sfd, cc, sizeof(cc));
		CHECK(!strcmp(cc, "reno"));
	}
	/* reno is always allowed; cubic where it is allowed (root, or listed
	 * in tcp_allowed_congestion_control), else an error and no change */
	CHECK(net_tune_cc(sfd, NET_CC_RENO) == 0);
	cc_of(sfd, cc, sizeof(cc));
	CHECK(!strcmp(cc, "reno"));
	int rc = net_tune_cc(sfd, NET_CC_CUBIC);
	cc_of(sfd, cc, sizeof(cc));
	CHECK(rc == 0 ? !strcmp(cc, "cubic") : (rc == -EPERM || rc == -ENOENT) && !strcmp(cc, "reno"));
	CHECK(send(cfd, "x", 1, 0) == 1 && recv(sfd, cc, 1, 0) == 1 && cc[0] == 'x');
	/* an event loop applies its setting to every connection it adopts */
	{
		static const struct ev_conn_ops none = { 0 };
		struct ev_loop *loop = ev_create();
		int dup_fd = dup(sfd);

		CHECK(loop && dup_fd >= 0);
		if (loop && dup_fd >= 0) {
			CHECK(setsockopt(dup_fd, IPPROTO_TCP, TCP_CONGESTION, "cubic", 5) == 0 ||
			      net_tune_cc(dup_fd, NET_CC_SYSTEM) == 0);
			ev_set_congestion(loop, NET_CC_RENO);
			CHECK(ev_conn_create(loop, dup_fd, &none, NULL, NULL) != NULL);
			cc_of(sfd, cc, sizeof(cc));
			CHECK(!strcmp(cc, "reno"));
		}
		if (loop)
			ev_destroy(loop);	/* closes dup_fd with the connection */
	}
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
	CHECK(net_tune_cc(sp[0], NET_CC_RENO) == 0);	/* no TCP: nothing happens */
	close(sp[0]);
	close(sp[1]);
	tcp_pair_close(lfd, cfd, sfd);
}

static void test_refused(void)
{
	char err[256], addr[64];
	/* a port that was just free: bind, read it, close */
	int lfd = net_listen("127.0.0.1:0", err, sizeof(err));
	CHECK(lfd >= 0);
	if (lfd < 0)
		return;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", net_local_port(lfd));
	close(lfd);
	uint64_t t0 = clock_now_ms();
	int fd = net_connect(addr, 5000, err, sizeof(err));
	CHECK(fd == -ECONNREFUSED);
	CHECK(clock_now_ms() - t0 < 4000);	/* fails fast, not at the timeout */
	CHECK(strstr(err, addr) != NULL);
	if (fd >= 0)
		close(fd);
}

static void test_addresses(void)
{
	char err[256];
	static const char *const bad[] = {
		"", "127.0.0.1", "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:65536",
		"127.0.0.1:123456", "127.0.0.1:-1", "[::1]", "[::1]x:80", "[::1:80",
		"127.0.0.1:80 ", "host:8 0",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		int fd = net_listen(bad[i], err, sizeof(err));
		CHECK(fd < 0);
		if (fd >= 0) {
			fprintf(stderr, "accepted bad address '%s'\n", bad[i]);
			close(fd);
		}
		CHECK(err[0] != '\0');
		fd = net_connect(bad[i], 1000, err, sizeof(err));
		CHECK(fd < 0);
		if (fd >= 0)
			close(fd);
	}
	CHECK(net_listen(NULL, err, sizeof(err)) == -EINVAL);
	CHECK(net_listen("x", NULL, 0) == -EINVAL);	/* err is optional */

	/* ":port" and "0.0.0.0:port" = all IPv4; reachable through loopback */
	int fd = net_listen(":0", err, sizeof(err));
	CHECK(fd >= 0);
	if (fd >= 0) {
		char addr[64];
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", net_local_port(fd));
		int c = net_connect(addr, 2000, err, sizeof(err));
		CHECK(c >= 0);
		if (c >= 0)
			close(c);
		/* connect with an empty host goes to loopback */
		snprintf(addr, sizeof(addr), ":%d", net_local_port(fd));
		c = net_connect(addr, 2000, err, sizeof(err));
		CHECK(c >= 0);
		if (c >= 0)
			close(c);
		close(fd);
	}
	fd = net_listen("localhost:0", err, sizeof(err));
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
	/* IPv6 only where the host has it */
	int s6 = socket(AF_INET6, SOCK_STREAM, 0);
	if (s6 >= 0) {
		close(s6);
		fd = net_listen("[::1]:0", err, sizeof(err));
		if (fd >= 0) {
			char addr[64];
			snprintf(addr, sizeof(addr), "[::1]:%d", net_local_port(fd));
			int c = net_connect(addr, 2000, err, sizeof(err));
			CHECK(c >= 0);
			if (c >= 0)
				close(c);
			close(fd);
		} else {
			printf("note: no ::1 here (%s), IPv6 listen not tested\n", err);
		}
	}

	CHECK(net_is_loopback("127.0.0.1:15001"));
	CHECK(net_is_loopback("127.1.2.3:1"));
	CHECK(net_is_loopback("localhost:80"));
	CHECK(net_is_loopback("LOCALHOST:80"));
	CHECK(net_is_loopback("[::1]:80"));
	CHECK(net_is_loopback("::1"));
	CHECK(net_is_loopback("127.0.0.1"));
	CHECK(net_is_loopback("[::ffff:127.0.0.1]:80"));
	CHECK(!net_is_loopback(":15001"));
	CHECK(!net_is_loopback("0.0.0.0:15001"));
	CHECK(!net_is_loopback("[::]:15001"));
	CHECK(!net_is_loopback("10.0.0.1:15001"));
	CHECK(!net_is_loopback("128.0.0.1:15001"));
	CHECK(!net_is_loopback("example.com:80"));
	CHECK(!net_is_loopback(""));
	CHECK(!net_is_loopback(NULL));
}

static void test_misc(void)
{
	char id[64], want[64] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

	if (f) {
		if (!fgets(want, sizeof(want), f))
			want[0] = '\0';
		fclose(f);
		want[strcspn(want, "\n")] = '\0';
	}
	CHECK(net_host_id(id, sizeof(id)) == 0);
	CHECK(strlen(id) == 36);
	CHECK(strcmp(id, want) == 0);
	CHECK(net_host_id(id, 36) == -ENOSPC);	/* no room for the NUL */
	CHECK(net_host_id(id, 37) == 0);

	uint8_t r1[32] = { 0 }, r2[32] = { 0 }, zero[32] = { 0 };
	CHECK(net_random(r1, sizeof(r1)) == 0);
	CHECK(net_random(r2, sizeof(r2)) == 0);
	CHECK(memcmp(r1, r2, sizeof(r1)) != 0);
	CHECK(memcmp(r1, zero, sizeof(r1)) != 0);

	uint64_t a = clock_now_ms();
	usleep(20000);
	uint64_t b = clock_now_ms();
	CHECK(b >= a + 15);
	CHECK(clock_realtime_ns() > 1600000000ull * 1000000000ull);
}

/* ---- busy polling ---- */

struct countdown {
	int calls, ready_at;
};

static bool count_ready(void *arg)
{
	struct countdown *c = arg;

	return ++c->calls >= c->ready_at;
}

static void *write_later(void *arg)
{
	int fd = *(int *)arg;

	usleep(2000);
	CHECK(write(fd, "x", 1) == 1);
	return NULL;
}

static void test_busy_poll(void)
{
	struct countdown c = { .ready_at = 3 };
	struct pollfd p;
	pthread_t th;
	int sv[2];
	char b;

	/* 0 us: no look at all */
	CHECK(!net_spin(count_ready, &c, 0) && c.calls == 0);
	/* it looks until told, within the budget (10 s: never reached), or
	 * gives up at once when a yield let another thread run (a loaded
	 * machine): true only when ready() said so, never a look after it */
	bool got = net_spin(count_ready, &c, 10 * 1000 * 1000);
	CHECK(got ? c.calls == 3 : c.calls >= 1 && c.calls < 3);
	/* a budget that runs out reports nothing found */
	c = (struct countdown){ .ready_at = 1 << 30 };
	CHECK(!net_spin(count_ready, &c, 200) && c.calls >= 1);

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	p = (struct pollfd){ .fd = sv[0], .events = POLLIN };
	/* timeout 0 stays a look: nothing there */
	CHECK(net_poll(&p, 1, 0, 100000) == 0);
	/* data already there: found by the first look */
	CHECK(write(sv[1], "x", 1) == 1);
	CHECK(net_poll(&p, 1, -1, 100000) == 1 && (p.revents & POLLIN));
	CHECK(read(sv[0], &b, 1) == 1);
	/* data that comes after the spin ran out: the sleeping poll gets it */
	CHECK(pthread_create(&th, NULL, write_later, &sv[1]) == 0);
	CHECK(net_poll(&p, 1, 5000, 100) == 1 && (p.revents & POLLIN));
	CHECK(read(sv[0], &b, 1) == 1 && b == 'x');
	pthread_join(th, NULL);
	/* ... and one that comes during a long spin */
	CHECK(pthread_create(&th, NULL, write_later, &sv[1]) == 0);
	CHECK(net_poll(&p, 1, 5000, 1000000) == 1 && (p.revents & POLLIN));
	pthread_join(th, NULL);
	/* a timeout still ends it */
	CHECK(read(sv[0], &b, 1) == 1);
	CHECK(net_poll(&p, 1, 20, 100) == 0);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	signal(SIGPIPE, SIG_DFL);	/* a SIGPIPE would kill the test: MSG_NOSIGNAL must work */
	test_listen_connect();
	test_deadlines();
	test_congestion();
	test_refused();
	test_addresses();
	test_misc();
	test_busy_poll();
	if (tl_failures) {
		fprintf(stderr, "t_net: %d check(s) failed\n", tl_failures);
		return 1;
	}
	printf("t_net: ok\n");
	return 0;
}

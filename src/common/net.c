/* net: socket helpers (listen, connect with timeout, full-length I/O with a
 * deadline) and host identity; see net.h. Stateless and thread-safe: no
 * globals, every call works on its arguments only.
 */
#include "net.h"
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define NET_BACKLOG 1024

/* "host:port", "[v6]:port", ":port" (host ""). The last ':' splits an
 * unbracketed string, so ":::15001" is host "::". -EINVAL if malformed. */
static int parse_hostport(const char *s, char *host, size_t hostlen, char *port, size_t portlen)
{
	const char *colon, *h = s;
	size_t hl;

	if (!s)
		return -EINVAL;
	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		if (!close || close[1] != ':')
			return -EINVAL;
		h = s + 1;
		hl = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		hl = (size_t)(colon - s);
	}
	const char *p = colon + 1;
	size_t pl = strlen(p);
	if (pl == 0 || pl > 5 || pl >= portlen || hl >= hostlen)
		return -EINVAL;
	for (size_t i = 0; i < pl; i++)
		if (p[i] < '0' || p[i] > '9')
			return -EINVAL;
	if (atoi(p) > 65535)
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	memcpy(port, p, pl + 1);
	return 0;
}

static int resolve(const char *hostport, bool passive, struct addrinfo **res,
		   char *err, size_t errlen)
{
	char host[256], port[8];
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
		.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0),
	};

	if (parse_hostport(hostport, host, sizeof(host), port, sizeof(port)) < 0) {
		snprintf(err, errlen, "%s: bad address (expected host:port, [v6]:port or :port)",
			 hostport ? hostport : "(null)");
		return -EINVAL;
	}
	const char *node = host;
	if (!host[0]) {
		/* Empty host: all IPv4 addresses to listen, loopback to connect. */
		node = passive ? "0.0.0.0" : "127.0.0.1";
		hints.ai_family = AF_INET;
	}
	int rc = getaddrinfo(node, port, &hints, res);
	if (rc) {
		snprintf(err, errlen, "%s: %s", hostport,
			 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return rc == EAI_SYSTEM && errno ? -errno : -EADDRNOTAVAIL;
	}
	return 0;
}

int net_listen(const char *hostport, char *err, size_t errlen)
{
	struct addrinfo *res, *ai;
	int one = 1, zero = 0, rc;
	char dummy[1];

	if (!err) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	rc = resolve(hostport, true, &res, err, errlen);
	if (rc < 0)
		return rc;
	rc = -EADDRNOTAVAIL;
	for (ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
				ai->ai_protocol);
		if (fd < 0) {
			rc = -errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		/* "[::]:port" means every address, IPv4 included. */
		if (ai->ai_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, NET_BACKLOG) == 0) {
			freeaddrinfo(res);
			return fd;
		}
		rc = -errno;
		close(fd);
	}
	freeaddrinfo(res);
	snprintf(err, errlen, "%s: %s", hostport, strerror(-rc));
	return rc;
}

int net_local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		return -errno;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return -EAFNOSUPPORT;
}

/* Waits for events on fd until deadline_ms (0 = forever): 0 or -ETIMEDOUT
 * (EINTR restarts with the time left). */
static int wait_fd(int fd, short events, uint64_t deadline_ms)
{
	for (;;) {
		int timeout = -1;
		if (deadline_ms) {
			uint64_t now = clock_now_ms();
			if (now >= deadline_ms)
				return -ETIMEDOUT;
			uint64_t left = deadline_ms - now;
			timeout = left > INT_MAX ? INT_MAX : (int)left;
		}
		struct pollfd pfd = { .fd = fd, .events = events };
		int n = poll(&pfd, 1, timeout);
		if (n > 0)
			return 0;	/* ready, or an error the next call reports */
		if (n == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

static int connect_one(const struct addrinfo *ai, uint64_t deadline_ms)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			ai->ai_protocol);
	int one = 1, rc;

	if (fd < 0)
		return -errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		if (errno != EINPROGRESS) {
			rc = -errno;
			goto out_close;
		}
		rc = wait_fd(fd, POLLOUT, deadline_ms);
		if (rc < 0)
			goto out_close;
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			soerr = errno;
		if (soerr) {
			rc = -soerr;
			goto out_close;
		}
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* Blocking from here on; the *_all helpers still honour deadlines
	 * (MSG_DONTWAIT + poll). */
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		rc = -errno;
		goto out_close;
	}
	return fd;

out_close:
	close(fd);
	return rc;
}

int net_connect(const char *hostport, uint64_t timeout_ms, char *err, size_t errlen)
{
	struct addrinfo *res, *ai;
	uint64_t deadline = timeout_ms ? clock_now_ms() + timeout_ms : 0;
	char dummy[1];
	int rc;

	if (!err) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	rc = resolve(hostport, false, &res, err, errlen);
	if (rc < 0)
		return rc;
	rc = -EADDRNOTAVAIL;
	for (ai = res; ai; ai = ai->ai_next) {
		rc = connect_one(ai, deadline);
		if (rc >= 0 || rc == -ETIMEDOUT)
			break;
	}
	freeaddrinfo(res);
	if (rc < 0)
		snprintf(err, errlen, "%s: %s", hostport,
			 rc == -ETIMEDOUT ? "connection timed out" : strerror(-rc));
	return rc;
}

int net_connect_start(const char *hostport, char *err, size_t errlen)
{
	struct addrinfo *res, *ai;
	char dummy[1];
	int one = 1, rc;

	if (!err) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	rc = resolve(hostport, false, &res, err, errlen);
	if (rc < 0)
		return rc;
	rc = -EADDRNOTAVAIL;
	for (ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
				ai->ai_protocol);
		if (fd < 0) {
			rc = -errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
			rc = -errno;
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		rc = fd;
		break;
	}
	freeaddrinfo(res);
	if (rc < 0)
		snprintf(err, errlen, "%s: %s", hostport, strerror(-rc));
	return rc;
}

int net_send_all(int fd, const void *p, size_t n, uint64_t deadline_ms)
{
	struct iovec iov = { .iov_base = (void *)p, .iov_len = n };

	return net_sendv_all(fd, &iov, 1, deadline_ms);
}

/* Advances the caller's iovec array past sent bytes (it is modified). */
int net_sendv_all(int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ms)
{
	while (iovcnt > 0) {
		if (iov->iov_len == 0) {
			iov++;
			iovcnt--;
			continue;
		}
		struct msghdr msg = {
			.msg_iov = iov,
			.msg_iovlen = (size_t)(iovcnt > IOV_MAX ? IOV_MAX : iovcnt),
		};
		struct tls_conn *t = tls_fd_get(fd);
		ssize_t w = t ? tls_sendv(t, iov, iovcnt) :
				sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			int err = t ? (int)-w : errno;
			if (err == EINTR)
				continue;
			if (err == EAGAIN || err == EWOULDBLOCK) {
				int rc = wait_fd(fd, t && !tls_conn_want_write(t) ? POLLIN : POLLOUT,
						 deadline_ms);
				if (rc < 0)
					return rc;
				continue;
			}
			return err == EPIPE ? -ECONNRESET : -err;
		}
		size_t left = (size_t)w;
		while (iovcnt > 0 && left >= iov->iov_len) {
			left -= iov->iov_len;
			iov++;
			iovcnt--;
		}
		if (left) {
			iov->iov_base = (uint8_t *)iov->iov_base + left;
			iov->iov_len -= left;
		}
	}
	return 0;
}

int net_recv_all(int fd, void *p, size_t n, uint64_t deadline_ms)
{
	uint8_t *b = p;

	while (n > 0) {
		struct tls_conn *t = tls_fd_get(fd);
		ssize_t r = t ? tls_recv(t, b, n) : recv(fd, b, n, MSG_DONTWAIT);
		if (r > 0) {
			b += r;
			n -= (size_t)r;
			continue;
		}
		if (r == 0)
			return -ECONNRESET;
		int err = t ? (int)-r : errno;
		if (err == EINTR)
			continue;
		if (err == EAGAIN || err == EWOULDBLOCK) {
			int rc = wait_fd(fd, t && tls_conn_want_write(t) ? POLLOUT : POLLIN,
					 deadline_ms);
			if (rc < 0)
				return rc;
			continue;
		}
		return -err;
	}
	return 0;
}

int net_host_id(char *out, size_t len)
{
	char buf[64];
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	ssize_t r = read(fd, buf, sizeof(buf) - 1);
	int err = errno;
	close(fd);
	if (r < 0)
		return -err;
	while (r > 0 && (buf[r - 1] == '\n' || buf[r - 1] == ' '))
		r--;
	if (r == 0)
		return -ENODATA;
	if ((size_t)r >= len)
		return -ENOSPC;
	memcpy(out, buf, (size_t)r);
	out[r] = '\0';
	return 0;
}

static bool host_is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (strcasecmp(host, "localhost") == 0)
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1) {
		if (IN6_IS_ADDR_LOOPBACK(&a6))
			return true;
		/* ::ffff:127.x.y.z */
		return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
	}
	return false;
}

bool net_is_loopback(const char *hostport)
{
	char host[256], port[8];

	if (!hostport)
		return false;
	/* A bare host ("127.0.0.1", "::1") is accepted too. */
	if (host_is_loopback(hostport))
		return true;
	if (parse_hostport(hostport, host, sizeof(host), port, sizeof(port)) < 0)
		return false;
	return host[0] && host_is_loopback(host);
}

enum net_cc net_cc_parse(const char *s)
{
	if (s && !strcmp(s, "system"))
		return NET_CC_SYSTEM;
	if (s && !strcmp(s, "reno"))
		return NET_CC_RENO;
	if (s && !strcmp(s, "cubic"))
		return NET_CC_CUBIC;
	return NET_CC_AUTO;
}

int net_tune_cc(int fd, enum net_cc cc)
{
	char cur[16] = "";
	socklen_t l = sizeof(cur) - 1;
	const char *want;

	/* BBR paces: it spreads what a socket sends over its bandwidth
	 * estimate. The pool's traffic is request and reply bursts, and
	 * between them the estimate is whatever the last burst measured
	 * (on loopback or a veth pair a vCPU's copy rate, not a link's): a
	 * batch's replies (64 x 4 KiB READs, 256 KiB in one sendmsg) left at
	 * that rate while both ends waited. Reno (always allowed) sends at
	 * once: on a 2-vCPU VM 64 x 4 KiB batch gets on loopback went from
	 * 0.19-0.48 to 0.41-0.76 M/s, 16 x 1 MiB from 1.7-3.2 to 2.8-3.8
	 * GB/s, and 16 x 1 MiB across a veth pair from 1.8 to 2.1-4.8 GB/s
	 * (docs/performance.md). Algorithms that do not pace are left alone. */
	if (cc == NET_CC_SYSTEM || getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cur, &l) < 0)
		return 0;
	if (cc == NET_CC_AUTO)
		want = strncmp(cur, "bbr", 3) ? NULL : "reno";
	else
		want = cc == NET_CC_CUBIC ? "cubic" : "reno";
	if (!want || !strcmp(cur, want))
		return 0;
	if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, want, (socklen_t)strlen(want)) < 0)
		return -errno;
	return 0;
}

int net_random(void *p, size_t n)
{
	uint8_t *b = p;

	while (n > 0) {
		ssize_t r = getrandom(b, n, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Spinning before sleeping. Where an idle CPU halts (a VM's vCPU exits to
 * its host on HLT), the wake-up that ends a sleep in poll() costs tens of
 * µs, more than a master round trip's work: a reply that arrives while the
 * caller still looks for it needs none. sched_yield() between looks gives
 * the CPU to any thread that has work, so the spin only keeps an otherwise
 * idle CPU awake. */
#define SPIN_BUSY_NS 5000

bool net_spin(bool (*ready)(void *arg), void *arg, int spin_us)
{
	uint64_t now, end, t;

	if (spin_us <= 0)
		return false;
	now = clock_now_ns();
	end = now + (uint64_t)spin_us * 1000;
	do {
		sched_yield();
		t = clock_now_ns();
		/* a yield that let another thread run: this CPU has work, the
		 * spin keeps nothing awake and only takes turns from it */
		if (t - now > SPIN_BUSY_NS)
			return ready(arg);
		if (ready(arg))
			return true;
		now = clock_now_ns();
	} while (now < end);
	return false;
}

struct poll_args {
	struct pollfd *pfd;
	nfds_t n;
	int rc;
};

static bool poll_ready(void *arg)
{
	struct poll_args *a = arg;

	a->rc = poll(a->pfd, a->n, 0);
	return a->rc != 0;
}

int net_poll(struct pollfd *pfd, nfds_t n, int timeout_ms, int spin_us)
{
	struct poll_args a = { .pfd = pfd, .n = n };

	if (timeout_ms != 0 && spin_us > 0 && (poll_ready(&a) || net_spin(poll_ready, &a, spin_us)))
		return a.rc;
	return poll(pfd, n, timeout_ms);
}

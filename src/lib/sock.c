/* sock: libkvpool's sockets to the daemons (see sock.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client_i.h"
#include "clock.h"
#include "kvpool.h"
#include "log.h"
#include "net.h"
#include "sock.h"
#include "tls.h"

uint64_t sock_deadline(const struct kvp *kvp)
{
	return clock_now_ms() + kvp->timeout_ms;
}

/* net.c's full-length I/O (MSG_NOSIGNAL, poll with a deadline) with its
 * errors mapped to the client's codes. */
static int net_err(int rc)
{
	return rc == 0 ? 0 : rc == -ETIMEDOUT ? KVP_ETIMEDOUT : KVP_ECONN;
}

int sock_sendv(int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ms)
{
	return net_err(net_sendv_all(fd, iov, iovcnt, deadline_ms ? deadline_ms : 1));
}

int sock_recv(int fd, void *p, size_t n, uint64_t deadline_ms)
{
	return net_err(net_recv_all(fd, p, n, deadline_ms ? deadline_ms : 1));
}

bool sock_alive(int fd)
{
	char c;
	ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

	/* Idle connections have nothing to read: data or EOF both mean the
	 * peer is gone or out of step. */
	return k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

void sock_close(int fd)
{
	tls_fd_close(fd);
}

ssize_t sock_read(int fd, void *p, size_t n)
{
	struct tls_conn *t = tls_fd_get(fd);
	ssize_t k;

	if (!t)
		return recv(fd, p, n, MSG_DONTWAIT);
	k = tls_recv(t, p, n);
	if (k < 0) {
		errno = (int)-k;
		return -1;
	}
	return k;
}

ssize_t sock_writev(int fd, const struct iovec *iov, int iovcnt)
{
	struct tls_conn *t = tls_fd_get(fd);
	ssize_t k;

	if (!t) {
		struct msghdr msg = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };

		return sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	k = tls_sendv(t, iov, iovcnt);
	if (k < 0) {
		errno = (int)-k;
		return -1;
	}
	return k;
}

bool sock_pending(int fd)
{
	struct tls_conn *t = tls_fd_get(fd);

	return t && tls_conn_pending(t);
}

int sock_recv_frame(int fd, uint32_t max_body, uint64_t deadline, struct wire_hdr *h,
		    uint8_t **body)
{
	uint8_t hb[WIRE_HDR_SIZE];
	int rc = sock_recv(fd, hb, sizeof(hb), deadline);

	*body = NULL;
	if (rc < 0)
		return rc;
	rc = wire_hdr_decode(hb, h, max_body, 0);
	if (rc < 0)
		return rc;
	if (!(h->flags & WIRE_F_REPLY))
		return KVP_EPROTO;
	*body = malloc((size_t)h->body_len + 1);
	if (!*body)
		return KVP_ENOMEM;
	rc = sock_recv(fd, *body, h->body_len, deadline);
	if (rc < 0) {
		free(*body);
		*body = NULL;
		return rc;
	}
	return 0;
}

int sock_connect(struct kvp *kvp, const char *hostport, uint64_t *epoch, uint64_t deadline)
{
	uint64_t now = clock_now_ms();
	char err[256];
	struct wbuf b;
	struct wire_hdr h;
	uint8_t *body;
	int fd, rc, fl;

	if (now >= deadline)
		return KVP_ETIMEDOUT;
	fd = net_connect(hostport, deadline - now, err, sizeof(err));
	if (fd < 0) {
		log_debug("connect %s: %s", hostport, err);
		return fd == -ETIMEDOUT ? KVP_ETIMEDOUT : KVP_ECONN;
	}
	rc = net_tune_cc(fd, kvp->cc);
	if (rc < 0 && !atomic_exchange(&kvp->cc_warned, true))
		log_warn("[cluster] tcp_congestion = %s: cannot set it on a connection (%s); "
			 "connections keep the system's algorithm", kvp->conf.cluster.tcp_congestion,
			 strerror(-rc));
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		close(fd);
		return KVP_ECONN;
	}
	if (kvp->tls) {
		rc = tls_connect_fd(kvp->tls, fd, deadline, err, sizeof(err));
		if (rc < 0) {
			/* the server's certificate or ours was refused, or the
			 * server speaks plain TCP: worth saying each time */
			log_err("%s: %s%s", hostport, err, rc == -EPROTO ?
				" (does the server have [tls] enabled, and a certificate of [tls] ca?)" :
				"");
			close(fd);
			return rc == -ETIMEDOUT ? KVP_ETIMEDOUT : rc == -EPROTO ? KVP_EAUTH : KVP_ECONN;
		}
	}
	wb_init(&b);
	size_t start = wire_begin(&b);

	wb_u16(&b, WIRE_ROLE_CLIENT);
	wb_cstr(&b, kvp->conf.cluster.token);
	wb_cstr(&b, kvp->name);
	wb_cstr(&b, kvp->host_id);
	wire_finish(&b, start, WIRE_OP_HELLO, 0, 0, 0, 0);
	if (b.oom) {
		wb_free(&b);
		sock_close(fd);
		return KVP_ENOMEM;
	}
	struct iovec iov = { b.p, b.len };

	rc = sock_sendv(fd, &iov, 1, deadline);
	wb_free(&b);
	if (rc == 0)
		rc = sock_recv_frame(fd, 4096, deadline, &h, &body);
	if (rc == 0) {
		struct rbuf r;

		if (h.opcode != WIRE_OP_HELLO)
			rc = KVP_EPROTO;
		else if (h.status)
			rc = h.status;
		if (rc == KVP_EAUTH && !kvp->tls && memmem(body, h.body_len, "TLS required", 12))
			log_err("%s: TLS required: the cluster has [tls] enabled; set it (and ca) in "
				"this client's configuration", hostport);
		rb_init(&r, body, h.body_len);
		uint64_t e = rb_u64(&r);

		(void)rb_u16(&r);
		if (!rc && !rb_ok(&r))
			rc = KVP_EPROTO;
		if (!rc && epoch)
			*epoch = e;
		free(body);
	}
	if (rc < 0) {
		log_debug("hello %s: %s", hostport, kvp_strerror(rc));
		sock_close(fd);
		return rc;
	}
	return fd;
}

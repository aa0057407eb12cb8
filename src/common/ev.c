/* ev: epoll loop, timers and framed connections; see ev.h for the contract.
 * Owns: the epoll fd, the wake eventfd, the timer heap (ev_timer.c) and every ev_conn.
 * Thread: everything runs on the ev_run() thread; only ev_stop()/ev_wake()
 * come from elsewhere (an atomic flag + an eventfd write). No locks.
 *
 * Level-triggered epoll: a connection may stop early (read budget, pause,
 * backpressure, a handler that holds a frame) and simply get the event again
 * later, without the edge-triggered "drain until EAGAIN" obligation. The
 * price is one epoll_ctl per interest change (EPOLLIN on pause/resume,
 * EPOLLOUT only while a write hit EAGAIN), which is cheap and rare.
 *
 * Nothing is freed while a callback or an epoll batch may still point at it:
 * closed connections and deleted fds go on dead lists emptied at the end of
 * each iteration. Replies are queued and written once per iteration (pending
 * list), so pipelined replies coalesce into one writev.
 */
#include "ev.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"
#include "log.h"
#include "net.h"
#include "tls.h"
#include "ev_timer.h"

#define EV_BATCH 64			/* epoll events per epoll_wait */
#define EV_IOV 128			/* iovecs per sendmsg (a zero-copy reply takes 2) */
#define EV_RBUF_MIN (16u * 1024)	/* read buffer at first; also bounds payload bytes copied */
#define EV_RBUF_KEEP (256u * 1024)	/* shrink the read buffer back above this */
#define EV_CHUNK_MIN (16u * 1024)	/* copied chunks coalesce small sends */
#define EV_READ_BUDGET (4u << 20)	/* bytes read per readiness event (fairness) */
#define EV_WRITE_BUDGET (4u << 20)	/* bytes written per flush (fairness) */
#define EV_LINGER_MS 1000		/* drain input this long after a graceful close */
#define EV_SWEEP_MS 250			/* idle/linger sweep period (upper bound) */

#define EV_DEF_MAX_BODY (16u << 20)
#define EV_DEF_MAX_PAYLOAD (1ull << 30)
#define EV_DEF_MAX_OUTBUF (64ull << 20)

enum io_kind { IO_RAW, IO_CONN, IO_WAKE };

/* What epoll_event.data.ptr points at. */
struct ev_io {
	enum io_kind kind;
	int fd;
	bool dead;			/* unregistered; freed at the end of the iteration */
	ev_fd_cb cb;			/* IO_RAW */
	void *arg;
	struct ev_io *dead_next;
};


struct ev_loop {
	int epfd;
	int wakefd;
	atomic_int stop;
	uint64_t now;
	bool running;
	struct ev_io wake_io;
	ev_timer_cb wake_cb;
	void *wake_arg;

	struct ev_io **fds;		/* raw fds by number */
	size_t nfds;
	struct ev_io *dead_ios;

	struct ev_timers tm;		/* ev_timer.h */

	struct ev_conn *conns;		/* every conn until freed (dead ones too) */
	size_t nlive;			/* not yet closed (on_close not called) */
	struct ev_conn *pending;	/* conns with work to do before epoll_wait */
	struct ev_conn *dead_conns;
	uint64_t sweep_id, sweep_ms;
	int spin_us;			/* busy polling before epoll sleeps (net.h) */
	enum net_cc cc;			/* congestion control of its connections */
	bool cc_warned;			/* ... which could not be set: said once */
	struct epoll_event *spin_evs;	/* where a spin's look puts what it found */
	int spin_n;
	size_t tls_more;		/* conns whose TLS state holds decrypted bytes */
};

/* A copied chunk holds its bytes in buf (p == buf). A referenced one
 * carries its frame header inline (hlen bytes in buf, sent first) and then
 * points at the caller's payload: one allocation per zero-copy reply. */
struct ev_chunk {
	struct ev_chunk *next;
	const uint8_t *p;		/* copied: buf; referenced: the caller's bytes */
	size_t len, off, cap;		/* len includes hlen; off = bytes already sent */
	size_t hlen;			/* referenced: inline header bytes in buf */
	void (*release)(void *);	/* referenced chunks only */
	void *arg;
	bool ref;
	uint8_t buf[];
};

enum rstate { RS_FRAME, RS_PAYLOAD };

struct ev_conn {
	struct ev_io io;		/* first: epoll data.ptr */
	struct ev_loop *loop;
	const struct ev_conn_ops *ops;
	struct ev_conn_limits lim;
	void *udata;
	char peer[64];
	struct ev_conn *prev, *next;	/* loop->conns */
	struct ev_conn *pend_next;
	struct ev_conn *dead_next;
	uint32_t mask;			/* epoll interest currently registered */

	bool closed;			/* on_close called; user-visible end */
	bool lingering;			/* closed, fd still open: draining input */
	bool close_after_send;
	bool user_paused, bp_paused;
	bool want_out;			/* a write hit EAGAIN: EPOLLOUT armed */
	bool on_pending, want_flush, want_input;
	bool in_frame;			/* on_frame runs for hdr */
	bool payload_set;		/* ... and it called recv/discard_payload */

	/* input: unparsed bytes are rbuf[rpos, rlen) */
	uint8_t *rbuf;
	size_t rcap, rpos, rlen;
	size_t rmin;			/* bytes a buffered recv asks for at least */
	size_t need;			/* bytes from rpos needed for the next step */
	enum rstate rstate;
	struct wire_hdr hdr;		/* the frame being handled */
	uint8_t *pdst;			/* payload destination, NULL = discard */
	uint64_t premain, pdone;
	void *parg;

	/* output */
	struct ev_chunk *qhead, *qtail;
	size_t qbytes;

	uint64_t last_active, linger_until;

	/* TLS (ev_conn_start_tls): NULL on a plain connection */
	struct tls_conn *tls;
	bool tls_sniff;			/* server: a plain first frame is refused */
	bool tls_more;			/* read again without an epoll event */
	uint64_t tls_deadline;		/* the handshake ends by then */
};

/* ---- timers (the heap: ev_timer.c) ---------------------------------- */

uint64_t ev_timer_add(struct ev_loop *loop, uint64_t ms, bool periodic,
		      ev_timer_cb cb, void *arg)
{
	if (!loop->running)
		loop->now = clock_now_ms();
	return evt_add(&loop->tm, loop->now, ms, periodic, cb, arg);
}

void ev_timer_del(struct ev_loop *loop, uint64_t id)
{
	evt_del(&loop->tm, id);
}

/* ---- loop ------------------------------------------------------------ */

struct ev_loop *ev_create(void)
{
	struct ev_loop *loop = calloc(1, sizeof(*loop));

	if (!loop)
		return NULL;
	loop->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (loop->epfd < 0)
		goto out_free;
	loop->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (loop->wakefd < 0)
		goto out_epoll;
	loop->wake_io.kind = IO_WAKE;
	loop->wake_io.fd = loop->wakefd;
	struct epoll_event ee = { .events = EPOLLIN, .data.ptr = &loop->wake_io };
	if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, loop->wakefd, &ee) < 0)
		goto out_wake;
	atomic_init(&loop->stop, 0);
	loop->now = clock_now_ms();
	return loop;

out_wake:
	close(loop->wakefd);
out_epoll:
	close(loop->epfd);
out_free:
	free(loop);
	return NULL;
}

static void conn_close(struct ev_conn *c);
static void conn_free(struct ev_conn *c);
static void conn_flush(struct ev_conn *c);
static void conn_parse(struct ev_conn *c);
static void conn_read(struct ev_conn *c);
static void conn_update_mask(struct ev_conn *c);
static void conn_teardown(struct ev_conn *c);

static void free_dead(struct ev_loop *loop)
{
	while (loop->dead_ios) {
		struct ev_io *io = loop->dead_ios;
		loop->dead_ios = io->dead_next;
		free(io);
	}
	while (loop->dead_conns) {
		struct ev_conn *c = loop->dead_conns;
		loop->dead_conns = c->dead_next;
		conn_free(c);
	}
}

void ev_destroy(struct ev_loop *loop)
{
	if (!loop)
		return;
	for (struct ev_conn *c = loop->conns; c; c = c->next)
		conn_close(c);
	for (struct ev_conn *c = loop->conns; c; c = c->next)
		if (!c->io.dead)
			conn_teardown(c);	/* lingering ones */
	loop->pending = NULL;
	free_dead(loop);
	for (size_t i = 0; i < loop->nfds; i++)
		free(loop->fds[i]);
	free(loop->fds);
	evt_free(&loop->tm);
	close(loop->wakefd);
	close(loop->epfd);
	free(loop);
}

uint64_t ev_now(struct ev_loop *loop)
{
	return loop->now;
}

/* eventfd writes are async-signal-safe; errno is preserved for handlers. */
static void wake_fd(struct ev_loop *loop)
{
	int saved = errno;
	uint64_t one = 1;
	ssize_t w = write(loop->wakefd, &one, sizeof(one));

	(void)w;	/* EAGAIN: the counter is already non-zero, a wake is pending */
	errno = saved;
}

void ev_stop(struct ev_loop *loop)
{
	atomic_store(&loop->stop, 1);
	wake_fd(loop);
}

void ev_wake(struct ev_loop *loop)
{
	wake_fd(loop);
}

void ev_on_wake(struct ev_loop *loop, ev_timer_cb cb, void *arg)
{
	loop->wake_cb = cb;
	loop->wake_arg = arg;
}

static void run_pending(struct ev_loop *loop)
{
	while (loop->pending) {
		struct ev_conn *c = loop->pending;
		loop->pending = c->pend_next;
		c->on_pending = false;
		if (c->closed)
			continue;
		if (c->want_flush) {
			c->want_flush = false;
			conn_flush(c);
		}
		if (!c->closed && c->want_input) {
			c->want_input = false;
			conn_parse(c);
		}
		if (!c->closed)
			conn_update_mask(c);
	}
}

static void dispatch(struct ev_loop *loop, struct ev_io *io, uint32_t events)
{
	if (io->dead)
		return;
	switch (io->kind) {
	case IO_RAW:
		io->cb(loop, io->fd, events, io->arg);
		break;
	case IO_WAKE: {
		uint64_t v;
		ssize_t r = read(loop->wakefd, &v, sizeof(v));
		(void)r;
		if (loop->wake_cb && !atomic_load(&loop->stop))
			loop->wake_cb(loop, loop->wake_arg);
		break;
	}
	case IO_CONN: {
		struct ev_conn *c = (struct ev_conn *)io;
		if (events & EPOLLOUT)
			conn_flush(c);
		if (io->dead)
			break;
		if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
			if (c->mask & EPOLLIN)
				conn_read(c);
			else if (events & (EPOLLERR | EPOLLHUP))
				conn_close(c);	/* broken while not reading: nothing to save */
		}
		if (!c->closed)
			conn_update_mask(c);
		else if (c->lingering && (events & (EPOLLERR | EPOLLHUP)) && !io->dead)
			conn_teardown(c);
		break;
	}
	}
}

void ev_set_busy_poll(struct ev_loop *loop, int spin_us)
{
	loop->spin_us = spin_us > 0 ? spin_us : 0;
}

void ev_set_congestion(struct ev_loop *loop, enum net_cc cc)
{
	loop->cc = cc;
}

/* Connections whose last read left decrypted bytes inside TLS (a read
 * budget or a full buffer stopped it): epoll will not report them. */
static void tls_read_more(struct ev_loop *loop)
{
	loop->tls_more = 0;
	for (struct ev_conn *c = loop->conns; c; c = c->next) {
		if (!c->tls_more)
			continue;
		c->tls_more = false;
		if (c->io.dead || c->closed || !(c->mask & EPOLLIN))
			continue;
		conn_read(c);
		if (!c->closed)
			conn_update_mask(c);
	}
}

static bool spin_look(void *arg)
{
	struct ev_loop *loop = arg;

	loop->spin_n = epoll_wait(loop->epfd, loop->spin_evs, EV_BATCH, 0);
	return loop->spin_n != 0;
}

/* epoll_wait; with busy polling, events that come within spin_us of the
 * last ones are taken without sleeping. */
static int ev_wait(struct ev_loop *loop, struct epoll_event *evs)
{
	int timeout = loop->tls_more ? 0 : evt_timeout(&loop->tm, clock_now_ms());

	if (loop->spin_us && timeout != 0) {
		loop->spin_evs = evs;
		if (spin_look(loop) || net_spin(spin_look, loop, loop->spin_us))
			return loop->spin_n;
	}
	return epoll_wait(loop->epfd, evs, EV_BATCH, timeout);
}

int ev_run(struct ev_loop *loop)
{
	struct epoll_event evs[EV_BATCH];
	int rc = 0;

	loop->running = true;
	loop->now = clock_now_ms();
	while (!atomic_load(&loop->stop)) {
		run_pending(loop);
		free_dead(loop);
		int n = ev_wait(loop, evs);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			log_err("ev: epoll_wait: %s", strerror(errno));
			break;
		}
		loop->now = clock_now_ms();
		for (int i = 0; i < n && !atomic_load(&loop->stop); i++)
			dispatch(loop, evs[i].data.ptr, evs[i].events);
		if (loop->tls_more)
			tls_read_more(loop);
		evt_run(&loop->tm, loop, loop->now, &loop->stop);
	}
	/* Replies queued by the last callbacks still go out before returning. */
	run_pending(loop);
	free_dead(loop);
	loop->running = false;
	atomic_store(&loop->stop, 0);
	return rc;
}

/* ---- raw fds --------------------------------------------------------- */

int ev_add_fd(struct ev_loop *loop, int fd, uint32_t events, ev_fd_cb cb, void *arg)
{
	if (fd < 0 || !cb)
		return -EINVAL;
	if ((size_t)fd >= loop->nfds) {
		size_t n = loop->nfds ? loop->nfds : 64;
		while (n <= (size_t)fd)
			n *= 2;
		struct ev_io **fds = realloc(loop->fds, n * sizeof(*fds));
		if (!fds)
			return -ENOMEM;
		memset(fds + loop->nfds, 0, (n - loop->nfds) * sizeof(*fds));
		loop->fds = fds;
		loop->nfds = n;
	}
	if (loop->fds[fd])
		return -EEXIST;
	struct ev_io *io = calloc(1, sizeof(*io));
	if (!io)
		return -ENOMEM;
	io->kind = IO_RAW;
	io->fd = fd;
	io->cb = cb;
	io->arg = arg;
	struct epoll_event ee = { .events = events, .data.ptr = io };
	if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ee) < 0) {
		int err = -errno;
		free(io);
		return err;
	}
	loop->fds[fd] = io;
	return 0;
}

int ev_mod_fd(struct ev_loop *loop, int fd, uint32_t events)
{
	if (fd < 0 || (size_t)fd >= loop->nfds || !loop->fds[fd])
		return -ENOENT;
	struct epoll_event ee = { .events = events, .data.ptr = loop->fds[fd] };
	return epoll_ctl(loop->epfd, EPOLL_CTL_MOD, fd, &ee) < 0 ? -errno : 0;
}

int ev_del_fd(struct ev_loop *loop, int fd)
{
	if (fd < 0 || (size_t)fd >= loop->nfds || !loop->fds[fd])
		return -ENOENT;
	struct ev_io *io = loop->fds[fd];
	loop->fds[fd] = NULL;
	/* Fails harmlessly if the caller closed the fd first. */
	epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
	io->dead = true;
	io->dead_next = loop->dead_ios;
	loop->dead_ios = io;
	return 0;
}

/* ---- connections ----------------------------------------------------- */

static void sweep(struct ev_loop *loop, void *arg)
{
	(void)arg;
	for (struct ev_conn *c = loop->conns; c; c = c->next) {
		if (c->io.dead)
			continue;
		if (c->closed) {
			if (c->lingering && loop->now >= c->linger_until)
				conn_teardown(c);
			continue;
		}
		if (c->tls && !tls_conn_done(c->tls) && loop->now >= c->tls_deadline) {
			log_warn("ev: %s: no TLS handshake within %d ms, closing", c->peer,
				 TLS_HANDSHAKE_MS);
			conn_close(c);
			continue;
		}
		if (c->lim.idle_ms && loop->now - c->last_active >= c->lim.idle_ms) {
			log_info("ev: %s: idle for %llu ms, closing", c->peer,
				 (unsigned long long)(loop->now - c->last_active));
			conn_close(c);
		}
	}
}

/* One periodic sweep serves every connection's idle timeout and linger end;
 * its period follows the shortest idle timeout seen. */
static void sweep_arm(struct ev_loop *loop, uint64_t idle_ms)
{
	uint64_t p = EV_SWEEP_MS;

	if (idle_ms) {
		p = idle_ms / 4;
		p = p < 10 ? 10 : p > EV_SWEEP_MS ? EV_SWEEP_MS : p;
	}
	if (loop->sweep_id && p >= loop->sweep_ms)
		return;
	ev_timer_del(loop, loop->sweep_id);
	loop->sweep_id = ev_timer_add(loop, p, true, sweep, NULL);
	loop->sweep_ms = p;
}

static void peer_name(int fd, char *out, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char ip[INET6_ADDRSTRLEN];

	snprintf(out, len, "?");
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0)
		return;
	if (ss.ss_family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
		snprintf(out, len, "%s:%u", ip, ntohs(a->sin_port));
	} else if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
		snprintf(out, len, "[%s]:%u", ip, ntohs(a->sin6_port));
	} else if (ss.ss_family == AF_UNIX) {
		snprintf(out, len, "unix");
	}
}

struct ev_conn *ev_conn_create(struct ev_loop *loop, int fd, const struct ev_conn_ops *ops,
			       const struct ev_conn_limits *lim, void *udata)
{
	struct ev_conn *c = calloc(1, sizeof(*c));
	int one = 1;

	if (!c)
		goto out_fd;
	c->rbuf = malloc(EV_RBUF_MIN);
	if (!c->rbuf)
		goto out_conn;
	c->rcap = EV_RBUF_MIN;
	c->rmin = EV_RBUF_MIN;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		goto out_rbuf;
	/* Replies are whole frames written at once; Nagle would only delay them.
	 * Fails (harmlessly) on socketpairs. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	int ccr = net_tune_cc(fd, loop->cc);
	if (ccr < 0 && !loop->cc_warned) {
		loop->cc_warned = true;
		log_warn("[cluster] tcp_congestion: cannot set it on a connection (%s); "
			 "connections keep the system's algorithm", strerror(-ccr));
	}

	c->io.kind = IO_CONN;
	c->io.fd = fd;
	c->loop = loop;
	c->ops = ops;
	c->udata = udata;
	if (lim)
		c->lim = *lim;
	if (!c->lim.max_body)
		c->lim.max_body = EV_DEF_MAX_BODY;
	if (!c->lim.max_payload)
		c->lim.max_payload = EV_DEF_MAX_PAYLOAD;
	if (!c->lim.max_outbuf)
		c->lim.max_outbuf = EV_DEF_MAX_OUTBUF;
	if (c->lim.max_body > UINT32_MAX - WIRE_HDR_SIZE)
		c->lim.max_body = UINT32_MAX - WIRE_HDR_SIZE;
	c->need = WIRE_HDR_SIZE;
	c->rstate = RS_FRAME;
	peer_name(fd, c->peer, sizeof(c->peer));
	if (!loop->running)
		loop->now = clock_now_ms();
	c->last_active = loop->now;
	c->mask = EPOLLIN;
	struct epoll_event ee = { .events = EPOLLIN, .data.ptr = &c->io };
	if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ee) < 0)
		goto out_rbuf;
	c->next = loop->conns;
	if (loop->conns)
		loop->conns->prev = c;
	loop->conns = c;
	loop->nlive++;
	sweep_arm(loop, c->lim.idle_ms);
	return c;

out_rbuf:
	free(c->rbuf);
out_conn:
	free(c);
out_fd:
	close(fd);
	return NULL;
}

void *ev_conn_udata(const struct ev_conn *c) { return c->udata; }
void ev_conn_set_udata(struct ev_conn *c, void *udata) { c->udata = udata; }
void ev_conn_set_idle(struct ev_conn *c, uint64_t idle_ms)
{
	c->lim.idle_ms = idle_ms;
	if (idle_ms)
		sweep_arm(c->loop, idle_ms);
}
void ev_conn_set_max_body(struct ev_conn *c, uint32_t max_body)
{
	/* Takes effect at the next header: the frame being read keeps its size. */
	c->lim.max_body = max_body ? max_body : EV_DEF_MAX_BODY;
	if (c->lim.max_body > UINT32_MAX - WIRE_HDR_SIZE)
		c->lim.max_body = UINT32_MAX - WIRE_HDR_SIZE;
}
struct ev_loop *ev_conn_loop(const struct ev_conn *c) { return c->loop; }
int ev_conn_fd(const struct ev_conn *c) { return c->io.dead ? -1 : c->io.fd; }
const char *ev_conn_peer(const struct ev_conn *c) { return c->peer; }
size_t ev_conn_count(struct ev_loop *loop) { return loop->nlive; }
size_t ev_conn_queued(const struct ev_conn *c) { return c->qbytes; }

static void conn_schedule(struct ev_conn *c)
{
	if (c->on_pending)
		return;
	c->on_pending = true;
	c->pend_next = c->loop->pending;
	c->loop->pending = c;
}

static bool conn_reading(const struct ev_conn *c)
{
	return !c->closed && !c->user_paused && !c->bp_paused && !c->close_after_send;
}

static void conn_update_mask(struct ev_conn *c)
{
	uint32_t want = 0;

	if (c->io.dead)
		return;
	if (c->lingering || conn_reading(c) || (c->tls && !c->closed && !tls_conn_done(c->tls)))
		want |= EPOLLIN;	/* a handshake reads even while frames may not */
	if (c->want_out && !c->lingering)
		want |= EPOLLOUT;
	if (want == c->mask)
		return;
	struct epoll_event ee = { .events = want, .data.ptr = &c->io };
	if (epoll_ctl(c->loop->epfd, EPOLL_CTL_MOD, c->io.fd, &ee) == 0)
		c->mask = want;
	else
		log_err("ev: %s: epoll_ctl: %s", c->peer, strerror(errno));
}

/* Removes the fd; the struct is freed at the end of the iteration. */
static void conn_teardown(struct ev_conn *c)
{
	if (c->io.dead)
		return;
	epoll_ctl(c->loop->epfd, EPOLL_CTL_DEL, c->io.fd, NULL);
	tls_conn_free(c->tls);
	c->tls = NULL;
	close(c->io.fd);
	c->io.dead = true;
	c->lingering = false;
	c->dead_next = c->loop->dead_conns;
	c->loop->dead_conns = c;
}

static void conn_free(struct ev_conn *c)
{
	struct ev_loop *loop = c->loop;

	if (c->prev)
		c->prev->next = c->next;
	else
		loop->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	free(c->rbuf);
	free(c);
}

static void chunk_release(struct ev_chunk *k)
{
	if (k->ref && k->release)
		k->release(k->arg);
	free(k);
}

/* The user-visible end: aborts a payload in progress, releases referenced
 * chunks, calls on_close. Runs at most once. */
static void conn_finish(struct ev_conn *c)
{
	c->closed = true;
	c->loop->nlive--;
	if (c->rstate == RS_PAYLOAD) {
		c->rstate = RS_FRAME;
		if (c->pdst && c->ops->on_payload)
			c->ops->on_payload(c, false, c->parg);
	}
	while (c->qhead) {
		struct ev_chunk *k = c->qhead;
		c->qhead = k->next;
		c->qbytes -= k->len - k->off;
		chunk_release(k);
	}
	c->qtail = NULL;
	if (c->ops->on_close)
		c->ops->on_close(c);
}

static void conn_close(struct ev_conn *c)
{
	if (c->closed)
		return;
	conn_finish(c);
	conn_teardown(c);
}

void ev_conn_close(struct ev_conn *c)
{
	conn_close(c);
}

/* Graceful end: the queue is empty. Half-close, then read and drop whatever
 * the peer still sends until it closes (or EV_LINGER_MS): closing a socket
 * with unread input sends RST, which can destroy the reply (an error frame)
 * before the peer reads it. */
static void conn_linger(struct ev_conn *c)
{
	conn_finish(c);
	if (c->io.dead)
		return;
	tls_conn_shutdown(c->tls);	/* close_notify: the peer sees a clean end */
	if (shutdown(c->io.fd, SHUT_WR) < 0) {
		conn_teardown(c);
		return;
	}
	c->lingering = true;
	c->want_out = false;
	c->linger_until = c->loop->now + EV_LINGER_MS;
	conn_update_mask(c);
}

void ev_conn_close_after_send(struct ev_conn *c)
{
	if (c->closed || c->close_after_send)
		return;
	c->close_after_send = true;
	if (c->rstate == RS_PAYLOAD && !c->in_frame) {
		c->rstate = RS_FRAME;
		if (c->pdst && c->ops->on_payload)
			c->ops->on_payload(c, false, c->parg);
	}
	if (c->closed)
		return;
	c->want_flush = true;	/* the flush notices the empty queue and lingers */
	conn_schedule(c);
	conn_update_mask(c);
}

void ev_conn_pause(struct ev_conn *c, bool pause)
{
	if (c->closed || c->user_paused == pause)
		return;
	c->user_paused = pause;
	if (!pause) {
		/* Frames already buffered get no epoll event: parse them soon. */
		c->want_input = true;
		conn_schedule(c);
	}
	conn_update_mask(c);
}

static int queue_copy(struct ev_conn *c, const void *a, size_t an, const void *b, size_t bn)
{
	size_t n = an + bn;
	struct ev_chunk *k = c->qtail;

	if (n < an)
		return -ENOMEM;
	if (!k || k->ref || k->cap - k->len < n) {
		size_t cap = n < EV_CHUNK_MIN ? EV_CHUNK_MIN : n;
		if (cap > SIZE_MAX - sizeof(*k))
			return -ENOMEM;
		k = malloc(sizeof(*k) + cap);
		if (!k)
			return -ENOMEM;
		memset(k, 0, sizeof(*k));
		k->p = k->buf;
		k->cap = cap;
		if (c->qtail)
			c->qtail->next = k;
		else
			c->qhead = k;
		c->qtail = k;
	}
	if (an)
		memcpy(k->buf + k->len, a, an);
	if (bn)
		memcpy(k->buf + k->len + an, b, bn);
	k->len += n;
	c->qbytes += n;
	c->want_flush = true;
	conn_schedule(c);
	return 0;
}

int ev_conn_send(struct ev_conn *c, const void *p, size_t n)
{
	if (c->closed || c->close_after_send)
		return -EPIPE;
	if (!n)
		return 0;
	return queue_copy(c, p, n, NULL, 0);
}

int ev_conn_send_ref(struct ev_conn *c, const void *frame, size_t n,
		     const void *payload, size_t plen, void (*release)(void *), void *arg)
{
	if (c->closed || c->close_after_send)
		return -EPIPE;
	if (n > SIZE_MAX - sizeof(struct ev_chunk) || plen > SIZE_MAX - n)
		return -ENOMEM;
	struct ev_chunk *k = malloc(sizeof(*k) + n);
	if (!k)
		return -ENOMEM;
	memset(k, 0, sizeof(*k));
	if (n)
		memcpy(k->buf, frame, n);
	k->hlen = n;
	k->p = payload;
	k->len = n + plen;
	k->ref = true;
	k->release = release;
	k->arg = arg;
	if (c->qtail)
		c->qtail->next = k;
	else
		c->qhead = k;
	c->qtail = k;
	c->qbytes += n + plen;
	c->want_flush = true;
	conn_schedule(c);
	return 0;
}

int ev_conn_reply(struct ev_conn *c, const struct wire_hdr *req, int32_t status,
		  const void *body, size_t n)
{
	if (n > UINT32_MAX)
		return -EINVAL;
	struct wire_hdr h = {
		.magic = WIRE_MAGIC,
		.version = WIRE_VERSION,
		.flags = WIRE_F_REPLY,
		.opcode = req->opcode,
		.status = status,
		.body_len = (uint32_t)n,
		.reqid = req->reqid,
		.payload_len = 0,
	};
	uint8_t hb[WIRE_HDR_SIZE];

	if (c->closed || c->close_after_send)
		return -EPIPE;
	wire_hdr_encode(&h, hb);
	return queue_copy(c, hb, sizeof(hb), body, n);
}

void ev_conn_recv_payload(struct ev_conn *c, void *dst, uint64_t len, void *arg)
{
	if (!c->in_frame || c->payload_set || c->closed) {
		log_err("ev: %s: recv_payload outside on_frame or twice", c->peer);
		return;
	}
	if (len < c->hdr.payload_len || (!dst && c->hdr.payload_len)) {
		log_err("ev: %s: payload buffer of %llu bytes for a %llu-byte payload",
			c->peer, (unsigned long long)len,
			(unsigned long long)c->hdr.payload_len);
		conn_close(c);
		return;
	}
	c->payload_set = true;
	c->rstate = RS_PAYLOAD;
	/* A non-NULL marker even for 0 bytes, so on_payload is called. */
	c->pdst = dst ? dst : (uint8_t *)c->rbuf;
	c->premain = c->hdr.payload_len;
	c->pdone = 0;
	c->parg = arg;
}

void ev_conn_discard_payload(struct ev_conn *c)
{
	if (!c->in_frame || c->payload_set || c->closed)
		return;
	c->payload_set = true;
	c->rstate = RS_PAYLOAD;
	c->pdst = NULL;
	c->premain = c->hdr.payload_len;
	c->pdone = 0;
	c->parg = NULL;
}

static void payload_done(struct ev_conn *c)
{
	c->rstate = RS_FRAME;
	c->need = WIRE_HDR_SIZE;
	c->last_active = c->loop->now;
	if (c->pdst && c->ops->on_payload)
		c->ops->on_payload(c, true, c->parg);
}

/* A header we refuse: reply with the error, then close once it is sent.
 * The reply echoes the opcode and reqid when the header is a kvpool one;
 * otherwise it says HELLO (what a connection must start with), so that the
 * peer's own header decoder still accepts the reply and sees the status. */
static void conn_bad_header(struct ev_conn *c, int status, const struct wire_hdr *bad)
{
	bool framed = bad->magic == WIRE_MAGIC && bad->version == WIRE_VERSION;
	struct wire_hdr req = {
		.opcode = framed && wire_op_name(bad->opcode) ? bad->opcode : WIRE_OP_HELLO,
		.reqid = framed ? bad->reqid : 0,
	};

	log_info("ev: %s: bad frame header (%s: magic %#x version %u opcode %u flags %#x "
		 "status %d body %u payload %llu), closing", c->peer,
		 status == KVP_ETOOBIG ? "too big" : "malformed", bad->magic, bad->version,
		 bad->opcode, bad->flags, bad->status, bad->body_len,
		 (unsigned long long)bad->payload_len);
	c->rpos = c->rlen = 0;
	if (ev_conn_reply(c, &req, status, NULL, 0) < 0) {
		conn_close(c);
		return;
	}
	ev_conn_close_after_send(c);
}

/* Dispatches what the read buffer holds: frames, and payload bytes that
 * arrived with them. Never reads the socket. */
static void conn_parse(struct ev_conn *c)
{
	while (!c->closed && conn_reading(c)) {
		size_t avail = c->rlen - c->rpos;

		if (c->rstate == RS_PAYLOAD) {
			size_t take = avail < c->premain ? avail : (size_t)c->premain;
			if (take) {
				if (c->pdst)
					memcpy(c->pdst + c->pdone, c->rbuf + c->rpos, take);
				c->rpos += take;
				c->pdone += take;
				c->premain -= take;
			}
			if (c->premain)
				break;
			payload_done(c);
			continue;
		}
		if (avail < WIRE_HDR_SIZE) {
			c->need = WIRE_HDR_SIZE;
			break;
		}
		int rc = wire_hdr_decode(c->rbuf + c->rpos, &c->hdr, c->lim.max_body,
					 c->lim.max_payload);
		if (rc) {
			conn_bad_header(c, rc, &c->hdr);
			return;
		}
		c->need = WIRE_HDR_SIZE + (size_t)c->hdr.body_len;
		if (avail < c->need)
			break;
		/* Backpressure: replies pile up faster than the peer reads them. */
		if (c->qbytes > c->lim.max_outbuf) {
			c->bp_paused = true;
			break;
		}
		const uint8_t *body = c->rbuf + c->rpos + WIRE_HDR_SIZE;
		c->rpos += c->need;
		c->need = WIRE_HDR_SIZE;
		c->last_active = c->loop->now;
		c->payload_set = false;
		c->in_frame = true;
		rc = c->ops->on_frame(c, &c->hdr, body);
		c->in_frame = false;
		if (c->closed)
			return;
		if (rc < 0) {
			log_debug("ev: %s: handler refused %s frame (%d), closing", c->peer,
				  wire_op_name(c->hdr.opcode), rc);
			conn_close(c);
			return;
		}
		if (!c->payload_set && c->hdr.payload_len) {
			log_warn("ev: %s: %s handler ignored a %llu-byte payload; discarding",
				 c->peer, wire_op_name(c->hdr.opcode),
				 (unsigned long long)c->hdr.payload_len);
			c->rstate = RS_PAYLOAD;
			c->pdst = NULL;
			c->premain = c->hdr.payload_len;
			c->pdone = 0;
		}
		if (c->close_after_send && c->rstate == RS_PAYLOAD) {
			c->rstate = RS_FRAME;
			if (c->pdst && c->ops->on_payload)
				c->ops->on_payload(c, false, c->parg);
			return;
		}
	}
	if (c->rpos == c->rlen) {
		c->rpos = c->rlen = 0;
		if (c->rcap > EV_RBUF_KEEP) {
			uint8_t *p = realloc(c->rbuf, EV_RBUF_MIN);
			if (p) {
				c->rbuf = p;
				c->rcap = EV_RBUF_MIN;
				c->rmin = EV_RBUF_MIN;
			}
		}
	}
}

static void linger_read(struct ev_conn *c)
{
	for (int i = 0; i < 16; i++) {
		ssize_t n = recv(c->io.fd, c->rbuf, c->rcap, MSG_DONTWAIT);
		if (n > 0)
			continue;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		conn_teardown(c);	/* EOF or error: the peer is done */
		return;
	}
}

/* Makes room in the read buffer for the next recv: compacts, and grows it to
 * hold the current frame's header + body. 0 or -ENOMEM. */
static int rbuf_room(struct ev_conn *c)
{
	if (c->rpos) {
		memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
		c->rlen -= c->rpos;
		c->rpos = 0;
	}
	if (c->need > c->rcap) {
		uint8_t *p = realloc(c->rbuf, c->need);
		if (!p)
			return -ENOMEM;
		c->rbuf = p;
		c->rcap = c->need;
	}
	return 0;
}

/* A recv filled the buffer: a stream of small frames (a batch of 4 KiB
 * WRITEs, 64 pipelined requests) is coming. Reads grow to take more frames
 * per syscall (up to EV_RBUF_KEEP), unless what is left to parse is a large
 * payload, which is better received straight into its destination. */
static void rbuf_grow(struct ev_conn *c)
{
	if (c->rmin >= EV_RBUF_KEEP || (c->rstate == RS_PAYLOAD && c->premain >= c->rmin))
		return;
	size_t cap = 2 * c->rmin;
	if (c->rcap < cap) {
		uint8_t *p = realloc(c->rbuf, cap);
		if (!p)
			return;
		c->rbuf = p;
		c->rcap = cap;
	}
	c->rmin = cap;
}

/* ---- TLS ---------------------------------------------------------------- */

int ev_conn_start_tls(struct ev_conn *c, struct tls_ctx *ctx)
{
	if (c->closed || c->tls)
		return -EINVAL;
	c->tls = tls_conn_new(ctx, c->io.fd);
	if (!c->tls)
		return -ENOMEM;
	c->tls_sniff = tls_ctx_server(ctx);
	c->tls_deadline = c->loop->now + TLS_HANDSHAKE_MS;
	sweep_arm(c->loop, TLS_HANDSHAKE_MS);
	if (!c->tls_sniff) {
		/* a client speaks first: its ClientHello goes out now */
		c->want_flush = true;
		conn_schedule(c);
	}
	return 0;
}

/* A server's first bytes are not a TLS record: a plain-TCP peer. A kvpool
 * client gets its HELLO answered with KVP_EAUTH and "TLS required" in the
 * body (in plain TCP, so that it can read why), then the connection ends. */
static void tls_refuse_plain(struct ev_conn *c)
{
	uint8_t hb[WIRE_HDR_SIZE];
	struct wire_hdr h = { 0 }, req = { .opcode = WIRE_OP_HELLO };
	ssize_t n = recv(c->io.fd, hb, sizeof(hb), MSG_PEEK | MSG_DONTWAIT);
	struct wbuf b;

	log_warn("ev: %s: plain TCP connection refused: TLS required ([tls] enabled)", c->peer);
	tls_conn_free(c->tls);
	c->tls = NULL;
	if (n != (ssize_t)sizeof(hb) || wire_hdr_decode(hb, &h, c->lim.max_body, 0) < 0) {
		conn_close(c);	/* not a kvpool frame (yet): nothing to answer */
		return;
	}
	req.reqid = h.reqid;
	wb_init(&b);
	wb_u64(&b, 0);
	wb_u16(&b, 0);
	wb_cstr(&b, "TLS required");
	if (b.oom || ev_conn_reply(c, &req, KVP_EAUTH, b.p, b.len) < 0) {
		wb_free(&b);
		conn_close(c);
		return;
	}
	wb_free(&b);
	ev_conn_close_after_send(c);
}

/* Advances the handshake; true once it is done (the connection reads and
 * writes records from then on). */
static bool conn_handshake(struct ev_conn *c)
{
	if (tls_conn_done(c->tls))
		return true;
	if (c->tls_sniff) {
		uint8_t b;
		ssize_t n = recv(c->io.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return false;
		if (n <= 0) {
			conn_close(c);
			return false;
		}
		c->tls_sniff = false;
		if (b != TLS_RECORD_HANDSHAKE) {
			tls_refuse_plain(c);
			return false;
		}
	}
	int rc = tls_handshake(c->tls);
	if (rc == 0) {
		log_debug("ev: %s: TLS handshake done", c->peer);
		c->last_active = c->loop->now;
		c->want_out = false;
		if (c->qhead || c->close_after_send) {	/* what waited for it; or the linger */
			c->want_flush = true;
			conn_schedule(c);
		}
		return true;
	}
	if (rc == -EAGAIN) {
		c->want_out = tls_conn_want_write(c->tls);
		return false;
	}
	log_warn("ev: %s: %s, closing", c->peer, tls_conn_error(c->tls));
	conn_close(c);
	return false;
}

/* recv(MSG_DONTWAIT) through TLS when the connection has it. */
static ssize_t conn_recv(struct ev_conn *c, void *p, size_t n)
{
	if (!c->tls)
		return recv(c->io.fd, p, n, MSG_DONTWAIT);
	ssize_t k = tls_recv(c->tls, p, n);
	if (k < 0) {
		if (k != -EAGAIN)
			log_debug("ev: %s: %s", c->peer, tls_conn_error(c->tls));
		else if (tls_conn_want_write(c->tls))
			c->want_out = true;
		errno = (int)-k;
		return -1;
	}
	return k;
}

static ssize_t conn_sendv(struct ev_conn *c, struct iovec *iov, int n_iov)
{
	if (!c->tls) {
		struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)n_iov };

		return sendmsg(c->io.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	ssize_t k = tls_sendv(c->tls, iov, n_iov);
	if (k < 0) {
		errno = (int)-k;
		return -1;
	}
	return k;
}

static void conn_read(struct ev_conn *c)
{
	size_t budget = EV_READ_BUDGET;

	if (c->tls && !c->lingering && !conn_handshake(c))
		return;

	while (budget > 0 && !c->io.dead) {
		ssize_t n;

		if (c->lingering) {
			linger_read(c);
			return;
		}
		if (!conn_reading(c))
			break;
		if (c->rstate == RS_PAYLOAD && c->pdst && c->rpos == c->rlen) {
			/* Straight into the destination: no staging copy. */
			size_t want = c->premain < budget ? (size_t)c->premain : budget;
			n = conn_recv(c, c->pdst + c->pdone, want);
			if (n > 0) {
				c->pdone += (size_t)n;
				c->premain -= (size_t)n;
				budget -= (size_t)n;
				c->last_active = c->loop->now;
				conn_parse(c);	/* completes the payload when it is all here */
				continue;
			}
		} else {
			if (rbuf_room(c) < 0) {
				log_err("ev: %s: no memory for a %zu-byte frame", c->peer, c->need);
				conn_close(c);
				return;
			}
			/* Read what the current frame needs (at least rmin): a
			 * payload behind it is then mostly received in place. */
			size_t room = c->rcap - c->rlen;
			if (!room)
				break;	/* a whole frame waits to be dispatched */
			size_t want = c->need > c->rlen ? c->need - c->rlen : 0;
			if (c->rstate == RS_PAYLOAD && !c->pdst)
				want = c->premain < room ? (size_t)c->premain : room;
			if (want < c->rmin)
				want = c->rmin;
			if (want > room)
				want = room;
			n = conn_recv(c, c->rbuf + c->rlen, want);
			if (n > 0) {
				c->rlen += (size_t)n;
				budget -= (size_t)n < budget ? (size_t)n : budget;
				if (c->rstate == RS_PAYLOAD)
					c->last_active = c->loop->now;
				else if (c->ops->on_input)
					c->ops->on_input(c, c->rbuf + c->rpos, c->rlen - c->rpos);
				conn_parse(c);
				if ((size_t)n == want && want == room)
					rbuf_grow(c);
				continue;
			}
		}
		if (n == 0) {
			log_debug("ev: %s: peer closed", c->peer);
			conn_close(c);
			return;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			break;
		log_debug("ev: %s: recv: %s", c->peer, strerror(errno));
		conn_close(c);
		return;
	}
	if (c->tls && !c->io.dead && !c->closed && !c->tls_more && tls_conn_pending(c->tls)) {
		c->tls_more = true;
		c->loop->tls_more++;
	}
}

/* The unsent bytes of k as at most two iovecs (a referenced chunk's
 * inline header, then its payload). */
static int chunk_iov(const struct ev_chunk *k, struct iovec *iov)
{
	int n = 0;

	if (k->off < k->hlen) {
		iov[n].iov_base = (void *)(k->buf + k->off);
		iov[n++].iov_len = k->hlen - k->off;
	}
	if (k->len > k->hlen && k->off < k->len) {
		size_t at = k->off > k->hlen ? k->off - k->hlen : 0;

		iov[n].iov_base = (void *)(k->p + at);
		iov[n++].iov_len = k->len - k->hlen - at;
	}
	return n;
}

/* Pops chunks that are completely sent, releasing referenced ones. Returns
 * false if a release callback closed the connection. */
static bool pop_sent(struct ev_conn *c)
{
	while (c->qhead && c->qhead->off == c->qhead->len) {
		struct ev_chunk *k = c->qhead;
		c->qhead = k->next;
		if (!c->qhead)
			c->qtail = NULL;
		chunk_release(k);
		if (c->closed)
			return false;
	}
	return true;
}

static void conn_flush(struct ev_conn *c)
{
	struct iovec iov[EV_IOV];
	size_t budget = EV_WRITE_BUDGET;

	if (c->closed)
		return;
	if (c->tls && !conn_handshake(c)) {
		if (!c->closed)
			conn_update_mask(c);
		return;
	}
	for (;;) {
		if (!pop_sent(c))
			return;
		if (!c->qhead)
			break;
		if (!budget) {
			/* a fast reader of a big payload must not starve the others:
			 * level-triggered EPOLLOUT brings us back next iteration */
			c->want_out = true;
			break;
		}
		int n_iov = 0;
		for (struct ev_chunk *k = c->qhead; k && n_iov + 2 <= EV_IOV; k = k->next)
			n_iov += chunk_iov(k, iov + n_iov);
		ssize_t n = n_iov ? conn_sendv(c, iov, n_iov) : 0;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				c->want_out = true;
				break;
			}
			log_debug("ev: %s: send: %s", c->peer, strerror(errno));
			conn_close(c);
			return;
		}
		size_t left = (size_t)n;
		c->qbytes -= left;
		budget -= left < budget ? left : budget;
		if (left)
			c->last_active = c->loop->now;
		for (struct ev_chunk *k = c->qhead; k && left; k = k->next) {
			size_t t = k->len - k->off;
			t = t < left ? t : left;
			k->off += t;
			left -= t;
		}
	}
	if (!c->qhead) {
		c->want_out = false;
		if (c->close_after_send) {
			conn_linger(c);
			return;
		}
	}
	if (c->bp_paused && c->qbytes <= c->lim.max_outbuf / 2) {
		c->bp_paused = false;
		c->want_input = true;
		conn_schedule(c);
	}
	conn_update_mask(c);
}

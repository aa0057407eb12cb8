/* ev: a single-threaded epoll event loop with timers and framed
 * connections (wire.h), used by kvpool-master and kvpool-node. Everything
 * registered on a loop runs on the thread that calls ev_run(); other threads
 * may only call ev_stop() and ev_wake(). A connection reads frames (header +
 * body buffered, payload streamed into a destination the handler supplies or
 * discarded) and writes a queue of chunks, some copied, some referenced
 * (zero-copy send straight from segment memory).
 */
#ifndef KVP_EV_H
#define KVP_EV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "net.h"
#include "wire.h"

struct ev_loop;
struct ev_conn;
struct tls_ctx;

typedef void (*ev_fd_cb)(struct ev_loop *loop, int fd, uint32_t events, void *arg);
typedef void (*ev_timer_cb)(struct ev_loop *loop, void *arg);

struct ev_loop *ev_create(void);
void ev_destroy(struct ev_loop *loop);	/* closes remaining connections */
/* Busy polling ([cluster] busy_poll_us, net.h): before each sleep, the
 * loop looks for events without sleeping for up to spin_us (0: never). */
void ev_set_busy_poll(struct ev_loop *loop, int spin_us);
/* Congestion control of the connections the loop adopts from now on
 * ([cluster] tcp_congestion, net.h; default NET_CC_AUTO); a failure to set
 * it is logged once per loop. */
void ev_set_congestion(struct ev_loop *loop, enum net_cc cc);
/* Runs until ev_stop(); 0 or a negative errno. */
int ev_run(struct ev_loop *loop);
/* Async-signal-safe and thread-safe. */
void ev_stop(struct ev_loop *loop);
/* Monotonic time in ms, refreshed once per loop iteration. */
uint64_t ev_now(struct ev_loop *loop);
/* Wakes the loop from another thread or a signal handler; the callback runs
 * on the loop thread (set once with ev_on_wake). */
void ev_wake(struct ev_loop *loop);
void ev_on_wake(struct ev_loop *loop, ev_timer_cb cb, void *arg);

/* Raw fds (events: EPOLLIN/EPOLLOUT); the loop does not own the fd. */
int ev_add_fd(struct ev_loop *loop, int fd, uint32_t events, ev_fd_cb cb, void *arg);
int ev_mod_fd(struct ev_loop *loop, int fd, uint32_t events);
int ev_del_fd(struct ev_loop *loop, int fd);

/* Timers: fire after ms, then every ms if periodic. Returns an id > 0. */
uint64_t ev_timer_add(struct ev_loop *loop, uint64_t ms, bool periodic,
		      ev_timer_cb cb, void *arg);
void ev_timer_del(struct ev_loop *loop, uint64_t id);

struct ev_conn_ops {
	/* A frame arrived: header + complete body. If h->payload_len > 0 the
	 * handler must, before returning, call ev_conn_recv_payload() or
	 * ev_conn_discard_payload(). Return 0 to go on, < 0 to close. */
	int (*on_frame)(struct ev_conn *c, const struct wire_hdr *h, const uint8_t *body);
	/* The payload announced by the last frame has fully arrived (or the
	 * connection broke: ok = false). */
	void (*on_payload)(struct ev_conn *c, bool ok, void *arg);
	/* Called once when the connection closes, before it is freed. */
	void (*on_close)(struct ev_conn *c);
	/* Optional: bytes just read, from the start of the next frame to be
	 * dispatched (the stream as it came: payload bytes follow a header
	 * that announces them, the last frame may be partial), before
	 * on_frame sees them: a look ahead over pipelined frames (the master
	 * prefetches their keys). Read only; it must not call into ev. */
	void (*on_input)(struct ev_conn *c, const uint8_t *p, size_t n);
};

struct ev_conn_limits {
	uint32_t max_body;		/* default 16 MiB */
	uint64_t max_payload;		/* default 1 GiB */
	uint64_t max_outbuf;		/* stop reading while more is queued; default 64 MiB */
	uint64_t idle_ms;		/* close after this long without a frame; 0 = never */
};

/* Takes ownership of fd (made non-blocking here; closed on failure). lim may
 * be NULL; a 0 field takes its default. */
struct ev_conn *ev_conn_create(struct ev_loop *loop, int fd, const struct ev_conn_ops *ops,
			       const struct ev_conn_limits *lim, void *udata);
void *ev_conn_udata(const struct ev_conn *c);
void ev_conn_set_udata(struct ev_conn *c, void *udata);
/* Changes the idle timeout of one connection (0 = never), e.g. for a
 * connection whose traffic moved elsewhere (RDMA queue pairs). */
void ev_conn_set_idle(struct ev_conn *c, uint64_t idle_ms);
/* Changes the largest body the next frames may carry (0 = default), e.g.
 * small until a peer has authenticated, then the configured limit. */
void ev_conn_set_max_body(struct ev_conn *c, uint32_t max_body);
struct ev_loop *ev_conn_loop(const struct ev_conn *c);
int ev_conn_fd(const struct ev_conn *c);
/* "ip:port" of the peer. */
const char *ev_conn_peer(const struct ev_conn *c);

/* TLS on this connection from now on (call it right after
 * ev_conn_create): the handshake runs in the loop, without blocking it,
 * and must end within TLS_HANDSHAKE_MS; queued frames wait for it. A
 * server context refuses a peer whose first bytes are not TLS (a plain
 * kvpool HELLO is answered KVP_EAUTH "TLS required"). 0 or -ENOMEM. */
int ev_conn_start_tls(struct ev_conn *c, struct tls_ctx *ctx);

/* Queue bytes for sending (copied). 0 or -ENOMEM (-EPIPE once closed or
 * closing); sending errors close. */
int ev_conn_send(struct ev_conn *c, const void *p, size_t n);
/* Queue a frame's header+body (copied) and a payload that is referenced, not
 * copied: release(arg) is called once it has been sent or the connection
 * closed. On a non-zero return nothing was queued and release is not called
 * (the caller still owns the payload). */
int ev_conn_send_ref(struct ev_conn *c, const void *frame, size_t n,
		     const void *payload, size_t plen, void (*release)(void *), void *arg);
/* Receive the announced payload straight into dst (len = payload_len);
 * ops->on_payload(c, ok, arg) follows. */
void ev_conn_recv_payload(struct ev_conn *c, void *dst, uint64_t len, void *arg);
void ev_conn_discard_payload(struct ev_conn *c);
/* Closes after the queued output has been sent (graceful). */
void ev_conn_close_after_send(struct ev_conn *c);
/* Closes now; on_close runs. Safe inside callbacks (freed later). */
void ev_conn_close(struct ev_conn *c);
/* Pauses / resumes reading frames (backpressure). */
void ev_conn_pause(struct ev_conn *c, bool pause);
size_t ev_conn_count(struct ev_loop *loop);
/* Bytes queued for output and not yet sent (backpressure, tests). */
size_t ev_conn_queued(const struct ev_conn *c);

/* Convenience: encode and queue a reply frame with the given body. */
int ev_conn_reply(struct ev_conn *c, const struct wire_hdr *req, int32_t status,
		  const void *body, size_t n);

#endif

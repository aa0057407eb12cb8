/* net: socket helpers shared by daemons and the client: listen on
 * host:port, connect with a timeout, full-length blocking send/recv with a
 * deadline, and host identity. Stateless; thread-safe.
 */
#ifndef KVP_NET_H
#define KVP_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <sys/uio.h>

/* Listening TCP socket (SO_REUSEADDR, non-blocking, CLOEXEC) on "host:port"
 * ("" or "0.0.0.0" = all IPv4, "::" = all). Returns fd or -errno; err gets a
 * message naming the address ("127.0.0.1:15001: Address already in use"). */
int net_listen(const char *hostport, char *err, size_t errlen);
/* Bound port of a socket (for ":0" listeners). */
int net_local_port(int fd);
/* Blocking TCP connect with timeout_ms; TCP_NODELAY set. fd or -errno. */
int net_connect(const char *hostport, uint64_t timeout_ms, char *err, size_t errlen);
/* Starts a TCP connect without waiting for it (an event loop's): a
 * non-blocking fd whose connect may still be in progress (writable once
 * done, an error then in SO_ERROR or at the first read/write), TCP_NODELAY
 * set. Only an immediate failure tries the next address. fd or -errno. */
int net_connect_start(const char *hostport, char *err, size_t errlen);
/* Send/receive exactly n bytes before deadline (CLOCK_MONOTONIC ms, 0 =
 * none): 0, -ETIMEDOUT, -ECONNRESET (peer closed), or -errno. Work on
 * blocking or non-blocking fds (polls). */
int net_send_all(int fd, const void *p, size_t n, uint64_t deadline_ms);
int net_sendv_all(int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ms);
int net_recv_all(int fd, void *p, size_t n, uint64_t deadline_ms);
/* This host's identity: /proc/sys/kernel/random/boot_id (36 chars). */
int net_host_id(char *out, size_t len);
/* true if the host part of "host:port" is a loopback address or empty-host
 * would bind all (false). */
bool net_is_loopback(const char *hostport);
/* Congestion control of the pool's TCP connections ([cluster]
 * tcp_congestion): AUTO replaces a pacing algorithm (BBR) with reno, which
 * sends a reply burst at once (see net.c); SYSTEM keeps the system's; RENO
 * and CUBIC set that algorithm. */
enum net_cc { NET_CC_AUTO, NET_CC_SYSTEM, NET_CC_RENO, NET_CC_CUBIC };
/* "auto", "system", "reno", "cubic" (the [cluster] key's choices, which the
 * conf module checks); anything else is NET_CC_AUTO. */
enum net_cc net_cc_parse(const char *s);
/* Applies @cc to connected socket fd: 0 when done or nothing was to do (no
 * TCP socket, AUTO on a non-pacing algorithm), else -errno of the
 * setsockopt (EPERM: not in net.ipv4.tcp_allowed_congestion_control for an
 * unprivileged process; ENOENT: not available); the socket then keeps the
 * system's algorithm and works as before. */
int net_tune_cc(int fd, enum net_cc cc);
/* Random bytes (getrandom). */
int net_random(void *p, size_t n);
/* Busy polling ([cluster] busy_poll_us; see net.c): net_spin calls
 * ready(arg) between sched_yield()s for up to spin_us, true once it says
 * so; false at once for spin_us <= 0. net_poll is poll() that first looks
 * without sleeping for up to spin_us (not when timeout_ms is 0). */
bool net_spin(bool (*ready)(void *arg), void *arg, int spin_us);
int net_poll(struct pollfd *pfd, nfds_t n, int timeout_ms, int spin_us);

#endif

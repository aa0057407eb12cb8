/* tls: TLS 1.3 on kvpool's TCP connections ([tls], OpenSSL 3): a context
 * per process role made from the configuration, a per-connection wrapper
 * with non-blocking handshake, read and gathered write (-errno codes, as
 * recv/sendmsg would fail), and a table fd -> connection for libkvpool's
 * blocking-with-deadline socket helpers (net.c, sock.c). Contexts are
 * read-only once made (any thread); a connection belongs to the thread
 * that does its I/O; the fd table is lock-free for lookups.
 */
#ifndef KVP_TLS_H
#define KVP_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct kvp_conf;
struct tls_ctx;
struct tls_conn;

/* Bytes a server looks at to tell a TLS ClientHello from a plain frame. */
#define TLS_RECORD_HANDSHAKE 0x16
/* Longest a handshake may take before the server closes the connection. */
#define TLS_HANDSHAKE_MS 5000

/* The context of a server (accepting) or client (connecting) side from
 * conf->tls; NULL with a message in err when a file or key is bad. Only
 * called when conf->tls.enabled. */
struct tls_ctx *tls_ctx_new(const struct kvp_conf *conf, bool server, char *err, size_t errlen);
void tls_ctx_free(struct tls_ctx *ctx);
bool tls_ctx_server(const struct tls_ctx *ctx);

/* A connection on connected socket fd (not owned: the caller closes it
 * after tls_conn_free). NULL when out of memory. */
struct tls_conn *tls_conn_new(struct tls_ctx *ctx, int fd);
void tls_conn_free(struct tls_conn *t);
/* Advances the handshake: 0 done, -EAGAIN (wait for tls_conn_want_write()
 * ? writable : readable), else -EPROTO/-ECONNRESET with tls_conn_error(). */
int tls_handshake(struct tls_conn *t);
bool tls_conn_done(const struct tls_conn *t);
bool tls_conn_want_write(const struct tls_conn *t);
/* The last failure, from OpenSSL's error queue ("" none). */
const char *tls_conn_error(const struct tls_conn *t);
/* Like recv(MSG_DONTWAIT): bytes, 0 at the peer's end, -EAGAIN, -errno. */
ssize_t tls_recv(struct tls_conn *t, void *p, size_t n);
/* Like sendmsg(MSG_DONTWAIT): bytes taken from the front of iov, -EAGAIN,
 * -errno. Small iovecs are gathered into one record; a retry after -EAGAIN
 * must offer the same bytes first (a queue that only grows at its end). */
ssize_t tls_sendv(struct tls_conn *t, const struct iovec *iov, int iovcnt);
/* Decrypted bytes wait inside the connection: poll() would not see them. */
bool tls_conn_pending(const struct tls_conn *t);
/* Sends close_notify without waiting (best effort). */
void tls_conn_shutdown(struct tls_conn *t);

/* libkvpool's blocking sockets: handshake as a client on fd before
 * deadline_ms (CLOCK_MONOTONIC) and register it in the fd table. 0, or
 * -ETIMEDOUT / -EPROTO / -ECONNRESET with a message in err. */
int tls_connect_fd(struct tls_ctx *ctx, int fd, uint64_t deadline_ms, char *err, size_t errlen);
/* The TLS connection of fd, NULL for a plain one. */
struct tls_conn *tls_fd_get(int fd);
/* Frees fd's TLS connection (if any) and closes fd. */
void tls_fd_close(int fd);

#endif

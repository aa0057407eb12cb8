/* sock: libkvpool's sockets to the daemons (master and node data servers):
 * the HELLO connect, full-length I/O with a deadline mapped to KVP_E* codes,
 * one reply frame, the liveness check of an idle pooled socket and the
 * deadline of a call. Below both the API files and the transports; no state,
 * no locks: any thread, on sockets the caller owns.
 */
#ifndef KVP_SOCK_H
#define KVP_SOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "wire.h"

struct kvp;

/* The deadline of a call starting now (CLOCK_MONOTONIC ms): client.timeout. */
uint64_t sock_deadline(const struct kvp *kvp);
/* Full-length I/O with a deadline on any fd (net_sendv_all/net_recv_all,
 * no SIGPIPE): 0, KVP_ETIMEDOUT or KVP_ECONN. */
int sock_sendv(int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ms);
int sock_recv(int fd, void *p, size_t n, uint64_t deadline_ms);
/* Reads one reply frame: header (body_len <= max_body) and body, malloc'd
 * and NUL-terminated (*body NULL on error). 0 or KVP_E*. */
int sock_recv_frame(int fd, uint32_t max_body, uint64_t deadline, struct wire_hdr *h,
		    uint8_t **body);
/* Connects to host:port and does the HELLO exchange as a client; returns a
 * non-blocking fd or a KVP_E* code; *epoch (if not NULL) gets server_epoch. */
int sock_connect(struct kvp *kvp, const char *hostport, uint64_t *epoch, uint64_t deadline);
/* True when an idle pooled socket is still usable (no EOF/error pending). */
bool sock_alive(int fd);
/* Closes a socket of sock_connect (its TLS state too). */
void sock_close(int fd);
/* Non-blocking read of what fd holds (TLS decrypted): bytes, 0 at EOF, -1
 * with errno (EAGAIN: nothing yet), as recv(MSG_DONTWAIT). */
ssize_t sock_read(int fd, void *p, size_t n);
/* Non-blocking gathered write, as sendmsg(MSG_DONTWAIT | MSG_NOSIGNAL). */
ssize_t sock_writev(int fd, const struct iovec *iov, int iovcnt);
/* Bytes already read from the socket wait in fd's TLS state: poll() would
 * not report them, read them first. */
bool sock_pending(int fd);

#endif

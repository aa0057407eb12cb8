/* tls: OpenSSL contexts and connections of kvpool's TCP links (see tls.h).
 * TLS 1.3 only (no renegotiation: a read never has to write, except for a
 * key update, which we do not send), no session tickets (nothing is
 * resumed, and an idle client socket stays empty for sock_alive()). kTLS is
 * asked for (SSL_OP_ENABLE_KTLS) unless [tls] ktls = off; when the kernel
 * takes the record layer, SSL_read/SSL_write become plain reads and writes
 * on the fd. Whether it did is logged once per process.
 */
#include "tls.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "clock.h"
#include "conf.h"
#include "log.h"

#define TLS_GATHER (16u * 1024)		/* small iovecs are copied into one record */
#define TLS_DIRECT_MIN (16u * 1024)	/* an iovec this large is written in place */
#define TLS_WRITE_MAX (1u << 20)	/* bytes one SSL_write takes at most */
#define TLS_READ_AHEAD (64u * 1024)	/* bytes one read of the socket asks for */
/* Records gathered in user space before one write() (no kTLS): OpenSSL
 * writes each 16 KiB record with a write() of its own. */
#define TLS_COALESCE (256u * 1024)

struct tls_ctx {
	SSL_CTX *ssl;
	bool server;
};

struct tls_conn {
	SSL *ssl;
	bool done;			/* handshake finished */
	bool want_write;		/* the last -EAGAIN waits for POLLOUT */
	bool starved;			/* the last read wanted more from the socket */
	uint8_t *gather;		/* TLS_GATHER bytes, allocated on first use */
	BIO *wbuf;			/* write buffer over the socket (no kTLS send) */
	size_t owed;			/* bytes taken whose records wait in wbuf */
	char err[160];
};

static void err_take(char *buf, size_t len, const char *what)
{
	unsigned long e = ERR_get_error();
	char s[128] = "";

	if (e)
		ERR_error_string_n(e, s, sizeof(s));
	ERR_clear_error();
	snprintf(buf, len, "%s%s%s", what, *s ? ": " : "", s);
}

struct tls_ctx *tls_ctx_new(const struct kvp_conf *conf, bool server, char *err, size_t errlen)
{
	struct tls_ctx *ctx = calloc(1, sizeof(*ctx));
	char what[CONF_STR + 32];

	if (!ctx) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	ctx->server = server;
	ctx->ssl = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (!ctx->ssl) {
		err_take(err, errlen, "SSL_CTX_new");
		goto out_free;
	}
	SSL_CTX_set_min_proto_version(ctx->ssl, TLS1_3_VERSION);
	/* AES-128-GCM first: the pool's bulk cipher, a third cheaper than
	 * AES-256 with AES-NI; the peer's preference decides between equals */
	SSL_CTX_set_ciphersuites(ctx->ssl, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
					   "TLS_CHACHA20_POLY1305_SHA256");
	SSL_CTX_set_mode(ctx->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE |
				   SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_clear_mode(ctx->ssl, SSL_MODE_AUTO_RETRY);
	SSL_CTX_set_session_cache_mode(ctx->ssl, SSL_SESS_CACHE_OFF);
	/* Read ahead: one read takes several records (not a 5-byte header,
	 * then the record); tls_conn_pending() counts what it holds. A peer
	 * that ends without close_notify is an EOF, not a protocol error. */
	SSL_CTX_set_read_ahead(ctx->ssl, 1);
	SSL_CTX_set_default_read_buffer_len(ctx->ssl, TLS_READ_AHEAD);
	SSL_CTX_set_options(ctx->ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);
	SSL_CTX_set_options(ctx->ssl, SSL_OP_NO_TICKET);
	if (server)
		SSL_CTX_set_num_tickets(ctx->ssl, 0);
	if (strcmp(conf->tls.ktls, "off") != 0)
		SSL_CTX_set_options(ctx->ssl, SSL_OP_ENABLE_KTLS);

	if (server && (!conf->tls.cert[0] || !conf->tls.key[0])) {
		snprintf(err, errlen, "[tls] cert and key are required by a server");
		goto out_ssl;
	}
	if (conf->tls.cert[0]) {
		snprintf(what, sizeof(what), "[tls] cert %s", conf->tls.cert);
		if (SSL_CTX_use_certificate_chain_file(ctx->ssl, conf->tls.cert) != 1) {
			err_take(err, errlen, what);
			goto out_ssl;
		}
		snprintf(what, sizeof(what), "[tls] key %s", conf->tls.key);
		if (SSL_CTX_use_PrivateKey_file(ctx->ssl, conf->tls.key[0] ? conf->tls.key :
						conf->tls.cert, SSL_FILETYPE_PEM) != 1 ||
		    SSL_CTX_check_private_key(ctx->ssl) != 1) {
			err_take(err, errlen, what);
			goto out_ssl;
		}
	}
	snprintf(what, sizeof(what), "[tls] ca %s", conf->tls.ca);
	if (conf->tls.ca[0] ? SSL_CTX_load_verify_locations(ctx->ssl, conf->tls.ca, NULL) != 1
			    : SSL_CTX_set_default_verify_paths(ctx->ssl) != 1) {
		err_take(err, errlen, what);
		goto out_ssl;
	}
	/* Clients always check the server against ca; servers ask for a
	 * client certificate only with verify_peer (mutual TLS). The cluster's
	 * CA is private: names are not checked, the chain is. */
	if (!server)
		SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_PEER, NULL);
	else if (conf->tls.verify_peer)
		SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	return ctx;

out_ssl:
	SSL_CTX_free(ctx->ssl);
out_free:
	free(ctx);
	return NULL;
}

void tls_ctx_free(struct tls_ctx *ctx)
{
	if (!ctx)
		return;
	SSL_CTX_free(ctx->ssl);
	free(ctx);
}

bool tls_ctx_server(const struct tls_ctx *ctx)
{
	return ctx->server;
}

struct tls_conn *tls_conn_new(struct tls_ctx *ctx, int fd)
{
	struct tls_conn *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->ssl = SSL_new(ctx->ssl);
	if (!t->ssl || SSL_set_fd(t->ssl, fd) != 1) {
		SSL_free(t->ssl);
		free(t);
		ERR_clear_error();
		return NULL;
	}
	if (ctx->server)
		SSL_set_accept_state(t->ssl);
	else
		SSL_set_connect_state(t->ssl);
	return t;
}

void tls_conn_free(struct tls_conn *t)
{
	if (!t)
		return;
	SSL_free(t->ssl);
	free(t->gather);
	free(t);
}

bool tls_conn_done(const struct tls_conn *t) { return t->done; }
bool tls_conn_want_write(const struct tls_conn *t) { return t->want_write; }
const char *tls_conn_error(const struct tls_conn *t) { return t->err; }
/* Read-ahead bytes count only until a read found them short of a whole
 * record (the socket was drained then: poll reports what completes it);
 * counting them after that would spin. */
bool tls_conn_pending(const struct tls_conn *t)
{
	return SSL_pending(t->ssl) > 0 || (!t->starved && SSL_has_pending(t->ssl));
}

/* Once per process: did the kernel take the record layer? */
static void ktls_note(struct tls_conn *t)
{
	static atomic_bool said;
	bool tx = BIO_get_ktls_send(SSL_get_wbio(t->ssl));
	bool rx = BIO_get_ktls_recv(SSL_get_rbio(t->ssl));

	if (atomic_exchange(&said, true))
		return;
	if (tx || rx)
		log_notice("tls: kernel TLS in use (send %s, receive %s)", tx ? "yes" : "no",
			   rx ? "yes" : "no");
	else
		log_notice("tls: kernel TLS not available (no tls module or ktls = off); "
			   "OpenSSL does the record layer in user space");
}

/* The outcome of an SSL call that returned r <= 0, as -errno. */
static int ssl_fail(struct tls_conn *t, int r, const char *what)
{
	int saved = errno;
	int e = SSL_get_error(t->ssl, r);

	t->want_write = false;
	switch (e) {
	case SSL_ERROR_WANT_READ:
		return -EAGAIN;
	case SSL_ERROR_WANT_WRITE:
		t->want_write = true;
		return -EAGAIN;
	case SSL_ERROR_ZERO_RETURN:
		snprintf(t->err, sizeof(t->err), "%s: peer closed", what);
		return -ECONNRESET;
	case SSL_ERROR_SYSCALL:
		ERR_clear_error();
		if (r == 0 || !saved) {
			snprintf(t->err, sizeof(t->err), "%s: connection closed", what);
			return -ECONNRESET;
		}
		snprintf(t->err, sizeof(t->err), "%s: %s", what, strerror(saved));
		return saved == EPIPE ? -ECONNRESET : -saved;
	default:
		err_take(t->err, sizeof(t->err), what);
		return -EPROTO;
	}
}

/* Without kTLS send: a buffering BIO between OpenSSL and the socket, so
 * that tls_sendv writes up to TLS_COALESCE bytes of records with one
 * write(). Left out when it cannot be made (the socket BIO stays). */
static void wbuf_push(struct tls_conn *t)
{
	BIO *sock = SSL_get_wbio(t->ssl);
	BIO *buf;

	if (!sock || BIO_get_ktls_send(sock))
		return;
	buf = BIO_new(BIO_f_buffer());
	if (!buf || BIO_set_write_buffer_size(buf, TLS_COALESCE + TLS_GATHER) <= 0 ||
	    !BIO_up_ref(sock)) {
		BIO_free(buf);
		ERR_clear_error();
		return;
	}
	/* rbio and wbio were the same socket BIO: the wbio slot's reference
	 * goes with SSL_set0_wbio, buf holds the one taken above */
	BIO_push(buf, sock);
	SSL_set0_wbio(t->ssl, buf);
	t->wbuf = buf;
}

/* Writes out what wbuf holds: 0, -EAGAIN (want_write), -errno. */
static int wbuf_flush(struct tls_conn *t)
{
	if (!t->wbuf || BIO_wpending(t->wbuf) == 0)
		return 0;
	ERR_clear_error();
	errno = 0;
	if (BIO_flush(t->wbuf) > 0)
		return 0;
	if (BIO_should_retry(t->wbuf)) {
		t->want_write = true;
		return -EAGAIN;
	}
	int e = errno ? errno : EIO;
	snprintf(t->err, sizeof(t->err), "TLS write: %s", strerror(e));
	return e == EPIPE ? -ECONNRESET : -e;
}

int tls_handshake(struct tls_conn *t)
{
	if (t->done)
		return 0;
	ERR_clear_error();
	int r = SSL_do_handshake(t->ssl);
	if (r == 1) {
		t->done = true;
		t->want_write = false;
		ktls_note(t);
		wbuf_push(t);
		return 0;
	}
	int rc = ssl_fail(t, r, "TLS handshake");
	if (rc != -EAGAIN && SSL_get_verify_result(t->ssl) != X509_V_OK) {
		size_t l = strlen(t->err);
		snprintf(t->err + l, sizeof(t->err) - l, " (%s)",
			 X509_verify_cert_error_string(SSL_get_verify_result(t->ssl)));
	}
	return rc;
}

ssize_t tls_recv(struct tls_conn *t, void *p, size_t n)
{
	size_t got = 0;

	ERR_clear_error();
	int r = SSL_read_ex(t->ssl, p, n, &got);
	if (r == 1) {
		t->want_write = false;
		t->starved = false;
		return (ssize_t)got;
	}
	int rc = ssl_fail(t, 0, "TLS read");
	t->starved = rc == -EAGAIN && !t->want_write;
	/* close_notify or a plain EOF: the peer's end, as recv's 0 */
	return rc == -ECONNRESET ? 0 : rc;
}

ssize_t tls_sendv(struct tls_conn *t, const struct iovec *iov, int iovcnt)
{
	const void *p;
	size_t n = 0, w = 0;

	while (iovcnt > 0 && iov->iov_len == 0) {
		iov++;
		iovcnt--;
	}
	if (iovcnt <= 0)
		return 0;
	if (iov->iov_len >= TLS_DIRECT_MIN || iovcnt == 1) {
		/* a payload (segment memory, a caller's buffer): in place */
		p = iov->iov_base;
		n = iov->iov_len < TLS_WRITE_MAX ? iov->iov_len : TLS_WRITE_MAX;
	} else {
		if (!t->gather && !(t->gather = malloc(TLS_GATHER)))
			return -ENOMEM;
		for (int i = 0; i < iovcnt && n < TLS_GATHER; i++) {
			size_t k = iov[i].iov_len < TLS_GATHER - n ? iov[i].iov_len : TLS_GATHER - n;
			if (k)
				memcpy(t->gather + n, iov[i].iov_base, k);
			n += k;
		}
		p = t->gather;
	}
	if (t->owed) {
		/* the retry after -EAGAIN: its first t->owed bytes are taken,
		 * their records wait in wbuf */
		int rc = wbuf_flush(t);
		if (rc < 0)
			return rc;
		w = t->owed;
		t->owed = 0;
		t->want_write = false;
		return (ssize_t)w;
	}
	/* one record per SSL_write (partial-write mode): with wbuf, several
	 * records then one write() */
	while (w < n) {
		size_t k = 0;

		ERR_clear_error();
		if (SSL_write_ex(t->ssl, (const uint8_t *)p + w, n - w, &k) != 1) {
			int rc = ssl_fail(t, 0, "TLS write");
			if (rc != -EAGAIN || w == 0)
				return rc;
			break;	/* that record waits inside OpenSSL: offered again */
		}
		w += k;
		if (!t->wbuf || (size_t)BIO_wpending(t->wbuf) >= TLS_COALESCE)
			break;
	}
	int rc = wbuf_flush(t);
	if (rc == -EAGAIN) {
		t->owed = w;
		return rc;
	}
	if (rc < 0)
		return rc;
	t->want_write = false;
	return (ssize_t)w;
}

void tls_conn_shutdown(struct tls_conn *t)
{
	if (t && t->done) {
		ERR_clear_error();
		SSL_shutdown(t->ssl);
		ERR_clear_error();
	}
}

/* ---- libkvpool's fd table ------------------------------------------------ */

/* Two levels, pages allocated on first use and never freed: lookups need
 * no lock. A slot is written only by the thread that owns the fd. */
#define FD_PAGE 1024
#define FD_PAGES 1024
static _Atomic(struct tls_conn *) *fd_pages[FD_PAGES];
static pthread_mutex_t fd_lock = PTHREAD_MUTEX_INITIALIZER;

static _Atomic(struct tls_conn *) *fd_slot(int fd, bool make)
{
	if (fd < 0 || fd >= FD_PAGE * FD_PAGES)
		return NULL;
	_Atomic(struct tls_conn *) *pg = __atomic_load_n(&fd_pages[fd / FD_PAGE], __ATOMIC_ACQUIRE);
	if (!pg && make) {
		pthread_mutex_lock(&fd_lock);
		pg = fd_pages[fd / FD_PAGE];
		if (!pg) {
			pg = calloc(FD_PAGE, sizeof(*pg));
			__atomic_store_n(&fd_pages[fd / FD_PAGE], pg, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&fd_lock);
	}
	return pg ? &pg[fd % FD_PAGE] : NULL;
}

struct tls_conn *tls_fd_get(int fd)
{
	_Atomic(struct tls_conn *) *s = fd_slot(fd, false);

	return s ? atomic_load(s) : NULL;
}

void tls_fd_close(int fd)
{
	_Atomic(struct tls_conn *) *s = fd_slot(fd, false);
	struct tls_conn *t = s ? atomic_exchange(s, NULL) : NULL;

	if (t) {
		tls_conn_shutdown(t);
		tls_conn_free(t);
	}
	if (fd >= 0)
		close(fd);
}

int tls_connect_fd(struct tls_ctx *ctx, int fd, uint64_t deadline_ms, char *err, size_t errlen)
{
	_Atomic(struct tls_conn *) *s = fd_slot(fd, true);
	struct tls_conn *t = s ? tls_conn_new(ctx, fd) : NULL;
	int rc;

	if (!t) {
		snprintf(err, errlen, "TLS: out of memory");
		return -ENOMEM;
	}
	while ((rc = tls_handshake(t)) == -EAGAIN) {
		uint64_t now = clock_now_ms();
		struct pollfd pfd = { .fd = fd, .events = t->want_write ? POLLOUT : POLLIN };

		if (now >= deadline_ms) {
			rc = -ETIMEDOUT;
			snprintf(t->err, sizeof(t->err), "TLS handshake: timed out");
			break;
		}
		uint64_t left = deadline_ms - now;
		if (poll(&pfd, 1, left > 60000 ? 60000 : (int)left) < 0 && errno != EINTR) {
			rc = -errno;
			snprintf(t->err, sizeof(t->err), "TLS handshake: poll: %s", strerror(errno));
			break;
		}
	}
	if (rc < 0) {
		snprintf(err, errlen, "%s", t->err);
		tls_conn_free(t);
		return rc;
	}
	atomic_store(s, t);
	return 0;
}

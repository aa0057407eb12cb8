/* http: small HTTP endpoints (/metrics, /health, the Mooncake metadata
 * store) served by libmicrohttpd inside an ev loop: MHD runs in external
 * epoll mode and its epoll fd is registered on the loop, so handlers run on
 * the loop thread and read daemon state without locks.
 */
#ifndef KVP_HTTP_H
#define KVP_HTTP_H

#include <stdbool.h>
#include <stddef.h>

struct ev_loop;
struct http_srv;

struct http_req {
	const char *method;		/* "GET", "PUT", "DELETE", ... */
	const char *path;		/* "/metrics" */
	const void *body;		/* request body (PUT/POST), may be NULL */
	size_t body_len;
	void *conn;			/* for http_query() */
};

struct http_resp {
	int status;			/* 200 default */
	const char *content_type;	/* "text/plain; version=0.0.4" default */
	char *body;			/* malloc'd; freed by http.c */
	size_t body_len;
};

/* Query argument of the request ("key" in /metadata?key=K), NULL if absent. */
const char *http_query(const struct http_req *req, const char *name);
/* Request header (case-insensitive name, "Authorization"), NULL if absent. */
const char *http_header(const struct http_req *req, const char *name);

typedef void (*http_handler)(const struct http_req *req, struct http_resp *resp, void *arg);

/* HTTPS ([tls] http): PEM files read once at start (libmicrohttpd's TLS is
 * GnuTLS, so the files must be PEM; PKCS#8 or SEC1 keys, unencrypted). */
struct http_tls {
	const char *cert;		/* certificate (chain) */
	const char *key;		/* its private key */
};

/* Listens on hostport; max_body bounds request bodies (413 above). NULL with
 * a message in err on failure. */
struct http_srv *http_start(struct ev_loop *loop, const char *hostport, size_t max_body,
			    http_handler handler, void *arg, char *err, size_t errlen);
/* The same, serving HTTPS when tls is not NULL (plain HTTP is then refused:
 * the handshake fails and the connection is closed). */
struct http_srv *http_start_tls(struct ev_loop *loop, const char *hostport, size_t max_body,
				http_handler handler, void *arg, const struct http_tls *tls,
				char *err, size_t errlen);
/* Whether this libmicrohttpd was built with TLS. */
bool http_tls_supported(void);
void http_stop(struct http_srv *srv);
int http_port(const struct http_srv *srv);

/* Helpers for building text bodies. */
struct sbuf {
	char *p;
	size_t len, cap;
};
void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends n raw bytes. */
void sb_bytes(struct sbuf *b, const void *src, size_t n);
/* Appends src[0..n) as a JSON string literal (quotes included): valid
 * UTF-8 kept, control bytes, DEL and bytes outside valid UTF-8 as \u00XX,
 * so any key yields valid JSON. */
void sb_json_str(struct sbuf *b, const void *src, size_t n);
void sb_free(struct sbuf *b);

#endif

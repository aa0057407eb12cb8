/* http: libmicrohttpd inside an ev loop; see http.h.
 * Owns: one MHD daemon per http_srv, its listening socket and request state.
 * Thread: the loop thread only. MHD runs in external-epoll mode (no thread
 * of its own): its epoll fd is an fd on our loop, MHD_run() is called when
 * it is readable and when MHD's own timeout (MHD_get_timeout) expires, so
 * handlers run on the loop thread and read daemon state without locks.
 */
#include "http.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

#include "ev.h"
#include "log.h"
#include "net.h"

#define HTTP_CONN_TIMEOUT_S 30		/* MHD closes connections idle this long */
#define HTTP_CONN_LIMIT 256
#define HTTP_DEFAULT_TYPE "text/plain; version=0.0.4"
#define HTTP_PEM_MAX (1u << 20)		/* bytes of a certificate or key file */
/* GnuTLS priorities of HTTPS: TLS 1.2 and 1.3 only (Prometheus, curl and
 * browsers all speak 1.3; 1.2 for older scrapers). */
#define HTTP_TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

struct http_srv {
	struct ev_loop *loop;
	struct MHD_Daemon *d;
	int epfd;			/* MHD's, registered on the loop */
	int port;
	size_t max_body;
	http_handler handler;
	void *arg;
	uint64_t timer_id;
	char *cert_pem, *key_pem;	/* HTTPS: MHD keeps pointers to these */
};

/* Per request (MHD's con_cls): the body collected so far. */
struct http_rq {
	char *body;
	size_t len, cap;
	bool too_big;
	bool responded;
};

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char buf[512];

	(void)cls;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	size_t n = strlen(buf);
	while (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	log_info("http: %s", buf);
}

static enum MHD_Result respond(struct MHD_Connection *conn, int status, const char *type,
			       char *body, size_t len)
{
	struct MHD_Response *r;

	if (status < 100 || status > 999)
		status = 500;
	if (body && len) {
		r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
		if (!r)
			free(body);
	} else {
		free(body);
		r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	}
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type ? type : HTTP_DEFAULT_TYPE);
	enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result too_large(struct MHD_Connection *conn, struct http_rq *rq)
{
	static const char msg[] = "request body too large\n";
	char *b = strdup(msg);

	rq->responded = true;
	return respond(conn, MHD_HTTP_CONTENT_TOO_LARGE, "text/plain", b, b ? strlen(b) : 0);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version,
				  const char *upload_data, size_t *upload_data_size,
				  void **con_cls)
{
	struct http_srv *srv = cls;
	struct http_rq *rq = *con_cls;

	(void)version;
	if (!rq) {
		/* First call: headers only. Refuse a declared oversize body now,
		 * before the client sends it (no 100 Continue). */
		rq = calloc(1, sizeof(*rq));
		if (!rq)
			return MHD_NO;
		*con_cls = rq;
		const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
							     MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl) {
			char *end;
			errno = 0;
			unsigned long long v = strtoull(cl, &end, 10);
			if (errno || end == cl || v > srv->max_body) {
				rq->too_big = true;
				return too_large(conn, rq);
			}
		}
		return MHD_YES;
	}
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		if (rq->too_big)
			return MHD_YES;	/* chunked body over the limit: drop the rest */
		if (n > srv->max_body - rq->len) {
			rq->too_big = true;
			free(rq->body);
			rq->body = NULL;
			rq->len = rq->cap = 0;
			return MHD_YES;
		}
		if (rq->cap - rq->len < n + 1) {
			size_t cap = rq->cap ? rq->cap : 1024;
			while (cap - rq->len < n + 1)
				cap *= 2;
			char *p = realloc(rq->body, cap);
			if (!p)
				return MHD_NO;
			rq->body = p;
			rq->cap = cap;
		}
		memcpy(rq->body + rq->len, upload_data, n);
		rq->len += n;
		rq->body[rq->len] = '\0';	/* handlers may treat text bodies as strings */
		return MHD_YES;
	}
	if (rq->responded)
		return MHD_YES;
	if (rq->too_big)
		return too_large(conn, rq);

	struct http_req req = {
		.method = method,
		.path = url,
		.body = rq->body,
		.body_len = rq->len,
		.conn = conn,
	};
	struct http_resp resp = { .status = 200 };

	rq->responded = true;
	srv->handler(&req, &resp, srv->arg);
	return respond(conn, resp.status, resp.content_type, resp.body, resp.body_len);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http_rq *rq = *con_cls;

	(void)cls;
	(void)conn;
	(void)toe;
	if (rq) {
		free(rq->body);
		free(rq);
		*con_cls = NULL;
	}
}

const char *http_query(const struct http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *http_header(const struct http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

static void srv_run(struct http_srv *srv);

static void on_timer(struct ev_loop *loop, void *arg)
{
	struct http_srv *srv = arg;

	(void)loop;
	srv->timer_id = 0;
	srv_run(srv);
}

static void on_epoll(struct ev_loop *loop, int fd, uint32_t events, void *arg)
{
	(void)loop;
	(void)fd;
	(void)events;
	srv_run(arg);
}

/* Runs MHD, then re-arms the timer MHD asks for (connection timeouts, work
 * it already has buffered): waiting on its epoll fd alone could stall. */
static void srv_run(struct http_srv *srv)
{
	MHD_UNSIGNED_LONG_LONG to;

	MHD_run(srv->d);
	ev_timer_del(srv->loop, srv->timer_id);
	srv->timer_id = 0;
	if (MHD_get_timeout(srv->d, &to) == MHD_YES)
		srv->timer_id = ev_timer_add(srv->loop, to, false, on_timer, srv);
}

bool http_tls_supported(void)
{
	return MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES;
}

/* The whole of a PEM file as a string, NULL with a message in err. */
static char *read_pem(const char *path, char *err, size_t errlen)
{
	FILE *f = *path ? fopen(path, "re") : NULL;
	char *p = NULL;
	size_t len = 0, cap = 0;

	if (!*path) {
		snprintf(err, errlen, "HTTPS ([tls] http) needs [tls] cert and key");
		return NULL;
	}
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	for (;;) {
		if (cap - len < 4097) {
			cap = cap ? cap * 2 : 8192;
			char *q = cap <= HTTP_PEM_MAX ? realloc(p, cap) : NULL;
			if (!q) {
				snprintf(err, errlen, "%s: too large or out of memory", path);
				goto out_free;
			}
			p = q;
		}
		size_t r = fread(p + len, 1, cap - len - 1, f);
		len += r;
		if (r == 0)
			break;
	}
	if (ferror(f)) {
		snprintf(err, errlen, "%s: read error", path);
		goto out_free;
	}
	fclose(f);
	p[len] = '\0';
	return p;

out_free:
	free(p);
	fclose(f);
	return NULL;
}

struct http_srv *http_start(struct ev_loop *loop, const char *hostport, size_t max_body,
			    http_handler handler, void *arg, char *err, size_t errlen)
{
	return http_start_tls(loop, hostport, max_body, handler, arg, NULL, err, errlen);
}

struct http_srv *http_start_tls(struct ev_loop *loop, const char *hostport, size_t max_body,
				http_handler handler, void *arg, const struct http_tls *tls,
				char *err, size_t errlen)
{
	struct http_srv *srv = calloc(1, sizeof(*srv));
	unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
	int fd, rc;

	if (!srv) {
		snprintf(err, errlen, "%s: out of memory", hostport);
		return NULL;
	}
	srv->loop = loop;
	srv->max_body = max_body;
	srv->handler = handler;
	srv->arg = arg;
	if (tls) {
		if (!http_tls_supported()) {
			snprintf(err, errlen, "%s: HTTPS asked ([tls] http) but libmicrohttpd has "
				 "no TLS", hostport);
			goto out_free;
		}
		srv->cert_pem = read_pem(tls->cert, err, errlen);
		if (!srv->cert_pem)
			goto out_free;
		srv->key_pem = read_pem(tls->key, err, errlen);
		if (!srv->key_pem)
			goto out_free;
		flags |= MHD_USE_TLS;
	}
	fd = net_listen(hostport, err, errlen);
	if (fd < 0)
		goto out_free;
	srv->port = net_local_port(fd);
	/* MHD owns fd from here (MHD_stop_daemon closes it). The TLS options
	 * are ignored by MHD without MHD_USE_TLS. */
	srv->d = MHD_start_daemon(flags, 0, NULL, NULL,
				  on_request, srv,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
				  MHD_OPTION_LISTEN_SOCKET, fd,
				  MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_CONN_TIMEOUT_S,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_CONN_LIMIT,
				  tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, srv->cert_pem,
				  MHD_OPTION_HTTPS_MEM_KEY, srv->key_pem,
				  MHD_OPTION_HTTPS_PRIORITIES, HTTP_TLS_PRIORITIES,
				  MHD_OPTION_END);
	if (!srv->d) {
		snprintf(err, errlen, "%s: cannot start the HTTP%s server (libmicrohttpd%s)",
			 hostport, tls ? "S" : "", tls ? "; is the key the certificate's?" : "");
		close(fd);
		goto out_free;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->d, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info || info->epoll_fd < 0) {
		snprintf(err, errlen, "%s: libmicrohttpd has no epoll fd", hostport);
		goto out_stop;
	}
	srv->epfd = info->epoll_fd;
	rc = ev_add_fd(loop, srv->epfd, EPOLLIN, on_epoll, srv);
	if (rc < 0) {
		snprintf(err, errlen, "%s: %s", hostport, strerror(-rc));
		goto out_stop;
	}
	srv_run(srv);	/* arms the first timer */
	return srv;

out_stop:
	MHD_stop_daemon(srv->d);
out_free:
	free(srv->cert_pem);
	free(srv->key_pem);
	free(srv);
	return NULL;
}

void http_stop(struct http_srv *srv)
{
	if (!srv)
		return;
	ev_del_fd(srv->loop, srv->epfd);
	ev_timer_del(srv->loop, srv->timer_id);
	MHD_stop_daemon(srv->d);
	free(srv->cert_pem);
	free(srv->key_pem);
	free(srv);
}

int http_port(const struct http_srv *srv)
{
	return srv->port;
}

void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;

	for (;;) {
		size_t room = b->cap - b->len;
		va_start(ap, fmt);
		int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap ? b->cap : 256;
		while (cap - b->len <= (size_t)n)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return;	/* out of memory: the text stays as it was */
		b->p = p;
		b->cap = cap;
	}
}

void sb_bytes(struct sbuf *b, const void *src, size_t n)
{
	if (b->cap - b->len <= n) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap - b->len <= n)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, src, n);
	b->len += n;
	b->p[b->len] = '\0';
}

/* Length of the valid UTF-8 sequence at s (2..4 bytes), 0 if none:
 * overlong forms, surrogates and code points above U+10FFFF are not. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
	uint32_t cp;

	if (!len || len > n || s[0] > 0xf4)
		return 0;
	cp = s[0] & (0x7f >> len);
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

void sb_json_str(struct sbuf *b, const void *src, size_t n)
{
	const unsigned char *s = src;

	sb_bytes(b, "\"", 1);
	for (size_t i = 0; i < n;) {
		size_t u = s[i] >= 0x80 ? utf8_seq(s + i, n - i) : 0;
		if (u) {
			sb_bytes(b, s + i, u);
			i += u;
			continue;
		}
		if (s[i] == '"' || s[i] == '\\')
			sb_printf(b, "\\%c", s[i]);
		else if (s[i] < 0x20 || s[i] >= 0x7f)
			sb_printf(b, "\\u%04x", s[i]);
		else
			sb_bytes(b, s + i, 1);
		i++;
	}
	sb_bytes(b, "\"", 1);
}

void sb_free(struct sbuf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

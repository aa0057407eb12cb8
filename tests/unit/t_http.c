/* t_http: HTTP endpoints on an ev loop (src/common/http.c): a raw-socket client
 * against 127.0.0.1:0 does GET/PUT/DELETE with query arguments, gets 404
 * for unknown paths and 413 for bodies over max_body. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "ev.h"
#include "http.h"
#include "log.h"
#include "net.h"
#include "testlib.h"


#define MAX_BODY 1024

/* A one-slot metadata store, as the master's Mooncake store would be. */
struct app {
	pthread_t loop_tid;
	atomic_int off_loop;		/* handler calls not on the loop thread */
	atomic_int calls;
	char key[64];
	char *val;
	size_t val_len;
	bool have;
};

static void handler(const struct http_req *req, struct http_resp *resp, void *arg)
{
	struct app *a = arg;
	struct sbuf b = { 0 };

	atomic_fetch_add(&a->calls, 1);
	if (!pthread_equal(pthread_self(), a->loop_tid))
		atomic_fetch_add(&a->off_loop, 1);
	if (strcmp(req->path, "/metrics") == 0 && strcmp(req->method, "GET") == 0) {
		sb_printf(&b, "# TYPE kvp_calls counter\n");
		sb_printf(&b, "kvp_calls %d\n", atomic_load(&a->calls));
		resp->body = b.p;
		resp->body_len = b.len;
		return;
	}
	if (strcmp(req->path, "/metadata") != 0) {
		sb_printf(&b, "no such endpoint: %s\n", req->path);
		resp->status = 404;
		resp->content_type = "text/plain";
		resp->body = b.p;
		resp->body_len = b.len;
		return;
	}
	const char *key = http_query(req, "key");
	if (!key || strlen(key) >= sizeof(a->key)) {
		resp->status = 400;
		return;
	}
	resp->content_type = "application/json";
	if (strcmp(req->method, "PUT") == 0) {
		free(a->val);
		a->val = malloc(req->body_len + 1);
		memcpy(a->val, req->body ? req->body : "", req->body_len);
		a->val_len = req->body_len;
		snprintf(a->key, sizeof(a->key), "%s", key);
		a->have = true;
		sb_printf(&b, "stored %zu", req->body_len);
	} else if (strcmp(req->method, "GET") == 0) {
		if (!a->have || strcmp(a->key, key) != 0) {
			resp->status = 404;
			return;
		}
		resp->body = malloc(a->val_len + 1);
		memcpy(resp->body, a->val, a->val_len);
		resp->body_len = a->val_len;
		return;
	} else if (strcmp(req->method, "DELETE") == 0) {
		if (!a->have || strcmp(a->key, key) != 0) {
			resp->status = 404;
			return;
		}
		a->have = false;
		sb_printf(&b, "deleted");
	} else {
		resp->status = 405;
		return;
	}
	resp->body = b.p;
	resp->body_len = b.len;
}

struct loopctx {
	struct ev_loop *loop;
	struct app *app;
};

static void *loop_thread(void *arg)
{
	struct loopctx *l = arg;

	l->app->loop_tid = pthread_self();
	CHECK(ev_run(l->loop) == 0);
	return NULL;
}

struct resp {
	int status;
	char type[128];
	char *body;
	size_t body_len;
	char *raw;
};

static void resp_free(struct resp *r)
{
	free(r->raw);
	memset(r, 0, sizeof(*r));
}

/* Sends raw request bytes, reads until the server closes (requests say
 * "Connection: close"), parses the first response. */
static int http_do(int port, const char *req, size_t req_len, const void *extra,
		   size_t extra_len, struct resp *r)
{
	char addr[64], err[256];
	size_t cap = 1 << 16, len = 0;
	uint64_t dl = clock_now_ms() + 20000;

	memset(r, 0, sizeof(*r));
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	int fd = net_connect(addr, 5000, err, sizeof(err));
	if (fd < 0) {
		fprintf(stderr, "connect: %s\n", err);
		return fd;
	}
	int rc = net_send_all(fd, req, req_len, dl);
	if (rc == 0 && extra_len)
		rc = net_send_all(fd, extra, extra_len, dl);
	/* a 413 may come (and the server close) before the body is all sent */
	if (rc < 0 && rc != -ECONNRESET && rc != -EPIPE) {
		close(fd);
		return rc;
	}
	r->raw = malloc(cap + 1);
	for (;;) {
		if (len == cap) {
			cap *= 2;
			r->raw = realloc(r->raw, cap + 1);
		}
		rc = net_recv_all(fd, r->raw + len, 1, dl);
		if (rc == -ECONNRESET)
			break;		/* EOF: the response is complete */
		if (rc < 0) {
			close(fd);
			return rc;
		}
		len++;
		/* read the rest of what is there in one go */
		ssize_t n = recv(fd, r->raw + len, cap - len, MSG_DONTWAIT);
		if (n > 0)
			len += (size_t)n;
	}
	close(fd);
	r->raw[len] = '\0';
	if (sscanf(r->raw, "HTTP/1.%*d %d", &r->status) != 1)
		return -EPROTO;
	char *ct = strcasestr(r->raw, "\r\nContent-Type: ");
	if (ct)
		sscanf(ct + 16, "%127[^\r]", r->type);
	char *hdr_end = strstr(r->raw, "\r\n\r\n");
	if (!hdr_end)
		return -EPROTO;
	r->body = hdr_end + 4;
	size_t clen = 0;
	char *cl = strcasestr(r->raw, "\r\nContent-Length: ");
	if (cl && cl < hdr_end)
		clen = strtoul(cl + 18, NULL, 10);
	r->body_len = clen;
	if ((size_t)(r->raw + len - r->body) < clen)
		return -EPROTO;
	return 0;
}

static int simple(int port, const char *method, const char *target, const char *body,
		  struct resp *r)
{
	struct sbuf req = { 0 };

	sb_printf(&req, "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n", method, target);
	if (body)
		sb_printf(&req, "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
	else
		sb_printf(&req, "\r\n");
	int rc = http_do(port, req.p, req.len, NULL, 0, r);
	sb_free(&req);
	return rc;
}

static bool body_is(const struct resp *r, const char *s)
{
	return r->body && r->body_len == strlen(s) && memcmp(r->body, s, r->body_len) == 0;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

int main(void)
{
	struct app a = { 0 };
	struct loopctx l = { .app = &a };
	struct resp r;
	char err[256];
	pthread_t th;

	log_init("t_http", LOG_WARNING);
	signal(SIGPIPE, SIG_IGN);
	alarm(120);
	int fds0 = count_fds();
	l.loop = ev_create();
	CHECK(l.loop != NULL);
	if (!l.loop)
		return 1;
	/* a bad address fails with a message */
	CHECK(http_start(l.loop, "127.0.0.1:99999", MAX_BODY, handler, &a, err, sizeof(err)) == NULL);
	CHECK(strstr(err, "127.0.0.1:99999") != NULL);

	struct http_srv *srv = http_start(l.loop, "127.0.0.1:0", MAX_BODY, handler, &a,
					  err, sizeof(err));
	CHECK(srv != NULL);
	if (!srv) {
		fprintf(stderr, "http_start: %s\n", err);
		return 1;
	}
	int port = http_port(srv);
	CHECK(port > 0);
	pthread_create(&th, NULL, loop_thread, &l);

	CHECK(simple(port, "GET", "/metrics", NULL, &r) == 0);
	CHECK(r.status == 200);
	CHECK(strcmp(r.type, "text/plain; version=0.0.4") == 0);
	CHECK(r.body && strstr(r.body, "kvp_calls 1\n") != NULL);
	resp_free(&r);

	CHECK(simple(port, "GET", "/nope", NULL, &r) == 0);
	CHECK(r.status == 404 && body_is(&r, "no such endpoint: /nope\n"));
	resp_free(&r);

	CHECK(simple(port, "GET", "/metadata?key=abc", NULL, &r) == 0);
	CHECK(r.status == 404);
	resp_free(&r);

	const char *json = "{\"segment\":\"node-1\",\"addr\":\"10.0.0.1:15010\"}";
	CHECK(simple(port, "PUT", "/metadata?key=mooncake%2Fnode-1", json, &r) == 0);
	CHECK(r.status == 200 && strcmp(r.type, "application/json") == 0);
	char want[64];
	snprintf(want, sizeof(want), "stored %zu", strlen(json));
	CHECK(body_is(&r, want));
	resp_free(&r);

	/* the query argument arrives URL-decoded */
	CHECK(simple(port, "GET", "/metadata?key=mooncake/node-1", NULL, &r) == 0);
	CHECK(r.status == 200 && body_is(&r, json));
	resp_free(&r);
	CHECK(simple(port, "GET", "/metadata?other=1&key=mooncake%2Fnode-1", NULL, &r) == 0);
	CHECK(r.status == 200 && body_is(&r, json));
	resp_free(&r);
	CHECK(simple(port, "GET", "/metadata", NULL, &r) == 0);
	CHECK(r.status == 400);
	resp_free(&r);

	CHECK(simple(port, "DELETE", "/metadata?key=mooncake/node-1", NULL, &r) == 0);
	CHECK(r.status == 200 && body_is(&r, "deleted"));
	resp_free(&r);
	CHECK(simple(port, "DELETE", "/metadata?key=mooncake/node-1", NULL, &r) == 0);
	CHECK(r.status == 404);
	resp_free(&r);
	CHECK(simple(port, "GET", "/metadata?key=mooncake/node-1", NULL, &r) == 0);
	CHECK(r.status == 404);
	resp_free(&r);

	/* a body of exactly max_body is fine; one byte more is 413 */
	char *big = malloc(MAX_BODY + 2);
	memset(big, 'v', MAX_BODY + 1);
	big[MAX_BODY] = '\0';
	CHECK(simple(port, "PUT", "/metadata?key=big", big, &r) == 0);
	snprintf(want, sizeof(want), "stored %d", MAX_BODY);
	CHECK(r.status == 200 && body_is(&r, want));
	resp_free(&r);
	big[MAX_BODY] = 'v';
	big[MAX_BODY + 1] = '\0';
	int calls = atomic_load(&a.calls);
	CHECK(simple(port, "PUT", "/metadata?key=big", big, &r) == 0);
	CHECK(r.status == 413);
	resp_free(&r);
	CHECK(atomic_load(&a.calls) == calls);	/* the handler never saw it */
	free(big);

	/* a chunked body (no Content-Length) over max_body: 413 as well */
	const char *chunked_hdr = "PUT /metadata?key=chunky HTTP/1.1\r\nHost: t\r\n"
				  "Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
	struct sbuf cb = { 0 };
	for (int i = 0; i < 5; i++) {
		sb_printf(&cb, "%x\r\n", 300);
		for (int k = 0; k < 300; k++)
			sb_printf(&cb, "%c", 'a' + i);
		sb_printf(&cb, "\r\n");
	}
	sb_printf(&cb, "0\r\n\r\n");
	CHECK(cb.len > 5 * 300);
	CHECK(http_do(port, chunked_hdr, strlen(chunked_hdr), cb.p, cb.len, &r) == 0);
	CHECK(r.status == 413);
	resp_free(&r);
	sb_free(&cb);
	CHECK(cb.p == NULL && cb.len == 0);
	/* a chunked body under the limit is collected whole */
	for (int i = 0; i < 3; i++) {
		sb_printf(&cb, "%x\r\n", 100);
		for (int k = 0; k < 100; k++)
			sb_printf(&cb, "%c", 'a' + i);
		sb_printf(&cb, "\r\n");
	}
	sb_printf(&cb, "0\r\n\r\n");
	CHECK(http_do(port, chunked_hdr, strlen(chunked_hdr), cb.p, cb.len, &r) == 0);
	CHECK(r.status == 200 && body_is(&r, "stored 300"));
	resp_free(&r);
	sb_free(&cb);

	/* keep-alive: two requests on one connection */
	const char *two = "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n"
			  "GET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
	CHECK(http_do(port, two, strlen(two), NULL, 0, &r) == 0);
	CHECK(r.status == 200);
	CHECK(r.raw && strstr(r.body, "HTTP/1.1 404") != NULL);
	resp_free(&r);

	CHECK(atomic_load(&a.off_loop) == 0);	/* every handler ran on the loop thread */
	ev_stop(l.loop);
	pthread_join(th, NULL);
	http_stop(srv);

	/* the listener is gone */
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	int fd = net_connect(addr, 2000, err, sizeof(err));
	CHECK(fd == -ECONNREFUSED);
	if (fd >= 0)
		close(fd);
	ev_destroy(l.loop);
	CHECK(count_fds() == fds0);	/* no descriptor leaked */
	free(a.val);

	/* sb_printf grows past its first allocation */
	struct sbuf s = { 0 };
	for (int i = 0; i < 1000; i++)
		sb_printf(&s, "%04d,", i);
	CHECK(s.len == 5000 && s.p[s.len] == '\0' && strncmp(s.p + 4995, "0999,", 5) == 0);
	sb_free(&s);

	if (tl_failures) {
		fprintf(stderr, "t_http: %d check(s) failed\n", tl_failures);
		return 1;
	}
	printf("t_http: ok\n");
	return 0;
}

/* ui: serving the compiled-in status page; see ui.h. */
#include "ui.h"

#include <stdlib.h>
#include <string.h>

#include "http.h"

bool ui_serve(const struct http_req *req, struct http_resp *resp)
{
	if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0)
		return false;
	if (strcmp(req->path, "/") != 0 && strcmp(req->path, "/ui") != 0)
		return false;
	resp->body = malloc(ui_status_html_len);
	if (!resp->body) {
		resp->status = 500;
		return true;
	}
	memcpy(resp->body, ui_status_html, ui_status_html_len);
	resp->body_len = ui_status_html_len;
	resp->status = 200;
	resp->content_type = "text/html; charset=utf-8";
	return true;
}

bool ui_since(const struct http_req *req, uint64_t *since_ms)
{
	const char *v = http_query(req, "since");
	char *end;

	if (!v)
		return false;
	unsigned long long x = strtoull(v, &end, 10);
	*since_ms = (*v && !*end) ? x : 0;
	return true;
}

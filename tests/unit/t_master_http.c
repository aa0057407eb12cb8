/* t_master_http: /metrics is valid Prometheus text (every line checked),
 * /health answers 200, the Mooncake metadata store (GET/PUT/DELETE
 * /metadata?key=K), Mooncake's flag spellings start a working master,
 * /api/status (namespaces too) and the status page (/, /ui),
 * --help / --version / --print-config, a bad config exits 1 with
 * file:line, SIGHUP applies live keys. */
#include "testlib.h"

#include <ctype.h>

#include "json.h"

static bool name_ok(const char *s, size_t n, bool colon)
{
	if (!n || !(isalpha((unsigned char)s[0]) || s[0] == '_' || (colon && s[0] == ':')))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || (colon && s[i] == ':')))
			return false;
	return true;
}

static bool value_ok(const char *s)
{
	char *end;

	if (!strcmp(s, "+Inf") || !strcmp(s, "-Inf") || !strcmp(s, "NaN"))
		return true;
	strtod(s, &end);
	return end != s && (*end == '\0' || *end == ' ');
}

/* Checks one sample line: name{l="v",...} value; returns the name length. */
static size_t sample_ok(const char *line, char *name, size_t cap)
{
	const char *p = line;
	while (isalnum((unsigned char)*p) || *p == '_' || *p == ':')
		p++;
	size_t nlen = (size_t)(p - line);
	if (!name_ok(line, nlen, true) || nlen >= cap)
		return 0;
	memcpy(name, line, nlen);
	name[nlen] = '\0';
	if (*p == '{') {
		p++;
		while (*p != '}') {
			const char *l = p;
			while (isalnum((unsigned char)*p) || *p == '_')
				p++;
			if (!name_ok(l, (size_t)(p - l), false) || *p++ != '=' || *p++ != '"')
				return 0;
			while (*p && *p != '"') {
				if (*p == '\\') {
					p++;
					if (*p != '\\' && *p != '"' && *p != 'n')
						return 0;
				}
				p++;
			}
			if (*p++ != '"')
				return 0;
			if (*p == ',')
				p++;
			else if (*p != '}')
				return 0;
		}
		p++;
	}
	if (*p++ != ' ' || !value_ok(p))
		return 0;
	return nlen;
}

/* Validates the exposition: HELP/TYPE comments, samples of declared
 * families (histograms: _bucket/_sum/_count). Returns the number of samples. */
static int check_prometheus(char *text)
{
	char types[128][96];
	int ntypes = 0, samples = 0, lineno = 0;

	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		lineno++;
		if (line[0] == '#') {
			char kw[8], nm[96], rest[64];
			int k = sscanf(line, "# %7s %95s %63s", kw, nm, rest);
			CHECK(k >= 2 && (!strcmp(kw, "HELP") || !strcmp(kw, "TYPE")),
			      "line %d: bad comment '%s'", lineno, line);
			if (k == 3 && !strcmp(kw, "TYPE")) {
				CHECK(!strcmp(rest, "counter") || !strcmp(rest, "gauge") ||
				      !strcmp(rest, "histogram") || !strcmp(rest, "summary") ||
				      !strcmp(rest, "untyped"), "line %d: type '%s'", lineno, rest);
				if (ntypes < 128)
					snprintf(types[ntypes++], sizeof(types[0]), "%s", nm);
			}
			continue;
		}
		char name[128];
		CHECK(sample_ok(line, name, sizeof(name)), "line %d: bad sample '%s'", lineno, line);
		bool declared = false;
		for (int i = 0; i < ntypes && !declared; i++) {
			size_t tl = strlen(types[i]);
			declared = !strncmp(name, types[i], tl) &&
				   (name[tl] == '\0' || !strcmp(name + tl, "_bucket") ||
				    !strcmp(name + tl, "_sum") || !strcmp(name + tl, "_count"));
		}
		CHECK(declared, "line %d: sample of undeclared family '%s'", lineno, name);
		samples++;
	}
	return samples;
}

/* The Content-Type of the answer to a bodiless request, "" when it has none. */
static void http_type(int port, const char *method, const char *path, char *out, size_t cap)
{
	int fd = tl_connect(port);
	char buf[4096];
	size_t len = 0;

	out[0] = '\0';
	REQUIRE(fd >= 0, "connect");
	int n = snprintf(buf, sizeof(buf), "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n"
			 "Content-Length: 0\r\n\r\n", method, path);
	REQUIRE(tl_send_all(fd, buf, (size_t)n) == 0, "send");
	for (ssize_t r; len < sizeof(buf) - 1 && (r = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0;)
		len += (size_t)r;
	close(fd);
	buf[len] = '\0';
	char *t = strcasestr(buf, "\r\nContent-Type:");
	if (t) {
		t += strlen("\r\nContent-Type:");
		t += strspn(t, " ");
		snprintf(out, cap, "%.*s", (int)strcspn(t, "\r\n"), t);
	}
}

static int api_num(const struct json *j, int tok, const char *key)
{
	int64_t v = -1;

	json_i64(j, json_get(j, tok, key), &v);
	return (int)v;
}

/* /api/status (the status page's document) is JSON with the state the
 * /metrics checks above see; ?since= adds the sample ring; / and /ui are
 * the page. */
static void check_api_status(int port)
{
	static struct json_tok toks[8192];
	struct json j;
	char *body, ctype[128];
	size_t blen;

	CHECK_EQ(tl_http(port, "GET", "/api/status", NULL, 0, &body, &blen), 200);
	REQUIRE(body && json_parse(&j, body, blen, toks, 8192) == 0, "/api/status is JSON: %s", body);
	CHECK(json_str_eq(&j, json_get(&j, 0, "kind"), "master"), "kind");
	CHECK(json_str_eq(&j, json_path(&j, 0, "ha", "role", NULL), "leader"), "role");
	CHECK_EQ(api_num(&j, 0, "keys"), 1);
	CHECK_EQ(api_num(&j, 0, "pending_puts"), 1);
	CHECK_EQ(api_num(&j, 0, "leases"), 1);
	int c = json_get(&j, 0, "counters");
	CHECK_EQ(api_num(&j, c, "gets"), 2);
	CHECK_EQ(api_num(&j, c, "hits"), 1);
	int n0 = json_at(&j, json_get(&j, 0, "nodes"), 0);
	CHECK(json_str_eq(&j, json_get(&j, n0, "name"), "we\"ird\\n"), "escaped node name");
	CHECK(json_str_eq(&j, json_get(&j, n0, "state"), "up"), "node up");
	CHECK_EQ(api_num(&j, n0, "capacity"), 1044480);
	CHECK_EQ(api_num(&j, n0, "tcp_read_bytes"), 1234);
	CHECK_EQ(api_num(&j, c, "tcp_written_bytes"), 567);
	CHECK(json_get(&j, 0, "history") < 0, "no history without since=");
	free(body);

	CHECK_EQ(tl_http(port, "GET", "/api/status?since=0", NULL, 0, &body, &blen), 200);
	REQUIRE(body && json_parse(&j, body, blen, toks, 8192) == 0, "?since=0 is JSON");
	int h = json_get(&j, 0, "history"), t = json_get(&j, h, "t"), p = json_get(&j, h, "puts");
	CHECK(json_is(&j, t, JSON_ARRAY) && j.t[t].count >= 1, "the ring has a sample");
	CHECK(json_is(&j, p, JSON_ARRAY) && j.t[p].count == j.t[t].count, "one array per field");
	free(body);
	CHECK_EQ(tl_http(port, "GET", "/api/status?since=99999999999999", NULL, 0, &body, &blen), 200);
	REQUIRE(body && json_parse(&j, body, blen, toks, 8192) == 0, "?since=future is JSON");
	t = json_path(&j, 0, "history", "t", NULL);
	CHECK(json_is(&j, t, JSON_ARRAY) && j.t[t].count == 0, "nothing after the future");
	free(body);

	CHECK_EQ(tl_http(port, "GET", "/", NULL, 0, &body, NULL), 200);
	CHECK(body && strstr(body, "<title>kvpool status</title>") && strstr(body, "api/status"),
	      "/ is the page");
	free(body);
	http_type(port, "GET", "/ui", ctype, sizeof(ctype));
	CHECK(strncmp(ctype, "text/html", 9) == 0, "/ui's type '%s'", ctype);
	CHECK_EQ(tl_http(port, "GET", "/ui/x", NULL, 0, NULL, NULL), 404);
	CHECK_EQ(tl_http(port, "POST", "/api/status", "x", 1, NULL, NULL), 404);
}

/* A master, a node's segment mounted and a client that declared namespace
 * llama8b (16 tokens a page); *node is the node's connection. */
static struct tl_conn *ns_pool(struct tl_master *m, struct tl_conn **node)
{
	tl_start_master(m, "");
	*node = tl_client(m->port, WIRE_ROLE_NODE, NULL, "h");
	REQUIRE(tl_mount(*node, "n1", "h", 1 << 20, 5, 4096, NULL) > 0, "mount");
	struct tl_conn *c = tl_client(m->port, WIRE_ROLE_CLIENT, NULL, "h");
	struct wbuf b;
	wb_init(&b);
	wb_cstr(&b, "llama8b");
	wb_cstr(&b, "meta-llama/Llama-3.1-8B");
	wb_cstr(&b, "bfloat16");
	wb_u32(&b, 16);
	wb_cstr(&b, "NHD");
	wb_u32(&b, 1);
	struct tl_frame *f = tl_call(c, WIRE_OP_NS_DECLARE, &b);
	wb_free(&b);
	CHECK(f && f->h.status == 0, "NS_DECLARE");
	tl_frame_free(f);
	return c;
}

/* Namespaces on the status page: name, model, keys, declaring clients. */
static void test_api_status_namespaces(void)
{
	static struct json_tok toks[4096];
	struct tl_master m;
	struct json j;
	char *body;
	size_t blen;

	struct tl_conn *node, *c = ns_pool(&m, &node);
	struct tl_obj o;
	CHECK_EQ(tl_put1(c, "llama8b/b0", 100, &o), 0);

	CHECK_EQ(tl_http(m.http_port, "GET", "/api/status", NULL, 0, &body, &blen), 200);
	REQUIRE(body && json_parse(&j, body, blen, toks, 4096) == 0, "/api/status is JSON");
	int ns = json_at(&j, json_get(&j, 0, "namespaces"), 0);
	CHECK(json_str_eq(&j, json_get(&j, ns, "name"), "llama8b"), "namespace name");
	CHECK(json_str_eq(&j, json_get(&j, ns, "model"), "meta-llama/Llama-3.1-8B"), "model");
	CHECK_EQ(api_num(&j, ns, "keys"), 1);
	CHECK_EQ(api_num(&j, ns, "clients"), 1);
	free(body);
	tl_conn_close(c);
	tl_conn_close(node);
	tl_stop_master(&m);
	if (tl_failures)
		tl_dump_log(m.log);
}

static struct tl_frame *keys_call(struct tl_conn *c, uint16_t op, int n, const char *const *k)
{
	struct wbuf b;

	wb_init(&b);
	wb_u32(&b, (uint32_t)n);
	for (int i = 0; i < n; i++)
		wb_cstr(&b, k[i]);
	struct tl_frame *f = tl_call(c, op, &b);
	wb_free(&b);
	return f;
}

static struct tl_frame *stats_call(struct tl_conn *c, uint32_t n, uint32_t have, uint64_t v)
{
	struct wbuf b;

	wb_init(&b);
	wb_u32(&b, n);
	for (uint32_t i = 0; i < have; i++)
		wb_u64(&b, v * (i + 1));
	struct tl_frame *f = tl_call(c, WIRE_OP_CLIENT_STATS, &b);
	wb_free(&b);
	return f;
}

/* CLIENT_STATS sums by path; prefix lookups count the leading run of an
 * EXISTS/GET batch of more than one key, in tokens under a namespace. */
static void test_client_bytes_prefix(void)
{
	static struct json_tok toks[8192];
	struct tl_master m;
	struct json j;
	char *body;
	size_t blen;

	struct tl_conn *node, *c = ns_pool(&m, &node);
	struct tl_obj o;
	CHECK_EQ(tl_put1(c, "llama8b/b0", 100, &o), 0);
	CHECK_EQ(tl_put1(c, "llama8b/b1", 100, &o), 0);
	CHECK_EQ(tl_put1(c, "plain", 100, &o), 0);

	/* the leading run: b0 b1 found, b2 missing, b0 again not counted */
	const char *chain[] = { "llama8b/b0", "llama8b/b1", "llama8b/b2", "llama8b/b0" };
	struct tl_frame *f = keys_call(c, WIRE_OP_EXISTS, 4, chain);
	CHECK(f && f->h.status == 0, "EXISTS");
	tl_frame_free(f);
	/* GET outside a namespace: blocks only; a miss first: a run of 0 */
	const char *g[] = { "nothere", "plain" };
	f = keys_call(c, WIRE_OP_GET, 2, g);
	CHECK(f && f->h.status == 0, "GET");
	tl_frame_free(f);
	const char *g2[] = { "plain", "plain" };
	f = keys_call(c, WIRE_OP_GET, 2, g2);
	CHECK(f && f->h.status == 0, "GET");
	tl_frame_free(f);
	/* one key: not a prefix lookup */
	f = keys_call(c, WIRE_OP_EXISTS, 1, chain);
	tl_frame_free(f);

	/* CLIENT_STATS: 4 known; a fifth (a later client's) skipped; bad ones refused */
	f = stats_call(c, 4, 4, 100);		/* 100 200 300 400 */
	CHECK(f && f->h.status == 0 && f->h.opcode == WIRE_OP_CLIENT_STATS, "CLIENT_STATS");
	tl_frame_free(f);
	f = stats_call(c, 5, 5, 1);		/* 1 2 3 4 (5) */
	CHECK(f && f->h.status == 0, "CLIENT_STATS with more than known");
	tl_frame_free(f);
	f = stats_call(c, 2, 2, 10);		/* fewer: 10 20 */
	CHECK(f && f->h.status == 0, "CLIENT_STATS with fewer");
	tl_frame_free(f);
	f = stats_call(c, 65, 65, 1);
	CHECK(f && f->h.status == KVP_EPROTO, "count > 64 refused");
	tl_frame_free(f);
	f = stats_call(c, 4, 3, 1);
	CHECK(f && f->h.status == KVP_EPROTO, "short body refused");
	tl_frame_free(f);

	CHECK_EQ(tl_http(m.http_port, "GET", "/metrics", NULL, 0, &body, NULL), 200);
	REQUIRE(body, "metrics body");
	CHECK(strstr(body, "kvpool_master_client_bytes_total{path=\"local\"} 111\n"), "local");
	CHECK(strstr(body, "kvpool_master_client_bytes_total{path=\"tcp\"} 222\n"), "tcp");
	CHECK(strstr(body, "kvpool_master_client_bytes_total{path=\"rdma\"} 303\n"), "rdma");
	CHECK(strstr(body, "kvpool_master_client_bytes_total{path=\"disk\"} 404\n"), "disk");
	CHECK(strstr(body, "kvpool_master_prefix_blocks_asked_total 8\n"), "blocks asked");
	CHECK(strstr(body, "kvpool_master_prefix_blocks_found_total 4\n"), "blocks found");
	CHECK(strstr(body, "kvpool_master_prefix_tokens_asked_total 64\n"), "tokens asked");
	CHECK(strstr(body, "kvpool_master_prefix_tokens_found_total 32\n"), "tokens found");
	CHECK(strstr(body, "kvpool_master_requests_total{op=\"client_stats\"} 5\n"), "per-op");
	CHECK(check_prometheus(body) > 100, "valid exposition");
	free(body);

	CHECK_EQ(tl_http(m.http_port, "GET", "/api/status?since=0", NULL, 0, &body, &blen), 200);
	REQUIRE(body && json_parse(&j, body, blen, toks, 8192) == 0, "/api/status is JSON");
	int cb = json_get(&j, 0, "client_bytes"), px = json_get(&j, 0, "prefix");
	CHECK_EQ(api_num(&j, cb, "local"), 111);
	CHECK_EQ(api_num(&j, cb, "tcp"), 222);
	CHECK_EQ(api_num(&j, cb, "rdma"), 303);
	CHECK_EQ(api_num(&j, cb, "disk"), 404);
	CHECK_EQ(api_num(&j, px, "blocks_asked"), 8);
	CHECK_EQ(api_num(&j, px, "blocks_found"), 4);
	CHECK_EQ(api_num(&j, px, "tokens_asked"), 64);
	CHECK_EQ(api_num(&j, px, "tokens_found"), 32);
	int h = json_get(&j, 0, "history"), t = json_get(&j, h, "t");
	static const char *const hf[] = { "client_local_bytes", "client_tcp_bytes",
		"client_rdma_bytes", "client_disk_bytes", "prefix_blocks_asked",
		"prefix_blocks_found", "prefix_tokens_asked", "prefix_tokens_found" };
	for (size_t i = 0; i < sizeof(hf) / sizeof(hf[0]); i++) {
		int a = json_get(&j, h, hf[i]);
		CHECK(json_is(&j, a, JSON_ARRAY) && j.t[a].count == j.t[t].count, "history %s", hf[i]);
	}
	free(body);
	tl_conn_close(c);
	tl_conn_close(node);
	tl_stop_master(&m);
	if (tl_failures)
		tl_dump_log(m.log);
}

static void test_metrics_health_metadata(void)
{
	struct tl_master m;
	char *body;
	size_t blen;

	tl_start_master(&m, "[master]\nmetadata_server = true\n");
	struct tl_conn *node = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	/* a node name that needs escaping in a label */
	int64_t sid = tl_mount(node, "we\"ird\\n", "h", 1 << 20, 5, 4096, NULL);
	REQUIRE(sid > 0, "mount");
	/* a heartbeat with the data server's TCP bytes (optional fields) */
	struct wbuf hb;
	wb_init(&hb);
	wb_u32(&hb, (uint32_t)sid);
	wb_u64(&hb, 0);
	wb_u64(&hb, 0);
	wb_u64(&hb, 1234);
	wb_u64(&hb, 567);
	struct tl_frame *hf = tl_call(node, WIRE_OP_HEARTBEAT, &hb);
	CHECK(hf && hf->h.status == 0, "heartbeat with TCP bytes");
	tl_frame_free(hf);
	wb_free(&hb);
	struct tl_conn *c = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "h");
	struct tl_obj o;
	CHECK_EQ(tl_put1(c, "k1", 100, &o), 0);
	CHECK_EQ(tl_get1(c, "k1", &o), 0);
	CHECK_EQ(tl_get1(c, "missing", &o), KVP_ENOTFOUND);
	CHECK_EQ(tl_put_start1(c, "pending", 100, 1, 0, &o), 0);

	CHECK_EQ(tl_http(m.http_port, "GET", "/health", NULL, 0, &body, NULL), 200);
	CHECK(body && strcmp(body, "{\"status\":\"ok\",\"role\":\"leader\",\"ha_state\":"
			      "\"serving\",\"service_ready\":true}") == 0, "health body '%s'", body);
	free(body);

	CHECK_EQ(tl_http(m.http_port, "GET", "/metrics", NULL, 0, &body, NULL), 200);
	REQUIRE(body, "metrics body");
	CHECK(strstr(body, "kvpool_master_keys 1\n"), "keys gauge");
	CHECK(strstr(body, "kvpool_master_pending_puts 1\n"), "pending puts");
	CHECK(strstr(body, "kvpool_master_active_leases 1\n"), "active leases");
	CHECK(strstr(body, "kvpool_master_segment_capacity_bytes{segment=\"1\",node=\"we\\\"ird\\\\n\"} 1044480\n"),
	      "per-segment capacity with an escaped node label");
	CHECK(strstr(body, "kvpool_master_requests_total{op=\"get\"} 2\n"), "get requests");
	CHECK(strstr(body, "kvpool_master_request_failures_total{op=\"get\"} 1\n"), "get failures");
	CHECK(strstr(body, "kvpool_master_request_duration_seconds_bucket{op=\"get\",le=\"+Inf\"} 2\n"),
	      "latency histogram");
	CHECK(strstr(body, "kvpool_master_request_duration_seconds_count{op=\"put_start\"}"),
	      "put_start histogram");
	CHECK(strstr(body, "kvpool_master_evictions_total 0\n"), "evictions");
	CHECK(strstr(body, "kvpool_master_metadata_keys 0\n"), "metadata keys");
	int samples = check_prometheus(body);
	CHECK(samples > 100, "%d samples", samples);
	free(body);
	CHECK_EQ(tl_http(m.http_port, "GET", "/nope", NULL, 0, NULL, NULL), 404);
	check_api_status(m.http_port);

	/* metadata store */
	int md = m.md_port;
	CHECK_EQ(tl_http(md, "GET", "/metadata?key=seg1", NULL, 0, NULL, NULL), 404);
	const char *v1 = "{\"name\":\"seg1\",\"buffers\":[]}";
	CHECK_EQ(tl_http(md, "PUT", "/metadata?key=seg1", v1, strlen(v1), NULL, NULL), 200);
	CHECK_EQ(tl_http(md, "GET", "/metadata?key=seg1", NULL, 0, &body, &blen), 200);
	CHECK(body && blen == strlen(v1) && !memcmp(body, v1, blen), "GET returns the PUT body");
	free(body);
	const char *v2 = "replaced";
	CHECK_EQ(tl_http(md, "PUT", "/metadata?key=seg1", v2, strlen(v2), NULL, NULL), 200);
	CHECK_EQ(tl_http(md, "GET", "/metadata?key=seg1", NULL, 0, &body, &blen), 200);
	CHECK(body && blen == strlen(v2) && !memcmp(body, v2, blen), "PUT replaces");
	free(body);
	CHECK_EQ(tl_http(md, "PUT", "/metadata?key=other%2Fkey", "x", 1, NULL, NULL), 200);
	CHECK_EQ(tl_http(md, "GET", "/metadata?key=other/key", NULL, 0, NULL, NULL), 200);
	CHECK_EQ(tl_http(md, "DELETE", "/metadata?key=seg1", NULL, 0, NULL, NULL), 200);
	CHECK_EQ(tl_http(md, "GET", "/metadata?key=seg1", NULL, 0, NULL, NULL), 404);
	CHECK_EQ(tl_http(md, "DELETE", "/metadata?key=seg1", NULL, 0, NULL, NULL), 404);
	CHECK_EQ(tl_http(md, "GET", "/metadata", NULL, 0, NULL, NULL), 400);
	/* keys as Mooncake's metadata server takes them: a blank one is
	 * missing, surrounding whitespace is stripped; its answers, errors too,
	 * are application/json */
	CHECK_EQ(tl_http(md, "PUT", "/metadata?key=", "x", 1, NULL, NULL), 400);
	CHECK_EQ(tl_http(md, "PUT", "/metadata?key=%20%09%20", "x", 1, &body, NULL), 400);
	CHECK(body && strcmp(body, "Missing key parameter") == 0, "blank key: '%s'", body);
	free(body);
	CHECK_EQ(tl_http(md, "PUT", "/metadata?key=%20%20sp%20", "v", 1, NULL, NULL), 200);
	CHECK_EQ(tl_http(md, "GET", "/metadata?key=sp", NULL, 0, &body, NULL), 200);
	CHECK(body && strcmp(body, "v") == 0, "a stripped key's value: '%s'", body);
	free(body);
	CHECK_EQ(tl_http(md, "DELETE", "/metadata?key=sp%20", NULL, 0, NULL, NULL), 200);
	CHECK_EQ(tl_http(md, "GET", "/metadata?key=sp", NULL, 0, NULL, NULL), 404);
	char ctype[128];
	http_type(md, "GET", "/metadata", ctype, sizeof(ctype));
	CHECK(strncmp(ctype, "application/json", 16) == 0, "400's type '%s'", ctype);
	http_type(md, "GET", "/metadata?key=nope", ctype, sizeof(ctype));
	CHECK(strncmp(ctype, "application/json", 16) == 0, "404's type '%s'", ctype);
	http_type(md, "GET", "/metadata?key=other/key", ctype, sizeof(ctype));
	CHECK(strncmp(ctype, "application/json", 16) == 0, "200's type '%s'", ctype);
	/* values are bounded */
	size_t big = (4u << 20) + 1;
	char *huge = malloc(big);
	REQUIRE(huge, "oom");
	memset(huge, 'x', big);
	CHECK_EQ(tl_http(md, "PUT", "/metadata?key=huge", huge, big, NULL, NULL), 413);
	free(huge);
	CHECK_EQ(tl_http(md, "GET", "/metadata?key=huge", NULL, 0, NULL, NULL), 404);
	CHECK_EQ(tl_http(m.http_port, "GET", "/metrics", NULL, 0, &body, NULL), 200);
	CHECK(body && strstr(body, "kvpool_master_metadata_keys 1\n"), "one metadata key left");
	free(body);

	/* SIGHUP: a live key (lease_ttl) is applied, a restart key is reported */
	char ini[1024];
	snprintf(ini, sizeof(ini),
		 "[master]\nlisten = 127.0.0.1:%d\nhttp_listen = 127.0.0.1:%d\n"
		 "metadata_listen = 127.0.0.1:%d\nmetadata_server = true\nlease_ttl = 7s\n"
		 "max_connections = 99\n[log]\nlevel = info\n", m.port, m.http_port, m.md_port);
	tl_write_file(m.conf, ini);
	kill(m.pid, SIGHUP);
	bool applied = false;
	for (int i = 0; i < 100 && !applied; i++) {
		tl_sleep_ms(20);
		CHECK_EQ(tl_get1(c, "k1", &o), 0);
		applied = o.lease_ms == 7000;
	}
	CHECK(applied, "lease_ttl reloaded: %llu", (unsigned long long)o.lease_ms);
	char *log = tl_read_file(m.log);
	CHECK(log && strstr(log, "lease_ttl"), "reload logs the change");
	CHECK(log && strstr(log, "max_connections") && strstr(log, "restart"),
	      "reload names the key needing a restart");
	free(log);

	tl_conn_close(c);
	tl_conn_close(node);
	int st = tl_stop_master(&m);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "clean exit");
	if (tl_failures)
		tl_dump_log(m.log);
}

static void test_mooncake_flags(void)
{
	char bin[256], pa[64], pb[64], pc[32];
	int rpc = tl_free_port(), mdp = tl_free_port(), met = tl_free_port();
	const char *dir = tl_tmpdir("mc");
	char log[256];

	tl_fmt(log, sizeof(log), "%s/mc.log", dir);
	tl_fmt(bin, sizeof(bin), "%s/kvpool-master", tl_build());
	snprintf(pa, sizeof(pa), "--port=%d", rpc);
	snprintf(pb, sizeof(pb), "--http_metadata_server_port=%d", mdp);
	snprintf(pc, sizeof(pc), "%d", met);
	char *argv[] = { bin, pa, "--enable_http_metadata_server=true", pb, "--metrics_port", pc,
			 "--rpc_address=127.0.0.1", "--http_metadata_server_host", "127.0.0.1",
			 "--default_kv_lease_ttl=2500", "--eviction_ratio", "0.1",
			 "--eviction_high_watermark_ratio=0.8", "--client_ttl=20",
			 "--put_start_discard_timeout_sec", "40", "--rpc_thread_num=8",
			 "--enable_gc", "false", "--max_threads", "4", "--cluster_id=x", NULL };
	/* the config file default (/etc/kvpool/kvpool.ini) must not leak in:
	 * the flags alone make a working master */
	pid_t pid = tl_spawn(argv, log);
	REQUIRE(tl_wait_port(rpc, 10000), "master from Mooncake flags on %d", rpc);
	REQUIRE(tl_wait_port(met, 5000), "metrics port %d", met);
	struct tl_conn *node = tl_client(rpc, WIRE_ROLE_NODE, NULL, "h");
	REQUIRE(tl_mount(node, "mc", "h", 1 << 20, 5, 4096, NULL) > 0, "mount");
	struct tl_conn *c = tl_client(rpc, WIRE_ROLE_CLIENT, NULL, "h");
	struct tl_obj o;
	CHECK_EQ(tl_put1(c, "mk", 10, &o), 0);
	CHECK_EQ(tl_get1(c, "mk", &o), 0);
	CHECK_EQ(o.lease_ms, 2500);			/* --default_kv_lease_ttl (ms) */
	CHECK_EQ(tl_http(met, "GET", "/health", NULL, 0, NULL, NULL), 200);
	CHECK_EQ(tl_http(mdp, "PUT", "/metadata?key=a", "1", 1, NULL, NULL), 200);
	CHECK_EQ(tl_http(mdp, "GET", "/metadata?key=a", NULL, 0, NULL, NULL), 200);
	char *text = tl_read_file(log);
	CHECK(text && strstr(text, "--rpc_thread_num has no effect"), "notice for an ignored flag");
	CHECK(text && strstr(text, "--enable_gc has no effect"), "notice for --enable_gc");
	if (tl_failures)
		fprintf(stderr, "log:\n%s\n", text ? text : "");
	free(text);
	tl_conn_close(c);
	tl_conn_close(node);
	int st = tl_kill(pid, SIGINT, 5000);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "SIGINT: clean exit");

	/* --print-config shows the mapped keys */
	char *out = NULL;
	char *pargv[] = { bin, "--client_ttl", "20", "--put_start_discard_timeout_sec=40",
			  "--eviction_high_watermark_ratio=0.8", "--port=15999", "--print-config", NULL };
	st = tl_run(pargv, &out, 5000);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "--print-config exit 0");
	CHECK(out && strstr(out, "client_ttl") && strstr(out, "20s"), "client_ttl = 20s");
	CHECK(out && strstr(out, "put_timeout") && strstr(out, "40s"), "put_timeout = 40s");
	CHECK(out && strstr(out, ":15999"), "listen port");
	free(out);
}

static void test_cli(void)
{
	char bin[256], path[256];
	char *out = NULL;
	const char *dir = tl_tmpdir("cli");

	tl_fmt(bin, sizeof(bin), "%s/kvpool-master", tl_build());
	char *h[] = { bin, "--help", NULL };
	int st = tl_run(h, &out, 5000);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "--help exit 0");
	CHECK(out && strstr(out, "usage: kvpool-master") && strstr(out, "--metrics_port") &&
	      strstr(out, "master.lease_ttl"), "--help text");
	free(out);

	char *v[] = { bin, "--version", NULL };
	st = tl_run(v, &out, 5000);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && out && strstr(out, "kvpool-master "), "--version");
	free(out);

	char *u[] = { bin, "--no_such_flag=1", NULL };
	st = tl_run(u, &out, 5000);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0, "unknown flag fails");
	CHECK(out && strstr(out, "no_such_flag") && strstr(out, "--help"), "names it, hints --help");
	free(out);

	char *b[] = { bin, "--enable_http_metadata_server=maybe", NULL };
	st = tl_run(b, &out, 5000);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0, "bad bool fails");
	free(out);

	/* bad config: exit 1 with file:line */
	tl_fmt(path, sizeof(path), "%s/bad.ini", dir);
	tl_write_file(path, "[master]\nlease_ttl = 5s\nno_such_key = 1\n");
	char *c1[] = { bin, "-c", path, NULL };
	st = tl_run(c1, &out, 5000);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "bad config: exit 1");
	char want[300];
	snprintf(want, sizeof(want), "%s:3", path);
	CHECK(out && strstr(out, want), "message names %s: '%s'", want, out ? out : "");
	free(out);

	tl_write_file(path, "[master]\neviction_ratio = 7\n");
	st = tl_run(c1, &out, 5000);
	snprintf(want, sizeof(want), "%s:2", path);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && out && strstr(out, want), "bad value: %s",
	      out ? out : "");
	free(out);

	char *c2[] = { bin, "-o", "master.lease_ttl=banana", NULL };
	st = tl_run(c2, &out, 5000);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "bad -o: exit 1");
	free(out);

	/* a port in use: exit 1 with the address named */
	int busy = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	REQUIRE(bind(busy, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(busy, 1) == 0, "bind");
	getsockname(busy, (struct sockaddr *)&a, &al);
	char lo[64];
	snprintf(lo, sizeof(lo), "master.listen=127.0.0.1:%d", ntohs(a.sin_port));
	char *c3[] = { bin, "-o", lo, "-o", "master.http_listen=127.0.0.1:0", NULL };
	st = tl_run(c3, &out, 5000);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "port in use: exit 1");
	close(busy);
	free(out);
}

int main(void)
{
	test_cli();
	test_metrics_health_metadata();
	test_api_status_namespaces();
	test_client_bytes_prefix();
	test_mooncake_flags();
	return tl_done();
}

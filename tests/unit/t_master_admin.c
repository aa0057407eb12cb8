/* t_master_admin: the admin endpoints Mooncake's master serves on its
 * metrics port answer in Mooncake's formats (master_admin_service.cpp):
 * /health /role /ha_status /leader /metrics/summary /get_all_segments
 * /get_segments_detail /query_segment /query_key /batch_query_keys
 * /get_all_keys, their JSON error bodies, and the metadata store's words
 * (http_metadata_server.cpp: missing key, rpc_meta keys). Against a real
 * kvpool-master with fake nodes; JSON bodies are parsed by python3 when
 * it is installed. */
#include "testlib.h"

#define SEG_SIZE (1u << 20)
#define ALIGN 4096

static struct tl_master M;
static char tmp[256];

static int get(const char *path, char **body)
{
	return tl_http(M.http_port, "GET", path, NULL, 0, body, NULL);
}

/* body is one JSON document (python3's json module agrees); true without
 * python3. */
static bool json_ok(const char *body)
{
	char path[300], env[] = "/usr/bin/env", py[] = "python3";

	if (!body || access("/usr/bin/env", X_OK) != 0 ||
	    tl_run((char *[]){ "/bin/sh", "-c", "command -v python3", NULL }, NULL, 5000) != 0)
		return body != NULL;
	tl_fmt(path, sizeof(path), "%s/doc.json", tmp);
	tl_write_file(path, body);
	char *argv[] = { env, py, "-c", "import json,sys; json.load(open(sys.argv[1]))", path,
			 NULL };
	int st = tl_run(argv, NULL, 5000);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void expect_body(const char *path, int status, const char *want)
{
	char *body = NULL;

	CHECK_EQ(get(path, &body), status);
	CHECK(body && !strcmp(body, want), "%s: got '%s', want '%s'", path, body ? body : "",
	      want);
	free(body);
}

int main(void)
{
	struct tl_obj a, b, w, p;
	char want[2048], *body = NULL;

	tl_fmt(tmp, sizeof(tmp), "%s", tl_tmpdir("admin"));
	tl_start_master(&M, "[master]\nmetadata_server = true\n");
	struct tl_conn *n1 = tl_client(M.port, WIRE_ROLE_NODE, NULL, "h1");
	struct tl_conn *n2 = tl_client(M.port, WIRE_ROLE_NODE, NULL, "h2");
	n1->auto_free = n2->auto_free = true;
	int64_t s1 = tl_mount(n1, "seg-a", "h1", SEG_SIZE, 0x11, ALIGN, NULL);
	int64_t s2 = tl_mount_spill(n2, "seg-b", "h2", SEG_SIZE, 0x22, ALIGN, 1 << 20, NULL);
	REQUIRE(s1 > 0 && s2 > 0, "mount");
	struct tl_conn *c = tl_client(M.port, WIRE_ROLE_CLIENT, NULL, "h3");

	/* the runtime: a non-HA master is a serving leader without a view */
	expect_body("/health", 200, "{\"status\":\"ok\",\"role\":\"leader\",\"ha_state\":\"serving\","
				    "\"service_ready\":true}");
	expect_body("/role", 200, "leader");
	expect_body("/ha_status", 200, "serving");
	expect_body("/leader", 200, "{\"present\":false}");

	/* objects: k1 on seg-a, k2 with two replicas, one only on disk, one pending */
	CHECK_EQ(tl_put_start1(c, "k1", 100, 1, (uint32_t)s1, &a), 0);
	CHECK_EQ(tl_put_end1(c, "k1", a.generation, 1), 0);
	CHECK_EQ(tl_put_start1(c, "k2", 300, 2, 0, &b), 0);
	REQUIRE(b.nrep == 2, "two replicas");
	CHECK_EQ(tl_put_end1(c, "k2", b.generation, 2), 0);
	CHECK_EQ(tl_put_start1(c, "we\"ird\n", 50, 1, (uint32_t)s1, &w), 0);
	CHECK_EQ(tl_put_end1(c, "we\"ird\n", w.generation, 3), 0);
	CHECK_EQ(tl_put_start1(c, "pending", 10, 1, 0, &p), 0);
	struct tl_extent disk = { "ondisk", 1, 0, 4096, 700, 9, 1, 1 };
	uint32_t adopted = 0, rejected = 0;
	CHECK_EQ(tl_report(n2, (uint32_t)s2, 1, &disk, &adopted, &rejected), 0);
	CHECK_EQ(adopted, 1);

	/* segments */
	expect_body("/get_all_segments", 200, "seg-a\nseg-b\n");
	snprintf(want, sizeof(want), "seg-a\nUsed(bytes): %d\nCapacity(bytes) : %u\n", 3 * ALIGN,
		 SEG_SIZE - ALIGN);
	expect_body("/query_segment?segment=seg-a", 200, want);
	expect_body("/query_segment?segment=nope", 500, "Failed to query segment");
	CHECK_EQ(get("/get_segments_detail", &body), 200);
	CHECK(json_ok(body), "segments detail is JSON: %s", body);
	snprintf(want, sizeof(want), "{\"segment_name\":\"seg-a\",\"segment_id\":\"%lld-17\","
		 "\"client_id\":\"0-%lld\",\"base_address\":\"0x0\",\"size_bytes\":%u,",
		 (long long)s1, (long long)s1, SEG_SIZE - ALIGN);
	const char *det = body ? body : "";
	CHECK(strstr(det, "{\"total_segments\":2,\"segments\":[") == det, "total: %s", det);
	CHECK(strstr(det, want), "seg-a detail: %s", det);
	CHECK(body && strstr(body, "\"te_endpoint\":\"127.0.0.1:1\",\"protocol\":\"tcp\","
				   "\"status\":\"OK\",\"allocator_used_bytes\":12288,"), "%s", det);
	free(body);

	/* keys */
	snprintf(want, sizeof(want), "{\"success\":true,\"data\":[{\"size_\":100,"
		 "\"buffer_address_\":%llu,\"protocol_\":\"tcp\",\"transport_endpoint_\":"
		 "\"127.0.0.1:1\"}]}", (unsigned long long)(a.rep[0].off + 64 + 2));
	expect_body("/query_key?key=k1", 200, want);
	expect_body("/query_key?key=missing", 404, "{\"success\":false,\"error_code\":-704,"
						     "\"error_message\":\"OBJECT_NOT_FOUND\"}");
	expect_body("/query_key?key=pending", 404, "{\"success\":false,\"error_code\":-704,"
						     "\"error_message\":\"OBJECT_NOT_FOUND\"}");
	expect_body("/query_key", 404, "{\"success\":false,\"error_code\":-400,"
				       "\"error_message\":\"INVALID_KEY\"}");
	expect_body("/query_key?key=ondisk", 200, "{\"success\":true,\"data\":[]}");
	CHECK_EQ(get("/query_key?key=k2", &body), 200);
	CHECK(json_ok(body) && body && strstr(body, "},{\"size_\":300,"), "two replicas: %s",
	      body ? body : "");
	free(body);
	CHECK_EQ(tl_remove(c, "k1", false), 0);		/* the queries took no lease */
	CHECK_EQ(tl_put_start1(c, "k1", 100, 1, (uint32_t)s1, &a), 0);
	CHECK_EQ(tl_put_end1(c, "k1", a.generation, 1), 0);

	CHECK_EQ(get("/batch_query_keys?keys=k1,missing,ondisk,k1,we%22ird%0A", &body), 200);
	CHECK(json_ok(body), "batch query is JSON: %s", body);
	snprintf(want, sizeof(want), "{\"success\":true,\"data\":{\"k1\":{\"ok\":true,\"values\":"
		 "[{\"size_\":100,\"buffer_address_\":%llu,\"protocol_\":\"tcp\","
		 "\"transport_endpoint_\":\"127.0.0.1:1\"}]},\"missing\":{\"ok\":false,\"error\":"
		 "\"OBJECT_NOT_FOUND\"},\"ondisk\":{\"ok\":true,\"values\":[],\"local_disk_values\":"
		 "[{\"client_id\":\"0-%lld\",\"object_size\":700,\"transport_endpoint\":"
		 "\"127.0.0.1:1\"}]},\"we\\\"ird\\u000a\":{\"ok\":true,", (unsigned long long)
		 (a.rep[0].off + 64 + 2), (long long)s2);
	CHECK(body && strstr(body, want) == body, "batch query:\n%s\nwant\n%s", body ? body : "",
	      want);
	free(body);
	expect_body("/batch_query_keys", 400, "{\"success\":false,\"error\":\"No keys provided. "
					      "Use ?keys=key1,key2,...\"}");
	expect_body("/get_all_keys", 200, "k1\nk2\nondisk\nwe\"ird\n\n");

	/* the summary: Mooncake's line, rates since the previous summary */
	CHECK_EQ(get("/metrics/summary", &body), 200);
	const char *sum = body ? body : "";
	CHECK(strstr(sum, "role=leader, state=serving, service_ready=true, master={Mem "
			  "Storage: ") == sum, "summary: %s", sum);
	CHECK(strstr(sum, " KB / 1.99 MB (1."), "memory use: %s", sum);
	CHECK(strstr(sum, "%) | NVMe-oF SSD: 0 B / 0 B | SSD Storage: 0 B / 1.00 MB | Keys: 4 "
			  "(soft-pinned: -) | Clients: 3 | Requests (Success/Total per sec): "
			  "PutStart=0.00/0.00, PutEnd="), "%s", sum);
	CHECK(strstr(sum, "}, ha={HA Metrics Summary: state=serving}"), "%s", sum);
	free(body);
	for (int i = 0; i < 5; i++)
		tl_get1(c, "k1", &a);
	tl_sleep_ms(100);
	CHECK_EQ(get("/metrics/summary", &body), 200);
	CHECK(body && strstr(body, ", Get=") && !strstr(body, ", Get=0.00/0.00"), "get rate: %s",
	      body ? body : "");
	free(body);
	CHECK_EQ(get("/metrics", &body), 200);		/* still Prometheus */
	CHECK(body && strstr(body, "kvpool_master_keys 4\n"), "metrics");
	free(body);
	CHECK_EQ(tl_http(M.http_port, "POST", "/get_all_keys", NULL, 0, NULL, NULL), 404);
	CHECK_EQ(get("/no_such_endpoint", NULL), 404);

	/* the metadata store answers in Mooncake's words */
	int md = M.md_port;
	CHECK_EQ(tl_http(md, "GET", "/metadata", NULL, 0, &body, NULL), 400);
	CHECK(body && !strcmp(body, "Missing key parameter"), "'%s'", body);
	free(body);
	CHECK_EQ(tl_http(md, "GET", "/metadata?key=x", NULL, 0, &body, NULL), 404);
	CHECK(body && !strcmp(body, "metadata not found"), "'%s'", body);
	free(body);
	const char *k = "/metadata?key=mooncake%2Frpc_meta%2Fnode1";
	CHECK_EQ(tl_http(md, "PUT", k, "v1", 2, &body, NULL), 200);
	CHECK(body && !strcmp(body, "metadata updated"), "'%s'", body);
	free(body);
	CHECK_EQ(tl_http(md, "PUT", k, "v1", 2, &body, NULL), 200);
	CHECK(body && !strcmp(body, "metadata unchanged"), "'%s'", body);
	free(body);
	CHECK_EQ(tl_http(md, "PUT", k, "v2", 2, &body, NULL), 400);
	CHECK(body && !strcmp(body, "Duplicate rpc_meta key not allowed"), "'%s'", body);
	free(body);
	CHECK_EQ(tl_http(md, "PUT", "/metadata?key=ram%2Fa", "1", 1, NULL, NULL), 200);
	CHECK_EQ(tl_http(md, "PUT", "/metadata?key=ram%2Fa", "2", 1, NULL, NULL), 200);
	CHECK_EQ(tl_http(md, "DELETE", k, NULL, 0, &body, NULL), 200);
	CHECK(body && !strcmp(body, "metadata deleted"), "'%s'", body);
	free(body);
	CHECK_EQ(tl_http(md, "GET", "/health", NULL, 0, &body, NULL), 200);
	CHECK(body && !strcmp(body, "OK"), "'%s'", body);
	free(body);

	tl_conn_close(c);
	tl_conn_close(n1);
	tl_conn_close(n2);
	int st = tl_stop_master(&M);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "clean exit");
	if (tl_failures)
		tl_dump_log(M.log);
	return tl_done();
}

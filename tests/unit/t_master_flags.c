/* t_master_flags: kvpool-master takes every flag of Mooncake's
 * mooncake_master (each DEFINE_* in mooncake-store/src/master.cpp at
 * 3b5a59413, listed below), in every gflags spelling (--flag=value,
 * --flag value, -flag, --flag / --noflag / --flag=false for booleans):
 * all at once, the mapped ones show in --print-config, each one without
 * effect says so once; --config_path reads JSON and YAML files (the
 * command line wins); bad values, unknown flags and --no of a non-boolean
 * are usage errors (exit 2); --help lists exactly these flags. */
#include "testlib.h"

struct mc { const char *name; char type; const char *value; };

/* type: b bool, i integer, d double, s string, t duration; value: a valid
 * one (booleans: given by name). Every flag of master.cpp, in its order. */
static const struct mc mc_flags[] = {
	{ "config_path", 's', NULL },		/* tested on its own below */
	{ "port", 'i', "15999" }, { "max_threads", 'i', "4" },
	{ "enable_metric_reporting", 'b', NULL }, { "metrics_port", 'i', "16002" },
	{ "metrics_host", 's', "127.0.0.1" }, { "default_kv_lease_ttl", 't', "2500" },
	{ "default_kv_soft_pin_ttl", 't', "10m" }, { "max_kv_soft_pin_ttl", 't', "2h" },
	{ "allow_evict_soft_pinned_objects", 'b', NULL }, { "eviction_ratio", 'd', "0.1" },
	{ "eviction_high_watermark_ratio", 'd', "0.8" }, { "nof_eviction_ratio", 'd', "0.1" },
	{ "nof_eviction_high_watermark_ratio", 'd', "0.9" }, { "rpc_thread_num", 'i', "8" },
	{ "rpc_port", 'i', "16001" }, { "rpc_address", 's', "127.0.0.1" },
	{ "rpc_interface", 's', "lo" }, { "rpc_conn_timeout_seconds", 'i', "30" },
	{ "rpc_enable_tcp_no_delay", 'b', NULL }, { "enable_ha", 'b', NULL },
	{ "enable_offload", 'b', NULL }, { "offload_on_evict", 'b', NULL },
	{ "offload_force_evict", 'b', NULL }, { "offloading_queue_limit", 'i', "100" },
	{ "offload_cap_ratio", 'd', "0.5" }, { "promotion_on_hit", 'b', NULL },
	{ "promotion_admission_threshold", 'i', "2" }, { "promotion_queue_limit", 'i', "10" },
	{ "promotion_max_per_heartbeat", 'i', "1" }, { "dynamic_replication_mode", 's', "off" },
	{ "dynamic_replication_heat_window_seconds", 'i', "10" },
	{ "dynamic_replication_admission_qps_threshold", 'd', "0.8" },
	{ "dynamic_replication_max_memory_replicas", 'i', "2" }, { "enable_kv_events", 'b', NULL },
	{ "kv_events_bind_endpoint", 's', "tcp://0.0.0.0:5557" },
	{ "kv_events_model_name", 's', "m" }, { "kv_events_backend_id", 's', "b" },
	{ "kv_events_tenant_id", 's', "default" }, { "kv_events_additional_salt", 's', "x" },
	{ "kv_events_lora_name", 's', "l" }, { "kv_events_block_size", 'i', "16" },
	{ "kv_events_dp_rank", 'i', "0" }, { "kv_events_emit_legacy_compat", 'b', NULL },
	{ "kv_events_emit_object_key", 'b', NULL }, { "kv_events_queue_capacity", 'i', "65536" },
	{ "ha_backend_type", 's', "etcd" }, { "ha_backend_connstring", 's', "" },
	{ "etcd_endpoints", 's', "127.0.0.1:2379" }, { "client_ttl", 'i', "7" },
	{ "nof_heartbeat_interval_sec", 'i', "5" }, { "nof_heartbeat_probe_timeout_ms", 'i', "100" },
	{ "nof_heartbeat_failures_threshold", 'i', "3" }, { "root_fs_dir", 's', "/tmp" },
	{ "global_file_segment_size", 'i', "1024" }, { "cluster_id", 's', "c1" },
	{ "enable_oplog", 'b', NULL }, { "oplog_poll_interval_ms", 'i', "1000" },
	{ "oplog_batch_max_entries", 'i', "1024" }, { "batch_oplog_retry_timeout_sec", 'i', "180" },
	{ "memory_allocator", 's', "offset" }, { "allocation_strategy", 's', "random" },
	{ "enable_http_metadata_server", 'b', NULL }, { "http_metadata_server_port", 'i', "16003" },
	{ "http_metadata_server_host", 's', "127.0.0.1" },
	{ "enable_metadata_cleanup_on_timeout", 'b', NULL }, { "pod_name", 's', "p" },
	{ "pod_namespace", 's', "n" }, { "put_start_discard_timeout_sec", 'i', "40" },
	{ "put_start_release_timeout_sec", 'i', "600" }, { "enable_disk_eviction", 'b', NULL },
	{ "quota_bytes", 'i', "0" }, { "enable_multi_tenants", 'b', NULL },
	{ "tenant_quota_connector_type", 's', "file" }, { "tenant_quota_connector_uri", 's', "" },
	{ "snapshot_backup_dir", 's', "/tmp" }, { "enable_snapshot_restore", 'b', NULL },
	{ "enable_snapshot", 'b', NULL }, { "snapshot_interval_seconds", 'i', "60" },
	{ "snapshot_child_timeout_seconds", 'i', "60" }, { "snapshot_retention_count", 'i', "3" },
	{ "snapshot_object_store_type", 's', "local" }, { "snapshot_payload_store_type", 's', "" },
	{ "snapshot_payload_backend_type", 's', "" }, { "snapshot_catalog_store_type", 's', "" },
	{ "snapshot_catalog_backend_type", 's', "" },
	{ "snapshot_catalog_store_connstring", 's', "" },
	{ "snapshot_catalog_backend_connstring", 's', "" },
	{ "max_total_finished_tasks", 'i', "10000" }, { "max_total_pending_tasks", 'i', "10000" },
	{ "max_total_processing_tasks", 'i', "10000" }, { "pending_task_timeout_sec", 'i', "300" },
	{ "processing_task_timeout_sec", 'i', "300" }, { "max_retry_attempts", 'i', "10" },
	{ "cxl_path", 's', "/dev/dax0.0" }, { "cxl_size", 'i', "0" }, { "enable_cxl", 'b', NULL },
};
#define NMC (sizeof(mc_flags) / sizeof(mc_flags[0]))

/* Flags the table has besides master.cpp's: an older release's, glog's,
 * kvpool's own spelling. */
static const char *const extra_flags[] = {
	"enable_gc", "minloglevel", "v", "logtostderr", "alsologtostderr", "colorlogtostderr",
	"stderrthreshold", "log_dir", "vmodule", "max_log_size", "logbufsecs",
	"cluster_token_file",
};
#define NEXTRA (sizeof(extra_flags) / sizeof(extra_flags[0]))

static char *bin;
static char args[4 * NMC + 64][160];

static int run(char **argv, char **out)
{
	return tl_run(argv, out, 10000);
}

static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; p && (p = strstr(p, line)); p += n)
		if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == ' '))
			return true;
	return false;
}

static int count(const char *text, const char *what)
{
	int n = 0;

	for (const char *p = text; p && (p = strstr(p, what)); p += strlen(what))
		n++;
	return n;
}

/* Every flag once, the spelling rotating through the gflags forms. */
static void test_all_at_once(const char *tok)
{
	char *argv[4 * NMC + 64];
	int n = 0, none = 0;

	argv[n++] = bin;
	for (size_t i = 0; i < NMC; i++) {
		const struct mc *f = &mc_flags[i];
		if (!strcmp(f->name, "config_path"))
			continue;
		if (f->type == 'b') {
			/* promotion_on_hit and allow_evict_soft_pinned_objects: on */
			bool on = !strcmp(f->name, "promotion_on_hit") ||
				  !strcmp(f->name, "allow_evict_soft_pinned_objects");
			const char *form = on ? (i % 2 ? "--%s" : "--%s=true") :
					   (i % 3 == 0 ? "--no%s" : i % 3 == 1 ? "--%s=false" :
					    "-%s=0");
			tl_fmt(args[n], sizeof(args[n]), form, f->name);
			argv[n] = args[n];
			n++;
		} else if (i % 2) {
			tl_fmt(args[n], sizeof(args[n]), "--%s=%s", f->name, f->value);
			argv[n] = args[n];
			n++;
		} else {
			tl_fmt(args[n], sizeof(args[n]), "%s%s", i % 4 ? "--" : "-", f->name);
			argv[n] = args[n];
			n++;
			argv[n++] = (char *)f->value;
		}
	}
	argv[n++] = "--enable_gc";
	argv[n++] = "--minloglevel=1";
	argv[n++] = "--logtostderr";
	argv[n++] = "--cluster_token_file";
	argv[n++] = (char *)tok;
	argv[n++] = "--print-config";
	argv[n] = NULL;

	char *out = NULL;
	int st = run(argv, &out);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "every flag at once: exit %#x\n%s", st,
	      out ? out : "");
	/* mapped */
	CHECK(has_line(out, "master.listen = 127.0.0.1:16001"), "rpc_port beats port, rpc_interface lo");
	CHECK(has_line(out, "master.http_listen = 127.0.0.1:16002"), "metrics_host:metrics_port");
	CHECK(has_line(out, "master.lease_ttl = 2500ms"), "default_kv_lease_ttl");
	CHECK(has_line(out, "master.soft_pin_ttl = 10m"), "default_kv_soft_pin_ttl");
	CHECK(has_line(out, "master.max_soft_pin_ttl = 2h"), "max_kv_soft_pin_ttl");
	CHECK(has_line(out, "master.evict_soft_pinned = true"), "allow_evict_soft_pinned_objects");
	CHECK(has_line(out, "master.eviction_ratio = 0.1"), "eviction_ratio");
	CHECK(has_line(out, "master.eviction_high_watermark = 0.8"), "eviction_high_watermark_ratio");
	CHECK(has_line(out, "spill.promote_on_hit = true"), "promotion_on_hit");
	CHECK(has_line(out, "master.client_ttl = 7s"), "client_ttl");
	CHECK(has_line(out, "master.allocation_strategy = random"), "allocation_strategy");
	CHECK(has_line(out, "master.metadata_server = false"), "enable_http_metadata_server");
	CHECK(has_line(out, "master.metadata_listen = 127.0.0.1:16003"), "metadata host:port");
	CHECK(has_line(out, "master.put_timeout = 40s"), "put_start_discard_timeout_sec");
	CHECK(has_line(out, "log.level = warning"), "minloglevel");
	CHECK(has_line(out, "master.ha = none"), "enable_ha (false here)");
	CHECK(has_line(out, "master.cluster_id = c1"), "cluster_id");
	CHECK(has_line(out, "master.ha_endpoints = 127.0.0.1:2379"),
	      "an empty ha_backend_connstring falls back to etcd_endpoints");
	CHECK(out && strstr(out, "cluster.token_file = /"), "cluster_token_file");
	/* each flag without effect said so, once */
	for (size_t i = 0; i < NMC; i++) {
		char what[128];
		tl_fmt(what, sizeof(what), "--%s has no effect", mc_flags[i].name);
		none += count(out, what);
		CHECK(count(out, what) <= 1, "one notice for %s", mc_flags[i].name);
	}
	printf("%zu Mooncake flags at once: %d accepted without effect, %zu mapped\n", NMC - 1,
	       none, NMC - 1 - (size_t)none);
	CHECK(none > 50 && none < (int)NMC - 15, "%d notices", none);
	free(out);
}

static void test_config_path(void)
{
	const char *dir = tl_tmpdir("flags");
	char json[256], yaml[256], a[300];
	char *out = NULL;

	tl_fmt(json, sizeof(json), "%s/master.json", dir);
	tl_write_file(json, "{\n  \"rpc_port\": 16101, \"rpc_address\": \"127.0.0.1\",\n"
		      "  \"default_kv_lease_ttl\": \"3s\", \"eviction_ratio\": 0.2,\n"
		      "  \"enable_http_metadata_server\": true, \"enable_cxl\": false,\n"
		      "  \"client_ttl\": 9\n}\n");
	tl_fmt(a, sizeof(a), "--config_path=%s", json);
	char *argv[] = { bin, a, "--client_ttl", "4", "--print-config", NULL };
	int st = run(argv, &out);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "JSON config_path: exit %#x\n%s", st,
	      out ? out : "");
	CHECK(has_line(out, "master.listen = 127.0.0.1:16101"), "JSON rpc_port, rpc_address");
	CHECK(has_line(out, "master.lease_ttl = 3s"), "JSON lease");
	CHECK(has_line(out, "master.eviction_ratio = 0.2"), "JSON eviction_ratio");
	CHECK(has_line(out, "master.metadata_server = true"), "JSON bool");
	CHECK(has_line(out, "master.client_ttl = 4s"), "the command line wins over the file");
	CHECK(out && strstr(out, "--enable_cxl has no effect"), "notice for a file setting");
	free(out);

	tl_fmt(yaml, sizeof(yaml), "%s/master.yaml", dir);
	tl_write_file(yaml, "# mooncake_master settings\nrpc_port: 16102\n"
		      "etcd_endpoints: http://127.0.0.1:2379   # a URL with colons\n"
		      "put_start_discard_timeout_sec: 12\nnot_a_flag: 1\n\n");
	char *yargv[] = { bin, "-config_path", yaml, "--print-config", NULL };
	st = run(yargv, &out);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "YAML config_path: exit %#x\n%s", st,
	      out ? out : "");
	CHECK(out && strstr(out, "master.listen = 0.0.0.0:16102"), "YAML rpc_port");
	CHECK(has_line(out, "master.put_timeout = 12s"), "YAML put timeout");
	CHECK(out && strstr(out, "'not_a_flag' is not a mooncake_master setting"), "unknown key");
	free(out);

	tl_write_file(yaml, "rpc_port: {a: 1}\n");
	st = run(yargv, &out);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2, "nested value: exit 2");
	free(out);
	char *missing[] = { bin, "--config_path=/nonexistent/x.json", "--print-config", NULL };
	st = run(missing, &out);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2, "missing file: exit 2");
	free(out);
}

/* Mooncake's HA flags configure the election (docs/ha.md): enable_ha,
 * ha_backend_connstring over the legacy etcd_endpoints whatever their
 * order, cluster_id; a backend other than etcd is refused. */
static void test_ha(void)
{
	char *out = NULL;
	char *both[] = { bin, "--ha_backend_connstring=10.0.0.1:2379;10.0.0.2:2379",
			 "--enable_ha=true", "--ha_backend_type", "etcd",
			 "--etcd_endpoints=10.9.9.9:2379", "-cluster_id=pool-a", "--print-config",
			 NULL };
	int st = run(both, &out);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "HA flags: exit %#x\n%s", st, out ? out : "");
	CHECK(has_line(out, "master.ha = etcd"), "--enable_ha=true");
	CHECK(has_line(out, "master.ha_endpoints = 10.0.0.1:2379;10.0.0.2:2379"),
	      "ha_backend_connstring wins over etcd_endpoints given after it");
	CHECK(has_line(out, "master.cluster_id = pool-a"), "cluster_id");
	static const char *const quiet[] = { "enable_ha", "ha_backend_type",
					     "ha_backend_connstring", "etcd_endpoints",
					     "cluster_id" };
	for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++) {
		char what[96];
		tl_fmt(what, sizeof(what), "--%s has no effect", quiet[i]);
		CHECK(out && !strstr(out, what), "--%s takes effect", quiet[i]);
	}
	free(out);

	char *legacy[] = { bin, "--enable_ha", "--etcd_endpoints", "127.0.0.1:2379",
			   "--print-config", NULL };
	st = run(legacy, &out);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "legacy HA flags: exit %#x", st);
	CHECK(has_line(out, "master.ha = etcd"), "bare --enable_ha");
	CHECK(has_line(out, "master.ha_endpoints = 127.0.0.1:2379"), "legacy etcd_endpoints");
	free(out);

	char *redis[] = { bin, "--enable_ha", "--ha_backend_type=redis",
			  "--ha_backend_connstring=127.0.0.1:6379", "--print-config", NULL };
	st = run(redis, &out);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0, "--ha_backend_type=redis: exit %#x", st);
	CHECK(out && strstr(out, "etcd only"), "says why:\n%s", out ? out : "");
	free(out);
}

static void test_errors(void)
{
	static const char *const bad[][3] = {
		{ "--max_threads=many", NULL, NULL },
		{ "--eviction_ratio", "half", NULL },
		{ "--enable_ha=maybe", NULL, NULL },
		{ "--default_kv_lease_ttl=soon", NULL, NULL },
		{ "--offloading_queue_limit=-1", NULL, NULL },
		{ "--noport", NULL, NULL },		/* --no of a non-boolean */
		{ "--no_such_flag=1", NULL, NULL },
		{ "--rpc_port", NULL, NULL },		/* no value */
		{ "--eviction_ratio=2", NULL, NULL },	/* out of the key's range */
		{ "--rpc_interface=no-such-if0", NULL, NULL },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *argv[] = { bin, (char *)bad[i][0], (char *)bad[i][1], NULL, NULL };
		if (!bad[i][1])
			argv[2] = "--print-config";
		else
			argv[3] = "--print-config";
		char *out = NULL;
		int st = run(argv, &out);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0, "%s: refused", bad[i][0]);
		free(out);
	}
}

/* --help lists every flag of the test's lists, and nothing else. */
static void test_help_lists_them(void)
{
	char *argv[] = { bin, "--help", NULL };
	char *out = NULL;
	int st = run(argv, &out);

	REQUIRE(WIFEXITED(st) && WEXITSTATUS(st) == 0 && out, "--help");
	const char *sec = strstr(out, "Mooncake master flags");
	const char *end = sec ? strstr(sec, "\nKeys of the master") : NULL;
	REQUIRE(sec && end, "--help has the flags section");
	/* the flags start after the two header lines */
	const char *body = strchr(sec, '\n');
	body = body ? strchr(body + 1, '\n') : NULL;
	REQUIRE(body && body < end, "--help flags header");
	int listed = 0;
	for (const char *p = body; p < end; p++)
		if (p[0] == ' ' && p[1] == '-' && p[2] == '-')
			listed++;
	for (size_t i = 0; i < NMC; i++) {
		char w[96];
		tl_fmt(w, sizeof(w), "--%s ", mc_flags[i].name);
		char w2[96];
		tl_fmt(w2, sizeof(w2), "--%s\n", mc_flags[i].name);
		const char *p = strstr(sec, w), *q = strstr(sec, w2);
		CHECK((p && p < end) || (q && q < end), "--help lists --%s", mc_flags[i].name);
	}
	for (size_t i = 0; i < NEXTRA; i++) {
		char w[96], w2[96];
		tl_fmt(w, sizeof(w), "--%s ", extra_flags[i]);
		tl_fmt(w2, sizeof(w2), "--%s\n", extra_flags[i]);
		const char *p = strstr(sec, w), *q = strstr(sec, w2);
		CHECK((p && p < end) || (q && q < end), "--help lists --%s", extra_flags[i]);
	}
	CHECK_EQ(listed, (int)(NMC + NEXTRA));
	free(out);
}

/* KV events: both flags set the endpoint; either alone does not. */
static void test_kv_events(void)
{
	char *out = NULL;
	char *both[] = { bin, "--enable_kv_events", "--kv_events_bind_endpoint=tcp://127.0.0.1:5999",
			 "--kv_events_backend_id=b1", "--kv_events_emit_legacy_compat=true",
			 "--kv_events_queue_capacity=0", "--print-config", NULL };
	int st = run(both, &out);

	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "kv events flags: exit %#x\n%s", st,
	      out ? out : "");
	CHECK(has_line(out, "master.kv_events_endpoint = tcp://127.0.0.1:5999"), "endpoint");
	CHECK(has_line(out, "master.kv_events_backend_id = b1"), "backend id");
	CHECK(has_line(out, "master.kv_events_legacy_compat = true"), "legacy compat");
	CHECK(has_line(out, "master.kv_events_queue = 16777216"), "queue 0 = the largest");
	free(out);

	char *ep_only[] = { bin, "--kv_events_bind_endpoint=tcp://127.0.0.1:5999", "-o",
			    "master.kv_events_endpoint=tcp://127.0.0.1:5998", "--print-config", NULL };
	st = run(ep_only, &out);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "endpoint only: exit %#x", st);
	CHECK(has_line(out, "master.kv_events_endpoint = tcp://127.0.0.1:5998"),
	      "an endpoint without --enable_kv_events changes nothing");
	free(out);

	char *off[] = { bin, "--enable_kv_events=false", "--kv_events_bind_endpoint=tcp://h:1",
			"-o", "master.kv_events_endpoint=tcp://127.0.0.1:5998", "--print-config", NULL };
	st = run(off, &out);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "disabled: exit %#x", st);
	CHECK(has_line(out, "master.kv_events_endpoint = \"\""), "--enable_kv_events=false: off");
	free(out);
}

int main(void)
{
	char b[256], tok[256];

	tl_fmt(b, sizeof(b), "%s/kvpool-master", tl_build());
	bin = b;
	tl_fmt(tok, sizeof(tok), "%s/token", tl_tmpdir("tok"));
	tl_write_file(tok, "s3cret\n");
	REQUIRE(chmod(tok, 0600) == 0, "chmod");
	test_all_at_once(tok);
	test_config_path();
	test_ha();
	test_errors();
	test_help_lists_them();
	test_kv_events();
	return tl_done();
}

/* mflags: Mooncake master flags onto kvpool keys; see mflags.h. */
#include "mflags.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"

enum mf_type { T_BOOL, T_INT, T_UINT, T_DOUBLE, T_STR, T_DUR };

enum mf_act {
	A_NONE,		/* accepted, no effect: note says why */
	A_KEY,		/* the value as it is, into key */
	A_SEC,		/* seconds: value + "s" into key */
	A_PORT,		/* the port of the host:port key */
	A_PORT_NZ,	/* the same unless 0 (rpc_port: 0 = use --port) */
	A_HOST,		/* the host of the host:port key */
	A_IFACE,	/* the IPv4 address of a network interface: the host of key */
	A_STRATEGY,	/* allocation_strategy's names */
	A_LOGLEVEL,	/* glog's minloglevel 0..3 */
	A_VERBOSE,	/* glog's --v: > 0 = debug */
	A_PRELOAD,	/* into key before the files load (the token is read then) */
	A_HA,		/* --enable_ha: master.ha = etcd or none */
	A_HA_TYPE,	/* --ha_backend_type: etcd, the only backend */
	A_HA_CONN,	/* into key, after the early ones (beats --etcd_endpoints) */
	A_CONFIG,	/* --config_path: a file of more flags */
	A_EVENTS,	/* --enable_kv_events + --kv_events_bind_endpoint: after the rest */
	A_QUEUE,	/* a queue capacity, 0 = unbounded: the key's maximum */
};

struct mflag {
	const char *name;
	enum mf_type type;
	enum mf_act act;
	const char *key;	/* "section.key", for the acts that set one */
	const char *note;	/* A_NONE: why; else shown in --help */
};

#define NONE(n, t, why) { n, t, A_NONE, NULL, why }
#define MAP(n, t, a, k, what) { n, t, a, k, what }

static const char NOF[] = "no NVMe-oF tier in kvpool";
static const char OFFLOAD[] = "offload is kvpool-node's spill tier: set [spill] path and "
			      "size on the nodes";
static const char TASKS[] = "kvpool has no task manager (copy/move/offload tasks)";
static const char SNAP[] = "kvpool rebuilds its table from the nodes' segments at start";
static const char EVENTS_DEP[] = "deprecated in mooncake_master too: not on events";
static const char TENANT[] = "kvpool has no tenants or quotas";
static const char DYNREP[] = "kvpool places replicas at put time only";
static const char CXL[] = "no CXL memory in kvpool";
static const char GLOG[] = "kvpool logs to stderr (journald under systemd)";

/* Every DEFINE_* of mooncake-store/src/master.cpp at 3b5a59413, in its
 * order, then glog's common flags and kvpool's own spellings. */
static const struct mflag mflags[] = {
	MAP("config_path", T_STR, A_CONFIG, NULL, "a flat JSON or YAML file of these flags"),
	MAP("port", T_INT, A_PORT, "master.listen", "RPC port"),
	NONE("max_threads", T_INT, "one event-loop thread serves every request"),
	NONE("enable_metric_reporting", T_BOOL, "/metrics is always served"),
	MAP("metrics_port", T_INT, A_PORT, "master.http_listen", "/metrics, /health and admin port"),
	MAP("metrics_host", T_STR, A_HOST, "master.http_listen", "its address"),
	MAP("default_kv_lease_ttl", T_DUR, A_KEY, "master.lease_ttl", "ms or 5s, 1m ..."),
	MAP("default_kv_soft_pin_ttl", T_DUR, A_KEY, "master.soft_pin_ttl", "ms or 30m ..."),
	MAP("max_kv_soft_pin_ttl", T_DUR, A_KEY, "master.max_soft_pin_ttl", "ms or 24h ..."),
	MAP("allow_evict_soft_pinned_objects", T_BOOL, A_KEY, "master.evict_soft_pinned", ""),
	MAP("eviction_ratio", T_DOUBLE, A_KEY, "master.eviction_ratio", ""),
	MAP("eviction_high_watermark_ratio", T_DOUBLE, A_KEY, "master.eviction_high_watermark", ""),
	NONE("nof_eviction_ratio", T_DOUBLE, NOF),
	NONE("nof_eviction_high_watermark_ratio", T_DOUBLE, NOF),
	NONE("rpc_thread_num", T_INT, "one event-loop thread serves every request"),
	MAP("rpc_port", T_INT, A_PORT_NZ, "master.listen", "RPC port, unless 0"),
	MAP("rpc_address", T_STR, A_HOST, "master.listen", "RPC address"),
	MAP("rpc_interface", T_STR, A_IFACE, "master.listen", "RPC address: this interface's IPv4"),
	NONE("rpc_conn_timeout_seconds", T_INT, "idle connections stay open"),
	NONE("rpc_enable_tcp_no_delay", T_BOOL, "TCP_NODELAY is always set"),
	MAP("enable_ha", T_BOOL, A_HA, "master.ha", "etcd: leader election (docs/ha.md)"),
	NONE("enable_offload", T_BOOL, OFFLOAD),
	NONE("offload_on_evict", T_BOOL, "a node with a spill tier always demotes at eviction"),
	NONE("offload_force_evict", T_BOOL, OFFLOAD),
	NONE("offloading_queue_limit", T_UINT, OFFLOAD),
	NONE("offload_cap_ratio", T_DOUBLE, OFFLOAD),
	MAP("promotion_on_hit", T_BOOL, A_KEY, "spill.promote_on_hit", "copy disk hits to memory"),
	NONE("promotion_admission_threshold", T_UINT, "every disk hit may promote"),
	NONE("promotion_queue_limit", T_UINT, "promotion is bounded by memory room instead"),
	NONE("promotion_max_per_heartbeat", T_UINT, "the master sends PROMOTE itself"),
	NONE("dynamic_replication_mode", T_STR, DYNREP),
	NONE("dynamic_replication_heat_window_seconds", T_UINT, DYNREP),
	NONE("dynamic_replication_admission_qps_threshold", T_DOUBLE, DYNREP),
	NONE("dynamic_replication_max_memory_replicas", T_UINT, DYNREP),
	MAP("enable_kv_events", T_BOOL, A_EVENTS, "master.kv_events_endpoint",
	    "with kv_events_bind_endpoint: KV events (docs/master.md)"),
	MAP("kv_events_bind_endpoint", T_STR, A_EVENTS, "master.kv_events_endpoint",
	    "the PUB endpoint, when enable_kv_events"),
	NONE("kv_events_model_name", T_STR, EVENTS_DEP),
	MAP("kv_events_backend_id", T_STR, A_KEY, "master.kv_events_backend_id", ""),
	NONE("kv_events_tenant_id", T_STR, TENANT),
	NONE("kv_events_additional_salt", T_STR, EVENTS_DEP),
	NONE("kv_events_lora_name", T_STR, EVENTS_DEP),
	MAP("kv_events_block_size", T_UINT, A_KEY, "master.kv_events_block_size", ""),
	NONE("kv_events_dp_rank", T_UINT, EVENTS_DEP),
	MAP("kv_events_emit_legacy_compat", T_BOOL, A_KEY, "master.kv_events_legacy_compat",
	    "vLLM's array layout"),
	MAP("kv_events_emit_object_key", T_BOOL, A_KEY, "master.kv_events_object_key", ""),
	MAP("kv_events_queue_capacity", T_UINT, A_QUEUE, "master.kv_events_queue",
	    "0 = the largest"),
	MAP("ha_backend_type", T_STR, A_HA_TYPE, NULL, "etcd (the only backend kvpool has)"),
	MAP("ha_backend_connstring", T_STR, A_HA_CONN, "master.ha_endpoints", "etcd h:p;h:p"),
	MAP("etcd_endpoints", T_STR, A_KEY, "master.ha_endpoints",
	    "the legacy spelling (ha_backend_connstring wins)"),
	MAP("client_ttl", T_INT, A_SEC, "master.client_ttl", "node liveness in s (with node_ttl)"),
	NONE("nof_heartbeat_interval_sec", T_INT, NOF),
	NONE("nof_heartbeat_probe_timeout_ms", T_UINT, NOF),
	NONE("nof_heartbeat_failures_threshold", T_UINT, NOF),
	NONE("root_fs_dir", T_STR, "no shared file-system segment in kvpool"),
	NONE("global_file_segment_size", T_INT, "no shared file-system segment in kvpool"),
	MAP("cluster_id", T_STR, A_KEY, "master.cluster_id", "names the pool's etcd keys"),
	NONE("enable_oplog", T_BOOL, SNAP),
	NONE("oplog_poll_interval_ms", T_INT, SNAP),
	NONE("oplog_batch_max_entries", T_UINT, SNAP),
	NONE("batch_oplog_retry_timeout_sec", T_UINT, SNAP),
	NONE("memory_allocator", T_STR, "kvpool has one offset allocator per segment"),
	MAP("allocation_strategy", T_STR, A_STRATEGY, "master.allocation_strategy",
	    "random; free_ratio_first, local_first: free_ratio"),
	MAP("enable_http_metadata_server", T_BOOL, A_KEY, "master.metadata_server", ""),
	MAP("http_metadata_server_port", T_INT, A_PORT, "master.metadata_listen", "its port"),
	MAP("http_metadata_server_host", T_STR, A_HOST, "master.metadata_listen", "its address"),
	NONE("enable_metadata_cleanup_on_timeout", T_BOOL,
	     "kvpool nodes register with the master, not in the metadata store"),
	NONE("pod_name", T_STR, "no K8s label routing in kvpool"),
	NONE("pod_namespace", T_STR, "no K8s label routing in kvpool"),
	MAP("put_start_discard_timeout_sec", T_UINT, A_SEC, "master.put_timeout",
	    "unfinished puts reclaimed after s"),
	NONE("put_start_release_timeout_sec", T_UINT,
	     "an unfinished put's extents are reused only at put_timeout"),
	NONE("enable_disk_eviction", T_BOOL, "a spill tier evicts past eviction_high_watermark"),
	NONE("quota_bytes", T_UINT, TENANT),
	NONE("enable_multi_tenants", T_BOOL, TENANT),
	NONE("tenant_quota_connector_type", T_STR, TENANT),
	NONE("tenant_quota_connector_uri", T_STR, TENANT),
	NONE("snapshot_backup_dir", T_STR, SNAP),
	NONE("enable_snapshot_restore", T_BOOL, SNAP),
	NONE("enable_snapshot", T_BOOL, SNAP),
	NONE("snapshot_interval_seconds", T_UINT, SNAP),
	NONE("snapshot_child_timeout_seconds", T_UINT, SNAP),
	NONE("snapshot_retention_count", T_UINT, SNAP),
	NONE("snapshot_object_store_type", T_STR, SNAP),
	NONE("snapshot_payload_store_type", T_STR, SNAP),
	NONE("snapshot_payload_backend_type", T_STR, SNAP),
	NONE("snapshot_catalog_store_type", T_STR, SNAP),
	NONE("snapshot_catalog_backend_type", T_STR, SNAP),
	NONE("snapshot_catalog_store_connstring", T_STR, SNAP),
	NONE("snapshot_catalog_backend_connstring", T_STR, SNAP),
	NONE("max_total_finished_tasks", T_UINT, TASKS),
	NONE("max_total_pending_tasks", T_UINT, TASKS),
	NONE("max_total_processing_tasks", T_UINT, TASKS),
	NONE("pending_task_timeout_sec", T_UINT, TASKS),
	NONE("processing_task_timeout_sec", T_UINT, TASKS),
	NONE("max_retry_attempts", T_UINT, TASKS),
	NONE("cxl_path", T_STR, CXL),
	NONE("cxl_size", T_UINT, CXL),
	NONE("enable_cxl", T_BOOL, CXL),
	/* older mooncake_master releases */
	NONE("enable_gc", T_BOOL, "kvpool frees an object when it is removed or evicted"),
	/* glog, which mooncake_master links */
	MAP("minloglevel", T_INT, A_LOGLEVEL, "log.level", "0 info, 1 warning, 2-3 err"),
	MAP("v", T_INT, A_VERBOSE, "log.level", "> 0: debug"),
	NONE("logtostderr", T_BOOL, GLOG),
	NONE("alsologtostderr", T_BOOL, GLOG),
	NONE("colorlogtostderr", T_BOOL, GLOG),
	NONE("stderrthreshold", T_INT, GLOG),
	NONE("log_dir", T_STR, GLOG),
	NONE("vmodule", T_STR, GLOG),
	NONE("max_log_size", T_INT, GLOG),
	NONE("logbufsecs", T_INT, GLOG),
	/* kvpool's own spellings */
	MAP("cluster_token_file", T_STR, A_PRELOAD, "cluster.token_file",
	    "the cluster token file (chmod 600): serve other hosts"),
};
#define NFLAGS (sizeof(mflags) / sizeof(mflags[0]))

static const struct mflag *mf_find(const char *name, size_t n)
{
	for (size_t i = 0; i < NFLAGS; i++)
		if (strlen(mflags[i].name) == n && !strncmp(mflags[i].name, name, n))
			return &mflags[i];
	return NULL;
}

/* gflags' boolean words. */
static bool mf_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "true", "t", "yes", "y", "1" };
	static const char *const no[] = { "false", "f", "no", "n", "0" };

	for (size_t i = 0; i < 5; i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return true;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return true;
		}
	}
	return false;
}

/* The value is of the flag's type: 0 or -1. */
static int mf_check(const struct mflag *f, const char *v)
{
	char *end;
	bool b;
	uint64_t ms;

	errno = 0;
	switch (f->type) {
	case T_BOOL:
		return mf_bool(v, &b) ? 0 : -1;
	case T_INT:
		(void)strtoll(v, &end, 10);
		break;
	case T_UINT:
		if (strchr(v, '-'))
			return -1;
		(void)strtoull(v, &end, 10);
		break;
	case T_DOUBLE:
		(void)strtod(v, &end);
		break;
	case T_DUR:
		return conf_parse_duration(v, &ms) == 0 ? 0 : -1;
	case T_STR:
		return 0;
	}
	return *v && !*end && !errno ? 0 : -1;
}

static void mf_notice(const struct mflag *f)
{
	static bool told[NFLAGS];
	size_t i = (size_t)(f - mflags);

	if (f->act == A_NONE && !told[i]) {
		told[i] = true;
		log_notice("--%s has no effect in kvpool-master: %s", f->name, f->note);
	}
}

static int mf_add(struct mflags *fl, const struct mflag *f, const char *value, bool file)
{
	if (mf_check(f, value) < 0) {
		fprintf(stderr, "kvpool-master: --%s: '%s' is not %s\n", f->name, value,
			f->type == T_BOOL ? "true or false" : f->type == T_DUR ?
			"a duration (ms, or 5s, 2m, 1h)" : f->type == T_DOUBLE ? "a number" :
			"an integer");
		return 2;
	}
	if (fl->n == MFLAGS_MAX) {
		fprintf(stderr, "kvpool-master: too many flags\n");
		return 2;
	}
	char *v = strdup(value);
	if (!v) {
		fprintf(stderr, "kvpool-master: out of memory\n");
		return 2;
	}
	fl->v[fl->n].f = f;
	fl->v[fl->n].value = v;
	fl->v[fl->n].file = file;
	fl->n++;
	mf_notice(f);
	return 0;
}

static int mf_config_file(struct mflags *fl, const char *path);

int mflags_parse(int argc, char **argv, int *i, struct mflags *fl)
{
	const char *arg = argv[*i];
	const char *name = arg + (arg[1] == '-' ? 2 : 1);
	const char *eq = strchr(name, '=');
	size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
	const struct mflag *f = nlen ? mf_find(name, nlen) : NULL;
	const char *val = eq ? eq + 1 : NULL;
	bool b;

	if (!f && !eq && nlen > 2 && !strncmp(name, "no", 2)) {
		/* gflags: --noflag is --flag=false for a boolean */
		f = mf_find(name + 2, nlen - 2);
		if (f && f->type == T_BOOL)
			return mf_add(fl, f, "false", false);
		f = NULL;
	}
	if (!f) {
		fprintf(stderr, "kvpool-master: unknown option '%s' (try --help)\n", arg);
		return 2;
	}
	if (!val && f->type == T_BOOL) {
		/* "--flag" alone means true; "--flag false" takes the word */
		val = *i + 1 < argc && mf_bool(argv[*i + 1], &b) ? argv[++*i] : "true";
	} else if (!val) {
		if (*i + 1 >= argc) {
			fprintf(stderr, "kvpool-master: --%s needs a value (try --help)\n", f->name);
			return 2;
		}
		val = argv[++*i];
	}
	if (f->act == A_CONFIG)
		return mf_config_file(fl, val);
	return mf_add(fl, f, val, false);
}

/* ---- --config_path: flat JSON or YAML ---- */

static char *mf_trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	return s;
}

/* One "name": value / name: value pair of the file. */
static int mf_pair(struct mflags *fl, const char *path, char *name, char *value)
{
	name = mf_trim(name);
	value = mf_trim(value);
	size_t n = strlen(name);
	if (n >= 2 && (name[0] == '"' || name[0] == '\'') && name[n - 1] == name[0]) {
		name[n - 1] = '\0';
		name++;
	}
	n = strlen(value);
	if (n >= 2 && (value[0] == '"' || value[0] == '\'') && value[n - 1] == value[0]) {
		value[n - 1] = '\0';
		value++;
	} else if (value[0] == '{' || value[0] == '[') {
		fprintf(stderr, "kvpool-master: --config_path %s: %s: nested values are not "
			"settings of mooncake_master\n", path, name);
		return 2;
	}
	const struct mflag *f = mf_find(name, strlen(name));
	if (!f || f->act == A_CONFIG) {
		log_notice("--config_path %s: '%s' is not a mooncake_master setting; ignored", path,
			   name);
		return 0;
	}
	return mf_add(fl, f, value, true);
}

/* A JSON object of names and scalars, or YAML "name: value" lines; '#'
 * starts a YAML comment. Strings hold no commas or escapes (paths,
 * addresses, names). */
static int mf_config_file(struct mflags *fl, const char *path)
{
	FILE *in = fopen(path, "r");
	char buf[65536];

	if (!in) {
		fprintf(stderr, "kvpool-master: --config_path %s: %s\n", path, strerror(errno));
		return 2;
	}
	size_t len = fread(buf, 1, sizeof(buf) - 1, in);
	bool big = !feof(in);
	fclose(in);
	if (big) {
		fprintf(stderr, "kvpool-master: --config_path %s: larger than 64 KiB\n", path);
		return 2;
	}
	buf[len] = '\0';
	char *p = mf_trim(buf);
	bool json = *p == '{';
	if (json) {
		size_t n = strlen(p);
		if (p[n - 1] != '}') {
			fprintf(stderr, "kvpool-master: --config_path %s: no closing }\n", path);
			return 2;
		}
		p[n - 1] = '\0';
		p++;
	}
	char *save = NULL;
	for (char *item = strtok_r(p, json ? "," : "\n", &save); item;
	     item = strtok_r(NULL, json ? "," : "\n", &save)) {
		char *hash = json ? NULL : strchr(item, '#');
		if (hash)
			*hash = '\0';
		if (!*mf_trim(item))
			continue;
		char *colon = strchr(item, ':');
		/* a ':' inside a quoted name cannot happen: names are identifiers */
		if (!colon) {
			fprintf(stderr, "kvpool-master: --config_path %s: '%s' is not name: value\n",
				path, mf_trim(item));
			return 2;
		}
		*colon = '\0';
		int rc = mf_pair(fl, path, item, colon + 1);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- applying ---- */

/* Replaces the host or the port of a host:port key. */
static int set_hostport(struct kvp_conf *c, const char *sk, const char *host, const char *port,
			char *err, size_t errlen)
{
	char sec[32], cur[CONF_STR], h[CONF_STR], v[CONF_STR + 16], pbuf[16];
	const char *dot = strchr(sk, '.');
	uint16_t p;

	snprintf(sec, sizeof(sec), "%.*s", (int)(dot - sk), sk);
	const struct conf_key *k = conf_find(sec, dot + 1);
	conf_format(c, k, cur, sizeof(cur));
	if (conf_parse_hostport(cur, h, sizeof(h), &p) < 0) {
		h[0] = '\0';
		p = 0;
	}
	if (host)
		snprintf(h, sizeof(h), "%s", host);
	snprintf(pbuf, sizeof(pbuf), "%u", p);
	snprintf(v, sizeof(v), strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, port ? port : pbuf);
	return conf_set(c, sec, dot + 1, v, CONF_SRC_CMDLINE, err, errlen);
}

static int set_key(struct kvp_conf *c, const char *sk, const char *v, char *err, size_t errlen)
{
	char sec[32];
	const char *dot = strchr(sk, '.');

	snprintf(sec, sizeof(sec), "%.*s", (int)(dot - sk), sk);
	return conf_set(c, sec, dot + 1, v, CONF_SRC_CMDLINE, err, errlen);
}

/* The first IPv4 address of interface name, into out. */
static int iface_ipv4(const char *name, char *out, size_t cap)
{
	struct ifaddrs *ifs, *i;
	int rc = -1;

	if (getifaddrs(&ifs) < 0)
		return -1;
	for (i = ifs; i && rc; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && !strcmp(i->ifa_name, name) &&
		    inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, out,
			      (socklen_t)cap))
			rc = 0;
	freeifaddrs(ifs);
	return rc;
}

static int apply_one(struct kvp_conf *c, const struct mflag *f, const char *val, char *err,
		     size_t errlen)
{
	char v[CONF_STR + 8];
	bool b = false;

	switch (f->act) {
	case A_NONE:
	case A_CONFIG:
	case A_PRELOAD:
	case A_EVENTS:
		return 0;
	case A_QUEUE:
		return set_key(c, f->key, strtoull(val, NULL, 10) ? val : "16777216", err, errlen);
	case A_HA:
		mf_bool(val, &b);
		return set_key(c, f->key, b ? "etcd" : "none", err, errlen);
	case A_HA_TYPE:
		if (strcmp(val, "etcd") != 0) {
			snprintf(err, errlen, "kvpool elects its leader through etcd only");
			return KVP_EINVAL;
		}
		return 0;
	case A_HA_CONN:
		if (!*val)	/* Mooncake: empty falls back to etcd_endpoints */
			return 0;
		/* fall through */
	case A_KEY:
		if (f->type == T_BOOL) {
			mf_bool(val, &b);
			val = b ? "true" : "false";
		}
		return set_key(c, f->key, val, err, errlen);
	case A_SEC:
		snprintf(v, sizeof(v), "%ss", val);
		return set_key(c, f->key, v, err, errlen);
	case A_PORT_NZ:
		if (strtol(val, NULL, 10) == 0)
			return 0;
		/* fall through */
	case A_PORT:
		return set_hostport(c, f->key, NULL, val, err, errlen);
	case A_HOST:
		return set_hostport(c, f->key, val, NULL, err, errlen);
	case A_IFACE:
		if (!*val)
			return 0;
		if (iface_ipv4(val, v, sizeof(v)) < 0) {
			snprintf(err, errlen, "no IPv4 address on interface '%s'", val);
			return KVP_EINVAL;
		}
		return set_hostport(c, f->key, v, NULL, err, errlen);
	case A_STRATEGY:
		if (!strcmp(val, "free_ratio_first") || !strcmp(val, "local_first")) {
			/* clients ask for a segment on their host first anyway */
			val = "free_ratio";
		} else if (strcmp(val, "random") && strcmp(val, "free_ratio")) {
			log_notice("--allocation_strategy=%s has no kvpool equivalent; using "
				   "free_ratio", val);
			val = "free_ratio";
		}
		return set_key(c, f->key, val, err, errlen);
	case A_LOGLEVEL: {
		long l = strtol(val, NULL, 10);
		return set_key(c, f->key, l <= 0 ? "info" : l == 1 ? "warning" : "err", err, errlen);
	}
	case A_VERBOSE:
		return strtol(val, NULL, 10) > 0 ? set_key(c, f->key, "debug", err, errlen) : 0;
	}
	return 0;
}

/* mooncake_master publishes only with --enable_kv_events and a bind
 * endpoint; enabled without one it logs an error and publishes nothing.
 * The last value of each wins (the command line after the file). */
static int apply_events(struct kvp_conf *c, const struct mflags *fl, char *err, size_t errlen)
{
	const char *on = NULL, *ep = NULL;
	bool b = false;

	for (int file = 1; file >= 0; file--)
		for (size_t i = 0; i < fl->n; i++) {
			const struct mflag *f = fl->v[i].f;
			if (f->act != A_EVENTS || fl->v[i].file != file)
				continue;
			if (!strcmp(f->name, "enable_kv_events"))
				on = fl->v[i].value;
			else
				ep = fl->v[i].value;
		}
	if (!on && !ep)
		return 0;
	if (on)
		mf_bool(on, &b);
	if (!b) {
		if (ep && *ep)
			log_notice("--kv_events_bind_endpoint has no effect without "
				   "--enable_kv_events=true");
		return on ? set_key(c, "master.kv_events_endpoint", "", err, errlen) : 0;
	}
	if (!ep || !*ep) {
		log_err("--enable_kv_events without --kv_events_bind_endpoint: no KV events");
		return 0;
	}
	if (set_key(c, "master.kv_events_endpoint", ep, err, errlen)) {
		char e[400];
		snprintf(e, sizeof(e), "%s", err);
		snprintf(err, errlen, "--kv_events_bind_endpoint=%s: %s", ep, e);
		return KVP_EINVAL;
	}
	return 0;
}

/* Order: the file's settings, then the command line's (which win, as in
 * mooncake_master); rpc_port and rpc_interface after port and
 * rpc_address, which they override, and ha_backend_connstring after the
 * legacy etcd_endpoints. */
int mflags_apply(struct kvp_conf *c, const struct mflags *fl, char *err, size_t errlen)
{
	char e[400];

	for (int pass = 0; pass < 4; pass++)
		for (size_t i = 0; i < fl->n; i++) {
			const struct mflag *f = fl->v[i].f;
			bool late = f->act == A_PORT_NZ || f->act == A_IFACE || f->act == A_HA_CONN;
			if (late != (pass >= 2) || fl->v[i].file != !(pass & 1))
				continue;
			int rc = apply_one(c, f, fl->v[i].value, e, sizeof(e));
			if (rc) {
				snprintf(err, errlen, "--%s=%s: %s", f->name, fl->v[i].value, e);
				return KVP_EINVAL;
			}
		}
	return apply_events(c, fl, err, errlen);
}

int mflags_preload(const struct mflags *fl, char *buf, size_t cap, const char **out, size_t max)
{
	size_t n = 0, used = 0;

	for (size_t i = 0; i < fl->n && n < max; i++) {
		const struct mflag *f = fl->v[i].f;
		if (f->act != A_PRELOAD)
			continue;
		int w = snprintf(buf + used, cap - used, "%s=%s", f->key, fl->v[i].value);
		if (w < 0 || (size_t)w >= cap - used)
			return -1;
		out[n++] = buf + used;
		used += (size_t)w + 1;
	}
	return (int)n;
}

void mflags_free(struct mflags *fl)
{
	for (size_t i = 0; i < fl->n; i++)
		free(fl->v[i].value);
	fl->n = 0;
}

void mflags_usage(FILE *out)
{
	fprintf(out, "Mooncake master flags (-flag or --flag, =value or the next argument;\n"
		"booleans also --flag, --noflag, --flag=false):\n");
	for (size_t i = 0; i < NFLAGS; i++)
		if (mflags[i].act != A_NONE)
			fprintf(out, "  --%-32s %s%s%s\n", mflags[i].name,
				mflags[i].key ? mflags[i].key : "", mflags[i].key && *mflags[i].note ?
				": " : "", mflags[i].note);
	fprintf(out, "Accepted without effect (each says why when given):\n ");
	size_t col = 1;
	for (size_t i = 0; i < NFLAGS; i++) {
		if (mflags[i].act != A_NONE)
			continue;
		size_t w = strlen(mflags[i].name) + 3;
		if (col + w > 78) {
			fputs("\n ", out);
			col = 1;
		}
		fprintf(out, " --%s", mflags[i].name);
		col += w;
	}
	fputc('\n', out);
}

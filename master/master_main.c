/* kvpool-master: command line (kvpool's own flags and Mooncake master's
 * spellings), configuration loading, signals and systemd notification
 * around mserver. Main thread only; signal handlers only call mserver's
 * async-signal-safe entry points.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "conf.h"
#include "ev.h"
#include "log.h"
#include "mserver.h"

#define MAX_OVERRIDES 256

/* Mooncake master flags that map onto kvpool keys. Each yields one
 * conf_set() after the file and -o overrides (so they win). */
enum mc_kind {
	MC_RPC_PORT, MC_RPC_ADDR, MC_MD_ENABLE, MC_MD_HOST, MC_MD_PORT, MC_METRICS_PORT,
	MC_LEASE_MS, MC_EVICT_RATIO, MC_EVICT_HW, MC_CLIENT_TTL_S, MC_PUT_TIMEOUT_S,
};

struct mc_flag {
	const char *name;
	enum mc_kind kind;
	bool boolean;
	const char *help;
};

static const struct mc_flag mc_flags[] = {
	{ "port", MC_RPC_PORT, false, "RPC port (master.listen)" },
	{ "rpc_port", MC_RPC_PORT, false, "RPC port (master.listen)" },
	{ "rpc_address", MC_RPC_ADDR, false, "RPC address (master.listen host)" },
	{ "enable_http_metadata_server", MC_MD_ENABLE, true, "master.metadata_server" },
	{ "http_metadata_server_host", MC_MD_HOST, false, "master.metadata_listen host" },
	{ "http_metadata_server_port", MC_MD_PORT, false, "master.metadata_listen port" },
	{ "metrics_port", MC_METRICS_PORT, false, "/metrics and /health port (master.http_listen)" },
	{ "default_kv_lease_ttl", MC_LEASE_MS, false, "read lease in ms (master.lease_ttl)" },
	{ "eviction_ratio", MC_EVICT_RATIO, false, "master.eviction_ratio" },
	{ "eviction_high_watermark_ratio", MC_EVICT_HW, false, "master.eviction_high_watermark" },
	{ "client_ttl", MC_CLIENT_TTL_S, false, "node liveness timeout in s (master.client_ttl)" },
	{ "put_start_discard_timeout_sec", MC_PUT_TIMEOUT_S, false,
	  "unfinished put reclaimed after s (master.put_timeout)" },
};

/* Mooncake flags kvpool has no use for: accepted with one warning. */
static const char *const mc_ignored[] = {
	"rpc_thread_num", "rpc_conn_timeout_seconds", "rpc_enable_tcp_no_delay", "max_threads",
	"enable_gc", "enable_metric_reporting", "cluster_id", "memory_allocator", "enable_ha",
	"etcd_endpoints", "root_fs_dir", "global_file_segment_size", "default_kv_soft_pin_ttl",
	"allow_evict_soft_pinned_objects", "put_start_release_timeout_sec", "enable_disk_eviction",
	"quota_bytes", "enable_offload", "logtostderr", "v", "minloglevel", "config_path",
};
#define NIGNORED (sizeof(mc_ignored) / sizeof(mc_ignored[0]))

struct mc_value {
	const struct mc_flag *f;
	const char *value;
};

struct args {
	const char *configs[CONF_MAX_FILES];	/* repeated -c: layered, later wins */
	size_t nconfigs;
	const char *overrides[MAX_OVERRIDES + 1];
	size_t noverrides;
	struct mc_value mc[64];
	size_t nmc;
	bool print_config;
};

static struct mserver *g_srv;

static void usage(FILE *out)
{
	fprintf(out,
		"usage: kvpool-master [-c FILE] [-o section.key=value]... [--print-config]\n"
		"                     [--help] [--version] [Mooncake flags]\n"
		"\n"
		"  -c, --config FILE      INI configuration (default %s if present);\n"
		"                         repeat to layer files (a later one wins)\n"
		"  -o, --set S.K=V        override one key, e.g. -o master.lease_ttl=10s\n"
		"      --print-config     print the effective configuration and exit\n"
		"  -h, --help             this text\n"
		"  -V, --version          print the version\n"
		"\n"
		"Mooncake master flags (--flag=value or --flag value; booleans true/false/1/0):\n",
		CONF_DEFAULT_FILE);
	for (size_t i = 0; i < sizeof(mc_flags) / sizeof(mc_flags[0]); i++)
		fprintf(out, "  --%-32s %s\n", mc_flags[i].name, mc_flags[i].help);
	fprintf(out, "Accepted and ignored (with a warning):");
	for (size_t i = 0; i < NIGNORED; i++)
		fprintf(out, "%s --%s", i % 4 ? "" : "\n ", mc_ignored[i]);
	fprintf(out, "\n\nKeys of the master ([cluster] [master] [log]; live = re-read on SIGHUP):\n");
	for (size_t i = 0; i < conf_table_len; i++) {
		const struct conf_key *k = &conf_table[i];
		if (strcmp(k->section, "cluster") && strcmp(k->section, "master") &&
		    strcmp(k->section, "log"))
			continue;
		fprintf(out, "  %s.%s = %s%s\n      %s\n", k->section, k->key,
			*k->def ? k->def : "\"\"", k->live ? "   (live)" : "", k->help);
	}
	fprintf(out, "\nSignals: SIGTERM/SIGINT stop, SIGHUP re-reads the configuration file.\n");
}

static bool parse_bool(const char *s, bool *out)
{
	if (!strcmp(s, "true") || !strcmp(s, "1") || !strcmp(s, "yes") || !strcmp(s, "on"))
		*out = true;
	else if (!strcmp(s, "false") || !strcmp(s, "0") || !strcmp(s, "no") || !strcmp(s, "off"))
		*out = false;
	else
		return false;
	return true;
}

static const struct mc_flag *mc_find(const char *name, size_t n)
{
	for (size_t i = 0; i < sizeof(mc_flags) / sizeof(mc_flags[0]); i++)
		if (strlen(mc_flags[i].name) == n && !strncmp(mc_flags[i].name, name, n))
			return &mc_flags[i];
	return NULL;
}

static bool mc_is_ignored(const char *name, size_t n)
{
	for (size_t i = 0; i < NIGNORED; i++)
		if (strlen(mc_ignored[i]) == n && !strncmp(mc_ignored[i], name, n))
			return true;
	return false;
}

/* Parses argv: kvpool's options and the Mooncake flags (gflags accept one
 * or two dashes). Returns 0, or the exit code to use (0 for --help). */
static int parse_args(int argc, char **argv, struct args *a, bool *exit_now)
{
	*exit_now = false;
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		const char *val = NULL;

		if (!strcmp(arg, "-h") || !strcmp(arg, "--help") || !strcmp(arg, "-help")) {
			usage(stdout);
			*exit_now = true;
			return 0;
		}
		if (!strcmp(arg, "-V") || !strcmp(arg, "--version") || !strcmp(arg, "-version")) {
			printf("kvpool-master %s\n", KVP_VERSION);
			*exit_now = true;
			return 0;
		}
		if (!strcmp(arg, "--print-config")) {
			a->print_config = true;
			continue;
		}
		if (!strcmp(arg, "-c") || !strcmp(arg, "--config") || !strcmp(arg, "-o") ||
		    !strcmp(arg, "--set")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "kvpool-master: %s needs an argument (try --help)\n", arg);
				return 2;
			}
			val = argv[++i];
		} else if (!strncmp(arg, "--config=", 9)) {
			val = arg + 9;
			arg = "-c";
		} else if (!strncmp(arg, "--set=", 6)) {
			val = arg + 6;
			arg = "-o";
		}
		if (val) {
			if (arg[1] == 'c' || !strcmp(arg, "--config")) {
				if (a->nconfigs == CONF_MAX_FILES) {
					fprintf(stderr, "kvpool-master: at most %d -c files\n",
						CONF_MAX_FILES);
					return 2;
				}
				a->configs[a->nconfigs++] = val;
			} else if (a->noverrides < MAX_OVERRIDES) {
				a->overrides[a->noverrides++] = val;
			} else {
				fprintf(stderr, "kvpool-master: too many -o options\n");
				return 2;
			}
			continue;
		}

		/* Mooncake spellings: -flag, --flag, =value or the next argument. */
		const char *name = arg[0] == '-' ? arg + (arg[1] == '-' ? 2 : 1) : NULL;
		if (!name || !*name) {
			fprintf(stderr, "kvpool-master: unexpected argument '%s' (try --help)\n", arg);
			return 2;
		}
		const char *eq = strchr(name, '=');
		size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
		const struct mc_flag *f = mc_find(name, nlen);
		bool ignored = !f && mc_is_ignored(name, nlen);
		if (!f && !ignored) {
			fprintf(stderr, "kvpool-master: unknown option '%s' (try --help)\n", arg);
			return 2;
		}
		bool b;
		if (eq) {
			val = eq + 1;
		} else if (f && f->boolean) {
			/* "--flag" alone means true; "--flag false" takes the word. */
			val = i + 1 < argc && parse_bool(argv[i + 1], &b) ? argv[++i] : "true";
		} else if (i + 1 < argc && (ignored ? argv[i + 1][0] != '-' : true)) {
			val = argv[++i];
		} else if (!ignored) {
			fprintf(stderr, "kvpool-master: --%.*s needs a value (try --help)\n",
				(int)nlen, name);
			return 2;
		}
		if (ignored) {
			log_warn("--%.*s is a Mooncake option kvpool does not need; ignored",
				 (int)nlen, name);
			continue;
		}
		if (f->boolean && !parse_bool(val, &b)) {
			fprintf(stderr, "kvpool-master: --%s: '%s' is not true/false/1/0\n", f->name, val);
			return 2;
		}
		if (a->nmc == sizeof(a->mc) / sizeof(a->mc[0])) {
			fprintf(stderr, "kvpool-master: too many options\n");
			return 2;
		}
		a->mc[a->nmc++] = (struct mc_value){ f, val };
	}
	return 0;
}

/* Replaces the host or the port of a host:port key. */
static int set_hostport(struct kvp_conf *c, const char *key, const char *host, const char *port,
			char *err, size_t errlen)
{
	const struct conf_key *k = conf_find("master", key);
	char cur[CONF_STR], h[CONF_STR], v[CONF_STR + 16];
	uint16_t p;

	conf_format(c, k, cur, sizeof(cur));
	if (conf_parse_hostport(cur, h, sizeof(h), &p) < 0) {
		h[0] = '\0';
		p = 0;
	}
	if (host)
		snprintf(h, sizeof(h), "%s", host);
	char pbuf[16];
	snprintf(pbuf, sizeof(pbuf), "%u", p);
	const char *ps = port ? port : pbuf;
	if (strchr(h, ':'))
		snprintf(v, sizeof(v), "[%s]:%s", h, ps);
	else
		snprintf(v, sizeof(v), "%s:%s", h, ps);
	return conf_set(c, "master", key, v, CONF_SRC_CMDLINE, err, errlen);
}

static int apply_mooncake(struct kvp_conf *c, const struct args *a, char *err, size_t errlen)
{
	char v[64], e[400];
	int rc = 0;

	for (size_t i = 0; i < a->nmc && rc == 0; i++) {
		const char *val = a->mc[i].value;
		switch (a->mc[i].f->kind) {
		case MC_RPC_PORT:
			rc = set_hostport(c, "listen", NULL, val, e, sizeof(e));
			break;
		case MC_RPC_ADDR:
			rc = set_hostport(c, "listen", val, NULL, e, sizeof(e));
			break;
		case MC_MD_ENABLE: {
			bool b = false;
			parse_bool(val, &b);
			rc = conf_set(c, "master", "metadata_server", b ? "true" : "false",
				      CONF_SRC_CMDLINE, e, sizeof(e));
			break;
		}
		case MC_MD_HOST:
			rc = set_hostport(c, "metadata_listen", val, NULL, e, sizeof(e));
			break;
		case MC_MD_PORT:
			rc = set_hostport(c, "metadata_listen", NULL, val, e, sizeof(e));
			break;
		case MC_METRICS_PORT:
			rc = set_hostport(c, "http_listen", NULL, val, e, sizeof(e));
			break;
		case MC_LEASE_MS:
			snprintf(v, sizeof(v), "%sms", val);
			rc = conf_set(c, "master", "lease_ttl", v, CONF_SRC_CMDLINE, e, sizeof(e));
			break;
		case MC_EVICT_RATIO:
			rc = conf_set(c, "master", "eviction_ratio", val, CONF_SRC_CMDLINE, e, sizeof(e));
			break;
		case MC_EVICT_HW:
			rc = conf_set(c, "master", "eviction_high_watermark", val, CONF_SRC_CMDLINE,
				      e, sizeof(e));
			break;
		case MC_CLIENT_TTL_S:
			snprintf(v, sizeof(v), "%ss", val);
			rc = conf_set(c, "master", "client_ttl", v, CONF_SRC_CMDLINE, e, sizeof(e));
			break;
		case MC_PUT_TIMEOUT_S:
			snprintf(v, sizeof(v), "%ss", val);
			rc = conf_set(c, "master", "put_timeout", v, CONF_SRC_CMDLINE, e, sizeof(e));
			break;
		}
		if (rc)
			snprintf(err, errlen, "--%s=%s: %s", a->mc[i].f->name, val, e);
	}
	return rc;
}

/* The whole load: defaults, file, environment, -o, Mooncake flags. Used at
 * start-up and again on SIGHUP. */
static int load_conf(struct kvp_conf *c, char *err, size_t errlen, void *arg)
{
	const struct args *a = arg;

	if (conf_load_files(c, a->configs, a->nconfigs, a->overrides, err, errlen))
		return -1;
	return apply_mooncake(c, a, err, errlen);
}

static void on_signal(int sig)
{
	if (!g_srv)
		return;
	if (sig == SIGHUP)
		mserver_reload(g_srv);
	else
		mserver_stop(g_srv);
}

static void notify_status(struct mserver *s, const char *extra)
{
	char st[256];

	mserver_status(s, st, sizeof(st));
	sd_notifyf(0, "%sSTATUS=%s", extra, st);
}

static void watchdog(struct ev_loop *loop, void *arg)
{
	(void)loop;
	notify_status(arg, "WATCHDOG=1\n");
}

int main(int argc, char **argv)
{
	static struct args a;
	static struct kvp_conf conf;
	char err[1024];
	bool exit_now;

	log_init("kvpool-master", -1);
	int rc = parse_args(argc, argv, &a, &exit_now);
	if (rc || exit_now)
		return rc;
	if (load_conf(&conf, err, sizeof(err), &a)) {
		fprintf(stderr, "kvpool-master: %s\n", err);
		return 1;
	}
	if (a.print_config) {
		conf_print(&conf, stdout);
		return 0;
	}
	log_init("kvpool-master", log_level_parse(conf.log.level));

	struct mserver *s = mserver_create(&conf, load_conf, &a, err, sizeof(err));
	if (!s) {
		fprintf(stderr, "kvpool-master: %s\n", err);
		return 1;
	}
	g_srv = s;
	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	uint64_t usec = 0;
	if (sd_watchdog_enabled(0, &usec) > 0 && usec >= 2000)
		ev_timer_add(mserver_loop(s), usec / 2000, true, watchdog, s);
	/* The listeners accept already (mserver_create); connections queue
	 * until the loop runs a moment later. */
	notify_status(s, "READY=1\n");

	rc = mserver_run(s);
	sd_notify(0, "STOPPING=1\nSTATUS=stopping");
	log_notice("stopping");
	g_srv = NULL;
	mserver_destroy(s);
	return rc ? 1 : 0;
}

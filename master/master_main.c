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
#include "mflags.h"
#include "mserver.h"

#define MAX_OVERRIDES 256

struct args {
	const char *configs[CONF_MAX_FILES];	/* repeated -c: layered, later wins */
	size_t nconfigs;
	const char *overrides[MAX_OVERRIDES + 8 + 1];	/* -o, then the flags' preloads */
	size_t noverrides;
	char preload[4096];
	struct mflags mc;
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
		"\n", CONF_DEFAULT_FILE);
	mflags_usage(out);
	fprintf(out, "\nKeys of the master ([cluster] [master] [log]; live = re-read on SIGHUP):\n");
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

		/* Mooncake's flags (and kvpool's own spellings of them) */
		if (arg[0] != '-' || !arg[1] || (arg[1] == '-' && !arg[2])) {
			fprintf(stderr, "kvpool-master: unexpected argument '%s' (try --help)\n", arg);
			return 2;
		}
		int rc = mflags_parse(argc, argv, &i, &a->mc);
		if (rc)
			return rc;
	}
	int np = mflags_preload(&a->mc, a->preload, sizeof(a->preload),
				a->overrides + a->noverrides, 8);
	if (np < 0) {
		fprintf(stderr, "kvpool-master: flag values too long\n");
		return 2;
	}
	a->noverrides += (size_t)np;
	return 0;
}

/* The whole load: defaults, file, environment, -o, Mooncake flags. Used at
 * start-up and again on SIGHUP. */
static int load_conf(struct kvp_conf *c, char *err, size_t errlen, void *arg)
{
	const struct args *a = arg;

	if (conf_load_files(c, a->configs, a->nconfigs, a->overrides, err, errlen))
		return -1;
	return mflags_apply(c, &a->mc, err, errlen);
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

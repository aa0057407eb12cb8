/* kvpool-node: command line, signals and systemd readiness around the node
 * library (node.h). Main thread only; the signal handlers just ask the node
 * to stop or reload.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "conf.h"
#include "log.h"
#include "node.h"

#define MAX_CONF_FILES 8
#define MAX_OVERRIDES 256

static struct node *the_node;
static volatile sig_atomic_t stop_early;	/* a signal before the node existed */

static void on_stop_signal(int sig)
{
	if (the_node)
		node_stop(the_node);
	else
		stop_early = 1;
}

static void on_hup(int sig)
{
	if (the_node)
		node_reload(the_node);
}

static void on_ready(void *arg)
{
	struct node *n = arg;

	log_notice("ready: data port %d, http port %d", node_data_port(n), node_http_port(n));
	sd_notify(0, "READY=1");
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: kvpool-node [-c FILE]... [-o section.key=value]... [--print-config]\n"
		"                   [--help] [--version]\n"
		"\n"
		"Contributes a /dev/shm segment to a kvpool cluster: mounts it at\n"
		"kvpool-master, serves READ/WRITE over TCP, keeps its extents across\n"
		"restarts.\n"
		"\n"
		"  -c, --config FILE      INI file (default %s if it exists); repeat to\n"
		"                         layer files, later ones win\n"
		"  -o, --option S.K=V     set one key (after the file and the environment)\n"
		"      --print-config     print the effective configuration and exit\n"
		"  -h, --help             this text and the [node] keys\n"
		"  -V, --version          print the version\n"
		"\n"
		"Signals: TERM/INT drain and unmount, HUP reloads the configuration.\n"
		"\n"
		"[node] keys (every key: conf/kvpool.ini):\n",
		CONF_DEFAULT_FILE);
	for (size_t i = 0; i < conf_table_len; i++) {
		const struct conf_key *k = &conf_table[i];
		if (strcmp(k->section, "node") != 0)
			continue;
		fprintf(out, "  %-24s default \"%s\"\n      %s\n", k->key, k->def, k->help);
	}
}

static int install_signals(void)
{
	struct sigaction sa = { 0 };

	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sa.sa_handler = on_stop_signal;
	if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0)
		return -1;
	sa.sa_handler = on_hup;
	if (sigaction(SIGHUP, &sa, NULL) < 0)
		return -1;
	sa.sa_handler = SIG_IGN;
	return sigaction(SIGPIPE, &sa, NULL);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "option", required_argument, NULL, 'o' },
		{ "print-config", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *files[MAX_CONF_FILES];
	const char *overrides[MAX_OVERRIDES + 1];
	size_t nfiles = 0, nov = 0;
	bool print = false;
	int c;

	while ((c = getopt_long(argc, argv, "c:o:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (nfiles == MAX_CONF_FILES) {
				fprintf(stderr, "kvpool-node: at most %d -c files\n", MAX_CONF_FILES);
				return 1;
			}
			files[nfiles++] = optarg;
			break;
		case 'o':
			if (nov == MAX_OVERRIDES) {
				fprintf(stderr, "kvpool-node: at most %d -o options\n", MAX_OVERRIDES);
				return 1;
			}
			overrides[nov++] = optarg;
			break;
		case 'P':
			print = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("kvpool-node %s\n", KVP_VERSION);
			return 0;
		default:
			usage(stderr);
			return 1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvpool-node: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 1;
	}
	overrides[nov] = NULL;

	struct kvp_conf *conf = calloc(1, sizeof(*conf));
	char err[1024];
	if (!conf) {
		fprintf(stderr, "kvpool-node: out of memory\n");
		return 1;
	}
	if (node_conf_load(conf, files, nfiles, overrides, err, sizeof(err)) < 0) {
		fprintf(stderr, "kvpool-node: %s\n", err);
		free(conf);
		return 1;
	}
	if (print) {
		conf_print(conf, stdout);
		memset(conf->cluster.token, 0, sizeof(conf->cluster.token));
		free(conf);
		return 0;
	}
	log_init("kvpool-node", log_level_parse(conf->log.level));
	if (install_signals() < 0)
		fatal("sigaction");

	struct node *n = node_create(conf, err, sizeof(err));
	memset(conf->cluster.token, 0, sizeof(conf->cluster.token));
	free(conf);
	if (!n) {
		log_err("%s", err);
		return 1;
	}
	if (node_set_conf_source(n, files, nfiles, overrides) < 0)
		fatalx("out of memory");
	node_on_ready(n, on_ready, n);
	the_node = n;
	if (stop_early)
		node_stop(n);
	int r = node_run(n);
	the_node = NULL;
	node_destroy(n);
	log_notice("exiting (%s)", r == 0 ? "clean" : "error");
	return r == 0 ? 0 : 1;
}

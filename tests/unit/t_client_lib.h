/* t_client_lib: a private pool for the libkvpool tests (t_client_*.c) — a
 * real kvpool-master and N kvpool-node processes on free loopback ports with
 * /dev/shm segments named after the test's pid, all killed and removed at
 * exit (atexit + SIGTERM/SIGINT, so a failing CHECK or the runner's timeout
 * still cleans up). Binaries come from $KVP_BUILD (tests/run.sh sets it) or
 * build/; missing ones make the test skip (77). Header-only: each test is
 * one program.
 */
#ifndef T_CLIENT_LIB_H
#define T_CLIENT_LIB_H

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"

#define TC_MAX_NODES 4

static int tc_failures;

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
		tc_failures++; \
	} \
} while (0)
#define REQUIRE(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
		exit(1); \
	} \
} while (0)
/* rc == want, printing both names when not. */
#define CHECK_RC(rc, want) do { \
	long long _r = (long long)(rc), _w = (long long)(want); \
	if (_r != _w) { \
		fprintf(stderr, "%s:%d: %s = %lld (%s), expected %lld (%s)\n", __FILE__, __LINE__, \
			#rc, _r, _r < 0 ? kvp_errname((int)_r) : "", _w, \
			_w < 0 ? kvp_errname((int)_w) : ""); \
		tc_failures++; \
	} \
} while (0)

struct tc_pool {
	char dir[128];			/* private temp dir: configs, logs */
	char tag[64];			/* kvpt-cl-<pid>: shm names */
	char bin[256];			/* directory of the binaries */
	int mport, mhttp;
	pid_t master;
	int nnodes;
	pid_t node[TC_MAX_NODES];
	int dport[TC_MAX_NODES], hport[TC_MAX_NODES];
	char conf[256];			/* the client's (and master's) INI */
	char extra[1024];		/* extra [master]/[client] lines for every INI */
};

/* The one pool of the test: static, so the atexit handler still finds it
 * after main's frame is gone. */
static struct tc_pool tc_the_pool;
static struct tc_pool *tc_cur;
static volatile sig_atomic_t tc_cleaning;

static void tc_kill(pid_t *p, int sig)
{
	if (*p > 0) {
		kill(*p, sig);
		for (int i = 0; i < 50; i++) {
			if (waitpid(*p, NULL, WNOHANG) == *p) {
				*p = 0;
				return;
			}
			usleep(20000);
		}
		kill(*p, SIGKILL);
		waitpid(*p, NULL, 0);
		*p = 0;
	}
}

static void tc_cleanup(void)
{
	struct tc_pool *p = tc_cur;
	char path[4096];

	if (!p || tc_cleaning)
		return;
	tc_cleaning = 1;
	for (int i = 0; i < p->nnodes; i++)
		tc_kill(&p->node[i], SIGTERM);
	tc_kill(&p->master, SIGTERM);
	for (int i = 0; i < p->nnodes; i++) {
		snprintf(path, sizeof(path), "/dev/shm/%s-n%d", p->tag, i);
		unlink(path);
	}
	if (getenv("TC_KEEP_LOGS") == NULL) {
		snprintf(path, sizeof(path), "rm -rf '%s'", p->dir);
		if (system(path) != 0)
			fprintf(stderr, "cleanup: could not remove %s\n", p->dir);
	}
	tc_cur = NULL;
}

static void tc_on_signal(int sig)
{
	if (tc_cleaning)
		return;		/* cleanup is running: let it finish */
	tc_cleanup();
	_exit(128 + sig);
}

/* Dumps the tail of the daemons' logs (on failure). */
static void tc_logs(const struct tc_pool *p)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "for f in '%s'/*.log; do echo \"--- $f\"; tail -n 15 \"$f\"; done >&2",
		 p->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "(no logs)\n");
}

/* n free loopback ports (held open together so they differ). */
static void tc_ports(int *out, int n)
{
	int fds[16];

	REQUIRE(n <= 16);
	for (int i = 0; i < n; i++) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t sl = sizeof(a);

		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		REQUIRE(fds[i] >= 0);
		REQUIRE(bind(fds[i], (struct sockaddr *)&a, sizeof(a)) == 0);
		REQUIRE(getsockname(fds[i], (struct sockaddr *)&a, &sl) == 0);
		out[i] = ntohs(a.sin_port);
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

static void tc_write_common(const struct tc_pool *p, FILE *f)
{
	fprintf(f, "[cluster]\nmaster = 127.0.0.1:%d\n"
		"[master]\nlisten = 127.0.0.1:%d\nhttp_listen = 127.0.0.1:%d\n"
		"metadata_server = false\n"
		"[log]\nlevel = notice\n%s\n",
		p->mport, p->mport, p->mhttp, p->extra);
}

static pid_t tc_spawn(const struct tc_pool *p, const char *prog, const char *conf, const char *log)
{
	char exe[4096], lpath[4096];
	pid_t pid = fork();

	REQUIRE(pid >= 0);
	if (pid == 0) {
		snprintf(exe, sizeof(exe), "%s/%s", p->bin, prog);
		snprintf(lpath, sizeof(lpath), "%s/%s", p->dir, log);
		int fd = open(lpath, O_WRONLY | O_CREAT | O_APPEND, 0600);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		execl(exe, prog, "-c", conf, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static void tc_start_master(struct tc_pool *p)
{
	p->master = tc_spawn(p, "kvpool-master", p->conf, "master.log");
}

static void tc_start_node(struct tc_pool *p, int i)
{
	char conf[256], log[32];

	snprintf(conf, sizeof(conf), "%.127s/n%d.ini", p->dir, i);
	snprintf(log, sizeof(log), "n%d.log", i);
	p->node[i] = tc_spawn(p, "kvpool-node", conf, log);
}

/* Opens a client handle with extra overrides ("section.key=value", NULL
 * terminated; may be NULL). */
static struct kvp *tc_open(const struct tc_pool *p, const char *const *overrides, int *err)
{
	struct kvp_open_opts o = { .config_file = p->conf, .overrides = overrides };

	return kvp_open(&o, err);
}

/* Until the master lists want nodes (or seconds pass): true when it does. */
static int tc_wait_nodes(const struct tc_pool *p, size_t want, int seconds)
{
	for (int i = 0; i < seconds * 20; i++) {
		struct kvp *k = tc_open(p, NULL, NULL);

		if (k) {
			struct kvp_info info;

			if (kvp_info(k, &info) == 0) {
				size_t n = info.nnodes;

				kvp_info_free(&info);
				if (n == want) {
					kvp_close(k);
					return 1;
				}
			}
			kvp_close(k);
		}
		usleep(50000);
	}
	return 0;
}

/* Starts a master and n nodes of seg_mb MiB each. extra: INI lines appended
 * to every file (may hold [master]/[client] sections). Skips (77) when the
 * daemons are not built. */
static struct tc_pool *tc_start(int n, unsigned seg_mb, const char *extra)
{
	struct tc_pool *p = &tc_the_pool;
	const char *b = getenv("KVP_BUILD");
	char path[4096];
	int ports[2 + 2 * TC_MAX_NODES];
	FILE *f;

	memset(p, 0, sizeof(*p));
	REQUIRE(n <= TC_MAX_NODES);
	snprintf(p->bin, sizeof(p->bin), "%s", b && *b ? b : "build");
	snprintf(path, sizeof(path), "%.255s/kvpool-master", p->bin);
	if (access(path, X_OK) != 0) {
		printf("skip: %s is not built\n", path);
		exit(77);
	}
	snprintf(path, sizeof(path), "%.255s/kvpool-node", p->bin);
	if (access(path, X_OK) != 0) {
		printf("skip: %s is not built\n", path);
		exit(77);
	}
	snprintf(p->dir, sizeof(p->dir), "/tmp/kvpt-client.XXXXXX");
	REQUIRE(mkdtemp(p->dir));
	snprintf(p->tag, sizeof(p->tag), "kvpt-cl-%d", (int)getpid());
	snprintf(p->extra, sizeof(p->extra), "%s", extra ? extra : "");
	tc_ports(ports, 2 + 2 * n);
	p->mport = ports[0];
	p->mhttp = ports[1];
	p->nnodes = n;
	tc_cur = p;
	atexit(tc_cleanup);
	signal(SIGTERM, tc_on_signal);
	signal(SIGINT, tc_on_signal);

	snprintf(p->conf, sizeof(p->conf), "%.127s/pool.ini", p->dir);
	f = fopen(p->conf, "w");
	REQUIRE(f);
	tc_write_common(p, f);
	fclose(f);
	for (int i = 0; i < n; i++) {
		p->dport[i] = ports[2 + 2 * i];
		p->hport[i] = ports[3 + 2 * i];
		snprintf(path, sizeof(path), "%.127s/n%d.ini", p->dir, i);
		f = fopen(path, "w");
		REQUIRE(f);
		tc_write_common(p, f);
		fprintf(f, "[node]\nname = n%d\nlisten = 127.0.0.1:%d\nhttp_listen = 127.0.0.1:%d\n"
			"segment = %s-n%d\nsegment_size = %uM\nheartbeat_interval = 300ms\n"
			"remove_segment_on_exit = true\n",
			i, p->dport[i], p->hport[i], p->tag, i, seg_mb);
		fclose(f);
	}
	tc_start_master(p);
	for (int i = 0; i < n; i++)
		tc_start_node(p, i);
	if (!tc_wait_nodes(p, (size_t)n, 30)) {
		fprintf(stderr, "pool did not come up\n");
		tc_logs(p);
		exit(1);
	}
	return p;
}

/* Value bytes derived from the key and a length: any byte that lands in the
 * wrong place or the wrong object is detected. */
static void tc_fill(void *buf, size_t len, const char *key)
{
	uint64_t x = 1469598103934665603ull;
	uint8_t *b = buf;

	for (const char *k = key; *k; k++)
		x = (x ^ (uint8_t)*k) * 1099511628211ull;
	x ^= len;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		b[i] = (uint8_t)x;
	}
}

static int tc_check_fill(const void *buf, size_t len, const char *key)
{
	uint8_t *want = malloc(len ? len : 1);
	int ok;

	REQUIRE(want);
	tc_fill(want, len, key);
	ok = memcmp(buf, want, len) == 0;
	free(want);
	return ok;
}

static int tc_exit(void)
{
	if (tc_failures) {
		fprintf(stderr, "%d check(s) failed\n", tc_failures);
		if (tc_cur)
			tc_logs(tc_cur);
		return 1;
	}
	printf("ok\n");
	return 0;
}

#endif

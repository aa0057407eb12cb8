/* etcd_fx: a private etcd for unit tests — one member or three, on free
 * loopback ports (testlib's), data in a fresh directory under /dev/shm
 * (tmpfs: no fsync stalls on a busy disk), each member's log there too.
 * etcdfx_start() skips the test (exit 77) when the etcd binary (Debian's
 * etcd-server) is missing. The members are testlib processes and the
 * directory a testlib temp dir, so both go at exit, also on failure.
 * Single-threaded test code only; include testlib.h first.
 */
#ifndef KVP_ETCD_FX_H
#define KVP_ETCD_FX_H

#include "etcd.h"

#define ETCDFX_MAX 3

struct etcd_fx {
	int n;
	pid_t pid[ETCDFX_MAX];
	int cport[ETCDFX_MAX], pport[ETCDFX_MAX];
	char bin[256];
	const char *dir;
	char endpoints[256];		/* "127.0.0.1:p;127.0.0.1:q;..." */
	char ep[ETCDFX_MAX][64];	/* each member's "127.0.0.1:p" */
};

/* A testlib temp dir on /dev/shm when it exists. */
static inline const char *etcdfx_dir(void)
{
	tl_arm_cleanup();
	for (int i = 0; i < TL_MAX_DIRS; i++) {
		if (tl_dirs[i][0])
			continue;
		snprintf(tl_dirs[i], sizeof(tl_dirs[i]), "/dev/shm/kvpt-etcd-%d-XXXXXX",
			 (int)getpid());
		if (mkdtemp(tl_dirs[i]))
			return tl_dirs[i];
		tl_dirs[i][0] = '\0';
		return tl_tmpdir("etcd");
	}
	REQUIRE(0, "too many temp dirs");
	return NULL;
}

static inline void etcdfx_spawn(struct etcd_fx *f, int i)
{
	char name[16], data[192], log[192], curl[64], purl[64], cluster[512] = "";

	tl_fmt(name, sizeof(name), "m%d", i);
	tl_fmt(data, sizeof(data), "%s/%s.data", f->dir, name);
	tl_fmt(log, sizeof(log), "%s/%s.log", f->dir, name);
	tl_fmt(curl, sizeof(curl), "http://127.0.0.1:%d", f->cport[i]);
	tl_fmt(purl, sizeof(purl), "http://127.0.0.1:%d", f->pport[i]);
	for (int k = 0; k < f->n; k++) {
		size_t l = strlen(cluster);
		tl_fmt(cluster + l, sizeof(cluster) - l, "%sm%d=http://127.0.0.1:%d", k ? "," : "",
		       k, f->pport[k]);
	}
	char *argv[] = { f->bin, "--name", name, "--data-dir", data,
			 "--listen-client-urls", curl, "--advertise-client-urls", curl,
			 "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
			 "--initial-cluster", cluster, "--initial-cluster-state", "new",
			 "--initial-cluster-token", (char *)f->dir,
			 "--heartbeat-interval", "100", "--election-timeout", "1000",
			 "--logger", "zap", NULL };
	f->pid[i] = tl_spawn(argv, log);
}

/* Waits until member i answers a range (its cluster has a leader). */
static inline int etcdfx_wait(struct etcd_fx *f, int i, int seconds)
{
	char err[128];
	struct etcd *e = etcd_create(f->ep[i], 500, NULL, err, sizeof(err));
	struct etcd_kv *kv = malloc(sizeof(*kv));
	int rc = -1;

	REQUIRE(e && kv, "etcd_create: %s", err);
	for (uint64_t end = tl_now_ms() + (uint64_t)seconds * 1000; tl_now_ms() < end;) {
		int r = etcd_get(e, "etcdfx/ping", kv, NULL);
		if (r == 0 || r == -ENOENT) {
			rc = 0;
			break;
		}
		if (!tl_alive(f->pid[i]))
			break;
		tl_sleep_ms(50);
	}
	free(kv);
	etcd_destroy(e);
	return rc;
}

static inline void etcdfx_log_tail(struct etcd_fx *f)
{
	char cmd[256];

	tl_fmt(cmd, sizeof(cmd), "tail -n 15 %s/*.log >&2", f->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "etcd_fx: no logs\n");
}

/* Starts an etcd of members members (1..3) and waits until each answers. */
static inline void etcdfx_start(struct etcd_fx *f, int members)
{
	memset(f, 0, sizeof(*f));
	FILE *p = popen("command -v etcd", "r");
	if (!p || !fgets(f->bin, sizeof(f->bin), p) || f->bin[0] != '/') {
		if (p)
			pclose(p);
		TL_SKIP("etcd is not installed (apt-get install etcd-server)");
	}
	pclose(p);
	f->bin[strcspn(f->bin, "\n")] = '\0';
	REQUIRE(members >= 1 && members <= ETCDFX_MAX, "members");
	f->dir = etcdfx_dir();
	f->n = members;
	for (int i = 0; i < members; i++) {
		f->cport[i] = tl_free_port();
		f->pport[i] = tl_free_port();
		tl_fmt(f->ep[i], sizeof(f->ep[i]), "127.0.0.1:%d", f->cport[i]);
		size_t l = strlen(f->endpoints);
		tl_fmt(f->endpoints + l, sizeof(f->endpoints) - l, "%s%s", i ? ";" : "", f->ep[i]);
	}
	for (int i = 0; i < members; i++)
		etcdfx_spawn(f, i);
	for (int i = 0; i < members; i++)
		if (etcdfx_wait(f, i, 30) < 0) {
			etcdfx_log_tail(f);
			REQUIRE(0, "etcd member %d did not come up", i);
		}
}

/* SIGSTOP / SIGCONT / SIGKILL member i (a killed one is reaped). */
static inline void etcdfx_signal(struct etcd_fx *f, int i, int sig)
{
	if (f->pid[i] <= 0)
		return;
	if (sig == SIGKILL) {
		tl_kill(f->pid[i], SIGKILL, 5000);
		f->pid[i] = 0;
		return;
	}
	kill(f->pid[i], sig);
}

/* Starts a killed member again on its ports and data. */
static inline int etcdfx_restart(struct etcd_fx *f, int i)
{
	if (f->pid[i] > 0)
		return 0;
	etcdfx_spawn(f, i);
	return etcdfx_wait(f, i, 30);
}

#endif

/* localpool: a private master + node for the kvpool tool; see localpool.h.
 * The daemons are the ones installed or built with this binary: looked up
 * in the directory of /proc/self/exe, then in ../sbin of it.
 */
#include "localpool.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "kvpool.h"
#include "kvpool_i.h"
#include "log.h"
#include "segment.h"

#define LP_ALIGN 4096u
#define LP_MIN_SEGMENT (1u << 20)	/* [node] segment_size's minimum */
#define LP_START_MS 20000		/* a daemon that is not up by then has failed */
#define LP_STOP_MS 5000

static void lp_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

uint64_t localpool_segment_size(uint64_t nblocks, uint64_t alloc)
{
	uint64_t need = nblocks * alloc, size;

	size = need + segment_data_off(need, LP_ALIGN);
	size = (size + LP_ALIGN - 1) & ~(uint64_t)(LP_ALIGN - 1);
	/* The map grows with the file: step up until the data area fits. */
	while (size - segment_data_off(size, LP_ALIGN) < need)
		size += LP_ALIGN;
	return size < LP_MIN_SEGMENT ? LP_MIN_SEGMENT : size;
}

/* path of a daemon installed or built with this binary */
static int lp_find_bin(const char *name, char *out, size_t len)
{
	char self[PATH_MAX], dir[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0)
		return -1;
	self[n] = '\0';
	snprintf(dir, sizeof(dir), "%s", self);
	snprintf(out, len, "%s/%s", dirname(dir), name);
	if (access(out, X_OK) == 0)
		return 0;
	snprintf(dir, sizeof(dir), "%s", self);
	snprintf(out, len, "%s/../sbin/%s", dirname(dir), name);
	if (access(out, X_OK) == 0)
		return 0;
	snprintf(dir, sizeof(dir), "%s", self);
	snprintf(out, len, "%s/%s", dirname(dir), name);
	return -1;
}

/* n distinct free loopback ports, bound together so that they differ */
static int lp_free_ports(int *ports, int n)
{
	int fds[8], rc = 0;

	for (int i = 0; i < n; i++)
		fds[i] = -1;
	for (int i = 0; i < n && rc == 0; i++) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t al = sizeof(a);

		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&a, sizeof(a)) < 0 ||
		    getsockname(fds[i], (struct sockaddr *)&a, &al) < 0)
			rc = -errno;
		else
			ports[i] = ntohs(a.sin_port);
	}
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return rc;
}

static bool lp_accepts(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok;

	if (fd < 0)
		return false;
	ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

extern char **environ;

/* Starts bin -c ini with stdout and stderr in log. The daemons must read
 * only the generated INI: KVPOOL_* and MOONCAKE_* variables (which
 * override files) are left out of their environment. */
static pid_t lp_spawn(const char *bin, const char *ini, const char *log)
{
	pid_t parent = getpid(), pid;
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 1, sizeof(*env));
	if (!env)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "KVPOOL_", 7) && strncmp(environ[i], "MOONCAKE_", 9))
			env[k++] = environ[i];
	pid = fork();
	if (pid != 0) {
		free(env);
		return pid;
	}
	/* the child: its own process group, killed with the tool */
	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd >= 0) {
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
	}
	int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);

	if (nul >= 0)
		dup2(nul, STDIN_FILENO);
	char *const argv[] = { (char *)bin, (char *)"-c", (char *)ini, NULL };

	execve(bin, argv, env);
	_exit(127);
}

/* The last line of a daemon's log, for the error message. */
static void lp_log_tail(const struct localpool *p, const char *name, char *out, size_t len)
{
	char path[256], line[512] = "";
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s.log", p->dir, name);
	out[0] = '\0';
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (line[0] != '\n')
			snprintf(out, len, "%s", line);
	fclose(f);
	out[strcspn(out, "\n")] = '\0';
}

/* 0 while pid runs; else -1 with err naming it and the end of its log. */
static int lp_check(struct localpool *p, pid_t *pid, const char *name, char *err, size_t errlen)
{
	char tail[300];
	int st;

	if (*pid <= 0 || waitpid(*pid, &st, WNOHANG) != *pid)
		return 0;
	*pid = 0;
	lp_log_tail(p, name, tail, sizeof(tail));
	if (WIFSIGNALED(st))
		log_seterr(err, errlen, "%s died of signal %d: %s", name, WTERMSIG(st), tail);
	else
		log_seterr(err, errlen, "%s exited %d: %s", name, WEXITSTATUS(st), tail);
	return -1;
}

static bool lp_stopped(const struct localpool *p)
{
	return p->stop && *p->stop;
}

int localpool_conf(const struct localpool *p, struct kvp_conf *conf, char *err, size_t errlen)
{
	const char *files[1] = { p->ini };
	char master[96];
	/* The environment may still tune the client (KVPOOL_CLIENT_*), never
	 * point it at another pool. */
	const char *over[] = { master, "cluster.token_file=", NULL };

	snprintf(master, sizeof(master), "cluster.master=%s", p->master_addr);
	return conf_load_files(conf, files, 1, over, err, errlen) < 0 ? -1 : 0;
}

/* Until the master lists a node with a mounted segment. */
static int lp_wait_node(struct localpool *p, char *err, size_t errlen)
{
	struct kvp_conf conf;
	struct kvp *kvp = NULL;
	uint64_t end = clock_now_ms() + LP_START_MS;
	int rc = -1, e = 0;

	if (localpool_conf(p, &conf, err, errlen) < 0)
		return -1;
	while (!lp_stopped(p)) {
		if (lp_check(p, &p->master, "kvpool-master", err, errlen) < 0 ||
		    lp_check(p, &p->node, "kvpool-node", err, errlen) < 0)
			break;
		if (!kvp)
			kvp = kvp_open_conf(&conf, &e);
		if (kvp) {
			struct kvp_info in;

			if (kvp_info(kvp, &in) == 0) {
				bool up = in.nnodes > 0 && in.capacity > 0;

				kvp_info_free(&in);
				if (up) {
					rc = 0;
					break;
				}
			}
		}
		if (clock_now_ms() > end) {
			log_seterr(err, errlen, "the node's segment was not mounted within %u s (logs in %s)",
			           LP_START_MS / 1000, p->dir);
			break;
		}
		lp_sleep_ms(50);
	}
	if (rc && lp_stopped(p))
		log_seterr(err, errlen, "interrupted");
	if (kvp)
		kvp_close(kvp);
	return rc;
}

int localpool_start(struct localpool *p, const char *tag, uint64_t segment_size,
		    char *err, size_t errlen)
{
	static unsigned seq;
	const volatile sig_atomic_t *stop = p->stop;
	const char *extra = p->master_extra;
	char master_bin[PATH_MAX], node_bin[PATH_MAX], path[256];
	int ports[4];
	uint64_t end;
	FILE *f;

	memset(p, 0, sizeof(*p));
	p->stop = stop;
	p->master_extra = extra;
	p->segment_size = segment_size;
	if (lp_find_bin("kvpool-master", master_bin, sizeof(master_bin)) < 0 ||
	    lp_find_bin("kvpool-node", node_bin, sizeof(node_bin)) < 0) {
		log_seterr(err, errlen, "%s not found (kvpool-master and kvpool-node are looked for next "
		           "to this program)", access(master_bin, X_OK) ? master_bin : node_bin);
		return -1;
	}
	snprintf(p->dir, sizeof(p->dir), "/tmp/kvpool-%s-%d-XXXXXX", tag, (int)getpid());
	if (!mkdtemp(p->dir)) {
		log_seterr(err, errlen, "mkdtemp %s: %s", p->dir, strerror(errno));
		p->dir[0] = '\0';
		return -1;
	}
	snprintf(p->ini, sizeof(p->ini), "%s/pool.ini", p->dir);
	snprintf(p->segment, sizeof(p->segment), "kvpool-%s-%d-%u", tag, (int)getpid(), ++seq);
	if (lp_free_ports(ports, 4) < 0) {
		log_seterr(err, errlen, "no free loopback port: %s", strerror(errno));
		goto out_stop;
	}
	snprintf(p->master_addr, sizeof(p->master_addr), "127.0.0.1:%d", ports[0]);
	f = fopen(p->ini, "w");
	if (!f) {
		log_seterr(err, errlen, "%s: %s", p->ini, strerror(errno));
		goto out_stop;
	}
	fprintf(f, "# a private pool of the kvpool tool (%s), removed when it ends\n"
		"[cluster]\nmaster = %s\n"
		"[master]\nlisten = %s\nhttp_listen = 127.0.0.1:%d\nmetadata_server = false\n%s"
		"[node]\nname = %s\nlisten = 127.0.0.1:%d\nhttp_listen = 127.0.0.1:%d\n"
		"segment = %s\nsegment_size = %llu\nalign = 4K\nremove_segment_on_exit = true\n"
		"[log]\nlevel = warning\n",
		tag, p->master_addr, p->master_addr, ports[1],
		p->master_extra ? p->master_extra : "", p->segment, ports[2], ports[3], p->segment,
		(unsigned long long)segment_size);
	if (fclose(f) != 0) {
		log_seterr(err, errlen, "%s: %s", p->ini, strerror(errno));
		goto out_stop;
	}
	snprintf(path, sizeof(path), "%s/kvpool-master.log", p->dir);
	p->master = lp_spawn(master_bin, p->ini, path);
	if (p->master < 0) {
		p->master = 0;
		log_seterr(err, errlen, "fork: %s", strerror(errno));
		goto out_stop;
	}
	for (end = clock_now_ms() + LP_START_MS; !lp_accepts(ports[0]); lp_sleep_ms(20)) {
		if (lp_check(p, &p->master, "kvpool-master", err, errlen) < 0)
			goto out_stop;
		if (lp_stopped(p) || clock_now_ms() > end) {
			log_seterr(err, errlen, lp_stopped(p) ? "interrupted" :
			           "kvpool-master did not listen on %s", p->master_addr);
			goto out_stop;
		}
	}
	snprintf(path, sizeof(path), "%s/kvpool-node.log", p->dir);
	p->node = lp_spawn(node_bin, p->ini, path);
	if (p->node < 0) {
		p->node = 0;
		log_seterr(err, errlen, "fork: %s", strerror(errno));
		goto out_stop;
	}
	if (lp_wait_node(p, err, errlen) < 0)
		goto out_stop;
	return 0;

out_stop:
	localpool_stop(p);
	return -1;
}

static void lp_kill(pid_t *pid)
{
	uint64_t end = clock_now_ms() + LP_STOP_MS;
	int st;

	if (*pid <= 0)
		return;
	kill(*pid, SIGTERM);
	while (waitpid(*pid, &st, WNOHANG) == 0) {
		if (clock_now_ms() > end) {
			kill(*pid, SIGKILL);
			waitpid(*pid, &st, 0);
			break;
		}
		lp_sleep_ms(10);
	}
	*pid = 0;
}

void localpool_stop(struct localpool *p)
{
	static const char *const files[] = { "pool.ini", "kvpool-master.log", "kvpool-node.log" };
	char path[300];

	/* the node first: it unmounts from a master that still listens */
	lp_kill(&p->node);
	lp_kill(&p->master);
	if (p->segment[0]) {
		segment_path(p->segment, path, sizeof(path));
		unlink(path);
		p->segment[0] = '\0';
	}
	if (p->dir[0]) {
		for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
			snprintf(path, sizeof(path), "%s/%s", p->dir, files[i]);
			unlink(path);
		}
		rmdir(p->dir);
		p->dir[0] = '\0';
	}
}

/* kvfs: mounting and serving the FUSE view (libfuse 3 low-level API, see
 * kvfs_ops.h for the operations). kvfs_start/kvfs_stop run the session on a
 * background thread inside kvpool-node; kvfs_main is `kvpool mount`, which
 * serves on its main thread and unmounts on SIGTERM/SIGINT. One struct kvfs
 * per mount; its fields are fixed after start except those under fs->lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvfs_commit.h"
#include "kvfs_fs.h"
#include "kvfs_io.h"
#include "kvfs_local.h"
#include "kvfs_node.h"
#include "kvfs_ops.h"
#include "kvfs_uring.h"
#include "log.h"
#include "net.h"

#define KVFS_MAX_IO (1u << 20)		/* libfuse's buffer holds 256 pages */
#define KVFS_STOP_WAIT_MS 5000		/* busy mount: then abort the connection */

/* ---- mount table helpers ---------------------------------------------- */

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unoctal(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = 0;
}

/* The topmost mount at path: its file system type and device numbers.
 * 0, or -ENOENT when nothing is mounted exactly there. */
static int mount_find(const char *path, char *fstype, size_t flen, unsigned *maj, unsigned *min)
{
	char line[8192];
	int rc = -ENOENT;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char mp[4096], type[256], *dash;
		unsigned a, b;

		/* id parent major:minor root mountpoint opts [optional...] - type source super */
		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &a, &b, mp) != 3)
			continue;
		unoctal(mp);
		dash = strstr(line, " - ");
		if (strcmp(mp, path) != 0 || !dash || sscanf(dash + 3, "%255s", type) != 1)
			continue;
		snprintf(fstype, flen, "%s", type);
		*maj = a;
		*min = b;
		rc = 0;		/* keep going: the last one is on top */
	}
	fclose(f);
	return rc;
}

/* fusermount3 -u -z PATH for a mount we may not umount2 ourselves. */
static int run_fusermount_u(const char *path)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execlp("fusermount3", "fusermount3", "-u", "-z", "--", path, (char *)NULL);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

/* Unmounts path: plainly, lazily when busy (root), or with fusermount3. */
static int unmount_path(const char *path, bool lazy_only)
{
	if (geteuid() == 0) {
		if (!lazy_only && umount2(path, 0) == 0)
			return 0;
		if (umount2(path, MNT_DETACH) == 0)
			return 0;
		if (errno != EPERM)
			return -errno;
	}
	return run_fusermount_u(path);
}

/* A FUSE mount whose daemon died answers ENOTCONN: detach it so that the
 * directory can be mounted again. statfs, unlike stat, is never answered
 * from the kernel's attribute cache. */
static int clear_stale(const char *path, char *err, size_t errlen)
{
	struct statfs sf;
	struct stat st;

	if (statfs(path, &sf) == 0)
		return 0;
	/* ECONNABORTED: a daemon on io_uring died a moment ago, the kernel
	 * is still tearing its rings down (then ENOTCONN) */
	if (errno != ENOTCONN && errno != ECONNABORTED) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	log_notice("kvfs: clearing the stale mount at %s (its daemon is gone)", path);
	unmount_path(path, true);
	if (statfs(path, &sf) != 0 || stat(path, &st) != 0) {
		snprintf(err, errlen, "%s: stale FUSE mount could not be cleared (%s); try "
			 "'fusermount3 -u -z %s' or 'umount -l %s'", path, strerror(errno), path, path);
		return -1;
	}
	return 0;
}

/* Best effort: read ahead as much as one request carries, so that
 * sequential reads of big values arrive in max_read pieces. */
static void tune_readahead(struct kvfs *fs)
{
	char p[128], v[32];
	int fd;

	if (geteuid() != 0)
		return;
	snprintf(p, sizeof(p), "/sys/class/bdi/%u:%u/read_ahead_kb", fs->dev_major, fs->dev_minor);
	fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	snprintf(v, sizeof(v), "%u", fs->max_io / 1024);
	if (write(fd, v, strlen(v)) < 0)
		log_debug("kvfs: %s: %s", p, strerror(errno));
	close(fd);
}

/* Severs the kernel connection (fusectl), which ends the session loop even
 * while processes still hold files of a lazily detached mount open. */
static void abort_connection(struct kvfs *fs)
{
	char p[128];
	int fd;

	snprintf(p, sizeof(p), "/sys/fs/fuse/connections/%u/abort", fs->dev_minor);
	fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0 && geteuid() == 0) {
		mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, NULL);
		fd = open(p, O_WRONLY | O_CLOEXEC);
	}
	if (fd < 0) {
		log_warn("kvfs: cannot abort the FUSE connection (%s): %s", p, strerror(errno));
		return;
	}
	if (write(fd, "1", 1) < 0)
		log_warn("kvfs: %s: %s", p, strerror(errno));
	close(fd);
}

/* ---- setup / teardown ----------------------------------------------------- */

struct kvfs_opts {
	bool foreground;
	bool debug;
	char fuse_opts[1024];	/* generic mount options passed to libfuse */
};

static void fs_free(struct kvfs *fs)
{
	if (!fs)
		return;
	kvfs_commit_stop(fs);	/* what is queued goes to the pool first */
	kvfs_uring_stop(fs);
	if (fs->se)
		fuse_session_destroy(fs->se);
	if (fs->kvp)
		kvp_close(fs->kvp);
	kvfs_local_free(fs);
	kvfs_tables_free(fs);
	pthread_cond_destroy(&fs->pending_done);
	pthread_mutex_destroy(&fs->lock);
	pthread_mutex_destroy(&fs->kvp_lock);
	pthread_mutex_destroy(&fs->lseg_lock);
	free(fs);
}

static struct kvfs *fs_create(const struct kvp_conf *conf, const char *mountpoint,
			      const struct kvfs_opts *o, bool need_pool, char *err, size_t errlen)
{
	char fstype[256], optbuf[2048];
	struct kvfs *fs;
	int rc, e = 0;

	fs = calloc(1, sizeof(*fs));
	if (!fs) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&fs->lock, NULL);
	pthread_cond_init(&fs->pending_done, NULL);
	pthread_mutex_init(&fs->kvp_lock, NULL);
	pthread_mutex_init(&fs->lseg_lock, NULL);
	fs->conf = *conf;
	fs->ro = conf->fuse.ro;
	fs->attr_timeout = (double)conf->fuse.attr_timeout / 1000.0;
	fs->entry_timeout = (double)conf->fuse.entry_timeout / 1000.0;
	fs->fmode = (mode_t)(conf->fuse.mode & 07777);
	fs->uid = getuid();
	fs->gid = getgid();
	fs->max_object = conf->cluster.max_object_size ? conf->cluster.max_object_size : (1ull << 30);
	fs->max_io = conf->fuse.max_read && conf->fuse.max_read < KVFS_MAX_IO ?
		(uint32_t)conf->fuse.max_read : KVFS_MAX_IO;
	if (fs->max_io < 4096)
		fs->max_io = 4096;
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		fs->mount_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	}
	if (conf->client.host_id[0])
		snprintf(fs->host_id, sizeof(fs->host_id), "%.63s", conf->client.host_id);
	else if (net_host_id(fs->host_id, sizeof(fs->host_id)) < 0)
		fs->host_id[0] = 0;

	fs->uring_mode = kvfs_uring_mode(conf->fuse.io_uring);
	if (fs->uring_mode < 0) {
		snprintf(err, errlen, "[fuse] io_uring = %s: auto, on or off", conf->fuse.io_uring);
		goto out_free;
	}
	if (fs->uring_mode == KVFS_URING_ON && !kvfs_uring_enabled()) {
		snprintf(err, errlen, "[fuse] io_uring = on, but the kernel does not let FUSE use "
			 "io_uring: needs Linux 6.14+ with CONFIG_FUSE_IO_URING and Y in "
			 "/sys/module/fuse/parameters/enable_uring");
		goto out_free;
	}
	if (clear_stale(mountpoint, err, errlen) < 0)
		goto out_free;
	if (!realpath(mountpoint, fs->mnt)) {
		snprintf(err, errlen, "%s: %s", mountpoint, strerror(errno));
		goto out_free;
	}
	{
		struct stat st;
		unsigned a, b;

		if (stat(fs->mnt, &st) != 0 || !S_ISDIR(st.st_mode)) {
			snprintf(err, errlen, "%s: not a directory", fs->mnt);
			goto out_free;
		}
		if (mount_find(fs->mnt, fstype, sizeof(fstype), &a, &b) == 0 &&
		    !strcmp(fstype, "fuse.kvpool")) {
			snprintf(err, errlen, "%s: a kvpool view is already mounted there", fs->mnt);
			goto out_free;
		}
	}
	if (kvfs_tables_init(fs) < 0) {
		snprintf(err, errlen, "out of memory");
		goto out_free;
	}
	if (kvfs_commit_start(fs) < 0) {
		snprintf(err, errlen, "cannot start the commit thread");
		goto out_free;
	}

	/* the view's own pool client */
	fs->kvp = kvfs_kvp(fs, &e);
	if (!fs->kvp) {
		if (need_pool) {
			snprintf(err, errlen, "cannot reach the master at %s: %s",
				 conf->cluster.master, kvp_strerror(e));
			goto out_free;
		}
		/* in the node: mount anyway, calls fail with EIO until the
		 * master answers (kvfs_kvp retries) */
		log_warn("kvfs: master at %s: %s; retrying on use", conf->cluster.master,
			 kvp_strerror(e));
	}

	snprintf(optbuf, sizeof(optbuf), "fsname=kvpool,subtype=kvpool,default_permissions,"
		 "max_read=%u%s%s%s%s", fs->max_io, conf->fuse.allow_other ? ",allow_other" : "",
		 fs->ro ? ",ro" : "", o && o->fuse_opts[0] ? "," : "", o ? o->fuse_opts : "");
	{
		char *argv[] = { "kvpool", "-o", optbuf, o && o->debug ? "-d" : NULL, NULL };
		struct fuse_args args = FUSE_ARGS_INIT(o && o->debug ? 4 : 3, argv);

		fs->se = fuse_session_new(&args, &kvfs_ops, sizeof(kvfs_ops), fs);
		fuse_opt_free_args(&args);
	}
	if (!fs->se) {
		snprintf(err, errlen, "fuse_session_new failed (bad mount options: %s?)", optbuf);
		goto out_free;
	}
	if (fuse_session_mount(fs->se, fs->mnt) != 0) {
		snprintf(err, errlen, "%s: mount failed (is /dev/fuse there, and fusermount3 "
			 "installed for non-root users?)", fs->mnt);
		goto out_free;
	}
	rc = kvfs_io_attach(fs);
	if (rc < 0)	/* then mmap of local values falls back to the page cache */
		log_info("kvfs: custom FUSE I/O not available (%s)", strerror(-rc));
	rc = mount_find(fs->mnt, fstype, sizeof(fstype), &fs->dev_major, &fs->dev_minor);
	if (rc == 0)
		tune_readahead(fs);
	return fs;

out_free:
	fs_free(fs);
	return NULL;
}

static int run_loop(struct kvfs *fs)
{
	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	int rc;

	if (!cfg)
		return -ENOMEM;
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	fuse_loop_cfg_set_idle_threads(cfg, 4);
	fuse_loop_cfg_set_max_threads(cfg, 32);
	rc = fuse_session_loop_mt(fs->se, cfg);
	fuse_loop_cfg_destroy(cfg);
	return rc;
}

/* Whether this view's mount is still at fs->mnt. */
static bool still_mounted(struct kvfs *fs)
{
	char type[256];
	unsigned a, b;

	return mount_find(fs->mnt, type, sizeof(type), &a, &b) == 0 && a == fs->dev_major &&
	       b == fs->dev_minor;
}

static void *loop_thread(void *arg)
{
	struct kvfs *fs = arg;
	int rc = run_loop(fs);

	if (rc < 0)
		log_err("kvfs: session at %s ended: %s", fs->mnt, strerror(-rc));
	return NULL;
}

struct kvfs *kvfs_start(const struct kvp_conf *conf, const char *mountpoint, char *err,
			size_t errlen)
{
	struct kvfs *fs;
	sigset_t all, old;
	int rc;

	fs = fs_create(conf, mountpoint, NULL, false, err, errlen);
	if (!fs)
		return NULL;
	/* the node's signals stay with the node's threads */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(&fs->thread, NULL, loop_thread, fs);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		snprintf(err, errlen, "pthread_create: %s", strerror(rc));
		fuse_session_unmount(fs->se);
		fs_free(fs);
		return NULL;
	}
	fs->thread_started = true;
	log_info("kvfs: serving %s", fs->mnt);
	return fs;
}

void kvfs_stop(struct kvfs *fs)
{
	if (!fs)
		return;
	if (fs->thread_started) {
		struct timespec ts;
		int rc;

		/* Unmounting ends the session: the kernel fails the workers'
		 * reads with ENODEV. The device fd stays open until they are
		 * gone, so no reply ever goes to a reused descriptor. */
		fuse_session_exit(fs->se);
		rc = unmount_path(fs->mnt, false);
		if (rc < 0 && still_mounted(fs))	/* not if someone unmounted it */
			log_warn("kvfs: unmount %s: %s", fs->mnt, strerror(-rc));
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += KVFS_STOP_WAIT_MS / 1000;
		if (pthread_timedjoin_np(fs->thread, NULL, &ts) != 0) {
			/* still busy (open files on a detached mount) */
			abort_connection(fs);
			pthread_join(fs->thread, NULL);
		}
		fs->thread_started = false;
	}
	fuse_session_unmount(fs->se);
	fs_free(fs);
}

/* ---- kvpool mount --------------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: kvpool [-c FILE] mount DIR [-f] [-d] [-o OPT[,OPT...]]\n"
		"  -f   stay in the foreground (otherwise detach once mounted)\n"
		"  -d   debug: libfuse prints every request (implies -f)\n"
		"  -o   ro, rw, allow_other, attr_timeout=T, entry_timeout=T, mode=0644,\n"
		"       max_read=1M, write_behind=256K, io_uring=auto|on|off, master=HOST:PORT,\n"
		"       config=FILE, and\n"
		"       the generic mount options nosuid nodev noexec noatime ... (defaults,\n"
		"       _netdev, auto, noauto, nofail, user, users, x-* are accepted and\n"
		"       ignored)\n");
}

static bool opt_ignored(const char *o)
{
	static const char *const ign[] = { "defaults", "_netdev", "auto", "noauto", "nofail",
					   "user", "users", "nouser", "owner", "group", "rw",
					   "default_permissions", NULL };

	for (int i = 0; ign[i]; i++)
		if (!strcmp(o, ign[i]))
			return true;
	return !strncmp(o, "x-", 2) || !strncmp(o, "comment=", 8) || !strncmp(o, "_", 1);
}

static bool opt_generic(const char *o)
{
	static const char *const gen[] = { "nosuid", "suid", "nodev", "dev", "noexec", "exec",
					   "noatime", "atime", "nodiratime", "diratime",
					   "relatime", "norelatime", "strictatime",
					   "nostrictatime", "sync", "async", "dirsync",
					   "allow_root", NULL };

	for (int i = 0; gen[i]; i++)
		if (!strcmp(o, gen[i]))
			return true;
	return false;
}

static int set_key(struct kvp_conf *c, const char *section, const char *key, const char *val)
{
	char err[512];

	if (conf_set(c, section, key, val, CONF_SRC_CMDLINE, err, sizeof(err)) < 0) {
		fprintf(stderr, "kvpool mount: -o %s=%s: %s\n", key, val, err);
		return -1;
	}
	return 0;
}

/* The configuration named by config=FILE in an -o list (the fstab
 * helper's way), loaded before the other options apply. */
static int parse_config_opt(const char *list, struct kvp_conf *c)
{
	const char *p = list;

	while ((p = strstr(p, "config=")) != NULL) {
		if (p == list || p[-1] == ',') {
			char file[CONF_STR], err[512];
			size_t n = strcspn(p + 7, ",");

			if (n >= sizeof(file)) {
				fprintf(stderr, "kvpool mount: config= path too long\n");
				return -1;
			}
			memcpy(file, p + 7, n);
			file[n] = 0;
			if (conf_load(c, file, NULL, err, sizeof(err)) < 0) {
				fprintf(stderr, "kvpool mount: %s\n", err);
				return -1;
			}
		}
		p += 7;
	}
	return 0;
}

/* Applies one -o list to c and o. */
static int parse_opts(char *list, struct kvp_conf *c, struct kvfs_opts *o)
{
	char *save = NULL;

	for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(t, '=');
		const char *val = eq ? eq + 1 : NULL;

		if (eq)
			*eq = 0;
		if (val && !strcmp(t, "config")) {
			continue;	/* parse_config_opt */
		} else if (!strcmp(t, "ro") && !val) {
			c->fuse.ro = true;
		} else if (!strcmp(t, "rw") && !val) {
			c->fuse.ro = false;
		} else if (!strcmp(t, "allow_other") && !val) {
			c->fuse.allow_other = true;
		} else if (val && (!strcmp(t, "attr_timeout") || !strcmp(t, "entry_timeout") ||
				   !strcmp(t, "mode") || !strcmp(t, "max_read") ||
				   !strcmp(t, "write_behind") || !strcmp(t, "io_uring"))) {
			if (set_key(c, "fuse", t, val) < 0)
				return -1;
		} else if (val && !strcmp(t, "master")) {
			if (set_key(c, "cluster", "master", val) < 0)
				return -1;
		} else if (!val && opt_ignored(t)) {
			continue;
		} else if (!val && opt_generic(t)) {
			size_t l = strlen(o->fuse_opts);

			snprintf(o->fuse_opts + l, sizeof(o->fuse_opts) - l, "%s%s", l ? "," : "", t);
		} else {
			fprintf(stderr, "kvpool mount: unknown mount option '%s%s%s'\n", t,
				val ? "=" : "", val ? val : "");
			return -1;
		}
	}
	return 0;
}

/* Forks. The parent waits for the child's one-byte report (0: mounted) and
 * exits with it; the child gets the pipe's write end (or -1 on failure,
 * then nothing was forked). */
static int daemonize_start(void)
{
	int p[2];
	pid_t pid;

	if (pipe(p) < 0)
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid > 0) {
		unsigned char st = 1;

		close(p[1]);
		while (read(p[0], &st, 1) < 0 && errno == EINTR)
			;
		_exit(st);	/* no EOF byte: the child died before mounting */
	}
	close(p[0]);
	setsid();
	return p[1];
}

static void daemonize_done(int fd, unsigned char status)
{
	if (fd < 0)
		return;
	if (status == 0) {
		int nul = open("/dev/null", O_RDWR);

		if (chdir("/") != 0)
			log_debug("kvfs: chdir /: %s", strerror(errno));
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
			dup2(nul, 2);
			if (nul > 2)
				close(nul);
		}
	}
	while (write(fd, &status, 1) < 0 && errno == EINTR)
		;
	close(fd);
}

int kvfs_main(const struct kvp_conf *conf, int argc, char **argv)
{
	struct kvfs_opts o = { 0 };
	const char *dir = NULL;
	struct kvp_conf c = *conf;
	char err[1024];
	struct kvfs *fs;
	int pfd = -1, rc;

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "-o", 2)) {
			const char *list = argv[i][2] ? argv[i] + 2 : i + 1 < argc ? argv[i + 1] : "";

			if (parse_config_opt(list, &c) < 0)
				return 2;
		}
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-f")) {
			o.foreground = true;
		} else if (!strcmp(a, "-d")) {
			o.debug = o.foreground = true;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strncmp(a, "-o", 2)) {
			char *list = a[2] ? strdup(a + 2) : (i + 1 < argc ? strdup(argv[++i]) : NULL);

			if (!list) {
				usage(stderr);
				return 2;
			}
			rc = parse_opts(list, &c, &o);
			free(list);
			if (rc < 0)
				return 2;
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "kvpool mount: unknown option '%s'\n", a);
			usage(stderr);
			return 2;
		} else if (!dir) {
			dir = a;
		} else {
			fprintf(stderr, "kvpool mount: one directory only ('%s')\n", a);
			return 2;
		}
	}
	if (!dir) {
		usage(stderr);
		return 2;
	}
	if (!o.foreground) {
		pfd = daemonize_start();
		if (pfd < 0) {
			fprintf(stderr, "kvpool mount: fork: %s\n", strerror(errno));
			return 1;
		}
	}
	fs = fs_create(&c, dir, &o, true, err, sizeof(err));
	if (!fs) {
		fprintf(stderr, "kvpool mount: %s\n", err);
		daemonize_done(pfd, 1);
		return 1;
	}
	fs->foreground_loop = true;
	if (fuse_set_signal_handlers(fs->se) != 0) {
		fprintf(stderr, "kvpool mount: cannot install signal handlers\n");
		fuse_session_unmount(fs->se);
		fs_free(fs);
		daemonize_done(pfd, 1);
		return 1;
	}
	if (o.foreground)
		log_notice("kvfs: %s mounted (master %s%s)", fs->mnt, c.cluster.master,
			   fs->ro ? ", ro" : "");
	daemonize_done(pfd, 0);
	rc = run_loop(fs);
	fuse_remove_signal_handlers(fs->se);
	fuse_session_unmount(fs->se);
	log_notice("kvfs: %s unmounted", fs->mnt);
	fs_free(fs);
	return rc < 0 ? 1 : 0;
}

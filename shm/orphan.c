/* orphan: see orphan.h. Reads segment headers (never writes a file that
 * is not a segment), asks the process table about owners and removes
 * orphans under their own lock.
 */
#include "orphan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

const char *orphan_state_name(enum seg_owner_state s)
{
	switch (s) {
	case SEG_OWNER_LIVE:
		return "live";
	case SEG_OWNER_KEPT:
		return "kept";
	case SEG_OWNER_ORPHAN:
		return "orphan";
	}
	return "?";
}

static bool owner_alive(const struct segment_info *info)
{
	pid_t pid = (pid_t)info->owner_pid;

	if (pid <= 0)
		return false;
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return false;
	/* A pid is reused; with its start time it names one process. (Another
	 * pid namespace shows other numbers: then the lock decides.) */
	return !info->owner_start || segment_proc_start(pid) == info->owner_start;
}

enum seg_owner_state orphan_state(const struct segment_info *info, int fd)
{
	if (info->version < 2)
		return SEG_OWNER_KEPT;	/* no owner recorded */
	if (owner_alive(info))
		return SEG_OWNER_LIVE;
	if (fd >= 0) {
		if (flock(fd, LOCK_SH | LOCK_NB) < 0)
			return SEG_OWNER_LIVE;
		flock(fd, LOCK_UN);
	}
	return info->flags & SEG_F_EPHEMERAL ? SEG_OWNER_ORPHAN : SEG_OWNER_KEPT;
}

/* Opens path and checks it is a segment: the fd, or -1. */
static int open_segment(const char *path, int flags, struct segment_info *info,
			struct stat *st)
{
	uint8_t buf[SEG_DATA_OFF];
	int fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0)
		return -errno;
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode) || st->st_size <= SEG_DATA_OFF ||
	    pread(fd, buf, sizeof(buf), 0) != (ssize_t)sizeof(buf) ||
	    segment_header_check(buf, sizeof(buf), info, NULL, 0) < 0 ||
	    info->size != (uint64_t)st->st_size) {
		close(fd);
		return -EINVAL;
	}
	return fd;
}

int orphan_list(const char *dir, int (*cb)(const struct orphan_entry *e, void *arg), void *arg)
{
	DIR *d;
	struct dirent *de;
	int rc = 0;

	if (!dir)
		dir = "/dev/shm";
	d = opendir(dir);
	if (!d)
		return -errno;
	while (!rc && (de = readdir(d))) {
		struct orphan_entry e;
		struct stat st;
		int fd;

		if (de->d_type != DT_REG && de->d_type != DT_UNKNOWN)
			continue;
		if (snprintf(e.path, sizeof(e.path), "%s/%s", dir, de->d_name) >=
		    (int)sizeof(e.path))
			continue;
		fd = open_segment(e.path, O_RDONLY, &e.info, &st);
		if (fd < 0)
			continue;
		e.state = orphan_state(&e.info, fd);
		e.bytes = (uint64_t)st.st_blocks * 512;
		close(fd);
		rc = cb(&e, arg);
	}
	closedir(d);
	return rc;
}

/* SEG_S_GONE in the state word of the file st names, before it is removed:
 * a reader that still maps it (an optimistic read, lcache.c) stops serving
 * from it. Its owner is dead, nobody else writes the word. Best effort: a
 * reaper that may unlink but not write leaves it to the readers' fstat. */
static void mark_gone(const char *path, const struct segment_info *info, const struct stat *st)
{
	struct stat now;
	uint32_t state;
	int fd;

	if (info->version < 2)
		return;
	fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return;
	if (fstat(fd, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino &&
	    pread(fd, &state, sizeof(state), SEG_STATE_OFF) == (ssize_t)sizeof(state)) {
		state |= SEG_S_GONE;
		(void)!pwrite(fd, &state, sizeof(state), SEG_STATE_OFF);
	}
	close(fd);
}

int orphan_reap(const char *path, uint64_t uuid)
{
	struct segment_info info;
	struct stat st, now;
	int fd, rc = 0;

	fd = open_segment(path, O_RDONLY, &info, &st);
	if (fd < 0)
		return fd == -EINVAL ? -ESTALE : fd;
	if (info.uuid != uuid) {
		rc = -ESTALE;
		goto out;
	}
	/* Held while we look and unlink: a restarting owner's segment_open
	 * waits for it (segment.c) and then finds no file. */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = -EBUSY;
		goto out;
	}
	if (orphan_state(&info, -1) != SEG_OWNER_ORPHAN) {
		rc = -EBUSY;
		goto out;
	}
	/* The name must still be this file. */
	if (lstat(path, &now) < 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
		rc = -ESTALE;
		goto out;
	}
	mark_gone(path, &info, &st);
	if (unlink(path) < 0)
		rc = -errno;
out:
	close(fd);
	return rc;
}

struct reap_ctx {
	const char *dir;
	int n;
	uint64_t bytes;
};

static int reap_one(const struct orphan_entry *e, void *arg)
{
	struct reap_ctx *x = arg;
	int rc;

	if (e->state != SEG_OWNER_ORPHAN)
		return 0;
	rc = orphan_reap(e->path, e->info.uuid);
	if (rc == 0) {
		log_notice("removed orphaned segment %s (%llu MiB held; owner %s pid %u is gone)",
			   e->path, (unsigned long long)(e->bytes >> 20),
			   e->info.owner[0] ? e->info.owner : "?", e->info.owner_pid);
		x->n++;
		x->bytes += e->bytes;
	} else if (rc != -EBUSY && rc != -ESTALE) {
		log_warn("orphaned segment %s: cannot remove it: %s", e->path, strerror(-rc));
	}
	return 0;
}

int orphan_reap_all(const char *dir, uint64_t *bytes)
{
	struct reap_ctx x = { .dir = dir };
	int rc = orphan_list(dir, reap_one, &x);

	if (bytes)
		*bytes = x.bytes;
	return rc < 0 ? rc : x.n;
}

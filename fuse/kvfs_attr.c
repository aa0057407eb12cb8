/* kvfs_attr: setattr of the view (kvfs_attr.h). Checks first (owner,
 * group, mode), then the one change that needs the pool (a size), then
 * times, so that a refused part leaves nothing half done.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "clock.h"
#include "kvfs_attr.h"
#include "kvfs_commit.h"
#include "kvfs_fh.h"
#include "kvfs_node.h"
#include "kvfs_write.h"

#define TIMES (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW | \
	       FUSE_SET_ATTR_MTIME_NOW)

static uint64_t ts_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
}

/* truncate(2) of a stored value: the value cut or zero-extended to size,
 * stored in its place. An errno or 0. */
static int truncate_stored(struct kvfs *fs, struct kvfs_node *n, const char *key, uint64_t size)
{
	struct kvp_stat st;
	struct kvp *k;
	uint64_t sum;
	int64_t got;
	char *buf;
	int rc, e = 0;

	kvfs_commit_wait(fs, n);
	k = kvfs_kvp(fs, &e);
	if (!k)
		return kvp_to_errno(e);
	rc = kvp_stat(k, key, &st);
	if (rc < 0)
		return kvp_to_errno(rc);
	if (size == st.size)
		return 0;
	if (size == 0)
		return kvfs_empty_value(fs, n, key, true, NULL);
	if (size > fs->max_object)
		return EFBIG;
	buf = calloc(1, size > st.size ? size : st.size);
	if (!buf)
		return ENOMEM;
	got = kvp_get_into(k, key, buf, size > st.size ? size : st.size);
	if (got < 0) {
		free(buf);
		return kvp_to_errno((int)got);
	}
	if ((uint64_t)got < size)
		memset(buf + got, 0, size - (uint64_t)got);
	rc = kvfs_store(fs, key, buf, size, true);
	sum = rc == 0 ? XXH3_64bits(buf, size) : 0;
	free(buf);
	if (rc < 0)
		return kvp_to_errno(rc);
	pthread_mutex_lock(&fs->lock);
	kvfs_node_committed_locked(fs, n, sum, size);
	n->size = size;
	pthread_mutex_unlock(&fs->lock);
	return 0;
}

/* The size part of a setattr: fh is the caller's write handle, if any. */
static int set_size(struct kvfs *fs, struct kvfs_node *n, struct kvfs_fh *fh, uint64_t size)
{
	char key[KVP_MAX_KEY + 1];
	bool pending, mem;
	int rc;

	if (n->kind != KN_FILE)
		return EISDIR;
	if (fh)
		return kvfs_wbuf_resize(fs, fh, size);
	kvfs_pending_settle(fs, n);
	pthread_mutex_lock(&fs->lock);
	pending = n->pending != NULL;
	mem = n->memdir;
	snprintf(key, sizeof(key), "%s", n->raw);
	pthread_mutex_unlock(&fs->lock);
	if (pending)
		return EBUSY;	/* another handle writes it: through that one */
	if (!mem)
		return truncate_stored(fs, n, key, size);
	if (size == 0)
		return 0;
	/* an empty file grows: its first value, zeros */
	{
		char *buf = calloc(1, size);

		if (size > fs->max_object)
			rc = KVP_ETOOBIG;
		else if (!buf)
			rc = KVP_ENOMEM;
		else
			rc = kvfs_store(fs, key, buf, size, true);
		free(buf);
	}
	if (rc == KVP_ETOOBIG)
		return EFBIG;
	if (rc < 0)
		return kvp_to_errno(rc);
	pthread_mutex_lock(&fs->lock);
	kvfs_memdir_clear_locked(fs, n);
	n->size = size;
	n->fresh_until = 0;
	pthread_mutex_unlock(&fs->lock);
	kvfs_commit_times(fs, n, key);
	return 0;
}

/* The times part: kept on the node until its value is stored, then for
 * that value (its put time) in fs->times. */
static int set_times(struct kvfs *fs, struct kvfs_node *n, const struct stat *attr, int to_set)
{
	uint64_t now = clock_realtime_ns(), mt = 0, at = 0, cur_m, cur_a;
	char key[KVP_MAX_KEY + 1];
	struct kvp_stat st;
	struct kvp *k;
	bool stored;
	int rc, e = 0;

	if (to_set & FUSE_SET_ATTR_MTIME_NOW)
		mt = now;
	else if (to_set & FUSE_SET_ATTR_MTIME)
		mt = ts_ns(&attr->st_mtim);
	if (to_set & FUSE_SET_ATTR_ATIME_NOW)
		at = now;
	else if (to_set & FUSE_SET_ATTR_ATIME)
		at = ts_ns(&attr->st_atim);
	if (n->kind == KN_DIR || n->kind == KN_PIECE) {
		/* a directory lives while it has keys or is remembered: its
		 * times are kept with its inode */
		pthread_mutex_lock(&fs->lock);
		if (mt)
			n->mtime_ns = mt;
		pthread_mutex_unlock(&fs->lock);
		return 0;
	}
	if (n->kind != KN_FILE)
		return EPERM;
	pthread_mutex_lock(&fs->lock);
	stored = !n->pending && !n->queued && !n->memdir;
	if (!stored) {
		if (mt)
			n->set_mtime_ns = mt;
		if (at)
			n->set_atime_ns = at;
	}
	snprintf(key, sizeof(key), "%s", n->raw);
	pthread_mutex_unlock(&fs->lock);
	if (!stored)
		return 0;
	k = kvfs_kvp(fs, &e);
	rc = k ? kvp_stat(k, key, &st) : e;
	if (rc < 0)
		return kvp_to_errno(rc);
	pthread_mutex_lock(&fs->lock);
	if (!kvfs_node_from_stat_locked(fs, n, &st)) {
		kvfs_node_retire_locked(fs, n);
		pthread_mutex_unlock(&fs->lock);
		return ESTALE;	/* another value now: the kernel looks it up again */
	}
	cur_m = st.put_time_ns;
	cur_a = st.access_time_ns ? st.access_time_ns : st.put_time_ns;
	kvfs_times_get_locked(&fs->times, key, strlen(key), st.put_time_ns, &cur_m, &cur_a);
	rc = kvfs_times_set_locked(&fs->times, key, strlen(key), st.put_time_ns, mt ? mt : cur_m,
				   at ? at : cur_a);
	pthread_mutex_unlock(&fs->lock);
	/* past the table's bound the times are accepted and not kept */
	return rc == -ENOMEM ? ENOMEM : 0;
}

void kvfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		  struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_node *n = kvfs_node_ref(fs, ino);
	struct kvfs_fh *fh = NULL;
	struct stat st;
	bool writing;
	int err = 0;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (fs->ro) {
		err = EROFS;
		goto out;
	}
	if (fi && fi->fh && ((struct kvfs_fh *)(uintptr_t)fi->fh)->kind == FH_WRITE)
		fh = (struct kvfs_fh *)(uintptr_t)fi->fh;
	pthread_mutex_lock(&fs->lock);
	writing = n->pending != NULL;
	pthread_mutex_unlock(&fs->lock);
	if (((to_set & FUSE_SET_ATTR_UID) && attr->st_uid != fs->uid) ||
	    ((to_set & FUSE_SET_ATTR_GID) && attr->st_gid != fs->gid)) {
		err = EPERM;	/* files belong to the mounting user */
		goto out;
	}
	if ((to_set & FUSE_SET_ATTR_MODE) && !(writing && n->kind == KN_FILE) &&
	    (attr->st_mode & 07777) != (kvfs_node_mode(fs, n->kind) & 07777)) {
		err = EPERM;	/* fuse.mode is every file's mode */
		goto out;
	}
	if ((to_set & (FUSE_SET_ATTR_SIZE | TIMES)) && n->kind != KN_FILE && n->kind != KN_DIR &&
	    n->kind != KN_PIECE) {
		err = EACCES;	/* .kvpool */
		goto out;
	}
	if (to_set & FUSE_SET_ATTR_SIZE)
		err = set_size(fs, n, fh, (uint64_t)attr->st_size);
	if (!err && (to_set & TIMES))
		err = set_times(fs, n, attr, to_set);
out:
	if (err) {
		kvfs_node_unref(fs, n);
		fuse_reply_err(req, err);
		return;
	}
	pthread_mutex_lock(&fs->lock);
	kvfs_fill_attr_locked(fs, n, &st);
	pthread_mutex_unlock(&fs->lock);
	kvfs_node_unref(fs, n);
	fuse_reply_attr(req, &st, fs->attr_timeout);
}

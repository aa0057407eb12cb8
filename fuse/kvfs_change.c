/* kvfs_change: unlink, mkdir, rmdir and the refused links (kvfs_change.h).
 * A directory exists while keys are under its prefix; one made by mkdir,
 * or emptied by a removal, is remembered in the inode table until a key
 * appears under it or it is removed — at every level, so that `rm -r`
 * and `rmdir -p` find the whole emptied tree.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kvfs_change.h"
#include "kvfs_commit.h"
#include "kvfs_neg.h"
#include "kvfs_node.h"
#include "kvfs_resolve.h"
#include "kvfs_write.h"

void kvfs_keep_emptied_dirs(struct kvfs *fs, struct kvfs_node *d)
{
	char prefix[KVP_MAX_KEY + 2];
	uint64_t ino = d->ino;

	/* from d upwards; a level that still holds keys ends the walk, the
	 * levels above it hold them too */
	for (;;) {
		struct kvfs_node *n;
		int used;

		pthread_mutex_lock(&fs->lock);
		n = kvfs_node_by_ino_locked(fs, ino);
		if (!n || n->ino == FUSE_ROOT_ID || n->retired ||
		    (n->kind != KN_DIR && n->kind != KN_PIECE)) {
			pthread_mutex_unlock(&fs->lock);
			return;
		}
		n->refs++;
		snprintf(prefix, sizeof(prefix), "%s", n->raw);
		ino = n->parent;
		pthread_mutex_unlock(&fs->lock);
		used = kvfs_prefix_used(fs, prefix);
		pthread_mutex_lock(&fs->lock);
		if (used == 0)
			kvfs_memdir_set_locked(fs, n);
		n->refs--;
		kvfs_node_maybe_free_locked(fs, n);
		pthread_mutex_unlock(&fs->lock);
		if (used != 0)
			return;
	}
}

void kvfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_node *d, *n;
	struct kvfs_child c;
	bool mem = false;
	struct kvp *k;
	int rc, err = 0;

	d = kvfs_dir_for_change(req, fs, parent, EACCES);
	if (!d)
		return;
	err = kvfs_resolve(d, name, &c);
	if (err || c.kind != KN_FILE) {
		err = err == ENAMETOOLONG ? ENAMETOOLONG : err ? ENOENT : EISDIR;
		goto out;
	}
	pthread_mutex_lock(&fs->lock);
	n = kvfs_node_by_name_locked(fs, KN_FILE, c.raw, c.rawlen);
	if (n && n->pending) {
		n->refs++;
		pthread_mutex_unlock(&fs->lock);
		kvfs_pending_settle(fs, n);	/* touch f; rm f */
		pthread_mutex_lock(&fs->lock);
		n->refs--;
	}
	if (n && n->pending)
		err = EBUSY;
	else if (n && n->memdir && !n->queued)
		mem = true;		/* an empty file: only this mount knows it */
	if (n)
		n->refs++;
	pthread_mutex_unlock(&fs->lock);
	if (err || mem)
		goto out_node;
	if (n)
		kvfs_commit_wait(fs, n);	/* a queued put lands first */
	k = kvfs_kvp(fs, &rc);
	if (!k) {
		err = kvp_to_errno(rc);
		goto out_node;
	}
	/* no force: an object a reader is reading right now answers EBUSY */
	rc = kvp_remove(k, c.raw, 0);
	if (rc < 0)
		err = kvp_to_errno(rc);
out_node:
	pthread_mutex_lock(&fs->lock);
	if (n && !err) {
		/* open handles keep what they cached (other reads fail); a new
		 * file of the same name is another inode */
		kvfs_node_retire_locked(fs, n);
	}
	if (!err)
		kvfs_times_drop_locked(&fs->times, c.raw, c.rawlen);
	if (n) {
		n->refs--;
		kvfs_node_maybe_free_locked(fs, n);
	}
	pthread_mutex_unlock(&fs->lock);
	if (!err)
		kvfs_keep_emptied_dirs(fs, d);
out:
	kvfs_node_unref(fs, d);
	fuse_reply_err(req, err);
}

void kvfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct fuse_entry_param e;
	struct kvfs_node *d, *n;
	struct kvfs_child c;
	struct kvp *k;
	int rc, err = 0;

	d = kvfs_dir_for_change(req, fs, parent, EACCES);
	if (!d)
		return;
	if (d->ino == FUSE_ROOT_ID && !strcmp(name, ".kvpool")) {
		err = EEXIST;
		goto out;
	}
	err = kvfs_resolve(d, name, &c);
	if (err)
		goto out;
	k = kvfs_kvp(fs, &rc);
	if (!k) {
		err = kvp_to_errno(rc);
		goto out;
	}
	if (c.kind == KN_FILE) {
		/* a plain name is the object's if there is one */
		rc = c.rawlen ? kvp_exists(k, c.raw) : 0;
		if (rc != 0) {
			err = rc == 1 ? EEXIST : kvp_to_errno(rc);
			goto out;
		}
		if (c.rawlen + 2 > KVP_MAX_KEY) {
			err = ENAMETOOLONG;
			goto out;
		}
		c.raw[c.rawlen++] = '/';
		c.raw[c.rawlen] = 0;
		c.kind = KN_DIR;
	}
	rc = c.kind == KN_DIR ? kvfs_prefix_used(fs, c.raw)
			      : kvfs_piece_used(fs, c.raw, c.rawlen,
						kvfs_dir_part(d->raw, d->rawlen),
						d->rawlen - kvfs_dir_part(d->raw, d->rawlen));
	if (rc != 0) {
		err = rc > 0 ? EEXIST : kvp_to_errno(rc);
		goto out;
	}
	pthread_mutex_lock(&fs->lock);
	n = kvfs_node_get_locked(fs, c.kind, c.raw, c.rawlen, d->ino, name);
	if (!n) {
		pthread_mutex_unlock(&fs->lock);
		err = ENOMEM;
		goto out;
	}
	if (n->memdir) {
		pthread_mutex_unlock(&fs->lock);
		err = EEXIST;
		goto out;
	}
	kvfs_memdir_set_locked(fs, n);
	n->alias = c.alias;
	n->nlookup++;
	kvfs_fill_entry_locked(fs, n, &e);
	pthread_mutex_unlock(&fs->lock);
	kvfs_neg_forget(fs, d, c.raw, c.rawlen);
	kvfs_node_unref(fs, d);
	fuse_reply_entry(req, &e);
	return;
out:
	kvfs_node_unref(fs, d);
	fuse_reply_err(req, err);
}

void kvfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_node *d, *n;
	struct kvfs_child c;
	int rc, err = 0;

	d = kvfs_dir_for_change(req, fs, parent, ENOTDIR);
	if (!d)
		return;
	err = kvfs_resolve(d, name, &c);
	if (err) {
		err = err == ENAMETOOLONG ? ENAMETOOLONG : ENOENT;
		goto out;
	}
	if (c.kind == KN_FILE) {
		c.raw[c.rawlen++] = '/';
		c.raw[c.rawlen] = 0;
		c.kind = KN_DIR;
	}
	rc = kvfs_prefix_used(fs, c.raw);
	if (rc != 0) {
		err = rc > 0 ? ENOTEMPTY : kvp_to_errno(rc);
		goto out;
	}
	pthread_mutex_lock(&fs->lock);
	n = kvfs_node_by_name_locked(fs, c.kind, c.raw, c.rawlen);
	if (!n) {
		err = ENOENT;
	} else {
		if (kvfs_node_busy_dir_locked(fs, n->ino))
			err = ENOTEMPTY;
		if (!err) {
			/* the directory is gone once it holds nothing: a
			 * remembered empty one is forgotten here */
			n->fresh_until = 0;
			kvfs_memdir_clear_locked(fs, n);
		}
	}
	pthread_mutex_unlock(&fs->lock);
	if (!err)
		kvfs_keep_emptied_dirs(fs, d);
out:
	kvfs_node_unref(fs, d);
	fuse_reply_err(req, err);
}

void kvfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct kvfs *fs = fuse_req_userdata(req);

	fuse_reply_err(req, fs->ro ? EROFS : EPERM);
}

void kvfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	struct kvfs *fs = fuse_req_userdata(req);

	fuse_reply_err(req, fs->ro ? EROFS : EPERM);
}

void kvfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	struct kvfs *fs = fuse_req_userdata(req);

	fuse_reply_err(req, fs->ro ? EROFS : EPERM);
}

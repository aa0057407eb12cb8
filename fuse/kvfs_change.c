/* kvfs_change: unlink, mkdir, rmdir and the refused renames and links
 * (kvfs_change.h). A directory exists while keys are under its prefix; one
 * made by mkdir, or emptied by unlink, is remembered in the inode table
 * until a key appears under it or it is removed.
 */
#include <errno.h>
#include <string.h>

#include "kvfs_change.h"
#include "kvfs_node.h"
#include "kvfs_resolve.h"

/* After the last key of directory d went away: keep d as an empty
 * directory so that `rm -r` can still rmdir it. */
static void keep_emptied_dir(struct kvfs *fs, struct kvfs_node *d)
{
	if (d->ino == FUSE_ROOT_ID || (d->kind != KN_DIR && d->kind != KN_PIECE))
		return;
	if (kvfs_prefix_used(fs, d->raw) != 0)
		return;
	pthread_mutex_lock(&fs->lock);
	kvfs_memdir_set_locked(fs, d);
	pthread_mutex_unlock(&fs->lock);
}

void kvfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_node *d, *n;
	struct kvfs_child c;
	struct kvp *k;
	int rc, err = 0;

	d = kvfs_dir_for_change(req, fs, parent, EACCES);
	if (!d)
		return;
	rc = kvfs_resolve(d, name, &c);
	if (rc || c.kind != KN_FILE) {
		err = rc == -ENAMETOOLONG ? ENAMETOOLONG : rc ? ENOENT : EISDIR;
		goto out;
	}
	pthread_mutex_lock(&fs->lock);
	n = kvfs_node_by_name_locked(fs, KN_FILE, c.raw, c.rawlen);
	err = n && n->pending ? EBUSY : 0;
	pthread_mutex_unlock(&fs->lock);
	if (err)
		goto out;
	k = kvfs_kvp(fs, &err);
	if (!k) {
		err = kvp_to_errno(err);
		goto out;
	}
	/* no force: an object a reader holds a lease on answers EBUSY */
	rc = kvp_remove(k, c.raw, 0);
	if (rc < 0) {
		err = kvp_to_errno(rc);
		goto out;
	}
	pthread_mutex_lock(&fs->lock);
	n = kvfs_node_by_name_locked(fs, KN_FILE, c.raw, c.rawlen);
	if (n) {
		n->fresh_until = 0;
		n->blob = NULL;	/* open handles keep theirs */
	}
	pthread_mutex_unlock(&fs->lock);
	keep_emptied_dir(fs, d);
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
	rc = kvfs_resolve(d, name, &c);
	if (rc) {
		err = -rc;
		goto out;
	}
	k = kvfs_kvp(fs, &err);
	if (!k) {
		err = kvp_to_errno(err);
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
	rc = kvfs_resolve(d, name, &c);
	if (rc) {
		err = rc == -ENAMETOOLONG ? ENAMETOOLONG : ENOENT;
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
		keep_emptied_dir(fs, d);
out:
	kvfs_node_unref(fs, d);
	fuse_reply_err(req, err);
}

void kvfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		 fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	struct kvfs *fs = fuse_req_userdata(req);

	/* a key names an immutable value: copy and remove instead */
	fuse_reply_err(req, fs->ro ? EROFS : EPERM);
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

/* kvfs_write: create, write, setattr, flush and release (kvfs_write.h).
 * A created file is a buffer until a process that wrote it closes it;
 * then one kvp_put stores it, or nothing is stored if a write was refused.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs_fh.h"
#include "kvfs_resolve.h"
#include "kvfs_write.h"
#include "log.h"
#include "net.h"

static bool wbuf_writer(const struct kvfs_wbuf *w, uint64_t owner)
{
	if (w->nwriters > KVFS_WRITERS_MAX)
		return true;		/* too many to tell: any close stores */
	for (unsigned i = 0; i < w->nwriters; i++)
		if (w->writers[i] == owner)
			return true;
	return false;
}

void kvfs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		 struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct fuse_entry_param e;
	struct kvfs_node *d, *n;
	struct kvfs_fh *fh;
	struct kvfs_child c;
	struct kvp *k;
	int rc, err = 0;

	d = kvfs_dir_for_change(req, fs, parent, ENOTDIR);
	if (!d)
		return;
	if (d->ino == FUSE_ROOT_ID && !strcmp(name, ".kvpool")) {
		err = EEXIST;
		goto out;
	}
	rc = kvfs_resolve(d, name, &c);
	if (rc == 0 && c.kind != KN_FILE)
		rc = -EINVAL;		/* NAME% and NAME%% are directories */
	if (rc) {
		err = -rc;
		goto out;
	}
	k = kvfs_kvp(fs, &err);
	if (!k) {
		err = kvp_to_errno(err);
		goto out;
	}
	rc = kvp_exists(k, c.raw);
	if (rc != 0) {
		err = rc == 1 ? EEXIST : kvp_to_errno(rc);
		goto out;
	}
	pthread_mutex_lock(&fs->lock);
	n = kvfs_node_get_locked(fs, KN_FILE, c.raw, c.rawlen, d->ino, name);
	if (!n || n->pending) {
		pthread_mutex_unlock(&fs->lock);
		err = n ? EEXIST : ENOMEM;
		goto out;
	}
	fh = kvfs_fh_new(FH_WRITE, n);
	if (!fh) {
		kvfs_node_maybe_free_locked(fs, n);
		pthread_mutex_unlock(&fs->lock);
		err = ENOMEM;
		goto out;
	}
	n->pending = &fh->w;
	n->refs++;
	n->nlookup++;
	n->size = 0;
	n->mtime_ns = n->atime_ns = net_realtime_ns();
	n->generation = 0;
	kvfs_fill_entry_locked(fs, n, &e);
	pthread_mutex_unlock(&fs->lock);
	/* writes go straight to the buffer: one request per write(2) up to
	 * max_write, and no pages cached for a value that is not stored yet */
	fi->direct_io = 1;
	fi->fh = (uintptr_t)fh;
	fuse_reply_create(req, &e, fi);
	kvfs_node_unref(fs, d);
	return;
out:
	kvfs_node_unref(fs, d);
	fuse_reply_err(req, err);
}

/* Makes the buffer hold at least len bytes (zero-filled), within the
 * largest object the pool stores. */
static int wbuf_reserve(struct kvfs *fs, struct kvfs_wbuf *w, uint64_t len)
{
	size_t cap;
	char *p;

	if (len > fs->max_object)
		return EFBIG;
	if (len <= w->cap)
		return 0;
	cap = w->cap ? w->cap : 64 * 1024;
	while (cap < len)
		cap *= 2;
	if (cap > fs->max_object)
		cap = (size_t)fs->max_object;
	p = realloc(w->buf, cap);
	if (!p)
		return ENOMEM;
	memset(p + w->cap, 0, cap - w->cap);
	w->buf = p;
	w->cap = cap;
	return 0;
}

void kvfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_fh *fh = (struct kvfs_fh *)(uintptr_t)fi->fh;
	struct kvfs_wbuf *w = &fh->w;
	int rc = 0;

	if (fh->kind != FH_WRITE) {
		fuse_reply_err(req, EBADF);
		return;
	}
	pthread_mutex_lock(&fh->lock);
	if (w->done || off < 0 || (uint64_t)off < w->len) {
		/* stored already, or an overwrite: values are immutable once
		 * written; a hole (off > len) is zeros, as in a sparse copy */
		rc = EPERM;
	} else {
		rc = wbuf_reserve(fs, w, (uint64_t)off + size);
	}
	/* the value would not be what the writer meant: store nothing */
	if (rc && !w->done && !w->err)
		w->err = rc;
	if (rc == 0) {
		memcpy(w->buf + off, buf, size);
		w->len = (size_t)off + size;
		if (!wbuf_writer(w, fi->lock_owner)) {
			if (w->nwriters < KVFS_WRITERS_MAX)
				w->writers[w->nwriters] = fi->lock_owner;
			w->nwriters++;
		}
		pthread_mutex_lock(&fs->lock);
		fh->node->size = w->len;
		pthread_mutex_unlock(&fs->lock);
	}
	pthread_mutex_unlock(&fh->lock);
	if (rc)
		fuse_reply_err(req, rc);
	else
		fuse_reply_write(req, size);
}

void kvfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		  struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_node *n = kvfs_node_ref(fs, ino);
	struct kvfs_fh *fh = NULL;
	struct stat st;
	int err = 0;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (fs->ro) {
		err = EROFS;
		goto out;
	}
	if (fi && fi->fh)
		fh = (struct kvfs_fh *)(uintptr_t)fi->fh;
	if (!fh || fh->kind != FH_WRITE) {
		bool pending;

		pthread_mutex_lock(&fs->lock);
		pending = n->pending != NULL;
		pthread_mutex_unlock(&fs->lock);
		/* a stored value: its size and times are the pool's; a file
		 * being written changes size only through its descriptor */
		if (!pending)
			err = EPERM;
		else if (to_set & FUSE_SET_ATTR_SIZE)
			err = EBUSY;
		else if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))
			err = EPERM;
		goto out;
	}
	/* a file being written: its size may change until it is stored;
	 * mode and times belong to the mount (fuse.mode, put time), so
	 * they are accepted for cp -p and tar and not kept */
	if (to_set & FUSE_SET_ATTR_SIZE) {
		pthread_mutex_lock(&fh->lock);
		if (fh->w.done) {
			err = EPERM;
		} else if ((uint64_t)attr->st_size > fh->w.len) {
			err = wbuf_reserve(fs, &fh->w, (uint64_t)attr->st_size);
			if (!err)
				fh->w.len = (size_t)attr->st_size;
		} else {
			fh->w.len = (size_t)attr->st_size;
		}
		if (!err) {
			pthread_mutex_lock(&fs->lock);
			n->size = fh->w.len;
			pthread_mutex_unlock(&fs->lock);
		}
		pthread_mutex_unlock(&fh->lock);
	}
	if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))
		err = err ? err : EPERM;
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

/* Puts the buffered value (fh->lock held); errno or 0. */
static int fh_put_locked(struct kvfs *fs, struct kvfs_fh *fh)
{
	struct kvfs_node *n = fh->node;
	struct kvfs_wbuf *w = &fh->w;
	struct kvp *k;
	int rc, e = 0;

	if (w->done)
		return 0;
	w->done = true;
	if (w->err) {
		rc = w->err;
	} else if (w->len == 0) {
		rc = EINVAL;	/* an object holds at least one byte */
	} else if (!(k = kvfs_kvp(fs, &e))) {
		rc = kvp_to_errno(e);
	} else {
		rc = kvp_to_errno(kvp_put(k, n->raw, w->buf, w->len));
	}
	free(w->buf);
	w->buf = NULL;
	w->cap = 0;
	pthread_mutex_lock(&fs->lock);
	if (n->pending == w)
		n->pending = NULL;
	n->fresh_until = 0;	/* the next getattr asks the pool */
	if (rc == 0)
		kvfs_memdirs_settle_locked(fs, n->raw, n->rawlen);
	pthread_mutex_unlock(&fs->lock);
	if (w->err)
		log_info("kvfs: '%s' not stored: a write was refused (%s)", n->raw, strerror(w->err));
	else if (rc == EINVAL && w->len == 0)
		log_info("kvfs: '%s' closed empty: not stored (objects hold at least one byte)",
			 n->raw);
	else if (rc)
		log_warn("kvfs: put of %zu bytes to '%s' failed: %s", w->len, n->raw, strerror(rc));
	return rc;
}

void kvfs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_fh *fh = (struct kvfs_fh *)(uintptr_t)fi->fh;
	int rc = 0;

	/* close(2) waits for flush, release comes later and asynchronously:
	 * putting here makes `cp f mnt/k && cat mnt/k` see the object. Only
	 * the close of a process that wrote stores it: the shell's `> FILE`
	 * closes a dup'd descriptor before anything is written, and a child
	 * that inherited the descriptor and exits has not written. */
	if (fh->kind == FH_WRITE) {
		pthread_mutex_lock(&fh->lock);
		if (!fh->w.done && (fh->w.err || (fh->w.len > 0 && wbuf_writer(&fh->w, fi->lock_owner))))
			rc = fh_put_locked(fs, fh);
		pthread_mutex_unlock(&fh->lock);
	}
	fuse_reply_err(req, rc);
}

void kvfs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_fh *fh = (struct kvfs_fh *)(uintptr_t)fi->fh;
	bool last;

	if (fh->kind == FH_WRITE) {
		pthread_mutex_lock(&fh->lock);
		/* an empty file is not an object (values hold >= 1 byte):
		 * it disappears here; fh_put_locked logs it */
		if (!fh->w.done)
			fh_put_locked(fs, fh);
		pthread_mutex_unlock(&fh->lock);
	}
	pthread_mutex_lock(&fs->lock);
	fh->released = true;
	last = fh->users == 0;
	pthread_mutex_unlock(&fs->lock);
	if (last)
		kvfs_fh_free(fs, fh);
	fuse_reply_err(req, 0);
}

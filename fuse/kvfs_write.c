/* kvfs_write: create, open for writing, write, flush, fsync and release
 * (kvfs_write.h). A file open for writing is a buffer holding the whole
 * value — empty for a new file or O_TRUNC, the stored value otherwise —
 * and when a process that wrote it closes it, the buffer becomes the
 * key's value in one step: a put, or a replacement (upsert) that readers
 * see whole or not at all. An empty result is no object (values hold at
 * least one byte): the file stays as an empty file in this mount.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "clock.h"
#include "kvfs_change.h"
#include "kvfs_commit.h"
#include "kvfs_fh.h"
#include "kvfs_neg.h"
#include "kvfs_resolve.h"
#include "kvfs_write.h"
#include "log.h"

void kvfs_pending_clear_locked(struct kvfs *fs, struct kvfs_node *n, const struct kvfs_wbuf *w)
{
	if (n->pending != w)
		return;
	n->pending = NULL;
	pthread_cond_broadcast(&fs->pending_done);	/* readers in kvfs_pending_settle */
}

bool kvfs_pending_settle(struct kvfs *fs, struct kvfs_node *n)
{
	uint64_t deadline = clock_now_ms() + KVFS_SETTLE_MS;
	bool settled;

	/* a close happened and the release that stores the file is on its
	 * way (the kernel sends it after close returns): wait for it, so that
	 * `touch f; cat f` and `: > f; cat f` see the file as closed */
	pthread_mutex_lock(&fs->lock);
	while (n->pending && n->pending->closed &&
	       clock_cond_wait_until(&fs->pending_done, &fs->lock, deadline) == 0)
		;
	settled = !n->pending;
	pthread_mutex_unlock(&fs->lock);
	return settled;
}

static void wbuf_closed(struct kvfs *fs, struct kvfs_wbuf *w, bool closed)
{
	pthread_mutex_lock(&fs->lock);
	w->closed = closed;
	pthread_mutex_unlock(&fs->lock);
}

static bool wbuf_writer(const struct kvfs_wbuf *w, uint64_t owner)
{
	if (w->nwriters > KVFS_WRITERS_MAX)
		return true;		/* too many to tell: any close stores */
	for (unsigned i = 0; i < w->nwriters; i++)
		if (w->writers[i] == owner)
			return true;
	return false;
}

/* Makes the buffer hold at least len bytes (zero-filled), within the
 * largest object the pool stores. An errno or 0. */
static int wbuf_reserve(struct kvfs *fs, struct kvfs_wbuf *w, uint64_t len)
{
	size_t cap;
	char *p;

	if (len > fs->max_object)
		return EFBIG;
	if (len <= w->cap)
		return 0;
	cap = w->cap ? w->cap : 4096;
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

/* Fills a write buffer with the value n holds now (its queued value, or
 * the pool's). An errno or 0. */
static int wbuf_load(struct kvfs *fs, struct kvfs_node *n, const char *key, struct kvfs_wbuf *w)
{
	struct kvp_stat st;
	struct kvp *k;
	int64_t got;
	int rc, e = 0;

	kvfs_commit_wait(fs, n);	/* the value a close before this one stored */
	k = kvfs_kvp(fs, &e);
	if (!k)
		return kvp_to_errno(e);
	rc = kvp_stat(k, key, &st);
	if (rc == KVP_ENOTFOUND)
		return 0;		/* gone meanwhile: a new value */
	if (rc < 0)
		return kvp_to_errno(rc);
	int err = wbuf_reserve(fs, w, st.size);

	if (err)
		return err;
	got = kvp_get_into(k, key, w->buf, w->cap);
	if (got == KVP_ENOTFOUND)
		return 0;
	if (got < 0)
		return kvp_to_errno((int)got);
	w->len = (size_t)got;
	w->existed = true;
	return 0;
}

/* A write handle for n (refs held by the caller, passed to the handle);
 * the caller replies. Sets n->pending. An errno or 0. */
static int open_wbuf(struct kvfs *fs, struct kvfs_node *n, int flags, bool created,
		     struct kvfs_fh **out)
{
	struct kvfs_fh *fh = kvfs_fh_new(FH_WRITE, n);
	char key[KVP_MAX_KEY + 1];
	bool mem, queued;
	int rc = 0;

	if (!fh)
		return ENOMEM;
	pthread_mutex_lock(&fs->lock);
	if (n->pending) {
		pthread_mutex_unlock(&fs->lock);
		kvfs_fh_discard(fh);
		return created ? EEXIST : EBUSY;	/* another handle writes it */
	}
	n->pending = &fh->w;
	mem = n->memdir;
	queued = n->queued != NULL;
	snprintf(key, sizeof(key), "%s", n->raw);
	pthread_mutex_unlock(&fs->lock);
	fh->w.excl = (flags & O_EXCL) != 0;
	fh->w.append = (flags & O_APPEND) != 0;
	if (created) {
		fh->w.dirty = true;	/* the file exists now, empty or not */
	} else if (flags & O_TRUNC) {
		/* the old value goes at the close that stores the new one */
		fh->w.dirty = !mem;
		fh->w.existed = !mem || queued;
	} else if (!mem) {
		pthread_mutex_lock(&fh->lock);
		rc = wbuf_load(fs, n, key, &fh->w);
		pthread_mutex_unlock(&fh->lock);
	}
	pthread_mutex_lock(&fs->lock);
	if (rc) {
		kvfs_pending_clear_locked(fs, n, &fh->w);
	} else {
		/* the kernel's size of the inode follows the writer (it sets it
		 * from O_TRUNC and the writes itself): stat shows the buffer */
		n->size = fh->w.len;
		if (fh->w.dirty || created)
			n->mtime_ns = clock_realtime_ns();
	}
	pthread_mutex_unlock(&fs->lock);
	if (rc) {
		kvfs_fh_discard(fh);
		return rc;
	}
	*out = fh;
	return 0;
}

void kvfs_open_write(fuse_req_t req, struct kvfs *fs, struct kvfs_node *n,
		     struct fuse_file_info *fi)
{
	struct kvfs_fh *fh = NULL;
	int rc;

	if (fs->ro) {
		kvfs_node_unref(fs, n);
		fuse_reply_err(req, EROFS);
		return;
	}
	kvfs_pending_settle(fs, n);	/* touch f; echo x >> f */
	rc = open_wbuf(fs, n, fi->flags, false, &fh);
	if (rc) {
		kvfs_node_unref(fs, n);
		fuse_reply_err(req, rc);
		return;
	}
	/* writes go straight to the buffer: one request per write(2) up to
	 * max_write, and no pages cached for a value that is not stored yet */
	fi->direct_io = 1;
	fi->fh = (uintptr_t)fh;
	fuse_reply_open(req, fi);
}

void kvfs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		 struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct fuse_entry_param e;
	struct kvfs_node *d, *n;
	struct kvfs_fh *fh = NULL;
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
	err = kvfs_resolve(d, name, &c);
	if (!err && c.kind != KN_FILE)
		err = EINVAL;		/* NAME% and NAME%% are directories */
	if (err)
		goto out;
	/* the kernel creates after a negative lookup: a name this view just
	 * found absent needs no second question */
	if (!kvfs_neg_absent(fs, d, c.raw, c.rawlen)) {
		k = kvfs_kvp(fs, &rc);
		if (!k) {
			err = kvp_to_errno(rc);
			goto out;
		}
		rc = kvp_exists(k, c.raw);
		if (rc < 0) {
			err = kvp_to_errno(rc);
			goto out;
		}
		if (rc == 1 && (fi->flags & O_EXCL)) {
			err = EEXIST;
			goto out;
		}
	}
	pthread_mutex_lock(&fs->lock);
	n = kvfs_node_get_locked(fs, KN_FILE, c.raw, c.rawlen, d->ino, name);
	if (n)
		n->refs++;
	pthread_mutex_unlock(&fs->lock);
	if (!n) {
		err = ENOMEM;
		goto out;
	}
	err = open_wbuf(fs, n, fi->flags, true, &fh);
	if (err) {
		kvfs_node_unref(fs, n);
		goto out;
	}
	pthread_mutex_lock(&fs->lock);
	n->nlookup++;
	n->generation = 0;
	kvfs_fill_entry_locked(fs, n, &e);
	pthread_mutex_unlock(&fs->lock);
	kvfs_neg_forget(fs, d, c.raw, c.rawlen);
	fi->direct_io = 1;
	fi->fh = (uintptr_t)fh;
	fuse_reply_create(req, &e, fi);
	kvfs_node_unref(fs, d);
	return;
out:
	kvfs_node_unref(fs, d);
	fuse_reply_err(req, err);
}

/* A page written back from a shared writable mapping after the close that
 * stored the file (numpy.memmap(mode="w+") closes its descriptor right
 * after mapping it): the handle takes the stored value again, and its
 * release, which the kernel sends only after the mapping is gone and its
 * pages are written, stores the result. Refusing the page would lose it
 * silently (write-back errors reach only a later msync). An errno or 0. */
static int wbuf_reopen(struct kvfs *fs, struct kvfs_fh *fh)
{
	struct kvfs_wbuf *w = &fh->w;
	char key[KVP_MAX_KEY + 1];
	int rc;

	pthread_mutex_lock(&fs->lock);
	snprintf(key, sizeof(key), "%s", fh->node->raw);
	pthread_mutex_unlock(&fs->lock);
	w->len = 0;
	rc = wbuf_load(fs, fh->node, key, w);
	if (rc)
		return rc;
	w->done = false;
	w->dirty = false;
	w->excl = false;
	w->any_close = true;
	return 0;
}

int kvfs_wbuf_reload_locked(struct kvfs *fs, struct kvfs_fh *fh)
{
	if (!fh->w.done)
		return 0;
	return fh->w.err ? fh->w.err : wbuf_reopen(fs, fh);
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
	if (w->done && !w->err && fi->writepage)
		rc = wbuf_reopen(fs, fh);
	if (w->append)
		off = (off_t)w->len;
	if (rc) {
		/* the stored value could not be read back: the page is refused */
	} else if (w->done || off < 0) {
		/* stored already by another writer's close: one writer per file */
		rc = EPERM;
	} else {
		/* a hole (off > len) is zeros, as in a sparse copy */
		rc = wbuf_reserve(fs, w, (uint64_t)off + size);
	}
	/* the value would not be what the writer meant: store nothing */
	if (rc && !w->done && !w->err)
		w->err = rc;
	if (rc == 0) {
		memcpy(w->buf + off, buf, size);
		if ((size_t)off + size > w->len)
			w->len = (size_t)off + size;
		w->dirty = true;
		if (!wbuf_writer(w, fi->lock_owner)) {
			if (w->nwriters < KVFS_WRITERS_MAX)
				w->writers[w->nwriters] = fi->lock_owner;
			w->nwriters++;
		}
		pthread_mutex_lock(&fs->lock);
		fh->node->size = w->len;
		w->closed = false;
		pthread_mutex_unlock(&fs->lock);
	}
	pthread_mutex_unlock(&fh->lock);
	if (rc)
		fuse_reply_err(req, rc);
	else
		fuse_reply_write(req, size);
}

int kvfs_wbuf_resize(struct kvfs *fs, struct kvfs_fh *fh, uint64_t size)
{
	struct kvfs_wbuf *w = &fh->w;
	int err = 0;

	pthread_mutex_lock(&fh->lock);
	if (w->done) {
		err = EPERM;
	} else if (size > w->len) {
		err = wbuf_reserve(fs, w, size);
		if (!err)
			w->len = (size_t)size;
	} else {
		if (w->buf)
			memset(w->buf + size, 0, w->len - (size_t)size);
		w->len = (size_t)size;
	}
	if (!err) {
		w->dirty = true;
		/* setattr carries no lock owner: the next close stores it */
		w->any_close = true;
		pthread_mutex_lock(&fs->lock);
		fh->node->size = w->len;
		pthread_mutex_unlock(&fs->lock);
	}
	pthread_mutex_unlock(&fh->lock);
	return err;
}

int kvfs_empty_value(struct kvfs *fs, struct kvfs_node *n, const char *key, bool existed,
		     const struct kvfs_wbuf *w)
{
	struct kvfs_node *d = NULL;
	struct kvp *k;
	int rc = 0, e = 0;

	kvfs_commit_wait(fs, n);	/* not under a put that is still queued */
	if (existed) {
		/* an empty value is no object: the old one goes, and the name
		 * stays as an empty file of this mount */
		k = kvfs_kvp(fs, &e);
		rc = k ? kvp_remove(k, key, KVP_REMOVE_FORCE) : e;
		if (rc == KVP_ENOTFOUND)
			rc = 0;
	}
	pthread_mutex_lock(&fs->lock);
	/* the write handle's file becomes the empty file in one step: never
	 * neither (a setattr in between would find no file) */
	if (w)
		kvfs_pending_clear_locked(fs, n, w);
	if (rc == 0) {
		if (existed || n->generation || n->commit_len)
			kvfs_node_changed_locked(fs, n);
		kvfs_times_drop_locked(&fs->times, key, strlen(key));
		n->size = 0;
		n->mtime_ns = clock_realtime_ns();
		if (!n->retired)
			kvfs_memdir_set_locked(fs, n);
		d = existed ? kvfs_node_by_ino_locked(fs, n->parent) : NULL;
		if (d)
			d->refs++;
	}
	pthread_mutex_unlock(&fs->lock);
	if (d) {
		/* its key is gone: the directories above may hold no key now */
		kvfs_keep_emptied_dirs(fs, d);
		kvfs_node_unref(fs, d);
	}
	return rc ? kvp_to_errno(rc) : 0;
}

/* Stores the buffered value (fh->lock held); errno or 0. */
static int fh_commit_locked(struct kvfs *fs, struct kvfs_fh *fh)
{
	struct kvfs_node *n = fh->node;
	struct kvfs_wbuf *w = &fh->w;
	char key[KVP_MAX_KEY + 1];
	bool replace = !w->excl, changed;
	uint64_t sum;
	int rc = 0;

	if (w->done)
		return 0;
	w->done = true;
	pthread_mutex_lock(&fs->lock);
	snprintf(key, sizeof(key), "%s", n->raw);
	changed = w->existed || n->generation || n->commit_len;
	if (w->err || !w->dirty) {
		kvfs_pending_clear_locked(fs, n, w);
		n->fresh_until = 0;
	}
	pthread_mutex_unlock(&fs->lock);
	if (w->err) {
		rc = w->err;
		log_info("kvfs: '%s' not stored: a write was refused (%s)", key, strerror(rc));
	} else if (!w->dirty) {
		rc = 0;			/* opened for writing, nothing changed */
	} else if (w->len == 0) {
		rc = kvfs_empty_value(fs, n, key, w->existed, w);
	} else if (w->len <= fs->conf.fuse.write_behind && fs->commit) {
		struct kvfs_blob *b = kvfs_blob_wrap(w->buf, w->len);

		if (b && kvfs_commit_queue(fs, n, b, replace) == 0) {
			w->buf = NULL;
			w->cap = 0;
			pthread_mutex_lock(&fs->lock);
			kvfs_pending_clear_locked(fs, n, w);
			if (changed)
				kvfs_node_changed_locked(fs, n);
			n->size = w->len;
			n->mtime_ns = clock_realtime_ns();
			pthread_mutex_unlock(&fs->lock);
			return 0;
		}
		if (b) {
			b->data = NULL;
			kvfs_blob_free(b);
		}
		goto put_now;
	} else {
put_now:
		/* after what an earlier close of this file queued */
		kvfs_commit_wait(fs, n);
		rc = kvfs_store(fs, key, w->buf, w->len, replace);
		sum = rc == 0 ? XXH3_64bits(w->buf, w->len) : 0;
		pthread_mutex_lock(&fs->lock);
		kvfs_pending_clear_locked(fs, n, w);
		n->fresh_until = 0;	/* the next getattr asks the pool */
		if (rc == 0) {
			if (changed)
				kvfs_node_changed_locked(fs, n);
			n->commit_sum = sum;
			n->commit_len = w->len;
			kvfs_memdirs_settle_locked(fs, key, strlen(key));
		}
		pthread_mutex_unlock(&fs->lock);
		if (rc)
			log_warn("kvfs: put of %zu bytes to '%s' failed: %s", w->len, key,
				 kvp_strerror(rc));
		else
			kvfs_commit_times(fs, n, key);
		rc = rc ? kvp_to_errno(rc) : 0;
	}
	free(w->buf);
	w->buf = NULL;
	w->cap = 0;
	return rc;
}

void kvfs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_fh *fh = (struct kvfs_fh *)(uintptr_t)fi->fh;
	int rc = 0;

	/* close(2) waits for flush, release comes later and asynchronously:
	 * committing here makes `cp f mnt/k && cat mnt/k` see the new value.
	 * Only the close of a process that wrote stores it: the shell's
	 * `> FILE` closes a dup'd descriptor before anything is written, and
	 * a child that inherited the descriptor and exits has not written. */
	if (fh->kind == FH_WRITE) {
		pthread_mutex_lock(&fh->lock);
		if (!fh->w.done && (fh->w.err || (fh->w.dirty && (fh->w.any_close ||
								   wbuf_writer(&fh->w, fi->lock_owner)))))
			rc = fh_commit_locked(fs, fh);
		else
			wbuf_closed(fs, &fh->w, true);	/* a close that stored nothing */
		pthread_mutex_unlock(&fh->lock);
	}
	fuse_reply_err(req, rc);
}

/* fsync of a write handle: what was written so far becomes the key's
 * value now (the handle stays open for more, stored again at its close). */
static int fh_sync_locked(struct kvfs *fs, struct kvfs_fh *fh)
{
	struct kvfs_node *n = fh->node;
	struct kvfs_wbuf *w = &fh->w;
	char key[KVP_MAX_KEY + 1];
	uint64_t sum;
	int rc;

	if (w->err)
		return w->err;
	if (w->done || !w->dirty || w->len == 0)
		return 0;	/* stored already, unchanged, or no value yet */
	pthread_mutex_lock(&fs->lock);
	snprintf(key, sizeof(key), "%s", n->raw);
	pthread_mutex_unlock(&fs->lock);
	kvfs_commit_wait(fs, n);
	rc = kvfs_store(fs, key, w->buf, w->len, !w->excl);
	if (rc < 0)
		return kvp_to_errno(rc);
	sum = XXH3_64bits(w->buf, w->len);
	pthread_mutex_lock(&fs->lock);
	kvfs_node_committed_locked(fs, n, sum, w->len);
	kvfs_memdirs_settle_locked(fs, key, strlen(key));
	pthread_mutex_unlock(&fs->lock);
	kvfs_commit_times(fs, n, key);
	w->dirty = false;
	w->existed = true;	/* a later close replaces it */
	w->excl = false;
	return 0;
}

void kvfs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_fh *fh = (struct kvfs_fh *)(uintptr_t)fi->fh;
	int rc = 0;

	/* what a close queued is stored by now, or its error reported */
	if (fh->kind == FH_WRITE) {
		pthread_mutex_lock(&fh->lock);
		rc = fh_sync_locked(fs, fh);
		pthread_mutex_unlock(&fh->lock);
	}
	if (!rc && fh->kind != FH_TEXT)
		rc = kvfs_commit_wait(fs, fh->node);
	fuse_reply_err(req, rc);
}

void kvfs_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);

	/* `sync MNT`: every put queued behind a close is done */
	fuse_reply_err(req, kvfs_commit_wait_all(fs, true));
}

void kvfs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_fh *fh = (struct kvfs_fh *)(uintptr_t)fi->fh;
	bool last;

	if (fh->kind == FH_WRITE) {
		pthread_mutex_lock(&fh->lock);
		/* the last close: nobody that wrote closed before (`: > f`,
		 * touch, a truncation), or it was stored already */
		if (!fh->w.done)
			fh_commit_locked(fs, fh);
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

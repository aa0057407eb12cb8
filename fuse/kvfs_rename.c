/* kvfs_rename: rename within the view (kvfs_rename.h).
 *
 * The pool has no re-key: an extent's header carries its key. So a rename
 * moves the value by the cheapest way the source's state allows:
 *  - being written (a handle open): the node takes the new name and its
 *    close commits there;
 *  - closed, put queued (write-behind, e.g. rsync's and editors' temp
 *    files): the queued value is re-addressed to the new name;
 *  - empty (this mount's memory only): the node takes the new name;
 *  - stored: the value is read, put under the new name (an upsert, so a
 *    reader of it sees the old or the new value, never a mix) and the old
 *    key removed.
 * The kernel's inode of the source becomes the target's (the node is
 * re-keyed, keeping its inode number); a node the target name had is
 * retired, like an unlinked inode, for the handles still open on it.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kvfs_change.h"
#include "kvfs_commit.h"
#include "kvfs_fh.h"
#include "kvfs_neg.h"
#include "kvfs_node.h"
#include "kvfs_rename.h"
#include "kvfs_resolve.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

/* The move_* steps return 0, the positive errno of the reply, or RN_AGAIN:
 * the source changed state meanwhile (a close, a put that started, a value
 * replaced or removed), so do_rename looks at it again. Neither an errno
 * nor a KVP_E* code: a pool error (KVP_EAUTH...) is converted with
 * kvp_to_errno() where it happens and never read as "again". */
#define RN_AGAIN (-1)

struct rn {
	struct kvfs *fs;
	struct kvfs_node *d, *nd;	/* source and target directories, referenced */
	struct kvfs_child c, nc;	/* source and target names */
	const char *newname;
	unsigned flags;
	bool dst_exists;		/* the target name holds a file (stored, queued, empty) */
	bool src_removed;		/* a source key left the pool: d may be empty now */
};

/* Whether the target name is free, a file to replace (r->dst_exists), or
 * refused: an errno. Waits for a put of the target that is still queued,
 * so that it cannot land over the renamed value. */
static int check_target(struct rn *r)
{
	struct kvfs *fs = r->fs;
	struct kvfs_node *tn, *dn;
	bool queued = false, mem = false;
	int rc, err = 0;

	pthread_mutex_lock(&fs->lock);
	tn = kvfs_node_by_name_locked(fs, KN_FILE, r->nc.raw, r->nc.rawlen);
	r->nc.raw[r->nc.rawlen] = '/';
	dn = kvfs_node_by_name_locked(fs, KN_DIR, r->nc.raw, r->nc.rawlen + 1);
	r->nc.raw[r->nc.rawlen] = 0;
	if (tn && tn->pending)
		err = EBUSY;		/* another handle is writing it */
	else if (dn && dn->memdir)
		err = EISDIR;
	if (tn) {
		queued = tn->queued != NULL;
		mem = tn->memdir;
		tn->refs++;
	}
	pthread_mutex_unlock(&fs->lock);
	if (!err && queued)
		kvfs_commit_wait(fs, tn);
	if (tn)
		kvfs_node_unref(fs, tn);
	if (err)
		return err;
	if (kvfs_neg_absent(fs, r->nd, r->nc.raw, r->nc.rawlen)) {
		r->dst_exists = mem;
	} else {
		struct kvfs_probe p;

		rc = kvfs_probe(fs, r->nc.raw, r->nc.rawlen, &p);
		if (rc < 0)
			return kvp_to_errno(rc);
		r->dst_exists = p.obj || mem || queued;
		if (!r->dst_exists && p.dir)
			return EISDIR;	/* a directory of keys has that name */
	}
	if (r->dst_exists && (r->flags & RENAME_NOREPLACE))
		return EEXIST;
	return 0;
}

/* Gives node n the target name (fs->lock held); the target's old node,
 * if any, is retired with its cached pages invalidated. */
static int rekey_locked(struct rn *r, struct kvfs_node *n)
{
	struct kvfs_node *old;
	int rc = kvfs_node_rekey_locked(r->fs, n, r->nc.raw, r->nc.rawlen, r->nd->ino,
					r->newname, &old);

	(void)old;	/* retired: its open handles keep what they cached */
	kvfs_times_drop_locked(&r->fs->times, r->nc.raw, r->nc.rawlen);
	return rc ? ENOMEM : 0;
}

/* Removes key from the pool (force: the rename is the owner's decision
 * that the name goes; readers of it fail rather than read other bytes). */
static int remove_key(struct kvfs *fs, const char *key)
{
	struct kvp *k;
	int rc, e = 0;

	k = kvfs_kvp(fs, &e);
	rc = k ? kvp_remove(k, key, KVP_REMOVE_FORCE) : e;
	return rc == KVP_ENOTFOUND ? 0 : rc;
}

/* The source is being written: its close commits under the new name.
 * RN_AGAIN when that close happened meanwhile. */
static int move_pending(struct rn *r, struct kvfs_node *n, struct kvfs_fh *fh)
{
	struct kvfs *fs = r->fs;
	int err = 0;

	pthread_mutex_lock(&fh->lock);
	if (fh->w.done) {
		pthread_mutex_unlock(&fh->lock);
		return RN_AGAIN;
	}
	pthread_mutex_lock(&fs->lock);
	err = rekey_locked(r, n);
	if (!err) {
		fh->w.excl = false;
		fh->w.existed = r->dst_exists;
		fh->w.dirty = true;
	}
	pthread_mutex_unlock(&fs->lock);
	pthread_mutex_unlock(&fh->lock);
	return err;
}

/* The source's put is queued: re-address it. RN_AGAIN when it started. */
static int move_queued(struct rn *r, struct kvfs_node *n)
{
	struct kvfs *fs = r->fs;
	struct kvfs_blob *b;
	bool replace;
	int err;

	if (!kvfs_commit_take(fs, n, &b, &replace))
		return RN_AGAIN;	/* stored by now */
	pthread_mutex_lock(&fs->lock);
	err = rekey_locked(r, n);
	pthread_mutex_unlock(&fs->lock);
	if (kvfs_commit_queue(fs, n, b, true) < 0) {
		/* out of memory: the value goes nowhere, tell the caller */
		pthread_mutex_lock(&fs->lock);
		n->queued = NULL;
		kvfs_blob_put_locked(n, b);
		pthread_mutex_unlock(&fs->lock);
		return ENOMEM;
	}
	/* a queued upsert may replace a value the old name had */
	if (!err && replace) {
		int rc = remove_key(fs, r->c.raw);

		if (rc < 0)
			return kvp_to_errno(rc);
		r->src_removed = true;
	}
	return err;
}

/* The source is an empty file of this mount. */
static int move_mem(struct rn *r, struct kvfs_node *n)
{
	struct kvfs *fs = r->fs;
	int rc, err = 0;

	if (r->dst_exists) {
		/* the target becomes empty: no value in the pool */
		rc = remove_key(fs, r->nc.raw);
		if (rc < 0)
			return kvp_to_errno(rc);
	}
	pthread_mutex_lock(&fs->lock);
	if (!n->memdir || n->pending || n->queued)
		err = RN_AGAIN;
	else
		err = rekey_locked(r, n);
	pthread_mutex_unlock(&fs->lock);
	return err;
}

/* Whether the source name is a directory: EXDEV (mv copies directories)
 * or ENOENT. */
static int not_a_file(struct rn *r)
{
	struct kvfs_node *dn;
	bool mem;
	int rc;

	r->c.raw[r->c.rawlen] = '/';
	r->c.raw[r->c.rawlen + 1] = 0;
	pthread_mutex_lock(&r->fs->lock);
	dn = kvfs_node_by_name_locked(r->fs, KN_DIR, r->c.raw, r->c.rawlen + 1);
	mem = dn && dn->memdir;
	pthread_mutex_unlock(&r->fs->lock);
	rc = mem ? 1 : kvfs_prefix_used(r->fs, r->c.raw);
	r->c.raw[r->c.rawlen] = 0;
	if (rc < 0)
		return kvp_to_errno(rc);
	return rc > 0 ? EXDEV : ENOENT;
}

/* The source is stored: copy, then remove. n may be NULL. rc holds KVP_E*
 * codes only. */
static int move_stored(struct rn *r, struct kvfs_node *n)
{
	struct kvfs *fs = r->fs;
	struct kvp_stat st, st2;
	uint64_t mt, at, sum;
	bool changed = false;
	struct kvp *k;
	int64_t got;
	char *buf;
	int rc, e = 0;

	k = kvfs_kvp(fs, &e);
	if (!k)
		return kvp_to_errno(e);
	rc = kvp_stat(k, r->c.raw, &st);
	if (rc == KVP_ENOTFOUND)
		return not_a_file(r);
	if (rc < 0)
		return kvp_to_errno(rc);
	buf = malloc(st.size ? st.size : 1);
	if (!buf)
		return ENOMEM;
	got = kvp_get_into(k, r->c.raw, buf, st.size);
	/* the bytes are of the generation stat saw (generations only grow) */
	rc = got < 0 ? (int)got : kvp_stat(k, r->c.raw, &st2);
	if (rc == 0 && ((uint64_t)got != st.size || st2.generation != st.generation))
		changed = true;
	if (rc == 0 && !changed)
		rc = kvfs_store(fs, r->nc.raw, buf, st.size, !(r->flags & RENAME_NOREPLACE));
	sum = rc == 0 ? XXH3_64bits(buf, st.size) : 0;
	free(buf);
	if (changed || rc == KVP_ENOTFOUND)
		return RN_AGAIN;	/* replaced or removed meanwhile: again */
	if (rc < 0)
		return rc == KVP_EEXIST ? EEXIST : kvp_to_errno(rc);
	/* the renamed file keeps the times it showed, as a rename does */
	mt = st.put_time_ns;
	at = st.access_time_ns ? st.access_time_ns : st.put_time_ns;
	pthread_mutex_lock(&fs->lock);
	kvfs_times_get_locked(&fs->times, r->c.raw, r->c.rawlen, st.put_time_ns, &mt, &at);
	if (n && (n->set_mtime_ns || n->set_atime_ns)) {
		/* times set while its put was in flight, not yet applied by
		 * kvfs_commit_times (it runs after the put, unlocked): they are
		 * the file's and go with it (rsync: utimes, then rename) */
		if (n->set_mtime_ns)
			mt = n->set_mtime_ns;
		if (n->set_atime_ns)
			at = n->set_atime_ns;
		n->set_mtime_ns = n->set_atime_ns = 0;
	}
	kvfs_times_drop_locked(&fs->times, r->c.raw, r->c.rawlen);
	pthread_mutex_unlock(&fs->lock);
	rc = remove_key(fs, r->c.raw);
	if (rc < 0)
		return kvp_to_errno(rc);
	r->src_removed = true;
	pthread_mutex_lock(&fs->lock);
	if (n) {
		rc = rekey_locked(r, n);
		/* the same bytes: the pages the kernel caches stay right */
		n->generation = 0;
		n->commit_sum = sum;
		n->commit_len = st.size;
		n->fresh_until = 0;
	} else {
		struct kvfs_node *o = kvfs_node_by_name_locked(fs, KN_FILE, r->nc.raw,
							       r->nc.rawlen);

		if (o)
			kvfs_node_retire_locked(fs, o);
		rc = 0;
	}
	pthread_mutex_unlock(&fs->lock);
	if (kvp_stat(k, r->nc.raw, &st2) == 0) {
		pthread_mutex_lock(&fs->lock);
		kvfs_times_set_locked(&fs->times, r->nc.raw, r->nc.rawlen, st2.put_time_ns, mt, at);
		pthread_mutex_unlock(&fs->lock);
	}
	return rc;
}

static int do_rename(struct rn *r)
{
	struct kvfs *fs = r->fs;
	int err = RN_AGAIN;

	for (int tries = 0; tries < 8 && err == RN_AGAIN; tries++) {
		struct kvfs_node *n;
		struct kvfs_fh *fh = NULL;
		bool queued = false, mem = false;

		err = check_target(r);
		if (err)
			return err;
		pthread_mutex_lock(&fs->lock);
		n = kvfs_node_by_name_locked(fs, KN_FILE, r->c.raw, r->c.rawlen);
		if (n) {
			n->refs++;
			if (n->pending) {
				fh = (struct kvfs_fh *)((char *)n->pending - offsetof(struct kvfs_fh, w));
				fh->users++;	/* release waits for us */
			}
			queued = n->queued != NULL;
			mem = n->memdir;
		}
		pthread_mutex_unlock(&fs->lock);
		if (fh) {
			err = move_pending(r, n, fh);
			kvfs_fh_unuse(fs, fh);
		} else if (queued) {
			err = move_queued(r, n);
		} else if (mem) {
			err = move_mem(r, n);
		} else {
			err = move_stored(r, n);
		}
		if (n)
			kvfs_node_unref(fs, n);
	}
	return err == RN_AGAIN ? EBUSY : err;
}

void kvfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		 const char *newname, unsigned int flags)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct rn *r;
	int err = 0;

	if (flags & ~(unsigned)RENAME_NOREPLACE) {
		/* RENAME_EXCHANGE would need two values swapped at once */
		fuse_reply_err(req, fs->ro ? EROFS : EINVAL);
		return;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	r->fs = fs;
	r->flags = flags;
	r->newname = newname;
	r->d = kvfs_dir_for_change(req, fs, parent, ENOTDIR);
	if (!r->d)
		goto out_free;
	r->nd = kvfs_dir_for_change(req, fs, newparent, ENOTDIR);
	if (!r->nd)
		goto out_d;
	err = kvfs_resolve(r->d, name, &r->c);
	if (err || r->c.rawlen == 0) {
		err = err == ENAMETOOLONG ? ENAMETOOLONG : ENOENT;
		goto out;
	}
	if (r->c.kind != KN_FILE) {
		err = EXDEV;		/* a directory name (NAME%%, chain pieces) */
		goto out;
	}
	err = kvfs_resolve(r->nd, newname, &r->nc);
	if (!err && r->nc.kind != KN_FILE)
		err = EISDIR;
	if (!err && (r->nc.rawlen == 0 ||
		     (r->nd->ino == FUSE_ROOT_ID && !strcmp(newname, ".kvpool"))))
		err = EINVAL;
	if (err)
		goto out;
	if (r->c.rawlen == r->nc.rawlen && !memcmp(r->c.raw, r->nc.raw, r->c.rawlen))
		goto out;		/* the same name: nothing to do */
	err = do_rename(r);
	if (!err) {
		kvfs_neg_forget(fs, r->nd, r->nc.raw, r->nc.rawlen);
		if (r->src_removed)
			kvfs_keep_emptied_dirs(fs, r->d);
	}
out:
	kvfs_node_unref(fs, r->nd);
out_d:
	kvfs_node_unref(fs, r->d);
	if (r->d && r->nd)
		fuse_reply_err(req, err);
out_free:
	free(r);
}

/* kvfs_lookup: lookup, forget and getattr (kvfs_lookup.h). A lookup
 * answers from the inode table while its entry is fresh, else asks the
 * pool: an object NAME, else a directory NAME/ when keys are under it.
 */
#include <errno.h>
#include <string.h>

#include "clock.h"
#include "kvfs_ctl.h"
#include "kvfs_lookup.h"
#include "kvfs_neg.h"
#include "kvfs_node.h"
#include "kvfs_resolve.h"

/* Replies an entry for (kind, raw), a directory or a control file,
 * creating the node; counts a lookup. */
static void reply_node(fuse_req_t req, struct kvfs *fs, enum kvfs_kind kind, const char *raw,
		       size_t rawlen, uint64_t parent, const char *name)
{
	struct fuse_entry_param e;
	struct kvfs_node *n;

	pthread_mutex_lock(&fs->lock);
	n = kvfs_node_get_locked(fs, kind, raw, rawlen, parent, name);
	if (!n) {
		pthread_mutex_unlock(&fs->lock);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (kind == KN_DIR || kind == KN_PIECE)
		n->fresh_until = clock_now_ms() + (uint64_t)(fs->entry_timeout * 1000);
	n->nlookup++;
	kvfs_fill_entry_locked(fs, n, &e);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_entry(req, &e);
}

/* Replies the file c->raw from what a list call said of it. */
static void reply_listed(fuse_req_t req, struct kvfs *fs, const struct kvfs_child *c,
			 uint64_t parent, const char *name, const struct kvfs_probe *p)
{
	struct fuse_entry_param e;
	struct kvfs_node *n;

	pthread_mutex_lock(&fs->lock);
	n = kvfs_node_get_locked(fs, KN_FILE, c->raw, c->rawlen, parent, name);
	if (n && !kvfs_node_from_list_locked(fs, n, p->size, p->put_ns)) {
		/* replaced by another client since the kernel got this inode:
		 * the name gets a new one, open handles keep the old */
		n = kvfs_node_fresh_locked(fs, n);
		if (n && !kvfs_node_from_list_locked(fs, n, p->size, p->put_ns))
			n = NULL;
	}
	if (!n) {
		pthread_mutex_unlock(&fs->lock);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	n->nlookup++;
	kvfs_fill_entry_locked(fs, n, &e);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_entry(req, &e);
}

static void reply_fixed(fuse_req_t req, struct kvfs *fs, struct kvfs_node *n)
{
	struct fuse_entry_param e;

	pthread_mutex_lock(&fs->lock);
	n->nlookup++;
	kvfs_fill_entry_locked(fs, n, &e);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_entry(req, &e);
}

static void lookup_ctl(fuse_req_t req, struct kvfs *fs, struct kvfs_node *d, const char *name)
{
	struct kvfs_node *n = NULL;
	char node[KVFS_NAME_BUF];
	size_t nl;

	switch (d->kind) {
	case KN_CTL_DIR:
		pthread_mutex_lock(&fs->lock);
		if (!strcmp(name, "stats"))
			n = kvfs_node_by_ino_locked(fs, KVFS_INO_CTL_STATS);
		else if (!strcmp(name, "nodes"))
			n = kvfs_node_by_ino_locked(fs, KVFS_INO_CTL_NODES);
		else if (!strcmp(name, "segments"))
			n = kvfs_node_by_ino_locked(fs, KVFS_INO_CTL_SEGMENTS);
		pthread_mutex_unlock(&fs->lock);
		if (!n)
			break;
		reply_fixed(req, fs, n);
		return;
	case KN_CTL_NODES:
		if (kvfs_unescape(name, node, sizeof(node), &nl) != 0 || !kvfs_ctl_node_exists(fs, node))
			break;
		reply_node(req, fs, KN_CTL_NODE, node, nl, d->ino, name);
		return;
	case KN_CTL_NODE:
		if (!strcmp(name, "info"))
			reply_node(req, fs, KN_CTL_INFO, d->raw, d->rawlen, d->ino, name);
		else if (!strcmp(name, "extents"))
			reply_node(req, fs, KN_CTL_EXTENTS, d->raw, d->rawlen, d->ino, name);
		else
			break;
		return;
	default:
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fuse_reply_err(req, ENOENT);
}

/* Replies with the directory c->raw (a prefix ending in '/') under @parent
 * if a key starts with it, else ENOENT. */
static void reply_dir_if_used(fuse_req_t req, struct kvfs *fs, const struct kvfs_child *c,
			      uint64_t parent, const char *name)
{
	int rc = kvfs_prefix_used(fs, c->raw);

	if (rc < 0)
		fuse_reply_err(req, kvp_to_errno(rc));
	else if (rc == 0)
		fuse_reply_err(req, ENOENT);
	else
		reply_node(req, fs, KN_DIR, c->raw, c->rawlen, parent, name);
}

void kvfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_node *d, *n;
	struct kvfs_probe p;
	struct kvfs_child c;
	int rc, err;

	d = kvfs_node_ref(fs, parent);
	if (!d) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (d->kind != KN_DIR && d->kind != KN_PIECE) {
		lookup_ctl(req, fs, d, name);
		goto out;
	}
	if (d->ino == FUSE_ROOT_ID && !strcmp(name, ".kvpool")) {
		pthread_mutex_lock(&fs->lock);
		n = kvfs_node_by_ino_locked(fs, KVFS_INO_CTL_DIR);
		pthread_mutex_unlock(&fs->lock);
		reply_fixed(req, fs, n);
		goto out;
	}
	err = kvfs_resolve(d, name, &c);
	if (err) {
		fuse_reply_err(req, err == ENAMETOOLONG ? ENAMETOOLONG : ENOENT);
		goto out;
	}

	/* what the table already knows, while it is fresh */
	pthread_mutex_lock(&fs->lock);
	{
		uint64_t now = clock_now_ms();
		struct kvfs_node *f = NULL, *dd;
		bool hit = false;

		if (c.kind == KN_FILE) {
			f = kvfs_node_by_name_locked(fs, KN_FILE, c.raw, c.rawlen);
			if (f && (f->pending || f->queued || f->memdir || f->fresh_until > now)) {
				hit = true;
				n = f;
			} else {
				c.raw[c.rawlen] = '/';
				dd = kvfs_node_by_name_locked(fs, KN_DIR, c.raw, c.rawlen + 1);
				c.raw[c.rawlen] = 0;
				if (dd && !dd->alias && (dd->memdir || dd->fresh_until > now)) {
					hit = true;
					n = dd;
				}
			}
		} else {
			n = kvfs_node_by_name_locked(fs, c.kind, c.raw, c.rawlen);
			hit = n && (n->memdir || n->fresh_until > now);
		}
		if (hit) {
			struct fuse_entry_param ep;

			n->nlookup++;
			kvfs_fill_entry_locked(fs, n, &ep);
			pthread_mutex_unlock(&fs->lock);
			fuse_reply_entry(req, &ep);
			goto out;
		}
	}
	pthread_mutex_unlock(&fs->lock);

	if (c.kind == KN_PIECE) {
		size_t dl = kvfs_dir_part(d->raw, d->rawlen);

		rc = kvfs_piece_used(fs, c.raw, c.rawlen, dl, d->rawlen - dl);
		if (rc < 0) {
			fuse_reply_err(req, kvp_to_errno(rc));
		} else if (rc == 0) {
			fuse_reply_err(req, ENOENT);
		} else {
			reply_node(req, fs, KN_PIECE, c.raw, c.rawlen, d->ino, name);
		}
		goto out;
	}
	if (c.kind == KN_DIR) {		/* NAME%%: the directory, never the object */
		reply_dir_if_used(req, fs, &c, d->ino, name);
		goto out;
	}
	/* the object NAME, else a directory NAME/ if keys are under it: one
	 * list call tells both */
	rc = kvfs_probe(fs, c.raw, c.rawlen, &p);
	if (rc < 0) {
		fuse_reply_err(req, kvp_to_errno(rc));
	} else if (p.obj) {
		reply_listed(req, fs, &c, d->ino, name, &p);
	} else if (p.dir) {
		c.raw[c.rawlen++] = '/';
		c.raw[c.rawlen] = 0;
		reply_node(req, fs, KN_DIR, c.raw, c.rawlen, d->ino, name);
	} else {
		kvfs_neg_note(fs, d, c.raw, c.rawlen);	/* for the create that follows */
		fuse_reply_err(req, ENOENT);
	}
out:
	kvfs_node_unref(fs, d);
}

static void forget_one_locked(struct kvfs *fs, fuse_ino_t ino, uint64_t nlookup)
{
	struct kvfs_node *n = kvfs_node_by_ino_locked(fs, ino);

	if (!n)
		return;
	n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
	kvfs_node_maybe_free_locked(fs, n);
}

void kvfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct kvfs *fs = fuse_req_userdata(req);

	pthread_mutex_lock(&fs->lock);
	forget_one_locked(fs, ino, nlookup);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_none(req);
}

void kvfs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct kvfs *fs = fuse_req_userdata(req);

	pthread_mutex_lock(&fs->lock);
	for (size_t i = 0; i < count; i++)
		forget_one_locked(fs, forgets[i].ino, forgets[i].nlookup);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_none(req);
}

void kvfs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_node *n = kvfs_node_ref(fs, ino);
	char key[KVP_MAX_KEY + 1];
	struct kvp_stat ks;
	struct stat st;
	bool need_stat;
	struct kvp *k;
	int rc, e = 0;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	pthread_mutex_lock(&fs->lock);
	/* a retired node is an inode whose file was replaced or removed: it
	 * keeps the attributes it had, like an unlinked file */
	need_stat = n->kind == KN_FILE && !n->pending && !n->queued && !n->memdir &&
		    !n->retired && n->fresh_until <= clock_now_ms();
	if (need_stat)
		snprintf(key, sizeof(key), "%s", n->raw);
	pthread_mutex_unlock(&fs->lock);
	if (need_stat) {
		k = kvfs_kvp(fs, &e);
		rc = k ? kvp_stat(k, key, &ks) : e;
		if (rc < 0 && rc != KVP_ENOTFOUND) {
			fuse_reply_err(req, kvp_to_errno(rc));
			goto out;
		}
		/* Removed, or another value now: this inode is the file as it
		 * was, like an unlinked or replaced file that is still open
		 * (fstat of it must work: Python's mmap sizes its map so). The
		 * name gets a new inode at its next lookup (entry_timeout). */
		pthread_mutex_lock(&fs->lock);
		if (rc == KVP_ENOTFOUND || !kvfs_node_from_stat_locked(fs, n, &ks))
			kvfs_node_retire_locked(fs, n);
		pthread_mutex_unlock(&fs->lock);
	}
	pthread_mutex_lock(&fs->lock);
	kvfs_fill_attr_locked(fs, n, &st);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_attr(req, &st, fs->attr_timeout);
out:
	kvfs_node_unref(fs, n);
}

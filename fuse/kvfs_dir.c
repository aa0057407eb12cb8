/* kvfs_dir: opendir, readdir(plus) and releasedir (kvfs_dir.h): the
 * pool's keys page by page, then the names the pool does not list (the
 * control directory's, mkdir'd empty directories).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "clock.h"
#include "kvfs_commit.h"
#include "kvfs_ctl.h"
#include "kvfs_dir.h"
#include "kvfs_node.h"
#include "kvfs_resolve.h"

#define MEMDIR_OFF (1ull << 40)	/* readdir offsets of mkdir'd directories */

struct dmark {
	uint64_t base;		/* list index of the page's first entry */
	char *cursor;		/* cursor that fetched it */
};

struct dname {
	char name[KVFS_NAME_BUF];
	enum kvfs_kind kind;
	char *raw;
	size_t rawlen;
};

/* An open directory: paging state that maps readdir offsets to list
 * cursors, so a directory of millions of keys is never loaded whole.
 * Offsets: 1 ".", 2 "..", 3 + i the i-th listed entry, MEMDIR_OFF + 1 + j
 * the j-th remembered empty directory. */
struct kvfs_dh {
	pthread_mutex_t lock;
	struct kvfs_node *dir;		/* holds a ref */
	size_t dl;			/* directory part of dir->raw */
	bool have_page, eof;
	struct kvp_list page;
	uint64_t page_base;
	struct dmark *marks;
	size_t nmarks, capmarks;
	char *last_piece;		/* raw of the last chain piece shown */
	bool names_done;		/* memdirs / control names snapshot taken */
	struct dname *names;
	size_t nnames;
};

static void dh_free_names(struct kvfs_dh *dh)
{
	for (size_t i = 0; i < dh->nnames; i++)
		free(dh->names[i].raw);
	free(dh->names);
	dh->names = NULL;
	dh->nnames = 0;
	dh->names_done = false;
}

static int dh_add_name(struct kvfs_dh *dh, const char *name, enum kvfs_kind kind,
		       const char *raw, size_t rawlen)
{
	struct dname *nn = realloc(dh->names, (dh->nnames + 1) * sizeof(*nn));

	if (!nn)
		return -ENOMEM;
	dh->names = nn;
	nn += dh->nnames;
	snprintf(nn->name, sizeof(nn->name), "%s", name);
	nn->kind = kind;
	nn->raw = malloc(rawlen + 1);
	if (!nn->raw)
		return -ENOMEM;
	memcpy(nn->raw, raw, rawlen);
	nn->raw[rawlen] = 0;
	nn->rawlen = rawlen;
	dh->nnames++;
	return 0;
}

void kvfs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_node *n = kvfs_node_ref(fs, ino);
	struct kvfs_dh *dh;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!kvfs_is_dir_kind(n->kind)) {
		kvfs_node_unref(fs, n);
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	dh = calloc(1, sizeof(*dh));
	if (!dh) {
		kvfs_node_unref(fs, n);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* files closed before this listing are in the pool's list (their
	 * puts may still be queued behind the close) */
	if ((n->kind == KN_DIR || n->kind == KN_PIECE) && !kvfs_commit_idle(fs))
		kvfs_commit_wait_all(fs, false);
	pthread_mutex_init(&dh->lock, NULL);
	dh->dir = n;
	dh->dl = kvfs_dir_part(n->raw, n->rawlen);
	fi->fh = (uintptr_t)dh;
	fuse_reply_open(req, fi);
}

void kvfs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_dh *dh = (struct kvfs_dh *)(uintptr_t)fi->fh;

	if (dh->have_page)
		kvp_list_free(&dh->page);
	for (size_t i = 0; i < dh->nmarks; i++)
		free(dh->marks[i].cursor);
	free(dh->marks);
	free(dh->last_piece);
	dh_free_names(dh);
	pthread_mutex_destroy(&dh->lock);
	kvfs_node_unref(fs, dh->dir);
	free(dh);
	fuse_reply_err(req, 0);
}

/* Fetches the page at list index base with cursor (NULL = the start). */
static int dh_fetch(struct kvfs *fs, struct kvfs_dh *dh, uint64_t base, const char *cursor)
{
	struct kvp_list l;
	struct kvp *k;
	int rc, e = 0;

	k = kvfs_kvp(fs, &e);
	if (!k)
		return e;
	rc = kvp_list(k, dh->dir->raw, '/', cursor, KVFS_LIST_PAGE, &l);
	if (rc < 0)
		return rc;
	if (dh->nmarks == 0 || dh->marks[dh->nmarks - 1].base < base) {
		if (dh->nmarks == dh->capmarks) {
			size_t cap = dh->capmarks ? dh->capmarks * 2 : 16;
			struct dmark *m = realloc(dh->marks, cap * sizeof(*m));

			if (!m) {
				kvp_list_free(&l);
				return KVP_ENOMEM;
			}
			dh->marks = m;
			dh->capmarks = cap;
		}
		dh->marks[dh->nmarks].base = base;
		dh->marks[dh->nmarks].cursor = strdup(cursor ? cursor : "");
		if (!dh->marks[dh->nmarks].cursor) {
			kvp_list_free(&l);
			return KVP_ENOMEM;
		}
		dh->nmarks++;
	}
	if (dh->have_page)
		kvp_list_free(&dh->page);
	dh->page = l;
	dh->have_page = true;
	dh->page_base = base;
	dh->eof = l.n == 0 || !l.next || !l.next[0];
	return 0;
}

/* Makes the current page hold list index j; 1 when j is past the end. */
static int dh_seek(struct kvfs *fs, struct kvfs_dh *dh, uint64_t j)
{
	bool here = dh->have_page && j >= dh->page_base && j <= dh->page_base + dh->page.n;
	size_t m = 0;
	int rc;

	/* the last page start at or before j; a seek goes there directly */
	for (size_t i = 0; i < dh->nmarks; i++)
		if (dh->marks[i].base <= j)
			m = i;
	if (!here && dh->have_page && j > dh->page_base && dh->nmarks &&
	    dh->marks[m].base <= dh->page_base)
		here = true;		/* forward, nothing better known: page on */
	if (!here) {
		free(dh->last_piece);
		dh->last_piece = NULL;
		if (dh->nmarks == 0)
			rc = dh_fetch(fs, dh, 0, NULL);
		else
			rc = dh_fetch(fs, dh, dh->marks[m].base,
				      dh->marks[m].cursor[0] ? dh->marks[m].cursor : NULL);
		if (rc < 0)
			return rc;
	}
	while (j >= dh->page_base + dh->page.n) {
		char *next;

		if (dh->eof)
			return 1;
		next = strdup(dh->page.next);
		if (!next)
			return KVP_ENOMEM;
		rc = dh_fetch(fs, dh, dh->page_base + dh->page.n, next);
		free(next);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Whether the object key (the prefix entry at page index idx without its
 * '/') exists: decided from the page when it covers the key's position. */
static bool dh_object_exists(struct kvfs *fs, struct kvfs_dh *dh, size_t idx, const char *key)
{
	size_t lo = 0, hi = idx;
	struct kvp *k;
	int e = 0;

	if (idx > 0 && strcmp(dh->page.entries[0].name, key) <= 0) {
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			int c = strcmp(dh->page.entries[mid].name, key);

			if (c == 0)
				return !dh->page.entries[mid].is_prefix;
			if (c < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		return false;
	}
	k = kvfs_kvp(fs, &e);
	return k && kvp_exists(k, key) == 1;
}

struct dbuf {
	char *p;
	size_t size, len;
};

/* Adds one entry; false when it does not fit (then nothing changed). */
static bool dh_emit(fuse_req_t req, struct kvfs *fs, struct dbuf *b, bool plus, const char *name,
		    enum kvfs_kind kind, const char *raw, size_t rawlen, uint64_t parent,
		    const struct kvp_list_entry *le, off_t next)
{
	struct fuse_entry_param e;
	struct kvfs_node *n;
	size_t need;

	if (plus)
		need = fuse_add_direntry_plus(req, NULL, 0, name, NULL, 0);
	else
		need = fuse_add_direntry(req, NULL, 0, name, NULL, 0);
	if (need > b->size - b->len)
		return false;
	pthread_mutex_lock(&fs->lock);
	n = kvfs_node_get_locked(fs, kind, raw, rawlen, parent, name);
	if (!n) {
		pthread_mutex_unlock(&fs->lock);
		return false;
	}
	if (le && kind == KN_FILE && !kvfs_node_from_list_locked(fs, n, le->size, le->put_time_ns)) {
		/* put again by another client: a new inode for the name */
		n = kvfs_node_fresh_locked(fs, n);
		if (!n || !kvfs_node_from_list_locked(fs, n, le->size, le->put_time_ns)) {
			pthread_mutex_unlock(&fs->lock);
			return false;
		}
	} else if (kind == KN_DIR || kind == KN_PIECE) {
		n->alias = kind == KN_DIR && kvfs_is_alias(name, strlen(name));
		n->fresh_until = clock_now_ms() + (uint64_t)(fs->entry_timeout * 1000);
	}
	kvfs_fill_entry_locked(fs, n, &e);
	if (plus) {
		n->nlookup++;
		pthread_mutex_unlock(&fs->lock);
		b->len += fuse_add_direntry_plus(req, b->p + b->len, b->size - b->len, name, &e, next);
	} else {
		/* a plain readdir takes no reference: the node may go now */
		kvfs_node_maybe_free_locked(fs, n);
		pthread_mutex_unlock(&fs->lock);
		b->len += fuse_add_direntry(req, b->p + b->len, b->size - b->len, name, &e.attr, next);
	}
	return true;
}

/* How the list entry i of the current page shows in this directory: 0 and
 * name/kind/raw, or 1 to skip it. */
static int dh_show(struct kvfs *fs, struct kvfs_dh *dh, size_t i, char *name,
		   enum kvfs_kind *kind, char *raw, size_t *rawlen)
{
	const struct kvp_list_entry *le = &dh->page.entries[i];
	const struct kvfs_node *d = dh->dir;
	size_t len = strlen(le->name), off = d->rawlen - dh->dl, plen;
	const char *comp = le->name + dh->dl;
	bool last;

	if (len < d->rawlen || memcmp(le->name, d->raw, d->rawlen) != 0 || len > KVP_MAX_KEY + 1)
		return 1;
	if (le->is_prefix)
		len--;			/* the component without its '/' */
	if (kvfs_piece_at(comp, len - dh->dl, off, &plen, &last) != 0)
		return 1;		/* shown in another chain directory */
	if (!last) {
		*rawlen = d->rawlen + plen;
		memcpy(raw, le->name, *rawlen);
		raw[*rawlen] = 0;
		if (dh->last_piece && !strcmp(dh->last_piece, raw))
			return 1;	/* one name for every key behind it */
		free(dh->last_piece);
		dh->last_piece = strdup(raw);
		*kind = KN_PIECE;
		return kvfs_piece_name(comp, len - dh->dl, off, plen, false, name, KVFS_NAME_BUF) ? 1 : 0;
	}
	if (kvfs_piece_name(comp, len - dh->dl, off, plen, true, name, KVFS_NAME_BUF))
		return 1;
	if (le->is_prefix) {
		*rawlen = len + 1;
		memcpy(raw, le->name, *rawlen);
		raw[*rawlen] = 0;
		*kind = KN_DIR;
		raw[len] = 0;
		/* an object of the same name keeps the plain name */
		if (dh_object_exists(fs, dh, i, raw)) {
			if (strlen(name) + 2 > KVFS_NAME_MAX)
				return 1;
			strcat(name, "%%");
		}
		raw[len] = '/';
		return 0;
	}
	*rawlen = len;
	memcpy(raw, le->name, len);
	raw[len] = 0;
	*kind = KN_FILE;
	return 0;
}

/* Snapshot of the names listed after the pool's entries: the control
 * directory's fixed names, or the empty directories made by mkdir. */
static int dh_names(struct kvfs *fs, struct kvfs_dh *dh)
{
	struct kvfs_node *d = dh->dir;
	int rc = 0;

	if (dh->names_done)
		return 0;
	dh->names_done = true;
	if (d->kind == KN_CTL_DIR) {
		if ((rc = dh_add_name(dh, "stats", KN_CTL_STATS, "", 0)) == 0 &&
		    (rc = dh_add_name(dh, "nodes", KN_CTL_NODES, "", 0)) == 0)
			rc = dh_add_name(dh, "segments", KN_CTL_SEGMENTS, "", 0);
	} else if (d->kind == KN_CTL_NODE) {
		if ((rc = dh_add_name(dh, "info", KN_CTL_INFO, d->raw, d->rawlen)) == 0)
			rc = dh_add_name(dh, "extents", KN_CTL_EXTENTS, d->raw, d->rawlen);
	} else if (d->kind == KN_CTL_NODES) {
		char **names = NULL, esc[KVFS_NAME_BUF];
		size_t n = 0;

		rc = kvfs_ctl_node_names(fs, &names, &n);
		for (size_t i = 0; i < n; i++) {
			if (rc == 0 && kvfs_escape(names[i], strlen(names[i]), esc, sizeof(esc)) == 0)
				rc = dh_add_name(dh, esc, KN_CTL_NODE, names[i], strlen(names[i]));
			free(names[i]);
		}
		free(names);
	} else {
		struct kvfs_node *m;

		pthread_mutex_lock(&fs->lock);
		for (m = fs->memdirs; m && rc == 0; m = m->mem_next)
			if (m->parent == d->ino)
				rc = dh_add_name(dh, m->name, m->kind, m->raw, m->rawlen);
		pthread_mutex_unlock(&fs->lock);
		/* one that got keys meanwhile was listed by the pool already */
		for (size_t i = 0; i < dh->nnames && rc == 0; i++) {
			int used = kvfs_prefix_used(fs, dh->names[i].raw);

			if (used > 0) {
				dh->names[i].name[0] = 0;
				pthread_mutex_lock(&fs->lock);
				m = kvfs_node_by_name_locked(fs, dh->names[i].kind,
							     dh->names[i].raw, dh->names[i].rawlen);
				if (m)
					kvfs_memdir_clear_locked(fs, m);
				pthread_mutex_unlock(&fs->lock);
			}
		}
	}
	return rc;
}

static uint64_t ctl_fixed_ino(enum kvfs_kind k)
{
	return k == KN_CTL_STATS ? KVFS_INO_CTL_STATS : k == KN_CTL_NODES ? KVFS_INO_CTL_NODES :
	       k == KN_CTL_SEGMENTS ? KVFS_INO_CTL_SEGMENTS : 0;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_dh *dh = (struct kvfs_dh *)(uintptr_t)fi->fh;
	struct kvfs_node *d = dh->dir;
	struct dbuf b = { .size = size };
	uint64_t pos = off < 0 ? 0 : (uint64_t)off;
	char name[KVFS_NAME_BUF], *raw = NULL;
	bool pool = d->kind == KN_DIR || d->kind == KN_PIECE;
	int rc, err = 0;	/* rc: KVP_E* codes; err: the reply's errno */

	b.p = malloc(size);
	raw = malloc(KVP_MAX_KEY + 2);
	if (!b.p || !raw) {
		err = ENOMEM;
		goto out_free;
	}
	pthread_mutex_lock(&dh->lock);
	if (pos == 0) {		/* (re)start: a fresh listing */
		dh_free_names(dh);
		free(dh->last_piece);
		dh->last_piece = NULL;
		if (dh->have_page)
			kvp_list_free(&dh->page);
		dh->have_page = false;
	}
	if (pos < 1) {
		struct stat st;

		pthread_mutex_lock(&fs->lock);
		kvfs_fill_attr_locked(fs, d, &st);
		pthread_mutex_unlock(&fs->lock);
		if ((plus ? fuse_add_direntry_plus(req, NULL, 0, ".", NULL, 0)
			  : fuse_add_direntry(req, NULL, 0, ".", NULL, 0)) > size)
			goto out_reply;
		b.len += plus ? fuse_add_direntry_plus(req, b.p, size, ".",
					&(struct fuse_entry_param){ .ino = d->ino, .attr = st }, 1)
			      : fuse_add_direntry(req, b.p, size, ".", &st, 1);
		pos = 1;
	}
	if (pos < 2) {
		struct stat st = { .st_ino = d->parent ? d->parent : FUSE_ROOT_ID,
				   .st_mode = S_IFDIR };
		size_t need = plus ? fuse_add_direntry_plus(req, NULL, 0, "..", NULL, 0)
				   : fuse_add_direntry(req, NULL, 0, "..", NULL, 0);

		if (need > b.size - b.len)
			goto out_reply;
		b.len += plus ? fuse_add_direntry_plus(req, b.p + b.len, b.size - b.len, "..",
					&(struct fuse_entry_param){ .ino = st.st_ino, .attr = st }, 2)
			      : fuse_add_direntry(req, b.p + b.len, b.size - b.len, "..", &st, 2);
		pos = 2;
	}
	if (pool && pos < MEMDIR_OFF) {
		uint64_t j = pos - 2;

		for (;;) {
			enum kvfs_kind kind;
			size_t rawlen, i;

			rc = dh_seek(fs, dh, j);
			if (rc < 0) {
				if (!b.len)	/* else what fits is still good */
					err = kvp_to_errno(rc);
				goto out_reply;
			}
			if (rc == 1)
				break;
			i = (size_t)(j - dh->page_base);
			if (dh_show(fs, dh, i, name, &kind, raw, &rawlen) == 0 &&
			    !dh_emit(req, fs, &b, plus, name, kind, raw, rawlen, d->ino,
				     &dh->page.entries[i], (off_t)(j + 3))) {
				/* shown again by the next call */
				if (kind == KN_PIECE) {
					free(dh->last_piece);
					dh->last_piece = NULL;
				}
				goto out_reply;
			}
			j++;
		}
		pos = MEMDIR_OFF;
	}
	if (pos < MEMDIR_OFF)
		pos = MEMDIR_OFF;
	err = -dh_names(fs, dh);	/* 0 or -errno */
	if (err) {
		if (b.len)
			err = 0;
		goto out_reply;
	}
	for (uint64_t j = pos - MEMDIR_OFF; j < dh->nnames; j++) {
		struct dname *dn = &dh->names[j];
		uint64_t fixed = ctl_fixed_ino(dn->kind);

		if (!dn->name[0])
			continue;
		if (fixed) {
			struct kvfs_node *n;
			struct fuse_entry_param e;
			size_t need = plus ? fuse_add_direntry_plus(req, NULL, 0, dn->name, NULL, 0)
					   : fuse_add_direntry(req, NULL, 0, dn->name, NULL, 0);

			if (need > b.size - b.len)
				break;
			pthread_mutex_lock(&fs->lock);
			n = kvfs_node_by_ino_locked(fs, fixed);
			kvfs_fill_entry_locked(fs, n, &e);
			if (plus)
				n->nlookup++;
			pthread_mutex_unlock(&fs->lock);
			b.len += plus ? fuse_add_direntry_plus(req, b.p + b.len, b.size - b.len, dn->name,
							       &e, (off_t)(MEMDIR_OFF + j + 1))
				      : fuse_add_direntry(req, b.p + b.len, b.size - b.len, dn->name,
							  &e.attr, (off_t)(MEMDIR_OFF + j + 1));
			continue;
		}
		if (!dh_emit(req, fs, &b, plus, dn->name, dn->kind, dn->raw, dn->rawlen, d->ino,
			     NULL, (off_t)(MEMDIR_OFF + j + 1)))
			break;
	}
out_reply:
	pthread_mutex_unlock(&dh->lock);
out_free:
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, b.p, b.len);
	free(b.p);
	free(raw);
}

void kvfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		  struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

void kvfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

/* kvfs_resolve: names in a directory to the keys, prefixes and chain
 * pieces they spell, and the pool listings that prove a directory exists
 * (kvfs_resolve.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs_resolve.h"

#define PIECE_SCAN_PAGES 8	/* pages searched to prove a chain directory exists */

/* Length of the directory part of a prefix: up to and including its last
 * '/' (a KN_PIECE prefix continues a component after that). */
size_t kvfs_dir_part(const char *raw, size_t len)
{
	while (len > 0 && raw[len - 1] != '/')
		len--;
	return len;
}

/* Parses name inside directory node d: 0, ENAMETOOLONG or EINVAL (positive:
 * what the caller replies; kvfs_name's codec speaks -errno). */
int kvfs_resolve(const struct kvfs_node *d, const char *name, struct kvfs_child *c)
{
	size_t nlen = strlen(name), dl = kvfs_dir_part(d->raw, d->rawlen), off = d->rawlen - dl;
	size_t got, plen, room;
	char base[KVFS_NAME_BUF];
	bool last;
	int rc;

	if (nlen > KVFS_NAME_MAX || d->rawlen >= KVP_MAX_KEY)
		return ENAMETOOLONG;
	room = sizeof(c->raw) - 1 - d->rawlen;
	memcpy(c->raw, d->raw, d->rawlen);
	c->alias = false;
	if (kvfs_is_piece(name, nlen)) {
		rc = kvfs_piece_decode(name, c->raw + d->rawlen, room, &got);
		if (rc)
			return rc == -ENAMETOOLONG ? ENAMETOOLONG : EINVAL;
		c->kind = KN_PIECE;
		c->rawlen = d->rawlen + got;
		c->raw[c->rawlen] = 0;
		/* the chain's later names prove the cut; here only the size */
		return c->rawlen >= KVP_MAX_KEY ? ENAMETOOLONG : 0;
	}
	if (kvfs_is_alias(name, nlen)) {
		memcpy(base, name, nlen - 2);
		base[nlen - 2] = 0;
		name = base;
		c->alias = true;
	}
	rc = kvfs_unescape(name, c->raw + d->rawlen, room, &got);
	if (rc)
		return rc == -ENAMETOOLONG ? ENAMETOOLONG : EINVAL;
	/* %2F is how kvfs_escape writes a '/' it is given, but a '/' in a
	 * key is always a directory level: no name stands for one */
	if (memchr(c->raw + d->rawlen, '/', got))
		return EINVAL;
	c->rawlen = d->rawlen + got;
	/* the name must be the last piece of its component's chain, as
	 * kvfs_key_to_path writes it */
	if (kvfs_piece_at(c->raw + dl, c->rawlen - dl, off, &plen, &last) || !last ||
	    plen != got)
		return EINVAL;
	if (c->alias) {
		if (c->rawlen + 1 >= KVP_MAX_KEY)
			return ENAMETOOLONG;
		c->raw[c->rawlen++] = '/';
		c->kind = KN_DIR;
	} else {
		c->kind = KN_FILE;
		if (c->rawlen > KVP_MAX_KEY)
			return ENAMETOOLONG;
	}
	c->raw[c->rawlen] = 0;
	return 0;
}

/* 1 when at least one complete key starts with prefix, 0 when none, < 0. */
int kvfs_prefix_used(struct kvfs *fs, const char *prefix)
{
	struct kvp_list l;
	struct kvp *k;
	int rc, e = 0;

	k = kvfs_kvp(fs, &e);
	if (!k)
		return e;
	rc = kvp_list(k, prefix, 0, NULL, 1, &l);
	if (rc < 0)
		return rc;
	rc = l.n > 0;
	kvp_list_free(&l);
	return rc;
}

#define PROBE_PAGE 16

int kvfs_probe(struct kvfs *fs, const char *raw, size_t len, struct kvfs_probe *p)
{
	char dir[KVP_MAX_KEY + 2];
	bool past = false;
	struct kvp_list l;
	struct kvp *k;
	int rc, e = 0;

	memset(p, 0, sizeof(*p));
	if (len > KVP_MAX_KEY)
		return KVP_EKEY;
	memcpy(dir, raw, len);
	dir[len] = '/';
	dir[len + 1] = 0;
	if (len == 0) {		/* "" is no key, only the directory "/" */
		rc = kvfs_prefix_used(fs, dir);
		p->dir = rc > 0;
		return rc < 0 ? rc : 0;
	}
	k = kvfs_kvp(fs, &e);
	if (!k)
		return e;
	/* entries come in byte order: raw, raw + bytes below '/', raw/ */
	rc = kvp_list(k, raw, '/', NULL, PROBE_PAGE, &l);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < l.n; i++) {
		const struct kvp_list_entry *en = &l.entries[i];
		int c = strcmp(en->name, dir);

		if (!en->is_prefix && strlen(en->name) == len && !memcmp(en->name, raw, len)) {
			p->obj = true;
			p->size = en->size;
			p->put_ns = en->put_time_ns;
		} else if (c == 0) {
			p->dir = true;
		}
		if (c >= 0)
			past = true;
	}
	if (!l.next || !l.next[0])
		past = true;		/* the whole listing: nothing more */
	kvp_list_free(&l);
	if (!past) {
		rc = kvfs_prefix_used(fs, dir);
		if (rc < 0)
			return rc;
		p->dir = rc > 0;
	}
	return 0;
}

/* Whether a chain directory (raw ends inside a component, after dl) has an
 * entry whose chain really passes through it (cut exactly at rawlen). */
int kvfs_piece_used(struct kvfs *fs, const char *raw, size_t rawlen, size_t dl, size_t off)
{
	char *cursor = NULL;
	struct kvp *k;
	int e = 0, found = 0;

	k = kvfs_kvp(fs, &e);
	if (!k)
		return e;
	for (int page = 0; page < PIECE_SCAN_PAGES && !found; page++) {
		struct kvp_list l;
		int rc = kvp_list(k, raw, '/', cursor, KVFS_LIST_PAGE, &l);

		free(cursor);
		cursor = NULL;
		if (rc < 0)
			return rc;
		for (size_t i = 0; i < l.n && !found; i++) {
			const char *nm = l.entries[i].name;
			size_t len = strlen(nm), plen;
			bool last;

			if (l.entries[i].is_prefix && len > 0)
				len--;
			if (len < rawlen)
				continue;
			if (kvfs_piece_at(nm + dl, len - dl, off, &plen, &last) == 0 && !last &&
			    dl + off + plen == rawlen)
				found = 1;
		}
		if (!found && l.next && l.next[0])
			cursor = strdup(l.next);
		kvp_list_free(&l);
		if (!cursor)
			break;
	}
	free(cursor);
	return found;
}

/* The directory @parent, referenced, for a change in it (create, unlink,
 * mkdir, rmdir); NULL after replying EROFS on a read-only view, ENOENT, or,
 * for a parent that is no directory, @file_err (a file) or EACCES. */
struct kvfs_node *kvfs_dir_for_change(fuse_req_t req, struct kvfs *fs, fuse_ino_t parent,
				      int file_err)
{
	struct kvfs_node *d;
	int err;

	if (fs->ro) {
		fuse_reply_err(req, EROFS);
		return NULL;
	}
	d = kvfs_node_ref(fs, parent);
	if (!d) {
		fuse_reply_err(req, ENOENT);
		return NULL;
	}
	if (d->kind == KN_DIR || d->kind == KN_PIECE)
		return d;
	err = d->kind == KN_FILE ? file_err : EACCES;
	kvfs_node_unref(fs, d);
	fuse_reply_err(req, err);
	return NULL;
}

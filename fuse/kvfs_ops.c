/* kvfs_ops: the FUSE low-level operations of the file view and its inode
 * table. Runs on libfuse's worker threads, any number at once; fs->lock
 * guards the table and node fields (kvfs_i.h), a handle's own lock guards
 * its paging or buffer state. Pool calls are made with no fs->lock held.
 *
 * Inode numbers are a hash of (kind, key or prefix), so readdir's d_ino and
 * stat's st_ino agree and a key keeps its number while the mount lives.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <xxhash.h>

#include "kvfs_i.h"
#include "log.h"

#define LIST_PAGE 512		/* keys per kvp_list call */
#define MEMDIR_OFF (1ull << 40)	/* readdir offsets of mkdir'd directories */
#define PIECE_SCAN_PAGES 8	/* pages searched to prove a chain directory exists */

/* ---- small helpers --------------------------------------------------- */

uint64_t kvfs_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct kvp *kvfs_kvp(struct kvfs *fs, int *err)
{
	struct kvp *k;

	pthread_mutex_lock(&fs->kvp_lock);
	k = fs->kvp;
	if (!k) {
		uint64_t now = kvfs_now_ms();

		/* a master that is down is retried at most once a second, so
		 * that a busy `ls` does not hammer it */
		if (now >= fs->kvp_retry_ms) {
			int e = 0;

			/* the caller's whole configuration (every -c layer,
			 * environment and -o), never re-read from files */
			k = fs->kvp = kvp_open_conf(&fs->conf, &e);
			if (!k) {
				fs->kvp_retry_ms = now + 1000;
				*err = e ? e : KVP_ECONN;
			}
		} else {
			*err = KVP_ECONN;
		}
	}
	pthread_mutex_unlock(&fs->kvp_lock);
	return k;
}

/* ---- inode table ----------------------------------------------------- */

static size_t hash_name(enum kvfs_kind kind, const char *raw, size_t len)
{
	return (size_t)XXH3_64bits_withSeed(raw, len, (uint64_t)kind);
}

static size_t bucket(const struct kvfs *fs, uint64_t h)
{
	return (size_t)(h & (fs->nbuckets - 1));
}

static void table_insert_locked(struct kvfs *fs, struct kvfs_node *n);

/* The root (prefix "") and the fixed control nodes, never forgotten. */
static struct kvfs_node *fixed_node(struct kvfs *fs, uint64_t ino, enum kvfs_kind kind,
				    uint64_t parent, const char *name)
{
	struct kvfs_node *n = calloc(1, sizeof(*n));

	if (!n)
		return NULL;
	n->raw = strdup("");
	if (!n->raw) {
		free(n);
		return NULL;
	}
	n->ino = ino;
	n->kind = kind;
	n->parent = parent;
	n->nlookup = 1;
	snprintf(n->name, sizeof(n->name), "%s", name);
	table_insert_locked(fs, n);
	return n;
}

int kvfs_tables_init(struct kvfs *fs)
{
	fs->nbuckets = 1024;
	fs->by_ino = calloc(fs->nbuckets, sizeof(*fs->by_ino));
	fs->by_name = calloc(fs->nbuckets, sizeof(*fs->by_name));
	if (!fs->by_ino || !fs->by_name)
		return -ENOMEM;
	fs->root = fixed_node(fs, FUSE_ROOT_ID, KN_DIR, FUSE_ROOT_ID, "");
	if (!fs->root || !fixed_node(fs, KVFS_INO_CTL_DIR, KN_CTL_DIR, FUSE_ROOT_ID, ".kvpool") ||
	    !fixed_node(fs, KVFS_INO_CTL_STATS, KN_CTL_STATS, KVFS_INO_CTL_DIR, "stats") ||
	    !fixed_node(fs, KVFS_INO_CTL_NODES, KN_CTL_NODES, KVFS_INO_CTL_DIR, "nodes"))
		return -ENOMEM;
	return 0;
}

/* Values of 2 MiB and more live in their own mapping with transparent
 * huge pages: a 64 MiB value then costs 32 page faults, not 16384, and the
 * kernel pins fewer pages when it copies a reply out of it. */
#define BLOB_MAP_MIN (2u << 20)

static struct kvfs_blob *blob_new(size_t len)
{
	struct kvfs_blob *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->len = len;
	if (len >= BLOB_MAP_MIN) {
		b->maplen = (len + BLOB_MAP_MIN - 1) & ~(size_t)(BLOB_MAP_MIN - 1);
		b->data = mmap(NULL, b->maplen, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (b->data == MAP_FAILED) {
			free(b);
			return NULL;
		}
		madvise(b->data, b->maplen, MADV_HUGEPAGE);
	} else {
		b->data = malloc(len ? len : 1);
		if (!b->data) {
			free(b);
			return NULL;
		}
	}
	return b;
}

static void blob_free(struct kvfs_blob *b)
{
	if (b->maplen)
		munmap(b->data, b->maplen);
	else
		free(b->data);
	free(b);
}

/* Handles hold the references; the node only points at the latest value
 * while some handle has it, so nothing stays cached after the last close
 * (the kernel's page cache is the cache). */
static void blob_put_locked(struct kvfs_node *n, struct kvfs_blob *b)
{
	if (b && --b->refs == 0) {
		if (n && n->blob == b)
			n->blob = NULL;
		blob_free(b);
	}
}

static void node_free(struct kvfs_node *n)
{
	free(n->raw);
	free(n);
}

void kvfs_tables_free(struct kvfs *fs)
{
	for (size_t i = 0; fs->by_ino && i < fs->nbuckets; i++) {
		struct kvfs_node *n = fs->by_ino[i], *next;

		for (; n; n = next) {
			next = n->ino_next;
			node_free(n);
		}
	}
	free(fs->by_ino);
	free(fs->by_name);
	fs->by_ino = fs->by_name = NULL;
}

static struct kvfs_node *node_by_ino_locked(struct kvfs *fs, uint64_t ino)
{
	struct kvfs_node *n = fs->by_ino[bucket(fs, XXH3_64bits(&ino, sizeof(ino)))];

	while (n && n->ino != ino)
		n = n->ino_next;
	return n;
}

static struct kvfs_node *node_by_name_locked(struct kvfs *fs, enum kvfs_kind kind,
					     const char *raw, size_t len)
{
	struct kvfs_node *n = fs->by_name[bucket(fs, hash_name(kind, raw, len))];

	while (n && !(n->kind == kind && n->rawlen == len && memcmp(n->raw, raw, len) == 0))
		n = n->name_next;
	return n;
}

static void table_insert_locked(struct kvfs *fs, struct kvfs_node *n)
{
	size_t bi = bucket(fs, XXH3_64bits(&n->ino, sizeof(n->ino)));
	size_t bn = bucket(fs, hash_name(n->kind, n->raw, n->rawlen));

	n->ino_next = fs->by_ino[bi];
	fs->by_ino[bi] = n;
	n->name_next = fs->by_name[bn];
	fs->by_name[bn] = n;
	fs->nnodes++;
}

static void table_grow_locked(struct kvfs *fs)
{
	size_t nb = fs->nbuckets * 2;
	struct kvfs_node **bi = calloc(nb, sizeof(*bi)), **bn = calloc(nb, sizeof(*bn));
	struct kvfs_node **oi = fs->by_ino, **on = fs->by_name;
	size_t ob = fs->nbuckets;

	if (!bi || !bn) {	/* keep the smaller table: slower, still correct */
		free(bi);
		free(bn);
		return;
	}
	fs->by_ino = bi;
	fs->by_name = bn;
	fs->nbuckets = nb;
	fs->nnodes = 0;
	for (size_t i = 0; i < ob; i++) {
		struct kvfs_node *n = oi[i], *next;

		for (; n; n = next) {
			next = n->ino_next;
			table_insert_locked(fs, n);
		}
	}
	free(oi);
	free(on);
}

static void table_remove_locked(struct kvfs *fs, struct kvfs_node *n)
{
	struct kvfs_node **pp = &fs->by_ino[bucket(fs, XXH3_64bits(&n->ino, sizeof(n->ino)))];

	while (*pp && *pp != n)
		pp = &(*pp)->ino_next;
	if (*pp)
		*pp = n->ino_next;
	pp = &fs->by_name[bucket(fs, hash_name(n->kind, n->raw, n->rawlen))];
	while (*pp && *pp != n)
		pp = &(*pp)->name_next;
	if (*pp)
		*pp = n->name_next;
	fs->nnodes--;
}

/* Finds or creates the node of (kind, raw); NULL when out of memory. */
static struct kvfs_node *node_get_locked(struct kvfs *fs, enum kvfs_kind kind, const char *raw,
					 size_t len, uint64_t parent, const char *name)
{
	struct kvfs_node *n = node_by_name_locked(fs, kind, raw, len);
	uint64_t ino;

	if (n) {
		if (name && strcmp(n->name, name) != 0)
			snprintf(n->name, sizeof(n->name), "%s", name);
		return n;
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->raw = malloc(len + 1);
	if (!n->raw) {
		free(n);
		return NULL;
	}
	memcpy(n->raw, raw, len);
	n->raw[len] = 0;
	n->rawlen = len;
	n->kind = kind;
	n->parent = parent;
	snprintf(n->name, sizeof(n->name), "%s", name ? name : "");
	ino = XXH3_64bits_withSeed(raw, len, (uint64_t)kind);
	if (ino < KVFS_INO_MIN)
		ino += KVFS_INO_MIN;
	while (node_by_ino_locked(fs, ino))	/* hash collision: next free */
		ino = ino + 1 < KVFS_INO_MIN ? KVFS_INO_MIN : ino + 1;
	n->ino = ino;
	if (fs->nnodes >= fs->nbuckets * 2)
		table_grow_locked(fs);
	table_insert_locked(fs, n);
	return n;
}

/* Frees a node nobody refers to any more: not the kernel, no open handle,
 * not a remembered empty directory, not the root or a control file. */
static void node_maybe_free_locked(struct kvfs *fs, struct kvfs_node *n)
{
	if (n->ino < KVFS_INO_MIN || n->nlookup || n->refs || n->memdir || n->pending)
		return;
	table_remove_locked(fs, n);
	node_free(n);
}

static void memdir_set_locked(struct kvfs *fs, struct kvfs_node *n)
{
	if (n->memdir || n->ino < KVFS_INO_MIN)
		return;
	n->memdir = true;
	n->mem_next = fs->memdirs;
	fs->memdirs = n;
	n->mtime_ns = real_ns();
}

static void memdir_clear_locked(struct kvfs *fs, struct kvfs_node *n)
{
	struct kvfs_node **pp = &fs->memdirs;

	if (!n->memdir)
		return;
	while (*pp && *pp != n)
		pp = &(*pp)->mem_next;
	if (*pp)
		*pp = n->mem_next;
	n->memdir = false;
	n->mem_next = NULL;
	node_maybe_free_locked(fs, n);
}

/* A key now exists: the mkdir'd directories above it are real ones. */
static void memdirs_settle_locked(struct kvfs *fs, const char *key, size_t len)
{
	struct kvfs_node *n = fs->memdirs, *next;

	for (; n; n = next) {
		next = n->mem_next;
		if (n->rawlen <= len && memcmp(n->raw, key, n->rawlen) == 0)
			memdir_clear_locked(fs, n);
	}
}

/* ---- attributes ------------------------------------------------------ */

static bool is_dir_kind(enum kvfs_kind k)
{
	return k == KN_DIR || k == KN_PIECE || k == KN_CTL_DIR || k == KN_CTL_NODES ||
	       k == KN_CTL_NODE;
}

static void set_ts(struct timespec *ts, uint64_t ns)
{
	ts->tv_sec = (time_t)(ns / 1000000000ull);
	ts->tv_nsec = (long)(ns % 1000000000ull);
}

static void fill_attr_locked(struct kvfs *fs, const struct kvfs_node *n, struct stat *st)
{
	mode_t fmode = fs->fmode & 07777;
	uint64_t t = n->mtime_ns ? n->mtime_ns : fs->mount_ns;

	if (fs->ro)
		fmode &= ~(mode_t)0222;
	memset(st, 0, sizeof(*st));
	st->st_ino = n->ino;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	/* tools size their buffers by st_blksize: one request per read */
	st->st_blksize = fs->max_io;
	switch (n->kind) {
	case KN_DIR:
	case KN_PIECE:
		/* directories are searchable wherever files are readable */
		st->st_mode = S_IFDIR | fmode | ((fmode & 0444) >> 2);
		st->st_nlink = 2;
		break;
	case KN_CTL_DIR:
	case KN_CTL_NODES:
	case KN_CTL_NODE:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		t = fs->mount_ns;
		break;
	case KN_FILE:
		st->st_mode = S_IFREG | fmode;
		st->st_nlink = 1;
		st->st_size = (off_t)n->size;
		st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
		break;
	default:		/* control files: generated at open, size unknown */
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		t = real_ns();
		break;
	}
	set_ts(&st->st_mtim, t);
	set_ts(&st->st_ctim, t);
	set_ts(&st->st_atim, n->kind == KN_FILE && n->atime_ns ? n->atime_ns : t);
}

static void fill_entry_locked(struct kvfs *fs, const struct kvfs_node *n,
			      struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = n->ino;
	e->generation = 1;	/* inode numbers are never reused for another key */
	e->attr_timeout = fs->attr_timeout;
	e->entry_timeout = fs->entry_timeout;
	fill_attr_locked(fs, n, &e->attr);
}

/* Stores what kvp_stat said about a file node. */
static void node_from_stat_locked(struct kvfs *fs, struct kvfs_node *n, const struct kvp_stat *st)
{
	n->size = st->size;
	n->mtime_ns = st->put_time_ns;
	n->atime_ns = st->access_time_ns;
	n->fresh_until = kvfs_now_ms() + (uint64_t)(fs->attr_timeout * 1000);
}

/* ---- name resolution ------------------------------------------------- */

/* What a name in a directory stands for, before asking the pool. */
struct child {
	enum kvfs_kind kind;	/* KN_DIR (alias), KN_PIECE, or KN_FILE meaning
				 * "an object, else a directory" */
	bool alias;		/* NAME%%: the directory NAME/ */
	size_t rawlen;
	char raw[KVP_MAX_KEY + 2];
};

/* Length of the directory part of a prefix: up to and including its last
 * '/' (a KN_PIECE prefix continues a component after that). */
static size_t dir_part(const char *raw, size_t len)
{
	while (len > 0 && raw[len - 1] != '/')
		len--;
	return len;
}

/* Parses name inside directory node d. Errors: -ENAMETOOLONG, -EINVAL (not
 * the canonical spelling of any key: the caller answers ENOENT for a lookup,
 * EINVAL for a create). */
static int resolve(const struct kvfs_node *d, const char *name, struct child *c)
{
	size_t nlen = strlen(name), dl = dir_part(d->raw, d->rawlen), off = d->rawlen - dl;
	size_t got, plen, room;
	char base[KVFS_NAME_BUF];
	bool last;
	int rc;

	if (nlen > KVFS_NAME_MAX || d->rawlen >= KVP_MAX_KEY)
		return -ENAMETOOLONG;
	room = sizeof(c->raw) - 1 - d->rawlen;
	memcpy(c->raw, d->raw, d->rawlen);
	c->alias = false;
	if (kvfs_is_piece(name, nlen)) {
		rc = kvfs_piece_decode(name, c->raw + d->rawlen, room, &got);
		if (rc)
			return rc == -ENAMETOOLONG ? rc : -EINVAL;
		c->kind = KN_PIECE;
		c->rawlen = d->rawlen + got;
		c->raw[c->rawlen] = 0;
		/* the chain's later names prove the cut; here only the size */
		return c->rawlen >= KVP_MAX_KEY ? -ENAMETOOLONG : 0;
	}
	if (kvfs_is_alias(name, nlen)) {
		memcpy(base, name, nlen - 2);
		base[nlen - 2] = 0;
		name = base;
		c->alias = true;
	}
	rc = kvfs_unescape(name, c->raw + d->rawlen, room, &got);
	if (rc)
		return rc == -ENAMETOOLONG ? rc : -EINVAL;
	/* %2F is how kvfs_escape writes a '/' it is given, but a '/' in a
	 * key is always a directory level: no name stands for one */
	if (memchr(c->raw + d->rawlen, '/', got))
		return -EINVAL;
	c->rawlen = d->rawlen + got;
	/* the name must be the last piece of its component's chain, as
	 * kvfs_key_to_path writes it */
	if (kvfs_piece_at(c->raw + dl, c->rawlen - dl, off, &plen, &last) || !last ||
	    plen != got)
		return -EINVAL;
	if (c->alias) {
		if (c->rawlen + 1 >= KVP_MAX_KEY)
			return -ENAMETOOLONG;
		c->raw[c->rawlen++] = '/';
		c->kind = KN_DIR;
	} else {
		c->kind = KN_FILE;
		if (c->rawlen > KVP_MAX_KEY)
			return -ENAMETOOLONG;
	}
	c->raw[c->rawlen] = 0;
	return 0;
}

/* 1 when at least one complete key starts with prefix, 0 when none, < 0. */
static int prefix_used(struct kvfs *fs, const char *prefix)
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

/* Whether a chain directory (raw ends inside a component, after dl) has an
 * entry whose chain really passes through it (cut exactly at rawlen). */
static int piece_used(struct kvfs *fs, const char *raw, size_t rawlen, size_t dl, size_t off)
{
	char *cursor = NULL;
	struct kvp *k;
	int e = 0, found = 0;

	k = kvfs_kvp(fs, &e);
	if (!k)
		return e;
	for (int page = 0; page < PIECE_SCAN_PAGES && !found; page++) {
		struct kvp_list l;
		int rc = kvp_list(k, raw, '/', cursor, LIST_PAGE, &l);

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

/* ---- lookup, forget, getattr ---------------------------------------- */

static struct kvfs *req_fs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* Gets the node of ino with a handle reference (refs++), or NULL. */
static struct kvfs_node *node_ref(struct kvfs *fs, fuse_ino_t ino)
{
	struct kvfs_node *n;

	pthread_mutex_lock(&fs->lock);
	n = node_by_ino_locked(fs, ino);
	if (n)
		n->refs++;
	pthread_mutex_unlock(&fs->lock);
	return n;
}

static void node_unref(struct kvfs *fs, struct kvfs_node *n)
{
	pthread_mutex_lock(&fs->lock);
	n->refs--;
	node_maybe_free_locked(fs, n);
	pthread_mutex_unlock(&fs->lock);
}

/* Replies an entry for (kind, raw), creating the node; counts a lookup. */
static void reply_node(fuse_req_t req, struct kvfs *fs, enum kvfs_kind kind, const char *raw,
		       size_t rawlen, uint64_t parent, const char *name,
		       const struct kvp_stat *st)
{
	struct fuse_entry_param e;
	struct kvfs_node *n;

	pthread_mutex_lock(&fs->lock);
	n = node_get_locked(fs, kind, raw, rawlen, parent, name);
	if (!n) {
		pthread_mutex_unlock(&fs->lock);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (st)
		node_from_stat_locked(fs, n, st);
	else if (kind == KN_DIR || kind == KN_PIECE)
		n->fresh_until = kvfs_now_ms() + (uint64_t)(fs->entry_timeout * 1000);
	n->nlookup++;
	fill_entry_locked(fs, n, &e);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_entry(req, &e);
}

static void reply_fixed(fuse_req_t req, struct kvfs *fs, struct kvfs_node *n)
{
	struct fuse_entry_param e;

	pthread_mutex_lock(&fs->lock);
	n->nlookup++;
	fill_entry_locked(fs, n, &e);
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
			n = node_by_ino_locked(fs, KVFS_INO_CTL_STATS);
		else if (!strcmp(name, "nodes"))
			n = node_by_ino_locked(fs, KVFS_INO_CTL_NODES);
		pthread_mutex_unlock(&fs->lock);
		if (!n)
			break;
		reply_fixed(req, fs, n);
		return;
	case KN_CTL_NODES:
		if (kvfs_unescape(name, node, sizeof(node), &nl) != 0 || !kvfs_ctl_node_exists(fs, node))
			break;
		reply_node(req, fs, KN_CTL_NODE, node, nl, d->ino, name, NULL);
		return;
	case KN_CTL_NODE:
		if (!strcmp(name, "info"))
			reply_node(req, fs, KN_CTL_INFO, d->raw, d->rawlen, d->ino, name, NULL);
		else if (!strcmp(name, "extents"))
			reply_node(req, fs, KN_CTL_EXTENTS, d->raw, d->rawlen, d->ino, name, NULL);
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
static void reply_dir_if_used(fuse_req_t req, struct kvfs *fs, const struct child *c,
			      uint64_t parent, const char *name)
{
	int rc = prefix_used(fs, c->raw);

	if (rc < 0)
		fuse_reply_err(req, kvp_to_errno(rc));
	else if (rc == 0)
		fuse_reply_err(req, ENOENT);
	else
		reply_node(req, fs, KN_DIR, c->raw, c->rawlen, parent, name, NULL);
}

static void kvfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_node *d, *n;
	struct kvp_stat st;
	struct child c;
	struct kvp *k;
	int rc, e = 0;

	d = node_ref(fs, parent);
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
		n = node_by_ino_locked(fs, KVFS_INO_CTL_DIR);
		pthread_mutex_unlock(&fs->lock);
		reply_fixed(req, fs, n);
		goto out;
	}
	rc = resolve(d, name, &c);
	if (rc) {
		fuse_reply_err(req, rc == -ENAMETOOLONG ? ENAMETOOLONG : ENOENT);
		goto out;
	}

	/* what the table already knows, while it is fresh */
	pthread_mutex_lock(&fs->lock);
	{
		uint64_t now = kvfs_now_ms();
		struct kvfs_node *f = NULL, *dd;
		bool hit = false;

		if (c.kind == KN_FILE) {
			f = node_by_name_locked(fs, KN_FILE, c.raw, c.rawlen);
			if (f && (f->pending || f->fresh_until > now)) {
				hit = true;
				n = f;
			} else {
				c.raw[c.rawlen] = '/';
				dd = node_by_name_locked(fs, KN_DIR, c.raw, c.rawlen + 1);
				c.raw[c.rawlen] = 0;
				if (dd && !dd->alias && (dd->memdir || dd->fresh_until > now)) {
					hit = true;
					n = dd;
				}
			}
		} else {
			n = node_by_name_locked(fs, c.kind, c.raw, c.rawlen);
			hit = n && (n->memdir || n->fresh_until > now);
		}
		if (hit) {
			struct fuse_entry_param ep;

			n->nlookup++;
			fill_entry_locked(fs, n, &ep);
			pthread_mutex_unlock(&fs->lock);
			fuse_reply_entry(req, &ep);
			goto out;
		}
	}
	pthread_mutex_unlock(&fs->lock);

	if (c.kind == KN_PIECE) {
		size_t dl = dir_part(d->raw, d->rawlen);

		rc = piece_used(fs, c.raw, c.rawlen, dl, d->rawlen - dl);
		if (rc < 0) {
			fuse_reply_err(req, kvp_to_errno(rc));
		} else if (rc == 0) {
			fuse_reply_err(req, ENOENT);
		} else {
			reply_node(req, fs, KN_PIECE, c.raw, c.rawlen, d->ino, name, NULL);
		}
		goto out;
	}
	if (c.kind == KN_DIR) {		/* NAME%%: the directory, never the object */
		reply_dir_if_used(req, fs, &c, d->ino, name);
		goto out;
	}
	k = kvfs_kvp(fs, &e);
	if (!k) {
		fuse_reply_err(req, kvp_to_errno(e));
		goto out;
	}
	/* "" (the name %00 at the root) is no key, only a directory */
	rc = c.rawlen ? kvp_stat(k, c.raw, &st) : KVP_ENOTFOUND;
	if (rc == 0) {
		reply_node(req, fs, KN_FILE, c.raw, c.rawlen, d->ino, name, &st);
		goto out;
	}
	if (rc != KVP_ENOTFOUND) {
		fuse_reply_err(req, kvp_to_errno(rc));
		goto out;
	}
	/* no object NAME: a directory NAME/ if keys are under it */
	c.raw[c.rawlen++] = '/';
	c.raw[c.rawlen] = 0;
	reply_dir_if_used(req, fs, &c, d->ino, name);
out:
	node_unref(fs, d);
}

static void forget_one_locked(struct kvfs *fs, fuse_ino_t ino, uint64_t nlookup)
{
	struct kvfs_node *n = node_by_ino_locked(fs, ino);

	if (!n)
		return;
	n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
	node_maybe_free_locked(fs, n);
}

static void kvfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct kvfs *fs = req_fs(req);

	pthread_mutex_lock(&fs->lock);
	forget_one_locked(fs, ino, nlookup);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_none(req);
}

static void kvfs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct kvfs *fs = req_fs(req);

	pthread_mutex_lock(&fs->lock);
	for (size_t i = 0; i < count; i++)
		forget_one_locked(fs, forgets[i].ino, forgets[i].nlookup);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_none(req);
}

static void kvfs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_node *n = node_ref(fs, ino);
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
	need_stat = n->kind == KN_FILE && !n->pending && n->fresh_until <= kvfs_now_ms();
	pthread_mutex_unlock(&fs->lock);
	if (need_stat) {
		k = kvfs_kvp(fs, &e);
		rc = k ? kvp_stat(k, n->raw, &ks) : e;
		if (rc < 0) {
			fuse_reply_err(req, kvp_to_errno(rc));
			goto out;
		}
		pthread_mutex_lock(&fs->lock);
		node_from_stat_locked(fs, n, &ks);
		pthread_mutex_unlock(&fs->lock);
	}
	pthread_mutex_lock(&fs->lock);
	fill_attr_locked(fs, n, &st);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_attr(req, &st, fs->attr_timeout);
out:
	node_unref(fs, n);
}

/* ---- directories ------------------------------------------------------ */

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

static void kvfs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_node *n = node_ref(fs, ino);
	struct kvfs_dh *dh;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!is_dir_kind(n->kind)) {
		node_unref(fs, n);
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	dh = calloc(1, sizeof(*dh));
	if (!dh) {
		node_unref(fs, n);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_init(&dh->lock, NULL);
	dh->dir = n;
	dh->dl = dir_part(n->raw, n->rawlen);
	fi->fh = (uintptr_t)dh;
	fuse_reply_open(req, fi);
}

static void kvfs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_dh *dh = (struct kvfs_dh *)(uintptr_t)fi->fh;

	if (dh->have_page)
		kvp_list_free(&dh->page);
	for (size_t i = 0; i < dh->nmarks; i++)
		free(dh->marks[i].cursor);
	free(dh->marks);
	free(dh->last_piece);
	dh_free_names(dh);
	pthread_mutex_destroy(&dh->lock);
	node_unref(fs, dh->dir);
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
	rc = kvp_list(k, dh->dir->raw, '/', cursor, LIST_PAGE, &l);
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
	n = node_get_locked(fs, kind, raw, rawlen, parent, name);
	if (!n) {
		pthread_mutex_unlock(&fs->lock);
		return false;
	}
	if (le && kind == KN_FILE && !n->pending) {
		n->size = le->size;
		n->mtime_ns = le->put_time_ns;
		n->fresh_until = kvfs_now_ms() + (uint64_t)(fs->attr_timeout * 1000);
	} else if (kind == KN_DIR || kind == KN_PIECE) {
		n->alias = kind == KN_DIR && kvfs_is_alias(name, strlen(name));
		n->fresh_until = kvfs_now_ms() + (uint64_t)(fs->entry_timeout * 1000);
	}
	fill_entry_locked(fs, n, &e);
	if (plus) {
		n->nlookup++;
		pthread_mutex_unlock(&fs->lock);
		b->len += fuse_add_direntry_plus(req, b->p + b->len, b->size - b->len, name, &e, next);
	} else {
		/* a plain readdir takes no reference: the node may go now */
		node_maybe_free_locked(fs, n);
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
		if ((rc = dh_add_name(dh, "stats", KN_CTL_STATS, "", 0)) == 0)
			rc = dh_add_name(dh, "nodes", KN_CTL_NODES, "", 0);
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
			int used = prefix_used(fs, dh->names[i].raw);

			if (used > 0) {
				dh->names[i].name[0] = 0;
				pthread_mutex_lock(&fs->lock);
				m = node_by_name_locked(fs, dh->names[i].kind, dh->names[i].raw,
							dh->names[i].rawlen);
				if (m)
					memdir_clear_locked(fs, m);
				pthread_mutex_unlock(&fs->lock);
			}
		}
	}
	return rc;
}

static uint64_t ctl_fixed_ino(enum kvfs_kind k)
{
	return k == KN_CTL_STATS ? KVFS_INO_CTL_STATS : k == KN_CTL_NODES ? KVFS_INO_CTL_NODES : 0;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_dh *dh = (struct kvfs_dh *)(uintptr_t)fi->fh;
	struct kvfs_node *d = dh->dir;
	struct dbuf b = { .size = size };
	uint64_t pos = off < 0 ? 0 : (uint64_t)off;
	char name[KVFS_NAME_BUF], *raw = NULL;
	bool pool = d->kind == KN_DIR || d->kind == KN_PIECE;
	int rc = 0;

	b.p = malloc(size);
	raw = malloc(KVP_MAX_KEY + 2);
	if (!b.p || !raw) {
		rc = ENOMEM;
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
		fill_attr_locked(fs, d, &st);
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
				rc = kvp_to_errno(rc);
				if (b.len)	/* what fits is still good */
					rc = 0;
				goto out_reply;
			}
			if (rc == 1) {
				rc = 0;
				break;
			}
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
	rc = dh_names(fs, dh);
	if (rc < 0) {
		rc = -rc;
		if (b.len)
			rc = 0;
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
			n = node_by_ino_locked(fs, fixed);
			fill_entry_locked(fs, n, &e);
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
	if (rc)
		fuse_reply_err(req, rc);
	else
		fuse_reply_buf(req, b.p, b.len);
	free(b.p);
	free(raw);
}

static void kvfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			 struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void kvfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			     struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

/* ---- files: read ------------------------------------------------------ */

#define WRITERS_MAX 8

/* A file being written: the value is buffered until a process that wrote
 * to it closes it. */
struct kvfs_wbuf {
	char *buf;
	size_t len, cap;
	bool done;			/* put (or failed): no more writes */
	int err;			/* a refused write: nothing is stored */
	uint64_t writers[WRITERS_MAX];	/* lock owners (fd tables) that wrote */
	unsigned nwriters;		/* may exceed WRITERS_MAX */
};

static bool wbuf_writer(const struct kvfs_wbuf *w, uint64_t owner)
{
	if (w->nwriters > WRITERS_MAX)
		return true;		/* too many to tell: any close stores */
	for (unsigned i = 0; i < w->nwriters; i++)
		if (w->writers[i] == owner)
			return true;
	return false;
}

enum fh_kind { FH_READ, FH_WRITE, FH_TEXT };

struct kvfs_fh {
	enum fh_kind kind;
	struct kvfs_node *node;		/* holds a ref */
	/* Replies in flight that point into this handle's memory: the
	 * kernel may send RELEASE as soon as an async read's reply is
	 * copied, before fuse_reply_data has returned here. Under fs->lock. */
	unsigned users;
	bool released;
	pthread_mutex_t lock;		/* blob fetch / write buffer */
	uint64_t size, generation, checksum;	/* READ: what open saw */
	const uint8_t *lhdr, *lval;	/* READ: replica in a local segment */
	struct kvfs_blob *blob;		/* READ: filled by the first read */
	char *text;			/* TEXT */
	size_t textlen;
	struct kvfs_wbuf w;		/* WRITE */
};

static struct kvfs_fh *fh_new(enum fh_kind kind, struct kvfs_node *n)
{
	struct kvfs_fh *fh = calloc(1, sizeof(*fh));

	if (!fh)
		return NULL;
	fh->kind = kind;
	fh->node = n;
	pthread_mutex_init(&fh->lock, NULL);
	return fh;
}

static int open_text(struct kvfs *fs, struct kvfs_node *n, struct kvfs_fh *fh)
{
	switch (n->kind) {
	case KN_CTL_STATS: return kvfs_ctl_stats(fs, &fh->text, &fh->textlen);
	case KN_CTL_INFO: return kvfs_ctl_node_info(fs, n->raw, &fh->text, &fh->textlen);
	case KN_CTL_EXTENTS: return kvfs_ctl_node_extents(fs, n->raw, &fh->text, &fh->textlen);
	default: return -EISDIR;
	}
}

static void kvfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_node *n = node_ref(fs, ino);
	struct kvfs_fh *fh = NULL;
	struct kvp_stat st;
	bool changed = false;
	struct kvp *k;
	int rc, e = 0;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (is_dir_kind(n->kind)) {
		rc = EISDIR;
		goto out_err;
	}
	if (n->kind != KN_FILE) {
		if ((fi->flags & O_ACCMODE) != O_RDONLY) {
			rc = EACCES;
			goto out_err;
		}
		fh = fh_new(FH_TEXT, n);
		if (!fh) {
			rc = ENOMEM;
			goto out_err;
		}
		rc = open_text(fs, n, fh);
		if (rc < 0) {
			rc = -rc;
			goto out_err;
		}
		/* generated now, size unknown to stat: bypass the page cache */
		fi->direct_io = 1;
		fi->fh = (uintptr_t)fh;
		fuse_reply_open(req, fi);
		return;
	}
	pthread_mutex_lock(&fs->lock);
	rc = n->pending ? EBUSY : 0;	/* being written by another handle */
	pthread_mutex_unlock(&fs->lock);
	if (rc)
		goto out_err;
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		/* values are immutable: an existing key cannot be written */
		rc = fs->ro ? EROFS : EEXIST;
		goto out_err;
	}
	k = kvfs_kvp(fs, &e);
	rc = k ? kvp_stat(k, n->raw, &st) : e;
	if (rc < 0) {
		rc = kvp_to_errno(rc);
		goto out_err;
	}
	fh = fh_new(FH_READ, n);
	if (!fh) {
		rc = ENOMEM;
		goto out_err;
	}
	fh->size = st.size;
	fh->generation = st.generation;
	fh->checksum = st.checksum;
	if (kvfs_local_find(fs, n->raw, n->rawlen, &st, &fh->lhdr) == 0)
		fh->lval = kvfs_local_value(fh->lhdr);
	pthread_mutex_lock(&fs->lock);
	node_from_stat_locked(fs, n, &st);
	/* the same generation as the pages the kernel may hold: keep them */
	if (n->generation == st.generation) {
		fi->keep_cache = 1;
	} else {
		changed = n->generation != 0;
		n->generation = st.generation;
	}
	pthread_mutex_unlock(&fs->lock);
	if (changed) {
		/* removed and put again under the same name: this open reads
		 * past the kernel's stale size, and the stale attributes go */
		fi->direct_io = 1;
		fuse_lowlevel_notify_inval_inode(fs->se, n->ino, 0, 0);
	}
	if (fh->lhdr) {
		/* The value is in memory on this host already: a page cache
		 * copy would double its memory and add a copy to every cold
		 * read. Direct I/O replies land in the reader's buffer. */
		fi->direct_io = 1;
		fi->keep_cache = 0;
	}
	fi->fh = (uintptr_t)fh;
	fuse_reply_open(req, fi);
	return;
out_err:
	if (fh) {
		free(fh->text);
		pthread_mutex_destroy(&fh->lock);
		free(fh);
	}
	node_unref(fs, n);
	fuse_reply_err(req, rc);
}

/* The value of the generation fh opened, fetched once and shared. */
static int fh_blob(struct kvfs *fs, struct kvfs_fh *fh)
{
	struct kvfs_node *n = fh->node;
	struct kvfs_blob *b;
	struct kvp *k;
	int64_t got;
	int e = 0;

	if (fh->blob)
		return 0;
	pthread_mutex_lock(&fs->lock);
	b = n->blob;
	if (b && b->generation == fh->generation) {
		b->refs++;
		fh->blob = b;
	}
	pthread_mutex_unlock(&fs->lock);
	if (fh->blob)
		return 0;
	k = kvfs_kvp(fs, &e);
	if (!k)
		return kvp_to_errno(e);
	b = blob_new(fh->size);
	if (!b)
		return ENOMEM;
	/* kvp_get_into checks the bytes against the replica's header; the
	 * generation must still be the one open saw, or the object was
	 * removed (and maybe put again) in between: never show a mix.
	 * Generations only grow, so equal before and after means the get
	 * read that generation. */
	got = kvp_get_into(k, n->raw, b->data, fh->size);
	if (got >= 0) {
		struct kvp_stat st;
		int rc = kvp_stat(k, n->raw, &st);

		if (rc < 0)
			got = rc;
		else if ((uint64_t)got != fh->size || st.generation != fh->generation ||
			 st.size != fh->size)
			got = KVP_ESTALE;
	}
	if (got < 0) {
		blob_free(b);
		if (got == KVP_ETOOBIG || got == KVP_ESTALE)
			return EIO;
		return kvp_to_errno((int)got);
	}
	b->generation = fh->generation;
	b->refs = 1;
	pthread_mutex_lock(&fs->lock);
	if (!n->blob || n->blob->generation < b->generation)
		n->blob = b;
	fh->blob = b;
	pthread_mutex_unlock(&fs->lock);
	return 0;
}

static void reply_slice(fuse_req_t req, const char *data, size_t len, size_t size, off_t off)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);

	if (off < 0 || (uint64_t)off >= len) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	bv.buf[0].mem = (char *)data + off;
	bv.buf[0].size = len - (size_t)off < size ? len - (size_t)off : size;
	fuse_reply_data(req, &bv, FUSE_BUF_NO_SPLICE);
}

static void fh_free(struct kvfs *fs, struct kvfs_fh *fh)
{
	pthread_mutex_lock(&fs->lock);
	blob_put_locked(fh->node, fh->blob);
	pthread_mutex_unlock(&fs->lock);
	free(fh->text);
	free(fh->w.buf);
	pthread_mutex_destroy(&fh->lock);
	node_unref(fs, fh->node);
	free(fh);
}

static void fh_use(struct kvfs *fs, struct kvfs_fh *fh)
{
	pthread_mutex_lock(&fs->lock);
	fh->users++;
	pthread_mutex_unlock(&fs->lock);
}

static void fh_unuse(struct kvfs *fs, struct kvfs_fh *fh)
{
	bool last;

	pthread_mutex_lock(&fs->lock);
	last = --fh->users == 0 && fh->released;
	pthread_mutex_unlock(&fs->lock);
	if (last)
		fh_free(fs, fh);
}

static void do_read(fuse_req_t req, struct kvfs *fs, struct kvfs_fh *fh, size_t size, off_t off)
{
	const uint8_t *lhdr;
	int rc;

	switch (fh->kind) {
	case FH_TEXT:
		reply_slice(req, fh->text, fh->textlen, size, off);
		return;
	case FH_WRITE:
		/* O_RDWR: what was written so far */
		pthread_mutex_lock(&fh->lock);
		reply_slice(req, fh->w.buf, fh->w.len, size, off);
		pthread_mutex_unlock(&fh->lock);
		return;
	case FH_READ:
		pthread_mutex_lock(&fh->lock);
		lhdr = fh->lhdr;
		pthread_mutex_unlock(&fh->lock);
		if (lhdr) {
			size_t len;
			void *buf;

			if (off < 0 || (uint64_t)off >= fh->size) {
				fuse_reply_buf(req, NULL, 0);
				return;
			}
			len = fh->size - (uint64_t)off < size ? (size_t)(fh->size - (uint64_t)off) : size;
			buf = kvfs_local_bounce(len);
			if (buf && kvfs_local_copy(lhdr, fh->lval, fh->generation, buf, (uint64_t)off,
						   len) == 0) {
				fuse_reply_buf(req, buf, len);
				return;
			}
			/* evicted, demoted or removed since open: the pool
			 * knows where that generation is, if anywhere */
			pthread_mutex_lock(&fh->lock);
			fh->lhdr = NULL;
			pthread_mutex_unlock(&fh->lock);
		}
		pthread_mutex_lock(&fh->lock);
		rc = fh_blob(fs, fh);
		pthread_mutex_unlock(&fh->lock);
		if (rc) {
			fuse_reply_err(req, rc);
			return;
		}
		/* the blob is immutable and the handle holds a reference */
		reply_slice(req, fh->blob->data, fh->blob->len, size, off);
		return;
	}
}

static void kvfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_fh *fh = (struct kvfs_fh *)(uintptr_t)fi->fh;

	fh_use(fs, fh);
	do_read(req, fs, fh, size, off);
	fh_unuse(fs, fh);
}

/* ---- files: create, write, flush, release ------------------------------ */

/* The directory @parent, referenced, for a change in it (create, unlink,
 * mkdir, rmdir); NULL after replying EROFS on a read-only view, ENOENT, or,
 * for a parent that is no directory, @file_err (a file) or EACCES. */
static struct kvfs_node *dir_for_change(fuse_req_t req, struct kvfs *fs, fuse_ino_t parent,
					int file_err)
{
	struct kvfs_node *d;
	int err;

	if (fs->ro) {
		fuse_reply_err(req, EROFS);
		return NULL;
	}
	d = node_ref(fs, parent);
	if (!d) {
		fuse_reply_err(req, ENOENT);
		return NULL;
	}
	if (d->kind == KN_DIR || d->kind == KN_PIECE)
		return d;
	err = d->kind == KN_FILE ? file_err : EACCES;
	node_unref(fs, d);
	fuse_reply_err(req, err);
	return NULL;
}

static void kvfs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
			struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct fuse_entry_param e;
	struct kvfs_node *d, *n;
	struct kvfs_fh *fh;
	struct child c;
	struct kvp *k;
	int rc, err = 0;

	d = dir_for_change(req, fs, parent, ENOTDIR);
	if (!d)
		return;
	if (d->ino == FUSE_ROOT_ID && !strcmp(name, ".kvpool")) {
		err = EEXIST;
		goto out;
	}
	rc = resolve(d, name, &c);
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
	n = node_get_locked(fs, KN_FILE, c.raw, c.rawlen, d->ino, name);
	if (!n || n->pending) {
		pthread_mutex_unlock(&fs->lock);
		err = n ? EEXIST : ENOMEM;
		goto out;
	}
	fh = fh_new(FH_WRITE, n);
	if (!fh) {
		node_maybe_free_locked(fs, n);
		pthread_mutex_unlock(&fs->lock);
		err = ENOMEM;
		goto out;
	}
	n->pending = &fh->w;
	n->refs++;
	n->nlookup++;
	n->size = 0;
	n->mtime_ns = n->atime_ns = real_ns();
	n->generation = 0;
	fill_entry_locked(fs, n, &e);
	pthread_mutex_unlock(&fs->lock);
	/* writes go straight to the buffer: one request per write(2) up to
	 * max_write, and no pages cached for a value that is not stored yet */
	fi->direct_io = 1;
	fi->fh = (uintptr_t)fh;
	fuse_reply_create(req, &e, fi);
	node_unref(fs, d);
	return;
out:
	node_unref(fs, d);
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

static void kvfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
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
			if (w->nwriters < WRITERS_MAX)
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
		memdirs_settle_locked(fs, n->raw, n->rawlen);
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

static void kvfs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
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

static void kvfs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
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
		fh_free(fs, fh);
	fuse_reply_err(req, 0);
}

/* ---- namespace changes ---------------------------------------------- */

/* After the last key of directory d went away: keep d as an empty
 * directory so that `rm -r` can still rmdir it. */
static void keep_emptied_dir(struct kvfs *fs, struct kvfs_node *d)
{
	if (d->ino == FUSE_ROOT_ID || (d->kind != KN_DIR && d->kind != KN_PIECE))
		return;
	if (prefix_used(fs, d->raw) != 0)
		return;
	pthread_mutex_lock(&fs->lock);
	memdir_set_locked(fs, d);
	pthread_mutex_unlock(&fs->lock);
}

static void kvfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_node *d, *n;
	struct child c;
	struct kvp *k;
	int rc, err = 0;

	d = dir_for_change(req, fs, parent, EACCES);
	if (!d)
		return;
	rc = resolve(d, name, &c);
	if (rc || c.kind != KN_FILE) {
		err = rc == -ENAMETOOLONG ? ENAMETOOLONG : rc ? ENOENT : EISDIR;
		goto out;
	}
	pthread_mutex_lock(&fs->lock);
	n = node_by_name_locked(fs, KN_FILE, c.raw, c.rawlen);
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
	n = node_by_name_locked(fs, KN_FILE, c.raw, c.rawlen);
	if (n) {
		n->fresh_until = 0;
		n->blob = NULL;	/* open handles keep theirs */
	}
	pthread_mutex_unlock(&fs->lock);
	keep_emptied_dir(fs, d);
out:
	node_unref(fs, d);
	fuse_reply_err(req, err);
}

static void kvfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct kvfs *fs = req_fs(req);
	struct fuse_entry_param e;
	struct kvfs_node *d, *n;
	struct child c;
	struct kvp *k;
	int rc, err = 0;

	d = dir_for_change(req, fs, parent, EACCES);
	if (!d)
		return;
	if (d->ino == FUSE_ROOT_ID && !strcmp(name, ".kvpool")) {
		err = EEXIST;
		goto out;
	}
	rc = resolve(d, name, &c);
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
	rc = c.kind == KN_DIR ? prefix_used(fs, c.raw)
			      : piece_used(fs, c.raw, c.rawlen, dir_part(d->raw, d->rawlen),
					   d->rawlen - dir_part(d->raw, d->rawlen));
	if (rc != 0) {
		err = rc > 0 ? EEXIST : kvp_to_errno(rc);
		goto out;
	}
	pthread_mutex_lock(&fs->lock);
	n = node_get_locked(fs, c.kind, c.raw, c.rawlen, d->ino, name);
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
	memdir_set_locked(fs, n);
	n->alias = c.alias;
	n->nlookup++;
	fill_entry_locked(fs, n, &e);
	pthread_mutex_unlock(&fs->lock);
	node_unref(fs, d);
	fuse_reply_entry(req, &e);
	return;
out:
	node_unref(fs, d);
	fuse_reply_err(req, err);
}

static void kvfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_node *d, *n, *m;
	struct child c;
	int rc, err = 0;

	d = dir_for_change(req, fs, parent, ENOTDIR);
	if (!d)
		return;
	rc = resolve(d, name, &c);
	if (rc) {
		err = rc == -ENAMETOOLONG ? ENAMETOOLONG : ENOENT;
		goto out;
	}
	if (c.kind == KN_FILE) {
		c.raw[c.rawlen++] = '/';
		c.raw[c.rawlen] = 0;
		c.kind = KN_DIR;
	}
	rc = prefix_used(fs, c.raw);
	if (rc != 0) {
		err = rc > 0 ? ENOTEMPTY : kvp_to_errno(rc);
		goto out;
	}
	pthread_mutex_lock(&fs->lock);
	n = node_by_name_locked(fs, c.kind, c.raw, c.rawlen);
	if (!n) {
		err = ENOENT;
	} else {
		for (m = fs->memdirs; m; m = m->mem_next)
			if (m->parent == n->ino)
				err = ENOTEMPTY;
		for (size_t i = 0; i < fs->nbuckets && !err; i++)
			for (m = fs->by_ino[i]; m; m = m->ino_next)
				if (m->pending && m->parent == n->ino)
					err = ENOTEMPTY;
		if (!err) {
			/* the directory is gone once it holds nothing: a
			 * remembered empty one is forgotten here */
			n->fresh_until = 0;
			memdir_clear_locked(fs, n);
		}
	}
	pthread_mutex_unlock(&fs->lock);
	if (!err)
		keep_emptied_dir(fs, d);
out:
	node_unref(fs, d);
	fuse_reply_err(req, err);
}

static void kvfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
			fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	struct kvfs *fs = req_fs(req);

	/* a key names an immutable value: copy and remove instead */
	fuse_reply_err(req, fs->ro ? EROFS : EPERM);
}

static void kvfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct kvfs *fs = req_fs(req);

	fuse_reply_err(req, fs->ro ? EROFS : EPERM);
}

static void kvfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	struct kvfs *fs = req_fs(req);

	fuse_reply_err(req, fs->ro ? EROFS : EPERM);
}

static void kvfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		       dev_t rdev)
{
	struct kvfs *fs = req_fs(req);

	fuse_reply_err(req, fs->ro ? EROFS : EPERM);
}

static void kvfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
			 struct fuse_file_info *fi)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_node *n = node_ref(fs, ino);
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
		node_unref(fs, n);
		fuse_reply_err(req, err);
		return;
	}
	pthread_mutex_lock(&fs->lock);
	fill_attr_locked(fs, n, &st);
	pthread_mutex_unlock(&fs->lock);
	node_unref(fs, n);
	fuse_reply_attr(req, &st, fs->attr_timeout);
}

/* ---- statfs, xattrs ------------------------------------------------------ */

static void kvfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct kvfs *fs = req_fs(req);
	struct statvfs sv;
	uint64_t now = kvfs_now_ms(), keys, used, cap, freeb;
	bool fetch;

	pthread_mutex_lock(&fs->lock);
	fetch = now >= fs->info_until;
	pthread_mutex_unlock(&fs->lock);
	if (fetch) {
		struct kvp_info info;
		struct kvp *k;
		int e = 0, rc;

		k = kvfs_kvp(fs, &e);
		rc = k ? kvp_info(k, &info) : e;
		if (rc < 0) {
			fuse_reply_err(req, kvp_to_errno(rc));
			return;
		}
		pthread_mutex_lock(&fs->lock);
		fs->info_keys = info.keys;
		fs->info_used = info.bytes_used;
		fs->info_capacity = info.capacity;
		fs->info_until = now + 1000;
		pthread_mutex_unlock(&fs->lock);
		kvp_info_free(&info);
	}
	pthread_mutex_lock(&fs->lock);
	keys = fs->info_keys;
	used = fs->info_used;
	cap = fs->info_capacity;
	pthread_mutex_unlock(&fs->lock);
	freeb = cap > used ? cap - used : 0;
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = cap / 4096;
	sv.f_bfree = freeb / 4096;
	sv.f_bavail = fs->ro ? 0 : freeb / 4096;
	/* one object per free block is the most that could still be put */
	sv.f_files = keys + freeb / 4096;
	sv.f_ffree = freeb / 4096;
	sv.f_favail = fs->ro ? 0 : sv.f_ffree;
	sv.f_namemax = KVFS_NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

static const char *const xattr_names[] = {
	"user.kvpool.size", "user.kvpool.replicas", "user.kvpool.checksum",
	"user.kvpool.generation", "user.kvpool.lease_ms", "user.kvpool.pin_ms",
	"user.kvpool.put_time",
};
#define NXATTRS (sizeof(xattr_names) / sizeof(xattr_names[0]))

/* 2024-05-01T12:00:00.123456789Z */
static void fmt_time(uint64_t ns, char *buf, size_t len)
{
	time_t s = (time_t)(ns / 1000000000ull);
	struct tm tm;
	size_t l;

	if (!gmtime_r(&s, &tm) || !(l = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm))) {
		snprintf(buf, len, "-");
		return;
	}
	snprintf(buf + l, len - l, ".%09uZ", (unsigned)(ns % 1000000000ull));
}

static int xattr_value(const struct kvp_stat *st, const char *name, char *out, size_t cap)
{
	size_t o = 0;

	if (!strcmp(name, "user.kvpool.size"))
		snprintf(out, cap, "%" PRIu64, st->size);
	else if (!strcmp(name, "user.kvpool.checksum"))
		snprintf(out, cap, "%016" PRIx64, st->checksum);
	else if (!strcmp(name, "user.kvpool.generation"))
		snprintf(out, cap, "%" PRIu64, st->generation);
	else if (!strcmp(name, "user.kvpool.lease_ms"))
		snprintf(out, cap, "%" PRId64, st->lease_ms);
	else if (!strcmp(name, "user.kvpool.pin_ms"))
		snprintf(out, cap, "%" PRId64, st->pin_ms);
	else if (!strcmp(name, "user.kvpool.put_time"))
		fmt_time(st->put_time_ns, out, cap);
	else if (!strcmp(name, "user.kvpool.replicas")) {
		out[0] = 0;
		for (uint32_t i = 0; i < st->nreplicas && i < KVP_MAX_REPLICAS && o < cap; i++)
			o += (size_t)snprintf(out + o, cap - o, "%s%.*s:%s", i ? "," : "",
					      (int)sizeof(st->replicas[i].node),
					      st->replicas[i].node,
					      st->replicas[i].tier == KVP_TIER_DISK ? "disk" : "mem");
	} else
		return -ENODATA;
	return 0;
}

/* The xattr reply to a request for @size bytes: the length when size is 0,
 * ERANGE when the value does not fit, else the bytes. */
static void reply_xattr(fuse_req_t req, const char *val, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, len);
}

static void kvfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_node *n = node_ref(fs, ino);
	struct kvp_stat st;
	char val[KVP_MAX_REPLICAS * 80 + 64];
	struct kvp *k;
	int rc, e = 0;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	pthread_mutex_lock(&fs->lock);
	rc = n->kind != KN_FILE || n->pending || strncmp(name, "user.kvpool.", 12) != 0;
	pthread_mutex_unlock(&fs->lock);
	if (rc) {
		rc = ENODATA;
		goto out_err;
	}
	k = kvfs_kvp(fs, &e);
	rc = k ? kvp_stat(k, n->raw, &st) : e;
	if (rc < 0) {
		rc = kvp_to_errno(rc);
		goto out_err;
	}
	if (xattr_value(&st, name, val, sizeof(val)) < 0) {
		rc = ENODATA;
		goto out_err;
	}
	node_unref(fs, n);
	reply_xattr(req, val, strlen(val), size);
	return;
out_err:
	node_unref(fs, n);
	fuse_reply_err(req, rc);
}

static void kvfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct kvfs *fs = req_fs(req);
	struct kvfs_node *n = node_ref(fs, ino);
	char buf[512];
	size_t len = 0;
	bool listed;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	pthread_mutex_lock(&fs->lock);
	listed = n->kind == KN_FILE && !n->pending;
	pthread_mutex_unlock(&fs->lock);
	if (listed) {
		for (size_t i = 0; i < NXATTRS; i++) {
			memcpy(buf + len, xattr_names[i], strlen(xattr_names[i]) + 1);
			len += strlen(xattr_names[i]) + 1;
		}
	}
	node_unref(fs, n);
	reply_xattr(req, buf, len, size);
}

static void kvfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			  size_t size, int flags)
{
	/* the attributes describe the pool's state; nothing else is kept */
	fuse_reply_err(req, ENOTSUP);
}

static void kvfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, ENOTSUP);
}

static void kvfs_init(void *userdata, struct fuse_conn_info *conn)
{
	struct kvfs *fs = userdata;

	/* 1 MiB requests: max_pages follows max_write in libfuse, and reads
	 * are cut at max_read (also passed as the mount option) */
	conn->max_write = fs->max_io;
	conn->max_read = fs->max_io;
	conn->max_readahead = fs->max_io;
	conn->time_gran = 1;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	if (conn->capable & FUSE_CAP_READDIRPLUS_AUTO)
		conn->want |= FUSE_CAP_READDIRPLUS_AUTO;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	/* a new put changes mtime and size: the kernel drops cached pages
	 * when it sees that, in addition to the generation check at open */
	if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
	/* replies come from memory (a value buffer), where writev is the
	 * one copy splice would also make */
	conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
}

const struct fuse_lowlevel_ops kvfs_ops = {
	.init = kvfs_init,
	.lookup = kvfs_lookup,
	.forget = kvfs_forget,
	.forget_multi = kvfs_forget_multi,
	.getattr = kvfs_getattr,
	.setattr = kvfs_setattr,
	.opendir = kvfs_opendir,
	.readdir = kvfs_readdir,
	.readdirplus = kvfs_readdirplus,
	.releasedir = kvfs_releasedir,
	.open = kvfs_open,
	.read = kvfs_read,
	.create = kvfs_create,
	.write = kvfs_write,
	.flush = kvfs_flush,
	.release = kvfs_release,
	.unlink = kvfs_unlink,
	.mkdir = kvfs_mkdir,
	.rmdir = kvfs_rmdir,
	.rename = kvfs_rename,
	.link = kvfs_link,
	.symlink = kvfs_symlink,
	.mknod = kvfs_mknod,
	.statfs = kvfs_statfs,
	.getxattr = kvfs_getxattr,
	.listxattr = kvfs_listxattr,
	.setxattr = kvfs_setxattr,
	.removexattr = kvfs_removexattr,
};

/* kvfs_node: the inode table — two chained hash tables over the same
 * nodes (by inode number, by kind and raw name) that double when full —
 * the list of mkdir'd directories, and stat attributes (kvfs_node.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "clock.h"
#include "kvfs_commit.h"
#include "kvfs_node.h"

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
	    !fixed_node(fs, KVFS_INO_CTL_NODES, KN_CTL_NODES, KVFS_INO_CTL_DIR, "nodes") ||
	    !fixed_node(fs, KVFS_INO_CTL_SEGMENTS, KN_CTL_SEGMENTS, KVFS_INO_CTL_DIR, "segments"))
		return -ENOMEM;
	return 0;
}

static void node_free(struct kvfs_node *n)
{
	for (unsigned i = 0; i < n->nold_raw; i++)
		free(n->old_raw[i]);
	free(n->old_raw);
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
	kvfs_times_free_locked(&fs->times);
}

struct kvfs_node *kvfs_node_by_ino_locked(struct kvfs *fs, uint64_t ino)
{
	struct kvfs_node *n = fs->by_ino[bucket(fs, XXH3_64bits(&ino, sizeof(ino)))];

	while (n && n->ino != ino)
		n = n->ino_next;
	return n;
}

struct kvfs_node *kvfs_node_by_name_locked(struct kvfs *fs, enum kvfs_kind kind,
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
struct kvfs_node *kvfs_node_get_locked(struct kvfs *fs, enum kvfs_kind kind, const char *raw,
				       size_t len, uint64_t parent, const char *name)
{
	struct kvfs_node *n = kvfs_node_by_name_locked(fs, kind, raw, len);
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
	while (kvfs_node_by_ino_locked(fs, ino))	/* hash collision: next free */
		ino = ino + 1 < KVFS_INO_MIN ? KVFS_INO_MIN : ino + 1;
	n->ino = ino;
	if (fs->nnodes >= fs->nbuckets * 2)
		table_grow_locked(fs);
	table_insert_locked(fs, n);
	return n;
}

/* Frees a node nobody refers to any more: not the kernel, no open handle,
 * not a remembered empty directory, not the root or a control file. */
void kvfs_node_maybe_free_locked(struct kvfs *fs, struct kvfs_node *n)
{
	if (n->ino < KVFS_INO_MIN || n->nlookup || n->refs || n->memdir || n->pending ||
	    n->queued || n->inval_queued)
		return;
	table_remove_locked(fs, n);
	node_free(n);
}

bool kvfs_node_busy_dir_locked(struct kvfs *fs, uint64_t ino)
{
	struct kvfs_node *m;

	for (m = fs->memdirs; m; m = m->mem_next)
		if (m->parent == ino)
			return true;
	for (size_t i = 0; i < fs->nbuckets; i++)
		for (m = fs->by_ino[i]; m; m = m->ino_next)
			if ((m->pending || m->queued) && !m->retired && m->parent == ino)
				return true;
	return false;
}

void kvfs_node_retire_locked(struct kvfs *fs, struct kvfs_node *n)
{
	struct kvfs_node **pp;

	if (n->retired || n->ino < KVFS_INO_MIN)
		return;
	n->refs++;		/* not freed under our feet */
	kvfs_memdir_clear_locked(fs, n);
	pp = &fs->by_name[bucket(fs, hash_name(n->kind, n->raw, n->rawlen))];
	while (*pp && *pp != n)
		pp = &(*pp)->name_next;
	if (*pp)
		*pp = n->name_next;
	n->name_next = NULL;
	n->retired = true;
	n->refs--;
	kvfs_node_maybe_free_locked(fs, n);
}

int kvfs_node_rekey_locked(struct kvfs *fs, struct kvfs_node *n, const char *raw, size_t len,
			   uint64_t parent, const char *name, struct kvfs_node **old)
{
	char *r = malloc(len + 1), **olds;
	struct kvfs_node *o;
	bool mem = n->memdir;

	*old = NULL;
	olds = realloc(n->old_raw, (n->nold_raw + 1) * sizeof(*olds));
	if (!r || !olds) {
		free(r);
		if (olds)
			n->old_raw = olds;
		return -ENOMEM;
	}
	n->old_raw = olds;
	memcpy(r, raw, len);
	r[len] = 0;
	o = kvfs_node_by_name_locked(fs, n->kind, raw, len);
	if (o && o != n) {
		*old = o;
		kvfs_node_retire_locked(fs, o);
	}
	if (mem)
		kvfs_memdir_clear_locked(fs, n);
	n->refs++;		/* table_remove must not be a free */
	table_remove_locked(fs, n);
	n->old_raw[n->nold_raw++] = n->raw;
	n->raw = r;
	n->rawlen = len;
	n->parent = parent;
	snprintf(n->name, sizeof(n->name), "%s", name);
	n->retired = false;
	table_insert_locked(fs, n);
	if (mem)
		kvfs_memdir_set_locked(fs, n);
	n->refs--;
	return 0;
}

void kvfs_node_changed_locked(struct kvfs *fs, struct kvfs_node *n)
{
	n->version++;
	n->generation = 0;
	n->commit_len = 0;
	n->blob = NULL;		/* open handles keep theirs */
	n->fresh_until = 0;
	if (!n->inval_queued && kvfs_commit_inval(fs, n->ino) == 0)
		n->inval_queued = true;
}

/* Gets the node of ino with a handle reference (refs++), or NULL. */
struct kvfs_node *kvfs_node_ref(struct kvfs *fs, fuse_ino_t ino)
{
	struct kvfs_node *n;

	pthread_mutex_lock(&fs->lock);
	n = kvfs_node_by_ino_locked(fs, ino);
	if (n)
		n->refs++;
	pthread_mutex_unlock(&fs->lock);
	return n;
}

void kvfs_node_unref(struct kvfs *fs, struct kvfs_node *n)
{
	pthread_mutex_lock(&fs->lock);
	n->refs--;
	kvfs_node_maybe_free_locked(fs, n);
	pthread_mutex_unlock(&fs->lock);
}

void kvfs_memdir_set_locked(struct kvfs *fs, struct kvfs_node *n)
{
	if (n->memdir || n->ino < KVFS_INO_MIN)
		return;
	n->memdir = true;
	n->mem_next = fs->memdirs;
	fs->memdirs = n;
	n->mtime_ns = clock_realtime_ns();
}

void kvfs_memdir_clear_locked(struct kvfs *fs, struct kvfs_node *n)
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
	kvfs_node_maybe_free_locked(fs, n);
}

void kvfs_memdirs_settle_locked(struct kvfs *fs, const char *key, size_t len)
{
	struct kvfs_node *n = fs->memdirs, *next;

	for (; n; n = next) {
		next = n->mem_next;
		if (n->kind == KN_FILE ? n->rawlen == len && memcmp(n->raw, key, len) == 0
				       : n->rawlen <= len && memcmp(n->raw, key, n->rawlen) == 0)
			kvfs_memdir_clear_locked(fs, n);
	}
}

/* ---- attributes ------------------------------------------------------ */

bool kvfs_is_dir_kind(enum kvfs_kind k)
{
	return k == KN_DIR || k == KN_PIECE || k == KN_CTL_DIR || k == KN_CTL_NODES ||
	       k == KN_CTL_NODE;
}

static void set_ts(struct timespec *ts, uint64_t ns)
{
	ts->tv_sec = (time_t)(ns / 1000000000ull);
	ts->tv_nsec = (long)(ns % 1000000000ull);
}

mode_t kvfs_node_mode(const struct kvfs *fs, enum kvfs_kind k)
{
	mode_t fmode = fs->fmode & 07777;

	if (fs->ro)
		fmode &= ~(mode_t)0222;
	switch (k) {
	case KN_DIR:
	case KN_PIECE:
		/* directories are searchable wherever files are readable */
		return S_IFDIR | fmode | ((fmode & 0444) >> 2);
	case KN_CTL_DIR:
	case KN_CTL_NODES:
	case KN_CTL_NODE:
		return S_IFDIR | 0555;
	case KN_FILE:
		return S_IFREG | fmode;
	default:
		return S_IFREG | 0444;
	}
}

void kvfs_fill_attr_locked(struct kvfs *fs, const struct kvfs_node *n, struct stat *st)
{
	uint64_t t = n->mtime_ns ? n->mtime_ns : fs->mount_ns, ct = t;
	uint64_t at = n->kind == KN_FILE && n->atime_ns ? n->atime_ns : t;

	memset(st, 0, sizeof(*st));
	st->st_ino = n->ino;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_mode = kvfs_node_mode(fs, n->kind);
	st->st_nlink = S_ISDIR(st->st_mode) ? 2 : 1;
	/* tools size their buffers by st_blksize: one request per read */
	st->st_blksize = fs->max_io;
	switch (n->kind) {
	case KN_DIR:
	case KN_PIECE:
		break;
	case KN_CTL_DIR:
	case KN_CTL_NODES:
	case KN_CTL_NODE:
		t = ct = at = fs->mount_ns;
		break;
	case KN_FILE:
		st->st_size = (off_t)n->size;
		st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
		if (n->pending || n->queued || n->memdir) {
			/* not stored yet, or empty: the times set by utimes */
			if (n->set_mtime_ns)
				t = n->set_mtime_ns;
			if (n->set_atime_ns)
				at = n->set_atime_ns;
		} else {
			/* ctime stays the put time: the value's own */
			kvfs_times_get_locked(&fs->times, n->raw, n->rawlen, n->mtime_ns, &t, &at);
		}
		break;
	default:		/* control files: generated at open, size unknown */
		t = ct = at = clock_realtime_ns();
		break;
	}
	set_ts(&st->st_mtim, t);
	set_ts(&st->st_ctim, ct);
	set_ts(&st->st_atim, at);
}

void kvfs_fill_entry_locked(struct kvfs *fs, const struct kvfs_node *n,
			    struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = n->ino;
	e->generation = 1;	/* inode numbers are never reused for another key */
	e->attr_timeout = fs->attr_timeout;
	e->entry_timeout = fs->entry_timeout;
	kvfs_fill_attr_locked(fs, n, &e->attr);
}

/* Stores what kvp_stat said about a file node. */
bool kvfs_node_from_stat_locked(struct kvfs *fs, struct kvfs_node *n, const struct kvp_stat *st)
{
	if (n->generation != st->generation) {
		/* unknown (0, nothing committed here), or what this view committed */
		bool mine = n->generation == 0 && n->commit_len == st->size &&
			    n->commit_sum == st->checksum;

		if (!mine && (n->generation != 0 || n->commit_len != 0))
			return false;
		n->generation = st->generation;
		n->commit_len = 0;
	}
	n->size = st->size;
	n->mtime_ns = st->put_time_ns;
	n->atime_ns = st->access_time_ns;
	n->fresh_until = clock_now_ms() + (uint64_t)(fs->attr_timeout * 1000);
	return true;
}

bool kvfs_node_from_list_locked(struct kvfs *fs, struct kvfs_node *n, uint64_t size,
				uint64_t put_ns)
{
	if (n->pending || n->queued || n->memdir)
		return true;		/* this view's value: not the pool's yet */
	if (n->generation && n->mtime_ns != put_ns)
		return false;
	n->size = size;
	n->mtime_ns = put_ns;
	n->fresh_until = clock_now_ms() + (uint64_t)(fs->attr_timeout * 1000);
	return true;
}

struct kvfs_node *kvfs_node_fresh_locked(struct kvfs *fs, struct kvfs_node *n)
{
	uint64_t parent = n->parent;
	char name[KVFS_NAME_BUF];
	struct kvfs_node *f;

	snprintf(name, sizeof(name), "%s", n->name);
	n->refs++;		/* n->raw stays valid while we copy from it */
	kvfs_node_retire_locked(fs, n);
	f = kvfs_node_get_locked(fs, n->kind, n->raw, n->rawlen, parent, name);
	n->refs--;
	kvfs_node_maybe_free_locked(fs, n);
	return f;
}

void kvfs_node_committed_locked(struct kvfs *fs, struct kvfs_node *n, uint64_t sum, uint64_t len)
{
	kvfs_node_changed_locked(fs, n);
	n->commit_sum = sum;
	n->commit_len = len;
}

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

#include "kvfs_node.h"
#include "net.h"

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
	if (n->ino < KVFS_INO_MIN || n->nlookup || n->refs || n->memdir || n->pending)
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
			if (m->pending && m->parent == ino)
				return true;
	return false;
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
	n->mtime_ns = net_realtime_ns();
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

/* A key now exists: the mkdir'd directories above it are real ones. */
void kvfs_memdirs_settle_locked(struct kvfs *fs, const char *key, size_t len)
{
	struct kvfs_node *n = fs->memdirs, *next;

	for (; n; n = next) {
		next = n->mem_next;
		if (n->rawlen <= len && memcmp(n->raw, key, n->rawlen) == 0)
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

void kvfs_fill_attr_locked(struct kvfs *fs, const struct kvfs_node *n, struct stat *st)
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
		t = net_realtime_ns();
		break;
	}
	set_ts(&st->st_mtim, t);
	set_ts(&st->st_ctim, t);
	set_ts(&st->st_atim, n->kind == KN_FILE && n->atime_ns ? n->atime_ns : t);
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
void kvfs_node_from_stat_locked(struct kvfs *fs, struct kvfs_node *n, const struct kvp_stat *st)
{
	n->size = st->size;
	n->mtime_ns = st->put_time_ns;
	n->atime_ns = st->access_time_ns;
	n->fresh_until = net_now_ms() + (uint64_t)(fs->attr_timeout * 1000);
}

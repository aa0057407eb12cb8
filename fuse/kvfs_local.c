/* kvfs_local: reads of values that have a memory replica in a segment on
 * this host, range by range, from a read-only mapping of the node's
 * /dev/shm file — no whole-value fetch before the first byte.
 *
 * Why it never returns other bytes: the node tombstones an extent (its
 * header magic) when the master frees it, before it answers the FREE, and
 * the master reuses the space only after that answer. A read copies its
 * range into a per-thread bounce buffer and then checks that the header
 * is still live with the generation open saw: if so, nothing was reused
 * while it copied. Otherwise the handle falls back to kvp_get_into.
 * Mappings live until the view is unmounted (fs->lseg_lock guards the
 * table; lock order: lseg_lock, then kvp_lock).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "clock.h"
#include "extent.h"
#include "kvfs_local.h"
#include "log.h"
#include "segment.h"

#define LSEG_RETRY_MS 5000	/* after a failed attach */
/* Values from this size on get their pages mapped at open (one madvise)
 * rather than by faults inside the reads: a fresh 64 MiB value read cold
 * went from 1.0 to 2.1 GB/s (tests/bench/fuse_bench.sh puts a new key for
 * every run, so every cold read there is of pages this mapping never saw).
 * Once per chunk of the mapping: the page tables stay filled (nothing
 * punches holes in a segment), and the madvise of an already mapped 1 MiB
 * still took 0.12 ms at every open (0.3-0.5 ms for one never mapped). */
#define LSEG_POPULATE_MIN (64u << 10)

struct kvfs_lseg {
	uint32_t segment_id;
	bool remote;			/* another host: never mapped */
	bool attached;
	uint64_t retry_ms;
	struct segment seg;
	/* the chunks whose page tables this mapping filled (segment_fill) */
	_Atomic uint64_t *filled;
	struct kvfs_lseg *next;
	struct kvfs_lseg *retired;	/* older mappings of the same id */
};

/* Attaches segment_id's file if its node is on this host (fs->lseg_lock
 * held: a pool call under it delays only opens, once per segment). */
static void lseg_attach_locked(struct kvfs *fs, struct kvfs_lseg *l)
{
	struct kvp_info info;
	struct kvp *k;
	char err[256];
	int e = 0;

	l->retry_ms = clock_now_ms() + LSEG_RETRY_MS;
	k = kvfs_kvp(fs, &e);
	if (!k || kvp_info(k, &info) < 0)
		return;
	for (size_t i = 0; i < info.nnodes; i++) {
		const struct kvp_node_info *n = &info.nodes[i];

		if (n->segment_id != l->segment_id)
			continue;
		if (!fs->host_id[0] || strncmp(n->host_id, fs->host_id, sizeof(n->host_id)) != 0) {
			l->remote = true;
			break;
		}
		if (segment_attach(&l->seg, n->shm_path, false, err, sizeof(err)) == 0) {
			l->attached = true;
			/* without the map every open fills its range again */
			l->filled = segment_fill_map(&l->seg);
		} else
			log_info("kvfs: segment %u (%s) not mapped: %s", l->segment_id,
				 n->shm_path, err);
		break;
	}
	kvp_info_free(&info);
}

static struct kvfs_lseg *lseg_get_locked(struct kvfs *fs, uint32_t segment_id)
{
	struct kvfs_lseg *l;

	for (l = fs->lsegs; l; l = l->next)
		if (l->segment_id == segment_id)
			break;
	if (!l) {
		l = calloc(1, sizeof(*l));
		if (!l)
			return NULL;
		l->segment_id = segment_id;
		l->seg.fd = -1;
		l->next = fs->lsegs;
		fs->lsegs = l;
	}
	if (!l->attached && !l->remote && clock_now_ms() >= l->retry_ms)
		lseg_attach_locked(fs, l);
	return l->attached ? l : NULL;
}

/* The extent at off of l, if it is (key, generation, size) and live. */
static const uint8_t *extent_at(const struct kvfs_lseg *l, const struct kvp_replica *r,
				const char *key, size_t keylen, const struct kvp_stat *st)
{
	const uint8_t *base = l->seg.base, *k;
	struct ext_hdr h;

	if (r->offset < SEG_DATA_OFF || r->offset >= l->seg.size ||
	    r->alloc_len > l->seg.size - r->offset)
		return NULL;
	if (ext_decode(base + r->offset, r->alloc_len, 0, &h, &k) != 0)
		return NULL;
	if (h.key_len != keylen || memcmp(k, key, keylen) != 0 || h.value_len != st->size ||
	    h.generation != st->generation || h.seg_uuid != l->seg.uuid)
		return NULL;
	return base + r->offset;
}

/* Whether the segment's path now names another file than the mapping. */
static bool file_changed(const struct kvfs_lseg *l)
{
	struct stat st;

	if (stat(l->seg.path, &st) != 0)
		return false;
	return st.st_ino != l->seg.ino || st.st_dev != l->seg.dev;
}

int kvfs_local_find(struct kvfs *fs, const char *key, size_t keylen, const struct kvp_stat *st,
		    const uint8_t **hdr)
{
	struct kvp_replica pop = { 0 };
	_Atomic uint64_t *filled = NULL;
	struct segment popseg;
	int rc = -ENOENT;

	pthread_mutex_lock(&fs->lseg_lock);
	for (uint32_t i = 0; i < st->nreplicas && i < KVP_MAX_REPLICAS && rc; i++) {
		const struct kvp_replica *r = &st->replicas[i];
		struct kvfs_lseg *l;

		if (r->tier != KVP_TIER_MEM)
			continue;
		l = lseg_get_locked(fs, r->segment_id);
		if (!l)
			continue;
		*hdr = extent_at(l, r, key, keylen, st);
		if (!*hdr && file_changed(l)) {
			/* a node that restarted made a new file under the same
			 * name: map that one (the old mapping may still be read) */
			struct kvfs_lseg *old = calloc(1, sizeof(*old));

			if (old) {
				*old = *l;
				old->next = NULL;
				old->retired = l->retired;
				l->retired = old;
				l->attached = false;
				l->filled = NULL;	/* the old mapping's, kept with it */
				l->retry_ms = 0;
				if (lseg_get_locked(fs, r->segment_id))
					*hdr = extent_at(l, r, key, keylen, st);
			}
		}
		if (*hdr) {
			rc = 0;
			pop = *r;
			popseg = l->seg;	/* a re-attach may change l->seg; this mapping stays */
			filled = l->filled;	/* and so does its map (freed at unmount) */
		}
	}
	pthread_mutex_unlock(&fs->lseg_lock);
	if (rc == 0 && st->size >= LSEG_POPULATE_MIN && pop.alloc_len)
		atomic_fetch_add_explicit(&fs->local_filled,
					  segment_fill(&popseg, filled, pop.offset, pop.alloc_len, false),
					  memory_order_relaxed);
	return rc;
}

static pthread_key_t bounce_key;
static pthread_once_t bounce_once = PTHREAD_ONCE_INIT;

struct bounce {
	size_t cap;
	char buf[];
};

static void bounce_init(void)
{
	/* worker threads come and go: each one's buffer goes with it */
	pthread_key_create(&bounce_key, free);
}

void *kvfs_local_bounce(size_t len)
{
	struct bounce *b;

	pthread_once(&bounce_once, bounce_init);
	b = pthread_getspecific(bounce_key);
	if (b && b->cap >= len)
		return b->buf;
	free(b);
	b = malloc(sizeof(*b) + len);
	pthread_setspecific(bounce_key, b);
	if (!b)
		return NULL;
	b->cap = len;
	return b->buf;
}

const uint8_t *kvfs_local_value(const uint8_t *hdr)
{
	uint32_t key_len;

	memcpy(&key_len, hdr + 8, sizeof(key_len));
	return hdr + EXT_HDR_SIZE + key_len;
}

int kvfs_local_copy(const uint8_t *hdr, const uint8_t *value, uint64_t generation, void *dst,
		    uint64_t off, size_t len)
{
	uint32_t magic;
	uint64_t gen;

	/* value and the range were checked against the header at open; the
	 * header is not read again for lengths, it may be reused by now */
	memcpy(dst, value + off, len);
	/* the copy's loads before the header's: a header still live means
	 * the FREE that precedes any reuse had not happened yet */
	atomic_thread_fence(memory_order_acquire);
	magic = __atomic_load_n((const uint32_t *)hdr, __ATOMIC_RELAXED);
	gen = __atomic_load_n((const uint64_t *)(hdr + 32), __ATOMIC_RELAXED);
	return magic == EXT_MAGIC && gen == generation ? 0 : -ESTALE;
}

void kvfs_local_free(struct kvfs *fs)
{
	struct kvfs_lseg *l = fs->lsegs, *next;

	for (; l; l = next) {
		next = l->next;
		while (l) {
			struct kvfs_lseg *r = l->retired;

			if (l->attached)
				segment_close(&l->seg);
			free((void *)l->filled);
			free(l);
			l = r;
		}
	}
	fs->lsegs = NULL;
}

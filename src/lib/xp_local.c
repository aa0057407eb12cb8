/* xp_local: the same-host transport. Moves extents by memcpy through the
 * client's own MAP_SHARED mapping of a node's /dev/shm segment: no syscall,
 * no node CPU. Reads copy and checksum in one pass (ext_copy_csum: the hash
 * is fed from the registers that store the copy), so verification costs no
 * second trip over memory; writes put the value first (streaming stores)
 * and publish the header last (magic stored with release order), so a
 * concurrent scan never sees a header before its value; then the commit
 * map's byte (segmap.h), so a node restart reports only complete extents. Runs on the calling
 * thread; the per-call state is private to it.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client_i.h"
#include "cuda.h"
#include "lcache.h"
#include "log.h"
#include "segmap.h"
#include "xport.h"

/* Bytes copied per progress() call, so that network transfers of the same
 * call are serviced between chunks of a large local copy. */
#define LOCAL_BUDGET (2u << 20)
/* Reads of a call that together reach the larger of these land with
 * non-temporal stores: the caller's buffers would not stay in cache
 * anyway, and streaming stores skip reading each destination line first.
 * Below it a destination (one value read again and again into the same
 * buffers) stays cached and plain stores are cheaper: about twice a core's
 * L2, or a quarter of the last-level cache where that is larger (a CPU
 * whose L3 holds a 16 MiB batch many times over reads it 1.03-1.06x
 * memcpy with plain stores, 0.94-0.97x streamed; docs/performance.md run
 * 19). Writes into a segment always stream: nobody here reads them back. */
#define LOCAL_NT_READ_MIN (4u << 20)
#define LOCAL_NT_READ_LLC_DIV 4

struct local_run {
	struct kvp *kvp;
	struct xp_op *head, *tail;	/* queued; head may be partly copied */
	size_t pending;
	uint64_t pos;			/* value bytes of head done */
	uint64_t read_bytes;		/* value bytes of every read added */
};

void xp_local_attach(struct kvp *kvp, struct client_seg *seg)
{
	char err[256];
	int rc;

	seg->local = seg->local_rw = false;
	if (kvp->proto == CLIENT_TCP || strcmp(seg->host_id, kvp->host_id) != 0)
		return;
	rc = segment_attach(&seg->map, seg->shm_path, true, err, sizeof(err));
	if (rc == 0) {
		seg->local_rw = true;
	} else {
		/* A segment we may read but not write (0640 and another
		 * user): reads stay local, puts go over TCP. */
		rc = segment_attach(&seg->map, seg->shm_path, false, err, sizeof(err));
		if (rc < 0) {
			log_debug("segment %u: %s not mapped: %s", seg->id, seg->shm_path, err);
			return;
		}
	}
	/* The same path on this host may be another file (a container with
	 * its own /dev/shm, a node restarted with a new segment): only the
	 * very file the node mounted counts. */
	if ((uint64_t)seg->map.dev != seg->shm_dev || (uint64_t)seg->map.ino != seg->shm_ino ||
	    seg->map.uuid != seg->seg_uuid) {
		log_debug("segment %u: %s is not the mounted file", seg->id, seg->shm_path);
		segment_close(&seg->map);
		seg->local_rw = false;
		return;
	}
	seg->local = true;
	{
		struct segment_info si;

		seg->ephemeral = segment_header_check(seg->map.base, SEG_HDR2_BYTES, &si, err,
						      sizeof(err)) == 0 &&
				 (si.flags & SEG_F_EPHEMERAL);
	}
	/* Page tables are filled chunk by chunk as transfers first meet them
	 * (segment_fill), not here: a one-shot CLI call maps a 1 GiB segment
	 * in microseconds instead of 50 ms (and as much again at exit). */
	seg->filled = segment_fill_map(&seg->map);
}

void xp_local_detach(struct client_seg *seg)
{
	if (seg->local && atomic_load(&seg->cuda_reg) == 2)
		cuda_host_unregister(seg->map.base);
	if (seg->local)
		segment_close(&seg->map);
	free((void *)seg->filled);
	seg->filled = NULL;
	seg->local = seg->local_rw = false;
}

static void *local_begin(struct kvp *kvp, uint64_t deadline)
{
	(void)deadline;	/* memcpy cannot stall */
	struct local_run *r = calloc(1, sizeof(*r));

	if (r)
		r->kvp = kvp;
	return r;
}

static void local_add(void *st, struct xp_op *op)
{
	struct local_run *r = st;

	op->next = NULL;
	op->status = 0;
	op->cs_on = false;
	if (r->tail)
		r->tail->next = op;
	else
		r->head = op;
	r->tail = op;
	r->pending++;
	if (op->dir == XP_READ)
		r->read_bytes += op->len;
}

/* Extent bounds inside the mapping: off is past the segment header and the
 * whole image (header, key, value) lies inside both the grant and the file. */
static bool local_in_bounds(const struct xp_op *op, uint64_t image)
{
	const struct segment *m = &op->seg->map;

	return op->off >= m->data_off && op->off < m->size && image <= op->alloc_len &&
	       image <= m->size - op->off;
}

/* Writes the extent header after the value: first the magic is cleared so a
 * scanner cannot pair an old header with new bytes, last it is stored with
 * release order. */
static void local_publish(uint8_t *dst, const struct xp_op *op)
{
	uint8_t img[EXT_HDR_SIZE + KVP_MAX_KEY];
	uint32_t magic;

	ext_encode(img, &op->h, op->key);
	memcpy(&magic, img, sizeof(magic));
	memcpy(dst + 4, img + 4, EXT_HDR_SIZE + op->h.key_len - 4);
	atomic_thread_fence(memory_order_release);
	__atomic_store_n((uint32_t *)dst, magic, __ATOMIC_RELEASE);
}

static void local_unpublish(uint8_t *dst)
{
	__atomic_store_n((uint32_t *)dst, 0, __ATOMIC_RELEASE);
	atomic_thread_fence(memory_order_seq_cst);
}

/* Page-locks the mapping for CUDA once (the first device transfer that
 * meets it), so copies between it and GPU memory are DMA. Others that come
 * meanwhile copy unregistered (correct, slower). */
static void local_cuda_register(struct client_seg *seg)
{
	int zero = 0;

	if (!atomic_compare_exchange_strong(&seg->cuda_reg, &zero, 1))
		return;
	if (cuda_host_register(seg->map.base, seg->map.size) == 0) {
		atomic_store(&seg->cuda_reg, 2);
	} else {
		log_info("segment %u: cudaHostRegister failed: GPU copies stay pageable", seg->id);
		atomic_store(&seg->cuda_reg, 3);
	}
}

/* One chunk of an XP_F_DEVICE op: cudaMemcpy, and when hash is set the
 * checksum of the segment-side bytes (host memory), chunk by chunk as the
 * host path does. false when op failed (status set). */
static bool local_dev_step(struct local_run *r, struct xp_op *op, void *dst, const void *src,
			   uint64_t n, uint64_t len, const void *seg_bytes, bool hash)
{
	if (cuda_memcpy(dst, src, n) < 0) {
		if (op->cs_on) {
			ext_csum_final(&op->cs);
			op->cs_on = false;
		}
		op->status = KVP_EIO;
		return false;
	}
	if (!hash)
		return true;
	if (r->pos == 0 && n == len) {
		uint64_t c = ext_checksum(seg_bytes, n);

		if (op->dir == XP_READ)
			op->csum = c;
		else
			op->h.value_checksum = c;
		return true;
	}
	if (r->pos == 0) {
		if (ext_csum_init(&op->cs) < 0) {
			op->status = KVP_ENOMEM;
			return false;
		}
		op->cs_on = true;
	}
	ext_csum_update(&op->cs, seg_bytes, n);
	return true;
}

/* Value bytes [r->pos, r->pos + n) of a gathered write (op->iov) to dst,
 * piece by piece; with XP_F_CSUM each piece is hashed as it lands, into one
 * streaming state for the whole value (the checksum of the concatenation,
 * what a contiguous put of the same bytes stores). false when op failed. */
static bool local_gather(struct local_run *r, struct xp_op *op, uint8_t *dst, uint64_t n)
{
	if (r->pos == 0) {
		op->iov_at = 0;
		op->iov_off = 0;
		if (op->flags & XP_F_CSUM) {
			if (ext_csum_init(&op->cs) < 0) {
				op->status = KVP_ENOMEM;
				return false;
			}
			op->cs_on = true;
		}
	}
	while (n && op->iov_at < op->niov) {
		const struct kvp_iov *v = &op->iov[op->iov_at];
		uint64_t k = v->len - op->iov_off;

		if (k > n)
			k = n;
		if (k) {
			const uint8_t *src = (const uint8_t *)v->base + op->iov_off;

			if (op->cs_on)
				ext_copy_csum_nt(dst, src, k, &op->cs);
			else
				memcpy(dst, src, k);
		}
		dst += k;
		n -= k;
		op->iov_off += k;
		if (op->iov_off == v->len) {
			op->iov_at++;
			op->iov_off = 0;
		}
	}
	if (n) {
		/* The pieces hold less than value_len: the caller's bug,
		 * never bytes from past a piece. */
		if (op->cs_on) {
			ext_csum_final(&op->cs);
			op->cs_on = false;
		}
		op->status = KVP_EINVAL;
		return false;
	}
	return true;
}

/* Does up to *budget bytes of op; returns true when op is finished. */
static bool local_step(struct local_run *r, struct xp_op *op, uint64_t *budget)
{
	struct segment *m = &op->seg->map;
	uint8_t *ext = (uint8_t *)m->base + op->off;
	uint64_t len, n;

	if (r->pos == 0) {
		if (!op->seg->local || op->tier != KVP_TIER_MEM ||
		    (op->dir == XP_WRITE && !op->seg->local_rw)) {
			op->status = KVP_ENOTSUP;
			return true;
		}
		if (op->dir == XP_READ) {
			if (op->hdr_len < EXT_HDR_SIZE ||
			    !local_in_bounds(op, (uint64_t)op->hdr_len + op->len)) {
				op->status = KVP_ESTALE;
				return true;
			}
			segment_fill(m, op->seg->filled, op->off, (uint64_t)op->hdr_len + op->len,
				     false);
			memcpy(op->hdr, ext, op->hdr_len);
			/* Header before value: pairs with the writer's release. */
			atomic_thread_fence(memory_order_acquire);
		} else {
			if (op->h.key_len > KVP_MAX_KEY ||
			    !local_in_bounds(op, ext_size(op->h.key_len, op->h.value_len))) {
				op->status = KVP_EGRANT;
				return true;
			}
			uint64_t image = ext_size(op->h.key_len, op->h.value_len);

			/* Pages of a segment not (yet) reserved are allocated by
			 * this write: fault them in here (every write, which also
			 * fills the page tables), where a full /dev/shm is an
			 * error, not a SIGBUS in the copy. */
			if (!segment_is_reserved(m)) {
				if (segment_prefault(m, op->off, image) < 0) {
					op->status = KVP_ENOMEM;
					return true;
				}
			} else {
				segment_fill(m, op->seg->filled, op->off, image, true);
			}
			local_unpublish(ext);
		}
		if (op->flags & XP_F_DEVICE)
			local_cuda_register(op->seg);
	}
	len = op->dir == XP_READ ? op->len : op->h.value_len;
	n = len - r->pos;
	if (n > *budget)
		n = *budget;
	if (op->dir == XP_READ) {
		const uint8_t *src = ext + op->hdr_len + r->pos;
		uint8_t *dst = (uint8_t *)op->dst + r->pos;

		bool nt = xp_local_nt_read(r->read_bytes);

		if (op->flags & XP_F_DEVICE) {
			if (!local_dev_step(r, op, dst, src, n, len, src, true))
				return true;
		} else if (r->pos == 0 && n == len) {
			op->csum = nt ? ext_copy_checksum_nt(dst, src, n) : ext_copy_checksum(dst, src, n);
		} else {
			if (r->pos == 0) {
				if (ext_csum_init(&op->cs) < 0) {
					op->status = KVP_ENOMEM;
					return true;
				}
				op->cs_on = true;
			}
			if (nt)
				ext_copy_csum_nt(dst, src, n, &op->cs);
			else
				ext_copy_csum(dst, src, n, &op->cs);
		}
	} else {
		uint8_t *dst = ext + EXT_HDR_SIZE + op->h.key_len + r->pos;
		const uint8_t *src = op->niov ? NULL : (const uint8_t *)op->src + r->pos;

		if (op->flags & XP_F_DEVICE) {
			if (!local_dev_step(r, op, dst, src, n, len, dst, op->flags & XP_F_CSUM))
				return true;
		} else if (op->niov) {
			if (!local_gather(r, op, dst, n))
				return true;
		} else if (!(op->flags & XP_F_CSUM)) {
			memcpy(dst, src, n);
		} else if (r->pos == 0 && n == len) {
			op->h.value_checksum = ext_copy_checksum_nt(dst, src, n);
		} else {
			if (r->pos == 0) {
				if (ext_csum_init(&op->cs) < 0) {
					op->status = KVP_ENOMEM;
					return true;
				}
				op->cs_on = true;
			}
			/* Hashes what landed in the segment, i.e. what
			 * readers will verify against. */
			ext_copy_csum_nt(dst, src, n, &op->cs);
		}
	}
	r->pos += n;
	*budget -= n;
	if (r->pos < len)
		return false;
	if (op->cs_on) {
		uint64_t c = ext_csum_final(&op->cs);

		op->cs_on = false;
		if (op->dir == XP_READ)
			op->csum = c;
		else
			op->h.value_checksum = c;
	}
	if (op->dir == XP_WRITE) {
		local_publish(ext, op);
		/* Complete: a node restart may report it from now on (before
		 * the put's PUT_END, which follows this op). */
		segmap_commit(m, op->off, op->h.generation);
	}
	client_count(r->kvp, local_bytes, len);
	return true;
}

static size_t local_progress(void *st, bool wait)
{
	struct local_run *r = st;
	struct xp_op *done = NULL, **dtail = &done;
	uint64_t budget = LOCAL_BUDGET;

	(void)wait;
	while (r->head && budget) {
		struct xp_op *op = r->head;

		if (!local_step(r, op, &budget))
			break;
		r->head = op->next;
		if (!r->head)
			r->tail = NULL;
		r->pos = 0;
		r->pending--;
		op->next = NULL;
		*dtail = op;
		dtail = &op->next;
	}
	/* Completions last: they may queue more work on this run. */
	while (done) {
		struct xp_op *op = done;

		done = op->next;
		op->next = NULL;
		if (op->done)
			op->done(op);
	}
	return r->pending;
}

static void local_end(void *st)
{
	struct local_run *r = st;

	/* Normally empty: the driver ends a run only when nothing is
	 * pending. Leftovers are failed without callbacks (the run is gone). */
	while (r->head) {
		struct xp_op *op = r->head;

		r->head = op->next;
		if (op->cs_on) {
			ext_csum_final(&op->cs);
			op->cs_on = false;
		}
		op->status = KVP_EINTERNAL;
	}
	free(r);
}

/* ---- optimistic reads ---- */

uint64_t xp_local_nt_read_min(void)
{
	static _Atomic uint64_t min;	/* a property of the machine: found once */
	uint64_t v = atomic_load_explicit(&min, memory_order_relaxed);

	if (!v) {
		long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);	/* 0 or -1 where unknown */
		v = LOCAL_NT_READ_MIN;
		if (llc > 0 && (uint64_t)llc / LOCAL_NT_READ_LLC_DIV > v)
			v = (uint64_t)llc / LOCAL_NT_READ_LLC_DIV;
		atomic_store_explicit(&min, v, memory_order_relaxed);
	}
	return v;
}

bool xp_local_nt_read(uint64_t call_bytes)
{
	return call_bytes >= xp_local_nt_read_min();
}

/* Optimistic reads race with writers by design (the checks below detect
 * every race that matters); under ThreadSanitizer their reads of segment
 * memory are ignored, the writers' accesses still count. */
#if defined(__SANITIZE_THREAD__)
#define KVP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVP_TSAN 1
#endif
#endif
#ifdef KVP_TSAN
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
#define OPT_RACY_BEGIN() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define OPT_RACY_END() AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define OPT_RACY_BEGIN() do { } while (0)
#define OPT_RACY_END() do { } while (0)
#endif

static inline uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Why the header at ext is not the one the location names: KVP_ECHECKSUM
 * when it is damaged (a live magic over a header that does not check, the
 * same on a second look, so not a writer rewriting it), else KVP_ESTALE (a
 * tombstone, another key or generation, or space reused for something
 * else). The slow path of a failed optimistic read. */
static int opt_why(const uint8_t *ext, uint32_t klen, uint64_t avail)
{
	uint8_t hdr[EXT_HDR_SIZE + KVP_MAX_KEY];
	uint32_t hlen = EXT_HDR_SIZE + klen;
	struct ext_hdr h;
	const uint8_t *k;

	memcpy(hdr, ext, hlen);
	atomic_thread_fence(memory_order_acquire);
	if (ld32(hdr) != EXT_MAGIC || ld32(hdr + 8) != klen ||
	    ext_decode(hdr, avail, 0, &h, &k) != -EINVAL)
		return KVP_ESTALE;
	atomic_thread_fence(memory_order_acquire);
	return memcmp(ext, hdr, hlen) == 0 ? KVP_ECHECKSUM : KVP_ESTALE;
}

/* The extent at l inside seg, or NULL when l cannot be (stale bounds). */
static const uint8_t *opt_ext(const struct client_seg *seg, const struct lc_loc *l, uint32_t klen)
{
	const struct segment *m = &seg->map;

	if (!seg->local || l->seg_uuid != seg->seg_uuid || l->off < m->data_off ||
	    l->off >= m->size || EXT_HDR_SIZE + (uint64_t)klen + l->vlen > l->alloc_len ||
	    l->alloc_len > m->size - l->off)
		return NULL;
	return (const uint8_t *)m->base + l->off;
}

/* The header at ext says, right now, exactly what l says: live, this key,
 * length, checksum, generation, segment. No other header can look like that
 * (a damaged or torn one would have to hit the 64-bit generation and
 * checksum), so its own checksum need not be computed here. Read in place:
 * the caller orders it against the value with fences. */
static bool opt_match(const uint8_t *ext, const struct lc_loc *l, const char *key, uint32_t klen)
{
	return ld32(ext) == EXT_MAGIC && ld16(ext + 4) == EXT_VERSION && ld32(ext + 8) == klen &&
	       ld64(ext + 16) == l->vlen && ld64(ext + 24) == l->csum &&
	       ld64(ext + 32) == l->gen && ld64(ext + 40) == l->seg_uuid &&
	       memcmp(ext + EXT_HDR_SIZE, key, klen) == 0;
}

void xp_local_opt_prefetch(const struct client_seg *seg, const struct lc_loc *l, uint32_t klen)
{
	const uint8_t *ext = opt_ext(seg, l, klen);

	if (ext) {
		/* the header and the key after it, which opt_match compares:
		 * the key starts on the next cache line */
		__builtin_prefetch(ext);
		__builtin_prefetch(ext + EXT_HDR_SIZE);
		if (klen > 64)
			__builtin_prefetch(ext + EXT_HDR_SIZE + klen - 1);
	}
}

int xp_local_opt_check(const struct client_seg *seg, const struct lc_loc *l, const char *key,
		       uint32_t klen)
{
	const uint8_t *ext = opt_ext(seg, l, klen);
	int rc;

	if (!ext)
		return KVP_ESTALE;
	OPT_RACY_BEGIN();
	rc = opt_match(ext, l, key, klen) ? 0 : opt_why(ext, klen, l->alloc_len);
	OPT_RACY_END();
	return rc;
}

int xp_local_opt_read(const struct client_seg *seg, const struct lc_loc *l, const char *key,
		      uint32_t klen, void *dst, bool nt, bool *raced)
{
	const uint8_t *ext = opt_ext(seg, l, klen);
	uint64_t csum;
	bool ok;
	int rc = 0;

	*raced = false;
	if (!ext)
		return KVP_ESTALE;
	segment_fill(&seg->map, seg->filled, l->off, EXT_HDR_SIZE + (uint64_t)klen + l->vlen, false);
	OPT_RACY_BEGIN();
	ok = opt_match(ext, l, key, klen);
	/* Header before value: pairs with the writers' release of the magic. */
	atomic_thread_fence(memory_order_acquire);
	if (!ok) {
		rc = opt_why(ext, klen, l->alloc_len);
		goto out;
	}
	csum = nt ? ext_copy_checksum_nt(dst, ext + EXT_HDR_SIZE + klen, l->vlen) :
		    ext_copy_checksum(dst, ext + EXT_HDR_SIZE + klen, l->vlen);
	/* The value before the second look at the header: a node that
	 * tombstoned the extent, or a writer that reused it, changed the
	 * header (its magic) before it changed any value byte (a reused extent
	 * was tombstoned first, and the master waits for that), so a header
	 * that still matches proves the copy was of this value. The hash is
	 * the second, independent check, and the one that catches an extent a
	 * node was still receiving header first. */
	atomic_thread_fence(memory_order_acquire);
	if (!opt_match(ext, l, key, klen)) {
		*raced = true;
		rc = KVP_ESTALE;
	} else if (csum != l->csum) {
		rc = KVP_ECHECKSUM;
	}
out:
	OPT_RACY_END();
	return rc;
}

const struct xport_ops xp_local_ops = {
	.name = "local",
	.begin = local_begin,
	.add = local_add,
	.progress = local_progress,
	.end = local_end,
};

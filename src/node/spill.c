/* spill: see spill.h. The spill file, its allocator, its index of live
 * extents and its io_uring. Each operation (demote, promote, read, free) is
 * one struct sp_op whose byte ranges are cut into pieces of at most
 * SPILL_CHUNK; pieces go to the ring while it has entries, the rest waits
 * in a FIFO. Pieces whose memory O_DIRECT cannot use (misaligned, or not all
 * readable/writable there) go through registered staging buffers. Loop
 * thread only; spill_scan may run on another thread before anything else.
 */
#include "spill.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "alloc.h"
#include "http.h"
#include "log.h"
#include "segment.h"

#define NSTAGE 4			/* staging buffers (SPILL_CHUNK each) */
#define SCAN_WIN (8u << 20)		/* spill_scan's read window */
#define HDR_MAX (EXT_HDR_SIZE + 1024)	/* header + longest key */
#define LOCK_WAIT_MS 2000		/* default wait for a dying owner's lock */
#define LOCK_WAIT_US 20000

const double spill_buckets[SPILL_NBUCKETS] = {
	0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
	0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10,
};

enum sp_kind { OP_DEMOTE, OP_PROMOTE, OP_READ, OP_FREE };

/* A byte range of the file and the memory it moves to/from. mem_avail:
 * bytes of mem that may be touched (a direct piece needs all of its length
 * there; the rest is staged: copied, and zero-padded on writes). */
struct sp_range {
	uint64_t foff;
	uint64_t len;
	uint8_t *mem;
	uint64_t mem_avail;
};

/* A live extent of the file, as the index keeps it (for REPORTs after a
 * re-mount, FREE and PROMOTE checks, READ validation). */
struct sp_ent {
	uint64_t off, alloc_len;
	struct ext_hdr h;
	bool dying;			/* a FREE is writing its tombstone */
	uint8_t key[];
};

struct sp_op {
	struct sp_op *next;		/* queue link */
	enum sp_kind kind;
	bool write;
	bool queued;
	spill_done_fn cb;
	void *arg;
	uint64_t off, len;		/* what the callback reports */
	uint64_t generation;
	const uint8_t *src;		/* demote: the extent in memory */
	uint8_t *dst;			/* promote: destination */
	uint64_t dst_len, dst_uuid;
	uint64_t size;			/* extent bytes (header + key + value) */
	int block;			/* index of the 4 KiB block buffer, -1 none */
	bool need_block;		/* takes a block buffer before its first piece */
	struct ext_hdr h;		/* demote: the source header */
	const uint8_t *key;		/* demote: the key, inside src */
	struct sp_ent *ent;		/* free / promote: the extent */
	struct sp_range r[2];
	unsigned nr, ri;		/* ranges, the current one */
	uint64_t pos;			/* next piece within r[ri] */
	uint32_t inflight;		/* pieces submitted, not completed */
	int status;			/* first error */
	uint64_t t0;
};

/* One SQE in flight. */
struct sp_io {
	struct sp_op *op;
	struct sp_io *next;		/* free list / retry list */
	uint8_t *mem;
	int buf;			/* fixed buffer index, -1: plain */
	int stage;			/* staging buffer to release, -1 none */
	bool write;
	uint64_t foff;
	uint32_t len;			/* bytes left to move */
	uint8_t *copy_to;		/* staged read: where the bytes go */
	uint32_t copy_len;
};

struct spill {
	char path[256];
	int fd;
	uint64_t size;			/* whole file */
	uint64_t uuid;
	uint64_t max_value;
	bool direct;
	bool created;
	uint32_t mem_align;		/* O_DIRECT memory alignment */

	struct io_uring ring;
	bool ring_ok;
	int efd;
	bool fixed_file;
	bool fixed_bufs;
	unsigned qd;

	/* one mapping: nbufs user buffers of bufsz bytes, then NSTAGE stage
	 * buffers of SPILL_CHUNK, then one 4 KiB block per ring entry; fixed
	 * buffer indices in that order */
	uint8_t *pool;
	size_t pool_len, bufsz;
	unsigned nbufs, nblocks;
	uint8_t *stage, *blocks;
	int *free_user, *free_stage, *free_block;	/* stacks of indices */
	unsigned nfree_user, nfree_stage, nfree_block;

	struct sp_io *ios;
	struct sp_io *free_io;
	struct sp_io *retry;		/* short transfers to resubmit */
	unsigned inflight;		/* SQEs submitted, not reaped */
	unsigned prepared;		/* SQEs prepared, not yet submitted */
	struct sp_op *qhead, *qtail;	/* ops with pieces left to issue */
	bool pumping;

	struct alloc *alloc;
	uint64_t extents;
	bool scanned;
	/* index of live extents by offset: open addressing, linear probing */
	struct sp_ent **tab;
	size_t tab_cap, tab_n;
	struct spill_stats st;
};

static void seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static const char *human(uint64_t v, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB" };
	double d = (double)v;
	int u = -1;

	if (v < 1024) {
		snprintf(buf, len, "%" PRIu64 " B", v);
		return buf;
	}
	while (d >= 1024 && u < 4) {
		d /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", d, units[u]);
	return buf;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* ---- file ---- */

static void nospace(struct spill *sp, uint64_t size, int rc, char *err, size_t errlen)
{
	char dir[256], b1[32], b2[32];
	struct statvfs vfs;
	uint64_t avail = 0;
	char *slash;

	snprintf(dir, sizeof(dir), "%s", sp->path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir)
		*slash = '\0';
	else if (slash)
		slash[1] = '\0';
	else
		snprintf(dir, sizeof(dir), ".");
	if (fstatvfs(sp->fd, &vfs) == 0)
		avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	seterr(err, errlen, "spill file %s: cannot reserve %s: %s (%s has %s free)", sp->path,
	       human(size, b1, sizeof(b1)), strerror(rc), dir, human(avail, b2, sizeof(b2)));
}

/* pread/pwrite of a whole buffer (the header block, scan windows). */
static int full_io(int fd, void *buf, size_t n, uint64_t off, bool write)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = write ? pwrite(fd, (uint8_t *)buf + done, n - done, (off_t)(off + done))
				  : pread(fd, (uint8_t *)buf + done, n - done, (off_t)(off + done));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0) {
			if (write)
				return -EIO;
			memset((uint8_t *)buf + done, 0, n - done);	/* past EOF */
			return 0;
		}
		done += (size_t)r;
	}
	return 0;
}

/* Switches fd to O_DIRECT if the filesystem takes it for our 4 KiB I/O.
 * Returns true when direct I/O is on. */
static bool try_direct(struct spill *sp, uint8_t *block)
{
	struct statx stx;
	int fl = fcntl(sp->fd, F_GETFL);

	sp->mem_align = SPILL_ALIGN;
	if (fl < 0 || fcntl(sp->fd, F_SETFL, fl | O_DIRECT) < 0) {
		log_notice("spill file %s: no O_DIRECT on this filesystem (%s), using buffered I/O",
			   sp->path, strerror(errno));
		return false;
	}
	memset(&stx, 0, sizeof(stx));
	if (statx(sp->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
	    (stx.stx_mask & STATX_DIOALIGN)) {
		if (!stx.stx_dio_offset_align || stx.stx_dio_offset_align > SPILL_ALIGN ||
		    stx.stx_dio_mem_align > SPILL_ALIGN) {
			fcntl(sp->fd, F_SETFL, fl);
			log_notice("spill file %s: direct I/O %s (offset alignment %u), using buffered I/O",
				   sp->path, stx.stx_dio_offset_align ? "needs more than 4 KiB alignment" :
				   "not supported", stx.stx_dio_offset_align);
			return false;
		}
		if (stx.stx_dio_mem_align)
			sp->mem_align = stx.stx_dio_mem_align;
	}
	/* Some filesystems accept the flag and fail the I/O: probe it. */
	int r = full_io(sp->fd, block, SPILL_ALIGN, 0, false);
	if (r < 0) {
		fcntl(sp->fd, F_SETFL, fl);
		log_notice("spill file %s: direct read failed (%s), using buffered I/O", sp->path,
			   strerror(-r));
		return false;
	}
	return true;
}

/* Creates (or re-creates) the file's content: reserves size bytes and
 * writes a fresh header. */
static int file_create(struct spill *sp, const char *name, uint8_t *block, bool fresh_file,
		       char *err, size_t errlen)
{
	struct segment_info info;
	int rc;

	if (ftruncate(sp->fd, 0) < 0) {
		rc = -errno;
		seterr(err, errlen, "spill file %s: truncate: %s", sp->path, strerror(-rc));
		return rc;
	}
	rc = posix_fallocate(sp->fd, 0, (off_t)sp->size);
	if (rc) {
		if (rc == ENOSPC || rc == EDQUOT || rc == EFBIG)
			nospace(sp, sp->size, rc, err, errlen);
		else
			seterr(err, errlen, "spill file %s: fallocate %" PRIu64 " bytes: %s",
			       sp->path, sp->size, strerror(rc));
		/* Give back what a partial fallocate took. */
		if (ftruncate(sp->fd, 0) < 0 && fresh_file)
			log_debug("spill: truncate after failed fallocate: %s", strerror(errno));
		return -rc;
	}
	memset(&info, 0, sizeof(info));
	info.version = SEG_VERSION;
	info.align = SPILL_ALIGN;
	info.size = sp->size;
	do {
		if (getrandom(&info.uuid, sizeof(info.uuid), 0) != sizeof(info.uuid))
			info.uuid = now_ns() ^ ((uint64_t)getpid() << 32);
	} while (!info.uuid);
	info.created_ns = (uint64_t)time(NULL) * 1000000000ull;
	snprintf(info.name, sizeof(info.name), "spill:%s", name ? name : "");
	segment_header_write(block, &info);
	rc = full_io(sp->fd, block, SPILL_ALIGN, 0, true);
	if (rc == 0 && fdatasync(sp->fd) < 0)
		rc = -errno;
	if (rc < 0) {
		seterr(err, errlen, "spill file %s: writing the header: %s", sp->path, strerror(-rc));
		return rc;
	}
	sp->uuid = info.uuid;
	sp->created = true;
	return 0;
}

/* Opens, locks, checks or creates the file. */
static int file_open(struct spill *sp, const struct spill_opts *o, uint8_t *block,
		     char *err, size_t errlen)
{
	struct segment_info info;
	struct stat st;
	char msg[192];
	int rc;

	sp->fd = open(sp->path, O_RDWR | O_CREAT | O_CLOEXEC, o->mode ? o->mode : 0600);
	if (sp->fd < 0) {
		rc = -errno;
		seterr(err, errlen, "spill file %s: %s", sp->path, strerror(-rc));
		return rc;
	}
	/* A previous owner killed with -9 keeps the lock until the kernel has
	 * torn its ring down (the registered file holds the open file), which
	 * runs asynchronously after its death: wait a little for that. */
	int wait_ms = o->lock_wait_ms ? o->lock_wait_ms : LOCK_WAIT_MS;
	int max_tries = wait_ms > 0 ? wait_ms * 1000 / LOCK_WAIT_US : 0;

	for (int tries = 0;; tries++) {
		if (flock(sp->fd, LOCK_EX | LOCK_NB) == 0)
			break;
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		if (rc != -EBUSY || tries >= max_tries) {
			seterr(err, errlen, "spill file %s: in use by another process", sp->path);
			return rc;
		}
		if (tries == 0)
			log_info("spill file %s: locked; waiting for its previous owner", sp->path);
		usleep(LOCK_WAIT_US);
	}
	if (fstat(sp->fd, &st) < 0) {
		rc = -errno;
		seterr(err, errlen, "spill file %s: %s", sp->path, strerror(-rc));
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		seterr(err, errlen, "spill file %s: not a regular file", sp->path);
		return -EINVAL;
	}
	if (st.st_size == 0)
		return file_create(sp, o->name, block, true, err, errlen);

	rc = full_io(sp->fd, block, SPILL_ALIGN, 0, false);
	if (rc < 0) {
		seterr(err, errlen, "spill file %s: reading the header: %s", sp->path, strerror(-rc));
		return rc;
	}
	if (all_zero(block, SEG_HDR_BYTES))	/* a creation that died early */
		return file_create(sp, o->name, block, false, err, errlen);
	rc = segment_header_check(block, SPILL_ALIGN, &info, msg, sizeof(msg));
	if (rc < 0) {
		seterr(err, errlen, "spill file %s exists and is not a kvpool spill file (%s); "
		       "remove it or choose another spill.path", sp->path, msg);
		return -EEXIST;
	}
	if (info.size != sp->size || info.align != SPILL_ALIGN ||
	    (uint64_t)st.st_size != info.size) {
		char b1[32], b2[32];

		log_warn("spill file %s holds %s, configured %s: re-created empty", sp->path,
			 human(info.size, b1, sizeof(b1)), human(sp->size, b2, sizeof(b2)));
		return file_create(sp, o->name, block, false, err, errlen);
	}
	sp->uuid = info.uuid;
	sp->created = false;
	return 0;
}

/* ---- ring and buffers ---- */

static int ring_setup(struct spill *sp, unsigned nbufs, size_t bufsz, char *err, size_t errlen)
{
	int rc;

	rc = io_uring_queue_init(sp->qd, &sp->ring, 0);
	if (rc < 0) {
		seterr(err, errlen, "spill: io_uring setup (%u entries): %s", sp->qd, strerror(-rc));
		return rc;
	}
	sp->ring_ok = true;
	sp->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (sp->efd < 0) {
		rc = -errno;
		seterr(err, errlen, "spill: eventfd: %s", strerror(-rc));
		return rc;
	}
	rc = io_uring_register_eventfd(&sp->ring, sp->efd);
	if (rc < 0) {
		seterr(err, errlen, "spill: io_uring eventfd: %s", strerror(-rc));
		return rc;
	}
	sp->fixed_file = io_uring_register_files(&sp->ring, &sp->fd, 1) == 0;

	sp->nbufs = nbufs;
	sp->bufsz = bufsz;
	sp->nblocks = sp->qd;
	sp->pool_len = (size_t)nbufs * bufsz + (size_t)NSTAGE * SPILL_CHUNK +
		       (size_t)sp->nblocks * SPILL_ALIGN;
	sp->pool = mmap(NULL, sp->pool_len, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (sp->pool == MAP_FAILED) {
		sp->pool = NULL;
		rc = -errno;
		seterr(err, errlen, "spill: buffer pool of %zu bytes: %s", sp->pool_len,
		       strerror(-rc));
		return rc;
	}
	sp->stage = sp->pool + (size_t)nbufs * bufsz;
	sp->blocks = sp->stage + (size_t)NSTAGE * SPILL_CHUNK;

	unsigned niov = nbufs + NSTAGE + sp->nblocks;
	struct iovec *iov = calloc(niov, sizeof(*iov));
	sp->free_user = calloc(sp->nbufs ? sp->nbufs : 1, sizeof(int));
	sp->free_stage = calloc(NSTAGE, sizeof(int));
	sp->free_block = calloc(sp->nblocks, sizeof(int));
	sp->ios = calloc(sp->qd, sizeof(*sp->ios));
	if (!iov || !sp->free_user || !sp->free_stage || !sp->free_block || !sp->ios) {
		free(iov);
		seterr(err, errlen, "spill: out of memory");
		return -ENOMEM;
	}
	for (unsigned i = 0; i < nbufs; i++) {
		iov[i].iov_base = sp->pool + (size_t)i * bufsz;
		iov[i].iov_len = bufsz;
	}
	for (unsigned i = 0; i < NSTAGE; i++) {
		iov[nbufs + i].iov_base = sp->stage + (size_t)i * SPILL_CHUNK;
		iov[nbufs + i].iov_len = SPILL_CHUNK;
	}
	for (unsigned i = 0; i < sp->nblocks; i++) {
		iov[nbufs + NSTAGE + i].iov_base = sp->blocks + (size_t)i * SPILL_ALIGN;
		iov[nbufs + NSTAGE + i].iov_len = SPILL_ALIGN;
	}
	rc = io_uring_register_buffers(&sp->ring, iov, niov);
	free(iov);
	sp->fixed_bufs = rc == 0;
	if (rc < 0)
		log_info("spill: registering %u buffers: %s; using plain reads/writes", niov,
			 strerror(-rc));
	for (unsigned i = 0; i < sp->nbufs; i++)
		sp->free_user[sp->nfree_user++] = (int)(sp->nbufs - 1 - i);
	for (unsigned i = 0; i < NSTAGE; i++)
		sp->free_stage[sp->nfree_stage++] = (int)(sp->nbufs + NSTAGE - 1 - i);
	for (unsigned i = 0; i < sp->nblocks; i++)
		sp->free_block[sp->nfree_block++] = (int)(sp->nblocks - 1 - i);
	for (unsigned i = 0; i < sp->qd; i++) {
		sp->ios[i].next = sp->free_io;
		sp->free_io = &sp->ios[i];
	}
	return 0;
}

/* A staging buffer by its fixed index (nbufs .. nbufs + NSTAGE - 1). */
static uint8_t *stage_ptr(const struct spill *sp, int idx)
{
	return sp->stage + (size_t)(idx - (int)sp->nbufs) * SPILL_CHUNK;
}

static uint8_t *block_ptr(const struct spill *sp, int idx)
{
	return sp->blocks + (size_t)idx * SPILL_ALIGN;
}

/* Fixed buffer index of [p, p+len) if it lies in one registered buffer. */
static int fixed_index(const struct spill *sp, const uint8_t *p, uint64_t len)
{
	if (!sp->fixed_bufs || !sp->pool)
		return -1;
	uintptr_t a = (uintptr_t)p, base = (uintptr_t)sp->pool;
	uintptr_t stage = (uintptr_t)sp->stage, blocks = (uintptr_t)sp->blocks;
	uintptr_t i;

	if (a >= base && a < stage) {
		i = (a - base) / sp->bufsz;
		return a + len <= base + (i + 1) * sp->bufsz ? (int)i : -1;
	}
	if (a >= stage && a < blocks) {
		i = (a - stage) / SPILL_CHUNK;
		return a + len <= stage + (i + 1) * SPILL_CHUNK ? (int)(sp->nbufs + i) : -1;
	}
	if (a >= blocks && a < base + sp->pool_len) {
		i = (a - blocks) / SPILL_ALIGN;
		return a + len <= blocks + (i + 1) * SPILL_ALIGN ?
			(int)(sp->nbufs + NSTAGE + i) : -1;
	}
	return -1;
}

/* ---- open / close ---- */

struct spill *spill_open(const struct spill_opts *o, int *rcp, char *err, size_t errlen)
{
	struct spill *sp;
	uint8_t *block = NULL;
	int rc;

	if (!o->path || !o->path[0] || strlen(o->path) >= sizeof(sp->path)) {
		seterr(err, errlen, "spill: bad path");
		rc = -EINVAL;
		goto out;
	}
	sp = calloc(1, sizeof(*sp));
	if (!sp) {
		seterr(err, errlen, "spill: out of memory");
		rc = -ENOMEM;
		goto out;
	}
	snprintf(sp->path, sizeof(sp->path), "%s", o->path);
	sp->fd = -1;
	sp->efd = -1;
	sp->size = o->size & ~(uint64_t)(SPILL_ALIGN - 1);
	sp->max_value = o->max_value;
	sp->qd = o->queue_depth ? o->queue_depth : 32;
	if (sp->qd > 4096)
		sp->qd = 4096;
	if (sp->size < SPILL_DATA_OFF + SPILL_ALIGN) {
		seterr(err, errlen, "spill file %s: size %" PRIu64 " is below the minimum of %u bytes",
		       o->path, o->size, SPILL_DATA_OFF + SPILL_ALIGN);
		rc = -EINVAL;
		goto out_free;
	}
	if (posix_memalign((void **)&block, SPILL_ALIGN, SPILL_ALIGN)) {
		block = NULL;
		seterr(err, errlen, "spill: out of memory");
		rc = -ENOMEM;
		goto out_free;
	}
	rc = file_open(sp, o, block, err, errlen);
	if (rc < 0)
		goto out_close;
	sp->direct = o->direct_io && try_direct(sp, block);

	size_t bufsz = o->buf_size ? (o->buf_size + SPILL_ALIGN - 1) & ~(size_t)(SPILL_ALIGN - 1) :
		       SPILL_CHUNK;
	rc = ring_setup(sp, o->nbufs ? o->nbufs : 16, bufsz, err, errlen);
	if (rc < 0)
		goto out_ring;
	sp->alloc = alloc_create(SPILL_DATA_OFF, sp->size - SPILL_DATA_OFF, SPILL_ALIGN);
	if (!sp->alloc) {
		seterr(err, errlen, "spill: allocator for %" PRIu64 " bytes: out of memory", sp->size);
		rc = -ENOMEM;
		goto out_ring;
	}
	sp->st.capacity = sp->size - SPILL_DATA_OFF;
	sp->st.direct = sp->direct;
	free(block);
	{
		char b[32];
		log_info("spill file %s: %s, %s I/O, %s, queue depth %u%s", sp->path,
			 human(sp->size, b, sizeof(b)), sp->direct ? "direct" : "buffered",
			 sp->created ? "created" : "reused", sp->qd,
			 sp->fixed_bufs ? ", registered buffers" : "");
	}
	*rcp = 0;
	return sp;

out_ring:
	if (sp->created)
		unlink(sp->path);	/* nothing in it yet */
	spill_close(sp);
	free(block);
	*rcp = rc;
	return NULL;
out_close:
	if (sp->fd >= 0) {
		struct stat st;
		/* A file we just made and could not fill holds nothing. */
		if (fstat(sp->fd, &st) == 0 && st.st_size == 0)
			unlink(sp->path);
		close(sp->fd);
	}
	free(block);
out_free:
	free(sp);
out:
	*rcp = rc;
	return NULL;
}

void spill_close(struct spill *sp)
{
	if (!sp)
		return;
	if (sp->ring_ok) {
		spill_wait_idle(sp);
		if (sp->fixed_file)
			io_uring_unregister_files(&sp->ring);
		io_uring_queue_exit(&sp->ring);
	}
	/* The ring's teardown runs later in the kernel and may still hold
	 * the file: release the lock now so a reopen does not see "busy". */
	if (sp->fd >= 0)
		flock(sp->fd, LOCK_UN);
	if (sp->efd >= 0)
		close(sp->efd);
	if (sp->pool)
		munmap(sp->pool, sp->pool_len);
	free(sp->free_user);
	free(sp->free_stage);
	free(sp->free_block);
	free(sp->ios);
	if (sp->alloc)
		alloc_destroy(sp->alloc);
	for (size_t i = 0; i < sp->tab_cap; i++)
		free(sp->tab[i]);
	free(sp->tab);
	if (sp->fd >= 0)
		close(sp->fd);
	free(sp);
}

/* ---- the index of live extents ---- */

static size_t ix_slot(const struct spill *sp, uint64_t off)
{
	uint64_t x = (off / SPILL_ALIGN) * 0x9e3779b97f4a7c15ull;

	return (size_t)(x >> 17) & (sp->tab_cap - 1);
}

static struct sp_ent *ix_find(const struct spill *sp, uint64_t off)
{
	if (!sp->tab_cap)
		return NULL;
	for (size_t i = ix_slot(sp, off);; i = (i + 1) & (sp->tab_cap - 1)) {
		struct sp_ent *e = sp->tab[i];
		if (!e)
			return NULL;
		if (e->off == off)
			return e;
	}
}

static int ix_grow(struct spill *sp)
{
	size_t cap = sp->tab_cap ? sp->tab_cap * 2 : 1024;
	struct sp_ent **t = calloc(cap, sizeof(*t));

	if (!t)
		return -ENOMEM;
	struct sp_ent **old = sp->tab;
	size_t ocap = sp->tab_cap;
	sp->tab = t;
	sp->tab_cap = cap;
	for (size_t i = 0; i < ocap; i++) {
		if (!old[i])
			continue;
		size_t j = ix_slot(sp, old[i]->off);
		while (t[j])
			j = (j + 1) & (cap - 1);
		t[j] = old[i];
	}
	free(old);
	return 0;
}

/* Adds a live extent (the key is copied). */
static int ix_add(struct spill *sp, uint64_t off, uint64_t alloc_len, const struct ext_hdr *h,
		  const uint8_t *key)
{
	if ((sp->tab_n + 1) * 4 > sp->tab_cap * 3 && ix_grow(sp) < 0)
		return -ENOMEM;
	struct sp_ent *e = malloc(sizeof(*e) + h->key_len);
	if (!e)
		return -ENOMEM;
	e->off = off;
	e->alloc_len = alloc_len;
	e->h = *h;
	e->h.seg_uuid = sp->uuid;
	e->dying = false;
	memcpy(e->key, key, h->key_len);
	size_t i = ix_slot(sp, off);
	while (sp->tab[i])
		i = (i + 1) & (sp->tab_cap - 1);
	sp->tab[i] = e;
	sp->tab_n++;
	sp->extents++;
	return 0;
}

/* Removes and frees e (backward-shift deletion keeps probes short). */
static void ix_del(struct spill *sp, struct sp_ent *e)
{
	size_t mask = sp->tab_cap - 1, i = ix_slot(sp, e->off);

	while (sp->tab[i] != e)
		i = (i + 1) & mask;
	for (size_t j = (i + 1) & mask; sp->tab[j]; j = (j + 1) & mask) {
		size_t home = ix_slot(sp, sp->tab[j]->off);
		/* may tab[j] move back to i? only if i lies on its probe path */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			sp->tab[i] = sp->tab[j];
			i = j;
		}
	}
	sp->tab[i] = NULL;
	sp->tab_n--;
	if (sp->extents)
		sp->extents--;
	free(e);
}

static void ent_found(const struct sp_ent *e, struct ext_found *f)
{
	f->off = e->off;
	f->alloc_len = e->alloc_len;
	f->h = e->h;
	f->key = e->key;
	f->checksum_ok = true;
}

/* ---- the op engine ---- */

static void op_queue(struct spill *sp, struct sp_op *op)
{
	op->next = NULL;
	op->queued = true;
	if (sp->qtail)
		sp->qtail->next = op;
	else
		sp->qhead = op;
	sp->qtail = op;
	sp->st.queued++;
}

static void op_dequeue_head(struct spill *sp)
{
	struct sp_op *op = sp->qhead;

	sp->qhead = op->next;
	if (!sp->qhead)
		sp->qtail = NULL;
	op->next = NULL;
	op->queued = false;
	sp->st.queued--;
}

static struct io_uring_sqe *get_sqe(struct spill *sp)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&sp->ring);

	if (!sqe && sp->prepared) {
		io_uring_submit(&sp->ring);
		sp->prepared = 0;
		sqe = io_uring_get_sqe(&sp->ring);
	}
	return sqe;
}

static bool io_submit_one(struct spill *sp, struct sp_io *io)
{
	struct io_uring_sqe *sqe = get_sqe(sp);
	int fd = sp->fixed_file ? 0 : sp->fd;

	if (!sqe)
		return false;
	if (io->buf >= 0) {
		if (io->write)
			io_uring_prep_write_fixed(sqe, fd, io->mem, io->len, io->foff, io->buf);
		else
			io_uring_prep_read_fixed(sqe, fd, io->mem, io->len, io->foff, io->buf);
	} else if (io->write) {
		io_uring_prep_write(sqe, fd, io->mem, io->len, io->foff);
	} else {
		io_uring_prep_read(sqe, fd, io->mem, io->len, io->foff);
	}
	if (sp->fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, io);
	sp->prepared++;
	sp->inflight++;
	sp->st.inflight = sp->inflight;
	return true;
}

static void op_start(struct spill *sp, struct sp_op *op);
static void op_done(struct spill *sp, struct sp_op *op);

/* Issues the op's next pieces while the ring, ios and buffers allow.
 * Returns true when every piece has been issued. */
static bool op_issue(struct spill *sp, struct sp_op *op)
{
	if (op->need_block && op->block < 0) {
		if (!sp->nfree_block)
			return false;
		op->block = sp->free_block[--sp->nfree_block];
		op->need_block = false;
		op_start(sp, op);
	}
	while (op->ri < op->nr) {
		struct sp_range *r = &op->r[op->ri];
		if (op->pos >= r->len) {
			op->ri++;
			op->pos = 0;
			continue;
		}
		uint64_t p = op->pos;
		uint32_t l = (uint32_t)(r->len - p < SPILL_CHUNK ? r->len - p : SPILL_CHUNK);
		uint8_t *m = r->mem + p;
		bool aligned = !sp->direct ||
			((uintptr_t)m % sp->mem_align == 0 && l % SPILL_ALIGN == 0);
		bool direct = aligned && p + l <= r->mem_avail;
		int stage = -1;

		if (!sp->free_io)
			return false;
		if (!direct) {
			if (!sp->nfree_stage)
				return false;
			stage = sp->free_stage[--sp->nfree_stage];
		}
		struct sp_io *io = sp->free_io;
		sp->free_io = io->next;
		io->op = op;
		io->next = NULL;
		io->write = op->write;
		io->foff = r->foff + p;
		io->len = l;
		io->stage = stage;
		io->copy_to = NULL;
		io->copy_len = 0;
		if (direct) {
			io->mem = m;
			io->buf = fixed_index(sp, m, l);
		} else {
			uint64_t have = r->mem_avail > p ? r->mem_avail - p : 0;
			uint32_t n = (uint32_t)(have < l ? have : l);

			io->mem = stage_ptr(sp, stage);
			io->buf = sp->fixed_bufs ? stage : -1;
			if (op->write) {
				memcpy(io->mem, m, n);
				memset(io->mem + n, 0, l - n);
			} else {
				io->copy_to = m;
				io->copy_len = n;
			}
		}
		if (!io_submit_one(sp, io)) {
			if (stage >= 0)
				sp->free_stage[sp->nfree_stage++] = stage;
			io->next = sp->free_io;
			sp->free_io = io;
			return false;
		}
		op->inflight++;
		op->pos = p + l;
		if (op->write)
			sp->st.write_bytes += l;
		else
			sp->st.read_bytes += l;
	}
	return true;
}

static void pump(struct spill *sp)
{
	if (sp->pumping)
		return;
	sp->pumping = true;
	while (sp->retry) {
		struct sp_io *io = sp->retry;
		sp->retry = io->next;
		io->next = NULL;
		if (!io_submit_one(sp, io)) {
			io->next = sp->retry;
			sp->retry = io;
			break;
		}
	}
	while (sp->qhead && !sp->retry) {
		struct sp_op *op = sp->qhead;

		if (!op_issue(sp, op))
			break;
		op_dequeue_head(sp);
		if (!op->inflight)	/* nothing to move */
			op_done(sp, op);
	}
	if (sp->prepared) {
		io_uring_submit(&sp->ring);
		sp->prepared = 0;
	}
	sp->pumping = false;
}

static void hist_add(uint64_t *hist, uint64_t *sum, uint64_t ns)
{
	double s = (double)ns / 1e9;
	unsigned i = 0;

	while (i < SPILL_NBUCKETS && s > spill_buckets[i])
		i++;
	hist[i]++;
	*sum += ns;
}

/* Every piece of op came back: account, update the index, call back. */
static void op_done(struct spill *sp, struct sp_op *op)
{
	uint64_t lat = now_ns() - op->t0;
	spill_done_fn cb = op->cb;
	void *arg = op->arg;
	uint64_t off = op->off, len = op->len;
	int status = op->status;
	struct ext_hdr h;
	const uint8_t *key;

	if (op->block >= 0)
		sp->free_block[sp->nfree_block++] = op->block;
	switch (op->kind) {
	case OP_DEMOTE:
		if (status == 0 && ix_add(sp, op->off, op->len, &op->h, op->key) < 0)
			status = -ENOMEM;
		if (status == 0) {
			sp->st.demotions++;
		} else {
			sp->st.demote_errors++;
			alloc_free(sp->alloc, op->off);
		}
		hist_add(sp->st.write_hist, &sp->st.write_ns, lat);
		break;
	case OP_PROMOTE:
		if (status == 0) {
			/* trust nothing read back from the device */
			if (ext_decode(op->dst, op->size, sp->max_value, &h, &key) != 0 ||
			    h.generation != op->generation || !ext_verify(op->dst, &h)) {
				status = -EBADMSG;
			} else {
				uint8_t keybuf[1024];

				h.seg_uuid = op->dst_uuid;
				memcpy(keybuf, key, h.key_len);
				ext_encode(op->dst, &h, keybuf);
			}
		}
		if (status == 0)
			sp->st.promotions++;
		else
			sp->st.promote_errors++;
		hist_add(sp->st.read_hist, &sp->st.read_ns, lat);
		break;
	case OP_READ:
		sp->st.reads++;
		if (status)
			sp->st.read_errors++;
		hist_add(sp->st.read_hist, &sp->st.read_ns, lat);
		break;
	case OP_FREE:
		if (status == 0) {
			alloc_free(sp->alloc, op->off);
			ix_del(sp, op->ent);
			sp->st.frees++;
		} else {
			op->ent->dying = false;	/* still there: a later FREE may retry */
		}
		break;
	}
	free(op);
	if (cb)
		cb(arg, status, off, len);
}

static void io_done(struct spill *sp, struct sp_io *io, int res)
{
	struct sp_op *op = io->op;

	sp->inflight--;
	sp->st.inflight = sp->inflight;
	if (res == -EAGAIN || res == -EINTR) {
		io->next = sp->retry;
		sp->retry = io;
		return;
	}
	if (res < 0) {
		if (!op->status)
			op->status = res;
	} else if ((uint32_t)res < io->len) {
		/* Short transfer: buffered I/O may stop early; go on from there
		 * (direct I/O stays aligned or fails). */
		if (res == 0 || (sp->direct && res % SPILL_ALIGN)) {
			if (!op->status)
				op->status = -EIO;
		} else {
			uint32_t r = (uint32_t)res;

			if (io->copy_to) {
				/* staged read: hand over what came, read the rest
				 * into the buffer's start again */
				uint32_t k = r < io->copy_len ? r : io->copy_len;
				memcpy(io->copy_to, io->mem, k);
				io->copy_to += k;
				io->copy_len -= k;
			} else {
				io->mem += r;
			}
			io->foff += r;
			io->len -= r;
			io->next = sp->retry;
			sp->retry = io;
			return;
		}
	} else if (io->copy_to) {
		memcpy(io->copy_to, io->mem, io->copy_len);
	}
	if (io->stage >= 0)
		sp->free_stage[sp->nfree_stage++] = io->stage;
	io->next = sp->free_io;
	sp->free_io = io;
	op->inflight--;
	/* Done only once every piece was issued and came back. */
	if (!op->inflight && !op->queued)
		op_done(sp, op);
}

static unsigned reap(struct spill *sp)
{
	struct io_uring_cqe *cqe;
	unsigned n = 0;

	while (io_uring_peek_cqe(&sp->ring, &cqe) == 0) {
		struct sp_io *io = io_uring_cqe_get_data(cqe);
		int res = cqe->res;

		io_uring_cqe_seen(&sp->ring, cqe);
		n++;
		if (io)
			io_done(sp, io, res);
	}
	return n;
}

int spill_event_fd(const struct spill *sp)
{
	return sp->efd;
}

void spill_complete(struct spill *sp)
{
	uint64_t v;

	if (read(sp->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_debug("spill: eventfd read: %s", strerror(errno));
	do {
		reap(sp);
		pump(sp);
	} while (io_uring_cq_ready(&sp->ring));
}

void spill_wait_idle(struct spill *sp)
{
	for (;;) {
		pump(sp);
		/* With nothing in flight every buffer is back, so a queued op
		 * could have started: the queue is empty too. */
		if (!sp->inflight)
			break;
		struct io_uring_cqe *cqe;
		int rc = io_uring_wait_cqe(&sp->ring, &cqe);
		if (rc < 0 && rc != -EINTR && rc != -EAGAIN) {
			log_err("spill: waiting for completions: %s", strerror(-rc));
			break;
		}
		reap(sp);
	}
}

bool spill_idle(const struct spill *sp)
{
	return !sp->inflight && !sp->qhead && !sp->retry;
}

/* ---- operations ---- */

/* The op got its block buffer: set up its ranges. */
static void op_start(struct spill *sp, struct sp_op *op)
{
	uint8_t *b = block_ptr(sp, op->block);
	struct ext_hdr h = op->kind == OP_FREE ? op->ent->h : op->h;

	h.seg_uuid = sp->uuid;
	if (op->kind == OP_FREE) {
		/* The tombstone is rebuilt from the index: the header (so a
		 * scan can still count it) with the dead magic; the rest of
		 * the block, the start of a dead value, becomes zeros. */
		memset(b, 0, SPILL_ALIGN);
		ext_encode(b, &h, op->ent->key);
		ext_tombstone(b);
		op->r[0] = (struct sp_range){ op->off, SPILL_ALIGN, b, SPILL_ALIGN };
		op->nr = 1;
		return;
	}
	/* demote: the first block carries the header, rewritten for this file */
	uint64_t first = op->size < SPILL_ALIGN ? op->size : SPILL_ALIGN;

	memcpy(b, op->src, first);
	memset(b + first, 0, SPILL_ALIGN - first);
	ext_encode(b, &h, op->key);
	op->r[0] = (struct sp_range){ op->off, sp->direct ? SPILL_ALIGN : first, b, SPILL_ALIGN };
	op->nr = 1;
	if (op->size > SPILL_ALIGN) {
		uint64_t rest = op->size - SPILL_ALIGN;

		op->r[1] = (struct sp_range){
			op->off + SPILL_ALIGN,
			sp->direct ? round_up(rest, SPILL_ALIGN) : rest,
			(uint8_t *)(uintptr_t)op->src + SPILL_ALIGN,
			/* the padding after the extent is written straight from
			 * memory when it is there (no copy), never past avail */
			op->dst_len - SPILL_ALIGN,
		};
		op->nr = 2;
	}
}

static struct sp_op *op_new(enum sp_kind kind, spill_done_fn cb, void *arg)
{
	struct sp_op *op = calloc(1, sizeof(*op));

	if (!op)
		return NULL;
	op->kind = kind;
	op->cb = cb;
	op->arg = arg;
	op->block = -1;
	op->t0 = now_ns();
	return op;
}

int spill_demote(struct spill *sp, const void *ext, uint64_t avail, uint64_t generation,
		 spill_done_fn cb, void *arg)
{
	struct ext_hdr h;
	const uint8_t *key;
	uint64_t size, alloc_len, off;
	int rc = ext_decode(ext, avail, sp->max_value, &h, &key);

	/* not the extent the caller thinks is there */
	if (rc < 0 || h.generation != generation)
		return -ESTALE;
	size = ext_size(h.key_len, h.value_len);
	/* Never copy bad bytes to where they would outlive the segment. */
	if (!ext_verify(ext, &h))
		return -EBADMSG;
	struct sp_op *op = op_new(OP_DEMOTE, cb, arg);
	if (!op)
		return -ENOMEM;
	off = alloc_alloc(sp->alloc, size, &alloc_len);
	if (off == UINT64_MAX) {
		free(op);
		return -ENOSPC;
	}
	op->off = off;
	op->len = alloc_len;
	op->generation = generation;
	op->src = ext;
	op->dst_len = avail;
	op->size = size;
	op->h = h;
	op->key = key;
	op->need_block = true;
	op->write = true;
	sp->scanned = true;	/* the index is the truth from now on */
	op_queue(sp, op);
	pump(sp);
	return 0;
}

/* The live extent at off, if it holds generation: 0 or -ESTALE (none there,
 * being freed, or another generation: the caller's replica is stale). */
static int live_ent(struct spill *sp, uint64_t off, uint64_t generation, struct sp_ent **ep)
{
	struct sp_ent *e = ix_find(sp, off);

	if (!e || e->dying)
		return -ESTALE;
	if (e->h.generation != generation)
		return -ESTALE;
	*ep = e;
	return 0;
}

int spill_promote(struct spill *sp, uint64_t off, uint64_t generation, void *dst,
		  uint64_t dst_len, uint64_t dst_uuid, spill_done_fn cb, void *arg)
{
	struct sp_ent *e;
	int rc = live_ent(sp, off, generation, &e);

	if (rc)
		return rc;
	uint64_t size = ext_size(e->h.key_len, e->h.value_len);
	if (size > dst_len)
		return -ERANGE;
	struct sp_op *op = op_new(OP_PROMOTE, cb, arg);
	if (!op)
		return -ENOMEM;
	op->off = off;
	op->len = size;
	op->size = size;
	op->generation = generation;
	op->dst = dst;
	op->dst_len = dst_len;
	op->dst_uuid = dst_uuid;
	op->r[0] = (struct sp_range){
		off, sp->direct ? round_up(size, SPILL_ALIGN) : size, dst, size,
	};
	op->nr = 1;
	op_queue(sp, op);
	pump(sp);
	return 0;
}

int spill_read(struct spill *sp, uint64_t off, uint64_t len, void *dst,
	       spill_done_fn cb, void *arg)
{
	/* Direct I/O reads whole blocks from an extent's (aligned) start; the
	 * part past len is staged and dropped. The file ends on a block
	 * boundary, so the rounded read stays inside it. */
	if (!spill_range_ok(sp, off, len) || (sp->direct && off % SPILL_ALIGN))
		return -EINVAL;
	struct sp_op *op = op_new(OP_READ, cb, arg);
	if (!op)
		return -ENOMEM;
	op->off = off;
	op->len = len;
	op->r[0] = (struct sp_range){
		off, sp->direct ? round_up(len, SPILL_ALIGN) : len, dst, len,
	};
	op->nr = 1;
	op_queue(sp, op);
	pump(sp);
	return 0;
}

int spill_free(struct spill *sp, uint64_t off, uint64_t generation,
	       spill_done_fn cb, void *arg)
{
	struct sp_ent *e;
	int rc = live_ent(sp, off, generation, &e);

	if (rc) {
		sp->st.free_stale++;
		return rc;
	}
	struct sp_op *op = op_new(OP_FREE, cb, arg);
	if (!op)
		return -ENOMEM;
	op->off = off;
	op->len = e->alloc_len;
	op->generation = generation;
	op->ent = e;
	e->dying = true;
	op->need_block = true;
	op->write = true;
	op_queue(sp, op);
	pump(sp);
	return 0;
}

bool spill_lookup(const struct spill *sp, uint64_t off, struct ext_found *f)
{
	struct sp_ent *e = ix_find(sp, off);

	if (!e || e->dying)
		return false;
	if (f)
		ent_found(e, f);
	return true;
}

int spill_foreach(const struct spill *sp, int (*cb)(const struct ext_found *f, void *arg),
		  void *arg)
{
	for (size_t i = 0; i < sp->tab_cap; i++) {
		struct sp_ent *e = sp->tab[i];
		struct ext_found f;

		if (!e || e->dying)
			continue;
		ent_found(e, &f);
		int rc = cb(&f, arg);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- buffers for callers ---- */

void *spill_buf_get(struct spill *sp)
{
	if (!sp->nfree_user)
		return NULL;
	return sp->pool + (size_t)sp->free_user[--sp->nfree_user] * sp->bufsz;
}

void spill_buf_put(struct spill *sp, void *buf)
{
	uintptr_t a = (uintptr_t)buf, base = (uintptr_t)sp->pool;

	if (!buf || a < base || (a - base) % sp->bufsz || (a - base) / sp->bufsz >= sp->nbufs)
		return;
	sp->free_user[sp->nfree_user++] = (int)((a - base) / sp->bufsz);
}

size_t spill_buf_size(const struct spill *sp)
{
	return sp->bufsz;
}

unsigned spill_bufs_free(const struct spill *sp)
{
	return sp->nfree_user;
}

/* ---- scan ---- */

struct scan_win {
	struct spill *sp;
	uint8_t *buf;
	uint64_t start, len;		/* file range held in buf */
};

/* Pointer to [p, p+n) of the file (n <= SCAN_WIN - SPILL_ALIGN), reading a
 * new window from p's block when needed; NULL with *rc on a read error. */
static const uint8_t *win_get(struct scan_win *w, uint64_t p, uint64_t n, int *rc)
{
	if (p >= w->start && p + n <= w->start + w->len)
		return w->buf + (p - w->start);
	uint64_t start = p & ~(uint64_t)(SPILL_ALIGN - 1);
	uint64_t len = w->sp->size - start < SCAN_WIN ? w->sp->size - start : SCAN_WIN;

	*rc = full_io(w->sp->fd, w->buf, len, start, false);
	if (*rc < 0) {
		w->len = 0;
		return NULL;
	}
	w->start = start;
	w->len = len;
	return w->buf + (p - start);
}

int spill_scan(struct spill *sp, int (*cb)(const struct ext_found *f, void *arg), void *arg,
	       struct ext_scan_stats *st)
{
	struct ext_scan_stats dummy;
	struct scan_win w = { .sp = sp };
	uint8_t hdr[HDR_MAX];
	uint64_t pos = SPILL_DATA_OFF, end = sp->size;
	int rc = 0;

	if (!st)
		st = &dummy;
	memset(st, 0, sizeof(*st));
	if (sp->scanned || sp->qhead || sp->inflight)
		return -EALREADY;
	sp->scanned = true;
	if (posix_memalign((void **)&w.buf, SPILL_ALIGN, SCAN_WIN))
		return -ENOMEM;

	while (pos < end && end - pos >= EXT_HDR_SIZE) {
		if (pos < w.start || pos >= w.start + w.len) {
			/* Leaving the window: skip what was never written
			 * (holes and unwritten preallocation read as zeros). */
			off_t d = lseek(sp->fd, (off_t)pos, SEEK_DATA);
			if (d < 0 && errno == ENXIO)
				break;
			if (d > (off_t)pos) {
				pos = (uint64_t)d & ~(uint64_t)(SPILL_ALIGN - 1);
				continue;
			}
		}
		uint64_t n = end - pos < HDR_MAX ? end - pos : HDR_MAX;
		const uint8_t *p = win_get(&w, pos, n, &rc);
		if (!p)
			goto out;
		memcpy(hdr, p, n);

		struct ext_found f;
		const uint8_t *key;
		/* avail is the rest of the file: decode reads at most the
		 * header and key_len <= 1024 key bytes (checked first), all in
		 * hdr, and checks the value length against the file. */
		memset(&f, 0, sizeof(f));
		int r = ext_decode(hdr, end - pos, sp->max_value, &f.h, &key);
		uint64_t size = ext_size(f.h.key_len, f.h.value_len);
		if (r == -ENOENT && f.h.seg_uuid == sp->uuid)
			st->tombstones++;
		if (r < 0 || f.h.seg_uuid != sp->uuid) {
			if (r == 0)
				st->foreign++;
			pos += SPILL_ALIGN;
			continue;
		}
		/* Stream the value through the window into the checksum. */
		struct ext_csum cs;
		if (ext_csum_init(&cs) < 0) {
			rc = -ENOMEM;
			goto out;
		}
		uint64_t v = pos + EXT_HDR_SIZE + f.h.key_len, vend = pos + size;
		while (v < vend) {
			uint64_t k = vend - v < SCAN_WIN - SPILL_ALIGN ? vend - v : SCAN_WIN - SPILL_ALIGN;
			const uint8_t *q = win_get(&w, v, k, &rc);
			if (!q) {
				ext_csum_final(&cs);
				goto out;
			}
			ext_csum_update(&cs, q, k);
			v += k;
		}
		bool ok = ext_csum_final(&cs) == f.h.value_checksum;
		if (!ok) {
			st->bad_checksum++;
			pos += SPILL_ALIGN;
			continue;
		}
		f.off = pos;
		f.alloc_len = round_up(size, SPILL_ALIGN);
		f.key = hdr + EXT_HDR_SIZE;
		f.checksum_ok = true;
		if (alloc_reserve(sp->alloc, f.off, f.alloc_len) < 0) {
			pos += SPILL_ALIGN;	/* cannot happen: we jump over extents */
			continue;
		}
		rc = ix_add(sp, f.off, f.alloc_len, &f.h, f.key);
		if (rc < 0)
			goto out;
		st->live++;
		st->live_bytes += f.alloc_len;
		st->value_bytes += f.h.value_len;
		if (cb) {
			rc = cb(&f, arg);
			if (rc)
				goto out;
		}
		pos += f.alloc_len;
	}
out:
	free(w.buf);
	return rc;
}

/* ---- small accessors, stats ---- */

bool spill_range_ok(const struct spill *sp, uint64_t off, uint64_t len)
{
	return off >= SPILL_DATA_OFF && off < sp->size && len > 0 && len <= sp->size - off;
}

uint64_t spill_uuid(const struct spill *sp) { return sp->uuid; }
bool spill_is_direct(const struct spill *sp) { return sp->direct; }
bool spill_created(const struct spill *sp) { return sp->created; }
const char *spill_path(const struct spill *sp) { return sp->path; }

void spill_stats(const struct spill *sp, struct spill_stats *st)
{
	struct alloc_stats as;

	*st = sp->st;
	alloc_stats(sp->alloc, &as);
	st->capacity = as.size;
	st->used = as.size - as.free_bytes;
	st->extents = sp->extents;
	st->direct = sp->direct;
}

static void metric_hist(struct sbuf *b, const char *name, const char *help,
			const uint64_t *hist, uint64_t sum_ns)
{
	uint64_t cum = 0;

	sb_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (unsigned i = 0; i < SPILL_NBUCKETS; i++) {
		cum += hist[i];
		sb_printf(b, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, spill_buckets[i], cum);
	}
	cum += hist[SPILL_NBUCKETS];
	sb_printf(b, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum %.9f\n%s_count %" PRIu64 "\n",
		  name, cum, name, (double)sum_ns / 1e9, name, cum);
}

void spill_metrics(const struct spill *sp, struct sbuf *b)
{
	struct spill_stats s;

	spill_stats(sp, &s);
#define G(name, help, v) sb_printf(b, "# HELP kvpool_node_spill_" name " " help "\n" \
				   "# TYPE kvpool_node_spill_" name " gauge\n" \
				   "kvpool_node_spill_" name " %" PRIu64 "\n", (uint64_t)(v))
#define C(name, help, v) sb_printf(b, "# HELP kvpool_node_spill_" name " " help "\n" \
				   "# TYPE kvpool_node_spill_" name " counter\n" \
				   "kvpool_node_spill_" name " %" PRIu64 "\n", (uint64_t)(v))
	G("capacity_bytes", "Data area of the spill file.", s.capacity);
	G("used_bytes", "Spill bytes held by extents.", s.used);
	G("extents", "Extents in the spill file.", s.extents);
	G("direct_io", "1 when the spill file uses O_DIRECT.", s.direct);
	G("queued", "Spill operations waiting for the ring or buffers.", s.queued);
	C("demotions_total", "Extents copied from memory to the spill file.", s.demotions);
	C("demote_errors_total", "Demotions that failed.", s.demote_errors);
	C("promotions_total", "Extents copied from the spill file back to memory.", s.promotions);
	C("promote_errors_total", "Promotions that failed.", s.promote_errors);
	C("frees_total", "Spill extents tombstoned and released.", s.frees);
	C("free_stale_total", "Spill FREEs that named no live extent.", s.free_stale);
	C("reads_total", "Reads of spill extents.", s.reads);
	C("read_errors_total", "Reads of spill extents that failed.", s.read_errors);
	C("read_bytes_total", "Bytes read from the spill file.", s.read_bytes);
	C("write_bytes_total", "Bytes written to the spill file.", s.write_bytes);
#undef G
#undef C
	metric_hist(b, "kvpool_node_spill_read_seconds",
		    "Latency of spill reads and promotions.", s.read_hist, s.read_ns);
	metric_hist(b, "kvpool_node_spill_write_seconds",
		    "Latency of demotions (spill writes).", s.write_hist, s.write_ns);
}

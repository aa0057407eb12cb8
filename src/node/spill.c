/* spill: see spill.h. The io_uring, its registered buffers and the
 * operation engine; the file, the start-up scan and the index of live
 * extents are in spill_file.c (struct spill is in spill_i.h). Each operation
 * (demote, promote, read, free) is one struct sp_op whose byte ranges are
 * cut into pieces of at most SPILL_CHUNK; pieces go to the ring while it has
 * entries, the rest waits in a FIFO. Pieces whose memory O_DIRECT cannot use
 * (misaligned, or not all readable/writable there) go through registered
 * staging buffers. Loop thread only.
 */
#include "spill_i.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "http.h"
#include "log.h"

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


/* ---- ring and buffers ---- */

static int ring_setup(struct spill *sp, unsigned nbufs, size_t bufsz, char *err, size_t errlen)
{
	int rc;

	rc = io_uring_queue_init(sp->qd, &sp->ring, 0);
	if (rc < 0) {
		log_seterr(err, errlen, "spill: io_uring setup (%u entries): %s", sp->qd, strerror(-rc));
		return rc;
	}
	sp->ring_ok = true;
	sp->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (sp->efd < 0) {
		rc = -errno;
		log_seterr(err, errlen, "spill: eventfd: %s", strerror(-rc));
		return rc;
	}
	rc = io_uring_register_eventfd(&sp->ring, sp->efd);
	if (rc < 0) {
		log_seterr(err, errlen, "spill: io_uring eventfd: %s", strerror(-rc));
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
		log_seterr(err, errlen, "spill: buffer pool of %zu bytes: %s", sp->pool_len,
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
		log_seterr(err, errlen, "spill: out of memory");
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
		log_seterr(err, errlen, "spill: bad path");
		rc = -EINVAL;
		goto out;
	}
	sp = calloc(1, sizeof(*sp));
	if (!sp) {
		log_seterr(err, errlen, "spill: out of memory");
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
		log_seterr(err, errlen, "spill file %s: size %" PRIu64 " is below the minimum of %u bytes",
		     o->path, o->size, SPILL_DATA_OFF + SPILL_ALIGN);
		rc = -EINVAL;
		goto out_free;
	}
	if (posix_memalign((void **)&block, SPILL_ALIGN, SPILL_ALIGN)) {
		block = NULL;
		log_seterr(err, errlen, "spill: out of memory");
		rc = -ENOMEM;
		goto out_free;
	}
	rc = spill_file_open(sp, o, block, err, errlen);
	if (rc < 0)
		goto out_close;
	sp->direct = o->direct_io && spill_file_direct(sp, block);

	size_t bufsz = o->buf_size ? (o->buf_size + SPILL_ALIGN - 1) & ~(size_t)(SPILL_ALIGN - 1) :
		       SPILL_CHUNK;
	rc = ring_setup(sp, o->nbufs ? o->nbufs : 16, bufsz, err, errlen);
	if (rc < 0)
		goto out_ring;
	sp->alloc = alloc_create(SPILL_DATA_OFF, sp->size - SPILL_DATA_OFF, SPILL_ALIGN);
	if (!sp->alloc) {
		log_seterr(err, errlen, "spill: allocator for %" PRIu64 " bytes: out of memory", sp->size);
		rc = -ENOMEM;
		goto out_ring;
	}
	sp->st.capacity = sp->size - SPILL_DATA_OFF;
	sp->st.direct = sp->direct;
	free(block);
	{
		char b[32];
		log_info("spill file %s: %s, %s I/O, %s, queue depth %u%s", sp->path,
			 spill_human(sp->size, b, sizeof(b)), sp->direct ? "direct" : "buffered",
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
	spill_ix_free(sp);
	if (sp->fd >= 0)
		close(sp->fd);
	free(sp);
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
	uint64_t lat = clock_now_ns() - op->t0;
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
		if (status == 0 && spill_ix_add(sp, op->off, op->len, &op->h, op->key) < 0)
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
			spill_ix_del(sp, op->ent);
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
			sp->direct ? spill_round_up(rest, SPILL_ALIGN) : rest,
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
	op->t0 = clock_now_ns();
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
	struct sp_ent *e = spill_ix_find(sp, off);

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
		off, sp->direct ? spill_round_up(size, SPILL_ALIGN) : size, dst, size,
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
		off, sp->direct ? spill_round_up(len, SPILL_ALIGN) : len, dst, len,
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

/* ---- stats ---- */

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

/* spill_file: the spill file itself (see spill.h) — opening, locking,
 * creating with fallocate and a segment header, the O_DIRECT probe — the
 * start-up scan that finds the extents already in it, and the index of live
 * extents (offset -> header and key) that answers lookups, FREE and PROMOTE
 * checks and REPORT listings. The ring and the operations are in spill.c.
 * Loop thread; spill_scan may run on another thread before anything else.
 */
#include "spill_i.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "alloc.h"
#include "log.h"
#include "segment.h"

#define SCAN_WIN (8u << 20)		/* spill_scan's read window */
#define HDR_MAX (EXT_HDR_SIZE + 1024)	/* header + longest key */
#define LOCK_WAIT_MS 2000		/* default wait for a dying owner's lock */
#define LOCK_WAIT_US 20000

const char *spill_human(uint64_t v, char *buf, size_t len)
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
	log_seterr(err, errlen, "spill file %s: cannot reserve %s: %s (%s has %s free)", sp->path,
	     spill_human(size, b1, sizeof(b1)), strerror(rc), dir, spill_human(avail, b2, sizeof(b2)));
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

bool spill_file_direct(struct spill *sp, uint8_t *block)
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
		log_seterr(err, errlen, "spill file %s: truncate: %s", sp->path, strerror(-rc));
		return rc;
	}
	rc = posix_fallocate(sp->fd, 0, (off_t)sp->size);
	if (rc) {
		if (rc == ENOSPC || rc == EDQUOT || rc == EFBIG)
			nospace(sp, sp->size, rc, err, errlen);
		else
			log_seterr(err, errlen, "spill file %s: fallocate %" PRIu64 " bytes: %s",
			     sp->path, sp->size, strerror(rc));
		/* Give back what a partial fallocate took. */
		if (ftruncate(sp->fd, 0) < 0 && fresh_file)
			log_debug("spill: truncate after failed fallocate: %s", strerror(errno));
		return -rc;
	}
	memset(&info, 0, sizeof(info));
	/* Format 1: extents from 4096 on, no commit map (the spill index
	 * is rebuilt from a scan of the file, segment.h). */
	info.version = 1;
	info.align = SPILL_ALIGN;
	info.size = sp->size;
	do {
		if (getrandom(&info.uuid, sizeof(info.uuid), 0) != sizeof(info.uuid))
			info.uuid = clock_now_ns() ^ ((uint64_t)getpid() << 32);
	} while (!info.uuid);
	info.created_ns = (uint64_t)time(NULL) * 1000000000ull;
	snprintf(info.name, sizeof(info.name), "spill:%s", name ? name : "");
	segment_header_write(block, &info);
	rc = full_io(sp->fd, block, SPILL_ALIGN, 0, true);
	if (rc == 0 && fdatasync(sp->fd) < 0)
		rc = -errno;
	if (rc < 0) {
		log_seterr(err, errlen, "spill file %s: writing the header: %s", sp->path, strerror(-rc));
		return rc;
	}
	sp->uuid = info.uuid;
	sp->created = true;
	return 0;
}

int spill_file_open(struct spill *sp, const struct spill_opts *o, uint8_t *block,
		     char *err, size_t errlen)
{
	struct segment_info info;
	struct stat st;
	char msg[192];
	int rc;

	sp->fd = open(sp->path, O_RDWR | O_CREAT | O_CLOEXEC, o->mode ? o->mode : 0600);
	if (sp->fd < 0) {
		rc = -errno;
		log_seterr(err, errlen, "spill file %s: %s", sp->path, strerror(-rc));
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
			log_seterr(err, errlen, "spill file %s: in use by another process", sp->path);
			return rc;
		}
		if (tries == 0)
			log_info("spill file %s: locked; waiting for its previous owner", sp->path);
		usleep(LOCK_WAIT_US);
	}
	if (fstat(sp->fd, &st) < 0) {
		rc = -errno;
		log_seterr(err, errlen, "spill file %s: %s", sp->path, strerror(-rc));
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		log_seterr(err, errlen, "spill file %s: not a regular file", sp->path);
		return -EINVAL;
	}
	if (st.st_size == 0)
		return file_create(sp, o->name, block, true, err, errlen);

	rc = full_io(sp->fd, block, SPILL_ALIGN, 0, false);
	if (rc < 0) {
		log_seterr(err, errlen, "spill file %s: reading the header: %s", sp->path, strerror(-rc));
		return rc;
	}
	if (all_zero(block, SEG_HDR_BYTES))	/* a creation that died early */
		return file_create(sp, o->name, block, false, err, errlen);
	rc = segment_header_check(block, SPILL_ALIGN, &info, msg, sizeof(msg));
	if (rc < 0) {
		log_seterr(err, errlen, "spill file %s exists and is not a kvpool spill file (%s); "
		     "remove it or choose another spill.path", sp->path, msg);
		return -EEXIST;
	}
	if (info.size != sp->size || info.align != SPILL_ALIGN ||
	    (uint64_t)st.st_size != info.size) {
		char b1[32], b2[32];

		log_warn("spill file %s holds %s, configured %s: re-created empty", sp->path,
			 spill_human(info.size, b1, sizeof(b1)), spill_human(sp->size, b2, sizeof(b2)));
		return file_create(sp, o->name, block, false, err, errlen);
	}
	sp->uuid = info.uuid;
	sp->created = false;
	return 0;
}

/* ---- the index of live extents ---- */

static size_t ix_slot(const struct spill *sp, uint64_t off)
{
	uint64_t x = (off / SPILL_ALIGN) * 0x9e3779b97f4a7c15ull;

	return (size_t)(x >> 17) & (sp->tab_cap - 1);
}

struct sp_ent *spill_ix_find(const struct spill *sp, uint64_t off)
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

int spill_ix_add(struct spill *sp, uint64_t off, uint64_t alloc_len, const struct ext_hdr *h,
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
void spill_ix_del(struct spill *sp, struct sp_ent *e)
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

void spill_ix_free(struct spill *sp)
{
	for (size_t i = 0; i < sp->tab_cap; i++)
		free(sp->tab[i]);
	free(sp->tab);
	sp->tab = NULL;
	sp->tab_cap = sp->tab_n = 0;
}

static void ent_found(const struct sp_ent *e, struct ext_found *f)
{
	f->off = e->off;
	f->alloc_len = e->alloc_len;
	f->h = e->h;
	f->key = e->key;
	f->verified = f->checksum_ok = true;	/* when the file was scanned */
}

bool spill_lookup(const struct spill *sp, uint64_t off, struct ext_found *f)
{
	struct sp_ent *e = spill_ix_find(sp, off);

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
		f.alloc_len = spill_round_up(size, SPILL_ALIGN);
		f.key = hdr + EXT_HDR_SIZE;
		f.verified = f.checksum_ok = true;
		if (alloc_reserve(sp->alloc, f.off, f.alloc_len) < 0) {
			pos += SPILL_ALIGN;	/* cannot happen: we jump over extents */
			continue;
		}
		rc = spill_ix_add(sp, f.off, f.alloc_len, &f.h, f.key);
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

/* ---- small accessors ---- */

bool spill_range_ok(const struct spill *sp, uint64_t off, uint64_t len)
{
	return off >= SPILL_DATA_OFF && off < sp->size && len > 0 && len <= sp->size - off;
}

uint64_t spill_uuid(const struct spill *sp) { return sp->uuid; }
bool spill_is_direct(const struct spill *sp) { return sp->direct; }
bool spill_created(const struct spill *sp) { return sp->created; }
const char *spill_path(const struct spill *sp) { return sp->path; }


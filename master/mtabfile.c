/* mtabfile: a lone master's table on disk; see mtabfile.h and docs/ha.md
 * "Lone restart".
 *
 * The file: a header (MTABFILE_MAGIC, u32 version, the cluster_id as a
 * u16-length string), then REPL frames exactly as a standby receives them
 * (wire.h header + body), except that each frame's reqid holds a checksum
 * of its body, so a corrupt file is refused rather than half believed.
 */
#include "mtabfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvpool.h"
#include "log.h"
#include "mrepl.h"

#define BODY_MAX (16u << 20)		/* mrepl cuts frames at 1 MiB plus a record */
#define RETRY_MS 10000			/* after a write error, the next try */

/* Changes before a new snapshot, at least (tests lower it). */
uint64_t mtabfile_rotate_min = 64ull << 20;

struct tabsink {
	struct master_client c;		/* not in m->clients: mrepl's view of the file */
	int fd;
	struct wbuf buf;		/* frames recorded since the last tick */
	uint64_t written;		/* bytes in the file */
	bool broken;			/* mrepl lost records (out of memory) */
};

struct mtabfile {
	char path[CONF_STR];
	char tmp[CONF_STR + 8];		/* path.new: the snapshot being written */
	struct tabsink *cur;		/* the file at path (its snapshot complete) */
	struct tabsink *next;		/* the snapshot at tmp */
	uint64_t snap_bytes;		/* cur's size when its snapshot ended */
	uint64_t next_ms;		/* snapshot started (for the log) */
	uint64_t retry_ms;		/* no file yet (a write failed, a warm start): begin one then */
};

/* Version 1's sum: a chain of dependent multiplies, 8 bytes each (7% of a
 * 3M-object load); still read, never written. */
static uint64_t sum_v1(const uint8_t *p, size_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ n, v;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		memcpy(&v, p + i, 8);
		h = (h ^ v) * 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	v = 0;
	memcpy(&v, p + i, n - i);
	h = (h ^ v) * 0xc4ceb9fe1a85ec53ull;
	return h ^ h >> 29;
}

uint64_t mtabfile_sum(uint32_t version, const uint8_t *p, size_t n)
{
	return version == 1 ? sum_v1(p, n) : XXH3_64bits(p, n);
}

/* magic, version, cluster_id */
static void header(struct wbuf *w, const char *cluster_id)
{
	wb_bytes(w, MTABFILE_MAGIC, 8);
	wb_u32(w, MTABFILE_VERSION);
	wb_cstr(w, cluster_id);
}

/* ---- writing ---- */

/* mrepl's send: whole REPL frames; each gets its checksum. */
static int sink_send(void *arg, const void *p, size_t n)
{
	struct tabsink *k = arg;
	const uint8_t *b = p;
	size_t at = k->buf.len;

	wb_bytes(&k->buf, p, n);
	if (k->buf.oom) {
		k->broken = true;
		return 0;
	}
	for (size_t o = 0; o + WIRE_HDR_SIZE <= n;) {
		struct wire_hdr h;
		if (wire_hdr_decode(b + o, &h, UINT32_MAX, 0) ||
		    h.body_len > n - o - WIRE_HDR_SIZE) {
			k->broken = true;	/* cannot happen: mrepl sends whole frames */
			return 0;
		}
		h.reqid = mtabfile_sum(MTABFILE_VERSION, b + o + WIRE_HDR_SIZE, h.body_len);
		wire_hdr_encode(&h, k->buf.p + at + o);
		o += WIRE_HDR_SIZE + h.body_len;
	}
	return 0;
}

static void sink_close(void *arg)
{
	struct tabsink *k = arg;

	k->broken = true;	/* a gap in the stream (mrepl's send_to) */
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			int err = -errno;
			if (err == -EINTR)
				continue;
			return err;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int sink_write(struct tabsink *k)
{
	int rc = 0;

	if (k->broken)
		return -EIO;
	if (k->buf.len) {
		rc = write_all(k->fd, k->buf.p, k->buf.len);
		k->written += k->buf.len;
		wb_reset(&k->buf);
	}
	return rc;
}

static void sink_free(struct master *m, struct tabsink *k)
{
	if (!k)
		return;
	mrepl_client_gone(m, &k->c);
	close(k->fd);
	wb_free(&k->buf);
	free(k);
}

/* A fresh snapshot to tmp; changes from now on reach it too. */
static int snap_begin(struct master *m, struct mtabfile *t)
{
	struct tabsink *k = calloc(1, sizeof(*k));
	int rc;

	if (!k)
		return -ENOMEM;
	wb_init(&k->buf);
	k->c.m = m;
	k->c.send = sink_send;
	k->c.close = sink_close;
	k->c.arg = k;
	snprintf(k->c.name, sizeof(k->c.name), "table file");
	k->fd = open(t->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (k->fd < 0) {
		rc = -errno;
		goto out_free;
	}
	header(&k->buf, m->conf.master.cluster_id);
	rc = mrepl_follow(m, &k->c);
	if (rc) {
		rc = rc == KVP_ENOMEM ? -ENOMEM : -EBUSY;
		goto out_close;
	}
	t->next = k;
	t->next_ms = m->now_ms;
	return 0;

out_close:
	close(k->fd);
	unlink(t->tmp);
out_free:
	wb_free(&k->buf);
	free(k);
	return rc;
}

/* Gives the file up after an error: a restart rebuilds from the reports
 * (an old file with a gap would be believed); tried again later. */
static void give_up(struct master *m, struct mtabfile *t, int err)
{
	log_err("table file %s: %s: removed; a restart would rebuild from the nodes' reports; "
		"trying again in %d s", t->path, err == -EIO ? "records lost (out of memory)" :
		strerror(-err), RETRY_MS / 1000);
	sink_free(m, t->next);
	sink_free(m, t->cur);
	t->next = t->cur = NULL;
	unlink(t->tmp);
	unlink(t->path);
	t->retry_ms = m->now_ms + RETRY_MS;
}

void mtabfile_tick(struct master *m)
{
	struct mtabfile *t = m->tabfile;
	int rc = 0;

	if (!t)
		return;
	if (!t->cur && !t->next) {
		if (m->now_ms < t->retry_ms)
			return;
		rc = snap_begin(m, t);
		if (rc) {
			give_up(m, t, rc);
			return;
		}
	}
	if (t->cur && (rc = sink_write(t->cur)) < 0)
		goto out_err;
	if (t->next && (rc = sink_write(t->next)) < 0)
		goto out_err;
	if (t->next && mrepl_synced(m, &t->next->c)) {
		if (rename(t->tmp, t->path) < 0) {
			rc = -errno;
			goto out_err;
		}
		sink_free(m, t->cur);
		t->cur = t->next;
		t->next = NULL;
		t->snap_bytes = t->cur->written;
		log_notice("table file %s: snapshot of %llu keys written (%llu MiB, %llu ms)",
			   t->path, (unsigned long long)m->keys,
			   (unsigned long long)(t->snap_bytes >> 20),
			   (unsigned long long)(m->now_ms - t->next_ms));
	}
	/* the changes outgrew the snapshot: a new one replaces both */
	if (t->cur && !t->next &&
	    t->cur->written - t->snap_bytes > (t->snap_bytes > mtabfile_rotate_min
						       ? t->snap_bytes : mtabfile_rotate_min) &&
	    (rc = snap_begin(m, t)) < 0)
		goto out_err;
	return;

out_err:
	give_up(m, t, rc);
}

int mtabfile_start(struct master *m, const char *path, uint64_t delay_ms)
{
	struct mtabfile *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return -ENOMEM;
	snprintf(t->path, sizeof(t->path), "%s", path);
	snprintf(t->tmp, sizeof(t->tmp), "%s.new", path);
	m->tabfile = t;
	if (delay_ms) {
		t->retry_ms = m->now_ms + delay_ms;	/* mtabfile_tick begins it then */
		return 0;
	}
	rc = snap_begin(m, t);
	if (rc) {
		log_err("table file %s: cannot write %s: %s; running without it", path, t->tmp,
			strerror(-rc));
		free(t);
		m->tabfile = NULL;
	}
	return rc;
}

void mtabfile_stop(struct master *m)
{
	struct mtabfile *t = m->tabfile;

	if (!t)
		return;
	mrepl_flush(m);
	if (t->cur)
		sink_write(t->cur);
	sink_free(m, t->cur);
	if (t->next) {
		sink_free(m, t->next);
		unlink(t->tmp);		/* incomplete: the file at path stays */
	}
	free(t);
	m->tabfile = NULL;
}

/* ---- loading ---- */

static int apply(struct master *m, const uint8_t *p, size_t len, char *why, size_t cap)
{
	struct rbuf r;
	size_t idlen, off;
	const uint8_t *id;

	rb_init(&r, p, len);
	const uint8_t *magic = rb_take(&r, 8);
	uint32_t ver = rb_u32(&r);
	id = rb_str(&r, &idlen);
	if (!rb_ok(&r) || memcmp(magic, MTABFILE_MAGIC, 8)) {
		snprintf(why, cap, "not a kvpool table file");
		return -EINVAL;
	}
	if (ver < 1 || ver > MTABFILE_VERSION) {
		snprintf(why, cap, "format version %u, this master reads 1 to %u", ver,
			 MTABFILE_VERSION);
		return -EINVAL;
	}
	if (idlen != strlen(m->conf.master.cluster_id) ||
	    memcmp(id, m->conf.master.cluster_id, idlen)) {
		snprintf(why, cap, "written for cluster_id '%.*s', this master's is '%s'",
			 (int)(idlen > 128 ? 128 : idlen), (const char *)id,
			 m->conf.master.cluster_id);
		return -EINVAL;
	}
	off = len - (size_t)(r.end - r.p);
	m->repl_synced = false;
	/* an ADD takes ~60-80 bytes with short keys: a bound, not a count */
	if (!m->keys && len / 64 < (64u << 20)) {
		objtab_presize(&m->objs, len / 64);
		mrepl_reserve_presize(m, len / 64);
		/* an object's slab block is at most ~1.2x its ADD record */
		objtab_prefault_begin(&m->objs, len / 4 * 5);
	}
	while (off < len) {
		struct wire_hdr h;

		if (len - off < WIRE_HDR_SIZE)
			break;		/* cut short */
		int rc = wire_hdr_decode(p + off, &h, BODY_MAX, 0);
		if (rc || h.opcode != WIRE_OP_REPL) {
			snprintf(why, cap, "bad frame at byte %zu", off);
			return -EINVAL;
		}
		if (h.body_len > len - off - WIRE_HDR_SIZE)
			break;		/* cut short */
		const uint8_t *body = p + off + WIRE_HDR_SIZE;
		if (h.reqid != mtabfile_sum(ver, body, h.body_len)) {
			snprintf(why, cap, "checksum mismatch in the frame at byte %zu", off);
			return -EINVAL;
		}
		rc = mrepl_apply(m, body, h.body_len);
		if (rc) {
			snprintf(why, cap, "%s in the frame at byte %zu",
				 rc == KVP_ENOMEM ? "out of memory" : "a record does not decode", off);
			return -EINVAL;
		}
		off += WIRE_HDR_SIZE + h.body_len;
	}
	if (!m->repl_synced) {
		snprintf(why, cap, "incomplete: it ends (byte %zu of %zu) before its snapshot does",
			 off, len);
		return -EINVAL;
	}
	if (off < len)
		log_notice("table file: the last %zu bytes are a frame cut short (the master died "
			   "writing it): left out, the nodes' reports settle it", len - off);
	return 0;
}

int mtabfile_apply(struct master *m, const uint8_t *p, size_t len, char *why, size_t cap)
{
	m->tabfile_loading = true;	/* mrepl_apply() logs for a standby only */
	objtab_kx_defer(&m->objs, true);	/* the changes' keys: in one ordered pass */
	int rc = apply(m, p, len, why, cap);
	mrepl_reserve_flush(m);		/* the file's fresh extents, in offset order */
	mrepl_reserve_release(m);
	if (objtab_kx_defer(&m->objs, false) && !rc) {
		snprintf(why, cap, "out of memory for the key index");
		rc = -EINVAL;
	}
	objtab_prefault_end(&m->objs);
	m->tabfile_loading = false;
	return rc;
}

int mtabfile_load(struct master *m, const char *path, char *why, size_t cap)
{
	struct stat st;
	int rc, fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		rc = -errno;
		snprintf(why, cap, "%s", strerror(-rc));
		return rc == -ENOENT ? -ENOENT : -EINVAL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
		snprintf(why, cap, "not a regular file, or empty");
		close(fd);
		return -EINVAL;
	}
	size_t len = (size_t)st.st_size;
	void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		snprintf(why, cap, "mmap: %s", strerror(errno));
		return -EINVAL;
	}
	madvise(p, len, MADV_SEQUENTIAL);
	rc = mtabfile_apply(m, p, len, why, cap);
	munmap(p, len);
	return rc;
}

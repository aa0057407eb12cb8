/* t_spill: the io_uring spill tier on real files. For each of /var/tmp
 * (O_DIRECT on a disk filesystem), /dev/shm with direct_io on, and /dev/shm
 * buffered: create, demote extents of awkward sizes from aligned and
 * unaligned memory (header block, staged tails, multi-chunk values), read
 * them back (pool buffers, unaligned memory), promote (header rewritten for
 * the destination), free (tombstone + space reuse), error cases (stale
 * generation, corrupt value, garbage, no room), many operations queued on
 * a small ring, completion through the eventfd, reopen + scan (the same
 * extents come back, freed and corrupted ones do not), size change, a
 * foreign file, a second opener, and a spill file on a full 8 MiB tmpfs
 * (root only, else that case is skipped). Files carry the pid and are
 * removed at exit, also on failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "extent.h"
#include "http.h"
#include "log.h"
#include "spill.h"
#include "testlib.h"

#define KiB 1024ull
#define MiB (1024ull * 1024)

static char paths[8][256];
static int npaths;
static char mnt[256];
static bool mounted;

static void cleanup(void)
{
	for (int i = 0; i < npaths; i++)
		unlink(paths[i]);
	if (mounted)
		umount2(mnt, MNT_DETACH);
	if (mnt[0])
		rmdir(mnt);
}

static const char *track(const char *dir, const char *tag)
{
	REQUIRE(npaths < 8, "too many files");
	snprintf(paths[npaths], sizeof(paths[0]), "%s/kvp-t_spill-%d-%s", dir, (int)getpid(), tag);
	unlink(paths[npaths]);
	return paths[npaths++];
}

static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

/* Writes a live extent (key, value from seed) at dst; returns its size. */
static uint64_t mk_extent(uint8_t *dst, const char *key, uint64_t vlen, uint64_t gen,
			  uint64_t uuid, uint64_t seed)
{
	struct ext_hdr h = {
		.key_len = (uint32_t)strlen(key),
		.value_len = vlen,
		.generation = gen,
		.seg_uuid = uuid,
		.put_time_ns = 12345,
	};
	uint8_t *v = dst + EXT_HDR_SIZE + h.key_len;

	fill(v, vlen, seed);
	h.value_checksum = ext_checksum(v, vlen);
	ext_encode(dst, &h, key);
	return ext_size(h.key_len, vlen);
}

/* Checks an extent image: key, generation, uuid, value from seed. */
static void check_image(const uint8_t *p, uint64_t avail, const char *key, uint64_t vlen,
			uint64_t gen, uint64_t uuid, uint64_t seed)
{
	struct ext_hdr h;
	const uint8_t *k;
	int rc = ext_decode(p, avail, 0, &h, &k);

	REQUIRE(rc == 0, "decode %s: %d", key, rc);
	REQUIRE(h.key_len == strlen(key) && !memcmp(k, key, h.key_len), "key of %s", key);
	REQUIRE(h.value_len == vlen, "%s: value_len %" PRIu64, key, h.value_len);
	REQUIRE(h.generation == gen, "%s: generation %" PRIu64, key, h.generation);
	REQUIRE(h.seg_uuid == uuid, "%s: uuid %" PRIx64 " want %" PRIx64, key, h.seg_uuid, uuid);
	REQUIRE(ext_verify(p, &h), "%s: checksum", key);
	uint8_t *want = malloc(vlen ? vlen : 1);
	fill(want, vlen, seed);
	REQUIRE(!memcmp(p + EXT_HDR_SIZE + h.key_len, want, vlen), "%s: value bytes", key);
	free(want);
}

struct res {
	int calls;
	int status;
	uint64_t off, len;
};

static void done_cb(void *arg, int status, uint64_t off, uint64_t len)
{
	struct res *r = arg;

	r->calls++;
	r->status = status;
	r->off = off;
	r->len = len;
}

static struct spill *open_spill(const char *path, uint64_t size, bool direct, unsigned qd)
{
	struct spill_opts o = {
		.path = path, .size = size, .direct_io = direct, .queue_depth = qd,
		.nbufs = 4, .name = "t_spill",
	};
	char err[256] = "";
	int rc = 0;
	struct spill *sp = spill_open(&o, &rc, err, sizeof(err));

	REQUIRE(sp, "spill_open %s: %d %s", path, rc, err);
	return sp;
}

struct obj {
	char key[64];
	uint64_t vlen, gen, seed;
	uint64_t src_off;	/* in the fake segment */
	uint64_t off, alloc_len; /* in the spill */
	bool freed, corrupt;
};

struct scanned {
	struct obj *objs;
	int n;
	int seen;
};

static int scan_cb(const struct ext_found *f, void *arg)
{
	struct scanned *s = arg;

	for (int i = 0; i < s->n; i++) {
		struct obj *o = &s->objs[i];
		if (o->off != f->off)
			continue;
		REQUIRE(!o->freed && !o->corrupt, "scan found %s (freed %d corrupt %d)", o->key,
		        o->freed, o->corrupt);
		REQUIRE(f->h.key_len == strlen(o->key) && !memcmp(f->key, o->key, f->h.key_len),
		        "scan key at %" PRIu64, f->off);
		REQUIRE(f->h.generation == o->gen && f->h.value_len == o->vlen && f->checksum_ok &&
		        f->alloc_len == o->alloc_len, "scan fields of %s", o->key);
		s->seen++;
		return 0;
	}
	REQUIRE(0, "scan found an unknown extent at %" PRIu64, f->off);
	return 1;
}

/* The main scenario on one directory/mode. */
static void run_mode(const char *dir, const char *tag, bool direct)
{
	const char *path = track(dir, tag);
	uint64_t spill_size = 64 * MiB;
	struct spill *sp = open_spill(path, spill_size, direct, 8);
	uint64_t uuid = spill_uuid(sp), seg_uuid = 0x5e65e65e;

	REQUIRE(spill_created(sp), "fresh file");
	printf("%s: %s I/O\n", path, spill_is_direct(sp) ? "direct" : "buffered");
	if (!direct)
		REQUIRE(!spill_is_direct(sp), "direct_io=false must be buffered");

	/* A fake segment: page-aligned memory; objects at 4 KiB offsets
	 * (like a segment with align 4K), some at +64 (unaligned source). */
	size_t seglen = 32 * MiB;
	uint8_t *seg = mmap(NULL, seglen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(seg != MAP_FAILED, "mmap");
	static const uint64_t sizes[] = {
		1, 100, 4096 - 64 - 8, 4096 - 64 - 7, 4096, 8192 - 72 - 1, 65536, 1 * MiB,
		1 * MiB + 4096 - 80, 3 * MiB + 123, 2 * MiB + 7, 5000,
	};
	enum { NOBJ = sizeof(sizes) / sizeof(sizes[0]) };
	struct obj objs[NOBJ];
	struct res res[NOBJ];
	uint64_t pos = 0;
	for (int i = 0; i < NOBJ; i++) {
		struct obj *o = &objs[i];
		memset(o, 0, sizeof(*o));
		snprintf(o->key, sizeof(o->key), "key-%d_%s", i, i % 2 ? "k" : "v");
		o->vlen = sizes[i];
		o->gen = 1000 + (uint64_t)i;
		o->seed = rnd();
		o->src_off = pos + (i % 3 == 2 ? 64 : 0);
		uint64_t sz = mk_extent(seg + o->src_off, o->key, o->vlen, o->gen, seg_uuid, o->seed);
		pos = (o->src_off + sz + 4095) & ~4095ull;
	}
	REQUIRE(pos <= seglen, "fake segment too small");

	/* demote all at once: more ops than the ring has entries */
	memset(res, 0, sizeof(res));
	for (int i = 0; i < NOBJ; i++) {
		struct obj *o = &objs[i];
		/* the last object: avail ends exactly with the extent */
		uint64_t sz = ext_size((uint32_t)strlen(o->key), o->vlen);
		uint64_t avail = i == NOBJ - 1 ? sz : seglen - o->src_off;
		int rc = spill_demote(sp, seg + o->src_off, avail, o->gen, done_cb, &res[i]);
		REQUIRE(rc == 0, "demote %s: %d", o->key, rc);
	}
	/* completions through the eventfd, as the node's loop sees them */
	for (int spins = 0; spins < 10000; spins++) {
		int all = 1;
		for (int i = 0; i < NOBJ; i++)
			all &= res[i].calls == 1;
		if (all)
			break;
		struct pollfd pfd = { .fd = spill_event_fd(sp), .events = POLLIN };
		REQUIRE(poll(&pfd, 1, 5000) == 1, "eventfd never became readable");
		spill_complete(sp);
	}
	for (int i = 0; i < NOBJ; i++) {
		struct obj *o = &objs[i];
		uint64_t sz = ext_size((uint32_t)strlen(o->key), o->vlen);
		REQUIRE(res[i].calls == 1 && res[i].status == 0, "demote %s: calls %d status %d",
		        o->key, res[i].calls, res[i].status);
		REQUIRE(res[i].off % SPILL_ALIGN == 0 && res[i].off >= SPILL_DATA_OFF &&
		        res[i].len == ((sz + 4095) & ~4095ull), "demote %s: off %" PRIu64 " len %" PRIu64,
		        o->key, res[i].off, res[i].len);
		o->off = res[i].off;
		o->alloc_len = res[i].len;
		for (int j = 0; j < i; j++)
			REQUIRE(o->off + o->alloc_len <= objs[j].off ||
			        objs[j].off + objs[j].alloc_len <= o->off, "overlap %d %d", i, j);
	}

	/* read back: into unaligned malloc memory and into pool buffers */
	for (int i = 0; i < NOBJ; i++) {
		struct obj *o = &objs[i];
		uint64_t sz = ext_size((uint32_t)strlen(o->key), o->vlen);
		uint8_t *raw = malloc(sz + 1);
		struct res r = { 0 };
		REQUIRE(spill_read(sp, o->off, sz, raw + 1, done_cb, &r) == 0, "read %s", o->key);
		spill_wait_idle(sp);
		REQUIRE(r.calls == 1 && r.status == 0, "read %s: %d", o->key, r.status);
		check_image(raw + 1, sz, o->key, o->vlen, o->gen, uuid, o->seed);
		free(raw);

		/* chunked into 1 MiB pool buffers, as the node streams it */
		uint8_t *img = malloc(sz);
		for (uint64_t p = 0; p < sz; p += SPILL_CHUNK) {
			uint64_t l = sz - p < SPILL_CHUNK ? sz - p : SPILL_CHUNK;
			void *b = spill_buf_get(sp);
			REQUIRE(b && ((uintptr_t)b % SPILL_ALIGN) == 0, "pool buffer");
			struct res rr = { 0 };
			REQUIRE(spill_read(sp, o->off + p, l, b, done_cb, &rr) == 0, "chunk read");
			spill_wait_idle(sp);
			REQUIRE(rr.calls == 1 && rr.status == 0, "chunk read %s: %d", o->key, rr.status);
			memcpy(img + p, b, l);
			spill_buf_put(sp, b);
		}
		check_image(img, sz, o->key, o->vlen, o->gen, uuid, o->seed);
		free(img);
	}
	REQUIRE(spill_bufs_free(sp) == 4, "pool buffers all back");
	{
		void *b[5];
		for (int i = 0; i < 4; i++)
			REQUIRE((b[i] = spill_buf_get(sp)) != NULL, "buffer %d", i);
		REQUIRE(spill_buf_get(sp) == NULL, "a fifth buffer");
		for (int i = 0; i < 4; i++)
			spill_buf_put(sp, b[i]);
	}
	REQUIRE(spill_read(sp, 0, 10, seg, done_cb, NULL) == -EINVAL, "read of the header");
	REQUIRE(spill_read(sp, spill_size - 4096, 8192, seg, done_cb, NULL) == -EINVAL,
	        "read past the end");

	/* errors that start nothing */
	{
		struct obj *o = &objs[1];
		REQUIRE(spill_demote(sp, seg + o->src_off, seglen - o->src_off, o->gen + 1, done_cb,
				     NULL) == -ESTALE, "stale generation");
		uint8_t junk[4096];
		fill(junk, sizeof(junk), 7);
		REQUIRE(spill_demote(sp, junk, sizeof(junk), 1, done_cb, NULL) == -ESTALE, "garbage");
		uint8_t *v = seg + o->src_off + EXT_HDR_SIZE + strlen(o->key);
		v[0] ^= 0xff;
		REQUIRE(spill_demote(sp, seg + o->src_off, seglen - o->src_off, o->gen, done_cb,
				     NULL) == -EBADMSG, "corrupt value");
		v[0] ^= 0xff;
	}

	/* promote: into unaligned memory, header rewritten for the segment */
	for (int i = 0; i < NOBJ; i += 3) {
		struct obj *o = &objs[i];
		uint64_t sz = ext_size((uint32_t)strlen(o->key), o->vlen);
		uint8_t *raw = malloc(sz + 64);
		struct res r = { 0 };
		REQUIRE(spill_promote(sp, o->off, o->gen, raw + 64, sz, 0xabcdef, done_cb, &r) == 0,
		        "promote %s", o->key);
		spill_wait_idle(sp);
		REQUIRE(r.calls == 1 && r.status == 0 && r.len == sz, "promote %s: %d", o->key, r.status);
		check_image(raw + 64, sz, o->key, o->vlen, o->gen, 0xabcdef, o->seed);
		/* wrong generation, a destination too small, no extent there */
		REQUIRE(spill_promote(sp, o->off, o->gen + 7, raw + 64, sz, 1, done_cb, &r) == -ESTALE,
		        "promote stale");
		REQUIRE(spill_promote(sp, o->off, o->gen, raw, sz - 1, 1, done_cb, &r) == -ERANGE,
		        "promote small");
		REQUIRE(spill_promote(sp, o->off + 4096 * 1000, o->gen, raw, sz, 1, done_cb, &r) == -ESTALE,
		        "promote nothing");
		REQUIRE(r.calls == 1, "no callbacks for refused promotes");
		free(raw);
	}

	/* free: stale generation refused, then the real one */
	struct spill_stats st;
	spill_stats(sp, &st);
	uint64_t used0 = st.used;
	for (int i = 0; i < NOBJ; i += 4) {
		struct obj *o = &objs[i];
		struct res r = { 0 };
		REQUIRE(spill_free(sp, o->off, o->gen + 1, done_cb, &r) == -ESTALE, "free stale");
		REQUIRE(spill_lookup(sp, o->off, NULL), "lookup before free");
		REQUIRE(spill_free(sp, o->off, o->gen, done_cb, &r) == 0, "free");
		REQUIRE(!spill_lookup(sp, o->off, NULL), "lookup while freeing");
		REQUIRE(spill_free(sp, o->off, o->gen, done_cb, &r) == -ESTALE, "free while freeing");
		spill_wait_idle(sp);
		REQUIRE(r.calls == 1 && r.status == 0, "free %s: %d", o->key, r.status);
		REQUIRE(spill_free(sp, o->off, o->gen, done_cb, &r) == -ESTALE, "double free");
		o->freed = true;
		used0 -= o->alloc_len;
		/* the tombstone is on disk */
		uint8_t hb[4096];
		struct res rr = { 0 };
		REQUIRE(spill_read(sp, o->off, 4096, hb, done_cb, &rr) == 0, "read tomb");
		spill_wait_idle(sp);
		struct ext_hdr h;
		REQUIRE(ext_decode(hb, o->alloc_len, 0, &h, NULL) == -ENOENT && h.generation == o->gen,
		        "tombstone of %s", o->key);
	}
	spill_stats(sp, &st);
	REQUIRE(st.used == used0, "used %" PRIu64 " want %" PRIu64, st.used, used0);
	REQUIRE(st.demotions == NOBJ && st.frees == (NOBJ + 3) / 4, "stats demotions %" PRIu64
	        " frees %" PRIu64, st.demotions, st.frees);
	REQUIRE(st.free_stale == 3 * ((NOBJ + 3) / 4) && st.promotions == (NOBJ + 2) / 3,
	        "stats: free_stale %" PRIu64 " promotions %" PRIu64, st.free_stale, st.promotions);
	/* the index lists exactly the live extents */
	{
		struct scanned fe = { objs, NOBJ, 0 };
		REQUIRE(spill_foreach(sp, scan_cb, &fe) == 0 && fe.seen == NOBJ - (NOBJ + 3) / 4,
		        "foreach saw %d", fe.seen);
		struct ext_found f;
		REQUIRE(spill_lookup(sp, objs[1].off, &f) && f.h.generation == objs[1].gen &&
		        f.alloc_len == objs[1].alloc_len && f.h.seg_uuid == uuid, "lookup fields");
		REQUIRE(spill_scan(sp, NULL, NULL, NULL) == -EALREADY, "scan after use");
	}
	REQUIRE(st.write_hist[SPILL_NBUCKETS] + st.write_hist[0] <= st.demotions, "hist");

	/* metrics text */
	{
		struct sbuf b = { 0 };
		spill_metrics(sp, &b);
		REQUIRE(b.p && strstr(b.p, "kvpool_node_spill_used_bytes ") &&
		        strstr(b.p, "kvpool_node_spill_capacity_bytes ") &&
		        strstr(b.p, "kvpool_node_spill_demotions_total ") &&
		        strstr(b.p, "kvpool_node_spill_write_seconds_bucket{le=\"+Inf\"}"),
		        "metrics:\n%s", b.p ? b.p : "");
		sb_free(&b);
	}

	/* corrupt one extent's value on disk: a scan must drop it */
	int victim = 9;
	{
		struct obj *o = &objs[victim];
		REQUIRE(!o->freed, "victim is live");
		int fd = open(path, O_RDWR);
		REQUIRE(fd >= 0, "open for corruption");
		uint8_t x = 0;
		uint64_t at = o->off + o->alloc_len - 4096 - 1;	/* inside the value */
		REQUIRE(pread(fd, &x, 1, (off_t)at) == 1, "pread");
		x ^= 0x5a;
		REQUIRE(pwrite(fd, &x, 1, (off_t)at) == 1, "pwrite");
		fsync(fd);
		close(fd);
		o->corrupt = true;
	}
	spill_close(sp);

	/* reopen: the same uuid, the live extents come back */
	sp = open_spill(path, spill_size, direct, 8);
	REQUIRE(!spill_created(sp) && spill_uuid(sp) == uuid, "reopen keeps the file");
	struct scanned sc = { objs, NOBJ, 0 };
	struct ext_scan_stats ss;
	REQUIRE(spill_scan(sp, scan_cb, &sc, &ss) == 0, "scan");
	int live = 0;
	for (int i = 0; i < NOBJ; i++)
		live += !objs[i].freed && !objs[i].corrupt;
	REQUIRE(sc.seen == live && ss.live == (uint64_t)live, "scan saw %d (%" PRIu64 ") want %d",
	        sc.seen, ss.live, live);
	REQUIRE(ss.bad_checksum == 1, "bad checksums %" PRIu64, ss.bad_checksum);
	REQUIRE(ss.tombstones == (NOBJ + 3) / 4, "tombstones %" PRIu64, ss.tombstones);
	spill_stats(sp, &st);
	REQUIRE(st.extents == (uint64_t)live, "extents after scan %" PRIu64, st.extents);
	{
		struct scanned fe = { objs, NOBJ, 0 };
		REQUIRE(spill_foreach(sp, scan_cb, &fe) == 0 && fe.seen == live, "foreach after scan");
		REQUIRE(spill_scan(sp, NULL, NULL, NULL) == -EALREADY, "second scan");
	}
	/* a free of a scanned extent works, of the corrupt one finds nothing */
	{
		struct res r = { 0 };
		REQUIRE(spill_free(sp, objs[victim].off, objs[victim].gen, done_cb, &r) == -ESTALE,
		        "the corrupt extent is not allocated");
	}

	/* new demotions never land on scanned extents: fill the spill */
	uint64_t big = 1 * MiB;
	uint8_t *bsrc = seg + 16 * MiB;
	int ndem = 0;
	for (;;) {
		char key[32];
		snprintf(key, sizeof(key), "fill-%d", ndem);
		mk_extent(bsrc, key, big, 5000 + (uint64_t)ndem, seg_uuid, (uint64_t)ndem);
		struct res r = { 0 };
		int rc = spill_demote(sp, bsrc, seglen - 16 * MiB, 5000 + (uint64_t)ndem, done_cb, &r);
		if (rc == -ENOSPC)
			break;
		REQUIRE(rc == 0, "fill demote: %d", rc);
		spill_wait_idle(sp);
		REQUIRE(r.status == 0, "fill demote status %d", r.status);
		for (int i = 0; i < NOBJ; i++)
			if (!objs[i].freed && !objs[i].corrupt)
				REQUIRE(r.off + r.len <= objs[i].off || objs[i].off + objs[i].alloc_len <= r.off,
				        "fill extent over %s", objs[i].key);
		ndem++;
	}
	REQUIRE(ndem >= 40, "only %d MiB extents fit in 64 MiB", ndem);
	/* the scanned extents still read back */
	for (int i = 0; i < NOBJ; i++) {
		struct obj *o = &objs[i];
		if (o->freed || o->corrupt)
			continue;
		uint64_t sz = ext_size((uint32_t)strlen(o->key), o->vlen);
		uint8_t *img = malloc(sz);
		struct res r = { 0 };
		REQUIRE(spill_read(sp, o->off, sz, img, done_cb, &r) == 0, "read after fill");
		spill_wait_idle(sp);
		REQUIRE(r.status == 0, "read after fill: %d", r.status);
		check_image(img, sz, o->key, o->vlen, o->gen, uuid, o->seed);
		free(img);
	}
	spill_close(sp);

	/* a second opener is refused while the first holds it */
	sp = open_spill(path, spill_size, direct, 8);
	{
		struct spill_opts o = { .path = path, .size = spill_size, .direct_io = direct,
					.lock_wait_ms = -1 };
		char err[256] = "";
		int rc = 0;
		REQUIRE(!spill_open(&o, &rc, err, sizeof(err)) && rc == -EBUSY, "second open: %d", rc);
	}
	spill_close(sp);

	/* another size: re-created empty, new uuid */
	sp = open_spill(path, 32 * MiB, direct, 8);
	REQUIRE(spill_created(sp) && spill_uuid(sp) != uuid, "size change re-creates");
	REQUIRE(spill_scan(sp, NULL, NULL, &ss) == 0 && ss.live == 0, "nothing after re-create");
	spill_close(sp);
	munmap(seg, seglen);
	unlink(path);
}

/* Many small demotions + frees interleaved on a tiny ring. */
static void run_churn(const char *dir, bool direct)
{
	const char *path = track(dir, "churn");
	struct spill *sp = open_spill(path, 16 * MiB, direct, 2);
	enum { N = 2000 };
	uint8_t *seg = aligned_alloc(4096, N * 4096);
	struct res r[N];
	uint64_t offs[N];
	int live = 0;

	REQUIRE(seg, "alloc");
	memset(r, 0, sizeof(r));
	for (int i = 0; i < N; i++) {
		char key[32];
		snprintf(key, sizeof(key), "c%d", i);
		mk_extent(seg + (size_t)i * 4096, key, 100 + (uint64_t)i, (uint64_t)i + 1, 9, (uint64_t)i);
		REQUIRE(spill_demote(sp, seg + (size_t)i * 4096, 4096, (uint64_t)i + 1, done_cb, &r[i]) == 0,
		        "churn demote %d", i);
	}
	spill_wait_idle(sp);
	for (int i = 0; i < N; i++) {
		REQUIRE(r[i].calls == 1 && r[i].status == 0, "churn %d: %d", i, r[i].status);
		offs[i] = r[i].off;
	}
	memset(r, 0, sizeof(r));
	for (int i = 0; i < N; i += 2)
		REQUIRE(spill_free(sp, offs[i], (uint64_t)i + 1, done_cb, &r[i]) == 0, "churn free");
	spill_wait_idle(sp);
	for (int i = 0; i < N; i++) {
		if (i % 2 == 0)
			REQUIRE(r[i].calls == 1 && r[i].status == 0, "churn free %d: %d", i, r[i].status);
		else
			live++;
	}
	/* every odd one is still in the index, every even one gone */
	for (int i = 0; i < N; i++) {
		struct ext_found f;
		bool have = spill_lookup(sp, offs[i], &f);
		REQUIRE(have == (i % 2 == 1) && (!have || f.h.generation == (uint64_t)i + 1),
		        "index after churn: %d", i);
	}
	spill_close(sp);
	sp = open_spill(path, 16 * MiB, direct, 2);
	struct ext_scan_stats ss;
	REQUIRE(spill_scan(sp, NULL, NULL, &ss) == 0, "churn scan");
	REQUIRE(ss.live == (uint64_t)live && ss.tombstones == N / 2, "churn scan: live %" PRIu64
	        " tombstones %" PRIu64, ss.live, ss.tombstones);
	spill_close(sp);
	free(seg);
}

static void run_foreign(const char *dir)
{
	const char *path = track(dir, "foreign");
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	char text[] = "important data, not a spill file\n";

	REQUIRE(fd >= 0 && write(fd, text, sizeof(text)) == (ssize_t)sizeof(text), "write foreign");
	close(fd);
	struct spill_opts o = { .path = path, .size = 8 * MiB, .direct_io = true };
	char err[256] = "";
	int rc = 0;
	REQUIRE(!spill_open(&o, &rc, err, sizeof(err)) && rc == -EEXIST, "foreign: %d", rc);
	REQUIRE(strstr(err, "not a kvpool spill file"), "message: %s", err);
	struct stat st;
	REQUIRE(stat(path, &st) == 0 && st.st_size == (off_t)sizeof(text), "foreign file untouched");
	o.size = 1000;
	unlink(path);
	REQUIRE(!spill_open(&o, &rc, err, sizeof(err)) && rc == -EINVAL, "tiny size: %d", rc);
}

static int run_full_fs(void)
{
	if (geteuid() != 0) {
		printf("full filesystem case skipped: not root\n");
		return 0;
	}
	snprintf(mnt, sizeof(mnt), "/tmp/kvp-t_spill-%d-mnt", (int)getpid());
	REQUIRE(mkdir(mnt, 0700) == 0, "mkdir %s", mnt);
	if (mount("tmpfs", mnt, "tmpfs", 0, "size=8M") < 0) {
		printf("full filesystem case skipped: mount tmpfs: %s\n", strerror(errno));
		return 0;
	}
	mounted = true;
	char path[300];
	snprintf(path, sizeof(path), "%s/spill", mnt);
	struct spill_opts o = { .path = path, .size = 16 * MiB, .direct_io = true };
	char err[256] = "";
	int rc = 0;
	struct spill *sp = spill_open(&o, &rc, err, sizeof(err));
	REQUIRE(!sp && rc == -ENOSPC, "full fs: rc %d", rc);
	printf("full filesystem: %s\n", err);
	REQUIRE(strstr(err, "free") && strstr(err, path), "message names the free space: %s", err);
	REQUIRE(access(path, F_OK) < 0, "no file left behind");
	/* a size that fits works on the same filesystem */
	o.size = 4 * MiB;
	sp = spill_open(&o, &rc, err, sizeof(err));
	REQUIRE(sp, "4 MiB on 8 MiB tmpfs: %s", err);
	spill_close(sp);
	unlink(path);
	REQUIRE(umount(mnt) == 0, "umount");
	mounted = false;
	return 1;
}

static void on_fatal(int sig)
{
	cleanup();
	signal(sig, SIG_DFL);
	raise(sig);
}

int main(void)
{
	log_init("t_spill", getenv("T_SPILL_DEBUG") ? LOG_DEBUG : LOG_WARNING);
	atexit(cleanup);
	signal(SIGTERM, on_fatal);
	signal(SIGINT, on_fatal);
	rng ^= (uint64_t)getpid();

	run_mode("/var/tmp", "disk", true);
	run_mode("/dev/shm", "shm-direct", true);
	run_mode("/dev/shm", "shm-buffered", false);
	run_churn("/var/tmp", true);
	run_churn("/dev/shm", false);
	run_foreign("/var/tmp");
	run_full_fs();
	printf("t_spill: ok\n");
	return 0;
}

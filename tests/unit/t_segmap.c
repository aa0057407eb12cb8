/* t_segmap: the commit map and what start-up does with segments.
 *  - a fresh 64 GiB sparse segment: open and scan read no page (the file
 *    holds the header page only, before and after);
 *  - a model of committed, in-progress, torn-over-a-stale-byte, freed,
 *    freed-without-clearing and overlapping (stale outer) extents, plus
 *    garbage bytes, at alignments 64, 4096 and 64 KiB: the scan reports
 *    exactly the committed set, cleans the stale bytes, and a second scan
 *    finds nothing stale;
 *  - kill -9 of a writer (local-client protocol) at random moments, many
 *    times: everything a scan reports verifies;
 *  - format 1 files are reused as format 1 and scanned page by page;
 *  - owner states: live, kept, orphan after kill -9 (ephemeral), live
 *    while a forked child holds the lock; orphan_reap_all removes only the
 *    orphan;
 *  - reservation later (segment_reserve_step), prefault, populate_present,
 *    and prefault on a full tmpfs failing instead of SIGBUS (when a tmpfs
 *    can be mounted).
 * Files are named with the pid and removed at exit. SEED= reproduces.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "extent.h"
#include "log.h"
#include "orphan.h"
#include "segmap.h"
#include "segment.h"
#include "testlib.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static char prefix[64];
static char tmpfs_dir[128];
static uint64_t rng;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Removes dir and the files in it (no subdirectories). */
static void rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (d) {
		while ((de = readdir(d))) {
			char p[512];

			snprintf(p, sizeof(p), "%.200s/%.255s", dir, de->d_name);
			if (de->d_name[0] != '.')
				unlink(p);
		}
		closedir(d);
	}
	rmdir(dir);
}

static void cleanup(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *de;

	if (d) {
		while ((de = readdir(d))) {
			char p[512];

			if (strncmp(de->d_name, prefix, strlen(prefix)))
				continue;
			snprintf(p, sizeof(p), "/dev/shm/%s", de->d_name);
			if (unlink(p) < 0 && (errno == EISDIR || errno == EPERM))
				rm_dir(p);	/* test_orphans' own directory */
		}
		closedir(d);
	}
	if (tmpfs_dir[0]) {
		umount2(tmpfs_dir, MNT_DETACH);
		rmdir(tmpfs_dir);
	}
}

static struct segment_opts opts(const char *nm, uint64_t size, uint32_t align)
{
	return (struct segment_opts){ .name = nm, .size = size, .align = align,
				      .gid = (gid_t)-1, .numa_node = -1 };
}

static uint64_t blocks(const struct segment *s)
{
	struct stat st;

	REQUIRE(fstat(s->fd, &st) == 0, "fstat");
	return (uint64_t)st.st_blocks * 512;
}

/* Writes an extent as a local client does: magic cleared, value, header
 * with the magic last; commit says whether its byte is set after. */
static void write_ext(const struct segment *s, uint64_t off, uint32_t klen, uint64_t vlen,
		      uint64_t gen, bool commit)
{
	uint8_t *p = (uint8_t *)s->base + off;
	char key[64];
	struct ext_hdr h = { .key_len = klen, .value_len = vlen, .generation = gen,
			     .seg_uuid = s->uuid, .put_time_ns = gen };

	snprintf(key, sizeof(key), "k%0*" PRIu64, (int)klen - 1, gen);
	__atomic_store_n((uint32_t *)p, 0, __ATOMIC_RELEASE);
	for (uint64_t i = 0; i < vlen; i++)
		p[EXT_HDR_SIZE + klen + i] = (uint8_t)(gen * 31 + i);
	h.value_checksum = ext_checksum(p + EXT_HDR_SIZE + klen, vlen);
	ext_encode(p, &h, key);
	if (commit)
		segmap_commit(s, off, gen);
}

static uint64_t alloc_of(uint32_t klen, uint64_t vlen, uint32_t align)
{
	return (ext_size(klen, vlen) + align - 1) & ~(uint64_t)(align - 1);
}

/* ---- fresh segment: nothing read ---- */

static int count_cb(const struct ext_found *f, void *arg)
{
	(void)f;
	(*(uint64_t *)arg)++;
	return 0;
}

static void test_fresh_sparse(void)
{
	char nm[128], err[512];
	struct segment s;
	struct segment_opts o;
	struct ext_scan_stats st;
	uint64_t n = 0;

	snprintf(nm, sizeof(nm), "%sfresh", prefix);
	o = opts(nm, 64 * GiB, 4096);
	o.reserve = SEG_RESERVE_NONE;	/* larger than this VM's /dev/shm: a warning */
	REQUIRE(segment_open(&s, &o, false, err, sizeof(err)) == 0, "open 64 GiB: %s", err);
	REQUIRE(s.created && s.version == 2 && s.data_off == 4096 + 16 * MiB, "fields");
	/* only the header and the map are reserved (the map so that its
	 * stores never SIGBUS), and nothing but the header page was written */
	uint64_t b0 = blocks(&s);
	REQUIRE(b0 <= s.data_off, "fresh segment holds %" PRIu64 " bytes", b0);
	REQUIRE(lseek(s.fd, 4096, SEEK_DATA) < 0 && errno == ENXIO, "pages past the header written");
	REQUIRE(!segment_is_reserved(&s), "not reserved");
	REQUIRE(segmap_scan(&s, SEGMAP_CLEAN, 0, count_cb, &n, &st) == 0 && n == 0 &&
	        st.map_bytes == 0 && st.marks == 0, "scan: %" PRIu64 " extents, %" PRIu64
	        " map bytes read", n, st.map_bytes);
	REQUIRE(blocks(&s) == b0 && lseek(s.fd, 4096, SEEK_DATA) < 0,
	        "the scan faulted pages in: %" PRIu64, blocks(&s));
	/* one put in the middle: the scan reads one page of map */
	write_ext(&s, 40 * GiB, 8, 100, 5, true);
	REQUIRE(segmap_scan(&s, SEGMAP_CLEAN, 0, count_cb, &n, &st) == 0 && n == 1 &&
	        st.map_bytes == 4096 && st.marks == 1, "one extent: %" PRIu64 " / %" PRIu64,
	        n, st.map_bytes);
	REQUIRE(segment_unlink(&s) == 0, "unlink");
}

/* ---- the model ---- */

enum mstate { M_FREE, M_COMMITTED, M_INFLIGHT, M_TORN_STALE, M_FREED, M_FREED_STALE };

struct mext {
	uint64_t off, alloc, gen;
	uint32_t klen;
	uint64_t vlen;
	enum mstate st;
};

struct seen {
	uint64_t off[4096];
	uint64_t gen[4096];
	int n;
	bool ordered;
};

static int seen_cb(const struct ext_found *f, void *arg)
{
	struct seen *x = arg;

	if (x->n && f->off <= x->off[x->n - 1])
		x->ordered = false;
	REQUIRE(x->n < 4096, "too many reported");
	x->off[x->n] = f->off;
	x->gen[x->n++] = f->h.generation;
	return 0;
}

static void run_model(uint32_t align, int rounds)
{
	char nm[128], err[512];
	struct segment s;
	struct segment_opts o;
	static struct mext m[2048];
	int nm_ = 0;
	uint64_t pos, gen = 1;

	snprintf(nm, sizeof(nm), "%smodel%u", prefix, align);
	o = opts(nm, 64 * MiB, align);
	o.reserve = SEG_RESERVE_NONE;
	REQUIRE(segment_open(&s, &o, false, err, sizeof(err)) == 0, "open: %s", err);
	for (int round = 0; round < rounds; round++) {
		nm_ = 0;
		/* lay extents out with gaps; each gets a fate */
		pos = s.data_off;
		while (nm_ < 2000) {
			struct mext *e = &m[nm_];

			pos += (rnd() % 4) * align;
			e->klen = 1 + (uint32_t)(rnd() % 40);
			e->vlen = 1 + (rnd() % 4 == 0 ? rnd() % (3 * 65536) : rnd() % 3000);
			e->alloc = alloc_of(e->klen, e->vlen, align);
			if (pos + e->alloc > s.size)
				break;
			e->off = pos;
			e->gen = gen++;
			unsigned fate = (unsigned)(rnd() % 10);
			e->st = fate < 5 ? M_COMMITTED : fate == 5 ? M_INFLIGHT : fate == 6 ?
				M_TORN_STALE : fate == 7 ? M_FREED : fate == 8 ? M_FREED_STALE :
				M_COMMITTED;
			pos += e->alloc;
			nm_++;
		}
		for (int i = 0; i < nm_; i++) {
			struct mext *e = &m[i];

			switch (e->st) {
			case M_COMMITTED:
				write_ext(&s, e->off, e->klen, e->vlen, e->gen, true);
				break;
			case M_INFLIGHT:	/* header valid, value half written, no byte */
				write_ext(&s, e->off, e->klen, e->vlen, e->gen, false);
				((uint8_t *)s.base)[e->off + EXT_HDR_SIZE + e->klen + e->vlen / 2] ^= 0x40;
				break;
			case M_TORN_STALE:
				/* an earlier tenant committed here (its byte was
				 * never cleared), the new put died half-way */
				write_ext(&s, e->off, e->klen, e->vlen, e->gen + 1000000, true);
				write_ext(&s, e->off, e->klen, e->vlen, e->gen, false);
				/* (the tags differ: 1e6 % 255 = 145) */
				((uint8_t *)s.base)[e->off + EXT_HDR_SIZE + e->klen + e->vlen / 2] ^= 0x40;
				break;
			case M_FREED:
				write_ext(&s, e->off, e->klen, e->vlen, e->gen, true);
				ext_tombstone((uint8_t *)s.base + e->off);
				segmap_uncommit(&s, e->off);
				break;
			case M_FREED_STALE:	/* the node died between the two */
				write_ext(&s, e->off, e->klen, e->vlen, e->gen, true);
				ext_tombstone((uint8_t *)s.base + e->off);
				break;
			case M_FREE:
				break;
			}
		}
		/* a stale outer extent: committed, its FREE lost, a newer one
		 * committed inside it (overwriting part of its value) */
		for (int i = 0; i < nm_; i++) {
			struct mext *e = &m[i];

			if (e->st != M_COMMITTED || e->alloc < 3 * 4096 || align > 4096)
				continue;
			uint64_t inner = e->off + 4096;
			uint64_t ia = alloc_of(4, 200, align);
			if (inner + ia > e->off + e->alloc)
				continue;
			write_ext(&s, inner, 4, 200, gen, true);
			e->st = M_FREE;	/* the outer is stale now */
			m[nm_ + 0] = (struct mext){ .off = inner, .alloc = ia, .gen = gen, .klen = 4,
						    .vlen = 200, .st = M_COMMITTED };
			gen++;
			nm_++;
			break;
		}
		/* garbage bytes: in the header/map area, at unaligned places,
		 * over free space */
		s.map[0] = 7;
		s.map[1] = 9;
		for (int i = 0; i < 50; i++) {
			uint64_t g = (s.data_off >> SEG_MAP_SHIFT) + rnd() % (s.map_len -
								  (s.data_off >> SEG_MAP_SHIFT));
			uint64_t at = g << SEG_MAP_SHIFT;
			bool used = false;

			for (int j = 0; j < nm_ && !used; j++)
				used = m[j].st != M_FREE && at + 4096 > m[j].off &&
				       at < m[j].off + m[j].alloc;
			if (!used && !s.map[g])
				s.map[g] = (uint8_t)(1 + rnd() % 255);
		}

		static struct seen got;
		struct ext_scan_stats st;

		for (int pass = 0; pass < 2; pass++) {
			memset(&got, 0, sizeof(got));
			got.ordered = true;
			REQUIRE(segmap_scan(&s, SEGMAP_CLEAN, 0, seen_cb, &got, &st) == 0, "scan");
			REQUIRE(got.ordered, "not in ascending order");
			int want = 0, j = 0;
			for (int i = 0; i < nm_; i++)
				want += m[i].st == M_COMMITTED;
			/* compare sorted (m is sorted but for the appended inner) */
			for (int i = 0; i < nm_; i++) {
				if (m[i].st != M_COMMITTED)
					continue;
				bool found = false;
				for (j = 0; j < got.n && !found; j++)
					found = got.off[j] == m[i].off && got.gen[j] == m[i].gen;
				REQUIRE(found, "align %u round %d pass %d: committed extent at %" PRIu64
				        " (gen %" PRIu64 ") not reported", align, round, pass,
				        m[i].off, m[i].gen);
			}
			REQUIRE(got.n == want, "align %u round %d pass %d: %d reported, %d committed",
			        align, round, pass, got.n, want);
			/* (below 4 KiB a byte shared with a live neighbour stays) */
			if (pass == 1 && align >= 4096)
				REQUIRE(st.stale_marks == 0 && st.tombstones == 0,
				        "second scan: %" PRIu64 " stale bytes, %" PRIu64 " tombstones",
				        st.stale_marks, st.tombstones);
			else if (pass == 0)
				REQUIRE(st.stale_marks > 0, "align %u: stale bytes not seen", align);
		}
		/* the clean scan left a map that vouches for exactly these */
		for (uint64_t g = 0; g < s.map_len; g++) {
			if (!s.map[g])
				continue;
			bool mine = false;
			for (int i = 0; i < nm_ && !mine; i++)
				mine = m[i].st == M_COMMITTED && m[i].off >> SEG_MAP_SHIFT == g;
			REQUIRE(mine, "align %u: byte %" PRIu64 " left set", align, g);
		}
		/* next round starts clean */
		memset(s.map, 0, s.map_len);
		memset((uint8_t *)s.base + s.data_off, 0, s.size - s.data_off);
	}
	REQUIRE(segment_unlink(&s) == 0, "unlink");
}

/* ---- kill -9 while writing ---- */

static void writer_loop(const char *path, uint32_t align, uint64_t seed)
{
	struct segment s;
	char err[256];
	uint64_t gen = seed * 1000000;

	if (segment_attach(&s, path, true, err, sizeof(err)) < 0)
		_exit(2);
	rng = seed | 1;
	for (;;) {
		uint64_t slots = (s.size - s.data_off) / (256 * 1024);
		uint64_t off = s.data_off + (rnd() % slots) * 256 * 1024;
		uint8_t *p = (uint8_t *)s.base + off;
		struct ext_hdr h;

		/* a FREE of what lives there: tombstone, then the byte */
		if (ext_decode(p, s.size - off, 0, &h, NULL) == 0) {
			ext_tombstone(p);
			segmap_uncommit(&s, off);
		}
		write_ext(&s, off, 16, rnd() % (200 * 1024), ++gen, true);
	}
}

static int verify_cb(const struct ext_found *f, void *arg)
{
	struct segment *s = arg;

	REQUIRE(ext_verify((const uint8_t *)s->base + f->off, &f->h),
	        "reported a torn extent at %" PRIu64 " (gen %" PRIu64 ")", f->off, f->h.generation);
	return 0;
}

static void test_kill9(int runs)
{
	char nm[128], err[512];
	struct segment s;
	struct segment_opts o;
	uint64_t total = 0;

	snprintf(nm, sizeof(nm), "%skill", prefix);
	o = opts(nm, 32 * MiB, 4096);
	o.reserve = SEG_RESERVE_NONE;
	REQUIRE(segment_open(&s, &o, false, err, sizeof(err)) == 0, "open: %s", err);
	for (int r = 0; r < runs; r++) {
		struct ext_scan_stats st;
		pid_t pid;
		int status;

		fflush(NULL);
		pid = fork();
		if (pid == 0)
			writer_loop(s.path, 4096, rnd());
		REQUIRE(pid > 0, "fork");
		usleep(1000 + (useconds_t)(rnd() % 20000));
		kill(pid, SIGKILL);
		REQUIRE(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status), "writer status %d",
		        status);
		REQUIRE(segmap_scan(&s, SEGMAP_CLEAN, 0, verify_cb, &s, &st) == 0, "scan");
		total += st.live;
	}
	printf("kill -9 x%d: %" PRIu64 " extents reported, all verified\n", runs, total);
	REQUIRE(total > 0, "the writer never committed anything");
	REQUIRE(segment_unlink(&s) == 0, "unlink");
}

/* ---- format 1 ---- */

static void test_format1(void)
{
	char nm[128], p[300], err[512];
	struct segment s;
	struct segment_opts o;
	struct segment_info in = { .version = 1, .size = 4 * MiB, .uuid = 0xabcdef,
				   .align = 4096, .created_ns = 1 };
	static uint8_t img[4 * MiB];
	struct ext_scan_stats st;
	uint64_t n = 0;
	int fd;

	snprintf(nm, sizeof(nm), "%sv1", prefix);
	segment_path(nm, p, sizeof(p));
	snprintf(in.name, sizeof(in.name), "%s", nm);
	memset(img, 0, sizeof(img));
	segment_header_write(img, &in);
	struct segment fake = { .base = img, .size = sizeof(img), .uuid = in.uuid, .align = 4096,
				.data_off = 4096 };
	write_ext(&fake, 4096, 8, 1000, 1, false);
	write_ext(&fake, 3 * 4096, 8, 9000, 2, false);
	write_ext(&fake, 8 * 4096, 8, 100, 3, false);
	img[8 * 4096 + 64 + 8 + 50] ^= 1;	/* torn */
	fd = open(p, O_CREAT | O_EXCL | O_RDWR, 0600);
	REQUIRE(fd >= 0 && write(fd, img, sizeof(img)) == (ssize_t)sizeof(img), "write v1");
	close(fd);
	o = opts(nm, 4 * MiB, 4096);
	REQUIRE(segment_open(&s, &o, false, err, sizeof(err)) == 0, "open v1: %s", err);
	REQUIRE(!s.created && s.version == 1 && !s.map && s.data_off == 4096 && s.uuid == in.uuid,
	        "reused as format 1");
	REQUIRE(segmap_scan(&s, SEGMAP_CLEAN, 0, count_cb, &n, &st) == 0 && n == 2 &&
	        st.bad_checksum == 1, "v1 scan: %" PRIu64 " extents, %" PRIu64 " bad", n,
	        st.bad_checksum);
	segmap_commit(&s, 4096, 1);	/* no map: harmless */
	REQUIRE(((uint8_t *)s.base)[4096] == (EXT_MAGIC & 0xff), "commit wrote into a v1 file");
	REQUIRE(segment_unlink(&s) == 0, "unlink");
}

/* ---- owners and orphans ---- */

struct find {
	const char *path;
	enum seg_owner_state st;
	bool found;
};

static int find_cb(const struct orphan_entry *e, void *arg)
{
	struct find *f = arg;

	if (strcmp(e->path, f->path))
		return 0;
	f->found = true;
	f->st = e->state;
	return 0;
}

/* test_orphans' segments live in a directory of their own: in /dev/shm
 * every node starting on the host (another test's, running beside this
 * one) sweeps the orphans, ours included, between our steps. */
static char orph_dir[128];

static enum seg_owner_state state_of(const char *path)
{
	struct find f = { .path = path };

	REQUIRE(orphan_list(orph_dir, find_cb, &f) == 0 && f.found, "%s not listed", path);
	return f.st;
}

/* Child: opens nm (ephemeral or not), says so on the pipe, waits to die;
 * with hold, forks a grandchild that keeps the fd (and the lock). */
static pid_t owner(const char *nm, bool ephemeral, bool hold, pid_t *grandchild)
{
	int pfd[2];
	pid_t pid;
	char c;

	REQUIRE(pipe(pfd) == 0, "pipe");
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		struct segment s;
		struct segment_opts o = opts(nm, 1 * MiB, 4096);
		char err[256];

		o.ephemeral = ephemeral;
		o.owner = "python";
		if (segment_open(&s, &o, false, err, sizeof(err)) < 0)
			_exit(2);
		if (hold) {
			pid_t g = fork();

			if (g == 0) {
				for (;;)
					pause();
			}
			if (write(pfd[1], &g, sizeof(g)) != sizeof(g))
				_exit(3);
		}
		if (write(pfd[1], "x", 1) != 1)
			_exit(3);
		for (;;)
			pause();
	}
	REQUIRE(pid > 0, "fork");
	close(pfd[1]);
	if (hold)
		REQUIRE(read(pfd[0], grandchild, sizeof(*grandchild)) == sizeof(*grandchild), "gc");
	REQUIRE(read(pfd[0], &c, 1) == 1, "owner did not open");
	close(pfd[0]);
	return pid;
}

static void kill9(pid_t pid)
{
	int status;

	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
}

static void test_orphans(void)
{
	char a[128], b[128], c[128], pa[300], pb[300], pc[300];
	pid_t pa_, pb_, pc_, gc = 0;
	struct stat st;
	uint64_t bytes = 0;
	int n;

	snprintf(orph_dir, sizeof(orph_dir), "/dev/shm/%sorphans", prefix);
	REQUIRE(mkdir(orph_dir, 0700) == 0, "mkdir %s: %s", orph_dir, strerror(errno));
	snprintf(a, sizeof(a), "%.100s/eph", orph_dir);
	snprintf(b, sizeof(b), "%.100s/kept", orph_dir);
	snprintf(c, sizeof(c), "%.100s/held", orph_dir);
	segment_path(a, pa, sizeof(pa));
	segment_path(b, pb, sizeof(pb));
	segment_path(c, pc, sizeof(pc));
	pa_ = owner(a, true, false, NULL);
	pb_ = owner(b, false, false, NULL);
	pc_ = owner(c, true, true, &gc);
	REQUIRE(state_of(pa) == SEG_OWNER_LIVE && state_of(pb) == SEG_OWNER_LIVE &&
	        state_of(pc) == SEG_OWNER_LIVE, "live owners");
	REQUIRE(orphan_reap(pa, 0) == -ESTALE, "reap with the wrong uuid");
	struct segment ra;
	char err[256];

	REQUIRE(segment_attach(&ra, pa, false, err, sizeof(err)) == 0, "attach %s: %s", pa, err);
	REQUIRE(!segment_is_gone(&ra), "a live owner's segment is not gone");
	kill9(pa_);
	kill9(pb_);
	kill9(pc_);		/* its child still holds the lock */
	REQUIRE(state_of(pa) == SEG_OWNER_ORPHAN, "ephemeral, owner killed: orphan");
	REQUIRE(state_of(pb) == SEG_OWNER_KEPT, "not ephemeral: kept for a restart");
	REQUIRE(state_of(pc) == SEG_OWNER_LIVE, "lock held by a forked child: live");
	n = orphan_reap_all(orph_dir, &bytes);
	REQUIRE(n == 1 && stat(pa, &st) < 0 && stat(pb, &st) == 0 && stat(pc, &st) == 0,
	        "reap: %d removed", n);
	/* a reader that still maps the reaped orphan learns it is gone */
	REQUIRE(segment_is_gone(&ra), "the reaper marked the orphan gone");
	segment_close(&ra);
	kill9(gc);	/* not our child: it dies on its own time */
	for (int i = 0; i < 400 && state_of(pc) != SEG_OWNER_ORPHAN; i++)
		usleep(5000);
	REQUIRE(state_of(pc) == SEG_OWNER_ORPHAN, "lock released: orphan");
	REQUIRE(orphan_reap_all(orph_dir, NULL) == 1 && stat(pc, &st) < 0, "second reap");
	unlink(pb);
	rmdir(orph_dir);
}

/* ---- reservation, prefault, populate ---- */

static void test_reserve(void)
{
	char nm[128], err[512];
	struct segment s, at;
	struct segment_opts o;
	int rc, steps = 0;

	snprintf(nm, sizeof(nm), "%sres", prefix);
	o = opts(nm, 64 * MiB, 4096);
	o.reserve = SEG_RESERVE_LATER;
	REQUIRE(segment_open(&s, &o, false, err, sizeof(err)) == 0, "open: %s", err);
	REQUIRE(blocks(&s) <= s.data_off && !segment_is_reserved(&s), "sparse at open");
	REQUIRE(segment_attach(&at, nm, true, err, sizeof(err)) == 0, "attach: %s", err);
	REQUIRE(!segment_is_reserved(&at), "attacher: not reserved");
	/* prefault through the attacher: pages committed, no SIGBUS */
	REQUIRE(segment_prefault(&at, s.data_off + 4096, 3 * 4096) == 0, "prefault");
	REQUIRE(blocks(&s) >= 3 * 4096, "prefault committed nothing");
	{
		/* page tables filled once per chunk of the attacher's mapping */
		_Atomic uint64_t *fm = segment_fill_map(&at);
		uint64_t a = s.data_off + 4096, c0 = a >> SEG_FILL_SHIFT;
		uint64_t c1 = (a + 3 * 4096 - 1) >> SEG_FILL_SHIFT;
		uint64_t c2 = (a + 2 * SEG_FILL_CHUNK - 1) >> SEG_FILL_SHIFT;

		REQUIRE(fm != NULL, "fill map");
		REQUIRE(segment_fill(&at, fm, a, 3 * 4096, true) == (c1 - c0 + 1) * SEG_FILL_CHUNK,
		        "fill: whole chunks");
		REQUIRE(segment_fill(&at, fm, a, 3 * 4096, false) == 0, "fill: once");
		REQUIRE(segment_fill(&at, fm, a, 2 * SEG_FILL_CHUNK, false) == (c2 - c1) * SEG_FILL_CHUNK,
		        "fill: only the chunks not filled");
		REQUIRE(segment_fill(&at, fm, at.size - 100, 1000, false) == SEG_FILL_CHUNK,
		        "fill: the last chunk, clipped at the end");
		REQUIRE(segment_fill(&at, fm, at.size, 10, false) == 0, "fill: past the end");
		REQUIRE(segment_fill(&at, NULL, a, 4096, false) == 4096, "fill: no map, every time");
		free((void *)fm);
	}
	while ((rc = segment_reserve_step(&s, 16 * MiB, err, sizeof(err))) == 0)
		steps++;
	REQUIRE(rc == 1 && steps == 3 && s.reserved == s.size, "reserve: rc %d steps %d %s", rc,
	        steps, err);
	REQUIRE(blocks(&s) >= 64 * MiB, "reserved %" PRIu64, blocks(&s));
	REQUIRE(segment_is_reserved(&at), "attacher sees it reserved");
	REQUIRE(segment_prefault(&at, s.data_off, 4096) == 0, "prefault reserved");
	/* the owner's unlink marks the segment gone for those that map it */
	REQUIRE(!segment_is_gone(&at), "not gone before the unlink");
	REQUIRE(segment_unlink(&s) == 0, "unlink");
	REQUIRE(segment_is_gone(&at) && segment_is_reserved(&at), "gone (and still reserved)");
	segment_close(&at);

	/* a tmpfs too small for the segment: prefault fails, nothing dies */
	snprintf(tmpfs_dir, sizeof(tmpfs_dir), "/tmp/t_segmap-%d", (int)getpid());
	if (mkdir(tmpfs_dir, 0700) < 0 || mount("t_segmap", tmpfs_dir, "tmpfs", 0, "size=1m") < 0) {
		printf("no private tmpfs (%s): full-tmpfs prefault not tested\n", strerror(errno));
		rmdir(tmpfs_dir);
		tmpfs_dir[0] = '\0';
		return;
	}
	char path[256];

	snprintf(path, sizeof(path), "%s/seg", tmpfs_dir);
	o = opts(path, 8 * MiB, 4096);
	o.reserve = SEG_RESERVE_UPFRONT;
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == -ENOSPC && strstr(err, "free"), "upfront on a small tmpfs: %d %s", rc, err);
	o.reserve = SEG_RESERVE_NONE;
	REQUIRE(segment_open(&s, &o, false, err, sizeof(err)) == 0, "sparse: %s", err);
	rc = segment_prefault(&s, s.data_off, 4 * MiB);
	REQUIRE(rc == -EFAULT || rc == -ENOMEM || rc == -ENOSPC, "prefault on a full tmpfs: %d", rc);
	printf("prefault on a full tmpfs: %s (no SIGBUS)\n", strerror(-rc));
	REQUIRE(segment_unlink(&s) == 0, "unlink");
}

int main(void)
{
	struct stat st;
	const char *seed = getenv("SEED");

	if (stat("/dev/shm", &st) < 0 || !S_ISDIR(st.st_mode)) {
		printf("no /dev/shm\n");
		return 77;
	}
	log_init("t_segmap", LOG_ERR);
	snprintf(prefix, sizeof(prefix), "kvp-t_segmap-%d-", (int)getpid());
	atexit(cleanup);
	rng = seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 20;
	if (!rng)
		rng = 1;
	printf("SEED=%" PRIu64 "\n", rng);
	test_fresh_sparse();
	run_model(4096, 4);
	run_model(65536, 2);
	run_model(64, 2);
	test_kill9(40);
	test_format1();
	test_orphans();
	test_reserve();
	printf("t_segmap: ok\n");
	return 0;
}

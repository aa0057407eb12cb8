/* segment: see segment.h. Creates/reuses the /dev/shm file, maps it,
 * reserves its pages when asked and owns the 4 KiB header at offset 0.
 * Called once at start-up by the node (segment_open) and by same-host
 * clients and `kvpool scan` (segment_attach); no shared state, no locks
 * (the state word of the header is read and written atomically).
 */
#include "segment.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <numa.h>
#include <numaif.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "log.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define SEG_ALIGN_MAX (1u << 30)
#define SEG_CSUM_OFF (SEG_HDR_BYTES - 8)
#define SEG_CSUM2_OFF (SEG_HDR2_BYTES - 8)
/* A prober (orphan.c) holds a file's lock for microseconds; an open that
 * meets it waits this long before calling the file busy. */
#define SEG_LOCK_WAIT_MS 1000

/* "4.0 GiB", "512.0 MiB", "100 B" */
static const char *human(uint64_t v, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double d = (double)v;
	int u = -1;

	if (v < 1024) {
		snprintf(buf, len, "%llu B", (unsigned long long)v);
		return buf;
	}
	while (d >= 1024 && u < 5) {
		d /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", d, units[u]);
	return buf;
}

static inline uint32_t ld32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static inline uint64_t ld64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

static inline void st32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static inline void st64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static bool valid_align(uint64_t a)
{
	return a >= 64 && a <= SEG_ALIGN_MAX && !(a & (a - 1));
}

void segment_path(const char *name, char *out, size_t len)
{
	if (name[0] == '/')
		snprintf(out, len, "%s", name);
	else
		snprintf(out, len, "/dev/shm/%s", name);
}

uint64_t segment_data_off(uint64_t size, uint32_t align)
{
	uint64_t a = align > 4096 ? align : 4096;

	return (SEG_MAP_OFF + (size >> SEG_MAP_SHIFT) + a - 1) & ~(a - 1);
}

uint64_t segment_proc_start(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long long start = 0;
	ssize_t n;
	char *p;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* The command name (field 2) may hold spaces and parentheses: the
	 * fields after it start at the last ')'. */
	p = strrchr(buf, ')');
	if (!p)
		return 0;
	/* field 3 is the state; starttime is field 22 */
	for (int field = 2; field < 21 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%llu", &start) != 1)
		return 0;
	return start ? (uint64_t)start : 1;
}

static void owner_block_write(uint8_t *h, const struct segment_info *info)
{
	uint8_t b[SEG_HDR2_BYTES - SEG_HDR_BYTES];

	memset(b, 0, sizeof(b));
	st64(b + 0, info->data_off);
	st64(b + 8, info->map_off);
	st64(b + 16, info->map_len);
	st32(b + 24, SEG_MAP_SHIFT);
	st32(b + 28, info->flags);
	st32(b + 32, info->owner_pid);
	st64(b + 40, info->owner_start);
	memcpy(b + 48, info->owner, strnlen(info->owner, SEG_OWNER_MAX - 1));
	st64(b + sizeof(b) - 8, XXH3_64bits(b, sizeof(b) - 8));
	/* One copy of a finished block: an attacher reading meanwhile sees a
	 * checksum mismatch at worst and retries (segment_attach). */
	memcpy(h + SEG_HDR_BYTES, b, sizeof(b));
}

void segment_header_write(void *p, const struct segment_info *info)
{
	uint8_t *h = p;
	size_t nl = strnlen(info->name, SEG_NAME_MAX - 1);

	memset(h, 0, SEG_DATA_OFF);
	st32(h + 0, SEG_MAGIC);
	st32(h + 4, info->version == 1 ? 1 : SEG_VERSION);
	st64(h + 8, info->size);
	st64(h + 16, info->uuid);
	st32(h + 24, info->align);
	st32(h + 28, SEG_DATA_OFF);
	st64(h + 32, info->created_ns);
	memcpy(h + 40, info->name, nl);
	st64(h + SEG_CSUM_OFF, XXH3_64bits(h, SEG_CSUM_OFF));
	if (info->version != 1)
		owner_block_write(h, info);
}

static int owner_block_check(const uint8_t *h, size_t n, struct segment_info *si,
			     char *errbuf, size_t errlen)
{
	const uint8_t *b = h + SEG_HDR_BYTES;

	if (n < SEG_HDR2_BYTES) {
		log_seterr(errbuf, errlen, "too short for a format 2 segment header (%zu bytes)", n);
		return -EINVAL;
	}
	if (XXH3_64bits(b, SEG_CSUM2_OFF - SEG_HDR_BYTES) != ld64(h + SEG_CSUM2_OFF)) {
		log_seterr(errbuf, errlen, "segment owner block checksum mismatch (corrupt header)");
		return -EINVAL;
	}
	si->data_off = ld64(b + 0);
	si->map_off = ld64(b + 8);
	si->map_len = ld64(b + 16);
	si->flags = ld32(b + 28);
	si->owner_pid = ld32(b + 32);
	si->owner_start = ld64(b + 40);
	/* Derived, not chosen: a field that differs is a corrupt header. */
	if (si->data_off != segment_data_off(si->size, si->align) || si->data_off >= si->size ||
	    si->map_off != SEG_MAP_OFF || si->map_len != si->size >> SEG_MAP_SHIFT ||
	    ld32(b + 24) != SEG_MAP_SHIFT || ld32(b + 36) != 0 || !memchr(b + 48, 0, SEG_OWNER_MAX)) {
		log_seterr(errbuf, errlen, "segment header has impossible map fields "
		           "(data offset %llu, map %llu+%llu)", (unsigned long long)si->data_off,
		           (unsigned long long)si->map_off, (unsigned long long)si->map_len);
		return -EINVAL;
	}
	memcpy(si->owner, b + 48, SEG_OWNER_MAX);
	return 0;
}

int segment_header_check(const void *p, size_t n, struct segment_info *info,
			 char *errbuf, size_t errlen)
{
	const uint8_t *h = p;
	struct segment_info si;
	uint32_t version;

	if (n < SEG_HDR_BYTES) {
		log_seterr(errbuf, errlen, "too short for a segment header (%zu bytes)", n);
		return -EINVAL;
	}
	if (ld32(h) != SEG_MAGIC) {
		log_seterr(errbuf, errlen, "not a kvpool segment (bad magic)");
		return -EINVAL;
	}
	version = ld32(h + 4);
	if (version < SEG_VERSION_MIN || version > SEG_VERSION) {
		log_seterr(errbuf, errlen, "segment format version %u, this build reads %u..%u",
		           version, SEG_VERSION_MIN, SEG_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (XXH3_64bits(h, SEG_CSUM_OFF) != ld64(h + SEG_CSUM_OFF)) {
		log_seterr(errbuf, errlen, "segment header checksum mismatch (corrupt header)");
		return -EINVAL;
	}
	memset(&si, 0, sizeof(si));
	si.version = version;
	si.size = ld64(h + 8);
	si.uuid = ld64(h + 16);
	si.align = ld32(h + 24);
	si.created_ns = ld64(h + 32);
	if (si.size <= SEG_DATA_OFF || si.size % 4096 || !valid_align(si.align) ||
	    ld32(h + 28) != SEG_DATA_OFF || si.uuid == 0 || si.size > (uint64_t)INT64_MAX ||
	    !memchr(h + 40, 0, SEG_NAME_MAX)) {
		log_seterr(errbuf, errlen, "segment header has impossible fields "
		           "(size %llu, align %u, data offset %u)",
		           (unsigned long long)si.size, si.align, ld32(h + 28));
		return -EINVAL;
	}
	memcpy(si.name, h + 40, SEG_NAME_MAX);
	if (version == 1) {
		si.data_off = SEG_DATA_OFF;
	} else {
		int rc = owner_block_check(h, n, &si, errbuf, errlen);

		if (rc < 0)
			return rc;
	}
	if (info)
		*info = si;
	return 0;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* Reads the header of an existing file: 0 valid, 1 never initialised (a
 * creation that died before writing the header: nothing to keep), <0 bad. */
static int read_header(int fd, off_t st_size, struct segment_info *info,
		       char *errbuf, size_t errlen)
{
	uint8_t buf[SEG_DATA_OFF];
	ssize_t n;

	if (st_size == 0)
		return 1;
	n = pread(fd, buf, sizeof(buf), 0);
	if (n < 0) {
		int err = -errno;

		log_seterr(errbuf, errlen, "cannot read header: %s", strerror(-err));
		return err;
	}
	if (n >= SEG_HDR_BYTES && all_zero(buf, SEG_HDR_BYTES))
		return 1;
	return segment_header_check(buf, (size_t)n, info, errbuf, errlen);
}

static int bind_node(void *base, uint64_t size, int node, char *errbuf, size_t errlen)
{
	unsigned long mask[16] = { 0 };
	int err;

	if (numa_available() < 0) {
		log_warn("numa_node %d requested but NUMA is not available here; not binding",
			 node);
		return 0;
	}
	if (node > numa_max_node() || node >= (int)(sizeof(mask) * 8)) {
		log_seterr(errbuf, errlen, "numa_node %d: this host has nodes 0..%d",
		           node, numa_max_node());
		return -EINVAL;
	}
	mask[node / (8 * sizeof(long))] |= 1ul << (node % (8 * sizeof(long)));
	/* On tmpfs this sets the file's shared policy: pages allocated from now
	 * on (the fallocate that follows) come from the node. */
	if (mbind(base, size, MPOL_BIND, mask, sizeof(mask) * 8, 0) < 0) {
		err = -errno;
		log_seterr(errbuf, errlen, "mbind to NUMA node %d: %s", node, strerror(-err));
		return err;
	}
	return 0;
}

static void nospace(const char *path, int fd, uint64_t size, char *errbuf, size_t errlen)
{
	char dir[256], b1[32], b2[32];
	struct statvfs vfs;
	uint64_t avail = 0;
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir)
		*slash = '\0';
	else if (slash)
		slash[1] = '\0';
	if (fstatvfs(fd, &vfs) == 0)
		avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	log_seterr(errbuf, errlen, "%s: cannot reserve %s: %s (%s has %s free)", path,
	           human(size, b1, sizeof(b1)), strerror(ENOSPC), dir, human(avail, b2, sizeof(b2)));
}

/* Fails early (before tmpfs hands out pages it then has to take back, and
 * before a 4 GiB fallocate pushes the host into reclaim) when the file
 * system cannot hold the missing part of the file. */
static int check_space(const char *path, int fd, uint64_t size, char *errbuf, size_t errlen)
{
	struct statvfs vfs;
	struct stat st;
	uint64_t have, avail;

	if (fstat(fd, &st) < 0 || fstatvfs(fd, &vfs) < 0)
		return 0;	/* let fallocate decide */
	have = (uint64_t)st.st_blocks * 512;
	avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	if (have >= size || size - have <= avail)
		return 0;
	nospace(path, fd, size, errbuf, errlen);
	return -ENOSPC;
}

static int reserve_range(const char *path, int fd, uint64_t off, uint64_t len,
			 char *errbuf, size_t errlen)
{
	char b1[32];
	/* segment_open checked the free space already; posix_fallocate
	 * returns the error number */
	int rc = posix_fallocate(fd, (off_t)off, (off_t)len);

	if (rc == ENOSPC) {
		/* Someone else took the space since the check. */
		nospace(path, fd, len, errbuf, errlen);
		return -rc;
	}
	if (rc) {
		log_seterr(errbuf, errlen, "%s: cannot reserve %s: %s", path,
		           human(len, b1, sizeof(b1)), strerror(rc));
		return -rc;
	}
	return 0;
}

/* flock, waiting out a short-lived holder (orphan.c probes a file it
 * believes dead for microseconds); a live owner keeps it and is -EBUSY. */
static int lock_file(int fd)
{
	for (int waited = 0;; waited += 5) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK)
			return -errno;
		if (waited >= SEG_LOCK_WAIT_MS)
			return -EBUSY;
		usleep(5000);
	}
}

static void set_owner(struct segment_info *info, const struct segment_opts *o)
{
	info->flags = o->ephemeral ? SEG_F_EPHEMERAL : 0;
	info->owner_pid = (uint32_t)getpid();
	info->owner_start = segment_proc_start(getpid());
	memset(info->owner, 0, sizeof(info->owner));
	/* By default the program's name: "kvpool-node", "python3", ... */
	snprintf(info->owner, sizeof(info->owner), "%s",
		 o->owner ? o->owner : program_invocation_short_name);
}

static void state_store(const struct segment *seg, uint32_t v)
{
	if (seg->version >= 2)
		__atomic_store_n((uint32_t *)((uint8_t *)seg->base + SEG_STATE_OFF), v,
				 __ATOMIC_RELEASE);
}

static void fill_seg(struct segment *seg, int fd, void *base, const struct segment_info *info,
		     const struct stat *st)
{
	seg->fd = fd;
	seg->base = base;
	seg->size = info->size;
	seg->uuid = info->uuid;
	seg->align = info->align;
	seg->dev = st->st_dev;
	seg->ino = st->st_ino;
	seg->version = info->version;
	seg->data_off = info->data_off;
	if (info->version >= 2) {
		seg->map = (uint8_t *)base + info->map_off;
		seg->map_len = info->map_len;
	}
}

int segment_open(struct segment *seg, const struct segment_opts *o, bool reset,
		 char *errbuf, size_t errlen)
{
	struct segment_info info;
	uint32_t align = o->align ? o->align : 4096;
	mode_t mode = o->mode ? (mode_t)o->mode : 0600;
	bool fresh = false, created = false;
	bool populate = o->populate || o->hugepages;
	enum seg_reserve reserve = populate ? SEG_RESERVE_UPFRONT : o->reserve;
	char b1[32], b2[32];
	struct stat st;
	void *base;
	int fd, rc, tries = 0;

	memset(seg, 0, sizeof(*seg));
	seg->fd = -1;
	if (!o->name || !o->name[0]) {
		log_seterr(errbuf, errlen, "segment name is empty");
		return -EINVAL;
	}
	segment_path(o->name, seg->path, sizeof(seg->path));
	if (strlen(seg->path) >= sizeof(seg->path) - 1) {
		log_seterr(errbuf, errlen, "%s: segment path too long", o->name);
		return -ENAMETOOLONG;
	}
	if (o->size <= SEG_DATA_OFF || o->size % 4096 || !valid_align(align) ||
	    o->size > (uint64_t)INT64_MAX || segment_data_off(o->size, align) >= o->size) {
		log_seterr(errbuf, errlen, "%s: bad segment size %llu or alignment %u (size: a "
		           "multiple of 4096 with room for data past the header, the commit map "
		           "(1/4096 of it) and one alignment unit; align: a power of two 64..1G)",
		           seg->path, (unsigned long long)o->size, align);
		return -EINVAL;
	}

again:
	fd = open(seg->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd >= 0) {
		created = fresh = true;
	} else if (errno == EEXIST) {
		fd = open(seg->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0 && errno == ENOENT && tries++ < 3)
			goto again;	/* removed between the two opens */
	}
	if (fd < 0) {
		rc = -errno;
		log_seterr(errbuf, errlen, "%s: %s", seg->path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		log_seterr(errbuf, errlen, "%s: fstat: %s", seg->path, strerror(-rc));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		log_seterr(errbuf, errlen, "%s: not a regular file", seg->path);
		goto out_close;
	}
	/* One owner per segment: a second node on the same file would hand
	 * out the same offsets. Released when the fd closes (or the node dies). */
	rc = lock_file(fd);
	if (rc < 0) {
		log_seterr(errbuf, errlen, "%s: %s", seg->path, rc == -EBUSY ?
		           "in use by another process (another kvpool-node on this segment?)" :
		           strerror(-rc));
		goto out_close;
	}
	/* An orphan reaper (orphan.c) may have removed the file while we
	 * waited for its lock: then open what the name holds now. */
	if (!created) {
		struct stat now;

		if ((lstat(seg->path, &now) < 0 || now.st_ino != st.st_ino ||
		     now.st_dev != st.st_dev) && tries++ < 3) {
			close(fd);
			goto again;
		}
	}

	if (!created) {
		char why[160];

		rc = read_header(fd, st.st_size, &info, why, sizeof(why));
		if (rc == 0 && (uint64_t)st.st_size != info.size) {
			snprintf(why, sizeof(why), "file is %llu bytes, header says %llu",
				 (unsigned long long)st.st_size, (unsigned long long)info.size);
			rc = -EINVAL;
		}
		if (rc == 1) {
			fresh = true;
		} else if (rc < 0) {
			if (!reset) {
				log_seterr(errbuf, errlen, "%s: %s; remove the file or start with "
				           "reset to re-create it (its contents are lost)",
				           seg->path, why);
				goto out_close;
			}
			log_warn("%s: %s; re-creating it", seg->path, why);
			fresh = true;
		} else if (info.size != o->size || info.align != align) {
			if (!reset) {
				log_seterr(errbuf, errlen, "%s: existing segment is %s with alignment %u, "
				           "configured %s with alignment %u; remove the file or start "
				           "with reset to re-create it (its contents are lost)",
				           seg->path, human(info.size, b1, sizeof(b1)), info.align,
				           human(o->size, b2, sizeof(b2)), align);
				rc = -EINVAL;
				goto out_close;
			}
			log_warn("%s: size or alignment changed; re-creating it", seg->path);
			fresh = true;
		} else if (info.version == 1) {
			log_notice("%s: segment format 1 (no commit map): every start scans it "
				   "page by page; re-create it (reset, contents lost) for starts "
				   "that cost what it holds", seg->path);
		}
		/* Drop the old pages so nothing stale survives a re-creation. */
		if (fresh && ftruncate(fd, 0) < 0) {
			rc = -errno;
			log_seterr(errbuf, errlen, "%s: truncate: %s", seg->path, strerror(-rc));
			goto out_close;
		}
	}

	if (fchmod(fd, mode) < 0 || (o->gid != (gid_t)-1 && fchown(fd, (uid_t)-1, o->gid) < 0)) {
		rc = -errno;
		log_seterr(errbuf, errlen, "%s: setting mode %o / group %d: %s", seg->path,
		           (unsigned)mode, (int)o->gid, strerror(-rc));
		goto out_unlink;
	}
	/* A file larger than the free space is refused unless the caller
	 * takes the overcommit knowingly (SEG_RESERVE_NONE): it would fail
	 * writes (or SIGBUS writers) once the file system fills. */
	rc = check_space(seg->path, fd, o->size, errbuf, errlen);
	if (rc < 0 && reserve != SEG_RESERVE_NONE)
		goto out_unlink;
	if (rc < 0)
		log_warn("%s (sparse segment: puts fail once it fills)", errbuf);
	if (ftruncate(fd, (off_t)o->size) < 0) {
		rc = -errno;
		log_seterr(errbuf, errlen, "%s: ftruncate: %s", seg->path, strerror(-rc));
		goto out_unlink;
	}
	base = mmap(NULL, o->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		log_seterr(errbuf, errlen, "%s: mmap %s: %s", seg->path,
		           human(o->size, b1, sizeof(b1)), strerror(-rc));
		goto out_unlink;
	}
	/* Policy first, then allocation: NUMA and huge pages only apply to
	 * pages allocated after they are set. */
	if (o->numa_node >= 0) {
		rc = bind_node(base, o->size, o->numa_node, errbuf, errlen);
		if (rc < 0)
			goto out_unmap;
	}
	if (o->hugepages) {
		if (madvise(base, o->size, MADV_HUGEPAGE) < 0)
			log_warn("%s: MADV_HUGEPAGE: %s (check /sys/kernel/mm/"
				 "transparent_hugepage/shmem_enabled)", seg->path, strerror(errno));
		/* fallocate allocates through the file, ignoring the mapping's
		 * advice; faulting the pages in first lets them be huge. */
		else if (madvise(base, o->size, MADV_POPULATE_WRITE) < 0)
			log_debug("%s: MADV_POPULATE_WRITE: %s", seg->path, strerror(errno));
	}
	if (reserve == SEG_RESERVE_UPFRONT) {
		rc = reserve_range(seg->path, fd, 0, o->size, errbuf, errlen);
		if (rc < 0)
			goto out_unmap;
		seg->reserved = o->size;
	} else if (fresh || info.version >= 2) {
		/* The header and the commit map are always reserved (1/4096 of
		 * the file, milliseconds): a writer's store into the map must
		 * never SIGBUS on a full tmpfs. Reserved pages stay holes to
		 * SEEK_DATA until written, so scans still skip them. */
		uint64_t meta = segment_data_off(o->size, align);

		rc = reserve_range(seg->path, fd, 0, meta, errbuf, errlen);
		if (rc < 0)
			goto out_unmap;
		seg->reserved = meta;
	}
	if (populate && madvise(base, o->size, MADV_POPULATE_WRITE) < 0) {
		/* Kernels before 5.14: map again over the same range. */
		void *p = mmap(base, o->size, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd, 0);

		if (p == MAP_FAILED) {
			rc = -errno;
			log_seterr(errbuf, errlen, "%s: populate: %s", seg->path, strerror(-rc));
			goto out_unmap;
		}
	}

	if (fresh) {
		struct timespec ts;
		const char *slash = strrchr(seg->path, '/');

		memset(&info, 0, sizeof(info));
		do {
			if (getrandom(&info.uuid, sizeof(info.uuid), 0) != sizeof(info.uuid)) {
				rc = -errno;
				log_seterr(errbuf, errlen, "getrandom: %s", strerror(-rc));
				goto out_unmap;
			}
		} while (info.uuid == 0);
		clock_gettime(CLOCK_REALTIME, &ts);
		info.version = SEG_VERSION;
		info.size = o->size;
		info.align = align;
		info.created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
		info.data_off = segment_data_off(o->size, align);
		info.map_off = SEG_MAP_OFF;
		info.map_len = o->size >> SEG_MAP_SHIFT;
		snprintf(info.name, sizeof(info.name), "%s", slash ? slash + 1 : seg->path);
		set_owner(&info, o);
		/* Only the header page is written: the map and the data stay
		 * holes (zero) until something is put. */
		segment_header_write(base, &info);
	} else if (info.version >= 2) {
		set_owner(&info, o);
		owner_block_write(base, &info);
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		log_seterr(errbuf, errlen, "%s: fstat: %s", seg->path, strerror(-rc));
		goto out_unmap;
	}
	fill_seg(seg, fd, base, &info, &st);
	seg->created = fresh;
	seg->writable = true;
	state_store(seg, seg->reserved == seg->size ? SEG_S_RESERVED : 0);
	return 0;

out_unmap:
	munmap(base, o->size);
out_unlink:
	/* Only a file this call created goes; an existing one keeps its data. */
	if (created)
		unlink(seg->path);
out_close:
	close(fd);
	return rc;
}

int segment_attach(struct segment *seg, const char *path, bool writable,
		   char *errbuf, size_t errlen)
{
	struct segment_info info;
	char why[160];
	struct stat st;
	void *base;
	int fd, rc;

	memset(seg, 0, sizeof(*seg));
	seg->fd = -1;
	/* A bare name means /dev/shm/<name>; anything with a '/' is a path. */
	if (strchr(path, '/'))
		snprintf(seg->path, sizeof(seg->path), "%s", path);
	else
		segment_path(path, seg->path, sizeof(seg->path));
	fd = open(seg->path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		log_seterr(errbuf, errlen, "%s: %s", seg->path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		log_seterr(errbuf, errlen, "%s: fstat: %s", seg->path, strerror(-rc));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode) || st.st_size <= SEG_DATA_OFF) {
		rc = -EINVAL;
		log_seterr(errbuf, errlen, "%s: not a kvpool segment (%s)", seg->path,
		           S_ISREG(st.st_mode) ? "too small" : "not a regular file");
		goto out_close;
	}
	/* The owner rewrites its block of the header at every open: a read
	 * that met the rewrite half-way is tried again. */
	for (int tries = 0;; tries++) {
		rc = read_header(fd, st.st_size, &info, why, sizeof(why));
		if (rc != -EINVAL || tries == 3)
			break;
		usleep(1000);
	}
	if (rc == 1) {
		rc = -EINVAL;
		snprintf(why, sizeof(why), "header never written (segment still being created?)");
	}
	if (rc == 0 && info.size != (uint64_t)st.st_size) {
		rc = -EINVAL;
		snprintf(why, sizeof(why), "file is %llu bytes, header says %llu",
			 (unsigned long long)st.st_size, (unsigned long long)info.size);
	}
	if (rc < 0) {
		log_seterr(errbuf, errlen, "%s: %s", seg->path, why);
		goto out_close;
	}
	base = mmap(NULL, info.size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		log_seterr(errbuf, errlen, "%s: mmap: %s", seg->path, strerror(-rc));
		goto out_close;
	}
	fill_seg(seg, fd, base, &info, &st);
	seg->created = false;
	seg->writable = writable;
	return 0;

out_close:
	close(fd);
	return rc;
}

int segment_reserve_step(struct segment *seg, uint64_t len, char *errbuf, size_t errlen)
{
	uint64_t n;
	int rc;

	if (seg->reserved >= seg->size)
		return 1;
	n = seg->size - seg->reserved;
	if (len && n > len)
		n = len;
	rc = reserve_range(seg->path, seg->fd, seg->reserved, n, errbuf, errlen);
	if (rc < 0)
		return rc;
	seg->reserved += n;
	if (seg->reserved < seg->size)
		return 0;
	state_store(seg, SEG_S_RESERVED);
	return 1;
}

/* The state word's bits (0 for format 1, which has none, or no mapping). */
static uint32_t state_load(const struct segment *seg)
{
	if (seg->version < 2 || !seg->base)
		return 0;
	return __atomic_load_n((const uint32_t *)((const uint8_t *)seg->base + SEG_STATE_OFF),
			       __ATOMIC_ACQUIRE);
}

bool segment_is_reserved(const struct segment *seg)
{
	return state_load(seg) & SEG_S_RESERVED;
}

void segment_mark_gone(const struct segment *seg)
{
	if (seg->version >= 2 && seg->base && seg->writable)
		__atomic_fetch_or((uint32_t *)((uint8_t *)seg->base + SEG_STATE_OFF), SEG_S_GONE,
				  __ATOMIC_RELEASE);
}

bool segment_is_gone(const struct segment *seg)
{
	return state_load(seg) & SEG_S_GONE;
}

int segment_prefault(const struct segment *seg, uint64_t off, uint64_t len)
{
	uint64_t start = off & ~4095ull, end;

	if (!len || off >= seg->size || segment_is_reserved(seg))
		return 0;
	end = len > seg->size - off ? seg->size : (off + len + 4095) & ~4095ull;
	if (madvise((uint8_t *)seg->base + start, end - start, MADV_POPULATE_WRITE) == 0)
		return 0;
	/* EINVAL: a kernel before 5.14; the write takes its chances. */
	return errno == EINVAL ? 0 : -errno;
}

void segment_populate_range(const struct segment *seg, uint64_t off, uint64_t len, bool writable)
{
	uint64_t start = off & ~4095ull, end;

	if (!len || off >= seg->size)
		return;
	end = len > seg->size - off ? seg->size : (off + len + 4095) & ~4095ull;
	(void)madvise((uint8_t *)seg->base + start, end - start,
		      writable ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
}

_Atomic uint64_t *segment_fill_map(const struct segment *seg)
{
	return calloc(((seg->size >> SEG_FILL_SHIFT) + 64) / 64, sizeof(uint64_t));
}

uint64_t segment_fill(const struct segment *seg, _Atomic uint64_t *filled, uint64_t off,
		      uint64_t len, bool writable)
{
	uint64_t first, last, done = 0;

	if (!len || off >= seg->size)
		return 0;
	if (len > seg->size - off)
		len = seg->size - off;
	if (!filled) {
		segment_populate_range(seg, off, len, writable);
		return len;
	}
	first = off >> SEG_FILL_SHIFT;
	last = (off + len - 1) >> SEG_FILL_SHIFT;
	for (uint64_t c = first; c <= last;) {
		uint64_t run = c;

		while (run <= last &&
		       !(atomic_load_explicit(&filled[run / 64], memory_order_relaxed) &
			 (1ull << (run % 64))))
			run++;
		if (run > c) {
			uint64_t a = c << SEG_FILL_SHIFT, b = run << SEG_FILL_SHIFT;

			if (b > seg->size)
				b = seg->size;
			segment_populate_range(seg, a, b - a, writable);
			done += b - a;
			for (uint64_t i = c; i < run; i++)
				atomic_fetch_or_explicit(&filled[i / 64], 1ull << (i % 64),
							 memory_order_relaxed);
		}
		c = run + 1;	/* run is filled already (or past last) */
	}
	return done;
}

void segment_close(struct segment *seg)
{
	/* open/attach never leave an fd without a mapping; a zeroed struct
	 * (fd 0) must not close stdin. */
	if (!seg->base)
		return;
	munmap(seg->base, seg->size);
	close(seg->fd);
	seg->base = NULL;
	seg->fd = -1;
}

int segment_unlink(struct segment *seg)
{
	struct stat st;

	/* readers that still map it stop serving its objects now */
	segment_mark_gone(seg);
	segment_close(seg);
	if (!seg->path[0])
		return -EINVAL;
	if (lstat(seg->path, &st) < 0)
		return -errno;
	/* Someone may have replaced the file since: remove only ours. */
	if (st.st_dev != seg->dev || st.st_ino != seg->ino)
		return -ESTALE;
	if (unlink(seg->path) < 0)
		return -errno;
	return 0;
}

/* segment: see segment.h. Creates/reuses the /dev/shm file, reserves its
 * pages, maps it and owns the 4 KiB header at offset 0. Called once at
 * start-up by the node (segment_open) and by same-host clients and
 * `kvpool scan` (segment_attach); no shared state, no locks.
 */
#include "segment.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <numa.h>
#include <numaif.h>
#include <stdarg.h>
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

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define SEG_ALIGN_MAX (1u << 30)
#define SEG_CSUM_OFF (SEG_HDR_BYTES - 8)

static void seterr(char *errbuf, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void seterr(char *errbuf, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!errbuf || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(errbuf, errlen, fmt, ap);
	va_end(ap);
}

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

void segment_header_write(void *p, const struct segment_info *info)
{
	uint8_t *h = p;
	size_t nl = strnlen(info->name, SEG_NAME_MAX - 1);

	memset(h, 0, SEG_DATA_OFF);
	st32(h + 0, SEG_MAGIC);
	st32(h + 4, SEG_VERSION);
	st64(h + 8, info->size);
	st64(h + 16, info->uuid);
	st32(h + 24, info->align);
	st32(h + 28, SEG_DATA_OFF);
	st64(h + 32, info->created_ns);
	memcpy(h + 40, info->name, nl);
	st64(h + SEG_CSUM_OFF, XXH3_64bits(h, SEG_CSUM_OFF));
}

int segment_header_check(const void *p, size_t n, struct segment_info *info,
			 char *errbuf, size_t errlen)
{
	const uint8_t *h = p;
	struct segment_info si;
	uint32_t version;

	if (n < SEG_HDR_BYTES) {
		seterr(errbuf, errlen, "too short for a segment header (%zu bytes)", n);
		return -EINVAL;
	}
	if (ld32(h) != SEG_MAGIC) {
		seterr(errbuf, errlen, "not a kvpool segment (bad magic)");
		return -EINVAL;
	}
	version = ld32(h + 4);
	if (version != SEG_VERSION) {
		seterr(errbuf, errlen, "segment format version %u, this build reads %u",
		       version, SEG_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (XXH3_64bits(h, SEG_CSUM_OFF) != ld64(h + SEG_CSUM_OFF)) {
		seterr(errbuf, errlen, "segment header checksum mismatch (corrupt header)");
		return -EINVAL;
	}
	memset(&si, 0, sizeof(si));
	si.version = version;
	si.size = ld64(h + 8);
	si.uuid = ld64(h + 16);
	si.align = ld32(h + 24);
	si.created_ns = ld64(h + 32);
	if (si.size <= SEG_DATA_OFF || si.size % 4096 || !valid_align(si.align) ||
	    ld32(h + 28) != SEG_DATA_OFF || si.uuid == 0 ||
	    !memchr(h + 40, 0, SEG_NAME_MAX)) {
		seterr(errbuf, errlen, "segment header has impossible fields "
		       "(size %llu, align %u, data offset %u)",
		       (unsigned long long)si.size, si.align, ld32(h + 28));
		return -EINVAL;
	}
	memcpy(si.name, h + 40, SEG_NAME_MAX);
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

		seterr(errbuf, errlen, "cannot read header: %s", strerror(-err));
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
		seterr(errbuf, errlen, "numa_node %d: this host has nodes 0..%d",
		       node, numa_max_node());
		return -EINVAL;
	}
	mask[node / (8 * sizeof(long))] |= 1ul << (node % (8 * sizeof(long)));
	/* On tmpfs this sets the file's shared policy: pages allocated from now
	 * on (the fallocate that follows) come from the node. */
	if (mbind(base, size, MPOL_BIND, mask, sizeof(mask) * 8, 0) < 0) {
		err = -errno;
		seterr(errbuf, errlen, "mbind to NUMA node %d: %s", node, strerror(-err));
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
	seterr(errbuf, errlen, "%s: cannot reserve %s: %s (%s has %s free)", path,
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

static int reserve(const char *path, int fd, uint64_t size, char *errbuf, size_t errlen)
{
	int rc = check_space(path, fd, size, errbuf, errlen);
	char b1[32];

	if (rc < 0)
		return rc;
	rc = posix_fallocate(fd, 0, (off_t)size);	/* returns the error number */
	if (rc == ENOSPC) {
		/* Someone else took the space since the check. */
		nospace(path, fd, size, errbuf, errlen);
		return -rc;
	}
	if (rc) {
		seterr(errbuf, errlen, "%s: cannot reserve %s: %s", path,
		       human(size, b1, sizeof(b1)), strerror(rc));
		return -rc;
	}
	return 0;
}

int segment_open(struct segment *seg, const struct segment_opts *o, bool reset,
		 char *errbuf, size_t errlen)
{
	struct segment_info info;
	uint32_t align = o->align ? o->align : 4096;
	mode_t mode = o->mode ? (mode_t)o->mode : 0600;
	bool fresh = false, created = false;
	char b1[32], b2[32];
	struct stat st;
	void *base;
	int fd, rc;

	memset(seg, 0, sizeof(*seg));
	seg->fd = -1;
	if (!o->name || !o->name[0]) {
		seterr(errbuf, errlen, "segment name is empty");
		return -EINVAL;
	}
	segment_path(o->name, seg->path, sizeof(seg->path));
	if (strlen(seg->path) >= sizeof(seg->path) - 1) {
		seterr(errbuf, errlen, "%s: segment path too long", o->name);
		return -ENAMETOOLONG;
	}
	if (o->size <= SEG_DATA_OFF || o->size % 4096 || !valid_align(align) ||
	    o->size > (uint64_t)INT64_MAX) {
		seterr(errbuf, errlen, "%s: bad segment size %llu or alignment %u (size: a "
		       "multiple of 4096 above 4096; align: a power of two 64..1G)", seg->path,
		       (unsigned long long)o->size, align);
		return -EINVAL;
	}

	fd = open(seg->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd >= 0) {
		created = fresh = true;
	} else if (errno == EEXIST) {
		fd = open(seg->path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	}
	if (fd < 0) {
		rc = -errno;
		seterr(errbuf, errlen, "%s: %s", seg->path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		seterr(errbuf, errlen, "%s: fstat: %s", seg->path, strerror(-rc));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		seterr(errbuf, errlen, "%s: not a regular file", seg->path);
		goto out_close;
	}
	/* One owner per segment: a second node on the same file would hand
	 * out the same offsets. Released when the fd closes (or the node dies). */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		seterr(errbuf, errlen, "%s: %s", seg->path, rc == -EBUSY ?
		       "in use by another process (another kvpool-node on this segment?)" :
		       strerror(-rc));
		goto out_close;
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
				seterr(errbuf, errlen, "%s: %s; remove the file or start with "
				       "reset to re-create it (its contents are lost)",
				       seg->path, why);
				goto out_close;
			}
			log_warn("%s: %s; re-creating it", seg->path, why);
			fresh = true;
		} else if (info.size != o->size || info.align != align) {
			if (!reset) {
				seterr(errbuf, errlen, "%s: existing segment is %s with alignment %u, "
				       "configured %s with alignment %u; remove the file or start "
				       "with reset to re-create it (its contents are lost)",
				       seg->path, human(info.size, b1, sizeof(b1)), info.align,
				       human(o->size, b2, sizeof(b2)), align);
				rc = -EINVAL;
				goto out_close;
			}
			log_warn("%s: size or alignment changed; re-creating it", seg->path);
			fresh = true;
		}
		/* Drop the old pages so nothing stale survives a re-creation. */
		if (fresh && ftruncate(fd, 0) < 0) {
			rc = -errno;
			seterr(errbuf, errlen, "%s: truncate: %s", seg->path, strerror(-rc));
			goto out_close;
		}
	}

	if (fchmod(fd, mode) < 0 || (o->gid != (gid_t)-1 && fchown(fd, (uid_t)-1, o->gid) < 0)) {
		rc = -errno;
		seterr(errbuf, errlen, "%s: setting mode %o / group %d: %s", seg->path,
		       (unsigned)mode, (int)o->gid, strerror(-rc));
		goto out_unlink;
	}
	rc = check_space(seg->path, fd, o->size, errbuf, errlen);
	if (rc < 0)
		goto out_unlink;
	if (ftruncate(fd, (off_t)o->size) < 0) {
		rc = -errno;
		seterr(errbuf, errlen, "%s: ftruncate: %s", seg->path, strerror(-rc));
		goto out_unlink;
	}
	base = mmap(NULL, o->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		seterr(errbuf, errlen, "%s: mmap %s: %s", seg->path,
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
	rc = reserve(seg->path, fd, o->size, errbuf, errlen);
	if (rc < 0)
		goto out_unmap;
	if (o->populate && madvise(base, o->size, MADV_POPULATE_WRITE) < 0) {
		/* Kernels before 5.14: map again over the same range. */
		void *p = mmap(base, o->size, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd, 0);

		if (p == MAP_FAILED) {
			rc = -errno;
			seterr(errbuf, errlen, "%s: populate: %s", seg->path, strerror(-rc));
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
				seterr(errbuf, errlen, "getrandom: %s", strerror(-rc));
				goto out_unmap;
			}
		} while (info.uuid == 0);
		clock_gettime(CLOCK_REALTIME, &ts);
		info.version = SEG_VERSION;
		info.size = o->size;
		info.align = align;
		info.created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
		snprintf(info.name, sizeof(info.name), "%s", slash ? slash + 1 : seg->path);
		segment_header_write(base, &info);
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		seterr(errbuf, errlen, "%s: fstat: %s", seg->path, strerror(-rc));
		goto out_unmap;
	}
	seg->fd = fd;
	seg->base = base;
	seg->size = o->size;
	seg->uuid = info.uuid;
	seg->align = align;
	seg->dev = st.st_dev;
	seg->ino = st.st_ino;
	seg->created = fresh;
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
		seterr(errbuf, errlen, "%s: %s", seg->path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		seterr(errbuf, errlen, "%s: fstat: %s", seg->path, strerror(-rc));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode) || st.st_size <= SEG_DATA_OFF) {
		rc = -EINVAL;
		seterr(errbuf, errlen, "%s: not a kvpool segment (%s)", seg->path,
		       S_ISREG(st.st_mode) ? "too small" : "not a regular file");
		goto out_close;
	}
	rc = read_header(fd, st.st_size, &info, why, sizeof(why));
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
		seterr(errbuf, errlen, "%s: %s", seg->path, why);
		goto out_close;
	}
	base = mmap(NULL, info.size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		seterr(errbuf, errlen, "%s: mmap: %s", seg->path, strerror(-rc));
		goto out_close;
	}
	seg->fd = fd;
	seg->base = base;
	seg->size = info.size;
	seg->uuid = info.uuid;
	seg->align = info.align;
	seg->dev = st.st_dev;
	seg->ino = st.st_ino;
	seg->created = false;
	return 0;

out_close:
	close(fd);
	return rc;
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

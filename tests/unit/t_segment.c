/* t_segment: segment files in /dev/shm. Create, close, reopen (uuid and
 * content survive), size/alignment mismatch, corrupt and empty headers,
 * reset, attach read-only and read-write, 0600 / 0660+group modes, a
 * segment larger than /dev/shm's free space (fails at open, naming the free
 * space, leaving no file), options (populate, hugepages, NUMA), unlink, and
 * the offline scan listing (text and JSON). Every file is named with the
 * pid and removed at exit, also on failure.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <numa.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "extent.h"
#include "log.h"
#include "scan.h"
#include "segmap.h"
#include "segment.h"
#include "testlib.h"

#define MiB (1ull << 20)

static char prefix[64];		/* kvp-t_segment-<pid>- */

static int count_ours(bool remove)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, prefix, strlen(prefix)))
			continue;
		n++;
		if (remove) {
			char p[512];

			snprintf(p, sizeof(p), "/dev/shm/%s", de->d_name);
			unlink(p);
		}
	}
	closedir(d);
	return n;
}

static void cleanup(void)
{
	count_ours(true);
}

static const char *name(const char *suffix, char *buf, size_t len)
{
	snprintf(buf, len, "%s%s", prefix, suffix);
	return buf;
}

static struct segment_opts opts(const char *nm, uint64_t size)
{
	return (struct segment_opts){ .name = nm, .size = size, .align = 4096, .mode = 0,
				      .gid = (gid_t)-1, .numa_node = -1 };
}

static bool exists(const char *nm)
{
	char p[300];
	struct stat st;

	segment_path(nm, p, sizeof(p));
	return stat(p, &st) == 0;
}

/* Puts one extent at off through the mapping. */
static void put(struct segment *s, uint64_t off, const char *key, size_t klen,
		const char *val, uint64_t gen)
{
	struct ext_hdr h = { .key_len = (uint32_t)klen, .value_len = strlen(val),
			     .value_checksum = ext_checksum(val, strlen(val)),
			     .generation = gen, .seg_uuid = s->uuid,
			     .put_time_ns = 1714564800123000000ull };
	uint8_t *p = (uint8_t *)s->base + off;

	ext_encode(p, &h, key);
	memcpy(p + EXT_HDR_SIZE + klen, val, h.value_len);
	segmap_commit(s, off, gen);	/* as every writer does after the extent */
}

static void test_lifecycle(void)
{
	char nm[128], err[512], p[300];
	struct segment s, s2, ro;
	struct segment_opts o;
	struct ext_hdr h;
	const uint8_t *k;
	struct stat st;
	uint64_t uuid;
	pid_t pid;
	int rc, status;

	name("a", nm, sizeof(nm));
	o = opts(nm, 8 * MiB);
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == 0, "open: %d %s", rc, err);
	REQUIRE(s.created && s.uuid && s.base && s.fd >= 0 && s.size == 8 * MiB && s.align == 4096,
	        "fields");
	segment_path(nm, p, sizeof(p));
	REQUIRE(strcmp(s.path, p) == 0 && strncmp(p, "/dev/shm/", 9) == 0, "path %s", s.path);
	REQUIRE(stat(p, &st) == 0, "stat");
	REQUIRE((st.st_mode & 0777) == 0600, "mode %o", (unsigned)(st.st_mode & 0777));
	REQUIRE((uint64_t)st.st_size == 8 * MiB && (uint64_t)st.st_blocks * 512 >= 8 * MiB,
	        "reserved: size %lld blocks %lld", (long long)st.st_size, (long long)st.st_blocks);
	REQUIRE(st.st_dev == s.dev && st.st_ino == s.ino, "dev/ino");
	REQUIRE(segment_header_check(s.base, SEG_DATA_OFF, NULL, err, sizeof(err)) == 0,
	        "header: %s", err);
	REQUIRE(s.version == 2 && s.data_off == segment_data_off(8 * MiB, 4096) &&
	        s.data_off == 8192 && s.map == (uint8_t *)s.base + SEG_MAP_OFF &&
	        s.map_len == 8 * MiB / 4096 && segment_is_reserved(&s), "format 2 fields");
	put(&s, s.data_off, "key-1", 5, "hello segment", 7);
	uuid = s.uuid;
	segment_close(&s);
	REQUIRE(s.base == NULL && s.fd == -1, "closed");
	segment_close(&s);	/* twice is harmless */

	/* reopen: same uuid, data intact */
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == 0 && !s.created && s.uuid == uuid, "reopen: %d %s", rc, err);
	/* a second owner is refused while the first has it open */
	rc = segment_open(&s2, &o, false, err, sizeof(err));
	REQUIRE(rc == -EBUSY && strstr(err, "in use"), "second open: %d %s", rc, err);
	REQUIRE(ext_decode((uint8_t *)s.base + s.data_off, 4096, 0, &h, &k) == 0 &&
	        h.generation == 7 && ext_verify((uint8_t *)s.base + s.data_off, &h), "content");
	REQUIRE(s.map[s.data_off >> SEG_MAP_SHIFT] == segmap_tag(7), "commit byte kept");

	/* attach read-only (by name and by path) while the node has it open */
	rc = segment_attach(&ro, nm, false, err, sizeof(err));
	REQUIRE(rc == 0 && ro.uuid == uuid && ro.size == 8 * MiB && ro.align == 4096 &&
	        ro.dev == s.dev && ro.ino == s.ino && !ro.created && ro.version == 2 &&
	        ro.data_off == s.data_off && ro.map_len == s.map_len, "attach: %d %s", rc, err);
	REQUIRE(memcmp(ro.base, s.base, 8192) == 0, "same bytes");
	/* a write through the read-only mapping faults */
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);	/* not the sanitizer's handler */
		((volatile uint8_t *)ro.base)[SEG_DATA_OFF + 100] = 1;
		_exit(0);
	}
	REQUIRE(pid > 0 && waitpid(pid, &status, 0) == pid, "fork");
	REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "read-only mapping writable");
	segment_close(&ro);
	rc = segment_attach(&ro, p, true, err, sizeof(err));
	REQUIRE(rc == 0, "attach rw by path: %d %s", rc, err);
	((uint8_t *)ro.base)[7 * MiB] = 0x5a;	/* MAP_SHARED both ways */
	REQUIRE(((uint8_t *)s.base)[7 * MiB] == 0x5a, "shared write");
	((uint8_t *)ro.base)[7 * MiB] = 0;
	segment_close(&ro);
	segment_close(&s);

	/* size and alignment mismatches are errors that leave the file alone */
	o.size = 16 * MiB;
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == -EINVAL && strstr(err, "8.0 MiB") && strstr(err, "16.0 MiB") &&
	        strstr(err, "reset"), "size mismatch: %d %s", rc, err);
	o.size = 8 * MiB;
	o.align = 8192;
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == -EINVAL && strstr(err, "alignment"), "align mismatch: %d %s", rc, err);
	o.align = 4096;
	REQUIRE(stat(p, &st) == 0 && (uint64_t)st.st_size == 8 * MiB, "file unchanged");
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == 0 && s.uuid == uuid, "still reusable: %d %s", rc, err);
	segment_close(&s);

	/* reset with a valid, matching header keeps it */
	rc = segment_open(&s, &o, true, err, sizeof(err));
	REQUIRE(rc == 0 && s.uuid == uuid && !s.created, "reset on a good segment: %d", rc);
	segment_close(&s);

	/* reset re-creates a mismatching one: new size, new uuid, empty */
	o.size = 16 * MiB;
	rc = segment_open(&s, &o, true, err, sizeof(err));
	REQUIRE(rc == 0 && s.created && s.uuid != uuid && s.size == 16 * MiB, "reset: %d %s", rc, err);
	REQUIRE(ext_decode((uint8_t *)s.base + segment_data_off(8 * MiB, 4096), 4096, 0, &h,
			   &k) == -EINVAL && s.map[8192 >> SEG_MAP_SHIFT] == 0,
	        "old extent survived a reset");
	REQUIRE(stat(p, &st) == 0 && (uint64_t)st.st_size == 16 * MiB, "new size");
	uuid = s.uuid;
	segment_close(&s);

	/* a corrupt header: error, attach refuses, reset re-creates */
	{
		int fd = open(p, O_RDWR);
		uint8_t b = 0;

		/* byte 20 is the random uuid's: flip it (a fixed value was
		 * already there once in 256 runs, and nothing was corrupt) */
		REQUIRE(fd >= 0 && pread(fd, &b, 1, 20) == 1, "read byte 20");
		b ^= 0xff;
		REQUIRE(pwrite(fd, &b, 1, 20) == 1, "corrupt");
		close(fd);
	}
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == -EINVAL && strstr(err, "checksum"), "corrupt header: %d %s", rc, err);
	rc = segment_attach(&ro, nm, false, err, sizeof(err));
	REQUIRE(rc == -EINVAL && strstr(err, "checksum"), "attach corrupt: %d %s", rc, err);
	rc = segment_open(&s, &o, true, err, sizeof(err));
	REQUIRE(rc == 0 && s.created && s.uuid != uuid, "reset corrupt: %d %s", rc, err);

	/* unlink removes only our file */
	REQUIRE(segment_unlink(&s) == 0 && !exists(nm), "unlink");
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == 0, "open");
	REQUIRE(unlink(p) == 0, "unlink by hand");
	rc = segment_open(&s2, &o, false, err, sizeof(err));
	REQUIRE(rc == 0 && s2.created, "replacement");
	REQUIRE(segment_unlink(&s) == -ESTALE && exists(nm), "unlink of a replaced file");
	REQUIRE(segment_unlink(&s2) == 0 && !exists(nm), "unlink replacement");
	REQUIRE(segment_unlink(&s2) == -ENOENT, "unlink twice");
}

static void test_special_files(void)
{
	char nm[128], err[512], p[300];
	struct segment s;
	struct segment_opts o;
	int fd, rc;
	static uint8_t junk[2 * 4096];

	/* an empty file (a creation that died early) is initialised */
	name("empty", nm, sizeof(nm));
	segment_path(nm, p, sizeof(p));
	fd = open(p, O_CREAT | O_RDWR | O_EXCL, 0600);
	REQUIRE(fd >= 0, "create empty");
	rc = segment_attach(&s, nm, false, err, sizeof(err));
	REQUIRE(rc == -EINVAL && strstr(err, "not a kvpool segment"), "attach empty: %d %s", rc, err);
	o = opts(nm, 1 * MiB);
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == 0 && s.created, "open empty: %d %s", rc, err);
	REQUIRE(segment_unlink(&s) == 0, "unlink");
	close(fd);

	/* a file of garbage is refused, with or without attach */
	fd = open(p, O_CREAT | O_RDWR | O_EXCL, 0600);
	memset(junk, 0x41, sizeof(junk));
	REQUIRE(fd >= 0 && write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk), "junk");
	close(fd);
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == -EINVAL && strstr(err, "bad magic"), "open junk: %d %s", rc, err);
	rc = segment_attach(&s, p, false, err, sizeof(err));
	REQUIRE(rc == -EINVAL, "attach junk: %d %s", rc, err);
	unlink(p);

	/* missing file */
	rc = segment_attach(&s, nm, false, err, sizeof(err));
	REQUIRE(rc == -ENOENT && strstr(err, p), "attach missing: %d %s", rc, err);

	/* bad arguments leave nothing behind */
	o = opts(nm, 1 * MiB + 100);
	REQUIRE(segment_open(&s, &o, false, err, sizeof(err)) == -EINVAL, "size not 4K multiple");
	o = opts(nm, 4096);
	REQUIRE(segment_open(&s, &o, false, err, sizeof(err)) == -EINVAL, "size 4096");
	o = opts(nm, 1 * MiB);
	o.align = 100;
	REQUIRE(segment_open(&s, &o, false, err, sizeof(err)) == -EINVAL, "align 100");
	o = opts("", 1 * MiB);
	REQUIRE(segment_open(&s, &o, false, err, sizeof(err)) == -EINVAL, "empty name");
	REQUIRE(!exists(nm), "file left by bad arguments");

	/* an absolute path works the same */
	snprintf(p, sizeof(p), "/dev/shm/%sabs", prefix);
	o = opts(p, 1 * MiB);
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == 0 && strcmp(s.path, p) == 0, "absolute: %d %s", rc, err);
	REQUIRE(segment_unlink(&s) == 0, "unlink abs");
}

static void flip_all(uint8_t *h, size_t from, size_t to)
{
	struct segment_info out;
	char err[256];

	for (size_t i = from; i < to; i++) {
		for (int b = 0; b < 8; b++) {
			h[i] ^= (uint8_t)(1u << b);
			REQUIRE(segment_header_check(h, SEG_DATA_OFF, &out, err, sizeof(err)) < 0,
			        "flip bit %d of byte %zu accepted", b, i);
			h[i] ^= (uint8_t)(1u << b);
		}
	}
}

static void test_header_check(void)
{
	static uint8_t h[SEG_DATA_OFF];
	struct segment_info in = { .version = 1, .size = 1ull << 32, .uuid = 0xfeed,
				   .align = 65536, .created_ns = 123456789, .name = "seg-x" };
	struct segment_info out;
	char err[256];

	/* format 1: still read (its data starts at 4096, no map, no owner) */
	segment_header_write(h, &in);
	REQUIRE(segment_header_check(h, sizeof(h), &out, err, sizeof(err)) == 0, "%s", err);
	REQUIRE(out.version == 1 && out.size == in.size && out.uuid == in.uuid &&
	        out.align == in.align && out.created_ns == in.created_ns &&
	        strcmp(out.name, "seg-x") == 0 && out.data_off == 4096 && out.map_len == 0, "fields");
	flip_all(h, 0, SEG_HDR_BYTES);
	REQUIRE(segment_header_check(h, SEG_HDR_BYTES - 1, &out, err, sizeof(err)) == -EINVAL, "short");
	h[4] = 3;
	REQUIRE(segment_header_check(h, sizeof(h), &out, err, sizeof(err)) == -EPROTONOSUPPORT &&
	        strstr(err, "version 3"), "version: %s", err);
	h[4] = 1;

	/* format 2: the owner block has its own checksum, its fields are derived */
	in.version = 2;
	in.data_off = segment_data_off(in.size, in.align);
	in.map_off = SEG_MAP_OFF;
	in.map_len = in.size >> SEG_MAP_SHIFT;
	in.flags = SEG_F_EPHEMERAL;
	in.owner_pid = 4242;
	in.owner_start = 99;
	snprintf(in.owner, sizeof(in.owner), "python");
	segment_header_write(h, &in);
	REQUIRE(segment_header_check(h, sizeof(h), &out, err, sizeof(err)) == 0, "v2: %s", err);
	REQUIRE(out.version == 2 && out.data_off == (1ull << 20) + 65536 &&
	        out.map_len == 1ull << 20 && out.flags == SEG_F_EPHEMERAL && out.owner_pid == 4242 &&
	        out.owner_start == 99 && !strcmp(out.owner, "python"), "v2 fields");
	flip_all(h, 0, SEG_HDR2_BYTES);
	REQUIRE(segment_header_check(h, SEG_HDR2_BYTES - 1, &out, err, sizeof(err)) == -EINVAL,
	        "v2 short");
	in.data_off += 65536;	/* checksummed, but not where the data must be */
	segment_header_write(h, &in);
	REQUIRE(segment_header_check(h, sizeof(h), &out, err, sizeof(err)) == -EINVAL &&
	        strstr(err, "map fields"), "v2 data_off: %s", err);
	in.data_off -= 65536;

	/* checksummed but impossible fields */
	in.align = 100;
	segment_header_write(h, &in);
	REQUIRE(segment_header_check(h, sizeof(h), &out, err, sizeof(err)) == -EINVAL, "align 100");
	in.align = 4096;
	in.uuid = 0;
	segment_header_write(h, &in);
	REQUIRE(segment_header_check(h, sizeof(h), &out, err, sizeof(err)) == -EINVAL, "uuid 0");
	in.uuid = 1;
	in.size = 4096;
	segment_header_write(h, &in);
	REQUIRE(segment_header_check(h, sizeof(h), &out, err, sizeof(err)) == -EINVAL, "size 4096");
}

static void test_modes_and_options(void)
{
	char nm[128], err[512];
	struct segment s;
	struct segment_opts o;
	struct stat st;
	gid_t g = geteuid() == 0 ? 1 : getegid();	/* root may give it away */
	int rc;

	name("grp", nm, sizeof(nm));
	o = opts(nm, 2 * MiB);
	o.mode = 0660;
	o.gid = g;
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == 0, "open 0660: %d %s", rc, err);
	REQUIRE(fstat(s.fd, &st) == 0 && (st.st_mode & 0777) == 0660 && st.st_gid == g,
	        "mode %o gid %d", (unsigned)(st.st_mode & 0777), (int)st.st_gid);
	segment_close(&s);
	/* a reopen applies the configured mode again */
	o.mode = 0;
	o.gid = (gid_t)-1;
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == 0 && fstat(s.fd, &st) == 0 && (st.st_mode & 0777) == 0600, "back to 0600");
	REQUIRE(segment_unlink(&s) == 0, "unlink");

	/* populate + hugepages + NUMA node 0: best effort, must open and work */
	name("opt", nm, sizeof(nm));
	o = opts(nm, 4 * MiB);
	o.populate = true;
	o.hugepages = true;
	o.numa_node = 0;
	o.align = 2 * MiB;
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == 0 && s.align == 2 * MiB, "options: %d %s", rc, err);
	REQUIRE(s.data_off == 2 * MiB, "data at one alignment unit: %llu",
	        (unsigned long long)s.data_off);
	memset((uint8_t *)s.base + s.data_off, 0xab, 4 * MiB - s.data_off);
	REQUIRE(segment_unlink(&s) == 0, "unlink");
	if (numa_available() >= 0) {
		o.numa_node = numa_max_node() + 1;
		rc = segment_open(&s, &o, false, err, sizeof(err));
		REQUIRE(rc == -EINVAL && strstr(err, "numa_node") && !exists(nm),
		        "bad numa node: %d %s", rc, err);
	}
}

static void test_too_big(void)
{
	char nm[128], err[512];
	struct segment s;
	struct segment_opts o;
	struct statvfs vfs;
	uint64_t avail;
	int rc;

	REQUIRE(statvfs("/dev/shm", &vfs) == 0, "statvfs");
	avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	name("big", nm, sizeof(nm));
	o = opts(nm, (avail + (1ull << 30)) & ~4095ull);
	rc = segment_open(&s, &o, false, err, sizeof(err));
	printf("too big: %s\n", err);
	REQUIRE(rc == -ENOSPC, "rc %d", rc);
	REQUIRE(strstr(err, "cannot reserve") && strstr(err, "No space left on device") &&
	        strstr(err, "(/dev/shm has ") && strstr(err, "free)") && strstr(err, nm),
	        "message: %s", err);
	REQUIRE(!exists(nm), "file left behind");
}

/* scan_file over a segment with odd keys, a tombstone and a torn value. */
static void test_scan(void)
{
	char nm[128], err[512];
	struct segment s;
	struct segment_opts o;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int rc;

	name("scan", nm, sizeof(nm));
	o = opts(nm, 4 * MiB);
	rc = segment_open(&s, &o, false, err, sizeof(err));
	REQUIRE(rc == 0, "open: %s", err);
	uint64_t d = s.data_off - 4096;	/* extents at d + k * 4096, k >= 1 */
	put(&s, d + 4096, "plain/key_0_k", 13, "v1", 1);
	put(&s, d + 2 * 4096, "ctl\x01\x1b[31m", 9, "v2", 2);
	put(&s, d + 3 * 4096, "q\"b\\s", 5, "v3", 3);
	put(&s, d + 4 * 4096, "\xff\xfe", 2, "v4", 4);
	put(&s, d + 5 * 4096, "\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", 8, "v5", 5);
	put(&s, d + 6 * 4096, "gone", 4, "v6", 6);
	ext_tombstone((uint8_t *)s.base + d + 6 * 4096);	/* the byte not cleared yet */
	put(&s, d + 7 * 4096, "torn", 4, "v7 value", 7);
	((uint8_t *)s.base)[d + 7 * 4096 + 64 + 4] ^= 1;
	/* written but never committed: a put in progress, not listed */
	put(&s, d + 8 * 4096, "inflight", 8, "v8", 8);
	s.map[(d + 8 * 4096) >> SEG_MAP_SHIFT] = 0;
	segment_close(&s);

	f = open_memstream(&buf, &len);
	rc = scan_file(nm, false, true, f, err, sizeof(err));
	fclose(f);
	printf("%s", buf);
	REQUIRE(rc == -EBADMSG && strstr(err, "1 extents with a bad"), "rc %d %s", rc, err);
	REQUIRE(strstr(buf, "plain/key_0_k\n") && strstr(buf, "ctl\\x01\\x1b[31m\n") &&
	        strstr(buf, "q\"b\\\\s\n") && strstr(buf, "\\xff\\xfe\n") &&
	        strstr(buf, "  ok    plain/key_0_k") && strstr(buf, "  BAD   torn") &&
	        !strstr(buf, "gone") && !strstr(buf, "inflight") &&
	        strstr(buf, "2024-05-01T12:00:00.123Z") && strstr(buf, "# format 2, data from 8192") &&
	        !strchr(buf, '\x1b'), "text listing");
	REQUIRE(strstr(buf, "# 6 extents, 24576 bytes allocated, 18 value bytes, 1 bad checksums, "
		       "1 tombstones"), "summary");
	free(buf);
	buf = NULL;

	f = open_memstream(&buf, &len);
	rc = scan_file(nm, true, false, f, err, sizeof(err));
	fclose(f);
	printf("%s", buf);
	REQUIRE(rc == 0, "json rc %d %s", rc, err);
	REQUIRE(buf[0] == '[' && strstr(buf, "\"key\": \"ctl\\u0001\\u001b[31m\"") &&
	        strstr(buf, "\"key\": \"q\\\"b\\\\s\"") &&
	        strstr(buf, "\"key\": \"\\ufffd\\ufffd\", \"key_hex\": \"fffe\"") &&
	        strstr(buf, "\"key\": \"\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87\"}") &&
	        strstr(buf, "\"checksum\": null") && strstr(buf, "\"generation\": 7"),
	        "json listing");
	/* A real JSON parser agrees, when one is installed. */
	if (system("command -v python3 >/dev/null 2>&1") == 0) {
		char cmd[512];
		FILE *py;

		snprintf(cmd, sizeof(cmd), "python3 -c 'import json,sys; a=json.load(sys.stdin); "
			 "assert len(a)==6 and a[1][\"key\"]==\"ctl\\x01\\x1b[31m\" and "
			 "a[2][\"key\"]==\"q\\\"b\\\\s\" and bytes.fromhex(a[3][\"key_hex\"])==b\"\\xff\\xfe\" "
			 "and a[4][\"key\"]==\"\\u043a\\u043b\\u044e\\u0447\", a'");
		py = popen(cmd, "w");
		REQUIRE(py, "popen");
		fputs(buf, py);
		REQUIRE(pclose(py) == 0, "python rejects the JSON");
	}
	free(buf);

	rc = scan_file("/nonexistent/seg", false, true, stdout, err, sizeof(err));
	REQUIRE(rc == -ENOENT && strstr(err, "/nonexistent/seg"), "missing: %d %s", rc, err);
	REQUIRE(segment_attach(&s, nm, false, err, sizeof(err)) == 0 && segment_unlink(&s) == 0,
	        "unlink");
}

int main(void)
{
	struct stat st;

	if (stat("/dev/shm", &st) < 0 || !S_ISDIR(st.st_mode)) {
		printf("no /dev/shm\n");
		return 77;
	}
	log_init("t_segment", LOG_WARNING);
	snprintf(prefix, sizeof(prefix), "kvp-t_segment-%d-", (int)getpid());
	atexit(cleanup);
	test_header_check();
	test_lifecycle();
	test_special_files();
	test_modes_and_options();
	test_too_big();
	test_scan();
	REQUIRE(count_ours(false) == 0, "files left in /dev/shm");
	printf("t_segment: ok\n");
	return 0;
}

/* fuzz_spill: arbitrary bytes as the data area of a spill file, scanned by
 * spill_scan after a reopen (what a node does with whatever it finds on
 * disk at start). With bit 0 of the first byte set, headers that look like
 * extents get this file's uuid and a correct header checksum (bit 1: a
 * correct value checksum too), so the fuzzer reaches the deep paths.
 * Asserts what the node relies on: every reported extent is aligned, lies
 * inside the data area, does not overlap the previous one, has a key, and
 * the space the scan reserved equals what it reported.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "extent.h"
#include "log.h"
#include "spill.h"

#define FILE_SIZE (256u << 10)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[128];
static uint64_t uuid;
static uint8_t *img;

static void cleanup(void)
{
	if (path[0])
		unlink(path);
}

static struct spill *open_it(void)
{
	struct spill_opts o = {
		.path = path, .size = FILE_SIZE, .direct_io = false,
		.queue_depth = 1, .nbufs = 1, .name = "fuzz",
	};
	char err[256];
	int rc;
	struct spill *sp = spill_open(&o, &rc, err, sizeof(err));

	if (!sp) {
		fprintf(stderr, "fuzz_spill: %s\n", err);
		abort();
	}
	return sp;
}

/* Files of earlier runs that died without their atexit (killed). */
static void remove_stale(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		int pid;
		char p[300];

		if (sscanf(de->d_name, "kvp-fuzz_spill-%d", &pid) != 1 || pid == getpid() ||
		    kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(p, sizeof(p), "/dev/shm/%s", de->d_name);
		unlink(p);
	}
	closedir(d);
}

static void setup(void)
{
	log_init("fuzz_spill", LOG_ERR);
	remove_stale();
	snprintf(path, sizeof(path), "/dev/shm/kvp-fuzz_spill-%d", (int)getpid());
	unlink(path);
	atexit(cleanup);
	struct spill *sp = open_it();
	uuid = spill_uuid(sp);
	spill_close(sp);
	img = malloc(FILE_SIZE);
	if (!img)
		abort();
}

/* Makes plausible headers decodable: this file's uuid, right checksums. */
static void fixup(uint8_t *p, size_t n, bool value_sum)
{
	for (size_t off = 0; off + EXT_HDR_SIZE <= n; off += SPILL_ALIGN) {
		uint32_t magic, key_len;
		uint64_t value_len;

		memcpy(&magic, p + off, 4);
		if (magic != EXT_MAGIC && magic != EXT_TOMB)
			continue;
		memcpy(&key_len, p + off + 8, 4);
		memcpy(&value_len, p + off + 16, 8);
		key_len = key_len % 1024 + 1;
		if (EXT_HDR_SIZE + key_len > n - off)
			continue;
		value_len %= n - off - EXT_HDR_SIZE - key_len + 1;
		struct ext_hdr h = {
			.flags = 0,
			.key_len = key_len,
			.value_len = value_len,
			.seg_uuid = uuid,
		};
		memcpy(&h.value_checksum, p + off + 24, 8);
		memcpy(&h.generation, p + off + 32, 8);
		if (value_sum)
			h.value_checksum = ext_checksum(p + off + EXT_HDR_SIZE + key_len, value_len);
		uint8_t key[1024];
		memcpy(key, p + off + EXT_HDR_SIZE, key_len);
		ext_encode(p + off, &h, key);
		if (magic == EXT_TOMB)
			ext_tombstone(p + off);
	}
}

struct chk {
	uint64_t last_end;
	uint64_t bytes;
};

static int check_found(const struct ext_found *f, void *arg)
{
	struct chk *c = arg;

	if (f->off % SPILL_ALIGN || f->off < SPILL_DATA_OFF || f->off < c->last_end ||
	    f->alloc_len % SPILL_ALIGN || f->alloc_len > FILE_SIZE - f->off ||
	    ext_size(f->h.key_len, f->h.value_len) > f->alloc_len || f->h.key_len < 1 ||
	    f->h.key_len > 1024 || f->h.seg_uuid != uuid || !f->checksum_ok)
		abort();
	c->last_end = f->off + f->alloc_len;
	c->bytes += f->alloc_len;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!img)
		setup();
	size_t n = FILE_SIZE - SPILL_DATA_OFF;
	memset(img, 0, n);
	if (size > 1)
		memcpy(img, data + 1, size - 1 < n ? size - 1 : n);
	if (size && (data[0] & 1))
		fixup(img, size - 1 < n ? size - 1 : n, data[0] & 2);

	int fd = open(path, O_WRONLY);
	if (fd < 0 || pwrite(fd, img, n, SPILL_DATA_OFF) != (ssize_t)n)
		abort();
	close(fd);

	struct spill *sp = open_it();
	if (spill_uuid(sp) != uuid)
		abort();	/* the data area never touches the header */
	struct chk c = { 0 };
	struct ext_scan_stats st;
	if (spill_scan(sp, check_found, &c, &st) != 0)
		abort();
	struct spill_stats ss;
	spill_stats(sp, &ss);
	if (ss.used != c.bytes || st.live_bytes != c.bytes)
		abort();
	spill_close(sp);
	return 0;
}

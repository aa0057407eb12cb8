/* b_startup: helper of tests/bench/startup_bench.sh.
 *
 *   b_startup fill NAME SIZE COUNT [VALUE_BYTES [ALIGN]]
 *       creates segment NAME (a /dev/shm name or a path) of SIZE bytes and
 *       writes COUNT extents into it as local clients do (value, header,
 *       commit byte), keys b/<uuid>/<i>, then closes it for a node to
 *       reuse. Prints "filled COUNT extents, BYTES bytes in MS ms".
 *   b_startup scan NAME [--pages]
 *       times the scan a restarting node does (the commit map), and with
 *       --pages the page-by-page scan of format 1 over the same file (every
 *       4 KiB probed, every value verified: what a restart cost before).
 *       Prints "map-scan N extents MS ms MAPBYTES" / "page-scan N MS ms".
 * Exit 0, 1 on an error, 2 on bad usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "extent.h"
#include "log.h"
#include "segmap.h"
#include "segment.h"

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);

	switch (*end) {
	case 'k': case 'K': v *= 1024; break;
	case 'm': case 'M': v *= 1048576; break;
	case 'g': case 'G': v *= 1073741824.0; break;
	case 't': case 'T': v *= 1099511627776.0; break;
	default: break;
	}
	return (uint64_t)v;
}

static int fill(const char *name, uint64_t size, uint64_t count, uint64_t vlen, uint32_t align)
{
	struct segment_opts o = { .name = name, .size = size, .align = align, .gid = (gid_t)-1,
				  .numa_node = -1, .reserve = SEG_RESERVE_NONE };
	struct segment s;
	char err[512], key[64];
	uint8_t *val = malloc(vlen ? vlen : 1);
	uint64_t off, bytes = 0;
	double t0 = now_ms();

	if (!val || segment_open(&s, &o, true, err, sizeof(err)) < 0) {
		fprintf(stderr, "b_startup: %s\n", val ? err : "out of memory");
		return 1;
	}
	for (uint64_t i = 0; i < vlen; i++)
		val[i] = (uint8_t)(i * 7 + 3);
	off = s.data_off;
	for (uint64_t i = 0; i < count; i++) {
		int kl = snprintf(key, sizeof(key), "b/%016" PRIx64 "/%08" PRIu64, s.uuid, i);
		uint64_t alen = (ext_size((uint32_t)kl, vlen) + align - 1) & ~(uint64_t)(align - 1);
		struct ext_hdr h = { .key_len = (uint32_t)kl, .value_len = vlen,
				     .value_checksum = ext_checksum(val, vlen), .generation = i + 1,
				     .seg_uuid = s.uuid, .put_time_ns = 1 };
		uint8_t *p = (uint8_t *)s.base + off;

		if (off + alen > s.size) {
			fprintf(stderr, "b_startup: %" PRIu64 " extents do not fit in %s\n", count,
				name);
			segment_close(&s);
			return 1;
		}
		memcpy(p + EXT_HDR_SIZE + kl, val, vlen);
		ext_encode(p, &h, key);
		segmap_commit(&s, off, h.generation);
		off += alen;
		bytes += alen;
	}
	printf("filled %" PRIu64 " extents, %" PRIu64 " bytes in %.0f ms\n", count, bytes,
	       now_ms() - t0);
	segment_close(&s);
	free(val);
	return 0;
}

static int count_cb(const struct ext_found *f, void *arg)
{
	(void)f;
	(*(uint64_t *)arg)++;
	return 0;
}

static int scan(const char *name, bool pages)
{
	struct segment s;
	struct ext_scan_stats st;
	char err[512];
	uint64_t n = 0;
	double t0;

	if (segment_attach(&s, name, false, err, sizeof(err)) < 0) {
		fprintf(stderr, "b_startup: %s\n", err);
		return 1;
	}
	t0 = now_ms();
	if (segmap_scan(&s, 0, s.size, count_cb, &n, &st) < 0) {
		fprintf(stderr, "b_startup: scan failed\n");
		return 1;
	}
	printf("map-scan %" PRIu64 " extents %.1f ms %" PRIu64 " map bytes\n", n, now_ms() - t0,
	       st.map_bytes);
	if (pages) {
		n = 0;
		t0 = now_ms();
		ext_scan_ex(s.base, s.data_off, s.size, s.align, s.uuid, s.size, false, true,
			    count_cb, &n, NULL);
		printf("page-scan %" PRIu64 " extents %.1f ms\n", n, now_ms() - t0);
	}
	segment_close(&s);
	return 0;
}

int main(int argc, char **argv)
{
	log_init("b_startup", LOG_ERR);
	if (argc >= 5 && !strcmp(argv[1], "fill"))
		return fill(argv[2], parse_size(argv[3]), strtoull(argv[4], NULL, 0),
			    argc > 5 ? parse_size(argv[5]) : 1000,
			    argc > 6 ? (uint32_t)parse_size(argv[6]) : 4096);
	if (argc >= 3 && !strcmp(argv[1], "scan"))
		return scan(argv[2], argc > 3 && !strcmp(argv[3], "--pages"));
	fprintf(stderr, "usage: b_startup fill NAME SIZE COUNT [VALUE_BYTES [ALIGN]] | "
		"scan NAME [--pages]\n");
	return 2;
}

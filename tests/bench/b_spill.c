/* b_spill: throughput of the spill tier's two hot paths on one directory.
 *   demote: 1 MiB-value extents copied from shared memory (a memfd, like a
 *           /dev/shm segment) to the spill file, queue_depth in flight;
 *   read:   the demoted extents read back in SPILL_CHUNK pieces into the
 *           registered pool buffers, as the node streams a disk-tier get.
 * Prints "demote_bytes_per_s N" and "read_bytes_per_s N" (value bytes, the
 * payload an engine asked for) plus the mode; tests/bench/spill_bench.sh
 * runs fio with the same engine, block size and depth on the same
 * filesystem and prints the ratios. Never fails on a number.
 * Usage: b_spill DIR [TOTAL_MIB [QUEUE_DEPTH [DIRECT(0/1)]]]
 */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "extent.h"
#include "log.h"
#include "spill.h"

#define MiB ((uint64_t)1024 * 1024)
#define VALUE MiB
#define SRC_OBJS 64		/* distinct source extents in the fake segment */

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct ctx {
	struct spill *sp;
	unsigned outstanding;
	uint64_t done, errors;
	uint64_t *offs;
	uint64_t ndem;
};

static void demote_cb(void *arg, int status, uint64_t off, uint64_t len)
{
	struct ctx *c = arg;

	c->outstanding--;
	if (status) {
		c->errors++;
		return;
	}
	c->offs[c->ndem++] = off;
	c->done++;
}

struct rd {
	struct ctx *c;
	void *buf;
};

static void read_cb(void *arg, int status, uint64_t off, uint64_t len)
{
	struct rd *r = arg;

	r->c->outstanding--;
	if (status)
		r->c->errors++;
	spill_buf_put(r->c->sp, r->buf);
	free(r);
}

/* Waits for completions as the node's loop does: the eventfd, then reap. */
static void wait_some(struct spill *sp)
{
	struct pollfd pfd = { .fd = spill_event_fd(sp), .events = POLLIN };

	poll(&pfd, 1, 1000);
	spill_complete(sp);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: b_spill DIR [TOTAL_MIB [QUEUE_DEPTH [DIRECT]]]\n");
		return 2;
	}
	const char *dir = argv[1];
	uint64_t total = (argc > 2 ? strtoull(argv[2], NULL, 0) : 1024) * MiB;
	unsigned qd = argc > 3 ? (unsigned)atoi(argv[3]) : 32;
	bool direct = argc > 4 ? atoi(argv[4]) != 0 : true;
	char path[512];
	char err[256] = "";
	int rc = 0;

	log_init("b_spill", LOG_WARNING);
	snprintf(path, sizeof(path), "%s/kvp-b_spill-%d", dir, (int)getpid());

	uint64_t ext_len = ext_size(16, VALUE);
	uint64_t slot = (ext_len + 4095) & ~4095ull;
	uint64_t nobj = total / VALUE;
	struct spill_opts o = {
		.path = path,
		.size = SPILL_DATA_OFF + nobj * slot + 16 * MiB,
		.direct_io = direct,
		.queue_depth = qd,
		.nbufs = 16,
		.name = "b_spill",
	};
	struct spill *sp = spill_open(&o, &rc, err, sizeof(err));
	if (!sp) {
		fprintf(stderr, "b_spill: %s\n", err);
		return 1;
	}

	/* the source: shared memory, like the node's /dev/shm segment */
	int mfd = memfd_create("b_spill-seg", MFD_CLOEXEC);
	size_t seglen = SRC_OBJS * slot;
	if (mfd < 0 || ftruncate(mfd, (off_t)seglen) < 0) {
		perror("memfd");
		return 1;
	}
	uint8_t *seg = mmap(NULL, seglen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, mfd, 0);
	if (seg == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	for (unsigned i = 0; i < SRC_OBJS; i++) {
		char key[17];
		uint8_t *e = seg + (size_t)i * slot;
		struct ext_hdr h = { .key_len = 16, .value_len = VALUE, .generation = i + 1,
				     .seg_uuid = 42 };
		snprintf(key, sizeof(key), "bench-obj-%06u", i);
		for (uint64_t k = 0; k < VALUE; k += 8) {
			uint64_t v = (k + 1) * 0x9e3779b97f4a7c15ull ^ i;
			memcpy(e + EXT_HDR_SIZE + 16 + k, &v, 8);
		}
		h.value_checksum = ext_checksum(e + EXT_HDR_SIZE + 16, VALUE);
		ext_encode(e, &h, key);
	}

	struct ctx c = { .sp = sp };
	c.offs = calloc(nobj, sizeof(uint64_t));
	if (!c.offs)
		return 1;

	/* demote */
	double t0 = now();
	for (uint64_t i = 0; i < nobj;) {
		while (c.outstanding < qd && i < nobj) {
			unsigned k = (unsigned)(i % SRC_OBJS);
			rc = spill_demote(sp, seg + (size_t)k * slot, seglen - (size_t)k * slot, k + 1,
					  demote_cb, &c);
			if (rc) {
				fprintf(stderr, "b_spill: demote: %s\n", strerror(-rc));
				return 1;
			}
			c.outstanding++;
			i++;
		}
		wait_some(sp);
	}
	spill_wait_idle(sp);
	double t_dem = now() - t0;
	if (c.errors || c.done != nobj) {
		fprintf(stderr, "b_spill: %" PRIu64 " demotion errors\n", c.errors);
		return 1;
	}

	/* read back in chunks through the pool */
	t0 = now();
	uint64_t chunks = 0;
	for (uint64_t i = 0; i < nobj; i++) {
		for (uint64_t p = 0; p < ext_len; p += SPILL_CHUNK) {
			uint64_t l = ext_len - p < SPILL_CHUNK ? ext_len - p : SPILL_CHUNK;
			void *b;
			while (!(b = spill_buf_get(sp)))
				wait_some(sp);	/* all buffers out */
			struct rd *r = malloc(sizeof(*r));
			r->c = &c;
			r->buf = b;
			rc = spill_read(sp, c.offs[i] + p, l, b, read_cb, r);
			if (rc) {
				fprintf(stderr, "b_spill: read: %s\n", strerror(-rc));
				return 1;
			}
			c.outstanding++;
			chunks++;
		}
	}
	spill_wait_idle(sp);
	double t_rd = now() - t0;
	if (c.errors) {
		fprintf(stderr, "b_spill: %" PRIu64 " read errors\n", c.errors);
		return 1;
	}

	printf("mode %s\n", spill_is_direct(sp) ? "direct" : "buffered");
	printf("objects %" PRIu64 " value_bytes %" PRIu64 " queue_depth %u\n", nobj,
	       nobj * VALUE, qd);
	printf("demote_bytes_per_s %.0f\n", (double)(nobj * VALUE) / t_dem);
	printf("read_bytes_per_s %.0f\n", (double)(nobj * VALUE) / t_rd);
	spill_close(sp);
	unlink(path);
	munmap(seg, seglen);
	close(mfd);
	free(c.offs);
	return 0;
}

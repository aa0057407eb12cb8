/* node_shm: see node_shm.h. The reservation thread, the warmer of the
 * committed extents' pages and the orphan sweep.
 */
#include "node_shm.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "orphan.h"
#include "segment.h"

/* One fallocate call: long enough to be efficient, short enough that a
 * stop waits at most ~a quarter second on a small VM. */
#define RESERVE_CHUNK (1ull << 30)
#define ORPHAN_SWEEP_MS 30000
/* The warmer's pass: the map of a 12 GiB segment (3 MiB) read in about a
 * millisecond when nothing is new. */
#define WARM_MS 200


struct node_shm {
	struct segment *seg;
	pthread_t th;
	bool running;			/* loop thread */
	atomic_bool stop;
	uint64_t last_sweep_ms;
	char dir[256];			/* the segment's directory, when not /dev/shm */
	struct node_shm_stats st;	/* reserve_* written by the thread before it ends */
	_Atomic uint64_t reserved;	/* the thread's progress, for /metrics */
	pthread_t warm_th;
	bool warm_running;		/* loop thread */
	uint64_t *warm;			/* warm thread: bit per map byte, its page is mapped */
	_Atomic uint64_t warmed;	/* pages mapped by the warmer, for /metrics */
};

struct node_shm *node_shm_create(struct segment *seg)
{
	struct node_shm *s = calloc(1, sizeof(*s));
	char *slash;

	if (!s)
		return NULL;
	s->seg = seg;
	atomic_init(&s->stop, false);
	atomic_init(&s->reserved, seg->reserved);
	snprintf(s->dir, sizeof(s->dir), "%s", seg->path);
	slash = strrchr(s->dir, '/');
	if (slash && slash != s->dir)
		*slash = '\0';
	if (!strcmp(s->dir, "/dev/shm") || !slash || slash == s->dir)
		s->dir[0] = '\0';
	return s;
}

static void *reserve_thread(void *arg)
{
	struct node_shm *s = arg;
	uint64_t t0 = clock_now_ms();
	char err[512];
	int rc = 0;

	while (!atomic_load(&s->stop)) {
		rc = segment_reserve_step(s->seg, RESERVE_CHUNK, err, sizeof(err));
		atomic_store(&s->reserved, s->seg->reserved);
		if (rc != 0)
			break;
	}
	s->st.reserve_ms = clock_now_ms() - t0;
	if (rc == 1)
		log_info("%s: all %llu MiB reserved in the background in %llu ms", s->seg->path,
			 (unsigned long long)(s->seg->size >> 20),
			 (unsigned long long)s->st.reserve_ms);
	else if (rc < 0)
		log_warn("%s; the rest (%llu MiB) stays unreserved: puts there fail "
			 "once /dev/shm is full", err,
			 (unsigned long long)((s->seg->size - s->seg->reserved) >> 20));
	return NULL;
}

void node_shm_reserve_start(struct node_shm *s)
{
	if (s->running || s->seg->reserved >= s->seg->size)
		return;
	if (pthread_create(&s->th, NULL, reserve_thread, s) != 0) {
		log_warn("%s: no thread for the background reservation; it stays sparse",
			 s->seg->path);
		return;
	}
	s->running = true;
}

/* Reads one byte of the header page of each extent whose map byte was
 * set since the last pass (and forgets those cleared, which a later commit
 * may need read again). A load it must be: on this VM a page's first
 * access through a mapping costs 5-10 us whether or not madvise
 * (MADV_POPULATE_READ) filled the page tables before (measured: populate
 * 48 ms, then the scan 1168 ms for 200,000 headers; 28 ms the scan after). */
static void warm_pass(struct node_shm *s)
{
	const struct segment *seg = s->seg;
	const uint8_t *map = seg->map;
	uint64_t n = seg->map_len, pos = seg->data_off >> SEG_MAP_SHIFT;
	uint64_t added = 0, t0 = clock_now_ms();

	while (pos < n && !atomic_load(&s->stop)) {
		/* A page of the map at a time, only those the file holds (a
		 * hole read through the mapping would be allocated). SEEK_HOLE
		 * is not used: in a reserved file it walks every page after. */
		uint64_t end = (pos | 4095) + 1;
		off_t d = lseek(seg->fd, (off_t)(SEG_MAP_OFF + pos), SEEK_DATA);

		if (d < 0 && errno == ENXIO)
			break;
		if (d >= 0 && (uint64_t)d - SEG_MAP_OFF > pos) {
			pos = (uint64_t)d - SEG_MAP_OFF;
			continue;
		}
		if (end > n)
			end = n;
		for (uint64_t i = pos; i < end; i++) {
			uint64_t bit = 1ull << (i & 63), *w = &s->warm[i >> 6];

			if (!__atomic_load_n(map + i, __ATOMIC_RELAXED)) {
				*w &= ~bit;
				continue;
			}
			if (*w & bit)
				continue;
			*w |= bit;
			/* atomic: the node's own TCP writes may be filling it */
			(void)__atomic_load_n((volatile const uint8_t *)seg->base +
					      (i << SEG_MAP_SHIFT), __ATOMIC_RELAXED);
			added++;
		}
		pos = end;
	}
	if (added) {
		atomic_fetch_add(&s->warmed, added);
		log_debug("%s: read %llu new extents' header pages in %llu ms", seg->path,
			  (unsigned long long)added, (unsigned long long)(clock_now_ms() - t0));
	}
}

static void *warm_thread(void *arg)
{
	struct node_shm *s = arg;

	while (!atomic_load(&s->stop)) {
		warm_pass(s);
		for (int t = 0; t < WARM_MS / 50 && !atomic_load(&s->stop); t++) {
			struct timespec ts = { 0, 50 * 1000000L };

			nanosleep(&ts, NULL);
		}
	}
	return NULL;
}

void node_shm_warm_start(struct node_shm *s)
{
	const struct segment *seg = s->seg;

	if (s->warm_running || !seg->map || seg->map_len <= (seg->data_off >> SEG_MAP_SHIFT))
		return;
	s->warm = calloc((seg->map_len + 63) / 64, sizeof(*s->warm));
	if (!s->warm || pthread_create(&s->warm_th, NULL, warm_thread, s) != 0) {
		log_warn("%s: no thread to map committed extents in the background; a "
			 "re-mount reads their headers through fresh page tables", seg->path);
		free(s->warm);
		s->warm = NULL;
		return;
	}
	s->warm_running = true;
}

static void reap_dir(struct node_shm *s, const char *dir)
{
	uint64_t bytes = 0;
	int n = orphan_reap_all(dir, &bytes);

	if (n > 0) {
		s->st.orphans_removed += (uint64_t)n;
		s->st.orphan_bytes_removed += bytes;
	} else if (n < 0 && dir) {
		log_debug("orphan sweep of %s: %s", dir, strerror(-n));
	}
}

void node_shm_reap(struct node_shm *s, uint64_t now_ms, int force)
{
	if (!force && now_ms - s->last_sweep_ms < ORPHAN_SWEEP_MS)
		return;
	s->last_sweep_ms = now_ms;
	reap_dir(s, NULL);
	if (s->dir[0])
		reap_dir(s, s->dir);
}

void node_shm_destroy(struct node_shm *s)
{
	if (!s)
		return;
	atomic_store(&s->stop, true);
	if (s->running)
		pthread_join(s->th, NULL);
	if (s->warm_running)
		pthread_join(s->warm_th, NULL);
	free(s->warm);
	free(s);
}

const struct node_shm_stats *node_shm_stats(const struct node_shm *s)
{
	struct node_shm *m = (struct node_shm *)s;

	m->st.reserved_bytes = atomic_load(&m->reserved);
	m->st.warmed_pages = atomic_load(&m->warmed);
	return &s->st;
}

/* node_shm: see node_shm.h. The reservation thread and the orphan sweep.
 */
#include "node_shm.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "orphan.h"
#include "segment.h"

/* One fallocate call: long enough to be efficient, short enough that a
 * stop waits at most ~a quarter second on a small VM. */
#define RESERVE_CHUNK (1ull << 30)
#define ORPHAN_SWEEP_MS 30000

struct node_shm {
	struct segment *seg;
	pthread_t th;
	bool running;			/* loop thread */
	atomic_bool stop;
	uint64_t last_sweep_ms;
	char dir[256];			/* the segment's directory, when not /dev/shm */
	struct node_shm_stats st;	/* reserve_* written by the thread before it ends */
	_Atomic uint64_t reserved;	/* the thread's progress, for /metrics */
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
	free(s);
}

const struct node_shm_stats *node_shm_stats(const struct node_shm *s)
{
	struct node_shm *m = (struct node_shm *)s;

	m->st.reserved_bytes = atomic_load(&m->reserved);
	return &s->st;
}

/* node_scan: the node's extents as REPORT items (see node_scan.h). The
 * segment scan runs on a helper thread started by the master link once
 * HELLO is answered; the spill tier is appended from its index on the loop
 * thread.
 */
#include "node_scan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "ev.h"
#include "log.h"
#include "segmap.h"
#include "segment.h"

void node_scan_free(struct node_scan *s)
{
	wb_free(&s->items);
	free(s->chunk_end);
	free(s->chunk_n);
	memset(s, 0, sizeof(*s));
}

static int scan_close_chunk(struct node_scan_add *a)
{
	struct node_scan *s = a->s;

	if (!a->cur_n)
		return 0;
	if (s->nchunks == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		size_t *e = realloc(s->chunk_end, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		s->chunk_end = e;
		uint32_t *c = realloc(s->chunk_n, cap * sizeof(*c));
		if (!c)
			return -ENOMEM;
		s->chunk_n = c;
		s->cap = cap;
	}
	s->chunk_end[s->nchunks] = s->items.len;
	s->chunk_n[s->nchunks] = a->cur_n;
	s->nchunks++;
	a->cur_start = s->items.len;
	a->cur_n = 0;
	return 0;
}

void node_scan_add_begin(struct node_scan_add *a, struct node_scan *s, uint8_t tier,
			 uint64_t max_frame)
{
	memset(a, 0, sizeof(*a));
	a->s = s;
	a->tier = tier;
	a->max_bytes = NODE_REPORT_BYTES;
	/* The master refuses bodies over cluster.max_frame (a shared key). */
	if (max_frame && max_frame - 8 < a->max_bytes)
		a->max_bytes = (size_t)(max_frame - 8);	/* segment id + count */
	a->cur_start = s->items.len;
}

int node_scan_add_cb(const struct ext_found *f, void *arg)
{
	struct node_scan_add *a = arg;
	struct node_scan *s = a->s;

	if (f->verified && !f->checksum_ok) {
		s->bad_checksum++;
		return 0;
	}
	if (!wire_key_ok(f->key, f->h.key_len))
		return 0;
	size_t item = 2 + f->h.key_len + 1 + 6 * 8;
	if (a->cur_n == NODE_REPORT_CHUNK || s->items.len - a->cur_start + item > a->max_bytes) {
		a->err = scan_close_chunk(a);
		if (a->err)
			return 1;
	}
	/* The key is copied now: local clients may reuse the space later. */
	wb_str(&s->items, f->key, f->h.key_len);
	wb_u8(&s->items, a->tier);	/* 0 segment, 1 spill file */
	wb_u64(&s->items, f->off);
	wb_u64(&s->items, f->alloc_len);
	wb_u64(&s->items, f->h.value_len);
	wb_u64(&s->items, f->h.value_checksum);
	wb_u64(&s->items, f->h.generation);
	wb_u64(&s->items, f->h.put_time_ns);
	if (s->items.oom) {
		a->err = -ENOMEM;
		return 1;
	}
	a->cur_n++;
	a->added++;
	a->added_bytes += f->alloc_len;
	/* count/used describe the segment (the node's memory accounting) */
	if (a->tier == 0) {
		s->count++;
		s->used += f->alloc_len;
	}
	return 0;
}

int node_scan_add_end(struct node_scan_add *a)
{
	if (!a->err)
		a->err = scan_close_chunk(a);
	return a->err;
}

int node_scan_segment(struct node_scan *s, const struct segment *seg, uint64_t max_frame)
{
	struct node_scan_add a;
	struct ext_scan_stats st;

	node_scan_free(s);
	node_scan_add_begin(&a, s, 0, max_frame);
	uint64_t t0 = clock_now_ms();
	/* Format 2: the commit map says where complete extents are; values
	 * are verified by every read (and where the map alone cannot vouch),
	 * not here. Bytes that vouch for nothing are cleared on the way.
	 * Format 1: every page probed, every value verified. */
	segmap_scan(seg, SEGMAP_CLEAN, seg->size, node_scan_add_cb, &a, &st);
	int rc = node_scan_add_end(&a);
	if (rc) {
		node_scan_free(s);
		return rc;
	}
	if (seg->map)
		log_info("scanned %s: %llu extents, %llu bytes in %llu ms (%llu KiB of commit map "
			 "read, %llu values verified, %llu stale bytes cleared, %llu conflicts)",
			 seg->path, (unsigned long long)s->count, (unsigned long long)s->used,
			 (unsigned long long)(clock_now_ms() - t0),
			 (unsigned long long)(st.map_bytes >> 10), (unsigned long long)st.verified,
			 (unsigned long long)st.stale_marks, (unsigned long long)st.conflicts);
	else
		log_info("scanned %s (format 1, page by page): %llu extents, %llu bytes in %llu ms",
			 seg->path, (unsigned long long)s->count, (unsigned long long)s->used,
			 (unsigned long long)(clock_now_ms() - t0));
	return 0;
}

/* ---- on a helper thread ---- */

static void *scan_thread(void *arg)
{
	struct node_scanner *sc = arg;
	/* For tests of the master link across a long scan (a format 1
	 * segment of hundreds of GiB takes minutes): the scan waits first. */
	const char *delay = getenv("KVP_TEST_SCAN_DELAY_MS");

	if (delay && atoi(delay) > 0) {
		struct timespec ts = { atoi(delay) / 1000, (long)(atoi(delay) % 1000) * 1000000L };

		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	sc->rc = node_scan_segment(&sc->out, sc->seg, sc->max_frame);
	atomic_store(&sc->done, true);
	ev_wake(sc->loop);
	return NULL;
}

int node_scan_start(struct node_scanner *sc)
{
	atomic_store(&sc->done, false);
	if (pthread_create(&sc->th, NULL, scan_thread, sc) != 0)
		return -EAGAIN;
	sc->running = true;
	return 0;
}

bool node_scan_finished(struct node_scanner *sc)
{
	if (!sc->running || !atomic_load(&sc->done))
		return false;
	pthread_join(sc->th, NULL);
	sc->running = false;
	return true;
}

void node_scan_join(struct node_scanner *sc)
{
	if (!sc->running)
		return;
	pthread_join(sc->th, NULL);
	sc->running = false;
	node_scan_free(&sc->out);
}

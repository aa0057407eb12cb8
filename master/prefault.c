/* prefault: fresh memory faulted in by a helper thread ahead of its user;
 * see prefault.h. The helper writes only memory not yet taken, one huge
 * page at a time under `busy`, so the two threads never touch the same
 * bytes: a take that reaches the page being faulted waits for it (a few
 * ms at most). MADV_POPULATE_WRITE would need no such care, but it holds
 * the mmap lock while it clears a page, and every mmap or brk of the loop
 * thread's malloc waited behind it (load wall time 20% over its CPU). */
#include "prefault.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <sanitizer/asan_interface.h>

#define HUGE (2ul << 20)	/* one transparent huge page: the helper's step */
#define PAGE 4096ul		/* where huge pages are refused, each page is touched */
#define IDLE SIZE_MAX

struct prefault {
	char *base;
	size_t size;		/* mapped (the untaken tail goes at stop) */
	size_t ahead;
	pthread_t th;
	bool running;
	pthread_mutex_t mu;
	pthread_cond_t more;	/* the helper waits here for more to be taken */
	pthread_cond_t done;	/* a take waits here for the page in hand */
	size_t taken;		/* protected by mu */
	size_t busy;		/* protected by mu: the huge page being faulted, or IDLE */
	bool stop;		/* protected by mu */
};

static void *helper(void *arg)
{
	struct prefault *p = arg;
	size_t at = 0;

	pthread_mutex_lock(&p->mu);
	while (!p->stop) {
		if (at < p->taken)
			at = p->taken;	/* the user got there first */
		if (at >= p->size)
			break;
		if (at >= p->taken + p->ahead) {
			pthread_cond_wait(&p->more, &p->mu);
			continue;
		}
		p->busy = at;
		pthread_mutex_unlock(&p->mu);
		for (size_t o = 0; o < HUGE; o += PAGE)
			*(volatile char *)(p->base + at + o) = 0;
		pthread_mutex_lock(&p->mu);
		p->busy = IDLE;
		pthread_cond_broadcast(&p->done);
		at += HUGE;
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

struct prefault *prefault_start(size_t size, size_t ahead)
{
	struct prefault *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->size = (size + HUGE - 1) & ~(HUGE - 1);
	p->ahead = ahead;
	/* one huge page more, to start the region on a huge page's boundary */
	char *m = mmap(NULL, p->size + HUGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		goto out_free;
	p->base = (char *)(((uintptr_t)m + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
	if (p->base > m)
		munmap(m, (size_t)(p->base - m));
	munmap(p->base + p->size, HUGE - (size_t)(p->base - m));
	madvise(p->base, p->size, MADV_HUGEPAGE);	/* a hint: ignore a refusal */
	p->busy = IDLE;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->more, NULL);
	pthread_cond_init(&p->done, NULL);
	if (pthread_create(&p->th, NULL, helper, p) != 0)
		goto out_unmap;
	p->running = true;
	return p;

out_unmap:
	pthread_cond_destroy(&p->done);
	pthread_cond_destroy(&p->more);
	pthread_mutex_destroy(&p->mu);
	munmap(p->base, p->size);
out_free:
	free(p);
	return NULL;
}

void *prefault_take(struct prefault *p, size_t n)
{
	void *r = NULL;

	if (!p->running || n % HUGE || n > p->size - p->taken)
		return NULL;
	pthread_mutex_lock(&p->mu);
	while (p->busy != IDLE && p->busy < p->taken + n)
		pthread_cond_wait(&p->done, &p->mu);
	r = p->base + p->taken;
	p->taken += n;
	pthread_cond_signal(&p->more);
	pthread_mutex_unlock(&p->mu);
	return r;
}

void prefault_stop(struct prefault *p)
{
	if (!p->running)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_signal(&p->more);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->th, NULL);
	p->running = false;
	pthread_cond_destroy(&p->done);
	pthread_cond_destroy(&p->more);
	pthread_mutex_destroy(&p->mu);
	if (p->taken < p->size)
		munmap(p->base + p->taken, p->size - p->taken);
	p->size = p->taken;
}

bool prefault_owns(const struct prefault *p, const void *ptr)
{
	return (const char *)ptr >= p->base && (const char *)ptr < p->base + p->taken;
}

void prefault_free(struct prefault *p)
{
	if (!p)
		return;
	prefault_stop(p);
	/* what its user poisoned (the slab's free blocks) would outlive the
	 * mapping in ASan's shadow and fault the next mapping at that address */
	ASAN_UNPOISON_MEMORY_REGION(p->base, p->size);
	if (p->size)
		munmap(p->base, p->size);
	free(p);
}

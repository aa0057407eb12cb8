/* pymem: page-backed blocks with a bounded cache of freed ones (see
 * pymem.h). Blocks below MMAP_MIN come from malloc; the others from mmap,
 * rounded up to whole pages. A freed large block is cached (up to
 * CACHE_BYTES and CACHE_N blocks, the oldest dropped first); an allocation
 * takes the smallest cached block that fits and wastes at most a quarter of
 * it. Guarded by cache_lock.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "pymem.h"

#define MMAP_MIN (256u << 10)
#define PAGE 4096u
#define CACHE_N 128
#define CACHE_BYTES (512ull << 20)

struct blk {
	void *p;
	size_t cap;
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct blk cache[CACHE_N];	/* protected by cache_lock, oldest first */
static size_t ncache;			/* protected by cache_lock */
static size_t cache_bytes;		/* protected by cache_lock */

static void cache_del_locked(size_t i)
{
	cache_bytes -= cache[i].cap;
	memmove(&cache[i], &cache[i + 1], (ncache - i - 1) * sizeof(cache[0]));
	ncache--;
}

void *pymem_alloc(size_t n, size_t *cap)
{
	size_t want, best = SIZE_MAX;
	void *p;

	if (n < MMAP_MIN) {
		*cap = n;
		return malloc(n ? n : 1);
	}
	want = (n + PAGE - 1) & ~(size_t)(PAGE - 1);
	pthread_mutex_lock(&cache_lock);
	for (size_t i = 0; i < ncache; i++)
		if (cache[i].cap >= want && cache[i].cap - want <= cache[i].cap / 4 &&
		    (best == SIZE_MAX || cache[i].cap < cache[best].cap))
			best = i;
	if (best != SIZE_MAX) {
		p = cache[best].p;
		*cap = cache[best].cap;
		cache_del_locked(best);
		pthread_mutex_unlock(&cache_lock);
		return p;
	}
	pthread_mutex_unlock(&cache_lock);
	p = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	*cap = want;
	return p;
}

void pymem_free(void *p, size_t cap)
{
	struct blk old[CACHE_N];
	size_t nold = 0;

	if (!p)
		return;
	if (cap < MMAP_MIN) {
		free(p);
		return;
	}
	if (cap > CACHE_BYTES / 4) {
		munmap(p, cap);
		return;
	}
	pthread_mutex_lock(&cache_lock);
	while (ncache && (ncache == CACHE_N || cache_bytes + cap > CACHE_BYTES)) {
		old[nold++] = cache[0];
		cache_del_locked(0);
	}
	cache[ncache++] = (struct blk){ p, cap };
	cache_bytes += cap;
	pthread_mutex_unlock(&cache_lock);
	for (size_t i = 0; i < nold; i++)
		munmap(old[i].p, old[i].cap);
}

void pymem_trim(void)
{
	struct blk old[CACHE_N];
	size_t nold;

	pthread_mutex_lock(&cache_lock);
	nold = ncache;
	memcpy(old, cache, ncache * sizeof(cache[0]));
	ncache = 0;
	cache_bytes = 0;
	pthread_mutex_unlock(&cache_lock);
	for (size_t i = 0; i < nold; i++)
		munmap(old[i].p, old[i].cap);
}

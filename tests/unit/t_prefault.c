/* t_prefault: the region a helper thread faults in ahead of a bulk load
 * (master/prefault.c): chunks come from the front, 2 MiB aligned and
 * zero; what the user wrote is never touched by the helper, taken or
 * not yet stopped; the untaken tail goes at stop and takes fail after it;
 * prefault_owns tells the region's memory from any other.
 */
#include "testlib.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prefault.h"

#define MB (1ul << 20)

static bool all(const unsigned char *p, size_t n, unsigned char v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return false;
	return true;
}

int main(void)
{
	struct prefault *p = prefault_start(64 * MB + 1, 8 * MB);
	unsigned char *c[40];
	int heap;

	CHECK(p != NULL);
	CHECK(prefault_take(p, MB) == NULL);		/* not a whole huge page */
	CHECK(prefault_take(p, 3 * MB) == NULL);
	/* the user writes each chunk at once, the helper runs beside it */
	for (int i = 0; i < 20; i++) {
		c[i] = prefault_take(p, 2 * MB);
		CHECK(c[i] != NULL);
		CHECK(((uintptr_t)c[i] & (2 * MB - 1)) == 0);
		if (i)
			CHECK(c[i] == c[i - 1] + 2 * MB);
		CHECK(all(c[i], 2 * MB, 0));
		memset(c[i], 0x40 + i, 2 * MB);
		if (i % 4 == 0)
			nanosleep(&(struct timespec){ .tv_nsec = 2000000 }, NULL);
	}
	CHECK(prefault_owns(p, c[0]) && prefault_owns(p, c[19] + 2 * MB - 1));
	CHECK(!prefault_owns(p, c[19] + 2 * MB));	/* not taken yet */
	CHECK(!prefault_owns(p, &heap));
	unsigned char *big = prefault_take(p, 16 * MB);
	CHECK(big != NULL && all(big, 16 * MB, 0));
	memset(big, 0x7f, 16 * MB);
	/* 64 MiB + 1 rounds to 66: 40 + 16 taken, 10 left */
	CHECK(prefault_take(p, 12 * MB) == NULL);
	c[20] = prefault_take(p, 10 * MB);
	CHECK(c[20] != NULL && all(c[20], 10 * MB, 0));
	CHECK(prefault_take(p, 2 * MB) == NULL);	/* full */
	prefault_stop(p);
	prefault_stop(p);				/* twice: nothing more */
	CHECK(prefault_take(p, 2 * MB) == NULL);	/* stopped */
	for (int i = 0; i < 20; i++)
		CHECK(all(c[i], 2 * MB, (unsigned char)(0x40 + i)));
	CHECK(all(big, 16 * MB, 0x7f));
	CHECK(prefault_owns(p, c[20] + 10 * MB - 1));
	prefault_free(p);

	/* stopped early: the untaken tail is unmapped, what was taken stays */
	p = prefault_start(256 * MB, 32 * MB);
	CHECK(p != NULL);
	c[0] = prefault_take(p, 4 * MB);
	CHECK(c[0] != NULL);
	memset(c[0], 1, 4 * MB);
	prefault_stop(p);
	CHECK(all(c[0], 4 * MB, 1));
	CHECK(prefault_owns(p, c[0]) && !prefault_owns(p, c[0] + 4 * MB));
	prefault_free(p);
	prefault_free(NULL);

	/* freed while the helper still runs */
	p = prefault_start(32 * MB, 32 * MB);
	CHECK(p != NULL);
	CHECK(prefault_take(p, 2 * MB) != NULL);
	prefault_free(p);
	return tl_done();
}

/* clock: time sources and deadline waits (see clock.h). */
#include <errno.h>
#include <time.h>

#include "clock.h"

uint64_t clock_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t clock_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t clock_realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int clock_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mutex, uint64_t deadline_ms)
{
	uint64_t ns = deadline_ms > UINT64_MAX / 1000000u ? UINT64_MAX : deadline_ms * 1000000u;

	return clock_cond_wait_until_ns(cond, mutex, ns);
}

int clock_cond_wait_until_ns(pthread_cond_t *cond, pthread_mutex_t *mutex, uint64_t deadline_ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(deadline_ns / 1000000000ull),
		.tv_nsec = (long)(deadline_ns % 1000000000ull),
	};

	/* clockwait, not timedwait: the deadline stays on CLOCK_MONOTONIC
	 * whether or not the condvar was created with that clock */
	return pthread_cond_clockwait(cond, mutex, CLOCK_MONOTONIC, &ts) == ETIMEDOUT ? -ETIMEDOUT : 0;
}

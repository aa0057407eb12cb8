/* clock: the pool's time sources. Deadlines are CLOCK_MONOTONIC
 * milliseconds (clock_now_ms), and a condition variable waits for one
 * through clock_cond_wait_until; wall-clock nanoseconds are for
 * timestamps users see.
 * Stateless; thread-safe.
 */
#ifndef KVP_CLOCK_H
#define KVP_CLOCK_H

#include <pthread.h>
#include <stdint.h>

uint64_t clock_now_ms(void);		/* CLOCK_MONOTONIC */
uint64_t clock_now_ns(void);		/* CLOCK_MONOTONIC */
uint64_t clock_realtime_ns(void);	/* CLOCK_REALTIME */
/* pthread_cond_wait on @cond (@mutex held) until woken or @deadline_ms
 * (CLOCK_MONOTONIC ms, as clock_now_ms) has passed: 0 when woken, maybe
 * spuriously (the caller rechecks its condition), or -ETIMEDOUT. The
 * deadline is CLOCK_MONOTONIC whatever clock @cond was created with. */
int clock_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mutex, uint64_t deadline_ms);
/* The same with a deadline in CLOCK_MONOTONIC ns (clock_now_ns). */
int clock_cond_wait_until_ns(pthread_cond_t *cond, pthread_mutex_t *mutex, uint64_t deadline_ns);

#endif

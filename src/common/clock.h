/* clock: the pool's time sources. Deadlines are CLOCK_MONOTONIC
 * milliseconds (clock_now_ms); wall-clock nanoseconds are for timestamps
 * users see.
 * Stateless; thread-safe.
 */
#ifndef KVP_CLOCK_H
#define KVP_CLOCK_H

#include <stdint.h>

uint64_t clock_now_ms(void);		/* CLOCK_MONOTONIC */
uint64_t clock_realtime_ns(void);	/* CLOCK_REALTIME */

#endif

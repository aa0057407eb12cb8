/* kvcq: the completion queue of libkvpool (kvp_cq_*, declared in kvpool.h).
 * Owns a submission list, a completion list, an eventfd and a few worker
 * threads that run batch calls on one handle. The queue's mutex guards both
 * lists, the counters and the eventfd's "signalled" state; the batches
 * themselves run outside it, one per worker.
 */
#ifndef KVP_KVCQ_H
#define KVP_KVCQ_H

#include "kvpool.h"

#define KVCQ_DEFAULT_THREADS 4u
#define KVCQ_MAX_THREADS 64u

#endif

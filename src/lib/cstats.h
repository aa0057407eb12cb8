/* cstats: reports this handle's value bytes by data path (kvp_stats'
 * local, tcp, rdma and disk bytes) to the master in CLIENT_STATS frames,
 * posted without waiting: at most once a second, only when a count moved,
 * deltas from the last report. Any thread calls cstats_poll after a call;
 * its fast path is one atomic load and a clock read, and a trylock lets
 * one thread send. A master that refuses the opcode turns the reports off.
 */
#ifndef KVP_CSTATS_H
#define KVP_CSTATS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "wire.h"

struct kvp;

#define CSTATS_MS 1000			/* between reports */
#define CSTATS_OFF UINT64_MAX		/* due_ms of a handle that does not report */
#define CSTATS_STRIKES 3

struct cstats {
	_Atomic uint64_t due_ms;	/* next report not before (clock_now_ms) */
	pthread_mutex_t lock;		/* the sender's (trylock) */
	uint64_t sent[WIRE_CSTAT_N];	/* the counts reported; protected by lock */
	atomic_uint lost;		/* reports lost with their connection, in a row */
};

void cstats_init(struct cstats *s);
void cstats_destroy(struct cstats *s);
/* After a call: reports when due and a count moved. */
void cstats_poll(struct kvp *kvp);
/* Reports what moved now, due or not (kvp_close). */
void cstats_flush(struct kvp *kvp);
/* The master refused a CLIENT_STATS frame: no more reports. */
void cstats_refused(struct kvp *kvp);
/* A master answered one. */
void cstats_answered(struct kvp *kvp);
/* A connection closed with a report unanswered: a master from before
 * CLIENT_STATS closes after its refusal, which the client may not read
 * (its next frames meet the closed socket first). CSTATS_STRIKES of
 * these in a row count as a refusal. */
void cstats_lost(struct kvp *kvp);

#endif

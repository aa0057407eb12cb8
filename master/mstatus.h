/* mstatus: the master's /api/status — one JSON object with what the status
 * page (/ and /ui, ui/status.html) and `kvpool top` show: capacity and use
 * per node and tier, keys, gets and hits, puts, evictions, demotions,
 * promotions, leases, HA role, epoch and leader, namespaces, the bytes
 * clients moved by path (CLIENT_STATS), prefix hit rates; and a ring of
 * one sample a second over the last MSTATUS_RING seconds, so that the
 * page's plots are not empty on first load. Loop thread only; no locks.
 */
#ifndef KVP_MSTATUS_H
#define KVP_MSTATUS_H

#include <stdint.h>

struct master;
struct rbuf;
struct sbuf;

#define MSTATUS_RING 300		/* samples: 5 minutes at one a second */

/* The counters of one sample (monotonic ones since the master started). */
struct mstatus_sample {
	uint64_t t_ms;			/* wall clock, ms since the epoch */
	uint64_t puts;			/* PUT_END items that succeeded */
	uint64_t gets;			/* GET items asked */
	uint64_t hits;			/* ... of which found */
	uint64_t evictions, demotions, promotions;
	uint64_t keys, used, capacity, leases;
	/* bytes the nodes' data servers moved over TCP (their HEARTBEATs;
	 * shared memory and RDMA bytes are the clients' alone) */
	uint64_t tcp_read, tcp_written;
	/* bytes the clients moved, by path (their CLIENT_STATS) */
	uint64_t client_local, client_tcp, client_rdma, client_disk;
	/* prefix lookups (EXISTS/GET batches of more than one key) */
	uint64_t prefix_blocks_asked, prefix_blocks_found;
	uint64_t prefix_tokens_asked, prefix_tokens_found;
};

struct mstatus {
	struct mstatus_sample ring[MSTATUS_RING];
	unsigned head, n;		/* next slot, samples held */
};

/* What the HA view says (mhttp's admin view): role "leader"/"standby". */
struct mstatus_ha {
	const char *mode;		/* "none" | "etcd" */
	const char *role, *state, *leader;
	uint64_t view_version;
};

/* CLIENT_STATS (layout in wire.h): adds a client's deltas to
 * m->client_bytes. 0 or KVP_EPROTO. */
int mstatus_client_stats(struct master *m, struct rbuf *r);

void mstatus_read(const struct master *m, struct mstatus_sample *out);
/* Takes one sample (a 1 s timer calls it). */
void mstatus_tick(struct mstatus *s, const struct master *m);
/* The document into b; with s, "history" holds the ring's samples newer
 * than since_ms (0: all of them). m may be NULL (no state yet). */
void mstatus_json(const struct mstatus *s, const struct master *m, const struct mstatus_ha *ha,
		  uint64_t since_ms, struct sbuf *b);

#endif

/* master: kvpool-master's state and request dispatcher — objects, segments,
 * allocation, leases, pins, pending puts, eviction and node liveness —
 * without sockets: frames go in through master_handle(), replies come out in
 * a wbuf, and requests the master sends on its own (FREE to a node, parked
 * PUT_START replies) leave through each client's send callback. The daemon
 * (mserver.c) and the fuzz target drive it. Single-threaded: everything runs
 * on the caller's (loop) thread; no locks.
 */
#ifndef KVP_MASTER_H
#define KVP_MASTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "wire.h"

struct master;
struct master_client;

/* Queues bytes (whole frames) for the peer; 0 or a negative code. */
typedef int (*master_send_fn)(void *arg, const void *p, size_t n);
/* Asks the owner to close the client's connection (after queued output). */
typedef void (*master_close_fn)(void *arg);

/* Copies conf. NULL on OOM or a bad allocation strategy (message in err). */
struct master *master_create(const struct kvp_conf *conf, char *err, size_t errlen);
void master_destroy(struct master *m);

struct master_client *master_client_new(struct master *m, master_send_fn send,
					master_close_fn close, void *arg);
/* Optional, for a standby's connection: the bytes queued and not yet sent,
 * and a close that drops them (a standby too far behind is dropped with
 * its backlog and follows again from a snapshot). */
typedef size_t (*master_queued_fn)(void *arg);
void master_client_set_backlog(struct master_client *c, master_queued_fn queued,
			       master_close_fn abort);
/* The connection is gone: its segments stay (until node_ttl) without a
 * connection unless it had UNMOUNTed them, its parked requests are
 * dropped. */
void master_client_free(struct master_client *c);

/* Handles one frame (header + body; the payload, if any, is the caller's to
 * discard). A reply frame, if any, is appended to reply. Returns 0, or < 0
 * when the connection must be closed after the reply is sent. */
int master_handle(struct master *m, struct master_client *c, const struct wire_hdr *h,
		  const uint8_t *body, struct wbuf *reply);

/* A look ahead over pipelined request frames of client c just read (p:
 * whole frames from a frame's start, maybe a partial one at the end):
 * prefetches the hash slots and likely objects of the first keys of the
 * lookups and puts among them, so that handling them one frame at a time
 * does not wait on a cache miss per frame; and counts them, so that each
 * but the last needs one clock read (master_handle). Anything malformed
 * ends the look. */
void master_lookahead(struct master *m, struct master_client *c, const uint8_t *p, size_t n);

/* Periodic duties (every ~50 ms): put timeouts, lease sweeping, node
 * liveness, HELLO timeouts, then master_step(). */
void master_tick(struct master *m);
/* One bounded step (~20 us) of eviction, FREE flushing, parked requests.
 * Returns true while eviction has more to do: call again at once (after
 * serving I/O). */
bool master_step(struct master *m);
/* True while eviction runs: the caller should master_step() soon. */
bool master_wants_tick(const struct master *m);
/* True while puts wait for the room eviction makes (parked PUT_STARTs):
 * then master_step() should run on every loop pass, else every few ms is
 * enough and the loop need not spin (a spinning master takes a CPU that
 * co-located readers and writers need). */
bool master_tick_urgent(const struct master *m);
/* Sends queued FREEs to the nodes (also done at the end of master_handle). */
void master_flush(struct master *m);

/* SIGHUP: applies the live keys of nc (log level, lease_ttl, put_timeout,
 * client_ttl, eviction settings) and logs which other keys changed and need
 * a restart. */
void master_reload(struct master *m, const struct kvp_conf *nc);

/* m publishes its objects' lifecycle on ev (the caller's, which outlives
 * m; NULL: none), starting with AllBlocksCleared: a fresh master's table
 * is empty (mevents.h). */
struct mevents;
void master_set_events(struct master *m, struct mevents *ev);

size_t master_clients(const struct master *m);
/* Sets the generation counter (the next put gets gen + 1): deterministic
 * generations for the fuzz target. */
void master_set_generation(struct master *m, uint64_t gen);
/* Consistency of the key index, the segments' replica arrays and eviction regions
 * (tests, the fuzz target); false names a bug. */
bool master_check(const struct master *m);
/* One line: keys, pending puts, segments, bytes used/capacity, clients. */
void master_status(struct master *m, char *buf, size_t len);

/* HA (docs/ha.md): the epoch HELLO replies carry (this leader's election
 * revision in etcd), the recovery window of a new leader (mrecover.h:
 * expected = the last leader's segment uuids, hex, one per line), and the
 * uuids of the mounted segments in that format (length returned). */
void master_set_epoch(struct master *m, uint64_t epoch);
uint64_t master_epoch(const struct master *m);
void master_recover(struct master *m, const char *expected, uint64_t window_ms);
bool master_recovering(const struct master *m);
uint64_t master_recover_ms(const struct master *m);
size_t master_segments_text(const struct master *m, char *buf, size_t cap);

/* The warm standby (mrepl.h): a standby applies the body of each REPL
 * frame its leader sends (0, or < 0: the stream is broken, follow again);
 * synced once the snapshot is complete; master_standby_tick() replaces
 * master_tick() while standing by (no duty may touch the table);
 * master_takeover() keeps the table for the new leader, with its epoch,
 * and attaches ev without AllBlocksCleared (the table is not empty). */
int master_follow_apply(struct master *m, const uint8_t *body, size_t len);
bool master_follow_synced(const struct master *m);
uint64_t master_keys(const struct master *m);
void master_standby_tick(struct master *m);
void master_takeover(struct master *m, uint64_t epoch, struct mevents *ev);
/* A lone master's table file (mtabfile.h): load one into a fresh master
 * (0; -ENOENT: none; -EINVAL: refused, why says, m holds part of it:
 * destroy it), then master_takeover() as a standby's; start writing. */
int master_table_load(struct master *m, const char *path, char *why, size_t cap);
/* Its first snapshot after delay_ms: after a warm load the file loaded is
 * the file meanwhile, and the restart's first seconds go to the nodes'
 * re-mounts and the clients, not to rewriting it. */
int master_table_start(struct master *m, const char *path, uint64_t delay_ms);
/* After master_takeover(): the warm segments' nodes get base_ms more than
 * node_ttl to re-mount, and 10 ms per thousand replicas (their scan). */
void master_warm_grace(struct master *m, uint64_t base_ms);
/* For /metrics: the standby's stream and the new leader's reconciliation. */
struct master_repl_stats {
	bool synced;			/* standby: the snapshot is complete */
	bool warm;			/* leader: took over a followed table */
	uint64_t records;		/* standby: records applied */
	uint64_t confirmed, ghosts;	/* leader: replicas the nodes confirmed / did not hold */
	uint64_t lag_drops;		/* leader: standbys dropped with a backlog over the limit */
};
void master_repl_stats(const struct master *m, struct master_repl_stats *st);

#endif

/* leader: where the kvpool-master leader of a cluster is, as the masters
 * publish it in etcd (master/ha.c writes, everyone else reads).
 *
 * Key "kvpool/<cluster_id>/leader", created by the winner of an election
 * under its etcd lease, so it vanishes when the leader stops renewing it.
 * Its create revision is the leader's epoch: it grows with every election
 * and is what the leader's HELLO replies and grants carry. The value is a
 * small text record, one "name=value" per line (unknown names ignored):
 *   rpc=10.0.0.1:15001     the RPC endpoint nodes and clients connect to
 *   http=10.0.0.1:15003    /health and /metrics
 *   name=host-a            who (for logs and `kvpool info`)
 *
 * leader_lookup() reads it once (blocking); a leader_watch keeps it up to
 * date on a thread of its own and signals changes through an eventfd, for
 * the event loop of kvpool-node. Thread-safety: leader_watch_* may be
 * called from any thread; the rest are pure or use the caller's etcd.
 */
#ifndef KVP_LEADER_H
#define KVP_LEADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct etcd;

#define LEADER_REC_MAX 1024
#define LEADER_ID_MAX 128	/* cluster_id length (Mooncake's rule) */

struct leader_rec {
	char rpc[256];
	char http[256];
	char name[256];
};

/* Mooncake's cluster_id rule: 1..128 of [A-Za-z0-9_.-]. */
bool leader_cluster_id_ok(const char *id);
/* "kvpool/<id>/<what>": 0, or -EINVAL (bad id, or it does not fit). */
int leader_key(char *out, size_t cap, const char *cluster_id, const char *what);

/* The record's text (no NUL counted); -E2BIG if cap is too small. */
int leader_rec_encode(const struct leader_rec *r, char *out, size_t cap);
/* Strict: printable ASCII, names and values bounded, rpc present and a
 * host:port. 0 or -EINVAL. */
int leader_rec_decode(const char *p, size_t n, struct leader_rec *r);

/* Reads the leader of cluster_id: 0 with r and epoch, -ENOENT when there is
 * none (an election is due or running), else the etcd error. */
int leader_lookup(struct etcd *e, const char *cluster_id, struct leader_rec *r, uint64_t *epoch);

struct leader_watch;
struct etcd_tls;
/* Starts the watching thread. NULL with a message in err. tls: as
 * etcd_create's (read here only). */
struct leader_watch *leader_watch_start(const char *endpoints, const struct etcd_tls *tls,
					const char *cluster_id, char *err, size_t errlen);
void leader_watch_stop(struct leader_watch *w);
/* Readable when the leader may have changed (read leader_watch_get, then
 * leader_watch_ack to drain it). */
int leader_watch_fd(const struct leader_watch *w);
void leader_watch_ack(struct leader_watch *w);
/* The leader as last seen: 0 (kept while etcd does not answer), or
 * -ENOENT when etcd said there is none or nothing was read yet. */
int leader_watch_get(struct leader_watch *w, struct leader_rec *r, uint64_t *epoch);
/* Asks the thread to read etcd again now (the leader it named is not
 * answering). */
void leader_watch_refresh(struct leader_watch *w);

#endif

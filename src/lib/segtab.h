/* segtab: a handle's cached segment table (SEGMENTS from the master, sorted
 * by id, with each segment's local mapping and RDMA address) and its list
 * of nodes (one struct client_node per data endpoint, append only). Any
 * thread; kvp->lock guards the table, the node list and segment refs and is
 * held only to look up; kvp->refresh_lock serialises refreshes (taken first).
 */
#ifndef KVP_SEGTAB_H
#define KVP_SEGTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvp;
struct client_seg;
struct mcall;

/* Fetches SEGMENTS and installs the new table, keeping the entries (and
 * mappings) of segments that did not change. seen_gen: the table generation
 * the caller found lacking; a refresh that happened meanwhile suffices. */
int segtab_refresh(struct kvp *kvp, uint64_t seen_gen, uint64_t deadline);
/* Looks a segment up, refreshing the table at most once per *refreshed. A
 * reference the caller drops with segtab_put; NULL when unknown. */
struct client_seg *segtab_get(struct kvp *kvp, uint32_t id, bool *refreshed, uint64_t deadline);
/* The same from the table as it is, never refreshing it (no master
 * contact: optimistic reads); NULL when unknown or the table is stale. */
struct client_seg *segtab_peek(struct kvp *kvp, uint32_t id);
/* Drops a segment reference taken by a lookup (NULL: nothing). */
void segtab_put(struct kvp *kvp, struct client_seg *seg);
/* The entry of the segment with that uuid in the table as it is (also an
 * invalidated one: no master is asked), with a reference; NULL if none.
 * For reads while no master answers (haloc.h). */
struct client_seg *segtab_get_uuid(struct kvp *kvp, uint64_t uuid);
/* The entry for id, no reference taken; the caller holds kvp->lock. */
struct client_seg *segtab_find_locked(struct kvp *kvp, uint32_t id);
/* The ids of the mounted segments of the node named node (at most max of
 * them, in id order), loading the table once more when none is known:
 * their number (0: none), or a KVP_E* code from the load. */
int segtab_by_name(struct kvp *kvp, const char *node, uint32_t *ids, size_t max,
		   uint64_t deadline);
/* The next lookup refreshes the table first. */
void segtab_invalidate(struct kvp *kvp);
/* True if some known segment can be written by memcpy (a put may then ask
 * the master for a segment on this host first). */
bool segtab_have_local_rw(struct kvp *kvp);

/* Parses a SEGMENTS reply (untrusted) into unattached entries, sorted as
 * received: 0, the reply's status, KVP_EPROTO or KVP_ENOMEM. */
int segtab_parse(const struct mcall *m, struct client_seg ***out, size_t *nout);
/* Frees what segtab_parse returned (entries with their RDMA address). */
void segtab_parsed_free(struct client_seg **v, size_t n);

/* Drops the table and frees the node list (kvp_close, after the node
 * connection pools are closed). */
void segtab_close(struct kvp *kvp);

#endif

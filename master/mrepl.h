/* mrepl: the warm standby (docs/ha.md "Warm standby"). On the leader: a
 * standby that sent FOLLOW gets the segment set, then the table's complete
 * objects a slice per tick (the snapshot), and, from its FOLLOW on, every
 * change to a complete object's replicas and to the segment set, as REPL
 * frames queued before the reply of the frame that caused them. On a
 * standby: mrepl_apply() keeps a table in step. On the new leader:
 * mrepl_takeover() keeps it, and each segment's re-mount is checked against
 * the node's REPORTs: what the node reports and the table lacks is adopted,
 * what the table holds and the node does not report (a ghost) is dropped
 * at the node's first HEARTBEAT. A lone master's table file (mtabfile.h)
 * is a follower too: a sink that is not a connection. Loop thread only;
 * no locks.
 */
#ifndef KVP_MREPL_H
#define KVP_MREPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "master_i.h"

enum mrepl_rec {
	MREPL_SEG = 1,
	MREPL_SEGDROP = 2,
	MREPL_ADD = 3,
	MREPL_DROP = 4,
	MREPL_SYNCED = 5,
};

/* ---- leader ---- */

/* FOLLOW from c (HELLO role WIRE_ROLE_MASTER): 0, KVP_ELIMIT (too many
 * standbys), KVP_ENOMEM. */
int mrepl_follow(struct master *m, struct master_client *c);
void mrepl_client_gone(struct master *m, struct master_client *c);
/* c follows and has been sent its whole snapshot (SYNCED). */
bool mrepl_synced(const struct master *m, const struct master_client *c);
/* Changes (no-ops without standbys): a complete object's replica ri was
 * added; one is about to go (rp: a copy of it); the object just committed
 * (all its replicas); a segment mounted; one is about to go with every
 * replica in it (their own DROPs are not sent: m->repl_mute). */
void mrepl_add(struct master *m, const struct obj *o, unsigned ri);
void mrepl_drop(struct master *m, const struct obj *o, const struct rep *rp);
void mrepl_commit(struct master *m, const struct obj *o);
void mrepl_seg(struct master *m, const struct seg *s);
void mrepl_segdrop(struct master *m, const struct seg *s);
/* Sends what was recorded (master_flush); the snapshot's next slice (per tick). */
void mrepl_flush(struct master *m);
void mrepl_tick(struct master *m);
void mrepl_destroy(struct master *m);

static inline bool mrepl_on(const struct master *m)
{
	return m->repl && !m->repl_mute;
}

/* ---- standby ---- */

/* Applies one REPL body: 0, or KVP_EPROTO for a malformed one (what came
 * before the fault is applied; the standby then drops the table and
 * follows again). Never trusts a length, an id or an offset. */
int mrepl_apply(struct master *m, const uint8_t *body, size_t len);
/* Reserves, in offset order, the extents of the fresh objects the ADDs
 * applied so far left waiting (mrepl.c "deferred reservations"); one that
 * overlaps goes. mrepl_apply() calls it before it returns, except during a
 * table file's load, which calls it at the file's end. */
void mrepl_reserve_flush(struct master *m);
/* A table file's load: at most about n will wait (a bound from the file's
 * size). Their batch then grows in memory that helper threads fault ahead
 * of it (prefault.h), up to n, on the heap past it. */
void mrepl_reserve_presize(struct master *m, size_t n);
/* Tests: the bound's ceiling (default SIZE_MAX), to reach past it. */
extern size_t mrepl_dres_bound_max;
/* Frees the batch's memory (none may wait): the end of a table file's
 * load, master_destroy(). */
void mrepl_reserve_release(struct master *m);

/* ---- new leader ---- */

/* Keeps the standby's table: every segment is warm (no node connection,
 * no allocation) until its node re-mounts. */
void mrepl_takeover(struct master *m);
/* A warm segment's node re-mounted: 0 and the reconciliation starts (the
 * table's replicas in s are kept, the array of them is gathered at the
 * first REPORT), or < 0 (s must be rebuilt as a cold one). */
int mrepl_recon_begin(struct master *m, struct seg *s);
/* A reported extent the table already has in s: true (marked seen). */
bool mrepl_recon_confirm(struct master *m, struct seg *s, const uint8_t *key, size_t klen,
			 uint8_t tier, uint64_t off, uint64_t gen);
/* A reported memory extent at [off, off + len) overlaps a replica of the
 * table that the node has not reported: the node's word wins, those go. */
void mrepl_recon_clear(struct master *m, struct seg *s, uint64_t off, uint64_t len);
/* The node's first HEARTBEAT: every replica it did not report goes. */
void mrepl_recon_finish(struct master *m, struct seg *s);

#endif

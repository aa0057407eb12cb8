/* mrecover: a new HA leader's recovery window (docs/ha.md). The leader
 * before it published the segments it had mounted (ha.c keeps them in
 * etcd); until each of those has mounted here and reported its extents
 * (its first HEARTBEAT follows its REPORTs on the same connection), or the
 * window ends, this master cannot tell a missing key from one it has not
 * heard of yet, so a request that names an unknown key (GET, EXISTS, SIZE,
 * STAT, PIN, REMOVE, REPLICA_CLEAR, PUT_START, PUT_END), and LIST and
 * REMOVE_PREFIX, are
 * answered KVP_ENOTLEADER for the whole frame, which clients retry. Loop
 * thread only; no locks.
 */
#ifndef KVP_MRECOVER_H
#define KVP_MRECOVER_H

#include <stddef.h>
#include <stdint.h>

#include "master_i.h"

/* Starts the window: expected is one segment uuid in hex per line (may be
 * empty: nothing to wait for). */
void mrecover_begin(struct master *m, const char *expected, uint64_t window_ms);
/* s reported everything it holds (first heartbeat after its MOUNT). */
void mrecover_reported(struct master *m, const struct seg *s);
/* While the window lasts: KVP_ENOTLEADER for a whole request frame that
 * names a key this master does not know (yet), before anything is done, so
 * a client can send it again unchanged; else 0. LIST and REMOVE_PREFIX
 * always wait. */
int mrecover_gate(struct master *m, const struct wire_hdr *h, const uint8_t *body);
/* Ends the window when it is over (per tick). */
void mrecover_tick(struct master *m);
/* The uuids of the online segments in the format above; returns the
 * length (0 and "" when none), the text cut at cap. */
size_t mrecover_segments(const struct master *m, char *buf, size_t cap);

#endif

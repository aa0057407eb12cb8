/* mtier: promotion of disk replicas on a GET and the node's answers to
 * DEMOTE and PROMOTE (the master's half of the spill tier; eviction
 * decides what to demote). Loop thread only; no locks.
 */
#ifndef KVP_MTIER_H
#define KVP_MTIER_H

#include <stdint.h>

#include "master_i.h"

/* A GET hit o: if it has only disk replicas and a node has room, queue a
 * PROMOTE of one into memory (the reply still names the disk replica). */
void mtier_promote_maybe(struct master *m, const struct master_client *c, struct obj *o);
/* The node on s answered PROMOTE batch d (frame h, body). */
void mtier_promoted(struct master *m, struct seg *s, const struct dbatch *d,
		    const struct wire_hdr *h, const uint8_t *body);
/* The node on s answered DEMOTE batch d (frame h, body). */
void mtier_demoted(struct master *m, struct seg *s, const struct dbatch *d,
		   const struct wire_hdr *h, const uint8_t *body);

#endif

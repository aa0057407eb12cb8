/* mchain: chains of blocks — an object put as extending another (the
 * previous key of a batch put, or the put's pred) and the rule eviction
 * keeps: a block is never dropped while a block that extends it is kept,
 * so a chain's tail leaves before its head. Each object counts what
 * extends it (nchild, nchild_mem); every replica sits in the region of its
 * segment's array that says whether eviction may take it (segreg.h).
 * Objects that lose what they extend another way (REMOVE, a node's
 * death, an upsert) are orphans: eviction takes them first. Loop thread
 * only; no locks.
 */
#ifndef KVP_MCHAIN_H
#define KVP_MCHAIN_H

#include <stdbool.h>

#include "objtab.h"
#include "segreg.h"

struct master;

/* Where replica ri of o belongs: a memory replica is evictable (demoted
 * or dropped) when no object extending o has a memory replica, a spill
 * replica when nothing extends o at all. */
static inline enum seg_rgn mchain_rgn(const struct objtab *t, const struct obj *o,
				      unsigned ri)
{
	const struct obj_links *l = objtab_links(t, o);

	if (obj_rep(o)[ri].tier == 0)
		return l->nchild_mem ? SEG_RGN_OTHER : SEG_RGN_MEM;
	return l->nchild ? SEG_RGN_OTHER : SEG_RGN_DISK;
}

/* Links o (new, its replicas attached) as extending parent (NULL: none).
 * Out of memory for the links, o is left unchained (evicted as any). */
void mchain_link(struct master *m, struct obj *o, struct obj *parent);
/* o's replicas changed (one added, dropped, moved between tiers, a DEMOTE
 * of one queued or answered): its replicas' regions and its parent's count
 * of memory children follow. */
void mchain_changed(struct master *m, struct obj *o);
/* o goes (before it is unlinked and freed): its parent counts one child
 * fewer; what extended o becomes an orphan. */
void mchain_unlink(struct master *m, struct obj *o);
/* o's key is about to leave the table (an upsert sets it aside): what
 * extended it becomes an orphan. */
void mchain_detach_key(struct master *m, const struct obj *o);
/* Walks every online segment's replica array: each entry's object points
 * back at it and sits in the region its counts call for. False at the
 * first that does not (the fuzz target aborts on it). */
bool mchain_check(const struct master *m);
/* True if o extends an object that is gone (checked only after something
 * left with children: the loop pays nothing otherwise). */
bool mchain_orphan(const struct master *m, const struct obj *o);

#endif

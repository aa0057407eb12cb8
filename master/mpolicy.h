/* mpolicy: what eviction keeps — the reuse priority (pkey) of every
 * object, the half-life it decays with, and the ghosts of evicted keys.
 * A priority is a decayed count of the object's accesses in the log
 * domain (LRFU): pkey = H log2(sum over accesses of 2^(t_i / H)), in the
 * master's millisecond clock, so it only changes on an access and two
 * objects compare by it at any time. H adapts to the reuse intervals the
 * pool sees. A ghost remembers an evicted key's priority, so a block that
 * comes back resumes its count instead of starting over. See
 * docs/master.md "Eviction". Loop thread only; no locks.
 */
#ifndef KVP_MPOLICY_H
#define KVP_MPOLICY_H

#include <stdbool.h>
#include <stdint.h>

struct master;
struct obj;

#define MPOL_NHIST 128			/* quarter-octave buckets of reuse intervals (ms) */

struct mpol_ghosts;

struct mpol {
	bool lru;			/* eviction_policy = lru: the last access alone */
	uint32_t half_ms;		/* H in use */
	uint32_t fixed_ms;		/* eviction_half_life, 0 = adapt */
	uint32_t hist[MPOL_NHIST];	/* reuse intervals seen (hits and ghost hits) */
	uint32_t hist_n, hist_new;
	struct mpol_ghosts *g;
	uint64_t ghost_cap;		/* eviction_ghosts, 0 = twice the objects */
	/* counters (INFO, /metrics) */
	uint64_t ghost_hits, ghost_inserts, first_puts;
};

int mpol_init(struct master *m);
void mpol_destroy(struct master *m);
/* Applies the [master] eviction_* keys of m->conf (start-up and reload). */
void mpol_configure(struct master *m);

/* The priority of a new object whose key hashes to h: a ghost's, brought
 * up to now, or now's (first sight). */
uint32_t mpol_admit(struct master *m, uint32_t h);
/* o was accessed: a GET, an EXISTS (clients report their optimistic
 * reads that way), a put that found it there. Each counts once: an
 * engine's EXISTS and GET of a hit count twice, the same for every block
 * it hits, which keeps the order among them. */
void mpol_touch(struct master *m, struct obj *o);
/* o leaves by eviction: remember its priority under its key's hash. */
void mpol_forget(struct master *m, const struct obj *o);
/* How much eviction wants to keep o, relative to now: lower goes first. */
int32_t mpol_score(const struct master *m, const struct obj *o);

/* Entries the ghost table holds (for INFO and memory accounting). */
uint64_t mpol_ghost_slots(const struct master *m);

#endif

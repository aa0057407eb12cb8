/* prefault: a region of fresh memory that a helper thread faults in ahead
 * of its user, so that the kernel's page clearing (the floor of a bulk
 * load: docs/performance.md "Lone restart") runs on another core while the
 * loop thread builds the table. The loop thread takes chunks from the
 * front (prefault_take); the helper touches the pages not yet taken, at
 * most `ahead` bytes past what was. prefault_stop ends the helper and
 * returns the untaken tail to the kernel; the taken part stays mapped until
 * prefault_free. Loop thread only, but for the helper inside. */
#ifndef KVP_PREFAULT_H
#define KVP_PREFAULT_H

#include <stdbool.h>
#include <stddef.h>

struct prefault;

/* A region of size bytes (rounded up to 2 MiB, huge-page advised; address
 * space only until the helper or the user touches it), the helper started.
 * NULL when the mapping or the thread fails: the caller allocates as it
 * would without one. */
struct prefault *prefault_start(size_t size, size_t ahead);
/* n bytes (a multiple of 2 MiB, 2 MiB aligned) from the region's front, or
 * NULL when the region has no room left or was stopped. */
void *prefault_take(struct prefault *p, size_t n);
/* Ends the helper and unmaps the untaken tail; the region keeps what was
 * taken. */
void prefault_stop(struct prefault *p);
/* Whether ptr lies in what p handed out. */
bool prefault_owns(const struct prefault *p, const void *ptr);
/* Unmaps what was taken (stopping the helper first if still running). */
void prefault_free(struct prefault *p);

#endif

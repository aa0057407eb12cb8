/* pymem: the memory of values the extension hands to Python (BufferHandle,
 * tensors read from the pool) and of staging copies (gathered puts). Large
 * blocks are page-backed and, when freed, kept in a small process-wide cache
 * so that the next read of the same size reuses pages that are already
 * faulted in (a fresh 1 MiB mapping costs more page faults than the memcpy
 * that fills it). Any thread; one mutex guards the cache.
 */
#ifndef KVP_PYMEM_H
#define KVP_PYMEM_H

#include <stddef.h>

/* A block of at least @n bytes (n may be 0); *cap gets its real size, to be
 * passed back to pymem_free. NULL when out of memory. */
void *pymem_alloc(size_t n, size_t *cap);
void pymem_free(void *p, size_t cap);
/* Drops every cached block (tests; the atexit close). */
void pymem_trim(void);

#endif

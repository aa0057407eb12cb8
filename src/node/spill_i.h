/* spill_i: what spill.c (the ring, its buffers and the operation engine)
 * and spill_file.c (the file, its header and lock, the start-up scan, the
 * index of live extents) share: struct spill itself. Same rules as spill.h:
 * the node's loop thread, no locks; spill_scan (spill_file.c) alone may run
 * on another thread before anything else touches the spill.
 */
#ifndef KVP_SPILL_I_H
#define KVP_SPILL_I_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <liburing.h>

#include "clock.h"
#include "extent.h"
#include "spill.h"

#define NSTAGE 4			/* staging buffers (SPILL_CHUNK each) */

struct alloc;
struct sp_io;
struct sp_op;

/* A live extent of the file, as the index keeps it (for REPORTs after a
 * re-mount, FREE and PROMOTE checks, READ validation). */
struct sp_ent {
	uint64_t off, alloc_len;
	struct ext_hdr h;
	bool dying;			/* a FREE is writing its tombstone */
	uint8_t key[];
};


struct spill {
	char path[256];
	int fd;
	uint64_t size;			/* whole file */
	uint64_t uuid;
	uint64_t max_value;
	bool direct;
	bool created;
	uint32_t mem_align;		/* O_DIRECT memory alignment */

	struct io_uring ring;
	bool ring_ok;
	int efd;
	bool fixed_file;
	bool fixed_bufs;
	unsigned qd;

	/* one mapping: nbufs user buffers of bufsz bytes, then NSTAGE stage
	 * buffers of SPILL_CHUNK, then one 4 KiB block per ring entry; fixed
	 * buffer indices in that order */
	uint8_t *pool;
	size_t pool_len, bufsz;
	unsigned nbufs, nblocks;
	uint8_t *stage, *blocks;
	int *free_user, *free_stage, *free_block;	/* stacks of indices */
	unsigned nfree_user, nfree_stage, nfree_block;

	struct sp_io *ios;
	struct sp_io *free_io;
	struct sp_io *retry;		/* short transfers to resubmit */
	unsigned inflight;		/* SQEs submitted, not reaped */
	unsigned prepared;		/* SQEs prepared, not yet submitted */
	struct sp_op *qhead, *qtail;	/* ops with pieces left to issue */
	bool pumping;

	struct alloc *alloc;
	uint64_t extents;
	bool scanned;
	/* index of live extents by offset: open addressing, linear probing */
	struct sp_ent **tab;
	size_t tab_cap, tab_n;
	struct spill_stats st;
};

static inline uint64_t spill_round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/* spill_file.c */
const char *spill_human(uint64_t v, char *buf, size_t len);	/* "1.5 GiB" */
/* Opens, locks, checks or creates the file (block: a SPILL_ALIGN buffer). */
int spill_file_open(struct spill *sp, const struct spill_opts *o, uint8_t *block,
		    char *err, size_t errlen);
/* Switches the file to O_DIRECT if the filesystem takes it for our 4 KiB
 * I/O: true when direct I/O is on. */
bool spill_file_direct(struct spill *sp, uint8_t *block);
struct sp_ent *spill_ix_find(const struct spill *sp, uint64_t off);
/* Adds a live extent (the key is copied): 0 or -ENOMEM. */
int spill_ix_add(struct spill *sp, uint64_t off, uint64_t alloc_len, const struct ext_hdr *h,
		 const uint8_t *key);
void spill_ix_del(struct spill *sp, struct sp_ent *e);	/* removes and frees e */
void spill_ix_free(struct spill *sp);			/* the whole index */

#endif

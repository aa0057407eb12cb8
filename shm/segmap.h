/* segmap: the commit map of a format 2 segment, and the scan that uses it.
 *
 * One byte per 4 KiB of the file (at SEG_MAP_OFF): non-zero means "an
 * extent starting in this 4 KiB was written completely", stored by its
 * writer after the last byte of the extent and before the put is reported
 * done (local clients, the node for TCP writes and promotions, RDMA clients
 * with one more one-byte write). The node clears it when the master FREEs
 * the extent, before the master may reuse the space. The byte holds a tag
 * of the extent's generation (segmap_tag), so a stale byte left by an
 * earlier tenant does not vouch for a newer extent written over it.
 *
 * A restart then reads the map (only the pages the file holds, lseek
 * SEEK_DATA) and the headers it points at: its cost follows the objects
 * held, not the bytes. A fresh segment's map is a hole: nothing is read.
 *
 * Writers and the scan run concurrently from any thread or process; every
 * access to a map byte is atomic.
 */
#ifndef KVP_SEGMAP_H
#define KVP_SEGMAP_H

#include <stdbool.h>
#include <stdint.h>

#include "extent.h"
#include "segment.h"

/* Never 0: 1..255 from the generation. */
static inline uint8_t segmap_tag(uint64_t generation)
{
	return (uint8_t)(1 + generation % 255);
}

/* The extent at off (with this generation) is complete: header, key and
 * value are in place. Release order: a reader that sees the byte sees the
 * extent. No-op on a format 1 segment. */
void segmap_commit(const struct segment *seg, uint64_t off, uint64_t generation);
/* The extent at off is gone (FREE, a write that failed): its byte is
 * cleared unless (alignment below 4 KiB) another live extent of this
 * segment starts in the same 4 KiB. */
void segmap_uncommit(const struct segment *seg, uint64_t off);

/* What a map-driven scan works on; plain memory so that tests and the fuzz
 * target can run it without a file. */
struct segmap_view {
	const uint8_t *base;	/* the whole file mapped */
	uint64_t size;
	uint64_t data_off;
	uint8_t *map;		/* base + SEG_MAP_OFF, map_len bytes */
	uint64_t map_len;
	uint32_t align;
	uint64_t uuid;		/* only extents of this segment count */
	int fd;			/* for SEEK_DATA over the map; -1: read it all */
};

#define SEGMAP_VERIFY 1u	/* check every reported value's checksum */
#define SEGMAP_REPORT_BAD 2u	/* report extents whose value failed it (flagged) */
#define SEGMAP_CLEAN 4u		/* clear bytes that vouch for nothing (map writable) */
#define SEGMAP_TRUST 8u		/* format 1: list without checksums, trusting lengths */

/* Reports, in ascending offset order and never overlapping, every extent
 * the map vouches for: a live header of this uuid at a committed place,
 * lying inside the file. Without SEGMAP_VERIFY a value is verified only
 * where the map cannot vouch for it alone: alignment below 4 KiB, a tag of
 * another generation, or an extent that another committed one starts
 * inside (then the outer one is checked: good, the inner is stale; bad,
 * the inner one stands). f->verified says whether the checksum was
 * computed. cb returns non-zero to stop (returned). st: as ext_scan_ex,
 * plus the map counters. */
int segmap_scan_view(const struct segmap_view *v, unsigned flags, uint64_t max_value,
		     int (*cb)(const struct ext_found *f, void *arg), void *arg,
		     struct ext_scan_stats *st);

/* Copies the commit map of a format 2 segment into a new buffer (*out,
 * free() it), reading only the pages the file holds (SEEK_DATA; a hole is
 * zero) and cut after its last non-zero byte: *n bytes, byte i for the
 * 4 KiB at i * 4096. 0, -ENOTSUP (format 1: no map) or -ENOMEM. */
int segmap_copy(const struct segment *seg, uint8_t **out, uint64_t *n);

/* The same over an open or attached segment: the map scan for format 2;
 * for format 1 (no map) the page-by-page ext_scan_ex, which must verify
 * every value to tell a torn write (unless SEGMAP_TRUST: a listing).
 * SEGMAP_CLEAN needs a writable mapping. */
int segmap_scan(const struct segment *seg, unsigned flags, uint64_t max_value,
		int (*cb)(const struct ext_found *f, void *arg), void *arg,
		struct ext_scan_stats *st);

#endif

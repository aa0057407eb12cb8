/* extent: the self-describing on-segment (and on-spill-file) format of one
 * object replica, and the scanner that finds every live extent without the
 * master. Pure functions over caller-owned memory; no locks.
 *
 * Layout, little-endian, at an aligned offset:
 *   0  u32 magic (EXT_MAGIC live, EXT_TOMB tombstoned)
 *   4  u16 version      6  u16 flags
 *   8  u32 key_len     12  u32 reserved (0)
 *  16  u64 value_len   24  u64 value_checksum (xxh3-64 of the value)
 *  32  u64 generation  40  u64 seg_uuid (of the segment/spill file it lives in)
 *  48  u64 put_time_ns 56  u64 header_checksum (xxh3-64 of bytes 0..55 + key)
 *  64  key bytes, then value bytes, then padding to the alignment.
 * A reader trusts nothing: decode checks magic, version, lengths against the
 * space available, the header checksum, and (ext_verify) the value checksum.
 */
#ifndef KVP_EXTENT_H
#define KVP_EXTENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EXT_MAGIC 0x5850564bu	/* "KVPX" */
#define EXT_TOMB 0x5450564bu	/* "KVPT" */
#define EXT_VERSION 1
#define EXT_HDR_SIZE 64

struct ext_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t flags;
	uint32_t key_len;
	uint64_t value_len;
	uint64_t value_checksum;
	uint64_t generation;
	uint64_t seg_uuid;
	uint64_t put_time_ns;
};

/* Checksum used for values and headers (xxh3-64). */
uint64_t ext_checksum(const void *p, size_t n);

/* Streaming checksum, for values copied in pieces. */
struct ext_csum { void *state; };
int ext_csum_init(struct ext_csum *c);
void ext_csum_update(struct ext_csum *c, const void *p, size_t n);
uint64_t ext_csum_final(struct ext_csum *c);	/* also frees the state */

/* Bytes an extent of this key/value takes, before alignment. */
static inline uint64_t ext_size(uint32_t key_len, uint64_t value_len)
{
	return EXT_HDR_SIZE + (uint64_t)key_len + value_len;
}

/* Writes header + key at dst (EXT_HDR_SIZE + key_len bytes); the caller
 * places the value at dst + EXT_HDR_SIZE + key_len. h->magic/version are set
 * by this function. */
void ext_encode(void *dst, const struct ext_hdr *h, const void *key);

/* Copies n bytes from src to dst and feeds the copied bytes (read back from
 * dst while they are still in cache, 64 KiB at a time) to c: one pass over
 * memory instead of two. Verifies what the caller actually received. */
void ext_copy_csum(void *dst, const void *src, size_t n, struct ext_csum *c);
/* One-shot form: copies and returns the xxh3-64 of the bytes copied (equal
 * to ext_checksum(dst, n)). */
uint64_t ext_copy_checksum(void *dst, const void *src, size_t n);
/* The same with non-temporal stores where the CPU has them, for a dst this
 * CPU will not read next (a segment being written, a batch larger than the
 * cache): no read-for-ownership of dst, no cache pollution. The copied
 * bytes are visible to other CPUs before the call returns. */
void ext_copy_csum_nt(void *dst, const void *src, size_t n, struct ext_csum *c);
uint64_t ext_copy_checksum_nt(void *dst, const void *src, size_t n);

/* Decodes a header from at most avail bytes at src: 0, or -EINVAL (bad
 * magic/version/reserved/key_len/checksum), -ENOENT (tombstone; *h still
 * filled), -ERANGE (lengths exceed avail or max_value; max_value 0 = no
 * limit). *key points into src. The header checksum is computed with the
 * live magic in bytes 0..3, so a tombstone still proves its header intact. */
int ext_decode(const void *src, uint64_t avail, uint64_t max_value,
	       struct ext_hdr *h, const uint8_t **key);

/* Full check of a decoded extent at src: value checksum matches. */
bool ext_verify(const void *src, const struct ext_hdr *h);

/* Marks the extent at dst tombstoned: only the magic changes, so a scan can
 * still tell (and count) a tombstone; it never trusts a tombstone's length,
 * since the range may already hold newer extents. */
void ext_tombstone(void *dst);

struct ext_found {
	uint64_t off;		/* offset of the header from the scan base */
	uint64_t alloc_len;	/* ext_size rounded up to the alignment */
	struct ext_hdr h;
	const uint8_t *key;	/* points into the scanned memory */
	bool verified;		/* the value checksum was computed */
	bool checksum_ok;	/* ... and matched */
};

/* Walks [base+start, base+end) at the given alignment and calls cb for every
 * complete live extent whose seg_uuid matches (0 = any). Extents with a bad
 * value checksum are reported with checksum_ok = false only if
 * report_bad is set. cb returns 0 to continue, non-zero to stop (returned). */
int ext_scan(const void *base, uint64_t start, uint64_t end, uint32_t align,
	     uint64_t seg_uuid, uint64_t max_value, bool report_bad,
	     int (*cb)(const struct ext_found *f, void *arg), void *arg);

/* What a scan saw, for listings and recovery logs. */
struct ext_scan_stats {
	uint64_t live;		/* extents reported (good or bad checksum) */
	uint64_t live_bytes;	/* sum of their alloc_len */
	uint64_t value_bytes;	/* sum of their value_len */
	uint64_t bad_checksum;	/* live headers whose value checksum failed */
	uint64_t tombstones;	/* tombstoned headers with a valid checksum */
	uint64_t foreign;	/* valid headers of another seg_uuid (skipped) */
	/* map-driven scans (segmap.h) */
	uint64_t verified;	/* values whose checksum was computed */
	uint64_t marks;		/* non-zero map bytes looked at */
	uint64_t stale_marks;	/* of those, vouching for nothing */
	uint64_t conflicts;	/* committed extents starting inside another */
	uint64_t map_bytes;	/* map bytes read (the rest were holes) */
};

/* ext_scan with counters (st may be NULL; it is zeroed first). verify =
 * false skips the value checksums: checksum_ok is then false for every
 * extent, and a live header's length is trusted to jump over its value. */
int ext_scan_ex(const void *base, uint64_t start, uint64_t end, uint32_t align,
		uint64_t seg_uuid, uint64_t max_value, bool report_bad, bool verify,
		int (*cb)(const struct ext_found *f, void *arg), void *arg,
		struct ext_scan_stats *st);

#endif

/* segment: one node's share of the pool, a file in /dev/shm mapped
 * MAP_SHARED. Owns the file's lifecycle (create/open/size check, mmap, NUMA
 * bind, hugepage, reservation and populate options), the 4 KiB segment
 * header at offset 0 (magic, version, size, uuid, name, alignment, owner)
 * and, from format 2 on, where the commit map (segmap.h) and the data area
 * lie. The node creates it; clients on the same host open it read-write
 * (put) and map it. No locks: the master's allocation decides who writes
 * where.
 */
#ifndef KVP_SEGMENT_H
#define KVP_SEGMENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define SEG_MAGIC 0x4753564bu	/* "KVSG" */
#define SEG_VERSION 2		/* written by segment_open */
#define SEG_VERSION_MIN 1	/* still read: no commit map, scanned page by page */
/* Format 1's data offset, the segment header's size, and the lowest offset
 * any extent can have in either format. */
#define SEG_DATA_OFF 4096
/* Format 2: the commit map follows the header, one byte per 4 KiB of file. */
#define SEG_MAP_OFF 4096
#define SEG_MAP_SHIFT 12

struct segment {
	char path[256];		/* /dev/shm/<name> */
	int fd;
	void *base;		/* mapping of the whole file */
	uint64_t size;		/* file size (header included) */
	uint64_t uuid;		/* random, fixed at creation */
	uint32_t align;
	dev_t dev;		/* st_dev/st_ino identify the file across processes */
	ino_t ino;
	bool created;		/* this open created the file */
	bool writable;		/* mapped PROT_WRITE (segment_open; attach as asked) */
	uint32_t version;	/* format of the file (1 or 2) */
	uint64_t data_off;	/* first byte extents may use */
	uint8_t *map;		/* commit map (format 2), NULL for format 1 */
	uint64_t map_len;	/* bytes of map: size >> SEG_MAP_SHIFT */
	uint64_t reserved;	/* bytes from 0 known to be fallocated */
};

/* How segment_open commits the file's memory. */
enum seg_reserve {
	/* posix_fallocate of the whole file before returning: tmpfs holds the
	 * pages, a full file system fails here and never as SIGBUS later;
	 * ~1 s per 4 GiB on a small VM. */
	SEG_RESERVE_UPFRONT = 0,
	/* Sparse at return; the caller reserves with segment_reserve_step()
	 * when it likes (the node: in the background once it serves). */
	SEG_RESERVE_LATER,
	/* Sparse: pages are committed as they are written. */
	SEG_RESERVE_NONE,
};

struct segment_opts {
	const char *name;	/* file name under /dev/shm, or an absolute path */
	uint64_t size;		/* bytes, header included; a multiple of 4096 */
	uint32_t align;		/* extent alignment, power of two >= 64 */
	int mode;		/* 0600 default; 0660 with a group */
	gid_t gid;		/* (gid_t)-1: keep */
	bool populate;		/* fault every page in (implies SEG_RESERVE_UPFRONT) */
	bool hugepages;		/* MADV_HUGEPAGE (implies populate, see segment.c) */
	int numa_node;		/* -1: no binding */
	enum seg_reserve reserve;
	/* The owner removes the file when it exits (an embedded store, a node
	 * with remove_segment_on_exit): if it dies instead, the file is an
	 * orphan that the next kvpool process on the host may reap (orphan.h).
	 * Kept files (not ephemeral) wait for their owner's restart. */
	bool ephemeral;
	const char *owner;	/* shown by kvpool scan; NULL: the program's name */
};

/* Opens or creates the segment. An existing file with a valid header and
 * the same size and alignment is reused (its extents survive; a format 1
 * file stays format 1); a file whose header is invalid or whose size
 * differs is an error unless reset is set, in which case it is re-created
 * (a valid matching file is kept even with reset). A file larger than the
 * file system's free space fails here with a message naming how much is
 * free (errbuf); o->reserve says whether the pages are also fallocated now.
 * Reads no page of the data area or the map. The file is flock()ed while
 * open: a second segment_open of it fails with -EBUSY. seg->created tells
 * whether the file was (re-)created, i.e. holds nothing to recover. The
 * header records this process as the owner (pid, start time, o->ephemeral). */
int segment_open(struct segment *seg, const struct segment_opts *o, bool reset,
		 char *errbuf, size_t errlen);
/* Maps an existing segment file created by a node (clients, kvpool scan);
 * writable selects PROT_WRITE. Checks the header. */
int segment_attach(struct segment *seg, const char *path, bool writable,
		   char *errbuf, size_t errlen);
void segment_close(struct segment *seg);
/* Removes the file too. */
int segment_unlink(struct segment *seg);
/* Path of a segment name ("/dev/shm/<name>" unless name is absolute). */
void segment_path(const char *name, char *out, size_t len);

/* fallocates up to len bytes from seg->reserved on (SEG_RESERVE_LATER, a
 * chunk at a time so a caller can stop between calls): 0 and
 * seg->reserved advanced, 1 when the whole file is reserved, or a negative
 * errno with a message (-ENOSPC: the file system filled meanwhile; the
 * rest stays sparse). Marks the header once the whole file is reserved, so
 * local writers stop prefaulting (segment_prefault). Any thread; one
 * caller at a time. */
int segment_reserve_step(struct segment *seg, uint64_t len, char *errbuf, size_t errlen);
/* Marks the mapped segment gone (SEG_S_GONE) before its file is removed;
 * segment_unlink does it. A format 1 segment has no state word, a
 * read-only mapping cannot write it: no-op. */
void segment_mark_gone(const struct segment *seg);
/* True once SEG_S_GONE is set in the mapped segment's state word. */
bool segment_is_gone(const struct segment *seg);
/* True when the file is known to be fully fallocated (by its owner). */
bool segment_is_reserved(const struct segment *seg);
/* Faults [off, off+len) in for writing through this process's mapping,
 * so that a full tmpfs shows as -EFAULT/-ENOMEM here instead of SIGBUS in
 * the memcpy that follows. 0 when done or not needed (reserved file, old
 * kernel). */
int segment_prefault(const struct segment *seg, uint64_t off, uint64_t len);
/* Fills this process's page tables for [off, off + len) of a range the
 * file holds (a written extent) with one madvise instead of a fault per
 * few pages on first touch: pages a node wrote after this process mapped
 * the file are not in its tables yet. A hint: errors are ignored. */
void segment_populate_range(const struct segment *seg, uint64_t off, uint64_t len, bool writable);
/* Which SEG_FILL_CHUNK pieces of one mapping have had their page tables
 * filled (segment_fill): one bit each, a hint (a page unmapped since is
 * faulted in by the access). A process that maps a segment fills a chunk
 * the first time it moves an extent there, so attaching costs no page
 * table work (filling all of a 1 GiB segment took 50 ms, and as much again
 * to tear down at exit: most of a one-shot CLI call) and a long-lived
 * client still takes no fault per page inside its copies. */
#define SEG_FILL_SHIFT 16
#define SEG_FILL_CHUNK (1ull << SEG_FILL_SHIFT)
/* A map for seg (all chunks unfilled); NULL when out of memory, which
 * segment_fill takes as "fill every time". Free it with free(). */
_Atomic uint64_t *segment_fill_map(const struct segment *seg);
/* Fills the page tables of the chunks of [off, off + len) that filled
 * does not mark yet (one madvise per run of them), for writing if
 * writable, and marks them; returns the bytes it asked the kernel for (0
 * when all were filled). Any thread. */
uint64_t segment_fill(const struct segment *seg, _Atomic uint64_t *filled, uint64_t off,
		      uint64_t len, bool writable);

/* The segment header (first 4 KiB of the file; fields little-endian):
 *    0 u32 magic SEG_MAGIC      4 u32 version (1 or 2)
 *    8 u64 size (whole file)   16 u64 uuid (random, never 0)
 *   24 u32 align               28 u32 4096 (format 1: the data offset)
 *   32 u64 created (ns since the epoch, CLOCK_REALTIME)
 *   40 char name[SEG_NAME_MAX] (NUL-terminated, NUL-padded)
 *  248 u64 header checksum (xxh3-64 of bytes 0..247)
 * Format 2 adds a block with its own checksum (rewritten at every open):
 *  256 u64 data_off (a multiple of 4096 and of align, past the map)
 *  264 u64 map_off (SEG_MAP_OFF)  272 u64 map_len (size >> SEG_MAP_SHIFT)
 *  280 u32 map_shift (12)         284 u32 flags (SEG_F_*)
 *  288 u32 owner pid              292 u32 reserved (0)
 *  296 u64 owner start time (clock ticks after boot, /proc/PID/stat 22)
 *  304 char owner[16] (NUL-padded program name: "kvpool-node", "python3")
 *  320..503 zero                  504 u64 xxh3-64 of bytes 256..503
 *  512 u32 state (SEG_S_*; outside any checksum; RESERVED advisory, GONE
 *      set once by whoever removes an ephemeral segment, never cleared)
 * The rest of the first 4 KiB is zero. */
#define SEG_NAME_MAX 208
#define SEG_HDR_BYTES 256
#define SEG_HDR2_BYTES 512
#define SEG_STATE_OFF SEG_HDR2_BYTES	/* the u32 state word */
#define SEG_OWNER_MAX 16
#define SEG_F_EPHEMERAL 1u	/* the owner removes the file when it exits */
#define SEG_S_RESERVED 1u	/* every page fallocated: writes cannot SIGBUS */
#define SEG_S_GONE 2u		/* being removed with its objects (set before the unlink): a
				 * reader that still maps it must not serve from it */

struct segment_info {
	uint32_t version;
	uint32_t align;
	uint64_t size;
	uint64_t uuid;
	uint64_t created_ns;
	char name[SEG_NAME_MAX];
	/* format 2 (format 1: data_off 4096, no map, no owner) */
	uint64_t data_off;
	uint64_t map_off, map_len;
	uint32_t flags;
	uint32_t owner_pid;
	uint64_t owner_start;
	char owner[SEG_OWNER_MAX];
};

/* Where format 2 puts the data of a size-byte file with this alignment:
 * past the header and the map, aligned to max(align, 4096). */
uint64_t segment_data_off(uint64_t size, uint32_t align);

/* Checks a segment header of n bytes at p (untrusted: from a file; format
 * 2 needs SEG_HDR2_BYTES). 0 and *info filled (info may be NULL), or
 * -EINVAL (not a segment, bad checksum, impossible field) /
 * -EPROTONOSUPPORT (other version) with a message. */
int segment_header_check(const void *p, size_t n, struct segment_info *info,
			 char *errbuf, size_t errlen);
/* Writes a fresh header for *info (its version decides the format) into
 * the 4096 bytes at p. */
void segment_header_write(void *p, const struct segment_info *info);
/* Start time of a process (clock ticks after boot, /proc/PID/stat field
 * 22), 0 if it does not exist. With the pid it names a process for good. */
uint64_t segment_proc_start(pid_t pid);

#endif

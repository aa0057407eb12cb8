/* segment: one node's share of the pool, a file in /dev/shm mapped
 * MAP_SHARED. Owns the file's lifecycle (create/open/size check, mmap, NUMA
 * bind, hugepage and populate options) and the 4 KiB segment header at offset
 * 0 (magic, version, size, uuid, name, alignment). Extents start at
 * SEG_DATA_OFF. The node creates it; clients on the same host open it
 * read-write (put) and map it. No locks: the master's allocation decides who
 * writes where.
 */
#ifndef KVP_SEGMENT_H
#define KVP_SEGMENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define SEG_MAGIC 0x4753564bu	/* "KVSG" */
#define SEG_VERSION 1
#define SEG_DATA_OFF 4096

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
};

struct segment_opts {
	const char *name;	/* file name under /dev/shm, or an absolute path */
	uint64_t size;		/* bytes, header included; a multiple of 4096 */
	uint32_t align;		/* extent alignment, power of two >= 64 */
	int mode;		/* 0600 default; 0660 with a group */
	gid_t gid;		/* (gid_t)-1: keep */
	bool populate;		/* MAP_POPULATE */
	bool hugepages;		/* MADV_HUGEPAGE */
	int numa_node;		/* -1: no binding */
};

/* Opens or creates the segment. An existing file with a valid header and
 * the same size and alignment is reused (its extents survive); a file whose
 * header is invalid or whose size differs is an error unless reset is set,
 * in which case it is re-created (a valid matching file is kept even with
 * reset). Space is reserved with fallocate so a full tmpfs fails here with a
 * message naming how much is free (errbuf). The file is flock()ed while
 * open: a second segment_open of it fails with -EBUSY. seg->created tells
 * whether the file was (re-)created, i.e. holds nothing to recover. */
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

/* The segment header (first 4 KiB of the file; fields little-endian):
 *    0 u32 magic SEG_MAGIC      4 u32 version
 *    8 u64 size (whole file)   16 u64 uuid (random, never 0)
 *   24 u32 align               28 u32 data_off (SEG_DATA_OFF)
 *   32 u64 created (ns since the epoch, CLOCK_REALTIME)
 *   40 char name[SEG_NAME_MAX] (NUL-terminated, NUL-padded)
 *  248 u64 header checksum (xxh3-64 of bytes 0..247); the rest is zero. */
#define SEG_NAME_MAX 208
#define SEG_HDR_BYTES 256

struct segment_info {
	uint32_t version;
	uint32_t align;
	uint64_t size;
	uint64_t uuid;
	uint64_t created_ns;
	char name[SEG_NAME_MAX];
};

/* Checks a segment header of n bytes at p (untrusted: from a file). 0 and
 * *info filled (info may be NULL), or -EINVAL (not a segment, bad checksum,
 * impossible field) / -EPROTONOSUPPORT (other version) with a message. */
int segment_header_check(const void *p, size_t n, struct segment_info *info,
			 char *errbuf, size_t errlen);
/* Writes a fresh header for *info into the 4096 bytes at p. */
void segment_header_write(void *p, const struct segment_info *info);

#endif

/* kvfs_fh: open files of the view — the handle a FUSE open or create
 * returns, the value a read handle fetches (shared by the handles of the
 * same generation) and the buffer a write handle fills until close. Any
 * libfuse worker thread; a handle's own lock guards its blob fetch and
 * write buffer, fs->lock its users count and the blob references.
 */
#ifndef KVP_KVFS_FH_H
#define KVP_KVFS_FH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvfs_node.h"

/* One value, fetched once and shared by the handles that opened the same
 * generation; immutable after it is published. Refcounted under fs->lock. */
struct kvfs_blob {
	unsigned refs;			/* open handles */
	uint64_t generation;
	size_t len;
	size_t maplen;			/* mmap'd (huge pages) when non-zero */
	char *data;
};

/* An empty blob of len bytes to fill, refs 0; NULL when out of memory. */
struct kvfs_blob *kvfs_blob_new(size_t len);
void kvfs_blob_free(struct kvfs_blob *b);
/* Drops a handle's reference to b (NULL: none), which n may point at. */
void kvfs_blob_put_locked(struct kvfs_node *n, struct kvfs_blob *b);

#define KVFS_WRITERS_MAX 8

/* A file being written: the whole value is buffered until a process that
 * wrote to it closes it, then stored at once (a new key, or a replacement
 * of the old value: readers see one or the other, never a mix). */
struct kvfs_wbuf {
	char *buf;
	size_t len, cap;
	bool done;			/* committed (or failed): no more writes */
	bool dirty;			/* differs from what the key holds */
	bool existed;			/* the key had a value at open (replace it) */
	bool excl;			/* O_EXCL create: never replace */
	bool append;			/* O_APPEND: every write goes to the end */
	bool any_close;			/* ftruncate'd: the next close stores it */
	bool closed;			/* a close stored nothing, no write since
					 * (under fs->lock) */
	int err;			/* a refused write: nothing is stored */
	uint64_t writers[KVFS_WRITERS_MAX];	/* lock owners (fd tables) that wrote */
	unsigned nwriters;		/* may exceed KVFS_WRITERS_MAX */
};

enum kvfs_fh_kind { FH_READ, FH_WRITE, FH_TEXT };

struct kvfs_fh {
	enum kvfs_fh_kind kind;
	struct kvfs_node *node;		/* holds a ref */
	/* Replies in flight that point into this handle's memory: the
	 * kernel may send RELEASE as soon as an async read's reply is
	 * copied, before fuse_reply_data has returned here. Under fs->lock. */
	unsigned users;
	bool released;
	pthread_mutex_t lock;		/* blob fetch / write buffer */
	char *key;			/* READ: the key open read (a rename may re-key the node) */
	uint64_t version;		/* READ: the node's version at open */
	bool direct;			/* READ: opened during a rewrite: direct I/O
					 * of the stored value, any version */
	uint64_t size, generation, checksum;	/* READ: what open saw */
	const uint8_t *lhdr, *lval;	/* READ: replica in a local segment */
	struct kvfs_blob *blob;		/* READ: filled by the first read */
	char *text;			/* TEXT */
	size_t textlen;
	struct kvfs_wbuf w;		/* WRITE */
};

/* A handle of n; it owns a reference the caller holds on n (refs). */
struct kvfs_fh *kvfs_fh_new(enum kvfs_fh_kind kind, struct kvfs_node *n);
/* A blob that takes ownership of a malloc'd buffer (refs 1); NULL. */
struct kvfs_blob *kvfs_blob_wrap(char *data, size_t len);
/* Frees a handle that was never given to the kernel, leaving its node
 * reference to the caller. */
void kvfs_fh_discard(struct kvfs_fh *fh);
/* Frees fh with its blob reference, buffers and node reference. */
void kvfs_fh_free(struct kvfs *fs, struct kvfs_fh *fh);
/* A reply in flight points into fh: release frees it only after unuse. */
void kvfs_fh_use(struct kvfs *fs, struct kvfs_fh *fh);
void kvfs_fh_unuse(struct kvfs *fs, struct kvfs_fh *fh);

#endif

/* kvfs_fh: open file handles and the values read handles share
 * (kvfs_fh.h).
 */
#include <stdlib.h>
#include <sys/mman.h>

#include "kvfs_fh.h"

/* Values of 2 MiB and more live in their own mapping with transparent
 * huge pages: a 64 MiB value then costs 32 page faults, not 16384, and the
 * kernel pins fewer pages when it copies a reply out of it. */
#define BLOB_MAP_MIN (2u << 20)

struct kvfs_blob *kvfs_blob_new(size_t len)
{
	struct kvfs_blob *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->len = len;
	if (len >= BLOB_MAP_MIN) {
		b->maplen = (len + BLOB_MAP_MIN - 1) & ~(size_t)(BLOB_MAP_MIN - 1);
		b->data = mmap(NULL, b->maplen, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (b->data == MAP_FAILED) {
			free(b);
			return NULL;
		}
		madvise(b->data, b->maplen, MADV_HUGEPAGE);
	} else {
		b->data = malloc(len ? len : 1);
		if (!b->data) {
			free(b);
			return NULL;
		}
	}
	return b;
}

struct kvfs_blob *kvfs_blob_wrap(char *data, size_t len)
{
	struct kvfs_blob *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->data = data;
	b->len = len;
	b->refs = 1;
	return b;
}

void kvfs_blob_free(struct kvfs_blob *b)
{
	if (b->maplen)
		munmap(b->data, b->maplen);
	else
		free(b->data);
	free(b);
}

/* Handles hold the references; the node only points at the latest value
 * while some handle has it, so nothing stays cached after the last close
 * (the kernel's page cache is the cache). */
void kvfs_blob_put_locked(struct kvfs_node *n, struct kvfs_blob *b)
{
	if (b && --b->refs == 0) {
		if (n && n->blob == b)
			n->blob = NULL;
		kvfs_blob_free(b);
	}
}

struct kvfs_fh *kvfs_fh_new(enum kvfs_fh_kind kind, struct kvfs_node *n)
{
	struct kvfs_fh *fh = calloc(1, sizeof(*fh));

	if (!fh)
		return NULL;
	fh->kind = kind;
	fh->node = n;
	pthread_mutex_init(&fh->lock, NULL);
	return fh;
}

void kvfs_fh_discard(struct kvfs_fh *fh)
{
	free(fh->text);
	free(fh->key);
	free(fh->w.buf);
	pthread_mutex_destroy(&fh->lock);
	free(fh);
}

void kvfs_fh_free(struct kvfs *fs, struct kvfs_fh *fh)
{
	pthread_mutex_lock(&fs->lock);
	kvfs_blob_put_locked(fh->node, fh->blob);
	pthread_mutex_unlock(&fs->lock);
	free(fh->text);
	free(fh->key);
	free(fh->w.buf);
	pthread_mutex_destroy(&fh->lock);
	kvfs_node_unref(fs, fh->node);
	free(fh);
}

void kvfs_fh_use(struct kvfs *fs, struct kvfs_fh *fh)
{
	pthread_mutex_lock(&fs->lock);
	fh->users++;
	pthread_mutex_unlock(&fs->lock);
}

void kvfs_fh_unuse(struct kvfs *fs, struct kvfs_fh *fh)
{
	bool last;

	pthread_mutex_lock(&fs->lock);
	last = --fh->users == 0 && fh->released;
	pthread_mutex_unlock(&fs->lock);
	if (last)
		kvfs_fh_free(fs, fh);
}

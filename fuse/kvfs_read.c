/* kvfs_read: open and read (kvfs_read.h). Open checks the value with
 * kvp_stat and looks for a replica on this host; reads copy ranges from
 * that mapping, else from the value fetched once for the generation open
 * saw, so a read never mixes two generations. Reads fill the kernel's
 * page cache (shared mmap works); a node's version says which value the
 * cached pages hold (kvfs_node.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs_ctl.h"
#include "kvfs_fh.h"
#include "kvfs_local.h"
#include "kvfs_read.h"
#include "kvfs_uring.h"
#include "kvfs_write.h"

/* Local values from this size on are read by direct I/O (measured with
 * tests/bench/fuse_bench.sh: cold 64 MiB reads 0.73x tmpfs direct, 0.42x
 * through the page cache; warm 1 MiB reads 0.68x direct, 0.97x cached). */
#define KVFS_DIRECT_MIN (4u << 20)

static int open_text(struct kvfs *fs, struct kvfs_node *n, struct kvfs_fh *fh)
{
	switch (n->kind) {
	case KN_CTL_STATS: return kvfs_ctl_stats(fs, &fh->text, &fh->textlen);
	case KN_CTL_INFO: return kvfs_ctl_node_info(fs, n->raw, &fh->text, &fh->textlen);
	case KN_CTL_EXTENTS: return kvfs_ctl_node_extents(fs, n->raw, &fh->text, &fh->textlen);
	case KN_CTL_SEGMENTS: return kvfs_ctl_segments(fs, &fh->text, &fh->textlen);
	default: return -EISDIR;
	}
}

/* A read handle of a file this view holds in memory: an empty file, or a
 * closed one whose put is queued (fs->lock held). NULL: not such a file. */
static struct kvfs_fh *open_mem_locked(struct kvfs_node *n, int *err)
{
	struct kvfs_fh *fh;

	if (!n->memdir && !n->queued)
		return NULL;
	fh = kvfs_fh_new(FH_READ, n);
	if (!fh) {
		*err = ENOMEM;
		return NULL;
	}
	fh->version = n->version;
	if (n->queued) {
		fh->blob = n->queued;
		fh->blob->refs++;
		fh->size = fh->blob->len;
	}
	return fh;
}

void kvfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_node *n = kvfs_node_ref(fs, ino);
	struct kvfs_fh *fh = NULL;
	struct kvp_stat st;
	bool replacing = false;
	uint64_t version;
	struct kvp *k;
	int rc = 0, e = 0;	/* rc: the reply's errno; e: a KVP_E* code */

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (kvfs_is_dir_kind(n->kind)) {
		rc = EISDIR;
		goto out_err;
	}
	if (n->kind != KN_FILE) {
		if ((fi->flags & O_ACCMODE) != O_RDONLY) {
			rc = EACCES;
			goto out_err;
		}
		fh = kvfs_fh_new(FH_TEXT, n);
		if (!fh) {
			rc = ENOMEM;
			goto out_err;
		}
		rc = -open_text(fs, n, fh);	/* 0 or -errno */
		if (rc)
			goto out_err;
		/* generated now, size unknown to stat: bypass the page cache */
		fi->direct_io = 1;
		fi->noflush = 1;	/* nothing to store at close (FOPEN_NOFLUSH) */
		fi->fh = (uintptr_t)fh;
		fuse_reply_open(req, fi);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		kvfs_open_write(req, fs, n, fi);	/* takes the reference */
		return;
	}
	/* A read handle stores nothing at close: the kernel need not send
	 * flush (FOPEN_NOFLUSH, Linux 5.16+), one request fewer per open. */
	fi->noflush = 1;
	kvfs_pending_settle(fs, n);
	pthread_mutex_lock(&fs->lock);
	/* being written: a new file is not there yet; a replaced one reads
	 * its stored value until the writer's close replaces it */
	if (n->pending && !n->pending->existed)
		rc = EBUSY;
	else if (!n->pending)
		fh = open_mem_locked(n, &rc);
	replacing = n->pending != NULL;
	pthread_mutex_unlock(&fs->lock);
	if (rc)
		goto out_err;
	if (fh) {
		fi->fh = (uintptr_t)fh;	/* no keep_cache: the value is new */
		fuse_reply_open(req, fi);
		return;
	}
	fh = kvfs_fh_new(FH_READ, n);
	if (!fh) {
		rc = ENOMEM;
		goto out_err;
	}
	pthread_mutex_lock(&fs->lock);
	fh->key = strdup(n->raw);
	pthread_mutex_unlock(&fs->lock);
	if (!fh->key) {
		rc = ENOMEM;
		goto out_err;
	}
	k = kvfs_kvp(fs, &e);
	if (k)
		e = kvp_stat(k, fh->key, &st);
	if (e < 0) {
		rc = kvp_to_errno(e);
		goto out_err;
	}
	fh->size = st.size;
	fh->generation = st.generation;
	fh->checksum = st.checksum;
	if (kvfs_local_find(fs, fh->key, strlen(fh->key), &st, &fh->lhdr) == 0)
		fh->lval = kvfs_local_value(fh->lhdr);
	pthread_mutex_lock(&fs->lock);
	if (!kvfs_node_from_stat_locked(fs, n, &st)) {
		/* another client replaced the key since the kernel got this
		 * inode: ESTALE makes the kernel look the name up again and
		 * retry the open (once) on the new inode */
		kvfs_node_retire_locked(fs, n);
		pthread_mutex_unlock(&fs->lock);
		rc = ESTALE;
		goto out_err;
	}
	version = n->version;
	fh->version = n->version;
	/* the pages the kernel holds are of this value unless its version
	 * changed: keep them (an invalidation still queued: let open drop them) */
	if (version == n->version && !n->inval_queued)
		fi->keep_cache = 1;
	pthread_mutex_unlock(&fs->lock);
	/* A large value in a segment on this host: reads go straight from it
	 * to the reader (direct I/O), no page-cache copy of memory that is
	 * there already — where the kernel lets such a file be mapped
	 * MAP_SHARED (kvfs_io.h); its mapped pages are filled from the segment
	 * then. Other values go through the page cache: warm reads (and the
	 * end of file) are the kernel's alone, which is what small values
	 * gain most from; a second copy of them costs little memory.
	 * While a handle of this mount rewrites the file, the kernel's size of
	 * the inode is the writer's: a new reader reads the stored value whole
	 * by direct I/O, past that size, and caches nothing. */
	if (fh->lhdr && fs->dio_mmap && fh->size >= KVFS_DIRECT_MIN) {
		fi->direct_io = 1;
		fi->keep_cache = 0;
	}
	if (replacing) {
		fi->direct_io = 1;
		fi->keep_cache = 0;
		fh->direct = true;
	}
	fi->fh = (uintptr_t)fh;
	fuse_reply_open(req, fi);
	return;
out_err:
	if (fh)
		kvfs_fh_discard(fh);
	kvfs_node_unref(fs, n);
	fuse_reply_err(req, rc);
}

/* The value of the generation fh opened, fetched once and shared. */
static int fh_blob(struct kvfs *fs, struct kvfs_fh *fh)
{
	struct kvfs_node *n = fh->node;
	struct kvfs_blob *b;
	struct kvp *k;
	int64_t got;
	int e = 0;

	if (fh->blob)
		return 0;
	pthread_mutex_lock(&fs->lock);
	b = n->blob;
	if (b && b->generation == fh->generation) {
		b->refs++;
		fh->blob = b;
	}
	pthread_mutex_unlock(&fs->lock);
	if (fh->blob)
		return 0;
	k = kvfs_kvp(fs, &e);
	if (!k)
		return kvp_to_errno(e);
	b = kvfs_blob_new(fh->size);
	if (!b)
		return ENOMEM;
	/* kvp_get_into checks the bytes against the replica's header; the
	 * generation must still be the one open saw, or the object was
	 * removed (and maybe put again) in between: never show a mix.
	 * Generations only grow, so equal before and after means the get
	 * read that generation. */
	got = kvp_get_into(k, fh->key, b->data, fh->size);
	if (got >= 0) {
		struct kvp_stat st;
		int rc = kvp_stat(k, fh->key, &st);

		if (rc < 0)
			got = rc;
		else if ((uint64_t)got != fh->size || st.generation != fh->generation ||
			 st.size != fh->size)
			got = KVP_ESTALE;
	}
	if (got < 0) {
		kvfs_blob_free(b);
		if (got == KVP_ETOOBIG || got == KVP_ESTALE)
			return EIO;
		return kvp_to_errno((int)got);
	}
	b->generation = fh->generation;
	b->refs = 1;
	pthread_mutex_lock(&fs->lock);
	if (!n->blob || n->blob->generation < b->generation)
		n->blob = b;
	fh->blob = b;
	pthread_mutex_unlock(&fs->lock);
	return 0;
}

static void reply_slice(fuse_req_t req, const char *data, size_t len, size_t size, off_t off)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);

	if (off < 0 || (uint64_t)off >= len) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	bv.buf[0].mem = (char *)data + off;
	bv.buf[0].size = len - (size_t)off < size ? len - (size_t)off : size;
	fuse_reply_data(req, &bv, FUSE_BUF_NO_SPLICE);
}

static void do_read(fuse_req_t req, struct kvfs *fs, struct kvfs_fh *fh, size_t size, off_t off)
{
	const uint8_t *lhdr;
	int rc;

	switch (fh->kind) {
	case FH_TEXT:
		reply_slice(req, fh->text, fh->textlen, size, off);
		return;
	case FH_WRITE:
		/* O_RDWR: what was written so far; after the close that
		 * stored it, the stored value (never the freed buffer) */
		pthread_mutex_lock(&fh->lock);
		rc = kvfs_wbuf_reload_locked(fs, fh);
		if (rc)
			fuse_reply_err(req, rc);
		else
			reply_slice(req, fh->w.buf, fh->w.len, size, off);
		pthread_mutex_unlock(&fh->lock);
		return;
	case FH_READ:
		/* the kernel's page cache is the inode's: only the version it
		 * holds may fill it, an older handle's bytes never mix in */
		pthread_mutex_lock(&fs->lock);
		rc = fh->direct || fh->version == fh->node->version ? 0 : EIO;
		pthread_mutex_unlock(&fs->lock);
		if (rc) {
			fuse_reply_err(req, rc);
			return;
		}
		if (fh->size == 0 && !fh->blob) {	/* an empty file */
			fuse_reply_buf(req, NULL, 0);
			return;
		}
		pthread_mutex_lock(&fh->lock);
		lhdr = fh->lhdr;
		pthread_mutex_unlock(&fh->lock);
		if (lhdr) {
			size_t len;
			void *buf;

			if (off < 0 || (uint64_t)off >= fh->size) {
				fuse_reply_buf(req, NULL, 0);
				return;
			}
			len = fh->size - (uint64_t)off < size ? (size_t)(fh->size - (uint64_t)off) : size;
			buf = kvfs_uring_buf(len);	/* the ring's payload: one copy less */
			if (!buf)
				buf = kvfs_local_bounce(len);
			if (buf && kvfs_local_copy(lhdr, fh->lval, fh->generation, buf, (uint64_t)off,
						   len) == 0) {
				fuse_reply_buf(req, buf, len);
				return;
			}
			/* evicted, demoted or removed since open: the pool
			 * knows where that generation is, if anywhere */
			pthread_mutex_lock(&fh->lock);
			fh->lhdr = NULL;
			pthread_mutex_unlock(&fh->lock);
		}
		pthread_mutex_lock(&fh->lock);
		rc = fh_blob(fs, fh);
		pthread_mutex_unlock(&fh->lock);
		if (rc) {
			fuse_reply_err(req, rc);
			return;
		}
		/* the blob is immutable and the handle holds a reference */
		reply_slice(req, fh->blob->data, fh->blob->len, size, off);
		return;
	}
}

void kvfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	       struct fuse_file_info *fi)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_fh *fh = (struct kvfs_fh *)(uintptr_t)fi->fh;

	kvfs_fh_use(fs, fh);
	do_read(req, fs, fh, size, off);
	kvfs_fh_unuse(fs, fh);
}

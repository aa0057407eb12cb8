/* kvfs_ops: the FUSE low-level operations table of the view, the
 * connection setup and statfs (kvfs_ops.h). The operations run on
 * libfuse's worker threads, any number at once.
 */
#include <string.h>
#include <sys/statvfs.h>

#include "clock.h"
#include "kvfs_attr.h"
#include "kvfs_change.h"
#include "kvfs_dir.h"
#include "kvfs_lookup.h"
#include "kvfs_name.h"
#include "kvfs_ops.h"
#include "kvfs_read.h"
#include "kvfs_rename.h"
#include "kvfs_write.h"
#include "kvfs_xattr.h"

static void kvfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct statvfs sv;
	uint64_t now = clock_now_ms(), keys, used, cap, freeb;
	bool fetch;

	pthread_mutex_lock(&fs->lock);
	fetch = now >= fs->info_until;
	pthread_mutex_unlock(&fs->lock);
	if (fetch) {
		struct kvp_info info;
		struct kvp *k;
		int e = 0, rc;

		k = kvfs_kvp(fs, &e);
		rc = k ? kvp_info(k, &info) : e;
		if (rc < 0) {
			fuse_reply_err(req, kvp_to_errno(rc));
			return;
		}
		pthread_mutex_lock(&fs->lock);
		fs->info_keys = info.keys;
		fs->info_used = info.bytes_used;
		fs->info_capacity = info.capacity;
		fs->info_until = now + 1000;
		pthread_mutex_unlock(&fs->lock);
		kvp_info_free(&info);
	}
	pthread_mutex_lock(&fs->lock);
	keys = fs->info_keys;
	used = fs->info_used;
	cap = fs->info_capacity;
	pthread_mutex_unlock(&fs->lock);
	freeb = cap > used ? cap - used : 0;
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = cap / 4096;
	sv.f_bfree = freeb / 4096;
	sv.f_bavail = fs->ro ? 0 : freeb / 4096;
	/* one object per free block is the most that could still be put */
	sv.f_files = keys + freeb / 4096;
	sv.f_ffree = freeb / 4096;
	sv.f_favail = fs->ro ? 0 : sv.f_ffree;
	sv.f_namemax = KVFS_NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

static void kvfs_init(void *userdata, struct fuse_conn_info *conn)
{
	struct kvfs *fs = userdata;

	/* 1 MiB requests: max_pages follows max_write in libfuse, and reads
	 * are cut at max_read (also passed as the mount option) */
	conn->max_write = fs->max_io;
	conn->max_read = fs->max_io;
	conn->max_readahead = fs->max_io;
	conn->time_gran = 1;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	if (conn->capable & FUSE_CAP_READDIRPLUS_AUTO)
		conn->want |= FUSE_CAP_READDIRPLUS_AUTO;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	/* O_TRUNC comes with the open, not as a separate truncate first: the
	 * old value stays readable until the close that replaces it */
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	/* a new put changes mtime and size: the kernel drops cached pages
	 * when it sees that, in addition to the generation check at open */
	if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
	/* replies come from memory (a value buffer), where writev is the
	 * one copy splice would also make */
	conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
}

const struct fuse_lowlevel_ops kvfs_ops = {
	.init = kvfs_init,
	.lookup = kvfs_lookup,
	.forget = kvfs_forget,
	.forget_multi = kvfs_forget_multi,
	.getattr = kvfs_getattr,
	.setattr = kvfs_setattr,
	.opendir = kvfs_opendir,
	.readdir = kvfs_readdir,
	.readdirplus = kvfs_readdirplus,
	.releasedir = kvfs_releasedir,
	.fsyncdir = kvfs_fsyncdir,
	.open = kvfs_open,
	.read = kvfs_read,
	.create = kvfs_create,
	.write = kvfs_write,
	.flush = kvfs_flush,
	.fsync = kvfs_fsync,
	.release = kvfs_release,
	.unlink = kvfs_unlink,
	.mkdir = kvfs_mkdir,
	.rmdir = kvfs_rmdir,
	.rename = kvfs_rename,
	.link = kvfs_link,
	.symlink = kvfs_symlink,
	.mknod = kvfs_mknod,
	.statfs = kvfs_statfs,
	.getxattr = kvfs_getxattr,
	.listxattr = kvfs_listxattr,
	.setxattr = kvfs_setxattr,
	.removexattr = kvfs_removexattr,
};

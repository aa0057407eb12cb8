/* kvfs_io: /dev/fuse I/O hooks that add FUSE_DIRECT_IO_ALLOW_MMAP to the
 * INIT reply (kvfs_io.h). The offsets are those of the kernel ABI
 * (linux/fuse.h, protocol 7.36+ with FUSE_INIT_EXT): they are checked
 * against the message lengths before anything is read or changed.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kvfs_io.h"
#include "log.h"

#define IN_HDR 40			/* struct fuse_in_header */
#define OUT_HDR 16			/* struct fuse_out_header */
#define OP_INIT 26
#define INIT_EXT (1u << 30)		/* FUSE_INIT_EXT, in flags */
#define ALLOW_MMAP_HI (1u << 4)		/* FUSE_DIRECT_IO_ALLOW_MMAP (1 << 36), in flags2 */
#define INIT_IN_FLAGS 12		/* offsets in fuse_init_in */
#define INIT_IN_FLAGS2 16
#define INIT_OUT_FLAGS 12		/* offsets in fuse_init_out */
#define INIT_OUT_FLAGS2 32

static uint32_t get32(const char *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	struct kvfs *fs = userdata;
	ssize_t res = read(fd, buf, len);
	const char *b = buf;

	if (res >= IN_HDR + INIT_IN_FLAGS2 + 4 && get32(b + 4) == OP_INIT &&
	    (get32(b + IN_HDR + INIT_IN_FLAGS) & INIT_EXT) &&
	    (get32(b + IN_HDR + INIT_IN_FLAGS2) & ALLOW_MMAP_HI)) {
		memcpy(&fs->init_unique, b + 8, sizeof(fs->init_unique));
		fs->init_offered = true;
	}
	return res;
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct kvfs *fs = userdata;

	/* libfuse sends the INIT reply as header + struct fuse_init_out */
	if (fs->init_offered && count >= 2 && iov[0].iov_len == OUT_HDR &&
	    iov[1].iov_len >= INIT_OUT_FLAGS2 + 4) {
		const char *h = iov[0].iov_base;
		char *a = iov[1].iov_base;
		uint64_t unique;

		memcpy(&unique, h + 8, sizeof(unique));
		if (unique == fs->init_unique && get32(h + 4) == 0 &&
		    (get32(a + INIT_OUT_FLAGS) & INIT_EXT)) {
			uint32_t f2 = get32(a + INIT_OUT_FLAGS2) | ALLOW_MMAP_HI;

			memcpy(a + INIT_OUT_FLAGS2, &f2, sizeof(f2));
			fs->dio_mmap = true;
			fs->init_offered = false;
			log_debug("kvfs: FUSE_DIRECT_IO_ALLOW_MMAP asked for");
		}
	}
	return writev(fd, iov, count);
}

int kvfs_io_attach(struct kvfs *fs)
{
	static const struct fuse_custom_io io = { .read = io_read, .writev = io_writev };
	int fd = fuse_session_fd(fs->se);

	/* the session keeps its mounted fd; only the I/O calls change */
	return fd < 0 ? -EBADF : fuse_session_custom_io(fs->se, &io, fd);
}

/* kvfs_io: /dev/fuse I/O hooks that add FUSE_DIRECT_IO_ALLOW_MMAP and
 * FUSE_OVER_IO_URING to the INIT reply and route the replies of ring
 * requests to kvfs_uring (kvfs_io.h). The offsets are those of the kernel ABI
 * (linux/fuse.h, protocol 7.36+ with FUSE_INIT_EXT): they are checked
 * against the message lengths before anything is read or changed.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kvfs_io.h"
#include "kvfs_uring.h"
#include "log.h"

#define IN_HDR 40			/* struct fuse_in_header */
#define OUT_HDR 16			/* struct fuse_out_header */
#define OP_INIT 26
#define INIT_EXT (1u << 30)		/* FUSE_INIT_EXT, in flags */
#define ALLOW_MMAP_HI (1u << 4)		/* FUSE_DIRECT_IO_ALLOW_MMAP (1 << 36), in flags2 */
#define INIT_IN_FLAGS 12		/* offsets in fuse_init_in */
#define INIT_IN_FLAGS2 16
#define INIT_OUT_FLAGS 12		/* offsets in fuse_init_out */
#define INIT_OUT_MAX_WRITE 20
#define INIT_OUT_MAX_PAGES 28		/* u16 */
#define INIT_OUT_FLAGS2 32
#define OVER_IO_URING_HI (1u << 9)	/* FUSE_OVER_IO_URING (1 << 41), in flags2 */

static uint32_t get32(const char *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static uint16_t get16(const char *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	struct kvfs *fs = userdata;
	ssize_t res = read(fd, buf, len);
	const char *b = buf;

	if (res >= IN_HDR + INIT_IN_FLAGS2 + 4 && get32(b + 4) == OP_INIT &&
	    (get32(b + IN_HDR + INIT_IN_FLAGS) & INIT_EXT)) {
		memcpy(&fs->init_unique, b + 8, sizeof(fs->init_unique));
		fs->init_flags2 = get32(b + IN_HDR + INIT_IN_FLAGS2);
		fs->init_seen = true;
	}
	return res;
}

/* The INIT reply's flags2, before it is written: the bits libfuse 3.14
 * cannot ask for. True when the ring is to start once it is written. */
static bool init_reply(struct kvfs *fs, char *a)
{
	uint32_t f2 = get32(a + INIT_OUT_FLAGS2);
	bool ring = false;

	if (fs->init_flags2 & ALLOW_MMAP_HI) {
		f2 |= ALLOW_MMAP_HI;
		fs->dio_mmap = true;
		log_debug("kvfs: FUSE_DIRECT_IO_ALLOW_MMAP asked for");
	}
	if (fs->uring_mode != KVFS_URING_OFF && (fs->init_flags2 & OVER_IO_URING_HI)) {
		int rc = kvfs_uring_prepare(fs, get32(a + INIT_OUT_MAX_WRITE),
					    get16(a + INIT_OUT_MAX_PAGES));

		if (rc == 0) {
			f2 |= OVER_IO_URING_HI;
			ring = true;
		} else {
			log_warn("kvfs: cannot set up FUSE over io_uring (%s); requests go "
				 "through /dev/fuse", strerror(-rc));
		}
	} else if (fs->uring_mode == KVFS_URING_ON) {
		log_err("kvfs: [fuse] io_uring = on, but the kernel does not offer FUSE over "
			"io_uring (Linux 6.14+ with CONFIG_FUSE_IO_URING, and Y in "
			"/sys/module/fuse/parameters/enable_uring); unmounting");
		fuse_session_exit(fs->se);
	} else {
		log_info("kvfs: FUSE requests go through /dev/fuse%s",
			 fs->uring_mode == KVFS_URING_OFF ? " ([fuse] io_uring = off)" :
			 " (the kernel offers no io_uring)");
	}
	memcpy(a + INIT_OUT_FLAGS2, &f2, sizeof(f2));
	return ring;
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct kvfs *fs = userdata;
	bool ring = false;
	ssize_t res;

	if (kvfs_uring_reply(fs, iov, count, &res))
		return res;
	/* libfuse sends the INIT reply as header + struct fuse_init_out */
	if (fs->init_seen && count >= 2 && iov[0].iov_len == OUT_HDR &&
	    iov[1].iov_len >= INIT_OUT_FLAGS2 + 4) {
		const char *h = iov[0].iov_base;
		char *a = iov[1].iov_base;
		uint64_t unique;

		memcpy(&unique, h + 8, sizeof(unique));
		if (unique == fs->init_unique && get32(h + 4) == 0 &&
		    (get32(a + INIT_OUT_FLAGS) & INIT_EXT)) {
			fs->init_seen = false;
			ring = init_reply(fs, a);
		}
	}
	res = writev(fd, iov, count);
	/* the kernel took the reply in the write: the connection is
	 * initialized, it accepts the ring's entries now */
	if (ring)
		kvfs_uring_go(fs, res >= 0);
	return res;
}

int kvfs_io_attach(struct kvfs *fs)
{
	static const struct fuse_custom_io io = { .read = io_read, .writev = io_writev };
	int fd = fuse_session_fd(fs->se);

	/* the session keeps its mounted fd; only the I/O calls change */
	return fd < 0 ? -EBADF : fuse_session_custom_io(fs->se, &io, fd);
}

/* t_kvfs_uring: the length checks on a request the kernel wrote into a
 * FUSE io_uring entry (fuse/kvfs_uring.c, kvfs_uring_arg0): the first
 * argument's size is what the header's len leaves after the payload, up to
 * the 128 bytes of its area; lengths that do not add up, a payload over the
 * entry's buffer, or a commit id other than the header's unique are
 * refused. The transport itself is tests/e2e/fuse_uring.sh's. */
#include <linux/fuse.h>
#include <stdint.h>
#include <string.h>

#include "kvfs_uring.h"
#include "testlib.h"

static int arg0(uint32_t len, uint64_t unique, uint32_t psz, uint64_t commit, size_t max)
{
	char in_out[128] = { 0 };
	struct fuse_in_header ih = { .len = len, .opcode = FUSE_WRITE, .unique = unique };

	memcpy(in_out, &ih, sizeof(ih));
	return kvfs_uring_arg0(in_out, psz, commit, max);
}

int main(void)
{
	const size_t max = 1 << 20;

	/* WRITE of 4096 bytes: fuse_write_in (40) in op_in, the data in the payload */
	CHECK_EQ(arg0(40 + 40 + 4096, 7, 4096, 7, max), 40);
	/* LOOKUP: an empty first argument, the name in the payload */
	CHECK_EQ(arg0(40 + 6, 9, 6, 9, max), 0);
	/* GETATTR: fuse_getattr_in (16), no payload */
	CHECK_EQ(arg0(40 + 16, 2, 0, 2, max), 16);
	/* the whole op_in area, and one byte over */
	CHECK_EQ(arg0(40 + 128 + 1, 3, 1, 3, max), 128);
	CHECK(arg0(40 + 129 + 1, 3, 1, 3, max) < 0, "a first argument over 128 bytes");
	/* the payload exactly fills the entry, and one byte over it */
	CHECK_EQ(arg0(40 + 40 + (uint32_t)max, 4, (uint32_t)max, 4, max), 40);
	CHECK(arg0(40 + 40 + (uint32_t)max + 1, 4, (uint32_t)max + 1, 4, max) < 0,
	      "a payload over the entry's buffer");
	/* len shorter than the header, or than header + payload */
	CHECK(arg0(39, 5, 0, 5, max) < 0, "len under the header");
	CHECK(arg0(40 + 10, 5, 11, 5, max) < 0, "payload over len");
	CHECK(arg0(0xffffffffu, 5, 0, 5, max) < 0, "len far over the areas");
	/* the entry's commit id is the request's unique, never 0 */
	CHECK(arg0(40 + 16, 6, 0, 8, max) < 0, "commit id is not the unique");
	CHECK(arg0(40 + 16, 0, 0, 0, max) < 0, "unique 0 (a notification)");
	return tl_done();
}

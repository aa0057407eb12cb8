/* kvfs_xattr: getxattr and listxattr of user.kvpool.* from kvp_stat;
 * setting or removing attributes is refused (kvfs_xattr.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kvfs_node.h"
#include "kvfs_xattr.h"

static const char *const xattr_names[] = {
	"user.kvpool.size", "user.kvpool.replicas", "user.kvpool.checksum",
	"user.kvpool.generation", "user.kvpool.lease_ms", "user.kvpool.pin_ms",
	"user.kvpool.put_time",
};
#define NXATTRS (sizeof(xattr_names) / sizeof(xattr_names[0]))

/* 2024-05-01T12:00:00.123456789Z */
static void fmt_time(uint64_t ns, char *buf, size_t len)
{
	time_t s = (time_t)(ns / 1000000000ull);
	struct tm tm;
	size_t l;

	if (!gmtime_r(&s, &tm) || !(l = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm))) {
		snprintf(buf, len, "-");
		return;
	}
	snprintf(buf + l, len - l, ".%09uZ", (unsigned)(ns % 1000000000ull));
}

static int xattr_value(const struct kvp_stat *st, const char *name, char *out, size_t cap)
{
	size_t o = 0;

	if (!strcmp(name, "user.kvpool.size"))
		snprintf(out, cap, "%" PRIu64, st->size);
	else if (!strcmp(name, "user.kvpool.checksum"))
		snprintf(out, cap, "%016" PRIx64, st->checksum);
	else if (!strcmp(name, "user.kvpool.generation"))
		snprintf(out, cap, "%" PRIu64, st->generation);
	else if (!strcmp(name, "user.kvpool.lease_ms"))
		snprintf(out, cap, "%" PRId64, st->lease_ms);
	else if (!strcmp(name, "user.kvpool.pin_ms"))
		snprintf(out, cap, "%" PRId64, st->pin_ms);
	else if (!strcmp(name, "user.kvpool.put_time"))
		fmt_time(st->put_time_ns, out, cap);
	else if (!strcmp(name, "user.kvpool.replicas")) {
		out[0] = 0;
		for (uint32_t i = 0; i < st->nreplicas && i < KVP_MAX_REPLICAS && o < cap; i++)
			o += (size_t)snprintf(out + o, cap - o, "%s%.*s:%s", i ? "," : "",
					      (int)sizeof(st->replicas[i].node),
					      st->replicas[i].node,
					      st->replicas[i].tier == KVP_TIER_DISK ? "disk" : "mem");
	} else
		return -ENODATA;
	return 0;
}

/* The xattr reply to a request for @size bytes: the length when size is 0,
 * ERANGE when the value does not fit, else the bytes. */
static void reply_xattr(fuse_req_t req, const char *val, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, len);
}

void kvfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_node *n;
	char val[KVP_MAX_REPLICAS * 80 + 64], key[KVP_MAX_KEY + 1];
	struct kvp_stat st;
	struct kvp *k;
	int rc, e = 0;

	/* Only user.* names exist here. ENOTSUP (not ENODATA) for the others
	 * lets ls -l, cp -a and friends learn once per file system that there
	 * are no security labels or ACLs, instead of asking for every file. */
	if (strncmp(name, "user.", 5) != 0) {
		fuse_reply_err(req, ENOTSUP);
		return;
	}
	n = kvfs_node_ref(fs, ino);
	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	pthread_mutex_lock(&fs->lock);
	rc = n->kind != KN_FILE || n->pending || n->queued || n->memdir ||
	     strncmp(name, "user.kvpool.", 12) != 0;
	snprintf(key, sizeof(key), "%s", n->raw);
	pthread_mutex_unlock(&fs->lock);
	if (rc) {
		rc = ENODATA;
		goto out_err;
	}
	k = kvfs_kvp(fs, &e);
	if (k)
		e = kvp_stat(k, key, &st);
	if (e < 0) {
		rc = kvp_to_errno(e);
		goto out_err;
	}
	if (xattr_value(&st, name, val, sizeof(val)) < 0) {
		rc = ENODATA;
		goto out_err;
	}
	kvfs_node_unref(fs, n);
	reply_xattr(req, val, strlen(val), size);
	return;
out_err:
	kvfs_node_unref(fs, n);
	fuse_reply_err(req, rc);
}

void kvfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct kvfs *fs = fuse_req_userdata(req);
	struct kvfs_node *n = kvfs_node_ref(fs, ino);
	char buf[512];
	size_t len = 0;
	bool listed;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	pthread_mutex_lock(&fs->lock);
	listed = n->kind == KN_FILE && !n->pending && !n->queued && !n->memdir;
	pthread_mutex_unlock(&fs->lock);
	if (listed) {
		for (size_t i = 0; i < NXATTRS; i++) {
			memcpy(buf + len, xattr_names[i], strlen(xattr_names[i]) + 1);
			len += strlen(xattr_names[i]) + 1;
		}
	}
	kvfs_node_unref(fs, n);
	reply_xattr(req, buf, len, size);
}

void kvfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
		   size_t size, int flags)
{
	/* the attributes describe the pool's state; nothing else is kept */
	fuse_reply_err(req, ENOTSUP);
}

void kvfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, ENOTSUP);
}

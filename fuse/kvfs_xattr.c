/* kvfs_xattr: getxattr and listxattr of user.kvpool.* from kvp_stat, and
 * user.kvpool.namespace of a top-level directory that is a namespace (from
 * kvp_namespaces); setting or removing attributes is refused (kvfs_xattr.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kvfs_node.h"
#include "kvfs_xattr.h"
#include "wire.h"

#define XATTR_NS "user.kvpool.namespace"

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

/* A directory "NAME/" at the top whose NAME may be a namespace's. */
static bool ns_dir(const char *raw, size_t len)
{
	return len >= 2 && raw[len - 1] == '/' &&
	       wire_ns_name_ok((const uint8_t *)raw, len - 1);
}

/* The fingerprint of namespace raw ("NAME/") into out: 0, -ENODATA when
 * no such namespace, or another -errno. */
static int ns_value(struct kvfs *fs, const char *raw, char *out, size_t cap)
{
	struct kvp_ns_info *v = NULL;
	size_t n = 0, len = strlen(raw) - 1;
	int e = 0, rc = -ENODATA;
	struct kvp *k = kvfs_kvp(fs, &e);

	if (k)
		e = kvp_namespaces(k, &v, &n);
	if (e < 0)
		return -kvp_to_errno(e);
	for (size_t i = 0; i < n; i++) {
		if (strlen(v[i].name) != len || memcmp(v[i].name, raw, len) != 0)
			continue;
		snprintf(out, cap, "fingerprint=%016" PRIx64 " model=%s dtype=%s page_size=%" PRIu32
			 " layout=%s tp=%" PRIu32 " keys=%" PRIu64 " bytes=%" PRIu64,
			 v[i].fingerprint, v[i].model, v[i].dtype, v[i].page_size, v[i].layout,
			 v[i].tp, v[i].keys, v[i].bytes);
		rc = 0;
		break;
	}
	kvp_free(v);
	return rc;
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
	bool nsdir = n->kind == KN_DIR && n->parent == FUSE_ROOT_ID && ns_dir(n->raw, n->rawlen);
	rc = n->kind != KN_FILE || n->pending || n->queued || n->memdir ||
	     strncmp(name, "user.kvpool.", 12) != 0;
	snprintf(key, sizeof(key), "%s", n->raw);
	pthread_mutex_unlock(&fs->lock);
	if (nsdir && !strcmp(name, XATTR_NS)) {
		char nsval[1024];
		rc = ns_value(fs, key, nsval, sizeof(nsval));
		if (rc < 0) {
			rc = -rc;
			goto out_err;
		}
		kvfs_node_unref(fs, n);
		reply_xattr(req, nsval, strlen(nsval), size);
		return;
	}
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
	char buf[512], raw[KVP_MAX_KEY + 1], val[1024];
	size_t len = 0;
	bool listed, nsdir;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	pthread_mutex_lock(&fs->lock);
	listed = n->kind == KN_FILE && !n->pending && !n->queued && !n->memdir;
	nsdir = n->kind == KN_DIR && n->parent == FUSE_ROOT_ID && ns_dir(n->raw, n->rawlen);
	snprintf(raw, sizeof(raw), "%s", n->raw);
	pthread_mutex_unlock(&fs->lock);
	if (nsdir && ns_value(fs, raw, val, sizeof(val)) == 0) {
		memcpy(buf, XATTR_NS, sizeof(XATTR_NS));
		len = sizeof(XATTR_NS);
	}
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

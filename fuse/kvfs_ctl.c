/* kvfs_ctl: the texts of the hidden control directory .kvpool/ — stats
 * (kvp_info, the figures of the master's /metrics), nodes/NODE/info and
 * nodes/NODE/extents (a read-only scan of the node's segment when it lives
 * on this host), segments (this host's segment files and their owners). Called from libfuse worker threads at open; each call
 * builds a fresh text, no shared state besides the pool handle.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs_commit.h"
#include "kvfs_ctl.h"
#include "kvfs_uring.h"
#include "scan.h"

static int info_get(struct kvfs *fs, struct kvp_info *info)
{
	struct kvp *k;
	int e = 0, rc;

	k = kvfs_kvp(fs, &e);
	rc = k ? kvp_info(k, info) : e;
	return rc < 0 ? -kvp_to_errno(rc) : 0;
}

static const struct kvp_node_info *info_node(const struct kvp_info *info, const char *node)
{
	for (size_t i = 0; i < info->nnodes; i++)
		if (!strncmp(info->nodes[i].name, node, sizeof(info->nodes[i].name)))
			return &info->nodes[i];
	return NULL;
}

/* 1.5 GiB */
static void human(uint64_t v, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double d = (double)v;
	int u = 0;

	while (d >= 1024 && u < 5) {
		d /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", d, unit[u]);
}

static double pct(uint64_t a, uint64_t b)
{
	return b ? 100.0 * (double)a / (double)b : 0.0;
}

/* Closes the memstream and hands its buffer over; -ENOMEM on failure. */
static int text_done(FILE *f, char **out, size_t *len)
{
	int bad = ferror(f);

	if (fclose(f) != 0 || bad) {
		free(*out);
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}

int kvfs_ctl_stats(struct kvfs *fs, char **out, size_t *len)
{
	struct kvfs_commit_stats cs;
	struct kvp_info info;
	uint64_t served;
	char a[32], b[32];
	FILE *f;
	int rc;

	rc = info_get(fs, &info);
	if (rc)
		return rc;
	*out = NULL;
	f = open_memstream(out, len);
	if (!f) {
		kvp_info_free(&info);
		return -ENOMEM;
	}
	human(info.bytes_used, a, sizeof(a));
	human(info.capacity, b, sizeof(b));
	fprintf(f, "master         %s\n", fs->conf.cluster.master);
	fprintf(f, "keys           %" PRIu64 "\n", info.keys);
	fprintf(f, "bytes_used     %" PRIu64 " (%s)\n", info.bytes_used, a);
	fprintf(f, "capacity       %" PRIu64 " (%s)\n", info.capacity, b);
	fprintf(f, "used           %.1f%%\n", pct(info.bytes_used, info.capacity));
	fprintf(f, "evictions      %" PRIu64 "\n", info.evictions);
	fprintf(f, "demotions      %" PRIu64 "\n", info.demotions);
	fprintf(f, "leases         %" PRIu64 "\n", info.leases);
	fprintf(f, "nodes          %zu\n", info.nnodes);
	/* this mount's puts behind closes (write-behind) */
	kvfs_commit_stats(fs, &cs);
	fprintf(f, "view_queued    %" PRIu64 "\n", cs.queued);
	fprintf(f, "view_stored    %" PRIu64 " (in %" PRIu64 " batches)\n", cs.stored, cs.batches);
	fprintf(f, "view_failed    %" PRIu64 "\n", cs.failed);
	/* local reads: page tables filled at open, once per 64 KiB of a mapping */
	fprintf(f, "view_local_filled %" PRIu64 "\n",
		atomic_load_explicit(&fs->local_filled, memory_order_relaxed));
	if (kvfs_uring_served(fs, &served))	/* the requests' transport */
		fprintf(f, "view_transport io_uring (%" PRIu64 " requests)\n", served);
	else
		fprintf(f, "view_transport /dev/fuse\n");
	for (size_t i = 0; i < info.nnodes; i++) {
		const struct kvp_node_info *n = &info.nodes[i];

		human(n->used, a, sizeof(a));
		human(n->capacity, b, sizeof(b));
		fprintf(f, "node %-20.64s segment %u  used %s of %s (%.1f%%)  objects %" PRIu64 "%s\n",
			n->name, n->segment_id, a, b, pct(n->used, n->capacity), n->objects,
			n->draining ? "  draining" : "");
	}
	kvp_info_free(&info);
	return text_done(f, out, len);
}

int kvfs_ctl_node_names(struct kvfs *fs, char ***names, size_t *n)
{
	struct kvp_info info;
	int rc;

	*names = NULL;
	*n = 0;
	rc = info_get(fs, &info);
	if (rc)
		return rc;
	*names = calloc(info.nnodes ? info.nnodes : 1, sizeof(**names));
	if (!*names) {
		kvp_info_free(&info);
		return -ENOMEM;
	}
	for (size_t i = 0; i < info.nnodes; i++) {
		(*names)[*n] = strndup(info.nodes[i].name, sizeof(info.nodes[i].name));
		if (!(*names)[*n]) {
			rc = -ENOMEM;
			break;
		}
		(*n)++;
	}
	kvp_info_free(&info);
	return rc;
}

bool kvfs_ctl_node_exists(struct kvfs *fs, const char *node)
{
	struct kvp_info info;
	bool found;

	if (info_get(fs, &info))
		return false;
	found = info_node(&info, node) != NULL;
	kvp_info_free(&info);
	return found;
}

int kvfs_ctl_node_info(struct kvfs *fs, const char *node, char **out, size_t *len)
{
	const struct kvp_node_info *n;
	struct kvp_info info;
	FILE *f;
	int rc;

	rc = info_get(fs, &info);
	if (rc)
		return rc;
	n = info_node(&info, node);
	if (!n) {
		kvp_info_free(&info);
		return -ENOENT;
	}
	*out = NULL;
	f = open_memstream(out, len);
	if (!f) {
		kvp_info_free(&info);
		return -ENOMEM;
	}
	fprintf(f, "name           %.64s\n", n->name);
	fprintf(f, "segment_id     %u\n", n->segment_id);
	fprintf(f, "host_id        %.64s%s\n", n->host_id,
		strncmp(n->host_id, fs->host_id, sizeof(n->host_id)) ? "" : " (this host)");
	fprintf(f, "endpoint       %.128s\n", n->endpoint);
	fprintf(f, "shm_path       %.256s\n", n->shm_path);
	fprintf(f, "capacity       %" PRIu64 "\n", n->capacity);
	fprintf(f, "used           %" PRIu64 " (%.1f%%)\n", n->used, pct(n->used, n->capacity));
	fprintf(f, "objects        %" PRIu64 "\n", n->objects);
	fprintf(f, "spill_capacity %" PRIu64 "\n", n->spill_capacity);
	fprintf(f, "spill_used     %" PRIu64 "\n", n->spill_used);
	fprintf(f, "draining       %s\n", n->draining ? "yes" : "no");
	if (n->numa_node >= 0)
		fprintf(f, "numa_node      %d\n", n->numa_node);
	else
		fprintf(f, "numa_node      none\n");
	kvp_info_free(&info);
	return text_done(f, out, len);
}

int kvfs_ctl_node_extents(struct kvfs *fs, const char *node, char **out, size_t *len)
{
	const struct kvp_node_info *n;
	struct kvp_info info;
	char err[512] = "";
	FILE *f;
	int rc;

	rc = info_get(fs, &info);
	if (rc)
		return rc;
	n = info_node(&info, node);
	if (!n) {
		kvp_info_free(&info);
		return -ENOENT;
	}
	*out = NULL;
	f = open_memstream(out, len);
	if (!f) {
		kvp_info_free(&info);
		return -ENOMEM;
	}
	if (strncmp(n->host_id, fs->host_id, sizeof(n->host_id)) != 0) {
		fprintf(f, "# remote node: run kvpool scan on %.64s (segment %.256s, host %.64s)\n",
			n->name, n->shm_path, n->host_id);
	} else {
		/* the live extents physically in the segment, read-only and
		 * without the value checksums (headers are still checked) */
		rc = scan_file(n->shm_path, false, false, f, err, sizeof(err));
		if (rc < 0 && rc != -EBADMSG)
			fprintf(f, "# cannot scan %.256s: %s\n", n->shm_path,
				err[0] ? err : strerror(-rc));
	}
	kvp_info_free(&info);
	return text_done(f, out, len);
}

int kvfs_ctl_segments(struct kvfs *fs, char **out, size_t *len)
{
	char err[256] = "";
	FILE *f;
	int rc;

	(void)fs;
	*out = NULL;
	f = open_memstream(out, len);
	if (!f)
		return -ENOMEM;
	rc = scan_host(NULL, false, f, err, sizeof(err));
	if (rc < 0)
		fprintf(f, "# %s\n", err);
	return text_done(f, out, len);
}

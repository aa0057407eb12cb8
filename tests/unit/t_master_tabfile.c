/* t_master_tabfile: a lone master's table file (master/mtabfile.c,
 * docs/ha.md "Lone restart"), in-process.
 *  1. a master writes its table (snapshot, then a change); a fresh master
 *     loads it (the same keys), takes it over warm, and the node's re-mount
 *     settles a remove the file never heard of (a ghost) and a key it
 *     never saw (adopted);
 *  2. refused without crashing: cut short before its SYNCED, empty,
 *     another cluster_id, another version (version 1 still loads), a
 *     flipped byte anywhere, garbage;
 *     a frame cut short after the SYNCED is left out (loaded);
 *  3. rotation: changes past the snapshot's size start a new snapshot,
 *     renamed over the file once complete; it loads;
 *  4. 60,000 keys whose extents are not in key order (a real pool's keys
 *     are hashes; the file comes in key order), enough for the load's
 *     prefaulted slab region, with removes and fresh keys while the
 *     snapshot is written and after it (DROPs of objects whose extents
 *     wait and of others, ADDs carried twice, keys that wait for the key
 *     index and are removed): the writer's keys back, nothing else, every
 *     extent reserved; the
 *     same file with two keys' extents made one: one of them goes, the
 *     other and the allocator stay right; again with 200,000 keys and the
 *     waiting extents' bound at 131,072: their batch fills its prefaulted
 *     regions and goes on on the heap.
 */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"
#include "master.h"
#include "mdrive.h"
#include "mrepl.h"
#include "mtabfile.h"
#include "wire.h"

#define ALEN 4096

static struct mdrive_follow fol_state;
static struct master_client *node_of_writer;
static char path[128], tmp[140];

static struct master_client *client(struct master *m, uint16_t role, struct wbuf *w)
{
	struct master_client *c = mdrive_client(m, role, mdrive_drop, &fol_state, w);

	CHECK(c != NULL);
	return c;
}

/* REPORTs keys ids[] (mdrive_report), then the HEARTBEAT. */
static void report(struct master *m, struct master_client *c, uint32_t sid, const unsigned *ids,
		   size_t n, struct wbuf *w)
{
	CHECK(mdrive_report(m, c, sid, ids, NULL, n, ALEN, w) == 0);
}

static bool exists(struct master *m, struct master_client *c, unsigned i, struct wbuf *w)
{
	return mdrive_exists(m, c, i, w);
}

static void removes(struct master *m, struct master_client *c, unsigned i, struct wbuf *w)
{
	CHECK(mdrive_remove(m, c, i, w) == 0);
}

static uint8_t *slurp(const char *p, size_t *len)
{
	FILE *f = fopen(p, "rb");
	uint8_t *b = NULL;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	rewind(f);
	b = malloc(*len + 1);
	if (b && fread(b, 1, *len, f) != *len) {
		free(b);
		b = NULL;
	}
	fclose(f);
	return b;
}

/* Applies len bytes of buf to a fresh master of conf: 0 or < 0; keys out. */
static int try_load(const struct kvp_conf *conf, const uint8_t *buf, size_t len, uint64_t *keys)
{
	char err[256], why[256];
	struct master *m = master_create(conf, err, sizeof(err));

	CHECK(m != NULL);
	int rc = mtabfile_apply(m, buf, len, why, sizeof(why));
	if (rc)
		CHECK(why[0] != '\0');
	CHECK(master_check(m));
	*keys = master_keys(m);
	master_destroy(m);
	return rc;
}

/* b rewritten as format version ver: its header's version, each frame's
 * checksum as version sum_ver computes it */
static void as_version(const struct kvp_conf *conf, uint8_t *b, size_t len, uint32_t ver,
		       uint32_t sum_ver)
{
	size_t o = 8 + 4 + 2 + strlen(conf->master.cluster_id);

	memcpy(b + 8, &ver, 4);
	while (o + WIRE_HDR_SIZE <= len) {
		struct wire_hdr h;

		CHECK_EQ(wire_hdr_decode(b + o, &h, UINT32_MAX, 0), 0);
		if (h.body_len > len - o - WIRE_HDR_SIZE)
			break;
		h.reqid = mtabfile_sum(sum_ver, b + o + WIRE_HDR_SIZE, h.body_len);
		wire_hdr_encode(&h, b + o);
		o += WIRE_HDR_SIZE + h.body_len;
	}
}

static struct master *writer(const struct kvp_conf *conf, struct master_client **cli,
			     struct wbuf *w)
{
	char err[256];
	unsigned ids[100];
	struct master *m = master_create(conf, err, sizeof(err));

	CHECK(m != NULL);
	struct master_client *node = client(m, WIRE_ROLE_NODE, w);
	node_of_writer = node;
	*cli = client(m, WIRE_ROLE_CLIENT, w);
	uint32_t sid = mdrive_mount(m, node, 64u << 20, 4096, w);
	CHECK_EQ(sid, 1);
	for (unsigned i = 0; i < 100; i++)
		ids[i] = i;
	report(m, node, sid, ids, 100, w);
	CHECK_EQ(master_keys(m), 100);
	unlink(path);
	CHECK_EQ(master_table_start(m, path, 0), 0);
	for (int i = 0; i < 10 && access(path, F_OK); i++)
		master_tick(m);
	CHECK(access(path, F_OK) == 0);
	CHECK(access(tmp, F_OK) != 0);
	return m;
}

static void test_load_takeover(const struct kvp_conf *conf)
{
	char err[256], why[256];
	struct wbuf w;
	struct master_client *cli;
	unsigned ids[101];
	size_t n = 0, slen;

	wb_init(&w);
	struct master *m = writer(conf, &cli, &w);
	uint8_t *snap = slurp(path, &slen);
	CHECK(snap != NULL);
	removes(m, cli, 5, &w);
	master_tick(m);		/* the change is written */

	/* 1. a fresh master loads it and takes it over warm */
	struct master *m2 = master_create(conf, err, sizeof(err));
	CHECK(m2 != NULL);
	CHECK_EQ(master_table_load(m2, path, why, sizeof(why)), 0);
	CHECK_EQ(master_keys(m2), 99);
	CHECK(master_check(m2));
	removes(m, cli, 6, &w);		/* after the last tick: not in the file */
	master_destroy(m);
	master_takeover(m2, 9, NULL);
	/* m2 writes its own file, as a restarted master does, before the node is back */
	char path2[160];
	snprintf(path2, sizeof(path2), "%s.2", path);
	CHECK_EQ(master_table_start(m2, path2, 0), 0);
	for (int i = 0; i < 10 && access(path2, F_OK); i++)
		master_tick(m2);
	struct master_client *c2 = client(m2, WIRE_ROLE_CLIENT, &w);
	CHECK(exists(m2, c2, 10, &w));	/* served before the node is back */
	for (unsigned i = 0; i <= 100; i++)
		if (i != 5 && i != 6)
			ids[n++] = i;
	struct master_client *node2 = client(m2, WIRE_ROLE_NODE, &w);
	CHECK_EQ(mdrive_mount(m2, node2, 64u << 20, 4096, &w), 1);
	report(m2, node2, 1, ids, n, &w);
	CHECK_EQ(master_keys(m2), 99);
	CHECK(!exists(m2, c2, 5, &w));
	CHECK(!exists(m2, c2, 6, &w));
	CHECK(exists(m2, c2, 100, &w));
	CHECK(master_check(m2));
	master_tick(m2);
	/* the re-mount's SEG in m2's file keeps the warm segment's replicas */
	struct master *m3 = master_create(conf, err, sizeof(err));
	CHECK(m3 != NULL);
	CHECK_EQ(master_table_load(m3, path2, why, sizeof(why)), 0);
	CHECK_EQ(master_keys(m3), 99);
	CHECK(master_check(m3));
	master_destroy(m3);
	master_destroy(m2);
	unlink(path2);

	/* 2. what is refused, without crashing */
	size_t len;
	uint64_t keys;
	uint8_t *full = slurp(path, &len);
	CHECK(full != NULL && len > slen);
	/* the clean stop wrote the remove of 6 too */
	CHECK_EQ(try_load(conf, full, len, &keys), 0);
	CHECK_EQ(keys, 98);
	CHECK_EQ(try_load(conf, full, len - 1, &keys), 0);	/* its frame cut short */
	CHECK_EQ(keys, 99);
	CHECK_EQ(try_load(conf, snap, slen, &keys), 0);
	for (size_t l = 0; l < slen; l += 1 + l / 64)	/* before its SYNCED */
		CHECK(try_load(conf, snap, l, &keys) < 0);
	CHECK(try_load(conf, snap, slen - 1, &keys) < 0);
	struct kvp_conf other = *conf;
	snprintf(other.master.cluster_id, sizeof(other.master.cluster_id), "other");
	CHECK(try_load(&other, full, len, &keys) < 0);
	/* format version 1 (its own checksum) is still read; 3 is not, nor a
	 * version 1 header over version 2's checksums */
	as_version(conf, full, len, 1, 1);
	CHECK_EQ(try_load(conf, full, len, &keys), 0);
	CHECK_EQ(keys, 98);
	as_version(conf, full, len, 1, 2);
	CHECK(try_load(conf, full, len, &keys) < 0);
	as_version(conf, full, len, 3, 2);
	CHECK(try_load(conf, full, len, &keys) < 0);
	as_version(conf, full, len, MTABFILE_VERSION, MTABFILE_VERSION);
	CHECK_EQ(try_load(conf, full, len, &keys), 0);
	for (size_t i = 0; i < len; i += 1 + i / 32) {
		full[i] ^= 0x41;
		CHECK(try_load(conf, full, len, &keys) < 0);
		full[i] ^= 0x41;
	}
	srand(7);
	for (size_t i = 0; i < len; i++)
		full[i] = (uint8_t)rand();
	CHECK(try_load(conf, full, len, &keys) < 0);
	FILE *f = fopen(path, "wb");
	CHECK(f != NULL);
	fclose(f);
	m2 = master_create(conf, err, sizeof(err));
	CHECK(master_table_load(m2, path, why, sizeof(why)) == -EINVAL);
	master_destroy(m2);
	unlink(path);
	m2 = master_create(conf, err, sizeof(err));
	CHECK(master_table_load(m2, path, why, sizeof(why)) == -ENOENT);
	master_destroy(m2);
	free(full);
	free(snap);
	wb_free(&w);
}

static void test_rotation(const struct kvp_conf *conf)
{
	char err[256], why[256];
	struct wbuf w;
	struct master_client *cli;
	struct stat st;

	wb_init(&w);
	mtabfile_rotate_min = 0;
	struct master *m = writer(conf, &cli, &w);
	CHECK(stat(path, &st) == 0);
	off_t s0 = st.st_size;
	for (unsigned i = 0; i < 100; i++) {	/* changes: twice the snapshot */
		unsigned id = 200 + i;
		removes(m, cli, i, &w);
		report(m, node_of_writer, 1, &id, 1, &w);
		master_tick(m);
	}
	CHECK(stat(path, &st) == 0);
	/* a new snapshot replaced it: without one, 100 changes of ~1.5 snapshots' size */
	CHECK(st.st_size < 2 * s0 + 1024);
	struct master *m2 = master_create(conf, err, sizeof(err));
	CHECK(m2 != NULL);
	CHECK_EQ(master_table_load(m2, path, why, sizeof(why)), 0);
	CHECK_EQ(master_keys(m2), 100);
	CHECK(master_check(m2));
	master_destroy(m2);
	master_destroy(m);	/* a clean stop: the file stays, complete */
	m2 = master_create(conf, err, sizeof(err));
	CHECK_EQ(master_table_load(m2, path, why, sizeof(why)), 0);
	CHECK_EQ(master_keys(m2), 100);
	master_destroy(m2);
	CHECK(access(tmp, F_OK) != 0);
	mtabfile_rotate_min = 64ull << 20;
	unlink(path);
	wb_free(&w);
}

/* MiB used by the segments, from the status line */
static unsigned long long used_mib(struct master *m)
{
	char buf[256];
	unsigned long long used = 0, cap = 0;
	const char *p;

	master_status(m, buf, sizeof(buf));
	p = strstr(buf, "segments, ");
	CHECK(p && sscanf(p, "segments, %llu/%llu MiB used", &used, &cap) == 2);
	return used;
}

/* The offset field of key id's ADD in a table file: after the key (a
 * length, then "key-%04u") and its tier byte. */
static uint8_t *ext_of(uint8_t *b, size_t len, unsigned id)
{
	char key[32];
	size_t kl;

	mdrive_key(key, sizeof(key), id);
	kl = strlen(key);
	for (size_t i = 2; i + kl + 9 <= len; i++)
		if (!memcmp(b + i, key, kl) && b[i + kl] == 0 && b[i - 2] == kl && b[i - 1] == 0)
			return b + i + kl + 1;
	return NULL;
}

/* Removes the keys i < n with i % step == from (those still there), and
 * REPORTs 500 fresh ones from id fresh on, at extents past the first n. */
static void changes(struct master *m, struct master_client *node, struct master_client *cl,
		    unsigned n, unsigned step, unsigned from, unsigned fresh, struct wbuf *w)
{
	unsigned ids[500];

	for (unsigned i = from; i < n; i += step)
		mdrive_remove(m, cl, i, w);
	for (unsigned j = 0; j < 500; j++)
		ids[j] = fresh + j;
	CHECK_EQ(mdrive_report(m, node, 1, ids, NULL, 500, ALEN, w), 0);
}

/* N keys at shuffled extents. bound_max: the waiting extents' bound
 * (mrepl.h), below N to fill the load's batch regions and go on past
 * them on the heap. */
static void test_load_shuffled(const struct kvp_conf *conf, unsigned N, size_t bound_max)
{
	enum { BATCH = 1000 };
	char err[256], why[256];
	struct wbuf w;
	unsigned *ids = malloc(N * sizeof(*ids)), *slots = malloc(N * sizeof(*slots));

	CHECK(ids && slots);
	wb_init(&w);
	srand(11);
	for (unsigned i = 0; i < N; i++)
		ids[i] = slots[i] = i;
	for (unsigned i = N - 1; i > 0; i--) {
		unsigned j = (unsigned)rand() % (i + 1), t = slots[i];

		slots[i] = slots[j];
		slots[j] = t;
	}
	struct master *m = master_create(conf, err, sizeof(err));
	CHECK(m != NULL);
	struct master_client *node = client(m, WIRE_ROLE_NODE, &w);
	/* half full: no eviction drops a key while m ticks */
	CHECK_EQ(mdrive_mount(m, node, (uint64_t)2 * N * ALEN, 4096, &w), 1);
	for (unsigned b = 0; b < N; b += BATCH)
		CHECK_EQ(mdrive_report(m, node, 1, ids + b, slots + b, BATCH, ALEN, &w), 0);
	CHECK_EQ(master_keys(m), N);
	unlink(path);
	CHECK_EQ(master_table_start(m, path, 0), 0);
	/* changes while the snapshot is written (the first slice out: with
	 * N > SNAP_SLICE some keys are in it, some not yet) and after it, as
	 * under a live pool: removes of keys whose ADD waits at the load
	 * (its DROP must reserve the batch first, no other DROP does), fresh
	 * keys (a change's ADD, and the snapshot's again for those past its
	 * cursor: nothing to reserve first) */
	struct master_client *cl = client(m, WIRE_ROLE_CLIENT, &w);
	master_tick(m);
	changes(m, node, cl, N, 97, 1, N, &w);
	for (int i = 0; i < 1000 && access(path, F_OK); i++)
		master_tick(m);
	CHECK(access(path, F_OK) == 0);
	changes(m, node, cl, N, 89, 10, N + 500, &w);
	for (unsigned j = 0; j < 500; j += 5)	/* keys of the changes, waiting for the key index */
		CHECK_EQ(mdrive_remove(m, cl, N + j, &w), 0);
	master_tick(m);
	CHECK(master_check(m));
	uint64_t nk = master_keys(m);
	CHECK(nk < N);
	struct master *m2 = master_create(conf, err, sizeof(err));
	CHECK(m2 != NULL);
	mrepl_dres_bound_max = bound_max;
	CHECK_EQ(master_table_load(m2, path, why, sizeof(why)), 0);
	CHECK_EQ(master_keys(m2), nk);
	CHECK(master_check(m2));
	CHECK_EQ(used_mib(m2), (unsigned long long)nk * ALEN >> 20);
	struct master_client *c2 = client(m2, WIRE_ROLE_CLIENT, &w);
	for (unsigned i = 0; i < N + 1000; i += 7)
		CHECK_EQ(exists(m2, c2, i, &w), exists(m, cl, i, &w));
	master_destroy(m2);
	master_destroy(m);

	/* key 5's extent made key 6's (checksums recomputed): the later of
	 * the two in offset order loses it, whether its reservation waited
	 * or not */
	size_t len;
	uint8_t *full = slurp(path, &len);
	CHECK(full != NULL);
	uint8_t *off5 = ext_of(full, len, 5), *off6 = ext_of(full, len, 6);
	CHECK(off5 && off6);
	memcpy(off5, off6, 8);
	as_version(conf, full, len, MTABFILE_VERSION, MTABFILE_VERSION);
	m2 = master_create(conf, err, sizeof(err));
	CHECK(m2 != NULL);
	CHECK_EQ(mtabfile_apply(m2, full, len, why, sizeof(why)), 0);
	mrepl_dres_bound_max = SIZE_MAX;
	CHECK_EQ(master_keys(m2), nk - 1);
	CHECK(master_check(m2));
	CHECK_EQ(used_mib(m2), (unsigned long long)(nk - 1) * ALEN >> 20);
	c2 = client(m2, WIRE_ROLE_CLIENT, &w);
	CHECK(exists(m2, c2, 5, &w) != exists(m2, c2, 6, &w));
	CHECK(exists(m2, c2, 7, &w));
	master_destroy(m2);
	free(full);
	unlink(path);
	free(ids);
	free(slots);
	wb_free(&w);
}

int main(void)
{
	struct kvp_conf conf;

	log_init("t_master_tabfile", LOG_ERR);
	conf_defaults(&conf);
	snprintf(path, sizeof(path), "/tmp/t_master_tabfile.%d", (int)getpid());
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	test_load_takeover(&conf);
	test_rotation(&conf);
	test_load_shuffled(&conf, 60000, SIZE_MAX);
	/* 131,072 waiting extents fill one 2 MiB chunk of the regions */
	test_load_shuffled(&conf, 200000, 131072);
	unlink(path);
	unlink(tmp);
	return tl_done();
}

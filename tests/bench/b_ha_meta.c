/* b_ha_meta: the master's side of failover and restart at sizes no host
 * here can hold the values of (docs/ha.md "Failover at size"): metadata
 * only, in one process, one node's segment simulated by its REPORTs.
 *  1. cold: a master adopts N reported extents (REPORT frames of 1,024,
 *     then the HEARTBEAT), as a lone master's restart or a cold new leader
 *     does: the time, and the RSS it grew by per object (1 KiB values,
 *     20-byte keys, one replica);
 *  2. follow: a standby follows that master (FOLLOW): the snapshot sent by
 *     the leader's ticks and applied by the standby, until it is in step;
 *  3. takeover: the standby takes the table over and answers a GET of an
 *     old key (the master's part of a failover; the election's lease is
 *     not in it);
 *  4. reconcile: the node re-mounts at the new leader and reports all N
 *     again (runs between requests, frame by frame); no ghost may be found;
 *  5. lone: the cold master writes its table file ([master] table_file,
 *     master ticks until the snapshot is renamed over the file), a fresh
 *     master loads it (the memory it grew by, and beside it the rate at
 *     which this host hands out fresh pages: their quotient is the load's
 *     floor) and takes it over as a lone restart does
 *     (mserver.c lone_load), answers a GET of an old key, the node
 *     re-mounts with its commit map, its REPORTs reconcile the table,
 *     then a PUT_START of a fresh key is answered (the recovery window
 *     holds fresh keys until the REPORTs end).
 * Usage: b_ha_meta [-n OBJECTS] [-r] [-c | -l] (-c: part 1 only, for
 * sizes whose two tables do not fit; -l: parts 1 and 5 only; -r: keys out
 * of offset order, as a pool's hashed keys are, so the snapshot's and the
 * table file's key order is not the extents' order: without it key i sits
 * at extent i). One JSON object on stdout. Exit 0 when it ran, 1 when a
 * step failed.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"
#include "extent.h"
#include "log.h"
#include "clock.h"
#include "master.h"
#include "segmap.h"
#include "../unit/mdrive.h"
#include "wire.h"

#define BATCH 1024
#define KEYLEN 20
#define VLEN 1024

static struct master *standby;
static bool random_order;	/* -r */
static struct mdrive_follow fol_state;	/* the FOLLOW connection's sink */

static long rss_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

/* A benchmark stops at a step that failed (its harness, not its figures). */
static struct master_client *need(struct master_client *c)
{
	if (!c)
		abort();
	return c;
}

static void key_of(char *k, uint64_t i)
{
	char tmp[32];

	if (random_order)	/* odd multiplier mod 2^48: one key per i */
		i = (i * 0x9E3779B97F4A7C15ull) & ((1ull << 48) - 1);
	snprintf(tmp, sizeof(tmp), "kvcache-%012" PRIx64, i);
	memcpy(k, tmp, KEYLEN);
}

/* Reports n extents into segment sid, then the HEARTBEAT; returns ns. */
static uint64_t report_all(struct master *m, struct master_client *c, uint32_t sid, uint64_t n,
			   uint64_t alen, struct wbuf *w)
{
	struct wbuf b;
	char key[KEYLEN];
	uint64_t t0 = clock_now_ns();

	wb_init(&b);
	for (uint64_t i = 0; i < n;) {
		uint32_t k = n - i < BATCH ? (uint32_t)(n - i) : BATCH;
		wb_reset(&b);
		wb_u32(&b, sid);
		wb_u32(&b, k);
		for (uint32_t j = 0; j < k; j++, i++) {
			key_of(key, i);
			wb_str(&b, key, KEYLEN);
			wb_u8(&b, 0);
			wb_u64(&b, 4096 + i * alen);
			wb_u64(&b, alen);
			wb_u64(&b, VLEN);
			wb_u64(&b, i * 2654435761u);
			wb_u64(&b, 1000 + i);
			wb_u64(&b, 1);
		}
		if (mdrive_call(m, c, WIRE_OP_REPORT, b.p, b.len, w))
			abort();
	}
	uint8_t hb[20] = { 0 };
	memcpy(hb, &sid, 4);
	if (mdrive_call(m, c, WIRE_OP_HEARTBEAT, hb, sizeof(hb), w))
		abort();
	wb_free(&b);
	return clock_now_ns() - t0;
}

/* CPU time of this thread (wall time is noisy on a shared host). */
static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* GET of key i through c: 0 when the item was found. */
static int get_one(struct master *m, struct master_client *c, uint64_t i, struct wbuf *w)
{
	struct wbuf b;
	struct rbuf rr;
	char key[KEYLEN];

	wb_init(&b);
	wb_u32(&b, 1);
	key_of(key, i);
	wb_str(&b, key, KEYLEN);
	int st = mdrive_call(m, c, WIRE_OP_GET, b.p, b.len, w);
	wb_free(&b);
	if (st)
		return st;
	rb_init(&rr, w->p + WIRE_HDR_SIZE, w->len - WIRE_HDR_SIZE);
	rb_u32(&rr);
	return rb_status(&rr);
}

/* PUT_START of one fresh key (VLEN bytes): 0 when a replica was placed. */
static int put_one(struct master *m, struct master_client *c, struct wbuf *w)
{
	return mdrive_put_start(m, c, "fresh-key-after-restart", VLEN, NULL, NULL, w);
}

/* The floor under a load (docs/performance.md "A lone master's load: the
 * floor"): bytes per second at which this host hands out fresh anonymous
 * memory, huge pages asked for as the table's are, each 4 KiB touched
 * once (the kernel's zeroing and whatever a hypervisor adds). */
static double fresh_bytes_per_s(void)
{
	size_t len = 256u << 20;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return 0;
	madvise(p, len, MADV_HUGEPAGE);
	uint64_t t0 = clock_now_ns();
	for (size_t i = 0; i < len; i += 4096)
		p[i] = 1;
	uint64_t ns = clock_now_ns() - t0;
	munmap(p, len);
	return ns ? (double)len * 1e9 / (double)ns : 0;
}

/* Part 5: m's table to a file and a fresh master's lone restart from it;
 * prints its JSON fields. 0, or 1 when a step failed. */
static int lone(struct master *m, struct master_client *node, const struct kvp_conf *conf,
		uint32_t sid, uint64_t n, uint64_t alen, uint64_t size, struct wbuf *w)
{
	char path[128], tmp[140], err[256], why[512];
	uint8_t hb[20] = { 0 };
	struct stat st;

	snprintf(path, sizeof(path), "%s/b_ha_meta.%d.table",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	unlink(path);
	memcpy(hb, &sid, 4);
	uint64_t t0 = clock_now_ns();
	if (master_table_start(m, path, 0))
		return 1;
	while (access(path, F_OK)) {	/* renamed over path once complete */
		master_tick(m);
		if (mdrive_call(m, node, WIRE_OP_HEARTBEAT, hb, sizeof(hb), w))
			return 1;
	}
	uint64_t write_ns = clock_now_ns() - t0;
	if (stat(path, &st) || !access(tmp, F_OK))
		return 1;

	/* the restart: load, take over as mserver.c's lone_load does */
	struct master *m2 = master_create(conf, err, sizeof(err));
	if (!m2)
		return 1;
	long rss0 = rss_kb();
	t0 = clock_now_ns();
	uint64_t c0 = cpu_ns();
	if (master_table_load(m2, path, why, sizeof(why))) {
		fprintf(stderr, "lone: load: %s\n", why);
		return 1;
	}
	uint64_t load_ns = clock_now_ns() - t0, load_cpu_ns = cpu_ns() - c0;
	double grew = (double)(rss_kb() - rss0) * 1024, fresh = fresh_bytes_per_s();
	uint64_t window = 2 * conf->node.heartbeat_interval + 2000;
	size_t cap = 1u << 16;
	char *exp = malloc(cap);
	t0 = clock_now_ns();
	master_takeover(m2, master_epoch(m2), NULL);
	master_warm_grace(m2, window);
	if (!exp)
		return 1;
	master_segments_text(m2, exp, cap);
	master_recover(m2, exp, window);
	free(exp);
	uint64_t take_ns = clock_now_ns() - t0;
	unlink(path);
	if (master_keys(m2) != n) {
		fprintf(stderr, "lone: %" PRIu64 " keys loaded\n", master_keys(m2));
		return 1;
	}
	t0 = clock_now_ns();
	struct master_client *cli = need(mdrive_client(m2, WIRE_ROLE_CLIENT, mdrive_drop, NULL, w));
	int item = get_one(m2, cli, n / 2, w);
	uint64_t get_ns = clock_now_ns() - t0;
	if (item) {
		fprintf(stderr, "lone: GET answered %d\n", item);
		return 1;
	}

	/* the node re-mounts with its commit map (a byte per 4 KiB) */
	size_t mlen = size / 4096;
	uint8_t *map = calloc(mlen, 1);
	if (!map)
		return 1;
	for (uint64_t i = 0; i < n; i++)
		map[(4096 + i * alen) / 4096] = segmap_tag(1000 + i);
	struct master_client *node2 = need(mdrive_client(m2, WIRE_ROLE_NODE, mdrive_drop, NULL, w));
	t0 = clock_now_ns();
	uint32_t sid2 = mdrive_mount_map(m2, node2, size, 64, map, mlen, w);
	uint64_t mount_ns = clock_now_ns() - t0;
	free(map);
	if (sid2 != sid) {
		fprintf(stderr, "lone: re-mount got segment %u\n", sid2);
		return 1;
	}
	uint64_t recon_ns = report_all(m2, node2, sid2, n, alen, w);
	/* a fresh key waits for the recovery window's end (mrecover_gate) */
	t0 = clock_now_ns();
	int put = put_one(m2, cli, w);
	uint64_t put_ns = clock_now_ns() - t0;
	if (put) {
		fprintf(stderr, "lone: PUT_START answered %d\n", put);
		return 1;
	}
	if (master_keys(m2) < n || !master_check(m2)) {
		fprintf(stderr, "lone: reconcile: %" PRIu64 " keys\n", master_keys(m2));
		return 1;
	}
	printf(", \"tabfile_write_ms\": %.1f, \"tabfile_bytes_per_object\": %.1f, "
	       "\"lone_load_ms\": %.1f, \"lone_load_cpu_ms\": %.1f, \"lone_takeover_ms\": %.1f, \"lone_get_us\": %.1f, "
	       "\"lone_mount_ms\": %.1f, \"lone_put_us\": %.1f, \"lone_reconcile_ms\": %.1f, "
	       "\"lone_load_rss_mib\": %.0f, \"fresh_pages_mib_per_s\": %.0f, \"lone_load_zeroing_floor_ms\": %.1f",
	       write_ns / 1e6, (double)st.st_size / (double)n, load_ns / 1e6, load_cpu_ns / 1e6, take_ns / 1e6,
	       get_ns / 1e3, mount_ns / 1e6, put_ns / 1e3, recon_ns / 1e6, grew / 1048576,
	       fresh / 1048576, fresh > 0 ? grew / fresh * 1e3 : 0.0);
	master_destroy(m2);
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t n = 100000;
	bool cold_only = false, lone_only = false;
	int opt;
	char err[256], key[KEYLEN];
	struct kvp_conf conf;
	struct wbuf w;

	while ((opt = getopt(argc, argv, "n:clr")) != -1) {
		if (opt == 'n')
			n = strtoull(optarg, NULL, 10);
		else if (opt == 'c')
			cold_only = true;
		else if (opt == 'l')
			lone_only = true;
		else if (opt == 'r')
			random_order = true;
		else
			return 2;
	}
	if (!n)
		return 2;
	conf_defaults(&conf);
	conf.cluster.max_batch = BATCH;
	log_init("b_ha_meta", LOG_WARNING);
	wb_init(&w);
	uint64_t alen = (ext_size(KEYLEN, VLEN) + 63) & ~63ull;
	/* twice the room: no eviction while the leader ticks */
	uint64_t size = 4096 + 2 * n * alen + (1u << 20);

	/* 1. cold */
	long r0 = rss_kb();
	struct master *m = master_create(&conf, err, sizeof(err));
	if (!m)
		return 1;
	struct master_client *node = need(mdrive_client(m, WIRE_ROLE_NODE, mdrive_drop, NULL, &w));
	uint32_t sid = mdrive_mount(m, node, size, 64, &w);
	if (!sid)
		abort();
	uint64_t cold_ns = report_all(m, node, sid, n, alen, &w);
	long r1 = rss_kb();
	if (master_keys(m) != n) {
		fprintf(stderr, "cold: %" PRIu64 " keys, expected %" PRIu64 "\n", master_keys(m), n);
		return 1;
	}
	printf("{\"objects\": %" PRIu64 ", \"key_bytes\": %d, \"key_order\": \"%s\", "
	       "\"cold_rebuild_ms\": %.1f, "
	       "\"cold_objects_per_s\": %.0f, \"rss_bytes_per_object\": %.1f",
	       n, KEYLEN, random_order ? "random" : "offset", cold_ns / 1e6, n / (cold_ns / 1e9), (r1 - r0) * 1024.0 / (double)n);
	fflush(stdout);
	if (cold_only) {
		printf("}\n");
		return 0;
	}
	if (lone_only) {
		int rc = lone(m, node, &conf, sid, n, alen, size, &w);
		printf("}\n");
		master_destroy(m);
		wb_free(&w);
		return rc;
	}

	/* 2. follow */
	standby = master_create(&conf, err, sizeof(err));
	fol_state.standby = standby;
	if (!standby)
		return 1;
	struct master_client *fol = need(mdrive_client(m, WIRE_ROLE_MASTER, mdrive_follow_sink,
						       &fol_state, &w));
	uint64_t t0 = clock_now_ns();
	if (mdrive_call(m, fol, WIRE_OP_FOLLOW, NULL, 0, &w))
		return 1;
	uint8_t hb[20] = { 0 };
	memcpy(hb, &sid, 4);
	while (!master_follow_synced(standby) && !fol_state.bad) {
		master_tick(m);
		/* the node lives on: its segment must outlast node_ttl */
		if (mdrive_call(m, node, WIRE_OP_HEARTBEAT, hb, sizeof(hb), &w))
			return 1;
	}
	uint64_t follow_ns = clock_now_ns() - t0;
	long r2 = rss_kb();
	if (fol_state.bad || master_keys(standby) != n) {
		fprintf(stderr, "follow: %d bad frames, %" PRIu64 " keys\n", fol_state.bad,
			master_keys(standby));
		return 1;
	}

	/* 3. takeover: the old leader is gone; a GET of an old key */
	master_client_free(fol);
	t0 = clock_now_ns();
	master_takeover(standby, 2, NULL);
	struct master_client *cli = need(mdrive_client(standby, WIRE_ROLE_CLIENT, mdrive_drop, NULL, &w));
	struct wbuf b;
	wb_init(&b);
	wb_u32(&b, 1);
	key_of(key, n / 2);
	wb_str(&b, key, KEYLEN);
	int st = mdrive_call(standby, cli, WIRE_OP_GET, b.p, b.len, &w);
	struct rbuf rr;
	rb_init(&rr, w.p + WIRE_HDR_SIZE, w.len - WIRE_HDR_SIZE);
	rb_u32(&rr);
	int item = rb_status(&rr);
	uint64_t take_ns = clock_now_ns() - t0;
	if (st || item) {
		fprintf(stderr, "takeover: GET answered %d / %d\n", st, item);
		return 1;
	}

	/* 4. reconcile */
	struct master_client *node2 = need(mdrive_client(standby, WIRE_ROLE_NODE, mdrive_drop, NULL, &w));
	uint32_t sid2 = mdrive_mount(standby, node2, size, 64, &w);
	if (!sid2)
		abort();
	uint64_t recon_ns = report_all(standby, node2, sid2, n, alen, &w);
	if (master_keys(standby) != n || !master_check(standby)) {
		fprintf(stderr, "reconcile: %" PRIu64 " keys\n", master_keys(standby));
		return 1;
	}
	printf(", \"follow_snapshot_ms\": %.1f, \"standby_rss_bytes_per_object\": %.1f, "
	       "\"takeover_to_get_us\": %.1f, \"reconcile_ms\": %.1f",
	       follow_ns / 1e6, (r2 - r1) * 1024.0 / (double)n, take_ns / 1e3, recon_ns / 1e6);
	wb_free(&b);
	master_destroy(standby);

	/* 5. lone */
	int rc = lone(m, node, &conf, sid, n, alen, size, &w);
	printf("}\n");
	wb_free(&w);
	master_destroy(m);
	return rc;
}

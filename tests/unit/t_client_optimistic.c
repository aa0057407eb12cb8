/* t_client_optimistic: optimistic same-host reads (src/lib/lcache.c,
 * xp_local_opt_read; the protocol is in docs/client.md). One node with a
 * small segment, so that extents are freed and reused all the time.
 *
 * semantics: a key this handle put is read without the master (even while
 * the master is stopped); its own remove and its own re-put are never
 * answered with the old value; another handle's remove becomes visible
 * once the node has dropped the extent, and until then only the old,
 * correct value can come back; reads the master did not see reach it as
 * reads (LRU).
 *
 * stress: readers get (single and batch) and check keys whose values other
 * handles keep removing and putting again in new versions and sizes (also
 * over TCP, as a remote host, so the node writes the extents), while filler
 * puts keep the segment at its eviction watermark. Every value read must
 * be byte-for-byte some version of its key: 0 wrong bytes, with both
 * optimistic hits and fallbacks (and reads that met a free or a reuse
 * mid-copy) counted. KVP_STRESS_SECS sets the length (default 3 s).
 *
 * gone: after the node's clean exit its segment (still mapped here) serves
 * no optimistic read.
 * Exit 0/1/77.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "testlib.h"

#define NKEYS 48
#define VMAX (192u << 10)
#define SEG_MB 24

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Version v of key: 16 header bytes (tag, version, length), then bytes
 * derived from key, version and length. Sizes differ per version so a
 * reused extent never lines up with the old one. */
static size_t vsize(uint32_t v)
{
	return 1024 + ((size_t)v * 7919u) % (VMAX - 1024);
}

static uint64_t vseed(const char *key, uint32_t v, size_t len)
{
	uint64_t x = 1469598103934665603ull ^ ((uint64_t)v << 32) ^ len;

	for (const char *k = key; *k; k++)
		x = (x ^ (uint8_t)*k) * 1099511628211ull;
	return x | 1;
}

static void make_val(uint8_t *b, const char *key, uint32_t v, size_t len)
{
	uint64_t x = vseed(key, v, len);

	memcpy(b, "KVOPTVAL", 8);
	memcpy(b + 8, &v, 4);
	memcpy(b + 12, &(uint32_t){ (uint32_t)len }, 4);
	for (size_t i = 16; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		b[i] = (uint8_t)x;
	}
}

/* True when b[0..len) is exactly some version of key. */
static bool is_val(const uint8_t *b, size_t len, const char *key)
{
	uint32_t v, l;
	uint64_t x;

	if (len < 16 || memcmp(b, "KVOPTVAL", 8) != 0)
		return false;
	memcpy(&v, b + 8, 4);
	memcpy(&l, b + 12, 4);
	if (l != len || vsize(v) != len)
		return false;
	x = vseed(key, v, len);
	for (size_t i = 16; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (b[i] != (uint8_t)x)
			return false;
	}
	return true;
}

static int put_ver_opts(struct kvp *k, const char *key, uint32_t v, unsigned flags)
{
	struct kvp_put_opts o = { .flags = flags };
	size_t len = vsize(v);
	uint8_t *b = malloc(len);
	int rc;

	REQUIRE(b);
	make_val(b, key, v, len);
	rc = kvp_put_opts(k, key, b, len, &o);
	free(b);
	return rc;
}

static int put_ver(struct kvp *k, const char *key, uint32_t v)
{
	return put_ver_opts(k, key, v, 0);
}

/* get_into: the value's version, or the error. */
static int64_t get_ver(struct kvp *k, const char *key, uint8_t *buf)
{
	int64_t rc = kvp_get_into(k, key, buf, VMAX);
	uint32_t v;

	if (rc < 0)
		return rc;
	REQUIRE(is_val(buf, (size_t)rc, key));
	memcpy(&v, buf + 8, 4);
	return v;
}

static struct kvp_stats stats(struct kvp *k)
{
	struct kvp_stats s;

	kvp_stats(k, &s);
	return s;
}

static int64_t stat_atime_ms(struct kvp *k, const char *key)
{
	struct kvp_stat st;

	REQUIRE(kvp_stat(k, key, &st) == 0);
	return (int64_t)(st.access_time_ns / 1000000);
}

static void semantics(struct tl_pool *p)
{
	struct kvp *a = tl_pool_open(p, NULL, NULL), *b = tl_pool_open(p, NULL, NULL);
	uint8_t *buf = malloc(VMAX);
	struct kvp_stats s0, s1;
	const char *key = "sem/k";

	REQUIRE(a && b && buf);
	CHECK_RC(put_ver(a, key, 1), 0);
	s0 = stats(a);
	CHECK_RC(get_ver(a, key, buf), 1);
	CHECK_RC(kvp_exists(a, key), 1);
	s1 = stats(a);
	CHECK(s1.optimistic_hits - s0.optimistic_hits == 2);

	/* no master on the path: it is stopped, the reads still work */
	kill(p->master, SIGSTOP);
	double t0 = now_s();
	CHECK_RC(get_ver(a, key, buf), 1);
	CHECK_RC(kvp_exists(a, key), 1);
	CHECK(now_s() - t0 < 1.0);
	kill(p->master, SIGCONT);

	/* this handle's remove: never the old value again */
	CHECK_RC(kvp_remove(a, key, KVP_REMOVE_FORCE), 0);
	CHECK_RC(get_ver(a, key, buf), KVP_ENOTFOUND);
	CHECK_RC(kvp_exists(a, key), 0);
	/* ... and its re-put: the new version only */
	CHECK_RC(put_ver(a, key, 2), 0);
	CHECK_RC(get_ver(a, key, buf), 2);
	CHECK_RC(get_ver(b, key, buf), 2);	/* b now remembers it too */

	/* another handle's remove: a has the location; once the node has
	 * dropped the extent, a asks the master; until then only version 2 */
	CHECK_RC(kvp_remove(b, key, KVP_REMOVE_FORCE), 0);
	int64_t got = 2;
	for (int i = 0; i < 500 && got == 2; i++) {
		got = get_ver(a, key, buf);
		if (got == 2)
			usleep(10000);
	}
	CHECK_RC(got, KVP_ENOTFOUND);
	/* b removed it itself: never version 2 after its remove returned */
	CHECK_RC(get_ver(b, key, buf), KVP_ENOTFOUND);

	/* upserts: this handle's own is never answered with the value it
	 * replaced; another handle's becomes visible once the node has dropped
	 * the old extent (the master frees it after the new one commits) */
	CHECK_RC(put_ver(a, key, 4), 0);
	CHECK_RC(get_ver(a, key, buf), 4);
	CHECK_RC(put_ver_opts(a, key, 5, KVP_PUT_UPSERT), 0);
	CHECK_RC(get_ver(a, key, buf), 5);
	CHECK_RC(get_ver(b, key, buf), 5);
	CHECK_RC(put_ver_opts(b, key, 6, KVP_PUT_UPSERT), 0);
	CHECK_RC(get_ver(b, key, buf), 6);
	got = 5;
	for (int i = 0; i < 500 && got == 5; i++) {
		got = get_ver(a, key, buf);
		if (got == 5)
			usleep(10000);
	}
	CHECK_RC(got, 6);
	CHECK_RC(kvp_remove(a, key, KVP_REMOVE_FORCE), 0);

	/* reads that bypass the master still reach its eviction policy, every
	 * one (TOUCH batches); an exists is a lookup and reports nothing */
	char k2[64];
	snprintf(k2, sizeof(k2), "sem/lru");
	CHECK_RC(put_ver(a, k2, 3), 0);
	int64_t at0 = stat_atime_ms(b, k2);
	usleep(1300000);
	/* the earlier reads' touches are due: this read's poll sends them,
	 * its own touch with them */
	CHECK_RC(get_ver(a, k2, buf), 3);
	s0 = stats(a);
	CHECK_RC(get_ver(a, k2, buf), 3);	/* optimistic, queued as a touch */
	usleep(250000);
	CHECK_RC(get_ver(a, k2, buf), 3);	/* ... and this one sends the batch */
	s1 = stats(a);
	CHECK(s1.optimistic_hits - s0.optimistic_hits == 2);
	CHECK(s1.read_touches - s0.read_touches == 2);
	CHECK(stat_atime_ms(b, k2) >= at0 + 1000);
	CHECK_RC(kvp_exists(a, k2), 1);		/* optimistic: no touch */
	usleep(250000);
	CHECK_RC(get_ver(a, k2, buf), 3);	/* its own touch waits (not due) */
	s0 = stats(a);
	CHECK(s0.optimistic_hits - s1.optimistic_hits == 2);
	CHECK(s0.read_touches == s1.read_touches);

	kvp_close(a);
	kvp_close(b);
	free(buf);
}

/* ---- stress ---- */

struct shared {
	struct tl_pool *p;
	double end;
	atomic_uint ver[NKEYS];
	atomic_ullong reads, values, missing, lost, wrong, errors, puts, removes;
	char key[NKEYS][32];
};

static void *writer(void *arg)
{
	struct shared *sh = arg;
	static atomic_int nth;
	int me = atomic_fetch_add(&nth, 1);
	/* writer 0 writes by memcpy, writer 1 as a remote host over TCP. Plain
	 * removes: one refused by a reader's lease (a read through the master)
	 * leaves the key as it is; optimistic reads take no lease. */
	const char *remote[] = { "client.host_id=t-opt-remote", "client.replicas=1", NULL };
	struct kvp *k = tl_pool_open(sh->p, me ? remote : NULL, NULL);
	unsigned seed = 12345u + (unsigned)me;
	uint8_t *fill = malloc(64 << 10);
	char fk[48];
	uint64_t n = 0;

	REQUIRE(k && fill);
	memset(fill, 0x5a, 64 << 10);
	while (now_s() < sh->end) {
		int i = (int)(rand_r(&seed) % NKEYS);
		uint32_t v = atomic_fetch_add(&sh->ver[i], 1) + 1;
		int rc = kvp_remove(k, sh->key[i], 0);

		if (rc == 0)
			atomic_fetch_add(&sh->removes, 1);
		if ((rc == 0 || rc == KVP_ENOTFOUND) && put_ver(k, sh->key[i], v) == 0)
			atomic_fetch_add(&sh->puts, 1);
		/* filler: keeps the allocator busy and the segment near its
		 * watermark, so eviction frees extents under the readers too */
		snprintf(fk, sizeof(fk), "fill/%d/%llu", me, (unsigned long long)n++);
		kvp_put_from(k, fk, fill, 1024 + (size_t)(rand_r(&seed) % (63u << 10)));
		if (n % 64 == 0) {
			snprintf(fk, sizeof(fk), "fill/%d/", me);
			kvp_remove_prefix(k, fk, KVP_REMOVE_FORCE, NULL);
		}
	}
	kvp_close(k);
	free(fill);
	return NULL;
}

struct reader {
	struct shared *sh;
	struct kvp_stats st;
};

static void check_read(struct shared *sh, int64_t rc, const uint8_t *buf, const char *key)
{
	atomic_fetch_add(&sh->reads, 1);
	if (rc == KVP_ENOTFOUND)
		atomic_fetch_add(&sh->missing, 1);
	else if (rc == KVP_ELEASE)
		atomic_fetch_add(&sh->lost, 1);	/* a master-path read outlived its lease */
	else if (rc < 0 && atomic_fetch_add(&sh->errors, 1) < 10)
		fprintf(stderr, "t_client_optimistic: get %s: %s\n", key, kvp_errname((int)rc));
	else if (rc < 0)
		;
	else if (is_val(buf, (size_t)rc, key))
		atomic_fetch_add(&sh->values, 1);
	else {
		atomic_fetch_add(&sh->wrong, 1);
		fprintf(stderr, "t_client_optimistic: WRONG BYTES for %s (%lld bytes)\n", key,
			(long long)rc);
	}
}

static void *reader(void *arg)
{
	struct reader *r = arg;
	struct shared *sh = r->sh;
	struct kvp *k = tl_pool_open(sh->p, NULL, NULL);
	unsigned seed = (unsigned)(uintptr_t)r;
	uint8_t *bufs[8];
	size_t caps[8];
	int64_t res[8];
	const char *keys[8];
	int ex[8];

	REQUIRE(k);
	for (int j = 0; j < 8; j++) {
		REQUIRE((bufs[j] = malloc(VMAX)));
		caps[j] = VMAX;
	}
	while (now_s() < sh->end) {
		int i = (int)(rand_r(&seed) % NKEYS);

		if (rand_r(&seed) % 4) {
			int64_t rc = kvp_get_into(k, sh->key[i], bufs[0], VMAX);

			check_read(sh, rc, bufs[0], sh->key[i]);
			continue;
		}
		for (int j = 0; j < 8; j++)
			keys[j] = sh->key[(i + j) % NKEYS];
		if (kvp_batch_get_into(k, 8, keys, (void *const *)bufs, caps, res) == 0)
			for (int j = 0; j < 8; j++)
				check_read(sh, res[j], bufs[j], keys[j]);
		if (kvp_batch_exists(k, 8, keys, ex) == 0)
			for (int j = 0; j < 8; j++)
				CHECK(ex[j] == 0 || ex[j] == 1);
	}
	kvp_stats(k, &r->st);
	kvp_close(k);
	for (int j = 0; j < 8; j++)
		free(bufs[j]);
	return NULL;
}

static void stress(struct tl_pool *p, double secs)
{
	enum { NR = 3, NW = 2 };
	struct shared *sh = calloc(1, sizeof(*sh));
	struct reader rd[NR];
	pthread_t tr[NR], tw[NW];
	uint64_t hits = 0, falls = 0, raced = 0, mism = 0;

	REQUIRE(sh);
	sh->p = p;
	for (int i = 0; i < NKEYS; i++)
		snprintf(sh->key[i], sizeof(sh->key[i]), "x/%d", i);
	{
		struct kvp *k = tl_pool_open(p, NULL, NULL);

		REQUIRE(k);
		for (int i = 0; i < NKEYS; i++)
			REQUIRE(put_ver(k, sh->key[i], atomic_fetch_add(&sh->ver[i], 1) + 1) == 0);
		kvp_close(k);
	}
	sh->end = now_s() + secs;
	for (int i = 0; i < NR; i++) {
		rd[i].sh = sh;
		pthread_create(&tr[i], NULL, reader, &rd[i]);
	}
	for (int i = 0; i < NW; i++)
		pthread_create(&tw[i], NULL, writer, sh);
	for (int i = 0; i < NW; i++)
		pthread_join(tw[i], NULL);
	for (int i = 0; i < NR; i++) {
		pthread_join(tr[i], NULL);
		hits += rd[i].st.optimistic_hits;
		falls += rd[i].st.optimistic_fallbacks;
		raced += rd[i].st.optimistic_raced;
		mism += rd[i].st.checksum_mismatches;
	}
	printf("stress %.0f s: %llu reads: %llu values verified, %llu missing, %llu past their lease, "
	       "%llu errors, "
	       "%llu WRONG; "
	       "writers %llu puts, %llu removes; readers: %llu optimistic hits, %llu fallbacks "
	       "(%llu met a free or reuse mid-copy), %llu checksum mismatches\n", secs,
	       (unsigned long long)sh->reads, (unsigned long long)sh->values,
	       (unsigned long long)sh->missing, (unsigned long long)sh->lost,
	       (unsigned long long)sh->errors,
	       (unsigned long long)sh->wrong,
	       (unsigned long long)sh->puts, (unsigned long long)sh->removes,
	       (unsigned long long)hits, (unsigned long long)falls, (unsigned long long)raced,
	       (unsigned long long)mism);
	CHECK(sh->wrong == 0);
	CHECK(sh->errors == 0);
	CHECK(sh->values > 0 && sh->puts > 0);
	CHECK(hits > 0 && falls > 0);
	free(sh);
}

/* The node exits (remove_segment_on_exit): it marks its segment gone
 * before the unlink, so a handle that still maps it and remembers where a
 * key was answers from it no more, even right after a read that looked
 * (lcache.c seg_gone: the fstat backstop runs at most every 50 ms). */
static void node_gone(struct tl_pool *p)
{
	struct kvp *a = tl_pool_open(p, NULL, NULL);
	uint8_t *buf = malloc(VMAX);
	const char *key = "gone/k";
	const char *keys[] = { key };
	int res = -100;

	REQUIRE(a && buf);
	CHECK_RC(put_ver(a, key, 1), 0);
	CHECK_RC(get_ver(a, key, buf), 1);
	CHECK_RC(kvp_exists(a, key), 1);
	kill(p->node[0], SIGTERM);
	CHECK(waitpid(p->node[0], NULL, 0) == p->node[0]);
	tl_forget(p->node[0]);
	p->node[0] = 0;
	CHECK(kvp_batch_exists(a, 1, keys, &res) == 0 && res != 1);
	CHECK(get_ver(a, key, buf) != 1);
	kvp_close(a);
	free(buf);
}

int main(void)
{
	const char *e = getenv("KVP_STRESS_SECS");
	double secs = e ? atof(e) : 3.0;
	/* Eviction from 80%: the segment churns. A read through the master
	 * holds a lease (it blocks a plain remove) until its LEASE_RELEASE. */
	struct tl_pool *p = tl_pool_start(1, SEG_MB, "[master]\neviction_high_watermark = 0.8\n"
				     "eviction_ratio = 0.1\nlease_ttl = 2s\n");

	(void)tl_check_fill;	/* the values here carry their own version */
	semantics(p);
	stress(p, secs > 0 ? secs : 3.0);
	node_gone(p);
	return tl_done();
}

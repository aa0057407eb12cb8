/* b_client: libkvpool throughput against a running pool (started by
 * tests/bench/client_bench.sh), with the memcpy references measured in the
 * same run. Prints one "name value" line per measurement (bytes/s or ops/s);
 * the script turns them into ratios against memcpy, iperf3 and redis.
 *
 *   b_client -c POOL.INI [-t SECONDS] [-n OBJECTS] [-o section.key=value]...
 *   b_client -c POOL.INI -w      waits (30 s at most) until a node is mounted
 *   -x WORD runs only the measurements whose name contains WORD.
 *   -T: TCP only (a client on another host, or in another network
 *   namespace: the local-path measurements are left out).
 *   -n OBJECTS: 1 MiB objects per footprint (default 256; the small-value
 *   runs use 4x as many, in whole batches of 64): fewer for a smoke run.
 *   -p PID: the node's process id; the one-thread TCP batch get then also
 *   prints the CPU seconds it cost this process and the node (NAME_cpu_client,
 *   NAME_cpu_node) and the bytes it moved (NAME_bytes): CPU per byte on both
 *   ends, against iperf3's, does not move with the load as throughput does.
 *
 * Every value is derived from its key and verified once after each timed
 * phase, so a fast wrong answer cannot pass for a fast right one.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"

#define MIB (1u << 20)
/* Footprints, equal for the pool and its memcpy reference: 1 MiB objects
 * read in rotation (256 MiB) and written per round (256 MiB), far past
 * what the caches of this 2-vCPU VM hold for one core (measured: memcpy
 * from 64 MiB and from 1 GiB rotations runs at the same speed), so both
 * sides copy from and to memory, as a pool segment is. */
#define NBIG 256		/* default of -n */
#define BATCH_SMALL 64

static int nget = NBIG, nput = NBIG, nref = NBIG;	/* nref: reference buffers */
static int nsmall = 4 * NBIG;				/* 64 KiB / 4 KiB objects */

static double secs = 1.0;
static const char *conf;
static const char *ovs[16];
static int novs;
static int failed;
static const char *only;
static int node_pid;		/* -p */
static _Thread_local double last_bytes;	/* moved by this thread's last get_batch() */

/* -x: whether the measurement called name runs. */
static bool wanted(const char *name)
{
	return !only || strstr(name, only);
}

/* Runs and prints one measurement unless -x filters it out. */
#define MEASURE(name, expr) do { \
	if (wanted(name)) \
		printf("%s %.0f\n", name, (double)(expr)); \
} while (0)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds (user + system) of this process so far. */
static double cpu_self(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* CPU seconds of process pid so far (fields 14 and 15 of /proc/PID/stat),
 * -1 when it cannot be read. */
static double cpu_of(int pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');	/* the command name may hold spaces */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
			 &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* MEASURE, and with -p the CPU it cost both ends (expr: a get_batch()). */
#define MEASURE_CPU(name, expr) do { \
	if (wanted(name)) { \
		double c0 = cpu_self(), n0 = node_pid ? cpu_of(node_pid) : -1, v = (expr); \
		double c1 = cpu_self(), n1 = node_pid ? cpu_of(node_pid) : -1; \
		printf("%s %.0f\n", name, v); \
		if (n0 >= 0 && n1 >= 0) \
			printf("%s_cpu_client %.3f\n%s_cpu_node %.3f\n%s_bytes %.0f\n", name, \
			       c1 - c0, name, n1 - n0, name, last_bytes); \
	} \
} while (0)

static void fill(void *buf, size_t len, const char *key)
{
	uint64_t x = 1469598103934665603ull;
	uint64_t *p = buf;

	for (const char *k = key; *k; k++)
		x = (x ^ (uint8_t)*k) * 1099511628211ull;
	for (size_t i = 0; i < len / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = x;
	}
	memset((uint8_t *)buf + (len / 8) * 8, (int)x, len % 8);
}

static int check(const void *buf, size_t len, const char *key)
{
	void *w = malloc(len);
	int ok;

	fill(w, len, key);
	ok = memcmp(w, buf, len) == 0;
	free(w);
	if (!ok) {
		fprintf(stderr, "b_client: %s: wrong bytes\n", key);
		failed = 1;
	}
	return ok;
}

static void *xalloc(size_t n)
{
	void *p = malloc(n);

	if (!p) {
		fprintf(stderr, "b_client: out of memory\n");
		exit(1);
	}
	memset(p, 1, n);	/* fault in: no page faults in the timed loops */
	return p;
}

static struct kvp *open_with(const char *const *extra)
{
	const char *all[32];
	struct kvp_open_opts o = { .config_file = conf, .overrides = all };
	struct kvp *k;
	int n = 0, err;

	for (int i = 0; i < novs; i++)
		all[n++] = ovs[i];
	for (int i = 0; extra && extra[i]; i++)
		all[n++] = extra[i];
	all[n] = NULL;
	k = kvp_open(&o, &err);
	if (!k) {
		fprintf(stderr, "b_client: open: %s\n", kvp_strerror(err));
		exit(1);
	}
	return k;
}

static void must(int rc, const char *what)
{
	if (rc < 0) {
		fprintf(stderr, "b_client: %s: %s\n", what, kvp_errname(rc));
		exit(1);
	}
}

/* ---- memcpy references ---- */

/* nref 1 MiB buffers allocated (and faulted in) once: the sources of the
 * gather references, the destinations of the scatter ones; plus 16 on the
 * other side. */
static uint8_t **refpool, *refside[16];

static void ref_init(void)
{
	if (refpool)
		return;
	refpool = malloc(sizeof(*refpool) * (size_t)nref);
	if (!refpool) {
		fprintf(stderr, "b_client: out of memory\n");
		exit(1);
	}
	for (int i = 0; i < nref; i++)
		refpool[i] = xalloc(MIB);
	for (int i = 0; i < 16; i++)
		refside[i] = xalloc(MIB);
}

/* Reads n different sources into nd rotating destinations (a get: many
 * extents -> the caller's buffer(s)). */
static double ref_gather(size_t len, int n, int nd)
{
	double t0, t;
	uint64_t bytes = 0;

	ref_init();
	t0 = now();
	for (int i = 0; (t = now()) - t0 < secs; i++) {
		memcpy(refside[i % nd], refpool[i % n], len);
		bytes += len;
	}
	return (double)bytes / (t - t0);
}

/* ns rotating sources into n different destinations (a put: the caller's
 * buffer(s) -> many extents). */
static double ref_scatter(size_t len, int ns, int n)
{
	double t0, t;
	uint64_t bytes = 0;

	ref_init();
	t0 = now();
	for (int i = 0; (t = now()) - t0 < secs; i++) {
		memcpy(refpool[i % n], refside[i % ns], len);
		bytes += len;
	}
	return (double)bytes / (t - t0);
}

/* ---- pool measurements ---- */

static char **make_keys(const char *prefix, int n)
{
	char **keys = malloc(sizeof(*keys) * (size_t)n);

	for (int i = 0; i < n; i++) {
		keys[i] = malloc(64);
		snprintf(keys[i], 64, "%s-%05d", prefix, i);
	}
	return keys;
}

static void free_keys(char **keys, int n)
{
	for (int i = 0; i < n; i++)
		free(keys[i]);
	free(keys);
}

/* Puts n objects of len under prefix (untimed setup). */
static char **preload(struct kvp *k, const char *prefix, int n, size_t len)
{
	char **keys = make_keys(prefix, n);
	void *v = xalloc(len);

	for (int i = 0; i < n; i++) {
		fill(v, len, keys[i]);
		must(kvp_put_from(k, keys[i], v, len), "preload put");
	}
	free(v);
	return keys;
}

/* Single-object get_into in rotation over the preloaded keys. */
static double get_single(struct kvp *k, char **keys, int n, size_t len)
{
	void *dst = xalloc(len);
	uint64_t bytes = 0;
	double t0 = now(), t;

	for (int i = 0; (t = now()) - t0 < secs; i++) {
		int64_t rc = kvp_get_into(k, keys[i % n], dst, len);

		must((int)(rc < 0 ? rc : 0), "get_into");
		bytes += (uint64_t)rc;
	}
	must((int)kvp_get_into(k, keys[0], dst, len), "get_into");
	check(dst, len, keys[0]);
	free(dst);
	return (double)bytes / (t - t0);
}

/* Single 4 KiB get_into in rotation, each call timed: ops/s, and in
 * *p50 the median latency in us. The "small gets without the
 * master on the hot path" is this call on a handle with optimistic reads
 * against the same call on one without (every get asks the master). */
#define LAT_MAX (1 << 20)
static uint64_t lat_ns[LAT_MAX];

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double get_small(struct kvp *k, char **keys, int n, size_t len, double *p50)
{
	void *dst = xalloc(len);
	uint64_t ops = 0;
	size_t nl = 0;
	double t0 = now(), t, t1 = t0;

	for (int i = 0; (t = now()) - t0 < secs; i++) {
		int64_t rc = kvp_get_into(k, keys[i % n], dst, len);
		double t2 = now();

		must((int)(rc < 0 ? rc : 0), "get_into");
		if (nl < LAT_MAX)
			lat_ns[nl++] = (uint64_t)((t2 - t) * 1e9);
		t1 = t2;
		ops++;
	}
	qsort(lat_ns, nl, sizeof(*lat_ns), cmp_u64);
	*p50 = nl ? (double)lat_ns[nl / 2] / 1e3 : 0;
	must((int)kvp_get_into(k, keys[0], dst, len), "get_into");
	check(dst, len, keys[0]);
	free(dst);
	return (double)ops / (t1 - t0);
}

/* batch_exists of b keys per call that all exist: keys/s. */
static double exists_batch(struct kvp *k, char **keys, int n, int b)
{
	int *res = malloc(sizeof(*res) * (size_t)b);
	uint64_t done = 0;
	double t0 = now(), t;

	for (int i = 0; (t = now()) - t0 < secs; i++) {
		must(kvp_batch_exists(k, (size_t)b, (const char *const *)keys + (i * b) % (n - b + 1),
				      res), "batch_exists");
		for (int j = 0; j < b; j++)
			if (res[j] != 1) {
				fprintf(stderr, "b_client: batch_exists: a stored key is missing (%d)\n",
					res[j]);
				failed = 1;
			}
		done += (uint64_t)b;
	}
	free(res);
	return (double)done / (t - t0);
}

/* batch_get_into of b objects per call over the preloaded keys; returns
 * bytes/s (ops/s = that / len). */
static double get_batch(struct kvp *k, char **keys, int n, size_t len, int b)
{
	void **dst = malloc(sizeof(*dst) * (size_t)b);
	size_t *caps = malloc(sizeof(*caps) * (size_t)b);
	int64_t *res = malloc(sizeof(*res) * (size_t)b);
	const char **bk = malloc(sizeof(*bk) * (size_t)b);
	uint64_t bytes = 0;
	double t0, t;

	for (int j = 0; j < b; j++) {
		dst[j] = xalloc(len);
		caps[j] = len;
	}
	t0 = now();
	for (int i = 0; (t = now()) - t0 < secs; i++) {
		for (int j = 0; j < b; j++)
			bk[j] = keys[(i * b + j) % n];
		must(kvp_batch_get_into(k, (size_t)b, bk, dst, caps, res), "batch_get_into");
		for (int j = 0; j < b; j++) {
			must((int)(res[j] < 0 ? res[j] : 0), "batch_get_into item");
			bytes += (uint64_t)res[j];
		}
	}
	for (int j = 0; j < b; j++) {
		check(dst[j], len, bk[j]);
		free(dst[j]);
	}
	free(dst);
	free(caps);
	free(res);
	free(bk);
	last_bytes = (double)bytes;
	return (double)bytes / (t - t0);
}

/* Puts rounds of `per` fresh objects, b per call (b = 1: kvp_put_from),
 * removing them between rounds (untimed). bytes/s. */
static double put_rounds(struct kvp *k, const char *prefix, int per, size_t len, int b)
{
	char **keys = make_keys(prefix, per);
	void **src = malloc(sizeof(*src) * (size_t)b);
	size_t *lens = malloc(sizeof(*lens) * (size_t)b);
	int *res = malloc(sizeof(*res) * (size_t)b);
	uint64_t bytes = 0;
	double busy = 0;
	char pfx[64];

	/* One source buffer per batch slot, the value of the first key that
	 * uses it; keys of later slots reuse it (verified below on one). */
	for (int j = 0; j < b; j++) {
		src[j] = xalloc(len);
		fill(src[j], len, keys[j]);
		lens[j] = len;
	}
	snprintf(pfx, sizeof(pfx), "%s-", prefix);
	while (busy < secs) {
		double t0 = now();

		for (int i = 0; i < per; i += b) {
			if (b == 1) {
				must(kvp_put_from(k, keys[i], src[0], len), "put_from");
			} else {
				must(kvp_batch_put_from(k, (size_t)b, (const char *const *)keys + i,
							(const void *const *)src, lens, res),
				     "batch_put_from");
				for (int j = 0; j < b; j++)
					must(res[j], "batch_put_from item");
			}
			bytes += (uint64_t)b * len;
		}
		busy += now() - t0;
		{
			void *g = xalloc(len);

			must((int)kvp_get_into(k, keys[0], g, len), "verify get");
			check(g, len, keys[0]);
			free(g);
		}
		must(kvp_remove_prefix(k, pfx, KVP_REMOVE_FORCE, NULL), "remove_prefix");
	}
	for (int j = 0; j < b; j++)
		free(src[j]);
	free(src);
	free(lens);
	free(res);
	free_keys(keys, per);
	return (double)bytes / busy;
}

/* T threads, each doing single-object get_into (put_from when put) of len
 * over its own keys, or with batch > 1 batch_get_into over keys / rounds
 * of batch_put_from of n fresh objects under its own prefix, batch per
 * call: as many calls in flight as redis-benchmark -c 4 has connections.
 * bytes/s, the sum of the threads' rates. */
struct thr {
	struct kvp *k;
	char **keys;
	int n;
	size_t len;
	int put;
	int batch;
	double rate;
	char prefix[32];
};

static void *thr_main(void *arg)
{
	struct thr *t = arg;

	if (t->batch > 1 && t->put)
		t->rate = put_rounds(t->k, t->prefix, t->n, t->len, t->batch);
	else if (t->batch > 1)
		t->rate = get_batch(t->k, t->keys, t->n, t->len, t->batch);
	else if (t->put)
		t->rate = put_rounds(t->k, t->prefix, nput / 4 ? nput / 4 : 1, t->len, 1);
	else
		t->rate = get_single(t->k, t->keys, t->n, t->len);
	return NULL;
}

static double threads(struct kvp *k, char **keys, int n, size_t len, int nt, int put, int batch,
		      const char *prefix)
{
	pthread_t th[16];
	struct thr t[16];
	double sum = 0;

	for (int i = 0; i < nt; i++) {
		t[i] = (struct thr){ .k = k, .keys = keys, .n = n, .len = len, .put = put,
				     .batch = batch };
		snprintf(t[i].prefix, sizeof(t[i].prefix), "%s%d", prefix, i);
		pthread_create(&th[i], NULL, thr_main, &t[i]);
	}
	for (int i = 0; i < nt; i++) {
		pthread_join(th[i], NULL);
		sum += t[i].rate;
	}
	return sum;
}

/* ---- paired measurements ---- */

/* On a shared machine the load changes from second to second, so a
 * reference measured once, before or after, says little. paired() runs
 * measurement and reference in alternating slices (PAIR_ROUNDS of each,
 * secs in all) and prints each one's median and the median of the per-slice
 * ratios ("NAME_ratio"). */
#define PAIR_ROUNDS 8

static struct kvp *pk;
static char **pkeys;

static double m_get1(void) { return get_single(pk, pkeys, nget, MIB); }
static double m_get16(void) { return get_batch(pk, pkeys, nget, MIB, 16); }
static double m_put1(void) { return put_rounds(pk, "bench/lp", nput, MIB, 1); }
static double m_put16(void) { return put_rounds(pk, "bench/lbp", nput, MIB, 16); }
static double r_gather1(void) { return ref_gather(MIB, nget, 1); }
static double r_gather16(void) { return ref_gather(MIB, nget, 16); }
static double r_scatter1(void) { return ref_scatter(MIB, 1, nput); }
static double r_scatter16(void) { return ref_scatter(MIB, 16, nput); }

/* 4 KiB single gets and 64-key exists, optimistic (pk) against the
 * master path (pm): the p50s of the last slice of each. */
static struct kvp *pm;
static char **skeys;
static double p50_opt, p50_master;

static double m_get4k(void) { return get_small(pk, skeys, nsmall, 4 << 10, &p50_opt); }
static double r_get4k(void) { return get_small(pm, skeys, nsmall, 4 << 10, &p50_master); }
static double m_exists(void) { return exists_batch(pk, skeys, nsmall, BATCH_SMALL); }
static double r_exists(void) { return exists_batch(pm, skeys, nsmall, BATCH_SMALL); }

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void paired(const char *name, double (*m)(void), double (*ref)(void))
{
	double mv[PAIR_ROUNDS], rv[PAIR_ROUNDS], ratio[PAIR_ROUNDS], all = secs;

	if (!wanted(name))
		return;
	secs = all / (2 * PAIR_ROUNDS);
	for (int i = 0; i < PAIR_ROUNDS; i++) {
		rv[i] = ref();
		mv[i] = m();
		ratio[i] = mv[i] / rv[i];
	}
	secs = all;
	printf("%s %.0f\n%s_ref %.0f\n%s_ratio %.3f\n", name, median(mv, PAIR_ROUNDS), name,
	       median(rv, PAIR_ROUNDS), name, median(ratio, PAIR_ROUNDS));
}

int main(int argc, char **argv)
{
	const char *tcp[] = { "client.protocol=tcp", "client.connections_per_node=4", NULL };
	const char *loc[] = { "client.protocol=local", NULL };
	struct kvp *kl, *kt;
	char **big, **k64, **k4;
	int opt, wait_ready = 0, tcp_only = 0;

	while ((opt = getopt(argc, argv, "c:t:n:o:p:wx:T")) != -1) {
		switch (opt) {
		case 'n':
			nget = nput = nref = atoi(optarg);
			if (nget < 16 || nget % 16) {
				/* the 1 MiB batch runs put whole batches of 16 */
				fprintf(stderr, "b_client: -n: a multiple of 16\n");
				return 2;
			}
			/* whole batches of BATCH_SMALL: put_rounds() puts them per batch */
			nsmall = (4 * nget + BATCH_SMALL - 1) / BATCH_SMALL * BATCH_SMALL;
			break;
		case 'x': only = optarg; break;
		case 'p': node_pid = atoi(optarg); break;
		case 'T': tcp_only = 1; break;
		case 'w': wait_ready = 1; break;
		case 'c': conf = optarg; break;
		case 't': secs = atof(optarg); break;
		case 'o': if (novs < 15) ovs[novs++] = optarg; break;
		default:
			fprintf(stderr, "usage: b_client -c POOL.INI [-t SECONDS] [-n OBJECTS] [-o k=v]...\n");
			return 2;
		}
	}
	if (!conf) {
		fprintf(stderr, "usage: b_client -c POOL.INI [-t SECONDS] [-n OBJECTS] [-o k=v]...\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (wait_ready) {
		struct kvp_open_opts o = { .config_file = conf };

		for (int i = 0; i < 300; i++) {
			struct kvp_info info;
			struct kvp *k = kvp_open(&o, NULL);
			size_t n = 0;

			if (k && kvp_info(k, &info) == 0) {
				n = info.nnodes;
				kvp_info_free(&info);
			}
			kvp_close(k);
			if (n)
				return 0;
			usleep(100000);
		}
		return 1;
	}
	kt = open_with(tcp);
	kl = tcp_only ? kt : open_with(loc);

	/* 1 MiB, local path, each interleaved with its memcpy reference */
	big = preload(kl, "bench/big", nget, MIB);
	pk = kl;
	pkeys = big;
	if (!tcp_only) {
		paired("local_get_into_1m", m_get1, r_gather1);
		paired("local_batch_get_1m_x16", m_get16, r_gather16);
		paired("local_put_from_1m", m_put1, r_scatter1);
		paired("local_batch_put_1m_x16", m_put16, r_scatter16);
	}

	/* 1 MiB over TCP, 4 connections */
	MEASURE("tcp_get_into_1m_1thr", get_single(kt, big, nget, MIB));
	MEASURE_CPU("tcp_batch_get_1m_x16", get_batch(kt, big, nget, MIB, 16));
	MEASURE("tcp_get_into_1m_4thr", threads(kt, big, nget, MIB, 4, 0, 1, "bench/tg"));
	MEASURE("tcp_put_from_1m_1thr", put_rounds(kt, "bench/tp", nput, MIB, 1));
	MEASURE("tcp_batch_put_1m_x16", put_rounds(kt, "bench/tbp", nput, MIB, 16));
	MEASURE("tcp_put_from_1m_4thr", threads(kt, NULL, 0, MIB, 4, 1, 1, "bench/tpt"));

	/* small values, batches of 64: ops/s */
	k64 = preload(kl, "bench/s64", nsmall, 64 << 10);
	k4 = preload(kl, "bench/s4", nsmall, 4 << 10);
	if (!tcp_only) {
		MEASURE("local_batch_get_64k_x64_ops", get_batch(kl, k64, nsmall, 64 << 10, BATCH_SMALL) / (64 << 10));
		MEASURE("local_batch_get_4k_x64_ops", get_batch(kl, k4, nsmall, 4 << 10, BATCH_SMALL) / (4 << 10));
	}
	MEASURE("tcp_batch_get_64k_x64_ops", get_batch(kt, k64, nsmall, 64 << 10, BATCH_SMALL) / (64 << 10));
	MEASURE("tcp_batch_get_4k_x64_ops", get_batch(kt, k4, nsmall, 4 << 10, BATCH_SMALL) / (4 << 10));
	/* the same with 4 threads: redis-benchmark -c 4's concurrency */
	MEASURE("tcp_batch_get_64k_x64_4thr_ops",
		threads(kt, k64, nsmall, 64 << 10, 4, 0, BATCH_SMALL, "") / (64 << 10));
	MEASURE("tcp_batch_get_4k_x64_4thr_ops",
		threads(kt, k4, nsmall, 4 << 10, 4, 0, BATCH_SMALL, "") / (4 << 10));
	if (!tcp_only && (wanted("local_get_4k_opt_ops") || wanted("local_exists_x64_opt_keys"))) {
		/* a handle like kl that asks the master for every get */
		const char *nopt[] = { "client.protocol=local", "client.optimistic_reads=false", NULL };

		pm = open_with(nopt);
		pk = kl;
		skeys = k4;
		/* every location seen by kl; pm connected and its segment mapped */
		get_batch(kl, k4, nsmall, 4 << 10, BATCH_SMALL);
		get_batch(pm, k4, nsmall, 4 << 10, BATCH_SMALL);
		paired("local_get_4k_opt_ops", m_get4k, r_get4k);
		if (wanted("local_get_4k_opt_ops"))
			printf("local_get_4k_opt_p50_us %.2f\nlocal_get_4k_master_p50_us %.2f\n", p50_opt,
			       p50_master);
		paired("local_exists_x64_opt_keys", m_exists, r_exists);
		kvp_close(pm);
	}
	if (!tcp_only) {
		MEASURE("local_batch_put_64k_x64_ops", put_rounds(kl, "bench/p64", nsmall, 64 << 10, BATCH_SMALL) / (64 << 10));
		MEASURE("local_batch_put_4k_x64_ops", put_rounds(kl, "bench/p4", nsmall, 4 << 10, BATCH_SMALL) / (4 << 10));
	}
	MEASURE("tcp_batch_put_64k_x64_ops", put_rounds(kt, "bench/q64", nsmall, 64 << 10, BATCH_SMALL) / (64 << 10));
	MEASURE("tcp_batch_put_4k_x64_ops", put_rounds(kt, "bench/q4", nsmall, 4 << 10, BATCH_SMALL) / (4 << 10));
	/* each thread puts rounds of nsmall objects of its own */
	MEASURE("tcp_batch_put_64k_x64_4thr_ops",
		threads(kt, NULL, nsmall, 64 << 10, 4, 1, BATCH_SMALL, "bench/q64t") / (64 << 10));
	MEASURE("tcp_batch_put_4k_x64_4thr_ops",
		threads(kt, NULL, nsmall, 4 << 10, 4, 1, BATCH_SMALL, "bench/q4t") / (4 << 10));

	{
		struct kvp_stats s;

		if (!tcp_only) {
			kvp_stats(kl, &s);
			printf("local_checksum_mismatches %llu\n", (unsigned long long)s.checksum_mismatches);
		}
		kvp_stats(kt, &s);
		printf("tcp_checksum_mismatches %llu\n", (unsigned long long)s.checksum_mismatches);

	}
	kvp_remove_all(kl, KVP_REMOVE_FORCE, NULL);
	free_keys(big, nget);
	free_keys(k64, nsmall);
	free_keys(k4, nsmall);
	kvp_close(kt);
	if (kl != kt)
		kvp_close(kl);
	return failed;
}

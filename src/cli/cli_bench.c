/* cli_bench: `kvpool bench` — workloads against a pool with verified values.
 * T worker threads share one libkvpool handle (the API is thread-safe); each
 * owns a contiguous range of key indices (put/get/exists) or its own working
 * set of keys (mixed), so expected results are known without locks. The main
 * thread draws the progress bar and merges per-thread counters and latencies.
 */
#include "cli_bench.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cli_util.h"
#include "kvpool_i.h"

/* Values start at a key-dependent 8-byte offset inside the first
 * BENCH_SLACK bytes of the pattern: 8192 distinct windows, so bytes of the
 * wrong key or of an older put are caught (but for a 1/8192 chance). */
#define BENCH_SLACK (64u << 10)
#define BENCH_MAX_THREADS 256
#define BENCH_MAX_REPORTED 10	/* error lines printed, then only counted */

enum bench_op { BENCH_PUT, BENCH_GET, BENCH_EXISTS, BENCH_MIXED };
static const char *const bench_op_names[] = { "put", "get", "exists", "mixed" };

struct bench_cfg {
	enum bench_op op;
	uint64_t size_min, size_max;
	uint64_t count;
	uint64_t threads;
	uint64_t batch;
	uint64_t keys;		/* mixed: working set per thread */
	uint64_t seed;
	uint64_t wait_ms;	/* for a segment to put into; default client.timeout */
	const char *path;	/* NULL: [client] protocol */
	char prefix[1024];
	bool existing, keep, json;
	bool hashed;		/* --hashed-keys */
};

struct bench;

struct bench_thr {
	struct bench *b;
	unsigned idx;
	pthread_t tid;
	enum bench_op op;	/* this phase's operation */
	uint64_t lo, hi;	/* key indices [lo, hi); mixed: number of ops */
	uint64_t *lat;		/* ns per call */
	size_t nlat;
	uint64_t ok, missing, errors, mismatches, bytes;
	uint64_t t0, t1;	/* CLOCK_MONOTONIC ns */
	char *buf;		/* get buffers: batch x size_max */
	char *keys;		/* batch x keylen */
	uint64_t unput;		/* get/exists: of those failed, keys whose put failed */
	uint8_t *present;	/* mixed */
	uint32_t *ver;		/* mixed: puts of each key so far */
};

struct bench {
	struct bench_cfg cfg;
	struct kvp *kvp;
	char *pattern;
	size_t keylen;
	uint8_t *put_failed;	/* get/exists: per key index, its untimed put failed */
	atomic_uint_fast64_t done;
	atomic_uint finished;
	atomic_uint reported;
	struct bench_thr *thr;
};

/* Key i's name: the prefix, then i in 8 digits or, --hashed-keys, a
 * bijective hash of i in 8 hex digits (murmur3's 32-bit finalizer: each
 * step inverts), so that keys sort in no relation to the order they were
 * put in, as engines' content-hash keys do (a table file or a snapshot,
 * in key order, then names extents in no order: docs/ha.md). */
static void bench_name(const struct bench_cfg *c, uint64_t i, char *out, size_t cap)
{
	if (!c->hashed) {
		snprintf(out, cap, "%s%08" PRIu64, c->prefix, i);
		return;
	}
	uint32_t h = (uint32_t)i;

	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	snprintf(out, cap, "%s%08" PRIx32, c->prefix, h);
}

static volatile sig_atomic_t bench_stop;

static void bench_on_sigint(int sig)
{
	(void)sig;
	bench_stop = 1;
}

static uint64_t hash_key(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;	/* FNV-1a */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return cli_mix64(h);
}

/* Where in the pattern the value of (key, version) starts and how long it
 * is; the same in every process that uses the same seed and size range. */
static void bench_value(const struct bench *b, const char *key, uint64_t ver,
			size_t *off, size_t *len)
{
	const struct bench_cfg *c = &b->cfg;
	uint64_t h = cli_mix64(hash_key(key) ^ cli_mix64(ver + c->seed));

	*off = (size_t)(h % (BENCH_SLACK / 8)) * 8;
	if (c->size_min == c->size_max) {
		*len = (size_t)c->size_min;
	} else {
		/* log-uniform: most values small, a few near the maximum */
		double u = (double)(cli_mix64(h ^ 0x9e3779b97f4a7c15ULL) >> 11) * 0x1.0p-53;
		double lmin = log((double)c->size_min), lmax = log((double)c->size_max + 1.0);
		double v = exp(lmin + u * (lmax - lmin));

		*len = v < (double)c->size_min ? (size_t)c->size_min :
		       v > (double)c->size_max ? (size_t)c->size_max : (size_t)v;
	}
}

static char *bench_key(struct bench_thr *t, size_t slot)
{
	return t->keys + slot * t->b->keylen;
}

static void bench_report_err(struct bench *b, const char *key, int err, const char *what)
{
	if (atomic_fetch_add(&b->reported, 1) >= BENCH_MAX_REPORTED)
		return;
	if (what)
		cli_error("bench", key, err, "%s", what);
	else
		cli_error("bench", key, err, NULL);
}

/* Verifies one got value; counts it. unput: the key's untimed put failed,
 * so its absence is that failure (already reported), not a lost object. */
static void bench_check_get(struct bench_thr *t, const char *key, uint64_t ver, int64_t r,
			    const char *got, bool unput)
{
	struct bench *b = t->b;
	size_t off, len;

	if (r == KVP_ENOTFOUND && unput) {
		t->errors++;
		t->unput++;
		return;
	}
	if (r == KVP_ENOTFOUND) {
		t->missing++;
		return;
	}
	if (r < 0) {
		t->errors++;
		bench_report_err(b, key, (int)r, NULL);
		return;
	}
	bench_value(b, key, ver, &off, &len);
	if ((uint64_t)r != len || memcmp(got, b->pattern + off, len) != 0) {
		t->mismatches++;
		bench_report_err(b, key, 0, (uint64_t)r != len ? "WRONG LENGTH returned by get"
							     : "WRONG BYTES returned by get");
		return;
	}
	t->ok++;
	t->bytes += len;
}

static void bench_range(struct bench_thr *t)
{
	struct bench *b = t->b;
	const struct bench_cfg *c = &b->cfg;
	size_t B = (size_t)c->batch;
	const char *keys[B];
	const void *vbufs[B];
	void *gbufs[B];
	size_t lens[B], caps[B];
	int res[B];
	int64_t res64[B];

	for (size_t j = 0; j < B; j++) {
		keys[j] = bench_key(t, j);
		gbufs[j] = t->buf ? t->buf + j * c->size_max : NULL;
		caps[j] = (size_t)c->size_max;
	}
	for (uint64_t i = t->lo; i < t->hi && !bench_stop; i += B) {
		size_t n = t->hi - i < B ? (size_t)(t->hi - i) : B;
		uint64_t s;
		int r = 0;

		for (size_t j = 0; j < n; j++) {
			size_t off;

			bench_name(c, i + j, bench_key(t, j), b->keylen);
			bench_value(b, keys[j], 0, &off, &lens[j]);
			vbufs[j] = b->pattern + off;
		}
		s = clock_now_ns();
		switch (t->op) {
		case BENCH_PUT:
			if (n == 1)
				res[0] = kvp_put_from(b->kvp, keys[0], vbufs[0], lens[0]);
			else
				r = kvp_batch_put_from(b->kvp, n, keys, vbufs, lens, res);
			break;
		case BENCH_GET:
			if (n == 1)
				res64[0] = kvp_get_into(b->kvp, keys[0], gbufs[0], caps[0]);
			else
				r = kvp_batch_get_into(b->kvp, n, keys, gbufs, caps, res64);
			break;
		case BENCH_EXISTS:
			if (n == 1)
				res[0] = kvp_exists(b->kvp, keys[0]);
			else
				r = kvp_batch_exists(b->kvp, n, keys, res);
			break;
		case BENCH_MIXED:
			break;
		}
		t->lat[t->nlat++] = clock_now_ns() - s;
		for (size_t j = 0; j < n; j++) {
			int rj = r ? r : res[j];

			switch (t->op) {
			case BENCH_PUT:
				if (rj == 0) {
					t->ok++;
					t->bytes += lens[j];
				} else {
					t->errors++;
					if (b->put_failed)
						b->put_failed[i + j] = 1;
					bench_report_err(b, keys[j], rj, NULL);
				}
				break;
			case BENCH_GET:
				bench_check_get(t, keys[j], 0, r ? r : res64[j], gbufs[j],
						b->put_failed && b->put_failed[i + j]);
				break;
			case BENCH_EXISTS:
				if (rj == 1) {
					t->ok++;
				} else if (rj == 0 && b->put_failed && b->put_failed[i + j]) {
					t->errors++;
					t->unput++;
				} else if (rj == 0) {
					t->missing++;
				} else {
					t->errors++;
					bench_report_err(b, keys[j], rj, NULL);
				}
				break;
			case BENCH_MIXED:
				break;
			}
		}
		atomic_fetch_add(&b->done, n);
	}
}

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* Mixed: each thread owns keys m<thread>-<k>; what each call must return
 * follows from the thread's own history, so any surprise is a pool bug
 * (except objects gone from a present key: evictions, counted as missing). */
static void bench_mixed(struct bench_thr *t)
{
	struct bench *b = t->b;
	const struct bench_cfg *c = &b->cfg;
	uint64_t rng = cli_mix64(c->seed * 1000003u + t->idx + 1) | 1;
	char *key = bench_key(t, 0);

	for (uint64_t i = 0; i < t->hi && !bench_stop; i++) {
		uint64_t k = xorshift(&rng) % c->keys;
		unsigned dice = (unsigned)(xorshift(&rng) % 100);
		size_t off, len;
		int64_t r;
		uint64_t s;

		snprintf(key, b->keylen, "%sm%u-%06" PRIu64, c->prefix, t->idx, k);
		s = clock_now_ns();
		if (!t->present[k] && dice < 80) {
			t->ver[k]++;
			bench_value(b, key, t->ver[k], &off, &len);
			r = kvp_put_from(b->kvp, key, b->pattern + off, len);
			t->lat[t->nlat++] = clock_now_ns() - s;
			if (r == 0) {
				t->present[k] = 1;
				t->ok++;
				t->bytes += len;
			} else {
				t->errors++;
				bench_report_err(b, key, (int)r, NULL);
			}
		} else if (!t->present[k] && dice < 90) {
			r = kvp_get_into(b->kvp, key, t->buf, (size_t)c->size_max);
			t->lat[t->nlat++] = clock_now_ns() - s;
			if (r == KVP_ENOTFOUND) {
				t->ok++;
			} else if (r >= 0) {
				t->mismatches++;
				bench_report_err(b, key, 0, "get returned a removed object");
			} else {
				t->errors++;
				bench_report_err(b, key, (int)r, NULL);
			}
		} else if (!t->present[k]) {
			r = kvp_exists(b->kvp, key);
			t->lat[t->nlat++] = clock_now_ns() - s;
			if (r == 0) {
				t->ok++;
			} else if (r == 1) {
				t->mismatches++;
				bench_report_err(b, key, 0, "exists is true for a removed object");
			} else {
				t->errors++;
				bench_report_err(b, key, (int)r, NULL);
			}
		} else if (dice < 50) {
			r = kvp_get_into(b->kvp, key, t->buf, (size_t)c->size_max);
			t->lat[t->nlat++] = clock_now_ns() - s;
			bench_check_get(t, key, t->ver[k], r, t->buf, false);
			if (r == KVP_ENOTFOUND)
				t->present[k] = 0;
		} else if (dice < 70) {
			r = kvp_exists(b->kvp, key);
			t->lat[t->nlat++] = clock_now_ns() - s;
			if (r == 1) {
				t->ok++;
			} else if (r == 0) {
				t->missing++;
				t->present[k] = 0;
			} else {
				t->errors++;
				bench_report_err(b, key, (int)r, NULL);
			}
		} else {
			/* Force: our own recent get may still hold a read lease. */
			r = kvp_remove(b->kvp, key, KVP_REMOVE_FORCE);
			t->lat[t->nlat++] = clock_now_ns() - s;
			if (r == 0) {
				t->ok++;
			} else if (r == KVP_ENOTFOUND) {
				t->missing++;
			} else {
				t->errors++;
				bench_report_err(b, key, (int)r, NULL);
			}
			if (r == 0 || r == KVP_ENOTFOUND)
				t->present[k] = 0;
		}
		atomic_fetch_add(&b->done, 1);
	}
}

static void *bench_thread(void *arg)
{
	struct bench_thr *t = arg;

	t->t0 = clock_now_ns();
	if (t->op == BENCH_MIXED)
		bench_mixed(t);
	else
		bench_range(t);
	t->t1 = clock_now_ns();
	atomic_fetch_add(&t->b->finished, 1);
	return NULL;
}

static void bench_progress(struct bench *b, const char *what, uint64_t total, uint64_t t0,
			   bool final)
{
	uint64_t done = atomic_load(&b->done);
	double secs = (double)(clock_now_ns() - t0) / 1e9;
	int width = 30, fill = total ? (int)(done * (uint64_t)width / total) : width;

	fprintf(stderr, "\r%-8s [%.*s%*s] %3d%% %" PRIu64 "/%" PRIu64 "  %.0f ops/s ", what,
		fill, "##############################", width - fill, "",
		total ? (int)(done * 100 / total) : 100, done, total,
		secs > 0 ? (double)done / secs : 0.0);
	if (final)
		fputc('\n', stderr);
}

/* Runs one phase over all threads; returns its wall time in ns. */
static uint64_t bench_phase(struct bench *b, enum bench_op op, const char *what)
{
	const struct bench_cfg *c = &b->cfg;
	bool tty = isatty(STDERR_FILENO);
	uint64_t t0 = clock_now_ns(), first = UINT64_MAX, last = 0;
	unsigned started = 0;

	atomic_store(&b->done, 0);
	atomic_store(&b->finished, 0);
	for (unsigned i = 0; i < c->threads; i++) {
		struct bench_thr *t = &b->thr[i];

		t->op = op;
		t->nlat = 0;
		t->ok = t->missing = t->errors = t->mismatches = t->bytes = t->unput = 0;
		if (op == BENCH_MIXED) {
			t->lo = 0;
			t->hi = c->count / c->threads + (i < c->count % c->threads);
		} else {
			t->lo = c->count * i / c->threads;
			t->hi = c->count * (i + 1) / c->threads;
		}
		if (pthread_create(&t->tid, NULL, bench_thread, t) != 0) {
			cli_errorx("bench", "cannot start thread %u", i);
			bench_stop = 1;
			break;
		}
		started++;
	}
	while (atomic_load(&b->finished) < started) {
		struct timespec ts = { 0, 100 * 1000 * 1000 };

		nanosleep(&ts, NULL);
		if (tty && atomic_load(&b->finished) < started)
			bench_progress(b, what, c->count, t0, false);
	}
	if (tty)
		bench_progress(b, what, c->count, t0, true);
	for (unsigned i = 0; i < started; i++) {
		pthread_join(b->thr[i].tid, NULL);
		if (b->thr[i].t0 < first)
			first = b->thr[i].t0;
		if (b->thr[i].t1 > last)
			last = b->thr[i].t1;
	}
	return last > first ? last - first : 1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pctl_us(const uint64_t *v, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	i = (size_t)ceil(p * (double)n);
	if (i > 0)
		i--;
	if (i >= n)
		i = n - 1;
	return (double)v[i] / 1e3;
}

/* Single-thread memcpy of the same value sizes, as a reference the pool's
 * numbers can be read against. The pool copies between a segment of many
 * objects (not in cache) and the caller's buffers, so the reference copies
 * from (get) or into (put) a rotation of value-sized slots of 64 MiB or
 * more, to or from the same number of caller-side buffers as a call uses
 * (bounded to ~256 MiB of copying; setup untimed). */
static double bench_memcpy_gbs(struct bench *b)
{
	const struct bench_cfg *c = &b->cfg;
	size_t slot = (size_t)c->size_max, nbuf = (size_t)c->batch;
	size_t nslots = (64u << 20) / slot > 2 ? (64u << 20) / slot : 2;
	char *far = malloc(nslots * slot), *near = malloc(nbuf * slot);
	uint64_t total = 0, t0;
	size_t off, len;
	char key[64];

	if (!far || !near) {
		free(far);
		free(near);
		return 0;
	}
	memset(far, 1, nslots * slot);
	memset(near, 2, nbuf * slot);
	t0 = clock_now_ns();
	for (uint64_t i = 0; total < (256u << 20) && i < 1000000; i++) {
		char *f = far + (i % nslots) * slot, *n = near + (i % nbuf) * slot;

		snprintf(key, sizeof(key), "ref%08" PRIu64, i);
		bench_value(b, key, 0, &off, &len);
		if (c->op == BENCH_PUT)
			memcpy(f, b->pattern + off, len);
		else
			memcpy(n, f, len);
		total += len;
		__asm__ volatile("" : : "r"(f), "r"(n) : "memory");
	}
	t0 = clock_now_ns() - t0;
	free(far);
	free(near);
	return t0 ? (double)total / (double)t0 : 0;	/* bytes/ns = GB/s */
}

/* Removes every key the run may have created (untimed). */
static void bench_cleanup(struct bench *b)
{
	const struct bench_cfg *c = &b->cfg;
	const size_t chunk = 256;
	char (*names)[1100] = malloc(chunk * sizeof(*names));
	const char *ptrs[256];
	int res[256];
	uint64_t total = c->op == BENCH_MIXED ? c->threads * c->keys : c->count;
	size_t n = 0;

	if (!names)
		return;
	for (uint64_t i = 0; i < total; i++) {
		if (c->op == BENCH_MIXED)
			snprintf(names[n], sizeof(names[n]), "%sm%" PRIu64 "-%06" PRIu64, c->prefix,
				 i / c->keys, i % c->keys);
		else
			bench_name(c, i, names[n], sizeof(names[n]));
		ptrs[n] = names[n];
		if (++n == chunk || i + 1 == total) {
			kvp_batch_remove(b->kvp, n, ptrs, KVP_REMOVE_FORCE, res);
			n = 0;
		}
	}
	free(names);
}

static int bench_parse_size(const char *s, uint64_t *min, uint64_t *max)
{
	const char *dash = strchr(s, '-');
	char lo[64];

	if (!dash)
		return conf_parse_size(s, min) < 0 ? -1 : (*max = *min, 0);
	if ((size_t)(dash - s) >= sizeof(lo))
		return -1;
	memcpy(lo, s, (size_t)(dash - s));
	lo[dash - s] = '\0';
	if (conf_parse_size(lo, min) < 0 || conf_parse_size(dash + 1, max) < 0 || *min > *max)
		return -1;
	return 0;
}

static int bench_parse(struct bench_cfg *c, const struct kvp_conf *conf, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "op", required_argument, NULL, 'O' },
		{ "size", required_argument, NULL, 's' },
		{ "count", required_argument, NULL, 'n' },
		{ "threads", required_argument, NULL, 't' },
		{ "batch", required_argument, NULL, 'b' },
		{ "path", required_argument, NULL, 'p' },
		{ "prefix", required_argument, NULL, 'P' },
		{ "keys", required_argument, NULL, 'k' },
		{ "seed", required_argument, NULL, 'S' },
		{ "existing", no_argument, NULL, 'E' },
		{ "keep", no_argument, NULL, 'K' },
		{ "json", no_argument, NULL, 'j' },
		{ "wait", required_argument, NULL, 'W' },
		{ "hashed-keys", no_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t max_batch = conf->cluster.max_batch > 0 ? (uint64_t)conf->cluster.max_batch : 1;
	char host[64] = "host";
	int ch;

	memset(c, 0, sizeof(*c));
	c->size_min = c->size_max = 1 << 20;
	c->count = 1000;
	c->threads = c->batch = 1;
	c->keys = 32;
	c->seed = 1;
	c->wait_ms = conf->client.timeout;
	gethostname(host, sizeof(host) - 1);
	snprintf(c->prefix, sizeof(c->prefix), "bench/%s-%d/", host, (int)getpid());
	while ((ch = getopt_long(argc, argv, "O:s:n:t:b:", lo, NULL)) != -1) {
		switch (ch) {
		case 'O': {
			bool found = false;

			for (unsigned i = 0; i < 4; i++)
				if (!strcmp(optarg, bench_op_names[i])) {
					c->op = (enum bench_op)i;
					found = true;
				}
			if (!found)
				return cli_usage_error("bench", "--op: put, get, exists or mixed");
			break;
		}
		case 's':
			if (bench_parse_size(optarg, &c->size_min, &c->size_max) < 0 || c->size_min < 1)
				return cli_usage_error("bench", "--size: e.g. 4K, 1M or 1-8M");
			if (c->size_max > conf->cluster.max_object_size)
				return cli_usage_error("bench", "--size: more than cluster.max_object_size (%"
						       PRIu64 ")", conf->cluster.max_object_size);
			break;
		case 'n':
			if (cli_parse_u64(optarg, &c->count) < 0 || c->count < 1)
				return cli_usage_error("bench", "--count: a number >= 1");
			break;
		case 't':
			if (cli_parse_u64(optarg, &c->threads) < 0 || c->threads < 1 ||
			    c->threads > BENCH_MAX_THREADS)
				return cli_usage_error("bench", "--threads: 1..%d", BENCH_MAX_THREADS);
			break;
		case 'b':
			if (cli_parse_u64(optarg, &c->batch) < 0 || c->batch < 1 || c->batch > max_batch ||
			    c->batch > 256)
				return cli_usage_error("bench", "--batch: 1..%" PRIu64,
						       max_batch < 256 ? max_batch : 256);
			break;
		case 'p':
			if (strcmp(optarg, "local") && strcmp(optarg, "tcp") && strcmp(optarg, "rdma") &&
			    strcmp(optarg, "auto"))
				return cli_usage_error("bench", "--path: local, tcp, rdma or auto");
			c->path = optarg;
			break;
		case 'P':
			if (!optarg[0] || strlen(optarg) > 900)
				return cli_usage_error("bench", "--prefix: 1..900 bytes");
			snprintf(c->prefix, sizeof(c->prefix), "%s", optarg);
			break;
		case 'k':
			if (cli_parse_u64(optarg, &c->keys) < 0 || c->keys < 1 || c->keys > 1000000)
				return cli_usage_error("bench", "--keys: 1..1000000");
			break;
		case 'S':
			if (cli_parse_u64(optarg, &c->seed) < 0)
				return cli_usage_error("bench", "--seed: a number");
			break;
		case 'E':
			c->existing = true;
			break;
		case 'K':
			c->keep = true;
			break;
		case 'H':
			c->hashed = true;
			break;
		case 'j':
			c->json = true;
			break;
		case 'W':
			if (conf_parse_duration(optarg, &c->wait_ms) < 0)
				return cli_usage_error("bench", "--wait: a duration, e.g. 500ms, 10s or 0");
			break;
		default:
			return cli_usage_error("bench", "unknown option or missing argument: %s",
					       argv[optind - 1]);
		}
	}
	if (optind != argc)
		return cli_usage_error("bench", "unexpected argument '%s'", argv[optind]);
	if (c->op == BENCH_MIXED && c->batch > 1)
		return cli_usage_error("bench", "--op mixed makes single calls; drop --batch");
	if (c->hashed && c->op == BENCH_MIXED)
		return cli_usage_error("bench", "--hashed-keys names put/get/exists keys; not --op mixed");
	if (c->hashed && c->count > ((uint64_t)1 << 32))
		return cli_usage_error("bench", "--hashed-keys: --count up to 4294967296");
	return 0;
}

/* The pool's own rate: each thread's operations and bytes over the time it
 * spent inside library calls, summed over threads. The wall-clock rate of
 * the phase also holds the tool's verification of every value (a memcmp
 * that, for a batch, reads back megabytes no longer in cache), which is
 * not the pool's time. */
static void bench_call_rates(const struct bench *b, double *ops_s, double *gbs)
{
	*ops_s = *gbs = 0;
	for (unsigned i = 0; i < b->cfg.threads; i++) {
		const struct bench_thr *t = &b->thr[i];
		uint64_t busy = 0;

		for (size_t k = 0; k < t->nlat; k++)
			busy += t->lat[k];
		if (!busy)
			continue;
		*ops_s += (double)(t->ok + t->missing + t->errors + t->mismatches) * 1e9 / (double)busy;
		*gbs += (double)t->bytes / (double)busy;
	}
}

static void bench_print(const struct bench *b, const char *path, uint64_t wall_ns,
			const uint64_t *lat, size_t nlat, const struct bench_thr *sum, double ref_gbs,
			const struct kvp_stats *st0, const struct kvp_stats *st1)
{
	/* Which transfer path the library really took during the timed phase. */
	uint64_t local = st1->local_bytes - st0->local_bytes, tcp = st1->tcp_bytes - st0->tcp_bytes;
	uint64_t retries = st1->retries - st0->retries;
	const struct bench_cfg *c = &b->cfg;
	double secs = (double)wall_ns / 1e9;
	uint64_t ops = sum->ok + sum->missing + sum->errors + sum->mismatches;
	double wall_ops_s = (double)ops / secs, wall_gbs = (double)sum->bytes / (double)wall_ns;
	double ops_s, gbs;

	bench_call_rates(b, &ops_s, &gbs);
	double p50 = pctl_us(lat, nlat, 0.50), p99 = pctl_us(lat, nlat, 0.99);
	double p999 = pctl_us(lat, nlat, 0.999);

	if (c->json) {
		printf("{\"op\": \"%s\", \"size_min\": %" PRIu64 ", \"size_max\": %" PRIu64
		       ", \"count\": %" PRIu64 ", \"threads\": %" PRIu64 ", \"batch\": %" PRIu64
		       ", \"path\": ", bench_op_names[c->op], c->size_min, c->size_max, c->count,
		       c->threads, c->batch);
		cli_json_str(stdout, path, strlen(path));
		fputs(", \"prefix\": ", stdout);
		cli_json_str(stdout, c->prefix, strlen(c->prefix));
		printf(", \"hashed_keys\": %s", c->hashed ? "true" : "false");
		printf(", \"seconds\": %.6f, \"ops\": %" PRIu64 ", \"ops_per_s\": %.1f, \"bytes\": %"
		       PRIu64 ", \"gb_per_s\": %.4f, \"wall_ops_per_s\": %.1f, \"wall_gb_per_s\": %.4f"
		       ", \"calls\": %zu, \"lat_us\": {\"p50\": %.1f, "
		       "\"p99\": %.1f, \"p999\": %.1f}, \"ok\": %" PRIu64 ", \"missing\": %" PRIu64
		       ", \"errors\": %" PRIu64 ", \"put_failed\": %" PRIu64 ", \"mismatches\": %" PRIu64
		       ", \"local_bytes\": %" PRIu64 ", \"tcp_bytes\": %" PRIu64 ", \"retries\": %" PRIu64
		       ", \"memcpy_gb_per_s\": %.3f, \"interrupted\": %s}\n",
		       secs, ops, ops_s, sum->bytes, gbs, wall_ops_s, wall_gbs, nlat, p50, p99, p999,
		       sum->ok, sum->missing,
		       sum->errors, sum->unput, sum->mismatches, local, tcp, retries, ref_gbs,
		       bench_stop ? "true" : "false");
		return;
	}
	char s1[32], s2[32];

	if (c->size_min == c->size_max)
		printf("%s: %" PRIu64 " ops x %s, %" PRIu64 " thread%s, batch %" PRIu64 ", path %s\n",
		       bench_op_names[c->op], ops, cli_human_size(c->size_min, s1, sizeof(s1)),
		       c->threads, c->threads == 1 ? "" : "s", c->batch, path);
	else
		printf("%s: %" PRIu64 " ops x %s..%s, %" PRIu64 " thread%s, batch %" PRIu64 ", path %s\n",
		       bench_op_names[c->op], ops, cli_human_size(c->size_min, s1, sizeof(s1)),
		       cli_human_size(c->size_max, s2, sizeof(s2)), c->threads,
		       c->threads == 1 ? "" : "s", c->batch, path);
	printf("  time        %.3f s%s\n", secs, bench_stop ? " (interrupted)" : "");
	printf("  throughput  %.0f ops/s, %.3f GB/s (%s moved; time inside the calls)\n", ops_s,
	       gbs, cli_human_size(sum->bytes, s1, sizeof(s1)));
	printf("  wall clock  %.0f ops/s, %.3f GB/s (with this tool's verification of each value)\n",
	       wall_ops_s, wall_gbs);
	printf("  latency     p50 %.1f us, p99 %.1f us, p999 %.1f us (per call of %" PRIu64
	       " key%s)\n", p50, p99, p999, c->batch, c->batch == 1 ? "" : "s");
	if (local || tcp)
		printf("  transfers   %.0f%% local (shared memory), %.0f%% tcp%s\n",
		       100.0 * (double)local / (double)(local + tcp),
		       100.0 * (double)tcp / (double)(local + tcp), retries ? " (with retries)" : "");
	if (ref_gbs > 0 && sum->bytes)
		printf("  reference   memcpy %.2f GB/s on one thread, %s a 64 MiB rotation; "
		       "pool/memcpy = %.2f\n", ref_gbs, c->op == BENCH_PUT ? "into" : "out of",
		       gbs / ref_gbs);
	printf("  verified    %" PRIu64 " ok, %" PRIu64 " missing, %" PRIu64 " errors", sum->ok,
	       sum->missing, sum->errors);
	if (sum->unput)
		printf(" (%" PRIu64 " keys whose untimed put failed)", sum->unput);
	printf(", %" PRIu64 " wrong values\n", sum->mismatches);
}

/* Waits up to wait_ms for the pool to have somewhere to put: a node with
 * a mounted segment that is not draining. Without one every put of the run
 * would fail and a get run would report its keys as missing, which says
 * nothing about the pool's speed, so the run stops with the reason. */
static int bench_wait_capacity(struct bench *b, const struct kvp_conf *conf)
{
	uint64_t end = clock_now_ns() + b->cfg.wait_ms * 1000000u;
	int last = 0;
	size_t nodes = 0;

	for (;;) {
		struct kvp_info info;
		int rc = kvp_info(b->kvp, &info);

		if (rc == 0) {
			bool room = false;

			nodes = info.nnodes;
			for (size_t i = 0; i < info.nnodes; i++)
				if (info.nodes[i].capacity > 0 && !info.nodes[i].draining)
					room = true;
			kvp_info_free(&info);
			if (room)
				return 0;
		}
		last = rc;
		if (clock_now_ns() >= end || bench_stop)
			break;
		usleep(100 * 1000);
	}
	if (last < 0)
		cli_error("bench", conf->cluster.master, last,
			  "no answer about the pool's capacity within %.1f s",
			  (double)b->cfg.wait_ms / 1e3);
	else if (nodes == 0)
		cli_error("bench", conf->cluster.master, KVP_ENOSPC,
			  "no capacity in the pool after %.1f s: no node has mounted a segment "
			  "(start kvpool-node, or --wait longer)", (double)b->cfg.wait_ms / 1e3);
	else
		cli_error("bench", conf->cluster.master, KVP_ENOSPC,
			  "no capacity in the pool after %.1f s: all %zu nodes are draining",
			  (double)b->cfg.wait_ms / 1e3, nodes);
	return -1;
}

int cli_bench_main(const struct kvp_conf *conf, int argc, char **argv)
{
	struct bench b;
	struct kvp_conf bconf;
	char cerr[256];
	size_t pattern_len, nlat = 0;
	uint64_t *lat = NULL, wall, rng;
	struct bench_thr sum = { 0 }, prep = { 0 };
	struct kvp_stats st0, st1;
	struct sigaction sa, old_sa;
	const char *path;
	double ref = 0;
	int rc, err = 0;

	memset(&b, 0, sizeof(b));
	rc = bench_parse(&b.cfg, conf, argc, argv);
	if (rc)
		return rc;
	path = b.cfg.path ? b.cfg.path : conf->client.protocol;

	/* --path overrides [client] protocol of the loaded configuration. */
	bconf = *conf;
	if (b.cfg.path && conf_set(&bconf, "client", "protocol", b.cfg.path, CONF_SRC_CMDLINE,
				   cerr, sizeof(cerr)) < 0)
		return cli_usage_error("bench", "--path: %s", cerr);

	rc = CLI_EXIT_ERR;
	b.keylen = strlen(b.cfg.prefix) + 32;
	pattern_len = (size_t)b.cfg.size_max + BENCH_SLACK;
	b.pattern = malloc(pattern_len);
	b.thr = calloc((size_t)b.cfg.threads, sizeof(*b.thr));
	if (!b.pattern || !b.thr) {
		cli_error("bench", NULL, KVP_ENOMEM, NULL);
		goto out_free;
	}
	rng = cli_mix64(b.cfg.seed) | 1;
	for (size_t i = 0; i + 8 <= pattern_len; i += 8) {
		uint64_t x = xorshift(&rng);

		memcpy(b.pattern + i, &x, 8);
	}
	for (unsigned i = 0; i < b.cfg.threads; i++) {
		struct bench_thr *t = &b.thr[i];
		uint64_t share = b.cfg.count / b.cfg.threads + 1;

		t->b = &b;
		t->idx = i;
		t->lat = malloc((share + 1) * sizeof(*t->lat));
		t->keys = malloc((size_t)b.cfg.batch * b.keylen);
		if (b.cfg.op == BENCH_GET || b.cfg.op == BENCH_MIXED)
			t->buf = malloc((size_t)(b.cfg.batch * b.cfg.size_max));
		if (b.cfg.op == BENCH_MIXED) {
			t->present = calloc((size_t)b.cfg.keys, 1);
			t->ver = calloc((size_t)b.cfg.keys, sizeof(*t->ver));
		}
		if (!t->lat || !t->keys || ((b.cfg.op == BENCH_GET || b.cfg.op == BENCH_MIXED) && !t->buf) ||
		    (b.cfg.op == BENCH_MIXED && (!t->present || !t->ver))) {
			cli_error("bench", NULL, KVP_ENOMEM, "out of memory for %" PRIu64
				  " threads x batch %" PRIu64 " x %" PRIu64 " bytes",
				  b.cfg.threads, b.cfg.batch, b.cfg.size_max);
			goto out_free;
		}
	}

	b.kvp = kvp_open_conf(&bconf, &err);
	if (!b.kvp) {
		cli_error("bench", conf->cluster.master, err ? err : KVP_ECONN, NULL);
		goto out_free;
	}
	/* Registered buffers take the fastest path, as an engine's would. */
	kvp_register_buffer(b.kvp, b.pattern, pattern_len);
	for (unsigned i = 0; i < b.cfg.threads; i++)
		if (b.thr[i].buf)
			kvp_register_buffer(b.kvp, b.thr[i].buf, (size_t)(b.cfg.batch * b.cfg.size_max));

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = bench_on_sigint;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_sa);

	/* Every op but a get/exists of --existing keys puts; puts need a
	 * segment, which a node that is still starting has not mounted yet. */
	if (!((b.cfg.op == BENCH_GET || b.cfg.op == BENCH_EXISTS) && b.cfg.existing) &&
	    bench_wait_capacity(&b, conf) < 0)
		goto out_close;
	if ((b.cfg.op == BENCH_GET || b.cfg.op == BENCH_EXISTS) && !b.cfg.existing) {
		b.put_failed = calloc((size_t)b.cfg.count, 1);
		if (!b.put_failed) {
			cli_error("bench", NULL, KVP_ENOMEM, NULL);
			goto out_close;
		}
		bench_phase(&b, BENCH_PUT, "prepare");
		for (unsigned i = 0; i < b.cfg.threads; i++) {
			prep.errors += b.thr[i].errors;
			prep.ok += b.thr[i].ok;
		}
		if (prep.errors && !b.cfg.json)
			fprintf(stderr, "kvpool: bench: %" PRIu64 " of %" PRIu64
				" puts of the prepare phase failed; their %ss count as errors\n",
				prep.errors, b.cfg.count, bench_op_names[b.cfg.op]);
	}
	if (!bench_stop) {
		const char *what = bench_op_names[b.cfg.op];

		if (kvp_stats(b.kvp, &st0) < 0)
			memset(&st0, 0, sizeof(st0));
		wall = bench_phase(&b, b.cfg.op, what);
		if (kvp_stats(b.kvp, &st1) < 0)
			st1 = st0;
		for (unsigned i = 0; i < b.cfg.threads; i++) {
			const struct bench_thr *t = &b.thr[i];

			sum.ok += t->ok;
			sum.missing += t->missing;
			sum.errors += t->errors;
			sum.mismatches += t->mismatches;
			sum.bytes += t->bytes;
			sum.unput += t->unput;
			nlat += t->nlat;
		}
		lat = malloc((nlat + 1) * sizeof(*lat));
		if (lat) {
			size_t k = 0;

			for (unsigned i = 0; i < b.cfg.threads; i++) {
				memcpy(lat + k, b.thr[i].lat, b.thr[i].nlat * sizeof(*lat));
				k += b.thr[i].nlat;
			}
			qsort(lat, nlat, sizeof(*lat), cmp_u64);
		} else {
			nlat = 0;
		}
		if (b.cfg.op != BENCH_EXISTS)
			ref = bench_memcpy_gbs(&b);
		bench_print(&b, path, wall, lat, nlat, &sum, ref, &st0, &st1);
	}
	if (!b.cfg.keep)
		bench_cleanup(&b);
	/* A failed put is an error even when its key was never read back. */
	sum.errors += prep.errors - sum.unput;
	rc = (sum.errors || sum.mismatches || bench_stop) ? CLI_EXIT_ERR : CLI_EXIT_OK;

out_close:
	sigaction(SIGINT, &old_sa, NULL);
	kvp_unregister_buffer(b.kvp, b.pattern);
	for (unsigned i = 0; i < b.cfg.threads; i++)
		if (b.thr[i].buf)
			kvp_unregister_buffer(b.kvp, b.thr[i].buf);
	kvp_close(b.kvp);

out_free:
	free(b.put_failed);
	free(lat);
	if (b.thr)
		for (unsigned i = 0; i < b.cfg.threads; i++) {
			free(b.thr[i].lat);
			free(b.thr[i].keys);
			free(b.thr[i].buf);
			free(b.thr[i].present);
			free(b.thr[i].ver);
		}
	free(b.thr);
	free(b.pattern);
	return rc;
}

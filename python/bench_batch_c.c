/* bench_batch_c: the C reference for python/bench_batch.py — times
 * kvp_batch_get_into of N existing keys PREFIX0..PREFIX{N-1} into one
 * registered buffer, the path the Python module's batch_get_into takes, and
 * prints one line "median_s=S gbps=G ok=N". Single-threaded; the keys must
 * exist (the Python side puts them).
 *   bench_batch_c -c CONF [-o section.key=value]... PREFIX N SIZE ITERS
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"

#define MAX_OV 16

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void usage(void)
{
	fprintf(stderr, "usage: bench_batch_c -c CONF [-o section.key=value]... PREFIX N SIZE ITERS\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *ov[MAX_OV + 1] = { NULL };
	struct kvp_open_opts o = { 0 };
	size_t nov = 0, n, size, iters, ok = 0;
	char **keys;
	void **bufs;
	size_t *caps;
	int64_t *res;
	double *t;
	char *mem;
	struct kvp *kvp;
	int c, err;

	while ((c = getopt(argc, argv, "c:o:")) != -1) {
		if (c == 'c')
			o.config_file = optarg;
		else if (c == 'o' && nov < MAX_OV)
			ov[nov++] = optarg;
		else
			usage();
	}
	if (argc - optind != 4)
		usage();
	n = strtoul(argv[optind + 1], NULL, 0);
	size = strtoul(argv[optind + 2], NULL, 0);
	iters = strtoul(argv[optind + 3], NULL, 0);
	if (!n || !size || !iters)
		usage();
	o.overrides = ov;
	kvp = kvp_open(&o, &err);
	if (!kvp) {
		fprintf(stderr, "bench_batch_c: kvp_open: %s\n", kvp_strerror(err));
		return 1;
	}
	keys = calloc(n, sizeof(*keys));
	bufs = calloc(n, sizeof(*bufs));
	caps = calloc(n, sizeof(*caps));
	res = calloc(n, sizeof(*res));
	t = calloc(iters, sizeof(*t));
	mem = malloc(n * size);
	if (!keys || !bufs || !caps || !res || !t || !mem) {
		fprintf(stderr, "bench_batch_c: out of memory\n");
		return 1;
	}
	memset(mem, 0, n * size);
	kvp_register_buffer(kvp, mem, n * size);
	for (size_t i = 0; i < n; i++) {
		if (asprintf(&keys[i], "%s%zu", argv[optind], i) < 0)
			return 1;
		bufs[i] = mem + i * size;
		caps[i] = size;
	}
	/* One untimed call: maps the segments and faults them in, as the Python
	 * side's verifying read does before it is timed. */
	if (kvp_batch_get_into(kvp, n, (const char *const *)keys, bufs, caps, res) < 0) {
		fprintf(stderr, "bench_batch_c: warm-up failed\n");
		return 1;
	}
	for (size_t it = 0; it < iters; it++) {
		double t0 = now_s();
		int rc = kvp_batch_get_into(kvp, n, (const char *const *)keys, bufs, caps, res);

		t[it] = now_s() - t0;
		if (rc < 0) {
			fprintf(stderr, "bench_batch_c: %s\n", kvp_strerror(rc));
			return 1;
		}
		for (size_t i = 0; i < n; i++)
			ok += res[i] == (int64_t)size;
	}
	qsort(t, iters, sizeof(*t), cmp_double);
	printf("median_s=%.6f gbps=%.3f ok=%zu\n", t[iters / 2],
	       (double)(n * size) / t[iters / 2] / 1e9, ok);
	for (size_t i = 0; i < n; i++)
		free(keys[i]);
	free(keys);
	free(bufs);
	free(caps);
	free(res);
	free(t);
	kvp_unregister_buffer(kvp, mem);
	free(mem);
	kvp_close(kvp);
	return ok == n * iters ? 0 : 1;
}

/* selftest: `kvpool selftest rdma|cuda|numa` (see selftest.h). Each check
 * exits 77 with one clear line when its hardware is absent, so scripts and
 * tests/run.sh treat it as a skip, never as a pass.
 */
#include <errno.h>
#include <getopt.h>
#include <numaif.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "conf.h"
#include "cuda.h"
#include "kvpool.h"
#include "log.h"
#include "numa_util.h"
#include "rdma.h"
#include "segment.h"
#include "selftest.h"

#define EXIT_SKIP 77

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i + 8 <= n; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + i, &x, 8);
	}
	for (size_t i = n & ~(size_t)7; i < n; i++)
		p[i] = (uint8_t)i;
}

static int parse_size_opt(const char *s, uint64_t *out, const char *what)
{
	if (conf_parse_size(s, out) < 0 || !*out) {
		fprintf(stderr, "kvpool selftest: bad %s '%s'\n", what, s);
		return -1;
	}
	return 0;
}

/* ---- rdma --------------------------------------------------------------- */

struct xdone {
	int left;
	int status;
};

static void xfer_done_cb(struct rdma_xfer *x)
{
	struct xdone *d = x->arg;

	if (x->status && !d->status)
		d->status = x->status;
	d->left--;
}

/* Moves len bytes from local to remote (write) or back (read) through the
 * engine on q: the path a client's transfer takes, with no bounce buffer
 * (both buffers registered). */
static int loop_xfer(struct rdma_qps *q, bool write, uint8_t *local,
		     const struct rdma_mr_chunk *lc, uint32_t nlc, uint8_t *remote,
		     const struct rdma_mr_chunk *rc, uint32_t nrc, uint64_t len)
{
	struct rdma_eng e;
	struct rdma_xfer x = {
		.write = write, .raddr = (uintptr_t)remote, .rc = rc, .nrc = nrc,
		.val = local, .vlen = len, .lc = lc, .nlc = nlc, .done = xfer_done_cb,
	};
	struct xdone d = { .left = 1 };
	double deadline = ((double)clock_now_ns() / 1e9) + 30;

	x.arg = &d;
	rdma_eng_init(&e, q, NULL, NULL, 0);
	rdma_eng_add(&e, &x);
	while (d.left > 0) {
		rdma_eng_progress(&e, 100);
		if (d.left > 0 && ((double)clock_now_ns() / 1e9) > deadline) {
			rdma_eng_abort(&e, -ETIMEDOUT);
			break;
		}
	}
	return d.status;
}

static int rdma_one(struct rdma_ctx *ctx, unsigned di, uint64_t size, unsigned nqp, int iters)
{
	struct rdma_dev *v = &ctx->dev[di];
	struct rdma_ctx one = { .ndev = 1 };
	struct rdma_region ra, rb;
	struct rdma_qps *qa = NULL, *qb = NULL;
	struct rdma_qp_rec reca, recb;
	uint8_t *a = NULL, *b = NULL;
	char err[512];
	int rc = 1;

	one.dev[0] = *v;
	a = aligned_alloc(4096, size);
	b = aligned_alloc(4096, size);
	if (!a || !b) {
		fprintf(stderr, "%s: out of memory for 2 x %llu bytes\n", v->name,
			(unsigned long long)size);
		goto out_free;
	}
	fill(a, size, 1);
	memset(b, 0, size);
	if (rdma_region_reg(&one, a, size, true, &ra, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s: %s\n", v->name, err);
		goto out_free;
	}
	if (rdma_region_reg(&one, b, size, true, &rb, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s: %s\n", v->name, err);
		goto out_dereg_a;
	}
	if (rdma_qps_create(v, nqp, 64, true, &qa, err, sizeof(err)) < 0 ||
	    rdma_qps_create(v, nqp, 64, false, &qb, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s: %s\n", v->name, err);
		goto out_qps;
	}
	/* Both ends in this process: the exchange a client and a node do
	 * over RDMA_CONNECT, through the same codec. */
	struct wbuf w;

	wb_init(&w);
	rdma_qps_local(qa, &reca);
	rdma_qps_local(qb, &recb);
	if (rdma_qp_rec_encode(&w, &reca) < 0 ||
	    rdma_qp_rec_decode(w.p, w.len, &reca, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s: qp record: %s\n", v->name, err);
		wb_free(&w);
		goto out_qps;
	}
	wb_free(&w);
	if (rdma_qps_connect(qa, &recb, err, sizeof(err)) < 0 ||
	    rdma_qps_connect(qb, &reca, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s: connect: %s\n", v->name, err);
		goto out_qps;
	}

	/* Correctness first: WRITE a -> b, compare; READ b -> a (zeroed). */
	int xr = loop_xfer(qa, true, a, ra.dev[0].c, ra.dev[0].n, b, rb.dev[0].c, rb.dev[0].n, size);

	if (xr || memcmp(a, b, size)) {
		fprintf(stderr, "%s: loopback WRITE %s\n", v->name,
			xr ? strerror(-xr) : "delivered wrong bytes");
		goto out_qps;
	}
	memset(a, 0, size);
	xr = loop_xfer(qa, false, a, ra.dev[0].c, ra.dev[0].n, b, rb.dev[0].c, rb.dev[0].n, size);
	if (xr || memcmp(a, b, size)) {
		fprintf(stderr, "%s: loopback READ %s\n", v->name,
			xr ? strerror(-xr) : "delivered wrong bytes");
		goto out_qps;
	}

	double bw[2];

	for (int dir = 0; dir < 2; dir++) {
		double t0 = ((double)clock_now_ns() / 1e9);

		for (int i = 0; i < iters; i++) {
			xr = loop_xfer(qa, dir == 0, a, ra.dev[0].c, ra.dev[0].n, b, rb.dev[0].c,
				       rb.dev[0].n, size);
			if (xr) {
				fprintf(stderr, "%s: %s: %s\n", v->name, dir ? "READ" : "WRITE",
					strerror(-xr));
				goto out_qps;
			}
		}
		bw[dir] = (double)size * iters / (((double)clock_now_ns() / 1e9) - t0) / 1e9;
	}
	printf("%s port %u (%s, NUMA node %d): WRITE %.2f GB/s, READ %.2f GB/s "
	       "(%d x %llu MiB, %u QPs, %u KiB pieces); data verified\n", v->name, v->port,
	       v->link_layer == RDMA_LINK_ETH ? "RoCE" : "InfiniBand", v->numa_node, bw[0], bw[1],
	       iters, (unsigned long long)(size >> 20), nqp, RDMA_PIECE_MAX >> 10);
	rc = 0;

out_qps:
	rdma_qps_destroy(qa);
	rdma_qps_destroy(qb);
	rdma_region_dereg(&rb);
out_dereg_a:
	rdma_region_dereg(&ra);
out_free:
	free(a);
	free(b);
	return rc;
}

static int selftest_rdma(const struct kvp_conf *conf, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "size", required_argument, NULL, 's' },
		{ "iters", required_argument, NULL, 'n' },
		{ "devices", required_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t size = 64ull << 20;
	int iters = 16, ch, rc = 0;
	const char *filter = conf->rdma.devices;
	struct rdma_ctx ctx;
	char err[512];
	unsigned nqp = conf->rdma.qps_per_peer > 0 ? (unsigned)conf->rdma.qps_per_peer : 2;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "s:n:d:", lo, NULL)) != -1) {
		switch (ch) {
		case 's':
			if (parse_size_opt(optarg, &size, "--size") < 0)
				return 2;
			break;
		case 'n':
			iters = atoi(optarg);
			if (iters < 1)
				iters = 1;
			break;
		case 'd':
			filter = optarg;
			break;
		default:
			return 2;
		}
	}
	if (rdma_open(&ctx, filter, err, sizeof(err)) < 0) {
		fprintf(stderr, "kvpool selftest rdma: %s\n", err);
		return EXIT_SKIP;
	}
	for (unsigned d = 0; d < ctx.ndev; d++)
		if (rdma_one(&ctx, d, size, nqp, iters))
			rc = 1;
	rdma_close(&ctx);
	printf("rdma selftest: %s\n", rc ? "FAILED" : "passed");
	return rc;
}

/* ---- cuda --------------------------------------------------------------- */

/* Best of reps timed copies, GB/s; -1 on error. */
static double copy_bw(void *dst, const void *src, size_t n, int reps)
{
	double best = 0;

	for (int i = 0; i < reps; i++) {
		double t0 = ((double)clock_now_ns() / 1e9);

		if (cuda_memcpy(dst, src, n) < 0 || cuda_sync() < 0)
			return -1;
		double bw = (double)n / (((double)clock_now_ns() / 1e9) - t0) / 1e9;

		if (bw > best)
			best = bw;
	}
	return best;
}

/* Round trip through the pool: put_from of device memory, get_into device
 * memory, compared on the host. Uses the caller's configuration file. */
static int cuda_pool(const struct kvp_conf *conf, uint8_t *dev, uint8_t *pinned, size_t size,
		     uint64_t obj)
{
	struct kvp_open_opts o = {
		.config_file = conf->file[0] ? conf->file : NULL,
		.master = conf->cluster.master,
	};
	size_t n = (size + obj - 1) / obj;
	char key[64];
	int err = 0, rc = 1;
	struct kvp *kvp = kvp_open(&o, &err);
	double t0, tput, tget;

	if (!kvp) {
		fprintf(stderr, "--pool: cannot open the pool at %s: %s\n", conf->cluster.master,
			kvp_strerror(err));
		return 1;
	}
	fill(pinned, size, 7);
	if (cuda_memcpy(dev, pinned, size) < 0)
		goto out_close;
	t0 = ((double)clock_now_ns() / 1e9);
	for (size_t i = 0; i < n; i++) {
		size_t len = i + 1 < n ? obj : size - i * obj;

		snprintf(key, sizeof(key), "selftest-cuda/%d/%zu", (int)getpid(), i);
		int r = kvp_put_from(kvp, key, dev + i * obj, len);

		if (r < 0) {
			fprintf(stderr, "put_from(device) %s: %s\n", key, kvp_strerror(r));
			goto out_remove;
		}
	}
	tput = ((double)clock_now_ns() / 1e9) - t0;
	if (cuda_memset(dev, 0, size) < 0 || cuda_sync() < 0)
		goto out_remove;
	t0 = ((double)clock_now_ns() / 1e9);
	for (size_t i = 0; i < n; i++) {
		size_t len = i + 1 < n ? obj : size - i * obj;

		snprintf(key, sizeof(key), "selftest-cuda/%d/%zu", (int)getpid(), i);
		int64_t r = kvp_get_into(kvp, key, dev + i * obj, len);

		if (r != (int64_t)len) {
			fprintf(stderr, "get_into(device) %s: %s\n", key,
				r < 0 ? kvp_strerror((int)r) : "short value");
			goto out_remove;
		}
	}
	tget = ((double)clock_now_ns() / 1e9) - t0;
	uint8_t *chk = malloc(size);

	if (!chk || cuda_memcpy(chk, dev, size) < 0) {
		free(chk);
		goto out_remove;
	}
	fill(pinned, size, 7);
	if (memcmp(chk, pinned, size)) {
		fprintf(stderr, "--pool: the bytes read back differ from those put\n");
		free(chk);
		goto out_remove;
	}
	free(chk);
	printf("pool put_from(device)     %8.2f GB/s  (%zu objects of %llu MiB)\n",
	       (double)size / tput / 1e9, n, (unsigned long long)(obj >> 20));
	printf("pool get_into(device)     %8.2f GB/s  data verified\n", (double)size / tget / 1e9);
	rc = 0;
out_remove:
	for (size_t i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "selftest-cuda/%d/%zu", (int)getpid(), i);
		kvp_remove(kvp, key, KVP_REMOVE_FORCE);
	}
out_close:
	kvp_close(kvp);
	return rc;
}

static int selftest_cuda(const struct kvp_conf *conf, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "size", required_argument, NULL, 's' },
		{ "pool", no_argument, NULL, 'p' },
		{ "object-size", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t size = 1ull << 30, obj = 64ull << 20;
	bool pool = false;
	void *dev = NULL, *pinned = NULL;
	uint8_t *shared = MAP_FAILED, *chk = NULL;
	int ch, rc = 1;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "s:po:", lo, NULL)) != -1) {
		switch (ch) {
		case 's':
			if (parse_size_opt(optarg, &size, "--size") < 0)
				return 2;
			break;
		case 'p':
			pool = true;
			break;
		case 'o':
			if (parse_size_opt(optarg, &obj, "--object-size") < 0)
				return 2;
			break;
		default:
			return 2;
		}
	}
	if (cuda_load() < 0) {
		fprintf(stderr, "kvpool selftest cuda: no CUDA device: %s\n", cuda_status());
		return EXIT_SKIP;
	}
	printf("cuda: %s\n", cuda_status());
	if (cuda_malloc(&dev, size) < 0 || cuda_malloc_host(&pinned, size) < 0) {
		fprintf(stderr, "cannot allocate 2 x %llu MiB (device + pinned)\n",
			(unsigned long long)(size >> 20));
		goto out_free;
	}
	if (cuda_ptr_kind(dev, NULL) != CUDA_DEVICE || cuda_ptr_kind(pinned, NULL) != CUDA_HOST) {
		fprintf(stderr, "pointer detection: cudaMalloc memory reads as %s, pinned as %s\n",
			cuda_kind_name(cuda_ptr_kind(dev, NULL)),
			cuda_kind_name(cuda_ptr_kind(pinned, NULL)));
		goto out_free;
	}
	/* The mapping stands for a segment: MAP_SHARED, host-registered once,
	 * as the client does with each segment it maps. */
	shared = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	chk = malloc(size);
	if (shared == MAP_FAILED || !chk) {
		fprintf(stderr, "cannot map %llu MiB\n", (unsigned long long)(size >> 20));
		goto out_free;
	}
	fill(shared, size, 3);
	if (cuda_host_register(shared, size) < 0) {
		fprintf(stderr, "cudaHostRegister of a MAP_SHARED mapping failed\n");
		goto out_free;
	}
	memset(pinned, 0, size);
	double lim_h2d = copy_bw(dev, pinned, size, 3);
	double lim_d2h = copy_bw(pinned, dev, size, 3);
	double seg_h2d = copy_bw(dev, shared, size, 3);	/* get_into(device), local */
	memset(shared, 0, size);
	double seg_d2h = copy_bw(shared, dev, size, 3);	/* put_from(device), local */

	fill(chk, size, 3);
	if (lim_h2d < 0 || lim_d2h < 0 || seg_h2d < 0 || seg_d2h < 0) {
		fprintf(stderr, "a cudaMemcpy failed\n");
		goto out_unregister;
	}
	if (memcmp(shared, chk, size)) {
		fprintf(stderr, "segment -> device -> segment did not give the bytes back\n");
		goto out_unregister;
	}
	printf("%llu MiB each way, best of 3:\n", (unsigned long long)(size >> 20));
	printf("pinned  -> device  cudaMemcpy %8.2f GB/s  (the limit)\n", lim_h2d);
	printf("segment -> device  kvpool     %8.2f GB/s  (%.0f%% of the limit)\n", seg_h2d,
	       100 * seg_h2d / lim_h2d);
	printf("device  -> pinned  cudaMemcpy %8.2f GB/s  (the limit)\n", lim_d2h);
	printf("device  -> segment kvpool     %8.2f GB/s  (%.0f%% of the limit)\n", seg_d2h,
	       100 * seg_d2h / lim_d2h);
	rc = 0;
	if (pool)
		rc = cuda_pool(conf, dev, pinned, size, obj);
	printf("cuda selftest: %s\n", rc ? "FAILED" : "passed");
out_unregister:
	cuda_host_unregister(shared);
out_free:
	if (shared != MAP_FAILED)
		munmap(shared, size);
	free(chk);
	if (dev)
		cuda_free(dev);
	if (pinned)
		cuda_free_host(pinned);
	return rc;
}

/* ---- numa --------------------------------------------------------------- */

static int selftest_numa(const struct kvp_conf *conf, int argc, char **argv)
{
	int nnodes = numa_util_nodes(), node, mode = -1, pol_node = -1, page_node;
	char dev[RDMA_NAME_MAX], why[128], err[256], name[64];
	struct segment seg;
	cpu_set_t set;
	int rc = 1;

	(void)argc;
	(void)argv;
	if (nnodes < 1) {
		fprintf(stderr, "kvpool selftest numa: no NUMA support in this kernel\n");
		return EXIT_SKIP;
	}
	numa_util_rdma_dev(conf->rdma.devices, dev, sizeof(dev));
	node = numa_util_auto("", dev, numa_util_cpu_node(), nnodes, why, sizeof(why));
	printf("numa: %d node%s; this CPU on node %d; auto choice: node %d (%s)\n", nnodes,
	       nnodes == 1 ? "" : "s", numa_util_cpu_node(), node, why);
	if (strcmp(conf->node.numa_node, "none") && strcmp(conf->node.numa_node, "auto"))
		node = atoi(conf->node.numa_node);
	if (node < 0 || node >= nnodes) {
		fprintf(stderr, "numa node %d does not exist (0..%d)\n", node, nnodes - 1);
		return 1;
	}
	/* A real segment, bound as kvpool-node binds its own. */
	snprintf(name, sizeof(name), "kvpool-selftest-numa-%d", (int)getpid());
	struct segment_opts so = {
		.name = name, .size = 16ull << 20, .align = 4096, .mode = 0600,
		.gid = (gid_t)-1, .numa_node = node,
	};
	if (segment_open(&seg, &so, true, err, sizeof(err)) < 0) {
		fprintf(stderr, "segment bound to node %d: %s\n", node, err);
		return 1;
	}
	uint8_t *p = (uint8_t *)seg.base + seg.data_off;

	memset(p, 0xa5, 1 << 20);
	if (numa_util_policy(p, &mode, &pol_node) < 0 || mode != MPOL_BIND || pol_node != node) {
		fprintf(stderr, "segment policy: mode %d node %d (expected MPOL_BIND node %d)\n",
			mode, pol_node, node);
		goto out_close;
	}
	page_node = numa_util_page_node(p);
	if (page_node != node) {
		fprintf(stderr, "segment page lives on node %d, expected %d\n", page_node, node);
		goto out_close;
	}
	if (numa_util_bind_thread(node) < 0 || sched_getaffinity(0, sizeof(set), &set) < 0) {
		fprintf(stderr, "cannot bind this thread to node %d\n", node);
		goto out_close;
	}
	printf("segment bound to node %d (MPOL_BIND, pages on node %d); thread runs on %d CPUs "
	       "of node %d\n", node, page_node, CPU_COUNT(&set), node);
	printf("numa selftest: passed\n");
	rc = 0;
out_close:
	segment_unlink(&seg);	/* closes it too */
	return rc;
}

int selftest_main(const struct kvp_conf *conf, int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		fprintf(argc < 2 ? stderr : stdout,
			"Usage: kvpool selftest rdma [--size 64M] [--iters 16] [--devices LIST]\n"
			"       kvpool selftest cuda [--size 1G] [--pool [--object-size 64M]]\n"
			"       kvpool selftest numa\n");
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "rdma"))
		return selftest_rdma(conf, argc - 1, argv + 1);
	if (!strcmp(argv[1], "cuda"))
		return selftest_cuda(conf, argc - 1, argv + 1);
	if (!strcmp(argv[1], "numa"))
		return selftest_numa(conf, argc - 1, argv + 1);
	fprintf(stderr, "kvpool selftest: unknown check '%s' (rdma, cuda, numa)\n", argv[1]);
	return 2;
}

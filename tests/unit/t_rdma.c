/* t_rdma: the RDMA layer without a device — memory-region chunking
 * arithmetic, chunk lookup, the device filter, the rdma_info and QP record
 * codecs (round trips and hostile inputs), "no RDMA device" from rdma_open,
 * the bounce-buffer slots (also under two threads), and the transfer engine
 * over a simulated QP set that checks keys and bounds as an HCA does:
 * splitting at chunk boundaries, spreading over QPs, bounce staging,
 * publish-last writes, gathered writes (direct and staged pieces), error ->
 * broken set, abort.
 */
#include <pthread.h>
#include <stdatomic.h>

/* testlib's CHECK(cond) with no message is an empty format string. */
#pragma GCC diagnostic ignored "-Wformat-zero-length"

#include "testlib.h"
#include "rdma.h"

/* ---- chunk planning ----------------------------------------------------- */

static void plan_props(uint64_t base, uint64_t len, uint64_t max_mr, uint64_t page)
{
	size_t need = 0;
	int n = rdma_mr_plan(base, len, max_mr, page, NULL, 0, &need);

	if (!len) {
		CHECK_EQ(n, 0);
		return;
	}
	CHECK(n == -E2BIG && need > 0, "n %d need %zu", n, need);
	struct rdma_mr_chunk *c = calloc(need, sizeof(*c));

	REQUIRE(c);
	n = rdma_mr_plan(base, len, max_mr, page, c, need, NULL);
	CHECK_EQ(n, (int)need);
	uint64_t at = base, lim = max_mr ? max_mr & ~(page - 1) : UINT64_MAX;

	for (int i = 0; i < n; i++) {
		CHECK(c[i].addr == at, "chunk %d at %llx, expected %llx", i,
		      (unsigned long long)c[i].addr, (unsigned long long)at);
		CHECK(c[i].len > 0);
		/* pages pinned by the chunk stay within the device's limit */
		uint64_t first = c[i].addr & ~(page - 1);
		uint64_t last = (c[i].addr + c[i].len + page - 1) & ~(page - 1);

		CHECK(last - first <= lim || lim == UINT64_MAX, "chunk %d spans %llu pages bytes", i,
		      (unsigned long long)(last - first));
		if (i + 1 < n)
			CHECK((c[i].addr + c[i].len) % page == 0, "inner boundary not page aligned");
		at += c[i].len;
	}
	CHECK(at == base + len, "chunks end at %llx, not %llx", (unsigned long long)at,
	      (unsigned long long)(base + len));
	/* not wasteful: every chunk but the first and last is exactly lim */
	for (int i = 1; i + 1 < n; i++)
		CHECK(c[i].len == lim);
	free(c);
}

static void t_plan(void)
{
	struct rdma_mr_chunk c[16];
	size_t need;

	CHECK_EQ(rdma_mr_plan(0x10000, 0, 1 << 20, 4096, c, 16, NULL), 0);
	/* no limit, and a limit above the length: one region */
	CHECK_EQ(rdma_mr_plan(0x10000, 123456, 0, 4096, c, 16, NULL), 1);
	CHECK(c[0].addr == 0x10000 && c[0].len == 123456);
	CHECK_EQ(rdma_mr_plan(0x10000, 123456, UINT64_MAX, 4096, c, 16, NULL), 1);
	/* 10 GiB at a page-aligned base with 1 GiB regions: ten of them */
	CHECK_EQ(rdma_mr_plan(1ull << 40, 10ull << 30, 1ull << 30, 4096, c, 16, NULL), 10);
	for (int i = 0; i < 10; i++)
		CHECK(c[i].addr == (1ull << 40) + ((uint64_t)i << 30) && c[i].len == 1ull << 30);
	/* a base inside a page: the first region is shortened */
	CHECK_EQ(rdma_mr_plan(0x10000123, 20000, 8192, 4096, c, 16, NULL), 3);
	CHECK(c[0].addr == 0x10000123 && c[0].len == 8192 - 0x123, "first %llu",
	      (unsigned long long)c[0].len);
	CHECK(c[1].addr == 0x10002000 && c[1].len == 8192);
	CHECK(c[2].addr == 0x10004000 && c[2].len == 20000 - (8192 - 0x123) - 8192);
	/* a limit that is not a page multiple rounds down */
	CHECK_EQ(rdma_mr_plan(0, 30000, 10000, 4096, c, 16, NULL), 4);
	CHECK(c[0].len == 8192 && c[3].len == 30000 - 3 * 8192);
	/* refused */
	CHECK_EQ(rdma_mr_plan(0, 4096, 100, 4096, c, 16, NULL), -EINVAL);
	CHECK_EQ(rdma_mr_plan(0, 4096, 8192, 3000, c, 16, NULL), -EINVAL);
	CHECK_EQ(rdma_mr_plan(0, 4096, 8192, 0, c, 16, NULL), -EINVAL);
	CHECK_EQ(rdma_mr_plan(UINT64_MAX - 10, 100, 0, 4096, c, 16, NULL), -EINVAL);
	CHECK_EQ(rdma_mr_plan(0, 1ull << 20, 4096, 4096, c, 16, &need), -E2BIG);
	CHECK_EQ(need, 256);
	/* properties over many shapes */
	srand(42);
	for (int i = 0; i < 2000; i++) {
		uint64_t page = 4096u << (rand() % 3);
		uint64_t base = ((uint64_t)rand() << 20 | (uint64_t)rand()) & ~7ull;
		uint64_t len = (uint64_t)(rand() % (1 << 22)) + (rand() % 2 ? 0 : 1);
		uint64_t max = (rand() % 4 == 0) ? 0 : page + (uint64_t)(rand() % (1 << 20));

		plan_props(base, len, max, page);
	}
}

static void t_span(void)
{
	struct rdma_mr_chunk c[3] = {
		{ .addr = 1000, .len = 100, .lkey = 1, .rkey = 11 },
		{ .addr = 1100, .len = 50, .lkey = 2, .rkey = 12 },
		{ .addr = 1150, .len = 1000, .lkey = 3, .rkey = 13 },
	};
	uint32_t idx = 99;

	CHECK_EQ(rdma_chunk_span(c, 3, 999, 10, &idx), 0);
	CHECK_EQ(rdma_chunk_span(c, 3, 1000, 10, &idx), 10);
	CHECK_EQ(idx, 0);
	CHECK_EQ(rdma_chunk_span(c, 3, 1090, 500, &idx), 10);
	CHECK_EQ(rdma_chunk_span(c, 3, 1100, 500, &idx), 50);
	CHECK_EQ(idx, 1);
	CHECK_EQ(rdma_chunk_span(c, 3, 1149, 5, &idx), 1);
	CHECK_EQ(rdma_chunk_span(c, 3, 1150, 5, &idx), 5);
	CHECK_EQ(idx, 2);
	CHECK_EQ(rdma_chunk_span(c, 3, 2149, 5, &idx), 1);
	CHECK_EQ(rdma_chunk_span(c, 3, 2150, 5, &idx), 0);
	CHECK_EQ(rdma_chunk_span(c, 0, 1000, 5, &idx), 0);
}

static void t_filter(void)
{
	CHECK(rdma_filter_has("", "mlx5_0"));
	CHECK(rdma_filter_has(" , ", "mlx5_0"));
	CHECK(rdma_filter_has("mlx5_0,mlx5_1", "mlx5_1"));
	CHECK(rdma_filter_has(" mlx5_0 , mlx5_1 ", "mlx5_0"));
	CHECK(!rdma_filter_has("mlx5_0,mlx5_1", "mlx5_10"));
	CHECK(!rdma_filter_has("mlx5_10", "mlx5_1"));
	CHECK(!rdma_filter_has("rxe0", "mlx5_0"));
}

/* ---- codecs ------------------------------------------------------------- */

static void sample_info(struct rdma_info *in, struct rdma_mr_chunk *c0, struct rdma_mr_chunk *c1)
{
	memset(in, 0, sizeof(*in));
	in->addr = 0x7f0000000000ull;
	in->len = 3ull << 30;
	in->ndev = 2;
	strcpy(in->dev[0].name, "mlx5_0");
	in->dev[0].port = 1;
	in->dev[0].link_layer = RDMA_LINK_IB;
	in->dev[0].lid = 17;
	for (int i = 0; i < 16; i++)
		in->dev[0].gid[i] = (uint8_t)i;
	in->dev[0].nchunks = 3;
	in->dev[0].chunks = c0;
	for (int i = 0; i < 3; i++)
		c0[i] = (struct rdma_mr_chunk){ in->addr + ((uint64_t)i << 30), 1ull << 30, 0,
						0x1000u + (uint32_t)i };
	strcpy(in->dev[1].name, "mlx5_1");
	in->dev[1].port = 2;
	in->dev[1].link_layer = RDMA_LINK_ETH;
	in->dev[1].nchunks = 1;
	in->dev[1].chunks = c1;
	c1[0] = (struct rdma_mr_chunk){ in->addr, in->len, 0, 0xabcdef01u };
}

static void t_info_codec(void)
{
	struct rdma_mr_chunk c0[3], c1[1];
	struct rdma_info in, *out = NULL;
	struct wbuf b;
	char err[256];

	sample_info(&in, c0, c1);
	wb_init(&b);
	REQUIRE(rdma_info_encode(&b, &in) == 0);
	CHECK_EQ(rdma_info_decode(b.p, b.len, &out, err, sizeof(err)), 0);
	REQUIRE(out, "%s", err);
	CHECK(out->addr == in.addr && out->len == in.len && out->ndev == 2);
	CHECK(!strcmp(out->dev[0].name, "mlx5_0") && !strcmp(out->dev[1].name, "mlx5_1"));
	CHECK(out->dev[0].lid == 17 && out->dev[0].gid[15] == 15 && out->dev[1].port == 2);
	CHECK(out->dev[1].link_layer == RDMA_LINK_ETH);
	CHECK_EQ(out->dev[0].nchunks, 3);
	for (int i = 0; i < 3; i++)
		CHECK(out->dev[0].chunks[i].addr == c0[i].addr && out->dev[0].chunks[i].len == c0[i].len &&
		      out->dev[0].chunks[i].rkey == c0[i].rkey);
	CHECK(out->dev[1].chunks[0].rkey == 0xabcdef01u);
	/* a chunk lookup on the decoded table: the client's remote side */
	uint32_t idx;

	CHECK_EQ(rdma_chunk_span(out->dev[0].chunks, 3, in.addr + (1ull << 30) - 8, 64, &idx), 8);
	CHECK(out->map_off == 0 && b.p[0] == 1, "no commit map: version 1");
	rdma_info_free(out);

	/* version 2: a segment with a commit map appends its offset */
	struct wbuf b2;

	in.map_off = 4096;
	wb_init(&b2);
	REQUIRE(rdma_info_encode(&b2, &in) == 0);
	CHECK(b2.p[0] == 2 && b2.len == b.len + 8);
	CHECK_EQ(rdma_info_decode(b2.p, b2.len, &out, err, sizeof(err)), 0);
	REQUIRE(out, "%s", err);
	CHECK(out->map_off == 4096 && out->len == in.len && out->dev[0].nchunks == 3);
	rdma_info_free(out);
	for (size_t n = 0; n < b2.len; n++)
		CHECK(rdma_info_decode(b2.p, n, &out, err, sizeof(err)) == -EPROTO, "v2 prefix %zu", n);
	memset(b2.p + b2.len - 8, 0, 8);	/* a map at 0 is no map */
	CHECK(rdma_info_decode(b2.p, b2.len, &out, err, sizeof(err)) == -EPROTO);
	in.map_off = in.len;			/* outside the region */
	CHECK(rdma_info_encode(&b2, &in) == -EINVAL);
	in.map_off = 0;
	wb_free(&b2);

	/* every truncation is refused, none crashes */
	for (size_t n = 0; n < b.len; n++) {
		out = NULL;
		CHECK(rdma_info_decode(b.p, n, &out, err, sizeof(err)) == -EPROTO, "prefix %zu", n);
		CHECK(out == NULL);
	}
	/* trailing bytes */
	uint8_t *x = malloc(b.len + 1);

	memcpy(x, b.p, b.len);
	x[b.len] = 0;
	CHECK_EQ(rdma_info_decode(x, b.len + 1, &out, err, sizeof(err)), -EPROTO);
	/* version, device count */
	memcpy(x, b.p, b.len);
	x[0] = 3;
	CHECK_EQ(rdma_info_decode(x, b.len, &out, err, sizeof(err)), -EPROTO);
	CHECK(strstr(err, "version") != NULL, "%s", err);
	memcpy(x, b.p, b.len);
	x[1] = 0;
	CHECK_EQ(rdma_info_decode(x, b.len, &out, err, sizeof(err)), -EPROTO);
	x[1] = 9;
	CHECK_EQ(rdma_info_decode(x, b.len, &out, err, sizeof(err)), -EPROTO);
	/* a single flipped byte anywhere: refused or decoded consistently */
	for (size_t i = 0; i < b.len; i++) {
		memcpy(x, b.p, b.len);
		x[i] ^= 0x5a;
		out = NULL;
		int rc = rdma_info_decode(x, b.len, &out, err, sizeof(err));

		if (rc == 0) {
			for (unsigned d = 0; d < out->ndev; d++) {
				uint64_t sum = 0;

				for (uint32_t k = 0; k < out->dev[d].nchunks; k++)
					sum += out->dev[d].chunks[k].len;
				CHECK(sum == out->len, "flip at %zu: chunks do not cover", i);
			}
			rdma_info_free(out);
		} else {
			CHECK_EQ(rc, -EPROTO);
		}
	}
	free(x);
	wb_free(&b);

	/* the encoder refuses what the decoder would */
	struct rdma_info bad;

	sample_info(&bad, c0, c1);
	bad.ndev = 0;
	wb_init(&b);
	CHECK(rdma_info_encode(&b, &bad) == -EINVAL);
	sample_info(&bad, c0, c1);
	c0[1].len = 5;				/* gap */
	CHECK(rdma_info_encode(&b, &bad) == -EINVAL);
	sample_info(&bad, c0, c1);
	strcpy(bad.dev[1].name, "bad name");
	CHECK(rdma_info_encode(&b, &bad) == -EINVAL);
	sample_info(&bad, c0, c1);
	bad.dev[0].nchunks = 0;
	CHECK(rdma_info_encode(&b, &bad) == -EINVAL);
	wb_free(&b);

	/* hand-made hostile inputs */
	wb_init(&b);
	wb_u8(&b, 1);
	wb_u8(&b, 1);
	wb_u64(&b, 0x1000);
	wb_u64(&b, 100);
	wb_cstr(&b, "rxe0");
	wb_u8(&b, 1);
	wb_u8(&b, 2);
	wb_u16(&b, 0);
	wb_bytes(&b, c0, 16);
	wb_u32(&b, 0xffffffffu);		/* claims 4 G chunks */
	CHECK_EQ(rdma_info_decode(b.p, b.len, &out, err, sizeof(err)), -EPROTO);
	wb_free(&b);
	wb_init(&b);
	wb_u8(&b, 1);
	wb_u8(&b, 1);
	wb_u64(&b, UINT64_MAX - 10);		/* wraps */
	wb_u64(&b, 100);
	wb_cstr(&b, "rxe0");
	wb_u8(&b, 1);
	wb_u8(&b, 2);
	wb_u16(&b, 0);
	wb_bytes(&b, c0, 16);
	wb_u32(&b, 1);
	wb_u64(&b, 0);
	wb_u64(&b, 100);
	wb_u32(&b, 7);
	CHECK_EQ(rdma_info_decode(b.p, b.len, &out, err, sizeof(err)), -EPROTO);
	CHECK(strstr(err, "range") != NULL, "%s", err);
	wb_free(&b);
}

static void sample_rec(struct rdma_qp_rec *r)
{
	memset(r, 0, sizeof(*r));
	strcpy(r->dev, "mlx5_2");
	r->port = 1;
	r->link_layer = RDMA_LINK_ETH;
	r->lid = 0;
	for (int i = 0; i < 16; i++)
		r->gid[i] = (uint8_t)(0xf0 + i);
	r->mtu = 5;
	r->rd_atomic = 16;
	r->nqp = 4;
	for (int i = 0; i < 4; i++) {
		r->qpn[i] = 0x100 + (uint32_t)i;
		r->psn[i] = 0xabcde0 + (uint32_t)i;
	}
}

static void t_qp_codec(void)
{
	struct rdma_qp_rec r, o;
	struct wbuf b;
	char err[256];

	sample_rec(&r);
	wb_init(&b);
	REQUIRE(rdma_qp_rec_encode(&b, &r) == 0);
	CHECK_EQ(rdma_qp_rec_decode(b.p, b.len, &o, err, sizeof(err)), 0);
	CHECK(!memcmp(&r, &o, sizeof(r)), "round trip differs");
	for (size_t n = 0; n < b.len; n++)
		CHECK(rdma_qp_rec_decode(b.p, n, &o, err, sizeof(err)) == -EPROTO, "prefix %zu", n);
	uint8_t *x = malloc(b.len + 1);

	memcpy(x, b.p, b.len);
	x[b.len] = 1;
	CHECK_EQ(rdma_qp_rec_decode(x, b.len + 1, &o, err, sizeof(err)), -EPROTO);
	CHECK(strstr(err, "trailing") != NULL, "%s", err);
	free(x);
	wb_free(&b);

	/* the encoder refuses, and so the decoder must, each bad field */
	struct rdma_qp_rec bad;

	for (int k = 0; k < 8; k++) {
		sample_rec(&bad);
		switch (k) {
		case 0: bad.qpn[2] = 0; break;
		case 1: bad.qpn[1] = 1u << 24; break;
		case 2: bad.psn[3] = 1u << 24; break;
		case 3: bad.mtu = 6; break;
		case 4: bad.mtu = 0; break;
		case 5: bad.nqp = 0; break;
		case 6: bad.rd_atomic = 0; break;
		case 7: bad.dev[0] = 0; break;
		}
		wb_init(&b);
		CHECK(rdma_qp_rec_encode(&b, &bad) == -EINVAL, "mutation %d encoded", k);
		wb_free(&b);
		/* the same record forced onto the wire */
		wb_init(&b);
		wb_u8(&b, 1);
		wb_cstr(&b, bad.dev[0] ? bad.dev : "");
		wb_u8(&b, bad.port);
		wb_u8(&b, bad.link_layer);
		wb_u16(&b, bad.lid);
		wb_bytes(&b, bad.gid, 16);
		wb_u8(&b, bad.mtu);
		wb_u8(&b, bad.rd_atomic);
		wb_u8(&b, bad.nqp);
		for (unsigned i = 0; i < bad.nqp; i++) {
			wb_u32(&b, bad.qpn[i]);
			wb_u32(&b, bad.psn[i]);
		}
		CHECK(rdma_qp_rec_decode(b.p, b.len, &o, err, sizeof(err)) == -EPROTO,
		      "mutation %d decoded", k);
		wb_free(&b);
	}
	/* nqp beyond RDMA_MAX_QPS */
	wb_init(&b);
	wb_u8(&b, 1);
	wb_cstr(&b, "mlx5_0");
	wb_u8(&b, 1);
	wb_u8(&b, 1);
	wb_u16(&b, 3);
	wb_bytes(&b, r.gid, 16);
	wb_u8(&b, 3);
	wb_u8(&b, 1);
	wb_u8(&b, 65);
	for (int i = 0; i < 65; i++) {
		wb_u32(&b, 1);
		wb_u32(&b, 1);
	}
	CHECK_EQ(rdma_qp_rec_decode(b.p, b.len, &o, err, sizeof(err)), -EPROTO);
	wb_free(&b);
}

static void t_no_device(void)
{
	struct rdma_ctx ctx;
	char err[256], names[256];
	int n = rdma_list_devices(names, sizeof(names));
	int rc = rdma_open(&ctx, "", err, sizeof(err));

	if (n > 0) {
		printf("note: %d RDMA device(s) here (%s): rdma_open -> %d\n", n, names, rc);
		if (rc == 0)
			rdma_close(&ctx);
	} else {
		CHECK_EQ(rc, -ENODEV);
		CHECK(strstr(err, "no RDMA device") != NULL, "%s", err);
		CHECK_EQ(ctx.ndev, 0);
	}
	/* a filter naming nothing that exists */
	rc = rdma_open(&ctx, "kvpool_no_such_dev0", err, sizeof(err));
	CHECK_EQ(rc, -ENODEV);
	CHECK(strstr(err, "no RDMA device") != NULL, "%s", err);
	/* sysfs lookups of a device that is not there */
	CHECK_EQ(rdma_dev_numa_node("", "kvpool_no_such_dev0"), -1);
}

/* ---- bounce buffer ------------------------------------------------------ */

static struct rdma_bounce tb;
static atomic_int owner[64];
static atomic_int clashes;

static void *bounce_thread(void *arg)
{
	int me = (int)(intptr_t)arg;

	for (int i = 0; i < 100000; i++) {
		int s = rdma_bounce_get(&tb);

		if (s < 0)
			continue;
		int prev = atomic_exchange(&owner[s], me);

		if (prev != 0)
			atomic_fetch_add(&clashes, 1);
		atomic_store(&owner[s], 0);
		rdma_bounce_put(&tb, s);
	}
	return NULL;
}

static void t_bounce(void)
{
	static uint8_t buf[10 * 4096 + 100];
	struct rdma_bounce b;
	int got[11];

	CHECK_EQ(rdma_bounce_init(&b, buf, 100, 4096), -EINVAL);
	CHECK_EQ(rdma_bounce_init(&b, NULL, 8192, 4096), -EINVAL);
	REQUIRE(rdma_bounce_init(&b, buf, sizeof(buf), 4096) == 0);
	CHECK_EQ(b.nslots, 10);
	for (int i = 0; i < 10; i++) {
		got[i] = rdma_bounce_get(&b);
		CHECK(got[i] >= 0 && got[i] < 10);
		for (int j = 0; j < i; j++)
			CHECK(got[i] != got[j], "slot %d handed out twice", got[i]);
		CHECK(rdma_bounce_ptr(&b, got[i]) == buf + (size_t)got[i] * 4096);
	}
	CHECK_EQ(rdma_bounce_get(&b), -1);
	CHECK_EQ(b.used, 10);
	rdma_bounce_put(&b, got[3]);
	rdma_bounce_put(&b, got[3]);		/* twice: ignored */
	rdma_bounce_put(&b, -1);		/* nonsense: ignored */
	rdma_bounce_put(&b, 10);
	CHECK_EQ(b.used, 9);
	CHECK_EQ(rdma_bounce_get(&b), got[3]);
	CHECK_EQ(rdma_bounce_get(&b), -1);
	for (int i = 0; i < 10; i++)
		rdma_bounce_put(&b, got[i]);
	CHECK_EQ(b.used, 0);
	rdma_bounce_fini(&b);

	/* two threads, more slots than one word of the bitmap */
	static uint8_t big[70 * 64];

	REQUIRE(rdma_bounce_init(&tb, big, sizeof(big), 64 * 70 / 64) == 0);
	CHECK_EQ(tb.nslots, 64);
	pthread_t th[2];

	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, bounce_thread, (void *)(intptr_t)(i + 1));
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(atomic_load(&clashes), 0);
	CHECK_EQ(tb.used, 0);
	rdma_bounce_fini(&tb);
}

/* ---- engine over a simulated QP set ------------------------------------- */

#define REM_SIZE (8u << 20)
#define VAL_SIZE (3u << 20)
#define SLOT (256u << 10)

struct world {
	uint8_t *rem, *val, *bounce;
	struct rdma_mr_chunk rc[5], lc[3], bc[2];
	struct rdma_bounce b;
	struct rdma_qps *q;
	struct rdma_eng e;
};

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (uint8_t)(x >> 16);
	}
}

/* Remote region in 5 chunks with odd boundaries, the value buffer in 3,
 * the bounce buffer (4 slots) in 2 whose boundary is inside a slot. */
static void world_init(struct world *w, unsigned nqp, unsigned depth)
{
	uint64_t rcut[6] = { 0, 1000003, 2u << 20, (2u << 20) + 4096, 5000000, REM_SIZE };
	uint64_t lcut[4] = { 0, 777777, 2000001, VAL_SIZE };

	memset(w, 0, sizeof(*w));
	w->rem = aligned_alloc(4096, REM_SIZE);
	w->val = aligned_alloc(4096, VAL_SIZE);
	w->bounce = aligned_alloc(4096, 4 * SLOT);
	REQUIRE(w->rem && w->val && w->bounce);
	for (int i = 0; i < 5; i++)
		w->rc[i] = (struct rdma_mr_chunk){ (uintptr_t)w->rem + rcut[i], rcut[i + 1] - rcut[i],
						   0x100u + (uint32_t)i, 0x200u + (uint32_t)i };
	for (int i = 0; i < 3; i++)
		w->lc[i] = (struct rdma_mr_chunk){ (uintptr_t)w->val + lcut[i], lcut[i + 1] - lcut[i],
						   0x300u + (uint32_t)i, 0x400u + (uint32_t)i };
	w->bc[0] = (struct rdma_mr_chunk){ (uintptr_t)w->bounce, SLOT + SLOT / 2, 0x500, 0x600 };
	w->bc[1] = (struct rdma_mr_chunk){ (uintptr_t)w->bounce + SLOT + SLOT / 2,
					   4 * SLOT - (SLOT + SLOT / 2), 0x501, 0x601 };
	REQUIRE(rdma_bounce_init(&w->b, w->bounce, 4 * SLOT, SLOT) == 0);
	w->q = rdma_sim_create(nqp, depth);
	REQUIRE(w->q);
	/* The HCA's view: remote chunks answer to their rkeys, local ones
	 * (value, bounce) to their lkeys. */
	struct rdma_mr_chunk remote[5];

	for (int i = 0; i < 5; i++) {
		remote[i] = w->rc[i];
		remote[i].lkey = 0xdead;	/* not usable as a local key */
	}
	REQUIRE(rdma_sim_region(w->q, remote, 5) == 0);
	struct rdma_mr_chunk local[5];

	for (int i = 0; i < 3; i++) {
		local[i] = w->lc[i];
		local[i].rkey = 0xbeef;
	}
	local[3] = w->bc[0];
	local[4] = w->bc[1];
	local[3].rkey = local[4].rkey = 0xbeef;
	REQUIRE(rdma_sim_region(w->q, local, 5) == 0);
	rdma_eng_init(&w->e, w->q, &w->b, w->bc, 2);
}

static void world_fini(struct world *w)
{
	rdma_qps_destroy(w->q);
	rdma_bounce_fini(&w->b);
	free(w->rem);
	free(w->val);
	free(w->bounce);
}

struct done_rec {
	int calls;
	int status;
};

static void on_done(struct rdma_xfer *x)
{
	struct done_rec *d = x->arg;

	d->calls++;
	d->status = x->status;
}

/* Drives until every transfer is done; with watch set, checks after each
 * step that the published magic never shows before the value is there. */
static void run_all(struct world *w, const uint8_t *watch_at, const uint8_t *want_val,
		    size_t want_len, uint32_t magic)
{
	for (int i = 0; i < 100000 && w->e.pending; i++) {
		rdma_eng_progress(&w->e, 0);
		if (watch_at) {
			uint32_t m;

			memcpy(&m, watch_at, 4);
			if (m == magic)
				CHECK(!memcmp(watch_at + 100, want_val, want_len),
				      "magic visible before the value landed");
		}
	}
	CHECK_EQ(w->e.pending, 0);
}

static void t_engine_basic(void)
{
	struct world w;
	uint8_t hdr[100], hdr2[100];
	uint8_t *val2 = malloc(VAL_SIZE);
	struct done_rec d = { 0 };
	const uint64_t off = 900000;	/* image crosses remote chunks 0->1->2->3 */
	const uint32_t magic = 0x4b565845;

	REQUIRE(val2);
	world_init(&w, 4, 8);
	memset(w.rem, 0xee, REM_SIZE);
	fill(hdr, sizeof(hdr), 1);
	memset(hdr, 0, 4);			/* the image's magic stays zero */
	fill(w.val, VAL_SIZE, 2);

	/* write: header through bounce, value direct, magic last */
	struct rdma_xfer x = {
		.write = true, .raddr = (uintptr_t)w.rem + off, .rc = w.rc, .nrc = 5,
		.hdr = hdr, .hdr_len = 100, .val = w.val, .vlen = VAL_SIZE - 5, .lc = w.lc, .nlc = 3,
		.publish = true, .magic = magic, .done = on_done, .arg = &d,
	};
	rdma_eng_add(&w.e, &x);
	run_all(&w, w.rem + off, w.val, VAL_SIZE - 5, magic);
	CHECK_EQ(d.calls, 1);
	CHECK_EQ(d.status, 0);
	uint32_t m;

	memcpy(&m, w.rem + off, 4);
	CHECK(m == magic, "magic %x", m);
	CHECK(!memcmp(w.rem + off + 4, hdr + 4, 96));
	CHECK(!memcmp(w.rem + off + 100, w.val, VAL_SIZE - 5));
	CHECK(w.rem[off - 1] == 0xee && w.rem[off + 100 + VAL_SIZE - 5] == 0xee, "wrote outside");
	/* split over every QP: 3 MiB in <= 1 MiB pieces cut at chunk edges */
	for (unsigned i = 0; i < 4; i++)
		CHECK(rdma_sim_executed(w.q, i) > 0, "qp %u unused", i);
	CHECK(w.e.posted >= 6, "posted %llu", (unsigned long long)w.e.posted);
	CHECK_EQ(w.b.used, 0);

	/* read back: value direct into a registered buffer (reuse w.val's
	 * registration by reading into it after clearing) */
	memcpy(val2, w.val, VAL_SIZE);
	memset(w.val, 0, VAL_SIZE);
	memset(hdr2, 0, sizeof(hdr2));
	struct rdma_xfer r = {
		.write = false, .raddr = (uintptr_t)w.rem + off, .rc = w.rc, .nrc = 5,
		.hdr = hdr2, .hdr_len = 100, .val = w.val, .vlen = VAL_SIZE - 5, .lc = w.lc,
		.nlc = 3, .done = on_done, .arg = &d,
	};
	d.calls = 0;
	rdma_eng_add(&w.e, &r);
	run_all(&w, NULL, NULL, 0, 0);
	CHECK_EQ(d.calls, 1);
	CHECK_EQ(d.status, 0);
	CHECK(!memcmp(hdr2 + 4, hdr + 4, 96) && !memcmp(hdr2, &magic, 4));
	CHECK(!memcmp(w.val, val2, VAL_SIZE - 5), "direct read differs");

	/* read through the bounce buffer only (unregistered destination),
	 * 3 MiB through 4 slots of 256 KiB */
	uint8_t *plain = calloc(1, VAL_SIZE);

	REQUIRE(plain);
	memset(hdr2, 0, sizeof(hdr2));
	struct rdma_xfer rb = {
		.write = false, .raddr = (uintptr_t)w.rem + off, .rc = w.rc, .nrc = 5,
		.hdr = hdr2, .hdr_len = 100, .val = plain, .vlen = VAL_SIZE - 5,
		.done = on_done, .arg = &d,
	};
	d.calls = 0;
	rdma_eng_add(&w.e, &rb);
	run_all(&w, NULL, NULL, 0, 0);
	CHECK_EQ(d.status, 0);
	CHECK(!memcmp(plain, val2, VAL_SIZE - 5), "bounced read differs");
	CHECK(!memcmp(hdr2 + 4, hdr + 4, 96));
	CHECK_EQ(w.b.used, 0);

	/* write through the bounce buffer from unregistered memory */
	fill(plain, VAL_SIZE, 9);
	struct rdma_xfer wb = {
		.write = true, .raddr = (uintptr_t)w.rem + 4096, .rc = w.rc, .nrc = 5,
		.hdr = hdr, .hdr_len = 100, .val = plain, .vlen = 1234567, .publish = true,
		.magic = magic, .done = on_done, .arg = &d,
	};
	d.calls = 0;
	rdma_eng_add(&w.e, &wb);
	run_all(&w, w.rem + 4096, plain, 1234567, magic);
	CHECK_EQ(d.status, 0);
	CHECK(!memcmp(w.rem + 4096 + 100, plain, 1234567));
	memcpy(&m, w.rem + 4096, 4);
	CHECK(m == magic);
	CHECK_EQ(w.b.used, 0);

	/* with a commit byte: written once the magic landed, never before */
	uint8_t *cb = w.rem + 16;		/* untouched so far: 0xee */
	memset(w.rem + 2 * 1048576, 0, 4);
	struct rdma_xfer wc = {
		.write = true, .raddr = (uintptr_t)w.rem + 2 * 1048576, .rc = w.rc, .nrc = 5,
		.hdr = hdr, .hdr_len = 100, .val = plain, .vlen = 300000, .publish = true,
		.magic = magic, .commit = 0x5a, .commit_raddr = (uintptr_t)cb,
		.done = on_done, .arg = &d,
	};
	CHECK(*cb == 0xee);
	d.calls = 0;
	rdma_eng_add(&w.e, &wc);
	for (int i = 0; i < 100000 && w.e.pending; i++) {
		rdma_eng_progress(&w.e, 0);
		memcpy(&m, w.rem + 2 * 1048576, 4);
		if (*cb == 0x5a)
			CHECK(m == magic, "commit byte before the magic");
	}
	CHECK(d.calls == 1 && d.status == 0 && *cb == 0x5a && w.rem[15] == 0xee &&
	      w.rem[17] == 0xee, "commit byte");
	CHECK_EQ(w.b.used, 0);

	free(plain);
	free(val2);
	world_fini(&w);
}

/* A gathered write: registered pieces (one across the value buffer's chunk
 * boundaries) go direct, unregistered ones through bounce slots, a
 * zero-length one is passed over; the remote image is the concatenation,
 * published last. Pieces that do not add up to vlen fail with -EINVAL. */
static void t_engine_gather(void)
{
	struct world w;
	uint8_t hdr[100];
	struct done_rec d = { 0 };
	const uint64_t off = 999000;	/* the image crosses remote chunks 0->1->2 */
	const uint32_t magic = 0x4b565845;
	uint8_t *plain = malloc(700001), *want = malloc(VAL_SIZE + 700001);

	REQUIRE(plain && want);
	world_init(&w, 3, 4);
	memset(w.rem, 0xee, REM_SIZE);
	fill(hdr, sizeof(hdr), 3);
	memset(hdr, 0, 4);
	fill(w.val, VAL_SIZE, 4);
	fill(plain, 700001, 5);
	/* registered 700000..2100000 crosses lc chunks 0->1->2 */
	struct rdma_vseg v[] = {
		{ plain, 3, NULL, 0 },
		{ w.val + 700000, 1400000, w.lc, 3 },
		{ NULL, 0, NULL, 0 },
		{ plain + 3, 600000, NULL, 0 },		/* > 2 slots: staged in runs */
		{ w.val + 5, 17, w.lc, 3 },
		{ plain + 600003, 99998, NULL, 0 },
	};
	uint64_t vlen = 0;

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		if (v[i].len)
			memcpy(want + vlen, v[i].p, v[i].len);
		vlen += v[i].len;
	}
	struct rdma_xfer x = {
		.write = true, .raddr = (uintptr_t)w.rem + off, .rc = w.rc, .nrc = 5,
		.hdr = hdr, .hdr_len = 100, .vlen = vlen, .vseg = v, .nvseg = 6,
		.publish = true, .magic = magic, .done = on_done, .arg = &d,
	};
	rdma_eng_add(&w.e, &x);
	run_all(&w, w.rem + off, want, vlen, magic);
	CHECK(d.calls == 1 && d.status == 0, "gather: calls %d status %d", d.calls, d.status);
	uint32_t m;

	memcpy(&m, w.rem + off, 4);
	CHECK(m == magic, "magic %x", m);
	CHECK(!memcmp(w.rem + off + 4, hdr + 4, 96));
	CHECK(!memcmp(w.rem + off + 100, want, vlen), "gathered image differs");
	CHECK(w.rem[off - 1] == 0xee && w.rem[off + 100 + vlen] == 0xee, "wrote outside");
	CHECK_EQ(w.b.used, 0);

	/* pieces short of vlen, and a read with pieces: refused, nothing posted */
	uint64_t posted = w.e.posted;
	struct rdma_xfer bad = x, rd = x;

	bad.vlen = vlen + 1;
	rd.write = false;
	d.calls = 0;
	rdma_eng_add(&w.e, &bad);
	rdma_eng_add(&w.e, &rd);
	run_all(&w, NULL, NULL, 0, 0);
	CHECK(d.calls == 2 && bad.status == -EINVAL && rd.status == -EINVAL, "bad vseg %d %d",
	      bad.status, rd.status);
	CHECK(w.e.posted == posted, "posted for a refused gather");
	CHECK_EQ(w.b.used, 0);
	free(plain);
	free(want);
	world_fini(&w);
}

/* Many transfers of random sizes and offsets, reads and writes mixed, two
 * QPs with shallow queues: every byte lands where it should. */
static void t_engine_many(void)
{
	struct world w;
	enum { N = 60 };
	struct rdma_xfer x[N];
	uint8_t *src[N], hdr[N][40];
	uint64_t off[N], len[N];
	struct done_rec d[N];
	uint64_t at = 0;

	world_init(&w, 2, 3);
	srand(7);
	for (int i = 0; i < N; i++) {
		len[i] = 1 + (uint64_t)(rand() % 200000);
		off[i] = at;
		at += 40 + len[i] + (uint64_t)(rand() % 5000);
		REQUIRE(at < REM_SIZE);
		src[i] = malloc(len[i]);
		REQUIRE(src[i]);
		fill(src[i], len[i], (unsigned)i + 100);
		fill(hdr[i], 40, (unsigned)i);
		memset(&d[i], 0, sizeof(d[i]));
		x[i] = (struct rdma_xfer){
			.write = true, .raddr = (uintptr_t)w.rem + off[i], .rc = w.rc, .nrc = 5,
			.hdr = hdr[i], .hdr_len = 40, .val = src[i], .vlen = len[i],
			.done = on_done, .arg = &d[i],
		};
		rdma_eng_add(&w.e, &x[i]);
	}
	run_all(&w, NULL, NULL, 0, 0);
	for (int i = 0; i < N; i++) {
		CHECK(d[i].calls == 1 && d[i].status == 0, "xfer %d: %d calls, status %d", i,
		      d[i].calls, d[i].status);
		CHECK(!memcmp(w.rem + off[i], hdr[i], 40), "xfer %d header", i);
		CHECK(!memcmp(w.rem + off[i] + 40, src[i], len[i]), "xfer %d value", i);
	}
	/* read them all back through the bounce buffer */
	for (int i = 0; i < N; i++) {
		memset(src[i], 0, len[i]);
		memset(hdr[i], 0, 40);
		x[i].write = false;
		d[i].calls = 0;
		rdma_eng_add(&w.e, &x[i]);
	}
	run_all(&w, NULL, NULL, 0, 0);
	for (int i = 0; i < N; i++) {
		CHECK(d[i].calls == 1 && d[i].status == 0);
		CHECK(!memcmp(w.rem + off[i], hdr[i], 40), "read %d header", i);
		CHECK(!memcmp(w.rem + off[i] + 40, src[i], len[i]), "read %d value", i);
		free(src[i]);
	}
	CHECK_EQ(w.b.used, 0);
	world_fini(&w);
}

static void t_engine_errors(void)
{
	struct world w;
	uint8_t hdr[64] = { 0 };
	struct done_rec d1 = { 0 }, d2 = { 0 }, d3 = { 0 };

	/* a completion error: the transfer fails, the next one too, the set
	 * is broken, every slot comes back */
	world_init(&w, 2, 4);
	rdma_sim_fail_after(w.q, 2);
	struct rdma_xfer a = {
		.write = false, .raddr = (uintptr_t)w.rem, .rc = w.rc, .nrc = 5, .hdr = hdr,
		.hdr_len = 64, .val = w.val, .vlen = VAL_SIZE, .done = on_done, .arg = &d1,
	};
	struct rdma_xfer b = a;

	b.arg = &d2;
	rdma_eng_add(&w.e, &a);
	rdma_eng_add(&w.e, &b);
	run_all(&w, NULL, NULL, 0, 0);
	CHECK(d1.calls == 1 && d1.status == -EIO, "first: %d calls status %d", d1.calls, d1.status);
	CHECK(d2.calls == 1 && (d2.status == -EIO || d2.status == -ECONNRESET), "second: %d",
	      d2.status);
	CHECK(w.q->broken);
	CHECK_EQ(w.b.used, 0);
	/* a broken set takes nothing new */
	struct rdma_xfer c = a;

	c.arg = &d3;
	rdma_eng_add(&w.e, &c);
	run_all(&w, NULL, NULL, 0, 0);
	CHECK(d3.calls == 1 && d3.status == -ECONNRESET, "after break: %d", d3.status);
	world_fini(&w);

	/* outside the remote region: refused before anything is posted */
	world_init(&w, 2, 4);
	memset(&d1, 0, sizeof(d1));
	struct rdma_xfer o = {
		.write = true, .raddr = (uintptr_t)w.rem + REM_SIZE, .rc = w.rc, .nrc = 5,
		.hdr = hdr, .hdr_len = 64, .val = w.val, .vlen = 10, .lc = w.lc, .nlc = 3,
		.done = on_done, .arg = &d1,
	};
	rdma_eng_add(&w.e, &o);
	run_all(&w, NULL, NULL, 0, 0);
	CHECK(d1.calls == 1 && d1.status == -EFAULT, "status %d", d1.status);
	CHECK_EQ(w.e.posted, 0);
	CHECK(!w.q->broken);
	/* an image running off the end of the region fails (the first pieces
	 * may already have gone out) */
	memset(&d1, 0, sizeof(d1));
	o.raddr = (uintptr_t)w.rem + REM_SIZE - 1000;
	o.vlen = 5000;
	rdma_eng_add(&w.e, &o);
	run_all(&w, NULL, NULL, 0, 0);
	CHECK(d1.calls == 1 && d1.status == -EFAULT, "status %d", d1.status);
	CHECK_EQ(w.b.used, 0);

	/* a key the HCA does not know: remote access error */
	struct rdma_mr_chunk wrong[5];

	memcpy(wrong, w.rc, sizeof(wrong));
	wrong[0].rkey = 0x9999;
	memset(&d1, 0, sizeof(d1));
	struct rdma_xfer k = {
		.write = false, .raddr = (uintptr_t)w.rem + 10, .rc = wrong, .nrc = 5, .hdr = hdr,
		.hdr_len = 64, .val = w.val, .vlen = 100, .lc = w.lc, .nlc = 3, .done = on_done,
		.arg = &d1,
	};
	rdma_eng_add(&w.e, &k);
	run_all(&w, NULL, NULL, 0, 0);
	CHECK(d1.calls == 1 && d1.status == -EIO, "status %d", d1.status);
	CHECK(w.q->broken);
	world_fini(&w);

	/* abort with pieces in flight (a deadline): slots back, callbacks run */
	world_init(&w, 2, 64);
	memset(&d1, 0, sizeof(d1));
	memset(&d2, 0, sizeof(d2));
	struct rdma_xfer f1 = {
		.write = false, .raddr = (uintptr_t)w.rem, .rc = w.rc, .nrc = 5, .hdr = hdr,
		.hdr_len = 64, .val = w.val, .vlen = VAL_SIZE, .done = on_done, .arg = &d1,
	};
	struct rdma_xfer f2 = f1;

	f2.arg = &d2;
	rdma_eng_add(&w.e, &f1);
	rdma_eng_add(&w.e, &f2);
	rdma_sim_hold(w.q, true);
	rdma_eng_progress(&w.e, 0);
	CHECK_EQ(w.b.used, 4);			/* every slot is out */
	CHECK(w.e.pending == 2 && w.e.flying != NULL, "nothing in flight to abort");
	rdma_eng_abort(&w.e, -ETIMEDOUT);
	CHECK(d1.calls == 1 && d1.status == -ETIMEDOUT);
	CHECK(d2.calls == 1 && d2.status == -ETIMEDOUT);
	CHECK_EQ(w.e.pending, 0);
	CHECK_EQ(w.b.used, 0);
	CHECK(w.e.flying == NULL);
	world_fini(&w);
}

int main(void)
{
	t_plan();
	t_span();
	t_filter();
	t_info_codec();
	t_qp_codec();
	t_no_device();
	t_bounce();
	t_engine_basic();
	t_engine_gather();
	t_engine_many();
	t_engine_errors();
	return tl_done();
}

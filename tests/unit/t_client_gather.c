/* t_client_gather: kvp_batch_put_iov / kvp_put_iov against a master and
 * two kvpool-node processes — values made of 1..300 pieces of odd sizes
 * (zero-length ones among them, values past the local path's 2 MiB copy
 * chunk, more pieces than one sendmsg takes) read back byte-exact, with the
 * checksum the master holds equal to xxh3-64 of the concatenation and to
 * that of a contiguous put of the same bytes; over the local path (one and
 * two replicas: the first replica hashes, the second copies) and over TCP
 * (checksum computed before sending), also with the nodes stopped
 * (SIGSTOP) while the batch is sent, so that sends stop and resume in the
 * middle of pieces; per-item errors next to successes; an upsert in
 * pieces. Exit 0/1/77.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extent.h"
#include "testlib.h"

#define NV 12			/* values per batch */
#define MAXP 300		/* pieces per value, at most */

struct gval {
	char *key;
	uint8_t *whole;		/* the concatenation */
	size_t len;
	size_t np;
};

/* Piece sizes for value v: odd, with empty pieces mixed in; values of many
 * pieces take small ones (max_object_size bounds the sum). */
static size_t piece_len(size_t v, size_t j, size_t np)
{
	static const size_t big[] = { 304, 1, 0, 4093, 65537, 777, 0, 1048579, 3, 262147 };
	static const size_t small[] = { 1, 0, 777, 4093, 304, 3, 65 };

	if (np > 20)
		return small[(v + j) % (sizeof(small) / sizeof(small[0]))];
	return big[(v * 7 + j) % (sizeof(big) / sizeof(big[0]))];
}

static size_t pieces_of(size_t v)
{
	static const size_t np[] = { 1, 2, 3, 5, 2, 17, 64, 65, 2, 7, 300, 4 };

	return np[v % (sizeof(np) / sizeof(np[0]))];
}

/* The batch: value v in pieces_of(v) pieces carved out of one buffer
 * (whole), each piece copied to its own allocation so that no two are
 * adjacent in memory. */
static void build(const char *prefix, struct gval *g, struct kvp_iov *iov, size_t *first,
		  void **owned, size_t *nowned)
{
	size_t k = 0;

	*nowned = 0;
	for (size_t v = 0; v < NV; v++) {
		REQUIRE(asprintf(&g[v].key, "%s/g%02zu", prefix, v) > 0);
		g[v].np = pieces_of(v);
		g[v].len = 0;
		for (size_t j = 0; j < g[v].np; j++)
			g[v].len += piece_len(v, j, g[v].np);
		if (!g[v].len)
			g[v].len = 1;
		g[v].whole = malloc(g[v].len);
		REQUIRE(g[v].whole);
		tl_fill(g[v].whole, g[v].len, g[v].key);
		first[v] = k;
		size_t off = 0;

		for (size_t j = 0; j < g[v].np; j++) {
			size_t l = piece_len(v, j, g[v].np);

			if (off + l > g[v].len)
				l = g[v].len - off;
			if (j == g[v].np - 1)
				l = g[v].len - off;	/* the rest */
			if (!l) {
				iov[k++] = (struct kvp_iov){ NULL, 0 };
				continue;
			}
			uint8_t *p = malloc(l + 64);

			REQUIRE(p);
			memcpy(p + 1, g[v].whole + off, l);	/* odd alignment */
			owned[(*nowned)++] = p;
			iov[k++] = (struct kvp_iov){ p + 1, l };
			off += l;
		}
	}
	first[NV] = k;
}

static void verify(struct kvp *k, struct gval *g, const char *what)
{
	for (size_t v = 0; v < NV; v++) {
		void *buf = NULL;
		size_t len = 0;
		struct kvp_stat st;
		int rc = kvp_get(k, g[v].key, &buf, &len);

		CHECK_RC(rc, 0);
		if (rc == 0) {
			CHECK(len == g[v].len);
			if (len != g[v].len || memcmp(buf, g[v].whole, len) != 0)
				fprintf(stderr, "%s: value %zu (%zu pieces, %zu bytes) differs\n", what,
					v, g[v].np, g[v].len);
			CHECK(len == g[v].len && tl_check_fill(buf, len, g[v].key));
		}
		kvp_free(buf);
		CHECK_RC(kvp_stat(k, g[v].key, &st), 0);
		CHECK(st.checksum == ext_checksum(g[v].whole, g[v].len));
	}
}

struct put_call {
	struct kvp *k;
	const char *const *keys;
	const struct kvp_iov *iov;
	const size_t *first;
	int *res;
	int rc;
};

static void *put_thread(void *arg)
{
	struct put_call *c = arg;

	c->rc = kvp_batch_put_iov(c->k, NV, c->keys, c->iov, c->first, NULL, c->res);
	return NULL;
}

/* The batch put, with the nodes stopped for a while first when stall is
 * set: the client fills the socket buffers, waits, and goes on from
 * wherever the kernel stopped taking bytes. */
static int put_batch(struct tl_pool *p, struct kvp *k, const char *const *keys,
		     const struct kvp_iov *iov, const size_t *first, int *res, bool stall)
{
	struct put_call c = { k, keys, iov, first, res, 0 };
	pthread_t t;

	if (!stall)
		return kvp_batch_put_iov(k, NV, keys, iov, first, NULL, res);
	for (int i = 0; i < p->nnodes; i++)
		kill(p->node[i], SIGSTOP);
	REQUIRE(pthread_create(&t, NULL, put_thread, &c) == 0);
	usleep(400000);
	for (int i = 0; i < p->nnodes; i++)
		kill(p->node[i], SIGCONT);
	pthread_join(t, NULL);
	return c.rc;
}

static void run(struct tl_pool *p, const char *const *ov, const char *prefix, bool local,
		bool stall)
{
	static struct kvp_iov iov[NV * MAXP];
	static void *owned[NV * MAXP];
	struct gval g[NV];
	size_t first[NV + 1], nowned;
	const char *keys[NV];
	int res[NV];
	uint64_t removed = 0;
	struct kvp_stats s0, s1;
	int err;
	struct kvp *k = tl_pool_open(p, ov, &err);

	REQUIRE(k);
	build(prefix, g, iov, first, owned, &nowned);
	kvp_stats(k, &s0);
	for (size_t v = 0; v < NV; v++)
		keys[v] = g[v].key;
	CHECK_RC(put_batch(p, k, keys, iov, first, res, stall), 0);
	for (size_t v = 0; v < NV; v++)
		CHECK_RC(res[v], 0);
	kvp_stats(k, &s1);
	uint64_t total = 0;

	for (size_t v = 0; v < NV; v++)
		total += g[v].len;
	if (local)
		CHECK(s1.local_bytes - s0.local_bytes >= total);
	else
		CHECK(s1.tcp_bytes - s0.tcp_bytes >= total);
	verify(k, g, prefix);

	/* The same bytes put contiguously store the same checksum. */
	for (size_t v = 0; v < NV; v++) {
		char *key2;
		struct kvp_stat a, b;

		REQUIRE(asprintf(&key2, "%s-flat", g[v].key) > 0);
		CHECK_RC(kvp_put(k, key2, g[v].whole, g[v].len), 0);
		CHECK_RC(kvp_stat(k, key2, &a), 0);
		CHECK_RC(kvp_stat(k, g[v].key, &b), 0);
		CHECK(a.checksum == b.checksum);
		free(key2);
	}

	/* A second put of the same key: first writer wins, as for any put. */
	CHECK_RC(kvp_put_iov(k, g[1].key, iov + first[1], first[2] - first[1], NULL), KVP_EEXIST);

	/* An upsert in pieces replaces the value whole. */
	{
		struct kvp_put_opts up = { .flags = KVP_PUT_UPSERT };
		uint8_t a[1000], b[3001];
		struct kvp_iov two[3] = { { a, sizeof(a) }, { NULL, 0 }, { b, sizeof(b) } };
		uint8_t want[sizeof(a) + sizeof(b)];
		void *buf = NULL;
		size_t len = 0;

		memset(a, 0xa5, sizeof(a));
		tl_fill(b, sizeof(b), "upsert");
		memcpy(want, a, sizeof(a));
		memcpy(want + sizeof(a), b, sizeof(b));
		CHECK_RC(kvp_put_iov(k, g[0].key, two, 3, &up), 0);
		CHECK_RC(kvp_get(k, g[0].key, &buf, &len), 0);
		CHECK(len == sizeof(want) && buf && memcmp(buf, want, len) == 0);
		kvp_free(buf);
	}

	/* Room for the next run. */
	CHECK_RC(kvp_remove_prefix(k, prefix, KVP_REMOVE_FORCE, &removed), 0);
	CHECK(removed == 2 * NV);
	for (size_t v = 0; v < NV; v++) {
		free(g[v].key);
		free(g[v].whole);
	}
	for (size_t i = 0; i < nowned; i++)
		free(owned[i]);
	kvp_close(k);
}

/* Per-item errors next to successes in one batch. */
static void errors(struct tl_pool *p)
{
	int err;
	struct kvp *k = tl_pool_open(p, NULL, &err);
	uint8_t a[100], b[200];
	struct kvp_iov iov[] = {
		{ a, 100 }, { b, 200 },		/* 0: ok */
		{ NULL, 5 }, { a, 10 },		/* 1: a NULL piece with bytes */
		{ NULL, 0 }, { a, 0 },		/* 2: no byte at all */
		{ b, 50 },			/* 3: bad key */
		{ a, 1 }, { b, 1 },		/* 4: ok */
	};
	size_t first[] = { 0, 2, 4, 6, 7, 9 };
	const char *keys[] = { "gerr/ok0", "gerr/null", "gerr/empty", "", "gerr/ok4" };
	int res[5];
	void *buf = NULL;
	size_t len = 0;

	REQUIRE(k);
	memset(a, 1, sizeof(a));
	memset(b, 2, sizeof(b));
	CHECK_RC(kvp_batch_put_iov(k, 5, keys, iov, first, NULL, res), 0);
	CHECK_RC(res[0], 0);
	CHECK_RC(res[1], KVP_EINVAL);
	CHECK_RC(res[2], KVP_EINVAL);
	CHECK_RC(res[3], KVP_EKEY);
	CHECK_RC(res[4], 0);
	CHECK_RC(kvp_exists(k, "gerr/null"), 0);
	CHECK_RC(kvp_get(k, "gerr/ok4", &buf, &len), 0);
	CHECK(len == 2 && buf && ((uint8_t *)buf)[0] == 1 && ((uint8_t *)buf)[1] == 2);
	kvp_free(buf);

	/* first[] running backwards fails that item only. */
	size_t back[] = { 0, 2, 1, 2 };
	const char *k3[] = { "gerr/b0", "gerr/b1", "gerr/b2" };

	CHECK_RC(kvp_batch_put_iov(k, 3, k3, iov, back, NULL, res), 0);
	CHECK_RC(res[0], 0);
	CHECK_RC(res[1], KVP_EINVAL);
	CHECK_RC(res[2], 0);

	/* Larger than max_object_size in all, each piece small enough. */
	static uint8_t big[3 << 20];
	struct kvp_iov tb[] = { { big, sizeof(big) }, { big, sizeof(big) } };

	CHECK_RC(kvp_put_iov(k, "gerr/big", tb, 2, NULL), KVP_ETOOBIG);
	/* Whole-call argument errors. */
	CHECK_RC(kvp_batch_put_iov(k, 1, keys, NULL, first, NULL, res), KVP_EINVAL);
	CHECK_RC(kvp_batch_put_iov(k, 1, keys, iov, NULL, NULL, res), KVP_EINVAL);
	CHECK_RC(kvp_put_iov(k, "gerr/none", NULL, 0, NULL), KVP_EINVAL);
	CHECK_RC(kvp_put_iov(k, "", iov, 1, NULL), KVP_EKEY);
	CHECK_RC(kvp_batch_put_iov(k, 0, NULL, NULL, NULL, NULL, NULL), 0);
	kvp_close(k);
}

int main(void)
{
	struct tl_pool *p = tl_pool_start(2, 96, "[cluster]\nmax_object_size = 5M\n");
	const char *const local1[] = { "client.protocol=auto", NULL };
	const char *const local2[] = { "client.protocol=local", "client.replicas=2", NULL };
	const char *const tcp1[] = { "client.protocol=tcp", NULL };
	const char *const tcp2[] = { "client.protocol=tcp", "client.replicas=2",
				     "client.connections_per_node=3", NULL };

	run(p, local1, "local1", true, false);
	run(p, local2, "local2", true, false);
	run(p, tcp1, "tcp1", false, false);
	run(p, tcp2, "tcp2", false, false);
	run(p, tcp1, "tcp1-stalled", false, true);
	errors(p);
	return tl_done();
}

/* t_client_batch: the batch calls against a master and two kvpool-node
 * processes with client.replicas=2 — 256 keys of mixed sizes put in one
 * call, then exists/size/get_into in one call each, every value verified;
 * the same over TCP with connections_per_node=3 (transfers spread over
 * connections and nodes) and with a max_batch of 50 (the client splits the
 * master frames); per-item errors (missing keys, small buffers, duplicates,
 * invalid keys) next to successes, also spread through a 40-key batch;
 * batch remove. Exit 0/1/77.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

#define N 256

static size_t size_of(size_t i)
{
	static const size_t s[] = { 1, 777, 4096, 65536, 200000, 1 << 20 };

	return s[i % (sizeof(s) / sizeof(s[0]))] + (i / 6);
}

static void run(struct tl_pool *p, const char *const *ov, const char *prefix)
{
	char *keys[N + 2];
	void *bufs[N + 2];
	size_t lens[N + 2], caps[N + 2];
	int res[N + 2];
	int64_t res64[N + 2];
	struct kvp_stats s0, s1;
	int err;
	struct kvp *k = tl_pool_open(p, ov, &err);

	REQUIRE(k);
	kvp_stats(k, &s0);
	for (size_t i = 0; i < N; i++) {
		REQUIRE(asprintf(&keys[i], "%s/obj-%03zu", prefix, i) > 0);
		lens[i] = size_of(i);
		bufs[i] = malloc(lens[i]);
		REQUIRE(bufs[i]);
		tl_fill(bufs[i], lens[i], keys[i]);
	}
	CHECK_RC(kvp_batch_put_from(k, N, (const char *const *)keys, (const void *const *)bufs,
				    lens, res), 0);
	for (size_t i = 0; i < N; i++)
		CHECK_RC(res[i], 0);

	/* replicas land on both nodes */
	{
		struct kvp_stat st;

		CHECK_RC(kvp_stat(k, keys[7], &st), 0);
		CHECK(st.nreplicas == 2);
		if (st.nreplicas == 2)
			CHECK(strcmp(st.replicas[0].node, st.replicas[1].node) != 0);
	}

	/* exists + size, with a missing and an invalid key at the end */
	keys[N] = "no/such/key";
	keys[N + 1] = "";
	CHECK_RC(kvp_batch_exists(k, N + 2, (const char *const *)keys, res), 0);
	for (size_t i = 0; i < N; i++)
		CHECK_RC(res[i], 1);
	CHECK_RC(res[N], 0);
	CHECK_RC(res[N + 1], KVP_EKEY);
	CHECK_RC(kvp_batch_size(k, N + 2, (const char *const *)keys, res64), 0);
	for (size_t i = 0; i < N; i++)
		CHECK_RC(res64[i], (long long)lens[i]);
	CHECK_RC(res64[N], KVP_ENOTFOUND);
	CHECK_RC(res64[N + 1], KVP_EKEY);

	/* get_into everything; item 5's buffer is one byte short */
	for (size_t i = 0; i < N; i++) {
		caps[i] = lens[i] - (i == 5);
		bufs[i] = memset(bufs[i], 0, lens[i]);
	}
	bufs[N] = bufs[N + 1] = malloc(16);
	caps[N] = caps[N + 1] = 16;
	CHECK_RC(kvp_batch_get_into(k, N + 2, (const char *const *)keys, bufs, caps, res64), 0);
	for (size_t i = 0; i < N; i++) {
		if (i == 5) {
			CHECK_RC(res64[i], KVP_ETOOBIG);
			continue;
		}
		CHECK_RC(res64[i], (long long)lens[i]);
		CHECK(tl_check_fill(bufs[i], lens[i], keys[i]));
	}
	CHECK_RC(res64[N], KVP_ENOTFOUND);
	CHECK_RC(res64[N + 1], KVP_EKEY);

	/* duplicates in a batch: the first 3 again plus 2 new ones */
	{
		char *k2[5] = { keys[0], keys[1], keys[2], NULL, NULL };
		const void *b2[5] = { bufs[0], bufs[1], bufs[2], bufs[3], bufs[4] };
		size_t l2[5] = { lens[0], lens[1], lens[2], lens[3], lens[4] };
		int r2[5];

		REQUIRE(asprintf(&k2[3], "%s/new-a", prefix) > 0);
		REQUIRE(asprintf(&k2[4], "%s/new-b", prefix) > 0);
		tl_fill((void *)b2[3], l2[3], k2[3]);
		tl_fill((void *)b2[4], l2[4], k2[4]);
		CHECK_RC(kvp_batch_put_from(k, 5, (const char *const *)k2, b2, l2, r2), 0);
		CHECK_RC(r2[0], KVP_EEXIST);
		CHECK_RC(r2[1], KVP_EEXIST);
		CHECK_RC(r2[2], KVP_EEXIST);
		CHECK_RC(r2[3], 0);
		CHECK_RC(r2[4], 0);
		CHECK_RC(kvp_batch_remove(k, 2, (const char *const *)k2 + 3, KVP_REMOVE_FORCE, r2), 0);
		CHECK_RC(r2[0], 0);
		CHECK_RC(r2[1], 0);
		free(k2[3]);
		free(k2[4]);
	}

	kvp_stats(k, &s1);
	CHECK(s1.checksum_mismatches == s0.checksum_mismatches);
	CHECK(s1.puts - s0.puts == N + 2);
	CHECK(s1.gets - s0.gets == N - 1);

	/* Failures spread through a larger batch (an existing key near each
	 * end, an invalid one in the middle): every item keeps its own
	 * result, and what succeeded is stored. */
	{
		enum { M = 40 };
		char *k3[M];
		void *b3[M];
		size_t l3[M];
		int r3[M];
		int64_t g3[M];

		for (size_t i = 0; i < M; i++) {
			if (i == 3 || i == 35)
				k3[i] = strdup(keys[i]);	/* exists: EEXIST */
			else if (i == 20)
				k3[i] = strdup("");		/* EKEY */
			else
				REQUIRE(asprintf(&k3[i], "%s/half-%02zu", prefix, i) > 0);
			REQUIRE(k3[i]);
			l3[i] = 4096 + 13 * i;
			REQUIRE((b3[i] = malloc(l3[i])));
			tl_fill(b3[i], l3[i], k3[i]);
		}
		CHECK_RC(kvp_batch_put_from(k, M, (const char *const *)k3, (const void *const *)b3,
					    l3, r3), 0);
		for (size_t i = 0; i < M; i++)
			CHECK_RC(r3[i], i == 3 || i == 35 ? KVP_EEXIST : i == 20 ? KVP_EKEY : 0);
		for (size_t i = 0; i < M; i++)
			memset(b3[i], 0, l3[i]);
		CHECK_RC(kvp_batch_get_into(k, M, (const char *const *)k3, b3, l3, g3), 0);
		for (size_t i = 0; i < M; i++) {
			if (i == 3 || i == 35 || i == 20)
				continue;
			CHECK_RC(g3[i], (long long)l3[i]);
			CHECK(tl_check_fill(b3[i], l3[i], k3[i]));
			CHECK_RC(kvp_remove(k, k3[i], KVP_REMOVE_FORCE), 0);
		}
		for (size_t i = 0; i < M; i++) {
			free(k3[i]);
			free(b3[i]);
		}
	}

	/* remove all: the gets above released their leases (the item whose
	 * buffer was short too), so a plain remove works and the forced one
	 * finds nothing left */
	CHECK_RC(kvp_batch_remove(k, N, (const char *const *)keys, 0, res), 0);
	for (size_t i = 0; i < N; i++)
		CHECK_RC(res[i], 0);
	CHECK_RC(kvp_batch_remove(k, N, (const char *const *)keys, KVP_REMOVE_FORCE, res), 0);
	for (size_t i = 0; i < N; i++)
		CHECK(res[i] == 0 || res[i] == KVP_ENOTFOUND);
	CHECK_RC(kvp_batch_exists(k, N, (const char *const *)keys, res), 0);
	for (size_t i = 0; i < N; i++)
		CHECK_RC(res[i], 0);

	for (size_t i = 0; i < N; i++) {
		free(keys[i]);
		free(bufs[i]);
	}
	free(bufs[N]);
	kvp_close(k);
}

int main(void)
{
	struct tl_pool *p;

	p = tl_pool_start(2, 256, "[client]\nreplicas = 2\n");
	run(p, NULL, "auto");
	const char *tcp[] = { "client.protocol=tcp", "client.connections_per_node=3", NULL };

	run(p, tcp, "tcp");
	const char *small[] = { "cluster.max_batch=50", "client.connections_per_node=1",
				"client.protocol=tcp", NULL };

	run(p, small, "small");
	const char *mixed[] = { "client.host_id=elsewhere", "cluster.max_batch=7", NULL };

	run(p, mixed, "remote");
	return tl_done();
}

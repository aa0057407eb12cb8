/* t_client_upsert: kvp_put_opts / kvp_batch_put_opts / kvp_replica_clear
 * through libkvpool against a master and two nodes. Readers that get a key
 * while a writer upserts it again and again (values of changing sizes,
 * local memcpy path and TCP) always receive one whole version — never
 * "not found", never a mix, never a failed read; soft pins, the preferred
 * segment and replica clearing do what kvpool.h says. Exit 0/1/77.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

#define READERS 4
#define VERSIONS 300
#define HOT_KEYS 3
#define MAXLEN (200 * 1024)

static struct kvp *handle;
static atomic_int writer_done, bad, wrong_bytes;
static atomic_long reads_ok;

/* Version v of a hot key: length and bytes derived from (key, v), v in the
 * first 8 bytes, so a reader can tell which version it got and check it. */
static size_t ver_len(unsigned v)
{
	static const size_t s[] = { 4096, 200 * 1024, 64 * 1024 + 3, 100, 150 * 1024 };

	return s[v % 5] + v % 7;
}

static void ver_fill(uint8_t *buf, const char *key, unsigned v)
{
	char tag[96];
	uint64_t v64 = v;
	size_t len = ver_len(v);

	memcpy(buf, &v64, 8);
	snprintf(tag, sizeof(tag), "%s/v%u", key, v);
	tl_fill(buf + 8, len - 8, tag);
}

/* 1 if buf (len bytes) is exactly one version of key. */
static int ver_check(const uint8_t *buf, size_t len, const char *key)
{
	char tag[96];
	uint64_t v;

	if (len < 8)
		return 0;
	memcpy(&v, buf, 8);
	if (v > VERSIONS || ver_len((unsigned)v) != len)
		return 0;
	snprintf(tag, sizeof(tag), "%s/v%u", key, (unsigned)v);
	return tl_check_fill(buf + 8, len - 8, tag);
}

static void hot_key(char *out, size_t cap, int i)
{
	snprintf(out, cap, "hot/%d", i);
}

static void *writer(void *arg)
{
	const struct kvp_put_opts *o = arg;
	uint8_t *buf = malloc(MAXLEN + 16);
	char key[32];

	REQUIRE(buf);
	for (unsigned v = 1; v <= VERSIONS; v++) {
		int i = (int)(v % HOT_KEYS);

		hot_key(key, sizeof(key), i);
		ver_fill(buf, key, v);
		int rc = kvp_put_opts(handle, key, buf, ver_len(v), o);
		if (rc != 0) {
			fprintf(stderr, "upsert %s v%u: %s\n", key, v, kvp_errname(rc));
			atomic_fetch_add(&bad, 1);
		}
	}
	free(buf);
	atomic_store(&writer_done, 1);
	return NULL;
}

static void *reader(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	uint8_t *bufs[HOT_KEYS];
	char keys[HOT_KEYS][32];

	for (int i = 0; i < HOT_KEYS; i++) {
		bufs[i] = malloc(MAXLEN + 16);
		REQUIRE(bufs[i]);
		hot_key(keys[i], sizeof(keys[i]), i);
	}
	while (!atomic_load(&writer_done)) {
		seed = seed * 1103515245u + 12345u;
		if ((seed >> 8) % 4 == 0) {
			/* a batch of every hot key into caller buffers */
			const char *k[HOT_KEYS];
			void *b[HOT_KEYS];
			size_t caps[HOT_KEYS];
			int64_t res[HOT_KEYS];

			for (int i = 0; i < HOT_KEYS; i++) {
				k[i] = keys[i];
				b[i] = bufs[i];
				caps[i] = MAXLEN + 16;
			}
			int rc = kvp_batch_get_into(handle, HOT_KEYS, k, b, caps, res);
			for (int i = 0; i < HOT_KEYS; i++) {
				if (rc != 0 || res[i] < 0) {
					fprintf(stderr, "batch get %s: %s\n", k[i],
						kvp_errname(rc ? rc : (int)res[i]));
					atomic_fetch_add(&bad, 1);
				} else if (!ver_check(bufs[i], (size_t)res[i], k[i])) {
					atomic_fetch_add(&wrong_bytes, 1);
				} else {
					atomic_fetch_add(&reads_ok, 1);
				}
			}
			continue;
		}
		int i = (int)((seed >> 12) % HOT_KEYS);
		void *v = NULL;
		size_t len = 0;
		int rc = kvp_get(handle, keys[i], &v, &len);
		if (rc != 0) {
			fprintf(stderr, "get %s: %s\n", keys[i], kvp_errname(rc));
			atomic_fetch_add(&bad, 1);
		} else if (!ver_check(v, len, keys[i])) {
			atomic_fetch_add(&wrong_bytes, 1);
		} else {
			atomic_fetch_add(&reads_ok, 1);
		}
		kvp_free(v);
	}
	for (int i = 0; i < HOT_KEYS; i++)
		free(bufs[i]);
	return NULL;
}

/* Version 0 of every hot key first (a plain put), then the race. */
static void race(struct tl_pool *p, const char *const *ov, uint32_t replicas, const char *name)
{
	struct kvp_put_opts o = { .flags = KVP_PUT_UPSERT, .replicas = replicas };
	pthread_t w, r[READERS];
	uint8_t *buf = malloc(MAXLEN + 16);
	char key[32];
	int err;

	REQUIRE(buf);
	handle = tl_pool_open(p, ov, &err);
	REQUIRE(handle);
	for (int i = 0; i < HOT_KEYS; i++) {
		hot_key(key, sizeof(key), i);
		ver_fill(buf, key, 0);
		kvp_remove(handle, key, KVP_REMOVE_FORCE);
		CHECK_RC(kvp_put(handle, key, buf, ver_len(0)), 0);
	}
	atomic_store(&writer_done, 0);
	atomic_store(&reads_ok, 0);
	for (int i = 0; i < READERS; i++)
		REQUIRE(pthread_create(&r[i], NULL, reader, (void *)(uintptr_t)(i + 1)) == 0);
	REQUIRE(pthread_create(&w, NULL, writer, &o) == 0);
	pthread_join(w, NULL);
	for (int i = 0; i < READERS; i++)
		pthread_join(r[i], NULL);
	/* the last version of each key is what a get returns now */
	for (int i = 0; i < HOT_KEYS; i++) {
		void *v = NULL;
		size_t len = 0;
		uint64_t got = 0;

		hot_key(key, sizeof(key), i);
		CHECK_RC(kvp_get(handle, key, &v, &len), 0);
		if (v && len >= 8)
			memcpy(&got, v, 8);
		CHECK(ver_check(v, len, key));
		CHECK(got > VERSIONS - HOT_KEYS);
		kvp_free(v);
	}
	printf("%s: %ld verified reads during %d upserts; %d wrong, %d failed\n", name,
	       atomic_load(&reads_ok), VERSIONS, atomic_load(&wrong_bytes), atomic_load(&bad));
	CHECK(atomic_load(&reads_ok) > 0);
	kvp_close(handle);
	handle = NULL;
	free(buf);
}

static void test_options(struct tl_pool *p)
{
	struct kvp_stat st;
	uint8_t v[1000];
	int err, res[2];
	struct kvp *k = tl_pool_open(p, NULL, &err);

	REQUIRE(k);
	memset(v, 'a', sizeof(v));
	CHECK_RC(kvp_put(k, "opt/a", v, sizeof(v)), 0);
	CHECK_RC(kvp_put(k, "opt/a", v, sizeof(v)), KVP_EEXIST);
	struct kvp_put_opts up = { .flags = KVP_PUT_UPSERT };
	memset(v, 'b', 500);
	CHECK_RC(kvp_put_opts(k, "opt/a", v, 500, &up), 0);
	uint8_t out[1000];
	CHECK(kvp_get_into(k, "opt/a", out, sizeof(out)) == 500);
	CHECK(memcmp(out, v, 500) == 0);

	/* bad options */
	struct kvp_put_opts bad_flags = { .flags = 0x100 };
	struct kvp_put_opts bad_rep = { .replicas = KVP_MAX_REPLICAS + 1 };
	CHECK_RC(kvp_put_opts(k, "opt/x", v, 10, &bad_flags), KVP_EINVAL);
	CHECK_RC(kvp_put_opts(k, "opt/x", v, 10, &bad_rep), KVP_EINVAL);

	/* soft pin */
	struct kvp_put_opts pin = { .flags = KVP_PUT_SOFT_PIN, .pin_ttl_ms = 60000 };
	CHECK_RC(kvp_put_opts(k, "opt/pin", v, 10, &pin), 0);
	CHECK_RC(kvp_stat(k, "opt/pin", &st), 0);
	CHECK(st.pin_ms > 58000 && st.pin_ms <= 61000);

	/* preferred segment (node name); an unknown one is only a preference */
	for (int n = 0; n < 2; n++) {
		char node[8], key[32];

		snprintf(node, sizeof(node), "n%d", n);
		for (int i = 0; i < 3; i++) {
			snprintf(key, sizeof(key), "opt/pref-%d-%d", n, i);
			struct kvp_put_opts pref = { .preferred_segment = node };
			CHECK_RC(kvp_put_opts(k, key, v, 100, &pref), 0);
			CHECK_RC(kvp_stat(k, key, &st), 0);
			CHECK(st.nreplicas == 1 && strcmp(st.replicas[0].node, node) == 0);
		}
	}
	struct kvp_put_opts nowhere = { .preferred_segment = "no-such-node" };
	CHECK_RC(kvp_put_opts(k, "opt/nowhere", v, 100, &nowhere), 0);

	/* batch with options: two replicas each, then clear them one by one */
	const char *keys[] = { "opt/b1", "opt/b2" };
	const void *bufs[] = { v, v };
	size_t lens[] = { 100, 200 };
	struct kvp_put_opts two = { .replicas = 2 };
	CHECK_RC(kvp_batch_put_opts(k, 2, keys, bufs, lens, &two, res), 0);
	CHECK_RC(res[0], 0);
	CHECK_RC(res[1], 0);
	CHECK_RC(kvp_stat(k, "opt/b1", &st), 0);
	CHECK(st.nreplicas == 2);
	CHECK_RC(kvp_replica_clear(k, "opt/b1", "n0", 0), 0);
	CHECK_RC(kvp_stat(k, "opt/b1", &st), 0);
	CHECK(st.nreplicas == 1 && strcmp(st.replicas[0].node, "n1") == 0);
	CHECK_RC(kvp_replica_clear(k, "opt/b1", "n0", 0), 0);	/* none there */
	CHECK_RC(kvp_replica_clear(k, "opt/b1", "n1", 0), 0);
	CHECK_RC(kvp_exists(k, "opt/b1"), 0);
	CHECK_RC(kvp_replica_clear(k, "opt/b1", "n1", 0), KVP_ENOTFOUND);
	CHECK_RC(kvp_replica_clear(k, "opt/b2", "no-such-node", 0), KVP_ENOSEG);
	CHECK_RC(kvp_replica_clear(k, "opt/b2", "n0", 7), KVP_EINVAL);
	CHECK_RC(kvp_replica_clear(k, "opt/b2", "n0", KVP_REMOVE_FORCE), 0);
	CHECK_RC(kvp_exists(k, "opt/b2"), 1);	/* leases: t_client_lease */
	kvp_close(k);
}

int main(void)
{
	struct tl_pool *p = tl_pool_start(2, 64, NULL);
	const char *tcp[] = { "client.protocol=tcp", NULL };

	test_options(p);
	race(p, NULL, 1, "local");
	race(p, tcp, 2, "tcp, 2 replicas");
	CHECK(atomic_load(&wrong_bytes) == 0);
	CHECK(atomic_load(&bad) == 0);
	return tl_done();
}

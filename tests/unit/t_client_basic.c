/* t_client_basic: libkvpool against a real master and one node — put/get
 * round trips of 1 B .. 8 MiB on the local (memcpy) path and on the TCP path
 * (client.protocol=tcp, and a client whose host_id differs), get_into with a
 * too-small buffer, exists/size/remove/stat/list/info/pin, duplicate put,
 * missing key, invalid keys and arguments, and the transfer counters that
 * prove which path moved the bytes, and that attaching a segment fills
 * page tables only where the handle moves extents. Exit 0/1/77.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

static const size_t sizes[] = {
	1, 2, 63, 64, 100, 4095, 4096, 4097, 65536, 65537, 1 << 20, (1 << 20) + 3, 8 << 20,
};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Round trips of every size under prefix; returns value bytes moved. */
static uint64_t round_trips(struct kvp *k, const char *prefix)
{
	uint64_t bytes = 0;

	for (size_t i = 0; i < NSIZES; i++) {
		size_t len = sizes[i];
		char key[128];
		uint8_t *v = malloc(len), *back = malloc(len + 16);
		void *got = NULL;
		size_t glen = 0;

		REQUIRE(v && back);
		snprintf(key, sizeof(key), "%s/size-%zu", prefix, len);
		tl_fill(v, len, key);
		CHECK_RC(kvp_put(k, key, v, len), 0);
		/* get_into: exact and larger buffers */
		memset(back, 0xee, len + 16);
		CHECK_RC(kvp_get_into(k, key, back, len), (long long)len);
		CHECK(memcmp(back, v, len) == 0);
		CHECK_RC(kvp_get_into(k, key, back, len + 16), (long long)len);
		CHECK(back[len] == 0xee);	/* nothing written past the value */
		/* allocating get */
		CHECK_RC(kvp_get(k, key, &got, &glen), 0);
		CHECK(got && glen == len && memcmp(got, v, len) == 0);
		kvp_free(got);
		/* too small by one byte */
		if (len > 1)
			CHECK_RC(kvp_get_into(k, key, back, len - 1), KVP_ETOOBIG);
		bytes += 4 * len;
		free(v);
		free(back);
	}
	return bytes;
}

static void metadata_calls(struct kvp *k)
{
	const char *key = "meta/a";
	char buf[100];
	uint64_t sz = 0;
	struct kvp_stat st;
	struct kvp_list l;
	struct kvp_info info;
	uint64_t count = 0;

	tl_fill(buf, sizeof(buf), key);
	CHECK_RC(kvp_exists(k, key), 0);
	CHECK_RC(kvp_size(k, key, &sz), KVP_ENOTFOUND);
	CHECK_RC(kvp_get_into(k, key, buf, sizeof(buf)), KVP_ENOTFOUND);
	CHECK_RC(kvp_remove(k, key, 0), KVP_ENOTFOUND);
	CHECK_RC(kvp_put(k, key, buf, sizeof(buf)), 0);
	CHECK_RC(kvp_put(k, key, buf, sizeof(buf)), KVP_EEXIST);
	CHECK_RC(kvp_exists(k, key), 1);
	CHECK_RC(kvp_size(k, key, &sz), 0);
	CHECK(sz == sizeof(buf));
	CHECK_RC(kvp_stat(k, key, &st), 0);
	CHECK(st.size == sizeof(buf) && st.nreplicas == 1 && st.generation > 0);
	CHECK(st.put_time_ns > 0 && st.checksum != 0);
	CHECK(!strcmp(st.replicas[0].node, "n0"));
	CHECK(st.replicas[0].tier == KVP_TIER_MEM && st.replicas[0].alloc_len >= sizeof(buf));
	CHECK_RC(kvp_stat(k, "meta/none", &st), KVP_ENOTFOUND);
	CHECK_RC(kvp_pin(k, key, 60000), 0);
	CHECK_RC(kvp_stat(k, key, &st), 0);
	CHECK(st.pin_ms > 0);
	CHECK_RC(kvp_pin(k, key, 0), 0);
	CHECK_RC(kvp_pin(k, "meta/none", 1000), KVP_ENOTFOUND);

	/* listing: meta/a, meta/b, meta/d/x, meta/d/y under "meta/" */
	CHECK_RC(kvp_put(k, "meta/b", buf, 10), 0);
	CHECK_RC(kvp_put(k, "meta/d/x", buf, 11), 0);
	CHECK_RC(kvp_put(k, "meta/d/y", buf, 12), 0);
	CHECK_RC(kvp_list(k, "meta/", '/', NULL, 100, &l), 0);
	CHECK(l.n == 3);
	if (l.n == 3) {
		CHECK(!strcmp(l.entries[0].name, "meta/a") && !l.entries[0].is_prefix &&
		      l.entries[0].size == sizeof(buf));
		CHECK(!strcmp(l.entries[1].name, "meta/b") && l.entries[1].size == 10);
		CHECK(!strcmp(l.entries[2].name, "meta/d/") && l.entries[2].is_prefix);
	}
	CHECK(l.next && !strcmp(l.next, ""));
	kvp_list_free(&l);
	/* paging without a delimiter */
	CHECK_RC(kvp_list(k, "meta/", 0, NULL, 2, &l), 0);
	CHECK(l.n == 2 && l.next && l.next[0]);
	if (l.n == 2 && l.next) {
		char *cur = strdup(l.next);

		kvp_list_free(&l);
		CHECK_RC(kvp_list(k, "meta/", 0, cur, 10, &l), 0);
		CHECK(l.n == 2);
		if (l.n == 2)
			CHECK(!strcmp(l.entries[0].name, "meta/d/x") &&
			      !strcmp(l.entries[1].name, "meta/d/y"));
		free(cur);
	}
	kvp_list_free(&l);

	CHECK_RC(kvp_info(k, &info), 0);
	CHECK(info.nnodes == 1 && info.keys >= 4 && info.capacity > 0);
	if (info.nnodes == 1) {
		CHECK(!strcmp(info.nodes[0].name, "n0"));
		CHECK(strstr(info.nodes[0].shm_path, "/dev/shm/") != NULL);
		CHECK(info.nodes[0].endpoint[0] != 0);
	}
	kvp_info_free(&info);

	CHECK_RC(kvp_remove(k, key, 0), 0);
	CHECK_RC(kvp_exists(k, key), 0);
	CHECK_RC(kvp_remove_prefix(k, "meta/d/", 0, &count), 0);
	CHECK(count == 2);
	CHECK_RC(kvp_exists(k, "meta/d/x"), 0);
	CHECK_RC(kvp_exists(k, "meta/b"), 1);
}

/* kplain: a handle of the same pool without optimistic reads, whose gets
 * always ask the master (and take a lease). */
static void bad_input(struct kvp *k, struct kvp *kplain)
{
	char big[KVP_MAX_KEY + 2], ok[KVP_MAX_KEY + 1], buf[8] = "x";
	void *p = NULL;
	size_t n = 0;
	uint64_t sz;
	int res[2];
	const char *keys[2];

	memset(big, 'k', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	memset(ok, 'k', sizeof(ok) - 1);
	ok[sizeof(ok) - 1] = 0;
	CHECK_RC(kvp_put(k, "", buf, 1), KVP_EKEY);
	CHECK_RC(kvp_put(k, NULL, buf, 1), KVP_EKEY);
	CHECK_RC(kvp_put(k, big, buf, 1), KVP_EKEY);
	CHECK_RC(kvp_get(k, big, &p, &n), KVP_EKEY);
	CHECK_RC(kvp_get_into(k, "", buf, 1), KVP_EKEY);
	CHECK_RC(kvp_exists(k, big), KVP_EKEY);
	CHECK_RC(kvp_size(k, NULL, &sz), KVP_EKEY);
	CHECK_RC(kvp_remove(k, "", 0), KVP_EKEY);
	CHECK_RC(kvp_put(k, "bad/zero", buf, 0), KVP_EINVAL);
	CHECK_RC(kvp_put(k, "bad/null", NULL, 1), KVP_EINVAL);
	CHECK_RC(kvp_remove(k, "bad/x", 0x100), KVP_EINVAL);
	CHECK_RC(kvp_get(k, "bad/x", NULL, &n), KVP_EINVAL);
	CHECK_RC(kvp_put(NULL, "bad/x", buf, 1), KVP_EINVAL);
	CHECK_RC(kvp_register_buffer(k, NULL, 10), KVP_EINVAL);
	CHECK_RC(kvp_unregister_buffer(k, buf), KVP_EINVAL);
	CHECK_RC(kvp_register_buffer(k, buf, sizeof(buf)), 0);
	CHECK_RC(kvp_register_buffer(k, buf, sizeof(buf)), KVP_EEXIST);
	CHECK_RC(kvp_unregister_buffer(k, buf), 0);
	/* the longest key works */
	CHECK_RC(kvp_put(k, ok, buf, 1), 0);
	CHECK_RC(kvp_get_into(k, ok, buf, sizeof(buf)), 1);
	/* the read released its lease (a read through the master) or took
	 * none (an optimistic one): a plain remove works at once */
	CHECK_RC(kvp_get_into(kplain, ok, buf, sizeof(buf)), 1);
	CHECK_RC(kvp_remove(k, ok, 0), 0);
	/* ... and this handle's next read of it does not find the old extent */
	CHECK_RC(kvp_get_into(k, ok, buf, sizeof(buf)), KVP_ENOTFOUND);
	/* a batch mixes valid and invalid keys: per-item results */
	keys[0] = "";
	keys[1] = "bad/missing";
	CHECK_RC(kvp_batch_exists(k, 2, keys, res), 0);
	CHECK_RC(res[0], KVP_EKEY);
	CHECK_RC(res[1], 0);
}

/* kB of this process's page tables that map path (Rss of its mappings in
 * /proc/self/smaps): what attaching a segment and reading from it filled. */
static long mapped_kb(const char *path)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	bool in = false;
	long kb = 0, v;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		size_t h = strspn(line, "0123456789abcdef");

		if (h > 0 && line[h] == '-') {	/* a mapping's first line */
			size_t n = strlen(line);

			if (n && line[n - 1] == '\n')
				line[--n] = 0;
			in = n >= strlen(path) && !strcmp(line + n - strlen(path), path);
		} else if (in && sscanf(line, "Rss: %ld kB", &v) == 1) {
			kb += v;
		}
	}
	fclose(f);
	return kb;
}

/* A handle that attaches a segment fills the page tables only of the
 * extents it moves (64 KiB chunks), not of every page the file holds: a
 * one-shot CLI call must not pay for the whole segment. */
static void attach_is_lazy(const struct tl_pool *p)
{
	char path[128], key[32];
	size_t len = 1 << 20;
	char *v = malloc(len);
	int err = 0;
	struct kvp *k = tl_pool_open(p, NULL, &err);

	REQUIRE(v && k);
	for (int i = 0; i < 16; i++) {
		snprintf(key, sizeof(key), "lazy/%d", i);
		tl_fill(v, len, key);
		CHECK_RC(kvp_put(k, key, v, len), 0);
	}
	kvp_close(k);
	snprintf(path, sizeof(path), "/dev/shm/%.63s-n0", p->tag);
	CHECK(mapped_kb(path) == 0);	/* closed: unmapped */
	k = tl_pool_open(p, NULL, &err);
	REQUIRE(k);
	CHECK_RC(kvp_get_into(k, "lazy/3", v, len), (long long)len);
	CHECK(tl_check_fill(v, len, "lazy/3"));
	long kb = mapped_kb(path);
	/* the value and its header: 1 MiB in whole chunks, plus the header page */
	if (!(kb >= 1024 && kb <= 1024 + 2 * 64 + 64)) {
		fprintf(stderr, "a get of 1 MiB mapped %ld kB of a segment holding 16 MiB\n", kb);
		tl_failures++;
	}
	kvp_close(k);
	free(v);
}

int main(void)
{
	struct tl_pool *p;
	struct kvp_stats s0, s1;
	struct kvp *k;
	int err = 0;
	uint64_t moved;

	/* a long lease: the "remove refused while leased" check must not race it */
	p = tl_pool_start(1, 128, "[master]\nlease_ttl = 1h\n");

	attach_is_lazy(p);

	/* local path: same host id as the node (the boot id) */
	k = tl_pool_open(p, NULL, &err);
	REQUIRE(k);
	kvp_stats(k, &s0);
	moved = round_trips(k, "local");
	kvp_stats(k, &s1);
	CHECK(s1.local_bytes - s0.local_bytes == moved);
	CHECK(s1.tcp_bytes == s0.tcp_bytes);
	CHECK(s1.puts - s0.puts == NSIZES);
	CHECK(s1.gets - s0.gets == 3 * NSIZES);
	CHECK(s1.checksum_mismatches == 0);
	metadata_calls(k);
	{
		const char *plain[] = { "client.optimistic_reads=false", NULL };
		struct kvp *kp = tl_pool_open(p, plain, &err);

		REQUIRE(kp);
		bad_input(k, kp);
		kvp_close(kp);
	}
	kvp_close(k);

	/* TCP forced */
	const char *tcp[] = { "client.protocol=tcp", NULL };

	k = tl_pool_open(p, tcp, &err);
	REQUIRE(k);
	kvp_stats(k, &s0);
	moved = round_trips(k, "tcp");
	kvp_stats(k, &s1);
	CHECK(s1.tcp_bytes - s0.tcp_bytes == moved);
	CHECK(s1.local_bytes == s0.local_bytes);
	CHECK(s1.node_connects >= 1);
	kvp_close(k);

	/* another "host": TCP chosen by auto; objects of the local run read back */
	const char *remote[] = { "client.host_id=some-other-host", "client.connections_per_node=2",
				 NULL };

	k = tl_pool_open(p, remote, &err);
	REQUIRE(k);
	{
		size_t len = 1 << 20;
		char *v = malloc(len);

		REQUIRE(v);
		CHECK_RC(kvp_get_into(k, "local/size-1048576", v, len), (long long)len);
		CHECK(tl_check_fill(v, len, "local/size-1048576"));
		free(v);
	}
	kvp_stats(k, &s1);
	CHECK(s1.tcp_bytes == 1 << 20 && s1.local_bytes == 0);
	kvp_close(k);

	/* local only: works here (the node is on this host) */
	const char *local[] = { "client.protocol=local", NULL };

	k = tl_pool_open(p, local, &err);
	REQUIRE(k);
	{
		char v[4096];

		CHECK_RC(kvp_get_into(k, "tcp/size-4096", v, sizeof(v)), 4096);
		CHECK(tl_check_fill(v, sizeof(v), "tcp/size-4096"));
	}
	kvp_close(k);

	/* bad configuration and unreachable master */
	const char *bad[] = { "client.protocol=carrier-pigeon", NULL };

	CHECK(tl_pool_open(p, bad, &err) == NULL);
	CHECK(err < 0);
	{
		struct kvp_open_opts o = { .config_file = p->conf, .master = "127.0.0.1:1" };

		CHECK(kvp_open(&o, &err) == NULL);
		CHECK_RC(err, KVP_ECONN);
	}
	return tl_done();
}

/* t_client_corrupt: a reader never returns wrong bytes. Two nodes; a byte of
 * a value (or of an extent header) is flipped inside the node's /dev/shm
 * segment file behind everyone's back. With replicas=2 a get returns the
 * other replica's (correct) bytes; with replicas=1 it fails with
 * KVP_ECHECKSUM. Both on the local path and over TCP, and the mismatch
 * counter of kvp_stats counts each bad replica read. Exit 0/1/77.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "extent.h"
#include "testlib.h"

#define LEN 100000

/* Flips one byte at (replica r of key) + delta inside its segment file. */
static void flip(struct kvp *k, const char *key, unsigned r, uint64_t delta)
{
	struct kvp_stat st;
	struct kvp_info info;
	char path[256] = "";
	uint8_t b;
	int fd;

	REQUIRE(kvp_stat(k, key, &st) == 0 && st.nreplicas > r);
	REQUIRE(kvp_info(k, &info) == 0);
	for (size_t i = 0; i < info.nnodes; i++)
		if (info.nodes[i].segment_id == st.replicas[r].segment_id)
			snprintf(path, sizeof(path), "%s", info.nodes[i].shm_path);
	kvp_info_free(&info);
	REQUIRE(path[0]);
	fd = open(path, O_RDWR);
	REQUIRE(fd >= 0);
	REQUIRE(pread(fd, &b, 1, (off_t)(st.replicas[r].offset + delta)) == 1);
	b ^= 0x5a;
	REQUIRE(pwrite(fd, &b, 1, (off_t)(st.replicas[r].offset + delta)) == 1);
	close(fd);
}

static uint64_t mismatches(struct kvp *k)
{
	struct kvp_stats s;

	kvp_stats(k, &s);
	return s.checksum_mismatches;
}

static void put_one(struct kvp *k, const char *key)
{
	char *v = malloc(LEN);

	REQUIRE(v);
	tl_fill(v, LEN, key);
	CHECK_RC(kvp_put(k, key, v, LEN), 0);
	free(v);
}

/* get_into must give the right bytes (want_ok) or KVP_ECHECKSUM. */
static void expect_get(struct kvp *k, const char *key, int want_ok)
{
	char *v = malloc(LEN);
	void *g = NULL;
	size_t gl = 0;
	int64_t rc;

	REQUIRE(v);
	rc = kvp_get_into(k, key, v, LEN);
	if (want_ok) {
		CHECK_RC(rc, LEN);
		CHECK(tl_check_fill(v, LEN, key));
		CHECK_RC(kvp_get(k, key, &g, &gl), 0);
		CHECK(g && gl == LEN && tl_check_fill(g, LEN, key));
		kvp_free(g);
	} else {
		CHECK_RC(rc, KVP_ECHECKSUM);
		CHECK_RC(kvp_get(k, key, &g, &gl), KVP_ECHECKSUM);
		CHECK(g == NULL && gl == 0);
	}
	free(v);
}

static void scenario(struct tl_pool *p, const char *proto, const char *pre)
{
	char po[64], key[5][64];
	/* Every get asks the master: the counts below are of its replica
	 * order (optimistic() covers reads from a remembered location). */
	const char *r2[] = { "client.replicas=2", po, "client.optimistic_reads=false", NULL };
	const char *r1[] = { "client.replicas=1", po, "client.optimistic_reads=false", NULL };
	struct kvp *k2, *k1;
	uint64_t m;
	int err;

	snprintf(po, sizeof(po), "client.protocol=%s", proto);
	k2 = tl_pool_open(p, r2, &err);
	k1 = tl_pool_open(p, r1, &err);
	REQUIRE(k2 && k1);
	for (int i = 0; i < 5; i++)
		snprintf(key[i], sizeof(key[i]), "%s/%d", pre, i);
	put_one(k2, key[0]);	/* 2 replicas, value byte flipped in the first */
	put_one(k2, key[1]);	/* 2 replicas, header byte flipped in the first */
	put_one(k1, key[2]);	/* 1 replica, value byte flipped */
	put_one(k1, key[3]);	/* 1 replica, key byte in the header flipped */
	put_one(k2, key[4]);	/* 2 replicas, both flipped */

	flip(k2, key[0], 0, EXT_HDR_SIZE + strlen(key[0]) + 12345);
	flip(k2, key[1], 0, 40);	/* seg_uuid field */
	flip(k1, key[2], 0, EXT_HDR_SIZE + strlen(key[2]) + LEN - 1);
	flip(k1, key[3], 0, EXT_HDR_SIZE + 1);
	flip(k2, key[4], 0, EXT_HDR_SIZE + strlen(key[4]));
	flip(k2, key[4], 1, EXT_HDR_SIZE + strlen(key[4]) + 99);

	m = mismatches(k2);
	expect_get(k2, key[0], 1);
	CHECK(mismatches(k2) - m == 2);		/* get_into and get each met the bad one */
	m = mismatches(k2);
	expect_get(k2, key[1], 1);
	CHECK(mismatches(k2) - m == 2);
	m = mismatches(k1);
	expect_get(k1, key[2], 0);
	CHECK(mismatches(k1) - m == 2);
	m = mismatches(k1);
	expect_get(k1, key[3], 0);
	CHECK(mismatches(k1) - m == 2);
	m = mismatches(k2);
	expect_get(k2, key[4], 0);
	CHECK(mismatches(k2) - m == 4);

	/* batch: the good replica is picked per item */
	{
		const char *keys[3] = { key[0], key[2], key[4] };
		void *bufs[3];
		size_t caps[3] = { LEN, LEN, LEN };
		int64_t res[3];

		for (int i = 0; i < 3; i++)
			REQUIRE((bufs[i] = malloc(LEN)));
		CHECK_RC(kvp_batch_get_into(k2, 3, keys, bufs, caps, res), 0);
		CHECK_RC(res[0], LEN);
		CHECK(tl_check_fill(bufs[0], LEN, keys[0]));
		CHECK_RC(res[1], KVP_ECHECKSUM);
		CHECK_RC(res[2], KVP_ECHECKSUM);
		for (int i = 0; i < 3; i++)
			free(bufs[i]);
	}
	kvp_close(k1);
	kvp_close(k2);
}

/* Optimistic reads (the handle that put a key remembers where): a flipped
 * value byte in the remembered replica is caught by the read from there,
 * counted, and the call goes to the master, which offers the good replica
 * (2 replicas) or none (1). */
static void optimistic(struct tl_pool *p)
{
	const char *r2[] = { "client.replicas=2", NULL };
	const char *r1[] = { "client.replicas=1", NULL };
	struct kvp *k2 = tl_pool_open(p, r2, NULL), *k1 = tl_pool_open(p, r1, NULL);
	struct kvp_stats s0, s1;

	REQUIRE(k2 && k1);
	put_one(k2, "opt/2");
	put_one(k1, "opt/1");
	kvp_stats(k2, &s0);
	expect_get(k2, "opt/2", 1);	/* remembered, valid: no master */
	kvp_stats(k2, &s1);
	CHECK(s1.optimistic_hits - s0.optimistic_hits == 2);
	flip(k2, "opt/2", 0, EXT_HDR_SIZE + strlen("opt/2") + 777);
	flip(k1, "opt/1", 0, EXT_HDR_SIZE + strlen("opt/1") + 777);
	s0 = s1;
	expect_get(k2, "opt/2", 1);
	kvp_stats(k2, &s1);
	CHECK(s1.optimistic_fallbacks - s0.optimistic_fallbacks >= 1);
	CHECK(s1.checksum_mismatches - s0.checksum_mismatches >= 1);
	kvp_stats(k1, &s0);
	expect_get(k1, "opt/1", 0);
	kvp_stats(k1, &s1);
	CHECK(s1.optimistic_fallbacks - s0.optimistic_fallbacks == 1);
	CHECK(s1.checksum_mismatches - s0.checksum_mismatches >= 2);
	kvp_close(k1);
	kvp_close(k2);
}

int main(void)
{
	struct tl_pool *p;

	p = tl_pool_start(2, 64, NULL);
	scenario(p, "auto", "loc");
	scenario(p, "tcp", "tcp");
	optimistic(p);
	return tl_done();
}

/* t_client_cq: the completion queue (kvp_cq_*) against a master and a
 * kvpool-node — four threads submit put batches at once while the main
 * thread polls the eventfd and drains: every tag completes exactly once,
 * the fd is readable only while completions wait; gets into buffers are
 * byte-checked, exists and remove give per-key results (a missing key, a
 * small buffer, an invalid key next to good ones); bad submissions queue
 * nothing; close with batches queued and running returns and leaks nothing
 * (run under make SANITIZE=1). Exit 0/1/77.
 */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

#define SUBMITTERS 4
#define BATCHES 16		/* per submitter */
#define PER 8			/* keys per batch */
#define NKEYS (SUBMITTERS * BATCHES * PER)

static char *keys[NKEYS];
static void *vals[NKEYS];
static size_t lens[NKEYS];

struct submitter {
	pthread_t t;
	struct kvp_cq *cq;
	int first;			/* batch index of its first batch */
	int rc[BATCHES];
};

static size_t size_of(size_t i)
{
	static const size_t s[] = { 1, 4096, 65536, 300000, 100 };

	return s[i % 5] + i;
}

static void *submit_puts(void *arg)
{
	struct submitter *s = arg;

	for (int b = 0; b < BATCHES; b++) {
		size_t at = (size_t)(s->first + b) * PER;

		s->rc[b] = kvp_cq_submit_put(s->cq, PER, (const char *const *)keys + at,
					     (const void *const *)vals + at, lens + at, NULL,
					     1000 + at / PER);
	}
	return NULL;
}

static bool readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* Polls and drains until want completions came (or 30 s): their count.
 * seen[tag - base] counts each tag. */
static size_t collect(struct kvp_cq *cq, size_t want, uint64_t base, int *seen, size_t nseen,
		      struct kvp_cqe *all)
{
	size_t got = 0;
	uint64_t deadline = tl_now_ms() + 30000;

	while (got < want && tl_now_ms() < deadline) {
		struct kvp_cqe e[5];	/* fewer than may wait: drains in parts */
		size_t n;

		if (!readable(kvp_cq_fd(cq), 200))
			continue;
		n = kvp_cq_drain(cq, e, 5);
		CHECK(n > 0, "fd readable, nothing drained");
		for (size_t i = 0; i < n; i++) {
			uint64_t t = e[i].tag - base;

			if (t < nseen)
				seen[t]++;
			else
				CHECK(0, "unknown tag %llu", (unsigned long long)e[i].tag);
			if (all && got < want)
				all[got] = e[i];
			else
				kvp_free(e[i].results);
			got++;
		}
	}
	return got;
}

static void test_concurrent_puts(struct kvp *k, struct kvp_cq *cq)
{
	struct submitter s[SUBMITTERS];
	int seen[SUBMITTERS * BATCHES] = { 0 };
	struct kvp_cqe all[SUBMITTERS * BATCHES];
	size_t got;

	CHECK(!readable(kvp_cq_fd(cq), 0), "fd readable before any submission");
	for (int i = 0; i < SUBMITTERS; i++) {
		s[i].cq = cq;
		s[i].first = i * BATCHES;
		REQUIRE(pthread_create(&s[i].t, NULL, submit_puts, &s[i]) == 0);
	}
	for (int i = 0; i < SUBMITTERS; i++) {
		pthread_join(s[i].t, NULL);
		for (int b = 0; b < BATCHES; b++)
			CHECK_RC(s[i].rc[b], 0);
	}
	got = collect(cq, SUBMITTERS * BATCHES, 1000, seen, SUBMITTERS * BATCHES, all);
	CHECK_EQ(got, SUBMITTERS * BATCHES);
	for (int i = 0; i < SUBMITTERS * BATCHES; i++)
		CHECK_EQ(seen[i], 1);
	for (size_t i = 0; i < got; i++) {
		CHECK_EQ(all[i].op, KVP_CQ_PUT);
		CHECK_RC(all[i].status, 0);
		CHECK_EQ(all[i].n, PER);
		for (size_t j = 0; j < all[i].n; j++)
			CHECK_RC(all[i].results[j], 0);
		kvp_free(all[i].results);
	}
	CHECK_EQ(kvp_cq_pending(cq), 0);
	/* all drained: not readable any more, even after a while */
	CHECK(!readable(kvp_cq_fd(cq), 50), "fd readable with nothing to drain");
	/* the values are there for a plain reader */
	for (size_t i = 0; i < NKEYS; i += 37) {
		void *v;
		size_t l;

		CHECK_RC(kvp_get(k, keys[i], &v, &l), 0);
		CHECK(l == lens[i] && tl_check_fill(v, l, keys[i]));
		kvp_free(v);
	}
}

static void test_get_exists_remove(struct kvp_cq *cq)
{
	enum { G = 64 };
	const char *gk[G + 3];
	void *gb[G + 3];
	size_t gc[G + 3];
	int seen[4] = { 0 };
	struct kvp_cqe e[4];
	size_t got;

	for (size_t i = 0; i < G; i++) {
		size_t at = i * 5;

		gk[i] = keys[at];
		gc[i] = lens[at];
		gb[i] = malloc(gc[i]);
		REQUIRE(gb[i]);
		memset(gb[i], 0xee, gc[i]);
	}
	gk[G] = "cq/missing";
	gc[G] = 16;
	gk[G + 1] = keys[3];			/* 300003 bytes into 10 */
	gc[G + 1] = 10;
	gk[G + 2] = "";				/* invalid */
	gc[G + 2] = 16;
	for (size_t i = G; i < G + 3; i++)
		REQUIRE((gb[i] = calloc(1, gc[i])));
	CHECK_RC(kvp_cq_submit_get(cq, G + 3, gk, gb, gc, 7), 0);
	CHECK_RC(kvp_cq_submit_exists(cq, G + 3, gk, 8), 0);
	got = collect(cq, 2, 7, seen, 4, e);
	CHECK_EQ(got, 2);
	CHECK_EQ(seen[0], 1);
	CHECK_EQ(seen[1], 1);
	for (size_t c = 0; c < got; c++) {
		struct kvp_cqe *x = &e[c];

		CHECK_RC(x->status, 0);
		CHECK_EQ(x->n, G + 3);
		if (x->tag == 7) {
			CHECK_EQ(x->op, KVP_CQ_GET);
			for (size_t i = 0; i < G; i++) {
				CHECK_EQ(x->results[i], gc[i]);
				CHECK(tl_check_fill(gb[i], gc[i], gk[i]), "bytes of %s", gk[i]);
			}
			CHECK_RC(x->results[G], KVP_ENOTFOUND);
			CHECK_RC(x->results[G + 1], KVP_ETOOBIG);
			CHECK_RC(x->results[G + 2], KVP_EKEY);
		} else {
			CHECK_EQ(x->op, KVP_CQ_EXISTS);
			for (size_t i = 0; i < G; i++)
				CHECK_EQ(x->results[i], 1);
			CHECK_EQ(x->results[G], 0);
			CHECK_EQ(x->results[G + 1], 1);
			CHECK(x->results[G + 2] < 0);
		}
		kvp_free(x->results);
	}

	/* remove two and a missing one, then exists again */
	const char *rk[3] = { keys[0], keys[5], "cq/missing" };

	CHECK_RC(kvp_cq_submit_remove(cq, 3, rk, KVP_REMOVE_FORCE, 9), 0);
	memset(seen, 0, sizeof(seen));
	got = collect(cq, 1, 9, seen, 1, e);
	CHECK_EQ(got, 1);
	if (got == 1) {
		CHECK_EQ(e[0].op, KVP_CQ_REMOVE);
		CHECK_RC(e[0].results[0], 0);
		CHECK_RC(e[0].results[1], 0);
		CHECK_RC(e[0].results[2], KVP_ENOTFOUND);
		kvp_free(e[0].results);
	}
	CHECK_RC(kvp_cq_submit_exists(cq, 3, rk, 10), 0);
	memset(seen, 0, sizeof(seen));
	got = collect(cq, 1, 10, seen, 1, e);
	CHECK_EQ(got, 1);
	if (got == 1) {
		for (size_t i = 0; i < 3; i++)
			CHECK_EQ(e[0].results[i], 0);
		kvp_free(e[0].results);
	}
	for (size_t i = 0; i < G + 3; i++)
		free(gb[i]);
}

static void test_bad_submissions(struct kvp_cq *cq)
{
	const char *k1[2] = { "cq/x", NULL };
	void *b1[1] = { NULL };
	size_t c1[1] = { 1 };

	CHECK_RC(kvp_cq_submit_exists(cq, 0, k1, 1), KVP_EINVAL);
	CHECK_RC(kvp_cq_submit_exists(cq, 2, k1, 1), KVP_EINVAL);	/* a NULL key */
	CHECK_RC(kvp_cq_submit_get(cq, 1, k1, NULL, c1, 1), KVP_EINVAL);
	CHECK_RC(kvp_cq_submit_put(cq, 1, k1, (const void *const *)b1, NULL, NULL, 1),
		 KVP_EINVAL);
	CHECK_EQ(kvp_cq_pending(cq), 0);
	CHECK(!readable(kvp_cq_fd(cq), 20));
}

/* Close while batches of 1 MiB puts are queued and running. */
static void test_close_outstanding(struct kvp *k)
{
	enum { B = 40, M = 4 };
	static char *ck[B * M];
	static void *cb[B * M];
	static size_t cl[B * M];
	int err;
	struct kvp_cq *cq = kvp_cq_open(k, 2, &err);

	REQUIRE(cq, "kvp_cq_open: %s", kvp_strerror(err));
	for (size_t i = 0; i < B * M; i++) {
		REQUIRE(asprintf(&ck[i], "cq/close-%03zu", i) > 0);
		cl[i] = 1 << 20;
		REQUIRE((cb[i] = malloc(cl[i])));
		tl_fill(cb[i], cl[i], ck[i]);
	}
	for (size_t b = 0; b < B; b++)
		CHECK_RC(kvp_cq_submit_put(cq, M, (const char *const *)ck + b * M,
					   (const void *const *)cb + b * M, cl + b * M, NULL, b), 0);
	CHECK(kvp_cq_pending(cq) > 0);
	kvp_cq_close(cq);
	/* whatever was stored is whole */
	for (size_t i = 0; i < B * M; i++) {
		void *v;
		size_t l;
		int rc = kvp_get(k, ck[i], &v, &l);

		if (rc == 0) {
			CHECK(l == cl[i] && tl_check_fill(v, l, ck[i]));
			kvp_free(v);
		} else {
			CHECK_RC(rc, KVP_ENOTFOUND);
		}
		free(ck[i]);
		free(cb[i]);
	}
	/* an idle queue closes at once, too */
	cq = kvp_cq_open(k, 0, &err);
	REQUIRE(cq);
	kvp_cq_close(cq);
	CHECK(kvp_cq_open(k, 1000, &err) == NULL);
	CHECK_RC(err, KVP_EINVAL);
}

int main(void)
{
	struct tl_pool *p = tl_pool_start(1, 512, NULL);
	int err;
	struct kvp *k = tl_pool_open(p, NULL, &err);
	struct kvp_cq *cq;

	REQUIRE(k, "kvp_open: %s", kvp_strerror(err));
	for (size_t i = 0; i < NKEYS; i++) {
		REQUIRE(asprintf(&keys[i], "cq/obj-%04zu", i) > 0);
		lens[i] = size_of(i);
		REQUIRE((vals[i] = malloc(lens[i])));
		tl_fill(vals[i], lens[i], keys[i]);
	}
	cq = kvp_cq_open(k, 3, &err);
	REQUIRE(cq, "kvp_cq_open: %s", kvp_strerror(err));
	test_concurrent_puts(k, cq);
	test_get_exists_remove(cq);
	test_bad_submissions(cq);
	kvp_cq_close(cq);
	test_close_outstanding(k);
	for (size_t i = 0; i < NKEYS; i++) {
		free(keys[i]);
		free(vals[i]);
	}
	kvp_close(k);
	return tl_done();
}

/* t_ha: the election (master/ha.c) against a real etcd, three candidates
 * in one process: exactly one leads and publishes its record under the
 * epoch etcd gave it; a resigning or stopping leader is replaced at once
 * with a higher epoch; a leader whose fence lapses steps down and never
 * extends it; with etcd stopped the leader stops serving before its lease
 * could lapse and someone else could win; on a three-member etcd the
 * leader survives losing one member and steps down when the majority is
 * gone, and a leader comes back with the majority. Throughout, a sampler
 * thread checks that no two candidates ever serve at the same moment.
 * Skips without etcd. */
#include "testlib.h"
#include "etcd_fx.h"

#include <pthread.h>
#include <stdatomic.h>

#include "ha.h"
#include "leader.h"

#define NC 3

static struct etcd_fx fx;
static struct ha *cand[NC];	/* set under cand_lock (the sampler reads them) */
static pthread_mutex_t cand_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool sampling;
static atomic_int overlaps;

/* Every ms: how many serve now; remembers when each started and stopped. */
static _Atomic uint64_t on_since[NC], off_at[NC];

static void *sampler(void *arg)
{
	bool was[NC] = { false };

	(void)arg;
	while (atomic_load(&sampling)) {
		int n = 0;
		pthread_mutex_lock(&cand_lock);
		for (int i = 0; i < NC; i++) {
			bool s = cand[i] && ha_serving(cand[i]);
			if (s && !was[i])
				atomic_store(&on_since[i], tl_now_ms());
			if (!s && was[i])
				atomic_store(&off_at[i], tl_now_ms());
			was[i] = s;
			n += s;
		}
		pthread_mutex_unlock(&cand_lock);
		if (n > 1)
			atomic_fetch_add(&overlaps, 1);
		tl_sleep_ms(1);
	}
	return NULL;
}

static void set_cand(int i, struct ha *h)
{
	pthread_mutex_lock(&cand_lock);
	cand[i] = h;
	pthread_mutex_unlock(&cand_lock);
}

static void stop_cand(int i)
{
	struct ha *h = cand[i];

	set_cand(i, NULL);
	ha_stop(h);
}

static struct ha *start(int i, const char *eps)
{
	struct ha_conf c;
	char err[256];

	memset(&c, 0, sizeof(c));
	tl_fmt(c.endpoints, sizeof(c.endpoints), "%s", eps);
	tl_fmt(c.cluster_id, sizeof(c.cluster_id), "t-ha-%d", (int)getpid());
	c.ttl_ms = 2000;
	tl_fmt(c.rec.rpc, sizeof(c.rec.rpc), "127.0.0.1:%d", 20000 + i);
	tl_fmt(c.rec.http, sizeof(c.rec.http), "0.0.0.0:%d", 21000 + i);
	tl_fmt(c.rec.name, sizeof(c.rec.name), "cand%d", i);
	struct ha *h = ha_start(&c, err, sizeof(err));
	REQUIRE(h, "ha_start: %s", err);
	return h;
}

/* The one serving candidate within ms, or -1. */
static int wait_leader(unsigned ms, int not)
{
	uint64_t end = tl_now_ms() + ms;

	do {
		for (int i = 0; i < NC; i++)
			if (i != not && cand[i] && ha_serving(cand[i]))
				return i;
		tl_sleep_ms(5);
	} while (tl_now_ms() < end);
	return -1;
}

static bool none_serving(void)
{
	for (int i = 0; i < NC; i++)
		if (cand[i] && ha_serving(cand[i]))
			return false;
	return true;
}

static void check_published(int l)
{
	char err[128], cid[64];
	struct leader_rec r;
	uint64_t epoch = 0;
	struct etcd *e = etcd_create(fx.endpoints, 1000, NULL, err, sizeof(err));

	REQUIRE(e);
	tl_fmt(cid, sizeof(cid), "t-ha-%d", (int)getpid());
	CHECK_EQ(leader_lookup(e, cid, &r, &epoch), 0);
	CHECK_EQ(epoch, ha_epoch(cand[l]));
	char want[64];
	tl_fmt(want, sizeof(want), "127.0.0.1:%d", 20000 + l);
	CHECK(!strcmp(r.rpc, want), "published rpc %s, want %s", r.rpc, want);
	/* a wildcard host is replaced by the address towards etcd */
	tl_fmt(want, sizeof(want), "127.0.0.1:%d", 21000 + l);
	CHECK(!strcmp(r.http, want), "published http %s, want %s", r.http, want);
	etcd_destroy(e);

	/* the standbys know who leads */
	for (int i = 0; i < NC; i++) {
		struct ha_status st;
		if (!cand[i] || i == l)
			continue;
		uint64_t end = tl_now_ms() + 3000;
		do {
			ha_get_status(cand[i], &st);
			if (st.leader_known && st.epoch == epoch)
				break;
			tl_sleep_ms(10);
		} while (tl_now_ms() < end);
		CHECK(!st.leader && st.leader_known && st.epoch == epoch && !strcmp(st.rec.rpc, r.rpc),
		      "standby %d sees leader %s epoch %llu", i, st.rec.rpc, (unsigned long long)st.epoch);
	}
}

static void test_single_etcd(void)
{
	for (int i = 0; i < NC; i++)
		set_cand(i, start(i, fx.endpoints));
	int l = wait_leader(10000, -1);
	REQUIRE(l >= 0, "no leader elected");
	tl_sleep_ms(300);
	CHECK(wait_leader(0, l) == -1, "two leaders");
	struct ha_status st;
	ha_get_status(cand[l], &st);
	CHECK(st.leader && st.elections == 1 && st.lease_ttl_ms >= 2000 && st.epoch == ha_epoch(cand[l]));
	check_published(l);

	/* resign: a standby wins at once (the key is revoked, not left to lapse) */
	uint64_t e0 = ha_epoch(cand[l]);
	uint64_t t0 = tl_now_ms();
	ha_resign(cand[l]);
	int n = wait_leader(5000, l);
	REQUIRE(n >= 0, "nobody took over after a resign");
	CHECK(tl_now_ms() - t0 < 1500, "takeover after resign took %llu ms",
	      (unsigned long long)(tl_now_ms() - t0));
	CHECK(ha_epoch(cand[n]) > e0, "epoch %llu after %llu", (unsigned long long)ha_epoch(cand[n]),
	      (unsigned long long)e0);
	check_published(n);

	/* a lapsed fence: the thread steps down, a new epoch follows */
	e0 = ha_epoch(cand[n]);
	ha_lapsed(cand[n]);
	CHECK(!ha_serving(cand[n]));
	int m = wait_leader(5000, n);
	REQUIRE(m >= 0, "nobody took over after a lapse");
	CHECK(ha_epoch(cand[m]) > e0);
	ha_get_status(cand[n], &st);
	CHECK(st.stepdowns >= 1);

	/* stop: the key goes with it */
	e0 = ha_epoch(cand[m]);
	t0 = tl_now_ms();
	stop_cand(m);
	int k = wait_leader(5000, -1);
	REQUIRE(k >= 0, "nobody took over after a stop");
	CHECK(tl_now_ms() - t0 < 1500);
	CHECK(ha_epoch(cand[k]) > e0);
	set_cand(m, start(m, fx.endpoints));

	/* etcd stopped: the leader stops serving before its lease could lapse */
	l = wait_leader(5000, -1);
	REQUIRE(l >= 0);
	tl_sleep_ms(600);	/* a renewal or two */
	e0 = ha_epoch(cand[l]);
	etcdfx_signal(&fx, 0, SIGSTOP);
	t0 = tl_now_ms();
	uint64_t end = t0 + 4000;
	while (ha_serving(cand[l]) && tl_now_ms() < end)
		tl_sleep_ms(2);
	uint64_t off = tl_now_ms();
	CHECK(!ha_serving(cand[l]), "still serving %llu ms after etcd stopped",
	      (unsigned long long)(off - t0));
	/* it renewed at most T/4 before the stop, so it must be off before
	 * T - margin after the stop, and well before T */
	CHECK(off - t0 < 2000, "stopped serving %llu ms after etcd stopped",
	      (unsigned long long)(off - t0));
	CHECK(none_serving());
	tl_sleep_ms(1500);	/* past the lease: etcd will expire it when it runs */
	etcdfx_signal(&fx, 0, SIGCONT);
	n = wait_leader(10000, -1);
	REQUIRE(n >= 0, "no leader after etcd came back");
	CHECK(ha_epoch(cand[n]) > e0);
	tl_sleep_ms(100);	/* the sampler catches up */
	CHECK(atomic_load(&on_since[n]) > atomic_load(&off_at[l]) || n == l);

	for (int i = 0; i < NC; i++)
		stop_cand(i);
}

static void test_three_members(void)
{
	struct etcd_fx fx3;

	etcdfx_start(&fx3, 3);
	for (int i = 0; i < NC; i++)
		set_cand(i, start(i, fx3.endpoints));
	int l = wait_leader(10000, -1);
	REQUIRE(l >= 0, "no leader on three members");
	uint64_t e0 = ha_epoch(cand[l]);

	/* one member gone: renewals go to the others */
	etcdfx_signal(&fx3, 0, SIGKILL);
	tl_sleep_ms(3000);
	int n = wait_leader(5000, -1);
	CHECK(n >= 0, "no leader with two of three members");

	/* the majority gone: nobody may lead */
	etcdfx_signal(&fx3, 1, SIGKILL);
	uint64_t t0 = tl_now_ms();
	while (!none_serving() && tl_now_ms() < t0 + 5000)
		tl_sleep_ms(5);
	CHECK(none_serving(), "a leader without an etcd majority");
	/* An etcd leader renews leases without a quorum until it notices it
	 * lost it (its election timeout, 1 s here); the fence lapses T - margin
	 * after the last renewal. (A new etcd leader extends every lease by its
	 * election timeout, which covers that window: docs/ha.md.) */
	CHECK(tl_now_ms() - t0 < 4500, "stepped down %llu ms after losing the majority",
	      (unsigned long long)(tl_now_ms() - t0));
	tl_sleep_ms(1000);
	CHECK(none_serving());

	/* the majority back: a leader again, with a higher epoch */
	CHECK_EQ(etcdfx_restart(&fx3, 0), 0);
	CHECK_EQ(etcdfx_restart(&fx3, 1), 0);
	n = wait_leader(15000, -1);
	CHECK(n >= 0, "no leader after the majority came back");
	if (n >= 0)
		CHECK(ha_epoch(cand[n]) > e0);
	for (int i = 0; i < NC; i++)
		stop_cand(i);
}

int main(void)
{
	pthread_t th;

	etcdfx_start(&fx, 1);
	atomic_store(&sampling, true);
	pthread_create(&th, NULL, sampler, NULL);
	test_single_etcd();
	test_three_members();
	atomic_store(&sampling, false);
	pthread_join(th, NULL);
	CHECK_EQ(atomic_load(&overlaps), 0);
	return tl_done();
}

/* t_client_restart: handles survive their peers. With one node and two open
 * handles (local path and TCP): the master is killed (calls fail with
 * KVP_ECONN, no hang) and restarted on the same port — the next calls on the
 * same handles reconnect, refresh the segment table and read the objects
 * the node re-reported; the node is killed and restarted — pooled data
 * connections are found dead and replaced; a stopped (SIGSTOP) node makes a
 * TCP read fail with KVP_ETIMEDOUT after client.timeout, and the handle works
 * again once it continues; a master restarted while a connection sat idle
 * for less than a second: the next call is answered. Exit 0/1/77.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"

#define LEN 50000

static int64_t get_check(struct kvp *k, const char *key)
{
	char *v = malloc(LEN);
	int64_t rc;

	REQUIRE(v);
	rc = kvp_get_into(k, key, v, LEN);
	if (rc == LEN && !tl_check_fill(v, LEN, key))
		rc = -1000;	/* wrong bytes: never acceptable */
	free(v);
	return rc;
}

/* Retries a read until it succeeds (the pool is coming back). A read this
 * handle can answer from a remembered location needs neither the master
 * nor (locally) the node: the master's own record (kvp_stat) is waited
 * for first. */
static int eventually(struct kvp *k, const char *key, int seconds)
{
	struct kvp_stat st;
	int64_t rc = 0;

	for (int i = 0; i < seconds * 10; i++) {
		rc = kvp_stat(k, key, &st);
		if (rc == 0)
			rc = get_check(k, key);
		if (rc == LEN)
			return 1;
		if (rc == -1000)
			break;
		usleep(100000);
	}
	fprintf(stderr, "%s: last result %lld\n", key, (long long)rc);
	return 0;
}

static void put_key(struct kvp *k, const char *key)
{
	char *v = malloc(LEN);

	REQUIRE(v);
	tl_fill(v, LEN, key);
	CHECK_RC(kvp_put(k, key, v, LEN), 0);
	free(v);
}

int main(void)
{
	tl_pool_keep_segments = true;	/* node 0 is SIGKILLed and restarted */
	struct tl_pool *p = tl_pool_start(1, 64, "[client]\ntimeout = 1500ms\n");
	const char *tcp[] = { "client.protocol=tcp", NULL };
	struct kvp_stats s0, s1;
	struct kvp *kl, *kt;
	int err;

	kl = tl_pool_open(p, NULL, &err);
	kt = tl_pool_open(p, tcp, &err);
	REQUIRE(kl && kt);
	put_key(kl, "rs/a");
	put_key(kt, "rs/b");
	CHECK_RC(get_check(kt, "rs/a"), LEN);
	CHECK_RC(get_check(kl, "rs/b"), LEN);

	/* master dies: an error, not a hang; what this handle read locally
	 * before is still answered from the segment (optimistic reads) */
	kvp_stats(kl, &s0);
	tl_pool_kill(&p->master, SIGKILL);
	{
		int rc = kvp_exists(kl, "rs/never-seen");

		CHECK(rc == KVP_ECONN || rc == KVP_ETIMEDOUT);
		CHECK_RC(kvp_exists(kl, "rs/a"), 1);
		CHECK_RC(get_check(kl, "rs/a"), LEN);
	}
	/* and comes back: same handles, objects re-reported by the node */
	tl_pool_start_master(p);
	CHECK(eventually(kl, "rs/a", 30));
	CHECK(eventually(kl, "rs/b", 30));
	CHECK(eventually(kt, "rs/a", 30));
	put_key(kl, "rs/c");
	CHECK_RC(get_check(kt, "rs/c"), LEN);
	kvp_stats(kl, &s1);
	CHECK(s1.master_connects > s0.master_connects);
	CHECK(s1.segment_refreshes > s0.segment_refreshes);

	/* node dies and comes back (its segment file survives a SIGKILL) */
	kvp_stats(kt, &s0);
	tl_pool_kill(&p->node[0], SIGKILL);
	tl_pool_start_node(p, 0);
	CHECK(eventually(kt, "rs/a", 30));
	CHECK(eventually(kt, "rs/c", 30));
	CHECK(eventually(kl, "rs/b", 30));
	kvp_stats(kt, &s1);
	CHECK(s1.node_connects > s0.node_connects);

	/* a stopped node: TCP reads time out, local reads do not need it */
	CHECK(eventually(kt, "rs/b", 30));	/* pooled connection is warm */
	kill(p->node[0], SIGSTOP);
	CHECK_RC(get_check(kt, "rs/b"), KVP_ETIMEDOUT);
	CHECK_RC(get_check(kl, "rs/b"), LEN);
	kill(p->node[0], SIGCONT);
	CHECK(eventually(kt, "rs/b", 30));

	/* the master restarts while the handle's connection sits idle for
	 * less than a second, so it is lent without a liveness check: the
	 * call breaks before any reply and is sent again on a fresh one —
	 * the caller sees an answer, never the dead connection */
	CHECK_RC(kvp_exists(kl, "rs/prime-never-put"), 0);	/* (a seen key needs no master) */
	kvp_stats(kl, &s0);
	tl_pool_kill(&p->master, SIGKILL);
	tl_pool_start_master(p);
	/* the new master answers (another handle); whether the node has
	 * mounted again by then is a race, so any count will do */
	CHECK(tl_pool_wait_nodes(p, TL_ANY_NODES, 30));
	{
		int rc = kvp_exists(kl, "rs/fresh-never-put");

		if (rc != 0)
			fprintf(stderr, "exists after the restart: %d (%s)\n", rc, kvp_strerror(rc));
		CHECK(rc == 0);
	}
	kvp_stats(kl, &s1);
	CHECK(s1.master_connects > s0.master_connects);
	CHECK(eventually(kl, "rs/a", 30));

	kvp_close(kl);
	kvp_close(kt);
	return tl_done();
}

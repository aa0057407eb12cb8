/* t_client_stats_owed: two CLIENT_STATS reports posted on one master
 * connection before anything reads its replies (calls that never ask the
 * master, e.g. optimistic local gets, for more than a second), then a call
 * on that connection. The call must succeed: the first report's reply is
 * owed like the second's, not a stray frame (it failed with KVP_EPROTO,
 * client_bench.sh's "batch_put_from: KVP_EPROTO" with BENCH_SECS >= 0.3).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "client_i.h"
#include "cstats.h"
#include "kvpool.h"
#include "testlib.h"

#define VLEN 4096

int main(void)
{
	struct tl_pool *p = tl_pool_start(1, 16, NULL);
	const char *ov[] = { "client.protocol=tcp", "client.connections_per_node=1", NULL };
	static char v[VLEN], g[VLEN];
	char key[32];
	struct kvp *kvp;
	int err = 0;

	REQUIRE(tl_pool_wait_nodes(p, 1, 10), "the node did not mount");
	kvp = tl_pool_open(p, ov, &err);
	REQUIRE(kvp, "open: %s", kvp_errname(err));
	for (int round = 0; round < 5; round++) {
		struct kvp_info info;

		snprintf(key, sizeof(key), "owed-%d", round);
		tl_fill(v, sizeof(v), key);
		/* a call: the master connection is idle, owed nothing */
		CHECK_RC(kvp_put_from(kvp, key, v, sizeof(v)), 0);
		/* two reports, each posted on that connection without a read */
		for (int i = 0; i < 2; i++) {
			atomic_fetch_add(&kvp->st.local_bytes, 100);	/* as a copy would */
			cstats_flush(kvp);
		}
		/* calls on the same connection: the replies of both are owed */
		CHECK_RC(kvp_get_into(kvp, key, g, sizeof(g)), VLEN);
		CHECK(tl_check_fill(g, sizeof(g), key), "%s: wrong bytes", key);
		CHECK_RC(kvp_info(kvp, &info), 0);
		kvp_info_free(&info);
	}
	CHECK(atomic_load(&kvp->cs.due_ms) != CSTATS_OFF, "reports still on (the master answers them)");
	kvp_close(kvp);
	return tl_done();
}

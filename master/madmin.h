/* madmin: the admin endpoints Mooncake's master serves on its metrics
 * port, in Mooncake's formats (master_admin_service.cpp at 3b5a59413), so
 * that tools and engines that poll them work against kvpool-master:
 * /health /role /ha_status /leader /metrics/summary /get_all_segments
 * /get_segments_detail /query_segment /query_key /batch_query_keys
 * /get_all_keys. Runs on the master's loop thread (http.c handlers); reads
 * the master's state without locks and never takes a lease.
 */
#ifndef KVP_MADMIN_H
#define KVP_MADMIN_H

#include <stdbool.h>
#include <stdint.h>

#include "conf.h"

struct http_req;
struct http_resp;
struct master;

/* What a leader election reports (set through mhttp_set_ha). Without one
 * the master is Mooncake's non-HA master: a serving leader, no view. */
struct madmin_ha {
	char role[16];			/* "leader" | "standby" */
	char state[24];			/* "serving", "standby", "candidate", ... */
	bool service_ready;		/* false: the key endpoints answer 503 */
	char leader[CONF_STR];		/* leader's address, "" none known */
	uint64_t view_version;
	/* with ha = etcd (docs/ha.md): when a leader was last elected, and
	 * whether etcd answers; etcd_up -1 without HA (not shown) */
	uint64_t last_election_ns;
	int etcd_up;
};

/* /metrics/summary's rates are per second since the previous summary. */
struct madmin {
	struct madmin_ha ha;
	bool have_prev;
	uint64_t prev_ms;
	uint64_t prev[8][2];		/* items, failures of the summarised opcodes */
};

void madmin_init(struct madmin *a);
/* Answers req if its path is one of the endpoints above: true (resp
 * filled), false when it is not one of them. */
bool madmin_handle(struct madmin *a, struct master *m, const struct http_req *req,
		   struct http_resp *resp);

#endif

/* node_i: the layout of struct node (node.c's state: the lifecycle, and the
 * modules it holds), for node.c and in-tree tests such as the fuzz target.
 * The modules below node.c never include it: they get the shared
 * struct node_ctx (node_ctx.h) and their own state. Loop thread, except
 * stop_req/reload_req (signal context) and fs_stopped (the FUSE stopper).
 *
 * Calls go one way: node.c -> node_master.c -> node_data.c, node_spill.c,
 * node_scan.c; node_data.c and node_spill.c -> spill.c. The modules reach
 * node.c only through the callbacks it sets (node_ctx.progress, the master
 * link's status and mounted).
 */
#ifndef KVP_NODE_I_H
#define KVP_NODE_I_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "conf.h"
#include "node.h"
#include "node_ctx.h"
#include "node_data.h"
#include "node_master.h"
#include "node_spill.h"

struct http_srv;
struct kvfs;
struct node_rdma;
struct node_shm;

struct node {
	struct kvp_conf conf;
	struct node_ctx x;		/* what the modules share; x.conf = &conf */
	struct node_data *data;		/* the data server */
	struct node_mlink *ml;		/* the master link */
	struct node_spillside *spill;	/* the spill tier (memory-only: no file) */
	struct node_rdma *rdma;		/* segment registered for RDMA; NULL: TCP only */
	struct node_shm *shm;		/* background reservation, orphan sweep */
	struct http_srv *http;

	char name[CONF_STR];
	char host_id[CONF_STR];
	char seg_name[CONF_STR + 8];
	int numa_node;			/* -1: none */
	char numa_why[128];		/* how numa_node = auto chose ("" otherwise) */
	uint64_t epoch;			/* HELLO reply: this process's start */

	/* configuration sources for SIGHUP (node_set_conf_source) */
	char **conf_files, **conf_overrides;
	size_t nconf_files;
	/* effective listen addresses (loopback-only without a token) */
	char listen_addr[CONF_STR], http_addr[CONF_STR];
	char listen_host[CONF_STR];	/* host part of listen_addr */

	/* lifecycle */
	bool seg_open;
	bool ready;
	bool notify;			/* sd_notify the host's NOTIFY_SOCKET */
	void (*ready_cb)(void *arg);
	void *ready_arg;
	volatile sig_atomic_t stop_req, reload_req;
	bool in_drain_step;		/* re-entrancy guard */
	uint64_t drain_deadline, drain_timer, unmount_deadline;
	uint64_t hb_timer, sweep_timer, wd_timer;
	int run_rc;

	/* FUSE view: stopped on a helper thread so the loop keeps serving */
	struct kvfs *fs;
	pthread_t fs_thread;
	bool fs_stopping;
	atomic_bool fs_stopped;
};

#endif

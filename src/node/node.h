/* node: the kvpool-node daemon as a library — owns one /dev/shm segment, its
 * mount at the master (heartbeats, re-mount + re-report after a master
 * restart, tombstoning freed extents), the TCP data server and the node's
 * HTTP endpoints. Everything runs on one ev loop thread (node_run);
 * node_stop and node_reload may be called from other threads or signal
 * context. Used by src/node/node_main.c and by embedders (the Python module).
 */
#ifndef KVP_NODE_H
#define KVP_NODE_H

#include <stdbool.h>
#include <stddef.h>

#include "conf.h"

struct node;

/* Opens the segment, starts listeners; does not block. The config is copied.
 * NULL with a message in err. */
struct node *node_create(const struct kvp_conf *conf, char *err, size_t errlen);
/* Runs the loop until node_stop: mounts at the master (retrying), serves,
 * and on stop drains: stops accepting, finishes in-flight transfers,
 * unmounts at the master. 0 on a clean stop. */
int node_run(struct node *n);
/* Async-signal-safe. */
void node_stop(struct node *n);
/* Re-read configuration (SIGHUP): applies live keys. Async-signal-safe
 * request; the work happens on the loop thread. */
void node_reload(struct node *n);
/* Called on the loop thread once listeners accept, the segment is mapped
 * and mounted at the master (first time only) — for sd_notify READY=1. */
void node_on_ready(struct node *n, void (*cb)(void *arg), void *arg);
/* On by default (kvpool-node): STATUS=, WATCHDOG=1 and STOPPING=1 go to
 * $NOTIFY_SOCKET. An embedder (a node inside a client process, such as the
 * Python module's) turns it off before node_run: that socket belongs to the
 * host process's own service, which says itself when it is ready. */
void node_set_notify(struct node *n, bool on);
void node_destroy(struct node *n);	/* closes; removes the segment if configured */
/* The bound ports (after node_create), for tests using port 0. */
int node_data_port(const struct node *n);
int node_http_port(const struct node *n);

/* Loads files[0..nfiles) layered in order (a later file overrides an earlier
 * one; the environment and the overrides still win), as kvpool-node's
 * repeated -c does (conf_load_files); nfiles 0 = conf_load's default file.
 * 0 or -1 with "FILE:LINE: ..." in err. */
int node_conf_load(struct kvp_conf *c, const char *const *files, size_t nfiles,
		   const char *const *overrides, char *err, size_t errlen);
/* What node_reload re-reads (copied); default: conf->file, no overrides. */
int node_set_conf_source(struct node *n, const char *const *files, size_t nfiles,
			 const char *const *overrides);

#endif

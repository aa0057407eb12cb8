/* mserver: kvpool-master as a daemon — the ev loop, the RPC listener
 * (accept, connection limit, framed connections feeding master_handle),
 * the HTTP endpoints (mhttp), the periodic tick, reload requests. Runs on
 * the thread calling mserver_run(); mserver_stop() and mserver_reload() are
 * async-signal-safe and may be called from signal handlers.
 */
#ifndef KVP_MSERVER_H
#define KVP_MSERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "conf.h"

struct mserver;
struct ev_loop;

/* Re-reads the configuration for a reload: 0, or -1 (message in err). */
typedef int (*mserver_reload_fn)(struct kvp_conf *out, char *err, size_t errlen, void *arg);

/* Creates the master and starts every listener (they accept once this
 * returns; connections are served by mserver_run). Without a cluster token,
 * non-loopback listen addresses are replaced by 127.0.0.1. NULL with a
 * message in err. */
struct mserver *mserver_create(const struct kvp_conf *conf, mserver_reload_fn reload,
			       void *reload_arg, char *err, size_t errlen);
/* 0 after mserver_stop, or a negative errno. */
int mserver_run(struct mserver *s);
void mserver_stop(struct mserver *s);
void mserver_reload(struct mserver *s);
void mserver_destroy(struct mserver *s);

struct ev_loop *mserver_loop(struct mserver *s);
int mserver_port(const struct mserver *s);
int mserver_http_port(const struct mserver *s);
int mserver_metadata_port(const struct mserver *s);	/* -1: no metadata store */
/* One line for sd_notify STATUS=: keys, segments, connections. */
void mserver_status(struct mserver *s, char *buf, size_t len);

#endif

/* pynode: embedded kvpool-nodes (see pynode.h). The node's own loop does
 * the work; this file only names it, starts its thread, waits for the
 * ready callback and joins it.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "conf.h"
#include "kvpool.h"
#include "node.h"
#include "pynode.h"

static bool is_explicit(const struct kvp_conf *c, const char *sec, const char *key)
{
	const struct conf_key *k = conf_find(sec, key);

	return k && c->src[k - conf_table] == CONF_SRC_CMDLINE;
}

/* The values for a host's kvpool-node daemon (from /etc/kvpool/kvpool.ini
 * or the environment) would collide with this process's node. */
void emb_conf_adjust(struct kvp_conf *c, unsigned seq)
{
	char host[64];
	bool token = c->cluster.token[0] != 0;

	if (gethostname(host, sizeof(host)) < 0 || !host[0])
		snprintf(host, sizeof(host), "host");
	host[sizeof(host) - 1] = 0;
	if (!is_explicit(c, "node", "name"))
		snprintf(c->node.name, 64, "%.40s-py-%d-%u", host, (int)getpid(), seq);
	if (!is_explicit(c, "node", "segment"))
		snprintf(c->node.segment, CONF_STR, "kvpool-py-%d-%u", (int)getpid(), seq);
	/* Any free port: several processes on one host each embed a node. */
	if (!is_explicit(c, "node", "listen"))
		snprintf(c->node.listen, CONF_STR, "%s", token ? "0.0.0.0:0" : "127.0.0.1:0");
	if (!is_explicit(c, "node", "advertise"))
		c->node.advertise[0] = 0;
	if (!is_explicit(c, "node", "http_listen"))
		c->node.http_listen[0] = 0;
	/* The memory leaves with the process, as Mooncake's embedded segment does. */
	if (!is_explicit(c, "node", "remove_segment_on_exit"))
		c->node.remove_segment_on_exit = true;
	/* Memory is committed as it is used (an engine's RSS and cgroup see
	 * what the store holds, not what it may hold), unless populate asks
	 * for all of it now. Local puts prefault, so a full /dev/shm fails a
	 * put instead of raising SIGBUS in the engine (docs/python.md). */
	if (!is_explicit(c, "node", "reserve"))
		snprintf(c->node.reserve, CONF_STR, "%s", c->node.populate ? "upfront" : "none");
	if (!is_explicit(c, "fuse", "mountpoint"))
		c->fuse.mountpoint[0] = 0;
	if (!is_explicit(c, "spill", "path") && !is_explicit(c, "spill", "size")) {
		c->spill.path[0] = 0;
		c->spill.size = 0;
	}
}

static void emb_ready_cb(void *arg)
{
	struct emb *e = arg;

	pthread_mutex_lock(&e->lock);
	if (e->state == EMB_STARTING)
		e->state = EMB_READY;
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
}

static void *emb_thread(void *arg)
{
	struct emb *e = arg;
	int rc = node_run(e->node);

	pthread_mutex_lock(&e->lock);
	e->state = EMB_EXITED;
	e->rc = rc;
	pthread_cond_broadcast(&e->cond);
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

static void emb_free(struct emb *e)
{
	if (e->node)
		node_destroy(e->node);
	pthread_mutex_destroy(&e->lock);
	pthread_cond_destroy(&e->cond);
	free(e);
}

void emb_stop(struct emb *e)
{
	if (!e)
		return;
	node_stop(e->node);
	pthread_join(e->thr, NULL);
	emb_free(e);
}

/* Until the node is mounted, has exited, or @deadline (CLOCK_MONOTONIC ms). */
static enum emb_state emb_wait(struct emb *e, uint64_t deadline)
{
	enum emb_state st;

	pthread_mutex_lock(&e->lock);
	while (e->state == EMB_STARTING && clock_cond_wait_until(&e->cond, &e->lock, deadline) == 0)
		;
	st = e->state;
	pthread_mutex_unlock(&e->lock);
	return st;
}

struct emb *emb_start(const struct kvp_conf *c, char *err, size_t errlen, int *rc)
{
	char nerr[512] = "";
	pthread_condattr_t ca;
	sigset_t all, old;
	struct emb *e;
	int prc, nrc;

	e = calloc(1, sizeof(*e));
	if (!e) {
		snprintf(err, errlen, "embedded node: out of memory");
		*rc = KVP_ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&e->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->cond, &ca);
	pthread_condattr_destroy(&ca);
	snprintf(e->name, sizeof(e->name), "%.63s", c->node.name);
	snprintf(e->segment, sizeof(e->segment), "%s", c->node.segment);
	e->size = c->node.segment_size;
	e->node = node_create(c, nerr, sizeof(nerr));
	if (!e->node) {
		snprintf(err, errlen, "embedded node: %s", nerr);
		*rc = KVP_EINVAL;
		emb_free(e);
		return NULL;
	}
	e->port = node_data_port(e->node);
	/* The process's NOTIFY_SOCKET (a service that runs Python) is its
	 * own: the embedded node tells systemd nothing. */
	node_set_notify(e->node, false);
	e->state = EMB_STARTING;
	node_on_ready(e->node, emb_ready_cb, e);
	/* Signals stay with Python's threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	prc = pthread_create(&e->thr, NULL, emb_thread, e);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (prc) {
		snprintf(err, errlen, "embedded node: pthread_create: %s", strerror(prc));
		*rc = KVP_EINTERNAL;
		emb_free(e);
		return NULL;
	}
	/* Mounted at the master before setup() returns, as Mooncake's setup. */
	switch (emb_wait(e, clock_now_ms() + (c->client.timeout ? c->client.timeout : 10000))) {
	case EMB_READY:
		*rc = 0;
		return e;
	case EMB_STARTING:
		snprintf(err, errlen, "embedded node: not mounted at master %s within %llu ms",
			 c->cluster.master, (unsigned long long)c->client.timeout);
		*rc = KVP_ETIMEDOUT;
		break;
	case EMB_EXITED:
		pthread_mutex_lock(&e->lock);
		nrc = e->rc;
		pthread_mutex_unlock(&e->lock);
		snprintf(err, errlen, "embedded node stopped during start-up (%s)",
			 kvp_errname(kvp_is_err(nrc) ? nrc : KVP_EINTERNAL));
		*rc = kvp_is_err(nrc) ? nrc : KVP_EINTERNAL;
		break;
	}
	emb_stop(e);
	return NULL;
}

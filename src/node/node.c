/* node: the kvpool-node daemon's lifecycle — opens the /dev/shm segment,
 * creates and wires the data server (node_data.c), the spill side
 * (node_spill.c) and the master link (node_master.c), serves the HTTP
 * endpoints, and on stop drains and unmounts. SIGHUP re-reads the
 * configuration. Everything runs on the loop thread; node_stop/node_reload
 * only set a flag and wake the loop.
 */
#include "node_i.h"

#include <errno.h>
#include <grp.h>
#include <numa.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "clock.h"
#include "http.h"
#include "kvfs.h"
#include "log.h"
#include "net.h"
#include "node_rdma.h"
#include "node_shm.h"
#include "numa_util.h"
#include "tls.h"
#include "ui.h"

#define NODE_SWEEP_MS 500
#define NODE_DRAIN_MS 10000		/* bound on finishing in-flight transfers */
#define NODE_UNMOUNT_WAIT_MS 2000

static void node_status(struct node *n, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void node_status(struct node *n, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (!n->notify)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* No NOTIFY_SOCKET (not under systemd): sd_notify does nothing. */
	sd_notifyf(0, "STATUS=%s", buf);
}

/* The status line of a mounted node, with the FUSE view when it is up and
 * @tail (a reload's outcome) after it: what the node is doing stays in
 * STATUS= whatever happened last. */
static void node_status_mounted(struct node *n, const char *tail)
{
	node_status(n, "mounted at %s as segment %u, %llu extents, serving %s%s%s%s%s",
		    node_master_addr(n->ml), node_master_segment_id(n->ml),
		    (unsigned long long)n->x.extents, node_master_advertise(n->ml),
		    n->fs ? ", FUSE view mounted at " : "", n->fs ? n->conf.fuse.mountpoint : "",
		    tail[0] ? "; " : "", tail);
}

/* ---- readiness, status ---- */

/* The master link's status callback. */
static void node_on_status(void *arg, const char *msg)
{
	node_status(arg, "%s", msg);
}

/* The master link's mounted callback: MOUNT and every REPORT answered. */
static void node_mounted(void *arg)
{
	struct node *n = arg;

	if (n->ready || n->x.stopping) {
		node_status_mounted(n, "");
		return;
	}
	if (n->conf.fuse.mountpoint[0] && !n->fs) {
		char err[256] = "";
		/* kvfs is a pool client of its own: it talks to the master and
		 * maps this segment, it never waits on this loop. */
		n->fs = kvfs_start(&n->conf, n->conf.fuse.mountpoint, err, sizeof(err));
		if (!n->fs) {
			log_err("FUSE view at %s: %s", n->conf.fuse.mountpoint, err);
			n->run_rc = -1;
			node_stop(n);
			return;
		}
		log_notice("FUSE view mounted at %s", n->conf.fuse.mountpoint);
	}
	node_status_mounted(n, "");
	n->ready = true;
	/* Serving first, reserving after: start-up costs nothing per GiB. */
	if (!strcmp(n->conf.node.reserve, "background"))
		node_shm_reserve_start(n->shm);
	/* After the first scan, which mapped what the segment held. */
	node_shm_warm_start(n->shm);
	if (n->ready_cb)
		n->ready_cb(n->ready_arg);
}

void node_on_ready(struct node *n, void (*cb)(void *arg), void *arg)
{
	n->ready_cb = cb;
	n->ready_arg = arg;
}

void node_set_notify(struct node *n, bool on)
{
	n->notify = on;
}

/* ---- HTTP ---- */

/* One sample of a metric without labels, with its HELP and TYPE lines. */
static void node_metric(struct sbuf *b, const char *type, const char *name, const char *help,
			unsigned long long v)
{
	sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, v);
}

/* A counter with one sample per opcode that has a count. */
static void node_op_counter(struct sbuf *b, const char *name, const char *help,
			    const uint64_t *count)
{
	sb_printf(b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
	for (unsigned op = 0; op < WIRE_OP_MAX; op++)
		if (count[op] && wire_op_name(op))
			sb_printf(b, "%s{op=\"%s\"} %llu\n", name, wire_op_name(op),
				  (unsigned long long)count[op]);
}

static void node_metrics(struct node *n, struct sbuf *b)
{
	const struct node_data_stats *ds = node_data_stats(n->data);
	const struct node_mlink_stats *st = node_master_stats(n->ml);

	node_metric(b, "gauge", "kvpool_node_segment_size_bytes",
		    "Size of the node's segment file.", n->x.seg.size);
	node_metric(b, "gauge", "kvpool_node_segment_used_bytes",
		    "Bytes held by extents (last scan + TCP writes - frees).", n->x.used);
	const struct node_shm_stats *ss = node_shm_stats(n->shm);
	node_metric(b, "gauge", "kvpool_node_segment_reserved_bytes",
		    "Bytes of the segment fallocated in /dev/shm (node.reserve).",
		    ss->reserved_bytes);
	node_metric(b, "counter", "kvpool_node_segment_warmed_pages_total",
		    "Pages of committed extents' headers mapped by the node in the background "
		    "(a re-mount's scan then reads mapped memory).", ss->warmed_pages);
	node_metric(b, "counter", "kvpool_node_orphans_removed_total",
		    "Segments of dead kvpool processes on this host removed.", ss->orphans_removed);
	node_metric(b, "counter", "kvpool_node_orphan_bytes_removed_total",
		    "Memory those segments held.", ss->orphan_bytes_removed);
	node_metric(b, "gauge", "kvpool_node_extents",
		    "Extents held (last scan + TCP writes - frees).", n->x.extents);
	node_metric(b, "counter", "kvpool_node_read_bytes_total",
		    "Value bytes sent by READ.", ds->bytes_read);
	node_metric(b, "counter", "kvpool_node_written_bytes_total",
		    "Extent bytes received by WRITE.", ds->bytes_written);
	node_op_counter(b, "kvpool_node_requests_total", "Frames handled, by opcode.", n->x.req);
	node_op_counter(b, "kvpool_node_errors_total",
			"Requests answered with an error, by opcode.", n->x.err);
	node_metric(b, "gauge", "kvpool_node_connections",
		    "Open data-server connections.", node_data_conns(n->data));
	node_metric(b, "counter", "kvpool_node_connections_total",
		    "Data-server connections accepted.", ds->conns_total);
	node_metric(b, "counter", "kvpool_node_connections_rejected_total",
		    "Connections refused over node.max_connections.", ds->conns_rejected);
	node_metric(b, "counter", "kvpool_node_connections_timed_out_total",
		    "Connections closed for not sending HELLO in time.", ds->conns_timed_out);
	node_metric(b, "gauge", "kvpool_node_master_up",
		    "1 while the segment is mounted at the master.",
		    node_master_state(n->ml) == NODE_M_UP);
	node_metric(b, "counter", "kvpool_node_master_connects_total",
		    "Connections made to the master.", st->master_connects);
	node_metric(b, "counter", "kvpool_node_master_failures_total",
		    "Failed or lost master connections.", st->master_failures);
	node_metric(b, "counter", "kvpool_node_mounts_total",
		    "Successful MOUNTs at the master.", st->mounts);
	node_metric(b, "counter", "kvpool_node_remounts_total",
		    "MOUNTs after the first (master restart or drop).", st->remounts);
	node_metric(b, "counter", "kvpool_node_reported_extents_total",
		    "Extents sent in REPORTs.", st->reported);
	node_metric(b, "counter", "kvpool_node_report_adopted_total",
		    "Reported extents the master adopted.", st->report_adopted);
	node_metric(b, "counter", "kvpool_node_report_rejected_total",
		    "Reported extents the master rejected.", st->report_rejected);
	node_metric(b, "counter", "kvpool_node_checksum_mismatches_total",
		    "Extents a segment scan left out because their value did not match its checksum.",
		    st->checksum_mismatches);
	node_metric(b, "counter", "kvpool_node_freed_extents_total",
		    "Extents tombstoned on the master's FREE.", st->freed);
	node_metric(b, "counter", "kvpool_node_free_stale_total",
		    "FREE items that named no live extent.", st->free_stale);
	node_metric(b, "counter", "kvpool_node_writes_tombstoned_total",
		    "WRITEs whose image failed the check or broke off.", ds->writes_tombstoned);
	node_metric(b, "counter", "kvpool_node_heartbeats_total",
		    "Heartbeats sent.", st->heartbeats);
	node_spill_metrics(n->spill, b);
	/* signed: -1 is "none" */
	sb_printf(b, "# HELP kvpool_node_numa_node NUMA node the segment and threads are bound to (-1 none).\n"
		  "# TYPE kvpool_node_numa_node gauge\n"
		  "kvpool_node_numa_node %d\n", n->numa_node);
	node_rdma_metrics(n->rdma, b);
}

/* /api/status: the node's own view for the status page (ui.h) — its
 * segment, the master link, and the bytes its data server moved over TCP
 * (RDMA is one-sided: the node does not see those bytes). */
static void node_api_status(struct node *n, struct sbuf *b)
{
	const struct node_data_stats *ds = node_data_stats(n->data);
	uint64_t req = 0, err = 0;
	struct timespec ts;

	for (unsigned op = 0; op < WIRE_OP_MAX; op++) {
		req += n->x.req[op];
		err += n->x.err[op];
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	sb_printf(b, "{\"kind\":\"node\",\"version\":\"%s\",\"time_ms\":%llu,\"name\":",
		  KVP_VERSION, (unsigned long long)ts.tv_sec * 1000ull + (unsigned long long)(ts.tv_nsec / 1000000));
	sb_json_str(b, n->name, strlen(n->name));
	sb_printf(b, ",\"segment\":");
	sb_json_str(b, n->x.seg.path, strlen(n->x.seg.path));
	sb_printf(b, ",\"segment_id\":%u,\"endpoint\":", node_master_segment_id(n->ml));
	sb_json_str(b, node_master_advertise(n->ml), strlen(node_master_advertise(n->ml)));
	sb_printf(b, ",\"master\":\"%s\",\"master_addr\":",
		  node_master_state_name(node_master_state(n->ml)));
	sb_json_str(b, node_master_addr(n->ml), strlen(node_master_addr(n->ml)));
	sb_printf(b, ",\"size\":%llu,\"used\":%llu,\"extents\":%llu,\"connections\":%llu,"
		  "\"counters\":{\"read_bytes\":%llu,\"written_bytes\":%llu,\"requests\":%llu,"
		  "\"errors\":%llu}}\n",
		  (unsigned long long)n->x.seg.size, (unsigned long long)n->x.used,
		  (unsigned long long)n->x.extents, (unsigned long long)node_data_conns(n->data),
		  (unsigned long long)ds->bytes_read, (unsigned long long)ds->bytes_written,
		  (unsigned long long)req, (unsigned long long)err);
}

static void node_http(const struct http_req *req, struct http_resp *resp, void *arg)
{
	struct node *n = arg;
	struct sbuf b = { 0 };

	if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0) {
		resp->status = 405;
		sb_printf(&b, "method not allowed\n");
	} else if (strcmp(req->path, "/metrics") == 0) {
		node_metrics(n, &b);
	} else if (strcmp(req->path, "/api/status") == 0) {
		resp->content_type = "application/json";
		node_api_status(n, &b);
	} else if (ui_serve(req, resp)) {
		return;
	} else if (strcmp(req->path, "/health") == 0) {
		/* Alive and serving whatever the master says: a master outage is
		 * not a reason to restart the node (it would lose nothing, but
		 * clients would lose the reads it still serves). */
		resp->status = n->x.stopping ? 503 : 200;
		resp->content_type = "application/json";
		sb_printf(&b, "{\"status\":\"%s\",\"master\":\"%s\",\"segment\":\"%s\","
			  "\"segment_id\":%u,\"endpoint\":\"%s\",\"extents\":%llu,"
			  "\"numa_node\":%d,\"rdma\":\"%s\"}\n",
			  n->x.stopping ? "stopping" : "ok",
			  node_master_state_name(node_master_state(n->ml)), n->x.seg.path,
			  node_master_segment_id(n->ml), node_master_advertise(n->ml),
			  (unsigned long long)n->x.extents, n->numa_node,
			  node_rdma_devices(n->rdma));
	} else {
		resp->status = 404;
		sb_printf(&b, "not found\n");
	}
	resp->body = b.p;
	resp->body_len = b.len;
}

/* ---- stop, drain ---- */

static void *node_fs_stop_thread(void *arg)
{
	struct node *n = arg;

	kvfs_stop(n->fs);
	atomic_store(&n->fs_stopped, true);
	return NULL;
}

static void node_drain_finish(struct node *n)
{
	if (n->drain_timer) {
		ev_timer_del(n->x.loop, n->drain_timer);
		n->drain_timer = 0;
	}
	node_master_close(n->ml);
	ev_stop(n->x.loop);
}

static void node_drain_step_locked(struct node *n, uint64_t now);

/* Order: FUSE view off, data transfers finished (bounded), UNMOUNT at the
 * master (bounded), then the loop ends. Called whenever something that
 * could hold the drain up finishes (node_ctx.progress), and from a timer. */
static void node_drain_step(void *arg)
{
	struct node *n = arg;
	uint64_t now = ev_now(n->x.loop);

	/* Closing connections below calls back here (on_close). */
	if (!n->x.stopping || n->drain_timer == 0 || n->in_drain_step)
		return;
	n->in_drain_step = true;
	node_drain_step_locked(n, now);
	n->in_drain_step = false;
}

static void node_drain_step_locked(struct node *n, uint64_t now)
{
	if (n->fs_stopping && !atomic_load(&n->fs_stopped) && now < n->drain_deadline)
		return;
	size_t conns = node_data_conns(n->data);

	if ((conns || node_data_sends(n->data)) && now < n->drain_deadline)
		return;
	if (conns) {
		log_warn("drain: closing %zu connections with transfers still in flight", conns);
		node_data_close_all(n->data);
	}
	switch (node_master_state(n->ml)) {
	case NODE_M_UP:
		if (node_master_unmount(n->ml) == 0) {
			n->unmount_deadline = now + NODE_UNMOUNT_WAIT_MS;
			return;
		}
		break;
	case NODE_M_UNMOUNT:
		if (now < n->unmount_deadline)
			return;
		log_warn("master did not answer UNMOUNT in %d ms", NODE_UNMOUNT_WAIT_MS);
		break;
	default:
		break;
	}
	node_drain_finish(n);
}

static void node_drain_timer(struct ev_loop *loop, void *arg)
{
	node_drain_step(arg);
}

static void node_begin_stop(struct node *n)
{
	if (n->x.stopping)
		return;
	n->x.stopping = true;
	if (node_master_state(n->ml) == NODE_M_UP)
		log_notice("stopping: draining transfers, then unmounting segment %u",
			   node_master_segment_id(n->ml));
	else
		log_notice("stopping: draining transfers (not mounted at the master)");
	if (n->notify)
		sd_notify(0, "STOPPING=1");
	node_status(n, "draining");
	node_data_stop_accepting(n->data);
	node_data_drain(n->data);
	/* Not mounted yet: no connection attempt should outlive the stop. */
	if (node_master_state(n->ml) != NODE_M_UP)
		node_master_close(n->ml);
	if (n->fs) {
		if (pthread_create(&n->fs_thread, NULL, node_fs_stop_thread, n) == 0) {
			n->fs_stopping = true;
		} else {
			kvfs_stop(n->fs);
			n->fs = NULL;
		}
	}
	n->drain_deadline = ev_now(n->x.loop) + NODE_DRAIN_MS;
	n->drain_timer = ev_timer_add(n->x.loop, 50, true, node_drain_timer, n);
	node_drain_step(n);
}

static void node_hb_timer(struct ev_loop *loop, void *arg);

/* ---- configuration ---- */

/* A later -c file layered on c: keys that came from the environment or the
 * command line keep their values. */
int node_conf_load(struct kvp_conf *c, const char *const *files, size_t nfiles,
		   const char *const *overrides, char *err, size_t errlen)
{
	return conf_load_files(c, files, nfiles, overrides, err, errlen);
}

static void node_free_strv(char **v)
{
	for (char **p = v; p && *p; p++)
		free(*p);
	free(v);
}

static char **node_dup_strv(const char *const *v, size_t n)
{
	char **out = calloc(n + 1, sizeof(*out));

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		out[i] = strdup(v[i]);
		if (!out[i]) {
			node_free_strv(out);
			return NULL;
		}
	}
	return out;
}

int node_set_conf_source(struct node *n, const char *const *files, size_t nfiles,
			 const char *const *overrides)
{
	size_t nov = 0;

	while (overrides && overrides[nov])
		nov++;
	char **f = node_dup_strv(files, nfiles);
	char **o = node_dup_strv(overrides, nov);
	if (!f || !o) {
		node_free_strv(f);
		node_free_strv(o);
		return -ENOMEM;
	}
	node_free_strv(n->conf_files);
	node_free_strv(n->conf_overrides);
	n->conf_files = f;
	n->nconf_files = nfiles;
	n->conf_overrides = o;
	return 0;
}

/* SIGHUP: load the same sources again, apply the live keys, name the
 * changed ones that need a restart (conf_apply_live logs each). */
static void node_do_reload(struct node *n)
{
	struct kvp_conf *nc = malloc(sizeof(*nc));
	char err[512];
	const char *one[1] = { n->conf.file };
	int r;

	if (!nc)
		return;
	if (n->conf_files)
		r = node_conf_load(nc, (const char *const *)n->conf_files, n->nconf_files,
				   (const char *const *)n->conf_overrides, err, sizeof(err));
	else
		r = node_conf_load(nc, one, n->conf.file[0] ? 1 : 0, NULL, err, sizeof(err));
	if (r < 0) {
		log_err("reload: %s; keeping the running configuration", err);
		free(nc);
		return;
	}
	uint64_t hb = n->conf.node.heartbeat_interval;
	int restart = conf_apply_live(&n->conf, nc);
	memset(nc->cluster.token, 0, sizeof(nc->cluster.token));
	free(nc);
	int lvl = log_level_parse(n->conf.log.level);
	if (lvl >= 0)
		log_level = lvl;
	if (n->conf.node.heartbeat_interval != hb) {
		ev_timer_del(n->x.loop, n->hb_timer);
		n->hb_timer = ev_timer_add(n->x.loop, n->conf.node.heartbeat_interval, true,
					   node_hb_timer, n);
	}
	if (n->data && node_data_reload_tenants(n->data, err, sizeof(err)))
		log_err("reload: %s; the tenants stay as they were", err);
	log_notice("configuration reloaded; %d changed keys need a restart", restart);
	char tail[64];

	snprintf(tail, sizeof(tail), "reloaded, %d changed keys need a restart", restart);
	/* Still mounted (and its FUSE view still up): the line says so. */
	if (n->ready && !n->x.stopping && node_master_state(n->ml) == NODE_M_UP)
		node_status_mounted(n, tail);
	else
		node_status(n, "%s", tail);
}

/* ---- loop plumbing ---- */

static void node_on_wake(struct ev_loop *loop, void *arg)
{
	struct node *n = arg;

	node_master_scan_done(n->ml);
	if (n->reload_req) {
		n->reload_req = 0;
		node_do_reload(n);
	}
	if (n->stop_req)
		node_begin_stop(n);
}

static void node_hb_timer(struct ev_loop *loop, void *arg)
{
	struct node *n = arg;

	node_master_heartbeat(n->ml);
}

static void node_sweep_timer(struct ev_loop *loop, void *arg)
{
	struct node *n = arg;

	node_data_sweep(n->data);
	node_shm_reap(n->shm, clock_now_ms(), 0);
}

static void node_wd_timer(struct ev_loop *loop, void *arg)
{
	sd_notify(0, "WATCHDOG=1");
}

void node_stop(struct node *n)
{
	n->stop_req = 1;
	ev_wake(n->x.loop);
}

void node_reload(struct node *n)
{
	n->reload_req = 1;
	ev_wake(n->x.loop);
}

int node_run(struct node *n)
{
	struct ev_loop *loop = n->x.loop;
	uint64_t wd_usec = 0;

	n->hb_timer = ev_timer_add(loop, n->conf.node.heartbeat_interval, true, node_hb_timer, n);
	n->sweep_timer = ev_timer_add(loop, NODE_SWEEP_MS, true, node_sweep_timer, n);
	if (n->notify && sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec) {
		uint64_t ms = wd_usec / 2000;
		n->wd_timer = ev_timer_add(loop, ms ? ms : 1, true, node_wd_timer, n);
	}
	node_status(n, "connecting to master %s", n->conf.cluster.master);
	node_master_start(n->ml);
	if (n->stop_req)
		node_begin_stop(n);
	int r = ev_run(loop);
	if (r < 0 && !n->run_rc)
		n->run_rc = r;

	if (n->fs_stopping) {
		pthread_join(n->fs_thread, NULL);
		n->fs_stopping = false;
		n->fs = NULL;
	}
	node_master_close(n->ml);
	node_master_scan_join(n->ml);
	ev_timer_del(loop, n->hb_timer);
	ev_timer_del(loop, n->sweep_timer);
	if (n->wd_timer)
		ev_timer_del(loop, n->wd_timer);
	n->hb_timer = n->sweep_timer = n->wd_timer = 0;
	return n->run_rc;
}

/* ---- create / destroy ---- */

static int node_parse_numa(const struct kvp_conf *conf, int *out, char *why, size_t whylen,
			   char *err, size_t errlen)
{
	const char *s = conf->node.numa_node;

	if (!s[0] || strcmp(s, "none") == 0) {
		*out = -1;
		return 0;
	}
	if (numa_available() < 0) {
		if (strcmp(s, "auto") == 0) {
			*out = -1;	/* no NUMA support: nothing to bind to */
			return 0;
		}
		snprintf(err, errlen, "[node] numa_node = %s: this kernel has no NUMA support", s);
		return -1;
	}
	int max = numa_max_node();
	if (strcmp(s, "auto") == 0) {
		/* The RDMA device's node (transfers then never cross the
		 * socket interconnect), else the node of the CPU we start on
		 * (pin the service with CPUAffinity= or numactl to choose
		 * it). One node: 0. numa_util.c has the rules. */
		char dev[64] = "";

		if (node_rdma_wanted(conf))
			numa_util_rdma_dev(conf->rdma.devices, dev, sizeof(dev));
		*out = numa_util_auto("", dev, numa_util_cpu_node(), max + 1, why, whylen);
		if (*out < 0)
			*out = 0;
		return 0;
	}
	char *end;
	long v = strtol(s, &end, 10);
	if (*end || v < 0 || v > max) {
		snprintf(err, errlen, "[node] numa_node = %s: expected none, auto or 0..%d", s, max);
		return -1;
	}
	*out = (int)v;
	return 0;
}

/* No token: DESIGN's rule is loopback only. A wildcard or routable address
 * is narrowed to 127.0.0.1 with a warning instead of refusing to start.
 * Returns true if hostport was narrowed. */
static bool node_loopback_only(const char *what, char *hostport)
{
	char host[CONF_STR];
	uint16_t port;

	if (!hostport[0] || net_is_loopback(hostport))
		return false;
	if (conf_parse_hostport(hostport, host, sizeof(host), &port) < 0)
		return false;
	log_warn("%s %s: no [cluster] token_file, listening on 127.0.0.1:%u only", what,
		 hostport, port);
	snprintf(hostport, CONF_STR, "127.0.0.1:%u", port);
	return true;
}

struct node *node_create(const struct kvp_conf *conf, char *err, size_t errlen)
{
	struct node *n = calloc(1, sizeof(*n));
	char host[CONF_STR];
	uint16_t port;

	if (!n) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	n->conf = *conf;
	n->x.conf = &n->conf;
	n->x.seg.fd = -1;
	n->x.progress = node_drain_step;
	n->x.progress_arg = n;
	n->epoch = clock_realtime_ns();
	n->notify = true;
	atomic_init(&n->fs_stopped, false);

	if (n->conf.node.name[0]) {
		snprintf(n->name, sizeof(n->name), "%s", n->conf.node.name);
	} else if (gethostname(n->name, sizeof(n->name) - 1) < 0 || !n->name[0]) {
		snprintf(n->name, sizeof(n->name), "node");
	}
	if (n->conf.client.host_id[0])
		snprintf(n->host_id, sizeof(n->host_id), "%s", n->conf.client.host_id);
	else if (net_host_id(n->host_id, sizeof(n->host_id)) < 0)
		snprintf(n->host_id, sizeof(n->host_id), "%s", n->name);
	if (node_parse_numa(&n->conf, &n->numa_node, n->numa_why, sizeof(n->numa_why), err,
			    errlen) < 0)
		goto out_free;
	if (n->numa_node >= 0) {
		/* This thread and every thread it starts later (loop, scan,
		 * FUSE) run next to the segment's memory. */
		int rc = numa_util_bind_thread(n->numa_node);

		if (rc < 0)
			log_warn("cannot bind threads to NUMA node %d: %s", n->numa_node,
				 strerror(-rc));
	}
	snprintf(n->listen_addr, sizeof(n->listen_addr), "%s", n->conf.node.listen);
	snprintf(n->http_addr, sizeof(n->http_addr), "%s", n->conf.node.http_listen);
	if (!n->conf.cluster.token[0]) {
		bool narrowed = node_loopback_only("[node] listen", n->listen_addr);

		narrowed |= node_loopback_only("[node] http_listen", n->http_addr);
		if (narrowed)
			log_warn("to serve other hosts: 'kvpool token new /etc/kvpool/token' (once, "
				 "copied to every host), then 'token_file = /etc/kvpool/token' "
				 "under [cluster] in %s (or KVPOOL_CLUSTER_TOKEN_FILE)",
				 conf->file[0] ? conf->file : CONF_DEFAULT_FILE);
	}
	if (conf_parse_hostport(n->listen_addr, host, sizeof(host), &port) < 0) {
		snprintf(err, errlen, "[node] listen = %s: expected host:port", n->listen_addr);
		goto out_free;
	}
	snprintf(n->listen_host, sizeof(n->listen_host), "%s", host);

	struct segment_opts so = {
		.size = n->conf.node.segment_size,
		.align = (uint32_t)n->conf.node.align,
		.mode = 0600,
		.gid = (gid_t)-1,
		.populate = n->conf.node.populate,
		.hugepages = n->conf.node.hugepages,
		.numa_node = n->numa_node,
		.reserve = !strcmp(n->conf.node.reserve, "upfront") ? SEG_RESERVE_UPFRONT :
			   !strcmp(n->conf.node.reserve, "none") ? SEG_RESERVE_NONE :
			   SEG_RESERVE_LATER,
		/* A node that removes its segment on exit leaves an orphan if
		 * it is killed instead; one that keeps it leaves it for its
		 * restart. */
		.ephemeral = n->conf.node.remove_segment_on_exit,
		.owner = NULL,		/* the program: kvpool-node, or python3 embedding it */
	};
	if (n->conf.node.segment[0])
		snprintf(n->seg_name, sizeof(n->seg_name), "%s", n->conf.node.segment);
	else
		snprintf(n->seg_name, sizeof(n->seg_name), "kvpool-%s", n->name);
	so.name = n->seg_name;
	if (n->conf.node.shm_group[0]) {
		struct group *g = getgrnam(n->conf.node.shm_group);
		if (!g) {
			snprintf(err, errlen, "[node] shm_group = %s: no such group",
				 n->conf.node.shm_group);
			goto out_free;
		}
		so.gid = g->gr_gid;
		so.mode = 0660;
	}
	if (segment_open(&n->x.seg, &so, false, err, errlen) < 0)
		goto out_free;
	n->shm = node_shm_create(&n->x.seg);
	if (!n->shm) {
		snprintf(err, errlen, "out of memory");
		goto out_segment;
	}
	/* Ours is locked now; what other kvpool processes left behind goes. */
	node_shm_reap(n->shm, clock_now_ms(), 1);
	/* After the segment (and its mbind): registration pins its pages. */
	node_rdma_start(&n->conf, n->x.seg.base, n->x.seg.size,
			n->x.seg.map ? SEG_MAP_OFF : 0, &n->rdma);

	if (n->conf.tls.enabled) {
		n->x.tls_srv = tls_ctx_new(&n->conf, true, err, errlen);
		if (!n->x.tls_srv)
			goto out_segment;
		n->x.tls_cli = tls_ctx_new(&n->conf, false, err, errlen);
		if (!n->x.tls_cli)
			goto out_segment;
	}
	n->x.loop = ev_create();
	if (!n->x.loop) {
		snprintf(err, errlen, "cannot create the event loop");
		goto out_segment;
	}
	ev_on_wake(n->x.loop, node_on_wake, n);
	ev_set_busy_poll(n->x.loop, (int)n->conf.cluster.busy_poll_us);
	ev_set_congestion(n->x.loop, net_cc_parse(n->conf.cluster.tcp_congestion));
	n->data = node_data_create(&n->x, n->listen_addr, n->epoch, n->rdma, err, errlen);
	if (!n->data)
		goto out_loop;
	n->spill = node_spill_create(&n->x);
	if (!n->spill) {
		snprintf(err, errlen, "out of memory");
		goto out_data;
	}
	struct node_mlink_opts mo = {
		.name = n->name,
		.host_id = n->host_id,
		.numa_node = n->numa_node,
		.listen_host = n->listen_host,
		.data_port = node_data_bound_port(n->data),
		.rdma = n->rdma,
		.data = n->data,
		.spill = n->spill,
		.status = node_on_status,
		.mounted = node_mounted,
		.cb_arg = n,
	};
	n->ml = node_master_create(&n->x, &mo);
	if (!n->ml) {
		snprintf(err, errlen, "out of memory");
		goto out_spill;
	}
	if (n->http_addr[0]) {
		struct http_tls htls = { .cert = n->conf.tls.cert, .key = n->conf.tls.key };
		n->http = http_start_tls(n->x.loop, n->http_addr, 4096, node_http, n,
					 n->conf.tls.http ? &htls : NULL, err, errlen);
		if (!n->http)
			goto out_master;
	}
	log_notice("node %s: segment %s (%llu bytes, %s), data on %s port %d", n->name,
		   n->x.seg.path, (unsigned long long)n->x.seg.size,
		   n->x.seg.created ? "created" : "reused", n->listen_addr,
		   node_data_bound_port(n->data));
	if (n->numa_node >= 0 || n->rdma) {
		char numa[200];

		numa_util_describe(n->numa_node, n->numa_why, numa, sizeof(numa));
		log_notice("node %s: NUMA node %s; RDMA %s", n->name, numa,
			   n->rdma ? node_rdma_devices(n->rdma) : "off");
	}
	node_spill_open(n->spill, n->name);	/* failures leave the node memory-only */
	node_data_set_spill(n->data, node_spill_file(n->spill));
	return n;

out_master:
	node_master_destroy(n->ml);
out_spill:
	node_spill_destroy(n->spill);
out_data:
	node_data_destroy(n->data);
out_loop:
	ev_destroy(n->x.loop);
out_segment:
	tls_ctx_free(n->x.tls_cli);
	tls_ctx_free(n->x.tls_srv);
	node_rdma_stop(n->rdma);
	node_shm_destroy(n->shm);
	segment_close(&n->x.seg);
out_free:
	free(n);
	return NULL;
}

void node_destroy(struct node *n)
{
	if (!n)
		return;
	if (n->fs_stopping) {
		pthread_join(n->fs_thread, NULL);
		n->fs = NULL;
	}
	if (n->fs)
		kvfs_stop(n->fs);
	if (n->http)
		http_stop(n->http);
	node_data_stop_accepting(n->data);
	node_master_close(n->ml);
	/* Closes the remaining connections: their callbacks still use the
	 * data server and the master link. */
	ev_destroy(n->x.loop);
	/* Spill I/O still in flight reads the segment and calls back into
	 * the data server and the master link: finish it first. */
	node_spill_close(n->spill);
	node_data_set_spill(n->data, NULL);
	/* Their QPs are gone with them: the regions can go. */
	node_rdma_stop(n->rdma);
	n->rdma = NULL;
	node_master_destroy(n->ml);	/* joins a scan still reading the segment */
	node_data_destroy(n->data);
	node_spill_destroy(n->spill);
	node_shm_destroy(n->shm);	/* stops the reservation between chunks */
	if (n->conf.node.remove_segment_on_exit) {
		log_notice("removing %s (node.remove_segment_on_exit)", n->x.seg.path);
		segment_unlink(&n->x.seg);
	} else {
		segment_close(&n->x.seg);
	}
	tls_ctx_free(n->x.tls_cli);
	tls_ctx_free(n->x.tls_srv);
	node_free_strv(n->conf_files);
	node_free_strv(n->conf_overrides);
	memset(n->conf.cluster.token, 0, sizeof(n->conf.cluster.token));
	free(n);
}

int node_data_port(const struct node *n)
{
	return node_data_bound_port(n->data);
}

int node_http_port(const struct node *n)
{
	return n->http ? http_port(n->http) : 0;
}

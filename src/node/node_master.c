/* node_master: kvpool-node's link to kvpool-master (see node_master.h) —
 * non-blocking connect with backoff, HELLO, MOUNT, REPORT of the scanned
 * extents, HEARTBEAT, the master's FREE, DEMOTE and PROMOTE, and UNMOUNT on
 * shutdown. After any break the segment is scanned again (the scan is the
 * truth) and mounted again. With cluster.master = etcd://h:p;... (HA,
 * docs/ha.md) the master is whichever leader etcd names: a leader_watch
 * thread follows the key and wakes the loop, which moves the link to the
 * new leader (and never to one older than the newest epoch it has seen).
 * Runs on the node's loop thread.
 *
 * Reading order: the state (struct node_mlink), sending, the replies to
 * what we sent (HELLO -> scan -> MOUNT -> REPORTs), the master's requests,
 * then connecting and the lifecycle.
 */
#include "node_master.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "etcd.h"
#include "kvpool.h"
#include "leader.h"
#include "log.h"
#include "node_data.h"
#include "node_rdma.h"
#include "node_scan.h"
#include "node_spill.h"
#include "segmap.h"

#define MLINK_BACKOFF_MIN_MS 100
#define MLINK_BACKOFF_MAX_MS 2000
#define MLINK_CONNECT_TIMEOUT_MS 2000

struct node_mlink {
	struct node_ctx *x;
	struct node_mlink_opts o;	/* strings point into the buffers below */
	char name[CONF_STR], host_id[CONF_STR], listen_host[CONF_STR];

	enum node_mstate mstate;
	int mfd;			/* while connecting */
	struct ev_conn *mconn;
	uint64_t mconn_gen;		/* bumped per master connection */
	uint64_t mreqid;
	uint64_t hello_req, mount_req, unmount_req;
	/* A master with WIRE_HELLO_F_MOUNT_MAP gets the MOUNT, with the
	 * commit map, before the scan: 1 sent, 2 answered (REPORTs once the
	 * scan is done), 0 the MOUNT follows the scan */
	int early;
	uint32_t master_features;	/* of its HELLO reply */
	uint64_t keepalive_req;		/* last HEARTBEAT sent while scanning */
	uint32_t reports_pending;
	uint64_t backoff_ms;
	uint64_t connect_timer, retry_timer;
	struct node_scanner scanner;	/* the segment scan after HELLO */
	struct node_scan scan;		/* a finished scan, until REPORTed */
	uint32_t segment_id;		/* from MOUNT */
	bool mounted_once;
	char advertise[CONF_STR + 16];
	char master_addr[CONF_STR];	/* "ip:port" we last connected to */
	struct node_mlink_stats st;

	/* HA: the leader etcd names (NULL: cluster.master is the address) */
	struct leader_watch *lw;
	char target[CONF_STR];		/* the address this connection went to */
	uint64_t target_epoch;		/* the leader record's epoch for it */
	uint64_t hello_epoch;		/* the connected master's HELLO epoch */
	uint64_t ready_req;		/* the HEARTBEAT behind the REPORTs: its answer
					 * means the master allocates here */
	uint64_t max_epoch;		/* the newest epoch seen: no older leader */
};

/* A FREE whose reply waits for WRITEs still streaming into the freed
 * extents or demotions still copying them: the master reuses the space
 * only after the reply. */
struct mlink_free {
	struct node_wait w;		/* first: done() gets &w */
	struct node_mlink *ml;
	struct wire_hdr req;
	uint64_t mconn_gen;		/* the master connection it came on */
};

static const char *const mstate_names[] = {
	[NODE_M_IDLE] = "down",
	[NODE_M_CONNECTING] = "connecting",
	[NODE_M_HELLO] = "hello",
	[NODE_M_SCAN] = "scanning",
	[NODE_M_MOUNT] = "mounting",
	[NODE_M_UP] = "up",
	[NODE_M_UNMOUNT] = "unmounting",
	[NODE_M_DONE] = "closed",
};

const char *node_master_state_name(enum node_mstate s)
{
	return mstate_names[s];
}

static void mlink_status(struct node_mlink *ml, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void mlink_status(struct node_mlink *ml, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (!ml->o.status)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	ml->o.status(ml->o.cb_arg, buf);
}

/* ---- sending ---- */

static int master_send(struct node_mlink *ml, struct wbuf *b)
{
	if (b->oom || !ml->mconn)
		return -ENOMEM;
	return ev_conn_send(ml->mconn, b->p, b->len);
}

static void master_send_hello(struct node_mlink *ml)
{
	struct wbuf b;

	wb_init(&b);
	size_t st = wire_begin(&b);
	wb_u16(&b, WIRE_ROLE_NODE);
	wb_cstr(&b, ml->x->conf->cluster.token);
	wb_cstr(&b, ml->name);
	wb_cstr(&b, ml->host_id);
	ml->hello_req = ++ml->mreqid;
	wire_finish(&b, st, WIRE_OP_HELLO, 0, 0, ml->hello_req, 0);
	if (master_send(ml, &b) < 0)
		ev_conn_close(ml->mconn);
	wb_free(&b);
}

static void master_send_mount(struct node_mlink *ml, bool with_map)
{
	const struct segment *seg = &ml->x->seg;
	struct wbuf b;
	uint8_t *map = NULL;
	uint64_t map_n = 0;

	wb_init(&b);
	size_t st = wire_begin(&b);
	wb_cstr(&b, ml->name);
	wb_cstr(&b, ml->host_id);
	wb_cstr(&b, seg->path);
	wb_u64(&b, (uint64_t)seg->dev);
	wb_u64(&b, (uint64_t)seg->ino);
	wb_u64(&b, seg->size);
	wb_u64(&b, seg->uuid);
	wb_u64(&b, seg->data_off);	/* format 2: past the commit map */
	wb_u32(&b, seg->align);
	wb_cstr(&b, ml->advertise);
	const void *ri;
	size_t rn;

	node_rdma_blob(ml->o.rdma, &ri, &rn);	/* empty without RDMA */
	wb_blob(&b, ri, rn);
	wb_u64(&b, node_spill_capacity(ml->o.spill));
	wb_i32(&b, ml->o.numa_node);
	/* the commit map (a few MiB at most: one byte per 4 KiB) */
	if (with_map && segmap_copy(seg, &map, &map_n) == 0 &&
	    b.len + map_n + 64 < (uint64_t)ml->x->conf->cluster.max_frame)
		wb_blob(&b, map, map_n);
	free(map);
	ml->mount_req = ++ml->mreqid;
	wire_finish(&b, st, WIRE_OP_MOUNT, 0, 0, ml->mount_req, 0);
	if (master_send(ml, &b) < 0)
		ev_conn_close(ml->mconn);
	wb_free(&b);
}

static int master_send_reports(struct node_mlink *ml)
{
	struct node_scan *s = &ml->scan;
	size_t start = 0;

	for (size_t i = 0; i < s->nchunks; i++) {
		struct wbuf b;

		wb_init(&b);
		size_t st = wire_begin(&b);
		wb_u32(&b, ml->segment_id);
		wb_u32(&b, s->chunk_n[i]);
		wb_bytes(&b, s->items.p + start, s->chunk_end[i] - start);
		wire_finish(&b, st, WIRE_OP_REPORT, 0, 0, ++ml->mreqid, 0);
		int r = master_send(ml, &b);
		wb_free(&b);
		if (r < 0)
			return r;
		start = s->chunk_end[i];
		ml->reports_pending++;
	}
	return 0;
}

void node_master_heartbeat(struct node_mlink *ml)
{
	bool scanning = ml->mstate == NODE_M_SCAN;

	if ((ml->mstate != NODE_M_UP && !scanning) || !ml->mconn)
		return;
	struct wbuf b;

	wb_init(&b);
	size_t st = wire_begin(&b);
	/* While the scan runs the link carries nothing else, and both ends
	 * would call it idle: a heartbeat for no segment (0) is answered
	 * with KVP_ENOSEG, which is all we want. */
	wb_u32(&b, scanning ? 0 : ml->segment_id);
	wb_u64(&b, ml->x->used);
	wb_u64(&b, node_spill_used(ml->o.spill));
	/* what the data server moved over TCP: the master's status page */
	const struct node_data_stats *ds = ml->o.data ? node_data_stats(ml->o.data) : NULL;
	wb_u64(&b, ds ? ds->bytes_read : 0);
	wb_u64(&b, ds ? ds->bytes_written : 0);
	wire_finish(&b, st, WIRE_OP_HEARTBEAT, 0, 0, ++ml->mreqid, 0);
	if (scanning)
		ml->keepalive_req = ml->mreqid;
	if (master_send(ml, &b) == 0)
		ml->st.heartbeats++;
	wb_free(&b);
}

int node_master_unmount(struct node_mlink *ml)
{
	if (ml->mstate != NODE_M_UP || !ml->mconn)
		return -ENOTCONN;
	struct wbuf b;

	wb_init(&b);
	size_t st = wire_begin(&b);
	wb_u32(&b, ml->segment_id);
	wb_u8(&b, 1);			/* drain */
	ml->unmount_req = ++ml->mreqid;
	wire_finish(&b, st, WIRE_OP_UNMOUNT, 0, 0, ml->unmount_req, 0);
	int r = master_send(ml, &b);
	wb_free(&b);
	if (r < 0)
		return r;
	ml->mstate = NODE_M_UNMOUNT;
	return 0;
}

/* ---- replies: HELLO, the scan, MOUNT, REPORT, HEARTBEAT, UNMOUNT ---- */

/* The advertised data endpoint: node.advertise, else the listen address with
 * a wildcard host replaced by our side of the master connection, which is an
 * address the rest of the cluster can route to. */
static void master_set_advertise(struct node_mlink *ml, int fd)
{
	const char *adv = ml->x->conf->node.advertise;
	int port = ml->o.data_port;

	if (adv[0]) {
		snprintf(ml->advertise, sizeof(ml->advertise), "%s", adv);
		return;
	}
	const char *h = ml->listen_host;
	if (h[0] && strcmp(h, "0.0.0.0") != 0 && strcmp(h, "::") != 0) {
		bool v6 = strchr(h, ':') != NULL;
		snprintf(ml->advertise, sizeof(ml->advertise), v6 ? "[%s]:%d" : "%s:%d", h, port);
		return;
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char ip[INET6_ADDRSTRLEN] = "127.0.0.1";
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET) {
			inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip, sizeof(ip));
		} else if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
			if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
				inet_ntop(AF_INET, &s6->sin6_addr.s6_addr[12], ip, sizeof(ip));
			else {
				inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
				snprintf(ml->advertise, sizeof(ml->advertise), "[%s]:%d", ip, port);
				return;
			}
		}
	}
	snprintf(ml->advertise, sizeof(ml->advertise), "%s:%d", ip, port);
}

/* Appends the spill tier's extents (tier 1) to a finished segment scan,
 * from the spill index (the file was read once, at start). Spill work in
 * flight is settled first: a demotion the previous master asked for is
 * then either done and dropped (nobody will answer for it) or never was,
 * so no copy the new master cannot know of gets reported. */
static int master_scan_add_spill(struct node_mlink *ml, struct node_scan *s)
{
	struct node_scan_add a;

	if (!node_spill_file(ml->o.spill))
		return 0;
	node_scan_add_begin(&a, s, 1, ml->x->conf->cluster.max_frame);
	node_spill_foreach(ml->o.spill, node_scan_add_cb, &a);
	int rc = node_scan_add_end(&a);
	log_info("reporting %llu spill extents (%llu bytes)", (unsigned long long)a.added,
		 (unsigned long long)a.added_bytes);
	return rc;
}

static void master_mounted(struct node_mlink *ml);

/* A scan finished (scanner.out, scanner.rc): MOUNT if this connection still
 * waits for it. */
static void master_scan_finish(struct node_mlink *ml)
{
	struct node_scanner *sc = &ml->scanner;

	node_scan_free(&ml->scan);
	ml->scan = sc->out;
	memset(&sc->out, 0, sizeof(sc->out));
	if (ml->mstate != NODE_M_SCAN || !ml->mconn) {
		node_scan_free(&ml->scan);	/* the connection went meanwhile */
		return;
	}
	if (sc->rc < 0) {
		log_err("scan of %s failed: %s", ml->x->seg.path, strerror(-sc->rc));
		node_scan_free(&ml->scan);
		ev_conn_close(ml->mconn);
		return;
	}
	int rc = master_scan_add_spill(ml, &ml->scan);
	if (rc < 0) {
		log_err("listing the spill file failed: %s", strerror(-rc));
		node_scan_free(&ml->scan);
		ev_conn_close(ml->mconn);
		return;
	}
	if (ml->early == 2) {
		master_mounted(ml);
		return;
	}
	ml->mstate = NODE_M_MOUNT;
	if (ml->early != 1)
		master_send_mount(ml, false);	/* else its answer comes */
}

static void master_on_hello(struct node_mlink *ml, const struct wire_hdr *h, const uint8_t *body)
{
	struct node_scanner *sc = &ml->scanner;

	if (h->reqid != ml->hello_req || ml->mstate != NODE_M_HELLO)
		return;
	if (h->status) {
		/* a standby (a failover is running): the watch names the leader */
		if (h->status == KVP_ENOTLEADER && ml->lw)
			log_info("master %s does not lead; following etcd", ml->master_addr);
		else
			log_err("master %s refused HELLO: %s", ml->master_addr,
				kvp_strerror(h->status));
		ml->x->err[WIRE_OP_HELLO]++;
		if (ml->lw)
			leader_watch_refresh(ml->lw);
		ev_conn_close(ml->mconn);
		return;
	}
	struct rbuf r;
	rb_init(&r, body, h->body_len);
	uint64_t epoch = rb_u64(&r);
	if (!rb_ok(&r)) {
		log_err("master %s: malformed HELLO reply", ml->master_addr);
		ev_conn_close(ml->mconn);
		return;
	}
	/* Fencing: a master older than one this node has mounted at lost its
	 * lead (it just does not know yet); its grants would be refused anyway. */
	if (ml->lw && epoch < ml->max_epoch) {
		log_warn("master %s has epoch %llu, older than %llu: not the leader", ml->master_addr,
			 (unsigned long long)epoch, (unsigned long long)ml->max_epoch);
		leader_watch_refresh(ml->lw);
		ev_conn_close(ml->mconn);
		return;
	}
	ml->hello_epoch = epoch;
	if (epoch > ml->max_epoch)
		ml->max_epoch = epoch;
	rb_u16(&r);
	ml->master_features = r.end - r.p >= 4 ? rb_u32(&r) : 0;
	ml->early = 0;
	/* Scan before MOUNT (a master without the map feature): it knows
	 * nothing of this segment yet, so nothing the scan finds can be an
	 * extent it allocated since. A scan still running for an earlier
	 * connection qualifies as well. */
	ml->mstate = NODE_M_SCAN;
	mlink_status(ml, "scanning %s", ml->x->seg.path);
	bool empty = ml->x->seg.created && !ml->mounted_once;
	if ((ml->master_features & WIRE_HELLO_F_MOUNT_MAP) && ml->x->seg.map && !empty) {
		/* A new leader that kept a warm table takes puts once it has
		 * the map, not after the scan; the scan below then finds the
		 * master's new extents too, which it knows and rejects. */
		ml->early = 1;
		master_send_mount(ml, true);
	}
	if (sc->running)
		return;
	sc->max_frame = ml->x->conf->cluster.max_frame;
	if (empty) {
		/* Created by this process and never mounted: nobody had a
		 * grant for it, it holds nothing. Not one page is read. */
		node_scan_free(&sc->out);
		sc->rc = 0;
		log_info("%s was created empty: nothing to scan", ml->x->seg.path);
		master_scan_finish(ml);
		return;
	}
	if (node_scan_start(sc) < 0) {
		/* No thread: scan here, the loop waits. */
		sc->rc = node_scan_segment(&sc->out, sc->seg, sc->max_frame);
		master_scan_finish(ml);
	}
}

void node_master_scan_join(struct node_mlink *ml)
{
	node_scan_join(&ml->scanner);
}

void node_master_scan_done(struct node_mlink *ml)
{
	if (node_scan_finished(&ml->scanner))
		master_scan_finish(ml);
}

static void master_on_mount(struct node_mlink *ml, const struct wire_hdr *h, const uint8_t *body)
{
	struct node_ctx *x = ml->x;

	if (h->reqid != ml->mount_req ||
	    (ml->mstate != NODE_M_MOUNT && !(ml->mstate == NODE_M_SCAN && ml->early == 1)))
		return;
	if (h->status) {
		log_err("master %s refused MOUNT of %s: %s", ml->master_addr, x->seg.path,
			kvp_strerror(h->status));
		x->err[WIRE_OP_MOUNT]++;
		ev_conn_close(ml->mconn);
		return;
	}
	struct rbuf r;
	size_t slen;
	rb_init(&r, body, h->body_len);
	uint32_t segment_id = rb_u32(&r);
	const uint8_t *secret = rb_blob(&r, &slen);
	if (!rb_ok(&r) || slen != WIRE_SECRET_LEN) {
		log_err("master %s: malformed MOUNT reply", ml->master_addr);
		x->err[WIRE_OP_MOUNT]++;
		ev_conn_close(ml->mconn);
		return;
	}
	ml->segment_id = segment_id;
	node_data_set_grant(ml->o.data, segment_id, secret, ml->hello_epoch);
	if (ml->mstate == NODE_M_SCAN) {
		/* mounted with the map: the master may take puts here now;
		 * the REPORTs follow the scan (master_scan_finish) */
		ml->early = 2;
		log_notice("mounted %s at master %s as segment %u with its commit map; "
			   "reporting after the scan", x->seg.path, ml->master_addr, segment_id);
		return;
	}
	master_mounted(ml);
}

/* MOUNT answered and the scan done: REPORTs, then the HEARTBEAT. */
static void master_mounted(struct node_mlink *ml)
{
	struct node_ctx *x = ml->x;
	uint32_t segment_id = ml->segment_id;

	ml->early = 0;
	ml->mstate = NODE_M_UP;
	ml->backoff_ms = MLINK_BACKOFF_MIN_MS;
	x->used = ml->scan.used;
	x->extents = ml->scan.count;
	ml->reports_pending = 0;
	if (ml->mounted_once)
		ml->st.remounts++;
	ml->st.mounts++;
	ml->mounted_once = true;
	log_notice("mounted %s at master %s as segment %u (endpoint %s), reporting %llu extents",
		   x->seg.path, ml->master_addr, segment_id, ml->advertise,
		   (unsigned long long)ml->scan.count);
	ml->st.reported += ml->scan.count;
	ml->st.checksum_mismatches += ml->scan.bad_checksum;
	if (ml->scan.bad_checksum)
		log_warn("%s: %llu extents left out: their values do not match their checksums",
			 x->seg.path, (unsigned long long)ml->scan.bad_checksum);
	int rr = master_send_reports(ml);
	node_scan_free(&ml->scan);
	if (rr < 0) {
		ev_conn_close(ml->mconn);
		return;
	}
	/* A heartbeat right behind the REPORTs tells the master that this
	 * segment has said all it holds: only then does it allocate here (and
	 * a new leader's recovery waits for it). Its answer makes us ready, so
	 * a put right after (an embedded store's) finds the segment open. */
	node_master_heartbeat(ml);
	ml->ready_req = ml->mreqid;
}

static void master_on_report(struct node_mlink *ml, const struct wire_hdr *h, const uint8_t *body)
{
	struct rbuf r;

	if (ml->reports_pending)
		ml->reports_pending--;
	if (h->status) {
		/* A refused chunk leaves those extents unknown to the master;
		 * it may allocate over them, which is what we want for data it
		 * does not list. */
		log_warn("master %s refused a REPORT: %s", ml->master_addr, kvp_strerror(h->status));
		ml->x->err[WIRE_OP_REPORT]++;
	} else {
		rb_init(&r, body, h->body_len);
		uint32_t adopted = rb_u32(&r);
		uint32_t rejected = rb_u32(&r);
		if (rb_ok(&r)) {
			ml->st.report_adopted += adopted;
			ml->st.report_rejected += rejected;
		}
	}
}

static void master_on_heartbeat(struct node_mlink *ml, const struct wire_hdr *h)
{
	if (!h->status && h->reqid == ml->ready_req && ml->ready_req) {
		/* behind every REPORT answer: mounted, and allocated in */
		ml->ready_req = 0;
		if (ml->mstate == NODE_M_UP && ml->o.mounted)
			ml->o.mounted(ml->o.cb_arg);
		return;
	}
	if (!h->status || (ml->keepalive_req && h->reqid <= ml->keepalive_req &&
			   h->reqid > ml->hello_req))
		return;	/* a keepalive of the scan: refused, as meant */
	/* The master no longer knows the segment (it dropped us while we were
	 * stopped or it restarted behind a proxy): mount again from a scan. */
	log_warn("master %s refused a heartbeat: %s; mounting again", ml->master_addr,
		 kvp_strerror(h->status));
	ml->x->err[WIRE_OP_HEARTBEAT]++;
	ev_conn_close(ml->mconn);
}

static void master_on_unmount(struct node_mlink *ml, const struct wire_hdr *h)
{
	if (h->reqid != ml->unmount_req)
		return;
	if (h->status) {
		log_warn("master %s: UNMOUNT: %s", ml->master_addr, kvp_strerror(h->status));
		ml->x->err[WIRE_OP_UNMOUNT]++;
	} else {
		log_notice("unmounted segment %u at master %s", ml->segment_id, ml->master_addr);
	}
	ml->mstate = NODE_M_DONE;
	node_ctx_progress(ml->x);
}

/* ---- the master's requests: FREE, DEMOTE, PROMOTE ---- */

static void mlink_free_done(struct node_wait *w)
{
	struct mlink_free *fw = (struct mlink_free *)w;
	struct node_mlink *ml = fw->ml;

	if (ml->mconn && fw->mconn_gen == ml->mconn_gen)
		ev_conn_reply(ml->mconn, &fw->req, 0, NULL, 0);
	free(fw);
}

static void master_on_free(struct node_mlink *ml, const struct wire_hdr *h, const uint8_t *body)
{
	struct node_ctx *x = ml->x;
	struct rbuf r;

	rb_init(&r, body, h->body_len);
	uint32_t segment_id = rb_u32(&r);
	uint32_t cnt = rb_count(&r, 1 + 8 + 8);
	if (!rb_ok(&r)) {
		x->err[WIRE_OP_FREE]++;
		ev_conn_reply(ml->mconn, h, KVP_EPROTO, NULL, 0);
		return;
	}
	if (segment_id != ml->segment_id || ml->mstate < NODE_M_UP) {
		x->err[WIRE_OP_FREE]++;
		ev_conn_reply(ml->mconn, h, KVP_ENOSEG, NULL, 0);
		return;
	}
	struct mlink_free *fw = calloc(1, sizeof(*fw));
	if (!fw) {
		ev_conn_close(ml->mconn);
		return;
	}
	fw->w.pending = 1;		/* ours, given back after the loop */
	fw->w.done = mlink_free_done;
	fw->ml = ml;
	fw->req = *h;
	fw->mconn_gen = ml->mconn_gen;
	for (uint32_t i = 0; i < cnt; i++) {
		uint8_t tier = rb_u8(&r);
		uint64_t off = rb_u64(&r);
		uint64_t gen = rb_u64(&r);
		bool freed;

		if (tier == 1) {	/* a spill extent: tombstoned on disk first */
			freed = node_spill_free(ml->o.spill, off, gen, &fw->w);
		} else if (tier != 0 || off < x->seg.data_off || off >= x->seg.size) {
			freed = false;
		} else {
			/* A demotion still copying from this extent holds the
			 * reply, and so does a WRITE still streaming into it. */
			node_spill_mem_freed(ml->o.spill, off, gen, &fw->w);
			freed = node_data_free(ml->o.data, off, gen, &fw->w);
		}
		if (freed)
			ml->st.freed++;
		else
			ml->st.free_stale++;
	}
	node_wait_release(&fw->w);
}

/* node_spill_batch's answer: on the connection the request came on, if it
 * is still there. */
static bool mlink_spill_reply(void *arg, uint64_t conn, const struct wire_hdr *req,
			      const void *body, size_t len)
{
	struct node_mlink *ml = arg;

	if (!ml->mconn || conn != ml->mconn_gen)
		return false;
	if (!body)
		ev_conn_close(ml->mconn);
	else
		ev_conn_reply(ml->mconn, req, 0, body, len);
	return true;
}

static void master_on_dreq(struct node_mlink *ml, const struct wire_hdr *h, const uint8_t *body,
			   bool demote)
{
	struct rbuf r;

	rb_init(&r, body, h->body_len);
	uint32_t segment_id = rb_u32(&r);
	uint32_t cnt = rb_count(&r, demote ? 16 : 32);
	if (!rb_ok(&r)) {
		ml->x->err[h->opcode]++;
		ev_conn_reply(ml->mconn, h, KVP_EPROTO, NULL, 0);
		return;
	}
	if (segment_id != ml->segment_id || ml->mstate < NODE_M_UP) {
		ml->x->err[h->opcode]++;
		ev_conn_reply(ml->mconn, h, KVP_ENOSEG, NULL, 0);
		return;
	}
	if (node_spill_batch(ml->o.spill, demote, h, &r, cnt, ml->mconn_gen, mlink_spill_reply,
			     ml) < 0)
		ev_conn_reply(ml->mconn, h, KVP_ENOMEM, NULL, 0);
}

static int master_on_frame(struct ev_conn *c, const struct wire_hdr *h, const uint8_t *body)
{
	struct node_mlink *ml = ev_conn_udata(c);

	if (h->payload_len)
		ev_conn_discard_payload(c);
	if (!(h->flags & WIRE_F_REPLY)) {
		if (h->opcode < WIRE_OP_MAX)
			ml->x->req[h->opcode]++;
		if (h->opcode == WIRE_OP_FREE)
			master_on_free(ml, h, body);
		else if (h->opcode == WIRE_OP_DEMOTE)
			master_on_dreq(ml, h, body, true);
		else if (h->opcode == WIRE_OP_PROMOTE)
			master_on_dreq(ml, h, body, false);
		else
			ev_conn_reply(c, h, KVP_ENOTSUP, NULL, 0);
		return 0;
	}
	switch (h->opcode) {
	case WIRE_OP_HELLO:
		master_on_hello(ml, h, body);
		break;
	case WIRE_OP_MOUNT:
		master_on_mount(ml, h, body);
		break;
	case WIRE_OP_REPORT:
		master_on_report(ml, h, body);
		break;
	case WIRE_OP_HEARTBEAT:
		master_on_heartbeat(ml, h);
		break;
	case WIRE_OP_UNMOUNT:
		master_on_unmount(ml, h);
		break;
	default:
		break;
	}
	return 0;
}

/* ---- connecting ---- */

static void master_retry_cb(struct ev_loop *loop, void *arg)
{
	struct node_mlink *ml = arg;

	ml->retry_timer = 0;
	node_master_start(ml);
}

static void master_schedule_retry(struct node_mlink *ml)
{
	if (ml->x->stopping) {
		ml->mstate = NODE_M_DONE;
		node_ctx_progress(ml->x);
		return;
	}
	ml->mstate = NODE_M_IDLE;
	if (!ml->retry_timer)
		ml->retry_timer = ev_timer_add(ml->x->loop, ml->backoff_ms, false, master_retry_cb,
					       ml);
	ml->backoff_ms *= 2;
	if (ml->backoff_ms > MLINK_BACKOFF_MAX_MS)
		ml->backoff_ms = MLINK_BACKOFF_MAX_MS;
}

static void master_on_close(struct ev_conn *c)
{
	struct node_mlink *ml = ev_conn_udata(c);
	enum node_mstate was = ml->mstate;

	ml->mconn = NULL;
	ml->reports_pending = 0;
	ml->ready_req = 0;
	node_scan_free(&ml->scan);
	if (was == NODE_M_UP) {
		log_warn("lost the master connection to %s; mounting again when it is back",
			 ml->master_addr);
		mlink_status(ml, "master %s down, reconnecting", ml->x->conf->cluster.master);
	} else if (was == NODE_M_UNMOUNT) {
		log_warn("master %s closed before answering UNMOUNT", ml->master_addr);
	}
	if (was == NODE_M_DONE)
		return;
	ml->st.master_failures++;
	if (ml->lw) {
		/* the leader is gone or changed: ask etcd, try again soon */
		leader_watch_refresh(ml->lw);
		ml->backoff_ms = MLINK_BACKOFF_MIN_MS;
	}
	master_schedule_retry(ml);
}

static const struct ev_conn_ops master_ops = {
	.on_frame = master_on_frame,
	.on_close = master_on_close,
};

static void master_connected(struct node_mlink *ml, int fd)
{
	const struct kvp_conf *conf = ml->x->conf;
	int one = 1;
	uint64_t ttl = conf->master.client_ttl;
	uint64_t hb = conf->node.heartbeat_interval;
	uint64_t max_frame = conf->cluster.max_frame;
	/* A master that answers nothing for this long is as good as gone. */
	uint64_t idle = ttl > 3 * hb ? ttl : 3 * hb;
	struct ev_conn_limits lim = {
		.max_body = max_frame && max_frame < UINT32_MAX ? (uint32_t)max_frame : UINT32_MAX,
		.max_payload = 4096,
		.idle_ms = idle > 5000 ? idle : 5000,
	};

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	master_set_advertise(ml, fd);
	ml->mconn = ev_conn_create(ml->x->loop, fd, &master_ops, &lim, ml);
	if (!ml->mconn) {
		ml->st.master_failures++;
		master_schedule_retry(ml);
		return;
	}
	ml->mconn_gen++;
	ml->st.master_connects++;
	ml->mstate = NODE_M_HELLO;
	if (ml->x->tls_cli && ev_conn_start_tls(ml->mconn, ml->x->tls_cli) < 0) {
		ev_conn_close(ml->mconn);	/* master_on_close retries */
		return;
	}
	log_info("connected to master %s", ml->master_addr);
	master_send_hello(ml);
}

static void master_connect_fail(struct node_mlink *ml, const char *what, int err)
{
	/* The first failure is worth a notice; the retries every 2 s are not. */
	if (ml->backoff_ms <= MLINK_BACKOFF_MIN_MS || log_enabled(LOG_INFO))
		log_msg(ml->backoff_ms <= MLINK_BACKOFF_MIN_MS ? LOG_NOTICE : LOG_INFO,
			"master %s: %s: %s", ml->lw ? ml->target : ml->x->conf->cluster.master, what,
			strerror(err));
	ml->st.master_failures++;
	if (ml->lw)
		leader_watch_refresh(ml->lw);
	master_schedule_retry(ml);
}

static void master_connect_abort(struct node_mlink *ml)
{
	if (ml->connect_timer) {
		ev_timer_del(ml->x->loop, ml->connect_timer);
		ml->connect_timer = 0;
	}
	if (ml->mfd >= 0) {
		ev_del_fd(ml->x->loop, ml->mfd);
		close(ml->mfd);
		ml->mfd = -1;
	}
}

static void master_on_connect_ready(struct ev_loop *loop, int fd, uint32_t events, void *arg)
{
	struct node_mlink *ml = arg;
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err == 0 && !(events & EPOLLOUT))
		err = ECONNREFUSED;
	ev_timer_del(loop, ml->connect_timer);
	ml->connect_timer = 0;
	ev_del_fd(loop, fd);
	ml->mfd = -1;
	if (err) {
		close(fd);
		master_connect_fail(ml, "connect", err);
		return;
	}
	master_connected(ml, fd);
}

static void master_on_connect_timeout(struct ev_loop *loop, void *arg)
{
	struct node_mlink *ml = arg;

	ml->connect_timer = 0;
	master_connect_abort(ml);
	master_connect_fail(ml, "connect", ETIMEDOUT);
}

void node_master_start(struct node_mlink *ml)
{
	const char *master = ml->x->conf->cluster.master;
	char host[CONF_STR], portstr[8];
	uint16_t port;
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai = NULL;

	if (ml->x->stopping || ml->mconn || ml->mfd >= 0)
		return;
	if (ml->lw) {
		struct leader_rec r;
		uint64_t epoch;
		if (leader_watch_get(ml->lw, &r, &epoch) < 0 || epoch < ml->max_epoch) {
			/* no leader yet: the watch wakes us when there is one */
			mlink_status(ml, "waiting for a master leader in etcd");
			ml->mstate = NODE_M_IDLE;
			return;
		}
		snprintf(ml->target, sizeof(ml->target), "%s", r.rpc);
		ml->target_epoch = epoch;
		master = ml->target;
	}
	ml->mstate = NODE_M_CONNECTING;
	if (conf_parse_hostport(master, host, sizeof(host), &port) < 0) {
		master_connect_fail(ml, "bad address", EINVAL);
		return;
	}
	snprintf(portstr, sizeof(portstr), "%u", port);
	/* Resolution blocks; a numeric address or /etc/hosts name costs nothing. */
	int gr = getaddrinfo(host[0] ? host : "127.0.0.1", portstr, &hints, &ai);
	if (gr != 0) {
		log_notice("master %s: %s", master, gai_strerror(gr));
		ml->st.master_failures++;
		master_schedule_retry(ml);
		return;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int err = errno;
		freeaddrinfo(ai);
		master_connect_fail(ml, "socket", err);
		return;
	}
	char ip[INET6_ADDRSTRLEN] = "?";
	if (ai->ai_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, ip, sizeof(ip));
	else if (ai->ai_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr, ip, sizeof(ip));
	snprintf(ml->master_addr, sizeof(ml->master_addr),
		 ai->ai_family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, port);
	int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
	int err = errno;
	freeaddrinfo(ai);
	if (r == 0) {
		master_connected(ml, fd);
		return;
	}
	if (err != EINPROGRESS) {
		close(fd);
		master_connect_fail(ml, "connect", err);
		return;
	}
	if (ev_add_fd(ml->x->loop, fd, EPOLLOUT, master_on_connect_ready, ml) < 0) {
		close(fd);
		master_connect_fail(ml, "connect", ENOMEM);
		return;
	}
	ml->mfd = fd;
	ml->connect_timer = ev_timer_add(ml->x->loop, MLINK_CONNECT_TIMEOUT_MS, false,
					 master_on_connect_timeout, ml);
}

int node_master_adopt(struct node_mlink *ml, int fd, uint32_t segment_id,
		      const uint8_t secret[WIRE_SECRET_LEN])
{
	struct ev_conn_limits lim = { .max_body = 1u << 20, .max_payload = 4096 };

	ml->mconn = ev_conn_create(ml->x->loop, fd, &master_ops, &lim, ml);
	if (!ml->mconn)
		return -ENOMEM;
	ml->mconn_gen++;
	ml->segment_id = segment_id;
	node_data_set_grant(ml->o.data, segment_id, secret, 0);
	ml->mstate = NODE_M_UP;
	snprintf(ml->master_addr, sizeof(ml->master_addr), "adopted");
	return 0;
}

/* The leader etcd names changed (or etcd was asked again): a link to
 * another master (or an older epoch) is closed and opened to the leader. */
static void mlink_on_leader(struct ev_loop *loop, int fd, uint32_t events, void *arg)
{
	struct node_mlink *ml = arg;
	struct leader_rec r;
	uint64_t epoch;

	(void)loop;
	(void)fd;
	(void)events;
	leader_watch_ack(ml->lw);
	if (ml->x->stopping || ml->mstate == NODE_M_DONE || ml->mstate == NODE_M_UNMOUNT)
		return;
	if (leader_watch_get(ml->lw, &r, &epoch) < 0)
		return;		/* none now: stay with the one we have until it goes */
	bool linked = ml->mconn || ml->mfd >= 0;
	if (linked && strcmp(r.rpc, ml->target) == 0 && epoch == ml->target_epoch)
		return;
	if (linked) {
		log_notice("master leader is now %s (%s, epoch %llu); moving there", r.rpc, r.name,
			   (unsigned long long)epoch);
		master_connect_abort(ml);
		if (ml->mconn)
			ev_conn_close(ml->mconn);	/* on_close schedules the retry */
	}
	ml->backoff_ms = MLINK_BACKOFF_MIN_MS;
	if (ml->retry_timer) {
		ev_timer_del(ml->x->loop, ml->retry_timer);
		ml->retry_timer = 0;
	}
	if (!ml->mconn && ml->mfd < 0)
		node_master_start(ml);
}

void node_master_close(struct node_mlink *ml)
{
	master_connect_abort(ml);
	if (ml->retry_timer) {
		ev_timer_del(ml->x->loop, ml->retry_timer);
		ml->retry_timer = 0;
	}
	ml->mstate = NODE_M_DONE;
	if (ml->mconn)
		ev_conn_close(ml->mconn);
	node_scan_free(&ml->scan);
	if (ml->lw)
		ev_del_fd(ml->x->loop, leader_watch_fd(ml->lw));
}

/* ---- lifecycle, accessors ---- */

struct node_mlink *node_master_create(struct node_ctx *x, const struct node_mlink_opts *o)
{
	struct node_mlink *ml = calloc(1, sizeof(*ml));

	if (!ml)
		return NULL;
	ml->x = x;
	ml->o = *o;
	snprintf(ml->name, sizeof(ml->name), "%s", o->name ? o->name : "");
	snprintf(ml->host_id, sizeof(ml->host_id), "%s", o->host_id ? o->host_id : "");
	snprintf(ml->listen_host, sizeof(ml->listen_host), "%s",
		 o->listen_host ? o->listen_host : "");
	ml->o.name = ml->name;
	ml->o.host_id = ml->host_id;
	ml->o.listen_host = ml->listen_host;
	ml->mfd = -1;
	ml->backoff_ms = MLINK_BACKOFF_MIN_MS;
	ml->scanner.seg = &x->seg;
	ml->scanner.loop = x->loop;
	atomic_init(&ml->scanner.done, false);
	if (etcd_is_url(x->conf->cluster.master)) {
		char err[256];
		struct etcd_tls tls;

		etcd_tls_from(&tls, x->conf);
		ml->lw = leader_watch_start(x->conf->cluster.master, &tls, x->conf->master.cluster_id,
					    err, sizeof(err));
		if (!ml->lw) {
			log_err("cluster.master %s: %s", x->conf->cluster.master, err);
			free(ml);
			return NULL;
		}
		if (ev_add_fd(x->loop, leader_watch_fd(ml->lw), EPOLLIN, mlink_on_leader, ml) < 0) {
			leader_watch_stop(ml->lw);
			free(ml);
			return NULL;
		}
		log_notice("following the master leader of cluster %s in etcd %s",
			   x->conf->master.cluster_id, x->conf->cluster.master);
	}
	return ml;
}

void node_master_destroy(struct node_mlink *ml)
{
	if (!ml)
		return;
	leader_watch_stop(ml->lw);
	node_scan_join(&ml->scanner);
	node_scan_free(&ml->scan);
	free(ml);
}

enum node_mstate node_master_state(const struct node_mlink *ml)
{
	return ml->mstate;
}

uint32_t node_master_segment_id(const struct node_mlink *ml)
{
	return ml->segment_id;
}

const char *node_master_addr(const struct node_mlink *ml)
{
	return ml->master_addr;
}

const char *node_master_advertise(const struct node_mlink *ml)
{
	return ml->advertise;
}

const struct node_mlink_stats *node_master_stats(const struct node_mlink *ml)
{
	return &ml->st;
}

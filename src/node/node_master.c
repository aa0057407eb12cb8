/* node_master: kvpool-node's link to kvpool-master — non-blocking connect
 * with backoff, HELLO, MOUNT, REPORT of the scanned extents, HEARTBEAT,
 * answering FREE (tombstones) and UNMOUNT on shutdown. After any break the
 * segment is scanned again (the scan is the truth) and mounted again. Runs on
 * the node's loop thread.
 */
#include "node_i.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "extent.h"
#include "kvpool.h"
#include "log.h"
#include "net.h"
#include "node_rdma.h"

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

const char *node_mstate_name(enum node_mstate s)
{
	return mstate_names[s];
}

/* ---- segment scan -> REPORT items ---- */

void node_scan_free(struct node_scan *s)
{
	wb_free(&s->items);
	free(s->chunk_end);
	free(s->chunk_n);
	memset(s, 0, sizeof(*s));
}

struct scan_ctx {
	struct node_scan *s;
	size_t max_bytes;		/* REPORT body budget per frame */
	uint8_t tier;			/* of the extents being listed */
	size_t cur_start;
	uint32_t cur_n;
	int err;
};

static int scan_close_chunk(struct scan_ctx *x)
{
	struct node_scan *s = x->s;

	if (!x->cur_n)
		return 0;
	if (s->nchunks == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		size_t *e = realloc(s->chunk_end, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		s->chunk_end = e;
		uint32_t *c = realloc(s->chunk_n, cap * sizeof(*c));
		if (!c)
			return -ENOMEM;
		s->chunk_n = c;
		s->cap = cap;
	}
	s->chunk_end[s->nchunks] = s->items.len;
	s->chunk_n[s->nchunks] = x->cur_n;
	s->nchunks++;
	x->cur_start = s->items.len;
	x->cur_n = 0;
	return 0;
}

static int scan_cb(const struct ext_found *f, void *arg)
{
	struct scan_ctx *x = arg;
	struct node_scan *s = x->s;

	if (!f->checksum_ok || !wire_key_ok(f->key, f->h.key_len))
		return 0;
	size_t item = 2 + f->h.key_len + 1 + 6 * 8;
	if (x->cur_n == NODE_REPORT_CHUNK || s->items.len - x->cur_start + item > x->max_bytes) {
		x->err = scan_close_chunk(x);
		if (x->err)
			return 1;
	}
	/* The key is copied now: local clients may reuse the space later. */
	wb_str(&s->items, f->key, f->h.key_len);
	wb_u8(&s->items, x->tier);	/* 0 segment, 1 spill file */
	wb_u64(&s->items, f->off);
	wb_u64(&s->items, f->alloc_len);
	wb_u64(&s->items, f->h.value_len);
	wb_u64(&s->items, f->h.value_checksum);
	wb_u64(&s->items, f->h.generation);
	wb_u64(&s->items, f->h.put_time_ns);
	if (s->items.oom) {
		x->err = -ENOMEM;
		return 1;
	}
	x->cur_n++;
	s->count++;
	s->used += f->alloc_len;
	return 0;
}

int node_scan_segment(struct node *n, struct node_scan *s)
{
	struct scan_ctx x = { .s = s, .max_bytes = NODE_REPORT_BYTES };
	/* The master refuses bodies over cluster.max_frame (a shared key). */
	uint64_t mf = n->conf.cluster.max_frame;
	if (mf && mf - 8 < x.max_bytes)
		x.max_bytes = (size_t)(mf - 8);	/* segment id + count */

	node_scan_free(s);
	uint64_t t0 = net_now_ms();
	ext_scan(n->seg.base, SEG_DATA_OFF, n->seg.size, n->seg.align, n->seg.uuid,
		 n->seg.size, false, scan_cb, &x);
	if (!x.err)
		x.err = scan_close_chunk(&x);
	if (x.err) {
		node_scan_free(s);
		return x.err;
	}
	log_info("scanned %s: %llu extents, %llu bytes in %llu ms", n->seg.path,
		 (unsigned long long)s->count, (unsigned long long)s->used,
		 (unsigned long long)(net_now_ms() - t0));
	return 0;
}

/* Appends the spill tier's extents (tier 1) to a finished segment scan,
 * from the spill index (the file was read once, at start). Spill work in
 * flight is settled first: a demotion the previous master asked for is
 * then either done and dropped (nobody will answer for it) or never was,
 * so no copy the new master cannot know of gets reported. Loop thread. */
int node_scan_add_spill(struct node *n, struct node_scan *s)
{
	if (!n->spill)
		return 0;
	struct scan_ctx x = { .s = s, .max_bytes = NODE_REPORT_BYTES, .tier = 1 };
	uint64_t mf = n->conf.cluster.max_frame;
	if (mf && mf - 8 < x.max_bytes)
		x.max_bytes = (size_t)(mf - 8);
	uint64_t count = s->count, used = s->used;

	spill_wait_idle(n->spill);
	x.cur_start = s->items.len;
	node_spill_foreach(n, scan_cb, &x);
	if (!x.err)
		x.err = scan_close_chunk(&x);
	log_info("reporting %llu spill extents (%llu bytes)",
		 (unsigned long long)(s->count - count), (unsigned long long)(s->used - used));
	/* count/used describe the segment (the node's memory accounting) */
	s->count = count;
	s->used = used;
	return x.err;
}

/* ---- sending ---- */

static int master_send(struct node *n, struct wbuf *b)
{
	if (b->oom || !n->mconn)
		return -ENOMEM;
	return ev_conn_send(n->mconn, b->p, b->len);
}

static void master_send_hello(struct node *n)
{
	struct wbuf b;

	wb_init(&b);
	size_t st = wire_begin(&b);
	wb_u16(&b, WIRE_ROLE_NODE);
	wb_cstr(&b, n->conf.cluster.token);
	wb_cstr(&b, n->name);
	wb_cstr(&b, n->host_id);
	n->hello_req = ++n->mreqid;
	wire_finish(&b, st, WIRE_OP_HELLO, 0, 0, n->hello_req, 0);
	if (master_send(n, &b) < 0)
		ev_conn_close(n->mconn);
	wb_free(&b);
}

static void master_send_mount(struct node *n)
{
	struct wbuf b;

	wb_init(&b);
	size_t st = wire_begin(&b);
	wb_cstr(&b, n->name);
	wb_cstr(&b, n->host_id);
	wb_cstr(&b, n->seg.path);
	wb_u64(&b, (uint64_t)n->seg.dev);
	wb_u64(&b, (uint64_t)n->seg.ino);
	wb_u64(&b, n->seg.size);
	wb_u64(&b, n->seg.uuid);
	wb_u64(&b, SEG_DATA_OFF);
	wb_u32(&b, n->seg.align);
	wb_cstr(&b, n->advertise);
	const void *ri;
	size_t rn;

	node_rdma_blob(n->rdma, &ri, &rn);	/* empty without RDMA */
	wb_blob(&b, ri, rn);
	wb_u64(&b, node_spill_capacity(n));
	wb_i32(&b, n->numa_node);
	n->mount_req = ++n->mreqid;
	wire_finish(&b, st, WIRE_OP_MOUNT, 0, 0, n->mount_req, 0);
	if (master_send(n, &b) < 0)
		ev_conn_close(n->mconn);
	wb_free(&b);
}

static int master_send_reports(struct node *n)
{
	struct node_scan *s = &n->scan;
	size_t start = 0;

	for (size_t i = 0; i < s->nchunks; i++) {
		struct wbuf b;

		wb_init(&b);
		size_t st = wire_begin(&b);
		wb_u32(&b, n->segment_id);
		wb_u32(&b, s->chunk_n[i]);
		wb_bytes(&b, s->items.p + start, s->chunk_end[i] - start);
		wire_finish(&b, st, WIRE_OP_REPORT, 0, 0, ++n->mreqid, 0);
		int r = master_send(n, &b);
		wb_free(&b);
		if (r < 0)
			return r;
		start = s->chunk_end[i];
		n->reports_pending++;
	}
	return 0;
}

void node_master_heartbeat(struct node *n)
{
	if (n->mstate != NODE_M_UP || !n->mconn)
		return;
	struct wbuf b;

	wb_init(&b);
	size_t st = wire_begin(&b);
	wb_u32(&b, n->segment_id);
	wb_u64(&b, n->used);
	wb_u64(&b, node_spill_used(n));
	wire_finish(&b, st, WIRE_OP_HEARTBEAT, 0, 0, ++n->mreqid, 0);
	if (master_send(n, &b) == 0)
		n->st.heartbeats++;
	wb_free(&b);
}

int node_master_unmount(struct node *n)
{
	if (n->mstate != NODE_M_UP || !n->mconn)
		return -ENOTCONN;
	struct wbuf b;

	wb_init(&b);
	size_t st = wire_begin(&b);
	wb_u32(&b, n->segment_id);
	wb_u8(&b, 1);			/* drain */
	n->unmount_req = ++n->mreqid;
	wire_finish(&b, st, WIRE_OP_UNMOUNT, 0, 0, n->unmount_req, 0);
	int r = master_send(n, &b);
	wb_free(&b);
	if (r < 0)
		return r;
	n->mstate = NODE_M_UNMOUNT;
	return 0;
}

/* ---- receiving ---- */

/* The advertised data endpoint: node.advertise, else the listen address with
 * a wildcard host replaced by our side of the master connection, which is an
 * address the rest of the cluster can route to. */
static void master_set_advertise(struct node *n, int fd)
{
	if (n->conf.node.advertise[0]) {
		snprintf(n->advertise, sizeof(n->advertise), "%s", n->conf.node.advertise);
		return;
	}
	const char *h = n->listen_host;
	if (h[0] && strcmp(h, "0.0.0.0") != 0 && strcmp(h, "::") != 0) {
		bool v6 = strchr(h, ':') != NULL;
		snprintf(n->advertise, sizeof(n->advertise), v6 ? "[%s]:%d" : "%s:%d", h,
			 n->data_port);
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
				snprintf(n->advertise, sizeof(n->advertise), "[%s]:%d", ip,
					 n->data_port);
				return;
			}
		}
	}
	snprintf(n->advertise, sizeof(n->advertise), "%s:%d", ip, n->data_port);
}

/* A scan finished (scan_out, scan_rc): MOUNT if this connection still
 * waits for it. */
static void master_scan_finish(struct node *n)
{
	node_scan_free(&n->scan);
	n->scan = n->scan_out;
	memset(&n->scan_out, 0, sizeof(n->scan_out));
	if (n->mstate != NODE_M_SCAN || !n->mconn) {
		node_scan_free(&n->scan);	/* the connection went meanwhile */
		return;
	}
	if (n->scan_rc < 0) {
		log_err("scan of %s failed: %s", n->seg.path, strerror(-n->scan_rc));
		node_scan_free(&n->scan);
		ev_conn_close(n->mconn);
		return;
	}
	int rc = node_scan_add_spill(n, &n->scan);
	if (rc < 0) {
		log_err("listing the spill file failed: %s", strerror(-rc));
		node_scan_free(&n->scan);
		ev_conn_close(n->mconn);
		return;
	}
	n->mstate = NODE_M_MOUNT;
	master_send_mount(n);
}

static void master_on_hello(struct node *n, const struct wire_hdr *h, const uint8_t *body)
{
	if (h->reqid != n->hello_req || n->mstate != NODE_M_HELLO)
		return;
	if (h->status) {
		log_err("master %s refused HELLO: %s", n->master_addr, kvp_strerror(h->status));
		n->st.err[WIRE_OP_HELLO]++;
		ev_conn_close(n->mconn);
		return;
	}
	/* Scan before MOUNT: the master knows nothing of this segment yet, so
	 * nothing the scan finds can be an extent it allocated since. A scan
	 * still running for an earlier connection qualifies as well. */
	n->mstate = NODE_M_SCAN;
	node_status(n, "scanning %s", n->seg.path);
	if (!n->scan_running && node_scan_start(n) < 0) {
		/* No thread: scan here, the loop waits. */
		n->scan_rc = node_scan_segment(n, &n->scan_out);
		master_scan_finish(n);
	}
}

static void *scan_thread(void *arg)
{
	struct node *n = arg;

	n->scan_rc = node_scan_segment(n, &n->scan_out);
	atomic_store(&n->scan_done, true);
	ev_wake(n->loop);
	return NULL;
}

int node_scan_start(struct node *n)
{
	atomic_store(&n->scan_done, false);
	if (pthread_create(&n->scan_th, NULL, scan_thread, n) != 0)
		return -EAGAIN;
	n->scan_running = true;
	return 0;
}

void node_master_scan_join(struct node *n)
{
	if (!n->scan_running)
		return;
	pthread_join(n->scan_th, NULL);
	n->scan_running = false;
	node_scan_free(&n->scan_out);
}

void node_master_scan_done(struct node *n)
{
	if (!n->scan_running || !atomic_load(&n->scan_done))
		return;
	pthread_join(n->scan_th, NULL);
	n->scan_running = false;
	master_scan_finish(n);
}

static void master_on_mount(struct node *n, const struct wire_hdr *h, const uint8_t *body)
{
	if (h->reqid != n->mount_req || n->mstate != NODE_M_MOUNT)
		return;
	if (h->status) {
		log_err("master %s refused MOUNT of %s: %s", n->master_addr, n->seg.path,
			kvp_strerror(h->status));
		n->st.err[WIRE_OP_MOUNT]++;
		ev_conn_close(n->mconn);
		return;
	}
	struct rbuf r;
	size_t slen;
	rb_init(&r, body, h->body_len);
	uint32_t segment_id = rb_u32(&r);
	const uint8_t *secret = rb_blob(&r, &slen);
	if (!rb_ok(&r) || slen != WIRE_SECRET_LEN) {
		log_err("master %s: malformed MOUNT reply", n->master_addr);
		n->st.err[WIRE_OP_MOUNT]++;
		ev_conn_close(n->mconn);
		return;
	}
	n->segment_id = segment_id;
	memcpy(n->secret, secret, WIRE_SECRET_LEN);
	n->have_secret = true;
	n->mstate = NODE_M_UP;
	n->backoff_ms = NODE_BACKOFF_MIN_MS;
	n->used = n->scan.used;
	n->extents = n->scan.count;
	n->reports_pending = 0;
	if (n->mounted_once)
		n->st.remounts++;
	n->st.mounts++;
	n->mounted_once = true;
	log_notice("mounted %s at master %s as segment %u (endpoint %s), reporting %llu extents",
		   n->seg.path, n->master_addr, segment_id, n->advertise,
		   (unsigned long long)n->scan.count);
	n->st.reported += n->scan.count;
	int rr = master_send_reports(n);
	node_scan_free(&n->scan);
	if (rr < 0) {
		ev_conn_close(n->mconn);
		return;
	}
	if (!n->reports_pending)
		node_mounted(n);
}

static void master_on_report(struct node *n, const struct wire_hdr *h, const uint8_t *body)
{
	struct rbuf r;

	if (n->reports_pending)
		n->reports_pending--;
	if (h->status) {
		/* A refused chunk leaves those extents unknown to the master;
		 * it may allocate over them, which is what we want for data it
		 * does not list. */
		log_warn("master %s refused a REPORT: %s", n->master_addr, kvp_strerror(h->status));
		n->st.err[WIRE_OP_REPORT]++;
	} else {
		rb_init(&r, body, h->body_len);
		uint32_t adopted = rb_u32(&r);
		uint32_t rejected = rb_u32(&r);
		if (rb_ok(&r)) {
			n->st.report_adopted += adopted;
			n->st.report_rejected += rejected;
		}
	}
	if (!n->reports_pending && n->mstate == NODE_M_UP)
		node_mounted(n);
}

static void master_on_heartbeat(struct node *n, const struct wire_hdr *h)
{
	if (!h->status)
		return;
	/* The master no longer knows the segment (it dropped us while we were
	 * stopped or it restarted behind a proxy): mount again from a scan. */
	log_warn("master %s refused a heartbeat: %s; mounting again", n->master_addr,
		 kvp_strerror(h->status));
	n->st.err[WIRE_OP_HEARTBEAT]++;
	ev_conn_close(n->mconn);
}

static void master_on_unmount(struct node *n, const struct wire_hdr *h)
{
	if (h->reqid != n->unmount_req)
		return;
	if (h->status) {
		log_warn("master %s: UNMOUNT: %s", n->master_addr, kvp_strerror(h->status));
		n->st.err[WIRE_OP_UNMOUNT]++;
	} else {
		log_notice("unmounted segment %u at master %s", n->segment_id, n->master_addr);
	}
	n->mstate = NODE_M_DONE;
	node_drain_step(n);
}

void node_master_free_done(struct node *n, struct node_fwait *fw)
{
	if (n->mconn && fw->mconn_gen == n->mconn_gen)
		ev_conn_reply(n->mconn, &fw->req, 0, NULL, 0);
	free(fw);
}

static void master_on_free(struct node *n, const struct wire_hdr *h, const uint8_t *body)
{
	struct rbuf r;

	rb_init(&r, body, h->body_len);
	uint32_t segment_id = rb_u32(&r);
	uint32_t cnt = rb_count(&r, 1 + 8 + 8);
	if (!rb_ok(&r)) {
		n->st.err[WIRE_OP_FREE]++;
		ev_conn_reply(n->mconn, h, KVP_EPROTO, NULL, 0);
		return;
	}
	if (segment_id != n->segment_id || n->mstate < NODE_M_UP) {
		n->st.err[WIRE_OP_FREE]++;
		ev_conn_reply(n->mconn, h, KVP_ENOSEG, NULL, 0);
		return;
	}
	struct node_fwait *fw = calloc(1, sizeof(*fw));
	if (!fw) {
		ev_conn_close(n->mconn);
		return;
	}
	fw->req = *h;
	fw->mconn_gen = n->mconn_gen;
	for (uint32_t i = 0; i < cnt; i++) {
		uint8_t tier = rb_u8(&r);
		uint64_t off = rb_u64(&r);
		uint64_t gen = rb_u64(&r);
		if (tier == 1) {	/* a spill extent: tombstoned on disk first */
			if (node_spill_free(n, off, gen, fw))
				n->st.freed++;
			else
				n->st.free_stale++;
			continue;
		}
		if (tier != 0 || off < SEG_DATA_OFF || off >= n->seg.size) {
			n->st.free_stale++;
			continue;
		}
		/* A demotion still copying from this extent holds the reply. */
		node_spill_mem_freed(n, off, gen, fw);
		if (node_data_freed(n, off, gen, fw)) {
			n->st.freed++;	/* killed when its payload is in */
			continue;
		}
		struct ext_hdr eh;
		const uint8_t *key;
		uint8_t *at = (uint8_t *)n->seg.base + off;
		/* Only the extent the master means: a header that decodes with
		 * its generation. Anything else was already reused or killed. */
		if (ext_decode(at, n->seg.size - off, n->seg.size, &eh, &key) == 0 &&
		    eh.generation == gen && eh.seg_uuid == n->seg.uuid) {
			uint64_t len = ext_size(eh.key_len, eh.value_len);
			len = (len + n->seg.align - 1) & ~(uint64_t)(n->seg.align - 1);
			ext_tombstone(at);
			n->used = n->used > len ? n->used - len : 0;
			if (n->extents)
				n->extents--;
			n->st.freed++;
		} else {
			n->st.free_stale++;
		}
	}
	if (fw->waiting == 0)
		node_master_free_done(n, fw);
}

static int master_on_frame(struct ev_conn *c, const struct wire_hdr *h, const uint8_t *body)
{
	struct node *n = ev_conn_udata(c);

	if (h->payload_len)
		ev_conn_discard_payload(c);
	if (!(h->flags & WIRE_F_REPLY)) {
		if (h->opcode < WIRE_OP_MAX)
			n->st.req[h->opcode]++;
		if (h->opcode == WIRE_OP_FREE)
			master_on_free(n, h, body);
		else if (h->opcode == WIRE_OP_DEMOTE)
			node_spill_on_demote(n, h, body);
		else if (h->opcode == WIRE_OP_PROMOTE)
			node_spill_on_promote(n, h, body);
		else
			ev_conn_reply(c, h, KVP_ENOTSUP, NULL, 0);
		return 0;
	}
	switch (h->opcode) {
	case WIRE_OP_HELLO:
		master_on_hello(n, h, body);
		break;
	case WIRE_OP_MOUNT:
		master_on_mount(n, h, body);
		break;
	case WIRE_OP_REPORT:
		master_on_report(n, h, body);
		break;
	case WIRE_OP_HEARTBEAT:
		master_on_heartbeat(n, h);
		break;
	case WIRE_OP_UNMOUNT:
		master_on_unmount(n, h);
		break;
	default:
		break;
	}
	return 0;
}

static void master_retry_cb(struct ev_loop *loop, void *arg)
{
	struct node *n = arg;

	n->retry_timer = 0;
	node_master_start(n);
}

static void master_schedule_retry(struct node *n)
{
	if (n->stopping) {
		n->mstate = NODE_M_DONE;
		node_drain_step(n);
		return;
	}
	n->mstate = NODE_M_IDLE;
	if (!n->retry_timer)
		n->retry_timer = ev_timer_add(n->loop, n->backoff_ms, false, master_retry_cb, n);
	n->backoff_ms *= 2;
	if (n->backoff_ms > NODE_BACKOFF_MAX_MS)
		n->backoff_ms = NODE_BACKOFF_MAX_MS;
}

static void master_on_close(struct ev_conn *c)
{
	struct node *n = ev_conn_udata(c);
	enum node_mstate was = n->mstate;

	n->mconn = NULL;
	n->reports_pending = 0;
	node_scan_free(&n->scan);
	if (was == NODE_M_UP) {
		log_warn("lost the master connection to %s; mounting again when it is back",
			 n->master_addr);
		node_status(n, "master %s down, reconnecting", n->conf.cluster.master);
	} else if (was == NODE_M_UNMOUNT) {
		log_warn("master %s closed before answering UNMOUNT", n->master_addr);
	}
	if (was == NODE_M_DONE)
		return;
	n->st.master_failures++;
	master_schedule_retry(n);
}

static const struct ev_conn_ops master_ops = {
	.on_frame = master_on_frame,
	.on_close = master_on_close,
};

static void master_connected(struct node *n, int fd)
{
	int one = 1;
	uint64_t ttl = n->conf.master.client_ttl;
	uint64_t hb = n->conf.node.heartbeat_interval;
	uint64_t max_frame = n->conf.cluster.max_frame;
	/* A master that answers nothing for this long is as good as gone. */
	uint64_t idle = ttl > 3 * hb ? ttl : 3 * hb;
	struct ev_conn_limits lim = {
		.max_body = max_frame && max_frame < UINT32_MAX ? (uint32_t)max_frame : UINT32_MAX,
		.max_payload = 4096,
		.idle_ms = idle > 5000 ? idle : 5000,
	};

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	master_set_advertise(n, fd);
	n->mconn = ev_conn_create(n->loop, fd, &master_ops, &lim, n);
	if (!n->mconn) {
		n->st.master_failures++;
		master_schedule_retry(n);
		return;
	}
	n->mconn_gen++;
	n->st.master_connects++;
	n->mstate = NODE_M_HELLO;
	log_info("connected to master %s", n->master_addr);
	master_send_hello(n);
}

static void master_connect_fail(struct node *n, const char *what, int err)
{
	/* The first failure is worth a notice; the retries every 2 s are not. */
	if (n->backoff_ms <= NODE_BACKOFF_MIN_MS || log_enabled(LOG_INFO))
		log_msg(n->backoff_ms <= NODE_BACKOFF_MIN_MS ? LOG_NOTICE : LOG_INFO,
			"master %s: %s: %s", n->conf.cluster.master, what, strerror(err));
	n->st.master_failures++;
	master_schedule_retry(n);
}

static void master_connect_abort(struct node *n)
{
	if (n->connect_timer) {
		ev_timer_del(n->loop, n->connect_timer);
		n->connect_timer = 0;
	}
	if (n->mfd >= 0) {
		ev_del_fd(n->loop, n->mfd);
		close(n->mfd);
		n->mfd = -1;
	}
}

static void master_on_connect_ready(struct ev_loop *loop, int fd, uint32_t events, void *arg)
{
	struct node *n = arg;
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err == 0 && !(events & EPOLLOUT))
		err = ECONNREFUSED;
	ev_timer_del(loop, n->connect_timer);
	n->connect_timer = 0;
	ev_del_fd(loop, fd);
	n->mfd = -1;
	if (err) {
		close(fd);
		master_connect_fail(n, "connect", err);
		return;
	}
	master_connected(n, fd);
}

static void master_on_connect_timeout(struct ev_loop *loop, void *arg)
{
	struct node *n = arg;

	n->connect_timer = 0;
	master_connect_abort(n);
	master_connect_fail(n, "connect", ETIMEDOUT);
}

void node_master_start(struct node *n)
{
	char host[CONF_STR], portstr[8];
	uint16_t port;
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai = NULL;

	if (n->stopping || n->mconn || n->mfd >= 0)
		return;
	n->mstate = NODE_M_CONNECTING;
	if (conf_parse_hostport(n->conf.cluster.master, host, sizeof(host), &port) < 0) {
		master_connect_fail(n, "bad address", EINVAL);
		return;
	}
	snprintf(portstr, sizeof(portstr), "%u", port);
	/* Resolution blocks; a numeric address or /etc/hosts name costs nothing. */
	int gr = getaddrinfo(host[0] ? host : "127.0.0.1", portstr, &hints, &ai);
	if (gr != 0) {
		log_notice("master %s: %s", n->conf.cluster.master, gai_strerror(gr));
		n->st.master_failures++;
		master_schedule_retry(n);
		return;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int err = errno;
		freeaddrinfo(ai);
		master_connect_fail(n, "socket", err);
		return;
	}
	char ip[INET6_ADDRSTRLEN] = "?";
	if (ai->ai_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, ip, sizeof(ip));
	else if (ai->ai_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr, ip, sizeof(ip));
	snprintf(n->master_addr, sizeof(n->master_addr),
		 ai->ai_family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, port);
	int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
	int err = errno;
	freeaddrinfo(ai);
	if (r == 0) {
		master_connected(n, fd);
		return;
	}
	if (err != EINPROGRESS) {
		close(fd);
		master_connect_fail(n, "connect", err);
		return;
	}
	if (ev_add_fd(n->loop, fd, EPOLLOUT, master_on_connect_ready, n) < 0) {
		close(fd);
		master_connect_fail(n, "connect", ENOMEM);
		return;
	}
	n->mfd = fd;
	n->connect_timer = ev_timer_add(n->loop, NODE_CONNECT_TIMEOUT_MS, false,
					master_on_connect_timeout, n);
}

int node_master_adopt(struct node *n, int fd, uint32_t segment_id,
		      const uint8_t secret[WIRE_SECRET_LEN])
{
	struct ev_conn_limits lim = { .max_body = 1u << 20, .max_payload = 4096 };

	n->mconn = ev_conn_create(n->loop, fd, &master_ops, &lim, n);
	if (!n->mconn)
		return -ENOMEM;
	n->mconn_gen++;
	n->segment_id = segment_id;
	memcpy(n->secret, secret, WIRE_SECRET_LEN);
	n->have_secret = true;
	n->mstate = NODE_M_UP;
	snprintf(n->master_addr, sizeof(n->master_addr), "adopted");
	return 0;
}

void node_master_close(struct node *n)
{
	master_connect_abort(n);
	if (n->retry_timer) {
		ev_timer_del(n->loop, n->retry_timer);
		n->retry_timer = 0;
	}
	n->mstate = NODE_M_DONE;
	if (n->mconn)
		ev_conn_close(n->mconn);
	node_scan_free(&n->scan);
}

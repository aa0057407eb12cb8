/* node_data: kvpool-node's TCP data server — accepts client connections,
 * checks HELLO + token, serves READ straight from the segment mapping
 * (zero-copy sends) and receives WRITE payloads straight into the segment
 * after checking the master's grant. Runs on the node's loop thread.
 */
#include "node_i.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "extent.h"
#include "grant.h"
#include "kvpool.h"
#include "log.h"
#include "net.h"
#include "node_rdma.h"

static void dconn_unlink(struct node_dconn *d)
{
	struct node *n = d->n;

	if (d->prev)
		d->prev->next = d->next;
	else
		n->dconns = d->next;
	if (d->next)
		d->next->prev = d->prev;
	d->prev = d->next = NULL;
	n->ndconns--;
}

static void pwrite_unlink(struct node *n, struct node_pwrite *pw)
{
	if (pw->prev)
		pw->prev->next = pw->next;
	else
		n->pwrites = pw->next;
	if (pw->next)
		pw->next->prev = pw->prev;
	pw->prev = pw->next = NULL;
}

static void pwrite_done(struct node *n, struct node_pwrite *pw);

static void dconn_maybe_free(struct node_dconn *d)
{
	if (!d->c && d->sends == 0 && !d->writing && !d->sread)
		free(d);
}

void node_data_maybe_free(struct node_dconn *d)
{
	dconn_maybe_free(d);
}

static void data_reply(struct node_dconn *d, const struct wire_hdr *h, int32_t status)
{
	if (status && h->opcode < WIRE_OP_MAX)
		d->n->st.err[h->opcode]++;
	ev_conn_reply(d->c, h, status, NULL, 0);
}

static void data_release(void *arg)
{
	struct node_dconn *d = arg;
	struct node *n = d->n;

	d->sends--;
	n->inflight_sends--;
	dconn_maybe_free(d);
	if (n->stopping)
		node_drain_step(n);
}

static int data_hello(struct node_dconn *d, const struct wire_hdr *h, const uint8_t *body)
{
	struct node *n = d->n;
	struct rbuf r;
	size_t toklen, namelen, hostlen;

	rb_init(&r, body, h->body_len);
	uint16_t role = rb_u16(&r);
	const uint8_t *tok = rb_str(&r, &toklen);
	rb_str(&r, &namelen);
	rb_str(&r, &hostlen);
	if (!rb_ok(&r) || role < WIRE_ROLE_CLIENT || role > WIRE_ROLE_ADMIN) {
		data_reply(d, h, KVP_EPROTO);
		ev_conn_close_after_send(d->c);
		return 0;
	}
	const char *want = n->conf.cluster.token;
	size_t wantlen = strlen(want);
	if (wantlen && (toklen != wantlen || CRYPTO_memcmp(tok, want, wantlen) != 0)) {
		log_notice("data connection from %s: wrong token", ev_conn_peer(d->c));
		data_reply(d, h, KVP_EAUTH);
		ev_conn_close_after_send(d->c);
		return 0;
	}
	d->authed = true;

	struct wbuf b;
	wb_init(&b);
	wb_u64(&b, n->epoch);
	wb_u16(&b, WIRE_VERSION);
	if (b.oom) {
		wb_free(&b);
		return -ENOMEM;
	}
	ev_conn_reply(d->c, h, 0, b.p, b.len);
	wb_free(&b);
	return 0;
}

/* Does [off, off+len) lie in the segment's data area? */
static bool data_range_ok(const struct node *n, uint64_t off, uint64_t len)
{
	return off >= SEG_DATA_OFF && off < n->seg.size && len > 0 &&
	       len <= n->seg.size - off;
}

static void data_read(struct node_dconn *d, const struct wire_hdr *h, const uint8_t *body)
{
	struct node *n = d->n;
	struct rbuf r;

	rb_init(&r, body, h->body_len);
	uint8_t tier = rb_u8(&r);
	uint64_t off = rb_u64(&r);
	uint64_t len = rb_u64(&r);
	if (!rb_ok(&r)) {	/* later fields at the end are ignored */
		data_reply(d, h, KVP_EPROTO);
		return;
	}
	if (tier == 1) {	/* disk tier: streamed from the spill file */
		node_spill_read(d, h, off, len);
		return;
	}
	if (tier != 0 || !data_range_ok(n, off, len)) {
		data_reply(d, h, KVP_EINVAL);
		return;
	}

	struct wire_hdr rh = {
		.magic = WIRE_MAGIC,
		.version = WIRE_VERSION,
		.flags = WIRE_F_REPLY,
		.opcode = WIRE_OP_READ,
		.reqid = h->reqid,
		.payload_len = len,
	};
	uint8_t frame[WIRE_HDR_SIZE];
	wire_hdr_encode(&rh, frame);
	/* The bytes go from the mapping to the socket; a lease at the master
	 * keeps the extent from being reused until the client is done. */
	d->sends++;
	n->inflight_sends++;
	if (ev_conn_send_ref(d->c, frame, sizeof(frame), (const uint8_t *)n->seg.base + off,
			     len, data_release, d) < 0) {
		d->sends--;
		n->inflight_sends--;
		n->st.err[WIRE_OP_READ]++;
		ev_conn_close(d->c);
		return;
	}
	n->st.bytes_read += len;
}

static bool data_extent_taken(const struct node *n, uint64_t off, uint64_t alloc_len,
			      uint64_t generation)
{
	struct ext_hdr eh;
	const uint8_t *key;

	for (const struct node_pwrite *pw = n->pwrites; pw; pw = pw->next)
		if (pw->off == off)
			return true;
	/* Generations only grow: a live header of the same or a newer one means
	 * this grant was used already or is older than what lives there now. An
	 * older live header is an extent the master never heard of (a refused
	 * REPORT) and may be overwritten. */
	return ext_decode((const uint8_t *)n->seg.base + off, alloc_len, 0, &eh, &key) == 0 &&
	       eh.seg_uuid == n->seg.uuid && eh.generation >= generation;
}

static void data_write(struct node_dconn *d, const struct wire_hdr *h, const uint8_t *body)
{
	struct node *n = d->n;
	struct rbuf r;

	rb_init(&r, body, h->body_len);
	uint32_t segment_id = rb_u32(&r);
	uint64_t generation = rb_u64(&r);
	uint64_t off = rb_u64(&r);
	uint64_t alloc_len = rb_u64(&r);
	const uint8_t *grant = rb_take(&r, WIRE_GRANT_LEN);
	if (!rb_ok(&r)) {
		ev_conn_discard_payload(d->c);
		data_reply(d, h, KVP_EPROTO);
		return;
	}
	/* Every refusal looks the same to the client: no valid grant for it. */
	bool ok = n->have_secret && segment_id == n->segment_id &&
		  grant_ok(n->secret, segment_id, generation, off, alloc_len, grant) &&
		  data_range_ok(n, off, alloc_len) && (off & (n->seg.align - 1)) == 0 &&
		  h->payload_len >= EXT_HDR_SIZE && h->payload_len <= alloc_len;
	/* A grant is good for one write: an extent that already holds a live
	 * header of this segment with the same or a newer generation (the put
	 * was written — replay after PUT_END, or an old grant for space since
	 * reused by another object) or that is being written right now is
	 * refused. Freed extents are tombstoned
	 * before the master reuses them, so fresh space never looks live. */
	if (ok && data_extent_taken(n, off, alloc_len, generation))
		ok = false;
	if (!ok) {
		log_info("WRITE from %s refused: segment %u off %llu alloc_len %llu payload %llu",
			 ev_conn_peer(d->c), segment_id, (unsigned long long)off,
			 (unsigned long long)alloc_len, (unsigned long long)h->payload_len);
		ev_conn_discard_payload(d->c);
		data_reply(d, h, KVP_EGRANT);
		return;
	}

	struct node_pwrite *pw = &d->pw;
	pw->req = *h;
	pw->off = off;
	pw->alloc_len = alloc_len;
	pw->generation = generation;
	pw->freed = false;
	pw->fw = NULL;
	pw->prev = NULL;
	pw->next = n->pwrites;
	if (n->pwrites)
		n->pwrites->prev = pw;
	n->pwrites = pw;
	d->writing = true;
	ev_conn_recv_payload(d->c, (uint8_t *)n->seg.base + off, h->payload_len, d);
}

/* The payload of a WRITE is in the segment (or the connection broke). */
static void data_on_payload(struct ev_conn *c, bool ok, void *arg)
{
	struct node_dconn *d = arg;
	struct node *n = d->n;
	struct node_pwrite *pw = &d->pw;

	if (!d->writing)
		return;
	d->writing = false;
	pwrite_unlink(n, pw);

	int status = 0;
	struct ext_hdr eh;
	const uint8_t *key;
	uint8_t *at = (uint8_t *)n->seg.base + pw->off;
	if (!ok) {
		status = KVP_EIO;
	} else if (pw->freed) {
		status = KVP_ESTALE;
	} else if (ext_decode(at, pw->alloc_len, n->conf.cluster.max_object_size, &eh, &key) != 0 ||
		   ext_size(eh.key_len, eh.value_len) > pw->req.payload_len ||
		   !wire_key_ok(key, eh.key_len)) {
		status = KVP_EINVAL;
	} else if (eh.generation != pw->generation || eh.seg_uuid != n->seg.uuid) {
		status = KVP_ESTALE;
	}
	if (status) {
		/* Never leave a half-written or foreign image that a later scan
		 * or a local reader could take for a live extent. */
		node_kill_extent(n, pw->off, pw->alloc_len, pw->generation);
		n->st.writes_tombstoned++;
		log_info("WRITE at %llu from %s: %s, tombstoned", (unsigned long long)pw->off,
			 d->c ? ev_conn_peer(d->c) : "?", kvp_strerror(status));
	} else {
		n->st.bytes_written += pw->req.payload_len;
		n->used += pw->alloc_len;
		n->extents++;
	}
	if (ok && d->c) {
		data_reply(d, &pw->req, status);
		if (d->close_when_done)
			ev_conn_close_after_send(d->c);
	} else if (status && pw->req.opcode < WIRE_OP_MAX) {
		n->st.err[pw->req.opcode]++;
	}
	pwrite_done(n, pw);
	if (!d->c)
		dconn_maybe_free(d);
	if (n->stopping)
		node_drain_step(n);
}

/* RDMA_CONNECT: QPs connected to the client's, kept while this connection
 * lives. The connection then carries no frames (the client READs and WRITEs
 * one-sided), so it is exempt from the idle timeout; TCP keepalive notices
 * a client host that vanished. */
static void data_rdma_connect(struct node_dconn *d, const struct wire_hdr *h, const uint8_t *body)
{
	struct node *n = d->n;
	struct rdma_qps *q = NULL;
	struct wbuf rep;
	int rc, fd, on = 1, idle = 60, intvl = 10, cnt = 6;

	if (d->qps) {
		data_reply(d, h, KVP_EPROTO);	/* one set per connection */
		return;
	}
	wb_init(&rep);
	rc = node_rdma_connect(n->rdma, body, h->body_len, &q, &rep);
	if (rc < 0) {
		wb_free(&rep);
		data_reply(d, h, rc);
		return;
	}
	d->qps = q;
	ev_conn_set_idle(d->c, 0);
	fd = ev_conn_fd(d->c);
	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
		setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	}
	ev_conn_reply(d->c, h, 0, rep.p, rep.len);
	wb_free(&rep);
}

static int data_on_frame(struct ev_conn *c, const struct wire_hdr *h, const uint8_t *body)
{
	struct node_dconn *d = ev_conn_udata(c);
	struct node *n = d->n;

	if (h->opcode < WIRE_OP_MAX)
		n->st.req[h->opcode]++;
	if (h->flags & WIRE_F_REPLY) {
		if (h->payload_len)
			ev_conn_discard_payload(c);
		return -EPROTO;
	}
	if (!d->authed) {
		if (h->payload_len)
			ev_conn_discard_payload(c);
		if (h->opcode == WIRE_OP_HELLO)
			return data_hello(d, h, body);
		data_reply(d, h, KVP_EAUTH);
		ev_conn_close_after_send(c);
		return 0;
	}
	if (n->stopping) {
		/* Draining: whatever was already in flight finishes, anything
		 * new is told the segment is going away. */
		if (h->payload_len)
			ev_conn_discard_payload(c);
		data_reply(d, h, KVP_ENOSEG);
		ev_conn_close_after_send(c);
		return 0;
	}
	switch (h->opcode) {
	case WIRE_OP_READ:
		if (h->payload_len)
			ev_conn_discard_payload(c);
		data_read(d, h, body);
		return 0;
	case WIRE_OP_RDMA_CONNECT:
		if (h->payload_len)
			ev_conn_discard_payload(c);
		data_rdma_connect(d, h, body);
		return 0;
	case WIRE_OP_WRITE:
		data_write(d, h, body);
		return 0;
	case WIRE_OP_HELLO:
		if (h->payload_len)
			ev_conn_discard_payload(c);
		return data_hello(d, h, body);
	default:
		if (h->payload_len)
			ev_conn_discard_payload(c);
		data_reply(d, h, KVP_ENOTSUP);
		return 0;
	}
}

static void data_on_close(struct ev_conn *c)
{
	struct node_dconn *d = ev_conn_udata(c);
	struct node *n = d->n;

	if (d->writing) {
		/* on_payload(ok = false) normally ran already; if not, the
		 * partial image must not survive. */
		d->writing = false;
		pwrite_unlink(n, &d->pw);
		node_kill_extent(n, d->pw.off, d->pw.alloc_len, d->pw.generation);
		n->st.writes_tombstoned++;
		pwrite_done(n, &d->pw);
	}
	/* The client's QP set goes with its control connection. */
	node_rdma_release(n->rdma, d->qps);
	d->qps = NULL;
	d->c = NULL;
	dconn_unlink(d);
	node_spill_conn_closed(d);
	dconn_maybe_free(d);
	if (n->stopping)
		node_drain_step(n);
}

static const struct ev_conn_ops data_ops = {
	.on_frame = data_on_frame,
	.on_payload = data_on_payload,
	.on_close = data_on_close,
};

static int reject_on_frame(struct ev_conn *c, const struct wire_hdr *h, const uint8_t *body)
{
	if (h->payload_len)
		ev_conn_discard_payload(c);
	return 0;
}

static const struct ev_conn_ops reject_ops = {
	.on_frame = reject_on_frame,
};

/* Refuses a connection over node.max_connections with one ELIMIT frame. The
 * connection lingers briefly in ev (a plain close with unread input would
 * reset it and could destroy the frame before the peer reads it). */
static void data_reject(struct node *n, int fd)
{
	struct wire_hdr h = {
		.magic = WIRE_MAGIC,
		.version = WIRE_VERSION,
		.flags = WIRE_F_REPLY,
		.opcode = WIRE_OP_HELLO,
		.status = KVP_ELIMIT,
	};
	struct ev_conn_limits lim = { .max_body = NODE_DATA_MAX_BODY, .idle_ms = 5000 };
	uint8_t frame[WIRE_HDR_SIZE];

	n->st.conns_rejected++;
	struct ev_conn *c = ev_conn_create(n->loop, fd, &reject_ops, &lim, n);
	if (!c)
		return;
	wire_hdr_encode(&h, frame);
	ev_conn_send(c, frame, sizeof(frame));
	ev_conn_close_after_send(c);
}

static void data_accept_resume(struct ev_loop *loop, void *arg)
{
	struct node *n = arg;

	if (n->listen_fd >= 0)
		ev_mod_fd(loop, n->listen_fd, EPOLLIN);
}

static void data_on_accept(struct ev_loop *loop, int fd, uint32_t events, void *arg)
{
	struct node *n = arg;

	for (int i = 0; i < 64; i++) {
		int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (cfd < 0) {
			int err = errno;
			if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
				/* The pending connection stays readable: without a
				 * pause the loop would spin on it. */
				log_warn("data server accept: %s; pausing accepts for %d ms",
					 strerror(err), NODE_ACCEPT_PAUSE_MS);
				ev_mod_fd(loop, fd, 0);
				ev_timer_add(loop, NODE_ACCEPT_PAUSE_MS, false, data_accept_resume, n);
			} else if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR &&
				   err != ECONNABORTED) {
				log_warn("data server accept: %s", strerror(err));
			}
			return;
		}
		if (n->stopping) {
			close(cfd);
			continue;
		}
		if ((int64_t)n->ndconns >= n->conf.node.max_connections) {
			data_reject(n, cfd);
			continue;
		}
		node_data_adopt(n, cfd);
	}
}

int node_data_adopt(struct node *n, int fd)
{
	struct node_dconn *d = calloc(1, sizeof(*d));
	if (!d) {
		close(fd);
		return -ENOMEM;
	}
	/* Payloads are extent images: the largest object with the longest
	 * key, and never more than the segment. Bodies are small. */
	uint64_t max_payload = ext_size(KVP_MAX_KEY, n->conf.cluster.max_object_size);
	uint64_t max_body = n->conf.cluster.max_frame;
	struct ev_conn_limits lim = {
		.max_body = max_body && max_body < NODE_DATA_MAX_BODY ? (uint32_t)max_body :
			    NODE_DATA_MAX_BODY,
		.max_payload = max_payload < n->seg.size ? max_payload : n->seg.size,
		.idle_ms = NODE_IDLE_MS,
	};
	d->n = n;
	d->created_ms = ev_now(n->loop);
	d->c = ev_conn_create(n->loop, fd, &data_ops, &lim, d);	/* closes fd on failure */
	if (!d->c) {
		free(d);
		return -ENOMEM;
	}
	d->next = n->dconns;
	if (n->dconns)
		n->dconns->prev = d;
	n->dconns = d;
	n->ndconns++;
	n->st.conns_total++;
	return 0;
}

int node_data_listen(struct node *n, char *err, size_t errlen)
{
	int fd = net_listen(n->listen_addr, err, errlen);

	if (fd < 0)
		return fd;
	int r = ev_add_fd(n->loop, fd, EPOLLIN, data_on_accept, n);
	if (r < 0) {
		snprintf(err, errlen, "%s: cannot watch the listener: %s", n->listen_addr,
			 strerror(-r));
		close(fd);
		return r;
	}
	n->listen_fd = fd;
	n->data_port = net_local_port(fd);
	return 0;
}

void node_data_stop_accepting(struct node *n)
{
	if (n->listen_fd < 0)
		return;
	ev_del_fd(n->loop, n->listen_fd);
	close(n->listen_fd);
	n->listen_fd = -1;
}

void node_data_drain(struct node *n)
{
	for (struct node_dconn *d = n->dconns, *next; d; d = next) {
		next = d->next;
		if (d->writing || d->sread)
			d->close_when_done = true;
		else
			ev_conn_close_after_send(d->c);	/* queued READ bytes still go out */
	}
}

void node_data_sweep(struct node *n)
{
	uint64_t now = ev_now(n->loop);

	for (struct node_dconn *d = n->dconns, *next; d; d = next) {
		next = d->next;
		if (!d->authed && now - d->created_ms > n->hello_ms) {
			log_info("data connection from %s: no HELLO in %llu ms, closed",
				 ev_conn_peer(d->c), (unsigned long long)n->hello_ms);
			n->st.conns_timed_out++;
			ev_conn_close(d->c);
		}
	}
}

bool node_data_freed(struct node *n, uint64_t off, uint64_t generation,
		     struct node_fwait *fw)
{
	bool found = false;

	for (struct node_pwrite *pw = n->pwrites; pw; pw = pw->next) {
		if (pw->off != off || pw->generation != generation)
			continue;
		found = true;
		pw->freed = true;
		if (!pw->fw) {
			pw->fw = fw;
			fw->waiting++;
		}
	}
	return found;
}

/* A write finished one way or another: release a FREE reply waiting on it. */
static void pwrite_done(struct node *n, struct node_pwrite *pw)
{
	struct node_fwait *fw = pw->fw;

	pw->fw = NULL;
	if (fw && --fw->waiting == 0)
		node_master_free_done(n, fw);
}

/* node_data: kvpool-node's TCP data server (see node_data.h) — accepts
 * client connections, checks HELLO + token, serves READ straight from the
 * segment mapping (zero-copy sends) or streams it from the spill file, and
 * receives WRITE payloads straight into the segment after checking the
 * master's grant. Runs on the node's loop thread.
 */
#include "node_data.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "errors.h"
#include "extent.h"
#include "grant.h"
#include "kvpool.h"
#include "log.h"
#include "segmap.h"
#include "net.h"
#include "node_rdma.h"
#include "spill.h"
#include "tenant.h"

#define DATA_HELLO_MIN_MS 1000		/* a connection must HELLO within */
#define DATA_HELLO_MAX_MS 60000		/* client.timeout clamped to these */
#define DATA_IDLE_MS 300000		/* connection without a frame */
#define DATA_ACCEPT_PAUSE_MS 100	/* after EMFILE and friends */
#define DATA_MAX_BODY 65536		/* HELLO is the largest data-server body */

/* A streamed READ tier 1 moves in pieces of one spill read buffer
 * (spill_buf_size(), sized by the spill side), up to SREAD_WINDOW of them in
 * flight: the socket is busy with the first pieces while the disk reads the
 * next ones. */
#define SREAD_WINDOW 8

struct node_dconn;

/* One WRITE whose payload is being received into the segment. */
struct node_pwrite {
	struct wire_hdr req;
	uint64_t off, alloc_len, generation;
	bool freed;			/* a FREE for this extent arrived meanwhile */
	struct node_wait *fw;		/* that FREE's reply waits for us */
	struct node_pwrite *prev, *next;
};

struct node_schunk {
	struct node_sread *sr;
	uint8_t *buf;
	uint32_t len;
	int status;
	bool done;
};

/* A READ tier 1 being streamed: pieces are read in order of offset, up to
 * SREAD_WINDOW at a time, and queued on the connection in that order. */
struct node_sread {
	struct node_dconn *d;
	struct wire_hdr req;
	uint64_t off, len;
	uint64_t piece;			/* bytes per piece: a read buffer */
	uint64_t issued_bytes;
	uint32_t issued, sent;		/* pieces */
	struct node_schunk *ch[SREAD_WINDOW];	/* [seq % WINDOW] for sent..issued */
	uint32_t outstanding;		/* pieces read or being sent */
	bool header_sent, failed, finished, waiting;
	struct node_sread *wnext;	/* sv->sread_wait */
};

/* A data-server connection. Freed when both the ev_conn closed and every
 * zero-copy send referencing the segment or a spill buffer was released. */
struct node_dconn {
	struct node_data *sv;
	struct ev_conn *c;		/* NULL once closed */
	uint64_t created_ms;
	bool authed;
	int tenant;			/* sv->tenants index of its token, -1: every right */
	bool revoked;			/* a reload removed its token: refuse and close */
	bool writing;			/* pw is live (payload in flight) */
	bool close_when_done;		/* draining: close after the transfer */
	uint32_t sends;			/* zero-copy sends not yet released */
	struct node_pwrite pw;
	struct node_sread *sread;	/* a READ tier 1 being streamed */
	struct rdma_qps *qps;		/* RDMA_CONNECT's queue pairs; destroyed on close */
	struct node_dconn *prev, *next;
};

struct node_data {
	struct node_ctx *x;
	struct node_rdma *rdma;		/* NULL: TCP only */
	struct spill *spill;		/* READ tier 1; NULL: memory-only */
	uint64_t epoch;
	char listen_addr[CONF_STR];
	int listen_fd;
	int port;
	uint64_t hello_ms;		/* deadline for a connection's HELLO */
	struct node_dconn *dconns;	/* open connections */
	size_t ndconns;
	struct node_pwrite *pwrites;	/* writes in flight (for FREE) */
	uint64_t inflight_sends;
	struct node_sread *sread_wait;	/* streams waiting for a read buffer */
	/* the master's grants (node_data_set_grant) */
	uint32_t segment_id;
	uint8_t secret[WIRE_SECRET_LEN];
	uint64_t grant_epoch;		/* of the master that mounted the segment */
	bool have_secret;
	/* cluster.tenants_file (tenant.h): who may read which keys */
	bool tenants_on;
	struct tenant_tab tenants;
	struct node_data_stats st;
};

static void dconn_unlink(struct node_dconn *d)
{
	struct node_data *sv = d->sv;

	if (d->prev)
		d->prev->next = d->next;
	else
		sv->dconns = d->next;
	if (d->next)
		d->next->prev = d->prev;
	d->prev = d->next = NULL;
	sv->ndconns--;
}

static void pwrite_unlink(struct node_data *sv, struct node_pwrite *pw)
{
	if (pw->prev)
		pw->prev->next = pw->next;
	else
		sv->pwrites = pw->next;
	if (pw->next)
		pw->next->prev = pw->prev;
	pw->prev = pw->next = NULL;
}

/* A write finished one way or another: release a FREE reply waiting on it. */
static void pwrite_done(struct node_pwrite *pw)
{
	struct node_wait *fw = pw->fw;

	pw->fw = NULL;
	if (fw)
		node_wait_release(fw);
}

static void dconn_maybe_free(struct node_dconn *d)
{
	if (!d->c && d->sends == 0 && !d->writing && !d->sread)
		free(d);
}

/* Invalidates the extent at off (alloc_len bytes): tombstones a decodable
 * header, or writes a tombstone header over a garbage one so a scan skips
 * exactly alloc_len. */
static void data_kill_extent(struct node_data *sv, uint64_t off, uint64_t alloc_len,
			     uint64_t generation)
{
	const struct segment *seg = &sv->x->seg;
	uint8_t *at = (uint8_t *)seg->base + off;
	struct ext_hdr h;
	const uint8_t *key;
	int r = ext_decode(at, alloc_len, seg->size, &h, &key);

	/* Whatever lies there is no committed extent (the write that failed
	 * never set its byte; an earlier tenant's went with its FREE). */
	segmap_uncommit(seg, off);
	if (r == -ENOENT)
		return;			/* already a tombstone */
	if (r == 0 && ext_size(h.key_len, h.value_len) <= alloc_len) {
		ext_tombstone(at);
		return;
	}
	if (alloc_len < EXT_HDR_SIZE)
		return;
	/* Garbage lengths must not make a scan jump over real extents: write
	 * a tombstone that spans exactly the allocation. */
	if (alloc_len < EXT_HDR_SIZE + 1)
		return;
	struct ext_hdr t = {
		.key_len = 1,			/* decoders refuse an empty key */
		.value_len = alloc_len - EXT_HDR_SIZE - 1,
		.generation = generation,
		.seg_uuid = seg->uuid,
	};
	ext_encode(at, &t, "!");
	ext_tombstone(at);
}

static void data_reply(struct node_dconn *d, const struct wire_hdr *h, int32_t status)
{
	if (status && h->opcode < WIRE_OP_MAX)
		d->sv->x->err[h->opcode]++;
	ev_conn_reply(d->c, h, status, NULL, 0);
}

static void data_release(void *arg)
{
	struct node_dconn *d = arg;
	struct node_data *sv = d->sv;

	d->sends--;
	sv->inflight_sends--;
	dconn_maybe_free(d);
	node_ctx_progress(sv->x);
}

static int data_hello(struct node_dconn *d, const struct wire_hdr *h, const uint8_t *body)
{
	struct node_data *sv = d->sv;
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
	const char *want = sv->x->conf->cluster.token;
	size_t wantlen = strlen(want);
	const struct tenant *t = NULL;
	if (sv->tenants_on)
		t = tenant_find_token(&sv->tenants, tok, toklen);	/* the cluster token included */
	if (sv->tenants_on ? !t :
	    wantlen && (toklen != wantlen || CRYPTO_memcmp(tok, want, wantlen) != 0)) {
		log_notice("data connection from %s: wrong token", ev_conn_peer(d->c));
		data_reply(d, h, KVP_EAUTH);
		ev_conn_close_after_send(d->c);
		return 0;
	}
	d->authed = true;
	d->tenant = t ? (int)(t - sv->tenants.v) : -1;

	struct wbuf b;
	wb_init(&b);
	wb_u64(&b, sv->epoch);
	wb_u16(&b, WIRE_VERSION);
	if (b.oom) {
		wb_free(&b);
		return -ENOMEM;
	}
	ev_conn_reply(d->c, h, 0, b.p, b.len);
	wb_free(&b);
	return 0;
}

static void sread_start(struct node_dconn *d, const struct wire_hdr *h, uint64_t off,
			uint64_t len);

/* NULL: every right (no tenants file); a tenant of no rights once revoked
 * (a WRITE payload still arriving). */
static const struct tenant *dconn_tenant(const struct node_dconn *d)
{
	static const struct tenant none = { .name = "revoked" };

	if (d->revoked)
		return &none;
	return d->tenant < 0 ? NULL : &d->sv->tenants.v[d->tenant];
}

/* A tenant that may not read every key reads a whole extent it may read:
 * off must hold a decodable header of this segment whose key its rights
 * cover, len no more than that extent, and the value must match its
 * checksum (so a header forged inside a value cannot reach the bytes of
 * the extent behind it). 0 or KVP_EPERM / KVP_ESTALE. */
static int read_allowed(struct node_dconn *d, uint64_t off, uint64_t len)
{
	const struct tenant *t = dconn_tenant(d);
	const struct segment *seg = &d->sv->x->seg;
	struct ext_hdr eh;
	const uint8_t *key;

	if (!t || t->read_all)
		return 0;
	const uint8_t *at = (const uint8_t *)seg->base + off;
	if (ext_decode(at, seg->size - off, 0, &eh, &key) != 0 || eh.seg_uuid != seg->uuid ||
	    len > ext_size(eh.key_len, eh.value_len))
		return KVP_ESTALE;	/* what a reused extent answers */
	if (!tenant_may(t, key, eh.key_len, TENANT_READ))
		return KVP_EPERM;
	if (!ext_verify(at, &eh))
		return KVP_ESTALE;
	return 0;
}

static void data_read(struct node_dconn *d, const struct wire_hdr *h, const uint8_t *body)
{
	struct node_data *sv = d->sv;
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
		sread_start(d, h, off, len);
		return;
	}
	if (tier != 0 || !node_ctx_range_ok(sv->x, off, len)) {
		data_reply(d, h, KVP_EINVAL);
		return;
	}
	int rc = read_allowed(d, off, len);
	if (rc) {
		if (rc == KVP_EPERM)
			log_info("READ at %llu from %s refused: tenant %s may not read that key",
				 (unsigned long long)off, ev_conn_peer(d->c), dconn_tenant(d)->name);
		data_reply(d, h, rc);
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
	sv->inflight_sends++;
	if (ev_conn_send_ref(d->c, frame, sizeof(frame), (const uint8_t *)sv->x->seg.base + off,
			     len, data_release, d) < 0) {
		d->sends--;
		sv->inflight_sends--;
		sv->x->err[WIRE_OP_READ]++;
		ev_conn_close(d->c);
		return;
	}
	sv->st.bytes_read += len;
}

static bool data_extent_taken(const struct node_data *sv, uint64_t off, uint64_t alloc_len,
			      uint64_t generation)
{
	const struct segment *seg = &sv->x->seg;
	struct ext_hdr eh;
	const uint8_t *key;

	for (const struct node_pwrite *pw = sv->pwrites; pw; pw = pw->next)
		if (pw->off == off)
			return true;
	/* Generations only grow: a live header of the same or a newer one means
	 * this grant was used already or is older than what lives there now. An
	 * older live header is an extent the master never heard of (a refused
	 * REPORT) and may be overwritten. */
	return ext_decode((const uint8_t *)seg->base + off, alloc_len, 0, &eh, &key) == 0 &&
	       eh.seg_uuid == seg->uuid && eh.generation >= generation;
}

static void data_write(struct node_dconn *d, const struct wire_hdr *h, const uint8_t *body)
{
	struct node_data *sv = d->sv;
	struct rbuf r;

	rb_init(&r, body, h->body_len);
	uint32_t segment_id = rb_u32(&r);
	uint64_t generation = rb_u64(&r);
	uint64_t off = rb_u64(&r);
	uint64_t alloc_len = rb_u64(&r);
	uint64_t epoch = rb_u64(&r);
	const uint8_t *grant = rb_take(&r, WIRE_GRANT_LEN);
	if (!rb_ok(&r)) {
		ev_conn_discard_payload(d->c);
		data_reply(d, h, KVP_EPROTO);
		return;
	}
	/* Every refusal looks the same to the client: no valid grant for it.
	 * Only the master the segment is mounted at grants: a grant of an
	 * older leader (another epoch) is refused, whatever its MAC. */
	bool ok = sv->have_secret && segment_id == sv->segment_id && epoch == sv->grant_epoch &&
		  grant_ok(sv->secret, segment_id, generation, off, alloc_len, epoch, grant) &&
		  node_ctx_range_ok(sv->x, off, alloc_len) &&
		  (off & (sv->x->seg.align - 1)) == 0 &&
		  h->payload_len >= EXT_HDR_SIZE && h->payload_len <= alloc_len;
	/* A grant is good for one write: an extent that already holds a live
	 * header of this segment with the same or a newer generation (the put
	 * was written — replay after PUT_END, or an old grant for space since
	 * reused by another object) or that is being written right now is
	 * refused. Freed extents are tombstoned
	 * before the master reuses them, so fresh space never looks live. */
	if (ok && data_extent_taken(sv, off, alloc_len, generation))
		ok = false;
	if (!ok) {
		log_info("WRITE from %s refused: segment %u off %llu alloc_len %llu payload %llu "
			 "epoch %llu (mounted at %llu)", ev_conn_peer(d->c), segment_id,
			 (unsigned long long)off, (unsigned long long)alloc_len,
			 (unsigned long long)h->payload_len, (unsigned long long)epoch,
			 (unsigned long long)sv->grant_epoch);
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
	pw->next = sv->pwrites;
	if (sv->pwrites)
		sv->pwrites->prev = pw;
	sv->pwrites = pw;
	d->writing = true;
	ev_conn_recv_payload(d->c, (uint8_t *)sv->x->seg.base + off, h->payload_len, d);
}

/* The payload of a WRITE is in the segment (or the connection broke). */
static void data_on_payload(struct ev_conn *c, bool ok, void *arg)
{
	struct node_dconn *d = arg;
	struct node_data *sv = d->sv;
	struct node_ctx *x = sv->x;
	struct node_pwrite *pw = &d->pw;

	if (!d->writing)
		return;
	d->writing = false;
	pwrite_unlink(sv, pw);

	int status = 0;
	struct ext_hdr eh;
	const uint8_t *key;
	uint8_t *at = (uint8_t *)x->seg.base + pw->off;
	if (!ok) {
		status = KVP_EIO;
	} else if (pw->freed) {
		status = KVP_ESTALE;
	} else if (ext_decode(at, pw->alloc_len, x->conf->cluster.max_object_size, &eh, &key) != 0 ||
		   ext_size(eh.key_len, eh.value_len) > pw->req.payload_len ||
		   !wire_key_ok(key, eh.key_len)) {
		status = KVP_EINVAL;
	} else if (eh.generation != pw->generation || eh.seg_uuid != x->seg.uuid) {
		status = KVP_ESTALE;
	} else if (!tenant_may(dconn_tenant(d), key, eh.key_len, TENANT_WRITE)) {
		status = KVP_EPERM;	/* a grant for its key, an image of another's */
	}
	if (status) {
		/* Never leave a half-written or foreign image that a later scan
		 * or a local reader could take for a live extent. */
		data_kill_extent(sv, pw->off, pw->alloc_len, pw->generation);
		sv->st.writes_tombstoned++;
		log_info("WRITE at %llu from %s: %s, tombstoned", (unsigned long long)pw->off,
			 d->c ? ev_conn_peer(d->c) : "?", kvp_strerror(status));
	} else {
		/* Complete and checked: a restart may report it (before the
		 * reply, so that no PUT_END precedes the commit). */
		segmap_commit(&x->seg, pw->off, pw->generation);
		sv->st.bytes_written += pw->req.payload_len;
		x->used += pw->alloc_len;
		x->extents++;
	}
	if (ok && d->c) {
		data_reply(d, &pw->req, status);
		if (d->close_when_done)
			ev_conn_close_after_send(d->c);
	} else if (status && pw->req.opcode < WIRE_OP_MAX) {
		x->err[pw->req.opcode]++;
	}
	pwrite_done(pw);
	if (!d->c)
		dconn_maybe_free(d);
	node_ctx_progress(x);
}

/* RDMA_CONNECT: QPs connected to the client's, kept while this connection
 * lives. The connection then carries no frames (the client READs and WRITEs
 * one-sided), so it is exempt from the idle timeout; TCP keepalive notices
 * a client host that vanished. */
static void data_rdma_connect(struct node_dconn *d, const struct wire_hdr *h, const uint8_t *body)
{
	struct rdma_qps *q = NULL;
	struct wbuf rep;
	int rc, fd, on = 1, idle = 60, intvl = 10, cnt = 6;

	if (d->qps) {
		data_reply(d, h, KVP_EPROTO);	/* one set per connection */
		return;
	}
	/* One-sided RDMA bypasses every per-key check: trusted tenants only
	 * (docs/rdma-cuda-numa.md "RDMA and tenants"). */
	const struct tenant *t = dconn_tenant(d);
	if (t && !t->rdma_trusted) {
		log_info("RDMA_CONNECT from %s refused: tenant %s is not rdma=trusted",
			 ev_conn_peer(d->c), t->name);
		data_reply(d, h, KVP_EPERM);
		return;
	}
	wb_init(&rep);
	rc = node_rdma_connect(d->sv->rdma, body, h->body_len, &q, &rep);
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
	struct node_ctx *x = d->sv->x;

	if (h->opcode < WIRE_OP_MAX)
		x->req[h->opcode]++;
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
	if (d->revoked) {
		/* a reload removed its token: refused, then closed */
		if (h->payload_len)
			ev_conn_discard_payload(c);
		data_reply(d, h, KVP_EAUTH);
		ev_conn_close_after_send(c);
		return 0;
	}
	if (x->stopping) {
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

static void sread_conn_closed(struct node_dconn *d);

static void data_on_close(struct ev_conn *c)
{
	struct node_dconn *d = ev_conn_udata(c);
	struct node_data *sv = d->sv;

	if (d->writing) {
		/* on_payload(ok = false) normally ran already; if not, the
		 * partial image must not survive. */
		d->writing = false;
		pwrite_unlink(sv, &d->pw);
		data_kill_extent(sv, d->pw.off, d->pw.alloc_len, d->pw.generation);
		sv->st.writes_tombstoned++;
		pwrite_done(&d->pw);
	}
	/* The client's QP set goes with its control connection. */
	node_rdma_release(sv->rdma, d->qps);
	d->qps = NULL;
	d->c = NULL;
	dconn_unlink(d);
	sread_conn_closed(d);
	dconn_maybe_free(d);
	node_ctx_progress(sv->x);
}

static const struct ev_conn_ops data_ops = {
	.on_frame = data_on_frame,
	.on_payload = data_on_payload,
	.on_close = data_on_close,
};

/* ---- READ tier 1: streamed from the spill file ---- */

static void sread_pump(struct node_sread *sr);

/* Frees sr once nothing refers to it; and the connection if it is gone
 * too, unless the caller (its on_close) does that. */
static bool sread_maybe_end(struct node_sread *sr, bool free_conn)
{
	struct node_dconn *d = sr->d;

	if (sr->outstanding || !sr->finished)
		return false;
	d->sread = NULL;
	free(sr);
	if (free_conn)
		dconn_maybe_free(d);
	return true;
}

/* The stream is over (all queued, or failed): the connection may read its
 * next frame. */
static void sread_finish(struct node_sread *sr)
{
	struct node_dconn *d = sr->d;

	if (sr->finished)
		return;
	sr->finished = true;
	if (d->c) {
		ev_conn_pause(d->c, false);
		if (d->close_when_done)
			ev_conn_close_after_send(d->c);
	}
}

static void wake_waiters(struct node_data *sv)
{
	while (sv->sread_wait && spill_bufs_free(sv->spill)) {
		struct node_sread *sr = sv->sread_wait;
		sv->sread_wait = sr->wnext;
		sr->wnext = NULL;
		sr->waiting = false;
		sread_pump(sr);
		sread_maybe_end(sr, true);
	}
}

static void chunk_free(struct node_sread *sr, struct node_schunk *c)
{
	spill_buf_put(sr->d->sv->spill, c->buf);
	free(c);
	sr->outstanding--;
}

static void chunk_release(void *arg)
{
	struct node_schunk *c = arg;
	struct node_sread *sr = c->sr;
	struct node_data *sv = sr->d->sv;

	sr->d->sends--;
	sv->inflight_sends--;
	chunk_free(sr, c);
	sread_pump(sr);
	sread_maybe_end(sr, true);
	wake_waiters(sv);
	node_ctx_progress(sv->x);
}

/* A failure: before the reply header went out the client gets a status;
 * after, only closing tells it (a payload cannot be taken back). */
static void sread_fail(struct node_sread *sr, int status)
{
	struct node_dconn *d = sr->d;

	if (sr->failed)
		return;
	sr->failed = true;
	d->sv->x->err[WIRE_OP_READ]++;
	if (d->c && !sr->header_sent)
		ev_conn_reply(d->c, &sr->req, err_from_errno(status), NULL, 0);
	else if (d->c)
		ev_conn_close(d->c);
}

/* Queues the pieces that are in, in offset order; drops them after a
 * failure. */
static void sread_flush(struct node_sread *sr)
{
	struct node_dconn *d = sr->d;
	struct node_data *sv = d->sv;

	while (sr->sent < sr->issued) {
		struct node_schunk *c = sr->ch[sr->sent % SREAD_WINDOW];
		if (!c->done)
			break;
		sr->ch[sr->sent % SREAD_WINDOW] = NULL;
		sr->sent++;
		if (!sr->failed && (c->status || !d->c))
			sread_fail(sr, c->status ? c->status : -EIO);
		if (sr->failed) {
			chunk_free(sr, c);
			continue;
		}
		uint8_t frame[WIRE_HDR_SIZE];
		size_t flen = 0;
		if (!sr->header_sent) {
			struct wire_hdr rh = {
				.magic = WIRE_MAGIC,
				.version = WIRE_VERSION,
				.flags = WIRE_F_REPLY,
				.opcode = WIRE_OP_READ,
				.reqid = sr->req.reqid,
				.payload_len = sr->len,
			};
			wire_hdr_encode(&rh, frame);
			flen = sizeof(frame);
		}
		d->sends++;
		sv->inflight_sends++;
		if (ev_conn_send_ref(d->c, frame, flen, c->buf, c->len, chunk_release, c) < 0) {
			d->sends--;
			sv->inflight_sends--;
			sread_fail(sr, -EIO);
			chunk_free(sr, c);
			continue;
		}
		sr->header_sent = true;
		sv->st.bytes_read += c->len;
	}
	if (sr->failed || sr->sent * sr->piece >= sr->len)
		sread_finish(sr);
}

static void chunk_read_cb(void *arg, int status, uint64_t off, uint64_t len)
{
	struct node_schunk *c = arg;
	struct node_sread *sr = c->sr;

	c->done = true;
	c->status = status;
	sread_flush(sr);
	sread_pump(sr);
	sread_maybe_end(sr, true);
}

/* Starts reads of the next pieces, within the window and the pool. */
static void sread_pump(struct node_sread *sr)
{
	struct node_data *sv = sr->d->sv;

	while (!sr->failed && sr->d->c && sr->issued_bytes < sr->len &&
	       sr->issued - sr->sent < SREAD_WINDOW) {
		void *buf = spill_buf_get(sv->spill);
		if (!buf) {
			if (!sr->waiting) {
				sr->waiting = true;
				struct node_sread **pp = &sv->sread_wait;
				while (*pp)
					pp = &(*pp)->wnext;
				*pp = sr;
			}
			return;
		}
		struct node_schunk *c = calloc(1, sizeof(*c));
		if (!c) {
			spill_buf_put(sv->spill, buf);
			sread_fail(sr, -ENOMEM);
			sread_flush(sr);
			return;
		}
		uint64_t l = sr->len - sr->issued_bytes;
		if (l > sr->piece)
			l = sr->piece;
		c->sr = sr;
		c->buf = buf;
		c->len = (uint32_t)l;
		sr->ch[sr->issued % SREAD_WINDOW] = c;
		sr->issued++;
		sr->outstanding++;
		int rc = spill_read(sv->spill, sr->off + sr->issued_bytes, l, buf, chunk_read_cb, c);
		sr->issued_bytes += l;
		if (rc) {
			c->done = true;
			c->status = rc;
			sread_flush(sr);
		}
	}
}

static void sread_start(struct node_dconn *d, const struct wire_hdr *h, uint64_t off,
			uint64_t len)
{
	struct node_data *sv = d->sv;
	struct ext_found f;

	/* Only a live spill extent, and no more than it holds: the client
	 * asks for header + key + value of the replica the master named. */
	if (!sv->spill || d->sread || !spill_lookup(sv->spill, off, &f) || len == 0 ||
	    len > f.alloc_len) {
		sv->x->err[WIRE_OP_READ]++;
		ev_conn_reply(d->c, h, sv->spill ? KVP_ESTALE : KVP_ENOTSUP, NULL, 0);
		return;
	}
	/* the index knows the key: a tenant reads its own extents only */
	const struct tenant *t = dconn_tenant(d);
	if (t && !t->read_all && (len > ext_size(f.h.key_len, f.h.value_len) ||
				  !tenant_may(t, f.key, f.h.key_len, TENANT_READ))) {
		sv->x->err[WIRE_OP_READ]++;
		ev_conn_reply(d->c, h, KVP_EPERM, NULL, 0);
		return;
	}
	struct node_sread *sr = calloc(1, sizeof(*sr));
	if (!sr) {
		sv->x->err[WIRE_OP_READ]++;
		ev_conn_reply(d->c, h, KVP_ENOMEM, NULL, 0);
		return;
	}
	sr->d = d;
	sr->req = *h;
	sr->off = off;
	sr->len = len;
	sr->piece = spill_buf_size(sv->spill);
	d->sread = sr;
	/* Frames behind this one wait: their replies must not land in the
	 * middle of the streamed payload. */
	ev_conn_pause(d->c, true);
	sread_pump(sr);
	sread_maybe_end(sr, false);	/* on_frame still runs on d */
}

/* The connection closed (d->c is NULL now): pieces in flight end on their
 * own; the caller frees d when nothing refers to it. */
static void sread_conn_closed(struct node_dconn *d)
{
	struct node_sread *sr = d->sread;
	struct node_data *sv = d->sv;

	if (!sr)
		return;
	if (sr->waiting) {
		for (struct node_sread **pp = &sv->sread_wait; *pp; pp = &(*pp)->wnext)
			if (*pp == sr) {
				*pp = sr->wnext;
				break;
			}
		sr->waiting = false;
	}
	sr->failed = true;
	sread_flush(sr);
	sread_finish(sr);
	sread_maybe_end(sr, false);
}

/* ---- accepting ---- */

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
static void data_reject(struct node_data *sv, int fd)
{
	struct wire_hdr h = {
		.magic = WIRE_MAGIC,
		.version = WIRE_VERSION,
		.flags = WIRE_F_REPLY,
		.opcode = WIRE_OP_HELLO,
		.status = KVP_ELIMIT,
	};
	struct ev_conn_limits lim = { .max_body = DATA_MAX_BODY, .idle_ms = 5000 };
	uint8_t frame[WIRE_HDR_SIZE];

	sv->st.conns_rejected++;
	struct ev_conn *c = ev_conn_create(sv->x->loop, fd, &reject_ops, &lim, sv);
	if (!c)
		return;
	if (sv->x->tls_srv && ev_conn_start_tls(c, sv->x->tls_srv) < 0) {
		ev_conn_close(c);
		return;
	}
	wire_hdr_encode(&h, frame);
	ev_conn_send(c, frame, sizeof(frame));
	ev_conn_close_after_send(c);
}

static void data_accept_resume(struct ev_loop *loop, void *arg)
{
	struct node_data *sv = arg;

	if (sv->listen_fd >= 0)
		ev_mod_fd(loop, sv->listen_fd, EPOLLIN);
}

static void data_on_accept(struct ev_loop *loop, int fd, uint32_t events, void *arg)
{
	struct node_data *sv = arg;

	for (int i = 0; i < 64; i++) {
		int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (cfd < 0) {
			int err = errno;
			if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
				/* The pending connection stays readable: without a
				 * pause the loop would spin on it. */
				log_warn("data server accept: %s; pausing accepts for %d ms",
					 strerror(err), DATA_ACCEPT_PAUSE_MS);
				ev_mod_fd(loop, fd, 0);
				ev_timer_add(loop, DATA_ACCEPT_PAUSE_MS, false, data_accept_resume, sv);
			} else if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR &&
				   err != ECONNABORTED) {
				log_warn("data server accept: %s", strerror(err));
			}
			return;
		}
		if (sv->x->stopping) {
			close(cfd);
			continue;
		}
		if ((int64_t)sv->ndconns >= sv->x->conf->node.max_connections) {
			data_reject(sv, cfd);
			continue;
		}
		node_data_adopt(sv, cfd);
	}
}

int node_data_adopt(struct node_data *sv, int fd)
{
	const struct kvp_conf *conf = sv->x->conf;
	struct node_dconn *d = calloc(1, sizeof(*d));
	if (!d) {
		close(fd);
		return -ENOMEM;
	}
	/* Payloads are extent images: the largest object with the longest
	 * key, and never more than the segment. Bodies are small. */
	uint64_t max_payload = ext_size(KVP_MAX_KEY, conf->cluster.max_object_size);
	uint64_t max_body = conf->cluster.max_frame;
	struct ev_conn_limits lim = {
		.max_body = max_body && max_body < DATA_MAX_BODY ? (uint32_t)max_body :
			    DATA_MAX_BODY,
		.max_payload = max_payload < sv->x->seg.size ? max_payload : sv->x->seg.size,
		.idle_ms = DATA_IDLE_MS,
	};
	d->sv = sv;
	d->tenant = -1;
	d->created_ms = ev_now(sv->x->loop);
	d->c = ev_conn_create(sv->x->loop, fd, &data_ops, &lim, d);	/* closes fd on failure */
	if (!d->c) {
		free(d);
		return -ENOMEM;
	}

	d->next = sv->dconns;
	if (sv->dconns)
		sv->dconns->prev = d;
	sv->dconns = d;
	sv->ndconns++;
	sv->st.conns_total++;
	if (sv->x->tls_srv && ev_conn_start_tls(d->c, sv->x->tls_srv) < 0) {
		ev_conn_close(d->c);	/* data_on_close unlinks and frees d */
		return -ENOMEM;
	}
	return 0;
}

/* ---- the server ---- */

struct node_data *node_data_create(struct node_ctx *x, const char *listen_addr, uint64_t epoch,
				   struct node_rdma *rdma, char *err, size_t errlen)
{
	struct node_data *sv = calloc(1, sizeof(*sv));

	if (!sv) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	sv->x = x;
	sv->rdma = rdma;
	sv->epoch = epoch;
	sv->listen_fd = -1;
	snprintf(sv->listen_addr, sizeof(sv->listen_addr), "%s", listen_addr);
	/* A client sends HELLO right after connecting; one that has not within
	 * its own operation timeout is broken or a slow-loris. */
	sv->hello_ms = x->conf->client.timeout;
	if (sv->hello_ms < DATA_HELLO_MIN_MS)
		sv->hello_ms = DATA_HELLO_MIN_MS;
	if (sv->hello_ms > DATA_HELLO_MAX_MS)
		sv->hello_ms = DATA_HELLO_MAX_MS;

	if (x->conf->cluster.tenants_file[0]) {
		if (tenant_load_cluster(&sv->tenants, x->conf->cluster.tenants_file,
					x->conf->cluster.token, err, errlen))
			goto out_free;
		sv->tenants_on = true;
	}
	int fd = net_listen(sv->listen_addr, err, errlen);
	if (fd < 0)
		goto out_tenants;
	int r = ev_add_fd(x->loop, fd, EPOLLIN, data_on_accept, sv);
	if (r < 0) {
		snprintf(err, errlen, "%s: cannot watch the listener: %s", sv->listen_addr,
			 strerror(-r));
		close(fd);
		goto out_free;
	}
	sv->listen_fd = fd;
	sv->port = net_local_port(fd);
	return sv;

out_tenants:
	tenant_tab_free(&sv->tenants);
out_free:
	free(sv);
	return NULL;
}

int node_data_reload_tenants(struct node_data *sv, char *err, size_t errlen)
{
	struct tenant_tab nt;
	unsigned revoked = 0;

	if (!sv->tenants_on)
		return 0;
	if (tenant_load_cluster(&nt, sv->x->conf->cluster.tenants_file, sv->x->conf->cluster.token,
				err, errlen))
		return KVP_EINVAL;
	for (struct node_dconn *d = sv->dconns, *next; d; d = next) {
		next = d->next;
		if (d->tenant < 0)
			continue;
		const struct tenant *o = &sv->tenants.v[d->tenant];
		const struct tenant *n = tenant_find_name(&nt, o->name);
		if (n && n->token_len == o->token_len && !memcmp(n->token, o->token, o->token_len) &&
		    (n->rdma_trusted || !d->qps)) {
			d->tenant = (int)(n - nt.v);
			continue;
		}
		d->tenant = -1;
		d->revoked = true;
		revoked++;
		if (d->qps && d->c)
			ev_conn_close(d->c);	/* one-sided access ends with its QPs */
	}
	tenant_tab_free(&sv->tenants);
	sv->tenants = nt;
	log_notice("tenants: reloaded %zu from %s; %u data connection(s) revoked", nt.n - 1,
		   sv->x->conf->cluster.tenants_file, revoked);
	return 0;
}

void node_data_destroy(struct node_data *sv)
{
	if (!sv)
		return;
	node_data_stop_accepting(sv);
	tenant_tab_free(&sv->tenants);
	free(sv);
}

int node_data_bound_port(const struct node_data *sv)
{
	return sv->port;
}

void node_data_set_spill(struct node_data *sv, struct spill *sp)
{
	sv->spill = sp;
}

void node_data_set_grant(struct node_data *sv, uint32_t segment_id,
			 const uint8_t secret[WIRE_SECRET_LEN], uint64_t epoch)
{
	sv->segment_id = segment_id;
	sv->grant_epoch = epoch;
	memcpy(sv->secret, secret, WIRE_SECRET_LEN);
	sv->have_secret = true;
}

void node_data_stop_accepting(struct node_data *sv)
{
	if (sv->listen_fd < 0)
		return;
	ev_del_fd(sv->x->loop, sv->listen_fd);
	close(sv->listen_fd);
	sv->listen_fd = -1;
}

void node_data_drain(struct node_data *sv)
{
	for (struct node_dconn *d = sv->dconns, *next; d; d = next) {
		next = d->next;
		if (d->writing || d->sread)
			d->close_when_done = true;
		else
			ev_conn_close_after_send(d->c);	/* queued READ bytes still go out */
	}
}

void node_data_close_all(struct node_data *sv)
{
	for (struct node_dconn *d = sv->dconns, *next; d; d = next) {
		next = d->next;
		ev_conn_close(d->c);
	}
}

void node_data_sweep(struct node_data *sv)
{
	uint64_t now = ev_now(sv->x->loop);

	for (struct node_dconn *d = sv->dconns, *next; d; d = next) {
		next = d->next;
		if (!d->authed && now - d->created_ms > sv->hello_ms) {
			log_info("data connection from %s: no HELLO in %llu ms, closed",
				 ev_conn_peer(d->c), (unsigned long long)sv->hello_ms);
			sv->st.conns_timed_out++;
			ev_conn_close(d->c);
		}
	}
}

bool node_data_free(struct node_data *sv, uint64_t off, uint64_t generation, struct node_wait *w)
{
	struct segment *seg = &sv->x->seg;
	bool found = false;

	for (struct node_pwrite *pw = sv->pwrites; pw; pw = pw->next) {
		if (pw->off != off || pw->generation != generation)
			continue;
		found = true;
		pw->freed = true;
		if (!pw->fw) {
			pw->fw = w;
			node_wait_hold(w);
		}
	}
	if (found)
		return true;	/* killed when its payload is in */

	struct ext_hdr eh;
	const uint8_t *key;
	uint8_t *at = (uint8_t *)seg->base + off;
	/* Only the extent the master means: a header that decodes with its
	 * generation. Anything else was already reused or killed. */
	if (ext_decode(at, seg->size - off, seg->size, &eh, &key) != 0 ||
	    eh.generation != generation || eh.seg_uuid != seg->uuid)
		return false;
	uint64_t len = ext_size(eh.key_len, eh.value_len);
	len = (len + seg->align - 1) & ~(uint64_t)(seg->align - 1);
	/* Tombstone, then the byte: dying in between leaves a byte on a
	 * tombstone, which the next scan clears. The master reuses the
	 * space only once this FREE is answered. */
	ext_tombstone(at);
	segmap_uncommit(seg, off);
	sv->x->used = sv->x->used > len ? sv->x->used - len : 0;
	if (sv->x->extents)
		sv->x->extents--;
	return true;
}

size_t node_data_conns(const struct node_data *sv)
{
	return sv->ndconns;
}

uint64_t node_data_sends(const struct node_data *sv)
{
	return sv->inflight_sends;
}

bool node_data_writing(const struct node_data *sv)
{
	return sv->pwrites != NULL;
}

const struct node_data_stats *node_data_stats(const struct node_data *sv)
{
	return &sv->st;
}

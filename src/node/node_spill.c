/* node_spill: kvpool-node's side of the spill tier (src/node/spill.c does the
 * I/O) — opens and scans the spill file at start (memory-only when that
 * fails), answers the master's DEMOTE and PROMOTE, tombstones spill extents
 * on FREE tier 1, holds a FREE of a memory extent until a demotion reading
 * it is done, and streams READ tier 1 to clients from registered buffers.
 * Runs on the node's loop thread (spill completions come through an eventfd
 * on the loop).
 */
#include "node_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "extent.h"
#include "kvpool.h"
#include "log.h"
#include "net.h"

/* A streamed READ moves in pieces of SPILL_PIECE bytes, up to SREAD_WINDOW
 * of them in flight: small enough that the socket is busy with the first
 * pieces while the disk reads the next ones, large enough for the disk. */
#define SPILL_PIECE (256u << 10)
#define SREAD_WINDOW 8
#define SPILL_POOL_BUFS 64	/* registered SPILL_PIECE read buffers: 16 MiB */

/* One item of a DEMOTE or PROMOTE batch being executed. */
struct node_ditem {
	struct node_dreq *r;
	uint32_t idx;
	uint64_t off, generation;	/* the memory extent */
	struct node_fwait *fw;		/* a FREE of it waits for this copy */
	struct node_ditem *prev, *next;	/* n->demotes (DEMOTE only) */
};

/* A DEMOTE or PROMOTE request from the master, answered when every item is. */
struct node_dreq {
	struct node *n;
	struct wire_hdr req;
	uint64_t mconn_gen;
	uint32_t count, pending;
	struct {
		int32_t status;
		uint64_t off, len;
	} *res;
	struct node_ditem *items;
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
	uint64_t issued_bytes;
	uint32_t issued, sent;		/* pieces */
	struct node_schunk *ch[SREAD_WINDOW];	/* [seq % WINDOW] for sent..issued */
	uint32_t outstanding;		/* pieces read or being sent */
	bool header_sent, failed, finished, waiting;
	struct node_sread *wnext;	/* n->sread_wait */
};

/* ---- open / close ---- */

static void spill_on_event(struct ev_loop *loop, int fd, uint32_t events, void *arg)
{
	struct node *n = arg;

	spill_complete(n->spill);
}

/* Scan callback: the start-up listing, counted for the log line. */
static int spill_scan_cb(const struct ext_found *f, void *arg)
{
	return 0;
}

void node_spill_open(struct node *n)
{
	const struct kvp_conf *c = &n->conf;
	char err[512] = "";
	int rc = 0;

	if (!c->spill.path[0] || !c->spill.size)
		return;
	struct spill_opts o = {
		.path = c->spill.path,
		.size = c->spill.size,
		.direct_io = c->spill.direct_io,
		.queue_depth = (unsigned)c->spill.queue_depth,
		.nbufs = SPILL_POOL_BUFS,
		.buf_size = SPILL_PIECE,
		.name = n->name,
		.max_value = c->cluster.max_object_size,
	};
	struct spill *sp = spill_open(&o, &rc, err, sizeof(err));
	if (!sp) {
		/* A disk tier is an optimisation: the node still serves memory. */
		log_err("%s; running memory-only", err);
		return;
	}
	if (!spill_created(sp)) {
		struct ext_scan_stats st;
		uint64_t t0 = net_now_ms();
		rc = spill_scan(sp, spill_scan_cb, NULL, &st);
		if (rc < 0) {
			log_err("spill file %s: scan failed: %s; running memory-only", o.path,
				strerror(-rc));
			spill_close(sp);
			return;
		}
		log_notice("scanned spill file %s: %llu extents (%llu bytes), %llu tombstones, "
			   "%llu damaged, in %llu ms", o.path, (unsigned long long)st.live,
			   (unsigned long long)st.live_bytes, (unsigned long long)st.tombstones,
			   (unsigned long long)st.bad_checksum,
			   (unsigned long long)(net_now_ms() - t0));
	}
	if (ev_add_fd(n->loop, spill_event_fd(sp), EPOLLIN, spill_on_event, n) < 0) {
		log_err("spill file %s: cannot watch its completions; running memory-only", o.path);
		spill_close(sp);
		return;
	}
	n->spill = sp;
}

void node_spill_close(struct node *n)
{
	if (!n->spill)
		return;
	/* Callbacks of what is still in flight run here (with the master
	 * link and the connections already gone). */
	spill_close(n->spill);
	n->spill = NULL;
}

uint64_t node_spill_capacity(const struct node *n)
{
	struct spill_stats st;

	if (!n->spill)
		return 0;
	spill_stats(n->spill, &st);
	return st.capacity;
}

uint64_t node_spill_used(const struct node *n)
{
	struct spill_stats st;

	if (!n->spill)
		return 0;
	spill_stats(n->spill, &st);
	return st.used;
}

void node_spill_metrics(struct node *n, struct sbuf *b)
{
	if (n->spill)
		spill_metrics(n->spill, b);
}

int node_spill_foreach(struct node *n, int (*cb)(const struct ext_found *f, void *arg), void *arg)
{
	return n->spill ? spill_foreach(n->spill, cb, arg) : 0;
}

/* ---- DEMOTE / PROMOTE ---- */

static void dreq_reply(struct node_dreq *r)
{
	struct node *n = r->n;

	if (n->mconn && r->mconn_gen == n->mconn_gen) {
		struct wbuf b;

		wb_init(&b);
		wb_u32(&b, r->count);
		for (uint32_t i = 0; i < r->count; i++) {
			wb_i32(&b, r->res[i].status);
			if (r->req.opcode == WIRE_OP_DEMOTE) {
				wb_u64(&b, r->res[i].off);
				wb_u64(&b, r->res[i].len);
			}
		}
		if (b.oom)
			ev_conn_close(n->mconn);
		else
			ev_conn_reply(n->mconn, &r->req, 0, b.p, b.len);
		wb_free(&b);
	} else if (r->req.opcode == WIRE_OP_DEMOTE && n->spill) {
		/* The master that asked is gone and will never learn of these
		 * copies: drop them (a re-mount reports what is in the index). */
		for (uint32_t i = 0; i < r->count; i++)
			if (r->res[i].status == 0)
				spill_free(n->spill, r->res[i].off, r->items[i].generation, NULL, NULL);
	}
	free(r->res);
	free(r->items);
	free(r);
}

static void ditem_unlink(struct node *n, struct node_ditem *it)
{
	if (it->prev)
		it->prev->next = it->next;
	else if (n->demotes == it)
		n->demotes = it->next;
	if (it->next)
		it->next->prev = it->prev;
	it->prev = it->next = NULL;
}

static void ditem_done(struct node_ditem *it, int status, uint64_t off, uint64_t len)
{
	struct node_dreq *r = it->r;
	struct node *n = r->n;

	r->res[it->idx].status = err_from_errno(status);
	r->res[it->idx].off = off;
	r->res[it->idx].len = len;
	if (status && r->req.opcode < WIRE_OP_MAX)
		n->st.err[r->req.opcode]++;
	if (r->req.opcode == WIRE_OP_DEMOTE)
		ditem_unlink(n, it);
	struct node_fwait *fw = it->fw;
	it->fw = NULL;
	/* The copy is done: a FREE of its source may be answered now, after
	 * the DEMOTE reply when that is complete (it frees r and it). */
	if (--r->pending == 0)
		dreq_reply(r);
	if (fw && --fw->waiting == 0)
		node_master_free_done(n, fw);
}

static void demote_cb(void *arg, int status, uint64_t off, uint64_t len)
{
	ditem_done(arg, status, off, len);
}

static void promote_cb(void *arg, int status, uint64_t off, uint64_t len)
{
	struct node_ditem *it = arg;
	struct node *n = it->r->n;

	if (status == 0) {
		uint64_t alen = it->r->res[it->idx].len;	/* the memory extent */
		n->used += alen;
		n->extents++;
	}
	ditem_done(it, status, 0, 0);
}

/* Is [off, off+len) an aligned extent range inside the segment's data area? */
static bool mem_range_ok(const struct node *n, uint64_t off, uint64_t len)
{
	return off >= SEG_DATA_OFF && off < n->seg.size && len > 0 && len <= n->seg.size - off &&
	       (off & (n->seg.align - 1)) == 0;
}

static void on_dreq(struct node *n, const struct wire_hdr *h, const uint8_t *body, bool demote)
{
	struct rbuf r;

	rb_init(&r, body, h->body_len);
	uint32_t segment_id = rb_u32(&r);
	uint32_t cnt = rb_count(&r, demote ? 16 : 32);
	if (!rb_ok(&r)) {
		n->st.err[h->opcode]++;
		ev_conn_reply(n->mconn, h, KVP_EPROTO, NULL, 0);
		return;
	}
	if (segment_id != n->segment_id || n->mstate < NODE_M_UP) {
		n->st.err[h->opcode]++;
		ev_conn_reply(n->mconn, h, KVP_ENOSEG, NULL, 0);
		return;
	}
	struct node_dreq *q = calloc(1, sizeof(*q));
	if (q) {
		q->res = calloc(cnt ? cnt : 1, sizeof(*q->res));
		q->items = calloc(cnt ? cnt : 1, sizeof(*q->items));
	}
	if (!q || !q->res || !q->items) {
		if (q) {
			free(q->res);
			free(q->items);
			free(q);
		}
		ev_conn_reply(n->mconn, h, KVP_ENOMEM, NULL, 0);
		return;
	}
	q->n = n;
	q->req = *h;
	q->mconn_gen = n->mconn_gen;
	q->count = cnt;
	q->pending = cnt + 1;	/* held until every item is started */
	for (uint32_t i = 0; i < cnt; i++) {
		struct node_ditem *it = &q->items[i];
		int rc;

		it->r = q;
		it->idx = i;
		if (demote) {
			it->off = rb_u64(&r);
			it->generation = rb_u64(&r);
			if (!n->spill) {
				rc = -ENOTSUP;
			} else if (!mem_range_ok(n, it->off, EXT_HDR_SIZE)) {
				rc = -ESTALE;	/* no extent of ours there */
			} else {
				/* Linked first: a FREE of this memory extent that
				 * arrives while the copy runs waits for it. */
				it->next = n->demotes;
				if (n->demotes)
					n->demotes->prev = it;
				n->demotes = it;
				rc = spill_demote(n->spill, (uint8_t *)n->seg.base + it->off,
						  n->seg.size - it->off, it->generation, demote_cb, it);
				if (rc)
					ditem_unlink(n, it);
			}
		} else {
			uint64_t soff = rb_u64(&r);
			it->generation = rb_u64(&r);
			it->off = rb_u64(&r);
			uint64_t alen = rb_u64(&r);
			q->res[i].len = alen;
			if (!n->spill)
				rc = -ENOTSUP;
			else if (!mem_range_ok(n, it->off, alen))
				rc = -ERANGE;
			else
				rc = spill_promote(n->spill, soff, it->generation,
						   (uint8_t *)n->seg.base + it->off, alen, n->seg.uuid,
						   promote_cb, it);
		}
		if (rc) {
			if (rc == -ENOTSUP) {
				q->res[i].status = KVP_ENOTSUP;
				q->pending--;
				continue;
			}
			ditem_done(it, rc, 0, 0);
		}
	}
	if (--q->pending == 0)
		dreq_reply(q);
}

void node_spill_on_demote(struct node *n, const struct wire_hdr *h, const uint8_t *body)
{
	on_dreq(n, h, body, true);
}

void node_spill_on_promote(struct node *n, const struct wire_hdr *h, const uint8_t *body)
{
	on_dreq(n, h, body, false);
}

/* ---- FREE ---- */

bool node_spill_mem_freed(struct node *n, uint64_t off, uint64_t generation,
			  struct node_fwait *fw)
{
	bool found = false;

	for (struct node_ditem *it = n->demotes; it; it = it->next) {
		if (it->off != off || it->generation != generation || it->fw)
			continue;
		it->fw = fw;
		fw->waiting++;
		found = true;
	}
	return found;
}

static void free_cb(void *arg, int status, uint64_t off, uint64_t len)
{
	struct node_fwait *fw = arg;
	struct node *n = fw->node;

	if (status)
		log_warn("spill: tombstoning the extent at %llu: %s", (unsigned long long)off,
			 strerror(-status));
	if (--fw->waiting == 0)
		node_master_free_done(n, fw);
}

bool node_spill_free(struct node *n, uint64_t off, uint64_t generation, struct node_fwait *fw)
{
	if (!n->spill)
		return false;
	fw->node = n;
	if (spill_free(n->spill, off, generation, free_cb, fw) < 0)
		return false;
	fw->waiting++;		/* answered once the tombstone is on disk */
	return true;
}

/* ---- READ tier 1: streaming ---- */

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
		node_data_maybe_free(d);
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

static void wake_waiters(struct node *n)
{
	while (n->sread_wait && spill_bufs_free(n->spill)) {
		struct node_sread *sr = n->sread_wait;
		n->sread_wait = sr->wnext;
		sr->wnext = NULL;
		sr->waiting = false;
		sread_pump(sr);
		sread_maybe_end(sr, true);
	}
}

static void chunk_free(struct node_sread *sr, struct node_schunk *c)
{
	spill_buf_put(sr->d->n->spill, c->buf);
	free(c);
	sr->outstanding--;
}

static void chunk_release(void *arg)
{
	struct node_schunk *c = arg;
	struct node_sread *sr = c->sr;
	struct node *n = sr->d->n;

	sr->d->sends--;
	n->inflight_sends--;
	chunk_free(sr, c);
	sread_pump(sr);
	sread_maybe_end(sr, true);
	wake_waiters(n);
	if (n->stopping)
		node_drain_step(n);
}

/* A failure: before the reply header went out the client gets a status;
 * after, only closing tells it (a payload cannot be taken back). */
static void sread_fail(struct node_sread *sr, int status)
{
	struct node_dconn *d = sr->d;

	if (sr->failed)
		return;
	sr->failed = true;
	d->n->st.err[WIRE_OP_READ]++;
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
	struct node *n = d->n;

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
		n->inflight_sends++;
		if (ev_conn_send_ref(d->c, frame, flen, c->buf, c->len, chunk_release, c) < 0) {
			d->sends--;
			n->inflight_sends--;
			sread_fail(sr, -EIO);
			chunk_free(sr, c);
			continue;
		}
		sr->header_sent = true;
		n->st.bytes_read += c->len;
	}
	if (sr->failed || sr->sent * (uint64_t)SPILL_PIECE >= sr->len)
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
	struct node *n = sr->d->n;

	while (!sr->failed && sr->d->c && sr->issued_bytes < sr->len &&
	       sr->issued - sr->sent < SREAD_WINDOW) {
		void *buf = spill_buf_get(n->spill);
		if (!buf) {
			if (!sr->waiting) {
				sr->waiting = true;
				struct node_sread **pp = &n->sread_wait;
				while (*pp)
					pp = &(*pp)->wnext;
				*pp = sr;
			}
			return;
		}
		struct node_schunk *c = calloc(1, sizeof(*c));
		if (!c) {
			spill_buf_put(n->spill, buf);
			sread_fail(sr, -ENOMEM);
			sread_flush(sr);
			return;
		}
		uint64_t l = sr->len - sr->issued_bytes;
		if (l > SPILL_PIECE)
			l = SPILL_PIECE;
		c->sr = sr;
		c->buf = buf;
		c->len = (uint32_t)l;
		sr->ch[sr->issued % SREAD_WINDOW] = c;
		sr->issued++;
		sr->outstanding++;
		int rc = spill_read(n->spill, sr->off + sr->issued_bytes, l, buf, chunk_read_cb, c);
		sr->issued_bytes += l;
		if (rc) {
			c->done = true;
			c->status = rc;
			sread_flush(sr);
		}
	}
}

void node_spill_read(struct node_dconn *d, const struct wire_hdr *h, uint64_t off, uint64_t len)
{
	struct node *n = d->n;
	struct ext_found f;

	/* Only a live spill extent, and no more than it holds: the client
	 * asks for header + key + value of the replica the master named. */
	if (!n->spill || d->sread || !spill_lookup(n->spill, off, &f) || len == 0 ||
	    len > f.alloc_len) {
		n->st.err[WIRE_OP_READ]++;
		ev_conn_reply(d->c, h, n->spill ? KVP_ESTALE : KVP_ENOTSUP, NULL, 0);
		return;
	}
	struct node_sread *sr = calloc(1, sizeof(*sr));
	if (!sr) {
		n->st.err[WIRE_OP_READ]++;
		ev_conn_reply(d->c, h, KVP_ENOMEM, NULL, 0);
		return;
	}
	sr->d = d;
	sr->req = *h;
	sr->off = off;
	sr->len = len;
	d->sread = sr;
	/* Frames behind this one wait: their replies must not land in the
	 * middle of the streamed payload. */
	ev_conn_pause(d->c, true);
	sread_pump(sr);
	sread_maybe_end(sr, false);	/* on_frame still runs on d */
}

/* The connection closed (d->c is NULL now): pieces in flight end on their
 * own; the caller frees d when nothing refers to it. */
void node_spill_conn_closed(struct node_dconn *d)
{
	struct node_sread *sr = d->sread;
	struct node *n = d->n;

	if (!sr)
		return;
	if (sr->waiting) {
		for (struct node_sread **pp = &n->sread_wait; *pp; pp = &(*pp)->wnext)
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

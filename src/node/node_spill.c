/* node_spill: kvpool-node's side of the spill tier (see node_spill.h;
 * src/node/spill.c does the I/O) — opens and scans the spill file at start,
 * executes DEMOTE and PROMOTE batches, tombstones spill extents on FREE
 * tier 1 and holds a FREE of a memory extent until a demotion reading it is
 * done. Runs on the node's loop thread.
 */
#include "node_spill.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "errors.h"
#include "kvpool.h"
#include "log.h"
#include "segmap.h"
#include "spill.h"

/* The read buffers the data server streams READ tier 1 through: 64 of
 * 256 KiB, 16 MiB registered. */
#define SPILL_PIECE (256u << 10)
#define SPILL_POOL_BUFS 64

/* One item of a DEMOTE or PROMOTE batch being executed. */
struct node_ditem {
	struct node_dreq *r;
	uint32_t idx;
	uint64_t off, generation;	/* the memory extent */
	struct node_wait *fw;		/* a FREE of it waits for this copy */
	struct node_ditem *prev, *next;	/* s->demotes (DEMOTE only) */
};

/* A DEMOTE or PROMOTE request from the master, answered when every item is. */
struct node_dreq {
	struct node_spillside *s;
	struct wire_hdr req;
	uint64_t conn;			/* the master connection it came on */
	node_spill_reply_fn reply;
	void *reply_arg;
	uint32_t count, pending;
	struct {
		int32_t status;
		uint64_t off, len;
	} *res;
	struct node_ditem *items;
};

struct node_spillside {
	struct node_ctx *x;
	struct spill *spill;		/* NULL: memory-only */
	struct node_ditem *demotes;	/* DEMOTE items copying from the segment */
};

/* ---- open / close ---- */

static void spill_on_event(struct ev_loop *loop, int fd, uint32_t events, void *arg)
{
	struct node_spillside *s = arg;

	spill_complete(s->spill);
}

/* Scan callback: the start-up listing, counted for the log line. */
static int spill_scan_cb(const struct ext_found *f, void *arg)
{
	return 0;
}

struct node_spillside *node_spill_create(struct node_ctx *x)
{
	struct node_spillside *s = calloc(1, sizeof(*s));

	if (s)
		s->x = x;
	return s;
}

void node_spill_destroy(struct node_spillside *s)
{
	free(s);
}

void node_spill_open(struct node_spillside *s, const char *name)
{
	const struct kvp_conf *c = s->x->conf;
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
		.name = name,
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
		uint64_t t0 = clock_now_ms();
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
			   (unsigned long long)(clock_now_ms() - t0));
	}
	if (ev_add_fd(s->x->loop, spill_event_fd(sp), EPOLLIN, spill_on_event, s) < 0) {
		log_err("spill file %s: cannot watch its completions; running memory-only", o.path);
		spill_close(sp);
		return;
	}
	s->spill = sp;
}

void node_spill_close(struct node_spillside *s)
{
	if (!s->spill)
		return;
	/* Callbacks of what is still in flight run here (with the master
	 * link and the connections already gone). */
	spill_close(s->spill);
	s->spill = NULL;
}

struct spill *node_spill_file(const struct node_spillside *s)
{
	return s->spill;
}

uint64_t node_spill_capacity(const struct node_spillside *s)
{
	struct spill_stats st;

	if (!s->spill)
		return 0;
	spill_stats(s->spill, &st);
	return st.capacity;
}

uint64_t node_spill_used(const struct node_spillside *s)
{
	struct spill_stats st;

	if (!s->spill)
		return 0;
	spill_stats(s->spill, &st);
	return st.used;
}

void node_spill_metrics(const struct node_spillside *s, struct sbuf *b)
{
	if (s->spill)
		spill_metrics(s->spill, b);
}

int node_spill_foreach(struct node_spillside *s,
		       int (*cb)(const struct ext_found *f, void *arg), void *arg)
{
	if (!s->spill)
		return 0;
	spill_wait_idle(s->spill);
	return spill_foreach(s->spill, cb, arg);
}

/* ---- DEMOTE / PROMOTE ---- */

static void dreq_reply(struct node_dreq *r)
{
	struct node_spillside *s = r->s;
	struct wbuf b;

	wb_init(&b);
	wb_u32(&b, r->count);
	for (uint32_t i = 0; i < r->count; i++) {
		wb_status(&b, r->res[i].status);
		if (r->req.opcode == WIRE_OP_DEMOTE) {
			wb_u64(&b, r->res[i].off);
			wb_u64(&b, r->res[i].len);
		}
	}
	bool delivered = r->reply(r->reply_arg, r->conn, &r->req, b.oom ? NULL : b.p,
				  b.oom ? 0 : b.len);
	wb_free(&b);
	if (!delivered && r->req.opcode == WIRE_OP_DEMOTE && s->spill) {
		/* The master that asked is gone and will never learn of these
		 * copies: drop them (a re-mount reports what is in the index). */
		for (uint32_t i = 0; i < r->count; i++)
			if (r->res[i].status == 0)
				spill_free(s->spill, r->res[i].off, r->items[i].generation, NULL, NULL);
	}
	free(r->res);
	free(r->items);
	free(r);
}

static void ditem_unlink(struct node_spillside *s, struct node_ditem *it)
{
	if (it->prev)
		it->prev->next = it->next;
	else if (s->demotes == it)
		s->demotes = it->next;
	if (it->next)
		it->next->prev = it->prev;
	it->prev = it->next = NULL;
}

static void ditem_done(struct node_ditem *it, int status, uint64_t off, uint64_t len)
{
	struct node_dreq *r = it->r;
	struct node_spillside *s = r->s;

	r->res[it->idx].status = err_from_errno(status);
	r->res[it->idx].off = off;
	r->res[it->idx].len = len;
	if (status && r->req.opcode < WIRE_OP_MAX)
		s->x->err[r->req.opcode]++;
	if (r->req.opcode == WIRE_OP_DEMOTE)
		ditem_unlink(s, it);
	struct node_wait *fw = it->fw;
	it->fw = NULL;
	/* The copy is done: a FREE of its source may be answered now, after
	 * the DEMOTE reply when that is complete (it frees r and it). */
	if (--r->pending == 0)
		dreq_reply(r);
	if (fw)
		node_wait_release(fw);
}

static void demote_cb(void *arg, int status, uint64_t off, uint64_t len)
{
	ditem_done(arg, status, off, len);
}

static void promote_cb(void *arg, int status, uint64_t off, uint64_t len)
{
	struct node_ditem *it = arg;
	struct node_ctx *x = it->r->s->x;

	if (status == 0) {
		uint64_t alen = it->r->res[it->idx].len;	/* the memory extent */
		/* Verified and re-headed for this segment: a restart may
		 * report it. */
		segmap_commit(&x->seg, it->off, it->generation);
		x->used += alen;
		x->extents++;
	}
	ditem_done(it, status, 0, 0);
}

/* Is [off, off+len) an aligned extent range inside the segment's data area? */
static bool mem_range_ok(const struct node_ctx *x, uint64_t off, uint64_t len)
{
	return node_ctx_range_ok(x, off, len) && (off & (x->seg.align - 1)) == 0;
}

/* Starts one DEMOTE item: 0 (demote_cb follows) or a negative errno now. */
static int demote_item(struct node_spillside *s, struct node_ditem *it)
{
	const struct segment *seg = &s->x->seg;
	int rc;

	if (!s->spill)
		return -ENOTSUP;
	if (!mem_range_ok(s->x, it->off, EXT_HDR_SIZE))
		return -ESTALE;	/* no extent of ours there */
	/* Linked first: a FREE of this memory extent that arrives while the
	 * copy runs waits for it. */
	it->next = s->demotes;
	if (s->demotes)
		s->demotes->prev = it;
	s->demotes = it;
	rc = spill_demote(s->spill, (uint8_t *)seg->base + it->off, seg->size - it->off,
			  it->generation, demote_cb, it);
	if (rc)
		ditem_unlink(s, it);
	return rc;
}

int node_spill_batch(struct node_spillside *s, bool demote, const struct wire_hdr *h,
		     struct rbuf *r, uint32_t cnt, uint64_t conn, node_spill_reply_fn reply,
		     void *arg)
{
	const struct segment *seg = &s->x->seg;
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
		return -ENOMEM;
	}
	q->s = s;
	q->req = *h;
	q->conn = conn;
	q->reply = reply;
	q->reply_arg = arg;
	q->count = cnt;
	q->pending = cnt + 1;	/* held until every item is started */
	for (uint32_t i = 0; i < cnt; i++) {
		struct node_ditem *it = &q->items[i];
		int rc;

		it->r = q;
		it->idx = i;
		if (demote) {
			it->off = rb_u64(r);
			it->generation = rb_u64(r);
			rc = demote_item(s, it);
		} else {
			uint64_t soff = rb_u64(r);
			it->generation = rb_u64(r);
			it->off = rb_u64(r);
			uint64_t alen = rb_u64(r);
			q->res[i].len = alen;
			if (!s->spill)
				rc = -ENOTSUP;
			else if (!mem_range_ok(s->x, it->off, alen))
				rc = -ERANGE;
			else
				rc = spill_promote(s->spill, soff, it->generation,
						   (uint8_t *)seg->base + it->off, alen, seg->uuid,
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
	return 0;
}

/* ---- FREE ---- */

bool node_spill_mem_freed(struct node_spillside *s, uint64_t off, uint64_t generation,
			  struct node_wait *w)
{
	bool found = false;

	for (struct node_ditem *it = s->demotes; it; it = it->next) {
		if (it->off != off || it->generation != generation || it->fw)
			continue;
		it->fw = w;
		node_wait_hold(w);
		found = true;
	}
	return found;
}

static void free_cb(void *arg, int status, uint64_t off, uint64_t len)
{
	struct node_wait *w = arg;

	if (status)
		log_warn("spill: tombstoning the extent at %llu: %s", (unsigned long long)off,
			 strerror(-status));
	node_wait_release(w);
}

bool node_spill_free(struct node_spillside *s, uint64_t off, uint64_t generation,
		     struct node_wait *w)
{
	if (!s->spill)
		return false;
	if (spill_free(s->spill, off, generation, free_cb, w) < 0)
		return false;
	node_wait_hold(w);	/* answered once the tombstone is on disk */
	return true;
}

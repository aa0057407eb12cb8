/* client: libkvpool's handle and its small calls: kvp_open / kvp_close,
 * the key batches answered by the master alone (exists, size, remove, pin,
 * stat, list, remove_prefix, info), buffer registration and counters. The
 * bulk calls live in put.c and get.c, the master connections in mcall.c,
 * the segment table in segtab.c. Any thread; kvp->lock guards the pools and
 * the segment table and is never held across I/O (client_i.h).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client_i.h"
#include "clock.h"
#include "get.h"
#include "kvpool.h"
#include "kvpool_i.h"
#include "lcache.h"
#include "log.h"
#include "haloc.h"
#include "mcall.h"
#include "mlocate.h"
#include "net.h"
#include "put.h"
#include "segtab.h"
#include "sock.h"
#include "tls.h"
#include "xp_rdma.h"
#include "xport.h"

#define MASTER_CONNS_MAX 64		/* master connections per handle */
#define DEFAULT_MAX_FRAME (64u << 20)
#define DEFAULT_MAX_BATCH 1024

/* ---- open / close ------------------------------------------------------- */

static int proto_parse(const char *s, enum client_proto *p)
{
	if (!strcmp(s, "auto") || !*s)
		*p = CLIENT_AUTO;
	else if (!strcmp(s, "local"))
		*p = CLIENT_LOCAL;
	else if (!strcmp(s, "tcp"))
		*p = CLIENT_TCP;
	else if (!strcmp(s, "rdma"))
		*p = CLIENT_RDMA;
	else
		return KVP_EINVAL;
	return 0;
}

/* Fills the handle from kvp->conf (already loaded), connects and loads the
 * segment table; frees kvp on failure. */
static struct kvp *open_handle(struct kvp *kvp, int *errp)
{
	char host[64];
	int rc;

	if (!kvp->conf.cluster.master[0]) {
		rc = KVP_EINVAL;
		goto out_free;
	}
	rc = proto_parse(kvp->conf.client.protocol, &kvp->proto);
	if (rc < 0)
		goto out_free;
	kvp->timeout_ms = kvp->conf.client.timeout ? kvp->conf.client.timeout : 5000;
	kvp->conns_per_node = kvp->conf.client.connections_per_node > 0 ?
		(int)kvp->conf.client.connections_per_node : 1;
	kvp->max_frame = kvp->conf.cluster.max_frame && kvp->conf.cluster.max_frame < UINT32_MAX ?
		(uint32_t)kvp->conf.cluster.max_frame : DEFAULT_MAX_FRAME;
	kvp->max_batch = kvp->conf.cluster.max_batch > 0 ? (size_t)kvp->conf.cluster.max_batch :
		DEFAULT_MAX_BATCH;
	kvp->cc = net_cc_parse(kvp->conf.cluster.tcp_congestion);
	if (kvp->conf.client.host_id[0]) {
		snprintf(kvp->host_id, sizeof(kvp->host_id), "%s", kvp->conf.client.host_id);
	} else if (net_host_id(kvp->host_id, sizeof(kvp->host_id)) < 0) {
		rc = KVP_EINTERNAL;
		goto out_free;
	}
	if (gethostname(host, sizeof(host)) < 0)
		snprintf(host, sizeof(host), "client");
	host[sizeof(host) - 1] = 0;
	snprintf(kvp->name, sizeof(kvp->name), "%.40s:%d", host, (int)getpid());
	kvp->mmax = MASTER_CONNS_MAX;
	if (kvp->conf.tls.enabled) {
		char terr[256];

		kvp->tls = tls_ctx_new(&kvp->conf, false, terr, sizeof(terr));
		if (!kvp->tls) {
			log_err("%s", terr);
			rc = KVP_EINVAL;
			goto out_free;
		}
	}
	rc = mlocate_open(kvp);
	if (rc == 0 && mlocate_ha(kvp))
		rc = haloc_open(kvp);
	if (rc < 0) {
		mlocate_close(kvp);
		tls_ctx_free(kvp->tls);
		goto out_free;
	}

	pthread_mutex_init(&kvp->lock, NULL);
	pthread_mutex_init(&kvp->refresh_lock, NULL);
	cstats_init(&kvp->cs);
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&kvp->cond, &ca);
	pthread_condattr_destroy(&ca);

	/* Devices and the bounce buffer before the segment table, whose
	 * entries say how RDMA reaches each segment. */
	rc = xp_rdma_open(kvp);
	if (rc < 0)
		goto out_close;
	/* Connects (HELLO) and loads the segment table: a handle that opens
	 * is a handle that works. */
	rc = segtab_refresh(kvp, 0, sock_deadline(kvp));
	if (rc < 0)
		goto out_close;
	/* No cache (no memory, or turned off) only means no optimistic reads. */
	kvp->lc = lc_create(kvp);
	if (errp)
		*errp = 0;
	return kvp;

out_close:
	kvp_close(kvp);
	kvp = NULL;
	goto out;
out_free:
	free(kvp);
	kvp = NULL;
out:
	if (errp)
		*errp = rc;
	return NULL;
}

struct kvp *kvp_open(const struct kvp_open_opts *opts, int *errp)
{
	struct kvp_open_opts none = { 0 };
	struct kvp *kvp;
	char err[512];
	int rc;

	if (!opts)
		opts = &none;
	kvp = calloc(1, sizeof(*kvp));
	if (!kvp) {
		rc = KVP_ENOMEM;
		goto out;
	}
	if (conf_load(&kvp->conf, opts->config_file, opts->overrides, err, sizeof(err)) < 0) {
		log_err("kvpool: %s", err);
		rc = KVP_EINVAL;
		goto out_free;
	}
	if (opts->master) {
		if (strlen(opts->master) >= sizeof(kvp->conf.cluster.master)) {
			rc = KVP_EINVAL;
			goto out_free;
		}
		snprintf(kvp->conf.cluster.master, sizeof(kvp->conf.cluster.master), "%s",
			 opts->master);
	}
	return open_handle(kvp, errp);

out_free:
	free(kvp);
out:
	if (errp)
		*errp = rc;
	return NULL;
}

struct kvp *kvp_open_conf(const struct kvp_conf *conf, int *errp)
{
	struct kvp *kvp = calloc(1, sizeof(*kvp));

	if (!kvp) {
		if (errp)
			*errp = KVP_ENOMEM;
		return NULL;
	}
	kvp->conf = *conf;
	return open_handle(kvp, errp);
}

void kvp_close(struct kvp *kvp)
{
	if (!kvp)
		return;
	lc_destroy(kvp->lc);
	cstats_flush(kvp);	/* a short-lived process reports too */
	mc_pool_close(kvp);
	free(kvp->ns);
	mlocate_close(kvp);
	haloc_close(kvp);
	xp_tcp_close_pools(kvp);
	xp_rdma_close(kvp);
	segtab_close(kvp);
	while (kvp->bufs) {
		struct regbuf *b = kvp->bufs;

		kvp->bufs = b->next;
		free(b);
	}
	pthread_cond_destroy(&kvp->cond);
	pthread_mutex_destroy(&kvp->refresh_lock);
	cstats_destroy(&kvp->cs);
	pthread_mutex_destroy(&kvp->lock);
	tls_ctx_free(kvp->tls);
	free(kvp);
}

void kvp_free(void *buf)
{
	free(buf);
}

/* ---- simple key batches --------------------------------------------------- */

struct keyset {
	const char *const *keys;
	const size_t *idx;		/* item -> caller's index, NULL = identity */
};

static const char *ks_key(const struct keyset *ks, size_t i)
{
	return ks->keys[ks->idx ? ks->idx[i] : i];
}

static void enc_key(struct wbuf *b, size_t i, void *arg)
{
	wb_cstr(b, ks_key(arg, i));
}

struct kb {
	size_t n;
	size_t *idx;			/* valid items -> caller index */
	size_t nvalid;
	struct keyset ks;
};

/* Validates keys; invalid ones get KVP_EKEY through bad(i). */
static int kb_setup(struct kb *kb, size_t n, const char *const *keys)
{
	uint32_t kl;

	kb->n = n;
	kb->nvalid = 0;
	kb->idx = calloc(n ? n : 1, sizeof(*kb->idx));
	if (!kb->idx)
		return KVP_ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (mc_key_check(keys[i], &kl) == 0)
			kb->idx[kb->nvalid++] = i;
	kb->ks.keys = keys;
	kb->ks.idx = kb->idx;
	return 0;
}

/* Runs one opcode over the valid keys; parse(r, caller_index, arg) reads one
 * item's reply and returns false if the frame is malformed; fail(i, rc, arg)
 * records a per-item error. */
static int kb_run(struct kvp *kvp, struct kb *kb, uint16_t op, const void *prefix, size_t plen,
		  bool (*parse)(struct rbuf *r, size_t i, void *arg),
		  void (*fail)(size_t i, int rc, void *arg), void *arg)
{
	struct mcall *c;
	size_t nc = 0;
	int rc;

	if (!kb->nvalid)
		return 0;
	c = mc_batch(kvp, op, prefix, plen, kb->nvalid, enc_key, &kb->ks, &nc);
	if (!c)
		return KVP_ENOMEM;
	rc = mc_call(kvp, c, nc, sock_deadline(kvp));
	if (rc == 0) {
		for (size_t f = 0; f < nc; f++) {
			struct rbuf r;
			int frc = mc_batch_reply(&c[f], &r);

			for (uint32_t k = 0; k < c[f].count; k++) {
				size_t i = kb->idx[c[f].first + k];

				if (!frc && !parse(&r, i, arg))
					frc = KVP_EPROTO;
				if (frc)
					fail(i, frc, arg);
			}
		}
	}
	mc_free(c, nc);
	return rc;
}

static bool parse_i32(struct rbuf *r, size_t i, void *arg)
{
	int *res = arg;

	res[i] = rb_status(r);
	return rb_ok(r) && res[i] <= 1;
}

static void fail_i32(size_t i, int rc, void *arg)
{
	((int *)arg)[i] = rc;
}

static int batch_i32(struct kvp *kvp, uint16_t op, const void *prefix, size_t plen, size_t n,
		     const char *const *keys, int *results)
{
	struct kb kb;
	int rc;

	if (!kvp || (n && (!keys || !results)))
		return KVP_EINVAL;
	if (!n)
		return 0;
	rc = kb_setup(&kb, n, keys);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		results[i] = KVP_EKEY;
	rc = kb_run(kvp, &kb, op, prefix, plen, parse_i32, fail_i32, results);
	if (rc < 0)
		for (size_t v = 0; v < kb.nvalid; v++)
			results[kb.idx[v]] = rc;
	free(kb.idx);
	return rc;
}

/* Keys with a remembered local location whose extent still holds them are
 * answered 1 without the master (lcache.h); the others are asked. In
 * passes over the batch, so that the cache misses of its keys (their
 * cache sets, then their extent headers, likely on as many pages) overlap
 * instead of coming one after the other. */
struct ex_item {
	uint64_t h;
	uint32_t klen;
	bool valid, hit;
	struct lc_loc l;
};

static int exists_optimistic(struct kvp *kvp, size_t n, const char *const *keys, int *results,
			     const char **ask, size_t *at, size_t *na)
{
	struct ex_item *x = malloc((n ? n : 1) * sizeof(*x));
	struct lc_segs o = { .kvp = kvp };
	uint64_t now = clock_now_ms();
	struct client_seg *seg;
	uint64_t hits = 0, stale = 0;

	if (!x)
		return KVP_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		x[i].valid = mc_key_check(keys[i], &x[i].klen) == 0;
		if (x[i].valid) {
			x[i].h = lc_key_hash(keys[i], x[i].klen);
			lc_prefetch(kvp->lc, x[i].h);
		}
	}
	for (size_t i = 0; i < n; i++)
		if (x[i].valid)
			lc_prefetch_way(kvp->lc, x[i].h);
	for (size_t i = 0; i < n; i++) {
		x[i].hit = x[i].valid && lc_lookup_h(kvp->lc, x[i].h, x[i].klen, now, &x[i].l);
		if (x[i].hit && (seg = lc_seg(&o, x[i].l.seg_id)))
			xp_local_opt_prefetch(seg, &x[i].l, x[i].klen);
	}
	*na = 0;
	for (size_t i = 0; i < n; i++) {
		bool ok = false;

		if (x[i].hit) {
			seg = lc_seg(&o, x[i].l.seg_id);
			ok = seg && xp_local_opt_check(seg, &x[i].l, keys[i], x[i].klen) == 0;
			hits += ok;
			stale += !ok;
			if (!ok)
				lc_drop(kvp->lc, keys[i], x[i].klen, &x[i].l);
		}
		if (ok) {
			results[i] = 1;
			continue;
		}
		at[*na] = i;
		ask[(*na)++] = keys[i];
	}
	lc_seg_end(&o);
	lc_count(kvp->lc, hits, stale);
	free(x);
	return 0;
}

int kvp_batch_exists(struct kvp *kvp, size_t n, const char *const *keys, int *results)
{
	const char **ask;
	size_t *at, na = 0;
	int *res, rc;

	if (!kvp || (n && (!keys || !results)))
		return KVP_EINVAL;
	if (!kvp->lc)
		return batch_i32(kvp, WIRE_OP_EXISTS, NULL, 0, n, keys, results);
	ask = malloc(n * (sizeof(*ask) + sizeof(*at) + sizeof(*res)) + 1);
	if (!ask)
		return KVP_ENOMEM;
	at = (size_t *)(ask + n);
	res = (int *)(at + n);
	rc = exists_optimistic(kvp, n, keys, results, ask, at, &na);
	if (rc == 0) {
		rc = batch_i32(kvp, WIRE_OP_EXISTS, NULL, 0, na, ask, res);
		for (size_t k = 0; k < na; k++)
			results[at[k]] = res[k];
	}
	free(ask);
	lc_touch_poll(kvp);
	cstats_poll(kvp);
	return rc;
}

/* This handle's optimistic reads must not find a removed key: its entries
 * go before the REMOVE is sent and again once it is answered (a get that
 * raced with the remove cannot leave one behind). */
static void lc_invalidate_keys(struct kvp *kvp, size_t n, const char *const *keys)
{
	uint32_t klen;

	for (size_t i = 0; kvp->lc && i < n; i++)
		if (mc_key_check(keys[i], &klen) == 0)
			lc_invalidate(kvp->lc, keys[i], klen);
}

int kvp_batch_remove(struct kvp *kvp, size_t n, const char *const *keys, int flags, int *results)
{
	uint8_t force = (flags & KVP_REMOVE_FORCE) ? 1 : 0;
	int rc;

	if (flags & ~KVP_REMOVE_FORCE)
		return KVP_EINVAL;
	if (!kvp || (n && (!keys || !results)))
		return KVP_EINVAL;
	/* HA: a removed key is not read from where it was (haloc.h) */
	for (size_t i = 0; kvp->haloc && i < n; i++)
		if (keys[i])
			haloc_drop(kvp, keys[i], (uint32_t)strnlen(keys[i], KVP_MAX_KEY + 1));
	lc_invalidate_keys(kvp, n, keys);
	rc = batch_i32(kvp, WIRE_OP_REMOVE, &force, 1, n, keys, results);
	lc_invalidate_keys(kvp, n, keys);
	return rc;
}

static bool parse_size(struct rbuf *r, size_t i, void *arg)
{
	int64_t *res = arg;
	int32_t st = rb_status(r);
	uint64_t sz = rb_u64(r);

	res[i] = st ? st : sz > INT64_MAX ? KVP_EPROTO : (int64_t)sz;
	return rb_ok(r) && st <= 0;
}

static void fail_size(size_t i, int rc, void *arg)
{
	((int64_t *)arg)[i] = rc;
}

int kvp_batch_size(struct kvp *kvp, size_t n, const char *const *keys, int64_t *results)
{
	struct kb kb;
	int rc;

	if (!kvp || (n && (!keys || !results)))
		return KVP_EINVAL;
	if (!n)
		return 0;
	rc = kb_setup(&kb, n, keys);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		results[i] = KVP_EKEY;
	rc = kb_run(kvp, &kb, WIRE_OP_SIZE, NULL, 0, parse_size, fail_size, results);
	if (rc < 0)
		for (size_t v = 0; v < kb.nvalid; v++)
			results[kb.idx[v]] = rc;
	free(kb.idx);
	return rc;
}

int kvp_exists(struct kvp *kvp, const char *key)
{
	int res, rc = kvp_batch_exists(kvp, 1, &key, &res);

	return rc < 0 ? rc : res;
}

int kvp_size(struct kvp *kvp, const char *key, uint64_t *size)
{
	int64_t res;
	int rc;

	if (!size)
		return KVP_EINVAL;
	rc = kvp_batch_size(kvp, 1, &key, &res);
	if (rc < 0)
		return rc;
	if (res < 0)
		return (int)res;
	*size = (uint64_t)res;
	return 0;
}

int kvp_remove(struct kvp *kvp, const char *key, int flags)
{
	int res, rc = kvp_batch_remove(kvp, 1, &key, flags, &res);

	return rc < 0 ? rc : res;
}

int kvp_replica_clear(struct kvp *kvp, const char *key, const char *segment, int flags)
{
	uint32_t ids[16];
	uint8_t pre[5];
	int n, res = KVP_ENOSEG;

	if (!kvp || !segment || !*segment || (flags & ~KVP_REMOVE_FORCE))
		return KVP_EINVAL;
	n = segtab_by_name(kvp, segment, ids, sizeof(ids) / sizeof(ids[0]), sock_deadline(kvp));
	if (n < 0)
		return n;
	if (n == 0)
		return KVP_ENOSEG;
	pre[4] = (flags & KVP_REMOVE_FORCE) ? 1 : 0;
	/* Like a remove (of this replica, or of the object with its last
	 * one): not found by this handle's optimistic reads afterwards. */
	lc_invalidate_keys(kvp, 1, &key);
	/* A node may have mounted several segments under its name. */
	for (int i = 0; i < n; i++) {
		int r, rc;

		memcpy(pre, &ids[i], 4);
		rc = batch_i32(kvp, WIRE_OP_REPLICA_CLEAR, pre, sizeof(pre), 1, &key, &r);
		if (rc < 0)
			r = rc;
		if (r == KVP_ENOSEG)
			continue;	/* unmounted meanwhile: no replica there either */
		if (r < 0 && r != KVP_ENOTFOUND) {
			res = r;
			break;
		}
		if (r == 0 || res == KVP_ENOSEG)
			res = r;	/* gone after a first drop: still 0 */
	}
	lc_invalidate_keys(kvp, 1, &key);
	return res;
}

int kvp_pin(struct kvp *kvp, const char *key, uint64_t ttl_ms)
{
	int res, rc = batch_i32(kvp, WIRE_OP_PIN, &ttl_ms, sizeof(ttl_ms), 1, &key, &res);

	return rc < 0 ? rc : res;
}

/* ---- stat, list, info, remove_prefix -------------------------------------- */

bool client_stat_parse(struct rbuf *r, size_t i, void *arg)
{
	struct client_stat_res *sr = arg;
	struct kvp_stat *st = &sr->st;
	uint8_t nrep;

	(void)i;
	memset(st, 0, sizeof(*st));
	sr->status = rb_status(r);
	st->size = rb_u64(r);
	st->generation = rb_u64(r);
	st->checksum = rb_u64(r);
	st->put_time_ns = rb_u64(r);
	st->access_time_ns = rb_u64(r);
	st->lease_ms = rb_i64(r);
	st->pin_ms = rb_i64(r);
	nrep = rb_u8(r);
	for (uint8_t k = 0; k < nrep; k++) {
		struct kvp_replica rp = { 0 };

		rp.segment_id = rb_u32(r);
		rp.tier = rb_u8(r);
		rp.offset = rb_u64(r);
		rp.alloc_len = rb_u64(r);
		if (st->nreplicas < KVP_MAX_REPLICAS)
			st->replicas[st->nreplicas++] = rp;
	}
	return rb_ok(r) && sr->status <= 0;
}

static void fail_stat(size_t i, int rc, void *arg)
{
	(void)i;
	((struct client_stat_res *)arg)->status = rc;
}

int kvp_stat(struct kvp *kvp, const char *key, struct kvp_stat *st)
{
	struct client_stat_res sr = { .status = KVP_EPROTO };
	struct kb kb;
	int rc;

	if (!kvp || !st)
		return KVP_EINVAL;
	memset(st, 0, sizeof(*st));
	rc = kb_setup(&kb, 1, &key);
	if (rc < 0)
		return rc;
	if (!kb.nvalid) {
		free(kb.idx);
		return KVP_EKEY;
	}
	rc = kb_run(kvp, &kb, WIRE_OP_STAT, NULL, 0, client_stat_parse, fail_stat, &sr);
	free(kb.idx);
	if (rc < 0)
		return rc;
	if (sr.status < 0)
		return sr.status;
	pthread_mutex_lock(&kvp->lock);
	for (uint32_t k = 0; k < sr.st.nreplicas; k++) {
		struct client_seg *s = segtab_find_locked(kvp, sr.st.replicas[k].segment_id);

		if (s)
			snprintf(sr.st.replicas[k].node, sizeof(sr.st.replicas[k].node), "%.63s",
				 s->node_name);
	}
	pthread_mutex_unlock(&kvp->lock);
	*st = sr.st;
	return 0;
}

void kvp_list_free(struct kvp_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		free(l->entries[i].name);
	free(l->entries);
	free(l->next);
	memset(l, 0, sizeof(*l));
}

int client_list_parse(const uint8_t *body, size_t len, struct kvp_list *out)
{
	struct rbuf r;
	uint32_t n;

	rb_init(&r, body, len);
	n = rb_count(&r, 19);
	if (!rb_ok(&r))
		return KVP_EPROTO;
	out->entries = calloc(n ? n : 1, sizeof(*out->entries));
	if (!out->entries)
		return KVP_ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct kvp_list_entry *e = &out->entries[i];
		size_t nl;
		const uint8_t *p;

		e->is_prefix = rb_u8(&r) != 0;
		p = rb_str(&r, &nl);
		e->size = rb_u64(&r);
		e->put_time_ns = rb_u64(&r);
		if (!rb_ok(&r) || !wire_key_ok(p, nl))
			return KVP_EPROTO;
		e->name = strndup((const char *)p, nl);
		if (!e->name)
			return KVP_ENOMEM;
		out->n++;
	}
	size_t nl;
	const uint8_t *p = rb_str(&r, &nl);

	if (!rb_done(&r) || (p && memchr(p, 0, nl)))
		return KVP_EPROTO;
	out->next = strndup(p ? (const char *)p : "", nl);
	return out->next ? 0 : KVP_ENOMEM;
}

int kvp_list(struct kvp *kvp, const char *prefix, char delimiter, const char *cursor,
	     uint32_t limit, struct kvp_list *out)
{
	struct mcall m = { .op = WIRE_OP_LIST };
	int rc;

	if (!kvp || !out)
		return KVP_EINVAL;
	memset(out, 0, sizeof(*out));
	if (!prefix)
		prefix = "";
	if (!cursor)
		cursor = "";
	if (strnlen(prefix, KVP_MAX_KEY + 1) > KVP_MAX_KEY ||
	    strnlen(cursor, KVP_MAX_KEY + 1) > KVP_MAX_KEY)
		return KVP_EKEY;
	wb_init(&m.body);
	wb_cstr(&m.body, prefix);
	wb_str(&m.body, &delimiter, delimiter ? 1 : 0);
	wb_cstr(&m.body, cursor);
	wb_u32(&m.body, limit);
	rc = mc_call1(kvp, &m, sock_deadline(kvp));
	if (rc < 0)
		goto out_free;
	rc = client_list_parse(m.rep, m.rep_len, out);
	if (rc)
		kvp_list_free(out);
out_free:
	wb_free(&m.body);
	free(m.rep);
	return rc;
}

int kvp_remove_prefix(struct kvp *kvp, const char *prefix, int flags, uint64_t *count)
{
	struct mcall m = { .op = WIRE_OP_REMOVE_PREFIX };
	struct rbuf r;
	int rc;

	if (!kvp || !prefix || (flags & ~KVP_REMOVE_FORCE))
		return KVP_EINVAL;
	if (strnlen(prefix, KVP_MAX_KEY + 1) > KVP_MAX_KEY)
		return KVP_EKEY;
	wb_init(&m.body);
	wb_cstr(&m.body, prefix);
	wb_u8(&m.body, (flags & KVP_REMOVE_FORCE) ? 1 : 0);
	lc_clear(kvp->lc);	/* before and after: see lc_invalidate_keys */
	rc = mc_call1(kvp, &m, sock_deadline(kvp));
	lc_clear(kvp->lc);
	if (rc == 0) {
		rb_init(&r, m.rep, m.rep_len);
		uint64_t c = rb_u64(&r);

		if (!rb_ok(&r))
			rc = KVP_EPROTO;
		else if (count)
			*count = c;
	}
	wb_free(&m.body);
	free(m.rep);
	return rc;
}

int kvp_remove_all(struct kvp *kvp, int flags, uint64_t *count)
{
	return kvp_remove_prefix(kvp, "", flags, count);
}

void kvp_info_free(struct kvp_info *info)
{
	if (!info)
		return;
	free(info->nodes);
	info->nodes = NULL;
	info->nnodes = 0;
}

int kvp_master(struct kvp *kvp, struct kvp_master *out)
{
	if (!kvp || !out)
		return KVP_EINVAL;
	mlocate_describe(kvp, out);
	return 0;
}

int kvp_info(struct kvp *kvp, struct kvp_info *out)
{
	struct mcall c[2] = { { .op = WIRE_OP_INFO }, { .op = WIRE_OP_SEGMENTS } };
	struct client_seg **v = NULL;
	size_t n = 0;
	struct rbuf r;
	int rc;

	if (!kvp || !out)
		return KVP_EINVAL;
	memset(out, 0, sizeof(*out));
	wb_init(&c[0].body);
	wb_init(&c[1].body);
	rc = mc_call(kvp, c, 2, sock_deadline(kvp));
	if (rc == 0 && c[0].status)
		rc = c[0].status;
	if (rc == 0) {
		rb_init(&r, c[0].rep, c[0].rep_len);
		out->keys = rb_u64(&r);
		out->bytes_used = rb_u64(&r);
		out->capacity = rb_u64(&r);
		out->evictions = rb_u64(&r);
		out->demotions = rb_u64(&r);
		out->leases = rb_u64(&r);
		if (!rb_ok(&r))
			rc = KVP_EPROTO;
	}
	if (rc == 0)
		rc = segtab_parse(&c[1], &v, &n);
	if (rc == 0) {
		out->nodes = calloc(n ? n : 1, sizeof(*out->nodes));
		if (!out->nodes)
			rc = KVP_ENOMEM;
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct kvp_node_info *ni = &out->nodes[i];
		struct client_seg *s = v[i];

		ni->segment_id = s->id;
		snprintf(ni->name, sizeof(ni->name), "%.63s", s->node_name);
		snprintf(ni->host_id, sizeof(ni->host_id), "%.63s", s->host_id);
		snprintf(ni->endpoint, sizeof(ni->endpoint), "%.127s", s->endpoint);
		snprintf(ni->shm_path, sizeof(ni->shm_path), "%.255s", s->shm_path);
		ni->capacity = s->seg_size;
		ni->used = s->used;
		ni->objects = s->objects;
		ni->spill_capacity = s->spill_capacity;
		ni->spill_used = s->spill_used;
		ni->draining = s->draining;
		ni->numa_node = s->numa_node;
		out->nnodes++;
	}
	segtab_parsed_free(v, n);
	for (int i = 0; i < 2; i++) {
		wb_free(&c[i].body);
		free(c[i].rep);
	}
	if (rc < 0)
		kvp_info_free(out);
	return rc;
}

/* ---- buffers and stats ---------------------------------------------------- */

int kvp_register_buffer(struct kvp *kvp, void *buf, size_t len)
{
	struct regbuf *b;

	if (!kvp || !buf || !len)
		return KVP_EINVAL;
	b = malloc(sizeof(*b));
	if (!b)
		return KVP_ENOMEM;
	b->p = buf;
	b->len = len;
	pthread_mutex_lock(&kvp->lock);
	for (struct regbuf *o = kvp->bufs; o; o = o->next) {
		if (o->p == buf) {
			pthread_mutex_unlock(&kvp->lock);
			free(b);
			return KVP_EEXIST;
		}
	}
	b->next = kvp->bufs;
	kvp->bufs = b;
	pthread_mutex_unlock(&kvp->lock);
	/* With RDMA the NIC reads and writes it in place from now on. */
	int rc = xp_rdma_register(kvp, buf, len);

	if (rc < 0) {
		kvp_unregister_buffer(kvp, buf);
		return rc;
	}
	return 0;
}

int kvp_unregister_buffer(struct kvp *kvp, void *buf)
{
	struct regbuf **pp, *b = NULL;

	if (!kvp || !buf)
		return KVP_EINVAL;
	pthread_mutex_lock(&kvp->lock);
	for (pp = &kvp->bufs; *pp; pp = &(*pp)->next) {
		if ((*pp)->p == buf) {
			b = *pp;
			*pp = b->next;
			break;
		}
	}
	pthread_mutex_unlock(&kvp->lock);
	if (!b)
		return KVP_EINVAL;
	xp_rdma_unregister(kvp, buf);
	free(b);
	return 0;
}

int kvp_stats(struct kvp *kvp, struct kvp_stats *out)
{
	if (!kvp || !out)
		return KVP_EINVAL;
	memset(out, 0, sizeof(*out));
#define LD(f) atomic_load_explicit(&kvp->st.f, memory_order_relaxed)
	out->puts = LD(puts);
	out->gets = LD(gets);
	out->local_bytes = LD(local_bytes);
	out->tcp_bytes = LD(tcp_bytes);
	out->checksum_mismatches = LD(checksum_mismatches);
	out->retries = LD(retries);
	out->segment_refreshes = LD(segment_refreshes);
	out->master_connects = LD(master_connects);
	out->node_connects = LD(node_connects);
	out->rdma_bytes = LD(rdma_bytes);
	out->lease_releases = LD(lease_releases);
	out->disk_gets = LD(disk_gets);
	out->disk_bytes = LD(disk_bytes);
#undef LD
	struct lc_stats ls;

	lc_stats(kvp->lc, &ls);
	out->optimistic_hits = ls.hits;
	out->optimistic_fallbacks = ls.fallbacks;
	out->optimistic_raced = ls.raced;
	out->read_touches = ls.touches;
	return 0;
}

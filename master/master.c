/* master: kvpool-master's lifecycle (create, reload, destroy), its
 * connections (HELLO and its timeout), the request dispatcher with the
 * per-opcode statistics, and the order of the periodic duties; see
 * master.h. The requests are handled by the modules below: mnode.c (what
 * nodes ask and answer), mput.c (puts), mkeys.c (requests on existing
 * keys), which use mtier.c, evict.c, mlease.c, mbatch.c and mobj.c. */
#include "master_i.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>

#include "evict.h"
#include "kvpool.h"
#include "log.h"
#include "mchain.h"
#include "mevents.h"
#include "mkeys.h"
#include "mlease.h"
#include "mnode.h"
#include "mput.h"
#include "mhold.h"
#include "mrecover.h"
#include "mrepl.h"
#include "mtabfile.h"
#include "mstatus.h"

#define HELLO_TIMEOUT_MS 10000
#define EVICT_STEP_US 20		/* eviction per tick: a request waits at most this */

const double master_buckets[MASTER_NBUCKETS] = {
	5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
	1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 1.0,
};

static uint64_t mono_ns(void)
{
	return master_clock_ns(CLOCK_MONOTONIC);
}

/* Also the offset of CLOCK_REALTIME from CLOCK_MONOTONIC, so that a
 * PUT_END's wall-clock time comes from the monotonic read its frame made
 * (a step of the wall clock shows at the next tick, within 50 ms). */
static uint64_t master_now(struct master *m)
{
	uint64_t mono = mono_ns();

	m->real_off_ns = master_clock_ns(CLOCK_REALTIME) - mono;
	m->now_ms = mono / 1000000;
	return m->now_ms;
}

static int parse_strategy(const char *s, enum strategy *out)
{
	if (strcmp(s, "random") == 0)
		*out = STRAT_RANDOM;
	else if (strcmp(s, "free_ratio") == 0)
		*out = STRAT_FREE_RATIO;
	else
		return -1;
	return 0;
}

struct master *master_create(const struct kvp_conf *conf, char *err, size_t errlen)
{
	struct master *m = calloc(1, sizeof(*m));

	if (!m) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	m->conf = *conf;
	if (parse_strategy(conf->master.allocation_strategy, &m->strategy)) {
		snprintf(err, errlen, "[master] allocation_strategy: '%s' is not random or free_ratio",
			 conf->master.allocation_strategy);
		goto out_free;
	}
	if (objtab_init(&m->objs)) {
		snprintf(err, errlen, "out of memory");
		goto out_free;
	}
	if (mver_init(&m->vers)) {
		snprintf(err, errlen, "out of memory");
		goto out_objs;
	}
	if (segreg_init(&m->segs)) {
		snprintf(err, errlen, "out of memory");
		goto out_vers;
	}
	if (mpol_init(m)) {
		snprintf(err, errlen, "out of memory");
		goto out_segs;
	}
	if (mten_init(m, err, errlen))
		goto out_pol;
	if (getrandom(&m->rng, sizeof(m->rng), 0) != sizeof(m->rng) || !m->rng)
		m->rng = mono_ns() | 1;
	m->epoch = master_clock_ns(CLOCK_REALTIME);
	/* Generations must grow across master restarts even before every node
	 * has reported: start from the clock (microseconds), raised by REPORTs. */
	m->gen = m->epoch / 1000;
	master_now(m);
	m->start_ms = m->now_ms;
	wb_init(&m->scratch);
	return m;

out_pol:
	mpol_destroy(m);
out_segs:
	segreg_destroy(&m->segs);
out_vers:
	mver_destroy(&m->vers);
out_objs:
	objtab_destroy(&m->objs);
out_free:
	free(m);
	return NULL;
}

void master_destroy(struct master *m)
{
	if (!m)
		return;
	while (m->clients)
		master_client_free(m->clients);
	objtab_destroy(&m->objs);
	mns_destroy(&m->ns);
	mten_destroy(&m->ten);
	mver_destroy(&m->vers);
	segreg_destroy(&m->segs);
	mpol_destroy(m);
	free(m->leased.v);
	free(m->pending.v);
	free(m->cand);
	free(m->kbuf);
	free(m->expect);
	free(m->expect_done);
	mrepl_reserve_release(m);
	mtabfile_stop(m);
	mrepl_destroy(m);
	wb_free(&m->scratch);
	free(m);
}

void master_set_events(struct master *m, struct mevents *ev)
{
	m->ev = ev;
	if (ev)		/* a fresh state: its table is empty */
		mevents_cleared(ev);
}

size_t master_clients(const struct master *m)
{
	return m->nclients;
}

void master_status(struct master *m, char *buf, size_t len)
{
	uint64_t used, cap;

	segreg_usage(&m->segs, &used, &cap);
	snprintf(buf, len, "%llu keys, %zu pending puts, %u segments, %llu/%llu MiB used, "
		 "%zu connections", (unsigned long long)m->keys, m->pending.n, m->segs.online,
		 (unsigned long long)(used >> 20), (unsigned long long)(cap >> 20), m->nclients);
}

bool master_check(const struct master *m)
{
	char err[256];

	/* the key index: its own invariants, and every object in it or
	 * waiting for it */
	if (kx_check(&m->objs.idx, err, sizeof(err)) ||
	    m->objs.idx.count + m->objs.nkxp != m->objs.count) {
		log_err("master_check: key index: %s (%zu in it, %zu waiting, %zu objects)",
			kx_check(&m->objs.idx, err, sizeof(err)) ? err : "count", m->objs.idx.count,
			m->objs.nkxp, m->objs.count);
		return false;
	}
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (s && s->online && s->hold.n &&
		    (!mhold_check(&s->hold, s->alloc) || s->used < s->hold.bytes))
			return false;
	}
	return mchain_check(m) && evict_heaps_check(m);
}

void master_set_generation(struct master *m, uint64_t gen)
{
	m->gen = gen;
}

bool master_tick_urgent(const struct master *m)
{
	return m->parked != NULL;
}

void master_set_epoch(struct master *m, uint64_t epoch)
{
	m->epoch = epoch;
}

uint64_t master_epoch(const struct master *m)
{
	return m->epoch;
}

void master_recover(struct master *m, const char *expected, uint64_t window_ms)
{
	master_now(m);
	mrecover_begin(m, expected, window_ms);
}

bool master_recovering(const struct master *m)
{
	return m->recovering;
}

uint64_t master_recover_ms(const struct master *m)
{
	return m->recover_ms;
}

size_t master_segments_text(const struct master *m, char *buf, size_t cap)
{
	return mrecover_segments(m, buf, cap);
}

bool master_wants_tick(const struct master *m)
{
	return m->evict_active;
}

void master_client_set_backlog(struct master_client *c, master_queued_fn queued,
			       master_close_fn abort)
{
	c->queued = queued;
	c->abort = abort;
}

struct master_client *master_client_new(struct master *m, master_send_fn send,
					master_close_fn close, void *arg)
{
	struct master_client *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->m = m;
	c->send = send;
	c->close = close;
	c->arg = arg;
	c->tenant = -1;
	c->created_ms = c->last_seen_ms = master_now(m);
	c->next = m->clients;
	if (m->clients)
		m->clients->prev = c;
	m->clients = c;
	m->nclients++;
	return c;
}

void master_client_free(struct master_client *c)
{
	struct master *m = c->m;

	mput_client_gone(m, c);
	mrepl_client_gone(m, c);
	mnode_client_gone(m, c);
	mns_client_gone(m, c);
	if (m->ahead_c == c)
		m->ahead_c = NULL;
	if (m->cur == c)
		m->cur = NULL;
	if (c->prev)
		c->prev->next = c->next;
	else
		m->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	m->nclients--;
	free(c);
}

/* ---- HELLO ---- */

/* Copies at most cap - 1 bytes of an untrusted name, '?' for anything that
 * is not printable ASCII (the names end up in logs). */
static void printable(char *dst, size_t cap, const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n && i + 1 < cap; i++)
		dst[i] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
	dst[i] = '\0';
}

/* Logs a refused HELLO at most once a second (a flood of wrong tokens must
 * not flood the log), with the number of refusals not logged. */
static void log_auth_failure(struct master *m, const struct master_client *c)
{
	m->auth_failures++;
	if (m->now_ms < m->auth_logged_ms + 1000)
		return;
	log_warn("client '%s' (host '%s'): wrong cluster token (%llu refused since the last "
		 "message)", c->name, c->host_id, (unsigned long long)m->auth_failures);
	m->auth_failures = 0;
	m->auth_logged_ms = m->now_ms;
}

/* A segment of a taken-over table still waits for its node's re-mount. */
static bool warm_waiting(const struct master *m)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (s && s->online && s->warm)
			return true;
	}
	return false;
}

static int op_hello(struct master *m, struct master_client *c, struct rbuf *r, struct wbuf *b)
{
	size_t tlen, nlen, hlen;
	uint16_t role = rb_u16(r);
	const uint8_t *tok = rb_str(r, &tlen);
	const uint8_t *name = rb_str(r, &nlen);
	const uint8_t *host = rb_str(r, &hlen);

	if (!rb_ok(r))
		return KVP_EPROTO;
	/* names are for logs and WIRE_SEG_LOCAL: truncated, made printable */
	printable(c->name, sizeof(c->name), name, nlen);
	printable(c->host_id, sizeof(c->host_id), host, hlen);
	const char *want = m->conf.cluster.token;
	size_t wlen = strlen(want);
	if (m->ten.on) {
		int rc = mten_hello(m, c, tok, tlen, role);	/* the cluster token included */
		if (rc)
			return rc;
	} else if (wlen && (tlen != wlen || CRYPTO_memcmp(tok, want, wlen) != 0)) {
		return KVP_EAUTH;
	}
	if (role < WIRE_ROLE_CLIENT || role > WIRE_ROLE_MASTER)
		return KVP_EPROTO;
	c->hello = true;
	c->role = role;
	wb_u64(b, m->epoch);
	wb_u16(b, WIRE_VERSION);
	/* Only while a warm segment waits for its node: elsewhere the map
	 * buys nothing, and the old order (scan, MOUNT, REPORTs) keeps a
	 * node mounted only once it has reported. */
	wb_u32(b, warm_waiting(m) ? WIRE_HELLO_F_MOUNT_MAP : 0);
	return 0;
}

static bool node_op(unsigned op)
{
	return op == WIRE_OP_MOUNT || op == WIRE_OP_REPORT || op == WIRE_OP_UNMOUNT ||
	       op == WIRE_OP_HEARTBEAT;
}

static void observe(struct op_stats *st, uint64_t ns)
{
	double sec = (double)ns / 1e9;
	int i = 0;

	while (i < MASTER_NBUCKETS && sec > master_buckets[i])
		i++;
	st->hist[i]++;
	st->sum_ns += ns;
}

/* The duration of the frame handled last, if it was deferred: it ends
 * where the next one starts (t). */
static void observe_deferred(struct master *m, uint64_t t)
{
	if (m->defer_st) {
		observe(m->defer_st, t - m->defer_t0);
		m->defer_st = NULL;
	}
}

int master_handle(struct master *m, struct master_client *c, const struct wire_hdr *h,
		  const uint8_t *body, struct wbuf *reply)
{
	uint64_t t0 = mono_ns();
	struct rbuf r;
	int status = 0, ret = 0;
	bool parked = false, more = c == m->ahead_c && m->ahead_left > 1;
	unsigned op = h->opcode < WIRE_OP_MAX ? h->opcode : 0;
	struct op_stats *st = &m->ops[op];

	observe_deferred(m, t0);
	if (c == m->ahead_c && m->ahead_left)
		m->ahead_left--;
	m->frame_ns = t0;
	m->now_ms = t0 / 1000000;
	c->last_seen_ms = m->now_ms;
	m->cur = c;
	if (h->flags & WIRE_F_REPLY) {
		if (!c->hello)
			goto out_auth;
		mnode_reply(m, c, h, body);
		master_flush(m);
		mput_retry(m);
		return 0;
	}
	rb_init(&r, body, h->body_len);
	size_t start = wire_begin(reply);
	if (!c->hello && h->opcode != WIRE_OP_HELLO) {
		status = KVP_EAUTH;
		ret = -1;
		goto out_reply;
	}
	if (c->tenant_revoked) {
		/* a reload removed its token: refused, then closed */
		log_notice("client '%s' (host '%s'): token revoked by a tenants reload; closing",
			   c->name, c->host_id);
		status = KVP_EAUTH;
		ret = -1;
		goto out_reply;
	}
	if (node_op(h->opcode) && c->role != WIRE_ROLE_NODE) {
		status = KVP_EPROTO;
		goto out_reply;
	}
	if (m->recovering && (status = mrecover_gate(m, h, body)) != 0)
		goto out_reply;
	switch (h->opcode) {
	case WIRE_OP_HELLO:
		status = op_hello(m, c, &r, reply);
		if (status == KVP_EAUTH) {
			log_auth_failure(m, c);
			ret = -1;
		} else if (status == KVP_EPERM) {
			log_warn("client '%s' (host '%s'): a tenant token may only connect as a "
				 "client (node, standby and admin roles need an admin tenant)",
				 c->name, c->host_id);
			ret = -1;
		}
		break;
	case WIRE_OP_MOUNT: status = mnode_mount(m, c, &r, reply); break;
	case WIRE_OP_REPORT: status = mnode_report(m, c, &r, reply, st); break;
	case WIRE_OP_UNMOUNT: status = mnode_unmount(m, c, &r); break;
	case WIRE_OP_HEARTBEAT:
		status = mnode_heartbeat(m, c, &r);
		if (m->parked)
			mput_retry(m);	/* its segment may take extents now */
		break;
	case WIRE_OP_SEGMENTS: status = mnode_segments(m, reply); break;
	case WIRE_OP_FOLLOW:
		status = c->role == WIRE_ROLE_MASTER ? mrepl_follow(m, c) : KVP_EPROTO;
		break;
	case WIRE_OP_PUT_START:
		status = mput_start(m, c, h, body, reply, &parked);
		break;
	case WIRE_OP_PUT_END: status = mput_end(m, &r, reply, st); break;
	case WIRE_OP_PUT_REVOKE: status = mput_revoke(m, &r, reply, st); break;
	case WIRE_OP_GET: status = mkeys_get(m, c, &r, reply, st); break;
	case WIRE_OP_EXISTS: status = mkeys_exists(m, &r, reply, st); break;
	case WIRE_OP_TOUCH: status = mkeys_touch(m, &r, reply, st); break;
	case WIRE_OP_SIZE: status = mkeys_size(m, &r, reply, st); break;
	case WIRE_OP_REMOVE: status = mkeys_remove(m, &r, reply, st); break;
	case WIRE_OP_LEASE_RELEASE: status = mkeys_lease_release(m, &r, reply, st); break;
	case WIRE_OP_REPLICA_CLEAR: status = mkeys_replica_clear(m, &r, reply, st); break;
	case WIRE_OP_REMOVE_PREFIX: status = mkeys_remove_prefix(m, &r, reply); break;
	case WIRE_OP_LIST: status = mkeys_list(m, &r, reply); break;
	case WIRE_OP_STAT: status = mkeys_stat(m, &r, reply, st); break;
	case WIRE_OP_PIN: status = mkeys_pin(m, &r, reply, st); break;
	case WIRE_OP_INFO: status = mkeys_info(m, reply); break;
	case WIRE_OP_NS_DECLARE: status = mns_declare(m, c, &r, reply); break;
	case WIRE_OP_NS_LIST: status = mns_list(m, reply); break;
	case WIRE_OP_CLIENT_STATS: status = mstatus_client_stats(m, &r); break;
	default:
		status = KVP_EPROTO;	/* FREE/READ/WRITE are not master requests */
		break;
	}
	if (reply->oom)
		status = KVP_ENOMEM;

out_reply:
	st->frames++;
	if (status) {
		st->failures++;
		reply->oom = false;
		reply->len = start + WIRE_HDR_SIZE;	/* frame errors carry no body */
	}
	if (parked)
		reply->len = start;
	else
		wire_finish(reply, start, h->opcode, WIRE_F_REPLY, status, h->reqid, 0);
	master_flush(m);
	/* One clock read per frame: when the look ahead saw another frame of
	 * this client's right behind, its start ends this one (the time
	 * between is the master's too). A pipeline cut short (the client
	 * stopped reading its replies) makes one sample longer, never a
	 * wrong now_ms. */
	if (more) {
		m->defer_st = st;
		m->defer_t0 = t0;
	} else {
		observe(st, mono_ns() - t0);
	}
	return ret;

out_auth:
	start = wire_begin(reply);
	wire_finish(reply, start, h->opcode, WIRE_F_REPLY, KVP_EAUTH, h->reqid, 0);
	return -1;
}

/* ---- pipelined frames ---- */

#define LOOKAHEAD_KEYS 256	/* keys prefetched per look (what L1/L2 holds) */

/* The first key of a frame whose body starts "u32 n, str key" (after
 * PUT_START's prefix), or NULL. */
static const uint8_t *first_key(const struct wire_hdr *h, const uint8_t *body, size_t *klen)
{
	struct rbuf r;

	switch (h->opcode) {
	case WIRE_OP_PUT_START:
	case WIRE_OP_PUT_END:
	case WIRE_OP_PUT_REVOKE:
	case WIRE_OP_GET:
	case WIRE_OP_EXISTS:
	case WIRE_OP_TOUCH:
		break;
	default:
		return NULL;
	}
	rb_init(&r, body, h->body_len);
	if (h->opcode == WIRE_OP_PUT_START)
		rb_take(&r, WIRE_PUT_PREFIX);
	if (rb_u32(&r) == 0)
		return NULL;
	const uint8_t *k = rb_str(&r, klen);
	return rb_ok(&r) ? k : NULL;
}

void master_lookahead(struct master *m, struct master_client *c, const uint8_t *p, size_t n)
{
	uint32_t hs[LOOKAHEAD_KEYS];
	unsigned nh = 0;

	m->ahead_c = c;
	m->ahead_left = 0;
	while (nh < LOOKAHEAD_KEYS && n >= WIRE_HDR_SIZE) {
		struct wire_hdr h;
		if (wire_hdr_decode(p, &h, UINT32_MAX, 0) || n - WIRE_HDR_SIZE < h.body_len)
			break;	/* no payload: master requests carry none */
		const uint8_t *body = p + WIRE_HDR_SIZE;
		size_t klen;
		const uint8_t *k = first_key(&h, body, &klen);
		if (k) {
			hs[nh] = objtab_hash(k, klen);
			objtab_prefetch_bucket(&m->objs, hs[nh++]);
		}
		p += WIRE_HDR_SIZE + h.body_len;
		n -= WIRE_HDR_SIZE + h.body_len;
		m->ahead_left++;
	}
	/* the buckets asked for first have arrived by now */
	for (unsigned i = 0; i < nh; i++)
		objtab_prefetch_head(&m->objs, hs[i]);
}

/* ---- periodic duties ---- */

static void check_hello(struct master *m)
{
	struct master_client *next;

	for (struct master_client *c = m->clients; c; c = next) {
		next = c->next;		/* close may free c */
		if (!c->hello && c->close && m->now_ms > c->created_ms + HELLO_TIMEOUT_MS) {
			c->created_ms = UINT64_MAX / 2;	/* ask once */
			c->close(c->arg);
		}
	}
}

void master_flush(struct master *m)
{
	mnode_flush(m);
	mrepl_flush(m);
}

bool master_step(struct master *m)
{
	master_now(m);
	if (m->evict_active)
		m->evict_active = evict_step(m, EVICT_STEP_US);
	master_flush(m);
	mput_retry(m);
	return m->evict_active;
}

void master_tick(struct master *m)
{
	master_now(m);
	observe_deferred(m, mono_ns());
	mlease_sweep(m);
	mpol_age(m);
	mnode_tick(m);
	mrecover_tick(m);
	check_hello(m);
	master_step(m);
	mrepl_tick(m);
	mtabfile_tick(m);
}

void master_standby_tick(struct master *m)
{
	master_now(m);
	check_hello(m);
}

int master_follow_apply(struct master *m, const uint8_t *body, size_t len)
{
	master_now(m);
	return mrepl_apply(m, body, len);
}

bool master_follow_synced(const struct master *m)
{
	return m->repl_synced;
}

void master_repl_stats(const struct master *m, struct master_repl_stats *st)
{
	st->synced = m->repl_synced;
	st->warm = m->warm;
	st->records = m->repl_records;
	st->confirmed = m->recon_confirmed;
	st->ghosts = m->recon_ghosts;
	st->lag_drops = m->repl_lag_drops;
}

uint64_t master_keys(const struct master *m)
{
	return m->keys;
}

void master_takeover(struct master *m, uint64_t epoch, struct mevents *ev)
{
	master_now(m);
	m->epoch = epoch;
	m->ev = ev;
	mrepl_takeover(m);
}

int master_table_load(struct master *m, const char *path, char *why, size_t cap)
{
	master_now(m);
	return mtabfile_load(m, path, why, cap);
}

void master_warm_grace(struct master *m, uint64_t base_ms)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (s && s->online && s->warm)	/* 10 s per million: a scan without the warmer */
			s->last_seen_ms = m->now_ms + base_ms + s->nobjs / 100;
	}
}

int master_table_start(struct master *m, const char *path, uint64_t delay_ms)
{
	master_now(m);
	return mtabfile_start(m, path, delay_ms);
}

/* ---- reload ---- */

void master_reload(struct master *m, const struct kvp_conf *nc)
{
	char old[CONF_STR];

	memcpy(old, m->conf.master.allocation_strategy, sizeof(old));
	int restart = conf_apply_live(&m->conf, nc);	/* logs each change */
	if (parse_strategy(m->conf.master.allocation_strategy, &m->strategy)) {
		memcpy(m->conf.master.allocation_strategy, old, sizeof(old));
		parse_strategy(old, &m->strategy);
	}
	int lvl = log_level_parse(m->conf.log.level);
	if (lvl >= 0)
		log_level = lvl;
	bool lru = m->pol.lru;
	mpol_configure(m);
	if (lru != m->pol.lru)
		evict_reorder(m);
	if (restart)
		log_warn("reload: %d changed key(s) take effect after a restart", restart);
	char err[512];
	if (mten_reload(m, err, sizeof(err)))
		log_err("reload: %s; the tenants stay as they were", err);
	/* New watermarks apply to the next usage change; look now as well. */
	for (size_t i = 1; i < m->segs.n; i++)
		if (m->segs.v[i] && m->segs.v[i]->online)
			evict_check(m, m->segs.v[i]);
}

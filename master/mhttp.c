/* mhttp: /metrics, the admin endpoints (madmin.c) and the Mooncake
 * metadata store; see mhttp.h. */
#include "mhttp.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/crypto.h>

#include <xxhash.h>

#include "ev.h"
#include "ha.h"
#include "http.h"
#include "kvpool.h"
#include "log.h"
#include "madmin.h"
#include "master_i.h"
#include "mevents.h"
#include "mpolicy.h"
#include "mlease.h"
#include "mstatus.h"
#include "ui.h"

/* Metadata store: chained hash of key -> value, bounded in count and bytes. */
struct md_ent {
	struct md_ent *next;
	char *val;
	size_t len;
	char key[];
};

#define MD_BUCKETS 4096

struct mhttp {
	struct master *m;
	struct ha *ha;			/* NULL: ha = none */
	struct http_srv *http;
	struct http_srv *md;		/* NULL: none, or served by http (same address) */
	bool md_on;
	struct md_ent *md_tab[MD_BUCKETS];
	size_t md_keys;
	size_t md_bytes;
	struct madmin admin;		/* Mooncake's admin endpoints */
	struct ev_loop *loop;
	uint64_t status_timer;		/* samples of /api/status's history, 1 s */
	struct mstatus status;
};

/* ---- metrics ---- */

/* Prometheus label value: backslash, double quote and newline escaped. */
static void label(struct sbuf *b, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			sb_printf(b, "\\%c", *s);
		else if (*s == '\n')
			sb_printf(b, "\\n");
		else
			sb_printf(b, "%c", *s);
	}
}

static void head(struct sbuf *b, const char *name, const char *type, const char *help)
{
	sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(struct sbuf *b, const char *name, const char *help, unsigned long long v)
{
	head(b, name, "gauge", help);
	sb_printf(b, "%s %llu\n", name, v);
}

static void counter(struct sbuf *b, const char *name, const char *help, unsigned long long v)
{
	head(b, name, "counter", help);
	sb_printf(b, "%s %llu\n", name, v);
}

/* Requests the master serves (FREE and the node data ops are not). */
static bool master_op(unsigned op)
{
	return op >= WIRE_OP_HELLO && op <= WIRE_OP_CLIENT_STATS && op != WIRE_OP_FREE &&
	       op != WIRE_OP_FOLLOW && op != WIRE_OP_REPL && wire_op_name(op);
}

static void seg_metric(struct sbuf *b, struct master *m, const char *name, const char *help,
		       unsigned long long (*get)(const struct seg *))
{
	head(b, name, "gauge", help);
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (!s || !s->online)
			continue;
		sb_printf(b, "%s{segment=\"%u\",node=\"", name, s->id);
		label(b, s->name);
		sb_printf(b, "\"} %llu\n", get(s));
	}
}

static unsigned long long seg_used(const struct seg *s) { return s->used; }
static unsigned long long seg_cap(const struct seg *s) { return s->capacity; }
static unsigned long long seg_objs(const struct seg *s) { return s->nobjs; }
static unsigned long long seg_frees(const struct seg *s)
{
	unsigned long long n = s->fq.n;

	for (const struct fbatch *f = s->inflight; f; f = f->next)
		n += f->n;
	return n;
}

static void op_counter(struct sbuf *b, struct master *m, const char *name, const char *help,
		       size_t field)
{
	head(b, name, "counter", help);
	for (unsigned op = 1; op < WIRE_OP_MAX; op++)
		if (master_op(op))
			sb_printf(b, "%s{op=\"%s\"} %llu\n", name, wire_op_name(op),
				  (unsigned long long)*(const uint64_t *)(const void *)
					  ((const char *)&m->ops[op] + field));
}

/* Per namespace: keys, bytes, and an info series carrying the fingerprint's
 * fields as labels (value 1). */
static void ns_metrics(struct sbuf *b, struct master *m)
{
	gauge(b, "kvpool_master_namespaces", "Namespaces declared (docs/master.md \"Namespaces\").",
	      m->ns.n);
	head(b, "kvpool_master_namespace_keys", "gauge", "Objects under a namespace's prefix.");
	for (size_t i = 0; i < m->ns.n; i++)
		sb_printf(b, "kvpool_master_namespace_keys{namespace=\"%s\"} %llu\n", m->ns.v[i]->name,
			  (unsigned long long)m->ns.v[i]->keys);
	head(b, "kvpool_master_namespace_bytes", "gauge",
	     "Value bytes of the objects under a namespace's prefix.");
	for (size_t i = 0; i < m->ns.n; i++)
		sb_printf(b, "kvpool_master_namespace_bytes{namespace=\"%s\"} %llu\n", m->ns.v[i]->name,
			  (unsigned long long)m->ns.v[i]->bytes);
	head(b, "kvpool_master_namespace_clients", "gauge",
	     "Connections that declared a namespace.");
	for (size_t i = 0; i < m->ns.n; i++)
		sb_printf(b, "kvpool_master_namespace_clients{namespace=\"%s\"} %u\n",
			  m->ns.v[i]->name, m->ns.v[i]->clients);
	head(b, "kvpool_master_namespace_info", "gauge",
	     "A namespace's model fingerprint and its fields (value 1).");
	for (size_t i = 0; i < m->ns.n; i++) {
		const struct mns_ns *ns = m->ns.v[i];
		sb_printf(b, "kvpool_master_namespace_info{namespace=\"%s\",fingerprint=\"%016llx\","
			  "model=\"", ns->name, (unsigned long long)ns->fp);
		label(b, ns->model);
		sb_printf(b, "\",dtype=\"");
		label(b, ns->dtype);
		sb_printf(b, "\",page_size=\"%u\",layout=\"", ns->page_size);
		label(b, ns->layout);
		sb_printf(b, "\",tp=\"%u\"} 1\n", ns->tp);
	}
}

void mhttp_metrics(struct master *m, struct sbuf *b)
{
	uint64_t used, cap;

	segreg_usage(&m->segs, &used, &cap);
	gauge(b, "kvpool_master_keys", "Objects visible to readers (complete puts).", m->keys);
	gauge(b, "kvpool_master_pending_puts", "Puts started and not yet ended or revoked.",
	      m->pending.n);
	gauge(b, "kvpool_master_active_leases",
	      "Objects under a read lease (ended ones count until swept, within a tick).",
	      mlease_active(m));
	gauge(b, "kvpool_master_segments", "Mounted segments.", m->segs.online);
	gauge(b, "kvpool_master_connections", "Open RPC connections.", master_clients(m));
	gauge(b, "kvpool_master_bytes_used", "Bytes allocated in all segments.", used);
	gauge(b, "kvpool_master_capacity_bytes", "Bytes of all segments.", cap);
	ns_metrics(b, m);
	mten_metrics(m, b);
	seg_metric(b, m, "kvpool_master_segment_used_bytes",
		   "Bytes allocated in a segment (FREEs not yet acknowledged included).", seg_used);
	seg_metric(b, m, "kvpool_master_segment_capacity_bytes", "Bytes of a segment.", seg_cap);
	seg_metric(b, m, "kvpool_master_segment_objects", "Replicas living in a segment.",
		   seg_objs);
	seg_metric(b, m, "kvpool_master_segment_pending_frees",
		   "Extents freed by the master, not yet acknowledged by the node.", seg_frees);
	counter(b, "kvpool_master_evictions_total", "Replicas evicted.", m->evictions);
	counter(b, "kvpool_master_evicted_bytes_total", "Bytes evicted.", m->evicted_bytes);
	head(b, "kvpool_master_eviction_seconds_total", "counter",
	     "Time the loop spent choosing and dropping victims (paced steps and the part of "
	     "a PUT_START that evicts).");
	sb_printf(b, "kvpool_master_eviction_seconds_total %.6f\n", (double)m->evict_ns / 1e9);
	counter(b, "kvpool_master_evicted_ghosts_total",
		"Evicted keys remembered with their reuse priority (eviction_policy = reuse).",
		m->pol.ghost_inserts);
	counter(b, "kvpool_master_ghost_hits_total",
		"Puts of a key eviction had taken that resumed its priority from a ghost.",
		m->pol.ghost_hits);
	counter(b, "kvpool_master_first_puts_total",
		"Puts of keys the master had not seen (no ghost).", m->pol.first_puts);
	counter(b, "kvpool_master_orphans_evicted_total",
		"Objects evicted first because what they extend was gone (removed, its node "
		"dead, replaced).", m->orphans_evicted);
	head(b, "kvpool_master_eviction_half_life_accesses", "gauge",
	     "Half-life of a read's weight in the reuse priority, in block accesses "
	     "(eviction_half_life, or the 90th percentile of the reuse intervals seen).");
	sb_printf(b, "kvpool_master_eviction_half_life_accesses %u\n", m->pol.half);
	counter(b, "kvpool_master_policy_accesses_total",
		"Block accesses the eviction policy's clock counted (reads and first puts).",
		m->pol.clk);
	head(b, "kvpool_master_ghost_slots", "gauge", "Entries the ghost table can hold.");
	sb_printf(b, "kvpool_master_ghost_slots %llu\n",
		  (unsigned long long)mpol_ghost_slots(m));
	counter(b, "kvpool_master_demotions_total",
		"Memory replicas moved to their node's spill tier.", m->demotions);
	counter(b, "kvpool_master_promotions_total",
		"Disk replicas copied back to memory on a get (spill.promote_on_hit).",
		m->promotions);
	counter(b, "kvpool_master_promote_failures_total",
		"Promotions the node could not do (the object stayed on disk).",
		m->promote_failures);
	counter(b, "kvpool_master_checksum_failures_total",
		"Tier moves a node refused because the value no longer matched its checksum "
		"(the replica was dropped).", m->checksum_failures);
	counter(b, "kvpool_master_promote_skipped_total",
		"Gets of disk-only objects not promoted: no room under the watermark, an "
		"eviction round running, or the node away.",
		m->promote_skipped);
	struct mevents_stats es = { 0 };
	if (m->ev)
		mevents_stats(m->ev, &es);
	counter(b, "kvpool_master_kv_events_total",
		"KV events published (kv_events_endpoint).", es.events);
	counter(b, "kvpool_master_kv_events_batches_total",
		"KV event batches published: the next batch's seq.", es.batches);
	counter(b, "kvpool_master_kv_events_dropped_total",
		"KV events dropped: the publisher's queue was full (kv_events_queue).",
		es.dropped);
	counter(b, "kvpool_master_kv_events_replays_total",
		"Replay requests served on kv_events_replay_endpoint.", es.replays);
	counter(b, "kvpool_master_kv_events_bad_requests_total",
		"Malformed replay requests ignored.", es.bad_requests);
	counter(b, "kvpool_master_put_timeouts_total", "Puts reclaimed after put_timeout.",
		m->put_timeouts);
	counter(b, "kvpool_master_ghosts_replaced_total",
		"Puts that replaced an object whose every replica was on a draining or "
		"disconnected segment.", m->ghosts_replaced);
	counter(b, "kvpool_master_node_expiries_total",
		"Segments dropped because their node was silent for node_ttl.",
		m->node_expiries);
	static const char *const paths[WIRE_CSTAT_N] = { "local", "tcp", "rdma", "disk" };
	head(b, "kvpool_master_client_bytes_total", "counter",
	     "Value bytes the clients moved, by path (their CLIENT_STATS reports; disk: read "
	     "from a spill tier, also counted in its path).");
	for (int i = 0; i < WIRE_CSTAT_N; i++)
		sb_printf(b, "kvpool_master_client_bytes_total{path=\"%s\"} %llu\n", paths[i],
			  (unsigned long long)m->client_bytes[i]);
	counter(b, "kvpool_master_prefix_blocks_asked_total",
		"Keys of EXISTS and GET batches of more than one key (prefix lookups).",
		m->prefix_blocks_asked);
	counter(b, "kvpool_master_prefix_blocks_found_total",
		"Keys of the leading run found in those batches.", m->prefix_blocks_found);
	counter(b, "kvpool_master_prefix_tokens_asked_total",
		"Blocks asked times their namespace's page size (batches under a namespace).",
		m->prefix_tokens_asked);
	counter(b, "kvpool_master_prefix_tokens_found_total",
		"Tokens of the leading runs found (batches under a namespace).",
		m->prefix_tokens_found);
	op_counter(b, m, "kvpool_master_requests_total", "Request frames per opcode.",
		   offsetof(struct op_stats, frames));
	op_counter(b, m, "kvpool_master_request_items_total", "Keys (batch items) per opcode.",
		   offsetof(struct op_stats, items));
	op_counter(b, m, "kvpool_master_request_failures_total",
		   "Frames refused plus items that failed, per opcode.",
		   offsetof(struct op_stats, failures));

	const char *h = "kvpool_master_request_duration_seconds";
	head(b, h, "histogram", "Time to handle one request frame, per opcode.");
	for (unsigned op = 1; op < WIRE_OP_MAX; op++) {
		if (!master_op(op))
			continue;
		const struct op_stats *st = &m->ops[op];
		uint64_t cum = 0;
		for (int i = 0; i < MASTER_NBUCKETS; i++) {
			cum += st->hist[i];
			sb_printf(b, "%s_bucket{op=\"%s\",le=\"%g\"} %llu\n", h, wire_op_name(op),
				  master_buckets[i], (unsigned long long)cum);
		}
		cum += st->hist[MASTER_NBUCKETS];
		sb_printf(b, "%s_bucket{op=\"%s\",le=\"+Inf\"} %llu\n", h, wire_op_name(op),
			  (unsigned long long)cum);
		sb_printf(b, "%s_sum{op=\"%s\"} %.9f\n", h, wire_op_name(op),
			  (double)st->sum_ns / 1e9);
		sb_printf(b, "%s_count{op=\"%s\"} %llu\n", h, wire_op_name(op),
			  (unsigned long long)cum);
	}
}

/* HA: role, epoch, elections, etcd (docs/ha.md). */
static void ha_metrics(struct mhttp *h, struct sbuf *b)
{
	struct ha_status st;

	ha_get_status(h->ha, &st);
	gauge(b, "kvpool_master_ha_leader", "1 while this master leads, 0 standing by.", st.leader);
	gauge(b, "kvpool_master_ha_epoch",
	      "Epoch of the current leader as this master knows it (etcd revision).", st.epoch);
	counter(b, "kvpool_master_ha_elections_total", "Elections this master won.", st.elections);
	counter(b, "kvpool_master_ha_stepdowns_total", "Times this master stopped leading.",
		st.stepdowns);
	head(b, "kvpool_master_ha_last_election_timestamp_seconds", "gauge",
	     "When this master last saw a new leader (its own election or another's).");
	sb_printf(b, "kvpool_master_ha_last_election_timestamp_seconds %.3f\n",
		  (double)st.last_change_ns / 1e9);
	gauge(b, "kvpool_master_ha_etcd_up", "1 if the last etcd request was answered.", st.etcd_ok);
	counter(b, "kvpool_master_ha_etcd_errors_total", "etcd requests that failed.",
		st.etcd_errors);
	gauge(b, "kvpool_master_ha_lease_ttl_ms", "The lease etcd granted at the last election.",
	      st.lease_ttl_ms);
	gauge(b, "kvpool_master_ha_recovering",
	      "1 while a new leader waits for the last leader's segments.",
	      st.leader && master_recovering(h->m));
	gauge(b, "kvpool_master_ha_recovery_ms", "How long the last recovery window lasted.",
	      master_recover_ms(h->m));
	struct master_repl_stats rs;
	master_repl_stats(h->m, &rs);
	gauge(b, "kvpool_master_ha_standby_in_step",
	      "1 while this standby holds the leader's whole table (its snapshot is complete).",
	      !st.leader && rs.synced);
	counter(b, "kvpool_master_ha_standby_records_total",
		"Changes of the leader's table this standby applied.", rs.records);
	gauge(b, "kvpool_master_ha_warm_takeover",
	      "1 if this leader kept the table it followed as a standby.", st.leader && rs.warm);
	counter(b, "kvpool_master_ha_reconciled_replicas_total",
		"Replicas of the taken-over table that the nodes' reports confirmed.", rs.confirmed);
	counter(b, "kvpool_master_ha_ghosts_dropped_total",
		"Replicas of the taken-over table that no node held (dropped at its HEARTBEAT).",
		rs.ghosts);
	counter(b, "kvpool_master_ha_standby_lag_drops_total",
		"Standbys dropped with over 1 GiB of stream not yet sent (they follow again).",
		rs.lag_drops);
}

/* The election's state into the admin view (/health /role /ha_status
 * /leader, madmin.c): a leader serves, or recovers (the key endpoints
 * answer 503 until it has its segments back); the others stand by. */
static void ha_view(struct mhttp *h)
{
	struct ha_status st;

	ha_get_status(h->ha, &st);
	bool rec = st.leader && master_recovering(h->m);
	mhttp_set_ha(h, st.leader ? "leader" : "standby",
		     st.leader ? (rec ? "recovering" : "serving") : "standby", st.leader && !rec,
		     st.leader_known ? st.rec.rpc : "", st.epoch);
	h->admin.ha.last_election_ns = st.last_change_ns;
	h->admin.ha.etcd_up = st.etcd_ok;
}

/* /health/leader: 200 on the leader only, for load balancers. */
static void ha_leader_only(struct mhttp *h, struct http_resp *resp)
{
	bool lead = strcmp(h->admin.ha.role, "leader") == 0;

	resp->status = lead ? 200 : 503;
	resp->content_type = "text/plain";
	resp->body = strdup(lead ? "leader\n" : "standby\n");
	resp->body_len = resp->body ? strlen(resp->body) : 0;
}

/* ---- metadata store ---- */

static struct md_ent **md_slot(struct mhttp *h, const char *key)
{
	struct md_ent **p = &h->md_tab[XXH3_64bits(key, strlen(key)) % MD_BUCKETS];

	while (*p && strcmp((*p)->key, key) != 0)
		p = &(*p)->next;
	return p;
}

static void text(struct http_resp *r, int status, const char *msg)
{
	r->status = status;
	r->content_type = "text/plain";
	r->body = strdup(msg);
	r->body_len = r->body ? strlen(msg) : 0;
}

/* Every /metadata answer, errors included, is application/json, as
 * Mooncake's metadata servers send it (transfer engines do not parse the
 * error bodies; a proxy or client that goes by the type sees one). */
static void md_text(struct http_resp *r, int status, const char *msg)
{
	text(r, status, msg);
	r->content_type = "application/json";
}

/* The key as Mooncake's metadata server (mooncake_http_metadata_server)
 * takes it: surrounding whitespace stripped, so " seg1 " and "seg1" are one
 * key; NULL for a blank one. @buf holds KVP_MAX_KEY + 1 bytes; a longer
 * key sets *too_long. */
static const char *md_key(const char *raw, char *buf, bool *too_long)
{
	static const char ws[] = " \t\n\r\v\f";
	size_t n;

	*too_long = false;
	if (!raw)
		return NULL;
	raw += strspn(raw, ws);
	n = strlen(raw);
	while (n && strchr(ws, raw[n - 1]))
		n--;
	if (!n)
		return NULL;
	if (n > KVP_MAX_KEY) {
		*too_long = true;
		return NULL;
	}
	memcpy(buf, raw, n);
	buf[n] = '\0';
	return buf;
}

/* PUT: as Mooncake's, a key naming "rpc_meta" (an RPC endpoint's record)
 * cannot be overwritten with a different value. */
static void md_put(struct mhttp *h, const char *key, const struct http_req *req,
		   struct http_resp *resp)
{
	struct md_ent **p = md_slot(h, key), *e = *p;
	size_t old = e ? e->len : 0;

	if (e && strstr(key, "rpc_meta")) {
		if (e->len == req->body_len && !memcmp(e->val, req->body, e->len))
			return md_text(resp, 200, "metadata unchanged");
		return md_text(resp, 400, "Duplicate rpc_meta key not allowed");
	}
	if (!e && h->md_keys >= MHTTP_MD_MAX_KEYS)
		return md_text(resp, 507, "metadata store full (keys)");
	if (h->md_bytes - old + req->body_len > MHTTP_MD_MAX_TOTAL)
		return md_text(resp, 507, "metadata store full (bytes)");
	char *val = malloc(req->body_len ? req->body_len : 1);
	if (!val)
		return md_text(resp, 500, "out of memory");
	if (req->body_len)
		memcpy(val, req->body, req->body_len);
	if (!e) {
		size_t kl = strlen(key);
		e = malloc(sizeof(*e) + kl + 1);
		if (!e) {
			free(val);
			return md_text(resp, 500, "out of memory");
		}
		memcpy(e->key, key, kl + 1);
		e->val = NULL;
		e->len = 0;
		e->next = NULL;
		*p = e;
		h->md_keys++;
	}
	free(e->val);
	e->val = val;
	e->len = req->body_len;
	h->md_bytes = h->md_bytes - old + req->body_len;
	md_text(resp, 200, "metadata updated");
}

static void md_handle(struct mhttp *h, const struct http_req *req, struct http_resp *resp)
{
	char kb[KVP_MAX_KEY + 1];
	bool too_long;
	const char *key = md_key(http_query(req, "key"), kb, &too_long);

	/* Mooncake's answers, word for word (http_metadata_server.cpp) */
	if (too_long)
		return md_text(resp, 400, "key longer than 1024 bytes");
	if (!key)
		return md_text(resp, 400, "Missing key parameter");
	struct md_ent **p = md_slot(h, key), *e = *p;
	if (strcmp(req->method, "GET") == 0) {
		if (!e)
			return md_text(resp, 404, "metadata not found");
		resp->status = 200;
		resp->content_type = "application/json";
		resp->body = malloc(e->len ? e->len : 1);
		if (!resp->body)
			return md_text(resp, 500, "out of memory");
		memcpy(resp->body, e->val, e->len);
		resp->body_len = e->len;
	} else if (strcmp(req->method, "PUT") == 0 || strcmp(req->method, "POST") == 0) {
		md_put(h, key, req, resp);
	} else if (strcmp(req->method, "DELETE") == 0) {
		if (!e)
			return md_text(resp, 404, "metadata not found");
		*p = e->next;
		h->md_keys--;
		h->md_bytes -= e->len;
		free(e->val);
		free(e);
		md_text(resp, 200, "metadata deleted");
	} else {
		md_text(resp, 405, "Method not allowed");
	}
}

/* /api/status: the status page's and `kvpool top`'s one document. */
static void api_status(struct mhttp *h, const struct http_req *req, struct http_resp *resp)
{
	const struct madmin_ha *a = &h->admin.ha;
	struct mstatus_ha ha = {
		.mode = h->ha ? "etcd" : "none",
		.role = a->role, .state = a->state, .leader = a->leader,
		.view_version = a->view_version,
	};
	struct sbuf b = { 0 };
	uint64_t since = 0;
	bool hist = ui_since(req, &since);

	mstatus_json(hist ? &h->status : NULL, h->m, &ha, since, &b);
	resp->content_type = "application/json";
	resp->body = b.p;
	resp->body_len = b.len;
}

static void status_tick(struct ev_loop *loop, void *arg)
{
	struct mhttp *h = arg;

	mstatus_tick(&h->status, h->m);
}

/* Endpoints that read or change data (the metadata store, the admin
 * queries of keys and segments) need "Authorization: Bearer TOKEN" when a
 * cluster token is configured: the cluster token or a tenant's, an admin
 * one where admin is set. /metrics, /health and the status page stay open
 * (docs/monitoring.md "Authentication"). false: resp holds the 401/403. */
static bool authorized(struct mhttp *h, const struct http_req *req, struct http_resp *resp,
		       bool admin)
{
	const struct master *m = h->m;
	const char *want = m->conf.cluster.token;

	if (!want[0])
		return true;	/* no token: loopback only (DESIGN: Safety) */
	const char *a = http_header(req, "Authorization");
	const char *tok = a && strncasecmp(a, "Bearer ", 7) == 0 ? a + 7 : NULL;
	size_t n = tok ? strlen(tok) : 0;
	const struct tenant *t = NULL;
	bool ok = false;
	if (tok && m->ten.on) {
		t = tenant_find_token(&m->ten.tab, (const uint8_t *)tok, n);
		ok = t != NULL;
	} else if (tok) {
		ok = n == strlen(want) && CRYPTO_memcmp(tok, want, n) == 0;
	}
	if (!ok) {
		text(resp, 401, "401 unauthorized: this endpoint needs 'Authorization: Bearer "
		     "<token>' (the cluster token, or a tenant's)\n");
		return false;
	}
	if (admin && t && !t->admin) {
		text(resp, 403, "403 forbidden: this endpoint needs an admin tenant's token\n");
		return false;
	}
	return true;
}

/* /get_all_segments (node names) stays open: SGLang's check_server polls
 * it without credentials. */
static bool admin_path(const char *p)
{
	static const char *const paths[] = { "/get_segments_detail", "/query_segment",
		"/query_key", "/batch_query_keys", "/get_all_keys" };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (!strcmp(p, paths[i]))
			return true;
	return false;
}

static void on_http(const struct http_req *req, struct http_resp *resp, void *arg)
{
	struct mhttp *h = arg;
	bool get = strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0;

	if (strcmp(req->path, "/metrics") == 0 && get) {
		struct sbuf b = { 0 };
		mhttp_metrics(h->m, &b);
		if (h->md_on)
			sb_printf(&b, "# HELP kvpool_master_metadata_keys Keys in the metadata store.\n"
				  "# TYPE kvpool_master_metadata_keys gauge\n"
				  "kvpool_master_metadata_keys %zu\n", h->md_keys);
		if (h->ha)
			ha_metrics(h, &b);
		resp->body = b.p;
		resp->body_len = b.len;
		return;
	}
	if (h->ha) {
		ha_view(h);
		if (get && strcmp(req->path, "/health/leader") == 0)
			return ha_leader_only(h, resp);
	}
	if (h->md_on && !h->md && strcmp(req->path, "/metadata") == 0) {	/* same address */
		if (authorized(h, req, resp, false))
			md_handle(h, req, resp);
		return;
	}
	if (admin_path(req->path) && !authorized(h, req, resp, true))
		return;
	if (get && strcmp(req->path, "/api/status") == 0)
		return api_status(h, req, resp);
	if (ui_serve(req, resp))
		return;
	if (madmin_handle(&h->admin, h->m, req, resp))
		return;
	text(resp, 404, "not found");
}

/* The metadata server answers /metadata only. */
static void on_md(const struct http_req *req, struct http_resp *resp, void *arg)
{
	struct mhttp *h = arg;

	if (strcmp(req->path, "/metadata") == 0) {
		if (authorized(h, req, resp, false))
			md_handle(h, req, resp);
		return;
	}
	if (strcmp(req->path, "/health") == 0 && strcmp(req->method, "GET") == 0)
		return text(resp, 200, "OK");		/* as Mooncake's metadata server */
	text(resp, 404, "not found");
}

struct mhttp *mhttp_start(struct ev_loop *loop, struct master *m, const char *http_listen,
			  const char *metadata_listen, const struct http_tls *tls, char *err,
			  size_t errlen)
{
	struct mhttp *h = calloc(1, sizeof(*h));

	if (!h) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	h->m = m;
	h->loop = loop;
	madmin_init(&h->admin);
	h->md_on = metadata_listen != NULL;
	h->http = http_start_tls(loop, http_listen, MHTTP_MD_MAX_VALUE, on_http, h, tls, err,
				 errlen);
	if (!h->http)
		goto out_free;
	if (h->md_on && strcmp(metadata_listen, http_listen) != 0) {
		h->md = http_start_tls(loop, metadata_listen, MHTTP_MD_MAX_VALUE, on_md, h, tls,
				       err, errlen);
		if (!h->md)
			goto out_http;
	}
	mstatus_tick(&h->status, m);
	h->status_timer = ev_timer_add(loop, 1000, true, status_tick, h);
	if (!h->status_timer) {
		snprintf(err, errlen, "cannot add a timer");
		goto out_md;
	}
	return h;

out_md:
	http_stop(h->md);
out_http:
	http_stop(h->http);
out_free:
	free(h);
	return NULL;
}

void mhttp_stop(struct mhttp *h)
{
	if (!h)
		return;
	ev_timer_del(h->loop, h->status_timer);
	http_stop(h->md);
	http_stop(h->http);
	for (size_t i = 0; i < MD_BUCKETS; i++)
		while (h->md_tab[i]) {
			struct md_ent *e = h->md_tab[i];
			h->md_tab[i] = e->next;
			free(e->val);
			free(e);
		}
	free(h);
}

void mhttp_set_ha(struct mhttp *h, const char *role, const char *state, bool service_ready,
		  const char *leader, uint64_t view_version)
{
	struct madmin_ha *ha = &h->admin.ha;

	snprintf(ha->role, sizeof(ha->role), "%s", role);
	snprintf(ha->state, sizeof(ha->state), "%s", state);
	ha->service_ready = service_ready;
	snprintf(ha->leader, sizeof(ha->leader), "%s", leader ? leader : "");
	ha->view_version = view_version;
}

void mhttp_set_master(struct mhttp *h, struct master *m)
{
	h->m = m;
}

void mhttp_set_election(struct mhttp *h, struct ha *ha)
{
	h->ha = ha;
}

int mhttp_port(const struct mhttp *h)
{
	return http_port(h->http);
}

int mhttp_metadata_port(const struct mhttp *h)
{
	if (!h->md_on)
		return -1;
	return http_port(h->md ? h->md : h->http);
}

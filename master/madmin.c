/* madmin: Mooncake's master admin endpoints; see madmin.h. Formats follow
 * master_admin_service.cpp: JSON with Mooncake's field names where it
 * answers JSON, its plain text where it answers text, its error bodies
 * ({"success":false,"error_code":N,"error_message":"NAME"}). */
#include "madmin.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "extent.h"
#include "http.h"
#include "kvpool.h"
#include "master_i.h"

#define TEXT_METRICS "text/plain; version=0.0.4"
#define TEXT_UTF8 "text/plain; charset=utf-8"
#define JSON "application/json; charset=utf-8"

/* Mooncake's ErrorCode names for the codes kvp_to_mooncake() yields. */
static const char *mc_err_name(int code)
{
	static const struct { int code; const char *name; } names[] = {
		{ -1, "INTERNAL_ERROR" }, { -10, "BUFFER_OVERFLOW" },
		{ -101, "SEGMENT_NOT_FOUND" }, { -200, "NO_AVAILABLE_HANDLE" },
		{ -400, "INVALID_KEY" }, { -600, "INVALID_PARAMS" }, { -601, "ILLEGAL_CLIENT" },
		{ -700, "INVALID_WRITE" }, { -701, "INVALID_READ" },
		{ -703, "REPLICA_IS_NOT_READY" }, { -704, "OBJECT_NOT_FOUND" },
		{ -705, "OBJECT_ALREADY_EXISTS" }, { -706, "OBJECT_HAS_LEASE" },
		{ -707, "LEASE_EXPIRED" }, { -800, "TRANSFER_FAIL" }, { -900, "RPC_FAIL" },
		{ -901, "RPC_TIMEOUT" }, { -1010, "UNAVAILABLE_IN_CURRENT_STATUS" },
		{ -1011, "UNAVAILABLE_IN_CURRENT_MODE" },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].code == code)
			return names[i].name;
	return "INTERNAL_ERROR";
}

static void reply(struct http_resp *r, int status, const char *type, struct sbuf *b)
{
	r->status = status;
	r->content_type = type;
	r->body = b->p;
	r->body_len = b->len;
}

static void error_json(struct http_resp *r, int status, int kvp_err, const char *msg)
{
	struct sbuf b = { 0 };
	int code = kvp_to_mooncake(kvp_err);

	sb_printf(&b, "{\"success\":false,\"error_code\":%d,\"error_message\":", code);
	msg = msg ? msg : mc_err_name(code);
	sb_json_str(&b, msg, strlen(msg));
	sb_printf(&b, "}");
	reply(r, status, JSON, &b);
}

void madmin_init(struct madmin *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->ha.role, sizeof(a->ha.role), "leader");
	snprintf(a->ha.state, sizeof(a->ha.state), "serving");
	a->ha.service_ready = true;
	a->ha.etcd_up = -1;
}

/* ---- the runtime: /health /role /ha_status /leader ---- */

static void leader_fields(struct sbuf *b, const struct madmin_ha *ha)
{
	if (!ha->leader[0])
		return;
	sb_printf(b, ",\"leader_address\":");
	sb_json_str(b, ha->leader, strlen(ha->leader));
	sb_printf(b, ",\"view_version\":%llu", (unsigned long long)ha->view_version);
}

static void health(const struct madmin *a, struct http_resp *r)
{
	struct sbuf b = { 0 };

	sb_printf(&b, "{\"status\":\"ok\",\"role\":\"%s\",\"ha_state\":\"%s\",\"service_ready\":%s",
		  a->ha.role, a->ha.state, a->ha.service_ready ? "true" : "false");
	leader_fields(&b, &a->ha);
	if (a->ha.etcd_up >= 0) {
		/* kvpool's: the epoch, the last election, etcd (docs/ha.md) */
		char when[32] = "";
		time_t t = (time_t)(a->ha.last_election_ns / 1000000000ull);
		struct tm tm;
		if (a->ha.last_election_ns && gmtime_r(&t, &tm))
			strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		sb_printf(&b, ",\"epoch\":%llu,\"last_election\":\"%s\",\"etcd\":\"%s\"",
			  (unsigned long long)a->ha.view_version, when, a->ha.etcd_up ? "up" : "down");
	}
	sb_printf(&b, "}");
	reply(r, 200, JSON, &b);
}

static void leader(const struct madmin *a, struct http_resp *r)
{
	struct sbuf b = { 0 };

	sb_printf(&b, "{\"present\":%s", a->ha.leader[0] ? "true" : "false");
	leader_fields(&b, &a->ha);
	sb_printf(&b, "}");
	reply(r, 200, JSON, &b);
}

static void text(struct http_resp *r, int status, const char *type, const char *s)
{
	struct sbuf b = { 0 };

	sb_bytes(&b, s, strlen(s));
	reply(r, status, type, &b);
}

/* ---- /metrics/summary ---- */

/* Mooncake's byte_size_to_string: "12.00 MB", "512 B". */
static void mc_size(struct sbuf *b, uint64_t v)
{
	static const char *const unit[] = { "KB", "MB", "GB", "TB" };
	double x = (double)v;
	int u = -1;

	while (u < 3 && x >= 1024.0) {
		x /= 1024.0;
		u++;
	}
	if (u < 0)
		sb_printf(b, "%llu B", (unsigned long long)v);
	else
		sb_printf(b, "%.2f %s", x, unit[u]);
}

static const struct { const char *name; unsigned op; } summary_ops[8] = {
	{ "PutStart", WIRE_OP_PUT_START }, { "PutEnd", WIRE_OP_PUT_END },
	{ "PutRevoke", WIRE_OP_PUT_REVOKE }, { "Get", WIRE_OP_GET },
	{ "Exist", WIRE_OP_EXISTS }, { "Del", WIRE_OP_REMOVE },
	{ "DelAll", WIRE_OP_REMOVE_PREFIX }, { "Ping", WIRE_OP_HEARTBEAT },
};

static void summary(struct madmin *a, struct master *m, struct http_resp *r)
{
	struct sbuf b = { 0 };
	uint64_t used, cap, sused = 0, scap = 0;
	double dt = a->have_prev && m->now_ms > a->prev_ms ? (double)(m->now_ms - a->prev_ms) / 1e3 : 0;

	segreg_usage(&m->segs, &used, &cap);
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (s && s->online) {
			sused += seg_spill_used(s);
			scap += s->spill_capacity;
		}
	}
	sb_printf(&b, "role=%s, state=%s, service_ready=%s, master={Mem Storage: ", a->ha.role,
		  a->ha.state, a->ha.service_ready ? "true" : "false");
	mc_size(&b, used);
	sb_printf(&b, " / ");
	mc_size(&b, cap);
	if (cap)
		sb_printf(&b, " (%.1f%%)", (double)used / (double)cap * 100.0);
	sb_printf(&b, " | NVMe-oF SSD: 0 B / 0 B | SSD Storage: ");
	mc_size(&b, sused);
	sb_printf(&b, " / ");
	mc_size(&b, scap);
	/* counting live soft pins would walk every object: not on this loop */
	sb_printf(&b, " | Keys: %llu (soft-pinned: -) | Clients: %zu | Requests "
		  "(Success/Total per sec): ", (unsigned long long)m->keys, m->nclients);
	for (int i = 0; i < 8; i++) {
		const struct op_stats *st = &m->ops[summary_ops[i].op];
		uint64_t items = st->items - (a->have_prev ? a->prev[i][0] : st->items);
		uint64_t fails = st->failures - (a->have_prev ? a->prev[i][1] : st->failures);
		double tot = dt > 0 ? (double)items / dt : 0, ok = dt > 0 ?
			     (double)(items > fails ? items - fails : 0) / dt : 0;
		sb_printf(&b, "%s%s=%.2f/%.2f", i ? ", " : "", summary_ops[i].name, ok, tot);
		a->prev[i][0] = st->items;
		a->prev[i][1] = st->failures;
	}
	sb_printf(&b, "}, ha={HA Metrics Summary: state=%s}", a->ha.state);
	if (a->ha.leader[0])
		sb_printf(&b, ", leader=%s, view_version=%llu", a->ha.leader,
			  (unsigned long long)a->ha.view_version);
	a->have_prev = true;
	a->prev_ms = m->now_ms;
	reply(r, 200, TEXT_METRICS, &b);
}

/* ---- segments ---- */

/* The node's mapping address of the segment (RDMA info: u8 version, u8
 * ndev, u64 addr, ...), 0 without RDMA. */
static uint64_t seg_base(const struct seg *s)
{
	uint64_t a = 0;

	if (s->rdma_info && s->rdma_len >= 10)
		memcpy(&a, s->rdma_info + 2, 8);
	return a;
}

static const char *seg_proto(const struct seg *s)
{
	return s->rdma_len ? "rdma" : "tcp";
}

static void all_segments(struct master *m, struct http_resp *r)
{
	struct sbuf b = { 0 };

	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (s && s->online)
			sb_printf(&b, "%s\n", s->name);
	}
	reply(r, 200, TEXT_METRICS, &b);
}

static void segments_detail(struct master *m, struct http_resp *r)
{
	struct sbuf b = { 0 };

	sb_printf(&b, "{\"total_segments\":%u,\"segments\":[", m->segs.online);
	bool first = true;
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (!s || !s->online)
			continue;
		sb_printf(&b, "%s{\"segment_name\":", first ? "" : ",");
		sb_json_str(&b, s->name, strlen(s->name));
		sb_printf(&b, ",\"segment_id\":\"%u-%llu\",\"client_id\":\"0-%u\","
			  "\"base_address\":\"0x%llx\",\"size_bytes\":%llu,\"size_human\":\"%g GiB\","
			  "\"te_endpoint\":", s->id, (unsigned long long)s->uuid, s->id,
			  (unsigned long long)seg_base(s), (unsigned long long)s->capacity,
			  (double)s->capacity / 1024.0 / 1024.0 / 1024.0);
		sb_json_str(&b, s->endpoint, strlen(s->endpoint));
		sb_printf(&b, ",\"protocol\":\"%s\",\"status\":\"%s\",\"allocator_used_bytes\":%llu,"
			  "\"allocator_capacity_bytes\":%llu,\"allocator_usage_percent\":%g}",
			  seg_proto(s), s->draining ? "DRAINING" : "OK", (unsigned long long)s->used,
			  (unsigned long long)s->capacity,
			  s->capacity ? (double)s->used / (double)s->capacity * 100.0 : 0.0);
		first = false;
	}
	sb_printf(&b, "]}");
	reply(r, 200, JSON, &b);
}

static void query_segment(struct master *m, const struct http_req *req, struct http_resp *r)
{
	const char *name = http_query(req, "segment");
	uint64_t used = 0, cap = 0;
	bool found = false;

	for (size_t i = 1; name && i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (s && s->online && !strcmp(s->name, name)) {
			used += s->used;
			cap += s->capacity;
			found = true;
		}
	}
	if (!found)
		return text(r, 500, TEXT_METRICS, "Failed to query segment");
	struct sbuf b = { 0 };
	sb_printf(&b, "%s\nUsed(bytes): %llu\nCapacity(bytes) : %llu\n", name,
		  (unsigned long long)used, (unsigned long long)cap);
	reply(r, 200, TEXT_METRICS, &b);
}

/* ---- keys ---- */

/* A visible object of key, or NULL with *err (KVP_EKEY, KVP_ENOTFOUND). */
static struct obj *find_obj(struct master *m, const char *key, size_t n, int *err)
{
	if (!wire_key_ok((const uint8_t *)key, n)) {
		*err = KVP_EKEY;
		return NULL;
	}
	struct obj *o = objtab_find(&m->objs, (const uint8_t *)key, n);
	if (!o || !obj_complete(o)) {
		*err = KVP_ENOTFOUND;
		return NULL;
	}
	return o;
}

/* Mooncake's AllocatedBuffer::Descriptor of o's memory replica r: the
 * value's size and address in the node's mapping (the segment's offset
 * plus the extent header when the node has no RDMA address). */
static void put_desc(struct sbuf *b, const struct seg *s, const struct obj *o,
		     const struct rep *r)
{
	sb_printf(b, "{\"size_\":%llu,\"buffer_address_\":%llu,\"protocol_\":\"%s\","
		  "\"transport_endpoint_\":", (unsigned long long)o->value_len,
		  (unsigned long long)(seg_base(s) + rep_off(r) + EXT_HDR_SIZE + o->key_len),
		  seg_proto(s));
	sb_json_str(b, s->endpoint, strlen(s->endpoint));
	sb_printf(b, "}");
}

/* The memory replicas of o as a JSON array of descriptors. */
static void mem_descs(struct sbuf *b, struct master *m, const struct obj *o)
{
	bool first = true;

	sb_printf(b, "[");
	for (unsigned k = 0; k < o->nrep; k++) {
		const struct seg *s = segreg_online(&m->segs, (uint32_t)obj_rep(o)[k].seg);
		if (!s || obj_rep(o)[k].tier != KVP_TIER_MEM)
			continue;
		if (!first)
			sb_printf(b, ",");
		put_desc(b, s, o, &obj_rep(o)[k]);
		first = false;
	}
	sb_printf(b, "]");
}

static void query_key(struct master *m, const struct http_req *req, struct http_resp *r)
{
	const char *key = http_query(req, "key");
	int err = KVP_EKEY;
	struct obj *o = key ? find_obj(m, key, strlen(key), &err) : NULL;

	if (!o)
		return error_json(r, 404, err, NULL);
	struct sbuf b = { 0 };
	sb_printf(&b, "{\"success\":true,\"data\":");
	mem_descs(&b, m, o);
	sb_printf(&b, "}");
	reply(r, 200, JSON, &b);
}

/* The spill replicas of o: Mooncake's local-disk replicas (a node's SSD). */
static void disk_descs(struct sbuf *b, struct master *m, const struct obj *o)
{
	bool any = false;

	for (unsigned k = 0; k < o->nrep; k++) {
		const struct seg *s = segreg_online(&m->segs, (uint32_t)obj_rep(o)[k].seg);
		if (!s || obj_rep(o)[k].tier != KVP_TIER_DISK)
			continue;
		sb_printf(b, "%s{\"client_id\":\"0-%u\",\"object_size\":%llu,"
			  "\"transport_endpoint\":", any ? "," : ",\"local_disk_values\":[", s->id,
			  (unsigned long long)o->value_len);
		sb_json_str(b, s->endpoint, strlen(s->endpoint));
		sb_printf(b, "}");
		any = true;
	}
	if (any)
		sb_printf(b, "]");
}

static void batch_query_keys(struct master *m, const struct http_req *req, struct http_resp *r)
{
	const char *keys = http_query(req, "keys");

	if (!keys || !*keys) {
		struct sbuf e = { 0 };
		sb_printf(&e, "{\"success\":false,\"error\":\"No keys provided. Use "
			  "?keys=key1,key2,...\"}");
		return reply(r, 400, JSON, &e);
	}
	struct sbuf b = { 0 };
	sb_printf(&b, "{\"success\":true,\"data\":{");
	bool first = true;
	for (const char *p = keys;; p++) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		/* a JSON object: a key named twice keeps its first entry */
		bool dup = false;
		for (const char *q = keys; q < p && !dup;) {
			const char *qe = strchr(q, ',');
			dup = (size_t)(qe - q) == n && !memcmp(q, p, n);
			q = qe + 1;
		}
		if (!dup) {
			int err;
			struct obj *o = find_obj(m, p, n, &err);
			sb_printf(&b, "%s", first ? "" : ",");
			sb_json_str(&b, p, n);
			if (o) {
				sb_printf(&b, ":{\"ok\":true,\"values\":");
				mem_descs(&b, m, o);
				disk_descs(&b, m, o);
				sb_printf(&b, "}");
			} else {
				sb_printf(&b, ":{\"ok\":false,\"error\":\"%s\"}",
					  mc_err_name(kvp_to_mooncake(err)));
			}
			first = false;
		}
		if (!end)
			break;
		p = end;
	}
	sb_printf(&b, "}}");
	reply(r, 200, JSON, &b);
}

/* Every visible key, one per line, in byte order (as Mooncake: the whole
 * list at once, so it is for small pools and tools, not for polling). */
static void all_keys(struct master *m, struct http_resp *r)
{
	struct sbuf b = { 0 };

	for (struct obj *o = objtab_seek(&m->objs, (const uint8_t *)"", 0, false); o;
	     o = objtab_next(&m->objs, o)) {
		if (!obj_complete(o))
			continue;
		sb_bytes(&b, obj_key(o), o->key_len);
		sb_bytes(&b, "\n", 1);
	}
	reply(r, 200, TEXT_METRICS, &b);
}

bool madmin_handle(struct madmin *a, struct master *m, const struct http_req *req,
		   struct http_resp *r)
{
	const char *p = req->path;

	if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0)
		return false;
	if (!strcmp(p, "/health"))
		health(a, r);
	else if (!strcmp(p, "/role"))
		text(r, 200, TEXT_UTF8, a->ha.role);
	else if (!strcmp(p, "/ha_status"))
		text(r, 200, TEXT_UTF8, a->ha.state);
	else if (!strcmp(p, "/leader"))
		leader(a, r);
	else if (!strcmp(p, "/metrics/summary"))
		summary(a, m, r);
	else if (strcmp(p, "/get_all_segments") && strcmp(p, "/get_segments_detail") &&
		 strcmp(p, "/query_segment") && strcmp(p, "/query_key") &&
		 strcmp(p, "/batch_query_keys") && strcmp(p, "/get_all_keys"))
		return false;
	else if (!a->ha.service_ready)
		error_json(r, 503, KVP_ENOTSUP, "service plane is not active");
	else if (!strcmp(p, "/get_all_segments"))
		all_segments(m, r);
	else if (!strcmp(p, "/get_segments_detail"))
		segments_detail(m, r);
	else if (!strcmp(p, "/query_segment"))
		query_segment(m, req, r);
	else if (!strcmp(p, "/query_key"))
		query_key(m, req, r);
	else if (!strcmp(p, "/batch_query_keys"))
		batch_query_keys(m, req, r);
	else
		all_keys(m, r);
	return true;
}

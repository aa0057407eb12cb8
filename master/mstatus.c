/* mstatus: the master's /api/status document and its sample ring; see
 * mstatus.h. */
#include "mstatus.h"

#include <stddef.h>
#include <string.h>

#include "http.h"
#include "master_i.h"
#include "mlease.h"

int mstatus_client_stats(struct master *m, struct rbuf *r)
{
	uint32_t n = rb_count(r, 8);

	if (!rb_ok(r) || n > WIRE_CSTATS_MAX)
		return KVP_EPROTO;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t v = rb_u64(r);
		if (i < WIRE_CSTAT_N)
			m->client_bytes[i] += v;
	}
	return rb_ok(r) ? 0 : KVP_EPROTO;
}

void mstatus_read(const struct master *m, struct mstatus_sample *out)
{
	const struct op_stats *pe = &m->ops[WIRE_OP_PUT_END], *g = &m->ops[WIRE_OP_GET];

	memset(out, 0, sizeof(*out));
	out->t_ms = master_clock_ns(CLOCK_REALTIME) / 1000000u;
	out->puts = pe->items - (pe->failures < pe->items ? pe->failures : pe->items);
	out->gets = g->items;
	out->hits = g->items - (g->failures < g->items ? g->failures : g->items);
	out->evictions = m->evictions;
	out->demotions = m->demotions;
	out->promotions = m->promotions;
	out->keys = m->keys;
	segreg_usage(&m->segs, &out->used, &out->capacity);
	out->leases = mlease_active(m);
	out->client_local = m->client_bytes[WIRE_CSTAT_LOCAL];
	out->client_tcp = m->client_bytes[WIRE_CSTAT_TCP];
	out->client_rdma = m->client_bytes[WIRE_CSTAT_RDMA];
	out->client_disk = m->client_bytes[WIRE_CSTAT_DISK];
	out->prefix_blocks_asked = m->prefix_blocks_asked;
	out->prefix_blocks_found = m->prefix_blocks_found;
	out->prefix_tokens_asked = m->prefix_tokens_asked;
	out->prefix_tokens_found = m->prefix_tokens_found;
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (s && s->online) {
			out->tcp_read += s->tcp_read_bytes;
			out->tcp_written += s->tcp_written_bytes;
		}
	}
}

void mstatus_tick(struct mstatus *s, const struct master *m)
{
	if (!m)
		return;
	mstatus_read(m, &s->ring[s->head]);
	s->head = (s->head + 1) % MSTATUS_RING;
	if (s->n < MSTATUS_RING)
		s->n++;
}

static void str_field(struct sbuf *b, const char *name, const char *v, size_t cap)
{
	sb_printf(b, "\"%s\":", name);
	sb_json_str(b, v, strnlen(v, cap));
}

static const char *seg_state(const struct seg *s)
{
	if (!s->client)
		return "down";		/* connection closed: kept until node_ttl */
	if (s->draining)
		return "draining";
	return "up";
}

static void nodes_json(const struct master *m, struct sbuf *b)
{
	bool first = true;

	sb_printf(b, "\"nodes\":[");
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (!s || !s->online)
			continue;
		uint64_t seen = s->client ? s->client->last_seen_ms : s->last_seen_ms;
		sb_printf(b, "%s{\"segment_id\":%u,", first ? "" : ",", s->id);
		str_field(b, "name", s->name, sizeof(s->name));
		sb_printf(b, ",");
		str_field(b, "host_id", s->host_id, sizeof(s->host_id));
		sb_printf(b, ",");
		str_field(b, "endpoint", s->endpoint, sizeof(s->endpoint));
		sb_printf(b, ",\"state\":\"%s\",\"last_seen_ms_ago\":%llu,\"capacity\":%llu,"
			  "\"size\":%llu,\"used\":%llu,\"objects\":%llu,\"spill_capacity\":%llu,"
			  "\"spill_used\":%llu,\"tcp_read_bytes\":%llu,\"tcp_written_bytes\":%llu,"
			  "\"numa_node\":%d}",
			  seg_state(s),
			  (unsigned long long)(m->now_ms > seen ? m->now_ms - seen : 0),
			  (unsigned long long)s->capacity, (unsigned long long)s->size,
			  (unsigned long long)s->used,
			  (unsigned long long)s->nobjs, (unsigned long long)s->spill_capacity,
			  (unsigned long long)s->spill_used, (unsigned long long)s->tcp_read_bytes,
			  (unsigned long long)s->tcp_written_bytes, (int)s->numa_node);
		first = false;
	}
	sb_printf(b, "]");
}

static void ns_json(const struct master *m, struct sbuf *b)
{
	sb_printf(b, "\"namespaces\":[");
	for (size_t i = 0; i < m->ns.n; i++) {
		const struct mns_ns *ns = m->ns.v[i];
		sb_printf(b, "%s{", i ? "," : "");
		str_field(b, "name", ns->name, sizeof(ns->name));
		sb_printf(b, ",");
		str_field(b, "model", ns->model, sizeof(ns->model));
		sb_printf(b, ",\"keys\":%llu,\"bytes\":%llu,\"clients\":%u}",
			  (unsigned long long)ns->keys, (unsigned long long)ns->bytes, ns->clients);
	}
	sb_printf(b, "]");
}

/* One array per field: the ring's samples after since_ms, oldest first. */
static void history_json(const struct mstatus *s, uint64_t since_ms, struct sbuf *b)
{
	static const struct {
		const char *name;
		size_t off;
	} f[] = {
		{ "t", offsetof(struct mstatus_sample, t_ms) },
		{ "puts", offsetof(struct mstatus_sample, puts) },
		{ "gets", offsetof(struct mstatus_sample, gets) },
		{ "hits", offsetof(struct mstatus_sample, hits) },
		{ "evictions", offsetof(struct mstatus_sample, evictions) },
		{ "demotions", offsetof(struct mstatus_sample, demotions) },
		{ "promotions", offsetof(struct mstatus_sample, promotions) },
		{ "keys", offsetof(struct mstatus_sample, keys) },
		{ "used", offsetof(struct mstatus_sample, used) },
		{ "leases", offsetof(struct mstatus_sample, leases) },
		{ "tcp_read_bytes", offsetof(struct mstatus_sample, tcp_read) },
		{ "tcp_written_bytes", offsetof(struct mstatus_sample, tcp_written) },
		{ "client_local_bytes", offsetof(struct mstatus_sample, client_local) },
		{ "client_tcp_bytes", offsetof(struct mstatus_sample, client_tcp) },
		{ "client_rdma_bytes", offsetof(struct mstatus_sample, client_rdma) },
		{ "client_disk_bytes", offsetof(struct mstatus_sample, client_disk) },
		{ "prefix_blocks_asked", offsetof(struct mstatus_sample, prefix_blocks_asked) },
		{ "prefix_blocks_found", offsetof(struct mstatus_sample, prefix_blocks_found) },
		{ "prefix_tokens_asked", offsetof(struct mstatus_sample, prefix_tokens_asked) },
		{ "prefix_tokens_found", offsetof(struct mstatus_sample, prefix_tokens_found) },
	};
	unsigned first = (s->head + MSTATUS_RING - s->n) % MSTATUS_RING;

	sb_printf(b, "\"history\":{\"interval_ms\":1000");
	for (size_t k = 0; k < sizeof(f) / sizeof(f[0]); k++) {
		bool any = false;
		sb_printf(b, ",\"%s\":[", f[k].name);
		for (unsigned i = 0; i < s->n; i++) {
			const struct mstatus_sample *x = &s->ring[(first + i) % MSTATUS_RING];
			if (x->t_ms <= since_ms)
				continue;
			uint64_t v;
			memcpy(&v, (const char *)x + f[k].off, sizeof(v));
			sb_printf(b, "%s%llu", any ? "," : "", (unsigned long long)v);
			any = true;
		}
		sb_printf(b, "]");
	}
	sb_printf(b, "}");
}

void mstatus_json(const struct mstatus *s, const struct master *m, const struct mstatus_ha *ha,
		  uint64_t since_ms, struct sbuf *b)
{
	struct mstatus_sample x;

	sb_printf(b, "{\"kind\":\"master\",\"version\":\"%s\",", KVP_VERSION);
	sb_printf(b, "\"ha\":{\"mode\":\"%s\",", ha->mode);
	str_field(b, "role", ha->role, 64);
	sb_printf(b, ",");
	str_field(b, "state", ha->state, 64);
	sb_printf(b, ",");
	str_field(b, "leader", ha->leader, 1024);
	sb_printf(b, ",\"view_version\":%llu}", (unsigned long long)ha->view_version);
	if (!m) {
		sb_printf(b, "}\n");
		return;
	}
	mstatus_read(m, &x);
	/* epoch as a string: ns since 1970 do not fit a JavaScript number */
	sb_printf(b, ",\"time_ms\":%llu,\"epoch\":\"%llu\",\"uptime_ms\":%llu,\"node_ttl_ms\":%llu,"
		  "\"keys\":%llu,\"pending_puts\":%zu,\"leases\":%llu,\"connections\":%zu,"
		  "\"bytes_used\":%llu,\"capacity\":%llu,",
		  (unsigned long long)x.t_ms,
		  /* with HA, the leader's epoch as the election knows it (a
		   * standby's own state has none; on the leader they are equal) */
		  (unsigned long long)(strcmp(ha->mode, "etcd") == 0 ? ha->view_version : m->epoch),
		  (unsigned long long)(m->now_ms - m->start_ms),
		  (unsigned long long)(m->conf.master.node_ttl < m->conf.master.client_ttl ?
				       m->conf.master.node_ttl : m->conf.master.client_ttl),
		  (unsigned long long)x.keys, m->pending.n, (unsigned long long)x.leases,
		  m->nclients, (unsigned long long)x.used, (unsigned long long)x.capacity);
	uint64_t scap = 0, sused = 0;
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *sg = m->segs.v[i];
		if (sg && sg->online) {
			scap += sg->spill_capacity;
			sused += sg->spill_used;
		}
	}
	sb_printf(b, "\"spill_used\":%llu,\"spill_capacity\":%llu,", (unsigned long long)sused,
		  (unsigned long long)scap);
	/* bytes by data path: the master moves no values; the nodes report
	 * their TCP bytes (heartbeats), the clients every path (CLIENT_STATS) */
	sb_printf(b, "\"counters\":{\"puts\":%llu,\"gets\":%llu,\"hits\":%llu,\"evictions\":%llu,"
		  "\"evicted_bytes\":%llu,\"demotions\":%llu,\"promotions\":%llu,"
		  "\"put_timeouts\":%llu,\"node_expiries\":%llu,\"tcp_read_bytes\":%llu,"
		  "\"tcp_written_bytes\":%llu},",
		  (unsigned long long)x.puts, (unsigned long long)x.gets, (unsigned long long)x.hits,
		  (unsigned long long)x.evictions, (unsigned long long)m->evicted_bytes,
		  (unsigned long long)x.demotions, (unsigned long long)x.promotions,
		  (unsigned long long)m->put_timeouts, (unsigned long long)m->node_expiries,
		  (unsigned long long)x.tcp_read, (unsigned long long)x.tcp_written);
	sb_printf(b, "\"client_bytes\":{\"local\":%llu,\"tcp\":%llu,\"rdma\":%llu,\"disk\":%llu},",
		  (unsigned long long)x.client_local, (unsigned long long)x.client_tcp,
		  (unsigned long long)x.client_rdma, (unsigned long long)x.client_disk);
	sb_printf(b, "\"prefix\":{\"blocks_asked\":%llu,\"blocks_found\":%llu,"
		  "\"tokens_asked\":%llu,\"tokens_found\":%llu},",
		  (unsigned long long)x.prefix_blocks_asked, (unsigned long long)x.prefix_blocks_found,
		  (unsigned long long)x.prefix_tokens_asked, (unsigned long long)x.prefix_tokens_found);
	nodes_json(m, b);
	sb_printf(b, ",");
	ns_json(m, b);
	if (s) {
		sb_printf(b, ",");
		history_json(s, since_ms, b);
	}
	sb_printf(b, "}\n");
}

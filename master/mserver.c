/* mserver: kvpool-master's listeners, connections and timers on one ev
 * loop; see mserver.h. */
#include "mserver.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "ev.h"
#include "ha.h"
#include "kvpool.h"
#include "log.h"
#include "master.h"
#include "mevents.h"
#include "http.h"
#include "mhttp.h"
#include "net.h"
#include "tls.h"

#define TICK_MS 50
/* While eviction runs: one ~20 us step per loop pass when puts wait for
 * room, else one per EVICT_TICK_MS (and after every wakeup for I/O). The
 * steady pace (20 us per ms, ~20,000 objects/s) keeps up with the puts
 * that filled the segment; if it does not, puts park and the loop spins
 * until they are served. Spinning all round long took a CPU from everyone
 * else on the host: GET p99 went to 0.9 ms on a 2-vCPU VM under put load. */
#define FAST_TICK_MS 0
#define EVICT_TICK_MS 1
#define MAX_OUTBUF (4u << 20)	/* queued replies per connection before it is paused */
/* Body limit until HELLO succeeds: a peer without the token must not make
 * the master buffer cluster.max_frame bytes per connection. */
#define PREAUTH_MAX_BODY (64u << 10)

struct mconn;

struct mserver {
	struct kvp_conf conf;		/* with the effective listen addresses */
	bool selfcheck;			/* KVP_TEST_MASTER_CHECK: master_check() at ticks */
	uint64_t next_check_ms;		/* the next self-check (clock_now_ms) */
	struct ev_loop *loop;
	struct master *m;
	struct mevents *ev;		/* KV events, kept across role changes; NULL: off */
	int lfd;
	int port;
	struct mhttp *http;
	uint64_t fast_timer;
	struct wbuf reply;
	struct ev_conn_limits lim;
	atomic_bool reload_req;
	mserver_reload_fn reload;
	void *reload_arg;
	struct mconn *conns;		/* every RPC connection (dropped at a role change) */

	/* HA (ha = etcd): the master serves only while it leads (docs/ha.md) */
	struct ha *ha;
	bool leading;			/* this loop serves as the leader */
	bool stale;			/* s->m is a lead's that ended: not ticked */
	uint64_t drop_timer;		/* a role change to carry out outside callbacks */
	size_t segs_len;		/* the segment set last handed to ha */
	char *segs_text;

	/* a standby follows the leader's table (mrepl.h) */
	struct ev_conn *fc;		/* to the leader followed; NULL: none */
	uint64_t fepoch;		/* its epoch (HELLO reply); 0: not yet */
	uint64_t seen_epoch;		/* the last leader's, as the election saw it */
	uint64_t fnext_ms;		/* the next attempt to follow */
	uint64_t fanswer_ms;		/* the leader must answer the HELLO by then; 0: it did */
	char faddr[256];			/* the leader followed (for the log) */

	/* [tls] enabled: RPC connections accepted, and the standby's stream */
	struct tls_ctx *tls_srv, *tls_cli;
};

/* ---- connections ---- */

static int conn_send(void *arg, const void *p, size_t n)
{
	return ev_conn_send(arg, p, n);
}

static void conn_close(void *arg)
{
	ev_conn_close_after_send(arg);
}

static size_t conn_queued(void *arg)
{
	return ev_conn_queued(arg);
}

static void conn_abort(void *arg)
{
	ev_conn_close(arg);
}

static void fast_tick(struct ev_loop *loop, void *arg);

static void want_tick(struct mserver *s)
{
	if (!s->fast_timer && master_wants_tick(s->m))
		s->fast_timer = ev_timer_add(s->loop, master_tick_urgent(s->m) ? FAST_TICK_MS :
					     EVICT_TICK_MS, false, fast_tick, s);
}

struct mconn {
	struct mserver *s;
	struct master_client *mc;
	struct ev_conn *c;
	struct mconn *prev, *next;	/* s->conns */
	bool authed;		/* HELLO accepted: the full body limit applies */
};

/* ---- HA: serving only while leading ---- */

static void drop_state(struct mserver *s, bool lead);

/* Leader, and its lease surely held (ha.h). Without HA: always. */
static bool serving(struct mserver *s)
{
	return !s->ha || (s->leading && ha_serving(s->ha));
}

static void on_drop_timer(struct ev_loop *loop, void *arg)
{
	struct mserver *s = arg;

	(void)loop;
	s->drop_timer = 0;
	drop_state(s, s->ha && ha_serving(s->ha));
}

/* The fence lapsed under our feet (paused, starved): stop now, tell the
 * election thread, and drop the state outside the connection callback. */
static void lapsed(struct mserver *s)
{
	if (!s->leading)
		return;
	s->leading = false;
	s->stale = true;
	log_warn("ha: lost the lead (the lease could not be renewed in time); standing by");
	ha_lapsed(s->ha);
	if (!s->drop_timer)
		s->drop_timer = ev_timer_add(s->loop, 0, false, on_drop_timer, s);
}

/* Answers a frame this master must not serve: KVP_ENOTLEADER, with the
 * leader as last seen (u64 epoch, str rpc; epoch 0 and "" when unknown) so
 * that a client can go there at once; then closes the connection. */
static void refuse_not_leader(struct mserver *s, struct ev_conn *c, const struct wire_hdr *h)
{
	struct ha_status st;

	if (h->flags & WIRE_F_REPLY) {
		ev_conn_close(c);
		return;
	}
	ha_get_status(s->ha, &st);
	wb_reset(&s->reply);
	size_t start = wire_begin(&s->reply);
	wb_u64(&s->reply, st.leader_known && !st.leader ? st.epoch : 0);
	wb_cstr(&s->reply, st.leader_known && !st.leader ? st.rec.rpc : "");
	wire_finish(&s->reply, start, h->opcode, WIRE_F_REPLY, KVP_ENOTLEADER, h->reqid, 0);
	if (!s->reply.oom)
		ev_conn_send(c, s->reply.p, s->reply.len);
	ev_conn_close_after_send(c);
}

static int on_frame_m(struct ev_conn *c, const struct wire_hdr *h, const uint8_t *body)
{
	struct mconn *mc = ev_conn_udata(c);
	struct mserver *s = mc->s;

	if (h->payload_len)
		ev_conn_discard_payload(c);	/* the master takes no value bytes */
	if (!serving(s)) {
		lapsed(s);
		refuse_not_leader(s, c, h);
		return 0;
	}
	wb_reset(&s->reply);
	int rc = master_handle(s->m, mc->mc, h, body, &s->reply);
	if (h->opcode == WIRE_OP_HELLO && rc == 0 && !mc->authed && s->reply.len >= WIRE_HDR_SIZE) {
		struct wire_hdr rh;

		if (wire_hdr_decode(s->reply.p, &rh, UINT32_MAX, UINT64_MAX) == 0 && rh.status == 0) {
			mc->authed = true;
			ev_conn_set_max_body(c, s->lim.max_body);
		}
	}
	if (s->reply.len && !s->reply.oom && ev_conn_send(c, s->reply.p, s->reply.len) < 0)
		rc = -1;
	if (rc < 0)
		ev_conn_close_after_send(c);
	want_tick(s);
	return 0;
}

static void on_input_m(struct ev_conn *c, const uint8_t *p, size_t n)
{
	struct mconn *mc = ev_conn_udata(c);

	if (mc && mc->authed)	/* before HELLO nothing is worth the work */
		master_lookahead(mc->s->m, mc->mc, p, n);
}

static void on_close_m(struct ev_conn *c)
{
	struct mconn *mc = ev_conn_udata(c);

	if (!mc)
		return;
	master_client_free(mc->mc);
	if (mc->prev)
		mc->prev->next = mc->next;
	else
		mc->s->conns = mc->next;
	if (mc->next)
		mc->next->prev = mc->prev;
	free(mc);
}

static const struct ev_conn_ops conn_ops = {
	.on_frame = on_frame_m,
	.on_close = on_close_m,
	.on_input = on_input_m,
};

/* Refuses a connection over master.max_connections with an error frame. */
static void refuse(int fd)
{
	uint8_t hdr[WIRE_HDR_SIZE];
	struct wire_hdr h = {
		.magic = WIRE_MAGIC,
		.version = WIRE_VERSION,
		.flags = WIRE_F_REPLY,
		.opcode = WIRE_OP_HELLO,
		.status = KVP_ELIMIT,
	};

	wire_hdr_encode(&h, hdr);
	ssize_t w = send(fd, hdr, sizeof(hdr), MSG_DONTWAIT | MSG_NOSIGNAL);
	(void)w;
	close(fd);
}

static void on_accept(struct ev_loop *loop, int lfd, uint32_t events, void *arg)
{
	struct mserver *s = arg;

	(void)events;
	for (int i = 0; i < 64; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				log_warn("accept: %s", strerror(errno));
			return;
		}
		if ((int64_t)ev_conn_count(loop) >= s->conf.master.max_connections) {
			log_warn("connection refused: master.max_connections (%lld) reached",
				 (long long)s->conf.master.max_connections);
			refuse(fd);
			continue;
		}
		struct mconn *mc = calloc(1, sizeof(*mc));
		if (!mc) {
			close(fd);
			continue;
		}
		mc->s = s;
		struct ev_conn_limits lim = s->lim;
		lim.max_body = lim.max_body && lim.max_body < PREAUTH_MAX_BODY ? lim.max_body
										 : PREAUTH_MAX_BODY;
		struct ev_conn *c = ev_conn_create(loop, fd, &conn_ops, &lim, mc);
		if (!c) {
			free(mc);
			continue;
		}
		if (s->tls_srv && ev_conn_start_tls(c, s->tls_srv) < 0) {
			ev_conn_set_udata(c, NULL);
			free(mc);
			ev_conn_close(c);
			continue;
		}
		mc->mc = master_client_new(s->m, conn_send, conn_close, c);
		if (!mc->mc) {
			ev_conn_set_udata(c, NULL);
			free(mc);
			ev_conn_close(c);
			continue;
		}
		master_client_set_backlog(mc->mc, conn_queued, conn_abort);
		mc->c = c;
		mc->next = s->conns;
		if (s->conns)
			s->conns->prev = mc;
		s->conns = mc;
	}
}

/* The standby's table is the last leader's, complete and followed up to
 * its end: a new leader may keep it (mrepl.h). */
static bool warm_table(const struct mserver *s)
{
	return s->conf.master.ha_follow && !s->stale && s->fepoch &&
	       s->fepoch == s->seen_epoch && master_follow_synced(s->m);
}

static void follow_close(struct mserver *s)
{
	if (s->fc)
		ev_conn_close(s->fc);	/* on_close_f forgets it */
}

/* A warm table's recovery window: two heartbeats and 2 s for its nodes to
 * re-mount and report. */
static uint64_t recovery_window_ms(const struct kvp_conf *c)
{
	return 2 * c->node.heartbeat_interval + 2000;
}

/* Opens the recovery window of a new leader (mrecover.h). */
static void recover(struct mserver *s)
{
	size_t cap = 1u << 16;
	char *exp = malloc(cap);

	if (exp) {
		ha_expected(s->ha, exp, cap);
		/* nodes re-mount within a heartbeat or two of the election */
		master_recover(s->m, exp, recovery_window_ms(&s->conf));
		free(exp);
	}
}

/* Replaces the master's state by an empty one (clients' connections must
 * be closed already): 0, or -1 (the old state stays; a leader resigns). */
static int fresh_state(struct mserver *s, bool lead)
{
	char err[256];
	struct master *m = master_create(&s->conf, err, sizeof(err));

	if (!m) {
		log_err("ha: cannot renew the master state: %s; standing by", err);
		if (lead)
			ha_resign(s->ha);
		s->leading = false;
		return -1;
	}
	master_destroy(s->m);
	s->m = m;
	/* the new state's AllBlocksCleared; a standby publishes nothing */
	master_set_events(m, lead ? s->ev : NULL);
	mhttp_set_master(s->http, m);
	s->segs_len = SIZE_MAX;		/* publish the (empty) set once */
	s->stale = false;
	s->leading = lead;
	return 0;
}

/* A role change: every connection goes (their clients belong to the old
 * state; nodes and clients reconnect to whoever leads), the master's state
 * is replaced by a fresh one — or, for a standby that followed the last
 * leader to its end, kept (warm) — and a new leader opens its recovery
 * window. Never called from a connection callback. */
static void drop_state(struct mserver *s, bool lead)
{
	while (s->conns)
		ev_conn_close(s->conns->c);	/* on_close unlinks it */
	if (lead && warm_table(s)) {
		uint64_t epoch = ha_epoch(s->ha);
		follow_close(s);
		master_takeover(s->m, epoch, s->ev);
		s->segs_len = SIZE_MAX;
		s->leading = true;
		recover(s);
		log_notice("ha: serving as leader, epoch %llu, with the table of epoch %llu",
			   (unsigned long long)epoch, (unsigned long long)s->fepoch);
		s->fepoch = 0;
		return;
	}
	follow_close(s);
	s->fepoch = 0;
	if (fresh_state(s, lead) < 0 || !lead)
		return;
	uint64_t epoch = ha_epoch(s->ha);
	master_set_epoch(s->m, epoch);
	recover(s);
	log_notice("ha: serving as leader, epoch %llu (the table rebuilt from the nodes' reports)",
		   (unsigned long long)epoch);
}

/* ---- HA: a standby follows the leader (mrepl.h) ---- */

static int on_frame_f(struct ev_conn *c, const struct wire_hdr *h, const uint8_t *body)
{
	struct mserver *s = ev_conn_udata(c);
	struct rbuf r;

	if (h->payload_len)
		ev_conn_discard_payload(c);
	if (!s || s->leading)
		return -1;
	if (h->flags & WIRE_F_REPLY) {
		if (h->status) {
			log_warn("ha: the leader refused to be followed (op %u): %s", h->opcode,
				 kvp_strerror(h->status));
			return -1;
		}
		if (h->opcode == WIRE_OP_HELLO) {
			/* the leader takes us: only now the table it replaces goes
			 * (one refused by a leader that lapsed is kept for the
			 * takeover) */
			rb_init(&r, body, h->body_len);
			uint64_t e = rb_u64(&r);
			if (!rb_ok(&r))
				return -1;
			s->fanswer_ms = 0;
			log_notice("ha: following the leader at %s (epoch %llu)", s->faddr,
				   (unsigned long long)e);
			while (s->conns)
				ev_conn_close(s->conns->c);
			if (fresh_state(s, false) < 0)
				return -1;
			s->fepoch = e;
		}
		return 0;
	}
	if (h->opcode != WIRE_OP_REPL)
		return 0;
	int rc = master_follow_apply(s->m, body, h->body_len);
	if (rc) {
		log_warn("ha: the leader's stream: %s; following afresh", kvp_strerror(rc));
		s->fepoch = 0;	/* the table is not the leader's */
		return -1;
	}
	return 0;
}

static void on_close_f(struct ev_conn *c)
{
	struct mserver *s = ev_conn_udata(c);

	if (!s || s->fc != c)
		return;
	s->fc = NULL;
	if (s->fanswer_ms) {	/* never got in: refused, unreachable or silent */
		log_info("ha: cannot follow the leader at %s: %s", s->faddr,
			 ev_now(s->loop) >= s->fanswer_ms ? "no answer within 1 s" :
			 "connection failed");
		s->fanswer_ms = 0;
		return;	/* the next try: 500 ms after this one started */
	}
	s->fnext_ms = ev_now(s->loop) + 200;
	log_info("ha: stopped following the leader (%llu keys in the table)",
		 (unsigned long long)master_keys(s->m));
}

static const struct ev_conn_ops follow_ops = {
	.on_frame = on_frame_f,
	.on_close = on_close_f,
};

/* Per tick on a standby: follow the leader the election names, afresh
 * (an empty table, then its snapshot) whenever the leader changes. */
static void follow_tick(struct mserver *s)
{
	struct ha_status st;
	char err[256], host[64];

	if (!s->conf.master.ha_follow || s->stale)
		return;
	ha_get_status(s->ha, &st);
	if (st.leader_known && !st.leader)
		s->seen_epoch = st.epoch;
	if (s->fc) {
		if (s->fepoch && s->seen_epoch != s->fepoch)
			ev_conn_close(s->fc);	/* another leader: follow it */
		else if (s->fanswer_ms && ev_now(s->loop) >= s->fanswer_ms)
			ev_conn_close(s->fc);	/* the connect or the HELLO hangs */
		return;
	}
	if (!st.leader_known || st.leader || !st.rec.rpc[0] || ev_now(s->loop) < s->fnext_ms)
		return;
	s->fnext_ms = ev_now(s->loop) + 500;
	/* The connect runs on the loop (a leader's host that drops SYNs must
	 * not stall the standby's own election and takeover): the HELLO is
	 * queued behind it, and an answer is due within 1 s. */
	int fd = net_connect_start(st.rec.rpc, err, sizeof(err));
	if (fd < 0) {
		log_info("ha: cannot follow the leader at %s: %s", st.rec.rpc, err);
		return;
	}
	struct ev_conn *c = ev_conn_create(s->loop, fd, &follow_ops, &s->lim, s);
	if (!c)
		return;
	if (s->tls_cli && ev_conn_start_tls(c, s->tls_cli) < 0) {
		ev_conn_close(c);
		return;
	}
	s->fc = c;
	s->fanswer_ms = ev_now(s->loop) + 1000;
	snprintf(s->faddr, sizeof(s->faddr), "%s", st.rec.rpc);
	if (net_host_id(host, sizeof(host)) < 0)
		snprintf(host, sizeof(host), "?");
	wb_reset(&s->reply);
	size_t start = wire_begin(&s->reply);
	wb_u16(&s->reply, WIRE_ROLE_MASTER);
	wb_cstr(&s->reply, s->conf.cluster.token);
	wb_cstr(&s->reply, "standby-master");
	wb_cstr(&s->reply, host);
	wire_finish(&s->reply, start, WIRE_OP_HELLO, 0, 0, 1, 0);
	start = wire_begin(&s->reply);
	wire_finish(&s->reply, start, WIRE_OP_FOLLOW, 0, 0, 2, 0);
	if (s->reply.oom || ev_conn_send(c, s->reply.p, s->reply.len) < 0) {
		ev_conn_close(c);
		return;
	}
}

/* The election thread changed our role (ha_fd readable). */
static void on_ha(struct ev_loop *loop, int fd, uint32_t events, void *arg)
{
	struct mserver *s = arg;

	(void)loop;
	(void)fd;
	(void)events;
	ha_ack(s->ha);
	bool lead = ha_serving(s->ha);
	if (lead != s->leading || (lead && master_epoch(s->m) != ha_epoch(s->ha)))
		drop_state(s, lead);
}

/* The leader keeps its segment set in etcd for the next one (mrecover.h). */
static void publish_segments(struct mserver *s)
{
	if (!s->ha || !s->leading || !s->segs_text)
		return;
	size_t n = master_segments_text(s->m, s->segs_text, 1u << 16);
	if (n == s->segs_len)
		return;	/* (a length change is enough: the set changes by whole lines) */
	s->segs_len = n;
	ha_set_segments(s->ha, s->segs_text, n);
}

/* ---- timers and reload ---- */

static void fast_tick(struct ev_loop *loop, void *arg)
{
	struct mserver *s = arg;

	(void)loop;
	s->fast_timer = 0;
	if (!serving(s))
		return;		/* the next tick notices */
	master_step(s->m);
	want_tick(s);
}

static void tick(struct ev_loop *loop, void *arg)
{
	struct mserver *s = arg;

	(void)loop;
	if (s->ha && s->leading && !ha_serving(s->ha))
		lapsed(s);
	if (s->stale)
		return;		/* no FREE, DEMOTE or eviction from a lead that ended */
	if (s->ha && !s->leading) {
		master_standby_tick(s->m);	/* HELLO timeouts only: the table is the leader's */
		follow_tick(s);
		return;
	}
	master_tick(s->m);
	/* tests: the table's invariants (holds, chains, page tags) in a real
	 * daemon, not only in the in-process tests and fuzzers; at most 5% of
	 * the time (the check walks every object: a benchmark's table would
	 * otherwise spend its ticks in it) */
	if (s->selfcheck && clock_now_ms() >= s->next_check_ms) {
		uint64_t t0 = clock_now_ms();

		if (!master_check(s->m)) {
			log_err("KVP_TEST_MASTER_CHECK: the table's invariants do not hold");
			abort();
		}
		uint64_t t1 = clock_now_ms();
		s->next_check_ms = t1 + 20 * (t1 - t0);
	}
	publish_segments(s);
	want_tick(s);
}

static void on_wake(struct ev_loop *loop, void *arg)
{
	struct mserver *s = arg;
	char err[512];
	struct kvp_conf *nc;

	(void)loop;
	if (!atomic_exchange(&s->reload_req, false) || !s->reload)
		return;
	nc = malloc(sizeof(*nc));
	if (!nc) {
		log_err("reload: out of memory");
		return;
	}
	if (s->reload(nc, err, sizeof(err), s->reload_arg) == 0) {
		log_notice("reload: configuration re-read");
		master_reload(s->m, nc);
	} else {
		log_err("reload: %s; keeping the running configuration", err);
	}
	free(nc);
}

/* ---- setup ---- */

/* "host:port" of a listener: its configured host, the port it got. */
static void bound_addr(char *out, size_t cap, const char *listen, int port)
{
	char host[CONF_STR];
	uint16_t p;

	if (conf_parse_hostport(listen, host, sizeof(host), &p) < 0)
		host[0] = '\0';
	snprintf(out, cap, strchr(host, ':') ? "[%.200s]:%d" : "%.200s:%d", host, port);
}

/* ha = etcd: the election thread, its fd on the loop; standby until it wins. */
static int ha_setup(struct mserver *s, char *err, size_t errlen)
{
	struct ha_conf hc;
	char rpc[CONF_STR], http[CONF_STR];

	bound_addr(rpc, sizeof(rpc), s->conf.master.listen, s->port);
	bound_addr(http, sizeof(http), s->conf.master.http_listen, mhttp_port(s->http));
	if (ha_conf_from(&hc, &s->conf, rpc, http, err, errlen) < 0)
		return -1;
	s->segs_text = malloc(1u << 16);
	if (!s->segs_text) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	s->ha = ha_start(&hc, err, errlen);
	if (!s->ha)
		goto out_text;
	if (ev_add_fd(s->loop, ha_fd(s->ha), EPOLLIN, on_ha, s) < 0) {
		snprintf(err, errlen, "cannot watch the election thread");
		goto out_ha;
	}
	mhttp_set_election(s->http, s->ha);
	return 0;

out_ha:
	ha_stop(s->ha);
	s->ha = NULL;
out_text:
	free(s->segs_text);
	s->segs_text = NULL;
	return -1;
}

/* ha = none with a table file (mtabfile.h): the table it holds is loaded
 * and taken over warm, as a standby's at an election, with a recovery
 * window for its segments; else (none, refused) the master starts empty and
 * rebuilds from the nodes' reports. True if loaded. */
static bool lone_load(struct mserver *s, char *err, size_t errlen)
{
	const char *path = s->conf.master.table_file;
	char why[512];
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t t0 = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	int rc = master_table_load(s->m, path, why, sizeof(why));

	if (rc == -ENOENT) {
		log_notice("table file %s: none; the table is rebuilt from the nodes' reports", path);
		return false;
	}
	if (rc < 0) {
		log_warn("table file %s: refused: %s; the table is rebuilt from the nodes' reports",
			 path, why);
		master_destroy(s->m);
		s->m = master_create(&s->conf, err, errlen);
		return false;
	}
	size_t cap = 1u << 16;
	char *exp = malloc(cap);
	uint64_t window = recovery_window_ms(&s->conf);
	master_takeover(s->m, master_epoch(s->m), s->ev);
	/* the node retried its connection while this master was down or
	 * loading (backoff), then scans its segment before its MOUNT: a warm
	 * segment dropped for silence meanwhile would be rebuilt cold */
	master_warm_grace(s->m, window);
	if (exp) {
		master_segments_text(s->m, exp, cap);
		master_recover(s->m, exp, window);
		free(exp);
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	log_notice("table file %s: loaded warm: %llu keys in %llu ms; the nodes' re-mounts "
		   "reconcile it", path, (unsigned long long)master_keys(s->m),
		   (unsigned long long)((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 -
					t0));
	return true;
}

/* [master] table_file: "none" is off; empty is off too, unless the master
 * runs under a unit with StateDirectory= (the packaged one has
 * StateDirectory=kvpool): then STATE_DIRECTORY/master.table, so a packaged
 * lone master restarts warm with no configuration. Set explicitly: that
 * path. Lone masters only (ha = etcd: a standby holds the table). */
static void table_path(struct kvp_conf *c, bool lone)
{
	char *tf = c->master.table_file;
	const char *sd = getenv("STATE_DIRECTORY");

	if (!strcmp(tf, "none")) {
		tf[0] = '\0';
		return;
	}
	if (!lone) {
		if (tf[0])
			log_warn("[master] table_file is for ha = none: ignored (a standby holds the "
				 "table)");
		tf[0] = '\0';
		return;
	}
	if (tf[0] || !sd || sd[0] != '/')
		return;
	/* several StateDirectory= lines: a colon-separated list, the first */
	size_t n = strcspn(sd, ":");
	if (n + sizeof("/master.table") > CONF_STR) {
		log_warn("STATE_DIRECTORY too long for [master] table_file: no table file");
		return;
	}
	snprintf(tf, CONF_STR, "%.*s/master.table", (int)n, sd);
	log_notice("[master] table_file: %s (the unit's state directory; table_file = none "
		   "turns it off)", tf);
}

/* Without a token nothing may listen beyond loopback (DESIGN: Safety).
 * Returns true if addr was narrowed. */
static bool loopback_only(char *addr, const char *what)
{
	char host[CONF_STR];
	uint16_t port;

	if (net_is_loopback(addr))
		return false;
	if (conf_parse_hostport(addr, host, sizeof(host), &port) < 0)
		return false;	/* conf validated it; net_listen will say what is wrong */
	log_warn("no cluster token: %s %s serves 127.0.0.1:%u only", what, addr, port);
	snprintf(addr, CONF_STR, "127.0.0.1:%u", port);
	return true;
}

struct mserver *mserver_create(const struct kvp_conf *conf, mserver_reload_fn reload,
			       void *reload_arg, char *err, size_t errlen)
{
	struct mserver *s = calloc(1, sizeof(*s));

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->conf = *conf;
	s->reload = reload;
	s->reload_arg = reload_arg;
	s->lfd = -1;
	s->selfcheck = getenv("KVP_TEST_MASTER_CHECK") != NULL;
	wb_init(&s->reply);
	if (!conf->cluster.token[0]) {
		bool narrowed = loopback_only(s->conf.master.listen, "master.listen");
		narrowed |= loopback_only(s->conf.master.http_listen, "master.http_listen");
		if (s->conf.master.metadata_server)
			narrowed |= loopback_only(s->conf.master.metadata_listen,
						  "master.metadata_listen");
		if (narrowed)
			log_warn("to serve other hosts: 'kvpool token new /etc/kvpool/token', then "
				 "add 'token_file = /etc/kvpool/token' under [cluster] in %s on "
				 "every host (or KVPOOL_CLUSTER_TOKEN_FILE), or start kvpool-master "
				 "with --cluster_token_file=/etc/kvpool/token",
				 conf->file[0] ? conf->file : CONF_DEFAULT_FILE);
	}
	s->lim.max_body = conf->cluster.max_frame > UINT32_MAX ? UINT32_MAX
							       : (uint32_t)conf->cluster.max_frame;
	/* Replies are small: a peer that stops reading them is paused early
	 * rather than growing the master by ev's default 64 MiB. */
	s->lim.max_outbuf = MAX_OUTBUF;
	s->m = master_create(&s->conf, err, errlen);
	if (!s->m)
		goto out_free;
	s->ev = mevents_create(&s->conf, err, errlen);
	if (!s->ev && *err)
		goto out_master;
	table_path(&s->conf, strcmp(s->conf.master.ha, "etcd") != 0);
	if (s->conf.master.table_file[0]) {
		/* listening before the load: a node's re-mount and the clients'
		 * requests wait in the backlog and are served once the table is
		 * in, rather than refused and retried after a backoff (the node's
		 * reached 0.8 s by then at 3M objects) */
		s->lfd = net_listen(s->conf.master.listen, err, errlen);
		if (s->lfd < 0)
			goto out_master;
		bool warm = lone_load(s, err, errlen);
		if (!s->m)
			goto out_master;
		if (!warm)
			master_set_events(s->m, s->ev);
		/* loaded: that file stays the file through the recovery window,
		 * whose seconds go to the re-mounts and the clients, then a fresh
		 * snapshot replaces it */
		master_table_start(s->m, s->conf.master.table_file,
				   warm ? recovery_window_ms(&s->conf) : 0);
	} else {
		master_set_events(s->m, s->ev);
	}
	s->loop = ev_create();
	if (!s->loop) {
		snprintf(err, errlen, "cannot create the event loop");
		goto out_master;
	}
	ev_set_busy_poll(s->loop, (int)s->conf.cluster.busy_poll_us);
	ev_set_congestion(s->loop, net_cc_parse(s->conf.cluster.tcp_congestion));
	if (s->conf.tls.enabled) {
		s->tls_srv = tls_ctx_new(&s->conf, true, err, errlen);
		if (!s->tls_srv)
			goto out_loop;
		s->tls_cli = tls_ctx_new(&s->conf, false, err, errlen);
		if (!s->tls_cli)
			goto out_loop;
	}
	if (s->lfd < 0)
		s->lfd = net_listen(s->conf.master.listen, err, errlen);
	if (s->lfd < 0)
		goto out_loop;
	s->port = net_local_port(s->lfd);
	int rc = ev_add_fd(s->loop, s->lfd, EPOLLIN, on_accept, s);
	if (rc < 0) {
		snprintf(err, errlen, "%s: %s", s->conf.master.listen, strerror(-rc));
		goto out_loop;
	}
	struct http_tls htls = { .cert = s->conf.tls.cert, .key = s->conf.tls.key };
	s->http = mhttp_start(s->loop, s->m, s->conf.master.http_listen,
			      s->conf.master.metadata_server ? s->conf.master.metadata_listen : NULL,
			      s->conf.tls.http ? &htls : NULL, err, errlen);
	if (!s->http)
		goto out_loop;
	if (!ev_timer_add(s->loop, TICK_MS, true, tick, s)) {
		snprintf(err, errlen, "cannot add a timer");
		goto out_http;
	}
	ev_on_wake(s->loop, on_wake, s);
	log_notice("kvpool-master %s: rpc on port %d (%s), http on port %d%s", KVP_VERSION,
		   s->port, s->conf.master.listen, mhttp_port(s->http),
		   s->conf.master.metadata_server ? ", metadata store on" : "");
	if (s->conf.master.metadata_server)
		log_notice("metadata store on port %d", mhttp_metadata_port(s->http));
	if (strcmp(s->conf.master.ha, "etcd") == 0 && ha_setup(s, err, errlen) < 0)
		goto out_http;
	return s;

out_http:
	mhttp_stop(s->http);
out_loop:
	tls_ctx_free(s->tls_cli);
	tls_ctx_free(s->tls_srv);
	ev_destroy(s->loop);
out_master:
	if (s->lfd >= 0)	/* bound before a table file's load, or after */
		close(s->lfd);
	master_destroy(s->m);
	mevents_destroy(s->ev);
out_free:
	wb_free(&s->reply);
	free(s);
	return NULL;
}

int mserver_run(struct mserver *s)
{
	return ev_run(s->loop);
}

void mserver_stop(struct mserver *s)
{
	ev_stop(s->loop);
}

void mserver_reload(struct mserver *s)
{
	atomic_store(&s->reload_req, true);
	ev_wake(s->loop);
}

void mserver_destroy(struct mserver *s)
{
	if (!s)
		return;
	if (s->ha) {
		/* the key goes first, so a standby takes over while we close */
		ev_del_fd(s->loop, ha_fd(s->ha));
		ha_stop(s->ha);
		s->ha = NULL;
	}
	free(s->segs_text);
	mhttp_stop(s->http);
	ev_del_fd(s->loop, s->lfd);
	close(s->lfd);
	ev_destroy(s->loop);	/* closes connections: their clients are freed */
	tls_ctx_free(s->tls_cli);
	tls_ctx_free(s->tls_srv);
	master_destroy(s->m);
	mevents_destroy(s->ev);
	wb_free(&s->reply);
	free(s);
}

struct ev_loop *mserver_loop(struct mserver *s)
{
	return s->loop;
}

int mserver_port(const struct mserver *s)
{
	return s->port;
}

int mserver_http_port(const struct mserver *s)
{
	return mhttp_port(s->http);
}

int mserver_metadata_port(const struct mserver *s)
{
	return mhttp_metadata_port(s->http);
}

void mserver_status(struct mserver *s, char *buf, size_t len)
{
	if (s->ha && !s->leading) {
		struct ha_status st;
		ha_get_status(s->ha, &st);
		snprintf(buf, len, "standby; leader %s", st.leader_known ? st.rec.rpc : "none");
		return;
	}
	int n = snprintf(buf, len, "%s", s->ha ? "leader; " : "");
	if (n >= 0 && (size_t)n < len)
		master_status(s->m, buf + n, len - (size_t)n);
}

/* master: state and request dispatch of kvpool-master; see master.h and
 * wire.h (the body layouts implemented here). */
#include "master_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <openssl/crypto.h>

#include "alloc.h"
#include "extent.h"
#include "kvpool.h"
#include "log.h"

#define HELLO_TIMEOUT_MS 10000
#define PARK_MAX_MS 2000		/* a parked PUT_START retries by then at the latest */
#define SWEEP_BUDGET 1024		/* lease / pending entries looked at per tick */
#define EVICT_STEP_US 20		/* eviction per tick: a request waits at most this */
#define LIST_DEFAULT 1000
#define RDMA_INFO_MAX 4096

const double master_buckets[MASTER_NBUCKETS] = {
	5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
	1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 1.0,
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t master_now(struct master *m)
{
	m->now_ms = mono_ns() / 1000000;
	return m->now_ms;
}

uint64_t master_rand(struct master *m)
{
	uint64_t x = m->rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	m->rng = x;
	return x * 0x2545f4914f6cdd1dull;
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
	if (segreg_init(&m->segs)) {
		snprintf(err, errlen, "out of memory");
		goto out_objs;
	}
	if (getrandom(&m->rng, sizeof(m->rng), 0) != sizeof(m->rng) || !m->rng)
		m->rng = mono_ns() | 1;
	m->epoch = real_ns();
	/* Generations must grow across master restarts even before every node
	 * has reported: start from the clock (microseconds), raised by REPORTs. */
	m->gen = m->epoch / 1000;
	master_now(m);
	m->start_ms = m->now_ms;
	wb_init(&m->scratch);
	return m;

out_objs:
	objtab_destroy(&m->objs);
out_free:
	free(m);
	return NULL;
}

static void parked_free(struct parked *p)
{
	wb_free(&p->reply);
	free(p->body);
	free(p);
}

void master_destroy(struct master *m)
{
	if (!m)
		return;
	while (m->clients)
		master_client_free(m->clients);
	objtab_destroy(&m->objs);
	segreg_destroy(&m->segs);
	free(m->leased.v);
	free(m->pending.v);
	free(m->cand);
	free(m->kbuf);
	wb_free(&m->scratch);
	free(m);
}

size_t master_clients(const struct master *m)
{
	return m->nclients;
}

void master_usage(const struct master *m, uint64_t *used, uint64_t *cap)
{
	*used = *cap = 0;
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (s && s->online) {
			*used += s->used;
			*cap += s->capacity;
		}
	}
}

void master_status(struct master *m, char *buf, size_t len)
{
	uint64_t used, cap;

	master_usage(m, &used, &cap);
	snprintf(buf, len, "%llu keys, %zu pending puts, %u segments, %llu/%llu MiB used, "
		 "%zu connections", (unsigned long long)m->keys, m->pending.n, m->segs.online,
		 (unsigned long long)(used >> 20), (unsigned long long)(cap >> 20), m->nclients);
}

void master_set_generation(struct master *m, uint64_t gen)
{
	m->gen = gen;
}

bool master_wants_tick(const struct master *m)
{
	return m->evict_active;
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

	for (struct parked **pp = &m->parked; *pp;) {
		struct parked *p = *pp;
		if (p->c == c) {
			*pp = p->next;
			parked_free(p);
		} else {
			pp = &p->next;
		}
	}
	/* Its segments stay mounted until client_ttl: a node that reconnects
	 * re-mounts them; FREEs wait for that. */
	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (s && s->client == c) {
			s->client = NULL;
			s->last_seen_ms = c->last_seen_ms;
			log_notice("segment %u (%s): node connection closed", s->id, s->name);
		}
	}
	if (c->prev)
		c->prev->next = c->next;
	else
		m->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	m->nclients--;
	free(c);
}

/* ---- object bookkeeping ---- */

static int objarr_push(struct objarr *a, struct obj *o)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 256;
		struct obj **v = realloc(a->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		a->v = v;
		a->cap = cap;
	}
	o->slot = (uint32_t)a->n;
	a->v[a->n++] = o;
	return 0;
}

static void objarr_del(struct objarr *a, struct obj *o)
{
	uint32_t i = o->slot;
	struct obj *last = a->v[--a->n];

	a->v[i] = last;
	last->slot = i;
	o->slot = OBJ_NOSLOT;
}

static struct objarr *obj_arr(struct master *m, const struct obj *o)
{
	return obj_complete(o) ? &m->leased : &m->pending;
}

static void obj_unlink(struct master *m, struct obj *o)
{
	if (o->slot != OBJ_NOSLOT)
		objarr_del(obj_arr(m, o), o);
	if (obj_complete(o))
		m->keys--;
	objtab_remove(&m->objs, o);
}

bool master_drop_replica(struct master *m, struct obj *o, unsigned ri, bool free_extent)
{
	struct rep rp = o->rep[ri];
	struct seg *s = segreg_online(&m->segs, (uint32_t)rp.seg);

	if (s) {
		seg_detach(s, o, ri);
		if (free_extent && seg_queue_free(s, rep_off(&rp), o->generation, (uint8_t)rp.tier, false))
			log_err("segment %u: out of memory queueing a FREE; %llu bytes leak until re-mount",
				s->id, (unsigned long long)rep_len(&rp));
		else if (free_extent && rp.tier == KVP_TIER_DISK)
			s->spill_dropped += rep_len(&rp);
	}
	o->rep[ri] = o->rep[--o->nrep];
	if (o->nrep)
		return false;
	obj_unlink(m, o);
	return true;
}

static void obj_destroy(struct master *m, struct obj *o, bool free_extents)
{
	if (!o->nrep) {
		obj_unlink(m, o);
		return;
	}
	while (!master_drop_replica(m, o, o->nrep - 1u, free_extents))
		;
}

/* Detaches every replica living in s (no FREE: the segment goes away or is
 * rebuilt from the node's REPORTs). */
static void seg_drop_replicas(struct master *m, struct seg *s)
{
	while (s->nobjs) {
		struct obj *o = s->objs[s->nobjs - 1];
		unsigned ri = 0;
		while (ri < o->nrep && (uint32_t)o->rep[ri].seg != s->id)
			ri++;
		if (ri == o->nrep) {	/* cannot happen; do not spin */
			s->nobjs--;
			continue;
		}
		master_drop_replica(m, o, ri, false);
	}
}

static void seg_drop(struct master *m, struct seg *s, const char *why)
{
	log_notice("segment %u (%s, %s): dropped (%s), %zu replicas gone", s->id, s->name,
		   s->shm_path, why, s->nobjs);
	seg_drop_replicas(m, s);
	segreg_offline(&m->segs, s);
}

/* The lease array holds the objects with a lease and, until the sweeps
 * reach them, ones whose lease ran out: counting them exactly would touch
 * every object on each INFO or /metrics scrape. */
size_t master_active_leases(struct master *m)
{
	return m->leased.n;
}

/* ---- FREE to the nodes ---- */

void master_flush(struct master *m)
{
	uint32_t max = m->conf.cluster.max_batch > 0 ? (uint32_t)m->conf.cluster.max_batch : 1024;

	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (!s || !s->online || !s->client || !(s->fq.n || s->dq.n || s->pq.n))
			continue;
		struct fbatch *b;
		/* s->client is checked each time: a send may end the connection */
		while (s->client && (b = seg_take_frees(s, ++m->next_reqid, max))) {
			struct wbuf *w = &m->scratch;
			wb_reset(w);
			size_t st = wire_begin(w);
			wb_u32(w, s->id);
			wb_u32(w, b->n);
			for (uint32_t k = 0; k < b->n; k++) {
				wb_u8(w, b->e[k].tier);
				wb_u64(w, b->e[k].off);
				wb_u64(w, b->e[k].generation);
			}
			wire_finish(w, st, WIRE_OP_FREE, 0, 0, b->reqid, 0);
			/* A failed send means the connection is closing; the batch
			 * stays in flight and becomes the reject set at re-mount. */
			if (w->oom || s->client->send(s->client->arg, w->p, w->len))
				break;
		}
		struct dbatch *d;
		while (s->client && (d = seg_take_demotes(s, ++m->next_reqid, max))) {
			struct wbuf *w = &m->scratch;
			wb_reset(w);
			size_t st = wire_begin(w);
			wb_u32(w, s->id);
			wb_u32(w, d->n);
			for (uint32_t k = 0; k < d->n; k++) {
				wb_u64(w, d->e[k]->off);
				wb_u64(w, d->e[k]->generation);
			}
			wire_finish(w, st, WIRE_OP_DEMOTE, 0, 0, d->reqid, 0);
			if (w->oom || s->client->send(s->client->arg, w->p, w->len))
				break;
		}
		/* After the FREEs: the space a PROMOTE fills was allocated only
		 * once the FREE that held it had been acknowledged. */
		while (s->client && (d = seg_take_promotes(s, ++m->next_reqid, max))) {
			struct wbuf *w = &m->scratch;
			wb_reset(w);
			size_t st = wire_begin(w);
			wb_u32(w, s->id);
			wb_u32(w, d->n);
			for (uint32_t k = 0; k < d->n; k++) {
				wb_u64(w, d->e[k]->off);
				wb_u64(w, d->e[k]->generation);
				wb_u64(w, d->e[k]->to);
				wb_u64(w, d->e[k]->to_len);
			}
			wire_finish(w, st, WIRE_OP_PROMOTE, 0, 0, d->reqid, 0);
			if (w->oom || s->client->send(s->client->arg, w->p, w->len))
				break;
		}
	}
}

/* ---- body shape check ---- */

static size_t fmt_min(const char *fmt)
{
	size_t n = 0;

	for (; *fmt; fmt++)
		n += *fmt == 's' ? 2 : *fmt == 'b' ? 4 : (size_t)(*fmt - '0');
	return n;
}

/* Reads u32 n at r's position, then checks (on a copy) that n items of fmt
 * ('s' str, 'b' blob, '1' '2' '4' '8' fixed) follow, so that a handler never
 * acts on half a batch. 0, KVP_EPROTO or KVP_ELIMIT. */
static int batch_shape(const struct master *m, const struct rbuf *r, const char *fmt, uint32_t *n)
{
	struct rbuf c = *r;
	size_t len;
	uint32_t cnt = rb_count(&c, fmt_min(fmt));

	if (!rb_ok(&c))
		return KVP_EPROTO;
	if (m->conf.cluster.max_batch > 0 && cnt > (uint64_t)m->conf.cluster.max_batch)
		return KVP_ELIMIT;
	for (uint32_t i = 0; i < cnt && rb_ok(&c); i++)
		for (const char *f = fmt; *f; f++) {
			if (*f == 's')
				rb_str(&c, &len);
			else if (*f == 'b')
				rb_blob(&c, &len);
			else
				rb_take(&c, (size_t)(*f - '0'));
		}
	if (!rb_ok(&c))
		return KVP_EPROTO;
	*n = cnt;
	return 0;
}

static void item_status(struct op_stats *st, int status)
{
	st->items++;
	if (status < 0)
		st->failures++;
}

static uint64_t lease_ttl(const struct master *m)
{
	return m->conf.master.lease_ttl;
}

/* ---- HELLO and node operations ---- */

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
	if (wlen && (tlen != wlen || CRYPTO_memcmp(tok, want, wlen) != 0))
		return KVP_EAUTH;
	if (role < WIRE_ROLE_CLIENT || role > WIRE_ROLE_ADMIN)
		return KVP_EPROTO;
	c->hello = true;
	c->role = role;
	wb_u64(b, m->epoch);
	wb_u16(b, WIRE_VERSION);
	return 0;
}

/* A MOUNT string: fits, printable ASCII only (it ends up in logs, metric
 * labels and client configuration). */
static bool copy_str(char *dst, size_t cap, const uint8_t *p, size_t n)
{
	if (n >= cap)
		return false;
	for (size_t i = 0; i < n; i++)
		if (p[i] < 0x20 || p[i] >= 0x7f)
			return false;
	memcpy(dst, p, n);
	dst[n] = '\0';
	return true;
}

static int op_mount(struct master *m, struct master_client *c, struct rbuf *r, struct wbuf *b)
{
	struct seg id;
	size_t nl, hl, pl, el, rl;
	const uint8_t *name = rb_str(r, &nl), *host = rb_str(r, &hl), *path = rb_str(r, &pl);

	memset(&id, 0, sizeof(id));
	id.shm_dev = rb_u64(r);
	id.shm_ino = rb_u64(r);
	id.size = rb_u64(r);
	id.uuid = rb_u64(r);
	id.data_off = rb_u64(r);
	id.align = rb_u32(r);
	const uint8_t *ep = rb_str(r, &el);
	const uint8_t *rdma = rb_blob(r, &rl);
	id.spill_capacity = rb_u64(r);
	id.numa_node = rb_i32(r);
	if (!rb_ok(r))
		return KVP_EPROTO;
	if (!copy_str(id.name, sizeof(id.name), name, nl) ||
	    !copy_str(id.host_id, sizeof(id.host_id), host, hl) ||
	    !copy_str(id.shm_path, sizeof(id.shm_path), path, pl) ||
	    !copy_str(id.endpoint, sizeof(id.endpoint), ep, el) || rl > RDMA_INFO_MAX)
		return KVP_EINVAL;
	if (id.data_off >= id.size || id.align < 64 || (id.align & (id.align - 1)) ||
	    id.data_off % id.align || id.size > REP_MAX_OFF)
		return KVP_EINVAL;

	uint8_t *rcopy = NULL;
	if (rl && !(rcopy = malloc(rl)))
		return KVP_ENOMEM;
	if (rl)
		memcpy(rcopy, rdma, rl);

	struct seg *s = segreg_by_uuid(&m->segs, id.uuid);
	if (s && s->online) {
		/* Node reconnect or restart: rebuild from its REPORTs. */
		seg_drop(m, s, "re-mounted");
	} else if (!s) {
		if (m->segs.n > REP_MAX_SEG) {
			free(rcopy);
			return KVP_ELIMIT;	/* segment ids are never reused */
		}
		s = segreg_add(&m->segs);
		if (!s) {
			free(rcopy);
			return KVP_ENOMEM;
		}
	}
	memcpy(s->name, id.name, sizeof(s->name));
	memcpy(s->host_id, id.host_id, sizeof(s->host_id));
	memcpy(s->shm_path, id.shm_path, sizeof(s->shm_path));
	memcpy(s->endpoint, id.endpoint, sizeof(s->endpoint));
	s->shm_dev = id.shm_dev;
	s->shm_ino = id.shm_ino;
	s->size = id.size;
	s->uuid = id.uuid;
	s->data_off = id.data_off;
	s->align = id.align;
	s->spill_capacity = id.spill_capacity;
	s->spill_used = 0;
	s->node_used = 0;
	s->numa_node = id.numa_node;
	free(s->rdma_info);
	s->rdma_info = rcopy;
	s->rdma_len = (uint32_t)rl;
	if (seg_new_secret(s))
		return KVP_EINTERNAL;
	int rc = segreg_online_start(&m->segs, s);
	if (rc)
		return rc == -EINVAL ? KVP_EINVAL : KVP_ENOMEM;
	s->client = c;
	s->last_seen_ms = m->now_ms;
	log_notice("segment %u mounted: node %s host %s %s, %llu bytes, align %u, endpoint %s%s",
		   s->id, s->name, s->host_id, s->shm_path, (unsigned long long)s->capacity,
		   s->align, s->endpoint, s->reject.n ? " (re-mount)" : "");
	wb_u32(b, s->id);
	wb_blob(b, s->secret, sizeof(s->secret));
	return 0;
}

/* The segment named in a node request, which must be this connection's. */
static struct seg *own_seg(struct master *m, struct master_client *c, uint32_t id)
{
	struct seg *s = segreg_online(&m->segs, id);

	return s && s->client == c ? s : NULL;
}

/* Rejects a reported extent: its space is taken and FREEd (released on the
 * ack) when it is free; if it overlaps a live allocation it is not the
 * node's any more and is left alone. */
static void report_reject(struct seg *s, uint8_t tier, uint64_t off, uint64_t alloc_len,
			  uint64_t generation)
{
	if (tier != 0) {
		seg_queue_free(s, off, generation, tier, true);
		return;
	}
	if (seg_reserve(s, off, alloc_len) == 0)
		seg_queue_free(s, off, generation, 0, false);
}

static int attach_replica(struct master *m, struct seg *s, struct obj **op, uint8_t tier,
			  uint64_t off, uint64_t len)
{
	struct obj *o = *op;

	if (o->nrep == o->cap_rep) {
		struct obj *n = objtab_regrow(&m->objs, o, o->cap_rep + 1u);
		if (!n)
			return KVP_ENOMEM;
		seg_repoint(&m->segs, n);
		if (n->slot != OBJ_NOSLOT)
			obj_arr(m, n)->v[n->slot] = n;
		*op = o = n;
	}
	unsigned ri = o->nrep;
	o->rep[ri] = rep_make(s->id, tier, off, len);
	if (seg_attach(s, o, ri))
		return KVP_ENOMEM;
	o->nrep++;
	return 0;
}

static bool has_replica_on(const struct obj *o, uint32_t seg)
{
	for (unsigned k = 0; k < o->nrep; k++)
		if ((uint32_t)o->rep[k].seg == seg)
			return true;
	return false;
}

/* Adopts one reported extent; true if adopted. */
static bool report_one(struct master *m, struct seg *s, const uint8_t *key, size_t klen,
		       uint8_t tier, uint64_t off, uint64_t alloc_len, uint64_t value_len,
		       uint64_t csum, uint64_t gen, uint64_t put_ns)
{
	if (gen > m->gen)
		m->gen = gen;
	/* Offsets and lengths must fit struct rep (multiples of 64). */
	bool placed = off % (1u << REP_UNIT_SHIFT) == 0 && alloc_len % (1u << REP_UNIT_SHIFT) == 0 &&
		      alloc_len && alloc_len < REP_MAX_LEN && off < REP_MAX_OFF &&
		      (tier != 0 || (alloc_len <= s->capacity && off % s->align == 0));
	if (!wire_key_ok(key, klen) || tier > KVP_TIER_DISK || !value_len ||
	    value_len > m->conf.cluster.max_object_size ||
	    alloc_len < ext_size((uint32_t)klen, value_len) || !placed) {
		if (placed)
			report_reject(s, tier, off, alloc_len, gen);
		return false;
	}
	if (seg_rejected(s, tier, off, gen)) {
		report_reject(s, tier, off, alloc_len, gen);
		return false;
	}
	struct obj *o = objtab_find(&m->objs, key, klen);
	if (o) {
		bool same = obj_complete(o) && o->checksum == csum && o->value_len == value_len &&
			    o->generation == gen;
		if (same && !has_replica_on(o, s->id) && o->nrep < KVP_MAX_REPLICAS) {
			if (tier == 0 && seg_reserve(s, off, alloc_len))
				return false;
			if (attach_replica(m, s, &o, tier, off, alloc_len)) {
				/* reserved already: FREE it (released on the ack) */
				seg_queue_free(s, off, gen, tier, tier != 0);
				return false;
			}
			return true;
		}
		/* A different value: the higher generation wins. */
		if (same || !obj_complete(o) || o->generation >= gen) {
			report_reject(s, tier, off, alloc_len, gen);
			return false;
		}
		if (tier == 0 && seg_reserve(s, off, alloc_len))
			return false;
		obj_destroy(m, o, true);
	} else if (tier == 0 && seg_reserve(s, off, alloc_len)) {
		return false;	/* overlaps an allocation made since the mount */
	}
	o = objtab_insert(&m->objs, key, klen, 1);
	if (!o)
		goto out_unreserve;
	o->value_len = value_len;
	o->generation = gen;
	o->checksum = csum;
	o->put_time_ns = put_ns;
	o->atime = m_now32(m);
	o->flags = OBJ_COMPLETE;
	m->keys++;
	if (attach_replica(m, s, &o, tier, off, alloc_len)) {
		obj_unlink(m, o);
		goto out_unreserve;
	}
	return true;

out_unreserve:
	if (tier == 0)
		seg_queue_free(s, off, gen, 0, false);
	return false;
}

static int op_report(struct master *m, struct master_client *c, struct rbuf *r,
		     struct wbuf *b, struct op_stats *st)
{
	uint32_t sid = rb_u32(r), n;
	int rc = batch_shape(m, r, "s1888888", &n);

	if (rc)
		return rc;
	struct seg *s = own_seg(m, c, sid);
	if (!s)
		return KVP_ENOSEG;
	rb_u32(r);
	uint32_t adopted = 0, rejected = 0;
	for (uint32_t i = 0; i < n; i++) {
		size_t klen;
		const uint8_t *key = rb_str(r, &klen);
		uint8_t tier = rb_u8(r);
		uint64_t off = rb_u64(r), alen = rb_u64(r), vlen = rb_u64(r);
		uint64_t csum = rb_u64(r), gen = rb_u64(r), pt = rb_u64(r);
		if (report_one(m, s, key, klen, tier, off, alen, vlen, csum, gen, pt)) {
			adopted++;
			item_status(st, 0);
		} else {
			rejected++;
			item_status(st, KVP_ESTALE);
		}
	}
	evict_check(m, s);
	wb_u32(b, adopted);
	wb_u32(b, rejected);
	return 0;
}

static int op_unmount(struct master *m, struct master_client *c, struct rbuf *r)
{
	uint32_t sid = rb_u32(r);
	uint8_t drain = rb_u8(r);

	if (!rb_ok(r))
		return KVP_EPROTO;
	struct seg *s = own_seg(m, c, sid);
	if (!s)
		return KVP_ENOSEG;
	if (drain) {
		s->draining = true;
		log_notice("segment %u (%s): draining", s->id, s->name);
	} else {
		seg_drop(m, s, "unmounted");
	}
	return 0;
}

static int op_heartbeat(struct master *m, struct master_client *c, struct rbuf *r)
{
	uint32_t sid = rb_u32(r);
	uint64_t used = rb_u64(r), spill = rb_u64(r);

	if (!rb_ok(r))
		return KVP_EPROTO;
	struct seg *s = own_seg(m, c, sid);
	if (!s)
		return KVP_ENOSEG;	/* unknown to this master: the node re-mounts */
	s->node_used = used;
	s->spill_used = spill;
	s->spill_added = s->spill_dropped = 0;
	s->last_seen_ms = m->now_ms;
	evict_check(m, s);		/* the spill tier may have filled */
	return 0;
}

static void put_segment(struct wbuf *b, const struct seg *s)
{
	wb_u32(b, s->id);
	wb_cstr(b, s->name);
	wb_cstr(b, s->host_id);
	wb_cstr(b, s->shm_path);
	wb_u64(b, s->shm_dev);
	wb_u64(b, s->shm_ino);
	wb_u64(b, s->size);
	wb_u64(b, s->uuid);
	wb_cstr(b, s->endpoint);
	wb_blob(b, s->rdma_info, s->rdma_len);
	wb_u8(b, s->draining);
	wb_u64(b, s->used);
	wb_u64(b, s->nobjs);
	wb_u64(b, s->spill_capacity);
	wb_u64(b, evict_spill_used(s));
	wb_i32(b, s->numa_node);
}

static int op_segments(struct master *m, struct wbuf *b)
{
	wb_u32(b, m->segs.online);
	for (size_t i = 1; i < m->segs.n; i++)
		if (m->segs.v[i] && m->segs.v[i]->online)
			put_segment(b, m->segs.v[i]);
	return 0;
}

/* ---- puts ---- */

static bool seg_allocatable(const struct seg *s)
{
	return s && s->online && !s->draining && s->client;
}

/* Fills cand[] with the allocatable segments in the order to try: the
 * preferred ones first (an id, or WIRE_SEG_LOCAL: those on the client's
 * host), then by strategy. Returns how many. */
static size_t seg_order(struct master *m, struct master_client *c, uint32_t pref,
			struct seg **cand)
{
	size_t n = 0, npref = 0;

	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (!seg_allocatable(s))
			continue;
		bool p = pref == WIRE_SEG_LOCAL ? c->host_id[0] && strcmp(s->host_id, c->host_id) == 0
						: s->id == pref;
		cand[n++] = s;
		if (p) {	/* move into the preferred group */
			struct seg *t = cand[npref];
			cand[npref] = s;
			cand[n - 1] = t;
			npref++;
		}
	}
	/* Order each group (preferred, rest) by strategy. */
	size_t lo[2] = { 0, npref }, hi[2] = { npref, n };
	for (int g = 0; g < 2; g++) {
		struct seg **v = cand + lo[g];
		size_t k = hi[g] - lo[g];
		if (m->strategy == STRAT_RANDOM) {
			for (size_t i = k; i > 1; i--) {
				size_t j = master_rand(m) % i;
				struct seg *t = v[i - 1];
				v[i - 1] = v[j];
				v[j] = t;
			}
		} else {
			for (size_t i = 1; i < k; i++) {	/* insertion sort: few segments */
				struct seg *t = v[i];
				double ft = (double)seg_free_bytes(t) / (double)t->capacity;
				size_t j = i;
				while (j > 0 && (double)seg_free_bytes(v[j - 1]) /
						(double)v[j - 1]->capacity < ft) {
					v[j] = v[j - 1];
					j--;
				}
				v[j] = t;
			}
		}
	}
	return n;
}

/* Frees allocations made for a put that could not be recorded. */
static void unalloc(struct master *m, const struct rep *reps, unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		struct seg *s = segreg_get(&m->segs, (uint32_t)reps[k].seg);
		uint64_t len = alloc_len_at(s->alloc, rep_off(&reps[k]));
		if (alloc_free(s->alloc, rep_off(&reps[k])) == 0)
			s->used -= len;
	}
}

static void put_fail(struct wbuf *b, int status)
{
	wb_i32(b, status);
	wb_u64(b, 0);
	wb_u8(b, 0);
}

/* One PUT_START item, its reply entry appended to b. Returns its status;
 * *need_evict is set when no segment had room for even one replica. */
static int put_one(struct master *m, struct master_client *c, uint32_t pref, unsigned want,
		   const uint8_t *key, size_t klen, uint64_t vlen, struct wbuf *b,
		   bool *need_evict)
{
	int status = 0;

	*need_evict = false;
	if (want > KVP_MAX_REPLICAS || !vlen)
		status = KVP_EINVAL;
	else if (!wire_key_ok(key, klen))
		status = KVP_EKEY;
	else if (vlen > m->conf.cluster.max_object_size)
		status = KVP_ETOOBIG;
	else if (objtab_find(&m->objs, key, klen))
		status = KVP_EEXIST;
	if (status) {
		put_fail(b, status);
		return status;
	}

	uint64_t need = ext_size((uint32_t)klen, vlen);
	size_t ncand = seg_order(m, c, pref, m->cand);
	struct rep reps[KVP_MAX_REPLICAS];
	unsigned got = 0;
	for (size_t i = 0; i < ncand && got < want; i++) {
		struct seg *s = m->cand[i];
		uint64_t alen;
		if (need > s->capacity || seg_grow(s))
			continue;
		uint64_t off = seg_alloc(s, need, &alen);
		if (off != UINT64_MAX)
			reps[got++] = rep_make(s->id, 0, off, alen);
	}
	if (!got) {
		*need_evict = ncand > 0;
		put_fail(b, KVP_ENOSPC);
		return KVP_ENOSPC;
	}
	struct obj *o = objtab_insert(&m->objs, key, klen, got);
	if (!o || objarr_push(&m->pending, o)) {
		if (o)
			objtab_remove(&m->objs, o);
		unalloc(m, reps, got);
		put_fail(b, KVP_ENOMEM);
		return KVP_ENOMEM;
	}
	o->generation = ++m->gen;
	o->value_len = vlen;
	o->atime = m_now32(m);
	o->deadline = m_now32(m) + (uint32_t)m->conf.master.put_timeout;
	wb_i32(b, 0);
	wb_u64(b, o->generation);
	wb_u8(b, (uint8_t)got);
	for (unsigned k = 0; k < got; k++) {
		struct seg *s = segreg_get(&m->segs, (uint32_t)reps[k].seg);
		uint8_t grant[WIRE_GRANT_LEN];
		o->rep[k] = reps[k];
		seg_attach(s, o, k);	/* room made by seg_grow above */
		o->nrep++;
		seg_grant(s, o->generation, rep_off(&reps[k]), rep_len(&reps[k]), grant);
		wb_u32(b, s->id);
		wb_u64(b, rep_off(&reps[k]));
		wb_u64(b, rep_len(&reps[k]));
		wb_bytes(b, grant, sizeof(grant));
		evict_check(m, s);
	}
	return 0;
}

/* True if an allocatable segment waits for FREE acks (room coming back). */
static bool frees_in_flight(const struct master *m)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (seg_allocatable(s) && seg_frees_pending(s))
			return true;
	}
	return false;
}

/* True if an allocatable segment has DEMOTEs queued or unanswered: their
 * memory extents are FREEd (room coming back) once the node has copied
 * them, which may take a disk's while. */
static bool demotes_in_flight(const struct master *m)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (seg_allocatable(s) && (s->dq.n || s->dinflight))
			return true;
	}
	return false;
}

/* Runs the PUT_START items of body from item `from` on, appending their
 * results to out. Returns the item count when done, or the index of the
 * item that found no room and started an eviction (not final: the caller
 * parks the request and retries that item once the FREEs are acked). */
static uint32_t put_run(struct master *m, struct master_client *c, const uint8_t *body,
			uint32_t len, uint32_t from, bool final, struct wbuf *out)
{
	struct rbuf r;
	struct op_stats *st = &m->ops[WIRE_OP_PUT_START];

	if (m->cand_cap < m->segs.n) {
		struct seg **v = realloc(m->cand, m->segs.n * sizeof(*v));
		if (!v)
			return from;
		m->cand = v;
		m->cand_cap = m->segs.n;
	}
	rb_init(&r, body, len);
	unsigned want = rb_u8(&r);
	uint32_t pref = rb_u32(&r);
	uint32_t n = rb_u32(&r);
	if (want == 0)
		want = 1;	/* 0: the master's default, one replica */
	for (uint32_t i = 0; i < n; i++) {
		size_t klen;
		const uint8_t *key = rb_str(&r, &klen);
		uint64_t vlen = rb_u64(&r);
		if (i < from)
			continue;
		bool need_evict;
		size_t mark = out->len;
		int rc = put_one(m, c, pref, want, key, klen, vlen, out, &need_evict);
		if (rc == KVP_ENOSPC && need_evict && !final &&
		    (evict_force(m, ext_size((uint32_t)klen, vlen)) || frees_in_flight(m) ||
		     demotes_in_flight(m))) {
			out->len = mark;
			return i;
		}
		item_status(st, rc);
	}
	return n;
}

/* PUT_START. An item that finds no room starts an eviction; the request is
 * then parked (a heap copy) until the evicted extents' FREEs are acked (or
 * PARK_MAX_MS), and that item is retried once. Likewise when FREEs are
 * already in flight: their space is about to come back. */
static int op_put_start(struct master *m, struct master_client *c, const struct wire_hdr *h,
			const uint8_t *body, struct wbuf *b, bool *parked)
{
	struct rbuf r;
	uint32_t n;

	rb_init(&r, body, h->body_len);
	rb_u8(&r);
	rb_u32(&r);
	int rc = batch_shape(m, &r, "s8", &n);
	if (rc)
		return rc;
	size_t body_start = b->len;
	wb_u32(b, n);
	uint32_t done = put_run(m, c, body, h->body_len, 0, false, b);
	if (done == n)
		return 0;
	if (done == 0 && m->cand_cap < m->segs.n)
		return KVP_ENOMEM;

	struct parked *p = calloc(1, sizeof(*p));
	if (!p)
		goto out_finish;
	p->body = malloc(h->body_len);
	if (!p->body)
		goto out_free;
	memcpy(p->body, body, h->body_len);
	p->c = c;
	p->h = *h;
	p->next_item = done;
	p->deadline_ms = m->now_ms + PARK_MAX_MS;
	wb_init(&p->reply);
	wire_begin(&p->reply);
	wb_bytes(&p->reply, b->p + body_start, b->len - body_start);
	if (p->reply.oom)
		goto out_free;
	b->len = body_start;
	p->next = m->parked;
	m->parked = p;
	*parked = true;
	return 0;

out_free:
	parked_free(p);
out_finish:
	put_run(m, c, body, h->body_len, done, true, b);
	return 0;
}

/* True while an eviction a parked PUT_START waits for is still freeing. */
static bool eviction_pending(const struct master *m)
{
	return m->evict_active || frees_in_flight(m) || demotes_in_flight(m);
}

/* Finishes the parked PUT_STARTs whose eviction is done or whose wait
 * (PARK_MAX_MS) is over. Each is unlinked before its reply goes out, so a
 * client freed meanwhile (master_client_free) finds a consistent list. */
static void parked_retry(struct master *m)
{
	bool waiting = eviction_pending(m);

	for (;;) {
		struct parked **pp = &m->parked;
		while (*pp && waiting && m->now_ms < (*pp)->deadline_ms)
			pp = &(*pp)->next;
		struct parked *p = *pp;
		if (!p)
			return;
		*pp = p->next;
		struct rbuf r;
		rb_init(&r, p->body, p->h.body_len);
		rb_take(&r, 5);
		int status = 0;
		if (put_run(m, p->c, p->body, p->h.body_len, p->next_item, true,
			    &p->reply) != rb_u32(&r) || p->reply.oom) {
			status = KVP_ENOMEM;	/* could not finish: a bare error frame */
			wb_reset(&p->reply);
			wire_begin(&p->reply);
		}
		wire_finish(&p->reply, 0, WIRE_OP_PUT_START, WIRE_F_REPLY, status, p->h.reqid, 0);
		if (!p->reply.oom)
			p->c->send(p->c->arg, p->reply.p, p->reply.len);
		parked_free(p);
	}
}

static struct obj *find_key(struct master *m, struct rbuf *r, int *status)
{
	size_t klen;
	const uint8_t *key = rb_str(r, &klen);

	if (!wire_key_ok(key, klen)) {
		*status = KVP_EKEY;
		return NULL;
	}
	struct obj *o = objtab_find(&m->objs, key, klen);
	*status = o ? 0 : KVP_ENOTFOUND;
	return o;
}

/* Reads a batch of n keys ("n x {str key}", shape already checked) into
 * m->keys, prefetching their buckets and chain heads: NULL on OOM. */
static struct kref *read_keys(struct master *m, struct rbuf *r, uint32_t n)
{
	if (m->kbuf_cap < n) {
		struct kref *k = realloc(m->kbuf, n * sizeof(*k));
		if (!k)
			return NULL;
		m->kbuf = k;
		m->kbuf_cap = n;
	}
	for (uint32_t i = 0; i < n; i++) {
		size_t len;
		struct kref *k = &m->kbuf[i];
		k->p = rb_str(r, &len);
		k->len = (uint32_t)len;
		k->hash = objtab_hash(k->p, len);
		objtab_prefetch_bucket(&m->objs, k->hash);
	}
	for (uint32_t i = 0; i < n; i++)
		objtab_prefetch_head(&m->objs, m->kbuf[i].hash);
	return m->kbuf;
}

/* A visible (complete) object: incomplete puts are invisible to readers. */
static struct obj *find_visible(struct master *m, const struct kref *k, int *status)
{
	if (!wire_key_ok(k->p, k->len)) {
		*status = KVP_EKEY;
		return NULL;
	}
	struct obj *o = objtab_find_hash(&m->objs, k->p, k->len, k->hash);
	if (!o || !obj_complete(o)) {
		*status = KVP_ENOTFOUND;
		return NULL;
	}
	*status = 0;
	return o;
}

/* Shape check + read_keys for the "n x {str key}" batches. */
static int key_batch(struct master *m, struct rbuf *r, struct wbuf *b, uint32_t *n,
		     struct kref **keys)
{
	int rc = batch_shape(m, r, "s", n);

	if (rc)
		return rc;
	rb_u32(r);
	*keys = read_keys(m, r, *n);
	if (!*keys)
		return KVP_ENOMEM;
	wb_u32(b, *n);
	return 0;
}

static int op_put_end(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint32_t n;
	int rc = batch_shape(m, r, "s88", &n);
	uint64_t now_ns = 0;	/* one clock read per frame, not per key */

	if (rc)
		return rc;
	rb_u32(r);
	wb_u32(b, n);
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_key(m, r, &s);
		uint64_t gen = rb_u64(r), csum = rb_u64(r);
		if (o && o->generation != gen) {
			s = KVP_ESTALE;
		} else if (o && obj_complete(o)) {
			s = o->checksum == csum ? 0 : KVP_ESTALE;	/* a retried PUT_END */
		} else if (o) {
			objarr_del(&m->pending, o);
			o->flags |= OBJ_COMPLETE;
			o->checksum = csum;
			if (!now_ns)
				now_ns = real_ns();
			o->put_time_ns = now_ns;
			o->atime = m_now32(m);
			o->deadline = 0;
			m->keys++;
		}
		wb_i32(b, s);
		item_status(st, s);
	}
	return 0;
}

static int op_put_revoke(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint32_t n;
	int rc = batch_shape(m, r, "s8", &n);

	if (rc)
		return rc;
	rb_u32(r);
	wb_u32(b, n);
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_key(m, r, &s);
		uint64_t gen = rb_u64(r);
		if (o && o->generation != gen)
			s = KVP_ESTALE;
		else if (o && obj_complete(o))
			s = KVP_EINVAL;		/* finished puts are REMOVEd */
		else if (o)
			obj_destroy(m, o, true);
		wb_i32(b, s);
		item_status(st, s);
	}
	return 0;
}

/* ---- promotion (spill.promote_on_hit) ---- */

/* Room in s's memory for a promoted copy of len bytes: the segment stays
 * at or under the high watermark (1.0 when it is 0), counting extents on
 * their way out as gone like evict_check does, so a promotion never starts
 * an eviction round; and none while a round runs (memory is tight). */
static bool promote_room(const struct master *m, const struct seg *s, uint64_t len)
{
	double hw = m->conf.master.eviction_high_watermark;

	if (hw <= 0)
		hw = 1;
	return seg_allocatable(s) && s->spill_capacity && !s->evicting && len <= s->capacity &&
	       (double)(s->used - s->freeing - s->demoting + len) <= hw * (double)s->capacity;
}

/* A GET hit o, which has no memory replica (clients read memory replicas
 * first, so a disk one is then the nearest): queue a PROMOTE of a disk
 * replica, one on the reader's host first, into memory the master
 * allocates in the same node's segment. The GET's reply still names the
 * disk replica; promoted() flips it when the node has copied it. */
static void promote_maybe(struct master *m, const struct master_client *c, struct obj *o)
{
	uint64_t need = ext_size(o->key_len, o->value_len);
	struct seg *pick = NULL;
	int ri = -1;
	bool tight = false;

	for (unsigned k = 0; k < o->nrep; k++) {
		const struct rep *rp = &o->rep[k];
		if (rp->tier != KVP_TIER_DISK || rp->promoting)
			return;		/* a memory replica, or a copy already on its way */
		struct seg *s = segreg_online(&m->segs, (uint32_t)rp->seg);
		if (!s || !promote_room(m, s, need)) {
			tight |= s && s->spill_capacity;
			continue;
		}
		bool local = c->host_id[0] && strcmp(s->host_id, c->host_id) == 0;
		if (!pick || local) {
			pick = s;
			ri = (int)k;
		}
		if (local)
			break;
	}
	if (!pick) {
		if (tight)
			m->promote_skipped++;
		return;
	}
	uint64_t alen, off = seg_alloc(pick, need, &alen);
	if (off == UINT64_MAX) {
		m->promote_skipped++;	/* room in total, none in one piece */
		return;
	}
	if (alen >= REP_MAX_LEN ||
	    seg_queue_promote(pick, obj_key(o), o->key_len, rep_off(&o->rep[ri]), o->generation,
			      rep_len(&o->rep[ri]), off, alen)) {
		seg_unalloc(pick, off);
		return;
	}
	o->rep[ri].promoting = 1;	/* answered in promoted() */
}

/* The disk replica's spill extent outlives the flip until every lease
 * granted while it was the object's replica has run out: the readers who
 * got it may still be reading it. Returns 0 or -ENOMEM (nothing done). */
static int retire_spill(struct master *m, struct seg *s, const struct obj *o, uint64_t soff,
			uint64_t slen)
{
	if (obj_leased(m, o))
		return seg_defer_free(s, soff, o->generation, slen,
				      m->now_ms + (uint32_t)(o->deadline - m_now32(m)));
	if (seg_queue_free(s, soff, o->generation, KVP_TIER_DISK, false))
		return -ENOMEM;
	s->spill_dropped += slen;
	return 0;
}

/* The node answered PROMOTE batch d. A copy made: the replica becomes the
 * memory extent and the spill extent is retired; a copy that failed, or of
 * an object that went or changed meanwhile, has its memory extent FREEd
 * (the node may have written part of it). A spill extent the node could
 * not read back (gone, damaged) is no replica any more. */
static void promoted(struct master *m, struct seg *s, const struct dbatch *d,
		     const struct wire_hdr *h, const uint8_t *body)
{
	struct rbuf r;

	rb_init(&r, body, h->body_len);
	bool ok = h->status == 0 && rb_u32(&r) == d->n;
	for (uint32_t i = 0; i < d->n; i++) {
		const struct dent *e = d->e[i];
		int st = ok ? rb_i32(&r) : h->status ? h->status : KVP_EPROTO;
		if (!rb_ok(&r))
			st = KVP_EPROTO;
		struct obj *o = objtab_find(&m->objs, e->key, e->key_len);
		int ri = -1;
		for (unsigned k = 0; o && o->generation == e->generation && k < o->nrep; k++)
			if (o->rep[k].seg == s->id && o->rep[k].tier == KVP_TIER_DISK &&
			    o->rep[k].promoting && rep_off(&o->rep[k]) == e->off)
				ri = (int)k;
		if (ri >= 0)
			o->rep[ri].promoting = 0;
		if (st == 0 && ri >= 0 &&
		    retire_spill(m, s, o, rep_off(&o->rep[ri]), rep_len(&o->rep[ri])) == 0) {
			uint64_t sidx = o->rep[ri].sidx;
			o->rep[ri] = rep_make(s->id, KVP_TIER_MEM, e->to, e->to_len);
			o->rep[ri].sidx = sidx;
			m->promotions++;
			continue;
		}
		if (seg_queue_free(s, e->to, e->generation, KVP_TIER_MEM, false))
			log_err("segment %u: out of memory queueing a FREE; %llu bytes leak until "
				"re-mount", s->id, (unsigned long long)e->to_len);
		if (st == 0 || ri < 0)
			continue;	/* went meanwhile (its spill extent FREEd then), or OOM */
		m->promote_failures++;
		log_info("segment %u: PROMOTE of '%.*s' failed (%s)", s->id, (int)e->key_len, e->key,
			 kvp_strerror(st));
		if (st == KVP_ESTALE || st == KVP_ECHECKSUM)
			master_drop_replica(m, o, (unsigned)ri, true);
	}
}

/* ---- reads ---- */

static void put_reps(struct wbuf *b, const struct obj *o)
{
	wb_u8(b, o->nrep);
	for (unsigned k = 0; k < o->nrep; k++) {
		wb_u32(b, (uint32_t)o->rep[k].seg);
		wb_u8(b, (uint8_t)o->rep[k].tier);
		wb_u64(b, rep_off(&o->rep[k]));
		wb_u64(b, rep_len(&o->rep[k]));
	}
}

static void sweep_leases(struct master *m, size_t budget);

static int op_get(struct master *m, struct master_client *c, struct rbuf *r, struct wbuf *b,
		  struct op_stats *st)
{
	uint32_t n;
	struct kref *keys;
	int rc = key_batch(m, r, b, &n, &keys);

	if (rc)
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_visible(m, &keys[i], &s);
		if (o && o->slot == OBJ_NOSLOT) {
			if (objarr_push(&m->leased, o)) {
				o = NULL;
				s = KVP_ENOMEM;
			} else {
				/* two looked at per one added: the array stays near
				 * the set of live leases without long sweeps (o's
				 * new deadline first, so that it is not one of them) */
				o->deadline = m_now32(m) + (uint32_t)lease_ttl(m);
				sweep_leases(m, 2);
			}
		}
		wb_i32(b, s);
		if (!o) {
			wb_bytes(b, (const uint8_t[33]){ 0 }, 33);	/* 4 x u64 + nrep */
		} else {
			o->atime = m_now32(m);
			o->deadline = m_now32(m) + (uint32_t)lease_ttl(m);
			wb_u64(b, o->value_len);
			wb_u64(b, o->generation);
			wb_u64(b, o->checksum);
			wb_u64(b, lease_ttl(m));
			put_reps(b, o);
			if (m->conf.spill.promote_on_hit)
				promote_maybe(m, c, o);
		}
		item_status(st, s);
	}
	return 0;
}

static int op_exists(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint32_t n;
	struct kref *keys;
	int rc = key_batch(m, r, b, &n, &keys);

	if (rc)
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_visible(m, &keys[i], &s);
		if (o)
			s = 1;
		else if (s == KVP_ENOTFOUND)
			s = 0;
		wb_i32(b, s);
		item_status(st, s);
	}
	return 0;
}

static int op_size(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint32_t n;
	struct kref *keys;
	int rc = key_batch(m, r, b, &n, &keys);

	if (rc)
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_visible(m, &keys[i], &s);
		wb_i32(b, s);
		wb_u64(b, o ? o->value_len : 0);
		item_status(st, s);
	}
	return 0;
}

/* Pin expiry for PIN ttl_ms: seconds since start, rounded up (0 unpins). */
static uint32_t pin_until(const struct master *m, uint64_t ttl)
{
	if (!ttl)
		return 0;
	uint64_t s = (m->now_ms - m->start_ms + ttl + 999) / 1000;
	return s > UINT32_MAX ? UINT32_MAX : (uint32_t)s;
}

static int op_stat(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint32_t n;
	struct kref *keys;
	int rc = key_batch(m, r, b, &n, &keys);

	if (rc)
		return rc;
	uint64_t now_rt = real_ns();
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_visible(m, &keys[i], &s);
		wb_i32(b, s);
		if (!o) {
			wb_bytes(b, (const uint8_t[57]){ 0 }, 57);	/* 7 x u64 + nrep */
		} else {
			wb_u64(b, o->value_len);
			wb_u64(b, o->generation);
			wb_u64(b, o->checksum);
			wb_u64(b, o->put_time_ns);
			wb_u64(b, now_rt - (uint64_t)obj_age(m, o) * 1000000ull);
			wb_i64(b, obj_leased(m, o) ? (int32_t)(o->deadline - m_now32(m)) : 0);
			wb_i64(b, obj_pinned(m, o) ? (int64_t)o->pin_s * 1000 -
							   (int64_t)(m->now_ms - m->start_ms) : 0);
			put_reps(b, o);
		}
		item_status(st, s);
	}
	return 0;
}

static int op_pin(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint64_t ttl = rb_u64(r);
	uint32_t n;
	struct kref *keys;
	int rc = key_batch(m, r, b, &n, &keys);

	if (rc)
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_visible(m, &keys[i], &s);
		if (o)
			o->pin_s = pin_until(m, ttl);
		wb_i32(b, s);
		item_status(st, s);
	}
	return 0;
}

/* ---- removal ---- */

static int op_remove(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint8_t force = rb_u8(r);
	uint32_t n;
	struct kref *keys;
	int rc = key_batch(m, r, b, &n, &keys);

	if (rc)
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_visible(m, &keys[i], &s);
		if (o && obj_leased(m, o) && !force)
			s = KVP_ELEASED;
		else if (o)
			obj_destroy(m, o, true);
		wb_i32(b, s);
		item_status(st, s);
	}
	return 0;
}

static bool has_prefix(const struct obj *o, const uint8_t *p, size_t n)
{
	return o->key_len >= n && memcmp(obj_key(o), p, n) == 0;
}

static int op_remove_prefix(struct master *m, struct rbuf *r, struct wbuf *b)
{
	size_t plen;
	const uint8_t *prefix = rb_str(r, &plen);
	uint8_t force = rb_u8(r);

	if (!rb_ok(r))
		return KVP_EPROTO;
	uint64_t count = 0;
	struct obj *o = objtab_seek(&m->objs, prefix, plen, false);
	while (o && has_prefix(o, prefix, plen)) {
		struct obj *next = objtab_next(o);
		if (obj_complete(o) && (force || !obj_leased(m, o))) {
			obj_destroy(m, o, true);
			count++;
		}
		o = next;
	}
	wb_u64(b, count);
	return 0;
}

/* ---- LIST ---- */

/* First object not starting with p (p[n-1] incremented, carrying). */
static struct obj *seek_past(struct master *m, const uint8_t *p, size_t n)
{
	uint8_t buf[KVP_MAX_KEY];

	memcpy(buf, p, n);
	while (n && buf[n - 1] == 0xff)
		n--;
	if (!n)
		return NULL;
	buf[n - 1]++;
	return objtab_seek(&m->objs, buf, n, false);
}

/* Length of the rolled-up common prefix of key (through the first delimiter
 * after plen), 0 if none. */
static size_t rollup(const uint8_t *key, size_t klen, size_t plen, int delim)
{
	if (delim < 0 || klen <= plen)
		return 0;
	const uint8_t *d = memchr(key + plen, delim, klen - plen);
	return d ? (size_t)(d - key) + 1 : 0;
}

static int op_list(struct master *m, struct rbuf *r, struct wbuf *b)
{
	size_t plen, dlen, clen;
	const uint8_t *prefix = rb_str(r, &plen);
	const uint8_t *dp = rb_str(r, &dlen);
	const uint8_t *cursor = rb_str(r, &clen);
	uint32_t limit = rb_u32(r);

	if (!rb_ok(r))
		return KVP_EPROTO;
	if (dlen > 1 || plen > KVP_MAX_KEY || clen > KVP_MAX_KEY)
		return KVP_EINVAL;
	int delim = dlen ? dp[0] : -1;
	if (!limit)
		limit = LIST_DEFAULT;
	/* Keep the reply under the frame limit, with room for the cursor. */
	size_t max_body = m->conf.cluster.max_frame > 4096 ? m->conf.cluster.max_frame - 2048 : 2048;

	struct obj *o;
	if (clen && objtab_keycmp(cursor, clen, prefix, plen) >= 0) {
		size_t cp = clen >= plen && memcmp(cursor, prefix, plen) == 0 ?
			    rollup(cursor, clen, plen, delim) : 0;
		o = cp ? seek_past(m, cursor, cp) : objtab_seek(&m->objs, cursor, clen, true);
	} else {
		o = objtab_seek(&m->objs, prefix, plen, false);
	}

	size_t count_at = b->len;
	uint32_t count = 0;
	const uint8_t *last = NULL;
	size_t last_len = 0;
	wb_u32(b, 0);
	while (o && has_prefix(o, prefix, plen)) {
		if (!obj_complete(o)) {
			o = objtab_next(o);
			continue;
		}
		if (count == limit || b->len + o->key_len + 32 > max_body)
			break;
		const uint8_t *key = obj_key(o);
		size_t cp = rollup(key, o->key_len, plen, delim);
		if (cp) {
			wb_u8(b, 1);
			wb_str(b, key, cp);
			wb_u64(b, 0);
			wb_u64(b, 0);
			last = key;
			last_len = cp;
			o = seek_past(m, key, cp);	/* key stays valid: nothing is freed */
		} else {
			wb_u8(b, 0);
			wb_str(b, key, o->key_len);
			wb_u64(b, o->value_len);
			wb_u64(b, o->put_time_ns);
			last = key;
			last_len = o->key_len;
			o = objtab_next(o);
		}
		count++;
	}
	/* More to come if a visible key under the prefix remains. */
	while (o && has_prefix(o, prefix, plen) && !obj_complete(o))
		o = objtab_next(o);
	if (o && has_prefix(o, prefix, plen) && last)
		wb_str(b, last, last_len);
	else
		wb_str(b, "", 0);
	if (!b->oom)
		memcpy(b->p + count_at, &count, sizeof(count));
	return 0;
}

static int op_info(struct master *m, struct wbuf *b)
{
	uint64_t used, cap;

	master_usage(m, &used, &cap);
	wb_u64(b, m->keys);
	wb_u64(b, used);
	wb_u64(b, cap);
	wb_u64(b, m->evictions);
	wb_u64(b, m->demotions);
	wb_u64(b, master_active_leases(m));
	return 0;
}

/* The node answered DEMOTE batch d: a copy in its spill file replaces the
 * memory replica (whose extent is then FREEd); a failed demotion evicts
 * the replica instead; a copy of an object that went meanwhile is FREEd. */
static void demoted(struct master *m, struct seg *s, const struct dbatch *d,
		    const struct wire_hdr *h, const uint8_t *body)
{
	struct rbuf r;

	rb_init(&r, body, h->body_len);
	bool ok = h->status == 0 && rb_u32(&r) == d->n;
	for (uint32_t i = 0; i < d->n; i++) {
		const struct dent *e = d->e[i];
		int st = ok ? rb_i32(&r) : KVP_EPROTO;
		uint64_t soff = ok ? rb_u64(&r) : 0, slen = ok ? rb_u64(&r) : 0;
		if (!rb_ok(&r))
			st = KVP_EPROTO;
		bool placed = st == 0 && soff % 64 == 0 && slen % 64 == 0 && slen &&
			      slen < REP_MAX_LEN && soff < REP_MAX_OFF;
		s->demoting -= e->len;
		struct obj *o = objtab_find(&m->objs, e->key, e->key_len);
		int ri = -1;
		for (unsigned k = 0; o && o->generation == e->generation && k < o->nrep; k++)
			if (o->rep[k].seg == s->id && o->rep[k].tier == 0 && o->rep[k].demoting &&
			    rep_off(&o->rep[k]) == e->off)
				ri = (int)k;
		if (st == 0 && (ri < 0 || !placed)) {
			seg_queue_free(s, soff, e->generation, KVP_TIER_DISK, true);
			s->spill_dropped += slen;
		}
		if (ri < 0)
			continue;	/* removed (its memory extent FREEd then) */
		o->rep[ri].demoting = 0;
		if (placed && obj_leased(m, o)) {
			/* A reader took a lease on the memory replica while it
			 * was copied: it stays; the copy goes (a later round
			 * may demote the object again). */
			seg_queue_free(s, soff, e->generation, KVP_TIER_DISK, true);
			s->spill_dropped += slen;
		} else if (placed) {
			uint64_t sidx = o->rep[ri].sidx;
			o->rep[ri] = rep_make(s->id, KVP_TIER_DISK, soff, slen);
			o->rep[ri].sidx = sidx;
			seg_queue_free(s, e->off, e->generation, 0, false);
			s->spill_added += slen;
			m->demotions++;
		} else {
			if (st != KVP_ENOSPC && st != KVP_ENOTSUP)
				log_info("segment %u: DEMOTE of '%.*s' failed (%s); evicting it", s->id,
					 (int)e->key_len, e->key, kvp_strerror(st));
			master_drop_replica(m, o, (unsigned)ri, true);
			m->evictions++;
			m->evicted_bytes += e->len;
		}
	}
	evict_check(m, s);
}

/* A node answered a request of ours (FREE, DEMOTE, PROMOTE). */
static void node_reply(struct master *m, struct master_client *c, const struct wire_hdr *h,
		       const uint8_t *body)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (!s || !s->online || s->client != c)
			continue;
		if (h->opcode == WIRE_OP_FREE && seg_ack_frees(s, h->reqid) >= 0) {
			if (h->status)
				log_warn("segment %u: node answered FREE with %s", s->id,
					 kvp_strerror(h->status));
			break;
		}
		struct dbatch *d;
		if (h->opcode == WIRE_OP_DEMOTE && (d = seg_answered_demotes(s, h->reqid))) {
			demoted(m, s, d, h, body);
			seg_dbatch_free(d);
			break;
		}
		if (h->opcode == WIRE_OP_PROMOTE && (d = seg_answered_promotes(s, h->reqid))) {
			promoted(m, s, d, h, body);
			seg_dbatch_free(d);
			break;
		}
	}
	master_flush(m);
	parked_retry(m);
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

int master_handle(struct master *m, struct master_client *c, const struct wire_hdr *h,
		  const uint8_t *body, struct wbuf *reply)
{
	uint64_t t0 = mono_ns();
	struct rbuf r;
	int status = 0, ret = 0;
	bool parked = false;
	unsigned op = h->opcode < WIRE_OP_MAX ? h->opcode : 0;
	struct op_stats *st = &m->ops[op];

	m->now_ms = t0 / 1000000;
	c->last_seen_ms = m->now_ms;
	if (h->flags & WIRE_F_REPLY) {
		if (!c->hello)
			goto out_auth;
		node_reply(m, c, h, body);
		return 0;
	}
	rb_init(&r, body, h->body_len);
	size_t start = wire_begin(reply);
	if (!c->hello && h->opcode != WIRE_OP_HELLO) {
		status = KVP_EAUTH;
		ret = -1;
		goto out_reply;
	}
	if (node_op(h->opcode) && c->role != WIRE_ROLE_NODE) {
		status = KVP_EPROTO;
		goto out_reply;
	}
	switch (h->opcode) {
	case WIRE_OP_HELLO:
		status = op_hello(m, c, &r, reply);
		if (status == KVP_EAUTH) {
			log_auth_failure(m, c);
			ret = -1;
		}
		break;
	case WIRE_OP_MOUNT: status = op_mount(m, c, &r, reply); break;
	case WIRE_OP_REPORT: status = op_report(m, c, &r, reply, st); break;
	case WIRE_OP_UNMOUNT: status = op_unmount(m, c, &r); break;
	case WIRE_OP_HEARTBEAT: status = op_heartbeat(m, c, &r); break;
	case WIRE_OP_SEGMENTS: status = op_segments(m, reply); break;
	case WIRE_OP_PUT_START:
		status = op_put_start(m, c, h, body, reply, &parked);
		break;
	case WIRE_OP_PUT_END: status = op_put_end(m, &r, reply, st); break;
	case WIRE_OP_PUT_REVOKE: status = op_put_revoke(m, &r, reply, st); break;
	case WIRE_OP_GET: status = op_get(m, c, &r, reply, st); break;
	case WIRE_OP_EXISTS: status = op_exists(m, &r, reply, st); break;
	case WIRE_OP_SIZE: status = op_size(m, &r, reply, st); break;
	case WIRE_OP_REMOVE: status = op_remove(m, &r, reply, st); break;
	case WIRE_OP_REMOVE_PREFIX: status = op_remove_prefix(m, &r, reply); break;
	case WIRE_OP_LIST: status = op_list(m, &r, reply); break;
	case WIRE_OP_STAT: status = op_stat(m, &r, reply, st); break;
	case WIRE_OP_PIN: status = op_pin(m, &r, reply, st); break;
	case WIRE_OP_INFO: status = op_info(m, reply); break;
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
	observe(st, mono_ns() - t0);
	return ret;

out_auth:
	start = wire_begin(reply);
	wire_finish(reply, start, h->opcode, WIRE_F_REPLY, KVP_EAUTH, h->reqid, 0);
	return -1;
}

/* ---- periodic duties ---- */

static void sweep_pending(struct master *m)
{
	size_t budget = SWEEP_BUDGET;

	while (budget-- && m->pending.n) {
		if (m->pending_cursor >= m->pending.n)
			m->pending_cursor = 0;
		struct obj *o = m->pending.v[m->pending_cursor];
		if ((int32_t)(o->deadline - m_now32(m)) <= 0) {
			log_info("put of '%.*s' timed out; reclaimed", (int)o->key_len, obj_key(o));
			obj_destroy(m, o, true);	/* swaps another entry in */
			m->put_timeouts++;
		} else {
			m->pending_cursor++;
		}
	}
}

static void sweep_leases(struct master *m, size_t budget)
{
	while (budget-- && m->leased.n) {
		if (m->lease_cursor >= m->leased.n)
			m->lease_cursor = 0;
		struct obj *o = m->leased.v[m->lease_cursor];
		if (!obj_leased(m, o))
			objarr_del(&m->leased, o);
		else
			m->lease_cursor++;
	}
}

static void check_nodes(struct master *m)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (!s || !s->online)
			continue;
		uint64_t seen = s->client ? s->client->last_seen_ms : s->last_seen_ms;
		if (m->now_ms > seen + m->conf.master.client_ttl) {
			m->node_expiries++;
			seg_drop(m, s, "node silent for client_ttl");
		}
	}
}

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

bool master_step(struct master *m)
{
	master_now(m);
	if (m->evict_active)
		m->evict_active = evict_step(m, EVICT_STEP_US);
	master_flush(m);
	parked_retry(m);
	return m->evict_active;
}

/* FREEs the spill extents of promoted objects whose readers' leases have
 * run out (sent by master_step's flush). */
static void free_due_spill(struct master *m)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		struct seg *s = m->segs.v[i];
		if (s && s->online && s->lfree.n)
			seg_free_due(s, m->now_ms);
	}
}

void master_tick(struct master *m)
{
	master_now(m);
	sweep_pending(m);
	sweep_leases(m, SWEEP_BUDGET);
	free_due_spill(m);
	check_nodes(m);
	check_hello(m);
	master_step(m);
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
	if (restart)
		log_warn("reload: %d changed key(s) take effect after a restart", restart);
	/* New watermarks apply to the next usage change; look now as well. */
	for (size_t i = 1; i < m->segs.n; i++)
		if (m->segs.v[i] && m->segs.v[i]->online)
			evict_check(m, m->segs.v[i]);
}

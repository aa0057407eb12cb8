/* client: libkvpool, the public API of kvpool.h. Talks to kvpool-master
 * over pooled, pipelined RPC connections and moves bytes through the
 * transports of xport.h (local memcpy, TCP). Any thread; kvp->lock guards
 * the pools and the segment table and is never held across I/O (see
 * client_i.h for the lock order).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client_i.h"
#include "kvpool_i.h"
#include "extent.h"
#include "kvpool.h"
#include "log.h"
#include "net.h"
#include "cuda.h"
#include "rdma.h"
#include "xp_rdma.h"
#include "xport.h"

#define MASTER_CONNS_MAX 64		/* master connections per handle */
#define MC_WINDOW 16			/* frames pipelined before reading replies */
#define DEFAULT_MAX_FRAME (64u << 20)
#define DEFAULT_MAX_BATCH 1024

static inline uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* ---- low-level I/O ---------------------------------------------------- */

uint64_t client_deadline(const struct kvp *kvp)
{
	return net_now_ms() + kvp->timeout_ms;
}

/* net.c's full-length I/O (MSG_NOSIGNAL, poll with a deadline) with its
 * errors mapped to the client's codes. */
static int net_err(int rc)
{
	return rc == 0 ? 0 : rc == -ETIMEDOUT ? KVP_ETIMEDOUT : KVP_ECONN;
}

int client_sendv(int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ms)
{
	return net_err(net_sendv_all(fd, iov, iovcnt, deadline_ms ? deadline_ms : 1));
}

int client_recv(int fd, void *p, size_t n, uint64_t deadline_ms)
{
	return net_err(net_recv_all(fd, p, n, deadline_ms ? deadline_ms : 1));
}

bool client_sock_alive(int fd)
{
	char c;
	ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

	/* Idle connections have nothing to read: data or EOF both mean the
	 * peer is gone or out of step. */
	return k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* Reads one reply frame header + body (malloc'd, NUL-terminated). */
static int recv_frame(int fd, uint32_t max_body, uint64_t deadline, struct wire_hdr *h,
		      uint8_t **body)
{
	uint8_t hb[WIRE_HDR_SIZE];
	int rc = client_recv(fd, hb, sizeof(hb), deadline);

	*body = NULL;
	if (rc < 0)
		return rc;
	rc = wire_hdr_decode(hb, h, max_body, 0);
	if (rc < 0)
		return rc;
	if (!(h->flags & WIRE_F_REPLY))
		return KVP_EPROTO;
	*body = malloc((size_t)h->body_len + 1);
	if (!*body)
		return KVP_ENOMEM;
	rc = client_recv(fd, *body, h->body_len, deadline);
	if (rc < 0) {
		free(*body);
		*body = NULL;
		return rc;
	}
	return 0;
}

int client_connect(struct kvp *kvp, const char *hostport, uint64_t *epoch, uint64_t deadline)
{
	uint64_t now = net_now_ms();
	char err[256];
	struct wbuf b;
	struct wire_hdr h;
	uint8_t *body;
	int fd, rc, fl;

	if (now >= deadline)
		return KVP_ETIMEDOUT;
	fd = net_connect(hostport, deadline - now, err, sizeof(err));
	if (fd < 0) {
		log_debug("connect %s: %s", hostport, err);
		return fd == -ETIMEDOUT ? KVP_ETIMEDOUT : KVP_ECONN;
	}
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		close(fd);
		return KVP_ECONN;
	}
	wb_init(&b);
	size_t start = wire_begin(&b);

	wb_u16(&b, WIRE_ROLE_CLIENT);
	wb_cstr(&b, kvp->conf.cluster.token);
	wb_cstr(&b, kvp->name);
	wb_cstr(&b, kvp->host_id);
	wire_finish(&b, start, WIRE_OP_HELLO, 0, 0, 0, 0);
	if (b.oom) {
		wb_free(&b);
		close(fd);
		return KVP_ENOMEM;
	}
	struct iovec iov = { b.p, b.len };

	rc = client_sendv(fd, &iov, 1, deadline);
	wb_free(&b);
	if (rc == 0)
		rc = recv_frame(fd, 4096, deadline, &h, &body);
	if (rc == 0) {
		struct rbuf r;

		if (h.opcode != WIRE_OP_HELLO)
			rc = KVP_EPROTO;
		else if (h.status)
			rc = h.status;
		rb_init(&r, body, h.body_len);
		uint64_t e = rb_u64(&r);

		(void)rb_u16(&r);
		if (!rc && !rb_ok(&r))
			rc = KVP_EPROTO;
		if (!rc && epoch)
			*epoch = e;
		free(body);
	}
	if (rc < 0) {
		log_debug("hello %s: %s", hostport, kvp_strerror(rc));
		close(fd);
		return rc;
	}
	return fd;
}

/* ---- master connections ------------------------------------------------ */

static void cond_wait_until(struct kvp *kvp, uint64_t deadline)
{
	struct timespec ts;
	uint64_t now = net_now_ms(), left = deadline > now ? deadline - now : 0;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(left / 1000);
	ts.tv_nsec += (long)(left % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&kvp->cond, &kvp->lock, &ts);
}

static int mc_take(struct kvp *kvp, uint64_t deadline, struct mconn **out, bool *reused)
{
	uint64_t epoch = 0;
	struct mconn *mc;
	int fd;

	pthread_mutex_lock(&kvp->lock);
	for (;;) {
		mc = kvp->midle;
		if (mc) {
			kvp->midle = mc->next;
			pthread_mutex_unlock(&kvp->lock);
			if (client_sock_alive(mc->fd)) {
				*out = mc;
				*reused = true;
				return 0;
			}
			/* Master restarted or dropped us while idle. */
			close(mc->fd);
			free(mc);
			pthread_mutex_lock(&kvp->lock);
			kvp->mconns--;
			continue;
		}
		if (kvp->mconns < kvp->mmax)
			break;
		if (net_now_ms() >= deadline) {
			pthread_mutex_unlock(&kvp->lock);
			return KVP_ETIMEDOUT;
		}
		cond_wait_until(kvp, deadline);
	}
	kvp->mconns++;
	pthread_mutex_unlock(&kvp->lock);

	mc = calloc(1, sizeof(*mc));
	fd = mc ? client_connect(kvp, kvp->conf.cluster.master, &epoch, deadline) : KVP_ENOMEM;
	pthread_mutex_lock(&kvp->lock);
	if (fd < 0) {
		kvp->mconns--;
		pthread_cond_broadcast(&kvp->cond);
		pthread_mutex_unlock(&kvp->lock);
		free(mc);
		return fd;
	}
	if (kvp->epoch_known && epoch != kvp->epoch) {
		/* A restarted master numbers segments anew. */
		log_info("master %s restarted: refreshing segments", kvp->conf.cluster.master);
		kvp->segs_valid = false;
	}
	kvp->epoch = epoch;
	kvp->epoch_known = true;
	pthread_mutex_unlock(&kvp->lock);
	client_count(kvp, master_connects, 1);
	mc->fd = fd;
	mc->next_reqid = 1;
	*out = mc;
	*reused = false;
	return 0;
}

static void mc_give(struct kvp *kvp, struct mconn *mc, bool healthy)
{
	pthread_mutex_lock(&kvp->lock);
	if (healthy) {
		mc->next = kvp->midle;
		kvp->midle = mc;
	} else {
		kvp->mconns--;
	}
	pthread_cond_broadcast(&kvp->cond);
	pthread_mutex_unlock(&kvp->lock);
	if (!healthy) {
		close(mc->fd);
		free(mc);
	}
}

/* One request frame to the master and its reply. */
struct mcall {
	uint16_t op;
	struct wbuf body;
	size_t first;			/* key batches: first item of this frame */
	uint32_t count;			/* ... and how many */
	uint64_t reqid;
	bool got;
	int status;			/* frame-level status of the reply */
	uint8_t *rep;			/* reply body (NUL-terminated), rep_len bytes */
	uint32_t rep_len;
};

static void mcalls_free(struct mcall *c, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		wb_free(&c[i].body);
		free(c[i].rep);
	}
	free(c);
}

/* Sends the frames (MC_WINDOW at a time) and collects their replies. */
static int mc_exchange(struct kvp *kvp, struct mconn *mc, struct mcall *c, size_t n,
		       uint64_t deadline, bool *got_any)
{
	uint8_t hdrs[MC_WINDOW][WIRE_HDR_SIZE];
	struct iovec iov[2 * MC_WINDOW];

	for (size_t base = 0; base < n; base += MC_WINDOW) {
		size_t w = n - base < MC_WINDOW ? n - base : MC_WINDOW;
		int rc;

		for (size_t i = 0; i < w; i++) {
			struct mcall *m = &c[base + i];
			struct wire_hdr h = {
				.magic = WIRE_MAGIC,
				.version = WIRE_VERSION,
				.opcode = m->op,
				.body_len = (uint32_t)m->body.len,
				.reqid = mc->next_reqid++,
			};

			if (m->body.oom)
				return KVP_ENOMEM;
			if (m->body.len > kvp->max_frame)
				return KVP_ETOOBIG;
			m->reqid = h.reqid;
			m->got = false;
			wire_hdr_encode(&h, hdrs[i]);
			iov[2 * i].iov_base = hdrs[i];
			iov[2 * i].iov_len = WIRE_HDR_SIZE;
			iov[2 * i + 1].iov_base = m->body.p;
			iov[2 * i + 1].iov_len = m->body.len;
		}
		rc = client_sendv(mc->fd, iov, (int)(2 * w), deadline);
		if (rc < 0)
			return rc;
		for (size_t k = 0; k < w; k++) {
			struct wire_hdr h;
			uint8_t *body;
			struct mcall *m = NULL;

			rc = recv_frame(mc->fd, kvp->max_frame, deadline, &h, &body);
			if (rc < 0)
				return rc;
			*got_any = true;
			for (size_t i = 0; i < w; i++)
				if (c[base + i].reqid == h.reqid && !c[base + i].got)
					m = &c[base + i];
			if (!m || h.payload_len || (h.opcode != m->op && h.status == 0)) {
				free(body);
				return KVP_EPROTO;
			}
			m->got = true;
			m->status = h.status;
			free(m->rep);
			m->rep = body;
			m->rep_len = h.body_len;
			m->rep[m->rep_len] = 0;
		}
	}
	return 0;
}

/* Runs calls on a master connection. A reused connection that breaks before
 * any reply arrived is retried once on a fresh one (the master restarted
 * while it sat idle). */
static int mc_call(struct kvp *kvp, struct mcall *c, size_t n, uint64_t deadline)
{
	for (int attempt = 0;; attempt++) {
		struct mconn *mc;
		bool reused = false, got_any = false;
		int rc = mc_take(kvp, deadline, &mc, &reused);

		if (rc < 0)
			return rc;
		rc = mc_exchange(kvp, mc, c, n, deadline, &got_any);
		mc_give(kvp, mc, rc == 0);
		if (rc == KVP_ECONN && reused && !got_any && attempt == 0) {
			client_count(kvp, retries, 1);
			continue;
		}
		return rc;
	}
}

/* A single frame with an already-built body. */
static int mc_call1(struct kvp *kvp, struct mcall *c, uint64_t deadline)
{
	int rc = mc_call(kvp, c, 1, deadline);

	if (rc == 0 && c->status)
		rc = c->status;
	return rc;
}

/* Key batches: splits n items into frames of at most max_batch items and
 * about max_frame/2 body bytes. Each frame's body is prefix, u32 count, the
 * items written by enc. */
typedef void (*item_enc)(struct wbuf *b, size_t i, void *arg);

static struct mcall *mb_build(struct kvp *kvp, uint16_t op, const void *prefix, size_t plen,
			      size_t n, item_enc enc, void *arg, size_t *ncalls)
{
	size_t cap = 4, nc = 0, i = 0;
	/* Half the frame, at least 2 KiB (max_frame >= 4 KiB): one more item
	 * (<= 1 KiB key) still fits, so no frame exceeds cluster.max_frame. */
	size_t max_bytes = kvp->max_frame / 2;
	struct mcall *c = calloc(cap, sizeof(*c));

	if (!c)
		return NULL;
	while (i < n) {
		if (nc == cap) {
			struct mcall *p = realloc(c, 2 * cap * sizeof(*c));

			if (!p)
				goto out_free;
			memset(p + cap, 0, cap * sizeof(*p));
			c = p;
			cap *= 2;
		}
		struct mcall *m = &c[nc++];
		size_t count_at;
		uint32_t cnt = 0;

		m->op = op;
		wb_init(&m->body);
		wb_bytes(&m->body, prefix, plen);
		count_at = m->body.len;
		wb_u32(&m->body, 0);
		m->first = i;
		while (i < n && cnt < kvp->max_batch && (cnt == 0 || m->body.len < max_bytes)) {
			enc(&m->body, i, arg);
			i++;
			cnt++;
		}
		if (m->body.oom)
			goto out_free;
		memcpy(m->body.p + count_at, &cnt, 4);
		m->count = cnt;
	}
	*ncalls = nc;
	return c;

out_free:
	mcalls_free(c, cap);
	return NULL;
}

/* Opens a reply of a key batch frame: r reads the items; 0 or the frame's
 * status / KVP_EPROTO. */
static int mb_reply(const struct mcall *m, struct rbuf *r)
{
	if (!m->got)
		return KVP_EPROTO;
	if (m->status)
		return m->status;
	rb_init(r, m->rep, m->rep_len);
	if (rb_u32(r) != m->count || !rb_ok(r))
		return KVP_EPROTO;
	return 0;
}

/* ---- keys --------------------------------------------------------------- */

static int key_check(const char *key, uint32_t *klen)
{
	size_t n;

	if (!key)
		return KVP_EKEY;
	n = strnlen(key, KVP_MAX_KEY + 1);
	if (n == 0 || n > KVP_MAX_KEY)
		return KVP_EKEY;
	*klen = (uint32_t)n;
	return 0;
}

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

/* ---- segment table ------------------------------------------------------ */

static struct client_node *node_find_locked(struct kvp *kvp, const char *endpoint)
{
	struct client_node **pp = &kvp->nodes;

	for (; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->endpoint, endpoint))
			return *pp;
	struct client_node *n = calloc(1, sizeof(*n));

	if (!n)
		return NULL;
	snprintf(n->endpoint, sizeof(n->endpoint), "%s", endpoint);
	n->idx = kvp->nnodes++;
	*pp = n;
	return n;
}

static void seg_free(struct client_seg *s)
{
	xp_local_detach(s);
	rdma_info_free(s->rdma);
	free(s);
}

void client_seg_put(struct kvp *kvp, struct client_seg *seg)
{
	bool last;

	if (!seg)
		return;
	pthread_mutex_lock(&kvp->lock);
	last = --seg->refs == 0;
	pthread_mutex_unlock(&kvp->lock);
	if (last)
		seg_free(seg);
}

static int seg_cmp(const void *a, const void *b)
{
	const struct client_seg *x = *(struct client_seg *const *)a;
	const struct client_seg *y = *(struct client_seg *const *)b;

	return x->id < y->id ? -1 : x->id > y->id;
}

/* Parses a SEGMENTS reply into unattached entries. */
static int segs_parse(const struct mcall *m, struct client_seg ***out, size_t *nout)
{
	struct client_seg **v;
	struct rbuf r;
	uint32_t n;

	if (m->status)
		return m->status;
	rb_init(&r, m->rep, m->rep_len);
	n = rb_count(&r, 85);
	if (!rb_ok(&r))
		return KVP_EPROTO;
	v = calloc(n ? n : 1, sizeof(*v));
	if (!v)
		return KVP_ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct client_seg *s = calloc(1, sizeof(*s));
		size_t bl;

		if (!s) {
			for (uint32_t j = 0; j < i; j++)
				seg_free(v[j]);
			free(v);
			return KVP_ENOMEM;
		}
		v[i] = s;
		s->id = rb_u32(&r);
		rb_cstr(&r, s->node_name, sizeof(s->node_name));
		rb_cstr(&r, s->host_id, sizeof(s->host_id));
		rb_cstr(&r, s->shm_path, sizeof(s->shm_path));
		s->shm_dev = rb_u64(&r);
		s->shm_ino = rb_u64(&r);
		s->seg_size = rb_u64(&r);
		s->seg_uuid = rb_u64(&r);
		rb_cstr(&r, s->endpoint, sizeof(s->endpoint));
		const uint8_t *ri = rb_blob(&r, &bl);

		if (ri && bl)
			xp_rdma_seg_info(ri, bl, &s->rdma, &s->rdma_hash);
		s->draining = rb_u8(&r);
		s->used = rb_u64(&r);
		s->objects = rb_u64(&r);
		s->spill_capacity = rb_u64(&r);
		s->spill_used = rb_u64(&r);
		s->numa_node = rb_i32(&r);
	}
	if (!rb_ok(&r)) {
		for (uint32_t i = 0; i < n; i++)
			seg_free(v[i]);
		free(v);
		return KVP_EPROTO;
	}
	*out = v;
	*nout = n;
	return 0;
}

static bool seg_same(const struct client_seg *a, const struct client_seg *b)
{
	return a->id == b->id && a->seg_uuid == b->seg_uuid && a->shm_dev == b->shm_dev &&
	       a->shm_ino == b->shm_ino && a->seg_size == b->seg_size &&
	       !strcmp(a->shm_path, b->shm_path) && !strcmp(a->host_id, b->host_id) &&
	       !strcmp(a->endpoint, b->endpoint) && a->rdma_hash == b->rdma_hash;
}

static struct client_seg *seg_find_locked(struct kvp *kvp, uint32_t id)
{
	size_t lo = 0, hi = kvp->nsegs;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (kvp->segs[mid]->id == id)
			return kvp->segs[mid];
		if (kvp->segs[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* Fetches SEGMENTS and installs the new table, keeping the entries (and
 * mappings) of segments that did not change. seen_gen: the table generation
 * the caller found lacking; a refresh that happened meanwhile suffices. */
static int seg_refresh(struct kvp *kvp, uint64_t seen_gen, uint64_t deadline)
{
	struct client_seg **v = NULL, **old = NULL;
	size_t n = 0, nold = 0;
	struct mcall m = { .op = WIRE_OP_SEGMENTS };
	bool *fresh = NULL;
	int rc;

	pthread_mutex_lock(&kvp->refresh_lock);
	pthread_mutex_lock(&kvp->lock);
	if (kvp->segs_valid && kvp->segs_gen != seen_gen) {
		pthread_mutex_unlock(&kvp->lock);
		pthread_mutex_unlock(&kvp->refresh_lock);
		return 0;
	}
	pthread_mutex_unlock(&kvp->lock);

	wb_init(&m.body);
	rc = mc_call1(kvp, &m, deadline);
	if (rc == 0)
		rc = segs_parse(&m, &v, &n);
	wb_free(&m.body);
	free(m.rep);
	if (rc < 0)
		goto out_unlock;
	fresh = calloc(n ? n : 1, sizeof(*fresh));
	if (!fresh) {
		for (size_t i = 0; i < n; i++)
			free(v[i]);
		free(v);
		rc = KVP_ENOMEM;
		goto out_unlock;
	}
	qsort(v, n, sizeof(*v), seg_cmp);

	pthread_mutex_lock(&kvp->lock);
	for (size_t i = 0; i < n; i++) {
		struct client_seg *o = seg_find_locked(kvp, v[i]->id);

		if (o && seg_same(o, v[i])) {
			free(v[i]);
			v[i] = o;
			o->refs++;
			continue;
		}
		v[i]->node = node_find_locked(kvp, v[i]->endpoint);
		v[i]->refs = 1;
		fresh[i] = true;
	}
	pthread_mutex_unlock(&kvp->lock);

	/* Mapping takes syscalls: outside the lock, only for new entries. */
	for (size_t i = 0; i < n; i++)
		if (fresh[i])
			xp_local_attach(kvp, v[i]);

	pthread_mutex_lock(&kvp->lock);
	old = kvp->segs;
	nold = kvp->nsegs;
	kvp->segs = v;
	kvp->nsegs = n;
	kvp->segs_valid = true;
	kvp->segs_gen++;
	pthread_mutex_unlock(&kvp->lock);
	for (size_t i = 0; i < nold; i++)
		client_seg_put(kvp, old[i]);
	free(old);
	client_count(kvp, segment_refreshes, 1);
	/* An entry that failed to find its node would be useless for TCP
	 * but still fine for local; nothing more to do. */
out_unlock:
	free(fresh);
	pthread_mutex_unlock(&kvp->refresh_lock);
	return rc;
}

/* Looks a segment up, refreshing the table at most once per *refreshed. A
 * reference the caller drops with client_seg_put; NULL when unknown. */
static struct client_seg *seg_get(struct kvp *kvp, uint32_t id, bool *refreshed,
				  uint64_t deadline)
{
	/* Bounded: other threads may invalidate the table again meanwhile. */
	for (int tries = 0; tries < 4; tries++) {
		struct client_seg *s = NULL;
		uint64_t gen;
		bool valid;

		pthread_mutex_lock(&kvp->lock);
		valid = kvp->segs_valid;
		gen = kvp->segs_gen;
		if (valid) {
			s = seg_find_locked(kvp, id);
			if (s)
				s->refs++;
		}
		pthread_mutex_unlock(&kvp->lock);
		if (s)
			return s;
		if (valid && *refreshed)
			return NULL;
		if (!valid || !*refreshed) {
			*refreshed = true;
			if (seg_refresh(kvp, gen, deadline) < 0)
				return NULL;
		}
	}
	return NULL;
}

static void seg_invalidate(struct kvp *kvp)
{
	pthread_mutex_lock(&kvp->lock);
	kvp->segs_valid = false;
	pthread_mutex_unlock(&kvp->lock);
}

/* True if some known segment can be written by memcpy (a put may then ask
 * the master for a segment on this host first). */
static bool have_local_rw(struct kvp *kvp)
{
	bool yes = false;

	if (kvp->proto == CLIENT_TCP || kvp->proto == CLIENT_RDMA)
		return false;
	pthread_mutex_lock(&kvp->lock);
	for (size_t i = 0; i < kvp->nsegs && !yes; i++)
		yes = kvp->segs[i]->local_rw;
	pthread_mutex_unlock(&kvp->lock);
	return yes;
}

/* ---- transfer runs ------------------------------------------------------ */

static const struct xport_ops *const xports[XP_NKIND] = {
	[XP_LOCAL] = &xp_local_ops,
	[XP_TCP] = &xp_tcp_ops,
	[XP_RDMA] = &xp_rdma_ops,
};

struct run {
	struct kvp *kvp;
	uint64_t deadline;
	void *st[XP_NKIND];
	uint64_t adds;
	struct xp_op *failed;		/* could not be queued (no memory) */
};

static void run_add(struct run *r, struct xp_op *op)
{
	r->adds++;
	if (!r->st[op->kind])
		r->st[op->kind] = xports[op->kind]->begin(r->kvp, r->deadline);
	if (!r->st[op->kind]) {
		op->status = KVP_ENOMEM;
		op->next = r->failed;
		r->failed = op;
		return;
	}
	xports[op->kind]->add(r->st[op->kind], op);
}

/* Drives every transport of the run until nothing is pending: network
 * transfers are pushed and polled between chunks of local copying, and
 * block in poll() only once no local work is waiting. */
static void run_wait(struct run *r)
{
	for (;;) {
		uint64_t adds = r->adds;
		size_t pend = 0;
		bool local_busy = false;

		while (r->failed) {
			struct xp_op *op = r->failed;

			r->failed = op->next;
			op->next = NULL;
			op->done(op);
		}
		if (r->st[XP_LOCAL]) {
			size_t k = xports[XP_LOCAL]->progress(r->st[XP_LOCAL], false);

			pend += k;
			local_busy = k > 0;
		}
		for (int k = XP_LOCAL + 1; k < XP_NKIND; k++)
			if (r->st[k])
				pend += xports[k]->progress(r->st[k], !local_busy);
		if (!pend && adds == r->adds && !r->failed)
			break;
	}
	for (int k = 0; k < XP_NKIND; k++) {
		if (r->st[k])
			xports[k]->end(r->st[k]);
		r->st[k] = NULL;
	}
}

/* A device pointer in a process whose CUDA runtime we could not load
 * (cuda.c recognised it through the driver): refused, never memcpy'd. */
static int device_refused(const void *p)
{
	log_err("kvpool: %p is GPU memory but CUDA is not usable here (%s)", p, cuda_status());
	return KVP_ENOTSUP;
}

static bool xport_error(int rc)
{
	return rc == KVP_ECONN || rc == KVP_EIO || rc == KVP_ENOSEG || rc == KVP_ESTALE;
}

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

	pthread_mutex_init(&kvp->lock, NULL);
	pthread_mutex_init(&kvp->refresh_lock, NULL);
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
	rc = seg_refresh(kvp, 0, client_deadline(kvp));
	if (rc < 0)
		goto out_close;
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
	while (kvp->midle) {
		struct mconn *mc = kvp->midle;

		kvp->midle = mc->next;
		close(mc->fd);
		free(mc);
	}
	xp_tcp_close_pools(kvp);
	xp_rdma_close(kvp);
	for (size_t i = 0; i < kvp->nsegs; i++)
		client_seg_put(kvp, kvp->segs[i]);
	free(kvp->segs);
	while (kvp->nodes) {
		struct client_node *n = kvp->nodes;

		kvp->nodes = n->next;
		free(n);
	}
	while (kvp->bufs) {
		struct regbuf *b = kvp->bufs;

		kvp->bufs = b->next;
		free(b);
	}
	pthread_cond_destroy(&kvp->cond);
	pthread_mutex_destroy(&kvp->refresh_lock);
	pthread_mutex_destroy(&kvp->lock);
	free(kvp);
}

void kvp_free(void *buf)
{
	free(buf);
}

/* ---- put ---------------------------------------------------------------- */

struct put_item {
	const char *key;
	uint32_t klen;
	const void *buf;
	uint64_t len;
	int status;			/* result so far */
	bool started;			/* PUT_START granted: needs PUT_END or PUT_REVOKE */
	bool retry;			/* failed on a transport error: try once more */
	uint64_t gen, csum;
	bool valid;			/* passed argument checks */
	uint8_t nrep;
	int left;			/* replica writes outstanding */
	uint32_t seg_id[KVP_MAX_REPLICAS];
	struct xp_op *ops;		/* nrep */
	struct run *run;
	bool dev;			/* buf is CUDA device memory */
	bool stage_pinned;
	void *stage;			/* host copy of a device buf (remote paths) */
};

struct put_ctx {
	uint64_t deadline;		/* of the whole call */
	struct put_item *items;
	size_t *todo;			/* items in this round */
	size_t ntodo;
};

static void put_enc_start(struct wbuf *b, size_t i, void *arg)
{
	struct put_ctx *pc = arg;
	struct put_item *it = &pc->items[pc->todo[i]];

	wb_str(b, it->key, it->klen);
	wb_u64(b, it->len);
}

static void put_enc_end(struct wbuf *b, size_t i, void *arg)
{
	struct put_ctx *pc = arg;
	struct put_item *it = &pc->items[pc->todo[i]];

	wb_str(b, it->key, it->klen);
	wb_u64(b, it->gen);
	wb_u64(b, it->csum);
}

static void put_enc_revoke(struct wbuf *b, size_t i, void *arg)
{
	struct put_ctx *pc = arg;
	struct put_item *it = &pc->items[pc->todo[i]];

	wb_str(b, it->key, it->klen);
	wb_u64(b, it->gen);
}

static void put_fail(struct put_item *it, int rc)
{
	if (!it->status)
		it->status = rc;
}

static void put_op_done(struct xp_op *op)
{
	struct put_item *it = op->arg;

	if (op->status)
		put_fail(it, op->status);
	it->left--;
	if (!(op->flags & XP_F_CSUM))
		return;
	/* The checksum was computed while copying to the first local replica;
	 * the other replicas' headers can now be written. */
	it->csum = op->h.value_checksum;
	for (uint8_t r = 0; r < it->nrep; r++) {
		struct xp_op *o = &it->ops[r];

		if (o == op)
			continue;
		if (it->status) {
			it->left--;
			continue;
		}
		o->h.value_checksum = it->csum;
		run_add(it->run, o);
	}
}

/* One PUT_START reply item, decoded and checked (untrusted bytes). */
struct put_reply {
	int status;
	uint64_t gen;
	uint8_t nrep;
	struct {
		uint32_t id;
		uint64_t off, alloc_len;
		uint8_t grant[WIRE_GRANT_LEN];
	} rep[KVP_MAX_REPLICAS];
};

/* 0 (p filled), the item's own error status, or KVP_EPROTO (malformed: a
 * status out of range, no replica or more than asked for, a short frame). */
static int put_reply_item(struct rbuf *r, struct put_reply *p)
{
	memset(p, 0, sizeof(*p));
	p->status = rb_i32(r);
	p->gen = rb_u64(r);
	uint8_t nrep = rb_u8(r);

	for (uint8_t i = 0; i < nrep; i++) {
		uint32_t id = rb_u32(r);
		uint64_t off = rb_u64(r), alen = rb_u64(r);
		const uint8_t *g = rb_take(r, WIRE_GRANT_LEN);

		if (!g || p->nrep >= KVP_MAX_REPLICAS)
			continue;
		p->rep[p->nrep].id = id;
		p->rep[p->nrep].off = off;
		p->rep[p->nrep].alloc_len = alen;
		memcpy(p->rep[p->nrep].grant, g, WIRE_GRANT_LEN);
		p->nrep++;
	}
	if (!rb_ok(r) || p->status > 0 || p->status < KVP_ERR_MIN || nrep > KVP_MAX_REPLICAS)
		return KVP_EPROTO;
	if (p->status)
		return p->status;
	return p->nrep ? 0 : KVP_EPROTO;
}

/* Host memory for a device buffer's bytes on the remote paths: pinned when
 * CUDA can (DMA), else plain. */
static void *stage_alloc(size_t n, bool *pinned)
{
	void *p = NULL;

	*pinned = cuda_malloc_host(&p, n ? n : 1) == 0;
	return *pinned ? p : malloc(n ? n : 1);
}

static void stage_free(void *p, bool pinned)
{
	if (p && pinned)
		cuda_free_host(p);
	else
		free(p);
}

/* A put of device memory: when every replica is local the value goes
 * device -> segment by cudaMemcpy (XP_F_DEVICE); otherwise it is copied
 * once to host staging and every replica is written from there. */
static int put_device(struct put_item *it)
{
	bool all_local = true;

	for (uint8_t i = 0; i < it->nrep; i++)
		all_local &= it->ops[i].kind == XP_LOCAL;
	if (all_local) {
		for (uint8_t i = 0; i < it->nrep; i++)
			it->ops[i].flags |= XP_F_DEVICE;
		return 0;
	}
	if (!it->stage) {
		it->stage = stage_alloc(it->len, &it->stage_pinned);
		if (!it->stage) {
			put_fail(it, KVP_ENOMEM);
			return -1;
		}
		if (cuda_memcpy(it->stage, it->buf, it->len) < 0) {
			put_fail(it, KVP_EIO);
			return -1;
		}
	}
	for (uint8_t i = 0; i < it->nrep; i++)
		it->ops[i].src = it->stage;
	return 0;
}

/* Parses PUT_START replies and queues every replica write. */
static int put_plan(struct kvp *kvp, struct put_ctx *pc, struct mcall *c, size_t nc,
		    struct run *run)
{
	uint64_t now_ns = net_realtime_ns();
	bool refreshed = false;

	for (size_t f = 0; f < nc; f++) {
		struct rbuf r;
		int frc = mb_reply(&c[f], &r);

		for (uint32_t k = 0; k < c[f].count; k++) {
			struct put_item *it = &pc->items[pc->todo[c[f].first + k]];
			struct put_reply pr;
			int st = frc;

			if (!st && (st = put_reply_item(&r, &pr)) == KVP_EPROTO)
				frc = st;	/* the rest of the frame cannot be trusted */
			it->status = 0;
			it->nrep = 0;
			it->left = 0;
			it->run = run;
			free(it->ops);
			it->ops = NULL;
			/* Only a granted item needs PUT_END or PUT_REVOKE. One
			 * whose reply did not parse may hold a grant we cannot
			 * name: put_timeout reclaims it. */
			it->started = st == 0;
			if (st) {
				it->status = st;
				continue;
			}
			it->gen = pr.gen;
			it->ops = calloc(pr.nrep, sizeof(*it->ops));
			if (!it->ops) {
				it->status = KVP_ENOMEM;
				continue;
			}
			for (uint8_t i = 0; i < pr.nrep; i++) {
				struct xp_op *o = &it->ops[i];

				o->dir = XP_WRITE;
				o->off = pr.rep[i].off;
				o->alloc_len = pr.rep[i].alloc_len;
				memcpy(o->grant, pr.rep[i].grant, WIRE_GRANT_LEN);
				it->seg_id[i] = pr.rep[i].id;
				it->nrep++;
			}
		}
	}

	/* Resolve segments and choose each replica's path. */
	for (size_t t = 0; t < pc->ntodo; t++) {
		struct put_item *it = &pc->items[pc->todo[t]];
		int first_local = -1;

		if (!it->started || it->status)
			continue;
		for (uint8_t i = 0; i < it->nrep; i++) {
			struct xp_op *o = &it->ops[i];
			struct client_seg *s = seg_get(kvp, it->seg_id[i], &refreshed, pc->deadline);

			o->seg = s;
			if (!s) {
				put_fail(it, KVP_ENOSEG);
				continue;
			}
			int kind = xp_path_choose(kvp->proto, s->local_rw, xp_rdma_seg_ok(kvp, s),
						  true, KVP_TIER_MEM);

			if (kind < 0)
				put_fail(it, KVP_ENOTSUP);
			o->kind = kind < 0 ? XP_TCP : (enum xp_kind)kind;
			if (kind == XP_LOCAL && first_local < 0)
				first_local = i;
			o->tier = KVP_TIER_MEM;
			o->h.key_len = it->klen;
			o->h.value_len = it->len;
			o->h.generation = it->gen;
			o->h.seg_uuid = s->seg_uuid;
			o->h.put_time_ns = now_ns;
			o->key = (const uint8_t *)it->key;
			o->src = it->buf;
			o->done = put_op_done;
			o->arg = it;
		}
		if (it->status)
			continue;
		if (it->dev && put_device(it) < 0)
			continue;
		it->left = it->nrep;
		if (first_local >= 0) {
			it->ops[first_local].flags |= XP_F_CSUM;
			run_add(run, &it->ops[first_local]);
		} else {
			it->csum = ext_checksum(it->ops[0].src, it->len);
			for (uint8_t i = 0; i < it->nrep; i++) {
				it->ops[i].h.value_checksum = it->csum;
				run_add(run, &it->ops[i]);
			}
		}
	}
	return 0;
}

/* PUT_END for the items whose replicas are all written, PUT_REVOKE for the
 * others that were granted: one round trip. */
static int put_finish(struct kvp *kvp, struct put_ctx *pc)
{
	size_t *ends = malloc((pc->ntodo + 1) * sizeof(*ends));
	size_t *revs = malloc((pc->ntodo + 1) * sizeof(*revs));
	size_t ne = 0, nr = 0, nce = 0, ncr = 0;
	struct mcall *c = NULL, *cr = NULL;
	struct put_ctx pe = *pc, pr = *pc;
	int rc = KVP_ENOMEM;

	if (!ends || !revs)
		goto out;
	for (size_t t = 0; t < pc->ntodo; t++) {
		struct put_item *it = &pc->items[pc->todo[t]];

		if (!it->started)
			continue;
		if (it->status)
			revs[nr++] = pc->todo[t];
		else
			ends[ne++] = pc->todo[t];
	}
	rc = 0;
	if (!ne && !nr)
		goto out;
	pe.todo = ends;
	pe.ntodo = ne;
	pr.todo = revs;
	pr.ntodo = nr;
	rc = KVP_ENOMEM;
	if (ne && !(c = mb_build(kvp, WIRE_OP_PUT_END, NULL, 0, ne, put_enc_end, &pe, &nce)))
		goto out;
	if (nr && !(cr = mb_build(kvp, WIRE_OP_PUT_REVOKE, NULL, 0, nr, put_enc_revoke, &pr, &ncr)))
		goto out;
	if (ncr) {
		/* One array, so both go out pipelined on one connection. */
		struct mcall *all = realloc(c, (nce + ncr) * sizeof(*all));

		if (!all)
			goto out;
		memcpy(all + nce, cr, ncr * sizeof(*all));
		free(cr);
		cr = NULL;
		c = all;
		nce += ncr;
		ncr = 0;
	}
	rc = mc_call(kvp, c, nce, pc->deadline);
	for (size_t f = 0; f < nce && c[f].op == WIRE_OP_PUT_END; f++) {
		struct rbuf r;
		int frc = rc ? rc : mb_reply(&c[f], &r);

		for (uint32_t k = 0; k < c[f].count; k++) {
			struct put_item *it = &pc->items[ends[c[f].first + k]];
			int st = frc ? frc : rb_i32(&r);

			if (!frc && (!rb_ok(&r) || st > 0 || st < KVP_ERR_MIN))
				st = frc = KVP_EPROTO;
			it->status = st;
			if (!st)
				client_count(kvp, puts, 1);
		}
	}
	/* A lost PUT_REVOKE is harmless: put_timeout reclaims the extents. */
	rc = 0;
out:
	for (size_t t = 0; t < pc->ntodo; t++)
		pc->items[pc->todo[t]].started = false;
	if (c)
		mcalls_free(c, nce);
	if (cr)
		mcalls_free(cr, ncr);
	free(ends);
	free(revs);
	return rc;
}

static void put_release(struct kvp *kvp, struct put_ctx *pc)
{
	for (size_t t = 0; t < pc->ntodo; t++) {
		struct put_item *it = &pc->items[pc->todo[t]];

		for (uint8_t i = 0; it->ops && i < it->nrep; i++) {
			client_seg_put(kvp, it->ops[i].seg);
			it->ops[i].seg = NULL;
		}
	}
}

static int put_round(struct kvp *kvp, struct put_ctx *pc, uint8_t replicas)
{
	uint8_t prefix[5];
	uint32_t pref = have_local_rw(kvp) ? WIRE_SEG_LOCAL : 0;
	struct run run = { .kvp = kvp, .deadline = pc->deadline };
	struct mcall *c;
	size_t nc = 0;
	int rc;

	prefix[0] = replicas;
	memcpy(prefix + 1, &pref, 4);
	c = mb_build(kvp, WIRE_OP_PUT_START, prefix, sizeof(prefix), pc->ntodo, put_enc_start,
		     pc, &nc);
	if (!c)
		return KVP_ENOMEM;
	rc = mc_call(kvp, c, nc, pc->deadline);
	if (rc < 0) {
		mcalls_free(c, nc);
		return rc;
	}
	put_plan(kvp, pc, c, nc, &run);
	mcalls_free(c, nc);
	run_wait(&run);
	rc = put_finish(kvp, pc);
	put_release(kvp, pc);
	return rc;
}

int kvp_batch_put_from(struct kvp *kvp, size_t n, const char *const *keys,
		       const void *const *bufs, const size_t *lens, int *results)
{
	struct put_ctx pc = { .deadline = kvp ? client_deadline(kvp) : 0 };
	uint8_t replicas;
	int rc = 0;

	if (!kvp || (n && (!keys || !bufs || !lens || !results)))
		return KVP_EINVAL;
	if (!n)
		return 0;
	replicas = kvp->conf.client.replicas < 1 ? 1 :
		kvp->conf.client.replicas > KVP_MAX_REPLICAS ? KVP_MAX_REPLICAS :
		(uint8_t)kvp->conf.client.replicas;
	pc.items = calloc(n, sizeof(*pc.items));
	pc.todo = calloc(n, sizeof(*pc.todo));
	if (!pc.items || !pc.todo) {
		rc = KVP_ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct put_item *it = &pc.items[i];

		it->key = keys[i];
		it->buf = bufs[i];
		it->len = lens[i];
		it->status = key_check(keys[i], &it->klen);
		if (it->status)
			continue;
		if (!bufs[i] || !lens[i])
			it->status = KVP_EINVAL;
		else if (lens[i] > kvp->conf.cluster.max_object_size)
			it->status = KVP_ETOOBIG;
		else if ((it->dev = cuda_is_device(bufs[i])) && !cuda_available())
			it->status = device_refused(bufs[i]);
		else
			pc.todo[pc.ntodo++] = i;
		it->valid = !it->status;
	}
	for (int attempt = 0; attempt < 2 && pc.ntodo; attempt++) {
		size_t keep = 0;

		rc = put_round(kvp, &pc, replicas);
		if (rc < 0) {
			/* After a first round, the batch as a whole was tried. */
			for (size_t t = 0; attempt && t < pc.ntodo; t++)
				pc.items[pc.todo[t]].status = rc;
			if (attempt)
				rc = 0;
			break;
		}
		for (size_t t = 0; t < pc.ntodo; t++) {
			struct put_item *it = &pc.items[pc.todo[t]];

			if (xport_error(it->status))
				pc.todo[keep++] = pc.todo[t];
		}
		if (!keep || attempt)
			break;
		/* A node restarted or moved: learn the new table, try once more. */
		pc.ntodo = keep;
		client_count(kvp, retries, keep);
		seg_invalidate(kvp);
	}
out:
	for (size_t i = 0; i < n; i++) {
		if (!pc.items)
			results[i] = rc;
		else if (pc.items[i].valid && rc < 0)
			results[i] = rc;
		else
			results[i] = pc.items[i].status;
		if (pc.items) {
			free(pc.items[i].ops);
			stage_free(pc.items[i].stage, pc.items[i].stage_pinned);
		}
	}
	free(pc.items);
	free(pc.todo);
	return rc < 0 ? rc : 0;
}

int kvp_put_from(struct kvp *kvp, const char *key, const void *buf, size_t len)
{
	int res, rc = kvp_batch_put_from(kvp, 1, &key, &buf, &len, &res);

	return rc < 0 ? rc : res;
}

int kvp_put(struct kvp *kvp, const char *key, const void *buf, size_t len)
{
	return kvp_put_from(kvp, key, buf, len);
}

/* ---- get ---------------------------------------------------------------- */

#define GET_INFLIGHT INT64_MIN	/* result while a read is outstanding */

struct get_rep {
	uint32_t id;
	uint8_t tier;
	uint64_t off, alloc_len;
	struct client_seg *seg;
	enum xp_kind kind;
};

struct get_item {
	const char *key;
	uint32_t klen;
	void *dst;
	uint64_t cap;
	bool alloc;			/* kvp_get: dst is ours (malloc) */
	int64_t result;
	bool retry;
	uint64_t vlen, gen, csum, lease_end;
	uint8_t nrep, next;
	struct get_rep rep[KVP_MAX_REPLICAS];
	uint8_t order[KVP_MAX_REPLICAS];
	uint8_t norder;
	int xerr;			/* last transport error */
	bool mismatch, lease_lost;
	struct xp_op op;
	struct run *run;
	struct kvp *kvp;
	uint8_t *hdr;			/* EXT_HDR_SIZE + klen */
	bool dev;			/* dst is CUDA device memory */
	bool stage_pinned;
	void *stage;			/* host landing place for remote reads of dev */
};

struct get_ctx {
	uint64_t deadline;		/* of the whole call */
	struct get_item *items;
	size_t *todo;
	size_t ntodo;
};

static void get_enc(struct wbuf *b, size_t i, void *arg)
{
	struct get_ctx *gc = arg;
	struct get_item *it = &gc->items[gc->todo[i]];

	wb_str(b, it->key, it->klen);
}

/* The extent read must be the object the master named: header intact, same
 * key, length, generation, segment, and the value hashes to the checksum. */
static bool get_verify(const struct get_item *it, const struct xp_op *op)
{
	const struct get_rep *rp = &it->rep[it->order[it->next - 1]];
	struct ext_hdr h;
	const uint8_t *k;

	if (ld32(op->hdr + 8) != it->klen)
		return false;
	if (ext_decode(op->hdr, op->alloc_len, 0, &h, &k) != 0)
		return false;
	if (h.key_len != it->klen || memcmp(k, it->key, it->klen) != 0)
		return false;
	if (h.value_len != it->vlen || h.generation != it->gen || h.value_checksum != it->csum)
		return false;
	if (rp->tier == KVP_TIER_MEM && h.seg_uuid != rp->seg->seg_uuid)
		return false;
	return op->csum == it->csum;
}

static bool get_next(struct get_item *it);

static void get_op_done(struct xp_op *op)
{
	struct get_item *it = op->arg;
	struct kvp *kvp = it->kvp;

	if (op->status == 0) {
		if (get_verify(it, op)) {
			/* Verified in host memory; only now onto the GPU. */
			if (it->dev && op->dst == it->stage &&
			    cuda_memcpy(it->dst, it->stage, it->vlen) < 0) {
				it->result = KVP_EIO;
				return;
			}
			it->result = (int64_t)it->vlen;
			client_count(kvp, gets, 1);
			return;
		}
		client_count(kvp, checksum_mismatches, 1);
		it->mismatch = true;
		if (net_now_ms() > it->lease_end)
			it->lease_lost = true;
	} else {
		it->xerr = op->status;
	}
	if (get_next(it)) {
		client_count(kvp, retries, 1);
		return;
	}
	if (it->lease_lost)
		it->result = KVP_ELEASE;
	else if (it->xerr)
		it->result = it->xerr;
	else
		it->result = KVP_ECHECKSUM;
}

/* Queues a read of the next replica in order; false when none is left. */
static bool get_next(struct get_item *it)
{
	struct xp_op *op = &it->op;

	if (it->next >= it->norder)
		return false;
	struct get_rep *rp = &it->rep[it->order[it->next++]];

	memset(op, 0, sizeof(*op));
	op->dir = XP_READ;
	op->kind = rp->kind;
	op->seg = rp->seg;
	op->tier = rp->tier;
	op->off = rp->off;
	op->alloc_len = rp->alloc_len;
	op->hdr = it->hdr;
	op->hdr_len = EXT_HDR_SIZE + it->klen;
	op->dst = it->dst;
	if (it->dev && rp->kind == XP_LOCAL) {
		op->flags |= XP_F_DEVICE;
	} else if (it->dev) {
		if (!it->stage)
			it->stage = stage_alloc(it->vlen, &it->stage_pinned);
		if (!it->stage) {
			it->xerr = KVP_ENOMEM;
			return false;
		}
		op->dst = it->stage;
	}
	op->len = it->vlen;
	op->done = get_op_done;
	op->arg = it;
	run_add(it->run, op);
	return true;
}

/* Orders an item's replicas: memory replicas mapped on this host first,
 * then memory over RDMA, then memory over TCP, then disk replicas (read by
 * their node); xp_path_choose() says which path each may take. */
static void get_order(struct kvp *kvp, struct get_item *it)
{
	int kind[KVP_MAX_REPLICAS];

	for (uint8_t i = 0; i < it->nrep; i++) {
		struct get_rep *rp = &it->rep[i];

		kind[i] = !rp->seg ? -1 :
			  xp_path_choose(kvp->proto, rp->seg->local, xp_rdma_seg_ok(kvp, rp->seg),
					 true, rp->tier);
	}
	it->norder = 0;
	for (int pass = 0; pass < 4; pass++) {
		for (uint8_t i = 0; i < it->nrep; i++) {
			struct get_rep *rp = &it->rep[i];
			bool mem = rp->tier == KVP_TIER_MEM;

			if ((pass == 0 && kind[i] == XP_LOCAL) ||
			    (pass == 1 && kind[i] == XP_RDMA) ||
			    (pass == 2 && kind[i] == XP_TCP && mem) ||
			    (pass == 3 && kind[i] == XP_TCP && !mem)) {
				rp->kind = (enum xp_kind)kind[i];
				it->order[it->norder++] = i;
			}
		}
	}
}

/* One GET reply item, decoded and checked (untrusted bytes). */
struct get_reply {
	int status;
	uint64_t vlen, gen, csum, lease_ms;
	uint8_t nrep;
	struct get_rep rep[KVP_MAX_REPLICAS];
};

/* 0 (g filled), the item's own error status, or KVP_EPROTO when the bytes
 * are malformed (a status out of range, a length the pool cannot hold, no
 * replica, or a short frame). */
static int get_reply_item(struct rbuf *r, uint64_t max_value, struct get_reply *g)
{
	memset(g, 0, sizeof(*g));
	g->status = rb_i32(r);
	g->vlen = rb_u64(r);
	g->gen = rb_u64(r);
	g->csum = rb_u64(r);
	g->lease_ms = rb_u64(r);
	uint8_t nrep = rb_u8(r);

	for (uint8_t i = 0; i < nrep; i++) {
		struct get_rep rp = { 0 };

		rp.id = rb_u32(r);
		rp.tier = rb_u8(r);
		rp.off = rb_u64(r);
		rp.alloc_len = rb_u64(r);
		if (g->nrep < KVP_MAX_REPLICAS)
			g->rep[g->nrep++] = rp;
	}
	if (!rb_ok(r) || g->status > 0 || g->status < KVP_ERR_MIN)
		return KVP_EPROTO;
	if (g->status)
		return g->status;
	if (!g->nrep || !g->vlen || g->vlen > max_value || g->vlen > INT64_MAX)
		return KVP_EPROTO;
	return 0;
}

static void get_plan(struct kvp *kvp, struct get_ctx *gc, struct mcall *c, size_t nc,
		     struct run *run)
{
	bool refreshed = false;
	uint64_t now = net_now_ms();

	for (size_t f = 0; f < nc; f++) {
		struct rbuf r;
		int frc = mb_reply(&c[f], &r);

		for (uint32_t k = 0; k < c[f].count; k++) {
			struct get_item *it = &gc->items[gc->todo[c[f].first + k]];
			struct get_reply g;
			int st = frc;

			if (!st && (st = get_reply_item(&r, kvp->conf.cluster.max_object_size, &g)) ==
				   KVP_EPROTO)
				frc = st;	/* the rest of the frame cannot be trusted */
			it->nrep = 0;
			if (!st) {
				it->vlen = g.vlen;
				it->gen = g.gen;
				it->csum = g.csum;
				it->lease_end = now + (g.lease_ms > UINT32_MAX ? UINT32_MAX : g.lease_ms);
				it->nrep = g.nrep;
				memcpy(it->rep, g.rep, sizeof(g.rep));
			}
			it->result = st;
			it->run = run;
			it->kvp = kvp;
			it->next = it->norder = 0;
			it->xerr = 0;
			it->mismatch = it->lease_lost = false;
			if (st)
				continue;
			if (it->alloc) {
				free(it->dst);
				it->dst = malloc(it->vlen);
				if (!it->dst) {
					it->result = KVP_ENOMEM;
					continue;
				}
			} else if (it->vlen > it->cap) {
				it->result = KVP_ETOOBIG;
				continue;
			}
		}
	}
	for (size_t t = 0; t < gc->ntodo; t++) {
		struct get_item *it = &gc->items[gc->todo[t]];

		if (it->result)
			continue;
		for (uint8_t i = 0; i < it->nrep; i++)
			it->rep[i].seg = seg_get(kvp, it->rep[i].id, &refreshed, gc->deadline);
		get_order(kvp, it);
		if (!it->norder) {
			bool known = false;

			for (uint8_t i = 0; i < it->nrep; i++)
				known |= it->rep[i].seg != NULL;
			it->result = known ? KVP_ENOTSUP : KVP_ENOSEG;
			continue;
		}
		it->result = GET_INFLIGHT;
		get_next(it);
	}
}

static void get_release(struct kvp *kvp, struct get_ctx *gc)
{
	for (size_t t = 0; t < gc->ntodo; t++) {
		struct get_item *it = &gc->items[gc->todo[t]];

		for (uint8_t i = 0; i < it->nrep; i++) {
			client_seg_put(kvp, it->rep[i].seg);
			it->rep[i].seg = NULL;
		}
	}
}

static int get_batch(struct kvp *kvp, struct get_ctx *gc)
{
	int rc = 0;

	for (int attempt = 0; attempt < 2 && gc->ntodo; attempt++) {
		struct run run = { .kvp = kvp, .deadline = gc->deadline };
		struct mcall *c;
		size_t nc = 0, keep = 0;

		c = mb_build(kvp, WIRE_OP_GET, NULL, 0, gc->ntodo, get_enc, gc, &nc);
		if (!c)
			return KVP_ENOMEM;
		rc = mc_call(kvp, c, nc, gc->deadline);
		if (rc < 0) {
			mcalls_free(c, nc);
			if (!attempt)
				return rc;
			/* The first round went through: per-item results. */
			for (size_t t = 0; t < gc->ntodo; t++)
				gc->items[gc->todo[t]].result = rc;
			return 0;
		}
		get_plan(kvp, gc, c, nc, &run);
		mcalls_free(c, nc);
		run_wait(&run);
		get_release(kvp, gc);
		for (size_t t = 0; t < gc->ntodo; t++) {
			struct get_item *it = &gc->items[gc->todo[t]];

			if (it->result == GET_INFLIGHT)
				it->result = KVP_EINTERNAL;	/* cannot happen: run_wait drains */
			if (it->result < 0 && xport_error((int)it->result))
				gc->todo[keep++] = gc->todo[t];
		}
		if (!keep || attempt)
			break;
		gc->ntodo = keep;
		client_count(kvp, retries, keep);
		seg_invalidate(kvp);
	}
	return 0;
}

static int get_setup(struct kvp *kvp, struct get_ctx *gc, size_t n, const char *const *keys)
{
	gc->deadline = client_deadline(kvp);
	gc->items = calloc(n, sizeof(*gc->items));
	gc->todo = calloc(n, sizeof(*gc->todo));
	if (!gc->items || !gc->todo)
		return KVP_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct get_item *it = &gc->items[i];

		it->key = keys[i];
		it->result = key_check(keys[i], &it->klen);
		if (it->result)
			continue;
		it->hdr = malloc(EXT_HDR_SIZE + it->klen);
		if (!it->hdr) {
			it->result = KVP_ENOMEM;
			continue;
		}
		gc->todo[gc->ntodo++] = i;
	}
	return 0;
}

static void get_teardown(struct get_ctx *gc, size_t n)
{
	for (size_t i = 0; gc->items && i < n; i++) {
		free(gc->items[i].hdr);
		stage_free(gc->items[i].stage, gc->items[i].stage_pinned);
	}
	free(gc->items);
	free(gc->todo);
}

int kvp_batch_get_into(struct kvp *kvp, size_t n, const char *const *keys,
		       void *const *bufs, const size_t *caps, int64_t *results)
{
	struct get_ctx gc = { 0 };
	int rc;

	if (!kvp || (n && (!keys || !bufs || !caps || !results)))
		return KVP_EINVAL;
	if (!n)
		return 0;
	rc = get_setup(kvp, &gc, n, keys);
	if (rc == 0) {
		size_t keep = 0;

		for (size_t i = 0; i < n; i++) {
			gc.items[i].dst = bufs[i];
			gc.items[i].cap = bufs[i] ? caps[i] : 0;
		}
		for (size_t t = 0; t < gc.ntodo; t++) {
			struct get_item *it = &gc.items[gc.todo[t]];

			it->dev = it->dst && cuda_is_device(it->dst);
			if (it->dev && !cuda_available())
				it->result = device_refused(it->dst);
			else
				gc.todo[keep++] = gc.todo[t];
		}
		gc.ntodo = keep;
		rc = get_batch(kvp, &gc);
	}
	for (size_t i = 0; i < n; i++) {
		if (!gc.items)
			results[i] = rc;
		else if (rc < 0 && gc.items[i].result != KVP_EKEY)
			results[i] = rc;
		else
			results[i] = gc.items[i].result;
	}
	get_teardown(&gc, n);
	return rc < 0 ? rc : 0;
}

int64_t kvp_get_into(struct kvp *kvp, const char *key, void *buf, size_t cap)
{
	int64_t res;
	int rc = kvp_batch_get_into(kvp, 1, &key, &buf, &cap, &res);

	return rc < 0 ? rc : res;
}

int kvp_get(struct kvp *kvp, const char *key, void **buf, size_t *len)
{
	struct get_ctx gc = { 0 };
	int64_t res;
	int rc;

	if (!kvp || !buf || !len)
		return KVP_EINVAL;
	*buf = NULL;
	*len = 0;
	rc = get_setup(kvp, &gc, 1, &key);
	if (rc == 0) {
		gc.items[0].alloc = true;
		rc = get_batch(kvp, &gc);
	}
	res = rc < 0 ? rc : gc.items[0].result;
	if (res >= 0) {
		*buf = gc.items[0].dst;
		*len = (size_t)res;
		gc.items[0].dst = NULL;
	}
	if (gc.items)
		free(gc.items[0].dst);
	get_teardown(&gc, 1);
	return res < 0 ? (int)res : 0;
}

/* ---- simple key batches --------------------------------------------------- */

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
		if (key_check(keys[i], &kl) == 0)
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
	c = mb_build(kvp, op, prefix, plen, kb->nvalid, enc_key, &kb->ks, &nc);
	if (!c)
		return KVP_ENOMEM;
	rc = mc_call(kvp, c, nc, client_deadline(kvp));
	if (rc == 0) {
		for (size_t f = 0; f < nc; f++) {
			struct rbuf r;
			int frc = mb_reply(&c[f], &r);

			for (uint32_t k = 0; k < c[f].count; k++) {
				size_t i = kb->idx[c[f].first + k];

				if (!frc && !parse(&r, i, arg))
					frc = KVP_EPROTO;
				if (frc)
					fail(i, frc, arg);
			}
		}
	}
	mcalls_free(c, nc);
	return rc;
}

static bool parse_i32(struct rbuf *r, size_t i, void *arg)
{
	int *res = arg;

	res[i] = rb_i32(r);
	return rb_ok(r) && res[i] <= 1 && res[i] >= KVP_ERR_MIN;
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

int kvp_batch_exists(struct kvp *kvp, size_t n, const char *const *keys, int *results)
{
	return batch_i32(kvp, WIRE_OP_EXISTS, NULL, 0, n, keys, results);
}

int kvp_batch_remove(struct kvp *kvp, size_t n, const char *const *keys, int flags, int *results)
{
	uint8_t force = (flags & KVP_REMOVE_FORCE) ? 1 : 0;

	if (flags & ~KVP_REMOVE_FORCE)
		return KVP_EINVAL;
	return batch_i32(kvp, WIRE_OP_REMOVE, &force, 1, n, keys, results);
}

static bool parse_size(struct rbuf *r, size_t i, void *arg)
{
	int64_t *res = arg;
	int32_t st = rb_i32(r);
	uint64_t sz = rb_u64(r);

	res[i] = st ? st : sz > INT64_MAX ? KVP_EPROTO : (int64_t)sz;
	return rb_ok(r) && st <= 0 && st >= KVP_ERR_MIN;
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

int kvp_pin(struct kvp *kvp, const char *key, uint64_t ttl_ms)
{
	int res, rc = batch_i32(kvp, WIRE_OP_PIN, &ttl_ms, sizeof(ttl_ms), 1, &key, &res);

	return rc < 0 ? rc : res;
}

/* ---- stat, list, info, remove_prefix -------------------------------------- */

struct stat_res {
	struct kvp_stat st;
	int status;
};

static bool parse_stat(struct rbuf *r, size_t i, void *arg)
{
	struct stat_res *sr = arg;
	struct kvp_stat *st = &sr->st;
	uint8_t nrep;

	(void)i;
	memset(st, 0, sizeof(*st));
	sr->status = rb_i32(r);
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
	return rb_ok(r) && sr->status <= 0 && sr->status >= KVP_ERR_MIN;
}

static void fail_stat(size_t i, int rc, void *arg)
{
	(void)i;
	((struct stat_res *)arg)->status = rc;
}

int kvp_stat(struct kvp *kvp, const char *key, struct kvp_stat *st)
{
	struct stat_res sr = { .status = KVP_EPROTO };
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
	rc = kb_run(kvp, &kb, WIRE_OP_STAT, NULL, 0, parse_stat, fail_stat, &sr);
	free(kb.idx);
	if (rc < 0)
		return rc;
	if (sr.status < 0)
		return sr.status;
	pthread_mutex_lock(&kvp->lock);
	for (uint32_t k = 0; k < sr.st.nreplicas; k++) {
		struct client_seg *s = seg_find_locked(kvp, sr.st.replicas[k].segment_id);

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

/* Decodes a LIST reply (untrusted) into out: 0, KVP_EPROTO or KVP_ENOMEM;
 * on error the caller frees out with kvp_list_free. */
static int list_parse(const uint8_t *body, size_t len, struct kvp_list *out)
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
	rc = mc_call1(kvp, &m, client_deadline(kvp));
	if (rc < 0)
		goto out_free;
	rc = list_parse(m.rep, m.rep_len, out);
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
	rc = mc_call1(kvp, &m, client_deadline(kvp));
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
	rc = mc_call(kvp, c, 2, client_deadline(kvp));
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
		rc = segs_parse(&c[1], &v, &n);
	if (rc == 0) {
		out->nodes = calloc(n ? n : 1, sizeof(*out->nodes));
		if (!out->nodes)
			rc = KVP_ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		if (rc == 0) {
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
		free(v[i]);
	}
	free(v);
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
#undef LD
	return 0;
}

/* ---- fuzzing ---------------------------------------------------------------- */

int client_fuzz_replies(const uint8_t *p, size_t n)
{
	struct mcall m = { .got = true, .rep = (uint8_t *)p, .rep_len = (uint32_t)n };
	struct client_seg **v = NULL;
	struct kvp_list l = { 0 };
	struct rbuf r;
	size_t nv = 0;
	uint32_t cnt;

	if (n > UINT32_MAX)
		return 0;
	if (segs_parse(&m, &v, &nv) == 0) {
		for (size_t i = 0; i < nv; i++)
			free(v[i]);
		free(v);
	}
	list_parse(p, n, &l);
	kvp_list_free(&l);
	rb_init(&r, p, n);
	cnt = rb_count(&r, 33);
	for (uint32_t i = 0; i < cnt && rb_ok(&r); i++) {
		struct get_reply g;

		if (get_reply_item(&r, 1ull << 30, &g) == 0 && g.vlen > (1ull << 30))
			abort();	/* must have been refused */
	}
	rb_init(&r, p, n);
	cnt = rb_count(&r, 13);
	for (uint32_t i = 0; i < cnt && rb_ok(&r); i++) {
		struct put_reply pr;

		if (put_reply_item(&r, &pr) == 0 && (!pr.nrep || pr.nrep > KVP_MAX_REPLICAS))
			abort();
	}
	rb_init(&r, p, n);
	cnt = rb_count(&r, 65);
	for (uint32_t i = 0; i < cnt && rb_ok(&r); i++) {
		struct stat_res sr;

		if (!parse_stat(&r, i, &sr))
			break;
	}
	return 0;
}

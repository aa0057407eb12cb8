/* mcall: calls to kvpool-master over pooled, pipelined connections (see
 * mcall.h).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client_i.h"
#include "clock.h"
#include "kvpool.h"
#include "lcache.h"
#include "lns.h"
#include "log.h"
#include "mcall.h"
#include "mlocate.h"
#include "net.h"
#include "sock.h"

#define MC_WINDOW 16			/* frames pipelined before reading replies */
#define MC_RX (16u << 10)		/* reply buffer: larger bodies are read into place */
/* HA: a master that does not answer HELLO this fast is not taken to lead
 * (it may be stopped); the call goes on with the leader etcd names next. */
#define HA_HELLO_MS 1000
/* HA: a reply this late makes the call look in etcd whether the leader
 * moved meanwhile (a stopped master answers nothing, ever). */
#define HA_REPLY_CHECK_MS 500
#define HA_BACKOFF_MIN_MS 20		/* between attempts while no leader answers */
#define HA_BACKOFF_MAX_MS 100
#define MC_OWED_MAX 64			/* posted frames unanswered before a take waits */
#define MC_FRESH_MS 1000		/* idle less than this: lent without a liveness check */

/* A pooled master connection (after HELLO, blocking with poll deadlines).
 * owed: replies to frames posted without waiting (mc_post), read and
 * dropped among the replies of the connection's next exchange (sent
 * first, they come first), by kvp_close, or before a take once more than
 * MC_OWED_MAX are owed. Replies are read through
 * rx: one recv takes a reply's header and body (and often the replies
 * behind it), where reading header and body apart took three recv calls
 * and a poll per reply. */
struct mconn {
	int fd;
	uint64_t next_reqid;
	uint32_t owed;
	uint64_t epoch;			/* of its HELLO: every reply on it is that master's */
	char addr[CONF_STR];
	struct mconn *next;
	uint8_t *rx;			/* MC_RX bytes; unparsed: [rlo, rhi) */
	size_t rlo, rhi;
	uint64_t idle_ms;		/* when it went back to the idle list */
	uint64_t ns_gen;		/* kvp->ns_gen it declared (lns.c): older goes */
	uint64_t stats_reqid;		/* the CLIENT_STATS posted, unanswered (one at most:
					 * mc_post reads its reply first); 0: none */
	bool touched;			/* a TOUCH was posted on it */
};

static void mconn_free(struct kvp *kvp, struct mconn *mc)
{
	if (mc->stats_reqid)
		cstats_lost(kvp);	/* closed before its CLIENT_STATS was answered */
	sock_close(mc->fd);
	free(mc->rx);
	free(mc);
}

/* Waits for the connection to become readable, then takes what the socket
 * holds into rx. 0 or KVP_E*. */
static int mc_fill(struct mconn *mc, uint64_t deadline, int spin_us)
{
	if (mc->rlo) {
		memmove(mc->rx, mc->rx + mc->rlo, mc->rhi - mc->rlo);
		mc->rhi -= mc->rlo;
		mc->rlo = 0;
	}
	for (;;) {
		uint64_t now = clock_now_ms();
		struct pollfd pfd = { .fd = mc->fd, .events = POLLIN };
		ssize_t k;
		int n;

		if (now >= deadline)
			return KVP_ETIMEDOUT;
		if (sock_pending(mc->fd))
			n = 1;	/* decrypted and waiting: poll would not say so */
		else
			n = net_poll(&pfd, 1, deadline - now > INT_MAX ? INT_MAX :
				     (int)(deadline - now), spin_us);
		if (n < 0 && errno != EINTR)
			return KVP_ECONN;
		if (n <= 0)
			continue;
		k = sock_read(mc->fd, mc->rx + mc->rhi, MC_RX - mc->rhi);
		if (k > 0) {
			mc->rhi += (size_t)k;
			return 0;
		}
		if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			return KVP_ECONN;
	}
}

/* One reply frame: 0 with *h and *body (malloc'd, body_len + 1 bytes, the
 * caller frees it), or KVP_E*. */
static int mc_recv_frame(struct kvp *kvp, struct mconn *mc, uint64_t deadline,
			 struct wire_hdr *h, uint8_t **body)
{
	*body = NULL;
	for (;;) {
		size_t avail = mc->rhi - mc->rlo;
		int rc;

		if (avail >= WIRE_HDR_SIZE) {
			rc = wire_hdr_decode(mc->rx + mc->rlo, h, kvp->max_frame, 0);
			if (rc < 0)
				return rc;
			if (!(h->flags & WIRE_F_REPLY))
				return KVP_EPROTO;
			if (avail - WIRE_HDR_SIZE >= h->body_len ||
			    WIRE_HDR_SIZE + (size_t)h->body_len > MC_RX) {
				size_t have = avail - WIRE_HDR_SIZE;
				uint8_t *b = malloc((size_t)h->body_len + 1);

				if (!b)
					return KVP_ENOMEM;
				if (have > h->body_len)
					have = h->body_len;
				memcpy(b, mc->rx + mc->rlo + WIRE_HDR_SIZE, have);
				mc->rlo += WIRE_HDR_SIZE + have;
				if (mc->rlo == mc->rhi)
					mc->rlo = mc->rhi = 0;
				/* A body larger than rx: the rest straight into place. */
				if (have < h->body_len &&
				    (rc = sock_recv(mc->fd, b + have, h->body_len - have, deadline)) < 0) {
					free(b);
					return rc;
				}
				*body = b;
				return 0;
			}
		}
		rc = mc_fill(mc, deadline, (int)kvp->conf.cluster.busy_poll_us);
		if (rc < 0)
			return rc;
	}
}

/* h is the reply to a frame mc_post sent (their opcodes), and one is owed.
 * A master from before CLIENT_STATS or TOUCH answers it as a bad header:
 * opcode HELLO, status EPROTO, the frame's reqid. */
static bool owed_reply(const struct mconn *mc, const struct wire_hdr *h)
{
	return mc->owed && !h->payload_len &&
	       (h->opcode == WIRE_OP_LEASE_RELEASE || h->opcode == WIRE_OP_TOUCH ||
		(mc->stats_reqid && h->reqid == mc->stats_reqid) ||
		(mc->touched && h->opcode == WIRE_OP_HELLO && h->status == KVP_EPROTO));
}

/* An owed reply is dropped: false when the master closes the connection
 * after it (it refused CLIENT_STATS: reports go off). */
static bool owed_drop(struct kvp *kvp, struct mconn *mc, const struct wire_hdr *h)
{
	mc->owed--;
	if ((!mc->stats_reqid || h->reqid != mc->stats_reqid) && h->opcode == WIRE_OP_HELLO) {
		log_debug("master refused TOUCH: optimistic reads go unreported");
		lc_touch_refused(kvp);
		return false;
	}
	if (!mc->stats_reqid || h->reqid != mc->stats_reqid)
		return true;
	mc->stats_reqid = 0;
	if (h->status == KVP_EPROTO) {
		log_debug("master refused CLIENT_STATS: no more byte reports");
		cstats_refused(kvp);
	} else if (h->status == 0) {
		cstats_answered(kvp);
	}
	return h->opcode == WIRE_OP_CLIENT_STATS;
}

/* Reads and drops the replies mc is owed (with stats_only, those up to
 * its CLIENT_STATS report's): true when they came in order before the
 * deadline (else the connection is out of step: close it). */
static bool mc_settle(struct kvp *kvp, struct mconn *mc, uint64_t deadline, bool stats_only)
{
	while (mc->owed && (!stats_only || mc->stats_reqid)) {
		struct wire_hdr h;
		uint8_t *body;

		if (mc_recv_frame(kvp, mc, deadline, &h, &body) < 0)
			return false;
		free(body);
		if (!owed_reply(mc, &h) || !owed_drop(kvp, mc, &h))
			return false;
	}
	return true;
}

static int mc_take(struct kvp *kvp, uint64_t deadline, struct mconn **out, bool *reused)
{
	uint64_t epoch = 0, ns_gen = 0;
	struct mconn *mc;
	int fd;

	pthread_mutex_lock(&kvp->lock);
	for (;;) {
		mc = kvp->midle;
		if (mc && mc->ns_gen != kvp->ns_gen) {
			/* opened before a namespace declaration: it lacks it */
			kvp->midle = mc->next;
			kvp->mconns--;
			pthread_mutex_unlock(&kvp->lock);
			mconn_free(kvp, mc);
			pthread_mutex_lock(&kvp->lock);
			continue;
		}
		if (mc) {
			kvp->midle = mc->next;
			pthread_mutex_unlock(&kvp->lock);
			/* Replies owed to posted frames are read after the next
			 * frames are sent (mc_exchange), not before: a call after a
			 * get's posted LEASE_RELEASE would otherwise wait out that
			 * release's round trip before sending (a master-path get
			 * took two round trips). An idle connection owed nothing
			 * must have nothing to read; one back for less than
			 * MC_FRESH_MS is lent without that syscall: a master that
			 * dropped it meanwhile breaks the call before any reply,
			 * which mc_call_during retries once on a fresh one. */
			if (mc->owed > MC_OWED_MAX ? mc_settle(kvp, mc, deadline, false) :
			    mc->owed || clock_now_ms() - mc->idle_ms < MC_FRESH_MS ||
			    sock_alive(mc->fd)) {
				*out = mc;
				*reused = true;
				return 0;
			}
			/* Master restarted or dropped us while idle. */
			mconn_free(kvp, mc);
			pthread_mutex_lock(&kvp->lock);
			kvp->mconns--;
			continue;
		}
		if (kvp->mconns < kvp->mmax)
			break;
		if (clock_now_ms() >= deadline) {
			pthread_mutex_unlock(&kvp->lock);
			return KVP_ETIMEDOUT;
		}
		clock_cond_wait_until(&kvp->cond, &kvp->lock, deadline);
	}
	kvp->mconns++;
	pthread_mutex_unlock(&kvp->lock);

	mc = calloc(1, sizeof(*mc));
	if (mc && !(mc->rx = malloc(MC_RX))) {
		free(mc);
		mc = NULL;
	}
	fd = mc ? mlocate_get(kvp, mc->addr, sizeof(mc->addr), deadline) : KVP_ENOMEM;
	if (fd == 0) {
		uint64_t hello_by = deadline;
		if (mlocate_ha(kvp) && clock_now_ms() + HA_HELLO_MS < deadline)
			hello_by = clock_now_ms() + HA_HELLO_MS;
		fd = sock_connect(kvp, mc->addr, &epoch, hello_by);
		if (fd == KVP_ETIMEDOUT && hello_by < deadline)
			fd = KVP_ECONN;	/* that master, not the call, ran out of time */
		if (fd < 0)
			mlocate_bad(kvp, mc->addr);
		else if (!mlocate_epoch_ok(kvp, mc->addr, epoch)) {
			sock_close(fd);
			fd = KVP_ENOTLEADER;
		} else {
			int rc = lns_redeclare(kvp, fd, deadline, &ns_gen);
			if (rc < 0) {
				sock_close(fd);
				fd = rc;
			}
		}
	}
	pthread_mutex_lock(&kvp->lock);
	if (fd < 0) {
		kvp->mconns--;
		pthread_cond_broadcast(&kvp->cond);
		pthread_mutex_unlock(&kvp->lock);
		if (mc)
			free(mc->rx);
		free(mc);
		return fd;
	}
	if (kvp->epoch_known && epoch != kvp->epoch) {
		/* A restarted master numbers segments anew. The segment
		 * table's flag is set here, under kvp->lock, rather than by a
		 * segtab call: segtab calls the master through this module. */
		log_info("master %s restarted or a new leader took over: refreshing segments",
			 mc->addr);
		kvp->segs_valid = false;
	}
	kvp->epoch = epoch;
	kvp->epoch_known = true;
	pthread_mutex_unlock(&kvp->lock);
	client_count(kvp, master_connects, 1);
	mc->epoch = epoch;
	mc->ns_gen = ns_gen;
	mc->fd = fd;
	mc->next_reqid = 1;
	*out = mc;
	*reused = false;
	return 0;
}

static void mc_give(struct kvp *kvp, struct mconn *mc, bool healthy)
{
	/* Bytes nobody asked for: the stream is out of step. */
	if (mc->rlo != mc->rhi)
		healthy = false;
	if (healthy)
		mc->idle_ms = clock_now_ms();
	pthread_mutex_lock(&kvp->lock);
	if (healthy && mc->ns_gen != kvp->ns_gen)
		healthy = false;	/* opened before a declaration (lns.c) */
	if (healthy) {
		mc->next = kvp->midle;
		kvp->midle = mc;
	} else {
		kvp->mconns--;
	}
	pthread_cond_broadcast(&kvp->cond);
	pthread_mutex_unlock(&kvp->lock);
	if (!healthy)
		mconn_free(kvp, mc);
}

void mc_free(struct mcall *c, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		wb_free(&c[i].body);
		free(c[i].rep);
	}
	free(c);
}

/* Sends w <= MC_WINDOW frames in one writev, numbering them. */
static int mc_send(struct kvp *kvp, struct mconn *mc, struct mcall **win, size_t w,
		   uint64_t deadline)
{
	uint8_t hdrs[MC_WINDOW][WIRE_HDR_SIZE];
	struct iovec iov[2 * MC_WINDOW];

	for (size_t i = 0; i < w; i++) {
		struct mcall *m = win[i];
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
	return sock_sendv(mc->fd, iov, (int)(2 * w), deadline);
}

/* HA: waits until the connection has a reply to read; every
 * HA_REPLY_CHECK_MS without one, etcd is asked whether another master
 * leads now (then KVP_ECONN: the frames go to that one). */
static int wait_reply(struct kvp *kvp, struct mconn *mc, uint64_t deadline)
{
	for (;;) {
		uint64_t now = clock_now_ms();
		if (now >= deadline)
			return KVP_ETIMEDOUT;
		uint64_t wait = deadline - now < HA_REPLY_CHECK_MS ? deadline - now : HA_REPLY_CHECK_MS;
		struct pollfd p = { .fd = mc->fd, .events = POLLIN };
		int k = net_poll(&p, 1, (int)wait, (int)kvp->conf.cluster.busy_poll_us);
		if (k > 0)
			return 0;
		if (k < 0 && errno != EINTR)
			return KVP_ECONN;
		if (k == 0 && mlocate_moved(kvp, mc->addr, mc->epoch, deadline))
			return KVP_ECONN;
	}
}

/* Sends the frames not answered yet (MC_WINDOW at a time) and collects
 * their replies; a frame answered KVP_ENOTLEADER stays unanswered (sent
 * again to the leader) and ends the exchange with that code once the
 * window is read. */
static int mc_exchange(struct kvp *kvp, struct mconn *mc, struct mcall *c, size_t n,
		       uint64_t deadline, bool *got_any, struct mc_during *during)
{
	struct mcall *win[MC_WINDOW];
	size_t next = 0;
	int leader_rc = 0;

	while (!leader_rc) {
		size_t w = 0;
		int rc;

		for (; next < n && w < MC_WINDOW; next++)
			if (!c[next].got)
				win[w++] = &c[next];
		if (!w)
			break;
		rc = mc_send(kvp, mc, win, w, deadline);
		if (rc < 0)
			return rc;
		if (during && !during->done) {
			during->done = true;
			during->fn(during->arg);
		}
		for (size_t k = 0; k < w; k++) {
			struct wire_hdr h;
			uint8_t *body;
			struct mcall *m = NULL;

			for (;;) {
				/* HA: nothing buffered yet: wait, asking etcd now and then */
				if (mlocate_ha(kvp) && mc->rlo == mc->rhi &&
				    (rc = wait_reply(kvp, mc, deadline)) < 0)
					return rc;
				rc = mc_recv_frame(kvp, mc, deadline, &h, &body);
				if (rc < 0)
					return rc;
				for (size_t i = 0; i < w; i++)
					if (win[i]->reqid == h.reqid && !win[i]->got)
						m = win[i];
				/* a reply owed to a frame posted before (mc_post),
				 * which the master answers first */
				if (m || !owed_reply(mc, &h))
					break;
				free(body);
				if (!owed_drop(kvp, mc, &h))
					return KVP_ECONN;	/* the master closes it */
			}
			*got_any = true;
			if (!m || h.payload_len || (h.opcode != m->op && h.status == 0)) {
				free(body);
				return KVP_EPROTO;
			}
			if (h.status == KVP_ENOTLEADER) {
				/* a standby, or a new leader still rebuilding */
				free(body);
				m->reqid = 0;
				leader_rc = KVP_ENOTLEADER;
				continue;
			}
			m->got = true;
			m->status = h.status;
			m->epoch = mc->epoch;
			free(m->rep);
			m->rep = body;
			m->rep_len = h.body_len;
			m->rep[m->rep_len] = 0;
		}
	}
	return leader_rc;
}

static void backoff_sleep(uint64_t *ms)
{
	struct timespec ts = { 0, (long)*ms * 1000000L };

	nanosleep(&ts, NULL);
	*ms = *ms * 2 > HA_BACKOFF_MAX_MS ? HA_BACKOFF_MAX_MS : *ms * 2;
}

/* A reused connection that breaks before any reply arrived is retried once
 * on a fresh one (the master restarted while it sat idle). With HA the call
 * waits out a failover instead: while no master leads, or the one reached
 * answers KVP_ENOTLEADER or breaks, the frames not answered yet are sent
 * again (to the leader etcd names then) until the deadline. A frame whose
 * answer was lost may so run twice; every opcode tolerates that (a repeated
 * PUT_END of a complete object succeeds, docs/ha.md). */
int mc_call_during(struct kvp *kvp, struct mcall *c, size_t n, uint64_t deadline,
		   struct mc_during *during)
{
	uint64_t backoff = HA_BACKOFF_MIN_MS;
	bool ha = mlocate_ha(kvp);

	for (size_t i = 0; i < n; i++)
		c[i].got = false;
	for (int attempt = 0;; attempt++) {
		struct mconn *mc;
		bool reused = false, got_any = false;
		int rc = mc_take(kvp, deadline, &mc, &reused);

		if (rc == 0) {
			rc = mc_exchange(kvp, mc, c, n, deadline, &got_any, during);
			if (rc == KVP_ENOTLEADER || (rc == KVP_ECONN && ha))
				mlocate_bad(kvp, mc->addr);
			mc_give(kvp, mc, rc == 0);
		}
		if (rc == KVP_ECONN && reused && !got_any && attempt == 0) {
			client_count(kvp, retries, 1);
			continue;
		}
		if (ha && (rc == KVP_ECONN || rc == KVP_ENOTLEADER) &&
		    clock_now_ms() + backoff < deadline) {
			client_count(kvp, retries, 1);
			backoff_sleep(&backoff);
			continue;
		}
		return rc;
	}
}

int mc_call(struct kvp *kvp, struct mcall *c, size_t n, uint64_t deadline)
{
	return mc_call_during(kvp, c, n, deadline, NULL);
}

int mc_post(struct kvp *kvp, struct mcall *c, size_t n, uint64_t deadline)
{
	struct mcall *win[MC_WINDOW];
	struct mconn *mc;
	bool reused;
	int rc = mc_take(kvp, deadline, &mc, &reused);

	if (rc < 0)
		return rc;
	/* One report unanswered per connection: stats_reqid names it, and
	 * a reply to an earlier one would read as a stray frame. Reports are
	 * CSTATS_MS apart, so that reply is rarely not in yet. */
	for (size_t i = 0; i < n; i++)
		if (c[i].op == WIRE_OP_CLIENT_STATS && mc->stats_reqid &&
		    !mc_settle(kvp, mc, deadline, true)) {
			mc_give(kvp, mc, false);
			return KVP_ECONN;
		}
	for (size_t base = 0; base < n && rc == 0; base += MC_WINDOW) {
		size_t w = n - base < MC_WINDOW ? n - base : MC_WINDOW;

		for (size_t i = 0; i < w; i++)
			win[i] = &c[base + i];
		rc = mc_send(kvp, mc, win, w, deadline);
		if (rc == 0)
			mc->owed += (uint32_t)w;
		for (size_t i = 0; rc == 0 && i < w; i++)
			if (win[i]->op == WIRE_OP_CLIENT_STATS)
				mc->stats_reqid = win[i]->reqid;
			else if (win[i]->op == WIRE_OP_TOUCH)
				mc->touched = true;
	}
	mc_give(kvp, mc, rc == 0);
	return rc;
}

int mc_call1(struct kvp *kvp, struct mcall *c, uint64_t deadline)
{
	int rc = mc_call(kvp, c, 1, deadline);

	if (rc == 0 && c->status)
		rc = c->status;
	return rc;
}

struct mcall *mc_batch(struct kvp *kvp, uint16_t op, const void *prefix, size_t plen, size_t n,
		       mc_item_enc enc, void *arg, size_t *ncalls)
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
	mc_free(c, cap);
	return NULL;
}

int mc_batch_reply(const struct mcall *m, struct rbuf *r)
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

int mc_key_check(const char *key, uint32_t *klen)
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

void mc_pool_close(struct kvp *kvp)
{
	/* Posted frames have been handled once their replies are in: a
	 * process that reads a key and exits, then another that removes it,
	 * finds the lease released. */
	uint64_t deadline = clock_now_ms() + (kvp->timeout_ms < 2000 ? kvp->timeout_ms : 2000);

	while (kvp->midle) {
		struct mconn *mc = kvp->midle;

		if (mc->owed)
			mc_settle(kvp, mc, deadline, false);
		kvp->midle = mc->next;
		mconn_free(kvp, mc);
	}
}

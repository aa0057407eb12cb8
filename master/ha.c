/* ha: the election thread and the fence; see ha.h and docs/ha.md.
 *
 * Timing, with T the lease TTL etcd granted (2 s by default):
 *  - the leader renews every T/4 and each attempt at one endpoint may take
 *    T/4, so a dead etcd member costs one attempt and the next one answers;
 *  - after a renewal sent at time s (or the grant, for the first) the
 *    lease lives in etcd until at least s + T; the leader serves until
 *    s + T - margin (margin = max(T/5, 300 ms)): it has stopped answering
 *    before etcd can drop the key and a standby can create its own;
 *  - the clock is CLOCK_BOOTTIME: it runs on while the process is stopped
 *    (SIGSTOP) and while the host sleeps, as etcd's clock does.
 */
#include "ha.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "etcd.h"
#include "log.h"

#define RETRY_MS 200		/* after an etcd error while standing by */
#define WATCH_MS 5000		/* a standby renews its watch this often */
#define SEGS_MIN_GAP_MS 200	/* segment set writes are coalesced */

struct ha {
	struct ha_conf c;
	char key[LEADER_ID_MAX + 32];		/* kvpool/<id>/leader */
	char segkey[LEADER_ID_MAX + 32];	/* kvpool/<id>/segments */
	struct etcd *etcd;			/* the thread's */
	int efd;
	pthread_t th;
	bool th_started;

	/* the fence: read by any thread */
	_Atomic uint64_t serve_until_ms;	/* CLOCK_BOOTTIME; 0 = not leader */
	_Atomic uint64_t epoch;
	atomic_bool stop, resign, lapsed;

	pthread_mutex_t lock;
	pthread_cond_t cond;			/* wakes the thread's sleeps */
	/* protected by lock */
	struct ha_status st;
	char *segs;				/* the set to publish */
	size_t segs_len;
	bool segs_dirty;
	char *expected;				/* read when this master won */
	size_t expected_len;

	/* thread only */
	int64_t lease;				/* while leader */
	int64_t old_lease;			/* a lease given up that may still hold our key */
	uint64_t ttl_ms;
	uint64_t margin_ms;
	uint64_t last_sent_ms;			/* last renewal sent */
	uint64_t segs_written_ms;
	uint64_t holdoff_until_ms;		/* no campaign before (after a resign/lapse) */
	bool warned;
	struct etcd_kv *kv;
};

static uint64_t boot_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void notify(struct ha *h)
{
	uint64_t one = 1;
	ssize_t k = write(h->efd, &one, sizeof(one));
	(void)k;
}

/* Sleeps up to ms unless stop or resign is asked (or ms is 0). */
static void nap(struct ha *h, uint64_t ms)
{
	uint64_t deadline;

	if (!ms)
		return;
	deadline = clock_now_ms() + ms;
	pthread_mutex_lock(&h->lock);
	while (!atomic_load(&h->stop) && !atomic_load(&h->resign) && !atomic_load(&h->lapsed) &&
	       clock_cond_wait_until(&h->cond, &h->lock, deadline) == 0)
		;
	pthread_mutex_unlock(&h->lock);
}

static void etcd_failed(struct ha *h, const char *what, int rc)
{
	if (rc == -ECANCELED)
		return;		/* ha_stop */
	pthread_mutex_lock(&h->lock);
	h->st.etcd_errors++;
	h->st.etcd_ok = false;
	snprintf(h->st.etcd_error, sizeof(h->st.etcd_error), "%s: %s%s%s", what,
		 strerror(-rc), etcd_last_error(h->etcd)[0] ? ": " : "", etcd_last_error(h->etcd));
	pthread_mutex_unlock(&h->lock);
	if (!h->warned)
		log_warn("ha: etcd %s: %s", what, h->st.etcd_error);
	h->warned = true;
}

static void etcd_answered(struct ha *h)
{
	if (h->warned)
		log_notice("ha: etcd answers again (%s)", etcd_endpoint(h->etcd));
	h->warned = false;
	pthread_mutex_lock(&h->lock);
	h->st.etcd_ok = true;
	pthread_mutex_unlock(&h->lock);
}

/* Records the leader etcd names (or none). */
static void saw_leader(struct ha *h, const struct leader_rec *r, uint64_t epoch)
{
	pthread_mutex_lock(&h->lock);
	if (r) {
		if (!h->st.leader_known || h->st.epoch != epoch) {
			h->st.last_change_ns = clock_realtime_ns();
			log_notice("ha: leader is %s (%s), epoch %llu", r->name, r->rpc,
				   (unsigned long long)epoch);
		}
		h->st.rec = *r;
		h->st.epoch = epoch;
		h->st.leader_known = true;
	} else {
		h->st.leader_known = false;
	}
	pthread_mutex_unlock(&h->lock);
}

/* A host that is empty or a wildcard: this host's address towards etcd. */
static void fill_host(char *hp, size_t cap, const char *ip)
{
	char host[CONF_STR];
	uint16_t port;

	if (conf_parse_hostport(hp, host, sizeof(host), &port) < 0)
		return;
	if (host[0] && strcmp(host, "0.0.0.0") && strcmp(host, "::"))
		return;
	if (!ip[0])
		ip = "127.0.0.1";
	snprintf(hp, cap, strchr(ip, ':') ? "[%s]:%u" : "%s:%u", ip, port);
}

static void become_leader(struct ha *h, int64_t lease, uint64_t ttl_ms, uint64_t t0,
			  uint64_t epoch, const struct leader_rec *rec)
{
	h->lease = lease;
	h->ttl_ms = ttl_ms;
	h->margin_ms = ttl_ms / 5 > 300 ? ttl_ms / 5 : 300;
	if (h->margin_ms > ttl_ms / 2)
		h->margin_ms = ttl_ms / 2;
	h->last_sent_ms = t0;
	etcd_set_timeout(h->etcd, ttl_ms / 4);

	/* The set of segments the last leader had: what recovery waits for. */
	char *exp = NULL;
	size_t elen = 0;
	int rc = etcd_get(h->etcd, h->segkey, h->kv, NULL);
	if (rc == 0 && (exp = malloc(h->kv->value_len + 1)) != NULL) {
		memcpy(exp, h->kv->value, h->kv->value_len + 1);
		elen = h->kv->value_len;
	}
	pthread_mutex_lock(&h->lock);
	free(h->expected);
	h->expected = exp;
	h->expected_len = elen;
	h->st.elections++;
	h->st.lease_ttl_ms = ttl_ms;
	h->segs_dirty = h->segs != NULL;
	pthread_mutex_unlock(&h->lock);
	saw_leader(h, rec, epoch);
	atomic_store(&h->epoch, epoch);
	atomic_store(&h->serve_until_ms, t0 + ttl_ms - h->margin_ms);
	if (boot_ms() >= t0 + ttl_ms - h->margin_ms) {
		/* the election itself took too long: nothing was served */
		atomic_store(&h->serve_until_ms, 0);
		log_warn("ha: elected too late to lead safely; standing by");
		atomic_store(&h->lapsed, true);
	}
	pthread_mutex_lock(&h->lock);
	h->st.leader = true;
	pthread_mutex_unlock(&h->lock);
	log_notice("ha: elected leader of cluster %s, epoch %llu, lease %llu ms (%s)",
		   h->c.cluster_id, (unsigned long long)epoch, (unsigned long long)ttl_ms,
		   rec->rpc);
	notify(h);
}

static void campaign(struct ha *h)
{
	uint64_t t0 = boot_ms();
	int64_t id = 0, granted = 0, rev = 0;
	int64_t ttl_s = (int64_t)((h->c.ttl_ms + 999) / 1000);
	struct leader_rec rec = h->c.rec;
	char val[LEADER_REC_MAX];

	int rc = etcd_lease_grant(h->etcd, ttl_s, &id, &granted);
	if (rc) {
		etcd_failed(h, "lease grant", rc);
		nap(h, RETRY_MS);
		return;
	}
	fill_host(rec.rpc, sizeof(rec.rpc), etcd_local_ip(h->etcd));
	fill_host(rec.http, sizeof(rec.http), etcd_local_ip(h->etcd));
	int n = leader_rec_encode(&rec, val, sizeof(val));
	if (n < 0) {
		log_err("ha: the leader record does not fit");
		etcd_lease_revoke(h->etcd, id);
		nap(h, RETRY_MS);
		return;
	}
	rc = etcd_create_key(h->etcd, h->key, val, (size_t)n, id, &rev, h->kv);
	if (rc == 0) {
		etcd_answered(h);
		become_leader(h, id, (uint64_t)granted * 1000, t0, (uint64_t)rev, &rec);
		return;
	}
	etcd_lease_revoke(h->etcd, id);	/* best effort; it lapses anyway */
	if (rc == -EEXIST) {
		struct leader_rec cur;
		etcd_answered(h);
		if (leader_rec_decode(h->kv->value, h->kv->value_len, &cur) == 0)
			saw_leader(h, &cur, (uint64_t)h->kv->create_rev);
		return;
	}
	etcd_failed(h, "campaign", rc);
	nap(h, RETRY_MS);
}

/* Leaves the lead: the fence drops first, then the owner hears of it,
 * then the key and lease go (if etcd answers) so a standby wins at once. */
static void step_down(struct ha *h, const char *why, bool give_up_key)
{
	uint64_t epoch = atomic_load(&h->epoch);

	/* A master that resigned or lapsed (stopped, paused, starved) lets the
	 * others campaign first. */
	h->holdoff_until_ms = give_up_key ? boot_ms() + h->ttl_ms / 4 : 0;
	atomic_store(&h->serve_until_ms, 0);
	atomic_store(&h->epoch, 0);
	pthread_mutex_lock(&h->lock);
	h->st.leader = false;
	h->st.leader_known = false;
	h->st.stepdowns++;
	pthread_mutex_unlock(&h->lock);
	log_warn("ha: stepping down as leader (epoch %llu): %s", (unsigned long long)epoch, why);
	notify(h);
	/* Revoking the lease deletes the key. If etcd does not answer, the
	 * lease is remembered: stand_by() gives it up when it sees our key. */
	int rc = give_up_key ? etcd_lease_revoke(h->etcd, h->lease) : -ENOENT;
	h->old_lease = rc == 0 || rc == -ENOENT ? 0 : h->lease;
	h->lease = 0;
	etcd_set_timeout(h->etcd, 2000);
}

/* Publishes the segment set (coalesced), guarded by our key. */
static void write_segments(struct ha *h)
{
	char *text = NULL;
	size_t n = 0;

	if (boot_ms() < h->segs_written_ms + SEGS_MIN_GAP_MS)
		return;
	pthread_mutex_lock(&h->lock);
	if (h->segs_dirty && h->segs && (text = malloc(h->segs_len + 1)) != NULL) {
		memcpy(text, h->segs, h->segs_len);
		n = h->segs_len;
		h->segs_dirty = false;
	}
	pthread_mutex_unlock(&h->lock);
	if (!text)
		return;
	int rc = etcd_put_guarded(h->etcd, h->key, (int64_t)atomic_load(&h->epoch), h->segkey,
				  text, n, 0);
	if (rc && rc != -ESTALE) {
		pthread_mutex_lock(&h->lock);
		h->segs_dirty = true;	/* again at the next renewal */
		pthread_mutex_unlock(&h->lock);
	}
	free(text);
	h->segs_written_ms = boot_ms();
}

static void lead(struct ha *h)
{
	uint64_t interval = h->ttl_ms / 4;
	uint64_t now = boot_ms();

	if (atomic_load(&h->resign)) {
		atomic_store(&h->resign, false);
		step_down(h, "asked to resign", true);
		return;
	}
	if (atomic_exchange(&h->lapsed, false)) {
		step_down(h, "the fence lapsed before the lease was renewed", true);
		return;
	}
	if (now < h->last_sent_ms + interval) {
		nap(h, h->last_sent_ms + interval - now);
		return;
	}
	/* Never extend a leadership that has lapsed: the owner may have seen
	 * it and dropped its state, or the lease may be gone already. */
	if (now >= atomic_load(&h->serve_until_ms)) {
		step_down(h, "the lease could not be renewed in time", true);
		return;
	}
	int64_t ttl = 0;
	int rc = etcd_lease_keepalive(h->etcd, h->lease, &ttl);
	if (rc == 0) {
		uint64_t until = now + (uint64_t)ttl * 1000 - h->margin_ms;
		uint64_t cur = atomic_load(&h->serve_until_ms);
		/* The fence only moves forward, and never once it lapsed (or
		 * ha_lapsed() cleared it meanwhile). */
		while (cur && boot_ms() < cur && until > cur &&
		       !atomic_compare_exchange_weak(&h->serve_until_ms, &cur, until))
			;
		h->last_sent_ms = now;
		etcd_answered(h);
		write_segments(h);
		return;
	}
	if (rc == -ENOENT) {
		step_down(h, "the lease expired in etcd", false);
		return;
	}
	if (rc == -ECANCELED)
		return;
	etcd_failed(h, "lease keepalive", rc);
	/* try again soon; the fence decides when to give up */
	if (boot_ms() >= atomic_load(&h->serve_until_ms))
		step_down(h, "etcd did not renew the lease in time", true);
	else
		nap(h, interval / 4);
}

static int on_event(void *arg, const struct etcd_event *ev)
{
	(void)arg;
	(void)ev;
	return 1;	/* any change: read the key again */
}

static void stand_by(struct ha *h)
{
	int64_t rev = 0;
	struct leader_rec r;

	atomic_store(&h->resign, false);
	atomic_store(&h->lapsed, false);
	int rc = etcd_get(h->etcd, h->key, h->kv, &rev);
	if (rc == -ECANCELED)
		return;
	if (rc == -ENOENT) {
		etcd_answered(h);
		h->old_lease = 0;
		saw_leader(h, NULL, 0);
		uint64_t now = boot_ms();
		if (now < h->holdoff_until_ms) {
			nap(h, h->holdoff_until_ms - now);
			return;
		}
		campaign(h);
		return;
	}
	if (rc) {
		etcd_failed(h, "read the leader", rc);
		nap(h, RETRY_MS);
		return;
	}
	etcd_answered(h);
	if (h->old_lease && h->kv->lease == h->old_lease) {
		/* our own key from before a step-down: give it up */
		if (etcd_lease_revoke(h->etcd, h->old_lease) == 0)
			h->old_lease = 0;
		else
			nap(h, RETRY_MS);
		return;
	}
	if (leader_rec_decode(h->kv->value, h->kv->value_len, &r) == 0)
		saw_leader(h, &r, (uint64_t)h->kv->create_rev);
	else
		log_warn("ha: %s holds no leader record", h->key);
	rc = etcd_watch(h->etcd, h->key, rev + 1, WATCH_MS, on_event, NULL);
	if (rc < 0 && rc != -EINTR && rc != -ECANCELED && rc != -ESTALE) {
		etcd_failed(h, "watch the leader", rc);
		nap(h, RETRY_MS);
	}
}

static void *ha_thread(void *arg)
{
	struct ha *h = arg;

	while (!atomic_load(&h->stop)) {
		if (h->lease && atomic_load(&h->serve_until_ms))
			lead(h);
		else if (h->lease)
			step_down(h, "the fence lapsed", true);
		else
			stand_by(h);
	}
	return NULL;
}

int ha_conf_from(struct ha_conf *c, const struct kvp_conf *conf, const char *rpc_listen,
		 const char *http_listen, char *err, size_t errlen)
{
	char ep[ETCD_MAX_ENDPOINTS][ETCD_EP_MAX];
	char host[256];

	memset(c, 0, sizeof(*c));
	if (!conf->master.ha_endpoints[0] ||
	    etcd_endpoints_parse(conf->master.ha_endpoints, ep, ETCD_MAX_ENDPOINTS) < 0) {
		snprintf(err, errlen, "[master] ha = etcd needs ha_endpoints = host:port;host:port "
			 "(got \"%s\")", conf->master.ha_endpoints);
		return -1;
	}
	if (!leader_cluster_id_ok(conf->master.cluster_id)) {
		snprintf(err, errlen, "[master] cluster_id \"%s\": 1..%d of A-Z a-z 0-9 _ . -",
			 conf->master.cluster_id, LEADER_ID_MAX);
		return -1;
	}
	snprintf(c->endpoints, sizeof(c->endpoints), "%s", conf->master.ha_endpoints);
	c->tls_required = conf->tls.enabled;
	snprintf(c->tls_ca, sizeof(c->tls_ca), "%s", conf->tls.ca);
	snprintf(c->tls_cert, sizeof(c->tls_cert), "%s", conf->tls.cert);
	snprintf(c->tls_key, sizeof(c->tls_key), "%s", conf->tls.key);
	snprintf(c->cluster_id, sizeof(c->cluster_id), "%.128s", conf->master.cluster_id);
	c->ttl_ms = conf->master.ha_lease_ttl;
	snprintf(c->rec.rpc, sizeof(c->rec.rpc), "%s",
		 conf->master.advertise[0] ? conf->master.advertise : rpc_listen);
	snprintf(c->rec.http, sizeof(c->rec.http), "%s", http_listen);
	if (gethostname(host, sizeof(host)) < 0)
		snprintf(host, sizeof(host), "master");
	host[sizeof(host) - 1] = '\0';
	snprintf(c->rec.name, sizeof(c->rec.name), "%.100s:%d", host, (int)getpid());
	for (char *p = c->rec.name; *p; p++)
		if (*p < 0x21 || *p > 0x7e)
			*p = '_';
	return 0;
}

static struct etcd *ha_etcd(const struct ha_conf *c, uint64_t timeout_ms, char *err,
			    size_t errlen)
{
	const struct etcd_tls tls = {
		.required = c->tls_required, .ca = c->tls_ca, .cert = c->tls_cert, .key = c->tls_key,
	};

	return etcd_create(c->endpoints, timeout_ms, &tls, err, errlen);
}

struct ha *ha_start(const struct ha_conf *c, char *err, size_t errlen)
{
	struct ha *h = calloc(1, sizeof(*h));

	if (!h) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	h->c = *c;
	h->efd = -1;
	if (leader_key(h->key, sizeof(h->key), c->cluster_id, "leader") ||
	    leader_key(h->segkey, sizeof(h->segkey), c->cluster_id, "segments")) {
		snprintf(err, errlen, "bad cluster_id \"%s\"", c->cluster_id);
		goto out_free;
	}
	h->kv = malloc(sizeof(*h->kv));
	if (!h->kv) {
		snprintf(err, errlen, "out of memory");
		goto out_free;
	}
	h->etcd = ha_etcd(c, 2000, err, errlen);
	if (!h->etcd)
		goto out_kv;
	h->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (h->efd < 0) {
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
		goto out_etcd;
	}
	pthread_mutex_init(&h->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&h->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&h->th, NULL, ha_thread, h) != 0) {
		snprintf(err, errlen, "cannot start the election thread");
		goto out_sync;
	}
	h->th_started = true;
	log_notice("ha: standing by for cluster %s (etcd %s, lease %llu ms)", c->cluster_id,
		   c->endpoints, (unsigned long long)c->ttl_ms);
	return h;

out_sync:
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	close(h->efd);
out_etcd:
	etcd_destroy(h->etcd);
out_kv:
	free(h->kv);
out_free:
	free(h);
	return NULL;
}

void ha_stop(struct ha *h)
{
	if (!h)
		return;
	atomic_store(&h->stop, true);
	etcd_cancel(h->etcd);
	pthread_mutex_lock(&h->lock);
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->th, NULL);
	/* Give the key up so a standby wins now, not after the lease: a fresh
	 * handle, as the thread's is cancelled. */
	uint64_t epoch = atomic_exchange(&h->epoch, 0);
	atomic_store(&h->serve_until_ms, 0);
	if (h->lease || h->old_lease) {
		char err[128];
		struct etcd *e = ha_etcd(&h->c, 1000, err, sizeof(err));
		if (e) {
			if (h->lease && etcd_lease_revoke(e, h->lease) == 0)
				log_notice("ha: gave up the lead (epoch %llu)", (unsigned long long)epoch);
			if (h->old_lease)
				etcd_lease_revoke(e, h->old_lease);
			etcd_destroy(e);
		}
	}
	etcd_destroy(h->etcd);
	close(h->efd);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	free(h->segs);
	free(h->expected);
	free(h->kv);
	free(h);
}

int ha_fd(const struct ha *h)
{
	return h->efd;
}

void ha_ack(struct ha *h)
{
	uint64_t v;
	ssize_t k = read(h->efd, &v, sizeof(v));
	(void)k;
}

bool ha_serving(const struct ha *h)
{
	uint64_t until = atomic_load(&((struct ha *)h)->serve_until_ms);

	return until && boot_ms() < until;
}

uint64_t ha_epoch(const struct ha *h)
{
	return atomic_load(&((struct ha *)h)->epoch);
}

static void poke(struct ha *h)
{
	etcd_interrupt(h->etcd);
	pthread_mutex_lock(&h->lock);
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

void ha_lapsed(struct ha *h)
{
	atomic_store(&h->serve_until_ms, 0);
	atomic_store(&h->lapsed, true);
	poke(h);
}

void ha_resign(struct ha *h)
{
	atomic_store(&h->resign, true);
	poke(h);
}

void ha_get_status(struct ha *h, struct ha_status *st)
{
	pthread_mutex_lock(&h->lock);
	*st = h->st;
	pthread_mutex_unlock(&h->lock);
	st->leader = st->leader && ha_serving(h);
}

void ha_set_segments(struct ha *h, const char *text, size_t n)
{
	char *copy = malloc(n + 1);

	if (!copy)
		return;
	memcpy(copy, text, n);
	copy[n] = '\0';
	pthread_mutex_lock(&h->lock);
	free(h->segs);
	h->segs = copy;
	h->segs_len = n;
	h->segs_dirty = true;
	pthread_mutex_unlock(&h->lock);
}

size_t ha_expected(struct ha *h, char *buf, size_t cap)
{
	size_t n = 0;

	if (!cap)
		return 0;
	pthread_mutex_lock(&h->lock);
	if (h->expected) {
		n = h->expected_len < cap - 1 ? h->expected_len : cap - 1;
		memcpy(buf, h->expected, n);
	}
	pthread_mutex_unlock(&h->lock);
	buf[n] = '\0';
	return n;
}

/* leader: the leader record, its etcd key, one-shot lookups and the
 * watching thread; see leader.h. */
#include "leader.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"
#include "etcd.h"
#include "log.h"

#define WATCH_MAX_MS 5000	/* a watch is renewed this often (a dead etcd shows) */
#define RETRY_MS 200		/* after an etcd error */

bool leader_cluster_id_ok(const char *id)
{
	size_t n = strlen(id);

	if (n == 0 || n > LEADER_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		      c == '_' || c == '-' || c == '.'))
			return false;
	}
	return true;
}

int leader_key(char *out, size_t cap, const char *cluster_id, const char *what)
{
	if (!leader_cluster_id_ok(cluster_id))
		return -EINVAL;
	int n = snprintf(out, cap, "kvpool/%s/%s", cluster_id, what);
	return n < 0 || (size_t)n >= cap ? -EINVAL : 0;
}

int leader_rec_encode(const struct leader_rec *r, char *out, size_t cap)
{
	int n = snprintf(out, cap, "rpc=%s\nhttp=%s\nname=%s\n", r->rpc, r->http, r->name);

	return n < 0 || (size_t)n >= cap ? -E2BIG : n;
}

static bool printable(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] < 0x21 || p[i] > 0x7e)
			return false;
	return true;
}

int leader_rec_decode(const char *p, size_t n, struct leader_rec *r)
{
	const char *end = p + n;

	memset(r, 0, sizeof(*r));
	if (n > LEADER_REC_MAX)
		return -EINVAL;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		const char *eq = memchr(p, '=', (size_t)(le - p));
		char *dst = NULL;
		size_t cap = 0;

		if (le == p) {		/* empty line */
			p = le + 1;
			continue;
		}
		if (!eq || !printable(p, (size_t)(le - p)))
			return -EINVAL;
		size_t kl = (size_t)(eq - p), vl = (size_t)(le - eq - 1);
		if (kl == 3 && !memcmp(p, "rpc", 3)) {
			dst = r->rpc;
			cap = sizeof(r->rpc);
		} else if (kl == 4 && !memcmp(p, "http", 4)) {
			dst = r->http;
			cap = sizeof(r->http);
		} else if (kl == 4 && !memcmp(p, "name", 4)) {
			dst = r->name;
			cap = sizeof(r->name);
		}
		if (dst) {
			if (vl >= cap || dst[0])
				return -EINVAL;	/* too long, or twice */
			memcpy(dst, eq + 1, vl);
			dst[vl] = '\0';
		}
		p = nl ? nl + 1 : end;
	}
	uint16_t port;
	if (conf_parse_hostport(r->rpc, NULL, 0, &port) < 0 || port == 0)
		return -EINVAL;
	if (r->http[0] && conf_parse_hostport(r->http, NULL, 0, &port) < 0)
		return -EINVAL;
	return 0;
}

int leader_lookup(struct etcd *e, const char *cluster_id, struct leader_rec *r, uint64_t *epoch)
{
	char key[LEADER_ID_MAX + 32];
	struct etcd_kv *kv;
	int rc;

	if (leader_key(key, sizeof(key), cluster_id, "leader"))
		return -EINVAL;
	kv = malloc(sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	rc = etcd_get(e, key, kv, NULL);
	if (rc == 0) {
		rc = leader_rec_decode(kv->value, kv->value_len, r);
		if (rc == 0)
			*epoch = (uint64_t)kv->create_rev;
		else
			rc = -EPROTO;
	}
	free(kv);
	return rc;
}

/* ---- the watching thread ---- */

struct leader_watch {
	struct etcd *etcd;
	char key[LEADER_ID_MAX + 32];
	int efd;
	pthread_t th;
	atomic_bool stop;
	atomic_bool refresh;

	pthread_mutex_t lock;
	/* protected by lock */
	bool known;
	struct leader_rec rec;
	uint64_t epoch;
};

static void notify(struct leader_watch *w)
{
	uint64_t one = 1;
	ssize_t k = write(w->efd, &one, sizeof(one));
	(void)k;
}

/* Publishes what etcd said: a record, or none. */
static void publish(struct leader_watch *w, const struct leader_rec *r, uint64_t epoch)
{
	bool changed;

	pthread_mutex_lock(&w->lock);
	if (r) {
		changed = !w->known || w->epoch != epoch || memcmp(&w->rec, r, sizeof(*r)) != 0;
		w->rec = *r;
		w->epoch = epoch;
		w->known = true;
	} else {
		changed = w->known;
		w->known = false;
	}
	pthread_mutex_unlock(&w->lock);
	if (changed)
		notify(w);
}

/* Any change of the key ends the watch; the loop reads it again. */
static int on_event(void *arg, const struct etcd_event *ev)
{
	(void)arg;
	(void)ev;
	return 1;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static void *watch_thread(void *arg)
{
	struct leader_watch *w = arg;
	struct etcd_kv *kv = malloc(sizeof(*kv));
	bool warned = false;

	if (!kv)
		return NULL;
	while (!atomic_load(&w->stop)) {
		int64_t rev = 0;
		struct leader_rec r;

		atomic_store(&w->refresh, false);
		int rc = etcd_get(w->etcd, w->key, kv, &rev);
		if (rc == -ECANCELED)
			break;
		if (rc == -EINTR)
			continue;	/* leader_watch_refresh */
		if (rc == 0 && leader_rec_decode(kv->value, kv->value_len, &r) < 0) {
			log_warn("etcd key %s holds no leader record; ignored", w->key);
			rc = -ENOENT;
		}
		if (rc == 0) {
			publish(w, &r, (uint64_t)kv->create_rev);
		} else if (rc == -ENOENT) {
			publish(w, NULL, 0);
		} else {
			if (!warned)
				log_warn("etcd %s: %s; following the last known master leader",
					 etcd_endpoint(w->etcd), etcd_last_error(w->etcd));
			warned = true;
			sleep_ms(RETRY_MS);
			continue;
		}
		if (warned)
			log_notice("etcd answers again");
		warned = false;
		if (atomic_load(&w->refresh))
			continue;
		/* Watch from the revision after the read, so no change between the
		 * read and the watch is missed. */
		rc = etcd_watch(w->etcd, w->key, rev + 1, WATCH_MAX_MS, on_event, NULL);
		if (rc == -ECANCELED)
			break;
		if (rc < 0 && rc != -EINTR && rc != -ESTALE)
			sleep_ms(RETRY_MS);
	}
	free(kv);
	return NULL;
}

struct leader_watch *leader_watch_start(const char *endpoints, const struct etcd_tls *tls,
					const char *cluster_id, char *err, size_t errlen)
{
	struct leader_watch *w = calloc(1, sizeof(*w));

	if (!w) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (leader_key(w->key, sizeof(w->key), cluster_id, "leader")) {
		snprintf(err, errlen, "bad cluster_id \"%s\" (1..%d of A-Z a-z 0-9 _ . -)",
			 cluster_id, LEADER_ID_MAX);
		goto out_free;
	}
	w->etcd = etcd_create(endpoints, 2000, tls, err, errlen);
	if (!w->etcd)
		goto out_free;
	w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w->efd < 0) {
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
		goto out_etcd;
	}
	pthread_mutex_init(&w->lock, NULL);
	if (pthread_create(&w->th, NULL, watch_thread, w) != 0) {
		snprintf(err, errlen, "cannot start the etcd watch thread");
		goto out_efd;
	}
	return w;

out_efd:
	pthread_mutex_destroy(&w->lock);
	close(w->efd);
out_etcd:
	etcd_destroy(w->etcd);
out_free:
	free(w);
	return NULL;
}

void leader_watch_stop(struct leader_watch *w)
{
	if (!w)
		return;
	atomic_store(&w->stop, true);
	etcd_cancel(w->etcd);
	pthread_join(w->th, NULL);
	etcd_destroy(w->etcd);
	close(w->efd);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

int leader_watch_fd(const struct leader_watch *w)
{
	return w->efd;
}

void leader_watch_ack(struct leader_watch *w)
{
	uint64_t v;
	ssize_t k = read(w->efd, &v, sizeof(v));
	(void)k;
}

int leader_watch_get(struct leader_watch *w, struct leader_rec *r, uint64_t *epoch)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&w->lock);
	if (w->known) {
		*r = w->rec;
		*epoch = w->epoch;
		rc = 0;
	}
	pthread_mutex_unlock(&w->lock);
	return rc;
}

void leader_watch_refresh(struct leader_watch *w)
{
	atomic_store(&w->refresh, true);
	etcd_interrupt(w->etcd);
}

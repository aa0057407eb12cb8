/* mlocate: the master's address, fixed or the leader etcd names; see
 * mlocate.h. */
#include "mlocate.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client_i.h"
#include "clock.h"
#include "etcd.h"
#include "kvpool.h"
#include "leader.h"
#include "log.h"

#define LOOKUP_TMO_MS 1000	/* one etcd request at most */

struct mlocate {
	pthread_mutex_t lookup;		/* one etcd request at a time */
	struct etcd *etcd;		/* under lookup */
	pthread_mutex_t lock;
	/* protected by lock */
	bool known;
	char addr[CONF_STR];
	char name[256];
	uint64_t epoch;			/* of the leader record */
	uint64_t max_epoch;		/* the newest HELLO epoch seen */
	uint64_t gen;			/* bumped at each lookup */
};

bool mlocate_ha(const struct kvp *kvp)
{
	return kvp->loc != NULL;
}

int mlocate_open(struct kvp *kvp)
{
	char err[256];
	struct etcd_tls tls;
	struct mlocate *l;

	if (!etcd_is_url(kvp->conf.cluster.master))
		return 0;
	if (!leader_cluster_id_ok(kvp->conf.master.cluster_id)) {
		log_err("kvpool: [master] cluster_id \"%s\": 1..%d of A-Z a-z 0-9 _ . -",
			kvp->conf.master.cluster_id, LEADER_ID_MAX);
		return KVP_EINVAL;
	}
	l = calloc(1, sizeof(*l));
	if (!l)
		return KVP_ENOMEM;
	etcd_tls_from(&tls, &kvp->conf);
	l->etcd = etcd_create(kvp->conf.cluster.master, LOOKUP_TMO_MS, &tls, err, sizeof(err));
	if (!l->etcd) {
		log_err("kvpool: cluster.master %s: %s", kvp->conf.cluster.master, err);
		free(l);
		return KVP_EINVAL;
	}
	pthread_mutex_init(&l->lookup, NULL);
	pthread_mutex_init(&l->lock, NULL);
	kvp->loc = l;
	return 0;
}

void mlocate_close(struct kvp *kvp)
{
	struct mlocate *l = kvp->loc;

	if (!l)
		return;
	etcd_destroy(l->etcd);
	pthread_mutex_destroy(&l->lookup);
	pthread_mutex_destroy(&l->lock);
	free(l);
	kvp->loc = NULL;
}

static bool cached(struct mlocate *l, char *addr, size_t cap, uint64_t *gen)
{
	bool ok;

	pthread_mutex_lock(&l->lock);
	ok = l->known;
	if (ok)
		snprintf(addr, cap, "%s", l->addr);
	*gen = l->gen;
	pthread_mutex_unlock(&l->lock);
	return ok;
}

int mlocate_get(struct kvp *kvp, char *addr, size_t cap, uint64_t deadline)
{
	struct mlocate *l = kvp->loc;
	struct leader_rec r;
	uint64_t epoch = 0, gen, gen2;
	int rc;

	if (!l) {
		snprintf(addr, cap, "%s", kvp->conf.cluster.master);
		return 0;
	}
	if (cached(l, addr, cap, &gen))
		return 0;
	pthread_mutex_lock(&l->lookup);
	/* another thread may have looked it up while we waited */
	if (cached(l, addr, cap, &gen2) || gen2 != gen) {
		pthread_mutex_unlock(&l->lookup);
		return cached(l, addr, cap, &gen2) ? 0 : KVP_ENOTLEADER;
	}
	uint64_t now = clock_now_ms();
	uint64_t left = deadline > now ? deadline - now : 1;
	etcd_set_timeout(l->etcd, left < LOOKUP_TMO_MS ? left : LOOKUP_TMO_MS);
	rc = leader_lookup(l->etcd, kvp->conf.master.cluster_id, &r, &epoch);
	pthread_mutex_lock(&l->lock);
	l->gen++;
	if (rc == 0) {
		l->known = true;
		snprintf(l->addr, sizeof(l->addr), "%s", r.rpc);
		snprintf(l->name, sizeof(l->name), "%s", r.name);
		l->epoch = epoch;
		snprintf(addr, cap, "%s", r.rpc);
	}
	pthread_mutex_unlock(&l->lock);
	pthread_mutex_unlock(&l->lookup);
	if (rc == 0) {
		log_debug("kvpool: leader %s at %s, epoch %llu", r.name, r.rpc,
			  (unsigned long long)epoch);
		return 0;
	}
	if (rc == -ENOENT)
		return KVP_ENOTLEADER;
	log_debug("kvpool: etcd %s: %s", etcd_endpoint(l->etcd), etcd_last_error(l->etcd));
	return rc == -ETIMEDOUT ? KVP_ETIMEDOUT : KVP_ECONN;
}

bool mlocate_moved(struct kvp *kvp, const char *addr, uint64_t epoch, uint64_t deadline)
{
	struct mlocate *l = kvp->loc;
	struct leader_rec r;
	uint64_t e = 0, now = clock_now_ms();
	int rc;

	if (!l || now >= deadline)
		return false;
	pthread_mutex_lock(&l->lookup);
	uint64_t left = deadline - now;
	etcd_set_timeout(l->etcd, left < LOOKUP_TMO_MS ? left : LOOKUP_TMO_MS);
	rc = leader_lookup(l->etcd, kvp->conf.master.cluster_id, &r, &e);
	pthread_mutex_unlock(&l->lookup);
	if (rc < 0 || (e <= epoch && strcmp(r.rpc, addr) == 0))
		return false;	/* none (yet), or still this one */
	if (e < epoch)
		return false;	/* an older record: not a move */
	pthread_mutex_lock(&l->lock);
	l->known = true;
	snprintf(l->addr, sizeof(l->addr), "%s", r.rpc);
	snprintf(l->name, sizeof(l->name), "%s", r.name);
	l->epoch = e;
	l->gen++;
	pthread_mutex_unlock(&l->lock);
	log_info("kvpool: the leader moved to %s (epoch %llu) during a call to %s", r.rpc,
		 (unsigned long long)e, addr);
	return true;
}

void mlocate_bad(struct kvp *kvp, const char *addr)
{
	struct mlocate *l = kvp->loc;

	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	if (l->known && strcmp(l->addr, addr) == 0)
		l->known = false;
	pthread_mutex_unlock(&l->lock);
}

bool mlocate_epoch_ok(struct kvp *kvp, const char *addr, uint64_t epoch)
{
	struct mlocate *l = kvp->loc;
	bool ok;

	if (!l)
		return true;
	pthread_mutex_lock(&l->lock);
	ok = epoch >= l->max_epoch;
	if (ok)
		l->max_epoch = epoch;
	else if (l->known && strcmp(l->addr, addr) == 0)
		l->known = false;
	pthread_mutex_unlock(&l->lock);
	if (!ok)
		log_notice("kvpool: master %s answered with epoch %llu, older than %llu: not the "
			   "leader", addr, (unsigned long long)epoch, (unsigned long long)l->max_epoch);
	return ok;
}

void mlocate_describe(struct kvp *kvp, struct kvp_master *out)
{
	struct mlocate *l = kvp->loc;

	memset(out, 0, sizeof(*out));
	if (!l) {
		snprintf(out->addr, sizeof(out->addr), "%s", kvp->conf.cluster.master);
		pthread_mutex_lock(&kvp->lock);
		out->epoch = kvp->epoch;
		pthread_mutex_unlock(&kvp->lock);
		return;
	}
	out->ha = 1;
	pthread_mutex_lock(&l->lock);
	snprintf(out->addr, sizeof(out->addr), "%s", l->known ? l->addr : "");
	snprintf(out->name, sizeof(out->name), "%s", l->known ? l->name : "");
	out->epoch = l->max_epoch;
	pthread_mutex_unlock(&l->lock);
}

/* pyput: ReplicateConfig to libkvpool's put options, the preferred segment
 * resolved to a node name, gathered values put in pieces (see pyput.h).
 *
 * Mooncake names a segment by its client's get_hostname() ("host:port");
 * kvpool by node name. A preferred segment that is this store's own
 * hostname means its embedded node; one that is another node's endpoint or
 * name means that node; prefer_alloc_in_same_node means a node on this
 * host. The node list is read with kvp_info and kept NODES_TTL_MS (under
 * store->plock).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "kvpool.h"
#include "net.h"
#include "pyput.h"
#include "pystore.h"
#include "pytypes.h"

#define NODES_TTL_MS 5000

/* The node @want names (a node name or a data endpoint), or a node on this
 * host when @want is NULL; "" when kvp_info does not know one. */
static void nodes_find(struct kvp *k, const char *want, char *out, size_t cap)
{
	struct kvp_info info;
	char host[64] = "";

	out[0] = 0;
	if (kvp_info(k, &info) < 0)
		return;
	if (!want && net_host_id(host, sizeof(host)) < 0)
		host[0] = 0;
	for (size_t i = 0; i < info.nnodes && !out[0]; i++) {
		const struct kvp_node_info *ni = &info.nodes[i];

		if (ni->draining)
			continue;
		if (want ? !strcmp(ni->name, want) || !strcmp(ni->endpoint, want) :
			   host[0] && !strcmp(ni->host_id, host))
			snprintf(out, cap, "%s", ni->name);
	}
	kvp_info_free(&info);
}

void put_node_name(struct store *s, struct kvp *k, const char *seg, char *out, size_t cap)
{
	static __thread char last_want[PUTOPT_SEG], last_got[64];
	static __thread uint64_t last_at;

	out[0] = 0;
	if (!seg) {
		/* A node on this host: ours, else one kvp_info places here. */
		if (s->nemb) {
			snprintf(out, cap, "%s", s->emb[0]->name);
			return;
		}
		pthread_mutex_lock(&s->plock);
		if (!s->nodes_known) {
			nodes_find(k, NULL, s->local_node, sizeof(s->local_node));
			s->nodes_known = true;
		}
		snprintf(out, cap, "%s", s->local_node);
		pthread_mutex_unlock(&s->plock);
		return;
	}
	if (!seg[0])
		return;
	/* Ours: setup()'s embedded node, named the way get_hostname() says. */
	if (s->nemb && (!strcmp(seg, s->hostport) || !strcmp(seg, s->hostname))) {
		snprintf(out, cap, "%s", s->emb[0]->name);
		return;
	}
	for (size_t i = 0; i < s->nemb; i++)
		if (!strcmp(seg, s->emb[i]->name)) {
			snprintf(out, cap, "%s", seg);
			return;
		}
	/* Another process's segment, by endpoint or name: one lookup per name
	 * and thread every NODES_TTL_MS. */
	if (strcmp(last_want, seg) || clock_now_ms() - last_at > NODES_TTL_MS) {
		snprintf(last_want, sizeof(last_want), "%s", seg);
		nodes_find(k, seg, last_got, sizeof(last_got));
		last_at = clock_now_ms();
	}
	snprintf(out, cap, "%s", last_got[0] ? last_got : seg);
}

/* The node name a put should prefer, "" for none. */
static void pref_node(struct store *s, struct kvp *k, const struct putopt *po, char *out,
		      size_t cap)
{
	out[0] = 0;
	if (po->preferred[0])
		put_node_name(s, k, po->preferred, out, cap);
	else if (po->same_node)
		put_node_name(s, k, NULL, out, cap);
}

/* The put itself: n values in bufs/lens, or (bufs NULL) in pieces. */
static int put_raw(struct store *s, struct kvp *k, const struct putopt *po, size_t n,
		   const char *const *keys, const void *const *bufs, const size_t *lens,
		   const struct kvp_iov *iov, const size_t *first, int *res)
{
	char pref[64];
	struct kvp_put_opts o = {
		.flags = (po->upsert ? KVP_PUT_UPSERT : 0) | (po->soft_pin ? KVP_PUT_SOFT_PIN : 0),
		.replicas = (uint32_t)po->replicas,
		.pin_ttl_ms = po->soft_pin_ttl_ms,
		.pred = po->pred,
	};

	pref_node(s, k, po, pref, sizeof(pref));
	o.preferred_segment = pref[0] ? pref : NULL;
	if (!bufs)
		return kvp_batch_put_iov(k, n, keys, iov, first, &o, res);
	if (n == 1 && !po->pred) {
		res[0] = kvp_put_opts(k, keys[0], bufs[0], lens[0], &o);
		return 0;
	}
	return kvp_batch_put_opts(k, n, keys, bufs, lens, &o, res);
}

/* Options checked, the put, then the hard pins. */
static int put_do(struct store *s, const struct putopt *po, size_t n, const char *const *keys,
		  const void *const *bufs, const size_t *lens, const struct kvp_iov *iov,
		  const size_t *first, int *res)
{
	struct kvp *k = s->kvp;
	int rc;

	if (!po->valid || (po->ngroups >= 0 && (size_t)po->ngroups != n)) {
		for (size_t i = 0; i < n; i++)
			res[i] = KVP_EINVAL;
		return 0;
	}
	rc = put_raw(s, k, po, n, keys, bufs, lens, iov, first, res);
	for (size_t i = 0; rc == 0 && po->hard_pin && i < n; i++)
		if (res[i] == 0)
			res[i] = kvp_pin(k, keys[i], HARD_PIN_MS);
	return rc;
}

int put_many(struct store *s, const struct putopt *po, size_t n, const char *const *keys,
	     const void *const *bufs, const size_t *lens, int *res)
{
	return put_do(s, po, n, keys, bufs, lens, NULL, NULL, res);
}

int put_gather(struct store *s, const struct putopt *po, size_t n, const char *const *keys,
	       const struct kvp_iov *iov, const size_t *first, int *res)
{
	return put_do(s, po, n, keys, NULL, NULL, iov, first, res);
}

/* mten: tenants at the master (see mten.h). A key's owner is the first
 * tenant (in file order) with a write prefix over it: its bytes, objects
 * and quota. Rights are checked where keys enter a request (mkeys.c
 * find_visible, mput.c put_one, LIST, REMOVE_PREFIX).
 */
#include "mten.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "kvpool.h"
#include "log.h"
#include "master_i.h"
#include "mlease.h"
#include "wire.h"

void mten_destroy(struct mten *t)
{
	tenant_tab_free(&t->tab);
	free(t->st);
	t->st = NULL;
}

static int owner(const struct mten *t, const uint8_t *key, size_t klen)
{
	for (size_t i = 0; i < t->tab.n; i++) {
		const struct tenant *x = &t->tab.v[i];
		if (x->write_all)
			continue;
		for (uint32_t j = 0; j < x->nwrite; j++)
			if (klen >= x->write[j]->len && memcmp(key, x->write[j]->p, x->write[j]->len) == 0)
				return (int)i;
	}
	return -1;
}

/* Counts every complete object again (after a load: owners may differ). */
static void recount(struct master *m)
{
	for (size_t i = 0; i < m->ten.tab.n; i++)
		m->ten.st[i].bytes = m->ten.st[i].objects = 0;
	for (struct obj *o = objtab_seek(&m->objs, (const uint8_t *)"", 0, false); o;
	     o = objtab_next(&m->objs, o))
		if (obj_complete(o))
			mten_count(m, o, 1);
}

int mten_init(struct master *m, char *err, size_t errlen)
{
	struct mten *t = &m->ten;

	memset(t, 0, sizeof(*t));
	if (!m->conf.cluster.tenants_file[0])
		return 0;
	if (tenant_load_cluster(&t->tab, m->conf.cluster.tenants_file, m->conf.cluster.token,
				err, errlen))
		return KVP_EINVAL;
	t->st = calloc(t->tab.n, sizeof(*t->st));
	if (!t->st) {
		mten_destroy(t);
		log_seterr(err, errlen, "out of memory");
		return KVP_ENOMEM;
	}
	t->on = true;
	log_info("tenants: %zu from %s, and the cluster token (admin)", t->tab.n - 1,
		 m->conf.cluster.tenants_file);
	return 0;
}

int mten_reload(struct master *m, char *err, size_t errlen)
{
	struct mten *t = &m->ten;
	struct tenant_tab nt;

	if (!t->on)
		return 0;
	if (tenant_load_cluster(&nt, m->conf.cluster.tenants_file, m->conf.cluster.token, err,
				errlen))
		return KVP_EINVAL;
	struct mten_stats *st = calloc(nt.n, sizeof(*st));
	if (!st) {
		tenant_tab_free(&nt);
		log_seterr(err, errlen, "out of memory");
		return KVP_ENOMEM;
	}
	for (size_t i = 0; i < nt.n; i++) {
		const struct tenant *o = tenant_find_name(&t->tab, nt.v[i].name);
		if (o)
			st[i] = t->st[o - t->tab.v];
	}
	unsigned revoked = 0;
	for (struct master_client *c = m->clients; c; c = c->next) {
		if (c->tenant < 0)
			continue;
		const struct tenant *o = &t->tab.v[c->tenant];
		const struct tenant *n = tenant_find_name(&nt, o->name);
		if (n && n->token_len == o->token_len && !memcmp(n->token, o->token, o->token_len) &&
		    (n->admin || c->role == WIRE_ROLE_CLIENT)) {
			c->tenant = (int)(n - nt.v);
		} else {
			c->tenant = -1;
			c->tenant_revoked = true;
			revoked++;
		}
	}
	mten_destroy(t);
	t->tab = nt;
	t->st = st;
	t->gen++;
	recount(m);
	log_notice("tenants: reloaded %zu from %s; %u connection(s) revoked", nt.n - 1,
		   m->conf.cluster.tenants_file, revoked);
	return 0;
}

int mten_hello(struct master *m, struct master_client *c, const uint8_t *tok, size_t n,
	       unsigned role)
{
	struct mten *t = &m->ten;

	c->tenant = -1;
	if (!t->on)
		return 0;	/* the cluster token alone: checked by op_hello */
	const struct tenant *x = tenant_find_token(&t->tab, tok, n);
	if (!x)
		return KVP_EAUTH;
	if (!x->admin && role != WIRE_ROLE_CLIENT) {
		t->st[x - t->tab.v].refused++;
		return KVP_EPERM;
	}
	c->tenant = (int)(x - t->tab.v);
	return 0;
}

const struct tenant *mten_of(const struct master *m, const struct master_client *c)
{
	/* no rights: a connection before HELLO or revoked (a parked put of
	 * its retried after the reload) */
	static const struct tenant none = { .name = "none" };

	if (!m->ten.on || !c)
		return NULL;
	return c->tenant < 0 ? &none : &m->ten.tab.v[c->tenant];
}

int mten_check(struct master *m, struct master_client *c, const uint8_t *key, size_t klen,
	       bool write)
{
	const struct tenant *x = mten_of(m, c);

	if (!x || tenant_may(x, key, klen, write ? TENANT_WRITE : TENANT_READ))
		return 0;
	if (c->tenant >= 0)
		m->ten.st[c->tenant].refused++;
	return KVP_EPERM;
}

bool mten_may_read(const struct master *m, const struct master_client *c, const uint8_t *key,
		   size_t klen)
{
	return tenant_may(mten_of(m, c), key, klen, TENANT_READ);
}

int mten_check_prefix(struct master *m, struct master_client *c, const uint8_t *p, size_t n,
		      bool write)
{
	const struct tenant *x = mten_of(m, c);

	if (!x || tenant_may_prefix(x, p, n, write ? TENANT_WRITE : TENANT_READ))
		return 0;
	if (c->tenant >= 0)
		m->ten.st[c->tenant].refused++;
	return KVP_EPERM;
}

void mten_count(struct master *m, const struct obj *o, int sign)
{
	if (!m->ten.on)
		return;
	int i = owner(&m->ten, obj_key(o), o->key_len);
	if (i < 0)
		return;
	struct mten_stats *s = &m->ten.st[i];
	if (sign > 0) {
		s->objects++;
		s->bytes += o->value_len;
	} else {
		s->objects -= s->objects ? 1 : 0;
		s->bytes -= s->bytes >= o->value_len ? o->value_len : s->bytes;
	}
}

/* Bytes of the owner's puts in flight (pending objects). */
static uint64_t pending_bytes(struct master *m, int i)
{
	uint64_t sum = 0;

	for (size_t k = 0; k < m->pending.n; k++) {
		const struct obj *o = m->pending.v[k];
		if (owner(&m->ten, obj_key(o), o->key_len) == i)
			sum += o->value_len;
	}
	return sum;
}

struct victim {
	struct obj *o;
	uint32_t age;
};

static int by_age_desc(const void *a, const void *b)
{
	uint32_t x = ((const struct victim *)a)->age, y = ((const struct victim *)b)->age;

	return x < y ? 1 : x > y ? -1 : 0;
}

/* Evicts owner i's own least recently used objects until at least need
 * bytes went; returns the bytes freed. */
static uint64_t evict_own(struct master *m, int i, uint64_t need, const uint8_t *key,
			  size_t klen, const struct obj *keep)
{
	const struct tenant *x = &m->ten.tab.v[i];
	struct victim *v = NULL;
	size_t n = 0, cap = 0;
	uint64_t freed = 0;

	for (uint32_t j = 0; j < x->nwrite; j++) {
		const struct tenant_prefix *p = x->write[j];
		for (struct obj *o = objtab_seek(&m->objs, (const uint8_t *)p->p, p->len, false);
		     o && o->key_len >= p->len && !memcmp(obj_key(o), p->p, p->len);
		     o = objtab_next(&m->objs, o)) {
			if (!obj_complete(o) || obj_leased(m, o) || obj_pinned(m, o) || o == keep ||
			    (o->key_len == klen && !memcmp(obj_key(o), key, klen)) ||
			    owner(&m->ten, obj_key(o), o->key_len) != i)
				continue;
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 64;
				struct victim *nv = realloc(v, nc * sizeof(*nv));
				if (!nv)
					goto out_free;
				v = nv;
				cap = nc;
			}
			bool seen = false;	/* under an earlier prefix of its too */
			for (uint32_t k = 0; k < j && !seen; k++)
				seen = o->key_len >= x->write[k]->len &&
				       !memcmp(obj_key(o), x->write[k]->p, x->write[k]->len);
			if (!seen)
				v[n++] = (struct victim){ o, obj_age(m, o) };
		}
	}
	qsort(v, n, sizeof(*v), by_age_desc);
	for (size_t k = 0; k < n && freed < need; k++) {
		freed += v[k].o->value_len;
		m->ten.st[i].quota_evictions++;
		mobj_destroy(m, v[k].o, true);	/* objects only go: v stays valid */
	}
out_free:
	free(v);
	return freed;
}

int mten_quota(struct master *m, const uint8_t *key, size_t klen, uint64_t vlen,
	       const struct obj *keep)
{
	if (!m->ten.on)
		return 0;
	int i = owner(&m->ten, key, klen);
	if (i < 0 || !m->ten.tab.v[i].quota_bytes)
		return 0;
	struct mten_stats *s = &m->ten.st[i];
	uint64_t quota = m->ten.tab.v[i].quota_bytes;
	uint64_t used = s->bytes + pending_bytes(m, i);
	if (vlen <= quota && used + vlen <= quota)
		return 0;
	if (vlen <= quota) {
		/* a 1/64 of the quota more: a tenant at its quota does not scan
		 * its objects on every put */
		uint64_t over = used + vlen - quota, slack = quota / 64;
		if (evict_own(m, i, over + slack, key, klen, keep) >= over)
			return 0;
	}
	s->quota_refused++;
	return KVP_ENOSPC;
}

bool mten_revoked(const struct master_client *c)
{
	return c->tenant_revoked;
}

void mten_metrics(const struct master *m, struct sbuf *b)
{
	const struct mten *t = &m->ten;
	static const struct {
		const char *name, *type, *help;
		size_t off;
	} rows[] = {
		{ "kvpool_master_tenant_bytes", "gauge",
		  "Value bytes of the complete objects a tenant owns (its write prefixes).",
		  offsetof(struct mten_stats, bytes) },
		{ "kvpool_master_tenant_objects", "gauge", "Complete objects a tenant owns.",
		  offsetof(struct mten_stats, objects) },
		{ "kvpool_master_tenant_refused_total", "counter",
		  "Requests and batch items refused with KVP_EPERM (no right to the key).",
		  offsetof(struct mten_stats, refused) },
		{ "kvpool_master_tenant_quota_evictions_total", "counter",
		  "A tenant's own objects evicted to fit its puts in its quota.",
		  offsetof(struct mten_stats, quota_evictions) },
		{ "kvpool_master_tenant_quota_refused_total", "counter",
		  "Puts refused (KVP_ENOSPC): over the quota even after evicting its own objects.",
		  offsetof(struct mten_stats, quota_refused) },
	};

	if (!t->on)
		return;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", rows[r].name, rows[r].help,
			  rows[r].name, rows[r].type);
		for (size_t i = 0; i < t->tab.n; i++) {
			uint64_t val;
			memcpy(&val, (const char *)&t->st[i] + rows[r].off, sizeof(val));
			sb_printf(b, "%s{tenant=\"%s\"} %" PRIu64 "\n", rows[r].name,
				  t->tab.v[i].name, val);
		}
	}
	sb_printf(b, "# HELP kvpool_master_tenant_quota_bytes A tenant's byte quota (0: none).\n"
		  "# TYPE kvpool_master_tenant_quota_bytes gauge\n");
	for (size_t i = 0; i < t->tab.n; i++)
		sb_printf(b, "kvpool_master_tenant_quota_bytes{tenant=\"%s\"} %" PRIu64 "\n",
			  t->tab.v[i].name, t->tab.v[i].quota_bytes);
}

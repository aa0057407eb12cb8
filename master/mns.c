/* mns: namespaces and their model fingerprints (see mns.h). A master holds
 * few namespaces (one per model layout), so lookups scan a short array.
 */
#include "mns.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "log.h"
#include "master_i.h"

#define NS_MSG_MAX 1024

void mns_destroy(struct mns *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->v[i]);
	free(t->v);
	t->v = NULL;
	t->n = t->cap = 0;
}

static struct mns_ns *ns_find(const struct mns *t, const uint8_t *name, size_t n)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->v[i]->name_len == n && memcmp(t->v[i]->name, name, n) == 0)
			return t->v[i];
	return NULL;
}

static bool client_has(const struct master_client *c, const struct mns_ns *ns)
{
	for (uint32_t i = 0; i < c->nns; i++)
		if (c->ns[i] == ns)
			return true;
	return false;
}

static int client_add(struct master_client *c, struct mns_ns *ns)
{
	if (client_has(c, ns))
		return 0;
	if (c->nns == c->ns_cap) {
		uint32_t cap = c->ns_cap ? c->ns_cap * 2 : 4;
		struct mns_ns **v = realloc(c->ns, cap * sizeof(*v));
		if (!v)
			return KVP_ENOMEM;
		c->ns = v;
		c->ns_cap = cap;
	}
	c->ns[c->nns++] = ns;
	ns->clients++;
	return 0;
}

static void copy_str(char *dst, const uint8_t *p, size_t n)
{
	memcpy(dst, p, n);
	dst[n] = 0;
}

/* Counts the complete objects already under "name/" (put before the
 * namespace was declared, or reported by nodes after a restart). */
static void ns_count_existing(struct master *m, struct mns_ns *ns)
{
	char prefix[WIRE_NS_NAME_MAX + 2];
	size_t plen = (size_t)snprintf(prefix, sizeof(prefix), "%s/", ns->name);

	for (struct obj *o = objtab_seek(&m->objs, (const uint8_t *)prefix, plen, false);
	     o && o->key_len >= plen && memcmp(obj_key(o), prefix, plen) == 0;
	     o = objtab_next(&m->objs, o)) {
		if (!obj_complete(o))
			continue;
		ns->keys++;
		ns->bytes += o->value_len;
	}
}

static struct mns_ns *ns_create(struct master *m, const uint8_t *name, size_t nlen)
{
	struct mns *t = &m->ns;

	if (t->n >= MNS_MAX)
		return NULL;
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 8;
		struct mns_ns **v = realloc(t->v, cap * sizeof(*v));
		if (!v)
			return NULL;
		t->v = v;
		t->cap = cap;
	}
	struct mns_ns *ns = calloc(1, sizeof(*ns));
	if (!ns)
		return NULL;
	copy_str(ns->name, name, nlen);
	ns->name_len = nlen;
	t->v[t->n++] = ns;
	return ns;
}

static void reply(struct wbuf *b, int status, uint64_t fp, const char *msg)
{
	wb_status(b, status);
	wb_u64(b, fp);
	wb_cstr(b, msg);
}

int mns_declare(struct master *m, struct master_client *c, struct rbuf *r, struct wbuf *b)
{
	size_t nlen, mlen, dlen, llen;
	const uint8_t *name = rb_str(r, &nlen);
	const uint8_t *model = rb_str(r, &mlen);
	const uint8_t *dtype = rb_str(r, &dlen);
	uint32_t page_size = rb_u32(r);
	const uint8_t *layout = rb_str(r, &llen);
	uint32_t tp = rb_u32(r);
	char msg[NS_MSG_MAX];

	if (!rb_done(r))
		return KVP_EPROTO;
	c->ns_tried = true;	/* held to its declarations from now on, refused or not */
	if (!wire_ns_name_ok(name, nlen)) {
		reply(b, KVP_EINVAL, 0, "namespace name: 1-128 characters of [A-Za-z0-9._-]");
		return 0;
	}
	if (!wire_ns_field_ok(model, mlen, WIRE_NS_MODEL_MAX) ||
	    !wire_ns_field_ok(dtype, dlen, WIRE_NS_FIELD_MAX) ||
	    !wire_ns_field_ok(layout, llen, WIRE_NS_FIELD_MAX) || !page_size || !tp) {
		reply(b, KVP_EINVAL, 0, "namespace fields: model (1-256), dtype and layout "
		      "(1-64 printable characters), page_size and tp >= 1");
		return 0;
	}
	uint64_t fp = wire_ns_fingerprint(model, mlen, dtype, dlen, page_size, layout, llen, tp);
	struct mns_ns *ns = ns_find(&m->ns, name, nlen);
	if (ns && ns->fp != fp) {
		snprintf(msg, sizeof(msg),
			 "namespace %s is model=%s dtype=%s page_size=%" PRIu32 " layout=%s tp=%"
			 PRIu32 " (fingerprint %016" PRIx64 "); this declaration is model=%.*s "
			 "dtype=%.*s page_size=%" PRIu32 " layout=%.*s tp=%" PRIu32
			 " (fingerprint %016" PRIx64 ")",
			 ns->name, ns->model, ns->dtype, ns->page_size, ns->layout, ns->tp, ns->fp,
			 (int)mlen, (const char *)model, (int)dlen, (const char *)dtype, page_size,
			 (int)llen, (const char *)layout, tp, fp);
		reply(b, KVP_ENSMISMATCH, ns->fp, msg);
		return 0;
	}
	if (!ns) {
		ns = ns_create(m, name, nlen);
		if (!ns) {
			reply(b, m->ns.n >= MNS_MAX ? KVP_ELIMIT : KVP_ENOMEM, 0,
			      "cannot create the namespace (limit or memory)");
			return 0;
		}
		copy_str(ns->model, model, mlen);
		copy_str(ns->dtype, dtype, dlen);
		copy_str(ns->layout, layout, llen);
		ns->page_size = page_size;
		ns->tp = tp;
		ns->fp = fp;
		ns_count_existing(m, ns);
		log_info("namespace %s declared by %s: model=%s dtype=%s page_size=%" PRIu32
			 " layout=%s tp=%" PRIu32 " (fingerprint %016" PRIx64 ")", ns->name,
			 c->name, ns->model, ns->dtype, ns->page_size, ns->layout, ns->tp, ns->fp);
	}
	int rc = client_add(c, ns);
	reply(b, rc, fp, rc ? "out of memory" : "");
	return 0;
}

int mns_list(struct master *m, struct wbuf *b)
{
	wb_u32(b, (uint32_t)m->ns.n);
	for (size_t i = 0; i < m->ns.n; i++) {
		const struct mns_ns *ns = m->ns.v[i];
		wb_cstr(b, ns->name);
		wb_cstr(b, ns->model);
		wb_cstr(b, ns->dtype);
		wb_u32(b, ns->page_size);
		wb_cstr(b, ns->layout);
		wb_u32(b, ns->tp);
		wb_u64(b, ns->fp);
		wb_u64(b, ns->keys);
		wb_u64(b, ns->bytes);
		wb_u32(b, ns->clients);
	}
	return 0;
}

int mns_check(const struct master *m, const struct master_client *c,
	      const uint8_t *key, size_t klen, bool write)
{
	if (!m->ns.n || !c || (!write && !c->ns_tried))
		return 0;
	size_t n = wire_key_ns(key, klen);
	if (!n)
		return 0;
	const struct mns_ns *ns = ns_find(&m->ns, key, n);
	if (!ns || client_has(c, ns))
		return 0;
	return KVP_ENSMISMATCH;
}

uint32_t mns_page_size(const struct master *m, const uint8_t *key, size_t klen)
{
	if (!m->ns.n)
		return 0;
	size_t n = wire_key_ns(key, klen);
	const struct mns_ns *ns = n ? ns_find(&m->ns, key, n) : NULL;
	return ns ? ns->page_size : 0;
}

void mns_count(struct master *m, const struct obj *o, int sign)
{
	mten_count(m, o, sign);	/* the one place complete objects appear and go */
	if (!m->ns.n)
		return;
	size_t n = wire_key_ns(obj_key(o), o->key_len);
	struct mns_ns *ns = n ? ns_find(&m->ns, obj_key(o), n) : NULL;
	if (!ns)
		return;
	if (sign > 0) {
		ns->keys++;
		ns->bytes += o->value_len;
	} else {
		ns->keys -= ns->keys ? 1 : 0;
		ns->bytes -= ns->bytes >= o->value_len ? o->value_len : ns->bytes;
	}
}

void mns_client_gone(struct master *m, struct master_client *c)
{
	(void)m;
	for (uint32_t i = 0; i < c->nns; i++)
		c->ns[i]->clients--;
	free(c->ns);
	c->ns = NULL;
	c->nns = c->ns_cap = 0;
}

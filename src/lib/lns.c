/* lns: namespace declarations of a handle (see lns.h). */
#include "lns.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "client_i.h"
#include "kvpool.h"
#include "log.h"
#include "mcall.h"
#include "sock.h"

#define NS_REPLY_MAX 4096

static void encode(struct wbuf *b, const struct lns_decl *d)
{
	wb_cstr(b, d->name);
	wb_cstr(b, d->model);
	wb_cstr(b, d->dtype);
	wb_u32(b, d->page_size);
	wb_cstr(b, d->layout);
	wb_u32(b, d->tp);
}

static bool field(char *dst, size_t cap, const char *s, size_t max)
{
	if (!s || !wire_ns_field_ok((const uint8_t *)s, strlen(s), max))
		return false;
	snprintf(dst, cap, "%s", s);
	return true;
}

/* ns -> d: false when a field breaks the rules of wire.h. */
static bool decl_make(struct lns_decl *d, const struct kvp_ns *ns)
{
	memset(d, 0, sizeof(*d));
	if (!ns->name || !wire_ns_name_ok((const uint8_t *)ns->name, strlen(ns->name)))
		return false;
	snprintf(d->name, sizeof(d->name), "%s", ns->name);
	d->page_size = ns->page_size;
	d->tp = ns->tp;
	return field(d->model, sizeof(d->model), ns->model, WIRE_NS_MODEL_MAX) &&
	       field(d->dtype, sizeof(d->dtype), ns->dtype, WIRE_NS_FIELD_MAX) &&
	       field(d->layout, sizeof(d->layout), ns->layout, WIRE_NS_FIELD_MAX) &&
	       d->page_size && d->tp;
}

int lns_declare_parse(const uint8_t *body, size_t len, char *msg, size_t cap)
{
	struct rbuf r;
	size_t mlen;

	rb_init(&r, body, len);
	int status = rb_status(&r);
	rb_u64(&r);
	const uint8_t *m = rb_str(&r, &mlen);
	if (!rb_ok(&r))
		return KVP_EPROTO;
	if (msg && cap)
		snprintf(msg, cap, "%.*s", (int)mlen, (const char *)m);
	return status;
}

/* Adds or replaces d in the handle's list; connections opened before
 * this lack it and are dropped when next taken or given back. */
static int remember(struct kvp *kvp, const struct lns_decl *d)
{
	int rc = 0;

	pthread_mutex_lock(&kvp->lock);
	size_t i;
	for (i = 0; i < kvp->nns; i++)
		if (strcmp(kvp->ns[i].name, d->name) == 0)
			break;
	if (i == kvp->nns) {
		struct lns_decl *v = realloc(kvp->ns, (kvp->nns + 1) * sizeof(*v));
		if (v) {
			kvp->ns = v;
			kvp->nns++;
		} else {
			rc = KVP_ENOMEM;
		}
	}
	if (!rc && memcmp(&kvp->ns[i], d, sizeof(*d)) != 0) {
		kvp->ns[i] = *d;
		kvp->ns_gen++;
	}
	pthread_mutex_unlock(&kvp->lock);
	return rc;
}

int kvp_declare_namespace_msg(struct kvp *kvp, const struct kvp_ns *ns, char *msg, size_t cap)
{
	struct mcall c = { .op = WIRE_OP_NS_DECLARE };
	struct lns_decl d;
	int rc;

	if (msg && cap)
		msg[0] = 0;
	if (!kvp || !ns)
		return KVP_EINVAL;
	if (!decl_make(&d, ns)) {
		if (msg && cap)
			snprintf(msg, cap, "namespace: name 1-128 of [A-Za-z0-9._-]; model 1-256, "
				 "dtype and layout 1-64 printable characters; page_size, tp >= 1");
		return KVP_EINVAL;
	}
	wb_init(&c.body);
	encode(&c.body, &d);
	rc = c.body.oom ? KVP_ENOMEM : mc_call1(kvp, &c, sock_deadline(kvp));
	if (rc == 0)
		rc = lns_declare_parse(c.rep, c.rep_len, msg, cap);
	wb_free(&c.body);
	free(c.rep);
	if (rc == 0)
		rc = remember(kvp, &d);
	return rc;
}

int kvp_declare_namespace(struct kvp *kvp, const struct kvp_ns *ns)
{
	return kvp_declare_namespace_msg(kvp, ns, NULL, 0);
}

int lns_redeclare(struct kvp *kvp, int fd, uint64_t deadline, uint64_t *gen)
{
	struct lns_decl *v = NULL;
	size_t n;
	struct wbuf b;
	int rc = 0;

	pthread_mutex_lock(&kvp->lock);
	n = kvp->nns;
	*gen = kvp->ns_gen;
	if (n && (v = malloc(n * sizeof(*v))) != NULL)
		memcpy(v, kvp->ns, n * sizeof(*v));
	pthread_mutex_unlock(&kvp->lock);
	if (!n)
		return 0;
	if (!v)
		return KVP_ENOMEM;
	wb_init(&b);
	for (size_t i = 0; i < n; i++) {
		size_t start = wire_begin(&b);
		encode(&b, &v[i]);
		wire_finish(&b, start, WIRE_OP_NS_DECLARE, 0, 0, i + 1, 0);
	}
	if (b.oom) {
		rc = KVP_ENOMEM;
	} else {
		struct iovec iov = { b.p, b.len };
		rc = sock_sendv(fd, &iov, 1, deadline);
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct wire_hdr h;
		uint8_t *body;
		char msg[512];

		rc = sock_recv_frame(fd, NS_REPLY_MAX, deadline, &h, &body);
		if (rc)
			break;
		if (h.opcode != WIRE_OP_NS_DECLARE || h.reqid != i + 1)
			rc = KVP_EPROTO;
		else
			rc = h.status ? h.status : lns_declare_parse(body, h.body_len, msg, sizeof(msg));
		if (rc == KVP_ENSMISMATCH) {
			/* Another process declared other fields first (after a
			 * master restart): this connection goes on without the
			 * namespace, so its keys are refused item by item and
			 * every other key still works. */
			log_warn("namespace %s: the master refuses it: %s", v[i].name, msg);
			rc = 0;
		}
		free(body);
	}
	wb_free(&b);
	free(v);
	return rc;
}

int lns_list_parse(const uint8_t *body, size_t len, struct kvp_ns_info **out, size_t *nout)
{
	struct kvp_ns_info *v = NULL;
	struct rbuf r;
	uint32_t n;
	int rc = 0;

	*out = NULL;
	*nout = 0;
	rb_init(&r, body, len);
	n = rb_count(&r, 2 * 4 + 4 * 2 + 3 * 8 + 4);
	if (!rb_ok(&r))
		return KVP_EPROTO;
	v = calloc(n ? n : 1, sizeof(*v));
	if (!v)
		return KVP_ENOMEM;
	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		struct kvp_ns_info *ni = &v[i];
		rb_cstr(&r, ni->name, sizeof(ni->name));
		rb_cstr(&r, ni->model, sizeof(ni->model));
		rb_cstr(&r, ni->dtype, sizeof(ni->dtype));
		ni->page_size = rb_u32(&r);
		rb_cstr(&r, ni->layout, sizeof(ni->layout));
		ni->tp = rb_u32(&r);
		ni->fingerprint = rb_u64(&r);
		ni->keys = rb_u64(&r);
		ni->bytes = rb_u64(&r);
		ni->clients = rb_u32(&r);
		if (!rb_ok(&r))
			rc = KVP_EPROTO;
	}
	if (rc == 0 && !rb_done(&r))
		rc = KVP_EPROTO;
	if (rc) {
		free(v);
		return rc;
	}
	*out = v;
	*nout = n;
	return 0;
}

int kvp_namespaces(struct kvp *kvp, struct kvp_ns_info **out, size_t *nout)
{
	struct mcall c = { .op = WIRE_OP_NS_LIST };
	int rc;

	if (!kvp || !out || !nout)
		return KVP_EINVAL;
	*out = NULL;
	*nout = 0;
	wb_init(&c.body);
	rc = mc_call1(kvp, &c, sock_deadline(kvp));
	if (rc == 0)
		rc = lns_list_parse(c.rep, c.rep_len, out, nout);
	wb_free(&c.body);
	free(c.rep);
	return rc;
}

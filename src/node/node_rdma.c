/* node_rdma: the node's RDMA side (see node_rdma.h). The node never posts
 * work requests: clients READ and WRITE the registered segment one-sided,
 * so its queue pairs only need to reach RTS and stay there.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "log.h"
#include "node_rdma.h"
#include "rdma.h"

struct node_rdma {
	struct rdma_ctx ctx;
	struct rdma_region seg;
	struct wbuf blob;
	char names[RDMA_MAX_DEVS * RDMA_NAME_MAX];
	uint64_t qp_sets, connects, refused;
};

bool node_rdma_wanted(const struct kvp_conf *conf)
{
	return conf->rdma.enabled || !strcmp(conf->client.protocol, "rdma");
}

int node_rdma_start(const struct kvp_conf *conf, void *base, uint64_t len, uint64_t map_off,
		    struct node_rdma **out)
{
	struct node_rdma *r;
	struct rdma_info info;
	char err[512];

	*out = NULL;
	if (!node_rdma_wanted(conf))
		return 0;
	r = calloc(1, sizeof(*r));
	if (!r) {
		log_err("rdma: out of memory: TCP only");
		return 0;
	}
	wb_init(&r->blob);
	if (rdma_open(&r->ctx, conf->rdma.devices, err, sizeof(err)) < 0) {
		log_warn("rdma: %s: serving over TCP only", err);
		goto out_free;
	}
	if (rdma_region_reg(&r->ctx, base, len, true, &r->seg, err, sizeof(err)) < 0) {
		log_err("rdma: registering the %llu-byte segment failed: %s; serving over TCP only",
			(unsigned long long)len, err);
		goto out_close;
	}
	rdma_region_info(&r->ctx, &r->seg, &info);
	info.map_off = map_off;
	if (rdma_info_encode(&r->blob, &info) < 0 || r->blob.oom) {
		log_err("rdma: cannot encode the segment's rdma_info: serving over TCP only");
		goto out_dereg;
	}
	for (unsigned d = 0; d < r->ctx.ndev; d++) {
		size_t k = strlen(r->names);

		snprintf(r->names + k, sizeof(r->names) - k, "%s%s", d ? "," : "",
			 r->ctx.dev[d].name);
	}
	log_notice("rdma: segment registered on %s (%u region%s on the first device)", r->names,
		   r->seg.dev[0].n, r->seg.dev[0].n == 1 ? "" : "s");
	*out = r;
	return 0;

out_dereg:
	rdma_region_dereg(&r->seg);
out_close:
	rdma_close(&r->ctx);
out_free:
	wb_free(&r->blob);
	free(r);
	return 0;
}

void node_rdma_stop(struct node_rdma *r)
{
	if (!r)
		return;
	rdma_region_dereg(&r->seg);
	rdma_close(&r->ctx);
	wb_free(&r->blob);
	free(r);
}

void node_rdma_blob(const struct node_rdma *r, const void **p, size_t *n)
{
	*p = r ? r->blob.p : NULL;
	*n = r ? r->blob.len : 0;
}

int node_rdma_connect(struct node_rdma *r, const uint8_t *body, size_t n,
		      struct rdma_qps **out, struct wbuf *reply)
{
	struct rdma_qp_rec theirs, mine;
	struct rdma_dev *dev = NULL;
	struct rdma_qps *q = NULL;
	char err[256];

	*out = NULL;
	if (!r)
		return KVP_ENOTSUP;
	if (rdma_qp_rec_decode(body, n, &theirs, err, sizeof(err)) < 0) {
		r->refused++;
		log_info("rdma: RDMA_CONNECT: %s", err);
		return KVP_EPROTO;
	}
	for (unsigned d = 0; d < r->ctx.ndev; d++)
		if (!strcmp(r->ctx.dev[d].name, theirs.dev))
			dev = &r->ctx.dev[d];
	if (!dev) {
		r->refused++;
		return KVP_ENOTSUP;
	}
	/* Passive side: one send WR is plenty, no completion channel. */
	if (rdma_qps_create(dev, theirs.nqp, 1, false, &q, err, sizeof(err)) < 0 ||
	    rdma_qps_connect(q, &theirs, err, sizeof(err)) < 0) {
		r->refused++;
		log_warn("rdma: RDMA_CONNECT on %s: %s", dev->name, err);
		rdma_qps_destroy(q);
		return KVP_ENOTSUP;
	}
	rdma_qps_local(q, &mine);
	if (rdma_qp_rec_encode(reply, &mine) < 0 || reply->oom) {
		rdma_qps_destroy(q);
		return KVP_ENOMEM;
	}
	r->connects++;
	r->qp_sets++;
	*out = q;
	return 0;
}

void node_rdma_release(struct node_rdma *r, struct rdma_qps *q)
{
	if (!q)
		return;
	rdma_qps_destroy(q);
	if (r && r->qp_sets)
		r->qp_sets--;
}

void node_rdma_metrics(const struct node_rdma *r, struct sbuf *b)
{
	uint64_t reg = 0;

	if (r)
		reg = r->seg.len;
	sb_printf(b, "# HELP kvpool_node_rdma_devices RDMA devices the segment is registered on.\n"
		  "# TYPE kvpool_node_rdma_devices gauge\n"
		  "kvpool_node_rdma_devices %u\n", r ? r->ctx.ndev : 0);
	sb_printf(b, "# HELP kvpool_node_rdma_registered_bytes Segment bytes registered for RDMA.\n"
		  "# TYPE kvpool_node_rdma_registered_bytes gauge\n"
		  "kvpool_node_rdma_registered_bytes %llu\n", (unsigned long long)reg);
	sb_printf(b, "# HELP kvpool_node_rdma_qp_sets Client queue-pair sets connected now.\n"
		  "# TYPE kvpool_node_rdma_qp_sets gauge\n"
		  "kvpool_node_rdma_qp_sets %llu\n", (unsigned long long)(r ? r->qp_sets : 0));
	sb_printf(b, "# HELP kvpool_node_rdma_connects_total RDMA_CONNECT requests accepted.\n"
		  "# TYPE kvpool_node_rdma_connects_total counter\n"
		  "kvpool_node_rdma_connects_total %llu\n", (unsigned long long)(r ? r->connects : 0));
}

const char *node_rdma_devices(const struct node_rdma *r)
{
	return r ? r->names : "";
}

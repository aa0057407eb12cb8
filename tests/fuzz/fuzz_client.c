/* fuzz_client: libkvpool's decoders of untrusted bytes — every master reply
 * body it parses (SEGMENTS, GET, PUT_START, STAT, LIST items, NS_DECLARE,
 * NS_LIST) and the node
 * reply stream of the TCP transport (frame headers, bodies and READ
 * payloads split at arbitrary points, replies to unknown or in-flight
 * requests). The harness lives here, not in the library: it reaches the
 * decoders through the internal headers (client_i.h, get.h, put.h,
 * xp_tcp_i.h) and links libkvpool.a.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client_i.h"
#include "extent.h"
#include "get.h"
#include "lns.h"
#include "mcall.h"
#include "put.h"
#include "segtab.h"
#include "wire.h"
#include "xp_tcp_i.h"
#include "xport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* GET reply items: a u32 count, then the items. */
static void fuzz_get_items(const uint8_t *p, size_t n)
{
	struct rbuf r;
	uint32_t cnt;

	rb_init(&r, p, n);
	cnt = rb_count(&r, 33);
	for (uint32_t i = 0; i < cnt && rb_ok(&r); i++) {
		struct get_reply g;

		if (get_reply_item(&r, 1ull << 30, &g) == 0 && g.vlen > (1ull << 30))
			abort();	/* must have been refused */
	}
}

/* PUT_START reply items: a u32 count, then the items. */
static void fuzz_put_items(const uint8_t *p, size_t n)
{
	struct rbuf r;
	uint32_t cnt;

	rb_init(&r, p, n);
	cnt = rb_count(&r, 13);
	for (uint32_t i = 0; i < cnt && rb_ok(&r); i++) {
		struct put_reply pr;

		if (put_reply_item(&r, &pr) == 0 && (!pr.nrep || pr.nrep > KVP_MAX_REPLICAS))
			abort();
	}
}

/* Every decoder of master reply bodies. */
static void fuzz_replies(const uint8_t *p, size_t n)
{
	struct mcall m = { .got = true, .rep = (uint8_t *)p, .rep_len = (uint32_t)n };
	struct client_seg **v = NULL;
	struct kvp_list l = { 0 };
	struct rbuf r;
	size_t nv = 0;
	uint32_t cnt;

	if (n > UINT32_MAX)
		return;
	if (segtab_parse(&m, &v, &nv) == 0)
		segtab_parsed_free(v, nv);
	client_list_parse(p, n, &l);
	kvp_list_free(&l);
	struct kvp_ns_info *nsv;
	size_t nns;
	char msg[64];
	if (lns_list_parse(p, n, &nsv, &nns) == 0)
		free(nsv);
	lns_declare_parse(p, n, msg, sizeof(msg));
	fuzz_get_items(p, n);
	fuzz_put_items(p, n);
	rb_init(&r, p, n);
	cnt = rb_count(&r, 65);
	for (uint32_t i = 0; i < cnt && rb_ok(&r); i++) {
		struct client_stat_res sr;

		if (!client_stat_parse(&r, i, &sr))
			break;
	}
}

/* The TCP transport's receive side: four READs and a WRITE awaiting
 * replies and one WRITE still sending, the input fed in chunks of one
 * size (1..97 bytes) so that frames split at arbitrary points. */
static void fuzz_tcp_stream(const uint8_t *p, size_t n)
{
	enum { NOPS = 6, KLEN = 8 };
	struct kvp *kvp = calloc(1, sizeof(*kvp));
	struct client_node node = { .endpoint = "fuzz" };
	struct client_seg seg = { .id = 1, .node = &node };
	struct xp_op *ops = calloc(NOPS, sizeof(*ops));
	uint8_t *hdrs = calloc(NOPS, EXT_HDR_SIZE + KLEN);
	struct tcp_run *r;
	struct tconn *c = calloc(1, sizeof(*c));
	size_t off = 0, chunk = 1 + n % 97;

	if (!kvp || !ops || !hdrs || !c)
		goto out;
	kvp->conf.cluster.max_object_size = 1 << 20;
	r = xp_tcp_begin(kvp, UINT64_MAX);
	if (!r)
		goto out;
	c->rx = malloc(RX_CAP);
	c->run = r;
	c->node = &node;
	if (!c->rx)
		goto out_run;
	/* Four READs and a WRITE awaiting replies, one WRITE still sending. */
	for (int i = 0; i < NOPS; i++) {
		struct xp_op *op = &ops[i];

		op->dir = i < 4 ? XP_READ : XP_WRITE;
		op->seg = &seg;
		op->hdr = hdrs + (size_t)i * (EXT_HDR_SIZE + KLEN);
		op->hdr_len = EXT_HDR_SIZE + KLEN;
		op->len = (uint64_t)(i + 1) * 100;
		op->dst = malloc(op->len);
		op->h.key_len = KLEN;
		op->h.value_len = op->len;
		op->tx_len = 100;
		op->reqid = (uint64_t)i + 1;
		op->sent = i == NOPS - 1 ? 10 : xp_tcp_op_total(op);
		r->pending++;
		if (!op->dst)
			continue;
		if (i == NOPS - 1) {
			c->sq = c->sq_tail = op;
			continue;
		}
		xp_tcp_wait_reply(c, op);
	}
	while (off < n) {
		size_t k = n - off < chunk ? n - off : chunk;

		if (c->rlo == c->rhi) {
			c->rlo = c->rhi = 0;
		} else if (c->rlo > RX_CAP / 2 || RX_CAP - c->rhi < k) {
			memmove(c->rx, c->rx + c->rlo, c->rhi - c->rlo);
			c->rhi -= c->rlo;
			c->rlo = 0;
		}
		if (k > RX_CAP - c->rhi)
			k = RX_CAP - c->rhi;
		memcpy(c->rx + c->rhi, p + off, k);
		c->rhi += k;
		off += k;
		if (xp_tcp_conn_parse(c) < 0)
			break;
	}
	for (int i = 0; i < NOPS; i++) {
		if (ops[i].cs_on)
			ext_csum_final(&ops[i].cs);
		free(ops[i].dst);
	}
	free(c->rx);
out_run:
	free(r->conns);
	free(r->pfd);
	free(r);
out:
	free(c);
	free(hdrs);
	free(ops);
	free(kvp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_replies(data, size);
	fuzz_tcp_stream(data, size);
	return 0;
}

/* rdma_codec: the two RDMA records that travel on the wire (layouts in
 * rdma.h): the rdma_info blob a node publishes in MOUNT / SEGMENTS, and the
 * queue-pair exchange record of WIRE_OP_RDMA_CONNECT. Decoders take
 * untrusted bytes (tests/fuzz/fuzz_rdma.c). No ibverbs call, no state:
 * thread-safe.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rdma.h"

static bool name_ok(const uint8_t *p, size_t n)
{
	if (!p || n == 0 || n >= RDMA_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (p[i] <= ' ' || p[i] >= 0x7f)
			return false;
	return true;
}

int rdma_info_encode(struct wbuf *b, const struct rdma_info *info)
{
	if (info->ndev < 1 || info->ndev > RDMA_MAX_DEVS || info->map_off >= info->len)
		return -EINVAL;
	wb_u8(b, info->map_off ? 2 : 1);
	wb_u8(b, info->ndev);
	wb_u64(b, info->addr);
	wb_u64(b, info->len);
	for (unsigned d = 0; d < info->ndev; d++) {
		const struct rdma_info_dev *v = &info->dev[d];
		uint64_t off = 0;
		size_t nl = strnlen(v->name, RDMA_NAME_MAX);

		if (!name_ok((const uint8_t *)v->name, nl) || v->nchunks < 1 ||
		    v->nchunks > RDMA_MAX_CHUNKS)
			return -EINVAL;
		wb_str(b, v->name, nl);
		wb_u8(b, v->port);
		wb_u8(b, v->link_layer);
		wb_u16(b, v->lid);
		wb_bytes(b, v->gid, 16);
		wb_u32(b, v->nchunks);
		for (uint32_t i = 0; i < v->nchunks; i++) {
			const struct rdma_mr_chunk *c = &v->chunks[i];

			if (c->addr != info->addr + off || !c->len)
				return -EINVAL;
			wb_u64(b, off);
			wb_u64(b, c->len);
			wb_u32(b, c->rkey);
			off += c->len;
		}
		if (off != info->len)
			return -EINVAL;
	}
	if (info->map_off)
		wb_u64(b, info->map_off);
	return b->oom ? -ENOMEM : 0;
}

/* Each chunk record is 20 bytes; a device record at least 2 + 1 + 24 + 20. */
#define INFO_CHUNK_BYTES 20

int rdma_info_decode(const void *p, size_t n, struct rdma_info **out, char *err, size_t errlen)
{
	struct rdma_info *info;
	struct rbuf r;
	uint8_t ver, ndev;
	size_t total = 0;

	*out = NULL;
	rb_init(&r, p, n);
	ver = rb_u8(&r);
	ndev = rb_u8(&r);
	if (!rb_ok(&r)) {
		log_seterr(err, errlen, "rdma_info: truncated");
		return -EPROTO;
	}
	if (ver != 1 && ver != 2) {
		log_seterr(err, errlen, "rdma_info: version %u (expected 1..%u)", ver,
			   RDMA_INFO_VERSION);
		return -EPROTO;
	}
	if (ndev < 1 || ndev > RDMA_MAX_DEVS) {
		log_seterr(err, errlen, "rdma_info: %u devices (1..%u)", ndev, RDMA_MAX_DEVS);
		return -EPROTO;
	}
	/* First pass: validate and count the chunks, so one allocation
	 * holds them all. rb_count bounds each count by the bytes left. */
	struct rbuf c = r;

	(void)rb_u64(&c);
	(void)rb_u64(&c);
	for (unsigned d = 0; d < ndev && rb_ok(&c); d++) {
		size_t nl;
		const uint8_t *nm = rb_str(&c, &nl);

		if (rb_ok(&c) && !name_ok(nm, nl)) {
			log_seterr(err, errlen, "rdma_info: device %u: bad name", d);
			return -EPROTO;
		}
		rb_take(&c, 1 + 1 + 2 + 16);
		uint32_t nc = rb_count(&c, INFO_CHUNK_BYTES);

		if (rb_ok(&c) && (nc < 1 || nc > RDMA_MAX_CHUNKS)) {
			log_seterr(err, errlen, "rdma_info: device %u: %u chunks (1..%u)", d, nc,
			      RDMA_MAX_CHUNKS);
			return -EPROTO;
		}
		rb_take(&c, (size_t)nc * INFO_CHUNK_BYTES);
		total += nc;
	}
	if (ver == 2)
		(void)rb_u64(&c);
	if (!rb_done(&c)) {
		log_seterr(err, errlen, "rdma_info: %s", rb_ok(&c) ? "trailing bytes" : "truncated");
		return -EPROTO;
	}
	info = calloc(1, sizeof(*info) + total * sizeof(struct rdma_mr_chunk));
	if (!info) {
		log_seterr(err, errlen, "rdma_info: out of memory");
		return -ENOMEM;
	}
	struct rdma_mr_chunk *pool = (struct rdma_mr_chunk *)(info + 1);

	info->ndev = ndev;
	info->addr = rb_u64(&r);
	info->len = rb_u64(&r);
	if (!info->len || info->addr > UINT64_MAX - info->len) {
		log_seterr(err, errlen, "rdma_info: bad range %#llx+%llu",
		      (unsigned long long)info->addr, (unsigned long long)info->len);
		goto out_bad;
	}
	for (unsigned d = 0; d < ndev; d++) {
		struct rdma_info_dev *v = &info->dev[d];
		uint64_t off = 0;

		rb_cstr(&r, v->name, sizeof(v->name));
		v->port = rb_u8(&r);
		v->link_layer = rb_u8(&r);
		v->lid = rb_u16(&r);
		const uint8_t *g = rb_take(&r, 16);

		if (g)
			memcpy(v->gid, g, 16);
		v->nchunks = rb_u32(&r);
		v->chunks = pool;
		pool += v->nchunks;
		if (v->link_layer != RDMA_LINK_IB && v->link_layer != RDMA_LINK_ETH) {
			log_seterr(err, errlen, "rdma_info: %s: link layer %u", v->name, v->link_layer);
			goto out_bad;
		}
		for (uint32_t i = 0; i < v->nchunks; i++) {
			uint64_t o = rb_u64(&r), l = rb_u64(&r);

			v->chunks[i].rkey = rb_u32(&r);
			v->chunks[i].lkey = 0;
			if (o != off || !l || l > info->len - off) {
				log_seterr(err, errlen, "rdma_info: %s: chunk %u at %llu+%llu does "
				      "not continue the region", v->name, i,
				      (unsigned long long)o, (unsigned long long)l);
				goto out_bad;
			}
			v->chunks[i].addr = info->addr + o;
			v->chunks[i].len = l;
			off += l;
		}
		if (off != info->len) {
			log_seterr(err, errlen, "rdma_info: %s: chunks cover %llu of %llu bytes",
			      v->name, (unsigned long long)off, (unsigned long long)info->len);
			goto out_bad;
		}
	}
	if (ver == 2) {
		info->map_off = rb_u64(&r);
		if (!info->map_off || info->map_off >= info->len) {
			log_seterr(err, errlen, "rdma_info: commit map at %llu outside the region",
				   (unsigned long long)info->map_off);
			goto out_bad;
		}
	}
	if (!rb_done(&r)) {
		log_seterr(err, errlen, "rdma_info: malformed");
		goto out_bad;
	}
	*out = info;
	return 0;

out_bad:
	free(info);
	return -EPROTO;
}

void rdma_info_free(struct rdma_info *info)
{
	free(info);
}

int rdma_qp_rec_encode(struct wbuf *b, const struct rdma_qp_rec *r)
{
	size_t nl = strnlen(r->dev, RDMA_NAME_MAX);

	if (!name_ok((const uint8_t *)r->dev, nl) || r->nqp < 1 || r->nqp > RDMA_MAX_QPS ||
	    r->mtu < 1 || r->mtu > 5 || !r->rd_atomic)
		return -EINVAL;
	wb_u8(b, RDMA_QP_VERSION);
	wb_str(b, r->dev, nl);
	wb_u8(b, r->port);
	wb_u8(b, r->link_layer);
	wb_u16(b, r->lid);
	wb_bytes(b, r->gid, 16);
	wb_u8(b, r->mtu);
	wb_u8(b, r->rd_atomic);
	wb_u8(b, r->nqp);
	for (unsigned i = 0; i < r->nqp; i++) {
		if (!r->qpn[i] || r->qpn[i] > 0xffffff || r->psn[i] > 0xffffff)
			return -EINVAL;
		wb_u32(b, r->qpn[i]);
		wb_u32(b, r->psn[i]);
	}
	return b->oom ? -ENOMEM : 0;
}

int rdma_qp_rec_decode(const void *p, size_t n, struct rdma_qp_rec *r, char *err, size_t errlen)
{
	struct rbuf b;
	const uint8_t *nm, *g;
	size_t nl;
	uint8_t ver;

	memset(r, 0, sizeof(*r));
	rb_init(&b, p, n);
	ver = rb_u8(&b);
	if (rb_ok(&b) && ver != RDMA_QP_VERSION) {
		log_seterr(err, errlen, "rdma qp record: version %u (expected %u)", ver,
		      RDMA_QP_VERSION);
		return -EPROTO;
	}
	nm = rb_str(&b, &nl);
	if (rb_ok(&b) && !name_ok(nm, nl)) {
		log_seterr(err, errlen, "rdma qp record: bad device name");
		return -EPROTO;
	}
	if (nm)
		memcpy(r->dev, nm, nl);
	r->port = rb_u8(&b);
	r->link_layer = rb_u8(&b);
	r->lid = rb_u16(&b);
	g = rb_take(&b, 16);
	if (g)
		memcpy(r->gid, g, 16);
	r->mtu = rb_u8(&b);
	r->rd_atomic = rb_u8(&b);
	r->nqp = rb_u8(&b);
	if (!rb_ok(&b)) {
		log_seterr(err, errlen, "rdma qp record: truncated");
		return -EPROTO;
	}
	if (r->link_layer != RDMA_LINK_IB && r->link_layer != RDMA_LINK_ETH) {
		log_seterr(err, errlen, "rdma qp record: link layer %u", r->link_layer);
		return -EPROTO;
	}
	if (r->mtu < 1 || r->mtu > 5 || !r->rd_atomic || r->nqp < 1 || r->nqp > RDMA_MAX_QPS) {
		log_seterr(err, errlen, "rdma qp record: mtu %u, rd_atomic %u, %u qps", r->mtu,
		      r->rd_atomic, r->nqp);
		return -EPROTO;
	}
	for (unsigned i = 0; i < r->nqp; i++) {
		r->qpn[i] = rb_u32(&b);
		r->psn[i] = rb_u32(&b);
		if (rb_ok(&b) && (!r->qpn[i] || r->qpn[i] > 0xffffff || r->psn[i] > 0xffffff)) {
			log_seterr(err, errlen, "rdma qp record: qp %u: qpn %u psn %u", i, r->qpn[i],
			      r->psn[i]);
			return -EPROTO;
		}
	}
	if (!rb_done(&b)) {
		log_seterr(err, errlen, "rdma qp record: %s", rb_ok(&b) ? "trailing bytes" : "truncated");
		return -EPROTO;
	}
	return 0;
}

/* rdma: kvpool's ibverbs layer (see rdma.h): devices, PDs, chunked memory
 * registration, the rdma_info and QP exchange codecs, RC QP sets, and the
 * engine that turns extent transfers into READ/WRITE work requests. The
 * verbs calls follow rdma-core's rc_pingpong. ibverbs returns positive errno
 * values; they become negative here, at the boundary. No global state.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "log.h"
#include "rdma.h"

static void seterr(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

/* ---- pure arithmetic ---------------------------------------------------- */

int rdma_mr_plan(uint64_t base, uint64_t len, uint64_t max_mr, uint64_t page,
		 struct rdma_mr_chunk *out, size_t cap, size_t *need)
{
	uint64_t chunk, addr = base, end;
	size_t n = 0;

	if (need)
		*need = 0;
	if (!page || (page & (page - 1)))
		return -EINVAL;
	if (!len)
		return 0;
	if (base > UINT64_MAX - len)
		return -EINVAL;
	end = base + len;
	if (!max_mr)
		chunk = UINT64_MAX & ~(page - 1);
	else
		chunk = max_mr & ~(page - 1);	/* whole pages only */
	if (!chunk)
		return -EINVAL;
	while (addr < end) {
		/* A chunk ends on a page boundary and pins at most chunk
		 * bytes of pages: the first one is shortened by base's
		 * offset into its page. */
		uint64_t pstart = addr & ~(page - 1);
		uint64_t lim = pstart + chunk < pstart ? UINT64_MAX : pstart + chunk;
		uint64_t stop = lim < end ? lim : end;

		if (n < cap) {
			out[n].addr = addr;
			out[n].len = stop - addr;
			out[n].lkey = out[n].rkey = 0;
		}
		n++;
		addr = stop;
	}
	if (need)
		*need = n;
	if (n > cap)
		return -E2BIG;
	return n > INT_MAX ? -E2BIG : (int)n;
}

uint64_t rdma_chunk_span(const struct rdma_mr_chunk *c, uint32_t n, uint64_t addr,
			 uint64_t len, uint32_t *idx)
{
	uint32_t lo = 0, hi = n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (addr < c[mid].addr) {
			hi = mid;
		} else if (addr - c[mid].addr >= c[mid].len) {
			lo = mid + 1;
		} else {
			uint64_t room = c[mid].len - (addr - c[mid].addr);

			if (idx)
				*idx = mid;
			return len < room ? len : room;
		}
	}
	return 0;
}

bool rdma_filter_has(const char *list, const char *name)
{
	size_t nl = strlen(name);
	const char *p = list;
	bool any = false;

	while (p && *p) {
		size_t n;

		p += strspn(p, ", \t");
		n = strcspn(p, ", \t");
		if (n) {
			any = true;
			if (n == nl && !memcmp(p, name, n))
				return true;
		}
		p += n;
	}
	return !any;
}

/* ---- codecs ------------------------------------------------------------- */

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
	if (info->ndev < 1 || info->ndev > RDMA_MAX_DEVS)
		return -EINVAL;
	wb_u8(b, RDMA_INFO_VERSION);
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
		seterr(err, errlen, "rdma_info: truncated");
		return -EPROTO;
	}
	if (ver != RDMA_INFO_VERSION) {
		seterr(err, errlen, "rdma_info: version %u (expected %u)", ver, RDMA_INFO_VERSION);
		return -EPROTO;
	}
	if (ndev < 1 || ndev > RDMA_MAX_DEVS) {
		seterr(err, errlen, "rdma_info: %u devices (1..%u)", ndev, RDMA_MAX_DEVS);
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
			seterr(err, errlen, "rdma_info: device %u: bad name", d);
			return -EPROTO;
		}
		rb_take(&c, 1 + 1 + 2 + 16);
		uint32_t nc = rb_count(&c, INFO_CHUNK_BYTES);

		if (rb_ok(&c) && (nc < 1 || nc > RDMA_MAX_CHUNKS)) {
			seterr(err, errlen, "rdma_info: device %u: %u chunks (1..%u)", d, nc,
			       RDMA_MAX_CHUNKS);
			return -EPROTO;
		}
		rb_take(&c, (size_t)nc * INFO_CHUNK_BYTES);
		total += nc;
	}
	if (!rb_done(&c)) {
		seterr(err, errlen, "rdma_info: %s", rb_ok(&c) ? "trailing bytes" : "truncated");
		return -EPROTO;
	}
	info = calloc(1, sizeof(*info) + total * sizeof(struct rdma_mr_chunk));
	if (!info) {
		seterr(err, errlen, "rdma_info: out of memory");
		return -ENOMEM;
	}
	struct rdma_mr_chunk *pool = (struct rdma_mr_chunk *)(info + 1);

	info->ndev = ndev;
	info->addr = rb_u64(&r);
	info->len = rb_u64(&r);
	if (!info->len || info->addr > UINT64_MAX - info->len) {
		seterr(err, errlen, "rdma_info: bad range %#llx+%llu",
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
			seterr(err, errlen, "rdma_info: %s: link layer %u", v->name, v->link_layer);
			goto out_bad;
		}
		for (uint32_t i = 0; i < v->nchunks; i++) {
			uint64_t o = rb_u64(&r), l = rb_u64(&r);

			v->chunks[i].rkey = rb_u32(&r);
			v->chunks[i].lkey = 0;
			if (o != off || !l || l > info->len - off) {
				seterr(err, errlen, "rdma_info: %s: chunk %u at %llu+%llu does "
				       "not continue the region", v->name, i,
				       (unsigned long long)o, (unsigned long long)l);
				goto out_bad;
			}
			v->chunks[i].addr = info->addr + o;
			v->chunks[i].len = l;
			off += l;
		}
		if (off != info->len) {
			seterr(err, errlen, "rdma_info: %s: chunks cover %llu of %llu bytes",
			       v->name, (unsigned long long)off, (unsigned long long)info->len);
			goto out_bad;
		}
	}
	if (!rb_done(&r)) {
		seterr(err, errlen, "rdma_info: malformed");
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
		seterr(err, errlen, "rdma qp record: version %u (expected %u)", ver,
		       RDMA_QP_VERSION);
		return -EPROTO;
	}
	nm = rb_str(&b, &nl);
	if (rb_ok(&b) && !name_ok(nm, nl)) {
		seterr(err, errlen, "rdma qp record: bad device name");
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
		seterr(err, errlen, "rdma qp record: truncated");
		return -EPROTO;
	}
	if (r->link_layer != RDMA_LINK_IB && r->link_layer != RDMA_LINK_ETH) {
		seterr(err, errlen, "rdma qp record: link layer %u", r->link_layer);
		return -EPROTO;
	}
	if (r->mtu < 1 || r->mtu > 5 || !r->rd_atomic || r->nqp < 1 || r->nqp > RDMA_MAX_QPS) {
		seterr(err, errlen, "rdma qp record: mtu %u, rd_atomic %u, %u qps", r->mtu,
		       r->rd_atomic, r->nqp);
		return -EPROTO;
	}
	for (unsigned i = 0; i < r->nqp; i++) {
		r->qpn[i] = rb_u32(&b);
		r->psn[i] = rb_u32(&b);
		if (rb_ok(&b) && (!r->qpn[i] || r->qpn[i] > 0xffffff || r->psn[i] > 0xffffff)) {
			seterr(err, errlen, "rdma qp record: qp %u: qpn %u psn %u", i, r->qpn[i],
			       r->psn[i]);
			return -EPROTO;
		}
	}
	if (!rb_done(&b)) {
		seterr(err, errlen, "rdma qp record: %s", rb_ok(&b) ? "trailing bytes" : "truncated");
		return -EPROTO;
	}
	return 0;
}

/* ---- devices ------------------------------------------------------------ */

int rdma_dev_numa_node(const char *sysfs_root, const char *name)
{
	char path[512], buf[32];
	int fd, v = -1;
	ssize_t k;

	snprintf(path, sizeof(path), "%s/class/infiniband/%s/device/numa_node",
		 sysfs_root && *sysfs_root ? sysfs_root : "/sys", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	k = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (k <= 0)
		return -1;
	buf[k] = 0;
	if (sscanf(buf, "%d", &v) != 1 || v < -1)
		return -1;
	return v;
}

static struct ibv_device **dev_list(int *n)
{
	struct ibv_device **l = ibv_get_device_list(n);

	/* No kernel support reads as no devices (ENOSYS), not as an error. */
	if (!l)
		*n = 0;
	return l;
}

int rdma_list_devices(char *out, size_t len)
{
	struct ibv_device **l;
	size_t used = 0;
	int n = 0;

	if (len)
		out[0] = 0;
	l = dev_list(&n);
	for (int i = 0; i < n && used < len; i++) {
		int k = snprintf(out + used, len - used, "%s%s", i ? "," : "",
				 ibv_get_device_name(l[i]));
		if (k > 0)
			used += (size_t)k;
	}
	if (l)
		ibv_free_device_list(l);
	return n;
}

/* The GID to use on an Ethernet (RoCE) port: RoCE v2 with an IPv4-mapped
 * address first (routable, what most fabrics run), then any RoCE v2, then
 * RoCE v1; -1 when the table has nothing usable. */
static int pick_gid(struct ibv_context *ctx, uint8_t port, int tbl_len, uint8_t gid[16])
{
	int best = -1, best_rank = 0;

	for (int i = 0; i < tbl_len && i < 256; i++) {
		struct ibv_gid_entry e;
		static const uint8_t v4map[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
		int rank;

		if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0))
			continue;
		bool zero = true;

		for (int k = 0; k < 16; k++)
			zero &= e.gid.raw[k] == 0;
		if (zero)
			continue;
		if (e.gid_type == IBV_GID_TYPE_ROCE_V2)
			rank = memcmp(e.gid.raw, v4map, 12) == 0 ? 3 : 2;
		else
			rank = 1;
		if (rank > best_rank) {
			best_rank = rank;
			best = i;
			memcpy(gid, e.gid.raw, 16);
		}
	}
	return best;
}

/* Opens one device: the first active port, its addresses, a PD. 1 usable,
 * 0 skipped (why in note), -errno. */
static int dev_open(struct ibv_device *d, struct rdma_dev *v, char *note, size_t notelen)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	int rc;

	memset(v, 0, sizeof(*v));
	snprintf(v->name, sizeof(v->name), "%s", ibv_get_device_name(d));
	v->ctx = ibv_open_device(d);
	if (!v->ctx) {
		rc = -errno;
		seterr(note, notelen, "%s: cannot open: %s", v->name, strerror(-rc));
		return 0;
	}
	if ((rc = ibv_query_device(v->ctx, &da)) != 0) {
		seterr(note, notelen, "%s: query_device: %s", v->name, strerror(rc));
		goto out_close;
	}
	for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
		if (ibv_query_port(v->ctx, p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
			v->port = p;
			break;
		}
	}
	if (!v->port) {
		seterr(note, notelen, "%s: no active port", v->name);
		goto out_close;
	}
	v->link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? RDMA_LINK_ETH : RDMA_LINK_IB;
	v->lid = pa.lid;
	v->active_mtu = (uint8_t)pa.active_mtu;
	v->gid_index = -1;
	if (v->link_layer == RDMA_LINK_ETH) {
		v->gid_index = pick_gid(v->ctx, v->port, pa.gid_tbl_len, v->gid);
		if (v->gid_index < 0) {
			seterr(note, notelen, "%s: RoCE port without a usable GID (no IP address?)",
			       v->name);
			goto out_close;
		}
	} else {
		union ibv_gid g;

		if (ibv_query_gid(v->ctx, v->port, 0, &g) == 0)
			memcpy(v->gid, g.raw, 16);
	}
	v->max_mr_size = da.max_mr_size;
	v->max_qp_wr = da.max_qp_wr;
	v->max_sge = da.max_sge;
	v->max_cqe = da.max_cqe;
	v->max_rd_atomic = da.max_qp_rd_atom < da.max_qp_init_rd_atom ? da.max_qp_rd_atom :
			   da.max_qp_init_rd_atom;
	if (v->max_rd_atomic < 1)
		v->max_rd_atomic = 1;
	if (v->max_rd_atomic > 255)
		v->max_rd_atomic = 255;
	v->numa_node = rdma_dev_numa_node(NULL, v->name);
	v->pd = ibv_alloc_pd(v->ctx);
	if (!v->pd) {
		seterr(note, notelen, "%s: cannot allocate a protection domain", v->name);
		goto out_close;
	}
	return 1;

out_close:
	ibv_close_device(v->ctx);
	v->ctx = NULL;
	return 0;
}

int rdma_open(struct rdma_ctx *ctx, const char *filter, char *err, size_t errlen)
{
	struct ibv_device **l;
	char notes[512] = "", note[160];
	int n = 0;

	memset(ctx, 0, sizeof(*ctx));
	l = dev_list(&n);
	for (int i = 0; i < n && ctx->ndev < RDMA_MAX_DEVS; i++) {
		const char *name = ibv_get_device_name(l[i]);

		if (!rdma_filter_has(filter ? filter : "", name))
			continue;
		note[0] = 0;
		if (dev_open(l[i], &ctx->dev[ctx->ndev], note, sizeof(note)) == 1) {
			ctx->ndev++;
		} else {
			log_warn("rdma: %s", note);
			if (strlen(notes) + strlen(note) + 3 < sizeof(notes)) {
				strcat(notes, notes[0] ? "; " : "");
				strcat(notes, note);
			}
		}
	}
	if (l)
		ibv_free_device_list(l);
	/* Named devices that are not there: worth a warning each. */
	for (const char *p = filter ? filter : ""; *p;) {
		char nm[RDMA_NAME_MAX];
		size_t k;
		bool found = false;

		p += strspn(p, ", \t");
		k = strcspn(p, ", \t");
		if (!k)
			break;
		snprintf(nm, sizeof(nm), "%.*s", (int)k, p);
		p += k;
		for (unsigned d = 0; d < ctx->ndev; d++)
			found |= strcmp(ctx->dev[d].name, nm) == 0;
		if (!found)
			log_warn("rdma: [rdma] devices names %s, which is not usable here", nm);
	}
	if (!ctx->ndev) {
		if (!n)
			seterr(err, errlen, "no RDMA device (ibverbs lists none)");
		else if (notes[0])
			seterr(err, errlen, "no RDMA device usable: %s", notes);
		else
			seterr(err, errlen, "no RDMA device matches [rdma] devices = %s", filter);
		return -ENODEV;
	}
	return 0;
}

void rdma_close(struct rdma_ctx *ctx)
{
	for (unsigned d = 0; d < ctx->ndev; d++) {
		if (ctx->dev[d].pd)
			ibv_dealloc_pd(ctx->dev[d].pd);
		if (ctx->dev[d].ctx)
			ibv_close_device(ctx->dev[d].ctx);
	}
	memset(ctx, 0, sizeof(*ctx));
}

/* ---- memory registration ------------------------------------------------ */

static void memlock_hint(char *buf, size_t len, int e)
{
	struct rlimit rl;

	buf[0] = 0;
	if (e != ENOMEM && e != EPERM && e != EAGAIN && e != EFAULT)
		return;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) < 0)
		return;
	if (rl.rlim_cur == RLIM_INFINITY)
		snprintf(buf, len, " (RLIMIT_MEMLOCK is unlimited: the device or memory ran out)");
	else
		snprintf(buf, len, "; RLIMIT_MEMLOCK is %llu bytes: raise it (ulimit -l "
			 "unlimited, LimitMEMLOCK=infinity in the systemd unit)",
			 (unsigned long long)rl.rlim_cur);
}

int rdma_region_reg(struct rdma_ctx *ctx, void *base, uint64_t len, bool remote,
		    struct rdma_region *out, char *err, size_t errlen)
{
	int access = IBV_ACCESS_LOCAL_WRITE;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	int rc = 0;

	if (remote)
		access |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	memset(out, 0, sizeof(*out));
	out->base = base;
	out->len = len;
	for (unsigned d = 0; d < ctx->ndev; d++) {
		struct rdma_dev *v = &ctx->dev[d];
		size_t need = 0;
		int n = rdma_mr_plan((uintptr_t)base, len, v->max_mr_size, page, NULL, 0, &need);

		if (n < 0 && n != -E2BIG) {
			seterr(err, errlen, "%s: cannot plan the registration of %llu bytes "
			       "(max_mr_size %llu)", v->name, (unsigned long long)len,
			       (unsigned long long)v->max_mr_size);
			rc = n;
			goto out_dereg;
		}
		if (need > RDMA_MAX_CHUNKS || !need) {
			seterr(err, errlen, "%s: %llu bytes need %zu memory regions of at most "
			       "%llu bytes (limit %u)", v->name, (unsigned long long)len, need,
			       (unsigned long long)v->max_mr_size, RDMA_MAX_CHUNKS);
			rc = -E2BIG;
			goto out_dereg;
		}
		out->dev[d].c = calloc(need, sizeof(*out->dev[d].c));
		out->dev[d].mr = calloc(need, sizeof(*out->dev[d].mr));
		out->ndev = d + 1;
		if (!out->dev[d].c || !out->dev[d].mr) {
			seterr(err, errlen, "out of memory");
			rc = -ENOMEM;
			goto out_dereg;
		}
		rdma_mr_plan((uintptr_t)base, len, v->max_mr_size, page, out->dev[d].c, need, NULL);
		for (size_t i = 0; i < need; i++) {
			struct rdma_mr_chunk *c = &out->dev[d].c[i];
			struct ibv_mr *mr = ibv_reg_mr(v->pd, (void *)(uintptr_t)c->addr, c->len,
						       access);

			if (!mr) {
				char hint[200];
				int e = errno;

				memlock_hint(hint, sizeof(hint), e);
				seterr(err, errlen, "ibv_reg_mr on %s (%llu bytes, region %zu of %zu):"
				       " %s%s", v->name, (unsigned long long)c->len, i + 1, need,
				       strerror(e), hint);
				rc = -e;
				goto out_dereg;
			}
			out->dev[d].mr[i] = mr;
			out->dev[d].n = (uint32_t)(i + 1);
			c->lkey = mr->lkey;
			c->rkey = mr->rkey;
		}
	}
	return 0;

out_dereg:
	rdma_region_dereg(out);
	return rc;
}

void rdma_region_dereg(struct rdma_region *r)
{
	for (unsigned d = 0; d < r->ndev; d++) {
		for (uint32_t i = 0; r->dev[d].mr && i < r->dev[d].n; i++)
			ibv_dereg_mr(r->dev[d].mr[i]);
		free(r->dev[d].mr);
		free(r->dev[d].c);
	}
	memset(r, 0, sizeof(*r));
}

void rdma_region_info(const struct rdma_ctx *ctx, const struct rdma_region *r,
		      struct rdma_info *info)
{
	memset(info, 0, sizeof(*info));
	info->addr = (uintptr_t)r->base;
	info->len = r->len;
	info->ndev = (uint8_t)r->ndev;
	for (unsigned d = 0; d < r->ndev; d++) {
		const struct rdma_dev *v = &ctx->dev[d];
		struct rdma_info_dev *o = &info->dev[d];

		snprintf(o->name, sizeof(o->name), "%s", v->name);
		o->port = v->port;
		o->link_layer = v->link_layer;
		o->lid = v->lid;
		memcpy(o->gid, v->gid, 16);
		o->nchunks = r->dev[d].n;
		o->chunks = r->dev[d].c;
	}
}

/* ---- simulated QP sets (unit tests) ------------------------------------- */

struct sim_wr {
	unsigned qp;
	bool write;
	uint64_t wr_id;
	uint8_t *laddr;
	uint32_t lkey;
	uint64_t raddr;
	uint32_t rkey;
	uint32_t len;
};

struct rdma_sim {
	struct rdma_mr_chunk *reg;
	uint32_t nreg;
	struct sim_wr *q;		/* ring of posted WRs */
	size_t cap, head, n;
	unsigned fail_in;		/* 0: no failure armed */
	bool error;			/* flushed from now on */
	bool hold;			/* complete nothing for now */
	uint64_t exec[RDMA_MAX_QPS];
};

struct rdma_qps *rdma_sim_create(unsigned nqp, unsigned depth)
{
	struct rdma_qps *q;

	if (!nqp || nqp > RDMA_MAX_QPS || !depth)
		return NULL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	q->sim = calloc(1, sizeof(*q->sim));
	if (!q->sim)
		goto out_free;
	q->sim->cap = (size_t)nqp * depth;
	q->sim->q = calloc(q->sim->cap, sizeof(*q->sim->q));
	if (!q->sim->q)
		goto out_free_sim;
	q->nqp = nqp;
	q->depth = depth;
	q->rd_atomic = 16;
	q->connected = true;
	return q;

out_free_sim:
	free(q->sim);
out_free:
	free(q);
	return NULL;
}

int rdma_sim_region(struct rdma_qps *q, const struct rdma_mr_chunk *c, uint32_t n)
{
	struct rdma_mr_chunk *r = realloc(q->sim->reg, (q->sim->nreg + n) * sizeof(*r));

	if (!r)
		return -ENOMEM;
	memcpy(r + q->sim->nreg, c, n * sizeof(*c));
	q->sim->reg = r;
	q->sim->nreg += n;
	return 0;
}

void rdma_sim_fail_after(struct rdma_qps *q, unsigned nth)
{
	q->sim->fail_in = nth + 1;
}

void rdma_sim_hold(struct rdma_qps *q, bool hold)
{
	q->sim->hold = hold;
}

uint64_t rdma_sim_executed(const struct rdma_qps *q, unsigned qp)
{
	return qp < RDMA_MAX_QPS ? q->sim->exec[qp] : 0;
}

/* As an HCA checks a key: the whole range inside one region of that key. */
static bool sim_key_ok(const struct rdma_sim *s, uint64_t addr, uint32_t len, uint32_t key,
		       bool remote)
{
	for (uint32_t i = 0; i < s->nreg; i++) {
		const struct rdma_mr_chunk *c = &s->reg[i];

		if ((remote ? c->rkey : c->lkey) != key)
			continue;
		if (addr >= c->addr && len <= c->len && addr - c->addr <= c->len - len)
			return true;
	}
	return false;
}

static int sim_poll(struct rdma_qps *q, struct rdma_wc *wc, int max)
{
	struct rdma_sim *s = q->sim;
	int k = 0;

	while (k < max && s->n && !s->hold) {
		struct sim_wr *w = &s->q[s->head];

		s->head = (s->head + 1) % s->cap;
		s->n--;
		wc[k].wr_id = w->wr_id;
		wc[k].qp = w->qp;
		wc[k].status = 0;
		wc[k].msg = "";
		q->busy[w->qp]--;
		if (s->error) {
			wc[k].status = -EIO;
			wc[k].msg = "WR flushed";
		} else if (s->fail_in && --s->fail_in == 0) {
			s->error = true;
			wc[k].status = -EIO;
			wc[k].msg = "transport retry counter exceeded";
		} else if (!sim_key_ok(s, (uintptr_t)w->laddr, w->len, w->lkey, false)) {
			s->error = true;
			wc[k].status = -EIO;
			wc[k].msg = "local protection error";
		} else if (!sim_key_ok(s, w->raddr, w->len, w->rkey, true)) {
			s->error = true;
			wc[k].status = -EIO;
			wc[k].msg = "remote access error";
		} else {
			if (w->write)
				memcpy((void *)(uintptr_t)w->raddr, w->laddr, w->len);
			else
				memcpy(w->laddr, (void *)(uintptr_t)w->raddr, w->len);
			s->exec[w->qp]++;
		}
		k++;
	}
	return k;
}

/* ---- QP sets ------------------------------------------------------------ */

int rdma_qps_create(struct rdma_dev *dev, unsigned nqp, unsigned depth, bool events,
		    struct rdma_qps **out, char *err, size_t errlen)
{
	struct rdma_qps *q;
	int cqe, rc;

	*out = NULL;
	if (!nqp || nqp > RDMA_MAX_QPS || !depth)
		return -EINVAL;
	if (dev->max_qp_wr > 0 && depth > (unsigned)dev->max_qp_wr)
		depth = (unsigned)dev->max_qp_wr;
	cqe = (int)(nqp * depth);
	if (dev->max_cqe > 0 && cqe > dev->max_cqe)
		cqe = dev->max_cqe;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->dev = dev;
	q->depth = depth;
	if (events) {
		q->ch = ibv_create_comp_channel(dev->ctx);
		if (!q->ch) {
			rc = -errno;
			seterr(err, errlen, "%s: ibv_create_comp_channel: %s", dev->name,
			       strerror(-rc));
			goto out_free;
		}
		/* rdma_poll polls the fd; reading an event must not block. */
		fcntl(q->ch->fd, F_SETFL, fcntl(q->ch->fd, F_GETFL) | O_NONBLOCK);
	}
	q->cq = ibv_create_cq(dev->ctx, cqe, NULL, q->ch, 0);
	if (!q->cq) {
		rc = -errno;
		seterr(err, errlen, "%s: ibv_create_cq(%d): %s", dev->name, cqe, strerror(-rc));
		goto out_destroy;
	}
	for (unsigned i = 0; i < nqp; i++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = q->cq,
			.recv_cq = q->cq,
			.cap = {
				.max_send_wr = depth,
				.max_recv_wr = 1,
				.max_send_sge = 1,
				.max_recv_sge = 1,
			},
			.qp_type = IBV_QPT_RC,
		};
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_INIT,
			.pkey_index = 0,
			.port_num = dev->port,
			.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
					   IBV_ACCESS_REMOTE_WRITE,
		};

		q->qp[i] = ibv_create_qp(dev->pd, &ia);
		if (!q->qp[i]) {
			rc = -errno;
			seterr(err, errlen, "%s: ibv_create_qp %u of %u: %s", dev->name, i + 1, nqp,
			       strerror(-rc));
			goto out_destroy;
		}
		q->nqp = i + 1;
		rc = ibv_modify_qp(q->qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				   IBV_QP_ACCESS_FLAGS);
		if (rc) {
			seterr(err, errlen, "%s: QP to INIT: %s", dev->name, strerror(rc));
			rc = -rc;
			goto out_destroy;
		}
		/* Random start PSNs, as rc_pingpong: stale packets of an
		 * earlier QP with the same number are not accepted. */
		uint32_t r = 0;

		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			r = (uint32_t)lrand48() ^ (uint32_t)getpid();
		q->psn[i] = r & 0xffffff;
	}
	*out = q;
	return 0;

out_destroy:
	rdma_qps_destroy(q);
	return rc;
out_free:
	free(q);
	return rc;
}

void rdma_qps_local(const struct rdma_qps *q, struct rdma_qp_rec *rec)
{
	memset(rec, 0, sizeof(*rec));
	if (q->dev) {
		snprintf(rec->dev, sizeof(rec->dev), "%s", q->dev->name);
		rec->port = q->dev->port;
		rec->link_layer = q->dev->link_layer;
		rec->lid = q->dev->lid;
		memcpy(rec->gid, q->dev->gid, 16);
		rec->mtu = q->dev->active_mtu ? q->dev->active_mtu : IBV_MTU_1024;
		rec->rd_atomic = (uint8_t)q->dev->max_rd_atomic;
	}
	rec->nqp = (uint8_t)q->nqp;
	for (unsigned i = 0; i < q->nqp; i++) {
		rec->qpn[i] = q->qp[i] ? q->qp[i]->qp_num : i + 1;
		rec->psn[i] = q->psn[i];
	}
}

int rdma_qps_connect(struct rdma_qps *q, const struct rdma_qp_rec *peer, char *err,
		     size_t errlen)
{
	struct rdma_dev *v = q->dev;
	uint8_t mtu;
	int rc;

	if (q->sim)
		return 0;
	if (peer->nqp != q->nqp) {
		seterr(err, errlen, "peer has %u queue pairs, we have %u", peer->nqp, q->nqp);
		return -EPROTO;
	}
	if (peer->link_layer != v->link_layer) {
		seterr(err, errlen, "%s is %s, peer %s is %s", v->name,
		       v->link_layer == RDMA_LINK_ETH ? "Ethernet" : "InfiniBand", peer->dev,
		       peer->link_layer == RDMA_LINK_ETH ? "Ethernet" : "InfiniBand");
		return -EPROTO;
	}
	mtu = peer->mtu < v->active_mtu || !v->active_mtu ? peer->mtu : v->active_mtu;
	q->rd_atomic = (unsigned)(peer->rd_atomic < v->max_rd_atomic ? peer->rd_atomic :
				  v->max_rd_atomic);
	for (unsigned i = 0; i < q->nqp; i++) {
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_RTR,
			.path_mtu = (enum ibv_mtu)mtu,
			.dest_qp_num = peer->qpn[i],
			.rq_psn = peer->psn[i],
			.max_dest_rd_atomic = (uint8_t)q->rd_atomic,
			.min_rnr_timer = 12,
			.ah_attr = {
				.is_global = 0,
				.dlid = peer->lid,
				.sl = 0,
				.src_path_bits = 0,
				.port_num = v->port,
			},
		};

		if (v->link_layer == RDMA_LINK_ETH) {
			a.ah_attr.is_global = 1;
			memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
			a.ah_attr.grh.sgid_index = (uint8_t)v->gid_index;
			a.ah_attr.grh.hop_limit = 64;
		}
		rc = ibv_modify_qp(q->qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER);
		if (rc) {
			seterr(err, errlen, "%s: QP %u to RTR (peer %s qpn %u): %s", v->name, i,
			       peer->dev, peer->qpn[i], strerror(rc));
			return -rc;
		}
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.timeout = 14;		/* 4.096 us * 2^14 = 67 ms per try */
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.sq_psn = q->psn[i];
		a.max_rd_atomic = (uint8_t)q->rd_atomic;
		rc = ibv_modify_qp(q->qp[i], &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
		if (rc) {
			seterr(err, errlen, "%s: QP %u to RTS: %s", v->name, i, strerror(rc));
			return -rc;
		}
	}
	q->connected = true;
	return 0;
}

void rdma_qps_reset(struct rdma_qps *q)
{
	if (!q)
		return;
	q->broken = true;
	if (q->sim) {
		q->sim->n = 0;
		q->sim->head = 0;
	} else {
		for (unsigned i = 0; i < q->nqp; i++) {
			struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

			if (q->qp[i])
				ibv_modify_qp(q->qp[i], &a, IBV_QP_STATE);
		}
	}
	memset(q->busy, 0, sizeof(q->busy));
	q->connected = false;
}

void rdma_qps_destroy(struct rdma_qps *q)
{
	if (!q)
		return;
	if (q->sim) {
		free(q->sim->q);
		free(q->sim->reg);
		free(q->sim);
		free(q);
		return;
	}
	for (unsigned i = 0; i < q->nqp; i++)
		if (q->qp[i])
			ibv_destroy_qp(q->qp[i]);
	if (q->cq)
		ibv_destroy_cq(q->cq);
	if (q->ch)
		ibv_destroy_comp_channel(q->ch);
	free(q);
}

int rdma_post(struct rdma_qps *q, unsigned i, bool write, uint64_t wr_id, void *laddr,
	      uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t len)
{
	if (i >= q->nqp || !len)
		return -EINVAL;
	if (q->busy[i] >= q->depth)
		return -EAGAIN;
	if (q->sim) {
		struct rdma_sim *s = q->sim;

		if (s->n == s->cap)
			return -EAGAIN;
		s->q[(s->head + s->n) % s->cap] = (struct sim_wr){
			.qp = i, .write = write, .wr_id = wr_id, .laddr = laddr, .lkey = lkey,
			.raddr = raddr, .rkey = rkey, .len = len,
		};
		s->n++;
		q->busy[i]++;
		return 0;
	}

	struct ibv_sge sge = {
		.addr = (uintptr_t)laddr,
		.length = len,
		.lkey = lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = raddr, .rkey = rkey },
	}, *bad = NULL;
	int rc = ibv_post_send(q->qp[i], &wr, &bad);

	if (rc)
		return rc == ENOMEM ? -EAGAIN : -rc;
	q->busy[i]++;
	return 0;
}

static int hw_poll(struct rdma_qps *q, struct rdma_wc *wc, int max)
{
	struct ibv_wc w[32];
	int n, k = 0;

	if (max > 32)
		max = 32;
	n = ibv_poll_cq(q->cq, max, w);
	if (n < 0)
		return -EIO;
	for (int i = 0; i < n; i++) {
		unsigned qi = 0;

		while (qi < q->nqp && q->qp[qi]->qp_num != w[i].qp_num)
			qi++;
		if (qi == q->nqp)
			continue;	/* not ours: cannot happen with one CQ per set */
		if (q->busy[qi])
			q->busy[qi]--;
		wc[k].wr_id = w[i].wr_id;
		wc[k].qp = qi;
		wc[k].status = w[i].status == IBV_WC_SUCCESS ? 0 : -EIO;
		wc[k].msg = w[i].status == IBV_WC_SUCCESS ? "" : ibv_wc_status_str(w[i].status);
		k++;
	}
	return k;
}

int rdma_poll(struct rdma_qps *q, struct rdma_wc *wc, int max, int timeout_ms)
{
	int n;

	if (q->sim)
		return sim_poll(q, wc, max);
	n = hw_poll(q, wc, max);
	if (n != 0 || timeout_ms <= 0 || !q->ch)
		return n;
	/* Arm, then poll again: a completion that landed before the arm
	 * raises no event. */
	if (ibv_req_notify_cq(q->cq, 0))
		return -EIO;
	n = hw_poll(q, wc, max);
	if (n != 0)
		return n;
	struct pollfd pfd = { .fd = q->ch->fd, .events = POLLIN };

	if (poll(&pfd, 1, timeout_ms) > 0) {
		struct ibv_cq *cq;
		void *cq_ctx;

		if (ibv_get_cq_event(q->ch, &cq, &cq_ctx) == 0)
			ibv_ack_cq_events(cq, 1);
	}
	return hw_poll(q, wc, max);
}

/* ---- bounce buffer ------------------------------------------------------ */

int rdma_bounce_init(struct rdma_bounce *b, void *base, uint64_t len, uint64_t slot)
{
	uint64_t n;

	memset(b, 0, sizeof(*b));
	if (!base || !slot || len < slot)
		return -EINVAL;
	n = len / slot;
	if (n > 1u << 20)
		n = 1u << 20;
	b->bits = calloc((n + 63) / 64, sizeof(*b->bits));
	if (!b->bits)
		return -ENOMEM;
	pthread_mutex_init(&b->lock, NULL);
	b->base = base;
	b->slot = slot;
	b->nslots = (unsigned)n;
	return 0;
}

void rdma_bounce_fini(struct rdma_bounce *b)
{
	if (!b->bits)
		return;
	pthread_mutex_destroy(&b->lock);
	free(b->bits);
	memset(b, 0, sizeof(*b));
}

int rdma_bounce_get(struct rdma_bounce *b)
{
	int slot = -1;

	pthread_mutex_lock(&b->lock);
	if (b->used < b->nslots) {
		for (unsigned w = 0; w < (b->nslots + 63) / 64; w++) {
			uint64_t free_bits = ~b->bits[w];

			if (!free_bits)
				continue;
			unsigned bit = (unsigned)__builtin_ctzll(free_bits);

			if (w * 64 + bit >= b->nslots)
				break;
			b->bits[w] |= 1ull << bit;
			b->used++;
			slot = (int)(w * 64 + bit);
			break;
		}
	}
	pthread_mutex_unlock(&b->lock);
	return slot;
}

void rdma_bounce_put(struct rdma_bounce *b, int slot)
{
	if (slot < 0 || (unsigned)slot >= b->nslots)
		return;
	pthread_mutex_lock(&b->lock);
	if (b->bits[slot / 64] & (1ull << (slot % 64))) {
		b->bits[slot / 64] &= ~(1ull << (slot % 64));
		b->used--;
	}
	pthread_mutex_unlock(&b->lock);
}

/* ---- transfer engine ---------------------------------------------------- */

struct rdma_piece {
	struct rdma_xfer *x;
	uint64_t pos, len;		/* range of the image */
	int slot;			/* bounce slot, -1: direct */
	bool final;			/* the publishing magic write */
	struct rdma_piece *prev, *next;	/* e->flying */
};

void rdma_eng_init(struct rdma_eng *e, struct rdma_qps *q, struct rdma_bounce *bounce,
		   const struct rdma_mr_chunk *bc, uint32_t nbc)
{
	memset(e, 0, sizeof(*e));
	e->q = q;
	e->bounce = bounce;
	e->bc = bc;
	e->nbc = nbc;
}

void rdma_eng_add(struct rdma_eng *e, struct rdma_xfer *x)
{
	x->status = 0;
	x->cursor = 0;
	x->inflight = 0;
	x->final_posted = false;
	x->next = NULL;
	if (e->tail)
		e->tail->next = x;
	else
		e->head = x;
	e->tail = x;
	e->pending++;
}

static uint64_t img_len(const struct rdma_xfer *x)
{
	return (uint64_t)x->hdr_len + x->vlen;
}

/* Copies image bytes [pos, pos + len) between the image's two local parts
 * and buf: to buf for a write (staging), from buf for a read. */
static void img_copy(struct rdma_xfer *x, uint64_t pos, uint64_t len, uint8_t *buf, bool to_buf)
{
	while (len) {
		uint8_t *p;
		uint64_t n;

		if (pos < x->hdr_len) {
			p = x->hdr + pos;
			n = x->hdr_len - pos;
		} else {
			p = x->val + (pos - x->hdr_len);
			n = img_len(x) - pos;
		}
		if (n > len)
			n = len;
		if (to_buf)
			memcpy(buf, p, n);
		else
			memcpy(p, buf, n);
		buf += n;
		pos += n;
		len -= n;
	}
}

/* The least busy QP with room (round-robin among ties), -1 if all full. */
static int pick_qp(struct rdma_eng *e)
{
	struct rdma_qps *q = e->q;
	int best = -1;

	for (unsigned k = 0; k < q->nqp; k++) {
		unsigned i = (e->rr + k) % q->nqp;

		if (q->busy[i] < q->depth && (best < 0 || q->busy[i] < q->busy[best]))
			best = (int)i;
	}
	if (best >= 0)
		e->rr = ((unsigned)best + 1) % q->nqp;
	return best;
}

static void fly_add(struct rdma_eng *e, struct rdma_piece *p)
{
	p->prev = NULL;
	p->next = e->flying;
	if (e->flying)
		e->flying->prev = p;
	e->flying = p;
}

static void fly_del(struct rdma_eng *e, struct rdma_piece *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		e->flying = p->next;
	if (p->next)
		p->next->prev = p->prev;
}

enum post_res { POST_OK, POST_BLOCKED, POST_FAILED };

/* Builds and posts the next piece of x. */
static enum post_res post_piece(struct rdma_eng *e, struct rdma_xfer *x)
{
	struct rdma_qps *q = e->q;
	uint64_t total = img_len(x), pos = x->cursor, len, rspan;
	uint32_t ri = 0, li = 0, lkey = 0;
	struct rdma_piece *p;
	uint8_t *laddr;
	bool final = pos == total;
	int qp, slot = -1, rc;

	qp = pick_qp(e);
	if (qp < 0)
		return POST_BLOCKED;
	if (final) {
		/* The magic: 4 bytes at the start of the image, last. */
		pos = 0;
		len = 4;
	} else {
		len = total - pos;
	}
	rspan = rdma_chunk_span(x->rc, x->nrc, x->raddr + pos, len, &ri);
	if (!rspan || (final && rspan < 4)) {
		x->status = -EFAULT;
		return POST_FAILED;
	}
	len = rspan;
	if (final || pos < x->hdr_len || !x->lc) {
		uint64_t bspan;

		if (!e->bounce)
			goto out_fault;
		slot = rdma_bounce_get(e->bounce);
		if (slot < 0)
			return POST_BLOCKED;
		laddr = rdma_bounce_ptr(e->bounce, slot);
		if (len > e->bounce->slot)
			len = e->bounce->slot;
		if (x->lc && !final && len > x->hdr_len - pos)
			len = x->hdr_len - pos;	/* the value goes direct */
		bspan = rdma_chunk_span(e->bc, e->nbc, (uintptr_t)laddr, len, &li);
		if (!bspan) {
			rdma_bounce_put(e->bounce, slot);
			goto out_fault;
		}
		len = bspan;
		lkey = e->bc[li].lkey;
		if (final)
			memcpy(laddr, &x->magic, 4);
		else if (x->write)
			img_copy(x, pos, len, laddr, true);
	} else {
		uint64_t lspan;

		laddr = x->val + (pos - x->hdr_len);
		if (len > RDMA_PIECE_MAX)
			len = RDMA_PIECE_MAX;
		lspan = rdma_chunk_span(x->lc, x->nlc, (uintptr_t)laddr, len, &li);
		if (!lspan)
			goto out_fault;
		len = lspan;
		lkey = x->lc[li].lkey;
	}
	if (len > UINT32_MAX)
		len = 1u << 30;
	p = malloc(sizeof(*p));
	if (!p) {
		if (slot >= 0)
			rdma_bounce_put(e->bounce, slot);
		x->status = -ENOMEM;
		return POST_FAILED;
	}
	*p = (struct rdma_piece){ .x = x, .pos = pos, .len = len, .slot = slot, .final = final };
	rc = rdma_post(q, (unsigned)qp, x->write || final, (uintptr_t)p, laddr, lkey,
		       x->raddr + pos, x->rc[ri].rkey, (uint32_t)len);
	if (rc == -EAGAIN) {
		free(p);
		if (slot >= 0)
			rdma_bounce_put(e->bounce, slot);
		return POST_BLOCKED;
	}
	if (rc < 0) {
		log_warn("rdma: post on qp %d: %s", qp, strerror(-rc));
		free(p);
		if (slot >= 0)
			rdma_bounce_put(e->bounce, slot);
		q->broken = true;
		x->status = -EIO;
		return POST_FAILED;
	}
	fly_add(e, p);
	e->posted++;
	x->inflight++;
	if (final)
		x->final_posted = true;
	else
		x->cursor = pos + len;
	return POST_OK;

out_fault:
	x->status = -EFAULT;
	return POST_FAILED;
}

static bool xfer_done(const struct rdma_xfer *x)
{
	if (x->inflight)
		return false;
	if (x->status)
		return true;
	if (x->cursor < img_len(x))
		return false;
	return !x->write || !x->publish || x->final_posted;
}

/* Posts as much as the QPs and the bounce buffer take, in order. */
static void eng_kick(struct rdma_eng *e)
{
	for (struct rdma_xfer *x = e->head; x; x = x->next) {
		for (;;) {
			enum post_res r;

			if (x->status)
				break;
			if (e->q->broken) {
				x->status = -ECONNRESET;
				break;
			}
			if (x->cursor == img_len(x)) {
				/* Publish only once everything else landed. */
				if (!x->write || !x->publish || x->final_posted || x->inflight)
					break;
			}
			r = post_piece(e, x);
			if (r == POST_BLOCKED)
				return;
			if (r == POST_FAILED)
				break;
		}
	}
}

static void piece_done(struct rdma_eng *e, struct rdma_piece *p, const struct rdma_wc *wc)
{
	struct rdma_xfer *x = p->x;

	fly_del(e, p);
	e->completed++;
	if (wc->status) {
		if (!e->q->broken)
			log_warn("rdma: work request failed: %s", wc->msg);
		e->q->broken = true;
		if (!x->status)
			x->status = wc->status;
	} else if (!x->write && p->slot >= 0 && !x->status) {
		img_copy(x, p->pos, p->len, rdma_bounce_ptr(e->bounce, p->slot), false);
	}
	if (p->slot >= 0)
		rdma_bounce_put(e->bounce, p->slot);
	x->inflight--;
	free(p);
}

/* Unlinks finished transfers and runs their callbacks. */
static size_t eng_reap(struct rdma_eng *e)
{
	struct rdma_xfer *done = NULL, **dt = &done, **pp = &e->head, *last = NULL;
	size_t n = 0;

	while (*pp) {
		struct rdma_xfer *x = *pp;

		if (xfer_done(x)) {
			*pp = x->next;
			x->next = NULL;
			*dt = x;
			dt = &x->next;
			e->pending--;
			n++;
		} else {
			last = x;
			pp = &x->next;
		}
	}
	e->tail = last;
	while (done) {
		struct rdma_xfer *x = done;

		done = x->next;
		x->next = NULL;
		if (x->done)
			x->done(x);
	}
	return n;
}

size_t rdma_eng_progress(struct rdma_eng *e, int timeout_ms)
{
	struct rdma_wc wc[32];
	bool waited = false;

	for (;;) {
		int n;

		eng_kick(e);
		n = rdma_poll(e->q, wc, 32, waited || !e->flying ? 0 : timeout_ms);
		if (n < 0) {
			rdma_eng_abort(e, -EIO);
			return 0;
		}
		for (int i = 0; i < n; i++)
			piece_done(e, (struct rdma_piece *)(uintptr_t)wc[i].wr_id, &wc[i]);
		size_t fin = eng_reap(e);

		if (n == 32)
			continue;	/* more may be waiting */
		if (n || fin || waited || !timeout_ms || !e->pending)
			break;
		if (!e->flying) {
			/* Waiting for bounce slots other threads hold. */
			usleep(50);
			break;
		}
		waited = true;
	}
	return e->pending;
}

void rdma_eng_abort(struct rdma_eng *e, int status)
{
	/* The HCA must stop touching our buffers before they are reused. */
	if (e->q)
		rdma_qps_reset(e->q);
	while (e->flying) {
		struct rdma_piece *p = e->flying;

		fly_del(e, p);
		if (p->slot >= 0)
			rdma_bounce_put(e->bounce, p->slot);
		p->x->inflight--;
		free(p);
	}
	for (struct rdma_xfer *x = e->head; x; x = x->next)
		if (!x->status)
			x->status = status;
	eng_reap(e);
}

/* rdma: kvpool's ibverbs layer (see rdma.h): devices, PDs, chunked memory
 * registration and its arithmetic, RC QP sets (and the simulated ones of
 * the unit tests), posting and polling. The codecs of rdma_info and the QP
 * exchange are in rdma_codec.c, the bounce buffer and the transfer engine
 * in rdma_eng.c. The verbs calls follow rdma-core's rc_pingpong. ibverbs
 * returns positive errno values; they become negative here, at the
 * boundary. No global state.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "log.h"
#include "rdma.h"

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
		log_seterr(note, notelen, "%s: cannot open: %s", v->name, strerror(-rc));
		return 0;
	}
	if ((rc = ibv_query_device(v->ctx, &da)) != 0) {
		log_seterr(note, notelen, "%s: query_device: %s", v->name, strerror(rc));
		goto out_close;
	}
	for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
		if (ibv_query_port(v->ctx, p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
			v->port = p;
			break;
		}
	}
	if (!v->port) {
		log_seterr(note, notelen, "%s: no active port", v->name);
		goto out_close;
	}
	v->link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? RDMA_LINK_ETH : RDMA_LINK_IB;
	v->lid = pa.lid;
	v->active_mtu = (uint8_t)pa.active_mtu;
	v->gid_index = -1;
	if (v->link_layer == RDMA_LINK_ETH) {
		v->gid_index = pick_gid(v->ctx, v->port, pa.gid_tbl_len, v->gid);
		if (v->gid_index < 0) {
			log_seterr(note, notelen, "%s: RoCE port without a usable GID (no IP address?)",
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
		log_seterr(note, notelen, "%s: cannot allocate a protection domain", v->name);
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
			log_seterr(err, errlen, "no RDMA device (ibverbs lists none)");
		else if (notes[0])
			log_seterr(err, errlen, "no RDMA device usable: %s", notes);
		else
			log_seterr(err, errlen, "no RDMA device matches [rdma] devices = %s", filter);
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
			log_seterr(err, errlen, "%s: cannot plan the registration of %llu bytes "
			      "(max_mr_size %llu)", v->name, (unsigned long long)len,
			      (unsigned long long)v->max_mr_size);
			rc = n;
			goto out_dereg;
		}
		if (need > RDMA_MAX_CHUNKS || !need) {
			log_seterr(err, errlen, "%s: %llu bytes need %zu memory regions of at most "
			      "%llu bytes (limit %u)", v->name, (unsigned long long)len, need,
			      (unsigned long long)v->max_mr_size, RDMA_MAX_CHUNKS);
			rc = -E2BIG;
			goto out_dereg;
		}
		out->dev[d].c = calloc(need, sizeof(*out->dev[d].c));
		out->dev[d].mr = calloc(need, sizeof(*out->dev[d].mr));
		out->ndev = d + 1;
		if (!out->dev[d].c || !out->dev[d].mr) {
			log_seterr(err, errlen, "out of memory");
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
				log_seterr(err, errlen, "ibv_reg_mr on %s (%llu bytes, region %zu of %zu):"
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
			log_seterr(err, errlen, "%s: ibv_create_comp_channel: %s", dev->name,
			      strerror(-rc));
			goto out_free;
		}
		/* rdma_poll polls the fd; reading an event must not block. */
		fcntl(q->ch->fd, F_SETFL, fcntl(q->ch->fd, F_GETFL) | O_NONBLOCK);
	}
	q->cq = ibv_create_cq(dev->ctx, cqe, NULL, q->ch, 0);
	if (!q->cq) {
		rc = -errno;
		log_seterr(err, errlen, "%s: ibv_create_cq(%d): %s", dev->name, cqe, strerror(-rc));
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
			log_seterr(err, errlen, "%s: ibv_create_qp %u of %u: %s", dev->name, i + 1, nqp,
			      strerror(-rc));
			goto out_destroy;
		}
		q->nqp = i + 1;
		rc = ibv_modify_qp(q->qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				   IBV_QP_ACCESS_FLAGS);
		if (rc) {
			log_seterr(err, errlen, "%s: QP to INIT: %s", dev->name, strerror(rc));
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
		log_seterr(err, errlen, "peer has %u queue pairs, we have %u", peer->nqp, q->nqp);
		return -EPROTO;
	}
	if (peer->link_layer != v->link_layer) {
		log_seterr(err, errlen, "%s is %s, peer %s is %s", v->name,
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
			log_seterr(err, errlen, "%s: QP %u to RTR (peer %s qpn %u): %s", v->name, i,
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
			log_seterr(err, errlen, "%s: QP %u to RTS: %s", v->name, i, strerror(rc));
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

/* xport: the transfer runs of libkvpool (see xport.h): one API call's
 * transfers spread over the transports and driven on the calling thread,
 * plus the host staging of device buffers the remote paths need.
 */
#include <stdlib.h>

#include "cuda.h"
#include "kvpool.h"
#include "log.h"
#include "xp_rdma.h"
#include "xport.h"

static const struct xport_ops *const xports[XP_NKIND] = {
	[XP_LOCAL] = &xp_local_ops,
	[XP_TCP] = &xp_tcp_ops,
	[XP_RDMA] = &xp_rdma_ops,
};

void xp_run_add(struct xp_run *r, struct xp_op *op)
{
	r->adds++;
	if (!r->st[op->kind])
		r->st[op->kind] = xports[op->kind]->begin(r->kvp, r->deadline);
	if (!r->st[op->kind]) {
		op->status = KVP_ENOMEM;
		op->next = r->failed;
		r->failed = op;
		return;
	}
	xports[op->kind]->add(r->st[op->kind], op);
}

/* Drives every transport of the run until nothing is pending: network
 * transfers are pushed and polled between chunks of local copying, and
 * block in poll() only once no local work is waiting. */
void xp_run_wait(struct xp_run *r)
{
	for (;;) {
		uint64_t adds = r->adds;
		size_t pend = 0;
		bool local_busy = false;

		while (r->failed) {
			struct xp_op *op = r->failed;

			r->failed = op->next;
			op->next = NULL;
			op->done(op);
		}
		if (r->st[XP_LOCAL]) {
			size_t k = xports[XP_LOCAL]->progress(r->st[XP_LOCAL], false);

			pend += k;
			local_busy = k > 0;
		}
		for (int k = XP_LOCAL + 1; k < XP_NKIND; k++)
			if (r->st[k])
				pend += xports[k]->progress(r->st[k], !local_busy);
		if (!pend && adds == r->adds && !r->failed)
			break;
	}
	for (int k = 0; k < XP_NKIND; k++) {
		if (r->st[k])
			xports[k]->end(r->st[k]);
		r->st[k] = NULL;
	}
}

int xp_device_refused(const void *p)
{
	log_err("kvpool: %p is GPU memory but CUDA is not usable here (%s)", p, cuda_status());
	return KVP_ENOTSUP;
}

bool xp_retryable(int rc)
{
	return rc == KVP_ECONN || rc == KVP_EIO || rc == KVP_ENOSEG || rc == KVP_ESTALE;
}

void *xp_stage_alloc(size_t n, bool *pinned)
{
	void *p = NULL;

	*pinned = cuda_malloc_host(&p, n ? n : 1) == 0;
	return *pinned ? p : malloc(n ? n : 1);
}

void xp_stage_free(void *p, bool pinned)
{
	if (p && pinned)
		cuda_free_host(p);
	else
		free(p);
}

size_t xp_iov_find(const struct xp_op *op, uint64_t pos, uint64_t *off)
{
	size_t i = 0;

	/* Zero-length pieces are passed over: a position belongs to the
	 * piece that holds its byte. */
	while (i < op->niov && pos >= op->iov[i].len) {
		pos -= op->iov[i].len;
		i++;
	}
	*off = i < op->niov ? pos : 0;
	return i;
}

int xp_value_checksum(const struct xp_op *op, uint64_t *csum)
{
	struct ext_csum cs;

	if (!op->niov) {
		*csum = ext_checksum(op->src, op->h.value_len);
		return 0;
	}
	if (ext_csum_init(&cs) < 0)
		return KVP_ENOMEM;
	for (size_t i = 0; i < op->niov; i++)
		if (op->iov[i].len)
			ext_csum_update(&cs, op->iov[i].base, op->iov[i].len);
	*csum = ext_csum_final(&cs);
	return 0;
}

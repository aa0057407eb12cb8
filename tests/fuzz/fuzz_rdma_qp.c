/* fuzz_rdma_qp: arbitrary bytes as the queue-pair record of
 * WIRE_OP_RDMA_CONNECT, which a node decodes from any authenticated client
 * and a client from the node's reply (rdma_qp_rec_decode). Asserts the
 * invariants rdma_qps_connect relies on (1..64 QPs, 24-bit QP numbers and
 * PSNs, an MTU enum, a printable device name) and that a decoded record
 * encodes back to the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rdma.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rdma_qp_rec r;
	char err[256];
	struct wbuf b;

	err[0] = 0;
	if (rdma_qp_rec_decode(data, size, &r, err, sizeof(err)) != 0) {
		if (!err[0])
			abort();
		return 0;
	}
	if (r.nqp < 1 || r.nqp > RDMA_MAX_QPS || r.mtu < 1 || r.mtu > 5 || !r.rd_atomic ||
	    !r.dev[0] || strlen(r.dev) >= RDMA_NAME_MAX ||
	    (r.link_layer != RDMA_LINK_IB && r.link_layer != RDMA_LINK_ETH))
		abort();
	for (unsigned i = 0; i < r.nqp; i++)
		if (!r.qpn[i] || r.qpn[i] > 0xffffff || r.psn[i] > 0xffffff)
			abort();
	for (unsigned i = r.nqp; i < RDMA_MAX_QPS; i++)
		if (r.qpn[i] || r.psn[i])
			abort();
	wb_init(&b);
	if (rdma_qp_rec_encode(&b, &r) != 0 || b.len != size || memcmp(b.p, data, size))
		abort();
	wb_free(&b);
	return 0;
}

/* t_path: which transport moves a replica. The pure rule (local shm >
 * RDMA > TCP per replica, [client] protocol overrides, disk replicas only
 * through their node) for every combination; then a real pool whose nodes
 * run with [rdma] enabled on a host without an RDMA device: the nodes say
 * so and serve TCP (empty rdma_info, RDMA_CONNECT answered KVP_ENOTSUP,
 * /metrics and /health report RDMA off and the NUMA binding), a client
 * forcing protocol = rdma fails to open with KVP_ENOTSUP, and clients on
 * auto / tcp / local move bytes on the path the counters prove. Device
 * pointers are refused or staged, never memcpy'd, when CUDA is absent: a
 * host buffer still works with the CUDA loader disabled. Local reads
 * stream their stores from the size the rule names. Exit 0/1/77.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "testlib.h"
#include "client_i.h"
#include "rdma.h"
#include "segment.h"
#include "wire.h"
#include "xp_rdma.h"

static void t_choose(void)
{
	const enum client_proto protos[] = { CLIENT_AUTO, CLIENT_LOCAL, CLIENT_TCP, CLIENT_RDMA };

	for (int pi = 0; pi < 4; pi++) {
		enum client_proto p = protos[pi];

		for (int m = 0; m < 8; m++) {
			bool local = m & 1, rdma = m & 2, tcp = m & 4;
			int mem = xp_path_choose(p, local, rdma, tcp, KVP_TIER_MEM);
			int disk = xp_path_choose(p, local, rdma, tcp, KVP_TIER_DISK);
			int want;

			switch (p) {
			case CLIENT_AUTO:
				want = local ? XP_LOCAL : rdma ? XP_RDMA : tcp ? XP_TCP : -1;
				break;
			case CLIENT_LOCAL:
				want = local ? XP_LOCAL : -1;
				break;
			case CLIENT_TCP:
				want = tcp ? XP_TCP : -1;
				break;
			default:
				want = rdma ? XP_RDMA : -1;
				break;
			}
			CHECK(mem == want);
			/* spill replicas: only the node reads them, over TCP */
			CHECK(disk == (p != CLIENT_LOCAL && tcp ? XP_TCP : -1));
		}
	}
}

/* ---- raw data-server connection ----------------------------------------- */

static int raw_connect(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	REQUIRE(fd >= 0);
	REQUIRE(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	struct timeval tv = { .tv_sec = 5 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static int raw_call(int fd, uint16_t op, uint64_t reqid, const struct wbuf *body, struct wire_hdr *h,
		    uint8_t *rbody, size_t cap)
{
	struct wbuf b;
	uint8_t hb[WIRE_HDR_SIZE];
	size_t st, got = 0;

	wb_init(&b);
	st = wire_begin(&b);
	if (body)
		wb_bytes(&b, body->p, body->len);
	wire_finish(&b, st, op, 0, 0, reqid, 0);
	REQUIRE(send(fd, b.p, b.len, MSG_NOSIGNAL) == (ssize_t)b.len);
	wb_free(&b);
	while (got < sizeof(hb)) {
		ssize_t k = recv(fd, hb + got, sizeof(hb) - got, 0);

		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	if (wire_hdr_decode(hb, h, 1 << 20, 1 << 20) < 0 || h->body_len > cap ||
	    h->body_len + h->payload_len > cap)
		return -1;
	/* body, then any payload (discarded: it lands after the body) */
	for (got = 0; got < h->body_len + h->payload_len;) {
		ssize_t k = recv(fd, rbody + got, h->body_len + h->payload_len - got, 0);

		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	return 0;
}

/* HELLO, then RDMA_CONNECT with a well-formed record: a node without RDMA
 * answers KVP_ENOTSUP and keeps the connection usable. */
static void t_node_connect(int port)
{
	int fd = raw_connect(port);
	struct wire_hdr h;
	uint8_t body[4096];
	struct wbuf b;

	wb_init(&b);
	wb_u16(&b, WIRE_ROLE_CLIENT);
	wb_cstr(&b, "");
	wb_cstr(&b, "t_path");
	wb_cstr(&b, "t_path-host");
	REQUIRE(raw_call(fd, WIRE_OP_HELLO, 1, &b, &h, body, sizeof(body)) == 0);
	CHECK(h.status == 0);
	wb_free(&b);

	struct rdma_qp_rec r;

	memset(&r, 0, sizeof(r));
	strcpy(r.dev, "mlx5_0");
	r.port = 1;
	r.link_layer = RDMA_LINK_IB;
	r.lid = 3;
	r.mtu = 5;
	r.rd_atomic = 16;
	r.nqp = 2;
	r.qpn[0] = 0x11;
	r.qpn[1] = 0x12;
	wb_init(&b);
	REQUIRE(rdma_qp_rec_encode(&b, &r) == 0);
	REQUIRE(raw_call(fd, WIRE_OP_RDMA_CONNECT, 2, &b, &h, body, sizeof(body)) == 0);
	CHECK(h.opcode == WIRE_OP_RDMA_CONNECT && (h.flags & WIRE_F_REPLY) && h.reqid == 2);
	CHECK_RC(h.status, KVP_ENOTSUP);
	CHECK(h.body_len == 0);
	wb_free(&b);
	/* garbage record: refused the same way (no RDMA here to parse for),
	 * and the connection still answers */
	wb_init(&b);
	wb_u8(&b, 9);
	REQUIRE(raw_call(fd, WIRE_OP_RDMA_CONNECT, 3, &b, &h, body, sizeof(body)) == 0);
	CHECK(h.status == KVP_ENOTSUP || h.status == KVP_EPROTO);
	wb_free(&b);
	wb_init(&b);
	wb_u8(&b, 0);
	wb_u64(&b, SEG_DATA_OFF);
	wb_u64(&b, 64);
	REQUIRE(raw_call(fd, WIRE_OP_READ, 4, &b, &h, body, sizeof(body)) == 0);
	CHECK(h.reqid == 4);
	wb_free(&b);
	close(fd);
}

static char *http_get(int port, const char *path)
{
	int fd = raw_connect(port);
	char req[256];
	static char buf[1 << 17];
	size_t got = 0;

	snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
	REQUIRE(send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req));
	for (;;) {
		ssize_t k = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);

		if (k <= 0)
			break;
		got += (size_t)k;
	}
	buf[got] = 0;
	close(fd);
	return buf;
}

static void roundtrip(struct kvp *k, const char *key, size_t len)
{
	uint8_t *v = malloc(len), *back = malloc(len);

	REQUIRE(v && back);
	tl_fill(v, len, key);
	CHECK_RC(kvp_put(k, key, v, len), 0);
	memset(back, 0, len);
	CHECK_RC(kvp_get_into(k, key, back, len), (int64_t)len);
	CHECK(tl_check_fill(back, len, key));
	free(v);
	free(back);
}

/* Which local reads stream their stores: from 4 MiB a call, or from a
 * quarter of the last-level cache where the CPU says it has a larger one
 * (a batch that stays in cache lands faster with plain stores). */
static void t_nt_read(void)
{
	long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
	uint64_t want = 4u << 20;

	if (llc > 0 && (uint64_t)llc / 4 > want)
		want = (uint64_t)llc / 4;
	CHECK(xp_local_nt_read_min() == want);
	CHECK(!xp_local_nt_read(1u << 20));
	CHECK(!xp_local_nt_read((4u << 20) - 1));
	CHECK(!xp_local_nt_read(want - 1));
	CHECK(xp_local_nt_read(want));
	CHECK(xp_local_nt_read(UINT64_MAX));
}

int main(void)
{
	struct tl_pool *p;
	struct kvp *k;
	struct kvp_stats st;
	int err = 0;

	/* No CUDA in this test, whatever the host has: device pointers can
	 * then not exist and host buffers must take the usual paths. */
	setenv("KVP_CUDA_LIB", "none", 1);
	t_choose();
	t_nt_read();
	p = tl_pool_start(2, 64, "[rdma]\nenabled = true\n[node]\nnuma_node = auto\n");

	t_node_connect(p->dport[0]);
	char *m = http_get(p->hport[0], "/metrics");

	CHECK(strstr(m, "kvpool_node_rdma_devices 0") != NULL);
	CHECK(strstr(m, "kvpool_node_numa_node 0") != NULL);
	m = http_get(p->hport[1], "/health");
	CHECK(strstr(m, "\"rdma\":\"\"") != NULL);
	CHECK(strstr(m, "\"numa_node\":0") != NULL);

	/* protocol = rdma with no device: a clear refusal at open */
	const char *force[] = { "client.protocol=rdma", NULL };

	k = tl_pool_open(p, force, &err);
	CHECK(k == NULL);
	CHECK_RC(err, KVP_ENOTSUP);
	kvp_close(k);

	/* auto with [rdma] enabled and no device: TCP for remote replicas */
	const char *remote[] = { "client.host_id=t-path-elsewhere", NULL };

	k = tl_pool_open(p, remote, &err);
	REQUIRE(k != NULL);
	CHECK(k->rdma == NULL);
	for (size_t i = 0; i < k->nsegs; i++) {
		CHECK(k->segs[i]->rdma == NULL);	/* nodes published no rdma_info */
		CHECK(!xp_rdma_seg_ok(k, k->segs[i]));
	}
	uint8_t *rb = malloc(1 << 20);

	REQUIRE(rb);
	CHECK_RC(kvp_register_buffer(k, rb, 1 << 20), 0);	/* nothing to register with */
	roundtrip(k, "path/remote", (1 << 20) + 5);
	REQUIRE(kvp_stats(k, &st) == 0);
	CHECK(st.tcp_bytes >= 2 * ((1 << 20) + 5));
	CHECK(st.rdma_bytes == 0 && st.local_bytes == 0);
	CHECK_RC(kvp_unregister_buffer(k, rb), 0);
	kvp_close(k);
	free(rb);

	/* same host, auto: local */
	k = tl_pool_open(p, NULL, &err);
	REQUIRE(k != NULL);
	roundtrip(k, "path/local", 300000);
	REQUIRE(kvp_stats(k, &st) == 0);
	CHECK(st.local_bytes >= 2 * 300000);
	CHECK(st.tcp_bytes == 0 && st.rdma_bytes == 0);
	kvp_close(k);

	/* same host, protocol = tcp: TCP even though the segment maps */
	const char *tcp[] = { "client.protocol=tcp", NULL };

	k = tl_pool_open(p, tcp, &err);
	REQUIRE(k != NULL);
	roundtrip(k, "path/tcp", 300000);
	REQUIRE(kvp_stats(k, &st) == 0);
	CHECK(st.tcp_bytes >= 2 * 300000);
	CHECK(st.local_bytes == 0);
	kvp_close(k);

	/* other host, protocol = local: nothing may move */
	const char *local_remote[] = { "client.protocol=local", "client.host_id=t-path-elsewhere",
				       NULL };

	k = tl_pool_open(p, local_remote, &err);
	REQUIRE(k != NULL);
	uint8_t v[100] = { 1 };

	CHECK_RC(kvp_put(k, "path/never", v, sizeof(v)), KVP_ENOTSUP);
	kvp_close(k);
	return tl_done();
}

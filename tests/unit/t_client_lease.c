/* t_client_lease: a get releases its read lease once its copy is verified
 * (one LEASE_RELEASE frame per call, batches included, not waited for),
 * against a master with a 3 s lease_ttl and one 8 MiB node: remove right
 * after kvp_get / kvp_get_into / kvp_batch_get_into succeeds, a just-read
 * object is evicted for a put that needs its room, an upserted value's
 * old extent is reused at once; a reader that dies after its GET (a raw
 * connection that never releases) still blocks removal until lease_ttl.
 * Exit 0/1/77.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "net.h"
#include "testlib.h"
#include "wire.h"

#define LEASE_MS 3000
#define BIG (5u << 20)

/* Reads one reply frame; its status (or -1 when the connection failed). */
static int raw_reply(int fd, struct rbuf *r, uint8_t **body)
{
	uint8_t hb[WIRE_HDR_SIZE];
	struct wire_hdr h;

	if (net_recv_all(fd, hb, sizeof(hb), clock_now_ms() + 5000) < 0 ||
	    wire_hdr_decode(hb, &h, 1 << 20, 0) < 0)
		return -1;
	*body = malloc(h.body_len + 1);
	if (!*body || net_recv_all(fd, *body, h.body_len, clock_now_ms() + 5000) < 0)
		return -1;
	rb_init(r, *body, h.body_len);
	return h.status;
}

/* A reader that dies mid-read: HELLO and GET of key on its own connection,
 * then the connection closes without a LEASE_RELEASE. */
static void dead_reader(const struct tl_pool *p, const char *key)
{
	char addr[64];
	struct wbuf b;
	struct rbuf r;
	uint8_t *body = NULL;
	size_t at;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", p->mport);
	int fd = net_connect(addr, 5000, NULL, 0);
	REQUIRE(fd >= 0);
	wb_init(&b);
	at = wire_begin(&b);
	wb_u16(&b, WIRE_ROLE_CLIENT);
	wb_cstr(&b, "");
	wb_cstr(&b, "t_client_lease");
	wb_cstr(&b, "dead-reader");
	wire_finish(&b, at, WIRE_OP_HELLO, 0, 0, 1, 0);
	at = wire_begin(&b);
	wb_u32(&b, 1);
	wb_cstr(&b, key);
	wire_finish(&b, at, WIRE_OP_GET, 0, 0, 2, 0);
	REQUIRE(!b.oom && net_send_all(fd, b.p, b.len, clock_now_ms() + 5000) == 0);
	wb_free(&b);
	REQUIRE(raw_reply(fd, &r, &body) == 0);		/* HELLO */
	free(body);
	REQUIRE(raw_reply(fd, &r, &body) == 0);		/* GET */
	CHECK(rb_u32(&r) == 1 && rb_status(&r) == 0);
	free(body);
	close(fd);
}

static uint64_t releases(struct kvp *k)
{
	struct kvp_stats st;

	kvp_stats(k, &st);
	return st.lease_releases;
}

int main(void)
{
	char extra[256];

	snprintf(extra, sizeof(extra), "[master]\nlease_ttl = %dms\n", LEASE_MS);
	struct tl_pool *p = tl_pool_start(1, 8, extra);
	int err, res[4];
	int64_t res64[4];
	/* Every get through the master (the ones this test is about), none
	 * answered from a remembered location without a lease (see the end). */
	const char *plain[] = { "client.optimistic_reads=false", NULL };
	struct kvp *k = tl_pool_open(p, plain, &err);
	uint8_t *v = malloc(BIG), *out = malloc(BIG);
	void *g = NULL;
	size_t glen = 0;

	REQUIRE(k && v && out);
	memset(v, 'x', BIG);

	/* each get form, then a plain remove: no KVP_ELEASED */
	CHECK_RC(kvp_put(k, "l/get", v, 1000), 0);
	CHECK_RC(kvp_get(k, "l/get", &g, &glen), 0);
	kvp_free(g);
	CHECK_RC(kvp_remove(k, "l/get", 0), 0);
	tl_fill(v, 1000, "l/into");
	CHECK_RC(kvp_put(k, "l/into", v, 1000), 0);
	CHECK(kvp_get_into(k, "l/into", out, BIG) == 1000);
	CHECK(tl_check_fill(out, 1000, "l/into"));
	memset(v, 'x', BIG);
	CHECK_RC(kvp_remove(k, "l/into", 0), 0);
	CHECK_RC(kvp_put(k, "l/small", v, 1000), 0);
	CHECK(kvp_get_into(k, "l/small", out, 10) == KVP_ETOOBIG);	/* not read: released too */
	CHECK_RC(kvp_remove(k, "l/small", 0), 0);

	/* a batch of four: one LEASE_RELEASE frame */
	const char *keys[] = { "l/b0", "l/b1", "l/b2", "l/b3" };
	const void *bufs[] = { v, v, v, v };
	size_t lens[] = { 10, 20, 30, 40 };
	void *outs[] = { out, out + 100, out + 200, out + 300 };
	size_t caps[] = { 100, 100, 100, 100 };
	CHECK_RC(kvp_batch_put_from(k, 4, keys, bufs, lens, res), 0);
	uint64_t r0 = releases(k);
	CHECK_RC(kvp_batch_get_into(k, 4, keys, outs, caps, res64), 0);
	for (int i = 0; i < 4; i++)
		CHECK(res64[i] == (int64_t)lens[i]);
	CHECK(releases(k) == r0 + 1);
	CHECK_RC(kvp_batch_remove(k, 4, keys, 0, res), 0);
	for (int i = 0; i < 4; i++)
		CHECK_RC(res[i], 0);
	/* an optimistic read (keys this handle just put) takes no lease and
	 * so releases none: no frame at all */
	{
		struct kvp *ko = tl_pool_open(p, NULL, &err);

		REQUIRE(ko);
		CHECK_RC(kvp_batch_put_from(ko, 4, keys, bufs, lens, res), 0);
		r0 = releases(ko);
		CHECK_RC(kvp_batch_get_into(ko, 4, keys, outs, caps, res64), 0);
		for (int i = 0; i < 4; i++)
			CHECK(res64[i] == (int64_t)lens[i]);
		CHECK(releases(ko) == r0);
		CHECK_RC(kvp_batch_remove(ko, 4, keys, 0, res), 0);
		kvp_close(ko);
	}

	/* a just-read object is evictable at once: 5 MiB read, then another
	 * 5 MiB put into the 8 MiB segment evicts it (a lease would keep it
	 * for 3 s, longer than a put waits for room) */
	CHECK_RC(kvp_put(k, "l/big1", v, BIG), 0);
	CHECK(kvp_get_into(k, "l/big1", out, BIG) == BIG);
	CHECK_RC(kvp_put(k, "l/big2", v, BIG), 0);
	CHECK_RC(kvp_exists(k, "l/big1"), 0);
	/* an upsert over a just-read value reuses its room at once */
	struct kvp_put_opts up = { .flags = KVP_PUT_UPSERT };
	CHECK(kvp_get_into(k, "l/big2", out, BIG) == BIG);
	memset(v, 'y', BIG);
	CHECK_RC(kvp_put_opts(k, "l/big2", v, BIG, &up), 0);
	CHECK(kvp_get_into(k, "l/big2", out, BIG) == BIG && out[BIG - 1] == 'y');
	CHECK_RC(kvp_remove(k, "l/big2", 0), 0);

	/* a dead reader's lease blocks removal until lease_ttl */
	CHECK_RC(kvp_put(k, "l/dead", v, 1000), 0);
	uint64_t t0 = clock_now_ms();
	dead_reader(p, "l/dead");
	CHECK_RC(kvp_remove(k, "l/dead", 0), KVP_ELEASED);
	CHECK_RC(kvp_replica_clear(k, "l/dead", "n0", 0), KVP_ELEASED);
	/* a finished get of the same object does not end the dead one's lease */
	CHECK(kvp_get_into(k, "l/dead", out, BIG) == 1000);
	if (clock_now_ms() < t0 + LEASE_MS - 500)
		CHECK_RC(kvp_remove(k, "l/dead", 0), KVP_ELEASED);
	while (clock_now_ms() < t0 + LEASE_MS + 200)
		usleep(50000);
	CHECK_RC(kvp_remove(k, "l/dead", 0), 0);

	printf("%llu LEASE_RELEASE frames\n", (unsigned long long)releases(k));
	kvp_close(k);
	free(v);
	free(out);
	return tl_done();
}

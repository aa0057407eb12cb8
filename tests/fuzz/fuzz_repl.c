/* fuzz_repl: a standby master applies the leader's stream (REPL bodies,
 * mrepl.h) from arbitrary bytes, then takes the table over and a node
 * re-mounts its segment, reports extents and heartbeats (the
 * reconciliation of mrepl.c). The input is a sequence of records: u8 kind
 * (0..1: a REPL body; 2: a REPORT body for the re-mounted segment, after
 * the takeover), u16 length, bytes. The first record after the takeover
 * is also the MOUNT's commit map (the holds of mhold.c, then carved by the
 * REPORTs and released by the HEARTBEAT); its kind byte / 3 picks the
 * MOUNT's alignment: even 64 (the seeds' SEG), odd 4096. master_check() must hold after every
 * step; nothing may read past a length (each body is its own allocation).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "log.h"
#include "master.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int sink(void *arg, const void *p, size_t n)
{
	(void)arg;
	(void)p;
	(void)n;
	return 0;
}

static void hangup(void *arg)
{
	(void)arg;
}

static void call(struct master *m, struct master_client *c, uint16_t op, uint64_t reqid,
		 const uint8_t *body, size_t len, struct wbuf *reply)
{
	struct wire_hdr h = {
		.magic = WIRE_MAGIC, .version = WIRE_VERSION, .opcode = op,
		.body_len = (uint32_t)len, .reqid = reqid,
	};

	wb_reset(reply);
	master_handle(m, c, &h, body, reply);
}

/* The segment the seed corpus's SEG records name: uuid 1, 1 MiB, align 64. */
static uint32_t mount(struct master *m, struct master_client *c, struct wbuf *w, uint32_t align,
		      const uint8_t *map, size_t map_len)
{
	struct wbuf b;
	uint32_t id = 0;

	wb_init(&b);
	wb_u16(&b, WIRE_ROLE_NODE);
	wb_cstr(&b, "");
	wb_cstr(&b, "fuzz");
	wb_cstr(&b, "host");
	call(m, c, WIRE_OP_HELLO, 1, b.p, b.len, w);
	wb_reset(&b);
	wb_cstr(&b, "node");
	wb_cstr(&b, "host");
	wb_cstr(&b, "/dev/shm/fuzz");
	wb_u64(&b, 1);
	wb_u64(&b, 1);
	wb_u64(&b, 1 << 20);
	wb_u64(&b, 1);
	wb_u64(&b, 4096);
	wb_u32(&b, align);
	wb_cstr(&b, "127.0.0.1:1");
	wb_blob(&b, NULL, 0);
	wb_u64(&b, 1 << 20);
	wb_i32(&b, -1);
	wb_blob(&b, map, map_len);
	call(m, c, WIRE_OP_MOUNT, 2, b.p, b.len, w);
	wb_free(&b);
	if (w->len >= WIRE_HDR_SIZE + 4)
		memcpy(&id, w->p + WIRE_HDR_SIZE, 4);
	return id;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct kvp_conf conf;
	static bool init;
	char err[256];
	struct wbuf reply, rb;
	struct master_client *node = NULL;
	uint32_t sid = 0;

	if (!init) {
		conf_defaults(&conf);
		conf.cluster.max_object_size = 1 << 20;
		log_init("fuzz", LOG_CRIT);
		init = true;
	}
	struct master *m = master_create(&conf, err, sizeof(err));
	if (!m)
		abort();
	wb_init(&reply);
	wb_init(&rb);
	while (size >= 3) {
		uint8_t kind = data[0] % 3;
		uint32_t align = data[0] / 3 % 2 ? 4096 : 64;
		size_t len = (size_t)data[1] | (size_t)data[2] << 8;
		data += 3;
		size -= 3;
		if (len > size)
			len = size;
		uint8_t *body = malloc(len ? len : 1);
		if (!body)
			abort();
		memcpy(body, data, len);
		if (kind < 2 && !node) {
			(void)master_follow_apply(m, body, len);
		} else {
			if (!node) {
				master_takeover(m, 7, NULL);
				node = master_client_new(m, sink, hangup, NULL);
				sid = mount(m, node, &reply, align, body, len < 257 ? len : 257);
			}
			wb_reset(&rb);
			wb_u32(&rb, sid);
			wb_bytes(&rb, body, len);
			call(m, node, WIRE_OP_REPORT, 3, rb.p, rb.len, &reply);
		}
		free(body);
		if (!master_check(m))
			abort();
		data += len;
		size -= len;
	}
	if (node) {
		uint8_t hb[20] = { 0 };
		memcpy(hb, &sid, 4);
		call(m, node, WIRE_OP_HEARTBEAT, 4, hb, sizeof(hb), &reply);
		if (!master_check(m))
			abort();
	}
	wb_free(&rb);
	wb_free(&reply);
	master_destroy(m);
	return 0;
}

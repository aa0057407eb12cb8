/* fuzz_wire: hostile bytes into the wire decoders (src/common/wire.h, wire.c).
 * Input = 32 header bytes, then pairs (op, arg) driving the body reader
 * over the rest of the input as the body. Checks: a header that decodes
 * re-encodes to the same bytes; the reader never leaves its buffer, fails
 * sticky, and what it reads re-encodes (wb_*) to the bytes it consumed;
 * wire_key_ok agrees with its definition. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "wire.h"

#define FAIL() abort()

static void fuzz_header(const uint8_t *in, size_t n)
{
	uint8_t hb[WIRE_HDR_SIZE] = { 0 }, again[WIRE_HDR_SIZE];
	struct wire_hdr h;

	memcpy(hb, in, n < sizeof(hb) ? n : sizeof(hb));
	int rc = wire_hdr_decode(hb, &h, UINT32_MAX, UINT64_MAX);
	if (rc != 0 && rc != KVP_EPROTO)
		FAIL();
	if (rc == 0) {
		wire_hdr_encode(&h, again);
		if (memcmp(hb, again, sizeof(hb)) != 0)
			FAIL();
		if (!wire_op_name(h.opcode) || (h.status && !kvp_is_err(h.status)))
			FAIL();
		/* tighter limits only ever add ETOOBIG */
		struct wire_hdr h2;
		uint32_t mb = (uint32_t)(h.reqid & 0xffff);
		uint64_t mp = h.reqid >> 16;
		int rc2 = wire_hdr_decode(hb, &h2, mb, mp);
		bool big = h.body_len > mb || h.payload_len > mp;
		if (rc2 != (big ? KVP_ETOOBIG : 0))
			FAIL();
	}
}

static void fuzz_reader(const uint8_t *ops, size_t nops, const uint8_t *data, size_t ndata)
{
	/* exactly-sized heap copy so ASan sees any over-read */
	uint8_t *body = malloc(ndata ? ndata : 1);
	struct rbuf r;
	struct wbuf w;
	bool comparable = true;
	char small[64];
	size_t used = 0;	/* consumed by successful reads (a failed str may
				 * have taken its length prefix) */

	if (!body)
		return;
	memcpy(body, data, ndata);
	rb_init(&r, body, ndata);
	wb_init(&w);
	for (size_t i = 0; i + 1 < nops; i += 2) {
		uint8_t op = ops[i] % 12, arg = ops[i + 1];
		bool was_err = r.err;
		const uint8_t *before = r.p;
		size_t n = 0;
		const uint8_t *p;

		switch (op) {
		case 0: { uint8_t v = rb_u8(&r); if (!r.err) wb_u8(&w, v); else if (v) FAIL(); break; }
		case 1: { uint16_t v = rb_u16(&r); if (!r.err) wb_u16(&w, v); else if (v) FAIL(); break; }
		case 2: { uint32_t v = rb_u32(&r); if (!r.err) wb_u32(&w, v); else if (v) FAIL(); break; }
		case 3: { uint64_t v = rb_u64(&r); if (!r.err) wb_u64(&w, v); else if (v) FAIL(); break; }
		case 4: { int32_t v = rb_i32(&r); if (!r.err) wb_i32(&w, v); else if (v) FAIL(); break; }
		case 5: { int64_t v = rb_i64(&r); if (!r.err) wb_i64(&w, v); else if (v) FAIL(); break; }
		case 6:
			p = rb_str(&r, &n);
			if (!r.err) {
				if (!p || p < body || p + n > body + ndata)
					FAIL();
				wb_str(&w, p, n);
			} else if (p || n) {
				FAIL();
			}
			break;
		case 7:
			p = rb_blob(&r, &n);
			if (!r.err) {
				if (!p || p < body || p + n > body + ndata)
					FAIL();
				wb_blob(&w, p, n);
			} else if (p || n) {
				FAIL();
			}
			break;
		case 8: {
			size_t cap = arg % sizeof(small);
			rb_cstr(&r, small, cap);
			if (!r.err) {
				if (strlen(small) >= cap)
					FAIL();
				comparable = false;	/* embedded NULs are cut */
			}
			break;
		}
		case 9: {
			size_t min_item = arg % 32;
			uint32_t c = rb_count(&r, min_item);
			if (!r.err) {
				if (min_item && (uint64_t)c * min_item > (size_t)(r.end - r.p))
					FAIL();
				wb_u32(&w, c);
			} else if (c) {
				FAIL();
			}
			break;
		}
		case 10:
			p = rb_take(&r, arg);
			if (!r.err) {
				if (!p || p + arg > body + ndata)
					FAIL();
				wb_bytes(&w, p, arg);
			} else if (p) {
				FAIL();
			}
			break;
		case 11: {	/* a status: 0, positive or a KVP_E* code, else err */
			int v = rb_status(&r);
			if (!r.err) {
				if (v < 0 && !kvp_is_err(v))
					FAIL();
				wb_status(&w, v);
			} else if (v && v != KVP_EPROTO) {
				FAIL();
			}
			break;
		}
		}
		if (r.p < body || r.p > r.end || r.end != body + ndata)
			FAIL();
		if (was_err && (!r.err || r.p != before))
			FAIL();		/* errors stick and nothing moves */
		if (!r.err)
			used = (size_t)(r.p - body);
	}
	if (w.oom)
		comparable = false;
	if (comparable && (w.len != used || (used && memcmp(w.p, body, used) != 0)))
		FAIL();
	if (rb_done(&r) != (!r.err && (size_t)(r.p - body) == ndata))
		FAIL();
	wb_free(&w);

	/* wire_key_ok against its definition */
	bool ok = ndata >= 1 && ndata <= KVP_MAX_KEY && !memchr(body, 0, ndata);
	if (wire_key_ok(body, ndata) != ok)
		FAIL();
	free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_header(data, size);
	if (size <= WIRE_HDR_SIZE + 1)
		return 0;
	data += WIRE_HDR_SIZE;
	size -= WIRE_HDR_SIZE;
	/* the first byte says how many op pairs follow; the rest is the body */
	size_t nops = (size_t)data[0] * 2;
	data++;
	size--;
	if (nops > size)
		nops = size;
	fuzz_reader(data, nops, data + nops, size - nops);
	return 0;
}

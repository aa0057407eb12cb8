/* mrecover: the recovery window of a new leader; see mrecover.h. */
#include "mrecover.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static void finish(struct master *m, const char *why)
{
	size_t missing = m->nexpect - m->nexpect_done;

	m->recovering = false;
	free(m->expect);
	free(m->expect_done);
	m->expect = NULL;
	m->expect_done = NULL;
	log_notice("recovery %s after %llu ms: %zu of %zu segments reported, %llu keys%s", why,
		   (unsigned long long)(m->now_ms - m->recover_start_ms), m->nexpect_done,
		   m->nexpect, (unsigned long long)m->keys,
		   missing ? " (the others' objects are gone from the pool)" : "");
	m->recover_ms = m->now_ms - m->recover_start_ms;
	m->nexpect = m->nexpect_done = 0;
}

void mrecover_begin(struct master *m, const char *expected, uint64_t window_ms)
{
	size_t cap = 0;

	for (const char *p = expected; *p; p++)
		cap += *p == '\n';
	cap++;
	m->recover_start_ms = m->now_ms;
	m->recover_until_ms = m->now_ms + window_ms;
	m->expect = calloc(cap, sizeof(*m->expect));
	m->expect_done = calloc(cap, sizeof(*m->expect_done));
	m->nexpect = m->nexpect_done = 0;
	if (!m->expect || !m->expect_done) {
		free(m->expect);
		free(m->expect_done);
		m->expect = NULL;
		m->expect_done = NULL;
		return;		/* no window: misses are misses */
	}
	for (const char *p = expected; *p;) {
		char *end;
		uint64_t u = strtoull(p, &end, 16);
		if (end != p && u && m->nexpect < cap)
			m->expect[m->nexpect++] = u;
		p = strchr(p, '\n');
		if (!p)
			break;
		p++;
	}
	m->recovering = m->nexpect > 0;
	if (m->recovering)
		log_notice("recovering: waiting up to %llu ms for the %zu segments of the last leader",
			   (unsigned long long)window_ms, m->nexpect);
	else
		m->recover_ms = 0;
}

void mrecover_reported(struct master *m, const struct seg *s)
{
	if (!m->recovering)
		return;
	for (size_t i = 0; i < m->nexpect; i++)
		if (m->expect[i] == s->uuid && !m->expect_done[i]) {
			m->expect_done[i] = true;
			if (++m->nexpect_done == m->nexpect)
				finish(m, "complete");
			return;
		}
}

int mrecover_gate(struct master *m, const struct wire_hdr *h, const uint8_t *body)
{
	struct rbuf r;
	size_t skip = 0, after = 0;	/* bytes before the count, after each key */
	bool readers = true;		/* incomplete objects count as unknown */

	if (!m->recovering)
		return 0;
	switch (h->opcode) {
	case WIRE_OP_GET: case WIRE_OP_EXISTS: case WIRE_OP_TOUCH: case WIRE_OP_SIZE:
	case WIRE_OP_STAT:
		break;
	case WIRE_OP_PIN: skip = 8; break;
	case WIRE_OP_REMOVE: skip = 1; break;
	case WIRE_OP_PUT_START: skip = WIRE_PUT_PREFIX; after = 8; readers = false; break;
	case WIRE_OP_REPLICA_CLEAR: skip = 5; break;
	case WIRE_OP_PUT_END: after = 16; readers = false; break;
	case WIRE_OP_LIST: case WIRE_OP_REMOVE_PREFIX: return KVP_ENOTLEADER;
	default: return 0;
	}
	rb_init(&r, body, h->body_len);
	rb_take(&r, skip);
	uint32_t n = rb_u32(&r);
	for (uint32_t i = 0; i < n && rb_ok(&r); i++) {
		size_t klen;
		const uint8_t *key = rb_str(&r, &klen);
		rb_take(&r, after);
		if (!rb_ok(&r) || !wire_key_ok(key, klen))
			break;	/* the handler answers malformed frames */
		struct obj *o = objtab_find(&m->objs, key, klen);
		/* a new put of an unknown key may race a reported one; a put
		 * started here is known (its PUT_END passes) */
		if (!o || (readers && !obj_complete(o)))
			return KVP_ENOTLEADER;
	}
	return 0;
}

void mrecover_tick(struct master *m)
{
	if (m->recovering && m->now_ms >= m->recover_until_ms)
		finish(m, "window over");
}

size_t mrecover_segments(const struct master *m, char *buf, size_t cap)
{
	size_t n = 0;

	if (!cap)
		return 0;
	buf[0] = '\0';
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];
		if (!s || !s->online)
			continue;
		int k = snprintf(buf + n, cap - n, "%016" PRIx64 "\n", s->uuid);
		if (k < 0 || (size_t)k >= cap - n)
			break;
		n += (size_t)k;
	}
	buf[n] = '\0';
	return n;
}

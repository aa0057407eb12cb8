/* fuzz_etcd: hostile bytes as what an etcd endpoint (or whoever listens on
 * its port) answers: the JSON reader (src/common/json.c), the gateway
 * answer decoders and base64 of src/common/etcd.c, the endpoint list
 * parser, and the leader record a master publishes (src/common/leader.c).
 * The first byte picks the decoder, the rest is its input. Checks: tokens
 * stay inside the input and nest properly; every lookup and unescape stays
 * inside its buffer; base64 that decodes re-encodes to the same text; a
 * leader record that decodes re-encodes to a record that decodes the same.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"
#include "json.h"
#include "leader.h"

#define FAIL() abort()

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(const struct json *j)
{
	char buf[64];
	int64_t v;

	for (uint32_t i = 0; i < j->n; i++) {
		const struct json_tok *t = &j->t[i];

		if (t->start > t->end || t->end > j->len || t->next <= i || t->next > j->n)
			FAIL();
		if (t->type < JSON_OBJECT || t->type > JSON_NULL)
			FAIL();
		if (t->type == JSON_OBJECT || t->type == JSON_ARRAY) {
			/* children are inside the parent's bytes and subtree */
			uint32_t c = i + 1;
			for (uint32_t k = 0; k < t->count * (t->type == JSON_OBJECT ? 2 : 1); k++) {
				if (c >= t->next || j->t[c].start < t->start || j->t[c].end > t->end)
					FAIL();
				c = j->t[c].next;
			}
			if (c != t->next)
				FAIL();
		}
		size_t n = 0;
		int r = json_str(j, (int)i, buf, sizeof(buf), &n);
		if (r == 0 && (n >= sizeof(buf) || buf[n] != '\0'))
			FAIL();
		if (r == -E2BIG && strlen(buf) >= sizeof(buf))
			FAIL();
		(void)json_i64(j, (int)i, &v);
		(void)json_get(j, (int)i, "kvs");
		(void)json_at(j, (int)i, 1);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct json_tok toks[512];
	static struct etcd_kv kv;
	static struct etcd_event ev[4];
	const char *p = (const char *)data + 1;
	size_t n = size ? size - 1 : 0;
	int64_t a, b;
	bool ok;
	int code;
	char msg[64];

	if (!size)
		return 0;
	switch (data[0] % 10) {
	case 0: {
		struct json j;
		if (json_parse(&j, p, n, toks, 512) == 0)
			walk(&j);
		break;
	}
	case 1:
		if (etcd_parse_range(p, n, &kv, &a) == 0 &&
		    (kv.value_len >= sizeof(kv.value) || kv.value[kv.value_len] != '\0'))
			FAIL();
		break;
	case 2:
		(void)etcd_parse_txn(p, n, &ok, &a, &kv);
		break;
	case 3:
		if (etcd_parse_grant(p, n, &a, &b) == 0 && b <= 0)
			FAIL();
		break;
	case 4:
		if (etcd_parse_keepalive(p, n, &a) == 0 && a <= 0)
			FAIL();
		break;
	case 5: {
		bool created;
		int k = etcd_parse_watch(p, n, &created, ev, 4);
		if (k > 4)
			FAIL();
		break;
	}
	case 6:
		if (etcd_parse_error(p, n, &code, msg, sizeof(msg)) == 0 &&
		    (code < 0 || strlen(msg) >= sizeof(msg)))
			FAIL();
		break;
	case 7: {
		static uint8_t out[4096];
		static char again[8192];
		int k = etcd_b64_decode(p, n, out, sizeof(out));
		if (k >= 0) {
			int e = etcd_b64_encode(out, (size_t)k, again, sizeof(again));
			if (e < 0 || (size_t)e != n || memcmp(again, p, n) != 0)
				FAIL();
		}
		break;
	}
	case 8: {
		static char ep[ETCD_MAX_ENDPOINTS][ETCD_EP_MAX];
		char s[512];
		memcpy(s, p, n < sizeof(s) - 1 ? n : sizeof(s) - 1);
		s[n < sizeof(s) - 1 ? n : sizeof(s) - 1] = '\0';
		int k = etcd_endpoints_parse(s, ep, ETCD_MAX_ENDPOINTS);
		if (k == 0 || k > ETCD_MAX_ENDPOINTS)
			FAIL();
		for (int i = 0; i < k; i++)
			if ((strncmp(ep[i], "http://", 7) != 0 && strncmp(ep[i], "https://", 8) != 0) ||
			    strlen(ep[i]) >= ETCD_EP_MAX)
				FAIL();
		break;
	}
	case 9: {
		struct leader_rec r, r2;
		char enc[LEADER_REC_MAX];
		if (leader_rec_decode(p, n, &r) == 0) {
			int e = leader_rec_encode(&r, enc, sizeof(enc));
			if (e < 0 || leader_rec_decode(enc, (size_t)e, &r2) != 0 ||
			    memcmp(&r, &r2, sizeof(r)) != 0)
				FAIL();
		}
		break;
	}
	}
	return 0;
}

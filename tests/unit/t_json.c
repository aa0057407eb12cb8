/* t_json: the bounded JSON reader (src/common/json.c) and the etcd answer
 * decoders built on it: valid documents as the etcd gateway writes them,
 * every kind of malformed input refused, token and depth limits, string
 * unescaping with surrogates and small buffers, int64 in strings and
 * numbers, quoting. Pure: no etcd needed. */
#include "testlib.h"

#include "etcd.h"
#include "json.h"

static struct json_tok toks[256];

static int parse(struct json *j, const char *s)
{
	return json_parse(j, s, strlen(s), toks, 256);
}

static void test_syntax(void)
{
	struct json j;
	static const char *const good[] = {
		"{}", "[]", "0", "-0", "1.5e-3", "\"\"", "true", "false", "null", " {\"a\" : [1, {}, []] } ",
		"\"\\u00e9\\ud83d\\ude00\\n\\\"\"", "[-1.0E+2]", "{\"a\":{\"b\":{\"c\":null}}}",
	};
	static const char *const bad[] = {
		"", " ", "{", "}", "[1,]", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{a:1}", "[1 2]", "01",
		"1.", ".5", "1e", "-", "+1", "tru", "nul", "\"abc", "\"\\x\"", "\"\\u12g4\"", "\"a\nb\"",
		"{} {}", "[]]", "\"\\", "\"\\u12\"", "'a'", "NaN", "[1,,2]",
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		CHECK(parse(&j, good[i]) == 0, "good %s", good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(parse(&j, bad[i]) == -EINVAL, "bad %s", bad[i]);
	/* embedded NUL: outside a string it is garbage; inside it is a control character */
	CHECK(json_parse(&j, "[1]\0", 4, toks, 256) == -EINVAL);
	CHECK(json_parse(&j, "\"a\0b\"", 5, toks, 256) == -EINVAL);

	char deep[2 * JSON_MAX_DEPTH + 8];
	size_t d = 0;
	for (int i = 0; i < JSON_MAX_DEPTH; i++)
		deep[d++] = '[';
	for (int i = 0; i < JSON_MAX_DEPTH; i++)
		deep[d++] = ']';
	CHECK(json_parse(&j, deep, d, toks, 256) == 0);
	d = 0;
	for (int i = 0; i <= JSON_MAX_DEPTH; i++)
		deep[d++] = '[';
	for (int i = 0; i <= JSON_MAX_DEPTH; i++)
		deep[d++] = ']';
	CHECK(json_parse(&j, deep, d, toks, 256) == -EINVAL);
	CHECK(json_parse(&j, "[1,2,3]", 7, toks, 3) == -E2BIG);
	CHECK(json_parse(&j, "[1,2,3]", 7, toks, 4) == 0);
}

static void test_lookup(void)
{
	struct json j;
	char buf[64];
	size_t n;
	int64_t v;

	REQUIRE(parse(&j, "{\"header\":{\"revision\":\"42\"},\"kvs\":[{\"k\":1},{\"k\":-9223372036854775808}],"
			  "\"s\":\"a\\tb\",\"b\":true,\"f\":false,\"big\":\"9223372036854775808\","
			  "\"x\":1.5,\"dup\":1,\"dup\":2}") == 0);
	CHECK(json_i64(&j, json_path(&j, 0, "header", "revision", NULL), &v) == 0 && v == 42);
	int kvs = json_get(&j, 0, "kvs");
	CHECK(json_is(&j, kvs, JSON_ARRAY) && j.t[kvs].count == 2);
	CHECK(json_i64(&j, json_get(&j, json_at(&j, kvs, 1), "k"), &v) == 0 && v == INT64_MIN);
	CHECK(json_at(&j, kvs, 2) == -1 && json_at(&j, 0, 0) == -1);
	CHECK(json_str(&j, json_get(&j, 0, "s"), buf, sizeof(buf), &n) == 0 && n == 3 &&
	      !strcmp(buf, "a\tb"));
	CHECK(json_str_eq(&j, json_get(&j, 0, "s"), "a\tb"));
	CHECK(json_bool(&j, json_get(&j, 0, "b"), false) && !json_bool(&j, json_get(&j, 0, "f"), true));
	CHECK(json_bool(&j, json_get(&j, 0, "missing"), true));
	CHECK(json_i64(&j, json_get(&j, 0, "big"), &v) == -EINVAL);
	CHECK(json_i64(&j, json_get(&j, 0, "x"), &v) == -EINVAL);
	CHECK(json_i64(&j, json_get(&j, 0, "b"), &v) == -EINVAL);
	CHECK(json_i64(&j, json_get(&j, 0, "dup"), &v) == 0 && v == 1);
	CHECK(json_get(&j, 0, "nope") == -1 && json_get(&j, kvs, "k") == -1);
	CHECK(json_path(&j, 0, "header", "nope", "deeper", NULL) == -1);

	REQUIRE(parse(&j, "\"\\u00e9\\ud83d\\ude00x\"") == 0);
	CHECK(json_str(&j, 0, buf, sizeof(buf), &n) == 0 && n == 7 &&
	      !memcmp(buf, "\xc3\xa9\xf0\x9f\x98\x80x", 7));
	CHECK(json_str(&j, 0, buf, 7, &n) == -E2BIG && strlen(buf) < 7);
	CHECK(json_str(&j, 0, buf, 8, &n) == 0);
	REQUIRE(parse(&j, "\"\\ud83d\"") == 0);	/* syntax is fine, the value is not */
	CHECK(json_str(&j, 0, buf, sizeof(buf), &n) == -EINVAL);
	REQUIRE(parse(&j, "\"\\ude00\"") == 0);
	CHECK(json_str(&j, 0, buf, sizeof(buf), &n) == -EINVAL);
	REQUIRE(parse(&j, "\"abc\"") == 0);
	CHECK(json_str(&j, 0, buf, 3, &n) == -E2BIG && !strcmp(buf, "ab"));
	CHECK(json_str(&j, 0, buf, 4, &n) == 0);

	char q[64];
	CHECK(json_quote(q, sizeof(q), "a\"b\\\n", 5) == 14 && !strcmp(q, "\"a\\\"b\\\\\\u000a\""), "%s", q);
	CHECK(json_quote(q, 4, "abcdef", 6) == -E2BIG && strlen(q) == 3);
	REQUIRE(parse(&j, "[\"\\u0001x\"]") == 0);
}

static void test_etcd_answers(void)
{
	struct etcd_kv *kv = malloc(sizeof(*kv));
	struct etcd_event ev[4];
	int64_t rev, id, ttl;
	bool ok, created;
	int code;
	char msg[128];

	REQUIRE(kv);
#define S(x) x, strlen(x)
	CHECK(etcd_parse_range(S("{\"header\":{\"revision\":\"7\"},\"kvs\":[{\"key\":\"YQ==\","
				 "\"create_revision\":\"5\",\"mod_revision\":\"6\",\"version\":\"2\","
				 "\"value\":\"eHk=\",\"lease\":\"99\"}],\"count\":\"1\"}"), kv, &rev) == 0);
	CHECK(rev == 7 && kv->create_rev == 5 && kv->mod_rev == 6 && kv->lease == 99 &&
	      kv->value_len == 2 && !strcmp(kv->value, "xy"));
	CHECK(etcd_parse_range(S("{\"header\":{\"revision\":\"7\"}}"), kv, &rev) == -ENOENT);
	CHECK(etcd_parse_range(S("{\"kvs\":[{\"value\":\"!!\"}]}"), kv, &rev) == -EPROTO);
	CHECK(etcd_parse_range(S("{\"kvs\":{}}"), kv, &rev) == -EPROTO);
	CHECK(etcd_parse_range(S("{\"header\":{\"revision\":1.5}}"), kv, &rev) == -EPROTO);
	CHECK(etcd_parse_range(S("[]"), kv, &rev) == -EPROTO);

	CHECK(etcd_parse_txn(S("{\"header\":{\"revision\":\"2\"},\"succeeded\":true}"), &ok, &rev, kv) == 0 &&
	      ok && rev == 2);
	CHECK(etcd_parse_txn(S("{\"header\":{\"revision\":\"2\"},\"responses\":[{\"response_range\":"
			       "{\"kvs\":[{\"create_revision\":\"2\",\"value\":\"cQ==\"}]}}]}"),
			     &ok, &rev, kv) == 0 && !ok && kv->create_rev == 2 && !strcmp(kv->value, "q"));
	CHECK(etcd_parse_txn(S("{\"succeeded\":\"yes\"}"), &ok, &rev, kv) == -EPROTO);

	CHECK(etcd_parse_grant(S("{\"ID\":\"411\",\"TTL\":\"3\"}"), &id, &ttl) == 0 && id == 411 && ttl == 3);
	CHECK(etcd_parse_grant(S("{\"ID\":\"411\"}"), &id, &ttl) == -EPROTO);
	CHECK(etcd_parse_keepalive(S("{\"result\":{\"ID\":\"1\",\"TTL\":\"5\"}}"), &ttl) == 0 && ttl == 5);
	CHECK(etcd_parse_keepalive(S("{\"result\":{\"ID\":\"1\"}}"), &ttl) == -ENOENT);
	CHECK(etcd_parse_keepalive(S("{\"error\":{}}"), &ttl) == -EPROTO);
	CHECK(etcd_parse_keepalive(S("{\"code\":5,\"message\":\"lease not found\"}"), &ttl) == -ENOENT);

	CHECK(etcd_parse_error(S("{\"error\":\"x\",\"message\":\"etcdserver: no leader\",\"code\":14}"),
			       &code, msg, sizeof(msg)) == 0 && code == 14 &&
	      !strcmp(msg, "etcdserver: no leader"));
	CHECK(etcd_parse_error(S("{\"code\":\"x\"}"), &code, msg, sizeof(msg)) == -EPROTO);

	CHECK(etcd_parse_watch(S("{\"result\":{\"header\":{},\"created\":true}}"), &created, ev, 4) == 0 &&
	      created);
	CHECK(etcd_parse_watch(S("{\"result\":{\"events\":[{\"kv\":{\"value\":\"YQ==\",\"mod_revision\":\"3\"}},"
				 "{\"type\":\"DELETE\",\"kv\":{\"mod_revision\":\"4\"}}]}}"),
			       &created, ev, 4) == 2 && !created && !ev[0].deleted &&
	      ev[0].revision == 3 && !strcmp(ev[0].kv.value, "a") && ev[1].deleted && ev[1].revision == 4);
	CHECK(etcd_parse_watch(S("{\"result\":{\"events\":[{\"type\":\"BOOM\",\"kv\":{}}]}}"), &created, ev,
			       4) == -EPROTO);
	CHECK(etcd_parse_watch(S("{\"result\":{\"canceled\":true,\"compact_revision\":\"9\"}}"), &created,
			       ev, 4) == -ESTALE);
	CHECK(etcd_parse_watch(S("{\"result\":{\"events\":[{\"kv\":{}},{\"kv\":{}},{\"kv\":{}}]}}"), &created,
			       ev, 2) == 2);
#undef S
	free(kv);
}

int main(void)
{
	test_syntax();
	test_lookup();
	test_etcd_answers();
	return tl_done();
}

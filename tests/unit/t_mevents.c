/* t_mevents: the KV events' pieces that need no socket — a key's block
 * hash (Mooncake's u64 parse, else FNV-1a 64), the replay request decoder
 * (vLLM's [identity, "", seq8], bounds-checked) and the msgpack encoder's
 * bytes for both layouts (the e2e test kv_events.sh decodes them in
 * Python). */
#include <stdlib.h>
#include <string.h>

#include "mevents.h"
#include "testlib.h"

static uint64_t h(const char *k)
{
	return mevents_block_hash((const uint8_t *)k, strlen(k));
}

static void test_hash(void)
{
	uint64_t f = 0xcbf29ce484222325ull;

	CHECK_EQ(h("1001"), 1001);
	CHECK_EQ(h("0"), 0);
	CHECK_EQ(h("0x10"), 16);
	CHECK_EQ(h("0XfF"), 255);
	CHECK_EQ(h("18446744073709551615"), UINT64_MAX);
	CHECK_EQ(h("0xffffffffffffffff"), UINT64_MAX);
	/* not a u64: hashed */
	for (const char *k = "a"; *k; k++)
		f = (f ^ (uint8_t)*k) * 0x100000001b3ull;
	CHECK_EQ(h("a"), f);
	CHECK(h("18446744073709551616") != 0, "overflow hashed");
	CHECK(h("0x") != 0 && h("0x1g") != 1 && h("12a") != 12 && h("-1") != 1, "mixed hashed");
	CHECK(h("0x00000000000000001") != 1, "17 hex digits hashed");
	CHECK(h("1001_0_k") != h("1001_1_k"), "distinct keys");
}

static int parse(size_t n, const size_t *len, const uint8_t *seq, uint64_t *start)
{
	static const uint8_t id[256] = { 1 };
	const uint8_t *f[4] = { id, (const uint8_t *)"", seq, id };

	return mevents_parse_replay(f, len, n, start);
}

static void test_replay_request(void)
{
	const uint8_t s7[8] = { 0, 0, 0, 0, 0, 0, 1, 7 };
	uint64_t start = 99;

	CHECK_EQ(parse(3, (size_t[]){ 5, 0, 8 }, s7, &start), 0);
	CHECK_EQ(start, 263);
	CHECK_EQ(parse(3, (size_t[]){ 255, 0, 8 }, s7, &start), 0);
	CHECK_EQ(parse(3, (size_t[]){ 256, 0, 8 }, s7, &start), -EINVAL);
	CHECK_EQ(parse(3, (size_t[]){ 0, 0, 8 }, s7, &start), -EINVAL);
	CHECK_EQ(parse(3, (size_t[]){ 5, 1, 8 }, s7, &start), -EINVAL);
	CHECK_EQ(parse(3, (size_t[]){ 5, 0, 7 }, s7, &start), -EINVAL);
	CHECK_EQ(parse(3, (size_t[]){ 5, 0, 9 }, s7, &start), -EINVAL);
	CHECK_EQ(parse(2, (size_t[]){ 5, 0 }, s7, &start), -EINVAL);
	CHECK_EQ(parse(4, (size_t[]){ 5, 0, 8, 1 }, s7, &start), -EINVAL);
	CHECK_EQ(parse(0, NULL, s7, &start), -EINVAL);
	CHECK_EQ(start, 263);
}

static bool has(const uint8_t *p, size_t n, const void *want, size_t wn)
{
	for (size_t i = 0; i + wn <= n; i++)
		if (!memcmp(p + i, want, wn))
			return true;
	return false;
}

static void test_encode(void)
{
	struct mev_item it[3] = {
		{ .type = 0, .medium = MEV_MEDIUM_CPU, .has_parent = true, .hash = 1002,
		  .parent = 1001, .key = (char *)"1002" },
		{ .type = 1, .medium = MEV_MEDIUM_DISK, .hash = 7 },
		{ .type = 2 },
	};
	struct mev_fmt f = { .block_size = 16, .backend_id = "" };
	uint8_t *p;
	size_t n;

	REQUIRE(mevents_encode(&f, 1.5, it, 3, &p, &n) == 0, "encode");
	/* {"ts": 1.5, "events": [...], ...}: fixmap 3, fixstr 2 "ts", float64 */
	static const uint8_t head[] = { 0x83, 0xa2, 't', 's', 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0,
					0xa6, 'e', 'v', 'e', 'n', 't', 's', 0x93 };
	CHECK(n > sizeof(head) && !memcmp(p, head, sizeof(head)), "map batch head");
	/* BlockStored: 9 fields with object_key, "type" first */
	static const uint8_t st[] = { 0x89, 0xa4, 't', 'y', 'p', 'e', 0xab, 'B', 'l', 'o', 'c', 'k',
				      'S', 't', 'o', 'r', 'e', 'd', 0xac, 'b', 'l', 'o', 'c', 'k',
				      '_', 'h', 'a', 's', 'h', 'e', 's', 0x91, 0xcd, 0x03, 0xea };
	CHECK(has(p, n, st, sizeof(st)), "BlockStored head");
	CHECK(has(p, n, "\xb1parent_block_hash\xcd\x03\xe9", 20), "parent 1001");
	CHECK(has(p, n, "\xa9token_ids\x90\xaa" "block_size\x10", 23), "token_ids, block_size");
	CHECK(has(p, n, "\xa6medium\xa4" "DISK", 12), "removed medium");
	CHECK(has(p, n, "\x81\xa4type\xb0" "AllBlocksCleared", 23), "cleared");
	CHECK(has(p, n, "\xaaobject_key\xa4" "1002", 16), "object_key");
	CHECK(!has(p, n, "backend_id", 10), "no backend_id when empty");
	static const uint8_t tail[] = { 0xb2, 'd', 'a', 't', 'a', '_', 'p', 'a', 'r', 'a', 'l', 'l',
					'e', 'l', '_', 'r', 'a', 'n', 'k', 0x00 };
	CHECK(n > sizeof(tail) && !memcmp(p + n - sizeof(tail), tail, sizeof(tail)), "rank 0");
	free(p);

	f.legacy = true;
	f.backend_id = "b";
	REQUIRE(mevents_encode(&f, 1.5, it, 3, &p, &n) == 0, "encode legacy");
	CHECK(p[0] == 0x93 && p[1] == 0xcb && p[10] == 0x93, "array batch head");
	CHECK(has(p, n, "\x97\xab" "BlockStored\x91\xcd\x03\xea\xcd\x03\xe9\x90\x10\xc0\xa3" "CPU",
		  25), "stored as an array");
	CHECK(has(p, n, "\x93\xac" "BlockRemoved\x91\x07\xa4" "DISK", 21), "removed as an array");
	CHECK(has(p, n, "\x91\xb0" "AllBlocksCleared", 18), "cleared as an array");
	CHECK(!has(p, n, "object_key", 10) && !has(p, n, "backend_id", 10), "no extras");
	CHECK(p[n - 1] == 0x00, "rank 0");
	free(p);
}

int main(void)
{
	test_hash();
	test_replay_request();
	test_encode();
	return tl_done();
}

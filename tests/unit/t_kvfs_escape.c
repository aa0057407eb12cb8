/* t_kvfs_escape: the FUSE view's key <-> name scheme (fuse/kvfs_name.c):
 * fixed examples from docs/fuse.md, strictness of the decoder, long
 * components as directory chains, and random round trips. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs.h"
#include "kvfs_name.h"
#include "kvpool.h"
#include "testlib.h"


static void esc_is(const char *raw, size_t n, const char *want)
{
	char out[1024];
	char back[1024];
	size_t blen = 0;
	int rc = kvfs_escape(raw, n, out, sizeof(out));

	CHECK(rc == 0, "escape rc %d for \"%.*s\"", rc, (int)n, raw);
	if (rc)
		return;
	CHECK(strcmp(out, want) == 0, "escape(\"%.*s\") = \"%s\", want \"%s\"",
	      (int)n, raw, out, want);
	rc = kvfs_unescape(out, back, sizeof(back), &blen);
	CHECK(rc == 0 && blen == n && memcmp(back, raw, n) == 0,
	      "unescape(\"%s\") rc %d len %zu", out, rc, blen);
}

static void unesc_bad(const char *name)
{
	char out[1024];
	size_t n;
	int rc = kvfs_unescape(name, out, sizeof(out), &n);

	CHECK(rc == -EINVAL, "unescape(\"%s\") = %d, want -EINVAL", name, rc);
}

static void path_is(const char *key, const char *want)
{
	char path[KVFS_PATH_MAX], back[KVP_MAX_KEY * 4];
	size_t blen = 0;
	int rc = kvfs_key_to_path(key, strlen(key), path, sizeof(path));

	CHECK(rc == 0, "key_to_path(\"%s\") rc %d", key, rc);
	if (rc)
		return;
	CHECK(strcmp(path, want) == 0, "key_to_path(\"%s\") = \"%s\", want \"%s\"", key, path, want);
	rc = kvfs_path_to_key(path, back, sizeof(back), &blen);
	CHECK(rc == 0 && blen == strlen(key) && memcmp(back, key, blen) == 0,
	      "path_to_key(\"%s\") rc %d", path, rc);
}

static void path_bad(const char *path)
{
	char back[KVP_MAX_KEY * 4];
	size_t n;
	int rc = kvfs_path_to_key(path, back, sizeof(back), &n);

	CHECK(rc < 0, "path_to_key(\"%s\") accepted a non-canonical path", path);
}

static void test_examples(void)
{
	esc_is("abc", 3, "abc");
	esc_is("a b\nc\t", 6, "a b\nc\t");	/* legal file name bytes pass */
	esc_is("50%", 3, "50%25");
	esc_is("a/b", 3, "a%2Fb");
	esc_is("", 0, "%00");
	esc_is(".", 1, "%2E");
	esc_is("..", 2, "%2E%2E");
	esc_is(".kvpool", 7, "%2Ekvpool");
	esc_is("...", 3, "...");
	esc_is(".hidden", 7, ".hidden");
	esc_is(".kvpoolx", 8, ".kvpoolx");
	esc_is("\xc3\xa9t\xc3\xa9", 5, "\xc3\xa9t\xc3\xa9");
	esc_is("\xff\x01", 2, "\xff\x01");

	char out[16];
	CHECK(kvfs_escape("a\0b", 3, out, sizeof(out)) == -EINVAL, "NUL accepted");
	CHECK(kvfs_escape("abcdefgh", 8, out, 8) == -ENAMETOOLONG, "cap ignored");
	CHECK(kvfs_escape("%%%", 3, out, 9) == -ENAMETOOLONG, "cap off by one");
	CHECK(kvfs_escape("%%%", 3, out, 10) == 0, "exact cap refused");

	unesc_bad("%");
	unesc_bad("%2");
	unesc_bad("a%2e");		/* lower case hex */
	unesc_bad("%41");		/* 'A' needs no escape */
	unesc_bad("a%00b");		/* NUL is never in a key */
	unesc_bad(".");
	unesc_bad("..");
	unesc_bad(".kvpool");
	unesc_bad("");
	unesc_bad("%2Ex");		/* %2E only as the whole name */
	unesc_bad("%ZZ");

	path_is("a", "a");
	path_is("a/b/c", "a/b/c");
	path_is("/a", "%00/a");
	path_is("a/", "a/%00");
	path_is("a//b", "a/%00/b");
	path_is("/", "%00/%00");
	path_is("./..", "%2E/%2E%2E");
	path_is(".kvpool/stats", "%2Ekvpool/stats");
	path_is("x/50%/y z", "x/50%25/y z");
	path_is("hash_0_k", "hash_0_k");

	path_bad("a//b");
	path_bad("/a");
	path_bad("a/");
	path_bad("a%2Fb");		/* a '/' written inside a name */
	path_bad("a%%");		/* directory alias, not a key */
	path_bad("a/%2e");
}

/* A component whose escape is longer than KVFS_FIT is a directory chain;
 * every name in it is at most 255 bytes and it round-trips. */
static void test_long(void)
{
	char key[KVP_MAX_KEY + 1], path[KVFS_PATH_MAX], back[KVP_MAX_KEY * 4];
	size_t blen;

	/* 253 plain bytes fit; 254 do not */
	memset(key, 'k', 253);
	key[253] = 0;
	CHECK(kvfs_key_to_path(key, 253, path, sizeof(path)) == 0 && strcmp(path, key) == 0,
	      "253-byte component split");
	memset(key, 'k', 600);
	key[600] = 0;
	CHECK(kvfs_key_to_path(key, 600, path, sizeof(path)) == 0, "600-byte key");
	/* 253 k + '%' / 253 k + '%' / 94 k */
	CHECK(strlen(path) == 254 + 1 + 254 + 1 + 94, "chain length %zu", strlen(path));
	CHECK(path[253] == '%' && path[254] == '/' && path[508] == '%', "chain markers");
	CHECK(kvfs_path_to_key(path, back, sizeof(back), &blen) == 0 && blen == 600 &&
	      memcmp(back, key, 600) == 0, "chain round trip");

	/* a piece never cuts an escape in two: 252 'k' then '%' */
	memset(key, 'k', 252);
	memcpy(key + 252, "%%%%", 4);
	key[256] = 0;
	CHECK(kvfs_key_to_path(key, 256, path, sizeof(path)) == 0, "mixed long");
	CHECK(strncmp(path + 252, "%/%25%25%25%25", 14) == 0, "piece boundary: %s", path + 250);
	CHECK(kvfs_path_to_key(path, back, sizeof(back), &blen) == 0 && blen == 256,
	      "mixed round trip");

	/* the tail after a piece gets whole-name rules ("." -> %2E) */
	memset(key, 'k', 253);
	key[253] = '.';
	key[254] = 0;
	CHECK(kvfs_key_to_path(key, 254, path, sizeof(path)) == 0, "dot tail");
	CHECK(strcmp(path + 254, "/%2E") == 0, "dot tail: %s", path + 250);
	CHECK(kvfs_path_to_key(path, back, sizeof(back), &blen) == 0 && blen == 254, "dot tail rt");

	/* piece names that are too short, or a chain ending in a piece, are not
	 * canonical */
	path_bad("abc%/d");
	memset(path, 'k', 253);
	strcpy(path + 253, "%");
	path_bad(path);

	/* kvfs_piece_at on a boundary and off it */
	size_t len;
	bool last;
	memset(key, 'k', 600);
	CHECK(kvfs_piece_at(key, 600, 0, &len, &last) == 0 && len == 253 && !last, "piece 0");
	CHECK(kvfs_piece_at(key, 600, 253, &len, &last) == 0 && len == 253 && !last, "piece 1");
	CHECK(kvfs_piece_at(key, 600, 506, &len, &last) == 0 && len == 94 && last, "piece 2");
	CHECK(kvfs_piece_at(key, 600, 10, &len, &last) == -EINVAL, "off boundary");

	/* a 1024-byte key of '%' (the worst case) still fits the path buffer,
	 * and every name in it is <= 255 bytes */
	memset(key, '%', KVP_MAX_KEY);
	key[KVP_MAX_KEY] = 0;
	CHECK(kvfs_key_to_path(key, KVP_MAX_KEY, path, sizeof(path)) == 0, "worst case");
	for (char *p = path, *e; *p; p = e + (*e ? 1 : 0)) {
		e = strchr(p, '/');
		if (!e)
			e = p + strlen(p);
		CHECK(e - p <= KVFS_NAME_MAX, "name of %td bytes", e - p);
	}
	CHECK(kvfs_path_to_key(path, back, sizeof(back), &blen) == 0 && blen == KVP_MAX_KEY,
	      "worst case round trip");
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Random keys from an alphabet rich in the special bytes. */
static void test_random(void)
{
	static const char alpha[] = "ab/%. \n\xff";
	char key[KVP_MAX_KEY], path[KVFS_PATH_MAX], back[KVP_MAX_KEY * 4];

	for (int it = 0; it < 20000; it++) {
		size_t n = 1 + next() % (it % 10 == 0 ? KVP_MAX_KEY : 40), blen;
		int rc;

		for (size_t i = 0; i < n; i++) {
			/* long runs make long components */
			key[i] = (it & 1) ? alpha[next() % (sizeof(alpha) - 1)]
					  : (next() % 50 ? 'x' : alpha[next() % (sizeof(alpha) - 1)]);
		}
		rc = kvfs_key_to_path(key, n, path, sizeof(path));
		CHECK(rc == 0, "key_to_path rc %d (n %zu)", rc, n);
		if (rc)
			continue;
		rc = kvfs_path_to_key(path, back, sizeof(back), &blen);
		CHECK(rc == 0 && blen == n && memcmp(back, key, n) == 0,
		      "round trip rc %d n %zu blen %zu", rc, n, blen);

		/* component escaping alone round-trips too */
		char e[3 * 64 + 1], u[65];
		size_t m = n < 64 ? n : 64, ul;
		rc = kvfs_escape(key, m, e, sizeof(e));
		CHECK(rc == 0 && kvfs_unescape(e, u, sizeof(u), &ul) == 0 && ul == m &&
		      memcmp(u, key, m) == 0, "component round trip");
	}
}

int main(void)
{
	test_examples();
	test_long();
	test_random();
	if (tl_failures) {
		fprintf(stderr, "t_kvfs_escape: %d tl_failures\n", tl_failures);
		return 1;
	}
	printf("t_kvfs_escape: ok\n");
	return 0;
}

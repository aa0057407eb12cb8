/* t_master_list: LIST pages through 20,000 keys (1000 per page) while
 * another connection inserts keys: every key that existed before the
 * listing started comes back exactly once, in byte order. Delimiter roll-up
 * into common prefixes (S3 semantics), cursors inside rolled-up prefixes,
 * argument errors. */
#include "testlib.h"

#define NKEYS 20000
#define PAGE 1000
#define BATCH 500

/* PUT_START + PUT_END of keys[0..n) in one batch each. */
static void put_batch(struct tl_conn *c, size_t n, const char *const *keys)
{
	uint64_t sizes[BATCH];
	struct tl_obj o[BATCH];
	struct wbuf b;

	for (size_t i = 0; i < n; i++)
		sizes[i] = 1;
	REQUIRE(tl_put_start(c, 1, 0, n, keys, sizes, o) == 0, "PUT_START batch");
	wb_init(&b);
	wb_u32(&b, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		REQUIRE(o[i].status == 0, "PUT_START %s: %s", keys[i], kvp_strerror(o[i].status));
		wb_cstr(&b, keys[i]);
		wb_u64(&b, o[i].generation);
		wb_u64(&b, 1);
	}
	int res[BATCH];
	REQUIRE(tl_i32_reply(tl_call(c, WIRE_OP_PUT_END, &b), n, res) == 0, "PUT_END batch");
	wb_free(&b);
}

/* Child: inserts keys between and after the listed ones until killed. */
static void inserter(int port)
{
	struct tl_conn *c = tl_client(port, WIRE_ROLE_CLIENT, NULL, "h");
	char buf[BATCH][32];
	const char *keys[BATCH];

	for (int round = 0; round < 60; round++) {
		for (int i = 0; i < 50; i++) {
			int k = (round * 331 + i * 397) % NKEYS;
			snprintf(buf[i], sizeof(buf[i]), "key%06d.%d", k, round);
			keys[i] = buf[i];
		}
		snprintf(buf[50], sizeof(buf[50]), "key%06d", NKEYS + round);	/* after the range */
		snprintf(buf[51], sizeof(buf[51]), "kex%d", round);		/* after every key */
		keys[50] = buf[50];
		keys[51] = buf[51];
		put_batch(c, 52, keys);
		tl_sleep_ms(2);
	}
	tl_conn_close(c);
}

static void test_paging(int port)
{
	struct tl_conn *c = tl_client(port, WIRE_ROLE_CLIENT, NULL, "h");
	char (*kb)[16] = calloc(NKEYS, 16);
	const char *keys[BATCH];

	REQUIRE(kb, "oom");
	for (int i = 0; i < NKEYS; i += BATCH) {
		for (int j = 0; j < BATCH; j++) {
			snprintf(kb[i + j], 16, "key%06d", i + j);
			keys[j] = kb[i + j];
		}
		put_batch(c, BATCH, keys);
	}

	fflush(NULL);
	pid_t child = fork();
	REQUIRE(child >= 0, "fork");
	if (child == 0) {
		inserter(port);
		_exit(0);		/* not exit(): the parent's cleanup must not run here */
	}

	/* list everything under "key" while the child inserts: start once its
	 * first batch is in, and give it time between pages */
	for (int i = 0; i < 500 && tl_exists(c, "kex0") != 1; i++)
		tl_sleep_ms(10);
	int *seen = calloc(NKEYS, sizeof(int));
	char **names = calloc(PAGE, sizeof(char *));
	int *isp = calloc(PAGE, sizeof(int));
	char *cursor = strdup(""), *prev = strdup(""), *next;
	size_t n, total = 0, pages = 0;
	REQUIRE(seen && names && isp, "oom");
	do {
		REQUIRE(tl_list(c, "key", "", cursor, PAGE, names, isp, PAGE, &n, &next) == 0, "LIST");
		pages++;
		CHECK(n <= PAGE, "page of %zu", n);
		for (size_t i = 0; i < n; i++) {
			CHECK(strcmp(prev, names[i]) < 0, "order: '%s' then '%s'", prev, names[i]);
			CHECK(strncmp(names[i], "key", 3) == 0 && !isp[i], "entry %s", names[i]);
			int k;
			char tail;
			if (sscanf(names[i], "key%d%c", &k, &tail) == 1 && k >= 0 && k < NKEYS)
				seen[k]++;
			free(prev);
			prev = names[i];
			total++;
		}
		CHECK(n == PAGE || next[0] == '\0', "short page only at the end");
		free(cursor);
		cursor = next;
		tl_sleep_ms(5);
	} while (cursor[0] && pages < 200);
	int missing = 0, dup = 0;
	for (int i = 0; i < NKEYS; i++) {
		missing += seen[i] == 0;
		dup += seen[i] > 1;
	}
	CHECK_EQ(missing, 0);
	CHECK_EQ(dup, 0);
	CHECK(total >= NKEYS, "listed %zu", total);
	printf("listed %zu entries in %zu pages while inserting\n", total, pages);

	int st;
	waitpid(child, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "inserter ok");
	free(prev);
	free(cursor);
	free(seen);
	free(names);
	free(isp);
	free(kb);
	tl_conn_close(c);
}

static void expect_page(struct tl_conn *c, const char *prefix, const char *delim,
			const char *cursor, uint32_t limit, const char *const *want,
			const int *want_isp, size_t nwant, const char *want_next)
{
	char *names[16];
	int isp[16];
	size_t n;
	char *next;

	CHECK_EQ(tl_list(c, prefix, delim, cursor, limit, names, isp, 16, &n, &next), 0);
	CHECK(n == nwant, "LIST '%s' '%s' after '%s': %zu entries, want %zu", prefix, delim,
	      cursor, n, nwant);
	for (size_t i = 0; i < n && i < nwant; i++) {
		CHECK(strcmp(names[i], want[i]) == 0, "entry %zu: '%s', want '%s'", i, names[i],
		      want[i]);
		CHECK(isp[i] == want_isp[i], "entry '%s' is_prefix %d", names[i], isp[i]);
	}
	CHECK(next && strcmp(next, want_next) == 0, "next '%s', want '%s'", next, want_next);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(next);
}

static void test_delimiter(int port)
{
	struct tl_conn *c = tl_client(port, WIRE_ROLE_CLIENT, NULL, "h");
	const char *keys[] = { "a/", "a/b/1", "a/b/2", "a/b/c/3", "a/c", "a/d/x", "a0", "b/1" };
	put_batch(c, 8, keys);
	struct tl_obj o;
	CHECK_EQ(tl_put_start1(c, "a/e/pending", 1, 1, 0, &o), 0);	/* invisible */

	{
		const char *w[] = { "a/", "a/b/", "a/c", "a/d/" };
		int p[] = { 0, 1, 0, 1 };
		expect_page(c, "a/", "/", "", 0, w, p, 4, "");
	}
	{	/* paging one entry at a time, cursors on rolled-up prefixes */
		const char *w1[] = { "a/b/" };
		int p1[] = { 1 };
		expect_page(c, "a/", "/", "a/", 1, w1, p1, 1, "a/b/");
		const char *w2[] = { "a/c" };
		int p2[] = { 0 };
		expect_page(c, "a/", "/", "a/b/", 1, w2, p2, 1, "a/c");
		const char *w3[] = { "a/d/" };
		expect_page(c, "a/", "/", "a/c", 1, w3, p1, 1, "");
	}
	{	/* no prefix, delimiter: top level */
		const char *w[] = { "a/", "a0", "b/" };
		int p[] = { 1, 0, 1 };
		expect_page(c, "", "/", "", 0, w, p, 3, "");
	}
	{	/* deeper prefix */
		const char *w[] = { "a/b/1", "a/b/2", "a/b/c/" };
		int p[] = { 0, 0, 1 };
		expect_page(c, "a/b/", "/", "", 10, w, p, 3, "");
	}
	{	/* no delimiter: plain keys under the prefix */
		const char *w[] = { "a/b/1", "a/b/2", "a/b/c/3" };
		int p[] = { 0, 0, 0 };
		expect_page(c, "a/b", "", "", 10, w, p, 3, "");
		expect_page(c, "a/b", "", "a/b/1", 2, w + 1, p, 2, "");
		expect_page(c, "a/b", "", "", 2, w, p, 2, "a/b/2");
	}
	{	/* a cursor before the prefix starts at the prefix */
		const char *w[] = { "b/1" };
		int p[] = { 0 };
		expect_page(c, "b/", "", "a", 10, w, p, 1, "");
		expect_page(c, "zz", "", "", 10, w, p, 0, "");
	}
	/* a two-byte delimiter is refused */
	char *names[4];
	int isp[4];
	size_t n;
	char *next;
	CHECK_EQ(tl_list(c, "", "//", "", 10, names, isp, 4, &n, &next), KVP_EINVAL);
	CHECK_EQ(tl_exists(c, "a/c"), 1);
	tl_conn_close(c);
}

int main(void)
{
	struct tl_master m;

	tl_start_master(&m, "[cluster]\nmax_batch = 1000\n");
	struct tl_conn *node = tl_client(m.port, WIRE_ROLE_NODE, NULL, "h");
	REQUIRE(tl_mount(node, "list", "h", 64ull << 20, 1, 64, NULL) > 0, "mount");
	test_delimiter(m.port);
	test_paging(m.port);
	tl_conn_close(node);
	int st = tl_stop_master(&m);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "clean exit");
	return tl_done();
}

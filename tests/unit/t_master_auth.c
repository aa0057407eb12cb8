/* t_master_auth: the cluster token on HELLO (wrong / missing token refused
 * and the connection closed, the daemon keeps serving others), HELLO first,
 * master.max_connections, loopback-only listening without a token. */
#include "testlib.h"

/* True if the peer closed the connection (EOF) within 2 s. */
static bool closed_by_peer(struct tl_conn *c)
{
	struct tl_frame *f;
	int rc;

	while ((rc = tl_read_frame(c, &f, 2000)) == 0)
		tl_frame_free(f);
	return rc == -ECONNRESET;
}

static void test_token(void)
{
	struct tl_master m;
	char ini[512], tokfile[256];
	const char *dir = tl_tmpdir("tok");

	tl_fmt(tokfile, sizeof(tokfile), "%s/token", dir);
	tl_write_file(tokfile, "s3cret-token\n");
	REQUIRE(chmod(tokfile, 0600) == 0, "chmod");
	/* with a token the master may listen on every address */
	snprintf(ini, sizeof(ini), "[cluster]\ntoken_file = %s\n", tokfile);
	tl_start_master(&m, ini);

	struct tl_conn *good = tl_client(m.port, WIRE_ROLE_CLIENT, "s3cret-token", "h");

	struct tl_conn *c = tl_conn_open(m.port);
	REQUIRE(c, "connect");
	CHECK_EQ(tl_hello(c, WIRE_ROLE_CLIENT, "wrong", "x", "h"), KVP_EAUTH);
	CHECK(closed_by_peer(c), "wrong token: connection closed");
	tl_conn_close(c);

	c = tl_conn_open(m.port);
	CHECK_EQ(tl_hello(c, WIRE_ROLE_CLIENT, "", "x", "h"), KVP_EAUTH);
	CHECK(closed_by_peer(c), "missing token: connection closed");
	tl_conn_close(c);

	c = tl_conn_open(m.port);
	CHECK_EQ(tl_hello(c, WIRE_ROLE_CLIENT, "s3cret-token-longer", "x", "h"), KVP_EAUTH);
	tl_conn_close(c);

	/* first frame not HELLO */
	c = tl_conn_open(m.port);
	CHECK_EQ(tl_exists(c, "k"), KVP_EAUTH);
	CHECK(closed_by_peer(c), "request before HELLO: connection closed");
	tl_conn_close(c);

	/* a node with the wrong token cannot mount */
	c = tl_conn_open(m.port);
	CHECK_EQ(tl_hello(c, WIRE_ROLE_NODE, "nope", "n", "h"), KVP_EAUTH);
	tl_conn_close(c);

	/* a flood of wrong tokens with binary names: refused, logged at most
	 * once a second, names made printable */
	for (int i = 0; i < 50; i++) {
		c = tl_conn_open(m.port);
		REQUIRE(c, "connect");
		CHECK_EQ(tl_hello(c, WIRE_ROLE_CLIENT, "bad", "\x01\xff\x1b[31mred\n", "h\t"),
			 KVP_EAUTH);
		tl_conn_close(c);
	}

	/* the authenticated connection is still served */
	CHECK_EQ(tl_exists(good, "k"), 0);
	struct tl_info info;
	CHECK_EQ(tl_info(good, &info), 0);
	tl_conn_close(good);

	char *log = tl_read_file(m.log);
	CHECK(log && strstr(log, "wrong cluster token"), "refusals are logged");
	int lines = 0;
	for (char *p = log; p && (p = strstr(p, "wrong cluster token")); p++)
		lines++;
	CHECK(lines <= 3, "%d refusal messages for 54 refusals (rate-limited)", lines);
	bool clean = true;
	for (const unsigned char *p = (const unsigned char *)log; p && *p; p++)
		clean &= (*p >= 0x20 && *p < 0x7f) || *p == '\n';
	CHECK(clean, "the log holds printable text only");
	CHECK(log && !strstr(log, "replaced by 127.0.0.1"), "no loopback rewrite with a token");
	free(log);
	int st = tl_stop_master(&m);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "clean exit");
}

static void test_no_token_loopback(void)
{
	const char *dir = tl_tmpdir("lo");
	char ini[512], path[256], log[256], bin[256];
	int port = tl_free_port(), hport = tl_free_port();

	/* listen on all addresses without a token: rewritten to 127.0.0.1 */
	tl_fmt(path, sizeof(path), "%s/m.ini", dir);
	tl_fmt(log, sizeof(log), "%s/m.log", dir);
	snprintf(ini, sizeof(ini), "[master]\nlisten = 0.0.0.0:%d\nhttp_listen = :%d\n", port, hport);
	tl_write_file(path, ini);
	tl_fmt(bin, sizeof(bin), "%s/kvpool-master", tl_build());
	char *argv[] = { bin, "-c", path, NULL };
	pid_t pid = tl_spawn(argv, log);
	REQUIRE(tl_wait_port(port, 10000), "master on port %d", port);
	char *text = tl_read_file(log);
	CHECK(text && strstr(text, "replaced by 127.0.0.1"), "warning about loopback-only");
	free(text);

	struct tl_conn *c = tl_client(port, WIRE_ROLE_CLIENT, NULL, "h");
	CHECK_EQ(tl_exists(c, "x"), 0);
	/* without a token any token is accepted (there is nothing to check) */
	struct tl_conn *c2 = tl_client(port, WIRE_ROLE_CLIENT, "whatever", "h");
	tl_conn_close(c2);
	tl_conn_close(c);
	CHECK(tl_http(hport, "GET", "/health", NULL, 0, NULL, NULL) == 200, "health on loopback");
	int st = tl_kill(pid, SIGTERM, 5000);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "clean exit");
}

static void test_max_connections(void)
{
	struct tl_master m;
	struct tl_conn *c[3];

	tl_start_master(&m, "[master]\nmax_connections = 3\n");
	/* tl_start_master's own probe connection has gone by now */
	tl_sleep_ms(100);
	for (int i = 0; i < 3; i++)
		c[i] = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "h");
	struct tl_conn *x = tl_conn_open(m.port);
	REQUIRE(x, "connect");
	struct tl_frame *f;
	CHECK_EQ(tl_read_frame(x, &f, 3000), 0);
	CHECK(f && f->h.status == KVP_ELIMIT, "refused with ELIMIT");
	tl_frame_free(f);
	CHECK(closed_by_peer(x), "then closed");
	tl_conn_close(x);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(tl_exists(c[i], "k"), 0);
	tl_conn_close(c[0]);
	tl_sleep_ms(100);
	x = tl_client(m.port, WIRE_ROLE_CLIENT, NULL, "h");	/* room again */
	CHECK_EQ(tl_exists(x, "k"), 0);
	tl_conn_close(x);
	tl_conn_close(c[1]);
	tl_conn_close(c[2]);
	tl_stop_master(&m);
}

int main(void)
{
	test_token();
	test_no_token_loopback();
	test_max_connections();
	return tl_done();
}

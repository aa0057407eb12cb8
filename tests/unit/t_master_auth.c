/* t_master_auth: the cluster token on HELLO (wrong / missing token refused
 * and the connection closed, the daemon keeps serving others), HELLO first,
 * master.max_connections, loopback-only listening without a token. */
#include "testlib.h"

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
	CHECK(tl_closed_by_peer(c), "wrong token: connection closed");
	tl_conn_close(c);

	c = tl_conn_open(m.port);
	CHECK_EQ(tl_hello(c, WIRE_ROLE_CLIENT, "", "x", "h"), KVP_EAUTH);
	CHECK(tl_closed_by_peer(c), "missing token: connection closed");
	tl_conn_close(c);

	c = tl_conn_open(m.port);
	CHECK_EQ(tl_hello(c, WIRE_ROLE_CLIENT, "s3cret-token-longer", "x", "h"), KVP_EAUTH);
	tl_conn_close(c);

	/* first frame not HELLO */
	c = tl_conn_open(m.port);
	CHECK_EQ(tl_exists(c, "k"), KVP_EAUTH);
	CHECK(tl_closed_by_peer(c), "request before HELLO: connection closed");
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
	CHECK(log && !strstr(log, "serves 127.0.0.1"), "no loopback rewrite with a token");
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
	CHECK(text && strstr(text, "serves 127.0.0.1"), "warning about loopback-only");
	char want[400];
	snprintf(want, sizeof(want), "add 'token_file = /etc/kvpool/token' under [cluster] in %s",
		 path);
	CHECK(text && strstr(text, want), "the warning names the INI line and file");
	CHECK(text && strstr(text, "--cluster_token_file="), "and the flag");
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

/* kvpool token new: a 0600 file of 64 hex digits that the master accepts
 * as --cluster_token_file, after which it listens beyond loopback and
 * wants that token. */
static void test_token_new(void)
{
	const char *dir = tl_tmpdir("tok");
	char tok[256], bin[256], cli[256], flag[300], lport[64], log[256];
	char *out = NULL;
	struct stat st;
	int port = tl_free_port();

	tl_fmt(tok, sizeof(tok), "%s/token", dir);
	tl_fmt(cli, sizeof(cli), "%s/kvpool", tl_build());
	char *argv[] = { cli, "token", "new", tok, NULL };
	int rc = tl_run(argv, &out, 5000);
	CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "token new: exit 0");
	CHECK(out && strstr(out, "token_file = ") && strstr(out, "--cluster_token_file="),
	      "prints how to use it");
	free(out);
	REQUIRE(stat(tok, &st) == 0, "token file");
	CHECK_EQ(st.st_mode & 0777, 0600);
	char *text = tl_read_file(tok);
	CHECK(text && strlen(text) == 65 && text[64] == '\n', "64 hex digits and a newline");
	for (int i = 0; text && i < 64; i++)
		CHECK(strchr("0123456789abcdef", text[i]), "hex");
	rc = tl_run(argv, &out, 5000);
	CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "an existing token is kept");
	free(out);
	char *t2 = tl_read_file(tok);
	CHECK(t2 && text && !strcmp(t2, text), "unchanged");
	free(t2);

	/* the master with it: all addresses, the token required */
	tl_fmt(bin, sizeof(bin), "%s/kvpool-master", tl_build());
	tl_fmt(flag, sizeof(flag), "--cluster_token_file=%s", tok);
	tl_fmt(lport, sizeof(lport), "--rpc_port=%d", port);
	tl_fmt(log, sizeof(log), "%s/m.log", dir);
	char *margv[] = { bin, flag, lport, "--rpc_address=0.0.0.0", "--metrics_port=0", NULL };
	pid_t pid = tl_spawn(margv, log);
	REQUIRE(tl_wait_port(port, 10000), "master on port %d", port);
	struct tl_conn *c = tl_conn_open(port);
	REQUIRE(c, "connect");
	CHECK_EQ(tl_hello(c, WIRE_ROLE_CLIENT, "wrong", "x", "h"), KVP_EAUTH);
	tl_conn_close(c);
	text[64] = '\0';
	c = tl_client(port, WIRE_ROLE_CLIENT, text, "h");
	CHECK_EQ(tl_exists(c, "x"), 0);
	tl_conn_close(c);
	char *mlog = tl_read_file(log);
	CHECK(mlog && !strstr(mlog, "serves 127.0.0.1"), "listens beyond loopback");
	free(mlog);
	free(text);
	rc = tl_kill(pid, SIGTERM, 5000);
	CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "clean exit");
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
	CHECK(tl_closed_by_peer(x), "then closed");
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
	test_token_new();
	test_max_connections();
	return tl_done();
}

/* t_master_tenant: tenants at the master over real frames — a tenant token
 * HELLOs as a client only (node role: KVP_EPERM, closed), an unknown token
 * is KVP_EAUTH; items of another tenant's keys get KVP_EPERM (PUT_START,
 * EXISTS, GET, REMOVE, PUT_REVOKE) and nothing is stored or removed; LIST
 * shows only readable keys; the cluster token is the admin tenant; a put
 * over the quota evicts the owner's own objects and never another's, and
 * fails with KVP_ENOSPC when it cannot fit; a tenants file without a
 * cluster token or with a bad line stops start-up.
 */
#include "testlib.h"

static void listing(struct tl_conn *c, const char *prefix, char *out, size_t cap)
{
	char *names[16], *next = NULL;
	int isp[16];
	size_t n = 0;

	out[0] = 0;
	int rc = tl_list(c, prefix, "", "", 16, names, isp, 16, &n, &next);
	if (rc) {
		snprintf(out, cap, "rc %d", rc);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(out);
		snprintf(out + l, cap - l, "%s%s", i ? " " : "", names[i]);
		free(names[i]);
	}
	free(next);
}

static void test_rights(void)
{
	struct tl_master m;
	char ini[1024], tok[256], ten[256], buf[512];
	const char *dir = tl_tmpdir("ten");
	struct tl_obj o;

	tl_fmt(tok, sizeof(tok), "%s/token", dir);
	tl_write_file(tok, "admin-token\n");
	chmod(tok, 0600);
	tl_fmt(ten, sizeof(ten), "%s/tenants", dir);
	tl_write_file(ten, "alice token=alice-tok write=a/ read=s/ quota_bytes=10000\n"
			   "bob token=bob-tok write=b/,s/\n");
	chmod(ten, 0600);
	snprintf(ini, sizeof(ini), "[cluster]\ntoken_file = %s\ntenants_file = %s\n", tok, ten);
	tl_start_master(&m, ini);

	struct tl_conn *node = tl_client(m.port, WIRE_ROLE_NODE, "admin-token", "h");
	REQUIRE(tl_mount(node, "n1", "h", 1 << 20, 77, 4096, NULL) > 0, "mount");
	struct tl_conn *a = tl_client(m.port, WIRE_ROLE_CLIENT, "alice-tok", "h");
	struct tl_conn *b = tl_client(m.port, WIRE_ROLE_CLIENT, "bob-tok", "h");
	struct tl_conn *adm = tl_client(m.port, WIRE_ROLE_CLIENT, "admin-token", "h");

	struct tl_conn *c = tl_conn_open(m.port);
	CHECK_EQ(tl_hello(c, WIRE_ROLE_NODE, "alice-tok", "x", "h"), KVP_EPERM);
	CHECK(tl_closed_by_peer(c), "tenant as node: closed");
	tl_conn_close(c);
	c = tl_conn_open(m.port);
	CHECK_EQ(tl_hello(c, WIRE_ROLE_CLIENT, "carol-tok", "x", "h"), KVP_EAUTH);
	tl_conn_close(c);

	CHECK_EQ(tl_put1(b, "b/1", 100, &o), 0);
	CHECK_EQ(tl_put1(b, "s/1", 100, &o), 0);
	CHECK_EQ(tl_put1(a, "a/1", 100, &o), 0);
	CHECK_EQ(tl_put_start1(a, "b/2", 100, 1, 0, &o), KVP_EPERM);
	CHECK_EQ(tl_put_start1(a, "s/2", 100, 1, 0, &o), KVP_EPERM);
	CHECK_EQ(tl_exists(a, "b/1"), KVP_EPERM);
	CHECK_EQ(tl_exists(a, "b/none"), KVP_EPERM);	/* no existence leak */
	CHECK_EQ(tl_get1(a, "b/1", &o), KVP_EPERM);
	CHECK_EQ(tl_get1(a, "s/1", &o), 0);
	CHECK_EQ(tl_remove(a, "b/1", true), KVP_EPERM);
	CHECK_EQ(tl_remove(a, "s/1", true), KVP_EPERM);
	CHECK_EQ(tl_exists(b, "b/1"), 1);
	CHECK_EQ(tl_exists(adm, "b/2"), 0);

	/* a pending put of bob's: alice may not revoke it */
	CHECK_EQ(tl_put_start1(b, "b/p", 100, 1, 0, &o), 0);
	CHECK_EQ(tl_put_revoke1(a, "b/p", o.generation), KVP_EPERM);
	CHECK_EQ(tl_put_end1(b, "b/p", o.generation, 100), 0);

	listing(a, "", buf, sizeof(buf));
	CHECK(!strcmp(buf, "a/1 s/1"), "alice lists '%s'", buf);
	listing(a, "b/", buf, sizeof(buf));
	CHECK(!strcmp(buf, "rc -5025"), "alice lists b/: '%s'", buf);
	listing(adm, "", buf, sizeof(buf));
	CHECK(!strcmp(buf, "a/1 b/1 b/p s/1"), "admin lists '%s'", buf);

	/* quota 10000: 4000 + 4000 fit, the third evicts alice's oldest */
	CHECK_EQ(tl_put1(a, "a/q1", 4000, &o), 0);
	CHECK_EQ(tl_put1(a, "a/q2", 4000, &o), 0);
	CHECK_EQ(tl_put1(a, "a/q3", 4000, &o), 0);
	CHECK_EQ(tl_exists(a, "a/q3"), 1);
	CHECK(tl_exists(a, "a/1") == 0 || tl_exists(a, "a/q1") == 0, "nothing of alice's evicted");
	CHECK_EQ(tl_put_start1(a, "a/big", 20000, 1, 0, &o), KVP_ENOSPC);
	CHECK_EQ(tl_exists(b, "b/1"), 1);
	CHECK_EQ(tl_exists(b, "s/1"), 1);
	CHECK_EQ(tl_exists(b, "b/p"), 1);

	char *body = NULL;
	CHECK_EQ(tl_http(m.http_port, "GET", "/metrics", NULL, 0, &body, NULL), 200);
	CHECK(body && strstr(body, "kvpool_master_tenant_objects{tenant=\"bob\"} 3\n"), "bob's objects");
	CHECK(body && strstr(body, "kvpool_master_tenant_quota_refused_total{tenant=\"alice\"} 1\n"),
	      "alice's quota refusal");
	CHECK(body && !strstr(body, "alice-tok"), "no token in /metrics");
	free(body);

	tl_conn_close(a);
	tl_conn_close(b);
	tl_conn_close(adm);
	tl_conn_close(node);
	tl_stop_master(&m);
}

static void test_bad_files(void)
{
	const char *dir = tl_tmpdir("tenbad");
	char ten[256], tok[256], ini[1024], path[256], cmd[1024];
	char *out = NULL;

	tl_fmt(ten, sizeof(ten), "%s/tenants", dir);
	tl_write_file(ten, "alice token=x write=a/\nbob colour=red\n");
	chmod(ten, 0600);
	tl_fmt(tok, sizeof(tok), "%s/token", dir);
	tl_write_file(tok, "admin\n");
	chmod(tok, 0600);
	tl_fmt(path, sizeof(path), "%s/m.ini", dir);
	snprintf(ini, sizeof(ini), "[cluster]\ntoken_file = %s\ntenants_file = %s\n", tok, ten);
	tl_write_file(path, ini);
	tl_fmt(cmd, sizeof(cmd), "%s/kvpool-master", tl_build());
	char *argv[] = { cmd, "-c", path, NULL };
	CHECK(tl_run(argv, &out, 10000) != 0, "a bad tenants file stops start-up");
	CHECK(out && strstr(out, "line 2: unknown field 'colour=red'"), "%s", out ? out : "");
	free(out);

	snprintf(ini, sizeof(ini), "[cluster]\ntenants_file = %s\n", ten);
	tl_write_file(path, ini);
	out = NULL;
	CHECK(tl_run(argv, &out, 10000) != 0, "a tenants file without a token stops start-up");
	CHECK(out && strstr(out, "needs token_file"), "%s", out ? out : "");
	free(out);
}

int main(void)
{
	test_rights();
	test_bad_files();
	return tl_done();
}

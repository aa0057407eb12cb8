/* t_tenant: the tenants file decoder (src/common/tenant.c): a good file with
 * every field, each kind of bad line and its "line N:" message, duplicate
 * names and tokens, the rights checks (prefixes, namespaces, "*", admin,
 * write implies read), token lookup, token_file= and the file mode check.
 */
#include "tenant.h"
#include "kvpool.h"
#include "testlib.h"

#define S(x) x, strlen(x)
#define K(x) (const uint8_t *)x, strlen(x)

static void test_good(void)
{
	struct tenant_tab t;
	char err[256] = "";
	const char *f =
		"# tenants\n"
		"\n"
		"alice token=aaaa read=shared/,ns:llama write=alice/ quota_bytes=1M\r\n"
		"  bob\ttoken=bbbb write=bob/ rdma=trusted   \n"
		"ops token=cccc admin\n"
		"reader token=dddd read=*\n";

	REQUIRE(tenant_parse(&t, S(f), false, err, sizeof(err)) == 0, "%s\n", err);
	REQUIRE(t.n == 4);
	const struct tenant *a = &t.v[0], *b = &t.v[1], *o = &t.v[2], *r = &t.v[3];
	CHECK(!strcmp(a->name, "alice") && !strcmp(a->token, "aaaa") && a->token_len == 4);
	CHECK(a->quota_bytes == 1024 * 1024 && !a->admin && !a->rdma_trusted);
	CHECK(b->rdma_trusted && !b->admin && !b->quota_bytes);
	CHECK(o->admin && o->rdma_trusted && o->read_all && o->write_all);
	CHECK(r->read_all && !r->write_all);

	CHECK(tenant_may(a, K("alice/x"), TENANT_WRITE));
	CHECK(tenant_may(a, K("alice/x"), TENANT_READ));	/* write implies read */
	CHECK(tenant_may(a, K("shared/y"), TENANT_READ));
	CHECK(!tenant_may(a, K("shared/y"), TENANT_WRITE));
	CHECK(tenant_may(a, K("llama/0"), TENANT_READ));	/* ns:llama */
	CHECK(!tenant_may(a, K("llamaX/0"), TENANT_READ));
	CHECK(!tenant_may(a, K("bob/x"), TENANT_READ));
	CHECK(!tenant_may(a, K("alice"), TENANT_READ));	/* shorter than the prefix */
	CHECK(tenant_may(o, K("bob/x"), TENANT_WRITE));
	CHECK(tenant_may(r, K("bob/x"), TENANT_READ) && !tenant_may(r, K("bob/x"), TENANT_WRITE));
	CHECK(tenant_may(NULL, K("any"), TENANT_WRITE));

	CHECK(tenant_may_prefix(a, K(""), TENANT_READ));	/* list "" shows its own */
	CHECK(tenant_may_prefix(a, K("ali"), TENANT_WRITE));
	CHECK(!tenant_may_prefix(a, K("bob/"), TENANT_READ));
	CHECK(tenant_covers_prefix(a, K("alice/sub/"), TENANT_WRITE));
	CHECK(!tenant_covers_prefix(a, K(""), TENANT_WRITE));

	CHECK(tenant_find_token(&t, K("bbbb")) == b);
	CHECK(tenant_find_token(&t, K("bbb")) == NULL);
	CHECK(tenant_find_token(&t, K("bbbbb")) == NULL);
	CHECK(tenant_find_name(&t, "ops") == o && !tenant_find_name(&t, "nobody"));
	tenant_tab_free(&t);
	CHECK(t.n == 0 && t.v == NULL);

	CHECK(tenant_parse(&t, S(""), false, err, sizeof(err)) == 0 && t.n == 0);
	tenant_tab_free(&t);
}

static void bad(int line, const char *f, const char *want)
{
	struct tenant_tab t;
	char err[256] = "";

	int rc = tenant_parse(&t, f, strlen(f), false, err, sizeof(err));
	if (rc != KVP_EINVAL || strncmp(err, want, strlen(want)) != 0 || t.n || t.v) {
		fprintf(stderr, "line %d: rc %d err '%s', want '%s'\n", line, rc, err, want);
		tl_failures++;
	}
	tenant_tab_free(&t);
}

static void test_bad(void)
{
	char big[2100];

	bad(__LINE__, "alice read=a/\n", "line 1: tenant alice: no token");
	bad(__LINE__, "\nbad/name token=x\n", "line 2: tenant name");
	bad(__LINE__, "a token=x colour=red\n", "line 1: unknown field 'colour=red'");
	bad(__LINE__, "a token=x token=y\n", "line 1: token:");
	bad(__LINE__, "a token=\n", "line 1: token:");
	bad(__LINE__, "a token=x quota_bytes=lots\n", "line 1: quota_bytes");
	bad(__LINE__, "a token=x rdma=maybe\n", "line 1: rdma:");
	bad(__LINE__, "a token=x token_file=/etc/x\n", "line 1: token_file");
	bad(__LINE__, "a token=x\nb token=y\na token=z\n", "line 3: tenant a: name or token");
	bad(__LINE__, "a token=x\nb token=x\n", "line 2: tenant b: name or token");
	bad(__LINE__, "a tok\0en=x\n", "line 1: unknown field 'tok'");	/* strlen stops */
	memset(big, 'k', sizeof(big));
	memcpy(big, "a token=x read=", 15);
	big[sizeof(big) - 1] = 0;
	bad(__LINE__, big, "line 1: read=");

	struct tenant_tab t;
	char err[128];
	const char nul[] = "a token=x\0y\n";
	CHECK(tenant_parse(&t, nul, sizeof(nul) - 1, false, err, sizeof(err)) == KVP_EINVAL);
	CHECK(!strncmp(err, "line 1: NUL", 11), "%s\n", err);
}

static void test_files(void)
{
	const char *dir = tl_tmpdir("tenant");
	char path[256], tok[256], f[512], err[512];
	struct tenant_tab t;

	tl_fmt(tok, sizeof(tok), "%s/alice.token", dir);
	tl_write_file(tok, "secret-a\nignored\n");
	chmod(tok, 0600);
	tl_fmt(path, sizeof(path), "%s/tenants", dir);
	tl_fmt(f, sizeof(f), "alice token_file=%s write=alice/\n", tok);
	tl_write_file(path, f);
	chmod(path, 0600);
	REQUIRE(tenant_load(&t, path, err, sizeof(err)) == 0, "%s\n", err);
	CHECK(t.n == 1 && !strcmp(t.v[0].token, "secret-a"));
	tenant_tab_free(&t);

	chmod(path, 0644);
	CHECK(tenant_load(&t, path, err, sizeof(err)) == KVP_EINVAL && strstr(err, "chmod 600"),
	      "%s\n", err);
	chmod(path, 0600);
	chmod(tok, 0640);
	CHECK(tenant_load(&t, path, err, sizeof(err)) == KVP_EINVAL && strstr(err, "line 1: token_file"),
	      "%s\n", err);
	tl_fmt(path, sizeof(path), "%s/missing", dir);
	CHECK(tenant_load(&t, path, err, sizeof(err)) == KVP_EINVAL && strstr(err, "missing"));
}

int main(void)
{
	test_good();
	test_bad();
	test_files();
	return tl_done();
}

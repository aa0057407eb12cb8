/* tenant: the tenants file's decoder and the rights checks (tenant.h).
 * The decoder trusts nothing: every field is length-checked before it is
 * copied, and a bad line fails the whole file (a half-read table would
 * grant less or more than the operator wrote).
 */
#include "tenant.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h"
#include "kvpool.h"
#include "log.h"

#define LINE_MAX_FIELDS 256

void tenant_tab_free(struct tenant_tab *t)
{
	for (size_t i = 0; i < t->n; i++) {
		struct tenant *x = &t->v[i];
		for (uint32_t j = 0; j < x->nread; j++)
			free(x->read[j]);
		for (uint32_t j = 0; j < x->nwrite; j++)
			free(x->write[j]);
		free(x->read);
		free(x->write);
		explicit_bzero(x->token, sizeof(x->token));
	}
	free(t->v);
	t->v = NULL;
	t->n = 0;
}

static bool name_ok(const char *p, size_t n)
{
	if (!n || n > TENANT_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)p[i]) && p[i] != '.' && p[i] != '_' && p[i] != '-')
			return false;
	return true;
}

/* Reads the first line of a token file into x->token (token_file=). */
static int read_token_file(struct tenant *x, const char *path, char *err, size_t errlen)
{
	char buf[TENANT_TOKEN_MAX + 2];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	struct stat st;

	if (fd < 0) {
		log_seterr(err, errlen, "token_file %s: %s", path, strerror(errno));
		return KVP_EINVAL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (st.st_uid == geteuid() && (st.st_mode & 077))) {
		log_seterr(err, errlen, "token_file %s: not a regular file of mode 0600", path);
		close(fd);
		return KVP_EINVAL;
	}
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		n = 0;
	buf[n] = 0;
	size_t len = strcspn(buf, "\r\n");
	while (len && isspace((unsigned char)buf[len - 1]))
		len--;
	if (!len || len > TENANT_TOKEN_MAX || memchr(buf, 0, len)) {
		log_seterr(err, errlen, "token_file %s: the first line must be a token of 1-%d "
			   "bytes", path, TENANT_TOKEN_MAX);
		explicit_bzero(buf, sizeof(buf));
		return KVP_EINVAL;
	}
	memcpy(x->token, buf, len);
	x->token[len] = 0;
	x->token_len = len;
	explicit_bzero(buf, sizeof(buf));
	return 0;
}

static int add_prefix(struct tenant_prefix ***v, uint32_t *n, bool *all, const char *p,
		      size_t len)
{
	char tmp[KVP_MAX_KEY + 1];

	if (len == 1 && p[0] == '*') {
		*all = true;
		return 0;
	}
	if (len > 3 && memcmp(p, "ns:", 3) == 0) {	/* namespace NAME: "NAME/" */
		if (len - 3 + 1 > KVP_MAX_KEY)
			return KVP_EINVAL;
		memcpy(tmp, p + 3, len - 3);
		tmp[len - 3] = '/';
		p = tmp;
		len = len - 3 + 1;
	}
	if (!len || len > KVP_MAX_KEY || *n >= TENANT_PREFIXES_MAX)
		return KVP_EINVAL;
	struct tenant_prefix **nv = realloc(*v, (*n + 1) * sizeof(*nv));
	if (!nv)
		return KVP_ENOMEM;
	*v = nv;
	struct tenant_prefix *x = malloc(sizeof(*x) + len + 1);
	if (!x)
		return KVP_ENOMEM;
	x->len = (uint16_t)len;
	memcpy(x->p, p, len);
	x->p[len] = 0;
	nv[(*n)++] = x;
	return 0;
}

/* "a,b,c" into one right's prefixes. */
static int add_list(struct tenant_prefix ***v, uint32_t *n, bool *all, const char *s,
		    size_t len)
{
	size_t i = 0;

	while (i < len) {
		const char *c = memchr(s + i, ',', len - i);
		size_t e = c ? (size_t)(c - s) : len;
		if (e > i) {
			int rc = add_prefix(v, n, all, s + i, e - i);
			if (rc)
				return rc;
		}
		i = e + 1;
	}
	return 0;
}

static bool field_is(const char *f, size_t n, const char *key, const char **val, size_t *vlen)
{
	size_t k = strlen(key);

	if (n <= k || memcmp(f, key, k) != 0 || f[k] != '=')
		return false;
	*val = f + k + 1;
	*vlen = n - k - 1;
	return true;
}

/* One "NAME field..." line (no newline, not empty, not a comment). */
static int parse_line(struct tenant *x, const char *s, size_t len, bool read_files,
		      char *err, size_t errlen)
{
	size_t i = 0, nf = 0;
	bool have_token = false;

	while (i < len) {
		while (i < len && (s[i] == ' ' || s[i] == '\t'))
			i++;
		if (i == len)
			break;
		size_t st = i;
		while (i < len && s[i] != ' ' && s[i] != '\t')
			i++;
		const char *f = s + st, *v;
		size_t fl = i - st, vl;
		int rc = 0;

		if (++nf > LINE_MAX_FIELDS) {
			log_seterr(err, errlen, "more than %d fields", LINE_MAX_FIELDS);
			return KVP_EINVAL;
		}
		if (nf == 1) {
			if (!name_ok(f, fl)) {
				log_seterr(err, errlen, "tenant name: 1-%d characters of "
					   "[A-Za-z0-9._-]", TENANT_NAME_MAX);
				return KVP_EINVAL;
			}
			memcpy(x->name, f, fl);
			x->name[fl] = 0;
		} else if (fl == 5 && memcmp(f, "admin", 5) == 0) {
			x->admin = x->read_all = x->write_all = x->rdma_trusted = true;
		} else if (field_is(f, fl, "token", &v, &vl)) {
			if (have_token || !vl || vl > TENANT_TOKEN_MAX) {
				log_seterr(err, errlen, "token: one, of 1-%d bytes", TENANT_TOKEN_MAX);
				return KVP_EINVAL;
			}
			memcpy(x->token, v, vl);
			x->token[vl] = 0;
			x->token_len = vl;
			have_token = true;
		} else if (field_is(f, fl, "token_file", &v, &vl)) {
			char path[CONF_STR];
			if (have_token || !read_files || !vl || vl >= sizeof(path)) {
				log_seterr(err, errlen, "token_file: one path of 1-%zu bytes, and no "
					   "token= beside it", sizeof(path) - 1);
				return KVP_EINVAL;
			}
			memcpy(path, v, vl);
			path[vl] = 0;
			rc = read_token_file(x, path, err, errlen);
			if (rc)
				return rc;
			have_token = true;
		} else if (field_is(f, fl, "read", &v, &vl)) {
			rc = add_list(&x->read, &x->nread, &x->read_all, v, vl);
		} else if (field_is(f, fl, "write", &v, &vl)) {
			rc = add_list(&x->write, &x->nwrite, &x->write_all, v, vl);
		} else if (field_is(f, fl, "quota_bytes", &v, &vl)) {
			char num[32];
			if (vl >= sizeof(num)) {
				rc = KVP_EINVAL;
			} else {
				memcpy(num, v, vl);
				num[vl] = 0;
				rc = conf_parse_size(num, &x->quota_bytes) ? KVP_EINVAL : 0;
			}
			if (rc) {
				log_seterr(err, errlen, "quota_bytes: a size (e.g. 10G)");
				return rc;
			}
		} else if (field_is(f, fl, "rdma", &v, &vl)) {
			if (vl == 7 && memcmp(v, "trusted", 7) == 0) {
				x->rdma_trusted = true;
			} else if (vl == 2 && memcmp(v, "no", 2) == 0) {
				x->rdma_trusted = x->admin;
			} else {
				log_seterr(err, errlen, "rdma: trusted or no");
				return KVP_EINVAL;
			}
		} else {
			log_seterr(err, errlen, "unknown field '%.*s' (token, token_file, read, "
				   "write, quota_bytes, rdma, admin)", (int)(fl > 40 ? 40 : fl), f);
			return KVP_EINVAL;
		}
		if (rc) {
			log_seterr(err, errlen, "%.*s: prefixes of 1-%d bytes, at most %d",
				   (int)(fl > 40 ? 40 : fl), f, KVP_MAX_KEY, TENANT_PREFIXES_MAX);
			return rc;
		}
	}
	if (!have_token) {
		log_seterr(err, errlen, "tenant %s: no token= or token_file=", x->name);
		return KVP_EINVAL;
	}
	if (x->write_all)
		x->read_all = true;
	return 0;
}

int tenant_parse(struct tenant_tab *t, const char *buf, size_t len, bool read_files,
		 char *err, size_t errlen)
{
	size_t i = 0, line = 0;
	char msg[256];

	t->v = NULL;
	t->n = 0;
	if (len > TENANT_FILE_MAX) {
		log_seterr(err, errlen, "file larger than %u bytes", TENANT_FILE_MAX);
		return KVP_EINVAL;
	}
	while (i < len) {
		const char *nl = memchr(buf + i, '\n', len - i);
		size_t e = nl ? (size_t)(nl - buf) : len, s = i, l;
		i = e + 1;
		line++;
		while (s < e && (buf[s] == ' ' || buf[s] == '\t'))
			s++;
		l = e - s;
		while (l && (buf[s + l - 1] == '\r' || buf[s + l - 1] == ' ' ||
			     buf[s + l - 1] == '\t'))
			l--;
		if (!l || buf[s] == '#')
			continue;
		if (memchr(buf + s, 0, l)) {
			log_seterr(err, errlen, "line %zu: NUL byte", line);
			goto out_free;
		}
		if (t->n >= TENANT_MAX) {
			log_seterr(err, errlen, "line %zu: more than %d tenants", line, TENANT_MAX);
			goto out_free;
		}
		struct tenant *v = realloc(t->v, (t->n + 1) * sizeof(*v));
		if (!v) {
			log_seterr(err, errlen, "line %zu: out of memory", line);
			goto out_free;
		}
		t->v = v;
		struct tenant *x = &v[t->n++];
		memset(x, 0, sizeof(*x));
		if (parse_line(x, buf + s, l, read_files, msg, sizeof(msg))) {
			log_seterr(err, errlen, "line %zu: %s", line, msg);
			goto out_free;
		}
		for (size_t j = 0; j + 1 < t->n; j++) {
			if (strcmp(t->v[j].name, x->name) == 0 ||
			    (t->v[j].token_len == x->token_len &&
			     memcmp(t->v[j].token, x->token, x->token_len) == 0)) {
				log_seterr(err, errlen, "line %zu: tenant %s: name or token used "
					   "twice", line, x->name);
				goto out_free;
			}
		}
	}
	return 0;

out_free:
	tenant_tab_free(t);
	return KVP_EINVAL;
}

int tenant_load(struct tenant_tab *t, const char *path, char *err, size_t errlen)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY), rc = KVP_EINVAL;
	char msg[512];

	t->v = NULL;
	t->n = 0;
	if (fd < 0) {
		log_seterr(err, errlen, "tenants file %s: %s", path, strerror(errno));
		return KVP_EINVAL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > TENANT_FILE_MAX) {
		log_seterr(err, errlen, "tenants file %s: not a regular file of at most %u bytes",
			   path, TENANT_FILE_MAX);
		goto out_close;
	}
	if (st.st_uid == geteuid() && (st.st_mode & 077)) {
		log_seterr(err, errlen, "tenants file %s: mode %04o lets group or other read the "
			   "tokens; run chmod 600 %s", path, (unsigned)(st.st_mode & 07777), path);
		goto out_close;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		log_seterr(err, errlen, "tenants file %s: out of memory", path);
		goto out_close;
	}
	ssize_t n = read(fd, buf, (size_t)st.st_size);
	if (n < 0) {
		log_seterr(err, errlen, "tenants file %s: %s", path, strerror(errno));
	} else {
		rc = tenant_parse(t, buf, (size_t)n, true, msg, sizeof(msg));
		if (rc)
			log_seterr(err, errlen, "tenants file %s: %s", path, msg);
	}
	explicit_bzero(buf, (size_t)st.st_size);
	free(buf);
out_close:
	close(fd);
	return rc;
}

const struct tenant *tenant_find_token(const struct tenant_tab *t, const uint8_t *tok,
				       size_t n)
{
	const struct tenant *found = NULL;

	/* every entry is compared: the time says nothing about which matched */
	for (size_t i = 0; i < t->n; i++) {
		const struct tenant *x = &t->v[i];
		bool eq = x->token_len == n && CRYPTO_memcmp(x->token, tok, n) == 0;
		if (eq)
			found = x;
	}
	return found;
}

const struct tenant *tenant_find_name(const struct tenant_tab *t, const char *name)
{
	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->v[i].name, name) == 0)
			return &t->v[i];
	return NULL;
}

static bool list_match(struct tenant_prefix *const *v, uint32_t n, const uint8_t *key,
		       size_t klen)
{
	for (uint32_t i = 0; i < n; i++)
		if (klen >= v[i]->len && memcmp(key, v[i]->p, v[i]->len) == 0)
			return true;
	return false;
}

bool tenant_may(const struct tenant *t, const uint8_t *key, size_t klen, enum tenant_right r)
{
	if (!t || t->write_all || (r == TENANT_READ && t->read_all))
		return true;
	if (list_match(t->write, t->nwrite, key, klen))
		return true;
	return r == TENANT_READ && list_match(t->read, t->nread, key, klen);
}

static bool list_overlap(struct tenant_prefix *const *v, uint32_t n, const uint8_t *p,
			 size_t plen)
{
	for (uint32_t i = 0; i < n; i++) {
		size_t m = plen < v[i]->len ? plen : v[i]->len;
		if (memcmp(p, v[i]->p, m) == 0)
			return true;
	}
	return false;
}

bool tenant_may_prefix(const struct tenant *t, const uint8_t *p, size_t n,
		       enum tenant_right r)
{
	if (!t || t->write_all || (r == TENANT_READ && t->read_all))
		return true;
	if (list_overlap(t->write, t->nwrite, p, n))
		return true;
	return r == TENANT_READ && list_overlap(t->read, t->nread, p, n);
}

bool tenant_covers_prefix(const struct tenant *t, const uint8_t *p, size_t n,
			  enum tenant_right r)
{
	return tenant_may(t, p, n, r);	/* a rule prefix of p covers all under p */
}

int tenant_load_cluster(struct tenant_tab *t, const char *path, const char *cluster_token,
			char *err, size_t errlen)
{
	size_t tl = strlen(cluster_token);

	t->v = NULL;
	t->n = 0;
	if (!tl || tl > TENANT_TOKEN_MAX) {
		log_seterr(err, errlen, "[cluster] tenants_file needs token_file (a token of at "
			   "most %d bytes): the cluster token is the admin tenant, and nodes use "
			   "it", TENANT_TOKEN_MAX);
		return KVP_EINVAL;
	}
	if (tenant_load(t, path, err, errlen))
		return KVP_EINVAL;
	if (tenant_find_name(t, TENANT_CLUSTER) ||
	    tenant_find_token(t, (const uint8_t *)cluster_token, tl)) {
		log_seterr(err, errlen, "tenants file %s: the name '" TENANT_CLUSTER "' and the "
			   "cluster token are the admin tenant's", path);
		tenant_tab_free(t);
		return KVP_EINVAL;
	}
	struct tenant *v = realloc(t->v, (t->n + 1) * sizeof(*v));
	if (!v) {
		log_seterr(err, errlen, "out of memory");
		tenant_tab_free(t);
		return KVP_ENOMEM;
	}
	t->v = v;
	struct tenant *c = &v[t->n++];
	memset(c, 0, sizeof(*c));
	strcpy(c->name, TENANT_CLUSTER);
	memcpy(c->token, cluster_token, tl + 1);
	c->token_len = tl;
	c->admin = c->read_all = c->write_all = c->rdma_trusted = true;
	return 0;
}

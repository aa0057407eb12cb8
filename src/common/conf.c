/* conf: loading (see conf.h): defaults, INI files layered in order, the
 * environment (Mooncake's variables, then KVPOOL_*), overrides, the token
 * file; conf_print and the SIGHUP apply. The keys are in conf_table.c, the
 * value parsers in conf_parse.c. inih splits lines; a reader of our own in
 * front of it counts physical lines (for FILE:LINE messages), strips
 * indentation (so inih never treats an indented line as a continuation)
 * and "#" comments, and rejects NUL bytes and lines too long for inih's
 * buffer instead of letting inih cut them. Loading runs on the caller's
 * thread; the result is read-only after.
 */
#include "conf_i.h"
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Puts "PREFIX" in front of the message already in err. */
static void errprefix(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void errprefix(char *err, size_t len, const char *fmt, ...)
{
	char pre[CONF_STR + 64], msg[1024];
	va_list ap;

	if (!err || !len)
		return;
	snprintf(msg, sizeof(msg), "%s", err);
	va_start(ap, fmt);
	vsnprintf(pre, sizeof(pre), fmt, ap);
	va_end(ap);
	snprintf(err, len, "%s%s", pre, msg);
}

int conf_set(struct kvp_conf *c, const char *section, const char *key,
	     const char *value, enum conf_src src, char *err, size_t errlen)
{
	const struct conf_key *k = conf_find(section, key);

	if (!k) {
		log_seterr(err, errlen, "[%s] %s: %s", section, key,
			   conf_section_known(section) ? "unknown key" : "unknown section");
		return KVP_EINVAL;
	}
	if (!value) {
		log_seterr(err, errlen, "[%s] %s: no value", section, key);
		return KVP_EINVAL;
	}
	if (conf_set_key(c, k, value, src, err, errlen)) {
		errprefix(err, errlen, "[%s] %s: ", section, key);
		return KVP_EINVAL;
	}
	return 0;
}

int conf_set_override(struct kvp_conf *c, const char *kv, char *err, size_t errlen)
{
	char section[64], key[64];
	const char *dot = strchr(kv, '.'), *eq = strchr(kv, '=');

	if (!dot || !eq || dot > eq || (size_t)(dot - kv) >= sizeof(section) ||
	    (size_t)(eq - dot - 1) >= sizeof(key)) {
		log_seterr(err, errlen, "override \"%s\": expected section.key=value", kv);
		return KVP_EINVAL;
	}
	snprintf(section, sizeof(section), "%.*s", (int)(dot - kv), kv);
	snprintf(key, sizeof(key), "%.*s", (int)(eq - dot - 1), dot + 1);
	if (conf_set(c, section, key, eq + 1, CONF_SRC_CMDLINE, err, errlen)) {
		errprefix(err, errlen, "override %s: ", kv);
		return KVP_EINVAL;
	}
	return 0;
}

void conf_defaults(struct kvp_conf *c)
{
	char err[256];

	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < conf_table_len; i++) {
		/* a default that does not parse is a bug in the table */
		if (conf_set_key(c, &conf_table[i], conf_table[i].def, CONF_SRC_DEFAULT,
				 err, sizeof(err)))
			fatalx("conf: default of %s.%s: %s", conf_table[i].section,
			       conf_table[i].key, err);
	}
}

/* ---- INI files --------------------------------------------------------- */

struct ini_ctx {
	struct kvp_conf *c;
	FILE *f;
	const char *name;
	char *err;
	size_t errlen;
	int lineno;		/* physical line last handed to inih */
	int kv_line;		/* a "key = value" line the handler has not seen yet */
	int read_errno;		/* getline failed with this, 0 at end of file */
	bool failed;		/* first error recorded; stop reading */
	uint8_t file_idx;	/* this file's slot in c->files */
	char section[64];	/* section of the current line, for messages */
	int seen[sizeof(((struct kvp_conf *)0)->src)];	/* line that set each key */
	char *buf;		/* getline buffer */
	size_t cap;
};

static void ini_fail(struct ini_ctx *x, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void ini_fail(struct ini_ctx *x, int line, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	if (x->failed)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_seterr(x->err, x->errlen, "%s:%d: %s", x->name, line, msg);
	x->failed = true;
}

static void ini_syntax_error(struct ini_ctx *x, int line, const char *why)
{
	ini_fail(x, line, "[%s]: %s", x->section, why);
}

/* The end of a "[section]" the way inih finds it: the first ']' that comes
 * before an inline " ;" comment. */
static char *section_end(char *p)
{
	for (char *q = p + 1; *q; q++) {
		if (*q == ']')
			return q;
		if (*q == ';' && (q[-1] == ' ' || q[-1] == '\t'))
			return NULL;
	}
	return NULL;
}

/* inih's reader: one physical line per call, cleaned up (see top of file). */
static char *ini_read(char *str, int num, void *stream)
{
	struct ini_ctx *x = stream;
	ssize_t n;
	size_t len;
	char *p, *q;

	if (x->failed)
		return NULL;
	if (x->kv_line) {
		/* inih called no handler for it: it could not parse the line */
		ini_syntax_error(x, x->kv_line, "cannot parse line (expected \"key = value\", "
				 "\"[section]\" or a comment)");
		return NULL;
	}
	errno = 0;
	n = getline(&x->buf, &x->cap, x->f);
	if (n < 0) {
		if (ferror(x->f))
			x->read_errno = errno ? errno : EIO;
		return NULL;
	}
	x->lineno++;
	if (memchr(x->buf, '\0', (size_t)n)) {
		ini_syntax_error(x, x->lineno, "NUL byte in line");
		return NULL;
	}
	p = x->buf;
	if (x->lineno == 1 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
		p += 3;		/* UTF-8 byte order mark */
	while (isspace((unsigned char)*p))
		p++;
	/* " # comment" after a value (inih itself only knows " ;") */
	for (q = p; *q; q++) {
		if (*q == '#' && q > p && (q[-1] == ' ' || q[-1] == '\t')) {
			*q = '\0';
			break;
		}
	}
	len = strlen(p);
	while (len && isspace((unsigned char)p[len - 1]))
		p[--len] = '\0';

	if (*p == '[') {
		char *end = section_end(p);

		if (!end) {
			ini_syntax_error(x, x->lineno, "section header without ']'");
			return NULL;
		}
		if (*conf_skip_space(end + 1) && *conf_skip_space(end + 1) != ';') {
			ini_syntax_error(x, x->lineno, "text after ']'");
			return NULL;
		}
		snprintf(x->section, sizeof(x->section), "%.*s", (int)(end - p - 1), p + 1);
		/* here, so that an empty unknown section is caught too */
		if (!conf_section_known(x->section) || (size_t)(end - p - 1) >= sizeof(x->section)) {
			ini_fail(x, x->lineno, "[%s]: unknown section", x->section);
			return NULL;
		}
	} else if (*p && *p != ';' && *p != '#') {
		x->kv_line = x->lineno;
	}
	if (num < 3 || len > (size_t)num - 2) {
		char why[64];

		snprintf(why, sizeof(why), "line too long (at most %d characters)", num - 2);
		ini_syntax_error(x, x->lineno, why);
		return NULL;
	}
	memcpy(str, p, len + 1);
	return str;
}

static int conf_ini_key(void *user, const char *section, const char *name, const char *value)
{
	struct ini_ctx *x = user;
	const struct conf_key *k;
	char unq[CONF_STR + 2], msg[512];
	size_t i, vl;

	x->kv_line = 0;
	if (x->failed)
		return 0;
	if (!*section) {
		ini_fail(x, x->lineno, "[] %s: key outside any [section]", name);
		return 0;
	}
	k = conf_find(section, name);
	if (!k) {
		ini_fail(x, x->lineno, "[%s] %s: %s", section, name,
			 conf_section_known(section) ? "unknown key" : "unknown section");
		return 0;
	}
	i = (size_t)(k - conf_table);
	if (x->seen[i]) {
		ini_fail(x, x->lineno, "[%s] %s: duplicate key (first set on line %d)",
			 section, name, x->seen[i]);
		return 0;
	}
	x->seen[i] = x->lineno;
	/* "..." lets a value be empty or keep surrounding spaces */
	vl = strlen(value);
	if (vl >= 2 && value[0] == '"' && value[vl - 1] == '"' && vl - 2 < sizeof(unq)) {
		memcpy(unq, value + 1, vl - 2);
		unq[vl - 2] = '\0';
		value = unq;
	}
	if (conf_set_key(x->c, k, value, CONF_SRC_FILE, msg, sizeof(msg))) {
		ini_fail(x, x->lineno, "[%s] %s: %s", section, name, msg);
		return 0;
	}
	x->c->file_of[i] = x->file_idx;
	return 1;
}

/* The slot of @name in c->files, appended if new. Past CONF_MAX_FILES the
 * last slot is shared (conf_load_files refuses more files than that). */
static uint8_t file_slot(struct kvp_conf *c, const char *name)
{
	for (uint8_t i = 0; i < c->nfiles; i++)
		if (strcmp(c->files[i], name) == 0)
			return i;
	if (c->nfiles == CONF_MAX_FILES)
		return CONF_MAX_FILES - 1;
	snprintf(c->files[c->nfiles], sizeof(c->files[0]), "%s", name);
	return c->nfiles++;
}

int conf_load_stream(struct kvp_conf *c, FILE *f, const char *name, char *err, size_t errlen)
{
	struct ini_ctx *x;
	int r, ret = KVP_EINVAL;

	x = calloc(1, sizeof(*x));
	if (!x) {
		log_seterr(err, errlen, "%s: %s", name, strerror(ENOMEM));
		return KVP_ENOMEM;
	}
	x->c = c;
	x->f = f;
	x->name = name;
	x->err = err;
	x->errlen = errlen;
	x->file_idx = file_slot(c, name);
	if (!c->file[0])
		snprintf(c->file, sizeof(c->file), "%s", name);

	r = ini_parse_stream(ini_read, x, conf_ini_key, x);
	if (x->failed)
		goto out_free;
	if (x->kv_line) {
		ini_syntax_error(x, x->kv_line, "cannot parse line (expected \"key = value\", "
				 "\"[section]\" or a comment)");
		goto out_free;
	}
	if (x->read_errno) {
		log_seterr(err, errlen, "%s: %s", name, strerror(x->read_errno));
		goto out_free;
	}
	if (r) {
		/* our reader should have caught every error; keep inih's word anyway */
		log_seterr(err, errlen, "%s:%d: cannot parse line", name, r);
		goto out_free;
	}
	ret = 0;
out_free:
	free(x->buf);
	free(x);
	return ret;
}

/* ---- environment ------------------------------------------------------- */

static int env_set(struct kvp_conf *c, const struct conf_key *k, const char *var,
		   char *err, size_t errlen)
{
	const char *v = getenv(var);

	if (!v)
		return 0;
	if (conf_set_key(c, k, v, CONF_SRC_ENV, err, errlen)) {
		errprefix(err, errlen, "env %s: [%s] %s: ", var, k->section, k->key);
		return KVP_EINVAL;
	}
	return 0;
}

/* KVPOOL_* that names no key: an error when its section exists (a typo),
 * else a warning, since other tools may own the variable. */
static int env_check_unknown(char *err, size_t errlen)
{
	char section[64], key[128], canon[256];

	for (char **e = environ; e && *e; e++) {
		const char *v = *e, *eq = strchr(v, '='), *us;
		const struct conf_key *k;
		size_t sl, kl;

		if (strncmp(v, "KVPOOL_", 7) != 0 || !eq)
			continue;
		v += 7;
		us = memchr(v, '_', (size_t)(eq - v));
		sl = us ? (size_t)(us - v) : (size_t)(eq - v);
		kl = us ? (size_t)(eq - us - 1) : 0;
		if (sl >= sizeof(section) || kl >= sizeof(key))
			goto unknown_section;
		for (size_t i = 0; i < sl; i++)
			section[i] = (char)tolower((unsigned char)v[i]);
		section[sl] = '\0';
		for (size_t i = 0; i < kl; i++)
			key[i] = (char)tolower((unsigned char)us[1 + i]);
		key[kl] = '\0';
		if (!conf_section_known(section))
			goto unknown_section;
		k = conf_find(section, key);
		if (k) {
			conf_env_name(k, canon, sizeof(canon));
			if (strncmp(*e, canon, strlen(canon)) == 0 && (*e)[strlen(canon)] == '=')
				continue;
		}
		log_seterr(err, errlen, "env %.*s: [%s] %s: unknown key (variables are "
			   "KVPOOL_<SECTION>_<KEY> in upper case)", (int)(eq - *e), *e, section, key);
		return KVP_EINVAL;
unknown_section:
		log_warn("ignoring environment variable %.*s: kvpool has no such section",
			 (int)(eq - *e), *e);
	}
	return 0;
}

static int conf_load_env(struct kvp_conf *c, bool aliases, char *err, size_t errlen)
{
	char var[256];

	for (size_t i = 0; aliases && i < conf_aliases_len; i++) {
		const struct conf_key *k = conf_find(conf_aliases[i].section, conf_aliases[i].key);

		if (env_set(c, k, conf_aliases[i].var, err, errlen))
			return KVP_EINVAL;
	}
	for (size_t i = 0; i < conf_table_len; i++) {
		conf_env_name(&conf_table[i], var, sizeof(var));
		if (env_set(c, &conf_table[i], var, err, errlen))
			return KVP_EINVAL;
	}
	return env_check_unknown(err, errlen);
}

/* ---- token ------------------------------------------------------------- */

static int conf_load_token(struct kvp_conf *c, char *err, size_t errlen)
{
	const char *path = c->cluster.token_file;
	char buf[1024], *p, *end;
	struct stat st;
	ssize_t n;
	int fd, ret = KVP_EINVAL;

	if (!*path)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		log_seterr(err, errlen, "[cluster] token_file: %s: %s", path, strerror(errno));
		return KVP_EINVAL;
	}
	if (fstat(fd, &st) < 0) {
		log_seterr(err, errlen, "[cluster] token_file: %s: %s", path, strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		log_seterr(err, errlen, "[cluster] token_file: %s: not a regular file", path);
		goto out_close;
	}
	if (st.st_uid == geteuid() && (st.st_mode & 077)) {
		log_seterr(err, errlen, "[cluster] token_file: %s: mode %04o lets group or other read "
			   "the token; run chmod 600 %s", path, (unsigned)(st.st_mode & 07777), path);
		goto out_close;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	if (n < 0) {
		log_seterr(err, errlen, "[cluster] token_file: %s: %s", path, strerror(errno));
		goto out_close;
	}
	buf[n] = '\0';
	end = memchr(buf, '\n', (size_t)n);
	if (!end)
		end = buf + n;
	if (memchr(buf, '\0', (size_t)(end - buf))) {
		log_seterr(err, errlen, "[cluster] token_file: %s: NUL byte in the token", path);
		goto out_wipe;
	}
	*end = '\0';
	for (p = buf; isspace((unsigned char)*p); p++)
		;
	while (end > p && isspace((unsigned char)end[-1]))
		*--end = '\0';
	if (end == p) {
		log_seterr(err, errlen, "[cluster] token_file: %s: the first line is empty", path);
		goto out_wipe;
	}
	if ((size_t)(end - p) >= sizeof(c->cluster.token)) {
		log_seterr(err, errlen, "[cluster] token_file: %s: token longer than %zu bytes", path,
			   sizeof(c->cluster.token) - 1);
		goto out_wipe;
	}
	memcpy(c->cluster.token, p, (size_t)(end - p) + 1);
	ret = 0;
out_wipe:
	explicit_bzero(buf, sizeof(buf));
out_close:
	close(fd);
	return ret;
}

/* ---- conf_load ---------------------------------------------------------- */

/* One file on top of @c; a missing file is an error only if @must_exist. */
static int conf_load_path(struct kvp_conf *c, const char *path, bool must_exist,
			  char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	int r;

	if (!f) {
		if (!must_exist && errno == ENOENT)
			return 0;
		log_seterr(err, errlen, "%s: %s", path, strerror(errno));
		return KVP_EINVAL;
	}
	r = conf_load_stream(c, f, path, err, errlen);
	fclose(f);
	return r;
}

int conf_load(struct kvp_conf *c, const char *path, const char *const *overrides,
	      char *err, size_t errlen)
{
	return conf_load_files(c, path ? &path : NULL, path ? 1 : 0, overrides, err, errlen);
}

static int conf_load_all(struct kvp_conf *c, const char *const *paths, size_t n,
			 const char *const *overrides, bool aliases, char *err, size_t errlen)
{
	int rc;

	conf_defaults(c);
	if (n > CONF_MAX_FILES) {
		log_seterr(err, errlen, "%zu configuration files: at most %d can be layered", n,
			   CONF_MAX_FILES);
		return KVP_EINVAL;
	}
	if (n == 0) {
		rc = conf_load_path(c, CONF_DEFAULT_FILE, false, err, errlen);
		if (rc)
			return rc;
	}
	/* each file has its own duplicate check (conf_load_stream's seen[]),
	 * so a later file may set a key again and wins */
	for (size_t i = 0; i < n; i++) {
		rc = conf_load_path(c, paths[i], true, err, errlen);
		if (rc)
			return rc;
	}
	rc = conf_load_env(c, aliases, err, errlen);
	if (rc)
		return rc;
	for (const char *const *o = overrides; o && *o; o++) {
		rc = conf_set_override(c, *o, err, errlen);
		if (rc)
			return rc;
	}
	return conf_load_token(c, err, errlen);
}

int conf_load_files(struct kvp_conf *c, const char *const *paths, size_t n,
		    const char *const *overrides, char *err, size_t errlen)
{
	return conf_load_all(c, paths, n, overrides, true, err, errlen);
}

int conf_load_no_aliases(struct kvp_conf *c, const char *path, const char *const *overrides,
			 char *err, size_t errlen)
{
	return conf_load_all(c, path ? &path : NULL, path ? 1 : 0, overrides, false, err, errlen);
}

/* ---- output ------------------------------------------------------------ */

/* The variable that set @k: KVPOOL_* if present, else its Mooncake alias. */
static const char *env_source(const struct conf_key *k, char *buf, size_t len)
{
	conf_env_name(k, buf, len);
	if (getenv(buf))
		return buf;
	for (size_t i = 0; i < conf_aliases_len; i++)
		if (conf_alias_of(&conf_aliases[i], k) && getenv(conf_aliases[i].var))
			return conf_aliases[i].var;
	return buf;
}

void conf_print(const struct kvp_conf *c, FILE *out)
{
	char val[CONF_STR + 8], var[128];

	for (size_t i = 0; i < conf_table_len; i++) {
		const struct conf_key *k = &conf_table[i];

		conf_format(c, k, val, sizeof(val));
		fprintf(out, "%s.%s = %s   # ", k->section, k->key, *val ? val : "\"\"");
		switch (c->src[i]) {
		case CONF_SRC_FILE:
			fprintf(out, "file %s\n", c->file_of[i] < c->nfiles ?
				c->files[c->file_of[i]] : c->file);
			break;
		case CONF_SRC_ENV:
			fprintf(out, "env %s\n", env_source(k, var, sizeof(var)));
			break;
		case CONF_SRC_CMDLINE:
			fprintf(out, "cmdline\n");
			break;
		default:
			fprintf(out, "default\n");
			break;
		}
	}
}

/* ---- SIGHUP ------------------------------------------------------------ */

int conf_apply_live(struct kvp_conf *cur, const struct kvp_conf *next)
{
	char a[CONF_STR + 8], b[CONF_STR + 8];
	int restart = 0;

	for (size_t i = 0; i < conf_table_len; i++) {
		const struct conf_key *k = &conf_table[i];
		size_t sz;

		conf_format(cur, k, a, sizeof(a));
		conf_format(next, k, b, sizeof(b));
		if (strcmp(a, b) == 0)
			continue;
		if (!k->live) {
			log_warn("config: %s.%s changed (%s -> %s) but needs a restart",
				 k->section, k->key, a, b);
			restart++;
			continue;
		}
		switch (k->type) {
		case CONF_T_STRING:
		case CONF_T_HOSTPORT:
			sz = CONF_STR;
			break;
		case CONF_T_BOOL:
			sz = sizeof(bool);
			break;
		case CONF_T_RATIO:
			sz = sizeof(double);
			break;
		default:
			sz = sizeof(uint64_t);
			break;
		}
		memcpy((char *)cur + k->off, (const char *)next + k->off, sz);
		cur->src[i] = next->src[i];
		if (next->src[i] == CONF_SRC_FILE && next->file_of[i] < next->nfiles)
			cur->file_of[i] = file_slot(cur, next->files[next->file_of[i]]);
		log_notice("config: %s.%s = %s (was %s)", k->section, k->key, b, a);
	}
	return restart;
}

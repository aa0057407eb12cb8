/* conf_parse: text to value and back for the key types of conf.h: sizes
 * (K M G T), durations (ms s m h), ratios, integers, booleans, host:port,
 * strings with choices; conf_set_key() checks a value against its key's
 * range and stores it. No state of its own: thread-safe on distinct
 * structs.
 */
#include "conf_i.h"
#include "log.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *conf_skip_space(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

/* ---- number parsers ---------------------------------------------------- */

/* Digits, then an optional fraction kept as num/den (up to 18 digits; the
 * rest only floor away). -EINVAL without a digit, -ERANGE on overflow. */
static int parse_decimal(const char **sp, uint64_t *ip, uint64_t *fnum, uint64_t *fden)
{
	const char *s = *sp;
	uint64_t v = 0, n = 0, d = 1;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	for (; isdigit((unsigned char)*s); s++) {
		if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	if (*s == '.') {
		s++;
		if (!isdigit((unsigned char)*s))
			return -EINVAL;
		for (; isdigit((unsigned char)*s); s++) {
			if (d < 1000000000000000000ull) {
				n = n * 10 + (uint64_t)(*s - '0');
				d *= 10;
			}
		}
	}
	*sp = s;
	*ip = v;
	*fnum = n;
	*fden = d;
	return 0;
}

/* ip + fnum/fden, times mult, floored; -ERANGE past 2^64-1. */
static int scale(uint64_t ip, uint64_t fnum, uint64_t fden, uint64_t mult, uint64_t *out)
{
	unsigned __int128 v = (unsigned __int128)ip * mult;

	v += (unsigned __int128)fnum * mult / fden;
	if (v > UINT64_MAX)
		return -ERANGE;
	*out = (uint64_t)v;
	return 0;
}

/* The multiplier of a size suffix at *sp (K M G T, each optionally with B
 * or iB; a bare B is bytes); *sp moves past it. 1 without one. */
static uint64_t size_unit(const char **sp)
{
	const char *s = *sp;
	uint64_t mult = 1;

	switch (tolower((unsigned char)*s)) {
	case 'k': mult = 1ull << 10; s++; break;
	case 'm': mult = 1ull << 20; s++; break;
	case 'g': mult = 1ull << 30; s++; break;
	case 't': mult = 1ull << 40; s++; break;
	}
	if (mult > 1 && tolower((unsigned char)s[0]) == 'i' && tolower((unsigned char)s[1]) == 'b')
		s += 2;
	else if (tolower((unsigned char)*s) == 'b')
		s++;
	*sp = s;
	return mult;
}

/* The multiplier (to ms) of a duration unit at *sp (ms s m h); *sp moves
 * past it. 1 without one: a bare number is milliseconds. */
static uint64_t duration_unit(const char **sp)
{
	const char *s = *sp;

	if (strncasecmp(s, "ms", 2) == 0) {
		*sp = s + 2;
		return 1;
	}
	switch (tolower((unsigned char)*s)) {
	case 's': *sp = s + 1; return 1000;
	case 'm': *sp = s + 1; return 60 * 1000;
	case 'h': *sp = s + 1; return 3600 * 1000;
	}
	return 1;
}

/* A number, then the unit that @unit reads (*suffix points at it, for
 * messages). 0, -EINVAL (not a number, or a fraction of the smallest unit),
 * -EBADMSG (bad unit), -ERANGE (too large). */
static int parse_scaled(const char *s, uint64_t (*unit)(const char **), uint64_t *out,
			const char **suffix)
{
	uint64_t ip, fnum, fden, mult;
	int r;

	s = conf_skip_space(s);
	r = parse_decimal(&s, &ip, &fnum, &fden);
	if (r)
		return r;
	s = conf_skip_space(s);
	*suffix = s;
	mult = unit(&s);
	s = conf_skip_space(s);
	if (*s)
		return -EBADMSG;
	if (mult == 1 && fnum)
		return -EINVAL;		/* a fraction of a byte or millisecond */
	return scale(ip, fnum, fden, mult, out);
}

int conf_parse_size(const char *s, uint64_t *out)
{
	const char *suffix;

	return s && parse_scaled(s, size_unit, out, &suffix) == 0 ? 0 : KVP_EINVAL;
}

int conf_parse_duration(const char *s, uint64_t *out)
{
	const char *suffix;

	return s && parse_scaled(s, duration_unit, out, &suffix) == 0 ? 0 : KVP_EINVAL;
}

static bool host_ok(const char *h)
{
	struct in_addr a4;
	size_t n = strlen(h);

	if (n == 0)
		return true;
	if (n > 253 || h[0] == '-' || h[0] == '.')
		return false;
	if (inet_pton(AF_INET, h, &a4) == 1)
		return true;
	for (const char *p = h; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.' && *p != '_')
			return false;
	return true;
}

int conf_parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port)
{
	struct in6_addr a6;
	char h[256];
	const char *p;
	size_t hl;
	unsigned long v = 0;
	int digits = 0;

	if (!s)
		return KVP_EINVAL;
	if (s[0] == '[') {
		const char *end = strchr(s, ']');

		if (!end || end[1] != ':')
			return KVP_EINVAL;
		hl = (size_t)(end - s - 1);
		if (hl == 0 || hl >= sizeof(h))
			return KVP_EINVAL;
		memcpy(h, s + 1, hl);
		h[hl] = '\0';
		if (inet_pton(AF_INET6, h, &a6) != 1)
			return KVP_EINVAL;
		p = end + 2;
	} else {
		const char *colon = strrchr(s, ':');

		if (!colon)
			return KVP_EINVAL;
		hl = (size_t)(colon - s);
		if (hl >= sizeof(h))
			return KVP_EINVAL;
		memcpy(h, s, hl);
		h[hl] = '\0';
		/* a bare IPv6 address is ambiguous: ask for brackets */
		if (strchr(h, ':') || !host_ok(h))
			return KVP_EINVAL;
		p = colon + 1;
	}
	for (; *p; p++, digits++) {
		if (!isdigit((unsigned char)*p) || digits >= 5)
			return KVP_EINVAL;
		v = v * 10 + (unsigned long)(*p - '0');
	}
	if (digits == 0 || v > 65535)
		return KVP_EINVAL;
	if (host && hostlen) {
		if (hl >= hostlen)
			return KVP_EINVAL;
		memcpy(host, h, hl + 1);
	}
	if (port)
		*port = (uint16_t)v;
	return 0;
}

/* ---- formatting -------------------------------------------------------- */

static void fmt_size(uint64_t v, char *buf, size_t len)
{
	static const char units[] = "TGMK";

	for (int i = 0; i < 4 && v; i++) {
		uint64_t m = 1ull << (10 * (4 - i));

		if (v % m == 0) {
			snprintf(buf, len, "%llu%c", (unsigned long long)(v / m), units[i]);
			return;
		}
	}
	snprintf(buf, len, "%llu", (unsigned long long)v);
}

static void fmt_duration(uint64_t v, char *buf, size_t len)
{
	if (v == 0)
		snprintf(buf, len, "0");
	else if (v % 3600000 == 0)
		snprintf(buf, len, "%lluh", (unsigned long long)(v / 3600000));
	else if (v % 60000 == 0)
		snprintf(buf, len, "%llum", (unsigned long long)(v / 60000));
	else if (v % 1000 == 0)
		snprintf(buf, len, "%llus", (unsigned long long)(v / 1000));
	else
		snprintf(buf, len, "%llums", (unsigned long long)v);
}

/* Shortest text that reads back as the same double. */
static void fmt_ratio(double v, char *buf, size_t len)
{
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, len, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

/* An integer key's value: octal (0644) for modes, else decimal. */
static void fmt_int(const struct conf_key *k, long long n, char *buf, size_t len)
{
	if ((k->flags & CONF_F_OCTAL) && n != 0)
		snprintf(buf, len, "0%llo", (unsigned long long)n);
	else
		snprintf(buf, len, "%lld", n);
}

static void fmt_num(const struct conf_key *k, double v, char *buf, size_t len)
{
	switch (k->type) {
	case CONF_T_SIZE:
		fmt_size((uint64_t)v, buf, len);
		break;
	case CONF_T_DURATION:
		fmt_duration((uint64_t)v, buf, len);
		break;
	case CONF_T_RATIO:
		fmt_ratio(v, buf, len);
		break;
	default:
		fmt_int(k, (long long)v, buf, len);
		break;
	}
}

void conf_fmt_range(const struct conf_key *k, char *buf, size_t len)
{
	char lo[32], hi[32];

	fmt_num(k, k->min, lo, sizeof(lo));
	fmt_num(k, k->max, hi, sizeof(hi));
	snprintf(buf, len, "%s..%s", lo, hi);
}

void conf_format(const struct kvp_conf *c, const struct conf_key *k, char *buf, size_t len)
{
	const char *p = (const char *)c + k->off;

	switch (k->type) {
	case CONF_T_STRING:
	case CONF_T_HOSTPORT:
		snprintf(buf, len, "%s", p);
		break;
	case CONF_T_INT:
		fmt_int(k, *(const int64_t *)(const void *)p, buf, len);
		break;
	case CONF_T_BOOL:
		snprintf(buf, len, "%s", *(const bool *)(const void *)p ? "true" : "false");
		break;
	case CONF_T_SIZE:
		fmt_size(*(const uint64_t *)(const void *)p, buf, len);
		break;
	case CONF_T_DURATION:
		fmt_duration(*(const uint64_t *)(const void *)p, buf, len);
		break;
	case CONF_T_RATIO:
		fmt_ratio(*(const double *)(const void *)p, buf, len);
		break;
	}
}

/* "a, b or c" from "a|b|c", for messages and the example file. */
void conf_fmt_choices(const char *choices, char *buf, size_t len)
{
	const char *p = choices;
	size_t n = 0;

	buf[0] = '\0';
	while (*p && n < len) {
		const char *bar = strchr(p, '|');
		size_t tl = bar ? (size_t)(bar - p) : strlen(p);
		const char *sep = p == choices ? "" : bar ? ", " : " or ";

		n += (size_t)snprintf(buf + n, len - n, "%s%.*s", sep, (int)tl, p);
		p += tl + (bar ? 1 : 0);
	}
}

/* ---- setting one key --------------------------------------------------- */

/* Matches @v against "a|b|N..M"; the canonical spelling goes to @out. */
static bool choice_match(const char *choices, const char *v, char *out, size_t outlen)
{
	const char *p = choices;

	while (*p) {
		const char *bar = strchr(p, '|');
		size_t tl = bar ? (size_t)(bar - p) : strlen(p);
		const char *dots = memmem(p, tl, "..", 2);

		if (dots) {
			long lo = strtol(p, NULL, 10), hi = strtol(dots + 2, NULL, 10);
			char *end = NULL;
			long n;

			errno = 0;
			n = isdigit((unsigned char)v[0]) ? strtol(v, &end, 10) : -1;
			if (n >= 0 && !errno && !*end && n >= lo && n <= hi) {
				snprintf(out, outlen, "%ld", n);
				return true;
			}
		} else if (strlen(v) == tl && strncasecmp(p, v, tl) == 0) {
			snprintf(out, outlen, "%.*s", (int)tl, p);
			return true;
		}
		p += tl + (bar ? 1 : 0);
	}
	return false;
}

static int set_string(struct kvp_conf *c, const struct conf_key *k, const char *v,
		      char *err, size_t errlen)
{
	char *dst = (char *)c + k->off;
	char canon[CONF_STR];

	if (strlen(v) >= CONF_STR) {
		log_seterr(err, errlen, "value too long (at most %d bytes)", CONF_STR - 1);
		return KVP_EINVAL;
	}
	if (k->flags & CONF_F_LOGLEVEL) {
		int lvl = log_level_parse(v);

		if (lvl < 0) {
			char list[128];

			conf_fmt_choices(k->choices, list, sizeof(list));
			log_seterr(err, errlen, "bad log level \"%s\" (expected %s)", v, list);
			return KVP_EINVAL;
		}
		snprintf(dst, CONF_STR, "%s", log_level_name(lvl));
		return 0;
	}
	if (k->choices) {
		if (!choice_match(k->choices, v, canon, sizeof(canon))) {
			char list[128];

			conf_fmt_choices(k->choices, list, sizeof(list));
			log_seterr(err, errlen, "bad value \"%s\" (expected %s)", v, list);
			return KVP_EINVAL;
		}
		v = canon;
	}
	if ((k->flags & CONF_F_FILENAME) &&
	    (strchr(v, '/') || strcmp(v, ".") == 0 || strcmp(v, "..") == 0)) {
		log_seterr(err, errlen, "bad name \"%s\" (a file name: no '/', not . or ..)", v);
		return KVP_EINVAL;
	}
	memmove(dst, v, strlen(v) + 1);
	return 0;
}

static int check_range(const struct conf_key *k, double v, const char *text,
		       char *err, size_t errlen)
{
	char range[80];

	if (v >= k->min && v <= k->max)
		return 0;
	conf_fmt_range(k, range, sizeof(range));
	log_seterr(err, errlen, "\"%s\" is out of range (%s)", text, range);
	return KVP_EINVAL;
}

static int set_int(struct kvp_conf *c, const struct conf_key *k, const char *v,
		   char *err, size_t errlen)
{
	bool octal = k->flags & CONF_F_OCTAL;
	const char *s = conf_skip_space(v);
	long long n;
	char *end;

	if (octal && s[0] == '0' && (s[1] == 'o' || s[1] == 'O'))
		s += 2;
	errno = 0;
	n = strtoll(s, &end, octal ? 8 : 10);
	if (end == s || *conf_skip_space(end) || !(isdigit((unsigned char)*s) || *s == '-')) {
		log_seterr(err, errlen, "bad number \"%s\" (expected %s)", v,
			   octal ? "an octal mode like 0644" : "an integer");
		return KVP_EINVAL;
	}
	if (errno == ERANGE) {
		check_range(k, n < 0 ? -INFINITY : INFINITY, v, err, errlen);
		return KVP_EINVAL;
	}
	if (check_range(k, (double)n, v, err, errlen))
		return KVP_EINVAL;
	*(int64_t *)(void *)((char *)c + k->off) = n;
	return 0;
}

static int set_bool(struct kvp_conf *c, const struct conf_key *k, const char *v,
		    char *err, size_t errlen)
{
	static const char *const yes[] = { "true", "yes", "on", "1" };
	static const char *const no[] = { "false", "no", "off", "0" };
	bool *dst = (bool *)(void *)((char *)c + k->off);

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(v, yes[i]) == 0) {
			*dst = true;
			return 0;
		}
		if (strcasecmp(v, no[i]) == 0) {
			*dst = false;
			return 0;
		}
	}
	log_seterr(err, errlen, "bad boolean \"%s\" (expected true/false, yes/no, on/off or 1/0)", v);
	return KVP_EINVAL;
}

static int set_unsigned(struct kvp_conf *c, const struct conf_key *k, const char *v,
			char *err, size_t errlen)
{
	bool size = k->type == CONF_T_SIZE;
	const char *suffix = "";
	uint64_t n = 0;
	int r;

	r = parse_scaled(v, size ? size_unit : duration_unit, &n, &suffix);
	if (r == -EBADMSG) {
		log_seterr(err, errlen, size ?
			   "bad size suffix \"%s\" in \"%s\" (use K, M, G or T, optionally with B or iB)" :
			   "bad duration unit \"%s\" in \"%s\" (use ms, s, m or h; a bare number is ms)",
			   suffix, v);
		return KVP_EINVAL;
	}
	if (r == -ERANGE) {
		check_range(k, INFINITY, v, err, errlen);
		return KVP_EINVAL;
	}
	if (r) {
		log_seterr(err, errlen, size ?
			   "bad size \"%s\" (expected bytes or a number with K, M, G or T suffix)" :
			   "bad duration \"%s\" (expected a number with ms, s, m or h)", v);
		return KVP_EINVAL;
	}
	if (check_range(k, (double)n, v, err, errlen))
		return KVP_EINVAL;
	if ((k->flags & CONF_F_POW2) && (n & (n - 1))) {
		log_seterr(err, errlen, "\"%s\" is not a power of two", v);
		return KVP_EINVAL;
	}
	*(uint64_t *)(void *)((char *)c + k->off) = n;
	return 0;
}

static int set_ratio(struct kvp_conf *c, const struct conf_key *k, const char *v,
		     char *err, size_t errlen)
{
	const char *s = conf_skip_space(v);
	char *end;
	double d;

	errno = 0;
	d = strtod(s, &end);
	if (end != s && *end == '%') {
		d /= 100;
		end++;
	}
	if (end == s || *conf_skip_space(end) || !isfinite(d) || errno ||
	    !(isdigit((unsigned char)*s) || *s == '.' || *s == '-' || *s == '+')) {
		log_seterr(err, errlen, "bad number \"%s\" (expected a ratio like 0.95, or 95%%)", v);
		return KVP_EINVAL;
	}
	if (check_range(k, d, v, err, errlen))
		return KVP_EINVAL;
	*(double *)(void *)((char *)c + k->off) = d;
	return 0;
}

/* etcd://h:p;h:p (commas too): every entry a host:port with a port, after
 * an optional http:// or https:// (etcd over TLS). */
static int set_etcd_list(char *dst, const char *v, char *err, size_t errlen)
{
	const char *p = v + 7;
	int n = 0;

	if (strlen(v) >= CONF_STR) {
		log_seterr(err, errlen, "etcd endpoint list too long (%zu bytes, at most %d)",
			   strlen(v), CONF_STR - 1);
		return KVP_EINVAL;
	}
	while (*p) {
		char one[CONF_STR];
		size_t l = strcspn(p, ";,");
		uint16_t port;

		memcpy(one, p, l);
		one[l] = '\0';
		const char *hp = one;
		if (!strncmp(hp, "http://", 7))
			hp += 7;
		else if (!strncmp(hp, "https://", 8))
			hp += 8;
		if (l && (conf_parse_hostport(hp, NULL, 0, &port) || port == 0)) {
			log_seterr(err, errlen, "bad etcd endpoint \"%s\" in \"%s\" (expected "
				   "etcd://host:port;host:port)", one, v);
			return KVP_EINVAL;
		}
		n += l != 0;
		p += l;
		if (*p)
			p++;
	}
	if (!n) {
		log_seterr(err, errlen, "\"%s\" names no etcd endpoint (expected etcd://host:port;...)", v);
		return KVP_EINVAL;
	}
	memmove(dst, v, strlen(v) + 1);
	return 0;
}

static int set_hostport(struct kvp_conf *c, const struct conf_key *k, const char *v,
			char *err, size_t errlen)
{
	char *dst = (char *)c + k->off;
	uint16_t port;

	/* "" means "unset" only for keys whose default is unset */
	if (*v == '\0' && *k->def == '\0') {
		dst[0] = '\0';
		return 0;
	}
	if ((k->flags & CONF_F_ETCD) && strncmp(v, "etcd://", 7) == 0)
		return set_etcd_list(dst, v, err, errlen);
	if (strlen(v) >= CONF_STR || conf_parse_hostport(v, NULL, 0, &port)) {
		log_seterr(err, errlen, "bad host:port \"%s\" (expected host:port, [ipv6]:port or :port)", v);
		return KVP_EINVAL;
	}
	if (port < k->min || port > k->max) {
		log_seterr(err, errlen, "port %u is out of range (%.0f..%.0f)", port, k->min, k->max);
		return KVP_EINVAL;
	}
	memmove(dst, v, strlen(v) + 1);
	return 0;
}

/* Parses and stores one value; the message names no location. */
int conf_set_key(struct kvp_conf *c, const struct conf_key *k, const char *v,
		   enum conf_src src, char *err, size_t errlen)
{
	int r = KVP_EINVAL;

	switch (k->type) {
	case CONF_T_STRING:
		r = set_string(c, k, v, err, errlen);
		break;
	case CONF_T_INT:
		r = set_int(c, k, v, err, errlen);
		break;
	case CONF_T_BOOL:
		r = set_bool(c, k, v, err, errlen);
		break;
	case CONF_T_SIZE:
	case CONF_T_DURATION:
		r = set_unsigned(c, k, v, err, errlen);
		break;
	case CONF_T_RATIO:
		r = set_ratio(c, k, v, err, errlen);
		break;
	case CONF_T_HOSTPORT:
		r = set_hostport(c, k, v, err, errlen);
		break;
	}
	if (r == 0)
		c->src[k - conf_table] = (uint8_t)src;
	return r;
}

/* cli_util: exit codes, error lines, JSON escaping and human formats of the
 * kvpool CLI. Stateless; main thread. */
#include "cli_util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvpool.h"

int cli_exit_code(int kvp_err)
{
	if (kvp_err >= 0)
		return CLI_EXIT_OK;
	return kvp_err == KVP_ENOTFOUND ? CLI_EXIT_NOTFOUND : CLI_EXIT_ERR;
}

size_t cli_utf8_len(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len;
	uint32_t cp, min;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2; cp = c & 0x1f; min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3; cp = c & 0x0f; min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4; cp = c & 0x07; min = 0x10000;
	} else {
		return 0;	/* continuation byte, 0xc0/0xc1 overlong lead, 0xf5.. */
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

void cli_json_str(FILE *out, const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;

	putc('"', out);
	for (size_t i = 0; i < n;) {
		unsigned c = s[i];
		size_t u;

		switch (c) {
		case '"': fputs("\\\"", out); i++; continue;
		case '\\': fputs("\\\\", out); i++; continue;
		case '\n': fputs("\\n", out); i++; continue;
		case '\t': fputs("\\t", out); i++; continue;
		case '\r': fputs("\\r", out); i++; continue;
		default: break;
		}
		if (c < 0x20 || c == 0x7f) {
			fprintf(out, "\\u%04x", c);
			i++;
			continue;
		}
		u = cli_utf8_len(s + i, n - i);
		if (u == 0) {
			/* Not UTF-8: the byte as the code point of the same value,
			 * so the output is valid JSON and the byte is visible. */
			fprintf(out, "\\u%04x", c);
			i++;
			continue;
		}
		fwrite(s + i, 1, u, out);
		i += u;
	}
	putc('"', out);
}

void cli_print_key(FILE *out, const char *key)
{
	const unsigned char *s = (const unsigned char *)key;
	size_t n = strlen(key);

	for (size_t i = 0; i < n;) {
		size_t u;

		if (s[i] == '\\') {
			fputs("\\\\", out);
			i++;
			continue;
		}
		if (s[i] < 0x20 || s[i] == 0x7f) {
			fprintf(out, "\\x%02x", s[i]);
			i++;
			continue;
		}
		u = cli_utf8_len(s + i, n - i);
		if (u == 0) {
			fprintf(out, "\\x%02x", s[i]);
			i++;
			continue;
		}
		fwrite(s + i, 1, u, out);
		i += u;
	}
}

/* One message per line, written with one fflush so that lines from
 * concurrent processes sharing a terminal do not interleave mid-line. */
static void cli_vmsg(const char *cmd, const char *key, int err, const char *fmt, va_list ap)
{
	fflush(stdout);
	fputs("kvpool: ", stderr);
	if (cmd)
		fprintf(stderr, "%s: ", cmd);
	if (key) {
		cli_print_key(stderr, key);
		fputs(": ", stderr);
	}
	if (fmt)
		vfprintf(stderr, fmt, ap);
	else
		fputs(kvp_strerror(err), stderr);
	if (err < 0)
		fprintf(stderr, " (%s)", kvp_errname(err));
	putc('\n', stderr);
	fflush(stderr);
}

void cli_error(const char *cmd, const char *key, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cli_vmsg(cmd, key, err, fmt, ap);
	va_end(ap);
}

void cli_errorx(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cli_vmsg(cmd, NULL, 0, fmt, ap);
	va_end(ap);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cli_vmsg(cmd, NULL, 0, fmt, ap);
	va_end(ap);
	if (cmd)
		fprintf(stderr, "Try 'kvpool %s --help'.\n", cmd);
	else
		fputs("Try 'kvpool --help'.\n", stderr);
	return CLI_EXIT_USAGE;
}

const char *cli_human_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes;
	unsigned u = 0;

	if (bytes < 1024) {
		snprintf(buf, len, "%" PRIu64 " B", bytes);
		return buf;
	}
	while (v >= 1024 && u < sizeof(units) / sizeof(units[0]) - 1) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, units[u]);
	return buf;
}

const char *cli_time_str(uint64_t ns, char *buf, size_t len)
{
	time_t t = (time_t)(ns / 1000000000u);
	struct tm tm;

	if (ns == 0 || !localtime_r(&t, &tm) || strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm) == 0)
		snprintf(buf, len, "-");
	return buf;
}

const char *cli_ms_str(int64_t ms, char *buf, size_t len)
{
	int64_t h, m;
	double s;

	if (ms <= 0) {
		snprintf(buf, len, "-");
		return buf;
	}
	h = ms / 3600000;
	m = ms / 60000 % 60;
	s = (double)(ms % 60000) / 1000.0;
	if (h)
		snprintf(buf, len, "%" PRId64 "h%" PRId64 "m%.0fs", h, m, s);
	else if (m)
		snprintf(buf, len, "%" PRId64 "m%.1fs", m, s);
	else
		snprintf(buf, len, "%.3fs", s);
	return buf;
}

int cli_parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}


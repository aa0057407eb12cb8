/* kvfs_name: the key <-> path mapping of the FUSE view. Pure functions; the
 * scheme is documented in docs/fuse.md ("Names") and in kvfs_name.h.
 *
 * Escaping of one component: '%' -> %25, '/' -> %2F (never present in a
 * component, kept so that kvfs_escape round-trips any byte string), NUL is
 * refused; the whole names "" "." ".." ".kvpool" become %00 %2E %2E%2E
 * %2Ekvpool. Every other byte (spaces, newlines, UTF-8, ...) is itself.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "kvfs.h"
#include "kvfs_name.h"

struct special {
	const char *raw;
	size_t rawlen;
	const char *esc;
};

/* Names that a file system cannot show as themselves, or that would hide
 * the control directory. */
static const struct special specials[] = {
	{ "", 0, "%00" },
	{ ".", 1, "%2E" },
	{ "..", 2, "%2E%2E" },
	{ ".kvpool", 7, "%2Ekvpool" },
};
#define NSPECIALS (sizeof(specials) / sizeof(specials[0]))

static const struct special *special_raw(const char *in, size_t n)
{
	for (size_t i = 0; i < NSPECIALS; i++)
		if (specials[i].rawlen == n && memcmp(specials[i].raw, in, n) == 0)
			return &specials[i];
	return NULL;
}

/* Escaped size of one byte: 1 or 3, 0 for NUL. */
static size_t unit_len(unsigned char c)
{
	if (c == 0)
		return 0;
	return (c == '%' || c == '/') ? 3 : 1;
}

/* Byte-level escape of in[0..n) into out (no whole-name rules, no NUL).
 * Returns the bytes written, or (size_t)-1 when cap is too small. */
static size_t esc_bytes(const char *in, size_t n, char *out, size_t cap)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)in[i];

		if (unit_len(c) == 3) {
			if (o + 3 > cap)
				return (size_t)-1;
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		} else {
			if (o + 1 > cap)
				return (size_t)-1;
			out[o++] = (char)c;
		}
	}
	return o;
}

static bool has_nul(const char *in, size_t n)
{
	return memchr(in, 0, n) != NULL;
}

size_t kvfs_escaped_len(const char *comp, size_t n)
{
	const struct special *s = special_raw(comp, n);
	size_t e = 0;

	if (s)
		return strlen(s->esc);
	for (size_t i = 0; i < n; i++) {
		size_t u = unit_len((unsigned char)comp[i]);

		if (!u)
			return 0;
		e += u;
	}
	return e;
}

int kvfs_escape(const char *in, size_t n, char *out, size_t cap)
{
	const struct special *s;
	size_t o;

	if (has_nul(in, n))
		return -EINVAL;
	s = special_raw(in, n);
	if (s) {
		size_t l = strlen(s->esc);

		if (l + 1 > cap)
			return -ENAMETOOLONG;
		memcpy(out, s->esc, l + 1);
		return 0;
	}
	if (cap == 0)
		return -ENAMETOOLONG;
	o = esc_bytes(in, n, out, cap - 1);
	if (o == (size_t)-1)
		return -ENAMETOOLONG;
	out[o] = 0;
	return 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;		/* lower case is not canonical */
}

/* Strict byte-level decode of n bytes: only %25 and %2F are accepted, as
 * esc_bytes writes them. */
static int unesc_bytes(const char *in, size_t n, char *out, size_t cap, size_t *outlen)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		char c = in[i];

		if (c == '%') {
			int hi, lo, v;

			if (i + 2 >= n)
				return -EINVAL;
			hi = hexval(in[i + 1]);
			lo = hexval(in[i + 2]);
			if (hi < 0 || lo < 0)
				return -EINVAL;
			v = hi * 16 + lo;
			if (v != '%' && v != '/')
				return -EINVAL;
			c = (char)v;
			i += 2;
		} else if (c == 0 || c == '/') {
			return -EINVAL;	/* escape writes '/' as %2F */
		}
		if (o >= cap)
			return -ENAMETOOLONG;
		out[o++] = c;
	}
	*outlen = o;
	return 0;
}

int kvfs_unescape(const char *in, char *out, size_t cap, size_t *outlen)
{
	size_t n = strlen(in), o;
	int rc;

	for (size_t i = 0; i < NSPECIALS; i++) {
		if (strcmp(in, specials[i].esc) == 0) {
			if (specials[i].rawlen + 1 > cap)
				return -ENAMETOOLONG;
			memcpy(out, specials[i].raw, specials[i].rawlen);
			out[specials[i].rawlen] = 0;
			*outlen = specials[i].rawlen;
			return 0;
		}
	}
	if (cap == 0)
		return -ENAMETOOLONG;
	rc = unesc_bytes(in, n, out, cap - 1, &o);
	if (rc)
		return rc;
	/* "." written as itself (or "", ".kvpool") is not what escape writes */
	if (special_raw(out, o))
		return -EINVAL;
	out[o] = 0;
	*outlen = o;
	return 0;
}

/* Raw length of the piece that starts the (sub)component in[0..n): n when
 * it fits in one name, else the longest prefix whose escape fits KVFS_FIT. */
static size_t piece_len(const char *in, size_t n, bool *last)
{
	size_t e = kvfs_escaped_len(in, n), k = 0;

	if (e <= KVFS_FIT) {
		*last = true;
		return n;
	}
	*last = false;
	e = 0;
	while (k < n) {
		size_t u = unit_len((unsigned char)in[k]);

		if (e + u > KVFS_FIT)
			break;
		e += u;
		k++;
	}
	return k;
}

int kvfs_piece_at(const char *comp, size_t n, size_t c, size_t *len, bool *last)
{
	size_t pos = 0;

	if (c > n || has_nul(comp, n))
		return -EINVAL;
	for (;;) {
		bool l;
		size_t k = piece_len(comp + pos, n - pos, &l);

		if (pos == c) {
			*len = k;
			*last = l;
			return 0;
		}
		if (l || pos > c)
			return -EINVAL;
		pos += k;
		if (pos > c)
			return -EINVAL;
	}
}

int kvfs_piece_name(const char *comp, size_t n, size_t c, size_t len, bool last,
		    char *out, size_t cap)
{
	size_t o;

	if (c + len > n)
		return -EINVAL;
	if (last)
		return kvfs_escape(comp + c, len, out, cap);
	if (cap < 2 || has_nul(comp + c, len))
		return cap < 2 ? -ENAMETOOLONG : -EINVAL;
	o = esc_bytes(comp + c, len, out, cap - 2);
	if (o == (size_t)-1)
		return -ENAMETOOLONG;
	out[o++] = '%';
	out[o] = 0;
	return 0;
}

bool kvfs_is_alias(const char *name, size_t n)
{
	return n >= 2 && name[n - 1] == '%' && name[n - 2] == '%';
}

bool kvfs_is_piece(const char *name, size_t n)
{
	return n >= 1 && name[n - 1] == '%' && !kvfs_is_alias(name, n);
}

int kvfs_piece_decode(const char *name, char *out, size_t cap, size_t *outlen)
{
	size_t n = strlen(name), o;
	int rc;

	if (!kvfs_is_piece(name, n))
		return -EINVAL;
	/* a greedy piece stops only when the next unit (1 or 3 bytes) would
	 * not fit, so its escaped length is within 2 of KVFS_FIT */
	if (n - 1 > KVFS_FIT || n - 1 + 2 < KVFS_FIT)
		return -EINVAL;
	rc = unesc_bytes(name, n - 1, out, cap, &o);
	if (rc)
		return rc;
	if (memchr(out, '/', o))
		return -EINVAL;
	*outlen = o;
	return 0;
}

int kvfs_key_to_path(const char *key, size_t n, char *out, size_t cap)
{
	size_t o = 0, start = 0;

	if (has_nul(key, n))
		return -EINVAL;
	for (;;) {
		const char *slash = memchr(key + start, '/', n - start);
		size_t end = slash ? (size_t)(slash - key) : n;
		const char *comp = key + start;
		size_t clen = end - start, c = 0;

		for (;;) {
			size_t len;
			bool last;
			int rc;

			rc = kvfs_piece_at(comp, clen, c, &len, &last);
			if (rc)
				return rc;
			if (o >= cap)
				return -ENAMETOOLONG;
			rc = kvfs_piece_name(comp, clen, c, len, last, out + o, cap - o);
			if (rc)
				return rc;
			o += strlen(out + o);
			if (last)
				break;
			if (o + 1 >= cap)
				return -ENAMETOOLONG;
			out[o++] = '/';
			c += len;
		}
		if (!slash)
			break;
		if (o + 1 >= cap)
			return -ENAMETOOLONG;
		out[o++] = '/';
		start = end + 1;
	}
	out[o] = 0;
	return 0;
}

int kvfs_path_to_key(const char *path, char *out, size_t cap, size_t *outlen)
{
	char name[KVFS_NAME_MAX + 1];
	char check[KVFS_PATH_MAX];
	size_t o = 0, pos = 0, plen = strlen(path);
	bool in_piece = false;

	if (plen == 0 || plen >= KVFS_PATH_MAX)
		return plen ? -ENAMETOOLONG : -EINVAL;
	for (;;) {
		const char *slash = strchr(path + pos, '/');
		size_t end = slash ? (size_t)(slash - path) : plen;
		size_t nlen = end - pos, got;
		int rc;

		if (nlen == 0 || nlen > KVFS_NAME_MAX)
			return nlen ? -ENAMETOOLONG : -EINVAL;
		memcpy(name, path + pos, nlen);
		name[nlen] = 0;
		if (kvfs_is_alias(name, nlen))
			return -EINVAL;
		if (o >= cap)
			return -ENAMETOOLONG;
		if (kvfs_is_piece(name, nlen)) {
			rc = kvfs_piece_decode(name, out + o, cap - o, &got);
			in_piece = true;
		} else {
			rc = kvfs_unescape(name, out + o, cap - o, &got);
			in_piece = false;
		}
		if (rc)
			return rc;
		if (memchr(out + o, '/', got))
			return -EINVAL;
		o += got;
		if (!slash)
			break;
		if (!in_piece) {
			if (o >= cap)
				return -ENAMETOOLONG;
			out[o++] = '/';
		}
		pos = end + 1;
	}
	if (in_piece)
		return -EINVAL;	/* ends inside a component: a directory */
	/* only the canonical spelling maps to a key, so that every key has
	 * exactly one path */
	if (kvfs_key_to_path(out, o, check, sizeof(check)) || strcmp(check, path) != 0)
		return -EINVAL;
	if (o < cap)
		out[o] = 0;
	*outlen = o;
	return 0;
}

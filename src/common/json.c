/* json: bounded tokenizer and lookups; see json.h. Recursive descent with
 * the depth bounded by JSON_MAX_DEPTH, so the stack stays small whatever
 * the input. */
#include "json.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>

struct jp {
	const char *s;
	size_t n, i;
	struct json_tok *t;
	uint32_t cap, used;
	int err;
};

static void skip_ws(struct jp *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' ||
			       p->s[p->i] == '\n' || p->s[p->i] == '\r'))
		p->i++;
}

static int new_tok(struct jp *p, uint8_t type)
{
	if (p->used == p->cap) {
		p->err = -E2BIG;
		return -1;
	}
	int k = (int)p->used++;
	p->t[k] = (struct json_tok){ .type = type, .start = (uint32_t)p->i };
	return k;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* p->i at the opening quote. Checks escapes and control characters; the
 * token spans the bytes between the quotes. */
static int parse_string(struct jp *p)
{
	int k = new_tok(p, JSON_STRING);

	if (k < 0)
		return -1;
	p->i++;
	p->t[k].start = (uint32_t)p->i;
	while (p->i < p->n) {
		unsigned char c = (unsigned char)p->s[p->i];

		if (c == '"') {
			p->t[k].end = (uint32_t)p->i;
			p->i++;
			p->t[k].next = p->used;
			return k;
		}
		if (c < 0x20)
			break;
		if (c == '\\') {
			if (++p->i >= p->n)
				break;
			c = (unsigned char)p->s[p->i];
			if (c == 'u') {
				if (p->n - p->i < 5)
					break;
				for (int d = 1; d <= 4; d++)
					if (hexval(p->s[p->i + d]) < 0)
						goto bad;
				p->i += 4;
			} else if (!strchr("\"\\/bfnrt", c) || c == 0) {
				break;
			}
		}
		p->i++;
	}
bad:
	p->err = -EINVAL;
	return -1;
}

static int parse_number(struct jp *p)
{
	int k = new_tok(p, JSON_NUMBER);
	size_t i = p->i;

	if (k < 0)
		return -1;
	if (i < p->n && p->s[i] == '-')
		i++;
	if (i < p->n && p->s[i] == '0') {
		i++;
	} else if (i < p->n && p->s[i] >= '1' && p->s[i] <= '9') {
		while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9')
			i++;
	} else {
		goto bad;
	}
	if (i < p->n && p->s[i] == '.') {
		size_t d = ++i;
		while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9')
			i++;
		if (i == d)
			goto bad;
	}
	if (i < p->n && (p->s[i] == 'e' || p->s[i] == 'E')) {
		i++;
		if (i < p->n && (p->s[i] == '+' || p->s[i] == '-'))
			i++;
		size_t d = i;
		while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9')
			i++;
		if (i == d)
			goto bad;
	}
	p->i = i;
	p->t[k].end = (uint32_t)i;
	p->t[k].next = p->used;
	return k;
bad:
	p->err = -EINVAL;
	return -1;
}

static int parse_word(struct jp *p, const char *w, uint8_t type)
{
	size_t n = strlen(w);

	if (p->n - p->i < n || memcmp(p->s + p->i, w, n) != 0) {
		p->err = -EINVAL;
		return -1;
	}
	int k = new_tok(p, type);
	if (k < 0)
		return -1;
	p->i += n;
	p->t[k].end = (uint32_t)p->i;
	p->t[k].next = p->used;
	return k;
}

static int parse_value(struct jp *p, int depth);

/* Objects and arrays: close is '}' or ']'. */
static int parse_container(struct jp *p, int depth, bool object)
{
	char close = object ? '}' : ']';
	int k = new_tok(p, object ? JSON_OBJECT : JSON_ARRAY);

	if (k < 0)
		return -1;
	if (depth >= JSON_MAX_DEPTH) {
		p->err = -EINVAL;
		return -1;
	}
	p->i++;
	skip_ws(p);
	if (p->i < p->n && p->s[p->i] == close) {
		p->i++;
		goto done;
	}
	for (;;) {
		skip_ws(p);
		if (object) {
			if (p->i >= p->n || p->s[p->i] != '"' || parse_string(p) < 0)
				goto bad;
			skip_ws(p);
			if (p->i >= p->n || p->s[p->i] != ':')
				goto bad;
			p->i++;
			skip_ws(p);
		}
		if (parse_value(p, depth + 1) < 0)
			goto bad;
		p->t[k].count++;
		skip_ws(p);
		if (p->i < p->n && p->s[p->i] == ',') {
			p->i++;
			continue;
		}
		if (p->i < p->n && p->s[p->i] == close) {
			p->i++;
			break;
		}
		goto bad;
	}
done:
	p->t[k].end = (uint32_t)p->i;
	p->t[k].next = p->used;
	return k;
bad:
	if (!p->err)
		p->err = -EINVAL;
	return -1;
}

static int parse_value(struct jp *p, int depth)
{
	if (p->i >= p->n) {
		p->err = -EINVAL;
		return -1;
	}
	switch (p->s[p->i]) {
	case '{':
		return parse_container(p, depth, true);
	case '[':
		return parse_container(p, depth, false);
	case '"':
		return parse_string(p);
	case 't':
		return parse_word(p, "true", JSON_TRUE);
	case 'f':
		return parse_word(p, "false", JSON_FALSE);
	case 'n':
		return parse_word(p, "null", JSON_NULL);
	default:
		return parse_number(p);
	}
}

int json_parse(struct json *j, const char *text, size_t len, struct json_tok *toks, uint32_t cap)
{
	struct jp p = { .s = text, .n = len, .t = toks, .cap = cap };

	memset(j, 0, sizeof(*j));
	if (len >= UINT32_MAX || !cap)
		return -EINVAL;
	skip_ws(&p);
	if (parse_value(&p, 0) < 0)
		return p.err ? p.err : -EINVAL;
	skip_ws(&p);
	if (p.i != p.n)
		return -EINVAL;
	j->text = text;
	j->len = len;
	j->t = toks;
	j->n = p.used;
	return 0;
}

static bool tok_ok(const struct json *j, int tok)
{
	return tok >= 0 && (uint32_t)tok < j->n;
}

bool json_is(const struct json *j, int tok, enum json_type type)
{
	return tok_ok(j, tok) && j->t[tok].type == type;
}

/* Keys are compared raw (escaped keys never match): the gateway's field
 * names are plain ASCII. */
int json_get(const struct json *j, int tok, const char *key)
{
	if (!json_is(j, tok, JSON_OBJECT))
		return -1;
	size_t kl = strlen(key);
	uint32_t k = (uint32_t)tok + 1;
	for (uint32_t m = 0; m < j->t[tok].count; m++) {
		const struct json_tok *kt = &j->t[k];
		uint32_t v = k + 1;

		if (kt->end - kt->start == kl && memcmp(j->text + kt->start, key, kl) == 0)
			return (int)v;
		k = j->t[v].next;
	}
	return -1;
}

int json_at(const struct json *j, int tok, uint32_t i)
{
	if (!json_is(j, tok, JSON_ARRAY) || i >= j->t[tok].count)
		return -1;
	uint32_t e = (uint32_t)tok + 1;
	while (i--)
		e = j->t[e].next;
	return (int)e;
}

int json_path(const struct json *j, int tok, ...)
{
	va_list ap;
	const char *k;

	va_start(ap, tok);
	while (tok >= 0 && (k = va_arg(ap, const char *)) != NULL)
		tok = json_get(j, tok, k);
	va_end(ap);
	return tok;
}

static void put_utf8(char *buf, size_t *o, uint32_t cp)
{
	if (cp < 0x80) {
		buf[(*o)++] = (char)cp;
	} else if (cp < 0x800) {
		buf[(*o)++] = (char)(0xc0 | (cp >> 6));
		buf[(*o)++] = (char)(0x80 | (cp & 0x3f));
	} else if (cp < 0x10000) {
		buf[(*o)++] = (char)(0xe0 | (cp >> 12));
		buf[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
		buf[(*o)++] = (char)(0x80 | (cp & 0x3f));
	} else {
		buf[(*o)++] = (char)(0xf0 | (cp >> 18));
		buf[(*o)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
		buf[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
		buf[(*o)++] = (char)(0x80 | (cp & 0x3f));
	}
}

static uint32_t hex4(const char *s)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v = v << 4 | (uint32_t)hexval(s[i]);
	return v;
}

int json_str(const struct json *j, int tok, char *buf, size_t cap, size_t *len)
{
	if (!json_is(j, tok, JSON_STRING) || !cap)
		return -EINVAL;
	const char *s = j->text + j->t[tok].start;
	size_t n = j->t[tok].end - j->t[tok].start, o = 0;

	/* o + k < cap: room for k more bytes and the NUL */
#define ROOM(k) do { if (o + (k) >= cap) goto full; } while (0)
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (c != '\\') {
			ROOM(1);
			buf[o++] = c;
			continue;
		}
		c = s[++i];	/* the tokenizer checked every escape */
		switch (c) {
		case 'b': c = '\b'; break;
		case 'f': c = '\f'; break;
		case 'n': c = '\n'; break;
		case 'r': c = '\r'; break;
		case 't': c = '\t'; break;
		case 'u': {
			uint32_t cp = hex4(s + i + 1);
			i += 4;
			if (cp >= 0xd800 && cp < 0xdc00) {
				/* a high surrogate needs its low half */
				if (i + 6 >= n || s[i + 1] != '\\' || s[i + 2] != 'u')
					return -EINVAL;
				uint32_t lo = hex4(s + i + 3);
				if (lo < 0xdc00 || lo >= 0xe000)
					return -EINVAL;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				i += 6;
			} else if (cp >= 0xdc00 && cp < 0xe000) {
				return -EINVAL;
			}
			ROOM(cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4);
			put_utf8(buf, &o, cp);
			continue;
		}
		default: break;	/* " \ / stand for themselves */
		}
		ROOM(1);
		buf[o++] = c;
	}
#undef ROOM
	buf[o] = '\0';
	if (len)
		*len = o;
	return 0;
full:
	buf[o] = '\0';
	return -E2BIG;
}

bool json_str_eq(const struct json *j, int tok, const char *s)
{
	char buf[256];
	size_t n;

	return json_str(j, tok, buf, sizeof(buf), &n) == 0 && n == strlen(s) &&
	       memcmp(buf, s, n) == 0;
}

int json_i64(const struct json *j, int tok, int64_t *out)
{
	if (!tok_ok(j, tok))
		return -EINVAL;
	const struct json_tok *t = &j->t[tok];
	if (t->type != JSON_NUMBER && t->type != JSON_STRING)
		return -EINVAL;
	const char *s = j->text + t->start, *e = j->text + t->end;
	bool neg = false;
	uint64_t v = 0;

	if (s < e && *s == '-') {
		neg = true;
		s++;
	}
	if (s == e)
		return -EINVAL;
	for (; s < e; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		unsigned d = (unsigned)(*s - '0');
		if (v > ((uint64_t)INT64_MAX + 1 - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	if (!neg && v > (uint64_t)INT64_MAX)
		return -EINVAL;
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return 0;
}

bool json_bool(const struct json *j, int tok, bool dflt)
{
	if (!tok_ok(j, tok))
		return dflt;
	if (j->t[tok].type == JSON_TRUE)
		return true;
	if (j->t[tok].type == JSON_FALSE)
		return false;
	return dflt;
}

int json_quote(char *out, size_t cap, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

#define PUT(c) do { if (o + 1 >= cap) goto full; out[o++] = (c); } while (0)
	PUT('"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\') {
			PUT('\\');
			PUT((char)c);
		} else if (c < 0x20) {
			PUT('\\');
			PUT('u');
			PUT('0');
			PUT('0');
			PUT(hex[c >> 4]);
			PUT(hex[c & 15]);
		} else {
			PUT((char)c);
		}
	}
	PUT('"');
#undef PUT
	out[o] = '\0';
	return (int)o;
full:
	if (cap)
		out[o < cap ? o : cap - 1] = '\0';
	return -E2BIG;
}

/* trace: loading a JSON-lines request trace and the offline prefix-cache
 * simulations over it; see trace.h. Lines are split here rather than by
 * gzgets(), which cannot tell a NUL byte inside a line from its end: a
 * hostile line must be refused as a whole, never parsed in part.
 */
#include "trace.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "cli_util.h"
#include "json.h"

#define TRACE_MAX_INPUT (1ull << 40)	/* tokens of one request */
#define TRACE_READ_CHUNK (1u << 20)
#define TRACE_NIL UINT32_MAX

/* A trace being loaded. */
struct tb {
	struct trace *t;
	size_t cap_reqs, cap_access;
	const char *name;
	uint32_t line;
	struct json_tok *toks;
	uint32_t ntoks;
	char *err;
	size_t errlen;
};

static int tb_error(struct tb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int tb_error(struct tb *b, const char *fmt, ...)
{
	va_list ap;
	int n = b->line ? snprintf(b->err, b->errlen, "%s:%u: ", b->name, b->line) :
			  snprintf(b->err, b->errlen, "%s: ", b->name);

	if (n >= 0 && (size_t)n < b->errlen) {
		va_start(ap, fmt);
		vsnprintf(b->err + n, b->errlen - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static int tb_grow(void **p, size_t *cap, size_t need, size_t size)
{
	size_t ncap = *cap ? *cap : 256;
	void *np;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	np = realloc(*p, ncap * size);
	if (!np)
		return -ENOMEM;
	*p = np;
	*cap = ncap;
	return 0;
}

/* An integer member: a JSON number without fraction or exponent. */
static int tb_int(struct tb *b, const struct json *j, int tok, const char *what, int64_t min,
		  int64_t max, int64_t *out)
{
	if (!json_is(j, tok, JSON_NUMBER) || json_i64(j, tok, out) < 0)
		return tb_error(b, "%s: not an integer", what);
	if (*out < min || *out > max)
		return tb_error(b, "%s: %lld is out of range %lld..%lld", what, (long long)*out,
				(long long)min, (long long)max);
	return 0;
}

static int tb_number(struct tb *b, const struct json *j, int tok, const char *what, double *out)
{
	char tmp[64], *end;
	size_t n;

	if (!json_is(j, tok, JSON_NUMBER))
		return tb_error(b, "%s: not a number", what);
	n = j->t[tok].end - j->t[tok].start;
	if (n >= sizeof(tmp))
		return tb_error(b, "%s: number too long", what);
	memcpy(tmp, j->text + j->t[tok].start, n);
	tmp[n] = '\0';
	*out = strtod(tmp, &end);
	if (end != tmp + n || !isfinite(*out))
		return tb_error(b, "%s: not a finite number", what);
	return 0;
}

/* One line: a request, or nothing when it is blank. */
static int tb_line(struct tb *b, const char *s, size_t len)
{
	struct trace *t = b->t;
	struct trace_req *r;
	struct json j;
	int64_t input, output = 0, id;
	int top, ts, in, out, ids, rc;
	uint32_t n, k, need;
	size_t i;

	while (len && (s[len - 1] == '\r' || s[len - 1] == ' ' || s[len - 1] == '\t'))
		len--;
	for (i = 0; i < len && (s[i] == ' ' || s[i] == '\t'); i++)
		;
	if (i == len)
		return 0;
	if (len > TRACE_MAX_LINE)
		return tb_error(b, "line longer than %u bytes", TRACE_MAX_LINE);
	/* A token takes at least one byte and a separator. */
	need = (uint32_t)(len / 2 + 8);
	if (need > b->ntoks) {
		struct json_tok *nt = realloc(b->toks, (size_t)need * sizeof(*nt));

		if (!nt)
			return -ENOMEM;
		b->toks = nt;
		b->ntoks = need;
	}
	rc = json_parse(&j, s, len, b->toks, b->ntoks);
	if (rc < 0)
		return tb_error(b, "not a JSON document%s", rc == -E2BIG ? " (too many values)" : "");
	top = 0;
	if (!json_is(&j, top, JSON_OBJECT))
		return tb_error(b, "not a JSON object");
	ts = json_get(&j, top, "timestamp");
	in = json_get(&j, top, "input_length");
	out = json_get(&j, top, "output_length");
	ids = json_get(&j, top, "hash_ids");
	if (ts < 0 || in < 0 || ids < 0)
		return tb_error(b, "missing %s", ts < 0 ? "timestamp" : in < 0 ? "input_length" :
				"hash_ids");
	if (t->nreqs >= UINT32_MAX - 1)
		return tb_error(b, "more than %u requests", UINT32_MAX - 1);
	rc = tb_grow((void **)&t->reqs, &b->cap_reqs, t->nreqs + 1, sizeof(*t->reqs));
	if (rc)
		return rc;
	r = &t->reqs[t->nreqs];
	memset(r, 0, sizeof(*r));
	r->line = b->line;
	if (tb_number(b, &j, ts, "timestamp", &r->ts_ms) < 0 ||
	    tb_int(b, &j, in, "input_length", 0, (int64_t)TRACE_MAX_INPUT, &input) < 0 ||
	    (out >= 0 && tb_int(b, &j, out, "output_length", 0, (int64_t)TRACE_MAX_INPUT,
				&output) < 0))
		return -EINVAL;
	if (!json_is(&j, ids, JSON_ARRAY))
		return tb_error(b, "hash_ids: not an array");
	n = j.t[ids].count;
	if (n > TRACE_MAX_BLOCKS)
		return tb_error(b, "hash_ids: more than %u blocks", TRACE_MAX_BLOCKS);
	/* The blocks must hold the input: all full but the last, which holds
	 * 1 .. tokens_per_block tokens. */
	if ((n == 0 && input != 0) ||
	    (n > 0 && ((uint64_t)input <= (uint64_t)(n - 1) * t->tokens_per_block ||
		       (uint64_t)input > (uint64_t)n * t->tokens_per_block)))
		return tb_error(b, "input_length %lld does not fit %u blocks of %u tokens",
				(long long)input, n, t->tokens_per_block);
	if (t->naccess + n >= UINT32_MAX)
		return tb_error(b, "more than %u blocks in the trace", UINT32_MAX - 1);
	rc = tb_grow((void **)&t->hash, &b->cap_access, t->naccess + n, sizeof(*t->hash));
	if (rc)
		return rc;
	k = (uint32_t)ids + 1;	/* the array's elements follow it, each subtree ends at .next */
	for (uint32_t e = 0; e < n; e++) {
		char what[48];

		snprintf(what, sizeof(what), "hash_ids[%u]", e);
		if (k >= j.n || tb_int(b, &j, (int)k, what, INT64_MIN, INT64_MAX, &id) < 0)
			return k >= j.n ? tb_error(b, "hash_ids: truncated") : -EINVAL;
		t->hash[t->naccess + e] = id;
		k = j.t[k].next;
	}
	r->input_len = (uint64_t)input;
	r->output_len = (uint64_t)output;
	r->first = (uint32_t)t->naccess;
	r->nblocks = n;
	t->naccess += n;
	t->total_tokens += (uint64_t)input;
	if (n > t->max_blocks)
		t->max_blocks = n;
	t->nreqs++;
	return 0;
}

/* Dense ids: an open-addressing table from hash id to the order of first
 * appearance. */
static int tb_finish(struct tb *b)
{
	struct trace *t = b->t;
	size_t cap = 16;
	int64_t *keys;
	uint32_t *vals;

	if (t->nreqs == 0) {
		b->line = 0;
		return tb_error(b, "no requests in the trace");
	}
	while (cap < 2 * t->naccess + 2)
		cap *= 2;
	keys = malloc(cap * sizeof(*keys));
	vals = malloc(cap * sizeof(*vals));
	t->bid = malloc((t->naccess + 1) * sizeof(*t->bid));
	if (!keys || !vals || !t->bid) {
		free(keys);
		free(vals);
		return -ENOMEM;
	}
	for (size_t i = 0; i < cap; i++)
		vals[i] = TRACE_NIL;
	for (size_t a = 0; a < t->naccess; a++) {
		size_t h = (size_t)cli_mix64((uint64_t)t->hash[a]) & (cap - 1);

		while (vals[h] != TRACE_NIL && keys[h] != t->hash[a])
			h = (h + 1) & (cap - 1);
		if (vals[h] == TRACE_NIL) {
			keys[h] = t->hash[a];
			vals[h] = (uint32_t)t->ndistinct++;
		}
		t->bid[a] = vals[h];
	}
	free(keys);
	free(vals);
	return 0;
}

static struct trace *tb_start(struct tb *b, const char *name, uint32_t tokens_per_block,
			      char *err, size_t errlen)
{
	memset(b, 0, sizeof(*b));
	b->name = name;
	b->err = err;
	b->errlen = errlen;
	if (errlen)
		err[0] = '\0';
	if (tokens_per_block == 0) {
		tb_error(b, "tokens per block must be at least 1");
		return NULL;
	}
	b->t = calloc(1, sizeof(*b->t));
	if (!b->t) {
		snprintf(err, errlen, "%s: out of memory", name);
		return NULL;
	}
	b->t->tokens_per_block = tokens_per_block;
	return b->t;
}

/* Ends a load: the trace, or NULL (freed) when rc says it failed. */
static struct trace *tb_end(struct tb *b, int rc)
{
	free(b->toks);
	if (rc == 0)
		rc = tb_finish(b);
	if (rc == 0)
		return b->t;
	if (rc == -ENOMEM)
		snprintf(b->err, b->errlen, "%s: out of memory", b->name);
	trace_free(b->t);
	return NULL;
}

struct trace *trace_load_mem(const char *data, size_t len, const char *name,
			     uint32_t tokens_per_block, char *err, size_t errlen)
{
	struct tb b;
	size_t pos = 0;
	int rc = 0;

	if (!tb_start(&b, name, tokens_per_block, err, errlen))
		return NULL;
	while (pos < len && rc == 0) {
		const char *nl = memchr(data + pos, '\n', len - pos);
		size_t end = nl ? (size_t)(nl - data) : len;

		b.line++;
		rc = tb_line(&b, data + pos, end - pos);
		pos = end + 1;
	}
	return tb_end(&b, rc);
}

struct trace *trace_load(const char *path, uint32_t tokens_per_block, char *err, size_t errlen)
{
	struct tb b;
	gzFile gz;
	char *buf;
	size_t cap = TRACE_READ_CHUNK, start = 0, end = 0;
	bool eof = false;
	int rc = 0, fd;

	if (!tb_start(&b, path, tokens_per_block, err, errlen))
		return NULL;
	fd = strcmp(path, "-") == 0 ? dup(STDIN_FILENO) : -1;
	gz = fd >= 0 ? gzdopen(fd, "rb") : gzopen(path, "rb");
	if (!gz) {
		int e = errno ? errno : ENOMEM;

		if (fd >= 0)
			close(fd);
		tb_error(&b, "%s", strerror(e));
		trace_free(b.t);
		return NULL;
	}
	gzbuffer(gz, 256u << 10);
	buf = malloc(cap);
	if (!buf)
		rc = -ENOMEM;
	/* buf[start, end) holds bytes read but not yet split into lines. */
	while (rc == 0) {
		char *nl = memchr(buf + start, '\n', end - start);
		int n;

		if (nl || (eof && end > start)) {
			size_t stop = nl ? (size_t)(nl - buf) : end;

			b.line++;
			rc = tb_line(&b, buf + start, stop - start);
			start = nl ? stop + 1 : end;
			continue;
		}
		if (eof)
			break;
		if (end - start > TRACE_MAX_LINE) {
			b.line++;
			rc = tb_error(&b, "line longer than %u bytes", TRACE_MAX_LINE);
			break;
		}
		if (start > 0) {
			memmove(buf, buf + start, end - start);
			end -= start;
			start = 0;
		}
		if (cap - end < TRACE_READ_CHUNK / 2) {
			char *nb = realloc(buf, cap * 2);

			if (!nb) {
				rc = -ENOMEM;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		n = gzread(gz, buf + end, (unsigned)(cap - end));
		if (n < 0) {
			int zerr;
			const char *msg = gzerror(gz, &zerr);

			rc = tb_error(&b, "after line %u: %s", b.line,
				      zerr == Z_ERRNO ? strerror(errno) : msg);
			break;
		}
		if (n == 0)
			eof = true;
		end += (size_t)n;
	}
	free(buf);
	if (gzclose(gz) != Z_OK && rc == 0) {
		b.line = 0;
		rc = tb_error(&b, "read error or truncated compressed data");
	}
	return tb_end(&b, rc);
}

void trace_free(struct trace *t)
{
	if (!t)
		return;
	free(t->reqs);
	free(t->hash);
	free(t->bid);
	free(t);
}

/* ---- simulations ------------------------------------------------------- */

static size_t sim_nreqs(const struct trace *t, size_t nreqs)
{
	return nreqs == 0 || nreqs > t->nreqs ? t->nreqs : nreqs;
}

static void sim_done(struct trace_sim *out, uint64_t hit, uint64_t total)
{
	out->hit_tokens = hit;
	out->total_tokens = total;
	out->hit_rate = total ? (double)hit / (double)total : 0.0;
}

/* Tokens of r's leading run of blocks for which cached[] is set. */
static uint64_t sim_lead(const struct trace *t, const struct trace_req *r, const uint8_t *cached)
{
	uint64_t hit = 0;

	for (uint32_t i = 0; i < r->nblocks && cached[t->bid[r->first + i]]; i++)
		hit += trace_block_tokens(t, r, i);
	return hit;
}

int trace_sim_unlimited(const struct trace *t, size_t nreqs, struct trace_sim *out)
{
	uint8_t *seen = calloc(t->ndistinct + 1, 1);
	uint64_t hit = 0, total = 0;

	if (!seen)
		return -ENOMEM;
	nreqs = sim_nreqs(t, nreqs);
	for (size_t q = 0; q < nreqs; q++) {
		const struct trace_req *r = &t->reqs[q];

		hit += sim_lead(t, r, seen);
		total += r->input_len;
		for (uint32_t i = 0; i < r->nblocks; i++)
			seen[t->bid[r->first + i]] = 1;
	}
	free(seen);
	sim_done(out, hit, total);
	return 0;
}

int trace_sim_lru(const struct trace *t, size_t nreqs, uint64_t cap, struct trace_sim *out)
{
	size_t nd = t->ndistinct + 1;
	uint32_t *prev = malloc(nd * sizeof(*prev)), *next = malloc(nd * sizeof(*next));
	uint8_t *in = calloc(nd, 1);
	uint32_t head = TRACE_NIL, tail = TRACE_NIL;	/* most / least recently used */
	uint64_t hit = 0, total = 0, size = 0;

	if (!prev || !next || !in) {
		free(prev);
		free(next);
		free(in);
		return -ENOMEM;
	}
	nreqs = sim_nreqs(t, nreqs);
	for (size_t q = 0; q < nreqs; q++) {
		const struct trace_req *r = &t->reqs[q];

		hit += sim_lead(t, r, in);
		total += r->input_len;
		for (uint32_t i = 0; i < r->nblocks && cap > 0; i++) {
			uint32_t x = t->bid[r->first + i];

			if (in[x]) {
				if (head == x)
					continue;
				/* unlink */
				next[prev[x]] = next[x];
				if (next[x] != TRACE_NIL)
					prev[next[x]] = prev[x];
				else
					tail = prev[x];
			} else {
				in[x] = 1;
				size++;
			}
			prev[x] = TRACE_NIL;
			next[x] = head;
			if (head != TRACE_NIL)
				prev[head] = x;
			head = x;
			if (tail == TRACE_NIL)
				tail = x;
			if (size > cap) {
				uint32_t v = tail;

				tail = prev[v];
				next[tail] = TRACE_NIL;
				in[v] = 0;
				size--;
			}
		}
	}
	free(prev);
	free(next);
	free(in);
	sim_done(out, hit, total);
	return 0;
}

/* The optimum's max-heap of (next use, block); entries go stale when their
 * block is refreshed or evicted and are dropped when they surface. */
struct opt_ent {
	uint32_t next, bid;
};

static bool opt_above(const struct opt_ent *a, const struct opt_ent *b)
{
	return a->next > b->next || (a->next == b->next && a->bid < b->bid);
}

static void opt_push(struct opt_ent *h, size_t *n, struct opt_ent e)
{
	size_t i = (*n)++;

	while (i > 0 && opt_above(&e, &h[(i - 1) / 2])) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = e;
}

static struct opt_ent opt_pop(struct opt_ent *h, size_t *n)
{
	struct opt_ent top = h[0], last = h[--(*n)];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= *n)
			break;
		if (c + 1 < *n && opt_above(&h[c + 1], &h[c]))
			c++;
		if (!opt_above(&h[c], &last))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n > 0)
		h[i] = last;
	return top;
}

int trace_sim_opt(const struct trace *t, size_t nreqs, uint64_t cap, struct trace_sim *out)
{
	size_t nd = t->ndistinct + 1, na, nheap = 0, pos = 0;
	uint32_t *nxt, *last, *cur;
	uint8_t *in;
	struct opt_ent *heap;
	uint64_t hit = 0, total = 0, size = 0;
	int rc = 0;

	nreqs = sim_nreqs(t, nreqs);
	na = nreqs ? t->reqs[nreqs - 1].first + t->reqs[nreqs - 1].nblocks : 0;
	nxt = malloc((na + 1) * sizeof(*nxt));
	last = malloc(nd * sizeof(*last));
	cur = malloc(nd * sizeof(*cur));
	in = calloc(nd, 1);
	heap = malloc((na + 1) * sizeof(*heap));
	if (!nxt || !last || !cur || !in || !heap) {
		rc = -ENOMEM;
		goto out_free;
	}
	/* Next use of every access, in one backward pass. */
	for (size_t i = 0; i < nd; i++)
		last[i] = TRACE_NIL;
	for (size_t a = na; a-- > 0;) {
		nxt[a] = last[t->bid[a]];
		last[t->bid[a]] = (uint32_t)a;
	}
	for (size_t q = 0; q < nreqs; q++) {
		const struct trace_req *r = &t->reqs[q];

		hit += sim_lead(t, r, in);
		total += r->input_len;
		for (uint32_t i = 0; i < r->nblocks; i++, pos++) {
			uint32_t x = t->bid[pos];

			if (!in[x]) {
				in[x] = 1;
				size++;
			}
			cur[x] = nxt[pos];
			opt_push(heap, &nheap, (struct opt_ent){ nxt[pos], x });
			while (size > cap && nheap > 0) {
				struct opt_ent e = opt_pop(heap, &nheap);

				if (in[e.bid] && cur[e.bid] == e.next) {
					in[e.bid] = 0;
					size--;
				}
			}
		}
	}
	sim_done(out, hit, total);

out_free:
	free(nxt);
	free(last);
	free(cur);
	free(in);
	free(heap);
	return rc;
}

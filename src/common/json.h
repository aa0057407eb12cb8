/* json: a small bounded JSON reader for the answers of etcd's v3 JSON
 * gateway (src/common/etcd.c). It tokenizes one document into a caller's
 * token array (jsmn's idea: no allocation, no tree, each token records
 * where its subtree ends), then looks values up by key or index. Input is
 * hostile: strict RFC 8259 syntax, depth and token count bounded, strings
 * unescaped only into caller buffers of a given size. Pure functions; any
 * thread.
 */
#ifndef KVP_JSON_H
#define KVP_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 32

enum json_type {
	JSON_OBJECT = 1,
	JSON_ARRAY,
	JSON_STRING,
	JSON_NUMBER,
	JSON_TRUE,
	JSON_FALSE,
	JSON_NULL,
};

struct json_tok {
	uint8_t type;			/* enum json_type */
	uint32_t start, end;		/* bytes of the value; a string's without quotes */
	uint32_t count;			/* object: members, array: elements */
	uint32_t next;			/* index of the token after this subtree */
};

/* A parsed document: text stays the caller's and must outlive it. */
struct json {
	const char *text;
	size_t len;
	struct json_tok *t;
	uint32_t n;			/* tokens used; t[0] is the top value */
};

/* Parses one document (surrounding whitespace allowed, nothing after it).
 * 0, -EINVAL (not JSON, too deep, over 4 GiB) or -E2BIG (more than cap
 * tokens). An object member takes two tokens (key string, value). */
int json_parse(struct json *j, const char *text, size_t len, struct json_tok *toks, uint32_t cap);

/* The value of member key in object tok, or -1 (tok not an object, no such
 * key). With duplicate keys the first wins. */
int json_get(const struct json *j, int tok, const char *key);
/* Element i of array tok, or -1. */
int json_at(const struct json *j, int tok, uint32_t i);
/* A path of member names from tok ("header", "revision", NULL), or -1. */
int json_path(const struct json *j, int tok, ...);

bool json_is(const struct json *j, int tok, enum json_type type);
/* Unescapes string tok into buf (NUL-terminated; *len without the NUL may
 * be NULL). -EINVAL: not a string or a bad \u escape; -E2BIG: buf too small. */
int json_str(const struct json *j, int tok, char *buf, size_t cap, size_t *len);
/* True if string tok equals s. */
bool json_str_eq(const struct json *j, int tok, const char *s);
/* An integer given as a number or as a decimal string (the gateway writes
 * int64 fields as strings): 0 or -EINVAL (missing, fraction, overflow). */
int json_i64(const struct json *j, int tok, int64_t *out);
/* true/false, or a missing value (tok < 0) as dflt: the gateway omits
 * false booleans. */
bool json_bool(const struct json *j, int tok, bool dflt);

/* Appends s as a JSON string literal (quotes and escapes) to out; returns
 * the bytes written, or -E2BIG when it does not fit (out is then cut). */
int json_quote(char *out, size_t cap, const char *s, size_t n);

#endif

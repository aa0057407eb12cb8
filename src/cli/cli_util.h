/* cli_util: the kvpool CLI's shared output helpers — exit codes, the one
 * error-line format ("kvpool: CMD: KEY: message (KVP_EXXX)"), JSON string
 * escaping of arbitrary key bytes, and human-readable sizes and times.
 * Used by cli_main.c and cli_bench.c on the main thread; stateless except
 * for the program name used in messages.
 */
#ifndef KVP_CLI_UTIL_H
#define KVP_CLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes of the kvpool tool (documented in docs/cli.md). */
enum cli_exit {
	CLI_EXIT_OK = 0,
	CLI_EXIT_ERR = 1,	/* any other error */
	CLI_EXIT_USAGE = 2,	/* bad command line or configuration */
	CLI_EXIT_NOTFOUND = 3,	/* a named key does not exist */
};

/* Exit code for a KVP_E* result: 0, 3 for KVP_ENOTFOUND, else 1. */
int cli_exit_code(int kvp_err);

/* "kvpool: CMD: KEY: message (KVP_EXXX)" on stderr. key may be NULL (then
 * that part is left out); its unprintable bytes are shown as \xNN. A
 * non-NULL fmt replaces kvp_strerror(err) as the message. */
void cli_error(const char *cmd, const char *key, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* "kvpool: CMD: message" on stderr, for errors without a KVP_E* code. */
void cli_errorx(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Usage error: the message, then "Try 'kvpool CMD --help'." Returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Writes s[0..n) as a JSON string literal (with the quotes). Valid UTF-8 is
 * kept; control bytes, DEL and bytes that are not part of valid UTF-8 are
 * written \u00XX, so any key (which may hold any byte but NUL) yields valid
 * JSON. */
void cli_json_str(FILE *out, const char *s, size_t n);
/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid
 * (overlong, surrogate, above U+10FFFF, truncated). */
size_t cli_utf8_len(const unsigned char *s, size_t n);
/* Writes key bytes for a terminal: printable ASCII and valid UTF-8 as is,
 * everything else \xNN (and a backslash as \\). */
void cli_print_key(FILE *out, const char *key);

/* splitmix64's finalizer: a well-mixed 64-bit hash of x (the benchmarks'
 * and the replay's keys and values; tests/bench/trace_mooncake.py has the
 * same in Python). */
static inline uint64_t cli_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* "1.5 GiB" style (binary units, 3 significant digits); buf >= 16 bytes. */
const char *cli_human_size(uint64_t bytes, char *buf, size_t len);
/* "2024-05-01 12:34:56" local time of a CLOCK_REALTIME ns stamp ("-" if 0). */
const char *cli_time_str(uint64_t ns, char *buf, size_t len);
/* Duration in ms as "1h2m3.4s"-style text ("-" if 0). */
const char *cli_ms_str(int64_t ms, char *buf, size_t len);
/* Strict unsigned decimal parse (no sign, no junk); 0 or -1. */
int cli_parse_u64(const char *s, uint64_t *out);

#endif

/* log: one small logging API with syslog levels, used by every binary.
 * Writes to stderr (journald picks it up under systemd); thread-safe: each
 * message is one write(2). Global state: the level and the program name. */
#ifndef KVP_LOG_H
#define KVP_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <syslog.h>

extern int log_level;		/* messages above this level are dropped */

void log_init(const char *ident, int level);
/* "err", "warning", "notice", "info", "debug" (or 3..7) -> level, -1 if bad */
int log_level_parse(const char *s);
const char *log_level_name(int level);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Log at LOG_ERR with ": strerror(errno)" appended, then exit(1). */
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Log at LOG_ERR, then exit(1). */
void fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Prints a message into a caller's error buffer, as the err/errlen
 * arguments of the pool's calls take it: nothing when err is NULL or len
 * is 0; truncated to fit. Logs nothing. */
void log_seterr(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define log_enabled(lvl) ((lvl) <= log_level)
#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_NOTICE, __VA_ARGS__)
#define log_info(...) do { if (log_enabled(LOG_INFO)) log_msg(LOG_INFO, __VA_ARGS__); } while (0)
#define log_debug(...) do { if (log_enabled(LOG_DEBUG)) log_msg(LOG_DEBUG, __VA_ARGS__); } while (0)

#endif

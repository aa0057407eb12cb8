/* log: see log.h. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int log_level = LOG_NOTICE;
static char log_ident[32] = "kvpool";
static bool log_prefix_level;	/* "<N>" prefix that journald understands */

static const char *const level_names[] = {
	"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
};

void log_init(const char *ident, int level)
{
	if (ident)
		snprintf(log_ident, sizeof(log_ident), "%s", ident);
	if (level >= 0)
		log_level = level;
	/* Under systemd stderr goes to the journal, which reads "<N>" as the level. */
	log_prefix_level = getenv("JOURNAL_STREAM") != NULL;
}

int log_level_parse(const char *s)
{
	if (s[0] >= '0' && s[0] <= '7' && s[1] == '\0')
		return s[0] - '0';
	for (int i = 0; i < 8; i++)
		if (strcasecmp(s, level_names[i]) == 0)
			return i;
	if (strcasecmp(s, "error") == 0)
		return LOG_ERR;
	if (strcasecmp(s, "warn") == 0)
		return LOG_WARNING;
	return -1;
}

const char *log_level_name(int level)
{
	return level >= 0 && level < 8 ? level_names[level] : "?";
}

static void log_vmsg(int level, const char *fmt, va_list ap, int err)
{
	char buf[2048];
	size_t n = 0;

	if (log_prefix_level) {
		n = (size_t)snprintf(buf, sizeof(buf), "<%d>%s: ", level, log_ident);
	} else {
		struct timespec ts;
		struct tm tm;

		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		n = strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, ".%03ld %s[%d] %s: ",
				      ts.tv_nsec / 1000000, log_ident, (int)getpid(),
				      log_level_name(level));
	}
	if (n < sizeof(buf)) {
		int r = vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
		if (r > 0)
			n += (size_t)r;
	}
	if (err && n < sizeof(buf))
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, ": %s", strerror(err));
	if (n >= sizeof(buf) - 1)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, buf, n);
	(void)w;
}

void log_msg(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > log_level)
		return;
	int saved = errno;
	va_start(ap, fmt);
	log_vmsg(level, fmt, ap, 0);
	va_end(ap);
	errno = saved;
}

void fatal(const char *fmt, ...)
{
	int err = errno;
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(LOG_ERR, fmt, ap, err);
	va_end(ap);
	exit(1);
}

void fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(LOG_ERR, fmt, ap, 0);
	va_end(ap);
	exit(1);
}

void log_seterr(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

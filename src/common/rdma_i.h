/* rdma_i.h: what rdma.c and rdma_codec.c share; not for other modules.
 * Thread-safe.
 */
#ifndef KVP_RDMA_I_H
#define KVP_RDMA_I_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Formats a message into err (nothing when err is NULL or len 0). */
static inline __attribute__((format(printf, 3, 4)))
void rdma_seterr(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

#endif

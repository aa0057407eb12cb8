/* mbatch: batch body shape checks; see mbatch.h. */
#include "mbatch.h"

#include "kvpool.h"

/* The fewest bytes one item of fmt takes. */
static size_t fmt_min(const char *fmt)
{
	size_t n = 0;

	for (; *fmt; fmt++)
		n += *fmt == 's' ? 2 : *fmt == 'b' ? 4 : (size_t)(*fmt - '0');
	return n;
}

int mbatch_shape(const struct master *m, const struct rbuf *r, const char *fmt, uint32_t *n)
{
	struct rbuf c = *r;
	size_t len;
	uint32_t cnt = rb_count(&c, fmt_min(fmt));

	if (!rb_ok(&c))
		return KVP_EPROTO;
	if (m->conf.cluster.max_batch > 0 && cnt > (uint64_t)m->conf.cluster.max_batch)
		return KVP_ELIMIT;
	for (uint32_t i = 0; i < cnt && rb_ok(&c); i++)
		for (const char *f = fmt; *f; f++) {
			if (*f == 's')
				rb_str(&c, &len);
			else if (*f == 'b')
				rb_blob(&c, &len);
			else
				rb_take(&c, (size_t)(*f - '0'));
		}
	if (!rb_ok(&c))
		return KVP_EPROTO;
	*n = cnt;
	return 0;
}

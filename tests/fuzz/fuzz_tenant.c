/* fuzz_tenant: arbitrary bytes as a tenants file through tenant_parse (the
 * path tenant_load takes, without token_file= reads). Oracles besides the
 * sanitizers: an error is NUL-terminated and starts with "line " or "file";
 * a decoded table's names and tokens are in bounds and NUL-terminated, and
 * the rights checks run over each tenant's own prefixes.
 */
#include "tenant.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tenant_tab t;
	char err[512];

	memset(err, 'x', sizeof(err));
	if (tenant_parse(&t, (const char *)data, size, false, err, sizeof(err))) {
		if (!memchr(err, 0, sizeof(err)) ||
		    (strncmp(err, "line ", 5) != 0 && strncmp(err, "file", 4) != 0))
			abort();
		if (t.n || t.v)
			abort();
		return 0;
	}
	for (size_t i = 0; i < t.n; i++) {
		const struct tenant *x = &t.v[i];
		if (strlen(x->name) > TENANT_NAME_MAX || strlen(x->token) != x->token_len ||
		    !x->token_len || x->token_len > TENANT_TOKEN_MAX)
			abort();
		if (tenant_find_token(&t, (const uint8_t *)x->token, x->token_len) != x)
			abort();
		if (tenant_find_name(&t, x->name) != x)
			abort();
		for (uint32_t j = 0; j < x->nwrite; j++) {
			const struct tenant_prefix *p = x->write[j];
			if (!tenant_may(x, (const uint8_t *)p->p, p->len, TENANT_WRITE) ||
			    !tenant_may(x, (const uint8_t *)p->p, p->len, TENANT_READ) ||
			    !tenant_may_prefix(x, (const uint8_t *)p->p, p->len, TENANT_WRITE))
				abort();
		}
		for (uint32_t j = 0; j < x->nread; j++) {
			const struct tenant_prefix *p = x->read[j];
			if (!tenant_may(x, (const uint8_t *)p->p, p->len, TENANT_READ))
				abort();
		}
	}
	tenant_tab_free(&t);
	return 0;
}

/* cli_ns: `kvpool ns` (see cli_ns.h). */
#include "cli_ns.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli_util.h"
#include "kvpool.h"

void cli_ns_json(const struct kvp_ns_info *v, size_t n)
{
	fputs("[", stdout);
	for (size_t i = 0; i < n; i++) {
		printf("%s\n  {\"name\": ", i ? "," : "");
		cli_json_str(stdout, v[i].name, strlen(v[i].name));
		fputs(", \"model\": ", stdout);
		cli_json_str(stdout, v[i].model, strlen(v[i].model));
		fputs(", \"dtype\": ", stdout);
		cli_json_str(stdout, v[i].dtype, strlen(v[i].dtype));
		printf(", \"page_size\": %" PRIu32 ", \"layout\": ", v[i].page_size);
		cli_json_str(stdout, v[i].layout, strlen(v[i].layout));
		printf(", \"tp\": %" PRIu32 ", \"fingerprint\": \"%016" PRIx64 "\", \"keys\": %"
		       PRIu64 ", \"bytes\": %" PRIu64 ", \"clients\": %" PRIu32 "}", v[i].tp,
		       v[i].fingerprint, v[i].keys, v[i].bytes, v[i].clients);
	}
	fputs(n ? "\n]" : "]", stdout);
}

void cli_ns_table(const struct kvp_ns_info *v, size_t n)
{
	char b[32];

	if (!n) {
		printf("no namespaces\n");
		return;
	}
	printf("%-20s  %-16s  %8s  %10s  %7s  %-32s  %-10s  %5s  %4s\n", "NAMESPACE", "FINGERPRINT",
	       "KEYS", "BYTES", "CLIENTS", "MODEL", "DTYPE", "PAGE", "TP");
	for (size_t i = 0; i < n; i++)
		printf("%-20s  %016" PRIx64 "  %8" PRIu64 "  %10s  %7" PRIu32 "  %-32s  %-10s  %5"
		       PRIu32 "  %4" PRIu32 "  layout=%s\n", v[i].name, v[i].fingerprint, v[i].keys,
		       cli_human_size(v[i].bytes, b, sizeof(b)), v[i].clients, v[i].model,
		       v[i].dtype, v[i].page_size, v[i].tp, v[i].layout);
}

int cli_ns_print(struct kvp *kvp, bool json)
{
	struct kvp_ns_info *v;
	size_t n;
	int err = kvp_namespaces(kvp, &v, &n);

	if (err)
		return err;
	if (json) {
		cli_ns_json(v, n);
		putchar('\n');
	} else {
		cli_ns_table(v, n);
	}
	kvp_free(v);
	return 0;
}

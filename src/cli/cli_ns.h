/* cli_ns: `kvpool ns` — the master's namespaces (kvp_namespaces) with their
 * fingerprint fields and key/byte counts, as a table or JSON. Main thread.
 */
#ifndef KVP_CLI_NS_H
#define KVP_CLI_NS_H

#include <stdbool.h>
#include <stddef.h>

struct kvp;

struct kvp_ns_info;

/* Prints the namespaces: 0 or the KVP_E* of the call. */
int cli_ns_print(struct kvp *kvp, bool json);
/* The namespaces as a JSON array (no newline after it), or as the table
 * (`kvpool info` prints them after its own). */
void cli_ns_json(const struct kvp_ns_info *v, size_t n);
void cli_ns_table(const struct kvp_ns_info *v, size_t n);

#endif

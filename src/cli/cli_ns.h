/* cli_ns: `kvpool ns` — the master's namespaces (kvp_namespaces) with their
 * fingerprint fields and key/byte counts, as a table or JSON. Main thread.
 */
#ifndef KVP_CLI_NS_H
#define KVP_CLI_NS_H

#include <stdbool.h>

struct kvp;

/* Prints the namespaces: 0 or the KVP_E* of the call. */
int cli_ns_print(struct kvp *kvp, bool json);

#endif

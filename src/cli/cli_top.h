/* cli_top: `kvpool top` — the status page's figures (ui/status.html) in the
 * terminal, refreshed every second like top(1), for hosts without a
 * browser: one GET of the master's (or a node's) /api/status per refresh
 * over plain HTTP/1.0, decoded by top_parse, rates from the previous
 * answer. Single-threaded.
 */
#ifndef KVP_CLI_TOP_H
#define KVP_CLI_TOP_H

#include <stddef.h>
#include <stdint.h>

#include "conf.h"

#define TOP_MAX_NODES 64		/* rows shown; more are counted */
#define TOP_MAX_NS 16

struct top_node {
	uint32_t segment_id;
	char name[64];
	char endpoint[128];
	char state[16];			/* "up", "down", "draining" */
	uint64_t capacity, used, objects, spill_capacity, spill_used, seen_ms;
};

struct top_ns {
	char name[129];
	uint64_t keys, bytes, clients;
};

/* One /api/status answer. kind "master" fills the pool's fields, "node"
 * the node's (name, master_state, used, capacity = segment size, extents,
 * read/written bytes). */
struct top_snap {
	char kind[8];
	char role[16], state[24], leader[256], ha_mode[8], epoch[24];
	uint64_t time_ms, node_ttl_ms;
	uint64_t keys, bytes_used, capacity, spill_used, spill_capacity, leases;
	uint64_t connections, pending_puts;
	uint64_t puts, gets, hits, evictions, demotions, promotions;
	uint64_t tcp_read, tcp_written;	/* the nodes' data servers */
	uint64_t path_local, path_tcp, path_rdma, path_disk;	/* the clients' (client_bytes) */
	uint64_t pfx_blocks_asked, pfx_blocks_found, pfx_tokens_asked, pfx_tokens_found;
	size_t nnodes, nnodes_total;
	struct top_node nodes[TOP_MAX_NODES];
	size_t nns, nns_total;
	struct top_ns ns[TOP_MAX_NS];
	/* kind "node" */
	char name[64], master_state[16], master_addr[128];
	uint64_t extents, read_bytes, written_bytes, requests;
};

/* Decodes an HTTP response (status line, headers, JSON body) from
 * untrusted bytes: 0, or -EPROTO (not HTTP 200 / not the document) with a
 * reason in err. */
int top_parse(const char *buf, size_t len, struct top_snap *out, char *err, size_t errlen);

/* argv[0] is "top"; getopt state reset by the caller. Exit code. */
int cli_top_main(const struct kvp_conf *conf, int argc, char **argv);

#endif

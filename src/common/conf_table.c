/* conf_table: the one list of configuration keys (see conf.h): section/key,
 * offset, type, range, default and help of each; the sections, Mooncake's
 * environment aliases and the KVPOOL_<SECTION>_<KEY> names; and
 * conf_write_example(), which generates conf/kvpool.ini from them. A key is
 * added here and nowhere else: the INI handler, the environment, the
 * overrides, conf_print and the example all walk conf_table[]. Constant
 * data; thread-safe.
 */
#include "conf_i.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define OFF(f) offsetof(struct kvp_conf, f)
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define KiB 1024.0
#define MiB (1024.0 * KiB)
#define GiB (1024.0 * MiB)
#define TiB (1024.0 * GiB)
#define SEC 1000.0
#define MIN (60.0 * SEC)
#define HOUR (60.0 * MIN)

#define STR(sec, name, field, dflt, hlp, ...) \
	{ .section = sec, .key = name, .type = CONF_T_STRING, .off = OFF(field), \
	  .def = dflt, .help = hlp, __VA_ARGS__ }
#define NUM(sec, name, t, field, lo, hi, dflt, hlp, ...) \
	{ .section = sec, .key = name, .type = t, .off = OFF(field), .min = lo, \
	  .max = hi, .def = dflt, .help = hlp, __VA_ARGS__ }
#define BOOL(sec, name, field, dflt, hlp, ...) \
	{ .section = sec, .key = name, .type = CONF_T_BOOL, .off = OFF(field), \
	  .min = 0, .max = 1, .def = dflt, .help = hlp, __VA_ARGS__ }
/* min..max of a host:port key is its port range; port 0 = any free port. */
#define HP(sec, name, field, lo, dflt, hlp, ...) \
	{ .section = sec, .key = name, .type = CONF_T_HOSTPORT, .off = OFF(field), \
	  .min = lo, .max = 65535, .def = dflt, .help = hlp, __VA_ARGS__ }

const struct conf_key conf_table[] = {
	/* [cluster] */
	HP("cluster", "master", cluster.master, 1, "127.0.0.1:15001",
	   "Address of kvpool-master's RPC endpoint that nodes, clients and the CLI connect to; "
	   "etcd://h:p;h:p follows whichever master etcd names leader (master.cluster_id).",
	   .flags = CONF_F_ETCD),
	STR("cluster", "metadata_server", cluster.metadata_server, "",
	    "Mooncake metadata server URL (e.g. http://host:15002/metadata), as set by "
	    "MOONCAKE_METADATA_SERVER. Accepted and recorded for compatibility; kvpool keeps "
	    "its metadata in kvpool-master and does not contact it."),
	STR("cluster", "token_file", cluster.token_file, "",
	    "File whose first line is the cluster token that authenticates every RPC and data "
	    "connection. It must not be readable by group or other (chmod 600). Empty: no "
	    "token, and the daemons listen on loopback only."),
	STR("cluster", "tenants_file", cluster.tenants_file, "",
	    "File of tenants: one per line, NAME token=T read=P,.. write=P,.. quota_bytes=N "
	    "rdma=trusted [admin] (docs/config.md \"Tenants\"). Master and nodes read it at "
	    "start and on SIGHUP; the cluster token stays the admin tenant. Needs token_file. "
	    "Empty: the cluster token is the only one."),
	NUM("cluster", "max_object_size", CONF_T_SIZE, cluster.max_object_size, 1, TiB, "1G",
	    "Largest value one object may hold; larger puts fail with KVP_ETOOBIG."),
	NUM("cluster", "max_frame", CONF_T_SIZE, cluster.max_frame, 4 * KiB, 2 * GiB, "64M",
	    "Largest wire frame body (metadata of one request or reply) a process accepts."),
	NUM("cluster", "max_batch", CONF_T_INT, cluster.max_batch, 1, 1048576, "4096",
	    "Most keys in one batch request; clients split larger batches."),
	NUM("cluster", "busy_poll_us", CONF_T_INT, cluster.busy_poll_us, 0, 100000, "50",
	    "Microseconds a process keeps looking for a reply or a request before it sleeps; "
	    "it stops at once when another thread wants the CPU. Where waking a sleeping "
	    "thread is dear (a VM whose idle vCPUs halt), this takes a master round trip "
	    "from 40-90 us to about 10 us. 0: always sleep at once."),
	STR("cluster", "tcp_congestion", cluster.tcp_congestion, "auto",
	    "Congestion control of the pool's TCP connections (masters, nodes, clients). auto: "
	    "a connection on a pacing algorithm (BBR) uses reno instead, which sends a reply "
	    "burst at once where BBR spreads it over its last estimate; system: keep the "
	    "system's (net.ipv4.tcp_congestion_control); reno or cubic: that one (an "
	    "unprivileged process may only pick what net.ipv4.tcp_allowed_congestion_control "
	    "lists; otherwise the system's stays, with a warning).",
	    .choices = "auto|system|reno|cubic"),

	/* [master] */
	HP("master", "listen", master.listen, 0, "0.0.0.0:15001",
	   "Address kvpool-master serves RPC on."),
	HP("master", "http_listen", master.http_listen, 0, "0.0.0.0:15003",
	   "Address of the master's HTTP endpoint: /metrics (Prometheus) and /health."),
	BOOL("master", "metadata_server", master.metadata_server, "false",
	     "Also run Mooncake's HTTP metadata store (GET/PUT/DELETE /metadata?key=) on "
	     "metadata_listen, for engines configured with MOONCAKE_METADATA_SERVER."),
	HP("master", "metadata_listen", master.metadata_listen, 0, "0.0.0.0:15002",
	   "Address of the Mooncake-compatible HTTP metadata store, when metadata_server is true."),
	NUM("master", "lease_ttl", CONF_T_DURATION, master.lease_ttl, 1, HOUR, "5s",
	    "How long a get's read lease protects the replicas it returned from eviction and reuse.",
	    .live = true),
	NUM("master", "put_timeout", CONF_T_DURATION, master.put_timeout, 1, 24 * HOUR, "30s",
	    "A put not finished (PUT_END) within this time is revoked and its extents reclaimed.",
	    .live = true),
	NUM("master", "client_ttl", CONF_T_DURATION, master.client_ttl, 1, 24 * HOUR, "10s",
	    "Mooncake's client liveness TTL (--client_ttl): a node silent for the shorter of "
	    "this and node_ttl is considered gone. Also bounds how long a node waits for a "
	    "master that answers nothing.", .live = true),
	NUM("master", "node_ttl", CONF_T_DURATION, master.node_ttl, 1, 24 * HOUR, "3s",
	    "A node that sent nothing (it heartbeats every node.heartbeat_interval) for this "
	    "long, or whose connection closed that long ago, has its segments dropped with "
	    "every replica in them, so its objects stop being listed instead of failing reads. "
	    "Keep it at least 3 node.heartbeat_interval.", .live = true),
	NUM("master", "soft_pin_ttl", CONF_T_DURATION, master.soft_pin_ttl, 1, 1000 * 24 * HOUR,
	    "30m", "How long a put with the soft-pin option (kvp_put_opts KVP_PUT_SOFT_PIN, "
	    "kvpool put --pin) is kept from eviction when it names no TTL of its own.",
	    .live = true),
	NUM("master", "max_soft_pin_ttl", CONF_T_DURATION, master.max_soft_pin_ttl, 1,
	    1000 * 24 * HOUR, "24h",
	    "Longest soft pin a put may ask for (Mooncake's max_kv_soft_pin_ttl); longer "
	    "ones are cut to this. PIN (kvpool pin, hard pins) is not.",
	    .live = true),
	BOOL("master", "evict_soft_pinned", master.evict_soft_pinned, "false",
	     "Let eviction take soft-pinned objects when nothing unpinned is left to evict "
	     "(Mooncake's allow_evict_soft_pinned_objects). Off: pinned objects stay until "
	     "their pin ends.", .live = true),
	NUM("master", "eviction_high_watermark", CONF_T_RATIO, master.eviction_high_watermark,
	    0, 1, "0.98",
	    "Fraction of a segment's capacity in use above which the master demotes or evicts "
	    "cold objects.", .live = true),
	NUM("master", "eviction_ratio", CONF_T_RATIO, master.eviction_ratio, 0, 1, "0.02",
	    "Fraction of a segment's capacity freed by one eviction pass.", .live = true),
	STR("master", "eviction_policy", master.eviction_policy, "reuse",
	    "What eviction keeps. reuse: the blocks read most, lately, counting reads "
	    "before an eviction (ghosts), the tails of chains first; lru: the blocks read last "
	    "(Mooncake's policy), the tails of chains first.",
	    .choices = "reuse|lru", .live = true),
	NUM("master", "eviction_half_life", CONF_T_INT, master.eviction_half_life, 0,
	    1 << 27, "0",
	    "How fast a read's weight in the reuse priority halves, in block accesses (the "
	    "reads and first puts the pool serves, the policy's clock). 0: the 90th percentile "
	    "of the reuse intervals the pool sees (it adapts to the traffic).", .live = true),
	NUM("master", "eviction_ghosts", CONF_T_INT, master.eviction_ghosts, 0, 1 << 30, "0",
	    "Evicted keys whose reuse priority the master remembers (12 bytes each), so a block "
	    "that comes back resumes its count. 0: twice the objects held, at least 65536."),
	STR("master", "allocation_strategy", master.allocation_strategy, "free_ratio",
	    "How the master picks segments for a new object's replicas: free_ratio prefers "
	    "the emptiest segments, random spreads uniformly.",
	    .choices = "random|free_ratio", .live = true),
	NUM("master", "max_connections", CONF_T_INT, master.max_connections, 1, 1048576, "4096",
	    "Most simultaneous RPC connections the master accepts."),
	STR("master", "ha", master.ha, "none",
	    "High availability: etcd runs any number of masters, one leader elected through "
	    "etcd (ha_endpoints) and the others standing by; none runs this master alone.",
	    .choices = "none|etcd"),
	STR("master", "ha_endpoints", master.ha_endpoints, "",
	    "etcd client endpoints for ha = etcd, host:port;host:port (Mooncake's "
	    "--ha_backend_connstring / --etcd_endpoints)."),
	STR("master", "cluster_id", master.cluster_id, "kvpool",
	    "Names this pool's keys in etcd (kvpool/<cluster_id>/leader); masters, nodes and "
	    "clients of one pool must agree. 1..128 of A-Z a-z 0-9 _ . -"),
	NUM("master", "ha_lease_ttl", CONF_T_DURATION, master.ha_lease_ttl, SEC, 60 * SEC, "2s",
	    "Lease the leader renews in etcd (whole seconds; etcd grants at least 2s by "
	    "default). A leader that cannot renew steps down before it lapses; a dead one is "
	    "replaced after it lapses."),
	BOOL("master", "ha_follow", master.ha_follow, "true",
	     "A standby follows the leader's table (a snapshot, then every change) so that it "
	     "serves at once when it takes over; false: a new leader rebuilds from the nodes' "
	     "reports."),
	STR("master", "table_file", master.table_file, "",
	    "The master keeps its table in this file when ha = none (a snapshot, then every change, "
	    "written once per tick) and a restart loads it warm instead of rebuilding from the "
	    "nodes' reports. Empty: STATE_DIRECTORY/master.table when the master runs under a "
	    "systemd unit with StateDirectory= (the packaged unit: /var/lib/kvpool/master.table), "
	    "else off; none: off. Survives the master's death, not the host's (no fsync)."),
	HP("master", "advertise", master.advertise, 1, "",
	   "host:port of this master's RPC that the leader publishes in etcd. Empty: listen, "
	   "a wildcard host replaced by this host's address towards etcd."),
	STR("master", "kv_events_endpoint", master.kv_events_endpoint, "",
	    "ZMQ endpoint the master binds a PUB socket on to publish KV events (BlockStored, "
	    "BlockRemoved, AllBlocksCleared) in vLLM's format, e.g. tcp://0.0.0.0:5557 "
	    "(Mooncake's --enable_kv_events --kv_events_bind_endpoint). Empty: no events, "
	    "libzmq is not loaded. See docs/master.md, KV events."),
	STR("master", "kv_events_replay_endpoint", master.kv_events_replay_endpoint, "",
	    "ZMQ endpoint of the ROUTER socket where a late subscriber asks for the batches "
	    "from a sequence number on (vLLM's replay_endpoint). Empty: no replay."),
	STR("master", "kv_events_topic", master.kv_events_topic, "",
	    "Topic: the first frame of every published message (vLLM's topic)."),
	STR("master", "kv_events_backend_id", master.kv_events_backend_id, "",
	    "Added to every event as backend_id when not empty (Mooncake's "
	    "--kv_events_backend_id: which cache the events describe)."),
	NUM("master", "kv_events_buffer", CONF_T_INT, master.kv_events_buffer, 0, 1 << 20, "10000",
	    "Published batches kept for the replay socket (vLLM's buffer_steps); at most "
	    "64 MiB of them."),
	NUM("master", "kv_events_queue", CONF_T_INT, master.kv_events_queue, 16, 1 << 24, "65536",
	    "Events waiting for the publisher thread; more are dropped and counted "
	    "(kvpool_master_kv_events_dropped_total) rather than slow the master "
	    "(Mooncake's --kv_events_queue_capacity)."),
	NUM("master", "kv_events_block_size", CONF_T_INT, master.kv_events_block_size, 0, 1 << 30,
	    "0", "The block_size field of BlockStored: tokens per block (the master does not "
	    "know it; 0 = unknown)."),
	BOOL("master", "kv_events_legacy_compat", master.kv_events_legacy_compat, "false",
	     "Encode batches and events in vLLM's older array layout (array_like: [ts, events, "
	     "dp_rank], [\"BlockStored\", hashes, parent, token_ids, block_size, lora_id, "
	     "medium]) that SGLang and older vLLM decode (Mooncake's "
	     "--kv_events_emit_legacy_compat). False: the newest map layout."),
	BOOL("master", "kv_events_object_key", master.kv_events_object_key, "false",
	     "Add the key itself to every event as object_key (Mooncake's "
	     "--kv_events_emit_object_key); map layout only."),

	/* [node] */
	STR("node", "name", node.name, "",
	    "Name of this node in the pool (metrics, listings, default segment name). Empty: "
	    "the host name."),
	HP("node", "listen", node.listen, 0, "0.0.0.0:15010",
	   "Address the node's data server (TCP transfers, RPC from the master) listens on."),
	HP("node", "advertise", node.advertise, 1, "",
	   "host:port that clients and the master use to reach this node. Empty: derived "
	   "from listen and the address the master sees."),
	HP("node", "http_listen", node.http_listen, 0, "0.0.0.0:15011",
	   "Address of the node's HTTP endpoint: /metrics (Prometheus) and /health."),
	STR("node", "segment", node.segment, "",
	    "Name of the segment file in /dev/shm. Empty: kvpool-<name>. A restarted node "
	    "reopens it and re-reports the objects it still holds.",
	    .flags = CONF_F_FILENAME),
	NUM("node", "segment_size", CONF_T_SIZE, node.segment_size, MiB, 16 * TiB, "1G",
	    "Memory this node contributes to the pool (size of the /dev/shm segment)."),
	NUM("node", "align", CONF_T_SIZE, node.align, 64, 2 * MiB, "4K",
	    "Alignment of every extent in the segment; a power of two.", .flags = CONF_F_POW2),
	STR("node", "numa_node", node.numa_node, "none",
	    "NUMA placement of the segment: none, auto (the node of the RDMA device or of "
	    "this process), or a node number to bind to.", .choices = "none|auto|0..1023"),
	BOOL("node", "hugepages", node.hugepages, "false",
	     "Back the segment with huge pages (needs hugetlbfs pages reserved)."),
	BOOL("node", "populate", node.populate, "false",
	     "Fault the whole segment in at start-up instead of on first use (reserves it "
	     "up front too; about 1 s per GiB on a small VM)."),
	STR("node", "reserve", node.reserve, "background",
	    "When the segment's memory is reserved in /dev/shm (fallocate, so that a full "
	    "tmpfs cannot fail writes later): background (after the node serves), upfront "
	    "(before; ~1 s per 4 GiB), or none (pages taken as they are written; puts fail "
	    "once /dev/shm is full).", .choices = "background|upfront|none"),
	BOOL("node", "remove_segment_on_exit", node.remove_segment_on_exit, "false",
	     "Unlink the segment file on a clean exit. Off by default, so that a restarted "
	     "node keeps its cached objects."),
	STR("node", "shm_group", node.shm_group, "",
	    "Group that may map the segment read-write (mode 0660). Empty: mode 0600, only "
	    "this user's processes use the zero-copy local path."),
	NUM("node", "heartbeat_interval", CONF_T_DURATION, node.heartbeat_interval, 10, MIN,
	    "1s", "How often the node reports its liveness and usage to the master."),
	NUM("node", "max_connections", CONF_T_INT, node.max_connections, 1, 1048576, "4096",
	    "Most simultaneous data connections the node accepts."),

	/* [client] */
	STR("client", "protocol", client.protocol, "auto",
	    "Transfer path: auto picks, per replica, local (memcpy through /dev/shm on the "
	    "same host), then rdma, then tcp; the others force one path.",
	    .choices = "auto|local|tcp|rdma"),
	NUM("client", "connections_per_node", CONF_T_INT, client.connections_per_node, 1, 64,
	    "4", "TCP connections a client opens to each node for transfers."),
	NUM("client", "timeout", CONF_T_DURATION, client.timeout, 1, HOUR, "10s",
	    "Time limit of one client operation (a batch counts as one)."),
	NUM("client", "replicas", CONF_T_INT, client.replicas, 1, 8, "1",
	    "Replicas a put creates when the caller does not say, each in a different segment."),
	NUM("client", "local_buffer_size", CONF_T_SIZE, client.local_buffer_size, 0, TiB, "128M",
	    "Staging buffer a client registers for transfers from unregistered memory."),
	STR("client", "host_id", client.host_id, "",
	    "Identity of this host, used to decide that a node is local (same /dev/shm). "
	    "Empty: the kernel's boot id."),
	BOOL("client", "optimistic_reads", client.optimistic_reads, "true",
	     "A get of a key this handle saw recently reads the extent where it was (by memcpy "
	     "on this host, from its node over TCP) and validates it by its header (key, "
	     "generation, checksum) instead of asking the master first; exists of such a key "
	     "on this host checks the header. A freed or reused extent is detected and the "
	     "call asks the master. Another handle's remove or replacement becomes visible once "
	     "the node has dropped the old extent (docs/client.md)."),
	NUM("client", "location_cache", CONF_T_INT, client.location_cache, 0, 1 << 26, "65536",
	    "Keys whose last seen location a handle remembers for optimistic reads (about "
	    "100 bytes plus the key each); 0 turns them off."),
	NUM("client", "location_ttl", CONF_T_DURATION, client.location_ttl, 1, HOUR, "10s",
	    "How long a remembered location is tried: also the longest a value removed or "
	    "replaced by another handle can still be read here when its node cannot be "
	    "reached to drop it."),

	/* [spill] */
	STR("spill", "path", spill.path, "",
	    "Spill file on an SSD where the node demotes cold objects instead of evicting "
	    "them. Empty: no disk tier."),
	NUM("spill", "size", CONF_T_SIZE, spill.size, 0, 1024 * TiB, "0",
	    "Capacity of the spill file. 0: no disk tier."),
	BOOL("spill", "direct_io", spill.direct_io, "true",
	     "Use O_DIRECT for the spill file where the filesystem allows it."),
	NUM("spill", "queue_depth", CONF_T_INT, spill.queue_depth, 1, 4096, "32",
	    "io_uring queue depth of the spill tier."),
	BOOL("spill", "promote_on_hit", spill.promote_on_hit, "false",
	     "Copy an object back to memory when a get hits its disk replica (read by "
	     "kvpool-master; needs a restart)."),

	/* [fuse] */
	STR("fuse", "mountpoint", fuse.mountpoint, "",
	    "Where kvpool-node mounts the FUSE view of the pool. Empty: no FUSE view in the "
	    "node (kvpool mount still works)."),
	BOOL("fuse", "allow_other", fuse.allow_other, "false",
	     "Let other users access the mount (needs user_allow_other in /etc/fuse.conf "
	     "unless root)."),
	BOOL("fuse", "ro", fuse.ro, "false", "Mount read-only: no put or remove through files."),
	NUM("fuse", "attr_timeout", CONF_T_DURATION, fuse.attr_timeout, 0, HOUR, "1s",
	    "How long the kernel caches file attributes.", .live = true),
	NUM("fuse", "entry_timeout", CONF_T_DURATION, fuse.entry_timeout, 0, HOUR, "1s",
	    "How long the kernel caches name lookups.", .live = true),
	NUM("fuse", "mode", CONF_T_INT, fuse.mode, 0, 0777, "0644",
	    "Permission bits of the files (octal, as for chmod).", .flags = CONF_F_OCTAL),
	NUM("fuse", "max_read", CONF_T_SIZE, fuse.max_read, 4 * KiB, 16 * MiB, "1M",
	    "Largest read request negotiated with the kernel."),
	NUM("fuse", "write_behind", CONF_T_SIZE, fuse.write_behind, 0, 16 * MiB, "256K",
	    "A closed file up to this size is put by a background thread, many per master "
	    "round trip: close returns at once, the view serves the value meanwhile, other "
	    "clients see it a moment later; fsync waits for the put. 0: every close waits."),
	STR("fuse", "io_uring", fuse.io_uring, "auto",
	    "FUSE requests over io_uring, served on the caller's CPU (Linux 6.14+, Y in "
	    "/sys/module/fuse/parameters/enable_uring). auto: when the kernel offers it; on: "
	    "the mount fails without it; off: /dev/fuse only.", .choices = "auto|on|off"),

	/* [rdma] */
	BOOL("rdma", "enabled", rdma.enabled, "false",
	     "Use RDMA (ibverbs) for transfers where both ends have a device."),
	STR("rdma", "devices", rdma.devices, "",
	    "Comma-separated RDMA devices to use (e.g. mlx5_0,mlx5_1). Empty: every active port."),
	NUM("rdma", "qps_per_peer", CONF_T_INT, rdma.qps_per_peer, 1, 64, "2",
	    "Queue pairs opened to each peer."),

	/* [log] */
	STR("log", "level", log.level, "notice",
	    "Messages up to this syslog level are logged (to stderr, or journald under systemd).",
	    .choices = "err|warning|notice|info|debug", .flags = CONF_F_LOGLEVEL, .live = true),

	/* [tls] */
	BOOL("tls", "enabled", tls.enabled, "false",
	     "TLS 1.3 on the pool's TCP connections (master RPC, node data port, the nodes' and "
	     "standbys' links to the master; the HTTP ports with http = true); a TLS cluster refuses plain "
	     "connections. Every process of the cluster sets it alike."),
	STR("tls", "cert", tls.cert, "",
	    "PEM certificate (chain) this process presents; servers need one, clients when "
	    "verify_peer is on."),
	STR("tls", "key", tls.key, "", "PEM private key of cert."),
	STR("tls", "ca", tls.ca, "",
	    "PEM CA bundle peers are verified against. Empty: the system's default CAs."),
	BOOL("tls", "verify_peer", tls.verify_peer, "false",
	     "Mutual TLS: servers require a client certificate signed by ca."),
	STR("tls", "ktls", tls.ktls, "auto",
	    "Kernel TLS (the tls module) for the record layer when the kernel has it; off: "
	    "always OpenSSL in user space.", .choices = "auto|off"),
	BOOL("tls", "http", tls.http, "false",
	     "HTTPS on the master's and nodes' HTTP listeners (metrics, health, metadata store, "
	     "status page, admin) with cert and key (enabled or not); plain HTTP is then refused. "
	     "verify_peer does not apply to HTTP: its clients are checked by Bearer tokens."),
};
const size_t conf_table_len = sizeof(conf_table) / sizeof(conf_table[0]);

_Static_assert(sizeof(conf_table) / sizeof(conf_table[0]) <=
	       sizeof(((struct kvp_conf *)0)->src), "struct kvp_conf.src is too small");
_Static_assert(sizeof(conf_table) / sizeof(conf_table[0]) <=
	       sizeof(((struct kvp_conf *)0)->file_of), "struct kvp_conf.file_of is too small");

const struct conf_section conf_sections[] = {
	{ "cluster", "Shared by every process: where the master is, the token, limits." },
	{ "master", "kvpool-master: metadata, allocation, leases, eviction." },
	{ "node", "kvpool-node: the memory this host contributes." },
	{ "client", "libkvpool, the Python module and the kvpool CLI." },
	{ "spill", "kvpool-node's disk tier (io_uring)." },
	{ "fuse", "The FUSE view (in kvpool-node, or kvpool mount)." },
	{ "rdma", "RDMA transport (ibverbs)." },
	{ "log", "Logging of every process." },
	{ "tls", "TLS of the TCP connections (OpenSSL; docs/config.md)." },
};
const size_t conf_sections_len = NELEM(conf_sections);

/* Mooncake's environment variables, read before KVPOOL_* so those win. */
const struct conf_alias conf_aliases[] = {
	{ "MOONCAKE_MASTER_SERVER_ADDR", "cluster", "master" },
	{ "MOONCAKE_METADATA_SERVER", "cluster", "metadata_server" },
	{ "MOONCAKE_GLOBAL_SEGMENT_SIZE", "node", "segment_size" },
	{ "MOONCAKE_LOCAL_BUFFER_SIZE", "client", "local_buffer_size" },
	{ "MOONCAKE_PROTOCOL", "client", "protocol" },
	{ "MOONCAKE_RDMA_DEVICES", "rdma", "devices" },
	{ "MC_STORE_CLUSTER_ID", "master", "cluster_id" },
};
const size_t conf_aliases_len = NELEM(conf_aliases);

bool conf_alias_of(const struct conf_alias *a, const struct conf_key *k)
{
	return strcmp(a->section, k->section) == 0 && strcmp(a->key, k->key) == 0;
}

bool conf_section_known(const char *section)
{
	for (size_t i = 0; i < conf_sections_len; i++)
		if (strcmp(conf_sections[i].name, section) == 0)
			return true;
	return false;
}

const struct conf_key *conf_find(const char *section, const char *key)
{
	for (size_t i = 0; i < conf_table_len; i++)
		if (strcmp(conf_table[i].section, section) == 0 &&
		    strcmp(conf_table[i].key, key) == 0)
			return &conf_table[i];
	return NULL;
}

void conf_env_name(const struct conf_key *k, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "KVPOOL_%s_%s", k->section, k->key);

	for (size_t i = 0; i < n && i < len; i++)
		buf[i] = (char)toupper((unsigned char)buf[i]);
}

/* ---- the example INI ---------------------------------------------------- */

/* Word-wraps @text into "# " comment lines of at most 78 columns. */
static void write_comment(FILE *out, const char *text)
{
	const char *p = text;

	while (*p) {
		size_t n = strlen(p), cut = n;

		if (n > 76) {
			cut = 76;
			while (cut > 0 && p[cut] != ' ')
				cut--;
			if (cut == 0)
				cut = strcspn(p, " ");
		}
		fprintf(out, "# %.*s\n", (int)cut, p);
		p += cut;
		while (*p == ' ')
			p++;
	}
}

static void describe_type(const struct conf_key *k, char *buf, size_t len)
{
	char range[80], list[128];

	conf_fmt_range(k, range, sizeof(range));
	switch (k->type) {
	case CONF_T_STRING:
		if (k->choices) {
			conf_fmt_choices(k->choices, list, sizeof(list));
			snprintf(buf, len, "one of %s", list);
		} else {
			snprintf(buf, len, "string");
		}
		break;
	case CONF_T_INT:
		snprintf(buf, len, "%s, %s", k->flags & CONF_F_OCTAL ? "octal" : "integer", range);
		break;
	case CONF_T_BOOL:
		snprintf(buf, len, "boolean");
		break;
	case CONF_T_SIZE:
		snprintf(buf, len, "size, %s%s", range,
			 k->flags & CONF_F_POW2 ? ", a power of two" : "");
		break;
	case CONF_T_DURATION:
		snprintf(buf, len, "duration, %s", range);
		break;
	case CONF_T_RATIO:
		snprintf(buf, len, "ratio, %s", range);
		break;
	case CONF_T_HOSTPORT:
		snprintf(buf, len, "host:port, port %.0f..65535%s%s", k->min,
			 k->min == 0 ? " (0: any free port)" : "",
			 *k->def ? "" : ", empty = unset");
		break;
	}
}

void conf_write_example(FILE *out)
{
	char type[256], var[128], line[512];

	fputs("# kvpool.ini - configuration of kvpool-master, kvpool-node, the kvpool CLI\n"
	      "# and libkvpool. Every key is listed with its help, type and default; the\n"
	      "# defaults are commented out, so this file changes nothing until a line is\n"
	      "# uncommented.\n"
	      "#\n"
	      "# Order (later wins): built-in defaults, this file (-c FILE, else\n"
	      "# " CONF_DEFAULT_FILE " if it exists), the environment\n"
	      "# (MOONCAKE_* aliases, then KVPOOL_<SECTION>_<KEY>), then command-line\n"
	      "# overrides (section.key=value).\n"
	      "#\n"
	      "# Sizes: bytes, or K M G T (powers of 1024, optional B or iB), e.g. 64K, 1G.\n"
	      "# Durations: ms s m h; a bare number is milliseconds, e.g. 500ms, 5s, 2m.\n"
	      "# Ratios: 0..1 or a percentage (95%). Booleans: true/false yes/no on/off 1/0.\n"
	      "# Strings may be quoted (\"\") to be empty or keep surrounding spaces.\n"
	      "# Comments: lines starting with # or ;, and \" # ...\" or \" ; ...\" after\n"
	      "# a value.\n"
	      "# Keys marked \"live\" are re-read on SIGHUP; the others need a restart.\n"
	      "#\n"
	      "# Generated by conf_write_example() from the table in src/common/conf_table.c:\n"
	      "#   build/tests/t_conf --write-example > conf/kvpool.ini\n", out);
	for (size_t s = 0; s < conf_sections_len; s++) {
		fprintf(out, "\n[%s]\n", conf_sections[s].name);
		write_comment(out, conf_sections[s].help);
		for (size_t i = 0; i < conf_table_len; i++) {
			const struct conf_key *k = &conf_table[i];

			if (strcmp(k->section, conf_sections[s].name) != 0)
				continue;
			describe_type(k, type, sizeof(type));
			conf_env_name(k, var, sizeof(var));
			fputs("\n", out);
			write_comment(out, k->help);
			snprintf(line, sizeof(line), "%s%s. Env %s", type,
				 k->live ? "; live" : "", var);
			for (size_t a = 0; a < conf_aliases_len; a++)
				if (conf_alias_of(&conf_aliases[a], k))
					snprintf(line + strlen(line), sizeof(line) - strlen(line),
						 " or %s", conf_aliases[a].var);
			strncat(line, ".", sizeof(line) - strlen(line) - 1);
			write_comment(out, line);
			fprintf(out, "# %s = %s\n", k->key, *k->def ? k->def : "\"\"");
		}
	}
}

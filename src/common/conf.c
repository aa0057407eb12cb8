/* conf: see conf.h. conf_table[] below is the only list of keys: the INI
 * handler, the environment, the overrides, conf_print and the example file
 * all walk it. inih splits lines; a reader of our own in front of it counts
 * physical lines (for FILE:LINE messages), strips indentation (so inih never
 * treats an indented line as a continuation) and "#" comments, and rejects
 * NUL bytes and lines too long for inih's buffer instead of letting inih cut
 * them. Loading runs on the caller's thread; the result is read-only after.
 */
#include "conf.h"
#include "log.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
	   "Address of kvpool-master's RPC endpoint that nodes, clients and the CLI connect to."),
	STR("cluster", "metadata_server", cluster.metadata_server, "",
	    "Mooncake metadata server URL (e.g. http://host:15002/metadata), as set by "
	    "MOONCAKE_METADATA_SERVER. Accepted and recorded for compatibility; kvpool keeps "
	    "its metadata in kvpool-master and does not contact it."),
	STR("cluster", "token_file", cluster.token_file, "",
	    "File whose first line is the cluster token that authenticates every RPC and data "
	    "connection. It must not be readable by group or other (chmod 600). Empty: no "
	    "token, and the daemons listen on loopback only."),
	NUM("cluster", "max_object_size", CONF_T_SIZE, cluster.max_object_size, 1, TiB, "1G",
	    "Largest value one object may hold; larger puts fail with KVP_ETOOBIG."),
	NUM("cluster", "max_frame", CONF_T_SIZE, cluster.max_frame, 4 * KiB, 2 * GiB, "64M",
	    "Largest wire frame body (metadata of one request or reply) a process accepts."),
	NUM("cluster", "max_batch", CONF_T_INT, cluster.max_batch, 1, 1048576, "4096",
	    "Most keys in one batch request; clients split larger batches."),

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
	    "A node or client silent for this long is considered gone: its segments leave the "
	    "pool and its unfinished puts are revoked. Keep it several node.heartbeat_interval.",
	    .live = true),
	NUM("master", "eviction_high_watermark", CONF_T_RATIO, master.eviction_high_watermark,
	    0, 1, "0.95",
	    "Fraction of a segment's capacity in use above which the master demotes or evicts "
	    "cold objects.", .live = true),
	NUM("master", "eviction_ratio", CONF_T_RATIO, master.eviction_ratio, 0, 1, "0.05",
	    "Fraction of a segment's capacity freed by one eviction pass.", .live = true),
	STR("master", "allocation_strategy", master.allocation_strategy, "free_ratio",
	    "How the master picks segments for a new object's replicas: free_ratio prefers "
	    "the emptiest segments, random spreads uniformly.",
	    .choices = "random|free_ratio", .live = true),
	NUM("master", "max_connections", CONF_T_INT, master.max_connections, 1, 1048576, "4096",
	    "Most simultaneous RPC connections the master accepts."),

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
	     "Fault the whole segment in at start-up instead of on first use."),
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
};
const size_t conf_table_len = sizeof(conf_table) / sizeof(conf_table[0]);

_Static_assert(sizeof(conf_table) / sizeof(conf_table[0]) <=
	       sizeof(((struct kvp_conf *)0)->src), "struct kvp_conf.src is too small");
_Static_assert(sizeof(conf_table) / sizeof(conf_table[0]) <=
	       sizeof(((struct kvp_conf *)0)->file_of), "struct kvp_conf.file_of is too small");

static const struct {
	const char *name;
	const char *help;
} conf_sections[] = {
	{ "cluster", "Shared by every process: where the master is, the token, limits." },
	{ "master", "kvpool-master: metadata, allocation, leases, eviction." },
	{ "node", "kvpool-node: the memory this host contributes." },
	{ "client", "libkvpool, the Python module and the kvpool CLI." },
	{ "spill", "kvpool-node's disk tier (io_uring)." },
	{ "fuse", "The FUSE view (in kvpool-node, or kvpool mount)." },
	{ "rdma", "RDMA transport (ibverbs)." },
	{ "log", "Logging of every process." },
};

/* Mooncake's environment variables, read before KVPOOL_* so those win. */
static const struct {
	const char *var;
	const char *section;
	const char *key;
} conf_aliases[] = {
	{ "MOONCAKE_MASTER_SERVER_ADDR", "cluster", "master" },
	{ "MOONCAKE_METADATA_SERVER", "cluster", "metadata_server" },
	{ "MOONCAKE_GLOBAL_SEGMENT_SIZE", "node", "segment_size" },
	{ "MOONCAKE_LOCAL_BUFFER_SIZE", "client", "local_buffer_size" },
	{ "MOONCAKE_PROTOCOL", "client", "protocol" },
	{ "MOONCAKE_RDMA_DEVICES", "rdma", "devices" },
};

/* Mooncake alias @a stands for key @k. */
static bool alias_of(size_t a, const struct conf_key *k)
{
	return strcmp(conf_aliases[a].section, k->section) == 0 &&
	       strcmp(conf_aliases[a].key, k->key) == 0;
}

static void errf(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void errf(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

/* Puts "PREFIX" in front of the message already in err. */
static void errprefix(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void errprefix(char *err, size_t len, const char *fmt, ...)
{
	char pre[CONF_STR + 64], msg[1024];
	va_list ap;

	if (!err || !len)
		return;
	snprintf(msg, sizeof(msg), "%s", err);
	va_start(ap, fmt);
	vsnprintf(pre, sizeof(pre), fmt, ap);
	va_end(ap);
	snprintf(err, len, "%s%s", pre, msg);
}

static bool section_known(const char *section)
{
	for (size_t i = 0; i < NELEM(conf_sections); i++)
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

static const char *skip_space(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

/* ---- number parsers ---------------------------------------------------- */

/* Digits, then an optional fraction kept as num/den (up to 18 digits; the
 * rest only floor away). -EINVAL without a digit, -ERANGE on overflow. */
static int parse_decimal(const char **sp, uint64_t *ip, uint64_t *fnum, uint64_t *fden)
{
	const char *s = *sp;
	uint64_t v = 0, n = 0, d = 1;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	for (; isdigit((unsigned char)*s); s++) {
		if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	if (*s == '.') {
		s++;
		if (!isdigit((unsigned char)*s))
			return -EINVAL;
		for (; isdigit((unsigned char)*s); s++) {
			if (d < 1000000000000000000ull) {
				n = n * 10 + (uint64_t)(*s - '0');
				d *= 10;
			}
		}
	}
	*sp = s;
	*ip = v;
	*fnum = n;
	*fden = d;
	return 0;
}

/* ip + fnum/fden, times mult, floored; -ERANGE past 2^64-1. */
static int scale(uint64_t ip, uint64_t fnum, uint64_t fden, uint64_t mult, uint64_t *out)
{
	unsigned __int128 v = (unsigned __int128)ip * mult;

	v += (unsigned __int128)fnum * mult / fden;
	if (v > UINT64_MAX)
		return -ERANGE;
	*out = (uint64_t)v;
	return 0;
}

/* The multiplier of a size suffix at *sp (K M G T, each optionally with B
 * or iB; a bare B is bytes); *sp moves past it. 1 without one. */
static uint64_t size_unit(const char **sp)
{
	const char *s = *sp;
	uint64_t mult = 1;

	switch (tolower((unsigned char)*s)) {
	case 'k': mult = 1ull << 10; s++; break;
	case 'm': mult = 1ull << 20; s++; break;
	case 'g': mult = 1ull << 30; s++; break;
	case 't': mult = 1ull << 40; s++; break;
	}
	if (mult > 1 && tolower((unsigned char)s[0]) == 'i' && tolower((unsigned char)s[1]) == 'b')
		s += 2;
	else if (tolower((unsigned char)*s) == 'b')
		s++;
	*sp = s;
	return mult;
}

/* The multiplier (to ms) of a duration unit at *sp (ms s m h); *sp moves
 * past it. 1 without one: a bare number is milliseconds. */
static uint64_t duration_unit(const char **sp)
{
	const char *s = *sp;

	if (strncasecmp(s, "ms", 2) == 0) {
		*sp = s + 2;
		return 1;
	}
	switch (tolower((unsigned char)*s)) {
	case 's': *sp = s + 1; return 1000;
	case 'm': *sp = s + 1; return 60 * 1000;
	case 'h': *sp = s + 1; return 3600 * 1000;
	}
	return 1;
}

/* A number, then the unit that @unit reads (*suffix points at it, for
 * messages). 0, -EINVAL (not a number, or a fraction of the smallest unit),
 * -EBADMSG (bad unit), -ERANGE (too large). */
static int parse_scaled(const char *s, uint64_t (*unit)(const char **), uint64_t *out,
			const char **suffix)
{
	uint64_t ip, fnum, fden, mult;
	int r;

	s = skip_space(s);
	r = parse_decimal(&s, &ip, &fnum, &fden);
	if (r)
		return r;
	s = skip_space(s);
	*suffix = s;
	mult = unit(&s);
	s = skip_space(s);
	if (*s)
		return -EBADMSG;
	if (mult == 1 && fnum)
		return -EINVAL;		/* a fraction of a byte or millisecond */
	return scale(ip, fnum, fden, mult, out);
}

int conf_parse_size(const char *s, uint64_t *out)
{
	const char *suffix;

	return s && parse_scaled(s, size_unit, out, &suffix) == 0 ? 0 : -1;
}

int conf_parse_duration(const char *s, uint64_t *out)
{
	const char *suffix;

	return s && parse_scaled(s, duration_unit, out, &suffix) == 0 ? 0 : -1;
}

static bool host_ok(const char *h)
{
	struct in_addr a4;
	size_t n = strlen(h);

	if (n == 0)
		return true;
	if (n > 253 || h[0] == '-' || h[0] == '.')
		return false;
	if (inet_pton(AF_INET, h, &a4) == 1)
		return true;
	for (const char *p = h; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.' && *p != '_')
			return false;
	return true;
}

int conf_parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port)
{
	struct in6_addr a6;
	char h[256];
	const char *p;
	size_t hl;
	unsigned long v = 0;
	int digits = 0;

	if (!s)
		return -1;
	if (s[0] == '[') {
		const char *end = strchr(s, ']');

		if (!end || end[1] != ':')
			return -1;
		hl = (size_t)(end - s - 1);
		if (hl == 0 || hl >= sizeof(h))
			return -1;
		memcpy(h, s + 1, hl);
		h[hl] = '\0';
		if (inet_pton(AF_INET6, h, &a6) != 1)
			return -1;
		p = end + 2;
	} else {
		const char *colon = strrchr(s, ':');

		if (!colon)
			return -1;
		hl = (size_t)(colon - s);
		if (hl >= sizeof(h))
			return -1;
		memcpy(h, s, hl);
		h[hl] = '\0';
		/* a bare IPv6 address is ambiguous: ask for brackets */
		if (strchr(h, ':') || !host_ok(h))
			return -1;
		p = colon + 1;
	}
	for (; *p; p++, digits++) {
		if (!isdigit((unsigned char)*p) || digits >= 5)
			return -1;
		v = v * 10 + (unsigned long)(*p - '0');
	}
	if (digits == 0 || v > 65535)
		return -1;
	if (host && hostlen) {
		if (hl >= hostlen)
			return -1;
		memcpy(host, h, hl + 1);
	}
	if (port)
		*port = (uint16_t)v;
	return 0;
}

/* ---- formatting -------------------------------------------------------- */

static void fmt_size(uint64_t v, char *buf, size_t len)
{
	static const char units[] = "TGMK";

	for (int i = 0; i < 4 && v; i++) {
		uint64_t m = 1ull << (10 * (4 - i));

		if (v % m == 0) {
			snprintf(buf, len, "%llu%c", (unsigned long long)(v / m), units[i]);
			return;
		}
	}
	snprintf(buf, len, "%llu", (unsigned long long)v);
}

static void fmt_duration(uint64_t v, char *buf, size_t len)
{
	if (v == 0)
		snprintf(buf, len, "0");
	else if (v % 3600000 == 0)
		snprintf(buf, len, "%lluh", (unsigned long long)(v / 3600000));
	else if (v % 60000 == 0)
		snprintf(buf, len, "%llum", (unsigned long long)(v / 60000));
	else if (v % 1000 == 0)
		snprintf(buf, len, "%llus", (unsigned long long)(v / 1000));
	else
		snprintf(buf, len, "%llums", (unsigned long long)v);
}

/* Shortest text that reads back as the same double. */
static void fmt_ratio(double v, char *buf, size_t len)
{
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, len, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

/* An integer key's value: octal (0644) for modes, else decimal. */
static void fmt_int(const struct conf_key *k, long long n, char *buf, size_t len)
{
	if ((k->flags & CONF_F_OCTAL) && n != 0)
		snprintf(buf, len, "0%llo", (unsigned long long)n);
	else
		snprintf(buf, len, "%lld", n);
}

static void fmt_num(const struct conf_key *k, double v, char *buf, size_t len)
{
	switch (k->type) {
	case CONF_T_SIZE:
		fmt_size((uint64_t)v, buf, len);
		break;
	case CONF_T_DURATION:
		fmt_duration((uint64_t)v, buf, len);
		break;
	case CONF_T_RATIO:
		fmt_ratio(v, buf, len);
		break;
	default:
		fmt_int(k, (long long)v, buf, len);
		break;
	}
}

static void fmt_range(const struct conf_key *k, char *buf, size_t len)
{
	char lo[32], hi[32];

	fmt_num(k, k->min, lo, sizeof(lo));
	fmt_num(k, k->max, hi, sizeof(hi));
	snprintf(buf, len, "%s..%s", lo, hi);
}

void conf_format(const struct kvp_conf *c, const struct conf_key *k, char *buf, size_t len)
{
	const char *p = (const char *)c + k->off;

	switch (k->type) {
	case CONF_T_STRING:
	case CONF_T_HOSTPORT:
		snprintf(buf, len, "%s", p);
		break;
	case CONF_T_INT:
		fmt_int(k, *(const int64_t *)(const void *)p, buf, len);
		break;
	case CONF_T_BOOL:
		snprintf(buf, len, "%s", *(const bool *)(const void *)p ? "true" : "false");
		break;
	case CONF_T_SIZE:
		fmt_size(*(const uint64_t *)(const void *)p, buf, len);
		break;
	case CONF_T_DURATION:
		fmt_duration(*(const uint64_t *)(const void *)p, buf, len);
		break;
	case CONF_T_RATIO:
		fmt_ratio(*(const double *)(const void *)p, buf, len);
		break;
	}
}

/* "a, b or c" from "a|b|c", for messages and the example file. */
static void fmt_choices(const char *choices, char *buf, size_t len)
{
	const char *p = choices;
	size_t n = 0;

	buf[0] = '\0';
	while (*p && n < len) {
		const char *bar = strchr(p, '|');
		size_t tl = bar ? (size_t)(bar - p) : strlen(p);
		const char *sep = p == choices ? "" : bar ? ", " : " or ";

		n += (size_t)snprintf(buf + n, len - n, "%s%.*s", sep, (int)tl, p);
		p += tl + (bar ? 1 : 0);
	}
}

/* ---- setting one key --------------------------------------------------- */

/* Matches @v against "a|b|N..M"; the canonical spelling goes to @out. */
static bool choice_match(const char *choices, const char *v, char *out, size_t outlen)
{
	const char *p = choices;

	while (*p) {
		const char *bar = strchr(p, '|');
		size_t tl = bar ? (size_t)(bar - p) : strlen(p);
		const char *dots = memmem(p, tl, "..", 2);

		if (dots) {
			long lo = strtol(p, NULL, 10), hi = strtol(dots + 2, NULL, 10);
			char *end = NULL;
			long n;

			errno = 0;
			n = isdigit((unsigned char)v[0]) ? strtol(v, &end, 10) : -1;
			if (n >= 0 && !errno && !*end && n >= lo && n <= hi) {
				snprintf(out, outlen, "%ld", n);
				return true;
			}
		} else if (strlen(v) == tl && strncasecmp(p, v, tl) == 0) {
			snprintf(out, outlen, "%.*s", (int)tl, p);
			return true;
		}
		p += tl + (bar ? 1 : 0);
	}
	return false;
}

static int set_string(struct kvp_conf *c, const struct conf_key *k, const char *v,
		      char *err, size_t errlen)
{
	char *dst = (char *)c + k->off;
	char canon[CONF_STR];

	if (strlen(v) >= CONF_STR) {
		errf(err, errlen, "value too long (at most %d bytes)", CONF_STR - 1);
		return -1;
	}
	if (k->flags & CONF_F_LOGLEVEL) {
		int lvl = log_level_parse(v);

		if (lvl < 0) {
			char list[128];

			fmt_choices(k->choices, list, sizeof(list));
			errf(err, errlen, "bad log level \"%s\" (expected %s)", v, list);
			return -1;
		}
		snprintf(dst, CONF_STR, "%s", log_level_name(lvl));
		return 0;
	}
	if (k->choices) {
		if (!choice_match(k->choices, v, canon, sizeof(canon))) {
			char list[128];

			fmt_choices(k->choices, list, sizeof(list));
			errf(err, errlen, "bad value \"%s\" (expected %s)", v, list);
			return -1;
		}
		v = canon;
	}
	if ((k->flags & CONF_F_FILENAME) &&
	    (strchr(v, '/') || strcmp(v, ".") == 0 || strcmp(v, "..") == 0)) {
		errf(err, errlen, "bad name \"%s\" (a file name: no '/', not . or ..)", v);
		return -1;
	}
	memmove(dst, v, strlen(v) + 1);
	return 0;
}

static int check_range(const struct conf_key *k, double v, const char *text,
		       char *err, size_t errlen)
{
	char range[80];

	if (v >= k->min && v <= k->max)
		return 0;
	fmt_range(k, range, sizeof(range));
	errf(err, errlen, "\"%s\" is out of range (%s)", text, range);
	return -1;
}

static int set_int(struct kvp_conf *c, const struct conf_key *k, const char *v,
		   char *err, size_t errlen)
{
	bool octal = k->flags & CONF_F_OCTAL;
	const char *s = skip_space(v);
	long long n;
	char *end;

	if (octal && s[0] == '0' && (s[1] == 'o' || s[1] == 'O'))
		s += 2;
	errno = 0;
	n = strtoll(s, &end, octal ? 8 : 10);
	if (end == s || *skip_space(end) || !(isdigit((unsigned char)*s) || *s == '-')) {
		errf(err, errlen, "bad number \"%s\" (expected %s)", v,
		     octal ? "an octal mode like 0644" : "an integer");
		return -1;
	}
	if (errno == ERANGE) {
		check_range(k, n < 0 ? -INFINITY : INFINITY, v, err, errlen);
		return -1;
	}
	if (check_range(k, (double)n, v, err, errlen))
		return -1;
	*(int64_t *)(void *)((char *)c + k->off) = n;
	return 0;
}

static int set_bool(struct kvp_conf *c, const struct conf_key *k, const char *v,
		    char *err, size_t errlen)
{
	static const char *const yes[] = { "true", "yes", "on", "1" };
	static const char *const no[] = { "false", "no", "off", "0" };
	bool *dst = (bool *)(void *)((char *)c + k->off);

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(v, yes[i]) == 0) {
			*dst = true;
			return 0;
		}
		if (strcasecmp(v, no[i]) == 0) {
			*dst = false;
			return 0;
		}
	}
	errf(err, errlen, "bad boolean \"%s\" (expected true/false, yes/no, on/off or 1/0)", v);
	return -1;
}

static int set_unsigned(struct kvp_conf *c, const struct conf_key *k, const char *v,
			char *err, size_t errlen)
{
	bool size = k->type == CONF_T_SIZE;
	const char *suffix = "";
	uint64_t n = 0;
	int r;

	r = parse_scaled(v, size ? size_unit : duration_unit, &n, &suffix);
	if (r == -EBADMSG) {
		errf(err, errlen, size ?
		     "bad size suffix \"%s\" in \"%s\" (use K, M, G or T, optionally with B or iB)" :
		     "bad duration unit \"%s\" in \"%s\" (use ms, s, m or h; a bare number is ms)",
		     suffix, v);
		return -1;
	}
	if (r == -ERANGE) {
		check_range(k, INFINITY, v, err, errlen);
		return -1;
	}
	if (r) {
		errf(err, errlen, size ?
		     "bad size \"%s\" (expected bytes or a number with K, M, G or T suffix)" :
		     "bad duration \"%s\" (expected a number with ms, s, m or h)", v);
		return -1;
	}
	if (check_range(k, (double)n, v, err, errlen))
		return -1;
	if ((k->flags & CONF_F_POW2) && (n & (n - 1))) {
		errf(err, errlen, "\"%s\" is not a power of two", v);
		return -1;
	}
	*(uint64_t *)(void *)((char *)c + k->off) = n;
	return 0;
}

static int set_ratio(struct kvp_conf *c, const struct conf_key *k, const char *v,
		     char *err, size_t errlen)
{
	const char *s = skip_space(v);
	char *end;
	double d;

	errno = 0;
	d = strtod(s, &end);
	if (end != s && *end == '%') {
		d /= 100;
		end++;
	}
	if (end == s || *skip_space(end) || !isfinite(d) || errno ||
	    !(isdigit((unsigned char)*s) || *s == '.' || *s == '-' || *s == '+')) {
		errf(err, errlen, "bad number \"%s\" (expected a ratio like 0.95, or 95%%)", v);
		return -1;
	}
	if (check_range(k, d, v, err, errlen))
		return -1;
	*(double *)(void *)((char *)c + k->off) = d;
	return 0;
}

static int set_hostport(struct kvp_conf *c, const struct conf_key *k, const char *v,
			char *err, size_t errlen)
{
	char *dst = (char *)c + k->off;
	uint16_t port;

	/* "" means "unset" only for keys whose default is unset */
	if (*v == '\0' && *k->def == '\0') {
		dst[0] = '\0';
		return 0;
	}
	if (strlen(v) >= CONF_STR || conf_parse_hostport(v, NULL, 0, &port)) {
		errf(err, errlen, "bad host:port \"%s\" (expected host:port, [ipv6]:port or :port)", v);
		return -1;
	}
	if (port < k->min || port > k->max) {
		errf(err, errlen, "port %u is out of range (%.0f..%.0f)", port, k->min, k->max);
		return -1;
	}
	memmove(dst, v, strlen(v) + 1);
	return 0;
}

/* Parses and stores one value; the message names no location. */
static int set_key(struct kvp_conf *c, const struct conf_key *k, const char *v,
		   enum conf_src src, char *err, size_t errlen)
{
	int r = -1;

	switch (k->type) {
	case CONF_T_STRING:
		r = set_string(c, k, v, err, errlen);
		break;
	case CONF_T_INT:
		r = set_int(c, k, v, err, errlen);
		break;
	case CONF_T_BOOL:
		r = set_bool(c, k, v, err, errlen);
		break;
	case CONF_T_SIZE:
	case CONF_T_DURATION:
		r = set_unsigned(c, k, v, err, errlen);
		break;
	case CONF_T_RATIO:
		r = set_ratio(c, k, v, err, errlen);
		break;
	case CONF_T_HOSTPORT:
		r = set_hostport(c, k, v, err, errlen);
		break;
	}
	if (r == 0)
		c->src[k - conf_table] = (uint8_t)src;
	return r;
}

int conf_set(struct kvp_conf *c, const char *section, const char *key,
	     const char *value, enum conf_src src, char *err, size_t errlen)
{
	const struct conf_key *k = conf_find(section, key);

	if (!k) {
		errf(err, errlen, "[%s] %s: %s", section, key,
		     section_known(section) ? "unknown key" : "unknown section");
		return -1;
	}
	if (!value) {
		errf(err, errlen, "[%s] %s: no value", section, key);
		return -1;
	}
	if (set_key(c, k, value, src, err, errlen)) {
		errprefix(err, errlen, "[%s] %s: ", section, key);
		return -1;
	}
	return 0;
}

int conf_set_override(struct kvp_conf *c, const char *kv, char *err, size_t errlen)
{
	char section[64], key[64];
	const char *dot = strchr(kv, '.'), *eq = strchr(kv, '=');

	if (!dot || !eq || dot > eq || (size_t)(dot - kv) >= sizeof(section) ||
	    (size_t)(eq - dot - 1) >= sizeof(key)) {
		errf(err, errlen, "override \"%s\": expected section.key=value", kv);
		return -1;
	}
	snprintf(section, sizeof(section), "%.*s", (int)(dot - kv), kv);
	snprintf(key, sizeof(key), "%.*s", (int)(eq - dot - 1), dot + 1);
	if (conf_set(c, section, key, eq + 1, CONF_SRC_CMDLINE, err, errlen)) {
		errprefix(err, errlen, "override %s: ", kv);
		return -1;
	}
	return 0;
}

void conf_defaults(struct kvp_conf *c)
{
	char err[256];

	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < conf_table_len; i++) {
		/* a default that does not parse is a bug in the table */
		if (set_key(c, &conf_table[i], conf_table[i].def, CONF_SRC_DEFAULT,
			    err, sizeof(err)))
			fatalx("conf: default of %s.%s: %s", conf_table[i].section,
			       conf_table[i].key, err);
	}
}

/* ---- INI files --------------------------------------------------------- */

struct ini_ctx {
	struct kvp_conf *c;
	FILE *f;
	const char *name;
	char *err;
	size_t errlen;
	int lineno;		/* physical line last handed to inih */
	int kv_line;		/* a "key = value" line the handler has not seen yet */
	int read_errno;		/* getline failed with this, 0 at end of file */
	bool failed;		/* first error recorded; stop reading */
	uint8_t file_idx;	/* this file's slot in c->files */
	char section[64];	/* section of the current line, for messages */
	int seen[sizeof(((struct kvp_conf *)0)->src)];	/* line that set each key */
	char *buf;		/* getline buffer */
	size_t cap;
};

static void ini_fail(struct ini_ctx *x, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void ini_fail(struct ini_ctx *x, int line, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	if (x->failed)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	errf(x->err, x->errlen, "%s:%d: %s", x->name, line, msg);
	x->failed = true;
}

static void ini_syntax_error(struct ini_ctx *x, int line, const char *why)
{
	ini_fail(x, line, "[%s]: %s", x->section, why);
}

/* The end of a "[section]" the way inih finds it: the first ']' that comes
 * before an inline " ;" comment. */
static char *section_end(char *p)
{
	for (char *q = p + 1; *q; q++) {
		if (*q == ']')
			return q;
		if (*q == ';' && (q[-1] == ' ' || q[-1] == '\t'))
			return NULL;
	}
	return NULL;
}

/* inih's reader: one physical line per call, cleaned up (see top of file). */
static char *ini_read(char *str, int num, void *stream)
{
	struct ini_ctx *x = stream;
	ssize_t n;
	size_t len;
	char *p, *q;

	if (x->failed)
		return NULL;
	if (x->kv_line) {
		/* inih called no handler for it: it could not parse the line */
		ini_syntax_error(x, x->kv_line, "cannot parse line (expected \"key = value\", "
				 "\"[section]\" or a comment)");
		return NULL;
	}
	errno = 0;
	n = getline(&x->buf, &x->cap, x->f);
	if (n < 0) {
		if (ferror(x->f))
			x->read_errno = errno ? errno : EIO;
		return NULL;
	}
	x->lineno++;
	if (memchr(x->buf, '\0', (size_t)n)) {
		ini_syntax_error(x, x->lineno, "NUL byte in line");
		return NULL;
	}
	p = x->buf;
	if (x->lineno == 1 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
		p += 3;		/* UTF-8 byte order mark */
	while (isspace((unsigned char)*p))
		p++;
	/* " # comment" after a value (inih itself only knows " ;") */
	for (q = p; *q; q++) {
		if (*q == '#' && q > p && (q[-1] == ' ' || q[-1] == '\t')) {
			*q = '\0';
			break;
		}
	}
	len = strlen(p);
	while (len && isspace((unsigned char)p[len - 1]))
		p[--len] = '\0';

	if (*p == '[') {
		char *end = section_end(p);

		if (!end) {
			ini_syntax_error(x, x->lineno, "section header without ']'");
			return NULL;
		}
		if (*skip_space(end + 1) && *skip_space(end + 1) != ';') {
			ini_syntax_error(x, x->lineno, "text after ']'");
			return NULL;
		}
		snprintf(x->section, sizeof(x->section), "%.*s", (int)(end - p - 1), p + 1);
		/* here, so that an empty unknown section is caught too */
		if (!section_known(x->section) || (size_t)(end - p - 1) >= sizeof(x->section)) {
			ini_fail(x, x->lineno, "[%s]: unknown section", x->section);
			return NULL;
		}
	} else if (*p && *p != ';' && *p != '#') {
		x->kv_line = x->lineno;
	}
	if (num < 3 || len > (size_t)num - 2) {
		char why[64];

		snprintf(why, sizeof(why), "line too long (at most %d characters)", num - 2);
		ini_syntax_error(x, x->lineno, why);
		return NULL;
	}
	memcpy(str, p, len + 1);
	return str;
}

static int conf_ini_key(void *user, const char *section, const char *name, const char *value)
{
	struct ini_ctx *x = user;
	const struct conf_key *k;
	char unq[CONF_STR + 2], msg[512];
	size_t i, vl;

	x->kv_line = 0;
	if (x->failed)
		return 0;
	if (!*section) {
		ini_fail(x, x->lineno, "[] %s: key outside any [section]", name);
		return 0;
	}
	k = conf_find(section, name);
	if (!k) {
		ini_fail(x, x->lineno, "[%s] %s: %s", section, name,
			 section_known(section) ? "unknown key" : "unknown section");
		return 0;
	}
	i = (size_t)(k - conf_table);
	if (x->seen[i]) {
		ini_fail(x, x->lineno, "[%s] %s: duplicate key (first set on line %d)",
			 section, name, x->seen[i]);
		return 0;
	}
	x->seen[i] = x->lineno;
	/* "..." lets a value be empty or keep surrounding spaces */
	vl = strlen(value);
	if (vl >= 2 && value[0] == '"' && value[vl - 1] == '"' && vl - 2 < sizeof(unq)) {
		memcpy(unq, value + 1, vl - 2);
		unq[vl - 2] = '\0';
		value = unq;
	}
	if (set_key(x->c, k, value, CONF_SRC_FILE, msg, sizeof(msg))) {
		ini_fail(x, x->lineno, "[%s] %s: %s", section, name, msg);
		return 0;
	}
	x->c->file_of[i] = x->file_idx;
	return 1;
}

/* The slot of @name in c->files, appended if new. Past CONF_MAX_FILES the
 * last slot is shared (conf_load_files refuses more files than that). */
static uint8_t file_slot(struct kvp_conf *c, const char *name)
{
	for (uint8_t i = 0; i < c->nfiles; i++)
		if (strcmp(c->files[i], name) == 0)
			return i;
	if (c->nfiles == CONF_MAX_FILES)
		return CONF_MAX_FILES - 1;
	snprintf(c->files[c->nfiles], sizeof(c->files[0]), "%s", name);
	return c->nfiles++;
}

int conf_load_stream(struct kvp_conf *c, FILE *f, const char *name, char *err, size_t errlen)
{
	struct ini_ctx *x;
	int r, ret = -1;

	x = calloc(1, sizeof(*x));
	if (!x) {
		errf(err, errlen, "%s: %s", name, strerror(ENOMEM));
		return -1;
	}
	x->c = c;
	x->f = f;
	x->name = name;
	x->err = err;
	x->errlen = errlen;
	x->file_idx = file_slot(c, name);
	if (!c->file[0])
		snprintf(c->file, sizeof(c->file), "%s", name);

	r = ini_parse_stream(ini_read, x, conf_ini_key, x);
	if (x->failed)
		goto out_free;
	if (x->kv_line) {
		ini_syntax_error(x, x->kv_line, "cannot parse line (expected \"key = value\", "
				 "\"[section]\" or a comment)");
		goto out_free;
	}
	if (x->read_errno) {
		errf(err, errlen, "%s: %s", name, strerror(x->read_errno));
		goto out_free;
	}
	if (r) {
		/* our reader should have caught every error; keep inih's word anyway */
		errf(err, errlen, "%s:%d: cannot parse line", name, r);
		goto out_free;
	}
	ret = 0;
out_free:
	free(x->buf);
	free(x);
	return ret;
}

/* ---- environment ------------------------------------------------------- */

static void env_name(const struct conf_key *k, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "KVPOOL_%s_%s", k->section, k->key);

	for (size_t i = 0; i < n && i < len; i++)
		buf[i] = (char)toupper((unsigned char)buf[i]);
}

static int env_set(struct kvp_conf *c, const struct conf_key *k, const char *var,
		   char *err, size_t errlen)
{
	const char *v = getenv(var);

	if (!v)
		return 0;
	if (set_key(c, k, v, CONF_SRC_ENV, err, errlen)) {
		errprefix(err, errlen, "env %s: [%s] %s: ", var, k->section, k->key);
		return -1;
	}
	return 0;
}

/* KVPOOL_* that names no key: an error when its section exists (a typo),
 * else a warning, since other tools may own the variable. */
static int env_check_unknown(char *err, size_t errlen)
{
	char section[64], key[128], canon[256];

	for (char **e = environ; e && *e; e++) {
		const char *v = *e, *eq = strchr(v, '='), *us;
		const struct conf_key *k;
		size_t sl, kl;

		if (strncmp(v, "KVPOOL_", 7) != 0 || !eq)
			continue;
		v += 7;
		us = memchr(v, '_', (size_t)(eq - v));
		sl = us ? (size_t)(us - v) : (size_t)(eq - v);
		kl = us ? (size_t)(eq - us - 1) : 0;
		if (sl >= sizeof(section) || kl >= sizeof(key))
			goto unknown_section;
		for (size_t i = 0; i < sl; i++)
			section[i] = (char)tolower((unsigned char)v[i]);
		section[sl] = '\0';
		for (size_t i = 0; i < kl; i++)
			key[i] = (char)tolower((unsigned char)us[1 + i]);
		key[kl] = '\0';
		if (!section_known(section))
			goto unknown_section;
		k = conf_find(section, key);
		if (k) {
			env_name(k, canon, sizeof(canon));
			if (strncmp(*e, canon, strlen(canon)) == 0 && (*e)[strlen(canon)] == '=')
				continue;
		}
		errf(err, errlen, "env %.*s: [%s] %s: unknown key (variables are "
		     "KVPOOL_<SECTION>_<KEY> in upper case)", (int)(eq - *e), *e, section, key);
		return -1;
unknown_section:
		log_warn("ignoring environment variable %.*s: kvpool has no such section",
			 (int)(eq - *e), *e);
	}
	return 0;
}

static int conf_load_env(struct kvp_conf *c, char *err, size_t errlen)
{
	char var[256];

	for (size_t i = 0; i < NELEM(conf_aliases); i++) {
		const struct conf_key *k = conf_find(conf_aliases[i].section, conf_aliases[i].key);

		if (env_set(c, k, conf_aliases[i].var, err, errlen))
			return -1;
	}
	for (size_t i = 0; i < conf_table_len; i++) {
		env_name(&conf_table[i], var, sizeof(var));
		if (env_set(c, &conf_table[i], var, err, errlen))
			return -1;
	}
	return env_check_unknown(err, errlen);
}

/* ---- token ------------------------------------------------------------- */

static int conf_load_token(struct kvp_conf *c, char *err, size_t errlen)
{
	const char *path = c->cluster.token_file;
	char buf[1024], *p, *end;
	struct stat st;
	ssize_t n;
	int fd, ret = -1;

	if (!*path)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		errf(err, errlen, "[cluster] token_file: %s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0) {
		errf(err, errlen, "[cluster] token_file: %s: %s", path, strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		errf(err, errlen, "[cluster] token_file: %s: not a regular file", path);
		goto out_close;
	}
	if (st.st_uid == geteuid() && (st.st_mode & 077)) {
		errf(err, errlen, "[cluster] token_file: %s: mode %04o lets group or other read "
		     "the token; run chmod 600 %s", path, (unsigned)(st.st_mode & 07777), path);
		goto out_close;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	if (n < 0) {
		errf(err, errlen, "[cluster] token_file: %s: %s", path, strerror(errno));
		goto out_close;
	}
	buf[n] = '\0';
	end = memchr(buf, '\n', (size_t)n);
	if (!end)
		end = buf + n;
	if (memchr(buf, '\0', (size_t)(end - buf))) {
		errf(err, errlen, "[cluster] token_file: %s: NUL byte in the token", path);
		goto out_wipe;
	}
	*end = '\0';
	for (p = buf; isspace((unsigned char)*p); p++)
		;
	while (end > p && isspace((unsigned char)end[-1]))
		*--end = '\0';
	if (end == p) {
		errf(err, errlen, "[cluster] token_file: %s: the first line is empty", path);
		goto out_wipe;
	}
	if ((size_t)(end - p) >= sizeof(c->cluster.token)) {
		errf(err, errlen, "[cluster] token_file: %s: token longer than %zu bytes", path,
		     sizeof(c->cluster.token) - 1);
		goto out_wipe;
	}
	memcpy(c->cluster.token, p, (size_t)(end - p) + 1);
	ret = 0;
out_wipe:
	explicit_bzero(buf, sizeof(buf));
out_close:
	close(fd);
	return ret;
}

/* ---- conf_load ---------------------------------------------------------- */

/* One file on top of @c; a missing file is an error only if @must_exist. */
static int conf_load_path(struct kvp_conf *c, const char *path, bool must_exist,
			  char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	int r;

	if (!f) {
		if (!must_exist && errno == ENOENT)
			return 0;
		errf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	r = conf_load_stream(c, f, path, err, errlen);
	fclose(f);
	return r;
}

int conf_load(struct kvp_conf *c, const char *path, const char *const *overrides,
	      char *err, size_t errlen)
{
	return conf_load_files(c, path ? &path : NULL, path ? 1 : 0, overrides, err, errlen);
}

int conf_load_files(struct kvp_conf *c, const char *const *paths, size_t n,
		    const char *const *overrides, char *err, size_t errlen)
{
	conf_defaults(c);
	if (n > CONF_MAX_FILES) {
		errf(err, errlen, "%zu configuration files: at most %d can be layered", n,
		     CONF_MAX_FILES);
		return -1;
	}
	if (n == 0 && conf_load_path(c, CONF_DEFAULT_FILE, false, err, errlen))
		return -1;
	/* each file has its own duplicate check (conf_load_stream's seen[]),
	 * so a later file may set a key again and wins */
	for (size_t i = 0; i < n; i++)
		if (conf_load_path(c, paths[i], true, err, errlen))
			return -1;
	if (conf_load_env(c, err, errlen))
		return -1;
	for (const char *const *o = overrides; o && *o; o++)
		if (conf_set_override(c, *o, err, errlen))
			return -1;
	return conf_load_token(c, err, errlen);
}

/* ---- output ------------------------------------------------------------ */

/* The variable that set @k: KVPOOL_* if present, else its Mooncake alias. */
static const char *env_source(const struct conf_key *k, char *buf, size_t len)
{
	env_name(k, buf, len);
	if (getenv(buf))
		return buf;
	for (size_t i = 0; i < NELEM(conf_aliases); i++)
		if (alias_of(i, k) && getenv(conf_aliases[i].var))
			return conf_aliases[i].var;
	return buf;
}

void conf_print(const struct kvp_conf *c, FILE *out)
{
	char val[CONF_STR + 8], var[128];

	for (size_t i = 0; i < conf_table_len; i++) {
		const struct conf_key *k = &conf_table[i];

		conf_format(c, k, val, sizeof(val));
		fprintf(out, "%s.%s = %s   # ", k->section, k->key, *val ? val : "\"\"");
		switch (c->src[i]) {
		case CONF_SRC_FILE:
			fprintf(out, "file %s\n", c->file_of[i] < c->nfiles ?
				c->files[c->file_of[i]] : c->file);
			break;
		case CONF_SRC_ENV:
			fprintf(out, "env %s\n", env_source(k, var, sizeof(var)));
			break;
		case CONF_SRC_CMDLINE:
			fprintf(out, "cmdline\n");
			break;
		default:
			fprintf(out, "default\n");
			break;
		}
	}
}

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

	fmt_range(k, range, sizeof(range));
	switch (k->type) {
	case CONF_T_STRING:
		if (k->choices) {
			fmt_choices(k->choices, list, sizeof(list));
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
	      "# Generated by conf_write_example() from the table in src/common/conf.c:\n"
	      "#   build/tests/t_conf --write-example > conf/kvpool.ini\n", out);
	for (size_t s = 0; s < NELEM(conf_sections); s++) {
		fprintf(out, "\n[%s]\n", conf_sections[s].name);
		write_comment(out, conf_sections[s].help);
		for (size_t i = 0; i < conf_table_len; i++) {
			const struct conf_key *k = &conf_table[i];

			if (strcmp(k->section, conf_sections[s].name) != 0)
				continue;
			describe_type(k, type, sizeof(type));
			env_name(k, var, sizeof(var));
			fputs("\n", out);
			write_comment(out, k->help);
			snprintf(line, sizeof(line), "%s%s. Env %s", type,
				 k->live ? "; live" : "", var);
			for (size_t a = 0; a < NELEM(conf_aliases); a++)
				if (alias_of(a, k))
					snprintf(line + strlen(line), sizeof(line) - strlen(line),
						 " or %s", conf_aliases[a].var);
			strncat(line, ".", sizeof(line) - strlen(line) - 1);
			write_comment(out, line);
			fprintf(out, "# %s = %s\n", k->key, *k->def ? k->def : "\"\"");
		}
	}
}

/* ---- SIGHUP ------------------------------------------------------------ */

int conf_apply_live(struct kvp_conf *cur, const struct kvp_conf *next)
{
	char a[CONF_STR + 8], b[CONF_STR + 8];
	int restart = 0;

	for (size_t i = 0; i < conf_table_len; i++) {
		const struct conf_key *k = &conf_table[i];
		size_t sz;

		conf_format(cur, k, a, sizeof(a));
		conf_format(next, k, b, sizeof(b));
		if (strcmp(a, b) == 0)
			continue;
		if (!k->live) {
			log_warn("config: %s.%s changed (%s -> %s) but needs a restart",
				 k->section, k->key, a, b);
			restart++;
			continue;
		}
		switch (k->type) {
		case CONF_T_STRING:
		case CONF_T_HOSTPORT:
			sz = CONF_STR;
			break;
		case CONF_T_BOOL:
			sz = sizeof(bool);
			break;
		case CONF_T_RATIO:
			sz = sizeof(double);
			break;
		default:
			sz = sizeof(uint64_t);
			break;
		}
		memcpy((char *)cur + k->off, (const char *)next + k->off, sz);
		cur->src[i] = next->src[i];
		if (next->src[i] == CONF_SRC_FILE && next->file_of[i] < next->nfiles)
			cur->file_of[i] = file_slot(cur, next->files[next->file_of[i]]);
		log_notice("config: %s.%s = %s (was %s)", k->section, k->key, b, a);
	}
	return restart;
}

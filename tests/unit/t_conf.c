/* t_conf: the configuration module (src/common/conf*.c): defaults, a file with every
 * type, every kind of bad file and its exact "FILE:LINE: [section] key:"
 * message, environment and Mooncake aliases with their precedence, command
 * line overrides, the size/duration/host:port parsers' edges, token file
 * modes, conf_print's sources, conf_apply_live, layered files
 * (conf_load_files), and conf/kvpool.ini being
 * exactly conf_write_example()'s output.
 *   t_conf                   run the tests (exit 0 pass, 1 fail)
 *   t_conf --write-example   print the example (> conf/kvpool.ini)
 */
#include "conf.h"
#include "kvpool.h"
#include "log.h"
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];

/* err must start with want (the message after it is free text). */
#define CHECK_PREFIX(err, want) check_prefix(__LINE__, err, want)

static void check_prefix(int line, const char *err, const char *want)
{
	if (strncmp(err, want, strlen(want)) != 0) {
		fprintf(stderr, "%s:%d: message\n    got:  %s\n    want: %s...\n", __FILE__,
			line, err, want);
		tl_failures++;
	}
}

#define CHECK_CONTAINS(err, want) check_contains(__LINE__, err, want)

static void check_contains(int line, const char *err, const char *want)
{
	if (!strstr(err, want)) {
		fprintf(stderr, "%s:%d: message\n    got:  %s\n    want: ...%s...\n", __FILE__,
			line, err, want);
		tl_failures++;
	}
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(p);
}

static void cleanup(void)
{
	if (tmpdir[0])
		nftw(tmpdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* Writes @len bytes to tmpdir/name with @mode; returns the path in @path. */
static void write_bytes(char *path, size_t plen, const char *name, const void *data,
			size_t len, mode_t mode)
{
	int fd;

	snprintf(path, plen, "%s/%s", tmpdir, name);
	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	if (fd < 0 || write(fd, data, len) != (ssize_t)len) {
		perror(path);
		exit(1);
	}
	fchmod(fd, mode);	/* umask-proof */
	close(fd);
}

static void write_file(char *path, size_t plen, const char *name, const char *text)
{
	write_bytes(path, plen, name, text, strlen(text), 0644);
}

/* Loads @text as a file and checks the error is "PATH" + want. */
#define BAD_FILE(text, want) bad_file(__LINE__, text, strlen(text), want)

static void bad_file(int line, const char *text, size_t len, const char *want)
{
	struct kvp_conf c;
	char path[256], err[1024] = "", full[1400];

	write_bytes(path, sizeof(path), "bad.ini", text, len, 0644);
	if (conf_load(&c, path, NULL, err, sizeof(err)) == 0) {
		fprintf(stderr, "%s:%d: file loaded but should fail with %s\n", __FILE__, line, want);
		tl_failures++;
		return;
	}
	snprintf(full, sizeof(full), "%s%s", path, want);
	check_prefix(line, err, full);
}

static void clear_env(void)
{
	char *names[256];
	int n = 0;

	for (char **e = environ; *e && n < 256; e++) {
		if (strncmp(*e, "KVPOOL_", 7) == 0 || strncmp(*e, "MOONCAKE_", 9) == 0) {
			size_t l = strcspn(*e, "=");

			names[n] = strndup(*e, l);
			n++;
		}
	}
	for (int i = 0; i < n; i++) {
		unsetenv(names[i]);
		free(names[i]);
	}
}

static int srcof(const struct kvp_conf *c, const char *section, const char *key)
{
	const struct conf_key *k = conf_find(section, key);

	return k ? c->src[k - conf_table] : -1;
}

/* ---- the table and the defaults ---------------------------------------- */

static void test_table(void)
{
	struct kvp_conf c;
	char buf[CONF_STR + 8];

	CHECK(conf_table_len == 92);
	CHECK(conf_table_len <= sizeof(c.src));
	for (size_t i = 0; i < conf_table_len; i++) {
		const struct conf_key *k = &conf_table[i];

		CHECK(k->help && strlen(k->help) > 10);
		CHECK(conf_find(k->section, k->key) == k);
		CHECK(k->off < offsetof(struct kvp_conf, src));
		CHECK(k->off != offsetof(struct kvp_conf, cluster.token));
		for (size_t j = 0; j < i; j++)
			CHECK(conf_table[j].off != k->off);
		if (k->type != CONF_T_STRING && k->type != CONF_T_BOOL)
			CHECK(k->min <= k->max);
	}
	conf_defaults(&c);
	for (size_t i = 0; i < conf_table_len; i++) {
		/* defaults are written canonically, so they print as written */
		conf_format(&c, &conf_table[i], buf, sizeof(buf));
		if (strcmp(buf, conf_table[i].def) != 0)
			fprintf(stderr, "default of %s.%s: \"%s\" formats as \"%s\"\n",
				conf_table[i].section, conf_table[i].key, conf_table[i].def, buf);
		CHECK(strcmp(buf, conf_table[i].def) == 0);
		CHECK(c.src[i] == CONF_SRC_DEFAULT);
	}
	CHECK(conf_find("node", "nope") == NULL);
	CHECK(conf_find("cluster", "token") == NULL);	/* not a key: from token_file */
	CHECK(conf_find("cluster", "metadata_server") != NULL);
	CHECK(conf_find("log", "level")->live);
	CHECK(conf_find("master", "lease_ttl")->live);
	CHECK(conf_find("fuse", "attr_timeout")->live);
	CHECK(!conf_find("node", "segment_size")->live);
	/* TLS is off unless asked for; its files are read at start-up only */
	CHECK(!c.tls.enabled && !c.tls.verify_peer && strcmp(c.tls.ktls, "auto") == 0 && !c.tls.http);
	CHECK(!conf_find("tls", "cert")->live);
}

static void test_defaults(void)
{
	struct kvp_conf c;

	conf_defaults(&c);
	CHECK(strcmp(c.cluster.master, "127.0.0.1:15001") == 0);
	CHECK(c.cluster.max_object_size == 1ull << 30);
	CHECK(c.cluster.max_frame == 64ull << 20);
	CHECK(c.cluster.max_batch == 4096);
	CHECK(c.cluster.busy_poll_us == 50);
	CHECK(!strcmp(c.cluster.tcp_congestion, "auto"));
	CHECK(c.cluster.token[0] == '\0' && c.cluster.token_file[0] == '\0');
	CHECK(c.cluster.metadata_server[0] == '\0');
	CHECK(strcmp(c.master.listen, "0.0.0.0:15001") == 0);
	CHECK(strcmp(c.master.http_listen, "0.0.0.0:15003") == 0);
	CHECK(!c.master.metadata_server);
	CHECK(strcmp(c.master.metadata_listen, "0.0.0.0:15002") == 0);
	CHECK(c.master.lease_ttl == 5000);
	CHECK(c.master.put_timeout == 30000);
	CHECK(c.master.client_ttl == 10000);
	CHECK(c.master.eviction_high_watermark == 0.98);
	CHECK(c.master.eviction_ratio == 0.02);
	CHECK(strcmp(c.master.allocation_strategy, "free_ratio") == 0);
	CHECK(c.master.max_connections == 4096);
	CHECK(c.node.name[0] == '\0' && c.node.advertise[0] == '\0' && c.node.segment[0] == '\0');
	CHECK(strcmp(c.node.listen, "0.0.0.0:15010") == 0);
	CHECK(strcmp(c.node.http_listen, "0.0.0.0:15011") == 0);
	CHECK(c.node.segment_size == 1ull << 30);
	CHECK(c.node.align == 4096);
	CHECK(strcmp(c.node.numa_node, "none") == 0);
	CHECK(!c.node.hugepages && !c.node.populate && !c.node.remove_segment_on_exit);
	CHECK(c.node.shm_group[0] == '\0');
	CHECK(c.node.heartbeat_interval == 1000);
	CHECK(c.node.max_connections == 4096);
	CHECK(strcmp(c.client.protocol, "auto") == 0);
	CHECK(c.client.connections_per_node == 4);
	CHECK(c.client.timeout == 10000);
	CHECK(c.client.replicas == 1);
	CHECK(c.client.local_buffer_size == 128ull << 20);
	CHECK(c.client.host_id[0] == '\0');
	CHECK(c.spill.path[0] == '\0' && c.spill.size == 0);
	CHECK(c.spill.direct_io && !c.spill.promote_on_hit);
	CHECK(c.spill.queue_depth == 32);
	CHECK(c.fuse.mountpoint[0] == '\0' && !c.fuse.allow_other && !c.fuse.ro);
	CHECK(c.fuse.attr_timeout == 1000 && c.fuse.entry_timeout == 1000);
	CHECK(c.fuse.mode == 0644);
	CHECK(c.fuse.max_read == 1ull << 20);
	CHECK(!strcmp(c.fuse.io_uring, "auto"));
	CHECK(!c.rdma.enabled && c.rdma.devices[0] == '\0' && c.rdma.qps_per_peer == 2);
	CHECK(strcmp(c.log.level, "notice") == 0);
	CHECK(c.file[0] == '\0');
}

/* ---- good files --------------------------------------------------------- */

static void test_good_file(void)
{
	struct kvp_conf c;
	char path[256], err[1024] = "";
	/* BOM, comments of every kind, indentation, quotes, every type */
	const char *text =
		"\xEF\xBB\xBF# a comment\n"
		"; another comment\n"
		"\n"
		"[cluster]\n"
		"master = [::1]:16001   # inline hash comment\n"
		"max_object_size = 64MiB ; inline semicolon comment\n"
		"max_frame=1g\n"
		"max_batch = 128\n"
		"[master]\n"
		"  listen = :0\n"
		"  metadata_server = Yes\n"
		"  lease_ttl = 1.5s\n"
		"  put_timeout = 2m\n"
		"  client_ttl = 250\n"
		"  eviction_high_watermark = 90%\n"
		"  eviction_ratio = 0.1\n"
		"  allocation_strategy = RANDOM\n"
		"[node]\n"
		"name = \"  spaced  \"\n"
		"advertise = node1.example-dc_2:15010\n"
		"segment_size = 2 GB\n"
		"align = 64K\n"
		"numa_node = 1\n"
		"hugepages = on\n"
		"populate = 1\n"
		"segment = kvpool-test\n"
		"heartbeat_interval = 1m\n"
		"[fuse]\n"
		"mode = 600\n"
		"attr_timeout = 0\n"
		"[log]\n"
		"level = warn\n"
		"[spill]\n"
		"path = \"\"\n"
		"size = 1T\n"
		"direct_io = off\n";

	write_file(path, sizeof(path), "good.ini", text);
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	if (err[0])
		fprintf(stderr, "good.ini: %s\n", err);
	CHECK(strcmp(c.file, path) == 0);
	CHECK(strcmp(c.cluster.master, "[::1]:16001") == 0);
	CHECK(c.cluster.max_object_size == 64ull << 20);
	CHECK(c.cluster.max_frame == 1ull << 30);
	CHECK(c.cluster.max_batch == 128);
	CHECK(strcmp(c.master.listen, ":0") == 0);
	CHECK(c.master.metadata_server);
	CHECK(c.master.lease_ttl == 1500);
	CHECK(c.master.put_timeout == 120000);
	CHECK(c.master.client_ttl == 250);
	CHECK(c.master.eviction_high_watermark == 0.9);
	CHECK(c.master.eviction_ratio == 0.1);
	CHECK(strcmp(c.master.allocation_strategy, "random") == 0);	/* canonical */
	CHECK(strcmp(c.node.name, "  spaced  ") == 0);
	CHECK(strcmp(c.node.advertise, "node1.example-dc_2:15010") == 0);
	CHECK(c.node.segment_size == 2ull << 30);
	CHECK(c.node.align == 65536);
	CHECK(strcmp(c.node.numa_node, "1") == 0);
	CHECK(c.node.hugepages && c.node.populate);
	CHECK(strcmp(c.node.segment, "kvpool-test") == 0);
	CHECK(c.node.heartbeat_interval == 60000);
	CHECK(c.fuse.mode == 0600);
	CHECK(c.fuse.attr_timeout == 0);
	CHECK(strcmp(c.log.level, "warning") == 0);		/* canonical */
	CHECK(c.spill.path[0] == '\0');
	CHECK(c.spill.size == 1ull << 40);
	CHECK(!c.spill.direct_io);
	CHECK(srcof(&c, "node", "segment_size") == CONF_SRC_FILE);
	CHECK(srcof(&c, "spill", "path") == CONF_SRC_FILE);
	CHECK(srcof(&c, "client", "replicas") == CONF_SRC_DEFAULT);
}

/* the largest heartbeat_interval is 1m */
static void test_heartbeat_range(void)
{
	BAD_FILE("[node]\nheartbeat_interval = 1h\n",
		 ":2: [node] heartbeat_interval: \"1h\" is out of range (10ms..1m)");
}

static void test_indent_is_not_continuation(void)
{
	struct kvp_conf c;
	char path[256], err[512] = "";

	/* inih would read the indented line as a continuation of "name" */
	write_file(path, sizeof(path), "indent.ini", "[node]\nname = a\n    hugepages = true\n");
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	CHECK(strcmp(c.node.name, "a") == 0);
	CHECK(c.node.hugepages);

	write_file(path, sizeof(path), "sec.ini", "[node] ; comment\nname = b\n[log]   # c\n");
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	CHECK(strcmp(c.node.name, "b") == 0);

	/* "key: value", as Python's configparser allows */
	write_file(path, sizeof(path), "colon.ini", "[cluster]\nmaster: 10.0.0.1:15001\n");
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	CHECK(strcmp(c.cluster.master, "10.0.0.1:15001") == 0);

	/* HA: the master address names etcd endpoints (docs/ha.md) */
	write_file(path, sizeof(path), "etcd.ini",
		   "[cluster]\nmaster = etcd://10.0.0.1:2379;[::1]:2379,h3:2379\n"
		   "[master]\nha = etcd\nha_endpoints = h1:2379;h2:2379\ncluster_id = pool-a\n");
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	CHECK(strcmp(c.cluster.master, "etcd://10.0.0.1:2379;[::1]:2379,h3:2379") == 0);
	CHECK(strcmp(c.master.ha, "etcd") == 0 && c.master.ha_lease_ttl == 2000);
	CHECK(strcmp(c.master.cluster_id, "pool-a") == 0);
	/* etcd over TLS: each endpoint may name its scheme */
	write_file(path, sizeof(path), "etcds.ini",
		   "[cluster]\nmaster = etcd://https://10.0.0.1:2379;http://h2:2379\n");
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0, "%s", err);
	CHECK(strcmp(c.cluster.master, "etcd://https://10.0.0.1:2379;http://h2:2379") == 0);

	/* CRLF line ends */
	write_file(path, sizeof(path), "crlf.ini", "[client]\r\nreplicas = 3\r\n");
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	CHECK(c.client.replicas == 3);

	/* an empty file and one without a final newline */
	write_file(path, sizeof(path), "empty.ini", "");
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	write_file(path, sizeof(path), "nonl.ini", "[client]\nreplicas = 2");
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	CHECK(c.client.replicas == 2);
}

static void test_bad_files(void)
{
	char nul[] = "[node]\nname = a\0b\n";
	char longline[400];
	char path[256], err[512];
	struct kvp_conf c;

	/* structure */
	BAD_FILE("[bogus]\nx = 1\n", ":1: [bogus]: unknown section");
	BAD_FILE("[node]\nname = a\n[Node]\n", ":3: [Node]: unknown section");
	BAD_FILE("[node]\nsegmentsize = 1G\n", ":2: [node] segmentsize: unknown key");
	BAD_FILE("[cluster]\ntoken = secret\n", ":2: [cluster] token: unknown key");
	BAD_FILE("name = x\n", ":1: [] name: key outside any [section]");
	BAD_FILE("[node]\n\nthis is not ini\n", ":3: [node]: cannot parse line");
	BAD_FILE("[node]\nname = a\njunk", ":3: [node]: cannot parse line");
	BAD_FILE("[node\nname = x\n", ":1: []: section header without ']'");
	BAD_FILE("[node] junk\n", ":1: []: text after ']'");
	bad_file(__LINE__, nul, sizeof(nul) - 1, ":2: [node]: NUL byte in line");
	memset(longline, 'x', sizeof(longline));
	memcpy(longline, "[node]\nname = ", 14);
	longline[sizeof(longline) - 1] = '\0';
	BAD_FILE(longline, ":2: [node]: line too long (at most ");
	BAD_FILE("[node]\nname = a\nname = b\n", ":3: [node] name: duplicate key (first set on line 2)");
	BAD_FILE("[node]\nname = a\n[client]\n[node]\nname = b\n",
		 ":5: [node] name: duplicate key (first set on line 2)");
	/* values, one per kind of message */
	BAD_FILE("[client]\nreplicas = two\n", ":2: [client] replicas: bad number \"two\"");
	BAD_FILE("[client]\nreplicas = 3x\n", ":2: [client] replicas: bad number \"3x\"");
	BAD_FILE("[client]\nreplicas = \n", ":2: [client] replicas: bad number \"\"");
	BAD_FILE("[client]\nreplicas = 9\n", ":2: [client] replicas: \"9\" is out of range (1..8)");
	BAD_FILE("[client]\nreplicas = 0\n", ":2: [client] replicas: \"0\" is out of range (1..8)");
	BAD_FILE("[client]\nreplicas = 99999999999999999999\n",
		 ":2: [client] replicas: \"99999999999999999999\" is out of range (1..8)");
	BAD_FILE("[client]\nconnections_per_node = 65\n",
		 ":2: [client] connections_per_node: \"65\" is out of range (1..64)");
	BAD_FILE("[node]\nsegment_size = 512K\n",
		 ":2: [node] segment_size: \"512K\" is out of range (1M..16T)");
	BAD_FILE("[node]\nsegment_size = 12Q\n",
		 ":2: [node] segment_size: bad size suffix \"Q\" in \"12Q\"");
	BAD_FILE("[node]\nsegment_size = 1GG\n",
		 ":2: [node] segment_size: bad size suffix \"GG\" in \"1GG\"");
	BAD_FILE("[node]\nsegment_size = big\n", ":2: [node] segment_size: bad size \"big\"");
	BAD_FILE("[node]\nsegment_size = 99999999999T\n",
		 ":2: [node] segment_size: \"99999999999T\" is out of range (1M..16T)");
	BAD_FILE("[node]\nsegment_size = 17T\n",
		 ":2: [node] segment_size: \"17T\" is out of range (1M..16T)");
	BAD_FILE("[node]\nalign = 3K\n", ":2: [node] align: \"3K\" is not a power of two");
	BAD_FILE("[node]\nalign = 32\n", ":2: [node] align: \"32\" is out of range (64..2M)");
	BAD_FILE("[node]\nalign = 4M\n", ":2: [node] align: \"4M\" is out of range (64..2M)");
	BAD_FILE("[node]\nhugepages = maybe\n", ":2: [node] hugepages: bad boolean \"maybe\"");
	BAD_FILE("[node]\nhugepages = 2\n", ":2: [node] hugepages: bad boolean \"2\"");
	BAD_FILE("[node]\nnuma_node = 1024\n",
		 ":2: [node] numa_node: bad value \"1024\" (expected none, auto or 0..1023)");
	BAD_FILE("[node]\nnuma_node = -1\n", ":2: [node] numa_node: bad value \"-1\"");
	BAD_FILE("[node]\nsegment = ../etc/x\n", ":2: [node] segment: bad name \"../etc/x\"");
	BAD_FILE("[node]\nsegment = ..\n", ":2: [node] segment: bad name \"..\"");
	BAD_FILE("[client]\nprotocol = udp\n",
		 ":2: [client] protocol: bad value \"udp\" (expected auto, local, tcp or rdma)");
	BAD_FILE("[master]\nallocation_strategy = best\n",
		 ":2: [master] allocation_strategy: bad value \"best\" (expected random or free_ratio)");
	BAD_FILE("[log]\nlevel = loud\n", ":2: [log] level: bad log level \"loud\"");
	BAD_FILE("[master]\neviction_ratio = 1.5\n",
		 ":2: [master] eviction_ratio: \"1.5\" is out of range (0..1)");
	BAD_FILE("[master]\neviction_ratio = -0.1\n",
		 ":2: [master] eviction_ratio: \"-0.1\" is out of range (0..1)");
	BAD_FILE("[master]\neviction_ratio = half\n", ":2: [master] eviction_ratio: bad number \"half\"");
	BAD_FILE("[master]\neviction_ratio = nan\n", ":2: [master] eviction_ratio: bad number \"nan\"");
	BAD_FILE("[master]\neviction_ratio = 1e999\n", ":2: [master] eviction_ratio: bad number");
	BAD_FILE("[master]\nlease_ttl = 5x\n",
		 ":2: [master] lease_ttl: bad duration unit \"x\" in \"5x\"");
	BAD_FILE("[master]\nlease_ttl = 0\n", ":2: [master] lease_ttl: \"0\" is out of range (1ms..1h)");
	BAD_FILE("[master]\nlease_ttl = 2h\n", ":2: [master] lease_ttl: \"2h\" is out of range (1ms..1h)");
	BAD_FILE("[master]\nlease_ttl = 1.5\n", ":2: [master] lease_ttl: bad duration \"1.5\"");
	BAD_FILE("[master]\nlease_ttl = 99999999999999999h\n",
		 ":2: [master] lease_ttl: \"99999999999999999h\" is out of range");
	BAD_FILE("[fuse]\nmode = 0999\n", ":2: [fuse] mode: bad number \"0999\" (expected an octal mode");
	BAD_FILE("[fuse]\nmode = 01777\n", ":2: [fuse] mode: \"01777\" is out of range (0..0777)");
	BAD_FILE("[cluster]\nmaster = localhost\n",
		 ":2: [cluster] master: bad host:port \"localhost\" (expected host:port, [ipv6]:port or :port)");
	BAD_FILE("[cluster]\nmaster = host:0\n",
		 ":2: [cluster] master: port 0 is out of range (1..65535)");
	BAD_FILE("[cluster]\nmaster = host:65536\n", ":2: [cluster] master: bad host:port \"host:65536\"");
	BAD_FILE("[cluster]\nmaster = ::1:80\n", ":2: [cluster] master: bad host:port \"::1:80\"");
	BAD_FILE("[cluster]\nmaster = \n", ":2: [cluster] master: bad host:port \"\"");
	BAD_FILE("[cluster]\nmaster = etcd://\n",
		 ":2: [cluster] master: \"etcd://\" names no etcd endpoint");
	BAD_FILE("[cluster]\nmaster = etcd://h1:2379;h2\n",
		 ":2: [cluster] master: bad etcd endpoint \"h2\" in \"etcd://h1:2379;h2\"");
	BAD_FILE("[master]\nha = zookeeper\n", ":2: [master] ha: ");
	BAD_FILE("[master]\nha_lease_ttl = 500ms\n", ":2: [master] ha_lease_ttl: \"500ms\" is out of range");
	BAD_FILE("[node]\nadvertise = :0\n", ":2: [node] advertise: port 0 is out of range (1..65535)");
	/* the first error wins, and it is the one on its own line */
	BAD_FILE("[client]\nreplicas = 2\ntimeout = 1s\nreplicas = 3\nprotocol = x\n",
		 ":4: [client] replicas: duplicate key");

	/* a named file that does not exist, and a directory */
	snprintf(path, sizeof(path), "%s/missing.ini", tmpdir);
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == KVP_EINVAL);
	{
		char want[400];

		snprintf(want, sizeof(want), "%s: No such file or directory", path);
		CHECK(strcmp(err, want) == 0);
		CHECK(conf_load(&c, tmpdir, NULL, err, sizeof(err)) == KVP_EINVAL);
		snprintf(want, sizeof(want), "%s: Is a directory", tmpdir);
		CHECK(strcmp(err, want) == 0);
	}
	/* NULL: the default file only if it exists */
	if (access(CONF_DEFAULT_FILE, F_OK) != 0) {
		CHECK(conf_load(&c, NULL, NULL, err, sizeof(err)) == 0);
		CHECK(c.file[0] == '\0');
		CHECK(c.node.segment_size == 1ull << 30);
	} else {
		printf("note: %s exists, NULL-path case not checked\n", CONF_DEFAULT_FILE);
	}
	/* a tiny error buffer is not overrun and still NUL-terminated */
	{
		char tiny[8];

		write_file(path, sizeof(path), "t.ini", "[client]\nreplicas = 100\n");
		memset(tiny, 'x', sizeof(tiny));
		CHECK(conf_load(&c, path, NULL, tiny, sizeof(tiny)) == KVP_EINVAL);
		CHECK(memchr(tiny, '\0', sizeof(tiny)) != NULL);
		CHECK(conf_load(&c, path, NULL, NULL, 0) == KVP_EINVAL);
	}
}

static void test_stream(void)
{
	static const char text[] = "[client]\nreplicas = 4\n[log]\nlevel = debug\n";
	struct kvp_conf c;
	char err[512] = "";
	FILE *f;

	conf_defaults(&c);
	f = fmemopen((void *)text, sizeof(text) - 1, "r");
	CHECK(f != NULL);
	CHECK(conf_load_stream(&c, f, "mem.ini", err, sizeof(err)) == 0);
	fclose(f);
	CHECK(c.client.replicas == 4);
	CHECK(strcmp(c.log.level, "debug") == 0);
	CHECK(strcmp(c.file, "mem.ini") == 0);

	f = fmemopen((void *)"[client]\nreplicas = 40\n", 23, "r");
	CHECK(conf_load_stream(&c, f, "mem.ini", err, sizeof(err)) == KVP_EINVAL);
	fclose(f);
	CHECK_PREFIX(err, "mem.ini:2: [client] replicas: \"40\" is out of range (1..8)");
}

/* ---- environment, aliases, overrides ------------------------------------ */

static void test_env(void)
{
	struct kvp_conf c;
	char path[256], err[1024] = "";

	clear_env();
	write_file(path, sizeof(path), "env.ini", "[node]\nsegment_size = 4G\nname = fromfile\n");

	setenv("KVPOOL_NODE_SEGMENT_SIZE", "2G", 1);
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	CHECK(c.node.segment_size == 2ull << 30);		/* env over file */
	CHECK(srcof(&c, "node", "segment_size") == CONF_SRC_ENV);
	CHECK(strcmp(c.node.name, "fromfile") == 0);
	CHECK(srcof(&c, "node", "name") == CONF_SRC_FILE);

	setenv("KVPOOL_MASTER_EVICTION_HIGH_WATERMARK", "0.8", 1);
	setenv("KVPOOL_LOG_LEVEL", "7", 1);
	CHECK(conf_load(&c, NULL, NULL, err, sizeof(err)) == 0 ||
	      access(CONF_DEFAULT_FILE, F_OK) == 0);
	CHECK(c.master.eviction_high_watermark == 0.8);
	CHECK(strcmp(c.log.level, "debug") == 0);
	clear_env();

	/* a bad value names the variable */
	setenv("KVPOOL_CLIENT_REPLICAS", "0", 1);
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == KVP_EINVAL);
	CHECK_PREFIX(err, "env KVPOOL_CLIENT_REPLICAS: [client] replicas: \"0\" is out of range (1..8)");
	clear_env();

	/* typo in a known section: error; unknown section: only a warning */
	setenv("KVPOOL_NODE_SEGMENTSIZE", "1G", 1);
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == KVP_EINVAL);
	CHECK_PREFIX(err, "env KVPOOL_NODE_SEGMENTSIZE: [node] segmentsize: unknown key");
	clear_env();
	setenv("KVPOOL_node_name", "x", 1);
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == KVP_EINVAL);
	CHECK_PREFIX(err, "env KVPOOL_node_name: [node] name: unknown key");
	clear_env();
	setenv("KVPOOL_CLUSTER_TOKEN", "x", 1);
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == KVP_EINVAL);
	CHECK_PREFIX(err, "env KVPOOL_CLUSTER_TOKEN: [cluster] token: unknown key");
	clear_env();
	setenv("KVPOOL_TESTTOOL_THING", "x", 1);
	setenv("KVPOOL_", "x", 1);
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	clear_env();
}

static void test_aliases(void)
{
	struct kvp_conf c;
	char path[256], err[1024] = "";

	clear_env();
	write_file(path, sizeof(path), "alias.ini", "[client]\nprotocol = local\n");

	setenv("MOONCAKE_MASTER_SERVER_ADDR", "10.1.2.3:50051", 1);
	setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "3355443200", 1);
	setenv("MOONCAKE_LOCAL_BUFFER_SIZE", "512MB", 1);
	setenv("MOONCAKE_PROTOCOL", "TCP", 1);
	setenv("MOONCAKE_RDMA_DEVICES", "mlx5_0,mlx5_1", 1);
	setenv("MOONCAKE_METADATA_SERVER", "http://10.1.2.3:15002/metadata", 1);
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	if (err[0])
		fprintf(stderr, "aliases: %s\n", err);
	CHECK(strcmp(c.cluster.master, "10.1.2.3:50051") == 0);
	CHECK(c.node.segment_size == 3355443200ull);
	CHECK(c.client.local_buffer_size == 512ull << 20);
	CHECK(strcmp(c.client.protocol, "tcp") == 0);
	CHECK(srcof(&c, "client", "protocol") == CONF_SRC_ENV);
	CHECK(strcmp(c.rdma.devices, "mlx5_0,mlx5_1") == 0);
	CHECK(strcmp(c.cluster.metadata_server, "http://10.1.2.3:15002/metadata") == 0);
	CHECK(srcof(&c, "cluster", "metadata_server") == CONF_SRC_ENV);

	/* the spellings engines' docs use */
	setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", " 2 GB ", 1);
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	CHECK(c.node.segment_size == 2ull << 30);
	setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "1.5GB", 1);
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	CHECK(c.node.segment_size == 3ull << 29);

	/* KVPOOL_* wins over MOONCAKE_* */
	setenv("KVPOOL_NODE_SEGMENT_SIZE", "8G", 1);
	setenv("KVPOOL_CLIENT_PROTOCOL", "rdma", 1);
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	CHECK(c.node.segment_size == 8ull << 30);
	CHECK(strcmp(c.client.protocol, "rdma") == 0);
	unsetenv("KVPOOL_NODE_SEGMENT_SIZE");
	unsetenv("KVPOOL_CLIENT_PROTOCOL");

	/* a bad alias value names the alias */
	setenv("MOONCAKE_PROTOCOL", "udp", 1);
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == KVP_EINVAL);
	CHECK_PREFIX(err, "env MOONCAKE_PROTOCOL: [client] protocol: bad value \"udp\"");
	setenv("MOONCAKE_PROTOCOL", "rdma", 1);
	setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "4XB", 1);
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == KVP_EINVAL);
	CHECK_PREFIX(err, "env MOONCAKE_GLOBAL_SEGMENT_SIZE: [node] segment_size: bad size suffix");
	clear_env();
}

static void test_overrides(void)
{
	struct kvp_conf c;
	char path[256], err[1024] = "";
	const char *ov[] = { "node.segment_size=3G", "client.replicas=2", "log.level=info", NULL };
	const char *bad1[] = { "client.replicas=0", NULL };
	const char *bad2[] = { "replicas=2", NULL };
	const char *bad3[] = { "client.nope=2", NULL };
	const char *bad4[] = { "clients.replicas=2", NULL };
	char big[400];

	clear_env();
	write_file(path, sizeof(path), "ov.ini", "[node]\nsegment_size = 4G\n[client]\nreplicas = 3\n");
	setenv("KVPOOL_NODE_SEGMENT_SIZE", "2G", 1);
	CHECK(conf_load(&c, path, ov, err, sizeof(err)) == 0);
	CHECK(c.node.segment_size == 3ull << 30);	/* override over env over file */
	CHECK(c.client.replicas == 2);
	CHECK(strcmp(c.log.level, "info") == 0);
	CHECK(srcof(&c, "node", "segment_size") == CONF_SRC_CMDLINE);
	clear_env();

	CHECK(conf_load(&c, path, bad1, err, sizeof(err)) == KVP_EINVAL);
	CHECK_PREFIX(err, "override client.replicas=0: [client] replicas: \"0\" is out of range (1..8)");
	CHECK(conf_load(&c, path, bad2, err, sizeof(err)) == KVP_EINVAL);
	CHECK_PREFIX(err, "override \"replicas=2\": expected section.key=value");
	CHECK(conf_load(&c, path, bad3, err, sizeof(err)) == KVP_EINVAL);
	CHECK_PREFIX(err, "override client.nope=2: [client] nope: unknown key");
	CHECK(conf_load(&c, path, bad4, err, sizeof(err)) == KVP_EINVAL);
	CHECK_PREFIX(err, "override clients.replicas=2: [clients] replicas: unknown section");

	/* conf_set directly, and a value too long for the struct */
	conf_defaults(&c);
	memset(big, 'a', sizeof(big));
	big[sizeof(big) - 1] = '\0';
	CHECK(conf_set(&c, "node", "name", big, CONF_SRC_CMDLINE, err, sizeof(err)) == KVP_EINVAL);
	CHECK_PREFIX(err, "[node] name: value too long (at most 255 bytes)");
	CHECK(conf_set(&c, "node", "name", "n1", CONF_SRC_CMDLINE, err, sizeof(err)) == 0);
	CHECK(strcmp(c.node.name, "n1") == 0);
	CHECK(conf_set(&c, "node", "name", NULL, CONF_SRC_CMDLINE, err, sizeof(err)) == KVP_EINVAL);
	/* a failed set leaves the old value */
	CHECK(conf_set(&c, "client", "replicas", "x", CONF_SRC_CMDLINE, err, sizeof(err)) == KVP_EINVAL);
	CHECK(c.client.replicas == 1);
	/* the empty string unsets a host:port whose default is unset */
	CHECK(conf_set(&c, "node", "advertise", "h:1", CONF_SRC_CMDLINE, err, sizeof(err)) == 0);
	CHECK(conf_set(&c, "node", "advertise", "", CONF_SRC_CMDLINE, err, sizeof(err)) == 0);
	CHECK(c.node.advertise[0] == '\0');
	/* port 0 is fine where the key allows it (tests bind :0) */
	CHECK(conf_set(&c, "node", "listen", "127.0.0.1:0", CONF_SRC_CMDLINE, err, sizeof(err)) == 0);
	CHECK(conf_set(&c, "fuse", "mode", "0o755", CONF_SRC_CMDLINE, err, sizeof(err)) == 0);
	CHECK(c.fuse.mode == 0755);
}

/* ---- parsers -------------------------------------------------------------- */

static void test_parse_size(void)
{
	static const struct { const char *s; uint64_t v; } ok[] = {
		{ "0", 0 }, { "1", 1 }, { "1B", 1 }, { "1b", 1 }, { "1K", 1024 }, { "1k", 1024 },
		{ "1KB", 1024 }, { "1KiB", 1024 }, { "1kib", 1024 }, { "64K", 65536 },
		{ "1M", 1ull << 20 }, { "1G", 1ull << 30 }, { "1 G", 1ull << 30 },
		{ " 1G ", 1ull << 30 }, { "1T", 1ull << 40 }, { "1.5G", 3ull << 29 },
		{ "0.5K", 512 }, { "1.0009765625K", 1025 }, { "1048576", 1048576 },
		{ "18446744073709551615", UINT64_MAX }, { "17179869183G", 17179869183ull << 30 },
		{ "16777215T", 16777215ull << 40 },
	};
	static const char *const bad[] = {
		"", " ", "K", "-1", "+1", "1.5", "1.", ".5K", "1KBB", "1iB", "1P", "1E", "1 K B",
		"99999999999T", "18446744073709551616", "17179869184G", "16777216T", "0x10", "1,5G",
		"1e3",
	};
	uint64_t v;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		v = 12345;
		CHECK(conf_parse_size(ok[i].s, &v) == 0);
		if (v != ok[i].v)
			fprintf(stderr, "size \"%s\" = %llu, want %llu\n", ok[i].s,
				(unsigned long long)v, (unsigned long long)ok[i].v);
		CHECK(v == ok[i].v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 12345;
		if (conf_parse_size(bad[i], &v) != KVP_EINVAL)
			fprintf(stderr, "size \"%s\" accepted\n", bad[i]);
		CHECK(conf_parse_size(bad[i], &v) == KVP_EINVAL);
		CHECK(v == 12345);
	}
	CHECK(conf_parse_size(NULL, &v) == KVP_EINVAL);
}

static void test_parse_duration(void)
{
	static const struct { const char *s; uint64_t v; } ok[] = {
		{ "0", 0 }, { "500", 500 }, { "500ms", 500 }, { "500MS", 500 }, { "5s", 5000 },
		{ "5S", 5000 }, { "2m", 120000 }, { "1h", 3600000 }, { "1.5s", 1500 },
		{ "0.25m", 15000 }, { "1 s", 1000 }, { "18446744073709551615", UINT64_MAX },
		{ "18446744073709551ms", 18446744073709551ull },
	};
	static const char *const bad[] = {
		"", "s", "1.5", "5x", "5sec", "-1s", "1d", "5 m s", "18446744073709552s",
		"99999999999999999h", "1e3", "1..5s",
	};
	uint64_t v;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		v = 12345;
		CHECK(conf_parse_duration(ok[i].s, &v) == 0);
		if (v != ok[i].v)
			fprintf(stderr, "duration \"%s\" = %llu, want %llu\n", ok[i].s,
				(unsigned long long)v, (unsigned long long)ok[i].v);
		CHECK(v == ok[i].v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (conf_parse_duration(bad[i], &v) != KVP_EINVAL)
			fprintf(stderr, "duration \"%s\" accepted\n", bad[i]);
		CHECK(conf_parse_duration(bad[i], &v) == KVP_EINVAL);
	}
}

static void test_parse_hostport(void)
{
	static const struct { const char *s, *host; unsigned port; } ok[] = {
		{ "127.0.0.1:15001", "127.0.0.1", 15001 }, { "[::1]:80", "::1", 80 },
		{ ":15001", "", 15001 }, { "host:0", "host", 0 }, { "host:65535", "host", 65535 },
		{ "[fe80::1:2]:1", "fe80::1:2", 1 }, { "a_b.example-1:1", "a_b.example-1", 1 },
		{ "0.0.0.0:15010", "0.0.0.0", 15010 }, { "host:00080", "host", 80 },
	};
	static const char *const bad[] = {
		"", "host", "host:", ":", "host:65536", "host:123456", "host:abc", "host:+1",
		"host:-1", "::1:80", "[::1]", "[::1]80", "[::1]:", "[zz]:80", "[]:80",
		"ho st:1", "-h:1", ".h:1", "h/x:1", "[::1:80", "host:1 ",
	};
	char host[64];
	uint16_t port;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		CHECK(conf_parse_hostport(ok[i].s, host, sizeof(host), &port) == 0);
		CHECK(strcmp(host, ok[i].host) == 0);
		CHECK(port == ok[i].port);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (conf_parse_hostport(bad[i], host, sizeof(host), &port) != KVP_EINVAL)
			fprintf(stderr, "host:port \"%s\" accepted\n", bad[i]);
		CHECK(conf_parse_hostport(bad[i], host, sizeof(host), &port) == KVP_EINVAL);
	}
	/* the host must fit the caller's buffer */
	CHECK(conf_parse_hostport("abcdefgh:1", host, 8, &port) == KVP_EINVAL);
	CHECK(conf_parse_hostport("abcdefg:1", host, 8, &port) == 0);
	CHECK(conf_parse_hostport("abcdefgh:1", NULL, 0, NULL) == 0);
}

/* ---- token file --------------------------------------------------------- */

static void test_token(void)
{
	struct kvp_conf c;
	char ini[256], tok[256], text[400], err[1024] = "", want[600];

	clear_env();
	write_bytes(tok, sizeof(tok), "token", "  s3cret-token \t\nsecond line\n", 29, 0600);
	snprintf(text, sizeof(text), "[cluster]\ntoken_file = %s\n", tok);
	write_file(ini, sizeof(ini), "tok.ini", text);
	CHECK(conf_load(&c, ini, NULL, err, sizeof(err)) == 0);
	if (err[0])
		fprintf(stderr, "token: %s\n", err);
	CHECK(strcmp(c.cluster.token, "s3cret-token") == 0);

	/* the token never shows in conf_print */
	{
		char *buf = NULL;
		size_t len = 0;
		FILE *m = open_memstream(&buf, &len);

		conf_print(&c, m);
		fclose(m);
		CHECK(strstr(buf, "s3cret") == NULL);
		free(buf);
	}

	chmod(tok, 0644);
	CHECK(conf_load(&c, ini, NULL, err, sizeof(err)) == KVP_EINVAL);
	snprintf(want, sizeof(want), "[cluster] token_file: %s: mode 0644 lets group or other "
		 "read the token; run chmod 600 %s", tok, tok);
	CHECK(strcmp(err, want) == 0);
	chmod(tok, 0640);
	CHECK(conf_load(&c, ini, NULL, err, sizeof(err)) == KVP_EINVAL);
	CHECK_CONTAINS(err, "mode 0640");
	chmod(tok, 0604);
	CHECK(conf_load(&c, ini, NULL, err, sizeof(err)) == KVP_EINVAL);
	chmod(tok, 0400);
	CHECK(conf_load(&c, ini, NULL, err, sizeof(err)) == 0);

	write_bytes(tok, sizeof(tok), "token", "   \nreal\n", 9, 0600);
	CHECK(conf_load(&c, ini, NULL, err, sizeof(err)) == KVP_EINVAL);
	CHECK_CONTAINS(err, "the first line is empty");
	write_bytes(tok, sizeof(tok), "token", "", 0, 0600);
	CHECK(conf_load(&c, ini, NULL, err, sizeof(err)) == KVP_EINVAL);
	CHECK_CONTAINS(err, "the first line is empty");
	write_bytes(tok, sizeof(tok), "token", "no-newline", 10, 0600);
	CHECK(conf_load(&c, ini, NULL, err, sizeof(err)) == 0);
	CHECK(strcmp(c.cluster.token, "no-newline") == 0);
	{
		char longtok[300];

		memset(longtok, 'k', sizeof(longtok));
		write_bytes(tok, sizeof(tok), "token", longtok, sizeof(longtok), 0600);
		CHECK(conf_load(&c, ini, NULL, err, sizeof(err)) == KVP_EINVAL);
		CHECK_CONTAINS(err, "token longer than 255 bytes");
	}

	/* missing, or a directory; token_file through the environment */
	unlink(tok);
	CHECK(conf_load(&c, ini, NULL, err, sizeof(err)) == KVP_EINVAL);
	snprintf(want, sizeof(want), "[cluster] token_file: %s: No such file or directory", tok);
	CHECK(strcmp(err, want) == 0);
	setenv("KVPOOL_CLUSTER_TOKEN_FILE", tmpdir, 1);
	CHECK(conf_load(&c, ini, NULL, err, sizeof(err)) == KVP_EINVAL);
	CHECK_CONTAINS(err, "not a regular file");
	write_bytes(tok, sizeof(tok), "token2", "envtok\n", 7, 0600);
	setenv("KVPOOL_CLUSTER_TOKEN_FILE", tok, 1);
	CHECK(conf_load(&c, ini, NULL, err, sizeof(err)) == 0);
	CHECK(strcmp(c.cluster.token, "envtok") == 0);
	clear_env();
}

/* ---- output ------------------------------------------------------------- */

static void test_print(void)
{
	struct kvp_conf c;
	const char *ov[] = { "client.replicas=3", NULL };
	char path[256], err[1024] = "", want[512];
	char *buf = NULL;
	size_t len = 0;
	FILE *m;
	int lines = 0;

	clear_env();
	write_file(path, sizeof(path), "print.ini", "[node]\nname = n1\n");
	setenv("KVPOOL_NODE_SEGMENT_SIZE", "2G", 1);
	setenv("MOONCAKE_PROTOCOL", "tcp", 1);
	CHECK(conf_load(&c, path, ov, err, sizeof(err)) == 0);
	m = open_memstream(&buf, &len);
	conf_print(&c, m);
	fclose(m);
	clear_env();

	for (char *p = buf; *p; p++)
		lines += *p == '\n';
	CHECK(lines == (int)conf_table_len);
	snprintf(want, sizeof(want), "\nnode.name = n1   # file %s\n", path);
	CHECK_CONTAINS(buf, want);
	CHECK_CONTAINS(buf, "\nnode.segment_size = 2G   # env KVPOOL_NODE_SEGMENT_SIZE\n");
	CHECK_CONTAINS(buf, "\nclient.protocol = tcp   # env MOONCAKE_PROTOCOL\n");
	CHECK_CONTAINS(buf, "\nclient.replicas = 3   # cmdline\n");
	CHECK_CONTAINS(buf, "\nlog.level = notice   # default\n");
	CHECK_CONTAINS(buf, "\nnode.advertise = \"\"   # default\n");
	CHECK_CONTAINS(buf, "\nmaster.eviction_high_watermark = 0.98   # default\n");
	CHECK_CONTAINS(buf, "\nfuse.mode = 0644   # default\n");
	CHECK_CONTAINS(buf, "\nmaster.lease_ttl = 5s   # default\n");
	CHECK_PREFIX(buf, "cluster.master = 127.0.0.1:15001   # default\n");
	free(buf);
}

static void test_apply_live(void)
{
	struct kvp_conf cur, next;
	char err[256];

	conf_defaults(&cur);
	conf_defaults(&next);
	CHECK(conf_apply_live(&cur, &next) == 0);
	CHECK(conf_set(&next, "master", "lease_ttl", "7s", CONF_SRC_FILE, err, sizeof(err)) == 0);
	CHECK(conf_set(&next, "log", "level", "debug", CONF_SRC_FILE, err, sizeof(err)) == 0);
	CHECK(conf_set(&next, "master", "eviction_ratio", "0.2", CONF_SRC_FILE, err, sizeof(err)) == 0);
	CHECK(conf_set(&next, "node", "segment_size", "2G", CONF_SRC_FILE, err, sizeof(err)) == 0);
	CHECK(conf_set(&next, "node", "listen", ":1", CONF_SRC_FILE, err, sizeof(err)) == 0);
	CHECK(conf_apply_live(&cur, &next) == 2);
	CHECK(cur.master.lease_ttl == 7000);
	CHECK(strcmp(cur.log.level, "debug") == 0);
	CHECK(cur.master.eviction_ratio == 0.2);
	CHECK(srcof(&cur, "master", "lease_ttl") == CONF_SRC_FILE);
	CHECK(cur.node.segment_size == 1ull << 30);
	CHECK(strcmp(cur.node.listen, "0.0.0.0:15010") == 0);
	CHECK(srcof(&cur, "node", "segment_size") == CONF_SRC_DEFAULT);
}

/* ---- several files (kvpool-node@.service: -c kvpool.ini -c node-%i.ini) --- */

static void test_files(void)
{
	struct kvp_conf c, next;
	char base[256], inst[256], inst2[256], dup[256], tok[256], text[512];
	char err[1024] = "", want[600];
	const char *both[2], *rev[2], *three[3];
	const char *ov[] = { "client.replicas=5", NULL };
	const char *many[CONF_MAX_FILES + 1];
	char *buf = NULL;
	size_t len = 0;
	FILE *m;

	clear_env();
	write_file(base, sizeof(base), "base.ini",
		   "[cluster]\nmaster = 10.0.0.1:15001\n"
		   "[node]\nname = base\nsegment_size = 2G\n"
		   "[client]\nreplicas = 2\n"
		   "[log]\nlevel = info\n");
	write_file(inst, sizeof(inst), "node-a.ini",
		   "# per-instance keys\n[node]\nname = a\nlisten = 127.0.0.1:1234\n"
		   "[log]\nlevel = debug\n");
	both[0] = base;
	both[1] = inst;
	CHECK(conf_load_files(&c, both, 2, NULL, err, sizeof(err)) == 0);
	if (err[0])
		fprintf(stderr, "files: %s\n", err);
	CHECK(strcmp(c.node.name, "a") == 0);		/* later file wins */
	CHECK(strcmp(c.log.level, "debug") == 0);
	CHECK(strcmp(c.node.listen, "127.0.0.1:1234") == 0);
	CHECK(c.node.segment_size == 2ull << 30);	/* only in the first */
	CHECK(strcmp(c.cluster.master, "10.0.0.1:15001") == 0);
	CHECK(c.client.replicas == 2);
	CHECK(srcof(&c, "node", "name") == CONF_SRC_FILE);
	CHECK(srcof(&c, "node", "align") == CONF_SRC_DEFAULT);
	CHECK(strcmp(c.file, base) == 0);		/* the base file */
	CHECK(c.nfiles == 2);
	CHECK(strcmp(c.files[0], base) == 0 && strcmp(c.files[1], inst) == 0);

	/* conf_print names the file that set each key */
	m = open_memstream(&buf, &len);
	conf_print(&c, m);
	fclose(m);
	snprintf(want, sizeof(want), "\nnode.name = a   # file %s\n", inst);
	CHECK_CONTAINS(buf, want);
	snprintf(want, sizeof(want), "\nnode.segment_size = 2G   # file %s\n", base);
	CHECK_CONTAINS(buf, want);
	free(buf);
	buf = NULL;

	/* the other order: the base file wins */
	rev[0] = inst;
	rev[1] = base;
	CHECK(conf_load_files(&c, rev, 2, NULL, err, sizeof(err)) == 0);
	CHECK(strcmp(c.node.name, "base") == 0);
	CHECK(strcmp(c.log.level, "info") == 0);
	CHECK(strcmp(c.node.listen, "127.0.0.1:1234") == 0);

	/* one file is the same as conf_load */
	CHECK(conf_load_files(&c, both, 1, NULL, err, sizeof(err)) == 0);
	CHECK(strcmp(c.node.name, "base") == 0 && c.nfiles == 1);

	/* environment and overrides still win over every file */
	setenv("KVPOOL_NODE_NAME", "fromenv", 1);
	setenv("KVPOOL_CLIENT_REPLICAS", "3", 1);
	CHECK(conf_load_files(&c, both, 2, ov, err, sizeof(err)) == 0);
	CHECK(strcmp(c.node.name, "fromenv") == 0);
	CHECK(srcof(&c, "node", "name") == CONF_SRC_ENV);
	CHECK(c.client.replicas == 5);
	CHECK(srcof(&c, "client", "replicas") == CONF_SRC_CMDLINE);
	clear_env();

	/* a duplicate inside one file is still an error, named by its file */
	write_file(dup, sizeof(dup), "node-dup.ini", "[node]\nname = x\n\nname = y\n");
	three[0] = base;
	three[1] = inst;
	three[2] = dup;
	CHECK(conf_load_files(&c, three, 3, NULL, err, sizeof(err)) == KVP_EINVAL);
	snprintf(want, sizeof(want), "%s:4: [node] name: duplicate key (first set on line 2)", dup);
	CHECK_PREFIX(err, want);
	/* a bad value in the second file names the second file */
	write_file(inst2, sizeof(inst2), "node-bad.ini", "[node]\n\nsegment_size = 1K\n");
	both[1] = inst2;
	CHECK(conf_load_files(&c, both, 2, NULL, err, sizeof(err)) == KVP_EINVAL);
	snprintf(want, sizeof(want), "%s:3: [node] segment_size: ", inst2);
	CHECK_PREFIX(err, want);
	/* every named file must exist (the unit names node-%i.ini on purpose) */
	unlink(inst2);
	CHECK(conf_load_files(&c, both, 2, NULL, err, sizeof(err)) == KVP_EINVAL);
	snprintf(want, sizeof(want), "%s: No such file or directory", inst2);
	CHECK(strcmp(err, want) == 0);
	/* too many */
	for (size_t i = 0; i < CONF_MAX_FILES + 1; i++)
		many[i] = base;
	CHECK(conf_load_files(&c, many, CONF_MAX_FILES, NULL, err, sizeof(err)) == 0);
	CHECK(conf_load_files(&c, many, CONF_MAX_FILES + 1, NULL, err, sizeof(err)) == KVP_EINVAL);
	CHECK_CONTAINS(err, "at most 8");

	/* the token file may be named by the instance file */
	write_bytes(tok, sizeof(tok), "token-a", "inst-token\n", 11, 0600);
	snprintf(text, sizeof(text), "[cluster]\ntoken_file = %s\n", tok);
	write_file(inst2, sizeof(inst2), "node-tok.ini", text);
	both[1] = inst2;
	CHECK(conf_load_files(&c, both, 2, NULL, err, sizeof(err)) == 0);
	CHECK(strcmp(c.cluster.token, "inst-token") == 0);

	/* SIGHUP with layered files: a live key changed in the instance file
	 * is applied and then attributed to that file */
	both[1] = inst;
	CHECK(conf_load_files(&c, both, 2, NULL, err, sizeof(err)) == 0);
	write_file(inst2, sizeof(inst2), "node-a2.ini",
		   "[node]\nname = a\nlisten = 127.0.0.1:1234\n[log]\nlevel = err\n"
		   "[master]\nlease_ttl = 9s\n");
	both[1] = inst2;
	CHECK(conf_load_files(&next, both, 2, NULL, err, sizeof(err)) == 0);
	CHECK(conf_apply_live(&c, &next) == 0);
	CHECK(strcmp(c.log.level, "err") == 0);
	CHECK(c.master.lease_ttl == 9000);
	m = open_memstream(&buf, &len);
	conf_print(&c, m);
	fclose(m);
	snprintf(want, sizeof(want), "\nmaster.lease_ttl = 9s   # file %s\n", inst2);
	CHECK_CONTAINS(buf, want);
	snprintf(want, sizeof(want), "\nnode.name = a   # file %s\n", inst);
	CHECK_CONTAINS(buf, want);
	free(buf);
	/* a changed non-live key in the instance file needs a restart */
	write_file(inst2, sizeof(inst2), "node-a3.ini", "[node]\nname = b\n");
	CHECK(conf_load_files(&next, both, 2, NULL, err, sizeof(err)) == 0);
	CHECK(conf_apply_live(&c, &next) == 2);	/* name, listen */
	CHECK(strcmp(c.node.name, "a") == 0);
}

/* Where the repository is: KVP_BUILD's parent (tests/run.sh), else ".". */
static void repo_path(char *buf, size_t len, const char *rel)
{
	const char *b = getenv("KVP_BUILD");

	if (b && *b) {
		char tmp[1024];

		snprintf(tmp, sizeof(tmp), "%s", b);
		snprintf(buf, len, "%s/%s", dirname(tmp), rel);
	} else {
		snprintf(buf, len, "%s", rel);
	}
}

/* "# key = value": a commented-out default of the example */
static bool is_default_line(const char *p)
{
	size_t n;

	if (strncmp(p, "# ", 2) != 0)
		return false;
	n = strspn(p + 2, "abcdefghijklmnopqrstuvwxyz_");
	return n > 0 && strncmp(p + 2 + n, " = ", 3) == 0;
}

static void test_example(void)
{
	char path[1024], err[1024] = "", upath[256];
	char *gen = NULL, *file = NULL, *un = NULL;
	size_t glen = 0, flen = 0, ulen = 0;
	struct kvp_conf c;
	FILE *m, *f;

	clear_env();
	m = open_memstream(&gen, &glen);
	conf_write_example(m);
	fclose(m);

	repo_path(path, sizeof(path), "conf/kvpool.ini");
	f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		tl_failures++;
		free(gen);
		return;
	}
	m = open_memstream(&file, &flen);
	for (int ch; (ch = fgetc(f)) != EOF;)
		fputc(ch, m);
	fclose(m);
	fclose(f);
	if (glen != flen || memcmp(gen, file, glen) != 0) {
		size_t i = 0, line = 1;

		for (; i < glen && i < flen && gen[i] == file[i]; i++)
			line += gen[i] == '\n';
		fprintf(stderr, "%s differs from conf_write_example() at line %zu; regenerate "
			"with: build/tests/t_conf --write-example > conf/kvpool.ini\n", path, line);
		tl_failures++;
	}

	/* loads cleanly and sets nothing */
	CHECK(conf_load(&c, path, NULL, err, sizeof(err)) == 0);
	if (err[0])
		fprintf(stderr, "example: %s\n", err);
	for (size_t i = 0; i < conf_table_len; i++)
		CHECK(c.src[i] == CONF_SRC_DEFAULT);

	/* every key is there; uncommented, the defaults load and change nothing */
	m = open_memstream(&un, &ulen);
	for (char *p = gen, *nl; *p; p = nl + 1) {
		nl = strchr(p, '\n');
		if (!nl)
			break;
		if (is_default_line(p))
			fprintf(m, "%.*s\n", (int)(nl - p - 2), p + 2);
		else
			fprintf(m, "%.*s\n", (int)(nl - p), p);
	}
	fclose(m);
	write_file(upath, sizeof(upath), "uncommented.ini", un);
	CHECK(conf_load(&c, upath, NULL, err, sizeof(err)) == 0);
	if (err[0])
		fprintf(stderr, "uncommented example: %s\n", err);
	{
		struct kvp_conf d;

		conf_defaults(&d);
		for (size_t i = 0; i < conf_table_len; i++) {
			char a[CONF_STR + 8], b[CONF_STR + 8];

			if (c.src[i] != CONF_SRC_FILE)
				fprintf(stderr, "example lacks %s.%s\n", conf_table[i].section,
					conf_table[i].key);
			CHECK(c.src[i] == CONF_SRC_FILE);
			conf_format(&c, &conf_table[i], a, sizeof(a));
			conf_format(&d, &conf_table[i], b, sizeof(b));
			CHECK(strcmp(a, b) == 0);
		}
	}
	/* the example documents types, env names, aliases and live keys */
	CHECK_CONTAINS(gen, "[cluster]\n");
	CHECK_CONTAINS(gen, "\n# master = 127.0.0.1:15001\n");
	CHECK_CONTAINS(gen, "\n# name = \"\"\n");
	CHECK_CONTAINS(gen, "KVPOOL_NODE_SEGMENT_SIZE or MOONCAKE_GLOBAL_SEGMENT_SIZE");
	CHECK_CONTAINS(gen, "size, 1M..16T. Env");
	CHECK_CONTAINS(gen, "duration, 1ms..1h; live. Env KVPOOL_MASTER_LEASE_TTL.");
	CHECK_CONTAINS(gen, "one of none, auto or 0..1023");
	free(gen);
	free(file);
	free(un);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--write-example") == 0) {
		conf_write_example(stdout);
		return fflush(stdout) == 0 ? 0 : 1;
	}
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/t_conf.%d.XXXXXX", (int)getpid());
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	atexit(cleanup);
	clear_env();
	log_init("t_conf", LOG_ERR);	/* env warnings are expected here */

	test_table();
	test_defaults();
	test_good_file();
	test_heartbeat_range();
	test_indent_is_not_continuation();
	test_bad_files();
	test_stream();
	test_env();
	test_aliases();
	test_overrides();
	test_parse_size();
	test_parse_duration();
	test_parse_hostport();
	test_token();
	test_print();
	test_apply_live();
	test_files();
	test_example();

	return tl_done();
}

/* kvpool: the command-line tool — put/get/ls/rm/stat/info/pin/exists on a
 * pool through libkvpool, offline `scan` of a segment file, `mount` (the
 * FUSE view, fuse/kvfs.c), `bench` (cli_bench.c) and `replay` of a request
 * trace (replay.c). Single-threaded except bench; replay forks clients.
 * Exit codes: 0 ok, 1 error, 2 usage/configuration, 3 not found.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_bench.h"
#include "cli_ns.h"
#include "cli_token.h"
#include "cli_top.h"
#include "cli_util.h"
#include "conf.h"
#include "kvfs.h"
#include "kvpool.h"
#include "kvpool_i.h"
#include "log.h"
#include "replay.h"
#include "scan.h"
#include "selftest.h"

struct cli {
	const char *cfgfiles[CONF_MAX_FILES];	/* -c layers in order; none: the default file */
	size_t ncfgfiles;
	const char *master;		/* --master */
	const char **overrides;		/* -o ..., NULL-terminated */
	size_t noverrides;
	struct kvp_conf conf;		/* effective configuration, handed to the library */
};

struct cli_cmd {
	const char *name;
	int (*fn)(struct cli *c, int argc, char **argv);
	const char *synopsis;
	const char *help;
};

static const struct cli_cmd *cli_cmd_find(const char *name);
static int cli_cmd_help(const char *name);

/* ---- shared helpers ---------------------------------------------------- */

static struct kvp *cli_connect(struct cli *c, const char *cmd)
{
	struct kvp *kvp;
	int err = 0;

	kvp = kvp_open_conf(&c->conf, &err);
	if (!kvp) {
		if (err == 0)
			err = KVP_ECONN;
		cli_error(cmd, c->conf.cluster.master[0] ? c->conf.cluster.master : "master",
			  err, NULL);
	}
	return kvp;
}

/* Standard option handling shared by every command: -h/--help prints the
 * command's help; an unknown option or a missing argument is a usage error.
 * Returns the getopt result, or -2 after handling help/usage (*rc set). */
static int cli_getopt(int argc, char **argv, const char *shortopts,
		      const struct option *longopts, const char *cmd, int *rc)
{
	int ch = getopt_long(argc, argv, shortopts, longopts, NULL);

	switch (ch) {
	case 'h':
		*rc = cli_cmd_help(cmd);
		return -2;
	case '?':
		if (optopt && optopt != '?')
			*rc = cli_usage_error(cmd, "unknown option or missing argument: -%c", optopt);
		else
			*rc = cli_usage_error(cmd, "unknown option or missing argument: %s",
					      argv[optind - 1]);
		return -2;
	case ':':
		*rc = cli_usage_error(cmd, "option needs an argument: %s", argv[optind - 1]);
		return -2;
	default:
		return ch;
	}
}

static void cli_getopt_reset(void)
{
	optind = 0;	/* glibc: full re-initialisation for the next argv */
	opterr = 0;
}

static int cli_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads all of fd into a malloc'd buffer; refuses more than max bytes.
 * 0, -EFBIG (more than max), or -errno. */
static int cli_read_fd(int fd, uint64_t max, char **bufp, size_t *lenp)
{
	struct stat st;
	size_t cap = 1 << 20, len = 0;
	char *buf;

	/* A regular file's size is known: check it before reading and size
	 * the buffer once (plus one byte to notice a file that grew). */
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		if ((uint64_t)st.st_size > max)
			return -EFBIG;
		cap = (size_t)st.st_size + 1;
	}
	if (cap > max + 1)
		cap = max + 1;
	buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n;

		if (len == cap) {
			size_t ncap;
			char *nbuf;

			if (cap > max) {
				free(buf);
				return -EFBIG;
			}
			ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
			nbuf = realloc(buf, ncap);
			if (!nbuf) {
				free(buf);
				return -ENOMEM;
			}
			buf = nbuf;
			cap = ncap;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0) {
			int err = -errno;

			if (err == -EINTR)
				continue;
			free(buf);
			return err;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > max) {
		free(buf);
		return -EFBIG;
	}
	*bufp = buf;
	*lenp = len;
	return 0;
}

/* Writes buf to path atomically: a temporary file in the same directory,
 * then rename, so readers never see a half-written value. An existing
 * file's mode is kept. 0 or -errno. */
static int cli_write_file_atomic(const char *path, const void *buf, size_t len)
{
	char dirbuf[PATH_MAX], basebuf[PATH_MAX], tmp[PATH_MAX];
	struct stat st;
	mode_t mode, um;
	int fd, err;

	if (strlen(path) >= sizeof(dirbuf))
		return -ENAMETOOLONG;
	strcpy(dirbuf, path);
	strcpy(basebuf, path);
	if (snprintf(tmp, sizeof(tmp), "%s/.%s.kvpool-XXXXXX", dirname(dirbuf),
		     basename(basebuf)) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return -EISDIR;
		mode = st.st_mode & 07777;
	} else {
		um = umask(0);
		umask(um);
		mode = 0666 & ~um;
	}
	fd = mkstemp(tmp);
	if (fd < 0)
		return -errno;
	err = cli_write_all(fd, buf, len);
	if (err)
		goto out_unlink;
	if (fchmod(fd, mode) < 0 || fsync(fd) < 0) {
		err = -errno;
		goto out_unlink;
	}
	if (close(fd) < 0) {
		err = -errno;
		fd = -1;
		goto out_unlink;
	}
	fd = -1;
	if (rename(tmp, path) < 0) {
		err = -errno;
		goto out_unlink;
	}
	return 0;

out_unlink:
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	return err;
}

/* ---- put / get / exists / pin ------------------------------------------ */

static int cmd_put(struct cli *c, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "exist-ok", no_argument, NULL, 'e' },
		{ "replicas", required_argument, NULL, 'r' },
		{ "upsert", no_argument, NULL, 'f' },
		{ "force", no_argument, NULL, 'f' },
		{ "pin", required_argument, NULL, 'p' },
		{ "node", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvp_put_opts o = { 0 };
	bool exist_ok = false;
	const char *key, *path = NULL;
	uint64_t replicas = 0;
	size_t len = 0;
	char *buf = NULL;
	struct kvp *kvp;
	int ch, rc = 0, fd = 0, err;

	cli_getopt_reset();
	while ((ch = cli_getopt(argc, argv, "her:fp:n:", lo, "put", &rc)) != -1) {
		if (ch == -2)
			return rc;
		if (ch == 'e')
			exist_ok = true;
		else if (ch == 'f')
			o.flags |= KVP_PUT_UPSERT;
		else if (ch == 'n')
			o.preferred_segment = optarg;
		else if (ch == 'p' && strcmp(optarg, "default") == 0)
			o.flags |= KVP_PUT_SOFT_PIN;	/* [master] soft_pin_ttl */
		else if (ch == 'p' && (conf_parse_duration(optarg, &o.pin_ttl_ms) < 0 ||
				       !o.pin_ttl_ms))
			return cli_usage_error("put", "--pin: a duration such as 10m, or default");
		else if (ch == 'p')
			o.flags |= KVP_PUT_SOFT_PIN;
		else if (ch == 'r' && (cli_parse_u64(optarg, &replicas) < 0 || replicas < 1 ||
				       replicas > KVP_MAX_REPLICAS))
			return cli_usage_error("put", "--replicas: a number 1..%d", KVP_MAX_REPLICAS);
	}
	if (argc - optind < 1 || argc - optind > 2)
		return cli_usage_error("put", "expected KEY [FILE|-]");
	key = argv[optind];
	if (argc - optind == 2 && strcmp(argv[optind + 1], "-") != 0)
		path = argv[optind + 1];
	o.replicas = (uint32_t)replicas;	/* 0: [client] replicas */

	if (path) {
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			cli_errorx("put", "%s: %s", path, strerror(errno));
			return CLI_EXIT_ERR;
		}
	}
	err = cli_read_fd(fd, c->conf.cluster.max_object_size, &buf, &len);
	if (path)
		close(fd);
	if (err == -EFBIG) {
		cli_error("put", key, KVP_ETOOBIG, "%s is larger than cluster.max_object_size (%" PRIu64
			  " bytes)", path ? path : "input", c->conf.cluster.max_object_size);
		return CLI_EXIT_ERR;
	}
	if (err) {
		cli_errorx("put", "%s: %s", path ? path : "stdin", strerror(-err));
		return CLI_EXIT_ERR;
	}
	if (len == 0) {
		cli_error("put", key, KVP_EINVAL, "empty value: an object holds at least 1 byte");
		free(buf);
		return CLI_EXIT_ERR;
	}

	kvp = cli_connect(c, "put");
	if (!kvp) {
		free(buf);
		return CLI_EXIT_ERR;
	}
	err = kvp_put_opts(kvp, key, buf, len, &o);
	if (err == KVP_EEXIST && exist_ok)
		err = 0;
	if (err)
		cli_error("put", key, err, NULL);
	kvp_close(kvp);
	free(buf);
	return cli_exit_code(err);
}

static int cmd_get(struct cli *c, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *key, *path = NULL;
	struct kvp *kvp;
	void *buf = NULL;
	size_t len = 0;
	int ch, rc = 0, err;

	cli_getopt_reset();
	while ((ch = cli_getopt(argc, argv, "h", lo, "get", &rc)) != -1)
		if (ch == -2)
			return rc;
	if (argc - optind < 1 || argc - optind > 2)
		return cli_usage_error("get", "expected KEY [FILE|-]");
	key = argv[optind];
	if (argc - optind == 2 && strcmp(argv[optind + 1], "-") != 0)
		path = argv[optind + 1];

	kvp = cli_connect(c, "get");
	if (!kvp)
		return CLI_EXIT_ERR;
	err = kvp_get(kvp, key, &buf, &len);
	kvp_close(kvp);
	if (err) {
		cli_error("get", key, err, NULL);
		return cli_exit_code(err);
	}
	if (path)
		err = cli_write_file_atomic(path, buf, len);
	else
		err = cli_write_all(STDOUT_FILENO, buf, len);
	kvp_free(buf);
	if (err) {
		cli_errorx("get", "%s: %s", path ? path : "stdout", strerror(-err));
		return CLI_EXIT_ERR;
	}
	return CLI_EXIT_OK;
}

static int cmd_exists(struct cli *c, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "quiet", no_argument, NULL, 'q' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvp *kvp;
	bool quiet = false;
	int ch, rc = 0, r;

	cli_getopt_reset();
	while ((ch = cli_getopt(argc, argv, "hq", lo, "exists", &rc)) != -1) {
		if (ch == -2)
			return rc;
		if (ch == 'q')
			quiet = true;
	}
	if (argc - optind != 1)
		return cli_usage_error("exists", "expected KEY");
	kvp = cli_connect(c, "exists");
	if (!kvp)
		return CLI_EXIT_ERR;
	r = kvp_exists(kvp, argv[optind]);
	kvp_close(kvp);
	if (r < 0) {
		cli_error("exists", argv[optind], r, NULL);
		return CLI_EXIT_ERR;
	}
	if (!quiet)
		puts(r ? "yes" : "no");
	return r ? CLI_EXIT_OK : CLI_EXIT_NOTFOUND;
}

static int cmd_pin(struct cli *c, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvp *kvp;
	uint64_t ttl;
	int ch, rc = 0, err;

	cli_getopt_reset();
	while ((ch = cli_getopt(argc, argv, "h", lo, "pin", &rc)) != -1)
		if (ch == -2)
			return rc;
	if (argc - optind != 2)
		return cli_usage_error("pin", "expected KEY TTL");
	if (conf_parse_duration(argv[optind + 1], &ttl) < 0)
		return cli_usage_error("pin", "bad TTL '%s' (e.g. 30s, 5m, 1h, 0 to unpin)",
				       argv[optind + 1]);
	kvp = cli_connect(c, "pin");
	if (!kvp)
		return CLI_EXIT_ERR;
	err = kvp_pin(kvp, argv[optind], ttl);
	kvp_close(kvp);
	if (err)
		cli_error("pin", argv[optind], err, NULL);
	return cli_exit_code(err);
}

/* ---- ls ---------------------------------------------------------------- */

struct ls_opts {
	bool lng, json;
	char delim;
	uint64_t limit;		/* 0: all */
};

static void ls_print(struct kvp *kvp, const struct ls_opts *o, const struct kvp_list_entry *e,
		     bool first)
{
	struct kvp_stat st;
	int nrep = -1;
	char tbuf[32];

	if (o->lng && !e->is_prefix) {
		memset(&st, 0, sizeof(st));
		/* Replica counts are not in the listing; a key removed since
		 * the page was read shows "-". */
		if (kvp_stat(kvp, e->name, &st) == 0)
			nrep = (int)st.nreplicas;
	}
	if (o->json) {
		fputs(first ? "[\n  {\"name\": " : ",\n  {\"name\": ", stdout);
		cli_json_str(stdout, e->name, strlen(e->name));
		if (e->is_prefix) {
			fputs(", \"prefix\": true}", stdout);
			return;
		}
		printf(", \"prefix\": false, \"size\": %" PRIu64 ", \"put_time_ns\": %" PRIu64,
		       e->size, e->put_time_ns);
		if (o->lng) {
			if (nrep >= 0)
				printf(", \"replicas\": %d", nrep);
			else
				fputs(", \"replicas\": null", stdout);
		}
		putchar('}');
		return;
	}
	if (o->lng) {
		if (e->is_prefix) {
			printf("%12s  %19s  %3s  ", "PRE", "", "");
		} else {
			char rbuf[8];

			snprintf(rbuf, sizeof(rbuf), nrep >= 0 ? "%d" : "-", nrep);
			printf("%12" PRIu64 "  %19s  %3s  ", e->size,
			       cli_time_str(e->put_time_ns, tbuf, sizeof(tbuf)), rbuf);
		}
	}
	/* Plain output is the key's bytes, one per line, for scripts; the
	 * long form is for people, so control bytes are shown escaped. */
	if (o->lng)
		cli_print_key(stdout, e->name);
	else
		fputs(e->name, stdout);
	putchar('\n');
}

static int cmd_ls(struct cli *c, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "long", no_argument, NULL, 'l' },
		{ "delimiter", required_argument, NULL, 'd' },
		{ "limit", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	struct ls_opts o = { 0 };
	const char *prefix = "";
	char *cursor = NULL;
	struct kvp *kvp;
	uint64_t shown = 0;
	int ch, rc = 0, err = 0;

	cli_getopt_reset();
	while ((ch = cli_getopt(argc, argv, "hld:n:", lo, "ls", &rc)) != -1) {
		switch (ch) {
		case -2:
			return rc;
		case 'l':
			o.lng = true;
			break;
		case 'd':
			if (strlen(optarg) != 1)
				return cli_usage_error("ls", "the delimiter is one byte, e.g. -d /");
			o.delim = optarg[0];
			break;
		case 'n':
			if (cli_parse_u64(optarg, &o.limit) < 0)
				return cli_usage_error("ls", "--limit: a number (0 = no limit)");
			break;
		case 'j':
			o.json = true;
			break;
		}
	}
	if (argc - optind > 1)
		return cli_usage_error("ls", "expected at most one PREFIX");
	if (argc - optind == 1)
		prefix = argv[optind];

	kvp = cli_connect(c, "ls");
	if (!kvp)
		return CLI_EXIT_ERR;
	cursor = strdup("");
	if (!cursor) {
		err = KVP_ENOMEM;
		goto out_close;
	}
	for (;;) {
		struct kvp_list l = { 0 };
		uint32_t page = 1000;
		char *next;

		if (o.limit && o.limit - shown < page)
			page = (uint32_t)(o.limit - shown);
		err = kvp_list(kvp, prefix, o.delim, cursor, page, &l);
		if (err)
			break;
		for (size_t i = 0; i < l.n && (!o.limit || shown < o.limit); i++, shown++)
			ls_print(kvp, &o, &l.entries[i], shown == 0);
		next = strdup(l.next ? l.next : "");
		kvp_list_free(&l);
		if (!next) {
			err = KVP_ENOMEM;
			break;
		}
		free(cursor);
		cursor = next;
		if (!cursor[0] || (o.limit && shown >= o.limit))
			break;
	}
	free(cursor);
	if (o.json)
		fputs(shown ? "\n]\n" : "[]\n", stdout);
out_close:
	kvp_close(kvp);
	if (err) {
		cli_error("ls", prefix[0] ? prefix : NULL, err, NULL);
		return CLI_EXIT_ERR;
	}
	return CLI_EXIT_OK;
}

/* ---- rm ---------------------------------------------------------------- */

static int cmd_rm(struct cli *c, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "force", no_argument, NULL, 'f' },
		{ "prefix", required_argument, NULL, 'p' },
		{ "all", no_argument, NULL, 'a' },
		{ NULL, 0, NULL, 0 },
	};
	const char *prefix = NULL;
	bool all = false;
	int flags = 0, ch, rc = 0, worst = CLI_EXIT_OK;
	size_t nkeys, chunk;
	struct kvp *kvp;
	int *results;

	cli_getopt_reset();
	while ((ch = cli_getopt(argc, argv, "hfp:a", lo, "rm", &rc)) != -1) {
		switch (ch) {
		case -2:
			return rc;
		case 'f':
			flags |= KVP_REMOVE_FORCE;
			break;
		case 'p':
			prefix = optarg;
			break;
		case 'a':
			all = true;
			break;
		}
	}
	nkeys = (size_t)(argc - optind);
	if ((all || prefix) && nkeys)
		return cli_usage_error("rm", "give KEYs, --prefix P or --all, not several");
	if (all && prefix)
		return cli_usage_error("rm", "--prefix and --all exclude each other");
	if (!all && !prefix && !nkeys)
		return cli_usage_error("rm", "expected KEY..., --prefix P or --all");
	if (prefix && !prefix[0])
		return cli_usage_error("rm", "empty --prefix; use --all to remove everything");

	kvp = cli_connect(c, "rm");
	if (!kvp)
		return CLI_EXIT_ERR;
	if (all || prefix) {
		uint64_t count = 0;
		int err = all ? kvp_remove_all(kvp, flags, &count)
			      : kvp_remove_prefix(kvp, prefix, flags, &count);

		struct kvp_list left = { 0 };

		if (err) {
			kvp_close(kvp);
			cli_error("rm", prefix, err, NULL);
			return CLI_EXIT_ERR;
		}
		printf("removed %" PRIu64 " object%s\n", count, count == 1 ? "" : "s");
		/* Without --force the master skips objects under a read lease;
		 * say so rather than let "rm --all" look complete. */
		if (!(flags & KVP_REMOVE_FORCE) &&
		    kvp_list(kvp, prefix ? prefix : "", 0, "", 1, &left) == 0) {
			size_t n = left.n;

			kvp_list_free(&left);
			if (n) {
				kvp_close(kvp);
				cli_error("rm", prefix, KVP_ELEASED, "some objects remain (read leases "
					  "or puts in progress); --force removes leased ones");
				return CLI_EXIT_ERR;
			}
		}
		kvp_close(kvp);
		return CLI_EXIT_OK;
	}

	/* Keys go in batches of at most cluster.max_batch per master call. */
	chunk = c->conf.cluster.max_batch > 0 ? (size_t)c->conf.cluster.max_batch : 256;
	results = calloc(chunk, sizeof(*results));
	if (!results) {
		kvp_close(kvp);
		cli_error("rm", NULL, KVP_ENOMEM, NULL);
		return CLI_EXIT_ERR;
	}
	for (size_t i = 0; i < nkeys; i += chunk) {
		size_t n = nkeys - i < chunk ? nkeys - i : chunk;
		const char *const *keys = (const char *const *)argv + optind + i;
		int err = kvp_batch_remove(kvp, n, keys, flags, results);

		for (size_t j = 0; j < n; j++) {
			int r = err ? err : results[j];
			int code = cli_exit_code(r);

			if (!r)
				continue;
			if (r == KVP_ELEASED)
				cli_error("rm", keys[j], r, "%s; --force removes it anyway",
					  kvp_strerror(r));
			else
				cli_error("rm", keys[j], r, NULL);
			/* "not found" only wins when nothing worse happened. */
			if (worst == CLI_EXIT_OK || code == CLI_EXIT_ERR)
				worst = code;
		}
	}
	free(results);
	kvp_close(kvp);
	return worst;
}

/* ---- stat -------------------------------------------------------------- */

static const char *tier_name(uint8_t tier)
{
	return tier == KVP_TIER_DISK ? "disk" : tier == KVP_TIER_MEM ? "mem" : "?";
}

static void stat_print_json(const char *key, const struct kvp_stat *st)
{
	fputs("{\"key\": ", stdout);
	cli_json_str(stdout, key, strlen(key));
	printf(", \"size\": %" PRIu64 ", \"generation\": %" PRIu64
	       ", \"checksum\": \"%016" PRIx64 "\", \"put_time_ns\": %" PRIu64
	       ", \"access_time_ns\": %" PRIu64 ", \"lease_ms\": %" PRId64
	       ", \"pin_ms\": %" PRId64 ", \"replicas\": [",
	       st->size, st->generation, st->checksum, st->put_time_ns, st->access_time_ns,
	       st->lease_ms, st->pin_ms);
	for (uint32_t i = 0; i < st->nreplicas && i < KVP_MAX_REPLICAS; i++) {
		const struct kvp_replica *r = &st->replicas[i];

		fputs(i ? ", {\"node\": " : "{\"node\": ", stdout);
		cli_json_str(stdout, r->node, strnlen(r->node, sizeof(r->node)));
		printf(", \"segment_id\": %" PRIu32 ", \"tier\": \"%s\", \"offset\": %" PRIu64
		       ", \"alloc_len\": %" PRIu64 "}", r->segment_id, tier_name(r->tier),
		       r->offset, r->alloc_len);
	}
	fputs("]}\n", stdout);
}

static void stat_print(const char *key, const struct kvp_stat *st)
{
	char b1[32], b2[32];

	fputs("key:          ", stdout);
	cli_print_key(stdout, key);
	printf("\nsize:         %" PRIu64 " (%s)\n", st->size, cli_human_size(st->size, b1, sizeof(b1)));
	printf("generation:   %" PRIu64 "\n", st->generation);
	printf("checksum:     xxh3:%016" PRIx64 "\n", st->checksum);
	printf("put time:     %s\n", cli_time_str(st->put_time_ns, b1, sizeof(b1)));
	printf("access time:  %s\n", cli_time_str(st->access_time_ns, b1, sizeof(b1)));
	printf("lease:        %s\n", cli_ms_str(st->lease_ms, b1, sizeof(b1)));
	printf("pin:          %s\n", cli_ms_str(st->pin_ms, b2, sizeof(b2)));
	printf("replicas:     %" PRIu32 "\n", st->nreplicas);
	for (uint32_t i = 0; i < st->nreplicas && i < KVP_MAX_REPLICAS; i++) {
		const struct kvp_replica *r = &st->replicas[i];

		printf("  %.*s:%s:%" PRIu64 "  (segment %" PRIu32 ", %" PRIu64 " bytes allocated)\n",
		       (int)strnlen(r->node, sizeof(r->node)), r->node, tier_name(r->tier),
		       r->offset, r->segment_id, r->alloc_len);
	}
}

static int cmd_stat(struct cli *c, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvp_stat st;
	bool json = false;
	struct kvp *kvp;
	int ch, rc = 0, err;

	cli_getopt_reset();
	while ((ch = cli_getopt(argc, argv, "h", lo, "stat", &rc)) != -1) {
		if (ch == -2)
			return rc;
		if (ch == 'j')
			json = true;
	}
	if (argc - optind != 1)
		return cli_usage_error("stat", "expected KEY");
	kvp = cli_connect(c, "stat");
	if (!kvp)
		return CLI_EXIT_ERR;
	memset(&st, 0, sizeof(st));
	err = kvp_stat(kvp, argv[optind], &st);
	kvp_close(kvp);
	if (err) {
		cli_error("stat", argv[optind], err, NULL);
		return cli_exit_code(err);
	}
	if (json)
		stat_print_json(argv[optind], &st);
	else
		stat_print(argv[optind], &st);
	return CLI_EXIT_OK;
}

/* ---- info -------------------------------------------------------------- */

static void info_print_json(const struct kvp_info *in, const struct kvp_master *ms,
			    const struct kvp_ns_info *ns, size_t nns)
{
	printf("{\"master\": {\"addr\": ");
	cli_json_str(stdout, ms->addr, strnlen(ms->addr, sizeof(ms->addr)));
	fputs(", \"leader\": ", stdout);
	cli_json_str(stdout, ms->name, strnlen(ms->name, sizeof(ms->name)));
	printf(", \"epoch\": %" PRIu64 ", \"ha\": %s}, ", ms->epoch, ms->ha ? "true" : "false");
	printf("\"keys\": %" PRIu64 ", \"bytes_used\": %" PRIu64 ", \"capacity\": %" PRIu64
	       ", \"evictions\": %" PRIu64 ", \"demotions\": %" PRIu64 ", \"leases\": %" PRIu64
	       ", \"nodes\": [", in->keys, in->bytes_used, in->capacity, in->evictions,
	       in->demotions, in->leases);
	for (size_t i = 0; i < in->nnodes; i++) {
		const struct kvp_node_info *n = &in->nodes[i];

		printf("%s\n  {\"segment_id\": %" PRIu32 ", \"name\": ", i ? "," : "", n->segment_id);
		cli_json_str(stdout, n->name, strnlen(n->name, sizeof(n->name)));
		fputs(", \"host_id\": ", stdout);
		cli_json_str(stdout, n->host_id, strnlen(n->host_id, sizeof(n->host_id)));
		fputs(", \"endpoint\": ", stdout);
		cli_json_str(stdout, n->endpoint, strnlen(n->endpoint, sizeof(n->endpoint)));
		fputs(", \"shm_path\": ", stdout);
		cli_json_str(stdout, n->shm_path, strnlen(n->shm_path, sizeof(n->shm_path)));
		printf(", \"capacity\": %" PRIu64 ", \"used\": %" PRIu64 ", \"objects\": %" PRIu64
		       ", \"spill_capacity\": %" PRIu64 ", \"spill_used\": %" PRIu64
		       ", \"draining\": %s, \"numa_node\": %d}",
		       n->capacity, n->used, n->objects, n->spill_capacity, n->spill_used,
		       n->draining ? "true" : "false", n->numa_node);
	}
	fputs(in->nnodes ? "\n], \"namespaces\": " : "], \"namespaces\": ", stdout);
	cli_ns_json(ns, nns);
	fputs("}\n", stdout);
}

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static void info_print(const struct kvp_info *in, const struct kvp_master *ms)
{
	char b1[32], b2[32];

	if (ms->ha)
		printf("master:     %s (leader %s, epoch %" PRIu64 ", elected through etcd)\n",
		       ms->addr[0] ? ms->addr : "-", ms->name[0] ? ms->name : "-", ms->epoch);
	else
		printf("master:     %s\n", ms->addr);
	printf("nodes:      %zu\n", in->nnodes);
	printf("capacity:   %s (%" PRIu64 " bytes)\n", cli_human_size(in->capacity, b1, sizeof(b1)),
	       in->capacity);
	printf("used:       %s (%" PRIu64 " bytes, %.1f%%)\n",
	       cli_human_size(in->bytes_used, b1, sizeof(b1)), in->bytes_used,
	       pct(in->bytes_used, in->capacity));
	printf("keys:       %" PRIu64 "\n", in->keys);
	printf("evictions:  %" PRIu64 "\n", in->evictions);
	printf("demotions:  %" PRIu64 "\n", in->demotions);
	printf("leases:     %" PRIu64 "\n", in->leases);
	if (!in->nnodes)
		return;
	printf("\n%4s  %-20s  %-21s  %10s  %10s  %5s  %8s  %10s  %4s  %s\n", "SEG", "NODE",
	       "ENDPOINT", "CAPACITY", "USED", "USE%", "OBJECTS", "SPILL", "NUMA", "STATE");
	for (size_t i = 0; i < in->nnodes; i++) {
		const struct kvp_node_info *n = &in->nodes[i];
		char numa[8], spill[32];

		snprintf(numa, sizeof(numa), n->numa_node >= 0 ? "%d" : "-", n->numa_node);
		if (n->spill_capacity)
			snprintf(spill, sizeof(spill), "%.0f%% of %s", pct(n->spill_used, n->spill_capacity),
				 cli_human_size(n->spill_capacity, b2, sizeof(b2)));
		else
			snprintf(spill, sizeof(spill), "-");
		printf("%4" PRIu32 "  %-20.*s  %-21.*s  %10s  ", n->segment_id,
		       (int)strnlen(n->name, sizeof(n->name)), n->name,
		       (int)strnlen(n->endpoint, sizeof(n->endpoint)), n->endpoint,
		       cli_human_size(n->capacity, b1, sizeof(b1)));
		printf("%10s  %4.1f%%  %8" PRIu64 "  %10s  %4s  %s\n",
		       cli_human_size(n->used, b2, sizeof(b2)), pct(n->used, n->capacity), n->objects,
		       spill, numa, n->draining ? "draining" : "up");
	}
}

static int cmd_info(struct cli *c, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvp_info in;
	struct kvp_master ms;
	struct kvp_ns_info *ns = NULL;
	size_t nns = 0;
	bool json = false;
	struct kvp *kvp;
	int ch, rc = 0, err;

	cli_getopt_reset();
	while ((ch = cli_getopt(argc, argv, "h", lo, "info", &rc)) != -1) {
		if (ch == -2)
			return rc;
		if (ch == 'j')
			json = true;
	}
	if (argc - optind != 0)
		return cli_usage_error("info", "no arguments expected");
	kvp = cli_connect(c, "info");
	if (!kvp)
		return CLI_EXIT_ERR;
	memset(&in, 0, sizeof(in));
	err = kvp_info(kvp, &in);
	kvp_master(kvp, &ms);	/* after a call: the leader that answered it */
	/* a master before namespaces answers NS_LIST with an error: none */
	if (!err && kvp_namespaces(kvp, &ns, &nns)) {
		ns = NULL;
		nns = 0;
	}
	kvp_close(kvp);
	if (err) {
		cli_error("info", NULL, err, NULL);
		return CLI_EXIT_ERR;
	}
	if (json) {
		info_print_json(&in, &ms, ns, nns);
	} else {
		info_print(&in, &ms);
		if (nns) {
			putchar('\n');
			cli_ns_table(ns, nns);
		}
	}
	kvp_free(ns);
	kvp_info_free(&in);
	return CLI_EXIT_OK;
}

static int cmd_ns(struct cli *c, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	bool json = false;
	struct kvp *kvp;
	int ch, rc = 0, err;

	cli_getopt_reset();
	while ((ch = cli_getopt(argc, argv, "h", lo, "ns", &rc)) != -1) {
		if (ch == -2)
			return rc;
		if (ch == 'j')
			json = true;
	}
	if (argc - optind != 0)
		return cli_usage_error("ns", "no arguments expected");
	kvp = cli_connect(c, "ns");
	if (!kvp)
		return CLI_EXIT_ERR;
	err = cli_ns_print(kvp, json);
	kvp_close(kvp);
	if (err) {
		cli_error("ns", NULL, err, NULL);
		return CLI_EXIT_ERR;
	}
	return CLI_EXIT_OK;
}

/* ---- scan / mount / bench ---------------------------------------------- */

static int cmd_scan(struct cli *c, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-verify", no_argument, NULL, 'N' },
		{ NULL, 0, NULL, 0 },
	};
	bool json = false, verify = true;
	char err[512] = "";
	int ch, rc = 0, r;

	cli_getopt_reset();
	while ((ch = cli_getopt(argc, argv, "h", lo, "scan", &rc)) != -1) {
		if (ch == -2)
			return rc;
		if (ch == 'j')
			json = true;
		else if (ch == 'N')
			verify = false;
	}
	if (argc - optind > 1)
		return cli_usage_error("scan", "expected SEGMENT (a name in /dev/shm or a path)");
	fflush(stdout);
	if (argc == optind) {
		/* No segment: the host's segments and who owns them (orphans). */
		r = scan_host(NULL, json, stdout, err, sizeof(err));
		if (r < 0) {
			cli_errorx("scan", "%s", err);
			return CLI_EXIT_ERR;
		}
		return CLI_EXIT_OK;
	}
	/* scan_file resolves a bare name under /dev/shm, as [node] segment does. */
	r = scan_file(argv[optind], json, verify, stdout, err, sizeof(err));
	if (fflush(stdout) != 0 && r == 0)
		r = -errno;
	if (r == -EBADMSG) {
		cli_errorx("scan", "%s: %s", argv[optind],
			   err[0] ? err : "some extents have bad value checksums");
		return CLI_EXIT_ERR;
	}
	if (r < 0) {
		cli_errorx("scan", "%s: %s", argv[optind], err[0] ? err : strerror(-r));
		return CLI_EXIT_ERR;
	}
	return CLI_EXIT_OK;
}

static int cmd_mount(struct cli *c, int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return cli_cmd_help("mount");
	return kvfs_main(&c->conf, argc, argv);
}

static int cmd_bench(struct cli *c, int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return cli_cmd_help("bench");
	cli_getopt_reset();
	return cli_bench_main(&c->conf, argc, argv);
}

static int cmd_top(struct cli *c, int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return cli_cmd_help("top");
	cli_getopt_reset();
	return cli_top_main(&c->conf, argc, argv);
}

static int cmd_replay(struct cli *c, int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return cli_cmd_help("replay");
	cli_getopt_reset();
	return replay_main(&c->conf, argc, argv);
}

static int cmd_token(struct cli *c, int argc, char **argv)
{
	(void)c;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return cli_cmd_help("token");
	return cli_token_main(argc, argv);
}

static int cmd_selftest(struct cli *c, int argc, char **argv)
{
	return selftest_main(&c->conf, argc, argv);
}

/* ---- command table and help -------------------------------------------- */

static const struct cli_cmd cli_cmds[] = {
	{ "put", cmd_put, "put KEY [FILE|-] [--replicas N] [--exist-ok | --upsert]\n"
	  "                   [--pin TTL] [--node NAME]",
	  "Stores the bytes of FILE (or stdin when FILE is omitted or -) under KEY.\n"
	  "Putting an existing key fails (exit 1, KVP_EEXIST) unless --exist-ok or\n"
	  "--upsert is given. The value must be 1 byte .. cluster.max_object_size.\n"
	  "\n"
	  "  -r, --replicas N   copies on distinct nodes (default: [client] replicas)\n"
	  "  -e, --exist-ok     an existing KEY is success (its value is not changed)\n"
	  "  -f, --upsert       replace an existing value; readers see the old or the\n"
	  "                     new value whole, never a mix (alias --force)\n"
	  "  -p, --pin TTL      keep the object from eviction for TTL (10m, 2h), or\n"
	  "                     'default' for [master] soft_pin_ttl\n"
	  "  -n, --node NAME    place the first replica on node NAME when it has room\n" },
	{ "get", cmd_get, "get KEY [FILE|-]",
	  "Writes the value of KEY to stdout, or to FILE atomically (a temporary file\n"
	  "in the same directory, then rename). Exit 3 when KEY does not exist.\n" },
	{ "ls", cmd_ls, "ls [PREFIX] [-l] [-d DELIM] [--limit N] [--json]",
	  "Lists keys starting with PREFIX in byte order, paging through the whole pool.\n"
	  "\n"
	  "  -l, --long          size, put time and replica count before each key\n"
	  "  -d, --delimiter C   roll keys that have C after PREFIX up into one entry\n"
	  "                      ending with C (like a directory; shown as PRE with -l)\n"
	  "  -n, --limit N       stop after N entries (0: no limit)\n"
	  "      --json          a JSON array of {name, prefix, size, put_time_ns[, replicas]}\n" },
	{ "rm", cmd_rm, "rm KEY... | --prefix P | --all  [--force]",
	  "Removes objects. Exit 3 when a named KEY did not exist (and nothing worse\n"
	  "happened), 1 on other errors.\n"
	  "\n"
	  "  -p, --prefix P   remove every key starting with P\n"
	  "  -a, --all        remove every key in the pool\n"
	  "  -f, --force      remove even while readers hold a lease\n" },
	{ "stat", cmd_stat, "stat KEY [--json]",
	  "Shows an object's size, generation, checksum, put and access time, remaining\n"
	  "read lease and pin, and its replicas as node:tier:offset.\n" },
	{ "exists", cmd_exists, "exists KEY [-q]",
	  "Prints yes/no; exit 0 when KEY exists, 3 when it does not.\n"
	  "\n"
	  "  -q, --quiet   print nothing, only the exit status\n" },
	{ "info", cmd_info, "info [--json]",
	  "Shows the pool: nodes, capacity, use, keys, evictions, demotions, leases,\n"
	  "and one line per node segment.\n" },
	{ "top", cmd_top, "top [--http HOST:PORT] [-n N | --once] [-d SECONDS]",
	  "The status page's figures in the terminal, refreshed every second like\n"
	  "top(1): keys, memory and spill use per node, hit rate, puts, gets,\n"
	  "evictions, demotions and promotions per second, leases, HA role, epoch\n"
	  "and leader, namespaces. Read from the master's /api/status (docs/monitoring.md);\n"
	  "a node's HTTP address shows that node's own view.\n"
	  "      --http HOST:PORT  the HTTP address (default: the host of cluster.master\n"
	  "                        and the port of master.http_listen)\n"
	  "  -n, --iterations N    N refreshes, then exit\n"
	  "      --once            one plain report (no screen control), for scripts\n"
	  "  -d, --delay SECONDS   between refreshes (default 1)\n"
	  "Keys: q quits, any other key refreshes now.\n" },
	{ "ns", cmd_ns, "ns [--json]",
	  "Lists the namespaces (docs/client.md \"Namespaces\"): each key prefix NAME/\n"
	  "with its model fingerprint (model, dtype, page size, layout, TP ranks), the\n"
	  "keys and bytes under it and how many connections declared it.\n" },
	{ "pin", cmd_pin, "pin KEY TTL",
	  "Protects KEY against eviction for TTL (e.g. 90s, 10m, 1h; 0 unpins).\n" },
	{ "scan", cmd_scan, "scan [SEGMENT] [--json] [--no-verify]",
	  "Lists every complete object in a segment file without a master (offline).\n"
	  "SEGMENT is a name under /dev/shm (as in [node] segment) or a path.\n"
	  "Without SEGMENT: the segments in /dev/shm, their owner and its state\n"
	  "(live, kept for a restart, or orphan: owner died, removed by the next\n"
	  "kvpool-node or embedded store on this host).\n"
	  "\n"
	  "      --json        one JSON document\n"
	  "      --no-verify   skip the value checksums (fast; headers are still checked)\n" },
	{ "mount", cmd_mount, "mount DIR [-f] [-o allow_other,ro]",
	  "Mounts the FUSE view of the pool at DIR: every key is a file, a '/' in a\n"
	  "key is a directory level. Unmount with 'fusermount3 -u DIR'.\n"
	  "\n"
	  "  -f              stay in the foreground\n"
	  "  -o allow_other  let other users see the mount\n"
	  "  -o ro           read-only\n" },
	{ "bench", cmd_bench, "bench [--op put|get|exists|mixed] [--size 1M] [--count N]\n"
	  "             [--threads T] [--batch B] [--path local|tcp] [--json]",
	  "Measures the pool with generated values that are derived from their keys\n"
	  "and verified on every get. Prints ops/s, GB/s and p50/p99/p999 latency.\n"
	  "\n"
	  "  -O, --op OP        put, get, exists or mixed (default put); get and exists\n"
	  "                     first put the keys (not timed) unless --existing\n"
	  "  -s, --size S       value size (default 1M); MIN-MAX (e.g. 1-8M) picks a\n"
	  "                     size per key, log-uniform, derived from the key\n"
	  "  -n, --count N      operations (keys) in all (default 1000)\n"
	  "  -t, --threads T    concurrent callers sharing one handle (default 1)\n"
	  "  -b, --batch B      keys per call through the batch API (default 1)\n"
	  "      --path P       local (shared memory) or tcp; default: [client] protocol\n"
	  "      --prefix P     key prefix (default bench/<host>-<pid>/)\n"
	  "      --hashed-keys  name key i by a hash of i (8 hex digits) instead of i\n"
	  "                     (8 digits): keys in no order, as engines' hashes are\n"
	  "      --keys K       mixed: keys per thread in the working set (default 32)\n"
	  "      --seed S       value pattern seed (default 1)\n"
	  "      --existing     get/exists: the keys are already there (an earlier\n"
	  "                     --keep run with the same --prefix, --size and --seed)\n"
	  "      --keep         do not remove the keys afterwards\n"
	  "      --wait D       wait up to D (default [client] timeout) for a node's\n"
	  "                     segment to put into; then fail, saying why\n"
	  "      --json         one JSON object instead of text\n"
	  "Exit 1 when any value was wrong or any call failed (a failed untimed put\n"
	  "counts as an error); keys that are gone (evicted) are counted as missing.\n" },
	{ "replay", cmd_replay, "replay [--block-bytes N | --bytes-per-token N] [--tokens-per-block N]\n"
	  "              [--limit N] [--clients N] [--timestamps [--speed F]] [--json]\n"
	  "              [--sweep CAPS [--plot FILE.svg]] [--sim-only] [--master KEY=VALUE]...\n"
	  "              TRACE",
	  "Replays a request trace (Mooncake's JSON lines, plain or .gz: timestamp,\n"
	  "input_length, hash_ids of prefix blocks) against the pool as an engine's\n"
	  "prefix cache does: per request batch_exists of its block keys, batch_get_into\n"
	  "of the leading run that is there (every value verified), batch_put of the\n"
	  "rest as a chain. Prints the token hit rate (memory and spill tier), what\n"
	  "unlimited capacity, exact LRU, the offline optimum and a model of kvpool's\n"
	  "own policy hit at the pool's capacity (computed from the same requests),\n"
	  "req/s, GB/s, p50/p99 per request, failed puts and wrong values.\n"
	  "\n"
	  "  -b, --block-bytes N      value of one block (default 64K; K/M/G)\n"
	  "      --bytes-per-token N  block = tokens per block x N (LLaMA3-70B in bf16:\n"
	  "                           320K per token, a 160 MiB block)\n"
	  "      --tokens-per-block N the trace's block size (default 512)\n"
	  "  -n, --limit N            only the first N requests\n"
	  "      --clients N          N client processes, requests spread round-robin\n"
	  "      --timestamps         keep the trace's arrival times (default: as fast as\n"
	  "                           possible); --speed F runs them F times faster\n"
	  "      --key-prefix P       keys are P<hash id> (default replay-<host>-<pid>-)\n"
	  "      --seed S             seed of the values (default 1)\n"
	  "      --keep               leave the keys in the pool (default: removed)\n"
	  "      --wait D             wait up to D for a node's segment (default\n"
	  "                           [client] timeout)\n"
	  "      --capacity N         simulate at N blocks instead of the pool's capacity\n"
	  "      --sim-only           no pool: only the simulations (--capacity or --sweep)\n"
	  "      --sweep CAPS         once per capacity in blocks (e.g. 1000,2000,6000), each\n"
	  "                           against a private master and node started here\n"
	  "      --plot FILE.svg      with --sweep: hit rate vs capacity (kvpool live and\n"
	  "                           its model, LRU, optimum, unlimited)\n"
	  "      --master KEY=VALUE   with --sweep or --sim-only: a [master] key of the\n"
	  "                           private pools and of the model, e.g.\n"
	  "                           eviction_policy=lru (repeat for more keys)\n"
	  "      --json               one JSON object on stdout\n"
	  "Exit 1 on wrong values, failed puts, other errors, a bad trace or Ctrl-C.\n" },
	{ "token", cmd_token, "token new [FILE] [--force]",
	  "Writes a new random cluster token (64 hex digits) to FILE, created with\n"
	  "mode 0600 (default: /etc/kvpool/token as root, else ~/.config/kvpool/token),\n"
	  "and prints how to use it: [cluster] token_file = FILE on every host, or\n"
	  "kvpool-master --cluster_token_file=FILE. With a token the daemons listen\n"
	  "beyond loopback. An existing FILE is kept unless --force replaces it.\n" },
	{ "selftest", cmd_selftest, "selftest rdma|cuda|numa [OPTIONS]",
	  "Checks this machine's hardware paths and prints what they achieve.\n"
	  "  rdma  loopback RDMA WRITE/READ through kvpool's queue pairs on every\n"
	  "        device of [rdma] devices: data verified, GB/s per device\n"
	  "        (--size 64M, --iters 16, --devices LIST)\n"
	  "  cuda  1 GiB (--size) each way between device memory and a host-registered\n"
	  "        shared mapping, next to cudaMemcpy from pinned memory (the limit);\n"
	  "        --pool also puts and gets device memory through the pool\n"
	  "  numa  the auto NUMA choice, a segment bound with mbind, thread binding\n"
	  "Exit 0 passed, 1 failed, 77 when the hardware is absent (\"no RDMA device\").\n" },
};

#define CLI_NCMDS (sizeof(cli_cmds) / sizeof(cli_cmds[0]))

static const struct cli_cmd *cli_cmd_find(const char *name)
{
	for (size_t i = 0; i < CLI_NCMDS; i++)
		if (!strcmp(cli_cmds[i].name, name))
			return &cli_cmds[i];
	return NULL;
}

static int cli_cmd_help(const char *name)
{
	const struct cli_cmd *cmd = cli_cmd_find(name);

	if (!cmd)
		return cli_usage_error(NULL, "unknown command '%s'", name);
	printf("Usage: kvpool [GLOBAL OPTIONS] %s\n\n%s", cmd->synopsis, cmd->help);
	printf("\nGlobal options: see 'kvpool --help'. Exit codes: 0 ok, 1 error, 2 usage,"
	       " 3 not found.\n");
	return CLI_EXIT_OK;
}

static void cli_help(void)
{
	printf("Usage: kvpool [-c FILE] [--master HOST:PORT] [-o section.key=value]... COMMAND ...\n"
	       "\n"
	       "The command-line client of kvpool, a distributed KV-cache pool.\n"
	       "\n"
	       "Commands:\n");
	for (size_t i = 0; i < CLI_NCMDS; i++)
		printf("  %s\n", cli_cmds[i].synopsis);
	printf("\n"
	       "Global options:\n"
	       "  -c, --config FILE     INI file (default %s if present); repeat to\n"
	       "                        layer files, a later one overriding an earlier\n"
	       "  -m, --master H:P      the master's address (cluster.master)\n"
	       "  -o section.key=value  override one configuration key (repeatable),\n"
	       "                        e.g. -o client.protocol=tcp\n"
	       "      --print-config    print the effective configuration and exit\n"
	       "  -V, --version         print the version and exit\n"
	       "  -h, --help            this help; 'kvpool COMMAND --help' for a command\n"
	       "\n"
	       "Environment: KVPOOL_<SECTION>_<KEY> overrides a key of the file.\n"
	       "Exit codes: 0 ok, 1 error, 2 usage or configuration error, 3 not found.\n",
	       CONF_DEFAULT_FILE);
}

static int cli_run(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "master", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "print-config", no_argument, NULL, 'P' },
		{ NULL, 0, NULL, 0 },
	};
	struct cli c;
	bool print_config = false;
	const struct cli_cmd *cmd;
	char err[512], *mov = NULL;
	int ch, rc;

	memset(&c, 0, sizeof(c));
	/* Room for every -o, --master and one slot a command may add. */
	c.overrides = calloc((size_t)argc + 3, sizeof(*c.overrides));
	if (!c.overrides) {
		cli_errorx(NULL, "out of memory");
		return CLI_EXIT_ERR;
	}
	opterr = 0;
	/* '+': global options end at the command name. */
	while ((ch = getopt_long(argc, argv, "+c:m:o:hV", lo, NULL)) != -1) {
		switch (ch) {
		case 'c':
			if (c.ncfgfiles == CONF_MAX_FILES) {
				rc = cli_usage_error(NULL, "at most %d -c files", CONF_MAX_FILES);
				goto out_free;
			}
			c.cfgfiles[c.ncfgfiles++] = optarg;
			break;
		case 'm':
			c.master = optarg;
			break;
		case 'o':
			c.overrides[c.noverrides++] = optarg;
			break;
		case 'h':
			cli_help();
			rc = CLI_EXIT_OK;
			goto out_free;
		case 'V':
			printf("kvpool %s\n", KVP_VERSION);
			rc = CLI_EXIT_OK;
			goto out_free;
		case 'P':
			print_config = true;
			break;
		default:
			rc = cli_usage_error(NULL, "unknown option or missing argument: %s",
					     argv[optind - 1]);
			goto out_free;
		}
	}
	if (c.master) {
		if (asprintf(&mov, "cluster.master=%s", c.master) < 0) {
			rc = CLI_EXIT_ERR;
			goto out_free;
		}
		c.overrides[c.noverrides++] = mov;
	}
	c.overrides[c.noverrides] = NULL;

	cmd = optind < argc ? cli_cmd_find(argv[optind]) : NULL;
	if (!print_config && optind >= argc) {
		rc = cli_usage_error(NULL, "no command given");
		goto out_free;
	}
	if (!print_config && !cmd) {
		if (!strcmp(argv[optind], "help")) {
			if (optind + 1 < argc)
				rc = cli_cmd_help(argv[optind + 1]);
			else
				cli_help(), rc = CLI_EXIT_OK;
		} else {
			rc = cli_usage_error(NULL, "unknown command '%s'", argv[optind]);
		}
		goto out_free;
	}

	if (conf_load_files(&c.conf, c.cfgfiles, c.ncfgfiles, c.overrides, err, sizeof(err)) < 0) {
		cli_errorx("config", "%s", err);
		rc = CLI_EXIT_USAGE;
		goto out_free;
	}
	log_init("kvpool", log_level_parse(c.conf.log.level) >= 0 ?
		 log_level_parse(c.conf.log.level) : LOG_WARNING);
	if (print_config) {
		conf_print(&c.conf, stdout);
		rc = CLI_EXIT_OK;
		goto out_free;
	}
	rc = cmd->fn(&c, argc - optind, argv + optind);

out_free:
	free(mov);
	free(c.overrides);
	if (fflush(stdout) != 0 && rc == CLI_EXIT_OK) {
		cli_errorx(NULL, "stdout: %s", strerror(errno));
		rc = CLI_EXIT_ERR;
	}
	return rc;
}

int main(int argc, char **argv)
{
	return cli_run(argc, argv);
}

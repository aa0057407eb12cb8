/* cli_top: `kvpool top`; see cli_top.h. */
#include "cli_top.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cli_util.h"
#include "json.h"
#include "net.h"
#include "tls.h"

#define TOP_MAX_ANSWER (4u << 20)	/* bytes of one HTTP answer */
#define TOP_MAX_TOKENS 65536u
#define TOP_TIMEOUT_S 3

/* ---- the document ---- */

static uint64_t jnum(const struct json *j, int obj, const char *key)
{
	int64_t v = 0;

	if (json_i64(j, json_get(j, obj, key), &v) < 0 || v < 0)
		return 0;
	return (uint64_t)v;
}

/* A string member into buf, "" when absent or too long. */
static void jstr(const struct json *j, int obj, const char *key, char *buf, size_t cap)
{
	if (json_str(j, json_get(j, obj, key), buf, cap, NULL) < 0)
		buf[0] = '\0';
}

static void parse_master(const struct json *j, struct top_snap *s)
{
	int ha = json_get(j, 0, "ha"), c = json_get(j, 0, "counters");
	int nodes = json_get(j, 0, "nodes"), ns = json_get(j, 0, "namespaces");

	jstr(j, ha, "mode", s->ha_mode, sizeof(s->ha_mode));
	jstr(j, ha, "role", s->role, sizeof(s->role));
	jstr(j, ha, "state", s->state, sizeof(s->state));
	jstr(j, ha, "leader", s->leader, sizeof(s->leader));
	jstr(j, 0, "epoch", s->epoch, sizeof(s->epoch));
	s->node_ttl_ms = jnum(j, 0, "node_ttl_ms");
	s->keys = jnum(j, 0, "keys");
	s->bytes_used = jnum(j, 0, "bytes_used");
	s->capacity = jnum(j, 0, "capacity");
	s->spill_used = jnum(j, 0, "spill_used");
	s->spill_capacity = jnum(j, 0, "spill_capacity");
	s->leases = jnum(j, 0, "leases");
	s->connections = jnum(j, 0, "connections");
	s->pending_puts = jnum(j, 0, "pending_puts");
	s->puts = jnum(j, c, "puts");
	s->gets = jnum(j, c, "gets");
	s->hits = jnum(j, c, "hits");
	s->evictions = jnum(j, c, "evictions");
	s->demotions = jnum(j, c, "demotions");
	s->promotions = jnum(j, c, "promotions");
	s->tcp_read = jnum(j, c, "tcp_read_bytes");
	s->tcp_written = jnum(j, c, "tcp_written_bytes");
	int cb = json_get(j, 0, "client_bytes"), px = json_get(j, 0, "prefix");
	s->path_local = jnum(j, cb, "local");
	s->path_tcp = jnum(j, cb, "tcp");
	s->path_rdma = jnum(j, cb, "rdma");
	s->path_disk = jnum(j, cb, "disk");
	s->pfx_blocks_asked = jnum(j, px, "blocks_asked");
	s->pfx_blocks_found = jnum(j, px, "blocks_found");
	s->pfx_tokens_asked = jnum(j, px, "tokens_asked");
	s->pfx_tokens_found = jnum(j, px, "tokens_found");
	if (json_is(j, nodes, JSON_ARRAY)) {
		s->nnodes_total = j->t[nodes].count;
		for (uint32_t i = 0; i < j->t[nodes].count && s->nnodes < TOP_MAX_NODES; i++) {
			int o = json_at(j, nodes, i);
			struct top_node *n = &s->nodes[s->nnodes++];
			n->segment_id = (uint32_t)jnum(j, o, "segment_id");
			jstr(j, o, "name", n->name, sizeof(n->name));
			jstr(j, o, "endpoint", n->endpoint, sizeof(n->endpoint));
			jstr(j, o, "state", n->state, sizeof(n->state));
			n->capacity = jnum(j, o, "capacity");
			n->used = jnum(j, o, "used");
			n->objects = jnum(j, o, "objects");
			n->spill_capacity = jnum(j, o, "spill_capacity");
			n->spill_used = jnum(j, o, "spill_used");
			n->seen_ms = jnum(j, o, "last_seen_ms_ago");
		}
	}
	if (json_is(j, ns, JSON_ARRAY)) {
		s->nns_total = j->t[ns].count;
		for (uint32_t i = 0; i < j->t[ns].count && s->nns < TOP_MAX_NS; i++) {
			int o = json_at(j, ns, i);
			struct top_ns *x = &s->ns[s->nns++];
			jstr(j, o, "name", x->name, sizeof(x->name));
			x->keys = jnum(j, o, "keys");
			x->bytes = jnum(j, o, "bytes");
			x->clients = jnum(j, o, "clients");
		}
	}
}

static void parse_node(const struct json *j, struct top_snap *s)
{
	int c = json_get(j, 0, "counters");

	jstr(j, 0, "name", s->name, sizeof(s->name));
	jstr(j, 0, "master", s->master_state, sizeof(s->master_state));
	jstr(j, 0, "master_addr", s->master_addr, sizeof(s->master_addr));
	s->capacity = jnum(j, 0, "size");
	s->bytes_used = jnum(j, 0, "used");
	s->extents = jnum(j, 0, "extents");
	s->connections = jnum(j, 0, "connections");
	s->read_bytes = jnum(j, c, "read_bytes");
	s->written_bytes = jnum(j, c, "written_bytes");
	s->requests = jnum(j, c, "requests");
}

int top_parse(const char *buf, size_t len, struct top_snap *out, char *err, size_t errlen)
{
	static struct json_tok toks[TOP_MAX_TOKENS];	/* single-threaded tool */
	const char *end = memmem(buf, len, "\r\n\r\n", 4);
	struct json j;

	memset(out, 0, sizeof(*out));
	if (len < 12 || memcmp(buf, "HTTP/1.", 7) != 0 || buf[8] != ' ') {
		snprintf(err, errlen, "not an HTTP answer");
		return -EPROTO;
	}
	if (memcmp(buf + 9, "200", 3) != 0) {
		char code[4];
		for (int i = 0; i < 3; i++)
			code[i] = buf[9 + i] >= '0' && buf[9 + i] <= '9' ? buf[9 + i] : '?';
		code[3] = '\0';
		snprintf(err, errlen, "HTTP status %s (a kvpool before the status page?)", code);
		return -EPROTO;
	}
	if (!end) {
		snprintf(err, errlen, "HTTP answer cut short");
		return -EPROTO;
	}
	end += 4;
	if (json_parse(&j, end, len - (size_t)(end - buf), toks, TOP_MAX_TOKENS) < 0 ||
	    !json_is(&j, 0, JSON_OBJECT)) {
		snprintf(err, errlen, "the answer is not a JSON object");
		return -EPROTO;
	}
	jstr(&j, 0, "kind", out->kind, sizeof(out->kind));
	out->time_ms = jnum(&j, 0, "time_ms");
	if (!strcmp(out->kind, "master"))
		parse_master(&j, out);
	else if (!strcmp(out->kind, "node"))
		parse_node(&j, out);
	else {
		snprintf(err, errlen, "not a kvpool status document");
		return -EPROTO;
	}
	return 0;
}

/* ---- HTTP ---- */

/* GET /api/status from host:port into a malloc'd *buf; over HTTPS when tls
 * is not NULL ([tls] http: the daemons' HTTP ports speak TLS). */
static int top_fetch(const char *host, const char *port, struct tls_ctx *tls, char **buf,
		     size_t *len, char *err, size_t errlen)
{
	uint64_t deadline = clock_now_ms() + TOP_TIMEOUT_S * 1000ull;
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai, *a;
	struct timeval tv = { .tv_sec = TOP_TIMEOUT_S };
	char req[512];
	size_t cap = 65536, n = 0;
	int fd = -1, rc;

	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc) {
		snprintf(err, errlen, "%s: %s", host, gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	for (a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
			break;
		rc = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		snprintf(err, errlen, "%s:%s: %s", host, port, strerror(rc ? -rc : ECONNREFUSED));
		return rc ? rc : -ECONNREFUSED;
	}
	if (tls) {
		char terr[160];

		rc = tls_connect_fd(tls, fd, deadline, terr, sizeof(terr));
		if (rc < 0) {
			snprintf(err, errlen, "%s:%s: %s", host, port, terr);
			goto out_close;
		}
	}
	int rl = snprintf(req, sizeof(req), "GET /api/status HTTP/1.0\r\nHost: %s:%s\r\n"
			  "Connection: close\r\n\r\n", host, port);
	rc = rl < 0 || (size_t)rl >= sizeof(req) ? -EINVAL :
	     net_send_all(fd, req, (size_t)rl, deadline);
	if (rc < 0) {
		snprintf(err, errlen, "%s:%s: cannot send the request", host, port);
		goto out_close;
	}
	*buf = malloc(cap);
	if (!*buf) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto out_close;
	}
	for (;;) {
		if (n == cap) {
			char *p = cap < TOP_MAX_ANSWER ? realloc(*buf, cap * 2) : NULL;
			if (!p) {
				rc = -E2BIG;
				snprintf(err, errlen, "%s:%s: answer over %u bytes", host, port,
					 TOP_MAX_ANSWER);
				goto out_free;
			}
			*buf = p;
			cap *= 2;
		}
		struct tls_conn *t = tls_fd_get(fd);
		ssize_t r = t ? tls_recv(t, *buf + n, cap - n) : read(fd, *buf + n, cap - n);
		if (r == 0)
			break;
		if (r < 0) {
			int e = t ? (int)-r : errno;
			if (e == EINTR)
				continue;
			if (t && e == EAGAIN && clock_now_ms() < deadline) {
				struct pollfd pfd = {
					.fd = fd, .events = tls_conn_want_write(t) ? POLLOUT : POLLIN
				};
				poll(&pfd, 1, 1000);
				continue;
			}
			rc = -e;
			snprintf(err, errlen, "%s:%s: %s%s", host, port, strerror(e),
				 t && tls_conn_error(t)[0] ? tls_conn_error(t) : "");
			goto out_free;
		}
		n += (size_t)r;
	}
	tls_fd_close(fd);
	*len = n;
	return 0;

out_free:
	free(*buf);
	*buf = NULL;
out_close:
	tls_fd_close(fd);
	return rc ? rc : -EIO;
}

/* ---- the screen ---- */

static double rate(uint64_t a, uint64_t b, double dt)
{
	return dt > 0 && b >= a ? (double)(b - a) / dt : 0.0;
}

static double pctf(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* [#####.....] of width w for part/whole. */
static const char *bar(uint64_t part, uint64_t whole, char *buf, int w)
{
	int fill = whole ? (int)((double)part / (double)whole * w + 0.5) : 0;

	if (fill > w)
		fill = w;
	buf[0] = '[';
	for (int i = 0; i < w; i++)
		buf[1 + i] = i < fill ? '#' : '.';
	buf[w + 1] = ']';
	buf[w + 2] = '\0';
	return buf;
}

static void show_master(FILE *f, const struct top_snap *p, const struct top_snap *s, double dt)
{
	char b1[32], b2[32], b3[32], b4[32], br[40];

	if (!strcmp(s->ha_mode, "none"))
		fprintf(f, "role leader (no HA)  epoch %s\n", s->epoch);
	else
		fprintf(f, "role %s/%s  epoch %s  leader %s\n", s->role, s->state, s->epoch,
			s->leader[0] ? s->leader : "-");
	fprintf(f, "keys %" PRIu64 "  memory %s of %s (%.1f%%)  spill %s of %s  leases %" PRIu64
		"  connections %" PRIu64 "  puts in flight %" PRIu64 "\n",
		s->keys, cli_human_size(s->bytes_used, b1, sizeof(b1)),
		cli_human_size(s->capacity, b2, sizeof(b2)), pctf(s->bytes_used, s->capacity),
		cli_human_size(s->spill_used, b3, sizeof(b3)),
		cli_human_size(s->spill_capacity, b4, sizeof(b4)), s->leases, s->connections,
		s->pending_puts);
	fprintf(f, "hit rate %.1f%% (%" PRIu64 " of %" PRIu64 " gets found)\n",
		pctf(s->hits, s->gets), s->hits, s->gets);
	if (p)
		fprintf(f, "puts/s %.1f  gets/s %.1f  evictions/s %.1f  demotions/s %.1f  "
			"promotions/s %.1f\n", rate(p->puts, s->puts, dt), rate(p->gets, s->gets, dt),
			rate(p->evictions, s->evictions, dt), rate(p->demotions, s->demotions, dt),
			rate(p->promotions, s->promotions, dt));
	else
		fprintf(f, "puts/s -  gets/s -  evictions/s -  demotions/s -  promotions/s -\n");
	if (p)
		fprintf(f, "TCP read/s %s  TCP written/s %s  (the nodes' data servers)\n",
			cli_human_size((uint64_t)rate(p->tcp_read, s->tcp_read, dt), b1, sizeof(b1)),
			cli_human_size((uint64_t)rate(p->tcp_written, s->tcp_written, dt), b2,
				       sizeof(b2)));
	else
		fprintf(f, "TCP read/s -  TCP written/s -  (the nodes' data servers)\n");
	if (p)
		fprintf(f, "bytes/s by path: local %s  TCP %s  RDMA %s  disk %s  (the clients')\n",
			cli_human_size((uint64_t)rate(p->path_local, s->path_local, dt), b1, sizeof(b1)),
			cli_human_size((uint64_t)rate(p->path_tcp, s->path_tcp, dt), b2, sizeof(b2)),
			cli_human_size((uint64_t)rate(p->path_rdma, s->path_rdma, dt), b3, sizeof(b3)),
			cli_human_size((uint64_t)rate(p->path_disk, s->path_disk, dt), b4, sizeof(b4)));
	else
		fprintf(f, "bytes/s by path: local -  TCP -  RDMA -  disk -  (the clients')\n");
	fprintf(f, "prefix hit rate %.1f%% (%" PRIu64 " of %" PRIu64 " blocks)",
		pctf(s->pfx_blocks_found, s->pfx_blocks_asked), s->pfx_blocks_found,
		s->pfx_blocks_asked);
	if (s->pfx_tokens_asked)
		fprintf(f, "  tokens found/asked %" PRIu64 "/%" PRIu64 " (%.1f%%)",
			s->pfx_tokens_found, s->pfx_tokens_asked,
			pctf(s->pfx_tokens_found, s->pfx_tokens_asked));
	fprintf(f, "\n");
	fprintf(f, "\nnodes %zu", s->nnodes_total);
	if (s->nnodes_total > s->nnodes)
		fprintf(f, " (first %zu shown)", s->nnodes);
	fprintf(f, "\n%4s  %-16s  %-8s  %-22s  %6s  %10s  %10s  %8s  %6s\n", "SEG", "NODE", "STATE",
		"MEMORY", "USE%", "USED", "CAPACITY", "OBJECTS", "SPILL%");
	for (size_t i = 0; i < s->nnodes; i++) {
		const struct top_node *n = &s->nodes[i];
		fprintf(f, "%4" PRIu32 "  %-16.16s  %-8s  %-22s  %5.1f%%  %10s  %10s  %8" PRIu64 "  ",
			n->segment_id, n->name, n->state, bar(n->used, n->capacity, br, 20),
			pctf(n->used, n->capacity), cli_human_size(n->used, b1, sizeof(b1)),
			cli_human_size(n->capacity, b2, sizeof(b2)), n->objects);
		if (n->spill_capacity)
			fprintf(f, "%5.1f%%\n", pctf(n->spill_used, n->spill_capacity));
		else
			fprintf(f, "%6s\n", "-");
	}
	if (s->nns_total) {
		fprintf(f, "\n%-24s  %10s  %10s  %7s\n", "NAMESPACE", "KEYS", "BYTES", "CLIENTS");
		for (size_t i = 0; i < s->nns; i++)
			fprintf(f, "%-24.24s  %10" PRIu64 "  %10s  %7" PRIu64 "\n", s->ns[i].name,
				s->ns[i].keys, cli_human_size(s->ns[i].bytes, b1, sizeof(b1)),
				s->ns[i].clients);
	}
}

static void show_node(FILE *f, const struct top_snap *p, const struct top_snap *s, double dt)
{
	char b1[32], b2[32], br[40];

	fprintf(f, "node %s  master %s (%s)\n", s->name, s->master_addr, s->master_state);
	fprintf(f, "segment %s %s of %s (%.1f%%)  extents %" PRIu64 "  connections %" PRIu64 "\n",
		bar(s->bytes_used, s->capacity, br, 20), cli_human_size(s->bytes_used, b1, sizeof(b1)),
		cli_human_size(s->capacity, b2, sizeof(b2)), pctf(s->bytes_used, s->capacity),
		s->extents, s->connections);
	if (p)
		fprintf(f, "TCP read/s %s  TCP written/s %s  requests/s %.1f\n",
			cli_human_size((uint64_t)rate(p->read_bytes, s->read_bytes, dt), b1, sizeof(b1)),
			cli_human_size((uint64_t)rate(p->written_bytes, s->written_bytes, dt), b2,
				       sizeof(b2)),
			rate(p->requests, s->requests, dt));
	else
		fprintf(f, "TCP read/s -  TCP written/s -  requests/s -\n");
}

static void show(FILE *f, const char *addr, const struct top_snap *p, const struct top_snap *s)
{
	time_t now = time(NULL);
	struct tm tm;
	char ts[16];
	double dt = p ? (double)(s->time_ms - p->time_ms) / 1000.0 : 0;

	localtime_r(&now, &tm);
	strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
	fprintf(f, "kvpool top - %s  %s %s\n", ts, s->kind, addr);
	if (!strcmp(s->kind, "master"))
		show_master(f, p, s, dt);
	else
		show_node(f, p, s, dt);
}

/* ---- the loop ---- */

static volatile sig_atomic_t top_stop;

static void top_on_signal(int sig)
{
	top_stop = 1;
}

/* The HTTP address: --http, else the host of cluster.master and the port
 * of master.http_listen (what a pool's shared INI says). */
static int top_addr(const struct kvp_conf *conf, const char *opt, char *host, size_t hostlen,
		    char *port, size_t portlen)
{
	char h2[256];
	uint16_t p, p2;

	if (opt) {
		if (conf_parse_hostport(opt, host, hostlen, &p) < 0)
			return cli_usage_error("top", "--http %s: expected HOST:PORT", opt);
		snprintf(port, portlen, "%u", p);
		return 0;
	}
	if (!strncmp(conf->cluster.master, "etcd://", 7))
		return cli_usage_error("top", "the master is found through etcd: give "
				       "--http HOST:PORT (the leader's master.http_listen)");
	if (conf_parse_hostport(conf->cluster.master, host, hostlen, &p) < 0 ||
	    conf_parse_hostport(conf->master.http_listen, h2, sizeof(h2), &p2) < 0)
		return cli_usage_error("top", "cannot tell the master's HTTP address: give "
				       "--http HOST:PORT");
	if (!host[0])
		snprintf(host, hostlen, "127.0.0.1");
	snprintf(port, portlen, "%u", p2);
	return 0;
}

int cli_top_main(const struct kvp_conf *conf, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "http", required_argument, NULL, 'H' },
		{ "iterations", required_argument, NULL, 'n' },
		{ "once", no_argument, NULL, '1' },
		{ "delay", required_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 },
	};
	const char *http = NULL;
	struct tls_ctx *tls = NULL;	/* [tls] http */
	uint64_t iters = 0, delay_ms = 1000;	/* 0: until q */
	char host[256], port[16], addr[300], err[512];
	struct top_snap *snap = calloc(2, sizeof(*snap));
	struct termios saved;
	bool raw = false, tty = isatty(STDOUT_FILENO), once = false;
	int ch, rc = CLI_EXIT_OK;

	if (!snap) {
		cli_errorx("top", "out of memory");
		return CLI_EXIT_ERR;
	}
	while ((ch = getopt_long(argc, argv, "hH:n:1d:", lo, NULL)) != -1) {
		switch (ch) {
		case 'H':
			http = optarg;
			break;
		case 'n':
			if (cli_parse_u64(optarg, &iters) < 0 || !iters) {
				rc = cli_usage_error("top", "-n %s: expected a count > 0", optarg);
				goto out_free;
			}
			break;
		case '1':
			once = true;
			iters = 1;
			break;
		case 'd': {
			char *end;
			double d = strtod(optarg, &end);
			if (*end || !(d >= 0.1 && d <= 3600)) {
				rc = cli_usage_error("top", "-d %s: expected seconds (0.1-3600)", optarg);
				goto out_free;
			}
			delay_ms = (uint64_t)(d * 1000);
			break;
		}
		default:
			rc = cli_usage_error("top", "unknown option or missing argument: %s",
					     argv[optind - 1]);
			goto out_free;
		}
	}
	if (optind != argc) {
		rc = cli_usage_error("top", "no arguments expected");
		goto out_free;
	}
	rc = top_addr(conf, http, host, sizeof(host), port, sizeof(port));
	if (rc)
		goto out_free;
	if (conf->tls.http) {
		tls = tls_ctx_new(conf, false, err, sizeof(err));
		if (!tls) {
			fprintf(stderr, "kvpool top: %s\n", err);
			rc = CLI_EXIT_ERR;
			goto out_free;
		}
	}
	snprintf(addr, sizeof(addr), "%s:%s", host, port);
	/* the screen is redrawn only on a terminal; q and Ctrl-C quit */
	tty = tty && !once;
	if (tty && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0) {
		struct termios t = saved;
		t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		t.c_cc[VMIN] = 1;
		t.c_cc[VTIME] = 0;
		raw = tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0;
	}
	struct sigaction sa = { .sa_handler = top_on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (tty)
		fputs("\033[?25l", stdout);	/* no cursor */

	struct top_snap *prev = NULL, *cur = &snap[0];
	for (uint64_t i = 0; !top_stop && (!iters || i < iters); i++) {
		char *buf = NULL;
		size_t len = 0;
		int r = top_fetch(host, port, tls, &buf, &len, err, sizeof(err));
		if (!r)
			r = top_parse(buf, len, cur, err, sizeof(err));
		free(buf);
		if (tty)
			fputs("\033[H\033[2J", stdout);
		if (r) {
			if (!tty || once) {
				cli_errorx("top", "%s", err);
				rc = CLI_EXIT_ERR;
				break;
			}
			printf("kvpool top - %s: %s (retrying)\n", addr, err);
			prev = NULL;
		} else {
			show(stdout, addr, prev, cur);
			prev = cur;
			cur = cur == &snap[0] ? &snap[1] : &snap[0];
		}
		if (tty)
			fputs("\n(q quits)", stdout);
		else if (!once)
			putchar('\n');
		fflush(stdout);
		if (iters && i + 1 == iters)
			break;
		/* wait for the next refresh, or a q */
		struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
		int pr = poll(raw ? &pfd : NULL, raw ? 1 : 0, (int)delay_ms);
		if (pr > 0) {
			char c;
			if (read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q'))
				break;
			/* any other key refreshes now */
		}
	}
	if (tty)
		fputs("\033[?25h\n", stdout);
	if (raw)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved);
out_free:
	tls_ctx_free(tls);
	free(snap);
	return rc;
}

/* b_master: kvpool-master throughput, memory and latency, next to redis
 * measured in the same run on the same machine.
 *  1. pipelined ops/s from one connection, 64 frames in flight (written at
 *     once, like redis-benchmark -P 64): EXISTS (64 keys per frame),
 *     PUT_START+PUT_END (one key per frame; a put = both) with keys
 *     spread over the key space, as hashed keys are, and again appended
 *     in ascending order (no target: the master's cheapest case), GET; and
 *     redis-benchmark -P 64 -c 1 -t get,set -d 16 -r KEYS on a private
 *     redis-server: one connection and random keys from a key space as
 *     large as ours (without -r redis-benchmark hits one single key, which
 *     stays in cache and is no comparison for 200,000 random keys).
 *  2. master RSS per object at N objects with 64-byte keys, one replica.
 *  3. p99 GET latency (one request at a time) idle and while eviction runs.
 *     The master gets a CPU of its own, as a deployed master would; the
 *     prober and the put load that drives eviction share another (each
 *     has its own with three CPUs or more). Unpinned, on two cores, three
 *     busy processes and the scheduler's placement of them made most of
 *     the tail: the same run's p99 moved 2x between runs.
 * Usage: b_master [-n OPS] [-m OBJECTS] [-l SAMPLES] [-P] [-L] [-U]. -P:
 * only the master's PUT_START+PUT_END throughput, put after put (keys
 * spread as in part 1), for a profiler attached to the master (no
 * reference, no ratio); -L: only part 3
 * (it needs no redis); -U: part 3 unpinned (the scheduler places all three
 * processes). Prints ratios; the
 * targets (>= 1.0x redis, puts >= 1.5x, <= 160 B + key, eviction p99 <= 2x
 * idle) are reported, not enforced.
 * Exit 0 when it ran, 77 without redis-server/redis-benchmark (there is no
 * reference to print a ratio against), 1 when a measurement failed: a
 * wrong reply, redis-benchmark printing no rate, eviction never starting.
 */
#include <linux/net_tstamp.h>
#include <sched.h>
#include <sys/time.h>

#include "../unit/testlib.h"
#include <linux/errqueue.h>	/* after <time.h> (testlib.h): struct timespec */
#include "conf.h"
#include "net.h"

#define DEPTH 64

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- a pipelining client over a raw socket ---- */

struct pc {
	int fd;
	uint8_t *buf;
	size_t len, pos, cap;
	bool tstamp;		/* pc_stamp: receive with the kernel's arrival times */
	uint64_t rx_ns;		/* CLOCK_REALTIME the last bytes received arrived at */
};

static void pc_open(struct pc *p, int port)
{
	memset(p, 0, sizeof(*p));
	p->fd = tl_connect(port);
	REQUIRE(p->fd >= 0, "connect %d", port);
	p->cap = 1 << 22;
	p->buf = malloc(p->cap);
	REQUIRE(p->buf, "oom");
}

static void pc_close(struct pc *p)
{
	close(p->fd);
	free(p->buf);
}

/* The kernel stamps each reply as it arrives at the socket (software RX
 * timestamps, CLOCK_REALTIME): a latency taken from them is the master's
 * and the wire's, without the wait of a prober that is not on its CPU. */
static bool stamp_rx(int fd)
{
	int on = SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;

	return setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &on, sizeof(on)) == 0;
}

static bool pc_stamp(struct pc *p)
{
	p->tstamp = stamp_rx(p->fd);
	return p->tstamp;
}

static ssize_t pc_recv(struct pc *p)
{
	union {
		char buf[CMSG_SPACE(sizeof(struct scm_timestamping))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { p->buf + p->len, p->cap - p->len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (!p->tstamp)
		return recv(p->fd, p->buf + p->len, p->cap - p->len, 0);
	mh.msg_control = ctl.buf;
	mh.msg_controllen = sizeof(ctl.buf);
	n = recvmsg(p->fd, &mh, 0);
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); n > 0 && c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPING) {
			struct scm_timestamping ts;

			memcpy(&ts, CMSG_DATA(c), sizeof(ts));
			p->rx_ns = (uint64_t)ts.ts[0].tv_sec * 1000000000ull +
				   (uint64_t)ts.ts[0].tv_nsec;
		}
	}
	return n;
}

/* [cluster] busy_poll_us as the environment sets it (default otherwise) */
static int busy_poll_us(void)
{
	static int us = -1;

	if (us < 0) {
		struct kvp_conf c;
		const char *e = getenv("KVPOOL_CLUSTER_BUSY_POLL_US");

		conf_defaults(&c);
		us = e ? atoi(e) : (int)c.cluster.busy_poll_us;
	}
	return us;
}

/* Next reply frame: header in *h, body pointer valid until the next call. */
static const uint8_t *pc_next(struct pc *p, struct wire_hdr *h)
{
	for (;;) {
		size_t avail = p->len - p->pos;
		if (avail >= WIRE_HDR_SIZE) {
			REQUIRE(wire_hdr_decode(p->buf + p->pos, h, UINT32_MAX, 0) == 0, "bad reply");
			if (avail >= WIRE_HDR_SIZE + h->body_len) {
				const uint8_t *body = p->buf + p->pos + WIRE_HDR_SIZE;
				p->pos += WIRE_HDR_SIZE + h->body_len;
				return body;
			}
		}
		if (p->pos) {
			memmove(p->buf, p->buf + p->pos, avail);
			p->len = avail;
			p->pos = 0;
		}
		REQUIRE(p->len < p->cap, "reply too large");
		/* waits as libkvpool's master client does (mcall.c) */
		struct pollfd pfd = { .fd = p->fd, .events = POLLIN };
		REQUIRE(net_poll(&pfd, 1, -1, busy_poll_us()) >= 0, "poll: %s", strerror(errno));
		ssize_t n = pc_recv(p);
		REQUIRE(n > 0, "recv: %s", n ? strerror(errno) : "closed");
		p->len += (size_t)n;
	}
}

static void frame(struct wbuf *w, uint16_t op, uint64_t reqid, const struct wbuf *body)
{
	size_t st = wire_begin(w);

	wb_bytes(w, body->p, body->len);
	wire_finish(w, st, op, 0, 0, reqid, 0);
}

static void hello(struct pc *p, uint16_t role)
{
	struct wbuf b, w;
	struct wire_hdr h;

	wb_init(&b);
	wb_init(&w);
	wb_u16(&b, role);
	wb_cstr(&b, "");
	wb_cstr(&b, "bench");
	wb_cstr(&b, "bench-host");
	frame(&w, WIRE_OP_HELLO, 1, &b);
	REQUIRE(tl_send_all(p->fd, w.p, w.len) == 0, "send");
	pc_next(p, &h);
	REQUIRE(h.status == 0, "HELLO %d", h.status);
	wb_free(&b);
	wb_free(&w);
}

/* 64 bytes: prefix + zero-padded number (prefix < 44 bytes). Digits are
 * written in place rather than by snprintf, which cost the load generator
 * more than the master spends on a PUT_END: redis-benchmark likewise
 * patches the random digits into a prepared command. */
static void key_of(char *k, const char *pfx, uint64_t i)
{
	size_t p = strlen(pfx), j = 64;

	memcpy(k, pfx, p);
	memset(k + p, '0', 64 - p);
	k[64] = '\0';
	for (; i; i /= 10)
		k[--j] = (char)('0' + i % 10);
}

/* ---- throughput ---- */

static uint64_t gcd(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* A stride that visits each of 0..n-1 once (coprime with n), in an order
 * far from ascending: near n times the golden ratio, so that keys in a
 * row land far apart and fill the space evenly (as hashed keys do). */
static uint64_t scatter_stride(uint64_t n)
{
	uint64_t s = (uint64_t)((double)n * 0.6180339887) | 1;

	while (n > 1 && gcd(s, n) != 1)
		s += 2;
	return s;
}

/* n puts of vlen bytes with DEPTH puts in flight: each write carries the
 * PUT_STARTs of one batch and the PUT_ENDs of the previous one (a put is
 * two round trips; this keeps both directions busy). Keys pfx + 0..n-1,
 * in ascending order or, with scatter, in an order that spreads them over
 * the key space as hashed keys are (redis-benchmark -r picks random keys):
 * the master keeps its keys in order for LIST, and a key past the last
 * one costs it far less than one that lands among them. Returns puts/s. */
static double bench_put(struct pc *p, uint64_t n, uint64_t vlen, const char *pfx, bool scatter)
{
	uint64_t stride = scatter_stride(n);
	struct wbuf w, b;
	uint64_t gens[2][DEPTH];
	char k[2][DEPTH][72];
	unsigned cnt[2] = { 0, 0 };
	uint64_t t0 = now_ns(), reqid = 10;

	wb_init(&w);
	wb_init(&b);
	for (uint64_t i = 0, batch = 0; i < n || cnt[(batch + 1) & 1]; batch++) {
		unsigned cur = batch & 1, prev = cur ^ 1;
		unsigned d = i >= n ? 0 : n - i < DEPTH ? (unsigned)(n - i) : DEPTH;
		wb_reset(&w);
		for (unsigned j = 0; j < cnt[prev]; j++) {
			wb_reset(&b);
			wb_u32(&b, 1);
			wb_cstr(&b, k[prev][j]);
			wb_u64(&b, gens[prev][j]);
			wb_u64(&b, vlen);
			frame(&w, WIRE_OP_PUT_END, reqid++, &b);
		}
		for (unsigned j = 0; j < d; j++) {
			key_of(k[cur][j], pfx, scatter ? (i + j) * stride % n : i + j);
			wb_reset(&b);
			tl_wb_put_prefix(&b, 1, 0, 0, 0);
			wb_u32(&b, 1);
			wb_cstr(&b, k[cur][j]);
			wb_u64(&b, vlen);
			frame(&w, WIRE_OP_PUT_START, reqid++, &b);
		}
		REQUIRE(tl_send_all(p->fd, w.p, w.len) == 0, "send");
		for (unsigned j = 0; j < cnt[prev]; j++) {
			struct wire_hdr h;
			struct rbuf r;
			const uint8_t *body = pc_next(p, &h);
			rb_init(&r, body, h.body_len);
			rb_u32(&r);
			REQUIRE(h.status == 0 && rb_status(&r) == 0, "PUT_END");
		}
		for (unsigned j = 0; j < d; j++) {
			struct wire_hdr h;
			struct rbuf r;
			const uint8_t *body = pc_next(p, &h);
			rb_init(&r, body, h.body_len);
			rb_u32(&r);
			int st = rb_status(&r);
			REQUIRE(h.status == 0 && st == 0, "PUT_START %s: %d/%d", k[cur][j], h.status, st);
			gens[cur][j] = rb_u64(&r);
		}
		cnt[prev] = 0;
		cnt[cur] = d;
		i += d;
	}
	wb_free(&w);
	wb_free(&b);
	return (double)n / ((double)(now_ns() - t0) / 1e9);
}

/* n keys looked up with op (GET or EXISTS), per_frame keys per frame,
 * DEPTH frames per write. Returns keys/s. */
static double bench_lookup(struct pc *p, uint16_t op, uint64_t n, unsigned per_frame,
			   uint64_t nkeys, const char *pfx)
{
	struct wbuf w, b;
	char k[72];
	uint64_t t0 = now_ns(), reqid = 1000, x = 1;

	wb_init(&w);
	wb_init(&b);
	for (uint64_t done = 0; done < n;) {
		wb_reset(&w);
		unsigned frames = 0;
		for (; frames < DEPTH && done < n; frames++) {
			wb_reset(&b);
			wb_u32(&b, per_frame);
			for (unsigned j = 0; j < per_frame; j++) {
				x = x * 6364136223846793005ull + 1442695040888963407ull;
				key_of(k, pfx, (x >> 33) % nkeys);
				wb_cstr(&b, k);
			}
			frame(&w, op, reqid++, &b);
			done += per_frame;
		}
		REQUIRE(tl_send_all(p->fd, w.p, w.len) == 0, "send");
		for (unsigned j = 0; j < frames; j++) {
			struct wire_hdr h;
			struct rbuf r;
			const uint8_t *body = pc_next(p, &h);
			rb_init(&r, body, h.body_len);
			REQUIRE(h.status == 0 && rb_u32(&r) == per_frame, "lookup reply");
			int st = rb_status(&r);
			REQUIRE(op == WIRE_OP_EXISTS ? st == 1 : st == 0, "lookup status %d", st);
		}
	}
	wb_free(&w);
	wb_free(&b);
	return (double)n / ((double)(now_ns() - t0) / 1e9);
}

static int64_t mount_big(struct pc *p, uint64_t size, uint32_t align, uint64_t uuid)
{
	struct wbuf w, b;
	struct wire_hdr h;
	struct rbuf r;

	wb_init(&w);
	wb_init(&b);
	wb_cstr(&b, "bench");
	wb_cstr(&b, "bench-host");
	wb_cstr(&b, "/dev/shm/kvpool-bench");
	wb_u64(&b, 1);
	wb_u64(&b, uuid);
	wb_u64(&b, size);
	wb_u64(&b, uuid);
	wb_u64(&b, align);
	wb_u32(&b, align);
	wb_cstr(&b, "127.0.0.1:1");
	wb_blob(&b, NULL, 0);
	wb_u64(&b, 0);
	wb_i32(&b, -1);
	frame(&w, WIRE_OP_MOUNT, 2, &b);
	REQUIRE(tl_send_all(p->fd, w.p, w.len) == 0, "send");
	const uint8_t *body = pc_next(p, &h);
	REQUIRE(h.status == 0, "MOUNT %d", h.status);
	rb_init(&r, body, h.body_len);
	uint32_t sid = rb_u32(&r);
	/* a HEARTBEAT says the REPORTs are in: the segment takes new extents */
	wb_reset(&w);
	wb_reset(&b);
	wb_u32(&b, sid);
	wb_u64(&b, 0);
	wb_u64(&b, 0);
	frame(&w, WIRE_OP_HEARTBEAT, 3, &b);
	REQUIRE(tl_send_all(p->fd, w.p, w.len) == 0, "send");
	pc_next(p, &h);
	REQUIRE(h.status == 0, "HEARTBEAT %d", h.status);
	wb_free(&w);
	wb_free(&b);
	return sid;
}

static long rss_kb(pid_t pid)
{
	char path[64], line[256];
	long kb = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* The value of sample line NAME (labels included) in a /metrics body; -1
 * if absent. */
static double metric_in(const char *body, const char *name)
{
	char pat[160];

	snprintf(pat, sizeof(pat), "\n%s ", name);
	const char *p = strstr(body, pat);
	return p ? strtod(p + strlen(pat), NULL) : -1;
}

/* One sample of the master's /metrics; -1 if absent. */
static double metric(int http_port, const char *name)
{
	char *body = NULL;
	double v = -1;

	if (tl_http(http_port, "GET", "/metrics", NULL, 0, &body, NULL) == 200 && body)
		v = metric_in(body, name);
	free(body);
	return v;
}

/* Mean time the master spent handling one frame, per opcode (from the
 * latency histograms of /metrics): where the time goes. */
static void print_handler_costs(int http_port)
{
	static const char *const ops[] = { "put_start", "put_end", "exists", "get" };
	char *body = NULL;

	if (tl_http(http_port, "GET", "/metrics", NULL, 0, &body, NULL) != 200 || !body) {
		free(body);
		return;
	}
	printf("master time per frame:");
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		char name[128];

		snprintf(name, sizeof(name), "kvpool_master_request_duration_seconds_sum{op=\"%s\"}",
			 ops[i]);
		double sum = metric_in(body, name);
		snprintf(name, sizeof(name),
			 "kvpool_master_request_duration_seconds_count{op=\"%s\"}", ops[i]);
		double cnt = metric_in(body, name);
		if (cnt > 0 && sum >= 0)
			printf(" %s %.2f us", ops[i], sum / cnt * 1e6);
	}
	printf("\n");
	free(body);
}

/* ---- redis, measured in the same run ---- */

/* redis-benchmark -P 64 -c 1 -t get,set -n n -d 16 -q -r keyspace: one
 * connection with 64 requests in flight and random keys, as the master's
 * benchmark uses (without -r redis-benchmark hits one key). */
static char bin_srv[] = "/usr/bin/redis-server", bin_b[] = "/usr/bin/redis-benchmark";

/* Whether the server on port answers a redis PING: a free port picked a
 * moment ago may have been taken meanwhile by another test's listener, and
 * then redis-server never bound it. */
static bool redis_pong(int port)
{
	int fd = tl_connect(port);
	char buf[8] = { 0 };
	struct timeval tv = { .tv_sec = 2 };
	bool ok;

	if (fd < 0)
		return false;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ok = write(fd, "PING\r\n", 6) == 6 && recv(fd, buf, 5, MSG_WAITALL) == 5 &&
	     !memcmp(buf, "+PONG", 5);
	close(fd);
	return ok;
}

static bool redis_bench_once(uint64_t n, uint64_t keyspace, double *get, double *set)
{
	int port = tl_free_port();
	char ps[16], ns[24];
	snprintf(ps, sizeof(ps), "%d", port);
	snprintf(ns, sizeof(ns), "%llu", (unsigned long long)n);
	const char *dir = tl_tmpdir("redis");
	char *srv[] = { bin_srv, "--port", ps, "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "no", "--dir", (char *)dir, "--daemonize", "no", NULL };
	char log[256];
	tl_fmt(log, sizeof(log), "%s/redis.log", dir);
	pid_t pid = tl_spawn(srv, log);
	if (!tl_wait_port(port, 5000) || !redis_pong(port)) {
		tl_kill(pid, SIGKILL, 1000);
		fprintf(stderr, "b_master: redis-server did not answer on port %d (%s)\n", port, log);
		return false;
	}
	char *out = NULL, rs[24];
	snprintf(rs, sizeof(rs), "%llu", (unsigned long long)keyspace);
	char *cli[] = { bin_b, "-h", "127.0.0.1", "-p", ps, "-P", "64", "-c", "1", "-t", "get,set",
			"-n", ns, "-d", "16", "-q", "-r", rs, NULL };
	tl_run(cli, &out, 120000);
	tl_kill(pid, SIGTERM, 3000);
	*get = *set = 0;
	/* "SET: 1234567.89 requests per second..." (lines may be \r-separated) */
	for (char *s = out; s && *s; s++) {
		if (!strncmp(s, "SET: ", 5))
			*set = strtod(s + 5, NULL);
		else if (!strncmp(s, "GET: ", 5))
			*get = strtod(s + 5, NULL);
	}
	if (!(*get > 0 && *set > 0))
		fprintf(stderr, "b_master: redis-benchmark printed no GET/SET rate: %s\n",
			out ? out : "(nothing)");
	free(out);
	return *get > 0 && *set > 0;
}

/* The redis reference, on a fresh port up to three times (see redis_pong). */
static bool redis_bench(uint64_t n, uint64_t keyspace, double *get, double *set)
{
	for (int i = 0; i < 3; i++)
		if (redis_bench_once(n, keyspace, get, set))
			return true;
	return false;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median of n values (sorts a copy). */
static double median(const double *v, int n)
{
	double c[16];

	if (n > 16)
		n = 16;
	memcpy(c, v, sizeof(*c) * (size_t)n);
	qsort(c, (size_t)n, sizeof(*c), cmp_double);
	return n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
}

/* ---- latency ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sorts lat[n] and prints p50/p90/p99/p99.9 on a line headed by what;
 * returns the p99. */
static uint64_t print_pcts(uint64_t *lat, unsigned n, const char *what)
{
	qsort(lat, n, sizeof(*lat), cmp_u64);
	uint64_t p99 = lat[n * 99 / 100];
	printf("  %-30s p50 %.1f p90 %.1f p99 %.1f p99.9 %.1f us\n", what, lat[n / 2] / 1e3,
	       lat[n * 9 / 10] / 1e3, p99 / 1e3, lat[n * 999 / 1000] / 1e3);
	return p99;
}

/* p99 (ns) of n single GETs of random keys among nkeys, one at a time, as
 * the prober sees them; *at_sock: the same from the send to the kernel's
 * arrival stamp of the reply (0 where the kernel gives none). Prints both
 * on lines headed by what. */
static uint64_t get_p99(struct pc *p, unsigned n, uint64_t nkeys, const char *pfx,
			const char *what, uint64_t *at_sock)
{
	uint64_t *lat = malloc(n * sizeof(*lat)), *sock = malloc(n * sizeof(*sock)), x = 7;
	bool stamped = pc_stamp(p);
	unsigned ns = 0;
	struct wbuf w, b;
	char k[72];

	REQUIRE(lat && sock, "oom");
	wb_init(&w);
	wb_init(&b);
	for (unsigned i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		key_of(k, pfx, (x >> 33) % nkeys);
		wb_reset(&b);
		wb_u32(&b, 1);
		wb_cstr(&b, k);
		wb_reset(&w);
		frame(&w, WIRE_OP_GET, i + 1, &b);
		p->rx_ns = 0;
		uint64_t r0 = real_ns(), t0 = now_ns();
		REQUIRE(tl_send_all(p->fd, w.p, w.len) == 0, "send");
		struct wire_hdr h;
		pc_next(p, &h);
		lat[i] = now_ns() - t0;
		REQUIRE(h.status == 0, "GET");
		/* a stamp before the send (a clock step) counts as no wait */
		if (p->rx_ns)
			sock[ns++] = p->rx_ns > r0 ? p->rx_ns - r0 : 0;
	}
	uint64_t p99 = print_pcts(lat, n, what);
	/* the kernel turns stamping on for all sockets a moment after the
	 * first asks (main keeps one asking): the first replies may lack it */
	*at_sock = stamped && ns >= n - n / 100 ?
		print_pcts(sock, ns, "  reply at the prober's socket:") : 0;
	free(lat);
	free(sock);
	wb_free(&w);
	wb_free(&b);
	return p99;
}

/* Child: a node that mounts a segment and keeps putting 4 KiB objects
 * (16 per frame, preferring its segment, keys spread over the key space)
 * at about CHURN_RATE puts/s until
 * killed; with a small segment this keeps eviction rounds running. The
 * rate is fixed so that runs with and without eviction carry the same load
 * and neither saturates the master. */
#define CHURN_RATE 20000

/* CPU placement of part 3 (see the top): place[0] the master, place[1] the
 * prober, place[2] the put load; -1 where unpinned. */
static int place[3] = { -1, -1, -1 };

static void place_cpus(bool pin)
{
	cpu_set_t cs;
	int cpus[3], n = 0;

	if (!pin || sched_getaffinity(0, sizeof(cs), &cs))
		goto unpinned;
	for (int c = CPU_SETSIZE - 1; c >= 0 && n < 3; c--)
		if (CPU_ISSET(c, &cs))
			cpus[n++] = c;
	if (n < 2)
		goto unpinned;
	place[0] = cpus[0];
	place[1] = cpus[1];
	place[2] = cpus[n - 1];		/* with the prober on two CPUs */
	printf("latency placement: master on CPU %d, prober on CPU %d, put load on CPU %d\n",
	       place[0], place[1], place[2]);
	return;
unpinned:
	printf("latency placement: unpinned (%s)\n", pin ? "fewer than 2 CPUs" : "-U");
}

static void pin_to(pid_t pid, int cpu)
{
	cpu_set_t cs;

	if (cpu < 0)
		return;
	CPU_ZERO(&cs);
	CPU_SET(cpu, &cs);
	if (sched_setaffinity(pid, sizeof(cs), &cs))	/* a placement, not a measurement */
		fprintf(stderr, "b_master: cannot pin pid %d to CPU %d: %s\n", (int)pid, cpu,
			strerror(errno));
}

static void churn(int port, uint64_t seg_size)
{
	struct tl_conn *n = tl_client(port, WIRE_ROLE_NODE, NULL, "churn-host");
	char kb[16][72];
	const char *keys[16];
	uint64_t sizes[16];
	struct tl_obj o[16];
	struct wbuf b;

	n->auto_free = true;
	int64_t seg = tl_mount(n, "churn", "churn-host", seg_size, 4, 4096, NULL);
	REQUIRE(seg > 0, "mount");
	wb_init(&b);
	uint64_t t0 = now_ns();
	for (uint64_t i = 0;; i += 16) {
		sigset_t pend;

		/* SIGUSR1 (blocked, see latency_run): no more puts; the node
		 * still answers the FREEs of the eviction, as a node would */
		if (sigpending(&pend) == 0 && sigismember(&pend, SIGUSR1))
			for (;;)
				tl_drain_frees(n, 100);
		uint64_t due = t0 + i * 1000000000ull / CHURN_RATE;
		while (now_ns() < due)
			tl_sleep_ms(1);
		for (int j = 0; j < 16; j++) {
			/* spread over the key space, as hashed keys are: a
			 * bijection of the counter (odd multiplier mod 2^64) */
			key_of(kb[j], "churn", (i + (uint64_t)j) * 0x9e3779b97f4a7c15ull);
			keys[j] = kb[j];
			sizes[j] = 4000;
		}
		if (tl_put_start(n, 1, (uint32_t)seg, 16, keys, sizes, o))
			continue;
		wb_reset(&b);
		wb_u32(&b, 16);
		for (int j = 0; j < 16; j++) {
			wb_cstr(&b, keys[j]);
			wb_u64(&b, o[j].status ? 0 : o[j].generation);
			wb_u64(&b, 1);
		}
		tl_frame_free(tl_call(n, WIRE_OP_PUT_END, &b));
	}
}

/* p99 of single GETs of 1000 pinned hot keys (on a draining segment of
 * their own) on a master configured with extra. With churn_seg > 0 a child
 * keeps putting into a segment of that size meanwhile; with wait_evict the
 * measurement starts once eviction has begun, and with pause_load the
 * child stops putting then (SIGUSR1) and only answers the FREEs the
 * eviction sends it, so that only the master's eviction round runs next
 * to the GETs. *evictions: how many happened during the measurement;
 * *at_sock: the p99 at the prober's socket (get_p99). */
static uint64_t latency_run(const char *what, const char *extra, uint64_t churn_seg,
			    bool wait_evict, bool pause_load, unsigned nlat, uint64_t *evictions,
			    double *at_sock)
{
	struct tl_master m;
	struct tl_info a, b;
	struct pc p;
	char ini[512], k[72];
	pid_t child = 0;

	snprintf(ini, sizeof(ini), "[log]\nlevel = notice\n[master]\nlease_ttl = 1ms\n%s", extra);
	tl_start_master(&m, ini);
	pin_to(m.pid, place[0]);
	pin_to(0, place[1]);
	struct tl_conn *node = tl_client(m.port, WIRE_ROLE_NODE, NULL, "bench-host");
	node->auto_free = true;
	int64_t seg = tl_mount(node, "hot", "bench-host", 64ull << 20, 3, 4096, NULL);
	REQUIRE(seg > 0, "mount");
	for (int i = 0; i < 1000; i++) {
		key_of(k, "hot", (uint64_t)i);
		REQUIRE(tl_put1(node, k, 100, NULL) == 0, "put hot");
		REQUIRE(tl_pin(node, k, 3600000) == 0, "pin");
	}
	REQUIRE(tl_unmount(node, (uint32_t)seg, true) == 0, "drain");	/* readable, no new puts */
	pc_open(&p, m.port);
	hello(&p, WIRE_ROLE_CLIENT);
	if (churn_seg) {
		fflush(NULL);
		child = fork();
		REQUIRE(child >= 0, "fork");
		if (child == 0) {
			sigset_t usr1;

			sigemptyset(&usr1);
			sigaddset(&usr1, SIGUSR1);
			sigprocmask(SIG_BLOCK, &usr1, NULL);	/* polled by churn() */
			pin_to(0, place[2]);
			churn(m.port, churn_seg);
			_exit(0);
		}
		tl_info(node, &a);
		uint64_t end = tl_now_ms() + 20000;
		do {
			tl_sleep_ms(100);
			tl_info(node, &b);
		} while (wait_evict && b.evictions == a.evictions && tl_now_ms() < end);
		/* "while eviction runs" is a measurement only if it runs */
		REQUIRE(!wait_evict || b.evictions > a.evictions,
			"eviction did not start within 20 s of puts into a %llu-byte segment",
			(unsigned long long)churn_seg);
	}
	if (child && pause_load) {
		kill(child, SIGUSR1);	/* the puts stop, FREEs are still answered */
		tl_sleep_ms(5);		/* (after the batch in flight) */
	}
	tl_info(node, &a);
	double es0 = metric(m.http_port, "kvpool_master_eviction_seconds_total");
	uint64_t sock99;
	uint64_t p99 = get_p99(&p, nlat, 1000, "hot", what, &sock99);
	*at_sock = (double)sock99;
	double es1 = metric(m.http_port, "kvpool_master_eviction_seconds_total");
	tl_info(node, &b);
	*evictions = b.evictions - a.evictions;
	if (wait_evict && es0 >= 0 && es1 >= 0 && *evictions)
		printf("    %llu evictions, %.2f us of the master's time each\n",
		       (unsigned long long)*evictions, (es1 - es0) * 1e6 / (double)*evictions);
	if (child) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	pc_close(&p);
	tl_conn_close(node);
	tl_stop_master(&m);
	tl_tmpdir_drop(m.dir);	/* twelve masters in part 3 */
	return p99;
}

int main(int argc, char **argv)
{
	uint64_t nops = 1000000, nobj = 1000000;
	unsigned nlat = 20000;
	int opt, put_only = 0, lat_only = 0, unpinned = 0;

	while ((opt = getopt(argc, argv, "n:m:l:PLU")) != -1) {
		if (opt == 'U')
			unpinned = 1;
		else if (opt == 'P')
			put_only = 1;
		else if (opt == 'L')
			lat_only = 1;
		else if (opt == 'n')
			nops = strtoull(optarg, NULL, 0);
		else if (opt == 'm')
			nobj = strtoull(optarg, NULL, 0);
		else if (opt == 'l')
			nlat = (unsigned)strtoul(optarg, NULL, 0);
		else
			return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (put_only) {
		struct tl_master pm;
		struct pc pp;

		tl_start_master(&pm, "[log]\nlevel = notice\n[master]\neviction_high_watermark = 1.0\n");
		pc_open(&pp, pm.port);
		hello(&pp, WIRE_ROLE_NODE);
		mount_big(&pp, 1ull << 40, 64, 1);
		for (uint64_t done = 0, r = 0; done < nops; done += 100000, r++) {
			char pfx[16];

			snprintf(pfx, sizeof(pfx), "pp%llu-", (unsigned long long)r);
			printf("PUT_START+PUT_END %.0f puts/s\n", bench_put(&pp, 100000, 16, pfx, true));
		}
		print_handler_costs(pm.http_port);
		pc_close(&pp);
		tl_stop_master(&pm);
		return 0;
	}
	if (lat_only)
		goto latency;
	if (access(bin_srv, X_OK) || access(bin_b, X_OK)) {
		printf("skip: %s or %s is not installed (tools/deps.sh bench): no reference\n",
		       bin_srv, bin_b);
		return 77;
	}

	/* 1. throughput. The master and redis run in turns (ROUNDS of each,
	 * a fresh server every time) and the median of the per-round ratios is
	 * printed: on a shared machine the load drifts between one measurement
	 * and the next. */
	enum { ROUNDS = 3 };
	uint64_t nkeys = nops < 200000 ? nops : 200000;
	uint64_t nround = nops / ROUNDS ? nops / ROUNDS : 1;
	double ex[ROUNDS], put[ROUNDS], puta[ROUNDS], get[ROUNDS], rget[ROUNDS], rset[ROUNDS];
	double rex[ROUNDS], rput[ROUNDS], rputa[ROUNDS], rgt[ROUNDS];
	struct tl_master m;
	struct pc p;

	for (int i = 0; i < ROUNDS; i++) {
		tl_start_master(&m, "[log]\nlevel = notice\n[master]\neviction_high_watermark = 1.0\n");
		pc_open(&p, m.port);
		hello(&p, WIRE_ROLE_NODE);
		mount_big(&p, 1ull << 40, 64, 1);
		put[i] = bench_put(&p, nkeys, 16, "tp", true);
		ex[i] = bench_lookup(&p, WIRE_OP_EXISTS, nround * 4, 64, nkeys, "tp");
		get[i] = bench_lookup(&p, WIRE_OP_GET, nround, 1, nkeys, "tp");
		/* and appended: keys past every key the master holds ("tz" > "tp") */
		puta[i] = bench_put(&p, nkeys, 16, "tz", false);
		pc_close(&p);
		if (i == ROUNDS - 1)
			print_handler_costs(m.http_port);
		tl_stop_master(&m);
		/* ratios only from two measurements that happened */
		REQUIRE(redis_bench(nround, nkeys, &rget[i], &rset[i]), "the redis reference failed");
		REQUIRE(ex[i] > 0 && put[i] > 0 && puta[i] > 0 && get[i] > 0,
			"a master measurement is 0");
		rex[i] = ex[i] / rget[i];
		rput[i] = put[i] / rset[i];
		rputa[i] = puta[i] / rset[i];
		rgt[i] = get[i] / rget[i];
	}
	printf("throughput, one connection, 64 frames in flight (%llu random keys of 64 bytes), "
	       "medians of %d rounds:\n", (unsigned long long)nkeys, ROUNDS);
	printf("  reference: redis-benchmark -P 64 -c 1 -d 16 -r %llu (one connection, random "
		       "keys from the same key space; without -r it would hit one key), run between "
		       "the master's rounds: GET %.0f/s SET %.0f/s\n", (unsigned long long)nkeys,
		       median(rget, ROUNDS), median(rset, ROUNDS));
	printf("  EXISTS (64 keys/frame)   %12.0f keys/s   %.2fx redis GET -r (target 1.0x)\n",
	       median(ex, ROUNDS), median(rex, ROUNDS));
	printf("  PUT_START+PUT_END        %12.0f puts/s   %.2fx redis SET -r (target 1.5x; keys "
	       "spread over the key space)\n", median(put, ROUNDS), median(rput, ROUNDS));
	printf("    the same, ascending    %12.0f puts/s   %.2fx redis SET -r (each key past the "
	       "last: no target)\n", median(puta, ROUNDS), median(rputa, ROUNDS));
	printf("  GET (1 key/frame)        %12.0f keys/s   %.2fx redis GET -r (target 1.0x)\n",
	       median(get, ROUNDS), median(rgt, ROUNDS));

	/* 2. memory per object */
	tl_start_master(&m, "[log]\nlevel = notice\n[master]\neviction_high_watermark = 1.0\n");
	pc_open(&p, m.port);
	hello(&p, WIRE_ROLE_NODE);
	mount_big(&p, 1ull << 40, 64, 2);
	long rss0 = rss_kb(m.pid);
	bench_put(&p, nobj, 16, "mem", false);
	long rss1 = rss_kb(m.pid);
	double per = (double)(rss1 - rss0) * 1024.0 / (double)nobj;
	printf("memory: %llu objects, 64-byte keys, 1 replica: RSS +%ld KiB = %.1f bytes/object "
	       "(%.1f + 64-byte key; target <= 160 + key)\n", (unsigned long long)nobj,
	       rss1 - rss0, per, per - 64);
	pc_close(&p);
	tl_stop_master(&m);

latency:
	/* 3. p99 GET latency: idle; with a put load that never evicts (a 1 TiB
	 * segment); with the same load into a 64 MiB segment, eviction running
	 * (above 90%, 20% per round); and eviction alone: a round of 80% of
	 * that segment with the load stopped as it starts (what eviction costs
	 * the master's requests, without the load that makes it necessary).
	 * In rounds, like part 1: the load on a shared machine drifts, and the
	 * median of per-round ratios is steadier than one triple. */
	enum { LAT_ROUNDS = 3 };
	/* [0] as the prober saw it, [1] at its socket */
	double p_idle[2][LAT_ROUNDS], p_load[2][LAT_ROUNDS], p_ev[2][LAT_ROUNDS],
		p_alone[2][LAT_ROUNDS];
	uint64_t ev0, ev1, nev = 0, nalone = 0;
	/* receive stamping stays on while one socket asks for it */
	int keep = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (keep >= 0)
		(void)stamp_rx(keep);
	tl_sleep_ms(50);
	place_cpus(!unpinned);
	for (int r = 0; r < LAT_ROUNDS; r++) {
		printf(" round %d of %d:\n", r + 1, LAT_ROUNDS);
		p_idle[0][r] = (double)latency_run("idle:", "eviction_high_watermark = 1.0\n", 0,
						   false, false, nlat, &ev0, &p_idle[1][r]);
		p_load[0][r] = (double)latency_run("under puts, no eviction:",
						   "eviction_high_watermark = 1.0\n", 1ull << 40,
						   false, false, nlat, &ev1, &p_load[1][r]);
		p_ev[0][r] = (double)latency_run("under puts, eviction running:",
						 "eviction_high_watermark = 0.9\n"
						 "eviction_ratio = 0.2\n",
						 64ull << 20, true, false, nlat, &ev1, &p_ev[1][r]);
		nev += ev1;
		p_alone[0][r] = (double)latency_run("eviction alone, puts paused:",
						    "eviction_high_watermark = 0.9\n"
						    "eviction_ratio = 0.8\n",
						    64ull << 20, true, true, nlat, &ev1,
						    &p_alone[1][r]);
		nalone += ev1;
	}
	printf("GET p99 (one request at a time, %u samples, medians of %d rounds, eviction %llu "
	       "replicas per measurement under the load, %llu alone):\n", nlat, LAT_ROUNDS,
	       (unsigned long long)(nev / LAT_ROUNDS), (unsigned long long)(nalone / LAT_ROUNDS));
	for (int v = 0; v < 2; v++) {
		double r_idle[LAT_ROUNDS], r_load[LAT_ROUNDS], r_alone[LAT_ROUNDS];

		bool all = true;
		for (int r = 0; r < LAT_ROUNDS; r++)
			all &= p_idle[v][r] > 0 && p_load[v][r] > 0 && p_ev[v][r] > 0 &&
			       p_alone[v][r] > 0;
		if (!all) {
			printf("  (no arrival stamps from this kernel: the prober's view only)\n");
			break;
		}
		for (int r = 0; r < LAT_ROUNDS; r++) {
			r_idle[r] = p_ev[v][r] / p_idle[v][r];
			r_load[r] = p_ev[v][r] / p_load[v][r];
			r_alone[r] = p_alone[v][r] / p_idle[v][r];
		}
		printf("  %s: idle %.1f us; under %d puts/s %.1f us; same load while eviction runs "
		       "%.1f us; eviction alone %.1f us\n",
		       v ? "reply at the prober's socket (the master and loopback)" :
			   "as the prober saw it",
		       median(p_idle[v], LAT_ROUNDS) / 1e3, CHURN_RATE,
		       median(p_load[v], LAT_ROUNDS) / 1e3, median(p_ev[v], LAT_ROUNDS) / 1e3,
		       median(p_alone[v], LAT_ROUNDS) / 1e3);
		printf("    eviction under the put load vs idle %.2fx%s, vs the same load without "
		       "eviction %.2fx (per-round ratios: %.2f %.2f %.2f / %.2f %.2f %.2f)\n",
		       median(r_idle, LAT_ROUNDS), v ? " (target <= 2x)" : "",
		       median(r_load, LAT_ROUNDS), r_idle[0], r_idle[1], r_idle[2], r_load[0],
		       r_load[1], r_load[2]);
		printf("    eviction alone vs idle %.2fx (per round: %.2f %.2f %.2f)\n",
		       median(r_alone, LAT_ROUNDS), r_alone[0], r_alone[1], r_alone[2]);
	}
	if (keep >= 0)
		close(keep);
	return 0;
}

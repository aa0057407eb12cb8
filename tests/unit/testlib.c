/* testlib: the helpers of kvpool's C test programs (see testlib.h). */
#include "testlib.h"

#include "clock.h"

int tl_failures;
/* The pool of tl_pool_start, if any: static, so that the exit handler
 * still finds it after main's frame is gone. */
static struct tl_pool tl_the_pool;
static struct tl_pool *tl_pool_cur;

static void tl_pool_stop(void);
static void tl_pool_logs(const struct tl_pool *p);

int tl_done(void)
{
	if (tl_failures) {
		fprintf(stderr, "FAIL: %d check(s) failed\n", tl_failures);
		if (tl_pool_cur)
			tl_pool_logs(tl_pool_cur);
		return 1;
	}
	printf("PASS\n");
	return 0;
}

void tl_fmt(char *dst, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(dst, cap, fmt, ap);
	va_end(ap);
	REQUIRE(n >= 0 && (size_t)n < cap, "string too long for %zu bytes: %s", cap, dst);
}

uint64_t tl_now_ms(void)
{
	return clock_now_ms();
}

void tl_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static pid_t tl_procs[TL_MAX_PROCS];
char tl_dirs[TL_MAX_DIRS][128];
static bool tl_cleanup_armed;
static int tl_rm_cb(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(path);
}

/* Removes temp dir slot i (tree and all) if it is in use. */
static void tl_dir_remove(int i)
{
	if (tl_dirs[i][0]) {
		nftw(tl_dirs[i], tl_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
		tl_dirs[i][0] = '\0';
	}
}

static void tl_cleanup(void)
{
	tl_pool_stop();		/* its nodes before its master */
	for (int i = 0; i < TL_MAX_PROCS; i++)
		if (tl_procs[i] > 0)
			kill(tl_procs[i], SIGTERM);
	for (int i = 0; i < TL_MAX_PROCS; i++) {
		if (tl_procs[i] <= 0)
			continue;
		/* 2 s to exit cleanly, then SIGKILL. */
		for (int t = 0; t < 200; t++) {
			if (waitpid(tl_procs[i], NULL, WNOHANG) != 0)
				break;
			if (t == 199) {
				kill(tl_procs[i], SIGKILL);
				waitpid(tl_procs[i], NULL, 0);
			}
			tl_sleep_ms(10);
		}
		tl_procs[i] = 0;
	}
	for (int i = 0; i < TL_MAX_DIRS; i++) {
		if (tl_dirs[i][0] && getenv("TL_KEEP")) {
			fprintf(stderr, "kept %s (TL_KEEP)\n", tl_dirs[i]);
			continue;
		}
		tl_dir_remove(i);
	}
}

static void tl_on_signal(int sig)
{
	/* Not async-signal-safe in the strict sense (nftw), but we are dying
	 * anyway and leaving daemons behind is worse. */
	tl_cleanup();
	signal(sig, SIG_DFL);
	raise(sig);
}

void tl_arm_cleanup(void)
{
	if (tl_cleanup_armed)
		return;
	tl_cleanup_armed = true;
	atexit(tl_cleanup);
	signal(SIGINT, tl_on_signal);
	signal(SIGTERM, tl_on_signal);
	signal(SIGALRM, tl_on_signal);
	signal(SIGPIPE, SIG_IGN);
}

const char *tl_tmpdir(const char *tag)
{
	tl_arm_cleanup();
	for (int i = 0; i < TL_MAX_DIRS; i++) {
		if (tl_dirs[i][0])
			continue;
		snprintf(tl_dirs[i], sizeof(tl_dirs[i]), "/tmp/kvp-%s-%d-XXXXXX", tag, (int)getpid());
		REQUIRE(mkdtemp(tl_dirs[i]), "mkdtemp: %s", strerror(errno));
		return tl_dirs[i];
	}
	REQUIRE(0, "too many temp dirs");
	return NULL;
}

void tl_tmpdir_drop(const char *dir)
{
	for (int i = 0; i < TL_MAX_DIRS; i++)
		if (tl_dirs[i][0] && !strcmp(tl_dirs[i], dir))
			tl_dir_remove(i);
}

void tl_write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	REQUIRE(f, "%s: %s", path, strerror(errno));
	fputs(text, f);
	REQUIRE(fclose(f) == 0, "%s: %s", path, strerror(errno));
}

char *tl_read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0, cap = 0;

	if (!f)
		return NULL;
	for (;;) {
		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 8192;
			buf = realloc(buf, cap);
			REQUIRE(buf, "oom");
		}
		size_t n = fread(buf + len, 1, cap - len - 1, f);
		len += n;
		if (n == 0)
			break;
	}
	fclose(f);
	buf[len] = '\0';
	return buf;
}

const char *tl_build(void)
{
	const char *b = getenv("KVP_BUILD");

	return b && *b ? b : "build";
}

/* The low end of the kernel's ephemeral port range (32768 if unread). */
static int tl_ephemeral_low(void)
{
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	int lo = 32768;

	if (f) {
		if (fscanf(f, "%d", &lo) != 1)
			lo = 32768;
		fclose(f);
	}
	return lo;
}

/* A port from bind(0) is in the ephemeral range, where outgoing
 * connections (this test's clients, or another test's running beside it)
 * take their source ports: one could take it before the daemon binds.
 * So, like tests/free_ports.py, ports are drawn at random from 10000 up to
 * that range and checked free by binding; none twice in a test. */
int tl_free_port(void)
{
	static int recent[64];
	static unsigned nrecent;
	static uint64_t x;
	static int lo;

	if (!x) {
		x = (clock_now_ns() ^ ((uint64_t)getpid() << 32)) | 1;
		lo = tl_ephemeral_low();
	}
	for (int tries = 0;; tries++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t len = sizeof(a);
		bool seen = false;

		REQUIRE(fd >= 0, "socket: %s", strerror(errno));
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		/* a range too narrow to draw from, or no luck: the kernel's choice */
		if (lo > 11000 && tries < 1000)
			a.sin_port = htons((uint16_t)(10000 + x % (uint64_t)(lo - 10000)));
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
			REQUIRE(a.sin_port != 0, "bind: %s", strerror(errno));
			close(fd);
			continue;
		}
		REQUIRE(getsockname(fd, (struct sockaddr *)&a, &len) == 0, "getsockname");
		close(fd);
		int port = ntohs(a.sin_port);
		for (unsigned i = 0; i < nrecent && i < 64; i++)
			seen |= recent[i] == port;
		if (!seen || tries >= 1100) {
			recent[nrecent++ % 64] = port;
			return port;
		}
	}
}

int tl_connect(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {
		.sin_family = AF_INET,
		.sin_port = htons((uint16_t)port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	};
	int one = 1;

	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

bool tl_wait_port(int port, unsigned timeout_ms)
{
	uint64_t end = tl_now_ms() + timeout_ms;

	do {
		int fd = tl_connect(port);
		if (fd >= 0) {
			close(fd);
			return true;
		}
		tl_sleep_ms(20);
	} while (tl_now_ms() < end);
	return false;
}

pid_t tl_spawn(char *const argv[], const char *log)
{
	tl_arm_cleanup();
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	REQUIRE(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		if (log) {
			int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
			if (fd >= 0) {
				dup2(fd, 1);
				dup2(fd, 2);
				close(fd);
			}
		}
		signal(SIGPIPE, SIG_DFL);
		execv(argv[0], argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	for (int i = 0; i < TL_MAX_PROCS; i++)
		if (tl_procs[i] == 0) {
			tl_procs[i] = pid;
			return pid;
		}
	kill(pid, SIGKILL);
	REQUIRE(0, "too many processes");
	return -1;
}

void tl_forget(pid_t pid)
{
	for (int i = 0; i < TL_MAX_PROCS; i++)
		if (tl_procs[i] == pid)
			tl_procs[i] = 0;
}

int tl_wait_exit(pid_t pid, unsigned timeout_ms)
{
	uint64_t end = tl_now_ms() + timeout_ms;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid) {
			tl_forget(pid);
			return st;
		}
		if (r < 0)
			return -1;
		if (tl_now_ms() >= end)
			return -1;
		tl_sleep_ms(10);
	}
}

int tl_kill(pid_t pid, int sig, unsigned timeout_ms)
{
	kill(pid, sig);
	int st = tl_wait_exit(pid, timeout_ms);
	if (st == -1) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		tl_forget(pid);
	}
	return st;
}

bool tl_alive(pid_t pid)
{
	return waitpid(pid, NULL, WNOHANG) == 0;
}

int tl_run(char *const argv[], char **out, unsigned timeout_ms)
{
	char path[] = "/tmp/kvp-run-XXXXXX";
	int fd = mkstemp(path);

	REQUIRE(fd >= 0, "mkstemp");
	close(fd);
	pid_t pid = tl_spawn(argv, path);
	int st = tl_wait_exit(pid, timeout_ms);
	if (st == -1)
		st = tl_kill(pid, SIGKILL, 1000);
	if (out)
		*out = tl_read_file(path);
	unlink(path);
	return st;
}

int tl_send_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

int tl_http(int port, const char *method, const char *path, const void *req,
	    size_t req_len, char **body, size_t *body_len)
{
	int fd = tl_connect(port);
	char head[1024];

	if (body)
		*body = NULL;
	if (fd < 0)
		return -1;
	int n = snprintf(head, sizeof(head),
			 "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: %zu\r\n\r\n",
			 method, path, req_len);
	/* A server may answer (413) and close before the whole body is sent:
	 * a failed write still reads what came back. */
	if (tl_send_all(fd, head, (size_t)n) == 0 && req_len)
		tl_send_all(fd, req, req_len);
	char *buf = NULL;
	size_t len = 0, cap = 0;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	for (;;) {
		if (poll(&p, 1, 5000) <= 0)
			break;
		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 16384;
			buf = realloc(buf, cap + 1);
			REQUIRE(buf, "oom");
		}
		ssize_t r = read(fd, buf + len, cap - len);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	if (!buf)
		return -1;
	buf[len] = '\0';
	int status = -1;
	sscanf(buf, "HTTP/%*d.%*d %d", &status);
	char *sep = strstr(buf, "\r\n\r\n");
	if (body) {
		size_t off = sep ? (size_t)(sep + 4 - buf) : len;
		*body = malloc(len - off + 1);
		REQUIRE(*body, "oom");
		memcpy(*body, buf + off, len - off);
		(*body)[len - off] = '\0';
		if (body_len)
			*body_len = len - off;
	}
	free(buf);
	return status;
}

void tl_frame_free(struct tl_frame *f)
{
	if (!f)
		return;
	free(f->body);
	free(f->payload);
	free(f);
}

struct tl_conn *tl_conn_open(int port)
{
	int fd = tl_connect(port);

	if (fd < 0)
		return NULL;
	struct tl_conn *c = calloc(1, sizeof(*c));
	REQUIRE(c, "oom");
	c->fd = fd;
	c->next_reqid = 1;
	c->qtail = &c->queue;
	c->timeout_ms = 5000;
	return c;
}

void tl_conn_close(struct tl_conn *c)
{
	if (!c)
		return;
	while (c->queue) {
		struct tl_frame *f = c->queue;
		c->queue = f->next;
		tl_frame_free(f);
	}
	close(c->fd);
	free(c);
}

static int tl_recv_all(int fd, void *p, size_t n, uint64_t deadline)
{
	uint8_t *b = p;

	while (n) {
		/* Past the deadline, bytes already waiting are still taken (poll
		 * with 0): giving up between a frame's header and its body would
		 * desynchronise the stream. */
		uint64_t now = tl_now_ms();
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		int r = poll(&pf, 1, now >= deadline ? 0 : (int)(deadline - now));
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			return -ETIMEDOUT;
		ssize_t got = recv(fd, b, n, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return -ECONNRESET;
		b += got;
		n -= (size_t)got;
	}
	return 0;
}

int tl_send_frame(struct tl_conn *c, uint16_t op, uint8_t flags, int32_t status,
		  uint64_t reqid, const void *body, size_t len)
{
	uint8_t hdr[WIRE_HDR_SIZE];
	struct wire_hdr h = {
		.magic = WIRE_MAGIC,
		.version = WIRE_VERSION,
		.flags = flags,
		.opcode = op,
		.status = status,
		.body_len = (uint32_t)len,
		.reqid = reqid,
	};

	wire_hdr_encode(&h, hdr);
	if (tl_send_all(c->fd, hdr, sizeof(hdr)))
		return -1;
	return len ? tl_send_all(c->fd, body, len) : 0;
}

int tl_send_raw(struct tl_conn *c, const void *p, size_t n)
{
	return tl_send_all(c->fd, p, n);
}

bool tl_closed_by_peer(struct tl_conn *c)
{
	struct tl_frame *f;
	int rc;

	while ((rc = tl_read_frame(c, &f, 2000)) == 0)
		tl_frame_free(f);
	return rc == -ECONNRESET;
}

int tl_read_frame(struct tl_conn *c, struct tl_frame **out, uint64_t timeout_ms)
{
	uint8_t hdr[WIRE_HDR_SIZE];
	uint64_t deadline = tl_now_ms() + timeout_ms;
	int rc = tl_recv_all(c->fd, hdr, sizeof(hdr), deadline);

	*out = NULL;
	if (rc)
		return rc;
	struct tl_frame *f = calloc(1, sizeof(*f));
	REQUIRE(f, "oom");
	if (wire_hdr_decode(hdr, &f->h, UINT32_MAX, UINT64_MAX)) {
		free(f);
		return -EPROTO;
	}
	f->body = malloc((size_t)f->h.body_len + 1);
	REQUIRE(f->body, "oom (body of %u bytes)", f->h.body_len);
	f->body[f->h.body_len] = 0;
	rc = tl_recv_all(c->fd, f->body, f->h.body_len, deadline);
	if (!rc && f->h.payload_len) {
		f->payload = malloc(f->h.payload_len);
		REQUIRE(f->payload, "oom (payload)");
		rc = tl_recv_all(c->fd, f->payload, f->h.payload_len, deadline);
	}
	if (rc) {
		tl_frame_free(f);
		return rc;
	}
	*out = f;
	return 0;
}

int tl_reply(struct tl_conn *c, const struct tl_frame *req, int32_t status,
	     const void *body, size_t len)
{
	return tl_send_frame(c, req->h.opcode, WIRE_F_REPLY, status, req->h.reqid, body, len);
}

struct tl_frame *tl_wait_reply(struct tl_conn *c, uint64_t reqid)
{
	uint64_t end = tl_now_ms() + c->timeout_ms;

	for (;;) {
		uint64_t now = tl_now_ms();
		struct tl_frame *f;
		if (now >= end || tl_read_frame(c, &f, end - now))
			return NULL;
		if ((f->h.flags & WIRE_F_REPLY) && f->h.reqid == reqid)
			return f;
		if (!(f->h.flags & WIRE_F_REPLY) && f->h.opcode == WIRE_OP_FREE && c->auto_free) {
			tl_reply(c, f, 0, NULL, 0);
			c->frees_answered++;
			tl_frame_free(f);
			continue;
		}
		if (f->h.flags & WIRE_F_REPLY) {	/* a reply nobody waits for */
			tl_frame_free(f);
			continue;
		}
		f->next = NULL;
		*c->qtail = f;
		c->qtail = &f->next;
	}
}

struct tl_frame *tl_call(struct tl_conn *c, uint16_t op, const struct wbuf *body)
{
	uint64_t reqid = c->next_reqid++;

	if (tl_send_frame(c, op, 0, 0, reqid, body ? body->p : NULL, body ? body->len : 0))
		return NULL;
	return tl_wait_reply(c, reqid);
}

struct tl_frame *tl_next_request(struct tl_conn *c, uint64_t timeout_ms)
{
	uint64_t end = tl_now_ms() + timeout_ms;

	for (;;) {
		if (c->queue) {
			struct tl_frame *f = c->queue;
			c->queue = f->next;
			if (!c->queue)
				c->qtail = &c->queue;
			return f;
		}
		uint64_t now = tl_now_ms();
		struct tl_frame *f;
		if (now >= end || tl_read_frame(c, &f, end - now))
			return NULL;
		if (f->h.flags & WIRE_F_REPLY) {
			tl_frame_free(f);
			continue;
		}
		return f;
	}
}

int tl_drain_frees(struct tl_conn *c, uint64_t ms)
{
	int n = 0;
	struct tl_frame *f;

	while ((f = tl_next_request(c, ms))) {
		if (f->h.opcode == WIRE_OP_FREE) {
			tl_reply(c, f, 0, NULL, 0);
			n++;
			c->frees_answered++;
		}
		tl_frame_free(f);
	}
	return n;
}

int tl_hello(struct tl_conn *c, uint16_t role, const char *token,
	     const char *name, const char *host_id)
{
	struct wbuf b;

	wb_init(&b);
	wb_u16(&b, role);
	wb_cstr(&b, token ? token : "");
	wb_cstr(&b, name ? name : "test");
	wb_cstr(&b, host_id ? host_id : "test-host");
	struct tl_frame *f = tl_call(c, WIRE_OP_HELLO, &b);
	wb_free(&b);
	if (!f)
		return KVP_ECONN;
	int st = f->h.status;
	if (st == 0 && f->h.body_len >= 8)
		memcpy(&c->epoch, f->body, 8);
	tl_frame_free(f);
	return st;
}

struct tl_conn *tl_client(int port, uint16_t role, const char *token,
			  const char *host_id)
{
	struct tl_conn *c = tl_conn_open(port);

	REQUIRE(c, "connect to port %d failed", port);
	int st = tl_hello(c, role, token, role == WIRE_ROLE_NODE ? "node" : "client", host_id);
	REQUIRE(st == 0, "HELLO: %s", kvp_strerror(st));
	return c;
}

/* Appends a batch of keys (u32 n + strs) to b. */
static void tl_wb_keys(struct wbuf *b, size_t n, const char *const *keys)
{
	wb_u32(b, (uint32_t)n);
	for (size_t i = 0; i < n; i++)
		wb_cstr(b, keys[i]);
}

struct tl_frame *tl_keys_call(struct tl_conn *c, uint16_t op, const struct wbuf *pre,
			      size_t n, const char *const *keys)
{
	struct wbuf b;

	wb_init(&b);
	if (pre)
		wb_bytes(&b, pre->p, pre->len);
	tl_wb_keys(&b, n, keys);
	struct tl_frame *f = tl_call(c, op, &b);
	wb_free(&b);
	return f;
}

int tl_i32_reply(struct tl_frame *f, size_t n, int *out)
{
	if (!f)
		return KVP_ECONN;
	int st = f->h.status;
	if (st == 0) {
		struct rbuf r;
		rb_init(&r, f->body, f->h.body_len);
		if (rb_u32(&r) != n)
			st = KVP_EPROTO;
		for (size_t i = 0; i < n && st == 0; i++)
			out[i] = rb_status(&r);
		if (!rb_done(&r))
			st = KVP_EPROTO;
	}
	tl_frame_free(f);
	return st;
}

int tl_key_op(struct tl_conn *c, uint16_t op, const struct wbuf *pre, const char *key)
{
	int r = 0;
	int st = tl_i32_reply(tl_keys_call(c, op, pre, 1, &key), 1, &r);

	return st ? st : r;
}

int tl_exists(struct tl_conn *c, const char *key)
{
	return tl_key_op(c, WIRE_OP_EXISTS, NULL, key);
}

int tl_remove(struct tl_conn *c, const char *key, bool force)
{
	struct wbuf pre;

	wb_init(&pre);
	wb_u8(&pre, force);
	int st = tl_key_op(c, WIRE_OP_REMOVE, &pre, key);
	wb_free(&pre);
	return st;
}

int tl_pin(struct tl_conn *c, const char *key, uint64_t ttl_ms)
{
	struct wbuf pre;

	wb_init(&pre);
	wb_u64(&pre, ttl_ms);
	int st = tl_key_op(c, WIRE_OP_PIN, &pre, key);
	wb_free(&pre);
	return st;
}

void tl_rb_reps(struct rbuf *r, struct tl_obj *o, bool grants)
{
	o->nrep = rb_u8(r);
	for (unsigned k = 0; k < o->nrep; k++) {
		struct tl_rep *p = &o->rep[k < KVP_MAX_REPLICAS ? k : KVP_MAX_REPLICAS];
		p->seg = rb_u32(r);
		if (!grants)
			p->tier = rb_u8(r);
		p->off = rb_u64(r);
		p->len = rb_u64(r);
		if (grants) {
			const uint8_t *g = rb_take(r, WIRE_GRANT_LEN);
			if (g)
				memcpy(p->grant, g, WIRE_GRANT_LEN);
		}
	}
}

void tl_wb_put_prefix(struct wbuf *b, unsigned replicas, uint32_t pref,
		      uint32_t flags, uint64_t pin_ttl_ms)
{
	wb_u8(b, (uint8_t)replicas);
	wb_u32(b, pref);
	wb_u32(b, flags);
	wb_u64(b, pin_ttl_ms);
}

int tl_put_start_flags(struct tl_conn *c, unsigned replicas, uint32_t pref,
		       uint32_t flags, uint64_t pin_ttl_ms, size_t n,
		       const char *const *keys, const uint64_t *sizes,
		       struct tl_obj *out)
{
	struct wbuf b;

	wb_init(&b);
	tl_wb_put_prefix(&b, replicas, pref, flags, pin_ttl_ms);
	wb_u32(&b, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		wb_cstr(&b, keys[i]);
		wb_u64(&b, sizes[i]);
	}
	struct tl_frame *f = tl_call(c, WIRE_OP_PUT_START, &b);
	wb_free(&b);
	if (!f)
		return KVP_ECONN;
	int st = f->h.status;
	if (st == 0) {
		struct rbuf r;
		rb_init(&r, f->body, f->h.body_len);
		if (rb_u32(&r) != n)
			st = KVP_EPROTO;
		for (size_t i = 0; i < n && st == 0; i++) {
			memset(&out[i], 0, sizeof(out[i]));
			out[i].status = rb_status(&r);
			out[i].generation = rb_u64(&r);
			tl_rb_reps(&r, &out[i], true);
		}
		if (!rb_done(&r))
			st = KVP_EPROTO;
	}
	tl_frame_free(f);
	return st;
}

int tl_put_start(struct tl_conn *c, unsigned replicas, uint32_t pref, size_t n,
		 const char *const *keys, const uint64_t *sizes, struct tl_obj *out)
{
	return tl_put_start_flags(c, replicas, pref, 0, 0, n, keys, sizes, out);
}

int tl_put_start1(struct tl_conn *c, const char *key, uint64_t size,
		  unsigned replicas, uint32_t pref, struct tl_obj *out)
{
	int st = tl_put_start(c, replicas, pref, 1, &key, &size, out);

	return st ? st : out->status;
}

/* PUT_END (csum given) or PUT_REVOKE (csum NULL) of one key: the item
 * status, or the frame status if that failed. */
static int tl_put_finish1(struct tl_conn *c, uint16_t op, const char *key, uint64_t gen,
			  const uint64_t *csum)
{
	struct wbuf b;
	int r = 0;

	wb_init(&b);
	wb_u32(&b, 1);
	wb_cstr(&b, key);
	wb_u64(&b, gen);
	if (csum)
		wb_u64(&b, *csum);
	int st = tl_i32_reply(tl_call(c, op, &b), 1, &r);
	wb_free(&b);
	return st ? st : r;
}

int tl_put_end1(struct tl_conn *c, const char *key, uint64_t gen, uint64_t csum)
{
	return tl_put_finish1(c, WIRE_OP_PUT_END, key, gen, &csum);
}

int tl_put_revoke1(struct tl_conn *c, const char *key, uint64_t gen)
{
	return tl_put_finish1(c, WIRE_OP_PUT_REVOKE, key, gen, NULL);
}

int tl_put1(struct tl_conn *c, const char *key, uint64_t size, struct tl_obj *out)
{
	struct tl_obj tmp;
	struct tl_obj *o = out ? out : &tmp;
	int st = tl_put_start1(c, key, size, 1, 0, o);

	return st ? st : tl_put_end1(c, key, o->generation, size);
}

int tl_get_stat1(struct tl_conn *c, const char *key, struct tl_obj *o, bool stat)
{
	struct tl_frame *f = tl_keys_call(c, stat ? WIRE_OP_STAT : WIRE_OP_GET, NULL, 1, &key);

	memset(o, 0, sizeof(*o));
	if (!f)
		return KVP_ECONN;
	int st = f->h.status;
	if (st == 0) {
		struct rbuf r;
		rb_init(&r, f->body, f->h.body_len);
		if (rb_u32(&r) != 1)
			st = KVP_EPROTO;
		o->status = rb_status(&r);
		o->size = rb_u64(&r);
		o->generation = rb_u64(&r);
		o->checksum = rb_u64(&r);
		if (stat) {
			o->put_time_ns = rb_u64(&r);
			o->access_time_ns = rb_u64(&r);
			o->lease_left_ms = rb_i64(&r);
			o->pin_ms = rb_i64(&r);
		} else {
			o->lease_ms = rb_u64(&r);
		}
		tl_rb_reps(&r, o, false);
		if (!rb_done(&r))
			st = KVP_EPROTO;
	}
	tl_frame_free(f);
	return st ? st : o->status;
}

int tl_get1(struct tl_conn *c, const char *key, struct tl_obj *o)
{
	return tl_get_stat1(c, key, o, false);
}

int tl_stat1(struct tl_conn *c, const char *key, struct tl_obj *o)
{
	return tl_get_stat1(c, key, o, true);
}

int tl_info(struct tl_conn *c, struct tl_info *i)
{
	struct tl_frame *f = tl_call(c, WIRE_OP_INFO, NULL);

	memset(i, 0, sizeof(*i));
	if (!f)
		return KVP_ECONN;
	int st = f->h.status;
	struct rbuf r;
	rb_init(&r, f->body, f->h.body_len);
	i->keys = rb_u64(&r);
	i->bytes_used = rb_u64(&r);
	i->capacity = rb_u64(&r);
	i->evictions = rb_u64(&r);
	i->demotions = rb_u64(&r);
	i->leases = rb_u64(&r);
	if (!st && !rb_done(&r))
		st = KVP_EPROTO;
	tl_frame_free(f);
	return st;
}

void tl_settle_evictions(struct tl_conn *node, struct tl_conn *c)
{
	struct tl_info a, b;

	tl_info(c, &a);
	for (int i = 0; i < 100; i++) {
		tl_drain_frees(node, 50);
		tl_info(c, &b);
		if (b.evictions == a.evictions && i > 3)
			break;
		a = b;
	}
}

bool tl_mount_quiet;
int64_t tl_mount_spill(struct tl_conn *c, const char *name, const char *host_id,
		       uint64_t size, uint64_t uuid, uint32_t align, uint64_t spill,
		       uint8_t secret[WIRE_SECRET_LEN])
{
	struct wbuf b;
	char path[128];

	snprintf(path, sizeof(path), "/dev/shm/kvpool-test-%s-%d", name, (int)getpid());
	wb_init(&b);
	wb_cstr(&b, name);
	wb_cstr(&b, host_id);
	wb_cstr(&b, path);
	wb_u64(&b, 1);			/* shm_dev */
	wb_u64(&b, uuid);		/* shm_ino */
	wb_u64(&b, size);
	wb_u64(&b, uuid);
	wb_u64(&b, align);		/* data_off: one aligned block of header */
	wb_u32(&b, align);
	wb_cstr(&b, "127.0.0.1:1");
	wb_blob(&b, NULL, 0);
	wb_u64(&b, spill);
	wb_i32(&b, -1);
	struct tl_frame *f = tl_call(c, WIRE_OP_MOUNT, &b);
	wb_free(&b);
	if (!f)
		return KVP_ECONN;
	int64_t ret = f->h.status;
	if (!ret) {
		struct rbuf r;
		size_t n;
		rb_init(&r, f->body, f->h.body_len);
		ret = rb_u32(&r);
		const uint8_t *sec = rb_blob(&r, &n);
		if (!rb_done(&r) || n != WIRE_SECRET_LEN)
			ret = KVP_EPROTO;
		else if (secret)
			memcpy(secret, sec, WIRE_SECRET_LEN);
	}
	tl_frame_free(f);
	if (ret > 0 && !tl_mount_quiet) {
		wb_init(&b);
		wb_u32(&b, (uint32_t)ret);
		wb_u64(&b, 0);
		wb_u64(&b, 0);
		f = tl_call(c, WIRE_OP_HEARTBEAT, &b);
		wb_free(&b);
		if (!f || f->h.status)
			ret = f ? f->h.status : KVP_ECONN;
		tl_frame_free(f);
	}
	return ret;
}

int64_t tl_mount(struct tl_conn *c, const char *name, const char *host_id,
		 uint64_t size, uint64_t uuid, uint32_t align,
		 uint8_t secret[WIRE_SECRET_LEN])
{
	return tl_mount_spill(c, name, host_id, size, uuid, align, 0, secret);
}

int tl_report(struct tl_conn *c, uint32_t seg, size_t n, const struct tl_extent *e,
	      uint32_t *adopted, uint32_t *rejected)
{
	struct wbuf b;

	wb_init(&b);
	wb_u32(&b, seg);
	wb_u32(&b, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		wb_cstr(&b, e[i].key);
		wb_u8(&b, e[i].tier);
		wb_u64(&b, e[i].off);
		wb_u64(&b, e[i].alloc_len);
		wb_u64(&b, e[i].value_len);
		wb_u64(&b, e[i].checksum);
		wb_u64(&b, e[i].generation);
		wb_u64(&b, e[i].put_time_ns);
	}
	struct tl_frame *f = tl_call(c, WIRE_OP_REPORT, &b);
	wb_free(&b);
	if (!f)
		return KVP_ECONN;
	int st = f->h.status;
	struct rbuf r;
	rb_init(&r, f->body, f->h.body_len);
	uint32_t a = rb_u32(&r), j = rb_u32(&r);
	if (!st && !rb_done(&r))
		st = KVP_EPROTO;
	if (adopted)
		*adopted = a;
	if (rejected)
		*rejected = j;
	tl_frame_free(f);
	return st;
}

/* Sends op with body b (freed here) and returns the reply's frame status,
 * for requests whose reply holds nothing more. */
static int tl_status_call(struct tl_conn *c, uint16_t op, struct wbuf *b)
{
	struct tl_frame *f = tl_call(c, op, b);
	int st = f ? f->h.status : KVP_ECONN;

	wb_free(b);
	tl_frame_free(f);
	return st;
}

int tl_heartbeat_spill(struct tl_conn *c, uint32_t seg, uint64_t spill_used)
{
	struct wbuf b;

	wb_init(&b);
	wb_u32(&b, seg);
	wb_u64(&b, 0);
	wb_u64(&b, spill_used);
	return tl_status_call(c, WIRE_OP_HEARTBEAT, &b);
}

int tl_heartbeat(struct tl_conn *c, uint32_t seg)
{
	return tl_heartbeat_spill(c, seg, 0);
}

int tl_unmount(struct tl_conn *c, uint32_t seg, bool drain)
{
	struct wbuf b;

	wb_init(&b);
	wb_u32(&b, seg);
	wb_u8(&b, drain);
	return tl_status_call(c, WIRE_OP_UNMOUNT, &b);
}

int tl_list(struct tl_conn *c, const char *prefix, const char *delim,
	    const char *cursor, uint32_t limit, char **names, int *is_prefix,
	    size_t cap, size_t *n, char **next)
{
	struct wbuf b;

	*n = 0;
	*next = NULL;
	wb_init(&b);
	wb_cstr(&b, prefix);
	wb_cstr(&b, delim);
	wb_cstr(&b, cursor);
	wb_u32(&b, limit);
	struct tl_frame *f = tl_call(c, WIRE_OP_LIST, &b);
	wb_free(&b);
	if (!f)
		return KVP_ECONN;
	int st = f->h.status;
	if (!st) {
		struct rbuf r;
		size_t len;
		rb_init(&r, f->body, f->h.body_len);
		uint32_t cnt = rb_u32(&r);
		for (uint32_t i = 0; i < cnt && rb_ok(&r); i++) {
			uint8_t isp = rb_u8(&r);
			const uint8_t *nm = rb_str(&r, &len);
			rb_u64(&r);
			rb_u64(&r);
			if (*n < cap && rb_ok(&r)) {
				names[*n] = strndup((const char *)nm, len);
				is_prefix[*n] = isp;
				(*n)++;
			}
		}
		const uint8_t *nx = rb_str(&r, &len);
		*next = strndup(nx ? (const char *)nx : "", len);
		if (!rb_done(&r))
			st = KVP_EPROTO;
	}
	tl_frame_free(f);
	return st;
}

void tl_start_master_args(struct tl_master *m, const char *extra_ini,
			  const char *const *extra_args)
{
	char ini[8192];
	char bin[256];
	char *argv[32];
	int n = 0;

	tl_fmt(m->dir, sizeof(m->dir), "%s", tl_tmpdir("master"));
	tl_fmt(m->conf, sizeof(m->conf), "%s/master.ini", m->dir);
	tl_fmt(m->log, sizeof(m->log), "%s/master.log", m->dir);
	m->port = tl_free_port();
	do
		m->http_port = tl_free_port();
	while (m->http_port == m->port);
	do
		m->md_port = tl_free_port();
	while (m->md_port == m->port || m->md_port == m->http_port);
	bool own_log = extra_ini && strstr(extra_ini, "[log]");
	/* fake nodes heartbeat only when a test says so: a slow run must not
	 * lose them to node_ttl (3 s) unless the test sets it */
	bool own_ttl = extra_ini && strstr(extra_ini, "node_ttl");
	snprintf(ini, sizeof(ini),
		 "[master]\nlisten = 127.0.0.1:%d\nhttp_listen = 127.0.0.1:%d\n"
		 "metadata_listen = 127.0.0.1:%d\n%s%s%s\n",
		 m->port, m->http_port, m->md_port, own_ttl ? "" : "node_ttl = 1h\n",
		 own_log ? "" : "[log]\nlevel = info\n", extra_ini ? extra_ini : "");
	tl_write_file(m->conf, ini);
	tl_fmt(bin, sizeof(bin), "%s/kvpool-master", tl_build());
	argv[n++] = bin;
	argv[n++] = (char *)"-c";
	argv[n++] = m->conf;
	for (int i = 0; extra_args && extra_args[i] && n < 31; i++)
		argv[n++] = (char *)extra_args[i];
	argv[n] = NULL;
	m->pid = tl_spawn(argv, m->log);
	if (!tl_wait_port(m->port, 10000)) {
		char *log = tl_read_file(m->log);
		fprintf(stderr, "master did not start; its log:\n%s\n", log ? log : "(none)");
		free(log);
		REQUIRE(0, "kvpool-master on port %d", m->port);
	}
}

void tl_start_master(struct tl_master *m, const char *extra_ini)
{
	tl_start_master_args(m, extra_ini, NULL);
}

int tl_stop_master(struct tl_master *m)
{
	int st = tl_kill(m->pid, SIGTERM, 5000);
	m->pid = 0;
	return st;
}

void tl_dump_log(const char *path)
{
	char *log = tl_read_file(path);

	fprintf(stderr, "---- %s ----\n%s\n----\n", path, log ? log : "(none)");
	free(log);
}

/* ---- a pool for libkvpool tests ---- */

void tl_pool_kill(pid_t *pid, int sig)
{
	if (*pid > 0)
		tl_kill(*pid, sig, 1000);
	*pid = 0;
}

static void tl_pool_stop(void)
{
	struct tl_pool *p = tl_pool_cur;
	char path[4096];

	if (!p)
		return;
	tl_pool_cur = NULL;
	for (int i = 0; i < p->nnodes; i++)
		tl_pool_kill(&p->node[i], SIGTERM);
	tl_pool_kill(&p->master, SIGTERM);
	for (int i = 0; i < p->nnodes; i++) {
		snprintf(path, sizeof(path), "/dev/shm/%s-n%d", p->tag, i);
		unlink(path);
	}
}

/* Dumps the tail of the daemons' logs (on failure). */
static void tl_pool_logs(const struct tl_pool *p)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "for f in '%s'/*.log; do echo \"--- $f\"; tail -n 15 \"$f\"; done >&2",
		 p->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "(no logs)\n");
}

static void tl_pool_write_common(const struct tl_pool *p, FILE *f)
{
	fprintf(f, "[cluster]\nmaster = 127.0.0.1:%d\n"
		"[master]\nlisten = 127.0.0.1:%d\nhttp_listen = 127.0.0.1:%d\n"
		"metadata_server = false\n"
		"[log]\nlevel = notice\n%s\n",
		p->mport, p->mport, p->mhttp, p->extra);
}

static pid_t tl_pool_spawn(const struct tl_pool *p, const char *prog, const char *conf,
			   const char *log)
{
	char exe[4096], lpath[4096];
	char *argv[] = { exe, (char *)"-c", (char *)conf, NULL };

	tl_fmt(exe, sizeof(exe), "%s/%s", p->bin, prog);
	tl_fmt(lpath, sizeof(lpath), "%s/%s", p->dir, log);
	return tl_spawn(argv, lpath);
}

void tl_pool_start_master(struct tl_pool *p)
{
	p->master = tl_pool_spawn(p, "kvpool-master", p->conf, "master.log");
}

void tl_pool_start_node(struct tl_pool *p, int i)
{
	char conf[256], log[32];

	tl_fmt(conf, sizeof(conf), "%.127s/n%d.ini", p->dir, i);
	tl_fmt(log, sizeof(log), "n%d.log", i);
	p->node[i] = tl_pool_spawn(p, "kvpool-node", conf, log);
}

struct kvp *tl_pool_open(const struct tl_pool *p, const char *const *overrides, int *err)
{
	struct kvp_open_opts o = { .config_file = p->conf, .overrides = overrides };

	return kvp_open(&o, err);
}

int tl_pool_wait_nodes(const struct tl_pool *p, size_t want, int seconds)
{
	for (int i = 0; i < seconds * 20; i++) {
		struct kvp *k = tl_pool_open(p, NULL, NULL);

		if (k) {
			struct kvp_info info;

			if (kvp_info(k, &info) == 0) {
				size_t n = info.nnodes;

				kvp_info_free(&info);
				if (n == want || want == TL_ANY_NODES) {
					kvp_close(k);
					return 1;
				}
			}
			kvp_close(k);
		}
		tl_sleep_ms(50);
	}
	return 0;
}

bool tl_pool_keep_segments;
struct tl_pool *tl_pool_start(int n, unsigned seg_mb, const char *extra)
{
	struct tl_pool *p = &tl_the_pool;
	char path[4096];
	FILE *f;

	memset(p, 0, sizeof(*p));
	REQUIRE(n <= TL_POOL_MAX_NODES);
	tl_fmt(p->bin, sizeof(p->bin), "%s", tl_build());
	tl_fmt(path, sizeof(path), "%.255s/kvpool-master", p->bin);
	if (access(path, X_OK) != 0)
		TL_SKIP("%s is not built", path);
	tl_fmt(path, sizeof(path), "%.255s/kvpool-node", p->bin);
	if (access(path, X_OK) != 0)
		TL_SKIP("%s is not built", path);
	tl_fmt(p->dir, sizeof(p->dir), "%s", tl_tmpdir("client"));
	tl_fmt(p->tag, sizeof(p->tag), "kvpt-cl-%d", (int)getpid());
	tl_fmt(p->extra, sizeof(p->extra), "%s", extra ? extra : "");
	p->mport = tl_free_port();
	p->mhttp = tl_free_port();
	p->nnodes = n;
	tl_pool_cur = p;

	tl_fmt(p->conf, sizeof(p->conf), "%.127s/pool.ini", p->dir);
	f = fopen(p->conf, "w");
	REQUIRE(f);
	tl_pool_write_common(p, f);
	fclose(f);
	for (int i = 0; i < n; i++) {
		p->dport[i] = tl_free_port();
		p->hport[i] = tl_free_port();
		tl_fmt(path, sizeof(path), "%.127s/n%d.ini", p->dir, i);
		f = fopen(path, "w");
		REQUIRE(f);
		tl_pool_write_common(p, f);
		fprintf(f, "[node]\nname = n%d\nlisten = 127.0.0.1:%d\nhttp_listen = 127.0.0.1:%d\n"
			"segment = %s-n%d\nsegment_size = %uM\nheartbeat_interval = 300ms\n"
			"remove_segment_on_exit = %s\n",
			i, p->dport[i], p->hport[i], p->tag, i, seg_mb,
			tl_pool_keep_segments ? "false" : "true");
		fclose(f);
	}
	tl_pool_start_master(p);
	for (int i = 0; i < n; i++)
		tl_pool_start_node(p, i);
	if (!tl_pool_wait_nodes(p, (size_t)n, 30)) {
		fprintf(stderr, "pool did not come up\n");
		tl_pool_logs(p);
		exit(1);
	}
	return p;
}

void tl_fill(void *buf, size_t len, const char *key)
{
	uint64_t x = 1469598103934665603ull;
	uint8_t *b = buf;

	for (const char *k = key; *k; k++)
		x = (x ^ (uint8_t)*k) * 1099511628211ull;
	x ^= len;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		b[i] = (uint8_t)x;
	}
}

int tl_check_fill(const void *buf, size_t len, const char *key)
{
	uint8_t *want = malloc(len ? len : 1);
	int ok;

	REQUIRE(want);
	tl_fill(want, len, key);
	ok = memcmp(buf, want, len) == 0;
	free(want);
	return ok;
}

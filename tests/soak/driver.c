/* driver: the soak workload of kvpool — N client processes (one libkvpool
 * handle each) doing random put/get/get_into/exists/size/remove and their
 * batch forms over one shared key space, every value derived from its key
 * and length so any wrong byte is caught, while a fault schedule
 * (tests/soak/faults.sh) breaks the pool underneath.
 *
 * Processes, not threads: a client killed with SIGKILL mid-put is a fault we
 * inject (SIGUSR1 to the driver), and a client that crashes (SIGBUS from a
 * mapping, SIGSEGV) must not take the bookkeeping with it. Counters live in
 * one MAP_SHARED anonymous mapping, one slot per client, atomics only; the
 * parent respawns dead clients into their slot, watches every operation's
 * start time (a hang is an operation running past --hang-ms) and at the end
 * prints operations, errors by kind, wrong bytes, hangs, the crashes the
 * fault schedule recorded and each daemon's memory before and after.
 * Exit 0: no wrong bytes or metadata, no hang, no daemon or client crash,
 * some operations succeeded (and with --strict no unexpected error kind);
 * 1 otherwise; 2 usage.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"
#include "kvpool.h"

#define MAX_CLIENTS 64
#define MAX_OVERRIDES 32
#define MAX_BATCH 32
#define NERR (2 + KVP_ERR_BASE - KVP_ERR_MIN)	/* index KVP_ERR_BASE - rc for KVP_E*,
						 * NERR-1: anything else */
#define MAX_DAEMONS 16
#define MAX_REPORTED 10		/* mismatch lines printed, then only counted */

enum op {
	OP_PUT, OP_PUT_FROM, OP_GET, OP_GET_INTO, OP_EXISTS, OP_SIZE, OP_REMOVE,
	OP_BATCH_PUT, OP_BATCH_GET, OP_BATCH_EXISTS, OP_BATCH_REMOVE, OP_OPEN, OP_N
};
static const char *const op_names[OP_N] = {
	"put", "put_from", "get", "get_into", "exists", "size", "remove",
	"batch_put", "batch_get", "batch_exists", "batch_remove", "open",
};
/* Relative weights of the operations a client picks (open is not picked). */
static const unsigned op_weight[OP_N] = { 12, 6, 20, 10, 6, 3, 14, 6, 9, 4, 6, 0 };

/* One client's counters; the client writes, the parent reads (atomics). */
struct slot {
	atomic_uint_fast64_t calls[OP_N], ok[OP_N];
	atomic_uint_fast64_t err[OP_N][NERR];
	atomic_uint_fast64_t bytes_put, bytes_got;
	atomic_uint_fast64_t wrong_objects, wrong_bytes, wrong_meta;
	atomic_uint_fast64_t hangs;
	atomic_uint_fast64_t max_op_ns;
	atomic_uint_fast64_t op_start_ns;	/* 0: between operations */
	atomic_uint_fast64_t hang_start;	/* op_start_ns of the last op counted as a hang */
	atomic_int op;				/* enum op running */
	atomic_int in_put;			/* inside a put call */
	atomic_int pid;
	atomic_uint_fast64_t spawns;
};

struct shared {
	atomic_int stop;
	atomic_uint reported;
	struct slot slot[MAX_CLIENTS];
};

struct cfg {
	const char *conf;
	const char *ov[MAX_OVERRIDES + 2];
	int nov;
	unsigned clients, tcp_clients;
	unsigned seconds;
	unsigned keys;
	unsigned batch;
	unsigned force_pct;		/* removes with KVP_REMOVE_FORCE, percent */
	unsigned think_us;		/* pause between two operations of a client */
	uint64_t size_min, size_max;
	uint64_t hang_ms;
	uint64_t timeout_ms;		/* client.timeout, for the default hang limit */
	const char *prefix;
	const char *state;		/* fault schedule state dir, or NULL */
	const char *json;
	bool strict;
	bool quiet;
	uint64_t seed;
};

static struct cfg cfg;
static struct shared *sh;
static volatile sig_atomic_t got_usr1, got_term;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- values: derived from (key, length) ---- */

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t value_seed(const char *key, size_t len)
{
	uint64_t h = 1469598103934665603ull;

	for (const char *k = key; *k; k++)
		h = (h ^ (uint8_t)*k) * 1099511628211ull;
	h ^= (uint64_t)len * 0x9e3779b97f4a7c15ull;
	return splitmix(&h);
}

/* Writes bytes [off, off+n) of the value of (key, len); off is a multiple
 * of 8 and s the generator state at off. */
static void value_fill(uint8_t *out, size_t n, uint64_t *s)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t v = splitmix(s);
		memcpy(out + i, &v, 8);
	}
	if (i < n) {
		uint64_t v = splitmix(s);
		memcpy(out + i, &v, n - i);
	}
}

static void value_make(uint8_t *out, size_t len, const char *key)
{
	uint64_t s = value_seed(key, len);

	value_fill(out, len, &s);
}

/* Number of bytes of buf that differ from the value of (key, len). */
static uint64_t value_diff(const uint8_t *buf, size_t len, const char *key, size_t *first)
{
	uint8_t chunk[65536];
	uint64_t s = value_seed(key, len), bad = 0;

	*first = SIZE_MAX;
	for (size_t off = 0; off < len; off += sizeof(chunk)) {
		size_t n = len - off < sizeof(chunk) ? len - off : sizeof(chunk);

		value_fill(chunk, n, &s);
		if (memcmp(chunk, buf + off, n) == 0)
			continue;
		for (size_t i = 0; i < n; i++) {
			if (chunk[i] != buf[off + i]) {
				if (*first == SIZE_MAX)
					*first = off + i;
				bad++;
			}
		}
	}
	return bad;
}

/* ---- keys: a shared space of cfg.keys names in several shapes ---- */

static void key_name(char *out, size_t cap, unsigned idx)
{
	switch (idx % 8) {
	case 1:	/* engine style: <hash>_<tp_rank>_k */
		snprintf(out, cap, "%s%016x_%u_k", cfg.prefix, idx * 2654435761u, idx % 4);
		break;
	case 3:	/* '@' and '/' separated levels */
		snprintf(out, cap, "%sm@layer%u/blk%u@tp0", cfg.prefix, idx % 7, idx);
		break;
	case 5: {	/* long: close to KVP_MAX_KEY */
		int n = snprintf(out, cap, "%slong/%u/", cfg.prefix, idx);
		size_t want = KVP_MAX_KEY - 8 - (idx % 64);

		while (n > 0 && (size_t)n < want && (size_t)n + 1 < cap) {
			out[n] = (char)('a' + (idx + (unsigned)n) % 26);
			n++;
		}
		if (n > 0 && (size_t)n < cap)
			out[n] = 0;
		break;
	}
	default:
		snprintf(out, cap, "%sk%05u", cfg.prefix, idx);
	}
}

static uint64_t rnd(uint64_t *s)
{
	return splitmix(s);
}

/* Log-uniform in [size_min, size_max]: small and large values both common. */
static size_t pick_len(uint64_t *s)
{
	uint64_t lo = cfg.size_min, hi = cfg.size_max;
	int blo = 63 - __builtin_clzll(lo), bhi = 63 - __builtin_clzll(hi);
	int b = blo + (int)(rnd(s) % (uint64_t)(bhi - blo + 1));
	uint64_t a = (1ull << b) > lo ? (1ull << b) : lo;
	uint64_t z = b < 63 ? (2ull << b) - 1 : UINT64_MAX;

	if (z > hi)
		z = hi;
	if (a > z)
		a = z;
	return (size_t)(a + rnd(s) % (z - a + 1));
}

/* ---- one client process ---- */

struct client {
	struct slot *sl;
	struct kvp *kvp;
	uint64_t rs;
	unsigned id;
	uint8_t *buf[MAX_BATCH];	/* size_max each */
	char keys[MAX_BATCH][KVP_MAX_KEY + 1];
};

static void count_rc(struct client *c, enum op op, long long rc)
{
	int i = kvp_is_err(rc) ? KVP_ERR_BASE - (int)rc : NERR - 1;

	if (rc < 0)
		atomic_fetch_add(&c->sl->err[op][i], 1);
}

static void report_wrong(struct client *c, const char *what, const char *key, size_t len,
			 uint64_t bad, size_t first)
{
	if (atomic_fetch_add(&sh->reported, 1) >= MAX_REPORTED)
		return;
	fprintf(stderr, "soak: client %u: WRONG %s: key %.80s%s len %zu: %" PRIu64
		" bytes differ, first at %zu\n", c->id, what, key, strlen(key) > 80 ? "..." : "",
		len, bad, first);
}

/* Verifies a value read back; counts what is wrong. */
static void check_value(struct client *c, const char *what, const char *key,
			const uint8_t *buf, size_t len)
{
	size_t first = 0;
	uint64_t bad;

	if (len < cfg.size_min || len > cfg.size_max) {
		atomic_fetch_add(&c->sl->wrong_objects, 1);
		atomic_fetch_add(&c->sl->wrong_bytes, len ? len : 1);
		report_wrong(c, what, key, len, len, 0);
		return;
	}
	bad = value_diff(buf, len, key, &first);
	atomic_fetch_add(&c->sl->bytes_got, len);
	if (bad) {
		atomic_fetch_add(&c->sl->wrong_objects, 1);
		atomic_fetch_add(&c->sl->wrong_bytes, bad);
		report_wrong(c, what, key, len, bad, first);
	}
}

static void pick_keys(struct client *c, unsigned n)
{
	unsigned idx[MAX_BATCH];

	for (unsigned i = 0; i < n; i++) {
		bool dup;

		do {	/* distinct keys in one batch */
			idx[i] = (unsigned)(rnd(&c->rs) % cfg.keys);
			dup = false;
			for (unsigned j = 0; j < i; j++)
				dup |= idx[j] == idx[i];
		} while (dup);
		key_name(c->keys[i], sizeof(c->keys[i]), idx[i]);
	}
}

static void op_begin(struct client *c, enum op op)
{
	atomic_store(&c->sl->op, (int)op);
	atomic_store(&c->sl->op_start_ns, now_ns());
	atomic_fetch_add(&c->sl->calls[op], 1);
}

static void op_end(struct client *c)
{
	uint64_t start = atomic_load(&c->sl->op_start_ns), d = now_ns() - start;
	uint64_t mx = atomic_load(&c->sl->max_op_ns);

	while (d > mx && !atomic_compare_exchange_weak(&c->sl->max_op_ns, &mx, d))
		;
	/* The parent's watchdog may have counted this operation already. */
	if (d > cfg.hang_ms * 1000000ull && atomic_exchange(&c->sl->hang_start, start) != start)
		atomic_fetch_add(&c->sl->hangs, 1);
	atomic_store(&c->sl->op_start_ns, 0);
}

/* Forced removes free extents under readers' leases: those readers must
 * then fail verification (never return the new bytes as the old value). */
static int remove_flags(struct client *c)
{
	return rnd(&c->rs) % 100 < cfg.force_pct ? KVP_REMOVE_FORCE : 0;
}

static void do_one(struct client *c, enum op op)
{
	unsigned n = op >= OP_BATCH_PUT ? 1 + (unsigned)(rnd(&c->rs) % cfg.batch) : 1;
	const char *kp[MAX_BATCH];
	const void *cb[MAX_BATCH];
	void *vb[MAX_BATCH];
	size_t lens[MAX_BATCH];
	int res[MAX_BATCH];
	int64_t res64[MAX_BATCH];
	long long rc = 0;

	pick_keys(c, n);
	for (unsigned i = 0; i < n; i++) {
		kp[i] = c->keys[i];
		cb[i] = vb[i] = c->buf[i];
	}
	if (op == OP_PUT || op == OP_PUT_FROM || op == OP_BATCH_PUT) {
		for (unsigned i = 0; i < n; i++) {
			lens[i] = pick_len(&c->rs);
			value_make(c->buf[i], lens[i], c->keys[i]);
		}
	}
	op_begin(c, op);
	switch (op) {
	case OP_PUT:
	case OP_PUT_FROM:
		atomic_store(&c->sl->in_put, 1);
		rc = op == OP_PUT ? kvp_put(c->kvp, kp[0], c->buf[0], lens[0])
				  : kvp_put_from(c->kvp, kp[0], c->buf[0], lens[0]);
		atomic_store(&c->sl->in_put, 0);
		if (rc == 0)
			atomic_fetch_add(&c->sl->bytes_put, lens[0]);
		break;
	case OP_GET: {
		void *p = NULL;
		size_t len = 0;

		rc = kvp_get(c->kvp, kp[0], &p, &len);
		op_end(c);
		if (rc == 0)
			check_value(c, "get", kp[0], p, len);
		kvp_free(p);
		goto counted;
	}
	case OP_GET_INTO: {
		/* Now and then a buffer too small: KVP_ETOOBIG, never a short copy. */
		size_t cap = rnd(&c->rs) % 8 == 0 ? pick_len(&c->rs) : cfg.size_max;
		int64_t got = kvp_get_into(c->kvp, kp[0], c->buf[0], cap);

		op_end(c);
		rc = got < 0 ? got : 0;
		if (got > (int64_t)cap) {
			atomic_fetch_add(&c->sl->wrong_meta, 1);
			fprintf(stderr, "soak: get_into returned %" PRId64 " > cap %zu\n", got, cap);
		} else if (got >= 0) {
			check_value(c, "get_into", kp[0], c->buf[0], (size_t)got);
		}
		goto counted;
	}
	case OP_EXISTS:
		rc = kvp_exists(c->kvp, kp[0]);
		if (rc > 1) {
			atomic_fetch_add(&c->sl->wrong_meta, 1);
			fprintf(stderr, "soak: exists returned %lld\n", rc);
		}
		if (rc > 0)
			rc = 0;
		break;
	case OP_SIZE: {
		uint64_t sz = 0;

		rc = kvp_size(c->kvp, kp[0], &sz);
		if (rc == 0 && (sz < cfg.size_min || sz > cfg.size_max)) {
			atomic_fetch_add(&c->sl->wrong_meta, 1);
			fprintf(stderr, "soak: size of %.80s = %" PRIu64 ", out of range\n", kp[0], sz);
		}
		break;
	}
	case OP_REMOVE:
		rc = kvp_remove(c->kvp, kp[0], remove_flags(c));
		break;
	case OP_BATCH_PUT:
		atomic_store(&c->sl->in_put, 1);
		rc = kvp_batch_put_from(c->kvp, n, kp, cb, lens, res);
		atomic_store(&c->sl->in_put, 0);
		op_end(c);
		for (unsigned i = 0; rc == 0 && i < n; i++) {
			count_rc(c, op, res[i]);
			if (res[i] == 0)
				atomic_fetch_add(&c->sl->bytes_put, lens[i]);
		}
		goto counted;
	case OP_BATCH_GET:
		for (unsigned i = 0; i < n; i++)
			lens[i] = cfg.size_max;
		rc = kvp_batch_get_into(c->kvp, n, kp, vb, lens, res64);
		op_end(c);
		for (unsigned i = 0; rc == 0 && i < n; i++) {
			if (res64[i] > (int64_t)cfg.size_max) {
				atomic_fetch_add(&c->sl->wrong_meta, 1);
				continue;
			}
			if (res64[i] >= 0)
				check_value(c, "batch_get", kp[i], c->buf[i], (size_t)res64[i]);
			else
				count_rc(c, op, res64[i]);
		}
		goto counted;
	case OP_BATCH_EXISTS:
		rc = kvp_batch_exists(c->kvp, n, kp, res);
		op_end(c);
		for (unsigned i = 0; rc == 0 && i < n; i++) {
			if (res[i] > 1)
				atomic_fetch_add(&c->sl->wrong_meta, 1);
			count_rc(c, op, res[i]);
		}
		goto counted;
	case OP_BATCH_REMOVE:
		rc = kvp_batch_remove(c->kvp, n, kp, remove_flags(c), res);
		op_end(c);
		for (unsigned i = 0; rc == 0 && i < n; i++)
			count_rc(c, op, res[i]);
		goto counted;
	default:
		break;
	}
	op_end(c);
counted:
	if (rc == 0)
		atomic_fetch_add(&c->sl->ok[op], 1);
	else
		count_rc(c, op, rc);
}

static enum op pick_op(struct client *c)
{
	unsigned total = 0, r;

	for (int i = 0; i < OP_N; i++)
		total += op_weight[i];
	r = (unsigned)(rnd(&c->rs) % total);
	for (int i = 0; i < OP_N; i++) {
		if (r < op_weight[i])
			return (enum op)i;
		r -= op_weight[i];
	}
	return OP_GET;
}

static int client_open(struct client *c, bool tcp)
{
	const char *ov[MAX_OVERRIDES + 2];
	struct kvp_open_opts o = { .config_file = cfg.conf, .overrides = ov };
	int n = 0, err = 0;

	for (int i = 0; i < cfg.nov; i++)
		ov[n++] = cfg.ov[i];
	if (tcp)
		ov[n++] = "client.protocol=tcp";
	ov[n] = NULL;
	op_begin(c, OP_OPEN);
	c->kvp = kvp_open(&o, &err);
	op_end(c);
	if (c->kvp) {
		atomic_fetch_add(&c->sl->ok[OP_OPEN], 1);
		return 0;
	}
	count_rc(c, OP_OPEN, err ? err : KVP_EINTERNAL);
	return -1;
}

static void on_client_term(int sig)
{
	(void)sig;
	got_term = 1;
}

static int client_main(unsigned id, bool tcp)
{
	struct client c = { .sl = &sh->slot[id], .id = id };
	unsigned long ops = 0;

	signal(SIGTERM, on_client_term);
	signal(SIGINT, SIG_IGN);	/* the parent decides when clients stop */
	signal(SIGUSR1, SIG_DFL);
	c.rs = cfg.seed ^ ((uint64_t)id << 32) ^ (uint64_t)getpid() ^ now_ns();
	for (unsigned i = 0; i < cfg.batch; i++) {
		c.buf[i] = malloc(cfg.size_max);
		if (!c.buf[i]) {
			fprintf(stderr, "soak: client %u: out of memory\n", id);
			return 3;
		}
	}
	while (!atomic_load(&sh->stop) && !got_term) {
		if (!c.kvp && client_open(&c, tcp) < 0) {
			usleep(100000);	/* master down: try again soon */
			continue;
		}
		do_one(&c, pick_op(&c));
		if (cfg.think_us)
			usleep(cfg.think_us);
		/* Reopen now and then: exercises connect/close under faults. */
		if (++ops % 500 == 0) {
			kvp_close(c.kvp);
			c.kvp = NULL;
		}
	}
	if (c.kvp)
		kvp_close(c.kvp);
	for (unsigned i = 0; i < cfg.batch; i++)
		free(c.buf[i]);
	return 0;
}

/* ---- the parent: spawn, watch, kill on request, summarise ---- */

static pid_t spawn(unsigned id)
{
	pid_t p;

	fflush(NULL);
	p = fork();
	if (p == 0)
		_exit(client_main(id, id < cfg.tcp_clients));
	if (p > 0) {
		atomic_store(&sh->slot[id].pid, (int)p);
		atomic_fetch_add(&sh->slot[id].spawns, 1);
	}
	return p;
}

static void on_usr1(int sig)
{
	(void)sig;
	got_usr1 = 1;
}

static void on_parent_term(int sig)
{
	(void)sig;
	got_term = 1;
}

/* Daemon memory from /proc (the fault schedule keeps state/pids/NAME). */
struct dmem {
	char name[64];
	long pid;
	long rss_kb, anon_kb, fds;
};

static void proc_mem(struct dmem *d)
{
	char path[128], line[256];
	FILE *f;
	DIR *dir;
	struct dirent *e;

	d->rss_kb = d->anon_kb = d->fds = -1;
	snprintf(path, sizeof(path), "/proc/%ld/status", d->pid);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "VmRSS:", 6))
			d->rss_kb = strtol(line + 6, NULL, 10);
		else if (!strncmp(line, "RssAnon:", 8))
			d->anon_kb = strtol(line + 8, NULL, 10);
	}
	fclose(f);
	snprintf(path, sizeof(path), "/proc/%ld/fd", d->pid);
	dir = opendir(path);
	if (dir) {
		d->fds = 0;
		while ((e = readdir(dir)))
			d->fds += e->d_name[0] != '.';
		closedir(dir);
	}
}

static int read_daemons(struct dmem *out, int max)
{
	char path[4096];
	DIR *dir;
	struct dirent *e;
	int n = 0;

	if (!cfg.state)
		return 0;
	snprintf(path, sizeof(path), "%s/pids", cfg.state);
	dir = opendir(path);
	if (!dir)
		return 0;
	while ((e = readdir(dir)) && n < max) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/pids/%s", cfg.state, e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		snprintf(out[n].name, sizeof(out[n].name), "%.63s", e->d_name);
		if (fscanf(f, "%ld", &out[n].pid) == 1) {
			proc_mem(&out[n]);
			n++;
		}
		fclose(f);
	}
	closedir(dir);
	/* Sorted by name, so before/after line up. */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && strcmp(out[j - 1].name, out[j].name) > 0; j--) {
			struct dmem t = out[j];
			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return n;
}

/* Lines in state/crashes (one per daemon death the schedule did not cause). */
static long read_crashes(void)
{
	char path[4096];
	long n = 0;
	int ch, last = '\n';
	FILE *f;

	if (!cfg.state)
		return 0;
	snprintf(path, sizeof(path), "%s/crashes", cfg.state);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while ((ch = fgetc(f)) != EOF) {
		if (ch == '\n')
			n++;
		last = ch;
	}
	if (last != '\n')
		n++;
	fclose(f);
	return n;
}

static uint64_t t_start;

/* Seconds since the run started, for messages next to the fault log. */
static double elapsed(void)
{
	return (double)(now_ns() - t_start) / 1e9;
}

/* SIGKILLs a client that is inside a put (waits up to 3 s for one). */
static void kill_client_mid_put(unsigned *killed)
{
	uint64_t until = now_ns() + 3000000000ull;

	while (now_ns() < until) {
		for (unsigned i = 0; i < cfg.clients; i++) {
			struct slot *s = &sh->slot[i];
			int p = atomic_load(&s->pid);

			if (p > 0 && atomic_load(&s->in_put)) {
				kill(p, SIGKILL);
				(*killed)++;
				fprintf(stderr, "soak: %.1f s: killed client %u (pid %d) mid-put\n", elapsed(),
					i, p);
				return;
			}
		}
		usleep(200);
	}
	fprintf(stderr, "soak: no client was inside a put for 3 s; none killed\n");
}

/* Stacks of a hung client, to stderr (gdb, when installed). */
static void dump_stacks(int pid)
{
	char cmd[256];

	if (getenv("KVP_SOAK_NO_GDB"))
		return;
	snprintf(cmd, sizeof(cmd), "command -v gdb >/dev/null && timeout 30 gdb -batch -nx -p %d "
		 "-ex 'thread apply all bt' 2>/dev/null | grep -E '^(Thread|#)' >&2", pid);
	if (system(cmd) != 0)
		fprintf(stderr, "soak: (no stacks of pid %d: gdb missing or failed)\n", pid);
}

static void watchdog(void)
{
	for (unsigned i = 0; i < cfg.clients; i++) {
		struct slot *s = &sh->slot[i];
		uint64_t start = atomic_load(&s->op_start_ns);
		uint64_t now = now_ns();	/* after start: never before it */

		if (start && now > start && now - start > cfg.hang_ms * 1000000ull &&
		    atomic_exchange(&s->hang_start, start) != start) {
			atomic_fetch_add(&s->hangs, 1);
			fprintf(stderr, "soak: %.1f s: HANG: client %u (pid %d, %s): %s running for %" PRIu64
				" ms; its stacks:\n", elapsed(), i, atomic_load(&s->pid),
				i < cfg.tcp_clients ? "tcp" : "auto", op_names[atomic_load(&s->op)],
				(now - start) / 1000000);
			dump_stacks(atomic_load(&s->pid));
		}
	}
}

struct totals {
	uint64_t calls[OP_N], ok[OP_N], err[OP_N][NERR];
	uint64_t all_calls, all_ok, errs_by[NERR];
	uint64_t bytes_put, bytes_got, wrong_objects, wrong_bytes, wrong_meta, hangs, max_op_ns;
};

static void sum(struct totals *t)
{
	memset(t, 0, sizeof(*t));
	for (unsigned i = 0; i < cfg.clients; i++) {
		struct slot *s = &sh->slot[i];

		for (int o = 0; o < OP_N; o++) {
			t->calls[o] += atomic_load(&s->calls[o]);
			t->ok[o] += atomic_load(&s->ok[o]);
			for (int e = 0; e < NERR; e++)
				t->err[o][e] += atomic_load(&s->err[o][e]);
		}
		t->bytes_put += atomic_load(&s->bytes_put);
		t->bytes_got += atomic_load(&s->bytes_got);
		t->wrong_objects += atomic_load(&s->wrong_objects);
		t->wrong_bytes += atomic_load(&s->wrong_bytes);
		t->wrong_meta += atomic_load(&s->wrong_meta);
		t->hangs += atomic_load(&s->hangs);
		if (atomic_load(&s->max_op_ns) > t->max_op_ns)
			t->max_op_ns = atomic_load(&s->max_op_ns);
	}
	for (int o = 0; o < OP_N; o++) {
		if (o != OP_OPEN) {
			t->all_calls += t->calls[o];
			t->all_ok += t->ok[o];
		}
		for (int e = 0; e < NERR; e++)
			t->errs_by[e] += t->err[o][e];
	}
}

static const char *err_name(int e)
{
	return e == NERR - 1 ? "other" : kvp_errname(KVP_ERR_BASE - e);
}

/* Error kinds a healthy pool may return to racing clients (--strict). */
static bool allowed(enum op op, int e)
{
	int rc = KVP_ERR_BASE - e;	/* the index back to its code */

	if (rc == KVP_ENOTFOUND || rc == KVP_EBUSY)
		return true;
	switch (op) {
	case OP_PUT: case OP_PUT_FROM: case OP_BATCH_PUT:
		return rc == KVP_EEXIST || rc == KVP_ENOSPC;
	case OP_GET: case OP_BATCH_GET: case OP_GET_INTO:
		/* A forced remove frees an extent under a reader's lease: the
		 * reader must then fail verification (checksum or generation). */
		if (cfg.force_pct && (rc == KVP_ECHECKSUM || rc == KVP_ESTALE))
			return true;
		return rc == KVP_ELEASE || (op == OP_GET_INTO && rc == KVP_ETOOBIG);
	case OP_REMOVE: case OP_BATCH_REMOVE:
		return rc == KVP_ELEASED;
	default:
		return false;
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvp-soak-driver -c FILE [options]\n"
		"  -c, --config FILE    the pool's INI (client side)\n"
		"  -o, --override S.K=V client override, repeatable\n"
		"  --clients N          client processes (default 4, max %d)\n"
		"  --tcp N              of which N use client.protocol=tcp (default half)\n"
		"  --seconds S          run time (default 30)\n"
		"  --keys N             shared key space (default 256)\n"
		"  --size MIN-MAX       value sizes, log-uniform, K/M suffixes (default 1-256K)\n"
		"  --batch N            largest batch (default 8, max %d)\n"
		"  --hang-ms MS         an operation running longer is a hang\n"
		"                       (default 2 x client.timeout + 2000)\n"
		"  --prefix P           key prefix (default soak/<pid>/)\n"
		"  --state DIR          fault schedule state: DIR/pids/NAME, DIR/crashes\n"
		"  --json FILE          also write the summary as JSON\n"
		"  --force PCT          removes that pass KVP_REMOVE_FORCE (default 25)\n"
		"  --think-us US        pause between two operations of a client (default 0)\n"
		"  --strict             fail on error kinds a healthy pool does not return\n"
		"  --seed N             random seed\n"
		"  -q, --quiet          no progress lines\n"
		"SIGUSR1: SIGKILL a client that is inside a put (it is respawned).\n",
		MAX_CLIENTS, MAX_BATCH);
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (end == s)
		return -1;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end)
		return -1;
	*out = v;
	return 0;
}

static int parse_args(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "override", required_argument, NULL, 'o' },
		{ "clients", required_argument, NULL, 1 },
		{ "tcp", required_argument, NULL, 2 },
		{ "seconds", required_argument, NULL, 3 },
		{ "keys", required_argument, NULL, 4 },
		{ "size", required_argument, NULL, 5 },
		{ "batch", required_argument, NULL, 6 },
		{ "hang-ms", required_argument, NULL, 7 },
		{ "prefix", required_argument, NULL, 8 },
		{ "state", required_argument, NULL, 9 },
		{ "json", required_argument, NULL, 10 },
		{ "strict", no_argument, NULL, 11 },
		{ "seed", required_argument, NULL, 12 },
		{ "force", required_argument, NULL, 13 },
		{ "think-us", required_argument, NULL, 14 },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static char prefix[64];
	int tcp = -1, ch;
	char *dash;

	cfg.clients = 4;
	cfg.seconds = 30;
	cfg.keys = 256;
	cfg.batch = 8;
	cfg.force_pct = 25;
	cfg.size_min = 1;
	cfg.size_max = 256 << 10;
	cfg.seed = (uint64_t)time(NULL);
	while ((ch = getopt_long(argc, argv, "c:o:qh", lo, NULL)) != -1) {
		switch (ch) {
		case 'c': cfg.conf = optarg; break;
		case 'o':
			if (cfg.nov >= MAX_OVERRIDES)
				return -1;
			cfg.ov[cfg.nov++] = optarg;
			break;
		case 1: cfg.clients = (unsigned)atoi(optarg); break;
		case 2: tcp = atoi(optarg); break;
		case 3: cfg.seconds = (unsigned)atoi(optarg); break;
		case 4: cfg.keys = (unsigned)atoi(optarg); break;
		case 5:
			dash = strchr(optarg, '-');
			if (!dash)
				return -1;
			*dash = 0;
			if (parse_size(optarg, &cfg.size_min) < 0 || parse_size(dash + 1, &cfg.size_max) < 0)
				return -1;
			break;
		case 6: cfg.batch = (unsigned)atoi(optarg); break;
		case 7: cfg.hang_ms = strtoull(optarg, NULL, 10); break;
		case 8: cfg.prefix = optarg; break;
		case 9: cfg.state = optarg; break;
		case 10: cfg.json = optarg; break;
		case 11: cfg.strict = true; break;
		case 12: cfg.seed = strtoull(optarg, NULL, 0); break;
		case 13: cfg.force_pct = (unsigned)atoi(optarg); break;
		case 14: cfg.think_us = (unsigned)atoi(optarg); break;
		case 'q': cfg.quiet = true; break;
		case 'h': usage(stdout); exit(0);
		default: return -1;
		}
	}
	if (optind != argc || cfg.clients < 1 || cfg.clients > MAX_CLIENTS || cfg.keys < MAX_BATCH ||
	    cfg.batch < 1 || cfg.batch > MAX_BATCH || cfg.size_min < 1 ||
	    cfg.size_min > cfg.size_max || cfg.seconds < 1)
		return -1;
	cfg.tcp_clients = tcp < 0 ? cfg.clients / 2 : (unsigned)tcp;
	if (cfg.tcp_clients > cfg.clients)
		cfg.tcp_clients = cfg.clients;
	if (!cfg.prefix) {
		snprintf(prefix, sizeof(prefix), "soak/%d/", (int)getpid());
		cfg.prefix = prefix;
	}
	return 0;
}

/* client.timeout as the clients will see it (for the default hang limit):
 * the same loader libkvpool uses, so file, environment and overrides count. */
static uint64_t client_timeout_ms(void)
{
	struct kvp_conf *c = calloc(1, sizeof(*c));
	char err[512];
	uint64_t ms = 10000;

	if (!c)
		return ms;
	if (conf_load(c, cfg.conf, cfg.ov, err, sizeof(err)) == 0)
		ms = c->client.timeout;
	else
		fprintf(stderr, "soak: %s\n", err);
	free(c);
	return ms;
}

static void print_summary(FILE *f, const struct totals *t, double secs, unsigned killed,
			  unsigned ccrash, long dcrash, const struct dmem *d0, int n0,
			  const struct dmem *d1, int n1, int unexpected, bool pass)
{
	fprintf(f, "soak: %u clients (%u tcp), %.1f s, %u keys, values %" PRIu64 "..%" PRIu64 " bytes\n",
		cfg.clients, cfg.tcp_clients, secs, cfg.keys, cfg.size_min, cfg.size_max);
	fprintf(f, "operations: %" PRIu64 " (%.0f/s), succeeded %" PRIu64 "; put %.1f MiB, read and verified %.1f MiB\n",
		t->all_calls, secs > 0 ? (double)t->all_calls / secs : 0.0, t->all_ok,
		(double)t->bytes_put / 1048576.0, (double)t->bytes_got / 1048576.0);
	for (int o = 0; o < OP_N; o++) {
		if (!t->calls[o])
			continue;
		fprintf(f, "  %-13s calls %-8" PRIu64 " ok %-8" PRIu64, op_names[o], t->calls[o], t->ok[o]);
		for (int e = 0; e < NERR; e++)
			if (t->err[o][e])
				fprintf(f, " %s %" PRIu64, err_name(e), t->err[o][e]);
		fputc('\n', f);
	}
	fprintf(f, "errors by kind:");
	bool any = false;
	for (int e = 0; e < NERR; e++)
		if (t->errs_by[e]) {
			fprintf(f, " %s %" PRIu64, err_name(e), t->errs_by[e]);
			any = true;
		}
	fprintf(f, "%s\n", any ? "" : " none");
	fprintf(f, "wrong bytes: %" PRIu64 " (in %" PRIu64 " objects); wrong metadata: %" PRIu64 "\n",
		t->wrong_bytes, t->wrong_objects, t->wrong_meta);
	fprintf(f, "hangs past timeout: %" PRIu64 " (limit %" PRIu64 " ms, longest operation %" PRIu64 " ms)\n",
		t->hangs, cfg.hang_ms, t->max_op_ns / 1000000);
	fprintf(f, "daemon crashes: %ld\n", dcrash);
	fprintf(f, "clients killed mid-put: %u; client crashes: %u\n", killed, ccrash);
	fprintf(f, "daemon memory (RssAnon kB, VmRSS kB, open fds) before -> after:\n");
	for (int i = 0; i < n0 || i < n1; i++) {
		const struct dmem *a = i < n0 ? &d0[i] : NULL, *b = NULL;

		for (int j = 0; j < n1; j++)
			if (a && !strcmp(d1[j].name, a->name))
				b = &d1[j];
		if (!a) {
			a = &d1[i];
			fprintf(f, "  %-10s (new) pid %ld: %ld %ld %ld\n", a->name, a->pid, a->anon_kb,
				a->rss_kb, a->fds);
			continue;
		}
		fprintf(f, "  %-10s pid %ld: %ld %ld %ld -> ", a->name, a->pid, a->anon_kb, a->rss_kb, a->fds);
		if (b)
			fprintf(f, "pid %ld%s: %ld %ld %ld\n", b->pid, b->pid != a->pid ? " (restarted)" : "",
				b->anon_kb, b->rss_kb, b->fds);
		else
			fprintf(f, "gone\n");
	}
	if (cfg.strict)
		fprintf(f, "unexpected error kinds (--strict): %d\n", unexpected);
	fprintf(f, "RESULT: %s\n", pass ? "PASS" : "FAIL");
}

static void write_json(const char *path, const struct totals *t, double secs, unsigned killed,
		       unsigned ccrash, long dcrash, const struct dmem *d0, int n0,
		       const struct dmem *d1, int n1, bool pass)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		fprintf(stderr, "soak: %s: %s\n", path, strerror(errno));
		return;
	}
	fprintf(f, "{\"seconds\": %.3f, \"clients\": %u, \"ops\": %" PRIu64 ", \"ok\": %" PRIu64
		", \"bytes_put\": %" PRIu64 ", \"bytes_verified\": %" PRIu64
		", \"wrong_bytes\": %" PRIu64 ", \"wrong_objects\": %" PRIu64 ", \"wrong_meta\": %" PRIu64
		", \"hangs\": %" PRIu64 ", \"max_op_ms\": %" PRIu64 ", \"daemon_crashes\": %ld"
		", \"clients_killed\": %u, \"client_crashes\": %u, \"pass\": %s,\n \"errors\": {",
		secs, cfg.clients, t->all_calls, t->all_ok, t->bytes_put, t->bytes_got, t->wrong_bytes,
		t->wrong_objects, t->wrong_meta, t->hangs, t->max_op_ns / 1000000, dcrash, killed,
		ccrash, pass ? "true" : "false");
	bool first = true;
	for (int e = 0; e < NERR; e++)
		if (t->errs_by[e]) {
			fprintf(f, "%s\"%s\": %" PRIu64, first ? "" : ", ", err_name(e), t->errs_by[e]);
			first = false;
		}
	fprintf(f, "},\n \"ops_by_kind\": {");
	for (int o = 0; o < OP_N; o++) {
		fprintf(f, "%s\"%s\": {\"calls\": %" PRIu64 ", \"ok\": %" PRIu64 ", \"errors\": {",
			o ? ", " : "", op_names[o], t->calls[o], t->ok[o]);
		first = true;
		for (int e = 0; e < NERR; e++)
			if (t->err[o][e]) {
				fprintf(f, "%s\"%s\": %" PRIu64, first ? "" : ", ", err_name(e), t->err[o][e]);
				first = false;
			}
		fprintf(f, "}}");
	}
	fprintf(f, "},\n \"memory\": [");
	for (int i = 0; i < n0; i++) {
		const struct dmem *b = NULL;

		for (int j = 0; j < n1; j++)
			if (!strcmp(d1[j].name, d0[i].name))
				b = &d1[j];
		fprintf(f, "%s{\"name\": \"%s\", \"pid_before\": %ld, \"anon_kb_before\": %ld, "
			"\"rss_kb_before\": %ld, \"fds_before\": %ld, \"pid_after\": %ld, "
			"\"anon_kb_after\": %ld, \"rss_kb_after\": %ld, \"fds_after\": %ld}",
			i ? ", " : "", d0[i].name, d0[i].pid, d0[i].anon_kb, d0[i].rss_kb, d0[i].fds,
			b ? b->pid : -1, b ? b->anon_kb : -1, b ? b->rss_kb : -1, b ? b->fds : -1);
	}
	fprintf(f, "]}\n");
	fclose(f);
}

int main(int argc, char **argv)
{
	struct dmem d0[MAX_DAEMONS], d1[MAX_DAEMONS];
	struct totals t;
	unsigned killed = 0, ccrash = 0, alive;
	uint64_t t0, end, last_progress;
	int n0, n1, unexpected = 0;
	long dcrash;
	bool pass;

	if (parse_args(argc, argv) < 0) {
		usage(stderr);
		return 2;
	}
	cfg.timeout_ms = client_timeout_ms();
	if (!cfg.hang_ms)
		cfg.hang_ms = 2 * cfg.timeout_ms + 2000;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		perror("soak: mmap");
		return 1;
	}
	signal(SIGUSR1, on_usr1);
	signal(SIGTERM, on_parent_term);
	signal(SIGINT, on_parent_term);
	n0 = read_daemons(d0, MAX_DAEMONS);
	t0 = t_start = now_ns();
	end = t0 + (uint64_t)cfg.seconds * 1000000000ull;
	last_progress = t0;
	for (unsigned i = 0; i < cfg.clients; i++)
		if (spawn(i) < 0) {
			perror("soak: fork");
			atomic_store(&sh->stop, 1);
			break;
		}

	while (!got_term && now_ns() < end && !atomic_load(&sh->stop)) {
		int status;
		pid_t p;

		if (got_usr1) {
			got_usr1 = 0;
			kill_client_mid_put(&killed);
		}
		while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
			for (unsigned i = 0; i < cfg.clients; i++) {
				if (atomic_load(&sh->slot[i].pid) != p)
					continue;
				atomic_store(&sh->slot[i].pid, 0);
				atomic_store(&sh->slot[i].op_start_ns, 0);
				atomic_store(&sh->slot[i].in_put, 0);
				if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
					ccrash++;
					fprintf(stderr, "soak: %.1f s: CLIENT CRASH: client %u (pid %d) %s %d\n",
						elapsed(), i, (int)p, WIFSIGNALED(status) ? "killed by signal" : "exited",
						WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
				}
				if (spawn(i) < 0)
					perror("soak: fork");
			}
		}
		watchdog();
		if (!cfg.quiet && now_ns() - last_progress > 10000000000ull) {
			last_progress = now_ns();
			sum(&t);
			fprintf(stderr, "soak: %.0f s: %" PRIu64 " ops, %" PRIu64 " ok, wrong bytes %" PRIu64
				", hangs %" PRIu64 "\n", (double)(last_progress - t0) / 1e9, t.all_calls,
				t.all_ok, t.wrong_bytes, t.hangs);
		}
		usleep(5000);
	}

	/* Stop: clients finish their operation; one stuck past the hang limit
	 * is counted by the watchdog and then killed. */
	atomic_store(&sh->stop, 1);
	uint64_t stop_at = now_ns(), deadline = stop_at + (cfg.hang_ms + 5000) * 1000000ull;
	do {
		int status;
		pid_t p;

		alive = 0;
		while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
			for (unsigned i = 0; i < cfg.clients; i++) {
				if (atomic_load(&sh->slot[i].pid) != p)
					continue;
				atomic_store(&sh->slot[i].pid, 0);
				if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) &&
				    !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
					ccrash++;
					fprintf(stderr, "soak: CLIENT CRASH at exit: client %u (pid %d) status 0x%x\n",
						i, (int)p, status);
				}
			}
		}
		for (unsigned i = 0; i < cfg.clients; i++)
			alive += atomic_load(&sh->slot[i].pid) > 0;
		watchdog();
		if (alive)
			usleep(10000);
	} while (alive && now_ns() < deadline);
	for (unsigned i = 0; i < cfg.clients; i++) {
		int p = atomic_load(&sh->slot[i].pid);

		if (p > 0) {
			fprintf(stderr, "soak: client %u (pid %d) did not stop; killing it\n", i, p);
			kill(p, SIGKILL);
			waitpid(p, NULL, 0);
		}
	}

	double secs = (double)(stop_at - t0) / 1e9;
	sum(&t);
	n1 = read_daemons(d1, MAX_DAEMONS);
	dcrash = read_crashes();
	if (cfg.strict)
		for (int o = 0; o < OP_N; o++)
			for (int e = 0; e < NERR; e++)
				if (t.err[o][e] && !allowed((enum op)o, e)) {
					unexpected++;
					fprintf(stderr, "soak: unexpected: %s returned %s %" PRIu64 " times\n",
						op_names[o], err_name(e), t.err[o][e]);
				}
	pass = t.wrong_bytes == 0 && t.wrong_objects == 0 && t.wrong_meta == 0 && t.hangs == 0 &&
	       dcrash == 0 && ccrash == 0 && t.all_ok > 0 && unexpected == 0 &&
	       (!cfg.strict || (t.ok[OP_PUT] + t.ok[OP_PUT_FROM] > 0 && t.ok[OP_GET] + t.ok[OP_GET_INTO] > 0));
	print_summary(stdout, &t, secs, killed, ccrash, dcrash, d0, n0, d1, n1, unexpected, pass);
	if (cfg.json)
		write_json(cfg.json, &t, secs, killed, ccrash, dcrash, d0, n0, d1, n1, pass);
	munmap(sh, sizeof(*sh));
	return pass ? 0 : 1;
}

/* replay: `kvpool replay`; see replay.h.
 *
 * Values: block h of a run with seed S is the 16-byte header
 * (h, cli_mix64(h + cli_mix64(S))) followed by a window of one seeded
 * random pattern that starts at an offset chosen by a hash of h. A get is
 * checked byte for byte against that, so a value of another block, of
 * another run or a damaged one is always caught (the header), without
 * keeping any value.
 *
 * Processes: --clients N client processes are forked, each with its own
 * libkvpool handle (an engine instance each); request q goes to client
 * q % N. They share one anonymous MAP_SHARED region: per-client counters
 * (written by their client only), the time of each request, and a few
 * atomics the parent reads for the progress bar. The parent holds no
 * handle while they run.
 */
#include "replay.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cli_util.h"
#include "extent.h"
#include "kvpool.h"
#include "kvpool_i.h"
#include "localpool.h"
#include "polsim.h"
#include "svgplot.h"
#include "trace.h"

#define REPLAY_HDR 16			/* value header: hash id, run check */
#define REPLAY_MIN_BLOCK 64
#define REPLAY_SLACK (64u << 10)	/* value windows start in the pattern's first 64 KiB */
#define REPLAY_BUF_MAX (64u << 20)	/* value bytes one call moves at most */
#define REPLAY_MAX_CLIENTS 256
#define REPLAY_MAX_SWEEP 32
#define REPLAY_MAX_MASTER_SET 16	/* --master KEY=VALUE given at most */
#define REPLAY_GRID 60			/* capacities the plot's simulations use */
#define REPLAY_MAX_REPORTED 10		/* error lines printed, then only counted */
#define REPLAY_NOT_RUN UINT64_MAX	/* a request's time when it did not run */

struct replay_cfg {
	const char *trace_path;
	uint64_t block_bytes;
	uint64_t bytes_per_token;	/* 0: --block-bytes (or its default) */
	uint64_t tokens_per_block;
	uint64_t limit;			/* 0: every request */
	uint64_t clients;
	uint64_t seed;
	uint64_t wait_ms;
	uint64_t capacity;		/* --capacity: blocks for the simulations; 0: the pool's */
	double speed;			/* with timestamps */
	bool timestamps, json, keep, sim_only;
	char prefix[1024];
	uint64_t sweep[REPLAY_MAX_SWEEP];
	size_t nsweep;
	const char *plot;
	/* --master KEY=VALUE: [master] keys of the private pools, as given
	 * (for the report) and as the INI lines localpool writes */
	const char *master_set[REPLAY_MAX_MASTER_SET];
	size_t nmaster_set;
	char master_extra[REPLAY_MAX_MASTER_SET * 160];
};

/* One client's counters; written by that client only. */
struct replay_counts {
	uint64_t requests, input_tokens, hit_tokens, hit_tokens_disk;
	uint64_t lookups, hit_blocks, disk_blocks;
	uint64_t puts, put_exist, failed_puts, wrong_values, vanished, get_errors, exists_errors;
	uint64_t bytes_read, bytes_written;
	uint64_t disk_requests, ns_disk, ns_nodisk;
	uint64_t alloc_len, nreplicas;	/* of the first block it put (kvp_stat) */
	uint64_t t_begin, t_end;	/* CLOCK_MONOTONIC ns around its requests */
	int open_err;			/* kvp_open failed: the code */
};

struct replay_shm {
	atomic_uint_fast64_t done, hit_tokens, input_tokens;
	atomic_uint reported;
	uint64_t t0;			/* CLOCK_MONOTONIC ns: the run's start (--timestamps) */
	struct replay_counts c[REPLAY_MAX_CLIENTS];
};

struct replay {
	const struct replay_cfg *cfg;
	const struct kvp_conf *conf;
	const struct trace *t;
	size_t nreq;			/* requests replayed */
	uint64_t block_bytes;
	size_t batch;			/* blocks per get / put call */
	size_t keycap;			/* bytes of one key, NUL included */
	char *pattern;
	uint64_t seedmix;
	struct replay_shm *shm;
	uint64_t *lat;			/* per request: ns inside the pool's calls */
	const char *label;		/* progress bar */
	struct polsim_conf model;	/* the policy the model runs (replay_model_conf) */
};

struct replay_res {
	struct replay_counts sum;
	uint64_t capacity_bytes, alloc_len, nreplicas, capacity_blocks;
	const char *alloc_source;	/* "stat", "estimate", "given" */
	uint64_t requested, segment_size;	/* --sweep */
	double seconds, p50_ms, p99_ms, mean_ms;
	struct trace_sim unl, lru, opt, pol;	/* pol: kvpool's policy, simulated */
	int client_failures;
	bool interrupted, ran;
};

static volatile sig_atomic_t replay_stop;

static void replay_on_signal(int sig)
{
	(void)sig;
	replay_stop = 1;
}

/* ---- values ------------------------------------------------------------- */

static size_t replay_window(const struct replay *rp, int64_t id)
{
	return (size_t)(cli_mix64((uint64_t)id ^ rp->seedmix) % (REPLAY_SLACK / 8)) * 8;
}

static void replay_header(const struct replay *rp, int64_t id, unsigned char *h)
{
	uint64_t a = (uint64_t)id, b = cli_mix64((uint64_t)id + rp->seedmix);

	for (int i = 0; i < 8; i++) {
		h[i] = (unsigned char)(a >> (8 * i));
		h[8 + i] = (unsigned char)(b >> (8 * i));
	}
}

static void replay_fill(const struct replay *rp, int64_t id, char *dst)
{
	replay_header(rp, id, (unsigned char *)dst);
	memcpy(dst + REPLAY_HDR, rp->pattern + replay_window(rp, id) + REPLAY_HDR,
	       rp->block_bytes - REPLAY_HDR);
}

static bool replay_verify(const struct replay *rp, int64_t id, const char *got, int64_t len)
{
	unsigned char h[REPLAY_HDR];

	if (len != (int64_t)rp->block_bytes)
		return false;
	replay_header(rp, id, h);
	return memcmp(got, h, REPLAY_HDR) == 0 &&
	       memcmp(got + REPLAY_HDR, rp->pattern + replay_window(rp, id) + REPLAY_HDR,
		      rp->block_bytes - REPLAY_HDR) == 0;
}

static int replay_pattern(struct replay *rp)
{
	size_t len = ((size_t)rp->block_bytes + REPLAY_SLACK + 7) & ~(size_t)7;
	uint64_t x = cli_mix64(rp->cfg->seed) | 1;

	rp->pattern = malloc(len);
	if (!rp->pattern)
		return -ENOMEM;
	for (size_t i = 0; i < len; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		for (int b = 0; b < 8; b++)
			rp->pattern[i + (size_t)b] = (char)(x >> (8 * b));
	}
	rp->seedmix = cli_mix64(rp->cfg->seed);
	return 0;
}

/* ---- one client --------------------------------------------------------- */

struct replay_client {
	struct replay *rp;
	struct kvp *kvp;
	struct replay_counts *cnt;
	char *keyarena;
	const char **keys;
	char *gbuf, *pbuf;
	void **gbufs;
	const void **pbufs;
	size_t *caps;
	int *ires;
	int64_t *gres;
};

static void replay_report(struct replay *rp, const char *key, int err, const char *what)
{
	if (atomic_fetch_add(&rp->shm->reported, 1) >= REPLAY_MAX_REPORTED)
		return;
	if (what)
		cli_error("replay", key, err, "%s", what);
	else
		cli_error("replay", key, err, NULL);
}

static void replay_sleep_until(uint64_t target)
{
	while (!replay_stop) {
		uint64_t now = clock_now_ns(), d;
		struct timespec ts;

		if (now >= target)
			return;
		d = target - now < 100000000u ? target - now : 100000000u;
		ts.tv_sec = (time_t)(d / 1000000000u);
		ts.tv_nsec = (long)(d % 1000000000u);
		nanosleep(&ts, NULL);
	}
}

/* Request q, as an engine's prefix cache serves it. */
static void replay_request(struct replay_client *cl, size_t q)
{
	struct replay *rp = cl->rp;
	const struct trace *t = rp->t;
	const struct trace_req *r = &t->reqs[q];
	struct replay_counts *cnt = cl->cnt;
	const int64_t *ids = t->hash + r->first;
	uint32_t n = r->nblocks, lead = 0, h = 0;
	uint64_t busy = 0, hit = 0, disk = 0, s;
	bool broken = false;
	int rc;

	for (uint32_t i = 0; i < n; i++)
		snprintf(cl->keyarena + (size_t)i * rp->keycap, rp->keycap, "%s%" PRId64,
			 rp->cfg->prefix, ids[i]);

	/* Which blocks are there; the leading run of them is a hit. */
	if (n > 0) {
		s = clock_now_ns();
		rc = kvp_batch_exists(cl->kvp, n, cl->keys, cl->ires);
		busy += clock_now_ns() - s;
		if (rc < 0) {
			cnt->exists_errors += n;
			replay_report(rp, cl->keys[0], rc, NULL);
		} else {
			for (uint32_t i = 0; i < n; i++)
				if (cl->ires[i] < 0) {
					cnt->exists_errors++;
					replay_report(rp, cl->keys[i], cl->ires[i], NULL);
				}
			while (lead < n && cl->ires[lead] == 1)
				lead++;
		}
	}

	/* Read the run into the registered buffer and check every value; the
	 * first block that cannot be read ends the run. */
	for (uint32_t j = 0; j < lead && !broken; j += (uint32_t)rp->batch) {
		uint32_t m = lead - j < rp->batch ? lead - j : (uint32_t)rp->batch;
		struct kvp_stats s0, s1;

		if (kvp_stats(cl->kvp, &s0) < 0)
			memset(&s0, 0, sizeof(s0));
		s = clock_now_ns();
		rc = kvp_batch_get_into(cl->kvp, m, cl->keys + j, cl->gbufs, cl->caps, cl->gres);
		busy += clock_now_ns() - s;
		if (kvp_stats(cl->kvp, &s1) < 0)
			s1 = s0;
		disk += s1.disk_gets - s0.disk_gets;
		for (uint32_t i = 0; i < m; i++) {
			int64_t g = rc < 0 ? rc : cl->gres[i];
			const char *key = cl->keys[j + i];

			if (g > 0)
				cnt->bytes_read += (uint64_t)g;
			if (broken)
				continue;
			if (g == KVP_ENOTFOUND) {
				cnt->vanished++;	/* evicted since batch_exists */
				broken = true;
			} else if (g < 0) {
				cnt->get_errors++;
				replay_report(rp, key, (int)g, NULL);
				broken = true;
			} else if (!replay_verify(rp, ids[j + i], cl->gbufs[i], g)) {
				cnt->wrong_values++;
				replay_report(rp, key, 0, g != (int64_t)rp->block_bytes ?
					      "WRONG LENGTH returned by get" : "WRONG BYTES returned by get");
				broken = true;
			} else {
				h++;
				hit += trace_block_tokens(t, r, j + i);
			}
		}
	}

	/* Put the rest in chain order: the first extends the last block read. */
	for (uint32_t j = h; j < n; j += (uint32_t)rp->batch) {
		uint32_t m = n - j < rp->batch ? n - j : (uint32_t)rp->batch;
		struct kvp_put_opts o = { 0 };

		for (uint32_t i = 0; i < m; i++)
			replay_fill(rp, ids[j + i], cl->pbuf + (size_t)i * rp->block_bytes);
		o.pred = j > 0 ? cl->keys[j - 1] : NULL;
		s = clock_now_ns();
		rc = kvp_batch_put_opts(cl->kvp, m, cl->keys + j, cl->pbufs, cl->caps, &o, cl->ires);
		busy += clock_now_ns() - s;
		for (uint32_t i = 0; i < m; i++) {
			int p = rc < 0 ? rc : cl->ires[i];

			if (p == 0) {
				cnt->puts++;
				cnt->bytes_written += rp->block_bytes;
			} else if (p == KVP_EEXIST) {
				cnt->put_exist++;
			} else {
				cnt->failed_puts++;
				replay_report(rp, cl->keys[j + i], p, NULL);
			}
			if (p == 0 && !cnt->alloc_len) {
				struct kvp_stat st;

				if (kvp_stat(cl->kvp, cl->keys[j + i], &st) == 0 && st.nreplicas > 0) {
					cnt->alloc_len = st.replicas[0].alloc_len;
					cnt->nreplicas = st.nreplicas;
				}
			}
		}
	}

	rp->lat[q] = busy;
	cnt->requests++;
	cnt->input_tokens += r->input_len;
	cnt->hit_tokens += hit;
	cnt->lookups += n;
	cnt->hit_blocks += h;
	/* The library counts disk reads, not which: a request's hit tokens
	 * are split in proportion of its blocks from each tier. */
	if (disk > h)
		disk = h;
	cnt->disk_blocks += disk;
	if (disk) {
		cnt->hit_tokens_disk += hit * disk / h;
		cnt->disk_requests++;
		cnt->ns_disk += busy;
	} else {
		cnt->ns_nodisk += busy;
	}
	atomic_fetch_add(&rp->shm->done, 1);
	atomic_fetch_add(&rp->shm->hit_tokens, hit);
	atomic_fetch_add(&rp->shm->input_tokens, r->input_len);
}

static void replay_client_free(struct replay_client *cl)
{
	if (cl->kvp) {
		if (cl->gbuf)
			kvp_unregister_buffer(cl->kvp, cl->gbuf);
		if (cl->pbuf)
			kvp_unregister_buffer(cl->kvp, cl->pbuf);
		kvp_close(cl->kvp);
	}
	free(cl->keyarena);
	free(cl->keys);
	free(cl->gbuf);
	free(cl->pbuf);
	free(cl->gbufs);
	free(cl->pbufs);
	free(cl->caps);
	free(cl->ires);
	free(cl->gres);
}

/* Client c of the run (in its own process): 0, or 1 when it could not
 * start (its counters say why). */
static int replay_client(struct replay *rp, unsigned c)
{
	size_t maxb = rp->t->max_blocks ? rp->t->max_blocks : 1, bb = (size_t)rp->block_bytes;
	struct replay_client cl = { .rp = rp, .cnt = &rp->shm->c[c] };
	double ts0 = rp->t->reqs[0].ts_ms;
	int err = 0;

	cl.keyarena = malloc(maxb * rp->keycap);
	cl.keys = calloc(maxb, sizeof(*cl.keys));
	cl.gbufs = calloc(rp->batch, sizeof(*cl.gbufs));
	cl.pbufs = calloc(rp->batch, sizeof(*cl.pbufs));
	cl.caps = calloc(rp->batch, sizeof(*cl.caps));
	cl.ires = calloc(maxb, sizeof(*cl.ires));
	cl.gres = calloc(rp->batch, sizeof(*cl.gres));
	if (posix_memalign((void **)&cl.gbuf, 4096, rp->batch * bb) != 0)
		cl.gbuf = NULL;
	if (posix_memalign((void **)&cl.pbuf, 4096, rp->batch * bb) != 0)
		cl.pbuf = NULL;
	if (!cl.keyarena || !cl.keys || !cl.gbufs || !cl.pbufs || !cl.caps || !cl.ires ||
	    !cl.gres || !cl.gbuf || !cl.pbuf) {
		cl.cnt->open_err = KVP_ENOMEM;
		replay_client_free(&cl);
		return 1;
	}
	for (size_t i = 0; i < maxb; i++)
		cl.keys[i] = cl.keyarena + i * rp->keycap;
	for (size_t i = 0; i < rp->batch; i++) {
		cl.gbufs[i] = cl.gbuf + i * bb;
		cl.pbufs[i] = cl.pbuf + i * bb;
		cl.caps[i] = bb;
	}
	cl.kvp = kvp_open_conf(rp->conf, &err);
	if (!cl.kvp) {
		cl.cnt->open_err = err ? err : KVP_ECONN;
		replay_client_free(&cl);
		return 1;
	}
	/* Registered buffers take the fastest path, as an engine's would. */
	kvp_register_buffer(cl.kvp, cl.gbuf, rp->batch * bb);
	kvp_register_buffer(cl.kvp, cl.pbuf, rp->batch * bb);
	/* With arrival times the run starts at t0 for every client. */
	cl.cnt->t_begin = rp->cfg->timestamps ? rp->shm->t0 : clock_now_ns();
	for (size_t q = c; q < rp->nreq && !replay_stop; q += rp->cfg->clients) {
		if (rp->cfg->timestamps) {
			double off = (rp->t->reqs[q].ts_ms - ts0) / rp->cfg->speed;

			replay_sleep_until(rp->shm->t0 + (uint64_t)(off > 0 ? off * 1e6 : 0));
			if (replay_stop)
				break;
		}
		replay_request(&cl, q);
	}
	cl.cnt->t_end = clock_now_ns();
	replay_client_free(&cl);
	return 0;
}

/* ---- the run ------------------------------------------------------------ */

static void replay_progress(const struct replay *rp, uint64_t t0, bool final)
{
	uint64_t done = atomic_load(&rp->shm->done), total = rp->nreq;
	uint64_t hit = atomic_load(&rp->shm->hit_tokens), in = atomic_load(&rp->shm->input_tokens);
	double secs = (double)(clock_now_ns() - t0) / 1e9, rate = secs > 0 ? (double)done / secs : 0;
	int width = 30, fill = total ? (int)(done * (uint64_t)width / total) : width;
	double eta = rate > 0 ? (double)(total - done) / rate : 0;

	fprintf(stderr, "\r%-10s [%.*s%*s] %3d%% %" PRIu64 "/%" PRIu64 "  %.0f req/s  hit %.4f  "
		"ETA %d:%02d ", rp->label, fill, "##############################", width - fill, "",
		total ? (int)(done * 100 / total) : 100, done, total, rate,
		in ? (double)hit / (double)in : 0.0, (int)(eta / 60), (int)eta % 60);
	if (final)
		fputc('\n', stderr);
}

/* Waits up to wait_ms for a node with a mounted segment; its capacity in
 * *cap. Without one every put would fail, which says nothing. */
static int replay_wait_pool(const struct replay_cfg *cfg, const struct kvp_conf *conf,
			    struct kvp *kvp, uint64_t *cap)
{
	uint64_t end = clock_now_ns() + cfg->wait_ms * 1000000u;
	size_t nodes = 0;
	int last = 0;

	for (;;) {
		struct kvp_info in;
		int rc = kvp_info(kvp, &in);

		if (rc == 0) {
			nodes = in.nnodes;
			*cap = in.capacity;
			kvp_info_free(&in);
			if (*cap > 0)
				return 0;
		}
		last = rc;
		if (clock_now_ns() >= end || replay_stop)
			break;
		usleep(100 * 1000);
	}
	if (replay_stop)
		cli_errorx("replay", "interrupted while waiting for the pool");
	else if (last < 0)
		cli_error("replay", conf->cluster.master, last, "no answer about the pool's capacity");
	else
		cli_error("replay", conf->cluster.master, KVP_ENOSPC,
			  "no capacity in the pool after %.1f s: %s", (double)cfg->wait_ms / 1e3,
			  nodes ? "every node is draining" : "no node has mounted a segment");
	return -1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double pctl_ms(const uint64_t *v, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	i = (size_t)ceil(p * (double)n);
	i = i > 0 ? i - 1 : 0;
	return (double)v[i < n ? i : n - 1] / 1e6;
}

/* Sums the clients' counters and the request times. */
static void replay_collect(const struct replay *rp, struct replay_res *res)
{
	struct replay_counts *s = &res->sum;
	uint64_t *v = malloc((rp->nreq + 1) * sizeof(*v)), total = 0, first = UINT64_MAX, last = 0;
	size_t n = 0;

	for (unsigned c = 0; c < rp->cfg->clients; c++) {
		const struct replay_counts *x = &rp->shm->c[c];

		if (x->t_end > x->t_begin && x->t_begin) {
			first = x->t_begin < first ? x->t_begin : first;
			last = x->t_end > last ? x->t_end : last;
		}

#define ADD(f) s->f += x->f
		ADD(requests); ADD(input_tokens); ADD(hit_tokens); ADD(hit_tokens_disk);
		ADD(lookups); ADD(hit_blocks); ADD(disk_blocks); ADD(puts); ADD(put_exist);
		ADD(failed_puts); ADD(wrong_values); ADD(vanished); ADD(get_errors);
		ADD(exists_errors); ADD(bytes_read); ADD(bytes_written); ADD(disk_requests);
		ADD(ns_disk); ADD(ns_nodisk);
#undef ADD
		if (!s->alloc_len && x->alloc_len) {
			s->alloc_len = x->alloc_len;
			s->nreplicas = x->nreplicas;
		}
	}
	for (size_t q = 0; q < rp->nreq; q++)
		if (rp->lat[q] != REPLAY_NOT_RUN) {
			total += rp->lat[q];
			if (v)
				v[n++] = rp->lat[q];
		}
	if (v) {
		qsort(v, n, sizeof(*v), cmp_u64);
		res->p50_ms = pctl_ms(v, n, 0.50);
		res->p99_ms = pctl_ms(v, n, 0.99);
	}
	res->mean_ms = s->requests ? (double)total / (double)s->requests / 1e6 : 0;
	/* From the first client's first request to the last one's end: not
	 * the clients' start-up, not this process's polling. */
	res->seconds = last > first ? (double)(last - first) / 1e9 : 0;
	free(v);
}

/* Allocation of one block when no put of the run could be looked at:
 * header, key and value rounded up to the default 4 KiB alignment. */
static uint64_t replay_alloc_estimate(const struct replay *rp)
{
	uint64_t a = ext_size((uint32_t)rp->keycap - 1, rp->block_bytes);

	return (a + 4095) & ~(uint64_t)4095;
}

/* The policy the pool's master runs, for its model: a sweep's private
 * pools run the defaults and --master's keys, and so does the model of
 * --sim-only; a pool of the user's runs the [master] section of the
 * configuration. -1 out of memory. Once per command: neither changes during it. */
static int replay_model_conf(const struct replay *rp, struct polsim_conf *pc)
{
	const struct replay_cfg *cfg = rp->cfg;
	const struct kvp_conf *c = rp->conf;
	struct kvp_conf *tmp = NULL;

	if (cfg->nsweep || cfg->sim_only) {
		tmp = malloc(sizeof(*tmp));
		if (!tmp)
			return -1;
		conf_defaults(tmp);
		for (size_t i = 0; i < cfg->nmaster_set; i++) {
			const char *eq = strchr(cfg->master_set[i], '=');
			char key[64], err[256];

			/* checked when parsed (replay_parse_master) */
			snprintf(key, sizeof(key), "%.*s", (int)(eq - cfg->master_set[i]),
				 cfg->master_set[i]);
			conf_set(tmp, "master", key, eq + 1, CONF_SRC_CMDLINE, err, sizeof(err));
		}
		c = tmp;
	}
	pc->lru = strcmp(c->master.eviction_policy, "lru") == 0;
	pc->high_watermark = c->master.eviction_high_watermark;
	pc->ratio = c->master.eviction_ratio;
	pc->half_life = c->master.eviction_half_life;
	free(tmp);
	return 0;
}

static int replay_sims(const struct replay *rp, struct replay_res *res)
{
	if (trace_sim_unlimited(rp->t, rp->nreq, &res->unl) < 0 ||
	    trace_sim_lru(rp->t, rp->nreq, res->capacity_blocks, &res->lru) < 0 ||
	    trace_sim_opt(rp->t, rp->nreq, res->capacity_blocks, &res->opt) < 0 ||
	    polsim_run(rp->t, rp->nreq, res->capacity_blocks, &rp->model, &res->pol) < 0) {
		cli_error("replay", NULL, KVP_ENOMEM, "simulations: out of memory");
		return -1;
	}
	return 0;
}

/* After the clients: the capacity in blocks, the keys removed. */
static void replay_finish_pool(const struct replay *rp, struct replay_res *res, bool cleanup)
{
	struct kvp *kvp;
	int err = 0;

	kvp = kvp_open_conf(rp->conf, &err);
	if (!kvp) {
		cli_error("replay", rp->conf->cluster.master, err ? err : KVP_ECONN,
			  "reconnecting after the run");
		return;
	}
	if (!res->sum.alloc_len) {
		/* No put of this run (its keys were there already): any block
		 * of the trace that is there says the same. */
		struct kvp_stat st;
		char key[1100];

		for (size_t a = 0; a < rp->t->naccess && a < 1000; a++) {
			snprintf(key, sizeof(key), "%s%" PRId64, rp->cfg->prefix, rp->t->hash[a]);
			if (kvp_stat(kvp, key, &st) == 0 && st.nreplicas > 0) {
				res->sum.alloc_len = st.replicas[0].alloc_len;
				res->sum.nreplicas = st.nreplicas;
				break;
			}
		}
	}
	if (cleanup && !rp->cfg->keep) {
		uint64_t removed = 0;
		int rc = kvp_remove_prefix(kvp, rp->cfg->prefix, KVP_REMOVE_FORCE, &removed);

		if (rc < 0)
			cli_error("replay", rp->cfg->prefix, rc, "removing the run's keys");
	}
	kvp_close(kvp);
}

/* One replay against the pool of rp->conf. 0 when it ran (res says how
 * well), -1 when it could not. */
static int replay_run(struct replay *rp, struct replay_res *res, bool cleanup)
{
	const struct replay_cfg *cfg = rp->cfg;
	size_t shm_len = sizeof(struct replay_shm), lat_len = (rp->nreq + 1) * sizeof(uint64_t);
	pid_t pids[REPLAY_MAX_CLIENTS];
	unsigned started = 0, running;
	bool tty = isatty(STDERR_FILENO), passed_on = false;
	uint64_t t0, cap = 0;
	struct kvp *kvp;
	int err = 0, rc = -1;

	memset(res, 0, sizeof(*res));
	kvp = kvp_open_conf(rp->conf, &err);
	if (!kvp) {
		cli_error("replay", rp->conf->cluster.master, err ? err : KVP_ECONN, NULL);
		return -1;
	}
	rc = replay_wait_pool(cfg, rp->conf, kvp, &cap);
	/* No handle crosses a fork: the clients open their own. */
	kvp_close(kvp);
	if (rc < 0)
		return -1;
	rc = -1;
	rp->shm = mmap(NULL, shm_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	rp->lat = mmap(NULL, lat_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (rp->shm == MAP_FAILED || rp->lat == MAP_FAILED) {
		cli_error("replay", NULL, KVP_ENOMEM, "shared counters: %s", strerror(errno));
		goto out_unmap;
	}
	for (size_t q = 0; q < rp->nreq; q++)
		rp->lat[q] = REPLAY_NOT_RUN;
	fflush(stdout);
	fflush(stderr);
	t0 = rp->shm->t0 = clock_now_ns();
	for (unsigned c = 0; c < cfg->clients; c++) {
		pid_t pid = fork();

		/* exit(), not _exit(): stdio was flushed before the fork, and
		 * a sanitizer build checks the client's memory too. */
		if (pid == 0)
			exit(replay_client(rp, c));
		if (pid < 0) {
			cli_errorx("replay", "cannot start client %u: %s", c, strerror(errno));
			replay_stop = 1;
			break;
		}
		pids[started++] = pid;
	}
	for (running = started; running > 0;) {
		struct timespec ts = { 0, 100 * 1000 * 1000 };

		/* A Ctrl-C at the terminal reached them too; a signal to this
		 * process alone is passed on. */
		if (replay_stop && !passed_on) {
			for (unsigned c = 0; c < started; c++)
				if (pids[c] > 0)
					kill(pids[c], SIGINT);
			passed_on = true;
		}

		for (unsigned c = 0; c < started; c++) {
			int st;

			if (pids[c] <= 0 || waitpid(pids[c], &st, WNOHANG) != pids[c])
				continue;
			pids[c] = 0;
			running--;
			if (WIFSIGNALED(st)) {
				res->client_failures++;
				cli_errorx("replay", "client %u died of signal %d (%s)", c, WTERMSIG(st),
					   strsignal(WTERMSIG(st)));
			} else if (WEXITSTATUS(st) != 0) {
				res->client_failures++;
				cli_error("replay", rp->conf->cluster.master,
					  rp->shm->c[c].open_err ? rp->shm->c[c].open_err : KVP_EINTERNAL,
					  "client %u could not start", c);
			}
		}
		if (running == 0)
			break;
		nanosleep(&ts, NULL);
		if (tty)
			replay_progress(rp, t0, false);
	}
	if (tty)
		replay_progress(rp, t0, true);
	res->interrupted = replay_stop != 0;
	replay_collect(rp, res);
	res->ran = true;

	replay_finish_pool(rp, res, cleanup);
	res->capacity_bytes = cap;
	res->alloc_len = res->sum.alloc_len;
	res->nreplicas = res->sum.nreplicas ? res->sum.nreplicas : 1;
	res->alloc_source = "stat";
	if (!res->alloc_len) {
		res->alloc_len = replay_alloc_estimate(rp);
		res->alloc_source = "estimate";
	}
	res->capacity_blocks = cap / (res->alloc_len * res->nreplicas);
	if (cfg->capacity) {
		res->capacity_blocks = cfg->capacity;
		res->alloc_source = "given";
	}
	rc = replay_sims(rp, res);

out_unmap:
	if (rp->shm != MAP_FAILED && rp->shm)
		munmap(rp->shm, shm_len);
	if (rp->lat != MAP_FAILED && rp->lat)
		munmap(rp->lat, lat_len);
	rp->shm = NULL;
	rp->lat = NULL;
	return rc;
}

/* ---- reports ------------------------------------------------------------ */

static double ratio(double a, double b)
{
	return b > 0 ? a / b : NAN;
}

static double frac_way(const struct replay_res *r)
{
	double kv = r->sum.input_tokens ? (double)r->sum.hit_tokens / (double)r->sum.input_tokens : 0;
	double d = r->opt.hit_rate - r->lru.hit_rate;

	return fabs(d) > 1e-12 ? (kv - r->lru.hit_rate) / d : NAN;
}

static double kv_rate(const struct replay_res *r)
{
	return r->sum.input_tokens ? (double)r->sum.hit_tokens / (double)r->sum.input_tokens : 0;
}

static void replay_json_num(const char *name, double v, const char *fmt)
{
	printf(", \"%s\": ", name);
	if (isfinite(v))
		printf(fmt, v);
	else
		fputs("null", stdout);
}

/* The members of one run's JSON object, without the braces. */
static void replay_json(const struct replay *rp, const struct replay_res *r)
{
	const struct replay_counts *s = &r->sum;
	double kv = kv_rate(r), in = (double)s->input_tokens;
	uint64_t nodisk = s->requests - s->disk_requests;

	printf("\"requests\": %" PRIu64 ", \"clients\": %" PRIu64 ", \"block_bytes\": %" PRIu64
	       ", \"tokens_per_block\": %" PRIu64 ", \"key_prefix\": ", s->requests,
	       rp->cfg->clients, rp->block_bytes, rp->cfg->tokens_per_block);
	cli_json_str(stdout, rp->cfg->prefix, strlen(rp->cfg->prefix));
	printf(", \"capacity_bytes\": %" PRIu64 ", \"block_alloc_bytes\": %" PRIu64
	       ", \"replicas\": %" PRIu64 ", \"capacity_blocks\": %" PRIu64 ", \"capacity_source\": \"%s\"",
	       r->capacity_bytes, r->alloc_len, r->nreplicas, r->capacity_blocks, r->alloc_source);
	if (r->requested)
		printf(", \"requested_capacity\": %" PRIu64 ", \"segment_size\": %" PRIu64, r->requested,
		       r->segment_size);
	printf(", \"input_tokens\": %" PRIu64 ", \"hit_tokens\": %" PRIu64, s->input_tokens,
	       s->hit_tokens);
	replay_json_num("hit_rate", kv, "%.6f");
	replay_json_num("hit_rate_mem", in > 0 ? (double)(s->hit_tokens - s->hit_tokens_disk) / in : 0, "%.6f");
	replay_json_num("hit_rate_disk", in > 0 ? (double)s->hit_tokens_disk / in : 0, "%.6f");
	printf(", \"lookup_blocks\": %" PRIu64 ", \"hit_blocks\": %" PRIu64 ", \"hit_blocks_mem\": %"
	       PRIu64 ", \"hit_blocks_disk\": %" PRIu64, s->lookups, s->hit_blocks,
	       s->hit_blocks - s->disk_blocks, s->disk_blocks);
	printf(", \"sim\": {\"unlimited\": %.6f, \"lru\": %.6f, \"optimum\": %.6f, \"policy\": %.6f}",
	       r->unl.hit_rate, r->lru.hit_rate, r->opt.hit_rate, r->pol.hit_rate);
	replay_json_num("ratio_lru", ratio(kv, r->lru.hit_rate), "%.4f");
	replay_json_num("fraction_lru_to_optimum", frac_way(r), "%.4f");
	printf(", \"seconds\": %.3f", r->seconds);
	replay_json_num("requests_per_s", r->seconds > 0 ? (double)s->requests / r->seconds : 0, "%.1f");
	replay_json_num("gb_per_s", r->seconds > 0 ? (double)(s->bytes_read + s->bytes_written) /
		 r->seconds / 1e9 : 0, "%.4f");
	printf(", \"bytes_read\": %" PRIu64 ", \"bytes_written\": %" PRIu64, s->bytes_read,
	       s->bytes_written);
	printf(", \"lat_ms\": {\"p50\": %.3f, \"p99\": %.3f, \"mean\": %.3f}", r->p50_ms, r->p99_ms,
	       r->mean_ms);
	printf(", \"requests_disk_hit\": %" PRIu64, s->disk_requests);
	replay_json_num("mean_ms_disk_hit", s->disk_requests ? (double)s->ns_disk /
		 (double)s->disk_requests / 1e6 : NAN, "%.3f");
	replay_json_num("mean_ms_no_disk_hit", nodisk ? (double)s->ns_nodisk / (double)nodisk / 1e6 : NAN,
		 "%.3f");
	printf(", \"puts\": %" PRIu64 ", \"puts_existing\": %" PRIu64 ", \"failed_puts\": %" PRIu64
	       ", \"wrong_values\": %" PRIu64 ", \"vanished\": %" PRIu64 ", \"get_errors\": %" PRIu64
	       ", \"exists_errors\": %" PRIu64 ", \"client_failures\": %d, \"interrupted\": %s",
	       s->puts, s->put_exist, s->failed_puts, s->wrong_values, s->vanished, s->get_errors,
	       s->exists_errors, r->client_failures, r->interrupted ? "true" : "false");
}

static const char *replay_base(const char *path)
{
	const char *b = strrchr(path, '/');

	return b ? b + 1 : path;
}

static void replay_print(const struct replay *rp, const struct replay_res *r)
{
	const struct replay_counts *s = &r->sum;
	const struct replay_cfg *cfg = rp->cfg;
	double kv = kv_rate(r), in = (double)s->input_tokens, f = frac_way(r);
	uint64_t nodisk = s->requests - s->disk_requests;
	char b1[32], b2[32], b3[32], b4[32];

	printf("replay of %s: %" PRIu64 " of %zu requests, %" PRIu64 " block lookups, %.1fM input "
	       "tokens, %" PRIu64 " client%s, %s%s\n", replay_base(cfg->trace_path), s->requests,
	       rp->t->nreqs, s->lookups, in / 1e6, cfg->clients, cfg->clients == 1 ? "" : "s",
	       cfg->timestamps ? "at the trace's arrival times" : "as fast as possible",
	       r->interrupted ? " (interrupted)" : "");
	if (cfg->timestamps && cfg->speed != 1.0)
		printf("             (arrival times scaled by 1/%g)\n", cfg->speed);
	printf("  pool         %" PRIu64 " blocks: %s / %s per block (%s value of %" PRIu64
	       " tokens, %" PRIu64 " replica%s%s)\n", r->capacity_blocks,
	       cli_human_size(r->capacity_bytes, b1, sizeof(b1)),
	       cli_human_size(r->alloc_len, b2, sizeof(b2)),
	       cli_human_size(rp->block_bytes, b3, sizeof(b3)), cfg->tokens_per_block, r->nreplicas,
	       r->nreplicas == 1 ? "" : "s",
	       strcmp(r->alloc_source, "stat") == 0 ? "" :
	       strcmp(r->alloc_source, "given") == 0 ? "; --capacity" : "; estimated");
	printf("  hit rate     %.4f of input tokens: %.4f from memory, %.4f from the spill tier\n", kv,
	       in > 0 ? (double)(s->hit_tokens - s->hit_tokens_disk) / in : 0,
	       in > 0 ? (double)s->hit_tokens_disk / in : 0);
	printf("  reference    unlimited %.4f, exact LRU %.4f, optimum %.4f (same requests, %" PRIu64
	       " blocks)\n", r->unl.hit_rate, r->lru.hit_rate, r->opt.hit_rate, r->capacity_blocks);
	printf("  model        kvpool's policy simulated on the same requests: %.4f\n", r->pol.hit_rate);
	printf("  vs LRU       kvpool/LRU ");
	if (r->lru.hit_rate > 0)
		printf("%.2fx", kv / r->lru.hit_rate);
	else
		printf("-");
	printf("; (kvpool - LRU) / (optimum - LRU) = ");
	if (isfinite(f))
		printf("%.2f\n", f);
	else
		printf("-\n");
	printf("  rate         %.1f req/s, %.3f GB/s moved (%s read, %s written) in %.1f s\n",
	       r->seconds > 0 ? (double)s->requests / r->seconds : 0,
	       r->seconds > 0 ? (double)(s->bytes_read + s->bytes_written) / r->seconds / 1e9 : 0,
	       cli_human_size(s->bytes_read, b1, sizeof(b1)),
	       cli_human_size(s->bytes_written, b4, sizeof(b4)), r->seconds);
	printf("  per request  p50 %.3f ms, p99 %.3f ms, mean %.3f ms (inside the pool's calls)\n",
	       r->p50_ms, r->p99_ms, r->mean_ms);
	printf("  disk hits    %" PRIu64 " requests (%" PRIu64 " blocks); mean ", s->disk_requests,
	       s->disk_blocks);
	if (s->disk_requests)
		printf("%.3f ms", (double)s->ns_disk / (double)s->disk_requests / 1e6);
	else
		printf("-");
	printf(" with a disk hit, ");
	if (nodisk)
		printf("%.3f ms", (double)s->ns_nodisk / (double)nodisk / 1e6);
	else
		printf("-");
	printf(" without\n");
	printf("  verified     %" PRIu64 " wrong values, %" PRIu64 " failed puts (%" PRIu64 " puts, %"
	       PRIu64 " already there), %" PRIu64 " vanished, %" PRIu64 " errors\n", s->wrong_values,
	       s->failed_puts, s->puts, s->put_exist, s->vanished, s->get_errors + s->exists_errors);
}

static bool replay_failed(const struct replay_res *r)
{
	const struct replay_counts *s = &r->sum;

	return s->wrong_values || s->failed_puts || s->get_errors || s->exists_errors ||
	       r->client_failures || r->interrupted;
}

/* ---- --sim-only and --sweep ---------------------------------------------- */

static int replay_sim_only(const struct replay *rp)
{
	struct replay_res r;

	memset(&r, 0, sizeof(r));
	r.capacity_blocks = rp->cfg->capacity;
	if (replay_sims(rp, &r) < 0)
		return CLI_EXIT_ERR;
	if (rp->cfg->json) {
		printf("{\"requests\": %zu, \"tokens_per_block\": %" PRIu64 ", \"input_tokens\": %" PRIu64
		       ", \"capacity_blocks\": %" PRIu64 ", \"sim\": {\"unlimited\": %.6f, \"lru\": %.6f, "
		       "\"optimum\": %.6f, \"policy\": %.6f}}\n", rp->nreq, rp->cfg->tokens_per_block,
		       r.unl.total_tokens, r.capacity_blocks, r.unl.hit_rate, r.lru.hit_rate,
		       r.opt.hit_rate, r.pol.hit_rate);
	} else {
		printf("simulation of %s: %zu requests, %.1fM input tokens, %" PRIu64 " blocks of %"
		       PRIu64 " tokens\n", replay_base(rp->cfg->trace_path), rp->nreq,
		       (double)r.unl.total_tokens / 1e6, r.capacity_blocks, rp->cfg->tokens_per_block);
		printf("  unlimited  %.4f\n  exact LRU  %.4f\n  optimum    %.4f\n  kvpool     %.4f "
		       "(its policy's model)\n", r.unl.hit_rate, r.lru.hit_rate, r.opt.hit_rate,
		       r.pol.hit_rate);
	}
	return CLI_EXIT_OK;
}

/* The simulations on a grid of capacities up to a bit past the largest
 * one asked for, plus those asked for. */
static int replay_grid(const struct replay *rp, double *gx, double *glru, double *gopt,
		       double *gpol, size_t *ng)
{
	uint64_t top = 0;
	size_t n = 0;

	for (size_t i = 0; i < rp->cfg->nsweep; i++)
		if (rp->cfg->sweep[i] > top)
			top = rp->cfg->sweep[i];
	top += top / 10;
	for (size_t i = 0; i <= REPLAY_GRID; i++) {
		uint64_t c = top * i / REPLAY_GRID;
		struct trace_sim l, o, m;

		if (n > 0 && (uint64_t)gx[n - 1] == c)
			continue;
		if (trace_sim_lru(rp->t, rp->nreq, c, &l) < 0 || trace_sim_opt(rp->t, rp->nreq, c, &o) < 0 ||
		    polsim_run(rp->t, rp->nreq, c, &rp->model, &m) < 0)
			return -1;
		gx[n] = (double)c;
		glru[n] = l.hit_rate;
		gopt[n] = o.hit_rate;
		gpol[n] = m.hit_rate;
		n++;
	}
	*ng = n;
	return 0;
}

static int cmp_u64v(const void *a, const void *b)
{
	return cmp_u64(a, b);
}

static int replay_plot(const struct replay *rp, const struct replay_res *res, size_t nres,
		       const double *gx, const double *glru, const double *gopt, const double *gpol,
		       size_t ng, double unl)
{
	double kx[REPLAY_MAX_SWEEP], ky[REPLAY_MAX_SWEEP], ux[2] = { 0, gx[ng - 1] }, uy[2] = { unl, unl };
	struct svgplot_series se[5];
	size_t nk = 0, ns = 0;
	char title[256], xlabel[128];
	struct svgplot p = { 0 };
	int rc;

	for (size_t i = 0; i < nres; i++)
		if (res[i].ran) {
			kx[nk] = (double)res[i].capacity_blocks;
			ky[nk++] = kv_rate(&res[i]);
		}
	se[ns++] = (struct svgplot_series){ "unlimited capacity", "#7f7f7f", ux, uy, 2,
					    SVGPLOT_LINE | SVGPLOT_DASHED };
	se[ns++] = (struct svgplot_series){ "offline optimum (Belady)", "#2ca02c", gx, gopt, ng,
					    SVGPLOT_LINE };
	se[ns++] = (struct svgplot_series){ "exact LRU", "#ff7f0e", gx, glru, ng, SVGPLOT_LINE };
	se[ns++] = (struct svgplot_series){ "kvpool's policy, simulated", "#1f77b4", gx, gpol, ng,
					    SVGPLOT_LINE | SVGPLOT_DASHED };
	if (nk)
		se[ns++] = (struct svgplot_series){ "kvpool (live)", "#1f77b4", kx, ky, nk,
						    SVGPLOT_LINE | SVGPLOT_MARKERS };
	snprintf(title, sizeof(title), "Token hit rate vs capacity: %s, %zu requests",
		 replay_base(rp->cfg->trace_path), rp->nreq);
	snprintf(xlabel, sizeof(xlabel), "capacity (blocks of %" PRIu64 " tokens)",
		 rp->cfg->tokens_per_block);
	p.title = title;
	p.xlabel = xlabel;
	p.ylabel = "token hit rate";
	p.series = se;
	p.nseries = ns;
	rc = svgplot_write_file(&p, rp->cfg->plot);
	if (rc < 0) {
		cli_errorx("replay", "%s: %s", rp->cfg->plot, strerror(-rc));
		return -1;
	}
	return 0;
}

static void replay_sweep_print(const struct replay *rp, const struct replay_res *res, size_t nres,
			       const double *gx, const double *glru, const double *gopt,
			       const double *gpol, size_t ng)
{
	const struct replay_cfg *cfg = rp->cfg;
	struct trace_sim unl;

	trace_sim_unlimited(rp->t, rp->nreq, &unl);
	if (cfg->json) {
		printf("{\"trace\": ");
		cli_json_str(stdout, cfg->trace_path, strlen(cfg->trace_path));
		printf(", \"requests\": %zu, \"block_bytes\": %" PRIu64 ", \"tokens_per_block\": %" PRIu64
		       ", \"unlimited\": %.6f, \"master\": [", rp->nreq, rp->block_bytes,
		       cfg->tokens_per_block, unl.hit_rate);
		for (size_t i = 0; i < cfg->nmaster_set; i++) {
			fputs(i ? ", " : "", stdout);
			cli_json_str(stdout, cfg->master_set[i], strlen(cfg->master_set[i]));
		}
		printf("], \"runs\": [");
		for (size_t i = 0; i < nres; i++) {
			fputs(i ? ", {" : "{", stdout);
			if (res[i].ran)
				replay_json(rp, &res[i]);
			else
				printf("\"requested_capacity\": %" PRIu64 ", \"ran\": false, \"sim\": "
				       "{\"unlimited\": %.6f, \"lru\": %.6f, \"optimum\": %.6f, "
				       "\"policy\": %.6f}", res[i].requested, res[i].unl.hit_rate,
				       res[i].lru.hit_rate, res[i].opt.hit_rate, res[i].pol.hit_rate);
			fputs("}", stdout);
		}
		printf("], \"grid\": [");
		for (size_t i = 0; i < ng; i++)
			printf("%s{\"capacity\": %.0f, \"lru\": %.6f, \"optimum\": %.6f, \"policy\": %.6f}",
			       i ? ", " : "", gx[i], glru[i], gopt[i], gpol[i]);
		printf("]");
		if (cfg->plot) {
			printf(", \"plot\": ");
			cli_json_str(stdout, cfg->plot, strlen(cfg->plot));
		}
		printf("}\n");
		return;
	}
	printf("sweep of %s: %zu requests, blocks of %" PRIu64 " tokens and %" PRIu64 " bytes; "
	       "unlimited capacity %.4f\n", replay_base(cfg->trace_path), rp->nreq,
	       cfg->tokens_per_block, rp->block_bytes, unl.hit_rate);
	for (size_t i = 0; i < cfg->nmaster_set; i++)
		printf("%s%s%s", i ? ", " : "the pools' master: ", cfg->master_set[i],
		       i + 1 == cfg->nmaster_set ? "\n" : "");
	printf("%9s %8s %8s %8s %8s %8s %7s %8s %7s %6s %8s\n", "CAPACITY", "KVPOOL", "MODEL", "LRU",
	       "OPTIMUM", "UNLIM", "KV/LRU", "FRACTION", "FAILED", "WRONG", "REQ/S");
	for (size_t i = 0; i < nres; i++) {
		const struct replay_res *r = &res[i];
		double q = r->ran ? ratio(kv_rate(r), r->lru.hit_rate) : NAN, f = r->ran ? frac_way(r) : NAN;
		char kv[16] = "-", qs[16] = "-", fs[16] = "-", fp[24] = "-", wv[24] = "-", rs[24] = "-";

		if (r->ran) {
			snprintf(kv, sizeof(kv), "%.4f", kv_rate(r));
			snprintf(fp, sizeof(fp), "%" PRIu64, r->sum.failed_puts);
			snprintf(wv, sizeof(wv), "%" PRIu64, r->sum.wrong_values);
			snprintf(rs, sizeof(rs), "%.1f", r->seconds > 0 ?
				 (double)r->sum.requests / r->seconds : 0);
		}
		if (isfinite(q))
			snprintf(qs, sizeof(qs), "%.2f", q);
		if (isfinite(f))
			snprintf(fs, sizeof(fs), "%.2f", f);
		printf("%9" PRIu64 " %8s %8.4f %8.4f %8.4f %8.4f %7s %8s %7s %6s %8s\n",
		       r->ran ? r->capacity_blocks : r->requested, kv, r->pol.hit_rate, r->lru.hit_rate,
		       r->opt.hit_rate, r->unl.hit_rate, qs, fs, fp, wv, rs);
	}
	if (cfg->plot)
		printf("plot: %s (the simulations at %zu capacities)\n", cfg->plot, ng);
}

static int replay_sweep(struct replay *rp)
{
	struct replay_cfg *cfg = (struct replay_cfg *)rp->cfg;
	struct replay_res res[REPLAY_MAX_SWEEP];
	double gx[REPLAY_GRID + 1], glru[REPLAY_GRID + 1], gopt[REPLAY_GRID + 1], gpol[REPLAY_GRID + 1];
	size_t ng = 0, nres = 0;
	uint64_t alloc = replay_alloc_estimate(rp);
	bool failed = false;
	char label[32];
	const struct kvp_conf *caller = rp->conf;

	qsort(cfg->sweep, cfg->nsweep, sizeof(cfg->sweep[0]), cmp_u64v);
	for (size_t i = 0; i < cfg->nsweep && !replay_stop; i++) {
		struct replay_res *r = &res[nres++];
		struct localpool lp = { .stop = &replay_stop, .master_extra = cfg->master_extra };
		struct kvp_conf pconf;
		uint64_t seg = localpool_segment_size(cfg->sweep[i], alloc);
		bool no_pool = false;
		char err[512];

		memset(r, 0, sizeof(*r));
		r->requested = cfg->sweep[i];
		r->segment_size = seg;
		if (cfg->sim_only) {
			r->capacity_blocks = cfg->sweep[i];
			if (replay_sims(rp, r) < 0)
				return CLI_EXIT_ERR;
			continue;
		}
		if (localpool_start(&lp, "replay", seg, err, sizeof(err)) < 0) {
			cli_errorx("replay", "a pool of %" PRIu64 " blocks: %s", cfg->sweep[i], err);
			no_pool = true;
		} else if (localpool_conf(&lp, &pconf, err, sizeof(err)) < 0) {
			cli_errorx("replay", "%s", err);
			localpool_stop(&lp);
			no_pool = true;
		}
		if (no_pool) {
			/* the table still shows what the simulations say */
			r->capacity_blocks = cfg->sweep[i];
			replay_sims(rp, r);
			failed = true;
			break;
		}
		snprintf(label, sizeof(label), "cap %" PRIu64, cfg->sweep[i]);
		rp->label = label;
		/* the clients run the command's [client] section (-c, -o,
		 * KVPOOL_CLIENT_*) against the private pool */
		pconf.client = caller->client;
		rp->conf = &pconf;
		/* A run with errors still measured something: the sweep goes on. */
		if (replay_run(rp, r, false) < 0 || replay_failed(r))
			failed = true;
		rp->conf = caller;
		r->requested = cfg->sweep[i];
		r->segment_size = seg;
		localpool_stop(&lp);
	}
	if (nres && replay_grid(rp, gx, glru, gopt, gpol, &ng) < 0) {
		cli_error("replay", NULL, KVP_ENOMEM, "simulations: out of memory");
		return CLI_EXIT_ERR;
	}
	if (nres)
		replay_sweep_print(rp, res, nres, gx, glru, gopt, gpol, ng);
	if (nres && cfg->plot) {
		struct trace_sim unl;

		if (trace_sim_unlimited(rp->t, rp->nreq, &unl) < 0 ||
		    replay_plot(rp, res, nres, gx, glru, gopt, gpol, ng, unl.hit_rate) < 0)
			failed = true;
	}
	return failed || replay_stop ? CLI_EXIT_ERR : CLI_EXIT_OK;
}

/* ---- options ------------------------------------------------------------ */

static int replay_parse_caps(struct replay_cfg *c, const char *s)
{
	char buf[1024], *save = NULL, *tok;

	if (strlen(s) >= sizeof(buf))
		return -1;
	snprintf(buf, sizeof(buf), "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (c->nsweep == REPLAY_MAX_SWEEP || cli_parse_u64(tok, &v) < 0 || v < 1 ||
		    v > (1ull << 40))
			return -1;
		c->sweep[c->nsweep++] = v;
	}
	return c->nsweep ? 0 : -1;
}

/* --master KEY=VALUE: a [master] key of the private pools of --sweep,
 * checked here as the master would check it, so a typo is a usage error
 * and not a pool that fails to start. The keys that wire the private pool
 * together are its own. */
static int replay_parse_master(struct replay_cfg *c, const char *arg)
{
	static const char *const own[] = { "listen", "http_listen", "metadata_server", "ha" };
	const char *eq = strchr(arg, '=');
	char key[64], err[256];
	struct kvp_conf *tmp;
	size_t kl = eq ? (size_t)(eq - arg) : 0;
	int rc;

	if (!eq || !kl || kl >= sizeof(key))
		return cli_usage_error("replay", "--master %s: KEY=VALUE, a key of [master] "
				       "(e.g. eviction_policy=lru)", arg);
	memcpy(key, arg, kl);
	key[kl] = '\0';
	if (strpbrk(eq + 1, "\r\n"))
		return cli_usage_error("replay", "--master %s: one line", key);
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
		if (!strcmp(key, own[i]))
			return cli_usage_error("replay", "--master %s: set by the private pool itself",
					       key);
	for (size_t i = 0; i < c->nmaster_set; i++)
		if (!strncmp(c->master_set[i], arg, kl + 1))
			return cli_usage_error("replay", "--master %s: given twice", key);
	if (!conf_find("master", key))
		return cli_usage_error("replay", "--master %s: [master] has no such key (see "
				       "kvpool-master --help-config)", key);
	if (c->nmaster_set == REPLAY_MAX_MASTER_SET)
		return cli_usage_error("replay", "--master: at most %d keys", REPLAY_MAX_MASTER_SET);
	tmp = malloc(sizeof(*tmp));
	if (!tmp)
		return cli_usage_error("replay", "out of memory");
	conf_defaults(tmp);
	rc = conf_set(tmp, "master", key, eq + 1, CONF_SRC_CMDLINE, err, sizeof(err));
	free(tmp);
	if (rc)
		return cli_usage_error("replay", "--master %s", err);
	size_t used = strlen(c->master_extra);
	int n = snprintf(c->master_extra + used, sizeof(c->master_extra) - used, "%s = %s\n", key,
			 eq + 1);
	if (n < 0 || (size_t)n >= sizeof(c->master_extra) - used) {
		c->master_extra[used] = '\0';
		return cli_usage_error("replay", "--master %s: value too long", key);
	}
	c->master_set[c->nmaster_set++] = arg;
	return 0;
}

static int replay_parse(struct replay_cfg *c, const struct kvp_conf *conf, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "block-bytes", required_argument, NULL, 'b' },
		{ "bytes-per-token", required_argument, NULL, 'B' },
		{ "tokens-per-block", required_argument, NULL, 'T' },
		{ "limit", required_argument, NULL, 'n' },
		{ "clients", required_argument, NULL, 'C' },
		{ "timestamps", no_argument, NULL, 't' },
		{ "speed", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "key-prefix", required_argument, NULL, 'P' },
		{ "seed", required_argument, NULL, 'S' },
		{ "keep", no_argument, NULL, 'K' },
		{ "wait", required_argument, NULL, 'W' },
		{ "capacity", required_argument, NULL, 'c' },
		{ "sim-only", no_argument, NULL, 'O' },
		{ "sweep", required_argument, NULL, 'w' },
		{ "plot", required_argument, NULL, 'p' },
		{ "master", required_argument, NULL, 'M' },
		{ NULL, 0, NULL, 0 },
	};
	bool block_given = false;
	char host[64] = "host", *end;
	int ch;

	memset(c, 0, sizeof(*c));
	c->block_bytes = 64u << 10;
	c->tokens_per_block = 512;
	c->clients = 1;
	c->seed = 1;
	c->speed = 1.0;
	c->wait_ms = conf->client.timeout;
	gethostname(host, sizeof(host) - 1);
	snprintf(c->prefix, sizeof(c->prefix), "replay-%s-%d-", host, (int)getpid());
	while ((ch = getopt_long(argc, argv, "b:n:", lo, NULL)) != -1) {
		switch (ch) {
		case 'b':
			if (conf_parse_size(optarg, &c->block_bytes) < 0)
				return cli_usage_error("replay", "--block-bytes: a size such as 64K or 2M");
			block_given = true;
			break;
		case 'B':
			if (conf_parse_size(optarg, &c->bytes_per_token) < 0 || !c->bytes_per_token)
				return cli_usage_error("replay", "--bytes-per-token: a size such as 320K");
			break;
		case 'T':
			if (cli_parse_u64(optarg, &c->tokens_per_block) < 0 || c->tokens_per_block < 1 ||
			    c->tokens_per_block > (1u << 20))
				return cli_usage_error("replay", "--tokens-per-block: 1..1048576");
			break;
		case 'n':
			if (cli_parse_u64(optarg, &c->limit) < 0 || c->limit < 1)
				return cli_usage_error("replay", "--limit: a number >= 1");
			break;
		case 'C':
			if (cli_parse_u64(optarg, &c->clients) < 0 || c->clients < 1 ||
			    c->clients > REPLAY_MAX_CLIENTS)
				return cli_usage_error("replay", "--clients: 1..%d", REPLAY_MAX_CLIENTS);
			break;
		case 't':
			c->timestamps = true;
			break;
		case 's':
			c->speed = strtod(optarg, &end);
			if (end == optarg || *end || !(c->speed > 0) || !isfinite(c->speed))
				return cli_usage_error("replay", "--speed: a factor > 0, e.g. 10");
			c->timestamps = true;
			break;
		case 'j':
			c->json = true;
			break;
		case 'P':
			if (!optarg[0] || strlen(optarg) > 900)
				return cli_usage_error("replay", "--key-prefix: 1..900 bytes");
			snprintf(c->prefix, sizeof(c->prefix), "%s", optarg);
			break;
		case 'S':
			if (cli_parse_u64(optarg, &c->seed) < 0)
				return cli_usage_error("replay", "--seed: a number");
			break;
		case 'K':
			c->keep = true;
			break;
		case 'W':
			if (conf_parse_duration(optarg, &c->wait_ms) < 0)
				return cli_usage_error("replay", "--wait: a duration, e.g. 10s or 0");
			break;
		case 'c':
			if (cli_parse_u64(optarg, &c->capacity) < 0 || c->capacity < 1)
				return cli_usage_error("replay", "--capacity: a number of blocks >= 1");
			break;
		case 'O':
			c->sim_only = true;
			break;
		case 'w':
			if (replay_parse_caps(c, optarg) < 0)
				return cli_usage_error("replay", "--sweep: up to %d capacities in blocks, "
						       "e.g. 1000,2000,6000", REPLAY_MAX_SWEEP);
			break;
		case 'p':
			c->plot = optarg;
			break;
		case 'M': {
			int rc = replay_parse_master(c, optarg);

			if (rc)
				return rc;
			break;
		}
		default:
			return cli_usage_error("replay", "unknown option or missing argument: %s",
					       argv[optind - 1]);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error("replay", argc - optind ? "expected one TRACE" :
				       "expected TRACE (a .jsonl or .jsonl.gz file)");
	c->trace_path = argv[optind];
	if (c->bytes_per_token && block_given)
		return cli_usage_error("replay", "--block-bytes or --bytes-per-token, not both");
	if (c->bytes_per_token) {
		if (c->bytes_per_token > UINT64_MAX / c->tokens_per_block)
			return cli_usage_error("replay", "--bytes-per-token: too large");
		c->block_bytes = c->bytes_per_token * c->tokens_per_block;
	}
	if (c->block_bytes < REPLAY_MIN_BLOCK || c->block_bytes > conf->cluster.max_object_size)
		return cli_usage_error("replay", "a block of %" PRIu64 " bytes: must be %d .. "
				       "cluster.max_object_size (%" PRIu64 ")", c->block_bytes,
				       REPLAY_MIN_BLOCK, conf->cluster.max_object_size);
	if (c->plot && !c->nsweep)
		return cli_usage_error("replay", "--plot needs --sweep");
	if (c->nmaster_set && !c->nsweep && !c->sim_only)
		return cli_usage_error("replay", "--master sets the private pools of --sweep and "
				       "the policy's model: it needs --sweep or --sim-only");
	if (c->sim_only && !c->capacity && !c->nsweep)
		return cli_usage_error("replay", "--sim-only needs --capacity N or --sweep CAPS");
	if (c->capacity && c->nsweep)
		return cli_usage_error("replay", "--capacity or --sweep, not both");
	return 0;
}

int replay_main(const struct kvp_conf *conf, int argc, char **argv)
{
	struct replay_cfg cfg;
	struct replay rp;
	struct replay_res res;
	struct sigaction sa, old_int, old_term;
	size_t maxkey = 0;
	char err[512];
	int rc;

	rc = replay_parse(&cfg, conf, argc, argv);
	if (rc)
		return rc;
	memset(&rp, 0, sizeof(rp));
	rp.cfg = &cfg;
	rp.conf = conf;
	rp.block_bytes = cfg.block_bytes;
	rp.label = "replay";
	rp.t = trace_load(cfg.trace_path, (uint32_t)cfg.tokens_per_block, err, sizeof(err));
	if (!rp.t) {
		cli_errorx("replay", "%s", err);
		return CLI_EXIT_ERR;
	}
	rp.nreq = cfg.limit && cfg.limit < rp.t->nreqs ? (size_t)cfg.limit : rp.t->nreqs;
	for (size_t a = 0; a < rp.t->naccess; a++) {
		char tmp[32];
		size_t n = (size_t)snprintf(tmp, sizeof(tmp), "%" PRId64, rp.t->hash[a]);

		if (n > maxkey)
			maxkey = n;
	}
	rp.keycap = strlen(cfg.prefix) + maxkey + 1;
	rp.batch = rp.t->max_blocks ? rp.t->max_blocks : 1;
	if (rp.batch > REPLAY_BUF_MAX / cfg.block_bytes)
		rp.batch = REPLAY_BUF_MAX / cfg.block_bytes ? REPLAY_BUF_MAX / cfg.block_bytes : 1;
	if (replay_pattern(&rp) < 0 || replay_model_conf(&rp, &rp.model) < 0) {
		cli_error("replay", NULL, KVP_ENOMEM, NULL);
		free(rp.pattern);
		trace_free((struct trace *)rp.t);
		return CLI_EXIT_ERR;
	}

	replay_stop = 0;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = replay_on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);

	if (cfg.nsweep) {
		rc = replay_sweep(&rp);
	} else if (cfg.sim_only) {
		rc = replay_sim_only(&rp);
	} else if (replay_run(&rp, &res, true) < 0) {
		rc = CLI_EXIT_ERR;
	} else {
		if (cfg.json) {
			printf("{\"trace\": ");
			cli_json_str(stdout, cfg.trace_path, strlen(cfg.trace_path));
			printf(", \"trace_requests\": %zu, ", rp.t->nreqs);
			replay_json(&rp, &res);
			printf("}\n");
		} else {
			replay_print(&rp, &res);
		}
		rc = replay_failed(&res) ? CLI_EXIT_ERR : CLI_EXIT_OK;
	}

	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	free(rp.pattern);
	trace_free((struct trace *)rp.t);
	return rc;
}

/* ha_probe: the failover figures of docs/ha.md. One libkvpool handle puts
 * fresh keys (PREFIX/<n>, values derived from the key) one after another,
 * every --interval-ms, and remembers each put that returned success. Each
 * SIGUSR1 marks a fault (the script sends it the moment it kills, stops or
 * cuts something); for each mark, until the next one (or 20 s), the probe
 * reports how long it took until a put started after it succeeded ("first
 * put"), the longest time between two successful puts counting from the
 * last one before the mark ("gap": what a fault whose effect comes later
 * costs — a leader cut off from etcd serves until its lease runs out), the
 * longest put and the failed ones. With --read-ms a second thread gets an
 * already completed key that often (one put since the puts last recovered
 * from a fault) and counts the gets that worked while no put had succeeded
 * for 500 ms. SIGTERM (or --seconds) ends the puts;
 * then every completed put is read back and compared byte for byte: lost =
 * a completed put not there, wrong = bytes that differ. Prints one JSON
 * document (stdout or --json FILE). Exit 0 when nothing was lost or wrong,
 * 1 otherwise, 2 usage. Two threads on one handle; faults[] under flock;
 * signals only set flags.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvpool.h"

#define MAX_FAULTS 64
#define MAX_PUTS (1u << 20)
#define NERR (1 + KVP_ERR_BASE - KVP_ERR_MIN)	/* errs[KVP_ERR_BASE - rc], errs[NERR]: other */

#define WINDOW_MS 20000		/* what follows a mark counts for it this long */
#define STUCK_MS 500		/* no put succeeded for this long: puts are down */

struct fault {
	uint64_t at_ms;			/* when the mark arrived */
	uint64_t first_put_ms;		/* from the mark to the first success of a put
					 * started after it */
	uint64_t max_put_ms;		/* longest put started after the mark, until then */
	uint64_t gap_ms;		/* longest time between two successful puts in the
					 * window (from the last one before the mark) */
	uint64_t last_ok_ms;
	uint64_t failed;		/* puts that failed in the window */
	uint64_t reads_ok, reads_failed;/* gets while puts were down, in the window */
	uint64_t first_ok_idx;		/* index in ok_seq of that first success */
	bool done;
};

static volatile sig_atomic_t marks, stop;
static uint64_t mark_ms[MAX_FAULTS];	/* when each mark arrived (set in the handler) */
static struct fault faults[MAX_FAULTS];
static unsigned nfaults;
static uint64_t errs[NERR + 1];
static pthread_mutex_t flock = PTHREAD_MUTEX_INITIALIZER;	/* faults, nfaults */

/* What happens until then belongs to fault f (flock held). */
static uint64_t fault_end(unsigned f)
{
	uint64_t end = faults[f].at_ms + WINDOW_MS;

	return f + 1 < nfaults && faults[f + 1].at_ms < end ? faults[f + 1].at_ms : end;
}

/* completed puts, appended by the writer (done published after the entry) */
static uint64_t *ok_seq;
static _Atomic uint64_t done;
static _Atomic uint64_t reads_ok, reads_failed;
static _Atomic uint64_t last_put_ok_ms;	/* the last successful put's end */
static atomic_int read_stop;
static struct kvp *kvp;
static const char *prefix = "ha-probe";
static size_t size = 4096;
static unsigned read_ms;

static uint64_t now_ms(void);

static void on_usr1(int sig)
{
	(void)sig;
	/* clock_gettime is async-signal-safe: the time of the fault, not of
	 * the moment the loop looks (a put may block through the failover) */
	if (marks < MAX_FAULTS)
		mark_ms[marks] = now_ms();
	marks++;
}

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* splitmix64 stream seeded by the key: the value a key must hold. */
static void fill(const char *key, uint8_t *v, size_t n)
{
	uint64_t s = 0x9e3779b97f4a7c15ull;

	for (const char *p = key; *p; p++)
		s = (s ^ (uint8_t)*p) * 0x100000001b3ull;
	for (size_t i = 0; i < n; i++) {
		if (i % 8 == 0) {
			s += 0x9e3779b97f4a7c15ull;
			uint64_t z = s;
			z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
			z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
			s ^= z ^ (z >> 31);
		}
		v[i] = (uint8_t)(s >> (8 * (i % 8)));
	}
}

static void count_err(int rc)
{
	errs[kvp_is_err(rc) ? KVP_ERR_BASE - rc : NERR]++;
}

/* Every read_ms: a get of a key put before, verified; counted against the
 * faults whose first successful put has not happened yet. */
static void *reader(void *arg)
{
	uint8_t *back = malloc(size), *want = malloc(size);
	char key[256];
	uint64_t r = 0x2545f4914f6cdd1dull;

	(void)arg;
	if (!back || !want)
		return NULL;
	while (!atomic_load(&read_stop)) {
		uint64_t n = atomic_load(&done), lo = 0;

		/* keys put since the puts last came back after a fault: those
		 * before may sit in segments a new leader numbered anew, and a
		 * get of one asks the master (none while etcd is down) */
		pthread_mutex_lock(&flock);
		for (unsigned f = 0; f < nfaults; f++)
			if (faults[f].done && faults[f].first_ok_idx < n)
				lo = faults[f].first_ok_idx;
		pthread_mutex_unlock(&flock);
		if (n > lo) {
			r ^= r << 13;
			r ^= r >> 7;
			r ^= r << 17;
			/* recent keys: not evicted yet */
			uint64_t back_by = r % (n - lo < 1000 ? n - lo : 1000);
			snprintf(key, sizeof(key), "%s/%" PRIu64, prefix, ok_seq[n - 1 - back_by]);
			int64_t got = kvp_get_into(kvp, key, back, size);
			fill(key, want, size);
			bool good = got == (int64_t)size && memcmp(back, want, size) == 0;
			if (got >= 0 && !good) {
				fprintf(stderr, "kvp-ha-probe: %s read back wrong\n", key);
				exit(1);
			}
			atomic_fetch_add(good ? &reads_ok : &reads_failed, 1);
			uint64_t t = now_ms();
			bool down = t > atomic_load(&last_put_ok_ms) + STUCK_MS;
			pthread_mutex_lock(&flock);
			for (unsigned f = 0; down && f < nfaults; f++)
				if (t >= faults[f].at_ms && t < fault_end(f))
					good ? faults[f].reads_ok++ : faults[f].reads_failed++;
			pthread_mutex_unlock(&flock);
		}
		struct timespec ts = { read_ms / 1000, (long)(read_ms % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	}
	free(back);
	free(want);
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: kvp-ha-probe -c CONF [--prefix P] [--seconds S] [--interval-ms N]\n"
		   "                    [--size BYTES] [--read-ms N] [--json FILE]\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "prefix", required_argument, NULL, 1 },
		{ "seconds", required_argument, NULL, 2 },
		{ "interval-ms", required_argument, NULL, 3 },
		{ "size", required_argument, NULL, 4 },
		{ "read-ms", required_argument, NULL, 5 },
		{ "json", required_argument, NULL, 6 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *conf = NULL, *json = NULL;
	unsigned seconds = 3600, interval = 10;
	pthread_t rth;
	bool reading = false;
	int ch;

	while ((ch = getopt_long(argc, argv, "c:h", lo, NULL)) != -1) {
		switch (ch) {
		case 'c': conf = optarg; break;
		case 1: prefix = optarg; break;
		case 2: seconds = (unsigned)atoi(optarg); break;
		case 3: interval = (unsigned)atoi(optarg); break;
		case 4: size = (size_t)strtoull(optarg, NULL, 0); break;
		case 5: read_ms = (unsigned)atoi(optarg); break;
		case 6: json = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!conf || !size || size > (64u << 20) || optind != argc) {
		usage(stderr);
		return 2;
	}
	struct sigaction sa = { .sa_handler = on_usr1 };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	struct kvp_open_opts o = { .config_file = conf };
	int err = 0;
	/* the pool may be in an election right now: keep trying a while */
	for (uint64_t end = now_ms() + 30000; !kvp && now_ms() < end && !stop;) {
		kvp = kvp_open(&o, &err);
		if (!kvp) {
			struct timespec ts = { 0, 100 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
	}
	if (!kvp) {
		fprintf(stderr, "kvp-ha-probe: cannot open the pool: %s\n", kvp_strerror(err));
		return 1;
	}
	uint8_t *val = malloc(size), *back = malloc(size);
	uint64_t seq = 0, failed = 0;
	char key[256];
	ok_seq = malloc(MAX_PUTS * sizeof(*ok_seq));
	if (!val || !back || !ok_seq)
		return 1;
	if (read_ms)
		reading = pthread_create(&rth, NULL, reader, NULL) == 0;

	uint64_t t_end = now_ms() + (uint64_t)seconds * 1000;
	atomic_store(&last_put_ok_ms, now_ms());
	unsigned seen = 0;
	while (!stop && now_ms() < t_end && atomic_load(&done) < MAX_PUTS) {
		pthread_mutex_lock(&flock);
		while (seen < (unsigned)marks && nfaults < MAX_FAULTS) {
			faults[nfaults++] = (struct fault){ .at_ms = mark_ms[seen],
							    .last_ok_ms = atomic_load(&last_put_ok_ms) };
			seen++;
		}
		pthread_mutex_unlock(&flock);
		uint64_t t0 = now_ms();
		snprintf(key, sizeof(key), "%s/%" PRIu64, prefix, seq);
		fill(key, val, size);
		int rc = kvp_put(kvp, key, val, size);
		uint64_t t1 = now_ms();
		pthread_mutex_lock(&flock);
		while (seen < (unsigned)marks && nfaults < MAX_FAULTS) {
			faults[nfaults++] = (struct fault){ .at_ms = mark_ms[seen],
							    .last_ok_ms = atomic_load(&last_put_ok_ms) };
			seen++;
		}
		for (unsigned f = 0; f < nfaults; f++) {
			struct fault *x = &faults[f];
			if (t1 >= x->at_ms && t1 < fault_end(f)) {
				if (rc == 0) {
					if (t1 - x->last_ok_ms > x->gap_ms)
						x->gap_ms = t1 - x->last_ok_ms;
					x->last_ok_ms = t1;
				} else if (!x->done) {
					x->failed++;
				}
			}
			/* only puts started after the fault: one in flight then
			 * may have been answered by the old master */
			if (x->done || t0 < x->at_ms)
				continue;
			if (t1 - t0 > x->max_put_ms)
				x->max_put_ms = t1 - t0;
			if (rc == 0) {
				x->first_put_ms = t1 - x->at_ms;
				x->first_ok_idx = atomic_load(&done);	/* this put's, below */
				x->done = true;
			}
		}
		pthread_mutex_unlock(&flock);
		if (rc == 0)
			atomic_store(&last_put_ok_ms, t1);
		if (rc == 0) {
			uint64_t d = atomic_load(&done);
			ok_seq[d] = seq;
			atomic_store(&done, d + 1);
		} else {
			failed++;
			count_err(rc);
		}
		seq++;
		uint64_t spent = now_ms() - t0;
		if (spent < interval) {
			struct timespec ts = { 0, (long)(interval - spent) * 1000000L };
			nanosleep(&ts, NULL);
		}
	}

	atomic_store(&read_stop, 1);
	if (reading)
		pthread_join(rth, NULL);
	/* every completed put must be there, byte for byte */
	uint64_t lost = 0, wrong = 0, verified = 0;
	for (uint64_t i = 0; i < done; i++) {
		snprintf(key, sizeof(key), "%s/%" PRIu64, prefix, ok_seq[i]);
		int64_t n = KVP_ETIMEDOUT;
		for (int tries = 0; tries < 5 && (n == KVP_ETIMEDOUT || n == KVP_ENOTLEADER ||
						  n == KVP_ECONN); tries++)
			n = kvp_get_into(kvp, key, back, size);
		fill(key, val, size);
		if (n < 0) {
			lost++;
			if (lost <= 5)
				fprintf(stderr, "kvp-ha-probe: %s lost: %s\n", key, kvp_strerror((int)n));
		} else if (n != (int64_t)size || memcmp(back, val, size) != 0) {
			wrong++;
		} else {
			verified++;
		}
	}

	FILE *out = json ? fopen(json, "w") : stdout;
	if (!out)
		out = stdout;
	fprintf(out, "{\"puts\": %" PRIu64 ", \"completed\": %" PRIu64 ", \"failed\": %" PRIu64
		", \"verified\": %" PRIu64 ", \"lost\": %" PRIu64 ", \"wrong\": %" PRIu64
		", \"reads_ok\": %" PRIu64 ", \"reads_failed\": %" PRIu64 ", \"errors\": {",
		seq, (uint64_t)done, failed, verified, lost, wrong, (uint64_t)reads_ok,
		(uint64_t)reads_failed);
	bool first = true;
	for (int e = 1; e <= NERR; e++)
		if (errs[e]) {
			fprintf(out, "%s\"%s\": %" PRIu64, first ? "" : ", ",
				e == NERR ? "other" : kvp_errname(KVP_ERR_BASE - e), errs[e]);
			first = false;
		}
	fprintf(out, "}, \"faults\": [");
	for (unsigned f = 0; f < nfaults; f++)
		fprintf(out, "%s{\"first_put_ms\": %s%" PRIu64 ", \"gap_ms\": %" PRIu64
			", \"max_put_ms\": %" PRIu64 ", \"failed\": %" PRIu64 ", \"reads_ok\": %"
			PRIu64 ", \"reads_failed\": %" PRIu64 "}", f ? ", " : "",
			faults[f].done ? "" : "-", faults[f].done ? faults[f].first_put_ms : 1,
			faults[f].gap_ms, faults[f].max_put_ms, faults[f].failed, faults[f].reads_ok,
			faults[f].reads_failed);
	fprintf(out, "]}\n");
	if (out != stdout)
		fclose(out);
	kvp_close(kvp);
	free(val);
	free(back);
	return lost || wrong ? 1 : 0;
}

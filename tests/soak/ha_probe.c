/* ha_probe: the failover figures of docs/ha.md. One libkvpool handle puts
 * fresh keys (PREFIX/<n>, values derived from the key) one after another,
 * every --interval-ms, and remembers each put that returned success. Each
 * SIGUSR1 marks a fault (the script sends it the moment it kills, stops or
 * cuts something); for each mark the probe reports how long it took until
 * a put started at or after it succeeded ("first put"), the longest
 * put, and the failures meanwhile by kind. With --read-ms it also gets an
 * already completed key every so often and counts reads that worked while
 * puts did not. SIGTERM (or --seconds) ends the puts; then every completed
 * put is read back and compared byte for byte: lost = a completed put not
 * there, wrong = bytes that differ. Prints one JSON document (stdout or
 * --json FILE). Exit 0 when nothing was lost or wrong, 1 otherwise, 2 usage.
 * Single-threaded; signals only set flags.
 */
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
#include <time.h>

#include "kvpool.h"

#define MAX_FAULTS 64
#define NERR (1 - KVP_ERR_MIN)

struct fault {
	uint64_t at_ms;			/* when the mark arrived */
	uint64_t first_put_ms;		/* from the mark to the first success after it */
	uint64_t max_put_ms;		/* longest put started after the mark, until then */
	uint64_t failed;		/* puts that failed in between */
	uint64_t reads_ok, reads_failed;/* cached-location reads meanwhile */
	bool done;
};

static volatile sig_atomic_t marks, stop;
static uint64_t mark_ms[MAX_FAULTS];	/* when each mark arrived (set in the handler) */
static struct fault faults[MAX_FAULTS];
static unsigned nfaults;
static uint64_t errs[NERR + 1];

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
	errs[rc < 0 && rc >= KVP_ERR_MIN ? -rc : NERR]++;
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
	const char *conf = NULL, *prefix = "ha-probe", *json = NULL;
	unsigned seconds = 3600, interval = 10, read_ms = 0;
	size_t size = 4096;
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
	struct kvp *kvp = NULL;
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
	uint64_t cap = 1 << 16, done = 0, seq = 0, failed = 0;
	uint64_t *ok_seq = malloc(cap * sizeof(*ok_seq));
	uint64_t reads_ok = 0, reads_failed = 0, next_read = 0;
	char key[256];
	if (!val || !back || !ok_seq)
		return 1;

	uint64_t t_end = now_ms() + (uint64_t)seconds * 1000;
	unsigned seen = 0;
	while (!stop && now_ms() < t_end) {
		while (seen < (unsigned)marks && nfaults < MAX_FAULTS) {
			faults[nfaults++] = (struct fault){ .at_ms = mark_ms[seen] };
			seen++;
		}
		uint64_t t0 = now_ms();
		snprintf(key, sizeof(key), "%s/%" PRIu64, prefix, seq);
		fill(key, val, size);
		int rc = kvp_put(kvp, key, val, size);
		uint64_t t1 = now_ms();
		while (seen < (unsigned)marks && nfaults < MAX_FAULTS) {
			faults[nfaults++] = (struct fault){ .at_ms = mark_ms[seen] };
			seen++;
		}
		for (unsigned f = 0; f < nfaults; f++) {
			struct fault *x = &faults[f];
			/* only puts started after the fault: one in flight then
			 * may have been answered by the old master */
			if (x->done || t0 < x->at_ms)
				continue;
			if (t1 - t0 > x->max_put_ms)
				x->max_put_ms = t1 - t0;
			if (rc == 0) {
				x->first_put_ms = t1 - x->at_ms;
				x->done = true;
			} else {
				x->failed++;
			}
		}
		if (rc == 0) {
			if (done == cap) {
				uint64_t *n = realloc(ok_seq, 2 * cap * sizeof(*n));
				if (!n)
					return 1;
				ok_seq = n;
				cap *= 2;
			}
			ok_seq[done++] = seq;
		} else {
			failed++;
			count_err(rc);
		}
		seq++;
		/* reads of keys put before (their locations are known) */
		if (read_ms && done && now_ms() >= next_read) {
			snprintf(key, sizeof(key), "%s/%" PRIu64, prefix, ok_seq[done / 2]);
			int64_t n = kvp_get_into(kvp, key, back, size);
			fill(key, val, size);
			bool good = n == (int64_t)size && memcmp(back, val, size) == 0;
			if (n >= 0 && !good) {
				fprintf(stderr, "kvp-ha-probe: %s read back wrong\n", key);
				return 1;
			}
			good ? reads_ok++ : reads_failed++;
			for (unsigned f = 0; f < nfaults; f++)
				if (!faults[f].done)
					good ? faults[f].reads_ok++ : faults[f].reads_failed++;
			next_read = now_ms() + read_ms;
		}
		uint64_t spent = now_ms() - t0;
		if (spent < interval) {
			struct timespec ts = { 0, (long)(interval - spent) * 1000000L };
			nanosleep(&ts, NULL);
		}
	}

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
		seq, done, failed, verified, lost, wrong, reads_ok, reads_failed);
	bool first = true;
	for (int e = 1; e <= NERR; e++)
		if (errs[e]) {
			fprintf(out, "%s\"%s\": %" PRIu64, first ? "" : ", ",
				e == NERR ? "other" : kvp_errname(-e), errs[e]);
			first = false;
		}
	fprintf(out, "}, \"faults\": [");
	for (unsigned f = 0; f < nfaults; f++)
		fprintf(out, "%s{\"first_put_ms\": %s%" PRIu64 ", \"max_put_ms\": %" PRIu64
			", \"failed\": %" PRIu64 ", \"reads_ok\": %" PRIu64 ", \"reads_failed\": %"
			PRIu64 "}", f ? ", " : "", faults[f].done ? "" : "-",
			faults[f].done ? faults[f].first_put_ms : 1, faults[f].max_put_ms,
			faults[f].failed, faults[f].reads_ok, faults[f].reads_failed);
	fprintf(out, "]}\n");
	if (out != stdout)
		fclose(out);
	kvp_close(kvp);
	free(val);
	free(back);
	free(ok_seq);
	return lost || wrong ? 1 : 0;
}

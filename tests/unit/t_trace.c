/* t_trace: the trace loader and the offline simulations (src/cli/trace.c),
 * and the model of kvpool's own policy (src/cli/polsim.c). Hand-made
 * traces whose hit rates are worked out in the comments (for the model:
 * reads outrank recency, a chain's tail leaves first, a ghost brings its
 * count back, a round evicts past the watermark); random chained traces
 * against naive O(n * capacity) versions of LRU and the optimum, and the
 * model never above unlimited capacity and equal to it when nothing has to
 * leave; every kind of bad line refused with FILE:LINE; plain, gzip and
 * truncated gzip files; and the figures of the committed production trace
 * (tests/data/conversation_trace.jsonl.gz): unlimited 0.3736, LRU 0.1413 /
 * 0.0547, the optimum 0.3621 / 0.2600 and the model 0.1845 / 0.1137 at
 * 6,000 / 2,000 blocks, within 0.0005. Pure: no daemons.
 */
#include "testlib.h"

#include <math.h>
#include <zlib.h>

#include "polsim.h"
#include "trace.h"

static struct trace *load(const char *text, uint32_t tpb)
{
	char err[256];
	struct trace *t = trace_load_mem(text, strlen(text), "mem", tpb, err, sizeof(err));

	REQUIRE(t, "load failed: %s", err);
	return t;
}

static uint64_t hits(int (*sim)(const struct trace *, size_t, uint64_t, struct trace_sim *),
		     const struct trace *t, uint64_t cap)
{
	struct trace_sim s;

	REQUIRE(sim(t, 0, cap, &s) == 0);
	CHECK_EQ(s.total_tokens, t->total_tokens);
	return s.hit_tokens;
}

/* Blocks of 10 tokens; requests (ids, tokens per block):
 *   r1 [1 2 3] 10+10+5   r2 [1 2 4] 10+10+10   r3 [5] 7   r4 [1 2 3] 10+10+5
 * total 87 tokens. Unlimited: r2 hits 1,2 (20), r4 hits 1,2,3 (25) -> 45.
 * LRU 3: r2 hits 20 and evicts 3; r3 evicts 1; r4 misses -> 20.
 * Optimum 3: 4 and 5 are never used again and leave at once -> 45.
 * LRU 2: 3 evicts 1 in r1, so every lead misses -> 0.
 * Optimum 2: 3 (next use farthest) leaves at once; r2 hits 20, r4 1,2 -> 40. */
static void test_known(void)
{
	static const char text[] =
		"{\"timestamp\": 0, \"input_length\": 25, \"output_length\": 3, \"hash_ids\": [1, 2, 3]}\n"
		"{\"timestamp\": 5, \"input_length\": 30, \"output_length\": 3, \"hash_ids\": [1, 2, 4]}\n"
		"{\"timestamp\": 9, \"input_length\": 7, \"output_length\": 1, \"hash_ids\": [5]}\n"
		"{\"timestamp\": 12, \"input_length\": 25, \"output_length\": 2, \"hash_ids\": [1, 2, 3]}\n";
	struct trace *t = load(text, 10);
	struct trace_sim s;

	CHECK_EQ(t->nreqs, 4);
	CHECK_EQ(t->naccess, 10);
	CHECK_EQ(t->ndistinct, 5);
	CHECK_EQ(t->max_blocks, 3);
	CHECK_EQ(t->total_tokens, 87);
	CHECK_EQ(trace_block_tokens(t, &t->reqs[0], 2), 5);
	CHECK_EQ(trace_block_tokens(t, &t->reqs[0], 1), 10);
	CHECK_EQ(t->reqs[3].line, 4);
	CHECK(t->reqs[1].ts_ms == 5.0);
	CHECK_EQ(t->bid[t->reqs[3].first + 2], t->bid[2]);

	REQUIRE(trace_sim_unlimited(t, 0, &s) == 0);
	CHECK_EQ(s.hit_tokens, 45);
	CHECK(fabs(s.hit_rate - 45.0 / 87.0) < 1e-12);
	CHECK_EQ(hits(trace_sim_lru, t, 3), 20);
	CHECK_EQ(hits(trace_sim_opt, t, 3), 45);
	CHECK_EQ(hits(trace_sim_lru, t, 2), 0);
	CHECK_EQ(hits(trace_sim_opt, t, 2), 40);
	CHECK_EQ(hits(trace_sim_lru, t, 0), 0);
	CHECK_EQ(hits(trace_sim_opt, t, 0), 0);
	CHECK_EQ(hits(trace_sim_lru, t, 1000), 45);
	CHECK_EQ(hits(trace_sim_opt, t, 1000), 45);

	/* The first 2 requests only: r2's 20 of 55. */
	REQUIRE(trace_sim_lru(t, 2, 3, &s) == 0);
	CHECK_EQ(s.hit_tokens, 20);
	CHECK_EQ(s.total_tokens, 55);
	REQUIRE(trace_sim_opt(t, 2, 1, &s) == 0);
	CHECK_EQ(s.total_tokens, 55);
	trace_free(t);

	/* Capacity below one request: [1 2] twice, 20 tokens each. LRU 1:
	 * 2 evicts 1, r2 misses. Optimum 1: 2 (next use 3) leaves rather
	 * than 1 (next use 2): r2 hits block 1, 10 tokens. */
	t = load("{\"timestamp\": 0, \"input_length\": 20, \"hash_ids\": [1, 2]}\n"
		 "{\"timestamp\": 1, \"input_length\": 20, \"hash_ids\": [1, 2]}", 10);
	CHECK_EQ(hits(trace_sim_lru, t, 1), 0);
	CHECK_EQ(hits(trace_sim_opt, t, 1), 10);
	CHECK_EQ(hits(trace_sim_lru, t, 2), 20);
	trace_free(t);
}

/* ---- the model of kvpool's policy ---------------------------------------- */

static uint64_t pol_hits(const struct trace *t, uint64_t cap, bool lru, double hw, double ratio)
{
	struct polsim_conf pc = { .lru = lru, .high_watermark = hw, .ratio = ratio };
	struct trace_sim s;

	REQUIRE(polsim_run(t, 0, cap, &pc, &s) == 0);
	CHECK_EQ(s.total_tokens, t->total_tokens);
	return s.hit_tokens;
}

/* One request a line, blocks of 10 tokens, every block full. */
static struct trace *load_reqs(const char *const *reqs, size_t n)
{
	char text[4096];
	size_t len = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned nb = 1;

		for (const char *c = reqs[i]; *c; c++)
			nb += *c == ',';
		len += (size_t)snprintf(text + len, sizeof(text) - len,
					"{\"timestamp\": %zu, \"input_length\": %u, \"hash_ids\": [%s]}\n",
					i, 10 * nb, reqs[i]);
		REQUIRE(len < sizeof(text));
	}
	return load(text, 10);
}

/* The clock ticks once per block access; H stays at its start (4 ticks)
 * while fewer than 128 intervals were observed, as in all of these. */
static void test_policy(void)
{
	/* Reads outrank recency, capacity 2, no rounds: 1 is read at ticks 2,
	 * 3, 4 (priority 5.52, 8.40, 10.61); 2, 3, 4 come in at 5, 6, 7 and
	 * each evicts the one before, so r8 hits 1: 40 of 80 tokens. Recency
	 * alone (lru, or the LRU simulation) evicts 1 at r6: 30. */
	static const char *const freq[] = { "1", "1", "1", "1", "2", "3", "4", "1" };
	struct trace *t = load_reqs(freq, 8);

	CHECK_EQ(pol_hits(t, 2, false, 1.0, 0), 40);
	CHECK_EQ(pol_hits(t, 2, true, 1.0, 0), 30);
	CHECK_EQ(hits(trace_sim_lru, t, 2), 30);
	CHECK_EQ(pol_hits(t, 0, false, 1.0, 0), 0);
	trace_free(t);

	/* A chain's tail leaves first, capacity 3: r2's put evicts 12 (the
	 * only block nothing extends), so r3 finds 10 11 and hits 20 of 70.
	 * The LRU simulation evicts 10, the head, and r3 hits nothing. */
	static const char *const chain[] = { "10,11,12", "20", "10,11,12" };
	t = load_reqs(chain, 3);
	CHECK_EQ(pol_hits(t, 3, false, 1.0, 0), 20);
	CHECK_EQ(pol_hits(t, 3, true, 1.0, 0), 20);
	CHECK_EQ(hits(trace_sim_lru, t, 3), 0);
	trace_free(t);

	/* A ghost brings its count back, capacity 2: 1 is read at 2 and 3
	 * (priority 8.40), fresh blocks 2..8 follow at 4..10 and at 10 push 1
	 * out (8.40 is the lowest then). r11 puts 1 again at 11: from its ghost
	 * 13.7, not 11, so r12's 9 (12) evicts 8 (10) and r13's 10 (13)
	 * evicts 9, not 1, and r14 hits: 30 of 140 tokens. A fresh 1 at 11
	 * would leave at r13, and r14 would miss. */
	static const char *const ghost[] = { "1", "1", "1", "2", "3", "4", "5", "6", "7", "8",
					     "1", "9", "10", "1" };
	t = load_reqs(ghost, 14);
	CHECK_EQ(pol_hits(t, 2, false, 1.0, 0), 30);
	trace_free(t);

	/* Rounds: capacity 4, watermark 0.5, ratio 0.5: r3's put makes 3 > 2
	 * held, and a round evicts 2 (1 and 2, the lowest), so r4 misses; with
	 * no rounds it hits. */
	static const char *const rounds[] = { "1", "2", "3", "1" };
	t = load_reqs(rounds, 4);
	CHECK_EQ(pol_hits(t, 4, false, 0.5, 0.5), 0);
	CHECK_EQ(pol_hits(t, 4, false, 1.0, 0.5), 10);
	CHECK_EQ(pol_hits(t, 4, false, 0, 0.5), 10);
	trace_free(t);
}

/* ---- random chained traces against naive simulations ------------------ */

static uint64_t rnd_state = 88172645463325252ull;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

/* The naive versions: a cached flag and a last-use time (LRU) or the next
 * use (optimum) per block, a linear scan for the victim. */
static uint64_t naive(const struct trace *t, uint64_t cap, bool opt)
{
	size_t nd = t->ndistinct;
	uint8_t *in = calloc(nd, 1);
	uint64_t *key = calloc(nd, sizeof(*key)), size = 0, hit = 0, clock = 0;
	size_t pos = 0;

	REQUIRE(in && key);
	for (size_t q = 0; q < t->nreqs; q++) {
		const struct trace_req *r = &t->reqs[q];

		for (uint32_t i = 0; i < r->nblocks && in[t->bid[r->first + i]]; i++)
			hit += trace_block_tokens(t, r, i);
		for (uint32_t i = 0; i < r->nblocks; i++, pos++) {
			uint32_t x = t->bid[pos];

			if (!in[x]) {
				in[x] = 1;
				size++;
			}
			if (opt) {
				key[x] = UINT64_MAX;
				for (size_t a = pos + 1; a < t->naccess; a++)
					if (t->bid[a] == x) {
						key[x] = a;
						break;
					}
			} else {
				key[x] = ++clock;
			}
			if (size > cap) {
				size_t v = SIZE_MAX;

				for (size_t b = 0; b < nd; b++)
					if (in[b] && (v == SIZE_MAX || (opt ? key[b] > key[v] : key[b] < key[v])))
						v = b;
				in[v] = 0;
				size--;
			}
		}
	}
	free(in);
	free(key);
	return hit;
}

static void test_random(void)
{
	for (int round = 0; round < 40; round++) {
		size_t cap = 4096, len = 0;
		char *text = malloc(cap);
		int64_t chains[64][24];
		int nchains = 0, nreq = 20 + (int)(rnd() % 60);
		int64_t next_id = 1000 + round;

		REQUIRE(text);
		for (int q = 0; q < nreq; q++) {
			int64_t ids[24];
			int n = 0, keep = 0, want = 1 + (int)(rnd() % 12);
			uint64_t tpb = 16, input;

			/* Reuse a prefix of an earlier chain, then new blocks. */
			if (nchains && rnd() % 4) {
				int c = (int)(rnd() % (uint64_t)nchains);

				keep = 1 + (int)(rnd() % 12);
				for (; n < keep && chains[c][n] != 0; n++)
					ids[n] = chains[c][n];
			}
			while (n < want || n == 0)
				ids[n++] = next_id++ * (rnd() % 2 ? 1 : -1);
			memset(chains[nchains % 64], 0, sizeof(chains[0]));
			memcpy(chains[nchains % 64], ids, (size_t)n * sizeof(ids[0]));
			if (nchains < 64)
				nchains++;
			input = (uint64_t)(n - 1) * tpb + 1 + rnd() % tpb;
			while (cap - len < 1024) {
				cap *= 2;
				text = realloc(text, cap);
				REQUIRE(text);
			}
			len += (size_t)snprintf(text + len, cap - len,
						"{\"hash_ids\":[%s", n ? "" : "]");
			for (int i = 0; i < n; i++)
				len += (size_t)snprintf(text + len, cap - len, "%s%lld", i ? "," : "",
							(long long)ids[i]);
			len += (size_t)snprintf(text + len, cap - len,
						"],\"input_length\":%llu,\"timestamp\":%d}\n",
						(unsigned long long)input, q);
		}
		struct trace *t = load(text, 16);

		uint64_t unl;
		struct trace_sim u;

		REQUIRE(trace_sim_unlimited(t, 0, &u) == 0);
		unl = u.hit_tokens;
		for (uint64_t c = 0; c < 30; c += 1 + c / 4) {
			CHECK_EQ(hits(trace_sim_lru, t, c), naive(t, c, false));
			CHECK_EQ(hits(trace_sim_opt, t, c), naive(t, c, true));
			CHECK(pol_hits(t, c, false, 0.98, 0.02) <= unl);
			CHECK(pol_hits(t, c, true, 0.9, 0.3) <= unl);
		}
		/* room for every block: nothing leaves, the model is unlimited */
		CHECK_EQ(pol_hits(t, t->ndistinct, false, 1.0, 0), unl);
		CHECK_EQ(pol_hits(t, t->ndistinct, true, 0, 0), unl);
		trace_free(t);
		free(text);
	}
}

/* ---- bad input --------------------------------------------------------- */

static void expect_bad(const char *text, size_t len, const char *want)
{
	char err[256] = "";
	struct trace *t = trace_load_mem(text, len, "bad.jsonl", 512, err, sizeof(err));

	CHECK(!t, "accepted: %.60s", text);
	trace_free(t);
	CHECK(strstr(err, want) != NULL, "for %.60s: error '%s' lacks '%s'", text, err, want);
}

#define BAD(text, want) expect_bad(text, sizeof(text) - 1, want)

static void test_bad(void)
{
	static const char good[] = "{\"timestamp\": 0, \"input_length\": 600, \"hash_ids\": [1, 2]}\n";
	BAD("", "bad.jsonl: no requests");
	BAD("\n  \n\r\n", "no requests");
	BAD("{\"timestamp\": 0, \"input_length\": 5}", "bad.jsonl:1: missing hash_ids");
	BAD("{\"input_length\": 5, \"hash_ids\": [1]}", ":1: missing timestamp");
	BAD("{\"timestamp\": 0, \"hash_ids\": [1]}", ":1: missing input_length");
	/* the line number is the file's, blank lines counted */
	BAD("{\"timestamp\": 0, \"input_length\": 600, \"hash_ids\": [1, 2]}\n\n{\"timestamp\": 0,",
	    "bad.jsonl:3: not a JSON document");
	BAD("[1, 2]", ":1: not a JSON object");
	BAD("{\"timestamp\": 0, \"input_length\": 600, \"hash_ids\": [1, 2.5]}",
	    "hash_ids[1]: not an integer");
	BAD("{\"timestamp\": 0, \"input_length\": 600, \"hash_ids\": [1, \"2\"]}",
	    "hash_ids[1]: not an integer");
	BAD("{\"timestamp\": 0, \"input_length\": 600, \"hash_ids\": [1, 99999999999999999999]}",
	    "hash_ids[1]: not an integer");
	BAD("{\"timestamp\": 0, \"input_length\": 5, \"hash_ids\": {\"a\": 1}}",
	    "hash_ids: not an array");
	BAD("{\"timestamp\": 0, \"input_length\": -5, \"hash_ids\": [1]}", "input_length: -5 is out of range");
	BAD("{\"timestamp\": 0, \"input_length\": 5.5, \"hash_ids\": [1]}", "input_length: not an integer");
	BAD("{\"timestamp\": \"x\", \"input_length\": 5, \"hash_ids\": [1]}", "timestamp: not a number");
	BAD("{\"timestamp\": 1e999, \"input_length\": 5, \"hash_ids\": [1]}", "timestamp: not a finite");
	BAD("{\"timestamp\": 0, \"input_length\": 5, \"output_length\": -1, \"hash_ids\": [1]}",
	    "output_length");
	BAD("{\"timestamp\": 0, \"input_length\": 513, \"hash_ids\": [1]}",
	    "input_length 513 does not fit 1 blocks of 512 tokens");
	BAD("{\"timestamp\": 0, \"input_length\": 512, \"hash_ids\": [1, 2]}", "does not fit 2 blocks");
	BAD("{\"timestamp\": 0, \"input_length\": 5, \"hash_ids\": []}", "does not fit 0 blocks");
	BAD("{\"timestamp\": 0, \"input_length\": 5, \"hash_ids\": [1]} x", "not a JSON document");
	/* a NUL inside a line refuses the line, not half of it */
	BAD("{\"timestamp\": 0, \"input_length\": 5, \"hash_ids\": [1]}\0junk", "not a JSON document");
	BAD("{\"timestamp\": 0, \"input_length\": 5, \"hash_ids\": [1\0]}", "not a JSON document");
	expect_bad(good, 0, "no requests");

	/* what is fine: CRLF, no final newline, blank lines, extra members,
	 * no output_length, a fractional timestamp, an empty request */
	struct trace *t = load("\r\n{\"timestamp\": 1.5, \"input_length\": 5, \"hash_ids\": [7], \"x\": [{}]}\r\n"
			       "\n{\"timestamp\": 2, \"input_length\": 0, \"hash_ids\": []}\n"
			       "{\"timestamp\": 3, \"input_length\": 1024, \"hash_ids\": [7, -8]}", 512);

	CHECK_EQ(t->nreqs, 3);
	CHECK_EQ(t->reqs[0].line, 2);
	CHECK_EQ(t->reqs[2].line, 5);
	CHECK(t->reqs[0].ts_ms == 1.5);
	CHECK_EQ(t->reqs[1].nblocks, 0);
	CHECK_EQ(t->hash[t->reqs[2].first + 1], -8);
	CHECK_EQ(t->ndistinct, 2);
	trace_free(t);

	char err[256];

	CHECK(!trace_load_mem(good, sizeof(good) - 1, "x", 0, err, sizeof(err)));
	CHECK(strstr(err, "tokens per block") != NULL, "%s", err);
}

/* ---- files: plain, gzip, truncated gzip, missing ------------------------ */

static void test_files(void)
{
	const char *dir = tl_tmpdir("t_trace");
	char plain[256], gzp[256], cut[256], err[256];
	static const char text[] =
		"{\"timestamp\": 0, \"input_length\": 600, \"hash_ids\": [1, 2]}\n"
		"{\"timestamp\": 1, \"input_length\": 700, \"hash_ids\": [1, 3]}\n";
	struct trace *a, *b;
	gzFile gz;

	tl_fmt(plain, sizeof(plain), "%s/t.jsonl", dir);
	tl_fmt(gzp, sizeof(gzp), "%s/t.jsonl.gz", dir);
	tl_fmt(cut, sizeof(cut), "%s/cut.jsonl.gz", dir);
	tl_write_file(plain, text);
	gz = gzopen(gzp, "wb");
	REQUIRE(gz);
	/* many lines, so that the reader crosses its 1 MiB chunks */
	for (int i = 0; i < 40000; i++)
		gzputs(gz, text);
	REQUIRE(gzclose(gz) == Z_OK);

	a = trace_load(plain, 512, err, sizeof(err));
	REQUIRE(a, "%s", err);
	CHECK_EQ(a->nreqs, 2);
	CHECK_EQ(a->total_tokens, 1300);
	b = trace_load(gzp, 512, err, sizeof(err));
	REQUIRE(b, "%s", err);
	CHECK_EQ(b->nreqs, 80000);
	CHECK_EQ(b->ndistinct, 3);
	CHECK_EQ(b->reqs[79999].line, 80000);
	trace_free(a);
	trace_free(b);

	/* the gzip file cut in the middle: an error, not a shorter trace */
	{
		FILE *in = fopen(gzp, "rb"), *out = fopen(cut, "wb");
		char buf[4096];
		size_t n;

		REQUIRE(in && out);
		n = fread(buf, 1, sizeof(buf), in);
		REQUIRE(n > 100);
		fwrite(buf, 1, n / 2, out);
		fclose(in);
		fclose(out);
	}
	a = trace_load(cut, 512, err, sizeof(err));
	CHECK(!a, "a truncated gzip file loaded");
	trace_free(a);
	CHECK(strncmp(err, cut, strlen(cut)) == 0, "%s", err);

	tl_fmt(cut, sizeof(cut), "%s/missing.jsonl", dir);
	a = trace_load(cut, 512, err, sizeof(err));
	CHECK(!a);
	CHECK(strstr(err, "No such file") != NULL, "%s", err);
	tl_tmpdir_drop(dir);
}

/* ---- the production trace ----------------------------------------------- */

static void test_conversation(void)
{
	static const struct {
		int (*sim)(const struct trace *, size_t, uint64_t, struct trace_sim *);
		const char *name;
		uint64_t cap;
		double want;
	} refs[] = {
		{ trace_sim_lru, "LRU", 6000, 0.1413 },
		{ trace_sim_lru, "LRU", 2000, 0.0547 },
		{ trace_sim_opt, "optimum", 6000, 0.3621 },
		{ trace_sim_opt, "optimum", 2000, 0.2600 },
	};
	struct polsim_conf pc = { .high_watermark = 0.98, .ratio = 0.02 };	/* the defaults */
	const char *path = "tests/data/conversation_trace.jsonl.gz";
	char alt[512], err[512];
	struct trace_sim s;
	struct trace *t;

	if (access(path, R_OK) != 0 && getenv("KVP_BUILD")) {
		tl_fmt(alt, sizeof(alt), "%s/../tests/data/conversation_trace.jsonl.gz",
		       getenv("KVP_BUILD"));
		path = alt;
	}
	t = trace_load(path, 512, err, sizeof(err));
	REQUIRE(t, "%s (run from the top of the tree)", err);
	CHECK_EQ(t->nreqs, 12031);
	CHECK_EQ(t->naccess, 288500);
	CHECK_EQ(t->ndistinct, 182790);
	REQUIRE(trace_sim_unlimited(t, 0, &s) == 0);
	printf("unlimited      %.4f\n", s.hit_rate);
	CHECK(fabs(s.hit_rate - 0.3736) <= 0.0005, "unlimited %.4f", s.hit_rate);
	for (size_t i = 0; i < sizeof(refs) / sizeof(refs[0]); i++) {
		REQUIRE(refs[i].sim(t, 0, refs[i].cap, &s) == 0);
		printf("%-8s %5llu %.4f\n", refs[i].name, (unsigned long long)refs[i].cap, s.hit_rate);
		CHECK(fabs(s.hit_rate - refs[i].want) <= 0.0005, "%s at %llu: %.4f, want %.4f",
		      refs[i].name, (unsigned long long)refs[i].cap, s.hit_rate, refs[i].want);
	}
	REQUIRE(polsim_run(t, 0, 6000, &pc, &s) == 0);
	printf("model     6000 %.4f\n", s.hit_rate);
	CHECK(fabs(s.hit_rate - 0.1845) <= 0.0005, "the model at 6000: %.4f", s.hit_rate);
	REQUIRE(polsim_run(t, 0, 2000, &pc, &s) == 0);
	printf("model     2000 %.4f\n", s.hit_rate);
	CHECK(fabs(s.hit_rate - 0.1137) <= 0.0005, "the model at 2000: %.4f", s.hit_rate);
	trace_free(t);
}

int main(void)
{
	tl_arm_cleanup();
	test_known();
	test_policy();
	test_random();
	test_bad();
	test_files();
	test_conversation();
	return tl_done();
}

/* fuzz_trace: arbitrary bytes as a request trace through trace_load_mem
 * (the line splitter and the per-line parser trace_load uses), then, when
 * they load, every simulation (and the model of kvpool's policy, with and
 * without rounds, in both its modes) at a few capacities. Oracles besides
 * the sanitizers: an error names the input and is NUL-terminated; a loaded
 * trace is consistent (blocks, dense ids, tokens per request); no
 * simulation hits more tokens than the request holds or than unlimited
 * capacity does (whatever a bounded cache holds, unlimited holds too).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "polsim.h"
#include "trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_trace(const struct trace *t)
{
	size_t blocks = 0;
	uint64_t tokens = 0;

	for (size_t q = 0; q < t->nreqs; q++) {
		const struct trace_req *r = &t->reqs[q];
		uint64_t sum = 0;

		if (r->first != blocks || r->nblocks > t->max_blocks)
			abort();
		for (uint32_t i = 0; i < r->nblocks; i++) {
			uint64_t k = trace_block_tokens(t, r, i);

			if (k < 1 || k > t->tokens_per_block)
				abort();
			sum += k;
		}
		if (sum != r->input_len)
			abort();
		blocks += r->nblocks;
		tokens += r->input_len;
	}
	if (blocks != t->naccess || tokens != t->total_tokens || t->nreqs == 0)
		abort();
	for (size_t a = 0; a < t->naccess; a++)
		if (t->bid[a] >= t->ndistinct)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint64_t caps[] = { 0, 1, 2, 3, 7, 64 };
	static const struct polsim_conf pcs[] = {
		{ .lru = false, .high_watermark = 0.98, .ratio = 0.02 },
		{ .lru = true, .high_watermark = 0.5, .ratio = 0.5 },
		{ .lru = false, .high_watermark = 1.0, .ratio = 0 },
	};
	struct trace_sim u, s;
	struct trace *t;
	char err[256];
	/* tokens per block from the first byte: small blocks reach the
	 * last-block rule with small numbers */
	uint32_t tpb = size ? (uint32_t)(data[0] % 4) * 255 + 1 : 512;

	memset(err, 'x', sizeof(err));
	t = trace_load_mem((const char *)data, size, "fuzz", tpb, err, sizeof(err));
	if (!t) {
		if (!memchr(err, '\0', sizeof(err)) || strncmp(err, "fuzz", 4) != 0)
			abort();
		return 0;
	}
	check_trace(t);
	if (trace_sim_unlimited(t, 0, &u) != 0)
		abort();
	if (u.hit_tokens > u.total_tokens || u.total_tokens != t->total_tokens)
		abort();
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		if (trace_sim_lru(t, 0, caps[i], &s) != 0 || s.hit_tokens > u.hit_tokens)
			abort();
		if (trace_sim_opt(t, 0, caps[i], &s) != 0 || s.hit_tokens > u.hit_tokens)
			abort();
		if (caps[i] == 0 && s.hit_tokens != 0)
			abort();
		for (size_t k = 0; k < sizeof(pcs) / sizeof(pcs[0]); k++)
			if (polsim_run(t, 0, caps[i], &pcs[k], &s) != 0 || s.hit_tokens > u.hit_tokens ||
			    (caps[i] == 0 && s.hit_tokens != 0))
				abort();
	}
	trace_free(t);
	return 0;
}

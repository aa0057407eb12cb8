/* trace: a request trace in Mooncake's FAST'25 JSON-lines format (one
 * request a line: timestamp, input_length, output_length and the hash_ids
 * of its prefix blocks, a chain) loaded into memory, and the offline
 * simulations of an engine's prefix cache over it: unlimited capacity,
 * exact LRU and the offline optimum (Belady), all token-weighted. Input is
 * hostile: every line is bounds-checked and a bad one is an error naming
 * FILE:LINE. A loaded trace is immutable; the simulations are pure and
 * may run on any thread.
 */
#ifndef KVP_TRACE_H
#define KVP_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define TRACE_MAX_LINE (4u << 20)	/* longest line accepted */
#define TRACE_MAX_BLOCKS (1u << 20)	/* most blocks of one request */

struct trace_req {
	double ts_ms;			/* arrival time as written (ms) */
	uint64_t input_len;		/* tokens */
	uint64_t output_len;		/* tokens */
	uint32_t first;			/* its first block in trace.hash / trace.bid */
	uint32_t nblocks;
	uint32_t line;			/* line number in the file */
};

struct trace {
	struct trace_req *reqs;
	size_t nreqs;
	int64_t *hash;			/* per block access: the hash id as written */
	uint32_t *bid;			/* per block access: a dense id, 0 .. ndistinct - 1 */
	size_t naccess;			/* block accesses (sum of nblocks) */
	size_t ndistinct;		/* distinct hash ids */
	uint32_t tokens_per_block;
	uint32_t max_blocks;		/* most blocks in one request */
	uint64_t total_tokens;		/* sum of input_len */
};

/* Tokens of block i of request r: tokens_per_block, except the last block,
 * which holds what is left of input_len (1 .. tokens_per_block). */
static inline uint64_t trace_block_tokens(const struct trace *t, const struct trace_req *r,
					  uint32_t i)
{
	if (i + 1 < r->nblocks)
		return t->tokens_per_block;
	return r->input_len - (uint64_t)t->tokens_per_block * (r->nblocks - 1);
}

/* Loads a trace from path, plain or gzip-compressed ("-": stdin), with
 * blocks of tokens_per_block tokens (the trace's: 512 for Mooncake's).
 * Blank lines are skipped. NULL on error with "PATH:LINE: what" (or
 * "PATH: what") in err; an empty trace is an error. */
struct trace *trace_load(const char *path, uint32_t tokens_per_block, char *err, size_t errlen);
/* The same from memory; name is used in messages. */
struct trace *trace_load_mem(const char *data, size_t len, const char *name,
			     uint32_t tokens_per_block, char *err, size_t errlen);
void trace_free(struct trace *t);

/* One simulation's outcome over the first nreqs requests. A request's hit
 * tokens are the tokens of its leading run of cached blocks; then it
 * accesses all its blocks in chain order. */
struct trace_sim {
	uint64_t hit_tokens;
	uint64_t total_tokens;
	double hit_rate;		/* hit_tokens / total_tokens (0 when empty) */
};

/* nreqs 0 or above t->nreqs: every request. 0 or -ENOMEM. */
int trace_sim_unlimited(const struct trace *t, size_t nreqs, struct trace_sim *out);
/* Exact LRU holding cap blocks: every access touches or inserts its block
 * (most recent), an insert beyond cap evicts the least recently used. */
int trace_sim_lru(const struct trace *t, size_t nreqs, uint64_t cap, struct trace_sim *out);
/* The offline optimum holding cap blocks (Belady): every access inserts or
 * refreshes its block; beyond cap the block whose next use is farthest
 * (never: farthest of all) leaves, which may be the one just inserted. */
int trace_sim_opt(const struct trace *t, size_t nreqs, uint64_t cap, struct trace_sim *out);

#endif

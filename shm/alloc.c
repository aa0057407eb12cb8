/* alloc: see alloc.h. TLSF (two-level segregated fit) over granules of
 * `align` bytes. Blocks (free and used) are 16-byte descriptors in a chunked
 * pool, linked in physical order by 29-bit indices; free blocks sit in
 * per-size-class lists found through two bitmaps (their list links in a
 * side array of 8-byte records, one per free block), used blocks in a hash
 * keyed by offset. Not thread-safe: the master's event loop owns every
 * allocator.
 *
 * Memory: 16 bytes per block + 2..4 bytes of hash bucket per used block +
 * 8 bytes per free block. Free blocks never outnumber used blocks + 1
 * (neighbours coalesce) and are few when extents are allocated in a row,
 * so one live allocation costs 18..20 bytes, at most ~44, plus a fixed
 * ~20 KiB per allocator (list heads, first hash table, first pool chunk).
 * Limits: 2^38 granules (16 TiB at 64-byte alignment), 2^29 - 1 blocks.
 * alloc_reserve out of offset order (a table file's or a leader's records
 * come in key order) adds a span index of 4 bytes per 8 granules, at most
 * 4 MiB (find_containing).
 */
#include "alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define IDX_BITS 29
#define NIL ((1u << IDX_BITS) - 1)	/* no block / no record */
#define MAX_GRAN (1ull << 38)
#define SL_BITS 5
#define SL_COUNT (1u << SL_BITS)
#define CHUNK_BITS 10		/* descriptors per pool chunk: 1024 (16 KiB) */
#define CHUNK_SIZE (1u << CHUNK_BITS)
#define MAX_FREE_PROBE 64	/* linear probes when the O(1) search fails */

/* 16 bytes: the granule offset's 38 bits are spread over the spare high
 * bits of the index words. aux: a used block's hash chain, a free block's
 * list record (NIL: out of memory for one, the block is in no list until
 * it coalesces), a dead block's pool chain. */
struct blk {
	uint32_t off_lo;
	uint32_t prev_phys : IDX_BITS, off_mid : 3;
	uint32_t next_phys : IDX_BITS, is_free : 1, dead : 1, : 1;
	uint32_t aux : IDX_BITS, off_hi : 3;
};
_Static_assert(sizeof(struct blk) == 16, "struct blk: 16 bytes");

/* A free block's list links (block indices); next_free chains the
 * records not in use. */
struct flink {
	uint32_t prev_free, next_free;
};

struct alloc {
	uint64_t base;		/* first managed byte (aligned) */
	uint64_t ngran;		/* managed granules */
	uint32_t align;
	unsigned shift;		/* log2(align) */
	unsigned fl_count;
	uint32_t first;		/* block at granule 0: never released */
	uint32_t hint;		/* where alloc_reserve starts looking */
	/* per span of 2^span_shift granules, a block that contained or
	 * started just before the span's first granule when last seen (a
	 * hint, checked before use); allocated at the first reserve the hint
	 * above does not serve, NULL before */
	uint32_t *spans;
	uint64_t nspans;
	unsigned span_shift;

	uint64_t free_gran;
	uint64_t nused, nfree;

	uint64_t fl_map;
	uint32_t *sl_map;	/* [fl_count] */
	uint32_t *heads;	/* [fl_count * SL_COUNT] */

	struct blk **chunks;	/* descriptor pool */
	uint32_t nchunks, chunk_cap;
	uint32_t pool_next;	/* descriptors handed out so far */
	uint32_t pool_free;	/* chain of released descriptors */

	struct flink *links;	/* free blocks' list links */
	uint32_t nlinks, links_cap;	/* records handed out so far; allocated */
	uint32_t links_free;	/* chain of released records */

	uint32_t *buckets;	/* used blocks by offset */
	uint64_t hmask;
	unsigned hbits;		/* log2(buckets) */
};

static inline struct blk *B(const struct alloc *a, uint32_t i)
{
	return &a->chunks[i >> CHUNK_BITS][i & (CHUNK_SIZE - 1)];
}

static inline uint64_t boff(const struct blk *b)
{
	return b->off_lo | (uint64_t)b->off_mid << 32 | (uint64_t)b->off_hi << 35;
}

static inline void set_off(struct blk *b, uint64_t g)
{
	b->off_lo = (uint32_t)g;
	b->off_mid = (uint32_t)(g >> 32) & 7;
	b->off_hi = (uint32_t)(g >> 35) & 7;
}

static inline uint64_t blen(const struct alloc *a, const struct blk *b)
{
	uint64_t end = b->next_phys == NIL ? a->ngran : boff(B(a, b->next_phys));

	return end - boff(b);
}

static inline struct flink *L(const struct alloc *a, const struct blk *b)
{
	return &a->links[b->aux];
}

static inline unsigned fls64(uint64_t v)	/* index of the highest set bit */
{
	return 63u - (unsigned)__builtin_clzll(v);
}

static void mapping(uint64_t n, unsigned *fl, unsigned *sl)
{
	if (n < SL_COUNT) {
		*fl = 0;
		*sl = (unsigned)n;
	} else {
		unsigned f = fls64(n);

		*sl = (unsigned)(n >> (f - SL_BITS)) ^ SL_COUNT;
		*fl = f - SL_BITS + 1;
	}
}

/* ---- descriptor pool ---- */

/* Makes the next k blk_new calls infallible, so that a split half-way
 * through an operation never has to be undone. */
static int pool_ensure(struct alloc *a, unsigned k)
{
	uint32_t i = a->pool_free;

	while (k && i != NIL) {
		k--;
		i = B(a, i)->next_phys;
	}
	if (!k)
		return 0;
	if ((uint64_t)a->pool_next + k >= NIL)
		return -ENOMEM;
	while (((a->pool_next + k - 1) >> CHUNK_BITS) >= a->nchunks) {
		if (a->nchunks == a->chunk_cap) {
			uint32_t cap = a->chunk_cap ? a->chunk_cap * 2 : 8;
			struct blk **c = realloc(a->chunks, cap * sizeof(*c));

			if (!c)
				return -ENOMEM;
			a->chunks = c;
			a->chunk_cap = cap;
		}
		a->chunks[a->nchunks] = malloc(CHUNK_SIZE * sizeof(struct blk));
		if (!a->chunks[a->nchunks])
			return -ENOMEM;
		a->nchunks++;
	}
	return 0;
}

static uint32_t blk_new(struct alloc *a)
{
	uint32_t i;

	if (a->pool_free != NIL) {
		i = a->pool_free;
		a->pool_free = B(a, i)->next_phys;
		return i;
	}
	if (pool_ensure(a, 1) < 0)
		return NIL;
	return a->pool_next++;
}

static void blk_release(struct alloc *a, uint32_t i)
{
	struct blk *b = B(a, i);

	b->dead = 1;
	b->is_free = 0;
	b->next_phys = a->pool_free;
	a->pool_free = i;
}

/* ---- free blocks' list records ---- */

/* Makes the next k rec_new calls succeed. */
static int links_ensure(struct alloc *a, unsigned k)
{
	uint32_t i = a->links_free;
	uint64_t cap = a->links_cap;

	while (k && i != NIL) {
		k--;
		i = a->links[i].next_free;
	}
	if (a->nlinks + k <= cap)
		return 0;
	while (a->nlinks + k > cap)
		cap = cap ? cap * 2 : 64;
	if (cap > NIL)
		return -ENOMEM;
	struct flink *l = realloc(a->links, cap * sizeof(*l));

	if (!l)
		return -ENOMEM;
	a->links = l;
	a->links_cap = (uint32_t)cap;
	return 0;
}

/* NIL only out of memory (alloc_free's block then waits in no list). */
static uint32_t rec_new(struct alloc *a)
{
	uint32_t r = a->links_free;

	if (r != NIL) {
		a->links_free = a->links[r].next_free;
		return r;
	}
	if (a->nlinks == a->links_cap)
		return NIL;
	return a->nlinks++;
}

static void rec_release(struct alloc *a, uint32_t r)
{
	a->links[r].next_free = a->links_free;
	a->links_free = r;
}

/* ---- free lists ---- */

static void free_insert(struct alloc *a, uint32_t i)
{
	struct blk *b = B(a, i);
	unsigned fl, sl;
	uint32_t *head;

	b->is_free = 1;
	a->nfree++;
	b->aux = rec_new(a);
	if (b->aux == NIL)
		return;
	mapping(blen(a, b), &fl, &sl);
	head = &a->heads[fl * SL_COUNT + sl];
	L(a, b)->prev_free = NIL;
	L(a, b)->next_free = *head;
	if (*head != NIL)
		L(a, B(a, *head))->prev_free = i;
	*head = i;
	a->fl_map |= 1ull << fl;
	a->sl_map[fl] |= 1u << sl;
}

/* Must run before the block's length changes (it selects the list). */
static void free_remove(struct alloc *a, uint32_t i)
{
	struct blk *b = B(a, i);
	unsigned fl, sl;
	uint32_t *head;

	struct flink *l;

	b->is_free = 0;
	a->nfree--;
	if (b->aux == NIL)
		return;
	l = L(a, b);
	mapping(blen(a, b), &fl, &sl);
	head = &a->heads[fl * SL_COUNT + sl];
	if (l->prev_free != NIL)
		L(a, B(a, l->prev_free))->next_free = l->next_free;
	else
		*head = l->next_free;
	if (l->next_free != NIL)
		L(a, B(a, l->next_free))->prev_free = l->prev_free;
	if (*head == NIL) {
		a->sl_map[fl] &= ~(1u << sl);
		if (!a->sl_map[fl])
			a->fl_map &= ~(1ull << fl);
	}
	rec_release(a, b->aux);
}

/* ---- hash of used blocks ---- */

/* The low bits of the offset as they are, the higher ones folded in:
 * blocks allocated one after another (consecutive offsets) land in
 * neighbouring buckets, a cache line per 16 of them, where a multiplicative
 * hash put each in a line of its own (a miss per insert and per free: 8% of
 * the master's time in a pipelined put run). Folding spreads a stride of
 * 2^k granules over the buckets as well: the offsets of nused blocks span at
 * least nused * 2^k granules, whose bits above hbits fill the k low ones. */
static inline uint64_t hslot(const struct alloc *a, uint64_t g)
{
	uint64_t h = g;

	for (uint64_t x = g >> a->hbits; x; x >>= a->hbits)
		h ^= x;
	return h & a->hmask;
}

static int hash_grow(struct alloc *a)
{
	uint64_t n = (a->hmask + 1) * 2;
	uint32_t *nb = malloc(n * sizeof(*nb));

	if (!nb)
		return -ENOMEM;
	for (uint64_t s = 0; s < n; s++)
		nb[s] = NIL;
	a->hmask = n - 1;
	a->hbits++;
	/* every used block in descriptor order, a sequential walk: following
	 * the old chains cost a cache miss per block (10% of a table file's
	 * load at 3M objects) */
	for (uint32_t i = 0; i < a->pool_next; i++) {
		struct blk *b = B(a, i);

		if (b->is_free || b->dead)
			continue;
		uint64_t h = hslot(a, boff(b));

		b->aux = nb[h];
		nb[h] = i;
	}
	free(a->buckets);
	a->buckets = nb;
	return 0;
}

static void hash_insert(struct alloc *a, uint32_t i)
{
	struct blk *b = B(a, i);
	uint64_t h = hslot(a, boff(b));

	b->aux = a->buckets[h];
	a->buckets[h] = i;
	a->nused++;
}

static uint32_t hash_find(const struct alloc *a, uint64_t g)
{
	uint32_t i = a->buckets[hslot(a, g)];

	while (i != NIL && boff(B(a, i)) != g)
		i = B(a, i)->aux;
	return i;
}

static void hash_remove(struct alloc *a, uint32_t i)
{
	uint32_t *head = &a->buckets[hslot(a, boff(B(a, i)))];
	uint32_t p = *head;

	if (p == i) {
		*head = B(a, i)->aux;
	} else {
		while (B(a, p)->aux != i)
			p = B(a, p)->aux;
		B(a, p)->aux = B(a, i)->aux;
	}
	a->nused--;
}

/* ---- public ---- */

struct alloc *alloc_create(uint64_t base, uint64_t size, uint32_t align)
{
	struct alloc *a;
	uint64_t start, end;
	unsigned fl, sl;

	if (align == 0)
		align = 4096;
	if (align < 64 || (align & (align - 1)) || size == 0 || base > UINT64_MAX - size ||
	    (size >> fls64(align)) > MAX_GRAN)
		return NULL;
	/* Offsets are aligned in absolute terms, so trim both ends. */
	start = base + align - 1 < base ? UINT64_MAX : (base + align - 1) & ~(uint64_t)(align - 1);
	end = (base + size) & ~(uint64_t)(align - 1);
	if (start >= end)
		return NULL;

	a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->base = start;
	a->align = align;
	a->shift = fls64(align);
	a->ngran = (end - start) >> a->shift;
	mapping(a->ngran, &fl, &sl);
	a->fl_count = fl + 1;
	a->pool_free = NIL;
	a->links_free = NIL;
	a->sl_map = calloc(a->fl_count, sizeof(*a->sl_map));
	a->heads = malloc((size_t)a->fl_count * SL_COUNT * sizeof(*a->heads));
	a->hmask = 1023;
	a->hbits = 10;
	a->buckets = malloc((a->hmask + 1) * sizeof(*a->buckets));
	if (!a->sl_map || !a->heads || !a->buckets)
		goto out_free;
	for (size_t h = 0; h < (size_t)a->fl_count * SL_COUNT; h++)
		a->heads[h] = NIL;
	for (uint64_t h = 0; h <= a->hmask; h++)
		a->buckets[h] = NIL;

	a->first = blk_new(a);
	if (a->first == NIL || links_ensure(a, 1) < 0)
		goto out_free;
	*B(a, a->first) = (struct blk){ .prev_phys = NIL, .next_phys = NIL };
	free_insert(a, a->first);
	a->free_gran = a->ngran;
	a->hint = a->first;
	return a;

out_free:
	alloc_destroy(a);
	return NULL;
}

void alloc_destroy(struct alloc *a)
{
	if (!a)
		return;
	for (uint32_t c = 0; c < a->nchunks; c++)
		free(a->chunks[c]);
	free(a->chunks);
	free(a->links);
	free(a->buckets);
	free(a->heads);
	free(a->sl_map);
	free(a->spans);
	free(a);
}

/* Head of the first non-empty list whose blocks are all >= n granules. */
static uint32_t find_fit(const struct alloc *a, uint64_t n)
{
	unsigned fl, sl;
	uint32_t slm;
	uint64_t flm;

	if (n >= SL_COUNT) {
		uint64_t r = n + (1ull << (fls64(n) - SL_BITS)) - 1;

		if (r < n)
			return NIL;
		n = r;
	}
	mapping(n, &fl, &sl);
	if (fl >= a->fl_count)
		return NIL;
	slm = a->sl_map[fl] & (~0u << sl);
	if (!slm) {
		flm = fl + 1 < 64 ? a->fl_map & (~0ull << (fl + 1)) : 0;
		if (!flm)
			return NIL;
		fl = (unsigned)__builtin_ctzll(flm);
		slm = a->sl_map[fl];
	}
	sl = (unsigned)__builtin_ctz(slm);
	return a->heads[fl * SL_COUNT + sl];
}

/* The rounded search skips the request's own size class, whose blocks may
 * be smaller; when nothing larger exists look there too (bounded, so a
 * full allocator stays fast). */
static uint32_t find_in_class(const struct alloc *a, uint64_t n)
{
	unsigned fl, sl;
	uint32_t i;
	int probes = MAX_FREE_PROBE;

	mapping(n, &fl, &sl);
	if (fl >= a->fl_count)
		return NIL;
	for (i = a->heads[fl * SL_COUNT + sl]; i != NIL && probes--; i = L(a, B(a, i))->next_free)
		if (blen(a, B(a, i)) >= n)
			return i;
	return NIL;
}

/* Splits the front n granules off free-list-detached block i; the rest
 * becomes a new free block. The caller made blk_new infallible. */
static void split(struct alloc *a, uint32_t i, uint64_t n)
{
	struct blk *b = B(a, i);
	uint32_t r;
	struct blk *rb;

	if (blen(a, b) == n)
		return;
	r = blk_new(a);
	rb = B(a, r);
	*rb = (struct blk){ .prev_phys = i, .next_phys = b->next_phys };
	set_off(rb, boff(b) + n);
	if (b->next_phys != NIL)
		B(a, b->next_phys)->prev_phys = r;
	b->next_phys = r;
	free_insert(a, r);
}

/* Chains of 1-2 blocks on average: 2-4 bytes of bucket per used block. A
 * failed resize only makes chains longer. */
static void hash_room(struct alloc *a)
{
	if (a->nused + 1 > 2 * (a->hmask + 1))
		(void)hash_grow(a);
}

uint64_t alloc_alloc(struct alloc *a, uint64_t len, uint64_t *alloc_len)
{
	uint64_t n;
	uint32_t i;

	if (len == 0 || len > a->ngran << a->shift)
		return UINT64_MAX;
	n = (len + a->align - 1) >> a->shift;
	if (n > a->free_gran)
		return UINT64_MAX;
	i = find_fit(a, n);
	if (i == NIL)
		i = find_in_class(a, n);
	if (i == NIL || pool_ensure(a, 1) < 0 || links_ensure(a, 1) < 0)
		return UINT64_MAX;
	hash_room(a);
	free_remove(a, i);
	split(a, i, n);
	hash_insert(a, i);
	a->free_gran -= n;
	if (alloc_len)
		*alloc_len = n << a->shift;
	return a->base + (boff(B(a, i)) << a->shift);
}

/* Offset (bytes) -> granule, or UINT64_MAX when not an aligned offset in range. */
static uint64_t to_gran(const struct alloc *a, uint64_t off)
{
	if (off < a->base || (off - a->base) & (a->align - 1))
		return UINT64_MAX;
	off = (off - a->base) >> a->shift;
	return off < a->ngran ? off : UINT64_MAX;
}

int alloc_free(struct alloc *a, uint64_t off)
{
	uint64_t g = to_gran(a, off);
	uint32_t i, p, nx;
	struct blk *b;

	if (g == UINT64_MAX || (i = hash_find(a, g)) == NIL)
		return -EINVAL;
	/* a failure leaves the block out of the lists until it coalesces */
	(void)links_ensure(a, 1);
	hash_remove(a, i);
	b = B(a, i);
	a->free_gran += blen(a, b);

	nx = b->next_phys;
	if (nx != NIL && B(a, nx)->is_free) {
		free_remove(a, nx);
		b->next_phys = B(a, nx)->next_phys;
		if (b->next_phys != NIL)
			B(a, b->next_phys)->prev_phys = i;
		blk_release(a, nx);
	}
	p = b->prev_phys;
	if (p != NIL && B(a, p)->is_free) {
		struct blk *pb = B(a, p);

		free_remove(a, p);
		pb->next_phys = b->next_phys;
		if (b->next_phys != NIL)
			B(a, b->next_phys)->prev_phys = p;
		blk_release(a, i);
		if (a->hint == i)
			a->hint = p;
		i = p;
	}
	free_insert(a, i);
	return 0;
}

/* Whether span k's hint can start a walk: a live block from its span's
 * first granule or from at most one span before it (a split since may
 * have moved the granule into a block further right, one step away). */
static bool span_ok(const struct alloc *a, uint64_t k)
{
	uint32_t i = a->spans[k];
	uint64_t s = k << a->span_shift, bo;

	if (i == NIL || B(a, i)->dead)
		return false;
	bo = boff(B(a, i));
	return bo <= s && (s - bo < (1ull << a->span_shift) || s < bo + blen(a, B(a, i)));
}

static int spans_init(struct alloc *a)
{
	unsigned shift = 3;	/* a few blocks to walk per span */

	while ((a->ngran >> shift) >= (1u << 20))
		shift++;	/* at most 4 MiB of spans */
	a->nspans = (a->ngran >> shift) + 1;
	a->spans = malloc(a->nspans * sizeof(*a->spans));
	if (!a->spans)
		return -ENOMEM;
	a->span_shift = shift;
	for (uint64_t k = 0; k < a->nspans; k++)
		a->spans[k] = NIL;
	a->spans[0] = a->first;	/* granule 0's block is never released */
	return 0;
}

/* Block containing granule g. The hint (the block after the last reserve)
 * serves the ascending order in which a node's scan reports extents in
 * O(1); any other order starts from the nearest span whose hint holds and
 * walks right, refreshing the hints of the spans it passes: a walk per
 * reserve through the physical list from the hint or the first block made
 * a table file's load in key order quadratic (100k objects: 4.2 s, 44 ms
 * in offset order). Without memory for the spans, the old walk. */
static uint32_t find_containing(struct alloc *a, uint64_t g)
{
	uint32_t i = a->hint;
	uint64_t k, sp;

	if (!B(a, i)->dead && boff(B(a, i)) <= g && g < boff(B(a, i)) + blen(a, B(a, i)))
		return i;
	if (!a->spans && spans_init(a)) {
		i = a->first;
		while (g >= boff(B(a, i)) + blen(a, B(a, i)))
			i = B(a, i)->next_phys;
		return i;
	}
	sp = g >> a->span_shift;
	for (k = sp; !span_ok(a, k); k--)
		;
	i = a->spans[k];
	for (;;) {
		uint64_t end = boff(B(a, i)) + blen(a, B(a, i));

		while (k < sp && ((k + 1) << a->span_shift) < end)
			a->spans[++k] = i;
		if (g < end)
			return i;
		i = B(a, i)->next_phys;
	}
}

int alloc_reserve(struct alloc *a, uint64_t off, uint64_t len)
{
	uint64_t g = to_gran(a, off), n, bo;
	uint32_t i, m;

	if (g == UINT64_MAX || len == 0 || len > UINT64_MAX - a->align)
		return -EINVAL;
	n = (len + a->align - 1) >> a->shift;
	if (n > a->ngran - g)
		return -EINVAL;
	i = find_containing(a, g);
	if (!B(a, i)->is_free)
		return -EEXIST;
	bo = boff(B(a, i));
	/* Free blocks are maximal, so a range running past this one overlaps
	 * the used block that follows. */
	if (g + n > bo + blen(a, B(a, i)))
		return -EEXIST;
	if (pool_ensure(a, 2) < 0 || links_ensure(a, 2) < 0)
		return -ENOMEM;
	hash_room(a);

	free_remove(a, i);
	m = i;
	if (g > bo) {
		split(a, i, g - bo);
		m = B(a, i)->next_phys;
		free_remove(a, m);
		free_insert(a, i);
	}
	split(a, m, n);
	hash_insert(a, m);
	a->free_gran -= n;
	a->hint = B(a, m)->next_phys != NIL ? B(a, m)->next_phys : m;
	return 0;
}

uint64_t alloc_len_at(const struct alloc *a, uint64_t off)
{
	uint64_t g = to_gran(a, off);
	uint32_t i;

	if (g == UINT64_MAX || (i = hash_find(a, g)) == NIL)
		return 0;
	return blen(a, B(a, i)) << a->shift;
}

bool alloc_next_used(const struct alloc *a, uint64_t *cur, uint64_t *off, uint64_t *len)
{
	/* *cur: 1 + the index of the block last returned, untouched since */
	uint32_t i = *cur ? B(a, (uint32_t)(*cur - 1))->next_phys : a->first;

	for (; i != NIL; i = B(a, i)->next_phys) {
		const struct blk *b = B(a, i);
		if (b->is_free)
			continue;
		*cur = (uint64_t)i + 1;
		*off = a->base + (boff(b) << a->shift);
		*len = blen(a, b) << a->shift;
		return true;
	}
	return false;
}

void alloc_stats(const struct alloc *a, struct alloc_stats *st)
{
	uint64_t largest = 0;

	st->size = a->ngran << a->shift;
	st->free_bytes = a->free_gran << a->shift;
	st->nalloc = a->nused;
	st->nfree = a->nfree;
	/* The largest block is in the highest non-empty list; that list spans
	 * one size class, so look at each of its blocks. */
	if (a->fl_map) {
		unsigned fl = fls64(a->fl_map);
		unsigned sl = 31u - (unsigned)__builtin_clz(a->sl_map[fl]);

		for (uint32_t i = a->heads[fl * SL_COUNT + sl]; i != NIL; i = L(a, B(a, i))->next_free) {
			uint64_t l = blen(a, B(a, i));

			if (l > largest)
				largest = l;
		}
	}
	st->largest_free = largest << a->shift;
}

uint32_t alloc_align(const struct alloc *a)
{
	return a->align;
}

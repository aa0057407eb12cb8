/* t_mhold: the holds a new leader places from a node's commit map
 * (master/mhold.h): a committed page the table does not know is held up to
 * the next extent the map vouches for, around the table's extents whose
 * page byte is another tag (stale), never over one that is sure; an
 * extent reported inside a hold splits it; the release frees it all.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "kvpool.h"
#include "mhold.h"
#include "segmap.h"
#include "segreg.h"
#include "testlib.h"

#define PG 4096ull
#define DATA (16 * PG)			/* data_off */
#define NPG 64				/* data pages */
#define END (DATA + NPG * PG)

static uint8_t map[DATA / PG + NPG];
static uint8_t tags[DATA / PG + NPG];	/* the table's extents' tags by page */

/* page i of the data area */
static uint64_t pg(unsigned i)
{
	return DATA + i * PG;
}

static struct mrecon_ent ent(unsigned page, unsigned pages, uint64_t gen)
{
	return (struct mrecon_ent){
		.key = pg(page) | (uint64_t)KVP_TIER_MEM << 1,
		.len = pages * PG | (uint64_t)segmap_tag(gen) << MHOLD_TAG_SHIFT,
	};
}

/* Every page of [page, page + n) is taken in the allocator. */
static bool taken(struct alloc *a, unsigned page, unsigned n)
{
	for (unsigned i = page; i < page + n; i++) {
		if (alloc_reserve(a, pg(i), PG) == 0) {
			alloc_free(a, pg(i));
			return false;
		}
	}
	return true;
}

/* Every page of [page, page + n) is free. */
static bool free_pages(struct alloc *a, unsigned page, unsigned n)
{
	for (unsigned i = page; i < page + n; i++) {
		if (alloc_reserve(a, pg(i), PG) != 0)
			return false;
		alloc_free(a, pg(i));
	}
	return true;
}

/* An allocator holding the table's extents e[0..n), their tags in tags[]. */
static struct alloc *table(const struct mrecon_ent *e, size_t n)
{
	struct alloc *a = alloc_create(DATA, END - DATA, 4096);

	REQUIRE(a, "alloc_create");
	memset(tags, 0, sizeof(tags));
	for (size_t i = 0; i < n; i++) {
		REQUIRE(alloc_reserve(a, e[i].key & ~7ull, e[i].len & MHOLD_LEN_MASK) == 0,
			"table extent %zu", i);
		tags[(e[i].key & ~7ull) / PG] = (uint8_t)(e[i].len >> MHOLD_TAG_SHIFT);
	}
	return a;
}

static void t_plan(void)
{
	/* table: A at 0 (1 page, gen 10, sure), S at 8 (2 pages, gen 20, the
	 * map says gen 21: stale), B at 20 (1 page, gen 30, sure), C at 40
	 * (gen 40, map byte 0: stale, never bounds) */
	struct mrecon_ent e[] = { ent(0, 1, 10), ent(8, 2, 20), ent(20, 1, 30), ent(40, 1, 40) };
	struct alloc *a = table(e, 4);
	struct mhold h = { 0 };
	struct alloc_stats st0, st;

	memset(map, 0, sizeof(map));
	map[pg(0) / PG] = segmap_tag(10);
	map[pg(8) / PG] = segmap_tag(21);	/* S replaced by what the table lacks */
	map[pg(5) / PG] = segmap_tag(7);	/* unknown at 5 */
	map[pg(20) / PG] = segmap_tag(30);
	map[pg(30) / PG] = segmap_tag(99);	/* unknown at 30: runs over C to the end */
	alloc_stats(a, &st0);
	CHECK_EQ(mhold_plan(&h, a, tags, sizeof(tags), map, sizeof(map), DATA, END), 0);
	CHECK(mhold_check(&h, a));
	/* 5..8 held, S stays S, 10..20 held: one run per gap */
	CHECK(free_pages(a, 1, 4), "pages 1-4: no committed byte, free");
	CHECK(taken(a, 5, 15), "pages 5-19 held (S in the middle)");
	CHECK(taken(a, 30, NPG - 30), "pages 30-63 held, over the stale C");
	CHECK(free_pages(a, 21, 9), "pages 21-29 free: after the sure B");
	CHECK_EQ(h.n, 4);
	CHECK_EQ(h.bytes, (3 + 10 + 10 + 23) * PG);
	alloc_stats(a, &st);
	CHECK_EQ(st0.free_bytes - st.free_bytes, h.bytes);

	/* the node reports Y at 10 (3 pages) and Z at 33 (1 page): carved */
	CHECK_EQ(mhold_carve(&h, a, pg(10), 3 * PG), 0);
	CHECK_EQ(alloc_reserve(a, pg(10), 3 * PG), 0);
	CHECK(taken(a, 13, 7), "the rest of the hold after Y stays held");
	CHECK_EQ(mhold_carve(&h, a, pg(33), 100), 0);	/* len rounded up */
	CHECK_EQ(alloc_reserve(a, pg(33), PG), 0);
	CHECK(taken(a, 30, 3) && taken(a, 34, NPG - 34), "both sides of Z held");
	CHECK_EQ(h.bytes, (3 + 7 + 3 + 6 + 23) * PG);	/* 5-7, 13-19, 30-32, 34-39, 41-63 */
	CHECK_EQ(h.n, 5);

	/* a ghost's space is held again, merged with its neighbours */
	alloc_free(a, pg(8));
	CHECK_EQ(mhold_add(&h, a, pg(8), 2 * PG), 0);
	CHECK_EQ(h.n, 5);		/* 5-9 one hold now */
	CHECK(taken(a, 5, 5), "5-9 held");

	mhold_release(&h, a);
	CHECK_EQ(h.n, 0);
	CHECK(free_pages(a, 5, 5) && free_pages(a, 13, 7) && free_pages(a, 30, 3),
	      "holds released");
	CHECK(taken(a, 10, 3) && taken(a, 33, 1) && taken(a, 0, 1) && taken(a, 20, 1),
	      "adopted and table extents stay");
	alloc_destroy(a);
}

static void t_edges(void)
{
	struct mrecon_ent e[] = { ent(3, 1, 5) };
	struct mhold h = { 0 };
	struct alloc *a = table(e, 1);

	/* an empty map holds nothing; a map shorter than the segment reads 0 */
	memset(map, 0, sizeof(map));
	CHECK_EQ(mhold_plan(&h, a, tags, sizeof(tags), map, 0, DATA, END), 0);
	CHECK_EQ(h.n, 0);
	map[pg(0) / PG] = 1;
	CHECK_EQ(mhold_plan(&h, a, tags, sizeof(tags), map, pg(1) / PG, DATA, END), 0);
	/* the byte of 3 lies past the map: A is not sure, the hold runs on */
	CHECK(taken(a, 0, NPG), "held over the unvouched A to the end");
	mhold_release(&h, a);
	alloc_destroy(a);

	/* alignment below 4 KiB: the map cannot vouch per extent */
	a = alloc_create(DATA, END - DATA, 1024);
	REQUIRE(a, "alloc_create");
	CHECK_EQ(mhold_plan(&h, a, tags, sizeof(tags), map, sizeof(map), DATA, END), -EINVAL);
	alloc_destroy(a);

	/* an allocation without a tag (an upsert's set-aside version): held
	 * around, never a bound */
	a = table(e, 1);
	CHECK_EQ(alloc_reserve(a, pg(6), PG), 0);
	memset(map, 0, sizeof(map));
	map[pg(5) / PG] = 9;
	map[pg(6) / PG] = 9;
	CHECK_EQ(mhold_plan(&h, a, tags, sizeof(tags), map, sizeof(map), DATA, END), 0);
	CHECK(mhold_check(&h, a));
	CHECK_EQ(h.n, 2);
	CHECK(taken(a, 5, NPG - 5), "5 and 7-63 held");
	mhold_release(&h, a);
	CHECK(free_pages(a, 5, 1) && free_pages(a, 7, NPG - 7), "released");
	alloc_destroy(a);

	/* a sure extent's inner page set: something hides in it, hold after */
	struct mrecon_ent big[] = { ent(2, 4, 50) };
	a = table(big, 1);
	memset(map, 0, sizeof(map));
	map[pg(2) / PG] = segmap_tag(50);
	map[pg(4) / PG] = 3;
	CHECK_EQ(mhold_plan(&h, a, tags, sizeof(tags), map, sizeof(map), DATA, END), 0);
	CHECK(free_pages(a, 0, 2) && taken(a, 6, NPG - 6), "held from its end");
	mhold_release(&h, a);
	alloc_destroy(a);
}

int main(void)
{
	t_plan();
	t_edges();
	return tl_done();
}

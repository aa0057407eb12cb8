/* t_vheap: the victim heap's primitives against a sorted model. Random
 * keys pushed one by one and appended then heapified come out in order
 * (ties in any order, every slot once); raising the top's key sinks it to
 * its place; pops of an emptied heap are harmless; marks are kept while
 * the heap is on, ignored while off, and past their limit turn it off and
 * empty it; parked entries are kept in order of parking; a cleared heap
 * keeps its memory and a freed one none. SEED=n reproduces a run.
 */
#include "testlib.h"
#include "vheap.h"

static uint64_t rng;

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	return (x > y) - (x < y);
}

/* Pops h empty: the keys must come out as the sorted want[0..n), each
 * slot (0..n) once. */
static void drain_sorted(struct vheap *h, int32_t *want, size_t n)
{
	unsigned char *seen = calloc(n, 1);

	REQUIRE(seen != NULL, "calloc");
	qsort(want, n, sizeof(*want), cmp_i32);
	CHECK_EQ(h->n, n);
	for (size_t i = 0; i < n && tl_failures == 0; i++) {
		CHECK(h->v[0].key == want[i], "pop %zu: key %d, want %d", i, h->v[0].key, want[i]);
		CHECK(h->v[0].slot < n && !seen[h->v[0].slot], "pop %zu: slot %u twice", i,
		      h->v[0].slot);
		if (h->v[0].slot < n)
			seen[h->v[0].slot] = 1;
		vheap_pop(h);
	}
	CHECK_EQ(h->n, 0);
	vheap_pop(h);				/* empty: nothing happens */
	CHECK_EQ(h->n, 0);
	free(seen);
}

static void test_order(void)
{
	enum { N = 20000 };
	static int32_t keys[N];
	struct vheap h = { 0 };

	for (size_t i = 0; i < N; i++) {	/* narrow range: many ties */
		keys[i] = (int32_t)(rnd() % 5000) - 2500;
		if (i % 97 == 0)
			keys[i] = i % 2 ? INT32_MIN : INT32_MAX;
		REQUIRE(vheap_push(&h, keys[i], (uint32_t)i) == 0, "push");
	}
	drain_sorted(&h, keys, N);

	for (size_t i = 0; i < N; i++) {
		keys[i] = (int32_t)rnd();
		REQUIRE(vheap_append(&h, keys[i], (uint32_t)i) == 0, "append");
	}
	vheap_heapify(&h);
	drain_sorted(&h, keys, N);
	vheap_free(&h);
	CHECK(h.v == NULL && h.cap == 0, "freed");
}

/* The top's key raised (what a pick does when the top's object was read
 * since): it sinks below every lower key, and the heap stays ordered. */
static void test_raise(void)
{
	enum { N = 1000 };
	static int32_t keys[N];
	struct vheap h = { 0 };

	for (size_t i = 0; i < N; i++) {
		keys[i] = (int32_t)(i * 10);
		REQUIRE(vheap_push(&h, keys[i], (uint32_t)i) == 0, "push");
	}
	for (int r = 0; r < 300; r++) {		/* raise the lowest by 0-20,000 */
		uint32_t slot = h.v[0].slot;
		int32_t k = h.v[0].key + (int32_t)(rnd() % 20000);
		keys[slot] = k;
		vheap_raise_top(&h, k);
		for (size_t i = 1; i < h.n; i++)
			if (h.v[(i - 1) / 2].key > h.v[i].key) {
				CHECK(0, "heap order broken after raise %d at %zu", r, i);
				break;
			}
	}
	drain_sorted(&h, keys, N);
	vheap_free(&h);
}

static void test_marks_park(void)
{
	struct vheap h = { 0 };

	vheap_mark(&h, 7, 100);			/* off: not kept */
	CHECK_EQ(h.nmark, 0);
	h.on = true;
	for (size_t i = 0; i < 100; i++)
		vheap_mark(&h, i, 100);
	CHECK_EQ(h.nmark, 100);
	CHECK(h.on, "on within the limit");
	CHECK_EQ(h.mark[42], 42);
	REQUIRE(vheap_push(&h, 5, 1) == 0, "push");
	vheap_mark(&h, 100, 100);		/* one past the limit: off, emptied */
	CHECK(!h.on, "off past the limit");
	CHECK(h.nmark == 0 && h.n == 0 && h.npark == 0, "emptied");
	CHECK(h.mark != NULL && h.v != NULL, "memory kept for the rebuild");

	for (uint32_t i = 0; i < 1000; i++)
		REQUIRE(vheap_park(&h, (struct vheap_ent){ .key = (int32_t)i, .slot = i }) == 0,
			"park");
	CHECK_EQ(h.npark, 1000);
	CHECK(h.park[999].slot == 999 && h.park[0].key == 0, "parked in order");
	h.on = true;
	h.picks = 3;
	vheap_clear(&h);
	CHECK(!h.on && h.npark == 0 && h.picks == 0, "cleared");
	vheap_free(&h);
	CHECK(h.v == NULL && h.mark == NULL && h.park == NULL, "freed");
}

int main(void)
{
	const char *seed = getenv("SEED");

	rng = seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL);
	if (!rng)
		rng = 1;
	printf("SEED=%llu\n", (unsigned long long)rng);
	test_order();
	test_raise();
	test_marks_park();
	return tl_done();
}

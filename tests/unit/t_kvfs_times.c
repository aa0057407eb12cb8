/* t_kvfs_times: the times the FUSE view keeps for values (fuse/kvfs_times.c):
 * an entry holds for the put time it was set on only, a newer setting
 * replaces it, drop forgets it, and 20,000 keys survive the table's growth
 * against a reference. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kvfs_times.h"
#include "testlib.h"

static bool get(struct kvfs_times *t, const char *k, uint64_t put, uint64_t *m, uint64_t *a)
{
	return kvfs_times_get_locked(t, k, strlen(k), put, m, a);
}

static void test_one_value(void)
{
	struct kvfs_times t = { 0 };
	uint64_t m = 0, a = 0;

	CHECK(!get(&t, "k", 1, &m, &a), "an empty table knows nothing");
	CHECK(kvfs_times_set_locked(&t, "k", 1, 100, 5, 6) == 0, "set");
	CHECK(get(&t, "k", 100, &m, &a) && m == 5 && a == 6, "got %llu %llu",
	      (unsigned long long)m, (unsigned long long)a);
	CHECK(!get(&t, "k", 101, &m, &a), "another put time: the value was replaced");
	CHECK(!get(&t, "kk", 100, &m, &a), "another key");
	/* a key that extends another is another key */
	CHECK(kvfs_times_set_locked(&t, "kk", 2, 100, 7, 8) == 0, "set kk");
	CHECK(get(&t, "kk", 100, &m, &a) && m == 7, "kk's own entry");
	CHECK(get(&t, "k", 100, &m, &a) && m == 5, "k keeps its entry");
	CHECK(kvfs_times_set_locked(&t, "k", 1, 200, 9, 10) == 0, "set again");
	CHECK(!get(&t, "k", 100, &m, &a), "the old put time is gone");
	CHECK(get(&t, "k", 200, &m, &a) && m == 9 && a == 10, "the new one holds");
	kvfs_times_drop_locked(&t, "k", 1);
	CHECK(!get(&t, "k", 200, &m, &a), "dropped");
	kvfs_times_drop_locked(&t, "nothing", 7);	/* no entry: no effect */
	CHECK(t.n == 1, "one entry left, not %zu", t.n);
	kvfs_times_free_locked(&t);
	CHECK(t.n == 0 && !t.b, "freed");
}

static void test_many(void)
{
	struct kvfs_times t = { 0 };
	char k[64];
	uint64_t m, a;
	int bad = 0;

	for (int i = 0; i < 20000; i++) {
		int l = snprintf(k, sizeof(k), "dir/%d/block_%d", i % 97, i);

		if (kvfs_times_set_locked(&t, k, (size_t)l, (uint64_t)i, (uint64_t)i * 3,
					  (uint64_t)i * 5))
			bad++;
	}
	CHECK(bad == 0 && t.n == 20000, "%d failed sets, %zu entries", bad, t.n);
	for (int i = 0; i < 20000; i += 2) {
		int l = snprintf(k, sizeof(k), "dir/%d/block_%d", i % 97, i);

		kvfs_times_drop_locked(&t, k, (size_t)l);
	}
	for (int i = 0; i < 20000; i++) {
		int l = snprintf(k, sizeof(k), "dir/%d/block_%d", i % 97, i);
		bool have = kvfs_times_get_locked(&t, k, (size_t)l, (uint64_t)i, &m, &a);

		if (have != (i % 2 == 1) || (have && (m != (uint64_t)i * 3 || a != (uint64_t)i * 5)))
			bad++;
	}
	CHECK(bad == 0 && t.n == 10000, "%d wrong lookups, %zu entries", bad, t.n);
	kvfs_times_free_locked(&t);
}

int main(void)
{
	test_one_value();
	test_many();
	return tl_done();
}

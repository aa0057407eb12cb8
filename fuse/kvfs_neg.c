/* kvfs_neg: the last name a lookup in a directory found absent
 * (kvfs_neg.h), kept as a hash and a deadline in the directory's node.
 */
#include <xxhash.h>

#include "clock.h"
#include "kvfs_neg.h"
#include "kvfs_node.h"

void kvfs_neg_note(struct kvfs *fs, struct kvfs_node *d, const char *raw, size_t len)
{
	uint64_t h = XXH3_64bits(raw, len);

	pthread_mutex_lock(&fs->lock);
	d->neg_hash = h;
	d->neg_until = clock_now_ms() + KVFS_NEG_MS;
	pthread_mutex_unlock(&fs->lock);
}

bool kvfs_neg_absent(struct kvfs *fs, struct kvfs_node *d, const char *raw, size_t len)
{
	uint64_t h = XXH3_64bits(raw, len);
	bool r;

	pthread_mutex_lock(&fs->lock);
	r = d->neg_hash == h && d->neg_until > clock_now_ms();
	pthread_mutex_unlock(&fs->lock);
	return r;
}

void kvfs_neg_forget(struct kvfs *fs, struct kvfs_node *d, const char *raw, size_t len)
{
	uint64_t h = XXH3_64bits(raw, len);

	pthread_mutex_lock(&fs->lock);
	if (d->neg_hash == h)
		d->neg_until = 0;
	pthread_mutex_unlock(&fs->lock);
}

/* kvfs_fs: the view's pool handle, opened lazily and reopened after the
 * master was unreachable (kvfs_fs.h).
 */
#include "clock.h"
#include "kvfs_fs.h"

struct kvp *kvfs_kvp(struct kvfs *fs, int *err)
{
	struct kvp *k;

	pthread_mutex_lock(&fs->kvp_lock);
	k = fs->kvp;
	if (!k) {
		uint64_t now = clock_now_ms();

		/* a master that is down is retried at most once a second, so
		 * that a busy `ls` does not hammer it */
		if (now >= fs->kvp_retry_ms) {
			int e = 0;

			/* the caller's whole configuration (every -c layer,
			 * environment and -o), never re-read from files */
			k = fs->kvp = kvp_open_conf(&fs->conf, &e);
			if (!k) {
				fs->kvp_retry_ms = now + 1000;
				*err = e ? e : KVP_ECONN;
			}
		} else {
			*err = KVP_ECONN;
		}
	}
	pthread_mutex_unlock(&fs->kvp_lock);
	return k;
}

/* kvfs_commit: the committer thread of a mount — the write-behind queue
 * of closed files and the queue of page-cache invalidations (kvfs_commit.h).
 *
 * Why behind the close: a small file costs a master round trip or two to
 * put, more than the FUSE requests that wrote it; a process that creates
 * thousands of them would wait for each. Queued values are put in batches
 * (one master round trip for many keys) while the writer goes on, and the
 * view serves them from memory meanwhile, so its own readers never miss
 * them. fsync waits for the put and reports its error.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "clock.h"
#include "kvfs_commit.h"
#include "kvfs_fh.h"
#include "kvfs_node.h"
#include "log.h"

#define COMMIT_BATCH 256		/* values per batch put */
#define COMMIT_BATCH_BYTES (16u << 20)
#define COMMIT_QUEUE_BYTES (64u << 20)	/* a writer waits beyond this */
#define COMMIT_QUEUE_ITEMS 8192
#define COMMIT_IDLE_MS 20		/* wake-up for invalidations queued under fs->lock */
/* A put waits this long for company: a writer creating files one after
 * another fills a batch meanwhile, and one master round trip stores them
 * all instead of each costing its own. */
#define COMMIT_LINGER_NS 1000000ull

struct citem {
	struct citem *next;
	struct kvfs_node *node;		/* holds a ref */
	struct kvfs_blob *blob;		/* the value; holds a ref */
	char *key;			/* the key it goes to (a rename may change it) */
	bool replace;
	uint64_t seq;			/* order of queueing */
	uint64_t queued_ns;		/* CLOCK_MONOTONIC */
	int rc;				/* KVP_E* after the put */
};

struct inval {
	struct inval *next;
	uint64_t ino;
};

struct kvfs_commit {
	pthread_mutex_t lock;		/* the queue; before fs->lock */
	pthread_cond_t wake;		/* the thread: work queued, or stop */
	pthread_cond_t done;		/* waiters: a batch ended, or room */
	struct citem *head, **tail;	/* not started */
	struct citem *running;		/* the batch being put */
	uint64_t running_min;		/* its first seq */
	uint64_t next_seq;
	size_t nitems, bytes;		/* queued and running */
	bool stop;
	pthread_t thread;

	pthread_mutex_t ilock;		/* invalidations; a leaf lock */
	struct inval *invals;

	struct kvfs_commit_stats st;	/* under lock */
	uint64_t failed_seen;		/* st.failed at the last kvfs_commit_wait_all */
};

int kvfs_store(struct kvfs *fs, const char *key, const void *buf, size_t len, bool replace)
{
	struct kvp_put_opts o = { .flags = replace ? KVP_PUT_UPSERT : 0 };
	struct kvp *k;
	int e = 0;

	k = kvfs_kvp(fs, &e);
	if (!k)
		return e;
	return kvp_put_opts(k, key, buf, len, &o);
}

/* Puts a batch of one mode: one master round trip for all of it. */
static void put_batch(struct kvfs *fs, struct citem **v, size_t n, bool replace)
{
	const char *keys[COMMIT_BATCH];
	const void *bufs[COMMIT_BATCH];
	size_t lens[COMMIT_BATCH];
	int res[COMMIT_BATCH];
	struct kvp_put_opts o = { .flags = replace ? KVP_PUT_UPSERT : 0 };
	struct kvp *k;
	int rc, e = 0;

	if (!n)
		return;
	for (size_t i = 0; i < n; i++) {
		keys[i] = v[i]->key;
		bufs[i] = v[i]->blob->data;
		lens[i] = v[i]->blob->len;
	}
	k = kvfs_kvp(fs, &e);
	rc = k ? kvp_batch_put_opts(k, n, keys, bufs, lens, &o, res) : e;
	for (size_t i = 0; i < n; i++)
		v[i]->rc = rc < 0 ? rc : res[i];
}

void kvfs_commit_times(struct kvfs *fs, struct kvfs_node *n, const char *key)
{
	uint64_t mt, at;
	struct kvp_stat st;
	struct kvp *k;
	int e = 0;

	pthread_mutex_lock(&fs->lock);
	mt = n->set_mtime_ns;
	at = n->set_atime_ns;
	n->set_mtime_ns = n->set_atime_ns = 0;
	pthread_mutex_unlock(&fs->lock);
	if (!mt && !at)
		return;
	/* times set before the put belong to the stored value, which is
	 * known by its put time */
	k = kvfs_kvp(fs, &e);
	if (!k || kvp_stat(k, key, &st) != 0)
		return;
	pthread_mutex_lock(&fs->lock);
	kvfs_times_set_locked(&fs->times, key, strlen(key), st.put_time_ns,
			      mt ? mt : st.put_time_ns, at ? at : st.put_time_ns);
	pthread_mutex_unlock(&fs->lock);
}

/* After the puts: the nodes show the stored values (or lose a failed one). */
static void finish_item(struct kvfs *fs, struct kvfs_commit *c, struct citem *it)
{
	struct kvfs_node *n = it->node;
	struct kvfs_blob *b = it->blob;
	size_t len = b->len;		/* b may go with our reference */
	bool mine;

	if (it->rc < 0)
		log_warn("kvfs: put of %zu bytes to '%s' failed: %s", b->len, it->key,
			 kvp_strerror(it->rc));
	pthread_mutex_lock(&fs->lock);
	mine = n->queued == b;
	if (mine) {
		n->queued = NULL;
		n->fresh_until = 0;
		if (it->rc == 0) {
			n->commit_sum = XXH3_64bits(b->data, b->len);
			n->commit_len = b->len;
			n->generation = 0;
			kvfs_memdirs_settle_locked(fs, n->raw, n->rawlen);
		} else {
			n->commit_err = kvp_to_errno(it->rc);
			n->set_mtime_ns = n->set_atime_ns = 0;
		}
	}
	kvfs_blob_put_locked(n, b);
	pthread_mutex_unlock(&fs->lock);
	if (mine && it->rc == 0)
		kvfs_commit_times(fs, n, it->key);
	pthread_mutex_lock(&c->lock);
	if (it->rc == 0)
		c->st.stored++;
	else
		c->st.failed++;
	c->nitems--;
	c->bytes -= len;
	pthread_mutex_unlock(&c->lock);
	kvfs_node_unref(fs, n);
	free(it->key);
	free(it);
}

static void run_invals(struct kvfs *fs, struct kvfs_commit *c)
{
	struct inval *l, *next;

	pthread_mutex_lock(&c->ilock);
	l = c->invals;
	c->invals = NULL;
	pthread_mutex_unlock(&c->ilock);
	for (; l; l = next) {
		struct kvfs_node *n;

		next = l->next;
		/* the kernel drops the pages (unmapping them from shared
		 * mappings) and the cached attributes; ENOENT: it had none.
		 * Not once the session ends: nothing is cached any more. */
		if (!fuse_session_exited(fs->se))
			fuse_lowlevel_notify_inval_inode(fs->se, l->ino, 0, 0);
		pthread_mutex_lock(&fs->lock);
		n = kvfs_node_by_ino_locked(fs, l->ino);
		if (n && n->inval_queued) {
			n->inval_queued = false;
			kvfs_node_maybe_free_locked(fs, n);
		}
		pthread_mutex_unlock(&fs->lock);
		free(l);
	}
}

static void *commit_thread(void *arg)
{
	struct kvfs *fs = arg;
	struct kvfs_commit *c = fs->commit;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct citem *v[COMMIT_BATCH], *plain[COMMIT_BATCH], *repl[COMMIT_BATCH];
		size_t n = 0, np = 0, nr = 0, bytes = 0;
		bool any_inval;

		pthread_mutex_lock(&c->ilock);
		any_inval = c->invals != NULL;
		pthread_mutex_unlock(&c->ilock);
		if (!c->head && !any_inval) {
			if (c->stop)
				break;
			clock_cond_wait_until_ns(&c->wake, &c->lock,
						 clock_now_ns() + COMMIT_IDLE_MS * 1000000ull);
			continue;
		}
		if (c->head && !c->stop && c->nitems < COMMIT_BATCH) {
			uint64_t age = clock_now_ns() - c->head->queued_ns;

			if (age < COMMIT_LINGER_NS) {
				clock_cond_wait_until_ns(&c->wake, &c->lock,
							 clock_now_ns() + COMMIT_LINGER_NS - age);
				continue;
			}
		}
		while (c->head && n < COMMIT_BATCH && (n == 0 || bytes + c->head->blob->len <=
							   COMMIT_BATCH_BYTES)) {
			struct citem *it = c->head;

			c->head = it->next;
			if (!c->head)
				c->tail = &c->head;
			if (!c->running)
				c->running_min = it->seq;
			it->next = c->running;
			c->running = it;
			bytes += it->blob->len;
			v[n++] = it;
		}
		if (n)
			c->st.batches++;
		pthread_mutex_unlock(&c->lock);

		for (size_t i = 0; i < n; i++) {
			if (v[i]->replace)
				repl[nr++] = v[i];
			else
				plain[np++] = v[i];
		}
		put_batch(fs, plain, np, false);
		put_batch(fs, repl, nr, true);
		for (size_t i = 0; i < n; i++)
			finish_item(fs, c, v[i]);
		pthread_mutex_lock(&c->lock);
		c->running = NULL;
		pthread_cond_broadcast(&c->done);
		pthread_mutex_unlock(&c->lock);

		/* after the waiters are free: the kernel may need a worker to
		 * finish a read before it can drop a page */
		run_invals(fs, c);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int kvfs_commit_start(struct kvfs *fs)
{
	struct kvfs_commit *c = calloc(1, sizeof(*c));
	pthread_condattr_t ca;
	sigset_t all, old;
	int rc;

	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->ilock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->wake, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&c->done, NULL);
	c->tail = &c->head;
	fs->commit = c;
	/* signals stay with the threads that handle them */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(&c->thread, NULL, commit_thread, fs);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		fs->commit = NULL;
		pthread_cond_destroy(&c->done);
		pthread_cond_destroy(&c->wake);
		pthread_mutex_destroy(&c->ilock);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return -rc;
	}
	return 0;
}

void kvfs_commit_stop(struct kvfs *fs)
{
	struct kvfs_commit *c = fs->commit;
	struct inval *l, *next;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL);
	for (l = c->invals; l; l = next) {
		next = l->next;
		free(l);
	}
	pthread_cond_destroy(&c->done);
	pthread_cond_destroy(&c->wake);
	pthread_mutex_destroy(&c->ilock);
	pthread_mutex_destroy(&c->lock);
	free(c);
	fs->commit = NULL;
}

int kvfs_commit_queue(struct kvfs *fs, struct kvfs_node *n, struct kvfs_blob *b, bool replace)
{
	struct kvfs_commit *c = fs->commit;
	struct citem *it = calloc(1, sizeof(*it));

	if (!it)
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	/* backpressure: a writer far ahead of the pool waits for it */
	while ((c->bytes + b->len > COMMIT_QUEUE_BYTES || c->nitems >= COMMIT_QUEUE_ITEMS) &&
	       c->nitems)
		pthread_cond_wait(&c->done, &c->lock);
	pthread_mutex_lock(&fs->lock);
	it->key = strdup(n->raw);
	if (!it->key) {
		pthread_mutex_unlock(&fs->lock);
		pthread_mutex_unlock(&c->lock);
		free(it);
		return -ENOMEM;
	}
	it->node = n;
	it->blob = b;
	it->replace = replace;
	it->queued_ns = clock_now_ns();
	n->refs++;
	n->queued = b;
	if (n->memdir)
		kvfs_memdir_clear_locked(fs, n);	/* an empty file has a value now */
	pthread_mutex_unlock(&fs->lock);
	it->seq = ++c->next_seq;
	*c->tail = it;
	c->tail = &it->next;
	c->nitems++;
	c->bytes += b->len;
	c->st.queued++;
	if (c->nitems == 1 || c->nitems >= COMMIT_BATCH)
		pthread_cond_signal(&c->wake);	/* else it is lingering anyway */
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static bool node_busy(struct kvfs *fs, struct kvfs_node *n)
{
	bool busy;

	pthread_mutex_lock(&fs->lock);
	busy = n->queued != NULL;
	pthread_mutex_unlock(&fs->lock);
	return busy;
}

int kvfs_commit_wait(struct kvfs *fs, struct kvfs_node *n)
{
	struct kvfs_commit *c = fs->commit;
	int err;

	pthread_mutex_lock(&c->lock);
	while (node_busy(fs, n))
		pthread_cond_wait(&c->done, &c->lock);
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_lock(&fs->lock);
	err = n->commit_err;
	n->commit_err = 0;
	pthread_mutex_unlock(&fs->lock);
	return err;
}

/* Whether every item queued up to seq is stored (or failed); c->lock held.
 * The queue is in seq order, the batch running holds the oldest ones. */
static bool done_upto(const struct kvfs_commit *c, uint64_t seq)
{
	return !(c->head && c->head->seq <= seq) && !(c->running && c->running_min <= seq);
}

int kvfs_commit_wait_all(struct kvfs *fs, bool report)
{
	struct kvfs_commit *c = fs->commit;
	uint64_t failed, upto;

	pthread_mutex_lock(&c->lock);
	/* what was queued before the call: a busy writer cannot keep us */
	upto = c->next_seq;
	while (!done_upto(c, upto))
		pthread_cond_wait(&c->done, &c->lock);
	failed = c->st.failed - c->failed_seen;
	if (report)
		c->failed_seen = c->st.failed;
	pthread_mutex_unlock(&c->lock);
	return failed ? EIO : 0;
}

bool kvfs_commit_take(struct kvfs *fs, struct kvfs_node *n, struct kvfs_blob **b, bool *replace)
{
	struct kvfs_commit *c = fs->commit;
	struct citem **pp, *it = NULL;

	pthread_mutex_lock(&c->lock);
	for (pp = &c->head; *pp; pp = &(*pp)->next) {
		if ((*pp)->node == n) {
			it = *pp;
			*pp = it->next;
			if (c->tail == &it->next)
				c->tail = pp;
			c->nitems--;
			c->bytes -= it->blob->len;
			break;
		}
	}
	if (!it) {
		while (node_busy(fs, n))
			pthread_cond_wait(&c->done, &c->lock);
		pthread_mutex_unlock(&c->lock);
		return false;
	}
	pthread_cond_broadcast(&c->done);	/* room */
	pthread_mutex_unlock(&c->lock);
	*b = it->blob;
	*replace = it->replace;
	kvfs_node_unref(fs, n);
	free(it->key);
	free(it);
	return true;
}

int kvfs_commit_inval(struct kvfs *fs, uint64_t ino)
{
	struct kvfs_commit *c = fs->commit;
	struct inval *l;

	if (!c)
		return -ENOENT;
	l = malloc(sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->ino = ino;
	pthread_mutex_lock(&c->ilock);
	l->next = c->invals;
	c->invals = l;
	pthread_mutex_unlock(&c->ilock);
	/* may miss a thread about to sleep: it wakes within COMMIT_IDLE_MS */
	pthread_cond_signal(&c->wake);
	return 0;
}

bool kvfs_commit_idle(struct kvfs *fs)
{
	struct kvfs_commit *c = fs->commit;
	bool idle;

	pthread_mutex_lock(&c->lock);
	idle = !c->head && !c->running;
	pthread_mutex_unlock(&c->lock);
	return idle;
}

void kvfs_commit_stats(struct kvfs *fs, struct kvfs_commit_stats *st)
{
	struct kvfs_commit *c = fs->commit;

	memset(st, 0, sizeof(*st));
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	*st = c->st;
	pthread_mutex_unlock(&c->lock);
}

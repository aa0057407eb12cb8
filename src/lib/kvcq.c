/* kvcq: batch calls run by worker threads, completions signalled through an
 * eventfd (kvpool.h "Completion queue"). A batch is copied at submission
 * (keys, pointer arrays, put options) so the caller's arrays may go at once;
 * only the value buffers are the caller's until the completion is drained.
 * The eventfd is readable exactly while the completion list is non-empty:
 * it is written once when the list becomes non-empty and read (reset) by
 * the drain that empties it, both under the queue's mutex.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "errors.h"
#include "kvcq.h"
#include "kvpool.h"

struct cq_batch {
	struct cq_batch *next;
	int op;				/* enum kvp_cq_op */
	uint64_t tag;
	size_t n;
	const char **keys;		/* into arena */
	void **bufs;			/* get, put: the caller's buffers */
	size_t *lens;			/* get: capacities; put: lengths */
	int flags;			/* remove */
	bool has_opts;			/* put */
	struct kvp_put_opts opts;	/* its strings point into arena */
	int status;
	int *ires;			/* put, exists, remove: the batch call's int results */
	int64_t *results;		/* handed to the caller in the kvp_cqe */
	char *arena;
};

struct kvp_cq {
	struct kvp *kvp;
	int efd;
	pthread_mutex_t lock;
	pthread_cond_t work;		/* a batch was queued, or stop */
	/* protected by lock: */
	struct cq_batch *sq_head, **sq_tail;	/* submitted, not started */
	struct cq_batch *cq_head, **cq_tail;	/* completed, not drained */
	size_t pending;			/* submitted, not drained */
	bool signalled;			/* efd holds a count */
	bool stop;
	unsigned nthreads;		/* started */
	pthread_t threads[];
};

static void batch_free(struct cq_batch *b)
{
	if (!b)
		return;
	free(b->keys);
	free(b->bufs);
	free(b->lens);
	free(b->ires);
	free(b->results);
	free(b->arena);
	free(b);
}

static void batch_run(struct kvp *kvp, struct cq_batch *b)
{
	const char *const *keys = b->keys;
	int rc;

	switch (b->op) {
	case KVP_CQ_GET:
		rc = kvp_batch_get_into(kvp, b->n, keys, b->bufs, b->lens, b->results);
		break;
	case KVP_CQ_PUT:
		rc = kvp_batch_put_opts(kvp, b->n, keys, (const void *const *)b->bufs, b->lens,
					b->has_opts ? &b->opts : NULL, b->ires);
		break;
	case KVP_CQ_EXISTS:
		rc = kvp_batch_exists(kvp, b->n, keys, b->ires);
		break;
	default:
		rc = kvp_batch_remove(kvp, b->n, keys, b->flags, b->ires);
		break;
	}
	b->status = rc < 0 ? rc : 0;
	for (size_t i = 0; i < b->n; i++) {
		if (rc < 0)
			b->results[i] = rc;
		else if (b->op != KVP_CQ_GET)
			b->results[i] = b->ires[i];
	}
}

/* Lock held. */
static void signal_locked(struct kvp_cq *cq)
{
	uint64_t one = 1;

	if (cq->signalled)
		return;
	/* A count of 1 on a fresh eventfd cannot fail but for EINTR. */
	while (write(cq->efd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
	cq->signalled = true;
}

/* Lock held. */
static void unsignal_locked(struct kvp_cq *cq)
{
	uint64_t v;

	if (!cq->signalled)
		return;
	while (read(cq->efd, &v, sizeof(v)) < 0 && errno == EINTR)
		;
	cq->signalled = false;
}

static void *worker(void *arg)
{
	struct kvp_cq *cq = arg;

	pthread_mutex_lock(&cq->lock);
	for (;;) {
		struct cq_batch *b;

		while (!cq->stop && !cq->sq_head)
			pthread_cond_wait(&cq->work, &cq->lock);
		if (cq->stop)
			break;
		b = cq->sq_head;
		cq->sq_head = b->next;
		if (!cq->sq_head)
			cq->sq_tail = &cq->sq_head;
		b->next = NULL;
		pthread_mutex_unlock(&cq->lock);

		batch_run(cq->kvp, b);

		pthread_mutex_lock(&cq->lock);
		*cq->cq_tail = b;
		cq->cq_tail = &b->next;
		signal_locked(cq);
	}
	pthread_mutex_unlock(&cq->lock);
	return NULL;
}

struct kvp_cq *kvp_cq_open(struct kvp *kvp, unsigned threads, int *err)
{
	struct kvp_cq *cq;
	int rc;

	if (!threads)
		threads = KVCQ_DEFAULT_THREADS;
	if (!kvp || threads > KVCQ_MAX_THREADS) {
		*err = KVP_EINVAL;
		return NULL;
	}
	cq = calloc(1, sizeof(*cq) + threads * sizeof(cq->threads[0]));
	if (!cq) {
		*err = KVP_ENOMEM;
		return NULL;
	}
	cq->kvp = kvp;
	cq->sq_tail = &cq->sq_head;
	cq->cq_tail = &cq->cq_head;
	cq->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (cq->efd < 0) {
		*err = err_from_errno(-errno);
		goto out_free;
	}
	pthread_mutex_init(&cq->lock, NULL);
	pthread_cond_init(&cq->work, NULL);
	for (; cq->nthreads < threads; cq->nthreads++) {
		rc = pthread_create(&cq->threads[cq->nthreads], NULL, worker, cq);
		if (rc) {
			*err = err_from_errno(-rc);
			kvp_cq_close(cq);
			return NULL;
		}
	}
	*err = 0;
	return cq;

out_free:
	free(cq);
	return NULL;
}

int kvp_cq_fd(const struct kvp_cq *cq)
{
	return cq->efd;
}

/* A batch of n copied keys (and, with bufs, pointer arrays). NULL with
 * *rc set. */
static struct cq_batch *batch_new(int op, size_t n, const char *const *keys,
				  void *const *bufs, const size_t *lens, uint64_t tag,
				  const struct kvp_put_opts *o, int *rc)
{
	struct cq_batch *b;
	size_t total = 0, extra = 0, off = 0;

	*rc = KVP_EINVAL;
	if (!n || !keys || (op == KVP_CQ_GET || op == KVP_CQ_PUT) != (bufs && lens))
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (!keys[i])
			return NULL;
		total += strlen(keys[i]) + 1;
	}
	if (o) {
		extra += o->preferred_segment ? strlen(o->preferred_segment) + 1 : 0;
		extra += o->pred ? strlen(o->pred) + 1 : 0;
	}
	*rc = KVP_ENOMEM;
	b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->op = op;
	b->tag = tag;
	b->n = n;
	b->keys = calloc(n, sizeof(*b->keys));
	b->results = calloc(n, sizeof(*b->results));
	b->arena = malloc(total + extra + 1);
	if (!b->keys || !b->results || !b->arena)
		goto out_free;
	if (op != KVP_CQ_GET && !(b->ires = calloc(n, sizeof(*b->ires))))
		goto out_free;
	if (bufs) {
		b->bufs = malloc(n * sizeof(*b->bufs));
		b->lens = malloc(n * sizeof(*b->lens));
		if (!b->bufs || !b->lens)
			goto out_free;
		memcpy(b->bufs, bufs, n * sizeof(*b->bufs));
		memcpy(b->lens, lens, n * sizeof(*b->lens));
	}
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(keys[i]) + 1;

		memcpy(b->arena + off, keys[i], l);
		b->keys[i] = b->arena + off;
		off += l;
	}
	if (o) {
		b->has_opts = true;
		b->opts = *o;
		if (o->preferred_segment) {
			b->opts.preferred_segment = strcpy(b->arena + off, o->preferred_segment);
			off += strlen(o->preferred_segment) + 1;
		}
		if (o->pred)
			b->opts.pred = strcpy(b->arena + off, o->pred);
	}
	*rc = 0;
	return b;

out_free:
	batch_free(b);
	return NULL;
}

static int submit(struct kvp_cq *cq, struct cq_batch *b)
{
	pthread_mutex_lock(&cq->lock);
	if (cq->stop) {
		pthread_mutex_unlock(&cq->lock);
		batch_free(b);
		return KVP_EINVAL;
	}
	*cq->sq_tail = b;
	cq->sq_tail = &b->next;
	cq->pending++;
	pthread_cond_signal(&cq->work);
	pthread_mutex_unlock(&cq->lock);
	return 0;
}

int kvp_cq_submit_get(struct kvp_cq *cq, size_t n, const char *const *keys,
		      void *const *bufs, const size_t *caps, uint64_t tag)
{
	int rc;
	struct cq_batch *b = batch_new(KVP_CQ_GET, n, keys, bufs, caps, tag, NULL, &rc);

	return b ? submit(cq, b) : rc;
}

int kvp_cq_submit_put(struct kvp_cq *cq, size_t n, const char *const *keys,
		      const void *const *bufs, const size_t *lens,
		      const struct kvp_put_opts *o, uint64_t tag)
{
	int rc;
	struct cq_batch *b = batch_new(KVP_CQ_PUT, n, keys, (void *const *)bufs, lens, tag, o,
				       &rc);

	return b ? submit(cq, b) : rc;
}

int kvp_cq_submit_exists(struct kvp_cq *cq, size_t n, const char *const *keys, uint64_t tag)
{
	int rc;
	struct cq_batch *b = batch_new(KVP_CQ_EXISTS, n, keys, NULL, NULL, tag, NULL, &rc);

	return b ? submit(cq, b) : rc;
}

int kvp_cq_submit_remove(struct kvp_cq *cq, size_t n, const char *const *keys, int flags,
			 uint64_t tag)
{
	int rc;
	struct cq_batch *b = batch_new(KVP_CQ_REMOVE, n, keys, NULL, NULL, tag, NULL, &rc);

	if (!b)
		return rc;
	b->flags = flags;
	return submit(cq, b);
}

size_t kvp_cq_drain(struct kvp_cq *cq, struct kvp_cqe *out, size_t max)
{
	size_t got = 0;

	pthread_mutex_lock(&cq->lock);
	while (got < max && cq->cq_head) {
		struct cq_batch *b = cq->cq_head;

		cq->cq_head = b->next;
		out[got].tag = b->tag;
		out[got].op = b->op;
		out[got].status = b->status;
		out[got].n = b->n;
		out[got].results = b->results;
		b->results = NULL;
		batch_free(b);
		got++;
	}
	if (!cq->cq_head) {
		cq->cq_tail = &cq->cq_head;
		unsignal_locked(cq);
	}
	cq->pending -= got;
	pthread_mutex_unlock(&cq->lock);
	return got;
}

size_t kvp_cq_pending(struct kvp_cq *cq)
{
	size_t n;

	pthread_mutex_lock(&cq->lock);
	n = cq->pending;
	pthread_mutex_unlock(&cq->lock);
	return n;
}

static void list_free(struct cq_batch *b)
{
	while (b) {
		struct cq_batch *next = b->next;

		batch_free(b);
		b = next;
	}
}

void kvp_cq_close(struct kvp_cq *cq)
{
	struct cq_batch *queued;

	if (!cq)
		return;
	pthread_mutex_lock(&cq->lock);
	cq->stop = true;
	queued = cq->sq_head;		/* cancelled: never started */
	cq->sq_head = NULL;
	cq->sq_tail = &cq->sq_head;
	pthread_cond_broadcast(&cq->work);
	pthread_mutex_unlock(&cq->lock);
	for (unsigned i = 0; i < cq->nthreads; i++)
		pthread_join(cq->threads[i], NULL);
	list_free(queued);
	list_free(cq->cq_head);
	close(cq->efd);
	pthread_cond_destroy(&cq->work);
	pthread_mutex_destroy(&cq->lock);
	free(cq);
}

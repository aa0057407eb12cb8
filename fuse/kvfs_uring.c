/* kvfs_uring: FUSE over io_uring (kvfs_uring.h). The ABI below is the
 * kernel's (include/uapi/linux/fuse.h 7.42, fs/fuse/dev_uring.c), defined
 * here because Debian's linux/fuse.h predates it. Every length the kernel
 * writes into an entry is checked against the entry's buffers before use.
 *
 * One entry per thread: the thread that got a request is the one that
 * commits its reply, so a request whose handler waits (a lookup settling
 * a close, a commit wait) holds only its own entry while the queue's other
 * threads go on. A reply made on another thread (later, or while the
 * handler still runs) is copied into the entry and handed to its thread.
 */
#include <errno.h>
#include <liburing.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "kvfs_uring.h"
#include "log.h"

#define URING_CMD_REGISTER 1		/* FUSE_IO_URING_CMD_REGISTER */
#define URING_CMD_COMMIT_AND_FETCH 2	/* FUSE_IO_URING_CMD_COMMIT_AND_FETCH */
#define URING_IN_OUT_SZ 128		/* FUSE_URING_IN_OUT_HEADER_SZ */
#define URING_OP_IN_SZ 128		/* FUSE_URING_OP_IN_OUT_SZ */
#define URING_PER_CPU 4			/* threads (entries) per queue, */
#define URING_PER_CPU_MANY 2		/* on machines of over 32 CPUs */
#define URING_MAX_QUEUES 1024
#define PAY_OFF 4096			/* the payload's offset in an entry's buffer */
/* Payload areas faulted in before REGISTER, at most this much in all: a
 * first 1 MiB read reply into untouched pages took 0.55-0.8 ms, nearly
 * all page faults, against 0.13 ms into touched ones; the kernel
 * reuses the entry that finished last, so on a machine with more entries
 * than this the ones touched by use are the ones that matter. */
#define PREFAULT_MAX (32u << 20)
#define UD_CMD 1			/* user_data of the FUSE commands */
#define UD_WAKE 2			/* of kvfs_uring_stop's NOP */
#define REGISTER_TRIES 1000		/* -EAGAIN: the connection is not initialized yet */

struct uring_ent_in_out {		/* struct fuse_uring_ent_in_out */
	uint64_t flags;
	uint64_t commit_id;
	uint32_t payload_sz;
	uint32_t padding;
	uint64_t reserved;
};

struct uring_req_header {		/* struct fuse_uring_req_header */
	char in_out[URING_IN_OUT_SZ];	/* fuse_in_header in, fuse_out_header out */
	char op_in[URING_OP_IN_SZ];	/* the request's first argument */
	struct uring_ent_in_out ring_ent_in_out;
};

struct uring_cmd_req {			/* struct fuse_uring_cmd_req, in sqe->cmd */
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};

_Static_assert(sizeof(struct uring_req_header) == 288, "fuse_uring_req_header");
_Static_assert(sizeof(struct uring_cmd_req) == 24, "fuse_uring_cmd_req");
_Static_assert(sizeof(struct fuse_in_header) + URING_OP_IN_SZ <= PAY_OFF, "room");

struct kvfs_uring;

struct uent {
	struct kvfs_uring *u;
	unsigned qid;
	pthread_t thread;
	bool started;
	bool ring_ok;
	struct io_uring ring;
	pthread_mutex_t sq_lock;	/* the SQ: this thread and kvfs_uring_stop */
	struct uring_req_header hdr;
	struct iovec iov[2];		/* what REGISTER hands the kernel */
	char *buf;			/* PAY_OFF + payload: request rebuilt, payload */
	char *side;			/* a reply made while the request runs */
	size_t side_len;
	/* hand-off of the reply, under lock */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	_Atomic uint64_t unique;	/* the request in flight; 0 none */
	bool running;			/* its handler runs (on this entry's thread) */
	bool in_payload;		/* and its arguments fill the payload area */
	bool replied;
};

struct kvfs_uring {
	struct kvfs *fs;
	int fd;				/* the session's /dev/fuse */
	size_t payload;
	unsigned nq, per_q, n;
	pthread_mutex_t go_lock;
	pthread_cond_t go_cond;
	int go;				/* 0 wait, 1 register, -1 exit */
	atomic_bool stop;
	atomic_bool refused;		/* a REGISTER failed: /dev/fuse serves */
	_Atomic uint64_t served;
	struct uent ents[];
};

static __thread struct uent *cur;	/* the entry this thread serves */

int kvfs_uring_mode(const char *s)
{
	if (!s[0] || !strcmp(s, "auto"))
		return KVFS_URING_AUTO;
	if (!strcmp(s, "on"))
		return KVFS_URING_ON;
	return !strcmp(s, "off") ? KVFS_URING_OFF : -1;
}

bool kvfs_uring_enabled(void)
{
	char c = 0;
	FILE *f = fopen("/sys/module/fuse/parameters/enable_uring", "re");

	if (!f)
		return false;
	if (fread(&c, 1, 1, f) != 1)
		c = 0;
	fclose(f);
	return c == 'Y' || c == '1';
}

/* The kernel's num_possible_cpus(): one queue each, all of them needed. */
static unsigned possible_cpus(void)
{
	char line[4096];
	unsigned last = 0;
	FILE *f = fopen("/sys/devices/system/cpu/possible", "re");

	if (f && fgets(line, sizeof(line), f)) {
		for (char *p = line; *p;) {
			char *e;
			unsigned long v = strtoul(p, &e, 10);

			if (e == p)
				break;
			last = v > last ? (unsigned)v : last;
			p = *e ? e + 1 : e;
		}
		fclose(f);
		return last + 1;
	}
	if (f)
		fclose(f);
	return (unsigned)get_nprocs_conf();
}

int kvfs_uring_arg0(const void *in_out, uint32_t payload_sz, uint64_t commit_id,
		    size_t max_payload)
{
	struct fuse_in_header ih;
	size_t args;

	memcpy(&ih, in_out, sizeof(ih));
	if (ih.len < sizeof(ih) || payload_sz > max_payload || ih.unique != commit_id ||
	    !ih.unique)
		return -EINVAL;
	args = ih.len - sizeof(ih);
	if (args < payload_sz || args - payload_sz > URING_OP_IN_SZ)
		return -EINVAL;
	return (int)(args - payload_sz);
}

/* Queues one FUSE command (REGISTER, or COMMIT_AND_FETCH of commit_id). */
static int ent_cmd(struct uent *e, uint32_t op, uint64_t commit_id)
{
	struct io_uring_sqe *sqe;
	struct uring_cmd_req *r;
	int rc;

	pthread_mutex_lock(&e->sq_lock);
	sqe = io_uring_get_sqe(&e->ring);
	if (!sqe) {
		pthread_mutex_unlock(&e->sq_lock);
		return -EBUSY;
	}
	memset(sqe, 0, 128);		/* SQE128: the command area too */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = e->u->fd;
	sqe->cmd_op = op;
	sqe->addr = (uintptr_t)e->iov;
	sqe->len = 2;
	sqe->user_data = UD_CMD;
	r = (struct uring_cmd_req *)sqe->cmd;
	r->commit_id = commit_id;
	r->qid = (uint16_t)e->qid;
	do
		rc = io_uring_submit(&e->ring);
	while (rc == -EINTR);
	pthread_mutex_unlock(&e->sq_lock);
	return rc < 0 ? rc : 0;
}

/* An out header with no payload: an error reply made here. */
static void set_error(struct uent *e, uint64_t unique, int err)
{
	struct fuse_out_header oh = { .len = sizeof(oh), .error = -err, .unique = unique };

	memcpy(e->hdr.in_out, &oh, sizeof(oh));
	e->hdr.ring_ent_in_out.payload_sz = 0;
}

/* Ops that get no reply (libfuse answers none): never over the ring in
 * 6.14-6.18, but an entry must not wait for one. */
static bool no_reply(uint32_t opcode)
{
	return opcode == FUSE_FORGET || opcode == FUSE_BATCH_FORGET ||
	       opcode == FUSE_INTERRUPT || opcode == FUSE_NOTIFY_REPLY;
}

/* One request that came into e: rebuilt as /dev/fuse would have given it,
 * served by libfuse, its reply committed (which also re-arms e). */
static int ent_serve(struct uent *e)
{
	struct kvfs_uring *u = e->u;
	struct fuse_in_header ih;
	uint64_t commit_id = e->hdr.ring_ent_in_out.commit_id;
	uint32_t psz = e->hdr.ring_ent_in_out.payload_sz, arg0;
	char *msg;
	int rc;

	memcpy(&ih, e->hdr.in_out, sizeof(ih));
	rc = kvfs_uring_arg0(e->hdr.in_out, psz, commit_id, u->payload);
	if (rc < 0) {
		log_warn("kvfs: io_uring request %llu with bad lengths (len %u, payload %u)",
			 (unsigned long long)commit_id, ih.len, psz);
		set_error(e, commit_id, EIO);
		return ent_cmd(e, URING_CMD_COMMIT_AND_FETCH, commit_id);
	}
	/* header and first argument right before the payload: one message */
	arg0 = (uint32_t)rc;
	msg = e->buf + PAY_OFF - arg0 - sizeof(ih);
	memcpy(msg, &ih, sizeof(ih));
	memcpy(msg + sizeof(ih), e->hdr.op_in, arg0);

	pthread_mutex_lock(&e->lock);
	e->replied = false;
	e->running = true;
	e->in_payload = psz > 0;
	e->side_len = 0;
	atomic_store(&e->unique, ih.unique);
	pthread_mutex_unlock(&e->lock);
	atomic_fetch_add_explicit(&u->served, 1, memory_order_relaxed);

	fuse_session_process_buf(u->fs->se, &(struct fuse_buf){ .mem = msg, .size = ih.len });

	pthread_mutex_lock(&e->lock);
	e->running = false;
	if (e->replied && e->side_len) {	/* the handler is done with the payload */
		memcpy(e->buf + PAY_OFF, e->side, e->side_len);
		e->side_len = 0;
	}
	while (!e->replied && !no_reply(ih.opcode) && !atomic_load(&u->stop))
		pthread_cond_wait(&e->cond, &e->lock);
	if (!e->replied)
		set_error(e, ih.unique, ENOSYS);
	atomic_store(&e->unique, 0);
	pthread_mutex_unlock(&e->lock);
	if (atomic_load(&u->stop))
		return -ECANCELED;
	return ent_cmd(e, URING_CMD_COMMIT_AND_FETCH, commit_id);
}

static void *ent_thread(void *arg)
{
	struct uent *e = arg;
	struct kvfs_uring *u = e->u;
	int tries = 0, go, rc;
	cpu_set_t set;

	cur = e;
	CPU_ZERO(&set);
	CPU_SET(e->qid, &set);
	/* an offline CPU sends nothing, but its queue must exist all the same */
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	pthread_mutex_lock(&u->go_lock);
	while (!u->go)
		pthread_cond_wait(&u->go_cond, &u->go_lock);
	go = u->go;
	pthread_mutex_unlock(&u->go_lock);
	if (go < 0)
		return NULL;
	/* on this entry's CPU (its NUMA node), before the first request */
	if ((size_t)(e - u->ents + 1) * u->payload <= PREFAULT_MAX)
		memset(e->buf + PAY_OFF, 0, u->payload);
	rc = ent_cmd(e, URING_CMD_REGISTER, 0);
	while (rc == 0) {
		struct io_uring_cqe *cqe;
		uint64_t ud;
		int res;

		rc = io_uring_wait_cqe(&e->ring, &cqe);
		if (rc == -EINTR) {
			rc = 0;
			continue;
		}
		if (rc < 0)
			break;
		res = cqe->res;
		ud = cqe->user_data;
		io_uring_cqe_seen(&e->ring, cqe);
		if (atomic_load(&u->stop))
			break;
		if (ud != UD_CMD)
			continue;
		if (res == -EAGAIN && ++tries < REGISTER_TRIES) {
			usleep(1000);	/* REGISTER before INIT is through */
			rc = ent_cmd(e, URING_CMD_REGISTER, 0);
			continue;
		}
		if (res < 0) {
			/* -ENOTCONN, -ECONNABORTED: the connection is gone; a
			 * failed REGISTER turns the ring off for good */
			if (res != -ENOTCONN && res != -ECONNABORTED &&
			    !atomic_exchange(&u->refused, true))
				log_warn("kvfs: io_uring queue %u: %s; requests go through "
					 "/dev/fuse", e->qid, strerror(-res));
			break;
		}
		rc = ent_serve(e);
	}
	/* a command that could not be queued leaves a request, or the
	 * whole ring, waiting until the connection ends */
	if (rc < 0 && rc != -ECANCELED && !atomic_load(&u->stop))
		log_err("kvfs: io_uring queue %u: %s", e->qid, strerror(-rc));
	return NULL;
}

static struct uent *find_ent(struct kvfs_uring *u, uint64_t unique)
{
	if (cur && cur->u == u && atomic_load(&cur->unique) == unique)
		return cur;
	for (unsigned i = 0; i < u->n; i++)
		if (atomic_load(&u->ents[i].unique) == unique)
			return &u->ents[i];
	return NULL;
}

bool kvfs_uring_reply(struct kvfs *fs, const struct iovec *iov, int count, ssize_t *res)
{
	struct kvfs_uring *u = __atomic_load_n(&fs->uring, __ATOMIC_ACQUIRE);
	struct fuse_out_header oh;
	struct uent *e;
	size_t total = 0, n, off = 0;
	char *dst;

	if (!u || count < 1 || iov[0].iov_len < sizeof(oh))
		return false;
	memcpy(&oh, iov[0].iov_base, sizeof(oh));
	if (!oh.unique)
		return false;	/* a notification: /dev/fuse only */
	e = find_ent(u, oh.unique);
	if (!e)
		return false;
	for (int i = 0; i < count; i++)
		total += iov[i].iov_len;
	pthread_mutex_lock(&e->lock);
	if (atomic_load(&e->unique) != oh.unique || e->replied) {
		pthread_mutex_unlock(&e->lock);
		return false;
	}
	n = total - sizeof(oh);
	if (n > u->payload) {
		log_warn("kvfs: reply of %zu bytes to request %llu is over the ring's %zu", n,
			 (unsigned long long)oh.unique, u->payload);
		set_error(e, oh.unique, EIO);
		n = 0;
	} else {
		oh.len = (uint32_t)total;
		memcpy(e->hdr.in_out, &oh, sizeof(oh));
		e->hdr.ring_ent_in_out.payload_sz = (uint32_t)n;
	}
	/* the payload area still holds the request's arguments while its
	 * handler runs: park the reply until it returns */
	dst = e->running && e->in_payload && n ? e->side : e->buf + PAY_OFF;
	if (dst == e->side)
		e->side_len = n;
	for (int i = 0; i < count && n; i++) {
		size_t skip = i == 0 ? sizeof(oh) : 0, l = iov[i].iov_len - skip;
		const char *src = (const char *)iov[i].iov_base + skip;

		if (src != dst + off)	/* else made in place (kvfs_uring_buf) */
			memmove(dst + off, src, l);
		off += l;
	}
	e->replied = true;
	pthread_cond_signal(&e->cond);
	pthread_mutex_unlock(&e->lock);
	*res = (ssize_t)total;
	return true;
}

void *kvfs_uring_buf(size_t len)
{
	struct uent *e = cur;

	if (!e || !e->running || e->in_payload || len > e->u->payload)
		return NULL;
	return e->buf + PAY_OFF;
}

static void ent_free(struct uent *e)
{
	if (e->ring_ok)
		io_uring_queue_exit(&e->ring);
	free(e->buf);
	free(e->side);
	pthread_cond_destroy(&e->cond);
	pthread_mutex_destroy(&e->lock);
	pthread_mutex_destroy(&e->sq_lock);
}

static void uring_free(struct kvfs_uring *u)
{
	for (unsigned i = 0; i < u->n; i++)
		ent_free(&u->ents[i]);
	pthread_cond_destroy(&u->go_cond);
	pthread_mutex_destroy(&u->go_lock);
	free(u);
}

static int ent_init(struct kvfs_uring *u, struct uent *e, unsigned qid)
{
	struct io_uring_params p = { .flags = IORING_SETUP_SQE128 };
	int rc;

	e->u = u;
	e->qid = qid;
	pthread_mutex_init(&e->sq_lock, NULL);
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->cond, NULL);
	/* the kernel copies into these pages, it does not pin them; the
	 * payload is faulted in by the entry's thread (PREFAULT_MAX) */
	e->buf = malloc(PAY_OFF + u->payload);
	e->side = malloc(u->payload);
	if (!e->buf || !e->side)
		return -ENOMEM;
	e->iov[0] = (struct iovec){ .iov_base = &e->hdr, .iov_len = sizeof(e->hdr) };
	e->iov[1] = (struct iovec){ .iov_base = e->buf + PAY_OFF, .iov_len = u->payload };
	rc = io_uring_queue_init_params(4, &e->ring, &p);
	if (rc < 0)
		return rc;
	e->ring_ok = true;
	return 0;
}

/* Lets threads blocked anywhere see u->stop. */
static void wake_all(struct kvfs_uring *u)
{
	pthread_mutex_lock(&u->go_lock);
	if (!u->go)
		u->go = -1;
	pthread_cond_broadcast(&u->go_cond);
	pthread_mutex_unlock(&u->go_lock);
	for (unsigned i = 0; i < u->n; i++) {
		struct uent *e = &u->ents[i];
		struct io_uring_sqe *sqe;

		pthread_mutex_lock(&e->lock);
		pthread_cond_broadcast(&e->cond);
		pthread_mutex_unlock(&e->lock);
		if (!e->ring_ok)
			continue;
		pthread_mutex_lock(&e->sq_lock);
		sqe = io_uring_get_sqe(&e->ring);
		if (sqe) {
			io_uring_prep_nop(sqe);
			sqe->user_data = UD_WAKE;
			io_uring_submit(&e->ring);
		}
		pthread_mutex_unlock(&e->sq_lock);
	}
}

static void uring_join(struct kvfs_uring *u)
{
	atomic_store(&u->stop, true);
	wake_all(u);
	for (unsigned i = 0; i < u->n; i++)
		if (u->ents[i].started)
			pthread_join(u->ents[i].thread, NULL);
}

int kvfs_uring_prepare(struct kvfs *fs, uint32_t max_write, uint32_t max_pages)
{
	long page = sysconf(_SC_PAGESIZE);
	unsigned nq = possible_cpus(), per_q;
	struct kvfs_uring *u;
	sigset_t all, old;
	size_t payload;
	int rc = 0;

	if (fs->uring)
		return -EALREADY;
	if (nq == 0 || nq > URING_MAX_QUEUES)
		return -ERANGE;
	/* the kernel's max_payload_sz: FUSE_MIN_READ_BUFFER, max_write, and
	 * max_pages pages (32 when the reply leaves it out) */
	payload = 8192;
	payload = max_write > payload ? max_write : payload;
	if ((size_t)(max_pages > 32 ? max_pages : 32) * (size_t)page > payload)
		payload = (size_t)(max_pages > 32 ? max_pages : 32) * (size_t)page;
	/* more than one per queue: a handler that waits (a lookup settling
	 * a close) must not hold up the requests behind it on its CPU */
	per_q = nq > 32 ? URING_PER_CPU_MANY : URING_PER_CPU;
	u = calloc(1, sizeof(*u) + (size_t)nq * per_q * sizeof(struct uent));
	if (!u)
		return -ENOMEM;
	u->fs = fs;
	u->fd = fuse_session_fd(fs->se);
	u->payload = payload;
	u->nq = nq;
	u->per_q = per_q;
	u->n = nq * per_q;
	pthread_mutex_init(&u->go_lock, NULL);
	pthread_cond_init(&u->go_cond, NULL);
	for (unsigned i = 0; i < u->n && !rc; i++)
		rc = ent_init(u, &u->ents[i], i / per_q);
	/* the process's signals stay with its own threads */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (unsigned i = 0; i < u->n && !rc; i++) {
		rc = -pthread_create(&u->ents[i].thread, NULL, ent_thread, &u->ents[i]);
		u->ents[i].started = rc == 0;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		uring_join(u);
		uring_free(u);
		return rc;
	}
	/* other threads read it in kvfs_uring_reply */
	__atomic_store_n(&fs->uring, u, __ATOMIC_RELEASE);
	return 0;
}

void kvfs_uring_go(struct kvfs *fs, bool ok)
{
	struct kvfs_uring *u = fs->uring;

	if (!u)
		return;
	pthread_mutex_lock(&u->go_lock);
	u->go = ok ? 1 : -1;
	pthread_cond_broadcast(&u->go_cond);
	pthread_mutex_unlock(&u->go_lock);
	if (ok)
		log_info("kvfs: FUSE requests go over io_uring (%u queues, %u threads each)",
			 u->nq, u->per_q);
	else
		atomic_store(&u->refused, true);
}

bool kvfs_uring_served(struct kvfs *fs, uint64_t *n)
{
	struct kvfs_uring *u = __atomic_load_n(&fs->uring, __ATOMIC_ACQUIRE);

	if (!u || atomic_load(&u->refused))
		return false;
	*n = atomic_load(&u->served);
	return true;
}

void kvfs_uring_stop(struct kvfs *fs)
{
	struct kvfs_uring *u = fs->uring;

	if (!u)
		return;
	/* the rings go before the session's fd: a command still registered
	 * holds /dev/fuse open, and closing the rings cancels it */
	uring_join(u);
	uring_free(u);
	fs->uring = NULL;
}

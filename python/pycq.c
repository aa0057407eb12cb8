/* pycq: CompletionQueue(store, threads=4) — batches submitted without
 * blocking, completions drained when event_fd() polls readable.
 *   submit_get(keys, buffers) / submit_set(keys, buffers) /
 *   submit_exists(keys) / submit_delete(keys) -> tag (1, 2, ...)
 *   drain() -> [(tag, op, status, [per-key results])]
 *   event_fd() -> int; close()
 * Keys take the store's tenant prefix, as every store call. buffers: objects
 * with the buffer protocol (memoryview, bytearray, numpy arrays), C-contiguous,
 * writable for a get; their length is the value length (set) or the capacity
 * (get). The results are libkvpool's (kvp_cqe): get -> value length or KVP_E*,
 * set and delete -> 0 or KVP_E*, exists -> 1/0/KVP_E*. A batch that was
 * pending when the queue closed under it (the store's close()) completes at
 * the next drain with status KVP_ECONN.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "kvpool.h"
#include "pyconv.h"
#include "pycq.h"
#include "pystore.h"

#define DRAIN_MAX 256

struct pycq {
	PyObject_HEAD
	struct store *store;		/* strong reference */
	struct kvp_cq *cq;		/* see pycq.h: guarded by store->lock */
	struct pycq *next;		/* in store->cqs, protected by store->lock (write) */
	bool linked;			/* protected by store->lock (write) */
	int fd;				/* our dup of the queue's eventfd; -1 after close */
	pid_t owner;			/* the process that opened it */
	/* GIL: tag -> (op, n, capsule of exported buffers or None) */
	PyObject *pending;
	uint64_t next_tag;		/* GIL */
};

/* The exported buffers of one batch, released when the capsule goes. */
struct views {
	size_t n;
	Py_buffer v[];
};

static void views_release(PyObject *cap)
{
	struct views *vs = PyCapsule_GetPointer(cap, "kvpool.cq.views");

	if (!vs)
		return;
	for (size_t i = 0; i < vs->n; i++)
		PyBuffer_Release(&vs->v[i]);
	free(vs);
}

/* Store lock write-held. */
static void unlink_locked(struct pycq *pc)
{
	if (!pc->linked)
		return;
	for (struct pycq **pp = &pc->store->cqs; *pp; pp = &(*pp)->next)
		if (*pp == pc) {
			*pp = pc->next;
			break;
		}
	pc->linked = false;
	pc->next = NULL;
}

void pycq_store_closing(struct store *s)
{
	while (s->cqs) {
		struct pycq *pc = s->cqs;
		uint64_t one = 1;

		unlink_locked(pc);
		kvp_cq_close(pc->cq);
		pc->cq = NULL;
		/* Wakes a poller: its pending batches now complete as failed.
		 * A failed write means a count is there already. */
		if (pc->fd >= 0) {
			ssize_t w = write(pc->fd, &one, sizeof(one));

			(void)w;
		}
	}
}

static int pycq_init(struct pycq *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "store", "threads", NULL };
	PyObject *so;
	unsigned threads = 4;
	struct store *s;
	int rc = KVP_EINVAL, fd = -1;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|I:CompletionQueue", kwlist, &store_type,
					 &so, &threads))
		return -1;
	if (self->store) {
		PyErr_SetString(PyExc_RuntimeError, "CompletionQueue already initialised");
		return -1;
	}
	if (!self->pending && !(self->pending = PyDict_New()))
		return -1;
	s = (struct store *)so;
	Py_BEGIN_ALLOW_THREADS
	if (s->owner == getpid()) {
		pthread_rwlock_wrlock(&s->lock);
		if (s->kvp) {
			self->cq = kvp_cq_open(s->kvp, threads, &rc);
			if (self->cq) {
				fd = fcntl(kvp_cq_fd(self->cq), F_DUPFD_CLOEXEC, 0);
				if (fd < 0) {
					kvp_cq_close(self->cq);
					self->cq = NULL;
					rc = KVP_ENOMEM;
				} else {
					self->next = s->cqs;
					s->cqs = self;
					self->linked = true;
				}
			}
		}
		pthread_rwlock_unlock(&s->lock);
	}
	Py_END_ALLOW_THREADS
	if (!self->cq) {
		PyErr_Format(PyExc_RuntimeError, "CompletionQueue: %s%s", kvp_strerror(rc),
			     rc == KVP_EINVAL ? " (is the store set up?)" : "");
		return -1;
	}
	Py_INCREF(so);
	self->store = s;
	self->fd = fd;
	self->owner = getpid();
	self->next_tag = 1;
	return 0;
}

static PyObject *pycq_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	struct pycq *self = (struct pycq *)type->tp_alloc(type, 0);

	if (self)
		self->fd = -1;
	return (PyObject *)self;
}

/* Closes the queue (waits for running batches, cancels queued ones). */
static void cq_shut(struct pycq *self)
{
	struct store *s = self->store;

	if (!s)
		return;
	if (self->owner != getpid()) {
		/* A forked child: the workers are the parent's. */
		self->cq = NULL;
		self->linked = false;
	} else {
		Py_BEGIN_ALLOW_THREADS
		pthread_rwlock_wrlock(&s->lock);
		unlink_locked(self);
		kvp_cq_close(self->cq);
		self->cq = NULL;
		pthread_rwlock_unlock(&s->lock);
		Py_END_ALLOW_THREADS
	}
	if (self->fd >= 0)
		close(self->fd);
	self->fd = -1;
}

static PyObject *pycq_close(struct pycq *self, PyObject *unused)
{
	cq_shut(self);
	if (self->pending)
		PyDict_Clear(self->pending);	/* nothing runs: the buffers go back */
	Py_RETURN_NONE;
}

static void pycq_dealloc(struct pycq *self)
{
	cq_shut(self);
	Py_CLEAR(self->pending);
	Py_CLEAR(self->store);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *pycq_event_fd(struct pycq *self, PyObject *unused)
{
	if (self->fd < 0) {
		PyErr_SetString(PyExc_ValueError, "CompletionQueue is closed");
		return NULL;
	}
	return PyLong_FromLong(self->fd);
}

/* The exported buffers of a get (writable) or a set, one per key, with
 * their addresses and lengths in bufs/lens (malloc'd by the caller). */
static PyObject *views_get(PyObject *seq, size_t n, bool writable, void **bufs, size_t *lens)
{
	PyObject *fast = PySequence_Fast(seq, "buffers must be a sequence"), *cap;
	struct views *vs;

	if (!fast)
		return NULL;
	if ((size_t)PySequence_Fast_GET_SIZE(fast) != n) {
		PyErr_SetString(PyExc_ValueError, "keys and buffers differ in length");
		Py_DECREF(fast);
		return NULL;
	}
	vs = calloc(1, sizeof(*vs) + n * sizeof(vs->v[0]));
	if (!vs) {
		Py_DECREF(fast);
		return PyErr_NoMemory();
	}
	for (; vs->n < n; vs->n++) {
		Py_buffer *v = &vs->v[vs->n];

		if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, vs->n), v,
				       writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
			goto out_release;
		bufs[vs->n] = v->buf;
		lens[vs->n] = (size_t)v->len;
	}
	Py_DECREF(fast);
	cap = PyCapsule_New(vs, "kvpool.cq.views", views_release);
	if (cap)
		return cap;
	vs->n = n;
	fast = NULL;
out_release:
	Py_XDECREF(fast);
	for (size_t i = 0; i < vs->n; i++)
		PyBuffer_Release(&vs->v[i]);
	free(vs);
	return NULL;
}

static PyObject *submit(struct pycq *self, int op, PyObject *keys, PyObject *buffers)
{
	struct conv_keys ks;
	void **bufs = NULL;
	size_t *lens = NULL;
	PyObject *cap = NULL, *entry = NULL, *tagobj = NULL, *r = NULL;
	uint64_t tag;
	int rc = KVP_EINVAL;

	if (!self->store || self->fd < 0) {
		PyErr_SetString(PyExc_ValueError, "CompletionQueue is closed");
		return NULL;
	}
	if (conv_keys_in(keys, false, self->store->tenant, &ks) < 0)
		return NULL;
	if (!ks.n) {
		PyErr_SetString(PyExc_ValueError, "empty batch");
		goto out;
	}
	if (buffers) {
		bufs = calloc(ks.n, sizeof(*bufs));
		lens = calloc(ks.n, sizeof(*lens));
		if (!bufs || !lens) {
			PyErr_NoMemory();
			goto out;
		}
		cap = views_get(buffers, ks.n, op == KVP_CQ_GET, bufs, lens);
		if (!cap)
			goto out;
	}
	tag = self->next_tag++;
	tagobj = PyLong_FromUnsignedLongLong(tag);
	entry = Py_BuildValue("(inO)", op, (Py_ssize_t)ks.n, cap ? cap : Py_None);
	/* Recorded before the queue may complete it (another thread drains). */
	if (!tagobj || !entry || PyDict_SetItem(self->pending, tagobj, entry) < 0)
		goto out;
	Py_BEGIN_ALLOW_THREADS
	{
		struct kvp *k = store_enter(self->store);

		if (k) {
			struct kvp_cq *cq = self->cq;

			if (!cq)
				rc = KVP_EINVAL;
			else if (op == KVP_CQ_GET)
				rc = kvp_cq_submit_get(cq, ks.n, ks.k, bufs, lens, tag);
			else if (op == KVP_CQ_PUT)
				rc = kvp_cq_submit_put(cq, ks.n, ks.k, (const void *const *)bufs,
						       lens, NULL, tag);
			else if (op == KVP_CQ_EXISTS)
				rc = kvp_cq_submit_exists(cq, ks.n, ks.k, tag);
			else
				rc = kvp_cq_submit_remove(cq, ks.n, ks.k, KVP_REMOVE_FORCE, tag);
			store_leave(self->store);
		}
	}
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		PyDict_DelItem(self->pending, tagobj);
		PyErr_Format(PyExc_RuntimeError, "CompletionQueue submit: %s%s", kvp_strerror(rc),
			     rc == KVP_EINVAL ? " (queue or store closed?)" : "");
		goto out;
	}
	r = tagobj;
	tagobj = NULL;
out:
	Py_XDECREF(tagobj);
	Py_XDECREF(entry);
	Py_XDECREF(cap);
	free(bufs);
	free(lens);
	conv_keys_free(&ks);
	return r;
}

static PyObject *pycq_submit_get(struct pycq *self, PyObject *args)
{
	PyObject *keys, *bufs;

	if (!PyArg_ParseTuple(args, "OO:submit_get", &keys, &bufs))
		return NULL;
	return submit(self, KVP_CQ_GET, keys, bufs);
}

static PyObject *pycq_submit_set(struct pycq *self, PyObject *args)
{
	PyObject *keys, *bufs;

	if (!PyArg_ParseTuple(args, "OO:submit_set", &keys, &bufs))
		return NULL;
	return submit(self, KVP_CQ_PUT, keys, bufs);
}

static PyObject *pycq_submit_exists(struct pycq *self, PyObject *keys)
{
	return submit(self, KVP_CQ_EXISTS, keys, NULL);
}

static PyObject *pycq_submit_delete(struct pycq *self, PyObject *keys)
{
	return submit(self, KVP_CQ_REMOVE, keys, NULL);
}

/* One (tag, op, status, [results]) tuple. */
static PyObject *cqe_tuple(uint64_t tag, int op, int status, size_t n, const int64_t *res)
{
	PyObject *l = PyList_New((Py_ssize_t)n);

	if (!l)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		PyObject *v = PyLong_FromLongLong(res ? res[i] : status);

		if (!v) {
			Py_DECREF(l);
			return NULL;
		}
		PyList_SET_ITEM(l, (Py_ssize_t)i, v);
	}
	return Py_BuildValue("(KiiN)", (unsigned long long)tag, op, status, l);
}

/* The queue is gone (closed under us): every pending batch fails. */
static PyObject *drain_orphans(struct pycq *self, PyObject *out)
{
	PyObject *tag, *entry;
	Py_ssize_t pos = 0;
	uint64_t v;

	if (self->fd >= 0)
		while (read(self->fd, &v, sizeof(v)) < 0 && errno == EINTR)
			;
	while (PyDict_Next(self->pending, &pos, &tag, &entry)) {
		PyObject *t = cqe_tuple(PyLong_AsUnsignedLongLong(tag),
					(int)PyLong_AsLong(PyTuple_GET_ITEM(entry, 0)), KVP_ECONN,
					(size_t)PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 1)), NULL);

		if (!t || PyList_Append(out, t) < 0) {
			Py_XDECREF(t);
			Py_DECREF(out);
			return NULL;
		}
		Py_DECREF(t);
	}
	PyDict_Clear(self->pending);
	return out;
}

static PyObject *pycq_drain(struct pycq *self, PyObject *unused)
{
	struct kvp_cqe e[DRAIN_MAX];
	PyObject *out = PyList_New(0);
	size_t n;
	bool gone;

	if (!out)
		return NULL;
	if (!self->store)
		return out;
	do {
		gone = false;
		n = 0;
		Py_BEGIN_ALLOW_THREADS
		{
			struct kvp *k = store_enter(self->store);

			if (k && self->cq)
				n = kvp_cq_drain(self->cq, e, DRAIN_MAX);
			else
				gone = true;
			if (k)
				store_leave(self->store);
		}
		Py_END_ALLOW_THREADS
		for (size_t i = 0; i < n; i++) {
			PyObject *tag = PyLong_FromUnsignedLongLong(e[i].tag), *t = NULL;

			/* releases the batch's buffers */
			if (tag && PyDict_DelItem(self->pending, tag) < 0)
				PyErr_Clear();	/* not ours: cannot happen, nothing to release */
			t = tag ? cqe_tuple(e[i].tag, e[i].op, e[i].status, e[i].n, e[i].results) : NULL;
			Py_XDECREF(tag);
			if (!t || PyList_Append(out, t) < 0) {
				Py_XDECREF(t);
				for (size_t j = i; j < n; j++)
					kvp_free(e[j].results);
				Py_DECREF(out);
				return NULL;
			}
			Py_DECREF(t);
			kvp_free(e[i].results);
		}
	} while (n == DRAIN_MAX);
	if (gone && self->owner == getpid() && PyDict_Size(self->pending))
		return drain_orphans(self, out);
	return out;
}

static PyObject *pycq_pending(struct pycq *self, PyObject *unused)
{
	return PyLong_FromSsize_t(self->pending ? PyDict_Size(self->pending) : 0);
}

static PyMethodDef pycq_methods[] = {
	{ "event_fd", (PyCFunction)pycq_event_fd, METH_NOARGS,
	  "event_fd() -> fd readable while completions wait" },
	{ "submit_get", (PyCFunction)pycq_submit_get, METH_VARARGS,
	  "submit_get(keys, buffers) -> tag: fill writable buffers" },
	{ "submit_set", (PyCFunction)pycq_submit_set, METH_VARARGS,
	  "submit_set(keys, buffers) -> tag: put the buffers' bytes" },
	{ "submit_exists", (PyCFunction)pycq_submit_exists, METH_O,
	  "submit_exists(keys) -> tag" },
	{ "submit_delete", (PyCFunction)pycq_submit_delete, METH_O,
	  "submit_delete(keys) -> tag (removes even while leases are held)" },
	{ "drain", (PyCFunction)pycq_drain, METH_NOARGS,
	  "drain() -> [(tag, op, status, [per-key results])] without blocking" },
	{ "pending", (PyCFunction)pycq_pending, METH_NOARGS,
	  "pending() -> batches submitted and not drained" },
	{ "close", (PyCFunction)pycq_close, METH_NOARGS,
	  "close(): cancels queued batches, waits for running ones" },
	{ NULL }
};

PyTypeObject pycq_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvpool._kvpool.CompletionQueue",
	.tp_basicsize = sizeof(struct pycq),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "CompletionQueue(store, threads=4): batches of a store run by worker "
		  "threads; event_fd() becomes readable when drain() has completions.",
	.tp_new = pycq_new,
	.tp_init = (initproc)pycq_init,
	.tp_dealloc = (destructor)pycq_dealloc,
	.tp_methods = pycq_methods,
};

/* pystore: the DistributedStore object's handle (entered without the GIL
 * by every call, store_enter/store_leave) and the Python type itself with
 * its introspection methods.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvpool.h"
#include "kvpool_i.h"
#include "pyconv.h"
#include "pystore.h"
#include "pytypes.h"

struct store *store_live;

/* Handles: the default one and those for other replica counts. */

struct kvp *store_enter(struct store *s)
{
	if (s->owner != getpid())
		return NULL;
	pthread_rwlock_rdlock(&s->lock);
	if (!s->kvp) {
		pthread_rwlock_unlock(&s->lock);
		return NULL;
	}
	return s->kvp;
}

void store_leave(struct store *s)
{
	pthread_rwlock_unlock(&s->lock);
}

void store_locks_init(struct store *s)
{
	pthread_rwlockattr_t ra;

	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&s->lock, &ra);
	pthread_rwlockattr_destroy(&ra);
	pthread_mutex_init(&s->plock, NULL);
}


/* ---- introspection ------------------------------------------------------- */

static PyObject *store_get_hostname(struct store *self, PyObject *unused)
{
	return PyUnicode_FromString(self->owner ? self->hostport : "");
}

static PyObject *store_last_error(struct store *self, PyObject *unused)
{
	return PyUnicode_FromString(self->errmsg);
}

static PyObject *store_segment_name(struct store *self, PyObject *unused)
{
	if (!self->nemb)
		Py_RETURN_NONE;
	return PyUnicode_FromString(self->emb[0]->segment);
}


/* stats() -> dict of the handle's kvp_stats counters. */
static PyObject *store_stats(struct store *self, PyObject *unused)
{
	struct kvp_stats sum = { 0 };
	int rc;

	STORE_CALL(self, rc, kvp_stats(k, &sum));
	if (rc < 0)
		Py_RETURN_NONE;
	return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K}",
			     "puts", (unsigned long long)sum.puts,
			     "gets", (unsigned long long)sum.gets,
			     "local_bytes", (unsigned long long)sum.local_bytes,
			     "tcp_bytes", (unsigned long long)sum.tcp_bytes,
			     "checksum_mismatches", (unsigned long long)sum.checksum_mismatches,
			     "retries", (unsigned long long)sum.retries,
			     "segment_refreshes", (unsigned long long)sum.segment_refreshes,
			     "master_connects", (unsigned long long)sum.master_connects,
			     "node_connects", (unsigned long long)sum.node_connects);
}

/* ---- type plumbing -------------------------------------------------------- */

static PyObject *store_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	struct store *s = (struct store *)type->tp_alloc(type, 0);

	if (!s)
		return NULL;
	store_locks_init(s);
	s->live_next = store_live;
	if (store_live)
		store_live->live_prev = s;
	store_live = s;
	return (PyObject *)s;
}

static int store_init(struct store *self, PyObject *args, PyObject *kw)
{
	if (PyTuple_GET_SIZE(args) || (kw && PyDict_Size(kw))) {
		PyErr_SetString(PyExc_TypeError, "DistributedStore() takes no arguments; "
				"call setup() to connect");
		return -1;
	}
	return 0;
}

static void store_dealloc(struct store *self)
{
	/* Off the live list first: _close_all must not revive a dying store
	 * while the teardown below runs without the GIL. */
	if (self->live_prev)
		self->live_prev->live_next = self->live_next;
	else if (store_live == self)
		store_live = self->live_next;
	if (self->live_next)
		self->live_next->live_prev = self->live_prev;
	self->live_prev = self->live_next = NULL;
	setup_teardown(self);
	pthread_rwlock_destroy(&self->lock);
	pthread_mutex_destroy(&self->plock);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

PyMethodDef store_methods[] = {
	{ "get_hostname", METH(store_get_hostname), METH_NOARGS, "get_hostname() -> str" },
	{ "last_error", METH(store_last_error), METH_NOARGS,
	  "last_error() -> str: why the last setup failed ('' if it did not)" },
	{ "segment_name", METH(store_segment_name), METH_NOARGS,
	  "segment_name() -> the embedded node's /dev/shm segment, or None" },
	{ "stats", METH(store_stats), METH_NOARGS,
	  "stats() -> dict of client counters (local_bytes, tcp_bytes, ...), None if not set up" },
	{ NULL }
};

PyTypeObject store_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvpool._kvpool.DistributedStore",
	.tp_basicsize = sizeof(struct store),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "A kvpool client with the methods of Mooncake's MooncakeDistributedStore.",
	.tp_new = store_new,
	.tp_init = (initproc)store_init,
	.tp_dealloc = (destructor)store_dealloc,
};

/* The method tables of every file in one, in this order (help() lists them
 * so); built once, kept for the life of the process as the type needs. */
int store_type_ready(void)
{
	static PyMethodDef *const tables[] = { setup_methods, ops_methods, batch_methods,
					       admin_methods, store_methods };
	static PyMethodDef *all;
	size_t n = 0;

	if (!all) {
		for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
			for (const PyMethodDef *m = tables[t]; m->ml_name; m++)
				n++;
		all = PyMem_RawCalloc(n + 1, sizeof(*all));
		if (!all) {
			PyErr_NoMemory();
			return -1;
		}
		n = 0;
		for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
			for (const PyMethodDef *m = tables[t]; m->ml_name; m++)
				all[n++] = *m;
		store_type.tp_methods = all;
	}
	return PyType_Ready(&store_type);
}

/* pytypes: the small Python types of the `kvpool` extension — ReplicateConfig
 * (Mooncake's per-put options) with the reading of such options into a
 * struct putopt, and BufferHandle (get_buffer's result). Called with the GIL
 * held.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdbool.h>
#include <string.h>

#include "kvpool.h"
#include "pystore.h"
#include "pytypes.h"

/* ---- ReplicateConfig ----------------------------------------------------- */

/* Mooncake's per-put options. replica_num and with_hard_pin are honoured;
 * with_soft_pin, preferred_segment(s) and prefer_alloc_in_same_node are
 * accepted and recorded only (kvpool's placement is the master's). */
struct repcfg {
	PyObject_HEAD
	int replica_num;
	char with_soft_pin;
	char with_hard_pin;
	char prefer_alloc_in_same_node;
	PyObject *preferred_segment;	/* str */
	PyObject *preferred_segments;	/* list */
};

static int repcfg_init(struct repcfg *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "replica_num", "with_soft_pin", "with_hard_pin",
				  "preferred_segment", "preferred_segments",
				  "prefer_alloc_in_same_node", NULL };
	int soft = 0, hard = 0, same = 0, n = 1;
	PyObject *seg = NULL, *segs = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|ippUOp:ReplicateConfig", kwlist, &n, &soft,
					 &hard, &seg, &segs, &same))
		return -1;
	self->replica_num = n;
	self->with_soft_pin = (char)soft;
	self->with_hard_pin = (char)hard;
	self->prefer_alloc_in_same_node = (char)same;
	Py_XSETREF(self->preferred_segment, seg ? Py_NewRef(seg) : PyUnicode_FromString(""));
	Py_XSETREF(self->preferred_segments, segs ? PySequence_List(segs) : PyList_New(0));
	return self->preferred_segment && self->preferred_segments ? 0 : -1;
}

static void repcfg_dealloc(struct repcfg *self)
{
	Py_XDECREF(self->preferred_segment);
	Py_XDECREF(self->preferred_segments);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *repcfg_repr(struct repcfg *self)
{
	return PyUnicode_FromFormat("ReplicateConfig(replica_num=%d, with_soft_pin=%s, "
				    "with_hard_pin=%s, preferred_segment=%R)",
				    self->replica_num, self->with_soft_pin ? "True" : "False",
				    self->with_hard_pin ? "True" : "False",
				    self->preferred_segment ? self->preferred_segment : Py_None);
}

static PyMemberDef repcfg_members[] = {
	{ "replica_num", T_INT, offsetof(struct repcfg, replica_num), 0,
	  "Replicas of each object (1..8), each in a different segment." },
	{ "with_soft_pin", T_BOOL, offsetof(struct repcfg, with_soft_pin), 0,
	  "Accepted for compatibility; kvpool has no soft pin (eviction is LRU)." },
	{ "with_hard_pin", T_BOOL, offsetof(struct repcfg, with_hard_pin), 0,
	  "Pin the object against eviction (kvp_pin) once it is stored." },
	{ "preferred_segment", T_OBJECT_EX, offsetof(struct repcfg, preferred_segment), 0,
	  "Accepted for compatibility; the master places replicas." },
	{ "preferred_segments", T_OBJECT_EX, offsetof(struct repcfg, preferred_segments), 0,
	  "Accepted for compatibility; the master places replicas." },
	{ "prefer_alloc_in_same_node", T_BOOL, offsetof(struct repcfg, prefer_alloc_in_same_node),
	  0, "Accepted for compatibility." },
	{ NULL }
};

PyTypeObject repcfg_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvpool.ReplicateConfig",
	.tp_basicsize = sizeof(struct repcfg),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "Options of a put (Mooncake's ReplicateConfig).",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)repcfg_init,
	.tp_dealloc = (destructor)repcfg_dealloc,
	.tp_repr = (reprfunc)repcfg_repr,
	.tp_str = (reprfunc)repcfg_repr,
	.tp_members = repcfg_members,
};


/* Reads replica_num / with_hard_pin from any object that has them (ours or
 * a real mooncake.store.ReplicateConfig). 0 (po->valid false for an invalid
 * value), -1 with an exception. */
int putopt_get(PyObject *cfg, struct putopt *po)
{
	PyObject *v;

	memset(po, 0, sizeof(*po));
	if (!cfg || cfg == Py_None) {
		po->valid = true;
		return 0;
	}
	v = PyObject_GetAttrString(cfg, "replica_num");
	if (v) {
		long n = PyLong_AsLong(v);

		Py_DECREF(v);
		if (n == -1 && PyErr_Occurred())
			return -1;
		if (n < 1 || n > KVP_MAX_REPLICAS)
			return 0;	/* invalid */
		po->replicas = (int)n;
	} else if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
		PyErr_Clear();
	} else {
		return -1;
	}
	v = PyObject_GetAttrString(cfg, "with_hard_pin");
	if (v) {
		int t = PyObject_IsTrue(v);

		Py_DECREF(v);
		if (t < 0)
			return -1;
		po->hard_pin = t;
	} else if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
		PyErr_Clear();
	} else {
		return -1;
	}
	po->valid = true;
	return 0;
}

/* ---- BufferHandle ---------------------------------------------------------- */

/* The result of get_buffer: owns the malloc'd copy that kvp_get produced and
 * exports it through the buffer protocol (memoryview, numpy) without another
 * copy. */
struct pybuf {
	PyObject_HEAD
	void *p;
	size_t len;
};

static void pybuf_dealloc(struct pybuf *self)
{
	kvp_free(self->p);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static int pybuf_getbuffer(struct pybuf *self, Py_buffer *view, int flags)
{
	return PyBuffer_FillInfo(view, (PyObject *)self, self->p, (Py_ssize_t)self->len, 0, flags);
}

static PyBufferProcs pybuf_as_buffer = {
	.bf_getbuffer = (getbufferproc)pybuf_getbuffer,
};

static Py_ssize_t pybuf_length(struct pybuf *self)
{
	return (Py_ssize_t)self->len;
}

static PySequenceMethods pybuf_as_sequence = {
	.sq_length = (lenfunc)pybuf_length,
};

static PyObject *pybuf_ptr(struct pybuf *self, PyObject *unused)
{
	return PyLong_FromVoidPtr(self->p);
}

static PyObject *pybuf_size(struct pybuf *self, PyObject *unused)
{
	return PyLong_FromSize_t(self->len);
}

static PyMethodDef pybuf_methods[] = {
	{ "ptr", METH(pybuf_ptr), METH_NOARGS, "Address of the bytes (an int)." },
	{ "size", METH(pybuf_size), METH_NOARGS, "Length of the value in bytes." },
	{ NULL }
};

PyTypeObject pybuf_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvpool.BufferHandle",
	.tp_basicsize = sizeof(struct pybuf),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A value returned by get_buffer(); supports the buffer protocol.",
	.tp_dealloc = (destructor)pybuf_dealloc,
	.tp_as_buffer = &pybuf_as_buffer,
	.tp_as_sequence = &pybuf_as_sequence,
	.tp_methods = pybuf_methods,
};

/* Takes ownership of @p (kvp_free). */
PyObject *pybuf_new(void *p, size_t len)
{
	struct pybuf *b = PyObject_New(struct pybuf, &pybuf_type);

	if (!b) {
		kvp_free(p);
		return NULL;
	}
	b->p = p;
	b->len = len;
	return (PyObject *)b;
}

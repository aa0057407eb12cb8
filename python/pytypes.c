/* pytypes: reading a put's ReplicateConfig into a struct putopt, and
 * BufferHandle. Called with the GIL held.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <string.h>

#include "kvpool.h"
#include "pymem.h"
#include "pystore.h"
#include "pytypes.h"

/* ---- ReplicateConfig ------------------------------------------------------ */

/* SoftPinAction values (Mooncake's replica.h). */
enum { SOFT_PIN_PRESERVE = 0, SOFT_PIN_ENABLE = 1, SOFT_PIN_DISABLE = 2 };

/* attribute @name of @o into *out (a new reference), NULL when absent or
 * None. -1 with an exception. */
static int attr(PyObject *o, const char *name, PyObject **out)
{
	*out = PyObject_GetAttrString(o, name);
	if (*out) {
		if (*out == Py_None)
			Py_CLEAR(*out);
		return 0;
	}
	if (!PyErr_ExceptionMatches(PyExc_AttributeError))
		return -1;
	PyErr_Clear();
	return 0;
}

/* An int attribute (bool, int, IntEnum, a pybind11 enum); *has false when
 * absent. */
static int attr_int(PyObject *o, const char *name, long long *v, bool *has)
{
	PyObject *a, *n;

	*has = false;
	if (attr(o, name, &a) < 0)
		return -1;
	if (!a)
		return 0;
	n = PyNumber_Long(a);
	Py_DECREF(a);
	if (!n)
		return -1;
	*v = PyLong_AsLongLong(n);
	Py_DECREF(n);
	if (*v == -1 && PyErr_Occurred())
		return -1;
	*has = true;
	return 0;
}

/* soft_pin_ttl_ms: None (absent) or an int Mooncake's std::optional<uint64_t>
 * holds; anything else is the TypeError pybind11 raises. */
static int attr_ttl(PyObject *o, uint64_t *v, bool *has)
{
	PyObject *a;

	*has = false;
	if (attr(o, "soft_pin_ttl_ms", &a) < 0)
		return -1;
	if (!a)
		return 0;
	PyObject *n = PyFloat_Check(a) ? NULL : PyNumber_Index(a);

	if (n) {
		*v = PyLong_AsUnsignedLongLong(n);
		*has = !(*v == (uint64_t)-1 && PyErr_Occurred());
		Py_DECREF(n);
	}
	PyErr_Clear();
	Py_DECREF(a);
	if (*has)
		return 0;
	PyErr_SetString(PyExc_TypeError, "soft_pin_ttl_ms must be None or an int in [0, 2**64)");
	return -1;
}

/* A str, or the first str of a sequence, into @out ("" when empty). */
static int attr_seg(PyObject *o, const char *name, char *out, size_t cap)
{
	PyObject *a, *first = NULL;
	const char *s;
	int rc = -1;

	if (attr(o, name, &a) < 0)
		return -1;
	if (!a)
		return 0;
	if (PyUnicode_Check(a)) {
		first = Py_NewRef(a);
	} else {
		PyObject *fast = PySequence_Fast(a, "preferred_segments must be a list of str");

		if (!fast)
			goto out;
		if (PySequence_Fast_GET_SIZE(fast) > 0)
			first = Py_NewRef(PySequence_Fast_GET_ITEM(fast, 0));
		Py_DECREF(fast);
	}
	rc = 0;
	if (first && PyUnicode_Check(first) && (s = PyUnicode_AsUTF8(first)) != NULL && s[0])
		snprintf(out, cap, "%s", s);
	else if (PyErr_Occurred())
		rc = -1;
out:
	Py_XDECREF(first);
	Py_DECREF(a);
	return rc;
}

int putopt_get(PyObject *cfg, struct putopt *po)
{
	long long v;
	uint64_t ttl;
	bool has;
	PyObject *g;

	memset(po, 0, sizeof(*po));
	po->ngroups = -1;
	po->valid = true;
	if (!cfg || cfg == Py_None)
		return 0;
	if (attr_int(cfg, "replica_num", &v, &has) < 0)
		return -1;
	if (has) {
		if (v < 1 || v > KVP_MAX_REPLICAS)
			po->valid = false;
		else
			po->replicas = (int)v;
	}
	if (attr_int(cfg, "with_hard_pin", &v, &has) < 0)
		return -1;
	po->hard_pin = has && v;
	if (attr_int(cfg, "with_soft_pin", &v, &has) < 0)	/* Mooncake before SoftPinAction */
		return -1;
	po->soft_pin = has && v;
	if (attr_int(cfg, "soft_pin_action", &v, &has) < 0)
		return -1;
	if (has) {
		if (v < SOFT_PIN_PRESERVE || v > SOFT_PIN_DISABLE)
			po->valid = false;
		else if (v != SOFT_PIN_PRESERVE)
			po->soft_pin = v == SOFT_PIN_ENABLE;
	}
	if (attr_ttl(cfg, &ttl, &has) < 0)
		return -1;
	if (has) {
		/* Mooncake's master: a TTL only goes with ENABLE (PRESERVE and
		 * DISABLE with one are INVALID_PARAMS, not a TTL ignored) */
		if (!po->soft_pin)
			po->valid = false;
		else
			po->soft_pin_ttl_ms = ttl;
	}
	if (attr_int(cfg, "prefer_alloc_in_same_node", &v, &has) < 0)
		return -1;
	po->same_node = has && v;
	if (attr_seg(cfg, "preferred_segments", po->preferred, sizeof(po->preferred)) < 0)
		return -1;
	if (!po->preferred[0] &&
	    attr_seg(cfg, "preferred_segment", po->preferred, sizeof(po->preferred)) < 0)
		return -1;
	if (attr(cfg, "group_ids", &g) < 0)
		return -1;
	if (g) {
		po->ngroups = PyObject_Size(g);
		Py_DECREF(g);
		if (po->ngroups < 0)
			return -1;
	}
	return 0;
}

/* ---- BufferHandle ---------------------------------------------------------- */

/* Owns its bytes (kvp_get's allocation, or a pymem block) and exports them
 * through the buffer protocol (memoryview, numpy, torch.frombuffer) without
 * another copy. */
struct pybuf {
	PyObject_HEAD
	void *p;
	size_t len, cap;
	enum pybuf_kind kind;
};

static void pybuf_dealloc(struct pybuf *self)
{
	if (self->kind == PYBUF_KVP)
		kvp_free(self->p);
	else
		pymem_free(self->p, self->cap);
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

PyObject *pybuf_new(void *p, size_t len, size_t cap, enum pybuf_kind kind)
{
	struct pybuf *b = PyObject_New(struct pybuf, &pybuf_type);

	if (!b) {
		if (kind == PYBUF_KVP)
			kvp_free(p);
		else
			pymem_free(p, cap);
		return NULL;
	}
	b->p = p;
	b->len = len;
	b->cap = cap;
	b->kind = kind;
	return (PyObject *)b;
}

PyObject *pybuf_alloc(size_t len)
{
	size_t cap;
	void *p = pymem_alloc(len, &cap);

	if (!p)
		return PyErr_NoMemory();
	return pybuf_new(p, len, cap, PYBUF_MEM);
}

void pybuf_span(PyObject *o, void **p, size_t *len)
{
	*p = ((struct pybuf *)o)->p;
	*len = ((struct pybuf *)o)->len;
}

void pybuf_set_len(PyObject *o, size_t len)
{
	if (len <= ((struct pybuf *)o)->len)
		((struct pybuf *)o)->len = len;
}

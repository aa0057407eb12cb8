/* pymodule: the CPython extension `kvpool._kvpool` — Mooncake's
 * MooncakeDistributedStore API over libkvpool (DistributedStore, pystore.h),
 * with embedded kvpool-nodes when setup() gets a global_segment_size. The
 * package kvpool (python/kvpool/) adds the Python half: the tensor calls,
 * Mooncake's classes and enums, mooncake_config. This file is the module
 * itself: its types, the KVP_E* and Mooncake ErrorCode constants, the
 * error helpers and the atexit close of every store.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kvpool.h"
#include "pycq.h"
#include "pymem.h"
#include "pystore.h"
#include "pytypes.h"

#ifndef KVP_VERSION
#define KVP_VERSION "0"
#endif

/* ---- error codes ------------------------------------------------------- */

/* Mooncake's ErrorCode names (mooncake-store/include/types.h) for every value
 * kvp_to_mooncake() can return, exported as module constants. */
static const struct {
	const char *name;
	int code;
} mc_codes[] = {
	{ "OK", 0 },
	{ "INTERNAL_ERROR", -1 },
	{ "BUFFER_OVERFLOW", -10 },
	{ "SEGMENT_NOT_FOUND", -101 },
	{ "NO_AVAILABLE_HANDLE", -200 },
	{ "INVALID_KEY", -400 },
	{ "INVALID_PARAMS", -600 },
	{ "ILLEGAL_CLIENT", -601 },
	{ "INVALID_WRITE", -700 },
	{ "INVALID_READ", -701 },
	{ "INVALID_REPLICA", -702 },
	{ "REPLICA_IS_NOT_READY", -703 },
	{ "OBJECT_NOT_FOUND", -704 },
	{ "OBJECT_ALREADY_EXISTS", -705 },
	{ "OBJECT_HAS_LEASE", -706 },
	{ "LEASE_EXPIRED", -707 },
	{ "TRANSFER_FAIL", -800 },
	{ "RPC_FAIL", -900 },
	{ "RPC_TIMEOUT", -901 },
	{ "UNAVAILABLE_IN_CURRENT_STATUS", -1010 },
	{ "UNAVAILABLE_IN_CURRENT_MODE", -1011 },
};

/* ---- module ------------------------------------------------------------------ */

/* atexit: stores still set up are closed, so embedded nodes unmount and
 * remove their segments even when the program never called close(). */
static PyObject *mod_close_all(PyObject *mod, PyObject *unused)
{
	PyObject *all = PyList_New(0);

	/* Referenced first: the list may change while a teardown runs without
	 * the GIL. */
	for (struct store *s = store_live; all && s; s = s->live_next)
		if (PyList_Append(all, (PyObject *)s) < 0)
			Py_CLEAR(all);
	if (!all)
		return NULL;
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++)
		setup_teardown((struct store *)PyList_GET_ITEM(all, i));
	Py_DECREF(all);
	pymem_trim();
	Py_RETURN_NONE;
}

static PyObject *mod_trim_buffers(PyObject *mod, PyObject *unused)
{
	pymem_trim();
	Py_RETURN_NONE;
}

static PyObject *mod_strerror(PyObject *mod, PyObject *arg)
{
	long c = PyLong_AsLong(arg);

	if (c == -1 && PyErr_Occurred())
		return NULL;
	return PyUnicode_FromString(kvp_strerror((int)c));
}

static PyObject *mod_errname(PyObject *mod, PyObject *arg)
{
	long c = PyLong_AsLong(arg);

	if (c == -1 && PyErr_Occurred())
		return NULL;
	return PyUnicode_FromString(kvp_errname((int)c));
}

static PyObject *mod_to_mooncake(PyObject *mod, PyObject *arg)
{
	long c = PyLong_AsLong(arg);

	if (c == -1 && PyErr_Occurred())
		return NULL;
	return PyLong_FromLong(c >= 0 ? c : kvp_to_mooncake((int)c));
}

static PyMethodDef mod_methods[] = {
	{ "strerror", mod_strerror, METH_O, "strerror(kvp_code) -> message" },
	{ "errname", mod_errname, METH_O, "errname(kvp_code) -> 'KVP_E...'" },
	{ "to_mooncake", mod_to_mooncake, METH_O,
	  "to_mooncake(kvp_code) -> Mooncake ErrorCode value" },
	{ "_close_all", mod_close_all, METH_NOARGS, "Closes every store (atexit)." },
	{ "_trim_buffers", mod_trim_buffers, METH_NOARGS, "Drops the cached value buffers." },
	{ NULL }
};

static struct PyModuleDef kvpool_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "kvpool._kvpool",
	.m_doc = "kvpool: a distributed KV-cache pool. DistributedStore (alias "
		 "MooncakeDistributedStore) has the methods of Mooncake Store's Python client.",
	.m_size = -1,
	.m_methods = mod_methods,
};

PyMODINIT_FUNC PyInit__kvpool(void);

PyMODINIT_FUNC PyInit__kvpool(void)
{
	PyObject *m, *names = NULL, *atexit = NULL, *fn = NULL, *r;

	if (store_type_ready() < 0 || PyType_Ready(&pybuf_type) < 0 || PyType_Ready(&pycq_type) < 0)
		return NULL;
	m = PyModule_Create(&kvpool_module);
	if (!m)
		return NULL;
	if (PyModule_AddFunctions(m, admin_module_methods) < 0 ||
	    PyModule_AddObjectRef(m, "DistributedStore", (PyObject *)&store_type) < 0 ||
	    PyModule_AddObjectRef(m, "BufferHandle", (PyObject *)&pybuf_type) < 0 ||
	    PyModule_AddObjectRef(m, "CompletionQueue", (PyObject *)&pycq_type) < 0 ||
	    PyModule_AddIntConstant(m, "CQ_GET", KVP_CQ_GET) < 0 ||
	    PyModule_AddIntConstant(m, "CQ_SET", KVP_CQ_PUT) < 0 ||
	    PyModule_AddIntConstant(m, "CQ_EXISTS", KVP_CQ_EXISTS) < 0 ||
	    PyModule_AddIntConstant(m, "CQ_DELETE", KVP_CQ_REMOVE) < 0 ||
	    PyModule_AddStringConstant(m, "__version__", KVP_VERSION) < 0)
		goto out_err;
	if (PyModule_AddIntConstant(m, kvp_errname(KVP_OK), KVP_OK) < 0)
		goto out_err;
	for (int e = KVP_ERR_MAX; e >= KVP_ERR_MIN; e--)
		if (PyModule_AddIntConstant(m, kvp_errname(e), e) < 0)
			goto out_err;
	/* ERROR_NAMES: Mooncake code -> name, for messages. */
	names = PyDict_New();
	if (!names)
		goto out_err;
	for (size_t i = 0; i < sizeof(mc_codes) / sizeof(mc_codes[0]); i++) {
		PyObject *k = PyLong_FromLong(mc_codes[i].code);
		PyObject *v = PyUnicode_FromString(mc_codes[i].name);
		int rc = k && v ? PyDict_SetItem(names, k, v) : -1;

		Py_XDECREF(k);
		Py_XDECREF(v);
		if (rc < 0 || PyModule_AddIntConstant(m, mc_codes[i].name, mc_codes[i].code) < 0)
			goto out_err;
	}
	if (PyModule_AddObjectRef(m, "ERROR_NAMES", names) < 0)
		goto out_err;
	Py_CLEAR(names);
	atexit = PyImport_ImportModule("atexit");
	fn = atexit ? PyObject_GetAttrString(m, "_close_all") : NULL;
	r = fn ? PyObject_CallMethod(atexit, "register", "O", fn) : NULL;
	if (!r)
		goto out_err;
	Py_DECREF(r);
	Py_DECREF(fn);
	Py_DECREF(atexit);
	return m;

out_err:
	Py_XDECREF(fn);
	Py_XDECREF(atexit);
	Py_XDECREF(names);
	Py_DECREF(m);
	return NULL;
}

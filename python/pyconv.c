/* pyconv: Python arguments to the C arrays libkvpool takes — keys copied out
 * of their objects (so the GIL can be released while libkvpool reads them),
 * addresses and sizes, result lists — and a small string vector. Called with
 * the GIL held; the results are plain memory any thread may read.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "pyconv.h"

int conv_strv_add(struct conv_strv *s, const char *str)
{
	if (s->n + 2 > s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		char **v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return -1;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n] = strdup(str);
	if (!s->v[s->n])
		return -1;
	s->v[++s->n] = NULL;
	return 0;
}

int conv_strv_addf(struct conv_strv *s, const char *fmt, ...)
{
	char buf[CONF_STR * 2];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return -1;
	return conv_strv_add(s, buf);
}

void conv_strv_free(struct conv_strv *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

static int key_bytes(PyObject *o, const char **p, Py_ssize_t *len)
{
	if (PyUnicode_Check(o)) {
		*p = PyUnicode_AsUTF8AndSize(o, len);
		return *p ? 0 : -1;
	}
	if (PyBytes_Check(o)) {
		*p = PyBytes_AS_STRING(o);
		*len = PyBytes_GET_SIZE(o);
		return 0;
	}
	PyErr_Format(PyExc_TypeError, "a key must be str or bytes, not %.80s", Py_TYPE(o)->tp_name);
	return -1;
}

void conv_keys_free(struct conv_keys *ks)
{
	free(ks->k);
	free(ks->arena);
	memset(ks, 0, sizeof(*ks));
}

int conv_keys(PyObject *seq, bool one, struct conv_keys *ks)
{
	return conv_keys_in(seq, one, NULL, ks);
}

/* @seq: a sequence of keys, or (one == true) a single key, each after
 * @prefix (NULL or ""). -1 with an exception set. */
int conv_keys_in(PyObject *seq, bool one, const char *prefix, struct conv_keys *ks)
{
	size_t plen = prefix ? strlen(prefix) : 0;
	PyObject *fast = NULL;
	PyObject **items;
	size_t total = 0, off = 0;
	Py_ssize_t n;
	int rc = -1;

	memset(ks, 0, sizeof(*ks));
	if (one) {
		items = &seq;
		n = 1;
	} else {
		if (PyUnicode_Check(seq) || PyBytes_Check(seq)) {
			PyErr_SetString(PyExc_TypeError, "expected a list of keys, not one key");
			return -1;
		}
		fast = PySequence_Fast(seq, "expected a list of keys");
		if (!fast)
			return -1;
		n = PySequence_Fast_GET_SIZE(fast);
		items = PySequence_Fast_ITEMS(fast);
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		const char *p;
		Py_ssize_t len;

		if (key_bytes(items[i], &p, &len) < 0)
			goto out;
		total += plen + (size_t)len + 1;
	}
	ks->k = calloc(n ? (size_t)n : 1, sizeof(*ks->k));
	ks->arena = malloc(total ? total : 1);
	if (!ks->k || !ks->arena) {
		PyErr_NoMemory();
		goto out;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		const char *p;
		Py_ssize_t len;

		if (key_bytes(items[i], &p, &len) < 0)
			goto out;
		ks->k[i] = ks->arena + off;
		if (memchr(p, 0, (size_t)len) || !len) {
			ks->arena[off++] = 0;	/* invalid: empty key -> KVP_EKEY */
			continue;
		}
		memcpy(ks->arena + off, prefix ? prefix : "", plen);
		off += plen;
		memcpy(ks->arena + off, p, (size_t)len);
		off += (size_t)len;
		ks->arena[off++] = 0;
	}
	ks->n = (size_t)n;
	rc = 0;
out:
	Py_XDECREF(fast);
	if (rc < 0)
		conv_keys_free(ks);
	return rc;
}

/* An address or a size from Python: a non-negative int. */
int conv_u64(PyObject *o, uint64_t *out, const char *what)
{
	PyObject *idx = PyNumber_Index(o);

	if (!idx) {
		PyErr_Clear();
		PyErr_Format(PyExc_TypeError, "%s must be an int, not %.80s", what,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	*out = PyLong_AsUnsignedLongLong(idx);
	Py_DECREF(idx);
	if (*out == (uint64_t)-1 && PyErr_Occurred()) {
		PyErr_Format(PyExc_ValueError, "%s must be a non-negative int below 2**64", what);
		return -1;
	}
	return 0;
}

/* A list of n ints (n = -1: any length, returned in *got). */
int conv_u64s(PyObject *seq, Py_ssize_t n, uint64_t **out, Py_ssize_t *got, const char *what)
{
	PyObject *fast = PySequence_Fast(seq, "expected a list of ints");
	Py_ssize_t len;
	int rc = -1;

	*out = NULL;
	if (!fast)
		return -1;
	len = PySequence_Fast_GET_SIZE(fast);
	if (n >= 0 && len != n) {
		PyErr_Format(PyExc_ValueError, "%s has %zd items, expected %zd (one per key)",
			     what, len, n);
		goto out;
	}
	*out = calloc(len ? (size_t)len : 1, sizeof(**out));
	if (!*out) {
		PyErr_NoMemory();
		goto out;
	}
	for (Py_ssize_t i = 0; i < len; i++)
		if (conv_u64(PySequence_Fast_GET_ITEM(fast, i), &(*out)[i], what) < 0)
			goto out;
	if (got)
		*got = len;
	rc = 0;
out:
	Py_DECREF(fast);
	if (rc < 0) {
		free(*out);
		*out = NULL;
	}
	return rc;
}

/* buffer_ptrs and sizes, one of each per key, as the arrays libkvpool takes
 * (the caller frees both, also after a failure). -1 with an exception. */
int conv_ptr_lists(PyObject *pl, PyObject *sl, size_t n, void ***bufs, size_t **lens)
{
	uint64_t *ptrs = NULL, *sizes = NULL;
	Py_ssize_t np = 0, ns = 0;
	int rc = -1;

	*bufs = NULL;
	*lens = NULL;
	if (conv_u64s(pl, -1, &ptrs, &np, "buffer_ptrs") < 0 ||
	    conv_u64s(sl, -1, &sizes, &ns, "sizes") < 0)
		goto out;
	if ((size_t)np != n || (size_t)ns != n) {
		rc = 1;
		goto out;
	}
	*bufs = calloc(n + 1, sizeof(**bufs));
	*lens = calloc(n + 1, sizeof(**lens));
	if (!*bufs || !*lens) {
		PyErr_NoMemory();
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		(*bufs)[i] = (void *)(uintptr_t)ptrs[i];
		(*lens)[i] = (size_t)sizes[i];
	}
	rc = 0;
out:
	free(ptrs);
	free(sizes);
	return rc;
}

PyObject *conv_code_list(size_t n, int code)
{
	PyObject *l = PyList_New((Py_ssize_t)n);

	for (size_t i = 0; l && i < n; i++) {
		PyObject *x = PyLong_FromLong(code);

		if (!x) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, (Py_ssize_t)i, x);
	}
	return l;
}

/* A list of the n results in @iv, or (iv NULL) in @lv. */
PyObject *conv_int_list(size_t n, const int *iv, const int64_t *lv)
{
	PyObject *l = PyList_New((Py_ssize_t)n);

	for (size_t i = 0; l && i < n; i++) {
		PyObject *x = PyLong_FromLongLong(iv ? iv[i] : lv[i]);

		if (!x) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, (Py_ssize_t)i, x);
	}
	return l;
}

/* pyops: DistributedStore's calls on one object — put/get/exists/size/
 * remove, remove_by_regex and remove_all, the registered buffers and the
 * zero-copy put_from/get_into, stat. Each copies its arguments with the GIL
 * held and runs the libkvpool call without it (STORE_CALL).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "pyconv.h"
#include "pyput.h"
#include "pystore.h"
#include "pytypes.h"

#define PAGE_KEYS 1000u			/* keys per kvp_list page (remove_by_regex) */
#define REMOVE_CHUNK 1024u		/* keys per kvp_batch_remove */

/* ---- single-object calls --------------------------------------------------- */

/* One value in @n pieces through put_gather, the Mooncake code. GIL held
 * on entry; released around the put. */
static int put_pieces(struct store *self, const struct putopt *po, const char *key,
		      const struct kvp_iov *iov, size_t n)
{
	size_t first[2] = { 0, n };
	int rc, res = KVP_EINVAL;

	Py_BEGIN_ALLOW_THREADS
	STORE_CALL_NOGIL(self, rc, put_gather(self, po, 1, &key, iov, first, &res));
	Py_END_ALLOW_THREADS
	return mc_put(rc < 0 ? rc : res);
}

/* put(key, value, config) / upsert(...). */
static PyObject *do_put(struct store *self, PyObject *args, PyObject *kw, bool upsert)
{
	static char *kwlist[] = { "key", "value", "config", NULL };
	struct putopt po;
	struct conv_keys ks;
	PyObject *key, *cfg = NULL;
	Py_buffer v;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, upsert ? "Oy*|O:upsert" : "Oy*|O:put", kwlist,
					 &key, &v, &cfg))
		return NULL;
	if (putopt_get(cfg, &po) < 0 || conv_keys_in(key, true, self->tenant, &ks) < 0) {
		PyBuffer_Release(&v);
		return NULL;
	}
	po.upsert = upsert;
	rc = put_pieces(self, &po, ks.k[0], &(struct kvp_iov){ v.buf, (size_t)v.len }, 1);
	PyBuffer_Release(&v);
	conv_keys_free(&ks);
	return PyLong_FromLong(rc);
}

static PyObject *store_put(struct store *self, PyObject *args, PyObject *kw)
{
	return do_put(self, args, kw, false);
}

static PyObject *store_upsert(struct store *self, PyObject *args, PyObject *kw)
{
	return do_put(self, args, kw, true);
}

/* put_parts(key, *parts, config=None) / upsert_parts: the parts
 * concatenated into one value. */
static PyObject *do_put_parts(struct store *self, PyObject *args, PyObject *kw, bool upsert)
{
	Py_ssize_t nargs = PyTuple_GET_SIZE(args), nparts;
	PyObject *cfg = kw ? PyDict_GetItemString(kw, "config") : NULL;
	Py_buffer *views = NULL;
	struct kvp_iov *iov = NULL;
	Py_ssize_t got = 0;
	struct putopt po;
	struct conv_keys ks = { 0 };
	int rc = 0;

	if (kw && PyDict_Size(kw) > (cfg ? 1 : 0)) {
		PyErr_SetString(PyExc_TypeError, "put_parts: the only keyword is config");
		return NULL;
	}
	if (nargs < 1) {
		PyErr_SetString(PyExc_TypeError, "put_parts(key, *parts, config=None)");
		return NULL;
	}
	if (putopt_get(cfg, &po) < 0 || conv_keys_in(PyTuple_GET_ITEM(args, 0), true, self->tenant, &ks) < 0)
		return NULL;
	po.upsert = upsert;
	nparts = nargs - 1;
	views = calloc(nparts ? (size_t)nparts : 1, sizeof(*views));
	iov = calloc(nparts ? (size_t)nparts : 1, sizeof(*iov));
	if (!views || !iov) {
		PyErr_NoMemory();
		goto out;
	}
	for (got = 0; got < nparts; got++) {
		if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, got + 1), &views[got],
				       PyBUF_SIMPLE) < 0)
			goto out;
		iov[got] = (struct kvp_iov){ views[got].buf, (size_t)views[got].len };
	}
	rc = put_pieces(self, &po, ks.k[0], iov, (size_t)nparts);
out:
	for (Py_ssize_t i = 0; i < got; i++)
		PyBuffer_Release(&views[i]);
	free(views);
	free(iov);
	conv_keys_free(&ks);
	if (PyErr_Occurred())
		return NULL;
	return PyLong_FromLong(rc);
}

static PyObject *store_put_parts(struct store *self, PyObject *args, PyObject *kw)
{
	return do_put_parts(self, args, kw, false);
}

static PyObject *store_upsert_parts(struct store *self, PyObject *args, PyObject *kw)
{
	return do_put_parts(self, args, kw, true);
}

static PyObject *store_get(struct store *self, PyObject *key)
{
	struct conv_keys ks;
	void *buf = NULL;
	size_t len = 0;
	PyObject *r;
	int rc;

	if (conv_keys_in(key, true, self->tenant, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_get(k, ks.k[0], &buf, &len));
	conv_keys_free(&ks);
	/* Mooncake: empty bytes when missing (or on any error). */
	r = PyBytes_FromStringAndSize(rc == 0 ? buf : NULL, rc == 0 ? (Py_ssize_t)len : 0);
	kvp_free(buf);
	return r;
}

static PyObject *store_get_buffer(struct store *self, PyObject *key)
{
	struct conv_keys ks;
	void *buf = NULL;
	size_t len = 0;
	int rc;

	if (conv_keys_in(key, true, self->tenant, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_get(k, ks.k[0], &buf, &len));
	conv_keys_free(&ks);
	if (rc < 0)
		Py_RETURN_NONE;
	return pybuf_new(buf, len, len, PYBUF_KVP);
}

static PyObject *store_is_exist(struct store *self, PyObject *key)
{
	struct conv_keys ks;
	int rc;

	if (conv_keys_in(key, true, self->tenant, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_exists(k, ks.k[0]));
	conv_keys_free(&ks);
	return PyLong_FromLong(mc_exist(rc));
}

static PyObject *store_get_size(struct store *self, PyObject *key)
{
	struct conv_keys ks;
	uint64_t size = 0;
	int rc;

	if (conv_keys_in(key, true, self->tenant, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_size(k, ks.k[0], &size));
	conv_keys_free(&ks);
	if (rc < 0)
		return PyLong_FromLong(mc(rc));
	return PyLong_FromUnsignedLongLong(size);
}

static PyObject *store_remove(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "key", "force", NULL };
	PyObject *key;
	struct conv_keys ks;
	int force = 0, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p:remove", kwlist, &key, &force))
		return NULL;
	if (conv_keys_in(key, true, self->tenant, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_remove(k, ks.k[0], force ? KVP_REMOVE_FORCE : 0));
	conv_keys_free(&ks);
	return PyLong_FromLong(mc(rc));
}

static PyObject *store_remove_all(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "force", NULL };
	uint64_t count = 0;
	int force = 0, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:remove_all", kwlist, &force))
		return NULL;
	/* A tenant's "all" is its namespace. */
	if (self->tenant[0])
		STORE_CALL(self, rc, kvp_remove_prefix(k, self->tenant, force ? KVP_REMOVE_FORCE : 0,
						       &count));
	else
		STORE_CALL(self, rc, kvp_remove_all(k, force ? KVP_REMOVE_FORCE : 0, &count));
	if (rc < 0)
		return PyLong_FromLong(mc(rc));
	return PyLong_FromUnsignedLongLong(count);
}

/* The literal prefix a match must start with, for "^abc..." patterns (so
 * kvp_list scans only that part of the key space); "" when unknown. */
static void regex_prefix(const char *pat, char *out, size_t cap)
{
	size_t n = 0;

	out[0] = 0;
	/* A top-level alternative may match anywhere: no prefix then. */
	if (pat[0] != '^' || strchr(pat, '|'))
		return;
	for (const char *p = pat + 1; *p && n + 1 < cap; p++) {
		if (strchr(".^$*+?{}[]\\|()", *p))
			break;
		out[n++] = *p;
	}
	/* A quantifier after the last literal makes that literal optional. */
	if (n && pat[1 + n] && strchr("*?{", pat[1 + n]))
		n--;
	out[n] = 0;
}

/* remove_by_regex(pattern, force=False): lists the keys (kvp_list) and
 * removes those where re.search(pattern, key) matches; returns the number
 * removed. str patterns see keys decoded as UTF-8 (surrogateescape), bytes
 * patterns see the raw key bytes. */
static PyObject *store_remove_by_regex(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "regex_pattern", "force", NULL };
	PyObject *pat, *re = NULL, *cre = NULL, *patstr = NULL, *result = NULL;
	struct conv_strv matched = { 0 };
	char prefix[KVP_MAX_KEY + 1] = "", lit[KVP_MAX_KEY + 1] = "", *cursor = NULL;
	size_t tlen = strlen(self->tenant);
	bool bytes_pat;
	uint64_t removed = 0;
	int force = 0, rc = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p:remove_by_regex", kwlist, &pat, &force))
		return NULL;
	re = PyImport_ImportModule("re");
	if (!re)
		return NULL;
	cre = PyObject_CallMethod(re, "compile", "O", pat);
	if (!cre)
		goto out;
	patstr = PyObject_GetAttrString(cre, "pattern");
	if (!patstr)
		goto out;
	bytes_pat = PyBytes_Check(patstr);
	if (!bytes_pat && PyUnicode_Check(patstr)) {
		PyObject *flags = PyObject_GetAttrString(cre, "flags");
		long fl = flags ? PyLong_AsLong(flags) : -1;
		const char *s = PyUnicode_AsUTF8(patstr);

		Py_XDECREF(flags);
		if (!s || fl == -1)
			goto out;
		/* Only without flags: IGNORECASE etc. change what a literal is. */
		if (fl == 32 /* re.UNICODE only */)
			regex_prefix(s, lit, sizeof(lit));
	}
	/* Only this store's tenant's keys, matched without the namespace. */
	snprintf(prefix, sizeof(prefix), "%s%s", self->tenant, lit);
	for (;;) {
		struct kvp_list l = { 0 };

		STORE_CALL(self, rc, kvp_list(k, prefix, 0, cursor, PAGE_KEYS, &l));
		if (rc < 0)
			break;
		for (size_t i = 0; i < l.n; i++) {
			const char *name = l.entries[i].name, *bare = name + tlen;
			PyObject *key = bytes_pat ?
				PyBytes_FromString(bare) :
				PyUnicode_DecodeUTF8(bare, (Py_ssize_t)strlen(bare), "surrogateescape");
			PyObject *m = key ? PyObject_CallMethod(cre, "search", "O", key) : NULL;

			Py_XDECREF(key);
			if (!m || (m != Py_None && conv_strv_add(&matched, name) < 0)) {
				Py_XDECREF(m);
				kvp_list_free(&l);
				if (!PyErr_Occurred())
					PyErr_NoMemory();
				goto out;
			}
			Py_DECREF(m);
		}
		free(cursor);
		cursor = l.next && l.next[0] ? strdup(l.next) : NULL;
		kvp_list_free(&l);
		if (!cursor)
			break;
	}
	if (rc < 0) {
		result = PyLong_FromLong(mc(rc));
		goto out;
	}
	for (size_t off = 0; off < matched.n; off += REMOVE_CHUNK) {
		size_t n = matched.n - off < REMOVE_CHUNK ? matched.n - off : REMOVE_CHUNK;
		int res[REMOVE_CHUNK];

		STORE_CALL(self, rc, kvp_batch_remove(k, n, (const char *const *)matched.v + off,
				      force ? KVP_REMOVE_FORCE : 0, res));
		if (rc < 0)
			break;
		for (size_t i = 0; i < n; i++)
			removed += res[i] == 0;
	}
	result = rc < 0 ? PyLong_FromLong(mc(rc)) : PyLong_FromUnsignedLongLong(removed);
out:
	free(cursor);
	conv_strv_free(&matched);
	Py_XDECREF(patstr);
	Py_XDECREF(cre);
	Py_XDECREF(re);
	return result;
}

/* ---- registered buffers and zero-copy calls ----------------------------------- */

static PyObject *store_register_buffer(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "buffer_ptr", "size", NULL };
	PyObject *po, *so;
	uint64_t ptr, size;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:register_buffer", kwlist, &po, &so) ||
	    conv_u64(po, &ptr, "buffer_ptr") < 0 || conv_u64(so, &size, "size") < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_register_buffer(k, (void *)(uintptr_t)ptr, (size_t)size));
	return PyLong_FromLong(mc(rc));
}

static PyObject *store_unregister_buffer(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "buffer_ptr", NULL };
	PyObject *po;
	uint64_t ptr;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O:unregister_buffer", kwlist, &po) ||
	    conv_u64(po, &ptr, "buffer_ptr") < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_unregister_buffer(k, (void *)(uintptr_t)ptr));
	return PyLong_FromLong(mc(rc));
}

/* put_from(key, buffer_ptr, size, config) / upsert_from. */
static PyObject *do_put_from(struct store *self, PyObject *args, PyObject *kw, bool upsert)
{
	static char *kwlist[] = { "key", "buffer_ptr", "size", "config", NULL };
	PyObject *key, *po, *so, *cfg = NULL;
	struct putopt opt;
	uint64_t ptr, size;
	struct conv_keys ks;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, upsert ? "OOO|O:upsert_from" : "OOO|O:put_from",
					 kwlist, &key, &po, &so, &cfg) ||
	    conv_u64(po, &ptr, "buffer_ptr") < 0 || conv_u64(so, &size, "size") < 0)
		return NULL;
	if (putopt_get(cfg, &opt) < 0 || conv_keys_in(key, true, self->tenant, &ks) < 0)
		return NULL;
	opt.upsert = upsert;
	rc = put_pieces(self, &opt, ks.k[0],
			&(struct kvp_iov){ (const void *)(uintptr_t)ptr, (size_t)size }, 1);
	conv_keys_free(&ks);
	return PyLong_FromLong(rc);
}

static PyObject *store_put_from(struct store *self, PyObject *args, PyObject *kw)
{
	return do_put_from(self, args, kw, false);
}

static PyObject *store_upsert_from(struct store *self, PyObject *args, PyObject *kw)
{
	return do_put_from(self, args, kw, true);
}

/* put_from_with_metadata(key, buffer_ptr, metadata_buffer_ptr, size,
 * metadata_size, config): the value is the metadata, then the data (as
 * Mooncake lays it out). */
static PyObject *store_put_from_with_metadata(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "key", "buffer_ptr", "metadata_buffer_ptr", "size",
				  "metadata_size", "config", NULL };
	PyObject *key, *po, *mo, *so, *mso, *cfg = NULL;
	uint64_t ptr, mptr, size, msize;
	struct kvp_iov iov[2];
	struct putopt opt;
	struct conv_keys ks;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO|O:put_from_with_metadata", kwlist, &key,
					 &po, &mo, &so, &mso, &cfg) ||
	    conv_u64(po, &ptr, "buffer_ptr") < 0 || conv_u64(mo, &mptr, "metadata_buffer_ptr") < 0 ||
	    conv_u64(so, &size, "size") < 0 || conv_u64(mso, &msize, "metadata_size") < 0)
		return NULL;
	if (putopt_get(cfg, &opt) < 0 || conv_keys_in(key, true, self->tenant, &ks) < 0)
		return NULL;
	/* Mooncake: nothing to store is success. */
	if (!size) {
		conv_keys_free(&ks);
		return PyLong_FromLong(0);
	}
	iov[0] = (struct kvp_iov){ (const void *)(uintptr_t)mptr, (size_t)msize };
	iov[1] = (struct kvp_iov){ (const void *)(uintptr_t)ptr, (size_t)size };
	rc = msize ? put_pieces(self, &opt, ks.k[0], iov, 2) :
		     put_pieces(self, &opt, ks.k[0], &iov[1], 1);
	conv_keys_free(&ks);
	return PyLong_FromLong(rc);
}

static PyObject *store_get_into(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "key", "buffer_ptr", "size", NULL };
	PyObject *key, *po, *so;
	uint64_t ptr, size;
	struct conv_keys ks;
	int64_t rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:get_into", kwlist, &key, &po, &so) ||
	    conv_u64(po, &ptr, "buffer_ptr") < 0 || conv_u64(so, &size, "size") < 0)
		return NULL;
	if (conv_keys_in(key, true, self->tenant, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_get_into(k, ks.k[0], (void *)(uintptr_t)ptr, (size_t)size));
	conv_keys_free(&ks);
	return PyLong_FromLongLong(rc >= 0 ? rc : mc(rc));
}

/* stat(key) -> dict (size, generation, checksum, times, lease_ms, pin_ms,
 * replicas), None when missing or on error. A kvpool extension. */
static PyObject *store_stat(struct store *self, PyObject *key)
{
	struct kvp_stat st;
	struct conv_keys ks;
	PyObject *reps, *r;
	int rc;

	if (conv_keys_in(key, true, self->tenant, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_stat(k, ks.k[0], &st));
	conv_keys_free(&ks);
	if (rc < 0)
		Py_RETURN_NONE;
	reps = PyList_New(0);
	for (uint32_t i = 0; reps && i < st.nreplicas && i < KVP_MAX_REPLICAS; i++) {
		const struct kvp_replica *rp = &st.replicas[i];
		PyObject *d = Py_BuildValue("{s:s,s:I,s:s,s:K,s:K}", "node", rp->node,
					    "segment_id", (unsigned)rp->segment_id,
					    "tier", rp->tier == KVP_TIER_DISK ? "disk" : "mem",
					    "offset", (unsigned long long)rp->offset,
					    "alloc_len", (unsigned long long)rp->alloc_len);

		if (!d || PyList_Append(reps, d) < 0) {
			Py_XDECREF(d);
			Py_CLEAR(reps);
			break;
		}
		Py_DECREF(d);
	}
	if (!reps)
		return NULL;
	r = Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:L,s:L,s:N}",
			  "size", (unsigned long long)st.size,
			  "generation", (unsigned long long)st.generation,
			  "checksum", (unsigned long long)st.checksum,
			  "put_time_ns", (unsigned long long)st.put_time_ns,
			  "access_time_ns", (unsigned long long)st.access_time_ns,
			  "lease_ms", (long long)st.lease_ms,
			  "pin_ms", (long long)st.pin_ms,
			  "replicas", reps);
	return r;
}


PyMethodDef ops_methods[] = {
	{ "put", METH(store_put), KW, "put(key, value, config=None) -> int" },
	{ "upsert", METH(store_upsert), KW,
	  "upsert(key, value, config=None) -> int: inserts, or replaces the value atomically" },
	{ "put_parts", METH(store_put_parts), KW, "put_parts(key, *parts, config=None) -> int" },
	{ "upsert_parts", METH(store_upsert_parts), KW,
	  "upsert_parts(key, *parts, config=None) -> int" },
	{ "get", METH(store_get), METH_O, "get(key) -> bytes (b'' when missing)" },
	{ "get_buffer", METH(store_get_buffer), METH_O,
	  "get_buffer(key) -> BufferHandle or None" },
	{ "is_exist", METH(store_is_exist), METH_O, "is_exist(key) -> 1, 0 or -1" },
	{ "get_size", METH(store_get_size), METH_O, "get_size(key) -> size or negative code" },
	{ "remove", METH(store_remove), KW, "remove(key, force=False) -> int" },
	{ "remove_by_regex", METH(store_remove_by_regex), KW,
	  "remove_by_regex(regex_pattern, force=False) -> number removed or negative code" },
	{ "remove_all", METH(store_remove_all), KW,
	  "remove_all(force=False) -> number removed or negative code" },
	{ "register_buffer", METH(store_register_buffer), KW,
	  "register_buffer(buffer_ptr, size) -> int" },
	{ "unregister_buffer", METH(store_unregister_buffer), KW,
	  "unregister_buffer(buffer_ptr) -> int" },
	{ "put_from", METH(store_put_from), KW,
	  "put_from(key, buffer_ptr, size, config=None) -> int" },
	{ "upsert_from", METH(store_upsert_from), KW,
	  "upsert_from(key, buffer_ptr, size, config=None) -> int" },
	{ "put_from_with_metadata", METH(store_put_from_with_metadata), KW,
	  "put_from_with_metadata(key, buffer_ptr, metadata_buffer_ptr, size, metadata_size, "
	  "config=None) -> int: the value is the metadata followed by the data" },
	{ "get_into", METH(store_get_into), KW,
	  "get_into(key, buffer_ptr, size) -> bytes read or negative code" },
	{ "stat", METH(store_stat), METH_O,
	  "stat(key) -> dict (size, replicas, lease_ms, pin_ms, ...) or None (kvpool extension)" },
	{ NULL }
};

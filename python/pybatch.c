/* pybatch: DistributedStore's calls on many objects — put_batch/get_batch,
 * the zero-copy batch_put_from/batch_get_into and their *_multi_buffers
 * forms (several buffers per key, merged when adjacent), batch_is_exist,
 * batch_remove, batch_get_buffer. Arguments are copied with the GIL held;
 * the libkvpool batch calls and the staging copies run without it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "pyconv.h"
#include "pymem.h"
#include "pyput.h"
#include "pystore.h"
#include "pytypes.h"

/* The optional keyword pred=KEY of the batch puts: the key the first value
 * extends (a chain: the values extend one another in key order, pred
 * names the cached block before them). 0, or -1 with an exception. */
static int pred_in(struct store *self, PyObject *pred, struct conv_keys *pk, struct putopt *po)
{
	memset(pk, 0, sizeof(*pk));
	if (!pred || pred == Py_None)
		return 0;
	if (conv_keys_in(pred, true, self->tenant, pk) < 0)
		return -1;
	po->pred = pk->k[0];
	return 0;
}

/* Batch puts from (ptr, len) pairs; results are Mooncake codes. Called
 * without the GIL. */
static void batch_put_nogil(struct store *self, const struct putopt *opt,
			    const struct conv_keys *ks, const void *const *bufs, const size_t *lens,
			    int *res)
{
	int rc;

	STORE_CALL_NOGIL(self, rc, put_many(self, opt, ks->n, ks->k, bufs, lens, res));
	for (size_t i = 0; i < ks->n; i++)
		res[i] = mc_put(rc < 0 ? rc : res[i]);
}

/* put_batch(keys, values, config=None) / upsert_batch -> 0, or the first
 * failure's code. */
static PyObject *do_put_batch(struct store *self, PyObject *args, PyObject *kw, bool upsert)
{
	static char *kwlist[] = { "keys", "values", "config", "pred", NULL };
	PyObject *keys, *values, *cfg = NULL, *fast = NULL, *pred = NULL;
	Py_buffer *views = NULL;
	const void **bufs = NULL;
	size_t *lens = NULL;
	int *res = NULL, first = 0;
	Py_ssize_t got = 0;
	struct putopt opt;
	struct conv_keys ks = { 0 }, pk = { 0 };

	if (!PyArg_ParseTupleAndKeywords(args, kw, upsert ? "OO|O$O:upsert_batch" :
					 "OO|O$O:put_batch", kwlist, &keys, &values, &cfg, &pred))
		return NULL;
	if (putopt_get(cfg, &opt) < 0 || pred_in(self, pred, &pk, &opt) < 0)
		return NULL;
	if (conv_keys_in(keys, false, self->tenant, &ks) < 0) {
		conv_keys_free(&pk);
		return NULL;
	}
	opt.upsert = upsert;
	fast = PySequence_Fast(values, "values must be a list of bytes-like objects");
	if (!fast)
		goto out;
	if ((size_t)PySequence_Fast_GET_SIZE(fast) != ks.n) {
		PyErr_SetString(PyExc_ValueError, "put_batch: keys and values differ in length");
		goto out;
	}
	views = calloc(ks.n + 1, sizeof(*views));
	bufs = calloc(ks.n + 1, sizeof(*bufs));
	lens = calloc(ks.n + 1, sizeof(*lens));
	res = calloc(ks.n + 1, sizeof(*res));
	if (!views || !bufs || !lens || !res) {
		PyErr_NoMemory();
		goto out;
	}
	for (got = 0; (size_t)got < ks.n; got++) {
		if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, got), &views[got],
				       PyBUF_SIMPLE) < 0)
			goto out;
		bufs[got] = views[got].buf;
		lens[got] = (size_t)views[got].len;
	}
	Py_BEGIN_ALLOW_THREADS
	batch_put_nogil(self, &opt, &ks, bufs, lens, res);
	Py_END_ALLOW_THREADS
	for (size_t i = 0; i < ks.n && !first; i++)
		first = res[i];
out:
	for (Py_ssize_t i = 0; i < got; i++)
		PyBuffer_Release(&views[i]);
	free(views);
	free(bufs);
	free(lens);
	free(res);
	Py_XDECREF(fast);
	conv_keys_free(&ks);
	conv_keys_free(&pk);
	if (PyErr_Occurred())
		return NULL;
	return PyLong_FromLong(first);
}

static PyObject *store_put_batch(struct store *self, PyObject *args, PyObject *kw)
{
	return do_put_batch(self, args, kw, false);
}

static PyObject *store_upsert_batch(struct store *self, PyObject *args, PyObject *kw)
{
	return do_put_batch(self, args, kw, true);
}

/* batch_put_from(keys, buffer_ptrs, sizes, config=None, *, pred=None) /
 * batch_upsert_from. */
static PyObject *do_batch_put_from(struct store *self, PyObject *args, PyObject *kw,
				   bool upsert)
{
	static char *kwlist[] = { "keys", "buffer_ptrs", "sizes", "config", "pred", NULL };
	PyObject *keys, *pl, *sl, *cfg = NULL, *pred = NULL, *r = NULL;
	struct putopt opt;
	struct conv_keys ks, pk;
	void **bufs = NULL;
	size_t *lens = NULL;
	int *res = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, upsert ? "OOO|O$O:batch_upsert_from" :
					 "OOO|O$O:batch_put_from", kwlist, &keys, &pl, &sl, &cfg,
					 &pred))
		return NULL;
	if (putopt_get(cfg, &opt) < 0 || pred_in(self, pred, &pk, &opt) < 0)
		return NULL;
	if (conv_keys_in(keys, false, self->tenant, &ks) < 0) {
		conv_keys_free(&pk);
		return NULL;
	}
	opt.upsert = upsert;
	switch (conv_ptr_lists(pl, sl, ks.n, &bufs, &lens)) {
	case -1:
		goto out;
	case 1:		/* lists of other lengths: Mooncake's per-key INVALID_PARAMS */
		r = conv_code_list(ks.n, mc_put(KVP_EINVAL));
		goto out;
	}
	res = calloc(ks.n + 1, sizeof(*res));
	if (!res) {
		PyErr_NoMemory();
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	batch_put_nogil(self, &opt, &ks, (const void *const *)bufs, lens, res);
	Py_END_ALLOW_THREADS
	r = conv_int_list(ks.n, res, NULL);
out:
	free(bufs);
	free(lens);
	free(res);
	conv_keys_free(&ks);
	conv_keys_free(&pk);
	return r;
}

static PyObject *store_batch_put_from(struct store *self, PyObject *args, PyObject *kw)
{
	return do_batch_put_from(self, args, kw, false);
}

static PyObject *store_batch_upsert_from(struct store *self, PyObject *args, PyObject *kw)
{
	return do_batch_put_from(self, args, kw, true);
}

static PyObject *store_batch_get_into(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "buffer_ptrs", "sizes", NULL };
	PyObject *keys, *pl, *sl, *r = NULL;
	struct conv_keys ks;
	void **bufs = NULL;
	size_t *caps = NULL;
	int64_t *res = NULL;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:batch_get_into", kwlist, &keys, &pl, &sl))
		return NULL;
	if (conv_keys_in(keys, false, self->tenant, &ks) < 0)
		return NULL;
	switch (conv_ptr_lists(pl, sl, ks.n, &bufs, &caps)) {
	case -1:
		goto out;
	case 1:
		r = conv_code_list(ks.n, (int)mc(KVP_EINVAL));
		goto out;
	}
	res = calloc(ks.n + 1, sizeof(*res));
	if (!res) {
		PyErr_NoMemory();
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	STORE_CALL_NOGIL(self, rc, kvp_batch_get_into(k, ks.n, ks.k, bufs, caps, res));
	for (size_t i = 0; i < ks.n; i++) {
		int64_t v = rc < 0 ? rc : res[i];

		res[i] = v >= 0 ? v : mc(v);
	}
	Py_END_ALLOW_THREADS
	r = conv_int_list(ks.n, NULL, res);
out:
	free(bufs);
	free(caps);
	free(res);
	conv_keys_free(&ks);
	return r;
}

/* One key's buffers in the *_multi_buffers calls. Adjacent buffers
 * (ptr[j] + size[j] == ptr[j + 1], the usual layer-by-layer layout inside one
 * KV block) are merged, so most keys need no staging copy. */
struct mbuf {
	size_t n;			/* after merging */
	char **p;
	size_t *len;
	size_t total;
	char *stage;			/* n > 1: contiguous staging buffer (pymem) */
	size_t stage_cap;
};

/* The keys' buffers: 0; 1 (no exception) when the lists do not hold one
 * list per key (Mooncake answers INVALID_PARAMS for every key); -1 with an
 * exception. */
static int mbufs_get(PyObject *allp, PyObject *alls, size_t nkeys, struct mbuf **out)
{
	PyObject *fp = NULL, *fs = NULL;
	struct mbuf *mb;
	int rc = -1;

	*out = mb = calloc(nkeys + 1, sizeof(*mb));
	if (!mb) {
		PyErr_NoMemory();
		return -1;
	}
	fp = PySequence_Fast(allp, "all_buffer_ptrs must be a list of lists of ints");
	fs = fp ? PySequence_Fast(alls, "all_sizes must be a list of lists of ints") : NULL;
	if (!fs)
		goto out;
	if ((size_t)PySequence_Fast_GET_SIZE(fp) != nkeys ||
	    (size_t)PySequence_Fast_GET_SIZE(fs) != nkeys) {
		rc = 1;		/* Mooncake: INVALID_PARAMS for every key */
		goto out;
	}
	for (size_t i = 0; i < nkeys; i++) {
		uint64_t *ps = NULL, *ss = NULL;
		Py_ssize_t np = 0, ns = 0;

		if (conv_u64s(PySequence_Fast_GET_ITEM(fp, i), -1, &ps, &np, "buffer_ptrs") < 0)
			goto out;
		if (conv_u64s(PySequence_Fast_GET_ITEM(fs, i), np, &ss, &ns, "sizes") < 0) {
			free(ps);
			goto out;
		}
		mb[i].p = calloc((size_t)np + 1, sizeof(*mb[i].p));
		mb[i].len = calloc((size_t)np + 1, sizeof(*mb[i].len));
		if (!mb[i].p || !mb[i].len) {
			free(ps);
			free(ss);
			PyErr_NoMemory();
			goto out;
		}
		for (Py_ssize_t j = 0; j < np; j++) {
			char *p = (char *)(uintptr_t)ps[j];
			size_t l = (size_t)ss[j];

			mb[i].total += l;
			if (mb[i].n && mb[i].p[mb[i].n - 1] + mb[i].len[mb[i].n - 1] == p) {
				mb[i].len[mb[i].n - 1] += l;
				continue;
			}
			mb[i].p[mb[i].n] = p;
			mb[i].len[mb[i].n++] = l;
		}
		free(ps);
		free(ss);
	}
	rc = 0;
out:
	Py_XDECREF(fp);
	Py_XDECREF(fs);
	return rc;
}

static void mbufs_free(struct mbuf *mb, size_t n)
{
	for (size_t i = 0; mb && i < n; i++) {
		free(mb[i].p);
		free(mb[i].len);
		pymem_free(mb[i].stage, mb[i].stage_cap);
	}
	free(mb);
}

/* Called without the GIL: the contiguous buffer a get fills for every key
 * (its only buffer, or a staging one) and its total length. 0 or
 * KVP_ENOMEM. */
static int mbufs_flatten(struct mbuf *mb, size_t n, void **bufs, size_t *lens)
{
	for (size_t i = 0; i < n; i++) {
		struct mbuf *m = &mb[i];

		bufs[i] = m->n == 1 ? m->p[0] : NULL;
		lens[i] = m->total;
		if (m->n <= 1)
			continue;
		m->stage = pymem_alloc(m->total, &m->stage_cap);
		if (!m->stage)
			return KVP_ENOMEM;
		bufs[i] = m->stage;
	}
	return 0;
}

/* A key's buffers as put_gather's pieces (merged where adjacent). */
static int mbufs_iov(struct mbuf *mb, size_t n, struct kvp_iov **iov, size_t **first)
{
	size_t total = 0, k = 0;

	for (size_t i = 0; i < n; i++)
		total += mb[i].n;
	*iov = calloc(total + 1, sizeof(**iov));
	*first = calloc(n + 1, sizeof(**first));
	if (!*iov || !*first)
		return KVP_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		(*first)[i] = k;
		for (size_t j = 0; j < mb[i].n; j++)
			(*iov)[k++] = (struct kvp_iov){ mb[i].p[j], mb[i].len[j] };
	}
	(*first)[n] = k;
	return 0;
}

static PyObject *store_batch_put_from_multi_buffers(struct store *self, PyObject *args,
						    PyObject *kw)
{
	static char *kwlist[] = { "keys", "all_buffer_ptrs", "all_sizes", "config", "pred",
				  NULL };
	PyObject *keys, *allp, *alls, *cfg = NULL, *pred = NULL, *r = NULL;
	struct mbuf *mb = NULL;
	struct putopt opt;
	struct conv_keys ks, pk;
	struct kvp_iov *iov = NULL;
	size_t *first = NULL;
	int *res = NULL, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O$O:batch_put_from_multi_buffers",
					 kwlist, &keys, &allp, &alls, &cfg, &pred))
		return NULL;
	if (putopt_get(cfg, &opt) < 0 || pred_in(self, pred, &pk, &opt) < 0)
		return NULL;
	if (conv_keys_in(keys, false, self->tenant, &ks) < 0) {
		conv_keys_free(&pk);
		return NULL;
	}
	switch (mbufs_get(allp, alls, ks.n, &mb)) {
	case -1:
		goto out;
	case 1:
		r = conv_code_list(ks.n, mc_put(KVP_EINVAL));
		goto out;
	}
	res = calloc(ks.n + 1, sizeof(*res));
	if (!res || mbufs_iov(mb, ks.n, &iov, &first) < 0) {
		PyErr_NoMemory();
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	STORE_CALL_NOGIL(self, rc, put_gather(self, &opt, ks.n, ks.k, iov, first, res));
	for (size_t i = 0; i < ks.n; i++)
		res[i] = mc_put(rc < 0 ? rc : res[i]);
	Py_END_ALLOW_THREADS
	r = conv_int_list(ks.n, res, NULL);
out:
	mbufs_free(mb, ks.n);
	free(iov);
	free(first);
	free(res);
	conv_keys_free(&ks);
	conv_keys_free(&pk);
	return r;
}

/* -> bytes read per key, or a Mooncake code. A value larger than the key's
 * buffers together fails with BUFFER_OVERFLOW; a smaller one fills them in
 * order. */
static PyObject *store_batch_get_into_multi_buffers(struct store *self, PyObject *args,
						    PyObject *kw)
{
	static char *kwlist[] = { "keys", "all_buffer_ptrs", "all_sizes",
				  "prefer_alloc_in_same_node", NULL };
	PyObject *keys, *allp, *alls, *r = NULL;
	struct mbuf *mb = NULL;
	struct conv_keys ks;
	void **bufs = NULL;
	size_t *caps = NULL;
	int64_t *res = NULL;
	int same = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|p:batch_get_into_multi_buffers", kwlist,
					 &keys, &allp, &alls, &same))
		return NULL;
	if (conv_keys_in(keys, false, self->tenant, &ks) < 0)
		return NULL;
	switch (mbufs_get(allp, alls, ks.n, &mb)) {
	case -1:
		goto out;
	case 1:
		r = conv_code_list(ks.n, mc(KVP_EINVAL));
		goto out;
	}
	bufs = calloc(ks.n + 1, sizeof(*bufs));
	caps = calloc(ks.n + 1, sizeof(*caps));
	res = calloc(ks.n + 1, sizeof(*res));
	if (!bufs || !caps || !res) {
		PyErr_NoMemory();
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	int rc = mbufs_flatten(mb, ks.n, bufs, caps);
	if (!rc)
		STORE_CALL_NOGIL(self, rc, kvp_batch_get_into(k, ks.n, ks.k, bufs, caps, res));
	for (size_t i = 0; i < ks.n; i++) {
		int64_t v = rc < 0 ? rc : res[i];

		if (v > 0 && mb[i].stage) {
			size_t off = 0;

			for (size_t j = 0; j < mb[i].n && off < (size_t)v; j++) {
				size_t l = mb[i].len[j] < (size_t)v - off ? mb[i].len[j] :
					   (size_t)v - off;

				memcpy(mb[i].p[j], mb[i].stage + off, l);
				off += l;
			}
		}
		res[i] = v >= 0 ? v : mc(v);
	}
	Py_END_ALLOW_THREADS
	r = conv_int_list(ks.n, NULL, res);
out:
	mbufs_free(mb, ks.n);
	free(bufs);
	free(caps);
	free(res);
	conv_keys_free(&ks);
	return r;
}

/* ---- batch calls on values ----------------------------------------------- */

/* The per-key results of batch_is_exist (1, 0 or -1) or, with @remove, of
 * batch_remove (Mooncake codes). */
static PyObject *batch_exists_remove(struct store *self, PyObject *keys, bool remove, int flags)
{
	struct conv_keys ks;
	PyObject *r;
	int *res, rc;

	if (conv_keys_in(keys, false, self->tenant, &ks) < 0)
		return NULL;
	res = calloc(ks.n + 1, sizeof(*res));
	if (!res) {
		conv_keys_free(&ks);
		return PyErr_NoMemory();
	}
	Py_BEGIN_ALLOW_THREADS
	STORE_CALL_NOGIL(self, rc, remove ? kvp_batch_remove(k, ks.n, ks.k, flags, res) :
					    kvp_batch_exists(k, ks.n, ks.k, res));
	for (size_t i = 0; i < ks.n; i++) {
		int v = rc < 0 ? rc : res[i];

		res[i] = remove ? mc(v) : mc_exist(v);
	}
	Py_END_ALLOW_THREADS
	r = conv_int_list(ks.n, res, NULL);
	free(res);
	conv_keys_free(&ks);
	return r;
}

static PyObject *store_batch_is_exist(struct store *self, PyObject *keys)
{
	return batch_exists_remove(self, keys, false, 0);
}

static PyObject *store_batch_remove(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "force", NULL };
	PyObject *keys;
	int force = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p:batch_remove", kwlist, &keys, &force))
		return NULL;
	return batch_exists_remove(self, keys, true, force ? KVP_REMOVE_FORCE : 0);
}

/* get_batch(keys) -> [bytes]: sizes first (one round trip), then every value
 * straight into its bytes object (one more); b"" for a missing key. */
static PyObject *store_get_batch(struct store *self, PyObject *keys)
{
	struct conv_keys ks;
	PyObject **objs = NULL, *r = NULL;
	int64_t *sizes = NULL, *res = NULL;
	void **bufs = NULL;
	size_t *caps = NULL;
	int rc = 0;

	if (conv_keys_in(keys, false, self->tenant, &ks) < 0)
		return NULL;
	objs = calloc(ks.n + 1, sizeof(*objs));
	sizes = calloc(ks.n + 1, sizeof(*sizes));
	res = calloc(ks.n + 1, sizeof(*res));
	bufs = calloc(ks.n + 1, sizeof(*bufs));
	caps = calloc(ks.n + 1, sizeof(*caps));
	if (!objs || !sizes || !res || !bufs || !caps) {
		PyErr_NoMemory();
		goto out;
	}
	STORE_CALL(self, rc, kvp_batch_size(k, ks.n, ks.k, sizes));
	for (size_t i = 0; i < ks.n; i++) {
		Py_ssize_t len = rc == 0 && sizes[i] > 0 ? (Py_ssize_t)sizes[i] : 0;

		objs[i] = PyBytes_FromStringAndSize(NULL, len);
		if (!objs[i])
			goto out;
		bufs[i] = len ? PyBytes_AS_STRING(objs[i]) : NULL;
		caps[i] = (size_t)len;
	}
	if (rc == 0) {
		/* The bytes objects are ours alone until returned: filling them
		 * without the GIL is safe. */
		STORE_CALL(self, rc, kvp_batch_get_into(k, ks.n, ks.k, bufs, caps, res));
	}
	r = PyList_New((Py_ssize_t)ks.n);
	if (!r)
		goto out;
	for (size_t i = 0; i < ks.n; i++) {
		PyObject *o = objs[i];

		/* Removed and put again with another size since the sizes were
		 * read: one more try by itself. */
		if (rc == 0 && caps[i] && (res[i] == KVP_ETOOBIG ||
					   (res[i] >= 0 && res[i] != (int64_t)caps[i]))) {
			void *buf = NULL;
			size_t len = 0;
			int grc;

			STORE_CALL(self, grc, kvp_get(k, ks.k[i], &buf, &len));
			if (grc == 0) {
				Py_DECREF(o);
				o = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
				kvp_free(buf);
				if (!o) {
					objs[i] = NULL;
					Py_CLEAR(r);
					goto out;
				}
				caps[i] = len;
				res[i] = (int64_t)len;
			}
		}
		if (rc < 0 || !caps[i] || res[i] != (int64_t)caps[i]) {
			Py_DECREF(o);
			o = PyBytes_FromStringAndSize(NULL, 0);
			if (!o) {
				objs[i] = NULL;
				Py_CLEAR(r);
				goto out;
			}
		}
		PyList_SET_ITEM(r, (Py_ssize_t)i, o);
		objs[i] = NULL;
	}
out:
	for (size_t i = 0; objs && i < ks.n; i++)
		Py_XDECREF(objs[i]);
	free(objs);
	free(sizes);
	free(res);
	free(bufs);
	free(caps);
	conv_keys_free(&ks);
	return r;
}

/* batch_get_buffer(keys) -> [BufferHandle or None]: sizes in one round
 * trip, then every value into a pymem block (reused pages) in another; a
 * value whose size changed in between is read again by itself. */
static PyObject *store_batch_get_buffer(struct store *self, PyObject *keys)
{
	struct conv_keys ks;
	PyObject *r = NULL;
	int64_t *sizes = NULL, *res = NULL;
	void **bufs = NULL;
	size_t *caps = NULL, *blk = NULL;
	int rc = 0;

	if (conv_keys_in(keys, false, self->tenant, &ks) < 0)
		return NULL;
	sizes = calloc(ks.n + 1, sizeof(*sizes));
	res = calloc(ks.n + 1, sizeof(*res));
	bufs = calloc(ks.n + 1, sizeof(*bufs));
	caps = calloc(ks.n + 1, sizeof(*caps));
	blk = calloc(ks.n + 1, sizeof(*blk));
	if (!sizes || !res || !bufs || !caps || !blk) {
		PyErr_NoMemory();
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	STORE_CALL_NOGIL(self, rc, kvp_batch_size(k, ks.n, ks.k, sizes));
	for (size_t i = 0; rc == 0 && i < ks.n; i++) {
		res[i] = KVP_ENOTFOUND;
		if (sizes[i] <= 0)
			continue;
		bufs[i] = pymem_alloc((size_t)sizes[i], &blk[i]);
		caps[i] = bufs[i] ? (size_t)sizes[i] : 0;
	}
	if (rc == 0)
		STORE_CALL_NOGIL(self, rc, kvp_batch_get_into(k, ks.n, ks.k, bufs, caps, res));
	for (size_t i = 0; rc == 0 && i < ks.n; i++) {
		void *one = NULL;
		size_t len = 0;
		int grc;

		if (!caps[i] || (res[i] != KVP_ETOOBIG && res[i] == (int64_t)caps[i]))
			continue;
		if (res[i] < 0 && res[i] != KVP_ETOOBIG)
			continue;
		/* Replaced by a value of another size since the sizes were read. */
		STORE_CALL_NOGIL(self, grc, kvp_get(k, ks.k[i], &one, &len));
		pymem_free(bufs[i], blk[i]);
		bufs[i] = NULL;
		caps[i] = 0;
		res[i] = grc;
		if (grc == 0 && (bufs[i] = pymem_alloc(len, &blk[i]))) {
			memcpy(bufs[i], one, len);
			caps[i] = len;
			res[i] = (int64_t)len;
		}
		kvp_free(one);
	}
	Py_END_ALLOW_THREADS
	r = PyList_New((Py_ssize_t)ks.n);
	for (size_t i = 0; r && i < ks.n; i++) {
		PyObject *o;

		if (rc == 0 && bufs[i] && res[i] == (int64_t)caps[i]) {
			o = pybuf_new(bufs[i], caps[i], blk[i], PYBUF_MEM);
			bufs[i] = NULL;
		} else {
			o = Py_NewRef(Py_None);
		}
		if (!o) {
			Py_CLEAR(r);
			break;
		}
		PyList_SET_ITEM(r, (Py_ssize_t)i, o);
	}
out:
	for (size_t i = 0; bufs && i < ks.n; i++)
		pymem_free(bufs[i], blk[i]);
	free(sizes);
	free(res);
	free(bufs);
	free(caps);
	free(blk);
	conv_keys_free(&ks);
	return r;
}

/* _batch_put_parts(keys, all_parts, config=None, upsert=False) -> [int]:
 * value i is the concatenation of all_parts[i], each part a bytes-like
 * object or an (address, size) pair (host or CUDA device memory). The
 * tensor calls' path: [TensorMetadata][data] without a copy in Python. */
static PyObject *store_batch_put_parts(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "all_parts", "config", "upsert", "pred", NULL };
	PyObject *keys, *all, *cfg = NULL, *fast = NULL, *pred = NULL, *r = NULL;
	struct conv_keys ks = { 0 }, pk = { 0 };
	struct putopt opt;
	struct kvp_iov *iov = NULL;
	Py_buffer *views = NULL;
	size_t *first = NULL, niov = 0, nviews = 0, cap = 0;
	int *res = NULL, upsert = 0, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OpO:_batch_put_parts", kwlist, &keys, &all,
					 &cfg, &upsert, &pred))
		return NULL;
	if (putopt_get(cfg, &opt) < 0 || pred_in(self, pred, &pk, &opt) < 0)
		return NULL;
	if (conv_keys_in(keys, false, self->tenant, &ks) < 0) {
		conv_keys_free(&pk);
		return NULL;
	}
	opt.upsert = upsert;
	fast = PySequence_Fast(all, "all_parts must be a list of lists");
	if (!fast)
		goto out;
	if ((size_t)PySequence_Fast_GET_SIZE(fast) != ks.n) {
		PyErr_SetString(PyExc_ValueError, "_batch_put_parts: one list of parts per key");
		goto out;
	}
	for (size_t i = 0; i < ks.n; i++) {
		Py_ssize_t m = PyObject_Size(PySequence_Fast_GET_ITEM(fast, (Py_ssize_t)i));

		if (m < 0)
			goto out;
		cap += (size_t)m;
	}
	iov = calloc(cap + 1, sizeof(*iov));
	views = calloc(cap + 1, sizeof(*views));
	first = calloc(ks.n + 1, sizeof(*first));
	res = calloc(ks.n + 1, sizeof(*res));
	if (!iov || !views || !first || !res) {
		PyErr_NoMemory();
		goto out;
	}
	for (size_t i = 0; i < ks.n; i++) {
		PyObject *parts = PySequence_Fast(PySequence_Fast_GET_ITEM(fast, (Py_ssize_t)i),
						  "parts must be a list");

		if (!parts)
			goto out;
		first[i] = niov;
		for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(parts) && niov < cap; j++) {
			PyObject *p = PySequence_Fast_GET_ITEM(parts, j);
			uint64_t a, n;

			if (PyTuple_Check(p) && PyTuple_GET_SIZE(p) == 2) {
				if (conv_u64(PyTuple_GET_ITEM(p, 0), &a, "address") < 0 ||
				    conv_u64(PyTuple_GET_ITEM(p, 1), &n, "size") < 0) {
					Py_DECREF(parts);
					goto out;
				}
				iov[niov++] = (struct kvp_iov){ (const void *)(uintptr_t)a, (size_t)n };
				continue;
			}
			if (PyObject_GetBuffer(p, &views[nviews], PyBUF_SIMPLE) < 0) {
				Py_DECREF(parts);
				goto out;
			}
			iov[niov++] = (struct kvp_iov){ views[nviews].buf, (size_t)views[nviews].len };
			nviews++;
		}
		Py_DECREF(parts);
	}
	first[ks.n] = niov;
	Py_BEGIN_ALLOW_THREADS
	STORE_CALL_NOGIL(self, rc, put_gather(self, &opt, ks.n, ks.k, iov, first, res));
	for (size_t i = 0; i < ks.n; i++)
		res[i] = mc_put(rc < 0 ? rc : res[i]);
	Py_END_ALLOW_THREADS
	r = conv_int_list(ks.n, res, NULL);
out:
	for (size_t i = 0; i < nviews; i++)
		PyBuffer_Release(&views[i]);
	free(views);
	free(iov);
	free(first);
	free(res);
	Py_XDECREF(fast);
	conv_keys_free(&ks);
	conv_keys_free(&pk);
	return r;
}

PyMethodDef batch_methods[] = {
	{ "put_batch", METH(store_put_batch), KW,
	  "put_batch(keys, values, config=None, *, pred=None) -> int (0, or the first failure)" },
	{ "upsert_batch", METH(store_upsert_batch), KW,
	  "upsert_batch(keys, values, config=None, *, pred=None) -> int (0, or the first failure)" },
	{ "get_batch", METH(store_get_batch), METH_O, "get_batch(keys) -> [bytes]" },
	{ "_batch_put_parts", METH(store_batch_put_parts), KW,
	  "_batch_put_parts(keys, all_parts, config=None, upsert=False, pred=None) -> [int]" },
	{ "batch_get_buffer", METH(store_batch_get_buffer), METH_O,
	  "batch_get_buffer(keys) -> [BufferHandle or None]" },
	{ "batch_is_exist", METH(store_batch_is_exist), METH_O,
	  "batch_is_exist(keys) -> [1, 0 or -1]" },
	{ "batch_remove", METH(store_batch_remove), KW, "batch_remove(keys, force=False) -> [int]" },
	{ "batch_put_from", METH(store_batch_put_from), KW,
	  "batch_put_from(keys, buffer_ptrs, sizes, config=None, *, pred=None) -> [int]; "
	  "the values are a chain in key order; pred names the key the first extends" },
	{ "batch_upsert_from", METH(store_batch_upsert_from), KW,
	  "batch_upsert_from(keys, buffer_ptrs, sizes, config=None, *, pred=None) -> [int]" },
	{ "batch_get_into", METH(store_batch_get_into), KW,
	  "batch_get_into(keys, buffer_ptrs, sizes) -> [bytes read or negative code]" },
	{ "batch_put_from_multi_buffers", METH(store_batch_put_from_multi_buffers), KW,
	  "batch_put_from_multi_buffers(keys, all_buffer_ptrs, all_sizes, config=None, *, "
	  "pred=None) -> [int]" },
	{ "batch_get_into_multi_buffers", METH(store_batch_get_into_multi_buffers), KW,
	  "batch_get_into_multi_buffers(keys, all_buffer_ptrs, all_sizes, "
	  "prefer_alloc_in_same_node=False) -> [bytes read or negative code]" },
	{ NULL }
};

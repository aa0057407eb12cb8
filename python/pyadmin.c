/* pyadmin: DistributedStore's administrative calls — health_check, replica
 * clearing, the segment calls (allocate_and_mount_segment, mount_segment,
 * unmount_segment, unmount_and_free_segment, unmount_local_disk_segment:
 * a segment here is an embedded kvpool-node, pynode.c) — and the module's
 * helpers for the Python layer (memcpy without the GIL, buffers,
 * bind_to_numa_node, the allocator entry points Mooncake exports).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "cuda.h"
#include "kvpool.h"
#include "numa_util.h"
#include "pyconf.h"
#include "pyconv.h"
#include "pyput.h"
#include "pystore.h"
#include "pytypes.h"

/* Mooncake's health_check() results (pyclient.h). */
enum { HC_HEALTHY = 0, HC_NOT_INITIALIZED = 1, HC_MASTER_UNREACHABLE = 2 };

#define HEALTH_KEY "kvpool/health_check"
#define SEG_PAGE 4096ull
#define SEG_MIN (1ull << 20)

/* health_check() -> 0 healthy, 1 not set up or closed, 2 master unreachable:
 * one round trip to the master. */
static PyObject *store_health_check(struct store *self, PyObject *unused)
{
	int rc, hc;

	STORE_CALL(self, rc, kvp_exists(k, HEALTH_KEY));
	if (rc == KVP_EINVAL && self->owner != getpid())
		hc = HC_NOT_INITIALIZED;
	else if (rc == 0 || rc == 1)
		hc = HC_HEALTHY;
	else if (!self->kvp)
		hc = HC_NOT_INITIALIZED;
	else
		hc = HC_MASTER_UNREACHABLE;
	return PyLong_FromLong(hc);
}

/* ---- replica clear ------------------------------------------------------------ */

/* One key's replicas on @node ("" = all of them): 0 when cleared. Objects
 * under a read lease are left alone, as Mooncake's master does. */
static int replica_clear_one(struct kvp *k, const char *key, const char *node)
{
	if (!node[0])
		return kvp_remove(k, key, 0);
	return kvp_replica_clear(k, key, node, 0);
}

/* batch_replica_clear(keys, segment_name="") -> [keys cleared]. */
static PyObject *store_batch_replica_clear(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "segment_name", NULL };
	PyObject *keys, *r = NULL;
	const char *seg = "";
	char node[64] = "";
	struct conv_keys ks;
	int *res = NULL, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|s:batch_replica_clear", kwlist, &keys, &seg))
		return NULL;
	if (conv_keys_in(keys, false, self->tenant, &ks) < 0)
		return NULL;
	res = calloc(ks.n + 1, sizeof(*res));
	if (!res) {
		conv_keys_free(&ks);
		return PyErr_NoMemory();
	}
	Py_BEGIN_ALLOW_THREADS
	struct kvp *k = store_enter(self);

	rc = KVP_EINVAL;
	if (k) {
		if (seg[0])
			put_node_name(self, k, seg, node, sizeof(node));
		for (size_t i = 0; i < ks.n; i++)
			res[i] = ks.k[i][0] ? replica_clear_one(k, ks.k[i], node) : KVP_EKEY;
		store_leave(self);
		rc = 0;
	}
	Py_END_ALLOW_THREADS
	r = PyList_New(0);
	for (size_t i = 0; r && rc == 0 && i < ks.n; i++) {
		PyObject *key;

		if (res[i] != 0)
			continue;
		const char *name = ks.k[i] + strlen(self->tenant);

		key = PyUnicode_DecodeUTF8(name, (Py_ssize_t)strlen(name), "surrogateescape");
		if (!key || PyList_Append(r, key) < 0)
			Py_CLEAR(r);
		Py_XDECREF(key);
	}
	free(res);
	conv_keys_free(&ks);
	return r;
}

/* ---- segments ------------------------------------------------------------------- */

/* {"ret": rc, "segment_ids": [...], "allocated_size": n} as Mooncake returns. */
static PyObject *seg_result(int rc, const char *name, uint64_t size, bool with_size)
{
	PyObject *ids = PyList_New(0), *d;

	if (ids && rc == 0) {
		PyObject *s = PyUnicode_FromString(name);

		if (!s || PyList_Append(ids, s) < 0)
			Py_CLEAR(ids);
		Py_XDECREF(s);
	}
	if (!ids)
		return NULL;
	d = with_size ? Py_BuildValue("{s:i,s:N,s:K}", "ret", rc, "segment_ids", ids,
				      "allocated_size", (unsigned long long)(rc ? 0 : size)) :
			Py_BuildValue("{s:i,s:N}", "ret", rc, "segment_ids", ids);
	return d;
}

/* A new embedded node, under the store's lock (write). */
static int seg_add(struct store *self, uint64_t size, const char *segment, char *name,
		   size_t namelen)
{
	int rc;

	if (self->owner != getpid())
		return KVP_EINVAL;
	Py_BEGIN_ALLOW_THREADS
	pthread_rwlock_wrlock(&self->lock);
	rc = self->kvp ? setup_emb_add(self, size, segment) : KVP_EINVAL;
	if (rc == 0)
		snprintf(name, namelen, "%s", self->emb[self->nemb - 1]->name);
	pthread_rwlock_unlock(&self->lock);
	Py_END_ALLOW_THREADS
	return rc;
}

/* allocate_and_mount_segment(size, protocol="tcp", location="") -> dict:
 * one more embedded node of @size bytes (whole pages, at least 1 MiB). */
static PyObject *store_allocate_and_mount_segment(struct store *self, PyObject *args,
						  PyObject *kw)
{
	static char *kwlist[] = { "size", "protocol", "location", NULL };
	unsigned long long size;
	const char *proto = "tcp", *loc = "";
	char name[64] = "";
	uint64_t sz;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "K|ss:allocate_and_mount_segment", kwlist,
					 &size, &proto, &loc))
		return NULL;
	sz = (size + SEG_PAGE - 1) / SEG_PAGE * SEG_PAGE;
	if (sz < SEG_MIN)
		sz = SEG_MIN;
	rc = size ? seg_add(self, sz, NULL, name, sizeof(name)) : KVP_EINVAL;
	return seg_result(mc(rc), name, sz, true);
}

/* mount_segment(path, size, offset=0, protocol="tcp", location="") -> dict:
 * a /dev/shm file becomes the segment of a new embedded node (its memory
 * joins the pool; the node formats it, as Mooncake only maps it). Only the
 * whole file, from offset 0, and a file that is empty or a kvpool segment:
 * -1 otherwise, as Mooncake fails. The file stays when unmounted. */
static PyObject *store_mount_segment(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "path", "size", "offset", "protocol", "location", NULL };
	unsigned long long size, off = 0;
	const char *path, *proto = "tcp", *loc = "", *base;
	char name[64] = "";
	struct stat st;
	int rc = -1;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "sK|Kss:mount_segment", kwlist, &path, &size,
					 &off, &proto, &loc))
		return NULL;
	base = strrchr(path, '/');
	if (!base || strncmp(path, "/dev/shm/", 9) || base != path + 8 || !base[1] || off ||
	    stat(path, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size ||
	    size % SEG_PAGE || size < SEG_MIN)
		return seg_result(-1, "", 0, false);
	rc = seg_add(self, size, base + 1, name, sizeof(name));
	return seg_result(rc ? -1 : 0, name, size, false);
}

/* unmount_segment(segment_ids, grace_period_seconds=0) and
 * unmount_and_free_segment: each node drains (transfers finish), unmounts
 * at the master (its objects leave the pool at once) and stops. The first
 * failure's code (-1 for an id this store does not hold), 0 otherwise. */
static PyObject *do_unmount(struct store *self, PyObject *args, PyObject *kw, const char *fn)
{
	static char *kwlist[] = { "segment_ids", "grace_period_seconds", NULL };
	unsigned long long grace = 0;
	struct conv_keys ids;
	PyObject *seq;
	char fmt[64];
	int first = 0;

	snprintf(fmt, sizeof(fmt), "O|K:%s", fn);
	if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &seq, &grace) ||
	    conv_keys(seq, false, &ids) < 0)
		return NULL;
	if (self->owner != getpid()) {
		conv_keys_free(&ids);
		return PyLong_FromLong(-1);
	}
	Py_BEGIN_ALLOW_THREADS
	pthread_rwlock_wrlock(&self->lock);
	for (size_t i = 0; i < ids.n; i++)
		if (setup_emb_del(self, ids.k[i]) < 0 && !first)
			first = -1;
	pthread_rwlock_unlock(&self->lock);
	Py_END_ALLOW_THREADS
	conv_keys_free(&ids);
	return PyLong_FromLong(first);
}

static PyObject *store_unmount_segment(struct store *self, PyObject *args, PyObject *kw)
{
	return do_unmount(self, args, kw, "unmount_segment");
}

static PyObject *store_unmount_and_free_segment(struct store *self, PyObject *args, PyObject *kw)
{
	return do_unmount(self, args, kw, "unmount_and_free_segment");
}

/* unmount_local_disk_segment(grace_period_seconds=0): Mooncake's local SSD
 * segment is the spill tier of this store's nodes; they keep it until they
 * stop. 0 when the store has no such tier, else UNAVAILABLE_IN_CURRENT_MODE. */
static PyObject *store_unmount_local_disk_segment(struct store *self, PyObject *args,
						  PyObject *kw)
{
	static char *kwlist[] = { "grace_period_seconds", NULL };
	unsigned long long grace = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|K:unmount_local_disk_segment", kwlist,
					 &grace))
		return NULL;
	return PyLong_FromLong(self->ssd_dir[0] && self->nemb ? mc(KVP_ENOTSUP) : 0);
}

/* _segments() -> [(node name, /dev/shm segment, size, data port)]: the
 * store's embedded nodes (get_replica_desc's transport endpoints). */
static PyObject *store_segments(struct store *self, PyObject *unused)
{
	PyObject *l = PyList_New(0);

	for (size_t i = 0; l && self->owner == getpid() && i < self->nemb; i++) {
		struct emb *e = self->emb[i];
		PyObject *t = Py_BuildValue("(ssKi)", e->name, e->segment,
					    (unsigned long long)e->size, e->port);

		if (!t || PyList_Append(l, t) < 0)
			Py_CLEAR(l);
		Py_XDECREF(t);
	}
	return l;
}

/* _declare_namespace(name, model, dtype, page_size, layout, tp) -> (code,
 * message): code is the KVP_E* value itself (0 declared), for
 * declare_namespace (_store.py) to raise on. */
static PyObject *store_declare_namespace(struct store *self, PyObject *args)
{
	struct kvp_ns ns;
	unsigned int page_size, tp;
	char msg[1024] = "";
	int rc;

	if (!PyArg_ParseTuple(args, "sssIsI:_declare_namespace", &ns.name, &ns.model, &ns.dtype,
			      &page_size, &ns.layout, &tp))
		return NULL;
	ns.page_size = page_size;
	ns.tp = tp;
	STORE_CALL(self, rc, kvp_declare_namespace_msg(k, &ns, msg, sizeof(msg)));
	if (rc == KVP_EINVAL && !msg[0])
		snprintf(msg, sizeof(msg), "the store is not set up");
	return Py_BuildValue("(is)", rc, msg);
}

/* _namespaces() -> [dict] of the master's namespaces, or an int code. */
static PyObject *store_namespaces(struct store *self, PyObject *unused)
{
	struct kvp_ns_info *v = NULL;
	size_t n = 0;
	int rc;

	STORE_CALL(self, rc, kvp_namespaces(k, &v, &n));
	if (rc)
		return PyLong_FromLong(rc);
	PyObject *l = PyList_New(0);
	for (size_t i = 0; l && i < n; i++) {
		char fp[17];
		snprintf(fp, sizeof(fp), "%016llx", (unsigned long long)v[i].fingerprint);
		PyObject *d = Py_BuildValue("{s:s,s:s,s:s,s:I,s:s,s:I,s:s,s:K,s:K,s:I}",
					    "name", v[i].name, "model", v[i].model,
					    "dtype", v[i].dtype, "page_size", v[i].page_size,
					    "layout", v[i].layout, "tp", v[i].tp, "fingerprint", fp,
					    "keys", (unsigned long long)v[i].keys,
					    "bytes", (unsigned long long)v[i].bytes,
					    "clients", v[i].clients);
		if (!d || PyList_Append(l, d) < 0)
			Py_CLEAR(l);
		Py_XDECREF(d);
	}
	kvp_free(v);
	return l;
}

PyMethodDef admin_methods[] = {
	{ "health_check", METH(store_health_check), METH_NOARGS,
	  "health_check() -> 0 healthy, 1 not initialized or closed, 2 master unreachable" },
	{ "batch_replica_clear", METH(store_batch_replica_clear), KW,
	  "batch_replica_clear(keys, segment_name='') -> [keys cleared]; objects under a read "
	  "lease are skipped" },
	{ "allocate_and_mount_segment", METH(store_allocate_and_mount_segment), KW,
	  "allocate_and_mount_segment(size, protocol='tcp', location='') -> "
	  "{'ret', 'segment_ids', 'allocated_size'}" },
	{ "mount_segment", METH(store_mount_segment), KW,
	  "mount_segment(path, size, offset=0, protocol='tcp', location='') -> "
	  "{'ret', 'segment_ids'}: a whole /dev/shm file joins the pool" },
	{ "unmount_segment", METH(store_unmount_segment), KW,
	  "unmount_segment(segment_ids, grace_period_seconds=0) -> int" },
	{ "unmount_and_free_segment", METH(store_unmount_and_free_segment), KW,
	  "unmount_and_free_segment(segment_ids, grace_period_seconds=0) -> int" },
	{ "unmount_local_disk_segment", METH(store_unmount_local_disk_segment), KW,
	  "unmount_local_disk_segment(grace_period_seconds=0) -> int" },
	{ "_declare_namespace", METH(store_declare_namespace), METH_VARARGS,
	  "_declare_namespace(name, model, dtype, page_size, layout, tp) -> (KVP_E* code, message)" },
	{ "_namespaces", METH(store_namespaces), METH_NOARGS,
	  "_namespaces() -> [dict] of the master's namespaces, or a KVP_E* code" },
	{ "_segments", METH(store_segments), METH_NOARGS,
	  "_segments() -> [(node, shm segment, size, port)] of the embedded nodes" },
	{ NULL }
};

/* ---- module helpers ------------------------------------------------------------ */

/* _memcpy_many(dsts, srcs, sizes): memcpy of each triple without the GIL
 * (the Python layer's ranged and session calls). Addresses are trusted, as
 * everywhere in Mooncake's API. */
static PyObject *mod_memcpy_many(PyObject *mod, PyObject *args)
{
	PyObject *dl, *sl, *nl;
	uint64_t *d = NULL, *s = NULL, *n = NULL;
	Py_ssize_t nd = 0;
	PyObject *r = NULL;

	if (!PyArg_ParseTuple(args, "OOO:_memcpy_many", &dl, &sl, &nl))
		return NULL;
	if (conv_u64s(dl, -1, &d, &nd, "dsts") < 0 || conv_u64s(sl, nd, &s, NULL, "srcs") < 0 ||
	    conv_u64s(nl, nd, &n, NULL, "sizes") < 0)
		goto out;
	int rc = 0;

	Py_BEGIN_ALLOW_THREADS
	for (Py_ssize_t i = 0; i < nd && rc == 0; i++) {
		void *dp = (void *)(uintptr_t)d[i];
		const void *sp = (const void *)(uintptr_t)s[i];

		if (!n[i])
			continue;
		if (cuda_is_device(dp) || cuda_is_device(sp))
			rc = cuda_memcpy(dp, sp, (size_t)n[i]);
		else
			memmove(dp, sp, (size_t)n[i]);
	}
	Py_END_ALLOW_THREADS
	if (rc < 0)
		PyErr_Format(PyExc_OSError, "cudaMemcpy failed (%s)", cuda_status());
	else
		r = Py_NewRef(Py_None);
out:
	free(d);
	free(s);
	free(n);
	return r;
}

/* _read_bytes(ptr, n) -> bytes at ptr, host or CUDA device memory. */
static PyObject *mod_read_bytes(PyObject *mod, PyObject *args)
{
	unsigned long long p, n;
	PyObject *b;
	int rc = 0;

	if (!PyArg_ParseTuple(args, "KK:_read_bytes", &p, &n))
		return NULL;
	b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
	if (!b || !n)
		return b;
	if (cuda_is_device((const void *)(uintptr_t)p))
		rc = cuda_memcpy(PyBytes_AS_STRING(b), (const void *)(uintptr_t)p, (size_t)n);
	else
		memcpy(PyBytes_AS_STRING(b), (const void *)(uintptr_t)p, (size_t)n);
	if (rc < 0) {
		Py_DECREF(b);
		return PyErr_Format(PyExc_OSError, "cudaMemcpy failed (%s)", cuda_status());
	}
	return b;
}

/* _is_device(ptr) -> True for CUDA device memory. */
static PyObject *mod_is_device(PyObject *mod, PyObject *arg)
{
	uint64_t p;

	if (conv_u64(arg, &p, "ptr") < 0)
		return NULL;
	return PyBool_FromLong(cuda_is_device((const void *)(uintptr_t)p));
}

/* _mc_size(text) -> bytes as Mooncake parses a size string, None if it
 * does not (setup()'s rule, for tests and tools). */
static PyObject *mod_mc_size(PyObject *mod, PyObject *arg)
{
	const char *s = PyUnicode_AsUTF8(arg);
	uint64_t v;

	if (!s)
		return NULL;
	if (mc_parse_size(s, &v) < 0)
		Py_RETURN_NONE;
	return PyLong_FromUnsignedLongLong(v);
}

/* _alloc_buffer(n) -> a writable BufferHandle of n bytes (pymem). */
static PyObject *mod_alloc_buffer(PyObject *mod, PyObject *arg)
{
	uint64_t n;

	if (conv_u64(arg, &n, "size") < 0)
		return NULL;
	return pybuf_alloc((size_t)n);
}

/* bind_to_numa_node(node): the calling thread (and threads it starts) on
 * the node's CPUs; as Mooncake, problems are logged, not raised. */
static PyObject *mod_bind_to_numa_node(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "node", NULL };
	int node, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "i:bind_to_numa_node", kwlist, &node))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = numa_util_bind_thread(node);
	Py_END_ALLOW_THREADS
	if (rc < 0 && PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "bind_to_numa_node(%d): %s", node,
				       rc == -ENOTSUP ? "NUMA is not available on this system" :
				       strerror(-rc)) < 0)
		return NULL;
	Py_RETURN_NONE;
}

/* The allocator pair Mooncake exports for torch's pluggable allocators
 * (void *alloc(ssize_t size, int device, void *stream), free(ptr, size,
 * device, stream)): page-backed host memory. */
static void *host_alloc(ssize_t size, int device, void *stream)
{
	void *p = mmap(NULL, size > 0 ? (size_t)size : 1, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	(void)device;
	(void)stream;
	return p == MAP_FAILED ? NULL : p;
}

static void host_free(void *ptr, ssize_t size, int device, void *stream)
{
	(void)device;
	(void)stream;
	if (ptr)
		munmap(ptr, size > 0 ? (size_t)size : 1);
}

static PyObject *mod_get_alloc_func_addr(PyObject *mod, PyObject *unused)
{
	return PyLong_FromVoidPtr((void *)(uintptr_t)host_alloc);
}

static PyObject *mod_get_free_func_addr(PyObject *mod, PyObject *unused)
{
	return PyLong_FromVoidPtr((void *)(uintptr_t)host_free);
}

PyMethodDef admin_module_methods[] = {
	{ "_memcpy_many", mod_memcpy_many, METH_VARARGS, "_memcpy_many(dsts, srcs, sizes)" },
	{ "_alloc_buffer", mod_alloc_buffer, METH_O, "_alloc_buffer(n) -> BufferHandle" },
	{ "_mc_size", mod_mc_size, METH_O, "_mc_size(text) -> bytes or None (Mooncake's sizes)" },
	{ "_read_bytes", mod_read_bytes, METH_VARARGS, "_read_bytes(ptr, n) -> bytes" },
	{ "_is_device", mod_is_device, METH_O, "_is_device(ptr) -> bool (CUDA device memory)" },
	{ "bind_to_numa_node", METH(mod_bind_to_numa_node), KW,
	  "bind_to_numa_node(node): runs the calling thread on the node's CPUs" },
	{ "get_alloc_func_addr", mod_get_alloc_func_addr, METH_NOARGS,
	  "get_alloc_func_addr() -> address of void *alloc(ssize_t, int, void *)" },
	{ "get_free_func_addr", mod_get_free_func_addr, METH_NOARGS,
	  "get_free_func_addr() -> address of void free(void *, ssize_t, int, void *)" },
	{ NULL }
};

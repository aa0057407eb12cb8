/* kvpool_module: the CPython extension `kvpool` — Mooncake's
 * MooncakeDistributedStore API over libkvpool, plus an embedded kvpool-node
 * when setup() gets a global_segment_size. Threads: blocking libkvpool calls
 * run without the GIL under store->lock held for reading; setup/close hold it
 * for writing. The embedded node's ev loop runs on its own pthread.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"
#include "kvpool.h"
#include "log.h"
#include "node.h"

#ifndef KVP_VERSION
#define KVP_VERSION "0"
#endif

/* PyMethodDef wants PyCFunction; the detour through void (*)(void) keeps
 * -Wcast-function-type quiet for methods with other signatures. */
#define METH(f) ((PyCFunction)(void (*)(void))(f))

#define PAGE_KEYS 1000u			/* keys per kvp_list page (remove_by_regex) */
#define REMOVE_CHUNK 1024u		/* keys per kvp_batch_remove */
#define HARD_PIN_MS (100ull * 365 * 24 * 3600 * 1000)	/* "forever" for with_hard_pin */

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

static int mc(int64_t rc)
{
	return rc >= 0 ? (int)rc : kvp_to_mooncake((int)rc);
}

/* Puts: Mooncake's client treats "already exists" as success (objects are
 * immutable, the first writer's bytes are what a get returns). */
static int mc_put(int rc)
{
	return rc == KVP_EEXIST ? 0 : mc(rc);
}

/* is_exist / batch_is_exist: 1, 0, or -1 for any error (Mooncake's docs). */
static int mc_exist(int rc)
{
	return rc == 0 || rc == 1 ? rc : -1;
}

/* ---- small helpers ------------------------------------------------------ */

struct strv {
	char **v;			/* NULL-terminated */
	size_t n, cap;
};

static int strv_add(struct strv *s, const char *str)
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

static int strv_addf(struct strv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int strv_addf(struct strv *s, const char *fmt, ...)
{
	char buf[CONF_STR * 2];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return -1;
	return strv_add(s, buf);
}

static void strv_free(struct strv *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Keys of one call, copied out of the Python objects so that the GIL can be
 * released while libkvpool reads them (another thread may mutate the list).
 * A key that cannot be a kvpool key (embedded NUL) becomes "", which
 * libkvpool rejects per item with KVP_EKEY. */
struct keys {
	size_t n;
	const char **k;
	char *arena;
};

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

static void keys_free(struct keys *ks)
{
	free(ks->k);
	free(ks->arena);
	memset(ks, 0, sizeof(*ks));
}

/* @seq: a sequence of keys, or (one == true) a single key. -1 with an
 * exception set. */
static int keys_get(PyObject *seq, bool one, struct keys *ks)
{
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
		total += (size_t)len + 1;
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
		if (memchr(p, 0, (size_t)len)) {
			ks->arena[off++] = 0;	/* invalid: empty key -> KVP_EKEY */
			continue;
		}
		memcpy(ks->arena + off, p, (size_t)len);
		off += (size_t)len;
		ks->arena[off++] = 0;
	}
	ks->n = (size_t)n;
	rc = 0;
out:
	Py_XDECREF(fast);
	if (rc < 0)
		keys_free(ks);
	return rc;
}

/* An address or a size from Python: a non-negative int. */
static int u64_get(PyObject *o, uint64_t *out, const char *what)
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
static int u64s_get(PyObject *seq, Py_ssize_t n, uint64_t **out, Py_ssize_t *got,
		    const char *what)
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
		if (u64_get(PySequence_Fast_GET_ITEM(fast, i), &(*out)[i], what) < 0)
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
static int ptr_lists_get(PyObject *pl, PyObject *sl, size_t n, void ***bufs, size_t **lens)
{
	uint64_t *ptrs = NULL, *sizes = NULL;
	int rc = -1;

	*bufs = NULL;
	*lens = NULL;
	if (u64s_get(pl, (Py_ssize_t)n, &ptrs, NULL, "buffer_ptrs") < 0 ||
	    u64s_get(sl, (Py_ssize_t)n, &sizes, NULL, "sizes") < 0)
		goto out;
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

/* A list of the n results in @iv, or (iv NULL) in @lv. */
static PyObject *int_list(size_t n, const int *iv, const int64_t *lv)
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

static PyTypeObject repcfg_type = {
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

struct putopt {
	int replicas;			/* 0 = the handle's client.replicas */
	bool hard_pin;
	bool valid;			/* false: the put fails with KVP_EINVAL */
};

/* Reads replica_num / with_hard_pin from any object that has them (ours or
 * a real mooncake.store.ReplicateConfig). 0 (po->valid false for an invalid
 * value), -1 with an exception. */
static int putopt_get(PyObject *cfg, struct putopt *po)
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

static PyTypeObject pybuf_type = {
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
static PyObject *pybuf_new(void *p, size_t len)
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

/* ---- the store --------------------------------------------------------- */

struct reg {
	void *p;
	size_t len;
};

enum node_state { NODE_STARTING, NODE_READY, NODE_EXITED };

struct store {
	PyObject_HEAD
	/* Read-held (GIL released) by every call that uses a handle; write-held
	 * by setup and close. Writers are preferred so close is not starved. */
	pthread_rwlock_t lock;
	struct kvp *kvp;		/* protected by lock */
	int def_replicas;		/* client.replicas of kvp */
	/* Handles opened on demand for ReplicateConfig.replica_num != def_replicas,
	 * and the registered buffers to replay on them. */
	pthread_mutex_t hlock;
	struct kvp *rep[KVP_MAX_REPLICAS + 1];	/* protected by hlock */
	struct reg *regs;			/* protected by hlock */
	size_t nregs, capregs;
	/* How kvp was opened (for the extra handles); written under lock (write). */
	char *config_file;
	struct strv overrides;
	/* Embedded node (setup with global_segment_size > 0). */
	struct node *node;
	pthread_t node_thr;
	pthread_mutex_t nlock;
	pthread_cond_t ncond;
	enum node_state nstate;		/* protected by nlock */
	int node_rc;			/* protected by nlock */
	char node_segment[CONF_STR];
	char hostname[CONF_STR];
	char errmsg[1024];		/* last setup failure */
	pid_t owner;			/* process that set it up; 0 = not set up */
	struct store *live_prev, *live_next;	/* live list, protected by the GIL */
};

static struct store *live_stores;	/* protected by the GIL */
static unsigned store_seq;		/* protected by the GIL: segment names */

/* Called without the GIL: the handle for this call, with lock read-held, or
 * NULL (not set up, or a forked child: the connections, the node thread and
 * the lock's state belong to the parent). */
static struct kvp *store_enter(struct store *s)
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

static void store_leave(struct store *s)
{
	pthread_rwlock_unlock(&s->lock);
}

static int store_register_all(struct store *s, struct kvp *k)
{
	for (size_t i = 0; i < s->nregs; i++) {
		int rc = kvp_register_buffer(k, s->regs[i].p, s->regs[i].len);

		if (rc < 0 && rc != KVP_EEXIST)
			return rc;
	}
	return 0;
}

/* Inside store_enter: the handle that puts with @replicas replicas (0 = the
 * default handle); opens it on first use. NULL with *err. */
static struct kvp *store_handle(struct store *s, int replicas, int *err)
{
	struct kvp_open_opts o = { 0 };
	struct strv ov = { 0 };
	struct kvp *k;

	if (!replicas || replicas == s->def_replicas)
		return s->kvp;
	pthread_mutex_lock(&s->hlock);
	k = s->rep[replicas];
	if (k)
		goto out;
	for (size_t i = 0; i < s->overrides.n; i++) {
		if (strv_add(&ov, s->overrides.v[i]) < 0)
			goto out_nomem;
	}
	if (strv_addf(&ov, "client.replicas=%d", replicas) < 0)
		goto out_nomem;
	o.config_file = s->config_file;
	o.overrides = (const char *const *)ov.v;
	k = kvp_open(&o, err);
	if (k) {
		int rc = store_register_all(s, k);

		if (rc < 0) {
			kvp_close(k);
			k = NULL;
			*err = rc;
		}
	}
	s->rep[replicas] = k;
	goto out;
out_nomem:
	*err = KVP_ENOMEM;
out:
	pthread_mutex_unlock(&s->hlock);
	strv_free(&ov);
	return k;
}

/* Every handle, for calls that must reach all of them. */
static size_t store_handles(struct store *s, struct kvp **out)
{
	size_t n = 0;

	out[n++] = s->kvp;
	pthread_mutex_lock(&s->hlock);
	for (int i = 1; i <= KVP_MAX_REPLICAS; i++)
		if (s->rep[i])
			out[n++] = s->rep[i];
	pthread_mutex_unlock(&s->hlock);
	return n;
}

/* Runs @expr, an int expression that may use the handle k, inside
 * store_enter/store_leave: @rc receives its value, or KVP_EINVAL when the
 * store is not set up. STORE_CALL releases the GIL around it; the _NOGIL
 * form is for code that has released it already. */
#define STORE_CALL_NOGIL(s, rc, expr)			\
	do {						\
		struct kvp *k = store_enter(s);		\
							\
		(rc) = KVP_EINVAL;			\
		if (k) {				\
			(rc) = (expr);			\
			store_leave(s);			\
		}					\
	} while (0)

#define STORE_CALL(s, rc, expr)				\
	do {						\
		Py_BEGIN_ALLOW_THREADS			\
		STORE_CALL_NOGIL(s, rc, expr);		\
		Py_END_ALLOW_THREADS			\
	} while (0)

/* Inside store_enter: the handle that puts as @po asks, or NULL with *rc. */
static struct kvp *put_handle(struct store *s, const struct putopt *po, int *rc)
{
	*rc = KVP_EINVAL;
	return po->valid ? store_handle(s, po->replicas, rc) : NULL;
}

/* Inside store_enter: one value through the handle for @po (kvp_put, or
 * kvp_put_from for a registered buffer), pinned when @po asks. */
static int put_one(struct store *s, const struct putopt *po, const char *key, const void *buf,
		   size_t len, bool from)
{
	int rc;
	struct kvp *k = put_handle(s, po, &rc);

	if (!k)
		return rc;
	rc = from ? kvp_put_from(k, key, buf, len) : kvp_put(k, key, buf, len);
	if (rc == 0 && po->hard_pin)
		rc = kvp_pin(k, key, HARD_PIN_MS);
	return rc;
}

/* Inside store_enter: a batch through the handle for @po, each object that
 * was stored pinned when @po asks. */
static int put_batch(struct store *s, const struct putopt *po, const struct keys *ks,
		     const void *const *bufs, const size_t *lens, int *res)
{
	int rc;
	struct kvp *k = put_handle(s, po, &rc);

	if (!k)
		return rc;
	rc = kvp_batch_put_from(k, ks->n, ks->k, bufs, lens, res);
	for (size_t i = 0; rc == 0 && po->hard_pin && i < ks->n; i++)
		if (res[i] == 0)
			res[i] = kvp_pin(k, ks->k[i], HARD_PIN_MS);
	return rc;
}

/* Inside store_enter: registers a buffer on every handle and remembers it
 * for the handles opened later. */
static int store_register(struct store *s, void *p, size_t len)
{
	struct kvp *hs[KVP_MAX_REPLICAS + 2];
	size_t nh = store_handles(s, hs);
	int rc = 0;

	for (size_t i = 0; i < nh && rc == 0; i++)
		rc = kvp_register_buffer(hs[i], p, len);
	pthread_mutex_lock(&s->hlock);
	if (rc == 0 && s->nregs == s->capregs) {
		size_t cap = s->capregs ? s->capregs * 2 : 16;
		struct reg *nr = realloc(s->regs, cap * sizeof(*nr));

		if (nr) {
			s->regs = nr;
			s->capregs = cap;
		} else {
			rc = KVP_ENOMEM;
		}
	}
	if (rc == 0)
		s->regs[s->nregs++] = (struct reg){ p, len };
	pthread_mutex_unlock(&s->hlock);
	return rc;
}

/* Inside store_enter: the buffer off every handle and out of the list; the
 * default handle's result. */
static int store_unregister(struct store *s, void *p)
{
	struct kvp *hs[KVP_MAX_REPLICAS + 2];
	size_t nh = store_handles(s, hs);
	int rc = kvp_unregister_buffer(hs[0], p);

	for (size_t i = 1; i < nh; i++)
		kvp_unregister_buffer(hs[i], p);
	pthread_mutex_lock(&s->hlock);
	for (size_t i = 0; i < s->nregs; i++) {
		if (s->regs[i].p == p) {
			s->regs[i] = s->regs[--s->nregs];
			break;
		}
	}
	pthread_mutex_unlock(&s->hlock);
	return rc;
}

/* Inside store_enter: kvp_stats summed over every handle. */
static int store_stats_sum(struct store *s, struct kvp_stats *sum)
{
	struct kvp *hs[KVP_MAX_REPLICAS + 2];
	size_t nh = store_handles(s, hs);
	int rc = 0;

	memset(sum, 0, sizeof(*sum));
	for (size_t i = 0; i < nh && !rc; i++) {
		struct kvp_stats st;

		rc = kvp_stats(hs[i], &st);
		if (rc)
			break;
		sum->puts += st.puts;
		sum->gets += st.gets;
		sum->local_bytes += st.local_bytes;
		sum->tcp_bytes += st.tcp_bytes;
		sum->checksum_mismatches += st.checksum_mismatches;
		sum->retries += st.retries;
		sum->segment_refreshes += st.segment_refreshes;
		sum->master_connects += st.master_connects;
		sum->node_connects += st.node_connects;
	}
	return rc;
}

/* ---- embedded node ------------------------------------------------------- */

static void node_ready_cb(void *arg)
{
	struct store *s = arg;

	pthread_mutex_lock(&s->nlock);
	if (s->nstate == NODE_STARTING)
		s->nstate = NODE_READY;
	pthread_cond_broadcast(&s->ncond);
	pthread_mutex_unlock(&s->nlock);
}

static void *node_thread(void *arg)
{
	struct store *s = arg;
	int rc = node_run(s->node);

	pthread_mutex_lock(&s->nlock);
	s->nstate = NODE_EXITED;
	s->node_rc = rc;
	pthread_cond_broadcast(&s->ncond);
	pthread_mutex_unlock(&s->nlock);
	return NULL;
}

static bool conf_is_explicit(const struct kvp_conf *c, const char *sec, const char *key)
{
	const struct conf_key *k = conf_find(sec, key);

	return k && c->src[k - conf_table] == CONF_SRC_CMDLINE;
}

/* The embedded node's identity must be this process's own: the values for a
 * host's kvpool-node daemon (from /etc/kvpool/kvpool.ini or the environment)
 * would collide with it. Only "section.key" entries given to setup() win. */
static void node_conf_adjust(struct store *s, struct kvp_conf *c, unsigned seq)
{
	char host[64];
	bool token = c->cluster.token[0] != 0;

	if (gethostname(host, sizeof(host)) < 0 || !host[0])
		snprintf(host, sizeof(host), "host");
	host[sizeof(host) - 1] = 0;
	if (!conf_is_explicit(c, "node", "name"))
		snprintf(c->node.name, CONF_STR, "%.60s-py-%d-%u", host, (int)getpid(), seq);
	if (!conf_is_explicit(c, "node", "segment"))
		snprintf(c->node.segment, CONF_STR, "kvpool-py-%d-%u", (int)getpid(), seq);
	/* Any free port: several processes on one host each embed a node. */
	if (!conf_is_explicit(c, "node", "listen"))
		snprintf(c->node.listen, CONF_STR, "%s", token ? "0.0.0.0:0" : "127.0.0.1:0");
	if (!conf_is_explicit(c, "node", "advertise"))
		c->node.advertise[0] = 0;
	if (!conf_is_explicit(c, "node", "http_listen"))
		c->node.http_listen[0] = 0;
	/* The memory leaves with the process, as Mooncake's embedded segment does. */
	if (!conf_is_explicit(c, "node", "remove_segment_on_exit"))
		c->node.remove_segment_on_exit = true;
	if (!conf_is_explicit(c, "fuse", "mountpoint"))
		c->fuse.mountpoint[0] = 0;
	if (!conf_is_explicit(c, "spill", "path") && !conf_is_explicit(c, "spill", "size")) {
		c->spill.path[0] = 0;
		c->spill.size = 0;
	}
	snprintf(s->node_segment, sizeof(s->node_segment), "%s", c->node.segment);
}

static void node_shutdown(struct store *s)
{
	if (!s->node)
		return;
	node_stop(s->node);
	pthread_join(s->node_thr, NULL);
	node_destroy(s->node);
	s->node = NULL;
}

/* Called with lock write-held, GIL released. */
static int node_start(struct store *s, const struct kvp_conf *c)
{
	char err[512] = "";
	sigset_t all, old;
	uint64_t deadline;
	int rc;

	s->node = node_create(c, err, sizeof(err));
	if (!s->node) {
		snprintf(s->errmsg, sizeof(s->errmsg), "embedded node: %s", err);
		return KVP_EINVAL;
	}
	s->nstate = NODE_STARTING;
	s->node_rc = 0;
	node_on_ready(s->node, node_ready_cb, s);
	/* Signals stay with Python's threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&s->node_thr, NULL, node_thread, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		snprintf(s->errmsg, sizeof(s->errmsg), "embedded node: pthread_create: %s",
			 strerror(rc));
		node_destroy(s->node);
		s->node = NULL;
		return KVP_EINTERNAL;
	}
	/* Wait until it is mounted at the master, as Mooncake's setup does. */
	deadline = mono_ms() + (c->client.timeout ? c->client.timeout : 10000);
	pthread_mutex_lock(&s->nlock);
	while (s->nstate == NODE_STARTING) {
		uint64_t now = mono_ms();
		struct timespec ts;

		if (now >= deadline)
			break;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += (time_t)((deadline - now) / 1000);
		ts.tv_nsec += (long)((deadline - now) % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&s->ncond, &s->nlock, &ts);
	}
	enum node_state st = s->nstate;
	int nrc = s->node_rc;
	pthread_mutex_unlock(&s->nlock);
	if (st == NODE_READY)
		return 0;
	if (st == NODE_STARTING) {
		snprintf(s->errmsg, sizeof(s->errmsg),
			 "embedded node: not mounted at master %s within %llu ms",
			 c->cluster.master, (unsigned long long)(c->client.timeout));
		rc = KVP_ETIMEDOUT;
	} else {
		snprintf(s->errmsg, sizeof(s->errmsg), "embedded node stopped during start-up "
			 "(%s)", kvp_errname(nrc < 0 ? nrc : KVP_EINTERNAL));
		rc = nrc < 0 && nrc >= KVP_ERR_MIN ? nrc : KVP_EINTERNAL;
	}
	node_shutdown(s);
	return rc;
}

/* Called with lock write-held, GIL released. */
static void store_teardown_locked(struct store *s)
{
	if (s->kvp)
		kvp_close(s->kvp);
	s->kvp = NULL;
	pthread_mutex_lock(&s->hlock);
	for (int i = 0; i <= KVP_MAX_REPLICAS; i++) {
		if (s->rep[i])
			kvp_close(s->rep[i]);
		s->rep[i] = NULL;
	}
	free(s->regs);
	s->regs = NULL;
	s->nregs = s->capregs = 0;
	pthread_mutex_unlock(&s->hlock);
	node_shutdown(s);
	free(s->config_file);
	s->config_file = NULL;
	strv_free(&s->overrides);
}

static void store_locks_init(struct store *s)
{
	pthread_rwlockattr_t ra;
	pthread_condattr_t ca;

	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&s->lock, &ra);
	pthread_rwlockattr_destroy(&ra);
	pthread_mutex_init(&s->hlock, NULL);
	pthread_mutex_init(&s->nlock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->ncond, &ca);
	pthread_condattr_destroy(&ca);
}

/* Closes what setup opened. Called with the GIL held; releases it. In a
 * forked child the parent's handles and node are only forgotten (closing
 * them would talk on the parent's connections and join a thread that does
 * not exist here), and the locks start afresh. */
static void store_teardown(struct store *s)
{
	if (s->owner && s->owner != getpid()) {
		s->kvp = NULL;
		memset(s->rep, 0, sizeof(s->rep));
		s->node = NULL;
		free(s->regs);
		s->regs = NULL;
		s->nregs = s->capregs = 0;
		free(s->config_file);
		s->config_file = NULL;
		strv_free(&s->overrides);
		s->owner = 0;
		store_locks_init(s);
		return;
	}
	Py_BEGIN_ALLOW_THREADS
	pthread_rwlock_wrlock(&s->lock);
	store_teardown_locked(s);
	s->owner = 0;
	pthread_rwlock_unlock(&s->lock);
	Py_END_ALLOW_THREADS
}

/* ---- setup ------------------------------------------------------------------ */

/* What setup() was told, in any of its forms. */
struct sparams {
	char *hostname, *metadata, *protocol, *rdma, *master, *config_file;
	bool has_seg, has_lbuf;
	uint64_t seg, lbuf;
	int replicas;
	struct strv extra;		/* "section.key=value" */
};

static void sparams_free(struct sparams *p)
{
	free(p->hostname);
	free(p->metadata);
	free(p->protocol);
	free(p->rdma);
	free(p->master);
	free(p->config_file);
	strv_free(&p->extra);
	memset(p, 0, sizeof(*p));
}

/* str (or None = leave unset) into *dst. -1 with an exception. */
static int sp_str(PyObject *o, char **dst, const char *what)
{
	const char *s;

	if (!o || o == Py_None)
		return 0;
	if (!PyUnicode_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s must be a str, not %.80s", what,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	s = PyUnicode_AsUTF8(o);
	if (!s)
		return -1;
	free(*dst);
	*dst = strdup(s);
	if (!*dst) {
		PyErr_NoMemory();
		return -1;
	}
	return 0;
}

/* A size: int, or a str with K/M/G suffix ("3.125GB"). */
static int sp_size(PyObject *o, bool *has, uint64_t *dst, const char *what)
{
	if (!o || o == Py_None)
		return 0;
	if (PyUnicode_Check(o)) {
		const char *s = PyUnicode_AsUTF8(o);

		if (!s)
			return -1;
		if (conf_parse_size(s, dst) < 0) {
			PyErr_Format(PyExc_ValueError, "%s: cannot parse size \"%s\"", what, s);
			return -1;
		}
	} else if (u64_get(o, dst, what) < 0) {
		return -1;
	}
	*has = true;
	return 0;
}

/* One dictionary entry of setup(dict) / the MOONCAKE_CONFIG_PATH JSON. Keys
 * with a dot are kvpool "section.key" overrides; Mooncake's other keys
 * (transfer_timeout, mode, ...) are ignored. */
static int sp_dict_item(struct sparams *p, PyObject *k, PyObject *v)
{
	const char *key;

	if (!PyUnicode_Check(k)) {
		PyErr_SetString(PyExc_TypeError, "configuration keys must be str");
		return -1;
	}
	key = PyUnicode_AsUTF8(k);
	if (!key)
		return -1;
	if (!strcmp(key, "local_hostname"))
		return sp_str(v, &p->hostname, key);
	if (!strcmp(key, "metadata_server"))
		return sp_str(v, &p->metadata, key);
	if (!strcmp(key, "protocol"))
		return sp_str(v, &p->protocol, key);
	if (!strcmp(key, "device_name") || !strcmp(key, "rdma_devices"))
		return sp_str(v, &p->rdma, key);
	if (!strcmp(key, "master_server_address") || !strcmp(key, "master_server_addr"))
		return sp_str(v, &p->master, key);
	if (!strcmp(key, "config_file"))
		return sp_str(v, &p->config_file, key);
	if (!strcmp(key, "global_segment_size"))
		return sp_size(v, &p->has_seg, &p->seg, key);
	if (!strcmp(key, "local_buffer_size"))
		return sp_size(v, &p->has_lbuf, &p->lbuf, key);
	if (!strcmp(key, "replica_num")) {
		long n = PyLong_AsLong(v);

		if (n == -1 && PyErr_Occurred())
			return -1;
		p->replicas = (int)n;
		return 0;
	}
	if (strchr(key, '.')) {
		PyObject *sv;
		const char *s;
		int rc;

		if (PyBool_Check(v))
			sv = PyUnicode_FromString(v == Py_True ? "true" : "false");
		else
			sv = PyObject_Str(v);
		if (!sv)
			return -1;
		s = PyUnicode_AsUTF8(sv);
		rc = s ? strv_addf(&p->extra, "%s=%s", key, s) : -1;
		Py_DECREF(sv);
		if (rc < 0 && !PyErr_Occurred())
			PyErr_Format(PyExc_ValueError, "%s: value too long", key);
		return rc;
	}
	return 0;
}

static int sp_dict(struct sparams *p, PyObject *d)
{
	PyObject *k, *v;
	Py_ssize_t pos = 0;

	if (!PyDict_Check(d)) {
		PyErr_SetString(PyExc_TypeError, "the configuration must be a dict");
		return -1;
	}
	while (PyDict_Next(d, &pos, &k, &v))
		if (sp_dict_item(p, k, v) < 0)
			return -1;
	return 0;
}

/* MOONCAKE_CONFIG_PATH: Mooncake's deployment JSON, parsed by Python's json. */
static int sp_json_file(struct sparams *p, const char *path)
{
	PyObject *json = NULL, *text = NULL, *d = NULL;
	FILE *f;
	char *buf = NULL;
	size_t n = 0, cap = 0;
	int rc = -1;

	f = fopen(path, "rb");
	if (!f) {
		PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
		return -1;
	}
	for (;;) {
		if (n == cap) {
			char *nb;

			cap = cap ? cap * 2 : 4096;
			if (cap > (64u << 20)) {
				PyErr_Format(PyExc_ValueError, "%s: too large", path);
				goto out;
			}
			nb = realloc(buf, cap);
			if (!nb) {
				PyErr_NoMemory();
				goto out;
			}
			buf = nb;
		}
		size_t r = fread(buf + n, 1, cap - n, f);

		n += r;
		if (r == 0)
			break;
	}
	if (ferror(f)) {
		PyErr_Format(PyExc_OSError, "%s: read error", path);
		goto out;
	}
	json = PyImport_ImportModule("json");
	if (!json)
		goto out;
	text = PyBytes_FromStringAndSize(buf, (Py_ssize_t)n);
	if (!text)
		goto out;
	d = PyObject_CallMethod(json, "loads", "O", text);
	if (!d) {
		/* Name the file in the message. */
		PyObject *t, *val, *tb;

		PyErr_Fetch(&t, &val, &tb);
		PyErr_Format(PyExc_ValueError, "MOONCAKE_CONFIG_PATH %s: %S", path,
			     val ? val : Py_None);
		Py_XDECREF(t);
		Py_XDECREF(val);
		Py_XDECREF(tb);
		goto out;
	}
	rc = sp_dict(p, d);
out:
	Py_XDECREF(d);
	Py_XDECREF(text);
	Py_XDECREF(json);
	free(buf);
	fclose(f);
	return rc;
}

/* Mooncake's protocol names mean "the transport between hosts": "tcp" is
 * kvpool's auto (memcpy through /dev/shm for same-host replicas, TCP for the
 * others); kvpool's own names pass through and are checked by conf. */
static const char *proto_map(const char *p)
{
	if (!strcasecmp(p, "tcp"))
		return "auto";
	return p;
}

/* Builds the overrides every handle and the embedded node load on top of the
 * file and the environment. */
static int sp_overrides(const struct sparams *p, struct strv *ov)
{
	const char *proto = p->protocol ? p->protocol : getenv("MOONCAKE_PROTOCOL");
	int rc = 0;

	if (p->master && p->master[0])
		rc |= strv_addf(ov, "cluster.master=%s", p->master);
	if (p->metadata)
		rc |= strv_addf(ov, "cluster.metadata_server=%s", p->metadata);
	if (p->has_lbuf)
		rc |= strv_addf(ov, "client.local_buffer_size=%" PRIu64, p->lbuf);
	/* An explicit KVPOOL_CLIENT_PROTOCOL beats Mooncake's spelling. */
	if (proto && proto[0] && !getenv("KVPOOL_CLIENT_PROTOCOL"))
		rc |= strv_addf(ov, "client.protocol=%s", proto_map(proto));
	if (p->rdma && p->rdma[0])
		rc |= strv_addf(ov, "rdma.devices=%s", p->rdma);
	if (p->replicas)
		rc |= strv_addf(ov, "client.replicas=%d", p->replicas);
	if (p->has_seg && p->seg)
		rc |= strv_addf(ov, "node.segment_size=%" PRIu64, p->seg);
	for (size_t i = 0; i < p->extra.n; i++)
		rc |= strv_add(ov, p->extra.v[i]);
	return rc ? KVP_ENOMEM : 0;
}

/* Called with lock write-held, GIL released; s holds no handle. */
static int store_setup_locked(struct store *s, const struct sparams *p, unsigned seq)
{
	struct kvp_open_opts o = { 0 };
	struct kvp_conf *c;
	char err[512] = "";
	int rc, lvl;

	s->errmsg[0] = 0;
	rc = sp_overrides(p, &s->overrides);
	if (rc < 0)
		return rc;
	if (p->config_file && !(s->config_file = strdup(p->config_file)))
		return KVP_ENOMEM;
	snprintf(s->hostname, sizeof(s->hostname), "%s", p->hostname ? p->hostname : "");
	if (!s->hostname[0] && gethostname(s->hostname, sizeof(s->hostname) - 1) < 0)
		snprintf(s->hostname, sizeof(s->hostname), "localhost");

	/* The same configuration the handles will load: validated here so that a
	 * bad key is reported with its message, and used for the node. */
	c = calloc(1, sizeof(*c));
	if (!c)
		return KVP_ENOMEM;
	if (conf_load(c, s->config_file, (const char *const *)s->overrides.v, err,
		      sizeof(err)) < 0) {
		snprintf(s->errmsg, sizeof(s->errmsg), "configuration: %s", err);
		rc = KVP_EINVAL;
		goto out;
	}
	/* A library should not chatter: warnings and errors unless log.level is set. */
	{
		const struct conf_key *k = conf_find("log", "level");

		lvl = k && c->src[k - conf_table] != CONF_SRC_DEFAULT ?
			log_level_parse(c->log.level) : LOG_WARNING;
		log_init("kvpool-py", lvl);
	}
	s->def_replicas = (int)c->client.replicas;
	if (p->has_seg && p->seg) {
		node_conf_adjust(s, c, seq);
		rc = node_start(s, c);
		if (rc < 0)
			goto out;
	}
	o.config_file = s->config_file;
	o.overrides = (const char *const *)s->overrides.v;
	s->kvp = kvp_open(&o, &rc);
	if (!s->kvp) {
		if (rc >= 0)
			rc = KVP_EINTERNAL;
		snprintf(s->errmsg, sizeof(s->errmsg), "cannot open a client of master %s: %s",
			 c->cluster.master, kvp_strerror(rc));
		node_shutdown(s);
		goto out;
	}
	rc = 0;
out:
	memset(c->cluster.token, 0, sizeof(c->cluster.token));
	free(c);
	return rc;
}

static int store_parse_setup(PyObject *args, PyObject *kw, struct sparams *p, bool *from_env)
{
	static char *kwlist[] = { "local_hostname", "metadata_server", "global_segment_size",
				  "local_buffer_size", "protocol", "rdma_devices",
				  "master_server_addr", "engine", NULL };
	PyObject *a[8] = { NULL };
	Py_ssize_t nargs = PyTuple_GET_SIZE(args);
	Py_ssize_t nkw = kw ? PyDict_Size(kw) : 0;

	*from_env = false;
	/* setup(dict) / setup(config=dict) */
	if (nargs == 1 && !nkw && PyDict_Check(PyTuple_GET_ITEM(args, 0)))
		return sp_dict(p, PyTuple_GET_ITEM(args, 0));
	if (!nargs && nkw == 1 && PyDict_GetItemString(kw, "config"))
		return sp_dict(p, PyDict_GetItemString(kw, "config"));
	/* setup(): what engines' wrappers do — MOONCAKE_CONFIG_PATH, then the
	 * MOONCAKE_* variables (read by conf as aliases). */
	if (!nargs && !nkw) {
		const char *path = getenv("MOONCAKE_CONFIG_PATH");
		const char *seg = getenv("MOONCAKE_GLOBAL_SEGMENT_SIZE");

		*from_env = true;
		if (path && path[0] && sp_json_file(p, path) < 0)
			return -1;
		if (!p->has_seg && seg && seg[0]) {
			if (conf_parse_size(seg, &p->seg) < 0) {
				PyErr_Format(PyExc_ValueError,
					     "MOONCAKE_GLOBAL_SEGMENT_SIZE: cannot parse \"%s\"", seg);
				return -1;
			}
			p->has_seg = true;
		}
		if (!p->hostname && getenv("MOONCAKE_LOCAL_HOSTNAME") &&
		    !(p->hostname = strdup(getenv("MOONCAKE_LOCAL_HOSTNAME")))) {
			PyErr_NoMemory();
			return -1;
		}
		return 0;
	}
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOOOOOOO:setup", kwlist, &a[0], &a[1], &a[2],
					 &a[3], &a[4], &a[5], &a[6], &a[7]))
		return -1;
	if (sp_str(a[0], &p->hostname, "local_hostname") < 0 ||
	    sp_str(a[1], &p->metadata, "metadata_server") < 0 ||
	    sp_size(a[2], &p->has_seg, &p->seg, "global_segment_size") < 0 ||
	    sp_size(a[3], &p->has_lbuf, &p->lbuf, "local_buffer_size") < 0 ||
	    sp_str(a[4], &p->protocol, "protocol") < 0 ||
	    sp_str(a[5], &p->rdma, "rdma_devices") < 0 ||
	    sp_str(a[6], &p->master, "master_server_addr") < 0)
		return -1;
	/* a[7], a TransferEngine to share: kvpool has none; ignored. */
	return 0;
}

static int store_do_setup(struct store *self, struct sparams *p)
{
	unsigned seq = ++store_seq;
	int rc;

	store_teardown(self);
	Py_BEGIN_ALLOW_THREADS
	pthread_rwlock_wrlock(&self->lock);
	rc = store_setup_locked(self, p, seq);
	if (rc < 0)
		store_teardown_locked(self);
	else
		self->owner = getpid();
	pthread_rwlock_unlock(&self->lock);
	Py_END_ALLOW_THREADS
	if (rc < 0 && self->errmsg[0])
		log_err("setup: %s", self->errmsg);
	return rc;
}

static PyObject *store_setup(struct store *self, PyObject *args, PyObject *kw)
{
	struct sparams p = { 0 };
	bool from_env;
	int rc;

	if (store_parse_setup(args, kw, &p, &from_env) < 0) {
		sparams_free(&p);
		return NULL;
	}
	rc = store_do_setup(self, &p);
	sparams_free(&p);
	return PyLong_FromLong(mc(rc));
}

/* init_all(protocol, device_name, mount_segment_size=16 MiB): setup() from the
 * environment with these three given. */
static PyObject *store_init_all(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "protocol", "device_name", "mount_segment_size", NULL };
	struct sparams p = { 0 };
	PyObject *proto = NULL, *dev = NULL, *size = NULL, *none = NULL;
	bool from_env;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOO:init_all", kwlist, &proto, &dev, &size))
		return NULL;
	none = PyTuple_New(0);
	if (!none)
		return NULL;
	rc = store_parse_setup(none, NULL, &p, &from_env);
	Py_DECREF(none);
	if (rc < 0 || sp_str(proto, &p.protocol, "protocol") < 0 ||
	    sp_str(dev, &p.rdma, "device_name") < 0)
		goto out_err;
	if (!size) {
		p.has_seg = true;
		p.seg = 16u << 20;
	} else if (sp_size(size, &p.has_seg, &p.seg, "mount_segment_size") < 0) {
		goto out_err;
	}
	rc = store_do_setup(self, &p);
	sparams_free(&p);
	return PyLong_FromLong(mc(rc));
out_err:
	sparams_free(&p);
	return NULL;
}

static PyObject *store_close(struct store *self, PyObject *unused)
{
	store_teardown(self);
	return PyLong_FromLong(0);
}

/* ---- single-object calls --------------------------------------------------- */

static PyObject *store_put(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "key", "value", "config", NULL };
	struct putopt po;
	struct keys ks;
	PyObject *key, *cfg = NULL;
	Py_buffer v;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "Oy*|O:put", kwlist, &key, &v, &cfg))
		return NULL;
	if (putopt_get(cfg, &po) < 0 || keys_get(key, true, &ks) < 0) {
		PyBuffer_Release(&v);
		return NULL;
	}
	STORE_CALL(self, rc, put_one(self, &po, ks.k[0], v.buf, (size_t)v.len, false));
	PyBuffer_Release(&v);
	keys_free(&ks);
	return PyLong_FromLong(mc_put(rc));
}

/* put_parts(key, *parts, config=None): the parts concatenated into one value. */
static PyObject *store_put_parts(struct store *self, PyObject *args, PyObject *kw)
{
	Py_ssize_t nargs = PyTuple_GET_SIZE(args), nparts;
	PyObject *cfg = kw ? PyDict_GetItemString(kw, "config") : NULL;
	Py_buffer *views = NULL;
	Py_ssize_t got = 0;
	struct putopt po;
	struct keys ks = { 0 };
	size_t total = 0;
	char *buf = NULL;
	int rc = KVP_EINVAL;

	if (kw && PyDict_Size(kw) > (cfg ? 1 : 0)) {
		PyErr_SetString(PyExc_TypeError, "put_parts: the only keyword is config");
		return NULL;
	}
	if (nargs < 1) {
		PyErr_SetString(PyExc_TypeError, "put_parts(key, *parts, config=None)");
		return NULL;
	}
	if (putopt_get(cfg, &po) < 0 || keys_get(PyTuple_GET_ITEM(args, 0), true, &ks) < 0)
		return NULL;
	nparts = nargs - 1;
	views = calloc(nparts ? (size_t)nparts : 1, sizeof(*views));
	if (!views) {
		PyErr_NoMemory();
		goto out;
	}
	for (got = 0; got < nparts; got++) {
		if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, got + 1), &views[got],
				       PyBUF_SIMPLE) < 0)
			goto out;
		total += (size_t)views[got].len;
	}
	Py_BEGIN_ALLOW_THREADS
	buf = total ? malloc(total) : NULL;
	if (total && !buf) {
		rc = KVP_ENOMEM;
	} else {
		size_t off = 0;

		for (Py_ssize_t i = 0; i < nparts; i++) {
			memcpy(buf + off, views[i].buf, (size_t)views[i].len);
			off += (size_t)views[i].len;
		}
		STORE_CALL_NOGIL(self, rc, put_one(self, &po, ks.k[0], buf, total, false));
	}
	free(buf);
	Py_END_ALLOW_THREADS
out:
	for (Py_ssize_t i = 0; i < got; i++)
		PyBuffer_Release(&views[i]);
	free(views);
	keys_free(&ks);
	if (PyErr_Occurred())
		return NULL;
	return PyLong_FromLong(mc_put(rc));
}

static PyObject *store_get(struct store *self, PyObject *key)
{
	struct keys ks;
	void *buf = NULL;
	size_t len = 0;
	PyObject *r;
	int rc;

	if (keys_get(key, true, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_get(k, ks.k[0], &buf, &len));
	keys_free(&ks);
	/* Mooncake: empty bytes when missing (or on any error). */
	r = PyBytes_FromStringAndSize(rc == 0 ? buf : NULL, rc == 0 ? (Py_ssize_t)len : 0);
	kvp_free(buf);
	return r;
}

static PyObject *store_get_buffer(struct store *self, PyObject *key)
{
	struct keys ks;
	void *buf = NULL;
	size_t len = 0;
	int rc;

	if (keys_get(key, true, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_get(k, ks.k[0], &buf, &len));
	keys_free(&ks);
	if (rc < 0)
		Py_RETURN_NONE;
	return pybuf_new(buf, len);
}

static PyObject *store_is_exist(struct store *self, PyObject *key)
{
	struct keys ks;
	int rc;

	if (keys_get(key, true, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_exists(k, ks.k[0]));
	keys_free(&ks);
	return PyLong_FromLong(mc_exist(rc));
}

static PyObject *store_get_size(struct store *self, PyObject *key)
{
	struct keys ks;
	uint64_t size = 0;
	int rc;

	if (keys_get(key, true, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_size(k, ks.k[0], &size));
	keys_free(&ks);
	if (rc < 0)
		return PyLong_FromLong(mc(rc));
	return PyLong_FromUnsignedLongLong(size);
}

static PyObject *store_remove(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "key", "force", NULL };
	PyObject *key;
	struct keys ks;
	int force = 0, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p:remove", kwlist, &key, &force))
		return NULL;
	if (keys_get(key, true, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_remove(k, ks.k[0], force ? KVP_REMOVE_FORCE : 0));
	keys_free(&ks);
	return PyLong_FromLong(mc(rc));
}

static PyObject *store_remove_all(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "force", NULL };
	uint64_t count = 0;
	int force = 0, rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:remove_all", kwlist, &force))
		return NULL;
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
	struct strv matched = { 0 };
	char prefix[KVP_MAX_KEY + 1] = "", *cursor = NULL;
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
			regex_prefix(s, prefix, sizeof(prefix));
	}
	for (;;) {
		struct kvp_list l = { 0 };

		STORE_CALL(self, rc, kvp_list(k, prefix, 0, cursor, PAGE_KEYS, &l));
		if (rc < 0)
			break;
		for (size_t i = 0; i < l.n; i++) {
			const char *name = l.entries[i].name;
			PyObject *key = bytes_pat ?
				PyBytes_FromString(name) :
				PyUnicode_DecodeUTF8(name, (Py_ssize_t)strlen(name), "surrogateescape");
			PyObject *m = key ? PyObject_CallMethod(cre, "search", "O", key) : NULL;

			Py_XDECREF(key);
			if (!m || (m != Py_None && strv_add(&matched, name) < 0)) {
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
	strv_free(&matched);
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
	    u64_get(po, &ptr, "buffer_ptr") < 0 || u64_get(so, &size, "size") < 0)
		return NULL;
	STORE_CALL(self, rc, store_register(self, (void *)(uintptr_t)ptr, (size_t)size));
	return PyLong_FromLong(mc(rc));
}

static PyObject *store_unregister_buffer(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "buffer_ptr", NULL };
	PyObject *po;
	uint64_t ptr;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O:unregister_buffer", kwlist, &po) ||
	    u64_get(po, &ptr, "buffer_ptr") < 0)
		return NULL;
	STORE_CALL(self, rc, store_unregister(self, (void *)(uintptr_t)ptr));
	return PyLong_FromLong(mc(rc));
}

static PyObject *store_put_from(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "key", "buffer_ptr", "size", "config", NULL };
	PyObject *key, *po, *so, *cfg = NULL;
	struct putopt opt;
	uint64_t ptr, size;
	struct keys ks;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O:put_from", kwlist, &key, &po, &so, &cfg) ||
	    u64_get(po, &ptr, "buffer_ptr") < 0 || u64_get(so, &size, "size") < 0)
		return NULL;
	if (putopt_get(cfg, &opt) < 0 || keys_get(key, true, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, put_one(self, &opt, ks.k[0], (const void *)(uintptr_t)ptr,
				     (size_t)size, true));
	keys_free(&ks);
	return PyLong_FromLong(mc_put(rc));
}

static PyObject *store_get_into(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "key", "buffer_ptr", "size", NULL };
	PyObject *key, *po, *so;
	uint64_t ptr, size;
	struct keys ks;
	int64_t rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:get_into", kwlist, &key, &po, &so) ||
	    u64_get(po, &ptr, "buffer_ptr") < 0 || u64_get(so, &size, "size") < 0)
		return NULL;
	if (keys_get(key, true, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_get_into(k, ks.k[0], (void *)(uintptr_t)ptr, (size_t)size));
	keys_free(&ks);
	return PyLong_FromLongLong(rc >= 0 ? rc : mc(rc));
}

/* Batch puts from (ptr, len) pairs; results are Mooncake codes. Called
 * without the GIL. */
static void batch_put_nogil(struct store *self, const struct putopt *opt, const struct keys *ks,
			    const void *const *bufs, const size_t *lens, int *res)
{
	int rc;

	STORE_CALL_NOGIL(self, rc, put_batch(self, opt, ks, bufs, lens, res));
	for (size_t i = 0; i < ks->n; i++)
		res[i] = mc_put(rc < 0 ? rc : res[i]);
}

/* put_batch(keys, values, config=None) -> 0, or the first failure's code. */
static PyObject *store_put_batch(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "values", "config", NULL };
	PyObject *keys, *values, *cfg = NULL, *fast = NULL;
	Py_buffer *views = NULL;
	const void **bufs = NULL;
	size_t *lens = NULL;
	int *res = NULL, first = 0;
	Py_ssize_t got = 0;
	struct putopt opt;
	struct keys ks = { 0 };

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:put_batch", kwlist, &keys, &values, &cfg))
		return NULL;
	if (putopt_get(cfg, &opt) < 0 || keys_get(keys, false, &ks) < 0)
		return NULL;
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
	keys_free(&ks);
	if (PyErr_Occurred())
		return NULL;
	return PyLong_FromLong(first);
}

static PyObject *store_batch_put_from(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "buffer_ptrs", "sizes", "config", NULL };
	PyObject *keys, *pl, *sl, *cfg = NULL, *r = NULL;
	struct putopt opt;
	struct keys ks;
	void **bufs = NULL;
	size_t *lens = NULL;
	int *res = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O:batch_put_from", kwlist, &keys, &pl, &sl,
					 &cfg))
		return NULL;
	if (putopt_get(cfg, &opt) < 0 || keys_get(keys, false, &ks) < 0)
		return NULL;
	if (ptr_lists_get(pl, sl, ks.n, &bufs, &lens) < 0)
		goto out;
	res = calloc(ks.n + 1, sizeof(*res));
	if (!res) {
		PyErr_NoMemory();
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	batch_put_nogil(self, &opt, &ks, (const void *const *)bufs, lens, res);
	Py_END_ALLOW_THREADS
	r = int_list(ks.n, res, NULL);
out:
	free(bufs);
	free(lens);
	free(res);
	keys_free(&ks);
	return r;
}

static PyObject *store_batch_get_into(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "buffer_ptrs", "sizes", NULL };
	PyObject *keys, *pl, *sl, *r = NULL;
	struct keys ks;
	void **bufs = NULL;
	size_t *caps = NULL;
	int64_t *res = NULL;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:batch_get_into", kwlist, &keys, &pl, &sl))
		return NULL;
	if (keys_get(keys, false, &ks) < 0)
		return NULL;
	if (ptr_lists_get(pl, sl, ks.n, &bufs, &caps) < 0)
		goto out;
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
	r = int_list(ks.n, NULL, res);
out:
	free(bufs);
	free(caps);
	free(res);
	keys_free(&ks);
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
	char *stage;			/* n > 1: contiguous staging buffer */
};

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
		PyErr_SetString(PyExc_ValueError, "all_buffer_ptrs and all_sizes need one list per key");
		goto out;
	}
	for (size_t i = 0; i < nkeys; i++) {
		uint64_t *ps = NULL, *ss = NULL;
		Py_ssize_t np = 0, ns = 0;

		if (u64s_get(PySequence_Fast_GET_ITEM(fp, i), -1, &ps, &np, "buffer_ptrs") < 0)
			goto out;
		if (u64s_get(PySequence_Fast_GET_ITEM(fs, i), np, &ss, &ns, "sizes") < 0) {
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
		free(mb[i].stage);
	}
	free(mb);
}

/* Called without the GIL: the contiguous buffer of every key in bufs (its
 * only buffer, or a staging one; @gather copies a put's buffers into it)
 * and its total length in lens. 0 or KVP_ENOMEM. */
static int mbufs_flatten(struct mbuf *mb, size_t n, void **bufs, size_t *lens, bool gather)
{
	for (size_t i = 0; i < n; i++) {
		struct mbuf *m = &mb[i];

		bufs[i] = m->n == 1 ? m->p[0] : NULL;
		lens[i] = m->total;
		if (m->n <= 1)
			continue;
		m->stage = malloc(m->total ? m->total : 1);
		if (!m->stage)
			return KVP_ENOMEM;
		bufs[i] = m->stage;
		for (size_t j = 0, off = 0; gather && j < m->n; j++) {
			memcpy(m->stage + off, m->p[j], m->len[j]);
			off += m->len[j];
		}
	}
	return 0;
}

static PyObject *store_batch_put_from_multi_buffers(struct store *self, PyObject *args,
						    PyObject *kw)
{
	static char *kwlist[] = { "keys", "all_buffer_ptrs", "all_sizes", "config", NULL };
	PyObject *keys, *allp, *alls, *cfg = NULL, *r = NULL;
	struct mbuf *mb = NULL;
	struct putopt opt;
	struct keys ks;
	void **bufs = NULL;
	size_t *lens = NULL;
	int *res = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O:batch_put_from_multi_buffers", kwlist,
					 &keys, &allp, &alls, &cfg))
		return NULL;
	if (putopt_get(cfg, &opt) < 0 || keys_get(keys, false, &ks) < 0)
		return NULL;
	if (mbufs_get(allp, alls, ks.n, &mb) < 0)
		goto out;
	bufs = calloc(ks.n + 1, sizeof(*bufs));
	lens = calloc(ks.n + 1, sizeof(*lens));
	res = calloc(ks.n + 1, sizeof(*res));
	if (!bufs || !lens || !res) {
		PyErr_NoMemory();
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	int err = mbufs_flatten(mb, ks.n, bufs, lens, true);
	if (err) {
		for (size_t i = 0; i < ks.n; i++)
			res[i] = mc(err);
	} else {
		batch_put_nogil(self, &opt, &ks, (const void *const *)bufs, lens, res);
	}
	Py_END_ALLOW_THREADS
	r = int_list(ks.n, res, NULL);
out:
	mbufs_free(mb, ks.n);
	free(bufs);
	free(lens);
	free(res);
	keys_free(&ks);
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
	struct keys ks;
	void **bufs = NULL;
	size_t *caps = NULL;
	int64_t *res = NULL;
	int same = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|p:batch_get_into_multi_buffers", kwlist,
					 &keys, &allp, &alls, &same))
		return NULL;
	if (keys_get(keys, false, &ks) < 0)
		return NULL;
	if (mbufs_get(allp, alls, ks.n, &mb) < 0)
		goto out;
	bufs = calloc(ks.n + 1, sizeof(*bufs));
	caps = calloc(ks.n + 1, sizeof(*caps));
	res = calloc(ks.n + 1, sizeof(*res));
	if (!bufs || !caps || !res) {
		PyErr_NoMemory();
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	int rc = mbufs_flatten(mb, ks.n, bufs, caps, false);
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
	r = int_list(ks.n, NULL, res);
out:
	mbufs_free(mb, ks.n);
	free(bufs);
	free(caps);
	free(res);
	keys_free(&ks);
	return r;
}

/* ---- batch calls on values ----------------------------------------------- */

/* The per-key results of batch_is_exist (1, 0 or -1) or, with @remove, of
 * batch_remove (Mooncake codes). */
static PyObject *batch_exists_remove(struct store *self, PyObject *keys, bool remove, int flags)
{
	struct keys ks;
	PyObject *r;
	int *res, rc;

	if (keys_get(keys, false, &ks) < 0)
		return NULL;
	res = calloc(ks.n + 1, sizeof(*res));
	if (!res) {
		keys_free(&ks);
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
	r = int_list(ks.n, res, NULL);
	free(res);
	keys_free(&ks);
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
	struct keys ks;
	PyObject **objs = NULL, *r = NULL;
	int64_t *sizes = NULL, *res = NULL;
	void **bufs = NULL;
	size_t *caps = NULL;
	int rc = 0;

	if (keys_get(keys, false, &ks) < 0)
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
	keys_free(&ks);
	return r;
}

static PyObject *store_batch_get_buffer(struct store *self, PyObject *keys)
{
	struct keys ks;
	PyObject *r;

	if (keys_get(keys, false, &ks) < 0)
		return NULL;
	r = PyList_New((Py_ssize_t)ks.n);
	for (size_t i = 0; r && i < ks.n; i++) {
		void *buf = NULL;
		size_t len = 0;
		PyObject *o;
		int rc;

		STORE_CALL(self, rc, kvp_get(k, ks.k[i], &buf, &len));
		o = rc < 0 ? Py_NewRef(Py_None) : pybuf_new(buf, len);
		if (!o) {
			Py_CLEAR(r);
			break;
		}
		PyList_SET_ITEM(r, (Py_ssize_t)i, o);
	}
	keys_free(&ks);
	return r;
}

/* ---- introspection ------------------------------------------------------- */

static PyObject *store_get_hostname(struct store *self, PyObject *unused)
{
	return PyUnicode_FromString(self->hostname);
}

static PyObject *store_last_error(struct store *self, PyObject *unused)
{
	return PyUnicode_FromString(self->errmsg);
}

static PyObject *store_segment_name(struct store *self, PyObject *unused)
{
	if (!self->node)
		Py_RETURN_NONE;
	return PyUnicode_FromString(self->node_segment);
}

/* stat(key) -> dict (size, generation, checksum, times, lease_ms, pin_ms,
 * replicas), None when missing or on error. A kvpool extension. */
static PyObject *store_stat(struct store *self, PyObject *key)
{
	struct kvp_stat st;
	struct keys ks;
	PyObject *reps, *r;
	int rc;

	if (keys_get(key, true, &ks) < 0)
		return NULL;
	STORE_CALL(self, rc, kvp_stat(k, ks.k[0], &st));
	keys_free(&ks);
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

/* stats() -> dict of kvp_stats counters, summed over the store's handles. */
static PyObject *store_stats(struct store *self, PyObject *unused)
{
	struct kvp_stats sum = { 0 };
	int rc;

	STORE_CALL(self, rc, store_stats_sum(self, &sum));
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
	s->live_next = live_stores;
	if (live_stores)
		live_stores->live_prev = s;
	live_stores = s;
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
	else if (live_stores == self)
		live_stores = self->live_next;
	if (self->live_next)
		self->live_next->live_prev = self->live_prev;
	self->live_prev = self->live_next = NULL;
	store_teardown(self);
	pthread_rwlock_destroy(&self->lock);
	pthread_mutex_destroy(&self->hlock);
	pthread_mutex_destroy(&self->nlock);
	pthread_cond_destroy(&self->ncond);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

#define KW (METH_VARARGS | METH_KEYWORDS)

static PyMethodDef store_methods[] = {
	{ "setup", METH(store_setup), KW,
	  "setup(local_hostname, metadata_server, global_segment_size, local_buffer_size, "
	  "protocol, rdma_devices, master_server_addr) | setup(config_dict) | setup() -> int\n"
	  "Connects to kvpool-master; a global_segment_size > 0 also starts an embedded node "
	  "that contributes that much of this process's memory. setup() reads "
	  "MOONCAKE_CONFIG_PATH and the MOONCAKE_* variables." },
	{ "init_all", METH(store_init_all), KW,
	  "init_all(protocol, device_name, mount_segment_size=16 MiB) -> int" },
	{ "close", METH(store_close), METH_NOARGS, "close() -> 0: closes the client, stops the "
	  "embedded node." },
	{ "put", METH(store_put), KW, "put(key, value, config=None) -> int" },
	{ "put_parts", METH(store_put_parts), KW, "put_parts(key, *parts, config=None) -> int" },
	{ "put_batch", METH(store_put_batch), KW,
	  "put_batch(keys, values, config=None) -> int (0, or the first failure)" },
	{ "get", METH(store_get), METH_O, "get(key) -> bytes (b'' when missing)" },
	{ "get_batch", METH(store_get_batch), METH_O, "get_batch(keys) -> [bytes]" },
	{ "get_buffer", METH(store_get_buffer), METH_O,
	  "get_buffer(key) -> BufferHandle or None" },
	{ "batch_get_buffer", METH(store_batch_get_buffer), METH_O,
	  "batch_get_buffer(keys) -> [BufferHandle or None]" },
	{ "is_exist", METH(store_is_exist), METH_O, "is_exist(key) -> 1, 0 or -1" },
	{ "batch_is_exist", METH(store_batch_is_exist), METH_O,
	  "batch_is_exist(keys) -> [1, 0 or -1]" },
	{ "get_size", METH(store_get_size), METH_O, "get_size(key) -> size or negative code" },
	{ "remove", METH(store_remove), KW, "remove(key, force=False) -> int" },
	{ "batch_remove", METH(store_batch_remove), KW, "batch_remove(keys, force=False) -> [int]" },
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
	{ "get_into", METH(store_get_into), KW,
	  "get_into(key, buffer_ptr, size) -> bytes read or negative code" },
	{ "batch_put_from", METH(store_batch_put_from), KW,
	  "batch_put_from(keys, buffer_ptrs, sizes, config=None) -> [int]" },
	{ "batch_get_into", METH(store_batch_get_into), KW,
	  "batch_get_into(keys, buffer_ptrs, sizes) -> [bytes read or negative code]" },
	{ "batch_put_from_multi_buffers", METH(store_batch_put_from_multi_buffers), KW,
	  "batch_put_from_multi_buffers(keys, all_buffer_ptrs, all_sizes, config=None) -> [int]" },
	{ "batch_get_into_multi_buffers", METH(store_batch_get_into_multi_buffers), KW,
	  "batch_get_into_multi_buffers(keys, all_buffer_ptrs, all_sizes, "
	  "prefer_alloc_in_same_node=False) -> [bytes read or negative code]" },
	{ "get_hostname", METH(store_get_hostname), METH_NOARGS, "get_hostname() -> str" },
	{ "last_error", METH(store_last_error), METH_NOARGS,
	  "last_error() -> str: why the last setup failed ('' if it did not)" },
	{ "segment_name", METH(store_segment_name), METH_NOARGS,
	  "segment_name() -> the embedded node's /dev/shm segment, or None" },
	{ "stat", METH(store_stat), METH_O,
	  "stat(key) -> dict (size, replicas, lease_ms, pin_ms, ...) or None (kvpool extension)" },
	{ "stats", METH(store_stats), METH_NOARGS,
	  "stats() -> dict of client counters (local_bytes, tcp_bytes, ...), None if not set up" },
	{ NULL }
};

static PyTypeObject store_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvpool.DistributedStore",
	.tp_basicsize = sizeof(struct store),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "A kvpool client with the methods of Mooncake's MooncakeDistributedStore.",
	.tp_new = store_new,
	.tp_init = (initproc)store_init,
	.tp_dealloc = (destructor)store_dealloc,
	.tp_methods = store_methods,
};

/* ---- module ------------------------------------------------------------------ */

/* atexit: stores still set up are closed, so embedded nodes unmount and
 * remove their segments even when the program never called close(). */
static PyObject *mod_close_all(PyObject *mod, PyObject *unused)
{
	PyObject *all = PyList_New(0);

	/* Referenced first: the list may change while a teardown runs without
	 * the GIL. */
	for (struct store *s = live_stores; all && s; s = s->live_next)
		if (PyList_Append(all, (PyObject *)s) < 0)
			Py_CLEAR(all);
	if (!all)
		return NULL;
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++)
		store_teardown((struct store *)PyList_GET_ITEM(all, i));
	Py_DECREF(all);
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
	{ NULL }
};

static struct PyModuleDef kvpool_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "kvpool",
	.m_doc = "kvpool: a distributed KV-cache pool. DistributedStore (alias "
		 "MooncakeDistributedStore) has the methods of Mooncake Store's Python client.",
	.m_size = -1,
	.m_methods = mod_methods,
};

PyMODINIT_FUNC PyInit_kvpool(void);

PyMODINIT_FUNC PyInit_kvpool(void)
{
	PyObject *m, *names = NULL, *atexit = NULL, *fn = NULL, *r;

	if (PyType_Ready(&store_type) < 0 || PyType_Ready(&pybuf_type) < 0 ||
	    PyType_Ready(&repcfg_type) < 0)
		return NULL;
	m = PyModule_Create(&kvpool_module);
	if (!m)
		return NULL;
	if (PyModule_AddObjectRef(m, "DistributedStore", (PyObject *)&store_type) < 0 ||
	    PyModule_AddObjectRef(m, "MooncakeDistributedStore", (PyObject *)&store_type) < 0 ||
	    PyModule_AddObjectRef(m, "BufferHandle", (PyObject *)&pybuf_type) < 0 ||
	    PyModule_AddObjectRef(m, "ReplicateConfig", (PyObject *)&repcfg_type) < 0 ||
	    PyModule_AddStringConstant(m, "__version__", KVP_VERSION) < 0)
		goto out_err;
	for (int e = 0; e >= KVP_ERR_MIN; e--)
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

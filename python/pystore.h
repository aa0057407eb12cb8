/* pystore: the store object of the `kvpool` extension (the C base of
 * kvpool.MooncakeDistributedStore) shared by its files: pystore.c (the
 * handles, registered buffers, the type), pysetup.c (setup/close), pynode.c
 * (embedded nodes), pyput.c (the put path), pyops.c (single-object calls),
 * pybatch.c (batch calls), pyadmin.c (replicas, segments, health). Blocking
 * libkvpool calls run without the GIL under store->lock held for reading;
 * setup, close and segment (un)mounts hold it for writing.
 */
#ifndef KVP_PYSTORE_H
#define KVP_PYSTORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "conf.h"
#include "kvpool.h"
#include "pynode.h"

/* PyMethodDef wants PyCFunction; the detour through void (*)(void) keeps
 * -Wcast-function-type quiet for methods with other signatures. */
#define METH(f) ((PyCFunction)(void (*)(void))(f))
#define KW (METH_VARARGS | METH_KEYWORDS)

#define HARD_PIN_MS (100ull * 365 * 24 * 3600 * 1000)	/* "forever" for with_hard_pin */

struct putopt;
struct conv_keys;

struct store {
	PyObject_HEAD
	/* Read-held (GIL released) by every call that uses a handle; write-held
	 * by setup and close. Writers are preferred so close is not starved. */
	pthread_rwlock_t lock;
	struct kvp *kvp;		/* protected by lock */
	/* Every layer setup() loaded, once (file, environment, arguments):
	 * segments mounted later start from it, nothing is re-read. Holds the
	 * cluster token; wiped when freed. Written under lock (write). */
	struct kvp_conf *conf;
	/* Embedded nodes: [0] is setup()'s (global_segment_size > 0), the others
	 * allocate_and_mount_segment's. Written under lock (write). */
	struct emb *emb[EMB_MAX];
	size_t nemb;
	/* Node names of this host's segments for preferred_segment and
	 * prefer_alloc_in_same_node, looked up once (kvp_info). */
	pthread_mutex_t plock;
	bool nodes_known;		/* protected by plock */
	char local_node[64];		/* protected by plock: a node on this host */
	char hostname[CONF_STR];	/* local_hostname as given (or the host's name) */
	char hostport[CONF_STR + 8];	/* get_hostname(): Mooncake's "host:port" */
	bool dummy;			/* setup_dummy: get_hostname() is "" */
	char ssd_dir[CONF_STR];		/* enable_ssd_offload: the nodes' spill files */
	/* A tenant_id other than "default": every key of this store lives
	 * under "tenant=<id>/" (Mooncake keeps tenants' keys apart); "" else. */
	char tenant[80];
	char errmsg[1024];		/* last setup failure */
	pid_t owner;			/* process that set it up; 0 = not set up */
	struct store *live_prev, *live_next;	/* live list, protected by the GIL */
	/* Completion queues opened on this store's handle (pycq.h), closed by
	 * its teardown. Protected by lock (write). */
	struct pycq *cqs;
};

extern PyTypeObject store_type;
extern struct store *store_live;	/* protected by the GIL */

/* The methods of DistributedStore, one table per file (NULL-terminated);
 * store_type_ready() joins them. */
extern PyMethodDef store_methods[];	/* pystore.c: introspection */
extern PyMethodDef setup_methods[];	/* pysetup.c */
extern PyMethodDef ops_methods[];	/* pyops.c */
extern PyMethodDef batch_methods[];	/* pybatch.c */
extern PyMethodDef admin_methods[];	/* pyadmin.c */
/* Module-level functions of pyadmin.c (memcpy, buffers, NUMA, allocators). */
extern PyMethodDef admin_module_methods[];

/* PyType_Ready for store_type with every method table. -1 with an exception. */
int store_type_ready(void);

/* Called without the GIL: the handle for this call, with lock read-held, or
 * NULL (not set up, or a forked child: the connections, the node thread and
 * the lock's state belong to the parent). */
struct kvp *store_enter(struct store *s);
void store_leave(struct store *s);

/* Fresh locks (a new store, or a forked child's copy of one). */
void store_locks_init(struct store *s);

/* pysetup.c: closes what setup opened. Called with the GIL held; releases
 * it. */
void setup_teardown(struct store *s);
/* pysetup.c, lock write-held, GIL released: one more embedded node of
 * @size bytes (0: the configuration's), its segment file @segment ("" for
 * a fresh name). 0 or a KVP_E* code with s->errmsg set. */
int setup_emb_add(struct store *s, uint64_t size, const char *segment);
/* Stops and removes the embedded node named @name; KVP_ENOTFOUND if the
 * store has none of that name. */
int setup_emb_del(struct store *s, const char *name);

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

/* Results as Mooncake's client gives them: a KVP_E* code becomes its
 * ErrorCode value, non-negative results pass. */
static inline int mc(int64_t rc)
{
	return rc >= 0 ? (int)rc : kvp_to_mooncake((int)rc);
}

/* Puts: Mooncake's client treats "already exists" as success (the first
 * writer's bytes are what a get returns; upsert replaces them). */
static inline int mc_put(int rc)
{
	return rc == KVP_EEXIST ? 0 : mc(rc);
}

/* is_exist / batch_is_exist: 1, 0, or -1 for any error (Mooncake's docs). */
static inline int mc_exist(int rc)
{
	return rc == 0 || rc == 1 ? rc : -1;
}

#endif

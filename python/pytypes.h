/* pytypes: ReplicateConfig (Mooncake's per-put options; putopt_get reads
 * them, from ours or a real mooncake.store.ReplicateConfig) and BufferHandle
 * (get_buffer's result: the bytes through the buffer protocol). GIL held.
 */
#ifndef KVP_PYTYPES_H
#define KVP_PYTYPES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stddef.h>

extern PyTypeObject repcfg_type;	/* kvpool.ReplicateConfig */
extern PyTypeObject pybuf_type;		/* kvpool.BufferHandle */

/* What a put's config asks for. */
struct putopt {
	int replicas;			/* 0 = the handle's client.replicas */
	bool hard_pin;
	bool valid;			/* false: the put fails with KVP_EINVAL */
};

/* @cfg: None/NULL or any object with replica_num / with_hard_pin. 0 (with
 * po->valid false for an invalid value), -1 with an exception. */
int putopt_get(PyObject *cfg, struct putopt *po);
/* A BufferHandle that takes ownership of @p (freed with kvp_free); NULL with
 * an exception (and @p freed). */
PyObject *pybuf_new(void *p, size_t len);

#endif

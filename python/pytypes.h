/* pytypes: what a put's ReplicateConfig asks for (putopt_get reads it from
 * any object with Mooncake's attribute names: kvpool.ReplicateConfig, a real
 * mooncake.store.ReplicateConfig, or a plain namespace) and BufferHandle
 * (get_buffer's result and the extension's other byte buffers, exported
 * through the buffer protocol). GIL held.
 */
#ifndef KVP_PYTYPES_H
#define KVP_PYTYPES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PUTOPT_SEG 128

extern PyTypeObject pybuf_type;		/* kvpool.BufferHandle */

/* What a put's config asks for. */
struct putopt {
	int replicas;			/* 0 = the handle's client.replicas */
	bool hard_pin;			/* with_hard_pin */
	bool soft_pin;			/* soft_pin_action ENABLE (or the older with_soft_pin) */
	uint64_t soft_pin_ttl_ms;	/* 0: the master's default */
	bool same_node;			/* prefer_alloc_in_same_node */
	char preferred[PUTOPT_SEG];	/* preferred_segments[0] or preferred_segment, "" none */
	Py_ssize_t ngroups;		/* len(group_ids), -1 when None */
	bool upsert;			/* set by the method: replace an existing value */
	const char *pred;		/* pred=: the key value 0 extends (chains), NULL none */
	bool valid;			/* false: the put fails with KVP_EINVAL */
};

/* @cfg: None/NULL or any object with ReplicateConfig's attributes (missing
 * ones keep their defaults). 0 (po->valid false for an invalid value), -1
 * with an exception. */
int putopt_get(PyObject *cfg, struct putopt *po);

enum pybuf_kind { PYBUF_KVP, PYBUF_MEM };

/* A BufferHandle that takes ownership of @p: kvp_free (PYBUF_KVP) or
 * pymem_free(p, cap) (PYBUF_MEM). NULL with an exception (and @p freed). */
PyObject *pybuf_new(void *p, size_t len, size_t cap, enum pybuf_kind kind);
/* A new writable handle of @len bytes (pymem), uninitialised; NULL with an
 * exception. */
PyObject *pybuf_alloc(size_t len);
/* The bytes of a handle (p, len); @o must be a BufferHandle. */
void pybuf_span(PyObject *o, void **p, size_t *len);
/* Shrinks the visible length (a read returned fewer bytes than reserved). */
void pybuf_set_len(PyObject *o, size_t len);

#endif

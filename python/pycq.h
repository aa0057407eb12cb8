/* pycq: kvpool._kvpool.CompletionQueue, libkvpool's completion queue
 * (kvp_cq_*) over a DistributedStore's handle, for engines whose event loop
 * polls a file descriptor (kvpool.lmcache). Its queue pointer is guarded by
 * the store's lock: written with it write-held (open, close, the store's
 * teardown), read with it read-held (submit, drain). The buffers a batch
 * reads or fills stay exported (Py_buffer) until its completion is drained,
 * under the GIL.
 */
#ifndef KVP_PYCQ_H
#define KVP_PYCQ_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

struct store;

extern PyTypeObject pycq_type;

/* The store's teardown, its lock write-held, GIL released: closes the
 * queues opened on it (their batches cancelled or finished) before the
 * handle goes. Their undrained batches then complete as failed at the
 * next drain(). */
void pycq_store_closing(struct store *s);

#endif

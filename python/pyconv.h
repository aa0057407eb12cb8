/* pyconv: Python arguments to the C arrays libkvpool takes (keys, addresses,
 * sizes), Python lists of results, and a NULL-terminated string vector.
 * Every function is called with the GIL held; -1 means a Python exception is
 * set (conv_strv_*: -1 is out of memory, no exception).
 */
#ifndef KVP_PYCONV_H
#define KVP_PYCONV_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conv_strv {
	char **v;			/* NULL-terminated */
	size_t n, cap;
};

int conv_strv_add(struct conv_strv *s, const char *str);
int conv_strv_addf(struct conv_strv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void conv_strv_free(struct conv_strv *s);

/* Keys of one call, copied out of the Python objects so that the GIL can be
 * released while libkvpool reads them (another thread may mutate the list).
 * A key that cannot be a kvpool key (embedded NUL) becomes "", which
 * libkvpool rejects per item with KVP_EKEY. */
struct conv_keys {
	size_t n;
	const char **k;
	char *arena;
};

/* @seq: a sequence of str/bytes keys, or (one == true) a single key. */
int conv_keys(PyObject *seq, bool one, struct conv_keys *ks);
/* The same, each key after @prefix (a store's tenant namespace; NULL or ""
 * for none). An empty key stays empty (KVP_EKEY). */
int conv_keys_in(PyObject *seq, bool one, const char *prefix, struct conv_keys *ks);
void conv_keys_free(struct conv_keys *ks);

/* An address or a size: a non-negative int below 2**64; @what names the
 * argument in the exception. */
int conv_u64(PyObject *o, uint64_t *out, const char *what);
/* A list of @n such ints (n = -1: any length, given back in *got) into a
 * malloc'd *out. */
int conv_u64s(PyObject *seq, Py_ssize_t n, uint64_t **out, Py_ssize_t *got, const char *what);
/* buffer_ptrs and sizes lists of @n items each into malloc'd arrays (the
 * caller frees both, also after a failure). 0; 1 (no exception) when a list
 * does not have @n items, which Mooncake answers with INVALID_PARAMS for
 * every key; -1 with an exception. */
int conv_ptr_lists(PyObject *pl, PyObject *sl, size_t n, void ***bufs, size_t **lens);
/* A new list of @n copies of @code; NULL with an exception. */
PyObject *conv_code_list(size_t n, int code);
/* A new list of the @n ints in @iv, or (iv NULL) in @lv; NULL with an
 * exception. */
PyObject *conv_int_list(size_t n, const int *iv, const int64_t *lv);

#endif

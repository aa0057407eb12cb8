"""EngramStore: per-layer embedding tables in the pool (Mooncake's
mooncake.store.EngramStore). Head h of layer l is one object,
"engram:l<l>:h<h>", a float32 [vocab_h, embedding_dim] table; lookup(row_ids)
gathers rows into a [B, L, H, D] numpy array. Mooncake reads each row from
the segment; kvpool reads each table once, verified, and keeps it for this
EngramStore's later lookups (the tables are immutable while the layer
exists: populate refuses existing keys, remove_from_store drops the copies).
Needs numpy.
"""
import threading

__all__ = ["EngramStore", "EngramStoreConfig"]

OBJECT_NOT_FOUND = -704
INVALID_PARAMS = -600


class EngramStoreConfig:
    def __init__(self, table_vocab_sizes=None, embedding_dim=0):
        self.table_vocab_sizes = list(table_vocab_sizes or [])
        self.embedding_dim = embedding_dim


class EngramStore:
    def __init__(self, layer_id, config, store=None):
        vocab = [int(v) for v in config.table_vocab_sizes]
        if not vocab:
            raise ValueError("EngramStoreConfig.table_vocab_sizes must not be empty")
        if int(config.embedding_dim) <= 0:
            raise ValueError("EngramStoreConfig.embedding_dim must be positive")
        if any(v <= 0 for v in vocab):
            raise ValueError("EngramStoreConfig.table_vocab_sizes must contain only "
                             "positive values")
        if store is None or not hasattr(store, "batch_get_buffer"):
            raise RuntimeError("EngramStore needs a set-up MooncakeDistributedStore")
        self._store = store
        self._vocab = vocab
        self._dim = int(config.embedding_dim)
        self._keys = ["engram:l%d:h%d" % (layer_id, h) for h in range(len(vocab))]
        self._tables = None
        self._lock = threading.Lock()

    def get_table_vocab_sizes(self):
        return list(self._vocab)

    def get_store_keys(self):
        return list(self._keys)

    def get_num_heads(self):
        return len(self._vocab)

    def get_embedding_dim(self):
        return self._dim

    def populate(self, embedding_buffers):
        """Stores head h's float32 [vocab_h, D] array under its key; the keys
        must not exist yet. RuntimeError on failure (nothing left behind)."""
        import numpy as np
        bufs = list(embedding_buffers)
        if len(bufs) != len(self._keys):
            raise RuntimeError("embedding_buffers size must match num_heads")
        arrs = []
        for b, v in zip(bufs, self._vocab):
            if not isinstance(b, np.ndarray):
                raise RuntimeError("embedding_buffers must be NumPy arrays")
            a = np.ascontiguousarray(b, dtype=np.float32)
            if a.ndim != 2 or a.shape != (v, self._dim):
                raise RuntimeError("embedding buffer shape does not match "
                                   "get_table_vocab_sizes()/get_embedding_dim()")
            arrs.append(a)
        if any(e != 0 for e in self._store.batch_is_exist(self._keys)):
            raise RuntimeError("populate failed: remove the existing layer first")
        res = self._store.batch_put_from(self._keys, [a.ctypes.data for a in arrs],
                                         [a.nbytes for a in arrs])
        if any(r != 0 for r in res):
            for k, r in zip(self._keys, res):
                if r == 0:
                    self._store.remove(k, True)
            raise RuntimeError("populate failed")
        with self._lock:
            self._tables = None

    def _load(self):
        import numpy as np
        with self._lock:
            if self._tables is None:
                hs = self._store.batch_get_buffer(self._keys)
                if any(h is None for h in hs):
                    raise RuntimeError("EngramStore lookup failed")
                self._tables = [np.frombuffer(h, dtype=np.float32).reshape(v, self._dim)
                                for h, v in zip(hs, self._vocab)]
            return self._tables

    def lookup(self, row_ids):
        """Rows by id: row_ids [B, L, H] (nested lists or an array) ->
        float32 [B, L, H, D]."""
        import numpy as np
        ids = np.asarray(row_ids, dtype=np.int64)
        if ids.ndim != 3 or ids.shape[0] == 0 or ids.shape[1] == 0:
            raise RuntimeError("row_ids array must have shape [B, L, H]")
        if ids.shape[2] != len(self._vocab):
            raise RuntimeError("row_ids last dimension must match num_heads")
        for h, v in enumerate(self._vocab):
            col = ids[:, :, h]
            if col.min() < 0 or col.max() >= v:
                raise RuntimeError("EngramStore lookup failed")
        tables = self._load()
        out = np.empty(ids.shape + (self._dim,), dtype=np.float32)
        for h, t in enumerate(tables):
            out[:, :, h, :] = t[ids[:, :, h]]
        return out

    def remove_from_store(self, force=False):
        """Removes the layer's tables; the number removed (missing ones are
        skipped). RuntimeError on another failure."""
        removed, first = 0, 0
        for k in self._keys:
            rc = self._store.remove(k, force)
            if rc == 0:
                removed += 1
            elif rc != OBJECT_NOT_FOUND and not first:
                first = rc
        with self._lock:
            self._tables = None
        if first:
            raise RuntimeError("remove_from_store failed, rc=%d" % first)
        return removed

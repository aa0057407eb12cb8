"""kvpool as an LMCache multi-process L2 tier, through LMCache's
``native_plugin`` L2 adapter type::

    --l2-adapter '{"type": "native_plugin",
                   "module_path": "kvpool.lmcache",
                   "class_name": "KVPoolConnector",
                   "adapter_params": {"master": "10.0.0.1:50051",
                                      "model": "meta-llama/Llama-3.1-8B",
                                      "dtype": "bfloat16", "chunk_size": 256,
                                      "tp": 1, "num_workers": 4}}'

LMCache imports this module, builds ``KVPoolConnector(**adapter_params)``
and wraps it in its ``NativeConnectorL2Adapter``, whose demux thread polls
``event_fd()`` and calls ``drain_completions()``. The connector contract
(LMCache/LMCache, lmcache/v1/distributed/l2_adapters/native_plugin_l2_adapter.py
and native_connector_l2_adapter.py; docs/engines.md names the commit) is
duck-typed: no LMCache class is subclassed, so this module imports and
works whether LMCache is installed or not.

The batches run on libkvpool's completion queue (kvp_cq_*, through
kvpool._kvpool.CompletionQueue): worker threads outside the GIL, one
eventfd. Every key lives under one namespace, ``<namespace>/<LMCache key>``;
the namespace is ``adapter_params["namespace"]`` or derived from the model
layout fields, and is declared on the store at construction.
"""
import hashlib
import json
import re
import threading

from . import _kvpool

__all__ = ["KVPoolConnector", "namespace_for"]

_EEXIST = _kvpool.KVP_EEXIST


def namespace_for(model="", dtype="", page_size=0, layout="lmcache", tp=1):
    """The namespace a configuration's keys live under:
    ``lmcache-<model>-<12 hex digits of the layout fingerprint>``, so two
    deployments share blocks exactly when model, dtype, chunk size, layout
    and tensor parallelism agree."""
    fp = json.dumps({"model": str(model), "dtype": str(dtype), "page_size": int(page_size),
                     "layout": str(layout), "tp": int(tp)}, sort_keys=True)
    name = re.sub(r"[^A-Za-z0-9_-]", "_", str(model or "any"))[-48:]
    return "lmcache-%s-%s" % (name, hashlib.sha256(fp.encode()).hexdigest()[:12])


def _message(i, code):
    return "key %d: %s" % (i, _kvpool.strerror(code))


class KVPoolConnector:
    """LMCache's native connector contract over a kvpool store.

    adapter_params (all optional; a pool must be named by ``master``,
    ``config_file`` or the MOONCAKE_*/KVPOOL_* environment):
      master          "host:port" of kvpool-master (or etcd://... with HA)
      config_file     a kvpool INI file
      protocol        "tcp", "rdma" or "auto" (kvpool's default: auto)
      num_workers     completion queue threads (default 4)
      namespace       the key namespace (default: namespace_for(...))
      model, dtype, chunk_size (or page_size), layout, tp
                      the fingerprint of the namespace
      setup           more MooncakeDistributedStore.setup() keys (a dict),
                      e.g. {"global_segment_size": "4GB"} to lend memory
      store           an already set-up kvpool store to use (not closed here)
    """

    def __init__(self, master=None, config_file=None, protocol=None, num_workers=4,
                 namespace=None, model="", dtype="", chunk_size=None, page_size=None,
                 layout="lmcache", tp=1, setup=None, store=None):
        page = int(chunk_size if chunk_size is not None else
                   page_size if page_size is not None else 256)
        self._ns = str(namespace) if namespace else namespace_for(model, dtype, page, layout, tp)
        if "/" in self._ns or not self._ns:
            raise ValueError("namespace must be non-empty and hold no '/': %r" % self._ns)
        self._prefix = self._ns + "/"
        self._own_store = store is None
        self._cq = None
        if store is None:
            from . import MooncakeDistributedStore
            cfg = dict(setup or {})
            if master:
                cfg["master_server_addr"] = master
            if config_file:
                cfg["config_file"] = config_file
            if protocol:
                cfg["protocol"] = protocol
            store = MooncakeDistributedStore()
            rc = store.setup(cfg)
            if rc != 0:
                raise RuntimeError("kvpool setup failed (%d): %s" % (rc, store.last_error()))
        self._store = store
        try:
            # kvpool.NamespaceMismatchError (the pool holds this namespace
            # for another layout) stops the adapter's creation.
            store.declare_namespace(self._ns, model=str(model or "unknown"),
                                    dtype=str(dtype or "unknown"), page_size=page,
                                    layout=str(layout or "lmcache"), tp=int(tp))
            self._cq = _kvpool.CompletionQueue(store, int(num_workers))
        except BaseException:
            self._close_store()
            raise
        # tag -> (op, per-key buffer lengths for a get); guards that the
        # demux thread never sees a tag before its submitter recorded it.
        self._lock = threading.Lock()
        self._pending = {}

    @property
    def namespace(self):
        return self._ns

    # --- the contract -----------------------------------------------------

    def event_fd(self):
        return self._cq.event_fd()

    def _keys(self, keys):
        p = self._prefix
        return [p + k for k in keys]

    def submit_batch_get(self, keys, memoryviews):
        lens = [memoryview(m).nbytes for m in memoryviews]
        with self._lock:
            tag = self._cq.submit_get(self._keys(keys), memoryviews)
            self._pending[tag] = (_kvpool.CQ_GET, lens)
        return tag

    def submit_batch_set(self, keys, memoryviews):
        with self._lock:
            tag = self._cq.submit_set(self._keys(keys), memoryviews)
            self._pending[tag] = (_kvpool.CQ_SET, None)
        return tag

    def submit_batch_exists(self, keys):
        with self._lock:
            tag = self._cq.submit_exists(self._keys(keys))
            self._pending[tag] = (_kvpool.CQ_EXISTS, None)
        return tag

    def submit_batch_delete(self, keys):
        with self._lock:
            tag = self._cq.submit_delete(self._keys(keys))
            self._pending[tag] = (_kvpool.CQ_DELETE, None)
        return tag

    def drain_completions(self):
        """[(future_id, ok, error, result_bools)] as LMCache's pybind layer
        gives them: exists -> per-key found; get -> per-key loaded (the value
        filled the buffer exactly) with ok only when every key loaded; set ->
        None, ok when every key is stored (already there counts); delete ->
        per-key removed."""
        out = []
        with self._lock:
            for tag, op, status, res in self._cq.drain():
                _, lens = self._pending.pop(tag, (op, None))
                out.append(self._completion(tag, op, status, res, lens))
        return out

    def close(self):
        if self._cq is not None:
            self._cq.close()
            self._cq = None
        self._close_store()

    # --- helpers -----------------------------------------------------------

    def _close_store(self):
        if self._own_store and self._store is not None:
            self._store.close()
        self._store = None

    @staticmethod
    def _completion(tag, op, status, res, lens):
        if status < 0:
            return (tag, False, _kvpool.strerror(status), None)
        errs = []
        if op == _kvpool.CQ_GET:
            bools = []
            for i, r in enumerate(res):
                good = lens is not None and r == lens[i]
                bools.append(good)
                if not good:
                    errs.append(_message(i, r) if r < 0 else
                                "key %d: value of %d bytes for a buffer of %d" %
                                (i, r, lens[i] if lens else -1))
            return (tag, not errs, errs[0] if errs else "", bools)
        if op == _kvpool.CQ_SET:
            for i, r in enumerate(res):
                if r != 0 and r != _EEXIST:
                    errs.append(_message(i, r))
            return (tag, not errs, errs[0] if errs else "", None)
        if op == _kvpool.CQ_EXISTS:
            errs = [_message(i, r) for i, r in enumerate(res) if r < 0]
            return (tag, True, errs[0] if errs else "", [r == 1 for r in res])
        errs = [_message(i, r) for i, r in enumerate(res)
                if r < 0 and r != _kvpool.KVP_ENOTFOUND]
        return (tag, True, errs[0] if errs else "", [r == 0 for r in res])

"""kvpool.sglang: SGLang HiCache's L3 storage backend on a kvpool pool.

Loaded by SGLang as a dynamic backend:

    --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
    '{"backend_name": "kvpool", "module_path": "kvpool.sglang",
      "class_name": "KvpoolHiCacheStorage", "interface_v1": 1}'

Interface followed: sgl-project/sglang python/sglang/srt/mem_cache/
hicache_storage.py (HiCacheStorage, HiCacheStorageConfig) and
storage/backend_factory.py (a dynamic backend is built as
`cls(storage_config, kwargs)`, then `register_mem_pool_host(host_pool)`), at
commit 001067fffe33427bee0ed2f007fb7551a1d76b44; docs/engines.md has the rest.

One object per page and K/V half (MHA: `<hash>_<tp_rank>_k`, `_v`; MLA: one
`<hash>_k` that only TP rank 0 writes), all under one namespace prefix derived
from the model, the attention kind and the TP size. The zero-copy path
(batch_get_v1/batch_set_v1) moves bytes straight between the registered host
pool's pages and the pool; the legacy path (get/set/batch_get/batch_set on
flat page tensors) reads and writes the same objects, so both paths see each
other's pages.

Works with SGLang installed (the class subclasses its HiCacheStorage ABC, and
get_stats returns its StorageMetrics) and without it (a plain class with the
same methods; the harness test python/tests/test_sglang_backend.py).
"""
import ctypes
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, List, Optional

try:  # pragma: no cover - SGLang is not installed where kvpool is tested
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _Base
except Exception:  # ImportError, or an SGLang whose import needs a GPU stack
    _Base = object

try:  # pragma: no cover
    from sglang.srt.observability.metrics_collector import StorageMetrics as _Metrics
except Exception:
    _Metrics = None

log = logging.getLogger(__name__)

# Mooncake's codes as kvpool returns them (kvpool.ErrorCode).
_OBJECT_ALREADY_EXISTS = -705

# extra_config keys that go to the store's setup() (Mooncake's names, as
# SGLang's Mooncake backend reads them, and kvpool's own); any "section.key"
# goes too. The rest belongs to SGLang or to this backend.
_SETUP_KEYS = (
    "master_server_address", "master_server_addr", "metadata_server", "protocol",
    "device_name", "rdma_devices", "local_hostname", "global_segment_size",
    "local_buffer_size", "config_file", "cluster_token_file", "cluster_token",
    "strict_protocol", "tenant_id", "replica_num", "enable_ssd_offload",
    "ssd_offload_path",
)


@dataclass
class KvpoolStorageMetrics:
    """SGLang's StorageMetrics shape, for when SGLang is not importable."""
    prefetch_pgs: List[int] = field(default_factory=list)
    backup_pgs: List[int] = field(default_factory=list)
    prefetch_bandwidth: List[float] = field(default_factory=list)
    backup_bandwidth: List[float] = field(default_factory=list)


def _cfg(storage_config, name, default=None):
    v = getattr(storage_config, name, default) if storage_config is not None else default
    return default if v is None else v


def _name_part(s):
    """A namespace-safe spelling of a model name ("org/Model-7B" -> "org-Model-7B")."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(s)).strip("-") or "unnamed"


def _indices_list(indices):
    if hasattr(indices, "tolist"):
        return indices.tolist()
    return list(indices)


def _buffer_of(obj, writable):
    """(address, size) of a tensor, numpy array or buffer-protocol object."""
    if hasattr(obj, "data_ptr") and hasattr(obj, "element_size"):   # torch
        if hasattr(obj, "is_contiguous") and not obj.is_contiguous():
            raise ValueError("kvpool.sglang: page tensor is not contiguous")
        return obj.data_ptr(), obj.numel() * obj.element_size()
    if hasattr(obj, "ctypes") and hasattr(obj, "nbytes"):             # numpy
        return obj.ctypes.data, obj.nbytes
    mv = memoryview(obj)
    if mv.readonly:
        if writable:
            raise ValueError("kvpool.sglang: read-only target buffer")
        return None, mv.nbytes
    return ctypes.addressof(ctypes.c_char.from_buffer(mv)), mv.nbytes


class KvpoolHiCacheStorage(_Base):
    """HiCacheStorage over kvpool. storage_config is SGLang's
    HiCacheStorageConfig (or any object with its fields); kwargs is what
    backend_factory passes as the second argument (unused). A `store` keyword
    uses an already set-up kvpool store instead of opening one."""

    def __init__(self, storage_config=None, kwargs=None, *, store=None):
        extra = dict(_cfg(storage_config, "extra_config", {}) or {})
        self.extra_config = extra
        self.tp_rank = int(_cfg(storage_config, "tp_rank", 0))
        self.tp_size = int(_cfg(storage_config, "tp_size", 1))
        self.pp_rank = int(_cfg(storage_config, "pp_rank", 0))
        self.pp_size = int(_cfg(storage_config, "pp_size", 1))
        self.cp_rank = int(_cfg(storage_config, "attn_cp_rank", 0))
        self.cp_size = int(_cfg(storage_config, "attn_cp_size", 1))
        self.is_mla = bool(_cfg(storage_config, "is_mla_model", False))
        self.model_name = _cfg(storage_config, "model_name", "") or ""
        self.enable_metrics = bool(_cfg(storage_config, "enable_storage_metrics", False))
        self.interface_v1 = bool(extra.get("interface_v1", 0))
        if _cfg(storage_config, "should_split_heads", False):
            raise ValueError("kvpool.sglang: tp_lcm_size (split heads) is not supported")

        # The namespace: one per model and attention layout; MHA pages are
        # split by TP rank, so the TP size is part of it (a TP=4 deployment
        # must not read a TP=2 one's rank-1 halves).
        if extra.get("namespace"):
            self.namespace = str(extra["namespace"])
        else:
            kind = "mla" if self.is_mla else "mha-tp%d" % self.tp_size
            tag = extra.get("extra_backend_tag")     # SGLang's Mooncake key prefix
            model = _name_part(self.model_name)
            if tag is not None:
                model = _name_part(tag) + "-" + model
            # A namespace name is at most 128 characters.
            self.namespace = "sglang-%s-%s" % (model[:100], kind)
        if self.pp_size > 1:
            rank = "%d_%d" % (self.tp_rank, self.pp_rank)
            self._suffix = "_%d" % self.pp_rank if self.is_mla else "_" + rank
        else:
            self._suffix = "" if self.is_mla else "_%d" % self.tp_rank
        if self.cp_size > 1:
            self._suffix += "_cp%d" % self.cp_rank
        self._declared = False

        self._own_store = store is None
        self.store = store if store is not None else self._open(extra)
        self.mem_pool_host = None
        self._registered = []
        self._lock = threading.Lock()
        self._metrics = KvpoolStorageMetrics()

    # --- set-up ----------------------------------------------------------

    def _open(self, extra):
        import kvpool
        conf = {k: extra[k] for k in _SETUP_KEYS if k in extra}
        conf.update({k: v for k, v in extra.items() if "." in k})
        # As SGLang's Mooncake backend: the memory a process lends is split
        # over its TP x PP ranks.
        if "global_segment_size" in conf:
            seg = conf["global_segment_size"]
            if isinstance(seg, int) and seg > 0:
                conf["global_segment_size"] = max(seg // (self.tp_size * self.pp_size), 1 << 20)
        s = kvpool.MooncakeDistributedStore()
        # Without connection keys: kvpool's own configuration (INI,
        # KVPOOL_*) and Mooncake's env mode (MOONCAKE_CONFIG_PATH, MOONCAKE_*).
        rc = s.setup(conf) if conf else s.setup()
        if rc != 0:
            raise RuntimeError("kvpool.sglang: store setup failed (%d): %s"
                               % (rc, s.last_error()))
        return s

    def _declare(self, host):
        """Declares the namespace with the host pool's dtype, page size and
        layout (once: the first host pool's)."""
        if self._declared:
            return
        layout = getattr(host, "layout", None) or "page_first"
        self.store.declare_namespace(
            self.namespace, model=str(self.model_name or "unknown"),
            dtype=str(getattr(host, "dtype", None) or "unknown"),
            page_size=int(getattr(host, "page_size", 1) or 1),
            layout="%s/%s" % ("mla" if self.is_mla else "mha", layout),
            tp=1 if self.is_mla else max(self.tp_size, 1))
        self._declared = True

    def register_mem_pool_host(self, mem_pool_host):
        """Declares the namespace with the host pool's dtype and page size
        and registers the pool's buffers with the store (zero-copy path).
        An error (kvpool.NamespaceMismatchError: the pool holds this
        namespace for another layout) closes the backend and propagates:
        SGLang's attach fails with it."""
        try:
            self._register_host(mem_pool_host)
        except BaseException:
            self.close()
            raise

    def _register_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host
        self._declare(mem_pool_host)
        if getattr(mem_pool_host, "kv_buffer", None) is None:
            return
        get = getattr(mem_pool_host, "get_hybrid_pool_buffer", None)
        bufs = get() if get is not None else [mem_pool_host.kv_buffer]
        for b in bufs:
            if b is None:
                continue
            ptr, size = _buffer_of(b, writable=True)
            if not size or ptr in self._registered:
                continue
            rc = self.store.register_buffer(ptr, size)
            if rc != 0:
                raise RuntimeError("kvpool.sglang: register_buffer failed (%d)" % rc)
            self._registered.append(ptr)

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        if not hasattr(self, "registered_pools"):
            self.registered_pools = {}
        self.registered_pools[host_pool_name] = host_pool

    # --- keys ------------------------------------------------------------

    def _parts(self):
        return ("_k",) if self.is_mla else ("_k", "_v")

    def _object_keys(self, keys):
        """The objects of each page, in page order (MHA: K then V)."""
        ns = self.namespace + "/"
        return [ns + k + self._suffix + p for k in keys for p in self._parts()]

    def _writer(self):
        """MLA pages are the same on every TP rank: only rank 0 writes."""
        return not self.is_mla or self.tp_rank == 0

    # --- zero-copy path ----------------------------------------------------

    def _page_meta(self, keys, host_indices):
        host = self.mem_pool_host
        if host is None:
            raise RuntimeError("kvpool.sglang: no host pool registered")
        idx = _indices_list(host_indices)
        page = int(getattr(host, "page_size", 1) or 1)
        if len(idx) != len(keys) * page:
            raise ValueError("kvpool.sglang: %d host indices for %d pages of %d"
                             % (len(idx), len(keys), page))
        ptrs, sizes = host.get_page_buffer_meta(host_indices)
        if not isinstance(sizes, (list, tuple)):
            sizes = [sizes] * len(ptrs)
        nobj = len(keys) * len(self._parts())
        if len(ptrs) != len(sizes) or not ptrs or len(ptrs) % nobj:
            raise ValueError("kvpool.sglang: host pool gives %d buffers for %d objects"
                             % (len(ptrs), nobj))
        per = len(ptrs) // nobj
        if per == 1:
            return self._object_keys(keys), list(ptrs), list(sizes), False
        if not self.is_mla:
            # layer_first MHA interleaves K and V per layer: not one K object
            # and one V object per page (SGLang's Mooncake backend refuses it too).
            raise ValueError("kvpool.sglang: MHA needs a page_first host layout")
        return (self._object_keys(keys),
                [list(ptrs[i:i + per]) for i in range(0, len(ptrs), per)],
                [list(sizes[i:i + per]) for i in range(0, len(sizes), per)], True)

    def _per_page(self, results, ok, npages):
        n = len(self._parts())
        return [all(ok(r) for r in results[i * n:(i + 1) * n]) for i in range(npages)]

    def _record(self, kind, pages, nbytes, t0):
        if not self.enable_metrics or not pages:
            return
        dt = max(time.perf_counter() - t0, 1e-9)
        with self._lock:
            getattr(self._metrics, kind + "_pgs").append(pages)
            getattr(self._metrics, kind + "_bandwidth").append(nbytes / dt / (1 << 30))

    def batch_get_v1(self, keys: List[str], host_indices, extra_info=None) -> List[bool]:
        if not keys:
            return []
        okeys, ptrs, sizes, multi = self._page_meta(keys, host_indices)
        t0 = time.perf_counter()
        if multi:
            res = self.store.batch_get_into_multi_buffers(okeys, ptrs, sizes)
        else:
            res = self.store.batch_get_into(okeys, ptrs, sizes)
        out = self._per_page(res, lambda r: r > 0, len(keys))
        self._record("prefetch", sum(out), sum(r for r in res if r > 0), t0)
        return out

    def batch_set_v1(self, keys: List[str], host_indices, extra_info=None) -> List[bool]:
        if not keys:
            return []
        if not self._writer():
            return [True] * len(keys)
        okeys, ptrs, sizes, multi = self._page_meta(keys, host_indices)
        t0 = time.perf_counter()
        # A key already there is kept (its bytes are the same page): 0.
        if multi:
            res = self.store.batch_put_from_multi_buffers(okeys, ptrs, sizes)
        else:
            res = self.store.batch_put_from(okeys, ptrs, sizes)
        out = self._per_page(res, lambda r: r in (0, _OBJECT_ALREADY_EXISTS), len(keys))
        nbytes = sum(sum(s) if multi else s for s in sizes)
        self._record("backup", len(keys), nbytes, t0)
        return out

    # --- legacy path: one flat page per key -------------------------------

    def _split(self, ptr, size):
        """A flat page's object buffers: MHA's is K then V, of equal size."""
        if self.is_mla:
            return [ptr], [size]
        if size % 2:
            raise ValueError("kvpool.sglang: an MHA flat page of odd size %d" % size)
        h = size // 2
        return [ptr, ptr + h], [h, h]

    def _split_all(self, ptrs, sizes):
        """_split over every flat page, flattened in key order."""
        optrs, osizes = [], []
        for p, n in zip(ptrs, sizes):
            a, b = self._split(p, n)
            optrs += a
            osizes += b
        return optrs, osizes

    def _locations(self, values, sizes, writable):
        """Addresses and sizes of the legacy calls' targets: tensors (what
        SGLang's generic page path passes) or raw addresses with sizes."""
        ptrs, lens, holders = [], [], []
        for i, v in enumerate(values):
            if isinstance(v, int):
                if sizes is None:
                    raise ValueError("kvpool.sglang: an address needs its size")
                ptrs.append(v)
                lens.append(int(sizes[i]))
                holders.append(None)
                continue
            p, n = _buffer_of(v, writable)
            if p is None:      # read-only bytes: copy into a buffer we own
                b = ctypes.create_string_buffer(bytes(v), n)
                holders.append(b)
                p = ctypes.addressof(b)
            else:
                holders.append(v)
            ptrs.append(p)
            lens.append(n)
        return ptrs, lens, holders

    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        if not keys:
            return False
        if not self._writer():
            return True
        src = values if values is not None else target_locations
        if src is None or len(src) != len(keys):
            return False
        ptrs, lens, holders = self._locations(src, target_sizes, False)
        okeys = self._object_keys(keys)
        optrs, osizes = self._split_all(ptrs, lens)
        t0 = time.perf_counter()
        res = self.store.batch_put_from(okeys, optrs, osizes)
        del holders
        ok = self._per_page(res, lambda r: r in (0, _OBJECT_ALREADY_EXISTS), len(keys))
        self._record("backup", len(keys), sum(lens), t0)
        return all(ok)

    def set(self, key: str, value: Optional[Any] = None,
            target_location: Optional[Any] = None, target_sizes: Optional[Any] = None) -> bool:
        loc = value if value is not None else target_location
        size = None if target_sizes is None else [target_sizes]
        return self.batch_set([key], [loc], None, size)

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None):
        """Reads each page into its target (SGLang passes a dummy flat page
        tensor per key); returns the targets, None for a page not found.
        Without targets, the pages as bytes (None when missing)."""
        if not keys:
            return []
        if target_locations is None:
            okeys = self._object_keys(keys)
            vals = self.store.get_batch(okeys)
            n = len(self._parts())
            out = []
            for i in range(len(keys)):
                parts = vals[i * n:(i + 1) * n]
                out.append(b"".join(parts) if all(parts) else None)
            return out
        ptrs, lens, holders = self._locations(target_locations, target_sizes, True)
        okeys = self._object_keys(keys)
        optrs, osizes = self._split_all(ptrs, lens)
        t0 = time.perf_counter()
        res = self.store.batch_get_into(okeys, optrs, osizes)
        ok = self._per_page(res, lambda r: r > 0, len(keys))
        # A page is whole only when every object filled its part exactly.
        nparts = len(self._parts())
        for i in range(len(keys)):
            if ok[i] and any(res[i * nparts + j] != osizes[i * nparts + j]
                             for j in range(nparts)):
                ok[i] = False
        self._record("prefetch", sum(ok), sum(r for r in res if r > 0), t0)
        return [target_locations[i] if ok[i] else None for i in range(len(keys))]

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None):
        size = None if target_sizes is None else [target_sizes]
        locs = None if target_location is None else [target_location]
        return self.batch_get([key], locs, size)[0]

    # --- existence ---------------------------------------------------------

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def batch_exists(self, keys: List[str], extra_info=None) -> int:
        """How many pages, from the first, the pool holds whole."""
        if not keys:
            return 0
        res = self.store.batch_is_exist(self._object_keys(keys))
        for i, ok in enumerate(self._per_page(res, lambda r: r == 1, len(keys))):
            if not ok:
                return i
        return len(keys)

    # --- the rest ----------------------------------------------------------

    def get_stats(self):
        with self._lock:
            m, self._metrics = self._metrics, KvpoolStorageMetrics()
        if _Metrics is None:
            return m
        out = _Metrics()
        out.prefetch_pgs.extend(m.prefetch_pgs)
        out.backup_pgs.extend(m.backup_pgs)
        out.prefetch_bandwidth.extend(m.prefetch_bandwidth)
        out.backup_bandwidth.extend(m.backup_bandwidth)
        return out

    def clear(self) -> None:
        """Removes this namespace's pages (only these: other models and
        layouts sharing the pool keep theirs)."""
        self.store.remove_by_regex("^" + re.escape(self.namespace + "/"), True)

    def close(self):
        if self.store is None:
            return
        for ptr in self._registered:
            self.store.unregister_buffer(ptr)
        self._registered = []
        if self._own_store:
            self.store.close()
        self.store = None

"""kvpool.vllm — a secondary tier of vLLM's TieringOffloadingSpec whose
blocks live in a kvpool pool.

vLLM's OffloadingConnector with ``spec_name: TieringOffloadingSpec`` keeps a
CPU primary tier (one shared mmap of ``num_blocks`` rows) and hands each
secondary tier a memoryview of it. This tier registers that memory once with
kvpool (``register_buffer``) and moves rows with ``batch_put_from`` /
``batch_get_into``, so a block goes between the primary tier and the pool
without a copy in Python. Keys are vLLM's offload keys (block hash + KV group
index) in hex, under one namespace derived from the model, dtype, block
layout and parallelism (or the config key ``namespace``).

vLLM loads it from its config, no registration needed:
``{"type": "KVPoolSecondaryTier", "module_path": "kvpool.vllm", ...}``.

Interface followed: vllm-project/vllm,
vllm/v1/kv_offload/tiering/{base,factory,manager}.py at commit
5ac2684976ee22c04fe0d2f968c6cf6096b383f2 (2026-08-07; out-of-tree tiers via
module_path, #51007). With vLLM importable the class subclasses its
SecondaryTierManager and speaks its LookupResult / JobResult /
RequestOffloadingContext; without it, the same methods on a plain class and
stand-ins with the same fields (the harness test uses those).

Threads: every method is called from vLLM's scheduler thread and only
queues work; ``workers`` threads do the pool round trips (lookups, stores,
loads) and post results to queues the scheduler thread drains.
"""
import ctypes
import enum
import hashlib
import json
import logging
import queue
import re
import threading
from dataclasses import dataclass

try:  # vLLM present: its base class and types (the factory asserts issubclass)
    from vllm.v1.kv_offload.base import (LookupResult, OffloadPolicy,  # noqa: F401
                                         RequestOffloadingContext)
    from vllm.v1.kv_offload.tiering.base import (JobMetadata, JobResult,  # noqa: F401
                                                 SecondaryTierManager as _TierBase)
    HAVE_VLLM = True
except ImportError:  # stand-ins with vLLM's names and fields
    HAVE_VLLM = False

    class LookupResult(enum.Enum):
        MISS = enum.auto()
        HIT = enum.auto()
        HIT_PENDING = enum.auto()
        RETRY = enum.auto()

    class OffloadPolicy(enum.Enum):
        CHUNK_LEVEL = "chunk_level"
        REQUEST_LEVEL = "request_level"

    @dataclass
    class RequestOffloadingContext:
        policy: OffloadPolicy = OffloadPolicy.CHUNK_LEVEL

    @dataclass
    class JobMetadata:
        job_id: int
        keys: object
        block_ids: object
        is_promotion: bool
        req_context: object

    @dataclass
    class JobResult:
        job_id: int
        success: bool
        successful_keys: object = None

    class _TierBase:
        medium = None

        def __init__(self, offloading_spec, primary_kv_view, tier_type):
            self._offloading_spec = offloading_spec
            self._primary_kv_view = primary_kv_view
            self.tier_type = tier_type
            self.locality = None

log = logging.getLogger(__name__)

# kvpool / Mooncake return codes this tier tells apart.
_OBJECT_ALREADY_EXISTS = -705

_NS_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _get(obj, path, default=None):
    """obj.a.b.c, or default where a link is missing."""
    for name in path.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return default
    return obj


def namespace_fields(offloading_spec, row_bytes):
    """What makes two engines' blocks interchangeable: the model, its dtype,
    the block layout (tokens per block per KV group, bytes per primary row)
    and the parallelism the row is split by. vLLM's own FS tier hashes the
    same fields into its directory name."""
    cfg = getattr(offloading_spec, "config", None)
    groups = _get(cfg, "groups", ()) or ()
    return {
        "model": str(_get(cfg, "model.name", "unknown")),
        "dtype": str(_get(cfg, "model.dtype", "unknown")),
        "tokens_per_block": [int(getattr(g, "tokens_per_block", 0)) for g in groups],
        "tokens_per_hash": int(_get(cfg, "cache.tokens_per_hash", 0) or 0),
        "tp": int(_get(cfg, "parallel.tp_size", 1) or 1),
        "pp": int(_get(cfg, "parallel.pp_size", 1) or 1),
        "pcp": int(_get(cfg, "parallel.pcp_size", 1) or 1),
        "dcp": int(_get(cfg, "parallel.dcp_size", 1) or 1),
        "replicated_layout": bool(_get(cfg, "replicated_layout", False)),
        "row_bytes": int(row_bytes),
    }


def namespace_name(fields):
    """vllm.<model>.<12 hex digits of the fields>: readable, and two layouts
    never share a name."""
    canon = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canon.encode()).hexdigest()[:12]
    model = _NS_UNSAFE.sub("_", fields["model"]).strip("_") or "model"
    return "vllm.%s.%s" % (model[:80], digest)


class _Lookup:
    """A key's existence as the pool last answered it: None until then.
    reqs: the requests that asked (the entry goes with the last of them)."""
    __slots__ = ("result", "reqs")

    def __init__(self):
        self.result = None
        self.reqs = set()


class KVPoolSecondaryTier(_TierBase):
    """vLLM secondary tier on a kvpool pool. Config keys (besides type and
    module_path): namespace, store_config (a setup() dict), the shortcuts
    master_server_addr / protocol / config_file / local_hostname /
    metadata_server merged into it, workers (threads, default 2),
    locality ("LOCAL"/"REMOTE"), block_bytes (only for a 1-D view)."""

    def __init__(self, offloading_spec, primary_kv_view, tier_type,
                 namespace=None, store_config=None, master_server_addr=None,
                 protocol=None, config_file=None, local_hostname=None,
                 metadata_server=None, workers=2, locality=None, block_bytes=None):
        super().__init__(offloading_spec=offloading_spec,
                         primary_kv_view=primary_kv_view, tier_type=tier_type)
        if locality is not None:
            self.locality = _locality(locality)
        view = primary_kv_view
        if view.ndim >= 2:
            self._block_bytes = int(view.strides[0])
        elif block_bytes:
            self._block_bytes = int(block_bytes)
        else:
            raise ValueError("a 1-D primary view needs block_bytes")
        if not view.contiguous or view.readonly:
            raise ValueError("the primary view must be writable and contiguous")
        self._num_blocks = view.nbytes // self._block_bytes
        # The view's first byte: ctypes over a writable buffer shares it.
        self._anchor = (ctypes.c_char * view.nbytes).from_buffer(view.cast("B"))
        self._base = ctypes.addressof(self._anchor)

        self.fields = namespace_fields(offloading_spec, self._block_bytes)
        self.namespace = namespace or namespace_name(self.fields)
        self._prefix = self.namespace + "/"

        cfg = dict(store_config or {})
        for k, v in (("master_server_addr", master_server_addr), ("protocol", protocol),
                     ("config_file", config_file), ("local_hostname", local_hostname),
                     ("metadata_server", metadata_server)):
            if v is not None:
                cfg[k] = v
        from . import MooncakeDistributedStore
        self._store = MooncakeDistributedStore()
        rc = self._store.setup(cfg) if cfg else self._store.setup()
        if rc != 0:
            raise RuntimeError("kvpool setup failed (%d): %s"
                               % (rc, self._store.last_error()))
        try:
            # kvpool.NamespaceMismatchError (the pool holds this namespace
            # for another layout) stops the tier.
            self._store.declare_namespace(
                self.namespace, model=self.fields["model"] or "unknown",
                dtype=self.fields["dtype"] or "unknown", page_size=self._block_bytes,
                layout=self._layout(), tp=self.fields["tp"])
            rc = self._store.register_buffer(self._base, view.nbytes)
            if rc != 0:
                raise RuntimeError("kvpool register_buffer failed (%d)" % rc)
        except BaseException:
            self._store.close()
            raise

        # Scheduler thread only.
        self._lookups = {}                  # key -> _Lookup
        self._req_keys = {}                 # req_id -> keys it looked up
        self._lookup_batch = []             # keys to ask about at on_schedule_end
        self._lookups_out = 0               # batches posted, not yet drained
        self._stored_keys = {}              # store job id -> its keys
        # Worker threads <-> scheduler thread.
        self._work = queue.SimpleQueue()    # (kind, payload) or None to stop
        self._done = queue.SimpleQueue()    # JobResult
        self._answers = queue.SimpleQueue()  # [(key, found)]
        self._cv = threading.Condition()
        self._jobs_out = 0                  # protected by _cv: jobs not yet finished
        self._closed = False
        self._threads = [threading.Thread(target=self._worker, daemon=True,
                                          name="kvpool-vllm-%d" % i)
                         for i in range(max(1, int(workers)))]
        for t in self._threads:
            t.start()
        log.info("kvpool secondary tier: namespace %s, %d blocks of %d bytes",
                 self.namespace, self._num_blocks, self._block_bytes)

    def _layout(self):
        """The declared layout: at most 64 characters (the pool's limit), so
        a long list of KV groups is declared as its hash."""
        f = self.fields
        s = ("vllm-row;tpb=%s;tph=%d;pp=%d;pcp=%d;dcp=%d;rep=%d"
             % (",".join(map(str, f["tokens_per_block"])), f["tokens_per_hash"],
                f["pp"], f["pcp"], f["dcp"], f["replicated_layout"]))
        if len(s) > 64:
            s = "vllm-row;sha256=" + hashlib.sha256(s.encode()).hexdigest()[:40]
        return s

    def pool_key(self, key):
        """The pool key of a vLLM offload key (bytes)."""
        return self._prefix + bytes(key).hex()

    # ---- lookups: answered by the workers, read here the step after ----

    def lookup(self, key, req_context):
        self._drain_answers()
        st = self._lookups.get(key)
        if st is None:
            st = self._lookups[key] = _Lookup()
            self._lookup_batch.append(key)
        st.reqs.add(req_context.req_id)
        self._req_keys.setdefault(req_context.req_id, set()).add(key)
        if st.result is None:
            return LookupResult.RETRY
        return LookupResult.HIT if st.result else LookupResult.MISS

    def _drain_answers(self):
        while True:
            try:
                batch = self._answers.get_nowait()
            except queue.Empty:
                return
            self._lookups_out -= 1
            for key, found in batch:
                st = self._lookups.get(key)
                if st is not None:
                    st.result = found

    def on_schedule_end(self, context=None):
        """One batch of this step's new lookups to the workers."""
        self._drain_answers()
        if self._lookup_batch and not self._closed:
            self._lookups_out += 1
            self._work.put(("exists", self._lookup_batch))
        self._lookup_batch = []

    def on_new_request(self, req_context):
        return RequestOffloadingContext()

    def on_request_finished(self, req_context):
        for key in self._req_keys.pop(req_context.req_id, ()):
            st = self._lookups.get(key)
            if st is None:
                continue
            st.reqs.discard(req_context.req_id)
            if not st.reqs:
                del self._lookups[key]

    def touch(self, keys, req_context):
        """vLLM used these blocks (hits in a faster tier): the pool's master
        counts an existence check as a read, so the blocks' reuse priority
        follows, as if they had been loaded from here. On a worker, never
        on the scheduler's thread."""
        keys = list(keys)
        if keys and not self._closed:
            self._work.put(("touch", keys))

    # ---- transfer jobs ----

    def submit_store(self, job_metadata):
        self._submit("store", job_metadata)

    def submit_load(self, job_metadata):
        self._submit("load", job_metadata)

    def _submit(self, kind, job):
        keys = list(job.keys)
        ids = [int(b) for b in job.block_ids]
        with self._cv:
            self._jobs_out += 1
            closed = self._closed
        if closed or len(keys) != len(ids) or any(b < 0 or b >= self._num_blocks for b in ids):
            log.error("kvpool tier: %s job %d refused (%s)", kind, job.job_id,
                      "tier shut down" if closed else "bad block ids")
            self._finish(JobResult(job_id=job.job_id, success=False))
            return
        if kind == "store":
            self._stored_keys[job.job_id] = keys
        self._work.put((kind, (job.job_id, keys, ids)))

    def get_finished_jobs(self):
        out = []
        while True:
            try:
                res = self._done.get_nowait()
            except queue.Empty:
                break
            keys = self._stored_keys.pop(res.job_id, ())
            if res.success:
                # A lookup answered "miss" before this store is stale now.
                for k in keys:
                    st = self._lookups.get(k)
                    if st is not None:
                        st.result = True
            out.append(res)
        return out

    def has_pending_work(self):
        self._drain_answers()
        with self._cv:
            jobs = self._jobs_out
        return bool(jobs or self._lookups_out or self._lookup_batch
                    or not self._done.empty())

    def drain_jobs(self):
        """Until every submitted job has its result queued: none is aborted
        mid-copy, as vLLM's reset_cache needs."""
        with self._cv:
            while self._jobs_out:
                self._cv.wait()

    def shutdown(self):
        with self._cv:
            if self._closed:
                return
            self._closed = True
        self.drain_jobs()
        for _ in self._threads:
            self._work.put(None)
        for t in self._threads:
            t.join()
        self._store.unregister_buffer(self._base)
        self._store.close()
        self._anchor = None

    # ---- worker threads ----

    def _finish(self, result):
        self._done.put(result)
        with self._cv:
            self._jobs_out -= 1
            self._cv.notify_all()

    def _worker(self):
        while True:
            item = self._work.get()
            if item is None:
                return
            kind, payload = item
            if kind == "exists":
                self._answers.put(self._exists(payload))
                continue
            if kind == "touch":
                self._exists(payload)   # the read is the point; no answer
                continue
            job_id = payload[0]
            try:
                result = (self._store_job if kind == "store" else self._load_job)(*payload)
            except Exception:  # a failed job, never a dead worker
                log.exception("kvpool tier: %s job %d failed", kind, job_id)
                result = JobResult(job_id=job_id, success=False)
            self._finish(result)

    def _exists(self, keys):
        try:
            res = self._store.batch_is_exist([self.pool_key(k) for k in keys])
        except Exception:
            log.exception("kvpool tier: lookup failed")
            res = [0] * len(keys)
        # An error (-1) reads as a miss: vLLM computes the block again.
        return [(k, r == 1) for k, r in zip(keys, res)]

    def _store_job(self, job_id, keys, ids):
        names = [self.pool_key(k) for k in keys]
        have = self._store.batch_is_exist(names)
        todo = [i for i, h in enumerate(have) if h != 1]
        ok = True
        if todo:
            bs = self._block_bytes
            res = self._store.batch_put_from([names[i] for i in todo],
                                             [self._base + ids[i] * bs for i in todo],
                                             [bs] * len(todo))
            # Already there: another engine stored the same block meanwhile.
            bad = [names[todo[j]] for j, r in enumerate(res)
                   if r != 0 and r != _OBJECT_ALREADY_EXISTS]
            if bad:
                log.warning("kvpool tier: store job %d: %d of %d blocks not stored (%s)",
                            job_id, len(bad), len(todo), res)
                ok = False
        return JobResult(job_id=job_id, success=ok)

    def _load_job(self, job_id, keys, ids):
        bs = self._block_bytes
        res = self._store.batch_get_into([self.pool_key(k) for k in keys],
                                         [self._base + b * bs for b in ids], [bs] * len(ids))
        good = [k for k, r in zip(keys, res) if r == bs]
        if len(good) == len(keys):
            return JobResult(job_id=job_id, success=True)
        log.info("kvpool tier: load job %d: %d of %d blocks read", job_id,
                 len(good), len(keys))
        # Partial results name the keys that did arrive (vLLM >= #50321).
        return JobResult(job_id=job_id, success=False, successful_keys=good or None)


def _locality(value):
    if HAVE_VLLM:
        from vllm.v1.kv_offload.base import Locality
        return Locality(value)
    if value not in ("LOCAL", "REMOTE"):
        raise ValueError("locality must be LOCAL or REMOTE")
    return value


def register(name="kvpool"):
    """Registers a short tier type name with vLLM's SecondaryTierFactory
    (in-process only; the module_path form needs no call)."""
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
    SecondaryTierFactory.register_tier(name, __name__, "KVPoolSecondaryTier")


__all__ = ["KVPoolSecondaryTier", "LookupResult", "JobResult", "JobMetadata",
           "RequestOffloadingContext", "namespace_fields", "namespace_name", "register",
           "HAVE_VLLM"]

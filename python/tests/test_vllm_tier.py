"""kvpool.vllm as vLLM's TieringOffloadingSpec drives a secondary tier
(vllm-project/vllm 5ac2684976ee, vllm/v1/kv_offload/tiering/{factory,
manager}.py): built by the factory from a {"type", "module_path", ...} dict
with the primary tier's memoryview (num_blocks rows, each TP worker's page at
rank * cpu_page_size), then request start, lookups that answer a step later,
concurrent store jobs, get_finished_jobs, touch, load jobs, request finish,
drain_jobs, shutdown. A second process builds its own tier over its own
primary buffer and loads the blocks; every byte is compared there."""
import hashlib
import importlib
import json
import mmap
import os
import subprocess
import sys
import threading
import time
import unittest
from collections import namedtuple
from types import SimpleNamespace

import kvp_testlib as L

kvpool = L.kvpool

NUM_BLOCKS = 32
TP = 2
CPU_PAGE = 8192                 # one worker's bytes of a block
ROW = TP * CPU_PAGE             # kv_bytes_per_block: a multiple of the page size
NKEYS = 16

try:
    from vllm.v1.kv_offload.base import ReqContext, ScheduleEndContext
except ImportError:
    ScheduleEndContext = namedtuple("ScheduleEndContext", "new_req_ids preempted_req_ids")

    def ReqContext(req_id):
        return SimpleNamespace(req_id=req_id, kv_transfer_params=None)


def offload_key(i, group=0):
    """vLLM's OffloadKey: the block hash, then the group index (4 bytes BE)."""
    return hashlib.sha256(b"prefix-block-%d" % i).digest() + group.to_bytes(4, "big")


def page(key, rank):
    """What TP worker `rank` holds of block `key`."""
    return hashlib.sha256(key + b"rank%d" % rank).digest() * (CPU_PAGE // 32)


def primary_view():
    """The primary tier's memory as SharedOffloadRegion.create_kv_memoryview
    hands it out: an mmap viewed as int8 rows of kv_bytes_per_block."""
    mm = mmap.mmap(-1, NUM_BLOCKS * ROW)
    return mm, memoryview(mm).cast("b", (NUM_BLOCKS, ROW))


def fill(mm, slot, key):
    for r in range(TP):
        off = slot * ROW + r * CPU_PAGE
        mm[off:off + CPU_PAGE] = page(key, r)


def check(mm, slot, key):
    return all(mm[slot * ROW + r * CPU_PAGE:slot * ROW + (r + 1) * CPU_PAGE] == page(key, r)
               for r in range(TP))


def offloading_spec(tp=TP, model="Qwen/Qwen3-0.6B", dtype="bfloat16"):
    """The fields of vLLM's OffloadingSpec (spec.config: OffloadingConfig)
    the tier reads."""
    cfg = SimpleNamespace(
        model=SimpleNamespace(name=model, dtype=dtype),
        groups=(SimpleNamespace(tokens_per_block=16, layer_names=("model.layers.0",)),),
        cache=SimpleNamespace(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=SimpleNamespace(rank=0, world_size=tp, tp_size=tp, pp_size=1, pcp_size=1,
                                 dcp_size=1, data_parallel_index=0,
                                 is_parallelism_agnostic=False),
        replicated_layout=False, worker_kv_bytes_per_block=CPU_PAGE, engine_id="e0",
        enable_kv_cache_events=False, extra_config={}, groups_count=1)
    return SimpleNamespace(config=cfg, extra_config={},
                           kv_events_config=SimpleNamespace(enable_kv_cache_events=False))


def create_tier(tier_config, view, spec):
    """SecondaryTierFactory.create_secondary_tier: the real one when vLLM is
    importable, else the same steps (registry miss, import module_path, the
    class named by type, constructed with the config less type/module_path)."""
    try:
        from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
    except ImportError:
        module = importlib.import_module(tier_config["module_path"])
        cls = getattr(module, tier_config["type"])
        config = dict(tier_config)
        tier_type = config.pop("type")
        config.pop("module_path", None)
        return cls(offloading_spec=spec, primary_kv_view=view, tier_type=tier_type, **config)
    return SecondaryTierFactory.create_secondary_tier(tier_config, view, spec)


def job(job_id, keys, block_ids, promotion, ctx):
    from kvpool.vllm import JobMetadata
    try:
        import numpy as np
        ids = np.array(block_ids, dtype=np.int64)
    except ImportError:
        ids = list(block_ids)
    return JobMetadata(job_id=job_id, keys=list(keys), block_ids=ids,
                       is_promotion=promotion, req_context=ctx)


class Engine:
    """The calls TieringOffloadingManager makes of a secondary tier, in its
    order: lookups during a step, then on_schedule_end (the lookup batch
    goes out), get_finished_jobs polled every step."""

    def __init__(self, tier):
        self.tier = tier
        self.finished = {}

    def step(self, new_req_ids=()):
        for r in self.tier.get_finished_jobs():
            assert r.job_id not in self.finished, "job %d reported twice" % r.job_id
            self.finished[r.job_id] = r
        self.tier.on_schedule_end(ScheduleEndContext(list(new_req_ids), []))

    def lookup_prefix(self, keys, ctx, deadline=30):
        """The connector's prefix lookup: key by key until the first that is
        not a hit; RETRY ends the step and the request asks again."""
        from kvpool.vllm import LookupResult
        end = time.monotonic() + deadline
        while True:
            hits = 0
            for k in keys:
                r = self.tier.lookup(k, ctx)
                if r is LookupResult.HIT:
                    hits += 1
                    continue
                break
            else:
                return hits
            if r is LookupResult.MISS:
                return hits
            if time.monotonic() > end:
                raise AssertionError("lookups still RETRY")
            self.step()
            time.sleep(0.005)

    def wait_jobs(self, ids, deadline=60):
        end = time.monotonic() + deadline
        while not set(ids) <= set(self.finished):
            if time.monotonic() > end:
                raise AssertionError("jobs %s not finished" % sorted(set(ids) - set(self.finished)))
            self.step()
            time.sleep(0.005)
        return [self.finished[i] for i in ids]


def child_main(cfg_json):
    """The second engine: its own tier over its own primary buffer."""
    tier_config = json.loads(cfg_json)
    mm, view = primary_view()
    tier = create_tier(tier_config, view, offloading_spec())
    eng = Engine(tier)
    ctx = ReqContext("req-other-engine")
    tier.on_new_request(ctx)
    eng.step(new_req_ids=[ctx.req_id])
    keys = [offload_key(i) for i in range(NKEYS)]
    missing = offload_key(999)
    import kvpool.vllm
    out = {"namespace": tier.namespace, "have_vllm": kvpool.vllm.HAVE_VLLM,
           "hits": eng.lookup_prefix(keys + [missing], ctx)}
    # Promotions: two batched jobs at once, into slots the writer did not use.
    slots = list(range(NUM_BLOCKS - 1, NUM_BLOCKS - 1 - NKEYS, -1))
    tier.submit_load(job(100, keys[:8], slots[:8], True, ctx))
    tier.submit_load(job(101, keys[8:] + [missing], slots[8:] + [0], True, ctx))
    r100, r101 = eng.wait_jobs([100, 101])
    out["full"] = r100.success
    out["partial"] = [r101.success, sorted(k.hex() for k in (r101.successful_keys or ()))]
    out["bad"] = [i for i, k in enumerate(keys) if not check(mm, slots[i], k)]
    tier.drain_jobs()
    tier.on_request_finished(ctx)
    tier.shutdown()
    view.release()
    mm.close()
    print(json.dumps(out), flush=True)


# A stand-in for an installed vLLM: only the names kvpool.vllm and this test
# import, with vLLM's signatures and abstract methods (tiering/base.py) and
# the factory's out-of-tree path (get_tier_class: a registry miss imports
# module_path and asserts issubclass). Written for this test, not vLLM's code.
STUB_VLLM = {
    "vllm/__init__.py": "",
    "vllm/v1/__init__.py": "",
    "vllm/v1/kv_offload/__init__.py": "",
    "vllm/v1/kv_offload/base.py": """
import enum
from dataclasses import dataclass
from typing import NamedTuple, Any

class Locality(enum.Enum):
    LOCAL = "LOCAL"
    REMOTE = "REMOTE"

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
class ReqContext:
    req_id: str
    kv_transfer_params: Any = None

class ScheduleEndContext(NamedTuple):
    new_req_ids: Any
    preempted_req_ids: Any
""",
    "vllm/v1/kv_offload/tiering/__init__.py": "",
    "vllm/v1/kv_offload/tiering/base.py": """
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

@dataclass
class JobMetadata:
    job_id: int
    keys: Any
    block_ids: Any
    is_promotion: bool
    req_context: Any

@dataclass
class JobResult:
    job_id: int
    success: bool
    successful_keys: Any = None

class SecondaryTierManager(ABC):
    medium = None

    def __init__(self, offloading_spec, primary_kv_view, tier_type):
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type
        self.locality = None

    @abstractmethod
    def lookup(self, key, req_context): ...
    @abstractmethod
    def submit_store(self, job_metadata): ...
    @abstractmethod
    def submit_load(self, job_metadata): ...
    @abstractmethod
    def get_finished_jobs(self): ...
    @abstractmethod
    def on_new_request(self, req_context): ...
    @abstractmethod
    def drain_jobs(self): ...
    def has_pending_work(self): return False
    def take_events(self): return ()
    def touch(self, keys, req_context): return
    def on_request_finished(self, req_context): return
    def serve_external_requests(self, parent): return
    def on_schedule_end(self, context): return
    def shutdown(self): return
""",
    "vllm/v1/kv_offload/tiering/factory.py": """
import importlib
from vllm.v1.kv_offload.tiering.base import SecondaryTierManager

class SecondaryTierFactory:
    _registry = {}

    @classmethod
    def get_tier_class(cls, tier_config):
        name = tier_config["type"]
        if name in cls._registry:
            return cls._registry[name]()
        tier_cls = getattr(importlib.import_module(tier_config["module_path"]), name)
        assert issubclass(tier_cls, SecondaryTierManager)
        return tier_cls

    @classmethod
    def create_secondary_tier(cls, tier_config, primary_kv_view, offloading_spec):
        tier_cls = cls.get_tier_class(tier_config)
        config = dict(tier_config)
        tier_type = config.pop("type")
        config.pop("module_path", None)
        return tier_cls(offloading_spec=offloading_spec, primary_kv_view=primary_kv_view,
                        tier_type=tier_type, **config)
""",
}


def write_stub_vllm(root):
    for path, text in STUB_VLLM.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)


class VllmTierTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        L.require_module(cls)
        cls.pool = L.Pool(nodes=1, segment_size="64M").start()

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def tier_config(self, **extra):
        d = {"type": "KVPoolSecondaryTier", "module_path": "kvpool.vllm",
             "store_config": self.pool.config(), "workers": 3}
        d.update(extra)
        return d

    def test_engine_sequence_two_processes(self):
        from kvpool.vllm import JobResult, LookupResult, RequestOffloadingContext
        mm, view = primary_view()
        tier = create_tier(self.tier_config(), view, offloading_spec())
        eng = Engine(tier)
        keys = [offload_key(i) for i in range(NKEYS)]

        ctx = ReqContext("req-A")
        self.assertIsInstance(tier.on_new_request(ctx), RequestOffloadingContext)
        eng.step(new_req_ids=[ctx.req_id])
        # Nothing stored yet: the first answer is RETRY, the pool's a miss.
        self.assertIs(tier.lookup(keys[0], ctx), LookupResult.RETRY)
        self.assertEqual(eng.lookup_prefix(keys, ctx), 0)

        # GPU -> CPU done; the manager cascades: four store jobs in flight at once.
        for slot, k in enumerate(keys):
            fill(mm, slot, k)
        for j in range(4):
            tier.submit_store(job(j, keys[4 * j:4 * j + 4], range(4 * j, 4 * j + 4), False, ctx))
        self.assertTrue(tier.has_pending_work())
        for r in eng.wait_jobs(range(4)):
            self.assertIsInstance(r, JobResult)
            self.assertTrue(r.success, r)
        # The same blocks again (a second request's cascade): present, no copy.
        tier.submit_store(job(4, keys[:4], range(4), False, ctx))
        self.assertTrue(eng.wait_jobs([4])[0].success)
        # vLLM's hits in its own tiers: the pool sees them as reads (an
        # existence check, which its master counts), on a worker thread.
        seen, real = [], tier._store.batch_is_exist
        seen_all = threading.Event()

        def spy(names):
            r = real(names)
            seen.append(list(names))
            if sum(len(x) for x in seen) >= NKEYS:
                seen_all.set()
            return r
        tier._store.batch_is_exist = spy
        tier.touch(keys, ctx)
        self.assertTrue(seen_all.wait(30), seen)
        tier._store.batch_is_exist = real
        self.assertEqual(sorted(n for x in seen for n in x),
                         sorted(tier.pool_key(k) for k in keys))
        # The earlier miss is stale now: the whole prefix is a hit.
        self.assertEqual(eng.lookup_prefix(keys, ctx), NKEYS)

        # Promotions into other slots of this engine's primary tier.
        tier.submit_load(job(5, keys[:8], range(16, 24), True, ctx))
        tier.submit_load(job(6, keys[8:], range(24, 32), True, ctx))
        for r in eng.wait_jobs([5, 6]):
            self.assertTrue(r.success, r)
        self.assertEqual([i for i, k in enumerate(keys) if not check(mm, 16 + i, k)], [])
        tier.on_request_finished(ctx)

        # Another engine (process) with the same model and layout finds and
        # loads every block; one unknown key comes back as a partial result.
        # Once as the plain class, once subclassing an importable vLLM's ABC
        # and built by its factory (a stand-in package, see STUB_VLLM).
        stub = os.path.join(self.pool.dir, "stub-vllm")
        write_stub_vllm(stub)
        for extra, have_vllm in (([], False), ([stub], True)):
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                extra + [os.path.dirname(os.path.abspath(__file__))]
                + env.get("PYTHONPATH", "").split(os.pathsep))
            p = subprocess.run(
                [sys.executable, "-c",
                 "import sys, test_vllm_tier as T; T.child_main(sys.argv[1])",
                 json.dumps(self.tier_config(workers=2))],
                env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr + "\n" + self.pool.logs())
            out = json.loads(p.stdout.strip().splitlines()[-1])
            self.assertEqual(out["have_vllm"], have_vllm)
            self.assertEqual(out["namespace"], tier.namespace)
            self.assertEqual(out["hits"], NKEYS)
            self.assertTrue(out["full"])
            self.assertEqual(out["partial"], [False, sorted(k.hex() for k in keys[8:])])
            self.assertEqual(out["bad"], [])

        # The blocks are pool objects under the tier's namespace.
        s = self.pool.store()
        try:
            self.assertEqual(s.batch_is_exist([tier.namespace + "/" + k.hex() for k in keys]),
                             [1] * NKEYS)
            self.assertEqual(s.get(tier.pool_key(keys[3]))[:CPU_PAGE], page(keys[3], 0))
        finally:
            s.close()

        # drain_jobs: once it returns, every result is queued.
        more = [offload_key(100 + i) for i in range(8)]
        for i, k in enumerate(more):
            fill(mm, i, k)
        ctx2 = ReqContext("req-B")
        tier.on_new_request(ctx2)
        for j in range(4):
            tier.submit_store(job(10 + j, more[2 * j:2 * j + 2], range(2 * j, 2 * j + 2),
                                  False, ctx2))
        tier.submit_load(job(14, keys[:4], range(20, 24), True, ctx2))
        tier.drain_jobs()
        done = {r.job_id: r.success for r in tier.get_finished_jobs()}
        self.assertEqual(done, {10: True, 11: True, 12: True, 13: True, 14: True})
        self.assertFalse(tier.has_pending_work())
        tier.on_request_finished(ctx2)
        tier.shutdown()
        # After shutdown a job still gets its (failed) result.
        tier.submit_store(job(20, keys[:1], [0], False, ctx2))
        self.assertEqual([(r.job_id, r.success) for r in tier.get_finished_jobs()],
                         [(20, False)])
        view.release()
        mm.close()

    def test_namespace(self):
        from kvpool.vllm import namespace_fields, namespace_name
        mm, view = primary_view()
        a = namespace_name(namespace_fields(offloading_spec(), ROW))
        self.assertTrue(a.startswith("vllm.Qwen_Qwen3-0.6B."), a)
        self.assertNotEqual(a, namespace_name(namespace_fields(offloading_spec(tp=4), ROW)))
        self.assertNotEqual(a, namespace_name(namespace_fields(offloading_spec(), ROW * 2)))
        self.assertNotEqual(a, namespace_name(namespace_fields(
            offloading_spec(model="other/model"), ROW)))
        # The config key "namespace" overrides the derived one.
        tier = create_tier(self.tier_config(namespace="team-x.qwen"), view, offloading_spec())
        try:
            self.assertEqual(tier.namespace, "team-x.qwen")
            eng = Engine(tier)
            ctx = ReqContext("req-ns")
            tier.on_new_request(ctx)
            k = offload_key(7, group=1)
            fill(mm, 3, k)
            tier.submit_store(job(0, [k], [3], False, ctx))
            self.assertTrue(eng.wait_jobs([0])[0].success)
            tier.on_request_finished(ctx)
        finally:
            tier.shutdown()
        s = self.pool.store()
        try:
            self.assertEqual(s.is_exist("team-x.qwen/" + k.hex()), 1)
            self.assertEqual(s.is_exist(a + "/" + k.hex()), 0)
        finally:
            s.close()
        view.release()
        mm.close()

    def test_declare_namespace(self):
        """The tier declares its namespace at start-up: a second engine under
        the same namespace with another model, dtype or TP size is refused
        (kvpool.NamespaceMismatchError, its store closed); one with the same
        fields starts and loads the first one's blocks."""
        ns = "team-y.declared"
        mm, view = primary_view()
        tier = create_tier(self.tier_config(namespace=ns), view, offloading_spec())
        try:
            eng = Engine(tier)
            ctx = ReqContext("req-decl")
            tier.on_new_request(ctx)
            k = offload_key(11)
            fill(mm, 5, k)
            tier.submit_store(job(0, [k], [5], False, ctx))
            self.assertTrue(eng.wait_jobs([0])[0].success)
            tier.on_request_finished(ctx)

            mm2, view2 = primary_view()
            for spec in (offloading_spec(model="other/model"),
                         offloading_spec(dtype="float16"), offloading_spec(tp=4)):
                with L.tracked_stores() as made:
                    with self.assertRaises(kvpool.NamespaceMismatchError):
                        create_tier(self.tier_config(namespace=ns), view2, spec)
                self.assertEqual([s.closed for s in made], [True])

            other = create_tier(self.tier_config(namespace=ns), view2, offloading_spec())
            try:
                eng2 = Engine(other)
                ctx2 = ReqContext("req-decl-2")
                other.on_new_request(ctx2)
                other.submit_load(job(1, [k], [9], True, ctx2))
                self.assertTrue(eng2.wait_jobs([1])[0].success)
                self.assertTrue(check(mm2, 9, k))
                other.on_request_finished(ctx2)
            finally:
                other.shutdown()
            view2.release()
            mm2.close()
        finally:
            tier.shutdown()
        s = self.pool.store()
        try:
            got = {n["name"]: n for n in s.namespaces()}[ns]
        finally:
            s.close()
        self.assertEqual((got["model"], got["dtype"], got["page_size"], got["tp"]),
                         ("Qwen/Qwen3-0.6B", "bfloat16", ROW, TP))
        self.assertEqual(got["layout"], "vllm-row;tpb=16;tph=16;pp=1;pcp=1;dcp=1;rep=0")
        self.assertEqual(got["keys"], 1)
        view.release()
        mm.close()

    def test_long_layout_is_declared_hashed(self):
        """Many KV groups: the declared layout stays within the pool's 64
        characters, and differs with the groups."""
        mm, view = primary_view()
        layouts = []
        for tpb in (16, 32):
            spec = offloading_spec()
            spec.config.groups = tuple(SimpleNamespace(tokens_per_block=tpb, layer_names=())
                                       for _ in range(12))
            tier = create_tier(self.tier_config(), view, spec)
            try:
                layouts.append(tier._layout())
            finally:
                tier.shutdown()
        self.assertTrue(all(len(x) <= 64 for x in layouts), layouts)
        self.assertNotEqual(layouts[0], layouts[1])
        view.release()
        mm.close()

    def test_bad_jobs_fail_not_hang(self):
        mm, view = primary_view()
        tier = create_tier(self.tier_config(), view, offloading_spec())
        try:
            eng = Engine(tier)
            ctx = ReqContext("req-bad")
            tier.on_new_request(ctx)
            # A block id past the primary tier, and a load of a key never stored.
            tier.submit_store(job(0, [offload_key(1)], [NUM_BLOCKS], False, ctx))
            tier.submit_load(job(1, [offload_key(555)], [0], True, ctx))
            r0, r1 = eng.wait_jobs([0, 1])
            self.assertFalse(r0.success)
            self.assertFalse(r1.success)
            self.assertFalse(r1.successful_keys)
            # A lookup batch answered while no lookup() follows still ends
            # the pending work (the engine would otherwise step forever).
            from kvpool.vllm import LookupResult
            self.assertIs(tier.lookup(offload_key(777), ctx), LookupResult.RETRY)
            eng.step()
            end = time.monotonic() + 30
            while tier.has_pending_work():
                self.assertLess(time.monotonic(), end, "pending work never ends")
                time.sleep(0.005)
            self.assertIs(tier.lookup(offload_key(777), ctx), LookupResult.MISS)
            tier.on_request_finished(ctx)
        finally:
            tier.shutdown()
        view.release()
        mm.close()


if __name__ == "__main__":
    unittest.main()

"""kvpool.sglang.KvpoolHiCacheStorage driven as SGLang drives a dynamic
HiCache storage backend (sgl-project/sglang 001067ff: backend_factory.py
builds it as cls(storage_config, kwargs), HiCacheController then calls
register_mem_pool_host, batch_exists per batch of page hashes, batch_set_v1 /
batch_get_v1 with host indices when extra_config has "interface_v1", else the
generic page path: batch_set(keys, [get_data_page(i)]) and
batch_get(keys, [get_dummy_flat_data_page()]) then set_from_flat_data_page).

The host pools are fakes over bytearrays with SGLang's page_first layouts and
its get_page_buffer_meta arithmetic (MHATokenToKVPoolHost: kv_buffer
(2, size, layer, head, dim), [k, v] per page; MLATokenToKVPoolHost:
(size, layer, 1, kv_dim), one buffer per page). Bytes are checked in a
second process that builds its own backend against the same real pool."""
import hashlib
import importlib
import json
import os
import subprocess
import sys
import threading
import unittest
from dataclasses import dataclass
from typing import Optional

import kvp_testlib as L

kvpool = L.kvpool

try:
    import torch
except Exception:
    torch = None

ITEMSIZE = 2          # bf16
LAYERS, HEADS, HEAD_DIM = 2, 2, 16
KV_DIM = 48           # MLA kv_lora_rank + qk_rope_head_dim
PAGE = 4
TOKENS = 64


@dataclass
class StorageConfig:
    """HiCacheStorageConfig's fields (hicache_storage.py)."""
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    attn_cp_rank: int
    attn_cp_size: int
    is_mla_model: bool
    enable_storage_metrics: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


class Indices:
    """A host-indices tensor where torch is missing (.tolist(), len)."""

    def __init__(self, v):
        self.v = list(v)

    def tolist(self):
        return list(self.v)

    def __len__(self):
        return len(self.v)


def indices(slots):
    """The host indices of whole pages starting at these token slots."""
    v = [s + i for s in slots for i in range(PAGE)]
    return torch.tensor(v, dtype=torch.int64) if torch is not None else Indices(v)


class FakeMHAHostPool:
    """MHATokenToKVPoolHost, layout page_first, over a bytearray."""
    layout = "page_first"
    dtype = "bfloat16"

    def __init__(self):
        self.page_size, self.size = PAGE, TOKENS
        self.layer_num, self.head_num, self.head_dim = LAYERS, HEADS, HEAD_DIM
        self.tok = LAYERS * HEADS * HEAD_DIM * ITEMSIZE     # bytes per token, K or V
        self.half = self.size * self.tok
        self.kv_buffer = bytearray(2 * self.half)
        self._mv = memoryview(self.kv_buffer)
        import ctypes
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.kv_buffer))

    def get_hybrid_pool_buffer(self):
        return [self._mv[:self.half], self._mv[self.half:]]

    def get_page_buffer_meta(self, idx):
        idx = idx.tolist()
        assert len(idx) % self.page_size == 0
        v_offset = self.layer_num * self.size * self.head_num * self.head_dim * ITEMSIZE
        ptrs = []
        for i in range(0, len(idx), self.page_size):
            k = self.base + idx[i] * self.layer_num * self.head_num * self.head_dim * ITEMSIZE
            ptrs += [k, k + v_offset]
        size = self.layer_num * ITEMSIZE * self.page_size * self.head_num * self.head_dim
        return ptrs, [size] * len(ptrs)

    # the generic (non-zero-copy) page path
    def get_data_page(self, index, flat=True):
        n = self.page_size * self.tok
        o = index * self.tok
        return bytearray(self.kv_buffer[o:o + n] + self.kv_buffer[self.half + o:self.half + o + n])

    def get_dummy_flat_data_page(self):
        return bytearray(2 * self.page_size * self.tok)

    def set_from_flat_data_page(self, index, data):
        n = self.page_size * self.tok
        o = index * self.tok
        self.kv_buffer[o:o + n] = data[:n]
        self.kv_buffer[self.half + o:self.half + o + n] = data[n:]

    # test helpers
    def fill(self, slot, seed):
        n = self.page_size * self.tok
        o = slot * self.tok
        self.kv_buffer[o:o + n] = pattern(seed + b"k", n)
        self.kv_buffer[self.half + o:self.half + o + n] = pattern(seed + b"v", n)

    def page(self, slot):
        return bytes(self.get_data_page(slot))


class FakeMLAHostPool:
    """MLATokenToKVPoolHost, layout page_first: (size, layer, 1, kv_dim)."""
    layout = "page_first"
    dtype = "bfloat16"

    def __init__(self):
        self.page_size, self.size, self.layer_num = PAGE, TOKENS, LAYERS
        self.tok = LAYERS * KV_DIM * ITEMSIZE
        self.kv_buffer = bytearray(self.size * self.tok)
        import ctypes
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.kv_buffer))

    def get_page_buffer_meta(self, idx):
        idx = idx.tolist()
        ptrs = [self.base + idx[i] * self.layer_num * KV_DIM * ITEMSIZE
                for i in range(0, len(idx), self.page_size)]
        size = self.layer_num * ITEMSIZE * self.page_size * KV_DIM
        return ptrs, [size] * len(ptrs)

    def get_data_page(self, index, flat=True):
        return bytearray(self.kv_buffer[index * self.tok:(index + self.page_size) * self.tok])

    def get_dummy_flat_data_page(self):
        return bytearray(self.page_size * self.tok)

    def set_from_flat_data_page(self, index, data):
        self.kv_buffer[index * self.tok:(index + self.page_size) * self.tok] = data

    def fill(self, slot, seed):
        n = self.page_size * self.tok
        self.kv_buffer[slot * self.tok:slot * self.tok + n] = pattern(seed, n)

    def page(self, slot):
        return bytes(self.get_data_page(slot))


class FakeMLALayerFirstHostPool(FakeMLAHostPool):
    """MLATokenToKVPoolHost, layout layer_first: (layer, size, 1, kv_dim);
    a page is one buffer per layer (SGLang's Mooncake backend packs them into
    one object: the multi-buffer calls)."""
    layout = "layer_first"

    def __init__(self):
        super().__init__()
        self.ltok = KV_DIM * ITEMSIZE       # bytes per token and layer

    def get_page_buffer_meta(self, idx):
        idx = idx.tolist()
        ptrs = []
        for i in range(0, len(idx), self.page_size):
            for layer in range(self.layer_num):
                ptrs.append(self.base + (layer * self.size + idx[i]) * self.ltok)
        return ptrs, [self.page_size * self.ltok] * len(ptrs)

    def _span(self, layer, index):
        o = (layer * self.size + index) * self.ltok
        return o, o + self.page_size * self.ltok

    def fill(self, slot, seed):
        for layer in range(self.layer_num):
            a, b = self._span(layer, slot)
            self.kv_buffer[a:b] = pattern(seed + b"%d" % layer, b - a)

    def page(self, slot):
        return b"".join(bytes(self.kv_buffer[slice(*self._span(layer, slot))])
                        for layer in range(self.layer_num))


def pattern(seed, n):
    d = hashlib.sha256(seed).digest()
    return (d * (n // len(d) + 1))[:n]


def make_backend(extra, rank, tp, mla, metrics=False):
    """As StorageBackendFactory._create_dynamic_backend and
    HiCacheController.attach_storage_backend do it."""
    extra = dict(extra)
    extra.pop("tp_lcm_size", None)
    cfg = StorageConfig(tp_rank=rank, tp_size=tp, pp_rank=0, pp_size=1, attn_cp_rank=0,
                        attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=metrics,
                        is_page_first_layout=True, model_name="org/Test-Model-1B",
                        extra_config=extra)
    for f in ("backend_name", "module_path", "class_name"):
        assert f in extra
    cls = getattr(importlib.import_module(extra["module_path"]), extra["class_name"])
    backend = cls(cfg, {})
    host = FakeMLAHostPool() if mla else FakeMHAHostPool()
    backend.register_mem_pool_host(host)
    return backend, host


# The second engine instance: its own backend on the same pool reads pages
# into its own host pool and reports digests of what landed there.
READER = r"""
import hashlib, json, sys
import test_sglang_backend as T
a = json.loads(sys.argv[1])
b, host = T.make_backend(a["extra"], a["rank"], a["tp"], a["mla"])
out = {"exists": b.batch_exists(a["keys"] + ["no-such-page"] + a["keys"]),
       "namespace": b.namespace}
slots = [i * T.PAGE for i in range(len(a["keys"]))]
if a.get("legacy"):
    pages = b.batch_get(a["keys"], [host.get_dummy_flat_data_page() for _ in a["keys"]])
    out["ok"] = [p is not None for p in pages]
    for s, p in zip(slots, pages):
        if p is not None:
            host.set_from_flat_data_page(s, p)
else:
    out["ok"] = b.batch_get_v1(a["keys"], T.indices(slots))
out["pages"] = [hashlib.sha256(host.page(s)).hexdigest() for s in slots]
b.close()
print(json.dumps(out), flush=True)
"""


class SGLangBackendTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        L.require_module(cls)
        cls.pool = L.Pool(nodes=1, segment_size="64M").start()
        cls.extra = {"backend_name": "kvpool", "module_path": "kvpool.sglang",
                     "class_name": "KvpoolHiCacheStorage", "interface_v1": 1,
                     "master_server_address": cls.pool.master, "protocol": "tcp",
                     "config_file": cls.pool.conf, "local_hostname": "localhost",
                     "log.level": "warning"}

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def read_elsewhere(self, keys, rank, tp, mla, extra=None, legacy=False):
        env = dict(os.environ)
        here = os.path.dirname(os.path.abspath(__file__))
        env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
        arg = {"extra": extra or self.extra, "keys": keys, "rank": rank, "tp": tp,
               "mla": mla, "legacy": legacy}
        r = subprocess.run([sys.executable, "-c", READER, json.dumps(arg)], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr + self.pool.logs())
        return json.loads(r.stdout.strip().splitlines()[-1])

    def test_mha_two_ranks_zero_copy(self):
        keys = ["mha-%s" % os.urandom(6).hex() for _ in range(6)]
        ranks = [make_backend(self.extra, r, 2, False, metrics=True) for r in range(2)]
        slots = [8 * PAGE, 3 * PAGE, 0, 12 * PAGE, 5 * PAGE, 9 * PAGE]
        for r, (b, host) in enumerate(ranks):
            for k, s in zip(keys, slots):
                host.fill(s, b"%d/%s" % (r, k.encode()))
        self.assertEqual(ranks[0][0].batch_exists(keys), 0)
        # Both ranks back up at once, as their backup threads do.
        results = [None, None]

        def backup(r):
            b, _ = ranks[r]
            results[r] = b.batch_set_v1(keys, indices(slots))
        threads = [threading.Thread(target=backup, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, [[True] * 6, [True] * 6])
        # A page is written again when HiCache backs up a prefix twice: still true.
        self.assertEqual(ranks[0][0].batch_set_v1(keys[:2], indices(slots[:2])), [True] * 2)
        for r, (b, host) in enumerate(ranks):
            self.assertEqual(b.batch_exists(keys + ["nope"]), 6)
            expect = [hashlib.sha256(host.page(s)).hexdigest() for s in slots]
            got = self.read_elsewhere(keys, r, 2, False)
            self.assertEqual(got["ok"], [True] * 6)
            self.assertEqual(got["exists"], 6)
            self.assertEqual(got["pages"], expect, "rank %d" % r)
            self.assertEqual(got["namespace"], "sglang-org-Test-Model-1B-mha-tp2")
        # The ranks' halves are kept apart.
        self.assertNotEqual(ranks[0][1].page(slots[0]), ranks[1][1].page(slots[0]))
        # Read back here too, into other slots of rank 1's pool.
        b1, h1 = ranks[1]
        before = h1.page(slots[0])
        self.assertEqual(b1.batch_get_v1(keys[:1], indices([15 * PAGE])), [True])
        self.assertEqual(h1.page(15 * PAGE), before)
        st = b1.get_stats()
        self.assertEqual(st.backup_pgs, [6])
        self.assertEqual(st.prefetch_pgs, [1])
        self.assertEqual(len(st.prefetch_bandwidth), 1)
        self.assertGreater(st.prefetch_bandwidth[0], 0)
        self.assertEqual(b1.get_stats().backup_pgs, [])     # drained by the read
        for b, _ in ranks:
            b.close()

    def test_batch_exists_leading_hits(self):
        b, host = make_backend(self.extra, 0, 1, False)
        keys = ["lead-%d-%s" % (i, os.urandom(4).hex()) for i in range(5)]
        for i in range(5):
            host.fill(i * PAGE, b"lead%d" % i)
        present = [0, 1, 3, 4]
        self.assertEqual(b.batch_set_v1([keys[i] for i in present],
                                         indices([i * PAGE for i in present])), [True] * 4)
        self.assertEqual(b.batch_exists(keys), 2)
        self.assertEqual(b.batch_exists(keys[3:]), 2)
        self.assertEqual(b.batch_exists([]), 0)
        self.assertTrue(b.exists(keys[0]))
        self.assertFalse(b.exists(keys[2]))
        # A page with only its K half is not a hit.
        half = b.namespace + "/" + keys[2] + "_0_k"
        self.assertEqual(b.store.put(half, b"x" * 16), 0)
        self.assertEqual(b.batch_exists(keys), 2)
        # A miss in the middle of a get: that page false, the others true.
        self.assertEqual(b.batch_get_v1(keys[:4], indices([8 * PAGE + i * PAGE for i in range(4)])),
                         [True, True, False, True])
        b.close()

    def test_mla_one_writer(self):
        keys = ["mla-%s" % os.urandom(6).hex() for _ in range(4)]
        slots = [0, 4 * PAGE, 2 * PAGE, 7 * PAGE]
        r0, h0 = make_backend(self.extra, 0, 2, True)
        r1, h1 = make_backend(self.extra, 1, 2, True)
        for s, k in zip(slots, keys):
            h0.fill(s, k.encode())
            h1.fill(s, b"rank1 must not land " + k.encode())
        # Rank 1 reports success and writes nothing.
        self.assertEqual(r1.batch_set_v1(keys, indices(slots)), [True] * 4)
        self.assertEqual(r1.batch_set(keys, [h1.get_data_page(s) for s in slots]), True)
        self.assertEqual(r0.batch_exists(keys), 0)
        self.assertEqual(r0.batch_set_v1(keys, indices(slots)), [True] * 4)
        self.assertEqual(r1.batch_exists(keys), 4)
        expect = [hashlib.sha256(h0.page(s)).hexdigest() for s in slots]
        for rank in (0, 1):
            got = self.read_elsewhere(keys, rank, 2, True)
            self.assertEqual(got["ok"], [True] * 4)
            self.assertEqual(got["exists"], 4)
            self.assertEqual(got["pages"], expect)
            self.assertEqual(got["namespace"], "sglang-org-Test-Model-1B-mla")
        r0.close()
        r1.close()

    def test_mla_layer_first_multi_buffer(self):
        extra = dict(self.extra, namespace="mla-lf-test")
        keys = ["mlalf-%s" % os.urandom(6).hex() for _ in range(3)]
        b, _ = make_backend(extra, 0, 1, True)
        host = FakeMLALayerFirstHostPool()
        b.register_mem_pool_host(host)
        slots = [6 * PAGE, 0, 3 * PAGE]
        for s, k in zip(slots, keys):
            host.fill(s, k.encode())
        self.assertEqual(b.batch_set_v1(keys, indices(slots)), [True] * 3)
        self.assertEqual(b.batch_exists(keys), 3)
        # One object per page: the layers' buffers concatenated.
        self.assertEqual(b.store.get_size("mla-lf-test/" + keys[0] + "_k"),
                         LAYERS * PAGE * KV_DIM * ITEMSIZE)
        other = FakeMLALayerFirstHostPool()
        b.mem_pool_host = other
        self.assertEqual(b.batch_get_v1(keys + ["mlalf-missing"],
                                        indices([0, PAGE, 2 * PAGE, 3 * PAGE])),
                         [True, True, True, False])
        for i, s in enumerate(slots):
            self.assertEqual(other.page(i * PAGE), host.page(s))
        b.close()

    def test_legacy_page_path(self):
        extra = {k: v for k, v in self.extra.items() if k != "interface_v1"}
        for mla in (False, True):
            b, host = make_backend(extra, 0, 1, mla)
            keys = ["legacy-%d-%s" % (mla, os.urandom(6).hex()) for _ in range(3)]
            slots = [2 * PAGE, 0, 5 * PAGE]
            for s, k in zip(slots, keys):
                host.fill(s, k.encode())
            pages = [host.get_data_page(s) for s in slots]
            self.assertTrue(b.batch_set(keys, pages))
            self.assertTrue(b.set("single-" + keys[0], host.get_data_page(slots[0])))
            self.assertEqual(b.batch_exists(keys), 3)
            expect = [hashlib.sha256(bytes(p)).hexdigest() for p in pages]
            # The generic get path in a second process ...
            got = self.read_elsewhere(keys, 0, 1, mla, extra=extra, legacy=True)
            self.assertEqual((got["ok"], got["pages"]), ([True] * 3, expect))
            # ... and the zero-copy path reads the same objects.
            got = self.read_elsewhere(keys, 0, 1, mla)
            self.assertEqual((got["ok"], got["pages"]), ([True] * 3, expect))
            # Here: a miss is None, a hit the target filled.
            dummies = [host.get_dummy_flat_data_page() for _ in range(2)]
            res = b.batch_get([keys[1], "legacy-missing"], dummies)
            self.assertIs(res[0], dummies[0])
            self.assertEqual(bytes(res[0]), bytes(pages[1]))
            self.assertIsNone(res[1])
            one = host.get_dummy_flat_data_page()
            self.assertIs(b.get("single-" + keys[0], one), one)
            self.assertEqual(bytes(one), bytes(pages[0]))
            b.close()

    @unittest.skipIf(torch is None, "torch not importable")
    def test_legacy_torch_pages(self):
        """What SGLang's generic path passes: flat bf16 page tensors."""
        b, host = make_backend(self.extra, 0, 1, False)
        keys = ["torch-%s" % os.urandom(6).hex() for _ in range(2)]
        for i in range(2):
            host.fill(i * PAGE, keys[i].encode())
        pages = [torch.frombuffer(host.get_data_page(i * PAGE), dtype=torch.bfloat16)
                 for i in range(2)]
        self.assertTrue(b.batch_set(keys, pages))
        dummies = [torch.zeros(pages[0].numel(), dtype=torch.bfloat16) for _ in range(3)]
        got = b.batch_get(keys + ["torch-missing"], dummies)
        self.assertIsNone(got[2])
        for i in range(2):
            self.assertIs(got[i], dummies[i])
            self.assertTrue(torch.equal(got[i].view(torch.int16), pages[i].view(torch.int16)))
        b.close()

    def test_prefetch_and_backup_threads(self):
        """SGLang's prefetch and backup threads share one backend."""
        b, host = make_backend(self.extra, 0, 1, False)
        old = ["old-%d-%s" % (i, os.urandom(4).hex()) for i in range(4)]
        new = ["new-%d-%s" % (i, os.urandom(4).hex()) for i in range(4)]
        for i in range(8):
            host.fill(i * PAGE, b"thr%d" % i)
        want = [host.page(i * PAGE) for i in range(8)]
        self.assertEqual(b.batch_set_v1(old, indices([i * PAGE for i in range(4)])), [True] * 4)
        out = {}

        def backup():
            out["set"] = [b.batch_set_v1([k], indices([(4 + i) * PAGE]))[0]
                          for i, k in enumerate(new)]

        def prefetch():
            out["get"] = [b.batch_get_v1(old, indices([(8 + i) * PAGE for i in range(4)]))
                          for _ in range(4)]
        threads = [threading.Thread(target=backup), threading.Thread(target=prefetch)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(out["set"], [True] * 4)
        self.assertEqual(out["get"], [[True] * 4] * 4)
        self.assertEqual([host.page((8 + i) * PAGE) for i in range(4)], want[:4])
        self.assertEqual(b.batch_exists(old + new), 8)
        b.close()

    def test_namespace_and_clear(self):
        """register_mem_pool_host declares the namespace: an instance under
        the same namespace with another model, dtype or TP size fails there
        (kvpool.NamespaceMismatchError, its store closed); one with the same
        fields reads the first one's pages. clear removes the namespace's."""
        import kvpool.sglang as ks
        extra = dict(self.extra, namespace="my-ns")

        def backend(model="m", tp=2, dtype="bfloat16"):
            cfg = StorageConfig(0, tp, 0, 1, 0, 1, False, False, True, model,
                                extra_config=extra)
            b = ks.KvpoolHiCacheStorage(cfg, {})
            host = FakeMHAHostPool()
            host.dtype = dtype
            b.register_mem_pool_host(host)
            return b, host

        b, host = backend()
        host.fill(0, b"ns")
        self.assertEqual(b.batch_set_v1(["p0"], indices([0])), [True])
        for kw in ({"model": "other/m"}, {"dtype": "float16"}, {"tp": 4}):
            with L.tracked_stores() as made:
                with self.assertRaises(kvpool.NamespaceMismatchError):
                    backend(**kw)
            self.assertEqual([s.closed for s in made], [True], kw)
        b2, host2 = backend()
        self.assertEqual(b2.batch_exists(["p0"]), 1)
        self.assertEqual(b2.batch_get_v1(["p0"], indices([8 * PAGE])), [True])
        self.assertEqual(host2.page(8 * PAGE), host.page(0))
        b2.close()

        store = self.pool.store()
        self.assertEqual(store.batch_is_exist(["my-ns/p0_0_k", "my-ns/p0_0_v"]), [1, 1])
        got = {n["name"]: n for n in store.namespaces()}["my-ns"]
        self.assertEqual((got["model"], got["dtype"], got["page_size"], got["layout"],
                          got["tp"]), ("m", "bfloat16", PAGE, "mha/page_first", 2))
        b.clear()
        self.assertEqual(b.batch_exists(["p0"]), 0)
        b.close()
        extra = dict(self.extra, extra_backend_tag="blue team")
        cfg = StorageConfig(1, 4, 0, 1, 0, 1, False, False, True, "org/M", extra_config=extra)
        b = ks.KvpoolHiCacheStorage(cfg, {}, store=store)
        self.assertEqual(b.namespace, "sglang-blue-team-org-M-mha-tp4")
        b.close()
        store.close()


# An engine-side stand-in: the module paths, the abstract methods of
# HiCacheStorage and StorageMetrics' fields as SGLang has them, so the
# backend's "SGLang importable" branch is exercised (it subclasses the ABC,
# and backend_factory's issubclass check passes).
SGLANG_STUB = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/mem_cache/__init__.py": "",
    "sglang/srt/mem_cache/hicache_storage.py": (
        "from abc import ABC, abstractmethod\n"
        "class HiCacheStorage(ABC):\n"
        "    def register_mem_pool_host(self, mem_pool_host):\n"
        "        self.mem_pool_host = mem_pool_host\n"
        + "".join("    @abstractmethod\n    def %s(self, *a, **k): pass\n" % m
                  for m in ("get", "batch_get", "set", "batch_set", "exists"))),
    "sglang/srt/observability/__init__.py": "",
    "sglang/srt/observability/metrics_collector.py": (
        "from dataclasses import dataclass, field\n"
        "from typing import List\n"
        "@dataclass\n"
        "class StorageMetrics:\n"
        "    prefetch_pgs: List[int] = field(default_factory=list)\n"
        "    backup_pgs: List[int] = field(default_factory=list)\n"
        "    prefetch_bandwidth: List[float] = field(default_factory=list)\n"
        "    backup_bandwidth: List[float] = field(default_factory=list)\n"),
}

WITH_ABC = r"""
import json, sys
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
from sglang.srt.observability.metrics_collector import StorageMetrics
import test_sglang_backend as T
import kvpool.sglang as ks
assert issubclass(ks.KvpoolHiCacheStorage, HiCacheStorage)
b, host = T.make_backend(json.loads(sys.argv[1]), 0, 1, False, metrics=True)
host.fill(0, b"abc")
ok = b.batch_set_v1(["abc-page"], T.indices([0]))
st = b.get_stats()
print(json.dumps({"ok": ok, "metrics": type(st) is StorageMetrics,
                  "backup_pgs": st.backup_pgs,
                  "exists": b.batch_exists(["abc-page"])}), flush=True)
b.close()
"""


class SGLangABCTest(unittest.TestCase):
    def test_subclasses_engine_abc(self):
        L.require_module(self)
        import tempfile
        pool = L.Pool(nodes=1, segment_size="16M").start()
        try:
            stub = tempfile.mkdtemp(prefix="kvpt-sglang-stub.", dir=pool.dir)
            for path, text in SGLANG_STUB.items():
                os.makedirs(os.path.dirname(os.path.join(stub, path)), exist_ok=True)
                with open(os.path.join(stub, path), "w") as f:
                    f.write(text)
            extra = {"backend_name": "kvpool", "module_path": "kvpool.sglang",
                     "class_name": "KvpoolHiCacheStorage", "interface_v1": 1,
                     "config_file": pool.conf, "master_server_address": pool.master,
                     "protocol": "tcp", "local_hostname": "localhost"}
            env = dict(os.environ)
            here = os.path.dirname(os.path.abspath(__file__))
            env["PYTHONPATH"] = os.pathsep.join([stub, here, env.get("PYTHONPATH", "")])
            r = subprocess.run([sys.executable, "-c", WITH_ABC, json.dumps(extra)], env=env,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr + pool.logs())
            got = json.loads(r.stdout.strip().splitlines()[-1])
            self.assertEqual(got, {"ok": [True], "metrics": True, "backup_pgs": [1],
                                   "exists": 1})
        finally:
            pool.stop()


if __name__ == "__main__":
    unittest.main()

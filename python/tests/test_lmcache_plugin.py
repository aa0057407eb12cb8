"""kvpool.lmcache driven the way LMCache's multi-process mode drives a
native_plugin L2 connector (LMCache/LMCache
lmcache/v1/distributed/l2_adapters/native_plugin_l2_adapter.py and
native_connector_l2_adapter.py): the loader's from_dict checks,
importlib.import_module(module_path), getattr(class_name),
cls(**adapter_params), the required-method check; then the bridge's calls —
ObjectKey strings "<model>@<rank:08x>@<hash hex>", MemoryObj byte_array
memoryviews (ctypes-backed), submits under the bridge's lock, a demux thread
that polls event_fd() with select.poll(500) and calls drain_completions(),
close() after the demux thread stops. LMCache itself is not installed; this
harness replays its calls against a real pool, and a second process reads
the blocks back and compares bytes.
"""
import ctypes
import importlib
import json
import os
import random
import select
import subprocess
import sys
import threading
import time
import unittest

import kvp_testlib as tl

MODEL = "meta-llama/Llama-3.1-8B"
CHUNK = 64 * 1024


def key_string(model, kv_rank, chunk_hash):
    # NativeConnectorL2Adapter._object_key_to_string (unsalted form)
    return "%s@%08x@%s" % (model, kv_rank, chunk_hash.hex())


def chunk_bytes(key, n):
    return random.Random(key).randbytes(n)


def byte_array(n, data=None):
    """A MemoryObj.byte_array stand-in: a ctypes-backed memoryview."""
    buf = (ctypes.c_uint8 * n)()
    if data is not None:
        ctypes.memmove(buf, data, n)
    return buf, memoryview(buf)


def load_native_plugin(d):
    """LMCache's NativePluginL2AdapterConfig.from_dict followed by
    _create_native_plugin_l2_adapter's loading steps."""
    module_path, class_name = d.get("module_path"), d.get("class_name")
    if not isinstance(module_path, str) or not module_path:
        raise ValueError("module_path must be a non-empty string")
    if not isinstance(class_name, str) or not class_name:
        raise ValueError("class_name must be a non-empty string")
    params = d.get("adapter_params", {})
    if not isinstance(params, dict):
        raise ValueError("adapter_params must be a dict")
    module = importlib.import_module(module_path)
    cls = getattr(module, class_name)
    client = cls(**params)
    for m in ("event_fd", "submit_batch_get", "submit_batch_set", "submit_batch_exists",
              "drain_completions", "close"):
        if not callable(getattr(client, m, None)):
            if callable(getattr(client, "close", None)):
                client.close()
            raise TypeError("missing required method %r" % m)
    return client


class Bridge:
    """The parts of NativeConnectorL2Adapter that talk to the connector."""

    def __init__(self, client):
        self.client = client
        self.fd = int(client.event_fd())
        self.lock = threading.Lock()
        self.pending = {}          # future_id -> (op, task_id, nkeys)
        self.done = {}             # task_id -> (ok, error, result_bools)
        self.seen = {}             # future_id -> times completed
        self.unknown = 0
        self.next_task = 0
        self.cv = threading.Condition(self.lock)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._demux, daemon=True)
        self.thread.start()

    def submit(self, op, keys, views=None):
        with self.lock:
            task = self.next_task
            self.next_task += 1
            if op == "store":
                fid = int(self.client.submit_batch_set(keys, views))
            elif op == "load":
                fid = int(self.client.submit_batch_get(keys, views))
            elif op == "lookup":
                fid = int(self.client.submit_batch_exists(keys))
            else:
                fid = int(self.client.submit_batch_delete(keys))
            self.pending[fid] = (op, task, len(keys))
        return task

    def wait(self, task, timeout=60):
        with self.cv:
            if not self.cv.wait_for(lambda: task in self.done, timeout):
                raise AssertionError("task %d did not complete" % task)
            return self.done.pop(task)

    def _demux(self):
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        while not self.stop.is_set():
            if not poller.poll(500):
                continue
            completions = self.client.drain_completions()
            if not completions:
                continue
            with self.cv:
                for fid, ok, error, bools in completions:
                    fid = int(fid)
                    self.seen[fid] = self.seen.get(fid, 0) + 1
                    entry = self.pending.pop(fid, None)
                    if entry is None:
                        self.unknown += 1
                        continue
                    op, task, n = entry
                    if bools is not None and len(bools) != n:
                        error = "result_bools of %d for %d keys" % (len(bools), n)
                        ok = False
                    self.done[task] = (bool(ok), error, bools)
                self.cv.notify_all()

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.client.close()


def completion(c, fid, timeout=60):
    """The completion of future fid, as the demux thread would see it."""
    p = select.poll()
    p.register(c.event_fd(), select.POLLIN)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if p.poll(500):
            for x in c.drain_completions():
                if x[0] == fid:
                    return x
    raise AssertionError("future %d did not complete" % fid)


READER = r"""
import json, random, sys, ctypes
sys.path[:0] = json.loads(sys.argv[2])
from kvpool.lmcache import KVPoolConnector
import select
cfg = json.loads(sys.argv[1])
c = KVPoolConnector(**cfg["params"])
keys, sizes = cfg["keys"], cfg["sizes"]
bufs = [(ctypes.c_uint8 * n)() for n in sizes]
views = [memoryview(b) for b in bufs]
ids = {c.submit_batch_exists(keys): "exists", c.submit_batch_get(keys, views): "get"}
got = {}
p = select.poll()
p.register(c.event_fd(), select.POLLIN)
while len(got) < 2:
    if p.poll(500):
        for fid, ok, err, bools in c.drain_completions():
            got[ids[fid]] = (ok, err, bools)
same = [bytes(b) == random.Random(k).randbytes(n) for k, b, n in zip(keys, bufs, sizes)]
c.close()
print(json.dumps({"exists": got["exists"], "get": got["get"], "same": same}))
"""


class LMCachePluginTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tl.require_module(cls)
        cls.pool = tl.Pool(nodes=1, segment_size="256M").start()
        cls.params = {"setup": cls.pool.config(), "model": MODEL, "dtype": "bfloat16",
                      "chunk_size": 256, "tp": 1, "num_workers": 3}
        cls.plugin = {"type": "native_plugin", "module_path": "kvpool.lmcache",
                      "class_name": "KVPoolConnector", "adapter_params": cls.params}

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def keys(self, rank, n, salt):
        return [key_string(MODEL, rank, ("%s-%d-%d" % (salt, rank, i)).encode().ljust(32, b"."))
                for i in range(n)]

    def test_lmcache_flow_and_second_process(self):
        client = load_native_plugin(json.loads(json.dumps(self.plugin)))
        bridge = Bridge(client)
        try:
            # four "requests" store their chunks at once (the last chunk short)
            batches = [self.keys(rank, 6, "flow") for rank in range(4)]
            sizes = {k: (CHUNK if i < 5 else CHUNK // 3)
                     for b in batches for i, k in enumerate(b)}
            tasks, errs = [], []

            def store(b):
                try:
                    objs = [byte_array(sizes[k], chunk_bytes(k, sizes[k])) for k in b]
                    t = bridge.submit("store", b, [mv for _, mv in objs])
                    tasks.append((t, objs))
                except Exception as e:  # reported below
                    errs.append(e)

            th = [threading.Thread(target=store, args=(b,)) for b in batches]
            for t in th:
                t.start()
            for t in th:
                t.join()
            self.assertEqual(errs, [])
            for t, _ in tasks:
                ok, err, bools = bridge.wait(t)
                self.assertTrue(ok, err)
                self.assertIsNone(bools)
            # a re-store of the same chunks succeeds (first writer's bytes stay)
            objs = [byte_array(sizes[k], chunk_bytes(k, sizes[k])) for k in batches[0]]
            self.assertTrue(bridge.wait(bridge.submit("store", batches[0],
                                                      [mv for _, mv in objs]))[0])

            # lookup with a missing chunk in the middle
            look = batches[1][:3] + self.keys(9, 1, "absent") + batches[1][3:]
            ok, err, bools = bridge.wait(bridge.submit("lookup", look))
            self.assertTrue(ok, err)
            self.assertEqual(bools, [True, True, True, False, True, True, True])

            # concurrent loads into fresh MemoryObj buffers, byte-checked
            loads = []
            for b in batches:
                objs = [byte_array(sizes[k]) for k in b]
                loads.append((b, objs, bridge.submit("load", b, [mv for _, mv in objs])))
            for b, objs, t in loads:
                ok, err, bools = bridge.wait(t)
                self.assertTrue(ok, err)
                self.assertEqual(bools, [True] * len(b))
                for k, (buf, _) in zip(b, objs):
                    self.assertEqual(bytes(buf), chunk_bytes(k, sizes[k]), k)

            # a load with a missing key and a buffer of the wrong size
            miss = self.keys(9, 1, "absent")[0]
            objs = [byte_array(sizes[batches[2][0]]), byte_array(10),
                    byte_array(CHUNK)]
            ok, err, bools = bridge.wait(bridge.submit(
                "load", [batches[2][0], batches[2][1], miss], [mv for _, mv in objs]))
            self.assertFalse(ok)
            self.assertEqual(bools, [True, False, False])
            self.assertEqual(bytes(objs[0][0]), chunk_bytes(batches[2][0], sizes[batches[2][0]]))

            # a second process (a fresh connector, same config) reads them back
            allkeys = [k for b in batches for k in b]
            arg = json.dumps({"params": self.params, "keys": allkeys,
                              "sizes": [sizes[k] for k in allkeys]})
            r = subprocess.run([sys.executable, "-c", READER, arg, json.dumps(sys.path)],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr + self.pool.logs())
            out = json.loads(r.stdout.strip().splitlines()[-1])
            self.assertEqual(out["exists"][2], [True] * len(allkeys))
            self.assertTrue(out["get"][0], out["get"][1])
            self.assertEqual(out["same"], [True] * len(allkeys))

            # eviction's delete, then lookups miss
            ok, err, bools = bridge.wait(bridge.submit("delete", batches[3] + [miss]))
            self.assertTrue(ok, err)
            self.assertEqual(bools, [True] * 6 + [False])
            ok, err, bools = bridge.wait(bridge.submit("lookup", batches[3]))
            self.assertEqual(bools, [False] * 6)
        finally:
            bridge.close()
        # every future completed exactly once, none unknown
        self.assertEqual(bridge.unknown, 0)
        self.assertTrue(bridge.seen)
        self.assertEqual(set(bridge.seen.values()), {1})
        self.assertEqual(bridge.pending, {})

    def test_keys_live_in_the_namespace(self):
        import kvpool
        from kvpool.lmcache import namespace_for
        c = load_native_plugin(self.plugin)
        try:
            ns = namespace_for(MODEL, "bfloat16", 256, "lmcache", 1)
            self.assertEqual(c.namespace, ns)
            k = self.keys(0, 1, "ns")[0]
            _, mv = byte_array(100, chunk_bytes(k, 100))
            fid = c.submit_batch_set([k], [mv])
            p = select.poll()
            p.register(c.event_fd(), select.POLLIN)
            done = []
            while not done:
                if p.poll(500):
                    done = c.drain_completions()
            self.assertEqual(done[0][:2], (fid, True))
            s = kvpool.MooncakeDistributedStore()
            self.assertEqual(s.setup(self.pool.config()), 0)
            self.assertEqual(s.is_exist(ns + "/" + k), 1)
            self.assertEqual(s.is_exist(k), 0)
            self.assertEqual(bytes(s.get(ns + "/" + k)), chunk_bytes(k, 100))
            s.close()
        finally:
            c.close()
        # a different layout is a different namespace; "namespace" overrides
        self.assertNotEqual(namespace_for(MODEL, "float16", 256, "lmcache", 1), ns)
        c2 = load_native_plugin(dict(self.plugin, adapter_params=dict(self.params,
                                                                      namespace="mine")))
        self.assertEqual(c2.namespace, "mine")
        c2.close()

    def test_declares_namespace_at_start_up(self):
        """The connector declares its namespace when it is built: another
        under the same namespace with another model, dtype or TP size is
        refused (kvpool.NamespaceMismatchError, the store it opened
        closed); one with the same fields reads the first one's chunks."""
        import kvpool
        from kvpool.lmcache import KVPoolConnector
        params = dict(self.params, namespace="lm-declared")
        k = self.keys(0, 1, "declared")[0]
        c = load_native_plugin(dict(self.plugin, adapter_params=params))
        try:
            _, mv = byte_array(100, chunk_bytes(k, 100))
            self.assertEqual(completion(c, c.submit_batch_set([k], [mv]))[1], True)
            for kw in ({"model": "other/model"}, {"dtype": "float16"}, {"tp": 2}):
                with tl.tracked_stores() as made:
                    with self.assertRaises(kvpool.NamespaceMismatchError):
                        load_native_plugin(dict(self.plugin,
                                                adapter_params=dict(params, **kw)))
                self.assertEqual([s.closed for s in made], [True], kw)
            c2 = load_native_plugin(dict(self.plugin, adapter_params=params))
            try:
                buf, mv = byte_array(100)
                self.assertEqual(completion(c2, c2.submit_batch_get([k], [mv]))[1:],
                                 (True, "", [True]))
                self.assertEqual(bytes(buf), chunk_bytes(k, 100))
            finally:
                c2.close()
        finally:
            c.close()
        s = kvpool.MooncakeDistributedStore()
        self.assertEqual(s.setup(self.pool.config()), 0)
        got = {n["name"]: n for n in s.namespaces()}["lm-declared"]
        self.assertEqual((got["model"], got["dtype"], got["page_size"], got["layout"],
                          got["tp"]), (MODEL, "bfloat16", 256, "lmcache", 1))
        # store= is the caller's: neither a refusal nor close() closes it
        with self.assertRaises(kvpool.NamespaceMismatchError):
            KVPoolConnector(store=s, namespace="lm-declared", model=MODEL, dtype="float16")
        c = KVPoolConnector(store=s, model=MODEL, dtype="bfloat16", chunk_size=256, tp=2)
        c.close()
        self.assertEqual(s.put("after-close", b"x"), 0)
        s.close()

    def test_store_closed_under_the_queue(self):
        """Every future completes exactly once, also when the store closes
        with batches outstanding: the rest come back failed."""
        import kvpool
        from kvpool.lmcache import KVPoolConnector
        s = kvpool.MooncakeDistributedStore()
        self.assertEqual(s.setup(self.pool.config()), 0)
        c = KVPoolConnector(store=s, model=MODEL, num_workers=1)
        keep = []
        fids = []
        for r in range(20):
            ks = self.keys(r, 4, "closing")
            objs = [byte_array(CHUNK, chunk_bytes(k, CHUNK)) for k in ks]
            keep.append(objs)
            fids.append(c.submit_batch_set(ks, [mv for _, mv in objs]))
        s.close()
        p = select.poll()
        p.register(c.event_fd(), select.POLLIN)
        seen = []
        for _ in range(20):
            if len(seen) == len(fids):
                break
            if p.poll(500):
                seen += [x[0] for x in c.drain_completions()]
        self.assertEqual(sorted(seen), sorted(fids))
        self.assertEqual(c.drain_completions(), [])
        with self.assertRaises(Exception):
            c.submit_batch_exists(["x"])
        c.close()

    def test_loader_rejects_what_lmcache_rejects(self):
        with self.assertRaises(AttributeError):
            load_native_plugin(dict(self.plugin, class_name="NoSuchClass"))
        with self.assertRaises(ValueError):
            load_native_plugin(dict(self.plugin, module_path=""))
        with self.assertRaises(ValueError):
            load_native_plugin(dict(self.plugin, adapter_params=dict(self.params, namespace="a/b")))


if __name__ == "__main__":
    unittest.main()

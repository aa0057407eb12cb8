"""Mooncake's store surface beyond put/get (the calls test_api.py covers):
every method exists; the upsert family, put_from_with_metadata, ranged reads
and the get/put sessions, replica descriptors, batch_replica_clear,
health_check, get_hostname's format, setup_dummy with alloc_from_mem_pool,
the segment calls, copy/move tasks, BufferPool, the classes and enums —
with Mooncake's return values and codes, against a real master and node."""
import ctypes
import os
import re
import subprocess
import sys
import time
import unittest

import kvp_testlib as L

kvpool = L.kvpool


def addr(buf):
    return ctypes.addressof(buf)


class SurfaceTest(unittest.TestCase):
    """Names and types, no pool needed."""

    @classmethod
    def setUpClass(cls):
        if kvpool is None:
            raise unittest.SkipTest("kvpool module not importable: " + L.IMPORT_ERROR)

    # Mooncake's MooncakeDistributedStore methods at 3b5a59413
    # (mooncake-integration/store/store_py.cpp).
    METHODS = """setup setup_dummy init_all mount_segment unmount_segment
        allocate_and_mount_segment unmount_and_free_segment unmount_local_disk_segment
        alloc_from_mem_pool get get_batch get_offload_rpc_read_count get_buffer
        batch_get_buffer remove remove_by_regex remove_all batch_remove is_exist
        batch_is_exist close health_check get_size get_tensor_with_tp
        batch_get_tensor_with_tp get_tensor put_tensor_with_tp batch_put_tensor_with_tp
        put_tensor batch_get_tensor batch_put_tensor save_tensor_to_safetensor
        load_tensor_from_safetensor pub_tensor batch_pub_tensor pub_tensor_with_tp
        batch_pub_tensor_with_tp get_tensor_into batch_get_tensor_into get_tensor_into_cuda
        batch_get_tensor_into_cuda get_tensor_with_tp_into batch_get_tensor_with_tp_into
        put_tensor_from batch_put_tensor_from put_tensor_with_tp_from
        batch_put_tensor_with_tp_from upsert_tensor upsert_tensor_from
        batch_upsert_tensor_from batch_upsert_tensor upsert_pub_tensor
        batch_upsert_pub_tensor get_tensor_with_parallelism
        batch_get_tensor_with_parallelism get_tensor_with_parallelism_into
        batch_get_tensor_with_parallelism_into put_tensor_with_parallelism
        batch_put_tensor_with_parallelism put_tensor_with_parallelism_from
        batch_put_tensor_with_parallelism_from upsert_tensor_with_parallelism
        upsert_tensor_with_parallelism_from batch_upsert_tensor_with_parallelism_from
        batch_upsert_tensor_with_parallelism upsert_from batch_upsert_from upsert
        upsert_parts upsert_batch register_buffer unregister_buffer get_into
        get_into_ranges batch_get_into put_from put_from_with_metadata batch_put_from put
        put_parts put_batch get_hostname batch_put_from_multi_buffers
        batch_get_into_multi_buffers batch_get_session_start
        batch_get_into_multi_buffer_ranges batch_get_session_end batch_put_session_start
        batch_put_from_multi_buffer_ranges batch_put_session_end batch_put_session_revoke
        get_replica_desc batch_get_replica_desc batch_replica_clear create_copy_task
        create_move_task query_task _get_pyclient_capsule""".split()

    MODULE = """ObjectDataType SoftPinAction ReplicateConfig ReplicaStatus MemoryDescriptor
        DiskDescriptor ReplicaDescriptor Descriptor TaskType TaskStatus QueryTaskResponse
        BufferHandle MooncakeHostMemAllocator ParallelAxis TensorParallelism ReadTarget
        MooncakeDistributedNoFRegister MooncakeDistributedStore BufferPool EngramStore
        EngramStoreConfig
        RegisteredBufferPool _serialize_tensor _tensor_metadata_size _deserialize_tensor
        _get_pyclient_from_wrapper bind_to_numa_node get_alloc_func_addr
        get_free_func_addr""".split()

    def test_every_method(self):
        self.assertEqual(len(set(self.METHODS)), 98)
        missing = [m for m in self.METHODS if not callable(
            getattr(kvpool.MooncakeDistributedStore, m, None))]
        self.assertEqual(missing, [])

    def test_against_mooncake_source(self):
        # When the Mooncake checkout is at hand, the list above is its list.
        try:
            src = subprocess.run(["git", "-C", "/work/.mirror/kvcache-ai+Mooncake/repo",
                                  "show", "3b5a59413:mooncake-integration/store/store_py.cpp"],
                                 capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            src = ""
        if "MooncakeDistributedStore" not in src:
            self.skipTest("Mooncake's source is not available")
        i = src.index('py::class_<MooncakeStorePyWrapper>(m, "MooncakeDistributedStore")')
        j = src.index('"bind_to_numa_node"', i)
        names = set(re.findall(r'\.def\(\s*"([A-Za-z0-9_]+)"', src[i:j]))
        self.assertEqual(names, set(self.METHODS))
        self.assertEqual(sorted(names - set(dir(kvpool.MooncakeDistributedStore))), [])

    def test_module_names(self):
        self.assertEqual([n for n in self.MODULE if not hasattr(kvpool, n)], [])
        self.assertIs(kvpool.DistributedStore, kvpool.MooncakeDistributedStore)

    def test_enums(self):
        self.assertEqual([(e.name, int(e)) for e in kvpool.SoftPinAction],
                         [("PRESERVE", 0), ("ENABLE", 1), ("DISABLE", 2)])
        self.assertEqual(int(kvpool.ObjectDataType.KVCACHE), 1)
        self.assertEqual(int(kvpool.ObjectDataType.GENERAL), 9)
        self.assertEqual(int(kvpool.ReplicaStatus.COMPLETE), 3)
        self.assertEqual(int(kvpool.TaskStatus.SUCCESS), 2)
        self.assertEqual(int(kvpool.TaskType.REPLICA_MOVE), 1)
        self.assertEqual(kvpool.ErrorCode.OBJECT_NOT_FOUND, -704)
        self.assertEqual(kvpool.NOT_SUPPORTED, -1012)
        self.assertEqual(kvpool.ERROR_NAMES[-1100], "FILE_NOT_FOUND")

    def test_replicate_config(self):
        c = kvpool.ReplicateConfig()
        for name, want in (("replica_num", 1), ("nof_replica_num", 0), ("dfs_replica_num", 0),
                           ("soft_pin_action", kvpool.SoftPinAction.PRESERVE),
                           ("soft_pin_ttl_ms", None), ("with_hard_pin", False),
                           ("preferred_segments", []), ("preferred_nof_segments", []),
                           ("preferred_segment", ""), ("prefer_alloc_in_same_node", False),
                           ("data_type", kvpool.ObjectDataType.UNKNOWN), ("group_ids", None)):
            self.assertEqual(getattr(c, name), want, name)
        c.soft_pin_action = kvpool.SoftPinAction.ENABLE
        c.soft_pin_ttl_ms = 5000
        c.group_ids = ["a"]
        self.assertTrue(c.with_soft_pin)      # Mooncake before SoftPinAction
        self.assertIn("soft_pin_action: ENABLE, soft_pin_ttl_ms: 5000", str(c))
        self.assertIn("group_ids: [a]", str(c))
        with self.assertRaises(AttributeError):
            c.no_such_option = 1

    def test_not_set_up(self):
        s = kvpool.MooncakeDistributedStore()
        self.assertEqual(s.health_check(), 1)
        self.assertEqual(s.upsert("k", b"v"), kvpool.INVALID_PARAMS)
        self.assertEqual(s.batch_upsert_from(["k"], [1], [1]), [kvpool.INVALID_PARAMS])
        self.assertEqual(s.get_replica_desc("k"), [])
        self.assertEqual(s.batch_replica_clear(["k"]), [])
        self.assertEqual(s.get_hostname(), "")
        self.assertEqual(s.alloc_from_mem_pool(64), 0)
        self.assertEqual(s.allocate_and_mount_segment(1 << 20)["ret"], kvpool.INVALID_PARAMS)
        self.assertIsNone(s._get_pyclient_capsule())

    def test_helpers(self):
        a = kvpool.MooncakeHostMemAllocator()
        p = a.alloc(4096)
        self.assertNotEqual(p, 0)
        ctypes.memset(p, 7, 4096)
        self.assertEqual(a.free(p), 0)
        self.assertEqual(a.free(p), -1)
        self.assertGreater(kvpool.get_alloc_func_addr(), 0)
        alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                 ctypes.c_void_p)(kvpool.get_alloc_func_addr())
        free = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                ctypes.c_void_p)(kvpool.get_free_func_addr())
        q = alloc(8192, 0, None)
        ctypes.memset(q, 1, 8192)
        free(q, 8192, 0, None)
        kvpool.bind_to_numa_node(0)
        nof = kvpool.MooncakeDistributedNoFRegister()
        self.assertEqual(nof.real_register(), kvpool.NOT_SUPPORTED)
        self.assertIsNone(kvpool._get_pyclient_from_wrapper(kvpool.MooncakeDistributedStore()))
        r = kvpool.ReadTarget()
        r.mode = "full"
        with self.assertRaises(RuntimeError):
            r.mode = "sideways"


class StoreCallsTest(L.PoolTestCase):

    def test_upsert_family(self):
        s = self.s
        self.assertEqual(s.put("u/a", b"first"), 0)
        self.assertEqual(s.put("u/a", b"second"), 0)     # first writer wins ...
        self.assertEqual(s.get("u/a"), b"first")
        self.assertEqual(s.upsert("u/a", b"second"), 0)  # ... upsert replaces
        self.assertEqual(s.get("u/a"), b"second")
        self.assertEqual(s.upsert("u/new", b"n"), 0)     # and inserts
        self.assertEqual(s.get("u/new"), b"n")
        self.assertEqual(s.upsert_parts("u/a", b"x", memoryview(b"yz")), 0)
        self.assertEqual(s.get("u/a"), b"xyz")
        self.assertEqual(s.upsert_batch(["u/a", "u/b"], [b"1", b"22"]), 0)
        self.assertEqual(s.get_batch(["u/a", "u/b"]), [b"1", b"22"])
        src = ctypes.create_string_buffer(b"from-buffer", 11)
        self.assertEqual(s.upsert_from("u/a", addr(src), 11), 0)
        self.assertEqual(s.get("u/a"), b"from-buffer")
        self.assertEqual(s.batch_upsert_from(["u/a", "u/b"], [addr(src), addr(src) + 5],
                                             [4, 6]), [0, 0])
        self.assertEqual(s.get_batch(["u/a", "u/b"]), [b"from", b"buffer"])
        self.assertEqual(s.upsert("", b"v"), kvpool.INVALID_KEY)
        self.assertEqual(s.upsert("u/e", b""), kvpool.INVALID_PARAMS)
        bad = kvpool.ReplicateConfig()
        bad.replica_num = 0
        self.assertEqual(s.upsert("u/a", b"v", bad), kvpool.INVALID_PARAMS)
        self.assertEqual(s.get("u/a"), b"from")

    def test_put_options(self):
        s = self.s
        c = kvpool.ReplicateConfig()
        c.soft_pin_action = kvpool.SoftPinAction.ENABLE
        c.soft_pin_ttl_ms = 60000
        self.assertEqual(s.put("opt/soft", b"s", c), 0)
        self.assertGreater(s.stat("opt/soft")["pin_ms"], 0)
        c = kvpool.ReplicateConfig(with_hard_pin=True)
        self.assertEqual(s.put("opt/hard", b"h", c), 0)
        self.assertGreater(s.stat("opt/hard")["pin_ms"], 10 ** 9)
        # A preferred segment named as Mooncake names segments (and as a
        # kvpool node name) is accepted; one node here, so it is there.
        node = s.stat("opt/hard")["replicas"][0]["node"]
        for pref in (node, "no-such-host:1"):
            c = kvpool.ReplicateConfig(preferred_segment=pref)
            self.assertEqual(s.put("opt/pref/" + pref, b"p", c), 0)
        c = kvpool.ReplicateConfig(preferred_segments=[node], prefer_alloc_in_same_node=True)
        self.assertEqual(s.put("opt/same", b"p", c), 0)
        # group_ids must have one entry per key of a batch.
        c = kvpool.ReplicateConfig(group_ids=["g"])
        self.assertEqual(s.batch_put_from(["opt/g1", "opt/g2"], [1, 1], [1, 1], c),
                         [kvpool.INVALID_PARAMS] * 2)
        self.assertEqual(s.put_batch(["opt/g1"], [b"g"], c), 0)

    def test_put_from_with_metadata(self):
        s = self.s
        data = ctypes.create_string_buffer(b"DATA", 4)
        meta = ctypes.create_string_buffer(b"META:", 5)
        self.assertEqual(s.put_from_with_metadata("pm/k", addr(data), addr(meta), 4, 5), 0)
        self.assertEqual(s.get("pm/k"), b"META:DATA")
        self.assertEqual(s.put_from_with_metadata("pm/z", addr(data), addr(meta), 0, 5), 0)
        self.assertEqual(s.is_exist("pm/z"), 0)

    def test_get_into_ranges(self):
        s = self.s
        self.assertEqual(s.put_batch(["r/a", "r/b"], [b"0123456789", b"abcdef"]), 0)
        b0 = ctypes.create_string_buffer(16)
        b1 = ctypes.create_string_buffer(16)
        res = s.get_into_ranges([addr(b0), addr(b1)], [["r/a", "r/b"], ["r/missing"]],
                                [[[0, 4], [8]], [[0]]], [[[2, 8], [3]], [[0]]],
                                [[[3, 2], [3]], [[1]]])
        self.assertEqual(res, [[[3, 2], [3]], [[kvpool.OBJECT_NOT_FOUND]]])
        self.assertEqual(b0.raw[:11], b"234\0" + b"89" + b"\0\0" + b"def")
        res = s.get_into_ranges([addr(b0)], [["r/a"]], [[[0]]], [[[8]]], [[[5]]])
        self.assertEqual(res, [[[kvpool.INVALID_PARAMS]]])

    def test_get_session(self):
        s = self.s
        self.assertEqual(s.put("gs/a", b"hello world"), 0)
        self.assertEqual(s.batch_get_session_start(["gs/a", "gs/none"]),
                         [0, kvpool.OBJECT_NOT_FOUND])
        b = ctypes.create_string_buffer(8)
        r = s.batch_get_into_multi_buffer_ranges(["gs/a", "gs/none"],
                                                 [[addr(b), addr(b) + 4], [addr(b)]],
                                                 [[3, 2], [1]], [[6, 0], [0]])
        self.assertEqual(r, [5, kvpool.INVALID_PARAMS])
        self.assertEqual(b.raw[:6], b"wor\0he")
        self.assertEqual(s.batch_get_into_multi_buffer_ranges(["gs/a"], [[addr(b)]], [[4]],
                                                              [[9]]), [kvpool.INVALID_PARAMS])
        self.assertEqual(s.batch_get_session_end(["gs/a"]), 0)
        self.assertEqual(s.batch_get_into_multi_buffer_ranges(["gs/a"], [[addr(b)]], [[1]],
                                                              [[0]]), [kvpool.INVALID_PARAMS])

    def test_put_session(self):
        s = self.s
        self.assertEqual(s.put("ps/exists", b"e"), 0)
        self.assertEqual(s.batch_put_session_start(["ps/a", "ps/exists", "ps/zero"], [6, 1, 0]),
                         [0, kvpool.OBJECT_ALREADY_EXISTS, kvpool.INVALID_PARAMS])
        self.assertEqual(s.batch_put_session_start(["ps/a"], [6]), [kvpool.INVALID_PARAMS])
        x = ctypes.create_string_buffer(b"abcdef", 6)
        self.assertEqual(s.batch_put_from_multi_buffer_ranges(
            ["ps/a", "ps/none"], [[addr(x) + 3, addr(x)], [addr(x)]], [[3, 3], [1]],
            [[0, 3], [0]]), [0, kvpool.INVALID_PARAMS])
        self.assertEqual(s.is_exist("ps/a"), 0)      # not visible before the end
        self.assertEqual(s.batch_put_from_multi_buffer_ranges(["ps/a"], [[addr(x)]], [[4]],
                                                              [[3]]), [kvpool.INVALID_PARAMS])
        self.assertEqual(s.batch_put_session_end(["ps/a", "ps/none"]),
                         [0, kvpool.INVALID_PARAMS])
        self.assertEqual(s.get("ps/a"), b"defabc")
        self.assertEqual(s.batch_put_session_start(["ps/r"], [4]), [0])
        self.assertEqual(s.batch_put_session_revoke(["ps/r", "ps/none"]),
                         [0, kvpool.INVALID_PARAMS])
        self.assertEqual(s.batch_put_session_end(["ps/r"]), [kvpool.INVALID_PARAMS])
        self.assertEqual(s.is_exist("ps/r"), 0)

    def test_replica_desc(self):
        s = self.s
        self.assertEqual(s.put("rd/k", b"x" * 1000), 0)
        d = s.get_replica_desc("rd/k")
        self.assertEqual(len(d), 1)
        self.assertEqual(d[0].status, kvpool.ReplicaStatus.COMPLETE)
        self.assertTrue(d[0].is_memory_replica())
        self.assertFalse(d[0].is_disk_replica())
        self.assertFalse(d[0].is_local_disk_replica())
        b = d[0].get_memory_descriptor().buffer_descriptor
        self.assertEqual(b.size, 1000)
        self.assertIsInstance(b.buffer_address, int)
        self.assertTrue(b.transport_endpoint)
        with self.assertRaises(RuntimeError):
            d[0].get_disk_descriptor()
        self.assertEqual(s.get_replica_desc("rd/none"), [])
        m = s.batch_get_replica_desc(["rd/k", "rd/none"])
        self.assertEqual(list(m), ["rd/k"])
        self.assertEqual(len(m["rd/k"]), 1)

    def test_replica_clear(self):
        s = self.s
        self.assertEqual(s.put_batch(["rc/a", "rc/b", "rc/c"], [b"a", b"b", b"c"]), 0)
        node = s.stat("rc/a")["replicas"][0]["node"]
        s.get("rc/b")               # a read's lease ends with the read
        self.assertEqual(s.batch_replica_clear(["rc/a", "rc/b", "rc/none"], ""),
                         ["rc/a", "rc/b"])
        self.assertEqual(s.batch_is_exist(["rc/a", "rc/b"]), [0, 0])
        # By segment: the node's name, as stat() and get_replica_desc say.
        self.assertEqual(s.batch_replica_clear(["rc/c"], "no-such-node"), [])
        self.assertEqual(s.is_exist("rc/c"), 1)
        self.assertEqual(s.batch_replica_clear(["rc/c"], node), ["rc/c"])
        self.assertEqual(s.is_exist("rc/c"), 0)

    def test_remove_force(self):
        s = self.s
        self.assertEqual(s.put_batch(["rf/a", "rf/b", "rf/c"], [b"a", b"b", b"c"]), 0)
        s.get("rf/a")
        self.assertEqual(s.remove("rf/a"), 0)           # the read's lease is over
        self.assertEqual(s.remove("rf/b", force=True), 0)
        self.assertEqual(s.remove("rf/b"), kvpool.OBJECT_NOT_FOUND)
        self.assertEqual(s.batch_remove(["rf/c", "rf/none"], force=True),
                         [0, kvpool.OBJECT_NOT_FOUND])

    def test_health_and_hostname(self):
        self.assertEqual(self.s.health_check(), 0)
        self.assertEqual(self.s.get_hostname(), "localhost:0")
        self.assertEqual(self.s.get_offload_rpc_read_count(), 0)

    def test_segments(self):
        s = self.pool.store(local_hostname="seghost")
        self.assertEqual(s.get_hostname(), "seghost:0")
        r = s.allocate_and_mount_segment(3 << 20)
        self.assertEqual(r["ret"], 0)
        self.assertEqual(r["allocated_size"], 3 << 20)
        [seg] = r["segment_ids"]
        # Puts may now land there; prefer it by name.
        c = kvpool.ReplicateConfig(preferred_segment=seg)
        self.assertEqual(s.put("seg/k", b"v" * 100, c), 0)
        self.assertEqual(s.stat("seg/k")["replicas"][0]["node"], seg)
        self.assertEqual(s.unmount_segment([seg]), 0)
        # No ghost: gone, or still readable, never listed but empty.
        self.assertFalse(s.is_exist("seg/k") == 1 and s.get("seg/k") == b"")
        self.assertEqual(s.unmount_and_free_segment([seg]), -1)
        self.assertEqual(s.unmount_local_disk_segment(), 0)
        # mount_segment: a whole /dev/shm file.
        path = "/dev/shm/%s-mnt" % self.pool.tag
        with open(path, "wb") as f:
            f.truncate(2 << 20)
        self.addCleanup(lambda: os.path.exists(path) and os.unlink(path))
        r = s.mount_segment(path, 2 << 20)
        self.assertEqual(r["ret"], 0, s.last_error())
        self.assertEqual(s.unmount_segment(r["segment_ids"]), 0)
        self.assertTrue(os.path.exists(path))            # the caller's file stays
        self.assertEqual(s.mount_segment(path, 1 << 20)["ret"], -1)          # not the whole file
        self.assertEqual(s.mount_segment(path, 2 << 20, 4096)["ret"], -1)    # an offset
        self.assertEqual(s.mount_segment("/tmp/x", 2 << 20)["ret"], -1)
        s.close()

    def test_setup_dummy_pool(self):
        s = kvpool.MooncakeDistributedStore()
        r = L.run_python(
            "import kvpool, ctypes\n"
            "s = kvpool.MooncakeDistributedStore()\n"
            "print(s.setup_dummy(1 << 20, 0, 'localhost:50052'), repr(s.get_hostname()))\n"
            "p = s.alloc_from_mem_pool(4096); q = s.alloc_from_mem_pool(4096)\n"
            "print(p != 0, q - p >= 4096, s.alloc_from_mem_pool(2 << 20))\n"
            "ctypes.memmove(p, b'pooled', 6)\n"
            "print(s.put_from('dummy/k', p, 6), s.get_into('dummy/k', q, 4096),"
            " ctypes.string_at(q, 6))\n"
            "s.close()\n",
            env={"KVPOOL_CLUSTER_MASTER": self.pool.master})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(),
                         ["0 ''", "True True 0", "0 6 b'pooled'"], r.stderr)
        self.assertEqual(s.alloc_from_mem_pool(64), 0)    # a real client has no pool

    def test_tasks(self):
        s = self.s
        self.assertEqual(s.put("task/k", b"t" * 64), 0)
        node = s.stat("task/k")["replicas"][0]["node"]
        tid, rc = s.create_copy_task("task/k", [node])
        self.assertEqual(rc, 0)
        resp, rc = s.query_task(tid)
        self.assertEqual(rc, 0)
        self.assertEqual(resp.type, kvpool.TaskType.REPLICA_COPY)
        self.assertIn(resp.status, (kvpool.TaskStatus.SUCCESS, kvpool.TaskStatus.FAILED))
        self.assertEqual(s.get("task/k"), b"t" * 64)
        tid, rc = s.create_move_task("task/k", node, node)
        self.assertEqual(rc, 0)
        self.assertEqual(s.query_task(tid)[0].type, kvpool.TaskType.REPLICA_MOVE)
        self.assertEqual(s.create_copy_task("task/none", [node]),
                         ((0, 0), kvpool.OBJECT_NOT_FOUND))
        self.assertEqual(s.query_task((1, 2)), (None, kvpool.TASK_NOT_FOUND))

    def test_tenants(self):
        """A tenant_id other than "default" is a key space of its own."""
        a = self.pool.store(tenant_id="team-a")
        b = self.pool.store(tenant_id="team-b")
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        self.assertEqual(a.put("tn/k", b"from a"), 0)
        self.assertEqual(b.put("tn/k", b"from b"), 0)
        self.assertEqual(self.s.put("tn/k", b"default"), 0)
        self.assertEqual([x.get("tn/k") for x in (a, b, self.s)],
                         [b"from a", b"from b", b"default"])
        self.assertEqual(a.batch_is_exist(["tn/k", "tn/only-b"]), [1, 0])
        self.assertEqual(b.put("tn/only-b", b"b"), 0)
        self.assertEqual(a.is_exist("tn/only-b"), 0)
        self.assertEqual(b.remove_by_regex("^tn/only"), 1)
        self.assertEqual(a.put("tn/c", b"c"), 0)          # not read: no lease
        self.assertEqual(a.batch_replica_clear(["tn/c"]), ["tn/c"])
        self.assertEqual(a.put("tn/x", b"x"), 0)
        self.assertEqual(a.remove_all(), 2)                 # tn/k, tn/x: a's only
        self.assertEqual(b.get("tn/k"), b"from b")
        self.assertEqual(self.s.get("tn/k"), b"default")
        bad = kvpool.MooncakeDistributedStore()
        self.assertEqual(bad.setup(self.pool.config(tenant_id="a/b")), kvpool.INVALID_PARAMS)

    def test_engram_store(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest("numpy is not importable (apt-get install python3-numpy)")
        cfg = kvpool.EngramStoreConfig()
        cfg.table_vocab_sizes = [5, 3]
        cfg.embedding_dim = 4
        e = kvpool.EngramStore(7, cfg, self.s)
        self.assertEqual(e.get_store_keys(), ["engram:l7:h0", "engram:l7:h1"])
        self.assertEqual((e.get_num_heads(), e.get_embedding_dim()), (2, 4))
        t0 = np.arange(20, dtype=np.float32).reshape(5, 4)
        t1 = -np.arange(12, dtype=np.float32).reshape(3, 4)
        e.populate([t0, t1])
        with self.assertRaises(RuntimeError):
            e.populate([t0, t1])                      # the keys exist
        out = e.lookup([[[4, 0], [1, 2]]])
        self.assertEqual(out.shape, (1, 2, 2, 4))
        self.assertTrue((out[0, 0, 0] == t0[4]).all() and (out[0, 1, 1] == t1[2]).all())
        self.assertTrue((e.lookup(np.array([[[0, 1]]]))[0, 0, 1] == t1[1]).all())
        with self.assertRaises(RuntimeError):
            e.lookup([[[5, 0]]])                      # past the table
        self.assertEqual(e.remove_from_store(force=True), 2)
        self.assertEqual(e.remove_from_store(), 0)
        with self.assertRaises(ValueError):
            kvpool.EngramStore(0, kvpool.EngramStoreConfig([], 4), self.s)

    def test_buffer_pool(self):
        s = self.s
        pool = kvpool.BufferPool(s, max_bytes=1 << 20, min_size_class=4096)
        with pool.acquire(100) as lease:
            self.assertEqual(lease.size, 100)
            mv = lease.buffer
            mv[:5] = b"lease"
            self.assertEqual(s.put_from("bp/k", lease.ptr, 5), 0)
            with self.assertRaises(RuntimeError):
                lease.release()           # a view is still alive
            del mv
        self.assertEqual(s.get("bp/k"), b"lease")
        a = pool.acquire(1 << 19)
        b = pool.acquire(1 << 19)
        with self.assertRaises(RuntimeError):
            pool.acquire(4096, block=False)
        with self.assertRaises(RuntimeError):
            pool.acquire(4096, timeout=0.05)
        a.release()
        with pool.acquire(4096) as c:
            self.assertNotEqual(c.ptr, b.ptr)
        with self.assertRaises(RuntimeError):
            pool.close()                  # b is still leased
        b.release()
        pool.close()
        with self.assertRaises(RuntimeError):
            kvpool.BufferPool(kvpool.MooncakeDistributedStore())


if __name__ == "__main__":
    unittest.main()

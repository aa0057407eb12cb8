"""Where kvpool's module answered otherwise than Mooncake's (at 3b5a59413),
now answered as Mooncake does, against a real master and node:
get_into_ranges' result shape for lists that do not line up, a soft-pin
TTL without ENABLE, batch calls with lists of other lengths, a spilled
replica as Mooncake's LOCAL_DISK kind; and where kvpool keeps its own
answer (setup with local_buffer_size=0, docs/python.md)."""
import ctypes
import time
import types
import unittest

import kvp_testlib as L

kvpool = L.kvpool
IP = -600                       # INVALID_PARAMS


def addr(buf):
    return ctypes.addressof(buf)


class SeamsTest(L.PoolTestCase):

    def test_get_into_ranges_lists_that_differ(self):
        s = self.s
        self.assertEqual(s.put_batch(["gr/k1", "gr/k2"], [b"0123456789", b"abcdef"]), 0)
        b = ctypes.create_string_buffer(16)
        # k1's dst, src and size lists differ in length: an error for its
        # one dst offset; k2 has no ranges at all
        res = s.get_into_ranges([addr(b)], [["gr/k1", "gr/k2"]], [[[0], []]],
                                [[[0, 1], []]], [[[], []]])
        self.assertEqual(res, [[[IP], []]])
        self.assertEqual(b.raw, b"\0" * 16)
        # a bad key does not stop the good one next to it
        res = s.get_into_ranges([addr(b)], [["gr/k1", "gr/k2"]], [[[0], [4, 8]]],
                                [[[2], [0, 1]]], [[[3], [1]]])
        self.assertEqual(res, [[[3], [IP, IP]]])
        self.assertEqual(b.raw[:4], b"234\0")
        # a buffer whose key and offset lists differ: every key of it
        res = s.get_into_ranges([addr(b)], [["gr/k1", "gr/k2"]], [[[0]]], [[[0]]], [[[1]]])
        self.assertEqual(res, [[[IP], [IP]]])
        # top-level lists of other lengths: the whole call, in its shape
        res = s.get_into_ranges([addr(b), addr(b)], [["gr/k1"]], [[[0, 1]]], [[[0, 1]]],
                                [[[1, 1]]])
        self.assertEqual(res, [[[IP, IP]], [[IP]]])
        # a null buffer
        self.assertEqual(s.get_into_ranges([0], [["gr/k1"]], [[[0]]], [[[0]]], [[[1]]]),
                         [[[IP]]])
        self.assertEqual(b.raw[:4], b"234\0")
        # what lines up still reads
        res = s.get_into_ranges([addr(b)], [["gr/k2"]], [[[0, 2]]], [[[4, 0]]], [[[2, 1]]])
        self.assertEqual(res, [[[2, 1]]])
        self.assertEqual(b.raw[:3], b"efa")

    def test_soft_pin_ttl_needs_enable(self):
        s = self.s
        A = kvpool.SoftPinAction
        self.assertEqual(s.put("sp/k", b"old"), 0)
        for action in (A.PRESERVE, A.DISABLE):
            c = kvpool.ReplicateConfig()
            c.soft_pin_action = action
            c.soft_pin_ttl_ms = 1000
            self.assertEqual(s.upsert("sp/k", b"new", c), IP, action)
            self.assertEqual(s.put("sp/none", b"x", c), IP, action)
            self.assertEqual(s.batch_upsert_from(["sp/k"], [1], [1], c), [IP], action)
            c.soft_pin_ttl_ms = None
            self.assertEqual(s.upsert("sp/n" + action.name, b"v", c), 0, action)
        self.assertEqual(s.get("sp/k"), b"old")
        self.assertEqual(s.is_exist("sp/none"), 0)
        c = kvpool.ReplicateConfig(soft_pin_action=A.ENABLE, soft_pin_ttl_ms=1000)
        self.assertEqual(s.upsert("sp/k", b"new", c), 0)
        self.assertEqual(s.get("sp/k"), b"new")
        self.assertGreater(s.stat("sp/k")["pin_ms"], 0)
        # any object with the attributes is read the same way
        ns = types.SimpleNamespace(soft_pin_action=int(A.PRESERVE), soft_pin_ttl_ms=1000)
        self.assertEqual(s.upsert("sp/k", b"ns", ns), IP)

    def test_soft_pin_ttl_type(self):
        # Mooncake's field is std::optional<uint64_t>: pybind11 raises
        # TypeError when it is set to anything else
        c = kvpool.ReplicateConfig()
        for bad in (-1, 1 << 64, 1.5, "10"):
            with self.assertRaises(TypeError, msg=repr(bad)):
                c.soft_pin_ttl_ms = bad
            with self.assertRaises(TypeError, msg=repr(bad)):
                kvpool.ReplicateConfig(soft_pin_ttl_ms=bad)
        self.assertIsNone(c.soft_pin_ttl_ms)
        c.soft_pin_ttl_ms = (1 << 64) - 1
        self.assertEqual(c.soft_pin_ttl_ms, (1 << 64) - 1)
        c.soft_pin_ttl_ms = None
        self.assertIsNone(c.soft_pin_ttl_ms)
        ns = types.SimpleNamespace(soft_pin_action=1, soft_pin_ttl_ms=-1)
        with self.assertRaises(TypeError):
            self.s.put("sp/t", b"x", ns)

    def test_batch_lists_of_other_lengths(self):
        s = self.s
        src = ctypes.create_string_buffer(b"abcdefgh", 8)
        dst = ctypes.create_string_buffer(8)
        keys = ["bl/a", "bl/b", "bl/c"]
        # Mooncake: INVALID_PARAMS for every key, nothing stored or read
        self.assertEqual(s.batch_put_from(keys, [addr(src)], [8]), [IP] * 3)
        self.assertEqual(s.batch_put_from(keys, [addr(src)] * 3, [8, 8]), [IP] * 3)
        self.assertEqual(s.batch_upsert_from(keys, [addr(src)] * 2, [8] * 3), [IP] * 3)
        self.assertEqual(s.batch_is_exist(keys), [0, 0, 0])
        self.assertEqual(s.batch_put_from(keys, [addr(src)] * 3, [8] * 3), [0] * 3)
        self.assertEqual(s.batch_get_into(keys, [addr(dst)], [8]), [IP] * 3)
        self.assertEqual(s.batch_get_into(keys, [addr(dst)] * 3, [8] * 4), [IP] * 3)
        self.assertEqual(dst.raw, b"\0" * 8)
        self.assertEqual(s.batch_put_from_multi_buffers(keys, [[addr(src)]], [[8]]), [IP] * 3)
        self.assertEqual(s.batch_get_into_multi_buffers(keys, [[addr(dst)]] * 3, [[8]]),
                         [IP] * 3)
        self.assertEqual(dst.raw, b"\0" * 8)
        self.assertEqual(s.batch_get_into(keys[:1], [addr(dst)], [8]), [8])
        self.assertEqual(dst.raw, b"abcdefgh")

    def test_no_local_buffer(self):
        # kvpool's own answer: no local buffer is needed to put or get
        # (Mooncake's client fails the put); docs/python.md says so.
        s = kvpool.DistributedStore()
        self.assertEqual(s.setup(self.pool.config(local_buffer_size=0)), 0, s.last_error())
        try:
            self.assertEqual(s.put("lb/k", b"v" * 4096), 0)
            self.assertEqual(s.get("lb/k"), b"v" * 4096)
        finally:
            s.close()


class SpilledReplicaTest(unittest.TestCase):
    """A replica a node spilled to its own file is Mooncake's LOCAL_DISK
    kind, as its promotion test classifies replicas."""

    @classmethod
    def setUpClass(cls):
        L.require_module(cls)
        cls.pool = L.Pool(nodes=0, master_extra="eviction_high_watermark = 0.9\n"
                          "eviction_ratio = 0.1").start(wait_nodes=False)

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def test_spilled_replica_is_local_disk(self):
        self.pool.wait_ready(segments=0, seconds=15)
        s = kvpool.DistributedStore()
        rc = s.setup(self.pool.config(global_segment_size=16 << 20, enable_ssd_offload=True,
                                      ssd_offload_path=self.pool.dir))
        self.assertEqual(rc, 0, s.last_error())
        try:
            keys = ["sp/%02d" % i for i in range(48)]
            for k in keys:       # 24 MiB into a 16 MiB segment
                self.assertEqual(s.put(k, k.encode() * (512 * 1024 // len(k))), 0, k)
            disk = None
            deadline = time.monotonic() + 15
            while disk is None and time.monotonic() < deadline:
                for k in keys:
                    st = s.stat(k)
                    if st and [r["tier"] for r in st["replicas"]] == ["disk"]:
                        disk = k
                        break
                else:
                    time.sleep(0.2)
            self.assertIsNotNone(disk, "no object reached the spill file\n" + self.pool.logs())
            d = s.get_replica_desc(disk)
            self.assertEqual(len(d), 1)
            self.assertFalse(d[0].is_memory_replica())
            self.assertTrue(d[0].is_local_disk_replica())
            self.assertFalse(d[0].is_disk_replica())
            with self.assertRaises(RuntimeError):
                d[0].get_disk_descriptor()
            ld = d[0].get_local_disk_descriptor()
            self.assertEqual(ld.object_size, s.get_size(disk))
            self.assertIn(":", ld.transport_endpoint)
            self.assertTrue(s.batch_get_replica_desc([disk])[disk][0].is_local_disk_replica())
        finally:
            s.close()


if __name__ == "__main__":
    unittest.main()

"""The call sequence of an inference engine's KV-cache connector (vLLM /
SGLang / FastDeploy with Mooncake): register a large host buffer, ask
batch_is_exist for the K and V keys of many blocks, batch_put_from the
missing ones, batch_get_into all of them into another registered buffer, and
compare. Run over the local /dev/shm path, over forced TCP, and with the
engine's store contributing memory through an embedded node."""
import ctypes
import hashlib
import mmap
import os
import unittest

import kvp_testlib as L

kvpool = L.kvpool

BLOCKS = 64
BLOCK = 128 * 1024		# bytes of K (and of V) per block on this rank
TP_RANK = 0


def addr(buf):
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


def block_keys(prefix, i):
    h = hashlib.sha256(("%s-%d" % (prefix, i)).encode()).hexdigest()[:32]
    return ["%s_%d_k" % (h, TP_RANK), "%s_%d_v" % (h, TP_RANK)]


class EngineFlow:
    """Mixin: runs the connector flow with self.engine (a set-up store) and
    self.other (another instance that computed part of the prefix before)."""

    def connector_flow(self, prefix):
        n = 2 * BLOCKS
        host = mmap.mmap(-1, n * BLOCK)		# the engine's KV host buffer
        host[:] = os.urandom(len(host))
        hbase = addr(host)
        keys, ptrs = [], []
        for i in range(BLOCKS):
            for j, k in enumerate(block_keys(prefix, i)):
                keys.append(k)
                ptrs.append(hbase + (2 * i + j) * BLOCK)
        sizes = [BLOCK] * n

        # Another instance already stored the first third of the blocks.
        done = set(range(0, n, 3))
        pre = [keys[i] for i in sorted(done)]
        res = self.other.batch_put_from(pre, [ptrs[i] for i in sorted(done)],
                                        [BLOCK] * len(pre))
        self.assertEqual(res, [0] * len(pre))

        self.assertEqual(self.engine.register_buffer(hbase, len(host)), 0)
        exist = self.engine.batch_is_exist(keys)
        self.assertEqual(exist, [1 if i in done else 0 for i in range(n)])
        miss = [i for i in range(n) if exist[i] != 1]
        res = self.engine.batch_put_from([keys[i] for i in miss], [ptrs[i] for i in miss],
                                         [sizes[i] for i in miss])
        self.assertEqual(res, [0] * len(miss))
        self.assertEqual(self.engine.batch_is_exist(keys), [1] * n)

        # Load everything back into a second registered buffer.
        dev = mmap.mmap(-1, n * BLOCK)
        dbase = addr(dev)
        self.assertEqual(self.engine.register_buffer(dbase, len(dev)), 0)
        res = self.engine.batch_get_into(keys, [dbase + i * BLOCK for i in range(n)], sizes)
        self.assertEqual(res, sizes)
        self.assertEqual(dev[:], host[:])
        # ... and from the other instance too (prefix reuse across instances).
        back = bytearray(n * BLOCK)
        bb = addr(back)
        res = self.other.batch_get_into(keys, [bb + i * BLOCK for i in range(n)], sizes)
        self.assertEqual(res, sizes)
        self.assertEqual(bytes(back), host[:])
        self.assertEqual(self.engine.unregister_buffer(hbase), 0)
        self.assertEqual(self.engine.unregister_buffer(dbase), 0)
        host.close()
        dev.close()


class LocalPathTest(EngineFlow, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        L.require_module(cls)
        cls.pool = L.Pool(nodes=1, segment_size="128M").start()

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def setUp(self):
        self.engine = self.pool.store()
        self.other = self.pool.store()

    def tearDown(self):
        self.engine.close()
        self.other.close()

    def test_connector_flow_local(self):
        before = self.engine.stats()
        self.connector_flow("local")
        st = self.engine.stats()
        self.assertGreater(st["local_bytes"], before["local_bytes"])
        self.assertEqual(st["tcp_bytes"], before["tcp_bytes"])

    def test_connector_flow_tcp(self):
        # kvpool's own key forces TCP even on one host.
        self.engine.close()
        self.engine = self.pool.store(**{"client.protocol": "tcp"})
        self.connector_flow("tcp")
        st = self.engine.stats()
        self.assertGreater(st["tcp_bytes"], 0)
        self.assertEqual(st["local_bytes"], 0)


class EmbeddedTest(EngineFlow, unittest.TestCase):
    """The engine's store contributes memory (global_segment_size), as in
    Mooncake's embedded mode; the pool has no node daemon at all."""

    @classmethod
    def setUpClass(cls):
        L.require_module(cls)
        cls.pool = L.Pool(nodes=0).start(wait_nodes=False)

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def test_connector_flow_embedded(self):
        self.engine = kvpool.DistributedStore()
        rc = self.engine.setup(self.pool.config(global_segment_size=64 << 20))
        self.assertEqual(rc, 0, self.engine.last_error())
        self.other = self.pool.store()
        try:
            self.connector_flow("embedded")
        finally:
            self.other.close()
            self.engine.close()


if __name__ == "__main__":
    unittest.main()

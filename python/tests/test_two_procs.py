"""Two processes share one pool: one puts, the other hits. Once with a node
daemon holding the data, once with the writer's own embedded node holding it
(the reader maps the writer's segment), which disappears with the writer."""
import ctypes
import json
import os
import subprocess
import sys
import unittest

import kvp_testlib as L

kvpool = L.kvpool

WRITER = r"""
import ctypes, hashlib, json, sys
import kvpool
cfg = json.loads(sys.argv[1])
s = kvpool.MooncakeDistributedStore()
rc = s.setup(cfg)
if rc != 0:
    print("setup", rc, s.last_error(), flush=True)
    sys.exit(1)
n, size = 16, 256 * 1024
buf = bytearray(n * size)
for i in range(n):
    buf[i * size:(i + 1) * size] = hashlib.sha256(b"%d" % i).digest() * (size // 32)
base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
assert s.register_buffer(base, len(buf)) == 0
keys = ["shared/%d" % i for i in range(n)]
res = s.batch_put_from(keys, [base + i * size for i in range(n)], [size] * n)
print(json.dumps({"res": res, "segment": s.segment_name()}), flush=True)
sys.stdin.readline()            # until the reader is done
print("closing", s.close(), flush=True)
"""


def expected(i, size=256 * 1024):
    import hashlib
    return hashlib.sha256(b"%d" % i).digest() * (size // 32)


class TwoProcsTest(unittest.TestCase):
    def setUp(self):
        L.require_module(self)
        self.pool = None
        self.child = None

    def tearDown(self):
        if self.child and self.child.poll() is None:
            self.child.kill()
            self.child.wait()
        if self.pool:
            self.pool.stop()

    def start_writer(self, cfg):
        self.child = subprocess.Popen([sys.executable, "-c", WRITER, json.dumps(cfg)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
        line = self.child.stdout.readline()
        if not line.startswith("{"):
            self.fail("writer: %s %s\n%s" % (line, self.child.stderr.read(), self.pool.logs()))
        return json.loads(line)

    def finish_writer(self):
        self.child.stdin.write("done\n")
        self.child.stdin.flush()
        out, err = self.child.communicate(timeout=30)
        self.assertEqual(self.child.returncode, 0, err)
        self.assertIn("closing 0", out)

    def read_all(self, s, n=16, size=256 * 1024):
        buf = bytearray(n * size)
        base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        res = s.batch_get_into(["shared/%d" % i for i in range(n)],
                               [base + i * size for i in range(n)], [size] * n)
        return res, buf

    def test_node_daemon(self):
        self.pool = L.Pool(nodes=1, segment_size="64M").start()
        info = self.start_writer(self.pool.config())
        self.assertEqual(info["res"], [0] * 16)
        self.assertIsNone(info["segment"])
        reader = self.pool.store()
        res, buf = self.read_all(reader)
        self.assertEqual(res, [256 * 1024] * 16)
        for i in range(16):
            self.assertEqual(buf[i * 256 * 1024:(i + 1) * 256 * 1024], expected(i))
        self.assertEqual(reader.batch_is_exist(["shared/0", "shared/99"]), [1, 0])
        self.finish_writer()
        # The node daemon keeps the data after the writer is gone.
        self.assertEqual(reader.get("shared/3"), expected(3))
        reader.close()

    def test_embedded_writer(self):
        self.pool = L.Pool(nodes=0).start(wait_nodes=False)
        info = self.start_writer(self.pool.config(global_segment_size=32 << 20))
        self.assertEqual(info["res"], [0] * 16)
        seg = info["segment"]
        self.assertTrue(seg and os.path.exists("/dev/shm/" + seg), seg)
        self.assertEqual(self.pool.segments_mounted(), 1)
        reader = self.pool.store()
        before = reader.stats()
        res, buf = self.read_all(reader)
        self.assertEqual(res, [256 * 1024] * 16)
        for i in range(16):
            self.assertEqual(buf[i * 256 * 1024:(i + 1) * 256 * 1024], expected(i))
        # Read through a mapping of the writer's segment, not over TCP.
        after = reader.stats()
        self.assertEqual(after["local_bytes"] - before["local_bytes"], 16 * 256 * 1024)
        self.finish_writer()
        # The writer's memory left the pool with it.
        self.assertFalse(os.path.exists("/dev/shm/" + seg))
        self.pool.wait_ready(segments=0, seconds=10)
        self.assertEqual(reader.get("shared/3"), b"")
        self.assertEqual(reader.is_exist("shared/3"), 0)
        reader.close()


if __name__ == "__main__":
    unittest.main()

"""Namespaces: a writer process declares what its KV is and puts under
"llama/"; a second process that declares another model is refused
(NamespaceMismatchError naming both) and cannot read those keys; with the
same fingerprint it reads the bytes."""
import json
import subprocess
import sys
import unittest

import kvp_testlib as L

kvpool = L.kvpool

LLAMA = dict(model="meta-llama/Llama-3.1-8B", dtype="bfloat16", page_size=16,
             layout="NHD", tp=1)
QWEN = dict(model="Qwen/Qwen2-7B", dtype="bfloat16", page_size=16, layout="NHD", tp=2)

WRITER = r"""
import json, sys
import kvpool
cfg, ns = json.loads(sys.argv[1]), json.loads(sys.argv[2])
s = kvpool.MooncakeDistributedStore()
if s.setup(cfg) != 0:
    print("setup failed", s.last_error(), flush=True)
    sys.exit(1)
s.declare_namespace("llama", **ns)
rc = s.put("llama/blk-0", b"kv-bytes-of-llama" * 100)
print(json.dumps({"put": rc}), flush=True)
sys.stdin.readline()
s.close()
"""


class NamespaceTest(unittest.TestCase):
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

    def test_two_processes(self):
        self.pool = L.Pool(nodes=1, segment_size="64M").start()
        self.child = subprocess.Popen(
            [sys.executable, "-c", WRITER, json.dumps(self.pool.config()), json.dumps(LLAMA)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.child.stdout.readline()
        if not line.startswith("{"):
            self.fail("writer: %s %s\n%s" % (line, self.child.stderr.read(), self.pool.logs()))
        self.assertEqual(json.loads(line)["put"], 0)

        other = self.pool.store()
        with self.assertRaises(kvpool.NamespaceMismatchError) as cm:
            other.declare_namespace("llama", **QWEN)
        self.assertIsInstance(cm.exception, RuntimeError)
        msg = str(cm.exception)
        self.assertIn("Qwen/Qwen2-7B", msg)
        self.assertIn("meta-llama/Llama-3.1-8B", msg)
        # not declared with the namespace's fingerprint: refused, no bytes
        self.assertEqual(other.get("llama/blk-0"), b"")
        self.assertEqual(other.is_exist("llama/blk-0"), -1)
        self.assertNotEqual(other.put("llama/blk-1", b"x"), 0)
        # keys outside the namespace are unaffected
        self.assertEqual(other.put("flat-key", b"y"), 0)
        self.assertEqual(other.get("flat-key"), b"y")
        with self.assertRaises(ValueError):
            other.declare_namespace("bad name", **LLAMA)

        # the same fingerprint: reads the writer's bytes
        other.declare_namespace("llama", **LLAMA)
        self.assertEqual(other.get("llama/blk-0"), b"kv-bytes-of-llama" * 100)
        ns = {n["name"]: n for n in other.namespaces()}
        self.assertEqual(ns["llama"]["model"], LLAMA["model"])
        self.assertEqual(ns["llama"]["tp"], 1)
        self.assertEqual(ns["llama"]["keys"], 1)
        self.assertEqual(ns["llama"]["bytes"], 1700)
        self.assertEqual(len(ns["llama"]["fingerprint"]), 16)
        other.close()

        self.child.stdin.write("done\n")
        self.child.stdin.flush()
        self.child.communicate(timeout=30)
        self.assertEqual(self.child.returncode, 0)


if __name__ == "__main__":
    unittest.main()

"""The mooncake.store shim: imported from the source tree, and installed by
`make install-mooncake-shim` into a private site directory, it re-exports
kvpool's class, so code written for Mooncake runs against a kvpool pool."""
import os
import subprocess
import sys
import tempfile
import unittest

import kvp_testlib as L

kvpool = L.kvpool
SHIM = os.path.join(L.ROOT, "python", "mooncake_shim")

ENGINE_CODE = r"""
import sys
from mooncake.store import MooncakeDistributedStore, ReplicateConfig
import mooncake.store as ms
store = MooncakeDistributedStore()
rc = store.setup("localhost", "http://127.0.0.1:1/metadata", 0, 16 << 20, "tcp", "",
                 sys.argv[1])
assert rc == 0, rc
cfg = ReplicateConfig()
cfg.replica_num = 1
assert store.put("shim/k", b"v", cfg) == 0
assert store.get("shim/k") == b"v"
assert store.get_size("shim/missing") == ms.OBJECT_NOT_FOUND == -704
print("ok", MooncakeDistributedStore.__name__)
store.close()
"""


class ShimTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        L.require_module(cls)
        cls.pool = L.Pool(nodes=1, segment_size="32M").start()

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def run_engine(self, pythonpath):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(pythonpath + [env.get("PYTHONPATH", "")])
        return subprocess.run([sys.executable, "-c", ENGINE_CODE, self.pool.master],
                              env=env, capture_output=True, text=True, timeout=60)

    def test_from_source_tree(self):
        sys.path.insert(0, SHIM)
        try:
            import mooncake.store as ms
        finally:
            sys.path.remove(SHIM)
        self.assertIs(ms.MooncakeDistributedStore, kvpool.DistributedStore)
        self.assertIs(ms.ReplicateConfig, kvpool.ReplicateConfig)
        self.assertEqual(ms.OBJECT_NOT_FOUND, -704)
        self.assertIn("MooncakeDistributedStore", ms.__all__)
        r = self.run_engine([SHIM])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("ok"), r.stdout)

    def make(self, *args):
        cmd = [os.environ.get("MAKE", "make"), "--no-print-directory", "-s", "-C", L.ROOT,
               "BUILD=" + L.BUILD, "PYTHON=" + sys.executable]
        if os.path.basename(L.BUILD.rstrip("/")) == "build-san":
            cmd.append("SANITIZE=1")
        return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=600)

    def test_make_install_shim(self):
        with tempfile.TemporaryDirectory() as site:
            r = self.make("PYTHON_SITEDIR=" + site, "install-mooncake-shim")
            if r.returncode != 0 and "No rule to make target" in r.stderr:
                self.skipTest("python/Makefile.inc is not included by the Makefile")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            names = sorted(os.listdir(site))
            self.assertIn("mooncake", names)
            self.assertTrue(any(n.startswith("kvpool.") and n.endswith(".so") for n in names),
                            names)
            # Only the installed copies on the path, not the build tree.
            env = dict(os.environ)
            env["PYTHONPATH"] = site
            r = subprocess.run([sys.executable, "-c", ENGINE_CODE, self.pool.master],
                               env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            # A real Mooncake package is never replaced.
            os.remove(os.path.join(site, "mooncake", ".kvpool-shim"))
            r = self.make("PYTHON_SITEDIR=" + site, "install-mooncake-shim")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("not kvpool's shim", r.stderr)

if __name__ == "__main__":
    unittest.main()

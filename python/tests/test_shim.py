"""The mooncake.store shim beside Mooncake: with kvpool-mooncake.pth in a
site directory, `mooncake.store` (and mooncake.mooncake_config,
mooncake.async_store) are kvpool's while `mooncake` and `mooncake.engine`
come from an installed Mooncake — here a stand-in package in a temp dir
whose own store module must never be imported. Without Mooncake an empty
package stands in; KVPOOL_MOONCAKE_STORE=0 turns the redirect off; and
`make install-mooncake-shim` installs exactly that."""
import os
import subprocess
import sys
import tempfile
import unittest

import kvp_testlib as L

kvpool = L.kvpool
SHIM = os.path.join(L.ROOT, "python", "mooncake_shim")

ENGINE_CODE = r"""
import sys, site
for d in sys.argv[2:]:
    site.addsitedir(d)            # processes kvpool-mooncake.pth, as at start-up
from mooncake.store import MooncakeDistributedStore, ReplicateConfig, SoftPinAction
import mooncake.store as ms
store = MooncakeDistributedStore()
rc = store.setup("localhost", "http://127.0.0.1:1/metadata", 0, 16 << 20, "tcp", "",
                 sys.argv[1])
assert rc == 0, rc
cfg = ReplicateConfig()
cfg.replica_num = 1
cfg.soft_pin_action = SoftPinAction.ENABLE
assert store.put("shim/k", b"v", cfg) == 0
assert store.upsert("shim/k", b"w") == 0
assert store.get("shim/k") == b"w"
assert store.get_size("shim/missing") == ms.OBJECT_NOT_FOUND == -704
from mooncake.mooncake_config import MooncakeConfig
from mooncake.async_store import MooncakeDistributedStoreAsync
print("store", ms.__name__, MooncakeDistributedStore.__module__)
try:
    import mooncake.engine as eng
    print("engine", eng.WHO)
except ImportError as e:
    print("engine missing", type(e).__name__)
import mooncake
print("package", getattr(mooncake, "WHO", "stand-in"))
store.close()
"""

# A stand-in for an installed Mooncake wheel: its package, its engine, and
# a store module that must lose to kvpool's.
FAKE = {
    "mooncake/__init__.py": "WHO = 'mooncake-wheel'\nfrom pkgutil import extend_path\n"
                            "__path__ = extend_path(__path__, __name__)\n",
    "mooncake/engine.py": "WHO = 'mooncake-wheel-engine'\n",
    "mooncake/store.py": "raise RuntimeError('the real mooncake.store was imported')\n",
}


class ShimTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        L.require_module(cls)
        cls.pool = L.Pool(nodes=1, segment_size="32M").start()

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def run_engine(self, sitedirs, pythonpath=(), env=None):
        e = dict(os.environ)
        e["PYTHONPATH"] = os.pathsep.join(list(pythonpath) + [e.get("PYTHONPATH", "")])
        e.update(env or {})
        return subprocess.run([sys.executable, "-c", ENGINE_CODE, self.pool.master] +
                              list(sitedirs), env=e, capture_output=True, text=True,
                              timeout=60)

    def fake_mooncake(self):
        d = tempfile.mkdtemp(dir=self.pool.dir)
        for rel, text in FAKE.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        return d

    def test_beside_mooncake(self):
        fake = self.fake_mooncake()
        r = self.run_engine([SHIM], [fake])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), [
            "store kvpool.mooncake_store kvpool",
            "engine mooncake-wheel-engine",
            "package mooncake-wheel"], r.stderr)

    def test_without_mooncake(self):
        r = self.run_engine([SHIM])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), [
            "store kvpool.mooncake_store kvpool",
            "engine missing ModuleNotFoundError",
            "package stand-in"], r.stderr)

    def test_turned_off(self):
        fake = self.fake_mooncake()
        r = self.run_engine([SHIM], [fake], {"KVPOOL_MOONCAKE_STORE": "0"})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("the real mooncake.store was imported", r.stderr)

    def test_in_process(self):
        import kvpool_mooncake as km
        km.activate()
        try:
            import mooncake.store as ms
            import mooncake.mooncake_config as mc
            self.assertIs(ms.MooncakeDistributedStore, kvpool.MooncakeDistributedStore)
            self.assertIs(ms.ReplicateConfig, kvpool.ReplicateConfig)
            self.assertEqual(ms.OBJECT_NOT_FOUND, -704)
            self.assertIn("MooncakeDistributedStore", ms.__all__)
            self.assertEqual(mc._parse_segment_size("4gb"), 4 << 30)
        finally:
            km.deactivate()
            for m in [m for m in sys.modules if m == "mooncake" or m.startswith("mooncake.")]:
                del sys.modules[m]

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
            self.assertEqual(names, ["kvpool", "kvpool-mooncake.pth", "kvpool_mooncake.py"])
            self.assertNotIn("mooncake", names)      # never a package of that name
            # Only the installed copies, beside a Mooncake.
            fake = self.fake_mooncake()
            e = dict(os.environ, PYTHONPATH=fake)
            r = subprocess.run([sys.executable, "-c", ENGINE_CODE, self.pool.master, site],
                               env=e, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("engine mooncake-wheel-engine", r.stdout)
            r = self.make("PYTHON_SITEDIR=" + site, "uninstall-python")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(os.listdir(site), [])


if __name__ == "__main__":
    unittest.main()

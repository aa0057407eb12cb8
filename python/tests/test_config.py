"""The ways setup() learns its configuration, with Mooncake's meaning:
positional and keyword arguments (every keyword Mooncake's setup takes), a
dict, setup() with MOONCAKE_CONFIG_PATH (the FastDeploy seed's JSON
verbatim) or the MOONCAKE_* variables, kvpool "section.key" entries; sizes
as byte counts, numeric strings and human forms; an explicit argument
beating the environment; values Mooncake refuses returning INVALID_PARAMS
(not raising); protocol "rdma" without a device falling back with one
warning, or failing with strict_protocol. Environment cases run in a fresh
interpreter so the variables are seen at setup() only."""
import json
import os
import unittest

import kvp_testlib as L

kvpool = L.kvpool
MB = 1 << 20


def seg_size(store):
    """The embedded node's segment size in bytes, or None."""
    segs = store._segments()
    return segs[0][2] if segs else None


class ConfigTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        L.require_module(cls)
        cls.pool = L.Pool(nodes=1, segment_size="64M").start()

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def setup_ok(self, *args, **kw):
        s = kvpool.MooncakeDistributedStore()
        rc = s.setup(*args, **kw)
        self.assertEqual(rc, 0, s.last_error())
        self.addCleanup(s.close)
        return s

    def test_positional_mooncake(self):
        s = self.setup_ok("localhost", "http://127.0.0.1:1/metadata", 0, 16 * MB, "tcp", "",
                          self.pool.master)
        self.assertEqual(s.put("cfg/pos", b"p"), 0)
        self.assertEqual(s.get("cfg/pos"), b"p")
        self.assertEqual(s.get_hostname(), "localhost:0")
        s.close()
        # Every keyword Mooncake's setup() takes.
        rc = s.setup(local_hostname="h1", metadata_server="P2PHANDSHAKE",
                     global_segment_size=0, local_buffer_size=1 << 20, protocol="tcp",
                     rdma_devices="", master_server_addr=self.pool.master, engine=None,
                     enable_ssd_offload=False, ssd_offload_path="", tenant_id="default",
                     enable_client_http_server=False, client_http_port=9300)
        self.assertEqual(rc, 0, s.last_error())
        self.assertEqual(s.get("cfg/pos"), b"p")
        self.assertEqual(s.get_hostname(), "h1:0")
        s.close()
        # transfer_engine is the same argument under its other name; an
        # explicit port in local_hostname is kept.
        rc = s.setup("h2:4242", "", 0, 0, "tcp", "", self.pool.master, transfer_engine=object())
        self.assertEqual(rc, 0, s.last_error())
        self.assertEqual(s.get_hostname(), "h2:4242")

    def test_unknown_keyword_names_itself(self):
        s = kvpool.MooncakeDistributedStore()
        with self.assertRaisesRegex(TypeError, "global_segmnet_size"):
            s.setup("localhost", "", global_segmnet_size=0, master_server_addr=self.pool.master)

    def test_size_forms(self):
        """Mooncake's size strings (utils.h try_string_to_byte_size)."""
        G = 1 << 30
        for text, want in (("4gb", 4 * G), ("4GB", 4 * G), ("16 MB", 16 * MB), ("1.5G", 3 << 29),
                           ("1e9", 10 ** 9), (" 32m ", 32 * MB), ("2kb", 2048), ("7", 7),
                           ("3.125GB", 3355443200), ("1T", 1 << 40), ("10 b", 10),
                           ("infinite", 2 ** 64 - 1)):
            self.assertEqual(kvpool._kvpool._mc_size(text), want, text)
        for text in ("50%", "lots", "-1", "1.5 XB", "", "4 g b", "inf", "nan", "0x10g"):
            self.assertIsNone(kvpool._kvpool._mc_size(text), text)

    def test_sizes(self):
        # (given, segment bytes): any byte count, rounded up to whole pages
        # (at least 1 MiB); numeric strings; human forms. A segment commits
        # no memory until used, so 4gb costs nothing here.
        cases = [(16 * MB, 16 * MB), (16 * MB + 1, 16 * MB + 4096), ("4gb", 4 << 30),
                 (4 * (1 << 30) // 3, 1431658496), ("16777216", 16 * MB),
                 ("16 MB", 16 * MB), ("0.015625G", 16 * MB), ("1e7", 10002432),
                 (" 32m ", 32 * MB), (2048, MB), ("2kb", MB), (16.0 * MB, 16 * MB)]
        for given, want in cases:
            with self.subTest(given=given):
                s = self.setup_ok("localhost", "", given, 16 * MB, "tcp", "", self.pool.master)
                self.assertEqual(seg_size(s), want)
                self.assertIsNotNone(s.segment_name())
                s.close()
        # local_buffer_size takes the same forms.
        s = self.setup_ok("localhost", "", 0, "64 MB", "tcp", "", self.pool.master)
        self.assertIsNone(s.segment_name())

    def test_bad_values_return_codes(self):
        s = kvpool.MooncakeDistributedStore()
        for size in ("50%", "lots", "-1", "1.5 XB", "", "infinite", 100, True):
            with self.subTest(size=size):
                rc = s.setup("localhost", "", size, 16 * MB, "tcp", "", self.pool.master)
                self.assertEqual(rc, kvpool.INVALID_PARAMS, size)
                self.assertIn("global_segment_size", s.last_error())
        self.assertEqual(s.setup("localhost", "", 0, "1 PB", "tcp", "", self.pool.master),
                         kvpool.INVALID_PARAMS)
        self.assertEqual(s.setup(self.pool.config(**{"client.replicas": 0})),
                         kvpool.INVALID_PARAMS)
        self.assertIn("replicas", s.last_error())
        self.assertEqual(s.setup(self.pool.config(protocol="carrier-pigeon")),
                         kvpool.INVALID_PARAMS)
        self.assertIn("carrier-pigeon", s.last_error())
        self.assertEqual(s.setup(self.pool.config(config_file="/nonexistent/kvpool.ini")),
                         kvpool.INVALID_PARAMS)
        self.assertIn("/nonexistent/kvpool.ini", s.last_error())
        self.assertEqual(s.setup(self.pool.config(**{"no.such_key": 1})), kvpool.INVALID_PARAMS)
        self.assertEqual(s.setup(self.pool.config(client_http_port="http")),
                         kvpool.INVALID_PARAMS)
        self.assertEqual(s.setup(self.pool.config(enable_ssd_offload="maybe")),
                         kvpool.INVALID_PARAMS)
        self.assertEqual(s.put("k", b"v"), kvpool.INVALID_PARAMS)
        # Python type errors stay exceptions, as with Mooncake's binding.
        with self.assertRaises(TypeError):
            s.setup("localhost", "", 0, 0, 5, "", self.pool.master)
        with self.assertRaises(TypeError):
            s.setup({1: 2})
        # A good setup after failed ones works.
        self.assertEqual(s.setup(self.pool.config()), 0)
        self.assertEqual(s.last_error(), "")
        s.close()

    def test_dict_forms(self):
        cfg = self.pool.config(**{"client.protocol": "tcp", "client.connections_per_node": 2,
                                  "transfer_timeout": 5, "mode": "embedded"})
        for call in ("positional", "config="):
            with self.subTest(call=call):
                s = kvpool.DistributedStore()
                rc = s.setup(cfg) if call == "positional" else s.setup(config=cfg)
                self.assertEqual(rc, 0, s.last_error())
                self.assertEqual(s.put("cfg/tcp", b"t" * 4096), 0)
                self.assertEqual(s.get("cfg/tcp"), b"t" * 4096)
                self.assertGreater(s.stats()["tcp_bytes"], 0)
                s.close()
        # Values as Mooncake's dict form sees them (all text), booleans in
        # any spelling, the JSON key names.
        s = self.setup_ok({"local_hostname": "d", "metadata_server": "P2PHANDSHAKE",
                           "global_segment_size": "16777216", "local_buffer_size": "0",
                           "protocol": "TCP", "device_name": "auto-discovery",
                           "master_server_address": self.pool.master,
                           "enable_client_http_server": "false", "tenant_id": "default",
                           "config_file": self.pool.conf})
        self.assertEqual(seg_size(s), 16 * MB)

    def test_seed_json_verbatim(self):
        """The FastDeploy global-cache-pooling document's mooncake_config.json,
        only the master's address changed to this pool's: a 1000000000-byte
        segment and protocol "rdma" on a host without RDMA."""
        path = os.path.join(self.pool.dir, "mooncake_config.json")
        with open(path, "w") as f:
            f.write('{\n"metadata_server": "http://0.0.0.0:15002/metadata",\n'
                    '"master_server_addr": "%s",\n"global_segment_size": 1000000000,\n'
                    '"local_buffer_size": 1048576,\n"protocol": "rdma",\n'
                    '"rdma_devices": ""\n}\n' % self.pool.master)
        r = L.run_python(
            "import kvpool\n"
            "s = kvpool.MooncakeDistributedStore()\n"
            "print(s.setup(), s._segments()[0][2], s.last_error())\n"
            "print(s.put('seed/k', b'v'), s.get('seed/k'))\n"
            "s.close()\n",
            env={"MOONCAKE_CONFIG_PATH": path})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), ["0 1000001536 ", "0 b'v'"], r.stderr)
        self.assertIn("rounded up to 1000001536", r.stderr)
        if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
            return      # RDMA here: nothing to fall back from
        # One warning names the fallback.
        warn = [ln for ln in r.stderr.splitlines() if 'protocol "rdma"' in ln]
        self.assertEqual(len(warn), 1, r.stderr)
        self.assertIn("falling back to local shared memory", warn[0])
        self.assertIn("TCP", warn[0])

    def test_rdma_strict(self):
        if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
            self.skipTest("this host has RDMA devices")
        for how, env, extra in (("json", {}, {"strict_protocol": True}),
                                ("env", {"MOONCAKE_STRICT_PROTOCOL": "1"}, {})):
            with self.subTest(how=how):
                cfg = self.pool.config(protocol="rdma", **extra)
                r = L.run_python("import kvpool, sys\n"
                                 "s = kvpool.MooncakeDistributedStore()\n"
                                 "print(s.setup(%r), s.last_error())\n" % (cfg,), env=env)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertTrue(r.stdout.startswith("-1011 "), r.stdout + r.stderr)
                self.assertIn("rdma", r.stdout)

    def test_mooncake_config_path(self):
        path = os.path.join(self.pool.dir, "mooncake.json")
        with open(path, "w") as f:
            json.dump({"local_hostname": "json-host",
                       "metadata_server": "http://127.0.0.1:1/metadata",
                       "global_segment_size": "32MB",
                       "local_buffer_size": 16777216,
                       "protocol": "tcp",
                       "device_name": "",
                       "master_server_address": self.pool.master}, f)
        r = L.run_python(
            "import kvpool\n"
            "s = kvpool.MooncakeDistributedStore()\n"
            "rc = s.setup()\n"
            "print(rc, s.get_hostname().split(':')[0], s._segments()[0][2], s.last_error())\n"
            "print(s.put('json/k', b'j'), s.get('json/k'))\n"
            "s.close()\n",
            env={"MOONCAKE_CONFIG_PATH": path, "KVPOOL_LOG_LEVEL": "warning",
                 "MOONCAKE_GLOBAL_SEGMENT_SIZE": "64MB"})
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        # The file beats the variable.
        self.assertEqual(lines[0].split()[:3], ["0", "json-host", str(32 * MB)], r.stdout)
        self.assertEqual(lines[1], "0 b'j'")

    def test_mooncake_config_path_errors(self):
        bad = os.path.join(self.pool.dir, "bad.json")
        with open(bad, "w") as f:
            f.write("{not json")
        r = L.run_python(
            "import kvpool\n"
            "try:\n"
            "    kvpool.DistributedStore().setup()\n"
            "except ValueError as e:\n"
            "    print('ValueError', e)\n",
            env={"MOONCAKE_CONFIG_PATH": bad})
        self.assertIn("ValueError MOONCAKE_CONFIG_PATH " + bad, r.stdout, r.stderr)
        r = L.run_python(
            "import kvpool\n"
            "try:\n"
            "    kvpool.DistributedStore().setup()\n"
            "except OSError as e:\n"
            "    print('OSError', e.filename)\n",
            env={"MOONCAKE_CONFIG_PATH": "/nonexistent.json"})
        self.assertIn("OSError /nonexistent.json", r.stdout, r.stderr)

    def test_mooncake_env_vars(self):
        # Pure client from MOONCAKE_* only (no global segment).
        code = ("import kvpool\n"
                "s = kvpool.DistributedStore()\n"
                "print(s.setup(), s.segment_name(), s.put('env/k', b'e'), s.get('env/k'),"
                " s.stats()['tcp_bytes'] > 0)\n"
                "s.close()\n")
        env = {"MOONCAKE_MASTER_SERVER_ADDR": self.pool.master, "MOONCAKE_PROTOCOL": "tcp",
               "MOONCAKE_LOCAL_BUFFER_SIZE": "16MB", "KVPOOL_LOG_LEVEL": "warning"}
        r = L.run_python(code, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        # Mooncake's "tcp" is kvpool's auto: same-host data is memcpy'd.
        self.assertEqual(r.stdout.split(), ["0", "None", "0", "b'e'", "False"])
        # kvpool's own variable refines Mooncake's protocol name.
        env["KVPOOL_CLIENT_PROTOCOL"] = "tcp"
        r = L.run_python(code.replace("env/k", "env/k2"), env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["0", "None", "0", "b'e'", "True"])
        # MOONCAKE_GLOBAL_SEGMENT_SIZE (engines' env mode, MOONCAKE_MASTER as
        # Mooncake's mooncake_config spells it) makes setup() embed a node.
        env.pop("KVPOOL_CLIENT_PROTOCOL")
        env["MOONCAKE_MASTER"] = env.pop("MOONCAKE_MASTER_SERVER_ADDR")
        env["MOONCAKE_GLOBAL_SEGMENT_SIZE"] = "16MB"
        r = L.run_python("import kvpool\n"
                         "s = kvpool.DistributedStore()\n"
                         "print(s.setup(), s._segments()[0][2])\n"
                         "s.close()\n", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["0", str(16 * MB)])

    def test_argument_beats_environment(self):
        """With MOONCAKE_GLOBAL_SEGMENT_SIZE=0 (or any value) set, what the
        call passes is what counts; the variable fills only what it leaves
        open."""
        code = ("import kvpool\n"
                "s = kvpool.MooncakeDistributedStore()\n"
                "a = s.setup('localhost', '', 0, 16 << 20, 'tcp', '', %r)\n"
                "print(a, s.segment_name(), s.last_error()); s.close()\n"
                "b = s.setup('localhost', '', 16 << 20, 16 << 20, 'tcp', '', %r)\n"
                "print(b, s._segments()[0][2], s.last_error()); s.close()\n"
                "c = s.setup(master_server_addr=%r)\n"
                "print(c, s.segment_name(), s.last_error()); s.close()\n"
                % ((self.pool.master,) * 3))
        r = L.run_python(code, env={"MOONCAKE_GLOBAL_SEGMENT_SIZE": "0",
                                    "MOONCAKE_PROTOCOL": "rdma",
                                    "MOONCAKE_MASTER_SERVER_ADDR": "127.0.0.1:1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["0", "None", "0", str(16 * MB), "0", "None"],
                         r.stdout + r.stderr)
        # The explicit "tcp" beat MOONCAKE_PROTOCOL=rdma: the one fallback
        # warning is the third setup's, which names no protocol.
        self.assertEqual(r.stderr.count("falling back"), 1, r.stderr)
        r = L.run_python(code, env={"MOONCAKE_GLOBAL_SEGMENT_SIZE": "32MB"})
        self.assertEqual(r.stdout.split()[:5], ["0", "None", "0", str(16 * MB), "0"],
                         r.stdout + r.stderr)

    def test_init_all(self):
        r = L.run_python("import kvpool\n"
                         "s = kvpool.MooncakeDistributedStore()\n"
                         "print(s.init_all('tcp', '', 8 << 20), s._segments()[0][2])\n"
                         "s.close()\n",
                         env={"MOONCAKE_MASTER_SERVER_ADDR": self.pool.master})
        self.assertEqual(r.stdout.split(), ["0", str(8 * MB)], r.stderr)


if __name__ == "__main__":
    unittest.main()

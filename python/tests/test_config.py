"""The ways setup() learns its configuration: Mooncake's positional
arguments, a dict, setup() with MOONCAKE_CONFIG_PATH (the deployment JSON)
or the MOONCAKE_* variables, kvpool "section.key" entries — and that bad
values fail with INVALID_PARAMS and a message. Environment cases run in a
fresh interpreter so the variables are seen at setup() only."""
import json
import os
import unittest

import kvp_testlib as L

kvpool = L.kvpool


class ConfigTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        L.require_module(cls)
        cls.pool = L.Pool(nodes=1, segment_size="64M").start()

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def test_positional_mooncake(self):
        s = kvpool.MooncakeDistributedStore()
        rc = s.setup("localhost", "http://127.0.0.1:1/metadata", 0, 16 * 1024 * 1024,
                     "tcp", "", self.pool.master)
        self.assertEqual(rc, 0, s.last_error())
        self.assertEqual(s.put("cfg/pos", b"p"), 0)
        self.assertEqual(s.get("cfg/pos"), b"p")
        self.assertEqual(s.get_hostname(), "localhost")
        s.close()
        # Keywords, and the engine argument (accepted, unused).
        rc = s.setup(local_hostname="h1", metadata_server="P2PHANDSHAKE",
                     global_segment_size=0, local_buffer_size=1 << 20, protocol="tcp",
                     rdma_devices="", master_server_addr=self.pool.master, engine=None)
        self.assertEqual(rc, 0, s.last_error())
        self.assertEqual(s.get("cfg/pos"), b"p")
        self.assertEqual(s.get_hostname(), "h1")
        s.close()

    def test_dict_with_kvpool_keys(self):
        s = kvpool.DistributedStore()
        cfg = self.pool.config(**{"client.protocol": "tcp", "client.connections_per_node": 2,
                                  "transfer_timeout": 5, "mode": "embedded"})
        self.assertEqual(s.setup(config=cfg), 0, s.last_error())
        self.assertEqual(s.put("cfg/tcp", b"t" * 4096), 0)
        self.assertEqual(s.get("cfg/tcp"), b"t" * 4096)
        self.assertGreater(s.stats()["tcp_bytes"], 0)
        s.close()

    def test_bad_values(self):
        s = kvpool.DistributedStore()
        self.assertEqual(s.setup(self.pool.config(**{"client.replicas": 0})),
                         kvpool.INVALID_PARAMS)
        self.assertIn("replicas", s.last_error())
        self.assertEqual(s.setup(self.pool.config(protocol="carrier-pigeon")),
                         kvpool.INVALID_PARAMS)
        self.assertIn("protocol", s.last_error())
        self.assertEqual(s.setup(self.pool.config(config_file="/nonexistent/kvpool.ini")),
                         kvpool.INVALID_PARAMS)
        self.assertIn("/nonexistent/kvpool.ini", s.last_error())
        self.assertEqual(s.setup(self.pool.config(**{"no.such_key": 1})), kvpool.INVALID_PARAMS)
        self.assertEqual(s.put("k", b"v"), kvpool.INVALID_PARAMS)
        with self.assertRaises(ValueError):
            s.setup(self.pool.config(global_segment_size="lots"))
        with self.assertRaises(TypeError):
            s.setup(self.pool.config(protocol=5))
        with self.assertRaises(TypeError):
            s.setup({1: 2})
        # A good setup after failed ones works.
        self.assertEqual(s.setup(self.pool.config()), 0)
        self.assertEqual(s.last_error(), "")
        s.close()

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
            "print(rc, s.get_hostname(), s.segment_name() is not None, s.last_error())\n"
            "print(s.put('json/k', b'j'), s.get('json/k'))\n"
            "s.close()\n",
            env={"MOONCAKE_CONFIG_PATH": path, "KVPOOL_LOG_LEVEL": "warning"})
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split()[:3], ["0", "json-host", "True"], r.stdout)
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
        # kvpool's own variable wins over Mooncake's spelling.
        env["KVPOOL_CLIENT_PROTOCOL"] = "tcp"
        r = L.run_python(code.replace("env/k", "env/k2"), env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["0", "None", "0", "b'e'", "True"])
        # MOONCAKE_GLOBAL_SEGMENT_SIZE makes setup() embed a node.
        env.pop("KVPOOL_CLIENT_PROTOCOL")
        env["MOONCAKE_GLOBAL_SEGMENT_SIZE"] = "16MB"
        r = L.run_python("import kvpool\n"
                         "s = kvpool.DistributedStore()\n"
                         "print(s.setup(), s.segment_name() is not None)\n"
                         "s.close()\n", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["0", "True"])


if __name__ == "__main__":
    unittest.main()

"""setup() loads its configuration once — the config_file, then the
KVPOOL_* environment, then setup()'s own arguments — into one struct that
the store's handle and its embedded nodes start from. Puts with another
ReplicateConfig.replica_num, and segments mounted later, use that struct:
nothing re-reads the file or sees the environment change, so a cluster
token given through a file or a variable that is gone by then still
authenticates. The pool here requires a token that its clients' INI does not
name."""
import ctypes
import json
import os
import unittest

import kvp_testlib as L

kvpool = L.kvpool

SEG = 16 << 20


class ConfOnceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        L.require_module(cls)
        cls.pool = L.Pool(nodes=1, segment_size="64M", token=True).start()
        with open(cls.pool.token_file) as f:
            cls.token = f.read().strip()

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def setUp(self):
        # Only the daemon's segment: an embedded node of an earlier test has
        # left the master (client_ttl after its unmount).
        self.pool.wait_ready(segments=1, seconds=15)

    def client_token(self, name):
        """A copy of the cluster token the test may delete."""
        path = os.path.join(self.pool.dir, name)
        L.write_token(path, self.token)
        return path

    def test_without_token_refused(self):
        s = kvpool.DistributedStore()
        self.assertEqual(s.setup(self.pool.config()), kvpool.to_mooncake(kvpool.KVP_EAUTH))
        self.assertIn("token", s.last_error())
        s.close()

    def test_layers_reach_handle_and_node_once(self):
        d = self.pool.dir
        wrong = os.path.join(d, "wrong.token")
        L.write_token(wrong, "not-the-cluster-token")
        ini = os.path.join(d, "layers.ini")
        with open(ini, "w") as f:
            f.write("[cluster]\nmaster = 127.0.0.1:1\ntoken_file = %s\n"
                    "[client]\nprotocol = auto\nreplicas = 1\ntimeout = 10s\n"
                    "[node]\nname = from-file\nsegment_size = 4M\n"
                    "[log]\nlevel = warning\n" % wrong)
        tok = self.client_token("env.token")
        node_name = "from-arg-%d" % os.getpid()
        cfg = {"config_file": ini, "master_server_addr": self.pool.master,
               "local_hostname": "localhost", "global_segment_size": SEG,
               "replica_num": 2, "node.name": node_name}
        # The child reports what it saw as JSON lines; the variables reach
        # its setup() only.
        code = (
            "import json, os, sys, kvpool\n"
            "cfg = %r\n"
            "out = {}\n"
            "s = kvpool.DistributedStore()\n"
            "out['setup'] = s.setup(cfg)\n"
            "out['error'] = s.last_error()\n"
            "seg = s.segment_name()\n"
            "out['seg_size'] = os.stat('/dev/shm/' + seg).st_size\n"
            "val = b'L' * 65536\n"
            "out['put'] = s.put('layers/a', val)\n"
            "out['nodes_a'] = sorted(r['node'] for r in s.stat('layers/a')['replicas'])\n"
            "out['tcp_a'] = s.stats()['tcp_bytes']\n"
            # Every source but the loaded struct goes away.
            "for v in [v for v in os.environ if v.startswith('KVPOOL_')]:\n"
            "    del os.environ[v]\n"
            "os.unlink(%r)\n"
            "os.unlink(%r)\n"
            "out['put_b'] = s.put('layers/b', val, kvpool.ReplicateConfig(replica_num=1))\n"
            "st = s.stat('layers/b')\n"
            "out['nreplicas_b'] = len(st['replicas']) if st else None\n"
            "out['get_b'] = s.get('layers/b') == val\n"
            "out['tcp_b'] = s.stats()['tcp_bytes']\n"
            "out['close'] = s.close()\n"
            "print(json.dumps(out))\n" % (cfg, ini, tok))
        env = {"KVPOOL_CLUSTER_TOKEN_FILE": tok, "KVPOOL_CLIENT_PROTOCOL": "tcp",
               "KVPOOL_CLIENT_REPLICAS": "1", "KVPOOL_NODE_NAME": "from-env",
               "KVPOOL_NODE_SEGMENT_SIZE": "8M"}
        r = L.run_python(code, env=env)
        self.assertEqual(r.returncode, 0, r.stderr + self.pool.logs())
        out = json.loads(r.stdout.splitlines()[-1])
        # The environment's token over the file's wrong one, the argument's
        # master over the file's: the node mounted and the handle connected.
        self.assertEqual(out["setup"], 0, out["error"] + "\n" + self.pool.logs())
        # global_segment_size over KVPOOL_NODE_SEGMENT_SIZE over the file.
        self.assertEqual(out["seg_size"], SEG)
        self.assertEqual(out["put"], 0)
        # replica_num over KVPOOL_CLIENT_REPLICAS and the file (handle);
        # node.name over KVPOOL_NODE_NAME and the file (node).
        self.assertEqual(len(out["nodes_a"]), 2, out)
        self.assertIn(node_name, out["nodes_a"])
        # KVPOOL_CLIENT_PROTOCOL=tcp over the file's auto (same host: memcpy).
        self.assertGreater(out["tcp_a"], 0)
        # A handle opened after the file, the token and the variables are
        # gone still has all of them.
        self.assertEqual(out["put_b"], 0, r.stderr)
        self.assertEqual(out["nreplicas_b"], 1)
        self.assertTrue(out["get_b"])
        self.assertGreater(out["tcp_b"], out["tcp_a"])
        self.assertEqual(out["close"], 0)

    def test_token_file_gone_after_setup(self):
        tok = self.client_token("arg.token")
        s = kvpool.DistributedStore()
        rc = s.setup(self.pool.config(global_segment_size=SEG,
                                      **{"cluster.token_file": tok}))
        self.assertEqual(rc, 0, s.last_error() + "\n" + self.pool.logs())
        try:
            buf = ctypes.create_string_buffer(8192)
            addr = ctypes.addressof(buf)
            self.assertEqual(s.register_buffer(addr, 8192), 0)
            os.unlink(tok)
            # New handles (2 replicas, then 1 again is the default) open
            # without the file and get the registration replayed.
            ctypes.memmove(buf, b"T" * 8192, 8192)
            self.assertEqual(s.put_from("tok/a", addr, 8192, kvpool.ReplicateConfig(
                replica_num=2)), 0)
            self.assertEqual(len(s.stat("tok/a")["replicas"]), 2)
            self.assertEqual(s.put("tok/b", b"b" * 100, kvpool.ReplicateConfig(
                replica_num=2, with_hard_pin=True)), 0)
            ctypes.memset(buf, 0, 8192)
            self.assertEqual(s.get_into("tok/a", addr, 8192), 8192)
            self.assertEqual(buf.raw, b"T" * 8192)
            self.assertEqual(s.get("tok/b"), b"b" * 100)
            self.assertEqual(s.unregister_buffer(addr), 0)
        finally:
            s.close()

    def test_token_the_mooncake_way(self):
        """The token reaches an engine the way the rest of its Mooncake
        configuration does: a JSON key (cluster_token_file, or the token
        itself as cluster_token) in MOONCAKE_CONFIG_PATH or a dict, or
        MOONCAKE_CLUSTER_TOKEN_FILE / MOONCAKE_CLUSTER_TOKEN — to the handles
        and the embedded node alike."""
        tok = self.client_token("mc.token")
        path = os.path.join(self.pool.dir, "mc-token.json")
        base = {"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
                "master_server_address": self.pool.master, "protocol": "tcp",
                "global_segment_size": "8MB", "config_file": self.pool.conf}
        code = ("import kvpool\n"
                "s = kvpool.MooncakeDistributedStore()\n"
                "print(s.setup(), s.put('mct/k', b'v'), s.get('mct/k'), s.last_error())\n"
                "s.close()\n")
        cases = [("json file", dict(base, cluster_token_file=tok), {}),
                 ("json token", dict(base, cluster_token=self.token), {}),
                 ("env file", base, {"MOONCAKE_CLUSTER_TOKEN_FILE": tok}),
                 ("env token", base, {"MOONCAKE_CLUSTER_TOKEN": self.token})]
        for name, cfg, env in cases:
            with self.subTest(name):
                with open(path, "w") as f:
                    json.dump(cfg, f)
                r = L.run_python(code, env=dict(env, MOONCAKE_CONFIG_PATH=path))
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout.split()[:3], ["0", "0", "b'v'"],
                                 r.stdout + r.stderr + self.pool.logs())
                self.pool.wait_ready(segments=1, seconds=15)
        # A dict and the mooncake_config helper carry it too.
        from kvpool.mooncake_config import MooncakeConfig
        with open(path, "w") as f:
            json.dump(dict(base, cluster_token_file=tok), f)
        args = MooncakeConfig.from_file(path).setup_args()
        self.assertEqual(args["cluster_token_file"], tok)
        s = kvpool.MooncakeDistributedStore()
        self.assertEqual(s.setup(dict(args, config_file=self.pool.conf)), 0, s.last_error())
        s.close()


if __name__ == "__main__":
    unittest.main()

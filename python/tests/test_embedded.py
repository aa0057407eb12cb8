"""setup() with a global_segment_size > 0 starts an embedded kvpool-node for
this process's segment: it mounts at the master before setup returns, its
segment is named after the pid, and close() (or the interpreter's exit)
unmounts it and removes the file."""
import os
import signal
import subprocess
import threading
import time
import unittest

import kvp_testlib as L

kvpool = L.kvpool


class EmbeddedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        L.require_module(cls)
        cls.pool = L.Pool(nodes=0).start(wait_nodes=False)

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def setUp(self):
        # A closed embedded node's segment leaves the master's count when the
        # master drops it (client_ttl after the unmount when it held data).
        self.pool.wait_ready(segments=0, seconds=15)

    def test_embedded_node_lifecycle(self):
        s = kvpool.DistributedStore()
        self.assertIsNone(s.segment_name())
        self.assertEqual(s.setup(self.pool.config(global_segment_size=16 << 20)), 0,
                         s.last_error())
        seg = s.segment_name()
        self.assertTrue(seg.startswith("kvpool-py-%d-" % os.getpid()), seg)
        self.assertTrue(os.path.exists("/dev/shm/" + seg))
        self.assertEqual(os.stat("/dev/shm/" + seg).st_size, 16 << 20)
        self.assertEqual(os.stat("/dev/shm/" + seg).st_mode & 0o777, 0o600)
        # Mounted before setup returned.
        self.assertEqual(self.pool.segments_mounted(), 1)
        self.assertEqual(s.put("emb/a", b"a" * 1000), 0)
        self.assertEqual(s.get("emb/a"), b"a" * 1000)
        # The replica lives in this process's node: "<host>-py<pid>-<n>".
        node = s.stat("emb/a")["replicas"][0]["node"]
        self.assertTrue(node.endswith(seg[len("kvpool"):]), (node, seg))
        # A full segment refuses puts with Mooncake's NO_AVAILABLE_HANDLE.
        self.assertEqual(s.put("emb/huge", b"x" * (17 << 20)), kvpool.NO_AVAILABLE_HANDLE)
        self.assertEqual(s.close(), 0)
        self.assertFalse(os.path.exists("/dev/shm/" + seg))
        self.pool.wait_ready(segments=0, seconds=10)

    def test_two_stores_one_process(self):
        a, b = kvpool.DistributedStore(), kvpool.DistributedStore()
        self.assertEqual(a.setup(self.pool.config(global_segment_size="16MB")), 0, a.last_error())
        self.assertEqual(b.setup(self.pool.config(global_segment_size=16 << 20)), 0, b.last_error())
        self.assertNotEqual(a.segment_name(), b.segment_name())
        self.assertEqual(self.pool.segments_mounted(), 2)
        self.assertEqual(a.put("two/x", b"x"), 0)
        self.assertEqual(b.get("two/x"), b"x")
        b.close()
        a.close()
        self.pool.wait_ready(segments=0, seconds=10)

    def test_pure_client_has_no_node(self):
        s = kvpool.DistributedStore()
        self.assertEqual(s.setup(self.pool.config(global_segment_size=0)), 0)
        self.assertIsNone(s.segment_name())
        # No memory anywhere in this pool.
        self.assertEqual(s.put("nomem", b"x"), kvpool.NO_AVAILABLE_HANDLE)
        s.close()

    def test_unreachable_master(self):
        port = L.free_ports(1)[0]
        s = kvpool.DistributedStore()
        t0 = time.monotonic()
        rc = s.setup(self.pool.config(master_server_addr="127.0.0.1:%d" % port,
                                      global_segment_size=16 << 20,
                                      **{"client.timeout": "1s"}))
        self.assertLess(rc, 0)
        self.assertIn(rc, (kvpool.RPC_TIMEOUT, kvpool.RPC_FAIL))
        self.assertIn("127.0.0.1:%d" % port, s.last_error())
        self.assertLess(time.monotonic() - t0, 30)
        self.assertEqual([f for f in os.listdir("/dev/shm")
                          if f.startswith("kvpool-py-%d-" % os.getpid())], [])
        self.assertEqual(s.put("k", b"v"), kvpool.INVALID_PARAMS)

    def test_atexit_closes(self):
        # A program that never calls close(): the module's atexit hook
        # unmounts the node and removes its segment.
        cfg = self.pool.config(global_segment_size=16 << 20)
        r = L.run_python(
            "import kvpool, sys\n"
            "s = kvpool.DistributedStore()\n"
            "assert s.setup(%r) == 0, s.last_error()\n"
            "assert s.put('exit/k', b'v') == 0\n"
            "print(s.segment_name())\n" % (cfg,))
        self.assertEqual(r.returncode, 0, r.stderr)
        seg = r.stdout.strip()
        self.assertTrue(seg.startswith("kvpool-py-"), r.stdout)
        self.assertFalse(os.path.exists("/dev/shm/" + seg))
        self.pool.wait_ready(segments=0, seconds=10)

    def test_embedded_node_sends_no_notification(self):
        # A service that runs Python has NOTIFY_SOCKET (and WATCHDOG_USEC)
        # set for its own process: the embedded node must not send STATUS=,
        # WATCHDOG=1 or STOPPING=1 there. The script sends one datagram of
        # its own at the end, so the socket is known to be reachable.
        import socket
        import tempfile
        d = tempfile.mkdtemp(prefix="notify.")
        path = os.path.join(d, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        got, done = [], threading.Event()

        def reader():
            # Read while the script runs: a full socket queue would block
            # the sender (sd_notify), not fail it.
            sock.settimeout(0.1)
            while not done.is_set():
                try:
                    got.append(sock.recv(4096).decode(errors="replace"))
                except socket.timeout:
                    pass

        t = threading.Thread(target=reader)
        try:
            sock.bind(path)
            t.start()
            cfg = self.pool.config(global_segment_size=16 << 20)
            r = L.run_python(
                "import kvpool, os, socket, time\n"
                "s = kvpool.DistributedStore()\n"
                "assert s.setup(%r) == 0, s.last_error()\n"
                "assert s.put('notify/k', b'v' * 1000) == 0\n"
                "time.sleep(1)\n"
                "assert s.close() == 0\n"
                "c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                "c.sendto(b'X-TEST=done', os.environ['NOTIFY_SOCKET'])\n" % (cfg,),
                env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"})
            self.assertEqual(r.returncode, 0, r.stderr)
            time.sleep(0.3)
            done.set()
            t.join()
            self.assertEqual(got, ["X-TEST=done"])
        finally:
            done.set()
            if t.is_alive():
                t.join()
            sock.close()
            if os.path.exists(path):
                os.unlink(path)
            os.rmdir(d)
        self.pool.wait_ready(segments=0, seconds=15)

    def test_init_all(self):
        # init_all(protocol, device_name, mount_segment_size) with the rest
        # from the MOONCAKE_* environment, as Mooncake's initAll.
        r = L.run_python(
            "import kvpool\n"
            "s = kvpool.DistributedStore()\n"
            "rc = s.init_all('tcp', '', 16 << 20)\n"
            "print(rc, s.segment_name() is not None, s.put('ia/k', b'v'), s.get('ia/k'))\n"
            "s.close()\n",
            env={"MOONCAKE_MASTER_SERVER_ADDR": self.pool.master,
                 "KVPOOL_LOG_LEVEL": "warning"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["0", "True", "0", "b'v'"])

    def test_orphan_of_a_killed_store(self):
        # A store killed by a signal never removes its segment: the next
        # kvpool process on the host (here another embedded store's node)
        # finds it unlocked with its owner gone and removes it; meanwhile
        # `kvpool scan` lists it as an orphan.
        cfg = self.pool.config(global_segment_size=32 << 20)
        p = subprocess.Popen(
            [L.sys.executable, "-c",
             "import kvpool, sys, time\n"
             "s = kvpool.DistributedStore()\n"
             "assert s.setup(%r) == 0, s.last_error()\n"
             "assert s.put('orphan/k', b'v' * 100000) == 0\n"
             "print(s.segment_name(), flush=True)\n"
             "time.sleep(60)\n" % (cfg,)],
            stdout=subprocess.PIPE, text=True)
        try:
            seg = p.stdout.readline().strip()
            self.assertTrue(seg.startswith("kvpool-py-%d-" % p.pid), seg)
            os.kill(p.pid, signal.SIGKILL)
        finally:
            p.wait()
            p.stdout.close()
        path = "/dev/shm/" + seg
        self.assertTrue(os.path.exists(path), "the kill left nothing to clean")
        scan = subprocess.run([os.path.join(L.BUILD, "kvpool"), "scan"],
                              capture_output=True, text=True)
        self.assertEqual(scan.returncode, 0, scan.stderr)
        line = [l for l in scan.stdout.splitlines() if l.endswith(path)]
        self.assertEqual(len(line), 1, scan.stdout)
        self.assertTrue(line[0].startswith("orphan "), line[0])
        self.assertIn("pid %d (removes it on exit), orphan" % p.pid, line[0])
        self.assertIn("python", line[0])
        s = kvpool.DistributedStore()
        self.assertEqual(s.setup(self.pool.config(global_segment_size=16 << 20)), 0,
                         s.last_error())
        self.assertFalse(os.path.exists(path), "the orphan survived the next store's start")
        self.assertTrue(os.path.exists("/dev/shm/" + s.segment_name()))
        s.close()
        self.pool.wait_ready(segments=0, seconds=15)

    def test_big_segment_sparse_and_quick(self):
        # 3.2 GB (Mooncake's tests' size): setup reserves the header and
        # the commit map only and reads no page; the memory is taken as
        # puts use it.
        s = kvpool.DistributedStore()
        t0 = time.monotonic()
        self.assertEqual(s.setup(self.pool.config(global_segment_size=3355443200)), 0,
                         s.last_error())
        took = time.monotonic() - t0
        path = "/dev/shm/" + s.segment_name()
        st = os.stat(path)
        self.assertEqual(st.st_size, 3355443200)
        self.assertLess(st.st_blocks * 512, 4 << 20, "setup committed the segment's memory")
        self.assertEqual(s.put("big/k", b"z" * (8 << 20)), 0)
        self.assertGreaterEqual(os.stat(path).st_blocks * 512, 8 << 20)
        self.assertEqual(s.get("big/k"), b"z" * (8 << 20))
        print("\n  setup(global_segment_size=3.2 GB): %.0f ms" % (took * 1000))
        s.close()
        self.pool.wait_ready(segments=0, seconds=15)


if __name__ == "__main__":
    unittest.main()

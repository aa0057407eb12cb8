"""Threads: one store used from many threads at once gives every thread its
own correct results; a blocking call releases the GIL (other Python threads
run while it waits on the network); close() racing other calls neither
crashes nor hangs, and calls after it fail cleanly."""
import ctypes
import select
import socket
import threading
import time
import unittest

import kvp_testlib as L

kvpool = L.kvpool


def addr(buf):
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


class ThreadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        L.require_module(cls)
        cls.pool = L.Pool(nodes=1, segment_size="256M").start()

    @classmethod
    def tearDownClass(cls):
        cls.pool.stop()

    def test_many_threads_one_store(self):
        s = self.pool.store()
        errors = []
        nthreads, rounds, size = 8, 25, 32 * 1024

        def worker(t):
            try:
                buf = bytearray(4 * size)
                base = addr(buf)
                for r in range(rounds):
                    keys = ["thr/%d/%d/%d" % (t, r, j) for j in range(4)]
                    vals = [bytes([t, r, j]) * (size // 3) + b"x" * (size % 3)
                            for j in range(4)]
                    if s.put(keys[0], vals[0]) != 0:
                        errors.append((t, r, "put"))
                    if s.put_batch(keys[1:], vals[1:]) != 0:
                        errors.append((t, r, "put_batch"))
                    if s.batch_is_exist(keys) != [1] * 4:
                        errors.append((t, r, "exist"))
                    res = s.batch_get_into(keys, [base + j * size for j in range(4)],
                                           [size] * 4)
                    if res != [size] * 4 or bytes(buf) != b"".join(vals):
                        errors.append((t, r, "get_into", res))
                    if s.get(keys[2]) != vals[2]:
                        errors.append((t, r, "get"))
                    if s.batch_remove(keys, force=True) != [0] * 4:
                        errors.append((t, r, "remove"))
            except Exception as e:  # report, do not hide
                errors.append((t, repr(e)))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(nthreads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        self.assertFalse(any(th.is_alive() for th in threads), "worker threads hung")
        self.assertEqual(errors, [])
        s.close()

    def test_blocking_call_releases_gil(self):
        # A "master" that accepts and reads but never answers: the calling
        # thread blocks in libkvpool. If it held the GIL, this thread could
        # not run Python code until the call returned.
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)
        lsock.settimeout(20)
        fake = "127.0.0.1:%d" % lsock.getsockname()[1]
        s = kvpool.DistributedStore()
        done = threading.Event()
        out = {}

        def call():
            rc = s.setup(self.pool.config(master_server_addr=fake, **{"client.timeout": "20s"}))
            out["setup"] = rc
            if rc == 0:
                out["exist"] = s.is_exist("gil/k")
            done.set()

        t = threading.Thread(target=call)
        t.start()
        conns = []
        try:
            # Wait until the other thread has sent a request (on whichever
            # connection) and is waiting for the answer.
            got = b""
            deadline = time.monotonic() + 20
            while not got:
                left = deadline - time.monotonic()
                self.assertGreater(left, 0, "no request reached the fake master")
                ready, _, _ = select.select([lsock] + conns, [], [], left)
                for r in ready:
                    if r is lsock:
                        conns.append(lsock.accept()[0])
                    else:
                        got = got or r.recv(64)
            # We are running Python code now, while the call is in flight.
            self.assertFalse(done.is_set())
            self.assertTrue(t.is_alive())
        finally:
            for c in conns:
                c.close()
            lsock.close()
        t.join(60)
        self.assertFalse(t.is_alive())
        # The peer vanished: a clean error, not a hang or a crash.
        self.assertTrue(out.get("setup", 0) < 0 or out.get("exist", 0) == -1, out)
        s.close()

    def test_close_races_calls(self):
        s = self.pool.store()
        self.assertEqual(s.put("race/k", b"v" * 1000), 0)
        stop = threading.Event()
        seen = {"ok": 0, "closed": 0, "bad": []}

        def reader():
            while not stop.is_set():
                v = s.get("race/k")
                if v == b"v" * 1000:
                    seen["ok"] += 1
                elif v == b"":
                    seen["closed"] += 1
                else:
                    seen["bad"].append(v[:20])
                rc = s.is_exist("race/k")
                if rc not in (1, -1):
                    seen["bad"].append(rc)

        threads = [threading.Thread(target=reader) for _ in range(4)]
        for th in threads:
            th.start()
        while seen["ok"] < 20 and all(th.is_alive() for th in threads):
            threading.Event().wait(0.01)
        self.assertEqual(s.close(), 0)
        # After close every call fails cleanly.
        self.assertEqual(s.put("race/after", b"x"), kvpool.INVALID_PARAMS)
        stop.set()
        for th in threads:
            th.join(60)
        self.assertFalse(any(th.is_alive() for th in threads))
        self.assertEqual(seen["bad"], [])
        self.assertGreaterEqual(seen["ok"], 20)


if __name__ == "__main__":
    unittest.main()

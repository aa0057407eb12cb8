"""Every method of kvpool.DistributedStore against a real master and node:
return values and codes as Mooncake documents them, zero-copy buffers from
ctypes and mmap, the buffer protocol of get_buffer, regex removal, argument
errors."""
import ctypes
import mmap
import os
import re
import unittest

import kvp_testlib as L

kvpool = L.kvpool


def addr(buf):
    """Address of a writable buffer (mmap, bytearray, ctypes array)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


class ApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        L.require_module(cls)
        cls.pool = L.Pool(nodes=1, segment_size="256M").start()
        cls.s = cls.pool.store()

    @classmethod
    def tearDownClass(cls):
        cls.s.close()
        cls.pool.stop()

    def key(self, name):
        return "%s/%s" % (self._testMethodName, name)

    # -- module ---------------------------------------------------------------

    def test_constants(self):
        self.assertIs(kvpool.MooncakeDistributedStore, kvpool.DistributedStore)
        self.assertEqual(kvpool.OBJECT_NOT_FOUND, -704)
        self.assertEqual(kvpool.OBJECT_ALREADY_EXISTS, -705)
        self.assertEqual(kvpool.INVALID_PARAMS, -600)
        self.assertEqual(kvpool.BUFFER_OVERFLOW, -10)
        self.assertEqual(kvpool.KVP_OK, 0)
        # kvpool's own codes sit below the errno range and Mooncake's codes
        # (0.2.0); a Python caller sees Mooncake's codes from the store.
        self.assertEqual(kvpool.KVP_ENOTFOUND, -5001)
        self.assertEqual(kvpool.KVP_ESTALE, -5022)
        codes = [getattr(kvpool, n) for n in dir(kvpool) if n.startswith("KVP_E")]
        self.assertEqual(len(codes), 25)
        self.assertTrue(all(c < -4095 for c in codes), codes)
        self.assertFalse(set(codes) & set(kvpool.ERROR_NAMES))
        self.assertEqual(kvpool.to_mooncake(kvpool.KVP_ENOTFOUND), kvpool.OBJECT_NOT_FOUND)
        self.assertEqual(kvpool.errname(kvpool.KVP_ENOTFOUND), "KVP_ENOTFOUND")
        self.assertEqual(kvpool.strerror(kvpool.KVP_ENOTFOUND), "object not found")
        # Every KVP_E* code maps to a named Mooncake code.
        for name in dir(kvpool):
            if name.startswith("KVP_E"):
                mc = kvpool.to_mooncake(getattr(kvpool, name))
                self.assertIn(mc, kvpool.ERROR_NAMES, name)
                self.assertEqual(getattr(kvpool, kvpool.ERROR_NAMES[mc]), mc)
        self.assertTrue(kvpool.__version__)

    def test_replicate_config_type(self):
        c = kvpool.ReplicateConfig()
        self.assertEqual(c.replica_num, 1)
        self.assertFalse(c.with_soft_pin)
        c.replica_num = 2
        c.with_hard_pin = True
        c.preferred_segment = "localhost:1"
        self.assertIn("replica_num: 2", str(c))
        self.assertIn("with_hard_pin: 1", str(c))
        self.assertEqual(kvpool.ReplicateConfig(replica_num=3).replica_num, 3)

    # -- put / get ------------------------------------------------------------

    def test_put_get(self):
        k = self.key("a")
        self.assertEqual(self.s.put(k, b"hello"), 0)
        self.assertEqual(self.s.get(k), b"hello")
        # Immutable, first writer wins; a second put is not an error (Mooncake).
        self.assertEqual(self.s.put(k, b"other"), 0)
        self.assertEqual(self.s.get(k), b"hello")
        self.assertEqual(self.s.get(self.key("missing")), b"")
        big = os.urandom(3 * 1024 * 1024 + 7)
        self.assertEqual(self.s.put(self.key("big"), big), 0)
        self.assertEqual(self.s.get(self.key("big")), big)

    def test_put_value_types_and_keys(self):
        self.assertEqual(self.s.put(self.key("ba"), bytearray(b"\x00\x01\x02")), 0)
        self.assertEqual(self.s.get(self.key("ba")), b"\x00\x01\x02")
        self.assertEqual(self.s.put(self.key("mv"), memoryview(b"abcdef")[2:]), 0)
        self.assertEqual(self.s.get(self.key("mv")), b"cdef")
        bk = self.key("bytes").encode()
        self.assertEqual(self.s.put(bk, b"b"), 0)
        self.assertEqual(self.s.get(bk.decode()), b"b")
        uk = self.key("ключ-🔑")
        self.assertEqual(self.s.put(uk, b"u"), 0)
        self.assertEqual(self.s.get(uk), b"u")

    def test_put_parts(self):
        k = self.key("p")
        self.assertEqual(self.s.put_parts(k, b"Hello, ", bytearray(b"World"), memoryview(b"!")), 0)
        self.assertEqual(self.s.get(k), b"Hello, World!")
        cfg = kvpool.ReplicateConfig()
        self.assertEqual(self.s.put_parts(self.key("q"), b"x", b"y", config=cfg), 0)
        self.assertEqual(self.s.get(self.key("q")), b"xy")
        with self.assertRaises(TypeError):
            self.s.put_parts(k, b"a", bogus=1)

    def test_put_batch_get_batch(self):
        keys = [self.key("b%d" % i) for i in range(20)]
        vals = [os.urandom(1000 + i * 37) for i in range(20)]
        self.assertEqual(self.s.put_batch(keys, vals), 0)
        got = self.s.get_batch(keys + [self.key("none")])
        self.assertEqual(got[:-1], vals)
        self.assertEqual(got[-1], b"")
        self.assertEqual(self.s.get_batch([]), [])
        with self.assertRaises(ValueError):
            self.s.put_batch(keys, vals[:3])
        # A bad item makes put_batch return its code; the others are stored.
        self.assertEqual(self.s.put_batch([self.key("ok1"), "", self.key("ok2")],
                                          [b"1", b"2", b"3"]), kvpool.INVALID_KEY)
        self.assertEqual(self.s.get(self.key("ok2")), b"3")

    def test_get_buffer(self):
        k = self.key("buf")
        val = os.urandom(1 << 20)
        self.assertEqual(self.s.put(k, val), 0)
        b = self.s.get_buffer(k)
        self.assertIsInstance(b, kvpool.BufferHandle)
        self.assertEqual(len(b), len(val))
        self.assertEqual(b.size(), len(val))
        mv = memoryview(b)
        self.assertEqual(mv.nbytes, len(val))
        self.assertEqual(bytes(mv), val)
        # Zero copy: the memoryview shows the handle's own bytes.
        self.assertEqual(addr(mv), b.ptr())
        self.assertEqual(ctypes.string_at(b.ptr(), 16), val[:16])
        del mv
        self.assertIsNone(self.s.get_buffer(self.key("missing")))
        bl = self.s.batch_get_buffer([k, self.key("missing")])
        self.assertEqual(bytes(memoryview(bl[0])), val)
        self.assertIsNone(bl[1])

    def test_exist_size_remove(self):
        k = self.key("e")
        self.assertEqual(self.s.is_exist(k), 0)
        self.assertEqual(self.s.get_size(k), kvpool.OBJECT_NOT_FOUND)
        self.assertEqual(self.s.put(k, b"12345"), 0)
        self.assertEqual(self.s.is_exist(k), 1)
        self.assertEqual(self.s.get_size(k), 5)
        self.assertEqual(self.s.batch_is_exist([k, self.key("no"), k]), [1, 0, 1])
        self.assertEqual(self.s.batch_is_exist([]), [])
        self.assertEqual(self.s.remove(k), 0)
        self.assertEqual(self.s.is_exist(k), 0)
        self.assertEqual(self.s.remove(k), kvpool.OBJECT_NOT_FOUND)
        # batch_remove
        ks = [self.key("r%d" % i) for i in range(3)]
        self.assertEqual(self.s.put_batch(ks, [b"x"] * 3), 0)
        self.assertEqual(self.s.batch_remove(ks + [self.key("gone")], force=True),
                         [0, 0, 0, kvpool.OBJECT_NOT_FOUND])

    def test_remove_leased(self):
        k = self.key("leased")
        self.assertEqual(self.s.put(k, b"v"), 0)
        self.assertEqual(self.s.get(k), b"v")	# takes a read lease (1 s)
        rc = self.s.remove(k)
        self.assertIn(rc, (0, kvpool.OBJECT_HAS_LEASE))
        if rc == kvpool.OBJECT_HAS_LEASE:
            self.assertEqual(self.s.remove(k, force=True), 0)
        self.assertEqual(self.s.is_exist(k), 0)

    def test_remove_by_regex(self):
        names = ["rx/a1", "rx/a2", "rx/ab", "rx/b1", "other/a1"]
        self.assertEqual(self.s.put_batch([self.key(n) for n in names], [b"v"] * 5), 0)
        pre = re.escape(self.key(""))
        self.assertEqual(self.s.remove_by_regex("^" + pre + r"rx/a\d$", force=True), 2)
        self.assertEqual(self.s.batch_is_exist([self.key(n) for n in names]), [0, 0, 1, 1, 1])
        # search semantics: unanchored patterns match anywhere in the key.
        self.assertEqual(self.s.remove_by_regex(pre + ".*b1$", force=True), 1)
        # bytes pattern, compiled pattern
        self.assertEqual(self.s.remove_by_regex(re.compile((pre + "rx/ab").encode()),
                                                force=True), 1)
        self.assertEqual(self.s.remove_by_regex("^" + pre + "nothing", force=True), 0)
        self.assertEqual(self.s.is_exist(self.key("other/a1")), 1)
        # "^prefix?" must not drop keys that lack the optional last literal.
        self.assertEqual(self.s.put_batch([self.key("opt"), self.key("op")], [b"1", b"2"]), 0)
        self.assertEqual(self.s.remove_by_regex("^" + pre + "opt?$", force=True), 2)
        # An alternative may match outside the anchored prefix.
        self.assertEqual(self.s.put_batch([self.key("alt1"), "zz-alt-" + self.key("x")],
                                          [b"1", b"2"]), 0)
        self.assertEqual(self.s.remove_by_regex("^" + pre + "alt1|^zz-alt-" + pre, force=True),
                         2)
        with self.assertRaises(re.error):
            self.s.remove_by_regex("(")

    def test_zz_remove_all(self):
        # Named to run last in this class: it empties the pool.
        ks = [self.key("all%d" % i) for i in range(5)]
        self.assertEqual(self.s.put_batch(ks, [b"v"] * 5), 0)
        n = self.s.remove_all(force=True)
        self.assertGreaterEqual(n, 5)
        self.assertEqual(self.s.batch_is_exist(ks), [0] * 5)
        self.assertEqual(self.s.remove_all(), 0)

    # -- registered buffers, zero-copy ----------------------------------------

    def test_put_from_get_into_ctypes(self):
        n = 256 * 1024
        src = (ctypes.c_ubyte * n)(*os.urandom(n))
        dst = (ctypes.c_ubyte * n)()
        ps, pd = ctypes.addressof(src), ctypes.addressof(dst)
        self.assertEqual(self.s.register_buffer(ps, n), 0)
        self.assertEqual(self.s.register_buffer(pd, n), 0)
        self.assertEqual(self.s.register_buffer(ps, n), kvpool.OBJECT_ALREADY_EXISTS)
        k = self.key("ct")
        self.assertEqual(self.s.put_from(k, ps, n), 0)
        self.assertEqual(self.s.get_into(k, pd, n), n)
        self.assertEqual(bytes(dst), bytes(src))
        self.assertEqual(self.s.get_into(self.key("missing"), pd, n), kvpool.OBJECT_NOT_FOUND)
        self.assertEqual(self.s.get_into(k, pd, n - 1), kvpool.BUFFER_OVERFLOW)
        self.assertEqual(self.s.unregister_buffer(ps), 0)
        self.assertEqual(self.s.unregister_buffer(pd), 0)
        self.assertEqual(self.s.unregister_buffer(pd), kvpool.INVALID_PARAMS)

    def test_put_from_get_into_mmap(self):
        n = 4 << 20
        m = mmap.mmap(-1, 2 * n)
        m[:n] = os.urandom(n)
        base = addr(m)
        self.assertEqual(self.s.register_buffer(base, 2 * n), 0)
        k = self.key("mm")
        self.assertEqual(self.s.put_from(k, base, n, kvpool.ReplicateConfig()), 0)
        self.assertEqual(self.s.get_into(k, base + n, n), n)
        self.assertEqual(m[n:], m[:n])
        # Unregistered memory works too (registration only picks the fast path).
        other = bytearray(n)
        self.assertEqual(self.s.get_into(k, addr(other), n), n)
        self.assertEqual(bytes(other), m[:n])
        self.assertEqual(self.s.unregister_buffer(base), 0)
        m.close()

    def test_local_path_is_used(self):
        # Same host: values move by memcpy through the node's /dev/shm segment.
        n = 1 << 20
        buf = bytearray(os.urandom(n))
        before = self.s.stats()
        self.assertEqual(self.s.put_from(self.key("loc"), addr(buf), n), 0)
        self.assertEqual(self.s.get_into(self.key("loc"), addr(buf), n), n)
        after = self.s.stats()
        self.assertGreaterEqual(after["local_bytes"] - before["local_bytes"], 2 * n)
        self.assertEqual(after["tcp_bytes"], before["tcp_bytes"])

    def test_batch_put_from_get_into(self):
        n, sz = 16, 64 * 1024
        src = mmap.mmap(-1, n * sz)
        dst = mmap.mmap(-1, n * sz)
        src[:] = os.urandom(n * sz)
        ps, pd = addr(src), addr(dst)
        keys = [self.key("k%d" % i) for i in range(n)]
        res = self.s.batch_put_from(keys, [ps + i * sz for i in range(n)], [sz] * n)
        self.assertEqual(res, [0] * n)
        # A missing key and a too-small buffer fail alone.
        keys2 = keys + [self.key("missing")]
        ptrs = [pd + i * sz for i in range(n)] + [pd]
        sizes = [sz] * n + [sz]
        sizes[3] = sz - 1
        res = self.s.batch_get_into(keys2, ptrs, sizes)
        want = [sz] * n + [kvpool.OBJECT_NOT_FOUND]
        want[3] = kvpool.BUFFER_OVERFLOW
        self.assertEqual(res, want)
        for i in range(n):
            if i != 3:
                self.assertEqual(dst[i * sz:(i + 1) * sz], src[i * sz:(i + 1) * sz], i)
        self.assertEqual(self.s.batch_put_from([], [], []), [])
        self.assertEqual(self.s.batch_get_into([], [], []), [])
        # lists of other lengths: Mooncake's INVALID_PARAMS for every key
        self.assertEqual(self.s.batch_get_into(keys, [pd], [sz]), [kvpool.INVALID_PARAMS] * n)
        with self.assertRaises(TypeError):
            self.s.batch_get_into(keys[:1], ["x"], [sz])

    def test_chain_pred(self):
        # A batch put is a chain in key order; pred= names the block the
        # first one extends (eviction keeps a chain's head while its tail
        # is kept: t_master_chain tests the order). Every put form takes it.
        sz = 4096
        src = mmap.mmap(-1, 4 * sz)
        ps = addr(src)
        head = self.key("chain-0")
        self.assertEqual(self.s.put(head, b"h" * sz), 0)
        keys = [self.key("chain-%d" % i) for i in (1, 2)]
        self.assertEqual(self.s.batch_put_from(keys, [ps, ps + sz], [sz, sz], pred=head),
                         [0, 0])
        more = [self.key("chain-%d" % i) for i in (3, 4)]
        self.assertEqual(self.s.put_batch(more, [b"a" * sz, b"b" * sz], pred=keys[-1]), 0)
        last = [self.key("chain-5")]
        self.assertEqual(self.s.batch_put_from_multi_buffers(last, [[ps]], [[sz]],
                                                             pred=more[-1]), [0])
        self.assertEqual(self.s.batch_is_exist([head] + keys + more + last), [1] * 6)
        # None is no pred; a pred that is not there links nothing but puts
        self.assertEqual(self.s.batch_put_from([self.key("solo")], [ps], [sz], pred=None), [0])
        self.assertEqual(self.s.batch_put_from([self.key("orphan")], [ps], [sz],
                                               pred=self.key("nowhere")), [0])
        with self.assertRaises(TypeError):
            self.s.batch_put_from([self.key("bad")], [ps], [sz], pred=42)
        with self.assertRaises(TypeError):
            self.s.batch_put_from([self.key("bad")], [ps], [sz], None, head)  # keyword only

    def test_multi_buffers(self):
        # Each key's value is made of several buffers: contiguous ones (the
        # layer-by-layer layout of a block) and scattered ones.
        layers, lsz, blocks = 8, 4096, 4
        src = mmap.mmap(-1, layers * lsz * blocks)
        src[:] = os.urandom(len(src))
        base = addr(src)
        keys = [self.key("blk%d" % b) for b in range(blocks)]
        all_p = [[base + (b * layers + l) * lsz for l in range(layers)] for b in range(blocks)]
        all_s = [[lsz] * layers for _ in range(blocks)]
        # block 1 scattered: its layers interleaved with block 2's
        all_p[1] = [base + ((l % 2) * 2 + 1) * layers * lsz // 2 + l * lsz // 2
                    for l in range(layers)]
        all_s[1] = [lsz // 2] * layers
        res = self.s.batch_put_from_multi_buffers(keys, all_p, all_s)
        self.assertEqual(res, [0] * blocks)
        dst = mmap.mmap(-1, len(src))
        dbase = addr(dst)
        # Read back into a reversed layer order (scattered destinations).
        dall_p = [[dbase + (b * layers + (layers - 1 - l)) * lsz for l in range(layers)]
                  for b in range(blocks)]
        dall_s = [[lsz] * layers for _ in range(blocks)]
        dall_s[1] = [lsz // 2] * layers
        res = self.s.batch_get_into_multi_buffers(keys, dall_p, dall_s, True)
        self.assertEqual(res, [layers * lsz, layers * lsz // 2, layers * lsz, layers * lsz])
        for b in range(blocks):
            for l in range(layers):
                n = all_s[b][l]
                s0 = all_p[b][l] - base
                d0 = dall_p[b][l] - dbase
                self.assertEqual(dst[d0:d0 + n], src[s0:s0 + n], (b, l))
        # Buffers smaller than the value: BUFFER_OVERFLOW; missing key: -704.
        res = self.s.batch_get_into_multi_buffers(
            [keys[0], self.key("none")], [[dbase, dbase + 2 * lsz], [dbase]], [[lsz, lsz], [lsz]])
        self.assertEqual(res, [kvpool.BUFFER_OVERFLOW, kvpool.OBJECT_NOT_FOUND])
        self.assertEqual(self.s.batch_get_into_multi_buffers(keys, dall_p[:1], dall_s[:1]),
                         [kvpool.INVALID_PARAMS] * blocks)

    def test_replicate_config(self):
        c = kvpool.ReplicateConfig()
        c.with_hard_pin = True
        self.assertEqual(self.s.put(self.key("pin"), b"p", c), 0)
        self.assertEqual(self.s.get(self.key("pin")), b"p")
        st = self.s.stat(self.key("pin"))
        self.assertGreater(st["pin_ms"], 10 * 365 * 24 * 3600 * 1000)
        self.assertEqual(st["size"], 1)
        self.assertEqual(len(st["replicas"]), 1)
        self.assertEqual(st["replicas"][0]["tier"], "mem")
        self.assertEqual(self.s.stat(self.key("nothing")), None)
        # Replicas go to distinct segments, as many as exist (here one).
        c2 = kvpool.ReplicateConfig(replica_num=2)
        self.assertEqual(self.s.put(self.key("two"), b"2", c2), 0)
        self.assertEqual(len(self.s.stat(self.key("two"))["replicas"]), 1)
        bad = kvpool.ReplicateConfig(replica_num=9)
        self.assertEqual(self.s.put(self.key("bad"), b"b", bad), kvpool.INVALID_PARAMS)
        self.assertEqual(self.s.is_exist(self.key("bad")), 0)
        # Any object with the attributes works (a real Mooncake config too).

        class Cfg:
            replica_num = 1
            with_hard_pin = False
        self.assertEqual(self.s.batch_put_from([self.key("duck")], [addr(bytearray(3))], [3],
                                               Cfg()), [0])

    # -- errors -----------------------------------------------------------------

    def test_key_errors(self):
        self.assertEqual(self.s.put("", b"x"), kvpool.INVALID_KEY)
        self.assertEqual(self.s.put("a\0b", b"x"), kvpool.INVALID_KEY)
        self.assertEqual(self.s.put("x" * 1025, b"x"), kvpool.INVALID_KEY)
        self.assertEqual(self.s.put("x" * 1024, b"x"), 0)
        self.assertEqual(self.s.is_exist("a\0b"), -1)
        self.assertEqual(self.s.put(self.key("empty"), b""), kvpool.INVALID_PARAMS)
        with self.assertRaises(TypeError):
            self.s.put(123, b"x")
        with self.assertRaises(TypeError):
            self.s.put("k", 123)
        with self.assertRaises(TypeError):
            self.s.batch_is_exist("not-a-list")
        with self.assertRaises(ValueError):
            self.s.get_into("k", -1, 10)

    def test_not_set_up(self):
        s = kvpool.DistributedStore()
        self.assertEqual(s.put("k", b"v"), kvpool.INVALID_PARAMS)
        self.assertEqual(s.get("k"), b"")
        self.assertIsNone(s.get_buffer("k"))
        self.assertEqual(s.is_exist("k"), -1)
        self.assertEqual(s.batch_is_exist(["a", "b"]), [-1, -1])
        self.assertEqual(s.get_size("k"), kvpool.INVALID_PARAMS)
        self.assertEqual(s.batch_get_into(["a"], [1], [1]), [kvpool.INVALID_PARAMS])
        self.assertEqual(s.get_batch(["a"]), [b""])
        self.assertEqual(s.remove_all(), kvpool.INVALID_PARAMS)
        self.assertIsNone(s.stats())
        self.assertEqual(s.close(), 0)
        with self.assertRaises(TypeError):
            kvpool.DistributedStore(1)

    def test_close_then_calls(self):
        s = self.pool.store()
        self.assertEqual(s.put(self.key("c"), b"v"), 0)
        self.assertEqual(s.close(), 0)
        self.assertEqual(s.get(self.key("c")), b"")
        self.assertEqual(s.put(self.key("c2"), b"v"), kvpool.INVALID_PARAMS)
        self.assertEqual(s.close(), 0)
        # ... and it can be set up again.
        self.assertEqual(s.setup(self.pool.config()), 0)
        self.assertEqual(s.get(self.key("c")), b"v")
        s.close()

    def test_fork(self):
        # A store does not cross fork(): in the child it is not set up (its
        # connections and node thread are the parent's), and a new setup works.
        s = self.pool.store()
        self.assertEqual(s.put(self.key("before"), b"b"), 0)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                out = [s.put(self.key("child"), b"c"), s.get(self.key("before")), s.close()]
                out.append(s.setup(self.pool.config()))
                out.append(s.get(self.key("before")))
                s.close()
                os.write(w, repr(out).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            got = f.read()
        os.waitpid(pid, 0)
        self.assertEqual(got, repr([kvpool.INVALID_PARAMS, b"", 0, 0, b"b"]))
        self.assertEqual(s.get(self.key("before")), b"b")
        s.close()

    def test_get_hostname(self):
        # Mooncake's "host:port"; a pure client has no port of its own.
        self.assertEqual(self.s.get_hostname(), "localhost:0")


class ReplicaTest(unittest.TestCase):
    """replica_num is honoured: two node daemons, two replicas."""

    @classmethod
    def setUpClass(cls):
        L.require_module(cls)
        cls.pool = L.Pool(nodes=2, segment_size="64M").start()
        cls.s = cls.pool.store()

    @classmethod
    def tearDownClass(cls):
        cls.s.close()
        cls.pool.stop()

    def test_replica_num(self):
        two = kvpool.ReplicateConfig(replica_num=2)
        self.assertEqual(self.s.put("r/one", b"1"), 0)
        self.assertEqual(self.s.put("r/two", b"2", two), 0)
        buf = bytearray(b"three")
        self.assertEqual(self.s.batch_put_from(["r/three"], [addr(buf)], [5], two), [0])
        self.assertEqual(self.s.put_batch(["r/four"], [b"4"], config=two), 0)
        self.assertEqual(len(self.s.stat("r/one")["replicas"]), 1)
        for k in ("r/two", "r/three", "r/four"):
            reps = self.s.stat(k)["replicas"]
            self.assertEqual(len(reps), 2, k)
            self.assertNotEqual(reps[0]["segment_id"], reps[1]["segment_id"])
        # The extra handle for replica_num=2 sees registered buffers too.
        self.assertEqual(self.s.register_buffer(addr(buf), 5), 0)
        self.assertEqual(self.s.put_from("r/five", addr(buf), 5, two), 0)
        self.assertEqual(len(self.s.stat("r/five")["replicas"]), 2)
        self.assertEqual(self.s.unregister_buffer(addr(buf)), 0)
        # One node gone: the two-replica objects still read.
        self.pool.kill_node(0)
        for k, v in (("r/two", b"2"), ("r/three", b"three"), ("r/five", b"three")):
            self.assertEqual(self.s.get(k), v)


if __name__ == "__main__":
    unittest.main()

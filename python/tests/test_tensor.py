"""The tensor calls on torch CPU tensors (skipped when torch does not import:
Debian's python3-torch, `tools/deps.sh test`): every dtype and shape round
trips through put_tensor/get_tensor and the batch, _into, _from, upsert,
pub, *_with_tp and *_with_parallelism forms; objects have Mooncake's layout
(get_into of a tensor key is _serialize_tensor's bytes); safetensors files
round trip; CUDA tensors when a GPU is there."""
import ctypes
import os
import tempfile
import unittest

import kvp_testlib as L

kvpool = L.kvpool
try:
    import torch
except ImportError:  # pragma: no cover - reported as a skip
    torch = None

META = 304


def dtypes():
    names = ["float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
             "float16", "bfloat16", "uint16", "uint32", "uint64", "float8_e4m3fn",
             "float8_e5m2"]
    return [getattr(torch, n) for n in names if hasattr(torch, n)]


def sample(dtype, shape):
    n = 1
    for d in shape:
        n *= d
    t = (torch.arange(n, dtype=torch.float64) % 13 - 4).reshape(shape)
    if dtype == torch.bool:
        return t > 0
    if str(dtype).startswith("torch.uint"):
        t = t.abs()
    return t.to(dtype)


def same(a, b):
    if a is None or b is None or a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bytes(a.contiguous().reshape(-1).view(torch.uint8).tolist()) == \
        bytes(b.contiguous().reshape(-1).view(torch.uint8).tolist()) if a.numel() else True


class TensorTest(L.PoolTestCase):
    POOL_SEGMENT = "128M"

    @classmethod
    def require(cls):
        if torch is None:
            raise unittest.SkipTest("torch is not importable (apt-get install python3-torch)")

    def test_roundtrip_dtypes_shapes(self):
        for dt in dtypes():
            for shape in ((), (7,), (2, 3, 4), (1, 1, 1, 1, 1, 1, 1, 2), (3, 0)):
                with self.subTest(dtype=dt, shape=shape):
                    t = sample(dt, shape)
                    k = "t/%s/%s" % (dt, "x".join(map(str, shape)))
                    self.assertEqual(self.s.put_tensor(k, t), 0)
                    g = self.s.get_tensor(k)
                    self.assertTrue(same(g, t), (g, t))
                    self.assertEqual(self.s.get_size(k), META + t.numel() * t.element_size())

    def test_layout_is_mooncakes(self):
        t = sample(torch.float32, (4, 5))
        meta, ptr, n, owner = kvpool._serialize_tensor(t)
        self.assertEqual(len(meta), kvpool._tensor_metadata_size())
        self.assertEqual(meta[:4], (0x4D4F4F4E).to_bytes(4, "little"))
        self.assertEqual(self.s.put_tensor("t/layout", t), 0)
        self.assertEqual(self.s.get("t/layout"), meta + ctypes.string_at(ptr, n))
        self.assertTrue(same(kvpool._deserialize_tensor(self.s.get("t/layout")), t))
        with self.assertRaises(ValueError):
            kvpool._deserialize_tensor(b"x" * 400)
        with self.assertRaises(ValueError):
            kvpool._serialize_tensor("not a tensor")

    def test_not_tensors_and_views(self):
        s = self.s
        self.assertEqual(s.put_tensor("t/bad", [1, 2]), kvpool.INVALID_PARAMS)
        self.assertEqual(s.put_tensor("t/bad", torch.zeros(2, dtype=torch.complex64)),
                         kvpool.INVALID_PARAMS)
        self.assertEqual(s.put_tensor("t/bad", torch.zeros([1] * 9)), kvpool.INVALID_PARAMS)
        self.assertIsNone(s.get_tensor("t/missing"))
        self.assertEqual(s.put("t/raw", b"not a tensor object at all" * 20), 0)
        self.assertIsNone(s.get_tensor("t/raw"))
        big = sample(torch.int32, (6, 8))
        self.assertEqual(s.put_tensor("t/strided", big.t()), 0)      # made contiguous
        self.assertTrue(same(s.get_tensor("t/strided"), big.t().contiguous()))

    def test_batch(self):
        s = self.s
        ts = [sample(torch.float16, (i + 1, 3)) for i in range(5)]
        keys = ["tb/%d" % i for i in range(5)]
        self.assertEqual(s.batch_put_tensor(keys, ts), [0] * 5)
        got = s.batch_get_tensor(keys + ["tb/none"])
        self.assertTrue(all(same(g, t) for g, t in zip(got, ts)))
        self.assertIsNone(got[-1])
        self.assertEqual(s.batch_put_tensor(keys[:2], ts[:1]), [kvpool.INVALID_PARAMS] * 2)
        c = kvpool.ReplicateConfig(with_hard_pin=True)
        self.assertEqual(s.batch_pub_tensor(["tb/p1", "tb/p2"], ts[:2], c), [0, 0])
        self.assertGreater(s.stat("tb/p1")["pin_ms"], 0)
        self.assertEqual(s.pub_tensor("tb/p3", ts[0], c), 0)

    def test_upsert(self):
        s = self.s
        a, b = sample(torch.int64, (3,)), sample(torch.float32, (2, 2))
        self.assertEqual(s.put_tensor("tu/k", a), 0)
        self.assertEqual(s.put_tensor("tu/k", b), 0)
        self.assertTrue(same(s.get_tensor("tu/k"), a))
        self.assertEqual(s.upsert_tensor("tu/k", b), 0)
        self.assertTrue(same(s.get_tensor("tu/k"), b))
        self.assertEqual(s.batch_upsert_tensor(["tu/k", "tu/j"], [a, b]), [0, 0])
        self.assertTrue(same(s.get_tensor("tu/k"), a))
        self.assertEqual(s.upsert_pub_tensor("tu/k", b, kvpool.ReplicateConfig()), 0)
        self.assertEqual(s.batch_upsert_pub_tensor(["tu/j"], [a]), [0])
        self.assertTrue(same(s.get_tensor("tu/j"), a))

    def test_into_and_from(self):
        s = self.s
        t = sample(torch.bfloat16, (8, 16))
        n = META + t.numel() * 2
        self.assertEqual(s.put_tensor("ti/k", t), 0)
        buf = torch.zeros(n + 100, dtype=torch.uint8)
        g = s.get_tensor_into("ti/k", buf.data_ptr(), buf.numel())
        self.assertTrue(same(g, t))
        self.assertEqual(g.data_ptr(), buf.data_ptr() + META)   # a view of the buffer
        self.assertIsNone(s.get_tensor_into("ti/k", buf.data_ptr(), 100))
        self.assertIsNone(s.get_tensor_into("ti/k", 0, n))
        self.assertEqual(s.put_tensor_from("ti/f", buf.data_ptr(), n), 0)
        self.assertTrue(same(s.get_tensor("ti/f"), t))
        self.assertEqual(s.put_tensor_from("ti/f2", buf.data_ptr() + 1, n),
                         kvpool.INVALID_PARAMS)
        self.assertEqual(s.put_tensor_from("ti/f2", buf.data_ptr(), 100), kvpool.INVALID_PARAMS)
        self.assertEqual(s.upsert_tensor_from("ti/k", buf.data_ptr(), n), 0)
        bufs = [torch.zeros(n, dtype=torch.uint8) for _ in range(2)]
        self.assertEqual(s.batch_put_tensor_from(["ti/b1", "ti/b2"], [buf.data_ptr()] * 2,
                                                 [n, n]), [0, 0])
        self.assertEqual(s.batch_upsert_tensor_from(["ti/b1"], [buf.data_ptr()], [n]), [0])
        got = s.batch_get_tensor_into(["ti/b1", "ti/none"], [b.data_ptr() for b in bufs],
                                      [n, n])
        self.assertTrue(same(got[0], t))
        self.assertIsNone(got[1])
        self.assertEqual(s.batch_get_tensor_into(["ti/b1"], [0], [n]), [kvpool.INVALID_PARAMS])
        dst = torch.zeros_like(t)
        self.assertEqual(s.get_tensor_into_cuda("ti/k", dst), t.numel() * 2)
        self.assertTrue(same(dst, t))
        self.assertEqual(s.batch_get_tensor_into_cuda(["ti/k", "ti/none"],
                                                      [torch.zeros(2), dst]),
                         [kvpool.INVALID_PARAMS, kvpool.INVALID_PARAMS])

    def test_tensor_parallel(self):
        s = self.s
        t = sample(torch.float32, (8, 6))
        self.assertEqual(s.put_tensor_with_tp("tp/k", t, tp_size=2, split_dim=1), 0)
        for r in range(2):
            self.assertTrue(same(s.get_tensor_with_tp("tp/k", r, 2), t[:, 3 * r:3 * r + 3]))
            self.assertTrue(same(s.get_tensor("tp/k_tp_%d" % r), t[:, 3 * r:3 * r + 3]))
        self.assertEqual(s.put_tensor_with_tp("tp/odd", t, tp_size=4, split_dim=1),
                         kvpool.INVALID_PARAMS)           # uniform shards only
        self.assertEqual(s.put_tensor_with_tp("tp/one", t), 0)
        self.assertTrue(same(s.get_tensor_with_tp("tp/one"), t))
        self.assertEqual(s.batch_put_tensor_with_tp(["tp/b1", "tp/b2"], [t, t * 2], 0, 4, 0),
                         [0, 0])
        got = s.batch_get_tensor_with_tp(["tp/b1", "tp/b2"], tp_rank=3, tp_size=4)
        self.assertTrue(same(got[1], (t * 2)[6:]))
        self.assertEqual(s.pub_tensor_with_tp("tp/p", t, kvpool.ReplicateConfig(), 0, 2, 0), 0)
        self.assertEqual(s.batch_pub_tensor_with_tp(["tp/p2"], [t], None, 0, 2, 0), [0])
        n = META + 8 * 6 * 4
        buf = torch.zeros(n, dtype=torch.uint8)
        g = s.get_tensor_into("tp/one", buf.data_ptr(), n)
        self.assertEqual(s.put_tensor_with_tp_from("tp/f", buf.data_ptr(), n, 0, 2, 0), 0)
        self.assertTrue(same(s.get_tensor("tp/f_tp_1"), g[4:]))
        self.assertEqual(s.batch_put_tensor_with_tp_from(["tp/bf"], [buf.data_ptr()], [n],
                                                         0, 2, 1), [0])
        shard = torch.zeros(META + 24 * 4, dtype=torch.uint8)
        g = s.get_tensor_with_tp_into("tp/bf", shard.data_ptr(), shard.numel(), 1, 2)
        self.assertTrue(same(g, t[:, 3:]))
        got = s.batch_get_tensor_with_tp_into(["tp/bf"], [shard.data_ptr()], [shard.numel()],
                                              0, 2)
        self.assertTrue(same(got[0], t[:, :3]))

    def test_parallelism(self):
        s = self.s
        P = kvpool.TensorParallelism
        A = kvpool.ParallelAxis
        t = sample(torch.int32, (8, 4))
        tp2 = P([A("tp", 0, 2, 0)])
        self.assertEqual(s.put_tensor_with_parallelism("par/k", t, tp2), 0)
        full = s.get_tensor_with_parallelism("par/k", kvpool.ReadTarget("full", tp2))
        self.assertTrue(same(full, t))
        shard = s.get_tensor_with_parallelism("par/k",
                                              kvpool.ReadTarget("shard", P([A("tp", 1, 2, 0)])))
        self.assertTrue(same(shard, t[4:]))
        # A different split than stored: cut from the gathered tensor.
        shard = s.get_tensor_with_parallelism("par/k",
                                              kvpool.ReadTarget("shard", P([A("tp", 3, 4, 0)])))
        self.assertTrue(same(shard, t[6:]))
        # No layout: the full object.
        self.assertEqual(s.put_tensor_with_parallelism("par/plain", t), 0)
        self.assertTrue(same(s.get_tensor_with_parallelism("par/plain"), t))
        # Two axes: dp replicated, tp split; shard keys carry both.
        dp_tp = P([A("tp", 0, 2, 1), A("dp", 1, 2, None)])
        self.assertEqual(s.put_tensor_with_parallelism("par/2d", t, dp_tp), 0)
        self.assertEqual(s.is_exist("par/2d__dp_1of2__tp_1of2_sd1"), 1)
        got = s.get_tensor_with_parallelism("par/2d", kvpool.ReadTarget(
            "shard", P([A("dp", 1, 2, None), A("tp", 1, 2, 1)])))
        self.assertTrue(same(got, t[:, 2:]))
        # Writer partitions: each writer stores its piece; full gathers them.
        for r in range(2):
            self.assertEqual(s.put_tensor_with_parallelism(
                "par/w", t[4 * r:4 * r + 4], writer_partition={"rank": r, "size": 2,
                                                               "split_dim": 0}), 0)
        self.assertTrue(same(s.get_tensor_with_parallelism("par/w",
                                                           kvpool.ReadTarget("full", tp2)), t))
        self.assertEqual(s.put_tensor_with_parallelism("par/x", t, tp2,
                                                       writer_partition=(0, 2, 0)),
                         kvpool.INVALID_PARAMS)
        self.assertEqual(s.put_tensor_with_parallelism("par/x", t, P([A("zz", 0, 1, 0)])),
                         kvpool.INVALID_PARAMS)
        # Batch, upsert and _from forms.
        self.assertEqual(s.batch_put_tensor_with_parallelism(["par/b1", "par/b2"], [t, t],
                                                             [tp2, None]), [0, 0])
        self.assertEqual(s.upsert_tensor_with_parallelism("par/b2", t * 3), 0)
        self.assertTrue(same(s.get_tensor("par/b2"), t * 3))
        self.assertEqual(s.batch_upsert_tensor_with_parallelism(["par/b2"], [t]), [0])
        n = META + t.numel() * 4
        buf = torch.zeros(n, dtype=torch.uint8)
        self.assertIsNotNone(s.get_tensor_into("par/b2", buf.data_ptr(), n))
        self.assertEqual(s.put_tensor_with_parallelism_from("par/f", buf.data_ptr(), n, tp2), 0)
        self.assertEqual(s.upsert_tensor_with_parallelism_from("par/f", buf.data_ptr(), n), 0)
        self.assertEqual(s.batch_put_tensor_with_parallelism_from(["par/f2"], [buf.data_ptr()],
                                                                  [n]), [0])
        self.assertEqual(s.batch_upsert_tensor_with_parallelism_from(
            ["par/f2"], [buf.data_ptr()], [n], [tp2]), [0])
        out = torch.zeros(META + 16 * 4, dtype=torch.uint8)
        g = s.get_tensor_with_parallelism_into("par/k", out.data_ptr(), out.numel(),
                                               kvpool.ReadTarget("shard", tp2))
        self.assertTrue(same(g, t[:4]))
        got = s.batch_get_tensor_with_parallelism("par/k par/plain".split(),
                                                  [kvpool.ReadTarget("full", tp2), None])
        self.assertTrue(same(got[0], t) and same(got[1], t))
        got = s.batch_get_tensor_with_parallelism_into(
            ["par/k"], [out.data_ptr()], [out.numel()], [kvpool.ReadTarget("shard", tp2)])
        self.assertTrue(same(got[0], t[:4]))

    def test_safetensors(self):
        s = self.s
        t = sample(torch.float16, (3, 5))
        self.assertEqual(s.put_tensor("st/k", t), 0)
        with tempfile.TemporaryDirectory() as d:
            f = os.path.join(d, "k.safetensors")
            self.assertEqual(s.save_tensor_to_safetensor("st/k", f), 0)
            self.assertEqual(s.save_tensor_to_safetensor("st/none", f), kvpool.FILE_NOT_FOUND)
            g = s.load_tensor_from_safetensor("st/copy", f)
            self.assertTrue(same(g, t))
            self.assertTrue(same(s.get_tensor("st/copy"), t))
            self.assertIsNone(s.load_tensor_from_safetensor("st/x", os.path.join(d, "none")))
            try:
                from safetensors.torch import load_file
            except ImportError:
                return
            self.assertTrue(same(load_file(f)["st/k"], t))


class CudaTensorTest(L.PoolTestCase):
    """Device tensors: put_tensor of a CUDA tensor and get_tensor_into_cuda
    move the bytes through the CUDA runtime."""

    POOL_SEGMENT = "128M"

    @classmethod
    def require(cls):
        if torch is None or not torch.cuda.is_available():
            raise unittest.SkipTest("no CUDA device")

    def test_device_roundtrip(self):
        s = self.s
        t = torch.arange(4096, dtype=torch.float32, device="cuda").reshape(64, 64)
        self.assertEqual(s.put_tensor("cuda/k", t), 0)
        g = s.get_tensor("cuda/k")
        self.assertTrue(torch.equal(g, t.cpu()))
        dst = torch.zeros_like(t)
        self.assertEqual(s.get_tensor_into_cuda("cuda/k", dst), 4096 * 4)
        self.assertTrue(torch.equal(dst, t))
        # Into a device buffer: the object lands there, the tensor views it.
        buf = torch.zeros(META + 4096 * 4, dtype=torch.uint8, device="cuda")
        g = s.get_tensor_into("cuda/k", buf.data_ptr(), buf.numel())
        self.assertEqual(g.device.type, "cuda")
        self.assertEqual(g.data_ptr(), buf.data_ptr() + META)
        self.assertTrue(torch.equal(g, t))
        self.assertEqual(s.put_tensor_from("cuda/f", buf.data_ptr(), buf.numel()), 0)
        self.assertTrue(torch.equal(s.get_tensor("cuda/f"), t.cpu()))
        self.assertEqual(s.put_tensor_with_tp("cuda/tp", t, tp_size=2, split_dim=0), 0)
        self.assertTrue(torch.equal(s.get_tensor_with_tp("cuda/tp", 1, 2), t[32:].cpu()))


if __name__ == "__main__":
    unittest.main()

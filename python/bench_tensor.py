#!/usr/bin/env python3
"""bench_tensor.py — the tensor calls against the zero-copy calls they sit on,
same bytes, same pool, same run: batch_put_tensor of N torch tensors of SIZE
bytes (default 64 x 1 MiB) vs batch_put_from of the same memory (registered),
and batch_get_tensor vs batch_get_into a registered buffer. The pairs
alternate for --rounds rounds of --iters calls; the medians are compared
(target: the tensor call within 0.9x of its reference). A private pool
(kvpool-master + one kvpool-node on free loopback ports) is started and
stopped. Needs torch (Debian's python3-torch).

  PYTHONPATH=build/python python3 python/bench_tensor.py [--protocol auto|tcp]
      [--count 64] [--size 1048576] [--rounds 5] [--iters 5] [--build DIR]
Exit 0 when it ran (a missed target is reported, not a failure), 77 without
torch, 1 when a call or a check failed.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# python/ holds the package's sources (python/kvpool, no extension): the
# built package on PYTHONPATH must be the one imported.
if sys.path and os.path.abspath(sys.path[0] or ".") == HERE:
    del sys.path[0]
sys.path.insert(0, os.path.join(HERE, "tests"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=64)
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--protocol", default="auto", help="kvpool client.protocol (auto, tcp)")
    ap.add_argument("--build", default=os.environ.get("KVP_BUILD",
                                                      os.path.join(HERE, "..", "build")))
    a = ap.parse_args()
    os.environ["KVP_BUILD"] = os.path.abspath(a.build)
    try:
        import torch
    except ImportError:
        print("bench_tensor: torch is not importable (apt-get install python3-torch)")
        return 77
    import kvp_testlib as L
    if L.kvpool is None:
        sys.exit("bench_tensor: cannot import kvpool (" + L.IMPORT_ERROR + ")")

    n, size = a.count, a.size
    seg = max(256 << 20, 4 * n * (size + 4096) + (64 << 20))
    pool = L.Pool(nodes=1, segment_size=str(seg)).start()
    try:
        s = pool.store(**{"client.protocol": a.protocol})
        src = torch.randint(0, 256, (n * size,), dtype=torch.uint8)
        dst = torch.empty_like(src)
        sb, db = src.data_ptr(), dst.data_ptr()
        if s.register_buffer(sb, n * size) or s.register_buffer(db, n * size):
            sys.exit("bench_tensor: register_buffer failed")
        tensors = [src[i * size:(i + 1) * size] for i in range(n)]
        sptrs = [sb + i * size for i in range(n)]
        dptrs = [db + i * size for i in range(n)]
        sizes = [size] * n
        seq = [0]

        def fresh():
            seq[0] += 1
            return ["bench-tensor/%d/%d/%d" % (os.getpid(), seq[0], i) for i in range(n)]

        def put_raw():
            keys = fresh()
            t = time.perf_counter()
            r = s.batch_put_from(keys, sptrs, sizes)
            t = time.perf_counter() - t
            if r != [0] * n:
                sys.exit("bench_tensor: batch_put_from: %s" % r[:4])
            s.batch_remove(keys, True)
            return t

        def put_tensor():
            keys = fresh()
            t = time.perf_counter()
            r = s.batch_put_tensor(keys, tensors)
            t = time.perf_counter() - t
            if r != [0] * n:
                sys.exit("bench_tensor: batch_put_tensor: %s" % r[:4])
            s.batch_remove(keys, True)
            return t

        # The keys read are pinned: the puts' churn must not evict them.
        pin = L.kvpool.ReplicateConfig(with_hard_pin=True)
        raw_keys, t_keys = fresh(), fresh()
        if s.batch_put_from(raw_keys, sptrs, sizes, pin) != [0] * n or \
                s.batch_pub_tensor(t_keys, tensors, pin) != [0] * n:
            sys.exit("bench_tensor: the read keys could not be stored")

        def get_raw():
            t = time.perf_counter()
            r = s.batch_get_into(raw_keys, dptrs, sizes)
            t = time.perf_counter() - t
            if r != sizes:
                sys.exit("bench_tensor: batch_get_into: %s" % r[:4])
            return t

        def get_tensor():
            t = time.perf_counter()
            r = s.batch_get_tensor(t_keys)
            t = time.perf_counter() - t
            if any(x is None or x.numel() != size for x in r):
                sys.exit("bench_tensor: batch_get_tensor returned a missing tensor")
            return t

        # The bytes are right before anything is timed.
        got = s.batch_get_tensor(t_keys)
        if not all(torch.equal(g, t) for g, t in zip(got, tensors)):
            sys.exit("bench_tensor: get_tensor returned other bytes")
        del got
        get_raw()
        if not torch.equal(dst, src):
            sys.exit("bench_tensor: batch_get_into returned other bytes")

        times = {k: [] for k in ("put_raw", "put_tensor", "get_raw", "get_tensor")}
        fns = {"put_raw": put_raw, "put_tensor": put_tensor, "get_raw": get_raw,
               "get_tensor": get_tensor}
        for _ in range(a.rounds):
            for name in ("put_raw", "put_tensor", "get_raw", "get_tensor"):
                times[name].extend(fns[name]() for _ in range(a.iters))
        med = {k: statistics.median(v) for k, v in times.items()}
        gbs = {k: n * size / v / 1e9 for k, v in med.items()}
        print("%d x %d bytes, protocol %s, %d rounds x %d calls, medians"
              % (n, size, a.protocol, a.rounds, a.iters))
        for what, t, ref in (("put", "put_tensor", "put_raw"), ("get", "get_tensor", "get_raw")):
            ratio = med[ref] / med[t]
            print("%-3s %-17s %6.2f GB/s   %-15s %6.2f GB/s   ratio %.2f (target >= 0.9%s)"
                  % (what, "batch_%s" % t.replace("_tensor", "_tensor"), gbs[t],
                     "batch_%s" % {"put_raw": "put_from", "get_raw": "get_into"}[ref],
                     gbs[ref], ratio, "" if ratio >= 0.9 else ", missed"))
        s.close()
    finally:
        pool.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""bench_batch.py — batch_get_into of N x SIZE blocks (default 64 x 1 MiB)
from Python vs the C client on the same path, same keys, same machine, in the
same run: prints both throughputs and the ratio python/C (target >= 0.9).

The C side is build/python/bench_batch_c (kvp_batch_get_into in a loop). The
two alternate for --rounds rounds of --iters calls each and the medians are
compared, so a noisy neighbour hits both. Without --config a private pool
(kvpool-master + one kvpool-node on free loopback ports) is started and
stopped.

  PYTHONPATH=build/python python3 python/bench_batch.py [--protocol auto|tcp]
      [--count 64] [--size 1048576] [--rounds 5] [--iters 10]
      [--config FILE] [--build DIR]
"""
import argparse
import ctypes
import mmap
import os
import statistics
import subprocess
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
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--protocol", default="auto", help="kvpool client.protocol (auto, tcp)")
    ap.add_argument("--config", help="INI of an existing pool (default: start a private one)")
    ap.add_argument("--build", default=os.environ.get("KVP_BUILD",
                                                      os.path.join(HERE, "..", "build")))
    a = ap.parse_args()
    os.environ["KVP_BUILD"] = os.path.abspath(a.build)

    import kvp_testlib as L   # after KVP_BUILD is set
    kvpool = L.kvpool
    if kvpool is None:
        sys.exit("bench_batch: cannot import kvpool (" + L.IMPORT_ERROR + "); "
                 "run make python and set PYTHONPATH=build/python")
    cbench = os.path.join(L.BUILD, "python", "bench_batch_c")
    if not os.access(cbench, os.X_OK):
        sys.exit("bench_batch: %s is not built (make python)" % cbench)

    pool = None
    if a.config:
        conf = a.config
    else:
        seg = max(256 << 20, 2 * a.count * a.size + (64 << 20))
        pool = L.Pool(nodes=1, segment_size=str(seg)).start()
        conf = pool.conf
    try:
        overrides = {"client.protocol": a.protocol, "log.level": "warning"}
        store = kvpool.DistributedStore()
        rc = store.setup(dict(config_file=conf, **overrides))
        if rc != 0:
            sys.exit("bench_batch: setup: %d %s" % (rc, store.last_error()))
        n, size = a.count, a.size
        prefix = "bench-batch/%d/" % os.getpid()
        keys = ["%s%d" % (prefix, i) for i in range(n)]
        src = mmap.mmap(-1, n * size)
        src[:] = os.urandom(n * size)
        dst = mmap.mmap(-1, n * size)
        sbase = ctypes.addressof(ctypes.c_char.from_buffer(src))
        dbase = ctypes.addressof(ctypes.c_char.from_buffer(dst))
        store.register_buffer(sbase, n * size)
        store.register_buffer(dbase, n * size)
        ptrs = [dbase + i * size for i in range(n)]
        sizes = [size] * n
        res = store.batch_put_from(keys, [sbase + i * size for i in range(n)], sizes)
        if any(r != 0 for r in res):
            sys.exit("bench_batch: batch_put_from: %s" % res)
        res = store.batch_get_into(keys, ptrs, sizes)
        if res != sizes or dst[:] != src[:]:
            sys.exit("bench_batch: read back differs: %s" % res[:4])

        cmd = [cbench, "-c", conf] + ["-o%s=%s" % kv for kv in overrides.items()] + \
              [prefix, str(n), str(size), str(a.iters)]
        py_t, c_t = [], []
        for _ in range(a.rounds):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit("bench_batch: %s: %s" % (cbench, r.stderr or r.stdout))
            c_t.append(float(r.stdout.split()[0].split("=")[1]))
            t = []
            for _ in range(a.iters):
                t0 = time.perf_counter()
                res = store.batch_get_into(keys, ptrs, sizes)
                t.append(time.perf_counter() - t0)
                if res != sizes:
                    sys.exit("bench_batch: batch_get_into: %s" % res[:4])
            py_t.append(statistics.median(t))
        st = store.stats()
        path = "local" if st["tcp_bytes"] == 0 else "tcp"
        pyg = n * size / statistics.median(py_t) / 1e9
        cg = n * size / statistics.median(c_t) / 1e9
        print("batch_get_into %d x %d B, %s path, %d rounds x %d calls:" %
              (n, size, path, a.rounds, a.iters))
        print("  python  %.2f GB/s  (median %.3f ms per call)" % (pyg, statistics.median(py_t) * 1e3))
        print("  C       %.2f GB/s  (median %.3f ms per call)" % (cg, statistics.median(c_t) * 1e3))
        print("  ratio python/C = %.2f (target >= 0.9)" % (pyg / cg))
        store.batch_remove(keys, force=True)
        store.close()
    finally:
        if pool:
            pool.stop()


if __name__ == "__main__":
    main()

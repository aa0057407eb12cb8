#!/usr/bin/env python3
"""trace_mooncake.py — `kvpool replay` through Mooncake's Python API: the
same per-request steps an engine's connector makes with
MooncakeDistributedStore, against a running pool:

  batch_is_exist(keys)                      which blocks of the request are there
  batch_get_into(run, ptrs, sizes)          the leading run, into a registered
                                            buffer; every value checked
  batch_put_from(rest, ptrs, sizes, pred=)  the rest, in chain order; pred= names
                                            the last block read (when the module
                                            takes it: detected once)

Values are those of `kvpool replay` (src/cli/replay.c): a 16-byte header
(hash id, mix64(id + mix64(seed))) and a window of one seeded pattern, so a
value of another block or another run is always caught. Prints one JSON
line: requests, token hit rate, hit tokens, puts, failed puts, wrong values,
vanished blocks, req/s, GB/s, p50/p99 per request (time inside the calls).

  PYTHONPATH=build/python python3 tests/bench/trace_mooncake.py --config pool.ini
      [--block-bytes 64K] [--tokens-per-block 512] [--limit N] [--key-prefix P]
      [--seed 1] [--protocol auto] [--keep] TRACE

Exit 0 when every value was right and no put failed, 1 otherwise, 2 on a
usage error or an unreadable trace.
"""
import argparse
import ctypes
import gzip
import json
import math
import mmap
import os
import re
import socket
import sys
import time

M64 = (1 << 64) - 1
SLACK = 64 << 10
HDR = 16
BUF_MAX = 64 << 20
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705


def mix64(x):
    """splitmix64's finalizer, as src/cli/replay.c."""
    x &= M64
    x ^= x >> 30
    x = (x * 0xbf58476d1ce4e5b9) & M64
    x ^= x >> 27
    x = (x * 0x94d049bb133111eb) & M64
    return x ^ (x >> 31)


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("B")
    if s and s[-1] in mult:
        return int(s[:-1]) * mult[s[-1]]
    return int(s)


def load_trace(path, tpb, limit):
    """[(input_length, [hash ids])], checked as the tool checks them."""
    opener = gzip.open if path.endswith(".gz") else open
    reqs = []
    with opener(path, "rt") as f:
        for no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                ids, n = r["hash_ids"], int(r["input_length"])
            except (ValueError, KeyError, TypeError) as e:
                bad("%s:%d: %s" % (path, no, e))
            if not isinstance(ids, list) or any(type(h) is not int for h in ids):
                bad("%s:%d: hash_ids: not a list of integers" % (path, no))
            if (not ids and n) or (ids and not (len(ids) - 1) * tpb < n <= len(ids) * tpb):
                bad("%s:%d: input_length %d does not fit %d blocks of %d tokens"
                    % (path, no, n, len(ids), tpb))
            reqs.append((n, ids))
            if limit and len(reqs) >= limit:
                break
    if not reqs:
        bad("%s: no requests in the trace" % path)
    return reqs


def bad(msg):
    print("trace_mooncake: " + msg, file=sys.stderr)
    sys.exit(2)


class Values:
    """The value of block h: header + a window of the pattern."""

    def __init__(self, seed, block):
        self.block = block
        self.seedmix = mix64(seed)
        n = (block + SLACK + 7) // 8
        x = mix64(seed) | 1
        words = []
        for _ in range(n):
            x ^= (x << 13) & M64
            x ^= x >> 7
            x ^= (x << 17) & M64
            words.append(x)
        self.pattern = b"".join(w.to_bytes(8, "little") for w in words)

    def header(self, h):
        return ((h & M64).to_bytes(8, "little") +
                mix64((h + self.seedmix) & M64).to_bytes(8, "little"))

    def window(self, h):
        return (mix64((h & M64) ^ self.seedmix) % (SLACK // 8)) * 8

    def fill(self, buf, off, h):
        w = self.window(h)
        buf[off:off + HDR] = self.header(h)
        buf[off + HDR:off + self.block] = self.pattern[w + HDR:w + self.block]

    def check(self, buf, off, h):
        w = self.window(h)
        mv = memoryview(buf)
        return (mv[off:off + HDR] == self.header(h) and
                mv[off + HDR:off + self.block] == self.pattern[w + HDR:w + self.block])


def pctl(v, p):
    if not v:
        return 0.0
    i = max(0, min(len(v) - 1, math.ceil(p * len(v)) - 1))
    return v[i]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--config", required=True, help="INI of the pool")
    ap.add_argument("--block-bytes", default="64K")
    ap.add_argument("--tokens-per-block", type=int, default=512)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--key-prefix",
                    default="replay-py-%s-%d-" % (socket.gethostname(), os.getpid()))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--protocol", default="auto")
    ap.add_argument("--keep", action="store_true", help="leave the keys in the pool")
    a = ap.parse_args()
    try:
        block = parse_size(a.block_bytes)
    except ValueError:
        ap.error("--block-bytes: a size such as 64K")
    if block < 64 or a.tokens_per_block < 1:
        ap.error("--block-bytes: at least 64; --tokens-per-block: at least 1")

    try:
        import kvpool
    except ImportError as e:
        sys.exit("trace_mooncake: cannot import kvpool (%s); make python and "
                 "PYTHONPATH=build/python" % e)
    reqs = load_trace(a.trace, a.tokens_per_block, a.limit)
    vals = Values(a.seed, block)
    store = kvpool.MooncakeDistributedStore()
    rc = store.setup(dict(config_file=a.config, **{"client.protocol": a.protocol,
                                                    "log.level": "warning"}))
    if rc != 0:
        sys.exit("trace_mooncake: setup: %d %s" % (rc, store.last_error()))

    batch = max(1, min(max(len(ids) for _, ids in reqs), BUF_MAX // block))
    gmm, pmm = mmap.mmap(-1, batch * block), mmap.mmap(-1, batch * block)
    gbase = ctypes.addressof(ctypes.c_char.from_buffer(gmm))
    pbase = ctypes.addressof(ctypes.c_char.from_buffer(pmm))
    store.register_buffer(gbase, batch * block)
    store.register_buffer(pbase, batch * block)

    c = dict(requests=0, input_tokens=0, hit_tokens=0, lookup_blocks=0, hit_blocks=0, puts=0,
             puts_existing=0, failed_puts=0, wrong_values=0, vanished=0, get_errors=0,
             exists_errors=0, bytes_read=0, bytes_written=0)
    pred_ok = None      # batch_put_from takes pred=: unknown yet
    lat, reported = [], 0
    t0 = time.monotonic()
    for n_tokens, ids in reqs:
        keys = ["%s%d" % (a.key_prefix, h) for h in ids]
        tok = [a.tokens_per_block] * len(ids)
        if ids:
            tok[-1] = n_tokens - a.tokens_per_block * (len(ids) - 1)
        busy = 0.0
        lead = 0
        if keys:
            s = time.perf_counter()
            ex = store.batch_is_exist(keys)
            busy += time.perf_counter() - s
            c["exists_errors"] += sum(1 for e in ex if e < 0)
            while lead < len(keys) and ex[lead] == 1:
                lead += 1
        hit = h_blocks = 0
        broken = False
        for j in range(0, lead, batch):
            if broken:
                break
            m = min(batch, lead - j)
            s = time.perf_counter()
            res = store.batch_get_into(keys[j:j + m], [gbase + i * block for i in range(m)],
                                       [block] * m)
            busy += time.perf_counter() - s
            for i, r in enumerate(res):
                if r > 0:
                    c["bytes_read"] += r
                if broken:
                    continue
                if r == OBJECT_NOT_FOUND:
                    c["vanished"] += 1
                    broken = True
                elif r < 0:
                    c["get_errors"] += 1
                    broken = True
                elif r != block or not vals.check(gmm, i * block, ids[j + i]):
                    c["wrong_values"] += 1
                    if reported < 10:
                        print("trace_mooncake: %s: WRONG VALUE returned by get" % keys[j + i],
                              file=sys.stderr)
                        reported += 1
                    broken = True
                else:
                    h_blocks += 1
                    hit += tok[j + i]
        for j in range(h_blocks, len(keys), batch):
            m = min(batch, len(keys) - j)
            for i in range(m):
                vals.fill(pmm, i * block, ids[j + i])
            args = (keys[j:j + m], [pbase + i * block for i in range(m)], [block] * m)
            pred = keys[j - 1] if j > 0 else None
            s = time.perf_counter()
            if pred is not None and pred_ok is not False:
                try:
                    res = store.batch_put_from(*args, pred=pred)
                    pred_ok = True
                except TypeError:
                    pred_ok = False
                    res = store.batch_put_from(*args)
            else:
                res = store.batch_put_from(*args)
            busy += time.perf_counter() - s
            for i, r in enumerate(res):
                if r == 0:
                    c["puts"] += 1
                    c["bytes_written"] += block
                elif r == OBJECT_ALREADY_EXISTS:
                    c["puts_existing"] += 1
                else:
                    c["failed_puts"] += 1
                    if reported < 10:
                        print("trace_mooncake: %s: put failed: %d" % (keys[j + i], r),
                              file=sys.stderr)
                        reported += 1
        c["requests"] += 1
        c["input_tokens"] += n_tokens
        c["hit_tokens"] += hit
        c["hit_blocks"] += h_blocks
        c["lookup_blocks"] += len(keys)
        lat.append(busy)
    secs = time.monotonic() - t0

    if not a.keep:
        store.remove_by_regex("^" + re.escape(a.key_prefix), True)
    store.unregister_buffer(gbase)
    store.unregister_buffer(pbase)
    store.close()

    lat.sort()
    out = dict(api="mooncake", trace=a.trace, block_bytes=block,
               tokens_per_block=a.tokens_per_block, key_prefix=a.key_prefix,
               pred=bool(pred_ok), seconds=round(secs, 3), **c)
    out["hit_rate"] = round(c["hit_tokens"] / c["input_tokens"], 6) if c["input_tokens"] else 0.0
    out["requests_per_s"] = round(c["requests"] / secs, 1) if secs > 0 else 0.0
    out["gb_per_s"] = round((c["bytes_read"] + c["bytes_written"]) / secs / 1e9, 4) if secs else 0
    out["lat_ms"] = dict(p50=round(pctl(lat, 0.5) * 1e3, 3), p99=round(pctl(lat, 0.99) * 1e3, 3),
                         mean=round(sum(lat) / len(lat) * 1e3, 3) if lat else 0.0)
    print(json.dumps(out))
    bad = c["wrong_values"] or c["failed_puts"] or c["get_errors"] or c["exists_errors"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""kv_events_subscriber.py — reads kvpool-master's KV events (vLLM's format,
docs/master.md "KV events") with pyzmq and msgpack (Debian: python3-zmq
python3-msgpack).

  kv_events_subscriber.py sub ENDPOINT [--topic T] [--out FILE]
      subscribe; one JSON line per batch: {"seq": N, "batch": ...}
  kv_events_subscriber.py replay ENDPOINT [--from SEQ] [--out FILE]
      ask the replay (ROUTER) socket for every kept batch from SEQ on,
      print them the same way, stop at the end marker (seq -1)

A decoded batch is the msgpack value as it is: a map {"ts", "events",
"data_parallel_rank"} (or, with kv_events_legacy_compat, an array); block
hashes are integers (bytes are shown as hex).
"""
import argparse
import json
import signal
import sys

import msgpack
import zmq


def plain(v):
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {plain(k): plain(x) for k, x in v.items()}
    return v


def emit(out, seq, payload):
    batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    out.write(json.dumps({"seq": seq, "batch": plain(batch)}) + "\n")
    out.flush()


def sub(a, out):
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.SUBSCRIBE, a.topic.encode())
    s.connect(a.endpoint)
    while True:
        topic, seq, payload = s.recv_multipart()
        emit(out, int.from_bytes(seq, "big", signed=True), payload)


def replay(a, out):
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)  # a DEALER takes the many replies; add the empty frame
    s.connect(a.endpoint)
    s.send_multipart([b"", a.start.to_bytes(8, "big")])
    while True:
        if not s.poll(a.timeout * 1000):
            sys.exit("replay: no answer from %s" % a.endpoint)
        frames = s.recv_multipart()
        if len(frames) != 3 or frames[0] != b"":
            sys.exit("replay: unexpected frames %r" % frames)
        seq = int.from_bytes(frames[1], "big", signed=True)
        if seq == -1:
            return
        emit(out, seq, frames[2])


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["sub", "replay"])
    p.add_argument("endpoint")
    p.add_argument("--topic", default="")
    p.add_argument("--from", dest="start", type=int, default=0)
    p.add_argument("--timeout", type=int, default=10, help="replay: seconds to wait")
    p.add_argument("--out", default="-")
    a = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    out = sys.stdout if a.out == "-" else open(a.out, "w")
    (sub if a.mode == "sub" else replay)(a, out)


if __name__ == "__main__":
    main()

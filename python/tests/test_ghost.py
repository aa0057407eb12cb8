"""No ghost objects. A process with an embedded node puts keys on its own
segment; when its store closes (or the process exits cleanly) the segment
leaves the master before close() returns, so another client sees the keys
gone at once — never is_exist 1 with get b"". A crashed process's segment
goes within a few seconds (the node stops heartbeating), not client_ttl;
meanwhile a put of such a key either fails or is readable afterwards."""
import os
import signal
import subprocess
import sys
import time
import unittest

import kvp_testlib as L

kvpool = L.kvpool
N = 16
CRASH_BOUND_S = 6.0     # docs/python.md: a crashed embedded node's objects go within this

WRITER = r"""
import sys, kvpool
s = kvpool.MooncakeDistributedStore()
assert s.setup(%r) == 0, s.last_error()
cfg = kvpool.ReplicateConfig(preferred_segment=s.get_hostname())
for i in range(%d):
    assert s.put("ghost/%%s/%%d" %% (sys.argv[1], i), b"v%%d" %% i * 100, cfg) == 0
node = s.stat("ghost/%%s/0" %% sys.argv[1])["replicas"][0]["node"]
print("ready", node, flush=True)
mode = sys.stdin.readline().strip()
if mode == "close":
    s.close()
    print("closed", flush=True)
    sys.stdin.readline()
elif mode == "exit":
    sys.exit(0)             # atexit closes the store
else:
    sys.stdin.readline()    # killed here
"""


class GhostTest(L.PoolTestCase):
    """The pool has a daemon node too, so a replaced key has somewhere to go."""

    def writer(self, tag):
        cfg = self.pool.config(global_segment_size="8MB", local_hostname="ghost-" + tag)
        p = subprocess.Popen([sys.executable, "-c", WRITER % (cfg, N), tag],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ))
        self.addCleanup(self.reap, p)
        line = p.stdout.readline().split()
        self.assertEqual(line[:1], ["ready"], "writer failed\n" + self.pool.logs())
        self.assertNotIn(line[1], [seg + "" for seg in self.pool.segments])
        return p, ["ghost/%s/%d" % (tag, i) for i in range(N)]

    @staticmethod
    def reap(p):
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdin.close()
        p.stdout.close()

    def assert_no_ghost(self, keys):
        ex = self.s.batch_is_exist(keys)
        vals = self.s.get_batch(keys)
        for k, e, v in zip(keys, ex, vals):
            self.assertFalse(e == 1 and v == b"", "%s: listed but not readable" % k)

    def test_close_unmounts_before_returning(self):
        p, keys = self.writer("close")
        self.assertEqual(self.s.batch_is_exist(keys), [1] * N)
        p.stdin.write("close\n")
        p.stdin.flush()
        self.assertEqual(p.stdout.readline().strip(), "closed")
        # The writer is still alive: only close() can have unmounted it.
        self.assertEqual(self.s.batch_is_exist(keys), [0] * N)
        self.assertEqual(self.s.get_batch(keys), [b""] * N)
        self.assertEqual(self.s.put(keys[0], b"again"), 0)
        self.assertEqual(self.s.get(keys[0]), b"again")
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait(timeout=30)

    def test_clean_exit(self):
        p, keys = self.writer("exit")
        p.stdin.write("exit\n")
        p.stdin.flush()
        self.assertEqual(p.wait(timeout=30), 0)
        self.assertEqual(self.s.batch_is_exist(keys), [0] * N)
        self.assert_no_ghost(keys)

    def test_crash(self):
        p, keys = self.writer("crash")
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        t0 = time.monotonic()
        stored = {}
        while True:
            # A put that reports success is readable, ghost or not.
            i = len(stored) % N
            k = keys[i]
            if self.s.put(k, b"new") == 0:
                # The new value, or the first writer's if it is still
                # readable (its segment file outlives the process); never b"".
                self.assertIn(self.s.get(k), (b"new", b"v%d" % i * 100), "%s: put returned 0, "
                              "get found nothing" % k)
                stored[k] = True
            if all(e != 1 for e in self.s.batch_is_exist([x for x in keys if x not in stored])):
                break
            if time.monotonic() - t0 > CRASH_BOUND_S:
                self.fail("the crashed node's objects were still listed after %.1f s\n%s"
                          % (CRASH_BOUND_S, self.pool.logs()))
            time.sleep(0.1)
        self.assert_no_ghost(keys)


if __name__ == "__main__":
    unittest.main()

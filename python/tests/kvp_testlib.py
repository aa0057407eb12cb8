"""kvp_testlib: a private pool for the Python tests — a real kvpool-master and
N kvpool-node processes on free loopback ports, /dev/shm segments and a temp
directory named after the test process's pid. Everything started is stopped
and removed in stop(), which also runs at exit and on SIGTERM (the runner's
timeout), so a failing test still cleans up.

Binaries come from $KVP_BUILD (tests/run.sh and tests/e2e/python.sh set it)
or build/; the module from PYTHONPATH. A missing binary skips the test.
"""
import atexit
import contextlib
import glob
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("KVP_BUILD") or os.path.join(ROOT, "build")

# The host's own settings must not leak into the tests.
for _v in list(os.environ):
    if _v.startswith("MOONCAKE_") or _v.startswith("KVPOOL_"):
        del os.environ[_v]

try:
    import kvpool  # noqa: F401
except ImportError as e:  # pragma: no cover - reported as a skip
    kvpool = None
    IMPORT_ERROR = str(e)
else:
    IMPORT_ERROR = ""

_pools = []
_seq = [0]


def _load_free_ports():
    spec = importlib.util.spec_from_file_location(
        "kvp_free_ports", os.path.join(ROOT, "tests", "free_ports.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.free_ports


# n distinct free loopback ports below the kernel's ephemeral range
# (tests/free_ports.py: one picker for the shell and the Python tests)
free_ports = _load_free_ports()


def write_token(path, token):
    """A token file as kvpool accepts it: one line, mode 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")


def require_module(case):
    if kvpool is None:
        raise unittest.SkipTest("kvpool module not importable: " + IMPORT_ERROR)
    for b in ("kvpool-master", "kvpool-node"):
        if not os.access(os.path.join(BUILD, b), os.X_OK):
            raise unittest.SkipTest(os.path.join(BUILD, b) + " is not built")


class Pool:
    """A master and `nodes` node daemons. conf is the INI every process (and
    the stores, through config_file) reads. With token=True the daemons
    require the cluster token in token_file (mode 0600), which only their
    own INI files name: a client must be given it some other way."""

    def __init__(self, nodes=1, segment_size="256M", master_extra="", client_extra="",
                 token=False):
        _seq[0] += 1
        self.tag = "kvpt-py-%d-%d" % (os.getpid(), _seq[0])
        self.dir = tempfile.mkdtemp(prefix=self.tag + ".")
        self.procs = []
        self.segments = []
        self.nodes = nodes
        ports = free_ports(2 + 2 * nodes)
        self.mport, self.mhttp = ports[0], ports[1]
        self.master = "127.0.0.1:%d" % self.mport
        self.conf = os.path.join(self.dir, "pool.ini")
        self.token_file = None
        cluster_extra = ""
        if token:
            self.token_file = os.path.join(self.dir, "cluster.token")
            write_token(self.token_file, "kvpt-" + os.urandom(16).hex())
            cluster_extra = "token_file = %s\n" % self.token_file

        def common(cluster):
            return ("[cluster]\nmaster = %s\n%s"
                    "[master]\nlisten = 127.0.0.1:%d\nhttp_listen = 127.0.0.1:%d\n"
                    "metadata_server = false\nlease_ttl = 1s\nclient_ttl = 3s\n%s\n"
                    "[client]\ntimeout = 10s\n%s\n"
                    "[log]\nlevel = notice\n"
                    % (self.master, cluster, self.mport, self.mhttp, master_extra,
                       client_extra))
        with open(self.conf, "w") as f:
            f.write(common(""))
        self.master_conf = self.conf
        if token:
            self.master_conf = os.path.join(self.dir, "master.ini")
            with open(self.master_conf, "w") as f:
                f.write(common(cluster_extra))
        self.node_confs = []
        for i in range(nodes):
            seg = "%s-n%d" % (self.tag, i)
            self.segments.append(seg)
            path = os.path.join(self.dir, "n%d.ini" % i)
            with open(path, "w") as f:
                f.write(common(cluster_extra) + (
                    "[node]\nname = %s-n%d\nlisten = 127.0.0.1:%d\n"
                    "http_listen = 127.0.0.1:%d\nsegment = %s\nsegment_size = %s\n"
                    "remove_segment_on_exit = true\nheartbeat_interval = 300ms\n"
                    % (self.tag, i, ports[2 + 2 * i], ports[3 + 2 * i], seg, segment_size)))
            self.node_confs.append(path)
        _pools.append(self)

    def _spawn(self, prog, conf, log):
        with open(os.path.join(self.dir, log), "ab") as out:
            p = subprocess.Popen([os.path.join(BUILD, prog), "-c", conf],
                                 stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def start(self, wait_nodes=True):
        self._spawn("kvpool-master", self.master_conf, "master.log")
        for i, c in enumerate(self.node_confs):
            self._spawn("kvpool-node", c, "n%d.log" % i)
        if wait_nodes and self.nodes:
            self.wait_ready()
        return self

    def config(self, **extra):
        """The setup() dict of a client of this pool."""
        d = {"master_server_addr": self.master, "protocol": "tcp",
             "config_file": self.conf, "local_hostname": "localhost",
             "log.level": "warning"}
        d.update(extra)
        return d

    def store(self, **extra):
        s = kvpool.DistributedStore()
        rc = s.setup(self.config(**extra))
        if rc != 0:
            raise AssertionError("setup failed: %d %s\n%s" % (rc, s.last_error(), self.logs()))
        return s

    def wait_ready(self, seconds=20, segments=None):
        """Until the master answers and counts `segments` mounted segments
        (default: one per node daemon)."""
        want = self.nodes if segments is None else segments
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise AssertionError("a daemon exited during start-up\n" + self.logs())
            if self.segments_mounted() == want:
                return
            time.sleep(0.1)
        raise AssertionError("pool not ready within %d s (want %d segments, have %s)\n%s"
                             % (seconds, want, self.segments_mounted(), self.logs()))

    def metrics(self):
        """The master's Prometheus metrics as {name: value} (unlabelled ones)."""
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.mhttp,
                                        timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return None
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or "{" in line or " " not in line:
                continue
            name, val = line.rsplit(" ", 1)
            try:
                out[name] = float(val)
            except ValueError:
                pass
        return out

    def segments_mounted(self):
        m = self.metrics()
        if m is None or "kvpool_master_segments" not in m:
            return None
        return int(m["kvpool_master_segments"])

    def logs(self):
        out = []
        for f in sorted(glob.glob(os.path.join(self.dir, "*.log"))):
            with open(f, errors="replace") as fh:
                lines = fh.read().splitlines()[-15:]
            out.append("--- %s\n%s" % (os.path.basename(f), "\n".join(lines)))
        return "\n".join(out)

    def kill_node(self, i):
        p = self.procs[1 + i]
        p.terminate()
        p.wait(timeout=10)

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        for s in self.segments:
            try:
                os.unlink("/dev/shm/" + s)
            except FileNotFoundError:
                pass
        if os.environ.get("KVP_KEEP_LOGS"):
            print("logs kept in", self.dir, file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
        if self in _pools:
            _pools.remove(self)


class PoolTestCase(unittest.TestCase):
    """A test class with one pool (POOL_NODES node daemons with POOL_SEGMENT
    each) and one store of it, cls.s, for all its tests; require() may skip
    the class first."""
    POOL_NODES = 1
    POOL_SEGMENT = "64M"

    @classmethod
    def require(cls):
        pass

    @classmethod
    def setUpClass(cls):
        cls.require()
        require_module(cls)
        cls.pool = Pool(nodes=cls.POOL_NODES, segment_size=cls.POOL_SEGMENT).start()
        cls.s = cls.pool.store()

    @classmethod
    def tearDownClass(cls):
        cls.s.close()
        cls.pool.stop()


def _stop_all():
    for p in list(_pools):
        p.stop()
    # Embedded nodes of this process (kvpool-py-<pid>-*) are removed by
    # close()/atexit in the module; a crash would leave them.
    for f in glob.glob("/dev/shm/kvpool-py-%d-*" % os.getpid()):
        try:
            os.unlink(f)
        except OSError:
            pass


def _on_sigterm(sig, frame):
    _stop_all()
    os._exit(128 + sig)


atexit.register(_stop_all)
signal.signal(signal.SIGTERM, _on_sigterm)


def run_python(code, env=None, timeout=60):
    """Runs code in a fresh interpreter with the module on its path; returns
    CompletedProcess (text)."""
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True,
                          text=True, timeout=timeout)


@contextlib.contextmanager
def tracked_stores():
    """kvpool.MooncakeDistributedStore, while the block runs, is a subclass
    that lists each store made (the list yielded) and marks it `closed` on
    close(): shows what a plugin that opens its own store leaves open."""
    made = []
    base = kvpool.MooncakeDistributedStore

    class Tracked(base):
        closed = False

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

        def close(self):
            self.closed = True
            return super().close()

    kvpool.MooncakeDistributedStore = Tracked
    try:
        yield made
    finally:
        kvpool.MooncakeDistributedStore = base

"""The Python half of MooncakeDistributedStore's methods that are built from
the C extension's calls: ranged reads (get_into_ranges), the batch get and
put sessions, replica descriptors, copy/move tasks, setup_dummy and its
memory pool, and the small calls engines probe for.

Sessions: Mooncake's get session caches the replica list and reads ranges
straight from the segment; kvpool reads every value once, verified, when
the session starts and serves the ranges from that copy (the object is
immutable for the session's life either way). A put session collects the
ranges in a staging buffer and stores the object, whole, at session end;
until then it is not visible, as in Mooncake.
"""
import threading
import time
import uuid

from . import _kvpool
from ._types import (Descriptor, LocalDiskDescriptor, MemoryDescriptor, QueryTaskResponse,
                     ReplicaDescriptor, ReplicaStatus, ReplicateConfig, TaskStatus, TaskType)

OK = 0
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
BUFFER_OVERFLOW = -10
TASK_NOT_FOUND = -1400


def _seq(x, n=None):
    x = list(x)
    if n is not None and len(x) != n:
        raise ValueError("expected %d items, got %d" % (n, len(x)))
    return x


class StoreMixin:
    """Methods of kvpool.MooncakeDistributedStore written in Python."""

    def _py_state(self):
        st = self.__dict__.get("_kvp_state")
        if st is None:
            st = self.__dict__.setdefault("_kvp_state", {
                "lock": threading.Lock(), "get": {}, "put": {}, "tasks": {},
                "pool": None, "pool_size": 0, "pool_used": 0})
        return st

    def close(self):
        st = self._py_state()
        with st["lock"]:
            st["get"].clear()
            st["put"].clear()
            st["pool"] = None
            st["pool_used"] = 0
        return _kvpool.DistributedStore.close(self)

    # ---- namespaces (docs/python.md "Namespaces") ----------------------------

    def declare_namespace(self, name, *, model, dtype, page_size, layout, tp):
        """Declares what the KV under the keys "name/..." is. The first
        declaration creates the namespace at the master; the same fields
        again succeed; other fields raise kvpool.NamespaceMismatchError
        with the master's message (both sets of fields). Until a store
        declares a namespace that exists, its keys are refused to it
        (the calls return INVALID_PARAMS). The store re-declares on every
        reconnect. Bad fields raise ValueError."""
        from . import NamespaceMismatchError
        rc, msg = _kvpool.DistributedStore._declare_namespace(
            self, str(name), str(model), str(dtype), int(page_size), str(layout), int(tp))
        if rc == 0:
            return None
        if rc == _kvpool.KVP_ENSMISMATCH:
            raise NamespaceMismatchError(msg)
        if rc == _kvpool.KVP_EINVAL:
            raise ValueError(msg or "invalid namespace")
        raise RuntimeError("declare_namespace: %s%s" % (_kvpool.strerror(rc),
                                                        ": " + msg if msg else ""))

    def namespaces(self):
        """The master's namespaces: a list of dicts (name, model, dtype,
        page_size, layout, tp, fingerprint, keys, bytes, clients)."""
        r = _kvpool.DistributedStore._namespaces(self)
        if isinstance(r, int):
            raise RuntimeError("namespaces: %s" % _kvpool.strerror(r))
        return r

    # ---- setup_dummy and its memory pool ------------------------------------

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        """A client without memory of its own, as Mooncake's dummy client:
        here a pure client of the pool the host's configuration names (the
        host's kvpool-node plays Mooncake's real client). mem_pool_size is
        the memory alloc_from_mem_pool hands out, registered for zero-copy
        put_from/get_into."""
        st = self._py_state()
        rc = self._setup_dummy(local_buffer_size, server_address)
        with st["lock"]:
            st["pool"] = None
            st["pool_used"] = 0
            st["pool_size"] = int(mem_pool_size) if rc == 0 else 0
        return rc

    def alloc_from_mem_pool(self, size):
        """An address of @size bytes in the store's registered pool (after
        setup_dummy), 0 when it is exhausted or there is none (as Mooncake's
        real client, which has no pool, returns 0)."""
        st = self._py_state()
        size = int(size)
        with st["lock"]:
            if st["pool_size"] <= 0 or size <= 0:
                return 0
            if st["pool"] is None:
                buf = _kvpool._alloc_buffer(st["pool_size"])
                if self.register_buffer(buf.ptr(), st["pool_size"]) != 0:
                    return 0
                st["pool"] = buf
            off = (st["pool_used"] + 63) & ~63
            if off + size > st["pool_size"]:
                return 0
            st["pool_used"] = off + size
            return st["pool"].ptr() + off

    def get_offload_rpc_read_count(self):
        """Reads Mooncake served from another client's SSD over RPC: kvpool's
        disk tier is read by the node that holds it, so always 0."""
        return 0

    def _get_pyclient_capsule(self):
        return None

    # ---- replicas -----------------------------------------------------------

    def _replica_descs(self, st, endpoints):
        out = []
        for r in st["replicas"]:
            if r["tier"] == "disk":
                # the node's own spill file: Mooncake's LOCAL_DISK replica
                d = LocalDiskDescriptor((0, 0), st["size"], endpoints.get(r["node"], r["node"]))
                out.append(ReplicaDescriptor(ReplicaStatus.COMPLETE, local_disk=d,
                                             node=r["node"]))
            else:
                b = Descriptor(st["size"], r["offset"], endpoints.get(r["node"], r["node"]))
                out.append(ReplicaDescriptor(ReplicaStatus.COMPLETE, memory=MemoryDescriptor(b),
                                             node=r["node"]))
        return out

    def _endpoints(self):
        ends = {}
        for name, _seg, _size, port in self._segments():
            ends[name] = "%s:%d" % (self.get_hostname().rsplit(":", 1)[0], port)
        return ends

    def get_replica_desc(self, key):
        """[ReplicaDescriptor] of the object's complete replicas, [] when
        missing."""
        st = self.stat(key)
        return self._replica_descs(st, self._endpoints()) if st else []

    def batch_get_replica_desc(self, keys):
        """{key: [ReplicaDescriptor]} for the keys that exist."""
        ends = self._endpoints()
        out = {}
        for k in keys:
            st = self.stat(k)
            if st:
                out[k] = self._replica_descs(st, ends)
        return out

    # ---- copy and move tasks ------------------------------------------------

    def _task(self, kind, key, want, drop, n_extra):
        now = int(time.time() * 1000)
        tid = uuid.uuid4().int
        tid = (tid >> 64, tid & (2 ** 64 - 1))
        st = self.stat(key)
        if st is None:
            return (0, 0), OBJECT_NOT_FOUND
        value = self.get_buffer(key)
        if value is None:
            return (0, 0), OBJECT_NOT_FOUND
        nodes = [r["node"] for r in st["replicas"]]
        cfg = ReplicateConfig(replica_num=min(8, max(1, len(nodes) + n_extra)),
                              preferred_segment=want[0])
        rc = self.upsert(key, memoryview(value), cfg)
        status, msg = TaskStatus.SUCCESS, ""
        if rc != 0:
            status, msg = TaskStatus.FAILED, "upsert: %d" % rc
        else:
            after = self.stat(key)
            have = [r["node"] for r in after["replicas"]] if after else []
            names = [self._node_name(t) for t in want]
            missing = [t for t, n in zip(want, names) if n not in have]
            if missing or (drop and self._node_name(drop) in have):
                status = TaskStatus.FAILED
                msg = "replicas now on %s; the master placed them" % ",".join(have)
        done = int(time.time() * 1000)
        with self._py_state()["lock"]:
            self._py_state()["tasks"][tid] = QueryTaskResponse(
                tid, kind, status, now, done, (0, 0), msg)
        return tid, OK

    def _node_name(self, seg):
        if seg in (self.get_hostname(), self.get_hostname().rsplit(":", 1)[0]):
            segs = self._segments()
            return segs[0][0] if segs else seg
        return seg

    def create_copy_task(self, key, targets):
        """Copies the object to the target segments (a replica on each) and
        returns (task id, 0), or ((0, 0), code). kvpool does it at once: the
        object is rewritten with one more replica per target, the first
        placed on targets[0]; query_task says where they went."""
        targets = list(targets)
        if not targets:
            return (0, 0), INVALID_PARAMS
        return self._task(TaskType.REPLICA_COPY, key, targets, None, len(targets))

    def create_move_task(self, key, source, target):
        """Moves the object's replica from source to target: rewritten with
        the same replica count, the first on target."""
        return self._task(TaskType.REPLICA_MOVE, key, [target], source, 0)

    def query_task(self, task_id):
        """(QueryTaskResponse, 0), or (None, TASK_NOT_FOUND)."""
        t = self._py_state()["tasks"].get(tuple(task_id))
        return (t, OK) if t is not None else (None, TASK_NOT_FOUND)

    # ---- ranged reads and sessions ------------------------------------------

    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets,
                        all_sizes):
        """results[i][j][k]: bytes copied from all_keys[i][j] at
        all_src_offsets[i][j][k] into buffer_ptrs[i] + all_dst_offsets[i][j][k],
        or an error code (OBJECT_NOT_FOUND, INVALID_PARAMS past the end).

        The shape is Mooncake's whatever the lists hold: one row per key
        and, in it, one result per dst offset (one when the key has no dst
        list). Lists that do not line up are not read: INVALID_PARAMS for
        every range of every key when the five top-level lists differ in
        length, of a buffer's keys when its key and offset lists do, of a
        key when its dst, src and size lists do (as Mooncake's client)."""
        buffer_ptrs = _seq(buffer_ptrs)
        all_keys = [_seq(row) for row in all_keys]
        all_dst_offsets = [[_seq(d) for d in row] for row in all_dst_offsets]
        all_src_offsets = [[_seq(d) for d in row] for row in all_src_offsets]
        all_sizes = [[_seq(d) for d in row] for row in all_sizes]
        nbuf = len(buffer_ptrs)
        # Mooncake's error shape: buffers x keys x dst offsets, each INVALID_PARAMS
        out = []
        for i in range(nbuf):
            keys_i = all_keys[i] if i < len(all_keys) else [None]
            dst_i = all_dst_offsets[i] if i < len(all_dst_offsets) else []
            out.append([[INVALID_PARAMS] * (len(dst_i[j]) if j < len(dst_i) else 1)
                        for j in range(len(keys_i))])
        if not (nbuf == len(all_keys) == len(all_dst_offsets) == len(all_src_offsets)
                == len(all_sizes)):
            return out
        work = []
        for i, base in enumerate(buffer_ptrs):
            keys = all_keys[i]
            if not base or not (len(keys) == len(all_dst_offsets[i]) == len(all_src_offsets[i])
                                == len(all_sizes[i])):
                continue
            for j, key in enumerate(keys):
                dst, src, size = all_dst_offsets[i][j], all_src_offsets[i][j], all_sizes[i][j]
                if len(dst) == len(src) == len(size):
                    work.append((i, j, key))
        keys = sorted({key for _i, _j, key in work})
        values = dict(zip(keys, self.batch_get_buffer(keys))) if keys else {}
        dsts, srcs, lens = [], [], []
        for i, j, key in work:
            base = buffer_ptrs[i]
            dst, src, size = all_dst_offsets[i][j], all_src_offsets[i][j], all_sizes[i][j]
            v = values.get(key)
            frag = out[i][j]
            for k in range(len(size)):
                if v is None:
                    frag[k] = OBJECT_NOT_FOUND
                elif src[k] < 0 or size[k] < 0 or dst[k] < 0 or src[k] + size[k] > len(v):
                    frag[k] = INVALID_PARAMS
                else:
                    dsts.append(base + dst[k])
                    srcs.append(v.ptr() + src[k])
                    lens.append(size[k])
                    frag[k] = size[k]
        _kvpool._memcpy_many(dsts, srcs, lens)
        return out

    def batch_get_session_start(self, keys):
        """Reads each value once (verified) for the ranged reads that follow;
        per key 0 or its code."""
        keys = _seq(keys)
        if not keys:
            return []
        vals = self.batch_get_buffer(keys)
        st = self._py_state()
        res = []
        with st["lock"]:
            for k, v in zip(keys, vals):
                if v is None:
                    st["get"].pop(k, None)
                    res.append(OBJECT_NOT_FOUND if self.is_exist(k) == 0 else -1)
                else:
                    st["get"][k] = v
                    res.append(OK)
        return res

    def batch_get_into_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes,
                                           all_src_offsets):
        """Per key: its buffers get the value's bytes at all_src_offsets;
        the bytes copied, or INVALID_PARAMS (no session, a range past the
        end, lists of different lengths)."""
        keys = _seq(keys)
        if not (len(keys) == len(all_buffer_ptrs) == len(all_sizes) == len(all_src_offsets)):
            return [INVALID_PARAMS] * len(keys)
        st = self._py_state()
        res, dsts, srcs, lens = [], [], [], []
        with st["lock"]:
            for i, k in enumerate(keys):
                v = st["get"].get(k)
                ptrs, sizes, offs = all_buffer_ptrs[i], all_sizes[i], all_src_offsets[i]
                if v is None or not (len(ptrs) == len(sizes) == len(offs)) or any(
                        o < 0 or s < 0 or o + s > len(v) for o, s in zip(offs, sizes)):
                    res.append(INVALID_PARAMS)
                    continue
                for p, s, o in zip(ptrs, sizes, offs):
                    dsts.append(p)
                    srcs.append(v.ptr() + o)
                    lens.append(s)
                res.append(sum(sizes))
            _kvpool._memcpy_many(dsts, srcs, lens)
        return res

    def batch_get_session_end(self, keys):
        st = self._py_state()
        with st["lock"]:
            for k in keys:
                st["get"].pop(k, None)
        return 0

    def batch_put_session_start(self, keys, sizes, config=None):
        """Reserves each object's bytes (a staging buffer); per key 0,
        OBJECT_ALREADY_EXISTS, or INVALID_PARAMS (a session already open, a
        zero size)."""
        keys, sizes = _seq(keys), _seq(sizes)
        if len(keys) != len(sizes):
            return [INVALID_PARAMS] * len(keys)
        if config is not None and getattr(config, "group_ids", None) is not None and \
                len(config.group_ids) != len(keys):
            return [INVALID_PARAMS] * len(keys)
        exist = self.batch_is_exist(keys) if keys else []
        st = self._py_state()
        res = []
        with st["lock"]:
            for k, n, e in zip(keys, sizes, exist):
                if k in st["put"] or int(n) <= 0 or e < 0:
                    res.append(INVALID_PARAMS if e >= 0 else -900)
                elif e == 1:
                    res.append(OBJECT_ALREADY_EXISTS)
                else:
                    st["put"][k] = (_kvpool._alloc_buffer(int(n)), config)
                    res.append(OK)
        return res

    def batch_put_from_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes,
                                           all_dst_offsets):
        """Per key: its buffers are copied into the object at
        all_dst_offsets; 0, or INVALID_PARAMS."""
        keys = _seq(keys)
        if not (len(keys) == len(all_buffer_ptrs) == len(all_sizes) == len(all_dst_offsets)):
            return [INVALID_PARAMS] * len(keys)
        st = self._py_state()
        res, dsts, srcs, lens = [], [], [], []
        with st["lock"]:
            for i, k in enumerate(keys):
                s = st["put"].get(k)
                ptrs, sizes, offs = all_buffer_ptrs[i], all_sizes[i], all_dst_offsets[i]
                if s is None or not (len(ptrs) == len(sizes) == len(offs)) or any(
                        o < 0 or n < 0 or o + n > len(s[0]) for o, n in zip(offs, sizes)):
                    res.append(INVALID_PARAMS)
                    continue
                for p, n, o in zip(ptrs, sizes, offs):
                    dsts.append(s[0].ptr() + o)
                    srcs.append(p)
                    lens.append(n)
                res.append(OK)
            _kvpool._memcpy_many(dsts, srcs, lens)
        return res

    def batch_put_session_end(self, keys):
        """Stores each session's object (readable from here on); per key its
        code, INVALID_PARAMS for a key without a session."""
        keys = _seq(keys)
        st = self._py_state()
        with st["lock"]:
            sess = [st["put"].pop(k, None) for k in keys]
        res = [INVALID_PARAMS] * len(keys)
        groups = {}
        for i, s in enumerate(sess):
            if s is not None:
                groups.setdefault(id(s[1]), (s[1], []))[1].append(i)
        for cfg, idx in groups.values():
            if cfg is not None and getattr(cfg, "group_ids", None) is not None:
                cfg = _without_groups(cfg)
            r = self.batch_put_from([keys[i] for i in idx], [sess[i][0].ptr() for i in idx],
                                    [len(sess[i][0]) for i in idx], cfg)
            for i, v in zip(idx, r):
                res[i] = v
        return res

    def batch_put_session_revoke(self, keys):
        """Drops the sessions; nothing was stored. Per key 0, INVALID_PARAMS
        for a key without one."""
        st = self._py_state()
        with st["lock"]:
            return [OK if st["put"].pop(k, None) is not None else INVALID_PARAMS for k in keys]


def _without_groups(cfg):
    c = ReplicateConfig()
    for name in ReplicateConfig.FIELDS:
        if name != "group_ids" and hasattr(cfg, name):
            setattr(c, name, getattr(cfg, name))
    return c

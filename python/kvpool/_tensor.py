"""Mooncake's tensor calls on kvpool: put_tensor/get_tensor and their batch,
_into, _from, upsert, pub, tensor-parallel (*_with_tp) and parallel-layout
(*_with_parallelism) forms, safetensors export/import, and the
_serialize_tensor/_deserialize_tensor helpers.

An object holds Mooncake's layout, byte for byte: a 304-byte TensorMetadata
(magic "NOOM", dtype, shape, layout, shard axes) followed by the tensor's
bytes, so values written here read back with Mooncake's own decoder and
get_into() of a tensor key gives what Mooncake's get_tensor_into expects.
Writes go through the extension's gathered put (metadata and data as two
pieces, one staging copy in C, CUDA device tensors copied with the CUDA
runtime); reads land in one page-backed buffer that the returned tensor
views (torch.frombuffer), without another copy. torch is imported on first
use; without it every tensor call fails the way Mooncake's does with
something that is not a tensor (INVALID_PARAMS, or None).
"""
import ctypes
import json
import os
import struct

from . import _kvpool

OK = 0
INVALID_PARAMS = -600
FILE_NOT_FOUND = -1100

META_SIZE = 304
MAGIC = 0x4D4F4F4E
VERSION = 1
MAX_DIMS = 8
MAX_AXES = 4
FULL, SHARD = 0, 1
_HDR = struct.Struct("<IHHiiIIQQ")          # TensorObjectHeader, 40 bytes
_LAYOUT = struct.Struct("<8q8qII")           # global/local shape, axis_count
_AXIS = struct.Struct("<iiiiiiq")            # LayoutAxis, 32 bytes
assert _HDR.size + _LAYOUT.size + MAX_AXES * _AXIS.size == META_SIZE

# Mooncake's TensorDtype: (torch attribute, code, element size).
_DTYPES = [("float32", 0, 4), ("float64", 1, 8), ("int8", 2, 1), ("uint8", 3, 1),
           ("int16", 4, 2), ("uint16", 5, 2), ("int32", 6, 4), ("uint32", 7, 4),
           ("int64", 8, 8), ("uint64", 9, 8), ("bool", 10, 1), ("float16", 11, 2),
           ("bfloat16", 12, 2), ("float8_e4m3fn", 13, 1), ("float8_e5m2", 14, 1)]
_ESIZE = {code: size for _, code, size in _DTYPES}
_AXIS_KINDS = {"dp": 0, "tp": 1, "ep": 2, "pp": 3}
_AXIS_NAMES = {v: k for k, v in _AXIS_KINDS.items()}
_SAFE_NAMES = {"float32": "F32", "float64": "F64", "int8": "I8", "uint8": "U8", "int16": "I16",
               "uint16": "U16", "int32": "I32", "uint32": "U32", "int64": "I64",
               "uint64": "U64", "bool": "BOOL", "float16": "F16", "bfloat16": "BF16",
               "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}

_t = {}


def _torch():
    """torch and its dtype tables, or None when it does not import."""
    if "torch" not in _t:
        try:
            import torch
        except Exception:  # noqa: BLE001 - any failure means "no torch"
            torch = None
        _t["torch"] = torch
        if torch is not None:
            _t["code"] = {getattr(torch, n): c for n, c, _ in _DTYPES if hasattr(torch, n)}
            _t["dtype"] = {c: getattr(torch, n) for n, c, _ in _DTYPES if hasattr(torch, n)}
            _t["name"] = {getattr(torch, n): n for n, _, _ in _DTYPES if hasattr(torch, n)}
    return _t["torch"]


# ---- metadata -----------------------------------------------------------------


def _axis_rec(ax, index, local_shape):
    """A LayoutAxis record of a ParallelAxis-like object (None: invalid)."""
    kind = _AXIS_KINDS.get(str(getattr(ax, "kind", "")).lower())
    if kind is None:
        return None
    rank, size = int(getattr(ax, "rank", 0)), int(getattr(ax, "size", 1))
    sd = getattr(ax, "split_dim", None)
    if size <= 0 or rank < 0 or rank >= size:
        return None
    if sd is not None and not 0 <= int(sd) < len(local_shape):
        return None
    r0 = 0
    if kind == 2 and getattr(ax, "expert_id", None) is not None:
        r0 = int(ax.expert_id)
    if kind == 3 and getattr(ax, "stage_id", None) is not None:
        r0 = int(ax.stage_id)
    return (kind, index, rank, size, -1 if sd is None else int(sd), r0,
            -1 if sd is None else int(local_shape[int(sd)]))


def pack_meta(code, global_shape, local_shape, data_bytes, layout=FULL, axes=()):
    ndim = len(global_shape)
    pad = [-1] * (MAX_DIMS - ndim)
    recs = b"".join(_AXIS.pack(*a) for a in axes) + bytes(_AXIS.size * (MAX_AXES - len(axes)))
    return (_HDR.pack(MAGIC, VERSION, META_SIZE, code, ndim, layout, 0, META_SIZE, data_bytes) +
            _LAYOUT.pack(*(list(global_shape) + pad), *(list(local_shape) + pad),
                         len(axes), 0) + recs)


def parse_meta(buf, total):
    """The metadata at the start of buf (total = the object's length) as a
    dict, or None when it is not a valid Mooncake tensor object."""
    if total < META_SIZE or len(buf) < META_SIZE:
        return None
    magic, ver, hsize, code, ndim, layout, _fl, off, nbytes = _HDR.unpack_from(buf, 0)
    f = _LAYOUT.unpack_from(buf, _HDR.size)
    naxes = f[16]
    if (magic != MAGIC or ver != VERSION or hsize != META_SIZE or code not in _ESIZE or
            not 0 <= ndim <= MAX_DIMS or naxes > MAX_AXES or layout > SHARD or
            off < META_SIZE or off > total or nbytes != total - off):
        return None
    gshape, lshape = list(f[0:ndim]), list(f[8:8 + ndim])
    if any(d < 0 for d in gshape + lshape) or any(d != -1 for d in f[ndim:8] + f[8 + ndim:16]):
        return None
    numel = 1
    for d in lshape:
        numel *= d
    if numel * _ESIZE[code] != nbytes:
        return None
    axes = [_AXIS.unpack_from(buf, _HDR.size + _LAYOUT.size + i * _AXIS.size)
            for i in range(naxes)]
    for a in axes:
        if not (0 <= a[0] <= 4 and a[3] > 0 and 0 <= a[2] < a[3] and -1 <= a[4] < ndim):
            return None
    return {"code": code, "global": gshape, "local": lshape, "layout": layout,
            "offset": off, "nbytes": nbytes, "axes": axes}


class _Info:
    """A tensor ready to write: its contiguous copy (kept alive), metadata."""
    __slots__ = ("t", "meta", "ptr", "nbytes")

    def __init__(self, t, meta, nbytes):
        self.t, self.meta, self.nbytes = t, meta, nbytes
        self.ptr = t.data_ptr() if nbytes else 0

    def parts(self):
        return [self.meta, (self.ptr, self.nbytes)] if self.nbytes else [self.meta]


def _contig(t, need_contiguous=False):
    torch = _torch()
    if torch is None or not isinstance(t, torch.Tensor):
        return None
    if not t.is_contiguous():
        if need_contiguous:
            return None
        t = t.contiguous()
    if t.dtype not in _t["code"] or t.dim() > MAX_DIMS:
        return None
    return t


def _info(t, global_shape=None, layout=FULL, axes=()):
    t = _contig(t)
    if t is None:
        return None
    nbytes = t.numel() * t.element_size()
    shape = list(t.shape)
    return _Info(t, pack_meta(_t["code"][t.dtype], global_shape or shape, shape, nbytes,
                              layout, axes), nbytes)


def _view(u8, meta):
    """meta's tensor inside u8, a uint8 tensor over the whole object."""
    torch = _torch()
    dtype = _t["dtype"].get(meta["code"])
    if dtype is None:
        return None
    if not meta["nbytes"]:
        return torch.empty(meta["local"], dtype=dtype, device=u8.device)
    t = u8[meta["offset"]:meta["offset"] + meta["nbytes"]]
    if dtype != torch.uint8:
        t = t.view(dtype)
    return t.reshape(meta["local"])


def _from_mem(obj, length, meta):
    """A tensor viewing meta's data inside obj (a buffer-protocol object of
    `length` bytes) — no copy; obj lives as long as the tensor."""
    torch = _torch()
    if not meta["nbytes"]:
        dtype = _t["dtype"].get(meta["code"])
        return None if dtype is None else torch.empty(meta["local"], dtype=dtype)
    return _view(torch.frombuffer(obj, dtype=torch.uint8, count=length), meta)


class _DeviceRange:
    """A CUDA device range as __cuda_array_interface__, which torch wraps
    without a copy."""

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3}


def _from_handle(h):
    if h is None or _torch() is None:
        return None
    mv = memoryview(h)
    meta = parse_meta(mv, len(mv))
    return _from_mem(h, len(mv), meta) if meta else None


def _from_address(ptr, length):
    """A tensor over the object at ptr (host memory) of length bytes."""
    if length < META_SIZE or _torch() is None:
        return None
    if _kvpool._is_device(ptr):
        # A device buffer: a CUDA tensor over it (the metadata read back).
        meta = parse_meta(_kvpool._read_bytes(ptr, META_SIZE), length)
        if meta is None or not _torch().cuda.is_available():
            return None
        return _view(_torch().as_tensor(_DeviceRange(ptr, length), device="cuda"), meta)
    arr = (ctypes.c_char * length).from_address(ptr)
    meta = parse_meta(memoryview(arr).cast("B"), length)
    return _from_mem(arr, length, meta) if meta else None


def _meta_at(ptr, size):
    """Parsed metadata of the [TensorMetadata][data] buffer at ptr."""
    if not ptr or size < META_SIZE:
        return None
    return parse_meta(_kvpool._read_bytes(ptr, META_SIZE), size)


# ---- tensor parallelism -------------------------------------------------------------


def _shard_range(dim, rank, count):
    start = dim * rank // count
    return start, dim * (rank + 1) // count - start


def _tp_infos(t, tp_size, split_dim, axes=None, tp_index=0):
    """The tp_size shards of t along split_dim (uniform only, as Mooncake),
    each with SHARD metadata naming its rank; None when invalid."""
    t = _contig(t)
    if t is None or tp_size <= 0 or not 0 <= split_dim < t.dim() or \
            t.shape[split_dim] % tp_size:
        return None
    shape = list(t.shape)
    out = []
    for r in range(tp_size):
        start, n = _shard_range(shape[split_dim], r, tp_size)
        shard = t.narrow(split_dim, start, n).contiguous()
        local = list(shard.shape)
        if axes is None:
            recs = [_axis_rec(_Axis("tp", r, tp_size, split_dim), 0, local)]
        else:
            specs = list(axes)
            specs[tp_index] = _Axis("tp", r, tp_size, split_dim, axis=specs[tp_index])
            recs = [_axis_rec(a, i, local) for i, a in enumerate(specs)]
        if any(x is None for x in recs):
            return None
        out.append(_info(shard, shape, SHARD, recs))
    return out


class _Axis:
    """A ParallelAxis with another rank (or a plain one)."""

    def __init__(self, kind, rank, size, split_dim, axis=None):
        self.kind, self.rank, self.size, self.split_dim = kind, rank, size, split_dim
        self.expert_id = getattr(axis, "expert_id", None)
        self.stage_id = getattr(axis, "stage_id", None)


def _axes_of(par):
    """The axes of a TensorParallelism (or a list of axes), validated and in
    Mooncake's canonical order (dp, tp, ep, pp); None when invalid."""
    if par is None:
        return None
    axes = list(getattr(par, "axes", par))
    kinds = [str(getattr(a, "kind", "")).lower() for a in axes]
    if not 1 <= len(axes) <= MAX_AXES or any(k not in _AXIS_KINDS for k in kinds) or \
            len(set(kinds)) != len(kinds):
        return None
    for a in axes:
        if not 0 <= int(a.rank) < int(a.size):
            return None
    return sorted(axes, key=lambda a: _AXIS_KINDS[str(a.kind).lower()])


def _suffix(a):
    s = "%s_%dof%d" % (str(a.kind).lower(), a.rank, a.size)
    if getattr(a, "split_dim", None) is not None:
        s += "_sd%d" % a.split_dim
    if getattr(a, "expert_id", None) is not None:
        s += "_eid%d" % a.expert_id
    if getattr(a, "stage_id", None) is not None:
        s += "_sid%d" % a.stage_id
    return s


def _par_key(base, axes):
    if len(axes) == 1 and str(axes[0].kind).lower() == "tp":
        return "%s_tp_%d" % (base, axes[0].rank)
    return base + "".join("__" + _suffix(a) for a in axes)


def _tp_index(axes):
    for i, a in enumerate(axes):
        if str(a.kind).lower() == "tp":
            return i
    return None


def _writer_spec(w):
    if w is None:
        return None
    if isinstance(w, dict):
        g = w.get
    elif isinstance(w, (tuple, list)):
        vals = dict(zip(("rank", "size", "split_dim"), w))
        g = vals.get
    else:
        def g(k, d=None):
            return getattr(w, k, d)
    try:
        rank, size, sd = int(g("rank")), int(g("size")), int(g("split_dim", 0) or 0)
    except (TypeError, ValueError):
        return None
    if size <= 0 or not 0 <= rank < size or sd < 0:
        return None
    return rank, size, sd


def _writer_key(base, w):
    return "%s__writer_%dof%d_sd%d" % (base, w[0], w[1], w[2])


class TensorMixin:
    """The tensor methods of kvpool.MooncakeDistributedStore."""

    # ---- writes -----------------------------------------------------------------

    def _write_infos(self, keys, infos, config=None, upsert=False):
        res = [INVALID_PARAMS] * len(keys)
        idx = [i for i, inf in enumerate(infos) if inf is not None]
        if idx:
            r = self._batch_put_parts([keys[i] for i in idx], [infos[i].parts() for i in idx],
                                      config, upsert)
            for i, v in zip(idx, r):
                res[i] = v
        return res

    def _write_tensors(self, keys, tensors, config=None, upsert=False):
        keys = list(keys)
        tensors = list(tensors)
        if len(keys) != len(tensors):
            return [INVALID_PARAMS] * len(keys)
        if config is not None and getattr(config, "group_ids", None) is not None and \
                len(config.group_ids) != len(keys):
            return [INVALID_PARAMS] * len(keys)
        return self._write_infos(keys, [_info(t) for t in tensors], config, upsert)

    def put_tensor(self, key, tensor):
        return self._write_tensors([key], [tensor])[0]

    def batch_put_tensor(self, keys, tensors_list):
        return self._write_tensors(keys, tensors_list)

    def pub_tensor(self, key, tensor, config=None):
        return self._write_tensors([key], [tensor], config)[0]

    def batch_pub_tensor(self, keys, tensors_list, config=None):
        return self._write_tensors(keys, tensors_list, config)

    def upsert_tensor(self, key, tensor):
        return self._write_tensors([key], [tensor], None, True)[0]

    def batch_upsert_tensor(self, keys, tensors_list):
        return self._write_tensors(keys, tensors_list, None, True)

    def upsert_pub_tensor(self, key, tensor, config=None):
        return self._write_tensors([key], [tensor], config, True)[0]

    def batch_upsert_pub_tensor(self, keys, tensors_list, config=None):
        return self._write_tensors(keys, tensors_list, config, True)

    def _write_from(self, keys, ptrs, sizes, upsert, config=None):
        keys, ptrs, sizes = list(keys), list(ptrs), list(sizes)
        if not (len(keys) == len(ptrs) == len(sizes)):
            return [INVALID_PARAMS] * len(keys)
        if any(_meta_at(p, s) is None for p, s in zip(ptrs, sizes)):
            return [INVALID_PARAMS] * len(keys)
        if not keys:
            return []
        if upsert:
            return self.batch_upsert_from(keys, ptrs, sizes, config)
        return self.batch_put_from(keys, ptrs, sizes, config)

    def put_tensor_from(self, key, buffer_ptr, size):
        """Stores the [TensorMetadata][data] buffer at buffer_ptr as is."""
        return self._write_from([key], [buffer_ptr], [size], False)[0]

    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes):
        return self._write_from(keys, buffer_ptrs, sizes, False)

    def upsert_tensor_from(self, key, buffer_ptr, size):
        return self._write_from([key], [buffer_ptr], [size], True)[0]

    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes):
        return self._write_from(keys, buffer_ptrs, sizes, True)

    # ---- reads ----------------------------------------------------------------

    def get_tensor(self, key):
        return _from_handle(self.batch_get_buffer([key])[0])

    def batch_get_tensor(self, keys):
        return [_from_handle(h) for h in self.batch_get_buffer(list(keys))]

    def get_tensor_into(self, key, buffer_ptr, size):
        """Reads the object into the buffer and returns a tensor viewing its
        data there (a CUDA tensor for a device buffer); None on failure."""
        if not buffer_ptr:
            return None
        n = self.get_into(key, buffer_ptr, size)
        return _from_address(buffer_ptr, n) if n >= META_SIZE else None

    def batch_get_tensor_into(self, keys, buffer_ptrs, sizes):
        keys, buffer_ptrs, sizes = list(keys), list(buffer_ptrs), list(sizes)
        if not (len(keys) == len(buffer_ptrs) == len(sizes)) or not all(buffer_ptrs):
            return [INVALID_PARAMS] * len(keys)
        lens = self.batch_get_into(keys, buffer_ptrs, sizes)
        return [_from_address(p, n) if n >= META_SIZE else None
                for p, n in zip(buffer_ptrs, lens)]

    def get_tensor_into_cuda(self, key, tensor):
        return self.batch_get_tensor_into_cuda([key], [tensor])[0]

    def batch_get_tensor_into_cuda(self, keys, tensors_list):
        """Copies each object's data into the matching pre-allocated tensor
        (CUDA or host: the copy goes through the CUDA runtime when it has
        to); per key the bytes copied, or INVALID_PARAMS (missing object,
        dtype or shape mismatch, a non-contiguous destination)."""
        keys, tensors = list(keys), list(tensors_list)
        if len(keys) != len(tensors):
            return [INVALID_PARAMS] * len(keys)
        res = [INVALID_PARAMS] * len(keys)
        dsts, srcs, lens, keep = [], [], [], []
        for i, h in enumerate(self.batch_get_buffer(keys) if keys else []):
            t = _contig(tensors[i], need_contiguous=True)
            meta = parse_meta(memoryview(h), len(h)) if h is not None else None
            if t is None or meta is None or _t["code"][t.dtype] != meta["code"] or \
                    list(t.shape) != meta["local"]:
                continue
            if meta["nbytes"]:
                dsts.append(t.data_ptr())
                srcs.append(h.ptr() + meta["offset"])
                lens.append(meta["nbytes"])
                keep.append(h)
            res[i] = meta["nbytes"]
        _kvpool._memcpy_many(dsts, srcs, lens)
        return res

    # ---- tensor parallelism (*_with_tp) ------------------------------------------

    def _put_tp(self, keys, tensors, config, tp_size, split_dim, upsert=False):
        keys, tensors = list(keys), list(tensors)
        if len(keys) != len(tensors) or not keys:
            return [INVALID_PARAMS] * len(keys)
        if tp_size <= 1:
            return self._write_tensors(keys, tensors, config, upsert)
        all_keys, all_infos, owner = [], [], []
        res = [INVALID_PARAMS] * len(keys)
        for i, (k, t) in enumerate(zip(keys, tensors)):
            infos = _tp_infos(t, tp_size, split_dim)
            if infos is None:
                continue
            res[i] = OK
            for r, inf in enumerate(infos):
                all_keys.append("%s_tp_%d" % (k, r))
                all_infos.append(inf)
                owner.append(i)
        if config is not None and getattr(config, "group_ids", None) is not None:
            from ._store import _without_groups
            config = _without_groups(config)
        for i, v in zip(owner, self._write_infos(all_keys, all_infos, config, upsert)):
            if v != 0 and res[i] == OK:
                res[i] = v
        return res

    def put_tensor_with_tp(self, key, tensor, tp_rank=0, tp_size=1, split_dim=0):
        """Splits the tensor into tp_size shards along split_dim and stores
        shard r under key_tp_r (every rank's, as Mooncake)."""
        return self._put_tp([key], [tensor], None, tp_size, split_dim)[0]

    def batch_put_tensor_with_tp(self, base_keys, tensors_list, tp_rank=0, tp_size=1,
                                 split_dim=0):
        return self._put_tp(base_keys, tensors_list, None, tp_size, split_dim)

    def pub_tensor_with_tp(self, key, tensor, config=None, tp_rank=0, tp_size=1, split_dim=0):
        return self._put_tp([key], [tensor], config, tp_size, split_dim)[0]

    def batch_pub_tensor_with_tp(self, base_keys, tensors_list, config=None, tp_rank=0,
                                 tp_size=1, split_dim=0):
        return self._put_tp(base_keys, tensors_list, config, tp_size, split_dim)

    def put_tensor_with_tp_from(self, key, buffer_ptr, size, tp_rank=0, tp_size=1,
                                split_dim=0):
        """The full tensor in a [TensorMetadata][data] buffer, split as
        put_tensor_with_tp."""
        return self.batch_put_tensor_with_tp_from([key], [buffer_ptr], [size], tp_rank,
                                                  tp_size, split_dim)[0]

    def batch_put_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank=0,
                                      tp_size=1, split_dim=0):
        if tp_size <= 1:
            return self.batch_put_tensor_from(base_keys, buffer_ptrs, sizes)
        base_keys, buffer_ptrs, sizes = list(base_keys), list(buffer_ptrs), list(sizes)
        if not (len(base_keys) == len(buffer_ptrs) == len(sizes)):
            return [INVALID_PARAMS] * len(base_keys)
        tensors = [_from_address(p, s) if _meta_at(p, s) else None
                   for p, s in zip(buffer_ptrs, sizes)]
        return self._put_tp(base_keys, tensors, None, tp_size, split_dim)

    def get_tensor_with_tp(self, key, tp_rank=0, tp_size=1, split_dim=0):
        return self.get_tensor(key if tp_size <= 1 else "%s_tp_%d" % (key, tp_rank))

    def batch_get_tensor_with_tp(self, base_keys, tp_rank=0, tp_size=1):
        keys = list(base_keys) if tp_size <= 1 else \
            ["%s_tp_%d" % (k, tp_rank) for k in base_keys]
        return self.batch_get_tensor(keys)

    def get_tensor_with_tp_into(self, key, buffer_ptr, size, tp_rank=0, tp_size=1,
                                split_dim=0):
        return self.get_tensor_into(key if tp_size <= 1 else "%s_tp_%d" % (key, tp_rank),
                                    buffer_ptr, size)

    def batch_get_tensor_with_tp_into(self, base_keys, buffer_ptrs, sizes, tp_rank=0,
                                      tp_size=1):
        keys = list(base_keys) if tp_size <= 1 else \
            ["%s_tp_%d" % (k, tp_rank) for k in base_keys]
        return self.batch_get_tensor_into(keys, buffer_ptrs, sizes)

    # ---- parallel layouts (*_with_parallelism) -----------------------------------

    def _put_par(self, key, tensor, parallelism, config, writer, upsert):
        """Mooncake's write routes: no layout -> the full object; a writer
        partition -> this writer's shard; a layout with a TP axis -> the full
        tensor split into every TP rank's shard; other layouts -> the tensor
        as this rank's shard."""
        if parallelism is not None and writer is not None:
            return INVALID_PARAMS
        if writer is not None:
            w = _writer_spec(writer)
            t = _contig(tensor)
            if w is None or t is None or not w[2] < t.dim():
                return INVALID_PARAMS
            local = list(t.shape)
            glob = list(local)
            glob[w[2]] *= w[1]
            rec = _axis_rec(_Axis("tp", w[0], w[1], w[2]), 0, local)
            return self._write_infos([_writer_key(key, w)], [_info(t, glob, SHARD, [rec])],
                                     config, upsert)[0]
        if parallelism is None:
            return self._write_tensors([key], [tensor], config, upsert)[0]
        axes = _axes_of(parallelism)
        if axes is None:
            return INVALID_PARAMS
        ti = _tp_index(axes)
        if ti is None:
            t = _contig(tensor)
            recs = [_axis_rec(a, i, list(t.shape)) for i, a in enumerate(axes)] \
                if t is not None else [None]
            if any(r is None for r in recs):
                return INVALID_PARAMS
            return self._write_infos([_par_key(key, axes)], [_info(t, None, SHARD, recs)],
                                     config, upsert)[0]
        tp = axes[ti]
        if tp.split_dim is None:
            return INVALID_PARAMS
        infos = _tp_infos(tensor, int(tp.size), int(tp.split_dim), axes, ti)
        if infos is None:
            return INVALID_PARAMS
        keys = []
        for r in range(int(tp.size)):
            a = list(axes)
            a[ti] = _Axis("tp", r, tp.size, tp.split_dim, axis=tp)
            keys.append(_par_key(key, a))
        for v in self._write_infos(keys, infos, config, upsert):
            if v != 0:
                return v
        return OK

    def _put_par_batch(self, keys, tensors, parallelisms, config, writers, upsert):
        keys, tensors = list(keys), list(tensors)
        if len(keys) != len(tensors) or (parallelisms is not None and writers is not None):
            return [INVALID_PARAMS] * len(keys)
        if parallelisms is None and writers is None:
            return self._write_tensors(keys, tensors, config, upsert)
        reqs = list(parallelisms if parallelisms is not None else writers)
        if len(reqs) != len(keys):
            return [INVALID_PARAMS] * len(keys)
        return [self._put_par(k, t, r if parallelisms is not None else None, config,
                              r if writers is not None else None, upsert)
                for k, t, r in zip(keys, tensors, reqs)]

    def put_tensor_with_parallelism(self, key, tensor, parallelism=None, config=None,
                                    writer_partition=None):
        return self._put_par(key, tensor, parallelism, config, writer_partition, False)

    def upsert_tensor_with_parallelism(self, key, tensor, parallelism=None, config=None,
                                       writer_partition=None):
        return self._put_par(key, tensor, parallelism, config, writer_partition, True)

    def batch_put_tensor_with_parallelism(self, keys, tensors_list, parallelisms=None,
                                          config=None, writer_partitions=None):
        return self._put_par_batch(keys, tensors_list, parallelisms, config,
                                   writer_partitions, False)

    def batch_upsert_tensor_with_parallelism(self, keys, tensors_list, parallelisms=None,
                                             config=None, writer_partitions=None):
        return self._put_par_batch(keys, tensors_list, parallelisms, config,
                                   writer_partitions, True)

    def _par_from(self, keys, ptrs, sizes, parallelisms, config, writers, upsert):
        keys, ptrs, sizes = list(keys), list(ptrs), list(sizes)
        if not (len(keys) == len(ptrs) == len(sizes)):
            return [INVALID_PARAMS] * len(keys)
        if parallelisms is None and writers is None:
            return self._write_from(keys, ptrs, sizes, upsert, config)
        tensors = [_from_address(p, s) if _meta_at(p, s) else None
                   for p, s in zip(ptrs, sizes)]
        return self._put_par_batch(keys, tensors, parallelisms, config, writers, upsert)

    def put_tensor_with_parallelism_from(self, key, buffer_ptr, size, parallelism=None,
                                         config=None, writer_partition=None):
        return self._par_from([key], [buffer_ptr], [size],
                              None if parallelism is None else [parallelism], config,
                              None if writer_partition is None else [writer_partition],
                              False)[0]

    def upsert_tensor_with_parallelism_from(self, key, buffer_ptr, size, parallelism=None,
                                            config=None, writer_partition=None):
        return self._par_from([key], [buffer_ptr], [size],
                              None if parallelism is None else [parallelism], config,
                              None if writer_partition is None else [writer_partition],
                              True)[0]

    def batch_put_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes,
                                               parallelisms=None, config=None,
                                               writer_partitions=None):
        return self._par_from(keys, buffer_ptrs, sizes, parallelisms, config,
                              writer_partitions, False)

    def batch_upsert_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes,
                                                  parallelisms=None, config=None,
                                                  writer_partitions=None):
        return self._par_from(keys, buffer_ptrs, sizes, parallelisms, config,
                              writer_partitions, True)

    def _gather_tp(self, key, axes):
        """The full tensor from its TP shards: those the layout names (its
        other axes as given; for a TP-only layout also a writer
        partition's), or without a layout key_tp_<r>, the count read from
        shard 0's metadata."""
        torch = _torch()
        alt = None
        if not axes:
            h = self.batch_get_buffer(["%s_tp_0" % key])[0]
            meta = parse_meta(memoryview(h), len(h)) if h is not None else None
            if meta is None or not meta["axes"]:
                return None
            size, sd = meta["axes"][0][3], meta["axes"][0][4]
            keys = ["%s_tp_%d" % (key, r) for r in range(size)]
        else:
            ti = _tp_index(axes)
            if ti is None:
                return None
            tp = axes[ti]
            size, sd = int(tp.size), tp.split_dim
            keys = []
            for r in range(size):
                a = list(axes)
                a[ti] = _Axis("tp", r, size, sd, axis=tp)
                keys.append(_par_key(key, a))
            if len(axes) == 1 and sd is not None:
                alt = [_writer_key(key, (r, size, int(sd))) for r in range(size)]
        if sd is None or sd < 0:
            return None
        shards = self.batch_get_tensor(keys)
        if any(s is None for s in shards) and alt:
            shards = self.batch_get_tensor(alt)
        if any(s is None for s in shards):
            return None
        return torch.cat(shards, dim=int(sd))

    def _read_par(self, key, target):
        """Mooncake's read targets: as_stored (the object the layout names,
        or the full one), shard (this rank's piece: the stored shard, a
        writer partition's, or cut from the full tensor), full (the object,
        or gathered from the TP shards)."""
        if _torch() is None:
            return None
        mode = getattr(target, "mode", "as_stored") if target is not None else "as_stored"
        par = getattr(target, "parallelism", None) if target is not None else None
        axes = _axes_of(par) if par is not None else None
        if par is not None and axes is None:
            return None
        if mode == "as_stored":
            return self.get_tensor(_par_key(key, axes) if axes else key)
        if mode == "full":
            t = self.get_tensor(key)
            return t if t is not None else self._gather_tp(key, axes)
        if not axes:
            return None
        t = self.get_tensor(_par_key(key, axes))
        if t is not None:
            return t
        ti = _tp_index(axes)
        if ti is None:
            return None
        tp = axes[ti]
        if len(axes) == 1 and tp.split_dim is not None:
            t = self.get_tensor(_writer_key(key, (tp.rank, tp.size, tp.split_dim)))
            if t is not None:
                return t
        full = self.get_tensor(key)
        if full is None:
            full = self._gather_tp(key, None)
        if full is None or tp.split_dim is None or not tp.split_dim < full.dim() or \
                full.shape[tp.split_dim] % tp.size:
            return None
        start, n = _shard_range(full.shape[tp.split_dim], tp.rank, tp.size)
        return full.narrow(tp.split_dim, start, n).contiguous()

    def get_tensor_with_parallelism(self, key, target=None):
        return self._read_par(key, target)

    def batch_get_tensor_with_parallelism(self, keys, targets=None):
        keys = list(keys)
        if targets is None:
            return self.batch_get_tensor(keys)
        targets = list(targets)
        if len(targets) != len(keys):
            return [None] * len(keys)
        return [self._read_par(k, t) for k, t in zip(keys, targets)]

    def get_tensor_with_parallelism_into(self, key, buffer_ptr, size, target=None):
        """As get_tensor_with_parallelism, the result laid out as
        [TensorMetadata][data] in the buffer and viewed there."""
        t = self._read_par(key, target)
        if t is None or not buffer_ptr:
            return None
        inf = _info(t)
        if inf is None or META_SIZE + inf.nbytes > size:
            return None
        meta = ctypes.create_string_buffer(inf.meta, META_SIZE)
        _kvpool._memcpy_many([buffer_ptr, buffer_ptr + META_SIZE],
                             [ctypes.addressof(meta), inf.ptr], [META_SIZE, inf.nbytes])
        return _from_address(buffer_ptr, META_SIZE + inf.nbytes)

    def batch_get_tensor_with_parallelism_into(self, keys, buffer_ptrs, sizes, targets=None):
        keys, buffer_ptrs, sizes = list(keys), list(buffer_ptrs), list(sizes)
        if not (len(keys) == len(buffer_ptrs) == len(sizes)):
            return [INVALID_PARAMS] * len(keys)
        if targets is None:
            return self.batch_get_tensor_into(keys, buffer_ptrs, sizes)
        targets = list(targets)
        if len(targets) != len(keys):
            return [INVALID_PARAMS] * len(keys)
        return [self.get_tensor_with_parallelism_into(k, p, s, t)
                for k, p, s, t in zip(keys, buffer_ptrs, sizes, targets)]

    # ---- safetensors ---------------------------------------------------------------

    def save_tensor_to_safetensor(self, key, file_name=None):
        """Writes the tensor under key to a safetensors file (named after the
        key by default), the tensor named key inside; 0, FILE_NOT_FOUND when
        there is no tensor, INVALID_PARAMS when the file cannot be written."""
        t = self.get_tensor(key)
        if t is None:
            return FILE_NOT_FOUND
        try:
            _safetensors_save({key: t}, key if file_name is None else file_name)
        except (OSError, ValueError, TypeError):
            return INVALID_PARAMS
        return OK

    def load_tensor_from_safetensor(self, key=None, file_name=None):
        """Stores a tensor of a safetensors file under key (default: the file
        name): the tensor named key, else the file's first; returns it, or
        None."""
        if file_name is None:
            return None
        try:
            tensors = _safetensors_load(file_name)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not tensors:
            return None
        store_key = file_name if key is None else key
        name = store_key if key is not None and store_key in tensors else next(iter(tensors))
        t = tensors[name]
        return t if self.put_tensor(store_key, t) == 0 else None


# ---- safetensors (the file format, without the safetensors package) ----------------


def _safetensors_save(tensors, path):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _SAFE_NAMES[_t["name"][t.dtype]], "shape": list(t.shape),
                        "data_offsets": [off, off + n]}
        blobs.append(ctypes.string_at(t.data_ptr(), n) if n else b"")
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp-%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def _safetensors_load(path):
    torch = _torch()
    if torch is None:
        return {}
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + hlen])
    base = 8 + hlen
    by_safe = {v: k for k, v in _SAFE_NAMES.items()}
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        dtype = getattr(torch, by_safe[d["dtype"]])
        b, e = d["data_offsets"]
        if e == b:
            out[name] = torch.empty(d["shape"], dtype=dtype)
            continue
        buf = bytearray(data[base + b:base + e])
        out[name] = torch.frombuffer(buf, dtype=dtype).reshape(d["shape"])
    return out


# ---- module-level helpers --------------------------------------------------------


def _serialize_tensor(tensor):
    """(metadata bytes, data address, data size, owner) of a tensor in
    Mooncake's object layout; ValueError for what is not a supported tensor."""
    inf = _info(tensor)
    if inf is None:
        raise ValueError("unsupported tensor for Mooncake tensor serialization")
    return inf.meta, inf.ptr, inf.nbytes, inf.t


def _tensor_metadata_size():
    return META_SIZE


def _deserialize_tensor(payload):
    """A tensor from bytes in Mooncake's object layout (metadata + data)."""
    b = bytearray(payload)
    meta = parse_meta(memoryview(b), len(b)) if _torch() is not None else None
    t = _from_mem(b, len(b), meta) if meta else None
    if t is None:
        raise ValueError("invalid serialized Mooncake tensor payload")
    return t

"""kvpool: a distributed KV-cache pool, with Mooncake Store's Python API.

`kvpool.MooncakeDistributedStore` (also `kvpool.DistributedStore`) has every
method of Mooncake's `mooncake.store.MooncakeDistributedStore` (commit
3b5a59413) with Mooncake's argument forms, return values and error codes; the
module has Mooncake's classes, enums and helpers (ReplicateConfig,
SoftPinAction, ReplicaDescriptor, BufferPool, ...). The C extension
(kvpool._kvpool) does the I/O; the tensor calls, sessions and ranged reads are
Python on top of it. docs/python.md has the details and the short list of
what has no meaning here.
"""
import enum as _enum

from . import _kvpool
from ._kvpool import (BufferHandle, __version__, bind_to_numa_node, errname,  # noqa: F401
                      get_alloc_func_addr, get_free_func_addr, strerror, to_mooncake)
from ._store import StoreMixin as _StoreMixin
from ._tensor import (TensorMixin as _TensorMixin, _deserialize_tensor,  # noqa: F401
                      _serialize_tensor, _tensor_metadata_size)
from ._types import *  # noqa: F401,F403
from ._types import __all__ as _types_all
from .engram import EngramStore, EngramStoreConfig  # noqa: F401
from .buffer_pool import (BufferLease, BufferLeaseView, BufferPool,  # noqa: F401
                          RegisteredBufferLease, RegisteredBufferLeaseView, RegisteredBufferPool)


class NamespaceMismatchError(RuntimeError):
    """declare_namespace: the namespace exists with another model fingerprint
    (model, dtype, page_size, layout, tp); the message names both."""


class ErrorCode(_enum.IntEnum):
    """Mooncake's ErrorCode (mooncake-store/include/types.h), every value."""
    OK = 0
    INTERNAL_ERROR = -1
    BUFFER_OVERFLOW = -10
    SHARD_INDEX_OUT_OF_RANGE = -100
    SEGMENT_NOT_FOUND = -101
    SEGMENT_ALREADY_EXISTS = -102
    CLIENT_NOT_FOUND = -103
    NO_AVAILABLE_HANDLE = -200
    INVALID_VERSION = -300
    INVALID_KEY = -400
    WRITE_FAIL = -500
    INVALID_PARAMS = -600
    ILLEGAL_CLIENT = -601
    INVALID_WRITE = -700
    INVALID_READ = -701
    INVALID_REPLICA = -702
    REPLICA_IS_NOT_READY = -703
    OBJECT_NOT_FOUND = -704
    OBJECT_ALREADY_EXISTS = -705
    OBJECT_HAS_LEASE = -706
    LEASE_EXPIRED = -707
    OBJECT_HAS_REPLICATION_TASK = -708
    OBJECT_NO_REPLICATION_TASK = -709
    REPLICA_NOT_FOUND = -710
    REPLICA_ALREADY_EXISTS = -711
    REPLICA_IS_GONE = -712
    REPLICA_NOT_IN_LOCAL_MEMORY = -713
    OBJECT_REPLICA_BUSY = -714
    TRANSFER_FAIL = -800
    CHECKSUM_MISMATCH = -801
    RPC_FAIL = -900
    RPC_TIMEOUT = -901
    ETCD_OPERATION_ERROR = -1000
    ETCD_KEY_NOT_EXIST = -1001
    ETCD_TRANSACTION_FAIL = -1002
    ETCD_CTX_CANCELLED = -1003
    OPLOG_ENTRY_NOT_FOUND = -1004
    K8S_LEASE_OPERATION_ERROR = -1005
    K8S_LEASE_NOT_FOUND = -1006
    INCOMPLETE_OPLOG_CATCH_UP = -1007
    UNAVAILABLE_IN_CURRENT_STATUS = -1010
    UNAVAILABLE_IN_CURRENT_MODE = -1011
    NOT_SUPPORTED = -1012
    FILE_NOT_FOUND = -1100
    FILE_OPEN_FAIL = -1101
    FILE_READ_FAIL = -1102
    FILE_WRITE_FAIL = -1103
    FILE_INVALID_BUFFER = -1104
    FILE_LOCK_FAIL = -1105
    FILE_INVALID_HANDLE = -1106
    BUCKET_NOT_FOUND = -1200
    BUCKET_ALREADY_EXISTS = -1201
    KEYS_EXCEED_BUCKET_LIMIT = -1202
    KEYS_ULTRA_LIMIT = -1203
    UNABLE_OFFLOAD = -1300
    UNABLE_OFFLOADING = -1301
    SERIALIZE_UNSUPPORTED = -1500
    SERIALIZE_FAIL = -1501
    DESERIALIZE_FAIL = -1502
    PERSISTENT_FAIL = -1503
    TASK_NOT_FOUND = -1400
    TASK_PENDING_LIMIT_EXCEEDED = -1401
    JOB_NOT_FOUND = -1402
    DFS_NETWORK_TIMEOUT = -1600
    DFS_SERVICE_UNAVAILABLE = -1601
    DFS_QUOTA_EXCEEDED = -1602
    DFS_PERMISSION_DENIED = -1603
    DFS_STALE_HANDLE = -1604
    DFS_PARTIAL_WRITE = -1605
    TENANT_QUOTA_EXCEEDED = -1700
    TENANT_NOT_REGISTERED = -1701
    TENANT_NOT_EMPTY = -1702


# Mooncake's codes as module constants (OBJECT_NOT_FOUND = -704, ...) and by
# value; kvpool's own KVP_E* codes as the extension defines them.
globals().update({e.name: int(e) for e in ErrorCode})
ERROR_NAMES = {int(e): e.name for e in ErrorCode}
for _n in dir(_kvpool):
    if _n.startswith("KVP_"):
        globals()[_n] = getattr(_kvpool, _n)


class MooncakeDistributedStore(_StoreMixin, _TensorMixin, _kvpool.DistributedStore):
    """A kvpool client with the methods of Mooncake's MooncakeDistributedStore.

    setup() connects (every Mooncake form: positional, keywords, a dict,
    MOONCAKE_CONFIG_PATH, MOONCAKE_* variables); a global_segment_size > 0
    also starts an embedded kvpool-node that lends that much of this
    process's memory to the pool. close() unmounts it before returning."""


DistributedStore = MooncakeDistributedStore

__all__ = (["MooncakeDistributedStore", "DistributedStore", "BufferHandle", "ErrorCode",
            "NamespaceMismatchError",
            "ERROR_NAMES", "BufferPool", "RegisteredBufferPool", "BufferLease",
            "BufferLeaseView", "EngramStore", "EngramStoreConfig", "bind_to_numa_node", "get_alloc_func_addr",
            "get_free_func_addr", "strerror", "errname", "to_mooncake"] +
           [n for n in _types_all if not n.startswith("_")] + [e.name for e in ErrorCode])
del _n

"""Mooncake Store's Python classes and enums (mooncake-integration/store/
store_py.cpp), with the same names, attributes and values: ReplicateConfig,
SoftPinAction, ObjectDataType, ReplicaStatus, the replica descriptors that
get_replica_desc returns, the task types, the tensor-parallelism specs, and
Mooncake's host-memory allocator and NVMe-oF register classes.
"""
import enum
import mmap
import operator
import threading

NOT_SUPPORTED = -1012


class SoftPinAction(enum.IntEnum):
    """Soft-pin transition requested by a put or upsert."""
    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ObjectDataType(enum.IntEnum):
    """Classification of an object (recorded by Mooncake; kvpool accepts it)."""
    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class ReplicaStatus(enum.IntEnum):
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class TaskType(enum.IntEnum):
    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(enum.IntEnum):
    PENDING = 0
    PROCESSING = 1
    SUCCESS = 2
    FAILED = 3


class ReplicateConfig:
    """Options of a put (Mooncake's ReplicateConfig, every attribute).

    replica_num: replicas, each in a different segment (1..8).
    soft_pin_action / soft_pin_ttl_ms: ENABLE pins against eviction for the
        TTL (None: the master's default); DISABLE and PRESERVE do not pin.
    with_hard_pin: pinned until removed.
    preferred_segments / preferred_segment: where the first replica goes (a
        segment name as get_hostname() reports it, or a kvpool node name).
    prefer_alloc_in_same_node: the first replica on this host.
    group_ids: per-key routing groups; a batch's list must have one per key.
    nof_replica_num, dfs_replica_num, preferred_nof_segments, data_type,
    host_id: accepted and recorded (kvpool has no NVMe-oF or DFS replicas).
    """

    # Mooncake's attributes, in its order; soft_pin_ttl_ms is a property
    # over the _ttl slot.
    FIELDS = ("replica_num", "nof_replica_num", "dfs_replica_num", "soft_pin_action",
              "soft_pin_ttl_ms", "with_hard_pin", "preferred_segments",
              "preferred_nof_segments", "preferred_segment", "prefer_alloc_in_same_node",
              "data_type", "host_id", "group_ids")
    __slots__ = tuple(f for f in FIELDS if f != "soft_pin_ttl_ms") + ("_ttl",)

    def __init__(self, replica_num=1, with_soft_pin=None, with_hard_pin=False,
                 preferred_segment="", preferred_segments=None,
                 prefer_alloc_in_same_node=False, soft_pin_action=SoftPinAction.PRESERVE,
                 soft_pin_ttl_ms=None, nof_replica_num=0, dfs_replica_num=0,
                 preferred_nof_segments=None, data_type=ObjectDataType.UNKNOWN, host_id="",
                 group_ids=None):
        self.replica_num = replica_num
        self.nof_replica_num = nof_replica_num
        self.dfs_replica_num = dfs_replica_num
        self.soft_pin_action = soft_pin_action
        self.soft_pin_ttl_ms = soft_pin_ttl_ms
        self.with_hard_pin = with_hard_pin
        self.preferred_segments = list(preferred_segments or [])
        self.preferred_nof_segments = list(preferred_nof_segments or [])
        self.preferred_segment = preferred_segment
        self.prefer_alloc_in_same_node = prefer_alloc_in_same_node
        self.data_type = data_type
        self.host_id = host_id
        self.group_ids = group_ids
        if with_soft_pin is not None:
            self.with_soft_pin = with_soft_pin

    # Mooncake's field is std::optional<uint64_t>: pybind11 refuses
    # anything else with TypeError when it is set, and so does this.
    @property
    def soft_pin_ttl_ms(self):
        return self._ttl

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, v):
        if v is not None:
            try:
                if isinstance(v, float):
                    raise TypeError
                v = operator.index(v)
            except TypeError:
                raise TypeError("soft_pin_ttl_ms must be None or an int in [0, 2**64), not %s"
                                % type(v).__name__) from None
            if not 0 <= v < 1 << 64:
                raise TypeError("soft_pin_ttl_ms must be None or an int in [0, 2**64), not %d"
                                % v)
        self._ttl = v

    # Mooncake before SoftPinAction had a bool; it maps onto the action.
    @property
    def with_soft_pin(self):
        return self.soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, v):
        self.soft_pin_action = SoftPinAction.ENABLE if v else SoftPinAction.PRESERVE

    def __str__(self):
        ttl = "default" if self.soft_pin_ttl_ms is None else str(self.soft_pin_ttl_ms)
        s = ("ReplicateConfig: { replica_num: %d, nof_replica_num: %d, dfs_replica_num: %d, "
             "soft_pin_action: %s, soft_pin_ttl_ms: %s, with_hard_pin: %d, "
             "preferred_segments: [%s]" % (
                 self.replica_num, self.nof_replica_num, self.dfs_replica_num,
                 SoftPinAction(self.soft_pin_action).name, ttl, bool(self.with_hard_pin),
                 ", ".join(self.preferred_segments)))
        if self.preferred_segment:
            s += ", preferred_segment (deprecated): " + self.preferred_segment
        s += ", preferred_nof_segments: [%s], prefer_alloc_in_same_node: %d, data_type: %s" % (
            ", ".join(self.preferred_nof_segments), bool(self.prefer_alloc_in_same_node),
            ObjectDataType(self.data_type).name)
        if self.host_id:
            s += ", host_id: " + self.host_id
        if self.group_ids is not None:
            s += ", group_ids: [%s]" % ", ".join(self.group_ids)
        return s + " }"

    __repr__ = __str__


class Descriptor:
    """An allocated buffer: Mooncake's AllocatedBuffer::Descriptor. In kvpool
    buffer_address is the extent's offset in its segment, transport_endpoint
    the owning node's data endpoint (its name when unknown)."""

    def __init__(self, size=0, buffer_address=0, transport_endpoint=""):
        self.size = size
        self.buffer_address = buffer_address
        self.transport_endpoint = transport_endpoint

    def __repr__(self):
        return "<Descriptor size=%d buffer_address=%d transport_endpoint=%s>" % (
            self.size, self.buffer_address, self.transport_endpoint)


class MemoryDescriptor:
    def __init__(self, buffer_descriptor=None):
        self.buffer_descriptor = buffer_descriptor or Descriptor()


class DiskDescriptor:
    def __init__(self, file_path="", object_size=0):
        self.file_path = file_path
        self.object_size = object_size


class LocalDiskDescriptor:
    """A replica in the spill file of the node that holds it: Mooncake's
    LocalDiskDescriptor (its client's own SSD tier, read through that
    client). client_id is (0, 0): a kvpool node has no client UUID."""

    def __init__(self, client_id=(0, 0), object_size=0, transport_endpoint=""):
        self.client_id = client_id
        self.object_size = object_size
        self.transport_endpoint = transport_endpoint

    def __repr__(self):
        return "<LocalDiskDescriptor object_size=%d transport_endpoint=%s>" % (
            self.object_size, self.transport_endpoint)


class ReplicaDescriptor:
    """One replica of an object (get_replica_desc). A memory replica lives in a
    node's /dev/shm segment; a replica a node spilled to its own file is
    Mooncake's LOCAL_DISK kind (is_local_disk_replica(), not
    is_disk_replica(), which is Mooncake's shared-filesystem tier)."""

    def __init__(self, status, memory=None, disk=None, node="", local_disk=None):
        self._status = ReplicaStatus(status)
        self._memory = memory
        self._disk = disk
        self._local_disk = local_disk
        self.segment_name = node

    @property
    def status(self):
        return self._status

    def is_memory_replica(self):
        return self._memory is not None

    def is_disk_replica(self):
        return self._disk is not None

    def is_local_disk_replica(self):
        return self._local_disk is not None

    def get_memory_descriptor(self):
        if self._memory is None:
            raise RuntimeError("Expected MemoryDescriptor")
        return self._memory

    def get_disk_descriptor(self):
        if self._disk is None:
            raise RuntimeError("Expected DiskDescriptor")
        return self._disk

    def get_local_disk_descriptor(self):
        """kvpool: Mooncake's C++ descriptor has it, its binding does not."""
        if self._local_disk is None:
            raise RuntimeError("Expected LocalDiskDescriptor")
        return self._local_disk

    def __repr__(self):
        kind = ("memory" if self._memory is not None else
                "local_disk" if self._local_disk is not None else "disk")
        return "<ReplicaDescriptor %s %s on %s>" % (kind, self._status.name, self.segment_name)


class QueryTaskResponse:
    """The state of a copy or move task (query_task)."""

    def __init__(self, id=(0, 0), type=TaskType.REPLICA_COPY, status=TaskStatus.PENDING,
                 created_at_ms_epoch=0, last_updated_at_ms_epoch=0, assigned_client=(0, 0),
                 message=""):
        self._v = dict(id=id, type=TaskType(type), status=TaskStatus(status),
                       created_at_ms_epoch=created_at_ms_epoch,
                       last_updated_at_ms_epoch=last_updated_at_ms_epoch,
                       assigned_client=assigned_client, message=message)

    def __getattr__(self, name):
        try:
            return self.__dict__["_v"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self):
        v = self._v
        return ('QueryTaskResponse(id=%s, type=%d, status=%d, created_at=%d, '
                'last_updated_at=%d, assigned_client=%s, message="%s")' % (
                    v["id"], v["type"], v["status"], v["created_at_ms_epoch"],
                    v["last_updated_at_ms_epoch"], v["assigned_client"], v["message"]))


class ParallelAxis:
    """One axis of a tensor's parallel layout: kind "tp", "dp", "ep" or "pp",
    this rank, the axis size, the split dimension (None: replicated), and an
    expert or stage id."""

    def __init__(self, kind="tp", rank=0, size=1, split_dim=None, expert_id=None,
                 stage_id=None):
        self.kind = kind
        self.rank = rank
        self.size = size
        self.split_dim = split_dim
        self.expert_id = expert_id
        self.stage_id = stage_id

    def __repr__(self):
        return "ParallelAxis(kind=%r, rank=%d, size=%d, split_dim=%r)" % (
            self.kind, self.rank, self.size, self.split_dim)


class TensorParallelism:
    def __init__(self, axes=None):
        self.axes = list(axes or [])

    def __repr__(self):
        return "TensorParallelism(axes=%r)" % (self.axes,)


class ReadTarget:
    """What a parallel read wants: "as_stored", "shard" (this rank's piece of
    parallelism) or "full" (the whole tensor, gathered from its shards)."""

    _MODES = ("as_stored", "shard", "full")

    def __init__(self, mode="as_stored", parallelism=None):
        self._mode = "as_stored"
        self.mode = mode
        self.parallelism = parallelism

    @property
    def mode(self):
        return self._mode

    @mode.setter
    def mode(self, m):
        m = str(m).lower()
        if m not in self._MODES:
            raise RuntimeError("Unsupported ReadTarget mode")
        self._mode = m


class MooncakeHostMemAllocator:
    """Page-backed host memory by address (Mooncake's shared-memory helper):
    alloc(size) -> address (0 when out of memory), free(address) -> 0 or -1."""

    def __init__(self):
        self._maps = {}
        self._lock = threading.Lock()

    def alloc(self, size):
        try:
            m = mmap.mmap(-1, max(int(size), 1))
        except (OSError, ValueError):
            return 0
        import ctypes
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        with self._lock:
            self._maps[addr] = m
        return addr

    def free(self, ptr):
        with self._lock:
            m = self._maps.pop(int(ptr), None)
        if m is None:
            return -1
        try:
            m.close()
        except BufferError:  # a ctypes view still exported: the mapping goes with it
            pass
        return 0


class MooncakeDistributedNoFRegister:
    """Mooncake's NVMe-oF segment registration. kvpool's disk tier is each
    node's spill file: there is nothing to register, and both calls return
    NOT_SUPPORTED."""

    def real_register(self, nqn="", nsid=1, traddr="", trsvcid=4420, base=0, size=1024,
                      master_server_addr="127.0.0.1:50051"):
        return NOT_SUPPORTED

    def real_unregister_by_endpoint(self, nqn="", nsid=1, traddr="", trsvcid=4420,
                                    master_server_addr="127.0.0.1:50051"):
        return NOT_SUPPORTED


def _get_pyclient_from_wrapper(wrapper):
    """Mooncake hands its C++ client to EngramStore as a capsule; kvpool has
    no such object (None, as Mooncake returns for a store not set up)."""
    return None


__all__ = ["SoftPinAction", "ObjectDataType", "ReplicaStatus", "TaskType", "TaskStatus",
           "ReplicateConfig", "Descriptor", "MemoryDescriptor", "DiskDescriptor",
           "LocalDiskDescriptor",
           "ReplicaDescriptor", "QueryTaskResponse", "ParallelAxis", "TensorParallelism",
           "ReadTarget", "MooncakeHostMemAllocator", "MooncakeDistributedNoFRegister",
           "_get_pyclient_from_wrapper"]

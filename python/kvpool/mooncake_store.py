"""What `mooncake.store` is when kvpool stands in for Mooncake Store (see
kvpool_mooncake): everything Mooncake's extension module exports, from
kvpool — MooncakeDistributedStore, ReplicateConfig, SoftPinAction, the
replica and task types, BufferHandle, BufferPool, the ErrorCode values by
name, bind_to_numa_node, the tensor helpers."""
import kvpool as _kvpool
from kvpool import *  # noqa: F401,F403
from kvpool import (_deserialize_tensor, _get_pyclient_from_wrapper,  # noqa: F401
                    _serialize_tensor, _tensor_metadata_size)

__all__ = list(_kvpool.__all__)

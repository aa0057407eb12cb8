"""mooncake.store backed by kvpool: MooncakeDistributedStore is
kvpool.DistributedStore (same class), ReplicateConfig and BufferHandle are
kvpool's, and the ErrorCode values are module constants (OBJECT_NOT_FOUND,
...). See kvpool's docs/python.md for what differs from Mooncake."""
import kvpool as _kvpool
from kvpool import (  # noqa: F401
    BufferHandle,
    DistributedStore,
    MooncakeDistributedStore,
    ReplicateConfig,
)

# Mooncake's ErrorCode values by name (OBJECT_NOT_FOUND = -704, ...).
for _code, _name in _kvpool.ERROR_NAMES.items():
    globals()[_name] = _code
del _code, _name

__all__ = ["MooncakeDistributedStore", "DistributedStore", "ReplicateConfig",
           "BufferHandle"] + sorted(_kvpool.ERROR_NAMES.values())

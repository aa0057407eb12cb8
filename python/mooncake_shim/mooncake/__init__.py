"""kvpool's stand-in for the `mooncake` package: only `mooncake.store`, which
re-exports the kvpool module under Mooncake's names, so engines written for
Mooncake Store (`from mooncake.store import MooncakeDistributedStore`) run on
a kvpool pool unchanged. Installed by `make install-mooncake-shim`."""

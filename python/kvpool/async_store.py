"""MooncakeDistributedStoreAsync (Mooncake's mooncake.async_store): every
method also as `async_<name>`, run in the event loop's executor."""
import asyncio
import functools

from kvpool import MooncakeDistributedStore


class MooncakeDistributedStoreAsync(MooncakeDistributedStore):
    def __getattr__(self, name):
        if not name.startswith("async_"):
            raise AttributeError("%r object has no attribute %r" % (type(self).__name__, name))
        sync = getattr(self, name[6:], None)
        if not callable(sync):
            raise AttributeError("%r object has no attribute %r (nor %r)" % (
                type(self).__name__, name, name[6:]))

        @functools.wraps(sync)
        async def wrapper(*args, **kwargs):
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, functools.partial(sync, *args, **kwargs))

        setattr(self, name, wrapper)
        return wrapper

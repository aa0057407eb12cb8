"""BufferPool: registered host buffers leased to callers (Mooncake's
mooncake.buffer_pool / mooncake.store.BufferPool).

A pool belongs to a set-up store. acquire(size) leases a buffer of at least
size bytes that is registered with the store (the zero-copy put_from /
get_into path): lease.ptr, lease.size, lease.buffer (a writable memoryview
of size bytes), lease.release() or a with block. Freed buffers are kept for
the next lease of the same size class (powers of two from min_size_class).
When max_bytes are leased, acquire waits (block_on_exhaustion, timeout) or
raises RuntimeError, as Mooncake's does.
"""
import sys
import threading
import time

from . import _kvpool

__all__ = ["BufferPool", "RegisteredBufferPool", "BufferLease", "RegisteredBufferLease",
           "BufferLeaseView", "RegisteredBufferLeaseView"]

_DEFAULT_MAX = 1 << 30


# lease.buffer is a memoryview (Mooncake's BufferLeaseView exports the same).
BufferLeaseView = memoryview


class BufferLease:
    __slots__ = ("_pool", "_handle", "_size", "__weakref__")

    def __init__(self, pool, handle, size):
        self._pool, self._handle, self._size = pool, handle, size

    @property
    def ptr(self):
        if self._handle is None:
            raise RuntimeError("buffer lease is closed")
        return self._handle.ptr()

    @property
    def size(self):
        return self._size

    @property
    def buffer(self):
        if self._handle is None:
            raise RuntimeError("buffer lease is closed")
        return memoryview(self._handle)[:self._size]

    def release(self):
        """Returns the buffer to the pool; RuntimeError while a memoryview of
        lease.buffer is still alive."""
        if self._handle is None:
            return
        # The lease, the getrefcount argument: anything more is an exported view.
        if sys.getrefcount(self._handle) > 2:
            raise RuntimeError("cannot release buffer while exported views exist")
        h, self._handle = self._handle, None
        self._pool._give_back(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        if self._handle is not None and self._pool is not None:
            try:
                h, self._handle = self._handle, None
                self._pool._give_back(h)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


class BufferPool:
    def __init__(self, store, max_bytes=0, min_size_class=64 * 1024, max_size_class=None,
                 alignment=8 * 1024 * 1024, block_on_exhaustion=True, default_timeout=None,
                 max_regions=None, prewarm_size=None, prewarm_count=0):
        if store is None or store.health_check() == 1:
            raise RuntimeError("MooncakeDistributedStore is not initialized")
        if min_size_class <= 0 or alignment <= 0:
            raise RuntimeError("min_size_class and alignment must be positive")
        if alignment < 8 or alignment & (alignment - 1):
            raise RuntimeError("alignment must be a power of two and at least sizeof(void*)")
        self._store = store
        self._max = int(max_bytes) if max_bytes else _DEFAULT_MAX
        self._min = int(min_size_class)
        self._max_class = self._max if max_size_class is None else int(max_size_class)
        self._block = bool(block_on_exhaustion)
        self._timeout = default_timeout
        self._max_regions = max_regions
        self._cv = threading.Condition()
        self._free = {}          # size class -> [handle]
        self._leased = 0         # bytes leased
        self._regions = 0
        self._closed = False
        if prewarm_size and prewarm_count:
            self.prewarm(prewarm_size, prewarm_count)

    def _class(self, size):
        c = self._min
        while c < size:
            c <<= 1
        return c if size <= self._max_class else size

    def _new(self, n):
        h = _kvpool._alloc_buffer(n)
        if self._store.register_buffer(h.ptr(), n) != 0:
            raise RuntimeError("cannot register a buffer with the store")
        self._regions += 1
        return h

    def acquire(self, size, block=None, timeout=None):
        size = int(size)
        n = self._class(max(size, 1))
        if n > self._max:
            raise RuntimeError("requested buffer size exceeds pool capacity")
        block = self._block if block is None else bool(block)
        timeout = self._timeout if timeout is None else timeout
        if timeout is not None and timeout < 0:
            raise RuntimeError("timeout must be non-negative")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while True:
                if self._closed:
                    raise RuntimeError("buffer pool is closed")
                if self._leased + n <= self._max and (
                        self._free.get(n) or self._max_regions is None or
                        self._regions < self._max_regions):
                    break
                if not block:
                    raise RuntimeError("buffer pool is exhausted")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise RuntimeError("timed out waiting for buffer")
                self._cv.wait(left)
            self._leased += n
            free = self._free.get(n)
            h = free.pop() if free else None
        if h is None:
            try:
                h = self._new(n)
            except Exception:
                with self._cv:
                    self._leased -= n
                    self._cv.notify_all()
                raise
        return BufferLease(self, h, size)

    buffer = acquire

    def _give_back(self, h):
        with self._cv:
            self._leased -= len(h)
            if not self._closed:
                self._free.setdefault(len(h), []).append(h)
            self._cv.notify_all()

    def prewarm(self, size, count):
        """Mooncake accepts and ignores it; here it allocates and registers
        count buffers of size's class ahead of time."""
        n = self._class(max(int(size), 1))
        hs = [self._new(n) for _ in range(int(count))]
        with self._cv:
            self._free.setdefault(n, []).extend(hs)

    def close(self):
        with self._cv:
            if self._closed:
                return
            if self._leased:
                raise RuntimeError("cannot close buffer pool with active leases")
            self._closed = True
            free, self._free = self._free, {}
        for hs in free.values():
            for h in hs:
                self._store.unregister_buffer(h.ptr())


RegisteredBufferPool = BufferPool
RegisteredBufferLease = BufferLease
RegisteredBufferLeaseView = BufferLeaseView

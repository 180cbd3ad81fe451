"""fullpipe's own stream-ordered device memory pool (cudaMallocAsync / cudaFreeAsync).

Why a pool of its own: the device's default pool is shared by every library in
the process (PyTorch's cudaMallocAsync backend, CuPy, RMM ...). Changing its
release threshold would change their behaviour behind their back, so fullpipe
creates a pool for itself and never touches the default one.

Stream-ordered means: ``allocate(n, stream)`` and ``free(buf, stream)`` are
enqueued on ``stream`` like a kernel (``cuMemAllocFromPoolAsync`` /
``cuMemFreeAsync``). The host does not wait, and later allocations on the same
stream reuse the memory at once.

Cross-stream reuse is ordered by events, never by a device-wide sync. The pool
keeps the driver's three reuse policies switched on (see
:meth:`DevicePool.reuse_policies`):

- *follow event dependencies*: memory freed on stream A is reused by an
  allocation on stream B when B already waits (``cuStreamWaitEvent``) on an
  event recorded on A after the free;
- *opportunistic*: a free whose stream has already passed it (completed work)
  can be reused by any stream, no dependency needed;
- *internal dependencies*: otherwise the driver may insert such an event wait
  into B itself.

None of these ever waits for the whole device. What the driver cannot know is a
buffer used on a stream other than the one it is freed on: that ordering is the
caller's, and :meth:`DevicePool.hand_off` does it with one event (record on the
stream that last used the buffer, wait on the stream that uses or frees it next).

Release threshold: how many bytes the pool may keep reserved when a stream,
event or the context synchronizes. ``0`` returns free memory to the driver at
every synchronization (a trip to the OS next time); ``"max"`` keeps it all.
``trim(keep)`` returns memory above ``keep`` bytes right now.

Interop: the pool's handle can back other libraries so that a whole
application shares one pool:

- CuPy: ``cupy.cuda.set_allocator(pool.cupy_allocator().malloc)``, i.e.
  ``cupy.cuda.MemoryAsyncPool(pool_handles=int(pool.handle))``; CuPy then
  allocates on its current stream from this pool.
- RMM: ``rmm.mr.set_current_device_resource(rmm.mr.CudaAsyncViewMemoryResource(pool.handle))``
  (``pool.rmm_resource()``). The view does not own the pool: keep the
  DevicePool alive while RMM uses it.
- PyTorch and CuPy see pool arrays without copies: ``torch.as_tensor(pool.empty(...),
  device="cuda")``, ``cupy.asarray(pool.empty(...))``.

Out of memory: one trim-and-retry (synchronize the allocating stream so its
pending frees land, return the pool's unused memory, try again), then a
:class:`MemoryError` that says how much was asked, used, reserved and free.
Nothing else is freed behind the user's back.

Thread safety: allocate/free may be called from several host threads at once;
the pool's driver calls and counters are under locks (each call holds its lock
for microseconds; the device work stays asynchronous). Any thread may use the
pool: each call makes the pool's device current in the calling thread if it is
not (a thread-local check; a driver call only the first time in a thread, see
``device.ensure_current``).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import numpy as np

from ..errors import CudaError
from . import driver as drv
from .device import device_index, ensure_current, thread_context
from .hotpath import HotPath, handle_int
from .memory import DeviceArray

UINT64_MAX = 2**64 - 1

_REUSE_ATTRS = {
    "follow_event_dependencies": "CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES",
    "opportunistic": "CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC",
    "internal_dependencies": "CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES",
}


@dataclasses.dataclass(frozen=True)
class PoolStats:
    """A snapshot of the pool. Bytes come from the driver's pool attributes (they count
    every allocation from this pool, also CuPy's/RMM's when they share it); the
    allocation counts are of allocations made through this DevicePool object."""

    reserved_bytes: int
    reserved_high_bytes: int
    used_bytes: int
    used_high_bytes: int
    allocations: int  # live allocations made through this DevicePool object
    allocations_high: int = 0  # most live allocations at once since the last reset
    allocations_total: int = 0  # allocate() calls that succeeded, ever
    oom_retries: int = 0  # times an allocation needed the trim-and-retry

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def parse_threshold(value: int | str) -> int:
    """``0``, a byte count or ``"max"`` -> the driver's release threshold in bytes."""
    if value == "max":
        return UINT64_MAX
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"release_threshold must be 0, a byte count or 'max', got {value!r}")
    return min(int(value), UINT64_MAX)


_parse_threshold = parse_threshold  # old private name


def _is_out_of_memory(exc: BaseException) -> bool:
    e: BaseException | None = exc
    while e is not None:
        if isinstance(e, CudaError) and "OUT_OF_MEMORY" in str(e.name):
            return True
        text = str(e)
        if "OUT_OF_MEMORY" in text or "out of memory" in text.lower():
            return True
        e = e.__cause__
    return False


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


class DevicePool:
    """A memory pool owned by fullpipe on one device.

    >>> pool = DevicePool(dev, release_threshold="max")
    >>> buf = pool.allocate(1 << 20, stream)      # cuda.core Buffer, stream-ordered
    >>> pool.free(buf, stream)

    ``max_size`` (bytes, optional) caps how much the pool may ever reserve; an
    allocation beyond it fails with MemoryError like a full device would.
    """

    def __init__(self, device: Any, release_threshold: int | str = "max", *, max_size: int | None = None):
        from cuda.core import DeviceMemoryResource, DeviceMemoryResourceOptions

        if max_size is not None and (
            isinstance(max_size, bool) or not isinstance(max_size, (int, np.integer)) or max_size <= 0
        ):
            raise ValueError(f"max_size must be a positive byte count or None, got {max_size!r}")
        threshold = parse_threshold(release_threshold)  # validate before creating anything
        self.device = device
        self.max_size = None if max_size is None else int(max_size)
        self._device_index = device_index(device)
        ensure_current(self._device_index)
        core = getattr(device, "core", device)
        with drv.translated("cuMemPoolCreate"):
            self.resource = DeviceMemoryResource(
                core, DeviceMemoryResourceOptions(max_size=self.max_size or 0)
            )
        self._lock = threading.Lock()  # fullpipe's counters
        self._driver_lock = threading.Lock()  # one allocate/free driver call at a time (see below)
        self._live = 0
        self._live_high = 0
        self._total = 0
        self._oom_retries = 0
        self._hot_local = threading.local()
        self._handle_int = handle_int(self.resource.handle)
        self._set_attr("CU_MEMPOOL_ATTR_RELEASE_THRESHOLD", threshold)

    def __repr__(self) -> str:
        s = self.stats()
        return (f"DevicePool(used={_mib(s.used_bytes)}, reserved={_mib(s.reserved_bytes)}, "
                f"live allocations={s.allocations}, release_threshold={self.release_threshold})")

    # ------------------------------------------------------------------ handle & attrs
    @property
    def handle(self) -> Any:
        """The CUmemoryPool handle (for CuPy ``MemoryAsyncPool(pool_handles=int(handle))``, RMM)."""
        return self.resource.handle

    def _current(self) -> None:
        """Make the pool's device current in this thread (a thread-local check)."""
        if thread_context.device != self._device_index:
            ensure_current(self._device_index)

    def _set_attr(self, name: str, value: int) -> None:
        from cuda.bindings import driver

        self._current()
        attr = getattr(driver.CUmemPool_attribute, name)
        wrapped = int(value) if name in _REUSE_ATTRS.values() else driver.cuuint64_t(value)
        drv.call("cuMemPoolSetAttribute", self.handle, attr, wrapped)

    def _get_attr(self, name: str) -> int:
        from cuda.bindings import driver

        self._current()
        value = drv.call("cuMemPoolGetAttribute", self.handle, getattr(driver.CUmemPool_attribute, name))
        return int(value)

    @property
    def release_threshold(self) -> int:
        """Bytes the pool keeps reserved at a synchronization (2**64-1 for ``"max"``)."""
        return int(self.resource.attributes.release_threshold)

    @release_threshold.setter
    def release_threshold(self, value: int | str) -> None:
        self._set_attr("CU_MEMPOOL_ATTR_RELEASE_THRESHOLD", parse_threshold(value))

    def reuse_policies(self) -> dict[str, bool]:
        """The driver's cross-stream reuse policies for this pool (all on by default)."""
        return {k: bool(self._get_attr(v)) for k, v in _REUSE_ATTRS.items()}

    def set_reuse_policies(self, **policies: bool) -> None:
        """Switch reuse policies, e.g. ``set_reuse_policies(internal_dependencies=False)``
        (the driver then never adds a stream dependency of its own; memory freed on
        another stream is reused only after an event wait or once the free completed)."""
        for k, v in policies.items():
            if k not in _REUSE_ATTRS:
                raise ValueError(f"unknown reuse policy {k!r}; known: {', '.join(_REUSE_ATTRS)}")
            self._set_attr(_REUSE_ATTRS[k], 1 if v else 0)

    # ------------------------------------------------------------------ statistics
    def stats(self) -> PoolStats:
        self._current()
        a = self.resource.attributes
        with self._lock:
            live, high, total, retries = self._live, self._live_high, self._total, self._oom_retries
        return PoolStats(
            reserved_bytes=int(a.reserved_mem_current),
            reserved_high_bytes=int(a.reserved_mem_high),
            used_bytes=int(a.used_mem_current),
            used_high_bytes=int(a.used_mem_high),
            allocations=live,
            allocations_high=high,
            allocations_total=total,
            oom_retries=retries,
        )

    def reset_high_water_marks(self) -> None:
        """Reset the reserved/used high-water marks (to the current values) and the
        live-allocation high-water mark."""
        self._set_attr("CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH", 0)
        self._set_attr("CU_MEMPOOL_ATTR_USED_MEM_HIGH", 0)
        with self._lock:
            self._live_high = self._live

    def trim(self, keep_bytes: int = 0) -> None:
        """Return reserved-but-unused memory above ``keep_bytes`` to the driver now.

        Frees still pending on a stream are not yet unused: synchronize that stream
        first if they should go too."""
        if isinstance(keep_bytes, bool) or not isinstance(keep_bytes, (int, np.integer)) or keep_bytes < 0:
            raise ValueError(f"keep_bytes must be an int >= 0, got {keep_bytes!r}")
        self._current()
        drv.call("cuMemPoolTrimTo", self.handle, int(keep_bytes))

    # ------------------------------------------------------------------ allocate / free
    def allocate(self, nbytes: int, stream: Any):
        """A cuda.core Buffer of ``nbytes``, stream-ordered on ``stream`` (a cuda.core
        Stream or any object with ``__cuda_stream__``). ``int(buf.handle)`` is the
        device pointer. Use it on ``stream`` (or after :meth:`hand_off`).

        On out-of-memory: one trim-and-retry, then MemoryError with the numbers.
        """
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
            raise ValueError(f"allocation size must be a positive int, got {nbytes!r}")
        nbytes = int(nbytes)
        stream = _core_stream(stream)
        self._current()

        def sync() -> None:
            with drv.translated("cuStreamSynchronize"):
                stream.sync()

        buf = self._with_oom_retry(nbytes, lambda: self._allocate_once(nbytes, stream), sync)
        self._count_allocation()
        return buf

    def _with_oom_retry(self, nbytes: int, attempt: Any, sync_stream: Any) -> Any:
        """``attempt()``; on out-of-memory: let the stream's pending frees land, trim the
        pool, try once more, then raise MemoryError with the numbers."""
        try:
            return attempt()
        except Exception as exc:
            if not _is_out_of_memory(exc):
                raise
            with self._lock:
                self._oom_retries += 1
            sync_stream()
            self.trim(0)
            try:
                return attempt()
            except Exception as exc2:
                if not _is_out_of_memory(exc2):
                    raise
                raise MemoryError(self._oom_message(nbytes)) from exc2

    def _count_allocation(self) -> None:
        with self._lock:
            self._live += 1
            self._total += 1
            if self._live > self._live_high:
                self._live_high = self._live

    def _allocate_once(self, nbytes: int, stream: Any):
        # The driver API is documented thread-safe; serializing this pool's own calls
        # costs well under a microsecond and keeps two threads from ever racing inside
        # one pool's bookkeeping (the driver's or cuda.core's).
        with self._driver_lock, drv.translated("cuMemAllocFromPoolAsync"):
            return self.resource.allocate(nbytes, stream=stream)

    def _oom_message(self, nbytes: int) -> str:
        free, total = drv.call("cuMemGetInfo")
        s = self.stats()
        cap = f"; the pool's max_size is {_mib(self.max_size)}" if self.max_size else ""
        return (
            f"fullpipe pool: cannot allocate {nbytes} bytes ({_mib(nbytes)}) even after "
            f"trimming the pool: the pool has {s.used_bytes} bytes ({_mib(s.used_bytes)}) in use "
            f"and {s.reserved_bytes} bytes ({_mib(s.reserved_bytes)}) reserved; the device has "
            f"{int(free)} bytes ({_mib(int(free))}) free of {int(total)}{cap}. Free buffers you "
            "no longer need (and synchronize the streams they were freed on), or ask for less."
        )

    def allocate_ptr(self, nbytes: int, stream: Any) -> int:
        """Like :meth:`allocate`, but returns the device pointer as an int, with no
        Buffer object: for per-batch loops where microseconds count (the executor).
        ``stream`` is a stream object or its handle as an int. Free with :meth:`free_ptr`.
        Same out-of-memory handling as :meth:`allocate`."""
        if nbytes <= 0:
            raise ValueError(f"allocation size must be positive, got {nbytes}")
        if thread_context.device != self._device_index:  # inlined _current(): the hot path
            ensure_current(self._device_index)
        h = handle_int(stream)
        hot = self._hot()

        def attempt() -> int:
            with self._driver_lock:
                return hot.alloc_from_pool(nbytes, self._handle_int, h)

        ptr = self._with_oom_retry(nbytes, attempt, lambda: drv.call("cuStreamSynchronize", h))
        self._count_allocation()
        return ptr

    def free_ptr(self, ptr: int, stream: Any) -> None:
        """Free a pointer from :meth:`allocate_ptr` in stream order on ``stream``."""
        if thread_context.device != self._device_index:
            ensure_current(self._device_index)
        with self._driver_lock:
            self._hot().free_async(ptr, handle_int(stream))
        with self._lock:
            self._live -= 1

    def _hot(self) -> HotPath:
        # One HotPath per thread: its output slot for the pointer is not shared.
        hot = getattr(self._hot_local, "hot", None)
        if hot is None:
            hot = self._hot_local.hot = HotPath()
        return hot

    def free(self, buf: Any, stream: Any) -> None:
        """Free ``buf`` in stream order on ``stream`` (cuMemFreeAsync).

        Every use of ``buf`` must be ordered before this point on ``stream``: use it on
        ``stream``, or :meth:`hand_off` it from the stream that used it last."""
        if getattr(buf, "is_closed", False):
            raise ValueError("buffer was already freed")
        stream = _core_stream(stream)
        self._current()
        with self._driver_lock, drv.translated("cuMemFreeAsync"):
            buf.close(stream)
        with self._lock:
            self._live -= 1

    def hand_off(self, buf: Any, from_stream: Any, to_stream: Any):
        """Order everything enqueued so far on ``from_stream`` before what comes next on
        ``to_stream`` (an event recorded on one, waited on by the other: no host block,
        no device-wide sync). Use it when a buffer allocated or written on one stream is
        read, written or freed on another. ``buf`` (a Buffer or DeviceArray) is only
        named for the reader. Returns the event."""
        from .events import record, wait

        del buf
        src, dst = _core_stream(from_stream), _core_stream(to_stream)
        ev = record(src)
        wait(dst, ev)
        return ev

    def empty(self, shape: Any, dtype: Any, stream: Any) -> DeviceArray:
        """An uninitialised DeviceArray from this pool (free it with ``free_array``)."""
        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        n = int(np.prod(shape)) * dtype.itemsize
        if n <= 0:
            raise ValueError(f"cannot allocate an empty array of shape {shape}")
        buf = self.allocate(n, stream)
        dev_index = int(getattr(self.resource, "device_id", 0))
        return DeviceArray(int(buf.handle), shape, dtype, owner=buf, device_index=dev_index)

    def free_array(self, array: DeviceArray, stream: Any) -> None:
        if not isinstance(array, DeviceArray) or array.owner is None or not hasattr(array.owner, "close"):
            raise TypeError("free_array takes a DeviceArray made by DevicePool.empty")
        self.free(array.owner, stream)

    # ------------------------------------------------------------------ interop
    def cupy_allocator(self):
        """A ``cupy.cuda.MemoryAsyncPool`` over this pool: ``cupy.cuda.set_allocator(
        pool.cupy_allocator().malloc)`` makes CuPy allocate from it (on CuPy's current
        stream). Needs CuPy."""
        import cupy

        return cupy.cuda.MemoryAsyncPool(pool_handles=int(self.handle))

    def rmm_resource(self):
        """An ``rmm.mr.CudaAsyncViewMemoryResource`` over this pool (RMM does not own it:
        keep this DevicePool alive while RMM uses it). Needs RMM."""
        import rmm

        return rmm.mr.CudaAsyncViewMemoryResource(self.handle)

    def close(self) -> None:
        self._current()
        with drv.translated("cuMemPoolDestroy"):
            self.resource.close()


def _core_stream(stream: Any):
    from .streams import as_core_stream

    if stream is None:
        raise TypeError("a stream is required: every allocation and free is stream-ordered")
    return as_core_stream(stream)

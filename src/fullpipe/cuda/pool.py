"""fullpipe's own stream-ordered device memory pool (cudaMallocAsync / cudaFreeAsync).

Why a pool of its own: the device's default pool is shared by every library in
the process (PyTorch's cudaMallocAsync backend, CuPy, RMM ...). Changing its
release threshold would change their behaviour behind their back, so fullpipe
creates a pool for itself and never touches the default one.

Stream-ordered means: ``allocate(n, stream)`` and ``free(buf, stream)`` are
enqueued on ``stream`` like a kernel. The host does not wait, and the memory is
reused by later allocations on the same stream at once; reuse on another stream
is ordered by the driver through events (never by a device-wide sync).

Release threshold: how many bytes the pool may keep reserved when the stream
synchronizes. ``0`` returns free memory to the driver at every synchronization
(a trip to the OS next time); ``"max"`` keeps it all.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..errors import CudaError
from . import driver as drv
from .memory import DeviceArray

UINT64_MAX = 2**64 - 1


@dataclasses.dataclass(frozen=True)
class PoolStats:
    reserved_bytes: int
    reserved_high_bytes: int
    used_bytes: int
    used_high_bytes: int
    allocations: int  # live allocations made through this DevicePool object


def _parse_threshold(value: int | str) -> int:
    if value == "max":
        return UINT64_MAX
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"release_threshold must be 0, a byte count or 'max', got {value!r}")
    return value


class DevicePool:
    """A memory pool owned by fullpipe on one device.

    >>> pool = DevicePool(dev, release_threshold="max")
    >>> buf = pool.allocate(1 << 20, stream)      # cuda.core Buffer, stream-ordered
    >>> pool.free(buf, stream)
    """

    def __init__(self, device: Any, release_threshold: int | str = "max"):
        from cuda.core import DeviceMemoryResource, DeviceMemoryResourceOptions

        self.device = device
        core = getattr(device, "core", device)
        with drv.translated("cuMemPoolCreate"):
            self.resource = DeviceMemoryResource(core, DeviceMemoryResourceOptions())
        self._live = 0
        self.release_threshold = release_threshold

    # ------------------------------------------------------------------ handle & attrs
    @property
    def handle(self) -> Any:
        """The CUmemoryPool handle (for CuPy ``MemoryAsyncPool(pool_handles=...)``, RMM)."""
        return self.resource.handle

    def _set_attr(self, name: str, value: int) -> None:
        from cuda.bindings import driver

        attr = getattr(driver.CUmemPool_attribute, name)
        drv.call("cuMemPoolSetAttribute", self.handle, attr, driver.cuuint64_t(value))

    @property
    def release_threshold(self) -> int:
        return int(self.resource.attributes.release_threshold)

    @release_threshold.setter
    def release_threshold(self, value: int | str) -> None:
        self._set_attr("CU_MEMPOOL_ATTR_RELEASE_THRESHOLD", _parse_threshold(value))

    def stats(self) -> PoolStats:
        a = self.resource.attributes
        return PoolStats(
            reserved_bytes=int(a.reserved_mem_current),
            reserved_high_bytes=int(a.reserved_mem_high),
            used_bytes=int(a.used_mem_current),
            used_high_bytes=int(a.used_mem_high),
            allocations=self._live,
        )

    def reset_high_water_marks(self) -> None:
        self._set_attr("CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH", 0)
        self._set_attr("CU_MEMPOOL_ATTR_USED_MEM_HIGH", 0)

    def trim(self, keep_bytes: int = 0) -> None:
        """Return reserved-but-unused memory above ``keep_bytes`` to the driver."""
        if keep_bytes < 0:
            raise ValueError("keep_bytes must be >= 0")
        drv.call("cuMemPoolTrimTo", self.handle, keep_bytes)

    # ------------------------------------------------------------------ allocate / free
    def allocate(self, nbytes: int, stream: Any):
        """A cuda.core Buffer of ``nbytes``, stream-ordered on ``stream``.

        On out-of-memory: one trim-and-retry, then MemoryError with the numbers.
        """
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
            raise ValueError(f"allocation size must be a positive int, got {nbytes!r}")
        nbytes = int(nbytes)
        for attempt in (0, 1):
            try:
                with drv.translated("cuMemAllocFromPoolAsync"):
                    buf = self.resource.allocate(nbytes, stream=stream)
                self._live += 1
                return buf
            except CudaError as exc:
                if "OUT_OF_MEMORY" not in str(exc):
                    raise
                if attempt == 0:
                    stream.sync()  # let frees in flight on this stream land, then trim
                    self.trim(0)
                    continue
                free, total = drv.call("cuMemGetInfo")
                s = self.stats()
                raise MemoryError(
                    f"fullpipe pool: cannot allocate {nbytes} bytes; pool uses {s.used_bytes} "
                    f"and reserves {s.reserved_bytes} bytes; the device has {int(free)} of "
                    f"{int(total)} bytes free"
                ) from exc
        raise AssertionError("unreachable")

    def free(self, buf: Any, stream: Any) -> None:
        """Free ``buf`` in stream order on ``stream`` (cudaFreeAsync)."""
        with drv.translated("cuMemFreeAsync"):
            buf.close(stream)
        self._live -= 1

    def empty(self, shape: Any, dtype: Any, stream: Any) -> DeviceArray:
        """An uninitialised DeviceArray from this pool (free it with ``free_array``)."""
        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        n = int(np.prod(shape)) * dtype.itemsize
        if n <= 0:
            raise ValueError(f"cannot allocate an empty array of shape {shape}")
        buf = self.allocate(n, stream)
        return DeviceArray(int(buf.handle), shape, dtype, owner=buf)

    def free_array(self, array: DeviceArray, stream: Any) -> None:
        self.free(array.owner, stream)

    def close(self) -> None:
        with drv.translated("cuMemPoolDestroy"):
            self.resource.close()

"""The device: facts that matter for pipelining, and the current-context setup.

`Device` wraps :class:`cuda.core.Device`. Its :attr:`Device.facts` gathers, in
one dataclass, what decides how far work can overlap on this GPU: copy engines,
SMs, resident grids, shared memory, L2, memory pools, stream priorities, PCIe
link, and the driver/runtime/NVRTC versions.

The current context, per thread. Most driver calls act on the context current in
the calling thread, and a new thread has none: creating an event or a stream there
fails (``CUDA_ERROR_INVALID_CONTEXT``). fullpipe's cuda/ functions make the right
device's primary context current themselves (:func:`ensure_current`), so devices,
pools, streams, events, pinned memory, launches and captures work from any thread.
What it costs: a thread-local record of the device fullpipe last made (or found)
current in this thread; when the record matches, ``ensure_current`` is one attribute
read and a compare, with no driver call. Only the first call in a thread, or one for
another device, calls the driver.

The record is fullpipe's: code that switches the thread to another device behind
fullpipe's back (``torch.cuda.set_device``, ``cudaSetDevice``, ``cuCtxSetCurrent``)
makes it stale on a multi-GPU machine. Call :meth:`Device.set_current` or
``ensure_current(device, force=True)`` after such a switch. fullpipe works with
primary contexts (the ones cuda.core, PyTorch and CuPy use).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from ..errors import CudaError, NoDeviceError
from . import driver as drv

# Maximum number of kernels (grids) resident on the device at once. The CUDA
# programming guide's table of technical specifications gives 128 for every
# compute capability from 7.0 up (and 32 or 16 before that).
_MAX_RESIDENT_GRIDS = {(5, 3): 16, (6, 2): 16}


def max_resident_grids(major: int, minor: int) -> int:
    if major >= 7:
        return 128
    return _MAX_RESIDENT_GRIDS.get((major, minor), 32)


@dataclasses.dataclass(frozen=True)
class DeviceFacts:
    """What fullpipe needs to know about one GPU. All sizes in bytes."""

    index: int
    name: str
    compute_capability: tuple[int, int]
    arch: str  # e.g. "sm_90"
    sm_count: int
    copy_engines: int  # asyncEngineCount
    concurrent_kernels: bool
    max_resident_grids: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    shared_memory_per_sm: int
    shared_memory_per_block: int  # without opt-in
    shared_memory_per_block_optin: int  # with cudaFuncAttributeMaxDynamicSharedMemorySize
    reserved_shared_memory_per_block: int
    registers_per_sm: int
    registers_per_block: int
    l2_cache: int
    global_memory: int
    memory_bus_width_bits: int
    memory_pools_supported: bool
    stream_priority_range: tuple[int, int]  # (least, greatest); greatest is numerically lowest
    cooperative_launch: bool
    cluster_launch: bool
    unified_addressing: bool
    pcie_generation: int | None
    pcie_width: int | None
    driver_version: str
    runtime_version: str
    nvrtc_version: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def implications(self) -> list[str]:
        """One line per fact that matters for pipelining, in plain words."""
        lines = []
        ce = self.copy_engines
        if ce >= 2:
            lines.append(
                f"{ce} copy engines: H2D, D2H and compute can overlap "
                "(one engine each way, kernels on the SMs)."
            )
        elif ce == 1:
            lines.append("1 copy engine: copies overlap compute, but H2D and D2H take turns.")
        else:
            lines.append("No async copy engine: copies do not overlap compute.")
        if self.concurrent_kernels:
            lines.append(
                f"Concurrent kernels: up to {self.max_resident_grids} grids resident at once "
                f"across {self.sm_count} SMs; kernels on different streams can share SMs."
            )
        else:
            lines.append("No concurrent kernels: kernels from different streams serialize.")
        lines.append(
            f"Shared memory: {self.shared_memory_per_sm // 1024} KiB per SM, "
            f"{self.shared_memory_per_block // 1024} KiB per block by default, "
            f"{self.shared_memory_per_block_optin // 1024} KiB per block after opt-in: "
            "room for multi-stage tile rings."
        )
        if self.memory_pools_supported:
            lines.append(
                "Stream-ordered allocation (cudaMallocAsync pools) supported: allocations "
                "need not synchronize the device."
            )
        else:
            lines.append("No memory pools: device allocation synchronizes the device.")
        lo, hi = self.stream_priority_range
        if lo != hi:
            lines.append(f"Stream priorities {lo} (lowest) to {hi} (highest) can favour a stage.")
        if self.cluster_launch:
            lines.append(
                "Thread-block clusters and distributed shared memory available "
                f"(compute capability {self.compute_capability[0]}.{self.compute_capability[1]})."
            )
        if self.pcie_generation and self.pcie_width:
            # Usable PCIe payload bandwidth per direction, roughly: gen3 ~0.985 GB/s per
            # lane, doubling each generation; measured copies land near 80-90 % of it.
            per_lane = 0.985 * 2 ** (self.pcie_generation - 3)
            lines.append(
                f"PCIe gen {self.pcie_generation} x{self.pcie_width}: about "
                f"{per_lane * self.pcie_width:.0f} GB/s each way on paper; pinned copies "
                "are needed to get near it."
            )
        return lines


# --------------------------------------------------------------------------- current context
class _ThreadContext(threading.local):
    # Index of the device whose context fullpipe made (or found) current in this
    # thread; None until the first call here.
    device: int | None = None


thread_context = _ThreadContext()


def device_index(device: Any) -> int:
    """The index of ``device``: an int, a fullpipe Device (``.index``) or a cuda.core
    Device (``.device_id``)."""
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    for attr in ("index", "device_id"):
        value = getattr(device, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    core = getattr(device, "core", None)
    if core is not None and core is not device:
        return device_index(core)
    raise TypeError(f"expected a device (an int index, fullpipe.Device or cuda.core.Device), "
                    f"got {type(device).__name__}")


def ensure_current(device: Any = None, *, force: bool = False) -> None:
    """Make a CUDA context current in the calling thread, cheaply.

    ``device`` (an int, fullpipe Device or cuda.core Device): that device's primary
    context. ``None``: whatever context this thread already has; device 0's primary
    context if it has none. Costs one thread-local read when this thread's record
    already says so; ``force=True`` checks with the driver again (after the thread was
    switched to another device outside fullpipe)."""
    if device is None:
        if thread_context.device is not None and not force:
            return
        _adopt_or_make_current(None)
        return
    index = device if type(device) is int else device_index(device)
    if thread_context.device != index or force:
        _make_current(index)


def ensure_current_for_stream(stream: Any) -> None:
    """Like ``ensure_current(None)``, but a thread without a context gets the context of
    ``stream``'s device (a cuda.core Stream, an int handle or an object with
    ``__cuda_stream__``). For functions that only take a stream (launches, copies,
    host functions, event records)."""
    if thread_context.device is not None:
        return
    _adopt_or_make_current(stream)


def forget_current() -> None:
    """Drop this thread's record: the next fullpipe call asks the driver again."""
    thread_context.device = None


def _make_current(index: int) -> None:
    if not drv.uses_real_driver():  # a stand-in driver (CPU tests) has no contexts; record nothing
        return
    from cuda.core import Device as CoreDevice

    # cuda.core's set_current retains the primary context and marks cuda.core's own
    # per-thread Device object as set up, so cuda.core calls in this thread work too.
    with drv.translated("cuCtxSetCurrent"):
        CoreDevice(index).set_current()
    thread_context.device = index


def _adopt_or_make_current(stream: Any) -> None:
    """No record in this thread: keep a context that is already current (PyTorch or
    the user made it), else make the stream's device's (or device 0's) current."""
    if not drv.uses_real_driver():
        return
    drv.call("cuInit", 0)  # cheap after the first time; needed before any context call
    ctx = drv.call("cuCtxGetCurrent")
    if int(ctx) != 0:
        thread_context.device = int(drv.call("cuCtxGetDevice"))
        return
    _make_current(0 if stream is None else _stream_device(stream))


def _stream_device(stream: Any) -> int:
    """The device of a stream, asked of its context; 0 for the default streams (they
    have no context of their own)."""
    from cuda.bindings import driver

    from .hotpath import handle_int

    handle = handle_int(stream)
    if handle in (0, 1, 2):  # NULL, cudaStreamLegacy, cudaStreamPerThread
        return 0
    ctx = drv.call("cuStreamGetCtx", driver.CUstream(handle))
    drv.call("cuCtxPushCurrent", ctx)
    try:
        return int(drv.call("cuCtxGetDevice"))
    finally:
        drv.call("cuCtxPopCurrent")


# --------------------------------------------------------------------------- the device
def _core_device(index: int):
    try:
        from cuda.core import Device as CoreDevice
    except ImportError as exc:  # pragma: no cover - broken install
        raise NoDeviceError("import cuda.core", None, "ImportError", str(exc)) from exc
    try:
        drv.call("cuInit", 0)
        count = int(drv.call("cuDeviceGetCount"))
    except CudaError as exc:
        raise NoDeviceError(exc.call, exc.code, exc.name, exc.description) from exc
    except Exception as exc:  # no libcuda.so: cuda.pathfinder raises RuntimeError subclasses
        raise NoDeviceError("cuInit", None, type(exc).__name__, str(exc)) from exc
    if count == 0:
        raise NoDeviceError("cuDeviceGetCount", 100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device")
    if not 0 <= index < count:
        raise ValueError(f"device index {index} out of range: this machine has {count} GPU(s)")
    with drv.translated("cuDevicePrimaryCtxRetain"):
        dev = CoreDevice(index)
        dev.set_current()
    thread_context.device = index
    return dev


def _pcie_link(core_dev) -> tuple[int | None, int | None]:
    """PCIe generation and width from NVML, when NVML is usable (it may not be in a VM)."""
    try:
        pci = core_dev.to_system_device().pci_info
        return int(pci.current_link_generation), int(pci.current_link_width)
    except Exception:
        return None, None


def _runtime_version() -> str:
    try:
        from cuda.bindings import runtime

        err, v = runtime.cudaRuntimeGetVersion()
        return drv.format_cuda_version(int(v)) if int(err) == 0 else "unknown"
    except Exception:
        return "unknown"


def nvrtc_version() -> str:
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        return f"{major}.{minor}" if int(err) == 0 else "unknown"
    except Exception:
        return "unknown"


class Device:
    """One GPU, made current on the calling thread.

    ``Device()`` picks GPU 0. Raises :class:`fullpipe.errors.NoDeviceError` when there is no
    driver or no GPU. ``Device.core`` is the underlying :class:`cuda.core.Device`.
    A Device made in one thread may be used from any other: fullpipe's functions make
    its context current where they need it (:func:`ensure_current`).
    """

    def __init__(self, index: int = 0):
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"device index must be an int, got {type(index).__name__}")
        self.index = index
        self.core = _core_device(index)
        self._facts: DeviceFacts | None = None

    def __repr__(self) -> str:
        return f"fullpipe.Device({self.index}: {self.core.name}, {self.core.arch})"

    @property
    def name(self) -> str:
        return self.core.name

    @property
    def arch(self) -> str:
        """``sm_XY`` of this device, e.g. ``sm_90``."""
        cc = self.core.compute_capability
        return f"sm_{cc.major}{cc.minor}"

    def set_current(self) -> None:
        """Make this device's primary context current in the calling thread (always
        asks the driver; fullpipe's own calls use the cheap :func:`ensure_current`)."""
        _make_current(self.index)

    def ensure_current(self) -> None:
        """:func:`ensure_current` for this device: a thread-local check, a driver call
        only the first time in a thread."""
        ensure_current(self.index)

    def synchronize(self) -> None:
        """cudaDeviceSynchronize. Experiments use it on purpose; the pipeline never does."""
        self.ensure_current()
        with drv.translated("cuCtxSynchronize"):
            self.core.sync()

    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes on the device, as cudaMemGetInfo reports them."""
        self.ensure_current()
        free, total = drv.call("cuMemGetInfo")
        return int(free), int(total)

    @property
    def facts(self) -> DeviceFacts:
        if self._facts is None:
            self._facts = self._collect_facts()
        return self._facts

    def _collect_facts(self) -> DeviceFacts:
        self.ensure_current()
        p = self.core.properties
        cc = self.core.compute_capability
        least, greatest = drv.call("cuCtxGetStreamPriorityRange")
        gen, width = _pcie_link(self.core)
        major, minor = int(cc.major), int(cc.minor)
        return DeviceFacts(
            index=self.index,
            name=self.core.name,
            compute_capability=(major, minor),
            arch=self.arch,
            sm_count=p.multiprocessor_count,
            copy_engines=p.async_engine_count,
            concurrent_kernels=bool(p.concurrent_kernels),
            max_resident_grids=max_resident_grids(major, minor),
            max_threads_per_sm=p.max_threads_per_multiprocessor,
            max_blocks_per_sm=p.max_blocks_per_multiprocessor,
            shared_memory_per_sm=p.max_shared_memory_per_multiprocessor,
            shared_memory_per_block=p.max_shared_memory_per_block,
            shared_memory_per_block_optin=p.max_shared_memory_per_block_optin,
            reserved_shared_memory_per_block=p.reserved_shared_memory_per_block,
            registers_per_sm=p.max_registers_per_multiprocessor,
            registers_per_block=p.max_registers_per_block,
            l2_cache=p.l2_cache_size,
            global_memory=self.memory_info()[1],
            memory_bus_width_bits=p.global_memory_bus_width,
            memory_pools_supported=bool(p.memory_pools_supported),
            stream_priority_range=(int(least), int(greatest)),
            cooperative_launch=bool(p.cooperative_launch),
            cluster_launch=major >= 9,
            unified_addressing=bool(p.unified_addressing),
            pcie_generation=gen,
            pcie_width=width,
            driver_version=drv.format_cuda_version(drv.driver_version()),
            runtime_version=_runtime_version(),
            nvrtc_version=nvrtc_version(),
        )


def device_info(device: Device) -> dict[str, Any]:
    """The device facts every experiment's Result carries (one shape for all of them)."""
    f = device.facts
    return {
        "name": f.name,
        "arch": f.arch,
        "sm_count": f.sm_count,
        "copy_engines": f.copy_engines,
        "max_resident_grids": f.max_resident_grids,
        "global_memory": f.global_memory,
        "memory_pools_supported": f.memory_pools_supported,
        "driver_version": f.driver_version,
        "pcie": f"gen{f.pcie_generation} x{f.pcie_width}" if f.pcie_generation else None,
    }

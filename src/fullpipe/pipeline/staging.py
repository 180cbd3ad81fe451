"""The pinned staging ring, and the signals that tell the CPU a slot is done with.

A :class:`SlotRing` holds K pinned host slots. A slot is reused only when the GPU
has finished with it, and the CPU learns that without polling and without any
device or stream synchronization, by one of three *recycle* modes:

- ``"hostfn"`` (default): a host function enqueued on the stream right after the
  copy that reads (or writes) the slot. The host function is libc's ``sem_post``
  on a POSIX semaphore, enqueued straight through libcuda (see
  ``hostfn.launch_native_host_func``): no Python, no GIL, no CUDA call; it only
  sets a flag. The staging thread waits on the semaphore.
- ``"pyhostfn"``: the same, with a Python callable (``threading.Semaphore.release``)
  as the host function. It needs the GIL, so it can wait behind busy Python
  threads and stall its stream meanwhile; kept for comparison.
- ``"event"``: an event recorded after the copy; the staging thread blocks in
  ``cuEventSynchronize`` before reusing the slot.

The host-function rule holds in every mode: the host function never calls CUDA.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import threading
import time
from typing import Any

from ..cuda import driver as drv
from ..cuda.hostfn import launch_native_host_func
from ..cuda.memory import PinnedBuffer
from ..cuda.streams import stream_handle

RECYCLE_MODES = ("hostfn", "pyhostfn", "event")
_WAIT_SLICE_S = 0.05  # waits wake this often to notice a stop request or a worker error
CU_EVENT_RECORD_EXTERNAL = 1  # cuda.h: in a stream capture, record the event as a graph node
_PY_HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # CUhostFn


class Stopped(Exception):
    """Raised inside a staging thread when the run is being aborted."""


# --------------------------------------------------------------------------- POSIX semaphores
class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc = None
_SEM_T_BYTES = 64  # sizeof(sem_t) is 32 on x86-64 and 64-bit Arm glibc; leave room


def _load_libc():
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        for name in ("sem_init", "sem_post", "sem_timedwait", "sem_destroy"):
            getattr(lib, name)  # AttributeError on a platform without POSIX semaphores
        lib.sem_init.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint]
        lib.sem_timedwait.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Timespec)]
        lib.sem_destroy.argtypes = [ctypes.c_void_p]
        _libc = lib
    return _libc


def native_host_functions_available() -> bool:
    try:
        _load_libc()
        return True
    except (OSError, AttributeError):
        return False


class _NativeSemaphore:
    """A POSIX semaphore in memory owned by this object; ``sem_post`` is its host function."""

    def __init__(self, initial: int):
        lib = _load_libc()
        self._mem = ctypes.create_string_buffer(_SEM_T_BYTES)
        self.address = ctypes.addressof(self._mem)
        if lib.sem_init(self.address, 0, initial) != 0:
            raise OSError(ctypes.get_errno(), "sem_init failed")
        self._alive = True

    def wait(self, stop: threading.Event) -> None:
        lib = _libc
        ts = _Timespec()
        while True:
            deadline = time.time() + _WAIT_SLICE_S
            ts.tv_sec = int(deadline)
            ts.tv_nsec = int((deadline - int(deadline)) * 1e9)
            if lib.sem_timedwait(self.address, ctypes.byref(ts)) == 0:  # releases the GIL
                return
            err = ctypes.get_errno()
            if err not in (errno.ETIMEDOUT, errno.EINTR):
                raise OSError(err, "sem_timedwait failed")
            if stop.is_set():
                raise Stopped

    def destroy(self) -> None:
        if self._alive:
            _libc.sem_destroy(self.address)
            self._alive = False


def _sem_post_address() -> int:
    return int(ctypes.cast(_load_libc().sem_post, ctypes.c_void_p).value)


# --------------------------------------------------------------------------- signals
class GpuSignal:
    """A flag the GPU raises (``arm(stream)``: when the stream reaches this point) and
    a CPU thread waits for (``wait(stop)``). Counting: each arm is consumed by one wait;
    ``initial`` raises it that many times up front (1 = "the slot starts free")."""

    def arm(self, stream: Any) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def arm_in_capture(self, stream: Any) -> None:
        """``arm`` on a stream being captured into a CUDA graph: a node that raises the
        flag on EVERY launch of the graph (pipeline/graphs.py). Call :meth:`launched`
        after each launch."""
        self.arm(stream)

    def launched(self) -> None:
        """A graph holding this signal's node was launched (host-side bookkeeping)."""

    def wait(self, stop: threading.Event) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        """Release OS resources; only once every armed host function has run."""


class HostFnSignal(GpuSignal):
    """Host function = libc ``sem_post``: runs on the driver's thread without the GIL."""

    def __init__(self, initial: int = 0):
        self._sem = _NativeSemaphore(initial)
        self._fn = _sem_post_address()

    def arm(self, stream: Any) -> None:
        # Straight through libcuda: cuda.bindings' own trampoline would take the GIL.
        launch_native_host_func(stream, self._fn, self._sem.address)

    def wait(self, stop: threading.Event) -> None:
        self._sem.wait(stop)

    def close(self) -> None:
        self._sem.destroy()


class PyHostFnSignal(GpuSignal):
    """Host function = a Python ``Semaphore.release`` (takes the GIL on the driver thread)."""

    def __init__(self, initial: int = 0):
        self._sem = threading.Semaphore(initial)
        self._graph_callback: Any = None

    def arm(self, stream: Any) -> None:
        from ..cuda.hostfn import launch_host_func

        launch_host_func(stream, self._sem.release)

    def arm_in_capture(self, stream: Any) -> None:
        # fullpipe's Python trampoline runs each registered call once; a graph's host node
        # runs on every launch: a ctypes callback of our own (takes the GIL), kept alive
        # as long as this signal.
        if self._graph_callback is None:
            self._graph_callback = _PY_HOSTFN(lambda _data: self._sem.release())
        launch_native_host_func(stream, ctypes.cast(self._graph_callback, ctypes.c_void_p).value, 0)

    def wait(self, stop: threading.Event) -> None:
        while not self._sem.acquire(timeout=_WAIT_SLICE_S):
            if stop.is_set():
                raise Stopped


class EventSignal(GpuSignal):
    """An event recorded on the stream; the waiter blocks in cuEventSynchronize.

    ``armed`` counts records the waiter has not consumed yet, so a waiter never
    syncs on an event whose next record has not been made (an unrecorded event
    reads as complete)."""

    def __init__(self, device: Any, initial: int = 0):
        from ..cuda.events import create_event

        self._event = create_event(device, timing=False)
        self._handle = self._event.handle
        self._armed = threading.Semaphore(initial)

    def arm(self, stream: Any) -> None:
        drv.call("cuEventRecord", self._handle, stream_handle(stream))
        self._armed.release()

    def arm_in_capture(self, stream: Any) -> None:
        # A plain cuEventRecord on a capturing stream only marks a capture dependency (the
        # event then refuses host waits: H200, driver 580, cuEventSynchronize ->
        # CUDA_ERROR_INVALID_VALUE); CU_EVENT_RECORD_EXTERNAL makes it a node that records
        # the event on every launch. The waiter's count is raised per launch
        # (launched()), not now, before the graph ever runs.
        drv.call("cuEventRecordWithFlags", self._handle, stream_handle(stream), CU_EVENT_RECORD_EXTERNAL)

    def launched(self) -> None:
        self._armed.release()

    def wait(self, stop: threading.Event) -> None:
        while not self._armed.acquire(timeout=_WAIT_SLICE_S):
            if stop.is_set():
                raise Stopped
        drv.call("cuEventSynchronize", self._handle)

    def close(self) -> None:
        self._event.close()


def make_signal(mode: str, device: Any, initial: int = 0) -> GpuSignal:
    if mode == "hostfn":
        return HostFnSignal(initial)
    if mode == "pyhostfn":
        return PyHostFnSignal(initial)
    if mode == "event":
        return EventSignal(device, initial)
    raise ValueError(f"recycle must be one of {RECYCLE_MODES}, got {mode!r}")


def check_recycle(mode: Any) -> str:
    if mode not in RECYCLE_MODES:
        raise ValueError(f"recycle must be one of {RECYCLE_MODES}, got {mode!r}")
    if mode == "hostfn" and not native_host_functions_available():
        return "pyhostfn"  # no POSIX semaphores in this libc: the Python host function still works
    return mode


# --------------------------------------------------------------------------- the ring
class SlotRing:
    """K pinned host slots of ``slot_bytes`` each, reused round-robin.

    The ring only owns memory; who may touch a slot when is decided by the signals
    the executor makes per run (one per slot). Batch j uses slot ``j % K``.

    ``pool``: a :class:`~fullpipe.cuda.pinned_pool.PinnedPool` the slots are taken
    from and given back to (so a new pipeline, or a ring that grows, reuses pinned
    buffers instead of pinning new ones); None: the ring pins its own buffers.
    """

    def __init__(self, slots: int, pool: Any = None):
        self.slots = slots
        self.slot_bytes = 0
        self.pool = pool
        self._buffers: list[Any] = []  # PinnedBlock (pool) or PinnedBuffer
        self._ptrs: list[int] = []

    @property
    def pinned_bytes(self) -> int:
        return sum(b.nbytes for b in self._buffers)

    def ensure(self, slot_bytes: int, usage: Any = None) -> None:
        """Make every slot at least ``slot_bytes`` long (only while no copy uses the
        ring: between runs). ``usage``: a PinnedUsage that counts what this costs."""
        if slot_bytes <= self.slot_bytes and len(self._buffers) == self.slots:
            return
        self.free()
        size = max(slot_bytes, 4096)
        try:
            for _ in range(self.slots):
                self._buffers.append(self.pool.take(size, usage) if self.pool is not None else PinnedBuffer(size))
        except BaseException:
            self.free()
            raise
        self._ptrs = [b.ptr for b in self._buffers]
        self.slot_bytes = size

    def address(self, slot: int) -> int:
        return self._ptrs[slot]

    def free(self) -> None:
        """Give the slots back (to the pool) or unpin them. Only when no copy uses them."""
        buffers, self._buffers, self._ptrs = self._buffers, [], []
        self.slot_bytes = 0
        for b in buffers:
            if self.pool is not None:
                self.pool.give(b)
            else:
                b.free()

"""A pin-down cache: pageable host arrays that come back are page-locked where they are.

A pageable array cannot be copied by a copy engine as it is: the driver, or fullpipe's
staging ring, first copies it into pinned memory on the CPU. On an H100 host that
memmove is the bound of a copy-heavy pipeline (14-16 GB/s each way, where the copy
engines move ~48 GB/s each way at once from pinned memory). ``cuMemHostRegister``
page-locks an existing range instead, with no copy, at about 26 GB/s on that host;
from then on copies of the range go straight to the copy engines. It costs about as
much as one pass of the ring, so it pays from the second run over the same array on.
This is the "pin-down cache" of RDMA and MPI libraries, for a GPU.

Policy, in one place:

- **What.** Arrays of at least ``min_bytes`` (64 MiB), whose memory fullpipe can keep
  alive: a NumPy array that owns its data or a view of one, or a torch CPU tensor. The
  whole allocation is registered (the owning array, the tensor's storage), so that
  other views of it are pinned too, unless it is more than twice the array: then only
  the array's own range. Other buffers are never registered.
- **When.** The second time a pipeline run sees the same range (address and size): a
  range seen once is only remembered, so one-off arrays never pay for a registration.
- **Keeping the memory alive.** An entry holds a strong reference to the owning array
  (or the tensor's storage), so the registered memory cannot be freed, and its
  addresses reused by a new array, while it is registered. That is why entries are
  dropped at safe points, never from a finalizer: at every pipeline run, once the run
  holds the entries it uses (:meth:`PinCache.flush`), an idle entry whose array nobody
  else refers to any more (NumPy: the owning array's reference count; torch: the last
  tensor a run was given, by weak reference) is unregistered, then let go; its memory
  is freed then. (A torch storage resized in place while registered moves its memory
  under the registration: flush unregisters it then, but copies made in between by
  other libraries would use the old pages. Do not resize a tensor a pipeline runs on.)
- **Cap.** At most ``cap_bytes`` registered (a quarter of physical memory, as the pinned
  pool): least recently used idle entries are unregistered first; if that is not enough
  the array goes through the ring.
- **In use.** A run holds (``acquire``) the entries it copies from or to; an entry in use
  is never unregistered (runs on other threads may share it).
- **Failures.** A registration the driver refuses (locked-memory limit, a range that
  overlaps memory registered by someone else) is remembered and not tried again for
  that range; the array goes through the ring.

The cache is process-wide (:func:`default_pin_cache`): pipelines and threads share it.
``StreamPipeline(pin_in_place=False)`` or ``staging="ring"`` keeps a pipeline out of it;
:meth:`PinCache.clear` unregisters every idle entry.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
import weakref
from typing import Any, Callable

import numpy as np

from . import driver as drv
from .device import ensure_current
from .interop import _is_torch_tensor
from .pinned_pool import default_cap_bytes

MIN_BYTES = 64 << 20  # smaller arrays: bulk staging and the ring do well, and they may share pages
WHOLE_MAX_RATIO = 2  # register a view's whole allocation when it is at most this many times the view
MAX_SIGHTINGS = 256  # ranges remembered as seen once
CU_MEMHOSTREGISTER_PORTABLE = 0x01  # cuda.h: pinned for every context


@dataclasses.dataclass
class _Entry:
    ptr: int
    nbytes: int
    keep: Any  # strong reference: the memory stays allocated while registered
    user: Any  # weakref to the torch tensor it came from (None for NumPy: keep's refcount tells)
    alloc_ptr: int = 0  # the allocation's address when registered (a torch storage may move)
    users: int = 0  # runs using it now
    last_used: float = 0.0


@dataclasses.dataclass
class PinCacheStats:
    entries: int
    registered_bytes: int
    registrations: int  # since the cache was made
    unregistrations: int
    refused: int  # ranges the driver would not register
    register_s: float  # seconds spent in cuMemHostRegister


class PinCache:
    """See the module docstring. Thread-safe: one lock, not held across driver calls
    that take long, except registration (so that two threads never register one range)."""

    def __init__(self, cap_bytes: int | None = None, min_bytes: int = MIN_BYTES):
        self.cap_bytes = default_cap_bytes() if cap_bytes is None else int(cap_bytes)
        self.min_bytes = int(min_bytes)
        self._lock = threading.RLock()
        self._entries: dict[tuple[int, int], _Entry] = {}
        self._seen: dict[tuple[int, int], None] = {}
        self._refused: set[tuple[int, int]] = set()
        self._registrations = self._unregistrations = 0
        self._register_s = 0.0

    # ------------------------------------------------------------------ per run
    def acquire(self, obj: Any, arr: np.ndarray, pinned: Callable[[], bool] = lambda: False,
                ) -> tuple[_Entry | None, float]:
        """The cache entry whose registered range holds ``arr`` (the host view of the
        user's ``obj``), registering it now if this is its second sighting; acquired for
        the caller's run (give it back with :meth:`release`). ``pinned()``: is the
        memory page-locked already (by its owner)? Then it is not the cache's. Returns
        (entry or None, seconds spent registering now)."""
        mem = _owning_memory(obj, arr)
        if mem is None:
            return None, 0.0
        ptr, nbytes, keep, user, alloc_ptr = mem
        if nbytes < self.min_bytes:
            return None, 0.0
        key = (ptr, nbytes)
        with self._lock:
            e = self._covering(ptr, nbytes)  # (the range itself, or one holding it)
            if e is not None:
                if user is not None:  # the tensor of this run (a view made per call is fine)
                    e.user = user
                return self._use(e), 0.0
            if key in self._refused or pinned():
                return None, 0.0
            if key not in self._seen:
                self._seen[key] = None
                while len(self._seen) > MAX_SIGHTINGS:
                    del self._seen[next(iter(self._seen))]
                return None, 0.0
            if not self._make_room(nbytes):
                return None, 0.0
            t0 = time.perf_counter()
            try:
                drv.call("cuMemHostRegister", ptr, nbytes, CU_MEMHOSTREGISTER_PORTABLE)
            except Exception:  # noqa: BLE001 - a limit, an overlap: the ring it is, for good
                self._refused.add(key)
                self._seen.pop(key, None)
                return None, 0.0
            dt = time.perf_counter() - t0
            self._register_s += dt
            self._registrations += 1
            self._seen.pop(key, None)
            e = self._entries[key] = _Entry(ptr, nbytes, keep, user, alloc_ptr)
            return self._use(e), dt

    def hold(self, arr: np.ndarray) -> _Entry | None:
        """The entry ``arr`` lies in, acquired, if the cache registered its memory; no
        sighting is counted and nothing is registered (run_batches: its batches are used
        as they come, but one registered by an earlier run must stay so while copied)."""
        if not self._entries:  # (read without the lock: an entry made meanwhile is not ours to hold)
            return None
        with self._lock:
            e = self._covering(int(arr.__array_interface__["data"][0]), int(arr.nbytes))
            return None if e is None else self._use(e)

    def release(self, entry: _Entry) -> None:
        """A run is done with ``entry`` (its copies have completed)."""
        with self._lock:
            entry.users -= 1

    def flush(self) -> int:
        """Unregister idle entries whose arrays nobody else holds any more (and entries
        whose tensor's memory moved); returns how many. Call where no stream capture
        of this thread can be in progress (a pipeline run's start)."""
        with self._lock:
            dropped = [e for e in self._entries.values() if e.users == 0 and not _still_used(e)]
            for e in dropped:
                self._unregister(e)
            return len(dropped)

    def clear(self) -> int:
        """Unregister every idle entry and forget what was seen; returns how many."""
        with self._lock:
            idle = [e for e in self._entries.values() if e.users == 0]
            for e in idle:
                self._unregister(e)
            self._seen.clear()
            self._refused.clear()
            return len(idle)

    @property
    def stats(self) -> PinCacheStats:
        with self._lock:
            return PinCacheStats(entries=len(self._entries),
                                 registered_bytes=sum(e.nbytes for e in self._entries.values()),
                                 registrations=self._registrations, unregistrations=self._unregistrations,
                                 refused=len(self._refused), register_s=self._register_s)

    # ------------------------------------------------------------------ inside the lock
    def _use(self, e: _Entry) -> _Entry:
        """One more run holds ``e``."""
        e.users += 1
        e.last_used = time.monotonic()
        return e

    def _covering(self, ptr: int, nbytes: int) -> _Entry | None:
        """The registered entry whose range holds [ptr, ptr + nbytes), if any."""
        for e in self._entries.values():
            if e.ptr <= ptr and ptr + nbytes <= e.ptr + e.nbytes:
                return e
        return None

    def _make_room(self, nbytes: int) -> bool:
        if nbytes > self.cap_bytes:
            return False
        held = sum(e.nbytes for e in self._entries.values())
        for e in sorted((e for e in self._entries.values() if e.users == 0), key=lambda e: e.last_used):
            if held + nbytes <= self.cap_bytes:
                break
            self._unregister(e)
            held -= e.nbytes
        return held + nbytes <= self.cap_bytes

    def _unregister(self, e: _Entry) -> None:
        del self._entries[(e.ptr, e.nbytes)]
        try:
            ensure_current()  # (registered PORTABLE: any context will do)
            drv.call("cuMemHostUnregister", e.ptr)
        except Exception:  # noqa: BLE001 - context gone (at exit): the OS unpins with the process
            pass
        self._unregistrations += 1
        e.keep = None  # only now may the memory be freed


def _owning_memory(obj: Any, arr: np.ndarray) -> tuple[int, int, Any, Any, int] | None:
    """(address, bytes, what keeps it allocated, weakref to the user's tensor or None, the
    allocation's address) of the range to register for ``arr``, when fullpipe can keep
    its memory alive; else None. The range is the whole allocation ``arr`` lies in (so
    that other views of it are pinned too) unless that is more than WHOLE_MAX_RATIO times
    ``arr`` (a slice of a much larger array: only the slice, not gigabytes it never copies)."""
    own = (int(arr.__array_interface__["data"][0]), int(arr.nbytes))
    if _is_torch_tensor(obj):
        storage = obj.untyped_storage()
        whole = (int(storage.data_ptr()), int(storage.nbytes()))
        if whole[1] == 0:
            return None
        ptr, nbytes = whole if whole[1] <= WHOLE_MAX_RATIO * own[1] else own
        return ptr, nbytes, storage, weakref.ref(obj), whole[0]
    if not isinstance(obj, np.ndarray):
        return None
    base = obj
    while isinstance(base.base, np.ndarray):
        base = base.base
    if base.base is not None or not base.flags.owndata or not base.flags.c_contiguous:
        return None  # memory NumPy did not allocate (a buffer, a mapped file, pinned memory ...)
    whole = (int(base.ctypes.data), int(base.nbytes))
    ptr, nbytes = whole if whole[1] <= WHOLE_MAX_RATIO * own[1] else own
    return ptr, nbytes, base, None, whole[0]


def _still_used(e: _Entry) -> bool:
    """Does anyone but the cache still hold the entry's array?"""
    if e.user is not None:  # a torch tensor: alive, and its storage still where it was
        t = e.user()
        return t is not None and int(t.untyped_storage().data_ptr()) == e.alloc_ptr
    # NumPy: our reference plus getrefcount's own argument, and nothing else
    return sys.getrefcount(e.keep) > 2


_default: PinCache | None = None
_default_lock = threading.Lock()


def default_pin_cache() -> PinCache:
    """The process-wide pin-down cache that pipelines share."""
    global _default
    with _default_lock:
        if _default is None:
            _default = PinCache()
        return _default

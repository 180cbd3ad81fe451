"""A pool of pinned (page-locked) host buffers, reused across runs, pipelines and threads.

Why: ``cuMemHostAlloc`` is slow (it locks every page: tens of milliseconds per
hundred MiB) and locked memory is scarce. A pipeline that pins a fresh output or
staging buffer per run pays that on every run. The pool keeps buffers that were
given back and hands them out again, so steady-state runs allocate no pinned memory.

Policy, in one place:

- **Size classes.** A new buffer is rounded up to a size class: at least 64 KiB, then
  four classes per power of two (1, 1.25, 1.5, 1.75 x 2^k), so a buffer is at most
  25 % larger than asked. Finer than powers of two (up to 100 % over, which for a
  1 GiB output would pin up to 2 GiB); coarser than exact sizes, which would never
  reuse across batches or runs of slightly different size.
- **Reuse.** ``take(n)`` hands out the smallest idle buffer that holds ``n`` bytes and
  is at most twice ``n`` (at most 64 KiB for small requests): best fit, with bounded
  waste. Only when none fits does it pin a new one.
- **Cap.** ``cap_bytes`` bounds the bytes the pool holds (in use + idle). A take that
  would go over first frees idle buffers, least recently given back first; if the
  buffers in use alone leave no room, it raises :class:`PinnedPoolFull` (a
  MemoryError) and frees nothing. It never falls back to pageable memory by itself:
  that would make copies silently synchronous. The caller may catch PinnedPoolFull
  and choose pageable memory knowingly.
- **Out of memory.** When the OS refuses to pin more, the pool frees its idle
  buffers and tries once more, then raises MemoryError.
- **Giving back.** ``give(block)`` says the host *and the device* are done with the
  block (the copies that used it have completed: an event synchronized, a stream
  synchronized). The pool does not track streams. Arrays from :meth:`PinnedPool.empty`
  go back by themselves when the last view of them is garbage-collected.

Thread safety: take/give/trim/stats may be called from any thread; the pool's lists
are under one lock, held for microseconds (pinning and unpinning happen outside it).
A garbage-collected array never takes the lock (the collector may run inside a
``with pool._lock`` block of the same thread): its block goes on a queue that the
next take/give/trim/stats empties.
"""

from __future__ import annotations

import bisect
import collections
import ctypes
import dataclasses
import itertools
import math
import os
import threading
import weakref
from typing import Any, Callable

import numpy as np

MIN_CLASS_BYTES = 64 * 1024
CLASSES_PER_DOUBLING = 4
MAX_REUSE_FACTOR = 2


class PinnedPoolFull(MemoryError):
    """A take would exceed the pool's cap even after freeing every idle buffer."""


@dataclasses.dataclass(frozen=True)
class PinnedPoolStats:
    """A snapshot of a :class:`PinnedPool`. Bytes are buffer sizes (size classes)."""

    cap_bytes: int
    allocated_bytes: int  # bytes ever pinned by this pool (cuMemHostAlloc), cumulative
    held_bytes: int  # bytes pinned now: in use + idle
    held_high_bytes: int  # the most held at once
    in_use_bytes: int  # bytes handed out and not given back
    allocations: int  # cuMemHostAlloc calls
    reuses: int  # takes served by an idle buffer
    frees: int  # cuMemFreeHost calls (trim, cap, close)

    @property
    def idle_bytes(self) -> int:
        return self.held_bytes - self.in_use_bytes

    def as_dict(self) -> dict[str, int]:
        d = dataclasses.asdict(self)
        d["idle_bytes"] = self.idle_bytes
        return d


@dataclasses.dataclass
class PinnedUsage:
    """What the takes that were handed this record cost: fill one per pipeline run
    (``take(n, usage=u)``) to report "pinned bytes allocated per run" exactly, even when
    other threads use the same pool at the same time."""

    allocations: int = 0
    allocated_bytes: int = 0
    reuses: int = 0


def size_class(nbytes: int) -> int:
    """The buffer size the pool pins for a request of ``nbytes`` (see the module doc)."""
    if nbytes <= MIN_CLASS_BYTES:
        return MIN_CLASS_BYTES
    k = (nbytes - 1).bit_length() - 1  # 2**k < nbytes <= 2**(k+1)
    step = (1 << k) // CLASSES_PER_DOUBLING
    return -(-nbytes // step) * step


def _check_bytes(value: Any, what: str, *, positive: bool) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < (1 if positive else 0):
        kind = "a positive int" if positive else "an int >= 0"
        raise ValueError(f"{what} must be {kind} (bytes), got {value!r}")
    return int(value)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _view(ptr: int, nbytes: int, shape: Any, dtype: Any, owner: Any) -> np.ndarray:
    """A NumPy array of ``shape``/``dtype`` over the memory at ``ptr``; ``owner`` stays
    alive as long as the array or any view of it."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    need = math.prod(shape) * dtype.itemsize
    if need > nbytes:
        raise ValueError(f"a view of {need} bytes does not fit a {nbytes}-byte pinned buffer")
    # A ctypes array type the size of the whole buffer: buffers come in few size classes,
    # and ctypes caches one type per length (a type per request size cost ~9 us more)
    raw = (ctypes.c_byte * max(nbytes, 1)).from_address(ptr)
    raw.owner = owner  # the array's base chain ends at raw, which keeps owner alive
    return np.frombuffer(raw, dtype=np.uint8, count=need).view(dtype).reshape(shape)


class PinnedBlock:
    """One pinned buffer of the pool: ``ptr``, ``nbytes`` (its size class) and
    ``requested`` (what the take asked for). ``array(shape, dtype)`` views it.
    Hand it back with ``pool.give(block)`` (or use ``with pool.take(n) as block:``)."""

    __slots__ = ("ptr", "nbytes", "requested", "in_use", "_pool", "_stamp", "_loaned", "__weakref__")

    def __init__(self, pool: "PinnedPool", ptr: int, nbytes: int):
        self._pool = pool
        self.ptr = ptr
        self.nbytes = nbytes
        self.requested = 0
        self.in_use = False
        self._loaned = False  # lent out by empty(): it comes back when its array is collected
        self._stamp = 0  # when it was last given back (a counter), for least-recently-used frees

    def __repr__(self) -> str:
        state = "in use" if self.in_use else "idle"
        return f"PinnedBlock(ptr=0x{self.ptr:x}, nbytes={self.nbytes}, {state})"

    def array(self, shape: Any, dtype: Any = np.uint8) -> np.ndarray:
        """A NumPy view of the start of this block. Do not use it after giving the
        block back (the pool hands the memory to the next taker)."""
        if not self.in_use:
            raise ValueError("this pinned block was given back to its pool; take a new one")
        return _view(self.ptr, self.nbytes, shape, dtype, self)

    def __enter__(self) -> "PinnedBlock":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._pool.give(self)


class _Loan:
    """Owner of an array from :meth:`PinnedPool.empty`: when it is collected (the last
    view of the array is gone), its block goes back to the pool."""

    __slots__ = ("block", "__weakref__")

    def __init__(self, block: PinnedBlock):
        self.block = block


def _pinned_alloc(device: Any) -> Callable[[int], int]:
    def alloc(nbytes: int) -> int:
        from . import driver as drv
        from .device import ensure_current
        from .memory import CU_MEMHOSTALLOC_PORTABLE, free_collected

        ensure_current(device)
        free_collected()  # a safe point: frees what the collector found since the last one
        return int(drv.call("cuMemHostAlloc", nbytes, CU_MEMHOSTALLOC_PORTABLE))

    return alloc


def _pinned_free(ptr: int) -> None:
    from . import driver as drv
    from .device import ensure_current

    ensure_current(None)
    drv.call("cuMemFreeHost", ptr)


def _is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    from .pool import _is_out_of_memory as device_oom

    return device_oom(exc)


class PinnedPool:
    """Reusable pinned host buffers with a cap, statistics and trim.

    >>> pool = PinnedPool(cap_bytes=8 << 30)
    >>> with pool.take(n) as block:             # a PinnedBlock; given back on exit
    ...     a = block.array((rows, cols), np.float32)
    >>> out = pool.empty((rows, cols), np.float32)  # goes back when `out` is collected
    >>> pool.stats                               # PinnedPoolStats

    ``device``: whose context pins the memory (None: the thread's current one, else
    device 0); the memory is portable, usable by every context. ``alloc``/``free``
    replace cuMemHostAlloc/cuMemFreeHost (``alloc(nbytes) -> address``,
    ``free(address)``), for tests.
    """

    def __init__(self, cap_bytes: int, device: Any = None, *,
                 alloc: Callable[[int], int] | None = None, free: Callable[[int], None] | None = None,
                 on_growth: Callable[[], Any] | None = None):
        self._cap = _check_bytes(cap_bytes, "cap_bytes", positive=True)
        self._on_growth = on_growth  # called before the pool pins new memory (outside its lock)
        self.device = device
        self._alloc = alloc if alloc is not None else _pinned_alloc(device)
        self._free = free if free is not None else _pinned_free
        self._lock = threading.Lock()
        self._idle: list[tuple[int, int, PinnedBlock]] = []  # (nbytes, serial, block), sorted
        self._serial = itertools.count()
        self._clock = itertools.count(1)
        self._returned: collections.deque[PinnedBlock] = collections.deque()  # from the collector
        self._closed = False
        self._held = 0  # in use + idle + being pinned
        self._held_high = 0
        self._in_use = 0
        self._allocated = 0
        self._allocations = 0
        self._reuses = 0
        self._frees = 0

    def __repr__(self) -> str:
        s = self.stats
        return (f"PinnedPool(cap={_mib(s.cap_bytes)}, held={_mib(s.held_bytes)}, "
                f"in use={_mib(s.in_use_bytes)}, allocations={s.allocations}, reuses={s.reuses})")

    # ------------------------------------------------------------------ cap
    @property
    def cap_bytes(self) -> int:
        return self._cap

    @cap_bytes.setter
    def cap_bytes(self, value: int) -> None:
        """Change the cap; idle buffers above a lower cap are freed now."""
        value = _check_bytes(value, "cap_bytes", positive=True)
        with self._lock:
            self._cap = value
        self.trim(value)

    # ------------------------------------------------------------------ take / give
    def take(self, nbytes: int, usage: PinnedUsage | None = None) -> PinnedBlock:
        """A pinned block of at least ``nbytes``: an idle one that fits, else a new one
        (see the module doc for the size classes, the cap and out-of-memory). ``usage``,
        if given, counts this take (a reuse, or an allocation and its bytes)."""
        nbytes = _check_bytes(nbytes, "nbytes", positive=True)
        size = size_class(nbytes)
        with self._lock:
            if self._closed:
                raise RuntimeError("this PinnedPool was closed")
            self._collect_returned()
            block = self._take_idle(nbytes)
            if block is not None:
                self._reuses += 1
                if usage is not None:
                    usage.reuses += 1
                return self._lend(block, nbytes)
            evicted = self._make_room(size)
            self._held += size  # reserved while it is pinned outside the lock
            self._in_use += size
            self._held_high = max(self._held_high, self._held)
        self._free_blocks(evicted)
        if self._on_growth is not None:
            self._on_growth()
        try:
            ptr = self._pin(size)
        except BaseException:
            with self._lock:
                self._held -= size
                self._in_use -= size
            raise
        block = PinnedBlock(self, ptr, size)
        with self._lock:
            self._allocations += 1
            self._allocated += size
            block.in_use = True
            block.requested = nbytes
        if usage is not None:
            usage.allocations += 1
            usage.allocated_bytes += size
        return block

    def give(self, block: PinnedBlock) -> None:
        """Give ``block`` back: the host and the device are done with it."""
        if not isinstance(block, PinnedBlock) or block._pool is not self:
            raise ValueError("give() takes a PinnedBlock taken from this pool")
        with self._lock:
            if block._loaned:
                raise ValueError("this block backs an array from empty(): it goes back by itself "
                                 "when the array is garbage-collected")
            if not block.in_use:
                raise ValueError("this pinned block was already given back")
            self._release(block)
            to_free = self._drain()
        self._free_blocks(to_free)

    def empty(self, shape: Any, dtype: Any = np.float32, usage: PinnedUsage | None = None) -> np.ndarray:
        """An uninitialised NumPy array in pinned memory from the pool. Its block goes
        back to the pool when the array and every view of it are garbage-collected
        (the caller must not let the device use it after that). ``usage`` as for take."""
        dtype = np.dtype(dtype)
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        nbytes = max(math.prod(shape) * dtype.itemsize, 1)
        block = self.take(nbytes, usage)
        block._loaned = True
        loan = _Loan(block)
        weakref.finalize(loan, self._loan_collected, block).atexit = False
        return _view(block.ptr, block.nbytes, shape, dtype, loan)

    def _loan_collected(self, block: PinnedBlock) -> None:
        # Runs inside the garbage collector, maybe while this thread holds self._lock:
        # never take the lock here. The next take/give/trim/stats/close files it.
        if not self._closed:
            self._returned.append(block)
            if not self._closed:
                return
            # close() ran between the check and the append: its drain may have missed
            # the block. Take back whatever is still queued (popleft is atomic: a block
            # that close() took is not taken twice).
            try:
                block = self._returned.popleft()
            except IndexError:
                return
        # nobody will empty the queue any more: unpin at the next safe point (never inside
        # the collector, which may run during a stream capture: cuda/memory.defer_free)
        from .memory import defer_free

        defer_free(self._free, block.ptr)

    # ------------------------------------------------------------------ trim / close
    def trim(self, keep_bytes: int = 0) -> int:
        """Free idle buffers, least recently given back first, until the pool holds at
        most ``keep_bytes`` (buffers in use stay). Returns the bytes freed."""
        keep_bytes = _check_bytes(keep_bytes, "keep_bytes", positive=False)
        with self._lock:
            evicted = self._drain()
            evicted += self._evict_idle_until(lambda: self._held <= keep_bytes)
        self._free_blocks(evicted)
        return sum(b.nbytes for b in evicted)

    def close(self) -> None:
        """Free every idle buffer; buffers in use are freed when given back."""
        with self._lock:
            self._closed = True
            evicted = self._drain()
        self._free_blocks(evicted)

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ statistics
    @property
    def held_bytes(self) -> int:
        """Bytes pinned by the pool now (in use, idle, being pinned); frees nothing."""
        with self._lock:
            return self._held

    @property
    def stats(self) -> PinnedPoolStats:
        with self._lock:
            to_free = self._drain()
        self._free_blocks(to_free)
        with self._lock:
            return PinnedPoolStats(
                cap_bytes=self._cap, allocated_bytes=self._allocated, held_bytes=self._held,
                held_high_bytes=self._held_high, in_use_bytes=self._in_use, allocations=self._allocations,
                reuses=self._reuses, frees=self._frees,
            )

    # ------------------------------------------------------------------ internals (lock held)
    def _drain(self) -> list[PinnedBlock]:
        """File the blocks of collected arrays as idle; on a closed pool, return every
        idle block for the caller to free (outside the lock)."""
        self._collect_returned()
        return self._pop_idle_all() if self._closed else []

    def _collect_returned(self) -> None:
        while True:
            try:
                block = self._returned.popleft()
            except IndexError:
                return
            if block.in_use and block._loaned:
                self._release(block)

    def _release(self, block: PinnedBlock) -> None:
        block.in_use = False
        block._loaned = False
        block.requested = 0
        block._stamp = next(self._clock)
        self._in_use -= block.nbytes
        bisect.insort(self._idle, (block.nbytes, next(self._serial), block))

    def _lend(self, block: PinnedBlock, nbytes: int) -> PinnedBlock:
        block.in_use = True
        block.requested = nbytes
        self._in_use += block.nbytes
        return block

    def _take_idle(self, nbytes: int) -> PinnedBlock | None:
        i = bisect.bisect_left(self._idle, (nbytes,))
        if i < len(self._idle):
            size, _, block = self._idle[i]
            if size <= max(MAX_REUSE_FACTOR * nbytes, MIN_CLASS_BYTES):
                del self._idle[i]
                return block
        return None

    def _make_room(self, size: int) -> list[PinnedBlock]:
        """Idle blocks to free so that ``size`` more bytes fit under the cap; raises
        PinnedPoolFull (freeing nothing) when the blocks in use leave no room."""
        in_use_or_pending = self._held - sum(b.nbytes for _, _, b in self._idle)
        if in_use_or_pending + size > self._cap:
            raise PinnedPoolFull(
                f"fullpipe pinned pool: cannot take {size} bytes ({_mib(size)}): "
                f"{in_use_or_pending} bytes ({_mib(in_use_or_pending)}) are in use and the cap is "
                f"{self._cap} bytes ({_mib(self._cap)}). Give back buffers (drop arrays) you no longer "
                "need, raise cap_bytes, or use pageable memory for this one.")
        return self._evict_idle_until(lambda: self._held + size <= self._cap)

    def _evict_idle_until(self, enough: Callable[[], bool]) -> list[PinnedBlock]:
        evicted: list[PinnedBlock] = []
        by_age = sorted(self._idle, key=lambda entry: entry[2]._stamp)
        for entry in by_age:
            if enough():
                break
            self._idle.remove(entry)
            self._held -= entry[0]
            evicted.append(entry[2])
        return evicted

    def _pop_idle_all(self) -> list[PinnedBlock]:
        evicted = [b for _, _, b in self._idle]
        self._idle.clear()
        self._held -= sum(b.nbytes for b in evicted)
        return evicted

    # ------------------------------------------------------------------ internals (no lock)
    def _free_blocks(self, blocks: list[PinnedBlock]) -> None:
        for b in blocks:
            self._free(b.ptr)
            b.ptr = 0
        if blocks:
            with self._lock:
                self._frees += len(blocks)

    def _pin(self, size: int) -> int:
        try:
            return int(self._alloc(size))
        except BaseException as exc:
            if not _is_out_of_memory(exc):
                raise
        # The OS would not lock more pages: free what this pool keeps idle, try once more.
        with self._lock:
            evicted = self._pop_idle_all()
        self._free_blocks(evicted)
        try:
            return int(self._alloc(size))
        except BaseException as exc:
            if not _is_out_of_memory(exc):
                raise
            raise MemoryError(
                f"fullpipe pinned pool: the system would not pin {size} bytes ({_mib(size)}) even after "
                "the pool freed its idle buffers. Pin less (smaller chunks, fewer outputs alive at "
                "once) or use pageable memory.") from exc


# --------------------------------------------------------------------------- the process-wide pool
_default_lock = threading.Lock()
_default_pool: PinnedPool | None = None


def default_cap_bytes() -> int:
    """A quarter of the machine's physical memory (pinned pages cannot be swapped or
    moved; pinning most of RAM starves the OS); 4 GiB when that is unknown."""
    try:
        return max(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4, MIN_CLASS_BYTES)
    except (ValueError, OSError, AttributeError):
        return 4 << 30


def default_pinned_pool() -> PinnedPool:
    """The process-wide pinned pool that pipelines share, so that consecutive runs (and
    pipelines, and threads) reuse buffers. Made on first use with
    :func:`default_cap_bytes`; change ``default_pinned_pool().cap_bytes`` to resize it.
    It shares its cap with the process-wide pin-down cache (cuda/pin_cache.py): before
    it pins new memory, the cache lets go of idle registrations beyond the cap."""
    global _default_pool
    with _default_lock:
        if _default_pool is None or _default_pool.closed:
            _default_pool = PinnedPool(default_cap_bytes(), on_growth=_default_pool_grows)
        return _default_pool


_growth_hooks: list[Callable[[], Any]] = []


def on_default_pool_growth(hook: Callable[[], Any]) -> None:
    """Call ``hook()`` whenever the process-wide pool is about to pin new memory (the
    pin-down cache's ``yield_to_others``)."""
    _growth_hooks.append(hook)


def _default_pool_grows() -> None:
    for hook in list(_growth_hooks):
        hook()


def default_pool_held_bytes() -> int:
    """Bytes the process-wide pool holds (in use and idle); 0 when it was never made.
    Never makes the pool."""
    pool = _default_pool
    return 0 if pool is None or pool.closed else pool.held_bytes

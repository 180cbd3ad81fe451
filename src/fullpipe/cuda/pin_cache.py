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
- **When.** The second time a pipeline run sees the same range (address and size) with
  the same NumPy array (for torch tensors: the same range): a range seen once is only
  remembered, so one-off arrays never pay for a registration, nor does a new array that the
  allocator put where a dropped one was (files loaded one by one into new arrays).
- **Lists of batches** (``run_batches``, :meth:`PinCache.acquire_list`): a list of at
  least ``min_bytes`` in all is pinned as a whole, whatever the size of each batch,
  the second time the same batches come: all of them or none (the run copies directly
  only when every batch is pinned). Batches whose ranges share a page (NumPy and torch
  allocate mid-size arrays next to one another on the heap; the driver refuses to
  register a page twice) are registered together as one range, which also pins the
  bytes between them; that entry holds every one of them alive and is let go when
  none of them is held any more.
- **Keeping the memory alive.** An entry holds a strong reference to the owning array
  (or the tensor's storage), so the registered memory cannot be freed, and its
  addresses reused by a new array, while it is registered. An idle entry whose array
  nobody else refers to any more (NumPy: the owning array's reference count; torch: the
  storage's use count where PyTorch exposes it, else the last tensor a run was given, by
  weak reference) is unregistered, then let go, and its memory is freed then. That
  happens at every pipeline run, once the run holds the entries it uses, and on the
  cache's reaper thread, which looks once a second while the cache holds entries: an
  array the caller drops is given back within about a second, even if no pipeline runs
  again. Not from a finalizer: the memory must stay registered until it is unregistered,
  then freed, in that order. Unregistering runs in relaxed stream-capture mode, so it
  never invalidates a graph capture that another thread has in progress. (A torch
  storage resized in place while registered moves its memory under the registration:
  it is unregistered at the next look, but copies made in between by other libraries
  would use the old pages. Do not resize a tensor a pipeline runs on.)
- **Cap, one budget with the pinned pool.** The cache's bytes plus those the
  process-wide pinned pool holds stay under ``cap_bytes`` (a quarter of physical
  memory, the pool's own cap): to make room the cache unregisters idle entries, those
  nobody refers to first, then the least recently used; if that is not enough the
  array goes through the ring. The pool has the first claim: when it grows, the cache
  lets go of idle entries until both fit again (entries in use stay until their runs
  end).
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

import atexit
import bisect
import dataclasses
import sys
import threading
import time
import weakref
from typing import Any, Callable

import numpy as np

from . import driver as drv
from . import pinned_pool
from .device import ensure_current
from .interop import _is_torch_tensor

MIN_BYTES = 64 << 20  # smaller arrays: bulk staging and the ring do well, and they may share pages
WHOLE_MAX_RATIO = 2  # register a view's whole allocation when it is at most this many times the view
MAX_SIGHTINGS = 16384  # ranges remembered as seen once (a list of batches counts one per batch)
PAGE = 4096  # the driver registers whole pages
MAX_REFUSED = 256  # ranges remembered as refused by the driver
REAP_INTERVAL_S = 1.0  # how often the reaper thread looks for arrays nobody holds any more
CU_MEMHOSTREGISTER_PORTABLE = 0x01  # cuda.h: pinned for every context


@dataclasses.dataclass
class _Entry:
    ptr: int
    nbytes: int
    keep: Any  # strong reference: the memory stays allocated while registered (NumPy: the owning
    # array; torch: a tensor of ours on the storage)
    user: Any  # weakref to the torch tensor it came from (None for NumPy: keep's refcount tells;
    # torch: used only where the storage's use count cannot be read)
    alloc_ptr: int = 0  # the allocation's address when registered (a torch storage may move)
    users: int = 0  # runs using it now
    runs: int = 0  # runs that have held it (count_run; the executor pins new outputs for an input of many)
    last_used: float = 0.0
    # Several arrays registered as one range (acquire_list): ``parts`` keep them alive, one
    # per owning array or storage (keep/user/alloc_ptr as above; not registered by
    # themselves), and ``found_by`` lists the batches' own ranges.
    parts: list["_Entry"] | None = None
    found_by: list[tuple[int, int]] | None = None

    def ranges(self) -> list[tuple[int, int]]:
        """The (address, bytes) ranges this entry is found by."""
        return self.found_by or [(self.ptr, self.nbytes)]


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

    def __init__(self, cap_bytes: int | None = None, min_bytes: int = MIN_BYTES,
                 others: Callable[[], int] = lambda: 0, reap_interval_s: float | None = REAP_INTERVAL_S):
        """``others()``: page-locked bytes held elsewhere that count against the same cap
        (the process-wide cache: the process-wide pinned pool's). ``reap_interval_s``:
        how often the reaper thread looks for dropped arrays (None: no reaper; only runs
        and :meth:`flush` let them go)."""
        self.cap_bytes = pinned_pool.default_cap_bytes() if cap_bytes is None else int(cap_bytes)
        self.min_bytes = int(min_bytes)
        self._others = others
        self._lock = threading.RLock()
        self._entries: dict[tuple[int, int], _Entry] = {}
        self._by_range: dict[tuple[int, int], _Entry] = {}  # every range an entry is found by (parts too)
        self._starts: list[int] = []  # the entries' addresses, sorted (registrations never overlap)
        self._at_start: dict[int, _Entry] = {}
        # ranges seen once: (address, bytes) -> a weak reference to the NumPy array seen there
        # (None for torch: its storages' identity is not kept; see _sighting)
        self._seen: dict[tuple[int, int], Any] = {}
        self._refused: dict[tuple[int, int], None] = {}
        self._registrations = self._unregistrations = 0
        self._register_s = 0.0
        self._reap_interval_s = reap_interval_s
        self._reaper: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------------ per run
    def acquire(self, obj: Any, arr: np.ndarray, pinned: Callable[[], bool] = lambda: False,
                ) -> tuple[_Entry | None, float]:
        """The cache entry whose registered range holds ``arr`` (the host view of the
        user's ``obj``), registering it now if this is its second sighting; acquired for
        the caller's run (give it back with :meth:`release`). ``pinned()``: is the
        memory page-locked already (by its owner)? Then it is not the cache's. Returns
        (entry or None, seconds spent registering now)."""
        if arr.nbytes * WHOLE_MAX_RATIO < self.min_bytes:  # (the range it would register is smaller still:
            return None, 0.0  # no look at its owner, ~10-20 us for a torch tensor; a small request's run)
        mem = _owning_memory(obj, arr)
        if mem is None:
            return None, 0.0
        ptr, nbytes, keep, user, alloc_ptr = mem
        if nbytes < self.min_bytes:
            return None, 0.0
        key = (ptr, nbytes)
        with self._lock:
            e = self._find(ptr, nbytes)  # (the range itself, or one holding it)
            if e is not None:
                if user is not None:  # the tensor of this run (a view made per call is fine)
                    e.user = user
                return self._use(e), 0.0
            if key in self._refused or pinned():
                return None, 0.0
            if not self._seen_before(key, keep):
                self._see(key, keep)
                return None, 0.0
            if not self._make_room(nbytes):
                return None, 0.0
            t0 = time.perf_counter()
            try:
                drv.call("cuMemHostRegister", ptr, nbytes, CU_MEMHOSTREGISTER_PORTABLE)
            except Exception:  # noqa: BLE001 - a limit, an overlap: the ring it is, for good
                self._refused[key] = None
                while len(self._refused) > MAX_REFUSED:
                    del self._refused[next(iter(self._refused))]
                self._seen.pop(key, None)
                return None, 0.0
            dt = time.perf_counter() - t0
            self._register_s += dt
            self._registrations += 1
            self._seen.pop(key, None)
            e = self._add(_Entry(ptr, nbytes, keep, user, alloc_ptr))
            self._start_reaper()
            return self._use(e), dt

    def find_list(self, ranges: list[tuple[int, int]]) -> list[_Entry] | None:
        """run_batches, the cheap look first: the entries of a list registered as it is
        (each batch's (address, bytes) a range the cache registered), acquired as by
        :meth:`acquire_list`; None, and nothing held, unless every batch is one. No look
        at the batches' owners (~10 us each)."""
        if not self._by_range:
            return None
        with self._lock:
            found = [self._by_range.get(r) for r in ranges]
            if None in found:
                return None
            return [self._use(e) for e in found]  # type: ignore[arg-type]

    def acquire_list(self, items: list[tuple[Any, np.ndarray]]) -> tuple[list[_Entry] | None, float]:
        """run_batches: the entries holding every batch of a list, acquired for the
        caller's run (one per batch: give each back with :meth:`release`), registering
        what is missing if every batch was seen before; or None, and nothing held, when
        not all of them are (or can be) pinned in place. ``items``: (the user's object,
        its host view) per batch. Returns (entries or None, seconds spent registering now)."""
        mems = []
        for obj, arr in items:
            mem = _owning_memory(obj, arr)
            if mem is None:
                return None, 0.0
            mems.append(mem)
        if sum(m[1] for m in {(m[0], m[1]): m for m in mems}.values()) < self.min_bytes:
            return None, 0.0
        with self._lock:
            found = [self._find(m[0], m[1]) for m in mems]
            held = [self._use(e) for e in found if e is not None]  # (so that making room keeps them)
            missing = {(m[0], m[1]): m for m, e in zip(mems, found) if e is None}
            if not missing:
                return held, 0.0
            made, dt = None, 0.0
            if (all(self._seen_before(k, m[2]) for k, m in missing.items())
                    and not any(k in self._refused for k in missing)):
                made, dt = self._register_clusters(list(missing.values()))
            if made is None:
                for k, m in missing.items():
                    self._see(k, m[2])
                for e in held:
                    e.users -= 1
                return None, dt
            held += [self._use(self._by_range[(m[0], m[1])]) for m, e in zip(mems, found) if e is None]
            return held, dt

    def _register_clusters(self, mems: list[tuple]) -> tuple[list[_Entry] | None, float]:
        """(Inside the lock.) Register ``mems`` (from _owning_memory), those sharing a page
        as one range each; all or none: on a refusal, what this call registered is
        unregistered again and the refused ranges are remembered."""
        mems.sort(key=lambda m: m[0])
        clusters: list[list[tuple]] = []
        end = -1
        for m in mems:
            if clusters and m[0] // PAGE <= (end - 1) // PAGE:  # shares a page with the cluster so far
                clusters[-1].append(m)
                end = max(end, m[0] + m[1])
            else:
                clusters.append([m])
                end = m[0] + m[1]
        spans = [(c[0][0], max(m[0] + m[1] for m in c) - c[0][0]) for c in clusters]
        if not self._make_room(sum(n for _, n in spans)):
            return None, 0.0
        made: list[_Entry] = []
        t0 = time.perf_counter()
        for c, (ptr, nbytes) in zip(clusters, spans):
            try:
                drv.call("cuMemHostRegister", ptr, nbytes, CU_MEMHOSTREGISTER_PORTABLE)
            except Exception:  # noqa: BLE001 - an overlap with memory registered by someone else, a limit
                for e in made:
                    self._unregister(e)
                for m in c:
                    self._refused[(m[0], m[1])] = None
                while len(self._refused) > MAX_REFUSED:
                    del self._refused[next(iter(self._refused))]
                return None, time.perf_counter() - t0
            self._registrations += 1
            if len(c) == 1:
                made.append(self._add(_Entry(*c[0])))
                continue
            owners = {_owner_id(m[2]): m for m in c}  # one part per array kept: each holds one reference
            made.append(self._add(_Entry(ptr, nbytes, None, None, ptr, parts=[_Entry(*m) for m in owners.values()],
                                         found_by=[(m[0], m[1]) for m in c])))
        dt = time.perf_counter() - t0
        self._register_s += dt
        for m in mems:
            self._seen.pop((m[0], m[1]), None)
        self._start_reaper()
        return made, dt

    def hold(self, arr: np.ndarray) -> _Entry | None:
        """The entry ``arr`` lies in, acquired, if the cache registered its memory; no
        sighting is counted and nothing is registered (run_batches: its batches are used
        as they come, but one registered by an earlier run must stay so while copied)."""
        if not self._entries:  # (read without the lock: an entry made meanwhile is not ours to hold)
            return None
        with self._lock:
            e = self._find(arr.ctypes.data, int(arr.nbytes))
            return None if e is None else self._use(e)

    @property
    def empty(self) -> bool:
        """No range is registered (read without the lock, as :meth:`overlap` reads it first)."""
        return not self._starts

    def overlap(self, ptr: int, nbytes: int) -> str:
        """How the cache's registrations meet [ptr, ptr + nbytes): ``"none"``, ``"inside"``
        (one entry holds all of it) or ``"partial"``. A range the driver calls pinned at both
        ends may still be pinned only in parts by the cache (views of one array registered
        one by one, then the whole array): copied directly it would fail part way (or read
        memory the cache unregisters meanwhile), so it is not pinned for a run."""
        if not self._starts:  # (read without the lock: a registration made meanwhile is not this run's)
            return "none"
        with self._lock:
            e = self._last_starting_before(ptr + nbytes)
            if e is None or e.ptr + e.nbytes <= ptr:  # (and every entry before it ends before it starts)
                return "none"
            return "inside" if e.ptr <= ptr and ptr + nbytes <= e.ptr + e.nbytes else "partial"

    def count_run(self, entries: list[_Entry]) -> None:
        """One more run holds ``entries`` (distinct: the caller counts each once per run)."""
        with self._lock:
            for e in entries:
                e.runs += 1

    def release(self, entry: _Entry) -> None:
        """A run is done with ``entry`` (its copies have completed)."""
        with self._lock:
            entry.users -= 1

    def flush(self, reaper: bool = False) -> int:
        """Unregister idle entries whose arrays nobody else holds any more (and entries
        whose tensor's memory moved); returns how many. Safe from any thread at any
        time (a pipeline run's start, the reaper: ``reaper=True``)."""
        with self._lock:
            dropped = [e for e in self._entries.values() if e.users == 0 and not _still_used(e, reaper)]
            for e in dropped:
                self._unregister(e)
            return len(dropped)

    def yield_to_others(self) -> int:
        """Unregister idle entries (nobody else's first, then the least recently used)
        until this cache and ``others()`` fit under the cap again; returns how many.
        The pinned pool calls this when it grows."""
        with self._lock:
            before = self._unregistrations
            self._make_room(0)
            return self._unregistrations - before

    def stop_reaper(self) -> None:
        """Stop the reaper thread (at exit: the OS unpins what is left with the process)."""
        self._stop.set()
        t = self._reaper
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5 * (self._reap_interval_s or 1.0))

    def close(self) -> None:
        """Stop the reaper thread and unregister every idle entry."""
        self.stop_reaper()
        self.clear()

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
    def _seen_before(self, key: tuple[int, int], keep: Any) -> bool:
        """Was this range seen by an earlier run, holding the same array? A NumPy array is
        told apart from a new one at the same address (the allocator reuses the memory of
        arrays that are gone: imap's batches, a loop that loads each file into a new array),
        which a registration would not pay back."""
        if key not in self._seen:
            return False
        ref = self._seen[key]
        return ref is None or ref() is keep

    def _see(self, key: tuple[int, int], keep: Any) -> None:
        self._seen.pop(key, None)  # (to the end: the oldest sightings go first)
        self._seen[key] = _sighting(keep)
        while len(self._seen) > MAX_SIGHTINGS:
            del self._seen[next(iter(self._seen))]

    def _use(self, e: _Entry) -> _Entry:
        """One more run holds ``e``."""
        e.users += 1
        e.last_used = time.monotonic()
        return e

    def _add(self, e: _Entry) -> _Entry:
        self._entries[(e.ptr, e.nbytes)] = e
        bisect.insort(self._starts, e.ptr)
        self._at_start[e.ptr] = e
        for r in e.ranges():
            self._by_range[r] = e
        return e

    def _find(self, ptr: int, nbytes: int) -> _Entry | None:
        """The registered entry whose range holds [ptr, ptr + nbytes), if any: a range
        registered as such at once (a list's batches, every run), else by a scan."""
        return self._by_range.get((ptr, nbytes)) or self._covering(ptr, nbytes)

    def _covering(self, ptr: int, nbytes: int) -> _Entry | None:
        """The registered entry whose range holds [ptr, ptr + nbytes), if any: the last one
        starting at or before ``ptr`` (registrations never overlap). By bisection: a scan of
        every entry made each array of a run cost O(entries); 254 arrays against 1200 entries
        a list of 600 batches left took 2.4 ms per run (session 21)."""
        e = self._last_starting_before(ptr + 1)
        return e if e is not None and ptr + nbytes <= e.ptr + e.nbytes else None

    def _last_starting_before(self, end: int) -> _Entry | None:
        """(Inside the lock.) The entry with the highest start below ``end``, if any."""
        i = bisect.bisect_left(self._starts, end) - 1
        return self._at_start[self._starts[i]] if i >= 0 else None

    def _make_room(self, nbytes: int) -> bool:
        """Unregister idle entries until ``nbytes`` more fit beside the cache's entries
        and ``others()`` under the cap: those nobody else holds first, then the least
        recently used. True when they fit."""
        if nbytes > self.cap_bytes:
            return False
        held = sum(e.nbytes for e in self._entries.values()) + self._others()
        idle = sorted((e for e in self._entries.values() if e.users == 0),
                      key=lambda e: (_still_used(e), e.last_used))
        for e in idle:
            if held + nbytes <= self.cap_bytes:
                break
            self._unregister(e)
            held -= e.nbytes
        return held + nbytes <= self.cap_bytes

    def _unregister(self, e: _Entry) -> None:
        del self._entries[(e.ptr, e.nbytes)]
        del self._starts[bisect.bisect_left(self._starts, e.ptr)]
        del self._at_start[e.ptr]
        for r in e.ranges():
            self._by_range.pop(r, None)
        try:
            ensure_current()  # (registered PORTABLE: any context will do)
            with _relaxed_capture_mode():
                drv.call("cuMemHostUnregister", e.ptr)
        except Exception:  # noqa: BLE001 - context gone (at exit): the OS unpins with the process
            pass
        self._unregistrations += 1
        e.keep = e.parts = None  # only now may the memory be freed

    # ------------------------------------------------------------------ the reaper
    def _start_reaper(self) -> None:
        """(Inside the lock.) Look for dropped arrays once a second while entries exist."""
        if self._reap_interval_s is None or self._stop.is_set():
            return
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(target=self._reap, name="fullpipe-pin-cache-reaper", daemon=True)
            self._reaper.start()

    def _reap(self) -> None:
        while not self._stop.wait(self._reap_interval_s):
            with self._lock:
                self.flush(reaper=True)
                if not self._entries:
                    self._reaper = None
                    return


class _relaxed_capture_mode:
    """This thread in relaxed stream-capture mode for a call that global-mode capture
    forbids (cuMemHostUnregister): another thread's graph capture stays valid."""

    def __enter__(self) -> None:
        self._old = None
        d = drv.driver()
        relaxed = getattr(getattr(d, "CUstreamCaptureMode", None), "CU_STREAM_CAPTURE_MODE_RELAXED", None)
        exchange = getattr(d, "cuThreadExchangeStreamCaptureMode", None)
        if relaxed is None or exchange is None:  # (a test's fake driver)
            return
        err, old = exchange(relaxed)
        if int(err) == 0:
            self._old = old

    def __exit__(self, *exc: Any) -> None:
        if self._old is not None:
            drv.driver().cuThreadExchangeStreamCaptureMode(self._old)


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
        # keep: a tensor of our own on the storage (not the storage's Python object), so
        # that the storage's use count is ours plus the caller's tensors (_torch_storage_users)
        return ptr, nbytes, obj.detach(), weakref.ref(obj), whole[0]
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


def _sighting(keep: Any) -> Any:
    """What a sighting remembers of the array it saw: a weak reference to a NumPy array
    (a new array at the same address is another one); None for a torch tensor's storage
    (its Python object is made anew at each call; the address alone is kept)."""
    if isinstance(keep, np.ndarray):
        try:
            return weakref.ref(keep)
        except TypeError:
            return None
    return None


def _owner_id(keep: Any) -> int:
    """What one kept array stands for: the NumPy array itself; a torch tensor's storage."""
    if _is_torch_tensor(keep):
        return int(keep.untyped_storage().data_ptr())
    return id(keep)


def _still_used(e: _Entry, reaper: bool = False) -> bool:
    """Does anyone but the cache still hold the entry's array? ``reaper``: asked off a
    run, where a torch entry without a readable use count counts as held (its weak
    reference is to the last tensor a run was given, which may be a view made per call).
    Several arrays registered as one range: while any of them is."""
    if e.parts:
        return any(_still_used(p, reaper) for p in e.parts)
    if e.user is not None:  # a torch storage: its memory still where it was, and held by a tensor
        if int(e.keep.untyped_storage().data_ptr()) != e.alloc_ptr:
            return False
        count = _torch_storage_users(e.keep)
        if count is not None:
            return count > 0
        return reaper or e.user() is not None
    # NumPy: our reference plus getrefcount's own argument, and nothing else
    return sys.getrefcount(e.keep) > 2


_torch_own_count: list[int | None] = []  # the use count of a storage held by one tensor only (None: unreadable)


def _torch_storage_users(keep: Any) -> int | None:
    """How many holders besides the cache's own tensor ``keep`` its storage has (the
    caller's tensors and views), from PyTorch's storage use count; None where this
    PyTorch does not expose it or it does not count as measured here once: a storage
    held by one tensor, then by that tensor and a second one on it."""
    import torch

    use_count = getattr(torch._C, "_storage_Use_Count", None)
    if use_count is None:
        return None
    try:
        if not _torch_own_count:
            first = torch.empty(1)
            second = first.detach()
            both = int(use_count(second.untyped_storage()._cdata))
            del first
            alone = int(use_count(second.untyped_storage()._cdata))
            _torch_own_count.append(alone if both == alone + 1 else None)
        own = _torch_own_count[0]
        if own is None:
            return None
        return int(use_count(keep.untyped_storage()._cdata)) - own
    except Exception:  # noqa: BLE001 - a PyTorch where this private call changed
        return None


_default: PinCache | None = None
_default_lock = threading.Lock()


def default_pin_cache() -> PinCache:
    """The process-wide pin-down cache that pipelines share. It shares one cap with the
    process-wide pinned pool: its bytes count here, and when the pool grows the cache
    lets go of idle entries first."""
    global _default
    with _default_lock:
        if _default is None:
            _default = PinCache(others=pinned_pool.default_pool_held_bytes)
            pinned_pool.on_default_pool_growth(_default.yield_to_others)
            atexit.register(_default.stop_reaper)
        return _default

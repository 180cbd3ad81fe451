"""Pageable host arrays through the pinned ring, staged by CPU threads.

Handing pageable memory to ``cuMemcpyAsync`` makes the driver copy it through a
hidden pinned buffer, in pieces, while the calling thread waits: the copy engine
idles while the CPU copies and vice versa, and the launching thread is blocked.
Instead, fullpipe's staging threads copy batch j+1 into a pinned slot (several
threads at once, ``memmove`` without the GIL) while the copy engine moves batch j
out of another slot; on the way back, a drain thread copies finished slots into
the user's output while later batches are still on the GPU.

- :class:`HostCopier`  one memmove split over a few threads
- :class:`InputStager` fills input slots ahead of the enqueueing thread
- :class:`OutputDrainer` empties output slots once their D2H is done
- :class:`InlineInputStager`, :class:`InlineOutputDrainer`: the same jobs done by the
  enqueueing thread itself, for small batches (``INLINE_MAX_BYTES``)

Why small batches are staged inline: a staging thread needs the GIL a few times per
batch (after each wait, each memmove, each hand-off). While the enqueueing thread runs
Python (a model's forward: hundreds of microseconds of kernel launches), every one of
those is a forced GIL switch with its OS wake-ups. Measured on the H200 machine: a
transformer layer's compute call took 715 us per batch inside the pipeline with
staging threads and 269 us alone (variable-length workload, ~300 KB per batch). A
memmove of 1 MiB costs ~150 us on one core, less than those switches.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import queue
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterator, Sequence

from .plan import host_address
from .staging import GpuSignal, SlotRing, Stopped

# Each staging thread gets at least this much of a copy. Measured on the H200 machine
# (16 vCPUs, docs/notes/probes.md): 4 MiB batches both ways moved 6 GB/s split over 5
# threads per direction and 11-15 GB/s over 2; the hand-offs of many small pieces
# (each needs the GIL) cost more than the extra memmove bandwidth buys.
MIN_PIECE_BYTES = 2 << 20
# Batches up to this size (per direction) are staged by the enqueueing thread (module doc).
INLINE_MAX_BYTES = 1 << 20
_PAGE = 4096
_POLL_S = 0.05


def default_copy_threads() -> int:
    """Threads per direction: half the cores, at most 8. On the 16-core H100 host a 1 GiB
    pageable MLP run (both directions at once, issue 14) moved 15.8 GB/s each way with 8
    threads per direction against 12.4 with 5 and 13.6 with 12 (same process, alternating
    runs; session 10)."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def split_ranges(nbytes: int, parts: int, align: int = _PAGE) -> list[tuple[int, int]]:
    """[(start, stop), ...] cutting nbytes into at most ``parts`` page-aligned pieces."""
    if nbytes <= 0:
        return []
    parts = max(1, min(parts, -(-nbytes // align)))
    step = -(-nbytes // parts)
    step = -(-step // align) * align
    return [(a, min(a + step, nbytes)) for a in range(0, nbytes, step)]


class HostCopier:
    """``copy(dst, src, nbytes)`` between host addresses, split over up to ``threads``
    threads, at least MIN_PIECE_BYTES each. ``ctypes.memmove`` releases the GIL, so the
    pieces really run in parallel."""

    def __init__(self, threads: int):
        self.threads = max(1, int(threads))
        self._pool = (ThreadPoolExecutor(self.threads - 1, thread_name_prefix="fullpipe-copy")
                      if self.threads > 1 else None)

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        parts = min(self.threads, nbytes // MIN_PIECE_BYTES)
        if self._pool is None or parts < 2:
            ctypes.memmove(dst, src, nbytes)
            return
        pieces = split_ranges(nbytes, parts)
        futures = [self._pool.submit(ctypes.memmove, dst + a, src + a, b - a) for a, b in pieces[1:]]
        a, b = pieces[0]
        ctypes.memmove(dst + a, src + a, b - a)
        for f in futures:
            f.result()

    def copy_parts(self, dst: int, parts: Sequence[tuple[int, int, int]]) -> None:
        """One batch gathered from several places (a batch of several arrays, records.py):
        ``(bytes into dst, src, nbytes)`` each, a large one split over the threads as
        :meth:`copy` splits one array, a small one in one memmove."""
        for at, src, n in parts:
            if n >= 2 * MIN_PIECE_BYTES:
                self.copy(dst + at, src, n)
            else:
                ctypes.memmove(dst + at, src, n)

    def _runs(self, copies: Sequence[tuple[int, int, int]], most: int) -> list[list[tuple[int, int, int]]]:
        """``copies`` cut into up to ``most`` consecutive runs of about equal bytes (small
        copies are not split)."""
        total = sum(n for _, _, n in copies)
        parts = min(most, len(copies), max(1, total // MIN_PIECE_BYTES))
        runs: list[list[tuple[int, int, int]]] = [[]]
        share, acc = total / max(parts, 1), 0
        for c in copies:
            if acc >= share * len(runs) and len(runs) < parts:
                runs.append([])
            runs[-1].append(c)
            acc += c[2]
        return runs

    def copy_many(self, copies: Sequence[tuple[int, int, int]]) -> None:
        """Many ``(dst, src, nbytes)`` copies, the list cut into up to ``threads`` runs of
        about equal bytes, each run on its own thread (small copies are not split)."""
        runs = self._runs(copies, self.threads) if self._pool is not None else [list(copies)]
        futures = [self._pool.submit(_copy_each, cs) for cs in runs[1:]]  # type: ignore[union-attr]
        _copy_each(runs[0])
        for f in futures:
            f.result()

    def submit_many(self, copies: Sequence[tuple[int, int, int]]) -> list[Future]:
        """``copy_many`` on the copier's threads, the caller's not among them (on the
        caller's, done, with one thread): futures to wait for."""
        if self._pool is None:
            done: Future = Future()
            _copy_each(copies)
            done.set_result(None)
            return [done]
        return [self._pool.submit(_copy_each, cs) for cs in self._runs(copies, self.threads - 1)]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _copy_each(copies: Sequence[tuple[int, int, int]]) -> None:
    for dst, src, n in copies:
        ctypes.memmove(dst, src, n)


class _Worker:
    """A daemon thread whose first exception is kept for the enqueueing thread."""

    def __init__(self, name: str, on_start: Any = None):
        self.error: BaseException | None = None
        self._on_start = on_start  # e.g. make the device's context current on this thread
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _main(self) -> None:
        try:
            if self._on_start is not None:
                self._on_start()
            self.work()
        except Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.error = exc

    def work(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


def stage_copy(copier: HostCopier, dst: int, src: Any) -> None:
    """One batch's input into a pinned slot: ``src`` a host array, or the parts a batch of
    several arrays is gathered from (records.Packed.parts)."""
    if isinstance(src, list):
        copier.copy_parts(dst, src)
    else:
        copier.copy(dst, host_address(src), src.nbytes)


class InputStager(_Worker):
    """Copies batch j's input into slot j % K as soon as the GPU has released that slot
    (its ``free`` signal), then tells the enqueueing thread through ``take(j)``.
    ``sources``: each batch's host array, or the parts it is gathered from (stage_copy)."""

    def __init__(self, ring: SlotRing, free: Sequence[GpuSignal], sources: Sequence[Any],
                 copier: HostCopier, stop: threading.Event, on_start: Any = None):
        super().__init__("fullpipe-stage-in", on_start)
        self.ring, self.free, self.sources, self.copier, self.stop = ring, free, sources, copier, stop
        self._filled: queue.Queue[int] = queue.Queue()
        self.copy_s: list[float] = []  # per batch: the memmove's seconds (chunk="auto" models it)

    def work(self) -> None:
        k = self.ring.slots
        perf = time.perf_counter
        for j, src in enumerate(self.sources):
            slot = j % k
            self.free[slot].wait(self.stop)
            if self.stop.is_set():
                return
            t0 = perf()
            stage_copy(self.copier, self.ring.address(slot), src)
            self.copy_s.append(perf() - t0)
            self._filled.put(j)

    def take(self, j: int) -> int:
        """Block until batch j is in its slot; return the slot."""
        while True:
            try:
                got = self._filled.get(timeout=_POLL_S)
            except queue.Empty:
                self.raise_error()
                if not self.alive:
                    raise RuntimeError("fullpipe input staging thread ended early") from None
                continue
            if got != j:  # pragma: no cover - the stager fills strictly in order
                raise RuntimeError(f"staging order broken: expected batch {j}, got {got}")
            return j % self.ring.slots


def _drain_slot(drainer: Any, slot: int, dst: int, nbytes: int) -> None:
    """One output slot to its pageable destination, for either drainer: wait until the
    GPU has filled the slot, copy it out (timed), hand the slot back."""
    drainer.ready[slot].wait(drainer.stop)
    t0 = time.perf_counter()
    if nbytes:
        drainer.copier.copy(dst, drainer.ring.address(slot), nbytes)
    drainer.copy_s.append(time.perf_counter() - t0)
    drainer.free[slot].release()


class OutputDrainer(_Worker):
    """Copies each finished output slot to the user's array, then frees the slot."""

    def __init__(self, ring: SlotRing, ready: Sequence[GpuSignal], free: Sequence[threading.Semaphore],
                 copier: HostCopier, stop: threading.Event, on_start: Any = None):
        super().__init__("fullpipe-drain-out", on_start)
        self.ring, self.ready, self.free, self.copier, self.stop = ring, ready, free, copier, stop
        self._work: queue.Queue[tuple[int, int, int] | None] = queue.Queue()
        self.copy_s: list[float] = []  # per batch: the memmove's seconds

    def submit(self, slot: int, dst: int, nbytes: int) -> None:
        self._work.put((slot, dst, nbytes))

    def finish(self) -> None:
        self._work.put(None)

    def work(self) -> None:
        while True:
            try:
                item = self._work.get(timeout=_POLL_S)
            except queue.Empty:
                if self.stop.is_set():
                    return
                continue
            if item is None:
                return
            _drain_slot(self, *item)

    def acquire_slot(self, slot: int) -> None:
        """Block the enqueueing thread until output slot ``slot`` is free again."""
        while not self.free[slot].acquire(timeout=_POLL_S):
            self.raise_error()
            if not self.alive:
                raise RuntimeError("fullpipe output drain thread ended early")

    def wait_done(self) -> None:
        while not self.join(_POLL_S):
            pass
        self.raise_error()


class InlineInputStager:
    """:class:`InputStager`'s job done by the enqueueing thread: ``take(j)`` waits for
    slot j % K to be released by the GPU, then copies batch j into it. No thread."""

    error = None

    def __init__(self, ring: SlotRing, free: Sequence[GpuSignal], sources: Sequence[Any],
                 copier: HostCopier, stop: threading.Event):
        self.ring, self.free, self.sources, self.copier, self.stop = ring, free, sources, copier, stop
        self.copy_s: list[float] = []

    def start(self) -> None:
        pass

    def take(self, j: int) -> int:
        slot = j % self.ring.slots
        self.free[slot].wait(self.stop)
        t0 = time.perf_counter()
        stage_copy(self.copier, self.ring.address(slot), self.sources[j])
        self.copy_s.append(time.perf_counter() - t0)
        return slot

    def raise_error(self) -> None:
        pass

    def join(self, timeout: float | None = None) -> bool:
        return True


class InlineOutputDrainer:
    """:class:`OutputDrainer`'s job done by the enqueueing thread: finished outputs
    wait in order until their slot is needed again (``acquire_slot``) or the run ends
    (``wait_done``); then their D2H is waited for (done by then, as a rule) and the slot
    copied out. No thread."""

    error = None

    def __init__(self, ring: SlotRing, ready: Sequence[GpuSignal], free: Sequence[threading.Semaphore],
                 copier: HostCopier, stop: threading.Event):
        self.ring, self.ready, self.free, self.copier, self.stop = ring, ready, free, copier, stop
        self._pending: collections.deque[tuple[int, int, int]] = collections.deque()
        self.copy_s: list[float] = []

    def start(self) -> None:
        pass

    def submit(self, slot: int, dst: int, nbytes: int) -> None:
        self._pending.append((slot, dst, nbytes))

    def _drain_oldest(self) -> None:
        _drain_slot(self, *self._pending.popleft())

    def acquire_slot(self, slot: int) -> None:
        while not self.free[slot].acquire(blocking=False):
            if not self._pending:
                raise RuntimeError(f"output slot {slot} is held but no output is waiting to free it")
            self._drain_oldest()

    def finish(self) -> None:
        pass

    def wait_done(self) -> None:
        while self._pending:
            self._drain_oldest()

    def raise_error(self) -> None:
        pass

    def join(self, timeout: float | None = None) -> bool:
        return True


_switch_lock = threading.Lock()
_switch_users = 0
_switch_saved = 0.0


@contextlib.contextmanager
def short_switch_interval(seconds: float = 2e-4) -> Iterator[None]:
    """Lower the interpreter's GIL switch interval while staging threads run.

    With the default 5 ms, a staging thread (or a Python host function) that wants
    the GIL back after a memmove can wait up to 5 ms behind the enqueueing thread:
    far longer than one batch. The interval is process-wide: the first run to enter
    lowers it, the last one to leave restores it (pipelines in several threads)."""
    global _switch_users, _switch_saved
    with _switch_lock:
        if _switch_users == 0:
            _switch_saved = sys.getswitchinterval()
            sys.setswitchinterval(min(_switch_saved, seconds))
        _switch_users += 1
    try:
        yield
    finally:
        with _switch_lock:
            _switch_users -= 1
            if _switch_users == 0:
                sys.setswitchinterval(_switch_saved)

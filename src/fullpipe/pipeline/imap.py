"""Batches from any iterable, in windows: ``StreamPipeline.imap``.

A run needs its batches in hand: ``run_batches`` plans, pins and stages a whole list at
once. A dataset read from disk, a ``torch.utils.data.DataLoader`` or a generator is not a
list, and may not fit in memory as one. ``imap`` reads the iterable in *windows*, runs
each window with ``run_batches`` and yields the outputs in order, one per batch, like
``multiprocessing.Pool.imap``::

    reader thread:  read batch, batch, batch, ......... batch, batch, ...
    caller:         take what was read -> run it (GPU) -> yield its outputs -> take ...

- **Windows.** A reader thread reads the iterable batch after batch into a pending
  window; each time the caller is ready for more it takes whatever has been read (at least
  one batch) and runs it. The pending window is full at ``window`` bytes of input (default
  256 MiB) and at least ``MIN_WINDOW_BATCHES_PER_STREAM`` batches per stream, or at
  ``window`` batches when it is an int; the reader then waits. A window of small batches
  (each at most 1 MiB) is full before 64 MiB, so that ``run_batches`` stages it in bulk (or,
  for a PyTorch function from its second window on, at most 16 batches and 8 MiB in all, runs
  it plainly).
  So windows size themselves: where the GPU is faster than the iterable, a window is what
  was read during the last run (the GPU starts on the first batch, and what is left after
  the last batch is read is one short run); where the iterable is faster, every window is
  full, and each run fills and drains the streams once per window. Each run's start and end
  leave the GPU idle for a moment (the streams fill and drain, the first call's launches),
  so after k batches the caller waits for about sqrt(k) of them (or a full window) before
  it takes them: windows of 1, 1, 1, 1, 2, 2, 2, 3 ... batches, about 2·sqrt(n) runs for n
  batches (not n), and a last window of about sqrt(n). Where the iterable is the slower
  side this wait costs nothing (the GPU would wait anyway). It lasts at most about as long
  as the last run took: an iterable that makes its next batch only once it has the last
  output (a request loop) is not waited for forever. ``read_ahead=False`` reads
  full windows on the caller's thread instead (for an iterable that must stay on its
  thread): the reading and the runs then take turns. The default, "auto", does so for a
  PyTorch DataLoader without workers, whose Python would hold the GIL on the reader thread
  against the compute's (:func:`choose_read_ahead`). At most two windows of batches
  (pending and running) and one of outputs are held.
- **Errors.** An exception from the iterator (or an item that is not a host array) comes
  after the outputs of every batch read before it; an exception in the compute comes as
  from ``run_batches`` (its note names the batch's index in the window and the window's
  first batch in the iterable). Ctrl-C while the iterable is being read comes at once.
  Closing the generator early (``break``, ``close()``) drops the batches read ahead and
  waits up to ``CLOSE_WAIT_S`` for the reader to finish the item it is reading; the
  iterable is left open (as ``map`` leaves it), and free for the caller once the reader is
  done with it.
- **Pinning in place.** A window's batches are new arrays, each seen once: imap pins none
  of them in place. The allocator puts a new batch where a dropped one was, and the pin-down
  cache, which knows a torch tensor by its address only, would take it for the same batch
  seen again and register it for nothing (before this rule: 2–9 registrations per pass over
  24 files loaded with ``np.load``, on an H100, session 20). Batches that an earlier run
  pinned in place are copied directly.
- **Memory that changes under a batch.** A window holds batches the iterator has already
  moved past. An iterator that refills one buffer and yields it again (a common reading
  loop) would hand the pipeline batches whose memory changed after they were yielded.
  Each batch's memory is sampled when it is read (``SAMPLES`` spots of 8 bytes at random
  places), again before its window runs and again after; a batch whose samples differ
  raises ValueError, before the window runs or before its outputs are yielded, naming the
  batch. It is a sample, not a checksum: a refill that leaves every sampled spot as it was
  is not seen (an iterator should yield a new array per batch, as a DataLoader does).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from ..cuda.interop import host_view
from . import bulk, pageable, records
from .plan import align_up
from .tuning import parse_chunk

MIN_WINDOW_BATCHES_PER_STREAM = 4
DEFAULT_WINDOW = "256MiB"
# A window of small batches (each at most the bulk staging's batch size) closes before it
# outgrows the bulk staging's block, so that it is staged in bulk (bulk.py)
SMALL_BATCH_BYTES = pageable.INLINE_MAX_BYTES
SMALL_WINDOW_BYTES = bulk.BULK_MAX_BYTES - align_up(SMALL_BATCH_BYTES, bulk.ALIGN)  # (in the block's layout)
SAMPLES = 64  # spots of 8 bytes sampled per batch
_POLL_S = 0.05  # how often a blocked reader looks whether the caller has gone
CLOSE_WAIT_S = 1.0  # how long closing waits for the reader to finish the item it is reading


def parse_window(window: int | str) -> tuple[int | None, int | None]:
    """(bytes, batches): a str is a size in bytes ("64MiB"), an int a number of batches."""
    if isinstance(window, bool):
        raise TypeError(f"window must be a number of batches (int) or a size ('64MiB'), got {window!r}")
    if isinstance(window, (int, np.integer)):
        if window < 1:
            raise ValueError(f"window must be at least 1 batch, got {window}")
        return None, int(window)
    if isinstance(window, str):
        try:
            parsed = parse_chunk(window)  # "<n>B" for a size
        except ValueError:
            parsed = None
        if not (isinstance(parsed, str) and parsed.endswith("B")):
            raise ValueError(f"window as a str must be a size such as '64MiB', got {window!r}")
        return int(parsed[:-1]), None
    raise TypeError(f"window must be a number of batches (int) or a size ('64MiB'), got {window!r}")


# --------------------------------------------------------------------------- samples
_STARTS: dict[int, np.ndarray] = {}  # nbytes -> the sampled spots' first bytes (<= 512 B each)
_MAX_SIZES = 1024  # batch sizes whose spots are kept (variable-length batches have many)


def _spots(nbytes: int) -> np.ndarray:
    """Byte offsets of the sampled spots of a batch of ``nbytes``: 8 bytes at each of
    SAMPLES places (random, the same for every batch of this size), and the last bytes."""
    starts = _STARTS.get(nbytes)
    words = nbytes // 8
    if starts is None:
        if words <= SAMPLES:
            starts = np.arange(words, dtype=np.int64) * 8
        else:
            starts = np.sort(np.random.default_rng(nbytes).choice(words, SAMPLES, replace=False)) * 8
        if len(_STARTS) >= _MAX_SIZES:
            _STARTS.clear()
        _STARTS[nbytes] = starts
    spots = (starts[:, None] + np.arange(8)).reshape(-1)
    tail = np.arange(words * 8, nbytes, dtype=np.int64)  # the last bytes, when not a multiple of 8
    return np.concatenate([spots, tail]) if len(tail) else spots


def sample(arr: Any) -> bytes | None:
    """The batch's bytes at its sampled spots (None for an array that is not one block of
    plain data: run_batches refuses those itself). A batch of several arrays not yet
    gathered (records.Packed): its fields' spots, which are what its window will copy."""
    if isinstance(arr, records.Packed):
        return b"".join(sample(a) or b"" for a in arr.keep)
    if not arr.flags.c_contiguous or arr.nbytes == 0 or arr.dtype.hasobject:
        return None
    flat = arr.reshape(-1).view(np.uint8)
    return flat[_spots(arr.nbytes)].tobytes()


# --------------------------------------------------------------------------- windows
@dataclasses.dataclass
class Window:
    first: int  # index of its first batch in the iterable
    items: list  # the caller's objects, as yielded
    arrays: list  # what sample() reads of each: its NumPy view, or a batch of several arrays not yet gathered
    samples: list  # sample() of each when read
    nbytes: int = 0  # of input in all
    block_bytes: int = 0  # the same laid out in a bulk block (each batch aligned)
    largest: int = 0  # the largest batch's bytes
    error: BaseException | None = None  # the iterator's, after the last item read
    last: bool = False  # the iterator ended (or failed) after this window
    read_s: float = 0.0  # time spent in the iterator and the views

    def extend(self, more: "Window") -> None:
        """Add the batches read into ``more`` (and its end, if it ended)."""
        self.items += more.items
        self.arrays += more.arrays
        self.samples += more.samples
        self.read_s += more.read_s
        self.nbytes += more.nbytes
        self.block_bytes += more.block_bytes
        self.largest = max(self.largest, more.largest)
        self.error, self.last = more.error, more.last

    def changed(self) -> int | None:
        """The index in the iterable of the first batch whose memory changed since it was read."""
        for i, (a, s) in enumerate(zip(self.arrays, self.samples)):
            if s is not None and sample(a) != s:
                return self.first + i
        return None


def _not_a_batch_note(exc: BaseException, index: int, item: Any) -> None:
    hint = ""
    if isinstance(item, (tuple, list, Mapping)):
        hint = (f" It is a {type(item).__name__}: a batch of several arrays is a tuple, list or dict of host "
                "arrays with equal rows (axis 0), each a NumPy array, a torch CPU tensor or a buffer.")
    exc.add_note(f"fullpipe.StreamPipeline.imap: item {index} of the iterable is not a host batch.{hint}")


class WindowReader:
    """Reads ``iterable`` into windows.

    ``read_ahead``: a thread of its own reads batch after batch into the pending window
    and waits only when it is full; the caller takes *whatever has been read* (at least one
    batch) each time it is ready for more. So windows size themselves: where the GPU is
    faster than the iterable, each window is what was read during the last run (the GPU
    starts on the first batch, and the last run is short); where the iterable is faster,
    the pending window fills and every window is full (few runs, each filling and
    draining the streams once). After k batches the caller waits for about sqrt(k) of them
    (the module docstring says why). Without ``read_ahead``, the caller reads a full window
    itself."""

    def __init__(self, iterable: Iterable, window_bytes: int | None, window_batches: int | None,
                 min_batches: int, read_ahead: bool):
        self._it: Iterator = iter(iterable)
        self._bytes, self._batches, self._min = window_bytes, window_batches, min_batches
        self._next_index = 0
        self._taken = 0  # batches the caller has taken so far
        self._stop = threading.Event()
        self._done = False
        self._cond = threading.Condition()
        self._pending = Window(0, [], [], [])
        self._thread: threading.Thread | None = None
        if read_ahead:
            self._thread = threading.Thread(target=self._read_all, name="fullpipe-imap-reader", daemon=True)
            self._thread.start()

    def _full(self, w: Window) -> bool:
        n = len(w.items)
        if self._batches is not None:
            return n >= self._batches
        if w.largest <= SMALL_BATCH_BYTES and w.block_bytes > SMALL_WINDOW_BYTES:
            return True
        return n >= self._min and w.nbytes >= self._bytes  # type: ignore[operator]

    def _read_one(self, w: Window) -> bool:
        """Read the next item into ``w``; False when the iterable ended or failed (``w.last``,
        and ``w.error`` for a failure)."""
        t0 = time.perf_counter()
        index = self._next_index
        try:
            try:
                item = next(self._it)
            except StopIteration:
                w.last = True
                return False
            except Exception as exc:  # the iterable's own failure: after what it gave (Ctrl-C: at once)
                w.error, w.last = exc, True
                return False
            try:
                if records.is_record(item):  # (records.py: its layout found here, on the reader's thread)
                    item = records.pack(item, f"batch {index}", fill=False)
                    if item.host.nbytes <= pageable.INLINE_MAX_BYTES:
                        # a small batch filled here too, off the enqueueing thread, which would
                        # copy it itself (plainly, or staged inline); a large one is gathered by
                        # its run's staging threads, or copied where it is when pinned (session 31)
                        item.fill()
                arr, _ = host_view(item.array if isinstance(item, records.Packed) else item, f"batch {index}")
            except (TypeError, ValueError) as exc:
                _not_a_batch_note(exc, index, item)
                w.error, w.last = exc, True
                return False
            self._next_index += 1
            w.items.append(item)
            w.arrays.append(item if isinstance(item, records.Packed) and not item.filled else arr)  # (what is copied)
            w.samples.append(sample(w.arrays[-1]))
            w.nbytes += arr.nbytes
            w.block_bytes += align_up(arr.nbytes, bulk.ALIGN)
            w.largest = max(w.largest, arr.nbytes)
            return True
        finally:
            w.read_s += time.perf_counter() - t0

    def _read_window(self) -> Window:
        w = Window(self._next_index, [], [], [])
        while not self._full(w) and not self._stop.is_set():
            if not self._read_one(w):
                break
        return w

    def _read_all(self) -> None:
        """The reader thread. Whatever goes wrong in it reaches the caller, after the
        batches read before (the caller waits on the pending window: it must never wait
        for a thread that died)."""
        try:
            self._read_items()
        except BaseException as exc:  # (the iterable's own errors are caught per item; this is anything else)
            with self._cond:
                self._pending.error, self._pending.last = exc, True
                self._cond.notify_all()

    def _read_items(self) -> None:
        """One item at a time into the pending window (read outside the lock, so the caller
        can take the window meanwhile)."""
        scratch = Window(0, [], [], [])
        while not self._stop.is_set():
            with self._cond:
                while self._full(self._pending) and not self._stop.is_set():
                    self._cond.wait(_POLL_S)
            if self._stop.is_set():
                return
            more = self._read_one(scratch)
            with self._cond:
                if self._stop.is_set():  # closed meanwhile: what was read is dropped
                    return
                self._pending.extend(scratch)  # (no name of this thread's keeps the window alive)
                self._cond.notify_all()
            if not more:
                return
            scratch = Window(0, [], [], [])

    def next(self, patience_s: float = 0.0) -> tuple[Window | None, float]:
        """The next window (None after the last) and how long the caller waited for it.
        Reading ahead: at least one batch, then about sqrt(k) of them after k (the module
        docstring says why), but no longer than ``patience_s`` for the rest: an iterable that
        makes its next batch only once it has the last output (a request loop) gets it."""
        if self._done:
            return None, 0.0
        t0 = time.perf_counter()
        if self._thread is None:
            w = self._read_window()
        else:
            want = max(1, math.isqrt(self._taken))
            with self._cond:
                while not (self._pending.items or self._pending.last):
                    self._cond.wait()
                deadline = time.perf_counter() + patience_s
                while not (len(self._pending.items) >= want or self._pending.last or self._full(self._pending)):
                    left = deadline - time.perf_counter()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                w = self._pending
                self._taken += len(w.items)
                self._pending = Window(w.first + len(w.items), [], [], [])
                self._cond.notify_all()
        waited = time.perf_counter() - t0
        self._done = w.last
        return w, waited

    def close(self) -> None:
        """Stop reading: drop what was read ahead, and wait (at most CLOSE_WAIT_S) for the
        reader thread to finish the item it is reading, so that the iterable is free again
        for the caller (a generator refuses a second thread: "already executing")."""
        self._stop.set()
        self._done = True
        with self._cond:
            self._pending = Window(0, [], [], [])
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(CLOSE_WAIT_S)


def new_totals() -> dict[str, Any]:
    """What :func:`imap` counts as it goes (``StreamPipeline.imap_stats``), all zero."""
    return dict(windows=0, batches=0, bytes_in=0, read_ms=0.0, wait_ms=0.0, run_ms=0.0, wall_ms=0.0,
                read_ahead=None, read_ahead_why="")


def choose_read_ahead(iterable: Any, read_ahead: bool | str) -> tuple[bool, str]:
    """``read_ahead`` as given (True or False), or for "auto": (whether a reader thread
    reads ahead, why). Auto reads ahead except from a PyTorch ``DataLoader`` without
    workers (``num_workers=0``, its default): its dataset's ``__getitem__`` and its
    collate are Python in this process, holding the GIL, and on a reader thread they take
    turns with the compute's own Python and launches, slowing both: 0.53-0.74x the naive
    loop over the same loader, against 0.97x read on the caller's thread (resnet18 over
    images and labels on an H100, session 31). A loader with workers makes its batches in
    other processes (the reader thread waits on a queue, the GIL free), and a generator
    reading files waits on the disk with the GIL released: those read ahead. Told by the
    class's name, without importing torch (a subclass of DataLoader counts), and the same
    for the loader's iterator (``imap(iter(loader))``: PyTorch's ``_BaseDataLoaderIter``,
    whose ``_num_workers`` is the loader's)."""
    if isinstance(read_ahead, str) and read_ahead == "auto":
        for name, workers, what in (("DataLoader", "num_workers", "a DataLoader"),
                                    ("_BaseDataLoaderIter", "_num_workers", "a DataLoader's iterator")):
            if (any(c.__name__ == name and c.__module__.startswith("torch.utils.data") for c in type(iterable).__mro__)
                    and getattr(iterable, workers, None) == 0):
                return False, f"auto: {what} without workers is read on the caller's thread"
        return True, "auto: a reader thread"
    if not isinstance(read_ahead, bool):
        raise TypeError(f"read_ahead must be True, False or 'auto', got {read_ahead!r}")
    return read_ahead, "given"


def changed_error(index: int, when: str) -> ValueError:
    return ValueError(
        f"fullpipe.StreamPipeline.imap: the memory of batch {index} changed {when}. The iterable "
        "seems to refill a buffer it yielded before: imap reads a window of batches ahead of the "
        "GPU, so each batch must keep its data until its output is yielded. Yield a new array "
        "per batch (np.array(buf), tensor.clone()), or pass window=1, read_ahead=False.")


def imap(run_batches: Callable[[list, bool], Any], iterable: Iterable, *, window_bytes: int | None,
         window_batches: int | None, min_batches: int, read_ahead: bool, totals: dict) -> Iterator[Any]:
    """The generator behind ``StreamPipeline.imap``: one output per batch, in order (None
    per batch for a pipeline with ``output=None``). ``run_batches(items, whole)`` runs a
    window (``whole``: it is the whole iterable). ``totals`` (:func:`new_totals`) is filled as
    it goes."""
    reader = WindowReader(iterable, window_bytes, window_batches, min_batches, read_ahead)
    t_start = time.perf_counter()
    last_run_s = 0.0  # waiting for more batches than were read pays only up to about a run's time
    try:
        while True:
            w, waited = reader.next(patience_s=last_run_s)
            if w is None:
                return
            totals["wait_ms"] += waited * 1e3
            totals["read_ms"] += w.read_s * 1e3
            if w.items:
                index = w.changed()
                if index is not None:
                    raise changed_error(index, "after the iterable yielded it, before its window ran")
                t0 = time.perf_counter()
                try:
                    outs = run_batches(w.items, w.first == 0 and w.last)  # few batches: only a short iterable warns
                except BaseException as exc:
                    b = getattr(exc, "batch_index", None)
                    if b is not None and hasattr(exc, "add_note"):
                        exc.add_note(f"fullpipe.StreamPipeline.imap: batch {b} of a window whose first "
                                     f"batch is item {w.first} of the iterable (item {w.first + b})")
                    raise
                last_run_s = time.perf_counter() - t0
                totals["run_ms"] += last_run_s * 1e3
                index = w.changed()
                if index is not None:
                    raise changed_error(index, "while its window ran on the GPU")
                totals["windows"] += 1
                totals["batches"] += len(w.items)
                totals["bytes_in"] += w.nbytes
                totals["wall_ms"] = (time.perf_counter() - t_start) * 1e3
                n = len(w.items)
                w.items, w.arrays, w.samples = [], [], []  # the inputs may go before the outputs are used
                for o in (outs if outs is not None else [None] * n):
                    yield o
                del outs
            if w.error is not None:
                raise w.error
    finally:
        reader.close()

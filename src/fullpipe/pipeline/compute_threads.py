"""Calling a host-bound PyTorch compute from several host threads at once.

A PyTorch model's Python call can take longer on the host than its kernels take on the
GPU: an encoder layer over a few thousand tokens launches for 400-700 us on an H100 host
for about 500 us of GPU work, a smaller layer for the same host time and a fraction of
the GPU's. No layout of streams helps then: the GPU waits for the host. PyTorch releases
the GIL inside each operator (its argument parsing holds it; dispatch and the kernel
launches do not), so two threads that call the model on different streams launch more
per second than one: a d256 encoder layer over 127 device-resident batches took 2.6x
less time from two threads than from one, a d1024 one (GPU-bound on that host) the same
(H100, session 18, ``.dev/p106.py``). ``torch.nn.DataParallel`` calls modules from
threads the same way.

:class:`ComputeWorkers` are a few daemon threads kept for the whole process, not per
pipeline: PyTorch caches cuDNN attention plans and cuBLAS handles per thread, so threads
that outlive a pipeline keep them warm for the next one. A run's :class:`ComputeCalls`
sends the calls of its batches to them in turn (batch ``k`` to thread ``k % threads``)
and takes each result back in the order it sent them, on queues of its own: pipelines in
other threads may use the same workers at the same time.

PyTorch's autograd and autocast modes are per thread: each call runs in the modes of the
thread that started the run (:class:`TorchModes`), as it would have on that thread.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

from ..cuda.timing import median

MAX_THREADS = 8
# compute_threads="auto": calls whose median host time is below this (us) stay on the
# enqueueing thread (the hand-off to a worker and back costs tens of microseconds of it).
# Above, a trial: AUTO_THREADS threads for trial_calls() batches, kept if a call on them
# took (sent to done) at most TRIAL_KEEP x AUTO_THREADS times a call on the enqueueing thread (the
# threads call at least 1/TRIAL_KEEP times as fast together). Calls that hold the GIL
# (many small PyTorch operators: their Python argument parsing dominates) only take turns
# on it: each then takes about threads x as long, and the trial sends them back (p107,
# session 18: chains of 16-96 elementwise operators over small batches ran 0.93-1.0x as
# fast on 2 threads, 0.63-0.8x on 3, while an encoder layer, one fused operator that
# launches its kernels without the GIL, ran 1.5x as fast on 2 and 3 threads).
AUTO_MIN_CALL_US = 150.0
AUTO_THREADS = 3
TRIAL_KEEP = 0.8


def trial_calls(streams: int) -> int:
    """Calls seen on the enqueueing thread before a trial, and calls in the trial."""
    return 2 * streams + 2


def threads_pay(call_here_s: float, latencies_s: list[float], threads: int) -> bool:
    """Whether ``threads`` threads, whose calls took ``latencies_s`` from being sent to
    their end (the median is used: with the hand-off and the wait for the GIL, which a
    call's own time does not show when the call holds the GIL throughout), call at least
    1/TRIAL_KEEP times as fast together as one thread whose calls took ``call_here_s``."""
    return bool(latencies_s) and median(latencies_s) <= TRIAL_KEEP * threads * call_here_s


def check_compute_threads(value: Any, streams: int) -> int | str:
    """``"auto"`` or an int in [1, streams] (a batch's call must be back before the next
    batch of its stream is called: at most one call per stream at a time)."""
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"compute_threads must be 'auto' or an int >= 1, got {value!r}")
    if value > min(streams, MAX_THREADS):
        raise ValueError(f"compute_threads={value} is more than {'streams' if streams < MAX_THREADS else 'the most'} "
                         f"({min(streams, MAX_THREADS)}): each thread's call needs a stream of its own "
                         "(raise streams=, or lower compute_threads)")
    return value


class TorchModes:
    """The calling thread's autograd and autocast modes, to run a call in on another
    thread (both are thread-local in PyTorch)."""

    def __init__(self, torch: Any):
        self.torch = torch
        self.inference = torch.is_inference_mode_enabled()
        self.grad = torch.is_grad_enabled()
        self.autocast = torch.is_autocast_enabled("cuda")
        self.autocast_dtype = torch.get_autocast_dtype("cuda") if self.autocast else None

    def call(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        torch = self.torch
        if self.autocast:
            with torch.autocast("cuda", dtype=self.autocast_dtype):
                return self._graded(fn, arg)
        return self._graded(fn, arg)

    def _graded(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        if self.inference:
            with self.torch.inference_mode():
                return fn(arg)
        with self.torch.set_grad_enabled(self.grad):
            return fn(arg)


class InContext:
    """A call that needs the device's context current on its thread (a compute that
    launches through the driver): ``make_current()`` first (cheap once it is)."""

    def __init__(self, make_current: Callable[[], Any]):
        self.make_current = make_current

    def call(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        self.make_current()
        return fn(arg)


class ComputeWorkers:
    """Daemon threads that each run jobs from their own queue, in order. A job is
    ``(fn, arg, modes, results, sent)``: ``modes.call(fn, arg)`` runs, and ``(True,
    value, seconds in the call, seconds since sent)``, or ``(False, exception, ...)``,
    goes on the job's ``results`` queue (``sent``: ``time.perf_counter()`` when the job
    was put, one clock for every thread)."""

    def __init__(self) -> None:
        self._jobs: list[queue.SimpleQueue] = []
        self._lock = threading.Lock()

    def ensure(self, n: int) -> list[queue.SimpleQueue]:
        """The job queues of the first ``n`` threads (started when first needed)."""
        with self._lock:
            while len(self._jobs) < n:
                jobs: queue.SimpleQueue = queue.SimpleQueue()
                threading.Thread(target=_serve, args=(jobs,), name=f"fullpipe-compute-{len(self._jobs)}",
                                 daemon=True).start()
                self._jobs.append(jobs)
            return self._jobs[:n]

    @property
    def threads(self) -> int:
        return len(self._jobs)


def _serve(jobs: queue.SimpleQueue) -> None:
    perf = time.perf_counter
    while True:
        fn, arg, modes, results, sent = jobs.get()
        t0 = perf()
        try:
            value, ok = modes.call(fn, arg), True
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that sent the job
            value, ok = exc, False
        t1 = perf()
        out = (ok, value, t1 - t0, t1 - sent)
        fn = arg = modes = None  # (not kept alive until the next job)
        results.put(out)
        out = results = None


_WORKERS = ComputeWorkers()


def shared_workers() -> ComputeWorkers:
    return _WORKERS


class ComputeCalls:
    """One run's calls on ``threads`` workers: :meth:`send` the call of each batch in
    batch order, :meth:`take` the results back in the same order. ``outstanding`` is how
    many were sent and not yet taken; ``durations`` the host seconds of each call taken,
    as its worker measured it, and ``latencies`` from its sending to its end (with the
    hand-off, and the wait for the GIL of a worker that did not have it)."""

    def __init__(self, threads: int, modes: Any, workers: ComputeWorkers | None = None):
        self.threads = threads
        self.modes = modes
        self._jobs = (workers or _WORKERS).ensure(threads)
        self._results: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(threads)]
        self._sent = self._taken = 0
        self.durations: list[float] = []
        self.latencies: list[float] = []

    @property
    def outstanding(self) -> int:
        return self._sent - self._taken

    def send(self, fn: Callable[[Any], Any], arg: Any) -> None:
        k = self._sent % self.threads
        self._jobs[k].put((fn, arg, self.modes, self._results[k], time.perf_counter()))
        self._sent += 1

    def take(self) -> Any:
        """The oldest call's value (waits for it), or its exception raised here."""
        ok, value, seconds, latency = self._results[self._taken % self.threads].get()
        self._taken += 1
        self.durations.append(seconds)
        self.latencies.append(latency)
        if not ok:
            raise value
        return value

    def drain(self) -> None:
        """Wait for every call still out and drop what they returned or raised (after a
        failure: nothing may still enqueue work when the run cleans up)."""
        while self.outstanding:
            try:
                self.take()
            except BaseException:  # noqa: BLE001 - the run is already failing with the first error
                pass

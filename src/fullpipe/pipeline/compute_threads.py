"""Calling a host-bound PyTorch compute from several host threads at once
(``StreamPipeline(compute_threads=N)``).

A PyTorch model's Python call can take longer on the host than its kernels take on the
GPU: an encoder layer over a few thousand tokens launches for 400-1200 us on an H100 host
for about 500 us of GPU work, a smaller layer for the same host time and a fraction of
the GPU's. No layout of streams helps then: the GPU waits for the host. PyTorch releases
the GIL inside each operator (its argument parsing holds it; dispatch and the kernel
launches do not), so threads that call the model on different streams launch more per
second than one, when the call's time is mostly inside operators: encoder layers (one
fused operator each) whose call was slower than their GPU work went from 0.67-0.88x to
0.99-1.24x compute alone on 3 threads, and the bench's variable-length workload from
0.86x to 1.25x on a host where compute alone was host-bound too (H100, session 18,
``.dev/p107.py``). Calls that are mostly Python (chains of small operators) take turns on
the GIL and ran 0.6-1.1x as fast on 2 threads, 0.6-0.9x on 3.
``torch.nn.DataParallel`` calls modules from threads the same way.

Where it is on by default (``compute_threads="auto"``, session 35): a long list of small
batches (``run_batches``) measures the calls on ``AUTO_THREADS`` threads as a third way to
run, beside plain and pipelined, when a measured pipelined run's calls took at least half
its time, and keeps them unless they were slower (list_paths.py): the bench's
encoder went from 0.67-0.72x to 0.94-1.08x compute alone on slow H200 hosts, and a chain of
small operators and a small MLP had threads measured and turned down. A long list of larger
batches has the same trial without plain (session 36: a resnet18 over lists of 1-16 images,
1.48x on three threads). Whole runs are
timed, after a warm-up run on the threads that is not counted: the lesson of session 18,
whose automatic choice was built, measured, and taken out. Threads' own costs hid their
gain in its first runs: PyTorch caches cuDNN attention plans per thread, so every thread
builds each batch shape's plan (tens of ms each; a 2-layer encoder over 92 shapes ran
4.3 s against 0.17 s on one thread until the threads had seen them; the bench's encoder,
96 shapes, 5.6 s on three threads after 7.7 s on the first, session 35); convolution plans
too (mobilenet_v3_large's 410-image shape, seen on one thread, cost 1.9 s again on another;
convnext_tiny's 0.7 s; an H200, session 47, p300). A trial comparing
call times on the threads with those on the enqueueing thread turned an encoder down (its
threads were cold); one counting how many threads ran at once (CPU time over wall time)
kept them for chains of small operators, whose threads kept running on the CPU without
calling any faster.

:class:`ComputeWorkers` are a few daemon threads kept for the whole process, not per
pipeline, so that their per-thread caches stay warm for the next pipeline. A run's
:class:`ComputeCalls` sends the calls of its batches to them in turn (batch ``k`` to
thread ``k % threads``) and takes each result back in the order it sent them, on queues
of its own: pipelines in other threads may use the same workers at the same time.

PyTorch's autograd and autocast modes are per thread: each call of a tensor function runs
in the modes of the thread that started the run (:class:`TorchModes`), as it would have on
that thread. Other per-thread state is not carried over (a ``with torch.device(...)``
around the run, a TorchFunctionMode); a worker's current PyTorch stream is set by each call
and left as the last call set it.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

MAX_THREADS = 8
AUTO = "auto"
AUTO_THREADS = 3  # the threads a list's trial measures (at most its streams); 3 gained most in session 18


def check_compute_threads(value: Any, streams: int) -> int:
    """An int in [1, streams] (a batch's call must be back before the next batch of its
    stream is called: at most one call per stream at a time), or 0 for ``"auto"``."""
    if value == AUTO and isinstance(value, str):
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"compute_threads must be 'auto' or an int >= 1, got {value!r}")
    if value > min(streams, MAX_THREADS):
        raise ValueError(f"compute_threads={value} is more than {'streams' if streams < MAX_THREADS else 'the most'} "
                         f"({min(streams, MAX_THREADS)}): each thread's call needs a stream of its own "
                         "(raise streams=, or lower compute_threads)")
    return value


def auto_threads(streams: int) -> int:
    """How many threads ``compute_threads="auto"`` may measure a list's calls on (0: none,
    with one stream)."""
    return min(AUTO_THREADS, streams) if streams >= 2 else 0


def torch_state_stays_here(torch: Any) -> bool:
    """Does the calling thread hold PyTorch state that a call on another thread would not
    see? A torch function mode (``with torch.device(...)``, ``torch.set_default_device``,
    a user's mode): the automatic choice then leaves the calls here. (Autograd and autocast
    go along, TorchModes; the current device follows each call's stream.)"""
    try:
        return bool(torch._C._len_torch_function_stack())
    except Exception:  # noqa: BLE001 - another PyTorch's private API: assume it does
        return True


class TorchModes:
    """The calling thread's autograd and autocast modes, to run a call in on another
    thread (both are thread-local in PyTorch), with the device's context current there
    (``make_current``; PyTorch's cuBLAS otherwise warns, once per thread, that it had to
    set the primary context itself: session 35)."""

    def __init__(self, torch: Any, make_current: Callable[[], Any] = lambda: None):
        self.torch = torch
        self.make_current = make_current
        self.inference = torch.is_inference_mode_enabled()
        self.grad = torch.is_grad_enabled()
        self.autocast = torch.is_autocast_enabled("cuda")
        self.autocast_dtype = torch.get_autocast_dtype("cuda") if self.autocast else None

    def call(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        torch = self.torch
        self.make_current()
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
    ``(fn, arg, modes, results)``: ``modes.call(fn, arg)`` runs, and ``(True, value)``
    or ``(False, exception)`` goes on the job's ``results`` queue."""

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


_ON_WORKER = threading.local()
_DRAINED = (True, None)  # what a worker answers to drain's mark (this very object)


def on_compute_thread() -> bool:
    """Whether the calling thread is one of the compute threads."""
    return getattr(_ON_WORKER, "yes", False)


def _serve(jobs: queue.SimpleQueue) -> None:
    _ON_WORKER.yes = True
    while True:
        fn, arg, modes, results = jobs.get()
        if fn is None:  # ComputeCalls.drain's mark: every job sent before it is done
            results.put(_DRAINED)
            continue
        try:
            out = (True, modes.call(fn, arg))
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that sent the job
            out = (False, exc)
        fn = arg = modes = None  # (not kept alive until the next job)
        results.put(out)
        out = results = None


_WORKERS = ComputeWorkers()  # the process's: every pipeline's calls on threads go to them
_RAISED_BY_A_CALL = "_fullpipe_raised_by_a_call"


def raised_by_a_call(exc: BaseException) -> bool:
    """Did a compute call on a compute thread raise ``exc`` (and not fullpipe's own run
    around the calls)?"""
    return bool(getattr(exc, _RAISED_BY_A_CALL, False))


class ComputeCalls:
    """One run's calls on ``threads`` workers: :meth:`send` the call of each batch in
    batch order, :meth:`take` the results back in the same order. ``outstanding`` is how
    many were sent and not yet taken."""

    def __init__(self, threads: int, modes: Any, workers: ComputeWorkers | None = None):
        self.threads = threads
        self.modes = modes
        self._jobs = (workers or _WORKERS).ensure(threads)
        self._results: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(threads)]
        self._sent = self._taken = 0

    @property
    def outstanding(self) -> int:
        return self._sent - self._taken

    def send(self, fn: Callable[[Any], Any], arg: Any) -> None:
        k = self._sent % self.threads
        self._jobs[k].put((fn, arg, self.modes, self._results[k]))
        self._sent += 1

    def take(self) -> Any:
        """The oldest call's value (waits for it), or its exception raised here, marked as
        a call's (:func:`raised_by_a_call`)."""
        ok, value = self._results[self._taken % self.threads].get()
        self._taken += 1
        if not ok:
            try:
                setattr(value, _RAISED_BY_A_CALL, True)
            except Exception:  # noqa: BLE001 - an exception type without attributes: unmarked
                pass
            raise value
        return value

    def drain(self) -> None:
        """Wait for every call still out and drop what they returned or raised (after a
        failure: nothing may still enqueue work when the run cleans up). A mark goes to each
        worker behind this run's calls and is waited for, rather than a count of calls: a
        Ctrl-C inside :meth:`take` may have lost one."""
        for k in range(self.threads):
            self._jobs[k].put((None, None, None, self._results[k]))
        for k in range(self.threads):
            while self._results[k].get() is not _DRAINED:
                pass
        self._sent = self._taken = 0

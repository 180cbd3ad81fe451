"""fullpipe's calibrated test workload: the per-batch compute of the pipeline, its
experiments and tests, and of the tracer's tests.

:class:`MixKernel` is a compute callable for :class:`StreamPipeline`:
``y = mix^rounds(x)`` element-wise on uint32 (workload.cu). Its memory traffic is
fixed and its time grows linearly with ``rounds``, so an experiment can set the
compute time of a batch to match its copy time (balanced), or make it much
shorter (copy-bound) or longer (compute-bound), with :func:`calibrate_rounds`
measuring on the same device in the same run. :func:`reference` reproduces every
bit with NumPy.

:class:`TracedPipeline` runs the same kernel in a small hand-built H2D -> kernel ->
D2H pipeline (fullpipe.cuda primitives only, every operation stamped for the
tracer): what the tracer's tests and ``scripts/record-test-traces`` trace.
"""

from __future__ import annotations

import ctypes
import math
import threading
import weakref
from typing import Any

import numpy as np

from ..cuda.events import elapsed_ms, join, record, wait
from ..cuda.memory import copy_d2h, copy_h2d, pinned_empty
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream
from ..cuda.timing import median, time_on_stream
from ..trace import name_stream, nvtx, stamp

KERNEL_NAME = "workload_mix"
LCG_MUL = np.uint32(1664525)
LCG_ADD = np.uint32(1013904223)
BLOCK = 256


def reference(x: np.ndarray, rounds: int) -> np.ndarray:
    """What workload_mix computes, in NumPy (uint32 arithmetic wraps mod 2^32)."""
    v = np.array(x, dtype=np.uint32, copy=True)
    for _ in range(rounds):
        v *= LCG_MUL
        v += LCG_ADD
        v ^= v >> np.uint32(13)
    return v


class MixKernel:
    """``compute(stream, x, y)``: y = mix^rounds(x) on uint32 device arrays.

    ``rounds`` may be changed between runs (it is read at each launch)."""

    input_dtype = np.dtype(np.uint32)

    def __init__(self, device: Any, rounds: int = 1, blocks_per_sm: int = 8):
        from ..cuda.compiler import compile_package_kernel
        from ..cuda.hotpath import HotPath, PackedArgs, handle_int

        if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or not 0 <= rounds < 2**31:
            raise ValueError(f"rounds must be an int in [0, 2**31), got {rounds!r}")
        self.rounds = int(rounds)
        self.device = device
        self.kernel = compile_package_kernel("pipeline/workload.cu", device=device).kernel(KERNEL_NAME)
        self.max_blocks = device.facts.sm_count * blocks_per_sm
        # The launch is on the pipeline's per-batch hot path: a ctypes cuLaunchKernel
        # with arguments packed once (see cuda/hotpath.py), not cuda.core's launch().
        self._hot = HotPath()
        self._handle_int = handle_int
        self._kernel_handle = handle_int(self.kernel.handle)
        self._args = PackedArgs([ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32])
        self._lock = threading.Lock()  # the packed arguments are one set per object
        # Per-call work done once per (x, y) pair and per stream: a pipeline hands each
        # lane the same device views batch after batch (protocol.py), and has few streams.
        # (Weak references to the arrays: the cache must not keep a caller's device memory
        # alive. A stream is held: at most 16, and its handle must stay that stream's.)
        self._checked: dict[int, tuple[Any, Any, int, int]] = {}  # id(x) -> (ref x, ref y, n, grid)
        self._streams: dict[int, tuple[Any, int]] = {}  # id(stream) -> (stream, handle)

    def grid_for(self, n: int) -> int:
        return max(1, min(self.max_blocks, math.ceil(max(n // 4, 1) / BLOCK)))

    def _check(self, x: Any, y: Any) -> tuple[Any, Any, int, int]:
        if y is None:
            raise ValueError("MixKernel writes an output: use a pipeline with output='same'")
        if x.dtype != self.input_dtype or y.dtype != self.input_dtype or x.size != y.size:
            raise ValueError(f"MixKernel takes uint32 x and y of one size, got {x!r} and {y!r}")
        if x.ptr % 16 or y.ptr % 16:
            raise ValueError("MixKernel needs 16-byte aligned device arrays (uint4 loads)")
        if len(self._checked) >= 16:
            self._checked.clear()
        got = self._checked[id(x)] = (_ref(x), _ref(y), x.size, self.grid_for(x.size))
        return got

    def __call__(self, stream: Any, x: Any, y: Any) -> None:
        got = self._checked.get(id(x))
        if got is None or got[0]() is not x or got[1]() is not y:
            got = self._check(x, y)
        if not 0 <= self.rounds < 2**31:
            raise ValueError(f"rounds must be an int in [0, 2**31), got {self.rounds!r}")
        sh = self._streams.get(id(stream))
        if sh is None or sh[0] is not stream:
            if len(self._streams) >= 16:
                self._streams.clear()
            sh = self._streams[id(stream)] = (stream, self._handle_int(stream))
        with self._lock:
            self._args.set(x.ptr, y.ptr, got[2], self.rounds)
            self._hot.launch(self._kernel_handle, got[3], BLOCK, self._args, sh[1])


def _ref(obj: Any) -> Any:
    """A weak reference to ``obj``, or a callable that returns None when it takes none:
    such an array is then checked again at every call."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: None


def time_kernel_ms(kernel: MixKernel, stream: Any, x: Any, y: Any, repeat: int = 5) -> float:
    """Median milliseconds of one launch on ``stream`` (events on that stream)."""
    return median(time_on_stream(lambda: kernel(stream, x, y), stream, warmup=1, repeat=repeat))


def calibrate_rounds(kernel: MixKernel, stream: Any, x: Any, y: Any, target_ms: float,
                     max_rounds: int = 1 << 16) -> tuple[int, float]:
    """Set ``kernel.rounds`` so that one launch on (x, y) takes about ``target_ms``;
    returns (rounds, measured ms). Time is linear in rounds: fit through two points,
    then refine."""
    kernel.rounds = 0
    t0 = time_kernel_ms(kernel, stream, x, y)
    kernel.rounds = 64
    t1 = time_kernel_ms(kernel, stream, x, y)
    per_round = max((t1 - t0) / 64, 1e-9)
    rounds = int(min(max_rounds, max(0, round((target_ms - t0) / per_round))))
    for attempt in range(4):
        kernel.rounds = rounds
        t = time_kernel_ms(kernel, stream, x, y)
        if rounds == 0 or attempt == 3 or abs(t - target_ms) <= 0.02 * target_ms:
            break
        per_round = max((t - t0) / rounds, 1e-9)
        rounds = int(min(max_rounds, max(0, round((target_ms - t0) / per_round))))
    return rounds, t


class TracedPipeline:
    """Pinned uint32 input/output batches, one device (in, out) buffer pair per stream,
    each batch H2D -> MixKernel -> D2H on one stream (serial) or round-robin over
    several (overlapped). Every operation is wrapped in :func:`fullpipe.trace.stamp`
    with the batch index as tag: CUPTI records get their batch, and the event fallback
    has ranges to show.

        wl = TracedPipeline(device, batches=12, batch_bytes=16 << 20)
        wl.calibrate()           # compute as long as one batch's H2D: balanced
        wl.run(streams=1)        # serial: no overlap possible
        wl.run(streams=3)        # overlapped
        wl.verify()
        wl.close()
    """

    def __init__(self, device: Any, *, batches: int = 12, batch_bytes: int = 16 << 20, max_streams: int = 3,
                 seed: int = 0):
        if batches < 1 or max_streams < 1:
            raise ValueError("batches and max_streams must be >= 1")
        if batch_bytes < 4096 or batch_bytes % 16:
            raise ValueError("batch_bytes must be a multiple of 16 and at least 4096")
        self.device, self.batches, self.max_streams = device, batches, max_streams
        self.n = batch_bytes // 4
        self.batch_bytes = self.n * 4
        self.kernel = MixKernel(device, rounds=1)
        self.grid = self.kernel.grid_for(self.n)
        self.streams = [create_stream(device) for _ in range(max_streams)]
        self.host_in = pinned_empty((batches, self.n), np.uint32)
        self.host_in[:] = np.random.default_rng(seed).integers(0, 2**32, self.host_in.shape, dtype=np.uint32)
        self.host_out = pinned_empty((batches, self.n), np.uint32)
        self.reset_output()
        self.pool = DevicePool(device)
        s0 = self.streams[0]
        self.d_in = [self.pool.empty(self.n, np.uint32, s0) for _ in range(max_streams)]
        self.d_out = [self.pool.empty(self.n, np.uint32, s0) for _ in range(max_streams)]
        s0.sync()

    @property
    def rounds(self) -> int:
        return self.kernel.rounds

    # ------------------------------------------------------------------ pieces
    def _h2d(self, i: int, j: int, stream: Any) -> None:
        with stamp("h2d", stream, tag=i, nbytes=self.batch_bytes):
            copy_h2d(self.d_in[j].ptr, self.host_in[i], stream)

    def _kernel(self, i: int, j: int, stream: Any) -> None:
        with stamp("kernel", stream, tag=i, name=KERNEL_NAME):
            self.kernel(stream, self.d_in[j], self.d_out[j])

    def _d2h(self, i: int, j: int, stream: Any) -> None:
        with stamp("d2h", stream, tag=i, nbytes=self.batch_bytes):
            copy_d2h(self.host_out[i], self.d_out[j].ptr, stream)

    # ------------------------------------------------------------------ public
    def calibrate(self, *, target_ratio: float = 1.0) -> dict[str, float]:
        """Set the kernel's rounds so that it takes ``target_ratio`` x the H2D copy of
        one batch. Returns the measured times (ms) and the rounds."""
        s = self.streams[0]
        with nvtx.range("traced workload: calibrate"):
            t_h2d = median(time_on_stream(lambda: self._h2d(0, 0, s), s, warmup=1, repeat=5))
            t_d2h = median(time_on_stream(lambda: self._d2h(0, 0, s), s, warmup=1, repeat=5))
            rounds, t_k = calibrate_rounds(self.kernel, s, self.d_in[0], self.d_out[0], target_ratio * t_h2d)
        self.reset_output()
        return {"h2d_ms": t_h2d, "d2h_ms": t_d2h, "kernel_ms": t_k, "rounds": float(rounds)}

    def issue(self, streams: int) -> None:
        """Enqueue every batch, round-robin over the first ``streams`` streams; each
        stream runs its batches' H2D, kernel and D2H in order, on its own buffers."""
        if not 1 <= streams <= self.max_streams:
            raise ValueError(f"streams must be 1..{self.max_streams}, got {streams}")
        for k in range(streams):
            name_stream(self.streams[k], f"pipeline stream {k}")
        for i in range(self.batches):
            j = i % streams
            s = self.streams[j]
            self._h2d(i, j, s)
            self._kernel(i, j, s)
            self._d2h(i, j, s)

    def run(self, streams: int) -> float:
        """Issue all batches and wait; the elapsed GPU time in ms (events on stream 0,
        after the other streams joined it)."""
        used = self.streams[:streams]
        s0 = used[0]
        with nvtx.range(f"traced workload: run on {streams} stream(s)"):
            start = record(s0, timing=True)
            for s in used[1:]:
                wait(s, start)
            self.issue(streams)
            join(s0, *used[1:])
            end = record(s0, timing=True)
            end.sync()
        return elapsed_ms(start, end)

    def known_pattern(self) -> None:
        """Upload batch 0 on stream 0; on stream 1, wait for the upload's event and run
        the kernel on it. The kernel must start after the copy ends."""
        if self.max_streams < 2:
            raise ValueError("the known pattern needs max_streams >= 2")
        s1, s2 = self.streams[0], self.streams[1]
        name_stream(s1, "upload")
        name_stream(s2, "compute")
        self._h2d(0, 0, s1)
        uploaded = record(s1)
        wait(s2, uploaded)
        self._kernel(0, 0, s2)
        s2.sync()

    def verify(self, samples: int = 4096, seed: int = 1) -> None:
        """Check sampled outputs of every batch bit for bit against :func:`reference`;
        raise AssertionError (outputs start poisoned: a batch not computed fails)."""
        rng = np.random.default_rng(seed)
        for i in range(self.batches):
            idx = rng.integers(0, self.n, samples)
            got = self.host_out[i, idx]
            want = reference(self.host_in[i, idx], self.rounds)
            bad = int(np.count_nonzero(got != want))
            if bad:
                raise AssertionError(f"batch {i}: {bad} of {samples} sampled outputs are wrong "
                                     f"(rounds={self.rounds}; e.g. got {got[0]}, want {want[0]})")

    def reset_output(self) -> None:
        self.host_out.fill(0xDEADBEEF)

    def close(self) -> None:
        s0 = self.streams[0]
        for s in self.streams:
            s.sync()
        for d in self.d_in + self.d_out:
            self.pool.free_array(d, s0)
        self.d_in, self.d_out = [], []
        s0.sync()
        self.pool.close()

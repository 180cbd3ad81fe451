"""A small self-contained pipeline to trace: batches go H2D -> kernel -> D2H, on one
stream (serial) or on several (overlapped), built only from fullpipe.cuda
primitives (pinned arrays, DevicePool, events, a kernel from workload.cu).

``calibrate()`` sets the kernel's loop count so that one batch's compute takes
about as long as its H2D copy: a balanced pipeline, where three streams can keep
the H2D engine, the SMs and the D2H engine busy at the same time.

Every operation is wrapped in :func:`fullpipe.trace.stamp`, with the batch index as
tag: CUPTI records get their batch, and the event fallback has ranges to show.

    wl = TracedPipeline(device, batches=12, batch_bytes=16 << 20)
    wl.calibrate()
    wl.run(streams=1)        # serial: no overlap possible
    wl.run(streams=3)        # overlapped
    wl.verify()
    wl.close()
"""

from __future__ import annotations

import numpy as np

from ..cuda import compiler
from ..cuda.events import elapsed_ms, join, record, wait
from ..cuda.launch import launch
from ..cuda.memory import copy_d2h, copy_h2d, pinned_empty
from ..cuda.pool import DevicePool
from ..cuda.streams import create_stream
from . import nvtx
from .capture import name_stream, stamp

KERNEL_SOURCE = "trace/workload.cu"
KERNEL_NAME = "fp_trace_work"
BLOCK = 256
BLOCKS_PER_SM = 8


def expected(x0: np.ndarray, iters: int) -> np.ndarray:
    """What the kernel computes, in closed form (float64)."""
    return 1.0 + (x0.astype(np.float64) - 1.0) * 0.999 ** iters


class TracedPipeline:
    """Pinned input/output batches, one device (in, out) buffer pair per stream."""

    def __init__(self, device, *, batches: int = 12, batch_bytes: int = 16 << 20, max_streams: int = 3,
                 seed: int = 0):
        if batches < 1 or max_streams < 1:
            raise ValueError("batches and max_streams must be >= 1")
        if batch_bytes < 4096 or batch_bytes % 4:
            raise ValueError("batch_bytes must be a multiple of 4 and at least 4096")
        self.device = device
        self.batches = batches
        self.n = batch_bytes // 4
        self.batch_bytes = self.n * 4
        self.iters = 1
        self.max_streams = max_streams
        self.kernel = compiler.compile_package_kernel(KERNEL_SOURCE, device=device).kernel(KERNEL_NAME)
        self.grid = device.facts.sm_count * BLOCKS_PER_SM
        self.streams = [create_stream(device) for _ in range(max_streams)]
        rng = np.random.default_rng(seed)
        self.host_in = pinned_empty((batches, self.n), np.float32)
        for i in range(batches):
            self.host_in[i] = rng.random(self.n, dtype=np.float32)
        self.host_out = pinned_empty((batches, self.n), np.float32)
        self.host_out.fill(np.nan)  # poisoned: a batch that was not computed fails verify()
        self.pool = DevicePool(device)
        s0 = self.streams[0]
        self.d_in = [self.pool.allocate(self.batch_bytes, s0) for _ in range(max_streams)]
        self.d_out = [self.pool.allocate(self.batch_bytes, s0) for _ in range(max_streams)]
        s0.sync()

    # ------------------------------------------------------------------ pieces
    def _h2d(self, i: int, j: int, stream) -> None:
        with stamp("h2d", stream, tag=i, nbytes=self.batch_bytes):
            copy_h2d(int(self.d_in[j].handle), self.host_in[i], stream)

    def _kernel(self, i: int, j: int, stream) -> None:
        with stamp("kernel", stream, tag=i, name=KERNEL_NAME):
            launch(stream, self.kernel, self.grid, BLOCK, np.uint64(int(self.d_in[j].handle)),
                   np.uint64(int(self.d_out[j].handle)), np.int64(self.n), np.int32(self.iters),
                   device_index=getattr(self.device, "index", 0))

    def _d2h(self, i: int, j: int, stream) -> None:
        with stamp("d2h", stream, tag=i, nbytes=self.batch_bytes):
            copy_d2h(self.host_out[i], int(self.d_out[j].handle), stream)

    def _time(self, fn, stream, repeat: int = 5) -> float:
        times = []
        for _ in range(repeat + 1):  # the first is a warm-up
            e0 = record(stream, timing=True)
            fn()
            e1 = record(stream, timing=True)
            e1.sync()
            times.append(elapsed_ms(e0, e1))
        return float(np.median(times[1:]))

    # ------------------------------------------------------------------ public
    def calibrate(self, *, target_ratio: float = 1.0) -> dict[str, float]:
        """Pick ``iters`` so that the kernel takes ``target_ratio`` x the H2D copy of one
        batch. Returns the measured times (ms)."""
        s = self.streams[0]
        with nvtx.range("trace workload: calibrate"):
            t_h2d = self._time(lambda: self._h2d(0, 0, s), s)
            t_d2h = self._time(lambda: self._d2h(0, 0, s), s)
            self.iters = 256
            for _ in range(3):  # small loop counts are memory-bound: refine from a real measurement
                t_k = self._time(lambda: self._kernel(0, 0, s), s)
                self.iters = int(min(max(round(self.iters * target_ratio * t_h2d / t_k), 1), 1 << 22))
            t_k = self._time(lambda: self._kernel(0, 0, s), s)
        self.host_out.fill(np.nan)
        return {"h2d_ms": t_h2d, "d2h_ms": t_d2h, "kernel_ms": t_k, "iters": float(self.iters)}

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
        with nvtx.range(f"trace workload: run on {streams} stream(s)"):
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
        """Check sampled outputs of every batch against the closed form; raise AssertionError."""
        rng = np.random.default_rng(seed)
        for i in range(self.batches):
            idx = rng.integers(0, self.n, samples)
            got = self.host_out[i, idx].astype(np.float64)
            want = expected(self.host_in[i, idx], self.iters)
            if not np.all(np.abs(got - want) <= 1e-3):
                bad = int(np.sum(~(np.abs(got - want) <= 1e-3)))
                raise AssertionError(f"batch {i}: {bad} of {samples} sampled outputs are wrong "
                                     f"(iters={self.iters}; e.g. got {got[0]}, want {want[0]})")

    def reset_output(self) -> None:
        self.host_out.fill(np.nan)

    def close(self) -> None:
        s0 = self.streams[0]
        for s in self.streams:
            s.sync()
        for buf in self.d_in + self.d_out:
            self.pool.free(buf, s0)
        self.d_in, self.d_out = [], []
        s0.sync()
        self.pool.close()
